// deepwire.metrics: Keras' metrics. Every metric is two parts (NodeSpec::metricStats and
// metricFinalize): statistics that add up across batches (a weighted total and a count, the
// confusion counts at thresholds, a confusion matrix) and the value computed from them. A single
// batch's value is finalize(stats(batch)); an epoch's is finalize(sum of the batches' stats),
// which is how Keras' stateful metrics accumulate, and resetting a metric zeroes the sums. Export
// with ExportOptions::withLosses lists each metric's statistics as graph outputs, and
// metricFinalizeModel() (graphs/onnx_export.h) cuts the finalize part out as its own model.
//
// How to add a metric: write its stats and finalize functions (the finalize may read only the
// statistics and constants) and add a MetricDef to addMetricsDomain(). A loss in lossSpecs()
// gets a metric of the same name automatically (the weighted mean of its per-sample values).
#include <cmath>
#include <limits>

#include "nodes/catalogue.h"
#include "nodes/losses.h"

namespace dw {

namespace {

const std::vector<std::string> kNumeric = {"tensor(float)", "tensor(double)", "tensor(float16)",
                                           "tensor(int64)", "tensor(int32)",  "tensor(int16)",
                                           "tensor(int8)",  "tensor(uint8)",  "tensor(bool)"};

// --- Constants ---------------------------------------------------------------------------------

std::string k(LoweringBuilder& b, float v) {
  return b.floatScalar("k", v);
}

std::string floats(LoweringBuilder& b, const std::string& suffix, const std::vector<int64_t>& dims,
                   const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return b.constant(suffix, t);
}

std::string int64Scalar(LoweringBuilder& b, const std::string& suffix, int64_t v) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(&v), 8));
  return b.constant(suffix, t);
}

std::string toFloat(LoweringBuilder& b, const std::string& x) {
  return b.op1("Cast", {x}, {attrInt("to", onnx::TensorProto::FLOAT)});
}
std::string toInt64(LoweringBuilder& b, const std::string& x) {
  return b.op1("Cast", {x}, {attrInt("to", onnx::TensorProto::INT64)});
}

int elemType(LoweringBuilder& b, int port) {
  return inputElemType(b, port);
}

// Output 0 from a statistic that is a 1-element vector when `scalar`.
Status emit(LoweringBuilder& b, const std::string& x, bool scalar) {
  if (scalar)
    b.op1("Reshape", {x, b.int64s("scalar", {})}, {}, b.outputName(0));
  else
    b.op1("Identity", {x}, {}, b.outputName(0));
  return Status();
}

Result<int64_t> predRank(LoweringBuilder& b, int64_t min) {
  auto r = b.rankOf(0);
  if (!r.ok()) return r.status();
  if (*r < min)
    return b.fail("the prediction has rank " + std::to_string(*r) + "; this metric needs rank " +
                  std::to_string(min) + " or more (batch, ..., classes)");
  return *r;
}

// --- Mean-type metrics -------------------------------------------------------------------------

Result<std::vector<std::string>> lossMetricStats(LoweringBuilder& b) {
  PerSampleLossFn fn = perSampleLoss(b.spec().type);
  if (!fn) return b.fail("no per-sample function for '" + b.spec().type + "'");
  auto per = fn(b, true);
  if (!per.ok()) return per.status();
  return meanStats(b, *per);
}

Result<std::vector<std::string>> accuracyStats(LoweringBuilder& b) {
  auto r = predRank(b, 0);
  if (!r.ok()) return r.status();
  DW_RETURN_IF_ERROR(sameShapeTarget(b));
  std::string p = b.input(0), t = b.input(1);
  const int pt = elemType(b, 0), tt = elemType(b, 1);
  if (pt == 0 || pt != tt) {
    // Keras casts the target to the prediction's type; unknown types compare as float.
    if (pt == 0 || pt == onnx::TensorProto::BOOL) p = toFloat(b, p);
    t = b.op1(
        "Cast", {t},
        {attrInt("to", pt == 0 || pt == onnx::TensorProto::BOOL ? onnx::TensorProto::FLOAT : pt)});
  }
  return meanStats(b, {toFloat(b, b.op1("Equal", {p, t})), *r});
}

Result<std::vector<std::string>> binaryAccuracyStats(LoweringBuilder& b) {
  auto r = predRank(b, 0);
  if (!r.ok()) return r.status();
  DW_RETURN_IF_ERROR(sameShapeTarget(b));
  const float thr = static_cast<float>(b.param("threshold").asFloat());
  const auto p = toFloat(b, b.op1("Greater", {inputAsFloat(b, 0), k(b, thr)}));
  return meanStats(b, {toFloat(b, b.op1("Equal", {inputAsFloat(b, 1), p})), *r});
}

Result<std::vector<std::string>> categoricalAccuracyStats(LoweringBuilder& b) {
  auto r = predRank(b, 2);
  if (!r.ok()) return r.status();
  auto argmax = [&](const std::string& x) {
    return b.op1("ArgMax", {x}, {attrInt("axis", -1), attrInt("keepdims", 0)});
  };
  const auto eq = b.op1("Equal", {argmax(b.input(1)), argmax(b.input(0))});
  return meanStats(b, {toFloat(b, eq), *r - 1});
}

Result<std::vector<std::string>> sparseAccuracyStats(LoweringBuilder& b) {
  auto r = predRank(b, 2);
  if (!r.ok()) return r.status();
  auto labels = classLabels(b, *r);
  if (!labels.ok()) return labels.status();
  const auto pred = b.op1("ArgMax", {b.input(0)}, {attrInt("axis", -1), attrInt("keepdims", 0)});
  return meanStats(b, {toFloat(b, b.op1("Equal", {*labels, pred})), *r - 1});
}

Result<std::vector<std::string>> topKStats(LoweringBuilder& b, bool sparse) {
  auto r = predRank(b, 2);
  if (!r.ok()) return r.status();
  auto dims = b.staticDims(0, "top-k accuracy needs the number of classes");
  if (!dims.ok()) return dims.status();
  int64_t kk = b.param("k").asInt();
  if (kk <= 0) return b.fail("k must be positive");
  if (dims->back() > 0)
    kk = std::min(kk, dims->back());
  else
    return b.fail("top-k accuracy needs the number of classes (the last axis is dynamic)");
  std::string labels;
  if (sparse) {
    auto l = classLabels(b, *r);
    if (!l.ok()) return l.status();
    labels = *l;
  } else {
    labels = b.op1("ArgMax", {b.input(1)}, {attrInt("axis", -1), attrInt("keepdims", 0)});
  }
  const auto top =
      b.op("TopK", {b.input(0), b.int64s("k", {kk})}, {attrInt("axis", -1)}, {"", ""})[1];
  const auto hit = b.op1("Equal", {top, b.unsqueeze(labels, {-1})});
  return meanStats(b, {b.reduce("ReduceMax", toFloat(b, hit), {-1}, false), *r - 1});
}

Result<std::vector<std::string>> meanRelativeErrorStats(LoweringBuilder& b) {
  auto r = predRank(b, 0);
  if (!r.ok()) return r.status();
  const auto err = b.op1("Abs", {b.op1("Sub", {inputAsFloat(b, 1), inputAsFloat(b, 0)})});
  return meanStats(b, {divNoNan(b, err, inputAsFloat(b, 2)), *r});
}

Result<std::vector<std::string>> squaredErrorStats(LoweringBuilder& b) {
  auto r = predRank(b, 0);
  if (!r.ok()) return r.status();
  const auto d = b.op1("Sub", {inputAsFloat(b, 0), inputAsFloat(b, 1)});
  return meanStats(b, {b.op1("Mul", {d, d}), *r});
}

Status finalizeRootMean(LoweringBuilder& b, const std::vector<std::string>& stats) {
  b.op1("Sqrt", {divNoNan(b, stats[0], stats[1])}, {}, b.outputName(0));
  return Status();
}

Result<std::vector<std::string>> valueMeanStats(LoweringBuilder& b) {
  auto r = b.rankOf(0);
  if (!r.ok()) return r.status();
  return meanStats(b, {inputAsFloat(b, 0), *r});
}

Result<std::vector<std::string>> sumStats(LoweringBuilder& b) {
  auto r = b.rankOf(0);
  if (!r.ok()) return r.status();
  auto w = alignedSampleWeight(b, *r);
  if (!w.ok()) return w.status();
  std::string v = inputAsFloat(b, 0);
  if (!w->empty()) v = b.op1("Mul", {v, *w});
  return std::vector<std::string>{b.reduce("ReduceSum", v, {}, false)};
}

Status finalizeIdentity(LoweringBuilder& b, const std::vector<std::string>& stats) {
  b.op1("Identity", {stats[0]}, {}, b.outputName(0));
  return Status();
}

Result<std::vector<std::string>> meanTensorStats(LoweringBuilder& b) {
  auto r = b.rankOf(0);
  if (!r.ok()) return r.status();
  auto w = alignedSampleWeight(b, *r);
  if (!w.ok()) return w.status();
  const std::string v = inputAsFloat(b, 0);
  const auto shape = b.op1("Shape", {v});
  if (w->empty())
    return std::vector<std::string>{b.op1("Identity", {v}), b.op1("Expand", {k(b, 1.0f), shape})};
  const auto wb = b.op1("Expand", {*w, shape});
  return std::vector<std::string>{b.op1("Mul", {v, wb}), wb};
}

// --- Confusion counts at thresholds ------------------------------------------------------------

enum Count { kTP, kFP, kTN, kFN };

Result<std::vector<float>> thresholdsParam(LoweringBuilder& b) {
  std::vector<float> t;
  const Param values = b.param("thresholds");  // the loop must not outlive it
  for (double v : values.asFloats()) {
    if (!(v >= 0 && v <= 1)) return b.fail("thresholds must lie in [0, 1]");
    t.push_back(static_cast<float>(v));
  }
  if (t.empty()) return b.fail("thresholds is empty; give at least one (e.g. [0.5])");
  return t;
}

// Keras' evenly spaced thresholds of the at-recall/at-precision family.
Result<std::vector<float>> evenThresholds(LoweringBuilder& b) {
  const int64_t n = b.param("num_thresholds").asInt();
  if (n < 1) return b.fail("num_thresholds must be at least 1");
  if (n == 1) return std::vector<float>{0.5f};
  std::vector<float> t = {0.0f};
  for (int64_t i = 0; i < n - 2; ++i)
    t.push_back(static_cast<float>((i + 1) * 1.0 / static_cast<double>(n - 1)));
  t.push_back(1.0f);
  return t;
}

// The weighted counts of `which` at each threshold: a prediction is positive when it exceeds the
// threshold, a target when it is non-zero. top_k keeps only each sample's k highest scores;
// class_id looks at one class of the last axis.
Result<std::vector<std::string>> confusionStats(LoweringBuilder& b, const std::vector<float>& thr,
                                                const std::vector<Count>& which, int64_t topK,
                                                int64_t classId) {
  auto r = predRank(b, 0);
  if (!r.ok()) return r.status();
  int64_t rank = *r;
  std::string p = inputAsFloat(b, 0), t = inputAsFloat(b, 1);
  if (topK > 0) {
    auto dims = b.staticDims(0, "top_k needs the number of classes");
    if (!dims.ok()) return dims.status();
    const int64_t classes = rank ? dims->back() : 0;
    if (classes <= 0) return b.fail("top_k needs a known size of the last (class) axis");
    if (topK < classes) {
      const auto idx = b.op("TopK", {p, b.int64s("k", {topK})}, {attrInt("axis", -1)}, {"", ""})[1];
      const auto onehot = b.op1("OneHot", {idx, b.int64s("depth", {classes}),
                                           floats(b, "onehot_values", {2}, {0.0f, 1.0f})});
      const auto keep = b.op1("Greater", {b.reduce("ReduceMax", onehot, {-2}, false), k(b, 0.5f)});
      p = b.op1("Where", {keep, p, k(b, -std::numeric_limits<float>::infinity())});
    }
  }
  if (classId >= 0) {
    if (rank < 1) return b.fail("class_id needs a class axis");
    const auto id = int64Scalar(b, "class_id", classId);
    p = b.op1("Gather", {p, id}, {attrInt("axis", -1)});
    t = b.op1("Gather", {t, id}, {attrInt("axis", -1)});
    --rank;
  }
  auto w = alignedSampleWeight(b, rank);
  if (!w.ok()) return w.status();
  const auto column = b.int64s("column", {-1, 1});
  const auto pf = b.op1("Reshape", {p, column});
  const auto lab =
      toFloat(b, b.op1("Not", {b.op1("Equal", {b.op1("Reshape", {t, column}), k(b, 0.0f)})}));
  std::string labW = lab, nlabW = b.op1("Sub", {k(b, 1.0f), lab});
  if (!w->empty()) {
    const auto wf = b.op1("Reshape", {b.op1("Expand", {*w, b.op1("Shape", {p})}), column});
    labW = b.op1("Mul", {labW, wf});
    nlabW = b.op1("Mul", {nlabW, wf});
  }
  const auto thresholds = floats(b, "thresholds", {1, static_cast<int64_t>(thr.size())}, thr);
  const auto pos = toFloat(b, b.op1("Greater", {pf, thresholds}));
  const auto neg = b.op1("Sub", {k(b, 1.0f), pos});
  std::vector<std::string> out;
  for (Count c : which) {
    const auto& predSide = (c == kTP || c == kFP) ? pos : neg;
    const auto& labelSide = (c == kTP || c == kFN) ? labW : nlabW;
    out.push_back(b.reduce("ReduceSum", b.op1("Mul", {predSide, labelSide}), {0}, false));
  }
  return out;
}

template <Count C>
Result<std::vector<std::string>> countStats(LoweringBuilder& b) {
  auto thr = thresholdsParam(b);
  if (!thr.ok()) return thr.status();
  return confusionStats(b, *thr, {C}, 0, -1);
}

Status finalizeCount(LoweringBuilder& b, const std::vector<std::string>& stats) {
  return emit(b, stats[0], b.param("thresholds").asFloats().size() == 1);
}

// Precision (tp / (tp + fp)), Recall (tp / (tp + fn)), Specificity (tn / (tn + fp)).
template <Count Num, Count Other>
Result<std::vector<std::string>> ratioStats(LoweringBuilder& b) {
  auto thr = thresholdsParam(b);
  if (!thr.ok()) return thr.status();
  return confusionStats(b, *thr, {Num, Other}, b.param("top_k").asInt(),
                        b.param("class_id").asInt());
}

Status finalizeRatio(LoweringBuilder& b, const std::vector<std::string>& stats) {
  const auto den = b.op1("Add", {stats[0], stats[1]});
  return emit(b, divNoNan(b, stats[0], den), b.param("thresholds").asFloats().size() == 1);
}

Result<std::vector<std::string>> allCountsStats(LoweringBuilder& b) {
  auto thr = evenThresholds(b);
  if (!thr.ok()) return thr.status();
  return confusionStats(b, *thr, {kTP, kFP, kTN, kFN}, 0, b.param("class_id").asInt());
}

// The largest `dependent` among thresholds where `constrained` >= the target value; 0 if none.
// Which rates: 0 recall (sensitivity), 1 precision, 2 specificity.
template <int Constrained, int Dependent>
Status finalizeAtConstraint(LoweringBuilder& b, const std::vector<std::string>& s) {
  const std::string& tp = s[kTP];
  const std::string& fp = s[kFP];
  const std::string& tn = s[kTN];
  const std::string& fn = s[kFN];
  auto rate = [&](int which) {
    if (which == 0) return divNoNan(b, tp, b.op1("Add", {tp, fn}));
    if (which == 1) return divNoNan(b, tp, b.op1("Add", {tp, fp}));
    return divNoNan(b, tn, b.op1("Add", {tn, fp}));
  };
  const char* names[] = {"recall", "precision", "specificity"};
  const char* key = Constrained == 0 && Dependent == 2 ? "sensitivity" : names[Constrained];
  const float value = static_cast<float>(b.param(key).asFloat());
  if (!(value >= 0 && value <= 1)) return b.fail(std::string(key) + " must lie in [0, 1]");
  const auto feasible = b.orEqual("GreaterOrEqual", rate(Constrained), k(b, value));
  const auto masked = b.op1("Where", {feasible, rate(Dependent), k(b, -1.0f)});
  b.op1("Max", {b.reduce("ReduceMax", masked, {}, false), k(b, 0.0f)}, {}, b.outputName(0));
  return Status();
}

// --- IoU -------------------------------------------------------------------------------------

enum class IouKind { Sparse, OneHot, Binary };

template <IouKind Kind>
Result<std::vector<std::string>> iouStats(LoweringBuilder& b) {
  const int64_t classes = Kind == IouKind::Binary ? 2 : b.param("num_classes").asInt();
  if (classes < 1) return b.fail("num_classes must be at least 1");
  auto r = predRank(b, 0);
  if (!r.ok()) return r.status();
  auto rt = b.rankOf(1);
  if (!rt.ok()) return rt.status();
  int64_t trueRank = *rt;
  std::string pred, truth;
  if (Kind == IouKind::Binary) {
    const float thr = static_cast<float>(b.param("threshold").asFloat());
    pred = toInt64(b, b.orEqual("GreaterOrEqual", inputAsFloat(b, 0), k(b, thr)));
    truth = toInt64(b, inputAsFloat(b, 1));
  } else {
    const bool sparseTrue = Kind == IouKind::Sparse && b.param("sparse_y_true").asBool();
    const bool sparsePred = Kind == IouKind::Sparse && b.param("sparse_y_pred").asBool();
    const int64_t axis = b.param("axis").asInt();
    auto argmax = [&](const std::string& x) {
      return b.op1("ArgMax", {x}, {attrInt("axis", axis), attrInt("keepdims", 0)});
    };
    pred = sparsePred
               ? (elemType(b, 0) == onnx::TensorProto::INT64 ? b.input(0) : toInt64(b, b.input(0)))
               : argmax(b.input(0));
    truth = sparseTrue
                ? (elemType(b, 1) == onnx::TensorProto::INT64 ? b.input(1) : toInt64(b, b.input(1)))
                : argmax(b.input(1));
    if (!sparseTrue) --trueRank;
  }
  auto w = alignedSampleWeight(b, trueRank);
  if (!w.ok()) return w.status();
  const auto flat = b.int64s("flat", {-1});
  const auto truthFlat = b.op1("Reshape", {truth, flat});
  const auto predFlat = b.op1("Reshape", {pred, flat});
  std::string weight;
  if (!w->empty())
    weight = b.op1("Reshape", {b.op1("Expand", {*w, b.op1("Shape", {truth})}), flat});
  if (Kind != IouKind::Binary) {
    const Param ignored = b.param("ignore_class");
    for (int64_t ignore : ignored.asInts()) {
      const auto valid =
          toFloat(b, b.op1("Not", {b.op1("Equal", {truthFlat, int64Scalar(b, "ignore", ignore)})}));
      weight = weight.empty() ? valid : b.op1("Mul", {weight, valid});
    }
  }
  const auto depth = b.int64s("depth", {classes});
  const auto values = floats(b, "onehot_values", {2}, {0.0f, 1.0f});
  std::string rows = b.op1("OneHot", {truthFlat, depth, values});
  const auto cols = b.op1("OneHot", {predFlat, depth, values});
  if (!weight.empty()) rows = b.op1("Mul", {rows, b.unsqueeze(weight, {1})});
  // Rows: true class; columns: predicted class (tf.math.confusion_matrix's layout).
  return std::vector<std::string>{
      b.op1("MatMul", {b.op1("Transpose", {rows}, {attrInts("perm", {1, 0})}), cols})};
}

template <IouKind Kind, bool AllClasses>
Status finalizeIou(LoweringBuilder& b, const std::vector<std::string>& stats) {
  const int64_t classes = Kind == IouKind::Binary ? 2 : b.param("num_classes").asInt();
  std::vector<int64_t> ids;
  if (!AllClasses) {
    ids = b.param("target_class_ids").asInts();
    if (ids.empty()) return b.fail("target_class_ids is empty");
    for (int64_t id : ids)
      if (id < 0 || id >= classes)
        return b.fail("target class id " + std::to_string(id) + " is not in [0, " +
                      std::to_string(classes) + ")");
  }
  std::vector<float> eye(static_cast<size_t>(classes * classes), 0.0f);
  for (int64_t i = 0; i < classes; ++i) eye[static_cast<size_t>(i * classes + i)] = 1.0f;
  const std::string& cm = stats[0];
  const auto predicted = b.reduce("ReduceSum", cm, {0}, false);
  const auto actual = b.reduce("ReduceSum", cm, {1}, false);
  std::string tp = b.reduce(
      "ReduceSum", b.op1("Mul", {cm, floats(b, "eye", {classes, classes}, eye)}), {1}, false);
  std::string denom = b.op1("Sub", {b.op1("Add", {predicted, actual}), tp});
  if (!AllClasses) {
    const auto sel = b.int64s("target_class_ids", ids);
    tp = b.op1("Gather", {tp, sel}, {attrInt("axis", 0)});
    denom = b.op1("Gather", {denom, sel}, {attrInt("axis", 0)});
  }
  const auto valid =
      b.reduce("ReduceSum", toFloat(b, b.op1("Greater", {denom, k(b, 1e-9f)})), {}, false);
  const auto iou = divNoNan(b, tp, denom);
  divNoNan(b, b.reduce("ReduceSum", iou, {}, false), valid, b.outputName(0));
  return Status();
}

// --- Specs -------------------------------------------------------------------------------------

PortSpec port(const std::string& name, const std::string& type, const std::string& doc,
              PortOption option = PortOption::Single) {
  return lossPort(name, type, doc, option);
}
ParamSpec param(const std::string& name, Param def, const std::string& doc) {
  return lossParam(name, std::move(def), doc);
}

struct MetricDef {
  std::string type, category, doc;
  std::vector<PortSpec> inputs;
  std::vector<ParamSpec> params;
  MetricStatsFn stats;
  MetricFinalizeFn finalize;
};

void addMetric(CatalogueBuilder& cb, MetricDef d) {
  NodeSpec s;
  s.domain = kMetricsDomain;
  s.type = d.type;
  s.category = d.category;
  s.doc = d.doc +
          " Accumulates over an epoch: Eval Steps add up its statistics and the value is "
          "computed from the sums; resetting zeroes them.";
  s.kind = NodeKind::Layer;
  s.inputs = std::move(d.inputs);
  s.outputs = {port("value", "F", "The metric's value.")};
  s.params = std::move(d.params);
  s.typeConstraints = {{"T", {"tensor(float)"}, "Float predictions."},
                       {"N", kNumeric, "Any numeric type (cast as needed)."},
                       {"F", {"tensor(float)"}, "Metric values are float32."}};
  s.lower = lowerMetric;
  s.metricStats = d.stats;
  s.metricFinalize = d.finalize;
  s.maxInputs = static_cast<int>(s.inputs.size());
  s.minInputs = 0;
  for (const auto& p : s.inputs) s.minInputs += p.option == PortOption::Single ? 1 : 0;
  s.minOutputs = s.maxOutputs = 1;
  cb.add(std::move(s));
}

std::vector<PortSpec> predTargetWeight(const std::string& predType = "N",
                                       const std::string& predDoc = "The model's prediction.") {
  return {port("prediction", predType, predDoc),
          port("target", "N", "The expected values (y_true)."),
          port("sample_weight", "N", "Optional per-sample weights.", PortOption::Optional)};
}

}  // namespace

void addMetricsDomain(CatalogueBuilder& cb) {
  cb.setDefaultOpset(kMetricsDomain, 1);

  // The metric of every loss: the weighted mean of its per-sample values.
  for (const NodeSpec& loss : lossSpecs()) {
    MetricDef d{loss.type,
                loss.category,
                "The mean of the " + loss.type +
                    " loss's per-sample values (see "
                    "deepwire.losses::" +
                    loss.type + ").",
                predTargetWeight("T"),
                {},
                lossMetricStats,
                finalizeMean};
    for (const auto& p : loss.params)
      if (p.name != "reduction") d.params.push_back(p);
    addMetric(cb, std::move(d));
  }

  const auto threshold = param("threshold", Param::makeFloat(0.5), "Predictions above it are 1.");
  addMetric(cb, {"Accuracy",
                 "accuracy",
                 "How often the prediction equals the target exactly.",
                 predTargetWeight(),
                 {},
                 accuracyStats,
                 finalizeMean});
  addMetric(cb, {"BinaryAccuracy",
                 "accuracy",
                 "How often (prediction > threshold) equals the binary target.",
                 predTargetWeight(),
                 {threshold},
                 binaryAccuracyStats,
                 finalizeMean});
  addMetric(cb, {"CategoricalAccuracy",
                 "accuracy",
                 "How often argmax(prediction) equals argmax(one-hot target).",
                 predTargetWeight(),
                 {},
                 categoricalAccuracyStats,
                 finalizeMean});
  addMetric(cb, {"SparseCategoricalAccuracy",
                 "accuracy",
                 "How often argmax(prediction) equals the integer class target.",
                 predTargetWeight(),
                 {},
                 sparseAccuracyStats,
                 finalizeMean});
  const auto kParam = param("k", Param::makeInt(5), "How many top classes count as a hit.");
  addMetric(cb, {"TopKCategoricalAccuracy",
                 "accuracy",
                 "How often argmax(one-hot target) is among the k highest predictions.",
                 predTargetWeight(),
                 {kParam},
                 [](LoweringBuilder& b) { return topKStats(b, false); },
                 finalizeMean});
  addMetric(cb, {"SparseTopKCategoricalAccuracy",
                 "accuracy",
                 "How often the integer class target is among the k highest predictions.",
                 predTargetWeight(),
                 {kParam},
                 [](LoweringBuilder& b) { return topKStats(b, true); },
                 finalizeMean});

  addMetric(cb, {"MeanRelativeError",
                 "regression",
                 "mean(|target - prediction| / normalizer), 0 where the normalizer is 0.",
                 {port("prediction", "N", "The model's prediction."),
                  port("target", "N", "The expected values."),
                  port("normalizer", "N", "Divides the absolute errors (broadcast)."),
                  port("sample_weight", "N", "Optional per-sample weights.", PortOption::Optional)},
                 {},
                 meanRelativeErrorStats,
                 finalizeMean});
  addMetric(cb, {"RootMeanSquaredError",
                 "regression",
                 "sqrt(mean((prediction - target)^2)).",
                 predTargetWeight(),
                 {},
                 squaredErrorStats,
                 finalizeRootMean});

  const std::vector<PortSpec> valuesWeight = {
      port("values", "N", "The values to accumulate."),
      port("sample_weight", "N", "Optional weights, broadcast over the values.",
           PortOption::Optional)};
  addMetric(cb, {"Mean",
                 "reduction",
                 "The weighted mean of the values (a rank-1 or higher input counts one sample per "
                 "row, its other axes averaged).",
                 valuesWeight,
                 {},
                 valueMeanStats,
                 finalizeMean});
  addMetric(cb, {"Sum",
                 "reduction",
                 "The weighted sum of the values.",
                 valuesWeight,
                 {},
                 sumStats,
                 finalizeIdentity});
  addMetric(cb, {"MeanTensor",
                 "reduction",
                 "The element-wise weighted mean of a fixed-shape tensor across batches.",
                 valuesWeight,
                 {},
                 meanTensorStats,
                 [](LoweringBuilder& b, const std::vector<std::string>& s) {
                   divNoNan(b, s[0], s[1], b.outputName(0));
                   return Status();
                 }});

  const auto thresholds = param("thresholds", Param::makeFloats({0.5}),
                                "A prediction above a threshold is positive; one value per "
                                "threshold (a scalar value for a single threshold).");
  const auto topK =
      param("top_k", Param::makeInt(0), "If > 0, only each sample's top_k scores can be positive.");
  const auto classId = param("class_id", Param::makeInt(-1),
                             "If >= 0, the metric looks at this class of the last axis only.");
  const std::string binaryDoc = " Targets are positive when non-zero.";
  addMetric(cb, {"TruePositives",
                 "confusion",
                 "Weighted count of true positives." + binaryDoc,
                 predTargetWeight(),
                 {thresholds},
                 countStats<kTP>,
                 finalizeCount});
  addMetric(cb, {"FalsePositives",
                 "confusion",
                 "Weighted count of false positives." + binaryDoc,
                 predTargetWeight(),
                 {thresholds},
                 countStats<kFP>,
                 finalizeCount});
  addMetric(cb, {"TrueNegatives",
                 "confusion",
                 "Weighted count of true negatives." + binaryDoc,
                 predTargetWeight(),
                 {thresholds},
                 countStats<kTN>,
                 finalizeCount});
  addMetric(cb, {"FalseNegatives",
                 "confusion",
                 "Weighted count of false negatives." + binaryDoc,
                 predTargetWeight(),
                 {thresholds},
                 countStats<kFN>,
                 finalizeCount});
  addMetric(cb, {"Precision",
                 "confusion",
                 "tp / (tp + fp)." + binaryDoc,
                 predTargetWeight(),
                 {thresholds, topK, classId},
                 ratioStats<kTP, kFP>,
                 finalizeRatio});
  addMetric(cb, {"Recall",
                 "confusion",
                 "tp / (tp + fn)." + binaryDoc,
                 predTargetWeight(),
                 {thresholds, topK, classId},
                 ratioStats<kTP, kFN>,
                 finalizeRatio});
  addMetric(cb, {"Specificity",
                 "confusion",
                 "tn / (tn + fp)." + binaryDoc,
                 predTargetWeight(),
                 {thresholds, topK, classId},
                 ratioStats<kTN, kFP>,
                 finalizeRatio});

  const auto numThresholds = param("num_thresholds", Param::makeInt(200),
                                   "Thresholds evenly spaced over [0, 1] (Keras' spacing).");
  auto at = [&](const std::string& type, const std::string& key, const std::string& doc,
                MetricFinalizeFn fin) {
    addMetric(cb, {type,
                   "confusion",
                   doc + binaryDoc,
                   predTargetWeight(),
                   {param(key, Param::makeFloat(0.5), "The constraint's minimum, in [0, 1]."),
                    numThresholds, classId},
                   allCountsStats,
                   fin});
  };
  at("PrecisionAtRecall", "recall", "The best precision among thresholds where recall >= recall.",
     finalizeAtConstraint<0, 1>);
  at("RecallAtPrecision", "precision",
     "The best recall among thresholds where precision >= precision.", finalizeAtConstraint<1, 0>);
  at("SensitivityAtSpecificity", "specificity",
     "The best sensitivity among thresholds where specificity >= specificity.",
     finalizeAtConstraint<2, 0>);
  at("SpecificityAtSensitivity", "sensitivity",
     "The best specificity among thresholds where sensitivity >= sensitivity.",
     finalizeAtConstraint<0, 2>);

  const auto numClasses = param("num_classes", Param::makeInt(2), "Number of classes.");
  const auto targetIds =
      param("target_class_ids", Param::makeInts({0}), "The classes whose IoU is averaged.");
  const auto ignore = param("ignore_class", Param::makeInts({}),
                            "Optional class (one value) whose targets are left out; [] for none.");
  const auto axis = param("axis", Param::makeInt(-1), "The class axis of one-hot or score inputs.");
  const auto sparseTrue = param("sparse_y_true", Param::makeBool(true),
                                "The target holds class indices (else scores: argmax).");
  const auto sparsePred = param("sparse_y_pred", Param::makeBool(true),
                                "The prediction holds class indices (else scores: argmax).");
  const std::string iouDoc =
      " IoU of a class = tp / (tp + fp + fn) from the confusion matrix accumulated over the "
      "epoch; classes that never occur are left out of the mean. Class indices outside "
      "[0, num_classes) are not counted.";
  addMetric(cb, {"IoU",
                 "segmentation",
                 "Mean intersection-over-union of target_class_ids." + iouDoc,
                 predTargetWeight(),
                 {numClasses, targetIds, sparseTrue, sparsePred, ignore, axis},
                 iouStats<IouKind::Sparse>,
                 finalizeIou<IouKind::Sparse, false>});
  addMetric(cb, {"MeanIoU",
                 "segmentation",
                 "Mean intersection-over-union of all classes." + iouDoc,
                 predTargetWeight(),
                 {numClasses, sparseTrue, sparsePred, ignore, axis},
                 iouStats<IouKind::Sparse>,
                 finalizeIou<IouKind::Sparse, true>});
  addMetric(cb,
            {"OneHotIoU",
             "segmentation",
             "IoU of target_class_ids for one-hot targets and score predictions (argmax)." + iouDoc,
             predTargetWeight(),
             {numClasses, targetIds, ignore, axis},
             iouStats<IouKind::OneHot>,
             finalizeIou<IouKind::OneHot, false>});
  addMetric(cb, {"OneHotMeanIoU",
                 "segmentation",
                 "IoU of all classes for one-hot targets and score predictions (argmax)." + iouDoc,
                 predTargetWeight(),
                 {numClasses, ignore, axis},
                 iouStats<IouKind::OneHot>,
                 finalizeIou<IouKind::OneHot, true>});
  addMetric(cb,
            {"BinaryIoU",
             "segmentation",
             "IoU of binary predictions (prediction >= threshold) against 0/1 targets." + iouDoc,
             predTargetWeight(),
             {param("target_class_ids", Param::makeInts({0, 1}), "The classes (0, 1) averaged."),
              param("threshold", Param::makeFloat(0.5), "Predictions at or above it are 1.")},
             iouStats<IouKind::Binary>,
             finalizeIou<IouKind::Binary, false>});
}

}  // namespace dw
