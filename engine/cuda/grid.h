// Internal to engine/cuda's device code: launch geometry the .cu files share.
#pragma once

#include <cstdint>

#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any GPU, at least one.
inline int blocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

#if defined(__CUDACC__)
// The offset of element i (counted row-major over s.dims) in a tensor walked with s.strides.
// One dimension needs no division; below 2^31, 32-bit divisions, a fraction of 64-bit's cost.
__device__ inline int64_t offsetOf(int64_t i, const Strided& s) {
  if (s.rank == 1) return i * s.strides[0];
  int64_t off = 0;
  if (i < (int64_t(1) << 31)) {
    uint32_t u = static_cast<uint32_t>(i);
    for (int d = s.rank - 1; d >= 0 && u != 0; --d) {
      if (s.dims[d] >= (int64_t(1) << 31)) return off + int64_t(u) * s.strides[d];  // u < dim
      const uint32_t dim = static_cast<uint32_t>(s.dims[d]);
      off += int64_t(u % dim) * s.strides[d];
      u /= dim;
    }
    return off;
  }
  for (int d = s.rank - 1; d >= 0; --d) {
    off += (i % s.dims[d]) * s.strides[d];
    i /= s.dims[d];
  }
  return off;
}
#endif

}  // namespace dw::engine::cuda
