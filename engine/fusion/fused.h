// What a fusion pass folded into a node, for the node's kernel: the passes (fusion/*.cpp) write
// it and the kernels read it through this struct alone. On the node it travels as private
// attributes, whose names live in fused.cpp and nowhere else.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "engine/unary_op.h"
#include "ops/unary.h"

namespace dw::engine {

class Attributes;

namespace fusion {

struct Window {
  std::vector<int64_t> kernel, strides, pads, dilations;
};

// A convolution run after the node's own one inside the same kernel (Fused::chain): a 1x1
// (group 1, stride 1, no padding) or a depthwise one (a group per channel). Its weights, bias
// and folded BatchNormalization's four inputs are the node's inputs Fused::chainInput(stage, k).
struct ChainStage {
  // Strides and pads (top, left, bottom, right); no dilation. The window's size is the
  // weights'.
  Window window;
  int64_t group = 1;
  std::string activation;  // as Fused::activation
  ops::UnaryParams activationParams;
  std::string activationChoice;
  std::optional<float> bnEpsilon;
  bool hasBias = false;
};

struct Fused {
  // An activation applied to the node's output: a row of ops/unary_table.h ("Relu", "Swish"...)
  // with its parameters; empty: none. On Conv/Gemm/MatMul (inference) and
  // BatchNormalizationTraining (training chains).
  std::string activation;
  ops::UnaryParams activationParams;
  // The value of the row's choice attribute (Gelu's approximate); empty: the row's own function.
  std::string activationChoice;
  // A BatchNormalization folded into the Conv before it (its four inputs appended).
  std::optional<float> bnEpsilon;
  // An Add of a tensor of the output's shape and layout (a residual connection), absorbed into a
  // Conv as its input kResidualInput: y = conv(x) [+ folded BN] + residual, then the
  // activation. On the CPU's Conv (inference) only.
  bool residual = false;
  static constexpr int kResidualInput = 7;
  // A MaxPool absorbed after the node (kernel, strides, pads; empty kernel: none). The node
  // then also writes the pool's winners.
  Window maxPool;
  // The Conv whose backward a BatchNormalizationGrad computes too (FusedConv): its display
  // name and window; empty: none.
  std::string conv;
  Window convWindow;
  // PoolGrad: the ReLU before the pool is folded in (dY is zero where the ReLU clipped).
  bool reluGrad = false;
  // Gemm (training, cuda): a second output holds the bias gradient, the sum over the product's
  // k of its dY operand: 0, A (transA, dY is k x m), or 1, B (dY is k x n); -1: none.
  int biasGradOf = -1;
  // Convolutions that follow the node's own one, their intermediate results never written out
  // (an inverted-residual block's expand -> depthwise -> project; fusion/conv_chains.cpp). The
  // node's output and its residual are the last stage's; its activation and BatchNormalization
  // stay its own convolution's.
  std::vector<ChainStage> chain;
  // Output 1 holds the per-channel mean of output 0 over its planes ([N, C, 1, 1]): the
  // GlobalAveragePool of squeeze-excitation, taken while the chain writes output 0.
  bool meanOutput = false;
  static constexpr int kChainInput = 8, kChainInputs = 6;  // W, B, scale, B, mean, var
  static int chainInput(size_t stage, int k) {
    return kChainInput + static_cast<int>(stage) * kChainInputs + k;
  }
  // Inputs and outputs (by index) that hold oneDNN's blocked nChw16c layout, and those in
  // NHWC, instead of plain NCHW.
  std::vector<int64_t> blockedInputs, blockedOutputs, nhwcInputs, nhwcOutputs;

  bool hasMaxPool() const { return !maxPool.kernel.empty(); }
  static bool listed(const std::vector<int64_t>& v, int64_t i);
};

// A max pooling fused into a BatchNormalizationTraining and its gradient writes, per pooled
// value, its window's winner: the first maximum's row-major position in the window (padding
// counted), or kNoWinner where the window passes no gradient (no element inside, or a fused
// Relu blocks it: the window's maximum is not positive). Windows have fewer than kNoWinner
// elements.
constexpr uint8_t kNoWinner = 255;
// The fused pooling's 2-D window over X (N x C x H x W) and its output size, explicit pads
// (top, left, bottom, right), no dilation; an error where the fusion does not apply.
struct MaxPoolGeometry {
  int64_t h = 0, w = 0, oh = 0, ow = 0, kh = 0, kw = 0, sh = 1, sw = 1;
  int64_t ph = 0, pw = 0, pb = 0, pr = 0;
};
Result<MaxPoolGeometry> fusedMaxPool(const Window& win, const Shape& x);

Fused fusedOf(const Attributes& attrs);  // kernels: KernelInit::attrs
// The fused activation as the kernels apply it (op null: none); an error names an activation
// that is no row of ops/unary_table.h or a choice its row lacks.
Result<UnaryInstance> activationOf(const Fused& f);
Result<UnaryInstance> activationOf(const ChainStage& s);
Fused fusedOf(const onnx::NodeProto& node);

// Writers, for the passes. Lists append; the rest set.
void setActivation(onnx::NodeProto& n, const std::string& op, const ops::UnaryParams& params,
                   const std::string& choice = "");
void setBnEpsilon(onnx::NodeProto& n, float epsilon);
void setResidual(onnx::NodeProto& n, const std::string& value);  // also appends the input
void setMaxPool(onnx::NodeProto& n, const Window& w);
void setConv(onnx::NodeProto& n, const std::string& name, const Window& w);
void setReluGrad(onnx::NodeProto& n);
void setBiasGrad(onnx::NodeProto& n, int operand);
// Appends a stage to the node's chain, and its inputs (W, B, then the normalization's four, any
// of them "" where absent) at Fused::chainInput.
void appendChainStage(onnx::NodeProto& n, const ChainStage& stage,
                      const std::vector<std::string>& inputs);
enum class Layout { kBlocked, kNhwc };
void clearOutputMarks(onnx::NodeProto& n);
void setMeanOutput(onnx::NodeProto& n, const std::string& value);  // adds output 1
void markInput(onnx::NodeProto& n, Layout layout, int64_t index);
void markOutput(onnx::NodeProto& n, Layout layout, int64_t index);

}  // namespace fusion
}  // namespace dw::engine
