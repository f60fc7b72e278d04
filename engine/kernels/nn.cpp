// Plain C++ neural-network kernels: what the oneDNN kernels hand over (BatchNormalization in
// training mode or in double; MaxPool with Indices, storage_order or integer dtypes) and ops
// oneDNN has no primitive for with ONNX's semantics: InstanceNormalization, MaxUnpool, Resize /
// Upsample (every coordinate transformation, nearest mode and cubic variant), GridSample,
// RoiAlign.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/common.h"
#include "engine/kernels/direct_conv.h"
#include "engine/kernels/pool_geometry.h"
#include "engine/kernels/resize_sampling.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

class BatchNormReference : public Kernel {
 public:
  explicit BatchNormReference(const KernelInit& init)
      : opset_(init.opset),
        eps_(init.attrs.getFloat("epsilon")),
        momentum_(init.attrs.getFloat("momentum")) {
    // Opset 14+ says so with training_mode; before that, asking for the statistics outputs
    // (and, before 7, is_test=0) meant training.
    training_ = opset_ >= 14 ? init.attrs.getInt("training_mode") != 0
                             : (opset_ < 7 ? init.attrs.getInt("is_test") == 0 : true) &&
                                   init.numOutputs > 1;
    if (opset_ < 9 && init.attrs.getInt("spatial") == 0)
      fail("BatchNormalization spatial=0 is not supported");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2) return Status::error("X must have at least 2 dimensions (N, C, ...)");
    const int64_t N = x.dim(0), C = x.dim(1), S = x.size() / std::max<int64_t>(1, N * C);
    for (int i = 1; i <= 4; ++i) {
      if (ctx.input(i).size() != C)
        return Status::error("scale, B, mean and var must have C = " + std::to_string(C) +
                             " elements; input " + std::to_string(i) + " has " +
                             shapeToString(ctx.input(i).shape()));
      if (!isFloating(ctx.input(i).dtype()))
        return Status::error("scale, B, mean and var must be floating point");
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* py = y->data<T>();
      // Statistics (scale, bias, mean, var) may have another float type (opset 15's T1/T2).
      auto vec = [&](int i) {
        std::vector<double> v(C);
        for (int64_t c = 0; c < C; ++c) v[c] = ctx.input(i).getDouble(c);
        return v;
      };
      const auto scale = vec(1), bias = vec(2), inMean = vec(3), inVar = vec(4);
      std::vector<double> mean = inMean, var = inVar;
      if (training_) {
        const double count = static_cast<double>(N * S);
        for (int64_t c = 0; c < C; ++c) {
          double s = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T* p = px + (n * C + c) * S;
            for (int64_t i = 0; i < S; ++i) s += p[i];
          }
          const double m = count > 0 ? s / count : 0;
          double q = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T* p = px + (n * C + c) * S;
            for (int64_t i = 0; i < S; ++i) q += (p[i] - m) * (p[i] - m);
          }
          mean[c] = m;
          var[c] = count > 0 ? q / count : 0;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        const double k = scale[c] / std::sqrt(var[c] + eps_);
        const double b = bias[c] - mean[c] * k;
        for (int64_t n = 0; n < N; ++n) {
          const T* p = px + (n * C + c) * S;
          T* q = py + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) q[i] = static_cast<T>(p[i] * k + b);
        }
      }
      if (!training_) return Status();
      // Outputs 1, 2: running mean/var; opset < 14 also has 3, 4: the batch mean/var.
      auto write = [&](size_t idx, const std::vector<double>& v) -> Status {
        if (!ctx.wantsOutput(idx)) return Status();
        const DType dt = ctx.input(3).dtype();
        Tensor* t = ctx.output(idx, dt, {C});
        if (!t) return ctx.status();
        return dispatchFloat(dt, [&](auto w) {
          using U = decltype(w);
          for (int64_t c = 0; c < C; ++c) t->data<U>()[c] = static_cast<U>(v[c]);
          return Status();
        });
      };
      std::vector<double> runMean(C), runVar(C);
      for (int64_t c = 0; c < C; ++c) {
        runMean[c] = inMean[c] * momentum_ + mean[c] * (1 - momentum_);
        runVar[c] = inVar[c] * momentum_ + var[c] * (1 - momentum_);
      }
      DW_RETURN_IF_ERROR(write(1, runMean));
      DW_RETURN_IF_ERROR(write(2, runVar));
      DW_RETURN_IF_ERROR(write(3, mean));
      return write(4, var);
    });
  }

 private:
  int opset_;
  float eps_, momentum_;
  bool training_ = false;
};

}  // namespace

// Window geometry shared by the pooling kernels (pool_geometry.h).
Result<PoolGeometry> poolGeometry(const Attributes& a, const Shape& in,
                                  std::vector<int64_t> kernel) {
  const size_t n = kernel.size();
  if (in.size() != n + 2)
    return Status::error("kernel_shape has " + std::to_string(n) + " entries for a " +
                         std::to_string(in.size()) + "-D input");
  PoolGeometry g;
  g.kernel = kernel;
  g.strides = a.getInts("strides");
  g.dilations = a.getInts("dilations");
  if (g.strides.empty()) g.strides.assign(n, 1);
  if (g.dilations.empty()) g.dilations.assign(n, 1);
  if (g.strides.size() != n || g.dilations.size() != n)
    return Status::error("strides/dilations must have one entry per spatial axis");
  auto pads = a.getInts("pads");
  const std::string autoPad = a.getString("auto_pad", "NOTSET");
  const bool ceil = a.getInt("ceil_mode", 0) != 0;
  g.padL.assign(n, 0);
  g.padR.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = in[2 + i], s = g.strides[i], ek = (kernel[i] - 1) * g.dilations[i] + 1;
    if (s <= 0 || kernel[i] <= 0) return Status::error("kernel and strides must be positive");
    int64_t o;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      o = (x + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (o - 1) * s + ek - x);
      g.padL[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.padR[i] = total - g.padL[i];
    } else if (autoPad == "VALID") {
      o = (x - ek) / s + 1;
      if (ceil) o = (x - ek + s - 1) / s + 1;
    } else {
      if (!pads.empty()) {
        if (pads.size() != 2 * n) return Status::error("pads must have 2 entries per axis");
        g.padL[i] = pads[i];
        g.padR[i] = pads[i + n];
      }
      const int64_t span = x + g.padL[i] + g.padR[i] - ek;
      o = ceil ? (span + s - 1) / s + 1 : span / s + 1;
      // A last window that would start in the right padding only is dropped.
      if (ceil && (o - 1) * s >= x + g.padL[i]) --o;
    }
    g.out.push_back(std::max<int64_t>(o, 0));
  }
  return g;
}

namespace {

// MaxPool on host memory: any numeric dtype, the Indices output, storage_order.
class MaxPoolReference : public Kernel {
 public:
  explicit MaxPoolReference(const KernelInit& init)
      : attrs_(init.attrs), columnMajor_(init.attrs.getInt("storage_order", 0) != 0) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 3) return Status::error("MaxPool needs an input of rank >= 3 (N, C, ...)");
    auto g = poolGeometry(attrs_, x.shape(), attrs_.getInts("kernel_shape"));
    if (!g) return g.status();
    Shape outShape{x.dim(0), x.dim(1)};
    for (int64_t o : g->out) outShape.push_back(o);
    DW_ALLOC(y, ctx.output(0, x.dtype(), outShape));
    Tensor* idx = nullptr;
    if (ctx.wantsOutput(1)) {
      idx = ctx.output(1, DType::kInt64, outShape);
      if (!idx) return ctx.status();
    }
    const size_t n = g->kernel.size();
    const Shape spatialIn(x.shape().begin() + 2, x.shape().end());
    const int64_t inPlane = numElements(spatialIn), outPlane = numElements(g->out);
    const int64_t planes = x.dim(0) * x.dim(1);
    return dispatchNumeric(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      std::vector<int64_t> o(n), w(n), pos(n), base(n), lo(n), hi(n);
      for (int64_t p = 0; p < planes; ++p) {
        const T* src = x.data<T>() + p * inPlane;
        for (int64_t oi = 0; oi < outPlane; ++oi) {
          int64_t rem = oi;
          for (size_t d = n; d-- > 0;) {
            o[d] = rem % g->out[d];
            rem /= g->out[d];
          }
          T best = std::numeric_limits<T>::lowest();
          int64_t bestAt = -1;
          // The window clipped to the input along each axis (padding holds nothing to compare),
          // then walked in the same row-major order as the whole window, so ties resolve alike.
          bool empty = false;
          for (size_t d = 0; d < n; ++d) {
            base[d] = o[d] * g->strides[d] - g->padL[d];
            const int64_t dil = g->dilations[d];
            lo[d] = base[d] >= 0 ? 0 : (-base[d] + dil - 1) / dil;
            const int64_t last = spatialIn[d] - 1 - base[d];  // largest in-range k * dil
            hi[d] = last < 0 ? 0 : std::min(g->kernel[d], last / dil + 1);
            if (lo[d] >= hi[d]) empty = true;
            w[d] = lo[d];
          }
          while (!empty) {
            int64_t off = 0, colOff = 0, colStride = 1;
            for (size_t d = 0; d < n; ++d) {
              pos[d] = base[d] + w[d] * g->dilations[d];
              off = off * spatialIn[d] + pos[d];
            }
            for (size_t d = 0; d < n; ++d) {
              colOff += pos[d] * colStride;
              colStride *= spatialIn[d];
            }
            const T v = src[off];
            if (bestAt < 0 || v > best) {
              best = v;
              bestAt = columnMajor_ ? colOff : off;
            }
            size_t d = n;
            while (d-- > 0) {
              if (++w[d] < hi[d]) break;
              w[d] = lo[d];
            }
            if (d == static_cast<size_t>(-1)) break;
          }
          y->data<T>()[p * outPlane + oi] = bestAt < 0 ? T(0) : best;
          if (idx)
            idx->data<int64_t>()[p * outPlane + oi] = p * inPlane + std::max<int64_t>(bestAt, 0);
        }
      }
      return Status();
    });
  }

 private:
  Attributes attrs_;
  bool columnMajor_;
};

class MaxUnpool : public Kernel {
 public:
  explicit MaxUnpool(const KernelInit& init) : attrs_(init.attrs) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    if (x.rank() < 3 || ind.shape() != x.shape())
      return Status::error("X must be rank >= 3 and I must have X's shape");
    const auto kernel = attrs_.getInts("kernel_shape");
    const size_t n = x.rank() - 2;
    if (kernel.size() != n) return Status::error("kernel_shape needs one entry per spatial axis");
    auto strides = attrs_.getInts("strides");
    auto pads = attrs_.getInts("pads");
    if (strides.empty()) strides.assign(n, 1);
    if (pads.empty()) pads.assign(2 * n, 0);
    Shape def{x.dim(0), x.dim(1)};
    for (size_t i = 0; i < n; ++i)
      def.push_back((x.dim(2 + i) - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n]);
    Shape out = def;
    if (ctx.hasInput(2)) {
      auto os = ctx.input(2).toInt64Vector();
      if (os.size() != out.size()) return Status::error("output_shape must have X's rank");
      out = Shape(os.begin(), os.end());
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    std::memset(y->raw(), 0, y->bytes());
    // Indices address the unpadded default output; an explicit output_shape places the same
    // coordinates in the larger tensor.
    const int64_t total = numElements(def);
    return dispatchBytes(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      for (int64_t i = 0; i < x.size(); ++i) {
        int64_t at = ind.getInt(i);
        if (at < 0 || at >= total)
          return Status::error("index " + std::to_string(at) + " is outside the output");
        int64_t mapped = 0, stride = 1;
        for (size_t d = def.size(); d-- > 0;) {
          const int64_t c = at % def[d];
          at /= def[d];
          if (c >= out[d]) return Status::error("an index falls outside output_shape");
          mapped += c * stride;
          stride *= out[d];
        }
        y->data<T>()[mapped] = x.data<T>()[i];
      }
      return Status();
    });
  }

 private:
  Attributes attrs_;
};

// The mean and (biased) variance of n values, in double, in four interleaved sums: one running
// sum waited on each addition's latency (InstanceNormalization over 1.6M values: 1.6 ms).
template <class T>
std::pair<double, double> meanAndVariance(const T* p, int64_t n) {
  double m4[4] = {0, 0, 0, 0}, v4[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) m4[k] += p[i + k];
  double m = (m4[0] + m4[1]) + (m4[2] + m4[3]);
  for (; i < n; ++i) m += p[i];
  m /= static_cast<double>(n);
  for (i = 0; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) v4[k] += (p[i + k] - m) * (p[i + k] - m);
  double v = (v4[0] + v4[1]) + (v4[2] + v4[3]);
  for (; i < n; ++i) v += (p[i] - m) * (p[i] - m);
  return {m, v / static_cast<double>(n)};
}

class InstanceNorm : public Kernel {
 public:
  explicit InstanceNorm(const KernelInit& init) : eps_(init.attrs.getFloat("epsilon")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 3) return Status::error("input must have rank >= 3 (N, C, ...)");
    const int64_t N = x.dim(0), C = x.dim(1), S = x.size() / std::max<int64_t>(1, N * C);
    if (ctx.input(1).size() != C || ctx.input(2).size() != C)
      return Status::error("scale and B must have C elements");
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    const Tensor &scale = ctx.input(1), &bias = ctx.input(2);
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      // The planes on the session's threads: they share nothing.
      forThreadRanges(N * C, x.size() * 2, [&](int64_t from, int64_t to) {
        for (int64_t nc = from; nc < to; ++nc) {
          const int64_t c = nc % C;
          const T* p = x.data<T>() + nc * S;
          T* q = y->data<T>() + nc * S;
          const auto [m, v] = meanAndVariance(p, S);
          const double k = scale.getDouble(c) / std::sqrt(v + eps_);
          const double b = bias.getDouble(c);
          for (int64_t i = 0; i < S; ++i) q[i] = static_cast<T>((p[i] - m) * k + b);
        }
      });
      return Status();
    });
  }

 private:
  float eps_;
};

// RMSNormalization (opset 23): y = x / sqrt(mean(x^2 over the axes from `axis` on) + epsilon)
// * scale, with scale broadcasting over those axes. The statistics are taken in double (at least
// the float32 that stash_type asks for).
class RmsNorm : public Kernel {
 public:
  explicit RmsNorm(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", -1)), eps_(init.attrs.getFloat("epsilon", 1e-5f)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    if (!validAxis(axis_, x.rank()) || x.rank() == 0)
      return Status::error("axis " + std::to_string(axis_) + " is outside the " +
                           std::to_string(x.rank()) + " dimensions of X");
    if (scale.dtype() != x.dtype())
      return Status::error("Scale is " + std::string(dtypeName(scale.dtype())) + " but X is " +
                           dtypeName(x.dtype()) + "; they must be of one type");
    const int64_t ax = normAxis(axis_, x.rank());
    const Shape tail(x.shape().begin() + ax, x.shape().end());
    DW_RETURN_IF_ERROR(broadcastsTo(scale.shape(), tail, "RMSNormalization: Scale"));
    const int64_t len = numElements(tail), outer = len ? x.size() / len : 0;
    const std::vector<int64_t> at = broadcastOffsets(scale.shape(), tail);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* px = x.data<T>();
      const T* ps = scale.data<T>();
      T* py = y->data<T>();
      for (int64_t a = 0; a < outer; ++a) {
        const T* xr = px + a * len;
        double ss = 0;
        for (int64_t k = 0; k < len; ++k) ss += static_cast<double>(xr[k]) * xr[k];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(len) + eps_);
        for (int64_t k = 0; k < len; ++k)
          py[a * len + k] = static_cast<T>(static_cast<double>(xr[k]) * inv * ps[at[k]]);
      }
      return Status();
    });
  }

 private:
  int64_t axis_;
  float eps_;
};

// GroupNormalization: the C channels of X [N, C, ...] form num_groups groups; each (image,
// group) is normalized by its own mean and variance (taken in double), then scaled and shifted
// per channel (opset 21) or, as opset 18 defined it, per group.
class GroupNorm : public Kernel {
 public:
  explicit GroupNorm(const KernelInit& init)
      : groups_(init.attrs.getInt("num_groups", 0)),
        eps_(init.attrs.getFloat("epsilon", 1e-5f)),
        perGroup_(init.opset < 21) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    const Tensor& bias = ctx.input(2);
    if (x.rank() < 2) return Status::error("X needs at least 2 dimensions (N, C, ...)");
    const int64_t N = x.dim(0), C = x.dim(1), G = groups_;
    if (G < 1 || C % G)
      return Status::error("num_groups is " + std::to_string(G) + "; it must divide the " +
                           std::to_string(C) + " channels of X");
    const int64_t want = perGroup_ ? G : C;
    if (scale.size() != want || bias.size() != want || scale.dtype() != x.dtype() ||
        bias.dtype() != x.dtype())
      return Status::error(std::string("scale and bias need ") + std::to_string(want) +
                           " elements of X's type (one per " + (perGroup_ ? "group" : "channel") +
                           (perGroup_ ? " in opset 18" : "") + ")");
    const int64_t S = C ? x.size() / std::max<int64_t>(1, N * C) : 0, per = C / G * S;
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* ps = scale.data<T>();
      const T* pb = bias.data<T>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) {
          const T* p = x.data<T>() + (n * G + g) * per;
          T* q = y->data<T>() + (n * G + g) * per;
          const auto [m, v] = meanAndVariance(p, per);
          const double inv = 1 / std::sqrt(v + eps_);
          for (int64_t i = 0; i < per; ++i) {
            const int64_t k = perGroup_ ? g : g * (C / G) + i / S;
            q[i] = static_cast<T>((p[i] - m) * inv * ps[k] + pb[k]);
          }
        }
      return Status();
    });
  }

 private:
  int64_t groups_;
  float eps_;
  bool perGroup_;
};

// Resize (opset 10+) and Upsample: separable, one axis at a time, through the taps of
// kernels/resize_sampling.h (shared with the gradient, ResizeGrad).
class ResizeKernel : public Kernel {
 public:
  explicit ResizeKernel(const KernelInit& init) {
    auto s = ResizeSpec::fromAttributes(init.attrs, init.opType, init.opset);
    if (!s)
      fail(s.message());
    else
      spec_ = std::move(*s);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t r = x.rank();
    auto plan = planResize(spec_, x.shape(), ctx, 1);
    if (!plan) return plan.status();
    DW_ALLOC(y, ctx.output(0, x.dtype(), plan->out));
    if (y->size() == 0) return Status();
    if (auto done = direct(x, *plan, *y); !done.ok() || *done) return done.status();
    // Pass through the axes in turn, in double.
    std::vector<double> cur(x.size());
    DW_RETURN_IF_ERROR(dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < x.size(); ++i) cur[i] = static_cast<double>(x.data<T>()[i]);
      return Status();
    }));
    Shape shape = x.shape();
    for (size_t d = 0; d < r; ++d) {
      if (!plan->resamples(spec_, d)) continue;
      const int64_t in = shape[d], on = plan->out[d];
      int64_t outer = 1, inner = 1;
      for (size_t k = 0; k < d; ++k) outer *= shape[k];
      for (size_t k = d + 1; k < r; ++k) inner *= shape[k];
      auto at = resizeAxisTaps(spec_, *plan, d);
      if (!at) return at.status();
      std::vector<double> next(outer * on * inner);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < on; ++j) {
          double* dst = &next[(o * on + j) * inner];
          if (at->outside[j]) {
            std::fill_n(dst, inner, static_cast<double>(spec_.extrapolation));
            continue;
          }
          std::fill_n(dst, inner, 0.0);
          for (const auto& [i, w] : at->taps[j]) {
            const double* src = &cur[(o * in + i) * inner];
            for (int64_t k = 0; k < inner; ++k) dst[k] += w * src[k];
          }
        }
      cur.swap(next);
      shape[d] = on;
    }
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < y->size(); ++i) {
        if constexpr (std::is_integral_v<T>)
          y->data<T>()[i] = static_cast<T>(std::nearbyint(cur[i]));
        else
          y->data<T>()[i] = static_cast<T>(cur[i]);
      }
      return Status();
    });
  }

 private:
  // The common resizes in one pass over the output, on the session's threads, instead of a
  // float64 copy per axis (a 2x nearest upsample of 1.6M values took 89 ms): every axis's
  // output index taking one input index (nearest, any dtype: a gather), or float32 with only
  // the last two axes resampled (linear, cubic: the weighted taps of both). False: not such a
  // resize (extrapolated points, other axes resampled), for the general passes.
  Result<bool> direct(const Tensor& x, const ResizePlan& plan, Tensor& y) const {
    const size_t r = x.rank();
    if (r == 0) return false;
    std::vector<ResizeAxisTaps> taps(r);
    bool single = true, lastTwo = true;
    for (size_t d = 0; d < r; ++d) {
      if (!plan.resamples(spec_, d)) continue;
      auto at = resizeAxisTaps(spec_, plan, d);
      if (!at) return at.status();
      for (size_t j = 0; j < at->taps.size(); ++j) {
        if (at->outside[j]) return false;
        single &= at->taps[j].size() == 1 && at->taps[j][0].second == 1.0;
      }
      if (d + 2 < r) lastTwo = false;
      taps[d] = std::move(*at);
    }
    // Each output index's input index, per axis (itself where the axis is not resampled).
    auto source = [&](size_t d, int64_t j) {
      return taps[d].taps.empty() ? j : taps[d].taps[j][0].first;
    };
    const Shape& out = y.shape();
    const int64_t inner = out[r - 1], rows = y.size() / inner;
    const std::vector<int64_t> inStrides = stridesOf(x.shape());
    if (single) {
      std::vector<int64_t> col(static_cast<size_t>(inner));
      for (int64_t k = 0; k < inner; ++k) col[k] = source(r - 1, k);
      // Elements moved as bytes; a dtype of no fixed size (strings) is the general passes'.
      const Status moved = dispatchBytes(x.dtype(), [&](auto z) -> Status {
        using T = decltype(z);
        const T* src = static_cast<const T*>(x.raw());
        T* dst = static_cast<T*>(y.raw());
        forThreadRanges(rows, y.size(), [&](int64_t from, int64_t to) {
          for (int64_t row = from; row < to; ++row) {
            int64_t at = 0;
            for (int64_t rest = row, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
              at += source(d, rest % out[d]) * inStrides[d];
              rest /= out[d];
            }
            const T* in = src + at;
            T* o = dst + row * inner;
            for (int64_t k = 0; k < inner; ++k) o[k] = in[col[k]];
          }
        });
        return Status();
      });
      return moved.ok();
    }
    if (x.dtype() != DType::kFloat || r < 2 || !lastTwo) return false;
    // Planes of H x W (the last two axes); the axes before them keep their indices.
    const int64_t H = x.dim(r - 2), W = x.dim(r - 1), Ho = out[r - 2], Wo = out[r - 1];
    const int64_t planes = y.size() / (Ho * Wo);
    auto tapsOf = [&](size_t d, int64_t j) {
      return taps[d].taps.empty() ? std::vector<std::pair<int64_t, double>>{{j, 1.0}}
                                  : taps[d].taps[j];
    };
    // Flattened taps per output row and column, weights in float.
    std::vector<int64_t> rowStart(Ho + 1, 0), colStart(Wo + 1, 0), rowIdx, colIdx;
    std::vector<float> rowW, colW;
    for (int64_t i = 0; i < Ho; ++i) {
      for (const auto& [k, w] : tapsOf(r - 2, i)) {
        rowIdx.push_back(k);
        rowW.push_back(static_cast<float>(w));
      }
      rowStart[i + 1] = static_cast<int64_t>(rowIdx.size());
    }
    for (int64_t j = 0; j < Wo; ++j) {
      for (const auto& [k, w] : tapsOf(r - 1, j)) {
        colIdx.push_back(k);
        colW.push_back(static_cast<float>(w));
      }
      colStart[j + 1] = static_cast<int64_t>(colIdx.size());
    }
    const float* src = x.data<float>();
    float* dst = y.data<float>();
    forThreadRanges(planes * Ho, y.size() * 4, [&](int64_t from, int64_t to) {
      std::vector<float> line(static_cast<size_t>(W));
      for (int64_t pr = from; pr < to; ++pr) {
        const int64_t p = pr / Ho, i = pr % Ho;
        // The row's taps first (a line of W), then each column's taps along it.
        std::fill(line.begin(), line.end(), 0.0f);
        for (int64_t t = rowStart[i]; t < rowStart[i + 1]; ++t) {
          const float w = rowW[t];
          const float* in = src + (p * H + rowIdx[t]) * W;
          for (int64_t k = 0; k < W; ++k) line[k] += w * in[k];
        }
        float* o = dst + (p * Ho + i) * Wo;
        for (int64_t j = 0; j < Wo; ++j) {
          float v = 0;
          for (int64_t t = colStart[j]; t < colStart[j + 1]; ++t) v += colW[t] * line[colIdx[t]];
          o[j] = v;
        }
      }
    });
    return true;
  }

  ResizeSpec spec_;
};

// GridSample (4-D): bilinear, nearest and bicubic sampling with zeros, border or reflection
// padding, following the ONNX reference implementation's unnormalization.
class GridSample : public Kernel {
 public:
  explicit GridSample(const KernelInit& init)
      : mode_(init.attrs.getString("mode")),
        padding_(init.attrs.getString("padding_mode")),
        alignCorners_(init.attrs.getInt("align_corners") != 0) {
    if (mode_ != "bilinear" && mode_ != "nearest" && mode_ != "bicubic")
      fail("GridSample mode '" + mode_ + "' must be bilinear, nearest or bicubic");
    if (padding_ != "zeros" && padding_ != "border" && padding_ != "reflection")
      fail("GridSample padding_mode '" + padding_ + "' must be zeros, border or reflection");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& grid = ctx.input(1);
    if (x.rank() != 4 || grid.rank() != 4 || grid.dim(3) != 2 || grid.dim(0) != x.dim(0))
      return Status::error("GridSample needs X [N, C, H, W] and grid [N, Ho, Wo, 2]");
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    const int64_t Ho = grid.dim(1), Wo = grid.dim(2);
    if ((H == 0 || W == 0) && N * C * Ho * Wo > 0)
      return Status::error("X of shape " + shapeToString(x.shape()) +
                           " has no pixels to sample; H and W must be at least 1");
    DW_ALLOC(y, ctx.output(0, x.dtype(), {N, C, Ho, Wo}));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < Ho; ++i)
          for (int64_t j = 0; j < Wo; ++j) {
            const int64_t gi = ((n * Ho + i) * Wo + j) * 2;
            const double gx = grid.getDouble(gi), gy = grid.getDouble(gi + 1);
            const double px = unnormalize(gx, W), py = unnormalize(gy, H);
            for (int64_t c = 0; c < C; ++c) {
              const T* plane = x.data<T>() + (n * C + c) * H * W;
              y->data<T>()[((n * C + c) * Ho + i) * Wo + j] =
                  static_cast<T>(sample(plane, H, W, px, py));
            }
          }
      return Status();
    });
  }

 private:
  double unnormalize(double v, int64_t len) const {
    return alignCorners_ ? (v + 1) / 2 * (len - 1) : ((v + 1) * len - 1) / 2;
  }
  double reflect(double v, double lo, double hi) const {
    const double range = hi - lo;
    if (range <= 0) return lo;
    if (v < lo) {
      const double dx = lo - v;
      const int64_t k = static_cast<int64_t>(dx / range);
      const double rem = dx - k * range;
      return k % 2 == 0 ? lo + rem : hi - rem;
    }
    if (v > hi) {
      const double dx = v - hi;
      const int64_t k = static_cast<int64_t>(dx / range);
      const double rem = dx - k * range;
      return k % 2 == 0 ? hi - rem : lo + rem;
    }
    return v;
  }
  // Applies border/reflection to a continuous coordinate.
  double pad(double v, int64_t len) const {
    if (padding_ == "border") return std::clamp(v, 0.0, static_cast<double>(len - 1));
    if (padding_ == "reflection")
      return alignCorners_ ? reflect(v, 0, len - 1) : reflect(v, -0.5, len - 0.5);
    return v;
  }
  template <class T>
  double pixel(const T* plane, int64_t H, int64_t W, int64_t yy, int64_t xx) const {
    if (padding_ == "zeros") {
      if (yy < 0 || yy >= H || xx < 0 || xx >= W) return 0;
    } else if (padding_ == "border") {
      yy = std::clamp<int64_t>(yy, 0, H - 1);
      xx = std::clamp<int64_t>(xx, 0, W - 1);
    } else {
      yy = static_cast<int64_t>(pad(static_cast<double>(yy), H));
      xx = static_cast<int64_t>(pad(static_cast<double>(xx), W));
      yy = std::clamp<int64_t>(yy, 0, H - 1);
      xx = std::clamp<int64_t>(xx, 0, W - 1);
    }
    return plane[yy * W + xx];
  }
  template <class T>
  double sample(const T* plane, int64_t H, int64_t W, double px, double py) const {
    if (mode_ == "nearest") {
      px = pad(px, W);
      py = pad(py, H);
      return pixel(plane, H, W, indexOf(std::nearbyint(py)), indexOf(std::nearbyint(px)));
    }
    if (mode_ == "bilinear") {
      px = pad(px, W);
      py = pad(py, H);
      const int64_t x0 = indexOf(std::floor(px)), y0 = indexOf(std::floor(py));
      const double fx = px - x0, fy = py - y0;
      return pixel(plane, H, W, y0, x0) * (1 - fx) * (1 - fy) +
             pixel(plane, H, W, y0, x0 + 1) * fx * (1 - fy) +
             pixel(plane, H, W, y0 + 1, x0) * (1 - fx) * fy +
             pixel(plane, H, W, y0 + 1, x0 + 1) * fx * fy;
    }
    // Bicubic with A = -0.75 over the 4x4 neighbourhood; padding applies per tap.
    const int64_t x0 = indexOf(std::floor(px)) - 1, y0 = indexOf(std::floor(py)) - 1;
    const double fx = px - std::floor(px), fy = py - std::floor(py);
    auto coeffs = [](double t, double* c) {
      const double A = -0.75;
      auto far = [&](double v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };
      auto near = [&](double v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };
      c[0] = far(t + 1);
      c[1] = near(t);
      c[2] = near(1 - t);
      c[3] = far(2 - t);
    };
    double cx[4], cy[4];
    coeffs(fx, cx);
    coeffs(fy, cy);
    double acc = 0;
    for (int a = 0; a < 4; ++a) {
      double row = 0;
      for (int b = 0; b < 4; ++b) row += cx[b] * bicubicPixel(plane, H, W, y0 + a, x0 + b);
      acc += cy[a] * row;
    }
    return acc;
  }
  template <class T>
  double bicubicPixel(const T* plane, int64_t H, int64_t W, int64_t yy, int64_t xx) const {
    if (padding_ == "zeros") return pixel(plane, H, W, yy, xx);
    const double py = pad(static_cast<double>(yy), H), px = pad(static_cast<double>(xx), W);
    return pixel(plane, H, W, static_cast<int64_t>(py), static_cast<int64_t>(px));
  }

  std::string mode_, padding_;
  bool alignCorners_;
};

// RoiAlign (opset 10+): average or max of bilinear samples on a regular grid in each bin.
class RoiAlign : public Kernel {
 public:
  explicit RoiAlign(const KernelInit& init)
      : halfPixel_(init.attrs.getString("coordinate_transformation_mode",
                                        init.opset >= 16 ? "half_pixel" : "output_half_pixel") ==
                   "half_pixel"),
        max_(init.attrs.getString("mode") == "max"),
        oh_(init.attrs.getInt("output_height")),
        ow_(init.attrs.getInt("output_width")),
        ratio_(init.attrs.getInt("sampling_ratio")),
        scale_(init.attrs.getFloat("spatial_scale")) {
    if (oh_ < 0 || ow_ < 0)
      fail("output_height and output_width must not be negative; they are " + std::to_string(oh_) +
           " and " + std::to_string(ow_));
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& rois = ctx.input(1);
    const Tensor& bidx = ctx.input(2);
    if (x.rank() != 4 || rois.rank() != 2 || rois.dim(1) != 4 || bidx.size() != rois.dim(0))
      return Status::error("RoiAlign needs X [N,C,H,W], rois [R,4] and batch_indices [R]");
    const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3), R = rois.dim(0);
    DW_ALLOC(y, ctx.output(0, x.dtype(), {R, C, oh_, ow_}));
    // Nothing to sample (and a bin count of 0 would divide the rois' sizes by zero).
    if (y->size() == 0) return Status();
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const double off = halfPixel_ ? 0.5 : 0.0;
      if (ratio_ > 65536)
        return Status::error("sampling_ratio " + std::to_string(ratio_) +
                             " takes more than 65536 points per bin side");
      for (int64_t r = 0; r < R; ++r) {
        const int64_t n = bidx.getInt(r);
        if (n < 0 || n >= x.dim(0)) return Status::error("batch index out of range");
        const double x1 = rois.getDouble(r * 4) * scale_ - off,
                     y1 = rois.getDouble(r * 4 + 1) * scale_ - off,
                     x2 = rois.getDouble(r * 4 + 2) * scale_ - off,
                     y2 = rois.getDouble(r * 4 + 3) * scale_ - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!halfPixel_) {
          rw = std::max(rw, 1.0);
          rh = std::max(rh, 1.0);
        }
        if (!std::isfinite(rw) || !std::isfinite(rh) || !std::isfinite(x1) || !std::isfinite(y1))
          return Status::error("roi " + std::to_string(r) + " has a coordinate that is not finite");
        const double bh = rh / oh_, bw = rw / ow_;
        // Adaptive sampling takes ceil(bin size) points per bin side: a bin of a million
        // points a side is a malformed roi, not a region of an image.
        if (ratio_ <= 0 && (rh / oh_ > 1e6 || rw / ow_ > 1e6))
          return Status::error("roi " + std::to_string(r) +
                               " is too large to sample adaptively (over a million points per "
                               "bin side); give sampling_ratio");
        const int64_t gh = ratio_ > 0 ? ratio_ : static_cast<int64_t>(std::ceil(rh / oh_));
        const int64_t gw = ratio_ > 0 ? ratio_ : static_cast<int64_t>(std::ceil(rw / ow_));
        const double count = std::max<int64_t>(gh * gw, 1);
        for (int64_t c = 0; c < C; ++c) {
          const T* plane = x.data<T>() + (n * C + c) * H * W;
          for (int64_t ph = 0; ph < oh_; ++ph)
            for (int64_t pw = 0; pw < ow_; ++pw) {
              double acc = 0, best = 0;
              bool first = true;
              for (int64_t iy = 0; iy < gh; ++iy)
                for (int64_t ix = 0; ix < gw; ++ix) {
                  double yy = y1 + ph * bh + (iy + 0.5) * bh / gh;
                  double xx = x1 + pw * bw + (ix + 0.5) * bw / gw;
                  double v = 0, vmax = 0;
                  if (!(yy < -1.0 || yy > H || xx < -1.0 || xx > W)) {
                    yy = std::max(yy, 0.0);
                    xx = std::max(xx, 0.0);
                    int64_t yl = static_cast<int64_t>(yy), xl = static_cast<int64_t>(xx), yh, xh;
                    if (yl >= H - 1) {
                      yh = yl = H - 1;
                      yy = static_cast<double>(yl);
                    } else {
                      yh = yl + 1;
                    }
                    if (xl >= W - 1) {
                      xh = xl = W - 1;
                      xx = static_cast<double>(xl);
                    } else {
                      xh = xl + 1;
                    }
                    const double ly = yy - yl, lx = xx - xl, hy = 1 - ly, hx = 1 - lx;
                    const double a = hy * hx * plane[yl * W + xl], b = hy * lx * plane[yl * W + xh],
                                 cc = ly * hx * plane[yh * W + xl],
                                 d = ly * lx * plane[yh * W + xh];
                    v = a + b + cc + d;
                    vmax = std::max(std::max(a, b), std::max(cc, d));
                  }
                  acc += v;
                  if (first || vmax > best) best = vmax;
                  first = false;
                }
              y->data<T>()[((r * C + c) * oh_ + ph) * ow_ + pw] =
                  static_cast<T>(max_ ? best : acc / count);
            }
        }
      }
      return Status();
    });
  }

 private:
  bool halfPixel_, max_;
  int64_t oh_, ow_, ratio_;
  float scale_;
};

}  // namespace

void addLpPoolKernels(KernelRegistry& r);      // kernels/lp_pool.cpp
void addMaxRoiPoolKernels(KernelRegistry& r);  // kernels/max_roi_pool.cpp

// MatMul and Gemm of the types oneDNN's kernels do not take (float64 and the integers), which
// they hand here: accumulated in the operands' type (in double for floats), as ONNX defines
// them. Gemm: alpha * A' B' + beta * C, A' and B' transposed as asked, C broadcast.
class MatMulReference : public Kernel {
 public:
  explicit MatMulReference(const KernelInit& init)
      : gemm_(init.opType == "Gemm"),
        transA_(init.attrs.getInt("transA", 0) != 0),
        transB_(init.attrs.getInt("transB", 0) != 0),
        alpha_(init.attrs.getFloat("alpha", 1.0f)),
        beta_(init.attrs.getFloat("beta", 1.0f)) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      return Status::error(std::string("A is ") + dtypeName(a.dtype()) + " and B " +
                           dtypeName(b.dtype()) + "; they must be of one type");
    Shape sa = a.shape(), sb = b.shape();
    if (gemm_) {
      if (sa.size() != 2 || sb.size() != 2) return Status::error("Gemm needs 2-D A and B");
      if (transA_) std::swap(sa[0], sa[1]);
      if (transB_) std::swap(sb[0], sb[1]);
    }
    auto geo = matMulGeometry(sa, sb);
    if (!geo) return geo.status();
    const int64_t M = geo->M, K = geo->K, N = geo->N;
    DW_ALLOC(y, ctx.output(0, a.dtype(), geo->out));
    const bool hasC = gemm_ && ctx.hasInput(2) && beta_ != 0;
    if (hasC) {
      auto shape = broadcastShapes({ctx.input(2).shape(), geo->out});
      if (!shape || *shape != geo->out)
        return Status::error("C of shape " + shapeToString(ctx.input(2).shape()) +
                             " does not broadcast to " + shapeToString(geo->out));
    }
    return dispatchNumeric(a.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* py = y->data<T>();
      // Element (m, k) of A's matrix at `oa` and (k, n) of B's, transposed or not.
      auto atA = [&](int64_t oa, int64_t m, int64_t k) {
        return pa[oa * M * K + (transA_ ? k * M + m : m * K + k)];
      };
      auto atB = [&](int64_t ob, int64_t k, int64_t n) {
        return pb[ob * K * N + (transB_ ? n * K + k : k * N + n)];
      };
      // Row by row, k outside n: the inner loop runs along a row of B (when B is not
      // transposed) and of the accumulators.
      std::vector<Acc> acc(static_cast<size_t>(N));
      for (int64_t bi = 0; bi < geo->batches; ++bi) {
        const auto [oa, ob] = geo->operands(bi);
        for (int64_t m = 0; m < M; ++m) {
          std::fill(acc.begin(), acc.end(), Acc(0));
          for (int64_t k = 0; k < K; ++k) {
            const Acc av = static_cast<Acc>(atA(oa, m, k));
            for (int64_t n = 0; n < N; ++n) acc[n] += av * static_cast<Acc>(atB(ob, k, n));
          }
          for (int64_t n = 0; n < N; ++n)
            py[(bi * M + m) * N + n] = static_cast<T>(
                gemm_ ? static_cast<Acc>(acc[n] * static_cast<Acc>(alpha_)) : acc[n]);
        }
      }
      if (hasC) {
        const T beta = static_cast<T>(beta_);
        broadcastBinary(py, geo->out, ctx.input(2).data<T>(), ctx.input(2).shape(), py, geo->out,
                        [beta](T v, T c) { return static_cast<T>(v + beta * c); });
      }
      return Status();
    });
  }

 private:
  bool gemm_, transA_, transB_;
  float alpha_, beta_;
};

// Conv of the types oneDNN's kernel does not take (float64), which it hands here: the direct
// convolution (direct_conv.h), accumulated in double, plus the bias.
class ConvReference : public Kernel {
 public:
  explicit ConvReference(const KernelInit& init) : attrs_(init.attrs) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    const Tensor* b = ctx.hasInput(2) ? &ctx.input(2) : nullptr;
    if (x.dtype() != w.dtype() || (b && b->dtype() != x.dtype()))
      return Status::error(
          std::string("X is ") + dtypeName(x.dtype()) + ", W " + dtypeName(w.dtype()) +
          (b ? std::string(" and B ") + dtypeName(b->dtype()) : "") + "; they must be of one type");
    if (x.dtype() != DType::kDouble && x.dtype() != DType::kFloat)
      return Status::error(std::string("dtype ") + dtypeName(x.dtype()) + " is not supported");
    const std::vector<int64_t> given = attrs_.getInts("kernel_shape");
    auto g = convGeometry(x.shape(), w.shape(), attrs_);
    if (!g) return g.status();
    if (!given.empty() && given != g->kernel)
      return Status::error("kernel_shape " + shapeToString(given) + " does not match the weights " +
                           shapeToString(w.shape()));
    if (b && b->size() != g->oc)
      return Status::error("B has " + std::to_string(b->size()) + " values for " +
                           std::to_string(g->oc) + " output channels");
    DW_ALLOC(y, ctx.output(0, x.dtype(), g->out));
    auto run = [&](auto z) {
      using T = decltype(z);
      const T* xv = x.data<T>();
      const T* wv = w.data<T>();
      T* yv = y->data<T>();
      directConv<double>(
          *g, [&](int64_t xi, int64_t wi, int64_t) { return double(xv[xi]) * double(wv[wi]); },
          [&](int64_t at, int64_t oc, double acc) {
            yv[at] = static_cast<T>(acc + (b ? double(b->data<T>()[oc]) : 0.0));
          });
    };
    if (x.dtype() == DType::kDouble)
      run(double{});
    else
      run(float{});
    return Status();
  }

 private:
  Attributes attrs_;
};

void addNnKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "Conv", 1, kMaxOpset, &makeKernel<ConvReference>);
  r.add(kReferenceTable, "MatMul", 1, kMaxOpset, &makeKernel<MatMulReference>);
  r.add(kReferenceTable, "Gemm", 1, kMaxOpset, &makeKernel<MatMulReference>);
  r.add(kReferenceTable, "BatchNormalization", 1, kMaxOpset, &makeKernel<BatchNormReference>);
  r.add(kReferenceTable, "MaxPool", 1, kMaxOpset, &makeKernel<MaxPoolReference>);
  r.add(kReferenceTable, "MaxUnpool", 9, kMaxOpset, &makeKernel<MaxUnpool>, false);
  r.add(kReferenceTable, "InstanceNormalization", 1, kMaxOpset, &makeKernel<InstanceNorm>);
  r.add(kReferenceTable, "RMSNormalization", 23, kMaxOpset, &makeKernel<RmsNorm>);
  r.add(kReferenceTable, "GroupNormalization", 18, kMaxOpset, &makeKernel<GroupNorm>);
  r.add(kReferenceTable, "Resize", 10, kMaxOpset, &makeKernel<ResizeKernel>);
  r.add(kReferenceTable, "Upsample", 7, 9, &makeKernel<ResizeKernel>);
  r.add(kReferenceTable, "GridSample", 16, kMaxOpset, &makeKernel<GridSample>);
  r.add(kReferenceTable, "RoiAlign", 10, kMaxOpset, &makeKernel<RoiAlign>);
  addLpPoolKernels(r);
  addMaxRoiPoolKernels(r);
}

}  // namespace dw::engine
