// Lowering a Graph to an ONNX ModelProto, and the checks every export passes.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <string_view>

#include "graphs/graph.h"

namespace dw {

// The metadata_props key under which deepwire keeps what ONNX has no field for: node ids,
// positions, names, lda coeff, initializer status and regularizers, Graphs links.
inline constexpr const char* kLayoutMetadataKey = "deepwire.graph";
// An Output Train node N's loss is the output "N" + kLossSuffix; its operators are named under it
// ("N_loss/SoftmaxCrossEntropyLoss_0").
inline constexpr std::string_view kLossSuffix = "_loss";
// The metadata_props key of an export with losses: JSON {"losses": [output names], "metrics":
// [{"name", "type", "value": output, "stats": [outputs]}], "targets": [input names],
// "predictions": [output names]}.
inline constexpr const char* kTrainingMetadataKey = "deepwire.training";

enum class CheckLevel {
  None,
  Basic,  // onnx::checker::check_model
  Full,   // check_model + strict shape inference with type checks (Python's full_check=True)
};

struct ExportOptions {
  std::string model;  // which model of the canvas; "" = the default model
  CheckLevel check = CheckLevel::Full;
  bool inferShapes = true;  // keep inferred value_info in the result
  // false: a clean inference model. Output Train nodes write their prediction only; loss and
  // metric nodes, and whatever feeds only them or Output Train's target (target inputs), are
  // left out (kept in the layout metadata, so an import restores the project).
  // true: each Output Train also computes its loss into the scalar output "<name>_loss" (its
  // target inputs stay graph inputs); a loss node whose output feeds nothing is a loss output
  // too; each metric node outputs its value and its additive statistics "<metric>/stat<k>".
  // kTrainingMetadataKey lists them all.
  bool withLosses = false;
};

// Lowers `graph` to ONNX. Fails, naming the node, if the graph has problems or the checker
// refuses the result.
Result<onnx::ModelProto> exportOnnx(const Graph& graph, const ExportOptions& options = {});

// Lowers `model` of the canvas with its losses and metrics, as training does, unchecked: what
// an inference export leaves out (Output Train's loss, loss and metric nodes) gets its own
// checks, such as a target whose shape does not fit the loss. OK where nothing is wrong.
Status checkTrainingLowering(const Graph& graph, const std::string& model = "");

// The finalize part of metric `metric` of a model exported with losses, as a model of its own:
// inputs are the metric's statistics (the "stats" outputs), the output is its value. An Eval Step
// sums each statistic over the batches of an epoch (zeroing the sums resets the metric) and runs
// this model on the sums to get the epoch's value, exactly as Keras' stateful metrics do.
Result<onnx::ModelProto> metricFinalizeModel(const onnx::ModelProto& trainingModel,
                                             const std::string& metric);

// onnx::checker::check_model plus shape inference with type checks in strict mode: the same as
// Python's onnx.checker.check_model(model, full_check=True).
Status checkOnnxModel(const onnx::ModelProto& model, CheckLevel level = CheckLevel::Full);

}  // namespace dw
