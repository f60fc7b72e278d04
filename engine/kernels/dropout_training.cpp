// Dropout in training graphs (domain "com.deepwire.grad"), in plain C++: the training-mode
// forward, whose random stream continues from step to step, and the gradient through its mask.
#include <cstdint>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

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
// always does), each element's draw is a hash of the seed, the step and the element's index in
// the global batch (samples along the first axis), so a data-parallel process draws for its
// slice what one process draws for those samples, and a resumed run what an uninterrupted one
// would. Without it the draws continue one stream from call to call.
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
      // A kernel called more than once in a step (inside a Loop) draws anew each time.
      if (run->step != step_) {
        step_ = run->step;
        calls_ = 0;
      }
      const uint64_t key = mix(mix(seed_ ^ 0xD1B54A32D192ED03ull) ^ static_cast<uint64_t>(step_)) ^
                           mix(static_cast<uint64_t>(calls_++) + 0x8CB92BA72F3D8DD7ull);
      const int64_t perSample = x.rank() > 0 && x.dim(0) > 0 ? x.size() / x.dim(0) : 0;
      const uint64_t first = static_cast<uint64_t>(run->sampleOffset * perSample);
      for (int64_t i = 0; i < x.size(); ++i)
        pm[i] = static_cast<double>(
                    mix(key + (first + static_cast<uint64_t>(i)) * 0x9E3779B97F4A7C15ull) >> 11) /
                    9007199254740992.0 >=
                ratio;
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
  // splitmix64's finalizer: every input bit affects every output bit.
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float ratio_;
  uint64_t seed_;
  uint64_t state_;
  int64_t step_ = -1, calls_ = 0;
};

}  // namespace

void addDropoutTrainingKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "DropoutGrad", 1, kMaxOpset, &makeKernel<DropoutGrad>, false,
        dw::kGradDomain);
  r.add(kReferenceTable, "DropoutTraining", 1, kMaxOpset, &makeKernel<DropoutTraining>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
