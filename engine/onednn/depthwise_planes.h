// A depthwise 2-D convolution (one input channel a group, one output channel each) between plain
// NCHW tensors, plane by plane in AVX-512, for where markNhwcChains leaves a depthwise
// convolution's tensors plain (ShuffleNet's branches). oneDNN's depthwise kernels want NHWC or
// nChw16c, and the reorders into and out of them took three times the convolution.
#pragma once

#include <cstdint>

namespace dw::engine::onednn {

struct DepthwisePlanes {
  int64_t planes = 0;  // images x channels
  int64_t c = 0;       // channels: plane p takes weights and bias p % c
  int64_t h = 0, w = 0, oh = 0, ow = 0, kh = 0, kw = 0, sh = 1, sw = 1, pt = 0, pl = 0;
};

// Whether depthwisePlanes computes this geometry: strides 1 or 2, windows up to 7 x 7, AVX-512.
bool depthwisePlanesFit(const DepthwisePlanes& g);

// y[p] = clamp(b[p % c] + the window of plane p of x weighted by w[p % c]) for every plane, zero
// padding outside the input; w is [C][KH][KW]; b may be null. Planes on the OpenMP threads.
void depthwisePlanes(const DepthwisePlanes& g, const float* x, const float* w, const float* b,
                     float lo, float hi, float* y);

}  // namespace dw::engine::onednn
