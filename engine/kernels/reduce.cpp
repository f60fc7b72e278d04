// Reductions, arg-reductions and normalized exponentials (Softmax family) in plain C++.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "ops/reduce_table.h"

namespace dw::engine {

namespace {

using ROp = ops::ReduceFn;

template <class F>
void walk(const Shape& in, const std::vector<int64_t>& ost, F&& f) {
  const int64_t total = numElements(in);
  if (total == 0) return;
  const size_t r = in.size();
  if (r == 0) {
    f(0, 0);
    return;
  }
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  const int64_t inner = in[r - 1], is = ost[r - 1];
  for (int64_t base = 0; base < total; base += inner) {
    for (int64_t j = 0; j < inner; ++j) f(base + j, off + j * is);
    for (size_t d = r - 1; d-- > 0;) {
      ++idx[d];
      off += ost[d];
      if (idx[d] < in[d]) break;
      off -= ost[d] * in[d];
      idx[d] = 0;
    }
  }
}

class Reduce : public Kernel {
 public:
  explicit Reduce(const KernelInit& init) : opset_(init.opset) {
    const ops::ReduceOp* row = ops::findReduceOp(init.opType);
    if (!row) {
      fail("no reduction " + init.opType);
      return;
    }
    op_ = row->fn;
    keep_ = init.attrs.getInt("keepdims") != 0;
    noop_ = init.attrs.getInt("noop_with_empty_axes", 0) != 0;
    axes_ = init.attrs.getInts("axes");
    axesInput_ = row->axesAsInput(opset_);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = axesInput_ ? intsInput(ctx, 1) : axes_;
    auto plan = planReduce(x.shape(), axes, keep_, noop_ && axesInput_);
    if (!plan) return plan.status();
    if (plan->empty) return copyToOutput(ctx, 0, x, x.shape());
    DW_ALLOC(y, ctx.output(0, x.dtype(), plan->outShape));
    return dispatchNumeric(x.dtype(), [&](auto z) { return run<decltype(z)>(x, *y, *plan); });
  }

 private:
  // A log or square root, computed in double, back in the accumulator's type: an integer one
  // takes -inf (the log of an empty or zero sum), inf and NaN as its nearest value or 0, where a
  // plain conversion is undefined.
  template <class Acc>
  static Acc fromDouble(double v) {
    if constexpr (std::is_floating_point_v<Acc>) {
      return static_cast<Acc>(v);
    } else {
      if (std::isnan(v)) return Acc(0);
      if (v <= static_cast<double>(std::numeric_limits<Acc>::lowest()))
        return std::numeric_limits<Acc>::lowest();
      if (v >= static_cast<double>(std::numeric_limits<Acc>::max()))
        return std::numeric_limits<Acc>::max();
      return static_cast<Acc>(v);
    }
  }

  template <class T>
  Status run(const Tensor& x, Tensor& y, const ReducePlan& p) {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const int64_t on = y.size();
    const int64_t count = on ? x.size() / on : 0;
    const T* s = x.data<T>();
    std::vector<Acc> acc(static_cast<size_t>(on));
    const Shape& in = x.shape();
    const auto& ost = p.outStrides;
    switch (op_) {
      case ROp::kMax:
      case ROp::kMin: {
        const bool mx = op_ == ROp::kMax;
        std::fill(acc.begin(), acc.end(),
                  mx ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max());
        if constexpr (std::is_floating_point_v<T>) {
          if (count == 0)
            std::fill(
                acc.begin(), acc.end(),
                mx ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity());
        }
        walk(in, ost, [&](int64_t i, int64_t o) {
          Acc v = static_cast<Acc>(s[i]);
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(v)) {
              acc[o] = v;
              return;
            }
            if (std::isnan(acc[o])) return;
          }
          acc[o] = mx ? std::max(acc[o], v) : std::min(acc[o], v);
        });
        break;
      }
      case ROp::kProd:
        std::fill(acc.begin(), acc.end(), Acc(1));
        walk(in, ost, [&](int64_t i, int64_t o) { acc[o] = static_cast<Acc>(acc[o] * s[i]); });
        break;
      case ROp::kLogSumExp: {
        std::vector<Acc> mx(static_cast<size_t>(on), std::numeric_limits<Acc>::lowest());
        walk(in, ost, [&](int64_t i, int64_t o) { mx[o] = std::max<Acc>(mx[o], s[i]); });
        walk(in, ost, [&](int64_t i, int64_t o) {
          acc[o] += static_cast<Acc>(std::exp(static_cast<double>(s[i] - mx[o])));
        });
        for (int64_t o = 0; o < on; ++o)
          acc[o] = fromDouble<Acc>(std::log(static_cast<double>(acc[o])) + mx[o]);
        break;
      }
      default:
        walk(in, ost, [&](int64_t i, int64_t o) {
          Acc v = static_cast<Acc>(s[i]);
          if (op_ == ROp::kL1) v = v < 0 ? static_cast<Acc>(-v) : v;
          if (op_ == ROp::kL2 || op_ == ROp::kSumSquare) v = static_cast<Acc>(v * v);
          acc[o] = static_cast<Acc>(acc[o] + v);
        });
        for (int64_t o = 0; o < on; ++o) {
          if (op_ == ROp::kMean)
            acc[o] = count ? static_cast<Acc>(acc[o] / static_cast<Acc>(count)) : Acc(0);
          if (op_ == ROp::kL2) acc[o] = fromDouble<Acc>(std::sqrt(static_cast<double>(acc[o])));
          if (op_ == ROp::kLogSum) acc[o] = fromDouble<Acc>(std::log(static_cast<double>(acc[o])));
        }
    }
    T* d = y.data<T>();
    for (int64_t o = 0; o < on; ++o) {
      if constexpr (std::is_floating_point_v<T> && !std::is_same_v<T, Acc>) {
        // A double sum beyond float's range is inf, as float arithmetic would have made it (the
        // plain conversion is undefined there).
        const Acc v = acc[o];
        d[o] = v > static_cast<Acc>(std::numeric_limits<T>::max())
                   ? std::numeric_limits<T>::infinity()
                   : (v < static_cast<Acc>(std::numeric_limits<T>::lowest())
                          ? -std::numeric_limits<T>::infinity()
                          : static_cast<T>(v));
      } else {
        d[o] = static_cast<T>(acc[o]);
      }
    }
    return Status();
  }

  int opset_;
  ROp op_;
  bool keep_, noop_, axesInput_;
  std::vector<int64_t> axes_;
};

class ArgReduce : public Kernel {
 public:
  explicit ArgReduce(const KernelInit& init)
      : max_(init.opType == "ArgMax"),
        axis_(init.attrs.getInt("axis")),
        keep_(init.attrs.getInt("keepdims") != 0),
        last_(init.attrs.getInt("select_last_index", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    Shape out;
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (static_cast<int64_t>(d) < a) outer *= x.dim(d);
      if (static_cast<int64_t>(d) > a) inner *= x.dim(d);
      if (static_cast<int64_t>(d) != a || keep_)
        out.push_back(static_cast<int64_t>(d) == a ? 1 : x.dim(d));
    }
    const int64_t n = x.dim(a);
    DW_ALLOC(y, ctx.output(0, DType::kInt64, out));
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.data<T>();
      int64_t* d = y->data<int64_t>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* p = s + o * n * inner + i;
          int64_t best = 0;
          for (int64_t k = 1; k < n; ++k) {
            const T v = p[k * inner], b = p[best * inner];
            const bool better = max_ ? (last_ ? v >= b : v > b) : (last_ ? v <= b : v < b);
            if (better) best = k;
          }
          d[o * inner + i] = best;
        }
      return Status();
    });
  }

 private:
  bool max_;
  int64_t axis_;
  bool keep_, last_;
};

// Softmax, LogSoftmax, Hardmax. Before opset 13 the input is coerced to 2-D at `axis`;
// from 13 the op normalizes along `axis` alone.
class SoftmaxKernel : public Kernel {
 public:
  explicit SoftmaxKernel(const KernelInit& init)
      : kind_(init.opType == "Softmax" ? 0 : (init.opType == "LogSoftmax" ? 1 : 2)),
        legacy_(init.opset < 13),
        axis_(init.attrs.getInt("axis")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    int64_t outer = 1, n = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (static_cast<int64_t>(d) < a)
        outer *= x.dim(d);
      else if (legacy_ || static_cast<int64_t>(d) == a)
        n *= x.dim(d);
      else
        inner *= x.dim(d);
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.data<T>();
      T* d = y->data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* p = s + o * n * inner + i;
          T* q = d + o * n * inner + i;
          T mx = -std::numeric_limits<T>::infinity();
          int64_t arg = 0;
          for (int64_t k = 0; k < n; ++k)
            if (p[k * inner] > mx) {
              mx = p[k * inner];
              arg = k;
            }
          if (kind_ == 2) {
            for (int64_t k = 0; k < n; ++k) q[k * inner] = k == arg ? T(1) : T(0);
            continue;
          }
          T sum = 0;
          for (int64_t k = 0; k < n; ++k) sum += std::exp(p[k * inner] - mx);
          if (kind_ == 0) {
            const T inv = T(1) / sum;
            for (int64_t k = 0; k < n; ++k) q[k * inner] = std::exp(p[k * inner] - mx) * inv;
          } else {
            const T ls = std::log(sum);
            for (int64_t k = 0; k < n; ++k) q[k * inner] = p[k * inner] - mx - ls;
          }
        }
      return Status();
    });
  }

 private:
  int kind_;
  bool legacy_;
  int64_t axis_;
};

// CumSum and CumProd (opset 26): running sums or products along an axis given as a 0-D or
// one-element tensor; exclusive starts from the identity (0 or 1), reverse runs from the end.
class Cumulative : public Kernel {
 public:
  explicit Cumulative(const KernelInit& init)
      : product_(init.opType == "CumProd"),
        exclusive_(init.attrs.getInt("exclusive", 0) != 0),
        reverse_(init.attrs.getInt("reverse", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (ctx.input(1).size() != 1)
      return Status::error("axis must be a 0-D or one-element tensor, got shape " +
                           shapeToString(ctx.input(1).shape()));
    int64_t axis = ctx.input(1).getInt(0);
    if (!validDimAxis(axis, x.rank())) return axisError(axis, x.rank());
    axis = normAxis(axis, x.rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (size_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const int64_t n = x.dim(axis);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.data<T>();
      T* d = y->data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          T acc = product_ ? T(1) : T(0);
          for (int64_t kk = 0; kk < n; ++kk) {
            const int64_t k = reverse_ ? n - 1 - kk : kk;
            const int64_t off = (o * n + k) * inner + i;
            const T next = product_ ? static_cast<T>(acc * s[off]) : static_cast<T>(acc + s[off]);
            d[off] = exclusive_ ? acc : next;
            acc = next;
          }
        }
      return Status();
    });
  }

 private:
  bool product_, exclusive_, reverse_;
};

}  // namespace

// Output strides over the input's index space: 0 on reduced axes, so that for each input index
// the output offset is a dot product that the counter walk updates incrementally.
Result<ReducePlan> planReduce(const Shape& in, std::vector<int64_t> axes, bool keep,
                              bool noopEmpty) {
  ReducePlan p;
  const size_t r = in.size();
  std::vector<bool> red(r, false);
  if (axes.empty()) {
    if (noopEmpty) {
      p.empty = true;
      p.outShape = in;
      return p;
    }
    red.assign(r, true);
  }
  for (int64_t a : axes) {
    if (!validDimAxis(a, r))
      return Status::error("axis " + std::to_string(a) + " out of range for rank " +
                           std::to_string(r));
    red[normAxis(a, r)] = true;
  }
  for (size_t d = 0; d < r; ++d) {
    p.outKeep.push_back(red[d] ? 1 : in[d]);
    if (!red[d] || keep) p.outShape.push_back(red[d] ? 1 : in[d]);
  }
  p.outStrides = broadcastStrides(p.outKeep, in);
  return p;
}

void addReduceKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  for (const auto& op : ops::reduceOps()) r.add(h, op.name, 1, kMaxOpset, &makeKernel<Reduce>);
  r.add(h, "ArgMax", 1, kMaxOpset, &makeKernel<ArgReduce>);
  r.add(h, "ArgMin", 1, kMaxOpset, &makeKernel<ArgReduce>);
  r.add(h, "Softmax", 1, kMaxOpset, &makeKernel<SoftmaxKernel>);
  r.add(h, "LogSoftmax", 1, kMaxOpset, &makeKernel<SoftmaxKernel>);
  r.add(h, "Hardmax", 1, kMaxOpset, &makeKernel<SoftmaxKernel>);
  r.add(h, "CumSum", 1, kMaxOpset, &makeKernel<Cumulative>);
  r.add(h, "CumProd", 26, kMaxOpset, &makeKernel<Cumulative>);
}

}  // namespace dw::engine
