// The reference elementwise kernels' fast paths (kernels/elementwise.cpp, kernels/common.h,
// kernels/vector_float.cpp) against float64 computed here: the transcendental functions and Pow
// through libmvec at every tail length and across threads, with their special values; Where's
// flat loops for each whole-or-scalar combination and its broadcasting loop; broadcasting split
// into row blocks across threads; Clip's threaded loop with NaN and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "engine/kernels/common.h"
#include "onnx_builder.h"

namespace dw::engine::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor floats(const std::vector<float>& v, Shape s = {}) {
  if (s.empty()) s = {static_cast<int64_t>(v.size())};
  Tensor t(DType::kFloat, s);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// float32 within a few ulp of float64 (and an absolute floor near zero), NaN where float64 is.
void expectNear(float got, double want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got << ", want NaN";
  } else if (std::isinf(static_cast<float>(want))) {
    EXPECT_EQ(got, static_cast<float>(want)) << what;  // beyond float's range
  } else {
    EXPECT_LE(std::abs(got - want), 6e-7 * std::abs(want) + 1e-7)
        << what << ": " << got << ", want " << want;
  }
}

struct UnaryCase {
  const char* op;
  std::function<double(double)> f;
  float lo, hi;  // where the random inputs come from
};

TEST(ElementwisePaths, TranscendentalsMatchFloat64AtEveryLength) {
  const std::vector<UnaryCase> cases = {
      {"Erf", [](double x) { return std::erf(x); }, -5, 5},
      {"Sin", [](double x) { return std::sin(x); }, -20, 20},
      {"Cos", [](double x) { return std::cos(x); }, -20, 20},
      {"Tan", [](double x) { return std::tan(x); }, -1.4f, 1.4f},
      {"Asin", [](double x) { return std::asin(x); }, -1, 1},
      {"Acos", [](double x) { return std::acos(x); }, -1, 1},
      {"Atan", [](double x) { return std::atan(x); }, -50, 50},
      {"Sinh", [](double x) { return std::sinh(x); }, -10, 10},
      {"Cosh", [](double x) { return std::cosh(x); }, -10, 10},
      {"Asinh", [](double x) { return std::asinh(x); }, -100, 100},
      {"Acosh", [](double x) { return std::acosh(x); }, 1, 100},
      {"Atanh", [](double x) { return std::atanh(x); }, -0.99f, 0.99f},
  };
  // Special values first (NaN, infinities, signed zeros, outside the domain), then random ones;
  // lengths around the 16-lane vectors and one that splits across threads.
  const std::vector<float> special = {0.0f, -0.0f, kNaN, kInf, -kInf, 1.0f, -1.0f, 2.0f, 100.0f};
  for (const auto& c : cases) {
    for (size_t n :
         {size_t(1), size_t(9), size_t(15), size_t(16), size_t(17), size_t(47), size_t(100003)}) {
      std::vector<float> x = uniform(n, static_cast<uint32_t>(n), c.lo, c.hi);
      for (size_t i = 0; i < std::min(n, special.size()) && n > 16; ++i) x[i] = special[i];
      auto y = runOneNode(c.op, onnx::TensorProto::FLOAT, {floats(x)});
      ASSERT_TRUE(y.ok()) << c.op << ": " << y.message();
      ASSERT_EQ(y->size(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i)
        expectNear(y->data<float>()[i], c.f(x[i]),
                   std::string(c.op) + "(" + std::to_string(x[i]) + ") at " + std::to_string(i) +
                       " of " + std::to_string(n));
      if (HasFailure()) return;
    }
  }
}

TEST(ElementwisePaths, PowMatchesFloat64ForScalarAndElementwiseExponents) {
  const size_t n = 70001;
  std::vector<float> base = uniform(n, 1, -3, 3);
  const std::vector<float> special = {0.0f, -0.0f, kNaN, 1.0f, kInf, -kInf, -2.0f, 0.5f};
  for (size_t i = 0; i < special.size(); ++i) base[i] = special[i];
  auto check = [&](const Tensor& e, const std::function<double(size_t)>& exponent,
                   const std::string& what) {
    auto y = runOneNode("Pow", onnx::TensorProto::FLOAT, {floats(base), e});
    ASSERT_TRUE(y.ok()) << what << ": " << y.message();
    for (size_t i = 0; i < n; ++i)
      expectNear(
          y->data<float>()[i], std::pow(double(base[i]), exponent(i)),
          "Pow(" + std::to_string(base[i]) + ", " + std::to_string(exponent(i)) + ") " + what);
  };
  for (float e : {2.0f, 3.0f, 0.5f, -1.0f, 2.5f, 0.0f, kNaN}) {
    check(
        floats({e}, {}), [e](size_t) { return double(e); }, "scalar exponent");
    if (HasFailure()) return;
  }
  // A square is x * x: exact.
  auto sq = runOneNode("Pow", onnx::TensorProto::FLOAT, {floats(base), floats({2.0f}, {})});
  ASSERT_TRUE(sq.ok());
  for (size_t i = 8; i < n; ++i) ASSERT_EQ(sq->data<float>()[i], base[i] * base[i]);
  // One exponent per element, with the special pairs (1^NaN = 1, NaN^0 = 1, (-2)^3 = -8).
  std::vector<float> ex = uniform(n, 2, -3, 3);
  ex[0] = 0.0f;   // 0^0
  ex[2] = 0.0f;   // NaN^0
  ex[3] = kNaN;   // 1^NaN
  ex[6] = 3.0f;   // (-2)^3
  ex[7] = -1.0f;  // 0.5^-1
  check(
      floats(ex), [&](size_t i) { return double(ex[i]); }, "per element");
}

TEST(ElementwisePaths, PowWithAnIntegerExponentTensor) {
  Tensor e(DType::kInt64, {});
  e.data<int64_t>()[0] = 3;
  const std::vector<float> base = uniform(40000, 3, -2, 2);
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {40000});
  addInit(g, "e", e);
  addNode(g, "Pow", {"x", "e"}, {"y"});
  addValue(g->add_output(), "y", {40000});
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  auto y = (*s)->run({{"x", floats(base)}});
  ASSERT_TRUE(y.ok()) << y.message();
  for (size_t i = 0; i < base.size(); ++i)
    expectNear(y->at("y").data<float>()[i], std::pow(double(base[i]), 3.0), "x^3 (int64)");
}

// Where with each input whole or one value (8 flat loops), and broadcast in earnest; float,
// int64 and uint8 values, on a size that splits across threads.
TEST(ElementwisePaths, WhereEveryCombinationAndBroadcast) {
  const Shape full = {3, 5, 4001};
  const int64_t n = numElements(full);
  Tensor cond(DType::kBool, full), one(DType::kBool, {});
  std::mt19937 rng(7);
  for (int64_t i = 0; i < n; ++i) cond.data<bool>()[i] = rng() & 1;
  one.data<bool>()[0] = true;
  auto values = [&](DType t, const Shape& s, int seed) {
    Tensor v(t, s);
    for (int64_t i = 0; i < v.size(); ++i) {
      const int64_t k = (i * 7919 + seed * 104729) % 251;
      if (t == DType::kFloat) v.data<float>()[i] = static_cast<float>(k) - 125.5f;
      if (t == DType::kInt64) v.data<int64_t>()[i] = (k - 125) * (int64_t(1) << 40);
      if (t == DType::kUInt8) v.data<uint8_t>()[i] = static_cast<uint8_t>(k);
    }
    return v;
  };
  const std::pair<DType, int32_t> types[] = {{DType::kFloat, onnx::TensorProto::FLOAT},
                                             {DType::kInt64, onnx::TensorProto::INT64},
                                             {DType::kUInt8, onnx::TensorProto::UINT8}};
  for (const auto& [dt, onnxType] : types) {
    for (int combo = 0; combo < 8; ++combo) {
      const bool wc = combo & 1, wa = combo & 2, wb = combo & 4;
      const Tensor c = wc ? cond : one;
      const Tensor a = values(dt, wa ? full : Shape{}, 1), b = values(dt, wb ? full : Shape{}, 2);
      // The condition's type differs from the values': run through a model of typed inputs.
      onnx::ModelProto m = emptyModel(17);
      auto* g = m.mutable_graph();
      auto input = [&](const std::string& name, int32_t type) {
        auto* v = g->add_input();
        v->set_name(name);
        v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
      };
      input("c", onnx::TensorProto::BOOL);
      input("a", onnxType);
      input("b", onnxType);
      addNode(g, "Where", {"c", "a", "b"}, {"y"});
      g->add_output()->set_name("y");
      auto s = InferenceSession::create(m);
      ASSERT_TRUE(s.ok()) << s.message();
      auto y = (*s)->run({{"c", c}, {"a", a}, {"b", b}});
      ASSERT_TRUE(y.ok()) << y.message();
      const Tensor& out = y->at("y");
      ASSERT_EQ(out.size(), (wc || wa || wb) ? n : 1);
      for (int64_t i = 0; i < out.size(); ++i) {
        const bool pick = c.data<bool>()[wc ? i : 0];
        const int64_t ia = wa ? i : 0, ib = wb ? i : 0;
        if (dt == DType::kFloat)
          ASSERT_EQ(out.data<float>()[i], pick ? a.data<float>()[ia] : b.data<float>()[ib]);
        if (dt == DType::kInt64)
          ASSERT_EQ(out.data<int64_t>()[i], pick ? a.data<int64_t>()[ia] : b.data<int64_t>()[ib]);
        if (dt == DType::kUInt8)
          ASSERT_EQ(out.data<uint8_t>()[i], pick ? a.data<uint8_t>()[ia] : b.data<uint8_t>()[ib]);
      }
    }
  }
  // Broadcast in earnest: [3, 1, 4001] with [1, 5, 1] and [4001].
  Tensor c2(DType::kBool, {3, 1, 4001});
  for (int64_t i = 0; i < c2.size(); ++i) c2.data<bool>()[i] = (i * 31) % 7 < 3;
  const Tensor a2 = values(DType::kFloat, {1, 5, 1}, 3), b2 = values(DType::kFloat, {4001}, 4);
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  for (const char* name : {"c", "a", "b"}) {
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(
        name[0] == 'c' ? onnx::TensorProto::BOOL : onnx::TensorProto::FLOAT);
  }
  addNode(g, "Where", {"c", "a", "b"}, {"y"});
  g->add_output()->set_name("y");
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok());
  auto y = (*s)->run({{"c", c2}, {"a", a2}, {"b", b2}});
  ASSERT_TRUE(y.ok()) << y.message();
  const Tensor& out = y->at("y");
  ASSERT_EQ(out.shape(), (Shape{3, 5, 4001}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t k = 0; k < 4001; ++k)
        ASSERT_EQ(out.data<float>()[(i * 5 + j) * 4001 + k],
                  c2.data<bool>()[i * 4001 + k] ? a2.data<float>()[j] : b2.data<float>()[k]);
}

// A broadcast of both operands over an output that splits into row blocks across threads,
// against the element-by-element definition (int64: the reference kernels' loops, which
// oneDNN's binary does not take), for Sub and for Max, which works in place in its output.
TEST(ElementwisePaths, BroadcastSplitAcrossThreadsMatchesDefinition) {
  const Shape sa = {7, 1, 300, 33}, sb = {1, 5, 1, 33}, so = {7, 5, 300, 33};
  Tensor a(DType::kInt64, sa), b(DType::kInt64, sb);
  for (int64_t i = 0; i < a.size(); ++i) a.data<int64_t>()[i] = i * 3 + 1;
  for (int64_t i = 0; i < b.size(); ++i) b.data<int64_t>()[i] = i * 1000003;
  for (const std::string op : {"Sub", "Max"}) {
    auto y = runOneNode(op, onnx::TensorProto::INT64, {a, b});
    ASSERT_TRUE(y.ok()) << y.message();
    ASSERT_EQ(y->shape(), so);
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t k = 0; k < 300; ++k)
          for (int64_t l = 0; l < 33; ++l) {
            const int64_t va = a.data<int64_t>()[(i * 300 + k) * 33 + l],
                          vb = b.data<int64_t>()[j * 33 + l];
            ASSERT_EQ(y->data<int64_t>()[((i * 5 + j) * 300 + k) * 33 + l],
                      op == "Sub" ? va - vb : std::max(va, vb))
                << op;
          }
  }
  // The row blocks directly: every block boundary, any thread count.
  std::vector<int64_t> seen(numElements(so), -1);
  const std::array<const Shape*, 2> ins{&sa, &sb};
  const int64_t rows = numElements(so) / 33;
  for (int64_t from : {int64_t(0), int64_t(1), int64_t(299), int64_t(300), int64_t(1234)}) {
    forEachBroadcastRows<2>(so, ins, from, rows, [&](int64_t i, const std::array<int64_t, 2>& o) {
      seen[i] = o[0] * 1000 + o[1];
    });
    for (int64_t i = from * 33; i < numElements(so); ++i) {
      const int64_t l = i % 33, k = i / 33 % 300, j = i / (33 * 300) % 5, n = i / (33 * 300 * 5);
      ASSERT_EQ(seen[i], ((n * 300 + k) * 33 + l) * 1000 + j * 33 + l) << "from row " << from;
    }
  }
}

TEST(ElementwisePaths, ClipAcrossThreadsKeepsNaN) {
  std::vector<float> x = uniform(100003, 5, -10, 10);
  x[0] = kNaN;
  x[1] = kInf;
  x[2] = -kInf;
  x[99999] = kNaN;
  auto y = runOneNode("Clip", onnx::TensorProto::FLOAT,
                      {floats(x), floats({-1.5f}, {}), floats({6.0f}, {})});
  ASSERT_TRUE(y.ok()) << y.message();
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::isnan(x[i]) ? kNaN : std::min(std::max(x[i], -1.5f), 6.0f);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(y->data<float>()[i])) << i;
    else
      ASSERT_EQ(y->data<float>()[i], want) << i;
  }
}

}  // namespace
}  // namespace dw::engine::test

namespace dw::engine::test {
namespace {

// A one-node model of `op` on input "x" of `type`, with initializers, and its output "y".
Tensor runWith(const std::string& op, const Tensor& x, int32_t type,
               const std::vector<std::pair<std::string, Tensor>>& inits,
               const std::vector<onnx::AttributeProto>& attrs, int opset = 17) {
  onnx::ModelProto m = emptyModel(opset);
  auto* g = m.mutable_graph();
  auto* v = g->add_input();
  v->set_name("x");
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  std::vector<std::string> in{"x"};
  for (const auto& [name, t] : inits) {
    in.push_back(t.defined() ? name : "");  // an undefined tensor: the input left out
    if (t.defined()) addInit(g, name, t);
  }
  auto* n = addNode(g, op, in, {"y"});
  for (const auto& a : attrs) *n->add_attribute() = a;
  g->add_output()->set_name("y");
  auto s = InferenceSession::create(m);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return Tensor();
  auto y = (*s)->run({{"x", x}});
  EXPECT_TRUE(y.ok()) << y.message();
  return y.ok() ? y->at("y") : Tensor();
}

// Resize's direct float32 pass (the taps of the last two axes) against the float64 passes over
// every axis, which float64 input takes: linear and cubic, each coordinate mode, up and down,
// rank 3 to 5, odd sizes, a plane count that splits across threads; and the gather of nearest
// resizes of any axes against its definition (asymmetric, floor).
TEST(ElementwisePaths, ResizeDirectPathsMatchFloat64) {
  struct Case {
    Shape shape;
    std::vector<float> scales;
    const char* mode;
    const char* coords;
  };
  const std::vector<Case> cases = {
      {{4, 33, 17, 23}, {1, 1, 2, 2}, "linear", "half_pixel"},
      {{4, 33, 17, 23}, {1, 1, 2.5f, 1.5f}, "linear", "align_corners"},
      {{2, 5, 31, 29}, {1, 1, 0.5f, 0.7f}, "linear", "asymmetric"},
      {{2, 5, 31, 29}, {1, 1, 1.75f, 2}, "cubic", "half_pixel"},
      {{3, 40, 9}, {1, 2, 3}, "cubic", "pytorch_half_pixel"},
      {{2, 2, 3, 11, 13}, {1, 1, 1, 2, 0.5f}, "linear", "half_pixel"},
  };
  for (const auto& c : cases) {
    Tensor x32 = randomTensor(c.shape, 21, -2, 2), x64(DType::kDouble, c.shape);
    for (int64_t i = 0; i < x32.size(); ++i) x64.data<double>()[i] = x32.data<float>()[i];
    Tensor sc(DType::kFloat, {static_cast<int64_t>(c.scales.size())});
    std::copy(c.scales.begin(), c.scales.end(), sc.data<float>());
    const std::vector<onnx::AttributeProto> attrs = {
        attribute("mode", std::string(c.mode)),
        attribute("coordinate_transformation_mode", std::string(c.coords))};
    const Tensor y32 = runWith("Resize", x32, onnx::TensorProto::FLOAT,
                               {{"roi", Tensor()}, {"scales", sc}}, attrs);
    const Tensor y64 = runWith("Resize", x64, onnx::TensorProto::DOUBLE,
                               {{"roi", Tensor()}, {"scales", sc}}, attrs);
    ASSERT_TRUE(y32.defined() && y64.defined()) << c.mode << " " << c.coords;
    ASSERT_EQ(y32.shape(), y64.shape());
    for (int64_t i = 0; i < y32.size(); ++i)
      ASSERT_NEAR(y32.data<float>()[i], y64.data<double>()[i], 2e-5)
          << c.mode << " " << c.coords << " " << shapeToString(c.shape) << " at " << i;
  }
  // Nearest, asymmetric and floor: output index j takes input floor(j / scale), on any axis,
  // int64 values included (the gather moves bytes).
  Tensor xi(DType::kInt64, {3, 7, 5, 6});
  for (int64_t i = 0; i < xi.size(); ++i) xi.data<int64_t>()[i] = i * 1000003;
  Tensor sc(DType::kFloat, {4});
  const float s[4] = {1, 2, 1.6f, 0.5f};
  std::copy(s, s + 4, sc.data<float>());
  const Tensor y =
      runWith("Resize", xi, onnx::TensorProto::INT64, {{"roi", Tensor()}, {"scales", sc}},
              {attribute("mode", std::string("nearest")),
               attribute("coordinate_transformation_mode", std::string("asymmetric")),
               attribute("nearest_mode", std::string("floor"))});
  ASSERT_EQ(y.shape(), (Shape{3, 14, 8, 3}));
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 14; ++b)
      for (int64_t c = 0; c < 8; ++c)
        for (int64_t d = 0; d < 3; ++d) {
          const int64_t ib = b / 2, ic = static_cast<int64_t>(std::floor(c / 1.6f)), id = d * 2;
          ASSERT_EQ(y.data<int64_t>()[((a * 14 + b) * 8 + c) * 3 + d],
                    xi.data<int64_t>()[((a * 7 + ib) * 5 + ic) * 6 + id]);
        }
}

// Sum, mean, max and min over a run of middle axes on the host, against float64: inner sizes
// that are not whole pieces, one outer block, rank 5 with two reduced axes, keepdims both ways;
// and a reduction that is not one run (left to oneDNN) still right.
TEST(ElementwisePaths, ReduceOverMiddleAxesMatchesFloat64) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    int keep;
  };
  const std::vector<Case> cases = {{{8, 64, 9, 61}, {1}, 1},
                                   {{1, 30, 1100}, {1}, 0},
                                   {{2, 3, 4, 5, 70}, {1, 2}, 1},
                                   {{3, 17, 40}, {0}, 0},
                                   {{4, 6, 5, 33}, {1, 3}, 1}};
  for (const auto& c : cases) {
    const Tensor x = randomTensor(c.shape, 33, -3, 3);
    Tensor axes(DType::kInt64, {static_cast<int64_t>(c.axes.size())});
    std::copy(c.axes.begin(), c.axes.end(), axes.data<int64_t>());
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
      const bool asInput = std::string(op) == "ReduceSum";  // opset 13: axes as an input
      std::vector<onnx::AttributeProto> attrs = {attribute("keepdims", int64_t(c.keep))};
      if (!asInput) attrs.push_back(attribute("axes", c.axes));
      const Tensor y = runWith(op, x, onnx::TensorProto::FLOAT,
                               asInput ? std::vector<std::pair<std::string, Tensor>>{{"axes", axes}}
                                       : std::vector<std::pair<std::string, Tensor>>{},
                               attrs);
      ASSERT_TRUE(y.defined()) << op;
      // float64 by definition, over the output's positions with the reduced axes kept as 1.
      Shape keepShape = c.shape;
      for (int64_t a : c.axes) keepShape[a] = 1;
      ASSERT_EQ(y.size(), numElements(keepShape)) << op;
      const auto inStrides = stridesOf(c.shape);
      const auto outStrides = stridesOf(keepShape);
      std::vector<double> want(static_cast<size_t>(y.size()), 0.0);
      std::vector<int64_t> counts(static_cast<size_t>(y.size()), 0);
      for (int64_t i = 0; i < x.size(); ++i) {
        int64_t o = 0;
        for (size_t d = 0; d < c.shape.size(); ++d)
          o += (keepShape[d] == 1 ? 0 : (i / inStrides[d]) % c.shape[d]) * outStrides[d];
        const double v = x.data<float>()[i];
        if (counts[o]++ == 0)
          want[o] = v;
        else if (op[6] == 'S' || op[6] == 'M' && op[7] == 'e')
          want[o] += v;
        else if (op[7] == 'a')
          want[o] = std::max(want[o], v);
        else
          want[o] = std::min(want[o], v);
      }
      for (int64_t o = 0; o < y.size(); ++o) {
        const double w = op[7] == 'e' ? want[o] / counts[o] : want[o];
        ASSERT_NEAR(y.data<float>()[o], w, 2e-5 * (1 + std::abs(w)))
            << op << " " << shapeToString(c.shape) << " at " << o;
      }
    }
  }
}

// Cast in pieces on the threads, into the pool's buffer, against Tensor::cast in one piece.
TEST(ElementwisePaths, CastAcrossThreadsMatchesOnePiece) {
  Tensor x = randomTensor({100003}, 41, -300, 300);
  x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[6] = std::numeric_limits<float>::infinity();
  for (const auto& [to, type] :
       std::vector<std::pair<DType, int64_t>>{{DType::kInt64, onnx::TensorProto::INT64},
                                              {DType::kUInt8, onnx::TensorProto::UINT8},
                                              {DType::kBool, onnx::TensorProto::BOOL},
                                              {DType::kDouble, onnx::TensorProto::DOUBLE},
                                              {DType::kFloat16, onnx::TensorProto::FLOAT16}}) {
    const Tensor y = runWith("Cast", x, onnx::TensorProto::FLOAT, {}, {attribute("to", type)});
    auto want = x.cast(to);
    ASSERT_TRUE(want.ok() && y.defined());
    ASSERT_EQ(y.dtype(), to);
    ASSERT_EQ(std::memcmp(y.raw(), want->raw(), y.bytes()), 0) << dtypeName(to);
  }
}

}  // namespace
}  // namespace dw::engine::test

namespace dw::engine::test {
namespace {

// TopK's running best-k against a full sort by definition: largest and smallest, ties (the lower
// index first), NaN as the largest value, k of 0, 1 and the whole axis, a middle axis.
TEST(ElementwisePaths, TopKMatchesAFullSort) {
  const Shape shape = {6, 37, 9};
  Tensor x(DType::kFloat, shape);
  for (int64_t i = 0; i < x.size(); ++i)
    x.data<float>()[i] = static_cast<float>((i * 7919) % 23) - 11.0f;  // many ties
  x.data<float>()[40] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t axis : {1, 2}) {
    for (int64_t k : {int64_t(0), int64_t(1), int64_t(4), shape[axis]}) {
      for (int64_t largest : {1, 0}) {
        Tensor kt(DType::kInt64, {1});
        kt.data<int64_t>()[0] = k;
        onnx::ModelProto m = emptyModel(17);
        auto* g = m.mutable_graph();
        addValue(g->add_input(), "x", shape);
        addInit(g, "k", kt);
        auto* n = addNode(g, "TopK", {"x", "k"}, {"v", "i"});
        *n->add_attribute() = attribute("axis", axis);
        *n->add_attribute() = attribute("largest", largest);
        g->add_output()->set_name("v");
        g->add_output()->set_name("i");
        auto s = InferenceSession::create(m);
        ASSERT_TRUE(s.ok()) << s.message();
        auto y = (*s)->run({{"x", x}});
        ASSERT_TRUE(y.ok()) << y.message();
        const Tensor& v = y->at("v");
        const Tensor& ix = y->at("i");
        int64_t outer = 1, inner = 1;
        for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
        for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
        const int64_t len = shape[axis];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t in = 0; in < inner; ++in) {
            std::vector<int64_t> order(len);
            for (int64_t j = 0; j < len; ++j) order[j] = j;
            auto at = [&](int64_t j) { return x.data<float>()[(o * len + j) * inner + in]; };
            std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
              const bool na = std::isnan(at(a)), nb = std::isnan(at(b));
              if (na || nb) return na != nb && (largest ? na : nb);
              return largest ? at(a) > at(b) : at(a) < at(b);
            });
            for (int64_t j = 0; j < k; ++j) {
              const int64_t pos = (o * k + j) * inner + in;
              ASSERT_EQ(ix.data<int64_t>()[pos], order[j])
                  << "axis " << axis << " k " << k << " largest " << largest;
              const float got = v.data<float>()[pos], want = at(order[j]);
              ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)));
            }
          }
      }
    }
  }
}

}  // namespace
}  // namespace dw::engine::test

namespace dw::engine::test {
namespace {

// The host reductions' other cases: the sum of squares of every value (pieces on the threads,
// combined), and a NaN carried to the output by max and min along a row and across a middle
// axis, while the other outputs stay exact.
TEST(ElementwisePaths, ReduceSumSquareAndNaNInHostReductions) {
  Tensor x = randomTensor({3, 300007}, 51, -2, 2);
  const Tensor y = runWith("ReduceSumSquare", x, onnx::TensorProto::FLOAT, {},
                           {attribute("keepdims", int64_t(0))});
  ASSERT_TRUE(y.defined());
  double want = 0;
  for (int64_t i = 0; i < x.size(); ++i) want += double(x.data<float>()[i]) * x.data<float>()[i];
  EXPECT_NEAR(y.data<float>()[0], want, 1e-5 * want);
  Tensor z = randomTensor({4, 20, 33}, 52, -2, 2);
  z.data<float>()[(1 * 20 + 3) * 33 + 7] = std::numeric_limits<float>::quiet_NaN();
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    for (int64_t axis : {1, 2}) {
      const Tensor r = runWith(
          op, z, onnx::TensorProto::FLOAT, {},
          {attribute("axes", std::vector<int64_t>{axis}), attribute("keepdims", int64_t(0))});
      ASSERT_TRUE(r.defined());
      for (int64_t a = 0; a < 4; ++a)
        for (int64_t b = 0; b < (axis == 1 ? 33 : 20); ++b) {
          const bool hit = a == 1 && (axis == 1 ? b == 7 : b == 3);
          const float got = r.data<float>()[a * (axis == 1 ? 33 : 20) + b];
          if (hit) {
            EXPECT_TRUE(std::isnan(got)) << op << " axis " << axis;
            continue;
          }
          float w = op[7] == 'a' ? -INFINITY : INFINITY;
          for (int64_t k = 0; k < (axis == 1 ? 20 : 33); ++k) {
            const float v = axis == 1 ? z.data<float>()[(a * 20 + k) * 33 + b]
                                      : z.data<float>()[(a * 20 + b) * 33 + k];
            w = op[7] == 'a' ? std::max(w, v) : std::min(w, v);
          }
          ASSERT_EQ(got, w) << op << " axis " << axis;
        }
    }
  }
}

}  // namespace
}  // namespace dw::engine::test
