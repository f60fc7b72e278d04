#include "engine/kernels/common.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>

namespace dw::engine {

void forThreadRanges(int64_t units, int64_t values,
                     const std::function<void(int64_t, int64_t)>& range) {
  if (units <= 0) return;
  const int threads =
      omp_in_parallel()
          ? 1
          : static_cast<int>(std::min<int64_t>(
                units, std::clamp<int64_t>(values / 16384, 1, std::max(1, omp_get_max_threads()))));
  if (threads == 1) return range(0, units);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    // The team may be smaller than asked (a limit set elsewhere): its threads split it all.
    range(units * t / team, units * (t + 1) / team);
  }
}

bool vectorMathAvailable() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

Result<Shape> broadcastShapes(const std::vector<Shape>& shapes) {
  size_t r = 0;
  for (const auto& s : shapes) r = std::max(r, s.size());
  Shape out(r, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[r - s.size() + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string msg = "shapes cannot be broadcast together:";
      for (const auto& x : shapes) msg += " " + shapeToString(x);
      return Status::error(msg);
    }
  }
  return out;
}

Status broadcastsTo(const Shape& from, const Shape& to, const std::string& what) {
  auto b = broadcastShapes({from, to});
  if (b && *b == to) return Status();
  return Status::error(what + " " + shapeToString(from) + " does not broadcast to " +
                       shapeToString(to));
}

std::vector<int64_t> broadcastOffsets(const Shape& from, const Shape& to) {
  std::vector<int64_t> at(static_cast<size_t>(numElements(to)));
  forEachBroadcast<1>(to, {&from},
                      [&](int64_t k, const std::array<int64_t, 1>& off) { at[k] = off[0]; });
  return at;
}

std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t v = 1;
  for (size_t i = in.size(); i-- > 0;) {
    size_t o = out.size() - in.size() + i;
    st[o] = in[i] == 1 ? 0 : v;
    v *= in[i];
  }
  return st;
}

Status copyToOutput(KernelContext& ctx, size_t i, const Tensor& t, Shape shape) {
  DW_ALLOC(o, ctx.output(i, t.dtype(), std::move(shape)));
  if (t.dtype() == DType::kString)
    o->strings() = t.strings();
  else if (t.bytes())
    std::memcpy(o->raw(), t.raw(), t.bytes());
  return Status();
}

void gemmF32(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
             const float* Bm, int64_t ldb, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  dnnl::sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.0f, A, lda, Bm, ldb, 0.0f, C, ldc);
}

std::vector<float> projectRows(const float* x, int64_t rows, int64_t in, const float* W,
                               int64_t out, const float* bias) {
  std::vector<float> y(static_cast<size_t>(rows * out));
  gemmF32(false, false, rows, out, in, x, in, W, out, y.data(), out);
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) y[r * out + j] += bias[j];
  return y;
}

}  // namespace dw::engine
