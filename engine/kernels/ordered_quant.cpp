// com.microsoft's int8 operators with cuBLASLt memory orders, which ONNX Runtime runs only on
// NVIDIA GPUs (QuantizeWithOrder, DequantizeWithOrder, QOrderedMatMul, QOrderedGelu,
// QOrderedLayerNormalization, QOrderedAttention), and GemmFloat8 with float, float16 and bfloat16
// operands. Here they run on any accelerator's host side, from their definitions (checked against
// float64 references in tests/golden/ref-contrib).
//
// A tensor of rank >= 2 is a batch of matrices [rows, cols] (the last two axes, rows 1 for rank
// 1), each stored in one of cuBLASLt's orders: COL (0), ROW (1), COL32 (2), COL4_4R2_8C (3) or
// COL32_2R_4R4 (4). Quantizing multiplies by the float32 reciprocal of the scale, rounds to
// nearest even and saturates to int8, as the GPU kernels do.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

enum Order : int64_t { kCol = 0, kRow = 1, kCol32 = 2, kCol4_4R2_8C = 3, kCol32_2R_4R4 = 4 };

struct MatrixView {
  int64_t batch, rows, cols;
};

MatrixView viewOf(const Shape& s) {
  const int64_t cols = s.empty() ? 1 : s.back(), rows = s.size() >= 2 ? s[s.size() - 2] : 1;
  const int64_t n = numElements(s);
  return {rows * cols == 0 ? 0 : n / (rows * cols), rows, cols};
}

const char* orderName(int64_t o) {
  static const char* names[] = {"COL", "ROW", "COL32", "COL4_4R2_8C", "COL32_2R_4R4"};
  return o >= 0 && o <= 4 ? names[o] : "unknown";
}

// Whether `order` can hold a rows x cols matrix: the tiled orders need whole tiles.
Status orderFits(int64_t order, const MatrixView& v, const char* what) {
  if (order < kCol || order > kCol32_2R_4R4)
    return Status::error(std::string(what) + " order " + std::to_string(order) +
                         " is not one of 0 (COL), 1 (ROW), 2 (COL32), 3 (COL4_4R2_8C), 4 "
                         "(COL32_2R_4R4)");
  const bool ok = order <= kRow || (order == kCol32 && v.cols % 32 == 0) ||
                  (order == kCol4_4R2_8C && v.cols % 32 == 0 && v.rows % 8 == 0) ||
                  (order == kCol32_2R_4R4 && v.cols % 32 == 0 && v.rows % 32 == 0);
  if (ok) return Status();
  return Status::error(
      std::string(what) + " in order " + orderName(order) + " needs " +
      (order == kCol32         ? "columns in multiples of 32"
       : order == kCol4_4R2_8C ? "columns in multiples of 32 and rows in multiples of 8"
                               : "columns and rows in multiples of 32") +
      "; the matrix is " + std::to_string(v.rows) + " x " + std::to_string(v.cols));
}

// Offset of element (r, c) within one matrix stored in `order`.
int64_t orderOffset(int64_t order, int64_t r, int64_t c, int64_t rows, int64_t cols) {
  switch (order) {
    case kCol:
      return c * rows + r;
    case kRow:
      return r * cols + c;
    case kCol32:
      return (c / 32) * 32 * rows + r * 32 + c % 32;
    case kCol4_4R2_8C:
      // 8 x 32 tiles down each 32-column panel; even rows fill a tile's first half, odd rows
      // the second, in groups of 4 columns by 4 row pairs.
      return (c / 32) * 32 * rows + (r / 8) * 256 + (r % 2) * 128 + ((c % 32) / 4) * 16 +
             ((r % 8) / 2) * 4 + c % 4;
    default: {
      const int64_t t = r % 32;
      return (c / 32) * 32 * rows + (r / 32) * 1024 +
             ((((t % 8) / 2) * 4 + t / 8) * 2 + t % 2) * 32 + c % 32;
    }
  }
}

// NaN becomes 0, as CUDA's float-to-int conversion makes it (a cast of NaN is undefined).
// f(from, to) for every element: its offset in a tensor of matrices `v` stored in order `in`,
// and in one stored in order `out`.
template <class F>
void forElements(const MatrixView& v, int64_t in, int64_t out, F f) {
  const int64_t m = v.rows * v.cols;
  for (int64_t b = 0; b < v.batch; ++b)
    for (int64_t r = 0; r < v.rows; ++r)
      for (int64_t c = 0; c < v.cols; ++c)
        f(b * m + orderOffset(in, r, c, v.rows, v.cols),
          b * m + orderOffset(out, r, c, v.rows, v.cols));
}

int8_t saturate(float v) {
  if (std::isnan(v)) return 0;
  const float r = std::nearbyint(std::clamp(v, -128.0f, 127.0f));
  return static_cast<int8_t>(r);
}

Result<float> scalarOf(KernelContext& ctx, size_t i, const char* name) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != DType::kFloat || t.size() != 1)
    return Status::error(std::string(name) + " must be one float32 value, got " +
                         dtypeName(t.dtype()) + " " + shapeToString(t.shape()));
  return t.data<float>()[0];
}

bool floatLike(DType t) {
  return t == DType::kFloat || t == DType::kFloat16 || t == DType::kBFloat16;
}

class QuantizeWithOrder : public Kernel {
 public:
  explicit QuantizeWithOrder(const KernelInit& init)
      : in_(init.attrs.getInt("order_input", kRow)),
        out_(init.attrs.getInt("order_output", kRow)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat && x.dtype() != DType::kFloat16)
      return Status::error("input must be float32 or float16, got " +
                           std::string(dtypeName(x.dtype())));
    auto scale = scalarOf(ctx, 1, "scale_input");
    if (!scale) return scale.status();
    const MatrixView v = viewOf(x.shape());
    DW_RETURN_IF_ERROR(orderFits(in_, v, "input"));
    DW_RETURN_IF_ERROR(orderFits(out_, v, "output"));
    const float inverse = 1.0f / *scale;
    DW_ALLOC(y, ctx.output(0, DType::kInt8, x.shape()));
    forElements(v, in_, out_, [&](int64_t from, int64_t to) {
      y->data<int8_t>()[to] = saturate(loadFloat(x, from) * inverse);
    });
    return Status();
  }

 private:
  int64_t in_, out_;
};

class DequantizeWithOrder : public Kernel {
 public:
  explicit DequantizeWithOrder(const KernelInit& init)
      : in_(init.attrs.getInt("order_input", kRow)),
        out_(init.attrs.getInt("order_output", kRow)),
        to_(dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("to", 1)))) {
    if (to_ != DType::kFloat && to_ != DType::kFloat16)
      fail("DequantizeWithOrder's `to` must be 1 (float) or 10 (float16)");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kInt8)
      return Status::error("input must be int8, got " + std::string(dtypeName(x.dtype())));
    auto scale = scalarOf(ctx, 1, "scale_input");
    if (!scale) return scale.status();
    const MatrixView v = viewOf(x.shape());
    DW_RETURN_IF_ERROR(orderFits(in_, v, "input"));
    DW_RETURN_IF_ERROR(orderFits(out_, v, "output"));
    DW_ALLOC(y, ctx.output(0, to_, x.shape()));
    forElements(v, in_, out_, [&](int64_t from, int64_t to) {
      storeFloat(*y, to, *scale * x.data<int8_t>()[from]);
    });
    return Status();
  }

 private:
  int64_t in_, out_;
  DType to_;
};

// Y = sat8(scale_A scale_B / scale_Y * A B + scale_C / scale_Y * C + bias), int32 products; B's
// order is usually COL (ONNX Runtime accepts only A ROW, B COL, Y ROW; other orders read the same).
// B and C broadcast over A's batch when they have one matrix.
class QOrderedMatMul : public Kernel {
 public:
  explicit QOrderedMatMul(const KernelInit& init)
      : a_(init.attrs.getInt("order_A", kRow)),
        b_(init.attrs.getInt("order_B", kCol)),
        y_(init.attrs.getInt("order_Y", kRow)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor &A = ctx.input(0), &B = ctx.input(2);
    if (A.dtype() != DType::kInt8 || B.dtype() != DType::kInt8)
      return Status::error("A and B must be int8");
    if (A.rank() < 2 || A.rank() > 3 || B.rank() < 2 || B.rank() > 3)
      return Status::error("A and B must be 2-D or 3-D, got " + shapeToString(A.shape()) + " and " +
                           shapeToString(B.shape()));
    const MatrixView va = viewOf(A.shape()), vb = viewOf(B.shape());
    if (va.cols != vb.rows)
      return Status::error("A's columns (" + std::to_string(va.cols) + ") are not B's rows (" +
                           std::to_string(vb.rows) + ")");
    if (vb.batch != 1 && vb.batch != va.batch)
      return Status::error("B has " + std::to_string(vb.batch) + " matrices for A's " +
                           std::to_string(va.batch));
    float s[4];
    const char* names[] = {"scale_A", "scale_B", "scale_Y", "scale_C"};
    const size_t at[] = {1, 3, 4, 7};
    for (int i = 0; i < 3; ++i) {
      auto v = scalarOf(ctx, at[i], names[i]);
      if (!v) return v.status();
      if (!(*v > 0)) return Status::error(std::string(names[i]) + " must be positive");
      s[i] = *v;
    }
    const bool hasC = ctx.hasInput(6);
    const int64_t M = va.rows, K = va.cols, N = vb.cols;
    MatrixView vc{};
    if (hasC) {
      if (!ctx.hasInput(7)) return Status::error("C needs scale_C");
      auto v = scalarOf(ctx, 7, "scale_C");
      if (!v) return v.status();
      s[3] = *v;
      vc = viewOf(ctx.input(6).shape());
      if (ctx.input(6).dtype() != DType::kInt8 || vc.rows != M || vc.cols != N ||
          (vc.batch != 1 && vc.batch != va.batch))
        return Status::error("C must be int8 [" + std::to_string(M) + ", " + std::to_string(N) +
                             "] per matrix of A, got " + shapeToString(ctx.input(6).shape()));
    }
    const float* bias = nullptr;
    if (ctx.hasInput(5)) {
      if (ctx.input(5).dtype() != DType::kFloat || ctx.input(5).size() != N)
        return Status::error("bias must be float32 [" + std::to_string(N) + "]");
      bias = ctx.input(5).data<float>();
    }
    for (auto [order, v, what] :
         {std::tuple{a_, va, "A"}, {b_, vb, "B"}, {y_, MatrixView{va.batch, M, N}, "Y"}})
      DW_RETURN_IF_ERROR(orderFits(order, v, what));
    const float alpha = s[0] * s[1] / s[2], beta = hasC ? s[3] / s[2] : 0.0f;
    Shape out = A.shape();
    out.back() = N;
    DW_ALLOC(y, ctx.output(0, DType::kInt8, out));
    const int8_t *a = A.data<int8_t>(), *bm = B.data<int8_t>();
    const int8_t* c = hasC ? ctx.input(6).data<int8_t>() : nullptr;
    for (int64_t n0 = 0; n0 < va.batch; ++n0) {
      const int8_t* ab = a + n0 * M * K;
      const int8_t* bb = bm + (vb.batch == 1 ? 0 : n0) * K * N;
      const int8_t* cb = c ? c + (vc.batch == 1 ? 0 : n0) * M * N : nullptr;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          int32_t acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += int32_t(ab[orderOffset(a_, i, k, M, K)]) * bb[orderOffset(b_, k, j, K, N)];
          float v = alpha * static_cast<float>(acc);
          if (cb) v += beta * cb[orderOffset(y_, i, j, M, N)];
          if (bias) v += bias[j];
          y->data<int8_t>()[n0 * M * N + orderOffset(y_, i, j, M, N)] = saturate(v);
        }
    }
    return Status();
  }

 private:
  int64_t a_, b_, y_;
};

// Elementwise, so the orders do not matter: a table of the 256 int8 inputs.
class QOrderedGelu : public Kernel {
 public:
  explicit QOrderedGelu(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kInt8) return Status::error("X must be int8");
    auto sx = scalarOf(ctx, 1, "scale_X"), sy = scalarOf(ctx, 2, "scale_Y");
    if (!sx) return sx.status();
    if (!sy) return sy.status();
    const float inverse = 1.0f / *sy;
    int8_t table[256];
    for (int q = -128; q < 128; ++q) {
      const float v = *sx * static_cast<float>(q);
      table[q + 128] = saturate(inverse * (v * 0.5f * (1.0f + std::erf(v * 0.70710678118654752f))));
    }
    DW_ALLOC(y, ctx.output(0, DType::kInt8, x.shape()));
    for (int64_t i = 0; i < x.size(); ++i) y->data<int8_t>()[i] = table[x.data<int8_t>()[i] + 128];
    return Status();
  }
};

// Layer normalization of int8 rows (the last axis, ROW order): population variance.
class QOrderedLayerNorm : public Kernel {
 public:
  explicit QOrderedLayerNorm(const KernelInit& init)
      : eps_(init.attrs.getFloat("epsilon", 1e-5f)),
        axis_(init.attrs.getInt("axis", -1)),
        orderX_(init.attrs.getInt("order_X", kRow)),
        orderY_(init.attrs.getInt("order_Y", kRow)) {
    if (orderX_ != kRow || orderY_ != kRow)
      fail("QOrderedLayerNormalization normalizes rows in ROW order (order_X = order_Y = 1)");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kInt8 || x.rank() < 1) return Status::error("X must be int8");
    if (normAxis(axis_, x.rank()) != static_cast<int64_t>(x.rank()) - 1)
      return Status::error("axis must be the last one (-1)");
    auto sx = scalarOf(ctx, 1, "scale_X"), sy = scalarOf(ctx, 4, "scale_Y");
    if (!sx) return sx.status();
    if (!sy) return sy.status();
    const int64_t C = x.dim(x.rank() - 1), rows = C == 0 ? 0 : x.size() / C;
    const Tensor& gamma = ctx.input(2);
    const Tensor* beta = ctx.hasInput(3) ? &ctx.input(3) : nullptr;
    if (!floatLike(gamma.dtype()) || gamma.size() != C ||
        (beta && (beta->dtype() != gamma.dtype() || beta->size() != C)))
      return Status::error("scale and B must be float [" + std::to_string(C) +
                           "] of one type, got " + shapeToString(gamma.shape()));
    const float inverse = 1.0f / *sy;
    DW_ALLOC(y, ctx.output(0, DType::kInt8, x.shape()));
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* q = x.data<int8_t>() + r * C;
      int64_t sum = 0, squares = 0;
      for (int64_t c = 0; c < C; ++c) sum += q[c], squares += int64_t(q[c]) * q[c];
      const double mean = static_cast<double>(*sx) * sum / C;
      const double var = static_cast<double>(*sx) * *sx *
                         (static_cast<double>(squares) - static_cast<double>(sum) * sum / C) / C;
      const double rstd = 1.0 / std::sqrt(var + eps_);
      for (int64_t c = 0; c < C; ++c) {
        double v = (static_cast<double>(*sx) * q[c] - mean) * rstd * loadFloat(gamma, c);
        if (beta) v += loadFloat(*beta, c);
        y->data<int8_t>()[r * C + c] = saturate(static_cast<float>(v * inverse));
      }
    }
    return Status();
  }

 private:
  float eps_;
  int64_t axis_, orderX_, orderY_;
};

// BERT-style self-attention on int8 [B, S, hidden] (ONNX Runtime's CUDA kernel, whose
// restrictions beyond what its definition needs are not kept: any sequence length and head
// size, any order that fits). Each stage's int32 sums are scaled and saturated to int8 in the
// scale of the next: Q, K and V (scale_{Q,K,V}_gemm; a weight scale per column or one, the bias
// in float added in the gemm's units), the scores Q K^T (scale_QKT_gemm), the probabilities
// (scale_QKT_softmax), and the context (scale_values_gemm). The softmax reads exp from a table of
// the 256 score differences, base exp(scale_QKT_gemm / sqrt(head size)), and a row's maximum is
// taken over every key, masked or not, as the GPU kernel takes it. mask_index is int32 [B, S]
// (nonzero: attend), or absent (attend to all).
class QOrderedAttention : public Kernel {
 public:
  explicit QOrderedAttention(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)),
        orderIn_(init.attrs.getInt("order_input", kRow)),
        orderW_(init.attrs.getInt("order_weight", kCol)),
        orderOut_(init.attrs.getInt("order_output", kRow)),
        sizes_(init.attrs.getInts("qkv_hidden_sizes")) {
    if (heads_ <= 0) fail("num_heads must be positive");
    if (init.attrs.getInt("unidirectional", 0) != 0)
      fail(
          "unidirectional attention is not defined for QOrderedAttention (ONNX Runtime refuses "
          "it too); mask the future keys with mask_index instead");
  }
  Status compute(KernelContext& ctx) override {
    if (ctx.hasInput(18) || ctx.hasInput(19))
      return Status::error(
          "past and attention_bias are not defined for QOrderedAttention (ONNX "
          "Runtime ignores them); leave those inputs empty");
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kInt8 || x.rank() != 3)
      return Status::error("input must be int8 [batch, sequence, hidden], got " +
                           std::string(dtypeName(x.dtype())) + " " + shapeToString(x.shape()));
    const int64_t B = x.dim(0), S = x.dim(1), Hin = x.dim(2);
    const MatrixView vx{B, S, Hin};
    DW_RETURN_IF_ERROR(orderFits(orderIn_, vx, "input"));
    const Tensor& wq = ctx.input(5);
    if (wq.rank() != 2) return Status::error("Q_weight must be 2-D [input hidden, hidden]");
    const int64_t H = wq.dim(1);
    if (!sizes_.empty() &&
        (sizes_.size() != 3 || sizes_[0] != H || sizes_[1] != H || sizes_[2] != H))
      return Status::error("qkv_hidden_sizes must be three equal sizes, the weights' columns (" +
                           std::to_string(H) + ")");
    if (H % heads_ != 0)
      return Status::error("the hidden size " + std::to_string(H) + " is not a multiple of " +
                           "num_heads " + std::to_string(heads_));
    const int64_t hs = H / heads_;
    DW_RETURN_IF_ERROR(orderFits(orderOut_, MatrixView{B, S, H}, "output"));
    float s[7];
    const char* names[] = {"scale_input",      "scale_Q_gemm",   "scale_K_gemm",
                           "scale_V_gemm",     "scale_QKT_gemm", "scale_QKT_softmax",
                           "scale_values_gemm"};
    const size_t at[] = {1, 2, 3, 4, 14, 15, 16};
    for (int i = 0; i < 7; ++i) {
      if (!ctx.hasInput(at[i]))
        return Status::error(std::string(names[i]) + " is needed (input " + std::to_string(at[i]) +
                             ")");
      auto v = scalarOf(ctx, at[i], names[i]);
      if (!v) return v.status();
      if (!(*v > 0)) return Status::error(std::string(names[i]) + " must be positive");
      s[i] = *v;
    }
    const float* mask = nullptr;
    std::vector<float> maskBuf;
    if (ctx.hasInput(17)) {
      const Tensor& m = ctx.input(17);
      if (m.dtype() != DType::kInt32 || m.shape() != Shape{B, S})
        return Status::error("mask_index must be int32 [" + std::to_string(B) + ", " +
                             std::to_string(S) + "], got " + std::string(dtypeName(m.dtype())) +
                             " " + shapeToString(m.shape()));
      maskBuf.resize(B * S);
      for (int64_t i = 0; i < B * S; ++i) maskBuf[i] = m.data<int32_t>()[i] != 0 ? 1.0f : 0.0f;
      mask = maskBuf.data();
    }
    // Q, K and V as int8 [B * S, H] rows.
    std::vector<int8_t> qkv[3];
    for (int p = 0; p < 3; ++p) {
      const Tensor &w = ctx.input(5 + p), &sw = ctx.input(8 + p), &bias = ctx.input(11 + p);
      const std::string which(1, "QKV"[p]), wn = which + "_weight";
      if (w.dtype() != DType::kInt8 || w.shape() != Shape{Hin, H})
        return Status::error(wn + " must be int8 [" + std::to_string(Hin) + ", " +
                             std::to_string(H) + "], got " + shapeToString(w.shape()));
      DW_RETURN_IF_ERROR(orderFits(orderW_, MatrixView{1, Hin, H}, wn.c_str()));
      if (sw.dtype() != DType::kFloat || (sw.size() != 1 && sw.size() != H))
        return Status::error("scale_" + wn + " must be float32, one value or [" +
                             std::to_string(H) + "]");
      if (bias.dtype() != DType::kFloat || bias.size() != H)
        return Status::error(which + "_bias must be float32 [" + std::to_string(H) + "]");
      const float gemm = s[1 + p];
      std::vector<float> alpha(H), shift(H);
      for (int64_t j = 0; j < H; ++j) {
        alpha[j] = s[0] * sw.data<float>()[sw.size() == 1 ? 0 : j] / gemm;
        shift[j] = bias.data<float>()[j] / gemm;
      }
      qkv[p].resize(B * S * H);
      const int8_t *xi = x.data<int8_t>(), *wi = w.data<int8_t>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j < H; ++j) {
            int32_t acc = 0;
            for (int64_t k = 0; k < Hin; ++k)
              acc += int32_t(xi[b * S * Hin + orderOffset(orderIn_, i, k, S, Hin)]) *
                     wi[orderOffset(orderW_, k, j, Hin, H)];
            qkv[p][(b * S + i) * H + j] = saturate(alpha[j] * static_cast<float>(acc) + shift[j]);
          }
    }
    float table[256];
    const double base = std::exp(static_cast<double>(s[4]) / std::sqrt(static_cast<double>(hs)));
    for (int i = 0; i < 256; ++i) table[i] = static_cast<float>(std::pow(base, i - 255));
    const float scoreScale = s[1] * s[2] / s[4];
    const float contextScale = s[5] * s[3] / s[6];
    DW_ALLOC(y, ctx.output(0, DType::kInt8, Shape{B, S, H}));
    std::vector<int8_t> scores(S), probs(S);
    std::vector<float> e(S);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < heads_; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int8_t* q = &qkv[0][(b * S + i) * H + n * hs];
          int m = -128;
          for (int64_t j = 0; j < S; ++j) {
            const int8_t* k = &qkv[1][(b * S + j) * H + n * hs];
            int32_t acc = 0;
            for (int64_t c = 0; c < hs; ++c) acc += int32_t(q[c]) * k[c];
            scores[j] = saturate(scoreScale * static_cast<float>(acc));
            m = std::max<int>(m, scores[j]);
          }
          float sum = 0;
          for (int64_t j = 0; j < S; ++j) {
            e[j] = mask && mask[b * S + j] == 0.0f ? 0.0f : table[255 - m + scores[j]];
            sum += e[j];
          }
          // A row with every key masked attends to nothing: zeros, not 0 / 0.
          const float inverse = sum > 0 ? 1.0f / (sum * s[5]) : 0.0f;
          for (int64_t j = 0; j < S; ++j) probs[j] = saturate(e[j] * inverse);
          for (int64_t c = 0; c < hs; ++c) {
            int32_t acc = 0;
            for (int64_t j = 0; j < S; ++j)
              acc += int32_t(probs[j]) * qkv[2][(b * S + j) * H + n * hs + c];
            y->data<int8_t>()[b * S * H + orderOffset(orderOut_, i, n * hs + c, S, H)] =
                saturate(contextScale * static_cast<float>(acc));
          }
        }
    return Status();
  }

 private:
  int64_t heads_, orderIn_, orderW_, orderOut_;
  std::vector<int64_t> sizes_;
};

// Y = alpha * scaleA * scaleB * op(A) op(B) + beta * C, then the activation; Y of type `dtype`.
// float8 tensors are not among deepwire's element types, so float8 operands and outputs are
// refused by name.
class GemmFloat8 : public Kernel {
 public:
  explicit GemmFloat8(const KernelInit& init)
      : transA_(init.attrs.getInt("transA", 0) != 0),
        transB_(init.attrs.getInt("transB", 0) != 0),
        alpha_(init.attrs.getFloat("alpha", 1.0f)),
        beta_(init.attrs.getFloat("beta", 0.0f)),
        dtypeCode_(init.attrs.getInt("dtype", 1)),
        activation_(init.attrs.getString("activation", "NONE")) {
    out_ = dtypeFromOnnx(static_cast<int32_t>(dtypeCode_));
    if (!floatLike(out_))
      fail("GemmFloat8's dtype " + std::to_string(dtypeCode_) +
           " is not float (1), float16 (10) or bfloat16 (16); deepwire has no float8 tensors");
    if (activation_ != "NONE" && activation_ != "RELU" && activation_ != "GELU" &&
        !activation_.empty())
      fail("GemmFloat8's activation must be NONE, RELU or GELU, got '" + activation_ + "'");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor &A = ctx.input(0), &B = ctx.input(1);
    if (!floatLike(A.dtype()) || !floatLike(B.dtype()))
      return Status::error(
          "A and B must be float, float16 or bfloat16 (deepwire has no float8 "
          "tensors), got " +
          std::string(dtypeName(A.dtype())) + " and " + dtypeName(B.dtype()));
    if (A.rank() != 2 || B.rank() != 2) return Status::error("A and B must be 2-D");
    const int64_t M = transA_ ? A.dim(1) : A.dim(0), K = transA_ ? A.dim(0) : A.dim(1);
    const int64_t K2 = transB_ ? B.dim(1) : B.dim(0), N = transB_ ? B.dim(0) : B.dim(1);
    if (K != K2)
      return Status::error("op(A) is " + std::to_string(M) + " x " + std::to_string(K) +
                           " but op(B) has " + std::to_string(K2) + " rows");
    float scale = alpha_;
    for (size_t i : {3, 4})
      if (ctx.hasInput(i)) {
        auto v = scalarOf(ctx, i, i == 3 ? "scaleA" : "scaleB");
        if (!v) return v.status();
        scale *= *v;
      }
    const Tensor* C = ctx.hasInput(2) ? &ctx.input(2) : nullptr;
    std::vector<int64_t> cStrides;
    if (C) {
      if (!floatLike(C->dtype())) return Status::error("C must be float, float16 or bfloat16");
      DW_RETURN_IF_ERROR(broadcastsTo(C->shape(), {M, N}, "C"));
      cStrides = broadcastStrides(C->shape(), {M, N});
    }
    // float, float16 and bfloat16 operands as float32, then one sgemm.
    auto asFloat = [](const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(t.size()));
      for (int64_t i = 0; i < t.size(); ++i) v[i] = loadFloat(t, i);
      return v;
    };
    const std::vector<float> a = asFloat(A), bm = asFloat(B);
    std::vector<float> product(static_cast<size_t>(M * N));
    gemmF32(transA_, transB_, M, N, K, a.data(), A.dim(1), bm.data(), B.dim(1), product.data(), N);
    DW_ALLOC(y, ctx.output(0, out_, {M, N}));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double v = static_cast<double>(scale) * product[i * N + j];
        if (C) v += beta_ * loadFloat(*C, i * cStrides[0] + j * cStrides[1]);
        if (activation_ == "RELU") v = std::max(v, 0.0);
        // cuBLASLt's GELU epilogue is the tanh form.
        if (activation_ == "GELU")
          v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        storeFloat(*y, i * N + j, static_cast<float>(v));
      }
    return Status();
  }

 private:
  bool transA_, transB_;
  float alpha_, beta_;
  int64_t dtypeCode_;
  std::string activation_;
  DType out_ = DType::kFloat;
};

}  // namespace

void addOrderedQuantKernels(KernelRegistry& r) {
  const std::string ms = dw::kMicrosoftDomain;
  const char* h = kReferenceTable;
  r.add(h, "QuantizeWithOrder", 1, kMaxOpset, &makeKernel<QuantizeWithOrder>, false, ms);
  r.add(h, "DequantizeWithOrder", 1, kMaxOpset, &makeKernel<DequantizeWithOrder>, false, ms);
  r.add(h, "QOrderedMatMul", 1, kMaxOpset, &makeKernel<QOrderedMatMul>, false, ms);
  r.add(h, "QOrderedGelu", 1, kMaxOpset, &makeKernel<QOrderedGelu>, false, ms);
  r.add(h, "QOrderedLayerNormalization", 1, kMaxOpset, &makeKernel<QOrderedLayerNorm>, false, ms);
  r.add(h, "QOrderedAttention", 1, kMaxOpset, &makeKernel<QOrderedAttention>, false, ms);
  r.add(h, "GemmFloat8", 1, kMaxOpset, &makeKernel<GemmFloat8>, false, ms);
}

}  // namespace dw::engine
