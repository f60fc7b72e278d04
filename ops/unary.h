// The maths of every elementwise function of one value: y = f(x) and f'(x), in one place for
// every backend. The reference kernels, the oneDNN kernels' fallbacks and fused post-ops, the
// recurrent cells' activations and the CUDA kernels all instantiate these templates, so an
// activation is written once (ops/unary_table.cpp lists the ops that use them).
//
// Each function is a branch of `if constexpr`: a kernel that dispatches once per tensor
// (visitUnary) gets one tight loop per function, with nothing to decide per element.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define DW_HOST_DEVICE __host__ __device__
#else
#define DW_HOST_DEVICE
#endif

namespace dw::ops {

enum class UnaryFn : uint8_t {
  kAbs,
  kNeg,
  kSign,
  kRelu,
  kFloor,
  kCeil,
  kRound,
  kReciprocal,
  kSqrt,
  kExp,
  kLog,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kSigmoid,
  kTanh,
  kErf,
  kSoftplus,
  kSoftsign,
  kLeakyRelu,
  kElu,
  kSelu,
  kCelu,
  kHardSigmoid,
  kThresholdedRelu,
  kHardSwish,
  kMish,
  kShrink,
  kGelu,
  kGeluTanh,
  kSwish,
  kClip,        // bounds alpha..beta (Clip's min/max inputs, resolved where the op is fused)
  kAffine,      // recurrent-cell activation only
  kScaledTanh,  // recurrent-cell activation only
  kCount
};

// A function's constants, read from the op's attributes (ops/unary_table.h says which).
struct UnaryParams {
  float alpha = 0, beta = 0, gamma = 0;
};

// The functions computed in the input's own integer type; the others are floating point only.
DW_HOST_DEVICE constexpr bool nativeIntegers(UnaryFn f) {
  return f == UnaryFn::kAbs || f == UnaryFn::kNeg || f == UnaryFn::kSign || f == UnaryFn::kRelu;
}

namespace detail {
// e^x for float as arithmetic only, so that loops over it vectorize (libm's expf is a call per
// element): x = n ln2 + r with |r| <= ln2/2, e^r from its Taylor series to r^7 (relative error
// below 1e-8), times 2^n built in the exponent bits. Within 2 ulp of expf; x is clamped to
// where 2^n stays a normal float, so very negative x give about 1e-38 instead of 0.
inline float expArith(float x) {
  // Written so that NaN lands on -87 (no float-to-int conversion of a NaN); callers pass NaN on.
  x = x > -87.0f ? (x < 88.0f ? x : 88.0f) : -87.0f;
  // Adding and removing 1.5 * 2^23 rounds to the nearest integer.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-6f;  // ln2 in two parts
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
// Whether the float sigmoid and tanh below use expArith: on the host, where a kernel's loop then
// vectorizes; device code has fast exponentials of its own.
#if defined(__CUDA_ARCH__)
constexpr bool kArithExp = false;
#else
constexpr bool kArithExp = true;
#endif

template <class T>
DW_HOST_DEVICE inline T softplus(T v) {
  using std::exp;
  using std::log1p;
  // log(1 + e^v) without overflow for large v.
  return v > T(0) ? v + log1p(exp(-v)) : log1p(exp(v));
}
template <class T>
DW_HOST_DEVICE inline T sigmoid(T v) {
  using std::exp;
  if constexpr (std::is_same_v<T, float> && kArithExp) {
    // One exponential of -|v|, which cannot overflow: e / (1 + e) below 0.
    const float e = expArith(v < 0 ? v : -v), s = 1.0f / (1.0f + e);
    return v != v ? v : (v >= 0 ? s : e * s);
  } else {
    return v >= T(0) ? T(1) / (T(1) + exp(-v)) : exp(v) / (T(1) + exp(v));
  }
}
template <class T>
DW_HOST_DEVICE inline T tanhOf(T v) {
  using std::tanh;
  if constexpr (std::is_same_v<T, float> && kArithExp) {
    // (1 - e) / (1 + e) with e = exp(-2|v|); near 0, where 1 - e cancels, the Taylor series to
    // v^9 (relative error below 2e-8 for |v| < 0.3).
    const float a = v < 0 ? -v : v, e = expArith(-2 * a), big = (1 - e) / (1 + e);
    const float z = v * v;
    const float small =
        a * (1 + z * (-1.0f / 3 + z * (2.0f / 15 + z * (-17.0f / 315 + z * (62.0f / 2835)))));
    const float t = a < 0.3f ? small : big;
    return v != v ? v : (v < 0 ? -t : t);
  } else {
    return tanh(v);
  }
}
template <class T>
constexpr T kSqrt2OverPi = T(0.7978845608028654);  // sqrt(2 / pi), GELU's tanh form
template <class T>
constexpr T kInvSqrt2 = T(0.7071067811865476);  // 1 / sqrt(2)
template <class T>
constexpr T kInvSqrt2Pi = T(0.3989422804014327);  // 1 / sqrt(2 pi), the normal density
template <class T>
constexpr T kTwoOverSqrtPi = T(1.1283791670955126);  // erf' at 0
template <class T>
constexpr T kGeluCubic = T(0.044715);
}  // namespace detail

template <UnaryFn F, class T>
DW_HOST_DEVICE inline T unaryForward(T x, const UnaryParams& p) {
  using namespace detail;
  using std::abs, std::floor, std::ceil, std::nearbyint, std::sqrt, std::exp, std::log, std::sin,
      std::cos, std::tan, std::asin, std::acos, std::atan, std::sinh, std::cosh, std::asinh,
      std::acosh, std::atanh, std::tanh, std::erf;
  [[maybe_unused]] const T a = static_cast<T>(p.alpha), b = static_cast<T>(p.beta),
                           g = static_cast<T>(p.gamma);
  if constexpr (F == UnaryFn::kAbs) {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? T(-x) : x;
  } else if constexpr (F == UnaryFn::kNeg) {
    return T(-x);
  } else if constexpr (F == UnaryFn::kSign) {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  } else if constexpr (F == UnaryFn::kRelu) {
    return x < T(0) ? T(0) : x;  // NaN stays NaN, as max(x, 0) leaves it in PyTorch and ORT
  } else if constexpr (F == UnaryFn::kFloor) {
    return floor(x);
  } else if constexpr (F == UnaryFn::kCeil) {
    return ceil(x);
  } else if constexpr (F == UnaryFn::kRound) {
    return nearbyint(x);  // halves to even, as ONNX asks
  } else if constexpr (F == UnaryFn::kReciprocal) {
    return T(1) / x;
  } else if constexpr (F == UnaryFn::kSqrt) {
    return sqrt(x);
  } else if constexpr (F == UnaryFn::kExp) {
    return exp(x);
  } else if constexpr (F == UnaryFn::kLog) {
    return log(x);
  } else if constexpr (F == UnaryFn::kSin) {
    return sin(x);
  } else if constexpr (F == UnaryFn::kCos) {
    return cos(x);
  } else if constexpr (F == UnaryFn::kTan) {
    return tan(x);
  } else if constexpr (F == UnaryFn::kAsin) {
    return asin(x);
  } else if constexpr (F == UnaryFn::kAcos) {
    return acos(x);
  } else if constexpr (F == UnaryFn::kAtan) {
    return atan(x);
  } else if constexpr (F == UnaryFn::kSinh) {
    return sinh(x);
  } else if constexpr (F == UnaryFn::kCosh) {
    return cosh(x);
  } else if constexpr (F == UnaryFn::kAsinh) {
    return asinh(x);
  } else if constexpr (F == UnaryFn::kAcosh) {
    return acosh(x);
  } else if constexpr (F == UnaryFn::kAtanh) {
    return atanh(x);
  } else if constexpr (F == UnaryFn::kSigmoid) {
    return sigmoid(x);
  } else if constexpr (F == UnaryFn::kTanh) {
    return tanhOf(x);
  } else if constexpr (F == UnaryFn::kErf) {
    return erf(x);
  } else if constexpr (F == UnaryFn::kSoftplus) {
    return softplus(x);
  } else if constexpr (F == UnaryFn::kSoftsign) {
    return x / (T(1) + abs(x));
  } else if constexpr (F == UnaryFn::kLeakyRelu) {
    return x >= T(0) ? x : a * x;
  } else if constexpr (F == UnaryFn::kElu) {
    return x >= T(0) ? x : a * (exp(x) - T(1));
  } else if constexpr (F == UnaryFn::kSelu) {
    return x > T(0) ? g * x : g * (a * exp(x) - a);
  } else if constexpr (F == UnaryFn::kCelu) {
    const T neg = a * (exp(x / a) - T(1));
    return (x > T(0) ? x : T(0)) + (neg < T(0) ? neg : T(0));
  } else if constexpr (F == UnaryFn::kHardSigmoid) {
    const T t = a * x + b;
    return t < T(0) ? T(0) : (t > T(1) ? T(1) : t);
  } else if constexpr (F == UnaryFn::kThresholdedRelu) {
    return x > a ? x : T(0);
  } else if constexpr (F == UnaryFn::kHardSwish) {
    const T t = x / T(6) + T(0.5);
    return x * (t < T(0) ? T(0) : (t > T(1) ? T(1) : t));
  } else if constexpr (F == UnaryFn::kMish) {
    return x * tanh(softplus(x));
  } else if constexpr (F == UnaryFn::kShrink) {
    return x < -a ? x + b : (x > a ? x - b : T(0));
  } else if constexpr (F == UnaryFn::kGelu) {
    return T(0.5) * x * (T(1) + erf(x * kInvSqrt2<T>));
  } else if constexpr (F == UnaryFn::kGeluTanh) {
    return T(0.5) * x * (T(1) + tanh(kSqrt2OverPi<T> * (x + kGeluCubic<T> * x * x * x)));
  } else if constexpr (F == UnaryFn::kSwish) {
    return x * sigmoid(a * x);
  } else if constexpr (F == UnaryFn::kClip) {
    return x < a ? a : (x > b ? b : x);
  } else if constexpr (F == UnaryFn::kAffine) {
    return a * x + b;
  } else if constexpr (F == UnaryFn::kScaledTanh) {
    return a * tanh(b * x);
  } else {
    static_assert(F != F, "unaryForward: a function without its formula");
  }
}

// f'(x), given x and y = f(x) (several derivatives are cheapest from y).
template <UnaryFn F, class T>
DW_HOST_DEVICE inline T unaryDerivative(T x, T y, const UnaryParams& p) {
  using namespace detail;
  using std::abs, std::sqrt, std::exp, std::sin, std::cos, std::sinh, std::cosh, std::tanh,
      std::erf;
  [[maybe_unused]] const T a = static_cast<T>(p.alpha), b = static_cast<T>(p.beta),
                           g = static_cast<T>(p.gamma);
  if constexpr (F == UnaryFn::kAbs || F == UnaryFn::kSign) {
    if constexpr (F == UnaryFn::kAbs)
      return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    else
      return T(0);
  } else if constexpr (F == UnaryFn::kNeg) {
    return T(-1);
  } else if constexpr (F == UnaryFn::kRelu) {
    return x > T(0) ? T(1) : T(0);
  } else if constexpr (F == UnaryFn::kFloor || F == UnaryFn::kCeil || F == UnaryFn::kRound) {
    return T(0);
  } else if constexpr (F == UnaryFn::kReciprocal) {
    return -y * y;
  } else if constexpr (F == UnaryFn::kSqrt) {
    return T(0.5) / y;
  } else if constexpr (F == UnaryFn::kExp) {
    return y;
  } else if constexpr (F == UnaryFn::kLog) {
    return T(1) / x;
  } else if constexpr (F == UnaryFn::kSin) {
    return cos(x);
  } else if constexpr (F == UnaryFn::kCos) {
    return -sin(x);
  } else if constexpr (F == UnaryFn::kTan) {
    return T(1) + y * y;
  } else if constexpr (F == UnaryFn::kAsin) {
    return T(1) / sqrt(T(1) - x * x);
  } else if constexpr (F == UnaryFn::kAcos) {
    return T(-1) / sqrt(T(1) - x * x);
  } else if constexpr (F == UnaryFn::kAtan) {
    return T(1) / (T(1) + x * x);
  } else if constexpr (F == UnaryFn::kSinh) {
    return cosh(x);
  } else if constexpr (F == UnaryFn::kCosh) {
    return sinh(x);
  } else if constexpr (F == UnaryFn::kAsinh) {
    return T(1) / sqrt(x * x + T(1));
  } else if constexpr (F == UnaryFn::kAcosh) {
    return T(1) / sqrt(x * x - T(1));
  } else if constexpr (F == UnaryFn::kAtanh) {
    return T(1) / (T(1) - x * x);
  } else if constexpr (F == UnaryFn::kSigmoid) {
    return y * (T(1) - y);
  } else if constexpr (F == UnaryFn::kTanh) {
    return T(1) - y * y;
  } else if constexpr (F == UnaryFn::kErf) {
    return kTwoOverSqrtPi<T> * exp(-x * x);
  } else if constexpr (F == UnaryFn::kSoftplus) {
    return T(1) / (T(1) + exp(-x));
  } else if constexpr (F == UnaryFn::kSoftsign) {
    const T d = T(1) + abs(x);
    return T(1) / (d * d);
  } else if constexpr (F == UnaryFn::kLeakyRelu) {
    return x > T(0) ? T(1) : a;
  } else if constexpr (F == UnaryFn::kElu) {
    return x > T(0) ? T(1) : y + a;
  } else if constexpr (F == UnaryFn::kSelu) {
    return x > T(0) ? g : y + g * a;
  } else if constexpr (F == UnaryFn::kCelu) {
    return x > T(0) ? T(1) : exp(x / a);
  } else if constexpr (F == UnaryFn::kHardSigmoid) {
    const T t = a * x + b;
    return t > T(0) && t < T(1) ? a : T(0);
  } else if constexpr (F == UnaryFn::kThresholdedRelu) {
    return x > a ? T(1) : T(0);
  } else if constexpr (F == UnaryFn::kHardSwish) {
    return x < T(-3) ? T(0) : (x > T(3) ? T(1) : (T(2) * x + T(3)) / T(6));
  } else if constexpr (F == UnaryFn::kMish) {
    const T t = tanh(softplus(x));
    return t + x * (T(1) - t * t) * sigmoid(x);
  } else if constexpr (F == UnaryFn::kShrink) {
    return x < -a || x > a ? T(1) : T(0);
  } else if constexpr (F == UnaryFn::kGelu) {
    return T(0.5) * (T(1) + erf(x * kInvSqrt2<T>)) + x * kInvSqrt2Pi<T> * exp(T(-0.5) * x * x);
  } else if constexpr (F == UnaryFn::kGeluTanh) {
    const T t = tanh(kSqrt2OverPi<T> * (x + kGeluCubic<T> * x * x * x));
    return T(0.5) * (T(1) + t) +
           T(0.5) * x * (T(1) - t * t) * kSqrt2OverPi<T> * (T(1) + T(3) * kGeluCubic<T> * x * x);
  } else if constexpr (F == UnaryFn::kSwish) {
    const T s = sigmoid(a * x);
    return s + a * x * s * (T(1) - s);
  } else if constexpr (F == UnaryFn::kClip) {
    return x >= a && x <= b ? T(1) : T(0);
  } else if constexpr (F == UnaryFn::kAffine) {
    return a;
  } else if constexpr (F == UnaryFn::kScaledTanh) {
    const T t = tanh(b * x);
    return a * b * (T(1) - t * t);
  } else {
    static_assert(F != F, "unaryDerivative: a function without its derivative");
  }
}

// Calls f(std::integral_constant<Enum, op>{}) with the runtime `op` as a compile-time constant,
// so that the caller's loop is instantiated once per function (Enum counts its values in kCount).
template <class Enum, int I = 0, class Visitor>
DW_HOST_DEVICE inline decltype(auto) visitFunctions(Enum op, Visitor&& f) {
  constexpr auto kF = static_cast<Enum>(I);
  if constexpr (I + 1 < static_cast<int>(Enum::kCount)) {
    if (op == kF) return f(std::integral_constant<Enum, kF>{});
    return visitFunctions<Enum, I + 1>(op, static_cast<Visitor&&>(f));
  } else {
    return f(std::integral_constant<Enum, kF>{});
  }
}

template <class Visitor>
DW_HOST_DEVICE inline decltype(auto) visitUnary(UnaryFn op, Visitor&& f) {
  return visitFunctions(op, static_cast<Visitor&&>(f));
}

}  // namespace dw::ops
