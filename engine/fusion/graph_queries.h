// Node and value lookups the fusion passes share (attributes: engine/onnx_attrs.h).
#pragma once

#include "engine/fusion/fusion.h"

namespace dw::engine::fusion {

// Each value's readers among the nodes not removed: (node, input index).
std::unordered_map<std::string, std::vector<std::pair<size_t, int>>> readersOf(
    const PlanNodes& nodes, const std::vector<bool>& removed);
// Keeps the nodes not marked removed, in order.
void dropRemoved(PlanNodes& nodes, const std::vector<bool>& removed);
// Whether n is `op` of `domain` ("" is the default ONNX domain, however spelled).
bool isOp(const onnx::NodeProto& n, const char* domain, const char* op);
// How errors name a node: its name, or for the many models that leave names empty, its op and
// first output ("<Relu -> y>"), which is what a user can find in the file.
std::string displayName(const onnx::NodeProto& n);
// A value's dims as text, symbolic ones by name ("?N"): equal lists mean equal shapes, also
// for a dynamic batch. Empty where a dim is neither known nor named, or the value's type is.
std::vector<std::string> shapeOf(const ValueTypes& types, const std::string& v);
// A value's dims where all are statically known, else empty.
std::vector<int64_t> staticDims(const ValueTypes& types, const std::string& v);

}  // namespace dw::engine::fusion
