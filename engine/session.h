// InferenceSession: plans an ONNX model once (topological order, function expansion, kernel
// construction, liveness) and runs it many times. Running the same input shapes again reuses the
// pooled buffers of the previous run instead of allocating.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"
#include "nodes/status.h"

namespace onnx {
class ModelProto;
class TypeProto;
}  // namespace onnx

namespace dw::engine {

struct RunInfo;  // engine/kernel.h

struct SessionOptions {
  BackendOptions backend;
  // Bytes a single tensor may take; 0 reads MemAvailable from /proc/meminfo.
  size_t memoryLimitBytes = 0;
  // A Loop that runs more iterations than this stops with an error: a condition that never
  // turns false, or a trip count from a damaged file, would otherwise run for ever.
  int64_t maxLoopIterations = int64_t(1) << 20;
  // Fuse Conv+BatchNormalization and Conv/Gemm/MatMul+activation into single oneDNN primitives.
  bool fuse = true;
  // Under fuse, in fp32: let a training CNN block hand its convolution activations and their
  // gradients between kernels in oneDNN's nChw16c layout (see markBlockedLayouts); false keeps
  // every tensor plain NCHW, for comparisons.
  bool blockedLayouts = true;
  // Under fuse: fold convolutions, activations and pooling into training's BatchNormalization
  // kernels (fuseTrainingChains). Off for synchronized BatchNormalization, whose statistics are
  // summed across processes between the kernel's passes.
  bool trainingChains = true;
  // Time every kernel call (also on when the DEEPWIRE_PROFILE environment variable is set; the
  // session then prints profileReport() to stderr when it is destroyed).
  bool profile = false;
  // Outputs a run leaves in device memory under a device backend (cuda), such as the gradients
  // a trainer hands to its optimizer there; every other output comes back in host memory.
  std::set<std::string> deviceOutputs;
  // Under a backend that can record runs (cuda: CUDA graphs), record the second run of each
  // input shape and replay it from then on, without the host's per-node work (also off when
  // the DEEPWIRE_CUDA_GRAPHS environment variable is 0, and while profiling).
  bool recordRuns = true;
  // Compute constant values (Constant nodes, Shape of static shapes and the small arithmetic on
  // them) once at creation instead of on every run (engine/constant_folding.h).
  bool foldConstants = true;
};

// A graph input or output as declared by the model.
struct IoInfo {
  std::string name;
  std::string kind = "tensor";  // tensor | sequence | optional
  DType dtype = DType::kUndefined;
  bool hasShape = false;
  std::vector<int64_t> dims;          // -1 where dynamic
  std::vector<std::string> dimNames;  // symbolic names where dynamic
  bool hasDefault = false;            // an initializer provides a default value
  std::string describe() const;       // e.g. "x: float32[N, 3, 224, 224]"
};

class GraphPlan;
class BufferPool;

class InferenceSession {
 public:
  static Result<std::unique_ptr<InferenceSession>> create(const onnx::ModelProto& model,
                                                          const SessionOptions& options = {});
  ~InferenceSession();

  Result<std::map<std::string, Tensor>> run(const std::map<std::string, Tensor>& inputs);
  // Like run, for models whose inputs or outputs are sequences or optionals.
  Result<std::map<std::string, Value>> runValues(const std::map<std::string, Value>& inputs);

  const std::vector<IoInfo>& inputs() const { return inputs_; }
  const std::vector<IoInfo>& outputs() const { return outputs_; }
  const Backend& backend() const { return *backend_; }
  Backend& backend() { return *backend_; }
  // Message from accelerator selection (auto fallback), empty otherwise.
  const std::string& notice() const { return notice_; }
  // Buffers allocated so far; stays constant when the same shapes run again, provided the caller
  // lets go of the previous run's outputs (their storage is then reused).
  size_t allocationCount() const;
  // Lists the expected inputs, one per line, for error messages.
  std::string describeInputs() const;
  // Kernel time per op type and per node over the runs since profiling was switched on, and the
  // executor's own time (a run's wall time minus its kernels).
  void setProfiling(bool on);
  // Called after every node of each later run with the outputs (name, tensor) that node
  // produced, usually none: a caller can start on outputs while the run goes on (data-parallel
  // training sums gradients during the backward pass) and make progress on its own work
  // between nodes. Outputs that no node produces (inputs, constants) and runs replayed from a
  // recording (cuda) do not call it. An empty function removes it.
  using ProgressListener =
      std::function<void(const std::vector<std::pair<std::string, const Tensor*>>& produced)>;
  void setProgressListener(ProgressListener listener);
  // The step and the global batch offset of the next runs' first sample, for the kernels that
  // read them (KernelContext::runInfo: training's Dropout).
  void setRunInfo(const RunInfo& info);
  // Where each node of the top-level graph runs: node name -> backend name ("cuda", or "cpu"
  // for the ops a device backend has no kernel for).
  std::map<std::string, std::string> placement() const;
  std::string profileReport(size_t top = 12) const;
  // Runs served by replaying a recording (SessionOptions::recordRuns), and why this session's
  // runs are not recorded (empty when they are).
  size_t replays() const { return replays_; }
  const std::string& notRecorded() const { return notRecorded_; }

 private:
  InferenceSession() = default;
  std::shared_ptr<Backend> backend_;
  std::unique_ptr<GraphPlan> plan_;
  std::unique_ptr<BufferPool> pool_;
  std::vector<IoInfo> inputs_, outputs_;
  std::string notice_;
  std::set<std::string> deviceOutputs_;
  // Storage of outputs handed to callers; given back to the pool once only we hold it.
  std::vector<std::shared_ptr<Buffer>> handedOut_;
  void reclaimOutputs();
  // Recorded runs by input shapes (session.cpp): a replay sets the outputs in `values` and
  // returns true; false means run the plan as usual.
  struct Recording;
  std::map<std::string, std::unique_ptr<Recording>> recordings_;
  std::string notRecorded_;
  size_t replays_ = 0;
  uint64_t useClock_ = 0;
  Result<bool> runRecorded(std::vector<Value>& values);
  std::string whyNotRecorded(const SessionOptions& options) const;
};

IoInfo ioInfoFromType(const std::string& name, const onnx::TypeProto& type);

// Parses an .onnx file (with external data resolved relative to it).
Result<std::unique_ptr<onnx::ModelProto>> loadOnnxModel(const std::string& path);

}  // namespace dw::engine
