// LpPool and GlobalLpPool on host memory (float and double: no oneDNN primitive computes an Lp
// norm over windows), and their gradient LpPoolGrad(dY, X, Y) of domain com.deepwire.grad.
// Padding contributes nothing to a window's norm.
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/pool_geometry.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// For every output position of one plane, the in-plane offsets of the input elements its window
// covers (windows are the same for every (n, c) plane).
struct LpWindows {
  Shape outShape;
  int64_t inPlane = 1, outPlane = 1, planes = 1;
  std::vector<int64_t> begin;  // per output position, into offsets; one extra at the end
  std::vector<int64_t> offsets;
};

Result<LpWindows> lpWindows(const Attributes& a, const Shape& in, bool global) {
  if (in.size() < 3) return Status::error("Lp pooling needs an input of rank >= 3 (N, C, ...)");
  const Shape spatial(in.begin() + 2, in.end());
  const size_t n = spatial.size();
  PoolGeometry g;
  if (global) {
    g.kernel.assign(spatial.begin(), spatial.end());
    g.strides.assign(n, 1);
    g.dilations.assign(n, 1);
    g.padL.assign(n, 0);
    g.padR.assign(n, 0);
    g.out.assign(n, 1);
  } else {
    auto r = poolGeometry(a, in, a.getInts("kernel_shape"));
    if (!r) return r.status();
    g = *r;
  }
  LpWindows w;
  w.outShape = {in[0], in[1]};
  for (int64_t o : g.out) w.outShape.push_back(o);
  w.inPlane = numElements(spatial);
  w.outPlane = numElements(g.out);
  w.planes = in[0] * in[1];
  const int64_t window = numElements(g.kernel);
  std::vector<int64_t> o(n), pos(n);
  w.begin.reserve(w.outPlane + 1);
  for (int64_t oi = 0; oi < w.outPlane; ++oi) {
    w.begin.push_back(static_cast<int64_t>(w.offsets.size()));
    int64_t rem = oi;
    for (size_t d = n; d-- > 0;) {
      o[d] = rem % g.out[d];
      rem /= g.out[d];
    }
    for (int64_t wi = 0; wi < window; ++wi) {
      int64_t r = wi;
      bool inside = true;
      for (size_t d = n; d-- > 0;) {
        const int64_t k = r % g.kernel[d];
        r /= g.kernel[d];
        pos[d] = o[d] * g.strides[d] - g.padL[d] + k * g.dilations[d];
        inside = inside && pos[d] >= 0 && pos[d] < spatial[d];
      }
      if (!inside) continue;
      int64_t off = 0;
      for (size_t d = 0; d < n; ++d) off = off * spatial[d] + pos[d];
      w.offsets.push_back(off);
    }
  }
  w.begin.push_back(static_cast<int64_t>(w.offsets.size()));
  return w;
}

// |v|^p, and its derivative sign(v) |v|^(p-1), with the common p exact.
template <typename T>
T absPow(T v, int64_t p) {
  const T a = std::abs(v);
  return p == 1 ? a : (p == 2 ? v * v : std::pow(a, static_cast<T>(p)));
}
template <typename T>
T absPowDeriv(T v, int64_t p) {
  if (p == 2) return 2 * v;
  const T s = v > 0 ? T(1) : (v < 0 ? T(-1) : T(0));
  return p == 1 ? s : static_cast<T>(p) * s * std::pow(std::abs(v), static_cast<T>(p - 1));
}

// Y = (sum over the window of |X|^p)^(1/p).
class LpPool : public Kernel {
 public:
  explicit LpPool(const KernelInit& init)
      : attrs_(init.attrs), global_(init.opType == "GlobalLpPool"), p_(init.attrs.getInt("p")) {
    if (p_ < 1) fail(init.opType + ": p must be >= 1 (it is " + std::to_string(p_) + ")");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto w = lpWindows(attrs_, x.shape(), global_);
    if (!w) return w.status();
    DW_ALLOC(y, ctx.output(0, x.dtype(), w->outShape));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T inv = T(1) / static_cast<T>(p_);
      for (int64_t pl = 0; pl < w->planes; ++pl) {
        const T* src = x.data<T>() + pl * w->inPlane;
        T* dst = y->data<T>() + pl * w->outPlane;
        for (int64_t oi = 0; oi < w->outPlane; ++oi) {
          T s = 0;
          for (int64_t k = w->begin[oi]; k < w->begin[oi + 1]; ++k)
            s += absPow(src[w->offsets[k]], p_);
          dst[oi] = p_ == 1 ? s : (p_ == 2 ? std::sqrt(s) : std::pow(s, inv));
        }
      }
      return Status();
    });
  }

 private:
  Attributes attrs_;
  bool global_;
  int64_t p_;
};

// dX = sum over the windows holding x of dY * d|x|^p/dx * (1/p) S^(1/p - 1), where S = Y^p; a
// window whose norm is 0 (all its elements 0) passes no gradient.
class LpPoolGrad : public Kernel {
 public:
  explicit LpPoolGrad(const KernelInit& init)
      : attrs_(init.attrs),
        global_(init.attrs.getString("op") == "GlobalLpPool"),
        p_(init.attrs.getInt("p", 2)) {
    if (p_ < 1) fail("LpPoolGrad: p must be >= 1");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    auto w = lpWindows(attrs_, x.shape(), global_);
    if (!w) return w.status();
    if (dy.shape() != w->outShape || y.shape() != w->outShape)
      return Status::error("LpPoolGrad: dY and Y must have the pooled shape " +
                           shapeToString(w->outShape));
    DW_ALLOC(dx, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      for (int64_t pl = 0; pl < w->planes; ++pl) {
        const T* px = x.data<T>() + pl * w->inPlane;
        const T* py = y.data<T>() + pl * w->outPlane;
        const T* g = dy.data<T>() + pl * w->outPlane;
        T* po = o + pl * w->inPlane;
        for (int64_t oi = 0; oi < w->outPlane; ++oi) {
          if (py[oi] == 0) continue;
          // (1/p) S^(1/p - 1) = Y^(1-p) / p
          const T c = g[oi] * (p_ == 1 ? T(1) : std::pow(py[oi], static_cast<T>(1 - p_))) /
                      static_cast<T>(p_);
          for (int64_t k = w->begin[oi]; k < w->begin[oi + 1]; ++k) {
            const int64_t off = w->offsets[k];
            po[off] += c * absPowDeriv(px[off], p_);
          }
        }
      }
      return Status();
    });
  }

 private:
  Attributes attrs_;
  bool global_;
  int64_t p_;
};

}  // namespace

void addLpPoolKernels(KernelRegistry& r) {
  // Opset 1 gave p as a float; from opset 2 it is an int.
  r.add(kReferenceTable, "LpPool", 2, kMaxOpset, &makeKernel<LpPool>);
  r.add(kReferenceTable, "GlobalLpPool", 2, kMaxOpset, &makeKernel<LpPool>);
  r.add(kReferenceTable, "LpPoolGrad", 1, kMaxOpset, &makeKernel<LpPoolGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
