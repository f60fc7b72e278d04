// One small export case per Keras-style layer (deepwire.layers): the layer, its input types and
// params. Shared by the export test (tests/graph/layers_test.cpp) and the per-layer
// finite-difference gradient check (tests/training/layer_gradcheck_test.cpp), so a new layer
// gets both checks from one entry.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graphs/graph.h"

namespace dw::test {

struct LayerCase {
  std::string layer;
  std::vector<std::string> inputs;  // input types, one per connected port
  std::map<std::string, Param> params = {};
  std::string expectOutput = "";  // the output type, when checked
};

inline std::vector<LayerCase> layerCases() {
  const std::string img = "float[2,3,8,8]", seq = "float[2,5,4]";
  std::vector<LayerCase> v = {
      {"Dense", {"float[2,5]"}, {{"units", Param::makeInt(7)}}, "float[2,7]"},
      {"Dense",
       {seq},
       {{"units", Param::makeInt(6)}, {"activation", Param::makeString("gelu")}},
       "float[2,5,6]"},
      {"Flatten", {img}, {}, "float[2,192]"},
      {"Reshape", {img}, {{"target_shape", Param::makeInts({3, 64})}}, "float[2,3,64]"},
      {"Permute3D", {img}, {{"dims", Param::makeInts({2, 3, 1})}}, "float[2,8,8,3]"},
      {"Dropout", {img}},
      {"SpatialDropout", {img}},
      {"AlphaDropout", {img}},
      {"GaussianDropout", {img}},
      {"GaussianNoise", {img}},
      {"Embedding",
       {"int64[2,5]"},
       {{"input_dim", Param::makeInt(10)}, {"output_dim", Param::makeInt(4)}},
       "float[2,5,4]"},
      {"Sigmoid", {img}},
      {"TanH", {img}},
      {"SELU", {img}},
      {"SoftPlus", {img}},
      {"SoftSign", {img}},
      {"Swish", {img}},
      {"GELU", {img}},
      {"Exponential", {img}},
      {"HardSigmoid", {img}},
      {"Linear", {img}},
      {"ReLU", {img}},
      {"ReLU", {img}, {{"max_value", Param::makeFloat(6)}}},
      {"ReLU", {img}, {{"threshold", Param::makeFloat(0.5)}}},
      {"LeakyReLU", {img}},
      {"ELU", {img}},
      {"ThresholdedReLU", {img}},
      {"PReLU", {img}, {}, "float[2,3,8,8]"},
      {"SoftMax", {img}},
      {"Conv1D", {"float[2,3,16]"}, {{"filters", Param::makeInt(4)}}, "float[2,4,14]"},
      {"Conv2D",
       {img},
       {{"filters", Param::makeInt(4)}, {"padding", Param::makeString("same")}},
       "float[2,4,8,8]"},
      {"Conv2D",
       {img},
       {{"filters", Param::makeInt(6)},
        {"groups", Param::makeInt(3)},
        {"strides", Param::makeInts({2})}},
       "float[2,6,3,3]"},
      {"Conv3D", {"float[2,3,4,6,6]"}, {{"filters", Param::makeInt(2)}}, "float[2,2,2,4,4]"},
      {"Conv1DTranspose",
       {"float[2,3,5]"},
       {{"filters", Param::makeInt(2)}, {"strides", Param::makeInts({2})}},
       "float[2,2,11]"},
      {"Conv2DTranspose",
       {img},
       {{"filters", Param::makeInt(2)},
        {"strides", Param::makeInts({2})},
        {"padding", Param::makeString("same")}},
       "float[2,2,16,16]"},
      {"Conv2DTranspose",
       {img},
       {{"filters", Param::makeInt(2)},
        {"kernel_size", Param::makeInts({1})},
        {"strides", Param::makeInts({2})}},
       "float[2,2,16,16]"},
      {"Conv3DTranspose",
       {"float[2,3,2,3,3]"},
       {{"filters", Param::makeInt(2)}},
       "float[2,2,4,5,5]"},
      {"DepthwiseConv2D", {img}, {{"depth_multiplier", Param::makeInt(2)}}, "float[2,6,6,6]"},
      {"SeparableConv1D", {"float[2,3,16]"}, {{"filters", Param::makeInt(5)}}, "float[2,5,14]"},
      {"SeparableConv2D",
       {img},
       {{"filters", Param::makeInt(5)}, {"padding", Param::makeString("same")}},
       "float[2,5,8,8]"},
      {"MaxPool1D", {"float[2,3,16]"}, {}, "float[2,3,8]"},
      {"MaxPool2D", {img}, {}, "float[2,3,4,4]"},
      {"MaxPool3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,2,2,2]"},
      {"AvgPool1D", {"float[2,3,16]"}, {}, "float[2,3,8]"},
      {"AvgPool2D",
       {img},
       {{"padding", Param::makeString("same")},
        {"pool_size", Param::makeInts({3})},
        {"strides", Param::makeInts({2})}},
       "float[2,3,4,4]"},
      {"AvgPool3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,2,2,2]"},
      {"GlobalMaxPool1D", {"float[2,3,16]"}, {}, "float[2,3]"},
      {"GlobalMaxPool2D", {img}, {}, "float[2,3]"},
      {"GlobalMaxPool3D",
       {"float[2,3,4,4,4]"},
       {{"keepdims", Param::makeBool(true)}},
       "float[2,3,1,1,1]"},
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
      {"UpSampling2D",
       {img},
       {{"interpolation", Param::makeString("bilinear")}},
       "float[2,3,16,16]"},
      {"UpSampling3D", {"float[2,3,4,4,4]"}, {}, "float[2,3,8,8,8]"},
      {"BatchNormalization", {img}, {}, "float[2,3,8,8]"},
      {"LayerNormalization", {seq}, {}, "float[2,5,4]"},
      {"GroupNormalization", {"float[2,4,3,3]"}, {{"groups", Param::makeInt(2)}}, "float[2,4,3,3]"},
      {"GroupNormalization",
       {"float[2,3,3,4]"},
       {{"groups", Param::makeInt(2)}, {"axis", Param::makeInt(-1)}},
       "float[2,3,3,4]"},
      {"RMSNormalization", {seq}, {}, "float[2,5,4]"},
      {"RotaryEmbedding", {seq}, {}, "float[2,5,4]"},
      {"RotaryEmbedding",
       {"float[2,5,2,4]"},
       {{"max_wavelength", Param::makeFloat(50)}},
       "float[2,5,2,4]"},
      {"Add", {img, img}},
      {"Average", {img, img, img}},
      {"Multiply", {img, img, img}},
      {"Subtract", {img, img}},
      {"Concatenate", {img, img}, {{"axis", Param::makeInt(1)}}, "float[2,6,8,8]"},
      {"Split", {img}, {{"axis", Param::makeInt(1)}, {"num_or_size_splits", Param::makeInt(3)}}},
      {"LSTM", {seq}, {{"units", Param::makeInt(6)}}, "float[2,6]"},
      {"LSTM",
       {seq},
       {{"units", Param::makeInt(6)}, {"return_sequences", Param::makeBool(true)}},
       "float[2,5,6]"},
      {"GRU",
       {seq},
       {{"units", Param::makeInt(6)}, {"return_sequences", Param::makeBool(true)}},
       "float[2,5,6]"},
      {"SimpleRNN", {seq}, {{"units", Param::makeInt(6)}}, "float[2,6]"},
      {"RNN",
       {seq},
       {{"units", Param::makeInt(6)}, {"activation", Param::makeString("relu")}},
       "float[2,6]"},
      {"Bidirectional",
       {seq},
       {{"units", Param::makeInt(6)}, {"return_sequences", Param::makeBool(true)}},
       "float[2,5,12]"},
      {"ConvLSTM1D", {"float[2,5,3,8]"}, {{"filters", Param::makeInt(4)}}, "float[2,4,6]"},
      {"ConvLSTM2D",
       {"float[2,5,3,8,8]"},
       {{"filters", Param::makeInt(2)},
        {"padding", Param::makeString("same")},
        {"return_sequences", Param::makeBool(true)}},
       "float[2,5,2,8,8]"},
      {"ConvLSTM3D",
       {"float[2,3,2,4,4,4]"},
       {{"filters", Param::makeInt(2)},
        {"kernel_size", Param::makeInts({2})},
        {"strides", Param::makeInts({2})},
        {"go_backwards", Param::makeBool(true)}},
       "float[2,2,2,2,2]"},
      {"Bidirectional",
       {seq},
       {{"units", Param::makeInt(6)},
        {"layer", Param::makeString("GRU")},
        {"merge_mode", Param::makeString("sum")}},
       "float[2,6]"},
      {"Attention",
       {"float[2,4,8]", "float[2,6,8]"},
       {{"use_scale", Param::makeBool(true)}},
       "float[2,4,8]"},
      {"AdditiveAttention", {"float[2,4,8]", "float[2,6,8]"}, {}, "float[2,4,8]"},
      {"MultiHeadAttention",
       {"float[2,4,8]", "float[2,6,10]"},
       {{"num_heads", Param::makeInt(2)}, {"key_dim", Param::makeInt(3)}},
       "float[2,4,8]"},
  };
  return v;
}

// Input nodes (one per case input) -> the layer -> Output nodes (one per layer output).
inline Status buildLayerGraph(const LayerCase& c, Graph* g) {
  auto layer = g->addNode(kLayersDomain, c.layer);
  if (!layer.ok()) return layer.status();
  for (const auto& [k, v] : c.params) DW_RETURN_IF_ERROR(g->setParam(*layer, k, v));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    auto in = g->addNode(kGraphDomain, "Input");
    if (!in.ok()) return in.status();
    DW_RETURN_IF_ERROR(g->setParam(*in, "type", Param::makeString(c.inputs[i])));
    DW_RETURN_IF_ERROR(g->addLink({{*in, 0}, {*layer, static_cast<int>(i)}}));
  }
  const int outputs = c.layer == "Split" ? 3 : 1;
  for (int o = 0; o < outputs; ++o) {
    auto out = g->addNode(kGraphDomain, "Output");
    if (!out.ok()) return out.status();
    DW_RETURN_IF_ERROR(g->addLink({{*layer, o}, {*out, 0}}));
  }
  return Status::okStatus();
}

}  // namespace dw::test
