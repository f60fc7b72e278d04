// Keras parameters of the layers that do not change the forward pass, so the golden cases do not
// see them: the weight regularizers, which travel to the trainer in the layout metadata.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "graphs/onnx_export.h"

namespace dw {
namespace {

nlohmann::json layoutOf(const onnx::ModelProto& m) {
  for (const auto& p : m.metadata_props())
    if (p.key() == kLayoutMetadataKey) return nlohmann::json::parse(p.value());
  return {};
}

// Input `type` -> layer (named L, with `params`) -> Output; the export's layout metadata.
nlohmann::json exportLayer(const std::string& layer, const std::string& type,
                           const std::map<std::string, Param>& params) {
  Graph g;
  NodeId l = *g.addNode(kLayersDomain, layer);
  EXPECT_TRUE(g.rename(l, "L").ok());
  for (const auto& [k, v] : params) EXPECT_TRUE(g.setParam(l, k, v).ok()) << k;
  NodeId in = *g.addNode(kGraphDomain, "Input");
  EXPECT_TRUE(g.setParam(in, "type", Param::makeString(type)).ok());
  EXPECT_TRUE(g.addLink({{in, 0}, {l, 0}}).ok());
  NodeId out = *g.addNode(kGraphDomain, "Output");
  EXPECT_TRUE(g.addLink({{l, 0}, {out, 0}}).ok());
  auto m = exportOnnx(g);
  EXPECT_TRUE(m.ok()) << m.message();
  return m.ok() ? layoutOf(*m) : nlohmann::json();
}

TEST(LayerParams, RegularizersReachTheWeightsMetadata) {
  auto j = exportLayer("Dense", "float[2,5]",
                       {{"units", Param::makeInt(3)},
                        {"kernel_regularizer", Param::makeString("l1l2")},
                        {"l1", Param::makeFloat(0.5)},
                        {"l2", Param::makeFloat(0.25)}});
  const auto& kernel = j["nodes"]["initializer:L.kernel"];
  EXPECT_EQ(kernel["regularizer"], "l1l2");
  EXPECT_DOUBLE_EQ(kernel["l1"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(kernel["l2"].get<double>(), 0.25);
  EXPECT_FALSE(j["nodes"]["initializer:L.bias"].contains("regularizer"));

  j = exportLayer("LSTM", "float[2,5,4]",
                  {{"units", Param::makeInt(3)},
                   {"recurrent_regularizer", Param::makeString("l2")},
                   {"bias_regularizer", Param::makeString("l1")}});
  EXPECT_FALSE(j["nodes"]["initializer:L.kernel"].contains("regularizer"));
  EXPECT_EQ(j["nodes"]["initializer:L.recurrent_kernel"]["regularizer"], "l2");
  EXPECT_EQ(j["nodes"]["initializer:L.bias"]["regularizer"], "l1");

  j = exportLayer("Embedding", "int64[2,5]",
                  {{"input_dim", Param::makeInt(10)},
                   {"output_dim", Param::makeInt(4)},
                   {"embeddings_regularizer", Param::makeString("l2")}});
  EXPECT_EQ(j["nodes"]["initializer:L.embeddings"]["regularizer"], "l2");
}

TEST(LayerParams, EveryWeightedLayerOffersAKernelRegularizer) {
  for (const char* layer :
       {"Dense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose",
        "Conv3DTranspose", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D", "LSTM", "GRU",
        "SimpleRNN", "RNN", "Bidirectional", "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D",
        "MultiHeadAttention"}) {
    const NodeSpec* s = Catalogue::instance().find(kLayersDomain, layer);
    ASSERT_NE(s, nullptr) << layer;
    const ParamSpec* p = s->param("kernel_regularizer");
    ASSERT_NE(p, nullptr) << layer;
    EXPECT_EQ(p->allowedValues, (std::vector<std::string>{"none", "l1", "l2", "l1l2"}));
  }
}

}  // namespace
}  // namespace dw
