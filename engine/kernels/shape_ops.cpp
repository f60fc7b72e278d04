// Shape and data-movement ops: they move or reinterpret data without arithmetic, so most work
// on any dtype by element width (strings handled separately).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "engine/kernels/common.h"
#include "engine/kernels/concat_rows.h"
#include "engine/kernels/slice_plan.h"
#include "engine/kernels/tables.h"

#include <onnx/onnx_pb.h>

namespace dw::engine {

Result<SlicePlan> planSlice(const Shape& x, const std::vector<int64_t>& starts,
                            const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                            std::vector<int64_t> steps) {
  const size_t r = x.size();
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return Status::error("Slice: starts, ends, axes and steps must have the same length (" +
                         std::to_string(starts.size()) + ", " + std::to_string(ends.size()) + ", " +
                         std::to_string(axes.size()) + ", " + std::to_string(steps.size()) + ")");
  std::vector<int64_t> b(r, 0), st(r, 1);
  SlicePlan p;
  p.out = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!validAxis(axes[i], r) || r == 0)
      return Status::error("Slice: axis " + std::to_string(axes[i]) + " is outside the " +
                           std::to_string(r) + " dimensions of " + shapeToString(x));
    const int64_t a = normAxis(axes[i], r);
    const int64_t dim = x[a], step = steps[i];
    if (step == 0) return Status::error("Slice: a step is 0 (axis " + std::to_string(a) + ")");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      p.out[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      p.out[a] = s > e ? (s - e - step - 1) / (-step) : 0;
    }
    b[a] = s;
    st[a] = step;
  }
  const auto xs = stridesOf(x);
  p.strides.resize(r);
  for (size_t d = 0; d < r; ++d) {
    p.base += b[d] * xs[d];
    p.strides[d] = st[d] * xs[d];
  }
  return p;
}

// The output is the inputs' rows one after another (outer index first, then input order):
// each thread copies an equal share of the output's bytes, whichever rows they fall in, so a
// concatenation of two large rows (ShuffleNet's branches, [1, 58, 28, 28] twice) is split as
// well as one of many small ones. oneDNN 2.6's concat took 0.08 ms for that one.
Status concatRows(const std::vector<const Tensor*>& ins, int64_t a, int64_t outer, int64_t inner,
                  Tensor& y) {
  const int64_t es = static_cast<int64_t>(dtypeSize(y.dtype()));
  // Where each input's row starts within an output row (and the row's bytes at the end).
  std::vector<int64_t> start{0};
  for (const Tensor* t : ins) start.push_back(start.back() + t->dim(a) * inner * es);
  const int64_t row = start.back(), total = outer * row;
  char* dst = static_cast<char*>(y.raw());
  // Many short rows (an NHWC pixel's channels, a few hundred bytes): whole rows a thread, each
  // input's part copied without looking for it (the byte shares below searched for every part,
  // twice the time of the copies).
  constexpr int64_t kShortRow = 4096;
  if (row <= kShortRow) {
    forThreadRanges(outer, total / 4, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (size_t k = 0; k < ins.size(); ++k) {
          const int64_t bytes = start[k + 1] - start[k];
          std::memcpy(dst + o * row + start[k], static_cast<const char*>(ins[k]->raw()) + o * bytes,
                      static_cast<size_t>(bytes));
        }
    });
    return Status();
  }
  // Whole cache lines a share; 16 KiB of floats a thread at least (forThreadRanges).
  forThreadRanges((total + 63) / 64, total / 4, [&](int64_t l0, int64_t l1) {
    const int64_t b1 = std::min(total, l1 * 64);
    for (int64_t b = l0 * 64; b < b1;) {
      const int64_t o = b / row, within = b - o * row;
      const auto k = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), within) -
                                         start.begin() - 1);
      const int64_t bytes = start[k + 1] - start[k];
      const int64_t end = std::min(b1, o * row + start[k + 1]);
      std::memcpy(dst + b,
                  static_cast<const char*>(ins[k]->raw()) + o * bytes + (within - start[k]),
                  static_cast<size_t>(end - b));
      b = end;
    }
  });
  return Status();
}

namespace {

// Generic strided gather: out[i] = in[offset(i)], where offset walks `shape` with `inStrides`.
template <class T>
void stridedCopy(const T* in, T* out, const Shape& shape, const std::vector<int64_t>& inStrides,
                 int64_t base) {
  const int64_t total = numElements(shape);
  if (total == 0) return;
  const size_t r = shape.size();
  if (r == 0) {
    out[0] = in[base];
    return;
  }
  const int64_t inner = shape[r - 1], is = inStrides[r - 1], rows = total / inner;
  // Rows [from, to) of the output, starting from the input offset of row `from`.
  auto copyRows = [&](int64_t from, int64_t to) {
    std::vector<int64_t> idx(r, 0);
    int64_t off = base;
    for (int64_t q = from, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
      idx[d] = q % shape[d];
      q /= shape[d];
      off += idx[d] * inStrides[d];
    }
    for (int64_t o = from * inner; o < to * inner; o += inner) {
      if (is == 1) {
        std::copy(in + off, in + off + inner, out + o);
      } else {
        for (int64_t j = 0; j < inner; ++j) out[o + j] = in[off + j * is];
      }
      for (size_t d = r - 1; d-- > 0;) {
        ++idx[d];
        off += inStrides[d];
        if (idx[d] < shape[d]) break;
        off -= inStrides[d] * shape[d];
        idx[d] = 0;
      }
    }
  };
  // Large copies (an attention block's Slice of q, k and v: 1 MB each at batch 8) on the
  // session's threads: one thread copied at a third of memory speed.
  const int threads = static_cast<int>(std::min<int64_t>(
      std::max(1, omp_get_max_threads()), total * static_cast<int64_t>(sizeof(T)) >> 18));
  if (threads <= 1 || rows < threads || !std::is_trivially_copyable_v<T>) {
    copyRows(0, rows);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) copyRows(rows * t / threads, rows * (t + 1) / threads);
}

Status stridedCopyTensor(const Tensor& in, Tensor& out, const Shape& shape,
                         const std::vector<int64_t>& st, int64_t base) {
  if (in.dtype() == DType::kString) {
    stridedCopy(in.strings().data(), out.strings().data(), shape, st, base);
    return Status();
  }
  return dispatchBytes(in.dtype(), [&](auto z) {
    using T = decltype(z);
    stridedCopy(in.data<T>(), out.data<T>(), shape, st, base);
    return Status();
  });
}

class Identity : public Kernel {
 public:
  explicit Identity(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    ctx.setOutput(0, ctx.inputValue(0));
    return Status();
  }
};

class Reshape : public Kernel {
 public:
  explicit Reshape(const KernelInit& init) : opset_(init.opset) {
    allowZero_ = init.attrs.getInt("allowzero", 0) != 0;
    if (opset_ < 5) shapeAttr_ = init.attrs.getInts("shape");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> target = opset_ < 5 ? shapeAttr_ : ctx.input(1).toInt64Vector();
    Shape out(target.size());
    int64_t known = 1, inferIdx = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      int64_t d = target[i];
      if (d == 0 && !allowZero_) {
        if (i >= x.rank())
          return Status::error("shape has 0 at index " + std::to_string(i) + " beyond input rank");
        d = x.dim(i);
      }
      if (d == -1) {
        if (inferIdx >= 0) return Status::error("shape has more than one -1");
        inferIdx = static_cast<int64_t>(i);
        continue;
      }
      if (d < 0) return Status::error("invalid shape value " + std::to_string(d));
      out[i] = d;
      if (__builtin_mul_overflow(known, d, &known))
        return Status::error("cannot reshape " + shapeToString(x.shape()) + " to " +
                             shapeToString(target) + ": the target's size overflows");
    }
    if (inferIdx >= 0) {
      if (known == 0 || x.size() % known)
        return Status::error("cannot reshape " + shapeToString(x.shape()) + " to " +
                             shapeToString(target));
      out[inferIdx] = x.size() / known;
    }
    if (numElements(out) != x.size())
      return Status::error("cannot reshape " + shapeToString(x.shape()) + " to " +
                           shapeToString(target));
    ctx.setOutput(0, Value(x.reshaped(out)));
    return Status();
  }

 private:
  int opset_;
  bool allowZero_ = false;
  std::vector<int64_t> shapeAttr_;
};

class Flatten : public Kernel {
 public:
  explicit Flatten(const KernelInit& init) : axis_(init.attrs.getInt("axis")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int64_t a = normAxis(axis_, x.rank());
    if (a < 0 || a > static_cast<int64_t>(x.rank())) return Status::error("axis out of range");
    int64_t outer = 1;
    for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
    int64_t inner = outer ? x.size() / outer : 1;
    if (outer == 0) {
      inner = 1;
      for (size_t i = a; i < x.rank(); ++i) inner *= x.dim(i);
    }
    ctx.setOutput(0, Value(x.reshaped({outer, inner})));
    return Status();
  }

 private:
  int64_t axis_;
};

class Squeeze : public Kernel {
 public:
  explicit Squeeze(const KernelInit& init)
      : opset_(init.opset), axes_(init.attrs.getInts("axes")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = opset_ >= 13 ? intsInput(ctx, 1) : axes_;
    std::vector<bool> drop(x.rank(), false);
    if (axes.empty() && !(opset_ >= 13 && ctx.hasInput(1))) {
      for (size_t i = 0; i < x.rank(); ++i) drop[i] = x.dim(i) == 1;
    }
    for (int64_t a : axes) {
      if (!validDimAxis(a, x.rank())) return axisError(a, x.rank());
      a = normAxis(a, x.rank());
      if (x.dim(a) != 1)
        return Status::error("cannot squeeze axis " + std::to_string(a) + " of size " +
                             std::to_string(x.dim(a)));
      drop[a] = true;
    }
    Shape out;
    for (size_t i = 0; i < x.rank(); ++i)
      if (!drop[i]) out.push_back(x.dim(i));
    ctx.setOutput(0, Value(x.reshaped(out)));
    return Status();
  }

 private:
  int opset_;
  std::vector<int64_t> axes_;
};

class Unsqueeze : public Kernel {
 public:
  explicit Unsqueeze(const KernelInit& init)
      : opset_(init.opset), axes_(init.attrs.getInts("axes")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = opset_ >= 13 ? intsInput(ctx, 1) : axes_;
    const size_t r = x.rank() + axes.size();
    std::vector<bool> ins(r, false);
    for (int64_t a : axes) {
      if (!validAxis(a, r)) return axisError(a, r);
      a = normAxis(a, r);
      if (ins[a]) return Status::error("repeated axis");
      ins[a] = true;
    }
    Shape out;
    size_t k = 0;
    for (size_t i = 0; i < r; ++i) out.push_back(ins[i] ? 1 : x.dim(k++));
    ctx.setOutput(0, Value(x.reshaped(out)));
    return Status();
  }

 private:
  int opset_;
  std::vector<int64_t> axes_;
};

class ShapeOp : public Kernel {
 public:
  explicit ShapeOp(const KernelInit& init)
      : start_(init.attrs.getInt("start", 0)),
        end_(init.attrs.has("end") ? init.attrs.getInt("end") : INT64_MAX) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t r = static_cast<int64_t>(x.rank());
    auto clampAx = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
    int64_t s = clampAx(start_), e = clampAx(end_);
    DW_ALLOC(y, ctx.output(0, DType::kInt64, {std::max<int64_t>(e - s, 0)}));
    for (int64_t i = s; i < e; ++i) y->data<int64_t>()[i - s] = x.dim(i);
    return Status();
  }

 private:
  int64_t start_, end_;
};

class SizeOp : public Kernel {
 public:
  explicit SizeOp(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    DW_ALLOC(y, ctx.output(0, DType::kInt64, {}));
    *y->data<int64_t>() = ctx.input(0).size();
    return Status();
  }
};

class Transpose : public Kernel {
 public:
  explicit Transpose(const KernelInit& init) : perm_(init.attrs.getInts("perm")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> perm = perm_;
    if (perm.empty()) {
      for (size_t i = 0; i < x.rank(); ++i) perm.push_back(static_cast<int64_t>(x.rank() - 1 - i));
    }
    if (perm.size() != x.rank())
      return Status::error("perm has " + std::to_string(perm.size()) + " entries for rank " +
                           std::to_string(x.rank()));
    auto st = stridesOf(x.shape());
    Shape out(x.rank());
    std::vector<int64_t> inSt(x.rank());
    std::vector<bool> seen(x.rank(), false);
    for (size_t i = 0; i < perm.size(); ++i) {
      if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(x.rank()) || seen[perm[i]])
        return Status::error("perm " + shapeToString(perm) + " is not a permutation of the " +
                             std::to_string(x.rank()) + " axes");
      seen[perm[i]] = true;
      out[i] = x.dim(perm[i]);
      inSt[i] = st[perm[i]];
    }
    // A permutation that moves only axes of size 1 (a transformer's [S, 1, D] -> [1, S, D] at
    // batch 1) leaves every element where it is: the input goes on as the output, as Reshape's.
    const auto outSt = stridesOf(out);
    bool inPlace = true;
    for (size_t i = 0; i < out.size(); ++i)
      inPlace = inPlace && (out[i] == 1 || inSt[i] == outSt[i]);
    if (inPlace) {
      ctx.setOutput(0, Value(x.reshaped(out)));
      return Status();
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    return stridedCopyTensor(x, *y, out, inSt, 0);
  }

 private:
  std::vector<int64_t> perm_;
};

class Concat : public Kernel {
 public:
  explicit Concat(const KernelInit& init) : axis_(init.attrs.getInt("axis", 1)) {}
  Status compute(KernelContext& ctx) override {
    std::vector<const Tensor*> ins;
    for (size_t i = 0; i < ctx.numInputs(); ++i)
      if (ctx.hasInput(i)) ins.push_back(&ctx.input(i));
    return concat(ctx, ins, axis_, 0);
  }

  static Status concat(KernelContext& ctx, const std::vector<const Tensor*>& ins, int64_t axis,
                       size_t outIdx) {
    if (ins.empty()) return Status::error("no inputs");
    const Tensor& f = *ins[0];
    if (!validDimAxis(axis, f.rank())) return axisError(axis, f.rank());
    const int64_t a = normAxis(axis, f.rank());
    Shape out = f.shape();
    out[a] = 0;
    for (const Tensor* t : ins) {
      if (t->rank() != f.rank() || t->dtype() != f.dtype())
        return Status::error("inputs differ in rank or dtype");
      for (size_t d = 0; d < f.rank(); ++d)
        if (static_cast<int64_t>(d) != a && t->dim(d) != f.dim(d))
          return Status::error("input shapes " + shapeToString(f.shape()) + " and " +
                               shapeToString(t->shape()) + " differ off the concat axis");
      out[a] += t->dim(a);
    }
    DW_ALLOC(y, ctx.output(outIdx, f.dtype(), out));
    int64_t outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= out[d];
    int64_t inner = 1;
    for (size_t d = a + 1; d < out.size(); ++d) inner *= out[d];
    const int64_t rowOut = out[a] * inner;
    if (f.dtype() != DType::kString) return concatRows(ins, a, outer, inner, *y);
    int64_t offset = 0;
    for (const Tensor* t : ins) {
      const int64_t row = t->dim(a) * inner;
      for (int64_t o = 0; o < outer; ++o) copyElems(*t, o * row, *y, o * rowOut + offset, row);
      offset += row;
    }
    return Status();
  }

 private:
  int64_t axis_;
};

class Split : public Kernel {
 public:
  explicit Split(const KernelInit& init)
      : opset_(init.opset),
        axis_(init.attrs.getInt("axis", 0)),
        split_(init.attrs.getInts("split")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    std::vector<int64_t> split = opset_ >= 13 ? intsInput(ctx, 1) : split_;
    const int64_t n = static_cast<int64_t>(ctx.numOutputs());
    if (split.empty()) {
      // Equal parts, the last ones smaller (none left: empty).
      const int64_t each = n > 0 ? (x.dim(a) + n - 1) / n : 0;
      for (int64_t i = 0; i < n; ++i)
        split.push_back(std::max<int64_t>(0, std::min(each, x.dim(a) - each * i)));
    }
    if (static_cast<int64_t>(split.size()) != n)
      return Status::error("split has " + std::to_string(split.size()) + " entries for " +
                           std::to_string(n) + " outputs");
    DW_RETURN_IF_ERROR(checkSplitSizes(split, x.shape(), a));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    int64_t off = 0;
    for (int64_t i = 0; i < n; ++i) {
      Shape s = x.shape();
      s[a] = split[i];
      DW_ALLOC(y, ctx.output(i, x.dtype(), s));
      for (int64_t o = 0; o < outer; ++o)
        copyElems(x, o * x.dim(a) * inner + off * inner, *y, o * split[i] * inner,
                  split[i] * inner);
      off += split[i];
    }
    return Status();
  }

 private:
  int opset_;
  int64_t axis_;
  std::vector<int64_t> split_;
};

class Slice : public Kernel {
 public:
  explicit Slice(const KernelInit& init) : opset_(init.opset) {
    starts_ = init.attrs.getInts("starts");
    ends_ = init.attrs.getInts("ends");
    axes_ = init.attrs.getInts("axes");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto plan = opset_ >= 10 ? planSlice(x.shape(), intsInput(ctx, 1), intsInput(ctx, 2),
                                         intsInput(ctx, 3), intsInput(ctx, 4))
                             : planSlice(x.shape(), starts_, ends_, axes_, {});
    if (!plan) return plan.status();
    DW_ALLOC(y, ctx.output(0, x.dtype(), plan->out));
    if (y->size() == 0) return Status();
    return stridedCopyTensor(x, *y, plan->out, plan->strides, plan->base);
  }

 private:
  int opset_;
  std::vector<int64_t> starts_, ends_, axes_;
};

class Expand : public Kernel {
 public:
  explicit Expand(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Shape target = ctx.input(1).toInt64Vector();
    auto shape = broadcastShapes({x.shape(), target});
    if (!shape) return shape.status();
    DW_ALLOC(y, ctx.output(0, x.dtype(), *shape));
    auto st = broadcastStrides(x.shape(), *shape);
    return stridedCopyTensor(x, *y, *shape, st, 0);
  }
};

class Tile : public Kernel {
 public:
  explicit Tile(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto reps = ctx.input(1).toInt64Vector();
    if (reps.size() != x.rank())
      return Status::error("repeats must have one entry per input dimension");
    // View the output as [reps0, d0, reps1, d1, ...] with stride 0 on the repeat axes.
    Shape big;
    std::vector<int64_t> st;
    auto xs = stridesOf(x.shape());
    Shape out;
    for (size_t i = 0; i < x.rank(); ++i) {
      if (reps[i] < 0) return Status::error("negative repeat");
      big.push_back(reps[i]);
      big.push_back(x.dim(i));
      st.push_back(0);
      st.push_back(xs[i]);
      out.push_back(reps[i] * x.dim(i));
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    if (y->size() == 0) return Status();
    return stridedCopyTensor(x, *y, big, st, 0);
  }
};

class Cast : public Kernel {
 public:
  explicit Cast(const KernelInit& init) : like_(init.opType == "CastLike") {
    if (!like_) {
      to_ = dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("to", 0)));
      if (to_ == DType::kUndefined)
        fail("Cast: unsupported target type " + std::to_string(init.attrs.getInt("to", 0)));
    }
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DType to = like_ ? ctx.input(1).dtype() : to_;
    if (to == DType::kString || x.dtype() == DType::kString) {
      auto y = x.cast(to);
      if (!y) return y.status();
      ctx.setOutput(0, Value(std::move(*y)));
      return Status();
    }
    // Into the pool's buffer, on the session's threads: a fresh tensor per run faulted in
    // 12.8 MB of new pages each time (a 1.6M-value cast to int64 took 14 ms, not 1).
    DW_ALLOC(y, ctx.output(0, to, x.shape()));
    // castInto's checks do not depend on the range: made once, on none of it.
    DW_RETURN_IF_ERROR(x.castInto(*y, 0, 0));
    const int64_t n = x.size();
    forThreadRanges(n, n, [&](int64_t from, int64_t upTo) { (void)x.castInto(*y, from, upTo); });
    return Status();
  }

 private:
  bool like_;
  DType to_ = DType::kUndefined;
};

class ConstantOfShape : public Kernel {
 public:
  explicit ConstantOfShape(const KernelInit& init) {
    if (const auto* t = init.attrs.getTensor("value")) {
      auto v = tensorFromProto(*t);
      if (!v)
        fail(v.message());
      else
        value_ = *v;
    } else {
      value_ = Tensor::scalar(DType::kFloat, 0);
    }
  }
  Status compute(KernelContext& ctx) override {
    Shape s = ctx.input(0).toInt64Vector();
    DW_ALLOC(y, ctx.output(0, value_.dtype(), s));
    return dispatchBytes(value_.dtype(), [&](auto z) {
      using T = decltype(z);
      std::fill_n(y->data<T>(), y->size(), value_.data<T>()[0]);
      return Status();
    });
  }

 private:
  Tensor value_;
};

class Constant : public Kernel {
 public:
  explicit Constant(const KernelInit& init) {
    const auto& a = init.attrs;
    if (const auto* t = a.getTensor("value")) {
      auto v = tensorFromProto(*t);
      if (!v)
        fail(v.message());
      else
        value_ = *v;
    } else if (a.has("value_float")) {
      value_ = Tensor::scalar(DType::kFloat, a.getFloat("value_float"));
    } else if (a.has("value_int")) {
      value_ = Tensor::scalar(DType::kInt64, static_cast<double>(a.getInt("value_int")));
      value_.data<int64_t>()[0] = a.getInt("value_int");
    } else if (a.has("value_floats")) {
      auto f = a.getFloats("value_floats");
      value_ = Tensor::fromVector(f, {static_cast<int64_t>(f.size())});
    } else if (a.has("value_ints")) {
      auto f = a.getInts("value_ints");
      value_ = Tensor::fromVector(f, {static_cast<int64_t>(f.size())});
    } else if (a.has("value_string")) {
      value_ = Tensor::fromStrings({a.getString("value_string")}, {});
    } else if (a.has("value_strings")) {
      auto s = a.getStrings("value_strings");
      value_ = Tensor::fromStrings(s, {static_cast<int64_t>(s.size())});
    } else {
      fail("Constant needs a value attribute (sparse_value is not supported)");
    }
  }
  Status compute(KernelContext& ctx) override {
    ctx.setOutput(0, Value(value_));
    return Status();
  }

 private:
  Tensor value_;
};

class Range : public Kernel {
 public:
  explicit Range(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    for (size_t i = 0; i < 3; ++i)
      if (!ctx.hasInput(i) || ctx.input(i).size() != 1 ||
          ctx.input(i).dtype() != ctx.input(0).dtype())
        return Status::error(
            "Range's start, limit and delta must each be one value of the same "
            "type");
    const Tensor& s = ctx.input(0);
    return dispatchNumeric(s.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      T start = s.data<T>()[0], limit = ctx.input(1).data<T>()[0],
        delta = ctx.input(2).data<T>()[0];
      if (delta == 0) return Status::error("delta cannot be 0");
      double cnt = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                             static_cast<double>(delta));
      // Checked before the conversion: NaN or a count past int64 would be undefined there.
      if (!(cnt < double(int64_t(1) << 48)))
        return Status::error("Range from " + std::to_string(double(start)) + " to " +
                             std::to_string(double(limit)) + " by " +
                             std::to_string(double(delta)) + " has too many elements");
      int64_t n = std::max<int64_t>(static_cast<int64_t>(cnt), 0);
      DW_ALLOC(y, ctx.output(0, s.dtype(), {n}));
      T* d = y->data<T>();
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      return Status();
    });
  }
};

// Dropout: identity in inference; with training_mode it drops with a seeded generator.
class Dropout : public Kernel {
 public:
  explicit Dropout(const KernelInit& init)
      : opset_(init.opset),
        ratioAttr_(init.attrs.getFloat("ratio", 0.5f)),
        seed_(init.attrs.has("seed") ? init.attrs.getInt("seed") : 0),
        isTestAttr_(init.attrs.getInt("is_test", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    bool training = false;
    float ratio = ratioAttr_;
    if (opset_ >= 12) {
      for (int i : {1, 2})
        if (ctx.hasInput(i) && ctx.input(i).size() != 1)
          return Status::error(std::string(i == 1 ? "ratio" : "training_mode") +
                               " must be a single value, not " +
                               shapeToString(ctx.input(i).shape()));
      if (ctx.hasInput(1)) ratio = static_cast<float>(ctx.input(1).getDouble(0));
      if (ctx.hasInput(2)) training = ctx.input(2).getInt(0) != 0;
    } else if (opset_ < 7) {
      training = !isTestAttr_;
    }
    // In inference the ratio is not used (and ONNX Runtime does not look at it either).
    if (training && !(ratio >= 0 && ratio < 1))
      return Status::error("ratio is " + std::to_string(ratio) +
                           "; a dropout ratio must be in [0, 1)");
    if (!training || ratio == 0) {
      ctx.setOutput(0, ctx.inputValue(0));
      if (ctx.wantsOutput(1)) {
        DW_ALLOC(m, ctx.output(1, DType::kBool, x.shape()));
        std::fill_n(m->data<bool>(), m->size(), true);
      }
      return Status();
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    DW_ALLOC(m, ctx.output(1, DType::kBool, x.shape()));
    Mt19937 rng(static_cast<uint32_t>(seed_));
    const double scale = 1.0 / (1.0 - ratio);
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < x.size(); ++i) {
        const bool keep = rng.uniform() >= ratio;
        m->data<bool>()[i] = keep;
        y->data<T>()[i] = keep ? static_cast<T>(x.data<T>()[i] * scale) : T(0);
      }
      return Status();
    });
  }

 private:
  // The Mersenne Twister with numpy's legacy seeding and 53-bit doubles, so that a given seed
  // draws the same mask as numpy.random.seed(seed); numpy.random.uniform(size=x.shape).
  class Mt19937 {
   public:
    explicit Mt19937(uint32_t seed) {
      mt_[0] = seed;
      for (int i = 1; i < 624; ++i)
        mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
    }
    uint32_t next() {
      if (pos_ >= 624) {
        for (int i = 0; i < 624; ++i) {
          const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % 624] & 0x7fffffffu);
          mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        pos_ = 0;
      }
      uint32_t y = mt_[pos_++];
      y ^= y >> 11;
      y ^= (y << 7) & 0x9d2c5680u;
      y ^= (y << 15) & 0xefc60000u;
      return y ^ (y >> 18);
    }
    double uniform() {
      const uint32_t a = next() >> 5, b = next() >> 6;
      return (a * 67108864.0 + b) / 9007199254740992.0;
    }

   private:
    uint32_t mt_[624];
    int pos_ = 624;
  };

  int opset_;
  float ratioAttr_;
  int64_t seed_;
  bool isTestAttr_;
};

class Pad : public Kernel {
 public:
  explicit Pad(const KernelInit& init) : opset_(init.opset) {
    mode_ = init.attrs.getString("mode");
    pads_ = init.attrs.getInts(opset_ < 2 ? "paddings" : "pads");
    value_ = init.attrs.getFloat("value", 0);
    if (mode_ != "constant" && mode_ != "reflect" && mode_ != "edge")
      fail("Pad mode '" + mode_ + "' is not supported");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t r = x.rank();
    std::vector<int64_t> pads = pads_;
    double cval = value_;
    std::vector<int64_t> axes;
    if (opset_ >= 11) {
      pads = ctx.input(1).toInt64Vector();
      if (ctx.hasInput(2)) cval = ctx.input(2).getDouble(0);
      axes = intsInput(ctx, 3);
    }
    if (axes.empty())
      for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
    if (pads.size() != 2 * axes.size())
      return Status::error("pads must have 2 entries per padded axis");
    std::vector<int64_t> before(r, 0), after(r, 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = normAxis(axes[i], r);
      before[a] = pads[i];
      after[a] = pads[i + axes.size()];
    }
    Shape out(r);
    for (size_t d = 0; d < r; ++d) {
      if (__builtin_add_overflow(x.dim(d), before[d], &out[d]) ||
          __builtin_add_overflow(out[d], after[d], &out[d]))
        return Status::error("pads " + std::to_string(before[d]) + " and " +
                             std::to_string(after[d]) + " of axis " + std::to_string(d) +
                             " are too large");
      if (out[d] < 0) return Status::error("pads make a negative dimension");
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    if (y->size() == 0) return Status();
    auto xs = stridesOf(x.shape());
    enum class Mode {
      kConstant,
      kEdge,
      kReflect
    } mode = mode_ == "constant" ? Mode::kConstant
             : mode_ == "edge"   ? Mode::kEdge
                                 : Mode::kReflect;
    // Where output index o of axis d reads from (-1: the fill value).
    auto source = [&](size_t d, int64_t o) -> int64_t {
      int64_t i = o - before[d];
      const int64_t n = x.dim(d);
      if (i >= 0 && i < n) return i;
      if (mode == Mode::kConstant || n == 0) return -1;
      if (mode == Mode::kEdge) return i < 0 ? 0 : n - 1;
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      i = ((i % period) + period) % period;
      return i >= n ? period - i : i;
    };
    return dispatchBytes(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      T fill{};
      Tensor cv = Tensor::scalar(x.dtype(), cval);
      std::memcpy(&fill, cv.raw(), sizeof(T));
      const T* src = x.data<T>();
      T* dst = y->data<T>();
      if (r == 0) {
        dst[0] = src[0];
        return Status();
      }
      // Row by row along the last axis: its unpadded middle is one copy, so the work is the
      // output's size, not a per-element walk over every axis (a 37M-element reflect pad took
      // over 10 s that way under the sanitizers).
      const size_t last = r - 1;
      const int64_t width = out[last], n = x.dim(last);
      const int64_t lo = std::clamp<int64_t>(before[last], 0, width);
      const int64_t hi = std::clamp<int64_t>(before[last] + n, lo, width);
      std::vector<int64_t> idx(r, 0);
      for (int64_t row = 0; row < y->size(); row += width) {
        T* d = dst + row;
        int64_t off = 0;
        bool inside = true;
        for (size_t k = 0; k < last && inside; ++k) {
          const int64_t i = source(k, idx[k]);
          inside = i >= 0;
          off += i * xs[k];
        }
        if (!inside) {
          std::fill(d, d + width, fill);
        } else {
          for (int64_t j = 0; j < lo; ++j) {
            const int64_t i = source(last, j);
            d[j] = i < 0 ? fill : src[off + i];
          }
          if (hi > lo)
            std::copy(src + off + (lo - before[last]), src + off + (hi - before[last]), d + lo);
          for (int64_t j = hi; j < width; ++j) {
            const int64_t i = source(last, j);
            d[j] = i < 0 ? fill : src[off + i];
          }
        }
        for (size_t k = last; k-- > 0;) {
          if (++idx[k] < out[k]) break;
          idx[k] = 0;
        }
      }
      return Status();
    });
  }

 private:
  int opset_;
  std::string mode_;
  std::vector<int64_t> pads_;
  float value_;
};

class DepthSpace : public Kernel {
 public:
  explicit DepthSpace(const KernelInit& init)
      : toSpace_(init.opType == "DepthToSpace"),
        bs_(init.attrs.getInt("blocksize", 1)),
        crd_(init.attrs.getString("mode", "DCR") == "CRD") {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 4) return Status::error("input must be 4-D");
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), b = bs_;
    if (b < 1)
      return Status::error("blocksize is " + std::to_string(b) + "; it must be at least 1");
    Shape view, out;
    std::vector<int64_t> perm;
    if (toSpace_) {
      if (c % (b * b)) return Status::error("channels not divisible by blocksize^2");
      if (crd_) {
        view = {n, c / (b * b), b, b, h, w};
        perm = {0, 1, 4, 2, 5, 3};
      } else {
        view = {n, b, b, c / (b * b), h, w};
        perm = {0, 3, 4, 1, 5, 2};
      }
      out = {n, c / (b * b), h * b, w * b};
    } else {
      if (h % b || w % b) return Status::error("spatial size not divisible by blocksize");
      view = {n, c, h / b, b, w / b, b};
      perm = {0, 3, 5, 1, 2, 4};
      out = {n, c * b * b, h / b, w / b};
    }
    auto vs = stridesOf(view);
    Shape ps(6);
    std::vector<int64_t> st(6);
    for (int i = 0; i < 6; ++i) {
      ps[i] = view[perm[i]];
      st[i] = vs[perm[i]];
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    return stridedCopyTensor(x, *y, ps, st, 0);
  }

 private:
  bool toSpace_;
  int64_t bs_;
  bool crd_;
};

class Trilu : public Kernel {
 public:
  explicit Trilu(const KernelInit& init) : upper_(init.attrs.getInt("upper", 1) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t k = ctx.hasInput(1) ? ctx.input(1).getInt(0) : 0;
    if (x.rank() < 2) return Status::error("input must have rank >= 2");
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
    const int64_t mats = (rows * cols) != 0 ? x.size() / (rows * cols) : 0;
    return dispatchBytes(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.data<T>();
      T* d = y->data<T>();
      for (int64_t m = 0; m < mats; ++m)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t o = (m * rows + i) * cols + j;
            const bool keep = upper_ ? j - i >= k : j - i <= k;
            d[o] = keep ? s[o] : T{};
          }
      return Status();
    });
  }

 private:
  bool upper_;
};

class EyeLike : public Kernel {
 public:
  explicit EyeLike(const KernelInit& init) : k_(init.attrs.getInt("k", 0)) {
    if (init.attrs.has("dtype"))
      dtype_ = dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("dtype")));
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 2) return Status::error("EyeLike needs a 2-D input");
    DType dt = dtype_ == DType::kUndefined ? x.dtype() : dtype_;
    DW_ALLOC(y, ctx.output(0, dt, x.shape()));
    Tensor one = Tensor::scalar(dt, 1);
    const size_t es = dtypeSize(dt);
    std::memset(y->raw(), 0, y->bytes());
    for (int64_t i = 0; i < x.dim(0); ++i) {
      int64_t j = i + k_;
      if (j >= 0 && j < x.dim(1))
        std::memcpy(static_cast<char*>(y->raw()) + (i * x.dim(1) + j) * es, one.raw(), es);
    }
    return Status();
  }

 private:
  int64_t k_;
  DType dtype_ = DType::kUndefined;
};

}  // namespace

Status stridedCopyForKernels(const Tensor& in, Tensor& out, const Shape& shape,
                             const std::vector<int64_t>& st, int64_t base) {
  return stridedCopyTensor(in, out, shape, st, base);
}

Status concatTensors(KernelContext& ctx, const std::vector<const Tensor*>& ins, int64_t axis,
                     size_t outIdx) {
  return Concat::concat(ctx, ins, axis, outIdx);
}

namespace {

// CenterCropPad (opset 18): each axis listed (all by default) takes the size `shape` gives it,
// keeping the centre: a longer axis is cropped from (in - out) / 2 on, a shorter one placed at
// (out - in) / 2 in zeros (empty strings).
class CenterCropPad : public Kernel {
 public:
  explicit CenterCropPad(const KernelInit& init) : axes_(init.attrs.getInts("axes")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto sizes = intsInput(ctx, 1);
    std::vector<int64_t> axes = axes_;
    if (axes.empty())
      for (size_t d = 0; d < x.rank(); ++d) axes.push_back(static_cast<int64_t>(d));
    if (sizes.size() != axes.size())
      return Status::error("shape has " + std::to_string(sizes.size()) + " sizes for " +
                           std::to_string(axes.size()) + " axes");
    Shape out = x.shape();
    std::vector<bool> seen(x.rank(), false);
    for (size_t k = 0; k < axes.size(); ++k) {
      if (!validAxis(axes[k], x.rank()) || x.rank() == 0)
        return Status::error("axis " + std::to_string(axes[k]) + " is outside the " +
                             std::to_string(x.rank()) + " dimensions of the input");
      const int64_t a = normAxis(axes[k], x.rank());
      if (seen[a]) return Status::error("axis " + std::to_string(a) + " is listed twice");
      seen[a] = true;
      if (sizes[k] < 0) return Status::error("shape holds a negative size");
      out[a] = sizes[k];
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    if (x.dtype() != DType::kString && y->size()) std::memset(y->raw(), 0, y->bytes());
    const size_t r = x.rank();
    // Per axis: where the kept span starts in X and in Y, and its length.
    std::vector<int64_t> from(r), to(r), len(r);
    for (size_t d = 0; d < r; ++d) {
      const int64_t in = x.dim(d), o = out[d];
      from[d] = in > o ? (in - o) / 2 : 0;
      to[d] = o > in ? (o - in) / 2 : 0;
      len[d] = std::min(in, o);
    }
    if (r == 0) {
      copyElems(x, 0, *y, 0, 1);
      return Status();
    }
    for (size_t d = 0; d < r; ++d)
      if (len[d] == 0) return Status();
    const auto xs = stridesOf(x.shape()), ys = stridesOf(out);
    std::vector<int64_t> idx(r, 0);  // over the span, the last axis in one copy
    while (true) {
      int64_t xo = 0, yo = 0;
      for (size_t d = 0; d < r; ++d) {
        xo += (from[d] + idx[d]) * xs[d];
        yo += (to[d] + idx[d]) * ys[d];
      }
      copyElems(x, xo, *y, yo, len[r - 1]);
      size_t d = r - 1;
      while (d-- > 0) {
        if (++idx[d] < len[d]) break;
        idx[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    return Status();
  }

 private:
  std::vector<int64_t> axes_;
};

// StringConcat (opset 20): X + Y elementwise, broadcasting.
class StringConcat : public Kernel {
 public:
  explicit StringConcat(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != DType::kString || b.dtype() != DType::kString)
      return Status::error("StringConcat takes string tensors");
    auto shape = broadcastShapes({a.shape(), b.shape()});
    if (!shape) return shape.status();
    DW_ALLOC(y, ctx.output(0, DType::kString, *shape));
    auto& out = y->strings();
    std::array<const Shape*, 2> ins{&a.shape(), &b.shape()};
    forEachBroadcast<2>(*shape, ins, [&](int64_t i, const std::array<int64_t, 2>& o) {
      out[i] = a.strings()[o[0]] + b.strings()[o[1]];
    });
    return Status();
  }
};

}  // namespace

void addShapeKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "CenterCropPad", 18, kMaxOpset, &makeKernel<CenterCropPad>, false);
  r.add(kReferenceTable, "StringConcat", 20, kMaxOpset, &makeKernel<StringConcat>, false);
  const char* h = kReferenceTable;
  r.add(h, "Identity", 1, kMaxOpset, &makeKernel<Identity>, false);
  r.add(h, "Reshape", 1, kMaxOpset, &makeKernel<Reshape>, false);
  r.add(h, "Flatten", 1, kMaxOpset, &makeKernel<Flatten>, false);
  r.add(h, "Squeeze", 1, kMaxOpset, &makeKernel<Squeeze>, false);
  r.add(h, "Unsqueeze", 1, kMaxOpset, &makeKernel<Unsqueeze>, false);
  r.add(h, "Shape", 1, kMaxOpset, &makeKernel<ShapeOp>, false);
  r.setShapeOnlyInputs(h, "Shape", 1u);
  r.add(h, "Size", 1, kMaxOpset, &makeKernel<SizeOp>, false);
  r.setShapeOnlyInputs(h, "Size", 1u);
  r.add(h, "Transpose", 1, kMaxOpset, &makeKernel<Transpose>, false);
  r.add(h, "Concat", 1, kMaxOpset, &makeKernel<Concat>, false);
  r.add(h, "Split", 1, kMaxOpset, &makeKernel<Split>, false);
  r.add(h, "Slice", 1, kMaxOpset, &makeKernel<Slice>, false);
  r.add(h, "Expand", 1, kMaxOpset, &makeKernel<Expand>, false);
  r.add(h, "Tile", 1, kMaxOpset, &makeKernel<Tile>, false);
  r.add(h, "Cast", 1, kMaxOpset, &makeKernel<Cast>, false);
  r.add(h, "CastLike", 1, kMaxOpset, &makeKernel<Cast>, false);
  r.add(h, "ConstantOfShape", 1, kMaxOpset, &makeKernel<ConstantOfShape>, false);
  r.add(h, "Constant", 1, kMaxOpset, &makeKernel<Constant>, false);
  r.add(h, "Range", 1, kMaxOpset, &makeKernel<Range>, false);
  r.add(h, "Dropout", 1, kMaxOpset, &makeKernel<Dropout>, true);
  r.add(h, "Pad", 1, kMaxOpset, &makeKernel<Pad>, false);
  r.add(h, "DepthToSpace", 1, kMaxOpset, &makeKernel<DepthSpace>, false);
  r.add(h, "SpaceToDepth", 1, kMaxOpset, &makeKernel<DepthSpace>, false);
  r.add(h, "Trilu", 1, kMaxOpset, &makeKernel<Trilu>, false);
  r.add(h, "EyeLike", 1, kMaxOpset, &makeKernel<EyeLike>, false);
}

}  // namespace dw::engine
