// LongformerAttention (com.microsoft; ONNX Runtime runs it only on its GPU): Longformer's
// self-attention. input ([B, S, hidden]) times weight ([hidden, 3 * hidden]) plus bias gives the
// query, key and value of each of num_heads heads. A token attends to the tokens within `window`
// positions of it on either side, and to every global token (global[b, j] = 1); a global token
// attends to all tokens instead, through the query, key and value of global_weight and
// global_bias. mask ([B, S], 0 to keep, negative to mask) is added to each key's score; scores
// are scaled by 1/sqrt(head size). As in Hugging Face's Longformer, a global token within a
// window counts once.
#include <algorithm>
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// The attention of LongformerAttention and QOrderedLongformerAttention, from the projections
// local and global ([B, S, 3 * D]: q, k, v) into out [B, S, D].
void attendLongformer(const float* local, const float* global, const float* mask,
                      const int32_t* isGlobal, int64_t B, int64_t S, int64_t D, int64_t N,
                      int64_t window, float* outRows) {
  const int64_t Hs = D / N;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Hs));
  std::vector<double> w(S);
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) {
      const bool g = isGlobal[b * S + i] != 0;
      // The keys this token reads: all of them (global), or its window and the global ones.
      keys.clear();
      for (int64_t j = 0; j < S; ++j)
        if (g || isGlobal[b * S + j] != 0 || std::abs(i - j) <= window) keys.push_back(j);
      const float* p = g ? global : local;
      for (int64_t n = 0; n < N; ++n) {
        auto at = [&](int64_t t, int part) { return &p[(b * S + t) * 3 * D + part * D + n * Hs]; };
        const float* q = at(i, 0);
        double top = -INFINITY;
        for (size_t k = 0; k < keys.size(); ++k) {
          const float* kj = at(keys[k], 1);
          double s = 0;
          for (int64_t h = 0; h < Hs; ++h) s += static_cast<double>(q[h]) * kj[h];
          w[k] = s * scale + mask[b * S + keys[k]];
          top = std::max(top, w[k]);
        }
        double sum = 0;
        for (size_t k = 0; k < keys.size(); ++k) sum += (w[k] = std::exp(w[k] - top));
        float* out = outRows + (b * S + i) * D + n * Hs;
        for (int64_t h = 0; h < Hs; ++h) {
          double acc = 0;
          for (size_t k = 0; k < keys.size(); ++k) acc += w[k] * at(keys[k], 2)[h];
          out[h] = static_cast<float>(acc / sum);
        }
      }
    }
}

class LongformerAttention : public Kernel {
 public:
  explicit LongformerAttention(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)), window_(init.attrs.getInt("window", -1)) {
    if (heads_ <= 0) fail("LongformerAttention needs num_heads > 0");
    if (window_ < 0) fail("LongformerAttention needs window >= 0");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.rank() != 3)
      return Status::error("input must be float32 [batch, sequence, hidden], got " +
                           shapeToString(x.shape()));
    const int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), N = heads_;
    if (D % N != 0)
      return Status::error("hidden size " + std::to_string(D) + " is not a multiple of num_heads " +
                           std::to_string(N));
    auto check = [&](size_t i, const char* name, DType t, const Shape& want) {
      return expectInput(ctx, i, name, t, want);
    };
    DW_RETURN_IF_ERROR(check(1, "weight", DType::kFloat, {D, 3 * D}));
    DW_RETURN_IF_ERROR(check(2, "bias", DType::kFloat, {3 * D}));
    DW_RETURN_IF_ERROR(check(3, "mask", DType::kFloat, {B, S}));
    DW_RETURN_IF_ERROR(check(4, "global_weight", DType::kFloat, {D, 3 * D}));
    DW_RETURN_IF_ERROR(check(5, "global_bias", DType::kFloat, {3 * D}));
    DW_RETURN_IF_ERROR(check(6, "global", DType::kInt32, {B, S}));
    auto project = [&](size_t w, size_t b) {
      return projectRows(x.data<float>(), B * S, D, ctx.input(w).data<float>(), 3 * D,
                         ctx.input(b).data<float>());
    };
    const std::vector<float> local = project(1, 2), global = project(4, 5);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, {B, S, D}));
    attendLongformer(local.data(), global.data(), ctx.input(3).data<float>(),
                     ctx.input(6).data<int32_t>(), B, S, D, N, window_, y->data<float>());
    return Status();
  }

 private:
  int64_t heads_, window_;
};

// QOrderedLongformerAttention (com.microsoft; ONNX Runtime runs it only on its GPU):
// LongformerAttention on int8 input [B, S, hidden]. Each projection is an int8 product with
// int32 sums, scaled to its gemm scale with the bias (given in that scale's units, as ONNX Runtime
// takes it) and saturated to int8; dequantized, the attention runs as LongformerAttention's
// (here in float32, where ONNX Runtime's GPU kernel uses float16), and the output is quantized
// with scale_output. Orders: input and output ROW, weights COL, as ONNX Runtime accepts them.
class QOrderedLongformerAttention : public Kernel {
 public:
  explicit QOrderedLongformerAttention(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)), window_(init.attrs.getInt("window", -1)) {
    if (heads_ <= 0) fail("QOrderedLongformerAttention needs num_heads > 0");
    if (window_ < 0) fail("QOrderedLongformerAttention needs window >= 0");
    if (init.attrs.getInt("order_input", 1) != 1 || init.attrs.getInt("order_output", 1) != 1 ||
        init.attrs.getInt("order_weight", 0) != 0 ||
        init.attrs.getInt("order_global_weight", 0) != 0)
      fail(
          "QOrderedLongformerAttention takes its input and output in ROW order (1) and its "
          "weights in COL order (0), as ONNX Runtime does");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kInt8 || x.rank() != 3)
      return Status::error("input must be int8 [batch, sequence, hidden], got " +
                           shapeToString(x.shape()));
    const int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), N = heads_;
    if (D % N != 0)
      return Status::error("hidden size " + std::to_string(D) + " is not a multiple of num_heads " +
                           std::to_string(N));
    auto scalar = [&](size_t i, const char* name) -> Result<float> {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != DType::kFloat || t.size() != 1 || !(t.data<float>()[0] > 0))
        return Status::error(std::string(name) + " must be one positive float32 value");
      return t.data<float>()[0];
    };
    auto check = [&](size_t i, const char* name, DType t, const Shape& want) {
      return expectInput(ctx, i, name, t, want);
    };
    DW_RETURN_IF_ERROR(check(2, "weight", DType::kInt8, {D, 3 * D}));
    DW_RETURN_IF_ERROR(check(4, "bias", DType::kFloat, {3 * D}));
    DW_RETURN_IF_ERROR(check(8, "global_weight", DType::kInt8, {D, 3 * D}));
    DW_RETURN_IF_ERROR(check(10, "global_bias", DType::kFloat, {3 * D}));
    DW_RETURN_IF_ERROR(check(12, "global", DType::kInt32, {B, S}));
    const Tensor& m = ctx.input(7);
    if ((m.dtype() != DType::kFloat16 && m.dtype() != DType::kFloat) || m.shape() != Shape{B, S})
      return Status::error("mask must be float16 or float32 [" + std::to_string(B) + ", " +
                           std::to_string(S) + "], got " + shapeToString(m.shape()));
    std::vector<float> mask(B * S);
    for (int64_t i = 0; i < B * S; ++i)
      mask[i] =
          m.dtype() == DType::kFloat ? m.data<float>()[i] : halfToFloat(m.data<uint16_t>()[i]);
    auto sIn = scalar(1, "scale_input"), sW = scalar(3, "scale_weight"),
         sQkv = scalar(6, "scale_qkv_gemm"), sGw = scalar(9, "scale_global_weight"),
         sG = scalar(11, "scale_global_gemm"), sOut = scalar(13, "scale_output");
    for (const auto* v : {&sIn, &sW, &sQkv, &sGw, &sG, &sOut})
      if (!*v) return v->status();
    // One projection: int8 [B * S, 3D] in the gemm's scale, returned dequantized.
    auto project = [&](size_t w, size_t biasAt, float sWeight, float sGemm) {
      const int8_t *xi = x.data<int8_t>(), *wi = ctx.input(w).data<int8_t>();
      const float* bias = ctx.input(biasAt).data<float>();
      const float alpha = *sIn * sWeight / sGemm;
      std::vector<float> out(static_cast<size_t>(B * S * 3 * D));
      for (int64_t r = 0; r < B * S; ++r)
        for (int64_t c = 0; c < 3 * D; ++c) {
          int32_t acc = 0;
          // COL order: column c's D codes lie together.
          for (int64_t k = 0; k < D; ++k) acc += int32_t(xi[r * D + k]) * wi[c * D + k];
          out[r * 3 * D + c] = sGemm * saturateInt8(alpha * static_cast<float>(acc) + bias[c]);
        }
      return out;
    };
    const std::vector<float> local = project(2, 4, *sW, *sQkv), global = project(8, 10, *sGw, *sG);
    std::vector<float> y(static_cast<size_t>(B * S * D));
    attendLongformer(local.data(), global.data(), mask.data(), ctx.input(12).data<int32_t>(), B, S,
                     D, N, window_, y.data());
    DW_ALLOC(out, ctx.output(0, DType::kInt8, {B, S, D}));
    const float inverse = 1.0f / *sOut;
    for (int64_t i = 0; i < B * S * D; ++i)
      out->data<int8_t>()[i] = static_cast<int8_t>(saturateInt8(y[i] * inverse));
    return Status();
  }

 private:
  // Rounded half to even and saturated to [-128, 127]; NaN as 0.
  static float saturateInt8(float v) {
    if (std::isnan(v)) return 0;
    return std::nearbyint(std::clamp(v, -128.0f, 127.0f));
  }
  int64_t heads_, window_;
};

// DecoderAttention (com.microsoft; ONNX Runtime runs it only on its GPU): BART's and fairseq's
// decoder attention, sequence-first. q = (query q_weight + bias[:hidden]) / sqrt(head size).
// Cross-attention (static_kv): keys and values from key ([T, B, hidden]) times kv_weight plus
// bias[hidden:], or, with use_past, key_cache and value_cache as they are. Self-attention: keys
// and values from query, after key_cache and value_cache with use_past. key_padding_mask
// ([B, keys], true masks, applied with has_key_padding_mask) sets a key's score to
// mask_filter_value. new_key_cache/new_value_cache ([B, heads, keys, size]) return the keys and
// values used.
class DecoderAttention : public Kernel {
 public:
  explicit DecoderAttention(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)),
        maskFilter_(init.attrs.getFloat("mask_filter_value", -10000.0f)) {
    if (heads_ <= 0) fail("DecoderAttention needs num_heads > 0");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor &query = ctx.input(0), &key = ctx.input(1);
    if (query.dtype() != DType::kFloat || query.rank() != 3 || key.dtype() != DType::kFloat ||
        key.rank() != 3)
      return Status::error("query and key must be float32 [sequence, batch, hidden], got " +
                           shapeToString(query.shape()) + " and " + shapeToString(key.shape()));
    const int64_t S = query.dim(0), B = query.dim(1), D = query.dim(2), N = heads_;
    if (D % N != 0 || key.dim(1) != B || key.dim(2) != D)
      return Status::error("key " + shapeToString(key.shape()) + " must be [keys, " +
                           std::to_string(B) + ", " + std::to_string(D) +
                           "] and the hidden size a multiple of num_heads");
    const int64_t Hs = D / N;
    auto flag = [&](size_t i, const char* name) -> Result<bool> {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != DType::kBool || t.size() != 1)
        return Status::error(std::string(name) + " must be one bool");
      return *t.data<bool>();
    };
    auto staticKv = flag(8, "static_kv"), usePast = flag(9, "use_past"),
         layerState = flag(10, "has_layer_state"), useMask = flag(11, "has_key_padding_mask");
    for (auto* f : {&staticKv, &usePast, &layerState, &useMask})
      if (!*f) return f->status();
    const Tensor &qw = ctx.input(2), &kvw = ctx.input(3), &bias = ctx.input(4);
    if (qw.shape() != Shape{D, D} || kvw.shape() != Shape{D, 2 * D} || bias.size() != 3 * D ||
        qw.dtype() != DType::kFloat || kvw.dtype() != DType::kFloat ||
        bias.dtype() != DType::kFloat)
      return Status::error("q_weight, kv_weight and bias must be float32 [" + std::to_string(D) +
                           ", " + std::to_string(D) + "], [" + std::to_string(D) + ", " +
                           std::to_string(2 * D) + "] and [" + std::to_string(3 * D) + "]");
    // Rows [rows, D] times W [D, cols] plus bias[from..].
    auto project = [&](const float* x, int64_t rows, const Tensor& W, int64_t from) {
      return projectRows(x, rows, D, W.data<float>(), W.dim(1), bias.data<float>() + from);
    };
    const std::vector<float> q = project(query.data<float>(), S * B, qw, 0);
    // The keys and values, [B, N, T, Hs].
    const bool caches = *usePast && ctx.hasInput(6) && ctx.hasInput(7);
    if (*usePast && !caches) return Status::error("use_past needs key_cache and value_cache");
    int64_t past = 0;
    if (caches) {
      const Tensor &kc = ctx.input(6), &vc = ctx.input(7);
      if (kc.dtype() != DType::kFloat || kc.rank() != 4 || kc.dim(0) != B || kc.dim(1) != N ||
          kc.dim(3) != Hs || vc.shape() != kc.shape())
        return Status::error("key_cache and value_cache must be float32 [" + std::to_string(B) +
                             ", " + std::to_string(N) + ", length, " + std::to_string(Hs) +
                             "], got " + shapeToString(kc.shape()) + " and " +
                             shapeToString(vc.shape()));
      past = kc.dim(2);
    }
    const bool reuse = *staticKv && caches;  // cross-attention to cached encoder keys
    const int64_t fresh = reuse ? 0 : (*staticKv ? key.dim(0) : S);
    const int64_t T = (*staticKv ? 0 : past) + fresh + (reuse ? past : 0);
    std::vector<float> kAll(B * N * T * Hs), vAll(B * N * T * Hs);
    auto at = [&](int64_t b, int64_t n, int64_t t) { return ((b * N + n) * T + t) * Hs; };
    const int64_t offset = reuse ? 0 : (*staticKv ? 0 : past);
    if (caches && (reuse || !*staticKv))
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t t = 0; t < past; ++t)
            for (int64_t h = 0; h < Hs; ++h) {
              const int64_t from = ((b * N + n) * past + t) * Hs + h;
              kAll[at(b, n, t) + h] = ctx.input(6).data<float>()[from];
              vAll[at(b, n, t) + h] = ctx.input(7).data<float>()[from];
            }
    if (fresh > 0) {
      const float* src = *staticKv ? key.data<float>() : query.data<float>();
      const std::vector<float> kv = project(src, fresh * B, kvw, D);
      for (int64_t t = 0; t < fresh; ++t)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t n = 0; n < N; ++n)
            for (int64_t h = 0; h < Hs; ++h) {
              const int64_t row = (t * B + b) * 2 * D;
              kAll[at(b, n, offset + t) + h] = kv[row + n * Hs + h];
              vAll[at(b, n, offset + t) + h] = kv[row + D + n * Hs + h];
            }
    }
    const bool* mask = nullptr;
    if (*useMask) {
      if (!ctx.hasInput(5)) return Status::error("has_key_padding_mask needs key_padding_mask");
      const Tensor& m = ctx.input(5);
      if (m.dtype() != DType::kBool || m.shape() != Shape{B, T})
        return Status::error("key_padding_mask must be bool [" + std::to_string(B) + ", " +
                             std::to_string(T) + "] (batch, keys), got " +
                             shapeToString(m.shape()));
      mask = m.data<bool>();
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, {S, B, D}));
    const double scale = 1.0 / std::sqrt(static_cast<double>(Hs));
    std::vector<double> w(T);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n) {
          const float* qi = &q[(s * B + b) * D + n * Hs];
          double top = -INFINITY;
          for (int64_t t = 0; t < T; ++t) {
            double d = 0;
            for (int64_t h = 0; h < Hs; ++h)
              d += static_cast<double>(qi[h]) * kAll[at(b, n, t) + h];
            w[t] = mask && mask[b * T + t] ? maskFilter_ : d * scale;
            top = std::max(top, w[t]);
          }
          double sum = 0;
          for (auto& v : w) sum += (v = std::exp(v - top));
          float* out = y->data<float>() + (s * B + b) * D + n * Hs;
          for (int64_t h = 0; h < Hs; ++h) {
            double acc = 0;
            for (int64_t t = 0; t < T; ++t) acc += w[t] * vAll[at(b, n, t) + h];
            out[h] = static_cast<float>(acc / sum);
          }
        }
    if (*layerState)
      for (size_t o : {1, 2})
        if (ctx.wantsOutput(o)) {
          DW_ALLOC(c, ctx.output(o, DType::kFloat, {B, N, T, Hs}));
          std::copy_n((o == 1 ? kAll : vAll).data(), kAll.size(), c->data<float>());
        }
    return Status();
  }

 private:
  int64_t heads_;
  float maskFilter_;
};

}  // namespace

void addLongformerKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "LongformerAttention", 1, kMaxOpset, &makeKernel<LongformerAttention>,
        false, dw::kMicrosoftDomain);
  r.add(kReferenceTable, "QOrderedLongformerAttention", 1, kMaxOpset,
        &makeKernel<QOrderedLongformerAttention>, false, dw::kMicrosoftDomain);
  r.add(kReferenceTable, "DecoderAttention", 1, kMaxOpset, &makeKernel<DecoderAttention>, false,
        dw::kMicrosoftDomain);
}

}  // namespace dw::engine
