#include "engine/kernels/vector_float.h"

#include <immintrin.h>

#include "engine/kernels/common.h"

// GCC 12's unmasked AVX-512 intrinsics start from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// libmvec's AVX-512 entry points (the x86_64 vector ABI's names: 'e' for AVX-512, 16 lanes).
// Declared for AVX-512 callers (clang refuses a __m512 argument to a function without it).
extern "C" {
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_erff(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_sinf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_cosf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_tanf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_asinf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_acosf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_atanf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_sinhf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_coshf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_asinhf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_acoshf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_atanhf(__m512);
__attribute__((target("avx512f"))) __m512 _ZGVeN16vv_powf(__m512, __m512);
}

namespace dw::engine {

namespace {

#define DW_AVX512 __attribute__((target("avx512f")))

using Vec16 = __m512 (*)(__m512);

Vec16 vectorOf(ops::UnaryFn fn) {
  using F = ops::UnaryFn;
  switch (fn) {
    case F::kErf:
      return _ZGVeN16v_erff;
    case F::kSin:
      return _ZGVeN16v_sinf;
    case F::kCos:
      return _ZGVeN16v_cosf;
    case F::kTan:
      return _ZGVeN16v_tanf;
    case F::kAsin:
      return _ZGVeN16v_asinf;
    case F::kAcos:
      return _ZGVeN16v_acosf;
    case F::kAtan:
      return _ZGVeN16v_atanf;
    case F::kSinh:
      return _ZGVeN16v_sinhf;
    case F::kCosh:
      return _ZGVeN16v_coshf;
    case F::kAsinh:
      return _ZGVeN16v_asinhf;
    case F::kAcosh:
      return _ZGVeN16v_acoshf;
    case F::kAtanh:
      return _ZGVeN16v_atanhf;
    default:
      return nullptr;
  }
}

DW_AVX512 void mapRange(Vec16 f, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    // The tail through a zero-padded vector: the lanes beyond n are computed and dropped.
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

DW_AVX512 void powRange(const float* x, const float* e, bool scalar, float* y, int64_t n) {
  int64_t i = 0;
  const __m512 s = scalar ? _mm512_set1_ps(e[0]) : _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i,
                     _ZGVeN16vv_powf(_mm512_loadu_ps(x + i), scalar ? s : _mm512_loadu_ps(e + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m,
                          _ZGVeN16vv_powf(_mm512_maskz_loadu_ps(m, x + i),
                                          scalar ? s : _mm512_maskz_loadu_ps(m, e + i)));
  }
}

}  // namespace

bool vectorUnaryFloat(ops::UnaryFn fn, const float* x, float* y, int64_t n) {
  const Vec16 f = vectorOf(fn);
  if (!f || !vectorMathAvailable()) return false;
  // Whole vectors per piece, so only the last has a tail.
  forThreadRanges((n + 15) / 16, n * 8, [&](int64_t from, int64_t to) {
    mapRange(f, x + from * 16, y + from * 16, std::min(n, to * 16) - from * 16);
  });
  return true;
}

bool vectorPowFloat(const float* x, const float* e, bool scalarExponent, float* y, int64_t n) {
  if (!vectorMathAvailable()) return false;
  forThreadRanges((n + 15) / 16, n * 8, [&](int64_t from, int64_t to) {
    const int64_t at = from * 16;
    powRange(x + at, scalarExponent ? e : e + at, scalarExponent, y + at,
             std::min(n, to * 16) - at);
  });
  return true;
}

}  // namespace dw::engine
