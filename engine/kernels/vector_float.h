// Float32 loops of the reference elementwise kernels that a plain C++ loop leaves slow: the
// transcendental functions of ops/unary.h (Erf, the trigonometric and hyperbolic functions and
// their inverses) and Pow, 16 values at a time through glibc's vector math library (libmvec:
// within a few ulp of the scalar functions), on the session's threads. Where the CPU lacks
// AVX-512 they return false and the kernels keep their loops.
#pragma once

#include <cstdint>

#include "ops/unary.h"

namespace dw::engine {

// y = fn(x) over n values (in place allowed); false where `fn` has no vector form here.
bool vectorUnaryFloat(ops::UnaryFn fn, const float* x, float* y, int64_t n);

// y = x ^ e over n values, e one value for all (`scalarExponent`) or one per x; false where
// there is no vector form. ONNX's Pow: powf's special values (0^0 = 1, NaN^0 = 1, 1^NaN = 1).
bool vectorPowFloat(const float* x, const float* e, bool scalarExponent, float* y, int64_t n);

}  // namespace dw::engine
