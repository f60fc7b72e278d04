// The maths of the elementwise ops of two inputs, in one place for every backend: the reference
// kernels (engine/kernels/elementwise.cpp) and the CUDA kernels (engine/cuda/elementwise.cu)
// instantiate these templates; ops/binary_table.cpp lists the ops. Division and modulo by an
// integer zero are the caller's to detect (the host kernel reports them).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/unary.h"  // DW_HOST_DEVICE

namespace dw::ops {

enum class BinaryFn : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMod,   // the remainder with the divisor's sign (ONNX Mod, fmod = 0)
  kFmod,  // the remainder with the dividend's sign (fmod = 1, C's % and fmod)
  kAnd,
  kOr,
  kXor,
  kEqual,
  kLess,
  kGreater,
  kLessEqual,
  kGreaterEqual,
  kShiftLeft,
  kShiftRight,
  kBitAnd,
  kBitOr,
  kBitXor,
  kCount
};

// What a function takes and gives: numbers to the same type, numbers (or bools, strings for
// Equal) to bool, bools to bool, unsigned integers (shifts) or integers (bitwise) to the same
// type. Pow also takes an exponent of another type.
enum class BinaryKind : uint8_t { kArithmetic, kCompare, kLogic, kShift, kBitwise };

DW_HOST_DEVICE constexpr BinaryKind kindOf(BinaryFn f) {
  switch (f) {
    case BinaryFn::kAnd:
    case BinaryFn::kOr:
    case BinaryFn::kXor:
      return BinaryKind::kLogic;
    case BinaryFn::kEqual:
    case BinaryFn::kLess:
    case BinaryFn::kGreater:
    case BinaryFn::kLessEqual:
    case BinaryFn::kGreaterEqual:
      return BinaryKind::kCompare;
    case BinaryFn::kShiftLeft:
    case BinaryFn::kShiftRight:
      return BinaryKind::kShift;
    case BinaryFn::kBitAnd:
    case BinaryFn::kBitOr:
    case BinaryFn::kBitXor:
      return BinaryKind::kBitwise;
    default:
      return BinaryKind::kArithmetic;
  }
}

// x^e for a base of type T and an exponent of type U, in T (through double unless both are
// float).
template <class T, class U>
DW_HOST_DEVICE inline T powOf(T x, U e) {
  using std::pow;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<U, float>)
    return pow(x, e);
  else
    return static_cast<T>(pow(static_cast<double>(x), static_cast<double>(e)));
}

// f(a, b): T for arithmetic and shifts, bool for comparisons and logic.
template <BinaryFn F, class T>
DW_HOST_DEVICE inline auto binaryForward(T a, T b) {
  using std::fmod;
  if constexpr (F == BinaryFn::kAdd) {
    return static_cast<T>(a + b);
  } else if constexpr (F == BinaryFn::kSub) {
    return static_cast<T>(a - b);
  } else if constexpr (F == BinaryFn::kMul) {
    return static_cast<T>(a * b);
  } else if constexpr (F == BinaryFn::kDiv) {
    return static_cast<T>(a / b);
  } else if constexpr (F == BinaryFn::kPow) {
    return powOf(a, b);
  } else if constexpr (F == BinaryFn::kMod || F == BinaryFn::kFmod) {
    T r;
    if constexpr (std::is_integral_v<T>)
      r = static_cast<T>(a % b);
    else
      r = fmod(a, b);
    if constexpr (F == BinaryFn::kMod && std::is_signed_v<T>) {
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = static_cast<T>(r + b);
    }
    return r;
  } else if constexpr (F == BinaryFn::kAnd) {
    return a && b;
  } else if constexpr (F == BinaryFn::kOr) {
    return a || b;
  } else if constexpr (F == BinaryFn::kXor) {
    return a != b;
  } else if constexpr (F == BinaryFn::kEqual) {
    return a == b;
  } else if constexpr (F == BinaryFn::kLess) {
    return a < b;
  } else if constexpr (F == BinaryFn::kGreater) {
    return a > b;
  } else if constexpr (F == BinaryFn::kLessEqual) {
    return a <= b;
  } else if constexpr (F == BinaryFn::kGreaterEqual) {
    return a >= b;
  } else if constexpr (F == BinaryFn::kShiftLeft) {
    return b >= T(sizeof(T) * 8) ? T(0) : static_cast<T>(a << b);
  } else if constexpr (F == BinaryFn::kShiftRight) {
    return b >= T(sizeof(T) * 8) ? T(0) : static_cast<T>(a >> b);
  } else if constexpr (F == BinaryFn::kBitAnd || F == BinaryFn::kBitOr || F == BinaryFn::kBitXor) {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (F == BinaryFn::kBitAnd) return static_cast<T>(a & b);
      if constexpr (F == BinaryFn::kBitOr) return static_cast<T>(a | b);
      if constexpr (F == BinaryFn::kBitXor) return static_cast<T>(a ^ b);
    } else {
      return a;  // integers only: the kernels refuse other types before they get here
    }
  } else {
    static_assert(F != F, "binaryForward: a function without its formula");
  }
}

template <class Visitor>
DW_HOST_DEVICE inline decltype(auto) visitBinary(BinaryFn op, Visitor&& f) {
  return visitFunctions(op, static_cast<Visitor&&>(f));  // ops/unary.h
}

}  // namespace dw::ops
