// LayerNormalizationGrad (domain "com.deepwire.grad") in plain C++: float and double, so
// gradient checks can run in double.
#include <algorithm>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// LayerNormalization backward from the saved mean and inverse standard deviation.
class LayerNormalizationGrad : public Kernel {
 public:
  explicit LayerNormalizationGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", -1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& scale = ctx.input(2);
    const Tensor& mean = ctx.input(3);
    const Tensor& invStd = ctx.input(4);
    if (!validAxis(axis_, x.rank())) return Status::error("LayerNormalizationGrad: bad axis");
    const int64_t ax = normAxis(axis_, x.rank());
    int64_t outer = 1;
    for (int64_t d = 0; d < ax; ++d) outer *= x.dim(d);
    const int64_t len = x.size() / std::max<int64_t>(outer, 1);
    if (mean.size() != outer || invStd.size() != outer)
      return Status::error("LayerNormalizationGrad: the statistics have " +
                           std::to_string(mean.size()) + " values for " + std::to_string(outer) +
                           " rows");
    // Scale broadcasts over the normalized axes as in the forward: at[k] is the scale element
    // that normalized position k reads, and dScale/dB sum over the positions that share one.
    const Shape tail(x.shape().begin() + ax, x.shape().end());
    DW_RETURN_IF_ERROR(broadcastsTo(scale.shape(), tail, "LayerNormalizationGrad: Scale"));
    const std::vector<int64_t> at = broadcastOffsets(scale.shape(), tail);
    Tensor *dx = nullptr, *ds = nullptr, *db = nullptr;
    if (ctx.wantsOutput(0)) {
      dx = ctx.output(0, x.dtype(), x.shape());
      if (!dx) return ctx.status();
    }
    if (ctx.wantsOutput(1)) {
      ds = ctx.output(1, x.dtype(), scale.shape());
      if (!ds) return ctx.status();
    }
    if (ctx.wantsOutput(2)) {
      db = ctx.output(2, x.dtype(), scale.shape());
      if (!db) return ctx.status();
    }
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      const T* px = x.data<T>();
      std::vector<T> w(static_cast<size_t>(len));
      for (int64_t k = 0; k < len; ++k) w[k] = scale.data<T>()[at[k]];
      std::vector<T> accS(len, T(0)), accB(len, T(0));
      for (int64_t a = 0; a < outer; ++a) {
        const T mu = static_cast<T>(mean.getDouble(a)), is = static_cast<T>(invStd.getDouble(a));
        const T* gr = g + a * len;
        const T* xr = px + a * len;
        T m1 = 0, m2 = 0;
        for (int64_t k = 0; k < len; ++k) {
          const T xh = (xr[k] - mu) * is, gh = gr[k] * w[k];
          m1 += gh;
          m2 += gh * xh;
          accS[k] += gr[k] * xh;
          accB[k] += gr[k];
        }
        m1 /= static_cast<T>(len);
        m2 /= static_cast<T>(len);
        if (dx) {
          T* o = dx->data<T>() + a * len;
          for (int64_t k = 0; k < len; ++k) {
            const T xh = (xr[k] - mu) * is;
            o[k] = is * (gr[k] * w[k] - m1 - xh * m2);
          }
        }
      }
      for (Tensor* t : {ds, db}) {
        if (!t) continue;
        const std::vector<T>& acc = t == ds ? accS : accB;
        T* o = t->data<T>();
        std::fill_n(o, t->size(), T(0));
        for (int64_t k = 0; k < len; ++k) o[at[k]] += acc[k];
      }
      return Status();
    });
  }

 private:
  int64_t axis_;
};

}  // namespace

void addLayerNormGradKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "LayerNormalizationGrad", 1, kMaxOpset,
        &makeKernel<LayerNormalizationGrad>, true, dw::kGradDomain);
}

}  // namespace dw::engine
