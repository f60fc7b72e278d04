// Internal helpers shared by the plain C++ kernels: dtype dispatch, broadcasting, axes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <vector>

#include "engine/kernel.h"

namespace dw::engine {

// An allocator of cache-line aligned memory: a 64-byte vector load from std::vector's 16-byte
// aligned storage, at whole-vector offsets, spans two lines every time (it cost the depthwise
// loop of onednn/conv_chain.cpp 40% of its time).
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const LineAligned&) const { return true; }
};
using LineFloats = std::vector<float, LineAligned<float>>;

#define DW_ALLOC(var, expr) \
  Tensor* var = (expr);     \
  if (!var) return ctx.status();

template <class F>
Status dispatchNumeric(DType t, F&& f) {
  switch (t) {
    case DType::kFloat:
      return f(float{});
    case DType::kDouble:
      return f(double{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kInt16:
      return f(int16_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kUInt16:
      return f(uint16_t{});
    case DType::kUInt32:
      return f(uint32_t{});
    case DType::kUInt64:
      return f(uint64_t{});
    default:
      return Status::error(std::string("dtype ") + dtypeName(t) + " is not supported here");
  }
}

template <class F>
Status dispatchNumericBool(DType t, F&& f) {
  if (t == DType::kBool) return f(bool{});
  return dispatchNumeric(t, std::forward<F>(f));
}

template <class F>
Status dispatchFloat(DType t, F&& f) {
  switch (t) {
    case DType::kFloat:
      return f(float{});
    case DType::kDouble:
      return f(double{});
    default:
      return Status::error(std::string("dtype ") + dtypeName(t) + " is not supported here");
  }
}

// Float, float16 and bfloat16 values read and written as float.
inline float loadFloat(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat16:
      return halfToFloat(t.data<uint16_t>()[i]);
    case DType::kBFloat16:
      return bf16ToFloat(t.data<uint16_t>()[i]);
    default:
      return t.data<float>()[i];
  }
}
inline void storeFloat(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::kFloat16:
      t.data<uint16_t>()[i] = floatToHalf(v);
      return;
    case DType::kBFloat16:
      t.data<uint16_t>()[i] = floatToBf16(v);
      return;
    default:
      t.data<float>()[i] = v;
  }
}
// Dispatch on any fixed-size dtype by storage width; for ops that only move data.
template <class F>
Status dispatchBytes(DType t, F&& f) {
  switch (dtypeSize(t)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return Status::error(std::string("dtype ") + dtypeName(t) + " is not supported here");
  }
}

inline int64_t normAxis(int64_t a, size_t rank) {
  return a < 0 ? a + static_cast<int64_t>(rank) : a;
}
inline bool validAxis(int64_t a, size_t rank) {
  return a >= -static_cast<int64_t>(rank) && a < static_cast<int64_t>(std::max<size_t>(rank, 1));
}
// An axis that names one of the tensor's dimensions: unlike validAxis, never of a scalar (ops
// that index the dimension they are given read past a rank-0 shape otherwise).
inline bool validDimAxis(int64_t a, size_t rank) {
  return rank > 0 && validAxis(a, rank);
}
// A coordinate from data (grid samples, rois) as an index, defined for every double: NaN and
// values beyond +-2^52 land far outside any tensor, where the caller's bounds checks and clamps
// treat them as out of range, instead of an undefined conversion.
inline int64_t indexOf(double v) {
  constexpr double kFar = 4503599627370496.0;  // 2^52
  if (std::isnan(v)) return -static_cast<int64_t>(kFar);
  return static_cast<int64_t>(std::clamp(v, -kFar, kFar));
}

inline Status axisError(int64_t a, size_t rank) {
  return Status::error("axis " + std::to_string(a) + " is outside the " + std::to_string(rank) +
                       " dimension(s) of the input");
}

Result<Shape> broadcastShapes(const std::vector<Shape>& shapes);

// An error "<what> <from> does not broadcast to <to>" unless `from` broadcasts to exactly `to`
// (a normalization's Scale and B over its normalized axes).
Status broadcastsTo(const Shape& from, const Shape& to, const std::string& what);

// For each position of `to` (row-major), the element of a tensor of shape `from` that
// broadcasts there (a normalization's Scale over its normalized axes).
std::vector<int64_t> broadcastOffsets(const Shape& from, const Shape& to);

// Strides of `in` aligned to `out` (right-aligned), 0 on broadcast dimensions.
std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out);

// Runs `range(from, to)` over [0, units) in contiguous pieces, one per OpenMP thread (the
// session's count), with as many threads as `values` values of work pay for (a team costs more
// than it saves below about 16K); on the calling thread alone when one is enough, or inside
// another parallel region.
void forThreadRanges(int64_t units, int64_t values,
                     const std::function<void(int64_t from, int64_t to)>& range);

// True where the CPU runs the explicit AVX-512 loops (onednn/vector_math.h,
// kernels/vector_float.h); elsewhere their callers keep their own.
bool vectorMathAvailable();

// Calls f(outIndex, offsets) for the output elements of rows [rowFrom, rowTo) of `out` (a row:
// its last dimension, the whole of a 0-D output); offsets[k] indexes input k.
template <size_t N, class F>
void forEachBroadcastRows(const Shape& out, const std::array<const Shape*, N>& ins, int64_t rowFrom,
                          int64_t rowTo, F&& f) {
  const size_t r = out.size();
  std::array<int64_t, N> off{};
  if (r == 0) {
    if (rowFrom == 0 && rowTo > 0) f(0, off);
    return;
  }
  std::array<std::vector<int64_t>, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcastStrides(*ins[k], out);
  std::vector<int64_t> idx(r, 0);
  const int64_t inner = out[r - 1];
  // Where row rowFrom starts: its index over the outer dimensions, and each input's offset.
  for (int64_t rest = rowFrom, d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
    idx[d] = rest % out[d];
    rest /= out[d];
    for (size_t k = 0; k < N; ++k) off[k] += idx[d] * st[k][d];
  }
  std::array<int64_t, N> innerStride{};
  for (size_t k = 0; k < N; ++k) innerStride[k] = st[k][r - 1];
  for (int64_t base = rowFrom * inner, end = rowTo * inner; base < end; base += inner) {
    std::array<int64_t, N> o = off;
    for (int64_t j = 0; j < inner; ++j) {
      f(base + j, o);
      for (size_t k = 0; k < N; ++k) o[k] += innerStride[k];
    }
    // Advance the outer counter (all dims but the last).
    for (size_t d = r - 1; d-- > 0;) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += st[k][d];
      if (idx[d] < out[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= st[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

// Every output element, on the calling thread.
template <size_t N, class F>
void forEachBroadcast(const Shape& out, const std::array<const Shape*, N>& ins, F&& f) {
  const int64_t total = numElements(out);
  if (total == 0) return;
  const int64_t rows = out.empty() ? 1 : total / out.back();
  forEachBroadcastRows<N>(out, ins, 0, rows, f);
}

// The same on the session's threads, in blocks of rows: `f` may only write output i.
template <size_t N, class F>
void forEachBroadcastParallel(const Shape& out, const std::array<const Shape*, N>& ins, F&& f) {
  const int64_t total = numElements(out);
  if (total == 0) return;
  const int64_t rows = out.empty() ? 1 : total / out.back();
  forThreadRanges(rows, total, [&](int64_t from, int64_t to) {
    forEachBroadcastRows<N>(out, ins, from, to, f);
  });
}

// Binary broadcast on the session's threads, with contiguous fast paths the compiler
// vectorizes; `op` is pure. The output may be one of the inputs where its shape is the output's.
template <class TA, class TB, class TO, class Op>
void broadcastBinary(const TA* a, const Shape& sa, const TB* b, const Shape& sb, TO* o,
                     const Shape& so, Op op) {
  const int64_t n = numElements(so);
  if (sa == so && sb == so) {
    forThreadRanges(n, n, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) o[i] = op(a[i], b[i]);
    });
  } else if (sa == so && numElements(sb) == 1) {
    const TB bv = b[0];
    forThreadRanges(n, n, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) o[i] = op(a[i], bv);
    });
  } else if (sb == so && numElements(sa) == 1) {
    const TA av = a[0];
    forThreadRanges(n, n, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) o[i] = op(av, b[i]);
    });
  } else {
    std::array<const Shape*, 2> ins{&sa, &sb};
    forEachBroadcastParallel<2>(so, ins, [&](int64_t i, const std::array<int64_t, 2>& off) {
      o[i] = op(a[off[0]], b[off[1]]);
    });
  }
}

// Row-major strides.
inline std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t v = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = v;
    v *= s[i];
  }
  return st;
}

// Reads an optional int64 list input (axes, pads...) as a vector.
inline std::vector<int64_t> intsInput(const KernelContext& ctx, size_t i) {
  if (!ctx.hasInput(i)) return {};
  return ctx.input(i).toInt64Vector();
}

// SumToShape's cases that need no arithmetic, on any backend: the gradient already has the
// target's shape, or its element count (a reshape). True when it has set output 0.
inline bool sumToShapeByView(KernelContext& ctx, const Tensor& g, const Shape& target) {
  if (g.shape() == target) {
    ctx.setOutput(0, ctx.inputValue(0));
    return true;
  }
  if (numElements(target) == g.size()) {
    ctx.setOutput(0, Value(g.reshaped(target)));
    return true;
  }
  return false;
}

// Reduction geometry shared by the reference and oneDNN reduce kernels (kernels/reduce.cpp).
struct ReducePlan {
  Shape outShape;  // with keepdims
  Shape outKeep;   // always with reduced dims as 1 (for strides)
  std::vector<int64_t> outStrides;
  bool empty = false;  // noop: copy input
};
// Resolves ONNX axes (empty: all, or nothing with noopEmpty), keepdims included.
Result<ReducePlan> planReduce(const Shape& in, std::vector<int64_t> axes, bool keep,
                              bool noopEmpty);

// C[M x N] = op(A) op(B) for row-major float matrices with leading dimensions, on oneDNN's
// sgemm (threaded).
void gemmF32(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
             const float* Bm, int64_t ldb, float* C, int64_t ldc);

// x [rows, in] times W [in, out] (row-major) plus bias [out] where given: the projections of
// attention kernels that take their weights as inputs.
std::vector<float> projectRows(const float* x, int64_t rows, int64_t in, const float* W,
                               int64_t out, const float* bias);

// A matrix product with numpy's semantics (MatMul, MatMulInteger): a 1-D A is a row and a 1-D B
// a column, whose axes the output drops; the batch dimensions broadcast.
struct MatMulGeometry {
  int64_t M = 0, K = 0, N = 0, batches = 1;
  Shape out, batch;
  std::vector<int64_t> stA, stB, bst;
  // The matrices of A and B (indices in [batch..., M|K, K|N] order) batch entry bi reads.
  std::pair<int64_t, int64_t> operands(int64_t bi) const {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      const int64_t idx = (bi / bst[d]) % batch[d];
      oa += idx * stA[d];
      ob += idx * stB[d];
    }
    return {oa, ob};
  }
};

inline Result<MatMulGeometry> matMulGeometry(Shape sa, Shape sb) {
  if (sa.empty() || sb.empty()) return Status::error("A and B must have rank >= 1");
  const bool aVec = sa.size() == 1, bVec = sb.size() == 1;
  if (aVec) sa.insert(sa.begin(), 1);
  if (bVec) sb.push_back(1);
  MatMulGeometry g;
  g.M = sa[sa.size() - 2];
  g.K = sa.back();
  g.N = sb.back();
  if (sb[sb.size() - 2] != g.K)
    return Status::error("inner dimensions differ: " + shapeToString(sa) + " x " +
                         shapeToString(sb));
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  auto batch = broadcastShapes({ba, bb});
  if (!batch) return batch.status();
  g.batch = *batch;
  g.out = g.batch;
  if (!aVec) g.out.push_back(g.M);
  if (!bVec) g.out.push_back(g.N);
  g.stA = broadcastStrides(ba, g.batch);
  g.stB = broadcastStrides(bb, g.batch);
  g.bst = stridesOf(g.batch);
  g.batches = numElements(g.batch);
  return g;
}

// Copies an element range between tensors of the same dtype, strings included.
inline void copyElems(const Tensor& src, int64_t so, Tensor& dst, int64_t d, int64_t n) {
  if (n <= 0) return;
  if (src.dtype() == DType::kString) {
    std::copy_n(src.strings().begin() + so, n, dst.strings().begin() + d);
  } else {
    const size_t es = dtypeSize(src.dtype());
    std::memcpy(static_cast<char*>(dst.raw()) + d * es,
                static_cast<const char*>(src.raw()) + so * es, n * es);
  }
}

// Copies a whole tensor (with strings) into a freshly allocated output.
Status copyToOutput(KernelContext& ctx, size_t i, const Tensor& t, Shape shape);

// Input i as a kernel needs it, of `dtype` and exactly `shape`; else an error naming it (`name`)
// with what it is.
inline Status expectInput(const KernelContext& ctx, size_t i, const char* name, DType dtype,
                          const Shape& shape) {
  const Tensor& v = ctx.input(i);
  if (v.dtype() == dtype && v.shape() == shape) return Status();
  return Status::error(std::string(name) + " must be " + dtypeName(dtype) + " " +
                       shapeToString(shape) + ", got " + dtypeName(v.dtype()) + " " +
                       shapeToString(v.shape()));
}

// Kernels that read every input as input 0's type: an error naming the first input that differs.
inline Status sameDtypes(const KernelContext& ctx, const std::string& op) {
  const DType dt = ctx.input(0).dtype();
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i) && ctx.input(i).dtype() != dt)
      return Status::error("input " + std::to_string(i) + " is " + dtypeName(ctx.input(i).dtype()) +
                           " but input 0 is " + dtypeName(dt) + "; " + op +
                           "'s inputs share one type");
  return Status();
}

}  // namespace dw::engine

namespace dw::engine {
// Strided gather copy (shape_ops.cpp): out[i] = in[base + sum(idx_d * strides_d)].
Status stridedCopyForKernels(const Tensor& in, Tensor& out, const Shape& shape,
                             const std::vector<int64_t>& strides, int64_t base);
Status concatTensors(KernelContext& ctx, const std::vector<const Tensor*>& ins, int64_t axis,
                     size_t outIdx);
// Split's and SplitToSequence's sizes along `axis` of x: none negative, adding up to the axis
// (checked before any copy: sizes beyond it would read past X).
inline Status checkSplitSizes(const std::vector<int64_t>& sizes, const Shape& x, int64_t axis) {
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0) return Status::error("split sizes must not be negative, got " + std::to_string(v));
    total += v;
  }
  if (total != x[static_cast<size_t>(axis)])
    return Status::error("split sizes add up to " + std::to_string(total) + ", but axis " +
                         std::to_string(axis) + " of " + shapeToString(x) + " has " +
                         std::to_string(x[static_cast<size_t>(axis)]));
  return Status();
}

}  // namespace dw::engine
