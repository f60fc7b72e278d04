// Inlining a function body (a model-local function, a schema's function, a com.microsoft op's
// expansion) in place of the node that calls it: the planner does it before planning, autodiff
// before differentiating.
#pragma once

#include <onnx/onnx_pb.h>

#include <vector>

#include "engine/kernel.h"
#include "nodes/status.h"

namespace dw::engine {

// The body's nodes for `node`: formal parameters map to the node's actual values (a formal
// input the node leaves out to ""), internal values get names unique to `uid`, and attribute
// references take the node's values (`attrs`).
Status inlineFunction(const onnx::NodeProto& node, const onnx::FunctionProto& fn,
                      const Attributes& attrs, int uid, std::vector<onnx::NodeProto>& out);

// `model` with every call of a model-local function replaced by the function's body (nested
// calls too, and in subgraphs), and the functions dropped: a graph of standard ops, which the
// catalogue can import. A function that imports another version of a domain than the model is
// refused (its body would mean something else there), as is one that calls itself.
Result<onnx::ModelProto> inlineLocalFunctions(const onnx::ModelProto& model);

}  // namespace dw::engine
