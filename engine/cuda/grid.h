// Internal to engine/cuda's device code: launch geometry the .cu files share.
#pragma once

#include <cstdint>

namespace dw::engine::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any GPU, at least one.
inline int blocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

}  // namespace dw::engine::cuda
