#include "ops/binary_table.h"

namespace dw::ops {

namespace {

using F = BinaryFn;
using A = BinaryAlg;

// One row per op reads as a table, which clang-format would spread over many lines.
// clang-format off
const BinaryOp kBinaryOps[] = {
    {.name = "Add", .fn = F::kAdd, .since = 1, .onednn = A::kAdd, .cuda = true},
    {.name = "Sub", .fn = F::kSub, .since = 1, .onednn = A::kSub, .cuda = true},
    {.name = "Mul", .fn = F::kMul, .since = 1, .onednn = A::kMul, .cuda = true},
    {.name = "Div", .fn = F::kDiv, .since = 1, .onednn = A::kDiv, .cuda = true},
    {.name = "Pow", .fn = F::kPow, .since = 1, .cuda = true},
    {.name = "Mod", .fn = F::kMod, .since = 10, .choiceAttr = "fmod",
     .choices = {{{"0", F::kMod}, {"1", F::kFmod}}}},
    {.name = "And", .fn = F::kAnd, .since = 1},
    {.name = "Or", .fn = F::kOr, .since = 1},
    {.name = "Xor", .fn = F::kXor, .since = 1},
    {.name = "Equal", .fn = F::kEqual, .since = 1, .cuda = true},
    {.name = "Less", .fn = F::kLess, .since = 1, .cuda = true},
    {.name = "Greater", .fn = F::kGreater, .since = 1, .cuda = true},
    {.name = "LessOrEqual", .fn = F::kLessEqual, .since = 12, .cuda = true},
    {.name = "GreaterOrEqual", .fn = F::kGreaterEqual, .since = 12, .cuda = true},
    {.name = "BitShift", .fn = F::kShiftLeft, .since = 11, .choiceAttr = "direction",
     .choices = {{{"LEFT", F::kShiftLeft}, {"RIGHT", F::kShiftRight}}}},
    {.name = "BitwiseAnd", .fn = F::kBitAnd, .since = 18},
    {.name = "BitwiseOr", .fn = F::kBitOr, .since = 18},
    {.name = "BitwiseXor", .fn = F::kBitXor, .since = 18},
};
// clang-format on

}  // namespace

std::span<const BinaryOp> binaryOps() { return kBinaryOps; }

const BinaryOp* findBinaryOp(std::string_view name) {
  for (const auto& op : kBinaryOps)
    if (name == op.name) return &op;
  return nullptr;
}

}  // namespace dw::ops
