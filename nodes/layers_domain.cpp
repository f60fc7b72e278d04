// deepwire.layers: Keras-style layers. Each one is a NodeSpec of kind Layer with a lowering
// function that emits the fewest standard ONNX nodes that do the job. Data layout is ONNX's
// (channels first: N, C, spatial...), as in PyTorch; sequences are batch first (N, T, features).
//
// How to add a layer: write `Status lowerX(LoweringBuilder& b)` and add a `layer(...)` entry to
// addLayersDomain() with its ports and parameters. Export, the engine and training need nothing
// else: they only ever see the ONNX the layer lowers to.
#include <cmath>

#include "nodes/catalogue.h"
#include "nodes/lowering.h"

namespace dw {

namespace {

constexpr const char* kDomain = "deepwire.layers";

// --- Spec construction -------------------------------------------------------------------------

PortSpec port(const std::string& name, const std::string& doc,
              PortOption option = PortOption::Single) {
  PortSpec p;
  p.name = name;
  p.typeStr = "T";
  p.doc = doc;
  p.option = option;
  p.differentiability = Differentiability::Differentiable;
  return p;
}

ParamSpec pInt(const std::string& name, int64_t def, const std::string& doc) {
  return {name, ParamType::Int, doc, false, Param::makeInt(def), {}};
}
ParamSpec pFloat(const std::string& name, double def, const std::string& doc) {
  return {name, ParamType::Float, doc, false, Param::makeFloat(def), {}};
}
ParamSpec pBool(const std::string& name, bool def, const std::string& doc) {
  return {name, ParamType::Bool, doc, false, Param::makeBool(def), {"false", "true"}};
}
ParamSpec pStr(const std::string& name, const std::string& def, const std::string& doc,
               std::vector<std::string> allowed = {}) {
  return {name, ParamType::String, doc, false, Param::makeString(def), std::move(allowed)};
}
ParamSpec pInts(const std::string& name, std::vector<int64_t> def, const std::string& doc) {
  return {name, ParamType::Ints, doc, false, Param::makeInts(std::move(def)), {}};
}

const std::vector<std::string> kActivations = {
    "linear",   "relu",     "sigmoid", "tanh",  "softmax",     "elu",          "selu",
    "softplus", "softsign", "gelu",    "swish", "exponential", "hard_sigmoid", "leaky_relu"};
const std::vector<std::string> kInitializers = {"glorot_uniform", "glorot_normal", "he_uniform",
                                                "he_normal",      "lecun_uniform", "lecun_normal",
                                                "zeros",          "ones",          "constant",
                                                "random_uniform", "random_normal", "orthogonal"};

ParamSpec activationParam(const std::string& def = "linear") {
  return pStr("activation", def, "Activation applied to the output.", kActivations);
}
ParamSpec initParam(const std::string& name, const std::string& def, const std::string& what) {
  return pStr(name, def, "Initializer of the " + what + ".", kInitializers);
}
// Keras' <weight>_regularizer parameters, with the l1/l2 coefficients the layer's regularizers
// share. The trainer adds the penalty to the loss (the weights' layout metadata carries it).
std::vector<ParamSpec> regularizerParams(const std::vector<std::string>& weights) {
  std::vector<ParamSpec> v;
  for (const auto& w : weights)
    v.push_back(pStr(w + "_regularizer", "none",
                     "Penalty added to the training loss for the " + w +
                         " weights: l1 * sum|w|, l2 * sum w^2, or both.",
                     {"none", "l1", "l2", "l1l2"}));
  v.push_back(pFloat("l1", 0.01, "L1 coefficient of this layer's regularizers."));
  v.push_back(pFloat("l2", 0.01, "L2 coefficient of this layer's regularizers."));
  return v;
}

std::vector<ParamSpec> weightParams(bool bias = true) {
  std::vector<ParamSpec> v = {initParam("kernel_initializer", "glorot_uniform", "kernel")};
  if (bias) {
    v.push_back(pBool("use_bias", true, "Whether the layer adds a bias."));
    v.push_back(initParam("bias_initializer", "zeros", "bias"));
  }
  v.push_back(pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."));
  v.push_back(
      pInt("seed", 0, "Seed of the weight initializers (each weight draws its own stream)."));
  const auto r = regularizerParams(bias ? std::vector<std::string>{"kernel", "bias"}
                                        : std::vector<std::string>{"kernel"});
  v.insert(v.end(), r.begin(), r.end());
  return v;
}

TypeConstraint floatTypes() {
  return {"T",
          {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"},
          "Floating-point tensors."};
}

// --- Lowering helpers --------------------------------------------------------------------------

WeightFill fillFor(LoweringBuilder& b, const std::string& param) {
  WeightFill f;
  const std::string name = b.param(param).asString();
  f.fill = name == "random_uniform" ? "uniform" : name == "random_normal" ? "normal" : name;
  f.value = b.param("initializer_value").asFloat();
  // kernel_initializer -> kernel_regularizer, where the layer has one.
  const size_t cut = param.rfind("_initializer");
  const std::string reg = param.substr(0, cut) + "_regularizer";
  if (cut != std::string::npos && b.spec().param(reg)) {
    f.regularizer = b.param(reg).asString();
    f.l1 = b.param("l1").asFloat();
    f.l2 = b.param("l2").asFloat();
  }
  return f;
}

int64_t intParam(LoweringBuilder& b, const std::string& name) {
  return b.param(name).asInt();
}
std::string strParam(LoweringBuilder& b, const std::string& name) {
  return b.param(name).asString();
}

// Applies a Keras activation by name; the result is named `out` (or fresh if empty).
Result<std::string> activate(LoweringBuilder& b, const std::string& x, const std::string& act,
                             const std::string& out) {
  if (act == "linear") return out.empty() ? x : b.op1("Identity", {x}, {}, out);
  if (act == "relu") return b.op1("Relu", {x}, {}, out);
  if (act == "sigmoid") return b.op1("Sigmoid", {x}, {}, out);
  if (act == "tanh") return b.op1("Tanh", {x}, {}, out);
  if (act == "softmax") return b.op1("Softmax", {x}, {attrInt("axis", -1)}, out);
  if (act == "elu") return b.op1("Elu", {x}, {attrFloat("alpha", 1.0f)}, out);
  if (act == "selu") return b.op1("Selu", {x}, {}, out);
  if (act == "softplus") return b.op1("Softplus", {x}, {}, out);
  if (act == "softsign") return b.op1("Softsign", {x}, {}, out);
  if (act == "exponential") return b.op1("Exp", {x}, {}, out);
  if (act == "hard_sigmoid")
    return b.op1("HardSigmoid", {x}, {attrFloat("alpha", 1.0f / 6), attrFloat("beta", 0.5f)}, out);
  if (act == "leaky_relu") return b.op1("LeakyRelu", {x}, {attrFloat("alpha", 0.2f)}, out);
  if (act == "swish") return b.op1("Mul", {x, b.op1("Sigmoid", {x})}, {}, out);
  if (act == "gelu") {
    // Exact GELU, 0.5 x (1 + erf(x / sqrt 2)); opset 17 has no Gelu op.
    const auto e = b.op1("Erf", {b.op1("Div", {x, b.floatScalar("sqrt2", std::sqrt(2.0f))})});
    const auto onePlus = b.op1("Add", {e, b.floatScalar("one", 1.0f)});
    return b.op1("Mul", {b.op1("Mul", {x, onePlus}), b.floatScalar("half", 0.5f)}, {}, out);
  }
  return b.fail("unknown activation '" + act + "'");
}

Status finish(LoweringBuilder& b, const std::string& x, const std::string& act) {
  auto r = activate(b, x, act, b.outputName(0));
  return r.ok() ? Status() : r.status();
}

// Dense on the last axis: Gemm for 2-D inputs, MatMul + Add otherwise.
Status lowerDense(LoweringBuilder& b) {
  auto dims = b.staticDims(0, "Dense needs the size of the input's last axis");
  if (!dims.ok()) return dims.status();
  const int64_t in = dims->back(), units = intParam(b, "units");
  if (in <= 0) return b.fail("the input's last axis has unknown size; Dense needs it");
  if (units <= 0) return b.fail("units must be positive");
  WeightFill kf = fillFor(b, "kernel_initializer");
  kf.fanInFirst = true;
  const auto w = b.weight("kernel", {in, units}, kf);
  const bool bias = b.param("use_bias").asBool();
  const std::string act = strParam(b, "activation");
  const std::string out = act == "linear" ? b.outputName(0) : "";
  std::string y;
  if (dims->size() == 2) {
    std::vector<std::string> ins = {b.input(0), w};
    if (bias) ins.push_back(b.weight("bias", {units}, fillFor(b, "bias_initializer")));
    y = b.op1("Gemm", ins, {}, out);
  } else if (bias) {
    y = b.op1("Add",
              {b.op1("MatMul", {b.input(0), w}),
               b.weight("bias", {units}, fillFor(b, "bias_initializer"))},
              {}, out);
  } else {
    y = b.op1("MatMul", {b.input(0), w}, {}, out);
  }
  return act == "linear" ? Status() : finish(b, y, act);
}

Status lowerActivation(LoweringBuilder& b, const std::string& act) {
  return finish(b, b.input(0), act);
}

// Expands a Keras int-or-list parameter to `n` values.
Result<std::vector<int64_t>> spatial(LoweringBuilder& b, const std::string& name, size_t n) {
  std::vector<int64_t> v = b.param(name).asInts();
  if (v.size() == 1) v.assign(n, v[0]);
  if (v.size() != n)
    return b.fail(name + " has " + std::to_string(v.size()) + " values; give 1 or " +
                  std::to_string(n));
  for (int64_t x : v)
    if (x <= 0) return b.fail(name + " values must be positive");
  return v;
}

Status lowerConv(LoweringBuilder& b, size_t nd, bool transpose) {
  auto dims = b.staticDims(0, "a convolution needs the input's channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 2)
    return b.fail("expects a rank-" + std::to_string(nd + 2) +
                  " input (N, C, spatial...), got rank " + std::to_string(dims->size()));
  const int64_t cin = (*dims)[1], filters = intParam(b, "filters"), groups = intParam(b, "groups");
  if (cin <= 0) return b.fail("the input's channel count (axis 1) is unknown");
  if (filters <= 0 || groups <= 0 || cin % groups || filters % groups)
    return b.fail("filters and input channels must be positive multiples of groups");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  std::vector<int64_t> wshape = transpose ? std::vector<int64_t>{cin, filters / groups}
                                          : std::vector<int64_t>{filters, cin / groups};
  wshape.insert(wshape.end(), k->begin(), k->end());
  std::vector<std::string> ins = {b.input(0),
                                  b.weight("kernel", wshape, fillFor(b, "kernel_initializer"))};
  if (b.param("use_bias").asBool())
    ins.push_back(b.weight("bias", {filters}, fillFor(b, "bias_initializer")));
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k), attrInts("strides", *s),
                                             attrInts("dilations", *d), attrInt("group", groups)};
  const bool same = strParam(b, "padding") == "same";
  if (!transpose) {
    if (same) attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  } else {
    // Keras output sizes: same -> in * stride; valid -> in * stride + max(k - stride, 0).
    std::vector<int64_t> pads(2 * nd, 0), outPad(nd, 0);
    for (size_t i = 0; i < nd; ++i) {
      const int64_t keff = ((*k)[i] - 1) * (*d)[i] + 1, total = keff - (*s)[i];
      if (total < 0)
        outPad[i] = -total;
      else if (same)
        pads[i] = total / 2, pads[i + nd] = total - total / 2;
    }
    attrs.push_back(attrInts("pads", pads));
    attrs.push_back(attrInts("output_padding", outPad));
  }
  const std::string act = strParam(b, "activation");
  const auto y = b.op1(transpose ? "ConvTranspose" : "Conv", ins, attrs,
                       act == "linear" ? b.outputName(0) : "");
  return act == "linear" ? Status() : finish(b, y, act);
}

std::vector<ParamSpec> convParams(size_t nd, bool transpose) {
  std::vector<ParamSpec> v = {
      pInt("filters", 32, "Number of output channels."),
      pInts("kernel_size", {3}, "Kernel size: one value, or one per spatial axis."),
      pInts("strides", {1}, "Strides: one value, or one per spatial axis."),
      pStr("padding", "valid", "valid: no padding; same: output size = ceil(input / stride).",
           {"valid", "same"}),
      pInts("dilation_rate", {1}, "Dilation: one value, or one per spatial axis."),
      pInt("groups", 1, "Channel groups (filters and input channels must divide by it)."),
      activationParam()};
  auto w = weightParams();
  v.insert(v.end(), w.begin(), w.end());
  (void)nd;
  (void)transpose;
  return v;
}

// DepthwiseConv2D: a grouped Conv with groups = channels.
Status lowerDepthwise(LoweringBuilder& b, size_t nd) {
  auto dims = b.staticDims(0, "a depthwise convolution needs the channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 2) return b.fail("expects a rank-" + std::to_string(nd + 2) + " input");
  const int64_t c = (*dims)[1], mult = intParam(b, "depth_multiplier");
  if (c <= 0 || mult <= 0)
    return b.fail("channels and depth_multiplier must be known and positive");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  std::vector<int64_t> wshape = {c * mult, 1};
  wshape.insert(wshape.end(), k->begin(), k->end());
  std::vector<std::string> ins = {
      b.input(0), b.weight("depthwise_kernel", wshape, fillFor(b, "kernel_initializer"))};
  if (b.param("use_bias").asBool())
    ins.push_back(b.weight("bias", {c * mult}, fillFor(b, "bias_initializer")));
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k), attrInts("strides", *s),
                                             attrInts("dilations", *d), attrInt("group", c)};
  if (strParam(b, "padding") == "same") attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  const std::string act = strParam(b, "activation");
  const auto y = b.op1("Conv", ins, attrs, act == "linear" ? b.outputName(0) : "");
  return act == "linear" ? Status() : finish(b, y, act);
}

// SeparableConv: depthwise Conv (groups = channels), then a 1x1 pointwise Conv.
Status lowerSeparable(LoweringBuilder& b, size_t nd) {
  auto dims = b.staticDims(0, "a separable convolution needs the channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 2) return b.fail("expects a rank-" + std::to_string(nd + 2) + " input");
  const int64_t c = (*dims)[1], mult = intParam(b, "depth_multiplier"),
                filters = intParam(b, "filters");
  if (c <= 0 || mult <= 0 || filters <= 0)
    return b.fail("channels, depth_multiplier and filters must be positive");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  std::vector<int64_t> dshape = {c * mult, 1};
  dshape.insert(dshape.end(), k->begin(), k->end());
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k), attrInts("strides", *s),
                                             attrInts("dilations", *d), attrInt("group", c)};
  if (strParam(b, "padding") == "same") attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  const auto depth = b.op1(
      "Conv", {b.input(0), b.weight("depthwise_kernel", dshape, fillFor(b, "kernel_initializer"))},
      attrs);
  std::vector<int64_t> pshape = {filters, c * mult};
  pshape.insert(pshape.end(), nd, 1);
  std::vector<std::string> ins = {
      depth, b.weight("pointwise_kernel", pshape, fillFor(b, "kernel_initializer"))};
  if (b.param("use_bias").asBool())
    ins.push_back(b.weight("bias", {filters}, fillFor(b, "bias_initializer")));
  const std::string act = strParam(b, "activation");
  const auto y = b.op1("Conv", ins, {attrInts("kernel_shape", std::vector<int64_t>(nd, 1))},
                       act == "linear" ? b.outputName(0) : "");
  return act == "linear" ? Status() : finish(b, y, act);
}

Status lowerPool(LoweringBuilder& b, size_t nd, bool max) {
  auto rank = b.rankOf(0);
  if (!rank.ok()) return rank.status();
  if (*rank != static_cast<int64_t>(nd) + 2)
    return b.fail("expects a rank-" + std::to_string(nd + 2) + " input (N, C, spatial...)");
  auto k = spatial(b, "pool_size", nd);
  if (!k.ok()) return k.status();
  std::vector<int64_t> strides = b.param("strides").asInts();
  if (strides.empty())
    strides = *k;  // Keras: strides default to pool_size
  else if (strides.size() == 1)
    strides.assign(nd, strides[0]);
  if (strides.size() != nd) return b.fail("strides needs 1 or " + std::to_string(nd) + " values");
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k),
                                             attrInts("strides", strides)};
  if (strParam(b, "padding") == "same") attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  b.op1(max ? "MaxPool" : "AveragePool", {b.input(0)}, attrs, b.outputName(0));
  return Status();
}

Status lowerGlobalPool(LoweringBuilder& b, size_t nd, bool max) {
  auto rank = b.rankOf(0);
  if (!rank.ok()) return rank.status();
  if (*rank != static_cast<int64_t>(nd) + 2)
    return b.fail("expects a rank-" + std::to_string(nd + 2) + " input (N, C, spatial...)");
  if (b.param("keepdims").asBool()) {
    b.op1(max ? "GlobalMaxPool" : "GlobalAveragePool", {b.input(0)}, {}, b.outputName(0));
  } else {
    const auto pooled = b.op1(max ? "GlobalMaxPool" : "GlobalAveragePool", {b.input(0)});
    b.op1("Flatten", {pooled}, {attrInt("axis", 1)}, b.outputName(0));
  }
  return Status();
}

Status lowerDropout(LoweringBuilder& b) {
  const float rate = static_cast<float>(b.param("rate").asFloat());
  if (rate < 0 || rate >= 1) return b.fail("rate must be in [0, 1)");
  std::vector<onnx::AttributeProto> attrs;
  if (intParam(b, "seed")) attrs.push_back(attrInt("seed", intParam(b, "seed")));
  b.op("Dropout", {b.input(0), b.floatScalar("ratio", rate)}, attrs, {b.outputName(0)});
  return Status();
}

Status lowerFlatten(LoweringBuilder& b) {
  b.op1("Flatten", {b.input(0)}, {attrInt("axis", 1)}, b.outputName(0));
  return Status();
}

Status lowerReshape(LoweringBuilder& b) {
  std::vector<int64_t> shape = {0};  // keep the batch axis
  const Param target = b.param("target_shape");
  for (int64_t d : target.asInts()) shape.push_back(d);
  b.op1("Reshape", {b.input(0), b.int64s("shape", shape)}, {}, b.outputName(0));
  return Status();
}

Status lowerPermute(LoweringBuilder& b) {
  std::vector<int64_t> perm = {0};
  const Param dims = b.param("dims");
  for (int64_t d : dims.asInts()) perm.push_back(d);
  b.op1("Transpose", {b.input(0)}, {attrInts("perm", perm)}, b.outputName(0));
  return Status();
}

Status lowerNorm(LoweringBuilder& b, bool batch) {
  auto dims = b.staticDims(0, "a normalization needs the normalized axis' size");
  if (!dims.ok()) return dims.status();
  const int64_t rank = static_cast<int64_t>(dims->size());
  int64_t axis = intParam(b, "axis");
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    return b.fail("axis is out of range for a rank-" + std::to_string(rank) + " input");
  const int64_t c = (*dims)[axis];
  if (c <= 0) return b.fail("the size of axis " + std::to_string(axis) + " is unknown");
  const bool center = b.param("center").asBool(), scale = b.param("scale").asBool();
  WeightFill ones, zeros;
  ones.fill = "ones";
  zeros.fill = "zeros";
  if (batch) {
    if (axis != 1) return b.fail("BatchNormalization normalizes the channel axis 1 (ONNX layout)");
    const auto gamma =
        scale ? b.weight("gamma", {c}, ones) : b.weight("gamma", {c}, ones, "Constant");
    const auto beta =
        center ? b.weight("beta", {c}, zeros) : b.weight("beta", {c}, zeros, "Constant");
    const auto mean = b.weight("moving_mean", {c}, zeros, "Constant");
    const auto var = b.weight("moving_variance", {c}, ones, "Constant");
    b.op1("BatchNormalization", {b.input(0), gamma, beta, mean, var},
          {attrFloat("epsilon", static_cast<float>(b.param("epsilon").asFloat())),
           attrFloat("momentum", static_cast<float>(b.param("momentum").asFloat()))},
          b.outputName(0));
    return Status();
  }
  std::vector<int64_t> shape(dims->begin() + axis, dims->end());
  for (int64_t d : shape)
    if (d <= 0) return b.fail("LayerNormalization needs static sizes from axis on");
  const auto gamma =
      scale ? b.weight("gamma", shape, ones) : b.weight("gamma", shape, ones, "Constant");
  std::vector<std::string> ins = {b.input(0), gamma};
  if (center) ins.push_back(b.weight("beta", shape, zeros));
  b.op1("LayerNormalization", ins,
        {attrInt("axis", axis),
         attrFloat("epsilon", static_cast<float>(b.param("epsilon").asFloat()))},
        b.outputName(0));
  return Status();
}

Status lowerEmbedding(LoweringBuilder& b) {
  const int64_t n = intParam(b, "input_dim"), d = intParam(b, "output_dim");
  if (n <= 0 || d <= 0) return b.fail("input_dim and output_dim must be positive");
  const auto table = b.weight("embeddings", {n, d}, fillFor(b, "embeddings_initializer"));
  const auto idx = b.op1("Cast", {b.input(0)}, {attrInt("to", onnx::TensorProto::INT64)});
  b.op1("Gather", {table, idx}, {attrInt("axis", 0)}, b.outputName(0));
  return Status();
}

Status lowerMerge(LoweringBuilder& b, const std::string& op) {
  std::vector<std::string> ins;
  for (int i = 0; i < b.inputCount(); ++i)
    if (!b.input(i).empty()) ins.push_back(b.input(i));
  if (ins.size() < 2) return b.fail("needs at least two connected inputs");
  if (op == "Sub") {
    if (ins.size() != 2) return b.fail("Subtract takes exactly two inputs");
    b.op1("Sub", ins, {}, b.outputName(0));
  } else if (op == "Concat") {
    b.op1("Concat", ins, {attrInt("axis", intParam(b, "axis"))}, b.outputName(0));
  } else {
    b.op1(op, ins, {}, b.outputName(0));  // Sum, Mean and the chained Mul are variadic
  }
  return Status();
}

Status lowerMultiply(LoweringBuilder& b) {
  std::vector<std::string> ins;
  for (int i = 0; i < b.inputCount(); ++i)
    if (!b.input(i).empty()) ins.push_back(b.input(i));
  if (ins.size() < 2) return b.fail("needs at least two connected inputs");
  std::string acc = ins[0];
  for (size_t i = 1; i < ins.size(); ++i)
    acc = b.op1("Mul", {acc, ins[i]}, {}, i + 1 == ins.size() ? b.outputName(0) : "");
  return Status();
}

// Padding/cropping amounts: one value for all, one per axis (symmetric), or begin/end per axis.
Result<std::pair<std::vector<int64_t>, std::vector<int64_t>>> amounts(LoweringBuilder& b,
                                                                      const std::string& name,
                                                                      size_t nd) {
  std::vector<int64_t> v = b.param(name).asInts();
  std::vector<int64_t> begin(nd), end(nd);
  if (v.size() == 1) {
    begin.assign(nd, v[0]);
    end.assign(nd, v[0]);
  } else if (v.size() == nd) {
    begin = end = v;
  } else if (v.size() == 2 * nd) {
    for (size_t i = 0; i < nd; ++i) begin[i] = v[2 * i], end[i] = v[2 * i + 1];
  } else {
    return b.fail(name + " needs 1, " + std::to_string(nd) + " or " + std::to_string(2 * nd) +
                  " values");
  }
  for (size_t i = 0; i < nd; ++i)
    if (begin[i] < 0 || end[i] < 0) return b.fail(name + " values must be >= 0");
  return std::make_pair(begin, end);
}

Status lowerZeroPadding(LoweringBuilder& b, size_t nd) {
  auto a = amounts(b, "padding", nd);
  if (!a.ok()) return a.status();
  std::vector<int64_t> pads(2 * (nd + 2), 0);
  for (size_t i = 0; i < nd; ++i) pads[2 + i] = a->first[i], pads[nd + 4 + i] = a->second[i];
  b.op1("Pad", {b.input(0), b.int64s("pads", pads)}, {attrString("mode", "constant")},
        b.outputName(0));
  return Status();
}

Status lowerCropping(LoweringBuilder& b, size_t nd) {
  auto a = amounts(b, "cropping", nd);
  if (!a.ok()) return a.status();
  std::vector<int64_t> starts, ends, axes;
  for (size_t i = 0; i < nd; ++i) {
    starts.push_back(a->first[i]);
    ends.push_back(a->second[i] ? -a->second[i] : INT64_MAX);
    axes.push_back(static_cast<int64_t>(i) + 2);
  }
  b.op1("Slice",
        {b.input(0), b.int64s("starts", starts), b.int64s("ends", ends), b.int64s("axes", axes)},
        {}, b.outputName(0));
  return Status();
}

Status lowerUpSampling(LoweringBuilder& b, size_t nd) {
  auto size = spatial(b, "size", nd);
  if (!size.ok()) return size.status();
  onnx::TensorProto scales;
  scales.set_data_type(onnx::TensorProto::FLOAT);
  scales.add_dims(static_cast<int64_t>(nd + 2));
  scales.add_float_data(1);
  scales.add_float_data(1);
  for (int64_t s : *size) scales.add_float_data(static_cast<float>(s));
  const std::string mode = strParam(b, "interpolation") == "bilinear" ? "linear" : "nearest";
  std::vector<onnx::AttributeProto> attrs = {attrString("mode", mode)};
  if (mode == "nearest") {
    attrs.push_back(attrString("coordinate_transformation_mode", "asymmetric"));
    attrs.push_back(attrString("nearest_mode", "floor"));
  } else {
    attrs.push_back(attrString("coordinate_transformation_mode", "half_pixel"));
  }
  b.op1("Resize", {b.input(0), "", b.constant("scales", scales)}, attrs, b.outputName(0));
  return Status();
}

Status lowerSoftmax(LoweringBuilder& b) {
  b.op1("Softmax", {b.input(0)}, {attrInt("axis", intParam(b, "axis"))}, b.outputName(0));
  return Status();
}

Status lowerReLU(LoweringBuilder& b) {
  const double maxValue = b.param("max_value").asFloat(),
               slope = b.param("negative_slope").asFloat(),
               threshold = b.param("threshold").asFloat();
  std::string x = b.input(0);
  if (threshold != 0) {
    if (slope != 0) return b.fail("a non-zero threshold with a negative_slope is not supported");
    // f(x) = x if x >= threshold else 0
    const auto keep = b.op1(
        "Cast", {b.op1("Not", {b.op1("Less", {x, b.floatScalar("threshold", float(threshold))})})},
        {attrInt("to", onnx::TensorProto::FLOAT)});
    x = b.op1("Mul", {x, keep}, {}, maxValue > 0 ? "" : b.outputName(0));
  } else {
    x = slope != 0 ? b.op1("LeakyRelu", {x}, {attrFloat("alpha", float(slope))},
                           maxValue > 0 ? "" : b.outputName(0))
                   : b.op1("Relu", {x}, {}, maxValue > 0 ? "" : b.outputName(0));
  }
  if (maxValue > 0)
    b.op1("Min", {x, b.floatScalar("max_value", float(maxValue))}, {}, b.outputName(0));
  return Status();
}

Status lowerPReLU(LoweringBuilder& b) {
  auto dims = b.staticDims(0, "PReLU needs the channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() < 2 || (*dims)[1] <= 0)
    return b.fail("expects an input with a known axis 1 (channels)");
  WeightFill f = fillFor(b, "alpha_initializer");
  std::vector<int64_t> shape = {(*dims)[1]};
  shape.insert(shape.end(), dims->size() - 2, 1);  // broadcast over spatial axes
  b.op1("PRelu", {b.input(0), b.weight("alpha", shape, f)}, {}, b.outputName(0));
  return Status();
}

Status lowerThresholdedReLU(LoweringBuilder& b) {
  b.op1("ThresholdedRelu", {b.input(0)}, {attrFloat("alpha", float(b.param("theta").asFloat()))},
        b.outputName(0));
  return Status();
}

Status lowerGaussianNoise(LoweringBuilder& b) {
  // Noise is a training-time regularizer; inference is the identity, which is what ONNX exports.
  b.op1("Identity", {b.input(0)}, {}, b.outputName(0));
  return Status();
}

Status lowerSplit(LoweringBuilder& b) {
  const int64_t n = intParam(b, "num_or_size_splits");
  if (n <= 0) return b.fail("num_or_size_splits must be positive");
  std::vector<std::string> outs;
  for (int64_t i = 0; i < n; ++i) outs.push_back(b.outputName(static_cast<int>(i)));
  b.op("Split", {b.input(0)}, {attrInt("axis", intParam(b, "axis"))}, outs);
  return Status();
}

Status lowerRecurrent(LoweringBuilder& b, const std::string& kind, bool bidirectional) {
  auto dims = b.staticDims(0, "a recurrent layer needs the feature count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != 3) return b.fail("expects a rank-3 input (batch, time, features)");
  const int64_t features = (*dims)[2], units = intParam(b, "units");
  if (features <= 0 || units <= 0) return b.fail("features and units must be known and positive");
  const int64_t gates = kind == "LSTM" ? 4 : kind == "GRU" ? 3 : 1, dirs = bidirectional ? 2 : 1;
  WeightFill rf = fillFor(b, "recurrent_initializer");
  const auto w =
      b.weight("kernel", {dirs, gates * units, features}, fillFor(b, "kernel_initializer"));
  const auto r = b.weight("recurrent_kernel", {dirs, gates * units, units}, rf);
  std::vector<std::string> ins = {b.input(0), w, r};
  if (b.param("use_bias").asBool()) {
    WeightFill bf = fillFor(b, "bias_initializer");
    if (kind == "LSTM" && b.param("unit_forget_bias").asBool())
      bf.forgetGateOnes = units;  // iofc: f is gate 2
    ins.push_back(b.weight("bias", {dirs, 2 * gates * units}, bf));
  }
  std::vector<onnx::AttributeProto> attrs = {attrInt("hidden_size", units), attrInt("layout", 1)};
  if (bidirectional)
    attrs.push_back(attrString("direction", "bidirectional"));
  else if (b.param("go_backwards").asBool())
    attrs.push_back(attrString("direction", "reverse"));
  if (kind == "GRU")
    attrs.push_back(attrInt("linear_before_reset", b.param("reset_after").asBool() ? 1 : 0));
  if (kind == "RNN") {
    const std::string act = strParam(b, "activation");
    const std::string onnxAct = act == "tanh"      ? "Tanh"
                                : act == "relu"    ? "Relu"
                                : act == "sigmoid" ? "Sigmoid"
                                                   : "";
    if (onnxAct.empty()) return b.fail("SimpleRNN supports activation tanh, relu or sigmoid");
    onnx::AttributeProto a;
    a.set_name("activations");
    a.set_type(onnx::AttributeProto::STRINGS);
    for (int64_t i = 0; i < dirs; ++i) a.add_strings(onnxAct);
    attrs.push_back(a);
  }
  const bool sequences = b.param("return_sequences").asBool();
  // layout=1: Y is [N, T, dirs, units], Y_h is [N, dirs, units].
  auto outs = b.op(kind, ins, attrs, {"", ""});
  const std::string& y = sequences ? outs[0] : outs[1];
  if (!bidirectional) {
    // Keras returns a go_backwards layer's sequence in processing order (last time step
    // first); ONNX's reverse direction aligns Y with the input's time axis, so flip it back.
    const bool flip = sequences && b.param("go_backwards").asBool();
    const auto squeezed = b.op1("Squeeze", {y, b.int64s("axis", {sequences ? 2 : 1})}, {},
                                flip ? "" : b.outputName(0));
    if (flip)
      b.op1("Slice",
            {squeezed, b.int64s("starts", {-1}), b.int64s("ends", {INT64_MIN}),
             b.int64s("axes", {1}), b.int64s("steps", {-1})},
            {}, b.outputName(0));
    return Status();
  }
  const std::string mode = strParam(b, "merge_mode");
  const int64_t dirAxis = sequences ? 2 : 1;
  if (mode == "concat") {
    std::vector<int64_t> shape =
        sequences ? std::vector<int64_t>{0, 0, 2 * units} : std::vector<int64_t>{0, 2 * units};
    b.op1("Reshape", {y, b.int64s("shape", shape)}, {}, b.outputName(0));
  } else {
    const std::string reduce = mode == "sum"   ? "ReduceSum"
                               : mode == "ave" ? "ReduceMean"
                                               : "ReduceProd";
    if (reduce == "ReduceSum")
      b.op1(reduce, {y, b.int64s("axes", {dirAxis})}, {attrInt("keepdims", 0)}, b.outputName(0));
    else
      b.op1(reduce, {y}, {attrInts("axes", {dirAxis}), attrInt("keepdims", 0)}, b.outputName(0));
  }
  return Status();
}

std::vector<ParamSpec> recurrentParams(const std::string& kind, bool bidirectional) {
  std::vector<ParamSpec> v = {
      pInt("units", 32, "Size of the hidden state."),
      pBool("return_sequences", false,
            "Return the whole output sequence (batch, time, units) "
            "rather than the last state (batch, units)."),
      initParam("kernel_initializer", "glorot_uniform", "input kernel"),
      initParam("recurrent_initializer", "orthogonal", "recurrent kernel"),
      pBool("use_bias", true, "Whether the layer adds biases."),
      initParam("bias_initializer", "zeros", "biases"),
      pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
      pInt("seed", 0, "Seed of the weight initializers.")};
  const auto r = regularizerParams({"kernel", "recurrent", "bias"});
  v.insert(v.end(), r.begin(), r.end());
  if (kind == "LSTM")
    v.push_back(pBool("unit_forget_bias", true, "Initialize the forget gate's bias to 1."));
  if (kind == "GRU")
    v.push_back(pBool("reset_after", true,
                      "Apply the reset gate after the matrix product (Keras default; ONNX "
                      "linear_before_reset)."));
  if (kind == "RNN")
    v.push_back(
        pStr("activation", "tanh", "Activation of the recurrence.", {"tanh", "relu", "sigmoid"}));
  if (bidirectional) {
    v.push_back(pStr("layer", "LSTM", "The recurrent layer run in both directions.",
                     {"LSTM", "GRU", "SimpleRNN"}));
    v.push_back(pStr("merge_mode", "concat", "How the two directions combine.",
                     {"concat", "sum", "mul", "ave"}));
  } else {
    v.push_back(pBool("go_backwards", false,
                      "Process the sequence backwards (with return_sequences, the output is in "
                      "processing order: last time step first, as Keras returns it)."));
  }
  return v;
}

Status lowerBidirectional(LoweringBuilder& b) {
  const std::string layer = strParam(b, "layer");
  if (layer == "SimpleRNN") return lowerRecurrent(b, "RNN", true);
  return lowerRecurrent(b, layer, true);
}

// A value_info of element type `elem` and rank `rank`, dims unknown (a Scan body's interface).
onnx::ValueInfoProto bodyValue(const std::string& name, int32_t elem, size_t rank) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* tt = v.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < rank; ++i) shape->add_dim();
  return v;
}

// ConvLSTM: an LSTM whose input and recurrent transforms are convolutions, over (batch, time,
// channels, spatial...). ONNX has no such op, so it lowers to a Scan over the time axis whose
// body runs one step: Conv(x_t) + Conv(h) -> gates (ONNX LSTM order i, o, f, c) -> c, h. The
// weights stay initializers of the outer graph and the body reads them from there. The recurrent
// convolution is 'same' with stride 1, as in Keras, so the state keeps the input conv's size.
Status lowerConvLSTM(LoweringBuilder& b, size_t nd) {
  auto dims = b.staticDims(0, "ConvLSTM needs the input's channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 3)
    return b.fail("expects a rank-" + std::to_string(nd + 3) +
                  " input (batch, time, channels, spatial...), got rank " +
                  std::to_string(dims->size()));
  const int64_t cin = (*dims)[2], filters = intParam(b, "filters");
  if (cin <= 0) return b.fail("the input's channel count (axis 2) is unknown");
  if (filters <= 0) return b.fail("filters must be positive");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  const std::string act = strParam(b, "activation"), ract = strParam(b, "recurrent_activation");
  const auto type = b.inputType(0);
  const int32_t elem = type ? type->tensor_type().elem_type() : onnx::TensorProto::FLOAT;

  std::vector<int64_t> wshape = {4 * filters, cin}, ushape = {4 * filters, filters};
  wshape.insert(wshape.end(), k->begin(), k->end());
  ushape.insert(ushape.end(), k->begin(), k->end());
  const auto w = b.weight("kernel", wshape, fillFor(b, "kernel_initializer"));
  const auto u = b.weight("recurrent_kernel", ushape, fillFor(b, "recurrent_initializer"));
  std::string bias;
  if (b.param("use_bias").asBool()) {
    // (1, 4 * filters), as LSTM's (directions, ...): the fill sets the forget gate (gate 2) to 1.
    WeightFill bf = fillFor(b, "bias_initializer");
    if (b.param("unit_forget_bias").asBool()) bf.forgetGateOnes = filters;
    bias = b.op1("Squeeze", {b.weight("bias", {1, 4 * filters}, bf), b.int64s("bias_axis", {0})});
  }
  std::vector<onnx::AttributeProto> convAttrs = {
      attrInts("kernel_shape", *k), attrInts("strides", *s), attrInts("dilations", *d)};
  if (strParam(b, "padding") == "same") convAttrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  const std::vector<onnx::AttributeProto> recurrentAttrs = {attrInts("kernel_shape", *k),
                                                            attrString("auto_pad", "SAME_UPPER")};

  // Zero initial state shaped like the first step's gates for one gate: (N, filters, out...).
  const auto first = b.op1("Gather", {b.input(0), b.int64s("step0", {0})}, {attrInt("axis", 1)});
  std::vector<std::string> firstIns = {b.op1("Squeeze", {first, b.int64s("step0_axis", {1})}), w};
  const auto gates0 = b.op1("Conv", firstIns, convAttrs);
  const auto oneGate =
      b.op1("Slice", {gates0, b.int64s("gate_start", {0}), b.int64s("gate_end", {filters}),
                      b.int64s("gate_axis", {1})});
  const auto zeros = b.op1("ConstantOfShape", {b.op1("Shape", {oneGate})});

  // The step body.
  const std::string p = b.outputName(0) + "/step/";
  onnx::GraphProto body;
  body.set_name(p + "body");
  const size_t rank = nd + 2;
  *body.add_input() = bodyValue(p + "h_prev", elem, rank);
  *body.add_input() = bodyValue(p + "c_prev", elem, rank);
  *body.add_input() = bodyValue(p + "x_t", elem, rank);
  auto node = [&](const std::string& op, std::vector<std::string> ins,
                  std::vector<std::string> outs, std::vector<onnx::AttributeProto> attrs = {}) {
    auto* n = body.add_node();
    n->set_op_type(op);
    n->set_name(p + op + "_" + std::to_string(body.node_size()));
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(p + o);
    for (auto& a : attrs) *n->add_attribute() = std::move(a);
  };
  std::vector<std::string> xIns = {p + "x_t", w};
  if (!bias.empty()) xIns.push_back(bias);
  node("Conv", xIns, {"zx"}, convAttrs);
  node("Conv", {p + "h_prev", u}, {"zh"}, recurrentAttrs);
  node("Add", {p + "zx", p + "zh"}, {"z"});
  std::vector<onnx::AttributeProto> splitAttrs = {attrInt("axis", 1)};
  if (b.opset() >= 18) splitAttrs.push_back(attrInt("num_outputs", 4));
  node("Split", {p + "z"}, {"zi", "zo", "zf", "zc"}, splitAttrs);
  auto gate = [&](const std::string& fn, const std::string& in, const std::string& out) {
    if (fn == "hard_sigmoid")
      node("HardSigmoid", {p + in}, {out}, {attrFloat("alpha", 1.0f / 6), attrFloat("beta", 0.5f)});
    else
      node(fn == "sigmoid" ? "Sigmoid" : fn == "relu" ? "Relu" : "Tanh", {p + in}, {out});
  };
  gate(ract, "zi", "i");
  gate(ract, "zo", "o");
  gate(ract, "zf", "f");
  gate(act, "zc", "g");
  node("Mul", {p + "f", p + "c_prev"}, {"fc"});
  node("Mul", {p + "i", p + "g"}, {"ig"});
  node("Add", {p + "fc", p + "ig"}, {"c"});
  gate(act, "c", "ac");
  node("Mul", {p + "o", p + "ac"}, {"h"});
  node("Identity", {p + "h"}, {"h_out"});
  for (const char* o : {"h", "c", "h_out"}) *body.add_output() = bodyValue(p + o, elem, rank);

  onnx::AttributeProto bodyAttr;
  bodyAttr.set_name("body");
  bodyAttr.set_type(onnx::AttributeProto::GRAPH);
  *bodyAttr.mutable_g() = std::move(body);
  // Keras returns a go_backwards sequence in processing order: the outputs are not reversed.
  std::vector<onnx::AttributeProto> scanAttrs = {
      bodyAttr, attrInt("num_scan_inputs", 1), attrInts("scan_input_axes", {1}),
      attrInts("scan_output_axes", {1}),
      attrInts("scan_input_directions", {b.param("go_backwards").asBool() ? 1 : 0})};
  const bool sequences = b.param("return_sequences").asBool();
  b.op("Scan", {zeros, zeros, b.input(0)}, std::move(scanAttrs),
       {sequences ? "" : b.outputName(0), "", sequences ? b.outputName(0) : ""});
  return Status();
}

std::vector<ParamSpec> convLstmParams() {
  std::vector<ParamSpec> v = {
      pInt("filters", 16, "Channels of the hidden state."),
      pInts("kernel_size", {3}, "Kernel size: one value, or one per spatial axis."),
      pInts("strides", {1}, "Strides of the input convolution."),
      pStr("padding", "valid", "Padding of the input convolution: valid or same.",
           {"valid", "same"}),
      pInts("dilation_rate", {1}, "Dilation of the input convolution."),
      pStr("activation", "tanh", "Activation of the cell input and output.", {"tanh", "relu"}),
      pStr("recurrent_activation", "sigmoid", "Activation of the gates.",
           {"sigmoid", "hard_sigmoid"}),
      pBool("return_sequences", false,
            "Return every step's state (batch, time, filters, spatial...) rather than the "
            "last one."),
      pBool("go_backwards", false,
            "Process the sequence backwards (the sequence output stays in processing order, "
            "as Keras returns it)."),
      initParam("kernel_initializer", "glorot_uniform", "input kernel"),
      initParam("recurrent_initializer", "orthogonal", "recurrent kernel"),
      pBool("use_bias", true, "Whether the layer adds a bias."),
      initParam("bias_initializer", "zeros", "bias"),
      pBool("unit_forget_bias", true, "Initialize the forget gate's bias to 1."),
      pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
      pInt("seed", 0, "Seed of the weight initializers.")};
  const auto r = regularizerParams({"kernel", "recurrent", "bias"});
  v.insert(v.end(), r.begin(), r.end());
  return v;
}

// Scaled dot-product attention core: softmax(q k^T * scale) v, batched over leading axes.
std::string attend(LoweringBuilder& b, const std::string& q, const std::string& k,
                   const std::string& v, const std::string& scale, int64_t rank,
                   const std::string& out) {
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i;
  std::swap(perm[rank - 1], perm[rank - 2]);
  auto scores = b.op1("MatMul", {q, b.op1("Transpose", {k}, {attrInts("perm", perm)})});
  if (!scale.empty()) scores = b.op1("Mul", {scores, scale});
  const auto weights = b.op1("Softmax", {scores}, {attrInt("axis", -1)});
  return b.op1("MatMul", {weights, v}, {}, out);
}

Status lowerAttention(LoweringBuilder& b) {
  const std::string q = b.input(0), v = b.input(1), k = b.input(2).empty() ? v : b.input(2);
  std::string scale;
  if (b.param("use_scale").asBool()) {
    WeightFill one;
    one.fill = "ones";
    scale = b.weight("scale", {}, one);
  }
  attend(b, q, k, v, scale, 3, b.outputName(0));
  return Status();
}

Status lowerAdditiveAttention(LoweringBuilder& b) {
  auto dims = b.staticDims(0, "AdditiveAttention needs the feature size");
  if (!dims.ok()) return dims.status();
  if (dims->size() != 3 || dims->back() <= 0)
    return b.fail("expects query (batch, Tq, dim) with a known dim");
  const std::string q = b.input(0), v = b.input(1), k = b.input(2).empty() ? v : b.input(2);
  // scores[b, i, j] = sum_d scale[d] * tanh(q[b, i, d] + k[b, j, d])
  const auto sum = b.op1("Add", {b.op1("Unsqueeze", {q, b.int64s("q_axis", {2})}),
                                 b.op1("Unsqueeze", {k, b.int64s("k_axis", {1})})});
  std::string t = b.op1("Tanh", {sum});
  if (b.param("use_scale").asBool()) {
    WeightFill f = fillFor(b, "kernel_initializer");
    t = b.op1("Mul", {t, b.weight("scale", {dims->back()}, f)});
  }
  const auto scores = b.op1("ReduceSum", {t, b.int64s("sum_axis", {-1})}, {attrInt("keepdims", 0)});
  const auto weights = b.op1("Softmax", {scores}, {attrInt("axis", -1)});
  b.op1("MatMul", {weights, v}, {}, b.outputName(0));
  return Status();
}

// Multi-head attention: per-head projections, scaled dot products, and an output projection.
Status lowerMultiHeadAttention(LoweringBuilder& b) {
  auto qd = b.staticDims(0, "MultiHeadAttention needs the query's feature size");
  auto vd = b.staticDims(1, "MultiHeadAttention needs the value's feature size");
  if (!qd.ok()) return qd.status();
  if (!vd.ok()) return vd.status();
  if (qd->size() != 3 || vd->size() != 3)
    return b.fail("query and value must be (batch, time, features)");
  const int64_t heads = intParam(b, "num_heads"), kdim = intParam(b, "key_dim");
  const int64_t vdim = intParam(b, "value_dim") > 0 ? intParam(b, "value_dim") : kdim;
  const int64_t dq = qd->back(), dv = vd->back();
  if (heads <= 0 || kdim <= 0 || dq <= 0 || dv <= 0)
    return b.fail("num_heads, key_dim and feature sizes must be positive");
  std::string kIn = b.input(2).empty() ? b.input(1) : b.input(2);
  int64_t dk = dv;
  if (!b.input(2).empty()) {
    auto kd = b.staticDims(2, "MultiHeadAttention needs the key's feature size");
    if (!kd.ok()) return kd.status();
    dk = kd->back();
  }
  const bool bias = b.param("use_bias").asBool();
  WeightFill kf = fillFor(b, "kernel_initializer");
  kf.fanInFirst = true;
  auto project = [&](const std::string& x, int64_t in, int64_t width, const std::string& name) {
    auto y = b.op1("MatMul", {x, b.weight(name + "_kernel", {in, heads * width}, kf)});
    if (bias)
      y = b.op1("Add",
                {y, b.weight(name + "_bias", {heads * width}, fillFor(b, "bias_initializer"))});
    // (N, T, heads*width) -> (N, heads, T, width)
    y = b.op1("Reshape", {y, b.int64s(name + "_heads", {0, 0, heads, width})});
    return b.op1("Transpose", {y}, {attrInts("perm", {0, 2, 1, 3})});
  };
  const auto q = project(b.input(0), dq, kdim, "query");
  const auto k = project(kIn, dk, kdim, "key");
  const auto v = project(b.input(1), dv, vdim, "value");
  const auto ctx = attend(b, q, k, v, b.floatScalar("scale", 1.0f / std::sqrt(float(kdim))), 4, "");
  const auto merged = b.op1("Reshape", {b.op1("Transpose", {ctx}, {attrInts("perm", {0, 2, 1, 3})}),
                                        b.int64s("merge", {0, 0, heads * vdim})});
  const int64_t outDim = intParam(b, "output_dim") > 0 ? intParam(b, "output_dim") : dq;
  auto y = b.op1("MatMul", {merged, b.weight("output_kernel", {heads * vdim, outDim}, kf)}, {},
                 bias ? "" : b.outputName(0));
  if (bias)
    b.op1("Add", {y, b.weight("output_bias", {outDim}, fillFor(b, "bias_initializer"))}, {},
          b.outputName(0));
  return Status();
}

// --- The domain --------------------------------------------------------------------------------

struct LayerDef {
  std::string type, category, doc;
  std::vector<PortSpec> inputs, outputs;
  std::vector<ParamSpec> params;
  LowerFn lower;
  std::vector<std::string> aliases = {};
};

void add(CatalogueBuilder& cb, LayerDef d) {
  NodeSpec s;
  s.domain = kDomain;
  s.type = d.type;
  s.category = d.category;
  s.doc = d.doc;
  s.kind = NodeKind::Layer;
  s.inputs = std::move(d.inputs);
  s.outputs = std::move(d.outputs);
  s.params = std::move(d.params);
  s.typeConstraints = {floatTypes()};
  s.lower = d.lower;
  s.aliases = std::move(d.aliases);
  s.minInputs = 0;
  for (const auto& p : s.inputs) s.minInputs += p.option == PortOption::Single ? 1 : 0;
  s.maxInputs = static_cast<int>(s.inputs.size());
  s.minOutputs = s.maxOutputs = static_cast<int>(s.outputs.size());
  cb.add(std::move(s));
}

PortSpec in(const std::string& doc = "Input tensor.") {
  return port("inputs", doc);
}
PortSpec out(const std::string& doc = "Output tensor.") {
  return port("outputs", doc);
}

// Capture-less lambdas convert to LowerFn; these adapt the parameterized lowerings.
template <size_t N, bool T>
Status conv(LoweringBuilder& b) {
  return lowerConv(b, N, T);
}
template <size_t N, bool M>
Status pool(LoweringBuilder& b) {
  return lowerPool(b, N, M);
}
template <size_t N, bool M>
Status gpool(LoweringBuilder& b) {
  return lowerGlobalPool(b, N, M);
}
template <size_t N>
Status zpad(LoweringBuilder& b) {
  return lowerZeroPadding(b, N);
}
template <size_t N>
Status crop(LoweringBuilder& b) {
  return lowerCropping(b, N);
}
template <size_t N>
Status convlstm(LoweringBuilder& b) {
  return lowerConvLSTM(b, N);
}
template <size_t N>
Status upsample(LoweringBuilder& b) {
  return lowerUpSampling(b, N);
}

}  // namespace

void addLayersDomain(CatalogueBuilder& cb) {
  cb.setDefaultOpset(kDomain, 1);
  const std::vector<std::string> dimsName = {"", "1D", "2D", "3D"};

  add(cb, {"Dense",
           "core",
           "Densely connected layer: outputs = activation(inputs . kernel + bias) "
           "on the last axis. Lowers to Gemm (2-D inputs) or MatMul + Add.",
           {in()},
           {out()},
           [] {
             std::vector<ParamSpec> v = {pInt("units", 32, "Size of the output's last axis."),
                                         activationParam()};
             auto w = weightParams();
             v.insert(v.end(), w.begin(), w.end());
             return v;
           }(),
           lowerDense});
  add(cb, {"Flatten",
           "reshaping",
           "Flattens all axes but the batch axis. Lowers to Flatten.",
           {in()},
           {out()},
           {},
           lowerFlatten});
  add(cb, {"Reshape",
           "reshaping",
           "Reshapes all axes but the batch axis to target_shape "
           "(-1 infers one axis). Lowers to Reshape.",
           {in()},
           {out()},
           {pInts("target_shape", {-1}, "The new shape, without the batch axis.")},
           lowerReshape});
  add(cb, {"Permute3D",
           "reshaping",
           "Permutes the three non-batch axes of a rank-4 input; dims "
           "are 1-based, as in Keras. Lowers to Transpose.",
           {in()},
           {out()},
           {pInts("dims", {2, 1, 3}, "Permutation of axes 1, 2, 3.")},
           lowerPermute});
  for (const char* t : {"Dropout", "SpatialDropout", "AlphaDropout", "GaussianDropout"})
    add(cb, {t,
             "regularization",
             std::string(t) + ": drops units with probability rate during training and is the "
                              "identity at inference. Lowers to Dropout (ONNX has one dropout "
                              "op; its training_mode input selects the behaviour).",
             {in()},
             {out()},
             {pFloat("rate", 0.5, "Fraction of units dropped in training."),
              pInt("seed", 0, "Seed of the dropout mask (0: unseeded).")},
             lowerDropout});
  add(cb, {"GaussianNoise",
           "regularization",
           "Adds zero-mean Gaussian noise in training; the identity at inference, which is what "
           "the exported ONNX computes.",
           {in()},
           {out()},
           {pFloat("stddev", 0.1, "Standard deviation of the noise.")},
           lowerGaussianNoise});
  add(cb, {"Embedding",
           "core",
           "Maps integer indices to dense vectors: a Gather from a "
           "trainable (input_dim, output_dim) table.",
           {[] {
             PortSpec p = port("inputs", "Integer indices.");
             p.allowedTypes = {"tensor(int32)", "tensor(int64)"};
             p.differentiability = Differentiability::NonDifferentiable;
             return p;
           }()},
           {out()},
           [] {
             std::vector<ParamSpec> v = {
                 pInt("input_dim", 1000, "Vocabulary size."),
                 pInt("output_dim", 64, "Vector size."),
                 initParam("embeddings_initializer", "random_uniform", "table"),
                 pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
                 pInt("seed", 0, "Seed of the initializer.")};
             const auto r = regularizerParams({"embeddings"});
             v.insert(v.end(), r.begin(), r.end());
             return v;
           }(),
           lowerEmbedding});

  // Activations.
  struct Act {
    const char* type;
    const char* act;
    const char* doc;
  };
  for (const Act& a :
       std::vector<Act>{{"Sigmoid", "sigmoid", "1 / (1 + exp(-x))."},
                        {"TanH", "tanh", "Hyperbolic tangent."},
                        {"SELU", "selu", "Scaled exponential linear unit."},
                        {"SoftPlus", "softplus", "log(1 + exp(x))."},
                        {"SoftSign", "softsign", "x / (1 + |x|)."},
                        {"Swish", "swish", "x * sigmoid(x) (SiLU)."},
                        {"GELU", "gelu", "Gaussian error linear unit (exact, erf form)."},
                        {"Exponential", "exponential", "exp(x)."},
                        {"HardSigmoid", "hard_sigmoid", "relu6(x + 3) / 6."},
                        {"Linear", "linear", "The identity."}}) {
    LowerFn fn = nullptr;
    const std::string act = a.act;
    if (act == "sigmoid") fn = [](LoweringBuilder& b) { return lowerActivation(b, "sigmoid"); };
    if (act == "tanh") fn = [](LoweringBuilder& b) { return lowerActivation(b, "tanh"); };
    if (act == "selu") fn = [](LoweringBuilder& b) { return lowerActivation(b, "selu"); };
    if (act == "softplus") fn = [](LoweringBuilder& b) { return lowerActivation(b, "softplus"); };
    if (act == "softsign") fn = [](LoweringBuilder& b) { return lowerActivation(b, "softsign"); };
    if (act == "swish") fn = [](LoweringBuilder& b) { return lowerActivation(b, "swish"); };
    if (act == "gelu") fn = [](LoweringBuilder& b) { return lowerActivation(b, "gelu"); };
    if (act == "exponential")
      fn = [](LoweringBuilder& b) { return lowerActivation(b, "exponential"); };
    if (act == "hard_sigmoid")
      fn = [](LoweringBuilder& b) { return lowerActivation(b, "hard_sigmoid"); };
    if (act == "linear") fn = [](LoweringBuilder& b) { return lowerActivation(b, "linear"); };
    add(cb, {a.type, "activation", std::string("Activation: ") + a.doc, {in()}, {out()}, {}, fn});
  }
  add(cb, {"ReLU",
           "activation",
           "Rectified linear unit with Keras' options: max(x, 0), or "
           "negative_slope * x below 0, capped at max_value, zero below "
           "threshold.",
           {in()},
           {out()},
           {pFloat("max_value", 0.0, "Upper cap (0: none)."),
            pFloat("negative_slope", 0.0, "Slope below zero."),
            pFloat("threshold", 0.0, "Values below it become 0.")},
           lowerReLU});
  add(cb, {"LeakyReLU",
           "activation",
           "x if x > 0 else alpha * x.",
           {in()},
           {out()},
           {pFloat("alpha", 0.3, "Slope below zero.")},
           [](LoweringBuilder& b) {
             b.op1("LeakyRelu", {b.input(0)},
                   {attrFloat("alpha", float(b.param("alpha").asFloat()))}, b.outputName(0));
             return Status();
           }});
  add(cb, {"ELU",
           "activation",
           "x if x > 0 else alpha * (exp(x) - 1).",
           {in()},
           {out()},
           {pFloat("alpha", 1.0, "Scale of the negative part.")},
           [](LoweringBuilder& b) {
             b.op1("Elu", {b.input(0)}, {attrFloat("alpha", float(b.param("alpha").asFloat()))},
                   b.outputName(0));
             return Status();
           }});
  add(cb, {"ThresholdedReLU",
           "activation",
           "x if x > theta else 0.",
           {in()},
           {out()},
           {pFloat("theta", 1.0, "Threshold.")},
           lowerThresholdedReLU});
  add(cb, {"PReLU",
           "activation",
           "x if x > 0 else alpha * x, with a trainable alpha per channel "
           "(axis 1).",
           {in()},
           {out()},
           {initParam("alpha_initializer", "zeros", "alpha"),
            pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
            pInt("seed", 0, "Seed of the initializer.")},
           lowerPReLU});
  add(cb, {"SoftMax",
           "activation",
           "Softmax along an axis.",
           {in()},
           {out()},
           {pInt("axis", -1, "Axis along which the softmax is normalized.")},
           lowerSoftmax});

  // Convolutions.
  add(cb, {"Conv1D",
           "convolution",
           "1-D convolution over (N, C, L). Lowers to Conv.",
           {in()},
           {out()},
           convParams(1, false),
           conv<1, false>});
  add(cb, {"Conv2D",
           "convolution",
           "2-D convolution over (N, C, H, W). Lowers to Conv.",
           {in()},
           {out()},
           convParams(2, false),
           conv<2, false>});
  add(cb, {"Conv3D",
           "convolution",
           "3-D convolution over (N, C, D, H, W). Lowers to Conv.",
           {in()},
           {out()},
           convParams(3, false),
           conv<3, false>});
  add(cb, {"Conv1DTranspose",
           "convolution",
           "Transposed 1-D convolution, with Keras' output sizes. Lowers to ConvTranspose.",
           {in()},
           {out()},
           convParams(1, true),
           conv<1, true>});
  add(cb, {"Conv2DTranspose",
           "convolution",
           "Transposed 2-D convolution, with Keras' output sizes. Lowers to ConvTranspose.",
           {in()},
           {out()},
           convParams(2, true),
           conv<2, true>});
  add(cb, {"Conv3DTranspose",
           "convolution",
           "Transposed 3-D convolution, with Keras' output sizes. Lowers to ConvTranspose.",
           {in()},
           {out()},
           convParams(3, true),
           conv<3, true>});
  {
    std::vector<ParamSpec> v = {
        pInts("kernel_size", {3}, "Kernel size: one value or one per axis."),
        pInts("strides", {1}, "Strides."),
        pStr("padding", "valid", "valid or same.", {"valid", "same"}),
        pInts("dilation_rate", {1}, "Dilation."),
        pInt("depth_multiplier", 1, "Output channels per input channel."),
        activationParam()};
    auto w = weightParams();
    v.insert(v.end(), w.begin(), w.end());
    add(cb,
        {"DepthwiseConv2D",
         "convolution",
         "Depthwise 2-D convolution: one filter set per input channel. Lowers to a grouped Conv.",
         {in()},
         {out()},
         v,
         [](LoweringBuilder& b) { return lowerDepthwise(b, 2); }});
    v.insert(v.begin(), pInt("filters", 32, "Output channels of the pointwise step."));
    add(cb, {"SeparableConv1D",
             "convolution",
             "Depthwise then pointwise 1-D convolution. Lowers to two Convs.",
             {in()},
             {out()},
             v,
             [](LoweringBuilder& b) { return lowerSeparable(b, 1); }});
    add(cb, {"SeparableConv2D",
             "convolution",
             "Depthwise then pointwise 2-D convolution. Lowers to two Convs.",
             {in()},
             {out()},
             v,
             [](LoweringBuilder& b) { return lowerSeparable(b, 2); }});
  }

  // Pooling.
  const std::vector<ParamSpec> poolParams = {
      pInts("pool_size", {2}, "Window size: one value or one per axis."),
      pInts("strides", {}, "Strides (empty: pool_size)."),
      pStr("padding", "valid", "valid or same.", {"valid", "same"})};
  const std::vector<ParamSpec> gpoolParams = {
      pBool("keepdims", false, "Keep the spatial axes (as size 1).")};
  LowerFn pools[2][4] = {{nullptr, pool<1, false>, pool<2, false>, pool<3, false>},
                         {nullptr, pool<1, true>, pool<2, true>, pool<3, true>}};
  LowerFn gpools[2][4] = {{nullptr, gpool<1, false>, gpool<2, false>, gpool<3, false>},
                          {nullptr, gpool<1, true>, gpool<2, true>, gpool<3, true>}};
  LowerFn zpads[4] = {nullptr, zpad<1>, zpad<2>, zpad<3>};
  LowerFn crops[4] = {nullptr, crop<1>, crop<2>, crop<3>};
  LowerFn ups[4] = {nullptr, upsample<1>, upsample<2>, upsample<3>};
  for (size_t nd = 1; nd <= 3; ++nd) {
    const std::string dn = dimsName[nd];
    add(cb, {"MaxPool" + dn,
             "pooling",
             "Max pooling over " + dn + " windows. Lowers to MaxPool.",
             {in()},
             {out()},
             poolParams,
             pools[1][nd]});
    add(cb,
        {"AvgPool" + dn,
         "pooling",
         "Average pooling over " + dn + " windows (padding not counted). Lowers to AveragePool.",
         {in()},
         {out()},
         poolParams,
         pools[0][nd]});
    add(cb, {"GlobalMaxPool" + dn,
             "pooling",
             "Maximum over all " + dn + " spatial positions. Lowers to GlobalMaxPool.",
             {in()},
             {out()},
             gpoolParams,
             gpools[1][nd]});
    add(cb, {"GlobalAvgPool" + dn,
             "pooling",
             "Mean over all " + dn + " spatial positions. Lowers to GlobalAveragePool.",
             {in()},
             {out()},
             gpoolParams,
             gpools[0][nd]});
    add(cb, {"ZeroPadding" + dn,
             "reshaping",
             "Pads the spatial axes with zeros: one amount, one per axis, or (begin, end) per "
             "axis. Lowers to Pad.",
             {in()},
             {out()},
             {pInts("padding", {1}, "Padding amounts.")},
             zpads[nd]});
    add(cb, {"Cropping" + dn,
             "reshaping",
             "Crops the spatial axes: one amount, one per axis, or (begin, end) per axis. Lowers "
             "to Slice.",
             {in()},
             {out()},
             {pInts("cropping", {1}, "Cropping amounts.")},
             crops[nd]});
    add(cb,
        {"UpSampling" + dn,
         "reshaping",
         "Repeats (nearest) or interpolates (bilinear) the spatial axes by size. Lowers to Resize.",
         {in()},
         {out()},
         {pInts("size", {2}, "Factor: one value or one per axis."),
          pStr("interpolation", "nearest", "nearest or bilinear.", {"nearest", "bilinear"})},
         ups[nd]});
  }

  // Normalization.
  add(cb, {"BatchNormalization",
           "normalization",
           "Normalizes each channel (axis 1) with batch statistics in training and moving "
           "statistics in inference. Lowers to BatchNormalization; gamma and beta train, the "
           "moving statistics are updated by the op itself.",
           {in()},
           {out()},
           {pInt("axis", 1, "The channel axis (1 in ONNX layout)."),
            pFloat("momentum", 0.99,
                   "Moving-average factor: moving = moving * momentum + batch * (1 - momentum)."),
            pFloat("epsilon", 0.001, "Added to the variance."),
            pBool("center", true, "Learn beta."), pBool("scale", true, "Learn gamma.")},
           [](LoweringBuilder& b) { return lowerNorm(b, true); }});
  add(cb, {"LayerNormalization",
           "normalization",
           "Normalizes over the axes from axis to the last. Lowers to LayerNormalization.",
           {in()},
           {out()},
           {pInt("axis", -1, "First normalized axis."),
            pFloat("epsilon", 0.001, "Added to the variance."),
            pBool("center", true, "Learn beta."), pBool("scale", true, "Learn gamma.")},
           [](LoweringBuilder& b) { return lowerNorm(b, false); }});

  // Merging.
  const PortSpec many = port("inputs", "Tensors to merge (broadcastable).", PortOption::Variadic);
  add(cb, {"Add",
           "merging",
           "Element-wise sum of the inputs. Lowers to Sum.",
           {many},
           {out()},
           {},
           [](LoweringBuilder& b) { return lowerMerge(b, "Sum"); }});
  add(cb, {"Average",
           "merging",
           "Element-wise mean of the inputs. Lowers to Mean.",
           {many},
           {out()},
           {},
           [](LoweringBuilder& b) { return lowerMerge(b, "Mean"); }});
  add(cb, {"Multiply",
           "merging",
           "Element-wise product of the inputs. Lowers to Mul.",
           {many},
           {out()},
           {},
           lowerMultiply});
  add(cb, {"Subtract",
           "merging",
           "First input minus the second. Lowers to Sub.",
           {port("inputs", "Minuend and subtrahend.", PortOption::Variadic)},
           {out()},
           {},
           [](LoweringBuilder& b) { return lowerMerge(b, "Sub"); },
           {"Substract"}});
  add(cb, {"Concatenate",
           "merging",
           "Concatenates the inputs along an axis. Lowers to Concat.",
           {many},
           {out()},
           {pInt("axis", -1, "Concatenation axis.")},
           [](LoweringBuilder& b) { return lowerMerge(b, "Concat"); }});
  {
    LayerDef split{
        "Split",
        "reshaping",
        "Splits the input into equal parts along an axis. Lowers to Split.",
        {in()},
        {},
        {pInt("num_or_size_splits", 2, "Number of equal parts."), pInt("axis", -1, "Split axis.")},
        lowerSplit};
    split.outputs = {port("outputs", "The parts.", PortOption::Variadic)};
    add(cb, std::move(split));
  }

  // Recurrent.
  add(cb, {"LSTM",
           "recurrent",
           "Long short-term memory over (batch, time, features). Lowers to ONNX LSTM (batch-first "
           "layout, gates in ONNX order i, o, f, c).",
           {in()},
           {out()},
           recurrentParams("LSTM", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "LSTM", false); }});
  add(cb, {"GRU",
           "recurrent",
           "Gated recurrent unit over (batch, time, features). Lowers to ONNX GRU.",
           {in()},
           {out()},
           recurrentParams("GRU", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "GRU", false); }});
  add(cb, {"SimpleRNN",
           "recurrent",
           "Fully connected recurrence over (batch, time, features). Lowers to ONNX RNN.",
           {in()},
           {out()},
           recurrentParams("RNN", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "RNN", false); }});
  add(cb, {"RNN",
           "recurrent",
           "A recurrent layer with a simple cell (as SimpleRNN). Lowers to ONNX RNN.",
           {in()},
           {out()},
           recurrentParams("RNN", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "RNN", false); }});
  {
    auto params = recurrentParams("LSTM", true);
    params.push_back(
        pBool("reset_after", true, "GRU only: apply the reset gate after the matrix product."));
    params.push_back(
        pStr("activation", "tanh", "SimpleRNN only: activation.", {"tanh", "relu", "sigmoid"}));
    add(cb, {"Bidirectional",
             "recurrent",
             "Runs a recurrent layer forwards and backwards and merges the two. Lowers to one "
             "bidirectional ONNX LSTM/GRU/RNN.",
             {in()},
             {out()},
             params,
             lowerBidirectional});
  }

  for (size_t nd = 1; nd <= 3; ++nd) {
    static const LowerFn convLstm[4] = {nullptr, convlstm<1>, convlstm<2>, convlstm<3>};
    add(cb,
        {"ConvLSTM" + dimsName[nd],
         "recurrent",
         "Convolutional LSTM over (batch, time, channels, spatial...): the LSTM's matrix "
         "products are " +
             dimsName[nd] +
             " convolutions. Lowers to a Scan over time whose "
             "body holds two Convs and the gates (kernel (4*filters, channels, k...) and "
             "recurrent_kernel (4*filters, filters, k...), gates in ONNX LSTM order i, o, f, c).",
         {in()},
         {out()},
         convLstmParams(),
         convLstm[nd]});
  }

  // Attention.
  const std::vector<PortSpec> qvk = {
      port("query", "Query (batch, Tq, dim)."), port("value", "Value (batch, Tv, dim)."),
      port("key", "Key (batch, Tv, dim); defaults to value.", PortOption::Optional)};
  add(cb, {"Attention",
           "attention",
           "Dot-product (Luong) attention: softmax(query . key^T) . value. Lowers to MatMul, "
           "Softmax, MatMul.",
           qvk,
           {out()},
           {pBool("use_scale", false, "Learn a scalar that scales the scores.")},
           lowerAttention});
  add(cb, {"AdditiveAttention",
           "attention",
           "Additive (Bahdanau) attention: scores = sum(scale * tanh(query + key)).",
           qvk,
           {out()},
           {pBool("use_scale", true, "Learn a per-feature scale."),
            initParam("kernel_initializer", "glorot_uniform", "scale"),
            pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
            pInt("seed", 0, "Seed of the initializer.")},
           lowerAdditiveAttention});
  {
    std::vector<ParamSpec> v = {pInt("num_heads", 2, "Number of attention heads."),
                                pInt("key_dim", 16, "Size of each head for query and key."),
                                pInt("value_dim", 0, "Size of each head for value (0: key_dim)."),
                                pInt("output_dim", 0, "Output feature size (0: the query's).")};
    auto w = weightParams();
    v.insert(v.end(), w.begin(), w.end());
    add(cb, {"MultiHeadAttention",
             "attention",
             "Multi-head attention as in 'Attention is all you need'. Lowers to MatMul, Reshape, "
             "Transpose and Softmax.",
             qvk,
             {out()},
             v,
             lowerMultiHeadAttention});
  }
}

}  // namespace dw
