// Attention (opset 23) against tests/golden/attention_golden.json, which
// tests/golden/make_attention_golden.py computes with torch from the ONNX definition: 4-D and
// packed 3-D inputs, grouped-query heads, bool and float masks, is_causal with past key/value
// caches and the present outputs, scale, softcap, the four qk_matmul_output stages and a query
// whose every key is blocked. (The same cases matched ONNX Runtime 1.30 to 2.4e-7 when the
// kernel was written.) Inconsistent inputs are errors that say what to fix.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;
using json = nlohmann::json;

Tensor tensorOf(const json& j) {
  Shape shape = j.at("shape").get<Shape>();
  if (j.at("bool").get<bool>()) {
    std::vector<uint8_t> b;
    for (const auto& v : j.at("values")) b.push_back(v.get<bool>() ? 1 : 0);
    Tensor t(DType::kBool, shape);
    for (size_t i = 0; i < b.size(); ++i) t.data<bool>()[i] = b[i] != 0;
    return t;
  }
  return Tensor::fromVector(j.at("values").get<std::vector<float>>(), shape);
}

onnx::ModelProto attentionModel(const json& c) {
  onnx::ModelProto m = test::emptyModel(23);
  m.set_ir_version(10);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("Attention");
  for (const char* name : {"Q", "K", "V", "attn_mask", "past_key", "past_value"}) {
    const bool has = c.at("inputs").contains(name);
    if (has) {
      auto* v = g->add_input();
      v->set_name(name);
      v->mutable_type()->mutable_tensor_type()->set_elem_type(c["inputs"][name]["bool"].get<bool>()
                                                                  ? onnx::TensorProto::BOOL
                                                                  : onnx::TensorProto::FLOAT);
    }
    n->add_input(has ? name : "");
  }
  while (n->input_size() > 3 && n->input(n->input_size() - 1).empty())
    n->mutable_input()->RemoveLast();
  const char* outputs[] = {"Y", "present_key", "present_value", "qk_matmul_output"};
  int last = 0;
  for (int i = 0; i < 4; ++i)
    if (c.at("outputs").contains(outputs[i])) last = i;
  for (int i = 0; i <= last; ++i) {
    const bool has = c["outputs"].contains(outputs[i]);
    n->add_output(has ? outputs[i] : "");
    if (has) g->add_output()->set_name(outputs[i]);
  }
  for (const auto& [name, value] : c.at("attrs").items()) {
    auto* a = n->add_attribute();
    a->set_name(name);
    if (value.is_number_float()) {
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(value.get<float>());
    } else {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(value.get<int64_t>());
    }
  }
  return m;
}

TEST(Attention, MatchesTorchGolden) {
  std::ifstream f(std::string(DW_SOURCE_DIR) + "/tests/golden/attention_golden.json");
  ASSERT_TRUE(f) << "tests/golden/attention_golden.json is missing";
  const json cases = json::parse(f);
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    auto session = InferenceSession::create(attentionModel(c));
    ASSERT_TRUE(session.ok()) << session.message();
    std::map<std::string, Tensor> feeds;
    for (const auto& [name, t] : c.at("inputs").items()) feeds[name] = tensorOf(t);
    auto out = (*session)->run(feeds);
    ASSERT_TRUE(out.ok()) << out.message();
    for (const auto& [name, want] : c.at("outputs").items()) {
      SCOPED_TRACE(name);
      const Tensor& got = out->at(name);
      ASSERT_EQ(got.shape(), want.at("shape").get<Shape>());
      const auto values = want.at("values").get<std::vector<double>>();
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_NEAR(got.data<float>()[i], values[i], 2e-5 * (1 + std::fabs(values[i]))) << i;
    }
  }
}

TEST(Attention, InconsistentInputsAreErrors) {
  const json base = json::parse(R"({"attrs": {}, "outputs": {"Y": {}}, "inputs": {
      "Q": {"shape": [1, 2, 3, 4], "bool": false, "values": []},
      "K": {"shape": [1, 2, 3, 4], "bool": false, "values": []},
      "V": {"shape": [1, 2, 3, 4], "bool": false, "values": []}}})");
  auto run = [&](const json& c, std::map<std::string, Tensor> feeds) -> dw::Status {
    auto s = InferenceSession::create(attentionModel(c));
    if (!s) return s.status();
    auto out = (*s)->run(feeds);
    return out.ok() ? dw::Status() : out.status();
  };
  const Tensor q = test::randomTensor({1, 2, 3, 4}, 1);
  // Three heads of K for two of Q.
  const Tensor kv3 = test::randomTensor({1, 3, 3, 4}, 2);
  dw::Status st = run(base, {{"Q", q}, {"K", kv3}, {"V", kv3}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("heads"), std::string::npos) << st.message();
  // Packed inputs without head counts.
  const Tensor p = test::randomTensor({1, 3, 8}, 3);
  st = run(base, {{"Q", p}, {"K", p}, {"V", p}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("q_num_heads"), std::string::npos) << st.message();
  // A mask that does not broadcast.
  json masked = base;
  masked["inputs"]["attn_mask"] = {{"shape", {5, 3}}, {"bool", false}, {"values", json::array()}};
  st = run(masked, {{"Q", q}, {"K", q}, {"V", q}, {"attn_mask", test::randomTensor({5, 3}, 4)}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("attn_mask"), std::string::npos) << st.message();
}

// RotaryEmbedding (opset 23) against its definition written out here: pairs (x[i], x[i + 2])
// of a 4-D head of 6 with rotary_embedding_dim 4 (the last two copied), and interleaved pairs
// (x[2i], x[2i + 1]) of packed heads whose angles come from position_ids. (Both matched ONNX
// Runtime 1.30 to 2.4e-7 when the kernel was written.)
TEST(RotaryEmbedding, RotatesPairsByTheCachedAngles) {
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed);
    onnx::ModelProto m = test::emptyModel(23);
    m.set_ir_version(10);
    auto* g = m.mutable_graph();
    const Shape xs = packed ? Shape{2, 3, 8} : Shape{1, 2, 3, 6};
    const int64_t half = 2, D = packed ? 4 : 6, H = 2, S = 3;
    const Shape cs = packed ? Shape{5, half} : Shape{1, S, half};
    test::addValue(g->add_input(), "x", xs);
    test::addValue(g->add_input(), "c", cs);
    test::addValue(g->add_input(), "s", cs);
    g->add_output()->set_name("y");
    auto* n = g->add_node();
    n->set_op_type("RotaryEmbedding");
    for (const char* in : {"x", "c", "s"}) n->add_input(in);
    std::map<std::string, Tensor> feeds{{"x", test::randomTensor(xs, 1)},
                                        {"c", test::randomTensor(cs, 2)},
                                        {"s", test::randomTensor(cs, 3)}};
    const std::vector<int64_t> pos{0, 1, 2, 4, 3, 1};
    auto attr = [&](const char* name, int64_t v) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(v);
    };
    if (packed) {
      auto* p = g->add_input();
      p->set_name("p");
      p->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
      n->add_input("p");
      feeds["p"] = Tensor::fromVector(pos, {2, S});
      attr("num_heads", H);
      attr("interleaved", 1);
    } else {
      attr("rotary_embedding_dim", 4);
    }
    n->add_output("y");
    auto session = InferenceSession::create(m);
    ASSERT_TRUE(session.ok()) << session.message();
    auto out = (*session)->run(feeds);
    ASSERT_TRUE(out.ok()) << out.message();
    const float* x = feeds["x"].data<float>();
    const float* c = feeds["c"].data<float>();
    const float* sn = feeds["s"].data<float>();
    const float* y = out->at("y").data<float>();
    const int64_t B = xs[0];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < S; ++t) {
          const int64_t at = packed ? (b * S + t) * H * D + h * D : ((b * H + h) * S + t) * D;
          const int64_t row = packed ? pos[b * S + t] : t;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t i1 = packed ? 2 * i : i, i2 = packed ? 2 * i + 1 : i + half;
            const double cv = c[row * half + i], sv = sn[row * half + i];
            EXPECT_NEAR(y[at + i1], x[at + i1] * cv - x[at + i2] * sv, 1e-6);
            EXPECT_NEAR(y[at + i2], x[at + i1] * sv + x[at + i2] * cv, 1e-6);
          }
          for (int64_t d = 2 * half; d < D; ++d) EXPECT_EQ(y[at + d], x[at + d]);
        }
  }
}

}  // namespace
