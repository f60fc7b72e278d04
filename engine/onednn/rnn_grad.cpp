// RecurrentGrad (domain com.deepwire.grad): the backward of ONNX RNN, GRU and LSTM.
//
// Inputs: the forward inputs X, W, R, B, sequence_lens, initial_h, initial_c, P (ONNX indices
// 0..7, absent ones empty), then dY, dY_h, dY_c (absent: zero). Outputs at the same indices as
// the forward inputs they are gradients of: dX, dW, dR, dB, (none for sequence_lens), d
// initial_h, d initial_c, dP. Attributes: the forward node's, plus `op` (RNN, GRU or LSTM) and
// `impl` (auto, reference or onednn; tests use the latter two to compare the paths).
//
// The kernel recomputes the forward pass rather than reading saved activations: the forward
// graph stays a plain ONNX node, and oneDNN's backward needs the workspace of its own
// forward_training pass anyway. Configurations oneDNN's cells compute (default activations, no
// clip, no input_forget, full sequence lengths) run on lstm/gru/lbr_gru/vanilla_rnn backward;
// the rest run backpropagation through time in plain C++ with sgemm products. Both work on
// time-major data; layout=1 is transposed around them.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/kernels/common.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/onednn/rnn_common.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;
using rnn::Cell;

using rnn::gemm;

// [n0][n1][k] <-> [n1][n0][k]: layout=1 data to and from time-major.
std::vector<float> swap01(const float* src, int64_t n0, int64_t n1, int64_t k) {
  std::vector<float> out(n0 * n1 * k);
  for (int64_t a = 0; a < n0; ++a)
    for (int64_t b = 0; b < n1; ++b) std::copy_n(src + (a * n1 + b) * k, k, &out[(b * n0 + a) * k]);
  return out;
}

// Time-major inputs: X [T][B][I], states [D][B][H] (zeros where absent), dY [T][D][B][H].
struct Inputs {
  const float *X, *W, *R, *Bias, *P;
  std::vector<float> h0, c0;
  const float *dY, *dYh, *dYc;  // null: zero
};

// Time-major gradients; all are computed, the kernel copies out the requested ones.
struct Grads {
  std::vector<float> dX, dW, dR, dB, dH0, dC0, dP;
};

// A cell's forward_training primitive (for the workspace) and its backward, with the layouts
// oneDNN chose for the weights of each and for the weight gradients.
struct Prims {
  dnnl::primitive fwd, bwd;
  memory::desc fwdWl, fwdWi, bwdWl, bwdWi, diffWl, diffWi, ws;
};

template <class F, class Bw>
Prims makePrims(const typename F::desc& fd, const typename Bw::desc& bd, const dnnl::engine& eng) {
  typename F::primitive_desc fpd(fd, eng);
  typename Bw::primitive_desc bpd(bd, eng, fpd);
  return {F(fpd),
          Bw(bpd),
          fpd.weights_layer_desc(),
          fpd.weights_iter_desc(),
          bpd.weights_layer_desc(),
          bpd.weights_iter_desc(),
          bpd.diff_weights_layer_desc(),
          bpd.diff_weights_iter_desc(),
          fpd.workspace_desc()};
}

class RecurrentGrad : public Kernel, private rnn::RnnAttrs {
 public:
  explicit RecurrentGrad(const KernelInit& init) {
    const std::string op = init.attrs.getString("op", "");
    if (op != "RNN" && op != "GRU" && op != "LSTM")
      fail("RecurrentGrad: attribute op must be RNN, GRU or LSTM, got '" + op + "'");
    Status st = parse(op, init.attrs, init.node);
    if (!st.ok()) fail(op + ": " + st.message());
    impl_ = init.attrs.getString("impl", "auto");
    if (impl_ != "auto" && impl_ != "reference" && impl_ != "onednn")
      fail("RecurrentGrad: impl must be auto, reference or onednn, got '" + impl_ + "'");
  }

  Status compute(KernelContext& ctx) override {
    rnn::RnnDims dims;
    DW_RETURN_IF_ERROR(rnn::checkInputs(ctx, *this, &dims));
    const int64_t T = dims.T, B = dims.B, I = dims.I, H = dims.H, D = dirs_, GH = gates_ * H;
    const Shape yShape = layout_ ? Shape{B, T, D, H} : Shape{T, D, B, H};
    const Shape stateShape = layout_ ? Shape{B, D, H} : Shape{D, B, H};
    for (int i = 8; i <= 10; ++i) {
      if (!ctx.hasInput(i)) continue;
      const Tensor& g = ctx.input(i);
      const Shape want = i == 8 ? yShape : stateShape;
      if (g.dtype() != DType::kFloat || g.shape() != want)
        return Status::error("gradient input " + std::to_string(i) + " must be float32 of shape " +
                             shapeToString(want) + ", got " + shapeToString(g.shape()));
    }
    Inputs in;
    std::vector<float> xt, dyt;
    in.X = ctx.input(0).data<float>();
    if (layout_) {
      xt = swap01(in.X, B, T, I);
      in.X = xt.data();
    }
    in.W = ctx.input(1).data<float>();
    in.R = ctx.input(2).data<float>();
    in.Bias = ctx.hasInput(3) ? ctx.input(3).data<float>() : nullptr;
    in.P = cell_ == Cell::kLstm && ctx.hasInput(7) ? ctx.input(7).data<float>() : nullptr;
    auto state = [&](int i) {
      if (!ctx.hasInput(i)) return std::vector<float>(D * B * H, 0.0f);
      const float* p = ctx.input(i).data<float>();
      return layout_ ? swap01(p, B, D, H) : std::vector<float>(p, p + D * B * H);
    };
    std::vector<float> dyh, dyc;
    in.h0 = state(5);
    in.c0 = cell_ == Cell::kLstm ? state(6) : std::vector<float>(D * B * H, 0.0f);
    in.dY = ctx.hasInput(8) ? ctx.input(8).data<float>() : nullptr;
    if (in.dY && layout_) {
      dyt = swap01(in.dY, B, T, D * H);  // [B][T][D][H] -> [T][B][D][H]
      std::vector<float> tmp(dyt.size());
      for (int64_t t = 0; t < T; ++t) {
        auto part = swap01(&dyt[t * B * D * H], B, D, H);
        std::copy(part.begin(), part.end(), tmp.begin() + t * B * D * H);
      }
      dyt = std::move(tmp);
      in.dY = dyt.data();
    }
    if (ctx.hasInput(9)) {
      dyh = state(9);
      in.dYh = dyh.data();
    } else {
      in.dYh = nullptr;
    }
    if (cell_ == Cell::kLstm && ctx.hasInput(10)) {
      dyc = state(10);
      in.dYc = dyc.data();
    } else {
      in.dYc = nullptr;
    }

    const bool oneDnnFits = oneDnnCells() && dims.fullLens && T > 0 && B > 0 && H > 0;
    if (impl_ == "onednn" && !oneDnnFits)
      return Status::error(
          "impl=onednn: oneDNN's cells cannot compute this configuration (custom activations, "
          "clip, input_forget or partial sequence_lens)");
    Grads g;
    g.dX.assign(T * B * I, 0.0f);
    g.dW.assign(D * GH * I, 0.0f);
    g.dR.assign(D * GH * H, 0.0f);
    g.dB.assign(D * 2 * GH, 0.0f);
    g.dH0.assign(D * B * H, 0.0f);
    g.dC0.assign(D * B * H, 0.0f);
    g.dP.assign(D * 3 * H, 0.0f);
    if (oneDnnFits && impl_ != "reference") {
      DW_RETURN_IF_ERROR(runOneDnn(ctx, in, T, B, I, H, g));
    } else {
      for (int64_t d = 0; d < D; ++d) reference(in, d, T, B, I, H, dims.lens, g);
    }

    auto emit = [&](size_t i, const Shape& shape, const std::vector<float>& v) -> Status {
      if (!ctx.wantsOutput(i)) return Status();
      DW_ALLOC(o, ctx.output(i, DType::kFloat, shape));
      std::copy(v.begin(), v.end(), o->data<float>());
      return Status();
    };
    const Shape xShape = ctx.input(0).shape();
    DW_RETURN_IF_ERROR(emit(0, xShape, layout_ ? swap01(g.dX.data(), T, B, I) : g.dX));
    DW_RETURN_IF_ERROR(emit(1, ctx.input(1).shape(), g.dW));
    DW_RETURN_IF_ERROR(emit(2, ctx.input(2).shape(), g.dR));
    DW_RETURN_IF_ERROR(emit(3, {D, 2 * GH}, g.dB));
    DW_RETURN_IF_ERROR(emit(5, stateShape, layout_ ? swap01(g.dH0.data(), D, B, H) : g.dH0));
    if (cell_ == Cell::kLstm) {
      DW_RETURN_IF_ERROR(emit(6, stateShape, layout_ ? swap01(g.dC0.data(), D, B, H) : g.dC0));
      DW_RETURN_IF_ERROR(emit(7, {D, 3 * H}, g.dP));
    }
    return Status();
  }

 private:
  // ---- plain C++ backpropagation through time ---------------------------------------------
  // Direction d: a forward pass that saves every step's gate pre-activations (before clip) and
  // activations, then the reverse sweep. Rows of the saved [T*B][...] arrays are t * B + b;
  // steps past a sequence's length stay zero and so add nothing to the weight gradients.
  void reference(const Inputs& in, int64_t d, int64_t T, int64_t B, int64_t I, int64_t H,
                 const std::vector<int64_t>& lens, Grads& g) const {
    const int64_t D = dirs_, GH = gates_ * H, TB = T * B;
    const bool gru = cell_ == Cell::kGru, lstm = cell_ == Cell::kLstm;
    const bool reverse = direction_ == "reverse" || d == 1;
    const float* W = in.W + d * GH * I;
    const float* R = in.R + d * GH * H;
    const float* Wb = in.Bias ? in.Bias + d * 2 * GH : nullptr;
    const float* Rb = Wb ? Wb + GH : nullptr;
    const float* P = in.P ? in.P + d * 3 * H : nullptr;
    const rnn::Act* acts = &acts_[d * actsPerDir()];
    auto clipped = [&](float a) { return hasClip_ ? std::clamp(a, -clip_, clip_) : a; };
    // d act_k(clip(a)) / d a, with y = act_k(clip(a)).
    auto dact = [&](int k, float a, float y) {
      if (hasClip_ && (a < -clip_ || a > clip_)) return 0.0f;
      return acts[k].derivative(a, y);
    };
    auto act = [&](int k, float a) {
      float v = clipped(a);
      acts[k].apply(&v, 1);
      return v;
    };
    auto rowOf = [&](int64_t s, int64_t b) { return ((reverse ? lens[b] - 1 - s : s) * B + b); };

    // Forward with saves. aux: GRU lbr=1 the h-gate recurrent term R_h h + Rb_h, lbr=0 r * h.
    std::vector<float> xw(TB * GH), A(TB * GH, 0.0f), Gv(TB * GH, 0.0f), hPrevS(TB * H, 0.0f),
        cPrevS(TB * H, 0.0f), cS(TB * H, 0.0f), aux(TB * H, 0.0f);
    gemm(false, true, TB, GH, I, in.X, I, W, I, 0.0f, xw.data(), GH);
    for (int64_t j = 0; j < GH; ++j) {
      float bias = Wb ? Wb[j] : 0.0f;
      if (Rb && !(gru && lbr_ && j >= 2 * H)) bias += Rb[j];
      for (int64_t r = 0; r < TB; ++r) xw[r * GH + j] += bias;
    }
    std::vector<float> h(in.h0.begin() + d * B * H, in.h0.begin() + (d + 1) * B * H);
    std::vector<float> c(in.c0.begin() + d * B * H, in.c0.begin() + (d + 1) * B * H);
    std::vector<float> hr(B * GH), rh(B * H);
    for (int64_t s = 0; s < T; ++s) {
      gemm(false, true, B, gru && !lbr_ ? 2 * H : GH, H, h.data(), H, R, H, 0.0f, hr.data(), GH);
      for (int64_t b = 0; b < B; ++b) {
        if (s >= lens[b]) continue;
        const int64_t row = rowOf(s, b);
        std::copy_n(&h[b * H], H, &hPrevS[row * H]);
        std::copy_n(&c[b * H], H, &cPrevS[row * H]);
        float* a = &A[row * GH];
        float* gv = &Gv[row * GH];
        for (int64_t j = 0; j < GH; ++j) a[j] = xw[row * GH + j] + hr[b * GH + j];
        if (gru) {
          for (int64_t j = 0; j < 2 * H; ++j) gv[j] = act(0, a[j]);
          for (int64_t j = 0; j < H; ++j) rh[b * H + j] = gv[H + j] * h[b * H + j];
        }
      }
      if (gru && !lbr_) {
        // (r * h) R_h^T needs r first.
        gemm(false, true, B, H, H, rh.data(), H, R + 2 * H * H, H, 0.0f, hr.data() + 2 * H, GH);
      }
      for (int64_t b = 0; b < B; ++b) {
        if (s >= lens[b]) continue;
        const int64_t row = rowOf(s, b);
        float* a = &A[row * GH];
        float* gv = &Gv[row * GH];
        float* hp = &h[b * H];
        float* cp = &c[b * H];
        if (cell_ == Cell::kRnn) {
          for (int64_t j = 0; j < H; ++j) hp[j] = gv[j] = act(0, a[j]);
        } else if (gru) {
          for (int64_t j = 0; j < H; ++j) {
            float* ah = a + 2 * H;
            if (lbr_) {
              const float q = hr[b * GH + 2 * H + j] + (Rb ? Rb[2 * H + j] : 0.0f);
              aux[row * H + j] = q;
              ah[j] = xw[row * GH + 2 * H + j] + gv[H + j] * q;
            } else {
              aux[row * H + j] = rh[b * H + j];
              ah[j] = xw[row * GH + 2 * H + j] + hr[b * GH + 2 * H + j];
            }
            const float z = gv[j], hh = gv[2 * H + j] = act(1, ah[j]);
            hp[j] = (1 - z) * hh + z * hp[j];
          }
        } else {
          // ONNX order i, o, f, c; peepholes i, o, f.
          for (int64_t j = 0; j < H; ++j) {
            if (P) {
              a[j] += P[j] * cp[j];
              a[2 * H + j] += P[2 * H + j] * cp[j];
            }
            const float gi = gv[j] = act(0, a[j]);
            const float gf = gv[2 * H + j] = inputForget_ ? 1 - gi : act(0, a[2 * H + j]);
            const float gc = gv[3 * H + j] = act(1, a[3 * H + j]);
            cp[j] = gf * cp[j] + gi * gc;
            cS[row * H + j] = cp[j];
            if (P) a[H + j] += P[H + j] * cp[j];
            const float go = gv[H + j] = act(0, a[H + j]);
            float hc = cp[j];
            acts[2].apply(&hc, 1);
            hp[j] = go * hc;
          }
        }
      }
    }

    // Reverse sweep. dA: gradients of the gate pre-activations (input side); dAr: the same on
    // the recurrent side (differs for lbr GRU's h gate, whose R term is scaled by r).
    std::vector<float> dA(TB * GH, 0.0f), dAr(TB * GH, 0.0f), dAs(B * GH), dhNew(B * H), tmp(B * H);
    std::vector<float> dh(B * H, 0.0f), dc(B * H, 0.0f);
    if (in.dYh) std::copy_n(in.dYh + d * B * H, B * H, dh.begin());
    if (lstm && in.dYc) std::copy_n(in.dYc + d * B * H, B * H, dc.begin());
    float* dP = P ? &g.dP[d * 3 * H] : nullptr;
    for (int64_t s = T - 1; s >= 0; --s) {
      std::fill(dAs.begin(), dAs.end(), 0.0f);
      for (int64_t b = 0; b < B; ++b) {
        float* dhn = &dhNew[b * H];
        if (s >= lens[b]) {
          std::copy_n(&dh[b * H], H, dhn);  // the state passes through untouched
          continue;
        }
        const int64_t row = rowOf(s, b), t = row / B;
        const float* a = &A[row * GH];
        const float* gv = &Gv[row * GH];
        const float* hp = &hPrevS[row * H];
        float* da = &dA[row * GH];
        float* das = &dAs[b * GH];
        for (int64_t j = 0; j < H; ++j) {
          float dht = dh[b * H + j];
          if (in.dY) dht += in.dY[((t * D + d) * B + b) * H + j];
          if (cell_ == Cell::kRnn) {
            das[j] = da[j] = dht * dact(0, a[j], gv[j]);
            dhn[j] = 0;
          } else if (gru) {
            const float z = gv[j], r = gv[H + j], hh = gv[2 * H + j];
            const float dah = dht * (1 - z) * dact(1, a[2 * H + j], hh);
            da[j] = das[j] = dht * (hp[j] - hh) * dact(0, a[j], z);
            da[2 * H + j] = dah;
            dhn[j] = dht * z;
            if (lbr_) {
              const float q = aux[row * H + j];
              das[2 * H + j] = dah * r;
              da[H + j] = das[H + j] = dah * q * dact(0, a[H + j], r);
            } else {
              das[2 * H + j] = dah;  // r comes after the product below
            }
          } else {
            const float gi = gv[j], go = gv[H + j], gf = gv[2 * H + j], gc = gv[3 * H + j];
            const float cc = cS[row * H + j], cp = cPrevS[row * H + j];
            float hc = cc;
            acts[2].apply(&hc, 1);
            const float dao = dht * hc * dact(0, a[H + j], go);
            float dct = dc[b * H + j] + dht * go * acts[2].derivative(cc, hc);
            if (P) {
              dct += dao * P[H + j];
              dP[H + j] += dao * cc;
            }
            float di = dct * gc;
            const float df = dct * cp;
            float dcp = dct * gf;
            float daf = 0;
            if (inputForget_)
              di -= df;
            else
              daf = df * dact(0, a[2 * H + j], gf);
            const float dai = di * dact(0, a[j], gi);
            const float dac = dct * gi * dact(1, a[3 * H + j], gc);
            if (P) {
              dcp += dai * P[j] + daf * P[2 * H + j];
              dP[j] += dai * cp;
              dP[2 * H + j] += daf * cp;
            }
            dc[b * H + j] = dcp;
            da[j] = das[j] = dai;
            da[H + j] = das[H + j] = dao;
            da[2 * H + j] = das[2 * H + j] = daf;
            da[3 * H + j] = das[3 * H + j] = dac;
            dhn[j] = 0;
          }
        }
      }
      if (gru && !lbr_) {
        // d(r * h) = dah R_h: splits into dr (-> the r gate) and r * (-> dh).
        gemm(false, false, B, H, H, dAs.data() + 2 * H, GH, R + 2 * H * H, H, 0.0f, tmp.data(), H);
        for (int64_t b = 0; b < B; ++b) {
          if (s >= lens[b]) continue;
          const int64_t row = rowOf(s, b);
          const float* a = &A[row * GH];
          const float* gv = &Gv[row * GH];
          const float* hp = &hPrevS[row * H];
          for (int64_t j = 0; j < H; ++j) {
            const float r = gv[H + j];
            dhNew[b * H + j] += tmp[b * H + j] * r;
            dA[row * GH + H + j] = dAs[b * GH + H + j] =
                tmp[b * H + j] * hp[j] * dact(0, a[H + j], r);
          }
        }
        gemm(false, false, B, H, 2 * H, dAs.data(), GH, R, H, 1.0f, dhNew.data(), H);
      } else {
        gemm(false, false, B, H, GH, dAs.data(), GH, R, H, 1.0f, dhNew.data(), H);
      }
      for (int64_t b = 0; b < B; ++b)
        if (s < lens[b]) std::copy_n(&dAs[b * GH], GH, &dAr[rowOf(s, b) * GH]);
      dh.swap(dhNew);
    }
    std::copy(dh.begin(), dh.end(), g.dH0.begin() + d * B * H);
    std::copy(dc.begin(), dc.end(), g.dC0.begin() + d * B * H);

    // Weight and input gradients over all steps at once.
    gemm(true, false, GH, I, TB, dA.data(), GH, in.X, I, 0.0f, &g.dW[d * GH * I], I);
    gemm(false, false, TB, I, GH, dA.data(), GH, W, I, 1.0f, g.dX.data(), I);
    float* dR = &g.dR[d * GH * H];
    if (gru && !lbr_) {
      gemm(true, false, 2 * H, H, TB, dAr.data(), GH, hPrevS.data(), H, 0.0f, dR, H);
      gemm(true, false, H, H, TB, dAr.data() + 2 * H, GH, aux.data(), H, 0.0f, dR + 2 * H * H, H);
    } else {
      gemm(true, false, GH, H, TB, dAr.data(), GH, hPrevS.data(), H, 0.0f, dR, H);
    }
    float* dWb = &g.dB[d * 2 * GH];
    for (int64_t r = 0; r < TB; ++r)
      for (int64_t j = 0; j < GH; ++j) {
        dWb[j] += dA[r * GH + j];
        dWb[GH + j] += dAr[r * GH + j];
      }
  }

  // ---- oneDNN ---------------------------------------------------------------------------------
  struct Entry {
    memory::desc srcLayer, state, wLayerUser, wIterUser, bias, peep, dstLayer;
    Prims p;
  };

  Status runOneDnn(KernelContext& ctx, const Inputs& in, int64_t T, int64_t B, int64_t I, int64_t H,
                   Grads& g) {
    auto& be = onednn::cpuBackend(ctx.backend());
    auto& eng = be.engine();
    auto& strm = be.stream();
    const int64_t D = dirs_, G = gates_, biasGates = rnn::oneDnnBiasGates(*this);
    const bool peephole = in.P != nullptr;
    try {
      std::vector<int64_t> key{T, B, I, H, peephole};
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        Entry e;
        e.srcLayer = memory::desc({T, B, I}, f32, Tag::tnc);
        e.state = memory::desc({1, D, B, H}, f32, Tag::ldnc);
        e.wLayerUser = memory::desc({1, D, I, G, H}, f32, Tag::ldgoi);
        e.wIterUser = memory::desc({1, D, H, G, H}, f32, Tag::ldgoi);
        const memory::desc wl({1, D, I, G, H}, f32, Tag::any), wi({1, D, H, G, H}, f32, Tag::any);
        e.bias = memory::desc({1, D, biasGates, H}, f32, Tag::ldgo);
        e.peep = memory::desc({1, D, 3, H}, f32, Tag::ldgo);
        e.dstLayer = memory::desc({T, B, D * H}, f32, Tag::tnc);
        const auto dir = oneDnnDirection();
        const auto fk = dnnl::prop_kind::forward_training;
        const auto bk = dnnl::prop_kind::backward;
        const memory::desc& s = e.state;
        const memory::desc pp = peephole ? e.peep : memory::desc();
        if (cell_ == Cell::kLstm) {
          using F = dnnl::lstm_forward;
          using Bw = dnnl::lstm_backward;
          e.p = makePrims<F, Bw>(
              F::desc(fk, dir, e.srcLayer, s, s, wl, wi, pp, e.bias, e.dstLayer, s, s),
              Bw::desc(bk, dir, e.srcLayer, s, s, wl, wi, pp, e.bias, e.dstLayer, s, s, e.srcLayer,
                       s, s, wl, wi, pp, e.bias, e.dstLayer, s, s),
              eng);
        } else if (cell_ == Cell::kGru) {
          // GRU and lbr GRU take the same arguments; the tags pick the primitive types.
          auto gru = [&](auto fwdTag, auto bwdTag) {
            using F = decltype(fwdTag);
            using Bw = decltype(bwdTag);
            return makePrims<F, Bw>(
                typename F::desc(fk, dir, e.srcLayer, s, wl, wi, e.bias, e.dstLayer, s),
                typename Bw::desc(bk, dir, e.srcLayer, s, wl, wi, e.bias, e.dstLayer, s, e.srcLayer,
                                  s, wl, wi, e.bias, e.dstLayer, s),
                eng);
          };
          e.p = lbr_ ? gru(dnnl::lbr_gru_forward(), dnnl::lbr_gru_backward())
                     : gru(dnnl::gru_forward(), dnnl::gru_backward());
        } else {
          using F = dnnl::vanilla_rnn_forward;
          using Bw = dnnl::vanilla_rnn_backward;
          const auto alg = vanillaActivation();
          e.p =
              makePrims<F, Bw>(F::desc(fk, alg, dir, e.srcLayer, s, wl, wi, e.bias, e.dstLayer, s),
                               Bw::desc(bk, alg, dir, e.srcLayer, s, wl, wi, e.bias, e.dstLayer, s,
                                        e.srcLayer, s, wl, wi, e.bias, e.dstLayer, s),
                               eng);
        }
        it = cache_.emplace(key, std::move(e)).first;
      }
      Entry& e = it->second;
      rnn::OneDnnWeights ow;
      rnn::toOneDnnWeights(*this, D, H, I, in.W, in.R, in.Bias, in.P, &ow);
      memory wlUser(e.wLayerUser, eng, ow.layer.data()), wiUser(e.wIterUser, eng, ow.iter.data());
      auto reordered = [&](memory& user, const memory::desc& want) {
        if (user.get_desc() == want) return user;
        memory m(want, eng);
        dnnl::reorder(user, m).execute(strm, user, m);
        return m;
      };
      memory fWl = reordered(wlUser, e.p.fwdWl), fWi = reordered(wiUser, e.p.fwdWi);
      memory bWl = reordered(wlUser, e.p.bwdWl), bWi = reordered(wiUser, e.p.bwdWi);
      auto mem = [&](const memory::desc& md, const float* p) {
        return memory(md, eng, const_cast<float*>(p));
      };
      const int64_t stateN = D * B * H;
      std::vector<float> dst(T * B * D * H), dstIter(stateN), dstIterC(stateN);
      memory ws(e.p.ws, eng);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC_LAYER, mem(e.srcLayer, in.X)},
                                           {DNNL_ARG_SRC_ITER, mem(e.state, in.h0.data())},
                                           {DNNL_ARG_WEIGHTS_LAYER, fWl},
                                           {DNNL_ARG_WEIGHTS_ITER, fWi},
                                           {DNNL_ARG_BIAS, mem(e.bias, ow.bias.data())},
                                           {DNNL_ARG_DST_LAYER, mem(e.dstLayer, dst.data())},
                                           {DNNL_ARG_DST_ITER, mem(e.state, dstIter.data())},
                                           {DNNL_ARG_WORKSPACE, ws}};
      if (cell_ == Cell::kLstm) {
        args[DNNL_ARG_SRC_ITER_C] = mem(e.state, in.c0.data());
        args[DNNL_ARG_DST_ITER_C] = mem(e.state, dstIterC.data());
        if (peephole) args[DNNL_ARG_WEIGHTS_PEEPHOLE] = mem(e.peep, ow.peep.data());
      }
      e.p.fwd.execute(strm, args);

      // Backward: oneDNN accumulates into the weight gradients, which therefore start at zero.
      std::vector<float> dDst(T * B * D * H, 0.0f), dDstIter(stateN, 0.0f), dDstIterC(stateN, 0.0f);
      if (in.dY) {
        if (D == 2)
          rnn::onnxYToConcat(in.dY, T, D, B, H, dDst.data());
        else
          std::copy_n(in.dY, dDst.size(), dDst.begin());
      }
      if (in.dYh) std::copy_n(in.dYh, stateN, dDstIter.begin());
      if (in.dYc) std::copy_n(in.dYc, stateN, dDstIterC.begin());
      memory dWl(e.p.diffWl, eng), dWi(e.p.diffWi, eng);
      std::fill_n(static_cast<char*>(dWl.get_data_handle()), e.p.diffWl.get_size(), 0);
      std::fill_n(static_cast<char*>(dWi.get_data_handle()), e.p.diffWi.get_size(), 0);
      rnn::OneDnnWeights dw;
      dw.bias.assign(ow.bias.size(), 0.0f);
      dw.peep.assign(ow.peep.size(), 0.0f);
      args[DNNL_ARG_WEIGHTS_LAYER] = bWl;
      args[DNNL_ARG_WEIGHTS_ITER] = bWi;
      args[DNNL_ARG_DIFF_SRC_LAYER] = mem(e.srcLayer, g.dX.data());
      args[DNNL_ARG_DIFF_SRC_ITER] = mem(e.state, g.dH0.data());
      args[DNNL_ARG_DIFF_WEIGHTS_LAYER] = dWl;
      args[DNNL_ARG_DIFF_WEIGHTS_ITER] = dWi;
      args[DNNL_ARG_DIFF_BIAS] = mem(e.bias, dw.bias.data());
      args[DNNL_ARG_DIFF_DST_LAYER] = mem(e.dstLayer, dDst.data());
      args[DNNL_ARG_DIFF_DST_ITER] = mem(e.state, dDstIter.data());
      if (cell_ == Cell::kLstm) {
        args[DNNL_ARG_DIFF_SRC_ITER_C] = mem(e.state, g.dC0.data());
        args[DNNL_ARG_DIFF_DST_ITER_C] = mem(e.state, dDstIterC.data());
        if (peephole) args[DNNL_ARG_DIFF_WEIGHTS_PEEPHOLE] = mem(e.peep, dw.peep.data());
      }
      e.p.bwd.execute(strm, args);
      dw.layer.resize(ow.layer.size());
      dw.iter.resize(ow.iter.size());
      memory dWlUser(e.wLayerUser, eng, dw.layer.data()), dWiUser(e.wIterUser, eng, dw.iter.data());
      dnnl::reorder(dWl, dWlUser).execute(strm, dWl, dWlUser);
      dnnl::reorder(dWi, dWiUser).execute(strm, dWi, dWiUser);
      strm.wait();
      rnn::fromOneDnnWeights(*this, D, H, I, dw, g.dW.data(), g.dR.data(), g.dB.data(),
                             peephole ? g.dP.data() : nullptr);
    } catch (const dnnl::error& err) {
      return Status::error(std::string("oneDNN rnn backward: ") + err.what());
    }
    return Status();
  }

  std::string impl_;
  std::map<std::vector<int64_t>, Entry> cache_;
};

}  // namespace

void addRnnGradKernels(KernelRegistry& r) {
  r.add(kOneDnnTable, "RecurrentGrad", 1, kMaxOpset, &makeKernel<RecurrentGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
