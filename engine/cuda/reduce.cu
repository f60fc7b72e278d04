// Reductions, ArgMax/ArgMin, softmax cross-entropy and the optimizers' update rules.
#include <cfloat>
#include <cstdint>

#include "engine/cuda/grid.h"
#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

namespace {

__device__ inline float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kMax:
      return fmaxf(a, b);
    case ReduceOp::kMin:
      return fminf(a, b);
    default:
      return a + b;
  }
}

__device__ inline float identityOf(ReduceOp op) {
  return op == ReduceOp::kMax ? -INFINITY : op == ReduceOp::kMin ? INFINITY : 0.f;
}

// One block per output element; its threads stride over the reduced elements, then combine in a
// fixed tree order, so a run gives the same bits every time.
__global__ void reduceKernel(ReduceOp op, const float* x, Strided kept, Strided reduced, float* y,
                             int64_t outer, int64_t inner) {
  __shared__ float part[kThreads];
  __shared__ float peak;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const int64_t base = offsetOf(o, kept);
    float m = -INFINITY;
    if (op == ReduceOp::kLogSumExp) {
      float mm = -INFINITY;
      for (int64_t r = threadIdx.x; r < inner; r += blockDim.x)
        mm = fmaxf(mm, x[base + offsetOf(r, reduced)]);
      part[threadIdx.x] = mm;
      __syncthreads();
      for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + w]);
        __syncthreads();
      }
      if (threadIdx.x == 0) peak = part[0];
      __syncthreads();
      m = peak;
    }
    float acc = identityOf(op);
    for (int64_t r = threadIdx.x; r < inner; r += blockDim.x) {
      float v = x[base + offsetOf(r, reduced)];
      switch (op) {
        case ReduceOp::kSumSquare:
        case ReduceOp::kL2:
          v = v * v;
          break;
        case ReduceOp::kL1:
          v = fabsf(v);
          break;
        case ReduceOp::kLogSumExp:
          v = isinf(m) ? 0.f : expf(v - m);
          break;
        default:
          break;
      }
      acc = combine(op, acc, v);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (threadIdx.x < w)
        part[threadIdx.x] = combine(op, part[threadIdx.x], part[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      float r = part[0];
      if (op == ReduceOp::kMean) r = inner ? r / static_cast<float>(inner) : NAN;
      if (op == ReduceOp::kL2) r = sqrtf(r);
      if (op == ReduceOp::kLogSumExp) r = isinf(m) ? m : m + logf(r);
      y[o] = r;
    }
    __syncthreads();
  }
}

__global__ void argKernel(bool max, bool last, const float* x, int64_t outer, int64_t axis,
                          int64_t inner, int64_t* y) {
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / inner, in = i % inner;
    const float* p = x + o * axis * inner + in;
    int64_t best = 0;
    float bv = p[0];
    for (int64_t k = 1; k < axis; ++k) {
      const float v = p[k * inner];
      const bool better = max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
      if (better) {
        bv = v;
        best = k;
      }
    }
    y[i] = best;
  }
}

__device__ inline int64_t labelAt(const void* labels, bool l64, int64_t i) {
  return l64 ? static_cast<const int64_t*>(labels)[i]
             : static_cast<int64_t>(static_cast<const int32_t*>(labels)[i]);
}

// One thread per (sample, position): c is the class count, usually small.
__global__ void sceKernel(const float* x, const void* labels, bool l64, int64_t n, int64_t c,
                          int64_t d, int64_t ignore, bool hasIgnore, float* lp, float* loss,
                          int64_t* bad) {
  const int64_t total = n * d;
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < total;
       s += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = s / d, j = s % d;
    const float* px = x + i * c * d + j;
    float m = -INFINITY;
    for (int64_t k = 0; k < c; ++k) m = fmaxf(m, px[k * d]);
    float sum = 0.f;
    for (int64_t k = 0; k < c; ++k) sum += expf(px[k * d] - m);
    const float lse = m + logf(sum);
    float* pl = lp + i * c * d + j;
    for (int64_t k = 0; k < c; ++k) pl[k * d] = px[k * d] - lse;
    const int64_t lab = labelAt(labels, l64, s);
    if (hasIgnore && lab == ignore) {
      loss[s] = 0.f;
    } else if (lab >= 0 && lab < c) {
      loss[s] = -pl[lab * d];
    } else {
      loss[s] = NAN;
      bad[0] = lab;
    }
  }
}

__global__ void sceGradKernel(const float* dl, bool perSample, float factor, const float* lp,
                              const void* labels, bool l64, int64_t n, int64_t c, int64_t d,
                              int64_t ignore, bool hasIgnore, float* dx) {
  const int64_t total = n * c * d;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % d, k = idx / d % c, i = idx / (c * d);
    const int64_t s = i * d + j;
    const int64_t lab = labelAt(labels, l64, s);
    float w = perSample ? dl[s] : dl[0] * factor;
    if (hasIgnore && lab == ignore) w = 0.f;
    dx[idx] = w == 0.f ? 0.f : w * (expf(lp[idx]) - (lab == k ? 1.f : 0.f));
  }
}

__global__ void countKernel(const void* labels, bool l64, int64_t n, int64_t ignore, float* out) {
  __shared__ float part[kThreads];
  float c = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += labelAt(labels, l64, i) != ignore;
  part[threadIdx.x] = c;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

__global__ void lossReduceKernel(const float* l, int64_t n, bool mean, const float* count,
                                 float* out) {
  __shared__ float part[kThreads];
  float c = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += l[i];
  part[threadIdx.x] = c;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[0] = mean ? part[0] / (count ? count[0] : static_cast<float>(n)) : part[0];
}

// The optimizer kernels: f(t, i) for each element i of listed tensor t = blockIdx.y.
template <class F>
__device__ void forListed(const UpdateList& l, F f) {
  const int t = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.n[t];
       i += int64_t(gridDim.x) * blockDim.x)
    f(t, i);
}

// PyTorch's order of float operations, as engine/training/optimizers.cpp (Step::run).
__global__ void adamKernel(training::AdamScalars a, UpdateList l) {
  forListed(l, [&](int t, int64_t i) {
    float *w = l.w[t], *g = l.g[t], *m = l.s[0][t], *v = l.s[1][t], *vmax = l.s[2][t];
    float wi = w[i], gi = g[i];
    if (a.preScale != 1.f) wi = __fmul_rn(wi, a.preScale);
    if (a.l2 != 0.f) gi = __fadd_rn(gi, __fmul_rn(a.l2, wi));
    const float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(1.f - a.b1, gi));
    const float vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(1.f - a.b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float den = vi;
    if (vmax) {
      den = fmaxf(vmax[i], vi);
      vmax[i] = den;
    }
    if (a.hf) {
      wi = __fsub_rn(wi, __fdiv_rn(__fmul_rn(a.stepSize, mi), __fadd_rn(__fsqrt_rn(den), a.eps)));
      if (a.postDecay != 0.f) wi = __fsub_rn(wi, __fmul_rn(a.postDecay, wi));
    } else {
      wi = __fsub_rn(wi, __fdiv_rn(__fmul_rn(a.stepSize, mi),
                                   __fadd_rn(__fmul_rn(__fsqrt_rn(den), a.invSbc2), a.eps)));
    }
    w[i] = wi;
    g[i] = gi;
  });
}

__global__ void sgdKernel(ops::SgdScalars k, UpdateList l) {
  const float damp = 1.f - k.dampening;
  forListed(l, [&](int t, int64_t i) {
    float *w = l.w[t], *g = l.g[t], *b = l.s[0][t];
    float gi = g[i];
    if (k.weightDecay != 0.f) gi = __fadd_rn(gi, __fmul_rn(k.weightDecay, w[i]));
    float step = gi;
    if (k.momentum != 0.f) {
      const float bi =
          k.firstStep ? gi : __fadd_rn(__fmul_rn(k.momentum, b[i]), __fmul_rn(damp, gi));
      b[i] = bi;
      step = k.nesterov ? __fadd_rn(gi, __fmul_rn(k.momentum, bi)) : bi;
    }
    w[i] = __fsub_rn(w[i], __fmul_rn(k.lr, step));
    g[i] = gi;
  });
}

__global__ void adagradKernel(ops::AdagradScalars k, UpdateList l) {
  forListed(l, [&](int t, int64_t i) { ops::adagradStep(k, l.w[t][i], l.g[t][i], l.s[0][t][i]); });
}

__global__ void rmspropKernel(ops::RmsPropScalars k, UpdateList l) {
  forListed(l, [&](int t, int64_t i) {
    float *gradAvg = l.s[1][t], *buf = l.s[2][t];
    ops::rmspropStep(k, l.w[t][i], l.g[t][i], l.s[0][t][i], gradAvg ? gradAvg + i : nullptr,
                     buf ? buf + i : nullptr);
  });
}

__global__ void normKernel(FloatList l, float p, float* out) {
  __shared__ float part[kThreads];
  const float* g = l.x[blockIdx.y];
  const int64_t n = l.n[blockIdx.y];
  float acc = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float a = fabsf(g[i]);
    acc = p == 0.f ? fmaxf(acc, a) : p == 2.f ? acc + a * a : p == 1.f ? acc + a : acc + powf(a, p);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] = p == 0.f ? fmaxf(part[threadIdx.x], part[threadIdx.x + w])
                                   : part[threadIdx.x] + part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (p == 0.f)
      atomicMax(reinterpret_cast<int*>(out), __float_as_int(part[0]));  // non-negative floats
    else
      atomicAdd(out, part[0]);
  }
}

__global__ void scaleKernel(float* x, int64_t n, float f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= f;
}

__global__ void scaleDevKernel(float* x, int64_t n, const float* f) {
  const float s = f[0];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= s;
}

__global__ void addIntoKernel(float* acc, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    acc[i] += x[i];
}

}  // namespace

void launchReduce(ReduceOp op, const float* x, Strided kept, Strided reduced, float* y,
                  int64_t outer, int64_t inner, cudaStream_t s) {
  if (outer <= 0) return;
  coalesce({&kept});
  coalesce({&reduced});
  const int blocks = static_cast<int>(outer < 65535 * 16 ? outer : 65535 * 16);
  // Few elements per output: fewer threads per block, so small reductions don't idle warps.
  int threads = kThreads;
  while (threads > 32 && threads / 2 >= inner) threads /= 2;
  reduceKernel<<<blocks, threads, 0, s>>>(op, x, kept, reduced, y, outer, inner);
}

void launchArgExtreme(bool max, bool selectLast, const float* x, int64_t outer, int64_t axis,
                      int64_t inner, int64_t* y, cudaStream_t s) {
  const int64_t n = outer * inner;
  if (n > 0) argKernel<<<blocksFor(n), kThreads, 0, s>>>(max, selectLast, x, outer, axis, inner, y);
}

void launchSoftmaxCrossEntropy(const float* x, const void* labels, bool labels64, int64_t n,
                               int64_t c, int64_t d, int64_t ignore, bool hasIgnore, float* logProb,
                               float* loss, int64_t* bad, cudaStream_t s) {
  if (n * d > 0)
    sceKernel<<<blocksFor(n * d), kThreads, 0, s>>>(x, labels, labels64, n, c, d, ignore, hasIgnore,
                                                    logProb, loss, bad);
}

void launchSoftmaxCrossEntropyGrad(const float* dl, bool perSample, float factor,
                                   const float* logProb, const void* labels, bool labels64,
                                   int64_t n, int64_t c, int64_t d, int64_t ignore, bool hasIgnore,
                                   float* dx, cudaStream_t s) {
  const int64_t total = n * c * d;
  if (total > 0)
    sceGradKernel<<<blocksFor(total), kThreads, 0, s>>>(dl, perSample, factor, logProb, labels,
                                                        labels64, n, c, d, ignore, hasIgnore, dx);
}

void launchCountNotIgnored(const void* labels, bool labels64, int64_t n, int64_t ignore,
                           float* count, cudaStream_t s) {
  countKernel<<<1, kThreads, 0, s>>>(labels, labels64, n, ignore, count);
}

void launchLossReduce(const float* l, int64_t n, bool mean, const float* count, float* out,
                      cudaStream_t s) {
  lossReduceKernel<<<1, kThreads, 0, s>>>(l, n, mean, count, out);
}

namespace {
// Blocks along x for the largest of `count` tensors (capped at `cap`), one row per tensor.
dim3 listGrid(const int64_t* n, int count, int cap) {
  int64_t most = 0;
  for (int i = 0; i < count; ++i) most = n[i] > most ? n[i] : most;
  const int bx = blocksFor(most);
  return dim3(static_cast<unsigned>(bx < cap ? bx : cap), static_cast<unsigned>(count));
}
}  // namespace

void launchAdam(const training::AdamScalars& a, const UpdateList& l, cudaStream_t s) {
  if (l.count > 0) adamKernel<<<listGrid(l.n, l.count, 65535), kThreads, 0, s>>>(a, l);
}

void launchSgd(const ops::SgdScalars& k, const UpdateList& l, cudaStream_t s) {
  if (l.count > 0) sgdKernel<<<listGrid(l.n, l.count, 65535), kThreads, 0, s>>>(k, l);
}

void launchAdagrad(const ops::AdagradScalars& k, const UpdateList& l, cudaStream_t s) {
  if (l.count > 0) adagradKernel<<<listGrid(l.n, l.count, 65535), kThreads, 0, s>>>(k, l);
}

void launchRmsProp(const ops::RmsPropScalars& k, const UpdateList& l, cudaStream_t s) {
  if (l.count > 0) rmspropKernel<<<listGrid(l.n, l.count, 65535), kThreads, 0, s>>>(k, l);
}

void launchNormAccumulate(const FloatList& l, float p, float* out, cudaStream_t s) {
  if (l.count > 0) normKernel<<<listGrid(l.n, l.count, 1024), kThreads, 0, s>>>(l, p, out);
}

void launchScale(float* x, int64_t n, float factor, cudaStream_t s) {
  if (n > 0) scaleKernel<<<blocksFor(n), kThreads, 0, s>>>(x, n, factor);
}

void launchScaleByDevice(float* x, int64_t n, const float* scale, cudaStream_t s) {
  if (n > 0) scaleDevKernel<<<blocksFor(n), kThreads, 0, s>>>(x, n, scale);
}

void launchAddInto(float* acc, const float* x, int64_t n, cudaStream_t s) {
  if (n > 0) addIntoKernel<<<blocksFor(n), kThreads, 0, s>>>(acc, x, n);
}

}  // namespace dw::engine::cuda
