// The Reduce* ops, one row each: the function, the opset from which their axes come as an input
// rather than an attribute, oneDNN's algorithm (and norm order) where it has one, whether the
// cuda table runs it, and whether autodiff differentiates it (through ReduceGrad). The host,
// oneDNN and cuda kernels, the gradient builders and the grad domain's op list read it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ops/reduce.h"

namespace dw::ops {

// oneDNN's reduction algorithms, named here so that this table needs no oneDNN header.
enum class ReduceAlg : uint8_t {
  kNone,
  kSum,
  kMean,
  kMax,
  kMin,
  kMul,
  kNormLpSum,
  kNormLpPowerPSum
};

struct ReduceOp {
  const char* name;
  ReduceFn fn;
  int axesInputSince;  // the first opset whose axes are input 1
  ReduceAlg onednn = ReduceAlg::kNone;
  float p = 0;  // the norm order of the Lp algorithms
  bool cuda = false;
  bool gradient = true;

  bool axesAsInput(int opset) const { return opset >= axesInputSince; }
};

std::span<const ReduceOp> reduceOps();
const ReduceOp* findReduceOp(std::string_view name);

}  // namespace dw::ops
