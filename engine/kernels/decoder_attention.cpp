// DecoderMaskedMultiHeadAttention (com.microsoft): one decoding step of multi-head attention,
// as beam search and greedy decoders of ONNX Runtime-optimized exports call it. The query is
// one token per row. In self-attention the new key and value are written into the key/value
// cache (past_key/past_value, [B, heads, max length, size], shared with present_key/
// present_value) at past_sequence_length, and the token attends to the cache's first
// past_sequence_length + 1 positions; with beams, cache_indirection says from which beam's
// cache each earlier position comes. In cross-attention (no past), key and value are the
// encoder's, already [B, heads, length, size].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

class DecoderMaskedMha : public Kernel {
 public:
  explicit DecoderMaskedMha(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)),
        scale_(init.attrs.getFloat("scale", 0.0f)),
        maskFilter_(init.attrs.getFloat("mask_filter_value", -10000.0f)),
        shareBuffer_(init.attrs.getInt("past_present_share_buffer", 0) != 0),
        outputQk_(init.attrs.getInt("output_qk", 0) != 0) {
    if (heads_ <= 0) fail("DecoderMaskedMultiHeadAttention needs num_heads > 0");
  }

  Status compute(KernelContext& ctx) override {
    for (size_t i = 0; i < ctx.numInputs(); ++i)
      if (ctx.hasInput(i) && i != 3 && i < 7 && ctx.input(i).dtype() != DType::kFloat)
        return Status::error("input " + std::to_string(i) + " must be float32, got " +
                             dtypeName(ctx.input(i).dtype()));
    const Tensor& q = ctx.input(0);
    if (q.rank() != 3 || q.dim(1) != 1)
      return Status::error(
          "query must be [batch, 1, hidden] (one token per row: this operator "
          "decodes a step at a time), got " +
          shapeToString(q.shape()));
    const int64_t B = q.dim(0), N = heads_;
    const bool cross = !ctx.hasInput(5);
    const bool packed = !ctx.hasInput(1) && !ctx.hasInput(2);
    if (!cross && packed && q.dim(2) % (3 * N) != 0)
      return Status::error("a packed query [batch, 1, 3 * hidden] needs 3 * num_heads (" +
                           std::to_string(3 * N) + ") to divide its last dimension " +
                           std::to_string(q.dim(2)));
    const int64_t D = packed && !cross ? q.dim(2) / 3 : q.dim(2);
    if (D % N != 0)
      return Status::error("the query's hidden size " + std::to_string(D) +
                           " is not a multiple of num_heads " + std::to_string(N));
    const int64_t H = D / N;
    const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(H));

    // Where key position t of row b, head n lives: the cache (self) or the encoder's keys.
    int64_t P = 0, maxLen = 0, T = 0;
    const float *kAll = nullptr, *vAll = nullptr;
    std::vector<float> kNew, vNew;
    const int32_t* indirection = nullptr;
    int64_t beams = 1;
    Tensor *presentK = nullptr, *presentV = nullptr;
    std::vector<float> qv(B * D);
    const float* bias = ctx.hasInput(10) ? ctx.input(10).data<float>() : nullptr;
    if (bias && ctx.input(10).size() != 3 * D)
      return Status::error("bias must be [3 * hidden] = [" + std::to_string(3 * D) + "], got " +
                           shapeToString(ctx.input(10).shape()));
    const int64_t qStride = packed && !cross ? 3 * D : D;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < D; ++i)
        qv[b * D + i] = q.data<float>()[b * qStride + i] + (bias ? bias[i] : 0.0f);
    if (cross) {
      if (!ctx.hasInput(1) || !ctx.hasInput(2))
        return Status::error(
            "cross-attention (no past_key) needs key and value [batch, heads, "
            "length, head size]");
      const Tensor &k = ctx.input(1), &v = ctx.input(2);
      if (k.rank() != 4 || k.dim(0) != B || k.dim(1) != N || k.dim(3) != H ||
          v.shape() != k.shape())
        return Status::error("cross-attention key and value must both be [" + std::to_string(B) +
                             ", " + std::to_string(N) + ", length, " + std::to_string(H) +
                             "], got " + shapeToString(k.shape()) + " and " +
                             shapeToString(v.shape()));
      if (ctx.hasInput(4))
        return Status::error("attention_bias is not defined for cross-attention");
      T = maxLen = k.dim(2);
      kAll = k.data<float>();
      vAll = v.data<float>();
    } else {
      if (!shareBuffer_)
        return Status::error(
            "self-attention with a past needs past_present_share_buffer = 1 "
            "(past_key holds the whole cache, [batch, heads, max length, size])");
      if (!ctx.hasInput(6) || !ctx.hasInput(7))
        return Status::error(
            "self-attention needs past_value and past_sequence_length with "
            "past_key");
      const Tensor &pk = ctx.input(5), &pv = ctx.input(6);
      if (pk.rank() != 4 || pk.dim(0) != B || pk.dim(1) != N || pk.dim(3) != H ||
          pv.shape() != pk.shape())
        return Status::error("past_key and past_value must both be [" + std::to_string(B) + ", " +
                             std::to_string(N) + ", max length, " + std::to_string(H) + "], got " +
                             shapeToString(pk.shape()) + " and " + shapeToString(pv.shape()));
      maxLen = pk.dim(2);
      if (ctx.input(7).size() != 1)
        return Status::error("past_sequence_length must hold one value");
      P = ctx.input(7).getInt(0);
      if (P < 0 || P >= maxLen)
        return Status::error("past_sequence_length " + std::to_string(P) +
                             " leaves no room in the cache of " + std::to_string(maxLen) +
                             " positions for the new token");
      T = P + 1;
      kNew.resize(B * D);
      vNew.resize(B * D);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < D; ++i) {
          const float kb = bias ? bias[D + i] : 0.0f, vb = bias ? bias[2 * D + i] : 0.0f;
          if (packed) {
            kNew[b * D + i] = q.data<float>()[b * 3 * D + D + i] + kb;
            vNew[b * D + i] = q.data<float>()[b * 3 * D + 2 * D + i] + vb;
          } else {
            if (ctx.input(1).size() != B * D || ctx.input(2).size() != B * D)
              return Status::error("key and value must be [" + std::to_string(B) + ", 1, " +
                                   std::to_string(D) + "] like the query");
            kNew[b * D + i] = ctx.input(1).data<float>()[b * D + i] + kb;
            vNew[b * D + i] = ctx.input(2).data<float>()[b * D + i] + vb;
          }
        }
      // The cache, with the new token's key and value written at position P.
      presentK = ctx.output(1, DType::kFloat, pk.shape());
      presentV = ctx.output(2, DType::kFloat, pv.shape());
      if (!presentK || !presentV) return ctx.status();
      std::memcpy(presentK->raw(), pk.raw(), pk.bytes());
      std::memcpy(presentV->raw(), pv.raw(), pv.bytes());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n) {
          std::copy_n(&kNew[b * D + n * H], H,
                      presentK->data<float>() + ((b * N + n) * maxLen + P) * H);
          std::copy_n(&vNew[b * D + n * H], H,
                      presentV->data<float>() + ((b * N + n) * maxLen + P) * H);
        }
      kAll = presentK->data<float>();
      vAll = presentV->data<float>();
      if (ctx.hasInput(8)) beams = ctx.input(8).getInt(0);
      if (beams > 1) {
        if (!ctx.hasInput(9))
          return Status::error(
              "beam_width > 1 needs cache_indirection [batch, beam_width, max "
              "length]");
        const Tensor& ci = ctx.input(9);
        if (B % beams != 0 || ci.dtype() != DType::kInt32 || ci.rank() != 3 ||
            ci.dim(0) != B / beams || ci.dim(1) != beams || ci.dim(2) != maxLen)
          return Status::error("cache_indirection must be int32 [" + std::to_string(B / beams) +
                               ", " + std::to_string(beams) + ", " + std::to_string(maxLen) +
                               "] for " + std::to_string(B) + " rows in beams of " +
                               std::to_string(beams) + ", got " + shapeToString(ci.shape()));
        indirection = ci.data<int32_t>();
        for (int64_t i = 0; i < ci.size(); ++i)
          if (indirection[i] < 0 || indirection[i] >= beams)
            return Status::error("cache_indirection holds beam " + std::to_string(indirection[i]) +
                                 ", outside [0, " + std::to_string(beams) + ")");
      }
    }
    const int32_t* mask = nullptr;
    int64_t maskStride = 0;
    if (ctx.hasInput(3)) {
      const Tensor& m = ctx.input(3);
      if (m.dtype() != DType::kInt32 || m.rank() != 2 || m.dim(0) != B || m.dim(1) < T)
        return Status::error("mask_index must be an int32 key padding mask [" + std::to_string(B) +
                             ", " + std::to_string(T) + " or more], got " +
                             shapeToString(m.shape()));
      mask = m.data<int32_t>();
      maskStride = m.dim(1);
    }
    const float* attnBias = nullptr;
    int64_t biasB = 0, biasN = 0, biasLast = 0;
    if (ctx.hasInput(4)) {
      const Tensor& ab = ctx.input(4);
      if (ab.rank() != 4 || (ab.dim(0) != 1 && ab.dim(0) != B) ||
          (ab.dim(1) != 1 && ab.dim(1) != N) || ab.dim(2) != 1 || ab.dim(3) < T)
        return Status::error("attention_bias must be [batch or 1, heads or 1, 1, " +
                             std::to_string(T) + " or more], got " + shapeToString(ab.shape()));
      attnBias = ab.data<float>();
      biasB = ab.dim(0) == 1 ? 0 : ab.dim(1) * ab.dim(3);
      biasN = ab.dim(1) == 1 ? 0 : ab.dim(3);
      biasLast = ab.dim(3);
    }
    (void)biasLast;

    DW_ALLOC(y, ctx.output(0, DType::kFloat, {B, 1, D}));
    Tensor* qk = outputQk_ ? ctx.output(3, DType::kFloat, {B, N, 1, T}) : nullptr;
    if (outputQk_ && !qk) return ctx.status();
    std::vector<double> scores(T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < N; ++n) {
        const float* qh = &qv[b * D + n * H];
        // The row whose cache holds position t: this row's own, or the beam indirection's.
        auto source = [&](int64_t t) {
          if (!indirection || t == P) return b;
          const int64_t group = b / beams, beam = b % beams;
          return group * beams + indirection[(group * beams + beam) * maxLen + t];
        };
        double top = -INFINITY;
        for (int64_t t = 0; t < T; ++t) {
          const float* kt = kAll + ((source(t) * N + n) * maxLen + t) * H;
          double s = 0;
          for (int64_t h = 0; h < H; ++h) s += static_cast<double>(qh[h]) * kt[h];
          s *= scale;
          if (attnBias) s += attnBias[b * biasB + n * biasN + t];
          if (mask && mask[b * maskStride + t] == 0) s += maskFilter_;
          scores[t] = s;
          if (qk) qk->data<float>()[(b * N + n) * T + t] = static_cast<float>(s);
          top = std::max(top, s);
        }
        double sum = 0;
        for (auto& s : scores) sum += (s = std::exp(s - top));
        float* out = y->data<float>() + b * D + n * H;
        for (int64_t h = 0; h < H; ++h) {
          double acc = 0;
          for (int64_t t = 0; t < T; ++t)
            acc += scores[t] * vAll[((source(t) * N + n) * maxLen + t) * H + h];
          out[h] = static_cast<float>(acc / sum);
        }
      }
    return Status();
  }

 private:
  int64_t heads_;
  float scale_, maskFilter_;
  bool shareBuffer_, outputQk_;
};

}  // namespace

void addDecoderAttentionKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "DecoderMaskedMultiHeadAttention", 1, kMaxOpset,
        &makeKernel<DecoderMaskedMha>, false, dw::kMicrosoftDomain);
}

}  // namespace dw::engine
