// MaxRoiPool on host memory (float and double) and its gradient MaxRoiPoolGrad(dY, X, rois) of
// domain com.deepwire.grad. Bins follow the Caffe ROI pooling the op comes from: ROI corners
// rounded (half away from zero) after spatial_scale, inclusive ends, bin edges floored/ceiled,
// and an empty bin gives 0.
#include <algorithm>
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// Calls f(output index, flat input index of the bin's maximum, or -1 for an empty bin); the
// forward op and its gradient share it, so the gradient goes exactly where the forward looked.
template <typename T, typename F>
Status forEachRoiBin(const Tensor& x, const Tensor& rois, int64_t ph, int64_t pw, double scale,
                     F f) {
  if (x.rank() != 4) return Status::error("MaxRoiPool: X must be 4-D (N, C, H, W)");
  if (rois.rank() != 2 || rois.dim(1) != 5)
    return Status::error("MaxRoiPool: rois must be (num_rois, 5): batch, x1, y1, x2, y2");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const T* px = x.data<T>();
  for (int64_t r = 0; r < rois.dim(0); ++r) {
    const double bd = rois.getDouble(r * 5);
    const int64_t b = static_cast<int64_t>(bd);
    if (b < 0 || b >= N || static_cast<double>(b) != bd)
      return Status::error("MaxRoiPool: roi " + std::to_string(r) + " names batch " +
                           std::to_string(bd) + ", outside [0, " + std::to_string(N) + ")");
    auto corner = [&](int k) { return indexOf(std::round(rois.getDouble(r * 5 + k) * scale)); };
    const int64_t sw = corner(1), sh = corner(2), ew = corner(3), eh = corner(4);
    const double bh = static_cast<double>(std::max<int64_t>(eh - sh + 1, 1)) / ph;
    const double bw = static_cast<double>(std::max<int64_t>(ew - sw + 1, 1)) / pw;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t plane = (b * C + c) * H * W;
      for (int64_t i = 0; i < ph; ++i) {
        const int64_t hs = std::clamp<int64_t>(indexOf(std::floor(i * bh)) + sh, 0, H);
        const int64_t he = std::clamp<int64_t>(indexOf(std::ceil((i + 1) * bh)) + sh, 0, H);
        for (int64_t j = 0; j < pw; ++j) {
          const int64_t ws = std::clamp<int64_t>(indexOf(std::floor(j * bw)) + sw, 0, W);
          const int64_t we = std::clamp<int64_t>(indexOf(std::ceil((j + 1) * bw)) + sw, 0, W);
          int64_t at = -1;
          for (int64_t h = hs; h < he; ++h)
            for (int64_t w = ws; w < we; ++w) {
              const int64_t k = plane + h * W + w;
              if (at < 0 || px[k] > px[at]) at = k;
            }
          f(((r * C + c) * ph + i) * pw + j, at);
        }
      }
    }
  }
  return Status();
}

struct RoiAttrs {
  int64_t ph = 0, pw = 0;
  double scale = 1.0;
  explicit RoiAttrs(const KernelInit& init) : scale(init.attrs.getFloat("spatial_scale", 1.0f)) {
    const auto p = init.attrs.getInts("pooled_shape");
    if (p.size() != 2 || p[0] <= 0 || p[1] <= 0) return;
    ph = p[0];
    pw = p[1];
  }
};

class MaxRoiPool : public Kernel {
 public:
  explicit MaxRoiPool(const KernelInit& init) : a_(init) {
    if (!a_.ph) fail("MaxRoiPool: pooled_shape must be two positive sizes");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& rois = ctx.input(1);
    if (x.rank() != 4 || rois.rank() != 2)
      return Status::error("MaxRoiPool: X must be 4-D and rois 2-D");
    DW_ALLOC(y, ctx.output(0, x.dtype(), Shape{rois.dim(0), x.dim(1), a_.ph, a_.pw}));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* py = y->data<T>();
      return forEachRoiBin<T>(x, rois, a_.ph, a_.pw, a_.scale,
                              [&](int64_t o, int64_t at) { py[o] = at < 0 ? T(0) : px[at]; });
    });
  }

 private:
  RoiAttrs a_;
};

// dX: each bin's gradient added at the position of its maximum.
class MaxRoiPoolGrad : public Kernel {
 public:
  explicit MaxRoiPoolGrad(const KernelInit& init) : a_(init) {
    if (!a_.ph) fail("MaxRoiPoolGrad: pooled_shape must be two positive sizes");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& rois = ctx.input(2);
    if (x.rank() != 4 || rois.rank() != 2 ||
        dy.shape() != Shape{rois.dim(0), x.dim(1), a_.ph, a_.pw})
      return Status::error("MaxRoiPoolGrad: dY must be (num_rois, C, pooled_h, pooled_w)");
    DW_ALLOC(dx, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      return forEachRoiBin<T>(x, rois, a_.ph, a_.pw, a_.scale, [&](int64_t i, int64_t at) {
        if (at >= 0) o[at] += g[i];
      });
    });
  }

 private:
  RoiAttrs a_;
};

}  // namespace

void addMaxRoiPoolKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "MaxRoiPool", 1, kMaxOpset, &makeKernel<MaxRoiPool>);
  r.add(kReferenceTable, "MaxRoiPoolGrad", 1, kMaxOpset, &makeKernel<MaxRoiPoolGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
