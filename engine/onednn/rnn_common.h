// Internal to engine/onednn: what the recurrent forward kernels (rnn.cpp) and their backward
// kernel (rnn_grad.cpp) share, so the two read ONNX's attributes, check its input shapes and
// convert its gate order and weight layout to oneDNN's in one place.
#pragma once

#include <onnx/onnx_pb.h>

#include <dnnl.hpp>
#include <string>
#include <vector>

#include "engine/kernel.h"
#include "engine/unary_op.h"

namespace dw::engine::rnn {

enum class Cell { kRnn, kGru, kLstm };

// One activation function of the cell (a row of ops/unary_table.h marked rnnActivation) with
// its constants.
struct Act {
  Act();  // tanh
  explicit Act(const UnaryInstance& u);
  ops::UnaryFn fn() const { return u_.fn; }
  // In place, through a loop compiled for this function (a step calls it on a few short
  // vectors, so the per-call dispatch matters).
  void apply(float* v, int64_t n) const { apply_(v, n, u_.params); }
  // d act / d x at pre-activation x with y = act(x).
  float derivative(float x, float y) const { return derivative_(x, y, u_.params); }

 private:
  UnaryInstance u_;
  float (*derivative_)(float, float, const ops::UnaryParams&) = nullptr;
  void (*apply_)(float*, int64_t, const ops::UnaryParams&) = nullptr;
};

// The attributes of an ONNX RNN/GRU/LSTM node (members named as the kernels use them).
struct RnnAttrs {
  Cell cell_ = Cell::kRnn;
  int64_t gates_ = 1, hidden_ = 0, dirs_ = 1, layout_ = 0;
  std::string direction_;
  float clip_ = 0;
  bool hasClip_ = false, inputForget_ = false, lbr_ = false, customActs_ = false,
       defaultActs_ = true;
  std::vector<Act> acts_;  // per direction: LSTM f, g, h; GRU f, g; RNN f

  // Reads the attributes of op `opType` ("RNN", "GRU" or "LSTM"); an error says which one is
  // unsupported. `node` is the node the attributes came from (nullptr when unknown).
  Status parse(const std::string& opType, const Attributes& a, const onnx::NodeProto* node);
  int64_t actsPerDir() const { return cell_ == Cell::kLstm ? 3 : (cell_ == Cell::kGru ? 2 : 1); }
  // Whether oneDNN's cells compute this configuration (the caller handles layout).
  bool oneDnnCells() const { return defaultActs_ && !hasClip_ && !inputForget_; }
  dnnl::rnn_direction oneDnnDirection() const;
  dnnl::algorithm vanillaActivation() const;  // RNN only
};

// Sizes of one call, checked against the inputs X, W, R, B, sequence_lens, initial_h,
// initial_c, P of `ctx` (input indices as in ONNX).
struct RnnDims {
  int64_t T = 0, B = 0, I = 0, H = 0;
  std::vector<int64_t> lens;  // per batch entry
  bool fullLens = true;
};
Status checkInputs(const KernelContext& ctx, const RnnAttrs& a, RnnDims* d);

// ONNX weights in oneDNN's gate order, each buffer in the user layouts the kernels declare:
// weights ldgoi {1, D, in, G, H} (ONNX's [D][gate][H][in] with gates permuted), bias ldgo
// {1, D, biasGates, H} (W and R biases summed; lbr GRU keeps R's h-gate bias as a 4th gate),
// peepholes ldgo {1, D, 3, H}. B and P may be null (zeros).
struct OneDnnWeights {
  std::vector<float> layer, iter, bias, peep;
};
int64_t oneDnnBiasGates(const RnnAttrs& a);
void toOneDnnWeights(const RnnAttrs& a, int64_t D, int64_t H, int64_t I, const float* W,
                     const float* R, const float* Bias, const float* P, OneDnnWeights* out);
// The inverse for gradients: oneDNN's diff buffers (same layouts) into ONNX's dW, dR, dB, dP;
// null outputs are skipped.
void fromOneDnnWeights(const RnnAttrs& a, int64_t D, int64_t H, int64_t I, const OneDnnWeights& g,
                       float* dW, float* dR, float* dB, float* dP);

// out[b][j] = sum_k h[b][k] * rt[k][j] for b < B, j < N, k < K: the recurrent product of a
// small batch against the transposed weights (rt row stride ldr, out row stride ldo), on one
// thread, with AVX-512 where the CPU has it (8 rows by 32 columns of sums in registers). At batch
// 1 a step's product is a few microseconds, less than sgemm's dispatch.
void smallGemm(int64_t B, int64_t N, int64_t K, const float* h, int64_t ldh, const float* rt,
               int64_t ldr, float* out, int64_t ldo);

// Row-major C = op(A) op(B) + beta C (sgemm; nothing to do for empty matrices).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Bidirectional oneDNN output concatenates directions along channels, [T][B][D*H]; ONNX's Y is
// [T][D][B][H].
void concatToOnnxY(const float* src, int64_t T, int64_t D, int64_t B, int64_t H, float* y);
void onnxYToConcat(const float* y, int64_t T, int64_t D, int64_t B, int64_t H, float* dst);

}  // namespace dw::engine::rnn
