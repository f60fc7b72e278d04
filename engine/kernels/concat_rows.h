// The copy behind Concat, for the kernels that join tensors in layouts of their own.
#pragma once

#include <vector>

#include "engine/tensor.h"
#include "nodes/status.h"

namespace dw::engine {

// Joins `ins` along `axis` into `y` (allocated): each of `outer` rows of y holds every input's
// dim(axis) * inner elements in input order. Plain tensors take outer and inner from the axis;
// an NHWC one joined on its channels is outer = N*H*W rows of inner = 1. Threaded by equal byte
// shares of y, whichever rows they fall in.
Status concatRows(const std::vector<const Tensor*>& ins, int64_t axis, int64_t outer, int64_t inner,
                  Tensor& y);

}  // namespace dw::engine
