// NodeSpec: the description of one node type, read by the palette, parameter panels, validation,
// serialization, docs and kernels. Specs are produced by domain providers (see catalogue.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "nodes/status.h"

namespace dw {

class LoweringBuilder;
// Lowers a composite node to standard ONNX through the builder (see nodes/lowering.h).
using LowerFn = Status (*)(LoweringBuilder&);
// A metric in two parts: statistics that add up across batches, and the value computed from
// their sums. Eval Steps sum the statistics of each batch; export applies the finalize to one
// batch's statistics.
using MetricStatsFn = Result<std::vector<std::string>> (*)(LoweringBuilder&);
using MetricFinalizeFn = Status (*)(LoweringBuilder&, const std::vector<std::string>& stats);

// ONNX attribute types, plus Bool (an ONNX INT that the schema documents as a flag).
enum class ParamType {
  Float,
  Int,
  Bool,
  String,
  Tensor,
  Graph,
  SparseTensor,
  TypeProto,
  Floats,
  Ints,
  Strings,
  Tensors,
  Graphs,
  SparseTensors,
  TypeProtos,
};

const char* paramTypeName(ParamType t);
std::optional<ParamType> paramTypeFromName(const std::string& name);
// True for the types whose payload is serialized protobuf bytes (tensor, graph, ...).
bool isProtoParam(ParamType t);

// A parameter value. Scalars: Float -> double, Int/Bool -> int64_t, String and the proto kinds
// -> std::string (proto kinds hold serialized protobuf bytes). Lists map to the vector types.
struct Param {
  using Value = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                             std::vector<std::string>>;
  ParamType type = ParamType::Int;
  Value value = int64_t{0};

  static Param makeFloat(double v) { return {ParamType::Float, v}; }
  static Param makeInt(int64_t v) { return {ParamType::Int, v}; }
  static Param makeBool(bool v) { return {ParamType::Bool, int64_t{v ? 1 : 0}}; }
  static Param makeString(std::string v) { return {ParamType::String, std::move(v)}; }
  static Param makeInts(std::vector<int64_t> v) { return {ParamType::Ints, std::move(v)}; }
  static Param makeFloats(std::vector<double> v) { return {ParamType::Floats, std::move(v)}; }
  static Param makeStrings(std::vector<std::string> v) { return {ParamType::Strings, std::move(v)}; }
  static Param makeProto(ParamType t, std::string bytes) { return {t, std::move(bytes)}; }

  double asFloat() const;  // Float, Int or Bool
  int64_t asInt() const;   // Int, Bool, or an integral Float
  bool asBool() const { return asInt() != 0; }
  const std::string& asString() const { return std::get<std::string>(value); }
  const std::vector<int64_t>& asInts() const { return std::get<std::vector<int64_t>>(value); }
  const std::vector<double>& asFloats() const { return std::get<std::vector<double>>(value); }
  const std::vector<std::string>& asStrings() const {
    return std::get<std::vector<std::string>>(value);
  }
  // Short human-readable form, used in docs and tooltips ("1e-05", "[1, 1]", "<graph>").
  std::string toDisplay() const;
  bool operator==(const Param& o) const { return type == o.type && value == o.value; }
};

enum class PortOption { Single, Optional, Variadic };
enum class Differentiability { Unknown, Differentiable, NonDifferentiable };

struct PortSpec {
  std::string name;
  std::string typeStr;                    // constraint name ("T") or a literal type ("tensor(int64)")
  std::vector<std::string> allowedTypes;  // e.g. "tensor(float)"; empty = any
  std::string doc;
  PortOption option = PortOption::Single;
  Differentiability differentiability = Differentiability::Unknown;
  bool homogeneous = true;  // variadic: all arguments share one type
  int minArity = 1;         // variadic: fewest arguments
};

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::Int;
  std::string doc;
  bool required = false;
  std::optional<Param> defaultValue;
  std::vector<std::string> allowedValues;  // enumerations, as strings ("NOTSET", "0")
};

struct TypeConstraint {
  std::string name;
  std::vector<std::string> allowedTypes;
  std::string doc;
};

// What a node type is, beyond being an operator: lowering treats these kinds specially.
enum class NodeKind {
  Op,           // one ONNX NodeProto of (domain, type)
  GraphInput,   // a graph input: one output port
  GraphOutput,  // a graph output: one input port
  Initializer,  // a graph initializer: one output port, with data and a training status
  Layer,        // a composite (Keras-style layer, loss, metric) lowered by its LowerFn
};

// Graph inputs, outputs and initializers are named by their node's `name`: it is the tensor's.
inline bool namesItsTensor(NodeKind k) {
  return k == NodeKind::GraphInput || k == NodeKind::GraphOutput || k == NodeKind::Initializer;
}

struct NodeSpec {
  std::string domain;  // canonical: "ai.onnx", "ai.onnx.preview.training", "deepwire", ...
  std::string type;
  int version = 1;     // the schema's since_version
  std::string category;
  std::string doc;
  NodeKind kind = NodeKind::Op;
  bool deprecated = false;
  std::vector<PortSpec> inputs;
  std::vector<PortSpec> outputs;
  std::vector<ParamSpec> params;  // the op's own attributes (common fields are listed separately)
  std::vector<TypeConstraint> typeConstraints;
  int minInputs = 0, maxInputs = 0, minOutputs = 0, maxOutputs = 0;
  LowerFn lower = nullptr;  // kind Layer only
  MetricStatsFn metricStats = nullptr;        // metrics only (lower then composes the two)
  MetricFinalizeFn metricFinalize = nullptr;
  bool isLoss = false;                        // the output is a loss to minimize
  int shapeRank = -1;  // kind Initializer: the rank its `shape` must have (-1: any)
  std::vector<std::string> aliases;  // other spellings accepted on load ("Substract")
  // The seed toolkit's names for it where they differ ("Bernouilli", "MicrosoftGelu", "RNN
  // (GRU)"): found by the palette's search and listed by `deepwire nodes`, never accepted as an
  // op type in a model.
  std::vector<std::string> seedNames;

  const ParamSpec* param(const std::string& name) const;
  const TypeConstraint* constraint(const std::string& name) const;
  // Allowed types of input/output `index`, resolving variadic tails and constraint names.
  std::vector<std::string> inputTypes(int index) const;
  std::vector<std::string> outputTypes(int index) const;
  const PortSpec* inputPort(int index) const;   // variadic tail repeats its last port
  const PortSpec* outputPort(int index) const;
  std::string key() const { return domain + "::" + type; }
};

// The fields every node has, whatever its type (the seed toolkit's node page).
struct CommonField {
  std::string name;
  std::string type;  // "cluster", "string", "string[]", "float"
  std::string doc;
  std::string defaultValue;
};
const std::vector<CommonField>& commonFields();

}  // namespace dw
