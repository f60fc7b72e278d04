// Engine tests beyond conformance: fused oneDNN primitives agree with the unfused graph, the
// oneDNN and plain C++ RNN paths agree, and oversized runtime tensors are refused cleanly.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <omp.h>

#include <cmath>
#include <optional>
#include <random>

#include "engine/fusion/fused.h"
#include "engine/fusion/fusion.h"
#include "engine/session.h"
#include "nodes/catalogue.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;

namespace {

using test::addInit;
using test::addNode;
using test::addValue;
using test::attrF;
using test::attrI;
using test::attrInts;
using test::attrS;
using test::emptyModel;
using test::maxDiff;
using test::randomTensor;

Tensor runOnce(const onnx::ModelProto& m, const std::map<std::string, Tensor>& in, bool fuse,
               const std::string& out) {
  SessionOptions o;
  o.fuse = fuse;
  auto s = InferenceSession::create(m, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return Tensor();
  auto r = (*s)->run(in);
  EXPECT_TRUE(r.ok()) << r.message();
  if (!r.ok()) return Tensor();
  return r->at(out);
}

}  // namespace

// Conv -> BatchNormalization -> Relu -> MaxPool and Gemm -> LeakyRelu become fused oneDNN
// kernels (folded BN, eltwise post-ops, pooling in the blocked layout); the result must equal
// the node-by-node graph.
// Conv(c input channels)+BatchNormalization+Relu+MaxPool, then Gemm+LeakyRelu, fused against
// unfused. One input channel takes the direct loops with the pool applied per plane.
void checkConvChainFusion(int64_t c) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, c, 8, 8});
  addValue(g->add_output(), "y", {2, 5});
  addInit(g, "w", randomTensor({4, c, 3, 3}, 1));
  addInit(g, "b", randomTensor({4}, 2));
  addInit(g, "scale", randomTensor({4}, 3, 0.5f, 1.5f));
  addInit(g, "shift", randomTensor({4}, 4));
  addInit(g, "mean", randomTensor({4}, 5));
  addInit(g, "var", randomTensor({4}, 6, 0.5f, 2.0f));
  addInit(g, "fw", randomTensor({5, 4 * 4 * 4}, 7, -0.1f, 0.1f));
  addInit(g, "fb", randomTensor({5}, 8));
  attrInts(addNode(g, "Conv", {"x", "w", "b"}, {"c"}), "pads", {1, 1, 1, 1});
  addNode(g, "BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"});
  addNode(g, "Relu", {"bn"}, {"r"});
  auto* pool = addNode(g, "MaxPool", {"r"}, {"p"});
  for (const char* name : {"kernel_shape", "strides"}) attrInts(pool, name, {2, 2});
  addNode(g, "Flatten", {"p"}, {"f"});
  attrI(addNode(g, "Gemm", {"f", "fw", "fb"}, {"gm"}), "transB", 1);
  attrF(addNode(g, "LeakyRelu", {"gm"}, {"y"}), "alpha", 0.2f);
  std::map<std::string, Tensor> in{{"x", randomTensor({2, c, 8, 8}, 9)}};
  Tensor fused = runOnce(m, in, true, "y");
  Tensor plain = runOnce(m, in, false, "y");
  ASSERT_TRUE(fused.defined() && plain.defined());
  EXPECT_LT(maxDiff(fused, plain), 1e-4f);
  bool anyNegative = false;
  for (int64_t i = 0; i < plain.size(); ++i) anyNegative |= plain.data<float>()[i] < 0;
  EXPECT_TRUE(anyNegative) << "LeakyRelu should leave negative values for this input";
}

TEST(Fusion, ConvBatchNormReluAndGemmActivationMatchUnfused) {
  checkConvChainFusion(3);
}

// The epilogues-only mode that the cuda backend asks for (Backend::Fusions::kConvEpilogue): the
// Conv absorbs the BatchNormalization and the Relu, which its kernel applies as one epilogue,
// and the Gemm its Relu (cuBLASLt's epilogue), but no MaxPool joins the Conv.
TEST(Fusion, EpiloguesOnlyLeavesPooling) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addNode(g, "Conv", {"x", "w", "b"}, {"c"});
  addNode(g, "BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"});
  addNode(g, "Relu", {"bn"}, {"r"});
  auto* pool = addNode(g, "MaxPool", {"r"}, {"p"});
  attrInts(pool, "kernel_shape", {2, 2});
  addNode(g, "Flatten", {"p"}, {"f"});
  addNode(g, "Gemm", {"f", "fw", "fb"}, {"gm"});
  addNode(g, "Relu", {"gm"}, {"y"});
  g->add_output()->set_name("y");
  dw::engine::fusion::PlanNodes nodes;
  for (const auto& n : g->node()) nodes.push_back({n, {{"", 17}}});
  dw::engine::fusion::ValueTypes types;
  for (const char* v : {"c", "bn", "r", "p", "f", "gm", "y"})
    types[v].mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  dw::engine::fusion::fuseForOneDnn(nodes, *g, types, /*epiloguesOnly=*/true);
  std::vector<std::string> ops;
  for (const auto& [n, opsets] : nodes) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Conv", "MaxPool", "Flatten", "Gemm"}));
  const auto f = dw::engine::fusion::fusedOf(nodes[0].first);
  EXPECT_TRUE(f.bnEpsilon.has_value());
  EXPECT_EQ(f.activation, "Relu");
  EXPECT_FALSE(f.hasMaxPool());
  EXPECT_EQ(nodes[0].first.output(0), "r");
  EXPECT_EQ(dw::engine::fusion::fusedOf(nodes[3].first).activation, "Relu");
  EXPECT_EQ(nodes[3].first.output(0), "y");
}

// A Gelu's approximate="tanh" travels with the fused activation: the kernels apply the tanh
// form, not the row's own erf one.
TEST(Fusion, FusedGeluKeepsItsApproximation) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addNode(g, "MatMul", {"x", "w"}, {"mm"});
  auto* gelu = addNode(g, "Gelu", {"mm"}, {"y"});
  auto* a = gelu->add_attribute();
  a->set_name("approximate");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("tanh");
  g->add_output()->set_name("y");
  dw::engine::fusion::PlanNodes nodes;
  for (const auto& n : g->node()) nodes.push_back({n, {{"", 20}}});
  dw::engine::fusion::ValueTypes types;
  for (const char* v : {"mm", "y"})
    types[v].mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  dw::engine::fusion::fuseForOneDnn(nodes, *g, types);
  ASSERT_EQ(nodes.size(), 1u);
  auto u = dw::engine::fusion::activationOf(dw::engine::fusion::fusedOf(nodes[0].first));
  ASSERT_TRUE(u.ok()) << u.message();
  EXPECT_EQ(u->fn, dw::ops::UnaryFn::kGeluTanh);
}

// Training graphs of Linear layers (fuseMatMulGradients, then the epilogues): the Relu's
// gradient reads the Relu's output, the Relu joins the Gemm before it, and each bias gradient
// (SumToShape) becomes the second output of the Gemm that computes its weight's gradient from
// the same dY: dY as A transposed (y = x W^T, W's gradient dY^T x) or as B (y = x W, W's
// gradient x^T dY).
TEST(Fusion, LinearLayerGradientsJoinTheirProducts) {
  for (const bool transB : {true, false}) {
    SCOPED_TRACE(transB ? "transB" : "plain");
    auto m = emptyModel();
    auto* g = m.mutable_graph();
    const std::string kGrad = dw::kGradDomain;
    attrI(addNode(g, "Gemm", {"x", "w", "b"}, {"h"}), "transB", transB);
    addNode(g, "Relu", {"h"}, {"r"});
    auto* ug = addNode(g, "UnaryGrad", {"dr", "h", "r"}, {"dh"});
    ug->set_domain(kGrad);
    auto* op = ug->add_attribute();
    op->set_name("op");
    op->set_type(onnx::AttributeProto::STRING);
    op->set_s("Relu");
    if (transB) {
      attrI(addNode(g, "Gemm", {"dh", "x"}, {"dw"}), "transA", 1);
    } else {
      attrI(addNode(g, "Gemm", {"x", "dh"}, {"dw"}), "transA", 1);
    }
    addNode(g, "SumToShape", {"dh", "b"}, {"db"})->set_domain(kGrad);
    attrI(addNode(g, "Gemm", {"dh", "w"}, {"dx"}), "transB", transB ? 0 : 1);
    for (const char* o : {"r", "dw", "db", "dx"}) g->add_output()->set_name(o);
    dw::engine::fusion::PlanNodes nodes;
    for (const auto& n : g->node()) nodes.push_back({n, {{"", 17}, {kGrad, 1}}});
    dw::engine::fusion::ValueTypes types;
    auto setType = [&](const char* v, std::vector<int64_t> dims) {
      auto* t = types[v].mutable_tensor_type();
      t->set_elem_type(onnx::TensorProto::FLOAT);
      for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    };
    setType("h", {6, 5});
    setType("r", {6, 5});
    setType("dh", {6, 5});
    setType("db", {5});
    setType("dw", transB ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5});
    dw::engine::fusion::fuseMatMulGradients(nodes, types, /*biasGradients=*/true);
    dw::engine::fusion::fuseForOneDnn(nodes, *g, types, /*epiloguesOnly=*/true);
    std::vector<std::string> ops;
    for (const auto& [n, opsets] : nodes) ops.push_back(n.op_type());
    EXPECT_EQ(ops, (std::vector<std::string>{"Gemm", "UnaryGrad", "Gemm", "Gemm"}));
    ASSERT_EQ(nodes.size(), 4u);
    EXPECT_EQ(nodes[0].first.output(0), "r");
    EXPECT_EQ(dw::engine::fusion::fusedOf(nodes[0].first).activation, "Relu");
    EXPECT_EQ(nodes[1].first.input(1), "r");
    const auto& dwGemm = nodes[2].first;
    ASSERT_EQ(dwGemm.output_size(), 2);
    EXPECT_EQ(dwGemm.output(1), "db");
    EXPECT_EQ(dw::engine::fusion::fusedOf(dwGemm).biasGradOf, transB ? 0 : 1);
    EXPECT_EQ(nodes[3].first.output_size(), 1);
  }
}

TEST(Fusion, SingleChannelConvChainMatchesUnfused) {
  checkConvChainFusion(1);
}

// Batched float32 3x3 / stride 1 convolutions run oneDNN's Winograd kernel (kernels.cpp): its
// result must stay within float32 rounding of the definition, computed here in double, with
// and without the fused Relu + MaxPool, at a batch that stays on the direct kernel, and with
// weights that are initializers (transformed once, forward_inference) or graph inputs, as in
// training (transformed inside the kernel on every run, forward_training).
TEST(ConvAlgorithms, BatchedConv3x3MatchesFloat64Reference) {
  const int64_t C = 16, OC = 24, H = 9, W = 11;
  const Tensor w = randomTensor({OC, C, 3, 3}, 21), b = randomTensor({OC}, 22);
  for (int64_t N : {int64_t{4}, int64_t{16}}) {
    const Tensor x = randomTensor({N, C, H, W}, 20);
    // ref[n][o][h][w] and the sum of |terms| that bounds its rounding error.
    std::vector<double> ref(N * OC * H * W), mag(ref.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t v = 0; v < W; ++v) {
            double s = b.data<float>()[o], a = std::fabs(s);
            for (int64_t c = 0; c < C; ++c)
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t ih = h + i - 1, iw = v + j - 1;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  const double t = double(w.data<float>()[((o * C + c) * 3 + i) * 3 + j]) *
                                   x.data<float>()[((n * C + c) * H + ih) * W + iw];
                  s += t;
                  a += std::fabs(t);
                }
            ref[((n * OC + o) * H + h) * W + v] = s;
            mag[((n * OC + o) * H + h) * W + v] = a;
          }
    for (const auto& [pool, weightsIn] :
         {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
      auto m = emptyModel();
      auto* g = m.mutable_graph();
      const int64_t PH = H / 2, PW = W / 2;
      addValue(g->add_input(), "x", {N, C, H, W});
      addValue(g->add_output(), "y", pool ? Shape{N, OC, PH, PW} : Shape{N, OC, H, W});
      if (weightsIn) {
        addValue(g->add_input(), "w", w.shape());
        addValue(g->add_input(), "b", b.shape());
      } else {
        addInit(g, "w", w);
        addInit(g, "b", b);
      }
      attrInts(addNode(g, "Conv", {"x", "w", "b"}, {pool ? "c" : "y"}), "pads", {1, 1, 1, 1});
      if (pool) {
        addNode(g, "Relu", {"c"}, {"r"});
        auto* mp = addNode(g, "MaxPool", {"r"}, {"y"});
        for (const char* name : {"kernel_shape", "strides"}) attrInts(mp, name, {2, 2});
      }
      std::map<std::string, Tensor> feeds{{"x", x}};
      if (weightsIn) feeds.insert({{"w", w}, {"b", b}});
      const Tensor y = runOnce(m, feeds, true, "y");
      ASSERT_TRUE(y.defined());
      for (int64_t p = 0; p < N * OC; ++p) {
        const int64_t oh = pool ? PH : H, ow = pool ? PW : W;
        for (int64_t h = 0; h < oh; ++h)
          for (int64_t v = 0; v < ow; ++v) {
            double want = 0, tol = 0;
            if (!pool) {
              want = ref[(p * H + h) * W + v];
              tol = mag[(p * H + h) * W + v];
            } else {
              want = -1e300;
              for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < 2; ++j) {
                  const int64_t k = (p * H + 2 * h + i) * W + 2 * v + j;
                  want = std::max(want, ref[k]);
                  tol = std::max(tol, mag[k]);
                }
              want = std::max(want, 0.0);
            }
            ASSERT_NEAR(y.data<float>()[(p * oh + h) * ow + v], want, 1e-6 * tol)
                << "batch " << N << " pool " << pool << " weights as inputs " << weightsIn
                << " plane " << p << " at " << h << "," << v;
          }
      }
    }
  }
}

// Training's batched 3x3 convolutions (weights given at run time, channels multiples of 16) run
// our Winograd F(4x4, 3x3) kernel (engine/onednn/winograd.cpp): against a float64 reference, on
// planes whose sides are and are not multiples of its 4 x 4 output tiles, with and without bias
// and a fused Relu, handing plain NCHW in and out. The 5 x 9 and 9 x 5 planes follow each other
// on purpose: their padded buffers are the same size but not the same layout, and each thread
// keeps its buffers between calls. Winograd's transforms cost some float32 accuracy: the bound
// is 4e-6 of the products' magnitudes (measured up to 2.1e-6).
TEST(ConvAlgorithms, WinogradMatchesFloat64Reference) {
  struct Case {
    int64_t N, C, OC, H, W;
    bool bias, relu;
  };
  for (const Case k : {Case{16, 32, 64, 14, 14, true, false}, Case{17, 16, 32, 9, 11, false, true},
                       Case{16, 48, 16, 5, 4, true, true}, Case{16, 16, 16, 5, 9, true, false},
                       Case{16, 16, 16, 9, 5, true, false}}) {
    const Tensor x = randomTensor({k.N, k.C, k.H, k.W}, 40),
                 w = randomTensor({k.OC, k.C, 3, 3}, 41), b = randomTensor({k.OC}, 42);
    auto m = emptyModel();
    auto* g = m.mutable_graph();
    addValue(g->add_input(), "x", x.shape());
    addValue(g->add_input(), "w", w.shape());
    if (k.bias) addValue(g->add_input(), "b", b.shape());
    addValue(g->add_output(), "y", {k.N, k.OC, k.H, k.W});
    std::vector<std::string> ins{"x", "w"};
    if (k.bias) ins.push_back("b");
    attrInts(addNode(g, "Conv", ins, {k.relu ? "c" : "y"}), "pads", {1, 1, 1, 1});
    if (k.relu) addNode(g, "Relu", {"c"}, {"y"});
    std::map<std::string, Tensor> feeds{{"x", x}, {"w", w}};
    if (k.bias) feeds.insert({"b", b});
    const Tensor y = runOnce(m, feeds, true, "y");
    ASSERT_TRUE(y.defined());
    const float *px = x.data<float>(), *pw = w.data<float>(), *pb = b.data<float>();
    for (int64_t n = 0; n < k.N; ++n)
      for (int64_t o = 0; o < k.OC; ++o)
        for (int64_t h = 0; h < k.H; ++h)
          for (int64_t v = 0; v < k.W; ++v) {
            double want = k.bias ? pb[o] : 0, mag = std::fabs(want);
            for (int64_t c = 0; c < k.C; ++c)
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t ih = h + i - 1, iw = v + j - 1;
                  if (ih < 0 || ih >= k.H || iw < 0 || iw >= k.W) continue;
                  const double t = double(pw[((o * k.C + c) * 3 + i) * 3 + j]) *
                                   px[((n * k.C + c) * k.H + ih) * k.W + iw];
                  want += t;
                  mag += std::fabs(t);
                }
            if (k.relu) want = std::max(want, 0.0);
            ASSERT_NEAR(y.data<float>()[((n * k.OC + o) * k.H + h) * k.W + v], want, 4e-6 * mag)
                << "N" << k.N << " C" << k.C << " OC" << k.OC << " " << k.H << "x" << k.W
                << " at image " << n << " channel " << o << " (" << h << ", " << v << ")";
          }
  }
}

// MatMul and Gemm pick oneDNN's sgemm for short reductions into wide outputs and the matmul
// primitive otherwise (kernels.cpp): both sides of that rule, every transpose and a Gemm alpha,
// against a float64 reference. The first two shapes fall on the sgemm side (short K, wide N, like
// a wide Dense layer's gradients), the last two on the primitive's (long K; too small).
TEST(MatMulAlgorithms, ShortAndLongReductionsMatchFloat64Reference) {
  struct Case {
    int64_t M, K, N;
  };
  for (const Case c : {Case{64, 128, 600}, Case{40, 64, 1000}, Case{32, 700, 48}, Case{5, 6, 7}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const bool gemm : {false, true}) {
          if (!gemm && (ta || tb)) continue;  // MatMul has no transposes
          const float alpha = gemm ? 0.5f : 1.0f;
          const Shape sa = ta ? Shape{c.K, c.M} : Shape{c.M, c.K};
          const Shape sb = tb ? Shape{c.N, c.K} : Shape{c.K, c.N};
          const Tensor a = randomTensor(sa, 31), b = randomTensor(sb, 32);
          auto m = emptyModel();
          auto* g = m.mutable_graph();
          addValue(g->add_input(), "a", sa);
          addValue(g->add_input(), "b", sb);
          addValue(g->add_output(), "y", {c.M, c.N});
          auto* n = addNode(g, gemm ? "Gemm" : "MatMul", {"a", "b"}, {"y"});
          if (gemm) {
            attrI(n, "transA", ta);
            attrI(n, "transB", tb);
            attrF(n, "alpha", alpha);
          }
          const Tensor y = runOnce(m, {{"a", a}, {"b", b}}, true, "y");
          ASSERT_TRUE(y.defined());
          const float* pa = a.data<float>();
          const float* pb = b.data<float>();
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < c.N; ++j) {
              double want = 0, mag = 0;
              for (int64_t k = 0; k < c.K; ++k) {
                const double t = double(ta ? pa[k * c.M + i] : pa[i * c.K + k]) *
                                 (tb ? pb[j * c.K + k] : pb[k * c.N + j]);
                want += t;
                mag += std::fabs(t);
              }
              ASSERT_NEAR(y.data<float>()[i * c.N + j], alpha * want, 1e-6 * mag)
                  << (gemm ? "Gemm" : "MatMul") << " M" << c.M << " K" << c.K << " N" << c.N
                  << " transA " << ta << " transB " << tb << " at " << i << "," << j;
            }
        }
}

// A value read by two nodes must not be fused away.
TEST(Fusion, SharedIntermediateStaysVisible) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "a", {3, 4});
  addValue(g->add_input(), "b", {4, 2});
  addValue(g->add_output(), "y", {3, 2});
  addValue(g->add_output(), "mm", {3, 2});
  addNode(g, "MatMul", {"a", "b"}, {"mm"});
  addNode(g, "Relu", {"mm"}, {"y"});
  SessionOptions o;
  auto s = InferenceSession::create(m, o);
  ASSERT_TRUE(s.ok()) << s.message();
  auto r = (*s)->run({{"a", randomTensor({3, 4}, 1)}, {"b", randomTensor({4, 2}, 2)}});
  ASSERT_TRUE(r.ok()) << r.message();
  const Tensor& mm = r->at("mm");
  const Tensor& y = r->at("y");
  bool negative = false;
  for (int64_t i = 0; i < mm.size(); ++i) {
    negative |= mm.data<float>()[i] < 0;
    EXPECT_EQ(y.data<float>()[i], std::max(mm.data<float>()[i], 0.0f));
  }
  EXPECT_TRUE(negative);
}

namespace {

// One LSTM/GRU/RNN node; a huge clip keeps the math identical but forces the plain C++ path.
onnx::ModelProto rnnModel(const std::string& op, const std::string& direction, bool clip, bool lbr,
                          int64_t T, int64_t B, int64_t I, int64_t H) {
  auto m = emptyModel(14);
  auto* g = m.mutable_graph();
  const int64_t G = op == "LSTM" ? 4 : (op == "GRU" ? 3 : 1);
  const int64_t D = direction == "bidirectional" ? 2 : 1;
  addValue(g->add_input(), "x", {T, B, I});
  addValue(g->add_input(), "h0", {D, B, H});
  addValue(g->add_output(), "y", {T, D, B, H});
  addValue(g->add_output(), "yh", {D, B, H});
  addInit(g, "w", randomTensor({D, G * H, I}, 11, -0.5f, 0.5f));
  addInit(g, "r", randomTensor({D, G * H, H}, 12, -0.5f, 0.5f));
  addInit(g, "bias", randomTensor({D, 2 * G * H}, 13, -0.5f, 0.5f));
  std::vector<std::string> ins{"x", "w", "r", "bias", "", "h0"};
  if (op == "LSTM") {
    addValue(g->add_input(), "c0", {D, B, H});
    addInit(g, "p", randomTensor({D, 3 * H}, 14, -0.5f, 0.5f));
    ins.push_back("c0");
    ins.push_back("p");
  }
  auto* n = addNode(g, op, ins, {"y", "yh"});
  attrI(n, "hidden_size", H);
  attrS(n, "direction", direction);
  if (lbr) attrI(n, "linear_before_reset", 1);
  if (clip) attrF(n, "clip", 1e30f);
  return m;
}

}  // namespace

TEST(Rnn, OneDnnAndPlainPathsAgree) {
  // Batches up to 16 run the plain loops either way (rnn.cpp's kSmallBatch).
  const int64_t T = 5, B = 17, I = 4, H = 6;
  for (std::string op : {"RNN", "GRU", "LSTM"})
    for (std::string dir : {"forward", "reverse", "bidirectional"})
      for (bool lbr : {false, true}) {
        if (lbr && op != "GRU") continue;
        const int64_t D = dir == "bidirectional" ? 2 : 1;
        std::map<std::string, Tensor> in{{"x", randomTensor({T, B, I}, 21)},
                                         {"h0", randomTensor({D, B, H}, 22)}};
        if (op == "LSTM") in["c0"] = randomTensor({D, B, H}, 23);
        for (const char* out : {"y", "yh"}) {
          Tensor dnnl = runOnce(rnnModel(op, dir, false, lbr, T, B, I, H), in, true, out);
          Tensor plain = runOnce(rnnModel(op, dir, true, lbr, T, B, I, H), in, true, out);
          ASSERT_TRUE(dnnl.defined() && plain.defined());
          EXPECT_LT(maxDiff(dnnl, plain), 1e-4f)
              << op << " " << dir << " lbr=" << lbr << " " << out;
        }
      }
}

// Small batches run the plain loops on one thread (rnn.cpp's kSmallBatch), batches of one or
// two with the transposed recurrent weights kept between runs; batch entry 0 of a batch of 17,
// which oneDNN's cells compute, must come out the same, run after run.
void smallBatchPathMatchesOneDnn(int64_t T, int64_t H);

// RNN and GRU batches of 4 and more split their rows over threads; an LSTM of 72 or 96 units
// splits its units (runUnitSplit) at every small batch (1, 2, 3 and 13 rows), over an odd number of
// steps (its h buffers swap), each thread projecting its units' inputs and adding the biases as
// it reads them. Its cells run in one pass (onednn::lstmCell) over whole vectors of units and a
// partial one (40 units on one thread, 36 a thread), and through the general loops where a clip
// (too large to change anything) asks for them.
TEST(Rnn, SmallBatchPathMatchesOneDnn) {
  for (const auto& [T, H] : std::vector<std::pair<int64_t, int64_t>>{{6, 40}, {7, 96}, {5, 72}})
    smallBatchPathMatchesOneDnn(T, H);
}

void smallBatchPathMatchesOneDnn(int64_t T, int64_t H) {
  const int64_t B = 17, I = 5;  // 4H = 160: full and partial 32-column blocks
  // Entries [0, n) of a [T|D, B, F] tensor as [T|D, n, F].
  auto firstN = [](const Tensor& t, int64_t n) {
    Tensor r(DType::kFloat, {t.dim(0), n, t.dim(2)});
    for (int64_t a = 0; a < t.dim(0); ++a)
      for (int64_t b = 0; b < n; ++b)
        for (int64_t f = 0; f < t.dim(2); ++f)
          r.data<float>()[(a * n + b) * t.dim(2) + f] =
              t.data<float>()[(a * t.dim(1) + b) * t.dim(2) + f];
    return r;
  };
  for (std::string op : {"RNN", "GRU", "LSTM"})
    for (std::string dir : {"forward", "bidirectional"})
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{13}})
        for (bool clip : {false, true}) {
          if (clip && op != "LSTM") continue;
          const int64_t D = dir == "bidirectional" ? 2 : 1;
          std::map<std::string, Tensor> in{{"x", randomTensor({T, B, I}, 31)},
                                           {"h0", randomTensor({D, B, H}, 32)}};
          if (op == "LSTM") in["c0"] = randomTensor({D, B, H}, 33);
          std::map<std::string, Tensor> few;
          for (const auto& [k, v] : in) few[k] = firstN(v, n);
          const Tensor big = runOnce(rnnModel(op, dir, false, false, T, B, I, H), in, true, "yh");
          SessionOptions o;
          auto s = InferenceSession::create(rnnModel(op, dir, clip, false, T, n, I, H), o);
          ASSERT_TRUE(s.ok()) << s.message();
          for (int run = 0; run < 2; ++run) {
            auto r = (*s)->run(few);
            ASSERT_TRUE(r.ok()) << r.message();
            const Tensor& yh = r->at("yh");
            for (int64_t d = 0; d < D; ++d)
              for (int64_t b = 0; b < n; ++b)
                for (int64_t h = 0; h < H; ++h)
                  EXPECT_NEAR(yh.data<float>()[(d * n + b) * H + h],
                              big.data<float>()[(d * B + b) * H + h], 1e-5)
                      << op << " " << dir << " batch " << n << " clip " << clip << " run " << run
                      << " direction " << d << " entry " << b << " unit " << h;
          }
        }
}

// Inside another parallel region OpenMP gives the LSTM's unit split (runUnitSplit) a team of
// one thread: that thread must take every block of units. It took only the block of its own
// number, and the other units' outputs were never written.
TEST(Rnn, UnitSplitTakesEveryBlockWithASmallerTeam) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "one core: the units are not split";
  const int64_t T = 7, B = 2, I = 5, H = 96;
  const std::map<std::string, Tensor> in{{"x", randomTensor({T, B, I}, 41)},
                                         {"h0", randomTensor({1, B, H}, 42)},
                                         {"c0", randomTensor({1, B, H}, 43)}};
  SessionOptions o;
  auto s = InferenceSession::create(rnnModel("LSTM", "forward", false, false, T, B, I, H), o);
  ASSERT_TRUE(s.ok()) << s.message();
  auto whole = (*s)->run(in);
  ASSERT_TRUE(whole.ok()) << whole.message();
  std::optional<dw::Result<std::map<std::string, Tensor>>> nested;
  omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    nested = (*s)->run(in);
  }
  ASSERT_TRUE(nested && nested->ok()) << (nested ? nested->message() : "");
  for (const char* out : {"y", "yh"})
    EXPECT_EQ(maxDiff(whole->at(out), (*nested)->at(out)), 0.0f) << out;
}

// A tensor whose size is only known at run time (ConstantOfShape of a huge shape) is refused
// with an error naming the node instead of being allocated.
TEST(Session, RefusesOversizedRuntimeTensors) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("shape");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  g->add_output()->set_name("y");
  addNode(g, "ConstantOfShape", {"shape"}, {"y"});
  SessionOptions o;
  o.memoryLimitBytes = size_t(1) << 30;
  auto s = InferenceSession::create(m, o);
  ASSERT_TRUE(s.ok()) << s.message();
  auto r = (*s)->run({{"shape", Tensor::fromVector(std::vector<int64_t>{1 << 20, 1 << 20}, {2})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("ConstantOfShape"), std::string::npos) << r.message();
  auto ok = (*s)->run({{"shape", Tensor::fromVector(std::vector<int64_t>{2, 3}, {2})}});
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->at("y").shape(), (Shape{2, 3}));
}

// Truncated protobuf bytes and a model whose node has a missing required input are errors.
TEST(Session, TruncatedAndInconsistentModelsAreErrors) {
  auto m = rnnModel("GRU", "forward", false, false, 2, 1, 3, 4);
  std::string bytes;
  m.SerializeToString(&bytes);
  onnx::ModelProto cut;
  bool runs = cut.ParseFromString(bytes.substr(0, bytes.size() / 2));
  if (runs) {
    auto s = InferenceSession::create(cut);
    runs = s.ok() && (*s)->run({{"x", Tensor(DType::kFloat, {2, 1, 3})},
                                {"h0", Tensor(DType::kFloat, {1, 1, 4})}})
                         .ok();
  }
  EXPECT_FALSE(runs);
  // W with the wrong gate count is reported at run time, naming the node.
  auto bad = rnnModel("GRU", "forward", false, false, 2, 1, 3, 4);
  bad.mutable_graph()->mutable_initializer(0)->set_dims(1, 5);
  bad.mutable_graph()->mutable_initializer(0)->mutable_float_data()->Truncate(15);
  auto s = InferenceSession::create(bad);
  std::string message = s.ok() ? "" : s.message();
  if (s.ok()) {
    auto r = (*s)->run(
        {{"x", Tensor(DType::kFloat, {2, 1, 3})}, {"h0", Tensor(DType::kFloat, {1, 1, 4})}});
    ASSERT_FALSE(r.ok());
    message = r.message();
  }
  EXPECT_NE(message.find("GRU"), std::string::npos) << message;
}
