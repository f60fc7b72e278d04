// Trainer: trains a project graph. It exports the graph with its losses (Output Train nodes),
// builds the gradient graph (autodiff.h), runs it with an InferenceSession each step, and applies
// the optimizer to the weights in C++ (optimizers.h).
//
// Semantics (the seed toolkit's):
//   trainStep      forward + backward; returns losses by name; gradients ACCUMULATE.
//   optimizerStep  applies the optimizer (clipping, schedule, regularizers) to Trainable weights.
//   resetGrad      zeroes the accumulated gradients.
//   fullTrainStep  trainStep, then (update = true) optimizerStep + resetGrad; update = false only
//                  accumulates.
//   evalStep       inference with running statistics, plus loss values and metrics; no gradients.
//                  Metrics accumulate across Eval Steps (Keras' stateful metrics): each step adds
//                  its batch's metric statistics to the trainer's sums, and reports the value of
//                  the sums (the epoch-so-far value) until resetMetrics (or an Eval Step with
//                  reset_metrics? on) zeroes them.
// Initializer status: Trainable weights update; Frozen ones get gradients but never change (and
// have no optimizer state); Constant ones get no gradient at all.
// Every run is deterministic for a given seed and thread count; a checkpoint holds weights,
// optimizer state, step counters and RNG state, and resuming continues bit-exactly.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "engine/training/data.h"
#include "engine/training/data_source.h"
#include "engine/training/optimizers.h"
#include "nodes/status.h"

namespace onnx {
class ModelProto;
}
namespace dw {
class Graph;
struct Node;
}  // namespace dw

namespace dw::engine {
class InferenceSession;
}

namespace dw::engine::distributed {
class Communicator;
}

namespace dw::engine::training {

// The project's "training" section (ModelInfo::sections["training"]), parsed. JSON shape:
// {"dataset": {"train": [{"input": "input", "path": "...", "format": "idx",
//                          "normalization": {"scale": 0.00392156862745098, "mean": 0.2860,
//                                            "std": 0.3530}, "shape": [1, 28, 28],
//                          "stored_dtype": "uint8", "stored_shape": [28, 28]},
//                         {"input": "label", "path": "...", "dtype": "int64"}],
//              "validation": [...], "test": [...],  (own sources of those splits, or:)
//              "validation_split": 0.1, "test_split": 0.0, "train_limit": 0},
//  "optimizer": {"type": "adam", "lr": 0.001, ...,
//                "schedule": {"type": "cosine", ...}, "clip_norm": 0},
//  "batch_size": 64, "epochs": 10, "seed": 0, "shuffle": true, "accumulation_steps": 1}
// A source's other keys: "one_hot" (class count), "csv_label_column", "csv_header",
// "csv_take_label", "csv_feature_columns", "image_height", "image_width", "image_channels",
// "image_take_label" (see DataFileSpec).
struct TrainingConfig {
  DatasetSpec dataset;
  OptimizerConfig optimizer;
  int64_t batchSize = 32;
  int64_t epochs = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t accumulationSteps = 1;
  // From the model's Accelerator node (its device, threads and precision parameters), when the
  // canvas has one; not part of the JSON section.
  std::string accelerator = "cpu";
  int threads = 0;
  std::string precision = "fp32";
};
// A graph without a "training" section gets the defaults above and an empty dataset.
Result<TrainingConfig> trainingConfigFromGraph(const Graph& graph);
// The canvas's control node of `type` (Accelerator, Eval Step): the first of the default
// model's, else the first of another model's; nullptr when there is none.
const Node* controlNode(const Graph& graph, const std::string& type);
// Sets config's accelerator, threads and precision from the Accelerator node, when the canvas
// has one.
void applyAcceleratorNode(const Graph& graph, TrainingConfig& config);
// The reset_metrics? parameter of the canvas's Eval Step node (the default model's wins, as for
// the Accelerator node); false when the canvas has none. Whoever runs Eval Steps for a project
// (the studio's Eval Step button) passes it to Trainer::evalStep.
bool evalStepResetsMetrics(const Graph& graph);
Result<TrainingConfig> parseTrainingConfig(const std::string& jsonText);
// The training section's relative data paths, read from `fromDir` (the project's folder), made
// relative to `toDir`, where the project is saved now: a project saved into another folder kept
// paths that no longer led to its data.
void rebaseDataPaths(Graph& graph, const std::string& fromDir, const std::string& toDir);
std::string trainingConfigToJson(const TrainingConfig& config);

struct TrainOptions {
  OptimizerConfig optimizer;
  std::string accelerator = "cpu";  // cpu | gpu | auto
  int threads = 0;                  // 0 = all cores
  std::string precision = "fp32";   // fp32 | bf16 | tf32 (BackendOptions::precision)
  bool recordRuns = true;           // SessionOptions::recordRuns (cuda: CUDA graphs)
  uint64_t seed = 0;
  std::string model;  // which model of the canvas ("" = default)
  // Data parallelism (setCommunicator): gradients are summed in buckets of about this many
  // bytes while the backward pass goes on; the first bucket is at most 1 MiB, so that its sum
  // starts early.
  int64_t bucketBytes = 25 << 20;
  // BatchNormalization's batch statistics over every process's samples together (each process
  // normalizes its own slice otherwise, as PyTorch's DDP does by default).
  bool syncBatchNorm = false;
  bool overlap = true;  // false: sum them after the backward pass (to measure what overlap hides)
  // Loss outputs to minimise (summed); empty = every loss the export declares.
  std::vector<std::string> losses;
};

struct StepResult {
  std::map<std::string, double> losses;  // loss output name -> value (regularization excluded)
  double regularization = 0;             // L1/L2 penalty added to the total loss
  // Metric name -> value. Eval Step: accumulated over every Eval Step since the last reset (the
  // finalize of the summed statistics). Train steps: this batch. evaluate(): the whole pass.
  std::map<std::string, double> metrics;
  // Metric name -> value of this batch alone (steps; empty for evaluate()).
  std::map<std::string, double> batchMetrics;
  double gradNorm = 0;  // after optimizerStep: norm before clipping
  double lr = 0;        // learning rate the last optimizer step used
  int64_t samples = 0;
  double totalLoss() const;  // sum of losses + regularization
};

struct EpochReport {
  int64_t epoch = 0;     // 0-based
  double trainLoss = 0;  // mean over the epoch's samples
  std::map<std::string, double> trainMetrics;
  bool hasTest = false;  // a test set or validation split was evaluated
  double testLoss = 0;
  std::map<std::string, double> testMetrics;  // e.g. "accuracy"
  double testAccuracy = -1;  // the first accuracy-type metric, -1 when there is none
  double seconds = 0;        // wall time of the epoch's training (not the test pass)
  double samplesPerSecond = 0;
  int64_t steps = 0;       // optimizer steps so far (global)
  int64_t trainSteps = 0;  // train steps so far (batches; more than steps when accumulating)
  // Distributed: seconds this process spent in the epoch's training steps waiting for the
  // others (gradient sums and step reductions not hidden behind computation).
  double waitSeconds = 0;
  // Of the gradient sums' part of that wait (processes of one machine; -1 elsewhere, where the
  // clocks differ): skewSeconds while another process had not finished its backward pass yet,
  // sumSeconds after the last one had, which is what the sums themselves cost. Overlap can
  // only hide sumSeconds; skew is the slowest process's lead.
  double sumSeconds = -1, skewSeconds = -1;
  // Set when the epoch's mean loss is over kDivergingGrowth times the fit's first batch loss.
  std::string warning;
};
inline constexpr double kDivergingGrowth = 100;

// EpochReport's sumSeconds and skewSeconds for process `me` of `processes`, from every
// process's marks of the epoch (`all`: process r's marks at r * all.size() / processes, as
// pairs per step: when its backward pass ended, when its gradient sums were complete).
struct SumWait {
  double sums = 0, skew = 0;
};
SumWait splitSumWait(const std::vector<double>& all, int64_t processes, int64_t me);
struct FitReport {
  std::vector<EpochReport> epochs;
  bool cancelled = false;
};

struct FitOptions {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;  // optional
  double validationSplit = 0;           // used when `test` is null: last fraction of train
  int64_t epochs = 1;
  int64_t batchSize = 32;
  bool shuffle = true;
  bool dropLast = false;
  int64_t accumulationSteps = 1;  // trainSteps per optimizer step
  int64_t maxStepsPerEpoch = 0;   // > 0: stop each epoch after this many batches (smoke tests)
  // Where to save a checkpoint at the end of every epoch ("" = none).
  std::string checkpointDir;
};

struct StepInfo {
  int64_t epoch = 0;
  int64_t batch = 0;  // within the epoch
  int64_t batchesPerEpoch = 0;
  int64_t samplesDone = 0;  // in this epoch
  double seconds = 0;       // since the epoch started
  StepResult result;
};
struct FitCallbacks {
  std::function<void(const StepInfo&)> onStep;
  std::function<void(const EpochReport&)> onEpoch;
};

// Where training stands: saved in checkpoints; resuming restores it.
struct TrainerCounters {
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batchInEpoch = 0;    // batches of `epoch` already trained
  int64_t optimizerSteps = 0;  // global
  int64_t trainSteps = 0;      // global (micro-batches)
  int64_t accumulated = 0;     // trainSteps since the last optimizer step / resetGrad
};
// Checkpoint directory `from` into `to` (created; a checkpoint already there is replaced whole,
// or left whole if the copy is cut short).
Status copyCheckpoint(const std::string& from, const std::string& to);
// The counters of checkpoint directory `dir` (how far it had come), without loading it.
Result<TrainerCounters> readCheckpointCounters(const std::string& dir);

class Trainer {
 public:
  // From a project graph: exports with losses, builds the gradient graph, creates sessions.
  static Result<std::unique_ptr<Trainer>> create(const Graph& graph, const TrainOptions& options);
  ~Trainer();

  Result<StepResult> trainStep(const Batch& batch);
  // The first label of `data` outside its loss's classes, as an error naming the sample of
  // `where` (what a step finds only in its own batch).
  Status checkLabels(const Dataset& data, const std::string& where) const;
  Status optimizerStep();
  void resetGrad();
  Result<StepResult> fullTrainStep(const Batch& batch, bool update = true);
  // resetMetrics = true zeroes the metric sums before adding this batch (the Eval Step node's
  // reset_metrics?). Losses are this batch's; metrics are accumulated (see StepResult).
  Result<StepResult> evalStep(const Batch& batch, bool resetMetrics = false);
  // Zeroes the Eval Step metric sums: the next evalStep reports its own batch only.
  void resetMetrics();
  // The Eval Step metrics accumulated since the last reset (empty right after one).
  Result<std::map<std::string, double>> accumulatedMetrics() const;
  // Evaluates a whole dataset: mean loss and the metrics of exactly this pass. It sums into sums
  // of its own, which start at zero, so the Eval Step accumulation is neither read nor changed
  // (fit's per-epoch evaluation too).
  Result<StepResult> evaluate(const Dataset& data, int64_t batchSize);

  // Trains from the current counters (so fit after loadCheckpoint resumes). `cancel` is checked
  // before every step; a cancelled fit returns what finished, with cancelled = true.
  Result<FitReport> fit(const FitOptions& options, const FitCallbacks& callbacks = {},
                        const std::atomic<bool>* cancel = nullptr);

  // Data-parallel training (fit): every process holds the model and trains on its share of each
  // batch; the gradients are summed across processes before every update. Rank 0's weights,
  // optimizer state and counters are broadcast when fit starts (a resume included), each
  // global batch is split into contiguous slices by rank, every gradient is weighted by its
  // slice's share of the batch before the sum (so an uneven split stays the global mean), the
  // gradient norm and clipping see the summed gradient, running statistics follow rank 0's
  // after each update, the reported losses and metrics are the global batch's, and only rank 0
  // writes checkpoints. Without one (or with one process) fit trains alone.
  void setCommunicator(std::shared_ptr<distributed::Communicator> comm);

  // Checkpoints include the Eval Step metric sums, so accumulation continues after loading.
  Status saveCheckpoint(const std::string& dir) const;
  // Whether checkpoints can go to `dir`, made if missing: writable, and empty or a checkpoint
  // already (a save replaces its own files there). For a run to ask before it trains.
  static Status checkCheckpointDir(const std::string& dir);
  // weightsOnly: the weights alone (to evaluate them), whatever optimizer the checkpoint had.
  Status loadCheckpoint(const std::string& dir, bool weightsOnly = false);

  Result<onnx::ModelProto> exportInference() const;  // "without training info"
  Result<onnx::ModelProto> exportTraining() const;   // "with training info"
  // Trained values back into the graph: Initializer nodes (fill "values") and layer nodes (their
  // stored weights and running statistics, Node::weights), so a saved project keeps them.
  Status writeWeightsTo(Graph& graph) const;

  // ---- Introspection (the studio's panels) ----
  const std::vector<std::string>& lossNames() const;
  const std::vector<std::string>& metricNames() const;
  const std::vector<std::string>& dataInputs() const;      // graph inputs a Batch must feed
  const std::vector<std::string>& trainableNames() const;  // Trainable + Frozen
  const std::map<std::string, Tensor>& weights() const;    // trainables, BN stats, by name
  const std::map<std::string, Tensor>& gradients() const;  // accumulated, by weight name
  const TrainerCounters& counters() const;
  // The epochs fit finished, from the first (loadCheckpoint brings a checkpoint's).
  const std::vector<EpochReport>& history() const;
  const OptimizerConfig& optimizerConfig() const;
  void setLearningRate(double lr);  // base rate (the schedule still applies)
  double baseLearningRate() const;  // as set, or as a loaded checkpoint trained
  std::string notice() const;       // accelerator fallback message, if any
  int threads() const;              // CPU threads the training kernels run with
  // Tensor buffers the training and evaluation sessions have allocated so far: constant once
  // the same batch shape repeats (the steady state allocates nothing).
  size_t bufferAllocations() const;
  // Training steps served by replaying a recorded run, and why they are not (empty if they are).
  size_t replayedSteps() const;
  std::string notRecorded() const;
  // Storage for the batches a loader gathers for this trainer (LoaderOptions::hostBuffers):
  // page-locked host memory where it trains on a GPU, so that each batch goes up at full speed
  // without the driver's staging copy; null elsewhere.
  std::function<std::shared_ptr<Buffer>(size_t)> batchStorage() const;
  // Per-op and per-node kernel time of the training graph since profiling was switched on.
  void setProfiling(bool on);
  std::string profileReport() const;

  class Impl;

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dw::engine::training
