// Importing an ONNX model into a Graph: nodes, inputs, outputs and initializers become editor
// nodes, subgraph attributes are kept intact, and the layout deepwire stored in metadata_props is
// restored (or a layered auto-layout is computed when there is none).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "graphs/graph.h"

namespace dw {

// `source` names the origin in messages (a path, or "<model>").
Result<Graph> importOnnx(const onnx::ModelProto& model, const std::string& source = "<model>");

// Layered left-to-right layout: a column per depth, inputs and initializers before their users.
void autoLayout(Graph& graph);

}  // namespace dw
