// The mask of an AVX-512 loop's last, partial vector of floats, shared by the hand-written
// kernels of engine/onednn.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dw::engine::onednn {

// Lanes [0, n) of a 16-float vector: all of them from n = 16 up.
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

}  // namespace dw::engine::onednn
