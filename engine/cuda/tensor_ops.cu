// Softmax and LogSoftmax with their gradient, layer normalization, and Gather with its gradient,
// on float tensors viewed as [outer, axis, inner].
#include <cstdint>

#include "engine/cuda/grid.h"
#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

namespace {

// Block-wide reduction of v (max or sum); every thread gets the result.
template <bool kMax>
__device__ inline float blockReduce(float v, float* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] = kMax ? fmaxf(part[threadIdx.x], part[threadIdx.x + w])
                               : part[threadIdx.x] + part[threadIdx.x + w];
    __syncthreads();
  }
  const float r = part[0];
  __syncthreads();
  return r;
}

// inner == 1: a block per row, the axis contiguous.
__global__ void softmaxRowsKernel(const float* x, float* y, int64_t rows, int64_t len, bool log) {
  __shared__ float part[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * len;
    float* yr = y + r * len;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = blockReduce<true>(m, part);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += expf(xr[i] - m);
    s = blockReduce<false>(s, part);
    const float ls = logf(s), inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      yr[i] = log ? xr[i] - m - ls : expf(xr[i] - m) * inv;
  }
}

// inner > 1: a thread per (outer, inner) column, walking the axis with stride `inner`.
__global__ void softmaxColumnsKernel(const float* x, float* y, int64_t outer, int64_t len,
                                     int64_t inner, bool log) {
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols;
       c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * len * inner + c % inner;
    float m = -INFINITY;
    for (int64_t i = 0; i < len; ++i) m = fmaxf(m, x[base + i * inner]);
    float s = 0.f;
    for (int64_t i = 0; i < len; ++i) s += expf(x[base + i * inner] - m);
    const float ls = logf(s), inv = 1.f / s;
    for (int64_t i = 0; i < len; ++i) {
      const float v = x[base + i * inner] - m;
      y[base + i * inner] = log ? v - ls : expf(v) * inv;
    }
  }
}

// Softmax: dx = y * (dy - sum(dy * y)); LogSoftmax: dx = dy - exp(y) * sum(dy).
__global__ void softmaxGradRowsKernel(const float* dy, const float* y, float* dx, int64_t rows,
                                      int64_t len, bool log) {
  __shared__ float part[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* g = dy + r * len;
    const float* yr = y + r * len;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += log ? g[i] : g[i] * yr[i];
    s = blockReduce<false>(s, part);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      dx[r * len + i] = log ? g[i] - expf(yr[i]) * s : yr[i] * (g[i] - s);
  }
}

__global__ void softmaxGradColumnsKernel(const float* dy, const float* y, float* dx, int64_t outer,
                                         int64_t len, int64_t inner, bool log) {
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols;
       c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * len * inner + c % inner;
    float s = 0.f;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t k = base + i * inner;
      s += log ? dy[k] : dy[k] * y[k];
    }
    for (int64_t i = 0; i < len; ++i) {
      const int64_t k = base + i * inner;
      dx[k] = log ? dy[k] - expf(y[k]) * s : y[k] * (dy[k] - s);
    }
  }
}

// A block per row of `len`: two passes (mean, then the squared deviations) as on the cpu.
__global__ void layerNormKernel(const float* x, const float* scale, const float* bias, float* y,
                                float* meanOut, float* invOut, int64_t rows, int64_t len,
                                float eps) {
  __shared__ float part[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * len;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += xr[i];
    const float mean = blockReduce<false>(s, part) / static_cast<float>(len);
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float d = xr[i] - mean;
      q += d * d;
    }
    const float inv = 1.f / sqrtf(blockReduce<false>(q, part) / static_cast<float>(len) + eps);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      y[r * len + i] = (xr[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.f);
    if (threadIdx.x == 0) {
      if (meanOut) meanOut[r] = mean;
      if (invOut) invOut[r] = inv;
    }
  }
}

// dX = inv * (dy*scale - mean(dy*scale) - xhat * mean(dy*scale*xhat)) over each row; `prod`
// (may be null) gets dy * xhat for dScale's column sums.
__global__ void layerNormGradKernel(const float* dy, const float* x, const float* scale,
                                    const float* mean, const float* inv, float* dx, float* prod,
                                    int64_t rows, int64_t len) {
  __shared__ float part[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float m = mean[r], is = inv[r];
    const float* g = dy + r * len;
    const float* xr = x + r * len;
    float s1 = 0.f, s2 = 0.f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float gs = g[i] * scale[i];
      s1 += gs;
      s2 += gs * (xr[i] - m) * is;
    }
    s1 = blockReduce<false>(s1, part) / static_cast<float>(len);
    s2 = blockReduce<false>(s2, part) / static_cast<float>(len);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float xhat = (xr[i] - m) * is;
      if (dx) dx[r * len + i] = is * (g[i] * scale[i] - s1 - xhat * s2);
      if (prod) prod[r * len + i] = g[i] * xhat;
    }
  }
}

// out [outer, count, inner] = data [outer, len, inner] at rows idx (already within [0, len)).
template <class T>
__global__ void gatherKernel(const T* data, const int64_t* idx, T* out, int64_t outer, int64_t len,
                             int64_t count, int64_t inner) {
  const int64_t n = outer * count * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t in = i % inner, j = (i / inner) % count, o = i / (inner * count);
    out[i] = data[(o * len + idx[j]) * inner + in];
  }
}

// dData [outer, len, inner]: each row's positions in dY (rowStart/positions, a CSR list the
// host built from the indices) summed in index order, so repeated indices add up the same way
// every run; rows no index names get zeros.
__global__ void gatherGradKernel(const float* dy, const int64_t* rowStart, const int64_t* positions,
                                 float* dx, int64_t outer, int64_t len, int64_t count,
                                 int64_t inner) {
  const int64_t n = outer * len * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t in = i % inner, r = (i / inner) % len, o = i / (inner * len);
    float acc = 0.f;
    for (int64_t k = rowStart[r]; k < rowStart[r + 1]; ++k)
      acc += dy[(o * count + positions[k]) * inner + in];
    dx[i] = acc;
  }
}

int rowBlocks(int64_t rows) {
  return static_cast<int>(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20));
}

}  // namespace

void launchSoftmax(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, bool log,
                   cudaStream_t s) {
  if (outer * len * inner <= 0) return;
  if (inner == 1)
    softmaxRowsKernel<<<rowBlocks(outer), kThreads, 0, s>>>(x, y, outer, len, log);
  else
    softmaxColumnsKernel<<<blocksFor(outer * inner), kThreads, 0, s>>>(x, y, outer, len, inner,
                                                                       log);
}

void launchSoftmaxGrad(const float* dy, const float* y, float* dx, int64_t outer, int64_t len,
                       int64_t inner, bool log, cudaStream_t s) {
  if (outer * len * inner <= 0) return;
  if (inner == 1)
    softmaxGradRowsKernel<<<rowBlocks(outer), kThreads, 0, s>>>(dy, y, dx, outer, len, log);
  else
    softmaxGradColumnsKernel<<<blocksFor(outer * inner), kThreads, 0, s>>>(dy, y, dx, outer, len,
                                                                           inner, log);
}

void launchLayerNorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                     float* invStdDev, int64_t rows, int64_t len, float eps, cudaStream_t s) {
  if (rows > 0 && len > 0)
    layerNormKernel<<<rowBlocks(rows), kThreads, 0, s>>>(x, scale, bias, y, mean, invStdDev, rows,
                                                         len, eps);
}

void launchLayerNormGrad(const float* dy, const float* x, const float* scale, const float* mean,
                         const float* invStdDev, float* dx, float* prod, int64_t rows, int64_t len,
                         cudaStream_t s) {
  if (rows > 0 && len > 0)
    layerNormGradKernel<<<rowBlocks(rows), kThreads, 0, s>>>(dy, x, scale, mean, invStdDev, dx,
                                                             prod, rows, len);
}

void launchGather(const void* data, int elemBytes, const int64_t* idx, void* out, int64_t outer,
                  int64_t len, int64_t count, int64_t inner, cudaStream_t s) {
  const int64_t n = outer * count * inner;
  if (n <= 0) return;
  switch (elemBytes) {
    case 8:
      gatherKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const int64_t*>(data), idx,
                                                     static_cast<int64_t*>(out), outer, len, count,
                                                     inner);
      break;
    case 4:
      gatherKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const int32_t*>(data), idx,
                                                     static_cast<int32_t*>(out), outer, len, count,
                                                     inner);
      break;
    default:
      gatherKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint8_t*>(data), idx,
                                                     static_cast<uint8_t*>(out), outer, len, count,
                                                     inner);
  }
}

void launchGatherGrad(const float* dy, const int64_t* rowStart, const int64_t* positions, float* dx,
                      int64_t outer, int64_t len, int64_t count, int64_t inner, cudaStream_t s) {
  const int64_t n = outer * len * inner;
  if (n > 0)
    gatherGradKernel<<<blocksFor(n), kThreads, 0, s>>>(dy, rowStart, positions, dx, outer, len,
                                                       count, inner);
}

}  // namespace dw::engine::cuda
