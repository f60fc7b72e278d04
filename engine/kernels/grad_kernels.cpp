// Backward kernels of domain "com.deepwire.grad" in plain C++ (float and double, so gradient
// checks can run in double): reductions to a broadcast shape, activation gradients, softmax and
// loss gradients, and the scatter-style gradients of data-movement ops. The oneDNN-backed ones
// (convolution, pooling, batch normalization) are in engine/onednn/grad_kernels.cpp.
#include <algorithm>
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/slice_plan.h"
#include "engine/kernels/tables.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"
#include "ops/reduce_table.h"

namespace dw::engine {

void addOneDnnGradKernels(KernelRegistry& r);  // onednn/grad_kernels.cpp
void addResizeGradKernels(KernelRegistry& r);  // kernels/resize_grad.cpp

namespace {

constexpr const char* kGrad = dw::kGradDomain;

// dY summed down to the shape of input 1 (the operand that was broadcast).
class SumToShape : public Kernel {
 public:
  explicit SumToShape(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& g = ctx.input(0);
    const Shape& target = ctx.input(1).shape();
    if (sumToShapeByView(ctx, g, target)) return Status();
    auto b = broadcastShapes({g.shape(), target});
    if (!b || *b != g.shape())
      return Status::error("cannot reduce a gradient of shape " + shapeToString(g.shape()) +
                           " to " + shapeToString(target));
    DW_ALLOC(y, ctx.output(0, g.dtype(), target));
    return dispatchFloat(g.dtype(), [&](auto z) {
      using T = decltype(z);
      T* o = y->data<T>();
      std::fill_n(o, y->size(), T(0));
      const T* s = g.data<T>();
      // Fast path: target is a suffix of the source (bias gradients).
      Shape tail(g.shape().end() - std::min(target.size(), g.rank()), g.shape().end());
      Shape tnorm = target;
      while (!tnorm.empty() && tnorm.front() == 1 && tnorm.size() > tail.size())
        tnorm.erase(tnorm.begin());
      if (tnorm == tail) {
        const int64_t inner = numElements(tail), outer = g.size() / std::max<int64_t>(inner, 1);
        for (int64_t i = 0; i < outer; ++i)
          for (int64_t j = 0; j < inner; ++j) o[j] += s[i * inner + j];
        return Status();
      }
      std::array<const Shape*, 1> ins{&target};
      forEachBroadcast<1>(g.shape(), ins,
                          [&](int64_t i, const std::array<int64_t, 1>& off) { o[off[0]] += s[i]; });
      return Status();
    });
  }
};

// dX = dY * f'(X) for the ops of ops/unary_table.h and Clip, f' from X and/or Y = f(X).
class UnaryGrad : public Kernel {
 public:
  explicit UnaryGrad(const KernelInit& init) : clip_(init.attrs.getString("op") == "Clip") {
    const std::string op = init.attrs.getString("op");
    if (clip_) {
      lo_ = init.attrs.getFloat("min", -std::numeric_limits<float>::infinity());
      hi_ = init.attrs.getFloat("max", std::numeric_limits<float>::infinity());
      return;
    }
    const ops::UnaryOp* row = ops::findUnaryOp(op);
    if (!row || !row->gradient) {
      fail("UnaryGrad: no gradient for op '" + op + "'");
      return;
    }
    auto u = resolveUnary(*row, init.attrs);
    if (!u)
      fail(u.status().message());
    else
      u_ = *u;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    if (dy.shape() != x.shape() || y.shape() != x.shape())
      return Status::error("UnaryGrad: dY, X and Y must have the same shape");
    double lo = lo_, hi = hi_;
    if (clip_) {
      if (ctx.hasInput(3)) lo = ctx.input(3).getDouble(0);
      if (ctx.hasInput(4)) hi = ctx.input(4).getDouble(0);
    }
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), dy.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* __restrict g = dy.data<T>();
      const T* __restrict px = x.data<T>();
      const T* __restrict py = y.data<T>();
      T* __restrict o = dx->data<T>();
      const int64_t n = dy.size();
      if (clip_) {
        const T l = static_cast<T>(lo), h = static_cast<T>(hi);
        for (int64_t i = 0; i < n; ++i) o[i] = g[i] * (px[i] >= l && px[i] <= h ? T(1) : T(0));
        return Status();
      }
      ops::visitUnary(u_.fn, [&](auto f) {
        constexpr ops::UnaryFn kF = decltype(f)::value;
        const ops::UnaryParams p = u_.params;
        for (int64_t i = 0; i < n; ++i) o[i] = g[i] * ops::unaryDerivative<kF>(px[i], py[i], p);
      });
      return Status();
    });
  }

 private:
  bool clip_;
  float lo_ = 0, hi_ = 0;
  UnaryInstance u_;
};

// Splits a shape around `axis` into (outer, len, inner).
void splitAxis(const Shape& s, int64_t axis, bool legacy, int64_t* outer, int64_t* len,
               int64_t* inner) {
  *outer = 1;
  *len = 1;
  *inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis)
      *outer *= s[d];
    else if (d == axis || legacy)
      *len *= s[d];
    else
      *inner *= s[d];
  }
}

class SoftmaxGrad : public Kernel {
 public:
  explicit SoftmaxGrad(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", -1)),
        log_(init.attrs.getInt("log", 0) != 0),
        legacy_(init.attrs.getInt("legacy", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& y = ctx.input(1);
    if (!validAxis(axis_, y.rank())) return Status::error("SoftmaxGrad: axis out of range");
    int64_t outer, len, inner;
    splitAxis(y.shape(), normAxis(axis_, y.rank()), legacy_, &outer, &len, &inner);
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), dy.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      const T* py = y.data<T>();
      T* o = dx->data<T>();
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t c = 0; c < inner; ++c) {
          const int64_t base = a * len * inner + c;
          T s = 0;
          if (log_) {
            for (int64_t k = 0; k < len; ++k) s += g[base + k * inner];
            for (int64_t k = 0; k < len; ++k) {
              const int64_t i = base + k * inner;
              o[i] = g[i] - std::exp(py[i]) * s;
            }
          } else {
            for (int64_t k = 0; k < len; ++k) s += g[base + k * inner] * py[base + k * inner];
            for (int64_t k = 0; k < len; ++k) {
              const int64_t i = base + k * inner;
              o[i] = py[i] * (g[i] - s);
            }
          }
        }
      return Status();
    });
  }

 private:
  int64_t axis_;
  bool log_, legacy_;
};

// Shared by the two classification losses: per-sample weights, ignore_index and the reduction.
struct LossScale {
  std::string reduction;
  bool hasIgnore = false;
  int64_t ignore = 0;
  explicit LossScale(const KernelInit& init)
      : reduction(init.attrs.getString("reduction", "mean")),
        hasIgnore(init.attrs.has("ignore_index")),
        ignore(init.attrs.getInt("ignore_index", 0)) {}

  // Fills w[i] (per sample) with weight * upstream gradient / normaliser.
  Status sampleScales(const KernelContext& ctx, const Tensor& labels, int64_t classes,
                      const Tensor* weights, const Tensor& dLoss, std::vector<double>& w) const {
    const int64_t n = labels.size();
    w.assign(n, 0.0);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = labels.getInt(i);
      if (hasIgnore && t == ignore) continue;
      if (t < 0 || t >= classes)
        return Status::error("label " + std::to_string(t) + " is outside [0, " +
                             std::to_string(classes) + ")");
      w[i] = weights ? weights->getDouble(t) : 1.0;
      total += w[i];
    }
    if (reduction == "none") {
      if (dLoss.size() != n) return Status::error("loss gradient does not match the labels");
      for (int64_t i = 0; i < n; ++i) w[i] *= dLoss.getDouble(i);
    } else {
      double s = dLoss.getDouble(0);
      if (reduction == "mean") s = total > 0 ? s / total : 0.0;
      for (auto& v : w) v *= s;
    }
    return Status();
  }
};

// d(scores) of SoftmaxCrossEntropyLoss from its log-probabilities: softmax - onehot.
class SoftmaxCrossEntropyLossGrad : public Kernel {
 public:
  explicit SoftmaxCrossEntropyLossGrad(const KernelInit& init) : scale_(init) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dl = ctx.input(0);
    const Tensor& lp = ctx.input(1);
    const Tensor& labels = ctx.input(2);
    if (lp.rank() < 2) return Status::error("log_prob must have rank >= 2");
    const int64_t n = lp.dim(0), c = lp.dim(1), d = lp.size() / std::max<int64_t>(n * c, 1);
    if (labels.size() != n * d) return Status::error("labels do not match the scores");
    std::vector<double> w;
    DW_RETURN_IF_ERROR(
        scale_.sampleScales(ctx, labels, c, ctx.hasInput(3) ? &ctx.input(3) : nullptr, dl, w));
    DW_ALLOC(dx, ctx.output(0, lp.dtype(), lp.shape()));
    return dispatchFloat(lp.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* p = lp.data<T>();
      T* o = dx->data<T>();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < c; ++k)
          for (int64_t j = 0; j < d; ++j) {
            const int64_t s = i * d + j, idx = (i * c + k) * d + j;
            const T sw = static_cast<T>(w[s]);
            o[idx] =
                sw == 0 ? T(0) : sw * (std::exp(p[idx]) - (labels.getInt(s) == k ? T(1) : T(0)));
          }
      return Status();
    });
  }

 private:
  LossScale scale_;
};

class NegativeLogLikelihoodLossGrad : public Kernel {
 public:
  explicit NegativeLogLikelihoodLossGrad(const KernelInit& init) : scale_(init) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dl = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& labels = ctx.input(2);
    if (x.rank() < 2) return Status::error("input must have rank >= 2");
    const int64_t n = x.dim(0), c = x.dim(1), d = x.size() / std::max<int64_t>(n * c, 1);
    if (labels.size() != n * d) return Status::error("target does not match the input");
    std::vector<double> w;
    DW_RETURN_IF_ERROR(
        scale_.sampleScales(ctx, labels, c, ctx.hasInput(3) ? &ctx.input(3) : nullptr, dl, w));
    DW_ALLOC(dx, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) {
          const int64_t s = i * d + j;
          if (w[s] == 0) continue;
          o[(i * c + labels.getInt(s)) * d + j] = static_cast<T>(-w[s]);
        }
      return Status();
    });
  }

 private:
  LossScale scale_;
};

// Gradient of every Reduce* op: dY broadcast back over the reduced axes, times the op's
// derivative.
class ReduceGrad : public Kernel {
 public:
  explicit ReduceGrad(const KernelInit& init)
      : axes_(init.attrs.getInts("axes")),
        noop_(init.attrs.getInt("noop_with_empty_axes", 0) != 0) {
    const ops::ReduceOp* row = ops::findReduceOp(init.attrs.getString("op"));
    if (!row || !row->gradient)
      fail("ReduceGrad: no gradient for op '" + init.attrs.getString("op") + "'");
    else
      fn_ = row->fn;
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    // The forward reduction's geometry: x's shape with the reduced axes 1, as dY has it.
    auto plan =
        planReduce(x.shape(), ctx.hasInput(3) ? ctx.input(3).toInt64Vector() : axes_, true, noop_);
    if (!plan) return plan.status().withContext("ReduceGrad");
    if (plan->empty) {
      ctx.setOutput(0, ctx.inputValue(0));
      return Status();
    }
    const Shape& red = plan->outKeep;
    const int64_t count = x.size() / std::max<int64_t>(numElements(red), 1);
    if (numElements(red) != dy.size() || y.size() != dy.size())
      return Status::error("ReduceGrad: gradient shape does not match the reduction");
    DW_ALLOC(dx, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      const T* px = x.data<T>();
      const T* py = y.data<T>();
      T* o = dx->data<T>();
      std::array<const Shape*, 1> ins{&red};
      auto run = [&](auto f) {
        forEachBroadcast<1>(x.shape(), ins, [&](int64_t i, const std::array<int64_t, 1>& off) {
          o[i] = f(g[off[0]], px[i], py[off[0]]);
        });
      };
      const T inv = T(1) / static_cast<T>(std::max<int64_t>(count, 1));
      if (fn_ == R::kSum)
        run([](T gg, T, T) { return gg; });
      else if (fn_ == R::kMean)
        run([inv](T gg, T, T) { return gg * inv; });
      else if (fn_ == R::kMax || fn_ == R::kMin)
        run([](T gg, T v, T r) { return v == r ? gg : T(0); });
      else if (fn_ == R::kL1)
        run([](T gg, T v, T) { return v > 0 ? gg : (v < 0 ? -gg : T(0)); });
      else if (fn_ == R::kL2)
        run([](T gg, T v, T r) { return r == 0 ? T(0) : gg * v / r; });
      else if (fn_ == R::kSumSquare)
        run([](T gg, T v, T) { return 2 * gg * v; });
      else if (fn_ == R::kLogSumExp)
        run([](T gg, T v, T r) { return gg * std::exp(v - r); });
      else if (fn_ == R::kLogSum)  // Y = log(S): dY / S, and S = exp(Y)
        run([](T gg, T, T r) { return gg * std::exp(-r); });
      else if (fn_ == R::kProd) {
        // d(prod)/dv is the product of the others: r / v unless v is 0, where it is the
        // product of the group's nonzeros when v is the group's only zero (0 otherwise).
        std::vector<int64_t> zeros(dy.size(), 0);
        std::vector<T> nonzero(dy.size(), T(1));
        forEachBroadcast<1>(x.shape(), ins, [&](int64_t i, const std::array<int64_t, 1>& off) {
          if (px[i] == 0)
            ++zeros[off[0]];
          else
            nonzero[off[0]] *= px[i];
        });
        forEachBroadcast<1>(x.shape(), ins, [&](int64_t i, const std::array<int64_t, 1>& off) {
          const int64_t z = zeros[off[0]];
          const T d = z == 0 ? py[off[0]] / px[i] : (z == 1 && px[i] == 0 ? nonzero[off[0]] : T(0));
          o[i] = g[off[0]] * d;
        });
      }
      return Status();
    });
  }

 private:
  using R = ops::ReduceFn;
  R fn_ = R::kSum;
  std::vector<int64_t> axes_;
  bool noop_;
};

// MaxUnpool's gradient: dY (cropped to the default output shape) read at each index of I. Where
// I repeats an index, the forward kept the last write, so only that element gets the gradient.
class MaxUnpoolGrad : public Kernel {
 public:
  explicit MaxUnpoolGrad(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), ind.shape()));
    std::vector<bool> taken(dy.size(), false);
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      for (int64_t i = ind.size(); i-- > 0;) {
        const int64_t at = ind.getInt(i);
        if (at < 0 || at >= dy.size())
          return Status::error("MaxUnpoolGrad: index " + std::to_string(at) +
                               " is outside the output");
        o[i] = taken[at] ? T(0) : g[at];
        taken[at] = true;
      }
      return Status();
    });
  }
};

// Scatter-add of dY into the gathered rows.
class GatherGrad : public Kernel {
 public:
  explicit GatherGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& data = ctx.input(1);
    const Tensor& idx = ctx.input(2);
    if (!validAxis(axis_, data.rank())) return Status::error("GatherGrad: axis out of range");
    const int64_t ax = normAxis(axis_, data.rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < ax; ++d) outer *= data.dim(d);
    for (size_t d = ax + 1; d < data.rank(); ++d) inner *= data.dim(d);
    const int64_t len = data.dim(ax), k = idx.size();
    if (dy.size() != outer * k * inner) return Status::error("GatherGrad: shape mismatch");
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), data.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t j = 0; j < k; ++j) {
          int64_t r = idx.getInt(j);
          if (r < 0) r += len;
          if (r < 0 || r >= len) return Status::error("GatherGrad: index out of range");
          const T* src = g + (a * k + j) * inner;
          T* dst = o + (a * len + r) * inner;
          for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
      return Status();
    });
  }

 private:
  int64_t axis_;
};

// Zeros with dY scattered into the sliced positions.
class SliceGrad : public Kernel {
 public:
  explicit SliceGrad(const KernelInit& init)
      : opset_(init.attrs.getInt("opset", 13)),
        starts_(init.attrs.getInts("starts")),
        ends_(init.attrs.getInts("ends")),
        axes_(init.attrs.getInts("axes")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    auto plan = opset_ >= 10 ? planSlice(x.shape(), intsInput(ctx, 2), intsInput(ctx, 3),
                                         intsInput(ctx, 4), intsInput(ctx, 5))
                             : planSlice(x.shape(), starts_, ends_, axes_, {});
    if (!plan) return plan.status();
    if (dy.shape() != plan->out)
      return Status::error("SliceGrad: dY has shape " + shapeToString(dy.shape()) + ", the slice " +
                           shapeToString(plan->out));
    const size_t r = x.rank();
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), x.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      std::vector<int64_t> idx(r, 0);
      const int64_t n = dy.size();
      for (int64_t i = 0; i < n; ++i) {
        int64_t off = plan->base;
        for (size_t d = 0; d < r; ++d) off += idx[d] * plan->strides[d];
        o[off] = g[i];
        for (size_t d = r; d-- > 0;) {
          if (++idx[d] < dy.dim(d)) break;
          idx[d] = 0;
        }
      }
      return Status();
    });
  }

 private:
  int64_t opset_;
  std::vector<int64_t> starts_, ends_, axes_;
};

// dY split back into the pieces Concat joined (inputs 1.. give their shapes).
class ConcatGrad : public Kernel {
 public:
  explicit ConcatGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    if (!validAxis(axis_, dy.rank())) return Status::error("ConcatGrad: axis out of range");
    const int64_t ax = normAxis(axis_, dy.rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < ax; ++d) outer *= dy.dim(d);
    for (size_t d = ax + 1; d < dy.rank(); ++d) inner *= dy.dim(d);
    const size_t es = dtypeSize(dy.dtype());
    const int64_t rowBytes = dy.dim(ax) * inner * static_cast<int64_t>(es);
    int64_t offset = 0;
    for (size_t i = 1; i < ctx.numInputs(); ++i) {
      const Tensor& xi = ctx.input(i);
      const int64_t chunk = xi.dim(ax) * inner * static_cast<int64_t>(es);
      if (ctx.wantsOutput(i - 1)) {
        DW_ALLOC(o, ctx.output(i - 1, dy.dtype(), xi.shape()));
        const char* src = static_cast<const char*>(dy.raw()) + offset;
        char* dst = static_cast<char*>(o->raw());
        for (int64_t a = 0; a < outer; ++a)
          std::memcpy(dst + a * chunk, src + a * rowBytes, static_cast<size_t>(chunk));
      }
      offset += chunk;
    }
    return Status();
  }

 private:
  int64_t axis_;
};

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
// the random stream continues from call to call, so every step drops different units while a
// given seed still reproduces the whole run.
class DropoutTraining : public Kernel {
 public:
  explicit DropoutTraining(const KernelInit& init)
      : ratio_(init.attrs.getFloat("ratio", 0.5f)),
        state_(static_cast<uint64_t>(init.attrs.getInt("seed", 0)) * 0x9E3779B97F4A7C15ull + 1) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const double ratio = ctx.hasInput(1) ? ctx.input(1).getDouble(0) : ratio_;
    if (ratio < 0 || ratio >= 1) return Status::error("Dropout ratio must be in [0, 1)");
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    DW_ALLOC(m, ctx.output(1, DType::kBool, x.shape()));
    bool* pm = m->data<bool>();
    for (int64_t i = 0; i < x.size(); ++i) {
      state_ ^= state_ << 13;
      state_ ^= state_ >> 7;
      state_ ^= state_ << 17;
      pm[i] = static_cast<double>(state_ >> 11) / 9007199254740992.0 >= ratio;
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
  uint64_t state_;
};

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
    std::vector<int64_t> at(static_cast<size_t>(len));
    forEachBroadcast<1>(tail, {&scale.shape()},
                        [&](int64_t k, const std::array<int64_t, 1>& off) { at[k] = off[0]; });
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

void addGradKernels(KernelRegistry& r) {
  const char* h = "host";
  auto add = [&](const char* op, KernelFactory f, bool halfViaFloat = true) {
    r.add(h, op, 1, kMaxOpset, f, halfViaFloat, kGrad);
  };
  add("SumToShape", &makeKernel<SumToShape>);
  r.setShapeOnlyInputs(h, "SumToShape", 2u, kGrad);
  add("UnaryGrad", &makeKernel<UnaryGrad>);
  add("SoftmaxGrad", &makeKernel<SoftmaxGrad>);
  add("SoftmaxCrossEntropyLossGrad", &makeKernel<SoftmaxCrossEntropyLossGrad>);
  add("NegativeLogLikelihoodLossGrad", &makeKernel<NegativeLogLikelihoodLossGrad>);
  add("ReduceGrad", &makeKernel<ReduceGrad>);
  add("GatherGrad", &makeKernel<GatherGrad>, false);
  add("MaxUnpoolGrad", &makeKernel<MaxUnpoolGrad>);
  add("SliceGrad", &makeKernel<SliceGrad>);
  add("ConcatGrad", &makeKernel<ConcatGrad>, false);
  add("DropoutGrad", &makeKernel<DropoutGrad>, false);
  add("DropoutTraining", &makeKernel<DropoutTraining>);
  add("LayerNormalizationGrad", &makeKernel<LayerNormalizationGrad>);
  addResizeGradKernels(r);
  addOneDnnGradKernels(r);
}

}  // namespace dw::engine
