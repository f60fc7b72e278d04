// Internal: where ONNX Slice reads, shared by Slice and SliceGrad in the reference table (kernels/
// shape_ops.cpp, kernels/data_movement_grad.cpp) and on cuda (cuda/tensor_kernels.cpp).
#pragma once

#include <vector>

#include "engine/kernels/common.h"

namespace dw::engine {

struct SlicePlan {
  Shape out;                     // the slice's shape
  int64_t base = 0;              // element offset of its first element in the input
  std::vector<int64_t> strides;  // input elements per step along each output axis (may be < 0)
};

// starts/ends/axes/steps as ONNX gives them (axes empty: 0, 1, ...; steps empty: all 1):
// negative indices count from the end, and out-of-range ones clamp to the axis.
Result<SlicePlan> planSlice(const Shape& x, const std::vector<int64_t>& starts,
                            const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                            std::vector<int64_t> steps);

}  // namespace dw::engine
