// The LSTM variants of com.microsoft (ONNX Runtime's contrib domain), on the host:
// - DynamicQuantizeLSTM: int8 or uint8 weights, transposed against ai.onnx's ([dirs, in, 4H]),
//   with a scale and zero point per direction or per column. Every product quantizes its float
//   operand on the fly to uint8 over that operand's own range (widened to hold 0), multiplies in
//   int32 and scales back: the input projection once over all steps, the recurrent one every
//   step over the batch's h. This is ONNX Runtime's arithmetic on one thread; its CPU kernel on
//   several threads quantizes h in slices of the batch, each over its own range, so its results
//   depend on the thread count, and these match its one-thread results.
// - AttnLSTM: an LSTM whose input at each step also carries an attention state over a memory
//   (Bahdanau's additive attention: keys = memory MW, scores V . tanh(keys + h QW), softmax over
//   each row's memory length, context = the scores' weighting of the memory, optionally mixed with
//   h through AW). The state starts at zero and is computed after each step for the next.
// Both share ai.onnx LSTM's cell (gate order i, o, f, c; peepholes, clip after the bias,
// input_forget, activations), its per-row sequence lengths and its direction handling.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/rnn_common.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

using rnn::Act;

// The attributes, sizes and per-row lengths of a call, and the cell both kernels step.
class LstmVariant : public Kernel, protected rnn::RnnAttrs {
 public:
  explicit LstmVariant(const KernelInit& init) : op_(init.opType) {
    Status st = parse("LSTM", init.attrs, init.node);
    if (!st.ok()) fail(st.message());
    if (layout_ != 0) fail(op_ + " has no layout attribute; its tensors are time-major");
    if (hasClip_ && !(clip_ > 0)) fail("clip must be positive");
  }

 protected:
  // X [T, N, I]; sequence_lens (input `lensAt`) int32 [N] with values in [minLen, T].
  Status readSizes(const KernelContext& ctx, size_t lensAt, int64_t minLen) {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.rank() != 3)
      return Status::error("X must be float [sequence, batch, input], got " +
                           std::string(dtypeName(x.dtype())) + " " + shapeToString(x.shape()));
    T_ = x.dim(0), N_ = x.dim(1), I_ = x.dim(2), H_ = hidden_;
    if (H_ <= 0) return Status::error("hidden_size must be given and positive");
    lens_.assign(static_cast<size_t>(N_), T_);
    if (ctx.hasInput(lensAt)) {
      const Tensor& l = ctx.input(lensAt);
      if (l.dtype() != DType::kInt32 || l.shape() != Shape{N_})
        return Status::error("sequence_lens must be int32 [" + std::to_string(N_) + "], got " +
                             shapeToString(l.shape()));
      for (int64_t b = 0; b < N_; ++b) {
        const int64_t v = l.data<int32_t>()[b];
        if (v < minLen || v > T_)
          return Status::error("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(v) +
                               ", outside [" + std::to_string(minLen) + ", " + std::to_string(T_) +
                               "]");
        lens_[static_cast<size_t>(b)] = v;
      }
    }
    maxLen_ = N_ == 0 ? 0 : *std::max_element(lens_.begin(), lens_.end());
    return Status();
  }

  // A float input that must be `shape` when given; null when absent.
  Result<const float*> optional(const KernelContext& ctx, size_t i, const char* name,
                                const Shape& shape) const {
    if (!ctx.hasInput(i)) return static_cast<const float*>(nullptr);
    const Tensor& t = ctx.input(i);
    if (t.dtype() != DType::kFloat || t.shape() != shape)
      return Status::error(std::string(name) + " must be float " + shapeToString(shape) + ", got " +
                           std::string(dtypeName(t.dtype())) + " " + shapeToString(t.shape()));
    return t.data<float>();
  }

  // Outputs Y [T, D, N, H] (zeros where a row has ended), Y_h and Y_c [D, N, H].
  Status allocate(KernelContext& ctx) {
    y_ = ctx.output(0, DType::kFloat, Shape{T_, dirs_, N_, H_});
    yh_ = ctx.output(1, DType::kFloat, Shape{dirs_, N_, H_});
    yc_ = ctx.output(2, DType::kFloat, Shape{dirs_, N_, H_});
    if (!y_ || !yh_ || !yc_) return ctx.status();
    std::fill_n(y_->data<float>(), y_->size(), 0.0f);
    return Status();
  }

  bool reverse(int64_t d) const { return d == 1 || direction_ == "reverse"; }
  // The input position a direction reads at step s of row b (s < the row's length): a reversed
  // row runs through its own length backwards.
  int64_t position(int64_t d, int64_t s, int64_t b) const {
    return reverse(d) ? lens_[static_cast<size_t>(b)] - 1 - s : s;
  }

  float clip(float v) const { return hasClip_ ? std::clamp(v, -clip_, clip_) : v; }

  // One row's step: g holds the four gates' products (i, o, f, c); bias [4H] (W's and R's
  // summed) and peepholes P [3H] (i, o, f) may be null. c is updated in place, h written.
  void cell(int64_t d, float* g, const float* bias, const float* P, float* c, float* h) const {
    const int64_t H = H_;
    const Act* acts = &acts_[static_cast<size_t>(d * 3)];
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      if (P) gi[j] += P[j] * c[j];
      gi[j] = clip(gi[j] + (bias ? bias[j] : 0.0f));
    }
    acts[0].apply(gi, H);
    if (inputForget_) {
      for (int64_t j = 0; j < H; ++j) gf[j] = 1 - gi[j];
    } else {
      for (int64_t j = 0; j < H; ++j) {
        if (P) gf[j] += P[2 * H + j] * c[j];
        gf[j] = clip(gf[j] + (bias ? bias[2 * H + j] : 0.0f));
      }
      acts[0].apply(gf, H);
    }
    for (int64_t j = 0; j < H; ++j) gc[j] = clip(gc[j] + (bias ? bias[3 * H + j] : 0.0f));
    acts[1].apply(gc, H);
    for (int64_t j = 0; j < H; ++j) c[j] = c[j] * gf[j] + gi[j] * gc[j];
    for (int64_t j = 0; j < H; ++j) {
      if (P) go[j] += P[H + j] * c[j];  // the new cell state
      go[j] = clip(go[j] + (bias ? bias[H + j] : 0.0f));
    }
    acts[0].apply(go, H);
    std::copy_n(c, H, h);
    acts[2].apply(h, H);
    for (int64_t j = 0; j < H; ++j) h[j] *= go[j];
  }

  // Per direction: W's and R's biases summed ([4H]), or null.
  std::vector<float> summedBias(const float* B, int64_t d) const {
    if (!B) return {};
    std::vector<float> s(static_cast<size_t>(4 * H_));
    for (int64_t j = 0; j < 4 * H_; ++j) s[j] = B[d * 8 * H_ + j] + B[d * 8 * H_ + 4 * H_ + j];
    return s;
  }

  // The initial state of direction d (h0 or c0 [D, N, H], or zeros).
  void initialState(const float* s, int64_t d, std::vector<float>& out) const {
    out.assign(static_cast<size_t>(N_ * H_), 0.0f);
    if (s) std::copy_n(s + d * N_ * H_, N_ * H_, out.data());
  }

  // Row b's cell at step s of direction d, its h written to Y, and to Y_h and Y_c at its last
  // step. c and h hold every row's state.
  void stepRow(int64_t d, int64_t s, int64_t b, float* g, const std::vector<float>& bias,
               const float* P, std::vector<float>& c, std::vector<float>& h) const {
    const int64_t H = H_, N = N_;
    cell(d, g, bias.empty() ? nullptr : bias.data(), P, &c[b * H], &h[b * H]);
    std::copy_n(&h[b * H], H, yAt(position(d, s, b), d, b));
    if (s != lens_[b] - 1) return;
    std::copy_n(&h[b * H], H, yh_->data<float>() + (d * N + b) * H);
    std::copy_n(&c[b * H], H, yc_->data<float>() + (d * N + b) * H);
  }

  float* yAt(int64_t t, int64_t d, int64_t b) const {
    return y_->data<float>() + ((t * dirs_ + d) * N_ + b) * H_;
  }

  std::string op_;
  int64_t T_ = 0, N_ = 0, I_ = 0, H_ = 0, maxLen_ = 0;
  std::vector<int64_t> lens_;
  Tensor *y_ = nullptr, *yh_ = nullptr, *yc_ = nullptr;
};

// A weight matrix [K, C] of int8 or uint8 codes with its zero point and scales (one, or one per
// column), for one direction.
struct QuantWeights {
  std::vector<int16_t> codes;  // [C][K]: each column's codes minus the zero point, contiguous
  std::vector<float> scale;    // [C]
  int64_t K = 0, C = 0;
};

// ONNX Runtime's dynamic quantization of a float matrix: uint8 over [min(a, 0), max(a, 0)].
struct QuantRows {
  std::vector<int16_t> q;  // codes minus the zero point
  float scale = 1;
};
void quantizeRows(const float* a, int64_t n, QuantRows& out) {
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) lo = std::min(lo, a[i]), hi = std::max(hi, a[i]);
  out.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / out.scale, 0.0f, 255.0f));
  out.q.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out.q[i] =
        static_cast<int16_t>(std::clamp(std::nearbyint(a[i] / out.scale) + zp, 0.0f, 255.0f) - zp);
}

// out[m][c] += float(sum_k a[m][k] w[c][k]) * (scale_a * scale_w[c]), exact int32 sums.
void addProduct(const QuantRows& a, int64_t M, const QuantWeights& w, float* out, int64_t ldo) {
  for (int64_t m = 0; m < M; ++m) {
    const int16_t* ar = a.q.data() + m * w.K;
    for (int64_t c = 0; c < w.C; ++c) {
      const int16_t* wc = w.codes.data() + c * w.K;
      int32_t acc = 0;
      for (int64_t k = 0; k < w.K; ++k) acc += int32_t(ar[k]) * wc[k];
      out[m * ldo + c] += static_cast<float>(acc) * (a.scale * w.scale[c]);
    }
  }
}

class DynamicQuantizeLstm : public LstmVariant {
 public:
  using LstmVariant::LstmVariant;
  Status compute(KernelContext& ctx) override {
    DW_RETURN_IF_ERROR(readSizes(ctx, 4, 0));
    const int64_t N = N_, I = I_, H = H_, D = dirs_, G = 4 * H;
    QuantWeights w[2], r[2];
    DW_RETURN_IF_ERROR(weights(ctx, 1, 8, 9, "W", I, w));
    DW_RETURN_IF_ERROR(weights(ctx, 2, 10, 11, "R", H, r));
    auto B = optional(ctx, 3, "B", Shape{D, 8 * H});
    auto h0 = optional(ctx, 5, "initial_h", Shape{D, N, H});
    auto c0 = optional(ctx, 6, "initial_c", Shape{D, N, H});
    auto P = optional(ctx, 7, "P", Shape{D, 3 * H});
    for (const auto* v : {&B, &h0, &c0, &P})
      if (!*v) return v->status();
    DW_RETURN_IF_ERROR(allocate(ctx));
    // The input projection of the steps any row reaches, quantized as one matrix (so both
    // directions, which read the same rows in other orders, share its range).
    const float* X = ctx.input(0).data<float>();
    QuantRows xq;
    quantizeRows(X, maxLen_ * N * I, xq);
    std::vector<float> xw(static_cast<size_t>(maxLen_ * N * G)), gates(N * G), h, c;
    QuantRows hq;
    for (int64_t d = 0; d < D; ++d) {
      std::fill(xw.begin(), xw.end(), 0.0f);
      addProduct(xq, maxLen_ * N, w[d], xw.data(), G);
      const std::vector<float> bias = summedBias(*B, d);
      const float* Pd = *P ? *P + d * 3 * H : nullptr;
      initialState(*h0, d, h);
      initialState(*c0, d, c);
      for (int64_t s = 0; s < maxLen_; ++s) {
        // Rows that have ended take part as zeros (their h is no longer defined).
        if (s > 0)
          for (int64_t b = 0; b < N; ++b)
            if (s > lens_[b]) std::fill_n(&h[b * H], H, 0.0f);
        for (int64_t b = 0; b < N; ++b)
          if (s < lens_[b]) std::copy_n(&xw[(position(d, s, b) * N + b) * G], G, &gates[b * G]);
        quantizeRows(h.data(), N * H, hq);
        addProduct(hq, N, r[d], gates.data(), G);
        for (int64_t b = 0; b < N; ++b)
          if (s < lens_[b]) stepRow(d, s, b, &gates[b * G], bias, Pd, c, h);
      }
      for (int64_t b = 0; b < N; ++b)
        if (lens_[b] == 0) {  // a row with nothing to read ends where it started: zeros
          std::fill_n(yh_->data<float>() + (d * N + b) * H, H, 0.0f);
          std::fill_n(yc_->data<float>() + (d * N + b) * H, H, 0.0f);
        }
    }
    return Status();
  }

 private:
  // Codes at input `at` ([D, K, 4H], int8 or uint8), scale at `scaleAt` and zero point at
  // `zeroAt` ([D] or [D, 4H] each; one zero point per direction is what the format allows).
  Status weights(const KernelContext& ctx, size_t at, size_t scaleAt, size_t zeroAt,
                 const std::string& name, int64_t K, QuantWeights* out) const {
    const int64_t D = dirs_, C = 4 * H_;
    const Tensor &t = ctx.input(at), &sc = ctx.input(scaleAt), &zp = ctx.input(zeroAt);
    if ((t.dtype() != DType::kInt8 && t.dtype() != DType::kUInt8) || t.shape() != Shape{D, K, C})
      return Status::error(name + " must be int8 or uint8 " + shapeToString(Shape{D, K, C}) +
                           " (inputs by gates, transposed against LSTM's), got " +
                           std::string(dtypeName(t.dtype())) + " " + shapeToString(t.shape()));
    auto perDirOrColumn = [&](const Shape& s) { return s == Shape{D} || s == Shape{D, C}; };
    if (sc.dtype() != DType::kFloat || !perDirOrColumn(sc.shape()))
      return Status::error(name + "_scale must be float [" + std::to_string(D) + "] or [" +
                           std::to_string(D) + ", " + std::to_string(C) + "], got " +
                           shapeToString(sc.shape()));
    if (zp.dtype() != t.dtype() || !perDirOrColumn(zp.shape()))
      return Status::error(name + "_zero_point must be " + std::string(dtypeName(t.dtype())) +
                           " [" + std::to_string(D) + "] or [" + std::to_string(D) + ", " +
                           std::to_string(C) + "], got " + shapeToString(zp.shape()));
    const bool sgn = t.dtype() == DType::kInt8;
    auto code = [&](const Tensor& v, int64_t i) -> int32_t {
      return sgn ? v.data<int8_t>()[i] : v.data<uint8_t>()[i];
    };
    const int64_t zpPer = zp.rank() == 2 ? C : 1;
    for (int64_t d = 0; d < D; ++d) {
      const int32_t z = code(zp, d * zpPer);
      for (int64_t j = 1; j < zpPer; ++j)
        if (code(zp, d * zpPer + j) != z)
          return Status::error(name + "_zero_point must be one value per direction; column " +
                               std::to_string(j) + " of direction " + std::to_string(d) +
                               " differs");
      QuantWeights& q = out[d];
      q.K = K, q.C = C;
      q.codes.resize(static_cast<size_t>(K * C));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < C; ++j)
          q.codes[j * K + k] = static_cast<int16_t>(code(t, (d * K + k) * C + j) - z);
      q.scale.resize(static_cast<size_t>(C));
      for (int64_t j = 0; j < C; ++j) q.scale[j] = sc.data<float>()[sc.rank() == 2 ? d * C + j : d];
    }
    return Status();
  }
};

class AttnLstm : public LstmVariant {
 public:
  using LstmVariant::LstmVariant;
  Status compute(KernelContext& ctx) override {
    DW_RETURN_IF_ERROR(readSizes(ctx, 4, 1));
    const int64_t N = N_, I = I_, H = H_, D = dirs_, G = 4 * H;
    for (auto [at, name] : {std::pair{8, "QW"}, {9, "MW"}, {10, "V"}, {11, "M"}})
      if (!ctx.hasInput(static_cast<size_t>(at)))
        return Status::error(std::string(name) + " (input " + std::to_string(at) +
                             ") is needed: the attention reads it");
    const Tensor& mem = ctx.input(11);
    if (mem.dtype() != DType::kFloat || mem.rank() != 3 || mem.dim(0) != N)
      return Status::error("M must be float [batch " + std::to_string(N) +
                           ", memory steps, memory depth], got " + shapeToString(mem.shape()));
    const int64_t Tm = mem.dim(1), Dm = mem.dim(2);
    const Tensor& mw = ctx.input(9);
    if (mw.rank() != 3) return Status::error("MW must be [directions, memory depth, attention]");
    const int64_t Aa = mw.dim(2);
    const Tensor* aw = ctx.hasInput(13) ? &ctx.input(13) : nullptr;
    if (aw && aw->rank() != 3)
      return Status::error("AW must be [directions, hidden + memory depth, attention width]");
    const int64_t A = aw ? aw->dim(2) : Dm;  // the attention state's width
    auto W = optional(ctx, 1, "W", Shape{D, G, I + A});
    auto R = optional(ctx, 2, "R", Shape{D, G, H});
    auto B = optional(ctx, 3, "B", Shape{D, 8 * H});
    auto h0 = optional(ctx, 5, "initial_h", Shape{D, N, H});
    auto c0 = optional(ctx, 6, "initial_c", Shape{D, N, H});
    auto P = optional(ctx, 7, "P", Shape{D, 3 * H});
    auto QW = optional(ctx, 8, "QW", Shape{D, H, Aa});
    auto MW = optional(ctx, 9, "MW", Shape{D, Dm, Aa});
    auto V = optional(ctx, 10, "V", Shape{D, Aa});
    auto AW = optional(ctx, 13, "AW", Shape{D, H + Dm, A});
    for (const auto* v : {&W, &R, &B, &h0, &c0, &P, &QW, &MW, &V, &AW})
      if (!*v) return v->status();
    std::vector<int64_t> mlens(static_cast<size_t>(N), Tm);
    if (ctx.hasInput(12)) {
      const Tensor& l = ctx.input(12);
      if (l.dtype() != DType::kInt32 || l.shape() != Shape{N})
        return Status::error("memory_seq_lens must be int32 [" + std::to_string(N) + "]");
      for (int64_t b = 0; b < N; ++b) {
        mlens[b] = l.data<int32_t>()[b];
        if (mlens[b] < 1 || mlens[b] > Tm)
          return Status::error("memory_seq_lens[" + std::to_string(b) + "] is " +
                               std::to_string(mlens[b]) + ", outside [1, " + std::to_string(Tm) +
                               "]");
      }
    }
    DW_RETURN_IF_ERROR(allocate(ctx));
    const float* X = ctx.input(0).data<float>();
    const float* M = mem.data<float>();
    std::vector<float> keys(static_cast<size_t>(N * Tm * Aa)), xs(N * I), gates(N * G), h, c,
        att(N * A), pq(N * Aa), score(Tm), context(N * Dm);
    for (int64_t d = 0; d < D; ++d) {
      const float* Wd = *W + d * G * (I + A);
      const float* Rd = *R + d * G * H;
      const std::vector<float> bias = summedBias(*B, d);
      const float* Pd = *P ? *P + d * 3 * H : nullptr;
      const float* Vd = *V + d * Aa;
      // The memory's keys, once per call.
      rnn::gemm(false, false, N * Tm, Aa, Dm, M, Dm, *MW + d * Dm * Aa, Aa, 0.0f, keys.data(), Aa);
      initialState(*h0, d, h);
      initialState(*c0, d, c);
      std::fill(att.begin(), att.end(), 0.0f);
      for (int64_t s = 0; s < maxLen_; ++s) {
        for (int64_t b = 0; b < N; ++b) {
          if (s < lens_[b])
            std::copy_n(X + (position(d, s, b) * N + b) * I, I, &xs[b * I]);
          else
            std::fill_n(&xs[b * I], I, 0.0f), std::fill_n(&h[b * H], H, 0.0f);
        }
        rnn::gemm(false, true, N, G, I, xs.data(), I, Wd, I + A, 0.0f, gates.data(), G);
        rnn::gemm(false, true, N, G, A, att.data(), A, Wd + I, I + A, 1.0f, gates.data(), G);
        rnn::gemm(false, true, N, G, H, h.data(), H, Rd, H, 1.0f, gates.data(), G);
        for (int64_t b = 0; b < N; ++b) {
          if (s >= lens_[b]) {
            std::fill_n(&h[b * H], H, 0.0f);  // an ended row queries with zeros
            continue;
          }
          stepRow(d, s, b, &gates[b * G], bias, Pd, c, h);
        }
        // The attention state the next step reads.
        rnn::gemm(false, false, N, Aa, H, h.data(), H, *QW + d * H * Aa, Aa, 0.0f, pq.data(), Aa);
        for (int64_t b = 0; b < N; ++b) {
          const int64_t ml = mlens[b];
          float top = -INFINITY;
          for (int64_t m = 0; m < ml; ++m) {
            const float* k = &keys[(b * Tm + m) * Aa];
            float v = 0;
            for (int64_t j = 0; j < Aa; ++j) v += Vd[j] * std::tanh(k[j] + pq[b * Aa + j]);
            score[m] = v;
            top = std::max(top, v);
          }
          double sum = 0;
          for (int64_t m = 0; m < ml; ++m) sum += score[m] = std::exp(score[m] - top);
          float* ctxb = &context[b * Dm];
          std::fill_n(ctxb, Dm, 0.0f);
          for (int64_t m = 0; m < ml; ++m) {
            const float align = static_cast<float>(score[m] / sum);
            for (int64_t j = 0; j < Dm; ++j) ctxb[j] += align * M[(b * Tm + m) * Dm + j];
          }
        }
        if (*AW) {
          const float* awd = *AW + d * (H + Dm) * A;
          rnn::gemm(false, false, N, A, H, h.data(), H, awd, A, 0.0f, att.data(), A);
          rnn::gemm(false, false, N, A, Dm, context.data(), Dm, awd + H * A, A, 1.0f, att.data(),
                    A);
        } else {
          att = context;
        }
      }
    }
    return Status();
  }
};

}  // namespace

void addContribRnnKernels(KernelRegistry& r) {
  const std::string ms = dw::kMicrosoftDomain;
  r.add(kReferenceTable, "DynamicQuantizeLSTM", 1, kMaxOpset, &makeKernel<DynamicQuantizeLstm>,
        false, ms);
  r.add(kReferenceTable, "AttnLSTM", 1, kMaxOpset, &makeKernel<AttnLstm>, false, ms);
}

}  // namespace dw::engine
