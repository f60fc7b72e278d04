// DecoderMaskedMultiHeadAttention (com.microsoft): one decoding step of multi-head attention,
// as beam search and greedy decoders of ONNX Runtime-optimized exports call it. The query is
// one token per row. In self-attention the new key and value are written into the key/value
// cache (past_key/past_value, [B, heads, max length, size], shared with present_key/
// present_value) at past_sequence_length, and the token attends to the cache's first
// past_sequence_length + 1 positions; with beams, cache_indirection says from which beam's
// cache each earlier position comes. In cross-attention (no past), key and value are the
// encoder's, already [B, heads, length, size]. DecoderMaskedSelfAttention is the same step with
// the query, key and value projected from its input by its own weights, one past tensor holding
// both caches, and an optional rotary embedding.
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
      : selfOp_(init.opType == "DecoderMaskedSelfAttention"),
        rotary_(init.attrs.getInt("do_rotary", 0) != 0),
        heads_(init.attrs.getInt("num_heads", 0)),
        scale_(init.attrs.getFloat("scale", 0.0f)),
        maskFilter_(init.attrs.getFloat("mask_filter_value", -10000.0f)),
        shareBuffer_(init.attrs.getInt("past_present_share_buffer", 0) != 0),
        outputQk_(init.attrs.getInt("output_qk", 0) != 0) {
    if (heads_ <= 0) fail("DecoderMaskedMultiHeadAttention needs num_heads > 0");
  }

  Status compute(KernelContext& ctx) override {
    // DecoderMaskedSelfAttention's inputs in DecoderMaskedMultiHeadAttention's roles: its
    // projection as a packed query, its past split into keys and values.
    Tensor packedQ, pastK, pastV;
    if (selfOp_) DW_RETURN_IF_ERROR(project(ctx, packedQ, pastK, pastV));
    auto has = [&](size_t i) {
      if (!selfOp_) return ctx.hasInput(i);
      const int j = kSelfInput[i];
      return j == kPrepared ? true : j >= 0 && ctx.hasInput(static_cast<size_t>(j));
    };
    auto in = [&](size_t i) -> const Tensor& {
      if (!selfOp_) return ctx.input(i);
      if (i == 0) return packedQ;
      if (i == 5) return pastK;
      if (i == 6) return pastV;
      return ctx.input(static_cast<size_t>(kSelfInput[i]));
    };
    for (size_t i : {0, 1, 2, 4, 5, 6, 10})
      if (has(i) && in(i).dtype() != DType::kFloat)
        return Status::error(std::string(kRoles[i]) + " must be float32, got " +
                             dtypeName(in(i).dtype()));
    const Tensor& q = in(0);
    if (q.rank() != 3 || q.dim(1) != 1)
      return Status::error(
          "query must be [batch, 1, hidden] (one token per row: this operator "
          "decodes a step at a time), got " +
          shapeToString(q.shape()));
    const int64_t B = q.dim(0), N = heads_;
    const bool cross = !has(5);
    const bool packed = !has(1) && !has(2);
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
    float *presentK = nullptr, *presentV = nullptr;
    std::vector<float> qv(B * D);
    const float* bias = has(10) ? in(10).data<float>() : nullptr;
    if (bias && in(10).size() != 3 * D)
      return Status::error("bias must be [3 * hidden] = [" + std::to_string(3 * D) + "], got " +
                           shapeToString(in(10).shape()));
    const int64_t qStride = packed && !cross ? 3 * D : D;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < D; ++i)
        qv[b * D + i] = q.data<float>()[b * qStride + i] + (bias ? bias[i] : 0.0f);
    if (cross) {
      if (!has(1) || !has(2))
        return Status::error(
            "cross-attention (no past_key) needs key and value [batch, heads, "
            "length, head size]");
      const Tensor &k = in(1), &v = in(2);
      if (k.rank() != 4 || k.dim(0) != B || k.dim(1) != N || k.dim(3) != H ||
          v.shape() != k.shape())
        return Status::error("cross-attention key and value must both be [" + std::to_string(B) +
                             ", " + std::to_string(N) + ", length, " + std::to_string(H) +
                             "], got " + shapeToString(k.shape()) + " and " +
                             shapeToString(v.shape()));
      if (has(4)) return Status::error("attention_bias is not defined for cross-attention");
      T = maxLen = k.dim(2);
      kAll = k.data<float>();
      vAll = v.data<float>();
    } else {
      if (!shareBuffer_)
        return Status::error(
            "self-attention with a past needs past_present_share_buffer = 1 "
            "(past_key holds the whole cache, [batch, heads, max length, size])");
      if (!has(6) || !has(7))
        return Status::error(
            "self-attention needs past_value and past_sequence_length with "
            "past_key");
      const Tensor &pk = in(5), &pv = in(6);
      if (pk.rank() != 4 || pk.dim(0) != B || pk.dim(1) != N || pk.dim(3) != H ||
          pv.shape() != pk.shape())
        return Status::error("past_key and past_value must both be [" + std::to_string(B) + ", " +
                             std::to_string(N) + ", max length, " + std::to_string(H) + "], got " +
                             shapeToString(pk.shape()) + " and " + shapeToString(pv.shape()));
      maxLen = pk.dim(2);
      if (in(7).size() != 1) return Status::error("past_sequence_length must hold one value");
      P = in(7).getInt(0);
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
            if (in(1).size() != B * D || in(2).size() != B * D)
              return Status::error("key and value must be [" + std::to_string(B) + ", 1, " +
                                   std::to_string(D) + "] like the query");
            kNew[b * D + i] = in(1).data<float>()[b * D + i] + kb;
            vNew[b * D + i] = in(2).data<float>()[b * D + i] + vb;
          }
        }
      // The cache, with the new token's key and value written at position P.
      if (selfOp_) {
        // One present [2, B, heads, max length, size]: keys, then values.
        Shape both = pk.shape();
        both.insert(both.begin(), 2);
        DW_ALLOC(present, ctx.output(1, DType::kFloat, both));
        presentK = present->data<float>();
        presentV = presentK + pk.size();
      } else {
        DW_ALLOC(k, ctx.output(1, DType::kFloat, pk.shape()));
        DW_ALLOC(v, ctx.output(2, DType::kFloat, pv.shape()));
        presentK = k->data<float>();
        presentV = v->data<float>();
      }
      std::memcpy(presentK, pk.raw(), pk.bytes());
      std::memcpy(presentV, pv.raw(), pv.bytes());
      if (rotary_) {
        rotate(qv.data(), B, N, H, P);
        rotate(kNew.data(), B, N, H, P);
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n) {
          std::copy_n(&kNew[b * D + n * H], H, presentK + ((b * N + n) * maxLen + P) * H);
          std::copy_n(&vNew[b * D + n * H], H, presentV + ((b * N + n) * maxLen + P) * H);
        }
      kAll = presentK;
      vAll = presentV;
      if (has(8)) beams = in(8).getInt(0);
      if (beams > 1) {
        if (!has(9))
          return Status::error(
              "beam_width > 1 needs cache_indirection [batch, beam_width, max "
              "length]");
        const Tensor& ci = in(9);
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
    if (has(3)) {
      const Tensor& m = in(3);
      if (m.dtype() != DType::kInt32 || m.rank() != 2 || m.dim(0) != B || m.dim(1) < T)
        return Status::error("mask_index must be an int32 key padding mask [" + std::to_string(B) +
                             ", " + std::to_string(T) + " or more], got " +
                             shapeToString(m.shape()));
      mask = m.data<int32_t>();
      maskStride = m.dim(1);
    }
    const float* attnBias = nullptr;
    int64_t biasB = 0, biasN = 0;
    if (has(4)) {
      const Tensor& ab = in(4);
      if (ab.rank() != 4 || (ab.dim(0) != 1 && ab.dim(0) != B) ||
          (ab.dim(1) != 1 && ab.dim(1) != N) || ab.dim(2) != 1 || ab.dim(3) < T)
        return Status::error("attention_bias must be [batch or 1, heads or 1, 1, " +
                             std::to_string(T) + " or more], got " + shapeToString(ab.shape()));
      attnBias = ab.data<float>();
      biasB = ab.dim(0) == 1 ? 0 : ab.dim(1) * ab.dim(3);
      biasN = ab.dim(1) == 1 ? 0 : ab.dim(3);
    }

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
  static constexpr const char* kRoles[] = {"query",
                                           "key",
                                           "value",
                                           "mask_index",
                                           "attention_bias",
                                           "past_key",
                                           "past_value",
                                           "past_sequence_length",
                                           "beam_width",
                                           "cache_indirection",
                                           "bias"};
  // DecoderMaskedSelfAttention's input for each role above (-1: none; kPrepared: made by
  // project()).
  static constexpr int kPrepared = 100;
  static constexpr int kSelfInput[] = {kPrepared, -1, -1, 3, 5, kPrepared, kPrepared, 6, 7, 8, 2};

  // DecoderMaskedSelfAttention: input [B, 1, in] times weights [in, 3 * hidden] is the packed
  // query, key and value (its bias is added with the roles' bias); past [2, B, heads, max
  // length, size] holds the key and value caches, viewed in place.
  Status project(KernelContext& ctx, Tensor& packed, Tensor& pastK, Tensor& pastV) {
    const Tensor &x = ctx.input(0), &w = ctx.input(1), &past = ctx.input(4);
    if (x.dtype() != DType::kFloat || w.dtype() != DType::kFloat || past.dtype() != DType::kFloat)
      return Status::error("input, weights and past must be float32");
    if (x.rank() != 3 || w.rank() != 2 || w.dim(0) != x.dim(2) || w.dim(1) % 3 != 0)
      return Status::error("input must be [batch, 1, in] and weights [in, 3 * hidden], got " +
                           shapeToString(x.shape()) + " and " + shapeToString(w.shape()));
    if (past.rank() != 5 || past.dim(0) != 2)
      return Status::error("past must be [2, batch, heads, max length, head size], got " +
                           shapeToString(past.shape()));
    const int64_t out = w.dim(1);
    packed = Tensor::fromVector(
        projectRows(x.data<float>(), x.dim(0) * x.dim(1), x.dim(2), w.data<float>(), out, nullptr),
        {x.dim(0), x.dim(1), out});
    // The two halves as views of past's memory (the step copies the cache into present once).
    const Shape half(past.shape().begin() + 1, past.shape().end());
    const int64_t n = numElements(half);
    auto view = [&](int64_t offset) {
      auto keep = past.buffer();
      return Tensor(DType::kFloat, half,
                    std::make_shared<Buffer>(const_cast<float*>(past.data<float>()) + offset,
                                             static_cast<size_t>(n) * sizeof(float), past.device(),
                                             [keep](void*) {}));
    };
    pastK = view(0);
    pastV = view(n);
    return Status();
  }

  // Rotary embedding of the new token at position `pos` (do_rotary): each head's adjacent pairs
  // (2i, 2i + 1) turn by pos / 10000^(2i / size), the GPT-J form of FasterTransformer's decoding
  // kernel that ONNX Runtime's GPU runs.
  static void rotate(float* v, int64_t B, int64_t N, int64_t H, int64_t pos) {
    for (int64_t bn = 0; bn < B * N; ++bn)
      for (int64_t i = 0; i + 1 < H; i += 2) {
        const double angle = pos * std::pow(10000.0, -static_cast<double>(i) / H);
        const double c = std::cos(angle), s = std::sin(angle);
        float* p = v + bn * H + i;
        const double x0 = p[0], x1 = p[1];
        p[0] = static_cast<float>(x0 * c - x1 * s);
        p[1] = static_cast<float>(x0 * s + x1 * c);
      }
  }

  bool selfOp_, rotary_;
  int64_t heads_;
  float scale_, maskFilter_;
  bool shareBuffer_, outputQk_;
};

}  // namespace

void addDecoderAttentionKernels(KernelRegistry& r) {
  for (const char* op : {"DecoderMaskedMultiHeadAttention", "DecoderMaskedSelfAttention"})
    r.add(kReferenceTable, op, 1, kMaxOpset, &makeKernel<DecoderMaskedMha>, false,
          dw::kMicrosoftDomain);
}

}  // namespace dw::engine
