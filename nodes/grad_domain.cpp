// com.deepwire.grad: the ops a training graph holds besides standard ONNX. Autodiff
// (engine/training) emits them and the engine runs them; they are listed here so that a training
// export reads like any other model: `deepwire check` and `deepwire import` accept it, the studio
// shows its nodes with their ports and parameters (palette category "training internals"), and
// export writes them back unchanged. Each entry is also registered with libonnx as an OpSchema
// (ports, attribute names and types, output types and shapes), so the ONNX checker verifies grad
// nodes and shape inference runs through them.
//
// Many of them mirror a forward op: autodiff copies the forward node's attributes onto the
// backward node (adding "op" where one kernel serves several forward ops). Those attributes are
// not typed again here: they are read from libonnx's schemas of the mirrored ops, over the opsets
// the gradient builders cover, so types, docs and defaults stay ONNX's own. Where the mirrored
// ops disagree on a default (alpha is 0.01 for LeakyRelu and 0.2 for HardSigmoid), the parameter
// has none and its doc lists them.
//
// How to add a grad op: add a GradOp entry below with the ports the autodiff builder wires and the
// kernel reads, which input each output takes its shape from (shapes), the attributes the kernel
// reads (own), and the forward ops whose attributes the builder copies (mirror).
// tests/training/grad_catalogue_test.cpp fails for a kernel registered in a private domain
// without an entry here, and gradcheck_test.cpp checks every gradient graph's grad nodes
// against their entries.
#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <set>

#include "nodes/catalogue.h"
#include "nodes/onnx_params.h"
#include "nodes/schema_facts.h"
#include "ops/reduce_table.h"
#include "ops/unary_table.h"

namespace dw {

namespace {

constexpr const char* kCategory = "training internals";
constexpr int kNoShape = -1, kNextInput = -2;

// Port types. Float ports share one type (T); as in the forward ops' schemas, normalisation
// scales and biases (Affine) and statistics (Stat) may have float types of their own, and so
// may Dropout's ratio (Ratio); each Any port (read for its shape, or passed on) has a
// constraint of its own.
enum class Ty { Float, Affine, Stat, Ratio, Index, Int64, Int32, Bool, Any };

struct Port {
  const char* name;
  Ty type;
  const char* doc;
  PortOption option = PortOption::Single;
};

struct GradOp {
  std::string type;
  std::string doc;
  std::vector<Port> inputs;
  std::vector<Port> outputs;
  std::vector<ParamSpec> params;     // attributes of the grad op itself
  std::vector<std::string> mirrors;  // forward ops whose attributes the node carries
  int mirrorSince = 1;               // the oldest forward opset the gradient builders cover
  std::set<std::string> only;        // if set: the mirrored attributes taken (else all)
  // Per output: the input whose shape (and, when it is a float input, type) it has; kNoShape:
  // only the type of input 0; kNextInput: input i + 1 for output i (ConcatGrad).
  std::vector<int> like;
  // Ports gradients flow through. Autodiff differentiates only the training-mode forward ops
  // (BatchNormalizationTraining, DropoutTraining); backward ops have no gradient of their own.
  std::set<std::string> differentiable;

  GradOp(std::string t, std::string d, std::vector<Port> in, std::vector<Port> out)
      : type(std::move(t)), doc(std::move(d)), inputs(std::move(in)), outputs(std::move(out)) {}
  GradOp& own(std::vector<ParamSpec> p) {
    params = std::move(p);
    return *this;
  }
  GradOp& gradientsThrough(std::set<std::string> ports) {
    differentiable = std::move(ports);
    return *this;
  }
  GradOp& shapes(std::vector<int> from) {
    like = std::move(from);
    return *this;
  }
  GradOp& mirror(std::vector<std::string> ops, int since, std::set<std::string> names = {}) {
    mirrors = std::move(ops);
    mirrorSince = since;
    only = std::move(names);
    return *this;
  }
};

const char* typeStr(Ty t) {
  switch (t) {
    case Ty::Float:
      return "T";
    case Ty::Affine:
      return "Ta";
    case Ty::Stat:
      return "Ts";
    case Ty::Ratio:
      return "T2";
    case Ty::Index:
      return "Tind";
    case Ty::Any:
      return "T1";
    default:
      return "";
  }
}

PortSpec portSpec(const Port& p, bool input) {
  PortSpec s;
  s.name = p.name;
  s.doc = p.doc;
  s.option = p.option;
  s.minArity = p.option == PortOption::Variadic ? (input ? 1 : 0) : 1;
  s.homogeneous = true;
  s.typeStr = typeStr(p.type);
  if (p.type == Ty::Int64) s.typeStr = "tensor(int64)", s.allowedTypes = {"tensor(int64)"};
  if (p.type == Ty::Int32) s.typeStr = "tensor(int32)", s.allowedTypes = {"tensor(int32)"};
  if (p.type == Ty::Bool) s.typeStr = "tensor(bool)", s.allowedTypes = {"tensor(bool)"};
  s.differentiability = Differentiability::NonDifferentiable;
  return s;
}

ParamSpec own(const std::string& name, ParamType type, std::optional<Param> def,
              const std::string& doc, std::vector<std::string> allowed = {}) {
  ParamSpec p;
  p.name = name;
  p.type = type;
  p.doc = doc;
  p.required = !def && type != ParamType::Ints;
  p.defaultValue = std::move(def);
  p.allowedValues = std::move(allowed);
  if (type == ParamType::Bool) p.allowedValues = {"false", "true"};
  return p;
}

ParamSpec opParam(const std::vector<std::string>& ops, const std::string& what) {
  return own("op", ParamType::String, std::nullopt,
             "The forward op" + (what.empty() ? "" : " " + what) + ".", ops);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// The attributes of `op.mirrors` over their schemas from opset mirrorSince to deepwire's target,
// merged per name: required only if every schema requires it, a default only where all agree.
std::vector<ParamSpec> mirroredParams(const GradOp& op) {
  struct Seen {
    std::vector<ParamSpec> specs;                 // one per schema that has the attribute
    std::vector<std::string> ops;                 // forward ops having it, first-seen order
    std::map<std::string, std::string> defaults;  // op -> displayed default
  };
  std::map<std::string, Seen> seen;
  int schemas = 0;
  for (const auto& fwd : op.mirrors)
    for (int v = op.mirrorSince, last = 0; v <= kDefaultOnnxOpset; ++v) {
      // Each schema in force at some opset of the range (the first may be older than it).
      const auto* s = onnx::OpSchemaRegistry::Schema(fwd, v, "");
      if (!s || s->since_version() == last) continue;
      last = s->since_version();
      ++schemas;
      const NodeSpec spec = specFromSchema(*s, kOnnxDomain);
      for (const auto& p : spec.params) {
        if (!op.only.empty() && !op.only.count(p.name)) continue;
        Seen& e = seen[p.name];
        e.specs.push_back(p);
        if (std::find(e.ops.begin(), e.ops.end(), fwd) == e.ops.end()) e.ops.push_back(fwd);
        e.defaults[fwd] = p.defaultValue ? p.defaultValue->toDisplay() : "none";
      }
    }
  std::vector<ParamSpec> out;
  for (auto& [name, e] : seen) {
    ParamSpec p = e.specs.back();  // the newest schema's doc and type
    bool allBool = true, sameDefault = true, anyUnenumerated = false;
    int required = 0;
    std::set<std::string> allowed;
    for (const auto& s : e.specs) {
      allBool &= s.type == ParamType::Bool;
      required += s.required;
      if (s.defaultValue.has_value() != p.defaultValue.has_value() ||
          (s.defaultValue && s.defaultValue->value != p.defaultValue->value))
        sameDefault = false;
      if (s.allowedValues.empty()) anyUnenumerated = true;
      allowed.insert(s.allowedValues.begin(), s.allowedValues.end());
    }
    // A flag in one op and a number in another is a number.
    if (p.type == ParamType::Bool && !allBool) {
      p.type = ParamType::Int;
      if (p.defaultValue) p.defaultValue->type = ParamType::Int;
      anyUnenumerated = true;
    }
    p.required = required == schemas;
    if (!sameDefault) p.defaultValue.reset();
    p.allowedValues = anyUnenumerated ? std::vector<std::string>{}
                                      : std::vector<std::string>(allowed.begin(), allowed.end());
    if (p.type == ParamType::Bool) p.allowedValues = {"false", "true"};
    std::string prefix = "Copied from the forward " + joined(e.ops) + ". ";
    if (!sameDefault) {
      std::vector<std::string> d;
      for (const auto& o : e.ops) d.push_back(o + " " + e.defaults[o]);
      prefix += "Default as the forward op's: " + joined(d) + ". ";
    }
    p.doc = prefix + p.doc;
    out.push_back(std::move(p));
  }
  return out;
}

NodeSpec toSpec(const GradOp& op) {
  NodeSpec s;
  s.domain = kGradDomain;
  s.type = op.type;
  s.version = 1;
  s.category = kCategory;
  s.doc = op.doc;
  for (const auto& p : op.inputs) s.inputs.push_back(portSpec(p, true));
  for (const auto& p : op.outputs) s.outputs.push_back(portSpec(p, false));
  for (auto* ports : {&s.inputs, &s.outputs})
    for (auto& p : *ports)
      if (op.differentiable.count(p.name)) p.differentiability = Differentiability::Differentiable;
  // Constraints of the type names the ports use; Any ports get T1, T3, T4... in order.
  const std::vector<std::string> kFloat = {"tensor(bfloat16)", "tensor(double)", "tensor(float)",
                                           "tensor(float16)"};
  int anyCount = 0;
  std::set<std::string> declared;
  for (auto* ports : {&s.inputs, &s.outputs})
    for (auto& p : *ports) {
      if (p.typeStr == "T1" && anyCount++ > 0) p.typeStr = "T" + std::to_string(anyCount + 1);
      if (!declared.insert(p.typeStr).second || p.typeStr.rfind("tensor(", 0) == 0) continue;
      if (p.typeStr == "T")
        s.typeConstraints.push_back(
            {"T", kFloat, "Floating-point tensors (the values and gradients)."});
      else if (p.typeStr == "T2")
        s.typeConstraints.push_back({"T2", kFloat, "A floating-point scalar."});
      else if (p.typeStr == "Ta")
        s.typeConstraints.push_back({"Ta", kFloat, "Floating-point scale and bias."});
      else if (p.typeStr == "Ts")
        s.typeConstraints.push_back({"Ts", kFloat, "Floating-point statistics."});
      else if (p.typeStr == "Tind")
        s.typeConstraints.push_back(
            {"Tind", {"tensor(int32)", "tensor(int64)"}, "Integer tensors (labels, indices)."});
      else
        s.typeConstraints.push_back({p.typeStr, {}, "Any tensor."});
    }
  s.params = op.params;
  for (auto& p : mirroredParams(op))
    if (!s.param(p.name)) s.params.push_back(std::move(p));
  auto count = [](const std::vector<PortSpec>& ports, int* lo, int* hi) {
    *lo = 0;
    *hi = static_cast<int>(ports.size());
    for (const auto& p : ports) {
      if (p.option == PortOption::Single) ++*lo;
      if (p.option == PortOption::Variadic) *lo += p.minArity, *hi = INT_MAX;
    }
  };
  count(s.inputs, &s.minInputs, &s.maxInputs);
  count(s.outputs, &s.minOutputs, &s.maxOutputs);
  return s;
}

constexpr auto kOpt = PortOption::Optional;
constexpr auto kVar = PortOption::Variadic;

// The forward ops UnaryGrad differentiates: the rows of ops/unary_table.h with a gradient, and
// Clip (whose bounds are inputs).
const std::vector<std::string> kUnaryOps = [] {
  std::vector<std::string> v;
  for (const auto& op : ops::unaryOps())
    if (op.isOp() && op.gradient) v.push_back(op.name);
  v.push_back("Clip");
  return v;
}();

// UnaryGrad's own attributes besides op: those of the differentiable ops that libonnx has no
// schema for (newer than its opsets), which the mirrored schemas cannot supply.
std::vector<ParamSpec> unaryGradOwn() {
  std::vector<ParamSpec> v{opParam(kUnaryOps, "f")};
  std::set<std::string> fromSchemas;
  for (const auto& op : ops::unaryOps())
    if (const auto* s = onnx::OpSchemaRegistry::Schema(op.name, kDefaultOnnxOpset, ""))
      for (const auto& [name, a] : s->attributes()) fromSchemas.insert(name);
  for (const auto& op : ops::unaryOps()) {
    if (!op.isOp() || !op.gradient ||
        onnx::OpSchemaRegistry::Schema(op.name, kDefaultOnnxOpset, ""))
      continue;
    for (const auto& a : op.attrs)
      if (a.name && fromSchemas.insert(a.name).second)
        v.push_back(own(a.name, ParamType::Float, std::nullopt,
                        std::string("The forward op's ") + a.name + " (" + op.name + ")."));
    if (op.choiceAttr && fromSchemas.insert(op.choiceAttr).second) {
      std::vector<std::string> allowed;
      for (const auto& c : op.choices)
        if (c.value) allowed.push_back(c.value);
      v.push_back(own(op.choiceAttr, ParamType::String, Param::makeString(allowed[0]),
                      std::string("The forward op's ") + op.choiceAttr + " (" + op.name + ").",
                      allowed));
    }
  }
  for (auto& p : v)
    if (p.name != "op") p.required = false;
  return v;
}

const std::vector<std::string> kReduceOps = [] {
  std::vector<std::string> v;
  for (const auto& op : ops::reduceOps())
    if (op.gradient) v.push_back(op.name);
  return v;
}();
const std::vector<std::string> kPoolOps = {"MaxPool", "AveragePool", "GlobalMaxPool",
                                           "GlobalAveragePool"};
const std::vector<std::string> kRecurrentOps = {"RNN", "GRU", "LSTM"};

std::vector<GradOp> gradOps() {
  const Port dY{"dY", Ty::Float, "Gradient of the loss with respect to the forward output Y."};
  const Port dX{"dX", Ty::Float, "Gradient of the loss with respect to the forward input X."};
  const Port X{"X", Ty::Float, "The forward input X."};
  const Port Y{"Y", Ty::Float, "The forward output Y."};
  auto optional = [](const char* name, const char* doc) {
    return Port{name, Ty::Float, doc, kOpt};
  };
  return {
      GradOp("SumToShape",
             "dX = dY summed over the axes along which X was broadcast to dY's shape (the "
             "gradient of a broadcasting op with respect to one operand).",
             {dY, {"X", Ty::Any, "The operand whose shape dX takes."}}, {dX})
          .shapes({1}),
      GradOp("UnaryGrad",
             "dX = dY * f'(X) for the elementwise op f named by op, with f' computed from X "
             "and/or Y = f(X).",
             {dY, X, Y, optional("min", "Clip (opset 11+): the forward's min input."),
              optional("max", "Clip (opset 11+): the forward's max input.")},
             {dX})
          .shapes({0})
          .own(unaryGradOwn())
          .mirror(kUnaryOps, 6),
      GradOp("SoftmaxGrad",
             "dX of Softmax (dX = Y * (dY - sum(dY * Y))) or, with log, of LogSoftmax "
             "(dX = dY - exp(Y) * sum(dY)), over the forward's axis.",
             {dY, Y}, {dX})
          .shapes({0})
          .own(
              {own("axis", ParamType::Int, Param::makeInt(-1), "The forward op's axis."),
               own("log", ParamType::Bool, Param::makeBool(false), "The forward op is LogSoftmax."),
               own("legacy", ParamType::Bool, Param::makeBool(false),
                   "Opset < 13 semantics: the input is flattened to 2-D at axis (the softmax "
                   "runs over all axes from axis on).")}),
      GradOp("SoftmaxCrossEntropyLossGrad",
             "d(scores) of SoftmaxCrossEntropyLoss: (softmax(scores) - onehot(labels)) times "
             "the sample weights, the upstream loss gradient and the reduction's normaliser.",
             {{"dLoss", Ty::Float, "Gradient of the loss with respect to the forward output."},
              {"log_prob", Ty::Float, "The forward's log-probabilities (its second output)."},
              {"labels", Ty::Index, "The forward's labels."},
              optional("weights", "The forward's class weights.")},
             {{"dScores", Ty::Float, "Gradient of the loss with respect to the scores."}})
          .shapes({1})
          .mirror({"SoftmaxCrossEntropyLoss"}, 12),
      GradOp("NegativeLogLikelihoodLossGrad",
             "d(input) of NegativeLogLikelihoodLoss: -(sample weight) times the upstream "
             "gradient and the reduction's normaliser at each target class, 0 elsewhere.",
             {{"dLoss", Ty::Float, "Gradient of the loss with respect to the forward output."},
              {"input", Ty::Float, "The forward's input (log-probabilities)."},
              {"target", Ty::Index, "The forward's target classes."},
              optional("weight", "The forward's class weights.")},
             {{"dInput", Ty::Float, "Gradient of the loss with respect to the input."}})
          .shapes({1})
          .mirror({"NegativeLogLikelihoodLoss"}, 12),
      GradOp("ReduceGrad",
             "dX of the Reduce* op named by op: dY broadcast back over the reduced axes, times "
             "the op's derivative (1/count for ReduceMean, X == Y for ReduceMax, ...).",
             {dY,
              X,
              Y,
              {"axes", Ty::Int64,
               "The forward's axes input (ReduceSum 13+); else the axes attribute.", kOpt}},
             {dX})
          .shapes({1})
          .own({opParam(kReduceOps, "")})
          .mirror(kReduceOps, 1),
      GradOp("GatherGrad",
             "dX of Gather: zeros shaped like data with dY scatter-added at the gathered indices.",
             {dY,
              {"data", Ty::Any, "The forward's data (its shape is dX's)."},
              {"indices", Ty::Index, "The forward's indices."}},
             {dX})
          .shapes({1})
          .mirror({"Gather"}, 1, {"axis"}),
      GradOp("MaxUnpoolGrad",
             "dX of MaxUnpool: dY (cropped to the default output shape) read at each flat index "
             "of I; where I repeats an index only its last occurrence gets the gradient.",
             {dY, {"I", Ty::Int64, "The forward's indices."}}, {dX})
          .shapes({1}),
      GradOp("Col2ImGrad",
             "dX of Col2Im: each block's values gathered back from dY into its column; "
             "positions in the padding get zeros.",
             {dY,
              {"X", Ty::Any, "The forward's columns (their shape is dX's)."},
              {"image_shape", Ty::Index, "The forward's image_shape."},
              {"block_shape", Ty::Index, "The forward's block_shape."}},
             {dX})
          .shapes({1})
          .own({own("dilations", ParamType::Ints, std::nullopt, "The forward op's dilations."),
                own("pads", ParamType::Ints, std::nullopt, "The forward op's pads."),
                own("strides", ParamType::Ints, std::nullopt, "The forward op's strides.")}),
      GradOp("DeformConvGrad",
             "dX, dW, doffset, dB and dmask of DeformConv: the bilinear reads of the forward "
             "pass rebuilt and run backwards.",
             {dY,
              X,
              {"W", Ty::Float, "The forward's weights."},
              {"offset", Ty::Float, "The forward's offsets."},
              {"mask", Ty::Float, "The forward's mask.", kOpt}},
             {optional("dX", "Gradient with respect to X."),
              optional("dW", "Gradient with respect to W."),
              optional("doffset", "Gradient with respect to the offsets."),
              optional("dB", "Gradient with respect to B."),
              optional("dmask", "Gradient with respect to the mask.")})
          .shapes({1, 2, 3, kNoShape, 4})
          .own(
              {own("dilations", ParamType::Ints, std::nullopt, "The forward op's dilations."),
               own("group", ParamType::Int, Param::makeInt(1), "The forward op's group."),
               own("kernel_shape", ParamType::Ints, std::nullopt, "The forward op's kernel_shape."),
               own("offset_group", ParamType::Int, Param::makeInt(1),
                   "The forward op's offset_group."),
               own("pads", ParamType::Ints, std::nullopt, "The forward op's pads."),
               own("strides", ParamType::Ints, std::nullopt, "The forward op's strides.")}),
      GradOp("SliceGrad",
             "dX of Slice: zeros shaped like X with dY written at the sliced positions.",
             {dY,
              {"X", Ty::Any, "The forward's data (its shape is dX's)."},
              {"starts", Ty::Index, "The forward's starts input (opset 10+).", kOpt},
              {"ends", Ty::Index, "The forward's ends input (opset 10+).", kOpt},
              {"axes", Ty::Index, "The forward's axes input (opset 10+).", kOpt},
              {"steps", Ty::Index, "The forward's steps input (opset 10+).", kOpt}},
             {dX})
          .shapes({1})
          .own({own("opset", ParamType::Int, Param::makeInt(13),
                    "The forward Slice's opset: below 10 starts, ends and axes are attributes.")})
          .mirror({"Slice"}, 1),
      GradOp(
          "ConcatGrad",
          "dX_i of Concat: dY split along axis into pieces shaped like the forward inputs.",
          {dY, {"inputs", Ty::Any, "The forward's inputs (their shapes are the pieces').", kVar}},
          {{"dInputs", Ty::Float,
            "Gradient per forward input, in order; an omitted one is not computed.", kVar}})
          .shapes({kNextInput})
          .mirror({"Concat"}, 4, {"axis"}),
      GradOp("DropoutGrad", "dX of Dropout: dY * mask / (1 - ratio).",
             {dY,
              {"mask", Ty::Bool, "The forward's mask output."},
              {"ratio", Ty::Ratio, "The forward's ratio input (opset 12+); else the attribute.",
               kOpt}},
             {dX})
          .shapes({0})
          .mirror({"Dropout"}, 7, {"ratio"}),
      GradOp("DropoutTraining",
             "Dropout in a training graph: zeroes each element with probability ratio and "
             "scales the rest by 1 / (1 - ratio); the random stream continues from step to step, "
             "so each step drops different units while a seed reproduces the whole run.",
             {{"data", Ty::Float, "The input."},
              {"ratio", Ty::Ratio, "Drop probability (a scalar); else the ratio attribute.", kOpt}},
             {{"output", Ty::Float, "The input with dropped elements zeroed and the rest scaled."},
              {"mask", Ty::Bool, "True where the element was kept."}})
          .shapes({0, 0})
          .gradientsThrough({"data", "output"})
          .mirror({"Dropout"}, 7, {"ratio", "seed"}),
      GradOp("LayerNormalizationGrad",
             "dX, dScale and dB of LayerNormalization from the forward's saved Mean and "
             "InvStdDev.",
             {dY,
              X,
              {"Scale", Ty::Float, "The forward's scale."},
              {"Mean", Ty::Stat, "The forward's Mean output."},
              {"InvStdDev", Ty::Stat, "The forward's InvStdDev output."}},
             {optional("dX", "Gradient with respect to X."),
              optional("dScale", "Gradient with respect to Scale."),
              optional("dB", "Gradient with respect to B.")})
          .shapes({1, 2, 2})
          .mirror({"LayerNormalization"}, 17, {"axis"}),
      GradOp("AttentionGrad",
             "dQ, dK, dV and the caches' gradients of Attention (opsets 23 to 25), recomputing the "
             "attention weights from Q, K, V, the mask and the caches.",
             {dY,
              {"Q", Ty::Float, "The forward's Q."},
              {"K", Ty::Float, "The forward's K."},
              {"V", Ty::Float, "The forward's V."},
              {"attn_mask", Ty::Any, "The forward's mask (bool, or added scores).", kOpt},
              optional("past_key", "The forward's key cache."),
              optional("past_value", "The forward's value cache."),
              {"nonpad_kv_seqlen", Ty::Int64, "The forward's key counts per image.", kOpt}},
             {optional("dQ", "Gradient with respect to Q."),
              optional("dK", "Gradient with respect to K."),
              optional("dV", "Gradient with respect to V."),
              optional("dPastKey", "Gradient with respect to past_key."),
              optional("dPastValue", "Gradient with respect to past_value.")})
          .shapes({1, 2, 3, 5, 6})
          .own({own("is_causal", ParamType::Int, Param::makeInt(0), "The forward's is_causal."),
                own("q_num_heads", ParamType::Int, Param::makeInt(0),
                    "The forward's q_num_heads (packed 3-D inputs)."),
                own("kv_num_heads", ParamType::Int, Param::makeInt(0),
                    "The forward's kv_num_heads (packed 3-D inputs)."),
                own("scale", ParamType::Float, Param::makeFloat(0),
                    "The forward's scale; 0: 1 / sqrt(head size)."),
                own("softcap", ParamType::Float, Param::makeFloat(0),
                    "The forward's softcap; 0: none."),
                own("left_window_size", ParamType::Int, Param::makeInt(-1),
                    "The forward's left_window_size (opset 25); -1: unbounded."),
                own("right_window_size", ParamType::Int, Param::makeInt(-1),
                    "The forward's right_window_size (opset 25); -1: unbounded.")}),
      GradOp("ConvGrad",
             "dX, dW and dB of Conv (transposed = 0) or ConvTranspose (transposed = 1): backward "
             "data, backward weights and the bias sum of dY.",
             {dY, X, {"W", Ty::Float, "The forward's weights."}},
             {optional("dX", "Gradient with respect to X."),
              optional("dW", "Gradient with respect to W."),
              optional("dB", "Gradient with respect to B.")})
          .shapes({1, 2, kNoShape})
          .own({own("transposed", ParamType::Bool, Param::makeBool(false),
                    "The forward op is ConvTranspose.")})
          .mirror({"Conv", "ConvTranspose"}, 1),
      GradOp("PoolGrad",
             "dX of MaxPool (dY routed to each window's maximum) or AveragePool (dY spread "
             "evenly over each window), and of their Global forms.",
             {dY, X}, {dX})
          .shapes({1})
          .own({opParam(kPoolOps, "")})
          .mirror(kPoolOps, 1),
      GradOp("BatchNormalizationTraining",
             "BatchNormalization in training: normalises with the batch mean and population "
             "variance, and updates the running statistics as running = input * momentum + "
             "batch * (1 - momentum).",
             {{"X", Ty::Float, "The input, channels on axis 1."},
              {"scale", Ty::Affine, "Scale per channel."},
              {"B", Ty::Affine, "Bias per channel."},
              {"input_mean", Ty::Stat, "Running mean before this batch."},
              {"input_var", Ty::Stat, "Running variance before this batch."}},
             {{"Y", Ty::Float, "The normalised output."},
              {"running_mean", Ty::Stat, "Updated running mean."},
              {"running_var", Ty::Stat, "Updated running variance."},
              {"saved_mean", Ty::Stat, "This batch's mean (for the gradient)."},
              {"saved_var", Ty::Stat, "This batch's population variance (for the gradient)."}})
          .shapes({0, 3, 4, 3, 4})
          .gradientsThrough({"X", "scale", "B", "Y"})
          .mirror({"BatchNormalization"}, 9, {"epsilon", "momentum"}),
      GradOp("BatchNormalizationGrad",
             "dX, dScale and dB of BatchNormalization, from the batch statistics (training) or "
             "from constant running statistics (global_stats = 1).",
             {dY,
              X,
              {"scale", Ty::Affine, "Scale per channel."},
              {"mean", Ty::Stat, "Mean the forward used (saved batch mean or running mean)."},
              {"var", Ty::Stat, "Variance the forward used (saved or running)."},
              {"B", Ty::Affine, "Bias per channel (fixes the channel count; not in the math)."}},
             {optional("dX", "Gradient with respect to X."),
              {"dScale", Ty::Affine, "Gradient with respect to scale.", kOpt},
              {"dB", Ty::Affine, "Gradient with respect to B.", kOpt}})
          .shapes({1, 2, 5})
          .own({own("global_stats", ParamType::Bool, Param::makeBool(false),
                    "mean and var are constants (inference-mode normalisation), so dX = dY * "
                    "scale / sqrt(var + epsilon).")})
          .mirror({"BatchNormalization"}, 9, {"epsilon"}),
      GradOp("LpPoolGrad",
             "dX of LpPool or GlobalLpPool: dY * |X|^(p-1) * sign(X) / Y^(p-1) over each window.",
             {dY, X, Y}, {dX})
          .shapes({1})
          .own({opParam({"LpPool", "GlobalLpPool"}, "")})
          .mirror({"LpPool", "GlobalLpPool"}, 2),
      GradOp("MaxRoiPoolGrad",
             "dX of MaxRoiPool: each bin's gradient goes to the maximum of its region.",
             {dY, X, {"rois", Ty::Float, "The forward's regions of interest."}}, {dX})
          .shapes({1})
          .mirror({"MaxRoiPool"}, 1),
      GradOp("ResizeGrad",
             "dX of Resize or Upsample: dY scattered back through the taps the forward sampled "
             "with.",
             {dY,
              {"X_shape", Ty::Int64, "The shape of the forward's X."},
              {"roi", Ty::Any, "Resize: the forward's roi; Upsample: its scales.", kOpt},
              {"scales", Ty::Any, "Resize: the forward's scales.", kOpt},
              {"sizes", Ty::Any, "Resize: the forward's sizes.", kOpt}},
             {dX})
          .shapes({kNoShape})
          .own({own("op", ParamType::String, Param::makeString("Resize"), "The forward op.",
                    {"Resize", "Upsample"}),
                own("opset", ParamType::Int, std::nullopt,
                    "The forward op's opset (it fixes how the inputs and attributes read).")})
          .mirror({"Resize", "Upsample"}, 7),
      GradOp("RecurrentGrad",
             "Gradients of RNN, GRU or LSTM: recomputes the forward pass and backpropagates "
             "through time, for every direction and layout. Output i is the gradient of forward "
             "input i.",
             {{"X", Ty::Float, "The forward's X."},
              {"W", Ty::Float, "The forward's W."},
              {"R", Ty::Float, "The forward's R."},
              optional("B", "The forward's B."),
              {"sequence_lens", Ty::Int32, "The forward's sequence_lens.", kOpt},
              optional("initial_h", "The forward's initial_h."),
              optional("initial_c", "LSTM: the forward's initial_c."),
              optional("P", "LSTM: the forward's P."),
              optional("dY", "Gradient with respect to the forward's Y (absent: zero)."),
              optional("dY_h", "Gradient with respect to the forward's Y_h (absent: zero)."),
              optional("dY_c", "LSTM: gradient with respect to Y_c (absent: zero).")},
             {optional("dX", "Gradient with respect to X."),
              optional("dW", "Gradient with respect to W."),
              optional("dR", "Gradient with respect to R."),
              optional("dB", "Gradient with respect to B."),
              optional("unused", "Always omitted: sequence_lens has no gradient."),
              optional("dInitial_h", "Gradient with respect to initial_h."),
              optional("dInitial_c", "Gradient with respect to initial_c."),
              optional("dP", "Gradient with respect to P.")})
          .shapes({0, 1, 2, 3, kNoShape, 5, 6, 7})
          .own({opParam(kRecurrentOps, ""),
                own("impl", ParamType::String, Param::makeString("auto"),
                    "Backward implementation: oneDNN's where it supports the configuration "
                    "(auto), or always the reference loops, or always oneDNN.",
                    {"auto", "reference", "onednn"})})
          .mirror(kRecurrentOps, 7),
  };
}

// Output types and shapes for ONNX shape inference: without them inference stops at the first
// grad op, and a training graph imported and exported again would lose the types of everything
// downstream of a BatchNormalizationTraining (which the engine needs to expand, e.g.,
// SoftmaxCrossEntropyLoss).
void inferLike(onnx::InferenceContext& ctx, const NodeSpec& spec, const std::vector<int>& like) {
  auto inputType = [&](int i) -> const onnx::TypeProto* {
    if (i < 0 || static_cast<size_t>(i) >= ctx.getNumInputs()) return nullptr;
    const onnx::TypeProto* t = ctx.getInputType(i);
    return t && t->has_tensor_type() ? t : nullptr;
  };
  for (size_t o = 0; o < ctx.getNumOutputs() && !like.empty(); ++o) {
    const size_t decl = std::min(o, like.size() - 1);
    int src = like[decl] == kNextInput ? static_cast<int>(o) + 1 : like[decl];
    onnx::TypeProto* out = ctx.getOutputType(o);
    if (!out) continue;
    const PortSpec* outPort = spec.outputPort(static_cast<int>(decl));
    const PortSpec* srcPort = spec.inputPort(src);
    const bool floatSource = srcPort && (srcPort->typeStr == "T" || srcPort->typeStr == "Ta" ||
                                         srcPort->typeStr == "Ts");
    const onnx::TypeProto* typeFrom = inputType(floatSource ? src : 0);
    auto* tt = out->mutable_tensor_type();
    if (outPort && outPort->typeStr == "tensor(bool)")
      tt->set_elem_type(onnx::TensorProto::BOOL);
    else if (typeFrom && typeFrom->tensor_type().elem_type())
      tt->set_elem_type(typeFrom->tensor_type().elem_type());
    const onnx::TypeProto* shapeFrom = inputType(src);
    if (shapeFrom && shapeFrom->tensor_type().has_shape())
      *tt->mutable_shape() = shapeFrom->tensor_type().shape();
  }
}

// The entry as an ONNX schema, with shape inference. Attribute defaults stay out: the engine
// merges schema defaults into kernel attributes, and the grad kernels keep their own, per
// forward op.
onnx::OpSchema schemaOf(const NodeSpec& spec, const std::vector<int>& like) {
  onnx::OpSchema s = onnxSchemaOf(spec, kGradDomain, false);
  s.TypeAndShapeInferenceFunction(
      [spec, like](onnx::InferenceContext& ctx) { inferLike(ctx, spec, like); });
  return s;
}

}  // namespace

const std::vector<std::string>& unaryGradOps() {
  return kUnaryOps;
}

void addGradDomain(CatalogueBuilder& b) {
  b.setDefaultOpset(kGradDomain, 1);
  static std::once_flag registered;
  const auto ops = gradOps();
  std::vector<NodeSpec> specs;
  for (const auto& op : ops) specs.push_back(toSpec(op));
  std::call_once(registered, [&] {
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kGradDomain, 1, 1);
    for (size_t i = 0; i < ops.size(); ++i) onnx::RegisterSchema(schemaOf(specs[i], ops[i].like));
  });
  for (auto& s : specs) b.add(std::move(s));
}

}  // namespace dw
