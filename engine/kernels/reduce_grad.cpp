// ReduceGrad (domain "com.deepwire.grad"), the gradient of every Reduce* op of
// ops/reduce_table.h, in plain C++: float and double, so gradient checks can run in double.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"
#include "ops/reduce_table.h"

namespace dw::engine {

namespace {

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

}  // namespace

void addReduceGradKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "ReduceGrad", 1, kMaxOpset, &makeKernel<ReduceGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
