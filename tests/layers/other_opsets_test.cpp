// Every layer case of tests/graph/layer_cases.h gives the same outputs in a graph that imports
// any ai.onnx opset from 11 to 21 as at the catalogue's default opset: layers added to an
// imported model must lower to ops spelled as its opset defines them (Squeeze's axes became an
// input at 13, the Reduce ops' at 18; batch-first RNNs and LayerNormalization came at 14 and 17),
// and mean the same. torch.onnx exported opset 11 to 14 by default for years.
#include <gtest/gtest.h>

#include <cmath>

#include "../graph/layer_cases.h"
#include "engine/session.h"
#include "graphs/onnx_export.h"

namespace dw {
namespace {

// A deterministic input of a case's type ("float[2,3,8,8]", "int64[2,5]"): small integers
// for integer types (valid indices for an Embedding), a varied pattern for floats.
engine::Tensor patternInput(const std::string& type) {
  const size_t open = type.find('[');
  const std::string dt = type.substr(0, open);
  engine::Shape shape;
  for (size_t p = open + 1; p < type.size() && type[p] != ']';) {
    const size_t end = type.find_first_of(",]", p);
    shape.push_back(std::stoll(type.substr(p, end - p)));
    p = type[end] == ',' ? end + 1 : end;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (dt == "int64") {
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = i % 3;
    return engine::Tensor::fromVector(v, shape);
  }
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * i) * 1.5);
  return engine::Tensor::fromVector(v, shape);
}

Result<std::map<std::string, engine::Tensor>> runAt(const test::LayerCase& c, int opset) {
  Graph g;
  if (opset) {
    ModelInfo info = g.info();
    info.opsets[kOnnxDomain] = opset;
    g.setInfo(info);
  }
  DW_RETURN_IF_ERROR(test::buildLayerGraph(c, &g));
  auto m = exportOnnx(g);
  if (!m.ok()) return m.status();
  auto session = engine::InferenceSession::create(*m);
  if (!session.ok()) return session.status();
  std::map<std::string, engine::Tensor> feeds;
  for (int i = 0; i < m->graph().input_size(); ++i)
    feeds[m->graph().input(i).name()] = patternInput(c.inputs[i]);
  return (*session)->run(feeds);
}

class OtherOpsets : public ::testing::TestWithParam<test::LayerCase> {};

TEST_P(OtherOpsets, SameOutputsAsTheDefaultOpset) {
  const test::LayerCase& c = GetParam();
  auto base = runAt(c, 0);
  ASSERT_TRUE(base.ok()) << base.message();
  for (int opset : {11, 12, 13, 14, 15, 16, 18, 21}) {
    auto got = runAt(c, opset);
    ASSERT_TRUE(got.ok()) << "opset " << opset << ": " << got.message();
    ASSERT_EQ(got->size(), base->size());
    for (const auto& [name, want] : *base) {
      ASSERT_TRUE(got->count(name)) << name;
      const engine::Tensor& t = got->at(name);
      ASSERT_EQ(t.shape(), want.shape()) << name;
      if (t.dtype() != engine::DType::kFloat) continue;
      for (int64_t i = 0; i < t.size(); ++i)
        ASSERT_NEAR(t.data<float>()[i], want.data<float>()[i],
                    1e-5 + 1e-5 * std::abs(want.data<float>()[i]))
            << "opset " << opset << ", " << name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayers, OtherOpsets, ::testing::ValuesIn(test::layerCases()),
                         [](const ::testing::TestParamInfo<test::LayerCase>& info) {
                           return info.param.layer + "_" + std::to_string(info.index);
                         });

}  // namespace
}  // namespace dw
