// The per-element update rules of Adagrad and RMSprop (torch.optim's), written once for the
// host loops (engine/training/optimizers.cpp) and the cuda kernels (engine/cuda/reduce.cu), so
// the two accelerators take the same float steps in the same order.
#pragma once

#include <cmath>

#include "ops/unary.h"  // DW_HOST_DEVICE

namespace dw::ops {

// Products and sums rounded one at a time on the device too: nvcc would fuse a * b + c into one
// FMA (one rounding), which the host does not, and the two accelerators' weights would drift
// apart step by step.
DW_HOST_DEVICE inline float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DW_HOST_DEVICE inline float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// SGD: g += wd * w; the momentum buffer b = g on the first step, else momentum * b +
// (1 - dampening) * g; w -= lr * (nesterov ? g + momentum * b : b) (momentum 0: w -= lr * g).
struct SgdScalars {
  float lr, momentum, dampening, weightDecay;
  bool nesterov, firstStep;
};

struct AdagradScalars {
  float lr;  // already decayed: lr / (1 + (step - 1) * lr_decay)
  float eps, weightDecay;
};

// g += wd * w; sum += g^2; w -= lr * g / (sqrt(sum) + eps).
DW_HOST_DEVICE inline void adagradStep(const AdagradScalars& k, float& w, float g, float& sum) {
  if (k.weightDecay != 0) g = addRn(g, mulRn(k.weightDecay, w));
  sum = addRn(sum, mulRn(g, g));
  w = addRn(w, -(mulRn(k.lr, g) / addRn(sqrt(sum), k.eps)));
}

struct RmsPropScalars {
  float lr, alpha, eps, momentum, weightDecay;
};

// square_avg = alpha * square_avg + (1 - alpha) g^2; centered: grad_avg likewise, and the
// denominator uses square_avg - grad_avg^2; with momentum, buf = momentum * buf + g / denom and
// w -= lr * buf, else w -= lr * g / denom. gradAvg and buf are null when unused.
DW_HOST_DEVICE inline void rmspropStep(const RmsPropScalars& k, float& w, float g, float& sq,
                                       float* gradAvg, float* buf) {
  if (k.weightDecay != 0) g = addRn(g, mulRn(k.weightDecay, w));
  const float oma = 1.f - k.alpha;
  sq = addRn(mulRn(k.alpha, sq), mulRn(mulRn(oma, g), g));
  float avg;
  if (gradAvg) {
    *gradAvg = addRn(mulRn(k.alpha, *gradAvg), mulRn(oma, g));
    avg = addRn(sqrt(addRn(sq, -mulRn(*gradAvg, *gradAvg))), k.eps);
  } else {
    avg = addRn(sqrt(sq), k.eps);
  }
  if (buf) {
    *buf = addRn(mulRn(k.momentum, *buf), g / avg);
    w = addRn(w, -mulRn(k.lr, *buf));
  } else {
    w = addRn(w, -(mulRn(k.lr, g) / avg));
  }
}

}  // namespace dw::ops
