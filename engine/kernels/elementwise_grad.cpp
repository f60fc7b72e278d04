// The gradients of elementwise ops (domain "com.deepwire.grad") in plain C++, float and double
// (gradient checks run in double): an activation's derivative (UnaryGrad) and the sum of a
// broadcast operand's gradient back to its shape (SumToShape).
#include <algorithm>
#include <array>
#include <limits>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

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
      // On the session's threads: ReLU6's gradient (Clip with min and max as inputs, which
      // oneDNN's eltwise does not take) ran on one, a quarter of MobileNetV2's training step.
      if (clip_) {
        const T l = static_cast<T>(lo), h = static_cast<T>(hi);
        forThreadRanges(n, n, [&](int64_t from, int64_t to) {
#pragma omp simd
          for (int64_t i = from; i < to; ++i)
            o[i] = g[i] * (px[i] >= l && px[i] <= h ? T(1) : T(0));
        });
        return Status();
      }
      ops::visitUnary(u_.fn, [&](auto f) {
        constexpr ops::UnaryFn kF = decltype(f)::value;
        const ops::UnaryParams p = u_.params;
        forThreadRanges(n, n, [&](int64_t from, int64_t to) {
          for (int64_t i = from; i < to; ++i)
            o[i] = g[i] * ops::unaryDerivative<kF>(px[i], py[i], p);
        });
      });
      return Status();
    });
  }

 private:
  bool clip_;
  float lo_ = 0, hi_ = 0;
  UnaryInstance u_;
};

}  // namespace

void addElementwiseGradKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "SumToShape", 1, kMaxOpset, &makeKernel<SumToShape>, true,
        dw::kGradDomain);
  r.setShapeOnlyInputs(kReferenceTable, "SumToShape", 2u, dw::kGradDomain);
  r.add(kReferenceTable, "UnaryGrad", 1, kMaxOpset, &makeKernel<UnaryGrad>, true, dw::kGradDomain);
}

}  // namespace dw::engine
