// Elementwise functions on float32 buffers in explicit AVX-512, for the places where oneDNN's
// own are the bottleneck: SiLU (x * sigmoid(a x)) after EfficientNet's convolutions, the
// sigmoid of its squeeze-excitation products, the softmax of attention scores, and
// matrix-vector products. Each only where vectorMathAvailable() (kernels/common.h).
#pragma once

#include <cstdint>

#include "engine/kernels/common.h"  // forThreadRanges, vectorMathAvailable

namespace dw::engine::onednn {

// v[i] = v[i] * sigmoid(alpha * v[i]) over n values, in place, on the session's OpenMP threads
// when n is large. The exponential is ops/unary.h's expArith (range reduction, a degree-7
// Taylor polynomial), the reciprocal rcp14 with one Newton step: within 4e-7 relative of the
// exact function.
// Only where vectorMathAvailable().
void swishInPlace(float* v, int64_t n, float alpha);

// swishInPlace over `rows` rows of n values, `ld` floats apart, on the calling thread (a
// thread's channels of an image, one pixel's at a time). Only where vectorMathAvailable().
void swishRows(float* v, int64_t rows, int64_t n, int64_t ld, float alpha);

// v[i] = 1 / (1 + e^-v[i]) in place, as ops/unary.h's sigmoid and with swishInPlace's
// exponential and reciprocal; threaded like it. Only where vectorMathAvailable().
void sigmoidInPlace(float* v, int64_t n);

// One batch row of an LSTM step over w units, on the calling thread, with ONNX's default
// activations (sigmoid, tanh, tanh) and its gate order i, o, f, c: gate q's pre-activation is
// a[q lda + j] + x[q ldx + j] (+ bias[q ldb + j]), peepholes (i, o, f at peep + 0, ldp, 2 ldp)
// where peep is given; c[j] is read and updated, h[j] and y[j] (where y is given) written.
// One pass in registers, where the cell's elementwise loops took ten passes over a few vectors
// and two copies (the zoo's LSTM on 2 threads: 0.555 -> 0.519 ms at batch 8, 0.173 -> 0.170 at
// batch 1). sigmoid as sigmoidInPlace, tanh as ops/unary.h's (within 4e-7 relative).
// Only where vectorMathAvailable().
void lstmCell(const float* a, int64_t lda, const float* x, int64_t ldx, const float* bias,
              int64_t ldb, const float* peep, int64_t ldp, float* c, float* h, float* y, int64_t w);

// y[r] = the maximum (`max`) or minimum of row r of x ([rows, n], n >= 1), NaN where the row has
// a NaN, on the OpenMP threads when there is enough work.
void rowExtrema(const float* x, float* y, int64_t rows, int64_t n, bool max);

// Softmax along rows: y[r, :] = exp(x[r, :] - max) / sum, over `rows` rows of `n` values
// (in place allowed), on the OpenMP threads when there is enough work. The same exponential
// as swishInPlace; sums in float32, a row at a time. Only where vectorMathAvailable().
void softmaxRows(const float* x, float* y, int64_t rows, int64_t n);

// y[n] = a . B[n, :] (+ bias[n]) for the rows of B ([N, K], row-major): a matrix-vector
// product, the classifier of a batch-1 CNN (Gemm with transB). Row blocks on the OpenMP
// threads. Only where vectorMathAvailable().
void rowDots(const float* a, const float* B, int64_t N, int64_t K, const float* bias, float* y);

}  // namespace dw::engine::onednn
