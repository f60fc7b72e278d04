// Max and average pooling and batch normalization, forward and backward, on NCHW float tensors.
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "engine/cuda/grid.h"
#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

namespace {

// Kernels that give a block to each plane: at most this many blocks (they loop over the rest),
// and threads to match the plane's size (a warp at least).
int planeBlocks(int64_t planes) {
  return static_cast<int>(planes < (int64_t(1) << 20) ? planes : (int64_t(1) << 20));
}
int threadsFor(int64_t perPlane) {
  int t = 32;
  while (t < kThreads && t < perPlane) t *= 2;
  return t;
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

// Pooling forward, one block per plane (image and channel) and a thread per output: no 64-bit
// division per element. `Window` gives output (oy, ox) of a plane.
template <class Window>
__global__ void poolKernel(Pool2d p, const float* x, float* y, Window window) {
  const int outPlane = static_cast<int>(p.oh * p.ow), ow = static_cast<int>(p.ow);
  for (int64_t pl = blockIdx.x; pl < p.planes; pl += gridDim.x) {
    const float* plane = x + pl * p.h * p.w;
    float* out = y + pl * outPlane;
    for (int e = threadIdx.x; e < outPlane; e += blockDim.x)
      out[e] = window(p, plane, e / ow, e % ow);
  }
}

struct MaxWindow {
  __device__ float operator()(const Pool2d& p, const float* plane, int64_t oy, int64_t ox) const {
    float v;
    return windowArgmax(p, plane, oy, ox, &v) < 0 ? -INFINITY : v;
  }
};

// The outputs whose windows cover input (yy, xx): rows oyLo..oyHi, columns oxLo..oxHi.
struct Covering {
  int64_t oyLo, oyHi, oxLo, oxHi;
};
__device__ inline Covering covering(const Pool2d& p, int64_t yy, int64_t xx) {
  return {max(int64_t(0), (yy + p.ph - p.kh + p.sh) / p.sh), min(p.oh - 1, (yy + p.ph) / p.sh),
          max(int64_t(0), (xx + p.pw - p.kw + p.sw) / p.sw), min(p.ow - 1, (xx + p.pw) / p.sw)};
}

// One thread per input element: it sums dy over the windows whose first maximum it is. With
// `relu` (a fused Relu gradient: x is the Relu's output) nothing flows where x <= 0.
__global__ void maxPoolGradKernel(Pool2d p, const float* x, const float* dy, bool relu, float* dx) {
  const int inPlane = static_cast<int>(p.h * p.w), w = static_cast<int>(p.w);
  for (int64_t pl = blockIdx.x; pl < p.planes; pl += gridDim.x) {
    const float* plane = x + pl * inPlane;
    const float* g = dy + pl * p.oh * p.ow;
    float* out = dx + pl * inPlane;
    for (int e = threadIdx.x; e < inPlane; e += blockDim.x) {
      const Covering c = covering(p, e / w, e % w);
      float acc = 0.f;
      if (!relu || plane[e] > 0.f)
        for (int64_t oy = c.oyLo; oy <= c.oyHi; ++oy)
          for (int64_t ox = c.oxLo; ox <= c.oxHi; ++ox)
            if (windowArgmax(p, plane, oy, ox, nullptr) == e) acc += g[oy * p.ow + ox];
      out[e] = acc;
    }
  }
}

// Windows that tile the plane without overlap (stride = kernel, no padding), as in most CNNs:
// each output scatters dy to its window's first maximum and zeros to the rest, so every input
// element is written once, by the window that holds it. Elements no window holds (the last rows
// or columns when the size is not a multiple) are zeroed separately.
__global__ void maxPoolGradTiledKernel(Pool2d p, const float* x, const float* dy, bool relu,
                                       float* dx) {
  const int outPlane = static_cast<int>(p.oh * p.ow), ow = static_cast<int>(p.ow);
  const int inPlane = static_cast<int>(p.h * p.w);
  for (int64_t pl = blockIdx.x; pl < p.planes; pl += gridDim.x) {
    const float* plane = x + pl * inPlane;
    const float* g = dy + pl * outPlane;
    float* out = dx + pl * inPlane;
    for (int e = threadIdx.x; e < outPlane; e += blockDim.x) {
      const int64_t oy = e / ow, ox = e % ow;
      int64_t at = windowArgmax(p, plane, oy, ox, nullptr);
      if (relu && at >= 0 && !(plane[at] > 0.f)) at = -1;
      for (int64_t ky = 0; ky < p.kh; ++ky)
        for (int64_t kx = 0; kx < p.kw; ++kx) {
          const int64_t idx = (oy * p.sh + ky) * p.w + ox * p.sw + kx;
          out[idx] = idx == at ? g[e] : 0.f;
        }
    }
    for (int e = threadIdx.x; e < inPlane; e += blockDim.x) {
      const int64_t yy = e / p.w, xx = e % p.w;
      if (yy >= p.oh * p.kh || xx >= p.ow * p.kw) out[e] = 0.f;
    }
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

// ---- Per-channel passes over x [n, c, hw]: batch normalization, a convolution's epilogue and
// bias gradient ----
// Reductions give a block to each (channel, slice), a slice being a run of samples
// (channelSlices), and spread the slice's rows over the block as one sequence, so that every
// thread is busy whatever hw is. Elementwise passes run flat over the tensor. Both read W = 4
// floats at a time where every row starts 16-byte aligned (launchers check), else W = 1.

// a / b, in 32 bits where both fit (a fraction of a 64-bit division's cost).
__device__ inline int64_t divFast(int64_t a, int64_t b) {
  return (a | b) < (int64_t(1) << 31)
             ? static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b))
             : a / b;
}

template <int W>
struct Vec {
  float v[W];
};
template <int W>
__device__ inline Vec<W> loadVec(const float* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
  } else {
    r.v[0] = *p;
  }
  return r;
}
template <int W>
__device__ inline void storeVec(float* p, const Vec<W>& r) {
  if constexpr (W == 4)
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  else
    *p = r.v[0];
}

// Block blockIdx.x's channel and its samples [n0, n1).
struct ChannelSlice {
  int64_t ch, n0, n1;
  __device__ ChannelSlice(int64_t n, int64_t slices) {
    ch = blockIdx.x / slices;
    const int64_t per = (n + slices - 1) / slices;
    n0 = (blockIdx.x % slices) * per;
    n1 = min(n, n0 + per);
  }
};

// f(offset) for each run of W elements in the slice's rows of x [n, c, hw].
template <int W, class F>
__device__ void forChannelRows(const ChannelSlice& s, int64_t c, int64_t hw, F f) {
  const int64_t len = hw / W, total = s.n1 > s.n0 ? (s.n1 - s.n0) * len : 0;
#pragma unroll 4
  for (int64_t j = threadIdx.x; j < total; j += blockDim.x) {
    const int64_t r = divFast(j, len);
    f(((s.n0 + r) * c + s.ch) * hw + (j - r * len) * W);
  }
}

// f(offset, channel) for each run of W elements of x [n, c, hw] (`total` runs), over the grid.
template <int W, class F>
__device__ void forChannelElements(int64_t c, int64_t hw, int64_t total, F f) {
  const int64_t len = hw / W;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x)
    f(j * W, divFast(j, len) % c);
}

// Count, mean and sum of squared deviations of a run of values, merged pairwise (Chan et al.).
struct Moments {
  float n, mu, m2;  // no initializers: shared arrays of these must be trivially constructible
  __device__ void add(float x) {  // Welford's update
    n += 1.f;
    const float d = x - mu;
    mu += d / n;
    m2 += d * (x - mu);
  }
  __device__ void merge(const Moments& b) {
    if (b.n == 0.f) return;
    const float tot = n + b.n, delta = b.mu - mu;
    mu += delta * (b.n / tot);
    m2 += b.m2 + delta * delta * (n * b.n / tot);
    n = tot;
  }
};

// Block (channel, slice): the moments of its values in one pass, merged over the block in a
// fixed order, so results repeat bit for bit.
template <int W>
__global__ void statsPartialKernel(const float* x, int64_t n, int64_t c, int64_t hw, int64_t slices,
                                   float* partials) {
  __shared__ Moments part[kThreads];
  const ChannelSlice s(n, slices);
  Moments m{};
  forChannelRows<W>(s, c, hw, [&](int64_t off) {
    const Vec<W> v = loadVec<W>(x + off);
#pragma unroll
    for (int k = 0; k < W; ++k) m.add(v.v[k]);
  });
  part[threadIdx.x] = m;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x].merge(part[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float* p = partials + 3 * blockIdx.x;
    p[0] = part[0].n;
    p[1] = part[0].mu;
    p[2] = part[0].m2;
  }
}

// One thread per channel merges its slices in order.
__global__ void statsCombineKernel(const float* partials, int64_t c, int64_t slices, float* mean,
                                   float* var) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    Moments m{};
    for (int64_t s = 0; s < slices; ++s) {
      const float* p = partials + 3 * (ch * slices + s);
      m.merge(Moments{p[0], p[1], p[2]});
    }
    mean[ch] = m.mu;
    var[ch] = m.n > 0.f ? m.m2 / m.n : 0.f;
  }
}

// A channel's normalization y = sc * (x - mu) * inv + bb, rectified with kRelu.
struct BnChannel {
  float mu, inv, sc, bb;
  __device__ BnChannel(const float* mean, const float* var, const float* scale, const float* b,
                       float eps, int64_t ch)
      : mu(mean[ch]), inv(1.f / sqrtf(var[ch] + eps)), sc(scale[ch]), bb(b[ch]) {}
  template <bool kRelu>
  __device__ float apply(float x) const {
    const float v = sc * ((x - mu) * inv) + bb;
    return kRelu ? ops::unaryForward<ops::UnaryFn::kRelu>(v, {}) : v;
  }
};

template <bool kRelu, int W>
__global__ void bnApplyKernel(const float* x, int64_t c, int64_t hw, int64_t total,
                              const float* mean, const float* var, const float* scale,
                              const float* b, float eps, float* y) {
  forChannelElements<W>(c, hw, total, [&](int64_t off, int64_t ch) {
    const BnChannel bn(mean, var, scale, b, eps, ch);
    Vec<W> v = loadVec<W>(x + off);
#pragma unroll
    for (int k = 0; k < W; ++k) v.v[k] = bn.template apply<kRelu>(v.v[k]);
    storeVec<W>(y + off, v);
  });
}

// The fused block's forward, a thread per pooled value (`total` of them): it normalises its
// window's elements (rectified with kRelu) and keeps their maximum and the first one to reach
// it, as the cpu's maxPoolArgPlane chooses. Positions within a plane fit in int.
template <bool kRelu>
__global__ void bnMaxPoolKernel(const float* x, Pool2d p, int64_t c, int64_t total,
                                const float* mean, const float* var, const float* scale,
                                const float* b, float eps, float* y, uint8_t* winners) {
  const int ow = static_cast<int>(p.ow), h = static_cast<int>(p.h), w = static_cast<int>(p.w),
            kh = static_cast<int>(p.kh), kw = static_cast<int>(p.kw), sh = static_cast<int>(p.sh),
            sw = static_cast<int>(p.sw), ph = static_cast<int>(p.ph), pw = static_cast<int>(p.pw);
  const int64_t outPlane = p.oh * p.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pl = divFast(i, outPlane);
    const int e = static_cast<int>(i - pl * outPlane), oy = e / ow;
    const int top = oy * sh - ph, left = (e - oy * ow) * sw - pw;
    const BnChannel bn(mean, var, scale, b, eps, pl % c);
    const float* plane = x + pl * h * w;
    float m = -INFINITY, best = 0.f;
    int win = -1;
    for (int ky = 0; ky < kh; ++ky) {
      const int yy = top + ky;
      if (yy < 0 || yy >= h) continue;
      for (int kx = 0; kx < kw; ++kx) {
        const int xx = left + kx;
        if (xx < 0 || xx >= w) continue;
        const float v = bn.template apply<kRelu>(plane[yy * w + xx]);
        m = fmaxf(m, v);
        if (win < 0 || v > best) {
          best = v;
          win = ky * kw + kx;
        }
      }
    }
    y[i] = m;
    winners[i] = static_cast<uint8_t>(win < 0 || (kRelu && !(best > 0.f)) ? kNoWinner : win);
  }
}

// The fused gradient's sums, block (channel, slice) over the pooled values of its samples:
// only a window's winner gets a gradient, so dB sums the pooled dY of the windows with one and
// dScale the same times the winner's xhat.
__global__ void bnMaxPoolGradSumsKernel(const float* dy, const uint8_t* winners, const float* x,
                                        Pool2d p, int64_t n, int64_t c, int64_t slices,
                                        const float* mean, const float* var, float eps,
                                        float* partials) {
  __shared__ float part[kThreads];
  const ChannelSlice s(n, slices);
  const float mu = mean[s.ch], inv = 1.f / sqrtf(var[s.ch] + eps);
  const int ow = static_cast<int>(p.ow), w = static_cast<int>(p.w), kw = static_cast<int>(p.kw),
            sh = static_cast<int>(p.sh), sw = static_cast<int>(p.sw), ph = static_cast<int>(p.ph),
            pw = static_cast<int>(p.pw);
  const int64_t outPlane = p.oh * p.ow, total = (s.n1 - s.n0) * outPlane;
  float sb = 0.f, ss = 0.f;
  for (int64_t j = threadIdx.x; j < total; j += blockDim.x) {
    const int64_t r = divFast(j, outPlane), pl = (s.n0 + r) * c + s.ch;
    const int e = static_cast<int>(j - r * outPlane);
    const int k = winners[pl * outPlane + e];
    if (k == kNoWinner) continue;
    const int oy = e / ow;
    const int yy = oy * sh - ph + k / kw, xx = (e - oy * ow) * sw - pw + k % kw;
    const float g = dy[pl * outPlane + e];
    sb += g;
    ss += g * ((x[pl * p.h * p.w + yy * w + xx] - mu) * inv);
  }
  const float bsum = blockSum(sb, part);
  const float ssum = blockSum(ss, part);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = bsum;
    partials[2 * blockIdx.x + 1] = ssum;
  }
}

// dX of training's normalization for one element, given its dY.
struct BnGradChannel {
  float mu, inv, coef, m, ds, db;
  __device__ BnGradChannel(const float* mean, const float* var, const float* scale, float eps,
                           const float* dScale, const float* dB, float count, int64_t ch)
      : mu(mean[ch]),
        inv(1.f / sqrtf(var[ch] + eps)),
        coef(scale[ch] * inv / count),
        m(count),
        ds(dScale[ch]),
        db(dB[ch]) {}
  __device__ float dx(float g, float x) const { return coef * (m * g - db - (x - mu) * inv * ds); }
};

// The fused gradient's dX where 2x2 windows of stride 2 tile the planes exactly (the CNN's
// block): a thread per window writes its four elements, the winner's with the pooled dY.
__global__ void bnMaxPoolGradTiledKernel(const float* dy, const uint8_t* winners, const float* x,
                                         Pool2d p, int64_t c, int64_t total, const float* mean,
                                         const float* var, const float* scale, float eps,
                                         const float* dScale, const float* dB, float* dx) {
  const int ow = static_cast<int>(p.ow), w = static_cast<int>(p.w);
  const int64_t outPlane = p.oh * p.ow;
  const float count = static_cast<float>(p.planes / c * p.h * p.w);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pl = divFast(i, outPlane);
    const int e = static_cast<int>(i - pl * outPlane), oy = e / ow, ox = e - oy * ow;
    const BnGradChannel bn(mean, var, scale, eps, dScale, dB, count, pl % c);
    const int k = winners[i];
    const float g = dy[i];
    const int64_t base = pl * p.h * p.w + 2 * oy * w + 2 * ox;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t off = base + (q >> 1) * w + (q & 1);
      dx[off] = bn.dx(k == q ? g : 0.f, x[off]);
    }
  }
}

// The fused gradient's dX for any window, a thread per input element: its dY is the pooled dY
// of the windows it won (none, one, or more where windows overlap).
__global__ void bnMaxPoolGradInputKernel(const float* dy, const uint8_t* winners, const float* x,
                                         Pool2d p, int64_t c, int64_t total, const float* mean,
                                         const float* var, const float* scale, float eps,
                                         const float* dScale, const float* dB, float* dx) {
  const int w = static_cast<int>(p.w), ow = static_cast<int>(p.ow), kw = static_cast<int>(p.kw),
            sh = static_cast<int>(p.sh), sw = static_cast<int>(p.sw), ph = static_cast<int>(p.ph),
            pw = static_cast<int>(p.pw);
  const int64_t inPlane = p.h * p.w, outPlane = p.oh * p.ow;
  const float count = static_cast<float>(p.planes / c * inPlane);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pl = divFast(i, inPlane);
    const int e = static_cast<int>(i - pl * inPlane), yy = e / w, xx = e - yy * w;
    const BnGradChannel bn(mean, var, scale, eps, dScale, dB, count, pl % c);
    const float* g = dy + pl * outPlane;
    const uint8_t* won = winners + pl * outPlane;
    const Covering cv = covering(p, yy, xx);
    float gv = 0.f;
    for (int oy = static_cast<int>(cv.oyLo); oy <= static_cast<int>(cv.oyHi); ++oy)
      for (int ox = static_cast<int>(cv.oxLo); ox <= static_cast<int>(cv.oxHi); ++ox) {
        const int k = won[oy * ow + ox];
        if (k != kNoWinner && oy * sh - ph + k / kw == yy && ox * sw - pw + k % kw == xx)
          gv += g[oy * ow + ox];
      }
    dx[i] = bn.dx(gv, x[i]);
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

template <int W>
__global__ void gradSumsPartialKernel(const float* dy, const float* x, int64_t n, int64_t c,
                                      int64_t hw, int64_t slices, const float* mean,
                                      const float* var, float eps, float* partials) {
  __shared__ float part[kThreads];
  const ChannelSlice s(n, slices);
  const float mu = mean[s.ch], inv = 1.f / sqrtf(var[s.ch] + eps);
  float sb = 0.f, ss = 0.f;
  forChannelRows<W>(s, c, hw, [&](int64_t off) {
    const Vec<W> g = loadVec<W>(dy + off), v = loadVec<W>(x + off);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sb += g.v[k];
      ss += g.v[k] * ((v.v[k] - mu) * inv);
    }
  });
  const float bsum = blockSum(sb, part);
  const float ssum = blockSum(ss, part);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = bsum;
    partials[2 * blockIdx.x + 1] = ssum;
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

template <int W>
__global__ void bnGradInputKernel(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                                  int64_t total, const float* mean, const float* var,
                                  const float* scale, float eps, const float* dScale,
                                  const float* dB, bool global, float* dx) {
  const float count = static_cast<float>(n * hw);
  forChannelElements<W>(c, hw, total, [&](int64_t off, int64_t ch) {
    Vec<W> g = loadVec<W>(dy + off);
    if (global) {
      const float f = scale[ch] * (1.f / sqrtf(var[ch] + eps));
#pragma unroll
      for (int k = 0; k < W; ++k) g.v[k] *= f;
    } else {
      const BnGradChannel bn(mean, var, scale, eps, dScale, dB, count, ch);
      const Vec<W> v = loadVec<W>(x + off);
#pragma unroll
      for (int k = 0; k < W; ++k) g.v[k] = bn.dx(g.v[k], v.v[k]);
    }
    storeVec<W>(dx + off, g);
  });
}

template <ops::UnaryFn F, bool kAct, int W>
__global__ void channelEpilogueKernel(float* y, int64_t c, int64_t hw, int64_t total,
                                      const float* scale, const float* shift, ops::UnaryParams p) {
  forChannelElements<W>(c, hw, total, [&](int64_t off, int64_t ch) {
    const float a = scale ? scale[ch] : 1.f, b = shift ? shift[ch] : 0.f;
    Vec<W> v = loadVec<W>(y + off);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float t = a * v.v[k] + b;
      if constexpr (kAct) t = ops::unaryForward<F>(t, p);
      v.v[k] = t;
    }
    storeVec<W>(y + off, v);
  });
}

__global__ void batchNormFoldKernel(const float* gamma, const float* beta, const float* mean,
                                    const float* var, const float* bias, float eps, int64_t c,
                                    float* scale, float* shift) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= c) return;
  const float a = gamma[i] * rsqrtf(var[i] + eps);
  scale[i] = a;
  shift[i] = ((bias ? bias[i] : 0.f) - mean[i]) * a + beta[i];
}

template <int W>
__global__ void channelSumPartialKernel(const float* x, int64_t n, int64_t c, int64_t hw,
                                        int64_t slices, float* partials) {
  __shared__ float part[kThreads];
  const ChannelSlice s(n, slices);
  float acc = 0.f;
  forChannelRows<W>(s, c, hw, [&](int64_t off) {
    const Vec<W> v = loadVec<W>(x + off);
#pragma unroll
    for (int k = 0; k < W; ++k) acc += v.v[k];
  });
  const float total = blockSum(acc, part);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void channelSumCombineKernel(const float* partials, int64_t c, int64_t slices,
                                        float* out) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int64_t k = 0; k < slices; ++k) acc += partials[ch * slices + k];
    out[ch] = acc;
  }
}

// The divisor of output (oy, ox)'s window, and its extent clipped to the input.
struct AvgWindow {
  int64_t y0, y1, x0, x1;  // [y0, y1) x [x0, x1) inside the input
  float inv;               // 1 / divisor, 0 for a window with nothing to count
};
__device__ inline AvgWindow avgWindow(const Pool2d& p, int64_t oy, int64_t ox) {
  const int64_t ys = oy * p.sh - p.ph, xs = ox * p.sw - p.pw;
  AvgWindow w;
  w.y0 = max(ys, int64_t(0));
  w.y1 = min(ys + p.kh, p.h);
  w.x0 = max(xs, int64_t(0));
  w.x1 = min(xs + p.kw, p.w);
  int64_t count;
  if (p.includePad) {
    const int64_t py1 = min(ys + p.kh, p.h + p.pb), px1 = min(xs + p.kw, p.w + p.pr);
    count = (py1 - max(ys, -p.ph)) * (px1 - max(xs, -p.pw));
  } else {
    count = (w.y1 - w.y0) * (w.x1 - w.x0);
  }
  w.inv = count > 0 && w.y1 > w.y0 && w.x1 > w.x0 ? 1.f / static_cast<float>(count) : 0.f;
  return w;
}

struct AvgWindowSum {
  __device__ float operator()(const Pool2d& p, const float* plane, int64_t oy, int64_t ox) const {
    const AvgWindow w = avgWindow(p, oy, ox);
    float acc = 0.f;
    for (int64_t yy = w.y0; yy < w.y1; ++yy)
      for (int64_t xx = w.x0; xx < w.x1; ++xx) acc += plane[yy * p.w + xx];
    return acc * w.inv;
  }
};

// One thread per input element, summing over the windows that hold it (no atomics).
__global__ void avgPoolGradKernel(Pool2d p, const float* dy, float* dx) {
  const int inPlane = static_cast<int>(p.h * p.w), w = static_cast<int>(p.w);
  for (int64_t pl = blockIdx.x; pl < p.planes; pl += gridDim.x) {
    const float* g = dy + pl * p.oh * p.ow;
    float* out = dx + pl * inPlane;
    for (int e = threadIdx.x; e < inPlane; e += blockDim.x) {
      const Covering c = covering(p, e / w, e % w);
      float acc = 0.f;
      for (int64_t oy = c.oyLo; oy <= c.oyHi; ++oy)
        for (int64_t ox = c.oxLo; ox <= c.oxHi; ++ox)
          acc += g[oy * p.ow + ox] * avgWindow(p, oy, ox).inv;
      out[e] = acc;
    }
  }
}

__global__ void spreadMeanKernel(const float* dy, int64_t n, int64_t spatial, float inv,
                                 float* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i / spatial] * inv;
}

// f(std::integral_constant<int, W>{}): W = 4 where rows of hw floats start 16-byte aligned in
// every tensor listed, else 1.
template <class F>
void withWidth(int64_t hw, std::initializer_list<const void*> tensors, F f) {
  bool four = hw % 4 == 0;
  for (const void* t : tensors) four = four && reinterpret_cast<uintptr_t>(t) % 16 == 0;
  if (four)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, 1>{});
}

}  // namespace

void launchAvgPool(const Pool2d& p, const float* x, float* y, cudaStream_t s) {
  if (p.planes > 0 && p.oh * p.ow > 0)
    poolKernel<<<planeBlocks(p.planes), threadsFor(p.oh * p.ow), 0, s>>>(p, x, y, AvgWindowSum{});
}

void launchAvgPoolGrad(const Pool2d& p, const float* dy, float* dx, cudaStream_t s) {
  if (p.planes > 0 && p.h * p.w > 0)
    avgPoolGradKernel<<<planeBlocks(p.planes), threadsFor(p.h * p.w), 0, s>>>(p, dy, dx);
}

void launchSpreadMean(const float* dy, int64_t planes, int64_t spatial, float* dx, cudaStream_t s) {
  const int64_t n = planes * spatial;
  if (n > 0)
    spreadMeanKernel<<<blocksFor(n), kThreads, 0, s>>>(dy, n, spatial,
                                                       1.f / static_cast<float>(spatial), dx);
}

void launchChannelEpilogue(float* y, int64_t n, int64_t c, int64_t hw, const float* scale,
                           const float* shift, ops::UnaryFn fn, const ops::UnaryParams& p,
                           cudaStream_t s) {
  if (n * c <= 0 || hw <= 0) return;
  withWidth(hw, {y}, [&](auto w) {
    constexpr int W = decltype(w)::value;
    const int64_t total = n * c * hw / W;
    if (fn == ops::UnaryFn::kCount) {
      channelEpilogueKernel<ops::UnaryFn::kRelu, false, W>
          <<<blocksFor(total), kThreads, 0, s>>>(y, c, hw, total, scale, shift, p);
      return;
    }
    ops::visitUnary(fn, [&](auto f) {
      channelEpilogueKernel<decltype(f)::value, true, W>
          <<<blocksFor(total), kThreads, 0, s>>>(y, c, hw, total, scale, shift, p);
    });
  });
}

void launchBatchNormFold(const float* gamma, const float* beta, const float* mean, const float* var,
                         const float* bias, float eps, int64_t c, float* scale, float* shift,
                         cudaStream_t s) {
  if (c > 0)
    batchNormFoldKernel<<<blocksFor(c), kThreads, 0, s>>>(gamma, beta, mean, var, bias, eps, c,
                                                          scale, shift);
}

void launchChannelSum(const float* x, int64_t n, int64_t c, int64_t hw, float* partials, float* out,
                      cudaStream_t s) {
  if (c <= 0) return;
  const int64_t slices = channelSlices(c, n, hw);
  withWidth(hw, {x}, [&](auto w) {
    channelSumPartialKernel<decltype(w)::value>
        <<<static_cast<int>(c * slices), kThreads, 0, s>>>(x, n, c, hw, slices, partials);
  });
  channelSumCombineKernel<<<blocksFor(c), kThreads, 0, s>>>(partials, c, slices, out);
}

void launchMaxPool(const Pool2d& p, const float* x, float* y, cudaStream_t s) {
  if (p.planes > 0 && p.oh * p.ow > 0)
    poolKernel<<<planeBlocks(p.planes), threadsFor(p.oh * p.ow), 0, s>>>(p, x, y, MaxWindow{});
}

void launchMaxPoolGrad(const Pool2d& p, const float* x, const float* dy, bool relu, float* dx,
                       cudaStream_t s) {
  if (p.planes <= 0 || p.h * p.w <= 0) return;
  const bool tiled = p.sh == p.kh && p.sw == p.kw && p.ph == 0 && p.pw == 0 && p.oh * p.kh <= p.h &&
                     p.ow * p.kw <= p.w;
  if (tiled)
    maxPoolGradTiledKernel<<<planeBlocks(p.planes), threadsFor(p.oh * p.ow), 0, s>>>(p, x, dy, relu,
                                                                                     dx);
  else
    maxPoolGradKernel<<<planeBlocks(p.planes), threadsFor(p.h * p.w), 0, s>>>(p, x, dy, relu, dx);
}

void launchChannelStats(const float* x, int64_t n, int64_t c, int64_t hw, float* partials,
                        float* mean, float* var, cudaStream_t s) {
  if (c <= 0) return;
  const int64_t slices = channelSlices(c, n, hw);
  withWidth(hw, {x}, [&](auto w) {
    statsPartialKernel<decltype(w)::value>
        <<<static_cast<int>(c * slices), kThreads, 0, s>>>(x, n, c, hw, slices, partials);
  });
  statsCombineKernel<<<blocksFor(c), kThreads, 0, s>>>(partials, c, slices, mean, var);
}

void launchBatchNormApply(const float* x, int64_t n, int64_t c, int64_t hw, const float* mean,
                          const float* var, const float* scale, const float* b, float eps,
                          bool relu, float* y, cudaStream_t s) {
  if (n * c <= 0 || hw <= 0) return;
  withWidth(hw, {x, y}, [&](auto w) {
    constexpr int W = decltype(w)::value;
    const int64_t total = n * c * hw / W;
    if (relu)
      bnApplyKernel<true, W>
          <<<blocksFor(total), kThreads, 0, s>>>(x, c, hw, total, mean, var, scale, b, eps, y);
    else
      bnApplyKernel<false, W>
          <<<blocksFor(total), kThreads, 0, s>>>(x, c, hw, total, mean, var, scale, b, eps, y);
  });
}

void launchBatchNormMaxPool(const float* x, const Pool2d& p, int64_t c, const float* mean,
                            const float* var, const float* scale, const float* b, float eps,
                            bool relu, float* y, uint8_t* winners, cudaStream_t s) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total <= 0) return;
  if (relu)
    bnMaxPoolKernel<true><<<blocksFor(total), kThreads, 0, s>>>(x, p, c, total, mean, var, scale, b,
                                                                eps, y, winners);
  else
    bnMaxPoolKernel<false><<<blocksFor(total), kThreads, 0, s>>>(x, p, c, total, mean, var, scale,
                                                                 b, eps, y, winners);
}

void launchBatchNormMaxPoolGrad(const float* dy, const uint8_t* winners, const float* x,
                                const Pool2d& p, int64_t c, const float* mean, const float* var,
                                const float* scale, float eps, float* partials, float* dScale,
                                float* dB, float* dx, cudaStream_t s) {
  if (c <= 0) return;  // an empty batch still writes zero dScale and dB
  const int64_t n = p.planes / c, slices = channelSlices(c, n, p.oh * p.ow);
  bnMaxPoolGradSumsKernel<<<static_cast<int>(c * slices), kThreads, 0, s>>>(
      dy, winners, x, p, n, c, slices, mean, var, eps, partials);
  gradSumsCombineKernel<<<blocksFor(c), kThreads, 0, s>>>(partials, c, slices, dScale, dB);
  if (!dx || p.h * p.w <= 0) return;
  const bool tiled = p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0 &&
                     p.h == 2 * p.oh && p.w == 2 * p.ow;
  const int64_t total = tiled ? p.planes * p.oh * p.ow : p.planes * p.h * p.w;
  if (tiled)
    bnMaxPoolGradTiledKernel<<<blocksFor(total), kThreads, 0, s>>>(
        dy, winners, x, p, c, total, mean, var, scale, eps, dScale, dB, dx);
  else
    bnMaxPoolGradInputKernel<<<blocksFor(total), kThreads, 0, s>>>(
        dy, winners, x, p, c, total, mean, var, scale, eps, dScale, dB, dx);
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
  const int64_t slices = channelSlices(c, n, hw);
  withWidth(hw, {dy, x}, [&](auto w) {
    gradSumsPartialKernel<decltype(w)::value><<<static_cast<int>(c * slices), kThreads, 0, s>>>(
        dy, x, n, c, hw, slices, mean, var, eps, partials);
  });
  gradSumsCombineKernel<<<blocksFor(c), kThreads, 0, s>>>(partials, c, slices, dScale, dB);
}

void launchBatchNormGradInput(const float* dy, const float* x, int64_t n, int64_t c, int64_t hw,
                              const float* mean, const float* var, const float* scale, float eps,
                              const float* dScale, const float* dB, bool global, float* dx,
                              cudaStream_t s) {
  if (n * c <= 0 || hw <= 0) return;
  withWidth(hw, {dy, x, dx}, [&](auto w) {
    constexpr int W = decltype(w)::value;
    const int64_t total = n * c * hw / W;
    bnGradInputKernel<W><<<blocksFor(total), kThreads, 0, s>>>(dy, x, n, c, hw, total, mean, var,
                                                               scale, eps, dScale, dB, global, dx);
  });
}

}  // namespace dw::engine::cuda
