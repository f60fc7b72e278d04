// The elementwise ops of one input, one row each: name, opsets, the attributes that feed the
// function's constants, whether it has a gradient, its oneDNN algorithm, and where else it may
// appear (recurrent-cell activations, fused post-ops). The kernels of every backend, the gradient
// builder, the grad domain's catalogue entry and the fusion pass all read this table; the maths
// is in ops/unary.h.
//
// How to add an activation: give it a UnaryFn with its formula and derivative in ops/unary.h, a
// row in kUnaryOps (unary_table.cpp), and torch references in tests/golden/make_unary_golden.py
// (run it to refresh tests/golden/unary_golden.json). tests/engine/unary_table_test.cpp then
// checks its forward on every backend, its gradient against autograd and by finite differences,
// and its kernel and builder entries (DEVELOPERS.md, "How to add an activation").
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "ops/unary.h"

namespace dw::ops {

// A float attribute of the op and the constant it sets. `fallback` is the default used only
// where libonnx has no schema for the op (ops newer than its opsets, recurrent-cell activations);
// otherwise the schema's default applies, and the table repeats none.
struct UnaryAttr {
  const char* name = nullptr;
  float UnaryParams::*slot = nullptr;
  float fallback = 0;
  bool hasFallback = false;
};

// oneDNN's eltwise algorithms, named here so that this table needs no oneDNN header
// (engine/onednn maps them).
enum class Eltwise : uint8_t {
  kNone,
  kRelu,
  kElu,
  kLogistic,
  kTanh,
  kExp,
  kLog,
  kAbs,
  kSqrt,
  kLinear,
  kPow,
  kHardswish,
  kSoftRelu,
  kMish,
  kGeluErf,
  kGeluTanh,
  kSwish,
  kClip
};
// The oneDNN call computing the op: its algorithm and (alpha, beta); with alphaFromParam
// (betaFromParam), alpha (beta) is the op's constant of that name.
struct EltwiseCall {
  Eltwise alg = Eltwise::kNone;
  float alpha = 0, beta = 0;
  bool alphaFromParam = false, betaFromParam = false;
};

// A string attribute that picks between functions (Gelu's approximate = "none" | "tanh"), each
// with its oneDNN call; the first choice is the default.
struct UnaryChoice {
  const char* value = nullptr;
  UnaryFn fn = UnaryFn::kCount;
  EltwiseCall onednn{};
};

// Where integer inputs are accepted: computed in their own type, or through double.
enum class Integers : uint8_t { kNo, kNative, kViaDouble };

struct UnaryOp {
  const char* name;  // ONNX op type; for recurrent-only rows, the activation's name
  UnaryFn fn;
  int since;  // first ai.onnx opset; 0 for recurrent-cell activations that are not ops
  std::array<UnaryAttr, 2> attrs{};
  bool gradient = false;  // autodiff differentiates it through UnaryGrad
  EltwiseCall onednn{};
  Integers integers = Integers::kNo;
  bool rnnActivation = false;  // usable in RNN/GRU/LSTM `activations`
  bool postOp = false;         // fused into the Conv/Gemm/MatMul before it
  const char* choiceAttr = nullptr;
  std::array<UnaryChoice, 2> choices{};
  // The op has kernels and a gradient builder of its own (Clip, whose bounds are inputs); the
  // row gives its maths to the fusion pass.
  bool ownKernels = false;

  bool isOp() const { return since > 0; }
  // The table's generic kernels run it.
  bool tableKernels() const { return isOp() && !ownKernels; }
};

std::span<const UnaryOp> unaryOps();
// The row of ONNX op `name` (not the recurrent-only rows), or nullptr.
const UnaryOp* findUnaryOp(std::string_view name);
// The row of a recurrent-cell activation, matched without regard to case, or nullptr.
const UnaryOp* findRnnActivation(std::string_view name);

}  // namespace dw::ops
