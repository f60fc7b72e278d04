// Direct 2-D convolution with one input channel (image inputs such as Fashion-MNIST's first
// layer): forward and weight gradient on plain NCHW. oneDNN's kernels for this case compute in a
// blocked layout, so every call paid a reorder of the (large) output and, in the gradient, of
// dY: on the CNN example those two reorders took longer than the convolution itself.
//
// With stride 1 the input plane is copied once into a zero-padded plane of pitch Wp; an output
// plane computed with the same pitch is then, for each kernel tap, one long multiply-add of the
// padded plane shifted by the tap's offset (rows of 28 would leave the vector loops mostly
// remainder). The padding columns of the output are dropped when it is copied out. Other strides
// take plain loops. The loops are also compiled for AVX-512 and picked at run time.
#include <omp.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "engine/onednn/onednn_backend.h"

namespace dw::engine::onednn {

namespace {

// The zero-padded geometry of stride-1 convolutions; ok = false where another path is needed.
struct Padded {
  bool ok = false;
  int64_t hp = 0, wp = 0, size = 0;  // rows, pitch, floats to allocate (with overrun room)
};

Padded padded(const SingleChannelConv& g) {
  Padded p;
  if (g.sh != 1 || g.sw != 1) return p;
  const int64_t ekh = (g.kh - 1) * g.dh + 1, ekw = (g.kw - 1) * g.dw + 1;
  const int64_t padB = g.oh - 1 + ekh - g.h - g.ph, padR = g.ow - 1 + ekw - g.w - g.pw;
  if (g.ph < 0 || g.pw < 0 || padB < 0 || padR < 0) return p;
  p.hp = g.h + g.ph + padB;
  p.wp = g.w + g.pw + padR;
  p.size = (p.hp + 1) * p.wp;
  p.ok = true;
  return p;
}

void padPlane(const SingleChannelConv& g, const Padded& p, const float* xs, float* xp) {
  std::fill_n(xp, p.size, 0.0f);
  for (int64_t h = 0; h < g.h; ++h) std::copy_n(xs + h * g.w, g.w, xp + (h + g.ph) * p.wp + g.pw);
}

__attribute__((target_clones("avx512f", "default"))) void forwardPadded(const SingleChannelConv& g,
                                                                        const Padded& p,
                                                                        const float* xp,
                                                                        const float* wk, float bias,
                                                                        float* acc, float* ys) {
  const int64_t len = g.oh * p.wp;
  // Blocks of 64 outputs stay in registers across all taps and are stored once: a pass over the
  // whole accumulator per tap was bound by its stores (and their 4K aliasing with the input).
  constexpr int64_t kBlock = 64;
  const int64_t full = len / kBlock * kBlock;
  for (int64_t i0 = 0; i0 < full; i0 += kBlock) {
    float a[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) a[j] = bias;
    for (int64_t kh = 0; kh < g.kh; ++kh)
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const float c = wk[kh * g.kw + kw];
        const float* src = xp + kh * g.dh * p.wp + kw * g.dw + i0;
        for (int64_t j = 0; j < kBlock; ++j) a[j] += c * src[j];
      }
    std::copy_n(a, kBlock, acc + i0);
  }
  std::fill(acc + full, acc + len, bias);
  for (int64_t kh = 0; kh < g.kh; ++kh)
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const float c = wk[kh * g.kw + kw];
      const float* src = xp + kh * g.dh * p.wp + kw * g.dw;
      for (int64_t i = full; i < len; ++i) acc[i] += c * src[i];
    }
  for (int64_t oh = 0; oh < g.oh; ++oh) std::copy_n(acc + oh * p.wp, g.ow, ys + oh * g.ow);
}

// dW[tap] += sum(dY * shifted X), dB += sum(dY) for one (n, oc) plane; dyp holds dY with the
// padded pitch and zeros in the padding columns.
__attribute__((target_clones("avx512f", "default"))) void weightGradPadded(
    const SingleChannelConv& g, const Padded& p, const float* xp, const float* dyp, double* dw,
    double* db) {
  const int64_t len = g.oh * p.wp;
  for (int64_t kh = 0; kh < g.kh; ++kh)
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const float* src = xp + kh * g.dh * p.wp + kw * g.dw;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < len; ++i) s += dyp[i] * src[i];
      dw[kh * g.kw + kw] += s;
    }
  float b = 0;
#pragma omp simd reduction(+ : b)
  for (int64_t i = 0; i < len; ++i) b += dyp[i];
  *db += b;
}

// Any stride: output columns [lo, hi) whose input column ow * s + off lies inside [0, w).
void columnRange(int64_t off, int64_t s, int64_t w, int64_t ow, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = w - 1 - off < 0 ? 0 : std::min<int64_t>(ow, (w - 1 - off) / s + 1);
  if (hi < lo) hi = lo;
}

void forwardPlane(const SingleChannelConv& g, const float* xs, const float* wk, float bias,
                  float* ys) {
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    float* yr = ys + oh * g.ow;
    std::fill_n(yr, g.ow, bias);
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      const float* xr = xs + ih * g.w;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t off = kw * g.dw - g.pw;
        int64_t lo, hi;
        columnRange(off, g.sw, g.w, g.ow, lo, hi);
        const float c = wk[kh * g.kw + kw];
        for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += c * xr[ow * g.sw + off];
      }
    }
  }
}

void weightGradPlane(const SingleChannelConv& g, const float* xs, const float* gs, double* dw,
                     double* db) {
  for (int64_t kh = 0; kh < g.kh; ++kh)
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const int64_t off = kw * g.dw - g.pw;
      int64_t lo, hi;
      columnRange(off, g.sw, g.w, g.ow, lo, hi);
      float s = 0;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t ow = lo; ow < hi; ++ow)
          s += gs[oh * g.ow + ow] * xs[ih * g.w + ow * g.sw + off];
      }
      dw[kh * g.kw + kw] += s;
    }
  float b = 0;
  for (int64_t i = 0; i < g.oh * g.ow; ++i) b += gs[i];
  *db += b;
}

}  // namespace

__attribute__((target_clones("avx512f", "default"))) void maxPoolPlane(
    const float* in, int64_t H, int64_t W, float* out, int64_t OH, int64_t OW, int64_t kh,
    int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0) {
    // The common 2x2 / stride 2 window, branch-free so that it vectorizes.
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* __restrict r0 = in + 2 * oh * W;
      const float* __restrict r1 = r0 + W;
      float* __restrict o = out + oh * OW;
#pragma omp simd
      for (int64_t ow = 0; ow < OW; ++ow)
        o[ow] =
            std::max(std::max(r0[2 * ow], r0[2 * ow + 1]), std::max(r1[2 * ow], r1[2 * ow + 1]));
    }
    return;
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t h0 = std::max<int64_t>(oh * sh - ph, 0);
    const int64_t h1 = std::min<int64_t>(oh * sh - ph + kh, H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t w0 = std::max<int64_t>(ow * sw - pw, 0);
      const int64_t w1 = std::min<int64_t>(ow * sw - pw + kw, W);
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t c = w0; c < w1; ++c) m = std::max(m, in[h * W + c]);
      out[oh * OW + ow] = m;
    }
  }
}

void singleChannelConvForward(const SingleChannelConv& g, const float* x, const float* w,
                              const float* b, float* y, const SingleChannelEpilogue* ep) {
  const Padded p = padded(g);
  const bool pool = ep && ep->kh > 0;
  const int64_t outPlane = pool ? ep->oh * ep->ow : g.oh * g.ow;
  // A thread per image: its padded plane serves every output channel.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xs = x + n * g.h * g.w;
    thread_local std::vector<float> xp, acc, plane;  // kept across calls: no allocation per step
    if (p.ok) {
      xp.resize(p.size);
      acc.resize(g.oh * p.wp);
      padPlane(g, p, xs, xp.data());
    }
    if (pool) plane.resize(g.oh * g.ow);
    for (int64_t o = 0; o < g.oc; ++o) {
      float* out = y + (n * g.oc + o) * outPlane;
      float* conv = pool ? plane.data() : out;
      const float* wk = w + o * g.kh * g.kw;
      if (p.ok)
        forwardPadded(g, p, xp.data(), wk, b ? b[o] : 0.0f, acc.data(), conv);
      else
        forwardPlane(g, xs, wk, b ? b[o] : 0.0f, conv);
      if (pool)
        maxPoolPlane(conv, g.oh, g.ow, out, ep->oh, ep->ow, ep->kh, ep->kw, ep->sh, ep->sw, 0, 0);
      // Relu commutes with max, so it runs on the (smaller) pooled plane.
      if (ep && ep->relu)
        for (int64_t i = 0; i < outPlane; ++i) out[i] = std::max(out[i], 0.0f);
    }
  }
}

void singleChannelConvWeightGrad(const SingleChannelConv& g, const float* x, const float* dy,
                                 float* dw, float* db) {
  const int64_t k = g.kh * g.kw, per = k + 1;
  const Padded p = padded(g);
  // Each thread takes whole images (padding each once for all output channels) into its own
  // partial sums, added in thread order: the result is fixed for a given thread count, like
  // oneDNN's own reductions.
  const int threads = omp_get_max_threads();
  std::vector<double> part(static_cast<size_t>(threads) * g.oc * per, 0.0);
#pragma omp parallel num_threads(threads)
  {
    double* mine = part.data() + static_cast<size_t>(omp_get_thread_num()) * g.oc * per;
    thread_local std::vector<float> xp, dyp;
    if (p.ok) {
      xp.resize(p.size);
      dyp.assign(g.oh * p.wp, 0.0f);
    }
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      const float* xs = x + n * g.h * g.w;
      if (p.ok) padPlane(g, p, xs, xp.data());
      for (int64_t o = 0; o < g.oc; ++o) {
        const float* gs = dy + (n * g.oc + o) * g.oh * g.ow;
        double* acc = mine + o * per;
        if (!p.ok) {
          weightGradPlane(g, xs, gs, acc, acc + k);
          continue;
        }
        for (int64_t oh = 0; oh < g.oh; ++oh)
          std::copy_n(gs + oh * g.ow, g.ow, dyp.data() + oh * p.wp);
        weightGradPadded(g, p, xp.data(), dyp.data(), acc, acc + k);
      }
    }
  }
  for (int64_t o = 0; o < g.oc; ++o) {
    for (int64_t i = 0; i <= k; ++i) {
      double v = 0;
      for (int t = 0; t < threads; ++t) v += part[(static_cast<size_t>(t) * g.oc + o) * per + i];
      if (i < k)
        dw[o * k + i] = static_cast<float>(v);
      else
        db[o] = static_cast<float>(v);
    }
  }
}

}  // namespace dw::engine::onednn
