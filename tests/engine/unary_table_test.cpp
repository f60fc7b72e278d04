// The elementwise ops of one input (ops/unary_table.h), checked row by row: every op has
// reference values (tests/golden/unary_golden.json, from torch) with its schema's defaults and
// with each choice of function, its forward matches them on the reference kernel (float64) and on
// the cpu backend (float32, oneDNN where the row names an algorithm), and every op with a gradient
// has a builder, a UnaryGrad that matches torch's autograd and a central difference of the
// forward, on both. A new row without golden values fails here.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/cuda/cuda.h"
#include "engine/kernel.h"
#include "engine/session.h"
#include "engine/training/grad_builder.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"
#include "ops/unary_table.h"

namespace {

using namespace dw::engine;
using dw::Result;
using nlohmann::json;

struct Case {
  std::string name, op;
  json attrs;
  std::vector<double> x, y, dydx;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

const std::vector<Case>& goldenCases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v;
    std::ifstream in(DW_SOURCE_DIR "/tests/golden/unary_golden.json");
    if (!in) return v;
    const json doc = json::parse(in);
    for (const auto& c : doc.at("cases")) {
      Case k{c.at("name"), c.at("op"), c.at("attrs"), c.at("x"), c.at("y"), {}};
      if (c.contains("dydx")) k.dydx = c.at("dydx").get<std::vector<double>>();
      v.push_back(std::move(k));
    }
    return v;
  }();
  return cases;
}

std::vector<Case> differentiableCases() {
  std::vector<Case> v;
  for (const auto& c : goldenCases())
    if (!c.dydx.empty()) v.push_back(c);
  return v;
}

int opsetOf(const std::string& op) {
  return std::max(dw::kDefaultOnnxOpset, dw::ops::findUnaryOp(op)->since);
}

void setAttrs(onnx::NodeProto* n, const json& attrs) {
  for (const auto& [name, v] : attrs.items()) {
    auto* a = n->add_attribute();
    a->set_name(name);
    if (v.is_string()) {
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(v.get<std::string>());
    } else {
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(v.get<float>());
    }
  }
}

void addInput(onnx::GraphProto* g, const std::string& name, int32_t type, int64_t n,
              bool output = false) {
  auto* v = output ? g->add_output() : g->add_input();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(n);
}

Tensor tensorOf(const std::vector<double>& v, DType t) {
  if (t == DType::kDouble) return Tensor::fromVector(v, {static_cast<int64_t>(v.size())});
  std::vector<float> f(v.begin(), v.end());
  return Tensor::fromVector(f, {static_cast<int64_t>(v.size())});
}

std::vector<double> valuesOf(const Tensor& t) {
  std::vector<double> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.getDouble(i);
  return v;
}

// The op alone: y = op(x).
Result<std::vector<double>> runForward(const Case& c, const std::vector<double>& x, DType t,
                                       const std::string& accelerator = "cpu") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opsetOf(c.op));
  auto* g = m.mutable_graph();
  g->set_name(c.name);
  const int32_t type = t == DType::kDouble ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
  const auto n = static_cast<int64_t>(x.size());
  addInput(g, "x", type, n);
  addInput(g, "y", type, n, true);
  auto* node = g->add_node();
  node->set_op_type(c.op);
  node->set_name("op");
  node->add_input("x");
  node->add_output("y");
  setAttrs(node, c.attrs);
  SessionOptions options;
  options.backend.accelerator = accelerator;
  auto s = InferenceSession::create(m, options);
  if (!s) return s.status();
  auto r = (*s)->run({{"x", tensorOf(x, t)}});
  if (!r) return r.status();
  return valuesOf(r->at("y"));
}

// dX of UnaryGrad(dY = 1, X = x, Y = y): f'(x), as autodiff wires it (explicit attributes only).
Result<std::vector<double>> derivative(const Case& c, const std::vector<double>& y, DType t,
                                       const std::string& accelerator = "cpu") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opsetOf(c.op));
  auto* gi = m.add_opset_import();
  gi->set_domain(dw::kGradDomain);
  gi->set_version(1);
  auto* g = m.mutable_graph();
  g->set_name(c.name + "_grad");
  const int32_t type = t == DType::kDouble ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
  const auto n = static_cast<int64_t>(c.x.size());
  for (const char* in : {"dy", "x", "y"}) addInput(g, in, type, n);
  addInput(g, "dx", type, n, true);
  auto* node = g->add_node();
  node->set_op_type("UnaryGrad");
  node->set_domain(dw::kGradDomain);
  node->set_name("grad");
  for (const char* in : {"dy", "x", "y"}) node->add_input(in);
  node->add_output("dx");
  setAttrs(node, c.attrs);
  setAttrs(node, json{{"op", c.op}});
  SessionOptions options;
  options.backend.accelerator = accelerator;
  auto s = InferenceSession::create(m, options);
  if (!s) return s.status();
  auto r = (*s)->run({{"dy", tensorOf(std::vector<double>(n, 1.0), t)},
                      {"x", tensorOf(c.x, t)},
                      {"y", tensorOf(y, t)}});
  if (!r) return r.status();
  return valuesOf(r->at("dx"));
}

void expectNear(const std::vector<double>& got, const std::vector<double>& want, double atol,
                double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " at element " << i;
}

TEST(UnaryTable, EveryOpHasGoldenValuesForItsDefaultsAndChoices) {
  ASSERT_FALSE(goldenCases().empty()) << "tests/golden/unary_golden.json is missing";
  for (const auto& row : dw::ops::unaryOps()) {
    if (!row.tableKernels()) continue;
    SCOPED_TRACE(row.name);
    bool defaults = false;
    std::set<std::string> choices;
    for (const auto& c : goldenCases()) {
      if (c.op != row.name) continue;
      defaults = defaults || c.attrs.empty();
      if (row.choiceAttr && c.attrs.contains(row.choiceAttr))
        choices.insert(c.attrs.at(row.choiceAttr).get<std::string>());
      EXPECT_EQ(!c.dydx.empty(), row.gradient)
          << c.name << ": reference derivatives exactly for the ops with a gradient";
    }
    EXPECT_TRUE(defaults) << "no golden case with the schema's default attributes";
    for (size_t i = 1; i < row.choices.size(); ++i)
      if (row.choices[i].value) {
        EXPECT_TRUE(choices.count(row.choices[i].value)) << row.choices[i].value;
      }
  }
  for (const auto& c : goldenCases())
    EXPECT_NE(dw::ops::findUnaryOp(c.op), nullptr) << c.name << " is not a row of the table";
}

// Defaults come from libonnx's schema wherever it has the op; the table carries its own only for
// ops libonnx does not know (newer opsets, recurrent-cell activations).
TEST(UnaryTable, DefaultsComeFromTheSchemaWhereThereIsOne) {
  for (const auto& row : dw::ops::unaryOps()) {
    SCOPED_TRACE(row.name);
    const auto* schema =
        row.isOp() ? onnx::OpSchemaRegistry::Schema(row.name, dw::kDefaultOnnxOpset) : nullptr;
    if (row.isOp() && row.since <= dw::kDefaultOnnxOpset) {
      ASSERT_NE(schema, nullptr) << "libonnx has no schema for an op of its opsets";
      EXPECT_EQ(schema->since_version() >= row.since, true);
    }
    for (const auto& a : row.attrs) {
      if (!a.name) continue;
      if (schema) {
        auto it = schema->attributes().find(a.name);
        ASSERT_NE(it, schema->attributes().end()) << a.name << " is not an attribute of the op";
        EXPECT_TRUE(it->second.default_value.has_f()) << a.name << " has no float default";
        EXPECT_FALSE(a.hasFallback) << a.name << " repeats the schema's default";
      } else {
        EXPECT_TRUE(a.hasFallback) << a.name << " has no default anywhere";
      }
    }
  }
}

TEST(UnaryTable, RecurrentActivationsAndKernels) {
  for (const char* name : {"Relu", "tanh", "SIGMOID", "Affine", "LeakyRelu", "ThresholdedRelu",
                           "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus"})
    EXPECT_NE(dw::ops::findRnnActivation(name), nullptr) << name;  // ONNX's RNN list
  EXPECT_EQ(dw::ops::findRnnActivation("Mish"), nullptr);
  EXPECT_EQ(dw::ops::findUnaryOp("Affine"), nullptr);  // not an op of its own
  const auto& reg = KernelRegistry::global();
  for (const auto& row : dw::ops::unaryOps()) {
    if (!row.tableKernels()) continue;
    const int opset = std::max(dw::kDefaultOnnxOpset, row.since);
    EXPECT_NE(reg.find("", row.name, opset, kReferenceTable), nullptr) << row.name;
    if (row.onednn.alg != dw::ops::Eltwise::kNone) {
      EXPECT_NE(reg.find("", row.name, opset, kOneDnnTable), nullptr) << row.name;
    }
    // Neg's gradient is a Neg of its own; every other differentiable row goes through UnaryGrad.
    if (row.gradient || row.fn == dw::ops::UnaryFn::kNeg) {
      EXPECT_NE(training::findGradBuilder("", row.name, opset), nullptr) << row.name;
    } else {
      EXPECT_EQ(training::findGradBuilder("", row.name, opset), nullptr) << row.name;
    }
    EXPECT_EQ(reg.find("", row.name, row.since - 1, kReferenceTable), nullptr)
        << row.name << " runs before the opset that introduced it";
  }
}

TEST(UnaryTable, AnUnknownChoiceIsAnErrorNamingTheAttribute) {
  Case c{"Gelu_fast", "Gelu", json{{"approximate", "fast"}}, {0.5}, {}, {}};
  for (DType t : {DType::kFloat, DType::kDouble}) {
    auto y = runForward(c, c.x, t);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.message().find("attribute approximate is \"fast\"; it must be one of \"none\", "
                               "\"tanh\""),
              std::string::npos)
        << y.message();
  }
}

// The cuda table's kernels instantiate the same templates; on a GPU they must agree too.
TEST(UnaryTable, EveryOpOnCuda) {
  std::string why;
  if (cuda::deviceCount(&why) == 0) GTEST_SKIP() << "accelerator cuda: " << why;
  for (const auto& c : goldenCases()) {
    SCOPED_TRACE(c.name);
    auto y = runForward(c, c.x, DType::kFloat, "cuda");
    ASSERT_TRUE(y.ok()) << y.message();
    expectNear(*y, c.y, 1e-5, 1e-5, "cuda forward");
    if (c.dydx.empty()) continue;
    auto d = derivative(c, c.y, DType::kFloat, "cuda");
    ASSERT_TRUE(d.ok()) << d.message();
    expectNear(*d, c.dydx, 1e-5, 1e-5, "cuda UnaryGrad");
  }
}

class UnaryGolden : public ::testing::TestWithParam<Case> {};

TEST_P(UnaryGolden, ForwardOnBothTables) {
  const Case& c = GetParam();
  auto d = runForward(c, c.x, DType::kDouble);  // the reference kernel
  ASSERT_TRUE(d.ok()) << d.message();
  expectNear(*d, c.y, 1e-12, 1e-12, "float64");
  auto f = runForward(c, c.x, DType::kFloat);  // oneDNN where the row has an algorithm
  ASSERT_TRUE(f.ok()) << f.message();
  // oneDNN's log and gelu are polynomial approximations, good to about 1e-5.
  expectNear(*f, c.y, 1e-5, 1e-5, "float32");
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryGolden, ::testing::ValuesIn(goldenCases()),
                         [](const auto& info) { return info.param.name; });

// The float32 maths the host loops, fused post-ops and recurrent cells run (the cpu backend's
// float32 kernels above are oneDNN's for many rows).
TEST_P(UnaryGolden, HostFloatMaths) {
  const Case& c = GetParam();
  Attributes attrs;
  for (const auto& [name, v] : c.attrs.items()) {
    onnx::AttributeProto a;
    a.set_name(name);
    if (v.is_string()) {
      a.set_type(onnx::AttributeProto::STRING);
      a.set_s(v.get<std::string>());
    } else {
      a.set_type(onnx::AttributeProto::FLOAT);
      a.set_f(v.get<float>());
    }
    attrs.set(a);
  }
  auto u = resolveUnary(*dw::ops::findUnaryOp(c.op), attrs);
  ASSERT_TRUE(u.ok()) << u.message();
  std::vector<float> x(c.x.begin(), c.x.end()), y(x.size());
  u->apply(x.data(), y.data(), static_cast<int64_t>(x.size()));
  expectNear(std::vector<double>(y.begin(), y.end()), c.y, 1e-6, 2e-6, "host float32");
}

// Float sigmoid and tanh on the host use ops/unary.h's arithmetic exponential (so that loops
// over them vectorize): within a few float ulps of libm over the whole range.
TEST(UnaryTable, ArithmeticExponentialMatchesLibm) {
  const dw::ops::UnaryParams p;
  for (float x = -100.0f; x <= 100.0f; x += 0.0137f) {
    const double s = 1.0 / (1.0 + std::exp(-double(x))), t = std::tanh(double(x));
    const float gs = dw::ops::unaryForward<dw::ops::UnaryFn::kSigmoid>(x, p);
    const float gt = dw::ops::unaryForward<dw::ops::UnaryFn::kTanh>(x, p);
    ASSERT_NEAR(gs, s, 4e-7 * s + 1e-37) << "sigmoid at " << x;
    ASSERT_NEAR(gt, t, 4e-7 * std::abs(t) + 1e-9) << "tanh at " << x;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(dw::ops::unaryForward<dw::ops::UnaryFn::kSigmoid>(nan, p)));
  EXPECT_TRUE(std::isnan(dw::ops::unaryForward<dw::ops::UnaryFn::kTanh>(nan, p)));
  EXPECT_EQ(dw::ops::unaryForward<dw::ops::UnaryFn::kTanh>(-INFINITY, p), -1.0f);
  EXPECT_EQ(dw::ops::unaryForward<dw::ops::UnaryFn::kSigmoid>(INFINITY, p), 1.0f);
  for (float x : {1e-8f, -3e-5f, 0.29f, 0.31f, -0.3f}) {
    const float gt = dw::ops::unaryForward<dw::ops::UnaryFn::kTanh>(x, p);
    EXPECT_NEAR(gt, std::tanh(double(x)), 4e-7 * std::abs(std::tanh(double(x)))) << x;
  }
}

class UnaryGoldenGradient : public ::testing::TestWithParam<Case> {};

TEST_P(UnaryGoldenGradient, MatchesAutogradAndFiniteDifferences) {
  const Case& c = GetParam();
  auto d = derivative(c, c.y, DType::kDouble);
  ASSERT_TRUE(d.ok()) << d.message();
  expectNear(*d, c.dydx, 1e-12, 1e-10, "float64");
  auto f = derivative(c, c.y, DType::kFloat);
  ASSERT_TRUE(f.ok()) << f.message();
  expectNear(*f, c.dydx, 1e-5, 1e-5, "float32");
  // Central differences of the forward kernel itself, independent of the golden derivative.
  const double h = 1e-6;
  std::vector<double> lo = c.x, hi = c.x;
  for (size_t i = 0; i < c.x.size(); ++i) lo[i] -= h, hi[i] += h;
  auto yl = runForward(c, lo, DType::kDouble), yh = runForward(c, hi, DType::kDouble);
  ASSERT_TRUE(yl.ok() && yh.ok());
  std::vector<double> fd(c.x.size());
  for (size_t i = 0; i < fd.size(); ++i) fd[i] = ((*yh)[i] - (*yl)[i]) / (2 * h);
  expectNear(*d, fd, 1e-6, 1e-6, "finite difference");
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryGoldenGradient, ::testing::ValuesIn(differentiableCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
