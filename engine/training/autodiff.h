// Reverse-mode autodiff on ONNX graphs: gradient builders append backward nodes to a copy of the
// forward model, so the training graph is itself an ONNX model that InferenceSession runs and
// onnx::checker accepts.
//
// Contract (see /work/notes/training_api.md):
// - inputs of the result: the forward model's data inputs, then every `trainable` initializer
//   (moved to a graph input), then, in training mode, every BatchNormalization running statistic;
// - outputs: the losses, then "<w>_grad" per trainable w (same order), then "<stat>_new" per
//   updated running statistic;
// - gradients from several consumers are summed; a node's lda coeff multiplies the gradients it
//   sends to its inputs; only nodes on a path from a trainable weight to a loss get backward nodes;
// - an op on such a path without a gradient builder is an error naming the node and the op.
//
// Backward ops standard ONNX lacks live in domain "com.deepwire.grad" (kGradDomain); their
// kernels are in the *_grad.cpp and *_training.cpp files of engine/kernels/ and engine/onednn/
// (one per op family, listed in engine/kernels/tables.h), their catalogue entries (and ONNX
// schemas) in nodes/grad_domain.cpp.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nodes/catalogue.h"
#include "nodes/status.h"

namespace dw::engine::training {

using dw::kGradDomain;  // the one definition is the catalogue's (nodes/catalogue.h)

struct GradientGraphOptions {
  std::vector<std::string> losses;     // scalar graph outputs to minimise (summed)
  std::vector<std::string> trainable;  // initializer names that get gradients
  // ONNX node name -> coefficient on the grads to all its inputs; or ldaInputKey(node, input)
  // -> on the grad to that input alone (a layer's entries: the inputs it takes from outside).
  std::map<std::string, double> ldaCoeff;
  bool training = true;  // BatchNormalization uses batch statistics, Dropout is active
  // Forward outputs to keep after the losses (a training step's metrics: what the studio plots
  // per step costs a few ops, not a second forward pass). Names that are not outputs are skipped.
  std::vector<std::string> keepOutputs;
};

struct GradientGraph {
  onnx::ModelProto model;
  std::vector<std::string> gradOutputs;                           // "<w>_grad", as trainable
  std::vector<std::pair<std::string, std::string>> stateUpdates;  // (stat input, new output)
};

Result<GradientGraph> buildGradientGraph(const onnx::ModelProto& forward,
                                         const GradientGraphOptions& opt);

// The lda coeff of every node of a model exported by graphs/onnx_export (metadata_props
// "deepwire.graph"), keyed by ONNX node name; coefficients equal to 1 are left out. A layer's
// coefficient goes to the layer's nodes whose outputs leave the layer, which scales everything
// the layer sends upstream exactly once.
Result<std::map<std::string, double>> ldaCoeffFromModel(const onnx::ModelProto& model);
// The ldaCoeff key of one input of a node.
inline std::string ldaInputKey(const std::string& node, const std::string& input) {
  return node + '\x1f' + input;
}

// ONNX `Gradient` (ai.onnx.preview.training): true when the model holds such a node, and the
// model with each one replaced by the backward nodes computing its outputs.
bool hasGradientOps(const onnx::ModelProto& model);
Result<onnx::ModelProto> expandGradientOps(const onnx::ModelProto& model);

// Ops that have a gradient builder for `opset` of the default domain (for tests and docs).
std::vector<std::string> differentiableOps(int opset);
// Whether op (`domain` "" for the default one) at `opset` has a gradient builder.
bool hasGradient(const std::string& domain, const std::string& op, int opset);

}  // namespace dw::engine::training
