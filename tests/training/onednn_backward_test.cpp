// The oneDNN backward kernels of the activations (eltwise backward) and of Softmax/LogSoftmax
// (softmax backward) against the plain C++ kernels: the same graph runs once in float32, where
// the cpu backend takes oneDNN's primitives, and once in float64, which only the plain kernels
// compute. Two independent implementations of each derivative must agree.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

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

}  // namespace
