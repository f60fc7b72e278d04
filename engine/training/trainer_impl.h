// Internal to engine/training: the Trainer's state (Trainer::Impl) and the helpers its files
// share. trainer.cpp holds the loop (steps, optimizer, evaluation) and the public facade,
// trainer_checkpoint.cpp saving and loading checkpoints, trainer_export.cpp the inference and
// training exports, training_config.cpp the project's training section.
#pragma once

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
#include "engine/distributed/communicator.h"
#include "engine/io.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "engine/training/trainer.h"
#include "graphs/file_io.h"
#include "graphs/graph.h"
#include "graphs/onnx_export.h"
#include "nodes/catalogue.h"

namespace dw::engine::training {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The optimizer's settings as the project's training section writes them, and read back
// (`path` names the JSON place in errors).
json configJson(const OptimizerConfig& o);
Status parseOptimizer(const json& j, const std::string& path, OptimizerConfig& o);

// ---- Trainer internals -----------------------------------------------------------------------

struct MetricInfo {
  std::string name, type, output;
  std::vector<std::string> stats;
};
struct TrainingMeta {
  std::vector<std::string> losses, targets, predictions;
  std::vector<MetricInfo> metrics;
};

inline std::string metadataValue(const onnx::ModelProto& m, const std::string& key) {
  for (const auto& p : m.metadata_props())
    if (p.key() == key) return p.value();
  return "";
}

inline Result<TrainingMeta> readTrainingMeta(const onnx::ModelProto& m) {
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

inline std::map<std::string, InitInfo> readInitInfo(const onnx::ModelProto& m) {
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

inline bool isAccuracy(const MetricInfo& m) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  return lower(m.type).find("accuracy") != std::string::npos ||
         lower(m.name).find("accuracy") != std::string::npos;
}

inline double scalarOf(const Tensor& t) {
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

struct ParamEntry {
  std::string name;
  bool frozen = false;
  Regularizer reg;
  ParamState state;
};

// The steady clock in seconds: one clock for all processes of a machine (CLOCK_MONOTONIC).
inline double secondsNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
  // A model exported with a fixed batch (torch.onnx.export without dynamic_axes) takes batches of
  // exactly this many samples, and `fixedInput` says which input fixes it; 0 where it is free.
  int64_t fixedBatch = 0;
  std::string fixedInput;
  Status checkFixedBatch(int64_t batchSize) const;
  // Class-index inputs of the classification losses, with their class counts: bad labels are
  // reported as data errors (sample, input, classes), not as a failing node deep in the loss.
  std::vector<LabelRange> labelChecks;
  void findLabelChecks();
  Status checkLabels(const std::map<std::string, Tensor>& columns, const std::string& where,
                     const std::vector<int64_t>* origin = nullptr) const;
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
  // Optimizer state `name` of `p` on the device: the host's values where it has them (a loaded
  // checkpoint), else `init` everywhere.
  Result<Tensor*> deviceState(ParamEntry& p, const char* name, float init = 0);
  Result<std::map<std::string, Tensor>> runOnBatch(InferenceSession& session, const Batch& b);
  // Trainer::batchStorage: page-locked batches where the weights live on a GPU.
  std::function<std::shared_ptr<Buffer>(size_t)> batchStorage() const {
    return dev ? cuda::pinnedHostBuffers(trainSession->backend()) : nullptr;
  }
  Status deviceOptimizerStep();
  TrainerCounters counters;
  // The batch size counters.batchInEpoch counts in: the last fit's, or a loaded checkpoint's
  // (0: not known, as in checkpoints written before it was recorded).
  int64_t batchSize = 0;
  double baseLr = 0;
  double lastLr = 0, lastGradNorm = 0;
  double gradScale = 1.0;  // fit averages accumulated micro-batches
  // Data parallelism (Trainer::setCommunicator): this process's share of the global batch,
  // applied to its gradient as it is accumulated.
  std::shared_ptr<distributed::Communicator> comm;
  double gradWeight = 1.0;
  int64_t sampleOffset = 0;  // this slice's first sample in the global batch
  // The loss nodes (described) whose reduction sums over the batch, and those that average.
  std::vector<std::string> summedLosses, averagedLosses;
  bool distributed() const;
  // Overlap: in a step that ends in an optimizer step (fit sets overlapSum), the gradients go
  // into buckets as the backward pass produces them, and each full bucket is summed across
  // processes while the pass goes on; gradientsSummed tells fit it need not sum them again.
  bool overlapSum = false, gradientsSummed = false;
  struct GradBucket {
    // Kept across steps (the steady state allocates nothing); the summed gradients handed to
    // the optimizer are views of it, which keep it alive.
    std::shared_ptr<Buffer> storage;
    int64_t used = 0;
    std::vector<std::pair<size_t, int64_t>> members;  // (param index, offset)
    float* data() const { return static_cast<float*>(storage->data); }
  };
  std::vector<GradBucket> buckets;
  size_t openBucket = 0;
  std::unordered_map<std::string, size_t> gradIndex;  // gradient output -> param index
  Status bucketGradient(size_t param, const Tensor& g);
  Status closeBucket();
  Status finishBuckets();
  // The gradient sums' wait, split from the others' lateness: per optimizer step of the epoch,
  // when this process's backward pass ended (finishBuckets or sumGradients began) and when its
  // sums were complete (steady clock, which the processes of one machine share). splitWait
  // turns them into EpochReport's sumSeconds and skewSeconds.
  std::vector<double> sumMarks;
  void markSums(double backwardEnd);
  Status splitWait(EpochReport& er);
  Status broadcastFromRoot();    // weights, optimizer state, counters and epoch sums
  Status sumGradients();         // across processes, before an optimizer step
  Status broadcastStatistics();  // running statistics, after one
  // The global batch's losses and metrics from this slice's; true when any process was asked
  // to stop (`stop` is this one's request).
  Result<bool> reduceStep(StepResult& r, int64_t globalSamples, bool stop);
  // An evaluation pass's loss sums, sample count and metric statistics, summed over processes.
  Status reduceEvaluation(StepResult& total, MetricAccumulator& acc);
  // Epoch-level sums, checkpointed so a resumed epoch reports the same mean.
  double epochLossSum = 0;
  int64_t epochSamples = 0;
  double epochSeconds = 0;
  // Every finished epoch of fit, checkpointed: a resumed run, or the studio loading a
  // checkpoint of the command line's, has the curves so far.
  std::vector<EpochReport> history;
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
  Status load(const std::string& dir, bool weightsOnly = false);
  Result<onnx::ModelProto> exportInference() const;
  Result<onnx::ModelProto> exportTraining() const;
};

}  // namespace dw::engine::training
