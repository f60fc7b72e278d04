// Internal: the 2-D max pooling planes that the oneDNN gradient kernels run themselves
// (max_pool_planes.cpp): PoolGrad's dX, and the pooling fused into the batch normalization of
// training (batch_norm_training.cpp), which keeps each window's winner for its gradient. Both
// choose the same winner (the first maximum in scan order), so fused and unfused training agree
// bit for bit.
#pragma once

#include <cstdint>

#include "engine/fusion/fused.h"

namespace dw::engine::onednn {

// A 2-D max pooling window (explicit padding, no dilation) over h x w planes.
struct MaxPool2d {
  int64_t h = 0, w = 0, oh = 0, ow = 0, kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0;
  // The 2x2 / stride 2 window with every window inside the plane. ceil_mode's last, partial
  // window (a bottom or right padding) is not: the tiled loops would read and write a row or
  // column past the plane, into the next one.
  bool tiled2() const {
    return kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * oh <= h &&
           2 * ow <= w;
  }
};
// The winner of a window is stored as its row-major position in the window; kNoArg marks a
// window that passes no gradient (no element, or a fused Relu blocks it).
constexpr uint8_t kNoArg = fusion::kNoWinner;  // fused.h says how winners are kept

// Max pooling of one plane with the winners, choosing exactly as PoolGrad's maxPool2dBackward
// does from the same input (the first maximum in scan order) and writing the values that
// maxPoolPlane writes. With `relu` (the plane is a Relu's output) a window whose maximum is not
// positive gets kNoArg, as the fused Relu gradient there passes nothing.
void maxPoolArgPlane(const MaxPool2d& g, const float* in, bool relu, float* out, uint8_t* arg);

// The gradient of a max-pooled plane: dy goes to each window's winner. Written exactly as
// maxPool2dBackward writes it (assignments for the 2x2/2 window, zeros then sums otherwise).
void maxPoolArgScatter(const MaxPool2d& g, const float* dy, const uint8_t* arg, float* ds);

// dX of 2-D max pooling of one plane: each dY goes to the first maximum of its window
// (scanning rows, then columns, as oneDNN and PyTorch pick it). oneDNN would recompute a
// workspace with a forward pass and then run its plain-layout backward, both slow on NCHW;
// PoolGrad gives each thread whole (n, c) planes, so overlapping windows never race. With
// `relu` (a fused Relu gradient; x is the Relu's output) nothing flows where x <= 0.
void maxPoolBackwardPlane(const MaxPool2d& g, const float* xs, const float* gs, bool relu,
                          float* ds);

}  // namespace dw::engine::onednn
