#include "engine/onednn/vector_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/onednn/vector_lanes.h"

// GCC 12's unmasked AVX-512 intrinsics (max, min, roundscale, scalef, rcp14) start from
// _mm512_undefined_ps(), which -Wmaybe-uninitialized reports once they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dw::engine::onednn {

namespace {

#define DW_AVX512 __attribute__((target("avx512f")))

constexpr float kExpLow = -87.3f, kExpHigh = 88.3f;

// e^x as ops/unary.h's expArith computes it, 16 at a time: x = n ln2 + r with |r| <= ln2 / 2
// (ln2 in two parts so that r is exact), e^r by its Taylor polynomial to r^7 / 7! (error below
// 1e-8 there), scaled by 2^n. Clamped so that 2^n neither overflows nor goes subnormal; outside
// that range sigmoid is 0 or 1 to float precision anyway.
DW_AVX512 __attribute__((always_inline)) inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpLow)), _mm512_set1_ps(kExpHigh));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

// x / (1 + e^(-a x)), the division as rcp14 refined by one Newton step. Where e^(-a x) would
// overflow, the result is x * 0 (below float's resolution of x, and NaN for an infinite x as
// in the definition) rather than x over the clamped exponential.
DW_AVX512 __attribute__((always_inline)) inline __m512 swish512(__m512 x, __m512 minusAlpha) {
  const __m512 z = _mm512_mul_ps(x, minusAlpha);
  const __m512 d = _mm512_add_ps(exp512(z), _mm512_set1_ps(1.0f));
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  const __mmask16 huge = _mm512_cmp_ps_mask(z, _mm512_set1_ps(kExpHigh), _CMP_GT_OQ);
  return _mm512_mask_mul_ps(_mm512_mul_ps(x, r), huge, x, _mm512_setzero_ps());
}

DW_AVX512 void swishRange(float* v, int64_t n, float alpha) {
  const __m512 ma = _mm512_set1_ps(-alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(v + i, swish512(_mm512_loadu_ps(v + i), ma));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(v + i, m, swish512(_mm512_maskz_loadu_ps(m, v + i), ma));
  }
}

// 1 / (1 + e^-v) as ops/unary.h's sigmoid computes it: one exponential of -|v|, which cannot
// overflow, and e / (1 + e) below 0; NaN stays NaN.
DW_AVX512 __attribute__((always_inline)) inline __m512 sigmoid512(__m512 v) {
  const __m512 negAbs = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  const __m512 e = exp512(negAbs);
  const __m512 d = _mm512_add_ps(e, _mm512_set1_ps(1.0f));
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(_mm512_mask_mul_ps(r, negative, e, r), nan, v);
}

DW_AVX512 void sigmoidRange(float* v, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(v + i, sigmoid512(_mm512_loadu_ps(v + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(v + i, m, sigmoid512(_mm512_maskz_loadu_ps(m, v + i)));
  }
}

// tanh as ops/unary.h's tanhOf computes it: (1 - e) / (1 + e) with e = exp(-2|v|), the
// Taylor series to v^9 below |v| = 0.3 where 1 - e cancels, v's sign put back; NaN stays NaN.
DW_AVX512 __attribute__((always_inline)) inline __m512 tanh512(__m512 v) {
  const __m512i signBit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(signBit, _mm512_castps_si512(v)));
  const __m512 e = exp512(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f), d = _mm512_add_ps(one, e);
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  const __m512 big = _mm512_mul_ps(_mm512_sub_ps(one, e), r);
  const __m512 z = _mm512_mul_ps(v, v);
  __m512 p = _mm512_set1_ps(62.0f / 2835);
  for (const float c : {-17.0f / 315, 2.0f / 15, -1.0f / 3, 1.0f})
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(c));
  const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.3f), _CMP_LT_OQ);
  const __m512 t = _mm512_mask_mul_ps(big, small, a, p);
  const __m512 signedT = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(signBit, _mm512_castps_si512(v))));
  return _mm512_mask_mov_ps(signedT, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

DW_AVX512 __attribute__((always_inline)) inline __m512 lstmGate(__mmask16 m, const float* a,
                                                                const float* x, const float* b) {
  const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, a), _mm512_maskz_loadu_ps(m, x));
  return b ? _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, b)) : v;
}

DW_AVX512 void lstmCellRange(const float* a, int64_t lda, const float* x, int64_t ldx,
                             const float* bias, int64_t ldb, const float* peep, int64_t ldp,
                             float* c, float* h, float* y, int64_t w) {
  for (int64_t j = 0; j < w; j += 16) {
    const __mmask16 m = lanes(w - j);
    __m512 gi = lstmGate(m, a + j, x + j, bias ? bias + j : nullptr);
    __m512 go = lstmGate(m, a + lda + j, x + ldx + j, bias ? bias + ldb + j : nullptr);
    __m512 gf = lstmGate(m, a + 2 * lda + j, x + 2 * ldx + j, bias ? bias + 2 * ldb + j : nullptr);
    const __m512 gc =
        lstmGate(m, a + 3 * lda + j, x + 3 * ldx + j, bias ? bias + 3 * ldb + j : nullptr);
    const __m512 cv = _mm512_maskz_loadu_ps(m, c + j);
    if (peep) {
      gi = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, peep + j), cv, gi);
      gf = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, peep + 2 * ldp + j), cv, gf);
    }
    const __m512 cn =
        _mm512_fmadd_ps(sigmoid512(gf), cv, _mm512_mul_ps(sigmoid512(gi), tanh512(gc)));
    _mm512_mask_storeu_ps(c + j, m, cn);
    if (peep) go = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, peep + ldp + j), cn, go);
    const __m512 hn = _mm512_mul_ps(sigmoid512(go), tanh512(cn));
    _mm512_mask_storeu_ps(h + j, m, hn);
    if (y) _mm512_mask_storeu_ps(y + j, m, hn);
  }
}

// Rows' maxima or minima (`max`), NaN where a row has one; n >= 1.
DW_AVX512 void extremaRange(const float* x, float* y, int64_t rows, int64_t n, bool max) {
  const int64_t whole = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1);
  const float start =
      max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r, x += n) {
    __m512 m = _mm512_set1_ps(start);
    __mmask16 nan = 0;
    for (int64_t i = 0; i < whole; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = max ? _mm512_max_ps(m, v) : _mm512_min_ps(m, v);
    }
    if (tail) {
      const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(start), tail, x + whole);
      nan |= _mm512_mask_cmp_ps_mask(tail, v, v, _CMP_UNORD_Q);
      m = max ? _mm512_max_ps(m, v) : _mm512_min_ps(m, v);
    }
    y[r] = nan ? std::numeric_limits<float>::quiet_NaN()
               : (max ? _mm512_reduce_max_ps(m) : _mm512_reduce_min_ps(m));
  }
}

DW_AVX512 void softmaxRange(const float* x, float* y, int64_t rows, int64_t n) {
  const int64_t whole = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1);
  for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    // max_ps drops a NaN operand, so NaNs are counted on the side.
    __mmask16 nan = 0;
    for (int64_t i = 0; i < whole; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_max_ps(m, v);
    }
    if (tail) {
      const __m512 v = _mm512_maskz_loadu_ps(tail, x + whole);
      nan |= _mm512_mask_cmp_ps_mask(tail, v, v, _CMP_UNORD_Q);
      m = _mm512_mask_max_ps(m, tail, m, v);
    }
    const float topValue = _mm512_reduce_max_ps(m);
    // A NaN, or an infinite or empty maximum, makes the whole row NaN, as in PyTorch (the
    // exponential below clamps its argument, which would hide them).
    if (nan || !std::isfinite(topValue)) {
      std::fill(y, y + n, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const __m512 top = _mm512_set1_ps(topValue);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < whole; i += 16) {
      const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), top));
      _mm512_storeu_ps(y + i, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (tail) {
      const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + whole), top));
      _mm512_mask_storeu_ps(y + whole, tail, e);
      sum = _mm512_mask_add_ps(sum, tail, sum, e);
    }
    const __m512 scale = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t i = 0; i < whole; i += 16)
      _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), scale));
    if (tail)
      _mm512_mask_storeu_ps(y + whole, tail,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + whole), scale));
  }
}

// Four rows of B at a time against a, so that a's vectors are loaded once per four rows.
DW_AVX512 void rowDotsRange(const float* a, const float* B, int64_t n0, int64_t n1, int64_t K,
                            const float* bias, float* y) {
  const int64_t whole = K / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - whole)) - 1);
  for (int64_t n = n0; n < n1; n += 4) {
    const int64_t rows = std::min<int64_t>(4, n1 - n);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t k = 0; k < whole; k += 16) {
      const __m512 av = _mm512_loadu_ps(a + k);
      for (int64_t j = 0; j < rows; ++j)
        acc[j] = _mm512_fmadd_ps(av, _mm512_loadu_ps(B + (n + j) * K + k), acc[j]);
    }
    if (tail) {
      const __m512 av = _mm512_maskz_loadu_ps(tail, a + whole);
      for (int64_t j = 0; j < rows; ++j)
        acc[j] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tail, B + (n + j) * K + whole), acc[j]);
    }
    for (int64_t j = 0; j < rows; ++j)
      y[n + j] = _mm512_reduce_add_ps(acc[j]) + (bias ? bias[n + j] : 0.0f);
  }
}

}  // namespace

void swishInPlace(float* v, int64_t n, float alpha) {
  // Whole vectors per piece, so only the last has a masked tail.
  forThreadRanges((n + 15) / 16, n, [&](int64_t from, int64_t to) {
    swishRange(v + from * 16, std::min(n, to * 16) - from * 16, alpha);
  });
}

void swishRows(float* v, int64_t rows, int64_t n, int64_t ld, float alpha) {
  for (int64_t r = 0; r < rows; ++r) swishRange(v + r * ld, n, alpha);
}

void sigmoidInPlace(float* v, int64_t n) {
  forThreadRanges((n + 15) / 16, n, [&](int64_t from, int64_t to) {
    sigmoidRange(v + from * 16, std::min(n, to * 16) - from * 16);
  });
}

void lstmCell(const float* a, int64_t lda, const float* x, int64_t ldx, const float* bias,
              int64_t ldb, const float* peep, int64_t ldp, float* c, float* h, float* y,
              int64_t w) {
  lstmCellRange(a, lda, x, ldx, bias, ldb, peep, ldp, c, h, y, w);
}

void rowExtrema(const float* x, float* y, int64_t rows, int64_t n, bool max) {
  if (n <= 0) return;
  forThreadRanges(rows, rows * n, [&](int64_t from, int64_t to) {
    extremaRange(x + from * n, y + from, to - from, n, max);
  });
}

void softmaxRows(const float* x, float* y, int64_t rows, int64_t n) {
  if (n <= 0) return;
  forThreadRanges(rows, rows * n, [&](int64_t from, int64_t to) {
    softmaxRange(x + from * n, y + from * n, to - from, n);
  });
}

void rowDots(const float* a, const float* B, int64_t N, int64_t K, const float* bias, float* y) {
  // Whole blocks of four rows per piece.
  forThreadRanges((N + 3) / 4, N * K, [&](int64_t from, int64_t to) {
    rowDotsRange(a, B, from * 4, std::min(N, to * 4), K, bias, y);
  });
}

}  // namespace dw::engine::onednn
