// What an operator version takes: its inputs, outputs and attributes, from libonnx 1.12's
// registry where that is current, and for the versions libonnx does not know (ai.onnx after
// opset 17, ai.onnx.ml after 3) from nodes/schema_facts.inc, generated from onnx 1.23's
// registered schemas (scripts/gen_schema_facts.py). Sessions check nodes against it before any
// kernel or shape inference sees them.
#pragma once

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nodes/spec.h"
#include "nodes/status.h"

namespace dw {

struct FactPort {
  std::string name;
  char option;          // 'S' single, 'O' optional, 'V' variadic
  std::string typeStr;  // a constraint's name ("T") or a type ("tensor(int64)")
};

struct FactAttr {
  std::string name;
  onnx::AttributeProto::AttributeType type;
  bool required;
  std::optional<Param> defaultValue;
};

struct SchemaFacts {
  std::string domain;  // "" for ai.onnx
  std::string op;
  int since = 0;
  int minInputs = 0, maxInputs = 0, minOutputs = 0, maxOutputs = 0;
  std::vector<FactPort> inputs, outputs;
  std::vector<FactAttr> attributes;  // sorted by name
  std::vector<std::pair<std::string, std::vector<std::string>>> typeConstraints;
  bool fromLibonnx = false;  // false: a version libonnx 1.12 lacks
};

// `op` of `domain` ("", "ai.onnx.ml" or "com.microsoft") as a model importing `opset` of that
// domain gets it (made once, kept for the process); null where no version at or below `opset`
// is known.
const SchemaFacts* schemaFacts(const std::string& domain, const std::string& op, int opset);

// The first version of every `domain` op that has no version at or below `opset` (ai.onnx ops
// added after libonnx 1.12: Mish at 18, Gelu at 20, Attention at 23...), by op name.
std::vector<const SchemaFacts*> opsFirstAfter(const std::string& domain, int opset);

// The node's input and output counts, required inputs and attributes (known, of their type,
// present where required) against `f`; errors start with `what` (the node) and name the op
// and opset, what the node has and what the op takes.
Status checkNodeAgainst(const onnx::NodeProto& node, const SchemaFacts& f, int opset,
                        const std::string& what);

// Every node of `g` and of its subgraphs before anything trusts it: input and output counts
// against its schema, required inputs present and defined (subgraphs see the names of the
// graphs around them), attributes known, of their type and present where required, the window
// attributes (kernel_shape, strides, dilations) positive and an axis within a declared rank.
// `opsets` maps a domain ("" for ai.onnx) to the version the model imports; nodes of
// `localFunctions` ("domain:op") and of domains without facts are left to the caller.
// `inferenceUnsafe` is set for a model that libonnx 1.12's shape inference would crash on though
// it is valid enough to run: MaxUnpool reads its indices' shape without checking there is one.
// Sessions, `check` and export all call it before libonnx's checker or shape inference.
Status validateNodes(const onnx::GraphProto& g, const std::map<std::string, int>& opsets,
                     const std::set<std::string>& localFunctions, bool& inferenceUnsafe);

// Each input of a top-level node whose element type the model states (a declaration, an
// initializer or an inferred value_info) against its operator's type constraint, so that a
// kernel is never handed a type its op does not take: the error names the node, the input,
// its type and the types the op takes. Where an op takes float, deepwire's kernels take every
// float type, so those pass too.
Status checkInputTypes(const onnx::ModelProto& model);

// validateNodes over a whole model, with its opset imports and local functions.
Status validateModelNodes(const onnx::ModelProto& model, bool& inferenceUnsafe);

// libonnx's shape inference (onnx::ShapeInferenceOptions' three flags), run only on a model
// whose nodes validateModelNodes accepts: libonnx 1.12's inference functions index arrays by
// attribute and input sizes they never check. An invalid node is the error returned, and types
// stay as declared; so they do, without an error, where inference is known to crash on a valid
// model (see validateNodes). Every caller of InferShapes goes through here.
Status inferShapesSafely(onnx::ModelProto& model, bool checkTypes, int strictMode,
                         bool dataPropagation);
// A node as the engine's messages name it: its name, or "<Op -> first output>".
std::string nodeName(const onnx::NodeProto& n);
// The same for a caller that has just run validateModelNodes on `model` (a session, `check`),
// with the inferenceUnsafe it reported: the nodes are not judged twice.
Status inferValidatedShapes(onnx::ModelProto& model, bool inferenceUnsafe, bool checkTypes,
                            int strictMode, bool dataPropagation);

// The catalogue's entry for a version libonnx lacks: `older` (the op's newest libonnx version,
// or null for an op libonnx does not have) lends its category and the docs of the ports and
// parameters that kept their names; ports, types and parameters are the new version's.
NodeSpec specFromFacts(const SchemaFacts& facts, const NodeSpec* older,
                       const std::string& canonicalDomain);

// `spec`, an op deepwire defines outside libonnx's domains (com.deepwire.grad, com.microsoft),
// as a libonnx schema of `domain`: the checker then verifies its nodes (ports, attribute names
// and types) as it does standard ones. With `withDefaults` the attributes' defaults go in too
// (the planner gives them to a function body builder). The caller adds inference and a body.
onnx::OpSchema onnxSchemaOf(const NodeSpec& spec, const std::string& domain, bool withDefaults);

// libonnx's inference function of `op` (ai.onnx, the newest version at or below `opset`) run on
// `ctx`, behind the same guards as every other node's: an op whose inputs and attributes are
// another's plus a few (FusedConv is Conv's) infers as that op.
void inferAs(const std::string& op, int opset, onnx::InferenceContext& ctx);

}  // namespace dw
