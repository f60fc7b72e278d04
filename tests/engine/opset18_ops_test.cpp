// ai.onnx operators after opset 17 (engine/kernels/opset18_ops.cpp) that ONNX Runtime 1.30 does
// not run, so tests/golden/ort-onnx cannot hold them: SwiGLU (28), CausalConvWithState (27),
// LinearAttention (27) and Attention's sliding window (25), checked against values worked out from
// their definitions, against independent formulations (attention written as a sum over past
// tokens), and for the stateful ones, against themselves: two calls carrying the state must equal
// one call over the whole sequence. Plus the errors the other new kernels give for inputs they
// cannot take.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;

struct Node {
  std::string op;
  int opset;
  std::vector<std::pair<std::string, Tensor>> inputs;  // "" name: an omitted optional input
  int outputs = 1;
  std::vector<onnx::AttributeProto> attrs;
};

template <class V>
onnx::AttributeProto attr(const std::string& n, V v) {
  return test::attribute(n, v);
}

int32_t onnxType(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kString:
      return onnx::TensorProto::STRING;
    case DType::kInt64:
      return onnx::TensorProto::INT64;
    case DType::kInt32:
      return onnx::TensorProto::INT32;
    default:
      return onnx::TensorProto::FLOAT;
  }
}

dw::Result<std::vector<Tensor>> run(const Node& node) {
  onnx::ModelProto m = test::emptyModel(node.opset);
  m.set_ir_version(10);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(node.op);
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, t] : node.inputs) {
    n->add_input(name);
    if (name.empty()) continue;
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnxType(t));
    feeds.emplace(name, t);
  }
  for (int i = 0; i < node.outputs; ++i) {
    n->add_output("y" + std::to_string(i));
    g->add_output()->set_name("y" + std::to_string(i));
  }
  for (const auto& a : node.attrs) *n->add_attribute() = a;
  auto s = InferenceSession::create(m);
  if (!s) return s.status();
  auto out = (*s)->run(feeds);
  if (!out) return out.status();
  std::vector<Tensor> r;
  for (int i = 0; i < node.outputs; ++i) r.push_back(out->at("y" + std::to_string(i)));
  return r;
}

Tensor randomTensor(const Shape& s, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(numElements(s)));
  for (auto& x : v) x = d(rng);
  return Tensor::fromVector(v, s);
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.size());
}

// Concatenates [B, rows, n] tensors along axis 1.
Tensor cat1(const Tensor& a, const Tensor& b) {
  const int64_t B = a.dim(0), n = a.dim(2), ra = a.dim(1), rb = b.dim(1);
  std::vector<float> v;
  for (int64_t i = 0; i < B; ++i) {
    v.insert(v.end(), a.data<float>() + i * ra * n, a.data<float>() + (i + 1) * ra * n);
    v.insert(v.end(), b.data<float>() + i * rb * n, b.data<float>() + (i + 1) * rb * n);
  }
  return Tensor::fromVector(v, {B, ra + rb, n});
}

// Rows [from, to) of axis 1 of a [B, rows, n] tensor.
Tensor rows(const Tensor& t, int64_t from, int64_t to) {
  const int64_t B = t.dim(0), r = t.dim(1), n = t.dim(2);
  std::vector<float> v;
  for (int64_t i = 0; i < B; ++i)
    v.insert(v.end(), t.data<float>() + (i * r + from) * n, t.data<float>() + (i * r + to) * n);
  return Tensor::fromVector(v, {B, to - from, n});
}

void expectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(SwiGlu, GatesBWithTheSwishOfA) {
  std::mt19937 rng(1);
  const Tensor a = randomTensor({2, 5}, rng, -4, 4), b = randomTensor({2, 5}, rng);
  for (float alpha : {1.0f, 0.6f}) {
    auto y = run({"SwiGLU", 28, {{"a", a}, {"b", b}}, 1, {attr("alpha", alpha)}});
    ASSERT_TRUE(y.ok()) << y.message();
    std::vector<double> want;
    for (int i = 0; i < 10; ++i) {
      const double x = a.data<float>()[i];
      want.push_back(x / (1 + std::exp(-alpha * x)) * b.data<float>()[i]);
    }
    expectNear(values((*y)[0]), want, 1e-6);
  }
  // The definition's example: A = [1, -2], B = [0.5, 1].
  auto y = run({"SwiGLU",
                28,
                {{"a", Tensor::fromVector(std::vector<float>{1, -2}, {2})},
                 {"b", Tensor::fromVector(std::vector<float>{0.5f, 1}, {2})}}});
  ASSERT_TRUE(y.ok()) << y.message();
  expectNear(values((*y)[0]), {0.365529, -0.238406}, 1e-6);
  auto bad = run({"SwiGLU", 28, {{"a", a}, {"b", randomTensor({5}, rng)}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("SwiGLU does not broadcast"), std::string::npos) << bad.message();
}

TEST(CausalConvWithState, ConvolvesThePastAndHandsOnTheState) {
  const Tensor w = Tensor::fromVector(std::vector<float>{1, 2, 3}, {1, 1, 3});
  const Tensor x = Tensor::fromVector(std::vector<float>{1, 2, 3}, {1, 1, 3});
  auto y = run({"CausalConvWithState", 27, {{"x", x}, {"w", w}}, 2});
  ASSERT_TRUE(y.ok()) << y.message();
  // Padded row [0, 0, 1, 2, 3]: 0 + 0 + 3, 0 + 2 + 6, 1 + 4 + 9.
  expectNear(values((*y)[0]), {3, 8, 14}, 1e-6);
  expectNear(values((*y)[1]), {2, 3}, 1e-6);
  auto withPast = run({"CausalConvWithState",
                       27,
                       {{"x", x},
                        {"w", w},
                        {"", Tensor()},
                        {"p", Tensor::fromVector(std::vector<float>{5, 6}, {1, 1, 2})}},
                       2});
  ASSERT_TRUE(withPast.ok()) << withPast.message();
  expectNear(values((*withPast)[0]), {20, 14, 14}, 1e-6);
  // Two calls carrying the state equal one over the whole sequence, with bias and SiLU.
  std::mt19937 rng(2);
  const Tensor seq = randomTensor({2, 3, 7}, rng), wk = randomTensor({3, 1, 4}, rng),
               bias = randomTensor({3}, rng);
  const std::vector<onnx::AttributeProto> silu{attr("activation", std::string("silu"))};
  auto whole = run({"CausalConvWithState", 27, {{"x", seq}, {"w", wk}, {"b", bias}}, 2, silu});
  ASSERT_TRUE(whole.ok()) << whole.message();
  auto split = [&](int64_t from, int64_t to) {
    std::vector<float> v;
    for (int64_t r = 0; r < 6; ++r)
      v.insert(v.end(), seq.data<float>() + r * 7 + from, seq.data<float>() + r * 7 + to);
    return Tensor::fromVector(v, {2, 3, to - from});
  };
  auto first =
      run({"CausalConvWithState", 27, {{"x", split(0, 2)}, {"w", wk}, {"b", bias}}, 2, silu});
  ASSERT_TRUE(first.ok()) << first.message();
  auto second = run({"CausalConvWithState",
                     27,
                     {{"x", split(2, 7)}, {"w", wk}, {"b", bias}, {"p", (*first)[1]}},
                     2,
                     silu});
  ASSERT_TRUE(second.ok()) << second.message();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t t = 0; t < 7; ++t) {
      const float got =
          t < 2 ? (*first)[0].data<float>()[r * 2 + t] : (*second)[0].data<float>()[r * 5 + t - 2];
      EXPECT_NEAR(got, (*whole)[0].data<float>()[r * 7 + t], 1e-6) << r << "," << t;
    }
  expectNear(values((*second)[1]),
             std::vector<double>((*whole)[1].data<float>(), (*whole)[1].data<float>() + 18), 1e-6);
  auto bad = run({"CausalConvWithState",
                  27,
                  {{"x", x}, {"w", w}},
                  2,
                  {attr("activation", std::string("gelu"))}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'gelu' must be none, silu or swish"), std::string::npos)
      << bad.message();
}

TEST(LinearAttention, WorkedExamples) {
  // B = T... = 1 head of size 1: q = [1, 2], k = [1, 1], v = [3, 4], scale 1.
  const Tensor q = Tensor::fromVector(std::vector<float>{1, 2}, {1, 2, 1});
  const Tensor k = Tensor::fromVector(std::vector<float>{1, 1}, {1, 2, 1});
  const Tensor v = Tensor::fromVector(std::vector<float>{3, 4}, {1, 2, 1});
  const std::vector<onnx::AttributeProto> heads{
      attr("q_num_heads", int64_t{1}), attr("kv_num_heads", int64_t{1}), attr("scale", 1.0f)};
  auto linear = heads;
  linear.push_back(attr("update_rule", std::string("linear")));
  auto y = run({"LinearAttention", 27, {{"q", q}, {"k", k}, {"v", v}}, 2, linear});
  ASSERT_TRUE(y.ok()) << y.message();
  expectNear(values((*y)[0]), {3, 14}, 1e-6);
  expectNear(values((*y)[1]), {7}, 1e-6);
  auto delta = heads;
  delta.push_back(attr("update_rule", std::string("delta")));
  const Tensor beta = Tensor::fromVector(std::vector<float>{0.5f, 0.5f}, {1, 2, 1});
  auto d = run({"LinearAttention",
                27,
                {{"q", q}, {"k", k}, {"v", v}, {"", Tensor()}, {"", Tensor()}, {"beta", beta}},
                2,
                delta});
  ASSERT_TRUE(d.ok()) << d.message();
  expectNear(values((*d)[0]), {1.5, 5.5}, 1e-6);
  expectNear(values((*d)[1]), {2.75}, 1e-6);
  // The delta rule without beta is refused, naming the input.
  auto bad = run({"LinearAttention", 27, {{"q", q}, {"k", k}, {"v", v}}, 2, delta});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("needs beta (input 5)"), std::string::npos) << bad.message();
}

// The gated rule as attention: o_t = scale * sum_{s <= t} (q_t . (k_s * prod_{s < r <= t}
// exp(g_r))) v_s, per query head reading its KV head (2 query heads per KV head here).
TEST(LinearAttention, GatedRuleEqualsDecayedAttentionAndChunksCarryTheState) {
  std::mt19937 rng(3);
  const int64_t B = 2, T = 6, Hq = 4, Hk = 2, dk = 3, dv = 2;
  const Tensor q = randomTensor({B, T, Hq * dk}, rng), k = randomTensor({B, T, Hk * dk}, rng),
               v = randomTensor({B, T, Hk * dv}, rng),
               g = randomTensor({B, T, Hk * dk}, rng, -0.5f, 0.0f);
  std::vector<onnx::AttributeProto> at{attr("q_num_heads", Hq), attr("kv_num_heads", Hk),
                                       attr("update_rule", std::string("gated"))};
  auto y =
      run({"LinearAttention", 27, {{"q", q}, {"k", k}, {"v", v}, {"", Tensor()}, {"g", g}}, 2, at});
  ASSERT_TRUE(y.ok()) << y.message();
  const double scale = 1 / std::sqrt(static_cast<double>(dk));
  std::vector<double> want;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t m = 0; m < dv; ++m) {
          const int64_t kh = h / (Hq / Hk);
          double o = 0;
          for (int64_t s = 0; s <= t; ++s)
            for (int64_t d = 0; d < dk; ++d) {
              double decay = 1;
              for (int64_t r = s + 1; r <= t; ++r)
                decay *= std::exp(g.data<float>()[(b * T + r) * Hk * dk + kh * dk + d]);
              o += q.data<float>()[(b * T + t) * Hq * dk + h * dk + d] * decay *
                   k.data<float>()[(b * T + s) * Hk * dk + kh * dk + d] *
                   v.data<float>()[(b * T + s) * Hk * dv + kh * dv + m];
            }
          want.push_back(scale * o);
        }
  expectNear(values((*y)[0]), want, 1e-5);
  // gated_delta in two chunks (the state handed on) against one call.
  at[2] = attr("update_rule", std::string("gated_delta"));
  const Tensor beta = randomTensor({B, T, Hk}, rng, 0, 1);
  auto whole = run({"LinearAttention",
                    27,
                    {{"q", q}, {"k", k}, {"v", v}, {"", Tensor()}, {"g", g}, {"beta", beta}},
                    2,
                    at});
  ASSERT_TRUE(whole.ok()) << whole.message();
  auto part = [&](int64_t from, int64_t to, const std::string& state, const Tensor& s) {
    return run({"LinearAttention",
                27,
                {{"q", rows(q, from, to)},
                 {"k", rows(k, from, to)},
                 {"v", rows(v, from, to)},
                 {state, s},
                 {"g", rows(g, from, to)},
                 {"beta", rows(beta, from, to)}},
                2,
                at});
  };
  auto first = part(0, 4, "", Tensor());
  ASSERT_TRUE(first.ok()) << first.message();
  auto second = part(4, 6, "s", (*first)[1]);
  ASSERT_TRUE(second.ok()) << second.message();
  const Tensor joined = cat1((*first)[0], (*second)[0]);
  const auto w = values((*whole)[0]);
  expectNear(values(joined), std::vector<double>(w.begin(), w.end()), 1e-5);
  const auto ws = values((*whole)[1]);
  expectNear(values((*second)[1]), std::vector<double>(ws.begin(), ws.end()), 1e-5);
}

// Attention's sliding window (opset 25), the definition's example: with Q = K = 0 every allowed
// key weighs the same, so each output is the mean of the values in its window
// [i - left, i + right].
TEST(Attention25, SlidingWindowAveragesTheAllowedKeys) {
  const Tensor zeros = Tensor::fromVector(std::vector<float>(5, 0.0f), {1, 1, 5, 1});
  const Tensor v = Tensor::fromVector(std::vector<float>{0, 1, 2, 3, 4}, {1, 1, 5, 1});
  auto y = run({"Attention",
                25,
                {{"q", zeros}, {"k", zeros}, {"v", v}},
                1,
                {attr("left_window_size", int64_t{1}), attr("right_window_size", int64_t{2})}});
  ASSERT_TRUE(y.ok()) << y.message();
  expectNear(values((*y)[0]), {1.0, 1.5, 2.5, 3.0, 3.5}, 1e-6);
  // With is_causal the right side closes: keys i - 2 .. i.
  auto c = run({"Attention",
                25,
                {{"q", zeros}, {"k", zeros}, {"v", v}},
                1,
                {attr("left_window_size", int64_t{2}), attr("is_causal", int64_t{1})}});
  ASSERT_TRUE(c.ok()) << c.message();
  expectNear(values((*c)[0]), {0.0, 0.5, 1.0, 2.0, 3.0}, 1e-6);
  // Opset 25 refuses head counts on 4-D inputs, which opset 24 ignores.
  const std::vector<onnx::AttributeProto> heads{attr("q_num_heads", int64_t{1}),
                                                attr("kv_num_heads", int64_t{1})};
  EXPECT_TRUE(run({"Attention", 24, {{"q", zeros}, {"k", zeros}, {"v", v}}, 1, heads}).ok());
  auto bad = run({"Attention", 25, {{"q", zeros}, {"k", zeros}, {"v", v}}, 1, heads});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("q_num_heads and kv_num_heads are for 3-D inputs"),
            std::string::npos)
      << bad.message();
}

// TensorScatter's circular mode wraps any index, the most negative included, without
// overflowing: -2^63 + 1 is 1 (mod 4) for a cache of 4 positions, 2^63 - 1 is 3.
TEST(NewerOnnxKernels, CircularScatterWrapsExtremeIndices) {
  const Tensor cache = Tensor::fromVector(std::vector<float>(8, 0.0f), {2, 4});
  const Tensor update = Tensor::fromVector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto y = run({"TensorScatter",
                24,
                {{"c", cache},
                 {"u", update},
                 {"i", Tensor::fromVector(std::vector<int64_t>{INT64_MIN + 1, INT64_MAX}, {2})}},
                1,
                {attr("mode", std::string("circular")), attr("axis", int64_t{1})}});
  ASSERT_TRUE(y.ok()) << y.message();
  // Row 0 from 1: positions 1, 2. Row 1 from 3: positions 3, 0.
  expectNear(values((*y)[0]), {0, 1, 2, 0, 4, 0, 0, 3}, 0);
}

TEST(NewerOnnxKernels, RefuseWhatTheyCannotTake) {
  auto expectError = [](const Node& n, const std::string& want) {
    auto r = run(n);
    ASSERT_FALSE(r.ok()) << n.op;
    EXPECT_NE(r.message().find(want), std::string::npos) << r.message();
  };
  const Tensor f = Tensor::fromVector(std::vector<float>{1, 2, 3, 4}, {1, 2, 2});
  expectError({"BitCast", 26, {{"x", f}}, 1, {attr("to", int64_t{onnx::TensorProto::INT16})}},
              "cannot reinterpret float32 as int16");
  expectError({"TensorScatter",
               24,
               {{"c", f},
                {"u", Tensor::fromVector(std::vector<float>{9, 9}, {1, 1, 2})},
                {"i", Tensor::fromVector(std::vector<int64_t>{2}, {1})}},
               1},
              "write_indices[0] = 2 puts 1 positions outside the cache's 2 (mode linear)");
  expectError({"RegexFullMatch",
               20,
               {{"x", Tensor::fromStrings({"a"}, {1})}},
               1,
               {attr("pattern", std::string("(a"))}},
              "is not a valid RE2 expression");
  expectError({"Col2Im",
               18,
               {{"x", Tensor::fromVector(std::vector<float>(8, 1.0f), {1, 4, 2})},
                {"i", Tensor::fromVector(std::vector<int64_t>{3, 3}, {2})},
                {"b", Tensor::fromVector(std::vector<int64_t>{2, 2}, {2})}},
               1},
              "dimension 2 the number of blocks, 4");
  // Sizes whose products would overflow are refused before any arithmetic on them.
  expectError({"Col2Im",
               18,
               {{"x", Tensor::fromVector(std::vector<float>(4, 1.0f), {1, 4, 1})},
                {"i", Tensor::fromVector(std::vector<int64_t>{int64_t{1} << 40, 3}, {2})},
                {"b", Tensor::fromVector(std::vector<int64_t>{2, 2}, {2})}},
               1},
              "exceed 2^31");
  expectError({"AffineGrid",
               20,
               {{"t", f}, {"s", Tensor::fromVector(std::vector<int64_t>{1, 1, 2, 2}, {4})}},
               1},
              "must be [N, 2, 3]");
}

}  // namespace
