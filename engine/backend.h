// Backends own a device's execution resources. Kernels are registered per kernel table, so a
// new backend (e.g. "cuda") adds its own table without touching other backends' kernels; the
// session falls back to the plain C++ kernels of the reference table for ops the backend's table
// lacks. Tensors live in host memory on every backend.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "nodes/status.h"

namespace dw::engine {

// Device work recorded from a run (Backend::endRecording), replayed on the device's stream.
// It holds what the work needs to stay allocated beyond the session's own buffers.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  virtual Status replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // the accelerator: "cpu", "gpu", "cuda"
  // The registry table its kernels come from (kernel.h): cpu and gpu both run the onednn
  // table, gpu on its own engine.
  virtual std::string kernelTable() const = 0;
  virtual std::string description() const = 0;  // for logs: device and ISA
  virtual int threads() const = 0;
  // Makes kernels started from the calling thread use threads(). The count is per calling thread
  // (OpenMP keeps it so), and another backend created or run on the same thread, such as a
  // trainer's one-thread metric sessions, sets its own: every session run and every optimizer
  // update therefore applies it first.
  virtual void applyThreads() const {}
  // "fp32"; "bf16": mixed precision like PyTorch's autocast. Convolution, deconvolution and
  // matmul/Gemm (forward and their backward primitives) read bf16 copies of their inputs and
  // accumulate in float32; every tensor the graph sees stays float32. "tf32" (cuda): the same
  // products on tensor cores with inputs rounded to TF32.
  virtual std::string precision() const { return "fp32"; }
  // Device buffers kernels have allocated so far (0 where tensors are used in place): constant
  // once the same shapes run again.
  virtual size_t deviceAllocations() const { return 0; }

  // ---- Backends whose kernels work on device memory (cuda) ----
  // Where the tensors its own kernel table reads and writes live. kHost for cpu and gpu (the
  // oneDNN GPU backend copies inside its kernels).
  virtual Device memory() const { return Device::kHost; }
  // The backend that runs the ops this one's table lacks, on host memory: the planner places a
  // node there and the executor copies its inputs and outputs across. nullptr: none (host-side
  // backends fall back to the reference table themselves).
  virtual Backend* hostBackend() { return nullptr; }
  // Device memory of at least `bytes` (served from a cache once warm). Host backends: an error.
  virtual Result<std::shared_ptr<Buffer>> allocate(size_t bytes);
  // Copies between host and this backend's memory. `to` gets storage from `buffer` when it is
  // large enough (a pooled buffer), a fresh allocation otherwise. toHost waits for the copy.
  virtual Result<Tensor> toDevice(const Tensor& host, std::shared_ptr<Buffer> buffer = nullptr);
  virtual Result<Tensor> toHost(const Tensor& device, std::shared_ptr<Buffer> buffer = nullptr);
  // toHost without the wait: the copy is queued, and the host tensor is valid once
  // synchronize() returns (several outputs then cost one wait).
  virtual Result<Tensor> toHostQueued(const Tensor& device, std::shared_ptr<Buffer> buffer) {
    return toHost(device, std::move(buffer));
  }
  // Waits until the device finished everything queued so far; reports asynchronous errors.
  virtual Status synchronize() { return Status(); }
  // Which graph fusions the planner applies for this backend's kernels (engine/fusion/): all
  // of oneDNN's, with its layouts, or only a convolution's epilogue (a folded inference
  // BatchNormalization, the bias and an activation, applied in one pass) and, in training,
  // the CNN block's Relu and max pooling inside its batch normalization and gradient.
  enum class Fusions { kOneDnn, kConvEpilogue };
  virtual Fusions fusions() const { return Fusions::kOneDnn; }
  // Whether inference chains of 1x1 and depthwise convolutions run as one kernel on host
  // memory (fusion::markNhwcChains, onednn/conv_chain.cpp).
  virtual bool convChains() const { return false; }

  // Recording a run's device work once to replay it with one call (cuda: stream capture into a
  // CUDA graph), which saves the host's per-node work. Between beginRecording and
  // endRecording kernels only queue work and nothing runs; anything that must wait for the
  // device then fails, and endRecording reports that the recording is unusable.
  virtual bool canRecord() const { return false; }
  virtual Status beginRecording() { return Status::error(name() + " cannot record runs"); }
  virtual Result<std::unique_ptr<RecordedWork>> endRecording() {
    return Status::error(name() + " cannot record runs");
  }
  // Held for the whole of a session's run: a backend whose sessions share a device queue
  // (cuda: one stream per GPU) serializes runs, so that a run being recorded there captures
  // no other session's work. Empty where runs are independent.
  virtual std::unique_lock<std::recursive_mutex> lockRun() { return {}; }
  // Queues a copy of `src` (host or device memory) into the device tensor `dst` of equal size.
  virtual Status copyInto(const Tensor& src, Tensor& dst) {
    return Status::error(name() + " has no device memory to copy into");
  }
};

struct BackendOptions {
  // cpu | gpu | gpu:N (oneDNN GPU engine N; gpu is gpu:0) | cuda | cuda:N (NVIDIA GPU N, where
  // deepwire was built with CUDA) | auto (cuda when an NVIDIA GPU is usable, else gpu when
  // oneDNN finds one, else cpu).
  std::string accelerator = "cpu";
  int threads = 0;  // 0: all cores (under gpu: the kernels that stay on the cpu)
  // fp32 | bf16 | tf32 (precisionNames()). bf16 needs native bf16 arithmetic (AVX512-BF16 or
  // AMX, or an NVIDIA GPU of compute capability 8.0+), tf32 a cuda GPU of 8.0+: elsewhere it is
  // an error, and falls back to fp32 with a notice under auto. gpu is fp32 only.
  std::string precision = "fp32";
  // Tests only, never offered to users: accelerator gpu runs its device code path on a CPU
  // engine (every tensor a primitive touches is copied into and out of engine-allocated
  // buffers, as on a GPU), so machines without an Intel GPU can test it.
  bool emulateDevice = false;
};

// `notice` receives a message when "auto" falls back to another device.
Result<std::shared_ptr<Backend>> createBackend(const BackendOptions& options,
                                               std::string* notice = nullptr);

struct DeviceReport {
  std::string cpuModel;
  std::string cpuIsa;  // as oneDNN dispatches it
  int cpuCores = 0;
  int gpuEngines = 0;                  // oneDNN GPU engines (Intel GPUs through OpenCL)
  std::vector<std::string> gpuNames;   // OpenCL GPU devices: "vendor: name"
  std::vector<std::string> available;  // accelerator names usable here
  // How precision bf16 runs here: "amx" (AMX tiles), "avx512_bf16" (AVX512-BF16 dot products)
  // or "" (no native bf16: only fp32 is available).
  std::string bf16Native;
  std::string onednnVersion;
  // NVIDIA GPUs (builds with CUDA): one line each, "cuda:0: NVIDIA H100 80GB HBM3, 79.1 GiB,
  // compute capability 9.0", and the libraries' versions; or why none is usable.
  std::vector<std::string> cudaDevices;
  std::string cudaLibraries;    // "CUDA runtime 13.0, driver 13.0, cuBLAS 13.1, cuDNN 9.19.0"
  std::string cudaUnavailable;  // empty when cudaDevices lists GPUs
};
DeviceReport devices();

}  // namespace dw::engine
