// Graph rewrites the session runs on a plan's nodes before it builds their kernels: fused oneDNN
// primitives (a convolution or matrix product absorbing the normalization, bias, activation and
// pooling after it), the NHWC hand-over of inference convolution chains, and the training CNN
// block's fusions and blocked layouts. Each pass keeps the graph's values and results: only
// values a single reader consumes disappear, and a Fused record (fused.h; and appended
// inputs) tell the kernels what they absorbed.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dw::engine {

// A node's opset per domain, as the plan keeps it.
using OpsetMap = std::map<std::string, int>;

namespace fusion {

using PlanNodes = std::vector<std::pair<onnx::NodeProto, OpsetMap>>;
using ValueTypes = std::unordered_map<std::string, onnx::TypeProto>;

// onednn_fusion.cpp. epiloguesOnly: Conv, Gemm and MatMul absorb only what a kernel applies
// to their output as it is written (a bias, a BatchNormalization, an activation): no pooling
// or residual connection.
void fuseForOneDnn(PlanNodes& nodes, const onnx::GraphProto& g, const ValueTypes& types,
                   bool epiloguesOnly = false);
// matmul_grads.cpp (training graphs, before fuseForOneDnn): a Relu's gradient reads the Relu's
// output, so that the product before it can absorb it, and with biasGradients (the cuda
// kernels), a Linear layer's bias gradient becomes a second output of its weight gradient's
// Gemm (Fused::biasGradOf).
void fuseMatMulGradients(PlanNodes& nodes, const ValueTypes& types, bool biasGradients);
// nhwc_chains.cpp. convChains: a 1x1, a depthwise and an optional 1x1 convolution in a row
// become one node (Fused::chain) where the chain's output is NHWC.
void markNhwcChains(PlanNodes& nodes, const onnx::GraphProto& g, const ValueTypes& types,
                    bool convChains = false);
// conv_chains.cpp, for markNhwcChains: the chains (node indices, in order) whose input, output
// and intermediate values `nhwc` accepts, each intermediate read by the next stage alone; and
// their fusion into the first node of each. A chain that ends at its depthwise stage may end
// with a GlobalAveragePool of its output too, which the fusion takes in (Fused::meanOutput).
std::vector<std::vector<size_t>> findConvChains(
    const PlanNodes& nodes, const ValueTypes& types,
    const std::function<bool(const std::string&)>& nhwc);
void fuseConvChains(PlanNodes& nodes, const std::vector<std::vector<size_t>>& chains);
// training_chains.cpp. blockedLayouts: hand the block's tensors over in oneDNN's nChw16c;
// convIntoBatchNorm: a one-channel Conv moves into the normalization (both cpu only). Without
// either, the Relu and max pooling fusions alone, which the cuda kernels take too.
void fuseTrainingChains(PlanNodes& nodes, const onnx::GraphProto& g, const ValueTypes& types,
                        bool blockedLayouts, bool convIntoBatchNorm = true);

}  // namespace fusion
}  // namespace dw::engine
