// The utility nodes that compute something (Constant, Generator, the ranked Initializers) run
// in the engine and produce what their parameters say. (Their catalogue entries and ONNX export
// are checked in tests/graph/utility_nodes_test.cpp.)
#include <gtest/gtest.h>

#include <set>

#include "engine/session.h"
#include "graphs/onnx_export.h"

namespace dw {
namespace {

// Runs `node` -> Output "y" with no inputs; returns y.
Result<engine::Value> runToOutput(Graph& g, NodeId node) {
  NodeId out = *g.addNode(kGraphDomain, "Output");
  DW_RETURN_IF_ERROR(g.rename(out, "y"));
  DW_RETURN_IF_ERROR(g.addLink({{node, 0}, {out, 0}}));
  auto m = exportOnnx(g);
  if (!m.ok()) return m.status();
  auto session = engine::InferenceSession::create(*m);
  if (!session.ok()) return session.status();
  auto r = (*session)->runValues({});
  if (!r.ok()) return r.status();
  return r->at("y");
}

TEST(UtilityNodesRun, ConstantFillsItsShape) {
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Constant");
  ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts({2, 3})).ok());
  ASSERT_TRUE(g.setParam(n, "value", Param::makeFloat(-2.5)).ok());
  auto y = runToOutput(g, n);
  ASSERT_TRUE(y.ok()) << y.message();
  ASSERT_TRUE(y->isTensor());
  EXPECT_EQ(y->tensor.shape(), (engine::Shape{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y->tensor.data<float>()[i], -2.5f);

  Graph gi;
  NodeId ni = *gi.addNode(kGraphDomain, "Constant");
  ASSERT_TRUE(gi.setParam(ni, "dtype", Param::makeString("int32")).ok());
  ASSERT_TRUE(gi.setParam(ni, "shape", Param::makeInts({})).ok());
  ASSERT_TRUE(gi.setParam(ni, "value", Param::makeFloat(41.6)).ok());
  auto yi = runToOutput(gi, ni);
  ASSERT_TRUE(yi.ok()) << yi.message();
  EXPECT_EQ(yi->tensor.dtype(), engine::DType::kInt32);
  EXPECT_EQ(yi->tensor.rank(), 0u);
  EXPECT_EQ(yi->tensor.data<int32_t>()[0], 42);
}

TEST(UtilityNodesRun, IntInitializerRoundsItsRandomFill) {
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "IntInitializer2D");
  ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts({4, 5})).ok());
  ASSERT_TRUE(g.setParam(n, "fill", Param::makeString("uniform")).ok());
  ASSERT_TRUE(g.setParam(n, "low", Param::makeFloat(-2)).ok());
  ASSERT_TRUE(g.setParam(n, "high", Param::makeFloat(2)).ok());
  auto y = runToOutput(g, n);
  ASSERT_TRUE(y.ok()) << y.message();
  EXPECT_EQ(y->tensor.dtype(), engine::DType::kInt64);
  EXPECT_EQ(y->tensor.shape(), (engine::Shape{4, 5}));
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 20; ++i) {
    const int64_t v = y->tensor.data<int64_t>()[i];
    EXPECT_TRUE(v >= -2 && v <= 2) << v;
    seen.insert(v);
  }
  EXPECT_GT(seen.size(), 1u);
}

TEST(UtilityNodesRun, GeneratorSequenceEmpty) {
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Generator");
  ASSERT_TRUE(g.setParam(n, "generator", Param::makeString("SequenceEmpty")).ok());
  auto y = runToOutput(g, n);
  ASSERT_TRUE(y.ok()) << y.message();
  ASSERT_TRUE(y->isSequence());
  EXPECT_TRUE(y->sequence.empty());
}

TEST(UtilityNodesRun, GeneratorRandomUniformStaysInRange) {
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Generator");
  ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts({64})).ok());
  ASSERT_TRUE(g.setParam(n, "low", Param::makeFloat(2)).ok());
  ASSERT_TRUE(g.setParam(n, "high", Param::makeFloat(3)).ok());
  auto y = runToOutput(g, n);
  ASSERT_TRUE(y.ok()) << y.message();
  ASSERT_EQ(y->tensor.shape(), (engine::Shape{64}));
  std::set<float> seen;
  for (int64_t i = 0; i < 64; ++i) {
    const float v = y->tensor.data<float>()[i];
    EXPECT_TRUE(v >= 2 && v <= 3) << v;
    seen.insert(v);
  }
  EXPECT_GT(seen.size(), 32u);
}

TEST(UtilityNodesRun, GeneratorRandomNormalHasItsShape) {
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Generator");
  ASSERT_TRUE(g.setParam(n, "generator", Param::makeString("RandomNormal")).ok());
  ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts({3, 7})).ok());
  auto y = runToOutput(g, n);
  ASSERT_TRUE(y.ok()) << y.message();
  EXPECT_EQ(y->tensor.shape(), (engine::Shape{3, 7}));
}

}  // namespace
}  // namespace dw
