// com.microsoft (ONNX Runtime's contrib operators): each op deepwire has is a function body of
// ai.onnx operators (microsoft_domain.cpp). The planner inlines it through libonnx's registry;
// autodiff asks for it here, at the training model's opset.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "nodes/status.h"

namespace dw {

// The body of com.microsoft `node` in ai.onnx operators of `onnxOpset` (17 or later; older
// models get an error saying so): its inputs and outputs are the op's formal names.
// `inputTypes` are the node's input types as far as known (FusedMatMul's transposes need the
// rank). The error names the node and why its attributes cannot be expanded.
// Whether com.microsoft `op` is a body of ai.onnx operators (false: it runs as a kernel of its
// own, and training graphs keep it as it is).
bool microsoftHasBody(const std::string& op);
// QuantizeBFP's and DequantizeBFP's bfp_type: "" for the two types with a layout (0, 1), else
// why not; shared by the catalogue's check and the kernels.
std::string bfpTypeProblem(int64_t type);
Status microsoftBody(const onnx::NodeProto& node, const std::vector<onnx::TypeProto>& inputTypes,
                     int onnxOpset, onnx::FunctionProto& body);
// The types graph `g` declares for its values (inputs, value_info, initializers), by name.
std::map<std::string, onnx::TypeProto> declaredTypes(const onnx::GraphProto& g);
// The error the planner would give when it expands com.microsoft `node` (attributes it cannot
// take, input shapes `declared` says do not fit), found by validation before any run. What only
// the types of values other nodes make decide is left to the planner.
Status checkMicrosoftNode(const onnx::NodeProto& node,
                          const std::map<std::string, onnx::TypeProto>& declared);

}  // namespace dw
