// Shared by the recurrent forward and backward kernels (rnn_common.h).
#include "engine/onednn/rnn_common.h"

#include <immintrin.h>
#include <algorithm>

#include <cmath>

namespace dw::engine::rnn {

Act::Act() : Act(resolveUnary(*ops::findRnnActivation("Tanh"), NAN, NAN)) {}

namespace {

// A cell activation in place, compiled twice: for AVX-512 where the CPU has it, and for the
// baseline (the file is built with -fno-trapping-math, so both vectorize).
template <ops::UnaryFn F>
__attribute__((target("avx512f"))) void applyAvx512(float* v, int64_t n,
                                                    const ops::UnaryParams& p) {
  for (int64_t i = 0; i < n; ++i) v[i] = ops::unaryForward<F>(v[i], p);
}
template <ops::UnaryFn F>
void applyBaseline(float* v, int64_t n, const ops::UnaryParams& p) {
  for (int64_t i = 0; i < n; ++i) v[i] = ops::unaryForward<F>(v[i], p);
}

}  // namespace

Act::Act(const UnaryInstance& u) : u_(u) {
  ops::visitUnary(u.fn, [&](auto f) {
    derivative_ = [](float x, float y, const ops::UnaryParams& p) {
      return ops::unaryDerivative<decltype(f)::value>(x, y, p);
    };
    constexpr ops::UnaryFn kF = decltype(f)::value;
    apply_ = __builtin_cpu_supports("avx512f") ? &applyAvx512<kF> : &applyBaseline<kF>;
  });
}

namespace {

bool hasAttr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return true;
  return false;
}

}  // namespace

Status RnnAttrs::parse(const std::string& opType, const Attributes& a,
                       const onnx::NodeProto* node) {
  cell_ = opType == "LSTM" ? Cell::kLstm : (opType == "GRU" ? Cell::kGru : Cell::kRnn);
  gates_ = cell_ == Cell::kLstm ? 4 : (cell_ == Cell::kGru ? 3 : 1);
  hidden_ = a.getInt("hidden_size", 0);
  direction_ = a.getString("direction", "forward");
  // GRU-1's schema spells its default "foward"; a GRU-1 without the attribute means forward.
  if (direction_ == "foward") direction_ = "forward";
  if (direction_ != "forward" && direction_ != "reverse" && direction_ != "bidirectional")
    return Status::error("direction '" + direction_ +
                         "' must be forward, reverse or bidirectional");
  dirs_ = direction_ == "bidirectional" ? 2 : 1;
  layout_ = a.getInt("layout", 0);
  if (layout_ != 0 && layout_ != 1) return Status::error("layout must be 0 or 1");
  if (a.has("clip")) {
    clip_ = a.getFloat("clip", 0);
    hasClip_ = true;
  }
  inputForget_ = a.getInt("input_forget", 0) != 0;
  lbr_ = a.getInt("linear_before_reset", 0) != 0;
  std::vector<std::string> names = a.getStrings("activations");
  const size_t perDir = actsPerDir();
  customActs_ = !names.empty();
  if (names.empty()) {
    if (cell_ == Cell::kLstm)
      names = {"Sigmoid", "Tanh", "Tanh"};
    else if (cell_ == Cell::kGru)
      names = {"Sigmoid", "Tanh"};
    else
      names = {"Tanh"};
  }
  // RNN's schema default lists two functions whatever the direction.
  if (names.size() > perDir * dirs_ && !a.getStrings("activations").empty() && node &&
      !hasAttr(*node, "activations"))
    names.resize(perDir * dirs_);
  if (names.size() == perDir && dirs_ == 2) {
    auto copy = names;
    names.insert(names.end(), copy.begin(), copy.end());
  }
  if (names.size() != perDir * dirs_)
    return Status::error("activations must list " + std::to_string(perDir * dirs_) +
                         " functions, got " + std::to_string(names.size()));
  const auto alphas = a.getFloats("activation_alpha");
  const auto betas = a.getFloats("activation_beta");
  size_t ai = 0, bi = 0;
  acts_.clear();
  for (const auto& n : names) {
    const ops::UnaryOp* row = ops::findRnnActivation(n);
    if (!row) return Status::error("activation '" + n + "' is not an ONNX RNN activation function");
    // Each function takes as many alphas and betas, in order, as it has constants.
    const bool ua = row->attrs[0].name != nullptr, ub = row->attrs[1].name != nullptr;
    const float alpha = ua && ai < alphas.size() ? alphas[ai++] : NAN;
    const float beta = ub && bi < betas.size() ? betas[bi++] : NAN;
    acts_.emplace_back(resolveUnary(*row, alpha, beta));
  }
  // oneDNN's cells have fixed activations (vanilla RNN: tanh, relu or logistic).
  defaultActs_ = true;
  if (cell_ == Cell::kRnn) {
    for (const auto& act : acts_)
      defaultActs_ = defaultActs_ && act.fn() == acts_[0].fn() &&
                     (act.fn() == ops::UnaryFn::kTanh || act.fn() == ops::UnaryFn::kSigmoid ||
                      act.fn() == ops::UnaryFn::kRelu);
  } else {
    for (size_t i = 0; i < acts_.size(); ++i) {
      const size_t k = i % perDir;
      defaultActs_ =
          defaultActs_ && acts_[i].fn() == (k == 0 ? ops::UnaryFn::kSigmoid : ops::UnaryFn::kTanh);
    }
  }
  return Status();
}

dnnl::rnn_direction RnnAttrs::oneDnnDirection() const {
  if (dirs_ == 2) return dnnl::rnn_direction::bidirectional_concat;
  return direction_ == "reverse" ? dnnl::rnn_direction::unidirectional_right2left
                                 : dnnl::rnn_direction::unidirectional_left2right;
}

dnnl::algorithm RnnAttrs::vanillaActivation() const {
  if (acts_[0].fn() == ops::UnaryFn::kRelu) return dnnl::algorithm::eltwise_relu;
  return acts_[0].fn() == ops::UnaryFn::kSigmoid ? dnnl::algorithm::eltwise_logistic
                                                 : dnnl::algorithm::eltwise_tanh;
}

Status checkInputs(const KernelContext& ctx, const RnnAttrs& a, RnnDims* d) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& r = ctx.input(2);
  if (x.dtype() != DType::kFloat || w.dtype() != DType::kFloat || r.dtype() != DType::kFloat)
    return Status::error(std::string("only float32 is supported, got ") + dtypeName(x.dtype()));
  if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3)
    return Status::error("X, W and R must be 3-D");
  const int64_t T = a.layout_ ? x.dim(1) : x.dim(0);
  const int64_t B = a.layout_ ? x.dim(0) : x.dim(1);
  const int64_t I = x.dim(2);
  const int64_t H = a.hidden_ > 0 ? a.hidden_ : r.dim(2);
  const int64_t G = a.gates_, D = a.dirs_;
  if (w.shape() != Shape{D, G * H, I})
    return Status::error("W has shape " + shapeToString(w.shape()) + ", expected " +
                         shapeToString({D, G * H, I}));
  if (r.shape() != Shape{D, G * H, H})
    return Status::error("R has shape " + shapeToString(r.shape()) + ", expected " +
                         shapeToString({D, G * H, H}));
  const bool hasB = ctx.hasInput(3), hasLens = ctx.hasInput(4), hasH0 = ctx.hasInput(5);
  const bool hasC0 = a.cell_ == Cell::kLstm && ctx.hasInput(6);
  const bool hasP = a.cell_ == Cell::kLstm && ctx.hasInput(7);
  const Shape stateShape = a.layout_ ? Shape{B, D, H} : Shape{D, B, H};
  if (hasB && ctx.input(3).shape() != Shape{D, 2 * G * H})
    return Status::error("B must have shape " + shapeToString({D, 2 * G * H}));
  if (hasH0 && ctx.input(5).shape() != stateShape)
    return Status::error("initial_h must have shape " + shapeToString(stateShape));
  if (hasC0 && ctx.input(6).shape() != stateShape)
    return Status::error("initial_c must have shape " + shapeToString(stateShape));
  if (hasP && ctx.input(7).shape() != Shape{D, 3 * H})
    return Status::error("P must have shape " + shapeToString({D, 3 * H}));
  for (int i : {3, 5, 6, 7})
    if (ctx.hasInput(i) && ctx.input(i).dtype() != DType::kFloat)
      return Status::error("B, initial_h, initial_c and P must be float32");
  d->T = T;
  d->B = B;
  d->I = I;
  d->H = H;
  d->lens.assign(B, T);
  d->fullLens = true;
  if (hasLens) {
    const Tensor& sl = ctx.input(4);
    if (sl.size() != B) return Status::error("sequence_lens must have one entry per batch");
    for (int64_t b = 0; b < B; ++b) {
      d->lens[b] = sl.getInt(b);
      if (d->lens[b] < 0 || d->lens[b] > T)
        return Status::error("sequence_lens[" + std::to_string(b) +
                             "] = " + std::to_string(d->lens[b]) + " is outside [0, " +
                             std::to_string(T) + "]");
      d->fullLens = d->fullLens && d->lens[b] == T;
    }
  }
  return Status();
}

namespace {

// oneDNN gate g holds ONNX gate onnxGate(g): LSTM i,o,f,c -> oneDNN i,f,c,o; GRU z,r,h and RNN
// match.
int64_t onnxGate(const RnnAttrs& a, int64_t g) {
  static const int kLstmPerm[4] = {0, 2, 3, 1};
  return a.cell_ == Cell::kLstm ? kLstmPerm[g] : g;
}

// Peepholes: ONNX P i, o, f -> oneDNN i, f, o.
constexpr int kPeepPerm[3] = {0, 2, 1};

}  // namespace

int64_t oneDnnBiasGates(const RnnAttrs& a) {
  return a.cell_ == Cell::kGru && a.lbr_ ? 4 : a.gates_;
}

void toOneDnnWeights(const RnnAttrs& a, int64_t D, int64_t H, int64_t I, const float* W,
                     const float* R, const float* Bias, const float* P, OneDnnWeights* out) {
  const int64_t G = a.gates_, GH = G * H, biasGates = oneDnnBiasGates(a);
  out->layer.resize(D * GH * I);
  out->iter.resize(D * GH * H);
  out->bias.assign(D * biasGates * H, 0.0f);
  out->peep.assign(D * 3 * H, 0.0f);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t g = 0; g < G; ++g) {
      std::copy_n(W + (d * GH + onnxGate(a, g) * H) * I, H * I, &out->layer[(d * GH + g * H) * I]);
      std::copy_n(R + (d * GH + onnxGate(a, g) * H) * H, H * H, &out->iter[(d * GH + g * H) * H]);
    }
  if (Bias) {
    for (int64_t d = 0; d < D; ++d) {
      const float* wb = Bias + d * 2 * GH;
      const float* rb = wb + GH;
      for (int64_t g = 0; g < G; ++g) {
        const int64_t og = onnxGate(a, g);
        const bool split = a.cell_ == Cell::kGru && a.lbr_ && g == 2;
        for (int64_t h = 0; h < H; ++h)
          out->bias[(d * biasGates + g) * H + h] = wb[og * H + h] + (split ? 0.0f : rb[og * H + h]);
        if (split)
          for (int64_t h = 0; h < H; ++h) out->bias[(d * biasGates + 3) * H + h] = rb[og * H + h];
      }
    }
  }
  if (P)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t g = 0; g < 3; ++g)
        std::copy_n(P + (d * 3 + kPeepPerm[g]) * H, H, &out->peep[(d * 3 + g) * H]);
}

void fromOneDnnWeights(const RnnAttrs& a, int64_t D, int64_t H, int64_t I, const OneDnnWeights& g,
                       float* dW, float* dR, float* dB, float* dP) {
  const int64_t G = a.gates_, GH = G * H, biasGates = oneDnnBiasGates(a);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t k = 0; k < G; ++k) {
      const int64_t og = onnxGate(a, k);
      if (dW) std::copy_n(&g.layer[(d * GH + k * H) * I], H * I, dW + (d * GH + og * H) * I);
      if (dR) std::copy_n(&g.iter[(d * GH + k * H) * H], H * H, dR + (d * GH + og * H) * H);
      if (dB) {
        // A summed bias sends its gradient to both of its terms.
        const bool split = a.cell_ == Cell::kGru && a.lbr_ && k == 2;
        float* wb = dB + d * 2 * GH + og * H;
        std::copy_n(&g.bias[(d * biasGates + k) * H], H, wb);
        std::copy_n(&g.bias[(d * biasGates + (split ? 3 : k)) * H], H, wb + GH);
      }
    }
  if (dP)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t k = 0; k < 3; ++k)
        std::copy_n(&g.peep[(d * 3 + k) * H], H, dP + (d * 3 + kPeepPerm[k]) * H);
}

namespace {

// Rows b0..b0+BR of out, 32 columns at a time with the block's sums in registers: each k reads
// 32 of R's transposed row once for all BR batch rows.
template <int BR>
__attribute__((always_inline)) inline void smallGemmRows(int64_t N, int64_t K, const float* h,
                                                         int64_t ldh, const float* rt, int64_t ldr,
                                                         float* out, int64_t ldo) {
  constexpr int64_t kCols = 32;
  int64_t j0 = 0;
  for (; j0 + kCols <= N; j0 += kCols) {
    float acc[BR][kCols] = {};
    for (int64_t k = 0; k < K; ++k) {
      const float* __restrict r = rt + k * ldr + j0;
      for (int b = 0; b < BR; ++b) {
        const float v = h[b * ldh + k];
        for (int64_t jj = 0; jj < kCols; ++jj) acc[b][jj] += v * r[jj];
      }
    }
    for (int b = 0; b < BR; ++b)
      for (int64_t jj = 0; jj < kCols; ++jj) out[b * ldo + j0 + jj] = acc[b][jj];
  }
  for (int b = 0; b < BR; ++b)
    for (int64_t j = j0; j < N; ++j) {
      float v = 0;
      for (int64_t k = 0; k < K; ++k) v += h[b * ldh + k] * rt[k * ldr + j];
      out[b * ldo + j] = v;
    }
}

// AVX-512: BR batch rows and NV vectors of columns of sums in registers; each k loads NV
// vectors of R's transposed row and broadcasts one value per row.
template <int BR, int NV>
__attribute__((target("avx512f"), always_inline)) inline void smallGemmBlock(
    int64_t K, const float* h, int64_t ldh, const float* rt, int64_t ldr, float* out, int64_t ldo) {
  __m512 acc[BR][NV];
  for (int b = 0; b < BR; ++b)
    for (int c = 0; c < NV; ++c) acc[b][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 r[NV];
    for (int c = 0; c < NV; ++c) r[c] = _mm512_loadu_ps(rt + k * ldr + 16 * c);
    for (int b = 0; b < BR; ++b) {
      const __m512 v = _mm512_set1_ps(h[b * ldh + k]);
      for (int c = 0; c < NV; ++c) acc[b][c] = _mm512_fmadd_ps(v, r[c], acc[b][c]);
    }
  }
  for (int b = 0; b < BR; ++b)
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(out + b * ldo + 16 * c, acc[b][c]);
}

// Blocks of 24 accumulators (8 rows x 3 vectors, 4 x 6): with 16 (8 x 2), a step of the
// zoo's LSTM (8 rows, 512 columns, K 128) took 4.0 us, with 24 3.8, and at 4 rows 3.6 against
// 2.3 us.
template <int BR>
__attribute__((target("avx512f"))) void smallGemmAvx512(int64_t N, int64_t K, const float* h,
                                                        int64_t ldh, const float* rt, int64_t ldr,
                                                        float* out, int64_t ldo) {
  constexpr int kWide = BR >= 8 ? 3 : 6;
  int64_t j0 = 0;
  for (; j0 + 16 * kWide <= N; j0 += 16 * kWide)
    smallGemmBlock<BR, kWide>(K, h, ldh, rt + j0, ldr, out + j0, ldo);
  for (; j0 + 32 <= N; j0 += 32) smallGemmBlock<BR, 2>(K, h, ldh, rt + j0, ldr, out + j0, ldo);
  for (; j0 + 16 <= N; j0 += 16) smallGemmBlock<BR, 1>(K, h, ldh, rt + j0, ldr, out + j0, ldo);
  for (int b = 0; b < BR; ++b)
    for (int64_t j = j0; j < N; ++j) {
      float v = 0;
      for (int64_t k = 0; k < K; ++k) v += h[b * ldh + k] * rt[k * ldr + j];
      out[b * ldo + j] = v;
    }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void smallGemmPortable(
    int64_t B, int64_t N, int64_t K, const float* h, int64_t ldh, const float* rt, int64_t ldr,
    float* out, int64_t ldo) {
  int64_t b = 0;
  for (; b + 4 <= B; b += 4) smallGemmRows<4>(N, K, h + b * ldh, ldh, rt, ldr, out + b * ldo, ldo);
  for (; b < B; ++b) smallGemmRows<1>(N, K, h + b * ldh, ldh, rt, ldr, out + b * ldo, ldo);
}

}  // namespace

// AVX-512, one row: 128 columns at a time in eight independent sums, enough to keep both FMA
// units busy (two sums would wait on each other's latency).
static __attribute__((target("avx512f"))) void smallGemvAvx512(int64_t N, int64_t K, const float* h,
                                                               const float* rt, int64_t ldr,
                                                               float* out) {
  int64_t j0 = 0;
  for (; j0 + 128 <= N; j0 += 128) {
    __m512 acc[8];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
      const __m512 v = _mm512_set1_ps(h[k]);
      const float* r = rt + k * ldr + j0;
      for (int c = 0; c < 8; ++c) acc[c] = _mm512_fmadd_ps(v, _mm512_loadu_ps(r + 16 * c), acc[c]);
    }
    for (int c = 0; c < 8; ++c) _mm512_storeu_ps(out + j0 + 16 * c, acc[c]);
  }
  if (j0 < N) smallGemmAvx512<1>(N - j0, K, h, 1, rt + j0, ldr, out + j0, 1);
}

void smallGemm(int64_t B, int64_t N, int64_t K, const float* h, int64_t ldh, const float* rt,
               int64_t ldr, float* out, int64_t ldo) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512) return smallGemmPortable(B, N, K, h, ldh, rt, ldr, out, ldo);
  int64_t b = 0;
  for (; b + 8 <= B; b += 8)
    smallGemmAvx512<8>(N, K, h + b * ldh, ldh, rt, ldr, out + b * ldo, ldo);
  for (; b + 4 <= B; b += 4)
    smallGemmAvx512<4>(N, K, h + b * ldh, ldh, rt, ldr, out + b * ldo, ldo);
  // Three or two leftover rows read R once for all of them, where a matrix-vector product a row
  // read it once each (a bidirectional LSTM of 96 units at batch 3, a direction a thread:
  // 0.365 ms, 0.294 with two rows and one, 0.224 with three; 7 alternating rounds).
  if (B - b == 3) smallGemmAvx512<3>(N, K, h + b * ldh, ldh, rt, ldr, out + b * ldo, ldo);
  if (B - b == 2) smallGemmAvx512<2>(N, K, h + b * ldh, ldh, rt, ldr, out + b * ldo, ldo);
  if (B - b == 1) smallGemvAvx512(N, K, h + b * ldh, rt, ldr, out + b * ldo);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  dnnl::sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

void concatToOnnxY(const float* src, int64_t T, int64_t D, int64_t B, int64_t H, float* y) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(src + (t * B + b) * D * H + d * H, H, y + ((t * D + d) * B + b) * H);
}

void onnxYToConcat(const float* y, int64_t T, int64_t D, int64_t B, int64_t H, float* dst) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(y + ((t * D + d) * B + b) * H, H, dst + (t * B + b) * D * H + d * H);
}

}  // namespace dw::engine::rnn
