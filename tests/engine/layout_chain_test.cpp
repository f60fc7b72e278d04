// Inference chains of convolutions hand their activations over in NHWC (the session's
// markNhwcChains), with ReLU6 (Clip with constant bounds) fused into the convolution before it:
// the result must be the same as with plain NCHW hand-overs, bit for bit, and agree with the
// node-by-node graph; a value the chain cannot own (a graph output) stays plain.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/session.h"
#include "onnx_builder.h"

namespace {

using namespace dw::engine;
using test::addInit;
using test::addNode;
using test::addValue;
using test::attrF;
using test::attrI;
using test::attrInts;
using test::emptyModel;
using test::maxDiff;
using test::randomTensor;

struct Outcome {
  Tensor y;
  std::string profile;
};

Outcome run(const onnx::ModelProto& m, const Tensor& x, bool fuse, bool layouts) {
  SessionOptions o;
  o.fuse = fuse;
  o.blockedLayouts = layouts;
  o.profile = true;
  auto s = InferenceSession::create(m, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  auto r = (*s)->run({{"x", x}});
  EXPECT_TRUE(r.ok()) << r.message();
  if (!r.ok()) return {};
  return {r->at("y"), (*s)->profileReport(50)};
}

// A MobileNet-like block: Conv -> ReLU6 -> depthwise Conv -> ReLU6 -> 1x1 Conv -> Add (the
// residual) -> Relu -> 1x1 Conv -> GlobalAveragePool. `exposeFirst` makes the first ReLU6's
// output a graph output as well.
onnx::ModelProto block(bool exposeFirst) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 8, 10, 10});
  addValue(g->add_output(), "y", {2, 4, 1, 1});
  if (exposeFirst) addValue(g->add_output(), "r1", {2, 16, 10, 10});
  addInit(g, "w1", randomTensor({16, 8, 3, 3}, 1, -0.3f, 0.3f));
  addInit(g, "b1", randomTensor({16}, 2));
  addInit(g, "wd", randomTensor({16, 1, 3, 3}, 3, -0.5f, 0.5f));
  addInit(g, "w2", randomTensor({16, 16, 1, 1}, 4, -0.4f, 0.4f));
  addInit(g, "w3", randomTensor({4, 16, 1, 1}, 5, -0.4f, 0.4f));
  addInit(g, "lo", Tensor::scalar(DType::kFloat, 0.0));
  addInit(g, "hi", Tensor::scalar(DType::kFloat, 6.0));
  attrInts(addNode(g, "Conv", {"x", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  addNode(g, "Clip", {"c1", "lo", "hi"}, {"r1"});
  auto* dw = addNode(g, "Conv", {"r1", "wd"}, {"c2"});
  attrInts(dw, "pads", {1, 1, 1, 1});
  attrI(dw, "group", 16);
  addNode(g, "Clip", {"c2", "lo", "hi"}, {"r2"});
  addNode(g, "Conv", {"r2", "w2"}, {"c3"});
  addNode(g, "Add", {"c3", "r1"}, {"sum"});
  addNode(g, "Relu", {"sum"}, {"r3"});
  addNode(g, "Conv", {"r3", "w3"}, {"c4"});
  addNode(g, "GlobalAveragePool", {"c4"}, {"y"});
  return m;
}

TEST(LayoutChains, NhwcHandOversMatchPlainBitForBit) {
  // Inputs up to 4 make the ReLU6 clip at 6 somewhere.
  const Tensor x = randomTensor({2, 8, 10, 10}, 7, -4.0f, 4.0f);
  const auto m = block(false);
  const Outcome nhwc = run(m, x, true, true), plain = run(m, x, true, false),
                unfused = run(m, x, false, false);
  ASSERT_TRUE(nhwc.y.defined() && plain.y.defined() && unfused.y.defined());
  EXPECT_EQ(maxDiff(nhwc.y, plain.y), 0.0f);
  EXPECT_LT(maxDiff(nhwc.y, unfused.y), 1e-5f);
  // The first convolution writes NHWC, the others read and write it, and the global pooling
  // reads it; both Clips and the residual Add (with the Relu after it) are fused away.
  EXPECT_NE(nhwc.profile.find("input 0, output 0 in NHWC"), std::string::npos) << nhwc.profile;
  EXPECT_NE(nhwc.profile.find("(Conv; output 0 in NHWC)"), std::string::npos) << nhwc.profile;
  EXPECT_NE(nhwc.profile.find("(GlobalAveragePool; input 0 in NHWC)"), std::string::npos)
      << nhwc.profile;
  for (const char* op : {"Clip", "Add", "Relu"})
    EXPECT_EQ(nhwc.profile.find(op), std::string::npos) << op << "\n" << nhwc.profile;
  EXPECT_EQ(plain.profile.find("NHWC"), std::string::npos) << plain.profile;
}

// The same with a dynamic batch, as exporters usually declare it: shapes are compared with their
// symbolic dims, so the chain still forms.
TEST(LayoutChains, DynamicBatchStillHandsOverNhwc) {
  auto m = block(false);
  for (auto* v : {m.mutable_graph()->mutable_input(0), m.mutable_graph()->mutable_output(0)})
    v->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("N");
  const Tensor x = randomTensor({2, 8, 10, 10}, 9, -4.0f, 4.0f);
  const Outcome nhwc = run(m, x, true, true), plain = run(m, x, true, false);
  ASSERT_TRUE(nhwc.y.defined() && plain.y.defined());
  EXPECT_EQ(maxDiff(nhwc.y, plain.y), 0.0f);
  EXPECT_NE(nhwc.profile.find("input 0, output 0 in NHWC"), std::string::npos) << nhwc.profile;
}

TEST(LayoutChains, AGraphOutputStaysPlain) {
  const Tensor x = randomTensor({2, 8, 10, 10}, 8, -4.0f, 4.0f);
  const auto m = block(true);
  SessionOptions o;
  auto s = InferenceSession::create(m, o);
  ASSERT_TRUE(s.ok()) << s.message();
  auto r = (*s)->run({{"x", x}});
  ASSERT_TRUE(r.ok()) << r.message();
  SessionOptions u;
  u.fuse = false;
  auto su = InferenceSession::create(m, u);
  ASSERT_TRUE(su.ok());
  auto ru = (*su)->run({{"x", x}});
  ASSERT_TRUE(ru.ok());
  // r1 is read back by the caller in NCHW, and the residual Add reads it with c3.
  EXPECT_EQ(maxDiff(r->at("r1"), ru->at("r1")), 0.0f);
  EXPECT_LT(maxDiff(r->at("y"), ru->at("y")), 1e-5f);
}

// SiLU as exporters write it, Mul(v, Sigmoid(v)) after a convolution, runs as the
// convolution's Swish post-op; the chain around it stays NHWC.
TEST(LayoutChains, SiluAfterAConvolutionIsFused) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {1, 16, 6, 6});
  addValue(g->add_output(), "y", {1, 16, 1, 1});
  addInit(g, "w1", randomTensor({16, 16, 1, 1}, 11, -0.4f, 0.4f));
  addInit(g, "w2", randomTensor({16, 16, 1, 1}, 12, -0.4f, 0.4f));
  addNode(g, "Conv", {"x", "w1"}, {"c1"});
  addNode(g, "Sigmoid", {"c1"}, {"s1"});
  addNode(g, "Mul", {"s1", "c1"}, {"m1"});
  addNode(g, "Conv", {"m1", "w2"}, {"c2"});
  addNode(g, "GlobalAveragePool", {"c2"}, {"y"});
  const Tensor x = randomTensor({1, 16, 6, 6}, 13, -3.0f, 3.0f);
  const Outcome fused = run(m, x, true, true), unfused = run(m, x, false, false);
  ASSERT_TRUE(fused.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(fused.y, unfused.y), 1e-5f);
  EXPECT_EQ(fused.profile.find("Sigmoid"), std::string::npos) << fused.profile;
  EXPECT_EQ(fused.profile.find("Mul"), std::string::npos) << fused.profile;
  EXPECT_NE(fused.profile.find("(Conv; output 0 in NHWC)"), std::string::npos) << fused.profile;
}

// Squeeze-and-excitation as EfficientNet has it: the block's tensor x is pooled to one value per
// channel, two 1x1 convolutions make a per-channel scale s, and Mul(x, s) rescales x. Global
// pooling and the per-channel Mul read x in NHWC, so the chain does not break there.
TEST(LayoutChains, SqueezeExcitationStaysNhwc) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 16, 7, 7});
  addValue(g->add_output(), "y", {2, 8, 1, 1});
  addInit(g, "w1", randomTensor({16, 16, 1, 1}, 41, -0.4f, 0.4f));
  addInit(g, "ws", randomTensor({4, 16, 1, 1}, 42, -0.4f, 0.4f));
  addInit(g, "we", randomTensor({16, 4, 1, 1}, 43, -0.4f, 0.4f));
  addInit(g, "w2", randomTensor({8, 16, 1, 1}, 44, -0.4f, 0.4f));
  addNode(g, "Conv", {"x", "w1"}, {"c1"});
  addNode(g, "Relu", {"c1"}, {"a"});
  addNode(g, "GlobalAveragePool", {"a"}, {"p"});
  addNode(g, "Conv", {"p", "ws"}, {"sq"});
  addNode(g, "Relu", {"sq"}, {"sqr"});
  addNode(g, "Conv", {"sqr", "we"}, {"ex"});
  addNode(g, "Sigmoid", {"ex"}, {"s"});
  addNode(g, "Mul", {"s", "a"}, {"scaled"});  // the per-channel operand first
  addNode(g, "Conv", {"scaled", "w2"}, {"c2"});
  addNode(g, "GlobalAveragePool", {"c2"}, {"y"});
  const Tensor x = randomTensor({2, 16, 7, 7}, 45, -2.0f, 2.0f);
  const Outcome nhwc = run(m, x, true, true), plain = run(m, x, true, false),
                unfused = run(m, x, false, false);
  ASSERT_TRUE(nhwc.y.defined() && plain.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(nhwc.y, plain.y), 1e-6f);
  EXPECT_LT(maxDiff(nhwc.y, unfused.y), 1e-5f);
  EXPECT_NE(nhwc.profile.find("(GlobalAveragePool; input 0 in NHWC)"), std::string::npos)
      << nhwc.profile;
  EXPECT_NE(nhwc.profile.find("(Mul; input 1 in NHWC)"), std::string::npos) << nhwc.profile;
  EXPECT_NE(nhwc.profile.find("(Conv; input 0 in NHWC)"), std::string::npos) << nhwc.profile;
}

// The per-channel operations of a chain on planes large enough for nChw16c (which oneDNN's
// binary primitive has no fast kernel for, so they run on the host): squeeze-and-excitation's
// Mul by a per-image scale, a Div by per-channel constants and a Sub of one constant broadcast
// everywhere, each the same as on plain tensors; and SiLU after a convolution of that size
// (applied after the primitive on AVX-512 machines).
TEST(LayoutChains, PerChannelOperationsOnLargePlanes) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {8, 16, 56, 56});
  addValue(g->add_output(), "y", {8, 8, 1, 1});
  addInit(g, "w1", randomTensor({32, 16, 1, 1}, 51, -0.4f, 0.4f));
  addInit(g, "ws", randomTensor({8, 32, 1, 1}, 52, -0.4f, 0.4f));
  addInit(g, "we", randomTensor({32, 8, 1, 1}, 53, -0.4f, 0.4f));
  addInit(g, "k", randomTensor({1, 32, 1, 1}, 54, 0.5f, 2.0f));
  addInit(g, "shift", randomTensor({1}, 55, -1.0f, 1.0f));
  addInit(g, "w2", randomTensor({8, 32, 1, 1}, 56, -0.4f, 0.4f));
  addNode(g, "Conv", {"x", "w1"}, {"c1"});
  addNode(g, "Sigmoid", {"c1"}, {"g1"});
  addNode(g, "Mul", {"c1", "g1"}, {"a"});
  addNode(g, "GlobalAveragePool", {"a"}, {"p"});
  addNode(g, "Conv", {"p", "ws"}, {"sq"});
  addNode(g, "Relu", {"sq"}, {"sqr"});
  addNode(g, "Conv", {"sqr", "we"}, {"ex"});
  addNode(g, "Sigmoid", {"ex"}, {"s"});
  addNode(g, "Mul", {"a", "s"}, {"scaled"});
  addNode(g, "Div", {"scaled", "k"}, {"divided"});
  addNode(g, "Sub", {"divided", "shift"}, {"moved"});
  addNode(g, "Conv", {"moved", "w2"}, {"c2"});
  addNode(g, "GlobalAveragePool", {"c2"}, {"y"});
  const Tensor x = randomTensor({8, 16, 56, 56}, 57, -3.0f, 3.0f);
  const Outcome nhwc = run(m, x, true, true), plain = run(m, x, true, false),
                unfused = run(m, x, false, false);
  ASSERT_TRUE(nhwc.y.defined() && plain.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(nhwc.y, plain.y), 1e-6f);
  EXPECT_LT(maxDiff(nhwc.y, unfused.y), 1e-5f);
  for (const char* op : {"(Mul; input 0 in nChw16c)", "(Div; input 0 in nChw16c)",
                         "(Sub; input 0 in nChw16c)", "(GlobalAveragePool; input 0 in nChw16c)"})
    EXPECT_NE(nhwc.profile.find(op), std::string::npos) << op << "\n" << nhwc.profile;
}

// At batch 8 on 56 x 56 planes the groups whose channels come in whole blocks of 16 hand over
// in nChw16c instead (oneDNN's blocked kernels are faster there), and a group of 24 channels
// stays NHWC: the convolutions between them read one layout and write the other, with a
// residual added across the boundary, global pooling and squeeze-and-excitation's Mul on the
// blocked tensors. All of it the same as with plain hand-overs and node by node.
TEST(LayoutChains, LargePlanesHandOverBlocked) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {8, 16, 56, 56});
  addValue(g->add_output(), "y", {8, 16, 1, 1});
  addInit(g, "w1", randomTensor({32, 16, 1, 1}, 61, -0.4f, 0.4f));
  addInit(g, "wd", randomTensor({32, 1, 3, 3}, 62, -0.5f, 0.5f));
  addInit(g, "w2", randomTensor({24, 32, 1, 1}, 63, -0.4f, 0.4f));
  addInit(g, "w3", randomTensor({32, 24, 1, 1}, 64, -0.4f, 0.4f));
  addInit(g, "ws", randomTensor({32, 32, 1, 1}, 65, -0.4f, 0.4f));
  addInit(g, "w4", randomTensor({16, 32, 3, 3}, 66, -0.2f, 0.2f));
  addInit(g, "lo", Tensor::scalar(DType::kFloat, 0.0));
  addInit(g, "hi", Tensor::scalar(DType::kFloat, 6.0));
  addNode(g, "Conv", {"x", "w1"}, {"c1"});
  addNode(g, "Clip", {"c1", "lo", "hi"}, {"a"});
  auto* dw = addNode(g, "Conv", {"a", "wd"}, {"c2"});
  attrInts(dw, "pads", {1, 1, 1, 1});
  attrI(dw, "group", 32);
  addNode(g, "Clip", {"c2", "lo", "hi"}, {"b"});
  addNode(g, "Conv", {"b", "w2"}, {"narrow"});  // 24 channels: NHWC
  addNode(g, "Conv", {"narrow", "w3"}, {"c3"});
  addNode(g, "Add", {"c3", "a"}, {"sum"});  // the residual, across the boundary
  addNode(g, "GlobalAveragePool", {"sum"}, {"p"});
  addNode(g, "Conv", {"p", "ws"}, {"e"});
  addNode(g, "Sigmoid", {"e"}, {"s"});
  addNode(g, "Mul", {"sum", "s"}, {"scaled"});
  auto* down = addNode(g, "Conv", {"scaled", "w4"}, {"c4"});
  attrInts(down, "pads", {1, 1, 1, 1});
  attrInts(down, "strides", {2, 2});
  addNode(g, "GlobalAveragePool", {"c4"}, {"y"});
  const Tensor x = randomTensor({8, 16, 56, 56}, 67, -2.0f, 2.0f);
  const Outcome chained = run(m, x, true, true), plain = run(m, x, true, false),
                unfused = run(m, x, false, false);
  ASSERT_TRUE(chained.y.defined() && plain.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(chained.y, plain.y), 2e-5f);
  EXPECT_LT(maxDiff(chained.y, unfused.y), 2e-5f);
  for (const char* node :
       {"(Conv; input 0, output 0 in nChw16c)", "(Conv; input 0 in nChw16c; output 0 in NHWC)",
        "(Conv; output 0 in nChw16c; input 0 in NHWC)", "(Mul; input 0 in nChw16c)",
        "(GlobalAveragePool; input 0 in nChw16c)"})
    EXPECT_NE(chained.profile.find(node), std::string::npos) << node << "\n" << chained.profile;
}

// A stem (a convolution of the image with its max pooling fused in) whose pooled output starts
// a blocked group: the pooling writes nChw16c.
TEST(LayoutChains, PooledStemHandsOverBlocked) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {8, 3, 112, 112});
  addValue(g->add_output(), "y", {8, 32, 1, 1});
  addInit(g, "w1", randomTensor({16, 3, 3, 3}, 71, -0.4f, 0.4f));
  addInit(g, "w2", randomTensor({32, 16, 1, 1}, 72, -0.4f, 0.4f));
  attrInts(addNode(g, "Conv", {"x", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  addNode(g, "Relu", {"c1"}, {"r1"});
  auto* pool = addNode(g, "MaxPool", {"r1"}, {"p1"});
  attrInts(pool, "kernel_shape", {2, 2});
  attrInts(pool, "strides", {2, 2});
  addNode(g, "Conv", {"p1", "w2"}, {"c2"});
  addNode(g, "GlobalAveragePool", {"c2"}, {"y"});
  const Tensor x = randomTensor({8, 3, 112, 112}, 73, -2.0f, 2.0f);
  const Outcome chained = run(m, x, true, true), plain = run(m, x, true, false),
                unfused = run(m, x, false, false);
  ASSERT_TRUE(chained.y.defined() && plain.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(chained.y, plain.y), 1e-5f);
  EXPECT_LT(maxDiff(chained.y, unfused.y), 1e-5f);
  EXPECT_NE(chained.profile.find("(Conv; output 0 in nChw16c)"), std::string::npos)
      << chained.profile;
  EXPECT_EQ(chained.profile.find("(MaxPool"), std::string::npos) << chained.profile;
}

// A Fire module (SqueezeNet) and an Inception-like join: two branches' channels concatenated,
// then pooled over windows, keep the chain's layout instead of going plain and back: NHWC for
// small planes and odd channel counts, nChw16c for large planes of whole blocks. Edge shapes:
// odd planes, a ceil-mode window past the edge, average pooling with padding counted or not.
// (A pooling keeps one layout on both sides: blocked only where its output's planes are large
// too.)
// `k3`: the second branch's window (3; 1 keeps a dense 3x3 of whole blocks, which runs Winograd
// in NHWC, out of a blocked group).
onnx::ModelProto joinAndPool(const Shape& xs, int64_t squeeze, int64_t e1, int64_t e3, int64_t k3,
                             bool average, bool includePad) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", xs);
  addValue(g->add_output(), "y", {xs[0], 8, 1, 1});
  addInit(g, "ws", randomTensor({squeeze, xs[1], 1, 1}, 81, -0.4f, 0.4f));
  addInit(g, "w1", randomTensor({e1, squeeze, 1, 1}, 82, -0.4f, 0.4f));
  addInit(g, "w3", randomTensor({e3, squeeze, k3, k3}, 83, -0.2f, 0.2f));
  addInit(g, "wo", randomTensor({8, e1 + e3, 1, 1}, 84, -0.3f, 0.3f));
  addNode(g, "Conv", {"x", "ws"}, {"s"});
  addNode(g, "Relu", {"s"}, {"sr"});
  addNode(g, "Conv", {"sr", "w1"}, {"a"});
  addNode(g, "Relu", {"a"}, {"ar"});
  const int64_t half = k3 / 2;
  attrInts(addNode(g, "Conv", {"sr", "w3"}, {"b"}), "pads", {half, half, half, half});
  addNode(g, "Relu", {"b"}, {"br"});
  attrI(addNode(g, "Concat", {"ar", "br"}, {"cat"}), "axis", 1);
  auto* pool = addNode(g, average ? "AveragePool" : "MaxPool", {"cat"}, {"p"});
  attrInts(pool, "kernel_shape", {3, 3});
  attrInts(pool, "strides", {2, 2});
  attrI(pool, "ceil_mode", 1);
  if (average) {
    attrInts(pool, "pads", {1, 1, 1, 1});
    attrI(pool, "count_include_pad", includePad ? 1 : 0);
  }
  addNode(g, "Conv", {"p", "wo"}, {"o"});
  addNode(g, "GlobalAveragePool", {"o"}, {"y"});
  return m;
}

TEST(LayoutChains, JoinedChannelsAndPoolingKeepTheChainsLayout) {
  struct Case {
    Shape x;
    int64_t squeeze, e1, e3, k3;
    bool average, includePad;
    const char* layout;
  };
  for (const Case& c : {Case{{1, 24, 13, 13}, 16, 24, 20, 3, false, false, "NHWC"},
                        Case{{2, 12, 15, 11}, 8, 12, 12, 3, true, true, "NHWC"},
                        Case{{1, 16, 9, 9}, 8, 8, 16, 3, true, false, "NHWC"},
                        Case{{8, 16, 113, 113}, 16, 32, 32, 1, false, false, "nChw16c"},
                        Case{{8, 16, 112, 112}, 16, 16, 32, 1, true, true, "nChw16c"}}) {
    const auto m = joinAndPool(c.x, c.squeeze, c.e1, c.e3, c.k3, c.average, c.includePad);
    const Tensor x = randomTensor(c.x, 85, -2.0f, 2.0f);
    const Outcome chained = run(m, x, true, true), plain = run(m, x, true, false),
                  unfused = run(m, x, false, false);
    ASSERT_TRUE(chained.y.defined() && plain.y.defined() && unfused.y.defined());
    EXPECT_LT(maxDiff(chained.y, plain.y), 1e-5f) << c.layout;
    EXPECT_LT(maxDiff(chained.y, unfused.y), 1e-5f) << c.layout;
    const std::string pool = std::string(c.average ? "(AveragePool" : "(MaxPool") +
                             "; input 0, output 0 in " + c.layout + ")";
    for (const std::string& node : {std::string("(Concat; output 0 in ") + c.layout + ")", pool})
      EXPECT_NE(chained.profile.find(node), std::string::npos) << node << "\n" << chained.profile;
  }
}

// DenseNet's layers normalize before they convolve (BN -> Relu -> Conv on a concatenation) and
// its transitions pool through torch's Pad of zeros: the normalization takes the Relu and the
// chain's layout, and the Pad becomes an Identity that keeps it.
TEST(LayoutChains, PreActivationNormalizationAndZeroPadStayInTheChain) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {1, 16, 14, 14});
  addValue(g->add_output(), "y", {1, 8, 1, 1});
  addInit(g, "w0", randomTensor({16, 16, 1, 1}, 90, -0.3f, 0.3f));
  addInit(g, "w1", randomTensor({24, 16, 3, 3}, 91, -0.2f, 0.2f));
  addInit(g, "scale", randomTensor({40}, 92, 0.5f, 1.5f));
  addInit(g, "bias", randomTensor({40}, 93, -0.5f, 0.5f));
  addInit(g, "mean", randomTensor({40}, 94, -0.3f, 0.3f));
  addInit(g, "var", randomTensor({40}, 95, 0.5f, 2.0f));
  addInit(g, "w2", randomTensor({32, 40, 1, 1}, 96, -0.3f, 0.3f));
  addInit(g, "zeros", Tensor::fromVector<int64_t>(std::vector<int64_t>(8, 0), {8}));
  addInit(g, "w3", randomTensor({8, 32, 1, 1}, 97, -0.3f, 0.3f));
  addNode(g, "Conv", {"x", "w0"}, {"c0"});
  attrInts(addNode(g, "Conv", {"c0", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  attrI(addNode(g, "Concat", {"c0", "c1"}, {"cat"}), "axis", 1);
  addNode(g, "BatchNormalization", {"cat", "scale", "bias", "mean", "var"}, {"n"});
  addNode(g, "Relu", {"n"}, {"r"});
  addNode(g, "Conv", {"r", "w2"}, {"c2"});
  addNode(g, "Pad", {"c2", "zeros"}, {"padded"});
  auto* pool = addNode(g, "AveragePool", {"padded"}, {"p"});
  attrInts(pool, "kernel_shape", {2, 2});
  attrInts(pool, "strides", {2, 2});
  addNode(g, "Conv", {"p", "w3"}, {"c3"});
  addNode(g, "GlobalAveragePool", {"c3"}, {"y"});
  const Tensor x = randomTensor({1, 16, 14, 14}, 98, -2.0f, 2.0f);
  const Outcome chained = run(m, x, true, true), plain = run(m, x, true, false),
                unfused = run(m, x, false, false);
  ASSERT_TRUE(chained.y.defined() && plain.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(chained.y, plain.y), 1e-5f);
  EXPECT_LT(maxDiff(chained.y, unfused.y), 1e-5f);
  for (const char* node : {"(BatchNormalization; input 0 in NHWC)", "(Identity)",
                           "(AveragePool; input 0, output 0 in NHWC)"})
    EXPECT_NE(chained.profile.find(node), std::string::npos) << node << "\n" << chained.profile;
  for (const char* op : {"(Relu", "(Pad"})
    EXPECT_EQ(chained.profile.find(op), std::string::npos) << op << "\n" << chained.profile;
}

// A normalization whose fused Relu the reference kernel computes (ranks oneDNN does not take)
// still applies it.
TEST(LayoutChains, FusedReluOfANormalizationOnTheReferenceKernel) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  const Shape xs{1, 3, 2, 2, 2, 3};
  addValue(g->add_input(), "x", xs);
  addValue(g->add_output(), "y", xs);
  addInit(g, "scale", randomTensor({3}, 101, 0.5f, 1.5f));
  addInit(g, "bias", randomTensor({3}, 102, -0.5f, 0.5f));
  addInit(g, "mean", randomTensor({3}, 103, -0.3f, 0.3f));
  addInit(g, "var", randomTensor({3}, 104, 0.5f, 2.0f));
  addNode(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"n"});
  addNode(g, "Relu", {"n"}, {"y"});
  const Tensor x = randomTensor(xs, 105, -2.0f, 2.0f);
  const Outcome fused = run(m, x, true, true), unfused = run(m, x, false, false);
  ASSERT_TRUE(fused.y.defined() && unfused.y.defined());
  EXPECT_LT(maxDiff(fused.y, unfused.y), 1e-6f);
  EXPECT_EQ(fused.profile.find("Relu"), std::string::npos) << fused.profile;
}

// A Linear layer as exporters write it on [seq, batch, features]: MatMul by a 2-D weight, then
// Add of the bias (either operand order), then Relu or SiLU (Mul(v, Sigmoid(v))). The bias
// becomes the matmul's, the activation its post-op, and the batch of A is folded into one
// product; all of it against float64.
TEST(InferenceFusion, LinearLayerMatchesFloat64) {
  const int64_t S = 5, Bt = 3, K = 7, N = 6;
  const Tensor x = randomTensor({S, Bt, K}, 21), w = randomTensor({K, N}, 22),
               bias = randomTensor({N}, 23);
  for (bool silu : {false, true})
    for (bool biasFirst : {false, true}) {
      auto m = emptyModel();
      auto* g = m.mutable_graph();
      addValue(g->add_input(), "x", {S, Bt, K});
      addValue(g->add_output(), "y", {S, Bt, N});
      addInit(g, "w", w);
      addInit(g, "bias", bias);
      addNode(g, "MatMul", {"x", "w"}, {"mm"});
      addNode(g, "Add",
              biasFirst ? std::vector<std::string>{"bias", "mm"}
                        : std::vector<std::string>{"mm", "bias"},
              {"lin"});
      if (silu) {
        addNode(g, "Sigmoid", {"lin"}, {"gate"});
        addNode(g, "Mul", {"lin", "gate"}, {"y"});
      } else {
        addNode(g, "Relu", {"lin"}, {"y"});
      }
      const Outcome fused = run(m, x, true, true), unfused = run(m, x, false, false);
      ASSERT_TRUE(fused.y.defined() && unfused.y.defined());
      for (const char* op : {"(Add", "(Relu", "(Sigmoid", "(Mul"})
        EXPECT_EQ(fused.profile.find(op), std::string::npos) << op << "\n" << fused.profile;
      for (const Tensor* got : {&fused.y, &unfused.y})
        for (int64_t r = 0; r < S * Bt; ++r)
          for (int64_t j = 0; j < N; ++j) {
            double v = bias.data<float>()[j];
            for (int64_t k = 0; k < K; ++k)
              v += double(x.data<float>()[r * K + k]) * w.data<float>()[k * N + j];
            const double want = silu ? v / (1 + std::exp(-v)) : std::max(v, 0.0);
            EXPECT_NEAR(got->data<float>()[r * N + j], want, 1e-5)
                << "row " << r << " column " << j << (got == &fused.y ? " fused" : " unfused")
                << (silu ? " SiLU" : " Relu");
          }
    }
}

// A batch-1 classifier, Gemm(x, W, C) with transB (row dot products on AVX-512 machines): C
// of the output's width or one value, a fused Relu, and alpha other than 1 (oneDNN's matmul),
// each against float64.
TEST(InferenceFusion, BatchOneClassifierMatchesFloat64) {
  const int64_t K = 100, N = 37;
  const Tensor x = randomTensor({1, K}, 31), w = randomTensor({N, K}, 32),
               cRow = randomTensor({N}, 33), cOne = randomTensor({1}, 34);
  for (int variant = 0; variant < 4; ++variant) {
    const bool scalarC = variant == 1, relu = variant == 2, scaled = variant == 3;
    const Tensor& c = scalarC ? cOne : cRow;
    auto m = emptyModel();
    auto* g = m.mutable_graph();
    addValue(g->add_input(), "x", {1, K});
    addValue(g->add_output(), "y", {1, N});
    addInit(g, "w", w);
    addInit(g, "c", c);
    auto* gemm = addNode(g, "Gemm", {"x", "w", "c"}, {relu ? "lin" : "y"});
    attrI(gemm, "transB", 1);
    if (scaled) attrF(gemm, "alpha", 0.5f);
    if (relu) addNode(g, "Relu", {"lin"}, {"y"});
    const Outcome fused = run(m, x, true, true);
    ASSERT_TRUE(fused.y.defined());
    for (int64_t n = 0; n < N; ++n) {
      double v = 0;
      for (int64_t k = 0; k < K; ++k) v += double(x.data<float>()[k]) * w.data<float>()[n * K + k];
      v = v * (scaled ? 0.5 : 1.0) + c.data<float>()[scalarC ? 0 : n];
      EXPECT_NEAR(fused.y.data<float>()[n], relu ? std::max(v, 0.0) : v, 1e-5)
          << "variant " << variant << " column " << n;
    }
  }
}

}  // namespace
