#include "ops/reduce_table.h"

namespace dw::ops {

namespace {

using F = ReduceFn;
using A = ReduceAlg;

// One row per op reads as a table, which clang-format would spread over many lines.
// clang-format off
const ReduceOp kReduceOps[] = {
    {.name = "ReduceSum", .fn = F::kSum, .axesInputSince = 13, .onednn = A::kSum, .cuda = true},
    {.name = "ReduceMean", .fn = F::kMean, .axesInputSince = 18, .onednn = A::kMean, .cuda = true},
    {.name = "ReduceMax", .fn = F::kMax, .axesInputSince = 18, .onednn = A::kMax, .cuda = true},
    {.name = "ReduceMin", .fn = F::kMin, .axesInputSince = 18, .onednn = A::kMin, .cuda = true},
    {.name = "ReduceProd", .fn = F::kProd, .axesInputSince = 18, .onednn = A::kMul},
    {.name = "ReduceL1", .fn = F::kL1, .axesInputSince = 18, .onednn = A::kNormLpSum, .p = 1,
     .cuda = true},
    {.name = "ReduceL2", .fn = F::kL2, .axesInputSince = 18, .onednn = A::kNormLpSum, .p = 2,
     .cuda = true},
    {.name = "ReduceLogSum", .fn = F::kLogSum, .axesInputSince = 18},
    {.name = "ReduceLogSumExp", .fn = F::kLogSumExp, .axesInputSince = 18, .cuda = true},
    {.name = "ReduceSumSquare", .fn = F::kSumSquare, .axesInputSince = 18,
     .onednn = A::kNormLpPowerPSum, .p = 2, .cuda = true},
};
// clang-format on

}  // namespace

std::span<const ReduceOp> reduceOps() {
  return kReduceOps;
}

const ReduceOp* findReduceOp(std::string_view name) {
  for (const auto& op : kReduceOps)
    if (name == op.name) return &op;
  return nullptr;
}

}  // namespace dw::ops
