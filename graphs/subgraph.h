// Subgraph attributes (If/Loop/Scan bodies) may read values of the enclosing graph by name.
#pragma once

#include <onnx/onnx_pb.h>

#include <set>
#include <string>

#include "nodes/spec.h"

namespace dw {

// Names a graph reads but does not define (its inputs, initializers and node outputs), including
// those of nested subgraphs.
std::set<std::string> outerNames(const onnx::GraphProto& g);
// The same for a Graph or Graphs parameter (empty for other types).
std::set<std::string> outerNamesOfParam(const Param& p);

}  // namespace dw
