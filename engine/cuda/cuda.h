// The cuda accelerator as the rest of the engine sees it. Built with CUDA (DEEPWIRE_CUDA), these
// come from engine/cuda/*.cpp; without it, from engine/cuda_absent.cpp, which says how to get it.
// Nothing here needs the CUDA headers: a build without the toolkit compiles every caller.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/kernel.h"
#include "engine/training/optimizers.h"

namespace dw::engine::cuda {

// Whether this deepwire was built with CUDA.
bool built();
// Usable NVIDIA GPUs; 0 with `why` saying what is missing (no driver, no GPU, no cuBLAS...).
int deviceCount(std::string* why);
// Backend for GPU `index` (accelerator cuda:N).
Result<std::shared_ptr<Backend>> createBackend(int index, const BackendOptions& options);
// Fills the cuda part of `deepwire devices`.
void describe(DeviceReport& report);
// GPU memory the tensors of this process held at most at once, over all cuda backends (as
// PyTorch's max_memory_allocated: blocks cached for reuse are not counted).
size_t peakDeviceBytes();
// Page-locked host memory for copies to a cuda backend's GPU, which go at full speed and
// without the driver's staging copy (training batches): a function giving `bytes` of it, or
// null where it cannot be had (then plain memory does). It may be called from any thread.
std::function<std::shared_ptr<Buffer>(size_t bytes)> pinnedHostBuffers(Backend& backend);
// The "cuda" kernel table.
void registerKernels(KernelRegistry& r);

// The trainer's arithmetic on tensors in a cuda backend's memory: gradient accumulation and
// clipping, and the optimizer rules that run there (the rest run on the host, through copies).
class TrainingOps {
 public:
  virtual ~TrainingOps() = default;
  virtual Result<Tensor> zeros(const Shape& shape) = 0;
  virtual Status addInto(Tensor& acc, const Tensor& x) = 0;
  virtual Status scale(Tensor& x, float factor) = 0;
  // The p-norm of all tensors together (p <= 0 or inf: max-abs); waits for the result.
  virtual Result<double> norm(const std::vector<Tensor*>& xs, double p) = 0;
  // One optimizer step of every listed weight with the same scalars, a few launches for them
  // all. `state` holds the rule's tensors, null where its options keep none: Adam m, v and
  // vmax (amsgrad); SGD the momentum buffer; Adagrad the sum of squares; RMSprop square_avg,
  // grad_avg (centered) and the momentum buffer.
  struct Update {
    Tensor* w;
    Tensor* g;
    Tensor* state[3];
  };
  virtual Status adam(const training::AdamScalars& a, const std::vector<Update>& ts) = 0;
  virtual Status sgd(const ops::SgdScalars& k, const std::vector<Update>& ts) = 0;
  virtual Status adagrad(const ops::AdagradScalars& k, const std::vector<Update>& ts) = 0;
  virtual Status rmsprop(const ops::RmsPropScalars& k, const std::vector<Update>& ts) = 0;
};
// For a backend whose memory() is kCuda; nullptr otherwise.
std::unique_ptr<TrainingOps> trainingOps(Backend& backend);

}  // namespace dw::engine::cuda
