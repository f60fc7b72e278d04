// The max pooling planes of max_pool_planes.h. The common 2x2 / stride 2 window has its own
// loops, written twice: portably, and for AVX-512 (picked at run time).
#include "engine/onednn/max_pool_planes.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine/onednn/grad_common.h"
#include "engine/onednn/vector_lanes.h"

namespace dw::engine::onednn {

namespace {

// The 2x2 / stride 2 window on AVX-512, 16 windows at a time with masked tails: the planes of a
// 28x28 CNN are 14 or 7 windows wide, which the compiler's 16-lane loops would leave entirely to
// their scalar (branching) remainders. Every choice mirrors the scalar code exactly: std::max's
// operand order (MAXPS returns its second operand on ties and NaN) and the first maximum in scan
// order (a, b, c, d).
namespace tiled2 {

// Masks for the 2n floats of n (<= 16) window pairs.
struct PairMask {
  __mmask16 lo, hi;
  explicit PairMask(int64_t n) {
    const uint32_t m = n >= 16 ? 0xffffffffu : (1u << (2 * n)) - 1;
    lo = static_cast<__mmask16>(m);
    hi = static_cast<__mmask16>(m >> 16);
  }
};

// a = in[2i], b = in[2i + 1] for the window pairs of `pm`.
DW_AVX512 inline void loadPairs(const float* in, const PairMask& pm, __m512& a, __m512& b) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 v0 = _mm512_maskz_loadu_ps(pm.lo, in), v1 = _mm512_maskz_loadu_ps(pm.hi, in + 16);
  a = _mm512_permutex2var_ps(v0, even, v1);
  b = _mm512_permutex2var_ps(v0, odd, v1);
}

// out[2i] = e[i], out[2i + 1] = o[i].
DW_AVX512 inline void storePairs(float* out, const PairMask& pm, __m512 e, __m512 o) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  _mm512_mask_storeu_ps(out, pm.lo, _mm512_permutex2var_ps(e, lo, o));
  _mm512_mask_storeu_ps(out + 16, pm.hi, _mm512_permutex2var_ps(e, hi, o));
}

// The maxima of 16 windows (a b / c d) and which element wins each.
struct Windows {
  __m512 m;
  __mmask16 ia, ib, ic, id;
};
DW_AVX512 inline Windows windows(const float* r0, const float* r1, const PairMask& pm) {
  __m512 a, b, c, d;
  loadPairs(r0, pm, a, b);
  loadPairs(r1, pm, c, d);
  Windows w;
  // std::max(std::max(a, b), std::max(c, d)), std::max(x, y) being MAXPS(y, x).
  w.m = _mm512_max_ps(_mm512_max_ps(d, c), _mm512_max_ps(b, a));
  w.ia = _mm512_cmp_ps_mask(a, w.m, _CMP_EQ_OQ);
  w.ib = _mm512_cmp_ps_mask(b, w.m, _CMP_EQ_OQ) & ~w.ia;
  w.ic = _mm512_cmp_ps_mask(c, w.m, _CMP_EQ_OQ) & ~(w.ia | w.ib);
  w.id = static_cast<__mmask16>(~(w.ia | w.ib | w.ic));
  return w;
}

// maxPoolBackwardPlane's 2x2 / stride 2 case.
DW_AVX512 void backward(const MaxPool2d& g, const float* xs, const float* gs, bool relu,
                        float* ds) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    const float* r0 = xs + 2 * oh * g.w;
    float* d0 = ds + 2 * oh * g.w;
    for (int64_t ow = 0; ow < g.ow; ow += 16) {
      const PairMask pm(g.ow - ow);
      const Windows w = windows(r0 + 2 * ow, r0 + g.w + 2 * ow, pm);
      __m512 gv = _mm512_maskz_loadu_ps(lanes(g.ow - ow), gs + oh * g.ow + ow);
      if (relu) gv = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(w.m, zero, _CMP_NLE_UQ), gv);
      storePairs(d0 + 2 * ow, pm, _mm512_maskz_mov_ps(w.ia, gv), _mm512_maskz_mov_ps(w.ib, gv));
      storePairs(d0 + g.w + 2 * ow, pm, _mm512_maskz_mov_ps(w.ic, gv),
                 _mm512_maskz_mov_ps(w.id, gv));
    }
  }
}

// maxPoolArgPlane's 2x2 / stride 2 case.
DW_AVX512 void forward(const MaxPool2d& g, const float* in, bool relu, float* out, uint8_t* arg) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    const float* r0 = in + 2 * oh * g.w;
    for (int64_t ow = 0; ow < g.ow; ow += 16) {
      const __mmask16 tail = lanes(g.ow - ow);
      const Windows w = windows(r0 + 2 * ow, r0 + g.w + 2 * ow, PairMask(g.ow - ow));
      __m512i k = _mm512_set1_epi32(3);
      k = _mm512_mask_mov_epi32(k, w.ic, _mm512_set1_epi32(2));
      k = _mm512_mask_mov_epi32(k, w.ib, _mm512_set1_epi32(1));
      k = _mm512_mask_mov_epi32(k, w.ia, _mm512_setzero_si512());
      if (relu)
        k = _mm512_mask_mov_epi32(k, _mm512_cmp_ps_mask(w.m, zero, _CMP_LE_OQ),
                                  _mm512_set1_epi32(kNoArg));
      _mm512_mask_storeu_ps(out + oh * g.ow + ow, tail, w.m);
      _mm512_mask_cvtepi32_storeu_epi8(arg + oh * g.ow + ow, tail, k);
    }
  }
}

// maxPoolArgScatter's 2x2 / stride 2 case.
DW_AVX512 void scatter(const MaxPool2d& g, const float* dy, const uint8_t* arg, float* ds) {
  if (2 * g.oh != g.h || 2 * g.ow != g.w) std::fill_n(ds, g.h * g.w, 0.0f);
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    float* d0 = ds + 2 * oh * g.w;
    for (int64_t ow = 0; ow < g.ow; ow += 16) {
      const __mmask16 tail = lanes(g.ow - ow);
      const PairMask pm(g.ow - ow);
      const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(tail, arg + oh * g.ow + ow));
      const __m512 gv = _mm512_maskz_loadu_ps(tail, dy + oh * g.ow + ow);
      const __mmask16 k0 = _mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512());
      const __mmask16 k1 = _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1));
      const __mmask16 k2 = _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(2));
      const __mmask16 k3 = _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(3));
      storePairs(d0 + 2 * ow, pm, _mm512_maskz_mov_ps(k0, gv), _mm512_maskz_mov_ps(k1, gv));
      storePairs(d0 + g.w + 2 * ow, pm, _mm512_maskz_mov_ps(k2, gv), _mm512_maskz_mov_ps(k3, gv));
    }
  }
}

}  // namespace tiled2

}  // namespace

void maxPoolArgPlane(const MaxPool2d& g, const float* in, bool relu, float* out, uint8_t* arg) {
  if (g.tiled2() && avx512Usable()) return tiled2::forward(g, in, relu, out, arg);
  if (g.tiled2()) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const float* r0 = in + 2 * oh * g.w;
      const float* r1 = r0 + g.w;
      float* o = out + oh * g.ow;
      uint8_t* ar = arg + oh * g.ow;
#pragma omp simd
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const float m = std::max(std::max(a, b), std::max(c, d));
        const int ia = a == m;
        const int ib = (b == m) & !ia;
        const int ic = (c == m) & !(ia | ib);
        const int k = ia ? 0 : ib ? 1 : ic ? 2 : 3;
        o[ow] = m;
        ar[ow] = static_cast<uint8_t>(relu & (m <= 0) ? kNoArg : k);
      }
    }
    return;
  }
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    const int64_t top = oh * g.sh - g.ph;
    const int64_t h0 = std::max<int64_t>(top, 0), h1 = std::min<int64_t>(top + g.kh, g.h);
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const int64_t left = ow * g.sw - g.pw;
      const int64_t w0 = std::max<int64_t>(left, 0), w1 = std::min<int64_t>(left + g.kw, g.w);
      float m = -std::numeric_limits<float>::infinity(), best = 0;
      int64_t win = -1;
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t c = w0; c < w1; ++c) {
          const float v = in[h * g.w + c];
          m = std::max(m, v);
          if (win < 0 || v > best) {
            best = v;
            win = (h - top) * g.kw + (c - left);
          }
        }
      out[oh * g.ow + ow] = m;
      arg[oh * g.ow + ow] = static_cast<uint8_t>(win < 0 || (relu && !(best > 0)) ? kNoArg : win);
    }
  }
}

void maxPoolArgScatter(const MaxPool2d& g, const float* dy, const uint8_t* arg, float* ds) {
  if (g.tiled2() && avx512Usable()) return tiled2::scatter(g, dy, arg, ds);
  if (g.tiled2()) {
    if (2 * g.oh != g.h || 2 * g.ow != g.w) std::fill_n(ds, g.h * g.w, 0.0f);
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      float* d0 = ds + 2 * oh * g.w;
      float* d1 = d0 + g.w;
      const float* gr = dy + oh * g.ow;
      const uint8_t* ar = arg + oh * g.ow;
#pragma omp simd
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int k = ar[ow];
        const float gv = k == kNoArg ? 0.0f : gr[ow];
        d0[2 * ow] = k == 0 ? gv : 0.0f;
        d0[2 * ow + 1] = k == 1 ? gv : 0.0f;
        d1[2 * ow] = k == 2 ? gv : 0.0f;
        d1[2 * ow + 1] = k == 3 ? gv : 0.0f;
      }
    }
    return;
  }
  std::fill_n(ds, g.h * g.w, 0.0f);
  for (int64_t oh = 0; oh < g.oh; ++oh)
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const int k = arg[oh * g.ow + ow];
      if (k == kNoArg) continue;
      const int64_t h = oh * g.sh - g.ph + k / g.kw, c = ow * g.sw - g.pw + k % g.kw;
      ds[h * g.w + c] += dy[oh * g.ow + ow];
    }
}

void maxPoolBackwardPlane(const MaxPool2d& g, const float* xs, const float* gs, bool relu,
                          float* ds) {
  if (g.tiled2() && avx512Usable()) {
    if (2 * g.oh != g.h || 2 * g.ow != g.w) std::fill_n(ds, g.h * g.w, 0.0f);
    return tiled2::backward(g, xs, gs, relu, ds);
  }
  const int64_t H = g.h, W = g.w, OH = g.oh, OW = g.ow;
  // The common 2x2 window with stride 2 tiles the input: every input element receives exactly
  // its own window's share, computed without branches.
  const bool tiled2 = g.tiled2();
  if (!tiled2 || 2 * OH != H || 2 * OW != W) std::fill_n(ds, H * W, 0.0f);
  if (tiled2) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* r0 = xs + 2 * oh * W;
      const float* r1 = r0 + W;
      float* d0 = ds + 2 * oh * W;
      float* d1 = d0 + W;
      const float* gr = gs + oh * OW;
#pragma omp simd
      for (int64_t ow = 0; ow < OW; ++ow) {
        const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        // The first maximum in scan order (a, b, c, d) wins ties; no short-circuits, so the
        // selects vectorize.
        const float m = std::max(std::max(a, b), std::max(c, d));
        const float g0 = gr[ow];  // read unconditionally: the select vectorizes
        const float gv = relu & (m <= 0) ? 0.0f : g0;
        const int ia = a == m;
        const int ib = (b == m) & !ia;
        const int ic = (c == m) & !(ia | ib);
        const int id = !(ia | ib | ic);
        d0[2 * ow] = ia ? gv : 0.0f;
        d0[2 * ow + 1] = ib ? gv : 0.0f;
        d1[2 * ow] = ic ? gv : 0.0f;
        d1[2 * ow + 1] = id ? gv : 0.0f;
      }
    }
    return;
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t h0 = std::max<int64_t>(oh * g.sh - g.ph, 0);
    const int64_t h1 = std::min<int64_t>(oh * g.sh - g.ph + g.kh, H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t w0 = std::max<int64_t>(ow * g.sw - g.pw, 0);
      const int64_t w1 = std::min<int64_t>(ow * g.sw - g.pw + g.kw, W);
      int64_t arg = -1;
      float best = 0;
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t c = w0; c < w1; ++c) {
          const float v = xs[h * W + c];
          if (arg < 0 || v > best) {
            best = v;
            arg = h * W + c;
          }
        }
      if (arg >= 0 && (!relu || best > 0)) ds[arg] += gs[oh * OW + ow];
    }
  }
}

}  // namespace dw::engine::onednn
