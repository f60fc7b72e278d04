#include "nodes/layers/common.h"

#include <cmath>

namespace dw::layers {

namespace {

const std::vector<std::string> kActivations = {
    "linear",   "relu",     "sigmoid", "tanh",  "softmax",     "elu",          "selu",
    "softplus", "softsign", "gelu",    "swish", "exponential", "hard_sigmoid", "leaky_relu"};
const std::vector<std::string> kInitializers = {"glorot_uniform", "glorot_normal", "he_uniform",
                                                "he_normal",      "lecun_uniform", "lecun_normal",
                                                "zeros",          "ones",          "constant",
                                                "random_uniform", "random_normal", "orthogonal"};

TypeConstraint floatTypes() {
  return {"T",
          {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"},
          "Floating-point tensors."};
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

}  // namespace

PortSpec port(const std::string& name, const std::string& doc, PortOption option) {
  PortSpec p;
  p.name = name;
  p.typeStr = "T";
  p.doc = doc;
  p.option = option;
  p.differentiability = Differentiability::Differentiable;
  return p;
}

PortSpec in(const std::string& doc) {
  return port("inputs", doc);
}
PortSpec out(const std::string& doc) {
  return port("outputs", doc);
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
               std::vector<std::string> allowed) {
  return {name, ParamType::String, doc, false, Param::makeString(def), std::move(allowed)};
}
ParamSpec pInts(const std::string& name, std::vector<int64_t> def, const std::string& doc) {
  return {name, ParamType::Ints, doc, false, Param::makeInts(std::move(def)), {}};
}

ParamSpec activationParam(const std::string& def) {
  return pStr("activation", def, "Activation applied to the output.", kActivations);
}
ParamSpec initParam(const std::string& name, const std::string& def, const std::string& what) {
  return pStr(name, def, "Initializer of the " + what + ".", kInitializers);
}

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

std::vector<ParamSpec> weightParams(bool bias) {
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

const std::string& dimsName(size_t nd) {
  static const std::vector<std::string> names = {"", "1D", "2D", "3D"};
  return names[nd];
}

void add(CatalogueBuilder& cb, LayerDef d) {
  NodeSpec s;
  s.domain = kLayersDomain;
  s.type = d.type;
  s.category = d.category;
  s.doc = d.doc;
  s.kind = NodeKind::Layer;
  s.inputs = std::move(d.inputs);
  s.outputs = std::move(d.outputs);
  s.params = std::move(d.params);
  // Every layer, as in Keras (one without weights ignores it): fine-tuning freezes the layers a
  // model brings and trains those added after them.
  s.params.push_back(
      pBool("trainable", true,
            "Whether training updates this layer's weights. Off, they are frozen: they keep their "
            "values (running statistics of a normalization layer still follow the data)."));
  s.typeConstraints = {floatTypes()};
  s.lower = d.lower;
  s.aliases = std::move(d.aliases);
  s.minInputs = 0;
  for (const auto& p : s.inputs) s.minInputs += p.option == PortOption::Single ? 1 : 0;
  s.maxInputs = static_cast<int>(s.inputs.size());
  s.minOutputs = s.maxOutputs = static_cast<int>(s.outputs.size());
  cb.add(std::move(s));
}

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

Status finish(LoweringBuilder& b, const std::string& x, const std::string& act) {
  auto r = activate(b, x, act, b.outputName(0));
  return r.ok() ? Status() : r.status();
}

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

}  // namespace dw::layers
