// Max pooling and batch normalization, forward and backward, on NCHW float tensors.
#include <cstdint>

#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

namespace {

constexpr int kThreads = 256;

int blocksFor(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

// The first maximum of output (plane, oy, ox)'s window, as an index into the plane; -1 when the
// window holds no input element.
__device__ inline int64_t windowArgmax(const Pool2d& p, const float* plane, int64_t oy, int64_t ox,
                                       float* value) {
  const int64_t y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
  int64_t best = -1;
  float bv = -INFINITY;
  for (int64_t ky = 0; ky < p.kh; ++ky) {
    const int64_t y = y0 + ky;
    if (y < 0 || y >= p.h) continue;
    for (int64_t kx = 0; kx < p.kw; ++kx) {
      const int64_t x = x0 + kx;
      if (x < 0 || x >= p.w) continue;
      const float v = plane[y * p.w + x];
      if (best < 0 || v > bv) {
        bv = v;
        best = y * p.w + x;
      }
    }
  }
  if (value) *value = bv;
  return best;
}

__global__ void maxPoolKernel(Pool2d p, const float* x, float* y) {
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % p.ow, oy = i / p.ow % p.oh, pl = i / (p.ow * p.oh);
    float v;
    const int64_t at = windowArgmax(p, x + pl * p.h * p.w, oy, ox, &v);
    y[i] = at < 0 ? -INFINITY : v;
  }
}

// One thread per input element: it sums dy over the windows whose first maximum it is.
__global__ void maxPoolGradKernel(Pool2d p, const float* x, const float* dy, float* dx) {
  const int64_t total = p.planes * p.h * p.w;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t xx = i % p.w, yy = i / p.w % p.h, pl = i / (p.w * p.h);
    const float* plane = x + pl * p.h * p.w;
    const float* g = dy + pl * p.oh * p.ow;
    // Outputs whose window covers (yy, xx).
    const int64_t oyLo = max(int64_t(0), (yy + p.ph - p.kh + p.sh) / p.sh);
    const int64_t oyHi = min(p.oh - 1, (yy + p.ph) / p.sh);
    const int64_t oxLo = max(int64_t(0), (xx + p.pw - p.kw + p.sw) / p.sw);
    const int64_t oxHi = min(p.ow - 1, (xx + p.pw) / p.sw);
    float acc = 0.f;
    for (int64_t oy = oyLo; oy <= oyHi; ++oy)
      for (int64_t ox = oxLo; ox <= oxHi; ++ox)
        if (windowArgmax(p, plane, oy, ox, nullptr) == yy * p.w + xx) acc += g[oy * p.ow + ox];
    dx[i] = acc;
  }
}

// Block-wide sum of `v`; every thread gets the result.
__device__ inline float blockSum(float v, float* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const float r = part[0];
  __syncthreads();
  return r;
}

// Block (channel, slice) over its chunk of the channel: count, mean and the sum of squared
// deviations (two passes over the chunk, for an accurate variance).
__global__ void statsPartialKernel(const float* x, int64_t c, int64_t hw, int64_t m, int64_t slices,
                                   float* partials) {
  __shared__ float part[kThreads];
  const int64_t ch = blockIdx.x / slices, sl = blockIdx.x % slices;
  const int64_t chunk = (m + slices - 1) / slices;
  const int64_t lo = sl * chunk, hi = min(m, lo + chunk);
  float s = 0.f;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    s += x[(i / hw * c + ch) * hw + i % hw];
  const float cnt = static_cast<float>(hi > lo ? hi - lo : 0);
  const float total = blockSum(s, part);
  const float mu = cnt > 0 ? total / cnt : 0.f;
  float q = 0.f;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const float d = x[(i / hw * c + ch) * hw + i % hw] - mu;
    q += d * d;
  }
  const float m2 = blockSum(q, part);
  if (threadIdx.x == 0) {
    float* p = partials + 3 * blockIdx.x;
    p[0] = cnt;
    p[1] = mu;
    p[2] = m2;
  }
}

// One thread per channel combines its slices in order (Chan et al.'s pairwise update).
__global__ void statsCombineKernel(const float* partials, int64_t c, int64_t slices, float* mean,
                                   float* var) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    float n = 0.f, mu = 0.f, m2 = 0.f;
    for (int64_t s = 0; s < slices; ++s) {
      const float* p = partials + 3 * (ch * slices + s);
      if (p[0] == 0.f) continue;
      const float nb = p[0], tot = n + nb, delta = p[1] - mu;
      mu += delta * (nb / tot);
      m2 += p[2] + delta * delta * (n * nb / tot);
      n = tot;
    }
    mean[ch] = mu;
    var[ch] = n > 0.f ? m2 / n : 0.f;
  }
}

__global__ void bnApplyKernel(const float* x, int64_t n, int64_t c, int64_t hw, const float* mean,
                              const float* var, const float* scale, const float* b, float eps,
                              float* y) {
  const int64_t total = n * c * hw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = i / hw % c;
    const float inv = 1.f / sqrtf(var[ch] + eps);
    y[i] = scale[ch] * ((x[i] - mean[ch]) * inv) + b[ch];
  }
}

__global__ void runningKernel(const float* im, const float* iv, const float* m, const float* v,
                              int64_t c, float mom, float* om, float* ov) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < c;
       i += int64_t(gridDim.x) * blockDim.x) {
    om[i] = im[i] * mom + m[i] * (1.f - mom);
    ov[i] = iv[i] * mom + v[i] * (1.f - mom);
  }
}

__global__ void gradSumsPartialKernel(const float* dy, const float* x, int64_t c, int64_t hw,
                                      int64_t m, int64_t slices, const float* mean,
                                      const float* var, float eps, float* partials) {
  __shared__ float part[kThreads];
  const int64_t ch = blockIdx.x / slices, sl = blockIdx.x % slices;
  const int64_t chunk = (m + slices - 1) / slices;
  const int64_t lo = sl * chunk, hi = min(m, lo + chunk);
  const float mu = mean[ch], inv = 1.f / sqrtf(var[ch] + eps);
  float sb = 0.f, ss = 0.f;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const int64_t at = (i / hw * c + ch) * hw + i % hw;
    sb += dy[at];
    ss += dy[at] * ((x[at] - mu) * inv);
  }
  const float b = blockSum(sb, part);
  const float s = blockSum(ss, part);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = b;
    partials[2 * blockIdx.x + 1] = s;
  }
}

__global__ void gradSumsCombineKernel(const float* partials, int64_t c, int64_t slices,
                                      float* dScale, float* dB) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    float b = 0.f, s = 0.f;
    for (int64_t k = 0; k < slices; ++k) {
      b += partials[2 * (ch * slices + k)];
      s += partials[2 * (ch * slices + k) + 1];
    }
    if (dB) dB[ch] = b;
    if (dScale) dScale[ch] = s;
  }
}

__global__ void bnGradInputKernel(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                                  const float* mean, const float* var, const float* scale,
                                  float eps, const float* dScale, const float* dB, bool global,
                                  float* dx) {
  const int64_t total = n * c * hw;
  const float m = static_cast<float>(n * hw);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = i / hw % c;
    const float inv = 1.f / sqrtf(var[ch] + eps);
    if (global) {
      dx[i] = dy[i] * scale[ch] * inv;
    } else {
      const float xhat = (x[i] - mean[ch]) * inv;
      dx[i] = scale[ch] * inv / m * (m * dy[i] - dB[ch] - xhat * dScale[ch]);
    }
  }
}

}  // namespace

void launchMaxPool(const Pool2d& p, const float* x, float* y, cudaStream_t s) {
  const int64_t n = p.planes * p.oh * p.ow;
  if (n > 0) maxPoolKernel<<<blocksFor(n), kThreads, 0, s>>>(p, x, y);
}

void launchMaxPoolGrad(const Pool2d& p, const float* x, const float* dy, float* dx,
                       cudaStream_t s) {
  const int64_t n = p.planes * p.h * p.w;
  if (n > 0) maxPoolGradKernel<<<blocksFor(n), kThreads, 0, s>>>(p, x, dy, dx);
}

void launchChannelStats(const float* x, int64_t n, int64_t c, int64_t hw, float* partials,
                        float* mean, float* var, cudaStream_t s) {
  if (c <= 0) return;
  const int64_t m = n * hw, slices = channelSlices(c, m);
  statsPartialKernel<<<static_cast<int>(c * slices), kThreads, 0, s>>>(x, c, hw, m, slices,
                                                                       partials);
  statsCombineKernel<<<blocksFor(c), kThreads, 0, s>>>(partials, c, slices, mean, var);
}

void launchBatchNormApply(const float* x, int64_t n, int64_t c, int64_t hw, const float* mean,
                          const float* var, const float* scale, const float* b, float eps, float* y,
                          cudaStream_t s) {
  const int64_t total = n * c * hw;
  if (total > 0)
    bnApplyKernel<<<blocksFor(total), kThreads, 0, s>>>(x, n, c, hw, mean, var, scale, b, eps, y);
}

void launchRunningStats(const float* inMean, const float* inVar, const float* mean,
                        const float* var, int64_t c, float momentum, float* outMean, float* outVar,
                        cudaStream_t s) {
  if (c > 0)
    runningKernel<<<blocksFor(c), kThreads, 0, s>>>(inMean, inVar, mean, var, c, momentum, outMean,
                                                    outVar);
}

void launchBatchNormGradSums(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                             const float* mean, const float* var, float eps, float* partials,
                             float* dScale, float* dB, cudaStream_t s) {
  if (c <= 0) return;
  const int64_t m = n * hw, slices = channelSlices(c, m);
  gradSumsPartialKernel<<<static_cast<int>(c * slices), kThreads, 0, s>>>(dy, x, c, hw, m, slices,
                                                                          mean, var, eps, partials);
  gradSumsCombineKernel<<<blocksFor(c), kThreads, 0, s>>>(partials, c, slices, dScale, dB);
}

void launchBatchNormGradInput(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                              const float* mean, const float* var, const float* scale, float eps,
                              const float* dScale, const float* dB, bool global, float* dx,
                              cudaStream_t s) {
  const int64_t total = n * c * hw;
  if (total > 0)
    bnGradInputKernel<<<blocksFor(total), kThreads, 0, s>>>(dy, x, n, c, hw, mean, var, scale, eps,
                                                            dScale, dB, global, dx);
}

}  // namespace dw::engine::cuda
