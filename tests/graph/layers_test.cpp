// Every Keras-style layer lowers to ONNX that passes the full checker, for a representative input
// (the cases live in layer_cases.h, shared with the per-layer gradient check).
#include <gtest/gtest.h>

#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/tensor_data.h"
#include "layer_cases.h"
#include "nodes/type_syntax.h"
#include "test_util.h"

namespace dw {
namespace {

using Case = test::LayerCase;

std::vector<Case> cases() {
  return test::layerCases();
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.layer;
}

class LayerExport : public ::testing::TestWithParam<Case> {};

TEST_P(LayerExport, PassesFullChecker) {
  const Case& c = GetParam();
  Graph g;
  auto built = test::buildLayerGraph(c, &g);
  ASSERT_TRUE(built.ok()) << built.message();
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();
  if (!c.expectOutput.empty()) {
    EXPECT_EQ(formatType(m->graph().output(0).type()), c.expectOutput);
  }
  // Weights are deterministic: a second export is byte-identical.
  auto again = exportOnnx(g);
  ASSERT_EQ(m->graph().initializer_size(), again->graph().initializer_size());
  for (int i = 0; i < m->graph().initializer_size(); ++i)
    EXPECT_TRUE(sameTensor(m->graph().initializer(i), again->graph().initializer(i)));
}

// The same layers in a graph that imports another ai.onnx opset (an imported model that the
// user adds layers to): the lowering writes each op as that opset defines it (Squeeze's axes
// became an input at 13, the Reduce ops' at 18; Split needs num_outputs or split from 18).
TEST_P(LayerExport, PassesFullCheckerAtOtherOpsets) {
  const Case& c = GetParam();
  for (int opset : {11, 12, 13, 14, 15, 16, 18, 21}) {
    Graph g;
    ModelInfo info = g.info();
    info.opsets[kOnnxDomain] = opset;
    g.setInfo(info);
    auto built = test::buildLayerGraph(c, &g);
    ASSERT_TRUE(built.ok()) << built.message();
    auto m = exportOnnx(g);
    ASSERT_TRUE(m.ok()) << "opset " << opset << ": " << m.message();
  }
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.layer + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerExport, ::testing::ValuesIn(cases()), caseName);

TEST(Layers, EveryLayerHasACase) {
  std::set<std::string> covered;
  for (const auto& c : cases()) covered.insert(c.layer);
  for (const auto* s : Catalogue::instance().all())
    if (s->domain == kLayersDomain && s->kind == NodeKind::Layer) {  // not Output Predict/Train
      EXPECT_TRUE(covered.count(s->type)) << s->type << " has no export case";
      EXPECT_NE(s->lower, nullptr) << s->type;
    }
}

TEST(Layers, SubstractIsAcceptedAsSubtract) {
  Graph g;
  auto n = g.addNode(kLayersDomain, "Substract");
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_EQ(g.spec(*n)->type, "Subtract");
}

TEST(Layers, ShapeErrorsNameTheLayer) {
  Graph g;
  NodeId in = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(in, "type", Param::makeString("float[2,5]")).ok());
  NodeId conv = *g.addNode(kLayersDomain, "Conv2D");
  ASSERT_TRUE(g.rename(conv, "c1").ok());
  ASSERT_TRUE(g.addLink({{in, 0}, {conv, 0}}).ok());
  NodeId out = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.addLink({{conv, 0}, {out, 0}}).ok());
  auto m = exportOnnx(g);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("Conv2D 'c1'"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("rank-4"), std::string::npos) << m.message();
}

TEST(Layers, OrthogonalFillIsOrthonormal) {
  FillSpec f;
  f.fill = "orthogonal";
  f.seed = 3;
  auto t = makeFilledTensor("r", onnx::TensorProto::FLOAT, {12, 3}, f);
  ASSERT_TRUE(t.ok());
  const auto* v = reinterpret_cast<const float*>(t->raw_data().data());
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double dot = 0;
      for (int r = 0; r < 12; ++r) dot += double(v[r * 3 + a]) * v[r * 3 + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5);
    }
}

}  // namespace
}  // namespace dw
