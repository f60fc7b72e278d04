// Trainer: the training loop around the gradient graph. Weights, running statistics, gradients
// and optimizer state live here as float buffers; each step feeds them to the gradient-graph
// session as inputs (aliased, not copied) and takes back losses, gradients and new statistics.
#include "engine/training/trainer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "engine/cuda/cuda.h"
#include "engine/io.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "graphs/file_io.h"
#include "graphs/graph.h"
#include "graphs/onnx_export.h"
#include "nodes/catalogue.h"

namespace dw::engine::training {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ---- The project's training section ----------------------------------------------------------

namespace {

// Reads known keys from a JSON object and refuses unknown ones, naming the JSON path.
class Fields {
 public:
  Fields(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  Status check() const {
    if (!j_.is_object()) return Status::error(path_ + ": expected an object");
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!known_.count(it.key()))
        return Status::error(path_ + "/" + it.key() + ": unknown key (known: " + knownList() + ")");
    return error_;
  }
  template <class T>
  void get(const char* key, T& out) {
    known_.insert(key);
    if (!j_.is_object() || !j_.contains(key) || !error_.ok()) return;
    try {
      out = j_.at(key).get<T>();
    } catch (const std::exception& e) {
      error_ = Status::error(path_ + "/" + key + ": " + e.what());
    }
  }
  const json* sub(const char* key) {
    known_.insert(key);
    return j_.is_object() && j_.contains(key) ? &j_.at(key) : nullptr;
  }

 private:
  std::string knownList() const {
    std::string s;
    for (const auto& k : known_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  const json& j_;
  std::string path_;
  std::set<std::string> known_;
  Status error_;
};

Status parseFile(const json& j, const std::string& path, DataFileSpec& f) {
  Fields r(j, path);
  r.get("input", f.input);
  r.get("path", f.path);
  r.get("format", f.format);
  r.get("dtype", f.dtype);
  r.get("shape", f.shape);
  r.get("csv_label_column", f.csvLabelColumn);
  r.get("csv_header", f.csvHeader);
  r.get("csv_take_label", f.csvTakeLabel);
  r.get("csv_feature_columns", f.csvFeatureColumns);
  r.get("one_hot", f.oneHot);
  r.get("image_height", f.imageHeight);
  r.get("image_width", f.imageWidth);
  r.get("image_channels", f.imageChannels);
  r.get("image_take_label", f.imageTakeLabel);
  r.get("stored_dtype", f.storedDtype);
  r.get("stored_shape", f.storedShape);
  if (const json* n = r.sub("normalization")) {
    Fields rn(*n, path + "/normalization");
    rn.get("scale", f.normalization.scale);
    rn.get("mean", f.normalization.mean);
    rn.get("std", f.normalization.std);
    DW_RETURN_IF_ERROR(rn.check());
  }
  DW_RETURN_IF_ERROR(r.check());
  if (f.input.empty()) return Status::error(path + "/input: required (the graph input it feeds)");
  if (f.path.empty()) return Status::error(path + "/path: required");
  return Status();
}

Status parseFiles(const json* j, const std::string& path, std::vector<DataFileSpec>& out) {
  if (!j) return Status();
  if (!j->is_array()) return Status::error(path + ": expected an array of files");
  for (size_t i = 0; i < j->size(); ++i) {
    DataFileSpec f;
    DW_RETURN_IF_ERROR(parseFile((*j)[i], path + "/" + std::to_string(i), f));
    out.push_back(std::move(f));
  }
  return Status();
}

Status parseOptimizer(const json& j, const std::string& path, OptimizerConfig& o) {
  Fields r(j, path);
  r.get("type", o.type);
  r.get("lr", o.lr);
  r.get("momentum", o.momentum);
  r.get("dampening", o.dampening);
  r.get("nesterov", o.nesterov);
  r.get("beta1", o.beta1);
  r.get("beta2", o.beta2);
  r.get("eps", o.eps);
  r.get("weight_decay", o.weightDecay);
  r.get("adamw_mode", o.adamwMode);
  r.get("amsgrad", o.amsgrad);
  r.get("alpha", o.alpha);
  r.get("centered", o.centered);
  r.get("lr_decay", o.lrDecay);
  r.get("initial_accumulator", o.initialAccumulator);
  r.get("clip_norm", o.clipNorm);
  if (const json* t = r.sub("clip_norm_type")) {
    if (t->is_string() && t->get<std::string>() == "inf")
      o.clipNormType = INFINITY;
    else if (t->is_number())
      o.clipNormType = t->get<double>();
    else
      return Status::error(path + "/clip_norm_type: a number or \"inf\"");
  }
  if (const json* s = r.sub("schedule")) {
    Fields rs(*s, path + "/schedule");
    rs.get("type", o.schedule.type);
    rs.get("step_size", o.schedule.stepSize);
    rs.get("gamma", o.schedule.gamma);
    rs.get("warmup_steps", o.schedule.warmupSteps);
    rs.get("total_steps", o.schedule.totalSteps);
    rs.get("min_lr", o.schedule.minLr);
    DW_RETURN_IF_ERROR(rs.check());
  }
  DW_RETURN_IF_ERROR(r.check());
  return validateOptimizerConfig(o).withContext(path);
}

json fileToJson(const DataFileSpec& f) {
  json j = {{"input", f.input}, {"path", f.path}};
  if (!f.format.empty()) j["format"] = f.format;
  if (!f.dtype.empty()) j["dtype"] = f.dtype;
  if (!f.shape.empty()) j["shape"] = f.shape;
  if (!f.normalization.isIdentity())
    j["normalization"] = {{"scale", f.normalization.scale},
                          {"mean", f.normalization.mean},
                          {"std", f.normalization.std}};
  if (!f.csvLabelColumn.empty()) j["csv_label_column"] = f.csvLabelColumn;
  if (!f.csvHeader) j["csv_header"] = false;
  if (f.csvTakeLabel) j["csv_take_label"] = true;
  if (!f.csvFeatureColumns.empty()) j["csv_feature_columns"] = f.csvFeatureColumns;
  if (f.oneHot > 0) j["one_hot"] = f.oneHot;
  if (f.imageHeight > 0) j["image_height"] = f.imageHeight;
  if (f.imageWidth > 0) j["image_width"] = f.imageWidth;
  if (f.imageChannels > 0) j["image_channels"] = f.imageChannels;
  if (f.imageTakeLabel) j["image_take_label"] = true;
  if (!f.storedDtype.empty()) j["stored_dtype"] = f.storedDtype;
  if (!f.storedShape.empty()) j["stored_shape"] = f.storedShape;
  return j;
}

}  // namespace

Result<TrainingConfig> parseTrainingConfig(const std::string& jsonText) {
  json j;
  try {
    j = json::parse(jsonText);
  } catch (const std::exception& e) {
    return Status::error(std::string("training section: ") + e.what());
  }
  TrainingConfig c;
  const std::string root = "/training";
  Fields r(j, root);
  r.get("batch_size", c.batchSize);
  r.get("epochs", c.epochs);
  r.get("seed", c.seed);
  r.get("shuffle", c.shuffle);
  r.get("accumulation_steps", c.accumulationSteps);
  if (const json* d = r.sub("dataset")) {
    Fields rd(*d, root + "/dataset");
    DW_RETURN_IF_ERROR(parseFiles(rd.sub("train"), root + "/dataset/train", c.dataset.train));
    DW_RETURN_IF_ERROR(
        parseFiles(rd.sub("validation"), root + "/dataset/validation", c.dataset.validation));
    DW_RETURN_IF_ERROR(parseFiles(rd.sub("test"), root + "/dataset/test", c.dataset.test));
    rd.get("validation_split", c.dataset.validationSplit);
    rd.get("test_split", c.dataset.testSplit);
    rd.get("train_limit", c.dataset.trainLimit);
    DW_RETURN_IF_ERROR(rd.check());
  }
  if (const json* o = r.sub("optimizer"))
    DW_RETURN_IF_ERROR(parseOptimizer(*o, root + "/optimizer", c.optimizer));
  DW_RETURN_IF_ERROR(r.check());
  if (c.batchSize < 1) return Status::error(root + "/batch_size: must be >= 1");
  if (c.epochs < 0) return Status::error(root + "/epochs: must be >= 0");
  if (c.accumulationSteps < 1) return Status::error(root + "/accumulation_steps: must be >= 1");
  if (c.dataset.validationSplit < 0 || c.dataset.validationSplit >= 1)
    return Status::error(root + "/dataset/validation_split: must be in [0, 1)");
  if (c.dataset.testSplit < 0 || c.dataset.validationSplit + c.dataset.testSplit >= 1)
    return Status::error(root +
                         "/dataset/test_split: must be >= 0, and with validation_split under 1");
  if (c.dataset.trainLimit < 0)
    return Status::error(root + "/dataset/train_limit: must be >= 0 (0 = every sample)");
  return c;
}

Result<TrainingConfig> trainingConfigFromGraph(const Graph& graph) {
  auto it = graph.info().sections.find("training");
  TrainingConfig c;
  if (it != graph.info().sections.end()) {
    auto parsed = parseTrainingConfig(it->second);
    if (!parsed) return parsed.status();
    c = std::move(parsed.value());
  }
  // The Accelerator node of the default model wins over one of another model on the canvas.
  const Node* acc = nullptr;
  for (const auto& [id, n] : graph.nodes())
    if (n.type == "Accelerator" && n.domain == kGraphDomain &&
        (!acc || (n.model.empty() && !acc->model.empty())))
      acc = &n;
  if (acc) {
    if (auto v = graph.param(acc->id, "device")) c.accelerator = v->asString();
    if (auto v = graph.param(acc->id, "threads")) c.threads = static_cast<int>(v->asInt());
    if (auto v = graph.param(acc->id, "precision")) c.precision = v->asString();
  }
  return c;
}

bool evalStepResetsMetrics(const Graph& graph) {
  const Node* step = nullptr;
  for (const auto& [id, n] : graph.nodes())
    if (n.type == "Eval Step" && n.domain == kGraphDomain &&
        (!step || (n.model.empty() && !step->model.empty())))
      step = &n;
  if (!step) return false;
  auto v = graph.param(step->id, "reset_metrics?");
  return v && v->asBool();
}

std::string trainingConfigToJson(const TrainingConfig& c) {
  json j;
  json d;
  for (const auto& f : c.dataset.train) d["train"].push_back(fileToJson(f));
  for (const auto& f : c.dataset.validation) d["validation"].push_back(fileToJson(f));
  for (const auto& f : c.dataset.test) d["test"].push_back(fileToJson(f));
  if (c.dataset.validationSplit > 0) d["validation_split"] = c.dataset.validationSplit;
  if (c.dataset.testSplit > 0) d["test_split"] = c.dataset.testSplit;
  if (c.dataset.trainLimit > 0) d["train_limit"] = c.dataset.trainLimit;
  if (!d.is_null()) j["dataset"] = d;
  const OptimizerConfig& o = c.optimizer;
  json oj = {{"type", o.type}, {"lr", o.lr}};
  const OptimizerConfig def;
  if (o.momentum != def.momentum) oj["momentum"] = o.momentum;
  if (o.dampening != def.dampening) oj["dampening"] = o.dampening;
  if (o.nesterov) oj["nesterov"] = true;
  if (o.beta1 != def.beta1) oj["beta1"] = o.beta1;
  if (o.beta2 != def.beta2) oj["beta2"] = o.beta2;
  if (o.eps != def.eps) oj["eps"] = o.eps;
  if (o.weightDecay != def.weightDecay) oj["weight_decay"] = o.weightDecay;
  if (o.adamwMode != def.adamwMode) oj["adamw_mode"] = o.adamwMode;
  if (o.amsgrad) oj["amsgrad"] = true;
  if (o.alpha != def.alpha) oj["alpha"] = o.alpha;
  if (o.centered) oj["centered"] = true;
  if (o.lrDecay != def.lrDecay) oj["lr_decay"] = o.lrDecay;
  if (o.initialAccumulator != def.initialAccumulator)
    oj["initial_accumulator"] = o.initialAccumulator;
  if (o.clipNorm > 0) {
    oj["clip_norm"] = o.clipNorm;
    if (std::isinf(o.clipNormType))
      oj["clip_norm_type"] = "inf";
    else
      oj["clip_norm_type"] = o.clipNormType;
  }
  if (o.schedule.type != "constant") {
    const ScheduleConfig& s = o.schedule;
    oj["schedule"] = {{"type", s.type},
                      {"step_size", s.stepSize},
                      {"gamma", s.gamma},
                      {"warmup_steps", s.warmupSteps},
                      {"total_steps", s.totalSteps},
                      {"min_lr", s.minLr}};
  }
  j["optimizer"] = oj;
  j["batch_size"] = c.batchSize;
  j["epochs"] = c.epochs;
  j["seed"] = c.seed;
  j["shuffle"] = c.shuffle;
  if (c.accumulationSteps != 1) j["accumulation_steps"] = c.accumulationSteps;
  return j.dump(1);
}

double StepResult::totalLoss() const {
  double s = regularization;
  for (const auto& [k, v] : losses) s += v;
  return s;
}

// ---- Trainer internals -----------------------------------------------------------------------

namespace {

struct MetricInfo {
  std::string name, type, output;
  std::vector<std::string> stats;
};
struct TrainingMeta {
  std::vector<std::string> losses, targets, predictions;
  std::vector<MetricInfo> metrics;
};

std::string metadataValue(const onnx::ModelProto& m, const std::string& key) {
  for (const auto& p : m.metadata_props())
    if (p.key() == key) return p.value();
  return "";
}

Result<TrainingMeta> readTrainingMeta(const onnx::ModelProto& m) {
  const std::string text = metadataValue(m, "deepwire.training");
  if (text.empty())
    return Status::error(
        "the model declares no loss: add an Output Train node (with a loss) to the graph");
  TrainingMeta meta;
  try {
    const json j = json::parse(text);
    if (j.contains("losses")) meta.losses = j.at("losses").get<std::vector<std::string>>();
    if (j.contains("targets")) meta.targets = j.at("targets").get<std::vector<std::string>>();
    if (j.contains("predictions"))
      meta.predictions = j.at("predictions").get<std::vector<std::string>>();
    if (j.contains("metrics")) {
      for (const auto& mj : j.at("metrics")) {
        MetricInfo mi;
        mi.name = mj.value("name", "");
        mi.type = mj.value("type", "");
        mi.output = mj.value("value", mj.value("output", mi.name));
        if (mj.contains("stats")) mi.stats = mj.at("stats").get<std::vector<std::string>>();
        meta.metrics.push_back(std::move(mi));
      }
    }
  } catch (const std::exception& e) {
    return Status::error(std::string("model metadata 'deepwire.training' is malformed: ") +
                         e.what());
  }
  if (meta.losses.empty())
    return Status::error(
        "the model declares no loss: add an Output Train node (with a loss) to the graph");
  return meta;
}

struct InitInfo {
  std::string status = "Trainable";
  Regularizer reg;
};

std::map<std::string, InitInfo> readInitInfo(const onnx::ModelProto& m) {
  std::map<std::string, InitInfo> out;
  const std::string text = metadataValue(m, kLayoutMetadataKey);
  if (text.empty()) return out;
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("nodes") || !j["nodes"].is_object()) return out;
  for (auto it = j["nodes"].begin(); it != j["nodes"].end(); ++it) {
    const std::string& key = it.key();
    if (key.rfind("initializer:", 0) != 0) continue;
    InitInfo info;
    const json& e = it.value();
    if (e.contains("status") && e["status"].is_string()) info.status = e["status"];
    if (e.contains("regularizer") && e["regularizer"].is_string()) {
      info.reg.type = e["regularizer"];
      info.reg.l1 = e.contains("l1") ? e["l1"].get<double>() : 0.01;
      info.reg.l2 = e.contains("l2") ? e["l2"].get<double>() : 0.01;
    }
    out[key.substr(12)] = info;
  }
  return out;
}

bool isAccuracy(const MetricInfo& m) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  return lower(m.type).find("accuracy") != std::string::npos ||
         lower(m.name).find("accuracy") != std::string::npos;
}

double scalarOf(const Tensor& t) {
  if (t.size() == 0) return 0;
  if (t.size() == 1) return t.getDouble(0);
  double s = 0;
  for (int64_t i = 0; i < t.size(); ++i) s += t.getDouble(i);
  return s;
}

// One metric's statistics summed over batches, in double so that long passes lose nothing to
// float rounding; the metric's finalize model turns the sums into its value.
struct MetricSums {
  std::vector<Tensor> sums;  // kDouble, one per statistic
  int64_t batches = 0;
};
// Metric name -> sums; a metric with no entry has seen no batch since the last reset.
using MetricAccumulator = std::map<std::string, MetricSums>;

}  // namespace

struct ParamEntry {
  std::string name;
  bool frozen = false;
  Regularizer reg;
  ParamState state;
};

class Trainer::Impl {
 public:
  TrainOptions opt;
  onnx::ModelProto forward;    // exported with losses
  onnx::ModelProto inference;  // exported without: the clean model exportInference fills in
  TrainingMeta meta;
  GradientGraph gg;
  std::unique_ptr<InferenceSession> trainSession, evalSession;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<std::string> dataInputs, metricNames, trainableNames;
  // Class-index inputs of the classification losses, with their class counts: bad labels are
  // reported as data errors (sample, input, classes), not as a failing node deep in the loss.
  struct LabelCheck {
    std::string input, loss;
    int64_t classes = 0;
    bool hasIgnore = false;
    int64_t ignore = 0;
  };
  std::vector<LabelCheck> labelChecks;
  void findLabelChecks();
  Status checkLabels(const std::map<std::string, Tensor>& columns, const std::string& where) const;
  mutable std::vector<ParamEntry> params;                  // same order as trainableNames
  std::vector<std::pair<std::string, std::string>> stats;  // (stat, new output)
  // Trainables + stats, and gradients by weight name. Under a device backend (cuda) they are
  // host copies of devWeights/devGrads, brought up to date by syncHost() for whoever reads them.
  mutable std::map<std::string, Tensor> weights;
  mutable std::map<std::string, Tensor> grads;
  // Under cuda: weights, gradients and optimizer state stay in GPU memory for the whole run;
  // a step moves only the batch up and the losses and metrics down.
  std::unique_ptr<cuda::TrainingOps> dev;
  std::map<std::string, Tensor> devWeights, devGrads;
  std::map<std::string, std::map<std::string, Tensor>> devState;  // param -> "m", "v", ...
  mutable bool hostStale = false;  // the device holds newer values than the host maps
  bool devStale = false;           // the host maps changed (load): upload before the next step
  Status syncHost() const;
  Status syncDevice();
  Result<Tensor*> deviceState(ParamEntry& p, const char* name);
  Status deviceOptimizerStep();
  TrainerCounters counters;
  double baseLr = 0;
  double lastLr = 0, lastGradNorm = 0;
  double gradScale = 1.0;  // fit averages accumulated micro-batches
  // Epoch-level sums, checkpointed so a resumed epoch reports the same mean.
  double epochLossSum = 0;
  int64_t epochSamples = 0;
  double epochSeconds = 0;
  std::string notice;

  Status init(const TrainOptions& o, onnx::ModelProto fwd);
  Status checkBatch(const Batch& b) const;
  std::map<std::string, Tensor> feeds(const Batch& b) const;
  Result<StepResult> trainStep(const Batch& b);
  Status optimizerStep();
  void resetGrad();
  const std::map<std::string, Tensor>& gradients();
  bool gradsStale = false;
  // The Eval Step sums (checkpointed), and per metric of meta.metrics its finalize model.
  MetricAccumulator evalSums;
  std::vector<std::unique_ptr<InferenceSession>> finalizers;
  Result<StepResult> evalBatch(const Batch& b, MetricAccumulator& acc);
  Result<StepResult> evalStep(const Batch& b, bool reset);
  Result<std::map<std::string, double>> finalizeMetrics(const MetricAccumulator& acc) const;
  Result<StepResult> evaluate(const Dataset& d, int64_t batchSize);
  Result<FitReport> fit(const FitOptions& fo, const FitCallbacks& cb,
                        const std::atomic<bool>* cancel);
  Status save(const std::string& dir) const;
  Status load(const std::string& dir);
  Result<onnx::ModelProto> exportInference() const;
  Result<onnx::ModelProto> exportTraining() const;
};

Status Trainer::Impl::init(const TrainOptions& o, onnx::ModelProto fwd) {
  opt = o;
  forward = std::move(fwd);
  auto m = readTrainingMeta(forward);
  if (!m) return m.status();
  meta = std::move(m.value());
  for (const auto& mi : meta.metrics) metricNames.push_back(mi.name);

  std::vector<std::string> losses = opt.losses.empty() ? meta.losses : opt.losses;
  for (const auto& l : losses)
    if (std::find(meta.losses.begin(), meta.losses.end(), l) == meta.losses.end())
      return Status::error("loss '" + l + "' is not a loss output of the model");

  // Which initializers train: float tensors that are not Constant and not BN running stats.
  std::set<std::string> bnStats;
  for (const auto& n : forward.graph().node())
    if (n.op_type() == "BatchNormalization" && (n.domain().empty() || n.domain() == "ai.onnx"))
      for (int i = 3; i < std::min(5, n.input_size()); ++i) bnStats.insert(n.input(i));
  const auto initInfo = readInitInfo(forward);
  std::set<std::string> initNames;
  GradientGraphOptions go;
  go.losses = losses;
  for (const auto& init : forward.graph().initializer()) {
    initNames.insert(init.name());
    if (bnStats.count(init.name())) continue;
    if (init.data_type() != onnx::TensorProto::FLOAT) continue;
    InitInfo info;
    if (auto it = initInfo.find(init.name()); it != initInfo.end()) info = it->second;
    if (info.status == "Constant") continue;
    ParamEntry p;
    p.name = init.name();
    p.frozen = info.status == "Frozen";
    p.reg = info.reg;
    params.push_back(std::move(p));
    trainableNames.push_back(init.name());
    go.trainable.push_back(init.name());
    auto t = tensorFromProto(init);
    if (!t) return t.status().withContext("initializer '" + init.name() + "'");
    weights[init.name()] = std::move(t.value());
  }
  if (params.empty())
    return Status::error("the model has no Trainable or Frozen float initializer to train");
  for (const auto& in : forward.graph().input())
    if (!initNames.count(in.name())) dataInputs.push_back(in.name());

  auto lda = ldaCoeffFromModel(forward);
  if (!lda) return lda.status();
  go.ldaCoeff = std::move(lda.value());
  go.training = true;
  for (const auto& mi : meta.metrics) go.keepOutputs.push_back(mi.output);
  auto g = buildGradientGraph(forward, go);
  if (!g) return g.status();
  gg = std::move(g.value());
  findLabelChecks();
  stats = gg.stateUpdates;
  for (const auto& init : forward.graph().initializer()) {
    for (const auto& [stat, out] : stats) {
      if (init.name() != stat) continue;
      auto t = tensorFromProto(init);
      if (!t) return t.status().withContext("initializer '" + init.name() + "'");
      weights[stat] = std::move(t.value());
    }
  }
  for (const auto& [stat, out] : stats)
    if (!weights.count(stat))
      return Status::error("running statistic '" + stat + "' is not an initializer of the model");

  SessionOptions so;
  so.backend.accelerator = opt.accelerator;
  so.backend.threads = opt.threads;
  so.backend.precision = opt.precision;
  SessionOptions tso = so;
  for (const auto& g : gg.gradOutputs) tso.deviceOutputs.insert(g);
  for (const auto& [stat, out] : stats) tso.deviceOutputs.insert(out);
  auto ts = InferenceSession::create(gg.model, tso);
  if (!ts) return ts.status().withContext("training graph");
  trainSession = std::move(ts.value());
  notice = trainSession->notice();

  // The eval model: the forward model with trainables and statistics as inputs, so it always
  // reads the current values without copying them into the session.
  onnx::ModelProto evalModel = forward;
  auto* graph = evalModel.mutable_graph();
  std::vector<onnx::TensorProto> keep;
  for (const auto& init : graph->initializer()) {
    if (!weights.count(init.name())) {
      keep.push_back(init);
      continue;
    }
    bool listed = false;
    for (const auto& in : graph->input()) listed |= in.name() == init.name();
    if (listed) continue;
    auto* vi = graph->add_input();
    vi->set_name(init.name());
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(init.data_type());
    for (int64_t d : init.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  graph->clear_initializer();
  for (auto& k : keep) *graph->add_initializer() = std::move(k);
  auto es = InferenceSession::create(evalModel, so);
  if (!es) return es.status().withContext("evaluation graph");
  evalSession = std::move(es.value());
  // The finalize of a metric is a few element-wise ops on its sums: one thread, always the CPU.
  SessionOptions fso;
  fso.backend.accelerator = "cpu";
  fso.backend.threads = 1;
  for (const auto& mi : meta.metrics) {
    auto fm = metricFinalizeModel(forward, mi.name);
    if (!fm) return fm.status().withContext("metric '" + mi.name + "'");
    auto fin = InferenceSession::create(*fm, fso);
    if (!fin) return fin.status().withContext("finalize of metric '" + mi.name + "'");
    finalizers.push_back(std::move(fin.value()));
  }

  auto optim = Optimizer::create(opt.optimizer);
  if (!optim) return optim.status();
  optimizer = std::move(optim.value());
  baseLr = opt.optimizer.lr;
  for (const auto& p : params) grads[p.name] = Tensor(DType::kFloat, weights[p.name].shape());
  dev = cuda::trainingOps(trainSession->backend());
  devStale = dev != nullptr;
  return dev ? syncDevice() : Status();
}

Status Trainer::Impl::syncDevice() {
  if (!dev || !devStale) return Status();
  Backend& be = trainSession->backend();
  devWeights.clear();
  devGrads.clear();
  devState.clear();  // re-uploaded from the host state on first use (deviceState)
  for (const auto& [name, t] : weights) {
    auto d = be.toDevice(t);
    if (!d) return d.status().withContext("weight '" + name + "'");
    devWeights[name] = std::move(*d);
  }
  if (counters.accumulated > 0)
    for (const auto& [name, g] : grads) {
      auto d = be.toDevice(g);
      if (!d) return d.status();
      devGrads[name] = std::move(*d);
    }
  devStale = false;
  hostStale = false;
  return Status();
}

Status Trainer::Impl::syncHost() const {
  if (!dev || !hostStale) return Status();
  Backend& be = trainSession->backend();
  for (const auto& [name, t] : devWeights) {
    auto h = be.toHost(t);
    if (!h) return h.status();
    weights[name] = std::move(*h);
  }
  for (const auto& [name, t] : devGrads) {
    if (!t.defined()) continue;
    auto h = be.toHost(t);
    if (!h) return h.status();
    grads[name] = h->reshaped(weights.at(name).shape());
  }
  for (auto& p : params) {
    auto it = devState.find(p.name);
    if (it == devState.end()) continue;
    for (const auto& [k, t] : it->second) {
      auto h = be.toHost(t);
      if (!h) return h.status();
      p.state.buffers[k].assign(h->data<float>(), h->data<float>() + h->size());
    }
  }
  hostStale = false;
  return Status();
}

Result<Tensor*> Trainer::Impl::deviceState(ParamEntry& p, const char* name) {
  auto& slot = devState[p.name][name];
  if (slot.defined()) return &slot;
  const Shape& shape = weights.at(p.name).shape();
  auto hb = p.state.buffers.find(name);
  if (hb != p.state.buffers.end() &&
      static_cast<int64_t>(hb->second.size()) == numElements(shape)) {
    auto d = trainSession->backend().toDevice(Tensor::fromVector(hb->second, shape));
    if (!d) return d.status();
    slot = std::move(*d);
  } else {
    auto z = dev->zeros(shape);
    if (!z) return z.status();
    slot = std::move(*z);
  }
  return &slot;
}

// The class counts come from the forward types the gradient graph carries (autodiff's
// inference); where a count is unknown, the loss kernels still refuse bad labels.
void Trainer::Impl::findLabelChecks() {
  std::map<std::string, const onnx::TypeProto*> types;
  for (const auto& v : gg.model.graph().value_info()) types[v.name()] = &v.type();
  for (const auto& v : gg.model.graph().output()) types[v.name()] = &v.type();
  for (const auto& v : gg.model.graph().input()) types[v.name()] = &v.type();
  for (const auto& n : forward.graph().node()) {
    if (!(n.domain().empty() || n.domain() == "ai.onnx") || n.input_size() < 2) continue;
    if (n.op_type() != "SoftmaxCrossEntropyLoss" && n.op_type() != "NegativeLogLikelihoodLoss")
      continue;
    if (std::find(dataInputs.begin(), dataInputs.end(), n.input(1)) == dataInputs.end()) continue;
    auto t = types.find(n.input(0));
    if (t == types.end() || !t->second->has_tensor_type()) continue;
    const auto& shape = t->second->tensor_type().shape();
    if (shape.dim_size() < 2 || !shape.dim(1).has_dim_value()) continue;
    LabelCheck c;
    c.input = n.input(1);
    c.loss = n.name().empty() ? n.output(0) : n.name();
    c.classes = shape.dim(1).dim_value();
    for (const auto& a : n.attribute())
      if (a.name() == "ignore_index") {
        c.hasIgnore = true;
        c.ignore = a.i();
      }
    labelChecks.push_back(c);
  }
}

Status Trainer::Impl::checkLabels(const std::map<std::string, Tensor>& columns,
                                  const std::string& where) const {
  for (const auto& c : labelChecks) {
    auto it = columns.find(c.input);
    if (it == columns.end()) continue;
    const Tensor& t = it->second;
    if (!t.onHost() || (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)) continue;
    const int64_t perSample = t.rank() > 0 && t.dim(0) > 0 ? t.size() / t.dim(0) : 1;
    for (int64_t i = 0; i < t.size(); ++i) {
      const int64_t v = t.getInt(i);
      if ((v >= 0 && v < c.classes) || (c.hasIgnore && v == c.ignore)) continue;
      return Status::error(
          "sample " + std::to_string(i / perSample) + " of " + where + " has label " +
          std::to_string(v) + " in input '" + c.input + "', outside [0, " +
          std::to_string(c.classes) + "): the loss '" + c.loss + "' scores " +
          std::to_string(c.classes) + " classes, so labels must be class indices 0 to " +
          std::to_string(c.classes - 1) + " (fix the data, or give the model that many outputs)");
    }
  }
  return Status();
}

Status Trainer::Impl::checkBatch(const Batch& b) const {
  for (const auto& name : dataInputs)
    if (!b.inputs.count(name)) {
      std::string have;
      for (const auto& [k, v] : b.inputs) have += (have.empty() ? "" : ", ") + k;
      return Status::error("the batch does not feed graph input '" + name +
                           "' (it has: " + (have.empty() ? "nothing" : have) +
                           "); map a dataset file to it in the training section");
    }
  return checkLabels(b.inputs, "the batch");
}

std::map<std::string, Tensor> Trainer::Impl::feeds(const Batch& b) const {
  std::map<std::string, Tensor> in;
  for (const auto& name : dataInputs) in.emplace(name, b.inputs.at(name));
  for (const auto& [k, v] : dev ? devWeights : weights) in.emplace(k, v);
  return in;
}

Result<StepResult> Trainer::Impl::trainStep(const Batch& b) {
  DW_RETURN_IF_ERROR(checkBatch(b));
  DW_RETURN_IF_ERROR(syncDevice());
  if (counters.accumulated == 0) {
    // Nothing is accumulated, so the last step's gradient buffers can go back to the session,
    // which reuses them for this step's gradients: no allocation in the steady state.
    for (auto& [name, g] : grads) g = Tensor();
    for (auto& [name, g] : devGrads) g = Tensor();
    gradsStale = true;
  }
  auto out = trainSession->run(feeds(b));
  if (!out) return out.status();
  auto& o = out.value();
  StepResult r;
  r.samples = b.size;
  for (const auto& l : meta.losses) {
    auto it = o.find(l);
    if (it != o.end()) r.losses[l] = scalarOf(it->second);
  }
  for (const auto& mi : meta.metrics) {
    auto it = o.find(mi.output);
    if (it != o.end()) r.metrics[mi.name] = scalarOf(it->second);
  }
  r.batchMetrics = r.metrics;
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = o.find(gg.gradOutputs[i]);
    if (it == o.end())
      return Status::error("the training graph did not produce '" + gg.gradOutputs[i] + "'");
    Tensor& acc = dev ? devGrads[params[i].name] : grads[params[i].name];
    const Tensor& w = weights.at(params[i].name);
    const Tensor& g = it->second;
    if (g.size() != w.size() || g.dtype() != DType::kFloat)
      return Status::error("gradient '" + gg.gradOutputs[i] + "' has shape " +
                           shapeToString(g.shape()) + ", the weight has " +
                           shapeToString(w.shape()));
    if (counters.accumulated == 0) {
      // The first micro-batch takes the session's output buffer instead of adding into zeros.
      acc = g.reshaped(w.shape());
    } else if (dev) {
      DW_RETURN_IF_ERROR(dev->addInto(acc, g));
    } else {
      float* a = acc.data<float>();
      const float* s = g.data<float>();
      for (int64_t k = 0; k < acc.size(); ++k) a[k] += s[k];
    }
  }
  gradsStale = false;
  for (const auto& [stat, newOut] : stats) {
    auto it = o.find(newOut);
    if (it == o.end()) return Status::error("the training graph did not produce '" + newOut + "'");
    (dev ? devWeights : weights)[stat] = it->second;
  }
  if (dev) hostStale = true;
  for (const auto& p : params)
    if (p.reg.active()) {
      DW_RETURN_IF_ERROR(syncHost());
      const Tensor& w = weights.at(p.name);
      r.regularization += p.reg.penalty(w.data<float>(), w.size());
    }
  ++counters.accumulated;
  ++counters.trainSteps;
  r.lr = scheduledLr(opt.optimizer.schedule, baseLr, counters.optimizerSteps);
  return r;
}

Status Trainer::Impl::optimizerStep() {
  if (counters.accumulated == 0)
    return Status::error("no gradients to apply: run a Train Step first (Reset Grad cleared them)");
  if (dev) return deviceOptimizerStep();
  std::vector<std::pair<float*, int64_t>> gs;
  for (auto& p : params) {
    Tensor& g = grads.at(p.name);
    float* gp = g.data<float>();
    if (gradScale != 1.0) {
      const float s = static_cast<float>(gradScale);
      for (int64_t k = 0; k < g.size(); ++k) gp[k] *= s;
    }
    if (p.reg.active()) p.reg.addGradient(weights.at(p.name).data<float>(), gp, g.size());
    if (!p.frozen) gs.emplace_back(gp, g.size());
  }
  const auto& oc = opt.optimizer;
  trainSession->backend().applyThreads();
  lastGradNorm = oc.clipNorm > 0 ? clipGradNorm(gs, oc.clipNorm, oc.clipNormType)
                                 : gradNorm(gs, oc.clipNormType);
  lastLr = scheduledLr(oc.schedule, baseLr, counters.optimizerSteps);
  for (auto& p : params) {
    if (p.frozen) continue;
    Tensor& w = weights.at(p.name);
    optimizer->update(w.data<float>(), grads.at(p.name).data<float>(), w.size(), lastLr, p.state);
  }
  ++counters.optimizerSteps;
  return Status();
}

// The same step as optimizerStep's, on the device: Adam/AdamW and SGD run there; the other rules
// (and regularization's gradient) take the values to the host and back.
Status Trainer::Impl::deviceOptimizerStep() {
  DW_RETURN_IF_ERROR(syncDevice());
  Backend& be = trainSession->backend();
  be.applyThreads();
  const auto& oc = opt.optimizer;
  std::vector<Tensor*> gs;
  for (auto& p : params) {
    Tensor& g = devGrads.at(p.name);
    if (gradScale != 1.0) DW_RETURN_IF_ERROR(dev->scale(g, static_cast<float>(gradScale)));
    if (p.reg.active()) {
      Tensor& w = devWeights.at(p.name);
      auto hw = be.toHost(w);
      auto hg = be.toHost(g);
      if (!hw || !hg) return !hw ? hw.status() : hg.status();
      Tensor hgc = hg->clone();
      p.reg.addGradient(hw->data<float>(), hgc.data<float>(), hgc.size());
      auto dg = be.toDevice(hgc);
      if (!dg) return dg.status();
      g = std::move(*dg);
    }
    if (!p.frozen) gs.push_back(&g);
  }
  auto norm = dev->norm(gs, oc.clipNormType);
  if (!norm) return norm.status();
  lastGradNorm = *norm;
  // The cpu's test and factor (clipGradNorm), so both paths clip the same steps.
  const double coef = oc.clipNorm / (*norm + 1e-6);
  if (oc.clipNorm > 0 && coef < 1)
    for (Tensor* g : gs) DW_RETURN_IF_ERROR(dev->scale(*g, static_cast<float>(coef)));
  lastLr = scheduledLr(oc.schedule, baseLr, counters.optimizerSteps);
  for (auto& p : params) {
    if (p.frozen) continue;
    Tensor& w = devWeights.at(p.name);
    Tensor& g = devGrads.at(p.name);
    if (oc.type == "adam" || oc.type == "adamw") {
      ++p.state.step;
      const AdamScalars k = adamScalars(oc, oc.type == "adamw", lastLr, p.state.step);
      auto m = deviceState(p, "m");
      auto v = deviceState(p, "v");
      if (!m || !v) return !m ? m.status() : v.status();
      Tensor* vmax = nullptr;
      if (oc.amsgrad) {
        auto x = deviceState(p, "vmax");
        if (!x) return x.status();
        vmax = *x;
      }
      DW_RETURN_IF_ERROR(dev->adam(k, w, g, **m, **v, vmax));
    } else if (oc.type == "sgd") {
      Tensor* buf = nullptr;
      bool first = false;
      if (oc.momentum != 0) {
        first = !devState[p.name].count("momentum") && !p.state.buffers.count("momentum");
        auto b = deviceState(p, "momentum");
        if (!b) return b.status();
        buf = *b;
      }
      DW_RETURN_IF_ERROR(dev->sgd(static_cast<float>(lastLr), static_cast<float>(oc.momentum),
                                  static_cast<float>(oc.dampening),
                                  static_cast<float>(oc.weightDecay), oc.nesterov, first, w, g,
                                  buf));
      ++p.state.step;
    } else {
      auto hw = be.toHost(w);
      auto hg = be.toHost(g);
      if (!hw || !hg) return !hw ? hw.status() : hg.status();
      Tensor nw = hw->clone(), ng = hg->clone();
      optimizer->update(nw.data<float>(), ng.data<float>(), nw.size(), lastLr, p.state);
      auto dw = be.toDevice(nw);
      if (!dw) return dw.status();
      w = std::move(*dw);
    }
  }
  ++counters.optimizerSteps;
  hostStale = true;
  return Status();
}

void Trainer::Impl::resetGrad() {
  // The next trainStep takes the session's gradient buffers as they are, so zeroing is only
  // needed if someone looks at the gradients before that (gradients()).
  counters.accumulated = 0;
  gradsStale = true;
}

const std::map<std::string, Tensor>& Trainer::Impl::gradients() {
  (void)syncHost();  // a failed copy leaves the last host values, which the caller then sees
  if (gradsStale && counters.accumulated == 0) {
    for (auto& [name, g] : grads) g = Tensor(DType::kFloat, weights.at(name).shape());
    gradsStale = false;
  }
  return grads;
}

Result<StepResult> Trainer::Impl::evalBatch(const Batch& b, MetricAccumulator& acc) {
  DW_RETURN_IF_ERROR(checkBatch(b));
  DW_RETURN_IF_ERROR(syncDevice());  // a checkpoint loaded since the last step
  auto out = evalSession->run(feeds(b));
  if (!out) return out.status();
  auto& o = out.value();
  StepResult r;
  r.samples = b.size;
  for (const auto& l : meta.losses) {
    auto it = o.find(l);
    if (it != o.end()) r.losses[l] = scalarOf(it->second);
  }
  // Check every statistic before adding any, so a failed step leaves the sums as they were.
  std::vector<std::vector<const Tensor*>> batchStats;
  for (const auto& mi : meta.metrics) {
    auto& st = batchStats.emplace_back();
    const auto sums = acc.find(mi.name);
    for (size_t k = 0; k < mi.stats.size(); ++k) {
      auto it = o.find(mi.stats[k]);
      if (it == o.end())
        return Status::error("the evaluation graph did not produce statistic '" + mi.stats[k] +
                             "' of metric '" + mi.name + "'");
      if (sums != acc.end() && sums->second.sums[k].shape() != it->second.shape())
        return Status::error("metric '" + mi.name + "': statistic '" + mi.stats[k] +
                             "' has shape " + shapeToString(it->second.shape()) +
                             " in this batch but " + shapeToString(sums->second.sums[k].shape()) +
                             " in the accumulated ones; reset the metrics (reset_metrics? of the "
                             "Eval Step) before changing the shape of what it measures");
      st.push_back(&it->second);
    }
  }
  for (size_t i = 0; i < meta.metrics.size(); ++i) {
    const auto& mi = meta.metrics[i];
    auto it = o.find(mi.output);
    if (it != o.end()) r.batchMetrics[mi.name] = scalarOf(it->second);
    if (mi.stats.empty()) continue;
    MetricSums& m = acc[mi.name];
    if (m.batches == 0) {
      m.sums.clear();
      for (const Tensor* t : batchStats[i]) m.sums.emplace_back(DType::kDouble, t->shape());
    }
    for (size_t k = 0; k < batchStats[i].size(); ++k) {
      const Tensor& t = *batchStats[i][k];
      double* d = m.sums[k].data<double>();
      for (int64_t e = 0; e < t.size(); ++e) d[e] += t.getDouble(e);
    }
    ++m.batches;
  }
  for (const auto& p : params)
    if (p.reg.active()) {
      DW_RETURN_IF_ERROR(syncHost());
      const Tensor& w = weights.at(p.name);
      r.regularization += p.reg.penalty(w.data<float>(), w.size());
    }
  return r;
}

Result<std::map<std::string, double>> Trainer::Impl::finalizeMetrics(
    const MetricAccumulator& acc) const {
  std::map<std::string, double> values;
  for (size_t i = 0; i < meta.metrics.size(); ++i) {
    const auto& mi = meta.metrics[i];
    auto it = acc.find(mi.name);
    if (it == acc.end() || it->second.batches == 0) continue;
    std::map<std::string, Tensor> in;
    for (size_t k = 0; k < mi.stats.size(); ++k) {
      const Tensor& sum = it->second.sums[k];
      Tensor f(DType::kFloat, sum.shape());
      const double* d = sum.data<double>();
      float* p = f.data<float>();
      for (int64_t e = 0; e < sum.size(); ++e) p[e] = static_cast<float>(d[e]);
      in.emplace(mi.stats[k], std::move(f));
    }
    auto out = finalizers[i]->run(in);
    if (!out) return out.status().withContext("finalize of metric '" + mi.name + "'");
    auto v = out->find(mi.output);
    if (v == out->end())
      return Status::error("finalize of metric '" + mi.name + "' did not produce '" + mi.output +
                           "'");
    values[mi.name] = scalarOf(v->second);
  }
  return values;
}

Result<StepResult> Trainer::Impl::evalStep(const Batch& b, bool reset) {
  if (reset) evalSums.clear();
  auto r = evalBatch(b, evalSums);
  if (!r) return r;
  auto m = finalizeMetrics(evalSums);
  if (!m) return m.status();
  r->metrics = std::move(m.value());
  return r;
}

Result<StepResult> Trainer::Impl::evaluate(const Dataset& d, int64_t batchSize) {
  StepResult total;
  MetricAccumulator acc;  // this pass only: the Eval Step sums stay as they are
  const int64_t n = d.size();
  std::vector<int64_t> idx;
  for (int64_t begin = 0; begin < n; begin += batchSize) {
    const int64_t end = std::min(n, begin + batchSize);
    idx.clear();
    for (int64_t i = begin; i < end; ++i) idx.push_back(i);
    Dataset part = d.gather(idx);
    Batch b;
    b.inputs = std::move(part.columns);
    b.size = end - begin;
    auto r = evalBatch(b, acc);
    if (!r) return r.status();
    for (const auto& [k, v] : r->losses) total.losses[k] += v * static_cast<double>(b.size);
    total.regularization = r->regularization;
    total.samples += b.size;
  }
  if (total.samples > 0)
    for (auto& [k, v] : total.losses) v /= static_cast<double>(total.samples);
  auto m = finalizeMetrics(acc);
  if (!m) return m.status();
  total.metrics = std::move(m.value());
  return total;
}

Result<FitReport> Trainer::Impl::fit(const FitOptions& fo, const FitCallbacks& cb,
                                     const std::atomic<bool>* cancel) {
  if (!fo.train || fo.train->size() == 0)
    return Status::error("fit: no training data (set the dataset in the training section)");
  DW_RETURN_IF_ERROR(fo.train->validate());
  DW_RETURN_IF_ERROR(checkLabels(fo.train->columns, "the training data"));
  if (fo.test) DW_RETURN_IF_ERROR(checkLabels(fo.test->columns, "the test data"));
  if (fo.batchSize < 1) return Status::error("fit: batch size must be >= 1");
  if (fo.accumulationSteps < 1) return Status::error("fit: accumulation steps must be >= 1");
  std::shared_ptr<const Dataset> train = fo.train, test = fo.test;
  if (!test && fo.validationSplit > 0) {
    if (fo.validationSplit >= 1) return Status::error("fit: validation split must be < 1");
    // The same held-out samples as loadData's validation fraction (data_source.h).
    const SplitIndices split = splitIndices(train->size(), fo.validationSplit, 0);
    if (!split.validation.empty() && !split.train.empty()) {
      test = std::make_shared<Dataset>(train->gather(split.validation));
      train = std::make_shared<Dataset>(train->gather(split.train));
    }
  }
  if (test) DW_RETURN_IF_ERROR(test->validate());
  LoaderOptions lo;
  lo.batchSize = fo.batchSize;
  lo.shuffle = fo.shuffle;
  lo.dropLast = fo.dropLast;
  lo.seed = opt.seed;
  BatchLoader loader(train, lo);
  int64_t perEpoch = loader.batchesPerEpoch();
  if (fo.maxStepsPerEpoch > 0) perEpoch = std::min(perEpoch, fo.maxStepsPerEpoch);

  FitReport report;
  using Clock = std::chrono::steady_clock;
  // The epoch's training metrics: each batch's value weighted by its samples (exact for
  // accuracies; batches before a resume are not in it).
  std::map<std::string, double> metricSums;
  int64_t metricSamples = 0;
  while (counters.epoch < fo.epochs) {
    metricSums.clear();
    metricSamples = 0;
    if (counters.batchInEpoch == 0) {
      epochLossSum = 0;
      epochSamples = 0;
      epochSeconds = 0;
    }
    loader.startEpoch(counters.epoch, counters.batchInEpoch);
    const auto start = Clock::now();
    const double secondsBefore = epochSeconds;
    while (counters.batchInEpoch < perEpoch) {
      if (cancel && cancel->load()) {
        epochSeconds = secondsBefore + std::chrono::duration<double>(Clock::now() - start).count();
        report.cancelled = true;
        return report;
      }
      auto batch = loader.next();
      if (!batch) break;
      gradScale = 1.0;
      auto r = trainStep(*batch);
      if (!r)
        return r.status().withContext("epoch " + std::to_string(counters.epoch + 1) + ", batch " +
                                      std::to_string(counters.batchInEpoch + 1));
      ++counters.batchInEpoch;
      const bool lastOfEpoch = counters.batchInEpoch >= perEpoch;
      if (counters.accumulated >= fo.accumulationSteps || lastOfEpoch) {
        gradScale = 1.0 / static_cast<double>(counters.accumulated);
        Status st = optimizerStep();
        gradScale = 1.0;
        if (!st.ok()) return st;
        resetGrad();
        r->gradNorm = lastGradNorm;
        r->lr = lastLr;
      }
      epochLossSum += r->totalLoss() * static_cast<double>(r->samples);
      epochSamples += r->samples;
      for (const auto& [name, v] : r->batchMetrics)
        metricSums[name] += v * static_cast<double>(r->samples);
      metricSamples += r->samples;
      if (cb.onStep) {
        StepInfo si;
        si.epoch = counters.epoch;
        si.batch = counters.batchInEpoch - 1;
        si.batchesPerEpoch = perEpoch;
        si.samplesDone = epochSamples;
        si.seconds = secondsBefore + std::chrono::duration<double>(Clock::now() - start).count();
        si.result = std::move(r.value());
        cb.onStep(si);
      }
    }
    epochSeconds = secondsBefore + std::chrono::duration<double>(Clock::now() - start).count();
    EpochReport er;
    er.epoch = counters.epoch;
    er.trainLoss = epochSamples > 0 ? epochLossSum / static_cast<double>(epochSamples) : 0;
    for (const auto& [name, sum] : metricSums)
      er.trainMetrics[name] = sum / static_cast<double>(std::max<int64_t>(1, metricSamples));
    er.seconds = epochSeconds;
    er.samplesPerSecond = epochSeconds > 0 ? static_cast<double>(epochSamples) / epochSeconds : 0;
    if (test && test->size() > 0) {
      auto ev = evaluate(*test, std::max<int64_t>(fo.batchSize, 256));
      if (!ev)
        return ev.status().withContext("evaluating epoch " + std::to_string(counters.epoch + 1));
      er.hasTest = true;
      er.testLoss = ev->totalLoss();
      er.testMetrics = ev->metrics;
      for (const auto& mi : meta.metrics)
        if (isAccuracy(mi) && er.testAccuracy < 0) er.testAccuracy = ev->metrics[mi.name];
    }
    ++counters.epoch;
    counters.batchInEpoch = 0;
    er.steps = counters.optimizerSteps;
    if (!fo.checkpointDir.empty()) DW_RETURN_IF_ERROR(save(fo.checkpointDir));
    if (cb.onEpoch) cb.onEpoch(er);
    report.epochs.push_back(std::move(er));
  }
  return report;
}

// ---- Checkpoints ------------------------------------------------------------------------------
// A directory: checkpoint.json (counters, optimizer config, per-tensor index) and one raw
// little-endian NPY file per tensor, so values round-trip bit for bit.

namespace {

json configJson(const OptimizerConfig& o) {
  TrainingConfig c;
  c.optimizer = o;
  return json::parse(trainingConfigToJson(c))["optimizer"];
}

}  // namespace

Status Trainer::Impl::save(const std::string& dir) const {
  DW_RETURN_IF_ERROR(syncHost());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create checkpoint directory: " + ec.message());
  json j;
  j["format"] = "deepwire-checkpoint";
  j["version"] = 1;
  j["counters"] = {{"epoch", counters.epoch},
                   {"batch_in_epoch", counters.batchInEpoch},
                   {"optimizer_steps", counters.optimizerSteps},
                   {"train_steps", counters.trainSteps},
                   {"accumulated", counters.accumulated}};
  j["epoch_sums"] = {{"loss", epochLossSum}, {"samples", epochSamples}, {"seconds", epochSeconds}};
  j["rng"] = {{"seed", opt.seed}};  // shuffles derive from (seed, epoch); nothing else draws
  j["optimizer"] = configJson(opt.optimizer);
  j["base_lr"] = baseLr;
  // Each save writes its tensors under new names (a generation one above the checkpoint.json
  // on disk), so that a save killed half way leaves the previous checkpoint whole: its json
  // names only files this save does not touch.
  int64_t generation = 0;
  {
    std::ifstream old(fs::path(dir) / "checkpoint.json");
    const json prev = old ? json::parse(old, nullptr, false) : json();
    if (prev.is_object() && prev.contains("generation") && prev["generation"].is_number_integer())
      generation = prev["generation"].get<int64_t>() + 1;
  }
  j["generation"] = generation;
  int fileNo = 0;
  std::set<std::string> written;
  auto put = [&](const Tensor& t) -> Result<std::string> {
    const std::string file =
        "g" + std::to_string(generation) + "_t" + std::to_string(fileNo++) + ".npy";
    DW_RETURN_IF_ERROR(writeFileAtomic((fs::path(dir) / file).string(), serializeNpy(t)));
    written.insert(file);
    return file;
  };
  for (const auto& [name, t] : weights) {
    auto f = put(t);
    if (!f) return f.status();
    j["weights"][name] = *f;
  }
  for (const auto& p : params) {
    json pj;
    pj["step"] = p.state.step;
    for (const auto& [bn, buf] : p.state.buffers) {
      Tensor t = Tensor::fromVector(buf, {static_cast<int64_t>(buf.size())});
      auto f = put(t);
      if (!f) return f.status();
      pj["buffers"][bn] = *f;
    }
    if (counters.accumulated > 0) {
      auto f = put(grads.at(p.name));
      if (!f) return f.status();
      pj["grad"] = *f;
    }
    j["params"][p.name] = pj;
  }
  for (const auto& [name, m] : evalSums) {
    json mj = {{"batches", m.batches}, {"stats", json::array()}};
    for (const Tensor& t : m.sums) {
      auto f = put(t);
      if (!f) return f.status();
      mj["stats"].push_back(*f);
    }
    j["eval_metrics"][name] = mj;
  }
  // Written last and atomically (fsync, then rename): a checkpoint.json names only tensors that
  // are already on disk.
  DW_RETURN_IF_ERROR(writeFileAtomic((fs::path(dir) / "checkpoint.json").string(), j.dump(1)));
  // Then the tensors of earlier saves go: no checkpoint.json names them any more. Only names this
  // code writes (tN.npy before generations, gG_tN.npy since), nothing else in the directory.
  static const std::regex kTensorFile("(g[0-9]+_)?t[0-9]+\\.npy");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!written.count(name) && std::regex_match(name, kTensorFile)) fs::remove(e.path(), ec);
  }
  return Status();
}

Status Trainer::Impl::load(const std::string& dir) {
  const fs::path jp = fs::path(dir) / "checkpoint.json";
  std::ifstream f(jp);
  if (!f) return Status::error(jp.string() + ": cannot open (not a checkpoint directory?)");
  json j;
  try {
    j = json::parse(f);
  } catch (const std::exception& e) {
    return Status::error(jp.string() + ": " + e.what());
  }
  if (j.value("format", "") != "deepwire-checkpoint")
    return Status::error(jp.string() + ": not a deepwire checkpoint");
  auto get = [&](const std::string& file, const std::string& what,
                 const Tensor* like) -> Result<Tensor> {
    auto t = readNpy((fs::path(dir) / file).string());
    if (!t) return t.status();
    if (like && (t->shape() != like->shape() || t->dtype() != like->dtype()))
      return Status::error(jp.string() + ": " + what + " has shape " + shapeToString(t->shape()) +
                           " but the model's has " + shapeToString(like->shape()) +
                           " (checkpoint of another model?)");
    return t;
  };
  try {
    // Validate everything before changing any state.
    std::map<std::string, Tensor> newWeights;
    for (const auto& [name, t] : weights) {
      if (!j["weights"].contains(name))
        return Status::error(jp.string() + ": no value for weight '" + name + "'");
      auto v = get(j["weights"][name], "weight '" + name + "'", &t);
      if (!v) return v.status();
      newWeights[name] = std::move(v.value());
    }
    TrainerCounters c;
    const json& cj = j.at("counters");
    c.epoch = cj.at("epoch");
    c.batchInEpoch = cj.at("batch_in_epoch");
    c.optimizerSteps = cj.at("optimizer_steps");
    c.trainSteps = cj.at("train_steps");
    c.accumulated = cj.at("accumulated");
    std::vector<ParamState> states;
    std::map<std::string, Tensor> newGrads;
    for (const auto& p : params) {
      if (!j["params"].contains(p.name))
        return Status::error(jp.string() + ": no optimizer state for '" + p.name + "'");
      const json& pj = j["params"][p.name];
      ParamState s;
      s.step = pj.at("step");
      if (pj.contains("buffers"))
        for (auto it = pj["buffers"].begin(); it != pj["buffers"].end(); ++it) {
          auto t = get(it.value(), "state '" + it.key() + "' of '" + p.name + "'", nullptr);
          if (!t) return t.status();
          if (t->size() != weights.at(p.name).size() || t->dtype() != DType::kFloat)
            return Status::error(jp.string() + ": optimizer state '" + it.key() + "' of '" +
                                 p.name + "' has the wrong size");
          const float* d = t->data<float>();
          s.buffers[it.key()] = std::vector<float>(d, d + t->size());
        }
      states.push_back(std::move(s));
      if (c.accumulated > 0) {
        if (!pj.contains("grad"))
          return Status::error(jp.string() + ": accumulated gradient of '" + p.name + "' missing");
        auto t = get(pj["grad"], "gradient of '" + p.name + "'", &weights.at(p.name));
        if (!t) return t.status();
        newGrads[p.name] = std::move(t.value());
      }
    }
    // The Eval Step sums; a checkpoint without them (older ones) resumes with none.
    MetricAccumulator newSums;
    if (j.contains("eval_metrics"))
      for (auto it = j["eval_metrics"].begin(); it != j["eval_metrics"].end(); ++it) {
        const MetricInfo* mi = nullptr;
        for (const auto& m : meta.metrics)
          if (m.name == it.key()) mi = &m;
        if (!mi)
          return Status::error(jp.string() + ": accumulated metric '" + it.key() +
                               "' is not a metric of the model (checkpoint of another model?)");
        const json& stats = it.value().at("stats");
        if (stats.size() != mi->stats.size())
          return Status::error(jp.string() + ": metric '" + it.key() + "' has " +
                               std::to_string(stats.size()) + " statistics, the model's has " +
                               std::to_string(mi->stats.size()));
        MetricSums m;
        m.batches = it.value().at("batches");
        for (const auto& file : stats) {
          auto t = get(file, "statistic of metric '" + it.key() + "'", nullptr);
          if (!t) return t.status();
          if (t->dtype() != DType::kDouble)
            return Status::error(jp.string() + ": statistics of metric '" + it.key() +
                                 "' are not float64");
          m.sums.push_back(std::move(t.value()));
        }
        newSums[it.key()] = std::move(m);
      }
    OptimizerConfig oc = opt.optimizer;
    if (j.contains("optimizer")) {
      OptimizerConfig loaded;
      DW_RETURN_IF_ERROR(parseOptimizer(j["optimizer"], jp.string() + "/optimizer", loaded));
      if (loaded.type != oc.type)
        return Status::error(jp.string() + ": the checkpoint's optimizer is '" + loaded.type +
                             "' but this run uses '" + oc.type + "'; resume with --optimizer " +
                             loaded.type);
    }
    weights = std::move(newWeights);
    devStale = dev != nullptr;
    hostStale = false;
    evalSums = std::move(newSums);
    counters = c;
    for (size_t i = 0; i < params.size(); ++i) params[i].state = std::move(states[i]);
    if (c.accumulated > 0) {
      for (auto& [k, v] : newGrads) grads[k] = std::move(v);
    } else {
      resetGrad();
    }
    if (j.contains("epoch_sums")) {
      epochLossSum = j["epoch_sums"].value("loss", 0.0);
      epochSamples = j["epoch_sums"].value("samples", int64_t{0});
      epochSeconds = j["epoch_sums"].value("seconds", 0.0);
    }
    if (j.contains("rng") && j["rng"].contains("seed")) opt.seed = j["rng"]["seed"];
    if (j.contains("base_lr")) baseLr = j["base_lr"];
  } catch (const std::exception& e) {
    return Status::error(jp.string() + ": malformed checkpoint: " + e.what());
  }
  return Status();
}

// ---- Export -----------------------------------------------------------------------------------

namespace {

void setInitializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  for (auto& init : *g->mutable_initializer())
    if (init.name() == name) {
      tensorToProto(t, &init, name);
      return;
    }
  tensorToProto(t, g->add_initializer(), name);
}

void addOutput(onnx::GraphProto* g, const std::string& name, const Tensor& like) {
  auto* vi = g->add_output();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtypeToOnnx(like.dtype()));
  for (int64_t d : like.shape()) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* addNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                         const std::vector<std::string>& in, const std::vector<std::string>& out,
                         const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  if (!domain.empty()) n->set_domain(domain);
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
  return n;
}

void setAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void setAttr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

}  // namespace

Result<onnx::ModelProto> Trainer::Impl::exportInference() const {
  DW_RETURN_IF_ERROR(syncHost());
  // The clean inference model from the same graph (no losses), with the trained values.
  onnx::ModelProto m = inference;
  for (auto& init : *m.mutable_graph()->mutable_initializer()) {
    auto it = weights.find(init.name());
    if (it == weights.end()) continue;
    const std::string name = init.name();  // tensorToProto clears the proto first
    tensorToProto(it->second, &init, name);
  }
  return m;
}

Result<onnx::ModelProto> Trainer::Impl::exportTraining() const {
  DW_RETURN_IF_ERROR(syncHost());
  onnx::ModelProto m = gg.model;
  auto* g = m.mutable_graph();
  // Current weights and statistics become the defaults of their inputs.
  for (const auto& [name, t] : weights) setInitializer(g, name, t);
  const OptimizerConfig& oc = opt.optimizer;
  const std::string trainingDomain = "ai.onnx.preview.training";
  bool needsTrainingOpset = false;
  const double lr = scheduledLr(oc.schedule, baseLr, counters.optimizerSteps);
  setInitializer(g, "training.lr", Tensor::scalar(DType::kFloat, lr));
  setInitializer(g, "training.step",
                 Tensor::scalar(DType::kInt64, static_cast<double>(counters.optimizerSteps)));
  std::vector<const ParamEntry*> upd;
  std::vector<std::string> gradNames;
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].frozen) {
      upd.push_back(&params[i]);
      gradNames.push_back(gg.gradOutputs[i]);
    }
  auto stateTensor = [&](const ParamEntry& p, const std::string& buf) {
    const Tensor& w = weights.at(p.name);
    Tensor t(DType::kFloat, w.shape());
    auto it = p.state.buffers.find(buf);
    if (it != p.state.buffers.end())
      std::copy(it->second.begin(), it->second.end(), t.data<float>());
    return t;
  };
  auto stateName = [](const ParamEntry& p, const std::string& buf) {
    return p.name + ".optimizer." + buf;
  };
  std::vector<std::string> in = {"training.lr", "training.step"}, out;
  auto addStates = [&](const std::vector<std::string>& bufs, std::vector<std::string>& ins,
                       std::vector<std::string>& outs) {
    for (const auto& b : bufs)
      for (const auto* p : upd) {
        const std::string s = stateName(*p, b);
        setInitializer(g, s, stateTensor(*p, b));
        ins.push_back(s);
        outs.push_back(s + "_new");
        addOutput(g, s + "_new", weights.at(p->name));
      }
  };
  std::vector<std::string> xs;
  for (const auto* p : upd) xs.push_back(p->name);
  if (oc.type == "adam" || (oc.type == "adamw" && oc.adamwMode == "huggingface") ||
      (oc.type == "adamw" && oc.adamwMode == "pytorch")) {
    std::vector<std::string> xin = xs;
    if (oc.type == "adamw" && oc.adamwMode == "pytorch" && oc.weightDecay > 0) {
      // PyTorch's AdamW decays before the Adam step: X * (1 - lr * wd).
      setInitializer(g, "training.decay", Tensor::scalar(DType::kFloat, 1.0 - lr * oc.weightDecay));
      for (auto& x : xin) {
        const std::string d = x + ".decayed";
        addNode(g, "Mul", x + ".decay", {x, "training.decay"}, {d});
        x = d;
      }
    }
    in.insert(in.end(), xin.begin(), xin.end());
    in.insert(in.end(), gradNames.begin(), gradNames.end());
    for (const auto& x : xs) {
      out.push_back(x + "_new");
      addOutput(g, x + "_new", weights.at(x));
    }
    addStates({"m", "v"}, in, out);
    auto* n = addNode(g, "Adam", "optimizer.adam", in, out, trainingDomain);
    setAttr(n, "alpha", static_cast<float>(oc.beta1));
    setAttr(n, "beta", static_cast<float>(oc.beta2));
    setAttr(n, "epsilon", static_cast<float>(oc.eps));
    setAttr(n, "norm_coefficient", static_cast<float>(oc.type == "adam" ? oc.weightDecay : 0.0));
    if (oc.type == "adamw" && oc.adamwMode == "huggingface")
      setAttr(n, "norm_coefficient_post", static_cast<float>(lr * oc.weightDecay));
    needsTrainingOpset = true;
  } else if (oc.type == "sgd" || oc.type == "adagrad") {
    in.insert(in.end(), xs.begin(), xs.end());
    in.insert(in.end(), gradNames.begin(), gradNames.end());
    for (const auto& x : xs) {
      out.push_back(x + "_new");
      addOutput(g, x + "_new", weights.at(x));
    }
    if (oc.type == "sgd") {
      addStates({"momentum"}, in, out);
      auto* n = addNode(g, "Momentum", "optimizer.momentum", in, out, trainingDomain);
      setAttr(n, "alpha", static_cast<float>(oc.momentum));
      setAttr(n, "beta", static_cast<float>(1.0 - oc.dampening));
      setAttr(n, "mode", std::string(oc.nesterov ? "nesterov" : "standard"));
      setAttr(n, "norm_coefficient", static_cast<float>(oc.weightDecay));
    } else {
      addStates({"sum"}, in, out);
      auto* n = addNode(g, "Adagrad", "optimizer.adagrad", in, out, trainingDomain);
      setAttr(n, "decay_factor", static_cast<float>(oc.lrDecay));
      setAttr(n, "epsilon", static_cast<float>(oc.eps));
      setAttr(n, "norm_coefficient", static_cast<float>(oc.weightDecay));
    }
    needsTrainingOpset = true;
  } else if (oc.type == "rmsprop") {
    // No standard node: RMSprop as plain ops, sq' = a*sq + (1-a)*g^2; x' = x -
    // lr*g/(sqrt(sq')+eps).
    setInitializer(g, "training.rms.alpha", Tensor::scalar(DType::kFloat, oc.alpha));
    setInitializer(g, "training.rms.one_minus_alpha", Tensor::scalar(DType::kFloat, 1 - oc.alpha));
    setInitializer(g, "training.rms.eps", Tensor::scalar(DType::kFloat, oc.eps));
    for (size_t i = 0; i < upd.size(); ++i) {
      const std::string& x = xs[i];
      const std::string& gr = gradNames[i];
      const std::string sq = stateName(*upd[i], "square_avg");
      setInitializer(g, sq, stateTensor(*upd[i], "square_avg"));
      const std::string p = x + ".rms.";
      addNode(g, "Mul", p + "g2", {gr, gr}, {p + "g2"});
      addNode(g, "Mul", p + "a_sq", {sq, "training.rms.alpha"}, {p + "a_sq"});
      addNode(g, "Mul", p + "b_g2", {p + "g2", "training.rms.one_minus_alpha"}, {p + "b_g2"});
      addNode(g, "Add", p + "sq_new", {p + "a_sq", p + "b_g2"}, {sq + "_new"});
      addNode(g, "Sqrt", p + "root", {sq + "_new"}, {p + "root"});
      addNode(g, "Add", p + "denom", {p + "root", "training.rms.eps"}, {p + "denom"});
      addNode(g, "Div", p + "ratio", {gr, p + "denom"}, {p + "ratio"});
      addNode(g, "Mul", p + "step", {p + "ratio", "training.lr"}, {p + "step"});
      addNode(g, "Sub", p + "x_new", {x, p + "step"}, {x + "_new"});
      addOutput(g, x + "_new", weights.at(x));
      addOutput(g, sq + "_new", weights.at(x));
    }
  }
  if (needsTrainingOpset) {
    bool has = false;
    for (const auto& op : m.opset_import()) has |= op.domain() == trainingDomain;
    if (!has) {
      auto* op = m.add_opset_import();
      op->set_domain(trainingDomain);
      op->set_version(1);
    }
  }
  auto* p = m.add_metadata_props();
  p->set_key("deepwire.optimizer");
  p->set_value(configJson(oc).dump());
  Status st = checkOnnxModel(m, CheckLevel::Basic);
  if (!st.ok()) return st.withContext("training graph export");
  return m;
}

// ---- Trainer ---------------------------------------------------------------------------------

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::create(const Graph& graph, const TrainOptions& options) {
  ExportOptions eo;
  eo.model = options.model;
  eo.withLosses = true;
  auto m = exportOnnx(graph, eo);
  if (!m) return m.status();
  eo.withLosses = false;
  auto inf = exportOnnx(graph, eo);
  if (!inf) return inf.status();
  auto impl = std::make_unique<Impl>();
  impl->inference = std::move(inf.value());
  DW_RETURN_IF_ERROR(impl->init(options, std::move(m.value())));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

size_t Trainer::bufferAllocations() const {
  return impl_->trainSession->allocationCount() + impl_->evalSession->allocationCount();
}

void Trainer::setProfiling(bool on) {
  impl_->trainSession->setProfiling(on);
}

std::string Trainer::profileReport() const {
  return impl_->trainSession->profileReport();
}

Result<StepResult> Trainer::trainStep(const Batch& b) {
  return impl_->trainStep(b);
}
Status Trainer::optimizerStep() {
  impl_->gradScale = 1.0;
  return impl_->optimizerStep();
}
void Trainer::resetGrad() {
  impl_->resetGrad();
}
Result<StepResult> Trainer::fullTrainStep(const Batch& b, bool update) {
  auto r = impl_->trainStep(b);
  if (!r || !update) return r;
  impl_->gradScale = 1.0;
  DW_RETURN_IF_ERROR(impl_->optimizerStep());
  impl_->resetGrad();
  r->gradNorm = impl_->lastGradNorm;
  r->lr = impl_->lastLr;
  return r;
}
Result<StepResult> Trainer::evalStep(const Batch& b, bool resetMetrics) {
  return impl_->evalStep(b, resetMetrics);
}
void Trainer::resetMetrics() {
  impl_->evalSums.clear();
}
Result<std::map<std::string, double>> Trainer::accumulatedMetrics() const {
  return impl_->finalizeMetrics(impl_->evalSums);
}
Result<StepResult> Trainer::evaluate(const Dataset& d, int64_t batchSize) {
  if (batchSize < 1) return Status::error("evaluate: batch size must be >= 1");
  return impl_->evaluate(d, batchSize);
}
Result<FitReport> Trainer::fit(const FitOptions& o, const FitCallbacks& cb,
                               const std::atomic<bool>* cancel) {
  return impl_->fit(o, cb, cancel);
}
Status Trainer::saveCheckpoint(const std::string& dir) const {
  return impl_->save(dir);
}
Status Trainer::loadCheckpoint(const std::string& dir) {
  return impl_->load(dir);
}
Result<onnx::ModelProto> Trainer::exportInference() const {
  return impl_->exportInference();
}
Result<onnx::ModelProto> Trainer::exportTraining() const {
  return impl_->exportTraining();
}

// Initializer nodes take their trained values by name. Layer weights (running statistics
// included) go back to their layer node as its stored weights, replacing the whole set: the
// export's layout names the layer node, its type and the weight of each initializer.
Status Trainer::writeWeightsTo(Graph& graph) const {
  DW_RETURN_IF_ERROR(impl_->syncHost());
  int written = 0;
  for (const auto& [id, n] : graph.nodes()) {
    if (n.type != "Initializer") continue;
    auto it = impl_->weights.find(n.name);
    if (it == impl_->weights.end()) continue;
    onnx::TensorProto proto;
    tensorToProto(it->second, &proto, n.name);
    DW_RETURN_IF_ERROR(graph.setParam(id, "fill", Param::makeString("values")));
    DW_RETURN_IF_ERROR(graph.setParam(
        id, "values", Param::makeProto(ParamType::Tensor, proto.SerializeAsString())));
    ++written;
  }
  const json layout =
      json::parse(metadataValue(impl_->forward, kLayoutMetadataKey), nullptr, false);
  std::map<NodeId, std::string> layerTypes;
  std::map<NodeId, std::map<std::string, std::string>> layerWeights;
  if (layout.is_object() && layout.contains("layers") && layout["layers"].is_object())
    for (const auto& [base, e] : layout["layers"].items())
      if (e.is_object() && e.contains("id") && e["id"].is_number_integer() && e.contains("type") &&
          e["type"].is_string())
        layerTypes[e["id"].get<NodeId>()] = e["type"].get<std::string>();
  if (layout.is_object() && layout.contains("nodes") && layout["nodes"].is_object())
    for (const auto& [key, e] : layout["nodes"].items()) {
      if (key.rfind("initializer:", 0) != 0 || !e.is_object() || !e.contains("layer") ||
          !e["layer"].is_number_integer() || !e.contains("weight") || !e["weight"].is_string())
        continue;
      auto it = impl_->weights.find(key.substr(12));
      if (it == impl_->weights.end()) continue;
      onnx::TensorProto proto;
      tensorToProto(it->second, &proto);
      layerWeights[e["layer"].get<NodeId>()][e["weight"].get<std::string>()] =
          proto.SerializeAsString();
    }
  for (auto& [id, w] : layerWeights) {
    // Another graph than the one trained: only the same layer at the same id takes them.
    const Node* n = graph.node(id);
    if (!n || !layerTypes.count(id) || layerTypes[id] != n->type) continue;
    DW_RETURN_IF_ERROR(graph.setWeights(id, std::move(w)));
    ++written;
  }
  if (written == 0 && !impl_->weights.empty())
    return Status::error(
        "no Initializer or layer node of the graph matches a trained weight (was the trainer "
        "made from another graph?)");
  return Status();
}

const std::vector<std::string>& Trainer::lossNames() const {
  return impl_->meta.losses;
}
const std::vector<std::string>& Trainer::metricNames() const {
  return impl_->metricNames;
}
const std::vector<std::string>& Trainer::dataInputs() const {
  return impl_->dataInputs;
}
const std::vector<std::string>& Trainer::trainableNames() const {
  return impl_->trainableNames;
}
const std::map<std::string, Tensor>& Trainer::weights() const {
  (void)impl_->syncHost();  // a failed copy leaves the last host values
  return impl_->weights;
}
const std::map<std::string, Tensor>& Trainer::gradients() const {
  return impl_->gradients();
}
const TrainerCounters& Trainer::counters() const {
  return impl_->counters;
}
const OptimizerConfig& Trainer::optimizerConfig() const {
  return impl_->opt.optimizer;
}
void Trainer::setLearningRate(double lr) {
  impl_->baseLr = lr;
}
std::string Trainer::notice() const {
  return impl_->notice;
}

}  // namespace dw::engine::training
