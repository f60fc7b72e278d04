// Dropout's draws in training graphs (DropoutTraining), for the cpu and cuda kernels alike: each
// element's fate is a hash of the call's key and the element's index in the global batch, so
// both backends drop the same units, a data-parallel process draws for its slice what one
// process draws for those samples, and a resumed run draws what an uninterrupted one would.
#pragma once

#include <cstdint>

#include "ops/unary.h"  // DW_HOST_DEVICE

namespace dw::ops {

// splitmix64's finalizer: every input bit affects every output bit.
DW_HOST_DEVICE inline uint64_t splitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of one call: the node's seed, the trainer's step and the call's number within the
// step (a node inside a Loop runs more than once).
inline uint64_t dropoutKey(uint64_t seed, int64_t step, int64_t call) {
  return splitMix64(splitMix64(seed ^ 0xD1B54A32D192ED03ull) ^ static_cast<uint64_t>(step)) ^
         splitMix64(static_cast<uint64_t>(call) + 0x8CB92BA72F3D8DD7ull);
}

// A DropoutTraining node's calls under the trainer, on either backend: each call's key and the
// global index of its first element. The call count restarts with every step (a node inside a
// Loop is called more than once a step).
class DropoutCalls {
 public:
  struct Draw {
    uint64_t key, first;
  };
  // A call in trainer step `step` on x of `size` elements over `samples` samples, the first of
  // them sample `sampleOffset` of the global batch.
  Draw next(uint64_t seed, int64_t step, int64_t sampleOffset, int64_t size, int64_t samples) {
    if (step != step_) step_ = step, calls_ = 0;
    const int64_t perSample = samples > 0 ? size / samples : 0;
    return {dropoutKey(seed, step_, calls_++), static_cast<uint64_t>(sampleOffset * perSample)};
  }

 private:
  int64_t step_ = -1, calls_ = 0;
};

// Whether element `index` of the global batch survives: a uniform draw in [0, 1) at `ratio` or
// above.
DW_HOST_DEVICE inline bool dropoutKeeps(uint64_t key, uint64_t index, double ratio) {
  return static_cast<double>(splitMix64(key + index * 0x9E3779B97F4A7C15ull) >> 11) /
             9007199254740992.0 >=
         ratio;
}

}  // namespace dw::ops
