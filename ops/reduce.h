// The functions of the Reduce* ops (ops/reduce_table.h lists the ops), for code nvcc compiles
// too.
#pragma once

#include <cstdint>

namespace dw::ops {

enum class ReduceFn : uint8_t {
  kSum,
  kMean,
  kMax,
  kMin,
  kProd,
  kL1,
  kL2,
  kLogSum,
  kLogSumExp,
  kSumSquare
};

}  // namespace dw::ops
