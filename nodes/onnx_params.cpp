#include "nodes/onnx_params.h"

#include <charconv>
#include <cstdlib>

#include <onnx/defs/schema.h>

namespace dw {

using onnx::AttributeProto;

ParamType paramTypeFromOnnx(int t) {
  switch (t) {
    case AttributeProto::FLOAT:
      return ParamType::Float;
    case AttributeProto::INT:
      return ParamType::Int;
    case AttributeProto::STRING:
      return ParamType::String;
    case AttributeProto::TENSOR:
      return ParamType::Tensor;
    case AttributeProto::GRAPH:
      return ParamType::Graph;
    case AttributeProto::SPARSE_TENSOR:
      return ParamType::SparseTensor;
    case AttributeProto::TYPE_PROTO:
      return ParamType::TypeProto;
    case AttributeProto::FLOATS:
      return ParamType::Floats;
    case AttributeProto::INTS:
      return ParamType::Ints;
    case AttributeProto::STRINGS:
      return ParamType::Strings;
    case AttributeProto::TENSORS:
      return ParamType::Tensors;
    case AttributeProto::GRAPHS:
      return ParamType::Graphs;
    case AttributeProto::SPARSE_TENSORS:
      return ParamType::SparseTensors;
    case AttributeProto::TYPE_PROTOS:
      return ParamType::TypeProtos;
    default:
      return ParamType::Int;
  }
}

int onnxTypeFromParam(ParamType t) {
  switch (t) {
    case ParamType::Float:
      return AttributeProto::FLOAT;
    case ParamType::Int:
    case ParamType::Bool:
      return AttributeProto::INT;
    case ParamType::String:
      return AttributeProto::STRING;
    case ParamType::Tensor:
      return AttributeProto::TENSOR;
    case ParamType::Graph:
      return AttributeProto::GRAPH;
    case ParamType::SparseTensor:
      return AttributeProto::SPARSE_TENSOR;
    case ParamType::TypeProto:
      return AttributeProto::TYPE_PROTO;
    case ParamType::Floats:
      return AttributeProto::FLOATS;
    case ParamType::Ints:
      return AttributeProto::INTS;
    case ParamType::Strings:
      return AttributeProto::STRINGS;
    case ParamType::Tensors:
      return AttributeProto::TENSORS;
    case ParamType::Graphs:
      return AttributeProto::GRAPHS;
    case ParamType::SparseTensors:
      return AttributeProto::SPARSE_TENSORS;
    case ParamType::TypeProtos:
      return AttributeProto::TYPE_PROTOS;
  }
  return AttributeProto::UNDEFINED;
}

int payloadType(const AttributeProto& a) {
  if (a.has_f()) return AttributeProto::FLOAT;
  if (a.has_i()) return AttributeProto::INT;
  if (a.has_s()) return AttributeProto::STRING;
  if (a.has_t()) return AttributeProto::TENSOR;
  if (a.has_g()) return AttributeProto::GRAPH;
  if (a.has_sparse_tensor()) return AttributeProto::SPARSE_TENSOR;
  if (a.has_tp()) return AttributeProto::TYPE_PROTO;
  if (a.floats_size()) return AttributeProto::FLOATS;
  if (a.ints_size()) return AttributeProto::INTS;
  if (a.strings_size()) return AttributeProto::STRINGS;
  if (a.tensors_size()) return AttributeProto::TENSORS;
  if (a.graphs_size()) return AttributeProto::GRAPHS;
  if (a.sparse_tensors_size()) return AttributeProto::SPARSE_TENSORS;
  if (a.type_protos_size()) return AttributeProto::TYPE_PROTOS;
  return AttributeProto::UNDEFINED;
}

namespace {
template <class Repeated>
std::vector<std::string> serializeAll(const Repeated& items) {
  std::vector<std::string> out;
  out.reserve(items.size());
  for (const auto& item : items) out.push_back(item.SerializeAsString());
  return out;
}

template <class Message, class Repeated>
bool parseAll(const std::vector<std::string>& bytes, Repeated* out) {
  for (const auto& b : bytes)
    if (!out->Add()->ParseFromString(b)) return false;
  return true;
}
}  // namespace

double floatAsDouble(float f) {
  // The shortest decimal that reads back as f: 1e-05 rather than 9.99999974737875e-06, which
  // the parameter panels and JSON would show as the value, and which still converts to f.
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

Result<Param> paramFromAttribute(const AttributeProto& attr, ParamType want) {
  const int t = attr.type() != AttributeProto::UNDEFINED ? attr.type() : payloadType(attr);
  if (t == AttributeProto::UNDEFINED)
    return Status::error("attribute '" + attr.name() + "' has no type and no value");
  Param p;
  p.type = paramTypeFromOnnx(t);
  switch (t) {
    case AttributeProto::FLOAT:
      p.value = floatAsDouble(attr.f());
      break;
    case AttributeProto::INT:
      p.value = attr.i();
      // ONNX spells booleans as ints, any nonzero value true.
      if (want == ParamType::Bool) p = Param::makeBool(attr.i() != 0);
      break;
    case AttributeProto::STRING:
      p.value = attr.s();
      break;
    case AttributeProto::TENSOR:
      p.value = attr.t().SerializeAsString();
      break;
    case AttributeProto::GRAPH:
      p.value = attr.g().SerializeAsString();
      break;
    case AttributeProto::SPARSE_TENSOR:
      p.value = attr.sparse_tensor().SerializeAsString();
      break;
    case AttributeProto::TYPE_PROTO:
      p.value = attr.tp().SerializeAsString();
      break;
    case AttributeProto::FLOATS: {
      std::vector<double> v;
      for (float f : attr.floats()) v.push_back(floatAsDouble(f));
      p.value = std::move(v);
      break;
    }
    case AttributeProto::INTS:
      p.value = std::vector<int64_t>(attr.ints().begin(), attr.ints().end());
      break;
    case AttributeProto::STRINGS:
      p.value = std::vector<std::string>(attr.strings().begin(), attr.strings().end());
      break;
    case AttributeProto::TENSORS:
      p.value = serializeAll(attr.tensors());
      break;
    case AttributeProto::GRAPHS:
      p.value = serializeAll(attr.graphs());
      break;
    case AttributeProto::SPARSE_TENSORS:
      p.value = serializeAll(attr.sparse_tensors());
      break;
    case AttributeProto::TYPE_PROTOS:
      p.value = serializeAll(attr.type_protos());
      break;
    default:
      return Status::error("attribute '" + attr.name() + "' has unknown type " + std::to_string(t));
  }
  if (p.type == want) return p;
  // An int where a float belongs is the same number; any other mismatch is a damaged or
  // miswritten attribute, which the node's parameter could not hold.
  if (want == ParamType::Float && p.type == ParamType::Int)
    return Param::makeFloat(static_cast<double>(attr.i()));
  if (want == ParamType::Floats && p.type == ParamType::Ints)
    return Param::makeFloats(std::vector<double>(attr.ints().begin(), attr.ints().end()));
  return Status::error("attribute '" + attr.name() + "' holds " + paramTypeName(p.type) +
                       ", where the operator takes " + paramTypeName(want));
}

AttributeProto attributeFromParam(const std::string& name, const Param& p) {
  AttributeProto a;
  a.set_name(name);
  a.set_type(static_cast<AttributeProto::AttributeType>(onnxTypeFromParam(p.type)));
  switch (p.type) {
    case ParamType::Float:
      a.set_f(static_cast<float>(p.asFloat()));
      break;
    case ParamType::Int:
    case ParamType::Bool:
      a.set_i(p.asInt());
      break;
    case ParamType::String:
      a.set_s(p.asString());
      break;
    case ParamType::Tensor:
      a.mutable_t()->ParseFromString(p.asString());
      break;
    case ParamType::Graph:
      a.mutable_g()->ParseFromString(p.asString());
      break;
    case ParamType::SparseTensor:
      a.mutable_sparse_tensor()->ParseFromString(p.asString());
      break;
    case ParamType::TypeProto:
      a.mutable_tp()->ParseFromString(p.asString());
      break;
    case ParamType::Floats:
      for (double v : p.asFloats()) a.add_floats(static_cast<float>(v));
      break;
    case ParamType::Ints:
      for (int64_t v : p.asInts()) a.add_ints(v);
      break;
    case ParamType::Strings:
      for (const auto& v : p.asStrings()) a.add_strings(v);
      break;
    case ParamType::Tensors:
      parseAll<onnx::TensorProto>(p.asStrings(), a.mutable_tensors());
      break;
    case ParamType::Graphs:
      parseAll<onnx::GraphProto>(p.asStrings(), a.mutable_graphs());
      break;
    case ParamType::SparseTensors:
      parseAll<onnx::SparseTensorProto>(p.asStrings(), a.mutable_sparse_tensors());
      break;
    case ParamType::TypeProtos:
      parseAll<onnx::TypeProto>(p.asStrings(), a.mutable_type_protos());
      break;
  }
  return a;
}

}  // namespace dw
