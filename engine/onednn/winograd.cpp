// Winograd F(4x4, 3x3) convolution of nChw16c tensors (stride 1, pads 1, no dilation), for the
// batched 3x3 layers of a training CNN. On the CNN example's second layer (batch 64, 32 -> 64
// channels, 14 x 14) oneDNN 2.6's own Winograd kernel (jit_wino_4x3) took 2.3-2.5 ms and this one
// 1.6-1.8 ms, in the same run with the caches flushed between calls; in the training step
// (DEEPWIRE_PROFILE, alternating runs) the forward Conv node went from 2.2-2.4 to 1.7-2.0 ms,
// weight transform included, and the ConvGrad node, whose data gradient is this convolution of
// dY with the turned weights, from 4.8 to 4.3 ms. The weight gradient stays on oneDNN's kernel.
//
// Per image: its channels are copied into a zero-bordered buffer, each 6 x 6 input tile is
// transformed (B^T d B, sixteen channels to a vector), then each of the 36 tile positions is a
// small matrix product [tiles x C] x [C x K] held in registers (6 tiles x 64 output channels or
// 8 tiles x 32 at a time), and the products are transformed back (A^T m A) straight into the
// output. Everything an image needs (230 KB on the CNN example; usable() allows up to 4 MiB)
// stays in the thread's L2 cache between the stages.
//
// The interpolation points are 0, +-1, +-2 (Lavin & Gray): float32 results lie within 2e-6 of
// the float64 convolution, relative to the sum of the products' magnitudes.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/onednn/onednn_backend.h"

namespace dw::engine::onednn {

namespace {

#define DW_WINO __attribute__((target("avx512f")))

constexpr int64_t kV = kChannelBlock;  // channels per vector
constexpr int kPos = 36;               // 6 x 6 tile positions

// Row r of the 1-D input transform B^T applied to d[0..5].
DW_WINO inline void inputRow(const __m512 d[6], __m512 r[6]) {
  const __m512 four = _mm512_set1_ps(4.f), five = _mm512_set1_ps(5.f), two = _mm512_set1_ps(2.f);
  const __m512 t0 = _mm512_fnmadd_ps(four, d[2], d[4]);  // d4 - 4 d2
  const __m512 t1 = _mm512_fnmadd_ps(four, d[1], d[3]);  // d3 - 4 d1
  const __m512 t2 = _mm512_sub_ps(d[4], d[2]);
  const __m512 t3 = _mm512_mul_ps(two, _mm512_sub_ps(d[3], d[1]));
  r[0] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
  r[1] = _mm512_add_ps(t0, t1);
  r[2] = _mm512_sub_ps(t0, t1);
  r[3] = _mm512_add_ps(t2, t3);
  r[4] = _mm512_sub_ps(t2, t3);
  r[5] = _mm512_fmadd_ps(four, d[1], _mm512_fnmadd_ps(five, d[3], d[5]));
}

// The 1-D output transform A^T applied to m[0..5].
DW_WINO inline void outputRow(const __m512 m[6], __m512 o[4]) {
  const __m512 a = _mm512_add_ps(m[1], m[2]), b = _mm512_sub_ps(m[1], m[2]);
  const __m512 c = _mm512_add_ps(m[3], m[4]), d = _mm512_sub_ps(m[3], m[4]);
  o[0] = _mm512_add_ps(_mm512_add_ps(m[0], a), c);
  o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.f), d, b);
  o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.f), c, a);
  o[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.f), d, b), m[5]);
}

// m[t][0 .. 16 NR) = sum_c v[t][c] u[c][0 .. 16 NR) for MR tiles t: rows of v are C floats,
// of u and m K floats.
template <int MR, int NR>
DW_WINO inline void product(int64_t C, const float* v, const float* u, int64_t K, float* m) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    __m512 b[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) b[j] = _mm512_loadu_ps(u + c * K + j * kV);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(v[i * C + c]);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) _mm512_storeu_ps(m + i * K + j * kV, acc[i][j]);
}

// The last `left` (< MR + 1) tiles of a position, as one block of that many rows.
template <int MR, int NR>
DW_WINO void productTail(int64_t left, int64_t C, const float* v, const float* u, int64_t K,
                         float* m) {
  if constexpr (MR > 0) {
    if (left == MR)
      product<MR, NR>(C, v, u, K, m);
    else
      productTail<MR - 1, NR>(left, C, v, u, K, m);
  }
}

// All T tiles of one position, output channels [k0, k0 + 16 NR).
template <int NR>
DW_WINO void productRows(int64_t T, int64_t C, const float* v, const float* u, int64_t K,
                         float* m) {
  // Tiles per register block: 6 x 4 (and 6 x 3) or 8 x 2 vectors of accumulators, 4 x 1 where
  // a block of 8 x 1 would need more loads than multiply-adds.
  constexpr int rows = NR >= 3 ? 6 : (NR == 2 ? 8 : 4);
  int64_t t = 0;
  for (; t + rows <= T; t += rows) product<rows, NR>(C, v + t * C, u, K, m + t * K);
  if (t < T) productTail<rows - 1, NR>(T - t, C, v + t * C, u, K, m + t * K);
}

DW_WINO void products(int64_t T, int64_t C, const float* v, const float* u, int64_t K, float* m) {
  int64_t k0 = 0;
  for (; k0 + 4 * kV <= K; k0 += 4 * kV) productRows<4>(T, C, v, u + k0, K, m + k0);
  switch ((K - k0) / kV) {
    case 3:
      productRows<3>(T, C, v, u + k0, K, m + k0);
      break;
    case 2:
      productRows<2>(T, C, v, u + k0, K, m + k0);
      break;
    case 1:
      productRows<1>(T, C, v, u + k0, K, m + k0);
      break;
    default:
      break;
  }
}

// U = G f G^T for 16 filters f at once, G (6 x 3) being the points' 0, +-1, +-2: tap t of the
// filters at f + t * stride, position q of U at u + q * ustride.
DW_WINO void filterBlock(const float* f, int64_t stride, float* u, int64_t ustride) {
  const __m512 quarter = _mm512_set1_ps(1.0f / 4), sixth = _mm512_set1_ps(1.0f / 6),
               minusSixth = _mm512_set1_ps(-1.0f / 6), twelfth = _mm512_set1_ps(1.0f / 12),
               x24 = _mm512_set1_ps(1.0f / 24);
  // One column (or row) of three through G: six values.
  auto apply = [&](__m512 a, __m512 b, __m512 c, __m512 r[6]) DW_WINO {
    const __m512 ac = _mm512_add_ps(a, c);
    r[0] = _mm512_mul_ps(quarter, a);
    r[1] = _mm512_mul_ps(minusSixth, _mm512_add_ps(ac, b));
    r[2] = _mm512_mul_ps(sixth, _mm512_sub_ps(b, ac));
    const __m512 e = _mm512_fmadd_ps(x24, a, _mm512_mul_ps(sixth, c));
    r[3] = _mm512_fmadd_ps(twelfth, b, e);
    r[4] = _mm512_fnmadd_ps(twelfth, b, e);
    r[5] = c;
  };
  __m512 g[3][3], t[6][3];
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) g[a][b] = _mm512_loadu_ps(f + (a * 3 + b) * stride);
  for (int b = 0; b < 3; ++b) {
    __m512 r[6];
    apply(g[0][b], g[1][b], g[2][b], r);
    for (int q = 0; q < 6; ++q) t[q][b] = r[q];
  }
  for (int q = 0; q < 6; ++q) {
    __m512 r[6];
    apply(t[q][0], t[q][1], t[q][2], r);
    for (int s = 0; s < 6; ++s) _mm512_storeu_ps(u + (q * 6 + s) * ustride, r[s]);
  }
}

// One thread's buffers, kept between calls: no allocation while the shapes stay the same.
// `padded` is zeroed whenever its layout changes (shape = {channel blocks, rows, row length}):
// only its interior is rewritten for each image, so a border left from another shape of the
// same size would not be zero.
struct Workspace {
  std::vector<float> padded, v, m;
  std::array<int64_t, 3> shape{};
};

DW_WINO void image(const Winograd43& g, const float* x, const float* u, const float* bias,
                   bool relu, float* y, Workspace& ws) {
  const int64_t th = (g.h + 3) / 4, tw = (g.w + 3) / 4, T = th * tw;
  const int64_t hp = 4 * th + 2, wp = 4 * tw + 2, plane = hp * wp * kV;
  const int64_t cb = g.c / kV, kb = g.k / kV;
  // Positions one vector apart more than their size: 36 rows a multiple of 4 KiB apart would
  // share a few L1 sets.
  const int64_t vs = T * g.c + kV, ms = T * g.k + kV;
  if (ws.shape != std::array<int64_t, 3>{cb, hp, wp}) {
    ws.padded.assign(static_cast<size_t>(cb * plane), 0.0f);
    ws.shape = {cb, hp, wp};
  }
  if (ws.v.size() < static_cast<size_t>(kPos * vs)) ws.v.resize(kPos * vs);
  if (ws.m.size() < static_cast<size_t>(kPos * ms)) ws.m.resize(kPos * ms);
  float* p = ws.padded.data();
  for (int64_t b = 0; b < cb; ++b)
    for (int64_t r = 0; r < g.h; ++r)
      std::memcpy(p + b * plane + ((r + 1) * wp + 1) * kV, x + (b * g.h + r) * g.w * kV,
                  sizeof(float) * g.w * kV);
  float* v = ws.v.data();
  for (int64_t b = 0; b < cb; ++b)
    for (int64_t ty = 0; ty < th; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx) {
        const float* d = p + b * plane + (4 * ty * wp + 4 * tx) * kV;
        __m512 rows[6][6];
        for (int i = 0; i < 6; ++i) {
          __m512 di[6];
          for (int j = 0; j < 6; ++j) di[j] = _mm512_loadu_ps(d + (i * wp + j) * kV);
          inputRow(di, rows[i]);
        }
        float* vt = v + (ty * tw + tx) * g.c + b * kV;
        for (int j = 0; j < 6; ++j) {
          __m512 col[6], r[6];
          for (int i = 0; i < 6; ++i) col[i] = rows[i][j];
          inputRow(col, r);
          for (int i = 0; i < 6; ++i) _mm512_storeu_ps(vt + (i * 6 + j) * vs, r[i]);
        }
      }
  float* m = ws.m.data();
  for (int q = 0; q < kPos; ++q) products(T, g.c, v + q * vs, u + q * g.c * g.k, g.k, m + q * ms);
  for (int64_t b = 0; b < kb; ++b) {
    const __m512 bv = bias ? _mm512_loadu_ps(bias + b * kV) : _mm512_setzero_ps();
    const __m512 floor = _mm512_set1_ps(relu ? 0.0f : -std::numeric_limits<float>::infinity());
    float* yb = y + b * g.h * g.w * kV;
    for (int64_t ty = 0; ty < th; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx) {
        const float* mt = m + (ty * tw + tx) * g.k + b * kV;
        __m512 rows[6][4];
        for (int i = 0; i < 6; ++i) {
          __m512 mi[6];
          for (int j = 0; j < 6; ++j) mi[j] = _mm512_loadu_ps(mt + (i * 6 + j) * ms);
          outputRow(mi, rows[i]);
        }
        for (int j = 0; j < 4 && 4 * tx + j < g.w; ++j) {
          __m512 col[6], o[4];
          for (int i = 0; i < 6; ++i) col[i] = rows[i][j];
          outputRow(col, o);
          for (int i = 0; i < 4 && 4 * ty + i < g.h; ++i)
            _mm512_storeu_ps(yb + ((4 * ty + i) * g.w + 4 * tx + j) * kV,
                             _mm512_max_ps(floor, _mm512_add_ps(o[i], bv)));
        }
      }
  }
}

}  // namespace

bool Winograd43::usable(const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                        const std::vector<int64_t>& dilations, const std::vector<int64_t>& padL,
                        const std::vector<int64_t>& padR, int64_t c, int64_t k, int64_t h,
                        int64_t w) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  const std::vector<int64_t> three{3, 3}, one{1, 1};
  if (kernel != three || strides != one || dilations != one || padL != one || padR != one)
    return false;
  // An image's transformed input and products, 36 x tiles x (c + k) floats, kept within 4 MiB:
  // the kernel was built and measured for work that stays in L2 (230 KB on the CNN example).
  const int64_t tiles = ((h + 3) / 4) * ((w + 3) / 4);
  return avx512 && c > 0 && k > 0 && h > 0 && w > 0 && c % kV == 0 && k % kV == 0 &&
         kPos * tiles * (c + k) * int64_t{sizeof(float)} <= (int64_t{4} << 20);
}

void Winograd43::transformWeights(const float* w, bool flip, float* u) const {
  // Not flipped, w is [k][c][3][3]; flipped (the data gradient of a convolution whose weights
  // are w), w is [c][k][3][3] and each filter is turned by 180 degrees. Each input channel's
  // filters are gathered tap-major, so that the transform runs over 16 output channels at once.
#pragma omp parallel
  {
    thread_local std::vector<float> taps;
    taps.resize(static_cast<size_t>(9 * k));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < c; ++i) {
      for (int64_t o = 0; o < k; ++o)
        for (int t = 0; t < 9; ++t)
          taps[t * k + o] = flip ? w[(i * k + o) * 9 + 8 - t] : w[(o * c + i) * 9 + t];
      for (int64_t o = 0; o < k; o += kV) filterBlock(taps.data() + o, k, u + i * k + o, c * k);
    }
  }
}

void Winograd43::run(const float* x, const float* u, const float* bias, bool relu, float* y) const {
  const int64_t in = c * h * w, out = k * h * w;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    // Declared here, inside the parallel region: every OpenMP thread then constructs its own.
    thread_local Workspace ws;
    image(*this, x + i * in, u, bias, relu, y + i * out, ws);
  }
}

}  // namespace dw::engine::onednn
