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
#include <omp.h>

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
DW_WINO __attribute__((always_inline)) inline void product(int64_t C, const float* v,
                                                           const float* u, int64_t K, float* m) {
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
DW_WINO __attribute__((always_inline)) inline void productTail(int64_t left, int64_t C,
                                                               const float* v, const float* u,
                                                               int64_t K, float* m) {
  if constexpr (MR > 0) {
    if (left == MR)
      product<MR, NR>(C, v, u, K, m);
    else
      productTail<MR - 1, NR>(left, C, v, u, K, m);
  }
}

// All T tiles of one position, output channels [k0, k0 + 16 NR).
template <int NR>
DW_WINO __attribute__((always_inline)) inline void productRows(int64_t T, int64_t C, const float* v,
                                                               const float* u, int64_t K,
                                                               float* m) {
  // Tiles per register block: 6 x 4 (and 6 x 3) or 8 x 2 vectors of accumulators, 4 x 1 where
  // a block of 8 x 1 would need more loads than multiply-adds.
  constexpr int rows = NR >= 3 ? 6 : (NR == 2 ? 8 : 4);
  int64_t t = 0;
  for (; t + rows <= T; t += rows) product<rows, NR>(C, v + t * C, u, K, m + t * K);
  if (t < T) productTail<rows - 1, NR>(T - t, C, v + t * C, u, K, m + t * K);
}

// The products of one position for output channels [0, width) of rows K floats long (width a
// multiple of 16; u and m start at the first of those channels).
DW_WINO void products(int64_t T, int64_t C, const float* v, const float* u, int64_t K,
                      int64_t width, float* m) {
  int64_t k0 = 0;
  for (; k0 + 4 * kV <= width; k0 += 4 * kV) productRows<4>(T, C, v, u + k0, K, m + k0);
  switch ((width - k0) / kV) {
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

// A zero-bordered copy of one channel block of an image, (h + 2 + ...) x (w + 2 + ...) pixels
// of 16 channels, kept by each thread between calls. Only the interior is rewritten for each
// block, so the buffer is zeroed whenever the plane's size changes: a border left from another
// plane of the same byte size (5 x 9 after 9 x 5) would not be zero.
struct Plane {
  std::vector<float> data;
  std::array<int64_t, 2> shape{};
};

// Where tile t of position q of the transformed input (v) or of the products (m) lies: rows of
// `width` floats (C or K), one row per tile, positions `stride` floats apart.
struct Tiles {
  float* base;
  int64_t stride, width;
  float* at(int q, int64_t t) const { return base + q * stride + t * width; }
};

// Stage 1: channel block b of image x (blocked nChw16c, or NHWC with `nhwc`) into the tiles'
// rows [t0, t0 + tiles) of v.
template <bool nhwc>
DW_WINO __attribute__((always_inline)) inline void transformInput(const Winograd43& g,
                                                                  const float* x, int64_t b,
                                                                  const Tiles& v, int64_t t0,
                                                                  Plane& plane) {
  const int64_t th = (g.h + 3) / 4, tw = (g.w + 3) / 4;
  const int64_t hp = 4 * th + 2, wp = 4 * tw + 2;
  if (plane.shape != std::array<int64_t, 2>{g.h, g.w}) {
    plane.data.assign(static_cast<size_t>(hp * wp * kV), 0.0f);
    plane.shape = {g.h, g.w};
  }
  float* p = plane.data.data();
  for (int64_t r = 0; r < g.h; ++r) {
    float* row = p + ((r + 1) * wp + 1) * kV;
    if constexpr (nhwc) {
      const float* src = x + r * g.w * g.c + b * kV;
      for (int64_t col = 0; col < g.w; ++col)
        _mm512_storeu_ps(row + col * kV, _mm512_loadu_ps(src + col * g.c));
    } else {
      std::memcpy(row, x + (b * g.h + r) * g.w * kV, sizeof(float) * g.w * kV);
    }
  }
  for (int64_t ty = 0; ty < th; ++ty)
    for (int64_t tx = 0; tx < tw; ++tx) {
      const float* d = p + (4 * ty * wp + 4 * tx) * kV;
      __m512 rows[6][6];
      for (int i = 0; i < 6; ++i) {
        __m512 di[6];
        for (int j = 0; j < 6; ++j) di[j] = _mm512_loadu_ps(d + (i * wp + j) * kV);
        inputRow(di, rows[i]);
      }
      float* vt = v.at(0, t0 + ty * tw + tx) + b * kV;
      for (int j = 0; j < 6; ++j) {
        __m512 col[6], r[6];
        for (int i = 0; i < 6; ++i) col[i] = rows[i][j];
        inputRow(col, r);
        for (int i = 0; i < 6; ++i) _mm512_storeu_ps(vt + (i * 6 + j) * v.stride, r[i]);
      }
    }
}

// Stage 3: output channel block b of one image from the products' rows [t0, t0 + tiles) of m,
// plus the bias and the residual (in y's layout), then the Relu, into y (blocked, or NHWC).
template <bool nhwc, bool withResidual>
DW_WINO __attribute__((always_inline)) inline void transformOutput(const Winograd43& g,
                                                                   const Tiles& m, int64_t t0,
                                                                   int64_t b, const float* bias,
                                                                   const float* residual, bool relu,
                                                                   float* y) {
  const int64_t th = (g.h + 3) / 4, tw = (g.w + 3) / 4;
  const __m512 bv = bias ? _mm512_loadu_ps(bias + b * kV) : _mm512_setzero_ps();
  const __m512 floor = _mm512_set1_ps(relu ? 0.0f : -std::numeric_limits<float>::infinity());
  // Pixel (r, col) of this block: blocked planes are h x w x 16, NHWC rows w x k.
  const int64_t base = nhwc ? b * kV : b * g.h * g.w * kV;
  const int64_t pixel = nhwc ? g.k : kV;
  for (int64_t ty = 0; ty < th; ++ty)
    for (int64_t tx = 0; tx < tw; ++tx) {
      const float* mt = m.at(0, t0 + ty * tw + tx) + b * kV;
      __m512 rows[6][4];
      for (int i = 0; i < 6; ++i) {
        __m512 mi[6];
        for (int j = 0; j < 6; ++j) mi[j] = _mm512_loadu_ps(mt + (i * 6 + j) * m.stride);
        outputRow(mi, rows[i]);
      }
      for (int j = 0; j < 4 && 4 * tx + j < g.w; ++j) {
        __m512 col[6], o[4];
        for (int i = 0; i < 6; ++i) col[i] = rows[i][j];
        outputRow(col, o);
        for (int i = 0; i < 4 && 4 * ty + i < g.h; ++i) {
          const int64_t at = base + ((4 * ty + i) * g.w + 4 * tx + j) * pixel;
          __m512 r = _mm512_add_ps(o[i], bv);
          if constexpr (withResidual) r = _mm512_add_ps(r, _mm512_loadu_ps(residual + at));
          _mm512_storeu_ps(y + at, _mm512_max_ps(floor, r));
        }
      }
    }
}

// Transformed input and products of `tiles` tiles, positions one vector apart more than their
// size: 36 rows a multiple of 4 KiB apart would share a few L1 sets.
struct Buffers {
  std::vector<float> v, m;
  Tiles vt{}, mt{};
  void size(const Winograd43& g, int64_t tiles) {
    const int64_t vs = tiles * g.c + kV, ms = tiles * g.k + kV;
    if (v.size() < static_cast<size_t>(kPos * vs)) v.resize(kPos * vs);
    if (m.size() < static_cast<size_t>(kPos * ms)) m.resize(kPos * ms);
    vt = {v.data(), vs, g.c};
    mt = {m.data(), ms, g.k};
  }
};

// The stages for g's layouts: compiled once per layout, so that a pixel's stride is a constant.
DW_WINO void transformInputAs(const Winograd43& g, const float* x, int64_t b, const Tiles& v,
                              int64_t t0, Plane& plane) {
  if (g.nhwcIn)
    transformInput<true>(g, x, b, v, t0, plane);
  else
    transformInput<false>(g, x, b, v, t0, plane);
}

DW_WINO void transformOutputAs(const Winograd43& g, const Tiles& m, int64_t t0, int64_t b,
                               const float* bias, const float* residual, bool relu, float* y) {
  if (g.nhwcOut)
    residual ? transformOutput<true, true>(g, m, t0, b, bias, residual, relu, y)
             : transformOutput<true, false>(g, m, t0, b, bias, residual, relu, y);
  else
    residual ? transformOutput<false, true>(g, m, t0, b, bias, residual, relu, y)
             : transformOutput<false, false>(g, m, t0, b, bias, residual, relu, y);
}

bool groupedOnly = false;  // tests: every batch takes the grouped schedule

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

void Winograd43::run(const float* x, const float* u, const float* bias, const float* residual,
                     bool relu, float* y) const {
  const int64_t in = c * h * w, out = k * h * w;
  const int64_t tiles = ((h + 3) / 4) * ((w + 3) / 4), cb = c / kV, kb = k / kV;
  const int threads = omp_get_max_threads();
  // Each thread takes whole images while there are enough to share evenly and the transformed
  // weights stay in its cache (they are read once per image): the training CNN's layers. Small
  // batches and wide layers (resnet's 512-channel 7 x 7 planes hold 36 MiB of transformed
  // weights) take the grouped schedule, in which the images' tiles form one matrix per
  // position and the threads share each stage.
  const bool perImage = !groupedOnly && n >= threads && (n % threads == 0 || n >= 4 * threads) &&
                        kPos * c * k * int64_t{sizeof(float)} <= (int64_t{1} << 20);
  if (perImage) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      // Declared here, inside the parallel region: every OpenMP thread then constructs its own.
      thread_local Buffers buf;
      thread_local Plane plane;
      buf.size(*this, tiles);
      for (int64_t b = 0; b < cb; ++b) transformInputAs(*this, x + i * in, b, buf.vt, 0, plane);
      for (int q = 0; q < kPos; ++q)
        products(tiles, c, buf.vt.at(q, 0), u + q * c * k, k, k, buf.mt.at(q, 0));
      for (int64_t b = 0; b < kb; ++b)
        transformOutputAs(*this, buf.mt, 0, b, bias, residual ? residual + i * out : nullptr, relu,
                          y + i * out);
    }
    return;
  }
  // Images per group: their transformed input and products within 8 MiB.
  const int64_t perImageBytes = kPos * tiles * (c + k) * int64_t{sizeof(float)};
  const int64_t group = std::clamp<int64_t>((int64_t{8} << 20) / perImageBytes, 1, n);
  thread_local Buffers shared;
  shared.size(*this, group * tiles);
  // Output channels per product task: enough tasks for every thread.
  int64_t width = 4 * kV;
  while (width > kV && kPos * ((k + width - 1) / width) < 4 * threads) width -= kV;
  const int64_t chunks = (k + width - 1) / width;
  const Buffers& sb = shared;
  for (int64_t i0 = 0; i0 < n; i0 += group) {
    const int64_t g = std::min(group, n - i0);
#pragma omp parallel
    {
      thread_local Plane plane;
#pragma omp for schedule(static) collapse(2)
      for (int64_t i = 0; i < g; ++i)
        for (int64_t b = 0; b < cb; ++b)
          transformInputAs(*this, x + (i0 + i) * in, b, sb.vt, i * tiles, plane);
#pragma omp for schedule(static) collapse(2)
      for (int q = 0; q < kPos; ++q)
        for (int64_t j = 0; j < chunks; ++j) {
          const int64_t k0 = j * width;
          products(g * tiles, c, sb.vt.at(q, 0), u + q * c * k + k0, k, std::min(width, k - k0),
                   sb.mt.at(q, 0) + k0);
        }
#pragma omp for schedule(static) collapse(2)
      for (int64_t i = 0; i < g; ++i)
        for (int64_t b = 0; b < kb; ++b)
          transformOutputAs(*this, sb.mt, i * tiles, b, bias,
                            residual ? residual + (i0 + i) * out : nullptr, relu,
                            y + (i0 + i) * out);
    }
  }
}

void winogradGroupedOnly(bool on) {
  groupedOnly = on;
}

}  // namespace dw::engine::onednn
