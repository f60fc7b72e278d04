// com.microsoft: ONNX Runtime's contrib operators that its graph optimizer writes into the models
// it saves (FusedConv, FusedGemm, FusedMatMul, QuickGelu, SkipLayerNormalization...), and others
// the seed lists that standard operators express. Each is defined once, here, as its expansion
// into ai.onnx operators: a function body built per node from its attributes, which the engine
// inlines before planning (engine/planner.cpp) and autodiff before differentiating, so the
// kernels, fusions and gradients of those operators serve it. Ports, types and attribute
// defaults are onnxruntime 1.30's (nodes/schema_facts.inc); the docs are ours.
#include <onnx/defs/attr_proto_util.h>
#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/defs/tensor_proto_util.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>

#include "nodes/microsoft_domain.h"

#include "nodes/catalogue.h"
#include "nodes/schema_facts.h"

namespace dw {

namespace {

using Ctx = onnx::FunctionBodyBuildContext;

// The most inputs a node's body reads (a QLinearConcat of over a thousand tensors is refused).
constexpr int kMaxInputs = 3 * 1024 + 2;

const onnx::AttributeProto* attr(const Ctx& c, const char* name, int type) {
  const auto* a = c.getAttribute(name);
  return a && a->type() == type ? a : nullptr;
}
float floatAttr(const Ctx& c, const char* name, float def) {
  const auto* a = attr(c, name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : def;
}
int64_t intAttr(const Ctx& c, const char* name, int64_t def) {
  const auto* a = attr(c, name, onnx::AttributeProto::INT);
  return a ? a->i() : def;
}
std::string stringAttr(const Ctx& c, const char* name) {
  const auto* a = attr(c, name, onnx::AttributeProto::STRING);
  return a ? a->s() : "";
}

// Builds a body: nodes over the formal names of the op's inputs and outputs, and values of its
// own (a prefix keeps them apart from those).
class Body {
 public:
  // `opset`: the ai.onnx opset the nodes are read at.
  Body(onnx::FunctionProto& f, int opset) : opset(opset), f_(f) {}
  const int opset;
  onnx::NodeProto& add(const std::string& op, const std::vector<std::string>& in,
                       const std::vector<std::string>& out) {
    onnx::NodeProto& n = *f_.add_node();
    n.set_op_type(op);
    for (const auto& v : in) n.add_input(v);
    for (const auto& v : out) n.add_output(v);
    return n;
  }
  // A com.microsoft node (QAttention's Attention), the body then importing that domain too.
  onnx::NodeProto& addMicrosoft(const std::string& op, const std::vector<std::string>& in,
                                const std::vector<std::string>& out) {
    bool imported = false;
    for (const auto& imp : f_.opset_import()) imported |= imp.domain() == kMicrosoftDomain;
    if (!imported) {
      auto* imp = f_.add_opset_import();
      imp->set_domain(kMicrosoftDomain);
      imp->set_version(1);
    }
    onnx::NodeProto& n = add(op, in, out);
    n.set_domain(kMicrosoftDomain);
    return n;
  }
  // A float constant of the element type of value `like`.
  std::string constantFloatsLike(const std::string& name, const std::vector<float>& v,
                                 const std::string& like) {
    *add("Constant", {}, {name + "_f"}).add_attribute() = onnx::MakeAttribute("value_floats", v);
    add("CastLike", {name + "_f", like}, {name});
    return name;
  }
  // The node's attributes of these names, where it has them, onto `n`.
  static void copy(const Ctx& c, onnx::NodeProto& n, std::initializer_list<const char*> names) {
    for (const char* name : names)
      if (const auto* a = c.getAttribute(name)) *n.add_attribute() = *a;
  }
  // A constant `v` of the element type of value `like`.
  std::string constantLike(const std::string& name, float v, const std::string& like) {
    *add("Constant", {}, {name + "_f"}).add_attribute() = onnx::MakeAttribute("value_float", v);
    add("CastLike", {name + "_f", like}, {name});
    return name;
  }
  // As a tensor `value` rather than value_ints: libonnx's shape inference reads a Constant's
  // data only from `value`, and a Reshape to these dims would leave its output's rank unknown.
  std::string constantInts(const std::string& name, const std::vector<int64_t>& v) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t.add_int64_data(x);
    *add("Constant", {}, {name}).add_attribute() = onnx::MakeAttribute("value", t);
    return name;
  }
  // ReduceMean of `in` over `axes` into `out`, its axes spelled for the opset the body is read
  // at: an input since 18, an attribute before.
  onnx::NodeProto& reduceMean(const std::string& in, const std::vector<int64_t>& axes,
                              const std::string& out) {
    if (opset >= 18) return add("ReduceMean", {in, constantInts(out + "_axes", axes)}, {out});
    onnx::NodeProto& n = add("ReduceMean", {in}, {out});
    *n.add_attribute() = onnx::MakeAttribute("axes", axes);
    return n;
  }
  // An int64 scalar (Range's bounds and step).
  std::string scalarInt(const std::string& name, int64_t v) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_int64_data(v);
    *add("Constant", {}, {name}).add_attribute() = onnx::MakeAttribute("value", t);
    return name;
  }
  // `in` as ONNX element type `to`.
  std::string cast(const std::string& in, int to, const std::string& out) {
    *add("Cast", {in}, {out}).add_attribute() = onnx::MakeAttribute("to", int64_t{to});
    return out;
  }
  // Throws where the body would need ai.onnx `op` of `version` and is read at an older opset.
  void need(const char* op, int version) const {
    if (opset < version)
      throw std::invalid_argument(
          std::string("it is written as ai.onnx ") + op + ", which needs opset " +
          std::to_string(version) + "; a training graph reads it at the model's opset " +
          std::to_string(opset) + " (export at " + std::to_string(version) + ")");
  }

 private:
  onnx::FunctionProto& f_;
};

// `out` = activation(`in`) for FusedConv: ONNX Runtime's MLAS activations, with their
// constants from activation_params.
void convActivation(Body& b, const std::string& act, const std::vector<float>& params,
                    const std::string& in, const std::string& out) {
  auto need = [&](size_t n, const char* what) {
    if (params.size() != n)
      throw std::invalid_argument("activation " + act + " takes " + std::to_string(n) +
                                  " activation_params (" + what + "), not " +
                                  std::to_string(params.size()));
  };
  if (act.empty()) {  // no activation: the Conv alone
    b.add("Identity", {in}, {out});
  } else if (act == "Relu" || act == "Tanh" || act == "Sigmoid") {
    b.add(act, {in}, {out});
  } else if (act == "LeakyRelu") {
    need(1, "alpha");
    *b.add(act, {in}, {out}).add_attribute() = onnx::MakeAttribute("alpha", params[0]);
  } else if (act == "HardSigmoid") {
    need(2, "alpha, beta");
    auto& n = b.add(act, {in}, {out});
    *n.add_attribute() = onnx::MakeAttribute("alpha", params[0]);
    *n.add_attribute() = onnx::MakeAttribute("beta", params[1]);
  } else if (act == "Clip") {
    need(2, "minimum, maximum");
    b.add("Clip",
          {in, b.constantLike("act_min", params[0], in), b.constantLike("act_max", params[1], in)},
          {out});
  } else {
    throw std::invalid_argument("activation '" + act +
                                "' is not one of Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid "
                                "and Clip");
  }
}

// `out` = activation(`in`) for FusedGemm: the recurrent cells' activation names, with
// activation_alpha, _beta and _gamma as their constants (those an ONNX op of the same name
// takes default as there).
void gemmActivation(const Ctx& c, Body& b, const std::string& act, const std::string& in,
                    const std::string& out) {
  auto rename = [&](onnx::NodeProto& n, const char* from, const char* to) {
    if (const auto* a = attr(c, from, onnx::AttributeProto::FLOAT))
      *n.add_attribute() = onnx::MakeAttribute(to, a->f());
  };
  auto required = [&](const char* name) {
    const auto* a = attr(c, name, onnx::AttributeProto::FLOAT);
    if (!a) throw std::invalid_argument("activation " + act + " needs " + name);
    return a->f();
  };
  if (act.empty()) {  // no activation: the Gemm alone
    b.add("Identity", {in}, {out});
  } else if (act == "Relu" || act == "Tanh" || act == "Sigmoid" || act == "Softplus") {
    b.add(act, {in}, {out});
  } else if (act == "LeakyRelu" || act == "Elu" || act == "ThresholdedRelu") {
    rename(b.add(act, {in}, {out}), "activation_alpha", "alpha");
  } else if (act == "HardSigmoid") {
    auto& n = b.add(act, {in}, {out});
    rename(n, "activation_alpha", "alpha");
    rename(n, "activation_beta", "beta");
  } else if (act == "Selu") {
    auto& n = b.add(act, {in}, {out});
    rename(n, "activation_alpha", "alpha");
    rename(n, "activation_gamma", "gamma");
  } else if (act == "ScaledTanh" || act == "ParametricSoftplus") {
    // alpha * f(beta * x), f tanh or softplus: no ai.onnx op of its own.
    const float alpha = required("activation_alpha"), beta = required("activation_beta");
    b.add("Mul", {in, b.constantLike("act_beta", beta, in)}, {"act_bx"});
    b.add(act == "ScaledTanh" ? "Tanh" : "Softplus", {"act_bx"}, {"act_f"});
    b.add("Mul", {"act_f", b.constantLike("act_alpha", alpha, in)}, {out});
  } else {
    throw std::invalid_argument("activation '" + act +
                                "' is not one of Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid, "
                                "Elu, Selu, Softplus, ThresholdedRelu, ScaledTanh and "
                                "ParametricSoftplus");
  }
}

// `out` = Gelu(`in`), exact or in the tanh approximation: the Gelu op from opset 20, before it
// the formula (a training graph of an older opset).
void gelu(Body& b, const std::string& in, const std::string& out, bool tanh) {
  if (b.opset >= 20) {
    auto& n = b.add("Gelu", {in}, {out});
    if (tanh) *n.add_attribute() = onnx::MakeAttribute("approximate", std::string("tanh"));
    return;
  }
  const std::string half = b.constantLike("gelu_half", 0.5f, in),
                    one = b.constantLike("gelu_one", 1.0f, in);
  if (tanh) {
    // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    b.add("Mul", {in, in}, {"gelu_x2"});
    b.add("Mul", {"gelu_x2", b.constantLike("gelu_c", 0.044715f, in)}, {"gelu_cx2"});
    b.add("Add", {"gelu_cx2", one}, {"gelu_1cx2"});
    b.add("Mul", {in, "gelu_1cx2"}, {"gelu_inner"});
    b.add("Mul", {"gelu_inner", b.constantLike("gelu_k", 0.7978845608f, in)}, {"gelu_arg"});
    b.add("Tanh", {"gelu_arg"}, {"gelu_t"});
  } else {
    // 0.5 x (1 + erf(x / sqrt(2)))
    b.add("Mul", {in, b.constantLike("gelu_k", 0.70710678f, in)}, {"gelu_arg"});
    b.add("Erf", {"gelu_arg"}, {"gelu_t"});
  }
  b.add("Add", {"gelu_t", one}, {"gelu_1t"});
  b.add("Mul", {in, "gelu_1t"}, {"gelu_x1t"});
  b.add("Mul", {"gelu_x1t", half}, {out});
}

// The permutation that FusedMatMul's transBatch and trans attributes apply to an operand of
// `rank` dimensions: transBatch moves the first dimension next to the last, trans swaps the
// last two. Empty: none.
std::vector<int64_t> matmulPerm(int rank, bool transBatch, bool trans) {
  if (!transBatch && !trans) return {};
  std::vector<int64_t> p(rank);
  std::iota(p.begin(), p.end(), 0);
  if (transBatch) {
    std::rotate(p.begin(), p.begin() + 1, p.end() - 1);
  }
  if (trans) std::swap(p[rank - 1], p[rank - 2]);
  return p;
}

// The rank of input `input` where its type says, else -1.
int knownRank(const Ctx& c, int input) {
  const onnx::TypeProto* t = c.getInputType(input);
  return t && t->has_tensor_type() && t->tensor_type().has_shape()
             ? t->tensor_type().shape().dim_size()
             : -1;
}
// What a body needs and the types it was given do not say (the model's checker lets it pass;
// the planner, which knows every input's type, decides).
struct RankUnknown : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// The same for a body that cannot be written without it.
int rankOf(const Ctx& c, int input, const char* port) {
  const int r = knownRank(c, input);
  if (r < 0)
    throw RankUnknown(std::string("the rank of ") + port + " must be known (declare its shape)");
  return r;
}
// Input `input`'s dims where its type has a shape (-1 for an unknown one), else none.
std::vector<int64_t> knownDims(const Ctx& c, int input) {
  const onnx::TypeProto* t = c.getInputType(input);
  std::vector<int64_t> d;
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return d;
  for (const auto& dim : t->tensor_type().shape().dim())
    d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  return d;
}
std::string dimsText(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? ", " : "") + (d[i] < 0 ? std::string("?") : std::to_string(d[i]));
  return s + "]";
}
// The attention ops' qkv_hidden_sizes, where given: three positive sizes that add up to the
// weights' columns (where their shape is known); empty where the attribute is absent.
std::vector<int64_t> qkvHiddenSizes(const Ctx& c) {
  const auto* sizes = attr(c, "qkv_hidden_sizes", onnx::AttributeProto::INTS);
  if (!sizes) return {};
  if (sizes->ints_size() != 3)
    throw std::invalid_argument("qkv_hidden_sizes has " + std::to_string(sizes->ints_size()) +
                                " values; it gives q, k and v's sizes, 3");
  std::vector<int64_t> v(sizes->ints().begin(), sizes->ints().end());
  if (v[0] <= 0 || v[1] <= 0 || v[2] <= 0)
    throw std::invalid_argument("qkv_hidden_sizes " + dimsText(v) + " must be positive");
  const auto w = knownDims(c, 1);
  if (!w.empty() && w.back() >= 0 && v[0] + v[1] + v[2] != w.back())
    throw std::invalid_argument("qkv_hidden_sizes " + dimsText(v) + " add up to " +
                                std::to_string(v[0] + v[1] + v[2]) + ", but weights " +
                                dimsText(w) + " has " + std::to_string(w.back()) + " columns");
  return v;
}

// A 0/1 attribute: other values are refused rather than read as true.
bool flagAttr(const Ctx& c, const char* name, int64_t def) {
  const int64_t v = intAttr(c, name, def);
  if (v != 0 && v != 1)
    throw std::invalid_argument(std::string(name) + " is " + std::to_string(v) +
                                "; it must be 0 or 1");
  return v != 0;
}

// Channels-last tensors ([N, spatial..., C]) through ONNX's channels-first ops: the
// permutation to channels first and the one back, for input `input` (3 or more dimensions).
struct ChannelPerms {
  std::vector<int64_t> toFirst{0}, toLast{0};
};
ChannelPerms channelPerms(const Ctx& c, int input, const char* port) {
  const int rank = rankOf(c, input, port);
  if (rank < 3)
    throw std::invalid_argument(std::string(port) + " has " + std::to_string(rank) +
                                " dimension(s); it needs 3 or more");
  ChannelPerms p;
  p.toFirst.push_back(rank - 1);
  for (int a = 1; a < rank - 1; ++a) p.toFirst.push_back(a);
  for (int a = 2; a < rank; ++a) p.toLast.push_back(a);
  p.toLast.push_back(1);
  return p;
}
void transpose(Body& b, const std::string& in, const std::string& out,
               const std::vector<int64_t>& perm) {
  *b.add("Transpose", {in}, {out}).add_attribute() = onnx::MakeAttribute("perm", perm);
}

// Tokens packed without padding ([tokens, ...]) and their places in [B, S, ...], which
// token_offset's first `tokens` entries name (as RemovePadding writes it): RestorePadding and
// GatedRelativePositionBias unpack them; PackedAttention and PackedMultiHeadAttention also
// attend within each sequence (cumulative_sequence_length gives its length: later keys are
// masked) and pack the result again.
struct PackedTokens {
  Body& b;
  // Each token's place as (sequence, position) ([tokens, 2]), for ScatterND and GatherND, whose
  // outputs keep a rank shape inference knows (a Reshape to computed dims would not).
  explicit PackedTokens(Body& body, const std::string& packed) : b(body) {
    b.add("Shape", {"token_offset"}, {"bs"});
    *b.add("Gather", {"bs", b.scalarInt("seq_at", 1)}, {"seq"}).add_attribute() =
        onnx::MakeAttribute("axis", int64_t{0});
    b.add(
        "Reshape",
        {b.cast("token_offset", onnx::TensorProto::INT64, "offsets"), b.constantInts("flat", {-1})},
        {"offsets_flat"});
    b.add("Shape", {packed}, {"packed_shape"});
    b.add("Slice", {"packed_shape", b.constantInts("zero", {0}), b.constantInts("one", {1})},
          {"tokens"});
    b.add("Slice", {"offsets_flat", "zero", "tokens"}, {"places"});
    b.add("Div", {"places", "seq"}, {"place_seq"});
    b.add("Mod", {"places", "seq"}, {"place_pos"});
    b.add("Unsqueeze", {"place_seq", b.constantInts("last", {-1})}, {"place_seq_col"});
    b.add("Unsqueeze", {"place_pos", "last"}, {"place_pos_col"});
    *b.add("Concat", {"place_seq_col", "place_pos_col"}, {"places_2d"}).add_attribute() =
        onnx::MakeAttribute("axis", int64_t{-1});
  }
  // `in` ([tokens, rest...], of `rank` dimensions) to `out` ([B, S, rest...]), zeros at the
  // padding.
  void unpack(const std::string& in, const std::string& out, int rank) {
    // Zeros of [B, S, 1...] plus zeros of one token's [rest...].
    b.add("CastLike", {"token_offset", in}, {out + "_cells"});
    b.add("Mul", {out + "_cells", b.constantLike(out + "_zero", 0.0f, in)}, {out + "_cell_zeros"});
    std::vector<int64_t> trailing;
    for (int a = 2; a <= rank; ++a) trailing.push_back(a);
    b.add("Unsqueeze", {out + "_cell_zeros", b.constantInts(out + "_trailing", trailing)},
          {out + "_cell_zeros_x"});
    // One token's shape of zeros, whatever values it holds (an Inf in it is not NaN here).
    b.add("Gather", {in, b.scalarInt(out + "_first", 0)}, {out + "_row"});
    onnx::TensorProto yes;
    yes.set_data_type(onnx::TensorProto::BOOL);
    yes.add_int32_data(1);
    *b.add("Constant", {}, {out + "_all"}).add_attribute() = onnx::MakeAttribute("value", yes);
    b.add("Where", {out + "_all", out + "_zero", out + "_row"}, {out + "_row_zeros"});
    b.add("Add", {out + "_cell_zeros_x", out + "_row_zeros"}, {out + "_zeros"});
    b.add("ScatterND", {out + "_zeros", "places_2d", in}, {out});
  }
  // `in` ([B, S, width]) back to `out` ([tokens, width]).
  void pack(const std::string& in, const std::string& out) {
    b.add("GatherND", {in, "places_2d"}, {out});
  }
  // [B, 1, 1, S]: true for the keys within each sequence's length.
  std::string keep() {
    b.add("Slice", {"cumulative_sequence_length", "one", b.constantInts("end", {INT64_MAX})},
          {"ends"});
    b.add("Slice", {"cumulative_sequence_length", "zero", b.constantInts("minus_one", {-1})},
          {"starts"});
    b.add("Sub", {"ends", "starts"}, {"lengths_i"});
    b.cast("lengths_i", onnx::TensorProto::INT64, "lengths");
    b.add("Range", {b.scalarInt("pos0", 0), "seq", b.scalarInt("pos_step", 1)}, {"positions"});
    b.add("Unsqueeze", {"lengths", b.constantInts("col", {1})}, {"lengths_col"});
    b.add("Less", {"positions", "lengths_col"}, {"in_sequence"});
    b.add("Unsqueeze", {"in_sequence", b.constantInts("axes12", {1, 2})}, {"keep"});
    return "keep";
  }
};

// NhwcConv (and NhwcFusedConv's convolution): X [N, spatial..., C] and W [M, kernel..., C /
// group] to channels first, Conv, and `out` back to channels last.
void nhwcConv(const Ctx& c, Body& b, const std::string& out) {
  const ChannelPerms p = channelPerms(c, 0, "X");
  const auto x = knownDims(c, 0), w = knownDims(c, 1);
  const int64_t group = intAttr(c, "group", 1);
  if (group < 1)
    throw std::invalid_argument("group is " + std::to_string(group) + "; it must be 1 or more");
  if (!w.empty() && w.size() != x.size())
    throw std::invalid_argument("W is " + dimsText(w) + " and X " + dimsText(x) +
                                "; W must be [M, kernel..., C / group], of X's rank");
  if (!x.empty() && x.back() >= 0 && x.back() % group != 0)
    throw std::invalid_argument("X's " + std::to_string(x.back()) + " channels do not split into " +
                                std::to_string(group) + " groups");
  if (!w.empty() && x.back() >= 0 && w.back() >= 0 && w.back() != x.back() / group)
    throw std::invalid_argument(
        "W is " + dimsText(w) + " for " + std::to_string(x.back()) + " channels in " +
        std::to_string(group) + " group(s); its last axis must be C / group = " +
        std::to_string(x.back() / group) + " (W is [M, kernel..., C / group], channels last)");
  transpose(b, "X", "X_first", p.toFirst);
  transpose(b, "W", "W_first", p.toFirst);
  Body::copy(c, b.add("Conv", {"X_first", "W_first", c.hasInput(2) ? "B" : ""}, {"conv_first"}),
             {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  transpose(b, "conv_first", out, p.toLast);
}

// BitmaskDropout and BitmaskBiasDropout: Dropout of `x` (ratio and training_mode at those
// inputs), the output into `out`, and its mask packed 32 to a uint32 (element i is bit i % 32 of
// word i / 32). The bits past the last element are set in inference, as ONNX Runtime fills the
// whole mask there, and clear in training.
void bitmaskDropout(const Ctx& c, Body& b, const std::string& x, int ratio, int training,
                    const std::string& out) {
  auto& drop = b.add(
      "Dropout", {x, c.hasInput(ratio) ? "ratio" : "", c.hasInput(training) ? "training_mode" : ""},
      {out, c.hasOutput(1) ? "keep" : ""});
  Body::copy(c, drop, {"seed"});
  if (!c.hasOutput(1)) return;
  b.need("ReduceSum with axes as an input", 13);
  constexpr int kInt64 = onnx::TensorProto::INT64;
  const std::string one = b.constantInts("one_dim", {1});
  // 1 where the node runs as inference (Dropout's rule: not training, or a ratio of 0).
  std::string fill = b.constantInts("inference", {1});
  if (c.hasInput(training)) {
    std::string training_on = b.cast("training_mode", kInt64, "training_on");
    if (c.hasInput(ratio)) {
      b.add("Equal", {"ratio", b.constantLike("ratio_zero", 0.0f, "ratio")}, {"ratio_is_zero"});
      b.add("Not", {"ratio_is_zero"}, {"ratio_nonzero"});
      b.add("Mul", {training_on, b.cast("ratio_nonzero", kInt64, "ratio_on")}, {"dropping"});
      training_on = "dropping";
    }
    b.add("Sub", {"inference", training_on}, {"fill_bit"});
    b.add("Reshape", {"fill_bit", one}, {"fill_one"});
    fill = "fill_one";
  }
  b.add("Reshape", {b.cast("keep", kInt64, "keep_i"), b.constantInts("flat", {-1})}, {"bits"});
  b.add("Size", {"keep"}, {"count"});
  const std::string word = b.scalarInt("word", 32);
  b.add("Mod", {"count", word}, {"over"});
  b.add("Sub", {word, "over"}, {"short"});
  b.add("Mod", {"short", word}, {"tail"});
  b.add("Reshape", {"tail", one}, {"tail_len"});
  b.add("Expand", {fill, "tail_len"}, {"tail_bits"});
  *b.add("Concat", {"bits", "tail_bits"}, {"padded"}).add_attribute() =
      onnx::MakeAttribute("axis", int64_t{0});
  b.add("Reshape", {"padded", b.constantInts("words_shape", {-1, 32})}, {"words_bits"});
  std::vector<int64_t> weights(32);
  for (int k = 0; k < 32; ++k) weights[k] = int64_t{1} << k;
  b.add("Mul", {"words_bits", b.constantInts("bit_values", weights)}, {"bit_words"});
  *b.add("ReduceSum", {"bit_words", b.constantInts("bit_axis", {1})}, {"words"}).add_attribute() =
      onnx::MakeAttribute("keepdims", int64_t{0});
  b.cast("words", onnx::TensorProto::UINT32, "mask");
}
void bitmaskDropoutInference(onnx::InferenceContext& ctx) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
  if (ctx.getNumOutputs() < 2) return;
  onnx::updateOutputElemType(ctx, 1, onnx::TensorProto::UINT32);
  onnx::TensorShapeProto words;
  auto* dim = words.add_dim();
  if (onnx::hasInputShape(ctx, 0)) {
    int64_t n = 1;
    bool known = true;
    for (const auto& d : onnx::getInputShape(ctx, 0).dim()) {
      known &= d.has_dim_value() && d.dim_value() >= 0 &&
               (d.dim_value() == 0 || n <= std::numeric_limits<int64_t>::max() / d.dim_value());
      if (known) n *= d.dim_value();
    }
    if (known) dim->set_dim_value((n + 31) / 32);
  }
  onnx::updateOutputShape(ctx, 1, words);
}

// The number of elements along the last `count` axes of `in`, as a float scalar of the type
// of `like` (for the FFTs' scaling).
std::string signalSize(Body& b, const std::string& in, int64_t count, const std::string& like,
                       const std::string& out) {
  b.add("Shape", {in}, {out + "_shape"});
  b.add("Slice",
        {out + "_shape", b.constantInts(out + "_from", {-count}),
         b.constantInts(out + "_to", {std::numeric_limits<int64_t>::max()})},
        {out + "_dims"});
  *b.add("ReduceProd", {out + "_dims"}, {out + "_n"}).add_attribute() =
      onnx::MakeAttribute("keepdims", int64_t{0});
  b.add("CastLike", {out + "_n", like}, {out});
  return out;
}

// Rfft (inverse false) and Irfft: torch's old rfft and irfft over the last signal_ndim axes of
// a real signal, the spectrum as a last axis of (real, imaginary), through ONNX's DFT.
void fftBody(const Ctx& c, Body& b, bool inverse) {
  const int64_t dims = intAttr(c, "signal_ndim", 1);
  const bool onesided = flagAttr(c, "onesided", 1), normalized = flagAttr(c, "normalized", 0);
  const int rank = rankOf(c, 0, "X");
  if (inverse) {
    const auto x = knownDims(c, 0);
    if (!x.empty() && x.back() >= 0 && x.back() != 2)
      throw std::invalid_argument("X is " + dimsText(x) +
                                  "; a spectrum's last axis holds (real, imaginary), so it must "
                                  "be 2");
  }
  const int signalRank = inverse ? rank - 1 : rank;  // without the complex axis
  if (dims < 1 || dims > 3 || dims > signalRank)
    throw std::invalid_argument("signal_ndim is " + std::to_string(dims) +
                                "; it must be 1, 2 or 3 and "
                                "no more than the " +
                                std::to_string(signalRank) + " signal dimension(s) of X");
  auto dft = [&](const std::string& in, const std::string& out, int64_t axis, bool side) {
    auto& n = b.add("DFT", {in}, {out});
    *n.add_attribute() = onnx::MakeAttribute("axis", axis);
    *n.add_attribute() = onnx::MakeAttribute("inverse", int64_t{inverse});
    *n.add_attribute() = onnx::MakeAttribute("onesided", int64_t{side});
  };
  // The signal axes of the complex tensor, whose last axis is (real, imaginary).
  const int64_t last = signalRank - 1, first = signalRank - dims;
  std::string y;
  if (!inverse) {
    b.add("Unsqueeze", {"X", b.constantInts("complex_axis", {-1})}, {"x_c"});
    dft("x_c", "f_last", last, onesided);
    y = "f_last";
    for (int64_t a = first; a < last; ++a) {
      dft(y, "f_" + std::to_string(a), a, false);
      y = "f_" + std::to_string(a);
    }
  } else {
    y = "X";
    for (int64_t a = first; a < last; ++a) {
      dft(y, "f_" + std::to_string(a), a, false);
      y = "f_" + std::to_string(a);
    }
    if (onesided) {
      // The half spectrum X[0..m) of a real signal of 2m - 1 samples (the length ONNX Runtime
      // gives it) stands for the whole: X[k] for k >= m is conj(X[2m - 1 - k]).
      b.add("Slice",
            {y, b.constantInts("mirror_from", {-1}), b.constantInts("mirror_to", {0}),
             b.constantInts("mirror_axis", {last}), b.constantInts("mirror_step", {-1})},
            {"mirrored"});
      b.add("Mul", {"mirrored", b.constantFloatsLike("conjugate", {1.0f, -1.0f}, "X")},
            {"conjugated"});
      *b.add("Concat", {y, "conjugated"}, {"whole"}).add_attribute() =
          onnx::MakeAttribute("axis", last);
      y = "whole";
    }
    dft(y, "f_inverse", last, false);
    *b.add("Gather", {"f_inverse", b.scalarInt("real_part", 0)}, {"real"}).add_attribute() =
        onnx::MakeAttribute("axis", int64_t{-1});
    y = "real";
  }
  const std::string out = "Y";
  if (!normalized) {
    b.add("Identity", {y}, {out});
    return;
  }
  // Orthonormal: 1/sqrt(n) both ways, where DFT's inverse already divided by n.
  const std::string n = signalSize(b, inverse ? y : "X", dims, "X", "signal_n");
  b.add("Sqrt", {n}, {"sqrt_n"});
  b.add(inverse ? "Mul" : "Div", {y, "sqrt_n"}, {out});
}

// MoE: a mixture of experts. Every expert runs on every row and the rows' routing weights
// (zero outside each row's top k) mix their outputs: k times the arithmetic of running only the
// chosen experts, but plain ai.onnx operators that train.
// Where a mixture of experts finds its expert layers: fcN's float weights [experts, out, in]
// and bias (empty: none) by name, the input whose declared shape the checks read (-1: none),
// and how the routing weights are formed.
struct MoeWiring {
  std::string weight[4], bias[4];
  int dimsFrom[4] = {-1, -1, -1, -1};
  bool fc3 = false;
  // The k chosen weights always sum to 1 (QMoE), not only with normalize_routing_weights.
  bool renormalize = false;
  // Weights read from this input ([rows, experts]) at the experts router_probs chooses,
  // instead of router_probs' softmax (empty: none).
  std::string routerWeights;
};

void moeCore(const Ctx& c, Body& b, const MoeWiring& m);

void moeBody(const Ctx& c, Body& b) {
  MoeWiring m;
  for (int n : {1, 2, 3}) {
    const std::string fc = "fc" + std::to_string(n) + "_experts_";
    m.weight[n] = fc + "weights";
    m.bias[n] = c.hasInput(2 * n + 1) ? fc + "bias" : "";
    m.dimsFrom[n] = 2 * n;
  }
  m.fc3 = c.hasInput(6);
  moeCore(c, b, m);
}

void moeCore(const Ctx& c, Body& b, const MoeWiring& m) {
  if (flagAttr(c, "use_sparse_mixer", 0))
    throw std::invalid_argument(
        "use_sparse_mixer (Phi-3.5-MoE's routing) is not supported; set it to 0 for softmax "
        "top-k routing");
  const int64_t k = intAttr(c, "k", 1);
  if (k < 1) throw std::invalid_argument("k is " + std::to_string(k) + "; it must be 1 or more");
  const std::string act = [&] {
    const std::string a = stringAttr(c, "activation_type");
    return a.empty() ? std::string("relu") : a;
  }();
  const int64_t fusion = intAttr(c, "swiglu_fusion", 0);
  if (fusion < 0 || fusion > 2)
    throw std::invalid_argument("swiglu_fusion is " + std::to_string(fusion) +
                                "; it is 0 (none), 1 (interleaved) or 2 (concatenated)");
  const bool fc3 = m.fc3;
  const bool normalize = m.renormalize || flagAttr(c, "normalize_routing_weights", 0);
  // The shapes, where the model declares them: router_probs [rows, experts], each fcN's
  // weights [experts, out, in].
  const auto x = knownDims(c, 0), router = knownDims(c, 1);
  const int64_t hidden = x.empty() ? -1 : x.back();
  int64_t experts = router.size() == 2 ? router[1] : -1;
  if (!router.empty() && router.size() != 2)
    throw std::invalid_argument("router_probs is " + dimsText(router) +
                                "; it must be [rows, experts]");
  for (int n : {1, 2, 3}) {
    const int in = m.dimsFrom[n];
    if (in < 0 || !c.hasInput(in)) continue;
    const auto w = knownDims(c, in);
    const std::string name = "fc" + std::to_string(n) + "_experts_weights";
    if (w.empty()) continue;
    if (w.size() != 3)
      throw std::invalid_argument(name + " is " + dimsText(w) +
                                  "; it must be [experts, out, in] (3 dimensions)");
    if (experts >= 0 && w[0] >= 0 && w[0] != experts)
      throw std::invalid_argument(name + " is " + dimsText(w) + ", for " + std::to_string(w[0]) +
                                  " experts, but router_probs scores " + std::to_string(experts));
    if (experts < 0) experts = w[0];
    // fc1 and fc3 read the input's features; fc2 writes them.
    const int64_t features = n == 2 ? w[1] : w[2];
    if (hidden >= 0 && features >= 0 && features != hidden)
      throw std::invalid_argument(
          name + " is " + dimsText(w) + "; with " + std::to_string(hidden) +
          " input features it must be [experts, " +
          (n == 2 ? std::to_string(hidden) + ", inter]" : "out, " + std::to_string(hidden) + "]") +
          " (weights are laid out [out, in])");
  }
  if (experts >= 0 && k > experts)
    throw std::invalid_argument("k is " + std::to_string(k) + ", more than the " +
                                std::to_string(experts) + " experts");
  if (act != "relu" && act != "gelu" && act != "silu" && act != "identity" && act != "swiglu")
    throw std::invalid_argument("activation_type '" + act +
                                "' is not one of relu, gelu, silu, identity and swiglu");
  if (act == "swiglu" && fusion != 1 && fusion != 2 && !fc3)
    throw std::invalid_argument(
        "swiglu needs its linear half: swiglu_fusion 1 (interleaved in fc1) or 2 (fc1's second "
        "half), or fc3_experts_weights");
  // Rows of the input, [R, hidden] (Flatten, whose output's rank shape inference knows).
  b.add("Shape", {"input"}, {"in_shape"});
  *b.add("Flatten", {"input"}, {"rows"}).add_attribute() = onnx::MakeAttribute("axis", int64_t{-1});
  // Routing: softmax over the experts, the top k kept (renormalized to sum 1 with
  // normalize_routing_weights), scattered back to [R, experts].
  std::string weights = "top";
  if (m.routerWeights.empty()) {
    *b.add("Softmax", {"router_probs"}, {"probs"}).add_attribute() =
        onnx::MakeAttribute("axis", int64_t{-1});
    b.add("TopK", {"probs", b.constantInts("k", {k})}, {"top", "top_experts"});
  } else {
    b.add("TopK", {"router_probs", b.constantInts("k", {k})}, {"top_probs", "top_experts"});
    *b.add("GatherElements", {m.routerWeights, "top_experts"}, {"top"}).add_attribute() =
        onnx::MakeAttribute("axis", int64_t{1});
  }
  if (normalize) {
    *b.add("ReduceSum", {"top", b.constantInts("expert_axis", {1})}, {"top_sum"}).add_attribute() =
        onnx::MakeAttribute("keepdims", int64_t{1});
    b.add("Div", {"top", "top_sum"}, {weights = "top_normalized"});
  }
  // routing[r, e] = sum over j of weights[r, j] (top_experts[r, j] == e): a one-hot product,
  // which trains where a ScatterElements would not.
  b.add("Shape", {"router_probs"}, {"router_shape"});
  *b.add("Gather", {"router_shape", b.scalarInt("experts_at", -1)}, {"experts"}).add_attribute() =
      onnx::MakeAttribute("axis", int64_t{0});
  b.add("Range", {b.scalarInt("first_expert", 0), "experts", b.scalarInt("expert_step", 1)},
        {"expert_ids"});
  b.add("Unsqueeze", {"top_experts", b.constantInts("choice_axis", {-1})}, {"top_col"});
  b.add("Equal", {"top_col", "expert_ids"}, {"chosen"});
  b.add("CastLike", {"chosen", weights}, {"one_hot"});
  b.add("Unsqueeze", {weights, "choice_axis"}, {"weight_col"});
  b.add("Mul", {"one_hot", "weight_col"}, {"routed"});
  *b.add("ReduceSum", {"routed", b.constantInts("choices_axis", {1})}, {"routing"})
       .add_attribute() = onnx::MakeAttribute("keepdims", int64_t{0});
  // One expert layer: rows x W[e]^T (+ bias[e]) for every expert e, [experts, R, out].
  auto layer = [&](const std::string& in, int n, const std::string& out) {
    const bool bias = !m.bias[n].empty();
    transpose(b, m.weight[n], out + "_wt", {0, 2, 1});
    b.add("MatMul", {in, out + "_wt"}, {bias ? out + "_nb" : out});
    if (!bias) return;
    b.add("Unsqueeze", {m.bias[n], b.constantInts(out + "_row_axis", {1})}, {out + "_b"});
    b.add("Add", {out + "_nb", out + "_b"}, {out});
  };
  layer("rows", 1, "h1");
  std::string a;
  if (act == "swiglu") {
    std::string gate = "h1", linear;
    if (fusion == 1 || fusion == 2) {
      // Interleaved (gate, linear) pairs, or the gates then the linear halves.
      b.add("Shape", {"h1"}, {"h1_shape"});
      b.add("Slice", {"h1_shape", b.constantInts("lead_from", {0}), b.constantInts("lead_to", {2})},
            {"h1_lead"});
      *b.add("Concat",
             {"h1_lead", b.constantInts(fusion == 1 ? "pairs" : "halves",
                                        fusion == 1 ? std::vector<int64_t>{-1, 2}
                                                    : std::vector<int64_t>{2, -1})},
             {"split_shape"})
           .add_attribute() = onnx::MakeAttribute("axis", int64_t{0});
      b.add("Reshape", {"h1", "split_shape"}, {"h1_split"});
      const int64_t axis = fusion == 1 ? 3 : 2;
      *b.add("Gather", {"h1_split", b.scalarInt("gate_at", 0)}, {gate = "gate"}).add_attribute() =
          onnx::MakeAttribute("axis", axis);
      *b.add("Gather", {"h1_split", b.scalarInt("linear_at", 1)}, {linear = "linear"})
           .add_attribute() = onnx::MakeAttribute("axis", axis);
    } else {
      layer("rows", 3, "h3");
      linear = "h3";
    }
    // gate sigmoid(alpha gate) (linear + beta), gate capped at swiglu_limit and linear clipped
    // to +-swiglu_limit where that is set.
    if (const auto* lim = attr(c, "swiglu_limit", onnx::AttributeProto::FLOAT)) {
      const float limit = lim->f();
      b.add("Min", {gate, b.constantLike("limit", limit, gate)}, {"gate_capped"});
      b.add("Clip", {linear, b.constantLike("neg_limit", -limit, linear), "limit"},
            {"linear_clipped"});
      gate = "gate_capped";
      linear = "linear_clipped";
    }
    b.add("Mul", {gate, b.constantLike("alpha", floatAttr(c, "activation_alpha", 1.0f), gate)},
          {"gate_scaled"});
    b.add("Sigmoid", {"gate_scaled"}, {"gate_sig"});
    b.add("Mul", {gate, "gate_sig"}, {"swish"});
    b.add("Add", {linear, b.constantLike("beta", floatAttr(c, "activation_beta", 0.0f), linear)},
          {"linear_b"});
    b.add("Mul", {"swish", "linear_b"}, {a = "activated"});
  } else {
    a = "activated";
    if (act == "relu")
      b.add("Relu", {"h1"}, {a});
    else if (act == "gelu")
      gelu(b, "h1", a, true);
    else if (act == "silu") {
      b.add("Sigmoid", {"h1"}, {"h1_sig"});
      b.add("Mul", {"h1", "h1_sig"}, {a});
    } else
      b.add("Identity", {"h1"}, {a});
    if (fc3) {
      // A gated FFN: the activation times the third layer's output.
      layer("rows", 3, "h3");
      b.add("Mul", {a, "h3"}, {"gated"});
      a = "gated";
    }
  }
  layer(a, 2, "h2");
  // sum over experts of routing[r, e] * h2[e, r, :]
  transpose(b, "routing", "routing_er", {1, 0});
  b.add("Unsqueeze", {"routing_er", b.constantInts("feature_axis", {-1})}, {"routing_w"});
  b.add("Mul", {"h2", "routing_w"}, {"mixed"});
  *b.add("ReduceSum", {"mixed", b.constantInts("experts_axis", {0})}, {"mixed_rows"})
       .add_attribute() = onnx::MakeAttribute("keepdims", int64_t{0});
  b.add("Reshape", {"mixed_rows", "in_shape"}, {"output"});
}

// FusedMatMul and TransposeMatMul: alpha * op(A) @ op(B), into `out`.
void matmulBody(const Ctx& c, Body& b, bool batchAttrs, const std::string& out = "Y") {
  std::string in[2] = {"A", "B"};
  const char* trans[2] = {"transA", "transB"};
  const char* batch[2] = {"transBatchA", "transBatchB"};
  bool anyBatch = false;
  for (int i = 0; i < 2; ++i) anyBatch |= batchAttrs && intAttr(c, batch[i], 0) != 0;
  for (int i = 0; i < 2; ++i) {
    const bool tb = batchAttrs && intAttr(c, batch[i], 0) != 0, t = intAttr(c, trans[i], 0) != 0;
    if (!tb && !t) continue;
    const int rank = rankOf(c, i, in[i].c_str());
    if (rank < 2 || (anyBatch && rank < 3))
      throw std::invalid_argument(
          in[i] + " has " + std::to_string(rank) + " dimension(s); " +
          (anyBatch ? "transBatchA/B need 3 or more" : "a transposed operand needs 2 or more"));
    auto& n = b.add("Transpose", {in[i]}, {in[i] + "_t"});
    *n.add_attribute() = onnx::MakeAttribute("perm", matmulPerm(rank, tb, t));
    in[i] += "_t";
  }
  const float alpha = floatAttr(c, "alpha", 1.0f);
  if (alpha == 1.0f) {
    b.add("MatMul", {in[0], in[1]}, {out});
    return;
  }
  b.add("MatMul", {in[0], in[1]}, {"AB"});
  b.add("Mul", {"AB", b.constantLike("alpha", alpha, "AB")}, {out});
}

// ComplexMul (conj false) and ComplexMulConj: A * B or A * conj(B), complex numbers as a last
// axis of 2.
void complexProduct(Body& b, bool conj) {
  for (const char* v : {"A", "B"})
    for (int part = 0; part < 2; ++part) {
      const std::string name = std::string(v) + (part ? "_im" : "_re");
      *b.add("Gather", {v, b.scalarInt(name + "_at", part)}, {name}).add_attribute() =
          onnx::MakeAttribute("axis", int64_t{-1});
    }
  b.add("Mul", {"A_re", "B_re"}, {"rr"});
  b.add("Mul", {"A_im", "B_im"}, {"ii"});
  b.add("Mul", {"A_re", "B_im"}, {"ri"});
  b.add("Mul", {"A_im", "B_re"}, {"ir"});
  // (a + bi)(c + di) = ac - bd + (ad + bc)i; with conj(B): ac + bd + (bc - ad)i.
  b.add(conj ? "Add" : "Sub", {"rr", "ii"}, {"re"});
  if (conj)
    b.add("Sub", {"ir", "ri"}, {"im"});
  else
    b.add("Add", {"ri", "ir"}, {"im"});
  b.add("Unsqueeze", {"re", b.constantInts("last", {-1})}, {"re_1"});
  b.add("Unsqueeze", {"im", "last"}, {"im_1"});
  *b.add("Concat", {"re_1", "im_1"}, {"C"}).add_attribute() =
      onnx::MakeAttribute("axis", int64_t{-1});
}

// QMoE: MoE with uint8-coded expert weights, dequantized in the body and then the same experts.
// Codes of expert_weight_bits (8, 4 or 2) pack 8 / bits to a byte, the first in the low bits;
// fcN's weights are [experts, out, in / pack]. A scale per row ([experts, out] or [experts, out,
// 1]) or per block of block_size inputs ([experts, out, blocks]); zero points packed like the
// codes (along the rows, or along each row's blocks), else 2^(bits - 1). The k chosen experts'
// weights always sum to 1, as ONNX Runtime forms them; router_weights, where given, supplies
// them instead (renormalized with normalize_routing_weights).
void qmoeBody(const Ctx& c, Body& b) {
  const int64_t bits = intAttr(c, "expert_weight_bits", 4);
  if (bits != 2 && bits != 4 && bits != 8)
    throw std::invalid_argument("expert_weight_bits is " + std::to_string(bits) +
                                "; it must be 2, 4 or 8");
  const std::string quant = stringAttr(c, "quant_type");
  if (!quant.empty() && quant != "int")
    throw std::invalid_argument("quant_type '" + quant +
                                "' is not supported: deepwire runs integer codes (quant_type int)");
  if (c.hasInput(8))
    throw std::invalid_argument(
        "fc3_experts_weights (a separate gate layer) is not supported for QMoE; interleave the "
        "gate into fc1 (swiglu_fusion 1)");
  for (int i = 15; i <= 20; ++i)
    if (c.hasInput(i))
      throw std::invalid_argument("input " + std::to_string(i) +
                                  " (a global or activation scale of the float4/float8 forms) is "
                                  "not supported; leave it empty");
  const int64_t block = intAttr(c, "block_size", 0);
  if (block != 0 && (block < 16 || (block & (block - 1)) != 0))
    throw std::invalid_argument("block_size is " + std::to_string(block) +
                                "; it must be a power of two of 16 or more (or absent: one "
                                "scale per row)");
  const int64_t pack = 8 / bits;
  // Codes of `in` (uint8, packed along its last axis) as int64, one per value.
  auto unpack = [&](const std::string& in, const std::string& out) {
    b.cast(in, onnx::TensorProto::INT64, out + "_bytes");
    if (pack == 1) return out + "_bytes";
    std::vector<std::string> parts;
    for (int64_t p = 0; p < pack; ++p) {
      const std::string part = out + "_" + std::to_string(p);
      b.add("Div", {out + "_bytes", b.constantInts(part + "_shift", {int64_t{1} << (bits * p)})},
            {part + "_hi"});
      b.add("Mod", {part + "_hi", b.constantInts(part + "_mask", {int64_t{1} << bits})},
            {part + "_m"});
      b.add("Unsqueeze", {part + "_m", b.constantInts(part + "_axis", {-1})}, {part});
      parts.push_back(part);
    }
    *b.add("Concat", parts, {out + "_pairs"}).add_attribute() =
        onnx::MakeAttribute("axis", int64_t{-1});
    b.add("Shape", {out + "_bytes"}, {out + "_shape"});
    b.add("Slice",
          {out + "_shape", b.constantInts(out + "_from", {0}), b.constantInts(out + "_to", {-1})},
          {out + "_lead"});
    *b.add("Concat", {out + "_lead", b.constantInts(out + "_rest", {-1})}, {out + "_flat"})
         .add_attribute() = onnx::MakeAttribute("axis", int64_t{0});
    b.add("Reshape", {out + "_pairs", out + "_flat"}, {out});
    return out;
  };
  MoeWiring m;
  for (int n : {1, 2}) {
    const std::string fc = "fc" + std::to_string(n), w = fc + "_experts_weights";
    const int wAt = n == 1 ? 2 : 5, scaleAt = wAt + 1, biasAt = wAt + 2, zpAt = 10 + n;
    const std::string scales = fc + "_scales", zps = fc + "_zero_points";
    if (!c.hasInput(scaleAt))
      throw std::invalid_argument(scales + " is needed: the codes of " + w + " have no scale");
    const auto wd = knownDims(c, wAt), sd = knownDims(c, scaleAt);
    if (!wd.empty() && wd.size() != 3)
      throw std::invalid_argument(w + " is " + dimsText(wd) + "; it must be [experts, out, in / " +
                                  std::to_string(pack) + "]");
    if (sd.empty())
      throw std::invalid_argument("the shape of " + scales +
                                  " is unknown; declare it ([experts, out] per row, or [experts, "
                                  "out, blocks])");
    const bool blocks = sd.size() == 3 && sd[2] != 1;
    if (blocks && block == 0)
      throw std::invalid_argument(scales + " is " + dimsText(sd) +
                                  ", a scale per block, but block_size is not set");
    if (blocks && wd.size() == 3 && wd[2] >= 0 && (wd[2] * pack) % block != 0)
      throw std::invalid_argument(w + " has " + std::to_string(wd[2] * pack) +
                                  " inputs per row, not a whole number of blocks of " +
                                  std::to_string(block));
    const std::string codes = unpack(w, fc + "_codes");  // [E, out, in]
    std::string zp;
    if (c.hasInput(zpAt)) {
      const std::string z = unpack(zps, fc + "_zp_all");
      // Keep as many as there are rows (or blocks): the last byte may hold padding.
      const std::string count = fc + (blocks ? "_blocks" : "_rows");
      b.add("Shape", {blocks ? scales : codes}, {fc + "_count_shape"});
      *b.add("Gather", {fc + "_count_shape", b.constantInts(fc + "_count_at", {blocks ? 2 : 1})},
             {count})
           .add_attribute() = onnx::MakeAttribute("axis", int64_t{0});
      b.add("Slice",
            {z, b.constantInts(fc + "_zp_from", {0}), count,
             b.constantInts(fc + "_zp_axis", {blocks ? 2 : 1})},
            {fc + "_zp_kept"});
      b.add("Unsqueeze", {fc + "_zp_kept", b.constantInts(fc + "_zp_col", {-1})},
            {zp = fc + "_zp"});
    } else {
      zp = b.constantInts(fc + "_zp_implicit", {int64_t{1} << (bits - 1)});
    }
    b.cast(scales, onnx::TensorProto::FLOAT, fc + "_scale_f");
    std::string scale = fc + "_scale_f", grouped = codes;
    if (blocks) {
      // [E, out, blocks, block_size]: each block's codes beside its scale and zero point.
      b.add("Shape", {scales}, {fc + "_scale_shape"});
      *b.add("Concat", {fc + "_scale_shape", b.constantInts(fc + "_bs", {block})},
             {fc + "_grouped_shape"})
           .add_attribute() = onnx::MakeAttribute("axis", int64_t{0});
      b.add("Reshape", {codes, fc + "_grouped_shape"}, {grouped = fc + "_grouped"});
      b.add("Unsqueeze", {scale, b.constantInts(fc + "_scale_col", {-1})}, {fc + "_scale_b"});
      scale = fc + "_scale_b";
    } else if (sd.size() == 2) {
      b.add("Unsqueeze", {scale, b.constantInts(fc + "_scale_col", {-1})}, {fc + "_scale_r"});
      scale = fc + "_scale_r";
    }
    b.add("Sub", {grouped, zp}, {fc + "_centred"});
    b.cast(fc + "_centred", onnx::TensorProto::FLOAT, fc + "_centred_f");
    b.add("Mul", {fc + "_centred_f", scale}, {fc + "_w_grouped"});
    b.add("Shape", {codes}, {fc + "_w_shape"});
    b.add("Reshape", {fc + "_w_grouped", fc + "_w_shape"}, {fc + "_w_f"});
    b.add("CastLike", {fc + "_w_f", "input"}, {m.weight[n] = fc + "_w"});
    m.bias[n] = c.hasInput(biasAt) ? fc + "_experts_bias" : "";
  }
  m.renormalize = !c.hasInput(14);
  if (c.hasInput(14)) m.routerWeights = "router_weights";
  moeCore(c, b, m);
}

// GroupNorm and SkipGroupNorm: `x` (NHWC with channels_last, the default, else NCHW) normalized
// over each group of channels and the spatial axes, times gamma plus beta per channel, then
// SiLU where activation is 1; into `out`.
void groupNormBody(const Ctx& c, Body& b, const std::string& x, const std::string& out) {
  const int64_t groups = intAttr(c, "groups", 0), act = intAttr(c, "activation", -1);
  if (groups <= 0) throw std::invalid_argument("groups must be positive");
  if (act != 0 && act != 1)
    throw std::invalid_argument("activation " + std::to_string(act) + " must be 0 or 1 (SiLU)");
  const bool last = intAttr(c, "channels_last", 1) != 0;
  std::string nchw = x;
  if (last) {
    *b.add("Transpose", {x}, {"gn_nchw"}).add_attribute() =
        onnx::MakeAttribute("perm", std::vector<int64_t>{0, 3, 1, 2});
    nchw = "gn_nchw";
  }
  b.add("Shape", {nchw}, {"gn_shape"});
  b.add("Reshape", {nchw, b.constantInts("gn_grouped", {0, groups, -1})}, {"gn_g"});
  // Each group of each sample normalized in the [N, groups, rest] view, in ops that have
  // gradients (InstanceNormalization has none).
  b.reduceMean("gn_g", {-1}, "gn_mean");
  b.add("Sub", {"gn_g", "gn_mean"}, {"gn_centered"});
  b.add("Mul", {"gn_centered", "gn_centered"}, {"gn_sq"});
  b.reduceMean("gn_sq", {-1}, "gn_var");
  b.add("Add", {"gn_var", b.constantLike("gn_eps", floatAttr(c, "epsilon", 1e-5f), "gn_var")},
        {"gn_var_eps"});
  b.add("Sqrt", {"gn_var_eps"}, {"gn_std"});
  b.add("Div", {"gn_centered", "gn_std"}, {"gn_norm"});
  b.add("Reshape", {"gn_norm", "gn_shape"}, {"gn_back"});
  b.add("Unsqueeze", {"gamma", b.constantInts("gn_axes", {1, 2})}, {"gn_gamma"});
  b.add("Unsqueeze", {"beta", "gn_axes"}, {"gn_beta"});
  b.add("CastLike", {"gn_gamma", nchw}, {"gn_gamma_t"});
  b.add("CastLike", {"gn_beta", nchw}, {"gn_beta_t"});
  b.add("Mul", {"gn_back", "gn_gamma_t"}, {"gn_scaled"});
  std::string y = act == 1 || last ? "gn_affine" : out;
  b.add("Add", {"gn_scaled", "gn_beta_t"}, {y});
  if (act == 1) {
    const std::string silu = last ? "gn_silu" : out;
    b.add("Sigmoid", {y}, {"gn_sig"});
    b.add("Mul", {y, "gn_sig"}, {silu});
    y = silu;
  }
  if (last)
    *b.add("Transpose", {y}, {out}).add_attribute() =
        onnx::MakeAttribute("perm", std::vector<int64_t>{0, 2, 3, 1});
}

// The shared part of the two skip normalizations: S = input + skip (+ bias), the fourth output.
std::string skipSum(const Ctx& c, Body& b, int biasInput) {
  b.add("Add", {"input", "skip"}, {"sum"});
  std::string s = "sum";
  if (c.hasInput(biasInput)) {
    b.add("Add", {"sum", "bias"}, {"sum_b"});
    s = "sum_b";
  }
  if (c.hasOutput(3)) b.add("Identity", {s}, {"input_skip_bias_sum"});
  return s;
}

// The quantized ops as ONNX Runtime's contrib domain defines them: dequantize the inputs,
// apply the float op, quantize the result ((x - zero) * scale, then round(y / scale) + zero,
// saturated). ONNX Runtime's kernels (lookup tables, MLAS) give the same integers, but for a
// rare exact half where QLinearMul rounds its product another way (1 element of 12544 in a
// random test, off by one). `zeroInput` is the index of the zero point's input, which the node
// may leave out.
std::string dequantize(const Ctx& c, Body& b, const std::string& x, const std::string& scale,
                       const std::string& zero, int zeroInput) {
  b.add("DequantizeLinear", {x, scale, c.hasInput(zeroInput) ? zero : ""}, {x + "_f"});
  return x + "_f";
}
// `y` quantized to the type of `like` (a zero point of 0 of that type where the node gives
// none: QuantizeLinear alone would pick uint8).
void quantize(const Ctx& c, Body& b, const std::string& y, const std::string& scale,
              const std::string& zero, int zeroInput, const std::string& like,
              const std::string& out) {
  const std::string zp = c.hasInput(zeroInput) ? zero : b.constantLike("zero_point", 0.0f, like);
  b.add("QuantizeLinear", {y, scale, zp}, {out});
}

// A binary quantized op (QLinearAdd, QLinearMul): A, A_scale, A_zero_point, B, B_scale,
// B_zero_point, C_scale, C_zero_point.
void qlinearBinary(const Ctx& c, Body& b, const char* op) {
  const std::string a = dequantize(c, b, "A", "A_scale", "A_zero_point", 2),
                    bf = dequantize(c, b, "B", "B_scale", "B_zero_point", 5);
  b.add(op, {a, bf}, {"C_f"});
  quantize(c, b, "C_f", "C_scale", "C_zero_point", 7, "A", "C");
}
// A unary one (QLinearSigmoid, QLinearLeakyRelu): X, X_scale, X_zero_point, Y_scale,
// Y_zero_point.
onnx::NodeProto& qlinearUnary(const Ctx& c, Body& b, const char* op) {
  const std::string x = dequantize(c, b, "X", "X_scale", "X_zero_point", 2);
  auto& n = b.add(op, {x}, {"Y_f"});
  quantize(c, b, "Y_f", "Y_scale", "Y_zero_point", 4, "X", "Y");
  return n;
}

// q, k and v plus their parts of the input `bias` ([q | k | v], q's and k's as wide as q's last
// axis): the names of the three sums.
std::tuple<std::string, std::string, std::string> addQkvBias(Body& b, const std::string& q,
                                                             const std::string& k,
                                                             const std::string& v) {
  b.add("Shape", {q}, {"bias_q_shape"});
  b.add("Gather", {"bias_q_shape", b.constantInts("bias_width_at", {-1})}, {"bias_d"});
  b.add("Mul", {"bias_d", b.constantInts("bias_two", {2})}, {"bias_d2"});
  b.add("Slice", {"bias", b.constantInts("bias_from", {0}), "bias_d"}, {"q_bias"});
  b.add("Slice", {"bias", "bias_d", "bias_d2"}, {"k_bias"});
  b.add("Slice", {"bias", "bias_d2", b.constantInts("bias_to", {INT64_MAX})}, {"v_bias"});
  b.add("Add", {q, "q_bias"}, {"q_biased"});
  b.add("Add", {k, "k_bias"}, {"k_biased"});
  b.add("Add", {v, "v_bias"}, {"v_biased"});
  return {"q_biased", "k_biased", "v_biased"};
}

// The scores' additive mask: 0 where `keep` (bool) holds and mask_filter_value (default -10000,
// as ONNX Runtime) where not, plus input `biasInput` (attention_bias) where the node gives it.
// `keep` may be empty; so may the result.
std::string attentionMask(const Ctx& c, Body& b, const std::string& keep, const std::string& like,
                          int biasInput) {
  std::string mask;
  if (!keep.empty()) {
    b.add("Where",
          {keep, b.constantLike("no_mask", 0.0f, like),
           b.constantLike("filter", floatAttr(c, "mask_filter_value", -10000.0f), like)},
          {"mask_bias"});
    mask = "mask_bias";
  }
  if (!c.hasInput(biasInput)) return mask;
  if (mask.empty()) return "attention_bias";
  b.add("Add", {mask, "attention_bias"}, {"mask_sum"});
  return "mask_sum";
}

// The Attention-23 node over 3-D q, k and v, with the node's heads, causality and scale.
void attentionNode(const Ctx& c, Body& b, const std::vector<std::string>& in,
                   const std::vector<std::string>& out) {
  const int64_t heads = intAttr(c, "num_heads", 0);
  if (heads < 1) throw std::invalid_argument("num_heads must be at least 1");
  auto& att = b.add("Attention", in, out);
  *att.add_attribute() = onnx::MakeAttribute("q_num_heads", heads);
  *att.add_attribute() = onnx::MakeAttribute("kv_num_heads", heads);
  if (intAttr(c, "unidirectional", 0))
    *att.add_attribute() = onnx::MakeAttribute("is_causal", int64_t{1});
  if (const auto* sc = attr(c, "scale", onnx::AttributeProto::FLOAT))
    *att.add_attribute() = onnx::MakeAttribute("scale", sc->f());
}

// The element type of input `input` where its type says, else 0.
int elemTypeOf(const Ctx& c, int input) {
  const onnx::TypeProto* t = c.getInputType(input);
  return t && t->has_tensor_type() ? t->tensor_type().elem_type() : 0;
}

// The codes of `bits` bits packed into the uint8 tensor `packed`, low bits first (8 / bits codes
// per byte, in order), as float of shape `shape`.
std::string unpackCodes(Body& b, const std::string& packed, int64_t bits, const std::string& out,
                        const std::vector<int64_t>& shape) {
  const int64_t per = 8 / bits;
  const std::string base =
      per > 1 ? b.constantLike(out + "_base", static_cast<float>(1 << bits), packed) : "";
  std::vector<std::string> codes;
  for (int64_t i = 0; i < per; ++i) {
    std::string v = packed;
    if (i > 0) {
      v = out + "_shift" + std::to_string(i);
      *b.add("BitShift",
             {packed, b.constantLike(out + "_by" + std::to_string(i), static_cast<float>(i * bits),
                                     packed)},
             {v})
           .add_attribute() = onnx::MakeAttribute("direction", std::string("RIGHT"));
    }
    const std::string code = out + "_code" + std::to_string(i);
    if (i + 1 < per)
      b.add("Mod", {v, base}, {code + "_m"});
    else
      b.add("Identity", {v}, {code + "_m"});  // the top bits need no mask
    b.add("Unsqueeze", {code + "_m", b.constantInts(code + "_axis", {-1})}, {code});
    codes.push_back(code);
  }
  *b.add("Concat", codes, {out + "_pairs"}).add_attribute() =
      onnx::MakeAttribute("axis", int64_t{-1});
  b.add("Reshape", {out + "_pairs", b.constantInts(out + "_shape", shape)}, {out + "_u8"});
  return b.cast(out + "_u8", onnx::TensorProto::FLOAT, out);
}

// The int32 product Y_i back in float: times aScale * bScale, plus input `biasInput` ("bias")
// where the node gives it, into Y.
void integerProductToFloat(const Ctx& c, Body& b, const std::string& aScale,
                           const std::string& bScale, int biasInput) {
  b.add("CastLike", {"Y_i", aScale}, {"Y_f"});
  b.add("Mul", {aScale, bScale}, {"ab_scale"});
  b.add("Mul", {"Y_f", "ab_scale"}, {c.hasInput(biasInput) ? "Y_s" : "Y"});
  if (c.hasInput(biasInput)) b.add("Add", {"Y_s", "bias"}, {"Y"});
}

struct MsOp {
  const char* name;
  const char* category;
  const char* doc;
  int bodyOpset;  // the ai.onnx opset the engine reads the body at (the one its kernels want)
  // Null for an op that runs as a kernel of its own (engine/kernels/microsoft_ops.cpp).
  std::function<void(const Ctx&, Body&)> body;
  std::function<void(onnx::InferenceContext&)> infer;
};

// The values a string attribute takes, where it is a choice: the panel lists them, and
// validation refuses others.
const std::vector<std::string>* msChoices(const std::string& op, const std::string& attr) {
  static const std::vector<std::string> kAutoPad{"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  static const std::vector<std::string> kConvActivation{
      "", "Relu", "Tanh", "Sigmoid", "LeakyRelu", "HardSigmoid", "Clip"};
  static const std::map<std::pair<std::string, std::string>, std::vector<std::string>> kChoices = {
      {{"MoE", "activation_type"}, {"relu", "gelu", "silu", "identity", "swiglu"}},
      {{"QMoE", "activation_type"}, {"relu", "gelu", "silu", "identity", "swiglu"}},
      {{"FusedConv", "activation"}, kConvActivation},
      {{"NhwcFusedConv", "activation"}, kConvActivation},
      {{"CropAndResize", "mode"}, {"bilinear", "nearest"}},
      {{"CDist", "metric"}, {"sqeuclidean", "euclidean"}},
      {{"QuantizeBFP", "bfp_type"}, {"0", "1"}},
      {{"DequantizeBFP", "bfp_type"}, {"0", "1"}},
      {{"DequantizeBFP", "dtype"}, {"1", "10", "16"}},
  };
  if (attr == "auto_pad") return &kAutoPad;
  auto it = kChoices.find({op, attr});
  return it == kChoices.end() ? nullptr : &it->second;
}

// What a parameter means, where the op's own doc leaves it unsaid (the schema facts hold no
// doc text).
std::string msParamDoc(const std::string& op, const std::string& attr) {
  static const std::map<std::pair<std::string, std::string>, std::string> kDocs = {
      {{"QuantizeBFP", "bfp_type"}, "0: BFP_1_8_8_16 (8-bit magnitudes), 1: BFP_1_4_8_16 (4-bit)."},
      {{"DequantizeBFP", "bfp_type"}, "The type x was written in: 0 BFP_1_8_8_16, 1 BFP_1_4_8_16."},
      {{"QuantizeBFP", "block_dim"}, "The axis blocks of 16 values run along."},
      {{"DequantizeBFP", "block_dim"}, "The axis the blocks run along, as QuantizeBFP had it."},
      {{"DequantizeBFP", "dtype"}, "The output's type: 1 float, 10 float16, 16 bfloat16."},
  };
  auto it = kDocs.find({op, attr});
  return it == kDocs.end() ? std::string() : it->second;
}

// Whether an INT attribute is a switch (0 or 1): the panel shows a check box. The schema facts
// hold no doc text to judge by, as the ai.onnx catalogue does (looksBoolean), so the flags
// are listed by name.
bool msFlag(const std::string& attr) {
  static const std::set<std::string> kFlags = {"align_corners",
                                               "antialias",
                                               "causal",
                                               "ceil_mode",
                                               "channels_last",
                                               "count_include_pad",
                                               "do_rotary",
                                               "early_stopping",
                                               "exclude_outside",
                                               "input_forget",
                                               "interleaved",
                                               "is_bidirectional",
                                               "is_causal",
                                               "is_inner_broadcast",
                                               "is_packed_batching",
                                               "isinf_only",
                                               "isnan_only",
                                               "keepdims",
                                               "normalize_routing_weights",
                                               "normalized",
                                               "onesided",
                                               "past_present_share_buffer",
                                               "positive",
                                               "qk_l2_norm",
                                               "rotary_interleaved",
                                               "sliding_window_cache",
                                               "spatial",
                                               "swiglu_fusion",
                                               "training_mode",
                                               "transA",
                                               "transB",
                                               "transBatchA",
                                               "transBatchB",
                                               "unidirectional",
                                               "upper",
                                               "use_sparse_mixer",
                                               "weight_prepacked"};
  return kFlags.count(attr) > 0;
}

// Shape inference: the output as input 0 (type and shape).
void sameAsInput0(onnx::InferenceContext& ctx) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
}

// The skip normalizations' outputs: output and input_skip_bias_sum as the input; mean and
// inv_std_var float, of the input's shape with a last dimension of 1.
void inferSkipNorm(onnx::InferenceContext& ctx) {
  for (size_t o : {size_t(0), size_t(3)}) {
    if (o >= ctx.getNumOutputs()) continue;
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
    if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, o);
  }
  for (size_t o : {size_t(1), size_t(2)}) {
    if (o >= ctx.getNumOutputs()) continue;
    onnx::updateOutputElemType(ctx, o, onnx::TensorProto::FLOAT);
    if (!onnx::hasInputShape(ctx, 0)) continue;
    onnx::TensorShapeProto s = onnx::getInputShape(ctx, 0);
    if (s.dim_size() == 0) continue;
    s.mutable_dim(s.dim_size() - 1)->set_dim_value(1);
    onnx::updateOutputShape(ctx, o, s);
  }
}

// The LSTM variants' outputs: Y [T, directions, N, hidden], Y_h and Y_c [directions, N,
// hidden], from X [T, N, ...], direction and hidden_size.
void inferContribLstm(onnx::InferenceContext& ctx) {
  for (size_t i = 0; i < ctx.getNumOutputs(); ++i)
    onnx::updateOutputElemType(ctx, i, onnx::TensorProto::FLOAT);
  const auto* hidden = ctx.getAttribute("hidden_size");
  if (!hidden || !onnx::hasInputShape(ctx, 0)) return;
  const auto& x = onnx::getInputShape(ctx, 0);
  if (x.dim_size() != 3) return;
  const auto* dir = ctx.getAttribute("direction");
  const int64_t dirs = dir && dir->s() == "bidirectional" ? 2 : 1;
  onnx::TensorShapeProto y, state;
  *y.add_dim() = x.dim(0);
  y.add_dim()->set_dim_value(dirs);
  *y.add_dim() = x.dim(1);
  y.add_dim()->set_dim_value(hidden->i());
  state.add_dim()->set_dim_value(dirs);
  *state.add_dim() = x.dim(1);
  state.add_dim()->set_dim_value(hidden->i());
  if (ctx.getNumOutputs() > 0) onnx::updateOutputShape(ctx, 0, y);
  for (size_t i = 1; i < ctx.getNumOutputs() && i < 3; ++i) onnx::updateOutputShape(ctx, i, state);
}

// QuantizeBFP's and DequantizeBFP's attributes, judged where `check` sees them (the kernel
// refuses the same at run time): the two defined BFP types, and block_dim within the tensor's
// `rank` where that is known (-1 otherwise).
void checkBfpAttributes(onnx::InferenceContext& ctx, int64_t rank) {
  const auto* type = ctx.getAttribute("bfp_type");
  if (type)
    if (const std::string why = bfpTypeProblem(type->i()); !why.empty()) fail_shape_inference(why);
  const auto* dim = ctx.getAttribute("block_dim");
  const int64_t d = dim ? dim->i() : -1;
  if (rank >= 0 && (d < -rank || d >= rank))
    fail_shape_inference("block_dim ", d, " is outside the ", rank, " axes of the tensor");
}

const std::vector<MsOp>& msOps() {
  static const std::vector<MsOp> ops = {
      {"DynamicQuantizeLSTM", "rnn",
       "LSTM (gates i, o, f, c; as ai.onnx LSTM's cell, lengths and directions) with int8 or "
       "uint8 weights W [directions, input, 4 hidden] and R [directions, hidden, 4 hidden] "
       "(transposed against LSTM's), a scale per direction or per column and one zero point "
       "per direction. Each product quantizes its float side to uint8 over its own range "
       "(the input once over all steps, h every step) and multiplies in int32, as ONNX "
       "Runtime does on one thread.",
       17, nullptr, inferContribLstm},
      {"AttnLSTM", "rnn",
       "LSTM with additive (Bahdanau) attention over a memory M [batch, memory steps, depth]: "
       "after each step, scores V . tanh(M MW + h QW) over each row's memory_seq_lens give a "
       "context of M, mixed with h through AW [directions, hidden + depth, width] when given; "
       "this attention state joins the next step's input (W [directions, 4 hidden, input + "
       "width]). Gates i, o, f, c as ai.onnx LSTM; sequence lengths from 1.",
       17, nullptr, inferContribLstm},
      {"Attention", "nn",
       "BERT-style self-attention of num_heads heads: input [B, S, hidden] times the packed "
       "weights (hidden x (q + k + v), sizes from qkv_hidden_sizes or three equal parts) plus "
       "bias gives queries, keys and values. mask_index is either the valid length of each "
       "sequence ([B]: later keys are masked), or 1 to attend and 0 to mask ([B, T] or [B, S, "
       "T]); masked scores get mask_filter_value (default -10000). attention_bias is added to "
       "the scores, past ([2, B, heads, P, size]) goes in front of the keys and values and "
       "present returns them joined; unidirectional makes it causal.",
       23,
       [](const Ctx& c, Body& b) {
         b.need("Attention", 23);
         if (intAttr(c, "do_rotary", 0) != 0) throw std::invalid_argument("do_rotary is not taken");
         if (c.hasInput(6))
           throw std::invalid_argument("past_sequence_length (a shared buffer) is not taken");
         b.add("MatMul", {"input", "weights"}, {"qkv_mm"});
         std::string qkv = "qkv_mm";
         if (c.hasInput(2)) {
           b.add("Add", {"qkv_mm", "bias"}, {"qkv"});
           qkv = "qkv";
         }
         const std::vector<int64_t> sizes = qkvHiddenSizes(c);
         if (!sizes.empty()) {
           *b.add("Split", {qkv, b.constantInts("sizes", sizes)}, {"q", "k", "v"}).add_attribute() =
               onnx::MakeAttribute("axis", int64_t{-1});
         } else {
           auto& split = b.add("Split", {qkv}, {"q", "k", "v"});
           *split.add_attribute() = onnx::MakeAttribute("axis", int64_t{-1});
           *split.add_attribute() = onnx::MakeAttribute("num_outputs", int64_t{3});
         }
         std::string pastK, pastV;
         if (c.hasInput(4)) {
           // past = [key; value], each [B, heads, P, size].
           auto& split = b.add("Split", {"past"}, {"past_k5", "past_v5"});
           *split.add_attribute() = onnx::MakeAttribute("axis", int64_t{0});
           *split.add_attribute() = onnx::MakeAttribute("num_outputs", int64_t{2});
           b.add("Squeeze", {"past_k5", b.constantInts("axis0", {0})}, {"past_k"});
           b.add("Squeeze", {"past_v5", "axis0"}, {"past_v"});
           pastK = "past_k", pastV = "past_v";
         }
         std::string keep;
         if (c.hasInput(3)) {
           const int rank = rankOf(c, 3, "mask_index");
           if (rank == 1) {
             // Valid lengths: key j of sequence b attends while j < mask_index[b].
             b.add("Shape", {"k"}, {"k_shape"});
             b.add("Gather", {"k_shape", b.constantInts("seq_axis", {1})}, {"keys"});
             std::string total = "keys";
             if (c.hasInput(4)) {
               b.add("Shape", {"past_k"}, {"past_shape"});
               b.add("Gather", {"past_shape", b.constantInts("past_axis", {2})}, {"past_len"});
               b.add("Add", {"keys", "past_len"}, {"total"});
               total = "total";
             }
             b.add("Squeeze", {total}, {"total_0d"});
             b.add("Range", {b.scalarInt("zero_0d", 0), "total_0d", b.scalarInt("one_0d", 1)},
                   {"positions"});
             b.add("Unsqueeze",
                   {b.cast("mask_index", onnx::TensorProto::INT64, "lengths"),
                    b.constantInts("axis1", {1})},
                   {"lengths_b1"});
             b.add("Less", {"positions", "lengths_b1"}, {"keep_bt"});
             b.add("Unsqueeze", {"keep_bt", b.constantInts("axes12", {1, 2})}, {"keep"});
           } else if (rank == 2 || rank == 3) {
             // 1 attends, 0 is masked: [B, T] for every query, or [B, S, T].
             b.add("Unsqueeze",
                   {b.cast("mask_index", onnx::TensorProto::BOOL, "keep_raw"),
                    b.constantInts("mask_axes", rank == 2 ? std::vector<int64_t>{1, 2}
                                                          : std::vector<int64_t>{1})},
                   {"keep"});
           } else {
             throw std::invalid_argument("mask_index of " + std::to_string(rank) +
                                         " dimensions is not taken (1, 2 or 3)");
           }
           keep = "keep";
         }
         const bool present = c.hasOutput(1);
         attentionNode(c, b, {"q", "k", "v", attentionMask(c, b, keep, "input", 5), pastK, pastV},
                       {"output", present ? "present_k" : "", present ? "present_v" : ""});
         if (present) {
           b.add("Unsqueeze", {"present_k", b.constantInts("axis_0", {0})}, {"present_k5"});
           b.add("Unsqueeze", {"present_v", "axis_0"}, {"present_v5"});
           *b.add("Concat", {"present_k5", "present_v5"}, {"present"}).add_attribute() =
               onnx::MakeAttribute("axis", int64_t{0});
         }
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"BiasGelu", "math",
       "Gelu(A + B): the bias B (usually 1-D, over the last axis) is added before the exact, "
       "erf-based Gelu.",
       20,
       [](const Ctx&, Body& b) {
         b.add("Add", {"A", "B"}, {"AB"});
         gelu(b, "AB", "C", false);
       },
       sameAsInput0},
      {"CDist", "math",
       "Pairwise distances between the rows of A (N x D) and of B (M x D): an N x M matrix of "
       "squared Euclidean distances (metric sqeuclidean) or of Euclidean ones (euclidean).",
       17,
       [](const Ctx& c, Body& b) {
         for (int i = 0; i < 2; ++i)
           if (const int r = knownRank(c, i); r >= 0 && r != 2)
             throw std::invalid_argument(std::string(i ? "B" : "A") + " has " + std::to_string(r) +
                                         " dimension(s); CDist takes A (N x D) and B (M x D)");
         const std::string metric = stringAttr(c, "metric");
         if (metric != "sqeuclidean" && metric != "euclidean" && !metric.empty())
           throw std::invalid_argument("metric '" + metric + "' is not sqeuclidean or euclidean");
         b.add("Unsqueeze", {"A", b.constantInts("axis1", {1})}, {"A3"});
         b.add("Unsqueeze", {"B", b.constantInts("axis0", {0})}, {"B3"});
         b.add("Sub", {"A3", "B3"}, {"diff"});
         b.add("Mul", {"diff", "diff"}, {"sq"});
         auto& r = b.add("ReduceSum", {"sq", b.constantInts("axis2", {2})},
                         {metric == "euclidean" ? "d2" : "C"});
         *r.add_attribute() = onnx::MakeAttribute("keepdims", int64_t{0});
         if (metric == "euclidean") b.add("Sqrt", {"d2"}, {"C"});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (!onnx::hasNInputShapes(ctx, 2)) return;
         const auto &a = onnx::getInputShape(ctx, 0), &bs = onnx::getInputShape(ctx, 1);
         if (a.dim_size() != 2 || bs.dim_size() != 2)
           fail_shape_inference("CDist: A and B must be 2-D");
         onnx::TensorShapeProto s;
         *s.add_dim() = a.dim(0);
         *s.add_dim() = bs.dim(0);
         onnx::updateOutputShape(ctx, 0, s);
       }},
      {"EmbedLayerNormalization", "nn",
       "A BERT model's input layer: the word embeddings of input_ids, plus the position "
       "embeddings (of position_ids, or of 0, 1, ... along the sequence) and the segment "
       "embeddings of segment_ids, layer-normalized over the hidden axis with gamma and beta. "
       "mask_index is the count of ones in each row of mask (zeros without one); "
       "embedding_sum the sum before the normalization.",
       17,
       [](const Ctx& c, Body& b) {
         b.add("Gather", {"word_embedding", "input_ids"}, {"words"});
         std::string pos = "position_ids";
         // [B, S], where positions or mask_index come from it.
         if (!c.hasInput(8) || (c.hasOutput(1) && !c.hasInput(7)))
           b.add("Shape", {"input_ids"}, {"ids_shape"});
         if (!c.hasInput(8)) {
           b.add("Gather", {"ids_shape", b.constantInts("one", {1})}, {"seq_1d"});
           b.add("Squeeze", {"seq_1d"}, {"seq"});
           b.add("Range", {b.scalarInt("start", 0), "seq", b.scalarInt("step", 1)}, {"positions"});
           pos = "positions";
         }
         b.add("Gather", {"position_embedding", pos}, {"pos_emb"});
         b.add("Add", {"words", "pos_emb"}, {"sum_wp"});
         std::string sum = "sum_wp";
         if (c.hasInput(1) && c.hasInput(4)) {
           b.add("Gather", {"segment_embedding", "segment_ids"}, {"seg_emb"});
           b.add("Add", {sum, "seg_emb"}, {"sum_all"});
           sum = "sum_all";
         }
         auto& ln = b.add("LayerNormalization", {sum, "gamma", "beta"}, {"output"});
         *ln.add_attribute() = onnx::MakeAttribute("axis", int64_t{-1});
         *ln.add_attribute() = onnx::MakeAttribute("epsilon", floatAttr(c, "epsilon", 1e-12f));
         if (c.hasOutput(1)) {
           if (c.hasInput(7)) {
             *b.add("ReduceSum", {"mask", b.constantInts("axis1", {1})}, {"mask_index"})
                  .add_attribute() = onnx::MakeAttribute("keepdims", int64_t{0});
           } else {
             b.add("Gather", {"ids_shape", b.constantInts("zero", {0})}, {"batch"});
             onnx::TensorProto zero;
             zero.set_data_type(onnx::TensorProto::INT32);
             zero.add_dims(1);
             zero.add_int32_data(0);
             *b.add("ConstantOfShape", {"batch"}, {"mask_index"}).add_attribute() =
                 onnx::MakeAttribute("value", zero);
           }
         }
         if (c.hasOutput(2)) b.add("Identity", {sum}, {"embedding_sum"});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 2, 0);
         if (ctx.getNumOutputs() > 1) onnx::updateOutputElemType(ctx, 1, onnx::TensorProto::INT32);
         if (ctx.getNumOutputs() > 2) onnx::propagateElemTypeFromInputToOutput(ctx, 2, 2);
       }},
      {"ExpandDims", "tensor",
       "Inserts a dimension of size 1 into X at the position given by the scalar input axis "
       "(negative counts from the end of the result), like Unsqueeze with one axis.",
       17,
       [](const Ctx&, Body& b) {
         b.add("Reshape",
               {b.cast("axis", onnx::TensorProto::INT64, "axis64"), b.constantInts("one", {1})},
               {"axes"});
         b.add("Unsqueeze", {"X", "axes"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"FastGelu", "math",
       "Gelu in its tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), of X "
       "plus the optional bias.",
       20,
       [](const Ctx& c, Body& b) {
         std::string x = "X";
         if (c.hasInput(1)) {
           b.add("Add", {"X", "bias"}, {"Xb"});
           x = "Xb";
         }
         gelu(b, x, "Y", true);
       },
       sameAsInput0},
      {"FusedConv", "nn",
       "A Conv (the same attributes) whose output, plus the optional Z, goes through an "
       "activation: Relu, Tanh, Sigmoid, LeakyRelu (activation_params: alpha), HardSigmoid "
       "(alpha, beta) or Clip (min, max). ONNX Runtime writes it when it fuses a Conv with the "
       "Add and activation after it.",
       17,
       [](const Ctx& c, Body& b) {
         auto& conv = b.add("Conv", {"X", "W", "B"}, {"conv"});
         Body::copy(c, conv, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
         std::string y = "conv";
         if (c.hasInput(3)) {
           b.add("Add", {"conv", "Z"}, {"sum"});
           y = "sum";
         }
         const auto* p = attr(c, "activation_params", onnx::AttributeProto::FLOATS);
         convActivation(
             b, stringAttr(c, "activation"),
             p ? std::vector<float>(p->floats().begin(), p->floats().end()) : std::vector<float>{},
             y, "Y");
       },
       [](onnx::InferenceContext& ctx) { inferAs("Conv", 17, ctx); }},
      {"FusedGemm", "math",
       "A Gemm (the same attributes) followed by an activation: Relu, Tanh, Sigmoid, Softplus, "
       "LeakyRelu, Elu and ThresholdedRelu (activation_alpha), HardSigmoid (activation_alpha, "
       "activation_beta), Selu (activation_alpha, activation_gamma), or ScaledTanh and "
       "ParametricSoftplus, alpha f(beta x) (activation_alpha, activation_beta).",
       17,
       [](const Ctx& c, Body& b) {
         auto& gemm = b.add("Gemm", {"A", "B", "C"}, {"gemm"});
         Body::copy(c, gemm, {"alpha", "beta", "transA", "transB"});
         gemmActivation(c, b, stringAttr(c, "activation"), "gemm", "Y");
       },
       [](onnx::InferenceContext& ctx) { inferAs("Gemm", 17, ctx); }},
      {"FusedMatMul", "math",
       "alpha times the matrix product of A and B, each optionally transposed over its last two "
       "axes (transA, transB). transBatchA/B first move an operand's leading axis to just "
       "before its last one (both operands then need the same rank, at least 3).",
       17, [](const Ctx& c, Body& b) { matmulBody(c, b, true); },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"GatherND", "tensor",
       "Gathers slices of data: each row of the last axis of indices is an index into data's "
       "leading axes (negative ones count from the end), as the standard GatherND with "
       "batch_dims 0.",
       17,
       [](const Ctx&, Body& b) {
         b.add("GatherND", {"data", "indices"}, {"output"});
       },
       [](onnx::InferenceContext& ctx) { inferAs("GatherND", 12, ctx); }},
      {"Gelu", "math",
       "The exact Gelu, 0.5 x (1 + erf(x / sqrt(2))), as ONNX Runtime's contrib op (the "
       "standard Gelu arrived in opset 20).",
       20, [](const Ctx&, Body& b) { gelu(b, "X", "Y", false); }, sameAsInput0},
      {"GridSample", "tensor",
       "Samples X (N, C, H, W) at the normalized positions of Grid (N, H_out, W_out, 2), as the "
       "standard GridSample: mode bilinear, nearest or bicubic, padding_mode zeros, border or "
       "reflection, align_corners.",
       17,
       [](const Ctx& c, Body& b) {
         Body::copy(c, b.add("GridSample", {"X", "Grid"}, {"Y"}),
                    {"align_corners", "mode", "padding_mode"});
       },
       [](onnx::InferenceContext& ctx) { inferAs("GridSample", 16, ctx); }},
      {"MultiHeadAttention", "nn",
       "Attention of num_heads heads over query [B, S, D] and key and value [B, L, D] and "
       "[B, L, Dv], with the optional packed bias (D + D + Dv, added to each), key_padding_mask "
       "[B, L] (0 masks the key with mask_filter_value, default -10000), attention_bias added "
       "to the scores, past_key and past_value [B, heads, P, size] in front of key and value "
       "(present_key and present_value return them joined), unidirectional (causal) and scale "
       "(default 1 / sqrt(size)). The packed query-key-value and 4-D key forms are not taken.",
       23,
       [](const Ctx& c, Body& b) {
         b.need("Attention", 23);
         if (!c.hasInput(1) || !c.hasInput(2))
           throw std::invalid_argument(
               "key and value must be given (the packed query-key-value form is not taken)");
         for (int i : {0, 1, 2})
           if (const int r = knownRank(c, i); r >= 0 && r != 3)
             throw std::invalid_argument(
                 std::string(i == 0   ? "query"
                             : i == 1 ? "key"
                                      : "value") +
                 " has " + std::to_string(r) +
                 " dimensions; it must be [batch, sequence, hidden] (the packed and 4-D forms "
                 "are not taken)");
         if (c.hasInput(8) || c.hasInput(9))
           throw std::invalid_argument(
               "past_sequence_length and cache_indirection (beam search) are not taken");
         if (c.hasOutput(3)) throw std::invalid_argument("output qk is not computed");
         std::string q = "query", k = "key", v = "value";
         if (c.hasInput(3)) std::tie(q, k, v) = addQkvBias(b, q, k, v);
         std::string keep;
         if (c.hasInput(4)) {
           // [B, L] of 1 (attend) and 0 (masked).
           b.add("Unsqueeze", {"key_padding_mask", b.constantInts("axes12", {1, 2})}, {"kpm4"});
           keep = b.cast("kpm4", onnx::TensorProto::BOOL, "keep");
         }
         attentionNode(c, b,
                       {q, k, v, attentionMask(c, b, keep, "query", 5), "past_key", "past_value"},
                       {"output", c.hasOutput(1) ? "present_key" : "",
                        c.hasOutput(2) ? "present_value" : ""});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < 3 && o < ctx.getNumOutputs(); ++o)
           onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
       }},
      {"Pad", "tensor",
       "Pads data by the amounts in the pads input (begin values for every axis, then end "
       "values; shaped [2 * rank] or [1, 2 * rank]) in mode constant (with value, default 0), "
       "reflect or edge.",
       17,
       [](const Ctx& c, Body& b) {
         b.add("Reshape", {"pads", b.constantInts("flat", {-1})}, {"pads_1d"});
         Body::copy(c, b.add("Pad", {"data", "pads_1d", "value"}, {"output"}), {"mode"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"DequantizeLinear", "quantization",
       "(x - x_zero_point) * x_scale in float, per tensor or, with a 1-D scale, per slice of "
       "axis (default 1): the standard DequantizeLinear for 8- and 32-bit integers.",
       17,
       [](const Ctx& c, Body& b) {
         Body::copy(c, b.add("DequantizeLinear", {"x", "x_scale", "x_zero_point"}, {"y"}),
                    {"axis"});
       },
       [](onnx::InferenceContext& ctx) { inferAs("DequantizeLinear", 13, ctx); }},
      {"QuantizeLinear", "quantization",
       "x / y_scale rounded to the nearest even integer, plus y_zero_point, saturated to int8 "
       "or uint8 (the zero point's type, uint8 without one), per tensor or per slice of axis: "
       "the standard QuantizeLinear.",
       17,
       [](const Ctx& c, Body& b) {
         Body::copy(c, b.add("QuantizeLinear", {"x", "y_scale", "y_zero_point"}, {"y"}), {"axis"});
       },
       [](onnx::InferenceContext& ctx) { inferAs("QuantizeLinear", 13, ctx); }},
      {"QLinearAdd", "quantization",
       "A + B on quantized tensors: each dequantized with its scale and zero point, added in "
       "float, and quantized with C_scale and C_zero_point (8-bit, A's type).",
       17, [](const Ctx& c, Body& b) { qlinearBinary(c, b, "Add"); }, sameAsInput0},
      {"QLinearConcat", "quantization",
       "Concatenates quantized tensors along axis: the inputs come as triples (tensor, scale, "
       "zero point), each dequantized, and the result is quantized with Y_scale and "
       "Y_zero_point.",
       17,
       [](const Ctx& c, Body& b) {
         std::vector<std::string> parts;
         for (int k = 0; c.hasInput(2 + 3 * k); ++k) {
           if (3 * k + 2 >= kMaxInputs) throw std::invalid_argument("too many inputs");
           const std::string x = "inputs_" + std::to_string(3 * k);
           parts.push_back(dequantize(c, b, x, "inputs_" + std::to_string(3 * k + 1),
                                      "inputs_" + std::to_string(3 * k + 2), 2 + 3 * k + 2));
         }
         if (parts.empty()) throw std::invalid_argument("there are no tensors to concatenate");
         Body::copy(c, b.add("Concat", parts, {"Y_f"}), {"axis"});
         b.add("QuantizeLinear", {"Y_f", "Y_scale", "Y_zero_point"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) {
         if (ctx.getNumInputs() > 1) onnx::propagateElemTypeFromInputToOutput(ctx, 1, 0);
       }},
      {"QLinearReduceMean", "quantization",
       "ReduceMean on quantized data over axes (keepdims as ReduceMean): dequantized with "
       "data_scale and data_zero_point, averaged in float, quantized with reduced_scale and "
       "reduced_zero_point.",
       18,
       [](const Ctx& c, Body& b) {
         const std::string x = dequantize(c, b, "data", "data_scale", "data_zero_point", 2);
         const auto* axes = attr(c, "axes", onnx::AttributeProto::INTS);
         if (!axes) throw std::invalid_argument("the axes attribute is required");
         const std::vector<int64_t> list(axes->ints().begin(), axes->ints().end());
         *b.reduceMean(x, list, "reduced_f").add_attribute() =
             onnx::MakeAttribute("keepdims", intAttr(c, "keepdims", 1));
         quantize(c, b, "reduced_f", "reduced_scale", "reduced_zero_point", 4, "data", "reduced");
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"QLinearGlobalAveragePool", "quantization",
       "The mean over the spatial axes of a quantized X (NCHW, or NHWC with channels_last), "
       "quantized with y_scale and y_zero_point: the sum of x - x_zero_point in integers, "
       "times x_scale / (y_scale * count), rounded.",
       17,
       [](const Ctx& c, Body& b) {
         // In integers as ONNX Runtime sums: S = sum(x - x_zero_point) over the plane, then
         // round(S * (x_scale / (y_scale * count))) + y_zero_point. The mean of the dequantized
         // values in float rounds differently at halves.
         const int rank = rankOf(c, 0, "X");
         if (rank < 3)
           throw std::invalid_argument("X has " + std::to_string(rank) +
                                       " dimension(s); it needs 3 or more");
         std::vector<int64_t> axes;
         const bool last = intAttr(c, "channels_last", 0) != 0;
         for (int a = last ? 1 : 2; a < (last ? rank - 1 : rank); ++a) axes.push_back(a);
         constexpr int kInt32 = onnx::TensorProto::INT32, kFloat = onnx::TensorProto::FLOAT;
         b.add("Sub", {b.cast("X", kInt32, "X_i"), b.cast("x_zero_point", kInt32, "zero_i")},
               {"centered"});
         b.add("ReduceSum", {"centered", b.constantInts("axes", axes)}, {"sum"});
         b.cast("sum", kFloat, "sum_f");
         b.add("Shape", {"X"}, {"shape"});
         b.add("Gather", {"shape", "axes"}, {"plane"});
         *b.add("ReduceProd", {"plane"}, {"count"}).add_attribute() =
             onnx::MakeAttribute("keepdims", int64_t{0});
         b.add("Mul", {"y_scale", b.cast("count", kFloat, "count_f")}, {"denominator"});
         b.add("Div", {"x_scale", "denominator"}, {"ratio"});
         b.add("Mul", {"sum_f", "ratio"}, {"Y_f"});
         b.add("QuantizeLinear", {"Y_f", b.constantLike("one", 1.0f, "x_scale"), "y_zero_point"},
               {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"QLinearLeakyRelu", "quantization",
       "LeakyRelu (alpha, default 0.01) on a quantized X: dequantized, activated in float and "
       "quantized with Y_scale and Y_zero_point.",
       17,
       [](const Ctx& c, Body& b) {
         *qlinearUnary(c, b, "LeakyRelu").add_attribute() =
             onnx::MakeAttribute("alpha", floatAttr(c, "alpha", 0.01f));
       },
       sameAsInput0},
      {"QLinearMul", "quantization",
       "A * B on quantized tensors: each dequantized with its scale and zero point, multiplied "
       "in float, and quantized with C_scale and C_zero_point (8-bit, A's type).",
       17, [](const Ctx& c, Body& b) { qlinearBinary(c, b, "Mul"); }, sameAsInput0},
      {"QLinearSigmoid", "quantization",
       "Sigmoid on a quantized X: dequantized, activated in float and quantized with Y_scale "
       "and Y_zero_point.",
       17, [](const Ctx& c, Body& b) { qlinearUnary(c, b, "Sigmoid"); }, sameAsInput0},
      {"QLinearSoftmax", "quantization",
       "Softmax over axis of a quantized X: dequantized, normalized in float and quantized with "
       "y_scale and y_zero_point. With opset below 13 the axes from axis on are normalized "
       "together, as Softmax-11 does.",
       17,
       [](const Ctx& c, Body& b) {
         const std::string x = dequantize(c, b, "X", "X_scale", "x_zero_point", 2);
         const int64_t axis = intAttr(c, "axis", -1);
         if (intAttr(c, "opset", 13) >= 13) {
           *b.add("Softmax", {x}, {"Y_f"}).add_attribute() = onnx::MakeAttribute("axis", axis);
         } else {
           b.add("Shape", {x}, {"x_shape"});
           *b.add("Flatten", {x}, {"x_2d"}).add_attribute() = onnx::MakeAttribute("axis", axis);
           *b.add("Softmax", {"x_2d"}, {"y_2d"}).add_attribute() =
               onnx::MakeAttribute("axis", int64_t{1});
           b.add("Reshape", {"y_2d", "x_shape"}, {"Y_f"});
         }
         b.add("QuantizeLinear", {"Y_f", "y_scale", "y_zero_point"}, {"Y"});
       },
       sameAsInput0},
      {"QuantizeWithOrder", "quantization",
       "input (float or float16) times the float32 reciprocal of scale_input, rounded to "
       "nearest even and saturated to int8, read in order_input and written in "
       "order_output. Orders are cuBLASLt's: 0 COL, 1 ROW, 2 COL32, 3 COL4_4R2_8C, 4 "
       "COL32_2R_4R4, over the last two axes (a batch of matrices); the tiled ones need "
       "whole tiles.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT8);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"DequantizeWithOrder", "quantization",
       "int8 input times scale_input, as `to` (1 float, 10 float16), read in order_input "
       "and written in order_output. Orders are cuBLASLt's: 0 COL, 1 ROW, 2 COL32, 3 "
       "COL4_4R2_8C, 4 COL32_2R_4R4, over the last two axes (a batch of matrices); the "
       "tiled ones need whole tiles.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         const auto* to = ctx.getAttribute("to");
         onnx::updateOutputElemType(ctx, 0, to ? static_cast<int32_t>(to->i()) : 1);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"QuantizeBFP", "quantization",
       "x (float, float16 or bfloat16) as block floating point bytes y, with x's shape and "
       "row-major strides. Blocks of 16 values along block_dim share an 8-bit exponent E "
       "(bias 127); each value keeps a sign and an M-bit magnitude m, worth m * 2^(E - 127 - "
       "(M - 1)). bfp_type 0 is BFP_1_8_8_16 (M = 8, 19 bytes a block), 1 is BFP_1_4_8_16 "
       "(M = 4, 11 bytes). E comes from the block's largest magnitude; magnitudes round to "
       "nearest even. A block is a little-endian bit stream: E, then each value's code "
       "(magnitude in the low M bits, sign above). A line not a multiple of 16 long ends in "
       "a zero-padded block. NaN and infinity are refused, as are the custom types 2 and 3 "
       "(a hardware's own layouts). ONNX Runtime defines no layout; this one is deepwire's, "
       "and DequantizeBFP reads it with the same bfp_type and block_dim.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         checkBfpAttributes(ctx, onnx::hasInputShape(ctx, 0)
                                     ? onnx::getInputShape(ctx, 0).dim_size()
                                     : -1);
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::UINT8);
         onnx::updateOutputElemType(ctx, 1, onnx::TensorProto::INT64);
         onnx::updateOutputElemType(ctx, 2, onnx::TensorProto::INT64);
         onnx::TensorShapeProto vector;
         vector.add_dim();
         onnx::updateOutputShape(ctx, 0, vector);
         if (onnx::hasInputShape(ctx, 0))
           vector.mutable_dim(0)->set_dim_value(onnx::getInputShape(ctx, 0).dim_size());
         for (size_t i : {size_t{1}, size_t{2}}) onnx::updateOutputShape(ctx, i, vector);
       }},
      {"DequantizeBFP", "quantization",
       "Block floating point bytes x (as QuantizeBFP writes them) back to a tensor of the "
       "given shape, as dtype (1 float, 10 float16, 16 bfloat16). strides, in elements, give "
       "the original tensor's memory layout, which orders the blocks: any dense layout is "
       "read, and x must hold exactly the blocks the shape makes. bfp_type 0 is BFP_1_8_8_16, "
       "1 BFP_1_4_8_16; the custom types 2 and 3 are a hardware's own and are refused.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         const auto* dtype = ctx.getAttribute("dtype");
         const int64_t to = dtype ? dtype->i() : 1;
         if (to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::FLOAT16 &&
             to != onnx::TensorProto::BFLOAT16)
           fail_shape_inference("dtype ", to, " is not 1 (float), 10 (float16) or 16 (bfloat16)");
         int64_t rank = -1;
         if (onnx::hasInputShape(ctx, 1) && onnx::getInputShape(ctx, 1).dim_size() == 1 &&
             onnx::getInputShape(ctx, 1).dim(0).has_dim_value())
           rank = onnx::getInputShape(ctx, 1).dim(0).dim_value();
         checkBfpAttributes(ctx, rank);
         onnx::updateOutputElemType(ctx, 0, static_cast<int32_t>(to));
         // A malformed model may claim any length: ranks past 64 are left to the kernel's
         // error instead of being built here.
         const onnx::TensorProto* shape = ctx.getInputData(1);
         if (shape && shape->data_type() == onnx::TensorProto::INT64) {
           const std::vector<int64_t> dims = onnx::ParseData<int64_t>(shape);
           if (dims.size() > 64 || std::any_of(dims.begin(), dims.end(),
                                               [](int64_t d) { return d < 0; }))
             return;
           onnx::TensorShapeProto y;
           for (int64_t d : dims) y.add_dim()->set_dim_value(d);
           onnx::updateOutputShape(ctx, 0, y);
         } else if (onnx::hasInputShape(ctx, 1)) {
           const auto& s = onnx::getInputShape(ctx, 1);
           if (s.dim_size() == 1 && s.dim(0).has_dim_value() && s.dim(0).dim_value() >= 0 &&
               s.dim(0).dim_value() <= 64) {
             onnx::TensorShapeProto y;
             for (int64_t i = 0; i < s.dim(0).dim_value(); ++i) y.add_dim();
             onnx::updateOutputShape(ctx, 0, y);
           }
         }
       }},
      {"QOrderedMatMul", "quantization",
       "int8 matrix product: Y = saturate(scale_A scale_B / scale_Y * A B + scale_C / "
       "scale_Y * C + bias), with A [batch?, M, K] in order_A, B [batch or 1, K, N] in "
       "order_B (usually COL), C and Y in order_Y; bias ([N], float) is in Y's quantized "
       "units. Orders are cuBLASLt's: 0 COL, 1 ROW, 2 COL32, 3 COL4_4R2_8C, 4 "
       "COL32_2R_4R4, over the last two axes (a batch of matrices); the tiled ones need "
       "whole tiles.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT8);
         if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 2)) return;
         onnx::TensorShapeProto y = onnx::getInputShape(ctx, 0);
         const auto& b = onnx::getInputShape(ctx, 2);
         if (y.dim_size() < 2 || b.dim_size() < 2) return;
         *y.mutable_dim(y.dim_size() - 1) = b.dim(b.dim_size() - 1);
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"QOrderedGelu", "quantization",
       "GELU of int8 X: saturate(gelu(scale_X * X) / scale_Y), elementwise (the orders do "
       "not change it).",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT8);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"QOrderedLayerNormalization", "quantization",
       "Layer normalization of int8 X along its last axis: (scale_X * X - mean) / "
       "sqrt(variance + epsilon) * scale + B (population variance), divided by scale_Y, "
       "rounded and saturated to int8. ROW order only.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT8);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"QOrderedLongformerAttention", "quantization",
       "LongformerAttention on int8 input [batch, sequence, hidden]: the local and global "
       "projections are int8 products (weights [hidden, 3 hidden] in COL order, biases in the "
       "gemm scale's units) saturated to int8 in scale_qkv_gemm and scale_global_gemm, the "
       "window and global attention runs on their dequantized values, and the output is "
       "quantized with scale_output. mask: 0 keeps a token, negative masks it.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT8);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"SparseToDenseMatMul", "math",
       "Y = alpha op(A) op(B) for a sparse A (a sparse graph input or initializer; deepwire "
       "holds it dense and skips its zeros) and a dense B, transA and transB choosing the "
       "transposes. alpha scales float and double products; integer ones take alpha 1.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         if (ctx.getInputType(1) && ctx.getInputType(1)->has_tensor_type())
           onnx::updateOutputElemType(ctx, 0, ctx.getInputType(1)->tensor_type().elem_type());
       }},
      {"QOrderedAttention", "quantization",
       "Self-attention on int8 input [batch, sequence, hidden] in int8 throughout: Q, K and V "
       "(int8 weights [hidden in, hidden], one scale or one per column, float biases) each "
       "scaled to its scale_*_gemm, the scores Q K^T to scale_QKT_gemm, softmax (exp read "
       "from a table of the 256 score differences) to scale_QKT_softmax, and the context to "
       "scale_values_gemm. mask_index int32 [batch, sequence]: nonzero attends. Orders are "
       "cuBLASLt's (input and output ROW, weights COL, as exporters write them).",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT8);
         if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 5)) return;
         onnx::TensorShapeProto y = onnx::getInputShape(ctx, 0);
         const auto& w = onnx::getInputShape(ctx, 5);
         if (y.dim_size() != 3 || w.dim_size() != 2) return;
         *y.mutable_dim(2) = w.dim(1);
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"GemmFloat8", "quantization",
       "Y = alpha * scaleA * scaleB * op(A) op(B) + beta * C (transA, transB), then "
       "activation (NONE, RELU, or GELU in its tanh form), as `dtype` (1 float, 10 "
       "float16, 16 bfloat16). Operands float, float16 or bfloat16: deepwire has no float8 "
       "tensors, so float8 ones are refused.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         const auto* dt = ctx.getAttribute("dtype");
         onnx::updateOutputElemType(ctx, 0, dt ? static_cast<int32_t>(dt->i()) : 1);
       }},
      {"QLinearWhere", "quantization",
       "Where(condition, X, Y) on quantized X and Y (each with its scale and zero point), the "
       "result quantized with z_scale and z_zero_point.",
       17,
       [](const Ctx& c, Body& b) {
         const std::string x = dequantize(c, b, "X", "x_scale", "x_zero_point", 3),
                           y = dequantize(c, b, "Y", "y_scale", "y_zero_point", 6);
         b.add("Where", {"condition", x, y}, {"Z_f"});
         b.add("QuantizeLinear", {"Z_f", "z_scale", "z_zero_point"}, {"Z"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 1, 0); }},
      {"MatMulNBits", "quantization",
       "A times the transpose of B, an N x K weight matrix stored as codes of `bits` bits (2, 4 "
       "or 8) in blocks of block_size along K, packed low bits first ([N, blocks, block_size * "
       "bits / 8] bytes). A code dequantizes as (code - zero point) * its block's scale; the zero "
       "points are packed like B or of the scales' type, 2^(bits - 1) without them. bias [N] is "
       "added. The weights are dequantized as the model runs.",
       17,
       [](const Ctx& c, Body& b) {
         const int64_t K = intAttr(c, "K", 0), N = intAttr(c, "N", 0), bits = intAttr(c, "bits", 4),
                       block = intAttr(c, "block_size", 0);
         if (K < 1 || N < 1 || block < 1)
           throw std::invalid_argument("K, N and block_size must be positive");
         if (bits != 2 && bits != 4 && bits != 8)
           throw std::invalid_argument("bits is " + std::to_string(bits) +
                                       "; deepwire reads 2, 4 "
                                       "and 8");
         if ((block * bits) % 8 != 0)
           throw std::invalid_argument("block_size * bits must fill whole bytes");
         if (intAttr(c, "weight_prepacked", 0) != 0)
           throw std::invalid_argument(
               "weight_prepacked B is ONNX Runtime's internal layout; "
               "export the model with plain packed weights");
         if (c.hasInput(4))
           throw std::invalid_argument(
               "g_idx (act-order groups, deprecated by ONNX Runtime) is "
               "not supported; quantize without it");
         const int64_t blocks = (K + block - 1) / block;
         const std::string q = unpackCodes(b, "B", bits, "q", {N, blocks, block});
         std::string zero;
         if (!c.hasInput(3)) {
           zero = b.constantLike("zero_default", static_cast<float>(1 << (bits - 1)), "q");
         } else if (elemTypeOf(c, 3) == onnx::TensorProto::UINT8) {
           b.add("Reshape", {"zero_points", b.constantInts("zp_rows_shape", {N, -1})}, {"zp_rows"});
           unpackCodes(b, "zp_rows", bits, "zp_codes", {N, -1});
           b.add("Slice",
                 {"zp_codes", b.constantInts("zp_from", {0}), b.constantInts("zp_to", {blocks}),
                  b.constantInts("zp_axis", {1})},
                 {"zp_used"});
           b.add("Reshape", {"zp_used", b.constantInts("zp_shape", {N, blocks, 1})}, {"zp"});
           zero = "zp";
         } else {
           b.add("Reshape",
                 {b.cast("zero_points", onnx::TensorProto::FLOAT, "zp_f"),
                  b.constantInts("zp_shape", {N, blocks, 1})},
                 {"zp"});
           zero = "zp";
         }
         b.add("Reshape",
               {b.cast("scales", onnx::TensorProto::FLOAT, "scales_f"),
                b.constantInts("scale_shape", {N, blocks, 1})},
               {"scale"});
         b.add("Sub", {q, zero}, {"centred"});
         b.add("Mul", {"centred", "scale"}, {"w_blocks"});
         b.add("Reshape", {"w_blocks", b.constantInts("w_shape", {N, blocks * block})}, {"w_all"});
         std::string w = "w_all";
         if (blocks * block != K) {
           b.add("Slice",
                 {"w_all", b.constantInts("k_from", {0}), b.constantInts("k_to", {K}),
                  b.constantInts("k_axis", {1})},
                 {"w_k"});
           w = "w_k";
         }
         b.add("CastLike", {w, "A"}, {"w"});
         *b.add("Transpose", {"w"}, {"wt"}).add_attribute() =
             onnx::MakeAttribute("perm", std::vector<int64_t>{1, 0});
         if (!c.hasInput(5)) {
           b.add("MatMul", {"A", "wt"}, {"Y"});
           return;
         }
         b.add("MatMul", {"A", "wt"}, {"AW"});
         b.add("Add", {"AW", "bias"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"MatMulInteger16", "quantization",
       "The product of two 16-bit integer matrices (numpy's matmul rules) in 32-bit integers.", 17,
       [](const Ctx& c, Body& b) {
         const bool unsignedOut = elemTypeOf(c, 0) == onnx::TensorProto::UINT16 &&
                                  elemTypeOf(c, 1) == onnx::TensorProto::UINT16;
         const int to = unsignedOut ? onnx::TensorProto::UINT32 : onnx::TensorProto::INT32;
         b.add("MatMul", {b.cast("A", to, "A32"), b.cast("B", to, "B32")}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) {
         const auto* a = ctx.getInputType(0);
         const auto* b = ctx.getInputType(1);
         const bool u = a && b && a->tensor_type().elem_type() == onnx::TensorProto::UINT16 &&
                        b->tensor_type().elem_type() == onnx::TensorProto::UINT16;
         onnx::updateOutputElemType(ctx, 0,
                                    u ? onnx::TensorProto::UINT32 : onnx::TensorProto::INT32);
       }},
      {"MatMulIntegerToFloat", "quantization",
       "MatMulInteger of A and B (with their zero points) in 32-bit integers, scaled to float "
       "by a_scale * b_scale (b_scale per column or one), plus bias.",
       17,
       [](const Ctx& c, Body& b) {
         b.add("MatMulInteger",
               {"A", "B", c.hasInput(4) ? "a_zero_point" : "", c.hasInput(5) ? "b_zero_point" : ""},
               {"Y_i"});
         integerProductToFloat(c, b, "a_scale", "b_scale", 6);
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 2, 0); }},
      {"DynamicQuantizeMatMul", "quantization",
       "A (float) quantized to uint8 as DynamicQuantizeLinear does, times the quantized B "
       "(b_zero_point per column or one) in integers, scaled back by A's scale * b_scale, plus "
       "bias.",
       17,
       [](const Ctx& c, Body& b) {
         b.add("DynamicQuantizeLinear", {"A"}, {"A_q", "A_scale", "A_zero"});
         b.add("MatMulInteger", {"A_q", "B", "A_zero", c.hasInput(3) ? "b_zero_point" : ""},
               {"Y_i"});
         integerProductToFloat(c, b, "A_scale", "b_scale", 4);
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"QuickGelu", "math",
       "x * sigmoid(alpha * x), a fast approximation of Gelu (alpha 1.702), as ONNX Runtime "
       "fuses x * sigmoid(1.702 x); with alpha 1 it is SiLU.",
       24,
       [](const Ctx& c, Body& b) {
         const float alpha = floatAttr(c, "alpha", 1.702f);
         if (b.opset >= 24) {
           *b.add("Swish", {"X"}, {"Y"}).add_attribute() = onnx::MakeAttribute("alpha", alpha);
           return;
         }
         b.add("Mul", {"X", b.constantLike("alpha", alpha, "X")}, {"aX"});
         b.add("Sigmoid", {"aX"}, {"s"});
         b.add("Mul", {"X", "s"}, {"Y"});
       },
       sameAsInput0},
      {"Range", "generator",
       "The numbers from start up to, not including, limit, in steps of delta (default 1).", 17,
       [](const Ctx& c, Body& b) {
         b.add("Range",
               {"start", "limit", c.hasInput(2) ? "delta" : b.constantLike("one", 1.0f, "start")},
               {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"RotaryEmbedding", "nn",
       "Rotates pairs of input features (the halves of each head, or neighbours with "
       "interleaved) by the angles cos_cache and sin_cache give for each position: the "
       "standard RotaryEmbedding, on [B, S, hidden] (num_heads) or [B, heads, S, size]. "
       "position_ids is [B, S], or [1] as the first position of consecutive ones.",
       23,
       [](const Ctx& c, Body& b) {
         b.need("RotaryEmbedding", 23);
         if (intAttr(c, "is_packed_batching", 0) != 0)
           throw std::invalid_argument("is_packed_batching is not taken");
         if (floatAttr(c, "scale", 1.0f) != 1.0f)
           throw std::invalid_argument("a scale other than 1 is not taken");
         std::string pos = "position_ids";
         if (rankOf(c, 1, "position_ids") == 1) {
           // The first position: consecutive ones from there, for every sequence.
           const int rank = rankOf(c, 0, "input");
           b.add("Shape", {"input"}, {"x_shape"});
           b.add("Gather", {"x_shape", b.constantInts("seq_axis", {rank == 4 ? 2 : 1})}, {"seq"});
           b.add("Gather", {"x_shape", b.constantInts("batch_axis", {0})}, {"batch"});
           b.add("Add", {"position_ids", "seq"}, {"end_1d"});
           b.add("Squeeze", {"position_ids"}, {"start"});
           b.add("Squeeze", {"end_1d"}, {"end"});
           b.add("Range", {"start", "end", b.scalarInt("step", 1)}, {"positions"});
           *b.add("Concat", {"batch", "seq"}, {"bs"}).add_attribute() =
               onnx::MakeAttribute("axis", int64_t{0});
           b.add("Expand", {"positions", "bs"}, {"positions_bs"});
           pos = "positions_bs";
         }
         Body::copy(c,
                    b.add("RotaryEmbedding", {"input", "cos_cache", "sin_cache", pos}, {"output"}),
                    {"interleaved", "num_heads", "rotary_embedding_dim"});
       },
       sameAsInput0},
      {"SkipLayerNormalization", "nn",
       "LayerNormalization over the last axis of input + skip (+ bias), with gamma and the "
       "optional beta: a transformer's residual connection and normalization in one node. "
       "Optional outputs: the mean, the inverse standard deviation and the sum itself.",
       17,
       [](const Ctx& c, Body& b) {
         const std::string s = skipSum(c, b, 4);
         auto& ln =
             b.add("LayerNormalization", {s, "gamma", "beta"},
                   {"output", c.hasOutput(1) ? "mean" : "", c.hasOutput(2) ? "inv_std_var" : ""});
         *ln.add_attribute() = onnx::MakeAttribute("axis", int64_t{-1});
         *ln.add_attribute() = onnx::MakeAttribute("epsilon", floatAttr(c, "epsilon", 1e-12f));
       },
       inferSkipNorm},
      {"SkipSimplifiedLayerNormalization", "nn",
       "RMS normalization over the last axis of input + skip (+ bias): the sum divided by the "
       "root of its mean square plus epsilon, times gamma. Optional outputs: the inverse root "
       "mean square and the sum itself (mean is not computed).",
       17,
       [](const Ctx& c, Body& b) {
         if (c.hasOutput(1))
           throw std::invalid_argument(
               "output 1 (mean) is not computed by the simplified normalization; leave it out");
         const std::string s = skipSum(c, b, 3);
         b.add("Mul", {s, s}, {"sq"});
         b.reduceMean("sq", {-1}, "ms");
         b.add("Add", {"ms", b.constantLike("eps", floatAttr(c, "epsilon", 1e-12f), "ms")},
               {"ms_eps"});
         b.add("Sqrt", {"ms_eps"}, {"rms"});
         b.add("Reciprocal", {"rms"}, {c.hasOutput(2) ? "inv_std_var" : "inv"});
         b.add("Mul", {s, c.hasOutput(2) ? "inv_std_var" : "inv"}, {"normed"});
         b.add("Mul", {"normed", "gamma"}, {"output"});
       },
       inferSkipNorm},
      {"Inverse", "math",
       "The inverse of each square matrix in X's last two axes ([..., n, n]); a singular matrix "
       "is an error.",
       17, nullptr, sameAsInput0},
      {"MurmurHash3", "tensor",
       "A 32-bit MurmurHash3 (the x86 variant) of each element from `seed`: of its 4 or 8 bytes "
       "for numbers, of its bytes for strings. Y is uint32 with positive (the default), else the "
       "same bits as int32.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         const auto* p = ctx.getAttribute("positive");
         onnx::updateOutputElemType(
             ctx, 0, p && p->i() == 0 ? onnx::TensorProto::INT32 : onnx::TensorProto::UINT32);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"DynamicTimeWarping", "math",
       "The cheapest path through a cost matrix ([rows, cols] or [1, rows, cols]) from its first "
       "cell to its last, moving down, right or diagonally, as Whisper aligns tokens to audio "
       "frames: [2, path length] int32, the rows and the columns along the path.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT32);
         auto* shape = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
         shape->add_dim()->set_dim_value(2);
         shape->add_dim();
       }},
      {"NGramRepeatBlock", "generator",
       "For beam or greedy decoding: the scores of the tokens that would repeat an n-gram of "
       "ngram_size already in input_ids ([batch, sequence]) set to -inf, in scores ([batch, "
       "vocabulary]).",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 1, 0);
         if (onnx::hasInputShape(ctx, 1)) onnx::propagateShapeFromInputToOutput(ctx, 1, 0);
       }},
      {"BifurcationDetector", "generator",
       "A step of aggressive decoding: pred_tokens, guessed from src_tokens at "
       "prev_suffix_match_idx, are kept up to the first that differs from the source (that one "
       "included) and appended to cur_tokens, giving tokens; suffix_match_idx is where the "
       "last n tokens (min_ngram_size to max_ngram_size) occur once in src_tokens, the index "
       "after them, else -1.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 1, 0);
         ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape()->add_dim();
         if (ctx.getNumOutputs() < 2) return;
         onnx::propagateElemTypeFromInputToOutput(ctx, 2, 1);
         if (onnx::hasInputShape(ctx, 2)) onnx::propagateShapeFromInputToOutput(ctx, 2, 1);
       }},
      {"MoE", "nn",
       "A mixture of experts, as Mixtral-style models use it: router_probs (logits, [rows, "
       "experts]) pick each row's k experts by softmax (renormalized over the k with "
       "normalize_routing_weights), and the output is their weighted sum of fc2(act(fc1 x)), "
       "with W[e] as [out, in]. activation_type: relu, gelu (tanh form), silu, identity, or "
       "swiglu (its linear half interleaved in fc1 with swiglu_fusion 1, fc1's second half with "
       "2, or fc3; activation_alpha, activation_beta, swiglu_limit); fc3 also gates the other "
       "activations.",
       17, moeBody, sameAsInput0},
      {"QMoE", "quantization",
       "MoE with uint8-coded expert weights (expert_weight_bits 8, 4 or 2, packed low bits "
       "first; fcN [experts, out, in / pack]), dequantized with a scale per row or per "
       "block_size inputs and zero points packed like the codes (else 2^(bits-1)), then the "
       "same experts and activations (swiglu interleaved, swiglu_fusion 1). The k chosen "
       "experts' weights are router_probs' softmax renormalized over the k, or router_weights "
       "where given.",
       17, qmoeBody, sameAsInput0},
      {"GreedySearch", "text",
       "Generates text with a GPT-2 style decoder (the decoder subgraph; model_type 0): from "
       "the prompt input_ids ([batch, length], int32), each step runs the decoder on the new "
       "tokens with its past key/value state and appends the most likely next token, until "
       "max_length or until every row has produced eos_token_id (written as pad_token_id). "
       "The decoder takes input_ids, position_ids, attention_mask and past_0.. "
       "([2, batch, heads, past length, head size]), and returns logits ([batch, length, "
       "vocabulary]) and present_0... min_length, repetition_penalty, vocab_mask, "
       "prefix_vocab_mask (first step only) and no_repeat_ngram_size shape the scores. "
       "sequences is [batch, max_length].",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT32);
       }},
      {"WhisperBeamSearch", "text",
       "Beam search over a Whisper-style encoder-decoder: the encoder subgraph reads the audio "
       "features (input_ids, [batch, features, frames]) and the prompt (decoder_input_ids, or "
       "decoder_start_token_id) once; the decoder subgraph then adds a token per beam with its "
       "past self keys and values and the encoder's cross ones. num_beams beams per item, "
       "length_penalty, early_stopping, min_length, repetition_penalty, the vocabulary masks, "
       "n-gram blocking, temperature and, with logits_processor 1, Whisper's timestamp rules. "
       "sequences is [batch, num_return_sequences, max_length] with the prompt, "
       "sequences_scores their length-normalized log-probabilities.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT32);
         for (size_t i = 1; i < ctx.getNumOutputs(); ++i)
           onnx::updateOutputElemType(ctx, i, onnx::TensorProto::FLOAT);
       }},
      {"Sampling", "text",
       "GreedySearch's generation loop, drawing each next token at random instead of taking "
       "the most likely: the scores are divided by temperature, reduced by presence_penalty "
       "where presence_mask is set, and the tokens outside the top_p probability mass (at "
       "least min_tokens_to_keep kept) get filter_value before one draw from their softmax. "
       "seed (0 without it) seeds the draws, which then match ONNX Runtime's. filtered_logits "
       "returns the last step's scores after filtering.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT32);
         if (ctx.getNumOutputs() > 1) onnx::updateOutputElemType(ctx, 1, onnx::TensorProto::FLOAT);
       }},
      {"Tokenizer", "text",
       "Splits each string of X ([C] or [N, C]) into tokens: at separators (RE2 expressions, "
       "each splitting what the previous left; [\"\"] gives characters) or as the matches of "
       "tokenexp. Tokens under mincharnum characters are dropped; Y adds an axis as long as the "
       "most tokens found, padded with pad_value, with mark a \\x02 before and a \\x03 "
       "after each string's tokens.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::STRING);
         if (!onnx::hasInputShape(ctx, 0)) return;
         onnx::TensorShapeProto y = onnx::getInputShape(ctx, 0);
         y.add_dim();
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"PackedAttention", "nn",
       "Attention (BERT-style, with weights, bias and qkv_hidden_sizes) over tokens packed "
       "without padding: input [tokens, hidden], token_offset [B, S] naming each token's "
       "place (as RemovePadding gives it) and cumulative_sequence_length [B + 1]; each token "
       "attends within its own sequence, attention_bias [B or 1, heads, S, S] added to the "
       "scores; output [tokens, v_hidden].",
       23,
       [](const Ctx& c, Body& b) {
         b.need("Attention", 23);
         PackedTokens p(b, "input");
         p.unpack("input", "x", 2);
         b.add("MatMul", {"x", "weights"}, {"xw"});
         b.add("Add", {"xw", "bias"}, {"qkv"});
         // The sizes' constant comes before the Split that reads it (bodies stay in order).
         std::string sizesValue;
         if (const std::vector<int64_t> sizes = qkvHiddenSizes(c); !sizes.empty())
           sizesValue = b.constantInts("qkv_sizes", sizes);
         auto& split = b.add("Split", {"qkv", sizesValue}, {"q", "k", "v"});
         *split.add_attribute() = onnx::MakeAttribute("axis", int64_t{2});
         if (sizesValue.empty())
           *split.add_attribute() = onnx::MakeAttribute("num_outputs", int64_t{3});
         attentionNode(c, b, {"q", "k", "v", attentionMask(c, b, p.keep(), "x", 5)}, {"attended"});
         p.pack("attended", "output");
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 1)) return;
         onnx::TensorShapeProto y;
         *y.add_dim() = onnx::getInputShape(ctx, 0).dim(0);
         const auto* sizes = ctx.getAttribute("qkv_hidden_sizes");
         const auto& w = onnx::getInputShape(ctx, 1);
         if (sizes && sizes->ints_size() == 3)
           y.add_dim()->set_dim_value(sizes->ints(2));
         else if (w.dim_size() == 2 && w.dim(1).has_dim_value())
           y.add_dim()->set_dim_value(w.dim(1).dim_value() / 3);
         else
           y.add_dim();
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"PackedMultiHeadAttention", "nn",
       "MultiHeadAttention over tokens packed without padding: query, key and value "
       "[tokens, hidden] (or query alone as [tokens, heads, 3, size]), the optional bias "
       "(q | k | v), token_offset [B, S] and cumulative_sequence_length [B + 1] as "
       "PackedAttention's; each token attends within its own sequence; output [tokens, "
       "v_hidden].",
       23,
       [](const Ctx& c, Body& b) {
         b.need("Attention", 23);
         PackedTokens p(b, "query");
         const bool separate = c.hasInput(1);
         if (separate != c.hasInput(2))
           throw std::invalid_argument(
               "give key and value both, or neither (query packs all three)");
         std::string q = "q_pad", k = "k_pad", v = "v_pad";
         if (separate) {
           p.unpack("query", q, 2);
           p.unpack("key", k, 2);
           p.unpack("value", v, 2);
         } else {
           if (const int r = knownRank(c, 0); r >= 0 && r != 4)
             throw std::invalid_argument("query has " + std::to_string(r) +
                                         " dimensions; without key and value it packs them "
                                         "as [tokens, heads, 3, size]");
           p.unpack("query", "qkv_pad", 4);  // [B, S, heads, 3, size]
           for (int i = 0; i < 3; ++i) {
             const std::string name = std::string(1, "qkv"[i]);
             *b.add("Gather", {"qkv_pad", b.scalarInt(name + "_at", i)}, {name + "_heads"})
                  .add_attribute() = onnx::MakeAttribute("axis", int64_t{3});
             b.add("Reshape", {name + "_heads", b.constantInts(name + "_flat", {0, 0, -1})},
                   {name + "_pad"});
           }
         }
         if (c.hasInput(3)) std::tie(q, k, v) = addQkvBias(b, q, k, v);
         attentionNode(c, b, {q, k, v, attentionMask(c, b, p.keep(), q, 6)}, {"attended"});
         p.pack("attended", "output");
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"DecoderMaskedMultiHeadAttention", "nn",
       "One decoding step of multi-head attention (query [B, 1, hidden], num_heads heads). "
       "Self-attention: the new key and value (inputs key and value, or packed after the query "
       "in [B, 1, 3 * hidden]), plus bias, are written into the key/value cache past_key/"
       "past_value ([B, heads, max length, size], returned as present_key/present_value, "
       "past_present_share_buffer = 1) at past_sequence_length, and the token attends to "
       "the first past_sequence_length + 1 positions; with beam_width > 1, "
       "cache_indirection ([batch, beams, max length]) names the beam whose cache holds each "
       "earlier position. Cross-attention (no past_key): key and value are the encoder's, "
       "[B, heads, length, size]. mask_index ([B, length], 0 masks) adds mask_filter_value, "
       "attention_bias is added to the scores, scale defaults to 1/sqrt(size); output_qk "
       "returns the scores before the softmax.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < ctx.getNumOutputs(); ++o)
           onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
       }},
      {"DecoderMaskedSelfAttention", "nn",
       "DecoderMaskedMultiHeadAttention's self-attention step with its own projection: input "
       "([B, 1, in]) times weights ([in, 3 * hidden]) plus bias gives the query, key and value; "
       "past ([2, B, heads, max length, size]) holds the key and value caches and returns as "
       "present with the new token's written at past_sequence_length "
       "(past_present_share_buffer = 1). do_rotary turns the query and key by the token's "
       "position first (adjacent pairs, base 10000). mask_index, attention_bias, beam_width, "
       "cache_indirection, scale and mask_filter_value as in DecoderMaskedMultiHeadAttention.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (ctx.getNumOutputs() > 1) onnx::propagateElemTypeFromInputToOutput(ctx, 0, 1);
         if (onnx::hasInputShape(ctx, 4) && ctx.getNumOutputs() > 1)
           onnx::propagateShapeFromInputToOutput(ctx, 4, 1);
       }},
      {"SparseAttention", "nn",
       "GroupQueryAttention (num_heads query heads over kv_num_heads key/value heads, causal, "
       "a key/value cache past_key/past_value of the full capacity, returned as present_key/"
       "present_value) over a block-sparse layout: queries and keys fall in blocks of "
       "sparse_block_size positions, and head n reads only the key blocks that layout n % "
       "layouts lists for its query's block (block_row_indices [layouts, blocks + 1] and "
       "block_col_indices [layouts, nonzero blocks], compressed rows). "
       "key_total_sequence_lengths counts each row's tokens; do_rotary turns queries and keys "
       "with cos_cache and sin_cache.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < ctx.getNumOutputs() && o < 3; ++o)
           onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
       }},
      {"LongformerAttention", "nn",
       "Longformer's self-attention: input ([B, S, hidden]) times weight ([hidden, 3 * "
       "hidden]) plus bias gives each head's query, key and value. A token attends to the "
       "tokens within `window` positions on either side and to every global token (global = "
       "1); a global token attends to all tokens, with the query, key and value of "
       "global_weight and global_bias. mask ([B, S]: 0 keeps, negative masks) is added to "
       "each key's score; scores are scaled by 1/sqrt(head size).",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"DecoderAttention", "nn",
       "BART's decoder attention, sequence-first: query [S, B, hidden] times q_weight plus "
       "bias[:hidden], scaled by 1/sqrt(head size). static_kv: cross-attention, keys and "
       "values from key ([T, B, hidden]) times kv_weight plus bias[hidden:], or with use_past "
       "the caches as given; else self-attention on query's keys and values, after key_cache "
       "and value_cache ([B, heads, length, size]) with use_past. key_padding_mask ([B, keys], "
       "true masks; with has_key_padding_mask) gives a key mask_filter_value. new_key_cache and "
       "new_value_cache (with has_layer_state) return the keys and values used.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < ctx.getNumOutputs() && o < 3; ++o)
           onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
       }},
      {"GroupQueryAttention", "nn",
       "Causal attention of num_heads query heads sharing kv_num_heads key/value heads, with a "
       "key/value cache, as decoder language models use it. query, key and value are [B, S, "
       "heads * size] (key and value may be packed into query); past_key and past_value [B, "
       "kv heads, P, size] hold earlier tokens, and present_key/present_value return them with "
       "the new ones after each row's past. seqlens_k[b] + 1 is row b's length so far, "
       "total_sequence_length the longest. do_rotary rotates queries and keys with cos_cache "
       "and sin_cache (positions from position_ids, else after the past). scale (default "
       "1/sqrt(size)), softcap, attention_bias, local_window_size and head_sink shape the "
       "scores.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < ctx.getNumOutputs() && o < 3; ++o)
           if (ctx.getNumInputs() > 3 && ctx.getInputType(3))
             onnx::propagateElemTypeFromInputToOutput(ctx, 3, o);
           else
             onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
         if (!onnx::hasInputShape(ctx, 0)) return;
         const auto& q = onnx::getInputShape(ctx, 0);
         const auto* heads = ctx.getAttribute("num_heads");
         const auto* kvHeads = ctx.getAttribute("kv_num_heads");
         if (q.dim_size() != 3 || !heads || !kvHeads || !q.dim(2).has_dim_value()) return;
         const bool packed = ctx.getNumInputs() < 2 || !ctx.getInputType(1);
         const int64_t d = q.dim(2).dim_value(), n = heads->i() + (packed ? 2 * kvHeads->i() : 0);
         if (n <= 0 || d % n != 0) return;
         onnx::TensorShapeProto out = q;
         out.mutable_dim(2)->set_dim_value(d / n * heads->i());
         onnx::updateOutputShape(ctx, 0, out);
       }},
      {"ConvTransposeWithDynamicPads", "nn",
       "ConvTranspose whose pads come as an input (Pads: int64, the begins of the spatial axes "
       "then their ends) rather than an attribute: the unpadded transposed convolution, cut by "
       "Pads.",
       17,
       [](const Ctx& c, Body& b) {
         auto& conv = b.add("ConvTranspose", {"X", "W", c.hasInput(3) ? "B" : ""},
                            {c.hasInput(2) ? "full" : "Y"});
         Body::copy(
             c, conv,
             {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "strides"});
         if (!c.hasInput(2)) return;
         const int rank = rankOf(c, 0, "X");
         if (rank < 3)
           throw std::invalid_argument("X has " + std::to_string(rank) +
                                       " dimension(s); it needs 3 or more");
         const int64_t k = rank - 2;
         std::vector<int64_t> spatial;
         for (int64_t a = 2; a < rank; ++a) spatial.push_back(a);
         b.add("Shape", {"full"}, {"full_shape"});
         b.add("Gather", {"full_shape", b.constantInts("spatial", spatial)}, {"full_sizes"});
         b.add("Slice", {"Pads", b.constantInts("zero", {0}), b.constantInts("k", {k})},
               {"pad_begin"});
         b.add("Slice", {"Pads", "k", b.constantInts("two_k", {2 * k})}, {"pad_end"});
         b.add("Sub", {"full_sizes", "pad_end"}, {"ends"});
         b.add("Slice", {"full", "pad_begin", "ends", "spatial"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"CropAndResize", "tensor",
       "Crops of X ([N, C, H, W]) resized to crop_size ([2]: height, width): each region of "
       "rois ([R, 4]: y1, x1, y2, x2, normalized to [0, 1]) from the image batch_indices names, "
       "sampled bilinearly (or the nearest pixel); samples outside the image are "
       "extrapolation_value. Y is [R, C, crop height, crop width].",
       17, nullptr,
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"MatMulBnb4", "quantization",
       "A times the transpose of B, an N x K weight matrix stored as 4-bit codes (bitsandbytes' "
       "FP4, quant_type 0, or NF4, 1), two to a byte, the first in the high bits: a code "
       "dequantizes as its value in the type's table times the absmax of its block of "
       "block_size weights.",
       17,
       [](const Ctx& c, Body& b) {
         if (intAttr(c, "transB", 1) != 1)
           throw std::invalid_argument("only transB = 1 (B stored as N x K) is taken");
         const int64_t n = intAttr(c, "N", 0), k = intAttr(c, "K", 0),
                       block = intAttr(c, "block_size", 0), type = intAttr(c, "quant_type", -1);
         if (n <= 0 || k <= 0 || block <= 0)
           throw std::invalid_argument("N, K and block_size must be positive");
         // bitsandbytes' code tables.
         static const std::vector<float> fp4 = {
             0.0f,  0.0052083333f,  0.6666667f,  1.0f,  0.33333334f,  0.5f,  0.16666667f,  0.25f,
             -0.0f, -0.0052083333f, -0.6666667f, -1.0f, -0.33333334f, -0.5f, -0.16666667f, -0.25f};
         static const std::vector<float> nf4 = {
             -1.0f,        -0.6961928f, -0.52507305f, -0.39491749f, -0.28444138f, -0.18477343f,
             -0.09105004f, 0.0f,        0.0795803f,   0.1609302f,   0.2461123f,   0.33791524f,
             0.44070983f,  0.562617f,   0.72295684f,  1.0f};
         if (type != 0 && type != 1)
           throw std::invalid_argument("quant_type " + std::to_string(type) +
                                       " must be 0 (FP4) or 1 (NF4)");
         constexpr int kInt64 = onnx::TensorProto::INT64;
         b.add("Div", {"B", b.constantLike("sixteen", 16.0f, "B")}, {"high"});
         b.add("Mod", {"B", "sixteen"}, {"low"});
         b.add("Unsqueeze", {"high", b.constantInts("last", {-1})}, {"high_1"});
         b.add("Unsqueeze", {"low", "last"}, {"low_1"});
         *b.add("Concat", {"high_1", "low_1"}, {"pairs"}).add_attribute() =
             onnx::MakeAttribute("axis", int64_t{-1});
         b.add("Reshape", {"pairs", b.constantInts("flat", {-1})}, {"codes_all"});
         b.add("Slice", {"codes_all", b.constantInts("zero", {0}), b.constantInts("nk", {n * k})},
               {"codes"});
         b.add("Gather",
               {b.constantFloatsLike("table", type == 0 ? fp4 : nf4, "A"),
                b.cast("codes", kInt64, "codes_i")},
               {"values"});
         b.add("Range",
               {b.scalarInt("first", 0), b.scalarInt("count", n * k), b.scalarInt("unit", 1)},
               {"positions"});
         b.add("Div", {"positions", b.scalarInt("block", block)}, {"blocks"});
         b.add("Gather", {"absmax", "blocks"}, {"scales"});
         b.add("Mul", {"values", "scales"}, {"weights"});
         b.add("Reshape", {"weights", b.constantInts("nk_shape", {n, k})}, {"w_nk"});
         *b.add("Transpose", {"w_nk"}, {"w_kn"}).add_attribute() =
             onnx::MakeAttribute("perm", std::vector<int64_t>{1, 0});
         b.add("MatMul", {"A", "w_kn"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"QAttention", "quantization",
       "Attention (this domain's) on a quantized input and weight: each dequantized with its "
       "scale and zero point (the weight's per tensor or per column), then BERT-style "
       "self-attention of num_heads heads with bias, mask_index and past.",
       17,
       [](const Ctx& c, Body& b) {
         const std::string x = dequantize(c, b, "input", "input_scale", "input_zero_point", 6);
         auto& w = b.add("DequantizeLinear",
                         {"weight", "weight_scale", c.hasInput(7) ? "weight_zero_point" : ""},
                         {"weight_f"});
         *w.add_attribute() = onnx::MakeAttribute("axis", int64_t{1});
         auto& att = b.addMicrosoft("Attention",
                                    {x, "weight_f", "bias", c.hasInput(5) ? "mask_index" : "",
                                     c.hasInput(8) ? "past" : ""},
                                    {"output", c.hasOutput(1) ? "present" : ""});
         Body::copy(c, att,
                    {"do_rotary", "mask_filter_value", "num_heads", "scale", "unidirectional"});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 2, 0);
         if (ctx.getNumOutputs() > 1) onnx::propagateElemTypeFromInputToOutput(ctx, 2, 1);
         if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 2)) return;
         onnx::TensorShapeProto out = onnx::getInputShape(ctx, 0);
         const auto& bias = onnx::getInputShape(ctx, 2);
         if (out.dim_size() != 3 || bias.dim_size() != 1 || !bias.dim(0).has_dim_value()) return;
         if (bias.dim(0).dim_value() % 3 != 0) return;
         out.mutable_dim(2)->set_dim_value(bias.dim(0).dim_value() / 3);
         onnx::updateOutputShape(ctx, 0, out);
       }},
      {"BiasAdd", "math", "X + bias + skip: bias per channel (the last axis).", 17,
       [](const Ctx&, Body& b) {
         b.add("Add", {"X", "bias"}, {"Xb"});
         b.add("Add", {"Xb", "skip"}, {"Y"});
       },
       sameAsInput0},
      {"BiasSplitGelu", "math",
       "X + bias split in two halves along the last axis: the first times the Gelu (exact) of "
       "the second, half as wide as X.",
       17,
       [](const Ctx&, Body& b) {
         b.add("Add", {"X", "bias"}, {"Xb"});
         b.add("Shape", {"Xb"}, {"shape"});
         b.add("Gather", {"shape", b.constantInts("last", {-1})}, {"width"});
         b.add("Div", {"width", b.constantInts("two", {2})}, {"half"});
         b.add("Slice", {"Xb", b.constantInts("zero", {0}), "half", "last"}, {"left"});
         b.add("Slice", {"Xb", "half", "width", "last"}, {"right"});
         gelu(b, "right", "gelu", false);
         b.add("Mul", {"left", "gelu"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"ComplexMul", "math",
       "The complex product of A and B, each complex number as its last axis of 2 (real, "
       "imaginary), broadcasting.",
       17, [](const Ctx&, Body& b) { complexProduct(b, false); },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"ComplexMulConj", "math",
       "A times the complex conjugate of B, each complex number as its last axis of 2 (real, "
       "imaginary), broadcasting.",
       17, [](const Ctx&, Body& b) { complexProduct(b, true); },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"FusedMatMulActivation", "math",
       "FusedMatMul (alpha, transA/B, transBatchA/B) followed by an activation, as FusedGemm "
       "names it (activation, with activation_alpha, _beta and _gamma).",
       17,
       [](const Ctx& c, Body& b) {
         matmulBody(c, b, true, "mm");
         gemmActivation(c, b, stringAttr(c, "activation"), "mm", "Y");
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"GemmFastGelu", "math",
       "FastGelu (Gelu's tanh approximation) of X times W plus the optional bias.", 17,
       [](const Ctx& c, Body& b) {
         b.add("MatMul", {"X", "W"}, {"XW"});
         std::string x = "XW";
         if (c.hasInput(2)) b.add("Add", {"XW", "bias"}, {x = "XWb"});
         gelu(b, x, "Y", true);
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"GroupNorm", "nn",
       "Group normalization of a 4-D X, channels last by default (channels_last), as diffusion "
       "models use it: each group of channels normalized over it and the spatial axes "
       "(epsilon), times gamma plus beta per channel, then SiLU with activation 1.",
       17, [](const Ctx& c, Body& b) { groupNormBody(c, b, "X", "Y"); }, sameAsInput0},
      {"SkipGroupNorm", "nn",
       "GroupNorm of X + skip (+ bias per channel); the optional second output is that sum.", 17,
       [](const Ctx& c, Body& b) {
         b.add("Add", {"X", "skip"}, {"sum"});
         std::string s = "sum";
         if (c.hasInput(4)) b.add("Add", {"sum", "bias"}, {s = "sum_bias"});
         if (c.hasOutput(1)) b.add("Identity", {s}, {"S"});
         groupNormBody(c, b, s, "Y");
       },
       [](onnx::InferenceContext& ctx) {
         for (size_t o = 0; o < ctx.getNumOutputs() && o < 2; ++o) {
           onnx::propagateElemTypeFromInputToOutput(ctx, 0, o);
           if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, o);
         }
       }},
      {"TorchEmbedding", "tensor",
       "The rows of weight that indices name (PyTorch's embedding); padding_idx and "
       "scale_grad_by_freq change only the gradient, which deepwire takes as Gather's.",
       17,
       [](const Ctx&, Body& b) {
         b.add("Gather", {"weight", "indices"}, {"Y"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"MaxpoolWithMask", "nn",
       "2-D MaxPool (kernel_shape, strides, pads) of X guided by the int32 mask M ([H, W], one "
       "plane for all of X): as ONNX Runtime computes it, a window's scan of a row stops at the "
       "first element whose mask is 0 (the very first element of the plane always counts), "
       "and a window with nothing left is the type's lowest value.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"RemovePadding", "tensor",
       "The tokens of input ([B, S, hidden]) that are not padding (the first "
       "sequence_token_count[b] of each row) packed into [tokens, hidden]; token_offset ([B, "
       "S]) lists their positions in the flattened batch, then the padding's; "
       "cumulated_seq_len ([B + 1]) the rows' starts and max_seq_len the longest row.",
       17,
       [](const Ctx&, Body& b) {
         constexpr int kInt32 = onnx::TensorProto::INT32;
         b.add("Shape", {"input"}, {"shape"});
         b.add("Slice", {"shape", b.constantInts("zero", {0}), b.constantInts("two", {2})}, {"bs"});
         b.add("Gather", {"shape", b.scalarInt("seq_axis", 1)}, {"seq"});
         b.add("Range", {b.scalarInt("first", 0), "seq", b.scalarInt("unit", 1)}, {"positions"});
         b.add("Unsqueeze",
               {b.cast("sequence_token_count", onnx::TensorProto::INT64, "count"),
                b.constantInts("last", {-1})},
               {"count_col"});
         b.add("Less", {"positions", "count_col"}, {"valid"});
         b.add("Reshape", {"valid", b.constantInts("flat", {-1})}, {"valid_flat"});
         b.add("Not", {"valid_flat"}, {"pad_flat"});
         *b.add("ReduceProd", {"bs"}, {"cells"}).add_attribute() =
             onnx::MakeAttribute("keepdims", int64_t{0});
         b.add("Range", {"first", "cells", "unit"}, {"cell_ids"});
         *b.add("Compress", {"cell_ids", "valid_flat"}, {"valid_ids"}).add_attribute() =
             onnx::MakeAttribute("axis", int64_t{0});
         *b.add("Compress", {"cell_ids", "pad_flat"}, {"pad_ids"}).add_attribute() =
             onnx::MakeAttribute("axis", int64_t{0});
         *b.add("Concat", {"valid_ids", "pad_ids"}, {"offsets"}).add_attribute() =
             onnx::MakeAttribute("axis", int64_t{0});
         b.add("Reshape", {"offsets", "bs"}, {"offsets_bs"});
         b.cast("offsets_bs", kInt32, "token_offset");
         // [B, S, hidden] as [B * S, hidden]: Reshape's 0 copies input's axis 1, so name it.
         b.add("Gather", {"shape", b.constantInts("hidden_axis", {2})}, {"hidden"});
         *b.add("Concat", {b.constantInts("minus_one", {-1}), "hidden"}, {"rows_shape"})
              .add_attribute() = onnx::MakeAttribute("axis", int64_t{0});
         b.add("Reshape", {"input", "rows_shape"}, {"rows"});
         b.add("Gather", {"rows", "valid_ids"}, {"output"});
         b.add("CumSum", {"sequence_token_count", b.scalarInt("axis0", 0)}, {"ends"});
         b.cast(b.constantInts("zero_start", {0}), kInt32, "start");
         *b.add("Concat", {"start", "ends"}, {"cumulated_seq_len"}).add_attribute() =
             onnx::MakeAttribute("axis", int64_t{0});
         *b.add("ReduceMax", {"sequence_token_count"}, {"max_seq_len"}).add_attribute() =
             onnx::MakeAttribute("keepdims", int64_t{1});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < ctx.getNumOutputs() && o < 4; ++o)
           onnx::updateOutputElemType(ctx, o, onnx::TensorProto::INT32);
       }},
      {"RestorePadding", "tensor",
       "The inverse of RemovePadding: the packed tokens of input ([tokens, hidden]) back at their "
       "places in [B, S, hidden] (token_offset's first entries), zeros at the padding.",
       17, [](const Ctx&, Body& b) { PackedTokens(b, "input").unpack("input", "output", 2); },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"MulInteger", "quantization",
       "(A - A_zero_point) * (B - B_zero_point) of 8-bit tensors in int32, broadcasting.", 17,
       [](const Ctx& c, Body& b) {
         constexpr int kInt32 = onnx::TensorProto::INT32;
         b.cast("A", kInt32, "A_i");
         b.cast("B", kInt32, "B_i");
         if (c.hasInput(1)) b.add("Sub", {"A_i", b.cast("A_zero_point", kInt32, "A_zp")}, {"A_c"});
         if (c.hasInput(3)) b.add("Sub", {"B_i", b.cast("B_zero_point", kInt32, "B_zp")}, {"B_c"});
         b.add("Mul", {c.hasInput(1) ? "A_c" : "A_i", c.hasInput(3) ? "B_c" : "B_i"}, {"C"});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT32);
       }},
      {"ReduceSumInteger", "quantization",
       "The sum of 8-bit data over axes (keepdims as ReduceSum) in int32.", 17,
       [](const Ctx& c, Body& b) {
         const auto* axes = attr(c, "axes", onnx::AttributeProto::INTS);
         if (!axes) throw std::invalid_argument("the axes attribute is required");
         const std::vector<int64_t> list(axes->ints().begin(), axes->ints().end());
         *b.add("ReduceSum",
                {b.cast("data", onnx::TensorProto::INT32, "data_i"), b.constantInts("axes", list)},
                {"reduced"})
              .add_attribute() = onnx::MakeAttribute("keepdims", intAttr(c, "keepdims", 1));
       },
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::INT32);
       }},
      {"BiasDropout", "nn",
       "Dropout of data + bias (ratio, training_mode, seed as Dropout's), plus the optional "
       "residual; mask is the Dropout's.",
       17,
       [](const Ctx& c, Body& b) {
         b.add("Add", {"data", "bias"}, {"biased"});
         auto& drop =
             b.add("Dropout",
                   {"biased", c.hasInput(3) ? "ratio" : "", c.hasInput(4) ? "training_mode" : ""},
                   {c.hasInput(2) ? "dropped" : "output", c.hasOutput(1) ? "mask" : ""});
         Body::copy(c, drop, {"seed"});
         if (c.hasInput(2)) b.add("Add", {"dropped", "residual"}, {"output"});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
         if (ctx.getNumOutputs() > 1) onnx::updateOutputElemType(ctx, 1, onnx::TensorProto::BOOL);
       }},
      {"BitmaskDropout", "nn",
       "Dropout (ratio, training_mode, seed as Dropout's) whose mask comes packed, 32 elements "
       "to a uint32: element i kept is bit i % 32 of word i / 32.",
       17, [](const Ctx& c, Body& b) { bitmaskDropout(c, b, "data", 1, 2, "output"); },
       bitmaskDropoutInference},
      {"BitmaskBiasDropout", "nn", "BitmaskDropout of data + bias, plus the optional residual.", 17,
       [](const Ctx& c, Body& b) {
         b.add("Add", {"data", "bias"}, {"biased"});
         bitmaskDropout(c, b, "biased", 3, 4, c.hasInput(2) ? "dropped" : "output");
         if (c.hasInput(2)) b.add("Add", {"dropped", "residual"}, {"output"});
       },
       bitmaskDropoutInference},
      {"BiasSoftmax", "nn",
       "Softmax of data + bias (bias broadcasting as in Add) over the axes from axis on, taken "
       "together as Softmax did before opset 13. is_inner_broadcast only says how bias lines "
       "up, for ONNX Runtime's GPU kernel; the broadcast already does.",
       17,
       [](const Ctx& c, Body& b) {
         (void)flagAttr(c, "is_inner_broadcast", 0);
         b.add("Add", {"data", "bias"}, {"sum"});
         *b.add("Flatten", {"sum"}, {"rows"}).add_attribute() =
             onnx::MakeAttribute("axis", intAttr(c, "axis", 1));
         *b.add("Softmax", {"rows"}, {"soft"}).add_attribute() =
             onnx::MakeAttribute("axis", int64_t{1});
         b.add("Shape", {"sum"}, {"shape"});
         b.add("Reshape", {"soft", "shape"}, {"output"});
       },
       sameAsInput0},
      {"NhwcConv", "nn",
       "Conv (the same attributes) on X laid out channels last, [N, spatial..., C], with W as "
       "[M, kernel..., C / group] and Y channels last too.",
       17, [](const Ctx& c, Body& b) { nhwcConv(c, b, "Y"); },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"NhwcFusedConv", "nn",
       "NhwcConv whose output, plus the optional Z (channels last), goes through FusedConv's "
       "activation (activation, activation_params).",
       17,
       [](const Ctx& c, Body& b) {
         nhwcConv(c, b, "conv_last");
         std::string y = "conv_last";
         if (c.hasInput(3)) b.add("Add", {"conv_last", "Z"}, {y = "sum"});
         const auto* a = attr(c, "activation_params", onnx::AttributeProto::FLOATS);
         convActivation(
             b, stringAttr(c, "activation"),
             a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{},
             y, "Y");
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"Rfft", "math",
       "The discrete Fourier transform of a real X over its last signal_ndim axes (1 to 3), as "
       "[..., 2] of (real, imaginary): the last axis n / 2 + 1 long with onesided (the default), "
       "else n. normalized scales by 1 / sqrt(n) (ONNX Runtime takes only 0).",
       17, [](const Ctx& c, Body& b) { fftBody(c, b, false); },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (!onnx::hasInputShape(ctx, 0)) return;
         onnx::TensorShapeProto y = onnx::getInputShape(ctx, 0);
         if (y.dim_size() < 1) return;
         const auto* side = ctx.getAttribute("onesided");
         auto* last = y.mutable_dim(y.dim_size() - 1);
         if (!side || side->i() != 0) {
           if (last->has_dim_value())
             last->set_dim_value(last->dim_value() / 2 + 1);
           else
             last->Clear();
         }
         y.add_dim()->set_dim_value(2);
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"Irfft", "math",
       "The inverse of Rfft: a real signal from its spectrum X ([..., 2] of real, imaginary) "
       "over the last signal_ndim axes. With onesided (the default) the last axis holds the "
       "half spectrum, m values of a signal 2m - 1 long, as ONNX Runtime sizes it; else the "
       "whole, and Y is the real part. Divided by n, or by sqrt(n) with normalized.",
       17, [](const Ctx& c, Body& b) { fftBody(c, b, true); },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         if (!onnx::hasInputShape(ctx, 0)) return;
         const auto& x = onnx::getInputShape(ctx, 0);
         if (x.dim_size() < 2) return;
         onnx::TensorShapeProto y;
         for (int d = 0; d + 1 < x.dim_size(); ++d) *y.add_dim() = x.dim(d);
         const auto* side = ctx.getAttribute("onesided");
         auto* last = y.mutable_dim(y.dim_size() - 1);
         if (!side || side->i() != 0) {
           const int64_t m = last->has_dim_value() ? last->dim_value() : 0;
           if (m >= 1 && m <= std::numeric_limits<int64_t>::max() / 2)
             last->set_dim_value(2 * m - 1);
           else
             last->Clear();
         }
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"GatedRelativePositionBias", "nn",
       "A relative position bias gated per query: with q = query_layer + query_bias split into "
       "num_heads heads, and g = q weight + bias ([..., D]) summed over its halves into u and "
       "r after a sigmoid each, output = (u (r eco_a - 1) + 2) rel_pos, [B, heads, S, S]. "
       "Packed queries ([tokens, hidden]) name their places with token_offset, as "
       "RestorePadding's; the padding rows are query_bias alone.",
       17,
       [](const Ctx& c, Body& b) {
         const int64_t heads = intAttr(c, "num_heads", 0);
         if (heads < 1) throw std::invalid_argument("num_heads must be 1 or more");
         const auto qd = knownDims(c, 0), w = knownDims(c, 3);
         const bool packedIn = c.hasInput(6);
         if (!qd.empty() && qd.size() != (packedIn ? 2u : 3u))
           throw std::invalid_argument(
               "query_layer is " + dimsText(qd) + "; it must be " +
               (packedIn ? "[tokens, hidden] with token_offset"
                         : "[batch, sequence, hidden] (or packed [tokens, hidden] with "
                           "token_offset)"));
         if (!qd.empty() && qd.back() >= 0 && qd.back() % heads != 0)
           throw std::invalid_argument("query_layer's hidden size " + std::to_string(qd.back()) +
                                       " does not split into num_heads " + std::to_string(heads) +
                                       " heads");
         if (w.size() == 2 && w[1] >= 0 && w[1] % 2 != 0)
           throw std::invalid_argument("weight is " + dimsText(w) +
                                       "; its second axis D is summed in two halves, so it must "
                                       "be even");
         std::string layer = "query_layer";
         if (c.hasInput(6)) {
           // The packed tokens at their places in [B, S, hidden]: the padding rows get
           // query_bias alone.
           PackedTokens(b, "query_layer").unpack("query_layer", "query_cells", 2);
           layer = "query_cells";
         }
         b.add("Add", {layer, "query_bias"}, {"query"});
         b.add("Reshape", {"query", b.constantInts("head_split", {0, 0, heads, -1})}, {"q_heads"});
         transpose(b, "q_heads", "q_bnsh", {0, 2, 1, 3});
         b.add("MatMul", {"q_bnsh", "weight"}, {"qw"});
         b.add("Add", {"qw", "bias"}, {"g"});
         b.add("Reshape", {"g", b.constantInts("halves", {0, 0, 0, 2, -1})}, {"g_halves"});
         *b.add("ReduceSum", {"g_halves", b.constantInts("within", {-1})}, {"g_sums"})
              .add_attribute() = onnx::MakeAttribute("keepdims", int64_t{0});
         b.add("Sigmoid", {"g_sums"}, {"gates"});
         b.add("Slice",
               {"gates", b.constantInts("u_at", {0}), b.constantInts("r_at", {1}),
                b.constantInts("gate_axis", {-1})},
               {"u"});
         b.add("Slice", {"gates", "r_at", b.constantInts("end_at", {2}), "gate_axis"}, {"r"});
         b.add("Mul", {"r", "eco_a"}, {"r_a"});
         b.add("Sub", {"r_a", b.constantLike("one_f", 1.0f, "r_a")}, {"r_a_1"});
         b.add("Mul", {"u", "r_a_1"}, {"u_r"});
         b.add("Add", {"u_r", b.constantLike("two_f", 2.0f, "u_r")}, {"gate"});
         b.add("Mul", {"gate", "rel_pos"}, {"output"});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         const auto* h = ctx.getAttribute("num_heads");
         const bool packed = ctx.getNumInputs() > 6 && ctx.getInputType(6);
         const int from = packed ? 6 : 0;
         if (!h || !onnx::hasInputShape(ctx, from)) return;
         const auto& s = onnx::getInputShape(ctx, from);
         if (s.dim_size() != (packed ? 2 : 3)) return;
         onnx::TensorShapeProto y;
         *y.add_dim() = s.dim(0);
         y.add_dim()->set_dim_value(h->i());
         *y.add_dim() = s.dim(1);
         *y.add_dim() = s.dim(1);
         onnx::updateOutputShape(ctx, 0, y);
       }},
      {"GemmaRotaryEmbedding", "nn",
       "Gemma's rotary embedding: output1 = q cos(emb) + q_rot sin(emb) and output2 = k cos(emb) "
       "+ k_rot sin(emb), emb ([B, S, size]) broadcast over the heads of q and k ([B, heads, S, "
       "size]).",
       17,
       [](const Ctx&, Body& b) {
         b.add("Unsqueeze", {"emb", b.constantInts("heads", {1})}, {"emb_h"});
         b.add("Cos", {"emb_h"}, {"cos_f"});
         b.add("Sin", {"emb_h"}, {"sin_f"});
         b.add("CastLike", {"cos_f", "q"}, {"cos"});
         b.add("CastLike", {"sin_f", "q"}, {"sin"});
         for (const char* v : {"q", "k"}) {
           const std::string x = v, out = x == "q" ? "output1" : "output2";
           b.add("Mul", {x, "cos"}, {x + "_cos"});
           b.add("Mul", {x + "_rot", "sin"}, {x + "_sin"});
           b.add("Add", {x + "_cos", x + "_sin"}, {out});
         }
       },
       [](onnx::InferenceContext& ctx) {
         for (size_t o = 0; o < ctx.getNumOutputs() && o < 2; ++o) {
           onnx::propagateElemTypeFromInputToOutput(ctx, 1 + 2 * o, o);
           if (onnx::hasInputShape(ctx, 1 + 2 * o))
             onnx::propagateShapeFromInputToOutput(ctx, 1 + 2 * o, o);
         }
       }},
      {"RelativePositionBias", "nn",
       "T5's relative position bias: each (query, key) pair's distance key - query falls in a "
       "bucket of bias_table ([buckets, heads]): exact below half the buckets, logarithmic up "
       "to max_distance; with is_bidirectional, half the buckets for each sign. Output [1, "
       "heads, query_length, key_length].",
       17,
       [](const Ctx& c, Body& b) {
         const int64_t maxDistance = intAttr(c, "max_distance", 0);
         const bool both = intAttr(c, "is_bidirectional", 0) != 0;
         if (maxDistance <= 0) throw std::invalid_argument("max_distance must be positive");
         constexpr int kInt64 = onnx::TensorProto::INT64, kFloat = onnx::TensorProto::FLOAT;
         b.add("Shape", {"bias_table"}, {"table_shape"});
         b.add("Gather", {"table_shape", b.scalarInt("bucket_axis", 0)}, {"buckets_all"});
         std::string buckets = "buckets_all";
         if (both) b.add("Div", {"buckets_all", b.scalarInt("two", 2)}, {buckets = "buckets"});
         b.add("Squeeze", {"query_length"}, {"q_len"});
         b.add("Squeeze", {"key_length"}, {"k_len"});
         b.add("Range", {b.scalarInt("zero", 0), "q_len", b.scalarInt("unit", 1)}, {"q_pos"});
         b.add("Range", {"zero", "k_len", "unit"}, {"k_pos"});
         b.add("Unsqueeze", {"q_pos", b.constantInts("col", {1})}, {"q_col"});
         b.add("Sub", {"k_pos", "q_col"}, {"relative"});  // [q, k]
         std::string n, offset;
         if (both) {
           b.add("Greater", {"relative", "zero"}, {"ahead"});
           b.add("Mul", {b.cast("ahead", kInt64, "ahead_i"), buckets}, {offset = "offset"});
           b.add("Abs", {"relative"}, {n = "distance"});
         } else {
           b.add("Min", {"relative", "zero"}, {"behind"});
           b.add("Neg", {"behind"}, {n = "distance"});
         }
         b.add("Div", {buckets, b.scalarInt("two_exact", 2)}, {"max_exact"});
         b.add("Less", {n, "max_exact"}, {"small"});
         // max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (buckets -
         // max_exact)), at most buckets - 1 (n of 0 only where small).
         b.cast(n, kFloat, "n_f");
         b.cast("max_exact", kFloat, "max_exact_f");
         b.add("Max", {"n_f", b.constantLike("one_f", 1.0f, "n_f")}, {"n_pos"});
         b.add("Div", {"n_pos", "max_exact_f"}, {"ratio"});
         b.add("Log", {"ratio"}, {"log_ratio"});
         b.add("Div", {b.constantLike("max_distance", float(maxDistance), "n_f"), "max_exact_f"},
               {"span"});
         b.add("Log", {"span"}, {"log_span"});
         b.add("Div", {"log_ratio", "log_span"}, {"scaled"});
         b.add("Sub", {buckets, "max_exact"}, {"log_buckets"});
         b.add("Mul", {"scaled", b.cast("log_buckets", kFloat, "log_buckets_f")}, {"steps"});
         b.add("Floor", {"steps"}, {"steps_floor"});
         b.add("Add", {"max_exact", b.cast("steps_floor", kInt64, "steps_i")}, {"large"});
         b.add("Sub", {buckets, b.scalarInt("one", 1)}, {"last_bucket"});
         b.add("Min", {"large", "last_bucket"}, {"large_capped"});
         b.add("Where", {"small", n, "large_capped"}, {"bucket"});
         std::string index = "bucket";
         if (both) b.add("Add", {"bucket", offset}, {index = "bucket_all"});
         b.add("Gather", {"bias_table", index}, {"values"});  // [q, k, heads]
         *b.add("Transpose", {"values"}, {"heads_first"}).add_attribute() =
             onnx::MakeAttribute("perm", std::vector<int64_t>{2, 0, 1});
         b.add("Unsqueeze", {"heads_first", b.constantInts("batch", {0})}, {"output"});
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"MatMulFpQ4", "quantization",
       "A ([..., K]) times B, a K x N matrix in ONNX Runtime's MLAS 4-bit block layout: for "
       "each column, blocks of 32 values of K, each a float32 scale, a zero point byte (unless "
       "blk_quant_type is 0) and two codes a byte (the low nibble value i, the high one value "
       "i + 16). A code dequantizes as (code - zero point) * scale, or (code - 8) * scale "
       "without zero points. B_shape holds [K, N]. The weights are dequantized as the model "
       "runs.",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::FLOAT);
       }},
      {"WordConvEmbedding", "nn",
       "A word embedding from characters: Sequence ([words, characters], int32 ids, 0 after a "
       "word's end) looked up in C, each filter of W ([filters, 1, window, character size]) "
       "with its bias B slid over the word, tanh, and the largest value over the positions: "
       "[words, filters].",
       17, nullptr,
       [](onnx::InferenceContext& ctx) {
         onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::FLOAT);
       }},
      {"SampleOp", "misc", "ONNX Runtime's example operator: Y is X.", 17,
       [](const Ctx&, Body& b) { b.add("Identity", {"X"}, {"Y"}); }, sameAsInput0},
      {"NhwcMaxPool", "quantization",
       "MaxPool on 8-bit X laid out channels last (N, spatial..., C), with MaxPool's window "
       "attributes.",
       17,
       [](const Ctx& c, Body& b) {
         const ChannelPerms p = channelPerms(c, 0, "x");
         transpose(b, "x", "x_nchw", p.toFirst);
         Body::copy(c, b.add("MaxPool", {"x_nchw"}, {"y_nchw"}),
                    {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"});
         transpose(b, "y_nchw", "y", p.toLast);
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"QLinearConv", "quantization",
       "ai.onnx's QLinearConv (the same inputs and attributes) on X laid out channels first, or "
       "channels last ([N, spatial..., C]) with channels_last; the weights stay [M, C / group, "
       "kernel...].",
       17,
       [](const Ctx& c, Body& b) {
         const bool last = intAttr(c, "channels_last", 0) != 0;
         const ChannelPerms p = last ? channelPerms(c, 0, "x") : ChannelPerms{};
         if (last) transpose(b, "x", "x_first", p.toFirst);
         Body::copy(c,
                    b.add("QLinearConv",
                          {last ? "x_first" : "x", "x_scale", "x_zero_point", "w", "w_scale",
                           "w_zero_point", "y_scale", "y_zero_point", c.hasInput(8) ? "B" : ""},
                          {last ? "y_first" : "y"}),
                    {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
         if (last) transpose(b, "y_first", "y", p.toLast);
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 7, 0); }},
      {"QLinearAveragePool", "quantization",
       "AveragePool on a quantized X (NCHW, or channels last with channels_last): dequantized "
       "with x_scale and x_zero_point, averaged in float with AveragePool's window attributes, "
       "quantized with y_scale and y_zero_point.",
       17,
       [](const Ctx& c, Body& b) {
         std::string x = dequantize(c, b, "X", "x_scale", "x_zero_point", 2);
         const bool last = intAttr(c, "channels_last", 0) != 0;
         const ChannelPerms p = last ? channelPerms(c, 0, "X") : ChannelPerms{};
         if (last) {
           transpose(b, x, "X_nchw", p.toFirst);
           x = "X_nchw";
         }
         Body::copy(
             c, b.add("AveragePool", {x}, {last ? "Y_nchw" : "Y_f"}),
             {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
         if (last) transpose(b, "Y_nchw", "Y_f", p.toLast);
         quantize(c, b, "Y_f", "y_scale", "y_zero_point", 4, "X", "Y");
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"QGemm", "quantization",
       "Gemm on 8-bit A and B (each optionally transposed, transA and transB): the product of "
       "A - a_zero_point and B - b_zero_point in integers, plus the int32 bias C, times alpha * "
       "a_scale * b_scale (b's scale and zero point per tensor or per column). Float out, or, "
       "with y_scale, quantized with y_scale and y_zero_point.",
       17,
       [](const Ctx& c, Body& b) {
         std::string in[2] = {"A", "B"};
         const char* trans[2] = {"transA", "transB"};
         for (int i = 0; i < 2; ++i)
           if (intAttr(c, trans[i], 0) != 0) {
             *b.add("Transpose", {in[i]}, {in[i] + "_t"}).add_attribute() =
                 onnx::MakeAttribute("perm", std::vector<int64_t>{1, 0});
             in[i] += "_t";
           }
         b.add("MatMulInteger", {in[0], in[1], "a_zero_point", "b_zero_point"}, {"AB"});
         std::string acc = "AB";
         if (c.hasInput(6)) b.add("Add", {"AB", "C"}, {acc = "ABC"});
         b.cast(acc, onnx::TensorProto::FLOAT, "acc_f");
         b.add("Mul", {"a_scale", "b_scale"}, {"ab_scale"});
         b.add("Mul", {"ab_scale", b.constantLike("alpha", floatAttr(c, "alpha", 1.0f), "a_scale")},
               {"scale"});
         if (!c.hasInput(7)) {
           b.add("Mul", {"acc_f", "scale"}, {"Y"});
           return;
         }
         b.add("Mul", {"acc_f", "scale"}, {"Y_f"});
         quantize(c, b, "Y_f", "y_scale", "y_zero_point", 8, "A", "Y");
       },
       [](onnx::InferenceContext& ctx) {
         if (ctx.getNumInputs() > 8 && ctx.getInputType(8))
           onnx::propagateElemTypeFromInputToOutput(ctx, 8, 0);
         else if (ctx.getNumInputs() > 7 && ctx.getInputType(7))
           onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         else
           onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::FLOAT);
       }},
      {"UnfoldTensor", "tensor",
       "The windows of `size` elements along `dim`, `step` apart (default 1), each a new last "
       "axis: dim's length becomes the number of windows, (length - size) / step + 1.",
       17,
       [](const Ctx& c, Body& b) {
         const int rank = rankOf(c, 0, "input");
         int64_t dim = intAttr(c, "dim", -1);
         if (dim < -rank || dim >= rank)
           throw std::invalid_argument("dim " + std::to_string(dim) + " is outside the " +
                                       std::to_string(rank) + " dimension(s) of input");
         if (dim < 0) dim += rank;
         const int64_t size = intAttr(c, "size", 0), step = intAttr(c, "step", 1);
         if (size < 1 || step < 1)
           throw std::invalid_argument("size (" + std::to_string(size) + ") and step (" +
                                       std::to_string(step) + ") must be positive");
         b.add("Shape", {"input"}, {"shape"});
         b.add("Gather", {"shape", b.constantInts("dim", {dim})}, {"length"});
         b.add("Sub", {"length", b.constantInts("size", {size})}, {"room"});
         b.add("Div", {"room", b.constantInts("step", {step})}, {"last"});
         b.add("Add", {"last", b.constantInts("one", {1})}, {"count"});
         b.add("Squeeze", {"count", b.constantInts("axis0", {0})}, {"n"});
         b.add("Range", {b.scalarInt("zero", 0), "n", b.scalarInt("unit", 1)}, {"windows"});
         b.add("Mul", {"windows", b.scalarInt("stride", step)}, {"starts"});
         b.add("Unsqueeze", {"starts", b.constantInts("axis1", {1})}, {"starts_col"});
         std::vector<int64_t> offsets(size);
         for (int64_t k = 0; k < size; ++k) offsets[k] = k;
         b.add("Add", {"starts_col", b.constantInts("offsets", offsets)}, {"index"});
         const bool lastAxis = dim == rank - 1;
         *b.add("Gather", {"input", "index"}, {lastAxis ? "output" : "gathered"}).add_attribute() =
             onnx::MakeAttribute("axis", dim);
         if (lastAxis) return;
         std::vector<int64_t> perm;
         for (int64_t a = 0; a <= dim; ++a) perm.push_back(a);
         for (int64_t a = dim + 2; a <= rank; ++a) perm.push_back(a);
         perm.push_back(dim + 1);
         *b.add("Transpose", {"gathered"}, {"output"}).add_attribute() =
             onnx::MakeAttribute("perm", perm);
       },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"Unique", "tensor",
       "The distinct values of the 1-D x in the order they first appear (y), for each element "
       "of x the position of its value in y (idx), and how often each value occurs (counts).",
       17,
       [](const Ctx&, Body& b) {
         *b.add("Unique", {"x"}, {"y", "", "idx", "counts"}).add_attribute() =
             onnx::MakeAttribute("sorted", int64_t{0});
       },
       [](onnx::InferenceContext& ctx) {
         onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
         for (size_t o = 1; o < ctx.getNumOutputs() && o < 3; ++o)
           onnx::updateOutputElemType(ctx, o, onnx::TensorProto::INT64);
       }},
      {"TransposeMatMul", "math",
       "alpha times the matrix product of A and B, each optionally transposed over its last two "
       "axes (transA, transB): FusedMatMul without the batch transposes.",
       17, [](const Ctx& c, Body& b) { matmulBody(c, b, false); },
       [](onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }},
      {"Trilu", "math",
       "The upper (upper = 1) or lower triangle of the last two axes of X, from diagonal k "
       "(default 0), the rest zero: the standard Trilu.",
       17,
       [](const Ctx& c, Body& b) {
         Body::copy(c, b.add("Trilu", {"X", "k"}, {"Y"}), {"upper"});
       },
       [](onnx::InferenceContext& ctx) { inferAs("Trilu", 17, ctx); }},
  };
  return ops;
}

// The body of a node: the schema's formal inputs and outputs, `build`'s nodes at `opset`.
void buildBody(const Ctx& c, const onnx::OpSchema& schema,
               const std::function<void(const Ctx&, Body&)>& build, int opset,
               onnx::FunctionProto& f) {
  // A variadic input's arguments are named <name>_0, <name>_1... (QLinearConcat's).
  int given = 0;
  for (int i = 0; i < kMaxInputs; ++i)
    if (c.hasInput(i)) given = i + 1;
  for (const auto& p : schema.inputs()) {
    if (p.GetOption() != onnx::OpSchema::Variadic) {
      f.add_input(p.GetName());
      continue;
    }
    for (int k = 0; f.input_size() < given; ++k) f.add_input(p.GetName() + "_" + std::to_string(k));
  }
  for (const auto& p : schema.outputs()) f.add_output(p.GetName());
  auto* imp = f.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  Body body(f, opset);
  build(c, body);
}

}  // namespace

bool microsoftHasBody(const std::string& name) {
  const auto& ops = msOps();
  const auto op =
      std::find_if(ops.begin(), ops.end(), [&](const MsOp& o) { return name == o.name; });
  return op != ops.end() && op->body;
}

Status microsoftBody(const onnx::NodeProto& node, const std::vector<onnx::TypeProto>& inputTypes,
                     int onnxOpset, onnx::FunctionProto& body) {
  (void)Catalogue::instance();  // registers the schemas
  const auto& ops = msOps();
  const auto op =
      std::find_if(ops.begin(), ops.end(), [&](const MsOp& o) { return node.op_type() == o.name; });
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(node.op_type(), 1, kMicrosoftDomain);
  if (op == ops.end() || !schema)
    return Status::error("com.microsoft " + node.op_type() + " is not an operator deepwire has");
  if (!op->body)
    return Status::error("node '" + node.name() + "' (" + node.op_type() +
                         ", com.microsoft) runs as a kernel of its own; it has no expansion into "
                         "ai.onnx operators");
  if (onnxOpset < 17)
    return Status::error("node '" + node.name() + "' (" + node.op_type() +
                         ", com.microsoft) is written in ai.onnx operators of opset 17 or later, "
                         "and the model imports opset " +
                         std::to_string(onnxOpset) + "; convert the model to opset 17");
  // The builders give every attribute the node leaves out its default themselves (the same as
  // the schema's, which the planner passes in).
  onnx::FunctionBodyBuildContextImpl ctx(node, inputTypes);
  try {
    buildBody(ctx, *schema, op->body, std::min(onnxOpset, op->bodyOpset), body);
  } catch (const std::exception& e) {
    return Status::error("node '" + node.name() + "' (" + node.op_type() +
                         ", com.microsoft): " + e.what());
  }
  return Status();
}

std::map<std::string, onnx::TypeProto> declaredTypes(const onnx::GraphProto& g) {
  std::map<std::string, onnx::TypeProto> types;
  for (const auto* values : {&g.input(), &g.value_info()})
    for (const auto& v : *values) types[v.name()] = v.type();
  for (const auto& t : g.initializer()) {
    auto* tt = types[t.name()].mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* shape = tt->mutable_shape();
    shape->clear_dim();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  }
  return types;
}

Status checkMicrosoftNode(const onnx::NodeProto& node,
                          const std::map<std::string, onnx::TypeProto>& declared) {
  const auto& ops = msOps();
  const auto op =
      std::find_if(ops.begin(), ops.end(), [&](const MsOp& o) { return node.op_type() == o.name; });
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(node.op_type(), 1, kMicrosoftDomain);
  if (op == ops.end() || !op->body || !schema) return Status();
  std::vector<onnx::TypeProto> types(node.input_size());
  for (int i = 0; i < node.input_size(); ++i) {
    auto it = declared.find(node.input(i));
    if (!node.input(i).empty() && it != declared.end()) types[i] = it->second;
  }
  onnx::FunctionBodyBuildContextImpl ctx(node, types);
  onnx::FunctionProto body;
  try {
    buildBody(ctx, *schema, op->body, op->bodyOpset, body);
  } catch (const RankUnknown&) {
    // Left to the planner, which knows the types of the values nodes make.
  } catch (const std::exception& e) {
    return Status::error("node '" + node.name() + "' (" + node.op_type() +
                         ", com.microsoft): " + e.what());
  }
  return Status();
}

std::string bfpTypeProblem(int64_t type) {
  if (type == 0 || type == 1) return "";
  return "bfp_type " + std::to_string(type) +
         (type == 2 || type == 3 ? " (Custom_BFP_" + std::to_string(type - 2) +
                                       ") is reserved for a hardware's own layout, which deepwire "
                                       "cannot know"
                                 : std::string(" is not a BFP type")) +
         "; use 0 (BFP_1_8_8_16) or 1 (BFP_1_4_8_16)";
}

void addMicrosoftDomain(CatalogueBuilder& b) {
  b.setDefaultOpset(kMicrosoftDomain, 1);
  std::vector<NodeSpec> specs;
  for (const MsOp& op : msOps()) {
    const SchemaFacts* facts = schemaFacts(kMicrosoftDomain, op.name, 1);
    if (!facts) throw std::logic_error(std::string("no schema facts for com.microsoft ") + op.name);
    NodeSpec spec = specFromFacts(*facts, nullptr, kMicrosoftDomain);
    spec.category = op.category;
    spec.doc = op.doc;
    for (auto& p : spec.params) {
      if (const auto* values = msChoices(op.name, p.name)) p.allowedValues = *values;
      if (p.doc.empty()) p.doc = msParamDoc(op.name, p.name);
      if (p.type == ParamType::Int && msFlag(p.name) &&
          (!p.defaultValue || p.defaultValue->asInt() == 0 || p.defaultValue->asInt() == 1)) {
        p.type = ParamType::Bool;
        if (p.defaultValue) p.defaultValue->type = ParamType::Bool;
        p.allowedValues = {"false", "true"};
      }
    }
    specs.push_back(std::move(spec));
  }
  static std::once_flag registered;
  std::call_once(registered, [&] {
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kMicrosoftDomain, 1,
                                                                                1);
    for (size_t i = 0; i < specs.size(); ++i) {
      const MsOp& op = msOps()[i];
      onnx::OpSchema s = onnxSchemaOf(specs[i], kMicrosoftDomain, true);
      s.TypeAndShapeInferenceFunction(op.infer);
      const int bodyOpset = op.bodyOpset;
      auto build = op.body;
      if (build)
        s.SetContextDependentFunctionBodyBuilder(
            [build, bodyOpset](const Ctx& c, const onnx::OpSchema& schema, onnx::FunctionProto& f) {
              buildBody(c, schema, build, bodyOpset, f);
              return true;
            });
      onnx::RegisterSchema(std::move(s));
    }
  });
  for (auto& s : specs) b.add(std::move(s));
}

}  // namespace dw
