// Attention (opsets 23 to 25): scaled dot-product attention over heads, as PyTorch's
// scaled_dot_product_attention and nn.MultiheadAttention export from opset 23.
//
// Q is [B, Hq, Sq, D] or, packed, [B, Sq, Hq * D] (then q_num_heads and kv_num_heads say the
// head counts); K and V likewise with Hkv heads, Hq a multiple of Hkv (grouped-query attention:
// query head h reads key/value head h / (Hq / Hkv)). past_key and past_value ([B, Hkv, P, D])
// come before K and V along the sequence; present_key and present_value are the joined caches.
// For each query i and key j of the T = P + Skv keys the score is (q_i . k_j) * scale (default
// 1 / sqrt(D)), capped to softcap * tanh(score / softcap) when softcap > 0, plus the mask: a
// bool attn_mask blocks (false) or allows, a float one is added; a mask shorter than T blocks
// the keys past its end; is_causal blocks j > i + P. Opset 24's nonpad_kv_seqlen[b] blocks the
// keys from that index on (and, without a past, places the causal frontier of image b at
// nonpad_kv_seqlen[b] - Sq). Opset 25's sliding window blocks the keys more than
// left_window_size before or right_window_size after the query's position i + offset (the
// causal frontier's offset; -1: that side unbounded). The softmax over j weights V; Y has Q's
// layout. qk_matmul_output gives the scores at the stage qk_matmul_output_mode names: 0 the scaled
// products, 1 after the softcap, 2 after the mask too, 3 after the softmax (as ONNX Runtime 1.30
// gives them). A query whose every key is blocked gets zeros (ONNX Runtime's answer; the ONNX
// reference's softmax gives NaN there). Statistics are taken in double.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"
#include "ops/unary.h"

namespace dw::engine {

namespace {

// The node's attributes (the forward's, which AttentionGrad carries too).
struct AttentionAttrs {
  explicit AttentionAttrs(const Attributes& a)
      : causal(a.getInt("is_causal", 0) != 0),
        qHeads(a.getInt("q_num_heads", 0)),
        kvHeads(a.getInt("kv_num_heads", 0)),
        mode(a.getInt("qk_matmul_output_mode", 0)),
        scale(a.has("scale") ? a.getFloat("scale") : 0.0f),
        softcap(a.getFloat("softcap", 0.0f)),
        left(a.getInt("left_window_size", -1)),
        right(a.getInt("right_window_size", -1)) {}
  bool causal;
  int64_t qHeads, kvHeads, mode;
  int64_t left, right;  // the sliding window (opset 25); -1: unbounded
  float scale;  // 0: 1 / sqrt(head size)
  float softcap;
};

// One evaluation's geometry, read from Q, K, V, the mask, the caches and nonpad_kv_seqlen at
// inputs `at`, `at` + 1... (0 for the op, 1 for its gradient, whose input 0 is dY).
struct Problem {
  bool packed = false;
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Skv = 0, D = 0, Dv = 0, P = 0, T = 0;
  std::vector<int64_t> nonpad;
  const Tensor* mask = nullptr;
  std::vector<int64_t> mstride = std::vector<int64_t>(4, 0);
  int64_t maskLen = 0;
  double scale = 1;

  // Where head h's row s of a [B, S, heads * size] or [B, heads, S, size] tensor starts.
  int64_t rowAt(int64_t b, int64_t h, int64_t heads, int64_t S, int64_t s, int64_t size) const {
    return packed ? (b * S + s) * heads * size + h * size : ((b * heads + h) * S + s) * size;
  }
};

Status parseProblem(KernelContext& ctx, int at, const AttentionAttrs& a, Problem& pb) {
  const Tensor& q = ctx.input(at);
  const Tensor& k = ctx.input(at + 1);
  const Tensor& v = ctx.input(at + 2);
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    return Status::error(
        "Q, K and V must all be 3-D [B, S, heads * size] or all 4-D "
        "[B, heads, S, size]; they have " +
        std::to_string(q.rank()) + ", " + std::to_string(k.rank()) + " and " +
        std::to_string(v.rank()) + " dimensions");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    return Status::error("Q, K and V must be of one type");
  pb.packed = q.rank() == 3;
  pb.B = q.dim(0);
  if (pb.packed) {
    if (a.qHeads < 1 || a.kvHeads < 1)
      return Status::error("3-D Q, K and V need the q_num_heads and kv_num_heads attributes");
    pb.Hq = a.qHeads;
    pb.Hkv = a.kvHeads;
    pb.Sq = q.dim(1);
    pb.Skv = k.dim(1);
    if (q.dim(2) % pb.Hq || k.dim(2) % pb.Hkv || v.dim(2) % pb.Hkv)
      return Status::error("the hidden sizes of Q, K and V must divide by their head counts");
    pb.D = q.dim(2) / pb.Hq;
    pb.Dv = v.dim(2) / pb.Hkv;
    if (k.dim(2) / pb.Hkv != pb.D) return Status::error("K's head size differs from Q's");
  } else {
    pb.Hq = q.dim(1);
    pb.Hkv = k.dim(1);
    pb.Sq = q.dim(2);
    pb.Skv = k.dim(2);
    pb.D = q.dim(3);
    pb.Dv = v.dim(3);
    if (k.dim(3) != pb.D) return Status::error("K's head size differs from Q's");
    if (v.dim(1) != pb.Hkv) return Status::error("K and V have different head counts");
  }
  if (k.dim(0) != pb.B || v.dim(0) != pb.B || (pb.packed ? v.dim(1) : v.dim(2)) != pb.Skv)
    return Status::error("K and V must match Q's batch and each other's sequence length");
  if (pb.Hkv < 1 || pb.Hq % pb.Hkv)
    return Status::error("Q's " + std::to_string(pb.Hq) + " heads must be a multiple of K's " +
                         std::to_string(pb.Hkv));
  // The caches: [B, Hkv, P, size] before K and V.
  const bool hasPast = ctx.hasInput(at + 4) || ctx.hasInput(at + 5);
  if (hasPast && !(ctx.hasInput(at + 4) && ctx.hasInput(at + 5)))
    return Status::error("past_key and past_value come together");
  if (hasPast) {
    const Tensor& pk = ctx.input(at + 4);
    const Tensor& pv = ctx.input(at + 5);
    if (pk.rank() != 4 || pv.rank() != 4 || pk.dim(0) != pb.B || pk.dim(1) != pb.Hkv ||
        pk.dim(3) != pb.D || pv.dim(0) != pb.B || pv.dim(1) != pb.Hkv || pv.dim(3) != pb.Dv ||
        pv.dim(2) != pk.dim(2) || pk.dtype() != q.dtype() || pv.dtype() != q.dtype())
      return Status::error(
          "past_key and past_value must be [B, kv heads, P, head size] of "
          "Q's type, matching K and V");
    pb.P = pk.dim(2);
  }
  pb.T = pb.P + pb.Skv;
  if (ctx.hasInput(at + 6)) {
    const Tensor& n = ctx.input(at + 6);
    if (n.dtype() != DType::kInt64 || n.size() != pb.B)
      return Status::error("nonpad_kv_seqlen needs one int64 per batch entry");
    pb.nonpad.assign(n.data<int64_t>(), n.data<int64_t>() + pb.B);
    for (int64_t len : pb.nonpad)
      if (len < 0 || len > pb.T)
        return Status::error("nonpad_kv_seqlen holds " + std::to_string(len) + ", outside 0.." +
                             std::to_string(pb.T));
  }
  // The mask, right-aligned against [B, Hq, Sq, T'] (T' <= T: the keys past it are blocked).
  if (ctx.hasInput(at + 3)) {
    const Tensor& mask = ctx.input(at + 3);
    pb.mask = &mask;
    if (mask.dtype() != DType::kBool && mask.dtype() != q.dtype())
      return Status::error(std::string("attn_mask is ") + dtypeName(mask.dtype()) +
                           "; it must be bool (true: attend) or of Q's type (added)");
    if (mask.rank() < 2 || mask.rank() > 4)
      return Status::error("attn_mask needs 2 to 4 dimensions");
    const Shape want{pb.B, pb.Hq, pb.Sq, pb.T};
    const size_t r = mask.rank();
    int64_t stride = 1;
    for (size_t i = 0; i < r; ++i) {
      const size_t md = r - 1 - i, wd = 3 - i;
      const int64_t dim = mask.dim(md);
      if (wd == 3) {
        if (dim > pb.T)
          return Status::error("attn_mask covers " + std::to_string(dim) + " keys; there are " +
                               std::to_string(pb.T));
        pb.maskLen = dim;
        pb.mstride[wd] = 1;
      } else if (dim == want[wd]) {
        pb.mstride[wd] = stride;
      } else if (dim != 1) {
        return Status::error("attn_mask of shape " + shapeToString(mask.shape()) +
                             " does not broadcast to [batch, heads, " + std::to_string(pb.Sq) +
                             ", " + std::to_string(pb.T) + "]");
      }
      stride *= dim;
    }
  }
  pb.scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(pb.D));
  return Status();
}

// K and V joined with their caches, [B, Hkv, T, size], into `kAll` and `vAll`.
template <class E>
void joinCaches(KernelContext& ctx, int at, const Problem& pb, E* kAll, E* vAll) {
  const Tensor& k = ctx.input(at + 1);
  const Tensor& v = ctx.input(at + 2);
  for (int64_t b = 0; b < pb.B; ++b)
    for (int64_t h = 0; h < pb.Hkv; ++h) {
      E* kd = kAll + (b * pb.Hkv + h) * pb.T * pb.D;
      E* vd = vAll + (b * pb.Hkv + h) * pb.T * pb.Dv;
      if (pb.P) {
        std::copy_n(ctx.input(at + 4).data<E>() + (b * pb.Hkv + h) * pb.P * pb.D, pb.P * pb.D, kd);
        std::copy_n(ctx.input(at + 5).data<E>() + (b * pb.Hkv + h) * pb.P * pb.Dv, pb.P * pb.Dv,
                    vd);
      }
      for (int64_t s = 0; s < pb.Skv; ++s) {
        std::copy_n(k.data<E>() + pb.rowAt(b, h, pb.Hkv, pb.Skv, s, pb.D), pb.D,
                    kd + (pb.P + s) * pb.D);
        std::copy_n(v.data<E>() + pb.rowAt(b, h, pb.Hkv, pb.Skv, s, pb.Dv), pb.Dv,
                    vd + (pb.P + s) * pb.Dv);
      }
    }
}

// Query row i of head h of image b, given its scaled products `raw` with the T keys: the capped
// scores (capped), the scores with the mask (z) and the softmax weights (p, all 0 where every
// key is blocked). `capped` and `z` may be null.
// R is double, or float for the float path (its exponential vectorizes).
template <class R>
void finishRow(const Problem& pb, const AttentionAttrs& a, int64_t b, int64_t h, int64_t i,
               const R* raw, R* capped, R* z, R* p) {
  const R inf = std::numeric_limits<R>::infinity();
  const int64_t offset = pb.P ? pb.P : (pb.nonpad.empty() ? 0 : pb.nonpad[b] - pb.Sq);
  const bool boolMask = pb.mask && pb.mask->dtype() == DType::kBool;
  R top = -inf;
  for (int64_t j = 0; j < pb.T; ++j) {
    R s = raw[j];
    if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
    if (capped) capped[j] = s;
    R bias = 0;
    if (pb.mask) {
      if (j >= pb.maskLen) {
        bias = -inf;
      } else {
        const int64_t at = b * pb.mstride[0] + h * pb.mstride[1] + i * pb.mstride[2] + j;
        bias = boolMask ? (pb.mask->data<bool>()[at] ? R(0) : -inf)
                        : static_cast<R>(pb.mask->getDouble(at));
      }
    }
    if (a.causal && j > i + offset) bias = -inf;
    if ((a.left >= 0 && i + offset - j > a.left) || (a.right >= 0 && j - i - offset > a.right))
      bias = -inf;
    if (!pb.nonpad.empty() && j >= pb.nonpad[b]) bias = -inf;
    s += bias;
    if (z) z[j] = s;
    p[j] = s;
    top = std::max(top, s);
  }
  if (top == -inf) {  // every key blocked: weights and output stay 0
    std::fill(p, p + pb.T, R(0));
    return;
  }
  R sum = 0;
  for (int64_t j = 0; j < pb.T; ++j) {
    R e;
    if constexpr (std::is_same_v<R, float>)
      e = p[j] == -inf ? 0.0f : ops::detail::expArith(p[j] - top);
    else
      e = std::exp(p[j] - top);
    sum += p[j] = e;
  }
  const R scale = R(1) / sum;
  for (int64_t j = 0; j < pb.T; ++j) p[j] *= scale;
}

// The scaled products of query row qi with the T keys of `kd`, in double.
template <class E>
void rawScores(const Problem& pb, const E* qi, const E* kd, double* raw) {
  for (int64_t j = 0; j < pb.T; ++j) {
    double dot = 0;
    const E* kj = kd + j * pb.D;
    for (int64_t d = 0; d < pb.D; ++d) dot += static_cast<double>(qi[d]) * kj[d];
    raw[j] = dot * pb.scale;
  }
}

class Attention : public Kernel {
 public:
  explicit Attention(const KernelInit& init) : a_(init.attrs), strict_(init.opset >= 25) {
    if (a_.mode < 0 || a_.mode > 3)
      fail("qk_matmul_output_mode is " + std::to_string(a_.mode) +
           "; it must be 0 (scaled QK), 1 (after softcap), 2 (after softcap and mask) or 3 "
           "(after softmax)");
    if (a_.left < -1 || a_.right < -1)
      fail("left_window_size and right_window_size must be -1 (unbounded) or more; they are " +
           std::to_string(a_.left) + " and " + std::to_string(a_.right));
  }

  Status compute(KernelContext& ctx) override {
    Problem pb;
    DW_RETURN_IF_ERROR(parseProblem(ctx, 0, a_, pb));
    if (strict_) {
      // Opset 25 refuses what earlier versions let through.
      if (ctx.wantsOutput(1) != ctx.wantsOutput(2))
        return Status::error("present_key and present_value come together (opset 25)");
      if (ctx.hasInput(6) && (pb.P || ctx.wantsOutput(1)))
        return Status::error(
            "nonpad_kv_seqlen (an external cache) cannot be combined with "
            "past_key/past_value or present_key/present_value (opset 25)");
      if (!pb.packed && (a_.qHeads || a_.kvHeads))
        return Status::error(
            "q_num_heads and kv_num_heads are for 3-D inputs; 4-D Q, K and V "
            "give the head counts themselves (opset 25)");
    }
    const Tensor& q = ctx.input(0);
    const int64_t B = pb.B, Hq = pb.Hq, Hkv = pb.Hkv, Sq = pb.Sq, T = pb.T, D = pb.D, Dv = pb.Dv;
    const Shape yShape = pb.packed ? Shape{B, Sq, Hq * Dv} : Shape{B, Hq, Sq, Dv};
    DW_ALLOC(y, ctx.output(0, q.dtype(), yShape));
    Tensor* pkOut = ctx.wantsOutput(1) ? ctx.output(1, q.dtype(), {B, Hkv, T, D}) : nullptr;
    Tensor* pvOut = ctx.wantsOutput(2) ? ctx.output(2, q.dtype(), {B, Hkv, T, Dv}) : nullptr;
    Tensor* qkOut = ctx.wantsOutput(3) ? ctx.output(3, q.dtype(), {B, Hq, Sq, T}) : nullptr;
    if ((ctx.wantsOutput(1) && !pkOut) || (ctx.wantsOutput(2) && !pvOut) ||
        (ctx.wantsOutput(3) && !qkOut))
      return ctx.status();
    return dispatchFloat(q.dtype(), [&](auto z) -> Status {
      using E = decltype(z);
      std::vector<E> kTmp, vTmp;
      E* kAll = pkOut ? pkOut->data<E>() : (kTmp.resize(B * Hkv * T * D), kTmp.data());
      E* vAll = pvOut ? pvOut->data<E>() : (vTmp.resize(B * Hkv * T * Dv), vTmp.data());
      joinCaches(ctx, 0, pb, kAll, vAll);
      if constexpr (std::is_same_v<E, float>) {
        forwardFloat(pb, q.data<float>(), kAll, vAll, y->data<float>(),
                     qkOut ? qkOut->data<float>() : nullptr);
        return Status();
      }
      std::vector<double> raw(T), capped(T), masked(T), p(T), acc(Dv);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t hk = h / (Hq / Hkv);
          const E* kd = kAll + (b * Hkv + hk) * T * D;
          const E* vd = vAll + (b * Hkv + hk) * T * Dv;
          for (int64_t i = 0; i < Sq; ++i) {
            const E* qi = q.data<E>() + pb.rowAt(b, h, Hq, Sq, i, D);
            rawScores(pb, qi, kd, raw.data());
            finishRow(pb, a_, b, h, i, raw.data(), capped.data(), masked.data(), p.data());
            if (qkOut) {
              const double* stage = a_.mode == 0   ? raw.data()
                                    : a_.mode == 1 ? capped.data()
                                    : a_.mode == 2 ? masked.data()
                                                   : p.data();
              E* row = qkOut->data<E>() + ((b * Hq + h) * Sq + i) * T;
              for (int64_t j = 0; j < T; ++j) row[j] = static_cast<E>(stage[j]);
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t j = 0; j < T; ++j) {
              const E* vj = vd + j * Dv;
              for (int64_t d = 0; d < Dv; ++d) acc[d] += p[j] * static_cast<double>(vj[d]);
            }
            E* yi = y->data<E>() + pb.rowAt(b, h, Hq, Sq, i, Dv);
            for (int64_t d = 0; d < Dv; ++d) yi[d] = static_cast<E>(acc[d]);
          }
        }
      return Status();
    });
  }

 private:
  // float: the heads in parallel, each as two sgemm products (QK^T, then the weights times V
  // straight into Y's layout) around the row work (scale, softcap, mask, softmax) in float. On
  // 8 x 128 tokens of 4 heads of 64 (2 threads) 1.6 ms against 3.3 for the double loops
  // (ONNX Runtime 1.30: 0.83).
  void forwardFloat(const Problem& pb, const float* q, const float* kAll, const float* vAll,
                    float* y, float* qk) const {
    const int64_t Hq = pb.Hq, Hkv = pb.Hkv, Sq = pb.Sq, T = pb.T, D = pb.D, Dv = pb.Dv;
    const int64_t ldq = pb.packed ? Hq * D : D, ldy = pb.packed ? Hq * Dv : Dv;
#pragma omp parallel
    {
      std::vector<float> products(Sq * T), weights(Sq * T), capped(T), masked(T);
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < pb.B * Hq; ++bh) {
        const int64_t b = bh / Hq, h = bh % Hq, hk = h / (Hq / Hkv);
        const float* kd = kAll + (b * Hkv + hk) * T * D;
        const float* vd = vAll + (b * Hkv + hk) * T * Dv;
        if (Sq == 0 || T == 0) {
          if (Sq && Dv)
            gemmF32(false, false, Sq, Dv, 0, nullptr, 1, nullptr, 1,
                    y + pb.rowAt(b, h, Hq, Sq, 0, Dv), ldy);
          continue;
        }
        gemmF32(false, true, Sq, T, D, q + pb.rowAt(b, h, Hq, Sq, 0, D), ldq, kd, D,
                products.data(), T);
        for (int64_t i = 0; i < Sq; ++i) {
          float* raw = products.data() + i * T;
          for (int64_t j = 0; j < T; ++j) raw[j] = static_cast<float>(raw[j] * pb.scale);
          float* p = weights.data() + i * T;
          finishRow(pb, a_, b, h, i, raw, capped.data(), masked.data(), p);
          if (qk) {
            const float* stage = a_.mode == 0   ? raw
                                 : a_.mode == 1 ? capped.data()
                                 : a_.mode == 2 ? masked.data()
                                                : p;
            std::copy_n(stage, T, qk + ((b * Hq + h) * Sq + i) * T);
          }
        }
        if (Dv > 0)
          gemmF32(false, false, Sq, Dv, T, weights.data(), T, vd, Dv,
                  y + pb.rowAt(b, h, Hq, Sq, 0, Dv), ldy);
      }
    }
  }

  AttentionAttrs a_;
  bool strict_;  // opset 25's checks
};

// AttentionGrad (com.deepwire.grad): dQ, dK, dV and the caches' gradients from dY, recomputing
// each query row's weights p: with dp_j = dY . v_j and dz_j = p_j (dp_j - sum_l p_l dp_l),
// ds_j = dz_j (1 - tanh^2(s_j / softcap)) under a softcap, dq = scale sum_j ds_j k_j,
// dk_j += scale ds_j q and dv_j += p_j dY, summed over the query heads sharing a key head.
class AttentionGrad : public Kernel {
 public:
  explicit AttentionGrad(const KernelInit& init) : a_(init.attrs) {}

  Status compute(KernelContext& ctx) override {
    Problem pb;
    DW_RETURN_IF_ERROR(parseProblem(ctx, 1, a_, pb));
    const Tensor& dy = ctx.input(0);
    const Tensor& q = ctx.input(1);
    const int64_t B = pb.B, Hq = pb.Hq, Hkv = pb.Hkv, Sq = pb.Sq, Skv = pb.Skv, T = pb.T, D = pb.D,
                  Dv = pb.Dv, P = pb.P;
    const Shape yShape = pb.packed ? Shape{B, Sq, Hq * Dv} : Shape{B, Hq, Sq, Dv};
    if (dy.shape() != yShape || dy.dtype() != q.dtype())
      return Status::error("dY must have Y's shape " + shapeToString(yShape));
    Tensor* out[5] = {};
    const Tensor* like[5] = {&q, &ctx.input(2), &ctx.input(3), nullptr, nullptr};
    if (P) like[3] = &ctx.input(5), like[4] = &ctx.input(6);
    for (int o = 0; o < 5; ++o)
      if (ctx.wantsOutput(o) && like[o]) {
        out[o] = ctx.output(o, q.dtype(), like[o]->shape());
        if (!out[o]) return ctx.status();
      }
    return dispatchFloat(q.dtype(), [&](auto z) -> Status {
      using E = decltype(z);
      std::vector<E> kAll(B * Hkv * T * D), vAll(B * Hkv * T * Dv);
      joinCaches(ctx, 1, pb, kAll.data(), vAll.data());
      std::vector<double> dq(B * Hq * Sq * D, 0.0), dk(B * Hkv * T * D, 0.0),
          dv(B * Hkv * T * Dv, 0.0);
      std::vector<double> raw(T), p(T), dp(T);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t hk = h / (Hq / Hkv);
          const E* kd = kAll.data() + (b * Hkv + hk) * T * D;
          const E* vd = vAll.data() + (b * Hkv + hk) * T * Dv;
          double* dkd = dk.data() + (b * Hkv + hk) * T * D;
          double* dvd = dv.data() + (b * Hkv + hk) * T * Dv;
          for (int64_t i = 0; i < Sq; ++i) {
            const E* qi = q.data<E>() + pb.rowAt(b, h, Hq, Sq, i, D);
            const E* gi = dy.data<E>() + pb.rowAt(b, h, Hq, Sq, i, Dv);
            rawScores(pb, qi, kd, raw.data());
            finishRow<double>(pb, a_, b, h, i, raw.data(), nullptr, nullptr, p.data());
            double dot = 0;
            for (int64_t j = 0; j < T; ++j) {
              double s = 0;
              for (int64_t d = 0; d < Dv; ++d) s += static_cast<double>(gi[d]) * vd[j * Dv + d];
              dp[j] = s;
              dot += p[j] * s;
              for (int64_t d = 0; d < Dv; ++d) dvd[j * Dv + d] += p[j] * gi[d];
            }
            double* dqi = dq.data() + ((b * Hq + h) * Sq + i) * D;
            for (int64_t j = 0; j < T; ++j) {
              double ds = p[j] * (dp[j] - dot);
              if (a_.softcap > 0) {
                const double t = std::tanh(raw[j] / a_.softcap);
                ds *= 1 - t * t;
              }
              ds *= pb.scale;
              if (ds == 0) continue;
              for (int64_t d = 0; d < D; ++d) {
                dqi[d] += ds * kd[j * D + d];
                dkd[j * D + d] += ds * qi[d];
              }
            }
          }
        }
      // Back to the inputs' layouts: Q's, K's and V's, and the caches' first P positions.
      if (out[0])
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Sq; ++i)
              for (int64_t d = 0; d < D; ++d)
                out[0]->data<E>()[pb.rowAt(b, h, Hq, Sq, i, D) + d] =
                    static_cast<E>(dq[((b * Hq + h) * Sq + i) * D + d]);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t t = 0; t < T; ++t) {
            const double* gk = dk.data() + ((b * Hkv + h) * T + t) * D;
            const double* gv = dv.data() + ((b * Hkv + h) * T + t) * Dv;
            E* ok =
                t < P ? (out[3] ? out[3]->data<E>() + ((b * Hkv + h) * P + t) * D : nullptr)
                      : (out[1] ? out[1]->data<E>() + pb.rowAt(b, h, Hkv, Skv, t - P, D) : nullptr);
            E* ov = t < P ? (out[4] ? out[4]->data<E>() + ((b * Hkv + h) * P + t) * Dv : nullptr)
                          : (out[2] ? out[2]->data<E>() + pb.rowAt(b, h, Hkv, Skv, t - P, Dv)
                                    : nullptr);
            if (ok)
              for (int64_t d = 0; d < D; ++d) ok[d] = static_cast<E>(gk[d]);
            if (ov)
              for (int64_t d = 0; d < Dv; ++d) ov[d] = static_cast<E>(gv[d]);
          }
      return Status();
    });
  }

 private:
  AttentionAttrs a_;
};

// RotaryEmbedding (opset 23): rotates pairs of each head's first rotary_embedding_dim values
// (all of them by default) by the angles whose cosines and sines the caches hold: pairs are
// (x[i], x[i + rot / 2]), or with interleaved (x[2i], x[2i + 1]); y1 = x1 cos - x2 sin,
// y2 = x1 sin + x2 cos, the rest copied. X is [B, heads, S, size] or, packed, [B, S, heads *
// size] (num_heads says how many). The caches are [B, S, rot / 2], or with position_ids [B, S]
// rows of [positions, rot / 2] tables. Its gradient is the same rotation with the sines negated.
class RotaryEmbedding : public Kernel {
 public:
  explicit RotaryEmbedding(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)),
        rot_(init.attrs.getInt("rotary_embedding_dim", 0)),
        interleaved_(init.attrs.getInt("interleaved", 0) != 0) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& cosT = ctx.input(1);
    const Tensor& sinT = ctx.input(2);
    if (x.rank() != 3 && x.rank() != 4)
      return Status::error("X must be [B, heads, S, size] or [B, S, heads * size]");
    const bool packed = x.rank() == 3;
    const int64_t B = x.dim(0), S = packed ? x.dim(1) : x.dim(2);
    if (packed && (heads_ < 1 || x.dim(2) % heads_))
      return Status::error("a 3-D X needs num_heads, dividing its last dimension");
    const int64_t H = packed ? heads_ : x.dim(1), D = packed ? x.dim(2) / heads_ : x.dim(3);
    const int64_t rot = rot_ ? rot_ : D, half = rot / 2;
    if (rot < 0 || rot > D || rot % 2)
      return Status::error("rotary_embedding_dim is " + std::to_string(rot) +
                           "; it must be even and at most the head size " + std::to_string(D));
    if (cosT.dtype() != x.dtype() || sinT.dtype() != x.dtype() || cosT.shape() != sinT.shape())
      return Status::error("cos_cache and sin_cache must have one shape and X's type");
    std::vector<int64_t> pos;
    if (ctx.hasInput(3)) {
      const Tensor& p = ctx.input(3);
      if (p.dtype() != DType::kInt64 || p.shape() != Shape{B, S})
        return Status::error("position_ids must be int64 [" + std::to_string(B) + ", " +
                             std::to_string(S) + "]");
      if (cosT.rank() != 2 || cosT.dim(1) != half)
        return Status::error("with position_ids the caches must be [positions, " +
                             std::to_string(half) + "]");
      pos.assign(p.data<int64_t>(), p.data<int64_t>() + p.size());
      for (int64_t v : pos)
        if (v < 0 || v >= cosT.dim(0))
          return Status::error("position_ids holds " + std::to_string(v) + ", outside the " +
                               std::to_string(cosT.dim(0)) + " positions of the caches");
    } else if (cosT.shape() != Shape{B, S, half}) {
      return Status::error("without position_ids the caches must be [" + std::to_string(B) + ", " +
                           std::to_string(S) + ", " + std::to_string(half) + "]");
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using E = decltype(z);
      const E* px = x.data<E>();
      E* py = y->data<E>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t row = pos.empty() ? b * S + s : pos[b * S + s];
          const E* c = cosT.data<E>() + row * half;
          const E* sn = sinT.data<E>() + row * half;
          for (int64_t h = 0; h < H; ++h) {
            const int64_t at = packed ? (b * S + s) * H * D + h * D : ((b * H + h) * S + s) * D;
            const E* xi = px + at;
            E* yi = py + at;
            for (int64_t i = 0; i < half; ++i) {
              const int64_t i1 = interleaved_ ? 2 * i : i, i2 = interleaved_ ? 2 * i + 1 : i + half;
              const double x1 = xi[i1], x2 = xi[i2];
              yi[i1] = static_cast<E>(x1 * c[i] - x2 * sn[i]);
              yi[i2] = static_cast<E>(x1 * sn[i] + x2 * c[i]);
            }
            std::copy(xi + rot, xi + D, yi + rot);
          }
        }
      return Status();
    });
  }

 private:
  int64_t heads_, rot_;
  bool interleaved_;
};

}  // namespace

void addAttentionKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "RotaryEmbedding", 23, kMaxOpset, &makeKernel<RotaryEmbedding>);
  r.add(kReferenceTable, "Attention", 23, kMaxOpset, &makeKernel<Attention>);
  r.add(kReferenceTable, "AttentionGrad", 1, kMaxOpset, &makeKernel<AttentionGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
