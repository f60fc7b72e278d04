// The core layers of deepwire.layers: Dense, the regularization (dropout and noise) layers,
// Embedding, the activations and the merging layers, each group's lowerings above its catalogue
// entries.
#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

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

}  // namespace

void addDense(CatalogueBuilder& cb) {
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
}

namespace {

Status lowerDropout(LoweringBuilder& b) {
  const float rate = static_cast<float>(b.param("rate").asFloat());
  if (rate < 0 || rate >= 1) return b.fail("rate must be in [0, 1)");
  // Before opset 12 the ratio is an attribute and there is no seed.
  if (b.opset() < 12) {
    b.op("Dropout", {b.input(0)}, {attrFloat("ratio", rate)}, {b.outputName(0)});
    return Status();
  }
  std::vector<onnx::AttributeProto> attrs;
  if (intParam(b, "seed")) attrs.push_back(attrInt("seed", intParam(b, "seed")));
  b.op("Dropout", {b.input(0), b.floatScalar("ratio", rate)}, attrs, {b.outputName(0)});
  return Status();
}

Status lowerGaussianNoise(LoweringBuilder& b) {
  // Noise is a training-time regularizer; inference is the identity, which is what ONNX exports.
  b.op1("Identity", {b.input(0)}, {}, b.outputName(0));
  return Status();
}

}  // namespace

void addRegularization(CatalogueBuilder& cb) {
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
}

namespace {

Status lowerEmbedding(LoweringBuilder& b) {
  const int64_t n = intParam(b, "input_dim"), d = intParam(b, "output_dim");
  if (n <= 0 || d <= 0) return b.fail("input_dim and output_dim must be positive");
  const auto table = b.weight("embeddings", {n, d}, fillFor(b, "embeddings_initializer"));
  const auto idx = b.op1("Cast", {b.input(0)}, {attrInt("to", onnx::TensorProto::INT64)});
  b.op1("Gather", {table, idx}, {attrInt("axis", 0)}, b.outputName(0));
  return Status();
}

}  // namespace

void addEmbedding(CatalogueBuilder& cb) {
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
}

namespace {

Status lowerActivation(LoweringBuilder& b, const std::string& act) {
  return finish(b, b.input(0), act);
}

Status lowerSoftmax(LoweringBuilder& b) {
  if (b.opset() >= 13) {
    b.op1("Softmax", {b.input(0)}, {attrInt("axis", intParam(b, "axis"))}, b.outputName(0));
    return Status();
  }
  auto rank = b.rankOf(0);
  if (!rank.ok()) return rank.status();
  const int64_t axis = intParam(b, "axis");
  if (axis < -*rank || axis >= *rank)
    return b.fail("axis " + std::to_string(axis) + " is out of range for a rank-" +
                  std::to_string(*rank) + " input");
  b.softmax("Softmax", b.input(0), axis, *rank, b.outputName(0));
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

}  // namespace

void addActivations(CatalogueBuilder& cb) {
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
}

namespace {

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

}  // namespace

void addMerging(CatalogueBuilder& cb) {
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
}

}  // namespace dw::layers
