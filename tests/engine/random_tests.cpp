// The random generator kernels (engine/kernels/random.cpp): shapes and dtypes, repeatability
// with a seed and fresh draws without one, and the distributions' moments, bounds and
// frequencies over ~100k samples. Statistical checks use fixed seeds, so they cannot flake; their
// tolerances are several standard errors wide.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/session.h"
#include "graphs/onnx_export.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;
using dw::engine::test::attrF;
using dw::engine::test::attrI;
using dw::engine::test::attrInts;

namespace {

onnx::ModelProto model(int opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

void addIo(onnx::ValueInfoProto* v, const std::string& name, int elemType) {
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(elemType);
}

onnx::NodeProto* addNode(onnx::ModelProto& m, const std::string& op,
                         const std::vector<std::string>& in) {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(op + "_node");
  for (const auto& i : in) n->add_input(i);
  n->add_output("y");
  return n;
}

// A generator model: op with the given attributes, no inputs, output y of `outType`.
onnx::ModelProto generator(const std::string& op, int outType,
                           const std::function<void(onnx::NodeProto*)>& attrs) {
  auto m = model();
  attrs(addNode(m, op, {}));
  addIo(m.mutable_graph()->add_output(), "y", outType);
  return m;
}

// A model y = op(x) with x of `inType`.
onnx::ModelProto unary(const std::string& op, int inType, int outType,
                       const std::function<void(onnx::NodeProto*)>& attrs) {
  auto m = model();
  attrs(addNode(m, op, {"x"}));
  addIo(m.mutable_graph()->add_input(), "x", inType);
  addIo(m.mutable_graph()->add_output(), "y", outType);
  return m;
}

std::unique_ptr<InferenceSession> session(const onnx::ModelProto& m) {
  auto s = InferenceSession::create(m);
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(*s) : nullptr;
}

Tensor runY(InferenceSession& s, const std::map<std::string, Tensor>& in = {}) {
  auto r = s.run(in);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? r->at("y") : Tensor();
}

std::vector<double> asDoubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.getDouble(i);
  return v;
}

struct Moments {
  double mean = 0, sd = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.sd += (x - m.mean) * (x - m.mean);
  m.sd = std::sqrt(m.sd / static_cast<double>(v.size() - 1));
  return m;
}

constexpr int64_t kN = 100000;
constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kDouble = onnx::TensorProto::DOUBLE;
constexpr int kHalf = onnx::TensorProto::FLOAT16;

}  // namespace

TEST(RandomKernels, UniformShapeBoundsAndMoments) {
  auto m = generator("RandomUniform", kFloat, [](onnx::NodeProto* n) {
    attrInts(n, "shape", {100, 1000});
    attrF(n, "low", -2);
    attrF(n, "high", 3);
    attrF(n, "seed", 7);
  });
  auto s = session(m);
  ASSERT_TRUE(s);
  Tensor y = runY(*s);
  ASSERT_EQ(y.dtype(), DType::kFloat);
  ASSERT_EQ(y.shape(), (Shape{100, 1000}));
  auto v = asDoubles(y);
  for (double x : v) ASSERT_TRUE(x >= -2 && x < 3) << x;
  // Uniform on [-2, 3): mean 0.5, sd 5/sqrt(12) = 1.4434; standard errors 0.0046 and 0.0032.
  const Moments mo = moments(v);
  EXPECT_NEAR(mo.mean, 0.5, 0.03);
  EXPECT_NEAR(mo.sd, 5 / std::sqrt(12.0), 0.02);
  // Both tails are reached: the draws cover the interval.
  EXPECT_LT(*std::min_element(v.begin(), v.end()), -1.99);
  EXPECT_GT(*std::max_element(v.begin(), v.end()), 2.99);
}

TEST(RandomKernels, NormalMomentsInDouble) {
  auto m = generator("RandomNormal", kDouble, [](onnx::NodeProto* n) {
    attrInts(n, "shape", {kN});
    attrI(n, "dtype", kDouble);
    attrF(n, "mean", 1.5f);
    attrF(n, "scale", 2);
    attrF(n, "seed", 3);
  });
  auto s = session(m);
  ASSERT_TRUE(s);
  Tensor y = runY(*s);
  ASSERT_EQ(y.dtype(), DType::kDouble);
  ASSERT_EQ(y.shape(), (Shape{kN}));
  auto v = asDoubles(y);
  // Standard errors: mean 2/sqrt(n) = 0.0063, sd 2/sqrt(2n) = 0.0045.
  const Moments mo = moments(v);
  EXPECT_NEAR(mo.mean, 1.5, 0.04);
  EXPECT_NEAR(mo.sd, 2.0, 0.03);
  // Normal, not merely centred: 68.3% within one sd (standard error 0.0015).
  int64_t within = 0;
  for (double x : v) within += std::fabs(x - 1.5) < 2.0;
  EXPECT_NEAR(static_cast<double>(within) / kN, 0.6827, 0.008);
}

TEST(RandomKernels, SeedRepeatsRunAfterRunAndAcrossSessions) {
  auto make = [](float seed) {
    return generator("RandomNormal", kFloat, [seed](onnx::NodeProto* n) {
      attrInts(n, "shape", {2, 50});
      attrF(n, "seed", seed);
    });
  };
  auto s1 = session(make(5)), s2 = session(make(5)), s3 = session(make(6));
  ASSERT_TRUE(s1 && s2 && s3);
  auto a = asDoubles(runY(*s1)), b = asDoubles(runY(*s1)), c = asDoubles(runY(*s2));
  auto d = asDoubles(runY(*s3));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_NE(a, d);
}

TEST(RandomKernels, WithoutSeedEachRunDrawsAfresh) {
  for (const char* op : {"RandomUniform", "RandomNormal"}) {
    auto m = generator(op, kFloat, [](onnx::NodeProto* n) { attrInts(n, "shape", {1000}); });
    auto s = session(m);
    ASSERT_TRUE(s);
    auto a = asDoubles(runY(*s)), b = asDoubles(runY(*s));
    ASSERT_EQ(a.size(), 1000u);
    EXPECT_NE(a, b) << op;
    // Two sessions are seeded independently too.
    auto s2 = session(m);
    ASSERT_TRUE(s2);
    EXPECT_NE(a, asDoubles(runY(*s2))) << op;
  }
}

TEST(RandomKernels, Float16Outputs) {
  auto m = generator("RandomNormal", kHalf, [](onnx::NodeProto* n) {
    attrInts(n, "shape", {kN});
    attrI(n, "dtype", kHalf);
    attrF(n, "mean", -1);
    attrF(n, "scale", 0.5f);
    attrF(n, "seed", 11);
  });
  auto s = session(m);
  ASSERT_TRUE(s);
  Tensor y = runY(*s);
  ASSERT_EQ(y.dtype(), DType::kFloat16);
  const Moments mo = moments(asDoubles(y));
  EXPECT_NEAR(mo.mean, -1, 0.01);
  EXPECT_NEAR(mo.sd, 0.5, 0.01);

  // float16 has 11 significant bits: many draws near `high` round onto it and must step back.
  auto mu = generator("RandomUniform", kHalf, [](onnx::NodeProto* n) {
    attrInts(n, "shape", {kN});
    attrI(n, "dtype", kHalf);
    attrF(n, "low", 0);
    attrF(n, "high", 1);
    attrF(n, "seed", 1);
  });
  auto su = session(mu);
  ASSERT_TRUE(su);
  Tensor u = runY(*su);
  ASSERT_EQ(u.dtype(), DType::kFloat16);
  auto v = asDoubles(u);
  for (double x : v) ASSERT_TRUE(x >= 0 && x < 1) << x;
  EXPECT_NEAR(moments(v).mean, 0.5, 0.01);
}

TEST(RandomKernels, LikeTakesShapeAndDtypeFromInput) {
  Tensor xd(DType::kDouble, {2, 3, 4});
  auto m =
      unary("RandomUniformLike", kDouble, kDouble, [](onnx::NodeProto* n) { attrF(n, "seed", 1); });
  auto s = session(m);
  ASSERT_TRUE(s);
  Tensor y = runY(*s, {{"x", xd}});
  EXPECT_EQ(y.dtype(), DType::kDouble);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (double v : asDoubles(y)) EXPECT_TRUE(v >= 0 && v < 1) << v;

  // The dtype attribute overrides the input's type, which then may be anything.
  Tensor xi(DType::kInt32, {kN});
  auto mn = unary("RandomNormalLike", onnx::TensorProto::INT32, kFloat, [](onnx::NodeProto* n) {
    attrI(n, "dtype", kFloat);
    attrF(n, "mean", 4);
    attrF(n, "scale", 3);
    attrF(n, "seed", 2);
  });
  auto sn = session(mn);
  ASSERT_TRUE(sn);
  Tensor yn = runY(*sn, {{"x", xi}});
  EXPECT_EQ(yn.dtype(), DType::kFloat);
  EXPECT_EQ(yn.shape(), (Shape{kN}));
  const Moments mo = moments(asDoubles(yn));
  EXPECT_NEAR(mo.mean, 4, 0.06);
  EXPECT_NEAR(mo.sd, 3, 0.05);

  // An integer input without dtype has no floating type to copy: a clear error, no crash.
  auto mbad = unary("RandomUniformLike", onnx::TensorProto::INT32, onnx::TensorProto::INT32,
                    [](onnx::NodeProto*) {});
  auto sb = InferenceSession::create(mbad);
  if (sb.ok()) {
    auto r = (*sb)->run({{"x", xi}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("dtype"), std::string::npos) << r.message();
  } else {
    EXPECT_NE(sb.message().find("RandomUniformLike"), std::string::npos) << sb.message();
  }
}

TEST(RandomKernels, BernoulliFrequencies) {
  // Probabilities 0, 0.3 and 1 in three blocks.
  Tensor p(DType::kFloat, {3, kN});
  for (int64_t i = 0; i < kN; ++i) {
    p.data<float>()[i] = 0;
    p.data<float>()[kN + i] = 0.3f;
    p.data<float>()[2 * kN + i] = 1;
  }
  auto m = unary("Bernoulli", kFloat, kFloat, [](onnx::NodeProto* n) { attrF(n, "seed", 4); });
  auto s = session(m);
  ASSERT_TRUE(s);
  Tensor y = runY(*s, {{"x", p}});
  ASSERT_EQ(y.dtype(), DType::kFloat);  // default: the input's type
  ASSERT_EQ(y.shape(), (Shape{3, kN}));
  double ones[3] = {0, 0, 0};
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < kN; ++i) {
      const float v = y.data<float>()[r * kN + i];
      ASSERT_TRUE(v == 0 || v == 1) << v;
      ones[r] += v;
    }
  EXPECT_EQ(ones[0], 0);
  EXPECT_EQ(ones[2], kN);
  // Standard error sqrt(0.3 * 0.7 / n) = 0.00145.
  EXPECT_NEAR(ones[1] / kN, 0.3, 0.01);
  // Seeded: the same draws run after run.
  Tensor y2 = runY(*s, {{"x", p}});
  EXPECT_EQ(asDoubles(y), asDoubles(y2));

  // dtype picks the output type, bool included; double probabilities.
  Tensor pd(DType::kDouble, {kN});
  for (int64_t i = 0; i < kN; ++i) pd.data<double>()[i] = 0.75;
  auto mb = unary("Bernoulli", kDouble, onnx::TensorProto::BOOL,
                  [](onnx::NodeProto* n) { attrI(n, "dtype", onnx::TensorProto::BOOL); });
  auto sb = session(mb);
  ASSERT_TRUE(sb);
  Tensor yb = runY(*sb, {{"x", pd}});
  ASSERT_EQ(yb.dtype(), DType::kBool);
  int64_t trues = 0;
  for (int64_t i = 0; i < kN; ++i) trues += yb.data<bool>()[i];
  EXPECT_NEAR(static_cast<double>(trues) / kN, 0.75, 0.01);
}

TEST(RandomKernels, MultinomialClassFrequencies) {
  // Row 0: probabilities 0.1, 0.2, 0.7 as unnormalised logs (+5); row 1: 0.5, 0.5, 0.
  Tensor x(DType::kFloat, {2, 3});
  const float lp[6] = {std::log(0.1f) + 5, std::log(0.2f) + 5, std::log(0.7f) + 5, 0, 0, -INFINITY};
  std::copy(lp, lp + 6, x.data<float>());
  auto m = unary("Multinomial", kFloat, onnx::TensorProto::INT64, [](onnx::NodeProto* n) {
    attrI(n, "sample_size", kN);
    attrI(n, "dtype", onnx::TensorProto::INT64);
    attrF(n, "seed", 9);
  });
  auto s = session(m);
  ASSERT_TRUE(s);
  Tensor y = runY(*s, {{"x", x}});
  ASSERT_EQ(y.dtype(), DType::kInt64);
  ASSERT_EQ(y.shape(), (Shape{2, kN}));
  double count[2][3] = {};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < kN; ++i) {
      const int64_t k = y.data<int64_t>()[b * kN + i];
      ASSERT_TRUE(k >= 0 && k < 3) << k;
      count[b][k] += 1;
    }
  // Standard errors at most sqrt(0.25 / n) = 0.0016.
  EXPECT_NEAR(count[0][0] / kN, 0.1, 0.01);
  EXPECT_NEAR(count[0][1] / kN, 0.2, 0.01);
  EXPECT_NEAR(count[0][2] / kN, 0.7, 0.01);
  EXPECT_NEAR(count[1][0] / kN, 0.5, 0.01);
  EXPECT_NEAR(count[1][1] / kN, 0.5, 0.01);
  EXPECT_EQ(count[1][2], 0);  // probability zero is never drawn

  // Defaults: int32 output, one sample per row.
  auto md = unary("Multinomial", kFloat, onnx::TensorProto::INT32, [](onnx::NodeProto*) {});
  auto sd = session(md);
  ASSERT_TRUE(sd);
  Tensor yd = runY(*sd, {{"x", x}});
  EXPECT_EQ(yd.dtype(), DType::kInt32);
  EXPECT_EQ(yd.shape(), (Shape{2, 1}));
  EXPECT_NE(yd.data<int32_t>()[1], 2);
}

TEST(RandomKernels, BadAttributesAreReported) {
  auto m = generator("RandomUniform", onnx::TensorProto::INT32, [](onnx::NodeProto* n) {
    attrInts(n, "shape", {3});
    attrI(n, "dtype", onnx::TensorProto::INT32);
  });
  auto s = InferenceSession::create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("RandomUniform"), std::string::npos) << s.message();

  Tensor x(DType::kFloat, {4});
  auto mm = unary("Multinomial", kFloat, onnx::TensorProto::INT32, [](onnx::NodeProto*) {});
  auto sm = session(mm);
  ASSERT_TRUE(sm);
  auto r = sm->run({{"x", x}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("batch_size"), std::string::npos) << r.message();
}

// The deepwire Generator node lowers to RandomUniform / RandomNormal, which now run.
TEST(RandomKernels, GeneratorNodeRunsThroughTheSession) {
  for (const char* gen : {"RandomUniform", "RandomNormal"}) {
    dw::Graph g;
    dw::NodeId n = *g.addNode(dw::kGraphDomain, "Generator");
    ASSERT_TRUE(g.setParam(n, "generator", dw::Param::makeString(gen)).ok());
    ASSERT_TRUE(g.setParam(n, "shape", dw::Param::makeInts({200, 100})).ok());
    ASSERT_TRUE(g.setParam(n, "dtype", dw::Param::makeString("double")).ok());
    ASSERT_TRUE(g.setParam(n, "low", dw::Param::makeFloat(10)).ok());
    ASSERT_TRUE(g.setParam(n, "high", dw::Param::makeFloat(12)).ok());
    ASSERT_TRUE(g.setParam(n, "mean", dw::Param::makeFloat(-3)).ok());
    ASSERT_TRUE(g.setParam(n, "scale", dw::Param::makeFloat(0.25)).ok());
    dw::NodeId out = *g.addNode(dw::kGraphDomain, "Output");
    ASSERT_TRUE(g.rename(out, "y").ok());
    ASSERT_TRUE(g.addLink({{n, 0}, {out, 0}}).ok());
    auto m = dw::exportOnnx(g);
    ASSERT_TRUE(m.ok()) << m.message();
    auto s = session(*m);
    ASSERT_TRUE(s);
    Tensor y = runY(*s);
    ASSERT_EQ(y.dtype(), DType::kDouble) << gen;
    ASSERT_EQ(y.shape(), (Shape{200, 100})) << gen;
    auto v = asDoubles(y);
    const Moments mo = moments(v);
    if (std::string(gen) == "RandomUniform") {
      for (double x : v) ASSERT_TRUE(x >= 10 && x < 12) << x;
      EXPECT_NEAR(mo.mean, 11, 0.03);
    } else {
      EXPECT_NEAR(mo.mean, -3, 0.01);
      EXPECT_NEAR(mo.sd, 0.25, 0.01);
    }
    // The Generator always carries a seed: repeatable.
    EXPECT_EQ(v, asDoubles(runY(*s))) << gen;
  }
}
