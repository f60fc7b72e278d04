// Kernels: the code that computes one ONNX node.
//
// How to add an op
// ----------------
// 1. Write a class deriving from Kernel in the engine/kernels/ (plain C++) or engine/onednn/
//    (oneDNN-backed) file for its family. Its constructor receives a KernelInit: read attributes
//    there (they already carry the ONNX schema defaults for the model's opset) and call
//    fail("...") for values the kernel does not support; session creation then reports it.
//    Where the schema has a default in every opset the kernel is registered for, read without
//    one (attrs.getInt("axis")): a literal would repeat the schema and could disagree with it.
//    Keep a literal where some of those opsets lack the attribute or its default, and for the
//    grad domain's ops, whose schemas carry no defaults (nodes/grad_domain.cpp).
// 2. Implement compute(ctx): read inputs with ctx.input(i), allocate outputs with
//    ctx.output(i, dtype, shape) (returns nullptr once the memory limit is hit: return
//    ctx.status()), or hand over an existing tensor with ctx.setOutput(i, value).
//    Cache expensive per-shape state (oneDNN primitives) in the kernel, keyed by input shapes.
//    A oneDNN kernel takes engine and stream from onednn::dnnlBackend(ctx.backend()) and hands
//    tensors to primitives through a kernel-owned onednn::Bindings, so it also runs under
//    accelerator gpu (tests/engine/device_path_test.cpp runs that path on the CPU).
// 3. List it, with its opset range and table (kReferenceTable or kOneDnnTable), in the family's
//    add...Kernels(KernelRegistry&) function right below the code, and make sure that function
//    is called from its table's function (registerReferenceKernels in
//    engine/kernels/reference_table.cpp, registerOneDnnKernels in engine/onednn/onednn_table.cpp).
//    There is deliberately no static-initializer self-registration: the linker drops unreferenced
//    objects of a static lib.
// 4. Set KernelDef::halfViaFloat when the kernel only handles float but fp16/bf16 inputs may be
//    computed in float: the session converts around the call.
// 5. Add the op's backend test cases to the conformance floor by raising
//    tests/engine/conformance_floor.txt.
// Ops without a kernel whose schema has a function body are expanded by the session instead.
#pragma once

#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "nodes/status.h"

namespace onnx {
class NodeProto;
class AttributeProto;
class TensorProto;
class GraphProto;
}  // namespace onnx

namespace dw::engine {

class Backend;
class KernelContext;
class BufferPool;

// Node attributes merged with the schema's defaults.
class Attributes {
 public:
  Attributes() = default;
  Attributes(const Attributes&);
  Attributes& operator=(const Attributes&);
  ~Attributes();
  void set(const onnx::AttributeProto& a);
  bool has(const std::string& name) const;
  int64_t getInt(const std::string& name, int64_t def = 0) const;
  float getFloat(const std::string& name, float def = 0) const;
  std::string getString(const std::string& name, const std::string& def = "") const;
  std::vector<int64_t> getInts(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<float> getFloats(const std::string& name, std::vector<float> def = {}) const;
  std::vector<std::string> getStrings(const std::string& name) const;
  const onnx::TensorProto* getTensor(const std::string& name) const;
  const onnx::AttributeProto* get(const std::string& name) const;

 private:
  std::map<std::string, std::unique_ptr<onnx::AttributeProto>> attrs_;
};

// A compiled subgraph (If branches, Loop/Scan bodies). Values the body reads from enclosing
// scopes are resolved through the calling context.
class Subgraph {
 public:
  virtual ~Subgraph() = default;
  virtual size_t numInputs() const = 0;
  virtual size_t numOutputs() const = 0;
  virtual Result<std::vector<Value>> run(KernelContext& caller, std::vector<Value> inputs) = 0;
};

struct KernelInit {
  const onnx::NodeProto* node = nullptr;
  std::string domain;
  std::string opType;
  int opset = 0;
  Attributes attrs;
  Backend* backend = nullptr;
  int numInputs = 0;
  int numOutputs = 0;
  std::map<std::string, std::shared_ptr<Subgraph>> subgraphs;
  // Per input: an initializer that no feed can override, so it holds the same data on every
  // run and kernels may cache what they derive from it (weights converted to bf16, reordered).
  std::vector<bool> constantInputs;
  int64_t maxLoopIterations = int64_t(1) << 20;  // SessionOptions::maxLoopIterations
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status compute(KernelContext& ctx) = 0;
  // A session replays a recorded run (Backend::beginRecording) without calling compute: what a
  // kernel checks on the host at the start of each compute, it checks here instead.
  virtual Status beforeReplay() { return Status(); }
  const Status& initStatus() const { return initStatus_; }

 protected:
  void fail(std::string message) {
    if (initStatus_.ok()) initStatus_ = Status::error(std::move(message));
  }

 private:
  Status initStatus_;
};

// Values visible to a subgraph from the enclosing graphs.
// What a run is part of, for kernels whose results depend on it: training's random ops draw
// from streams keyed by the step and by each sample's place in the global batch, so that a
// data-parallel process holding a slice of the batch draws what one process would for those
// samples, and a resumed run what an uninterrupted one would.
struct RunInfo {
  bool set = false;
  int64_t step = 0;          // the trainer's step count
  int64_t sampleOffset = 0;  // where this batch's first sample lies in the global batch
  // Synchronized BatchNormalization (data parallelism): sums per-channel statistics in place
  // over every process sharing the global batch; null where each normalizes its own slice.
  std::function<Status(double* values, int64_t count)> sumAcrossProcesses;
  double share = 1;  // this process's share of the global batch (its gradients' weight)
};

class Scope {
 public:
  virtual ~Scope() = default;
  virtual const Value* lookup(const std::string& name) const = 0;
  virtual const RunInfo* runInfo() const { return nullptr; }
};

class KernelContext {
 public:
  KernelContext(Backend& backend, BufferPool& pool, const Scope* scope)
      : backend_(backend), pool_(pool), scope_(scope) {}
  // Outputs and scratch come from `memory`'s device memory (the cuda backend's own kernels).
  KernelContext(Backend& backend, BufferPool& pool, const Scope* scope, Backend* memory)
      : backend_(backend), pool_(pool), scope_(scope), memory_(memory) {}

  // The run's step and sample offset where the session was given them (setRunInfo), else null.
  const RunInfo* runInfo() const { return scope_ ? scope_->runInfo() : nullptr; }
  size_t numInputs() const { return inputs_.size(); }
  bool hasInput(size_t i) const {
    return i < inputs_.size() && inputs_[i] && !inputs_[i]->isNone();
  }
  const Value& inputValue(size_t i) const { return *inputs_[i]; }
  const Tensor& input(size_t i) const { return inputs_[i]->tensor; }
  size_t numOutputs() const { return outputs_.size(); }
  bool wantsOutput(size_t i) const { return i < outputs_.size() && outputs_[i] != nullptr; }

  // Allocates output i from the session's buffer pool; nullptr (with status() set) when the
  // request exceeds available memory. An output the graph does not use gets storage released
  // when the kernel returns, like scratch(): kernels need not check wantsOutput() first.
  Tensor* output(size_t i, DType dtype, Shape shape);
  // Output i in the memory of input `in` where this node is the value's last reader and
  // nothing else holds or reads that memory (a residual a convolution adds to in place), with
  // the input's contents; otherwise a fresh output as from output(), which the kernel fills.
  // Whether it got the input's memory: raw() equal to input(in).raw().
  Tensor* outputReusing(size_t i, size_t in, DType dtype, Shape shape);
  void setOutput(size_t i, Value v);
  // Scratch tensor from the pool, released when the kernel returns.
  Tensor* scratch(DType dtype, Shape shape);

  Status status() const { return status_; }
  Backend& backend() { return backend_; }
  BufferPool& pool() { return pool_; }
  const Scope* scope() const { return scope_; }

  // Wiring used by the executor.
  std::vector<const Value*> inputs_;
  std::vector<Value*> outputs_;
  // Per input: this node is the value's last reader (the plan's; null: unknown, never reused).
  const std::vector<bool>* lastRead_ = nullptr;
  // Deques: kernels hold pointers from output()/scratch() while asking for more.
  std::deque<Value> dropped_;  // storage for outputs the graph doesn't use
  std::deque<Tensor> scratch_;

 private:
  Backend& backend_;
  BufferPool& pool_;
  const Scope* scope_;
  Backend* memory_ = nullptr;  // null: host memory
  Status status_;
};

using KernelFactory = Result<std::unique_ptr<Kernel>> (*)(const KernelInit&);

template <class K>
Result<std::unique_ptr<Kernel>> makeKernel(const KernelInit& init) {
  auto k = std::make_unique<K>(init);
  if (!k->initStatus().ok()) return k->initStatus();
  return std::unique_ptr<Kernel>(std::move(k));
}

constexpr int kMaxOpset = std::numeric_limits<int>::max();

// The kernel tables, named for what their kernels are. A backend runs its own table
// (Backend::kernelTable()); the planner places what that table lacks on the reference table.
// These are not accelerator names: the cpu and gpu accelerators both run the onednn table.
inline constexpr const char* kReferenceTable = "reference";  // plain C++ on host memory
inline constexpr const char* kOneDnnTable = "onednn";        // oneDNN primitives and our loops
inline constexpr const char* kCudaTable = "cuda";            // NVIDIA GPUs (engine/cuda/)

// Whether a kernel runs a node with these input dtypes (kUndefined where the planner does not
// know one). A table whose kernels cover only some dtypes (cuda: float) declares it, and the
// planner places the other nodes on the backend's host fallback.
using KernelSupports = bool (*)(const KernelInit& init, const std::vector<DType>& inputTypes);

struct KernelDef {
  std::string domain;  // "" is ai.onnx
  std::string op;
  int since = 1;
  int until = kMaxOpset;
  std::string table;  // kReferenceTable, kOneDnnTable or kCudaTable
  KernelFactory factory = nullptr;
  bool halfViaFloat = false;
  KernelSupports supports = nullptr;  // nullptr: every node the factory accepts
  // Device tables: inputs (bit i = input i) the kernel reads on the host, such as shapes and
  // axes; the executor copies them there.
  uint32_t hostInputs = 0;
  // Inputs whose shape alone the kernel reads (Shape, Size, SumToShape's target): passed in
  // whatever memory they are, never copied.
  uint32_t shapeOnlyInputs = 0;
};

class KernelRegistry {
 public:
  void add(KernelDef def);
  // Convenience for families: one op over an opset range in `table`.
  void add(const std::string& table, const std::string& op, int since, int until, KernelFactory f,
           bool halfViaFloat = true, const std::string& domain = "");
  const KernelDef* find(const std::string& domain, const std::string& op, int opset,
                        const std::string& table) const;
  // Marks inputs (bit i: input i) of every `op` kernel of `table` as KernelDef::shapeOnlyInputs.
  void setShapeOnlyInputs(const std::string& table, const std::string& op, uint32_t mask,
                          const std::string& domain = "");
  std::vector<const KernelDef*> all() const;

  // All tables, built on first use.
  static const KernelRegistry& global();

 private:
  std::multimap<std::string, KernelDef> defs_;  // key: domain + ":" + op
};

// Pooled buffers: tensors whose last reader has run give their storage back here, so running
// the same shapes again allocates nothing.
class BufferPool {
 public:
  explicit BufferPool(size_t limitBytes) : limit_(limitBytes) {}
  // Host memory, or with `device` that backend's device memory.
  Result<std::shared_ptr<Buffer>> get(size_t bytes, Backend* device = nullptr);
  void give(std::shared_ptr<Buffer> b);
  // While a run is recorded, host memory a kernel wrote may still be read when the recording
  // replays (a copy to the device reads it then): host buffers given back are kept, not reused.
  void keepHostBuffers() { keepHost_ = true; }
  // Hands the cached device buffers back to their allocator (before a recorded run, whose
  // allocations then reuse them).
  void dropDeviceBuffers() { deviceFree_.clear(); }
  size_t limit() const { return limit_; }
  size_t allocations() const { return allocations_; }

 private:
  std::multimap<size_t, std::shared_ptr<Buffer>> free_, deviceFree_;
  std::vector<std::shared_ptr<Buffer>> keptHost_;
  bool keepHost_ = false;
  size_t limit_;
  size_t allocations_ = 0;
};

// MemAvailable from /proc/meminfo in bytes (or a large value where unknown).
size_t availableMemoryBytes();

}  // namespace dw::engine
