// Dropout in training graphs (domain "com.deepwire.grad"), in plain C++: the training-mode
// forward, whose random stream continues from step to step, and the gradient through its mask.
#include <cstdint>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"
#include "ops/dropout.h"

namespace dw::engine {

namespace {

class DropoutGrad : public Kernel {
 public:
  explicit DropoutGrad(const KernelInit& init) : ratio_(init.attrs.getFloat("ratio", 0.5f)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& mask = ctx.input(1);
    const double ratio = ctx.hasInput(2) ? ctx.input(2).getDouble(0) : ratio_;
    if (mask.size() != dy.size()) return Status::error("DropoutGrad: mask shape mismatch");
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), dy.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T scale = ratio < 1 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
      const bool* m = mask.data<bool>();
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      for (int64_t i = 0; i < dy.size(); ++i) o[i] = m[i] ? g[i] * scale : T(0);
      return Status();
    });
  }

 private:
  float ratio_;
};

// Dropout in a training graph: unlike the standard kernel, whose mask depends only on the seed,
// every step drops different units while a given seed still reproduces the whole run. Where the
// run says which step it is and where its batch lies in the global one (RunInfo: the trainer
// always does), each element's draw is ops/dropout.h's hash of the seed, the step and the
// element's index in the global batch (samples along the first axis), as on cuda. Without it
// the draws continue one stream from call to call.
class DropoutTraining : public Kernel {
 public:
  explicit DropoutTraining(const KernelInit& init)
      : ratio_(init.attrs.getFloat("ratio", 0.5f)),
        seed_(static_cast<uint64_t>(init.attrs.getInt("seed", 0))),
        state_(seed_ * 0x9E3779B97F4A7C15ull + 1) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const double ratio = ctx.hasInput(1) ? ctx.input(1).getDouble(0) : ratio_;
    if (ratio < 0 || ratio >= 1) return Status::error("Dropout ratio must be in [0, 1)");
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    DW_ALLOC(m, ctx.output(1, DType::kBool, x.shape()));
    bool* pm = m->data<bool>();
    const RunInfo* run = ctx.runInfo();
    if (run) {
      const auto d =
          calls_.next(seed_, run->step, run->sampleOffset, x.size(), x.rank() ? x.dim(0) : 0);
      for (int64_t i = 0; i < x.size(); ++i)
        pm[i] = ops::dropoutKeeps(d.key, d.first + static_cast<uint64_t>(i), ratio);
    } else {
      for (int64_t i = 0; i < x.size(); ++i) {
        state_ ^= state_ << 13;
        state_ ^= state_ >> 7;
        state_ ^= state_ << 17;
        pm[i] = static_cast<double>(state_ >> 11) / 9007199254740992.0 >= ratio;
      }
    }
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T scale = static_cast<T>(1.0 / (1.0 - ratio));
      const T* px = x.data<T>();
      T* py = y->data<T>();
      for (int64_t i = 0; i < x.size(); ++i) py[i] = pm[i] ? px[i] * scale : T(0);
      return Status();
    });
  }

 private:
  float ratio_;
  uint64_t seed_;
  uint64_t state_;
  ops::DropoutCalls calls_;
};

}  // namespace

void addDropoutTrainingKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "DropoutGrad", 1, kMaxOpset, &makeKernel<DropoutGrad>, false,
        dw::kGradDomain);
  r.add(kReferenceTable, "DropoutTraining", 1, kMaxOpset, &makeKernel<DropoutTraining>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
