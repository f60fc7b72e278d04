// Values a session can compute once, when it is created, instead of on every run.
#pragma once

#include <optional>

namespace onnx {
class ModelProto;
class GraphProto;
}  // namespace onnx

namespace dw::engine {

// The model with its top-level graph's plan-time values turned into initializers: Constant
// nodes, Shape and Size of tensors whose shapes `inferred` (the model after shape inference)
// knows, and the arithmetic on small constants that exporters put between them and a Reshape or
// Slice (Gather, Div, Unsqueeze, Concat...). Those nodes then cost nothing per run, and shape
// inference sees the starts, ends and shapes they compute. Nothing is folded that a feed could
// change (an initializer that is also a graph input), that is random, that is a graph output,
// or that would keep more than a few kilobytes. nullopt when nothing folds.
std::optional<onnx::ModelProto> foldConstants(const onnx::ModelProto& model,
                                              const onnx::GraphProto& inferred);

}  // namespace dw::engine
