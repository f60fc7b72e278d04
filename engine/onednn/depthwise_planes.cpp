#include "engine/onednn/depthwise_planes.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/onednn/vector_lanes.h"

// GCC 12's unmasked AVX-512 intrinsics start from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once they are inlined (as in vector_math.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dw::engine::onednn {

namespace {

constexpr int64_t kV = 16;
constexpr int kMaxK = 7;

#define DW_AVX512 __attribute__((target("avx512f")))

// The padded plane a thread works from: the plane copied in at (pt, pl), zeros around it, each
// row wide enough for the last vector's loads.
struct Padded {
  std::vector<float> v;
  int64_t key[6] = {};  // rows, pitch, and the plane's size and place in it
};

// Output row `oy` of one plane from the padded plane `src` (pitch floats a row): vectors of
// output columns, four at a time, the window's taps broadcast from `wt`.
template <int SW>
DW_AVX512 void row(const DepthwisePlanes& g, const float* src, int64_t pitch, const float* wt,
                   float bias, __m512 lo, __m512 hi, int64_t oy, float* dst) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t ox0 = 0; ox0 < g.ow; ox0 += 4 * kV) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (g.ow - ox0 + kV - 1) / kV));
    __m512 acc[4];
    for (int v = 0; v < 4; ++v) acc[v] = _mm512_set1_ps(bias);
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const float* r = src + (oy * g.sh + ky) * pitch + ox0 * SW;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const __m512 wv = _mm512_set1_ps(wt[ky * g.kw + kx]);
        for (int v = 0; v < nv; ++v) {
          const float* at = r + v * kV * SW + kx;
          __m512 in;
          if constexpr (SW == 1) {
            in = _mm512_loadu_ps(at);
          } else {
            in = _mm512_permutex2var_ps(_mm512_loadu_ps(at), even, _mm512_loadu_ps(at + kV));
          }
          acc[v] = _mm512_fmadd_ps(in, wv, acc[v]);
        }
      }
    }
    for (int v = 0; v < nv; ++v) {
      _mm512_mask_storeu_ps(dst + ox0 + v * kV, lanes(g.ow - ox0 - v * kV),
                            _mm512_min_ps(hi, _mm512_max_ps(lo, acc[v])));
    }
  }
}

DW_AVX512 void plane(const DepthwisePlanes& g, float* pad, int64_t pitch, const float* x,
                     const float* wt, float bias, float lo, float hi, float* y) {
  for (int64_t r = 0; r < g.h; ++r)
    std::memcpy(pad + (g.pt + r) * pitch + g.pl, x + r * g.w,
                static_cast<size_t>(g.w) * sizeof(float));
  const __m512 l = _mm512_set1_ps(lo), u = _mm512_set1_ps(hi);
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    if (g.sw == 1)
      row<1>(g, pad, pitch, wt, bias, l, u, oy, y + oy * g.ow);
    else
      row<2>(g, pad, pitch, wt, bias, l, u, oy, y + oy * g.ow);
  }
}

}  // namespace

bool depthwisePlanesFit(const DepthwisePlanes& g) {
  return vectorMathAvailable() && (g.sw == 1 || g.sw == 2) && g.sh >= 1 && g.kh >= 1 && g.kw >= 1 &&
         g.kh <= kMaxK && g.kw <= kMaxK && g.pt >= 0 && g.pl >= 0 && g.c > 0;
}

void depthwisePlanes(const DepthwisePlanes& g, const float* x, const float* w, const float* b,
                     float lo, float hi, float* y) {
  // Rows the windows reach (and the plane's), and columns the last vectors of four read (a pair
  // of vectors a load at stride 2), rounded to whole vectors.
  const int64_t rows = std::max((g.oh - 1) * g.sh + g.kh, g.pt + g.h);
  const int64_t reach = (g.ow + 4 * kV - 1) / (4 * kV) * 4 * kV * g.sw + g.kw + kV;
  const int64_t pitch = (std::max(reach, g.pl + g.w) + kV - 1) / kV * kV;
  forThreadRanges(g.planes, g.planes * g.oh * g.ow * g.kh * g.kw, [&](int64_t p0, int64_t p1) {
    thread_local Padded pad;
    const int64_t key[6] = {rows, pitch, g.h, g.w, g.pt, g.pl};
    if (!std::equal(key, key + 6, pad.key)) {
      // Zeros once for this geometry: each plane overwrites only the interior.
      pad.v.assign(static_cast<size_t>(rows * pitch), 0.0f);
      std::copy(key, key + 6, pad.key);
    }
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t ch = p % g.c;
      plane(g, pad.v.data(), pitch, x + p * g.h * g.w, w + ch * g.kh * g.kw, b ? b[ch] : 0.0f, lo,
            hi, y + p * g.oh * g.ow);
    }
  });
}

}  // namespace dw::engine::onednn
