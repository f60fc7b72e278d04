// Lowering a Graph to an ONNX ModelProto, and the checks every export passes.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "graphs/graph.h"

namespace dw {

// The metadata_props key under which deepwire keeps what ONNX has no field for: node ids,
// positions, names, lda coeff, initializer status and regularizers, Graphs links.
inline constexpr const char* kLayoutMetadataKey = "deepwire.graph";

enum class CheckLevel {
  None,
  Basic,  // onnx::checker::check_model
  Full,   // check_model + strict shape inference with type checks (Python's full_check=True)
};

struct ExportOptions {
  std::string model;                   // which model of the canvas; "" = the default model
  CheckLevel check = CheckLevel::Full;
  bool inferShapes = true;             // keep inferred value_info in the result
};

// Lowers `graph` to ONNX. Fails, naming the node, if the graph has problems or the checker
// refuses the result.
Result<onnx::ModelProto> exportOnnx(const Graph& graph, const ExportOptions& options = {});

// onnx::checker::check_model plus shape inference with type checks in strict mode: the same as
// Python's onnx.checker.check_model(model, full_check=True).
Status checkOnnxModel(const onnx::ModelProto& model, CheckLevel level = CheckLevel::Full);

}  // namespace dw
