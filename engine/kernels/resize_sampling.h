// Resize / Upsample sampling geometry, shared by the forward reference kernel (kernels/nn.cpp) and
// its gradient ResizeGrad (kernels/resize_grad.cpp), so that the backward scatters through
// exactly the taps the forward gathers from.
//
// Resize is separable: along each resampled axis, every output index j reads a few input
// indices with weights (its taps), or is outside the crop (tf_crop_and_resize) and takes the
// extrapolation value. The forward applies the axes in turn, 0 first; the backward applies the
// transposed taps, last axis first.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/kernel.h"

namespace dw::engine {

// The node's attributes, resolved for its op and opset.
struct ResizeSpec {
  int opset = 0;
  bool upsample = false;  // Upsample (opset 7-9) rather than Resize
  std::string mode, coord, nearest;
  float cubicA = -0.75f, extrapolation = 0;
  bool excludeOutside = false;
  std::vector<float> scalesAttr;  // Upsample before opset 9

  // An error names the attribute and value that is not supported.
  static Result<ResizeSpec> fromAttributes(const Attributes& a, const std::string& opType,
                                           int opset);
};

// One call's geometry: input and output shapes, per-axis scales and the roi.
struct ResizePlan {
  Shape in, out;
  std::vector<double> scales, roi;
  // Axes with equal sizes, scale 1 and no crop are copied unchanged.
  bool resamples(const ResizeSpec& spec, size_t d) const;
};

// Reads roi / scales / sizes (Upsample: scales) from the node's inputs, which start at
// `firstExtra` in ctx (the forward's input 1).
Result<ResizePlan> planResize(const ResizeSpec& spec, const Shape& in, const KernelContext& ctx,
                              size_t firstExtra);

struct ResizeAxisTaps {
  std::vector<std::vector<std::pair<int64_t, double>>> taps;  // per output index: (input, weight)
  std::vector<bool> outside;  // per output index: takes the extrapolation value
};

// The taps of axis d, as the ONNX reference implementation defines them.
Result<ResizeAxisTaps> resizeAxisTaps(const ResizeSpec& spec, const ResizePlan& plan, size_t d);

}  // namespace dw::engine
