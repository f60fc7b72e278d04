// Direct 2-D convolution with one input channel (image inputs such as Fashion-MNIST's first
// layer): forward and weight gradient on plain NCHW. oneDNN's kernels for this case compute in a
// blocked layout, so every call paid a reorder of the (large) output and, in the gradient, of
// dY: on the CNN example those two reorders took longer than the convolution itself.
//
// With stride 1, each image is first copied into KW zero-padded planes, one per kernel column
// shifted by that column's offset, with the output's row pitch. Every tap's contribution to a
// whole output plane is then one long multiply-add over a contiguous run of one of those planes
// (rows of 28 would leave the vector loops mostly remainder), and output and dY planes are read
// and written in place, unpadded. Other strides take plain loops.
//
// On AVX-512 the stride-1 loops are register-blocked over output channels: each input vector
// loaded for a tap feeds several channels' accumulators (forward) or several taps' sums (weight
// gradient). One channel at a time, every multiply-add needed its own unaligned load, and the
// loads, not the arithmetic, bounded the loop.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <utility>
#include <vector>

#include "engine/onednn/onednn_backend.h"

namespace dw::engine::onednn {

namespace {

std::atomic<bool> gGenericOnly{false};

bool useAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && !gGenericOnly.load(std::memory_order_relaxed);
}

constexpr int64_t kVec = 16;            // floats per AVX-512 register
constexpr int64_t kFwdSpan = 4 * kVec;  // outputs one forward block keeps per channel
constexpr int kFwdChannels = 4;         // channels per forward block: 16 accumulators
constexpr int kGradChannels = 2;        // channels per weight-gradient block
constexpr int kGradTaps = 9;            // taps per weight-gradient block: 18 accumulators

int64_t roundUp(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// The shifted-plane geometry of stride-1 convolutions; ok = false where another path is needed.
using Shifted = SingleChannelShifted;

Shifted shifted(const SingleChannelConv& g) {
  Shifted p;
  if (g.sh != 1 || g.sw != 1) return p;
  p.rows = g.oh + (g.kh - 1) * g.dh;
  p.len = g.oh * g.ow;
  p.span = roundUp(p.len, kFwdSpan);
  // Blocks run past len into outputs that are dropped; their reads stay inside the buffer.
  p.copy = std::max(p.rows * g.ow, (g.kh - 1) * g.dh * g.ow + p.span) + kVec;
  for (int64_t kh = 0; kh < g.kh; ++kh)
    for (int64_t kw = 0; kw < g.kw; ++kw) p.offs.push_back(kw * p.copy + kh * g.dh * g.ow);
  p.ok = true;
  return p;
}

// Plane kw holds x(r - ph, j + kw * dw - pw) at r * ow + j, zero outside the image.
void shiftPlanes(const SingleChannelConv& g, const Shifted& p, const float* xs, float* buf) {
  for (int64_t kw = 0; kw < g.kw; ++kw) {
    float* d = buf + kw * p.copy;
    std::fill_n(d, p.copy, 0.0f);
    const int64_t off = kw * g.dw - g.pw;
    const int64_t lo = std::clamp<int64_t>(-off, 0, g.ow),
                  hi = std::clamp<int64_t>(g.w - off, lo, g.ow);
    for (int64_t r = 0; r < p.rows; ++r) {
      const int64_t ih = r - g.ph;
      if (ih < 0 || ih >= g.h) continue;
      std::copy(xs + ih * g.w + lo + off, xs + ih * g.w + hi + off, d + r * g.ow + lo);
    }
  }
}

// C output channels of one image into planes `out` (`stride` apart). Nothing is stored past
// p.len of a plane, so the planes may be the output tensor's own.
template <int C>
__attribute__((target("avx512f"))) void forwardBlock512(const Shifted& p, const float* xp,
                                                        const float* w, const float* bias,
                                                        float* out, int64_t stride) {
  const int64_t* offs = p.offs.data();
  const int taps = static_cast<int>(p.offs.size());
  for (int64_t i0 = 0; i0 < p.len; i0 += kFwdSpan) {
    __m512 a[C][4];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) a[c][0] = a[c][1] = a[c][2] = a[c][3] = _mm512_set1_ps(bias[c]);
    for (int t = 0; t < taps; ++t) {
      const float* s = xp + offs[t] + i0;
      const __m512 x0 = _mm512_loadu_ps(s), x1 = _mm512_loadu_ps(s + kVec),
                   x2 = _mm512_loadu_ps(s + 2 * kVec), x3 = _mm512_loadu_ps(s + 3 * kVec);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m512 k = _mm512_set1_ps(w[c * taps + t]);
        a[c][0] = _mm512_fmadd_ps(k, x0, a[c][0]);
        a[c][1] = _mm512_fmadd_ps(k, x1, a[c][1]);
        a[c][2] = _mm512_fmadd_ps(k, x2, a[c][2]);
        a[c][3] = _mm512_fmadd_ps(k, x3, a[c][3]);
      }
    }
    // Fully unrolled, masks and all: a loop that indexed a[c][v] at run time kept the
    // accumulators on the stack, a round trip through memory for every block.
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const int64_t left = p.len - i0 - v * kVec;
      const __mmask16 m = left >= kVec ? 0xFFFF
                          : left <= 0  ? 0
                                       : static_cast<__mmask16>((1u << left) - 1);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c)
        _mm512_mask_storeu_ps(out + c * stride + i0 + v * kVec, m, a[c][v]);
    }
  }
}

// One output channel, for CPUs without AVX-512 (the compiler vectorizes the block).
__attribute__((target_clones("avx2", "default"))) void forwardPlaneGeneric(const Shifted& p,
                                                                           const float* xp,
                                                                           const float* w,
                                                                           float bias, float* out) {
  const int taps = static_cast<int>(p.offs.size());
  for (int64_t i0 = 0; i0 < p.len; i0 += kFwdSpan) {
    float a[kFwdSpan];
    for (int64_t j = 0; j < kFwdSpan; ++j) a[j] = bias;
    for (int t = 0; t < taps; ++t) {
      const float c = w[t];
      const float* src = xp + p.offs[t] + i0;
      for (int64_t j = 0; j < kFwdSpan; ++j) a[j] += c * src[j];
    }
    std::copy_n(a, std::min(kFwdSpan, p.len - i0), out + i0);
  }
}

// Channels [o, o + n) of one image (n <= kFwdChannels) into planes `stride` apart.
void forwardChannels(const Shifted& p, const float* xp, const float* w, const float* bias, int n,
                     float* out, int64_t stride) {
  if (useAvx512()) {
    static constexpr std::array blocks{&forwardBlock512<1>, &forwardBlock512<2>,
                                       &forwardBlock512<3>, &forwardBlock512<4>};
    static_assert(blocks.size() == kFwdChannels);
    return blocks[n - 1](p, xp, w, bias, out, stride);
  }
  const int64_t taps = static_cast<int64_t>(p.offs.size());
  for (int c = 0; c < n; ++c) forwardPlaneGeneric(p, xp, w + c * taps, bias[c], out + c * stride);
}

// The 16 lanes added pairwise (8 + 8, 4 + 4, ...), in registers: this runs for every tap of
// every (image, channel) plane, and a chain of 16 dependent additions through memory cost more
// than the plane's own multiply-adds. (GCC's _mm512_reduce_add_ps trips its own
// uninitialized-value warnings.)
__attribute__((target("avx512f"))) inline double sum512(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// Sums of dY * (X shifted by each of G taps) and, for the first tap block, of dY, for C
// consecutive channels of one image; dy points at the first channel's plane (p.len floats each).
template <int C, int G>
__attribute__((target("avx512f"))) void weightGradBlock512(const Shifted& p, const float* xp,
                                                           const float* dy, const int64_t* offs,
                                                           bool withBias, double* dw, int stride,
                                                           double* db) {
  __m512 a[C][G], b[C];
#pragma GCC unroll 9
  for (int c = 0; c < C; ++c) {
    b[c] = _mm512_setzero_ps();
    for (int t = 0; t < G; ++t) a[c][t] = _mm512_setzero_ps();
  }
  const int64_t full = p.len / kVec * kVec;
  // The last partial vector reads dY masked (past it lies the next plane, or the tensor's end)
  // and X unmasked: the shifted planes have room, and their products with the zeros vanish.
  for (int64_t i = 0; i < p.len; i += kVec) {
    const __mmask16 m = i < full ? 0xFFFF : static_cast<__mmask16>((1u << (p.len - i)) - 1);
    __m512 d[C];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) {
      d[c] = _mm512_maskz_loadu_ps(m, dy + c * p.len + i);
      b[c] = _mm512_add_ps(b[c], d[c]);
    }
#pragma GCC unroll 9
    for (int t = 0; t < G; ++t) {
      const __m512 x = _mm512_loadu_ps(xp + offs[t] + i);
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) a[c][t] = _mm512_fmadd_ps(d[c], x, a[c][t]);
    }
  }
  // Unrolled like the loops above: indexing a[c][t] at run time here kept the accumulators on
  // the stack, stored on every iteration of the main loop.
#pragma GCC unroll 2
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 9
    for (int t = 0; t < G; ++t) dw[c * stride + t] += sum512(a[c][t]);
    if (withBias) db[c * stride] += sum512(b[c]);
  }
}

// weightGradBlock512<C, G> for G = 1 .. kGradTaps, indexed by G - 1.
template <int C, int... G>
constexpr auto gradBlocks(std::integer_sequence<int, G...>) {
  return std::array{&weightGradBlock512<C, G + 1>...};
}

template <int C>
void weightGradTaps512(const Shifted& p, const float* xp, const float* dy, int t0, int n,
                       double* dw, int stride, double* db) {
  static constexpr auto blocks = gradBlocks<C>(std::make_integer_sequence<int, kGradTaps>{});
  blocks[n - 1](p, xp, dy, p.offs.data() + t0, t0 == 0, dw + t0, stride, db);
}

// The sum of f(i) for i < n, element i in lane i % 16, the lanes then added in order: an order
// fixed by n alone. (An `omp simd` reduction may split the loop where the data's alignment
// says, and the fused kernels pass dY rows from their own buffers.)
template <class F>
float laneSum(int64_t n, F&& f) {
  float lanes[kVec] = {};
  int64_t i = 0;
  for (; i + kVec <= n; i += kVec)
    for (int64_t k = 0; k < kVec; ++k) lanes[k] += f(i + k);
  for (int64_t k = 0; i + k < n; ++k) lanes[k] += f(i + k);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

// dW[tap] += sum(dY * shifted X), dB += sum(dY) for one (n, oc) plane, without AVX-512.
__attribute__((target_clones("avx2", "default"))) void weightGradPlaneGeneric(
    const Shifted& p, const float* xp, const float* dy, double* dw, double* db) {
  for (size_t t = 0; t < p.offs.size(); ++t) {
    const float* src = xp + p.offs[t];
    dw[t] += laneSum(p.len, [&](int64_t i) { return dy[i] * src[i]; });
  }
  *db += laneSum(p.len, [&](int64_t i) { return dy[i]; });
}

// Channels [o, o + n) (n <= kGradChannels) of one image; dw/db are those channels' partials.
void weightGradChannels(const Shifted& p, const float* xp, const float* dy, int n, double* dw,
                        double* db) {
  const int taps = static_cast<int>(p.offs.size());
  if (!useAvx512()) {
    for (int c = 0; c < n; ++c)
      weightGradPlaneGeneric(p, xp, dy + c * p.len, dw + c * (taps + 1), db + c * (taps + 1));
    return;
  }
  // Partials are laid out per channel as taps then bias: [dw0 .. dw(taps-1), db].
  for (int t0 = 0; t0 < taps; t0 += kGradTaps) {
    const int g = std::min(kGradTaps, taps - t0);
    if (n == 2)
      weightGradTaps512<2>(p, xp, dy, t0, g, dw, taps + 1, db);
    else
      weightGradTaps512<1>(p, xp, dy, t0, g, dw, taps + 1, db);
  }
}

// Any stride: output columns [lo, hi) whose input column ow * s + off lies inside [0, w).
void columnRange(int64_t off, int64_t s, int64_t w, int64_t ow, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = w - 1 - off < 0 ? 0 : std::min<int64_t>(ow, (w - 1 - off) / s + 1);
  if (hi < lo) hi = lo;
}

void forwardPlane(const SingleChannelConv& g, const float* xs, const float* wk, float bias,
                  float* ys) {
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    float* yr = ys + oh * g.ow;
    std::fill_n(yr, g.ow, bias);
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      const float* xr = xs + ih * g.w;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t off = kw * g.dw - g.pw;
        int64_t lo, hi;
        columnRange(off, g.sw, g.w, g.ow, lo, hi);
        const float c = wk[kh * g.kw + kw];
        for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += c * xr[ow * g.sw + off];
      }
    }
  }
}

void weightGradPlane(const SingleChannelConv& g, const float* xs, const float* gs, double* dw,
                     double* db) {
  for (int64_t kh = 0; kh < g.kh; ++kh)
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const int64_t off = kw * g.dw - g.pw;
      int64_t lo, hi;
      columnRange(off, g.sw, g.w, g.ow, lo, hi);
      float s = 0;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t ow = lo; ow < hi; ++ow)
          s += gs[oh * g.ow + ow] * xs[ih * g.w + ow * g.sw + off];
      }
      dw[kh * g.kw + kw] += s;
    }
  float b = 0;
  for (int64_t i = 0; i < g.oh * g.ow; ++i) b += gs[i];
  *db += b;
}

}  // namespace

namespace {

// 2x2 / stride 2 max pooling (then Relu when asked) of a plane whose buffer extends at least 32
// floats past its end: each 32 input columns of a row pair become 16 outputs through one
// even/odd permute. Columns read past a row's end only reach outputs the masked store drops.
__attribute__((target("avx512f"))) void pool2x2Avx512(const float* in, int64_t W, float* out,
                                                      int64_t OH, int64_t OW, bool relu) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 floor = _mm512_set1_ps(relu ? 0.0f : -std::numeric_limits<float>::infinity());
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = in + 2 * oh * W;
    const float* r1 = r0 + W;
    for (int64_t j = 0; j < OW; j += kVec) {
      const __m512 v0 = _mm512_max_ps(_mm512_loadu_ps(r0 + 2 * j), _mm512_loadu_ps(r1 + 2 * j));
      const __m512 v1 =
          _mm512_max_ps(_mm512_loadu_ps(r0 + 2 * j + kVec), _mm512_loadu_ps(r1 + 2 * j + kVec));
      __m512 m =
          _mm512_max_ps(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1));
      m = _mm512_max_ps(m, floor);
      const int64_t left = OW - j;
      const __mmask16 mask = left >= kVec ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
      _mm512_mask_storeu_ps(out + oh * OW + j, mask, m);
    }
  }
}

// The epilogue of one output channel: conv holds its plane (oh x ow), in a buffer with at least
// kFwdSpan floats of room past the plane.
void finishPlane(const SingleChannelConv& g, const SingleChannelEpilogue* ep, const float* conv,
                 float* out) {
  const bool relu = ep && ep->relu;
  if (ep && ep->kh == 2 && ep->kw == 2 && ep->sh == 2 && ep->sw == 2 && useAvx512())
    return pool2x2Avx512(conv, g.ow, out, ep->oh, ep->ow, relu);
  if (ep && ep->kh > 0) {
    maxPoolPlane(conv, g.oh, g.ow, out, ep->oh, ep->ow, ep->kh, ep->kw, ep->sh, ep->sw, 0, 0);
    // Relu commutes with max, so it runs on the (smaller) pooled plane.
    if (relu)
      for (int64_t i = 0; i < ep->oh * ep->ow; ++i) out[i] = std::max(out[i], 0.0f);
    return;
  }
  const int64_t n = g.oh * g.ow;
  if (relu)
    for (int64_t i = 0; i < n; ++i) out[i] = std::max(conv[i], 0.0f);
  else if (conv != out)
    std::copy_n(conv, n, out);
}

}  // namespace

void singleChannelConvGenericOnly(bool on) {
  gGenericOnly.store(on, std::memory_order_relaxed);
}

__attribute__((target_clones("avx512f", "default"))) void maxPoolPlane(
    const float* in, int64_t H, int64_t W, float* out, int64_t OH, int64_t OW, int64_t kh,
    int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * OH <= H &&
      2 * OW <= W) {
    // The common 2x2 / stride 2 window, branch-free so that it vectorizes. ceil_mode's partial
    // last window takes the general loop: this one would read past the plane.
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* __restrict r0 = in + 2 * oh * W;
      const float* __restrict r1 = r0 + W;
      float* __restrict o = out + oh * OW;
#pragma omp simd
      for (int64_t ow = 0; ow < OW; ++ow)
        o[ow] =
            std::max(std::max(r0[2 * ow], r0[2 * ow + 1]), std::max(r1[2 * ow], r1[2 * ow + 1]));
    }
    return;
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t h0 = std::max<int64_t>(oh * sh - ph, 0);
    const int64_t h1 = std::min<int64_t>(oh * sh - ph + kh, H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t w0 = std::max<int64_t>(ow * sw - pw, 0);
      const int64_t w1 = std::min<int64_t>(ow * sw - pw + kw, W);
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t c = w0; c < w1; ++c) m = std::max(m, in[h * W + c]);
      out[oh * OW + ow] = m;
    }
  }
}

SingleChannelImages::SingleChannelImages(const SingleChannelConv& g) : g_(g), p_(shifted(g)) {}

int64_t SingleChannelImages::preparedSize() const {
  return p_.ok ? g_.kw * p_.copy : 0;
}

const float* SingleChannelImages::prepare(const float* image, float* buf) const {
  if (!p_.ok) return image;
  shiftPlanes(g_, p_, image, buf);
  return buf;
}

void SingleChannelImages::forward(const float* xp, const float* w, const float* b, int64_t o,
                                  int64_t count, float* out, int64_t stride) const {
  const int64_t taps = g_.kh * g_.kw;
  if (!p_.ok) {
    for (int64_t c = 0; c < count; ++c)
      forwardPlane(g_, xp, w + (o + c) * taps, b ? b[o + c] : 0.0f, out + c * stride);
    return;
  }
  const float zeros[kFwdChannels] = {};
  for (int64_t c0 = 0; c0 < count; c0 += kFwdChannels) {
    const int n = static_cast<int>(std::min<int64_t>(kFwdChannels, count - c0));
    forwardChannels(p_, xp, w + (o + c0) * taps, b ? b + o + c0 : zeros, n, out + c0 * stride,
                    stride);
  }
}

void SingleChannelImages::weightGrad(const float* xp, const float* dy, int64_t count,
                                     double* dwdb) const {
  const int64_t k = g_.kh * g_.kw, per = k + 1;
  std::fill_n(dwdb, count * per, 0.0);
  for (int64_t c0 = 0; c0 < count; c0 += kGradChannels) {
    const int n = static_cast<int>(std::min<int64_t>(kGradChannels, count - c0));
    double* d = dwdb + c0 * per;
    const float* gs = dy + c0 * g_.oh * g_.ow;
    if (p_.ok) {
      weightGradChannels(p_, xp, gs, n, d, d + k);
      continue;
    }
    for (int c = 0; c < n; ++c)
      weightGradPlane(g_, xp, gs + c * g_.oh * g_.ow, d + c * per, d + c * per + k);
  }
}

void singleChannelConvForward(const SingleChannelConv& g, const float* x, const float* w,
                              const float* b, float* y, const SingleChannelEpilogue* ep) {
  const SingleChannelImages im(g);
  const bool pool = ep && ep->kh > 0;
  const int64_t outPlane = pool ? ep->oh * ep->ow : g.oh * g.ow;
  // Room past the last plane for the epilogue's vector reads.
  const int64_t planeStride = roundUp(g.oh * g.ow, kFwdSpan);
  // A thread per image: its shifted planes serve every output channel.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    thread_local std::vector<float> xbuf, planes;  // kept across calls: no allocation per step
    xbuf.resize(im.preparedSize());
    const float* xp = im.prepare(x + n * g.h * g.w, xbuf.data());
    if (!pool) {
      // Without pooling the planes are computed straight into the output.
      float* out = y + n * g.oc * outPlane;
      im.forward(xp, w, b, 0, g.oc, out, outPlane);
      for (int64_t o = 0; o < g.oc; ++o) finishPlane(g, ep, out + o * outPlane, out + o * outPlane);
      continue;
    }
    planes.resize((kFwdChannels + 1) * planeStride);
    for (int64_t o = 0; o < g.oc; o += kFwdChannels) {
      const int64_t c = std::min<int64_t>(kFwdChannels, g.oc - o);
      im.forward(xp, w, b, o, c, planes.data(), planeStride);
      for (int64_t i = 0; i < c; ++i)
        finishPlane(g, ep, planes.data() + i * planeStride, y + (n * g.oc + o + i) * outPlane);
    }
  }
}

void singleChannelConvWeightGrad(const SingleChannelConv& g, const float* x, const float* dy,
                                 float* dw, float* db) {
  const SingleChannelImages im(g);
  const int64_t k = g.kh * g.kw, per = k + 1;
  thread_local std::vector<double> part;  // kept across calls: no allocation per step
  part.resize(static_cast<size_t>(g.n * g.oc * per));
  double* parts = part.data();
  // Each thread takes whole images, shifting each once for all output channels.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    thread_local std::vector<float> xbuf;
    xbuf.resize(im.preparedSize());
    const float* xp = im.prepare(x + n * g.h * g.w, xbuf.data());
    im.weightGrad(xp, dy + n * g.oc * g.oh * g.ow, g.oc, parts + n * g.oc * per);
  }
  for (int64_t o = 0; o < g.oc; ++o) {
    for (int64_t i = 0; i <= k; ++i) {
      double v = 0;
      for (int64_t n = 0; n < g.n; ++n) v += parts[(n * g.oc + o) * per + i];
      if (i < k)
        dw[o * k + i] = static_cast<float>(v);
      else
        db[o] = static_cast<float>(v);
    }
  }
}

}  // namespace dw::engine::onednn
