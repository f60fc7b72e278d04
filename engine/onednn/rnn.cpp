// RNN, GRU and LSTM (ai.onnx). The common configurations (default activations, no clip, full
// sequence lengths, time-major layout) run on oneDNN's vanilla_rnn / lstm / gru / lbr_gru forward
// primitives, with ONNX's gate order converted to oneDNN's. Everything oneDNN can't express
// (clip, custom activations with their alpha/beta, input_forget, per-batch sequence_lens,
// batch-major layout) runs in a plain C++ cell loop whose matrix products go through sgemm.
#include <omp.h>
#include <onnx/onnx_pb.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>
#include <thread>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/onednn/rnn_common.h"
#include "engine/onednn/vector_math.h"

namespace dw::engine {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

using rnn::Act;
using rnn::Cell;

// Up to this batch the plain loops run every configuration, their steps on one thread with the
// recurrent product in smallGemm against R transposed once: a step is then a small product and
// a few vectors of activations, and oneDNN's cells spent more in per-step dispatch and waking
// threads (an LSTM of 128 units over 50 steps, 2 threads: at batch 1, 0.7 ms a layer against
// 0.25; at batch 8, 1.1 to 10 ms against 0.4). Larger batches of the configurations oneDNN's
// cells cannot run take the plain loops with sgemm.
constexpr int64_t kSmallBatch = 16;

// The threads of runUnitSplit meet once a step, every few microseconds: a barrier of its own
// that spins (and yields after a while, should a thread have lost its core), where OpenMP's
// barrier took the zoo's LSTM from 0.176 to 0.183 ms at batch 1 (0.569 against 0.574 at batch 8;
// 7 alternating rounds).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins) {
      if (spins < 4096)
        _mm_pause();
      else
        std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0}, gen_{0};
};

// Runs the enclosed code on one OpenMP thread (sgemm asks omp_get_max_threads per call).
struct OneThread {
  OneThread() : saved(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
  int saved;
};

class RnnKernel : public Kernel, private rnn::RnnAttrs {
 public:
  explicit RnnKernel(const KernelInit& init)
      : constW_(init.constantInputs.size() > 1 && init.constantInputs[1]),
        constR_(init.constantInputs.size() > 2 && init.constantInputs[2]) {
    Status st = parse(init.opType, init.attrs, init.node);
    if (!st.ok()) fail(st.message());
  }

  Status compute(KernelContext& ctx) override {
    rnn::RnnDims dims;
    DW_RETURN_IF_ERROR(rnn::checkInputs(ctx, *this, &dims));
    const int64_t T = dims.T, B = dims.B, I = dims.I, H = dims.H, D = dirs_;
    const std::vector<int64_t>& lens = dims.lens;
    const bool fullLens = dims.fullLens;
    const Shape stateShape = layout_ ? Shape{B, D, H} : Shape{D, B, H};
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
    // On a GPU engine oneDNN's cells run on the device whatever the batch.
    const bool small = B <= kSmallBatch && onednn::dnnlBackend(ctx.backend()).hostMemory();
    if (oneDnn && !small) return runOneDnn(ctx, T, B, I, H, *y, *yh, yc);
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
    // Small batches of a bidirectional cell: a thread a direction, each through all its steps
    // on its own, where splitting each direction's units made the threads meet at every step
    // (a 2-layer bidirectional LSTM of 96 units over 33 steps, 2 threads: 0.385 -> 0.366 ms at
    // batch 3, 0.154 -> 0.134 at batch 1; 7 alternating rounds). Only where a direction alone
    // would take at most 2 threads: with more, a direction a thread would leave most idle.
    const StepThreads each = stepThreads(B, H);
    const bool directionThreads = D == 2 && B <= kSmallBatch && omp_get_max_threads() >= 2 &&
                                  std::max(each.units, each.rows) <= 2 && !omp_in_parallel();
    // The input projections from the session's pool: a vector of this size (800 KB for the
    // zoo's LSTM) was mapped, faulted in and zeroed on every run.
    Tensor* xwT = ctx.scratch(DType::kFloat, Shape{(directionThreads ? D : 1) * T * B * GH});
    if (!xwT) return ctx.status();
    if (B <= kSmallBatch && rt_.size() != static_cast<size_t>(D * GH * H)) {
      rt_.assign(D * GH * H, 0.0f);
      rtFrom_ = nullptr;
    }
    // Direction d with its own state and input projections `xw`; `alone`: on the calling
    // thread only.
    auto direction = [&](int64_t d, float* xw, bool alone) {
      std::vector<float> hr(B * GH), hPrev(B * H), cPrev(B * H), tmp(B * H), gate(GH);
      const bool reverse = direction_ == "reverse" || d == 1;
      const float* W = ctx.input(1).data<float>() + d * GH * I;
      const float* R = ctx.input(2).data<float>() + d * GH * H;
      const float* Wb = ctx.hasInput(3) ? ctx.input(3).data<float>() + d * 2 * GH : nullptr;
      const float* Rb = Wb ? Wb + GH : nullptr;
      const float* P = cell_ == Cell::kLstm && ctx.hasInput(7)
                           ? ctx.input(7).data<float>() + d * 3 * H
                           : nullptr;
      const Act* acts = &acts_[d * (cell_ == Cell::kLstm ? 3 : (cell_ == Cell::kGru ? 2 : 1))];
      for (int64_t j = 0; j < GH; ++j) {
        float bias = Wb ? Wb[j] : 0.0f;
        const bool rbInside = cell_ == Cell::kGru && lbr_ && j >= 2 * H;
        if (Rb && !rbInside) bias += Rb[j];
        gate[j] = bias;
      }
      // A small LSTM splits its hidden units across the threads instead: each thread owns the
      // four gates' columns of its units (a quarter of R each, from its own cache) and their
      // cell state, and the threads meet once a step to exchange h. Even at 8 rows this beats
      // giving each thread half the rows: a thread's product of 8 rows by half the columns took
      // 2.0 us a step against 3.6 for 4 rows by all of them (zoo LSTM, batch 8: 0.72 -> 0.64 ms).
      // Its threads project the inputs of their own units, and its steps add the biases as
      // they read the projections (one pass less over them).
      const StepThreads threads = alone ? StepThreads{} : stepThreads(B, H);
      const int splitThreads = threads.units;
      if (splitThreads == 1) {
        // Input projections for all steps at once; biases that are plain sums fold in here.
        rnn::gemm(false, true, T * B, GH, I, X, I, W, I, 0.0f, xw, GH);
        for (int64_t i = 0; i < T * B; ++i)
          for (int64_t j = 0; j < GH; ++j) xw[i * GH + j] += gate[j];
      }
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
      // Small batches: the transposed R, for smallGemm; kept while R is the same constant.
      const bool small = B <= kSmallBatch;
      float* rt = small ? rt_.data() + d * GH * H : nullptr;
      if (small && rtFrom_ != ctx.input(2).raw()) {
        for (int64_t j = 0; j < GH; ++j)
          for (int64_t k = 0; k < H; ++k) rt[k * GH + j] = R[j * H + k];
        rtsValid_[d] = false;
      }
      const bool fast = fastCell(acts);
      // The steps of batch rows [b0, b1): rows never meet, so slices of the batch run on
      // threads of their own, each through every step without waiting for the others.
      auto runRows = [&](int64_t b0, int64_t b1, float* gateBuf) {
        const int64_t nb = b1 - b0;
        auto recurrent = [&](int64_t cols, int64_t col0, const float* h, float* out) {
          if (small)
            rnn::smallGemm(nb, cols, H, h + b0 * H, H, rt + col0, GH, out + b0 * GH, GH);
          else
            rnn::gemm(false, true, nb, cols, H, h + b0 * H, H, R + col0 * H, H, 0.0f, out + b0 * GH,
                      GH);
        };
        for (int64_t s = 0; s < T; ++s) {
          // Recurrent projection of all gates (GRU without linear_before_reset: z and r only).
          const int64_t rCols = cell_ == Cell::kGru && !lbr_ ? 2 * H : GH;
          recurrent(rCols, 0, hPrev.data(), hr.data());
          if (cell_ == Cell::kGru && !lbr_) {
            // (r ⊙ H_{t-1}) R_h^T needs r first.
            for (int64_t b = b0; b < b1; ++b) {
              if (s >= lens[b]) continue;
              const int64_t t = reverse ? lens[b] - 1 - s : s;
              float* g = gateBuf;
              const float* xr = &xw[(t * B + b) * GH];
              for (int64_t j = 0; j < H; ++j) g[j] = xr[H + j] + hr[b * GH + H + j];
              clip(g, H);
              acts[0].apply(g, H);
              for (int64_t j = 0; j < H; ++j) tmp[b * H + j] = g[j] * hPrev[b * H + j];
            }
            recurrent(H, 2 * H, tmp.data(), hr.data() + 2 * H);
          }
          for (int64_t b = b0; b < b1; ++b) {
            if (s >= lens[b]) continue;
            const int64_t t = reverse ? lens[b] - 1 - s : s;
            float* g = gateBuf;
            const float* xr = &xw[(t * B + b) * GH];
            const float* hrb = &hr[b * GH];
            float* hp = &hPrev[b * H];
            float* cp = &cPrev[b * H];
            if (fast) {
              onednn::lstmCell(hrb, H, xr, H, nullptr, 0, P, H, cp, hp, yAt(t, d, b), H);
              continue;
            }
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
      };
      if (splitThreads > 1) {
        runUnitSplit(splitThreads, T, B, I, H, d, reverse, rt, lens, X, W, xw, gate.data(), P, acts,
                     hPrev, cPrev, [&](int64_t t, int64_t b) { return yAt(t, d, b); });
        for (int64_t b = 0; b < B; ++b) {
          std::copy_n(&hPrev[b * H], H, stateAt(yh.data<float>(), d, b));
          if (yc) std::copy_n(&cPrev[b * H], H, stateAt(yc->data<float>(), d, b));
        }
        return;
      }
      const int nt = threads.rows;
      if (nt > 1) {
#pragma omp parallel num_threads(nt)
        {
          const int64_t t = omp_get_thread_num(), per = (B + nt - 1) / nt;
          std::vector<float> g(static_cast<size_t>(GH));
          const int64_t lo = std::min(B, t * per), hi = std::min(B, lo + per);
          if (lo < hi) runRows(lo, hi, g.data());
        }
      } else {
        std::optional<OneThread> oneThread;
        if (small) oneThread.emplace();
        runRows(0, B, gate.data());
      }
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(&hPrev[b * H], H, stateAt(yh.data<float>(), d, b));
        if (yc) std::copy_n(&cPrev[b * H], H, stateAt(yc->data<float>(), d, b));
      }
    };
    float* xw = xwT->data<float>();
    if (directionThreads) {
#pragma omp parallel num_threads(2)
      {
        // A smaller team than asked (OMP_DYNAMIC) takes both directions in turn.
        const int tid = omp_get_thread_num(), team = omp_get_num_threads();
        for (int64_t d = tid; d < D; d += team) direction(d, xw + d * T * B * GH, true);
      }
    } else {
      for (int64_t d = 0; d < D; ++d) direction(d, xw, false);
    }
    // Only a constant R (an initializer) can be trusted to be the same next run.
    rtFrom_ = B <= kSmallBatch && constR_ ? ctx.input(2).raw() : nullptr;
    return Status();
  }

  // The LSTM steps of rows [0, B) with hidden units split over `nt` threads (see runReference).
  // Thread k takes units [j0, j1); its columns of R's four gates are copied next to each other
  // (rts_), so one product per step gives all its gates. h is double-buffered: a step reads the
  // last step's h whole and writes its own units of the next, then the threads meet.
  template <class YAt>
  void runUnitSplit(int nt, int64_t T, int64_t B, int64_t I, int64_t H, int64_t d, bool reverse,
                    const float* rt, const std::vector<int64_t>& lens, const float* X,
                    const float* W, float* xw, const float* bias, const float* P, const Act* acts,
                    std::vector<float>& hPrev, std::vector<float>& cPrev, YAt yAt) {
    const int64_t GH = 4 * H, per = (H + nt - 1) / nt;
    LineFloats& rts = rts_[d];
    if (rts.size() != static_cast<size_t>(GH * H) || rtsThreads_[d] != nt || rtsFrom_[d] != rt ||
        !rtsValid_[d]) {
      rts.assign(GH * H, 0.0f);
      for (int k = 0; k < nt; ++k) {
        const int64_t j0 = std::min(H, k * per), w = std::min(H, j0 + per) - j0;
        float* block = rts.data() + 4 * j0 * H;  // [H][4 * w]
        for (int64_t kk = 0; kk < H; ++kk)
          for (int q = 0; q < 4; ++q)
            std::copy_n(rt + kk * GH + q * H + j0, w, block + kk * 4 * w + q * w);
      }
      rtsThreads_[d] = nt;
      rtsFrom_[d] = rt;
      rtsValid_[d] = true;
    }
    // W's rows of each block's units, four gates side by side ([4 w][I] at 4 j0 I), kept while
    // W is the same initializer.
    LineFloats& wks = wks_[d];
    const bool packW = !constW_ || wks.size() != static_cast<size_t>(GH * I) ||
                       wksThreads_[d] != nt || wksFrom_[d] != W;
    if (packW) {
      wks.resize(GH * I);
      wksThreads_[d] = nt;
      wksFrom_[d] = constW_ ? W : nullptr;
    }
    const bool fast = fastCell(acts);
    std::vector<float> hNext(hPrev.size());
    float* bufs[2] = {hPrev.data(), hNext.data()};
    std::optional<SpinBarrier> barrier;
#pragma omp parallel num_threads(nt)
    {
#pragma omp single
      barrier.emplace(omp_get_num_threads());
      // The team may be smaller than asked (OMP_DYNAMIC, a nested region): its threads then
      // take the blocks round-robin (each thread took the block of its number, and the blocks
      // of missing threads were never computed).
      const int tid = omp_get_thread_num(), team = omp_get_num_threads();
      LineFloats g(static_cast<size_t>(std::max<int64_t>(1, B * 4 * per)));
      // A block's input projections, [T B][4 w] at xw + 4 j0 T B, made by the thread that reads
      // them, so they stay in its cache, in one sgemm over its four gates' rows of W side by
      // side. One threaded sgemm over all units before took the zoo's LSTM from 0.522 to 0.533
      // ms at batch 8 and from 0.168 to 0.173 at batch 1 (7 alternating rounds); an sgemm a gate
      // took 0.531 and 0.173.
      for (int k = tid; k < nt; k += team) {
        const int64_t j0 = std::min(H, k * per), w = std::min(H, j0 + per) - j0;
        if (w <= 0) continue;
        float* wk = wks.data() + 4 * j0 * I;
        if (packW)
          for (int q = 0; q < 4; ++q) std::copy_n(W + (q * H + j0) * I, w * I, wk + q * w * I);
        rnn::gemm(false, true, T * B, 4 * w, I, X, I, wk, I, 0.0f, xw + 4 * j0 * T * B, 4 * w);
      }
      for (int64_t s = 0; s < T; ++s) {
        const float* hIn = bufs[s & 1];
        float* hOut = bufs[(s + 1) & 1];
        for (int k = tid; k < nt; k += team) {
          const int64_t j0 = std::min(H, k * per), j1 = std::min(H, j0 + per), w = j1 - j0;
          if (w <= 0) continue;
          const float* block = rts.data() + 4 * j0 * H;
          rnn::smallGemm(B, 4 * w, H, hIn, H, block, 4 * w, g.data(), 4 * w);
          for (int64_t b = 0; b < B; ++b) {
            const float* hb = hIn + b * H;
            float* ho = hOut + b * H;
            if (s >= lens[b]) {  // past this row's length: h stays
              std::copy(hb + j0, hb + j1, ho + j0);
              continue;
            }
            const int64_t t = reverse ? lens[b] - 1 - s : s;
            const float* xr = xw + 4 * j0 * T * B + (t * B + b) * 4 * w;
            float* cp = &cPrev[b * H + j0];
            if (fast) {
              onednn::lstmCell(g.data() + b * 4 * w, w, xr, w, bias + j0, H, P ? P + j0 : nullptr,
                               H, cp, ho + j0, yAt(t, b) + j0, w);
              continue;
            }
            // ONNX order: i, o, f, c; peepholes: i, o, f.
            float* gb = g.data() + b * 4 * w;
            float *gi = gb, *go = gb + w, *gf = gb + 2 * w, *gc = gb + 3 * w;
            for (int q = 0; q < 4; ++q)
              for (int64_t j = 0; j < w; ++j) gb[q * w + j] += xr[q * w + j] + bias[q * H + j0 + j];
            if (P)
              for (int64_t j = 0; j < w; ++j) {
                gi[j] += P[j0 + j] * cp[j];
                gf[j] += P[2 * H + j0 + j] * cp[j];
              }
            clipTo(gi, w);
            acts[0].apply(gi, w);
            if (inputForget_) {
              for (int64_t j = 0; j < w; ++j) gf[j] = 1 - gi[j];
            } else {
              clipTo(gf, w);
              acts[0].apply(gf, w);
            }
            clipTo(gc, w);
            acts[1].apply(gc, w);
            for (int64_t j = 0; j < w; ++j) cp[j] = gf[j] * cp[j] + gi[j] * gc[j];
            if (P)
              for (int64_t j = 0; j < w; ++j) go[j] += P[H + j0 + j] * cp[j];
            clipTo(go, w);
            acts[0].apply(go, w);
            std::copy_n(cp, w, gc);
            acts[2].apply(gc, w);
            for (int64_t j = 0; j < w; ++j) ho[j0 + j] = go[j] * gc[j];
            std::copy_n(ho + j0, w, yAt(t, b) + j0);
          }
        }
        barrier->wait();
      }
    }
    if (T & 1) hPrev.swap(hNext);  // the last step wrote bufs[T & 1]
  }

  // How one direction's steps share the threads: a small LSTM of 64 units or more splits its
  // units (runUnitSplit), else small batches split their rows, two rows a thread at least (one
  // row alone is a vector-matrix product that cannot pay for a thread).
  struct StepThreads {
    int units = 1, rows = 1;
  };
  StepThreads stepThreads(int64_t B, int64_t H) const {
    const int64_t threads = omp_get_max_threads();
    StepThreads s;
    if (B > kSmallBatch) return s;
    if (cell_ == Cell::kLstm && H >= 64)
      s.units = static_cast<int>(std::min<int64_t>(threads, H / 32));
    else
      s.rows = static_cast<int>(std::clamp<int64_t>(B / 2, 1, threads));
    return s;
  }

  // Whether onednn::lstmCell computes this LSTM's cells: ONNX's default activations, no clip,
  // no coupled input and forget gates.
  bool fastCell(const Act* acts) const {
    return cell_ == Cell::kLstm && !hasClip_ && !inputForget_ && vectorMathAvailable() &&
           acts[0].fn() == ops::UnaryFn::kSigmoid && acts[1].fn() == ops::UnaryFn::kTanh &&
           acts[2].fn() == ops::UnaryFn::kTanh;
  }

  void clipTo(float* v, int64_t n) const {
    if (!hasClip_) return;
    for (int64_t i = 0; i < n; ++i) v[i] = std::clamp(v[i], -clip_, clip_);
  }

  // ---- oneDNN -------------------------------------------------------------------------------
  struct Entry {
    dnnl::primitive prim;
    memory::desc srcLayer, state, wLayerUser, wIterUser, wLayer, wIter, bias, peep, dstLayer;
    memory wLayerMem, wIterMem;
    bool peephole = false;
  };

  Status runOneDnn(KernelContext& ctx, int64_t T, int64_t B, int64_t I, int64_t H, Tensor& y,
                   Tensor& yh, Tensor* yc) {
    auto& be = onednn::dnnlBackend(ctx.backend());
    auto& eng = be.engine();
    auto& strm = be.stream();
    const int64_t D = dirs_, G = gates_;
    const bool peephole = cell_ == Cell::kLstm && ctx.hasInput(7);
    const int64_t biasGates = cell_ == Cell::kGru && lbr_ ? 4 : G;
    std::vector<int64_t> key{T, B, I, H, peephole, ctx.hasInput(5), ctx.hasInput(6)};
    const bool lstm = cell_ == Cell::kLstm;
    const bool withH0 = ctx.hasInput(5) || (lstm && ctx.hasInput(6));
    const bool withC0 = lstm && withH0;
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
        const auto dir = oneDnnDirection();
        const auto pk = dnnl::prop_kind::forward_inference;
        // Absent initial states are zero descriptors: oneDNN then starts from zeros. Its LSTM
        // takes both or neither: one given, the other is bound to zeros below.
        const memory::desc h0 = withH0 ? e.state : memory::desc();
        const memory::desc c0 = withC0 ? e.state : memory::desc();
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
          const auto alg = vanillaActivation();
          dnnl::vanilla_rnn_forward::desc d(pk, alg, dir, e.srcLayer, h0, wl, wi, e.bias,
                                            e.dstLayer, e.state);
          dnnl::vanilla_rnn_forward::primitive_desc pd(d, eng);
          e.wLayer = pd.weights_layer_desc();
          e.wIter = pd.weights_iter_desc();
          e.prim = dnnl::vanilla_rnn_forward(pd);
        }
        e.wLayerMem = memory(e.wLayer, eng);
        e.wIterMem = memory(e.wIter, eng);
        it = cache_.emplace(key, std::move(e)).first;
      }
      Entry& e = it->second;
      // Weights and biases in oneDNN's gate order (ldgoi has ONNX's [D][gate][H][in] layout).
      rnn::OneDnnWeights ow;
      rnn::toOneDnnWeights(*this, D, H, I, ctx.input(1).data<float>(), ctx.input(2).data<float>(),
                           ctx.hasInput(3) ? ctx.input(3).data<float>() : nullptr,
                           e.peephole ? ctx.input(7).data<float>() : nullptr, &ow);
      std::vector<float>&wl = ow.layer, &wi = ow.iter, &bias = ow.bias, &peep = ow.peep;
      memory wlUser = bind_.in(be, DNNL_ARG_WEIGHTS_LAYER, e.wLayerUser, wl.data());
      memory wiUser = bind_.in(be, DNNL_ARG_WEIGHTS_ITER, e.wIterUser, wi.data());
      dnnl::reorder(wlUser, e.wLayerMem).execute(strm, wlUser, e.wLayerMem);
      dnnl::reorder(wiUser, e.wIterMem).execute(strm, wiUser, e.wIterMem);
      // Bidirectional: oneDNN's [T][B][D*H] goes to scratch and is rearranged after the run.
      Tensor* dstHost = D == 2 ? ctx.scratch(DType::kFloat, {T, B, D * H}) : &y;
      // An initial state oneDNN needs but the node lacks (LSTM: one of h0 / c0) is zeros.
      const bool needZeros = (withH0 && !ctx.hasInput(5)) || (withC0 && !ctx.hasInput(6));
      Tensor* zeros = needZeros ? ctx.scratch(DType::kFloat, {D, B, H}) : nullptr;
      if (!dstHost || (needZeros && !zeros)) return ctx.status();
      if (zeros) std::fill_n(zeros->data<float>(), zeros->size(), 0.0f);
      auto initial = [&](int i) { return ctx.hasInput(i) ? ctx.input(i).raw() : zeros->raw(); };
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC_LAYER, bind_.in(be, DNNL_ARG_SRC_LAYER, e.srcLayer, ctx.input(0).raw())},
          {DNNL_ARG_WEIGHTS_LAYER, e.wLayerMem},
          {DNNL_ARG_WEIGHTS_ITER, e.wIterMem},
          {DNNL_ARG_BIAS, bind_.in(be, DNNL_ARG_BIAS, e.bias, bias.data())},
          {DNNL_ARG_DST_LAYER, bind_.out(be, DNNL_ARG_DST_LAYER, e.dstLayer, dstHost->raw())},
          {DNNL_ARG_DST_ITER, bind_.out(be, DNNL_ARG_DST_ITER, e.state, yh.raw())}};
      if (withH0) args[DNNL_ARG_SRC_ITER] = bind_.in(be, DNNL_ARG_SRC_ITER, e.state, initial(5));
      if (cell_ == Cell::kLstm) {
        args[DNNL_ARG_DST_ITER_C] = bind_.out(be, DNNL_ARG_DST_ITER_C, e.state, yc->raw());
        if (withC0)
          args[DNNL_ARG_SRC_ITER_C] = bind_.in(be, DNNL_ARG_SRC_ITER_C, e.state, initial(6));
        if (e.peephole)
          args[DNNL_ARG_WEIGHTS_PEEPHOLE] =
              bind_.in(be, DNNL_ARG_WEIGHTS_PEEPHOLE, e.peep, peep.data());
      }
      e.prim.execute(strm, args);
      bind_.finish(be);
      // oneDNN concatenates directions along channels: [T][B][D*H] -> ONNX [T][D][B][H].
      if (D == 2) rnn::concatToOnnxY(dstHost->data<float>(), T, D, B, H, y.data<float>());
    } catch (const dnnl::error& err) {
      bind_.discard();
      return Status::error(std::string("oneDNN rnn: ") + err.what());
    }
    return Status();
  }

  std::map<std::vector<int64_t>, Entry> cache_;
  onednn::Bindings bind_;
  bool constW_, constR_;          // W, R are initializers
  LineFloats rt_;                 // [D][H][G*H]: R transposed, for small batches
  const void* rtFrom_ = nullptr;  // the constant R that rt_ holds
  // Per direction: rt_'s columns regrouped by thread for runUnitSplit, and what they came from
  // (rtsValid_ is cleared whenever rt_ is rebuilt).
  LineFloats rts_[2];
  int rtsThreads_[2] = {0, 0};
  const float* rtsFrom_[2] = {nullptr, nullptr};
  bool rtsValid_[2] = {false, false};
  // Per direction: W packed by thread block for runUnitSplit, and the constant W it holds.
  LineFloats wks_[2];
  int wksThreads_[2] = {0, 0};
  const float* wksFrom_[2] = {nullptr, nullptr};
};

}  // namespace

void addRnnGradKernels(KernelRegistry& r);  // onednn/rnn_grad.cpp

void addRnnKernels(KernelRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"})
    r.add(kOneDnnTable, op, 1, kMaxOpset, &makeKernel<RnnKernel>);
  addRnnGradKernels(r);  // their backward (com.deepwire.grad RecurrentGrad)
}

}  // namespace dw::engine
