// The oneDNN backward kernels of the activations (eltwise backward) and of Softmax/LogSoftmax
// (softmax backward) against the plain C++ kernels: the same graph runs once in float32, where
// the cpu backend takes oneDNN's primitives, and once in float64, which only the plain kernels
// compute. Two independent implementations of each derivative must agree. Convolution
// gradients (no float64 kernel) are checked against the definition computed in the test.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/session.h"
#include "engine/tensor.h"
#include "engine/training/grad_builder.h"
#include "gradcheck_util.h"

namespace {

using namespace dw::engine;
namespace test = dw::engine::training::test;
using dw::engine::training::attrF;
using dw::engine::training::attrI;
using dw::engine::training::attrS;

struct Case {
  std::string op;    // forward op
  std::string grad;  // UnaryGrad or SoftmaxGrad
  int64_t opset = 17;
  std::vector<onnx::AttributeProto> forwardAttrs;
  std::vector<onnx::AttributeProto> gradAttrs;
  double lo = -2, hi = 2;  // input range
};

// Y = op(X); dX = grad(dY, X, Y) (UnaryGrad) or grad(dY, Y) (SoftmaxGrad), in `elem` type.
onnx::ModelProto model(const Case& c, int32_t elem, const std::vector<int64_t>& shape) {
  onnx::ModelProto m;
  auto* n = test::singleOpModel(m, c.opset, c.op, c.op, "fwd");
  auto* imp = m.add_opset_import();
  imp->set_domain("com.deepwire.grad");
  imp->set_version(1);
  auto* g = m.mutable_graph();
  auto io = [&](onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    for (int64_t d : shape) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  io(g->add_input(), "X");
  io(g->add_input(), "dY");
  io(g->add_output(), "dX");
  n->add_input("X");
  n->add_output("Y");
  for (const auto& a : c.forwardAttrs) *n->add_attribute() = a;
  auto* b = g->add_node();
  b->set_op_type(c.grad);
  b->set_domain("com.deepwire.grad");
  b->set_name("bwd");
  b->add_input("dY");
  if (c.grad == "UnaryGrad") b->add_input("X");
  b->add_input("Y");
  b->add_output("dX");
  for (const auto& a : c.gradAttrs) *b->add_attribute() = a;
  return m;
}

class OneDnnBackward : public ::testing::TestWithParam<Case> {};

TEST_P(OneDnnBackward, AgreesWithThePlainKernel) {
  const Case& c = GetParam();
  const std::vector<int64_t> shape{4, 5, 6};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> ux(c.lo, c.hi), ug(-1, 1);
  std::vector<double> x(120), dy(120);
  for (auto& v : x) {
    v = ux(rng);
    if (std::fabs(v) < 1e-2) v = 0.5;  // away from kinks (Relu, Abs) where derivatives jump
  }
  for (auto& v : dy) v = ug(rng);
  auto run = [&](bool dbl) -> std::vector<double> {
    auto s = InferenceSession::create(
        model(c, dbl ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT, shape));
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return {};
    auto t = [&](const std::vector<double>& v) {
      Tensor d = Tensor::fromVector(v, shape);
      return dbl ? d : *d.cast(DType::kFloat);
    };
    auto out = (*s)->run({{"X", t(x)}, {"dY", t(dy)}});
    EXPECT_TRUE(out.ok()) << out.message();
    if (!out.ok()) return {};
    auto d = out->at("dX").cast(DType::kDouble);
    const double* p = d->data<double>();
    return std::vector<double>(p, p + d->size());
  };
  const auto f32 = run(false), f64 = run(true);
  ASSERT_EQ(f32.size(), f64.size());
  ASSERT_FALSE(f32.empty());
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_LE(std::fabs(f32[i] - f64[i]), 1e-5 + 1e-4 * std::fabs(f64[i]))
        << c.op << " element " << i << ": float32 (oneDNN) " << f32[i] << " vs float64 " << f64[i];
  }
  // The float64 run must really differ from a trivial result.
  double norm = 0;
  for (double v : f64) norm += std::fabs(v);
  EXPECT_GT(norm, 1.0);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (std::string op : {"Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Softplus", "HardSwish"})
    v.push_back({op, "UnaryGrad", 17, {}, {attrS("op", op)}});
  v.push_back({"LeakyRelu",
               "UnaryGrad",
               17,
               {attrF("alpha", 0.2f)},
               {attrS("op", "LeakyRelu"), attrF("alpha", 0.2f)}});
  v.push_back(
      {"Elu", "UnaryGrad", 17, {attrF("alpha", 0.7f)}, {attrS("op", "Elu"), attrF("alpha", 0.7f)}});
  for (std::string op : {"Log", "Sqrt", "Reciprocal"}) {
    v.push_back({op, "UnaryGrad", 17, {}, {attrS("op", op)}});
    v.back().lo = 0.3;  // the domain of the op
    v.back().hi = 3;
  }
  for (bool log : {false, true}) {
    const std::string op = log ? "LogSoftmax" : "Softmax";
    v.push_back({op, "SoftmaxGrad", 13, {attrI("axis", 1)}, {attrI("axis", 1), attrI("log", log)}});
    // Opset 11: normalized over everything from `axis` on.
    v.push_back({op,
                 "SoftmaxGrad",
                 11,
                 {attrI("axis", 1)},
                 {attrI("axis", 1), attrI("log", log), attrI("legacy", 1)}});
  }
  return v;
}

std::string caseName(const ::testing::TestParamInfo<Case>& i) {
  return i.param.op + "_opset" + std::to_string(i.param.opset);
}

INSTANTIATE_TEST_SUITE_P(Activations, OneDnnBackward, ::testing::ValuesIn(cases()), caseName);

// Convolution gradients at a batch and shape where float32 takes oneDNN's Winograd kernels
// (3x3, stride 1, N >= 16, 16+ channels: conv_grad.cpp) and at one where it stays direct:
// the X, W and B gradients of loss = ReduceSum(Conv(X) * R) against the definition in float64
// (Conv has no float64 kernel to compare with).
TEST(OneDnnConvBackward, AgreesWithThePlainKernel) {
  // Batch 16 with C != OC also takes deepwire's Winograd kernel for the data gradient.
  for (const auto& shape : {std::array<int64_t, 3>{16, 16, 16}, std::array<int64_t, 3>{3, 16, 16},
                            std::array<int64_t, 3>{16, 32, 16}}) {
    const int64_t n = shape[0], C = shape[1], OC = shape[2], H = 6, W = 7;
    const std::vector<int64_t> xs{n, C, H, W}, ws{OC, C, 3, 3}, ys{n, OC, H, W};
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-1, 1);
    auto values = [&](int64_t count) {
      std::vector<double> v(count);
      for (auto& e : v) e = u(rng);
      return v;
    };
    const auto x = values(n * C * H * W), w = values(OC * C * 9), b = values(OC),
               r = values(n * OC * H * W);
    auto run = [&]() {
      const int32_t t = onnx::TensorProto::FLOAT;
      onnx::ModelProto m;
      auto* conv = test::singleOpModel(m, 17, "conv", "Conv", "conv");
      auto* g = m.mutable_graph();
      *g->add_initializer() = test::makeTensor("X", t, xs, x);
      *g->add_initializer() = test::makeTensor("W", t, ws, w);
      *g->add_initializer() = test::makeTensor("B", t, {OC}, b);
      *g->add_initializer() = test::makeTensor("R", t, ys, r);
      for (const char* i : {"X", "W", "B"}) conv->add_input(i);
      conv->add_output("Y");
      *conv->add_attribute() = dw::engine::training::attrInts("pads", {1, 1, 1, 1});
      test::addWeightedSum(g, "Y", "R", "loss", "loss_");
      test::addLossOutput(g, t);
      dw::engine::training::GradientGraphOptions o;
      o.losses = {"loss"};
      o.trainable = {"X", "W", "B"};
      auto gg = dw::engine::training::buildGradientGraph(m, o);
      EXPECT_TRUE(gg.ok()) << gg.message();
      std::map<std::string, std::vector<double>> grads;
      if (!gg.ok()) return grads;
      auto s = InferenceSession::create(gg->model);
      EXPECT_TRUE(s.ok()) << s.message();
      if (!s.ok()) return grads;
      auto res = (*s)->run(test::initializerFeeds(m, *gg));
      EXPECT_TRUE(res.ok()) << res.message();
      if (!res.ok()) return grads;
      for (const auto& name : gg->gradOutputs) {
        auto d = res->at(name).cast(DType::kDouble);
        grads[name] = std::vector<double>(d->data<double>(), d->data<double>() + d->size());
      }
      return grads;
    };
    const auto f32 = run();
    std::map<std::string, std::vector<double>> f64{{"X_grad", std::vector<double>(x.size())},
                                                   {"W_grad", std::vector<double>(w.size())},
                                                   {"B_grad", std::vector<double>(b.size())}};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t v = 0; v < W; ++v) {
            const double dy = r[((i * OC + o) * H + h) * W + v];
            f64["B_grad"][o] += dy;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t kh = 0; kh < 3; ++kh)
                for (int64_t kw = 0; kw < 3; ++kw) {
                  const int64_t ih = h + kh - 1, iw = v + kw - 1;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  const int64_t xi = ((i * C + c) * H + ih) * W + iw,
                                wi = ((o * C + c) * 3 + kh) * 3 + kw;
                  f64["W_grad"][wi] += dy * x[xi];
                  f64["X_grad"][xi] += dy * w[wi];
                }
          }
    ASSERT_EQ(f32.size(), 3u);
    for (const auto& [name, ref] : f64) {
      const auto& got = f32.at(name);
      ASSERT_EQ(got.size(), ref.size()) << name;
      double scale = 0;
      for (double v : ref) scale = std::max(scale, std::fabs(v));
      ASSERT_GT(scale, 1.0) << name;
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], 1e-5 * scale)
            << name << " batch " << n << " C " << C << " OC " << OC << " element " << i;
    }
  }
}

}  // namespace
