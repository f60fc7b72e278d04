// Conv on float64, which oneDNN's kernel hands to the reference table's direct convolution
// (kernels/direct_conv.h): against oneDNN's float32 convolution of the same values (exact in
// both types) over groups, strides, dilations, asymmetric and automatic padding, 1-D to 3-D
// and a bias; and its errors. The float32 side includes the 1x1-over-1x1 products that skip
// oneDNN (runPointwise) and the 1x1 and depthwise convolutions between plain tensors
// (runPlain).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;

struct Case {
  Shape x, w;
  std::vector<onnx::AttributeProto> attrs;
  bool bias;
};

dw::Result<Tensor> run(const Case& c, int32_t type, const Tensor& x, const Tensor& w,
                       const Tensor& b) {
  return test::runOneNode("Conv", type, {x, w, c.bias ? b : Tensor()}, c.attrs);
}

// Values on a grid of 1/8, exact in float32 and float64.
template <class T>
Tensor grid(const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-16, 16);
  std::vector<T> v(static_cast<size_t>(numElements(s)));
  for (auto& x : v) x = static_cast<T>(d(rng) / 8.0);
  return Tensor::fromVector(v, s);
}

TEST(ConvFloat64, MatchesTheFloat32Convolution) {
  const std::vector<Case> cases{
      {{2, 4, 9, 8},
       {6, 2, 3, 3},
       {test::attribute("group", int64_t{2}),
        test::attribute("strides", std::vector<int64_t>{2, 1}),
        test::attribute("dilations", std::vector<int64_t>{1, 2}),
        test::attribute("pads", std::vector<int64_t>{1, 0, 2, 1})},
       true},
      {{1, 3, 11}, {5, 3, 4}, {test::attribute("auto_pad", std::string("SAME_LOWER"))}, false},
      {{1, 2, 4, 5, 6},
       {3, 2, 2, 3, 2},
       {test::attribute("kernel_shape", std::vector<int64_t>{2, 3, 2}),
        test::attribute("pads", std::vector<int64_t>{0, 1, 1, 1, 0, 0})},
       true},
      {{2, 6, 7, 7},
       {6, 1, 3, 3},
       {test::attribute("group", int64_t{6}),
        test::attribute("strides", std::vector<int64_t>{2, 2})},
       true},
      // 1x1 kernels over 1x1 inputs, which run as a small product on one thread: channel
      // counts off the 16-wide vectors and the 32-column blocks, batches of 1 to 9 (more than
      // the 8 rows a block holds), 1-D and 3-D, a stride that does not matter, and squeeze-
      // excitation's 1152 -> 48 (sums of up to 1152 products stay exact in float32 here).
      {{1, 5, 1, 1}, {7, 5, 1, 1}, {}, true},
      {{9, 48, 1, 1}, {33, 48, 1, 1}, {}, false},
      {{3, 20, 1}, {65, 20, 1}, {test::attribute("strides", std::vector<int64_t>{2})}, true},
      {{2, 17, 1, 1, 1}, {16, 17, 1, 1, 1}, {}, true},
      {{1, 1152, 1, 1}, {48, 1152, 1, 1}, {}, true},
      // 1x1 kernels over planes between plain NCHW tensors, a matrix product an image
      // (runPlain): odd channels and planes, several images, 1-D to 3-D, and a stride or a pad,
      // which oneDNN takes instead.
      {{2, 7, 5, 6}, {9, 7, 1, 1}, {}, true},
      {{1, 58, 28, 28}, {58, 58, 1, 1}, {}, false},
      {{3, 20, 11}, {13, 20, 1}, {}, true},
      {{2, 5, 3, 4, 5}, {6, 5, 1, 1, 1}, {}, true},
      {{64, 256, 1, 1}, {300, 256, 1, 1}, {}, true},  // one pixel, past runPointwise's size
      {{1, 8, 9, 9}, {4, 8, 1, 1}, {test::attribute("strides", std::vector<int64_t>{2, 2})}, true},
      {{1, 8, 5, 5},
       {4, 8, 1, 1},
       {test::attribute("pads", std::vector<int64_t>{1, 0, 0, 1})},
       true},
      // Depthwise ones between plain tensors, plane by plane (depthwise_planes.cpp): strides 1
      // and 2 (and 2 across only), windows 3 to 7, one-sided pads, planes wider than one group
      // of four vectors, and a stride of 3, which oneDNN takes instead.
      {{1, 3, 28, 28},
       {3, 1, 3, 3},
       {test::attribute("group", int64_t{3}),
        test::attribute("pads", std::vector<int64_t>{1, 1, 1, 1})},
       true},
      {{2, 4, 9, 70},
       {4, 1, 5, 5},
       {test::attribute("group", int64_t{4}),
        test::attribute("strides", std::vector<int64_t>{2, 2}),
        test::attribute("pads", std::vector<int64_t>{2, 2, 2, 2})},
       true},
      {{1, 2, 13, 130},
       {2, 1, 7, 7},
       {test::attribute("group", int64_t{2}),
        test::attribute("pads", std::vector<int64_t>{3, 0, 3, 5})},
       false},
      {{1, 5, 6, 6},
       {5, 1, 3, 3},
       {test::attribute("group", int64_t{5}),
        test::attribute("strides", std::vector<int64_t>{1, 2}),
        test::attribute("pads", std::vector<int64_t>{0, 1, 1, 0})},
       true},
      {{1, 4, 10, 10},
       {4, 1, 3, 3},
       {test::attribute("group", int64_t{4}),
        test::attribute("strides", std::vector<int64_t>{3, 3})},
       true},
  };
  std::mt19937 rng(3);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Tensor x = grid<double>(c.x, rng), w = grid<double>(c.w, rng),
                 b = grid<double>({c.w[0]}, rng);
    auto y64 = run(c, onnx::TensorProto::DOUBLE, x, w, b);
    ASSERT_TRUE(y64.ok()) << "case " << i << ": " << y64.message();
    ASSERT_EQ(y64->dtype(), DType::kDouble);
    auto toFloat = [](const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(t.size()));
      for (int64_t k = 0; k < t.size(); ++k) v[k] = static_cast<float>(t.data<double>()[k]);
      return Tensor::fromVector(v, t.shape());
    };
    auto y32 = run(c, onnx::TensorProto::FLOAT, toFloat(x), toFloat(w), toFloat(b));
    ASSERT_TRUE(y32.ok()) << "case " << i << ": " << y32.message();
    ASSERT_EQ(y64->shape(), y32->shape()) << "case " << i;
    for (int64_t k = 0; k < y64->size(); ++k)
      ASSERT_NEAR(y64->data<double>()[k], y32->data<float>()[k], 1e-5)
          << "case " << i << " at " << k;
  }
}

TEST(ConvFloat64, ErrorsNameWhatDoesNotFit) {
  std::mt19937 rng(4);
  const Case c{{1, 4, 5, 5}, {2, 3, 3, 3}, {}, false};
  auto y =
      run(c, onnx::TensorProto::DOUBLE, grid<double>(c.x, rng), grid<double>(c.w, rng), Tensor());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.message().find("do not match group 1"), std::string::npos) << y.message();
  const Case big{{1, 1, 2, 2}, {1, 1, 3, 3}, {}, false};
  y = run(big, onnx::TensorProto::DOUBLE, grid<double>(big.x, rng), grid<double>(big.w, rng),
          Tensor());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.message().find("larger than the padded input"), std::string::npos) << y.message();
}

}  // namespace

namespace {

// Conv (1152 -> 48 over a 1x1 input, weights `w` an initializer or, with weightsAsInput, an
// input) then Sigmoid, which the fusion pass folds into the Conv.
dw::Result<std::map<std::string, Tensor>> runSqueeze(const Tensor& x, const Tensor& w,
                                                     const Tensor& b, bool weightsAsInput,
                                                     bool fuse) {
  auto m = test::emptyModel();
  auto* g = m.mutable_graph();
  test::addValue(g->add_input(), "x", x.shape());
  if (weightsAsInput)
    test::addValue(g->add_input(), "w", w.shape());
  else
    test::addInit(g, "w", w);
  test::addInit(g, "b", b);
  auto* conv = g->add_node();
  conv->set_op_type("Conv");
  for (const char* in : {"x", "w", "b"}) conv->add_input(in);
  conv->add_output("z");
  auto* sig = g->add_node();
  sig->set_op_type("Sigmoid");
  sig->add_input("z");
  sig->add_output("y");
  test::addValue(g->add_output(), "y", {x.dim(0), w.dim(0), 1, 1});
  SessionOptions o;
  o.fuse = fuse;
  auto s = InferenceSession::create(m, o);
  if (!s) return s.status();
  std::map<std::string, Tensor> feeds{{"x", x}};
  if (weightsAsInput) feeds.emplace("w", w);
  auto first = (*s)->run(feeds);
  if (!first) return first.status();
  // A second run of the same session: constant weights come from its cache, input weights are
  // read again (here changed, then changed back).
  if (weightsAsInput) {
    Tensor other = test::randomTensor(w.shape(), 9);
    feeds["w"] = other;
    auto changed = (*s)->run(feeds);
    if (!changed) return changed.status();
    if (test::maxDiff(changed->at("y"), first->at("y")) == 0.0f)
      return dw::Status::error("the changed weights gave the same output");
    feeds["w"] = w;
  }
  return (*s)->run(feeds);
}

TEST(ConvPointwise, FusedActivationAndWeightsAcrossRuns) {
  const Tensor x = test::randomTensor({2, 1152, 1, 1}, 1),
               w = test::randomTensor({48, 1152, 1, 1}, 2, -0.05f, 0.05f),
               b = test::randomTensor({48}, 3);
  for (bool asInput : {false, true}) {
    auto fused = runSqueeze(x, w, b, asInput, true);
    ASSERT_TRUE(fused.ok()) << fused.message();
    auto plain = runSqueeze(x, w, b, asInput, false);
    ASSERT_TRUE(plain.ok()) << plain.message();
    // Against the definition in float64.
    const Tensor& y = fused->at("y");
    ASSERT_EQ(y.shape(), (Shape{2, 48, 1, 1}));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t o = 0; o < 48; ++o) {
        double z = b.data<float>()[o];
        for (int64_t c = 0; c < 1152; ++c)
          z += double(w.data<float>()[o * 1152 + c]) * x.data<float>()[n * 1152 + c];
        const double want = 1 / (1 + std::exp(-z));
        ASSERT_NEAR(y.data<float>()[n * 48 + o], want, 1e-6) << asInput << " " << n << " " << o;
        ASSERT_NEAR(plain->at("y").data<float>()[n * 48 + o], want, 1e-6);
      }
  }
}

// A 1x1 convolution over planes with a BatchNormalization and a Relu after it, which the session
// fuses into it (runPlain folds the normalization into W and b), against float64: constant
// weights across runs (folded once), and weights fed as an input, changed and changed back.
TEST(ConvGemm, FusedNormalizationAndReluAcrossRuns) {
  const int64_t N = 2, C = 7, O = 9, H = 5, W = 6;
  const Tensor x = test::randomTensor({N, C, H, W}, 1), w = test::randomTensor({O, C, 1, 1}, 2),
               b = test::randomTensor({O}, 3), scale = test::randomTensor({O}, 4, 0.5f, 2.0f),
               shift = test::randomTensor({O}, 5), mean = test::randomTensor({O}, 6),
               var = test::randomTensor({O}, 7, 0.5f, 2.0f);
  for (bool weightsAsInput : {false, true}) {
    auto m = test::emptyModel();
    auto* g = m.mutable_graph();
    test::addValue(g->add_input(), "x", {N, C, H, W});
    if (weightsAsInput)
      test::addValue(g->add_input(), "w", {O, C, 1, 1});
    else
      test::addInit(g, "w", w);
    test::addInit(g, "b", b);
    test::addInit(g, "scale", scale);
    test::addInit(g, "shift", shift);
    test::addInit(g, "mean", mean);
    test::addInit(g, "var", var);
    test::addNode(g, "Conv", {"x", "w", "b"}, {"z"});
    test::addNode(g, "BatchNormalization", {"z", "scale", "shift", "mean", "var"}, {"n"});
    test::addNode(g, "Relu", {"n"}, {"y"});
    test::addValue(g->add_output(), "y", {N, O, H, W});
    auto s = InferenceSession::create(m, SessionOptions{});
    ASSERT_TRUE(s.ok()) << s.message();
    std::map<std::string, Tensor> feeds{{"x", x}};
    if (weightsAsInput) feeds.emplace("w", w);
    for (int run = 0; run < 3; ++run) {
      if (weightsAsInput) feeds["w"] = run == 1 ? test::randomTensor(w.shape(), 8) : w;
      auto r = (*s)->run(feeds);
      ASSERT_TRUE(r.ok()) << r.message();
      const Tensor& y = r->at("y");
      const Tensor& wr = feeds.count("w") ? feeds.at("w") : w;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o)
          for (int64_t p = 0; p < H * W; ++p) {
            double z = b.data<float>()[o];
            for (int64_t c = 0; c < C; ++c)
              z += double(wr.data<float>()[o * C + c]) * x.data<float>()[(n * C + c) * H * W + p];
            const double k =
                scale.data<float>()[o] / std::sqrt(double(var.data<float>()[o]) + 1e-5);
            const double want =
                std::max(0.0, (z - mean.data<float>()[o]) * k + shift.data<float>()[o]);
            ASSERT_NEAR(y.data<float>()[(n * O + o) * H * W + p], want, 1e-5)
                << "weights as input " << weightsAsInput << " run " << run << " image " << n
                << " channel " << o << " pixel " << p;
          }
    }
  }
}

}  // namespace
