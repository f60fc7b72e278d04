// Internal: pooling window geometry, shared by the reference pooling kernels (kernels/nn.cpp) and
// the Lp pooling kernels and their gradient (kernels/lp_pool.cpp).
#pragma once

#include <vector>

#include "engine/kernels/common.h"

namespace dw::engine {

// Explicit pads, auto_pad, ceil_mode, strides and dilations of a pooling node over an
// (N, C, spatial...) input.
struct PoolGeometry {
  std::vector<int64_t> kernel, strides, dilations, padL, padR, out;
};

Result<PoolGeometry> poolGeometry(const Attributes& a, const Shape& in,
                                  std::vector<int64_t> kernel);

}  // namespace dw::engine
