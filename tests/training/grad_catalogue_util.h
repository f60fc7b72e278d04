// Whether the node catalogue accepts a model the engine produced (a gradient graph, a training
// export): its com.deepwire.grad nodes pass the ONNX schemas the catalogue registers for them,
// it imports, and the imported graph validates, so every grad node's attributes, types and ports
// are ones its catalogue entry declares. Shared by the catalogue cross-check
// (grad_catalogue_test.cpp) and the per-op gradient cases (gradcheck_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "graphs/graph.h"
#include "graphs/onnx_import.h"

namespace dw::engine::training::test {

inline ::testing::AssertionResult catalogueAccepts(const onnx::ModelProto& model,
                                                   const std::string& what) {
  // The ONNX checker reads the same entries, as schemas (the forward ops of a test model need
  // not pass it: Mish is newer than opset 17, Celu takes float only).
  Catalogue::instance();
  for (const auto& n : model.graph().node()) {
    if (n.domain() != kGradDomain) continue;
    const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), 1, n.domain());
    if (!schema) return ::testing::AssertionFailure() << n.op_type() << " has no ONNX schema";
    try {
      schema->Verify(n);
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << what << ": " << e.what();
    }
  }
  // A forward op the catalogue lacks (Mish is newer than its opset 17) keeps the model from
  // importing; its grad nodes were verified above.
  std::map<std::string, int> opsets;
  for (const auto& o : model.opset_import()) opsets[canonicalDomain(o.domain())] = o.version();
  for (const auto& n : model.graph().node()) {
    const std::string dom = canonicalDomain(n.domain());
    if (!Catalogue::instance().find(dom, n.op_type(), opsets[dom]))
      return ::testing::AssertionSuccess() << n.op_type() << " is not catalogued";
  }
  auto g = importOnnx(model, what);
  if (!g.ok()) return ::testing::AssertionFailure() << g.message();
  const auto problems = g->validate();
  if (problems.empty()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure() << what << ": " << problems.size() << " problem(s)";
  for (const auto& p : problems) failure << "\n  " << p.message;
  return failure;
}

}  // namespace dw::engine::training::test
