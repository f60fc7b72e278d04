#include "nodes/spec.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace dw {

namespace {
struct TypeName {
  ParamType type;
  const char* name;
};
constexpr TypeName kTypeNames[] = {
    {ParamType::Float, "float"},           {ParamType::Int, "int"},
    {ParamType::Bool, "bool"},             {ParamType::String, "string"},
    {ParamType::Tensor, "tensor"},         {ParamType::Graph, "graph"},
    {ParamType::SparseTensor, "sparse_tensor"}, {ParamType::TypeProto, "type_proto"},
    {ParamType::Floats, "float[]"},        {ParamType::Ints, "int[]"},
    {ParamType::Strings, "string[]"},      {ParamType::Tensors, "tensor[]"},
    {ParamType::Graphs, "graph[]"},        {ParamType::SparseTensors, "sparse_tensor[]"},
    {ParamType::TypeProtos, "type_proto[]"},
};

// Parameters are float32 in ONNX: print the shortest text that reads back as the same float
// (1e-05, not 9.99999975e-06), falling back to full double precision for true doubles.
std::string formatDouble(double v) {
  const bool isFloat = std::isfinite(v) && static_cast<double>(static_cast<float>(v)) == v;
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream os;
    os.precision(precision);
    os << v;
    const double back = std::strtod(os.str().c_str(), nullptr);
    if (isFloat ? static_cast<float>(back) == static_cast<float>(v) : back == v) return os.str();
  }
  std::ostringstream os;
  os << v;  // nan, inf
  return os.str();
}
}  // namespace

const char* paramTypeName(ParamType t) {
  for (const auto& tn : kTypeNames)
    if (tn.type == t) return tn.name;
  return "?";
}

std::optional<ParamType> paramTypeFromName(const std::string& name) {
  for (const auto& tn : kTypeNames)
    if (name == tn.name) return tn.type;
  return std::nullopt;
}

bool isProtoParam(ParamType t) {
  switch (t) {
    case ParamType::Tensor:
    case ParamType::Graph:
    case ParamType::SparseTensor:
    case ParamType::TypeProto:
    case ParamType::Tensors:
    case ParamType::Graphs:
    case ParamType::SparseTensors:
    case ParamType::TypeProtos:
      return true;
    default:
      return false;
  }
}

double Param::asFloat() const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  return static_cast<double>(std::get<int64_t>(value));
}

int64_t Param::asInt() const {
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  return static_cast<int64_t>(std::llround(std::get<double>(value)));
}

std::string Param::toDisplay() const {
  std::ostringstream os;
  switch (type) {
    case ParamType::Float:
      return formatDouble(asFloat());
    case ParamType::Int:
      return std::to_string(asInt());
    case ParamType::Bool:
      return asBool() ? "true" : "false";
    case ParamType::String:
      return "\"" + asString() + "\"";
    case ParamType::Ints: {
      os << "[";
      const auto& v = asInts();
      for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
      os << "]";
      return os.str();
    }
    case ParamType::Floats: {
      os << "[";
      const auto& v = asFloats();
      for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << formatDouble(v[i]);
      os << "]";
      return os.str();
    }
    case ParamType::Strings: {
      os << "[";
      const auto& v = asStrings();
      for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << "\"" << v[i] << "\"";
      os << "]";
      return os.str();
    }
    default:
      return std::string("<") + paramTypeName(type) + ">";
  }
}

const ParamSpec* NodeSpec::param(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

const TypeConstraint* NodeSpec::constraint(const std::string& name) const {
  for (const auto& c : typeConstraints)
    if (c.name == name) return &c;
  return nullptr;
}

namespace {
const PortSpec* portAt(const std::vector<PortSpec>& ports, int index) {
  if (index < 0 || ports.empty()) return nullptr;
  if (index < static_cast<int>(ports.size())) return &ports[index];
  return ports.back().option == PortOption::Variadic ? &ports.back() : nullptr;
}

std::vector<std::string> typesOf(const NodeSpec& spec, const PortSpec* port) {
  if (!port) return {};
  if (!port->allowedTypes.empty()) return port->allowedTypes;
  if (const auto* c = spec.constraint(port->typeStr)) return c->allowedTypes;
  return {};
}
}  // namespace

const PortSpec* NodeSpec::inputPort(int index) const { return portAt(inputs, index); }
const PortSpec* NodeSpec::outputPort(int index) const { return portAt(outputs, index); }
std::vector<std::string> NodeSpec::inputTypes(int index) const {
  return typesOf(*this, inputPort(index));
}
std::vector<std::string> NodeSpec::outputTypes(int index) const {
  return typesOf(*this, outputPort(index));
}

const std::vector<CommonField>& commonFields() {
  static const std::vector<CommonField> kFields = {
      {"Graphs in", "cluster", "The model this node joins. Unwired, the node joins the canvas's "
                               "default model.", ""},
      {"Graphs out", "cluster", "The model, with this node added, for the next node to join.", ""},
      {"name", "string", "Optional name of the node; it also prefixes the default names of the "
                         "node's output tensors.", ""},
      {"specified_outputs_name", "string[]",
       "Custom names for the node's output tensors, in output order. An empty entry keeps the "
       "default name.", "[]"},
      {"lda coeff", "float",
       "Coefficient by which the loss derivative is multiplied before it is sent back to the "
       "node's inputs during the backward pass.", "1"},
  };
  return kFields;
}

}  // namespace dw
