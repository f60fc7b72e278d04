// Attention (opsets 23 and 24): scaled dot-product attention over heads, as PyTorch's
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
// nonpad_kv_seqlen[b] - Sq). The softmax over j weights V; Y has Q's layout. qk_matmul_output
// gives the scores at the stage qk_matmul_output_mode names: 0 the scaled products, 1 after the
// softcap, 2 after the mask too, 3 after the softmax (as ONNX Runtime 1.30 gives them). A query
// whose every key is blocked gets zeros (ONNX Runtime's answer; the ONNX reference's softmax gives
// NaN there). Statistics are taken in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

class Attention : public Kernel {
 public:
  explicit Attention(const KernelInit& init)
      : causal_(init.attrs.getInt("is_causal", 0) != 0),
        qHeads_(init.attrs.getInt("q_num_heads", 0)),
        kvHeads_(init.attrs.getInt("kv_num_heads", 0)),
        mode_(init.attrs.getInt("qk_matmul_output_mode", 0)),
        hasScale_(init.attrs.has("scale")),
        scale_(init.attrs.getFloat("scale", 1.0f)),
        softcap_(init.attrs.getFloat("softcap", 0.0f)) {
    if (mode_ < 0 || mode_ > 3)
      fail("qk_matmul_output_mode is " + std::to_string(mode_) +
           "; it must be 0 (scaled QK), 1 (after softcap), 2 (after softcap and mask) or 3 "
           "(after softmax)");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& q = ctx.input(0);
    const Tensor& k = ctx.input(1);
    const Tensor& v = ctx.input(2);
    if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
      return Status::error(
          "Q, K and V must all be 3-D [B, S, heads * size] or all 4-D "
          "[B, heads, S, size]; they have " +
          std::to_string(q.rank()) + ", " + std::to_string(k.rank()) + " and " +
          std::to_string(v.rank()) + " dimensions");
    if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
      return Status::error("Q, K and V must be of one type");
    const bool packed = q.rank() == 3;
    const int64_t B = q.dim(0);
    int64_t Hq, Hkv, Sq, Skv, D, Dv;
    if (packed) {
      if (qHeads_ < 1 || kvHeads_ < 1)
        return Status::error("3-D Q, K and V need the q_num_heads and kv_num_heads attributes");
      Hq = qHeads_;
      Hkv = kvHeads_;
      Sq = q.dim(1);
      Skv = k.dim(1);
      if (q.dim(2) % Hq || k.dim(2) % Hkv || v.dim(2) % Hkv)
        return Status::error("the hidden sizes of Q, K and V must divide by their head counts");
      D = q.dim(2) / Hq;
      Dv = v.dim(2) / Hkv;
      if (k.dim(2) / Hkv != D) return Status::error("K's head size differs from Q's");
    } else {
      Hq = q.dim(1);
      Hkv = k.dim(1);
      Sq = q.dim(2);
      Skv = k.dim(2);
      D = q.dim(3);
      Dv = v.dim(3);
      if (k.dim(3) != D) return Status::error("K's head size differs from Q's");
      if (v.dim(1) != Hkv) return Status::error("K and V have different head counts");
    }
    if (k.dim(0) != B || v.dim(0) != B || (packed ? v.dim(1) : v.dim(2)) != Skv)
      return Status::error("K and V must match Q's batch and each other's sequence length");
    if (Hkv < 1 || Hq % Hkv)
      return Status::error("Q's " + std::to_string(Hq) + " heads must be a multiple of K's " +
                           std::to_string(Hkv));
    // The caches: [B, Hkv, P, D] before K and V.
    const bool hasPast = ctx.hasInput(4) || ctx.hasInput(5);
    if (hasPast && !(ctx.hasInput(4) && ctx.hasInput(5)))
      return Status::error("past_key and past_value come together");
    int64_t P = 0;
    if (hasPast) {
      const Tensor& pk = ctx.input(4);
      const Tensor& pv = ctx.input(5);
      if (pk.rank() != 4 || pv.rank() != 4 || pk.dim(0) != B || pk.dim(1) != Hkv ||
          pk.dim(3) != D || pv.dim(0) != B || pv.dim(1) != Hkv || pv.dim(3) != Dv ||
          pv.dim(2) != pk.dim(2) || pk.dtype() != q.dtype() || pv.dtype() != q.dtype())
        return Status::error(
            "past_key and past_value must be [B, kv heads, P, head size] of "
            "Q's type, matching K and V");
      P = pk.dim(2);
    }
    const int64_t T = P + Skv;
    std::vector<int64_t> nonpad;
    if (ctx.hasInput(6)) {
      const Tensor& n = ctx.input(6);
      if (n.dtype() != DType::kInt64 || n.size() != B)
        return Status::error("nonpad_kv_seqlen needs one int64 per batch entry");
      nonpad.assign(n.data<int64_t>(), n.data<int64_t>() + B);
      for (int64_t len : nonpad)
        if (len < 0 || len > T)
          return Status::error("nonpad_kv_seqlen holds " + std::to_string(len) + ", outside 0.." +
                               std::to_string(T));
    }
    // The mask, right-aligned against [B, Hq, Sq, T'] (T' <= T: the keys past it are blocked).
    const Tensor* mask = ctx.hasInput(3) ? &ctx.input(3) : nullptr;
    std::vector<int64_t> mstride(4, 0);
    int64_t maskLen = 0;
    if (mask) {
      if (mask->dtype() != DType::kBool && mask->dtype() != q.dtype())
        return Status::error(std::string("attn_mask is ") + dtypeName(mask->dtype()) +
                             "; it must be bool (true: attend) or of Q's type (added)");
      if (mask->rank() < 2 || mask->rank() > 4)
        return Status::error("attn_mask needs 2 to 4 dimensions");
      const Shape want{B, Hq, Sq, T};
      const size_t r = mask->rank();
      int64_t stride = 1;
      for (size_t i = 0; i < r; ++i) {
        const size_t md = r - 1 - i, wd = 3 - i;
        const int64_t dim = mask->dim(md);
        if (wd == 3) {
          if (dim > T)
            return Status::error("attn_mask covers " + std::to_string(dim) + " keys; there are " +
                                 std::to_string(T));
          maskLen = dim;
          mstride[wd] = 1;
        } else if (dim == want[wd]) {
          mstride[wd] = stride;
        } else if (dim != 1) {
          return Status::error("attn_mask of shape " + shapeToString(mask->shape()) +
                               " does not broadcast to [batch, heads, " + std::to_string(Sq) +
                               ", " + std::to_string(T) + "]");
        }
        stride *= dim;
      }
    }
    const Shape yShape = packed ? Shape{B, Sq, Hq * Dv} : Shape{B, Hq, Sq, Dv};
    DW_ALLOC(y, ctx.output(0, q.dtype(), yShape));
    Tensor* pkOut = ctx.wantsOutput(1) ? ctx.output(1, q.dtype(), {B, Hkv, T, D}) : nullptr;
    Tensor* pvOut = ctx.wantsOutput(2) ? ctx.output(2, q.dtype(), {B, Hkv, T, Dv}) : nullptr;
    Tensor* qkOut = ctx.wantsOutput(3) ? ctx.output(3, q.dtype(), {B, Hq, Sq, T}) : nullptr;
    if ((ctx.wantsOutput(1) && !pkOut) || (ctx.wantsOutput(2) && !pvOut) ||
        (ctx.wantsOutput(3) && !qkOut))
      return ctx.status();
    const double scale = hasScale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(D));
    return dispatchFloat(q.dtype(), [&](auto z) -> Status {
      using E = decltype(z);
      // The joined caches, [B, Hkv, T, size]: into the outputs where asked for.
      std::vector<E> kTmp, vTmp;
      E* kAll = pkOut ? pkOut->data<E>() : (kTmp.resize(B * Hkv * T * D), kTmp.data());
      E* vAll = pvOut ? pvOut->data<E>() : (vTmp.resize(B * Hkv * T * Dv), vTmp.data());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hkv; ++h) {
          E* kd = kAll + (b * Hkv + h) * T * D;
          E* vd = vAll + (b * Hkv + h) * T * Dv;
          if (P) {
            std::copy_n(ctx.input(4).data<E>() + (b * Hkv + h) * P * D, P * D, kd);
            std::copy_n(ctx.input(5).data<E>() + (b * Hkv + h) * P * Dv, P * Dv, vd);
          }
          for (int64_t s = 0; s < Skv; ++s) {
            const E* ks = k.data<E>() + (packed ? (b * Skv + s) * Hkv * D + h * D
                                                : ((b * Hkv + h) * Skv + s) * D);
            const E* vs = v.data<E>() + (packed ? (b * Skv + s) * Hkv * Dv + h * Dv
                                                : ((b * Hkv + h) * Skv + s) * Dv);
            std::copy_n(ks, D, kd + (P + s) * D);
            std::copy_n(vs, Dv, vd + (P + s) * Dv);
          }
        }
      const double inf = std::numeric_limits<double>::infinity();
      std::vector<double> score(T), acc(Dv);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t hk = h / (Hq / Hkv);
          const E* kd = kAll + (b * Hkv + hk) * T * D;
          const E* vd = vAll + (b * Hkv + hk) * T * Dv;
          for (int64_t i = 0; i < Sq; ++i) {
            const E* qi = q.data<E>() +
                          (packed ? (b * Sq + i) * Hq * D + h * D : ((b * Hq + h) * Sq + i) * D);
            E* qkRow = qkOut ? qkOut->data<E>() + ((b * Hq + h) * Sq + i) * T : nullptr;
            // Without a past, nonpad_kv_seqlen sets where this image's queries end.
            const int64_t offset = P ? P : (nonpad.empty() ? 0 : nonpad[b] - Sq);
            for (int64_t j = 0; j < T; ++j) {
              double dot = 0;
              const E* kj = kd + j * D;
              for (int64_t d = 0; d < D; ++d)
                dot += static_cast<double>(qi[d]) * static_cast<double>(kj[d]);
              double s = dot * scale;
              if (qkRow && mode_ == 0) qkRow[j] = static_cast<E>(s);
              if (softcap_ > 0) s = softcap_ * std::tanh(s / softcap_);
              if (qkRow && mode_ == 1) qkRow[j] = static_cast<E>(s);
              double bias = 0;
              if (mask) {
                if (j >= maskLen) {
                  bias = -inf;
                } else {
                  const int64_t at = b * mstride[0] + h * mstride[1] + i * mstride[2] + j;
                  bias = mask->dtype() == DType::kBool ? (mask->data<bool>()[at] ? 0.0 : -inf)
                                                       : static_cast<double>(mask->data<E>()[at]);
                }
              }
              if (causal_ && j > i + offset) bias = -inf;
              if (!nonpad.empty() && j >= nonpad[b]) bias = -inf;
              s += bias;
              if (qkRow && mode_ == 2) qkRow[j] = static_cast<E>(s);
              score[j] = s;
            }
            double top = -inf;
            for (int64_t j = 0; j < T; ++j) top = std::max(top, score[j]);
            double sum = 0;
            for (int64_t j = 0; j < T; ++j) sum += score[j] = std::exp(score[j] - top);
            std::fill(acc.begin(), acc.end(), 0.0);
            const bool blocked = top == -inf;  // every key: weights and output stay 0
            for (int64_t j = 0; j < T; ++j) {
              const double p = blocked ? 0.0 : score[j] / sum;
              if (qkRow && mode_ == 3) qkRow[j] = static_cast<E>(p);
              const E* vj = vd + j * Dv;
              for (int64_t d = 0; d < Dv; ++d) acc[d] += p * static_cast<double>(vj[d]);
            }
            E* yi = y->data<E>() +
                    (packed ? (b * Sq + i) * Hq * Dv + h * Dv : ((b * Hq + h) * Sq + i) * Dv);
            for (int64_t d = 0; d < Dv; ++d) yi[d] = static_cast<E>(acc[d]);
          }
        }
      return Status();
    });
  }

 private:
  bool causal_;
  int64_t qHeads_, kvHeads_, mode_;
  bool hasScale_;
  float scale_, softcap_;
};

}  // namespace

void addAttentionKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "Attention", 23, 24, &makeKernel<Attention>);
}

}  // namespace dw::engine
