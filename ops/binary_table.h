// The elementwise ops of two inputs, one row each: name, first opset, the function (or an
// attribute choosing one), and which backends' tables run it. The host, oneDNN and CUDA kernel
// tables register from here; the maths is in ops/binary.h.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "ops/binary.h"

namespace dw::ops {

// oneDNN's binary algorithms, named here so that this table needs no oneDNN header.
enum class BinaryAlg : uint8_t { kNone, kAdd, kSub, kMul, kDiv };

// An attribute value and the function it picks (Mod's fmod, BitShift's direction).
struct BinaryChoice {
  const char* value = nullptr;
  BinaryFn fn = BinaryFn::kCount;
};

struct BinaryOp {
  const char* name;
  BinaryFn fn;
  int since;
  BinaryAlg onednn = BinaryAlg::kNone;
  bool cuda = false;  // the cuda table runs it (float arithmetic, comparisons of any number type)
  // A choice of function by an attribute: an INT attribute compared as its decimal text, or a
  // STRING one; the first choice is the default.
  const char* choiceAttr = nullptr;
  std::array<BinaryChoice, 2> choices{};
};

std::span<const BinaryOp> binaryOps();
const BinaryOp* findBinaryOp(std::string_view name);

}  // namespace dw::ops
