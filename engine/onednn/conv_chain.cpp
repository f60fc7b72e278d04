// The kernel of a Conv node that runs a chain of convolutions (fusion/conv_chains.cpp): an
// optional 1x1 widening, a depthwise filter and an optional 1x1 narrowing, NHWC in and out.
// Each image's output rows go in bands: the widened rows a band needs are computed into a
// buffer of the thread's (the rows it shares with the band before are kept, not recomputed), the
// depthwise stage filters them into a second buffer, and the narrowing writes the band's output
// rows, adding the residual. The widened tensor, the largest of the block, then lives in the L2
// cache and never goes to memory.
//
// The 1x1 stages are register-blocked products (up to 6 rows x 64 channels in 24 AVX-512
// accumulators, the weights packed [C_in][C_out rounded up to 16]) with the bias, a clamp (Relu,
// ReLU6) and the residual applied before the single store; other activations (SiLU) run over
// the band once it is written, while it is in the cache. The depthwise stage holds a channel
// vector's window of weights in registers and walks the output row.
//
// Threads take whole images where there are as many as threads, else bands of rows of each
// image, each recomputing the widened rows at its band's edge; where that would widen a tenth
// more rows than the image has (a few rows, a large window), they split the image's channels
// for the widening and the depthwise stage, then its pixels for the narrowing (EfficientNet-B0 at
// batch 1, its three 14x14 blocks with 5x5 windows and the stride-2 one after them: 0.538 ->
// 0.458 ms by the profile).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/onednn/fused_activation.h"
#include "engine/onednn/grad_common.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/onednn/vector_lanes.h"

// GCC 12's unmasked max and min intrinsics start from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once they are inlined (as in vector_math.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dw::engine::onednn {

namespace {

constexpr int64_t kV = 16;  // floats per vector
// The widened rows a band keeps, at most: a quarter of a 1 MiB L2 cache, with room for the
// depthwise rows, the weights and the output. (128 KiB was 2-3% slower on mobilenet_v2 and
// efficientnet_b0 at batch 8; 512 KiB within 1%.)
constexpr int64_t kBandBytes = 256 * 1024;

int64_t roundUp(int64_t v) {
  return (v + kV - 1) / kV * kV;
}

struct Clamp {
  float lo, hi;
};

// y[i][0 .. 16 NR) = clamp(bias + sum_k x[i][k] w[k][..] + res[i][..]) for MR rows; the last
// vector's lanes limited by `last`.
// x's channels come in blocks of 16, `kbs` floats apart (16 for NHWC rows, a plane of 16
// channels for nChw16c).
template <int MR, int NR>
DW_AVX512 __attribute__((always_inline)) inline void pwTile(const float* x, int64_t ldx,
                                                            int64_t kbs, int64_t K, const float* w,
                                                            int64_t ldw, const float* bias,
                                                            float* y, int64_t ldy, const float* res,
                                                            int64_t ldr, __mmask16 last, Clamp c) {
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) {
    const __m512 b = _mm512_loadu_ps(bias + j * kV);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) acc[i][j] = b;
  }
  for (int64_t k0 = 0; k0 < K; k0 += kV) {
    const float* xb = x + k0 / kV * kbs;
    const int64_t kn = std::min(kV, K - k0);
    for (int64_t kk = 0; kk < kn; ++kk) {
      const float* wk = w + (k0 + kk) * ldw;
      __m512 b[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) b[j] = _mm512_loadu_ps(wk + j * kV);
#pragma GCC unroll 14
      for (int i = 0; i < MR; ++i) {
        const __m512 a = _mm512_set1_ps(xb[i * ldx + kk]);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
      }
    }
  }
  const __m512 lo = _mm512_set1_ps(c.lo), hi = _mm512_set1_ps(c.hi);
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const __mmask16 m = j == NR - 1 ? last : __mmask16(0xFFFF);
      __m512 v = acc[i][j];
      if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + i * ldr + j * kV));
      // Operands in this order pass a NaN on (max and min return their second operand then).
      v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
      _mm512_mask_storeu_ps(y + i * ldy + j * kV, m, v);
    }
}

// Rows [0, M) in tiles of MR, the last one narrower.
template <int MR, int NR>
DW_AVX512 void pwColumns(const float* x, int64_t ldx, int64_t kbs, int64_t M, int64_t K,
                         const float* w, int64_t ldw, const float* bias, float* y, int64_t ldy,
                         const float* res, int64_t ldr, __mmask16 last, Clamp c) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR)
    pwTile<MR, NR>(x + m * ldx, ldx, kbs, K, w, ldw, bias, y + m * ldy, ldy,
                   res ? res + m * ldr : nullptr, ldr, last, c);
  if (m == M) return;
  const int64_t left = M - m;
  const float* r = res ? res + m * ldr : nullptr;
  // A switch rather than recursion: each width's tail is one call.
  switch (left) {
#define DW_TAIL(n)                                                                              \
  case n:                                                                                       \
    if constexpr (n < MR)                                                                       \
      pwTile<n, NR>(x + m * ldx, ldx, kbs, K, w, ldw, bias, y + m * ldy, ldy, r, ldr, last, c); \
    break;
    DW_TAIL(1)
    DW_TAIL(2)
    DW_TAIL(3)
    DW_TAIL(4)
    DW_TAIL(5)
    DW_TAIL(6)
    DW_TAIL(7)
    DW_TAIL(8)
    DW_TAIL(9)
    DW_TAIL(10)
    DW_TAIL(11)
    DW_TAIL(12)
    DW_TAIL(13)
#undef DW_TAIL
    default:
      break;
  }
}

// y[m][0, N) = clamp(bias + x[m][0, K) . w + res[m]) for M rows: x's rows `ldx` floats apart
// and its channels in blocks `kbs` apart (pwTile); w is [K][ldw], ldw and bias padded to whole
// vectors.
DW_AVX512 void pointwise(const float* x, int64_t ldx, int64_t kbs, int64_t M, int64_t K,
                         const float* w, int64_t ldw, const float* bias, int64_t N, float* y,
                         int64_t ldy, const float* res, int64_t ldr, Clamp c) {
  for (int64_t j0 = 0; j0 < N; j0 += 4 * kV) {
    const int64_t width = std::min<int64_t>(4 * kV, N - j0);
    const int nr = static_cast<int>((width + kV - 1) / kV);
    const __mmask16 last = lanes(width - (nr - 1) * kV);
    const float* r = res ? res + j0 : nullptr;
    // Tiles of at most 24 accumulators. Taller ones for the narrower widths ran out of
    // registers: GCC kept 12 x 2's weight vectors on the stack and read them back for every
    // multiply-add (8 x 2 took mobilenet_v2 from 1.98 to 1.77 ms at batch 1 and from 14.7 to
    // 12.8 at batch 8).
    switch (nr) {
      case 4:
        pwColumns<6, 4>(x, ldx, kbs, M, K, w + j0, ldw, bias + j0, y + j0, ldy, r, ldr, last, c);
        break;
      case 3:
        pwColumns<6, 3>(x, ldx, kbs, M, K, w + j0, ldw, bias + j0, y + j0, ldy, r, ldr, last, c);
        break;
      case 2:
        pwColumns<8, 2>(x, ldx, kbs, M, K, w + j0, ldw, bias + j0, y + j0, ldy, r, ldr, last, c);
        break;
      default:
        pwColumns<14, 1>(x, ldx, kbs, M, K, w + j0, ldw, bias + j0, y + j0, ldy, r, ldr, last, c);
        break;
    }
  }
}

// sums[c] += rows[r][c] for `rows` rows of C values, `ld` floats apart.
DW_AVX512 void addColumns(const float* rows, int64_t count, int64_t C, int64_t ld, float* sums) {
  for (int64_t c0 = 0; c0 < C; c0 += kV) {
    const __mmask16 m = lanes(C - c0);
    __m512 acc = _mm512_maskz_loadu_ps(m, sums + c0);
    for (int64_t r = 0; r < count; ++r)
      acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, rows + r * ld + c0));
    _mm512_mask_storeu_ps(sums + c0, m, acc);
  }
}

// into[c] += sum_r rows[r][c] for C values a row: a band of rows summed in float (in `scratch`),
// added up in double.
void addSums(const float* rows, int64_t count, int64_t C, int64_t ld, LineFloats& scratch,
             double* into) {
  scratch.assign(static_cast<size_t>(C), 0.0f);
  addColumns(rows, count, C, ld, scratch.data());
  for (int64_t c = 0; c < C; ++c) into[c] += scratch[static_cast<size_t>(c)];
}

// The depthwise geometry: input H x W, window KH x KW, strides, top and left padding.
struct DwGeometry {
  int64_t h, w, kh, kw, sh, sw, pt, pl, oh, ow, c;
};

inline DW_AVX512 void storeClamped(float* at, __mmask16 m, __m512 v, __m512 lo, __m512 hi) {
  _mm512_mask_storeu_ps(at, m, _mm512_min_ps(hi, _mm512_max_ps(lo, v)));
}

// Output pixel `ox` of a depthwise row, for windows that may cross the input's edge: taps
// outside it are skipped (the zero padding).
inline DW_AVX512 __m512 dwEdge(const DwGeometry& g, const float* src, int64_t ldRow, int64_t ldPix,
                               const float* w, int64_t ldw, int64_t iy0, int64_t ky0, int64_t ky1,
                               int64_t kw, int64_t ox, __m512 acc, __mmask16 m) {
  const int64_t ix0 = ox * g.sw - g.pl;
  for (int64_t ky = ky0; ky < ky1; ++ky) {
    const float* row = src + (iy0 + ky) * ldRow;
    for (int64_t kx = 0; kx < kw; ++kx) {
      const int64_t ix = ix0 + kx;
      if (ix < 0 || ix >= g.w) continue;
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, row + ix * ldPix),
                            _mm512_loadu_ps(w + (ky * kw + kx) * ldw), acc);
    }
  }
  return acc;
}

// Output row `oy` of the depthwise stage: src holds input rows from `row0` on, `ldRow` floats a
// row and `ldPix` a pixel; dst gets OW pixels `ldOut` floats apart. Weights [KH KW][ldw].
template <int KH, int KW>
DW_AVX512 void dwRow(const DwGeometry& g, const float* src, int64_t row0, int64_t ldRow,
                     int64_t ldPix, const float* w, int64_t ldw, const float* bias, int64_t oy,
                     float* dst, int64_t ldOut, Clamp c) {
  const int64_t kh = KH ? KH : g.kh, kw = KW ? KW : g.kw;
  const int64_t iy0 = oy * g.sh - g.pt;
  const int64_t ky0 = std::max<int64_t>(0, -iy0), ky1 = std::min<int64_t>(kh, g.h - iy0);
  // Columns whose whole window lies inside the input: [ox0, ox1).
  const int64_t ox0 = std::min(g.ow, (g.pl + g.sw - 1) / g.sw);
  const int64_t span = g.w - kw + g.pl;  // the last window's start may not pass it
  const int64_t ox1 = span < 0 ? ox0 : std::max(ox0, std::min(g.ow, span / g.sw + 1));
  const __m512 lo = _mm512_set1_ps(c.lo), hi = _mm512_set1_ps(c.hi);
  const float* top = src + (iy0 - row0) * ldRow;  // the window's first row (maybe outside)
  for (int64_t c0 = 0; c0 < g.c; c0 += kV) {
    const __mmask16 m = lanes(g.c - c0);
    const __m512 b = _mm512_loadu_ps(bias + c0);
    for (int64_t ox = 0; ox < ox0; ++ox)
      storeClamped(dst + ox * ldOut + c0, m,
                   dwEdge(g, top + c0, ldRow, ldPix, w + c0, ldw, 0, ky0, ky1, kw, ox, b, m), lo,
                   hi);
    if constexpr (KH > 0) {
      // The window's weights in registers; rows outside the input skipped as a whole.
      __m512 wv[KH * KW];
#pragma GCC unroll 49
      for (int t = 0; t < KH * KW; ++t) wv[t] = _mm512_loadu_ps(w + t * ldw + c0);
      // Four pixels at a time: four independent chains of multiply-adds instead of one whose
      // latency bounds the loop.
      const int64_t step = g.sw * ldPix;
      int64_t ox = ox0;
      for (; ox + 4 <= ox1; ox += 4) {
        const float* at = top + (ox * g.sw - g.pl) * ldPix + c0;
        __m512 acc[4] = {b, b, b, b};
#pragma GCC unroll 7
        for (int ky = 0; ky < KH; ++ky) {
          if (ky < ky0 || ky >= ky1) continue;
#pragma GCC unroll 7
          for (int kx = 0; kx < KW; ++kx) {
            const float* tap = at + ky * ldRow + kx * ldPix;
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
              acc[q] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, tap + q * step), wv[ky * KW + kx],
                                       acc[q]);
          }
        }
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) storeClamped(dst + (ox + q) * ldOut + c0, m, acc[q], lo, hi);
      }
      for (; ox < ox1; ++ox) {
        const float* at = top + (ox * g.sw - g.pl) * ldPix + c0;
        __m512 acc = b;
#pragma GCC unroll 7
        for (int ky = 0; ky < KH; ++ky) {
          if (ky < ky0 || ky >= ky1) continue;
#pragma GCC unroll 7
          for (int kx = 0; kx < KW; ++kx)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, at + ky * ldRow + kx * ldPix),
                                  wv[ky * KW + kx], acc);
        }
        storeClamped(dst + ox * ldOut + c0, m, acc, lo, hi);
      }
    } else {
      for (int64_t ox = ox0; ox < ox1; ++ox)
        storeClamped(dst + ox * ldOut + c0, m,
                     dwEdge(g, top + c0, ldRow, ldPix, w + c0, ldw, 0, ky0, ky1, kw, ox, b, m), lo,
                     hi);
    }
    for (int64_t ox = ox1; ox < g.ow; ++ox)
      storeClamped(dst + ox * ldOut + c0, m,
                   dwEdge(g, top + c0, ldRow, ldPix, w + c0, ldw, 0, ky0, ky1, kw, ox, b, m), lo,
                   hi);
  }
}

using DwRowFn = void (*)(const DwGeometry&, const float*, int64_t, int64_t, int64_t, const float*,
                         int64_t, const float*, int64_t, float*, int64_t, Clamp);

DwRowFn dwRowFor(int64_t kh, int64_t kw) {
  if (kh == 3 && kw == 3) return dwRow<3, 3>;
  if (kh == 5 && kw == 5) return dwRow<5, 5>;
  if (kh == 7 && kw == 7) return dwRow<7, 7>;
  return dwRow<0, 0>;
}

// One stage: its weights packed for the loops above (1x1: [C_in][C_out rounded up]; depthwise:
// [KH KW][C rounded up]), the bias padded alike, both with a folded normalization.
struct Stage {
  bool depthwise = false;
  int wIn = 1, bIn = 2, bnIn = 3;  // the node's inputs
  std::optional<float> bnEpsilon;
  std::vector<int64_t> strides{1, 1}, pads{0, 0, 0, 0};
  FusedActivation act;
  Clamp clamp{};
  bool clampOnly = true;  // the activation is a clamp applied in the registers
  int64_t cin = 0, cout = 0, kh = 1, kw = 1;
  LineFloats w, b;
  const void* wFrom = nullptr;  // the constant weights packed
};

}  // namespace

void foldBatchNorm(const float* w, const float* bias, const float* scale, const float* shift,
                   const float* mean, const float* var, float epsilon, int64_t oc, int64_t per,
                   float* wOut, float* bOut) {
  for (int64_t c = 0; c < oc; ++c) {
    const float k = scale[c] / std::sqrt(var[c] + epsilon);
    for (int64_t i = 0; i < per; ++i) wOut[c * per + i] = w[c * per + i] * k;
    bOut[c] = ((bias ? bias[c] : 0.0f) - mean[c]) * k + shift[c];
  }
}

bool CpuBackend::convChains() const {
  return hostMemory() && avx512Usable();
}

namespace {

class ConvChain : public Kernel {
 public:
  explicit ConvChain(const KernelInit& init) {
    const fusion::Fused f = fusion::fusedOf(init.attrs);
    residual_ = f.residual;
    meanOut_ = f.meanOutput;
    blockedX_ = fusion::Fused::listed(f.blockedInputs, 0);
    Stage first;  // the widening: a 1x1, whose window is the default one
    first.bnEpsilon = f.bnEpsilon;
    first.act = FusedActivation(f);
    first.depthwise = init.attrs.getInt("group", 1) > 1;
    stages_.push_back(first);
    for (size_t i = 0; i < f.chain.size(); ++i) {
      const auto& c = f.chain[i];
      Stage s;
      s.wIn = fusion::Fused::chainInput(i, 0);
      s.bIn = c.hasBias ? fusion::Fused::chainInput(i, 1) : -1;
      s.bnIn = fusion::Fused::chainInput(i, 2);
      s.bnEpsilon = c.bnEpsilon;
      if (!c.window.strides.empty()) s.strides = c.window.strides;
      if (!c.window.pads.empty()) s.pads = c.window.pads;
      s.act = FusedActivation(c);
      s.depthwise = c.group > 1;
      stages_.push_back(s);
    }
    for (Stage& s : stages_) s.clampOnly = s.act.clamp(s.clamp.lo, s.clamp.hi);
    constant_.assign(init.constantInputs.begin(), init.constantInputs.end());
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.rank() != 4)
      return Status::error("the fused convolutions take a float32 4-D input, got " +
                           std::string(dtypeName(x.dtype())) + " " + shapeToString(x.shape()) +
                           "; run the session with fuse off");
    DW_RETURN_IF_ERROR(pack(ctx, x.dim(1)));
    const int64_t n = x.dim(0), h = x.dim(2), wd = x.dim(3);
    const Stage& a = stages_[0];
    const Stage& d = stages_[1];
    const Stage* p = stages_.size() == 3 ? &stages_[2] : nullptr;
    DwGeometry g{h, wd, d.kh, d.kw, d.strides[0], d.strides[1], d.pads[0], d.pads[1], 0, 0, d.cout};
    g.oh = (h + d.pads[0] + d.pads[2] - d.kh) / d.strides[0] + 1;
    g.ow = (wd + d.pads[1] + d.pads[3] - d.kw) / d.strides[1] + 1;
    if (h + d.pads[0] + d.pads[2] < d.kh || wd + d.pads[1] + d.pads[3] < d.kw)
      return Status::error("the depthwise window " + std::to_string(d.kh) + "x" +
                           std::to_string(d.kw) + " exceeds the padded input " +
                           shapeToString(x.shape()));
    const int64_t cOut = p ? p->cout : d.cout;
    const Shape outShape{n, cOut, g.oh, g.ow};
    const Tensor* res = residual_ ? &ctx.input(fusion::Fused::kResidualInput) : nullptr;
    if (res && (res->dtype() != DType::kFloat || res->shape() != outShape))
      return Status::error(
          "the residual Add fused into these convolutions needs a float32 "
          "tensor of the output's shape " +
          shapeToString(outShape) + ", got " + shapeToString(res->shape()) +
          "; run the session with fuse off");
    // Y may take the residual's memory, unless the residual is also X, which later bands read.
    DW_ALLOC(y, res && res->raw() != x.raw()
                    ? ctx.outputReusing(0, fusion::Fused::kResidualInput, DType::kFloat, outShape)
                    : ctx.output(0, DType::kFloat, outShape));
    Tensor* mean = meanOut_ ? ctx.output(1, DType::kFloat, Shape{n, cOut, 1, 1}) : nullptr;
    if (meanOut_ && !mean) return ctx.status();
    if (y->size() == 0) return Status();

    const int64_t c0 = x.dim(1), c1 = d.cout, c1p = roundUp(c1);
    // X in NHWC, or in nChw16c (only the widening reads it): a pixel's floats in a row of X,
    // and how far apart its blocks of 16 channels lie.
    if (blockedX_ && c0 % kV)
      return Status::error("an nChw16c input needs channels in blocks of 16, got " +
                           std::to_string(c0) + "; run the session with fuse off");
    const int64_t xPix = blockedX_ ? kV : c0, xBlocks = blockedX_ ? h * wd * kV : kV;
    // Output rows a band: the widened rows it needs within kBandBytes.
    int64_t band = std::max<int64_t>(1, (kBandBytes / (wd * c1p * 4) - d.kh) / d.strides[0] + 1);
    band = std::min(band, g.oh);
    const int nt = std::max(1, omp_get_max_threads());
    // Images the threads cannot share evenly (fewer than threads, or 3 on 2) are cut into parts
    // of rows, a band at least a part: as many as make the busiest thread's rows fewest, each
    // part widening the rows its window reaches past its edges again (counted as half a row's
    // work, the widening's share). Whole images a thread left one thread with two of 3 images
    // (MNASNet at batch 3); n / gcd(n, nt) parts always even the threads out.
    int64_t perImage = 1;
    {
      const int64_t most = std::min<int64_t>(g.oh, nt / std::gcd<int64_t>(n, nt));
      const double halo = 0.5 * static_cast<double>(std::max<int64_t>(0, d.kh - d.strides[0]));
      double best = 0;
      for (int64_t p = 1; p <= most; ++p) {
        const double busiest = static_cast<double>((n * p + nt - 1) / nt) *
                               (static_cast<double>((g.oh + p - 1) / p) + halo);
        if (p == 1 || busiest < best) best = busiest, perImage = p;
      }
    }
    band = std::min(band, (g.oh + perImage - 1) / perImage);
    const int64_t parts = std::min<int64_t>(perImage, (g.oh + band - 1) / band);
    const int64_t eRows = (band - 1) * d.strides[0] + d.kh;
    const int64_t items = n * parts;
    const int team = static_cast<int>(std::min<int64_t>(nt, items));
    buffers_.resize(static_cast<size_t>(team));
    if (meanOut_) sums_.assign(static_cast<size_t>(items * c1p), 0.0);
    const float* xd = x.data<float>();
    const float* rd = res ? res->data<float>() : nullptr;
    float* yd = y->data<float>();
    const DwRowFn dwRowFn = dwRowFor(d.kh, d.kw);
    const int64_t eRow = wd * c1p;  // a widened row's floats
    if (team > 1 && parts > 1 && c1p >= 2 * kV * team) {
      // Rows of one image shared out: each part widens the rows its window reaches past its
      // edges a second time. Where that is much of the work (7 rows, a 5x5 window: 11 rows
      // widened for 7, and one thread with 4 output rows of 7), the threads split the channels
      // instead.
      int64_t widened = 0;
      for (int64_t part = 0; part < parts; ++part) {
        const int64_t r0 = g.oh * part / parts, r1 = g.oh * (part + 1) / parts;
        widened +=
            std::min(h, (r1 - 1) * g.sh - g.pt + g.kh) - std::max<int64_t>(0, r0 * g.sh - g.pt);
      }
      if (widened * 10 > h * 11)
        return channelSplit(g, xd, xPix, xBlocks, n, h, wd, c0, c1, c1p, cOut, rd, yd,
                            meanOut_ ? mean->data<float>() : nullptr, dwRowFn, nt);
    }
    auto run = [&](int tid, int64_t item) {
      Buffers& buf = buffers_[static_cast<size_t>(tid)];
      if (buf.e.size() < static_cast<size_t>(eRows * eRow))
        buf.e.resize(static_cast<size_t>(eRows * eRow));
      if (p && buf.d.size() < static_cast<size_t>(band * g.ow * c1p))
        buf.d.resize(static_cast<size_t>(band * g.ow * c1p));
      const int64_t img = item / parts, part = item % parts;
      const int64_t r0 = g.oh * part / parts, r1 = g.oh * (part + 1) / parts;
      const float* xi = xd + img * h * wd * c0;
      int64_t eLo = 0, eHi = 0;  // the widened rows buf.e holds
      for (int64_t oy = r0; oy < r1; oy += band) {
        const int64_t oyEnd = std::min(oy + band, r1);
        const int64_t lo = std::max<int64_t>(0, oy * g.sh - g.pt);
        const int64_t hi = std::min(h, (oyEnd - 1) * g.sh - g.pt + g.kh);
        int64_t from = lo;
        if (eHi > lo && eLo <= lo) {
          // The rows shared with the band before move to the buffer's start.
          if (lo > eLo)
            std::memmove(buf.e.data(), buf.e.data() + (lo - eLo) * eRow,
                         static_cast<size_t>((eHi - lo) * eRow) * sizeof(float));
          from = eHi;
        }
        if (hi > from) {
          float* e = buf.e.data() + (from - lo) * eRow;
          pointwise(xi + from * wd * xPix, xPix, xBlocks, (hi - from) * wd, c0, a.w.data(), c1p,
                    a.b.data(), c1, e, c1p, nullptr, 0, a.clamp);
          if (!a.clampOnly) a.act.applyHost(e, (hi - from) * eRow);
        }
        eLo = lo;
        eHi = std::max(hi, from);
        // The depthwise rows: into the buffer for the narrowing, else out.
        float* dOut = p ? buf.d.data() : yd + ((img * g.oh + oy) * g.ow) * c1;
        const int64_t ldOut = p ? c1p : c1;
        for (int64_t r = oy; r < oyEnd; ++r)
          dwRowFn(g, buf.e.data(), lo, eRow, c1p, d.w.data(), c1p, d.b.data(), r,
                  dOut + (r - oy) * g.ow * ldOut, ldOut, d.clamp);
        if (!d.clampOnly) d.act.applyHost(dOut, (oyEnd - oy) * g.ow * ldOut);
        if (meanOut_)
          addSums(dOut, (oyEnd - oy) * g.ow, c1, ldOut, buf.band, sums_.data() + item * c1p);
        if (p) {
          const int64_t at = (img * g.oh + oy) * g.ow * cOut;
          pointwise(dOut, c1p, kV, (oyEnd - oy) * g.ow, c1, p->w.data(), roundUp(cOut), p->b.data(),
                    cOut, yd + at, cOut, rd ? rd + at : nullptr, cOut, p->clamp);
          if (!p->clampOnly) p->act.applyHost(yd + at, (oyEnd - oy) * g.ow * cOut);
        }
      }
    };
    if (team == 1) {
      for (int64_t i = 0; i < items; ++i) run(0, i);
    } else {
#pragma omp parallel num_threads(team)
      {
        // Contiguous items a thread: its bands of one image follow each other.
        const int tid = omp_get_thread_num(), size = omp_get_num_threads();
        const int64_t i0 = items * tid / size, i1 = items * (tid + 1) / size;
        for (int64_t i = i0; i < i1; ++i) run(tid, i);
      }
    }
    if (meanOut_) {
      // An image's parts added in order: the same sums whatever the thread count splits.
      const double planes = static_cast<double>(g.oh * g.ow);
      float* m = mean->data<float>();
      for (int64_t img = 0; img < n; ++img)
        for (int64_t c = 0; c < c1; ++c) {
          double total = 0;
          for (int64_t part = 0; part < parts; ++part)
            total += sums_[static_cast<size_t>((img * parts + part) * c1p + c)];
          m[img * c1 + c] = static_cast<float>(total / planes);
        }
    }
    return Status();
  }

 private:
  // One image at a time on the whole team: each thread widens every pixel into the channels it
  // owns (whole vectors of 16, in one buffer of the image's widened rows) and filters them with
  // the depthwise stage, so no row is widened twice; after a barrier each takes a share of the
  // pixels through the narrowing. Its per-channel means add each output row's float sums up in
  // double, in row order.
  Status channelSplit(const DwGeometry& g, const float* xd, int64_t xPix, int64_t xBlocks,
                      int64_t n, int64_t h, int64_t wd, int64_t c0, int64_t c1, int64_t c1p,
                      int64_t cOut, const float* rd, float* yd, float* meanOut, DwRowFn dwRowFn,
                      int nt) {
    const Stage& a = stages_[0];
    const Stage& d = stages_[1];
    const Stage* p = stages_.size() == 3 ? &stages_[2] : nullptr;
    const int64_t pixels = h * wd, outPixels = g.oh * g.ow, blocks = c1p / kV;
    wholeE_.resize(static_cast<size_t>(pixels * c1p));
    if (p) wholeD_.resize(static_cast<size_t>(outPixels * c1p));
    if (meanOut) sums_.assign(static_cast<size_t>(c1p), 0.0);
#pragma omp parallel num_threads(nt)
    {
      const int tid = omp_get_thread_num(), team = omp_get_num_threads();
      const int64_t col0 = blocks * tid / team * kV, col1 = blocks * (tid + 1) / team * kV;
      const int64_t cols = std::min(col1, c1) - col0;
      DwGeometry gc = g;
      gc.c = cols;
      LineFloats band;
      for (int64_t img = 0; img < n; ++img) {
        float* e = wholeE_.data();
        if (cols > 0) {
          pointwise(xd + img * pixels * c0, xPix, xBlocks, pixels, c0, a.w.data() + col0, c1p,
                    a.b.data() + col0, cols, e + col0, c1p, nullptr, 0, a.clamp);
          if (!a.clampOnly) a.act.applyHostRows(e + col0, pixels, cols, c1p);
          float* dOut = p ? wholeD_.data() : yd + img * outPixels * c1;
          const int64_t ldOut = p ? c1p : c1;
          double* sums = meanOut ? sums_.data() : nullptr;
          for (int64_t r = 0; r < g.oh; ++r) {
            float* row = dOut + r * g.ow * ldOut + col0;
            dwRowFn(gc, e + col0, 0, wd * c1p, c1p, d.w.data() + col0, c1p, d.b.data() + col0, r,
                    row, ldOut, d.clamp);
            if (!d.clampOnly) d.act.applyHostRows(row, g.ow, cols, ldOut);
            if (sums) addSums(row, g.ow, cols, ldOut, band, sums + col0);
          }
          if (meanOut) {
            const double planes = static_cast<double>(outPixels);
            for (int64_t c = 0; c < cols; ++c) {
              meanOut[img * c1 + col0 + c] = static_cast<float>(sums[col0 + c] / planes);
              sums[col0 + c] = 0.0;
            }
          }
        }
        if (p) {
#pragma omp barrier
          const int64_t p0 = outPixels * tid / team, p1 = outPixels * (tid + 1) / team;
          const int64_t at = (img * outPixels + p0) * cOut;
          if (p1 > p0) {
            pointwise(wholeD_.data() + p0 * c1p, c1p, kV, p1 - p0, c1, p->w.data(), roundUp(cOut),
                      p->b.data(), cOut, yd + at, cOut, rd ? rd + at : nullptr, cOut, p->clamp);
            if (!p->clampOnly) p->act.applyHost(yd + at, (p1 - p0) * cOut);
          }
          // The next image's depthwise rows go where this one's are read.
#pragma omp barrier
        }
      }
    }
    return Status();
  }

  struct Buffers {
    LineFloats e, d;  // widened rows; depthwise output rows
    LineFloats band;  // a band's per-channel sums (Fused::meanOutput)
  };

 public:
  // What compute relies on: the widening, the depthwise filter and, where there is one, the
  // narrowing; a fused mean only where the chain ends at its depthwise stage.
  Status wellFormed() const {
    if (stages_.size() < 2 || stages_.size() > 3 || stages_[0].depthwise || !stages_[1].depthwise ||
        (stages_.size() == 3 && stages_[2].depthwise))
      return Status::error(
          "the fused convolutions are not a 1x1, a depthwise and an optional 1x1 one; run the "
          "session with fuse off");
    if (meanOut_ && stages_.size() == 3)
      return Status::error(
          "the per-channel mean fused into these convolutions needs a chain that ends at its "
          "depthwise stage; run the session with fuse off");
    return Status();
  }

 private:
  bool isConstant(int input) const {
    return input >= 0 && static_cast<size_t>(input) < constant_.size() && constant_[input];
  }

  // Checks each stage's weights against the channels flowing in and packs them (once, where
  // they and a folded normalization are constants).
  Status pack(KernelContext& ctx, int64_t channels) {
    const std::string where = "the fused convolution stage ";
    for (size_t i = 0; i < stages_.size(); ++i) {
      Stage& s = stages_[i];
      if (!ctx.hasInput(s.wIn)) return Status::error(where + std::to_string(i) + " has no weights");
      const Tensor& w = ctx.input(s.wIn);
      const int64_t expectIn = s.depthwise ? 1 : channels;
      if (w.dtype() != DType::kFloat || w.rank() != 4 || w.dim(1) != expectIn ||
          (s.depthwise && w.dim(0) != channels) ||
          (!s.depthwise && (w.dim(2) != 1 || w.dim(3) != 1)))
        return Status::error(where + std::to_string(i) + ": weights " + shapeToString(w.shape()) +
                             " do not fit " + std::to_string(channels) +
                             " input channels; run the session with fuse off");
      const bool hasBias = s.bIn >= 0 && ctx.hasInput(s.bIn);
      if (hasBias &&
          (ctx.input(s.bIn).dtype() != DType::kFloat || ctx.input(s.bIn).size() != w.dim(0)))
        return Status::error(where + std::to_string(i) + ": the bias does not have " +
                             std::to_string(w.dim(0)) + " float32 values");
      bool constant = isConstant(s.wIn) && (!hasBias || isConstant(s.bIn));
      const int64_t oc = w.dim(0), per = w.size() / std::max<int64_t>(1, oc);
      if (s.bnEpsilon)
        for (int k = 0; k < 4; ++k) {
          if (!ctx.hasInput(s.bnIn + k) || ctx.input(s.bnIn + k).dtype() != DType::kFloat ||
              ctx.input(s.bnIn + k).size() != oc)
            return Status::error(where + std::to_string(i) +
                                 ": the folded BatchNormalization needs float32 scale, B, mean "
                                 "and var of " +
                                 std::to_string(oc) + " values");
          constant = constant && isConstant(s.bnIn + k);
        }
      s.cin = s.depthwise ? oc : channels;
      s.cout = oc;
      s.kh = w.dim(2);
      s.kw = w.dim(3);
      channels = oc;
      if (constant && s.wFrom == w.raw()) continue;
      // The weights with the normalization folded in, [C_out][per], then packed.
      std::vector<float> folded(w.data<float>(), w.data<float>() + w.size());
      std::vector<float> bias(static_cast<size_t>(oc), 0.0f);
      if (hasBias) std::copy_n(ctx.input(s.bIn).data<float>(), oc, bias.begin());
      if (s.bnEpsilon)
        foldBatchNorm(w.data<float>(), hasBias ? ctx.input(s.bIn).data<float>() : nullptr,
                      ctx.input(s.bnIn).data<float>(), ctx.input(s.bnIn + 1).data<float>(),
                      ctx.input(s.bnIn + 2).data<float>(), ctx.input(s.bnIn + 3).data<float>(),
                      *s.bnEpsilon, oc, per, folded.data(), bias.data());
      const int64_t ocp = roundUp(oc);
      s.b.assign(static_cast<size_t>(ocp), 0.0f);
      std::copy(bias.begin(), bias.end(), s.b.begin());
      if (s.depthwise) {
        s.w.assign(static_cast<size_t>(s.kh * s.kw * ocp), 0.0f);
        for (int64_t c = 0; c < oc; ++c)
          for (int64_t t = 0; t < s.kh * s.kw; ++t) s.w[t * ocp + c] = folded[c * per + t];
      } else {
        s.w.assign(static_cast<size_t>(s.cin * ocp), 0.0f);
        for (int64_t o = 0; o < oc; ++o)
          for (int64_t c = 0; c < s.cin; ++c) s.w[c * ocp + o] = folded[o * per + c];
      }
      s.wFrom = constant ? w.raw() : nullptr;
    }
    return Status();
  }

  bool residual_ = false;
  bool blockedX_ = false;     // X in nChw16c (markNhwcChains), else NHWC
  bool meanOut_ = false;      // output 1: the per-channel mean of output 0 (Fused::meanOutput)
  std::vector<double> sums_;  // its partial sums, a row of c1p per work item
  std::vector<Stage> stages_;
  std::vector<bool> constant_;
  std::vector<Buffers> buffers_;
  LineFloats wholeE_, wholeD_;  // an image's widened and depthwise pixels (channelSplit)
};

}  // namespace

Result<std::unique_ptr<Kernel>> makeConvChain(const KernelInit& init) {
  auto k = std::make_unique<ConvChain>(init);
  DW_RETURN_IF_ERROR(k->wellFormed());
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace dw::engine::onednn
