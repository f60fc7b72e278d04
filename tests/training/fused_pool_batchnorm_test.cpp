// The training fusion of BatchNormalization (+Relu) -> MaxPool (fuseTrainingChains): the
// normalization pools while it normalises and keeps each window's winner, and its gradient
// scatters the pooled gradient through them. The pooled activation, every gradient and the
// running statistics must be bit-identical to the unfused graph's (SessionOptions::fuse =
// false), on odd plane sizes (the 2x2/2 window then leaves a row and a column out), overlapping
// and padded windows, with and without the Relu, on planes wider than one 16-lane vector;
// windows the fused kernels do not cover (ceil_mode) and activations with other readers stay
// unfused. With channels a multiple of 16 the convolution's activations and their gradients
// also pass between the kernels in nChw16c (markBlockedLayouts; in one block, and in each of two
// chained blocks), bit-identical to the fused graph in plain NCHW
// (SessionOptions::blockedLayouts = false). On a one-channel image the convolution itself joins
// the normalization and its gradient (fuseConvIntoBatchNorm), again bit for bit, on both of the
// direct convolution loops' paths, and with results that do not depend on the thread count.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/fusion/fused.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "tests/engine/onnx_builder.h"

namespace dw::engine::training {
namespace {

using test::addValue;
using test::attrI;
using test::attrInts;
using test::normalTensor;

struct PoolCase {
  std::string name;
  int64_t n, c, h, w;
  std::vector<int64_t> kernel, strides, pads;  // pads: top, left, bottom, right
  bool relu = true;
  bool ceil = false;         // ceil_mode=1: not fused
  bool extraReader = false;  // the activation is also part of the loss: not fused
  bool fused = true;         // whether the fusion is expected
  // A second block Conv(3x3, pad 1, c -> c) -> BatchNormalization -> Relu -> MaxPool(2x2/2)
  // reads the first one's pooled output.
  bool secondBlock = false;
  // The first convolution: one input channel fuses it into the normalization
  // (fuseConvIntoBatchNorm); its window and an optional bias.
  int64_t inChannels = 2;
  std::vector<int64_t> convStrides = {1, 1}, convPads = {1, 1, 1, 1}, convDilations = {1, 1};
  bool convBias = false;
};

// A one-channel image whose convolution fuses into the normalization, 2x2 / stride 2 pooling.
PoolCase imageCase(std::string name, int64_t n, int64_t c, int64_t h, int64_t w,
                   std::vector<int64_t> strides, std::vector<int64_t> pads,
                   std::vector<int64_t> dilations, bool bias) {
  PoolCase p{std::move(name), n, c, h, w, {2, 2}, {2, 2}, {0, 0, 0, 0}};
  p.inChannels = 1;
  p.convStrides = std::move(strides);
  p.convPads = std::move(pads);
  p.convDilations = std::move(dilations);
  p.convBias = bias;
  return p;
}

// A fused 2x2 / stride 2 block followed by the second one.
PoolCase twoBlocks(std::string name, int64_t n, int64_t c, int64_t h, int64_t w) {
  PoolCase p{std::move(name), n, c, h, w, {2, 2}, {2, 2}, {0, 0, 0, 0}};
  p.secondBlock = true;
  return p;
}

// The first convolution reads 16 channels, so it keeps its converted input for its ConvGrad.
PoolCase wideInput(PoolCase p) {
  p.inChannels = 16;
  return p;
}

void PrintTo(const PoolCase& c, std::ostream* os) {
  *os << c.name;
}

// A node named after its one output.
onnx::NodeProto* addNode(onnx::GraphProto* g, const std::string& op,
                         const std::vector<std::string>& in, const std::string& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(out);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, bool ceil) {
  const int64_t span = in + p0 + p1 - k;
  return (ceil ? (span + s - 1) / s : span / s) + 1;
}

// Conv(3x3, pad 1) -> BatchNormalization (training) -> [Relu] -> MaxPool -> Mul(R) -> ReduceSum,
// with the gradient graph for W, scale and shift.
// The trainable weights and statistics become inputs of the gradient graph: these feed them.
std::map<std::string, Tensor> weights(const PoolCase& c) {
  Tensor var(DType::kFloat, {c.c});
  for (int64_t i = 0; i < c.c; ++i) var.data<float>()[i] = 1.5f;
  std::map<std::string, Tensor> w{{"W", normalTensor({c.c, c.inChannels, 3, 3}, 1)},
                                  {"scale", normalTensor({c.c}, 2)},
                                  {"shift", normalTensor({c.c}, 3)},
                                  {"mean", normalTensor({c.c}, 4)},
                                  {"var", var},
                                  {"X", normalTensor({c.n, c.inChannels, c.h, c.w}, 6)}};
  if (c.convBias) w["Bc"] = normalTensor({c.c}, 11);
  if (c.secondBlock) {
    w["W2"] = normalTensor({c.c, c.c, 3, 3}, 7);
    w["scale2"] = normalTensor({c.c}, 8);
    w["shift2"] = normalTensor({c.c}, 9);
    w["mean2"] = normalTensor({c.c}, 10);
    w["var2"] = var;
  }
  return w;
}

onnx::ModelProto buildGradientModel(const PoolCase& c, Shape& outShape) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("bn_pool");
  addValue(g->add_input(), "X", {c.n, c.inChannels, c.h, c.w});
  for (const auto& [name, t] : weights(c))
    if (name != "X") tensorToProto(t, g->add_initializer(), name);
  const int64_t ch = pooled(c.h, 2 * c.convDilations[0] + 1, c.convStrides[0], c.convPads[0],
                            c.convPads[2], false),
                cw = pooled(c.w, 2 * c.convDilations[1] + 1, c.convStrides[1], c.convPads[1],
                            c.convPads[3], false);
  outShape = {c.n, c.c, pooled(ch, c.kernel[0], c.strides[0], c.pads[0], c.pads[2], c.ceil),
              pooled(cw, c.kernel[1], c.strides[1], c.pads[1], c.pads[3], c.ceil)};
  if (c.secondBlock) outShape = {c.n, c.c, outShape[2] / 2, outShape[3] / 2};
  tensorToProto(normalTensor(outShape, 5), g->add_initializer(), "R");
  auto node = [&](const std::string& op, std::vector<std::string> in, std::string out) {
    return addNode(g, op, in, out);
  };
  auto* conv = node(
      "Conv",
      c.convBias ? std::vector<std::string>{"X", "W", "Bc"} : std::vector<std::string>{"X", "W"},
      "C");
  attrInts(conv, "pads", c.convPads);
  attrInts(conv, "strides", c.convStrides);
  attrInts(conv, "dilations", c.convDilations);
  node("BatchNormalization", {"C", "scale", "shift", "mean", "var"}, "B");
  std::string act = "B";
  if (c.relu) act = node("Relu", {"B"}, "A")->output(0);
  auto* mp = node("MaxPool", {act}, c.secondBlock ? "Q" : "P");
  attrInts(mp, "kernel_shape", c.kernel);
  attrInts(mp, "strides", c.strides);
  attrInts(mp, "pads", c.pads);
  if (c.ceil) attrI(mp, "ceil_mode", 1);
  if (c.secondBlock) {
    attrInts(node("Conv", {"Q", "W2"}, "C2"), "pads", {1, 1, 1, 1});
    node("BatchNormalization", {"C2", "scale2", "shift2", "mean2", "var2"}, "B2");
    node("Relu", {"B2"}, "A2");
    auto* mp2 = node("MaxPool", {"A2"}, "P");
    attrInts(mp2, "kernel_shape", {2, 2});
    attrInts(mp2, "strides", {2, 2});
  }
  node("Mul", {"P", "R"}, "PR");
  std::vector<std::string> terms{"PR"};
  if (c.extraReader) {
    node("Mul", {act, act}, "AA");
    terms.push_back("AA");
  }
  std::string total = "PR";
  for (size_t i = 0; i < terms.size(); ++i) {
    auto* r = node("ReduceSum", {terms[i]}, terms[i] + "_sum");
    attrI(r, "keepdims", 0);
    total =
        i == 0 ? r->output(0) : node("Add", {total, r->output(0)}, "loss_" + terms[i])->output(0);
  }
  node("Identity", {total}, "loss");
  addValue(g->add_output(), "loss", {});
  addValue(g->add_output(), "P", outShape);  // the pooled activation itself is compared too
  GradientGraphOptions go;
  go.losses = {"loss"};
  go.trainable = {"W", "scale", "shift"};
  if (c.convBias) go.trainable.push_back("Bc");
  if (c.secondBlock) go.trainable.insert(go.trainable.end(), {"W2", "scale2", "shift2"});
  auto gg = buildGradientGraph(m, go);
  EXPECT_TRUE(gg.ok()) << gg.message();
  return gg.ok() ? gg->model : onnx::ModelProto();
}

class FusedPoolBatchNorm : public ::testing::TestWithParam<PoolCase> {};

// Bit for bit: the unfused graph against the fused one in plain NCHW, and that against the
// fused one with its nChw16c handoffs. The loss comes out of oneDNN's reduction primitive, whose
// summation order follows where its input lies (the plans place buffers differently):
// bit-identical inputs (P, and with it P * R) can round differently there, by a few units in the
// last place.
void expectSameResults(const std::map<std::string, Tensor>& want,
                       const std::map<std::string, Tensor>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [k, t] : want) {
    ASSERT_TRUE(got.count(k)) << what << ": " << k;
    const Tensor& f = got.at(k);
    ASSERT_EQ(t.shape(), f.shape()) << what << ": " << k;
    ASSERT_EQ(t.dtype(), f.dtype()) << what << ": " << k;
    if (k == "loss") {
      EXPECT_NEAR(t.data<float>()[0], f.data<float>()[0], 1e-5 * std::abs(t.data<float>()[0]))
          << what;
      continue;
    }
    double worst = 0;  // for the message: how far apart, relative to the value
    if (t.dtype() == DType::kFloat)
      for (int64_t i = 0; i < t.size(); ++i) {
        const double a = t.data<float>()[i], b = f.data<float>()[i];
        worst = std::max(worst, std::abs(a - b) / (std::abs(a) + 1e-30));
      }
    EXPECT_EQ(0, std::memcmp(t.raw(), f.raw(), t.bytes()))
        << what << ": " << k << " differs, relatively by up to " << worst;
  }
}

struct GraphRun {
  std::map<std::string, Tensor> results;
  std::string report;
};

GraphRun runGraph(const onnx::ModelProto& model, const std::map<std::string, Tensor>& feeds,
                  bool fuse, bool blocked, int threads) {
  GraphRun out;
  SessionOptions o;
  o.backend.threads = threads;
  o.fuse = fuse;
  o.blockedLayouts = blocked;
  o.profile = true;
  auto s = InferenceSession::create(model, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return out;
  // Twice: the kernels' cached state (row buffers, primitives) must not change the results.
  for (int run = 0; run < 2; ++run) {
    auto r = (*s)->run(feeds);
    EXPECT_TRUE(r.ok()) << r.message();
    if (!r.ok()) return out;
    for (auto& [k, t] : *r) out.results[k] = t.clone();
  }
  out.report = (*s)->profileReport(100);
  return out;
}

TEST_P(FusedPoolBatchNorm, MatchesTheUnfusedGraphBitForBit) {
  const PoolCase& c = GetParam();
  Shape outShape;
  const onnx::ModelProto model = buildGradientModel(c, outShape);
  ASSERT_GT(model.graph().node_size(), 0);
  const std::map<std::string, Tensor> feeds = weights(c);
  // Unfused; fused in plain NCHW; fused with the nChw16c handoffs where they apply.
  std::map<std::string, Tensor> results[3];
  std::string reports[3];
  for (int v = 0; v < 3; ++v) {
    GraphRun r = runGraph(model, feeds, v > 0, v == 2, 2);
    results[v] = std::move(r.results);
    reports[v] = std::move(r.report);
  }
  const std::string& report = reports[2];
  // The fusion removes the MaxPool and its gradient from the plan.
  EXPECT_EQ(report.find("PoolGrad") == std::string::npos, c.fused) << report;
  EXPECT_EQ(report.find("MaxPool") == std::string::npos, c.fused) << report;
  // A one-channel convolution joins the normalization and its gradient: no Conv or ConvGrad
  // node is left (in the first block).
  const bool convFused = c.fused && c.inChannels == 1;
  for (int v = 1; v < 3; ++v) {
    EXPECT_EQ(reports[v].find("B (BatchNormalizationTraining; C fused in)") != std::string::npos,
              convFused)
        << reports[v];
    EXPECT_EQ(reports[v].find("(BatchNormalizationGrad; C fused in)") != std::string::npos,
              convFused)
        << reports[v];
    EXPECT_EQ(reports[v].find("grad/C/ConvGrad") == std::string::npos, convFused) << reports[v];
  }
  // Where the channels allow it, the convolution's output and the normalization gradient's dX
  // are handed over in nChw16c: Conv output 0, the normalization's X, its gradient's X and dX,
  // and ConvGrad's dY; in both blocks where there are two.
  const bool blocked = c.fused && c.c % 16 == 0 && !convFused;
  // A convolution whose input channels are a multiple of 16 also hands its converted input to
  // its ConvGrad (shareConvSourceLayout): the second block's always, the first one's where the
  // image has 16 channels.
  const bool keptC = blocked && c.inChannels % 16 == 0;
  const std::string convC =
      keptC ? "C (Conv; output 0, output 1 in nChw16c)" : "C (Conv; output 0 in nChw16c)";
  const std::string gradC = keptC ? "grad/C/ConvGrad (ConvGrad; input 0, input 1 in nChw16c)"
                                  : "grad/C/ConvGrad (ConvGrad; input 0 in nChw16c)";
  std::vector<std::string> marked{convC, "(BatchNormalizationTraining; input 0 in nChw16c)",
                                  "(BatchNormalizationGrad; input 1, output 0 in nChw16c)", gradC};
  if (c.secondBlock)
    marked = {
        convC,
        "C2 (Conv; output 0, output 1 in nChw16c)",
        "B (BatchNormalizationTraining; input 0 in nChw16c)",
        "B2 (BatchNormalizationTraining; input 0 in nChw16c)",
        "grad/B/BatchNormalizationGrad (BatchNormalizationGrad; input 1, output 0 in nChw16c)",
        "grad/B2/BatchNormalizationGrad (BatchNormalizationGrad; input 1, output 0 in "
        "nChw16c)",
        gradC,
        "grad/C2/ConvGrad (ConvGrad; input 0, input 1 in nChw16c)"};
  for (const auto& node : marked)
    EXPECT_EQ(report.find(node) != std::string::npos, blocked) << node << "\n" << report;
  EXPECT_EQ(reports[1].find("nChw16c"), std::string::npos) << reports[1];
  std::string names;
  for (const auto& [k, t] : results[0]) names += k + " ";
  for (const char* k : {"loss", "W_grad", "scale_grad", "shift_grad"})
    EXPECT_TRUE(results[0].count(k)) << k << " missing from " << names;
  expectSameResults(results[0], results[1], "fused against unfused");
  expectSameResults(results[1], results[2], "nChw16c handoffs against plain");
  if (c.inChannels == 1) {
    // The image blocks' kernels sum in an order that does not depend on the thread count.
    expectSameResults(results[0], runGraph(model, feeds, false, false, 1).results,
                      "unfused, one thread against two");
    expectSameResults(results[1], runGraph(model, feeds, true, false, 1).results,
                      "fused, one thread against two");
  }
}

// The same for the direct convolution loops' portable path (CPUs without AVX-512).
// The fused pooling's geometry (both backends read it): output sizes as ONNX's floor, and a
// window larger than the padded input is an error, not one output from a partial window.
TEST(FusedPoolBatchNorm, GeometryRefusesWindowsLargerThanTheInput) {
  auto g = fusion::fusedMaxPool({{3, 3}, {2, 2}, {1, 1, 0, 0}, {}}, {2, 4, 7, 8});
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->oh, 3);  // (7 + 1 - 3) / 2 + 1
  EXPECT_EQ(g->ow, 4);  // (8 + 1 - 3) / 2 + 1
  EXPECT_EQ(g->ph, 1);
  EXPECT_EQ(g->pb, 0);
  auto big = fusion::fusedMaxPool({{3, 3}, {2, 2}, {0, 0, 0, 0}, {}}, {1, 1, 2, 2});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("exceeds the input"), std::string::npos) << big.message();
  EXPECT_FALSE(fusion::fusedMaxPool({{2, 2}, {2, 2}, {}, {}}, {1, 2, 4}).ok());         // not 4-D
  EXPECT_FALSE(fusion::fusedMaxPool({{16, 16}, {1, 1}, {}, {}}, {1, 1, 32, 32}).ok());  // 256
}

// Two convolutions reading one 16-channel X, each with its weight gradient (a residual block's
// first convolution and its downsampling shortcut): each keeps its own converted X for its
// ConvGrad. Both were named after X alone, and training torchvision's resnet18 stopped with
// "value ... is defined more than once".
TEST(SharedConvSource, TwoConvolutionsOfOneInputKeepTheirOwnConvertedInput) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("two_convs");
  addValue(g->add_input(), "X", {2, 16, 8, 8});
  std::map<std::string, Tensor> feeds{{"X", normalTensor({2, 16, 8, 8}, 1)},
                                      {"W1", normalTensor({16, 16, 3, 3}, 2)},
                                      {"W2", normalTensor({16, 16, 1, 1}, 3)}};
  for (const auto& [name, t] : feeds)
    if (name != "X") tensorToProto(t, g->add_initializer(), name);
  tensorToProto(normalTensor({2, 32, 4, 4}, 4), g->add_initializer(), "R");
  auto node = [&](const std::string& op, std::vector<std::string> in, std::string out) {
    return addNode(g, op, in, out);
  };
  auto* c1 = node("Conv", {"X", "W1"}, "C1");
  attrInts(c1, "pads", {1, 1, 1, 1});
  attrInts(c1, "strides", {2, 2});
  attrInts(node("Conv", {"X", "W2"}, "C2"), "strides", {2, 2});
  attrI(node("Concat", {"C1", "C2"}, "S"), "axis", 1);  // an Add would fuse into C2
  node("Mul", {"S", "R"}, "SR");
  attrI(node("ReduceSum", {"SR"}, "loss"), "keepdims", 0);
  addValue(g->add_output(), "loss", {});
  GradientGraphOptions go;
  go.losses = {"loss"};
  go.trainable = {"W1", "W2"};
  auto gg = buildGradientGraph(m, go);
  ASSERT_TRUE(gg.ok()) << gg.message();
  const GraphRun plain = runGraph(gg->model, feeds, false, false, 2);
  const GraphRun blocked = runGraph(gg->model, feeds, true, true, 2);
  ASSERT_FALSE(plain.results.empty());
  ASSERT_FALSE(blocked.results.empty());
  for (const char* conv : {"C1 (Conv; output 1 in nChw16c)", "C2 (Conv; output 1 in nChw16c)"})
    EXPECT_NE(blocked.report.find(conv), std::string::npos) << conv << "\n" << blocked.report;
  for (const char* k : {"W1_grad", "W2_grad"}) {
    ASSERT_TRUE(blocked.results.count(k)) << k;
    const Tensor& want = plain.results.at(k);
    const Tensor& got = blocked.results.at(k);
    ASSERT_EQ(want.shape(), got.shape()) << k;
    for (int64_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i],
                  1e-4 * (1 + std::abs(want.data<float>()[i])))
          << k << "[" << i << "]";
  }
}

TEST(FusedConvBatchNorm, PortableLoopsMatchTheUnfusedGraphBitForBit) {
  struct Generic {
    Generic() { onednn::singleChannelConvGenericOnly(true); }
    ~Generic() { onednn::singleChannelConvGenericOnly(false); }
  } generic;
  for (const PoolCase& c :
       {imageCase("image_conv", 3, 5, 11, 9, {1, 1}, {1, 1, 1, 1}, {1, 1}, true),
        imageCase("image_conv_strided", 3, 4, 15, 14, {2, 2}, {1, 1, 1, 1}, {1, 1}, true)}) {
    Shape outShape;
    const onnx::ModelProto model = buildGradientModel(c, outShape);
    const std::map<std::string, Tensor> feeds = weights(c);
    const GraphRun fused = runGraph(model, feeds, true, false, 2);
    EXPECT_NE(fused.report.find("C fused in"), std::string::npos) << fused.report;
    expectSameResults(runGraph(model, feeds, false, false, 2).results, fused.results, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Windows, FusedPoolBatchNorm,
    ::testing::Values(
        PoolCase{"tiled2_even", 4, 3, 12, 10, {2, 2}, {2, 2}, {0, 0, 0, 0}},
        PoolCase{"tiled2_odd", 3, 5, 11, 9, {2, 2}, {2, 2}, {0, 0, 0, 0}},
        PoolCase{"tiled2_wide", 2, 3, 6, 70, {2, 2}, {2, 2}, {0, 0, 0, 0}},
        PoolCase{"tiled2_no_relu", 3, 4, 9, 13, {2, 2}, {2, 2}, {0, 0, 0, 0}, false},
        PoolCase{"overlap_padded", 3, 5, 11, 9, {3, 3}, {2, 2}, {1, 1, 1, 1}},
        PoolCase{"asymmetric", 2, 3, 10, 13, {2, 3}, {1, 2}, {0, 1, 1, 0}},
        PoolCase{"stride_over_kernel_no_relu", 2, 4, 13, 11, {2, 2}, {3, 3}, {0, 0, 0, 0}, false},
        // 16 and 32 channels: the convolution's output and its gradient go between the
        // convolution and normalization kernels in nChw16c (markBlockedLayouts).
        PoolCase{"blocked_16", 3, 16, 11, 9, {2, 2}, {2, 2}, {0, 0, 0, 0}},
        PoolCase{"blocked_32_overlap_no_relu", 2, 32, 14, 14, {3, 3}, {2, 2}, {1, 1, 1, 1}, false},
        PoolCase{"blocked_16_s36", 3, 16, 6, 6, {2, 2}, {2, 2}, {0, 0, 0, 0}},
        twoBlocks("blocked_two_blocks", 3, 16, 12, 13),
        wideInput(PoolCase{"blocked_wide_input", 3, 16, 10, 9, {2, 2}, {2, 2}, {0, 0, 0, 0}}),
        wideInput(twoBlocks("blocked_two_blocks_wide_input", 2, 32, 12, 12)),
        // One-channel images: the convolution runs inside the normalization and its gradient.
        // Odd plane sizes and channel counts (rows at every offset within a cache line),
        // strided and dilated windows (the direct loops' unshifted path), with and without a
        // bias, and channels a multiple of 16 (no nChw16c handoff then).
        imageCase("image_conv", 3, 5, 11, 9, {1, 1}, {1, 1, 1, 1}, {1, 1}, true),
        imageCase("image_conv_no_bias_valid", 4, 3, 12, 13, {1, 1}, {0, 0, 0, 0}, {1, 1}, false),
        imageCase("image_conv_asymmetric_pads", 2, 6, 9, 30, {1, 1}, {0, 2, 1, 0}, {1, 1}, true),
        imageCase("image_conv_strided", 3, 4, 15, 14, {2, 2}, {1, 1, 1, 1}, {1, 1}, true),
        imageCase("image_conv_dilated", 2, 5, 13, 12, {1, 1}, {2, 2, 2, 2}, {2, 2}, true),
        imageCase("image_conv_32", 4, 32, 14, 14, {1, 1}, {1, 1, 1, 1}, {1, 1}, true),
        twoBlocks("two_blocks_unblocked", 2, 8, 12, 12),
        PoolCase{"ceil_mode_unfused",
                 2,
                 3,
                 11,
                 9,
                 {2, 2},
                 {2, 2},
                 {0, 0, 0, 0},
                 true,
                 true,
                 false,
                 false},
        PoolCase{"extra_reader_unfused",
                 2,
                 3,
                 8,
                 8,
                 {2, 2},
                 {2, 2},
                 {0, 0, 0, 0},
                 true,
                 false,
                 true,
                 false}),
    [](const ::testing::TestParamInfo<PoolCase>& i) { return i.param.name; });

}  // namespace
}  // namespace dw::engine::training
