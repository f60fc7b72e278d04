// deepwire.losses: Keras' losses. Each one is a per-sample function (the batch axes kept, the
// class or feature axis reduced) followed by sample weighting and a reduction, all lowered to
// standard ONNX ops that autodiff differentiates (SoftmaxCrossEntropyLoss, LogSoftmax, Clip, ...).
//
// How to add a loss: write `Result<RankedTensor> perSampleX(LoweringBuilder&, bool forMetric)`
// and add an entry to lossSpecs(). Output Train's parameters and the metric of the same name in
// deepwire.metrics follow from that entry.
#include <cmath>
#include <map>
#include <optional>

#include "nodes/catalogue.h"
#include "nodes/losses.h"

namespace dw {

namespace {

// Keras' backend epsilon.
constexpr float kEps = 1e-7f;

std::string k(LoweringBuilder& b, float v) {
  return b.floatScalar("k", v);
}
std::string mul(LoweringBuilder& b, const std::string& x, const std::string& y) {
  return b.op1("Mul", {x, y});
}
std::string sub(LoweringBuilder& b, const std::string& x, const std::string& y) {
  return b.op1("Sub", {x, y});
}
std::string add(LoweringBuilder& b, const std::string& x, const std::string& y) {
  return b.op1("Add", {x, y});
}
std::string square(LoweringBuilder& b, const std::string& x) {
  return mul(b, x, x);
}
std::string clip(LoweringBuilder& b, const std::string& x, float lo, float hi) {
  return b.op1("Clip", {x, k(b, lo), k(b, hi)});
}

int elemType(LoweringBuilder& b, int port) {
  return inputElemType(b, port);
}

struct PredTarget {
  std::string pred, target;
  int64_t rank = 0;
};

Result<PredTarget> predTarget(LoweringBuilder& b, int64_t minRank = 1) {
  auto r = b.rankOf(0);
  if (!r.ok()) return r.status();
  if (*r < minRank)
    return b.fail("the prediction has rank " + std::to_string(*r) + "; this loss needs rank " +
                  std::to_string(minRank) + " or more (batch, ..., classes)");
  DW_RETURN_IF_ERROR(sameShapeTarget(b));
  return PredTarget{b.input(0), inputAsFloat(b, 1), *r};
}

// Mean over the last axis, as Keras' per-sample losses do. A rank-1 prediction is one value per
// sample already, so it is kept element-wise (Keras would average the batch away).
RankedTensor meanLast(LoweringBuilder& b, const std::string& x, int64_t rank) {
  if (rank <= 1) return {x, rank};
  return {b.reduce("ReduceMean", x, {-1}, false), rank - 1};
}

Result<RankedTensor> mse(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  return meanLast(b, square(b, sub(b, io->pred, io->target)), io->rank);
}

Result<RankedTensor> mae(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  return meanLast(b, b.op1("Abs", {sub(b, io->pred, io->target)}), io->rank);
}

Result<RankedTensor> mape(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  const auto denom = b.op1("Max", {b.op1("Abs", {io->target}), k(b, kEps)});
  const auto diff = b.op1("Abs", {b.op1("Div", {sub(b, io->target, io->pred), denom})});
  auto m = meanLast(b, diff, io->rank);
  return RankedTensor{mul(b, m.name, k(b, 100.0f)), m.rank};
}

Result<RankedTensor> msle(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  auto logp1 = [&](const std::string& x) {
    return b.op1("Log", {add(b, b.op1("Max", {x, k(b, kEps)}), k(b, 1.0f))});
  };
  return meanLast(b, square(b, sub(b, logp1(io->pred), logp1(io->target))), io->rank);
}

Result<RankedTensor> poisson(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  const auto logp = b.op1("Log", {add(b, io->pred, k(b, kEps))});
  return meanLast(b, sub(b, io->pred, mul(b, io->target, logp)), io->rank);
}

// log(cosh(x)) = x + softplus(-2x) - log 2, which does not overflow for large |x|.
Result<RankedTensor> logcosh(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  const auto x = sub(b, io->pred, io->target);
  const auto sp = b.op1("Softplus", {mul(b, x, k(b, -2.0f))});
  return meanLast(b, sub(b, add(b, x, sp), k(b, std::log(2.0f))), io->rank);
}

Result<RankedTensor> huber(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  const float delta = static_cast<float>(b.param("delta").asFloat());
  if (!(delta >= 0)) return b.fail("delta must be >= 0");
  const auto err = sub(b, io->pred, io->target);
  const auto absErr = b.op1("Abs", {err});
  const auto quad = mul(b, square(b, err), k(b, 0.5f));
  const auto lin = sub(b, mul(b, absErr, k(b, delta)), k(b, 0.5f * delta * delta));
  const auto v = b.op1("Where", {b.orEqual("LessOrEqual", absErr, k(b, delta)), quad, lin});
  return meanLast(b, v, io->rank);
}

// Keras converts {0, 1} targets to {-1, 1} for the hinge losses, when every target is 0 or 1.
std::string hingeTargets(LoweringBuilder& b, const std::string& t) {
  const auto zeroOrOne =
      b.op1("Or", {b.op1("Equal", {t, k(b, 0.0f)}), b.op1("Equal", {t, k(b, 1.0f)})});
  const auto all =
      b.reduce("ReduceMin", b.op1("Cast", {zeroOrOne}, {attrInt("to", onnx::TensorProto::FLOAT)}),
               {}, false);
  const auto isBinary = b.op1("Equal", {all, k(b, 1.0f)});
  return b.op1("Where", {isBinary, sub(b, mul(b, t, k(b, 2.0f)), k(b, 1.0f)), t});
}

Result<RankedTensor> hingeImpl(LoweringBuilder& b, bool squared) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  const auto t = hingeTargets(b, io->target);
  auto v = b.op1("Relu", {sub(b, k(b, 1.0f), mul(b, t, io->pred))});
  if (squared) v = square(b, v);
  return meanLast(b, v, io->rank);
}
Result<RankedTensor> hinge(LoweringBuilder& b, bool) {
  return hingeImpl(b, false);
}
Result<RankedTensor> squaredHinge(LoweringBuilder& b, bool) {
  return hingeImpl(b, true);
}

Result<RankedTensor> categoricalHinge(LoweringBuilder& b, bool) {
  auto io = predTarget(b, 2);
  if (!io.ok()) return io.status();
  const auto pos = b.reduce("ReduceSum", mul(b, io->target, io->pred), {-1}, false);
  const auto neg =
      b.reduce("ReduceMax", mul(b, sub(b, k(b, 1.0f), io->target), io->pred), {-1}, false);
  return RankedTensor{b.op1("Relu", {add(b, sub(b, neg, pos), k(b, 1.0f))}), io->rank - 1};
}

Result<RankedTensor> kld(LoweringBuilder& b, bool) {
  auto io = predTarget(b, 2);
  if (!io.ok()) return io.status();
  const auto t = clip(b, io->target, kEps, 1.0f);
  const auto p = clip(b, io->pred, kEps, 1.0f);
  const auto v = mul(b, t, b.op1("Log", {b.op1("Div", {t, p})}));
  return RankedTensor{b.reduce("ReduceSum", v, {-1}, false), io->rank - 1};
}

Result<int64_t> axisParam(LoweringBuilder& b, int64_t rank) {
  int64_t axis = b.param("axis").asInt();
  if (axis < -rank || axis >= rank)
    return b.fail("axis " + std::to_string(axis) + " is out of range for rank " +
                  std::to_string(rank));
  return axis;
}

Result<RankedTensor> cosine(LoweringBuilder& b, bool forMetric) {
  auto io = predTarget(b, 2);
  if (!io.ok()) return io.status();
  auto axis = axisParam(b, io->rank);
  if (!axis.ok()) return axis.status();
  // Keras' l2_normalize: x / sqrt(max(sum(x^2), 1e-12)).
  auto normalize = [&](const std::string& x) {
    const auto ss = b.reduce("ReduceSum", square(b, x), {*axis}, true);
    return b.op1("Div", {x, b.op1("Sqrt", {b.op1("Max", {ss, k(b, 1e-12f)})})});
  };
  const auto cos =
      b.reduce("ReduceSum", mul(b, normalize(io->target), normalize(io->pred)), {*axis}, false);
  return RankedTensor{forMetric ? cos : b.op1("Neg", {cos}), io->rank - 1};
}

Result<float> labelSmoothing(LoweringBuilder& b) {
  const float ls = static_cast<float>(b.param("label_smoothing").asFloat());
  if (!(ls >= 0 && ls <= 1)) return b.fail("label_smoothing must be in [0, 1]");
  return ls;
}

// Element-wise binary cross-entropy, averaged over the last axis.
Result<RankedTensor> bce(LoweringBuilder& b, bool) {
  auto io = predTarget(b);
  if (!io.ok()) return io.status();
  auto ls = labelSmoothing(b);
  if (!ls.ok()) return ls.status();
  std::string t = io->target;
  if (*ls > 0) t = add(b, mul(b, t, k(b, 1.0f - *ls)), k(b, 0.5f * *ls));
  std::string e;
  if (b.param("from_logits").asBool()) {
    // max(x, 0) - x t + log(1 + exp(-|x|)): no overflow for any logit.
    const auto& x = io->pred;
    const auto sp = b.op1("Softplus", {b.op1("Neg", {b.op1("Abs", {x})})});
    e = add(b, sub(b, b.op1("Relu", {x}), mul(b, x, t)), sp);
  } else {
    // Keras: clip to [eps, 1 - eps], then -(t log(p + eps) + (1 - t) log(1 - p + eps)).
    const auto p = clip(b, io->pred, kEps, 1.0f - kEps);
    const auto logP = b.op1("Log", {add(b, p, k(b, kEps))});
    const auto logQ = b.op1("Log", {add(b, sub(b, k(b, 1.0f), p), k(b, kEps))});
    e = b.op1("Neg", {add(b, mul(b, t, logP), mul(b, sub(b, k(b, 1.0f), t), logQ))});
  }
  return meanLast(b, e, io->rank);
}

Result<RankedTensor> cce(LoweringBuilder& b, bool) {
  auto io = predTarget(b, 2);
  if (!io.ok()) return io.status();
  auto axis = axisParam(b, io->rank);
  if (!axis.ok()) return axis.status();
  auto ls = labelSmoothing(b);
  if (!ls.ok()) return ls.status();
  std::string t = io->target;
  if (*ls > 0) {
    auto dims = b.staticDims(0, "label_smoothing divides by the number of classes");
    if (!dims.ok()) return dims.status();
    const int64_t classes = (*dims)[*axis < 0 ? *axis + io->rank : *axis];
    if (classes <= 0)
      return b.fail("label_smoothing needs the number of classes (the class axis is dynamic)");
    t = add(b, mul(b, t, k(b, 1.0f - *ls)), k(b, *ls / static_cast<float>(classes)));
  }
  std::string logP;
  if (b.param("from_logits").asBool()) {
    logP = b.softmax("LogSoftmax", io->pred, *axis, io->rank);
  } else {
    // Keras rescales the probabilities to sum to 1, then clips them.
    const auto p = b.op1("Div", {io->pred, b.reduce("ReduceSum", io->pred, {*axis}, true)});
    logP = b.op1("Log", {clip(b, p, kEps, 1.0f - kEps)});
  }
  const auto v = b.op1("Neg", {b.reduce("ReduceSum", mul(b, t, logP), {*axis}, false)});
  return RankedTensor{v, io->rank - 1};
}

Result<RankedTensor> scce(LoweringBuilder& b, bool) {
  auto r = b.rankOf(0);
  if (!r.ok()) return r.status();
  const int64_t rank = *r;
  if (rank < 2) return b.fail("the prediction must be (batch, ..., classes)");
  // One score a sample is a number to predict, not classes: the loss failed at the first batch,
  // deep in its lowering ("GatherElements: index 1 out of range").
  if (auto dims = b.staticDims(0, ""); dims.ok() && dims->back() == 1)
    return b.fail(
        "the prediction has one score a sample (its last axis is 1), and a sparse "
        "categorical loss needs one per class, 2 or more: to predict a number use "
        "MeanSquaredError, for yes/no targets BinaryCrossentropy");
  auto classes = classLabels(b, rank);
  if (!classes.ok()) return classes.status();
  const std::string labels = *classes;
  // ONNX puts the class axis at 1; Keras keeps it last.
  auto classesFirst = [&](const std::string& x) {
    if (rank == 2) return x;
    std::vector<int64_t> perm = {0, rank - 1};
    for (int64_t i = 1; i < rank - 1; ++i) perm.push_back(i);
    return b.op1("Transpose", {x}, {attrInts("perm", perm)});
  };
  std::string v;
  if (b.opset() < 12) {
    // SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss came at opset 12: before, each
    // label's log-probability is picked by a one-hot mask over the class axis.
    std::string logP;
    if (b.param("from_logits").asBool()) {
      logP = b.softmax("LogSoftmax", b.input(0), -1, rank);
    } else {
      const auto p = b.op1("Div", {b.input(0), b.reduce("ReduceSum", b.input(0), {-1}, true)});
      logP = b.op1("Log", {clip(b, p, kEps, 1.0f - kEps)});
    }
    onnx::TensorProto offOn;
    offOn.set_data_type(onnx::TensorProto::FLOAT);
    offOn.add_dims(2);
    offOn.add_float_data(0);
    offOn.add_float_data(1);
    const auto depth = b.op1("Gather", {b.op1("Shape", {b.input(0)}), b.int64s("classes", {-1})});
    const auto hot =
        b.op1("OneHot", {labels, depth, b.constant("off_on", offOn)}, {attrInt("axis", -1)});
    v = b.op1("Neg", {b.reduce("ReduceSum", mul(b, hot, logP), {-1}, false)});
  } else if (b.param("from_logits").asBool()) {
    v = b.op1("SoftmaxCrossEntropyLoss", {classesFirst(b.input(0)), labels},
              {attrString("reduction", "none")});
  } else {
    const auto p = b.op1("Div", {b.input(0), b.reduce("ReduceSum", b.input(0), {-1}, true)});
    const auto logP = b.op1("Log", {clip(b, p, kEps, 1.0f - kEps)});
    v = b.op1("NegativeLogLikelihoodLoss", {classesFirst(logP), labels},
              {attrString("reduction", "none")});
  }
  return RankedTensor{v, rank - 1};
}

// --- Weighting and reduction -------------------------------------------------------------------

Status lowerLoss(LoweringBuilder& b) {
  PerSampleLossFn fn = perSampleLoss(b.spec().type);
  if (!fn) return b.fail("no per-sample function for loss '" + b.spec().type + "'");
  auto per = fn(b, false);
  if (!per.ok()) return per.status();
  auto w = alignedSampleWeight(b, per->rank);
  if (!w.ok()) return w.status();
  std::string v = per->name;
  if (!w->empty()) v = mul(b, v, *w);
  const std::string reduction = b.param("reduction").asString();
  const std::string out = b.outputName(0);
  if (reduction == "none")
    b.op1("Identity", {v}, {}, out);
  else if (reduction == "sum")
    b.reduce("ReduceSum", v, {}, false, out);
  else if (reduction == "mean")
    b.reduce("ReduceMean", v, {}, false, out);
  else
    return b.fail("reduction must be sum, mean or none, not '" + reduction + "'");
  return Status();
}

PortSpec port(const std::string& name, const std::string& type, const std::string& doc,
              PortOption option, Differentiability diff) {
  return lossPort(name, type, doc, option, diff);
}
ParamSpec param(const std::string& name, Param def, const std::string& doc,
                std::vector<std::string> allowed = {}) {
  return lossParam(name, std::move(def), doc, std::move(allowed));
}

struct LossDef {
  std::string type, category, doc;
  PerSampleLossFn fn;
  std::vector<ParamSpec> params;
  int64_t minRank = 1;
};

std::vector<LossDef> lossDefs() {
  const ParamSpec fromLogits =
      param("from_logits", Param::makeBool(false),
            "The prediction holds logits (unnormalized scores) rather than probabilities; "
            "numerically safer.",
            {"false", "true"});
  const ParamSpec smoothing =
      param("label_smoothing", Param::makeFloat(0),
            "In [0, 1]: targets move towards the uniform distribution by this amount.");
  const ParamSpec axis = param("axis", Param::makeInt(-1), "The class (or feature) axis.");
  return {
      {"BinaryCrossentropy",
       "probabilistic",
       "Binary cross-entropy, averaged over the last axis: -(t log p + (1 - t) log(1 - p)). "
       "From logits it lowers to Relu, Softplus and Abs (stable for any logit); from "
       "probabilities to Clip and Log.",
       bce,
       {fromLogits, smoothing}},
      {"CategoricalCrossentropy",
       "probabilistic",
       "Cross-entropy between one-hot (or soft) targets and class scores: -sum(t log p). From "
       "logits it lowers to LogSoftmax + Mul + ReduceSum.",
       cce,
       {fromLogits, smoothing, axis},
       2},
      {"SparseCategoricalCrossentropy",
       "probabilistic",
       "Cross-entropy with integer class targets. From logits it lowers to "
       "SoftmaxCrossEntropyLoss; from probabilities to Log + NegativeLogLikelihoodLoss. Targets "
       "have the prediction's shape without the class axis (or with a class axis of 1).",
       scce,
       {fromLogits},
       2},
      {"CategoricalHinge",
       "hinge",
       "max(0, max((1 - t) p) - sum(t p) + 1) over the class axis.",
       categoricalHinge,
       {},
       2},
      {"CosineSimilarity",
       "regression",
       "Negative cosine similarity between target and prediction along an axis (-1 is best).",
       cosine,
       {axis},
       2},
      {"Hinge",
       "hinge",
       "mean(max(0, 1 - t p)); targets in {0, 1} are mapped to {-1, 1}.",
       hinge,
       {}},
      {"SquaredHinge",
       "hinge",
       "mean(max(0, 1 - t p)^2); targets in {0, 1} are mapped to {-1, 1}.",
       squaredHinge,
       {}},
      {"Huber",
       "regression",
       "Quadratic for |p - t| <= delta, linear beyond: mean(0.5 e^2 or delta (|e| - delta/2)).",
       huber,
       {param("delta", Param::makeFloat(1.0), "Where the loss turns from quadratic to linear.")}},
      {"KLDivergence",
       "probabilistic",
       "Kullback-Leibler divergence sum(t log(t / p)), both clipped to [1e-7, 1].",
       kld,
       {},
       2},
      {"LogCoshError",
       "regression",
       "mean(log(cosh(p - t))): like MSE for small errors, MAE for large ones.",
       logcosh,
       {}},
      {"MeanAbsoluteError", "regression", "mean(|p - t|) over the last axis.", mae, {}},
      {"MeanAbsolutePercentageError",
       "regression",
       "100 mean(|(t - p) / max(|t|, 1e-7)|) over the last axis.",
       mape,
       {}},
      {"MeanSquaredError", "regression", "mean((p - t)^2) over the last axis.", mse, {}},
      {"MeanSquaredLogarithmicError",
       "regression",
       "mean((log(max(p, 1e-7) + 1) - log(max(t, 1e-7) + 1))^2) over the last axis.",
       msle,
       {}},
      {"Poisson", "probabilistic", "mean(p - t log(p + 1e-7)) over the last axis.", poisson, {}},
  };
}

}  // namespace

const std::vector<NodeSpec>& lossSpecs() {
  static const std::vector<NodeSpec> kSpecs = [] {
    std::vector<NodeSpec> specs;
    for (auto& d : lossDefs()) {
      NodeSpec s;
      s.domain = kLossesDomain;
      s.type = d.type;
      s.category = d.category;
      s.kind = NodeKind::Layer;
      s.isLoss = true;
      s.doc = d.doc +
              " Weighted by sample_weight when connected, then reduced: mean (Keras' "
              "sum_over_batch_size: the weighted sum over the number of values), sum, or none "
              "(the per-sample values).";
      const std::string predDoc = d.minRank >= 2 ? "The model's prediction (batch, ..., classes)."
                                                 : "The model's prediction.";
      s.inputs = {
          port("prediction", "T", predDoc, PortOption::Single, Differentiability::Differentiable),
          port("target", "L", "The expected values (y_true).", PortOption::Single,
               Differentiability::NonDifferentiable),
          port("sample_weight", "W",
               "Optional per-sample weights, broadcast over the per-sample losses.",
               PortOption::Optional, Differentiability::NonDifferentiable)};
      s.outputs = {port("loss", "T", "The loss: a scalar, or per-sample with reduction none.",
                        PortOption::Single, Differentiability::Differentiable)};
      s.params = d.params;
      s.params.push_back(param("reduction", Param::makeString("mean"),
                               "mean: weighted sum / number of values (Keras' "
                               "sum_over_batch_size); sum; none: the per-sample losses.",
                               {"mean", "sum", "none"}));
      const std::vector<std::string> numeric = {
          "tensor(float)", "tensor(double)", "tensor(float16)", "tensor(int64)", "tensor(int32)",
          "tensor(int16)", "tensor(int8)",   "tensor(uint8)",   "tensor(bool)"};
      s.typeConstraints = {{"T", {"tensor(float)"}, "Predictions and losses are float32."},
                           {"L", numeric, "Targets: any numeric type (cast as needed)."},
                           {"W", numeric, "Sample weights: any numeric type (cast to float)."}};
      s.minInputs = 2;
      s.maxInputs = 3;
      s.minOutputs = s.maxOutputs = 1;
      s.lower = lowerLoss;
      if (d.type == "LogCoshError") s.aliases = {"LogCosh"};
      specs.push_back(std::move(s));
    }
    return specs;
  }();
  return kSpecs;
}

PerSampleLossFn perSampleLoss(const std::string& type) {
  static const std::map<std::string, PerSampleLossFn> kFns = [] {
    std::map<std::string, PerSampleLossFn> m;
    for (auto& d : lossDefs()) m[d.type] = d.fn;
    m["LogCosh"] = logcosh;
    return m;
  }();
  auto it = kFns.find(type);
  return it == kFns.end() ? nullptr : it->second;
}

// --- Shared pieces -----------------------------------------------------------------------------

PortSpec lossPort(const std::string& name, const std::string& type, const std::string& doc,
                  PortOption option, Differentiability diff) {
  PortSpec p;
  p.name = name;
  p.typeStr = type;
  p.doc = doc;
  p.option = option;
  p.differentiability = diff;
  return p;
}

ParamSpec lossParam(const std::string& name, Param def, const std::string& doc,
                    std::vector<std::string> allowed) {
  ParamSpec p;
  p.name = name;
  p.type = def.type;
  p.doc = doc;
  p.defaultValue = std::move(def);
  p.allowedValues = std::move(allowed);
  if (p.type == ParamType::Bool && p.allowedValues.empty()) p.allowedValues = {"false", "true"};
  return p;
}

std::string floatConst(LoweringBuilder& b, float v) {
  return b.floatScalar("k", v);
}

int inputElemType(LoweringBuilder& b, int port) {
  auto t = b.inputType(port);
  return t && t->has_tensor_type() ? t->tensor_type().elem_type() : 0;
}

Result<std::string> classLabels(LoweringBuilder& b, int64_t predRank) {
  auto rt = b.rankOf(1);
  if (!rt.ok()) return rt.status();
  std::string labels = b.input(1);
  if (*rt == predRank) {
    labels = b.squeeze(labels, {-1});
  } else if (*rt != predRank - 1) {
    return b.fail("the prediction has rank " + std::to_string(predRank) + " and the target rank " +
                  std::to_string(*rt) +
                  ", which do not go together: a prediction [N, classes] takes class indices [N] "
                  "(or [N, 1]), and each axis more on the prediction takes one more on the "
                  "target. Check what feeds the prediction and the target");
  }
  return inputElemType(b, 1) == onnx::TensorProto::INT64
             ? labels
             : b.op1("Cast", {labels}, {attrInt("to", onnx::TensorProto::INT64)});
}

Status sameShapeTarget(LoweringBuilder& b) {
  auto dimsOf = [&](int port) -> std::optional<std::vector<int64_t>> {
    auto t = b.inputType(port);
    if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return std::nullopt;
    std::vector<int64_t> dims;
    for (const auto& d : t->tensor_type().shape().dim())
      dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    return dims;
  };
  const auto pred = dimsOf(0), target = dimsOf(1);
  if (!pred || !target) return Status();  // unknown: checked when the shapes are
  auto text = [](const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i)
      s += (i ? "," : "") + (d[i] < 0 ? std::string(i == 0 ? "N" : "?") : std::to_string(d[i]));
    return s + "]";
  };
  bool differ = pred->size() != target->size();
  for (size_t i = 0; !differ && i < pred->size(); ++i)
    differ = (*pred)[i] >= 0 && (*target)[i] >= 0 && (*pred)[i] != (*target)[i];
  if (!differ) return Status();
  std::string fix = "give the target the prediction's shape";
  if (pred->size() == target->size() + 1 && pred->back() > 1)
    fix = "for class indices use a Sparse... loss or metric; otherwise " + fix +
          ", or make the last layer output 1 unit per target value";
  return b.fail("the prediction " + text(*pred) + " and the target " + text(*target) +
                " must have the same shape: this compares them element by element; " + fix);
}

std::string inputAsFloat(LoweringBuilder& b, int port) {
  if (elemType(b, port) == onnx::TensorProto::FLOAT) return b.input(port);
  return b.op1("Cast", {b.input(port)}, {attrInt("to", onnx::TensorProto::FLOAT)});
}

int sampleWeightPort(LoweringBuilder& b) {
  const auto& inputs = b.spec().inputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].name == "sample_weight" && static_cast<int>(i) < b.inputCount() &&
        !b.input(static_cast<int>(i)).empty())
      return static_cast<int>(i);
  return -1;
}

Result<std::string> alignedSampleWeight(LoweringBuilder& b, int64_t rank) {
  const int port = sampleWeightPort(b);
  if (port < 0) return std::string();
  auto rw = b.rankOf(port);
  if (!rw.ok()) return rw.status();
  std::string w = inputAsFloat(b, port);
  if (*rw == rank + 1) {
    w = b.squeeze(w, {-1});
  } else if (*rw < rank) {
    std::vector<int64_t> axes;
    for (int64_t a = *rw; a < rank; ++a) axes.push_back(a);
    w = b.unsqueeze(w, axes);
  } else if (*rw > rank + 1) {
    return b.fail("sample_weight has rank " + std::to_string(*rw) +
                  ", more than the per-sample values' rank " + std::to_string(rank) + " + 1");
  }
  return w;
}

std::string divNoNan(LoweringBuilder& b, const std::string& num, const std::string& den,
                     const std::string& out) {
  const auto zero = b.op1("Equal", {den, k(b, 0.0f)});
  const auto safe = b.op1("Where", {zero, k(b, 1.0f), den});
  return b.op1("Where", {zero, k(b, 0.0f), b.op1("Div", {num, safe})}, {}, out);
}

Result<std::vector<std::string>> meanStats(LoweringBuilder& b, const RankedTensor& values) {
  auto w = alignedSampleWeight(b, values.rank);
  if (!w.ok()) return w.status();
  std::vector<int64_t> inner;
  for (int64_t a = 1; a < values.rank; ++a) inner.push_back(a);
  std::string v = values.name, count;
  if (!w->empty()) {
    const auto wb = b.op1("Expand", {*w, b.op1("Shape", {v})});
    v = mul(b, v, wb);
    std::string ws = wb;
    if (!inner.empty()) ws = b.reduce("ReduceMean", ws, inner, false);
    count = b.reduce("ReduceSum", ws, {}, false);
  } else if (values.rank == 0) {
    count = b.op1("Identity", {k(b, 1.0f)});
  } else {
    const auto n = b.shapeSlice(v, 0, 1);
    count = b.reduce("ReduceSum", b.op1("Cast", {n}, {attrInt("to", onnx::TensorProto::FLOAT)}), {},
                     false);
  }
  if (!inner.empty()) v = b.reduce("ReduceMean", v, inner, false);
  return std::vector<std::string>{b.reduce("ReduceSum", v, {}, false), count};
}

Status finalizeMean(LoweringBuilder& b, const std::vector<std::string>& stats) {
  divNoNan(b, stats[0], stats[1], b.outputName(0));
  return Status();
}

Status lowerMetric(LoweringBuilder& b) {
  const NodeSpec& s = b.spec();
  if (!s.metricStats || !s.metricFinalize) return b.fail("is not a metric");
  auto stats = s.metricStats(b);
  if (!stats.ok()) return stats.status();
  return s.metricFinalize(b, *stats);
}

void addLossesDomain(CatalogueBuilder& b) {
  b.setDefaultOpset(kLossesDomain, 1);
  for (const auto& s : lossSpecs()) b.add(s);
}

}  // namespace dw
