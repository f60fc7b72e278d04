// BatchNormalizationTraining and BatchNormalizationGrad (domain "com.deepwire.grad") on the
// oneDNN table, float32 tensors: batch normalization in training mode and its backward as
// channel-parallel loops, optionally with a Relu and a max pooling fused in, forward and
// backward, over NCHW, nChw16c, or the output of a one-input-channel convolution they compute
// themselves.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/grad_common.h"
#include "engine/onednn/max_pool_planes.h"
#include "engine/onednn/onednn_backend.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace onednn {
namespace {

// Batch normalization over plain NCHW (N x C x S, S the spatial size) in training. oneDNN 2.6's
// plain-layout batch normalization (ncsp_bnorm) took ~40% of the CNN example's training step, and
// its blocked layouts would cost a reorder on either side; these loops give each thread whole
// channels, whose N*S values stay in its L2 cache across the passes. The per-channel order of the
// additions is fixed, so results do not depend on the thread count. The project builds for
// baseline x86-64, so the per-channel work is cloned for AVX-512 and picked at run time.
//
// The CNN block BatchNormalization -> Relu -> MaxPool can run as one node in training
// (fuseTrainingChains): the forward pools each normalised plane while it is in L1 and keeps,
// per pooled value, which window element won (the full-size normalised activation is never
// written), and the backward scatters the pooled gradient through those positions straight
// into its reductions. Both fused and unfused paths run the same per-channel functions, so the
// fused results are bit-identical to the unfused ones. The same holds for the two further
// fusions below: an X that arrives in nChw16c (native16) and an X that the normalization
// computes itself from a one-channel image (FusedConv).

// One channel of an N x C x S tensor: N rows of S contiguous values, `stride` (C*S) apart.
struct ChannelRows {
  int64_t n, s, stride;
};

// The rows of an N x C x spatial... tensor's channels.
ChannelRows channelRows(const Shape& x) {
  int64_t s = 1;
  for (size_t i = 2; i < x.size(); ++i) s *= x[i];
  return {x[0], s, x[1] * s};
}

// out[c][r] = in[r][c] for the r < rows and c < cols of a 16 x 16 tile: input row r at
// in + r * inStride, output row c at out + c * outStride. Four rounds of in-register shuffles:
// pairs of 32-bit, then 64-bit elements within each 128-bit lane, then a 4 x 4 transpose of
// the lanes.
DW_AVX512 void transposeTile16(const float* in, int64_t inStride, float* out, int64_t outStride,
                               int64_t rows, int64_t cols) {
  const __mmask16 colMask = cols >= 16 ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 rowMask = rows >= 16 ? 0xffff : static_cast<__mmask16>((1u << rows) - 1);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(colMask, in + i * inStride) : _mm512_setzero_ps();
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + m], 128-bit lane k: column 4k + m of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]),
                  c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Output column 4k + m gathers lane k of u[m], u[4 + m], u[8 + m], u[12 + m].
  for (int m = 0; m < 4; ++m) {
    const __m512 p = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x44);
    const __m512 q = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x44);
    const __m512 u = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xee);
    const __m512 v = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xee);
    t[m] = _mm512_shuffle_f32x4(p, q, 0x88);
    t[4 + m] = _mm512_shuffle_f32x4(p, q, 0xdd);
    t[8 + m] = _mm512_shuffle_f32x4(u, v, 0x88);
    t[12 + m] = _mm512_shuffle_f32x4(u, v, 0xdd);
  }
  for (int c = 0; c < cols; ++c) _mm512_mask_storeu_ps(out + c * outStride, rowMask, t[c]);
}

// The same tile, portably.
void transposeTile(const float* in, int64_t inStride, float* out, int64_t outStride, int64_t rows,
                   int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t i = 0; i < rows; ++i) out[c * outStride + i] = in[i * inStride + c];
}

// Channels of an N x C x S tensor as rows in a buffer, for the normalization kernels to run
// their per-channel code on: each channel's N rows of S floats back to back, channels
// `chanStride` apart. (Where a row starts does not change any result: the kernels' sums follow
// rowsum's fixed order, and their other loops are elementwise.) Channels are never a whole
// multiple of 4 KiB apart: the rows that a loop writes or reads together, one per channel, would
// then all map to the same few L1 sets and alias in the store buffer (64 rows of 784 floats
// are exactly 49 pages).
struct ChannelBuffer {
  int64_t n = 0, c = 0, s = 0, chanStride = 0;
  float* base = nullptr;

  // `count` channels, sized in `buf` (kept by the caller across calls).
  ChannelBuffer(int64_t n_, int64_t c_, int64_t s_, int64_t count, std::vector<float>& buf)
      : n(n_), c(c_), s(s_) {
    constexpr int64_t kPage = 1024, kStagger = 64;  // floats: 4 KiB, 256 bytes
    chanStride = (n * s + 15) / 16 * 16;
    if (chanStride % kPage == 0) chanStride += kStagger;
    buf.resize(static_cast<size_t>(count * chanStride + 16));
    const auto p = reinterpret_cast<uintptr_t>(buf.data());
    base = reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
  }
  ChannelRows rows() const { return {n, s, s}; }
  float* channel(int64_t l) const { return base + l * chanStride; }
};

// One channel block (16 channels) of an N x C x S tensor in nChw16c (onednn::kChannelBlock),
// gathered into plain rows and scattered back.
struct GatheredBlock : ChannelBuffer {
  GatheredBlock(int64_t n_, int64_t c_, int64_t s_, std::vector<float>& buf)
      : ChannelBuffer(n_, c_, s_, onednn::kChannelBlock, buf) {}

  // 16 x 16 tiles: 16 positions of the block's 16 channels.
  void gather(const float* x, int64_t cb) const {
    constexpr int64_t B = onednn::kChannelBlock;
    const auto tile = avx512Usable() ? transposeTile16 : transposeTile;
    for (int64_t i = 0; i < n; ++i) {
      const float* src = x + (i * (c / B) + cb) * s * B;
      for (int64_t j0 = 0; j0 < s; j0 += B)
        tile(src + j0 * B, B, base + i * s + j0, chanStride, std::min(B, s - j0), B);
    }
  }
  void scatter(float* x, int64_t cb) const {
    constexpr int64_t B = onednn::kChannelBlock;
    const auto tile = avx512Usable() ? transposeTile16 : transposeTile;
    for (int64_t i = 0; i < n; ++i) {
      float* dst = x + (i * (c / B) + cb) * s * B;
      for (int64_t j0 = 0; j0 < s; j0 += B)
        tile(base + i * s + j0, chanStride, dst + j0 * B, B, B, std::min(B, s - j0));
    }
  }
  // The same rows copied to a plain tensor.
  void copyOut(float* x, int64_t cb) const {
    for (int64_t l = 0; l < onednn::kChannelBlock; ++l)
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(channel(l) + i * s, s, x + (i * c + cb * onednn::kChannelBlock + l) * s);
  }
};

// A blocked tensor the session declared: its shape must allow the layout.
Status checkBlocked(const Tensor& t, const char* what) {
  if (onednn::blockedShapeOk(t.shape())) return Status();
  return Status::error(std::string(what) + " of shape " + shapeToString(t.shape()) +
                       " cannot be handed over in the nChw16c layout (it needs 4-D with channels "
                       "a multiple of 16); run the session with fuse off");
}

// The rows of one channel lie C*S values apart, too far for the hardware prefetchers (a 7x7
// pooled row is 196 bytes): the first pass over a channel asks for the rows a few ahead itself.
constexpr int64_t kPrefetchRows = 4;
inline void prefetchRow(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 2);
}

// Sums over one row, in an order fixed by the row's length alone: element j goes to lane j % 64
// of four 16-float accumulators, which are folded pairwise at the end. A single accumulator (as
// `omp simd reduction` makes) waits on each addition's latency; four keep the adder busy. The
// order does not depend on the row's address or on the vector width the caller was compiled
// for, so every copy of a loop rounds alike.
namespace rowsum {

typedef float V16 __attribute__((vector_size(64), aligned(4), may_alias));
constexpr int64_t kSpan = 64;

inline float fold(V16 a, V16 b, V16 c, V16 d) {
  const V16 v = (a + b) + (c + d);
  float t[16];
  std::memcpy(t, &v, sizeof t);
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) t[k] += t[k + w];
  return t[0];
}

// The sum of f(j) for j < S, where f(j, V16*) adds the 16 terms from j into its accumulator and
// tail(j, k) is term j + k of the partial last span.
template <class Full, class Tail>
inline float sum(int64_t S, Full&& full, Tail&& tail) {
  V16 a = {}, b = {}, c = {}, d = {};
  int64_t j = 0;
  for (; j + kSpan <= S; j += kSpan) {
    a += full(j);
    b += full(j + 16);
    c += full(j + 32);
    d += full(j + 48);
  }
  if (j < S) {
    alignas(64) float t[kSpan] = {};
    for (int64_t k = 0; k < S - j; ++k) t[k] = tail(j, k);
    V16 v[4];
    std::memcpy(v, t, sizeof t);
    a += v[0];
    b += v[1];
    c += v[2];
    d += v[3];
  }
  return fold(a, b, c, d);
}

inline V16 load(const float* p) {
  return *reinterpret_cast<const V16*>(p);
}

// sum(p[j])
inline float plain(const float* p, int64_t S) {
  return sum(
      S, [&](int64_t j) { return load(p + j); }, [&](int64_t j, int64_t k) { return p[j + k]; });
}

// sum((p[j] - m)^2)
inline float squaredDeviations(const float* p, int64_t S, float m) {
  return sum(
      S,
      [&](int64_t j) {
        const V16 d = load(p + j) - m;
        return d * d;
      },
      [&](int64_t j, int64_t k) {
        const float d = p[j + k] - m;
        return d * d;
      });
}

// sum(g[j] * (p[j] - m))
inline float products(const float* g, const float* p, int64_t S, float m) {
  return sum(
      S, [&](int64_t j) { return load(g + j) * (load(p + j) - m); },
      [&](int64_t j, int64_t k) { return g[j + k] * (p[j + k] - m); });
}

}  // namespace rowsum

// y = x * a + b over one channel's rows, with max(0, y) under `relu`. With `pool` the rows of y
// go through a row buffer into maxPoolArgPlane, and `y` and `arg` are the pooled channel's rows,
// `poolStride` apart.
__attribute__((target_clones("avx512f", "default"))) void bnApplyChannel(
    const ChannelRows& v, const float* x, float a, float b, bool relu, const MaxPool2d* pool,
    int64_t poolStride, float* y, uint8_t* arg) {
  const int64_t S = v.s;
  thread_local std::vector<float> rowBuf;  // kept across calls: no allocation per step
  if (pool) rowBuf.resize(static_cast<size_t>(S));
  for (int64_t i = 0; i < v.n; ++i) {
    const float* p = x + i * v.stride;
    float* q = pool ? rowBuf.data() : y + i * v.stride;
    if (relu) {
#pragma omp simd
      for (int64_t j = 0; j < S; ++j) q[j] = std::max(p[j] * a + b, 0.0f);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < S; ++j) q[j] = p[j] * a + b;
    }
    if (pool) maxPoolArgPlane(*pool, q, relu, y + i * poolStride, arg + i * poolStride);
  }
}

// Forward of one channel: batch mean and population variance (two passes, as oneDNN computes
// them), then y = (x - mean) / sqrt(var + eps) * scale + shift, with max(0, y) under `relu`.
// With `pool` the rows of y go through a row buffer into maxPoolArgPlane, and `y` and `arg` are
// the pooled channel's rows, `poolStride` apart.
__attribute__((target_clones("avx512f", "default"))) void bnForwardChannel(
    const ChannelRows& v, const float* x, float scale, float shift, float eps, bool relu,
    const MaxPool2d* pool, int64_t poolStride, float* y, uint8_t* arg, float* mean, float* var) {
  const int64_t S = v.s;
  const double count = static_cast<double>(v.n * S);
  double sum = 0;
  for (int64_t i = 0; i < v.n; ++i) {
    if (i + kPrefetchRows < v.n) prefetchRow(x + (i + kPrefetchRows) * v.stride, S * 4);
    sum += rowsum::plain(x + i * v.stride, S);
  }
  const float m = static_cast<float>(sum / count);
  double sq = 0;
  for (int64_t i = 0; i < v.n; ++i) sq += rowsum::squaredDeviations(x + i * v.stride, S, m);
  const float vr = static_cast<float>(sq / count);
  const float a = scale / std::sqrt(vr + eps), b = shift - m * a;
  bnApplyChannel(v, x, a, b, relu, pool, poolStride, y, arg);
  *mean = m;
  *var = vr;
}

// Backward of one channel with k = scale / sqrt(var + eps):
//   dShift = sum(dy), dScale = sum(dy * (x - mean)) / sqrt(var + eps),
//   dx = k * (dy - sum(dy) / M - (x - mean) * sum(dy * (x - mean)) / ((var + eps) * M)),
// or dx = k * dy when the statistics are constants (global). With `pool`, `dy` and `arg` are
// the pooled gradient's rows (`poolStride` apart) and each row of the normalization's dy is
// rebuilt by maxPoolArgScatter when a pass needs it. The first pass (BnGradChannel) sums and
// gives the coefficients, the second runs row by row (row()), so that a caller can interleave
// the rows of several channels.
struct BnGradChannel {
  ChannelRows v;
  const float *x, *dy;
  const MaxPool2d* pool;
  int64_t poolStride;
  const uint8_t* arg;
  float m = 0, k = 0, a = 0, b = 0;

  // Row i of dy: the tensor's own, or rebuilt from the pooled gradient in `buf`.
  const float* dyRow(int64_t i, std::vector<float>& buf) const {
    if (!pool) return dy + i * v.stride;
    buf.resize(static_cast<size_t>(v.s));
    maxPoolArgScatter(*pool, dy + i * poolStride, arg + i * poolStride, buf.data());
    return buf.data();
  }

  __attribute__((target_clones("avx512f", "default"))) void sums(float scale, float mean, float var,
                                                                 float eps, bool global,
                                                                 float* dScale, float* dShift) {
    const int64_t S = v.s;
    thread_local std::vector<float> buf;  // kept across calls: no allocation per step
    m = mean;
    const float istd = 1.0f / std::sqrt(var + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < v.n; ++i) {
      if (const int64_t ahead = i + kPrefetchRows; ahead < v.n) {
        prefetchRow(x + ahead * v.stride, S * 4);
        if (pool) {
          prefetchRow(dy + ahead * poolStride, pool->oh * pool->ow * 4);
          prefetchRow(arg + ahead * poolStride, pool->oh * pool->ow);
        } else {
          prefetchRow(dy + ahead * v.stride, S * 4);
        }
      }
      const float *p = x + i * v.stride, *g = dyRow(i, buf);
      sdy += rowsum::plain(g, S);
      sdyx += rowsum::products(g, p, S, m);
    }
    *dShift = static_cast<float>(sdy);
    *dScale = static_cast<float>(sdyx) * istd;
    k = scale * istd;
    const double M = static_cast<double>(v.n * S);
    a = global ? 0.0f : static_cast<float>(sdy / M);
    b = global ? 0.0f : static_cast<float>(sdyx / M) * istd * istd;
  }

  // Row i of dx into q.
  __attribute__((target_clones("avx512f", "default"))) void row(int64_t i, float* q) const {
    thread_local std::vector<float> buf;
    const float *p = x + i * v.stride, *g = dyRow(i, buf);
    const float kk = k, aa = a, bb = b, mm = m;
#pragma omp simd
    for (int64_t j = 0; j < v.s; ++j) q[j] = kk * (g[j] - aa - (p[j] - mm) * bb);
  }
};

void bnBackwardChannel(const ChannelRows& v, const float* x, const float* dy, float scale,
                       float mean, float var, float eps, bool global, const MaxPool2d* pool,
                       int64_t poolStride, const uint8_t* arg, float* dx, float* dScale,
                       float* dShift) {
  BnGradChannel c{v, x, dy, pool, poolStride, arg};
  c.sums(scale, mean, var, eps, global, dScale, dShift);
  for (int64_t i = 0; i < v.n; ++i) c.row(i, dx + i * v.stride);
}

// Synchronized BatchNormalization (RunInfo::sumAcrossProcesses): the statistics of every
// process's samples together, over plain rows. Forward: the mean, then the variance about it
// (two passes, as the unsynchronized kernel computes them), each summed across processes.
Status syncForward(const RunInfo& run, const ChannelRows& r, const float* x, const float* scale,
                   const float* shift, int64_t c, float eps, bool relu, float* y, float* mean,
                   float* var) {
  const int64_t S = r.s;
  std::vector<double> acc(static_cast<size_t>(c + 1));
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < r.n; ++i) sum += rowsum::plain(x + ch * S + i * r.stride, S);
    acc[ch] = sum;
  }
  acc[c] = static_cast<double>(r.n * S);
  DW_RETURN_IF_ERROR(run.sumAcrossProcesses(acc.data(), c + 1));
  const double count = acc[c];
  for (int64_t ch = 0; ch < c; ++ch) mean[ch] = static_cast<float>(acc[ch] / count);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    double sq = 0;
    for (int64_t i = 0; i < r.n; ++i)
      sq += rowsum::squaredDeviations(x + ch * S + i * r.stride, S, mean[ch]);
    acc[ch] = sq;
  }
  DW_RETURN_IF_ERROR(run.sumAcrossProcesses(acc.data(), c));
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    var[ch] = static_cast<float>(acc[ch] / count);
    const float a = scale[ch] / std::sqrt(var[ch] + eps), b = shift[ch] - mean[ch] * a;
    bnApplyChannel(r, x + ch * S, a, b, relu, nullptr, 0, y + ch * S, nullptr);
  }
  return Status();
}

// Backward: the sums of dy and dy * (x - mean) over every process, each process's weighted by
// its share of the batch as its gradient will be (the global loss is the shares' weighted sum
// of the processes' losses), and dx returned unweighted, as the trainer weights it afterwards:
//   dx = k * (dy - (S1 / M - (x - mean) * S2 * istd^2 / M) / share).
// dScale and dShift stay this process's own sums: the trainer weights and sums them.
Status syncBackward(const RunInfo& run, const ChannelRows& r, const float* x, const float* dy,
                    const float* scale, const float* mean, const float* var, int64_t c, float eps,
                    float* dx, float* dScale, float* dShift) {
  const int64_t S = r.s;
  std::vector<double> acc(static_cast<size_t>(2 * c + 1));
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < r.n; ++i) {
      const float *p = x + ch * S + i * r.stride, *g = dy + ch * S + i * r.stride;
      sdy += rowsum::plain(g, S);
      sdyx += rowsum::products(g, p, S, mean[ch]);
    }
    const float istd = 1.0f / std::sqrt(var[ch] + eps);
    dShift[ch] = static_cast<float>(sdy);
    dScale[ch] = static_cast<float>(sdyx) * istd;
    acc[ch] = sdy * run.share;
    acc[c + ch] = sdyx * run.share;
  }
  acc[2 * c] = static_cast<double>(r.n * S);
  DW_RETURN_IF_ERROR(run.sumAcrossProcesses(acc.data(), 2 * c + 1));
  const double scaleM = acc[2 * c] * run.share;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    const float istd = 1.0f / std::sqrt(var[ch] + eps);
    BnGradChannel g{r, x + ch * S, dy + ch * S, nullptr, 0, nullptr};
    g.m = mean[ch];
    g.k = scale[ch] * istd;
    g.a = static_cast<float>(acc[ch] / scaleM);
    g.b = static_cast<float>(acc[c + ch] / scaleM) * istd * istd;
    for (int64_t i = 0; i < r.n; ++i) g.row(i, dx + ch * S + i * r.stride);
  }
  return Status();
}

// The fused normalization over an X that arrives in nChw16c, read as it lies: each vector holds
// one position of 16 channels, so X and dX need no transposes, only the four times smaller
// pooled tensors do. Each channel's sums follow rowsum's order exactly (element j of a row in
// slot j % 64, the slots folded alike, the rows added in double), and every other step mirrors
// the plain path's operations, so the results are bit-identical to it. The winners are kept in
// the same blocked order ([n][c / 16][oh][ow][c % 16]) for the gradient. AVX-512 and the 2x2 /
// stride 2 window only; elsewhere the kernels gather channels into plain rows (GatheredBlock).
namespace native16 {

constexpr int64_t B = onednn::kChannelBlock;

bool usable(const MaxPool2d& g) {
  return g.tiled2() && avx512Usable();
}

// rowsum's 64 lane accumulators, for 16 channels at once: slot 16q + k is lane k of
// accumulator q.
struct Slots {
  __m512 s[64];
  DW_AVX512 void reset() {
    for (auto& v : s) v = _mm512_setzero_ps();
  }
  DW_AVX512 __m512 fold() const {
    __m512 v[16];
    for (int k = 0; k < 16; ++k)
      v[k] = _mm512_add_ps(_mm512_add_ps(s[k], s[16 + k]), _mm512_add_ps(s[32 + k], s[48 + k]));
    for (int w = 8; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) v[k] = _mm512_add_ps(v[k], v[k + w]);
    return v[0];
  }
};

// A double per channel, as the plain path adds its row sums.
struct Doubles {
  __m512d lo, hi;
  DW_AVX512 Doubles() : lo(_mm512_setzero_pd()), hi(_mm512_setzero_pd()) {}
  DW_AVX512 void add(__m512 v) {
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    hi = _mm512_add_pd(
        hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  DW_AVX512 void get(double* out) const {
    _mm512_storeu_pd(out, lo);
    _mm512_storeu_pd(out + 8, hi);
  }
};

// The sum over each image's row of term(j), a vector of 16 channels' terms at position j.
template <class Term>
DW_AVX512 inline void rowSums(int64_t n, int64_t S, Term&& term, double* out) {
  Slots sl;
  Doubles d;
  for (int64_t i = 0; i < n; ++i) {
    sl.reset();
    for (int64_t j = 0; j < S; ++j) sl.s[j & 63] = _mm512_add_ps(sl.s[j & 63], term(i, j));
    d.add(sl.fold());
  }
  d.get(out);
}

// The geometry of one channel block: image i's block starts at i * imageStride.
struct Block {
  int64_t n, S, imageStride;      // X and dX: S * 16 floats per image
  int64_t ps, pooledImageStride;  // the pooled planes (plain): ps floats, C * ps per image
};

// bnForwardChannel for the 16 channels of a block; y: the block's first pooled plane, arg: the
// block's winners.
DW_AVX512 void forward(const Block& k, const MaxPool2d& g, const float* x, const float* scale,
                       const float* shift, float eps, bool relu, float* y, uint8_t* arg,
                       float* mean, float* var) {
  const double count = static_cast<double>(k.n * k.S);
  auto at = [&](int64_t i, int64_t j) DW_AVX512 { return x + i * k.imageStride + j * B; };
  double sums[B];
  rowSums(
      k.n, k.S, [&](int64_t i, int64_t j) DW_AVX512 { return _mm512_loadu_ps(at(i, j)); }, sums);
  alignas(64) float m[B], a[B], b[B];
  for (int l = 0; l < B; ++l) m[l] = static_cast<float>(sums[l] / count);
  const __m512 mv = _mm512_load_ps(m);
  rowSums(
      k.n, k.S,
      [&](int64_t i, int64_t j) DW_AVX512 {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(at(i, j)), mv);
        return _mm512_mul_ps(d, d);
      },
      sums);
  for (int l = 0; l < B; ++l) {
    const float vr = static_cast<float>(sums[l] / count);
    a[l] = scale[l] / std::sqrt(vr + eps);
    b[l] = shift[l] - m[l] * a[l];
    mean[l] = m[l];
    var[l] = vr;
  }
  const __m512 av = _mm512_load_ps(a), bv = _mm512_load_ps(b), zero = _mm512_setzero_ps();
  // y = x * a + b, then max(0, y) under relu: std::max(y, 0) is MAXPS(0, y).
  auto norm = [&](const float* p) DW_AVX512 {
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(p), av), bv);
    return relu ? _mm512_max_ps(zero, v) : v;
  };
  thread_local std::vector<float> pooled;  // one image's pooled block, [position][channel]
  pooled.resize(static_cast<size_t>(k.ps * B));
  for (int64_t i = 0; i < k.n; ++i) {
    uint8_t* ai = arg + i * k.pooledImageStride;
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const float* p = at(i, 2 * oh * g.w + 2 * ow);
        const __m512 va = norm(p), vb = norm(p + B), vc = norm(p + g.w * B),
                     vd = norm(p + (g.w + 1) * B);
        // As tiled2::windows: std::max(std::max(a, b), std::max(c, d)), the first winner.
        const __m512 mx = _mm512_max_ps(_mm512_max_ps(vd, vc), _mm512_max_ps(vb, va));
        const __mmask16 ia = _mm512_cmp_ps_mask(va, mx, _CMP_EQ_OQ);
        const __mmask16 ib = _mm512_cmp_ps_mask(vb, mx, _CMP_EQ_OQ) & ~ia;
        const __mmask16 ic = _mm512_cmp_ps_mask(vc, mx, _CMP_EQ_OQ) & ~(ia | ib);
        __m512i w = _mm512_set1_epi32(3);
        w = _mm512_mask_mov_epi32(w, ic, _mm512_set1_epi32(2));
        w = _mm512_mask_mov_epi32(w, ib, _mm512_set1_epi32(1));
        w = _mm512_mask_mov_epi32(w, ia, _mm512_setzero_si512());
        if (relu)
          w = _mm512_mask_mov_epi32(w, _mm512_cmp_ps_mask(mx, zero, _CMP_LE_OQ),
                                    _mm512_set1_epi32(kNoArg));
        const int64_t q = oh * g.ow + ow;
        _mm512_storeu_ps(pooled.data() + q * B, mx);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ai + q * B), _mm512_cvtepi32_epi8(w));
      }
    for (int64_t q0 = 0; q0 < k.ps; q0 += B)
      transposeTile16(pooled.data() + q0 * B, B, y + i * k.pooledImageStride + q0, k.ps,
                      std::min(B, k.ps - q0), B);
  }
}

// One image's pooled gradient (`pooled`, [position][channel]) spread over its full-size block
// `full` as maxPoolArgScatter writes it: each window's winner gets the gradient, the rest 0.
DW_AVX512 void scatterImage(const MaxPool2d& g, const float* pooled, const uint8_t* arg,
                            float* full) {
  if (2 * g.oh != g.h || 2 * g.ow != g.w) std::fill_n(full, g.h * g.w * B, 0.0f);
  for (int64_t oh = 0; oh < g.oh; ++oh)
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const int64_t q = oh * g.ow + ow;
      const __m512i w =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(arg + q * B)));
      const __m512 gv = _mm512_loadu_ps(pooled + q * B);
      float* p = full + (2 * oh * g.w + 2 * ow) * B;
      float* to[4] = {p, p + B, p + g.w * B, p + (g.w + 1) * B};
      for (int e = 0; e < 4; ++e)
        _mm512_storeu_ps(to[e],
                         _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(w, _mm512_set1_epi32(e)), gv));
    }
}

// bnBackwardChannel for the 16 channels of a block, pooled: dy the block's first pooled
// gradient plane, arg its winners. dX is written blocked, or where plainStride > 0 as the
// block's 16 plain planes (dx the first, plainStride = C * S floats per image). Each image's
// full-size dy is rebuilt in a buffer that stays in L1 for each pass, so that X's block (read
// twice) keeps the L2 cache to itself.
DW_AVX512 void backward(const Block& k, const MaxPool2d& g, const float* x, const float* dy,
                        const uint8_t* arg, const float* scale, const float* mean, const float* var,
                        float eps, bool global, float* dx, int64_t plainStride, float* dScale,
                        float* dShift) {
  thread_local std::vector<float> pooled, full, dxImage;
  pooled.resize(static_cast<size_t>(k.n * k.ps * B));
  full.resize(static_cast<size_t>(k.S * B));
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t q0 = 0; q0 < k.ps; q0 += B)
      transposeTile16(dy + i * k.pooledImageStride + q0, k.ps, pooled.data() + (i * k.ps + q0) * B,
                      B, B, std::min(B, k.ps - q0));
  auto image = [&](int64_t i) DW_AVX512 {
    scatterImage(g, pooled.data() + i * k.ps * B, arg + i * k.pooledImageStride, full.data());
  };
  const __m512 mv = _mm512_loadu_ps(mean);
  // sum(dy) and sum(dy * (x - mean)), each in rowsum's order.
  Slots s1, s2;
  Doubles d1, d2;
  for (int64_t i = 0; i < k.n; ++i) {
    image(i);
    s1.reset();
    s2.reset();
    const float* xi = x + i * k.imageStride;
    for (int64_t j = 0; j < k.S; ++j) {
      const __m512 gv = _mm512_loadu_ps(full.data() + j * B);
      s1.s[j & 63] = _mm512_add_ps(s1.s[j & 63], gv);
      s2.s[j & 63] = _mm512_add_ps(
          s2.s[j & 63], _mm512_mul_ps(gv, _mm512_sub_ps(_mm512_loadu_ps(xi + j * B), mv)));
    }
    d1.add(s1.fold());
    d2.add(s2.fold());
  }
  double sdy[B], sdyx[B];
  d1.get(sdy);
  d2.get(sdyx);
  alignas(64) float kv[B], av[B], bv[B];
  const double M = static_cast<double>(k.n * k.S);
  for (int l = 0; l < B; ++l) {
    const float istd = 1.0f / std::sqrt(var[l] + eps);
    dShift[l] = static_cast<float>(sdy[l]);
    dScale[l] = static_cast<float>(sdyx[l]) * istd;
    kv[l] = scale[l] * istd;
    av[l] = global ? 0.0f : static_cast<float>(sdy[l] / M);
    bv[l] = global ? 0.0f : static_cast<float>(sdyx[l] / M) * istd * istd;
  }
  const __m512 kk = _mm512_load_ps(kv), aa = _mm512_load_ps(av), bb = _mm512_load_ps(bv);
  const bool plainDx = plainStride > 0;
  if (plainDx) dxImage.resize(static_cast<size_t>(k.S * B));
  for (int64_t i = 0; i < k.n; ++i) {
    image(i);
    const float* xi = x + i * k.imageStride;
    float* out = plainDx ? dxImage.data() : dx + i * k.imageStride;
    // k * (dy - a - (x - mean) * b)
    for (int64_t j = 0; j < k.S; ++j) {
      const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xi + j * B), mv), bb);
      _mm512_storeu_ps(
          out + j * B,
          _mm512_mul_ps(kk,
                        _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(full.data() + j * B), aa), d)));
    }
    if (plainDx)
      for (int64_t j0 = 0; j0 < k.S; j0 += B)
        transposeTile16(out + j0 * B, B, dx + i * plainStride + j0, k.S, std::min(B, k.S - j0), B);
  }
}

}  // namespace native16

// The max pooling fused into a BatchNormalizationTraining / BatchNormalizationGrad pair by the
// session (Fused::maxPool), resolved against a 4-D input.
struct FusedPool {
  fusion::Window window;
  bool on = false;

  explicit FusedPool(const fusion::Fused& f) : window(f.maxPool), on(f.hasMaxPool()) {}

  // The window over x (N x C x H x W); an error where the fusion does not apply.
  Result<MaxPool2d> resolve(const Shape& x) const {
    auto r = fusion::fusedMaxPool(window, x);
    if (!r) return r.status();
    MaxPool2d g;
    g.h = r->h, g.w = r->w, g.oh = r->oh, g.ow = r->ow, g.kh = r->kh, g.kw = r->kw;
    g.sh = r->sh, g.sw = r->sw, g.ph = r->ph, g.pw = r->pw;
    return g;
  }
};

// The one-input-channel convolution fused into a BatchNormalizationTraining /
// BatchNormalizationGrad pair by the session (fuseConvIntoBatchNorm; Fused::conv names it,
// Fused::convWindow gives its strides, pads and dilations). The node reads the image (input
// `image`), the weights and the bias (inputs `at`, `at + 1`) in place of the convolution's output X
// and computes X a block of channels at a time, into a buffer that stays in the thread's cache: X,
// the block's largest tensor, is never written, and the gradient node hands each row of dX straight
// to the weight-gradient sums instead of storing it. The per-image convolution functions are the
// unfused kernels' own (SingleChannelImages), and the weight gradient adds the images in the same
// order, so results are bit-identical to the unfused graph's.
class FusedConv {
 public:
  FusedConv(const fusion::Fused& f, int image, int at)
      : on_(!f.conv.empty()),
        imageAt_(image),
        at_(at),
        strides_(f.convWindow.strides),
        pads_(f.convWindow.pads),
        dilations_(f.convWindow.dilations) {}
  bool on() const { return on_; }

  // Prepares every image of `x` (N x 1 x H x W) for the convolution with the weights W
  // (OC x 1 x KH x KW) and returns X's shape.
  Result<Shape> load(KernelContext& ctx) {
    const Tensor& x = ctx.input(imageAt_);
    const std::string fix = "; run the session with fuse off";
    if (!ctx.hasInput(at_))
      return Status::error("the fused convolution's weights (input " + std::to_string(at_ + 1) +
                           ") are missing" + fix);
    const Tensor& w = ctx.input(at_);
    w_ = w.data<float>();
    b_ = ctx.hasInput(at_ + 1) ? ctx.input(at_ + 1).data<float>() : nullptr;
    const std::pair<const char*, const Tensor*> operands[] = {
        {"image", &x}, {"weights", &w}, {"bias", b_ ? &ctx.input(at_ + 1) : nullptr}};
    for (const auto& [what, t] : operands)
      if (t && t->dtype() != DType::kFloat)
        return Status::error(std::string("the fused convolution supports float32 only, got ") +
                             dtypeName(t->dtype()) + " for the " + what + fix);
    if (x.rank() != 4 || x.dim(1) != 1 || w.rank() != 4 || w.dim(1) != 1)
      return Status::error("the fused convolution needs an N x 1 x H x W input (got " +
                           shapeToString(x.shape()) + ") and OC x 1 x KH x KW weights (got " +
                           shapeToString(w.shape()) + ")" + fix);
    if (b_ && ctx.input(at_ + 1).size() != w.dim(0))
      return Status::error("the fused convolution's bias of shape " +
                           shapeToString(ctx.input(at_ + 1).shape()) + " does not match its " +
                           std::to_string(w.dim(0)) + " output channels" + fix);
    const std::vector<int64_t> key{x.dim(0), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    if (!images_ || key != key_) {
      if (strides_.size() != 2 || pads_.size() != 4 || dilations_.size() != 2)
        return Status::error("the fused convolution needs 2-D strides, pads and dilations" + fix);
      for (int i = 0; i < 2; ++i)
        if (strides_[i] < 1 || dilations_[i] < 1 || pads_[i] < 0 || pads_[i + 2] < 0)
          return Status::error(
              "the fused convolution needs strides and dilations of at least 1 "
              "and pads of at least 0" +
              fix);
      onednn::SingleChannelConv g{x.dim(0), w.dim(0), x.dim(2),      x.dim(3),     0,
                                  0,        w.dim(2), w.dim(3),      strides_[0],  strides_[1],
                                  pads_[0], pads_[1], dilations_[0], dilations_[1]};
      for (int i = 0; i < 2; ++i) {
        const int64_t span = (i == 0 ? g.h : g.w) + pads_[i] + pads_[i + 2] -
                             ((i == 0 ? g.kh : g.kw) - 1) * dilations_[i] - 1;
        if (span < 0)
          return Status::error("the fused convolution's window exceeds its input of shape " +
                               shapeToString(x.shape()) + fix);
        (i == 0 ? g.oh : g.ow) = span / strides_[i] + 1;
      }
      images_.emplace(g);
      key_ = key;
    }
    const auto& g = images_->geometry();
    const int64_t size = images_->preparedSize();
    prepared_.resize(static_cast<size_t>(g.n * size));
    image_.resize(static_cast<size_t>(g.n));
    const float* px = x.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < g.n; ++i)
      image_[i] = images_->prepare(px + i * g.h * g.w, prepared_.data() + i * size);
    return Shape{g.n, g.oc, g.oh, g.ow};
  }

  // Channels of X a thread computes at once: as many as keep their rows (N * S floats each)
  // within about 1 MiB of its L2 cache, from 1 up to the 4 that one call of the convolution's
  // register-blocked loop computes from each load of the image (kFwdChannels).
  int64_t block(const ChannelRows& r) const {
    return std::clamp<int64_t>((int64_t{1} << 18) / std::max<int64_t>(1, r.n * r.s), 1, 4);
  }
  // Channels [o, o + count) of X into `xb`.
  void compute(const ChannelBuffer& xb, int64_t o, int64_t count) const {
    for (int64_t i = 0; i < xb.n; ++i)
      images_->forward(image_[i], w_, b_, o, count, xb.channel(0) + i * xb.s, xb.chanStride);
  }

  // The weight and bias gradient sums of channels [o, o + count) over one image, whose rows
  // of dX (contiguous, S floats each) are in `rows`: out[c * (taps + 1) + t].
  void weightGrad(int64_t i, const float* rows, int64_t count, double* out) const {
    images_->weightGrad(image_[i], rows, count, out);
  }
  int64_t taps() const {
    return images_->taps();
  }

 private:
  bool on_;
  int imageAt_, at_;
  std::vector<int64_t> strides_, pads_, dilations_;
  std::optional<onednn::SingleChannelImages> images_;  // for the shapes in key_
  std::vector<int64_t> key_;
  std::vector<float> prepared_;      // every image, prepared (kept: no allocation per step)
  std::vector<const float*> image_;  // where each prepared image lies
  const float *w_ = nullptr, *b_ = nullptr;
};

// BatchNormalizationTraining(X, scale, B, mean, var) -> Y, running_mean, running_var,
// saved_mean, saved_var: normalises with the batch statistics (population variance) and
// updates the running ones as ONNX specifies: running = input * momentum + batch * (1 - momentum).
// With a fused max pooling Y is the pooled output and a sixth output holds each window's winner
// (uint8, the shape of Y) for the fused BatchNormalizationGrad. With a fused convolution X is
// the image, and inputs 6 and 7 are the convolution's weights and bias.
Status unfusedOnly() {
  return Status::error(
      "synchronized BatchNormalization runs without fused convolutions, pooling or blocked "
      "layouts (a trainer with sync_batchnorm plans it so)");
}

class BatchNormTraining : public Kernel {
 public:
  explicit BatchNormTraining(const KernelInit& init)
      : BatchNormTraining(init, fusion::fusedOf(init.attrs)) {}
  BatchNormTraining(const KernelInit& init, const fusion::Fused& f)
      : eps_(init.attrs.getFloat("epsilon", 1e-5f)),
        momentum_(init.attrs.getFloat("momentum", 0.9f)),
        relu_(f.activation == "Relu"),
        pool_(f),
        conv_(f, 0, 5),
        blockedX_(fusion::Fused::listed(f.blockedInputs, 0)) {
    if (!f.activation.empty() && !relu_)
      fail("BatchNormalizationTraining cannot apply fused " + f.activation);
    if (pool_.on && init.numOutputs < 6) fail("a fused max pooling needs the winners output");
    // Y's rows are written with X's stride, which a gathered or computed channel does not have.
    if ((blockedX_ || conv_.on()) && !pool_.on)
      fail("a blocked input or a fused convolution needs the fused max pooling");
    if (blockedX_ && conv_.on()) fail("a fused convolution's output cannot arrive blocked");
  }

  Status compute(KernelContext& ctx) override {
    DW_RETURN_IF_ERROR(needFloat(ctx, 5));
    const Tensor& x = ctx.input(0);
    Shape xShape = x.shape();
    if (conv_.on()) {
      auto r = conv_.load(ctx);
      if (!r) return r.status();
      xShape = *r;
    }
    if (xShape.size() < 2) return Status::error("input must be at least 2-D (N, C, ...)");
    const int64_t c = xShape[1];
    for (int i = 1; i <= 4; ++i)
      if (ctx.input(i).size() != c)
        return Status::error("scale, bias, mean and var must be vectors of length C");
    MaxPool2d g;
    Shape yShape = xShape;
    if (pool_.on) {
      auto r = pool_.resolve(xShape);
      if (!r) return r.status();
      g = *r;
      yShape = {xShape[0], c, g.oh, g.ow};
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, yShape));
    DW_ALLOC(rm, ctx.output(1, DType::kFloat, {c}));
    DW_ALLOC(rv, ctx.output(2, DType::kFloat, {c}));
    DW_ALLOC(sm, ctx.output(3, DType::kFloat, {c}));
    DW_ALLOC(sv, ctx.output(4, DType::kFloat, {c}));
    Tensor* arg = nullptr;
    if (pool_.on) {
      arg = ctx.output(5, DType::kUInt8, yShape);
      if (!arg) return ctx.status();
    }
    if (numElements(xShape) == 0) return Status::error("batch normalization of an empty batch");
    if (blockedX_) DW_RETURN_IF_ERROR(checkBlocked(x, "input X"));
    const ChannelRows rows = channelRows(xShape);
    const int64_t s = rows.s;
    const int64_t ps = pool_.on ? g.oh * g.ow : s;
    const float* px = x.data<float>();
    const float* scale = ctx.input(1).data<float>();
    const float* shift = ctx.input(2).data<float>();
    float* py = y->data<float>();
    uint8_t* pa = arg ? arg->data<uint8_t>() : nullptr;
    auto channel = [&](const ChannelRows& r, const float* xc, int64_t ch) {
      bnForwardChannel(r, xc, scale[ch], shift[ch], eps_, relu_, pool_.on ? &g : nullptr, c * ps,
                       py + ch * ps, pa ? pa + ch * ps : nullptr, sm->data<float>() + ch,
                       sv->data<float>() + ch);
    };
    const RunInfo* run = ctx.runInfo();
    if (run && run->sumAcrossProcesses) {
      if (conv_.on() || pool_.on || blockedX_) return unfusedOnly();
      DW_RETURN_IF_ERROR(syncForward(*run, rows, px, scale, shift, c, eps_, relu_, py,
                                     sm->data<float>(), sv->data<float>()));
    } else if (conv_.on()) {
      const int64_t per = conv_.block(rows), blocks = (c + per - 1) / per;
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < blocks; ++b) {
        thread_local std::vector<float> buf;  // kept across calls: no allocation per step
        const int64_t o = b * per, count = std::min(per, c - o);
        const ChannelBuffer xb(rows.n, c, s, count, buf);
        conv_.compute(xb, o, count);
        for (int64_t l = 0; l < count; ++l) channel(xb.rows(), xb.channel(l), o + l);
      }
    } else if (blockedX_ && native16::usable(g)) {
      constexpr int64_t B = onednn::kChannelBlock;
      const native16::Block k{rows.n, s, c * s, ps, c * ps};
#pragma omp parallel for schedule(static)
      for (int64_t cb = 0; cb < c / B; ++cb)
        native16::forward(k, g, px + cb * s * B, scale + cb * B, shift + cb * B, eps_, relu_,
                          py + cb * B * ps, pa + cb * B * ps, sm->data<float>() + cb * B,
                          sv->data<float>() + cb * B);
    } else if (blockedX_) {
      constexpr int64_t B = onednn::kChannelBlock;
#pragma omp parallel for schedule(static)
      for (int64_t cb = 0; cb < c / B; ++cb) {
        thread_local std::vector<float> buf;  // kept across calls: no allocation per step
        const GatheredBlock blk(rows.n, c, s, buf);
        blk.gather(px, cb);
        for (int64_t l = 0; l < B; ++l) channel(blk.rows(), blk.channel(l), cb * B + l);
      }
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t ch = 0; ch < c; ++ch) channel(rows, px + ch * s, ch);
    }
    const float* im = ctx.input(3).data<float>();
    const float* iv = ctx.input(4).data<float>();
    const float m = momentum_;
    for (int64_t i = 0; i < c; ++i) {
      rm->data<float>()[i] = im[i] * m + sm->data<float>()[i] * (1 - m);
      rv->data<float>()[i] = iv[i] * m + sv->data<float>()[i] * (1 - m);
    }
    return Status();
  }

 private:
  float eps_, momentum_;
  bool relu_;       // a Relu on the output, fused by the session (fuseTrainingChains)
  FusedPool pool_;  // a max pooling after it, fused by the session
  FusedConv conv_;  // a one-input-channel convolution before it, fused by the session
  bool blockedX_;   // X arrives in nChw16c (markBlockedLayouts)
};

// BatchNormalizationGrad(dY, X, scale, mean, var, B) -> dX, dScale, dB. With global_stats=1 the
// statistics are constants (inference-mode normalisation); otherwise they are the batch's.
// B does not enter the math. With a fused max pooling (and its Relu gradient) dY is the pooled
// output's gradient and a seventh input holds the winners from BatchNormalizationTraining.
// With a fused convolution X is the image, inputs 8 and 9 are the convolution's weights and
// bias, and outputs 4 and 5 their gradients in place of dX.
class BatchNormGrad : public Kernel {
 public:
  explicit BatchNormGrad(const KernelInit& init)
      : BatchNormGrad(init, fusion::fusedOf(init.attrs)) {}
  BatchNormGrad(const KernelInit& init, const fusion::Fused& f)
      : eps_(init.attrs.getFloat("epsilon", 1e-5f)),
        global_(init.attrs.getInt("global_stats", 0) != 0),
        pool_(f),
        conv_(f, 1, 7),
        blockedX_(fusion::Fused::listed(f.blockedInputs, 1)),
        blockedDx_(fusion::Fused::listed(f.blockedOutputs, 0)) {
    // Without the pooling dY has X's rows, which a gathered or computed channel does not have.
    // dX is computed with X's rows, so it is blocked only where X is (the session's only case).
    if ((blockedX_ || conv_.on()) && !pool_.on)
      fail("a blocked input or a fused convolution needs the fused max pooling");
    if (blockedX_ && conv_.on()) fail("a fused convolution's output cannot arrive blocked");
    if (blockedDx_ && !blockedX_) fail("a blocked dX needs a blocked X");
  }

  Status compute(KernelContext& ctx) override {
    DW_RETURN_IF_ERROR(needFloat(ctx, 6));
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (ctx.numInputs() < 6 || !ctx.hasInput(5))
      return Status::error("BatchNormalizationGrad needs 6 inputs (dY, X, scale, mean, var, B)");
    Shape xShape = x.shape();
    if (conv_.on()) {
      if (ctx.wantsOutput(0))
        return Status::error("with a fused convolution there is no dX to give");
      auto r = conv_.load(ctx);
      if (!r) return r.status();
      xShape = *r;
    }
    MaxPool2d g;
    if (pool_.on) {
      auto r = pool_.resolve(xShape);
      if (!r) return r.status();
      g = *r;
      const Shape pooled{xShape[0], xShape[1], g.oh, g.ow};
      if (dy.shape() != pooled || !ctx.hasInput(6) || ctx.input(6).dtype() != DType::kUInt8 ||
          ctx.input(6).shape() != pooled)
        return Status::error(
            "BatchNormalizationGrad with a fused max pooling: dY and the winners (its 7th "
            "input, uint8) must have the pooled shape");
    } else if (xShape.size() < 2 || dy.shape() != xShape) {
      return Status::error("BatchNormalizationGrad: dY and X must match, at least 2-D");
    }
    const int64_t c = xShape[1];
    for (int i = 2; i <= 4; ++i)
      if (ctx.input(i).size() != c)
        return Status::error("scale, mean and var must be vectors of length C");
    Tensor* dx = conv_.on() ? nullptr : ctx.output(0, DType::kFloat, xShape);
    if (!conv_.on() && !dx) return ctx.status();
    DW_ALLOC(ds, ctx.output(1, DType::kFloat, {c}));
    DW_ALLOC(db, ctx.output(2, DType::kFloat, {c}));
    if (numElements(xShape) == 0) return Status::error("batch normalization of an empty batch");
    if (blockedX_) DW_RETURN_IF_ERROR(checkBlocked(x, "input X"));
    const ChannelRows rows = channelRows(xShape);
    const int64_t s = rows.s;
    const int64_t ps = pool_.on ? g.oh * g.ow : s;
    const float* px = x.data<float>();
    const float* pg = dy.data<float>();
    const uint8_t* pa = pool_.on ? ctx.input(6).data<uint8_t>() : nullptr;
    const float* scale = ctx.input(2).data<float>();
    const float* mean = ctx.input(3).data<float>();
    const float* var = ctx.input(4).data<float>();
    auto channel = [&](const ChannelRows& r, const float* xc, float* dxc, int64_t ch) {
      bnBackwardChannel(r, xc, pg + ch * ps, scale[ch], mean[ch], var[ch], eps_, global_,
                        pool_.on ? &g : nullptr, c * ps, pa ? pa + ch * ps : nullptr, dxc,
                        ds->data<float>() + ch, db->data<float>() + ch);
    };
    const RunInfo* run = ctx.runInfo();
    if (run && run->sumAcrossProcesses && !global_) {
      if (conv_.on() || pool_.on || blockedX_ || blockedDx_) return unfusedOnly();
      return syncBackward(*run, rows, px, pg, scale, mean, var, c, eps_, dx->data<float>(),
                          ds->data<float>(), db->data<float>());
    }
    if (conv_.on()) {
      const Shape& ws = ctx.input(7).shape();
      const int64_t taps = conv_.taps(), per = taps + 1;
      // The weight gradient is always summed; unwanted, it goes to scratch.
      DW_ALLOC(dw, ctx.wantsOutput(3) ? ctx.output(3, DType::kFloat, ws)
                                      : ctx.scratch(DType::kFloat, ws));
      Tensor* dcb = ctx.wantsOutput(4) ? ctx.output(4, DType::kFloat, {c}) : nullptr;
      if (ctx.wantsOutput(4) && !dcb) return ctx.status();
      float* pdw = dw->data<float>();
      float* pdcb = dcb ? dcb->data<float>() : nullptr;
      const int64_t block = conv_.block(rows), blocks = (c + block - 1) / block;
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < blocks; ++b) {
        // Kept across calls: no allocation per step.
        thread_local std::vector<float> buf, dxRows;
        thread_local std::vector<double> sums, image;
        thread_local std::vector<BnGradChannel> chans;
        const int64_t o = b * block, count = std::min(block, c - o);
        const ChannelBuffer xb(rows.n, c, s, count, buf);
        conv_.compute(xb, o, count);
        chans.clear();
        const ChannelRows r = xb.rows();
        for (int64_t l = 0; l < count; ++l) {
          const int64_t ch = o + l;
          chans.push_back({r, xb.channel(l), pg + ch * ps, &g, c * ps, pa + ch * ps});
          chans.back().sums(scale[ch], mean[ch], var[ch], eps_, global_, ds->data<float>() + ch,
                            db->data<float>() + ch);
        }
        // Image by image, the block's rows of dX go straight into the weight-gradient sums
        // (added in image order, as the unfused kernel adds them) while the image is in L1.
        dxRows.resize(static_cast<size_t>(count * s));
        sums.assign(static_cast<size_t>(count * per), 0.0);
        image.resize(sums.size());
        for (int64_t i = 0; i < rows.n; ++i) {
          for (int64_t l = 0; l < count; ++l) chans[l].row(i, dxRows.data() + l * s);
          conv_.weightGrad(i, dxRows.data(), count, image.data());
          for (size_t t = 0; t < sums.size(); ++t) sums[t] += image[t];
        }
        for (int64_t l = 0; l < count; ++l) {
          for (int64_t t = 0; t < taps; ++t)
            pdw[(o + l) * taps + t] = static_cast<float>(sums[l * per + t]);
          if (pdcb) pdcb[o + l] = static_cast<float>(sums[l * per + taps]);
        }
      }
    } else if (blockedX_ && native16::usable(g)) {
      constexpr int64_t B = onednn::kChannelBlock;
      const native16::Block k{rows.n, s, c * s, ps, c * ps};
      float* pdx = dx->data<float>();
#pragma omp parallel for schedule(static)
      for (int64_t cb = 0; cb < c / B; ++cb)
        native16::backward(k, g, px + cb * s * B, pg + cb * B * ps, pa + cb * B * ps,
                           scale + cb * B, mean + cb * B, var + cb * B, eps_, global_,
                           pdx + cb * B * s, blockedDx_ ? 0 : c * s, ds->data<float>() + cb * B,
                           db->data<float>() + cb * B);
    } else if (blockedX_) {
      // X gathered into plain rows, and dX computed into rows laid out alike, then scattered
      // (or copied out, where dX is plain).
      float* pdx = dx->data<float>();
      constexpr int64_t B = onednn::kChannelBlock;
#pragma omp parallel for schedule(static)
      for (int64_t cb = 0; cb < c / B; ++cb) {
        thread_local std::vector<float> xBuf, dxBuf;  // kept across calls: no allocation per step
        const GatheredBlock xs(rows.n, c, s, xBuf), dxs(rows.n, c, s, dxBuf);
        xs.gather(px, cb);
        for (int64_t l = 0; l < B; ++l)
          channel(xs.rows(), xs.channel(l), dxs.channel(l), cb * B + l);
        if (blockedDx_)
          dxs.scatter(pdx, cb);
        else
          dxs.copyOut(pdx, cb);
      }
    } else {
      float* pdx = dx->data<float>();
#pragma omp parallel for schedule(static)
      for (int64_t ch = 0; ch < c; ++ch) channel(rows, px + ch * s, pdx + ch * s, ch);
    }
    return Status();
  }

 private:
  float eps_;
  bool global_;
  FusedPool pool_;             // the max pooling (and Relu) before it, fused by the session
  FusedConv conv_;             // the one-input-channel convolution before X, fused by the session
  bool blockedX_, blockedDx_;  // X arrives / dX leaves in nChw16c (markBlockedLayouts)
};

}  // namespace
}  // namespace onednn

void addBatchNormTrainingKernels(KernelRegistry& r) {
  const char* c = kOneDnnTable;
  const char* d = dw::kGradDomain;
  r.add(c, "BatchNormalizationTraining", 1, kMaxOpset, &makeKernel<onednn::BatchNormTraining>, true,
        d);
  r.add(c, "BatchNormalizationGrad", 1, kMaxOpset, &makeKernel<onednn::BatchNormGrad>, true, d);
}

}  // namespace dw::engine
