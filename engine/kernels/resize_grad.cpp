// ResizeGrad (domain com.deepwire.grad): the gradient of Resize / Upsample with respect to X.
// Inputs: dY, the shape of X, then the forward node's inputs after X (roi, scales, sizes;
// Upsample: scales). Attributes: the forward node's, plus "op" (Resize or Upsample) and
// "opset". The forward is linear in X and separable, so dX applies each resampled axis's
// transposed taps (kernels/resize_sampling.h), last axis first; outputs outside a
// tf_crop_and_resize crop hold a constant and send nothing back.
#include <algorithm>

#include "engine/kernels/common.h"
#include "engine/kernels/resize_sampling.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

class ResizeGrad : public Kernel {
 public:
  explicit ResizeGrad(const KernelInit& init) {
    const std::string op = init.attrs.getString("op", "Resize");
    const int opset = static_cast<int>(init.attrs.getInt("opset", 0));
    if ((op != "Resize" && op != "Upsample") || opset <= 0) {
      fail("ResizeGrad needs attributes op (Resize or Upsample) and opset");
      return;
    }
    auto s = ResizeSpec::fromAttributes(init.attrs, op, opset);
    if (!s)
      fail(s.message());
    else
      spec_ = std::move(*s);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const std::vector<int64_t> xs = ctx.input(1).toInt64Vector();
    const Shape xShape(xs.begin(), xs.end());
    auto plan = planResize(spec_, xShape, ctx, 2);
    if (!plan) return plan.status();
    if (dy.shape() != plan->out)
      return Status::error("dY has shape " + shapeToString(dy.shape()) +
                           ", but Resize's output is " + shapeToString(plan->out));
    const size_t r = xShape.size();
    std::vector<double> cur(dy.size());
    DW_RETURN_IF_ERROR(dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < dy.size(); ++i) cur[i] = static_cast<double>(dy.data<T>()[i]);
      return Status();
    }));
    // Before the step for axis d, axes < d still have their output sizes and axes > d their
    // input sizes: the same outer / inner extents the forward's step d saw.
    Shape shape = plan->out;
    for (size_t d = r; d-- > 0;) {
      if (!plan->resamples(spec_, d)) continue;
      const int64_t in = xShape[d], on = plan->out[d];
      int64_t outer = 1, inner = 1;
      for (size_t k = 0; k < d; ++k) outer *= shape[k];
      for (size_t k = d + 1; k < r; ++k) inner *= shape[k];
      auto at = resizeAxisTaps(spec_, *plan, d);
      if (!at) return at.status();
      std::vector<double> next(outer * in * inner, 0.0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < on; ++j) {
          if (at->outside[j]) continue;
          const double* src = &cur[(o * on + j) * inner];
          for (const auto& [i, w] : at->taps[j]) {
            double* dst = &next[(o * in + i) * inner];
            for (int64_t k = 0; k < inner; ++k) dst[k] += w * src[k];
          }
        }
      cur.swap(next);
      shape[d] = in;
    }
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), xShape));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      T* o = dx->data<T>();
      for (int64_t i = 0; i < dx->size(); ++i) o[i] = static_cast<T>(cur[i]);
      return Status();
    });
  }

 private:
  ResizeSpec spec_;
};

}  // namespace

void addResizeGradKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "ResizeGrad", 1, kMaxOpset, &makeKernel<ResizeGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
