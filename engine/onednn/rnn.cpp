// RNN, GRU and LSTM (ai.onnx). The common configurations (default activations, no clip, full
// sequence lengths, time-major layout) run on oneDNN's vanilla_rnn / lstm / gru / lbr_gru forward
// primitives, with ONNX's gate order converted to oneDNN's. Everything oneDNN can't express
// (clip, custom activations with their alpha/beta, input_forget, per-batch sequence_lens,
// batch-major layout) runs in a plain C++ cell loop whose matrix products go through sgemm.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/onednn_backend.h"

namespace dw::engine {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

enum class Cell { kRnn, kGru, kLstm };

// One activation function of the cell with its alpha/beta.
struct Act {
  enum Kind {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus
  } kind = kTanh;
  float alpha = 0, beta = 0;

  void apply(float* v, int64_t n) const {
    switch (kind) {
      case kRelu:
        for (int64_t i = 0; i < n; ++i) v[i] = std::max(v[i], 0.0f);
        break;
      case kTanh:
        for (int64_t i = 0; i < n; ++i) v[i] = std::tanh(v[i]);
        break;
      case kSigmoid:
        for (int64_t i = 0; i < n; ++i) v[i] = 1.0f / (1.0f + std::exp(-v[i]));
        break;
      case kAffine:
        for (int64_t i = 0; i < n; ++i) v[i] = alpha * v[i] + beta;
        break;
      case kLeakyRelu:
        for (int64_t i = 0; i < n; ++i) v[i] = v[i] >= 0 ? v[i] : alpha * v[i];
        break;
      case kThresholdedRelu:
        for (int64_t i = 0; i < n; ++i) v[i] = v[i] > alpha ? v[i] : 0.0f;
        break;
      case kScaledTanh:
        for (int64_t i = 0; i < n; ++i) v[i] = alpha * std::tanh(beta * v[i]);
        break;
      case kHardSigmoid:
        for (int64_t i = 0; i < n; ++i) v[i] = std::clamp(alpha * v[i] + beta, 0.0f, 1.0f);
        break;
      case kElu:
        for (int64_t i = 0; i < n; ++i) v[i] = v[i] >= 0 ? v[i] : alpha * (std::exp(v[i]) - 1);
        break;
      case kSoftsign:
        for (int64_t i = 0; i < n; ++i) v[i] = v[i] / (1 + std::fabs(v[i]));
        break;
      case kSoftplus:
        for (int64_t i = 0; i < n; ++i) v[i] = std::log1p(std::exp(v[i]));
        break;
    }
  }
};

// Parses an activation name (case-insensitive) and its default alpha/beta, which match the
// standalone ONNX ops of the same name.
bool parseAct(std::string name, Act& a, bool& usesAlpha, bool& usesBeta) {
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  usesAlpha = usesBeta = false;
  if (name == "relu") {
    a.kind = Act::kRelu;
  } else if (name == "tanh") {
    a.kind = Act::kTanh;
  } else if (name == "sigmoid") {
    a.kind = Act::kSigmoid;
  } else if (name == "affine") {
    a = {Act::kAffine, 1.0f, 0.0f};
    usesAlpha = usesBeta = true;
  } else if (name == "leakyrelu") {
    a = {Act::kLeakyRelu, 0.01f, 0};
    usesAlpha = true;
  } else if (name == "thresholdedrelu") {
    a = {Act::kThresholdedRelu, 1.0f, 0};
    usesAlpha = true;
  } else if (name == "scaledtanh") {
    a = {Act::kScaledTanh, 1.0f, 1.0f};
    usesAlpha = usesBeta = true;
  } else if (name == "hardsigmoid") {
    a = {Act::kHardSigmoid, 0.2f, 0.5f};
    usesAlpha = usesBeta = true;
  } else if (name == "elu") {
    a = {Act::kElu, 1.0f, 0};
    usesAlpha = true;
  } else if (name == "softsign") {
    a.kind = Act::kSoftsign;
  } else if (name == "softplus") {
    a.kind = Act::kSoftplus;
  } else {
    return false;
  }
  return true;
}

bool hasAttr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return true;
  return false;
}

void sgemmRowMajor(bool transB, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl::sgemm('N', transB ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

class RnnKernel : public Kernel {
 public:
  explicit RnnKernel(const KernelInit& init) {
    const auto& a = init.attrs;
    cell_ = init.opType == "LSTM" ? Cell::kLstm : (init.opType == "GRU" ? Cell::kGru : Cell::kRnn);
    gates_ = cell_ == Cell::kLstm ? 4 : (cell_ == Cell::kGru ? 3 : 1);
    hidden_ = a.getInt("hidden_size", 0);
    direction_ = a.getString("direction", "forward");
    if (direction_ != "forward" && direction_ != "reverse" && direction_ != "bidirectional")
      fail("direction '" + direction_ + "' must be forward, reverse or bidirectional");
    dirs_ = direction_ == "bidirectional" ? 2 : 1;
    layout_ = a.getInt("layout", 0);
    if (layout_ != 0 && layout_ != 1) fail("layout must be 0 or 1");
    if (a.has("clip")) {
      clip_ = a.getFloat("clip", 0);
      hasClip_ = true;
    }
    inputForget_ = a.getInt("input_forget", 0) != 0;
    lbr_ = a.getInt("linear_before_reset", 0) != 0;
    if (init.opset < 7 && cell_ == Cell::kLstm && a.getInt("output_sequence", 0) == 0) {
      // Opset 1 LSTM only differs by output_sequence, which affects nothing we compute.
    }
    std::vector<std::string> names = a.getStrings("activations");
    const size_t perDir = cell_ == Cell::kLstm ? 3 : (cell_ == Cell::kGru ? 2 : 1);
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
    if (names.size() > perDir * dirs_ && !a.getStrings("activations").empty() && init.node &&
        !hasAttr(*init.node, "activations"))
      names.resize(perDir * dirs_);
    if (names.size() == perDir && dirs_ == 2) {
      auto copy = names;
      names.insert(names.end(), copy.begin(), copy.end());
    }
    if (names.size() != perDir * dirs_) {
      fail("activations must list " + std::to_string(perDir * dirs_) + " functions, got " +
           std::to_string(names.size()));
      return;
    }
    const auto alphas = a.getFloats("activation_alpha");
    const auto betas = a.getFloats("activation_beta");
    size_t ai = 0, bi = 0;
    for (const auto& n : names) {
      Act act;
      bool ua = false, ub = false;
      if (!parseAct(n, act, ua, ub)) {
        fail("activation '" + n + "' is not an ONNX RNN activation function");
        return;
      }
      if (ua && ai < alphas.size()) act.alpha = alphas[ai++];
      if (ub && bi < betas.size()) act.beta = betas[bi++];
      acts_.push_back(act);
    }
    // oneDNN's cells have fixed activations (vanilla RNN: tanh, relu or logistic).
    defaultActs_ = true;
    if (cell_ == Cell::kRnn) {
      for (const auto& act : acts_)
        defaultActs_ =
            defaultActs_ && act.kind == acts_[0].kind &&
            (act.kind == Act::kTanh || act.kind == Act::kSigmoid || act.kind == Act::kRelu);
    } else {
      for (size_t i = 0; i < acts_.size(); ++i) {
        const size_t k = i % perDir;
        defaultActs_ = defaultActs_ && acts_[i].kind == (k == 0 ? Act::kSigmoid : Act::kTanh);
      }
    }
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    const Tensor& r = ctx.input(2);
    if (x.dtype() != DType::kFloat || w.dtype() != DType::kFloat || r.dtype() != DType::kFloat)
      return Status::error(std::string("only float32 is supported, got ") + dtypeName(x.dtype()));
    if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3)
      return Status::error("X, W and R must be 3-D");
    const int64_t T = layout_ ? x.dim(1) : x.dim(0);
    const int64_t B = layout_ ? x.dim(0) : x.dim(1);
    const int64_t I = x.dim(2);
    const int64_t H = hidden_ > 0 ? hidden_ : r.dim(2);
    const int64_t G = gates_, D = dirs_;
    if (w.shape() != Shape{D, G * H, I})
      return Status::error("W has shape " + shapeToString(w.shape()) + ", expected " +
                           shapeToString({D, G * H, I}));
    if (r.shape() != Shape{D, G * H, H})
      return Status::error("R has shape " + shapeToString(r.shape()) + ", expected " +
                           shapeToString({D, G * H, H}));
    const bool hasB = ctx.hasInput(3), hasLens = ctx.hasInput(4), hasH0 = ctx.hasInput(5);
    const bool hasC0 = cell_ == Cell::kLstm && ctx.hasInput(6);
    const bool hasP = cell_ == Cell::kLstm && ctx.hasInput(7);
    const Shape stateShape = layout_ ? Shape{B, D, H} : Shape{D, B, H};
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
    std::vector<int64_t> lens(B, T);
    bool fullLens = true;
    if (hasLens) {
      const Tensor& sl = ctx.input(4);
      if (sl.size() != B) return Status::error("sequence_lens must have one entry per batch");
      for (int64_t b = 0; b < B; ++b) {
        lens[b] = sl.getInt(b);
        if (lens[b] < 0 || lens[b] > T)
          return Status::error("sequence_lens[" + std::to_string(b) +
                               "] = " + std::to_string(lens[b]) + " is outside [0, " +
                               std::to_string(T) + "]");
        fullLens = fullLens && lens[b] == T;
      }
    }
    Shape yShape = layout_ ? Shape{B, T, D, H} : Shape{T, D, B, H};
    DW_ALLOC(y, ctx.output(0, DType::kFloat, yShape));
    DW_ALLOC(yh, ctx.output(1, DType::kFloat, stateShape));
    Tensor* yc = nullptr;
    if (cell_ == Cell::kLstm) {
      yc = ctx.output(2, DType::kFloat, stateShape);
      if (!yc) return ctx.status();
    }
    const bool oneDnn = defaultActs_ && !hasClip_ && !inputForget_ && fullLens && layout_ == 0 &&
                        T > 0 && B > 0 && H > 0;
    if (oneDnn) return runOneDnn(ctx, T, B, I, H, *y, *yh, yc);
    return runReference(ctx, T, B, I, H, lens, *y, *yh, yc);
  }

 private:
  // ---- plain C++ ----------------------------------------------------------------------------
  Status runReference(KernelContext& ctx, int64_t T, int64_t B, int64_t I, int64_t H,
                      const std::vector<int64_t>& lens, Tensor& y, Tensor& yh, Tensor* yc) {
    const int64_t G = gates_, D = dirs_, GH = G * H;
    const float* X = ctx.input(0).data<float>();
    // Time-major copy of X for layout 1.
    std::vector<float> xt;
    if (layout_) {
      xt.resize(T * B * I);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          std::copy_n(X + (b * T + t) * I, I, xt.data() + (t * B + b) * I);
      X = xt.data();
    }
    float* Y = y.data<float>();
    std::fill_n(Y, y.size(), 0.0f);
    auto yAt = [&](int64_t t, int64_t d, int64_t b) {
      return Y + (layout_ ? ((b * T + t) * D + d) * H : ((t * D + d) * B + b) * H);
    };
    auto stateAt = [&](float* base, int64_t d, int64_t b) {
      return base + (layout_ ? (b * D + d) * H : (d * B + b) * H);
    };
    auto cstateAt = [&](const float* base, int64_t d, int64_t b) {
      return base + (layout_ ? (b * D + d) * H : (d * B + b) * H);
    };
    std::vector<float> xw(T * B * GH), hr(B * GH), hPrev(B * H), cPrev(B * H), tmp(B * H), gate(GH);
    for (int64_t d = 0; d < D; ++d) {
      const bool reverse = direction_ == "reverse" || d == 1;
      const float* W = ctx.input(1).data<float>() + d * GH * I;
      const float* R = ctx.input(2).data<float>() + d * GH * H;
      const float* Wb = ctx.hasInput(3) ? ctx.input(3).data<float>() + d * 2 * GH : nullptr;
      const float* Rb = Wb ? Wb + GH : nullptr;
      const float* P = cell_ == Cell::kLstm && ctx.hasInput(7)
                           ? ctx.input(7).data<float>() + d * 3 * H
                           : nullptr;
      const Act* acts = &acts_[d * (cell_ == Cell::kLstm ? 3 : (cell_ == Cell::kGru ? 2 : 1))];
      // Input projections for all steps at once; biases that are plain sums fold in here.
      sgemmRowMajor(true, T * B, GH, I, X, I, W, I, 0.0f, xw.data(), GH);
      for (int64_t j = 0; j < GH; ++j) {
        float bias = Wb ? Wb[j] : 0.0f;
        const bool rbInside = cell_ == Cell::kGru && lbr_ && j >= 2 * H;
        if (Rb && !rbInside) bias += Rb[j];
        gate[j] = bias;
      }
      for (int64_t i = 0; i < T * B; ++i)
        for (int64_t j = 0; j < GH; ++j) xw[i * GH + j] += gate[j];
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          hPrev[b * H + h] = ctx.hasInput(5) ? cstateAt(ctx.input(5).data<float>(), d, b)[h] : 0.0f;
          cPrev[b * H + h] = cell_ == Cell::kLstm && ctx.hasInput(6)
                                 ? cstateAt(ctx.input(6).data<float>(), d, b)[h]
                                 : 0.0f;
        }
      }
      auto clip = [&](float* v, int64_t n) {
        if (!hasClip_) return;
        for (int64_t i = 0; i < n; ++i) v[i] = std::clamp(v[i], -clip_, clip_);
      };
      for (int64_t s = 0; s < T; ++s) {
        // Recurrent projection of all gates (GRU without linear_before_reset: z and r only).
        const int64_t rCols = cell_ == Cell::kGru && !lbr_ ? 2 * H : GH;
        sgemmRowMajor(true, B, rCols, H, hPrev.data(), H, R, H, 0.0f, hr.data(), GH);
        if (cell_ == Cell::kGru && !lbr_) {
          // (r ⊙ H_{t-1}) R_h^T needs r first.
          for (int64_t b = 0; b < B; ++b) {
            if (s >= lens[b]) continue;
            const int64_t t = reverse ? lens[b] - 1 - s : s;
            float* g = gate.data();
            const float* xr = &xw[(t * B + b) * GH];
            for (int64_t j = 0; j < H; ++j) g[j] = xr[H + j] + hr[b * GH + H + j];
            clip(g, H);
            acts[0].apply(g, H);
            for (int64_t j = 0; j < H; ++j) tmp[b * H + j] = g[j] * hPrev[b * H + j];
          }
          sgemmRowMajor(true, B, H, H, tmp.data(), H, R + 2 * H * H, H, 0.0f, hr.data() + 2 * H,
                        GH);
        }
        for (int64_t b = 0; b < B; ++b) {
          if (s >= lens[b]) continue;
          const int64_t t = reverse ? lens[b] - 1 - s : s;
          float* g = gate.data();
          const float* xr = &xw[(t * B + b) * GH];
          const float* hrb = &hr[b * GH];
          float* hp = &hPrev[b * H];
          float* cp = &cPrev[b * H];
          for (int64_t j = 0; j < GH; ++j) g[j] = xr[j] + hrb[j];
          if (cell_ == Cell::kRnn) {
            clip(g, H);
            acts[0].apply(g, H);
            std::copy_n(g, H, hp);
          } else if (cell_ == Cell::kGru) {
            float *z = g, *rr = g + H, *hh = g + 2 * H;
            clip(g, 2 * H);
            acts[0].apply(g, 2 * H);
            if (lbr_) {
              const float* rbh = Rb ? Rb + 2 * H : nullptr;
              for (int64_t j = 0; j < H; ++j)
                hh[j] = xr[2 * H + j] + rr[j] * (hrb[2 * H + j] + (rbh ? rbh[j] : 0.0f));
            }
            clip(hh, H);
            acts[1].apply(hh, H);
            for (int64_t j = 0; j < H; ++j) hp[j] = (1 - z[j]) * hh[j] + z[j] * hp[j];
          } else {
            // ONNX order: i, o, f, c; peepholes: i, o, f.
            float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
            if (P)
              for (int64_t j = 0; j < H; ++j) {
                gi[j] += P[j] * cp[j];
                gf[j] += P[2 * H + j] * cp[j];
              }
            clip(gi, H);
            acts[0].apply(gi, H);
            if (inputForget_) {
              for (int64_t j = 0; j < H; ++j) gf[j] = 1 - gi[j];
            } else {
              clip(gf, H);
              acts[0].apply(gf, H);
            }
            clip(gc, H);
            acts[1].apply(gc, H);
            for (int64_t j = 0; j < H; ++j) cp[j] = gf[j] * cp[j] + gi[j] * gc[j];
            if (P)
              for (int64_t j = 0; j < H; ++j) go[j] += P[H + j] * cp[j];
            clip(go, H);
            acts[0].apply(go, H);
            std::copy_n(cp, H, gc);
            acts[2].apply(gc, H);
            for (int64_t j = 0; j < H; ++j) hp[j] = go[j] * gc[j];
          }
          std::copy_n(hp, H, yAt(t, d, b));
        }
      }
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(&hPrev[b * H], H, stateAt(yh.data<float>(), d, b));
        if (yc) std::copy_n(&cPrev[b * H], H, stateAt(yc->data<float>(), d, b));
      }
    }
    return Status();
  }

  // ---- oneDNN -------------------------------------------------------------------------------
  struct Entry {
    dnnl::primitive prim;
    memory::desc srcLayer, state, wLayerUser, wIterUser, wLayer, wIter, bias, peep, dstLayer;
    memory wLayerMem, wIterMem, dstMem;
    bool peephole = false;
  };

  Status runOneDnn(KernelContext& ctx, int64_t T, int64_t B, int64_t I, int64_t H, Tensor& y,
                   Tensor& yh, Tensor* yc) {
    auto& be = onednn::cpuBackend(ctx.backend());
    auto& eng = be.engine();
    auto& strm = be.stream();
    const int64_t D = dirs_, G = gates_;
    const bool peephole = cell_ == Cell::kLstm && ctx.hasInput(7);
    const int64_t biasGates = cell_ == Cell::kGru && lbr_ ? 4 : G;
    std::vector<int64_t> key{T, B, I, H, peephole, ctx.hasInput(5), ctx.hasInput(6)};
    auto it = cache_.find(key);
    try {
      if (it == cache_.end()) {
        Entry e;
        e.peephole = peephole;
        e.srcLayer = memory::desc({T, B, I}, f32, Tag::tnc);
        e.state = memory::desc({1, D, B, H}, f32, Tag::ldnc);
        e.wLayerUser = memory::desc({1, D, I, G, H}, f32, Tag::ldgoi);
        e.wIterUser = memory::desc({1, D, H, G, H}, f32, Tag::ldgoi);
        memory::desc wl({1, D, I, G, H}, f32, Tag::any), wi({1, D, H, G, H}, f32, Tag::any);
        e.bias = memory::desc({1, D, biasGates, H}, f32, Tag::ldgo);
        e.peep = memory::desc({1, D, 3, H}, f32, Tag::ldgo);
        e.dstLayer = memory::desc({T, B, D * H}, f32, Tag::tnc);
        const auto dir =
            D == 2 ? dnnl::rnn_direction::bidirectional_concat
                   : (direction_ == "reverse" ? dnnl::rnn_direction::unidirectional_right2left
                                              : dnnl::rnn_direction::unidirectional_left2right);
        const auto pk = dnnl::prop_kind::forward_inference;
        // Absent initial states are zero descriptors: oneDNN then starts from zeros.
        const memory::desc h0 = ctx.hasInput(5) ? e.state : memory::desc();
        const memory::desc c0 = ctx.hasInput(6) ? e.state : memory::desc();
        if (cell_ == Cell::kLstm) {
          dnnl::lstm_forward::desc d(pk, dir, e.srcLayer, h0, c0, wl, wi,
                                     peephole ? e.peep : memory::desc(), e.bias, e.dstLayer,
                                     e.state, e.state);
          dnnl::lstm_forward::primitive_desc pd(d, eng);
          e.wLayer = pd.weights_layer_desc();
          e.wIter = pd.weights_iter_desc();
          e.prim = dnnl::lstm_forward(pd);
        } else if (cell_ == Cell::kGru && lbr_) {
          dnnl::lbr_gru_forward::desc d(pk, dir, e.srcLayer, h0, wl, wi, e.bias, e.dstLayer,
                                        e.state);
          dnnl::lbr_gru_forward::primitive_desc pd(d, eng);
          e.wLayer = pd.weights_layer_desc();
          e.wIter = pd.weights_iter_desc();
          e.prim = dnnl::lbr_gru_forward(pd);
        } else if (cell_ == Cell::kGru) {
          dnnl::gru_forward::desc d(pk, dir, e.srcLayer, h0, wl, wi, e.bias, e.dstLayer, e.state);
          dnnl::gru_forward::primitive_desc pd(d, eng);
          e.wLayer = pd.weights_layer_desc();
          e.wIter = pd.weights_iter_desc();
          e.prim = dnnl::gru_forward(pd);
        } else {
          const auto alg = acts_[0].kind == Act::kRelu
                               ? dnnl::algorithm::eltwise_relu
                               : (acts_[0].kind == Act::kSigmoid ? dnnl::algorithm::eltwise_logistic
                                                                 : dnnl::algorithm::eltwise_tanh);
          dnnl::vanilla_rnn_forward::desc d(pk, alg, dir, e.srcLayer, h0, wl, wi, e.bias,
                                            e.dstLayer, e.state);
          dnnl::vanilla_rnn_forward::primitive_desc pd(d, eng);
          e.wLayer = pd.weights_layer_desc();
          e.wIter = pd.weights_iter_desc();
          e.prim = dnnl::vanilla_rnn_forward(pd);
        }
        e.wLayerMem = memory(e.wLayer, eng);
        e.wIterMem = memory(e.wIter, eng);
        if (D == 2) e.dstMem = memory(e.dstLayer, eng);
        it = cache_.emplace(key, std::move(e)).first;
      }
      Entry& e = it->second;
      // Weights and biases in oneDNN's gate order (ldgoi has ONNX's [D][gate][H][in] layout).
      // ONNX LSTM gates i,o,f,c -> oneDNN i,f,c,o; GRU z,r,h and RNN match.
      static const int kLstmPerm[4] = {0, 2, 3, 1};
      auto onnxGate = [&](int64_t g) { return cell_ == Cell::kLstm ? kLstmPerm[g] : g; };
      const int64_t GH = G * H;
      std::vector<float> wl(D * GH * I), wi(D * GH * H), bias(D * biasGates * H, 0.0f),
          peep(D * 3 * H, 0.0f);
      const float* W = ctx.input(1).data<float>();
      const float* R = ctx.input(2).data<float>();
      for (int64_t d = 0; d < D; ++d)
        for (int64_t g = 0; g < G; ++g) {
          std::copy_n(W + (d * GH + onnxGate(g) * H) * I, H * I, &wl[(d * GH + g * H) * I]);
          std::copy_n(R + (d * GH + onnxGate(g) * H) * H, H * H, &wi[(d * GH + g * H) * H]);
        }
      if (ctx.hasInput(3)) {
        const float* Bv = ctx.input(3).data<float>();
        for (int64_t d = 0; d < D; ++d) {
          const float* wb = Bv + d * 2 * GH;
          const float* rb = wb + GH;
          for (int64_t g = 0; g < G; ++g) {
            const int64_t og = onnxGate(g);
            const bool split = cell_ == Cell::kGru && lbr_ && g == 2;
            for (int64_t h = 0; h < H; ++h)
              bias[(d * biasGates + g) * H + h] = wb[og * H + h] + (split ? 0.0f : rb[og * H + h]);
            if (split)
              for (int64_t h = 0; h < H; ++h) bias[(d * biasGates + 3) * H + h] = rb[og * H + h];
          }
        }
      }
      if (e.peephole) {
        // ONNX P: i, o, f -> oneDNN i, f, o.
        static const int kPeepPerm[3] = {0, 2, 1};
        const float* P = ctx.input(7).data<float>();
        for (int64_t d = 0; d < D; ++d)
          for (int64_t g = 0; g < 3; ++g)
            std::copy_n(P + (d * 3 + kPeepPerm[g]) * H, H, &peep[(d * 3 + g) * H]);
      }
      memory wlUser(e.wLayerUser, eng, wl.data()), wiUser(e.wIterUser, eng, wi.data());
      dnnl::reorder(wlUser, e.wLayerMem).execute(strm, wlUser, e.wLayerMem);
      dnnl::reorder(wiUser, e.wIterMem).execute(strm, wiUser, e.wIterMem);
      memory dst = D == 2 ? e.dstMem : memory(e.dstLayer, eng, y.raw());
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC_LAYER, memory(e.srcLayer, eng, const_cast<void*>(ctx.input(0).raw()))},
          {DNNL_ARG_WEIGHTS_LAYER, e.wLayerMem},
          {DNNL_ARG_WEIGHTS_ITER, e.wIterMem},
          {DNNL_ARG_BIAS, memory(e.bias, eng, bias.data())},
          {DNNL_ARG_DST_LAYER, dst},
          {DNNL_ARG_DST_ITER, memory(e.state, eng, yh.raw())}};
      if (ctx.hasInput(5))
        args[DNNL_ARG_SRC_ITER] = memory(e.state, eng, const_cast<void*>(ctx.input(5).raw()));
      if (cell_ == Cell::kLstm) {
        args[DNNL_ARG_DST_ITER_C] = memory(e.state, eng, yc->raw());
        if (ctx.hasInput(6))
          args[DNNL_ARG_SRC_ITER_C] = memory(e.state, eng, const_cast<void*>(ctx.input(6).raw()));
        if (e.peephole) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = memory(e.peep, eng, peep.data());
      }
      e.prim.execute(strm, args);
      strm.wait();
      if (D == 2) {
        // oneDNN concatenates directions along channels: [T][B][D*H] -> ONNX [T][D][B][H].
        const float* src = static_cast<const float*>(dst.get_data_handle());
        float* Y = y.data<float>();
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t b = 0; b < B; ++b)
              std::copy_n(src + (t * B + b) * D * H + d * H, H, Y + ((t * D + d) * B + b) * H);
      }
    } catch (const dnnl::error& err) {
      return Status::error(std::string("oneDNN rnn: ") + err.what());
    }
    return Status();
  }

  Cell cell_ = Cell::kRnn;
  int64_t gates_ = 1, hidden_ = 0, dirs_ = 1, layout_ = 0;
  std::string direction_;
  float clip_ = 0;
  bool hasClip_ = false, inputForget_ = false, lbr_ = false, customActs_ = false,
       defaultActs_ = true;
  std::vector<Act> acts_;
  std::map<std::vector<int64_t>, Entry> cache_;
};

}  // namespace

void addRnnKernels(KernelRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"})
    r.add("cpu", op, 1, kMaxOpset, &makeKernel<RnnKernel>);
}

}  // namespace dw::engine
