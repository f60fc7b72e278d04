// Every Keras-style layer lowers to ONNX that passes the full checker, for a representative input.
#include <gtest/gtest.h>

#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/tensor_data.h"
#include "nodes/type_syntax.h"
#include "test_util.h"

namespace dw {
namespace {

struct Case {
  std::string layer;
  std::vector<std::string> inputs;  // input types, one per connected port
  std::map<std::string, Param> params = {};
  std::string expectOutput = "";    // the output type, when checked
};

std::vector<Case> cases() {
  const std::string img = "float[2,3,8,8]", seq = "float[2,5,4]";
  std::vector<Case> v = {
      {"Dense", {"float[2,5]"}, {{"units", Param::makeInt(7)}}, "float[2,7]"},
      {"Dense", {seq}, {{"units", Param::makeInt(6)}, {"activation", Param::makeString("gelu")}}, "float[2,5,6]"},
      {"Flatten", {img}, {}, "float[2,192]"},
      {"Reshape", {img}, {{"target_shape", Param::makeInts({3, 64})}}, "float[2,3,64]"},
      {"Permute3D", {img}, {{"dims", Param::makeInts({2, 3, 1})}}, "float[2,8,8,3]"},
      {"Dropout", {img}}, {"SpatialDropout", {img}}, {"AlphaDropout", {img}}, {"GaussianDropout", {img}},
      {"GaussianNoise", {img}},
      {"Embedding", {"int64[2,5]"}, {{"input_dim", Param::makeInt(10)}, {"output_dim", Param::makeInt(4)}}, "float[2,5,4]"},
      {"Sigmoid", {img}}, {"TanH", {img}}, {"SELU", {img}}, {"SoftPlus", {img}}, {"SoftSign", {img}},
      {"Swish", {img}}, {"GELU", {img}}, {"Exponential", {img}}, {"HardSigmoid", {img}}, {"Linear", {img}},
      {"ReLU", {img}}, {"ReLU", {img}, {{"max_value", Param::makeFloat(6)}}},
      {"ReLU", {img}, {{"threshold", Param::makeFloat(0.5)}}},
      {"LeakyReLU", {img}}, {"ELU", {img}}, {"ThresholdedReLU", {img}}, {"PReLU", {img}, {}, "float[2,3,8,8]"},
      {"SoftMax", {img}},
      {"Conv1D", {"float[2,3,16]"}, {{"filters", Param::makeInt(4)}}, "float[2,4,14]"},
      {"Conv2D", {img}, {{"filters", Param::makeInt(4)}, {"padding", Param::makeString("same")}}, "float[2,4,8,8]"},
      {"Conv2D", {img}, {{"filters", Param::makeInt(6)}, {"groups", Param::makeInt(3)}, {"strides", Param::makeInts({2})}}, "float[2,6,3,3]"},
      {"Conv3D", {"float[2,3,4,6,6]"}, {{"filters", Param::makeInt(2)}}, "float[2,2,2,4,4]"},
      {"Conv1DTranspose", {"float[2,3,5]"}, {{"filters", Param::makeInt(2)}, {"strides", Param::makeInts({2})}}, "float[2,2,11]"},
      {"Conv2DTranspose", {img}, {{"filters", Param::makeInt(2)}, {"strides", Param::makeInts({2})}, {"padding", Param::makeString("same")}}, "float[2,2,16,16]"},
      {"Conv2DTranspose", {img}, {{"filters", Param::makeInt(2)}, {"kernel_size", Param::makeInts({1})}, {"strides", Param::makeInts({2})}}, "float[2,2,16,16]"},
      {"Conv3DTranspose", {"float[2,3,2,3,3]"}, {{"filters", Param::makeInt(2)}}, "float[2,2,4,5,5]"},
      {"DepthwiseConv2D", {img}, {{"depth_multiplier", Param::makeInt(2)}}, "float[2,6,6,6]"},
      {"SeparableConv1D", {"float[2,3,16]"}, {{"filters", Param::makeInt(5)}}, "float[2,5,14]"},
      {"SeparableConv2D", {img}, {{"filters", Param::makeInt(5)}, {"padding", Param::makeString("same")}}, "float[2,5,8,8]"},
      {"MaxPool1D", {"float[2,3,16]"}, {}, "float[2,3,8]"},
      {"MaxPool2D", {img}, {}, "float[2,3,4,4]"},
      {"MaxPool3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,2,2,2]"},
      {"AvgPool1D", {"float[2,3,16]"}, {}, "float[2,3,8]"},
      {"AvgPool2D", {img}, {{"padding", Param::makeString("same")}, {"pool_size", Param::makeInts({3})}, {"strides", Param::makeInts({2})}}, "float[2,3,4,4]"},
      {"AvgPool3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,2,2,2]"},
      {"GlobalMaxPool1D", {"float[2,3,16]"}, {}, "float[2,3]"},
      {"GlobalMaxPool2D", {img}, {}, "float[2,3]"},
      {"GlobalMaxPool3D", {"float[2,3,4,4,4]"}, {{"keepdims", Param::makeBool(true)}}, "float[2,3,1,1,1]"},
      {"GlobalAvgPool1D", {"float[2,3,16]"}, {}, "float[2,3]"},
      {"GlobalAvgPool2D", {img}, {}, "float[2,3]"},
      {"GlobalAvgPool3D", {"float[2,3,4,4,4]"}, {}, "float[2,3]"},
      {"ZeroPadding1D", {"float[2,3,16]"}, {}, "float[2,3,18]"},
      {"ZeroPadding2D", {img}, {{"padding", Param::makeInts({1, 2, 3, 4})}}, "float[2,3,11,15]"},
      {"ZeroPadding3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,6,6,6]"},
      {"Cropping1D", {"float[2,3,16]"}, {}, "float[2,3,14]"},
      {"Cropping2D", {img}, {{"cropping", Param::makeInts({1, 0, 2, 1})}}, "float[2,3,7,5]"},
      {"Cropping3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,2,2,2]"},
      {"UpSampling1D", {"float[2,3,16]"}, {}, "float[2,3,32]"},
      {"UpSampling2D", {img}, {{"interpolation", Param::makeString("bilinear")}}, "float[2,3,16,16]"},
      {"UpSampling3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,8,8,8]"},
      {"BatchNormalization", {img}, {}, "float[2,3,8,8]"},
      {"LayerNormalization", {seq}, {}, "float[2,5,4]"},
      {"Add", {img, img}}, {"Average", {img, img, img}}, {"Multiply", {img, img, img}},
      {"Subtract", {img, img}}, {"Concatenate", {img, img}, {{"axis", Param::makeInt(1)}}, "float[2,6,8,8]"},
      {"Split", {img}, {{"axis", Param::makeInt(1)}, {"num_or_size_splits", Param::makeInt(3)}}},
      {"LSTM", {seq}, {{"units", Param::makeInt(6)}}, "float[2,6]"},
      {"LSTM", {seq}, {{"units", Param::makeInt(6)}, {"return_sequences", Param::makeBool(true)}}, "float[2,5,6]"},
      {"GRU", {seq}, {{"units", Param::makeInt(6)}, {"return_sequences", Param::makeBool(true)}}, "float[2,5,6]"},
      {"SimpleRNN", {seq}, {{"units", Param::makeInt(6)}}, "float[2,6]"},
      {"RNN", {seq}, {{"units", Param::makeInt(6)}, {"activation", Param::makeString("relu")}}, "float[2,6]"},
      {"Bidirectional", {seq}, {{"units", Param::makeInt(6)}, {"return_sequences", Param::makeBool(true)}}, "float[2,5,12]"},
      {"ConvLSTM1D", {"float[2,5,3,8]"}, {{"filters", Param::makeInt(4)}}, "float[2,4,6]"},
      {"ConvLSTM2D", {"float[2,5,3,8,8]"}, {{"filters", Param::makeInt(2)}, {"padding", Param::makeString("same")}, {"return_sequences", Param::makeBool(true)}}, "float[2,5,2,8,8]"},
      {"ConvLSTM3D", {"float[2,3,2,4,4,4]"}, {{"filters", Param::makeInt(2)}, {"kernel_size", Param::makeInts({2})}, {"strides", Param::makeInts({2})}, {"go_backwards", Param::makeBool(true)}}, "float[2,2,2,2,2]"},
      {"Bidirectional", {seq}, {{"units", Param::makeInt(6)}, {"layer", Param::makeString("GRU")}, {"merge_mode", Param::makeString("sum")}}, "float[2,6]"},
      {"Attention", {"float[2,4,8]", "float[2,6,8]"}, {{"use_scale", Param::makeBool(true)}}, "float[2,4,8]"},
      {"AdditiveAttention", {"float[2,4,8]", "float[2,6,8]"}, {}, "float[2,4,8]"},
      {"MultiHeadAttention", {"float[2,4,8]", "float[2,6,10]"}, {{"num_heads", Param::makeInt(2)}, {"key_dim", Param::makeInt(3)}}, "float[2,4,8]"},
  };
  return v;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.layer; }

class LayerExport : public ::testing::TestWithParam<Case> {};

TEST_P(LayerExport, PassesFullChecker) {
  const Case& c = GetParam();
  Graph g;
  auto layer = g.addNode(kLayersDomain, c.layer);
  ASSERT_TRUE(layer.ok()) << layer.message();
  for (const auto& [k, v] : c.params) ASSERT_TRUE(g.setParam(*layer, k, v).ok()) << k;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    NodeId in = *g.addNode(kGraphDomain, "Input");
    ASSERT_TRUE(g.setParam(in, "type", Param::makeString(c.inputs[i])).ok());
    ASSERT_TRUE(g.addLink({{in, 0}, {*layer, static_cast<int>(i)}}).ok());
  }
  const int outputs = c.layer == "Split" ? 3 : 1;
  for (int o = 0; o < outputs; ++o) {
    NodeId out = *g.addNode(kGraphDomain, "Output");
    ASSERT_TRUE(g.addLink({{*layer, o}, {out, 0}}).ok());
  }
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
