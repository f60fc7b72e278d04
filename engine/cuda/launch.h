// Internal to engine/cuda: the device kernels' launchers (defined in the .cu files), on plain
// pointers and sizes, so that the kernel classes (kernels.cpp) need no CUDA compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "engine/training/optimizers.h"
#include "ops/binary.h"
#include "ops/optimizer.h"
#include "ops/reduce.h"
#include "ops/unary.h"

namespace dw::engine::cuda {

constexpr int kMaxRank = 8;
// A tensor's dimensions and the strides (in elements) its reader walks them with; a stride of 0
// broadcasts that dimension.
struct Strided {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

// Drops size-1 dimensions and merges neighbours that every operand walks contiguously together
// (stride[d-1] == stride[d] * dims[d], broadcast dimensions included), so that kernels divide
// less per element. The operands share their dims (a kernel's output shape).
inline void coalesce(std::initializer_list<Strided*> operands) {
  const Strided& first = **operands.begin();
  const int rank = first.rank;
  int r = 0;
  for (int d = 0; d < rank; ++d) {
    if (first.dims[d] == 1) continue;
    bool merge = r > 0;
    for (const Strided* o : operands)
      merge = merge && o->strides[r - 1] == o->strides[d] * o->dims[d];
    for (Strided* o : operands) {
      if (merge) {
        o->dims[r - 1] *= o->dims[d];
        o->strides[r - 1] = o->strides[d];
      } else {
        o->dims[r] = o->dims[d];
        o->strides[r] = o->strides[d];
      }
    }
    if (!merge) ++r;
  }
  for (Strided* o : operands) o->rank = r;
}

// Element types the launchers take: float, int64, int32, uint8 (bool).
enum class ElemType : int { kFloat, kInt64, kInt32, kUInt8, kDouble };

// y = f(x) for a function of ops/unary.h.
void launchUnary(ops::UnaryFn fn, const ops::UnaryParams& p, const float* x, float* y, int64_t n,
                 cudaStream_t s);
// dx = dy * f'(x), given x and y = f(x).
void launchUnaryGrad(ops::UnaryFn fn, const ops::UnaryParams& p, const float* dy, const float* x,
                     const float* y, float* dx, int64_t n, cudaStream_t s);
// out[i] = op(a[ia], b[ib]) over `out`'s shape; a and b carry broadcast strides. Arithmetic ops
// write `t`, comparisons write uint8 (bool).
void launchBinary(ops::BinaryFn fn, ElemType t, const void* a, const Strided& as, const void* b,
                  const Strided& bs, void* out, int64_t n, cudaStream_t s);
// out (contiguous, `src.dims`) = src walked with its strides: transpose, expand, broadcast copy.
void launchStridedCopy(const void* src, const Strided& ss, void* out, int64_t n, int elemBytes,
                       cudaStream_t s);
// out at `os`'s strided positions (distinct) = src, contiguous over `os.dims`: a slice's gradient.
void launchStridedScatter(const float* src, const Strided& os, float* out, int64_t n,
                          cudaStream_t s);
void launchCast(ElemType from, const void* x, ElemType to, void* y, int64_t n, cudaStream_t s);
// bf16 copies of float x (rounded to nearest even), and float copies of bf16 x: the operands and
// results of the products that precision bf16 runs on tensor cores.
void launchToBf16(const float* x, void* y, int64_t n, cudaStream_t s);
void launchFromBf16(const void* x, float* y, int64_t n, cudaStream_t s);
void launchWhere(const uint8_t* c, Strided cs, const float* a, Strided as, const float* b,
                 Strided bs, float* out, int64_t n, cudaStream_t s);

// Reductions of float `x` to `outer` outputs: output o reads the `inner` elements at
// base(o) + offset(r), base from `kept` (dims and strides of the kept axes, in output order) and
// offset from `reduced`. Mean divides by `inner`; SumSquare sums x*x; Max/Min.
// The reductions' functions (ops/reduce_table.h; the launcher takes those the cuda table marks).
using ReduceOp = ops::ReduceFn;
void launchReduce(ReduceOp op, const float* x, Strided kept, Strided reduced, float* y,
                  int64_t outer, int64_t inner, cudaStream_t s);
// ArgMax/ArgMin along one axis of x viewed as [outer, axis, inner]; writes int64.
void launchArgExtreme(bool max, bool selectLast, const float* x, int64_t outer, int64_t axis,
                      int64_t inner, int64_t* y, cudaStream_t s);

// Softmax cross-entropy on scores [n, c, d] (d = product of trailing dims) and labels (int64 or
// int32) [n, d]: log_prob and the per-sample loss, 0 (and excluded) where label == ignore.
// A label outside [0, c) (and not `ignore`) gets a NaN loss and is written to bad[0], which
// must start at -1 (which of several bad labels lands there is unspecified).
void launchSoftmaxCrossEntropy(const float* x, const void* labels, bool labels64, int64_t n,
                               int64_t c, int64_t d, int64_t ignore, bool hasIgnore, float* logProb,
                               float* loss, int64_t* bad, cudaStream_t s);
// dx = scale[s] * (exp(logProb) - onehot(label)), scale[s] = dl[s] (reduction none) or
// dl[0] * `factor` (mean: factor = 1 / count, sum: 1), 0 where ignored.
void launchSoftmaxCrossEntropyGrad(const float* dl, bool perSample, float factor,
                                   const float* logProb, const void* labels, bool labels64,
                                   int64_t n, int64_t c, int64_t d, int64_t ignore, bool hasIgnore,
                                   float* dx, cudaStream_t s);
// Number of labels that are not `ignore`, as a float on the device.
void launchCountNotIgnored(const void* labels, bool labels64, int64_t n, int64_t ignore,
                           float* count, cudaStream_t s);
// loss[0] = sum(l) (mean: / count[0] when count is given, else / n).
void launchLossReduce(const float* l, int64_t n, bool mean, const float* count, float* out,
                      cudaStream_t s);

// ---- Softmax, layer normalization and Gather (tensor_ops.cu), on tensors viewed as [outer, len,
// inner] ---- Softmax (or LogSoftmax) of x over the middle axis.
void launchSoftmax(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, bool log,
                   cudaStream_t s);
// Softmax: dx = y * (dy - sum(dy * y)); LogSoftmax: dx = dy - exp(y) * sum(dy).
void launchSoftmaxGrad(const float* dy, const float* y, float* dx, int64_t outer, int64_t len,
                       int64_t inner, bool log, cudaStream_t s);
// y = (x - mean) / sqrt(var + eps) * scale + bias over each row of `len` (bias may be null);
// mean and invStdDev (one per row) are written where not null.
void launchLayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                     float* invStdDev, int64_t rows, int64_t len, float eps, cudaStream_t s);
// LayerNormalization's dX (where dx is not null) from the forward's per-row mean and invStdDev,
// and dy * xhat into `prod` (where not null) for dScale.
void launchLayerNormGrad(const float* dy, const float* x, const float* scale, const float* mean,
                         const float* invStdDev, float* dx, float* prod, int64_t rows, int64_t len,
                         cudaStream_t s);
// out [outer, count, inner] = data [outer, len, inner] at rows idx[0..count), each in [0, len).
// Elements of 1, 4 or 8 bytes.
void launchGather(const void* data, int elemBytes, const int64_t* idx, void* out, int64_t outer,
                  int64_t len, int64_t count, int64_t inner, cudaStream_t s);
// dx [outer, len, inner]: row r sums dy [outer, count, inner] at positions[rowStart[r] ..
// rowStart[r + 1]), in order (deterministic).
void launchGatherGrad(const float* dy, const int64_t* rowStart, const int64_t* positions, float* dx,
                      int64_t outer, int64_t len, int64_t count, int64_t inner, cudaStream_t s);

// ---- Pooling and batch normalization (nn.cu) ----
// 2-D max pooling of x [n*c, h, w] into y [n*c, oh, ow]; ties go to the first maximum in
// row-major window order, as on the cpu.
struct Pool2d {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;  // pads: leading (top, left)
  int64_t pb = 0, pr = 0;                                // trailing pads (bottom, right)
  bool includePad = false;  // average pooling: padding counts in the divisor
};
void launchMaxPool(const Pool2d& p, const float* x, float* y, cudaStream_t s);
// dx (overwritten) = dy routed to each window's first maximum; no atomics, so repeatable. With
// `relu` (a fused Relu gradient: x is the Relu's output) nothing flows where x <= 0.
void launchMaxPoolGrad(const Pool2d& p, const float* x, const float* dy, bool relu, float* dx,
                       cudaStream_t s);
// 2-D average pooling, ONNX's divisor: the window's elements inside the input, or inside the
// padded input where includePad (windows that ceil_mode runs past the padding are cut there).
void launchAvgPool(const Pool2d& p, const float* x, float* y, cudaStream_t s);
// dx (overwritten) = each window's dy / divisor, summed over the windows that hold an element.
void launchAvgPoolGrad(const Pool2d& p, const float* dy, float* dx, cudaStream_t s);
// dx[i] = dy[i / spatial] / spatial: the gradient of a global average over `spatial` elements.
void launchSpreadMean(const float* dy, int64_t planes, int64_t spatial, float* dx, cudaStream_t s);
// How many blocks share one channel's reduction, each taking a run of samples: enough blocks in
// all to fill the GPU, each with a few thousand elements at least. Partial results per
// (channel, slice) are combined in a fixed order, so results repeat bit for bit.
inline int64_t channelSlices(int64_t c, int64_t n, int64_t hw) {
  int64_t s = (1024 + c - 1) / (c > 0 ? c : 1);
  const int64_t byWork = n * hw / 2048 > 1 ? n * hw / 2048 : 1;
  if (s > byWork) s = byWork;
  if (s > n) s = n;
  return s < 1 ? 1 : s;
}
// Per-channel batch statistics of x [n, c, hw]: mean and population variance. `partials`
// holds 3 * c * channelSlices(c, n, hw) floats.
void launchChannelStats(const float* x, int64_t n, int64_t c, int64_t hw, float* partials,
                        float* mean, float* var, cudaStream_t s);
// y = scale * (x - mean) / sqrt(var + eps) + b, per channel, rectified with `relu` (a Relu fused
// into training's normalization without a pooling).
void launchBatchNormApply(const float* x, int64_t n, int64_t c, int64_t hw, const float* mean,
                          const float* var, const float* scale, const float* b, float eps,
                          bool relu, float* y, cudaStream_t s);
// running = running * momentum + batch * (1 - momentum), for mean and variance.
void launchRunningStats(const float* inMean, const float* inVar, const float* mean,
                        const float* var, int64_t c, float momentum, float* outMean, float* outVar,
                        cudaStream_t s);
// dB = sum dy, dScale = sum dy * xhat over [n, hw] per channel. `partials`: 2 * c *
// channelSlices(c, n, hw) floats.
void launchBatchNormGradSums(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                             const float* mean, const float* var, float eps, float* partials,
                             float* dScale, float* dB, cudaStream_t s);
// dX: training (batch statistics) or global (constant statistics: dy * scale * invstd).
void launchBatchNormGradInput(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                              const float* mean, const float* var, const float* scale, float eps,
                              const float* dScale, const float* dB, bool global, float* dx,
                              cudaStream_t s);

// The training CNN block BatchNormalization -> Relu -> MaxPool as one node (fusion/
// training_chains.cpp), pooling window `p` over x [n, c, p.h, p.w]: y [n, c, p.oh, p.ow] is the
// pooled, normalised (and, with relu, rectified) x, and `winners` each window's winner as
// engine/fusion/fused.h encodes it (kNoWinner, its value, is checked against it there).
constexpr uint8_t kNoWinner = 255;
void launchBatchNormMaxPool(const float* x, const Pool2d& p, int64_t c, const float* mean,
                            const float* var, const float* scale, const float* b, float eps,
                            bool relu, float* y, uint8_t* winners, cudaStream_t s);
// Its gradient from the pooled dY and the winners: dScale and dB as launchBatchNormGradSums
// (`partials`: 2 * c * channelSlices(c, n, p.oh * p.ow) floats), then dX (training statistics).
void launchBatchNormMaxPoolGrad(const float* dy, const uint8_t* winners, const float* x,
                                const Pool2d& p, int64_t c, const float* mean, const float* var,
                                const float* scale, float eps, float* partials, float* dScale,
                                float* dB, float* dx, cudaStream_t s);

// What a convolution applies to its output in place, per channel: y [n, c, hw] =
// act(scale[c] * y + shift[c]). A null scale is 1, a null shift 0; fn kCount: no activation.
void launchChannelEpilogue(float* y, int64_t n, int64_t c, int64_t hw, const float* scale,
                           const float* shift, ops::UnaryFn fn, const ops::UnaryParams& p,
                           cudaStream_t s);
// An inference BatchNormalization folded into the convolution before it, as that epilogue's
// scale = gamma / sqrt(var + eps) and shift = (bias - mean) * scale + beta (null bias: 0).
void launchBatchNormFold(const float* gamma, const float* beta, const float* mean, const float* var,
                         const float* bias, float eps, int64_t c, float* scale, float* shift,
                         cudaStream_t s);
// out[c] = sum of x [n, c, hw] over n and hw (a convolution's bias gradient). `partials`:
// c * channelSlices(c, n, hw) floats.
void launchChannelSum(const float* x, int64_t n, int64_t c, int64_t hw, float* partials, float* out,
                      cudaStream_t s);

// ---- Random numbers (random.cu) ----
// Dropout in training: element i is kept where ops::dropoutKeeps(key, first + i, ratio), and
// y = x * scale there, 0 elsewhere; mask is uint8 (bool).
void launchDropout(const float* x, int64_t n, uint64_t key, uint64_t first, double ratio,
                   float scale, float* y, uint8_t* mask, cudaStream_t s);
// dx = mask ? dy * scale : 0.
void launchDropoutGrad(const float* dy, const uint8_t* mask, int64_t n, float scale, float* dx,
                       cudaStream_t s);

// ---- Optimizers (engine/training/optimizers.h describes the rules) ----
// The optimizer step's kernels take up to kListed tensors per launch (blockIdx.y picks one), so
// a step launches once per kListed weights instead of once per weight.
constexpr int kListed = 16;
// One launch's tensors: weight, gradient and up to three of the rule's state tensors, null
// where the rule or its options keep none (Adam: m, v, vmax; SGD: the momentum buffer;
// Adagrad: the sum of squares; RMSprop: square_avg, grad_avg, the momentum buffer).
struct UpdateList {
  float* w[kListed];
  float* g[kListed];
  float* s[3][kListed];
  int64_t n[kListed];
  int count = 0;
};
void launchAdam(const training::AdamScalars& a, const UpdateList& l, cudaStream_t s);
// SGD, Adagrad and RMSprop: ops/optimizer.h's rules.
void launchSgd(const ops::SgdScalars& k, const UpdateList& l, cudaStream_t s);
void launchAdagrad(const ops::AdagradScalars& k, const UpdateList& l, cudaStream_t s);
void launchRmsProp(const ops::RmsPropScalars& k, const UpdateList& l, cudaStream_t s);
// out[0] += sum |g|^p over the listed tensors (p = 2: squares; p = 0 stands for inf: max |g|).
// out must start at 0.
struct FloatList {
  const float* x[kListed];
  int64_t n[kListed];
  int count = 0;
};
void launchNormAccumulate(const FloatList& l, float p, float* out, cudaStream_t s);
void launchScale(float* x, int64_t n, float factor, cudaStream_t s);
// x *= scale[0] where `scale` lives in device memory.
void launchScaleByDevice(float* x, int64_t n, const float* scale, cudaStream_t s);
void launchAddInto(float* acc, const float* x, int64_t n, cudaStream_t s);

}  // namespace dw::engine::cuda
