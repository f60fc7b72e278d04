// The normalizations ONNX added after opset 17, forward, against their definitions computed here
// in double (the same cases matched ONNX Runtime 1.30 to 2.4e-7 when the kernels were written;
// gradcheck_test.cpp checks their gradients by finite differences). Bad attributes are errors.
// - RMSNormalization (23): over the axes from `axis` on, y = x / sqrt(mean(x^2) + epsilon) *
//   scale, with scale broadcasting over those axes.
// - GroupNormalization (18, 21): each group of C / num_groups channels of an image normalized by
//   its mean and variance, then scale and bias per channel (21) or per group (18).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;
using namespace dw::engine::test;

dw::Result<Tensor> rmsNorm(const Tensor& x, const Tensor& s, int64_t axis, float eps) {
  onnx::ModelProto m = emptyModel(23);
  m.set_ir_version(10);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", x.shape());
  addValue(g->add_input(), "s", s.shape());
  g->add_output()->set_name("y");
  auto* n = g->add_node();
  n->set_op_type("RMSNormalization");
  n->add_input("x");
  n->add_input("s");
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  auto* e = n->add_attribute();
  e->set_name("epsilon");
  e->set_type(onnx::AttributeProto::FLOAT);
  e->set_f(eps);
  auto session = InferenceSession::create(m);
  if (!session) return session.status();
  auto out = (*session)->run({{"x", x}, {"s", s}});
  if (!out) return out.status();
  return out->at("y");
}

TEST(RmsNormalization, MatchesDefinition) {
  struct Case {
    Shape x, s;
    int64_t axis;
    float eps;
  };
  for (const Case& c : {Case{{2, 3, 4}, {4}, -1, 1e-5f}, Case{{2, 3, 4}, {3, 4}, 1, 1e-3f},
                        Case{{2, 3, 4}, {1, 4}, 1, 1e-5f}, Case{{5, 6}, {1, 6}, 0, 1e-5f}}) {
    SCOPED_TRACE(c.axis);
    Tensor x = randomTensor(c.x, 11), s = randomTensor(c.s, 12, 0.5f, 1.5f);
    auto y = rmsNorm(x, s, c.axis, c.eps);
    ASSERT_TRUE(y.ok()) << y.message();
    const int64_t ax = c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis;
    int64_t len = 1;
    for (size_t d = ax; d < c.x.size(); ++d) len *= c.x[d];
    // Scale's element for tail position k: its dims right-aligned against the tail's.
    auto scaleAt = [&](int64_t k) {
      int64_t idx = 0, stride = 1;
      for (int64_t d = static_cast<int64_t>(c.x.size()) - 1, sd = c.s.size() - 1; d >= ax;
           --d, --sd) {
        const int64_t pos = k % c.x[d];
        k /= c.x[d];
        if (sd >= 0) {
          if (c.s[sd] != 1) idx += pos * stride;
          stride *= c.s[sd];
        }
      }
      return s.data<float>()[idx];
    };
    for (int64_t row = 0; row < x.size() / len; ++row) {
      double ss = 0;
      for (int64_t k = 0; k < len; ++k) ss += std::pow(x.data<float>()[row * len + k], 2.0);
      const double inv = 1 / std::sqrt(ss / len + c.eps);
      for (int64_t k = 0; k < len; ++k)
        EXPECT_NEAR(y->data<float>()[row * len + k],
                    x.data<float>()[row * len + k] * inv * scaleAt(k), 2e-6)
            << row << " " << k;
    }
  }
}

TEST(RmsNormalization, RefusesBadAxisAndScale) {
  Tensor x = randomTensor({2, 3}, 1), s = randomTensor({3}, 2);
  auto bad = rmsNorm(x, s, 2, 1e-5f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("axis"), std::string::npos) << bad.message();
  auto badScale = rmsNorm(x, randomTensor({4}, 3), -1, 1e-5f);
  ASSERT_FALSE(badScale.ok());
  EXPECT_NE(badScale.message().find("Scale"), std::string::npos) << badScale.message();
}

dw::Result<Tensor> groupNorm(const Tensor& x, const Tensor& s, const Tensor& b, int64_t groups,
                             int opset) {
  onnx::ModelProto m = emptyModel(opset);
  m.set_ir_version(10);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", x.shape());
  addValue(g->add_input(), "s", s.shape());
  addValue(g->add_input(), "b", b.shape());
  g->add_output()->set_name("y");
  auto* n = g->add_node();
  n->set_op_type("GroupNormalization");
  for (const char* in : {"x", "s", "b"}) n->add_input(in);
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("num_groups");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(groups);
  auto session = InferenceSession::create(m);
  if (!session) return session.status();
  auto out = (*session)->run({{"x", x}, {"s", s}, {"b", b}});
  if (!out) return out.status();
  return out->at("y");
}

TEST(GroupNormalization, MatchesDefinition) {
  for (int opset : {18, 21}) {
    SCOPED_TRACE(opset);
    const int64_t N = 2, C = 6, S = 5, G = 3, per = opset < 21 ? G : C;
    Tensor x = randomTensor({N, C, S}, 21), s = randomTensor({per}, 22, 0.5f, 1.5f),
           b = randomTensor({per}, 23);
    auto y = groupNorm(x, s, b, G, opset);
    ASSERT_TRUE(y.ok()) << y.message();
    const int64_t len = C / G * S;
    for (int64_t row = 0; row < N * G; ++row) {
      const float* p = x.data<float>() + row * len;
      double m = 0, v = 0;
      for (int64_t i = 0; i < len; ++i) m += p[i];
      m /= len;
      for (int64_t i = 0; i < len; ++i) v += (p[i] - m) * (p[i] - m);
      v /= len;
      for (int64_t i = 0; i < len; ++i) {
        const int64_t g = row % G, k = opset < 21 ? g : g * (C / G) + i / S;
        EXPECT_NEAR(y->data<float>()[row * len + i],
                    (p[i] - m) / std::sqrt(v + 1e-5) * s.data<float>()[k] + b.data<float>()[k],
                    2e-6);
      }
    }
  }
  Tensor x = randomTensor({1, 6, 2}, 1), s = randomTensor({6}, 2), b = randomTensor({6}, 3);
  auto bad = groupNorm(x, s, b, 4, 21);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("num_groups"), std::string::npos) << bad.message();
  auto badScale = groupNorm(x, s, b, 3, 18);  // opset 18 wants one value per group
  ASSERT_FALSE(badScale.ok());
  EXPECT_NE(badScale.message().find("per group"), std::string::npos) << badScale.message();
}

}  // namespace
