// DecoderMaskedMultiHeadAttention in the forms ONNX Runtime's CPU kernel cannot check (its golden
// cases are in tests/golden/ort-contrib): a query packed with key and value, the first step of
// an empty cache, and beams reading earlier positions through cache_indirection. Each is checked
// against an equivalent call of a form ONNX Runtime did check.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <map>

#include "engine/session.h"
#include "nodes/catalogue.h"
#include "tests/engine/onnx_builder.h"

namespace dw::engine {
namespace {

using test::maxDiff;
using test::randomTensor;

constexpr int64_t B = 2, N = 2, H = 4, D = N * H, L = 6;

// Runs one com.microsoft node: `in` in input order ("" names leave an input out), int32 or
// float32 inputs.
std::map<std::string, Tensor> runNode(const std::string& type,
                                      const std::vector<std::pair<std::string, Tensor>>& in,
                                      const std::vector<std::string>& outs,
                                      const std::vector<onnx::AttributeProto>& attrs) {
  (void)Catalogue::instance();
  onnx::ModelProto m = test::emptyModel(17);
  auto* op = m.add_opset_import();
  op->set_domain(kMicrosoftDomain);
  op->set_version(1);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(type);
  n->set_domain(kMicrosoftDomain);
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, t] : in) {
    n->add_input(name);
    if (name.empty()) continue;
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(
        t.dtype() == DType::kInt32 ? onnx::TensorProto::INT32 : onnx::TensorProto::FLOAT);
    feeds.emplace(name, t);
  }
  for (const auto& o : outs) {
    n->add_output(o);
    g->add_output()->set_name(o);
  }
  for (const auto& a : attrs) *n->add_attribute() = a;
  auto s = InferenceSession::create(m);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s) return {};
  auto out = (*s)->run(feeds);
  EXPECT_TRUE(out.ok()) << out.message();
  return out ? *out : std::map<std::string, Tensor>{};
}

// DecoderMaskedMultiHeadAttention; `in` by input position (absent: left out).
std::map<std::string, Tensor> run(const std::map<int, Tensor>& in) {
  static const char* names[] = {"query",
                                "key",
                                "value",
                                "mask_index",
                                "attention_bias",
                                "past_key",
                                "past_value",
                                "past_sequence_length",
                                "beam_width",
                                "cache_indirection",
                                "bias"};
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (int i = 0; i <= in.rbegin()->first; ++i) {
    auto it = in.find(i);
    ordered.emplace_back(it == in.end() ? "" : names[i], it == in.end() ? Tensor() : it->second);
  }
  std::vector<std::string> outs{"output"};
  if (in.count(5)) outs.insert(outs.end(), {"present_key", "present_value"});
  return runNode(
      "DecoderMaskedMultiHeadAttention", ordered, outs,
      {test::attribute("num_heads", N), test::attribute("past_present_share_buffer", int64_t{1})});
}

Tensor ints(std::vector<int32_t> v, Shape s) {
  return Tensor::fromVector(v, std::move(s));
}

TEST(DecoderMaskedMha, PackedQueryEqualsSeparateKeyAndValue) {
  const Tensor q = randomTensor({B, 1, D}, 1), k = randomTensor({B, 1, D}, 2),
               v = randomTensor({B, 1, D}, 3), bias = randomTensor({3 * D}, 4);
  const Tensor pk = randomTensor({B, N, L, H}, 5), pv = randomTensor({B, N, L, H}, 6);
  Tensor packed(DType::kFloat, {B, 1, 3 * D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < D; ++i) {
      packed.data<float>()[b * 3 * D + i] = q.data<float>()[b * D + i];
      packed.data<float>()[b * 3 * D + D + i] = k.data<float>()[b * D + i];
      packed.data<float>()[b * 3 * D + 2 * D + i] = v.data<float>()[b * D + i];
    }
  const Tensor p = ints({3}, {1});
  auto separate = run({{0, q}, {1, k}, {2, v}, {5, pk}, {6, pv}, {7, p}, {10, bias}});
  auto together = run({{0, packed}, {5, pk}, {6, pv}, {7, p}, {10, bias}});
  ASSERT_EQ(separate.size(), 3u);
  ASSERT_EQ(together.size(), 3u);
  for (const char* o : {"output", "present_key", "present_value"})
    EXPECT_EQ(maxDiff(separate.at(o), together.at(o)), 0.0f) << o;
}

// With an empty cache the token attends to itself alone: the output is its value (plus bias),
// and the cache gets the new key and value in slot 0, the rest untouched.
TEST(DecoderMaskedMha, FirstStepReturnsTheValueAndFillsSlotZero) {
  const Tensor q = randomTensor({B, 1, D}, 11), k = randomTensor({B, 1, D}, 12),
               v = randomTensor({B, 1, D}, 13), bias = randomTensor({3 * D}, 14);
  const Tensor pk = randomTensor({B, N, L, H}, 15), pv = randomTensor({B, N, L, H}, 16);
  auto r = run({{0, q}, {1, k}, {2, v}, {5, pk}, {6, pv}, {7, ints({0}, {1})}, {10, bias}});
  ASSERT_EQ(r.size(), 3u);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t i = n * H + h, slot = ((b * N + n) * L) * H + h;
        EXPECT_NEAR(r.at("output").data<float>()[b * D + i],
                    v.data<float>()[b * D + i] + bias.data<float>()[2 * D + i], 1e-6f);
        EXPECT_EQ(r.at("present_key").data<float>()[slot],
                  k.data<float>()[b * D + i] + bias.data<float>()[D + i]);
        EXPECT_EQ(r.at("present_value").data<float>()[slot + H], pv.data<float>()[slot + H]);
      }
}

// Two beams of one sentence. cache_indirection pointing each beam at itself is the plain call;
// pointing beam 1 at beam 0 for the earlier positions is the plain call on a cache whose row 1
// holds row 0's earlier positions.
TEST(DecoderMaskedMha, BeamsReadEarlierPositionsThroughTheIndirection) {
  constexpr int64_t P = 4;
  const Tensor q = randomTensor({B, 1, D}, 21), k = randomTensor({B, 1, D}, 22),
               v = randomTensor({B, 1, D}, 23);
  const Tensor pk = randomTensor({B, N, L, H}, 25), pv = randomTensor({B, N, L, H}, 26);
  const Tensor p = ints({P}, {1}), beams = ints({2}, {1});
  std::vector<int32_t> self(2 * L), fromZero(2 * L);
  for (int64_t t = 0; t < L; ++t)
    self[t] = 0, self[L + t] = 1, fromZero[t] = 0, fromZero[L + t] = 0;
  auto plain = run({{0, q}, {1, k}, {2, v}, {5, pk}, {6, pv}, {7, p}});
  auto own = run(
      {{0, q}, {1, k}, {2, v}, {5, pk}, {6, pv}, {7, p}, {8, beams}, {9, ints(self, {1, 2, L})}});
  ASSERT_EQ(plain.size(), 3u);
  ASSERT_EQ(own.size(), 3u);
  EXPECT_EQ(maxDiff(plain.at("output"), own.at("output")), 0.0f);
  auto borrowed = run({{0, q},
                       {1, k},
                       {2, v},
                       {5, pk},
                       {6, pv},
                       {7, p},
                       {8, beams},
                       {9, ints(fromZero, {1, 2, L})}});
  Tensor pk2(DType::kFloat, pk.shape()), pv2(DType::kFloat, pv.shape());
  std::copy_n(pk.data<float>(), pk.size(), pk2.data<float>());
  std::copy_n(pv.data<float>(), pv.size(), pv2.data<float>());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < P; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t from = ((0 * N + n) * L + t) * H + h, to = ((1 * N + n) * L + t) * H + h;
        pk2.data<float>()[to] = pk.data<float>()[from];
        pv2.data<float>()[to] = pv.data<float>()[from];
      }
  auto copied = run({{0, q}, {1, k}, {2, v}, {5, pk2}, {6, pv2}, {7, p}});
  ASSERT_EQ(borrowed.size(), 3u);
  ASSERT_EQ(copied.size(), 3u);
  EXPECT_LT(maxDiff(borrowed.at("output"), copied.at("output")), 1e-6f);
  EXPECT_GT(maxDiff(borrowed.at("output"), plain.at("output")), 1e-3f);  // row 1 changed
}

// DecoderMaskedSelfAttention: its projection x W + bias, as the packed query of
// DecoderMaskedMultiHeadAttention, with its past split into the two caches; with do_rotary, the
// query and key turned by the position first (adjacent pairs, angle pos / 10000^(2i / size)).
std::map<std::string, Tensor> runSelf(const Tensor& x, const Tensor& w, const Tensor& bias,
                                      const Tensor& past, int32_t pos, bool rotary) {
  return runNode(
      "DecoderMaskedSelfAttention",
      {{"input", x},
       {"weights", w},
       {"bias", bias},
       {"", Tensor()},
       {"past", past},
       {"", Tensor()},
       {"len", ints({pos}, {1})}},
      {"output", "present"},
      {test::attribute("num_heads", N), test::attribute("past_present_share_buffer", int64_t{1}),
       test::attribute("do_rotary", int64_t{rotary ? 1 : 0})});
}

TEST(DecoderMaskedSelfAttention, IsTheMultiHeadStepOnItsProjection) {
  constexpr int64_t In = 5, P = 3;
  const Tensor x = randomTensor({B, 1, In}, 31), w = randomTensor({In, 3 * D}, 32),
               bias = randomTensor({3 * D}, 33), past = randomTensor({2, B, N, L, H}, 34);
  Tensor qkv(DType::kFloat, {B, 1, 3 * D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < 3 * D; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < In; ++k)
        acc += double(x.data<float>()[b * In + k]) * w.data<float>()[k * 3 * D + j];
      qkv.data<float>()[b * 3 * D + j] = static_cast<float>(acc);
    }
  Tensor pk(DType::kFloat, {B, N, L, H}), pv(DType::kFloat, {B, N, L, H});
  std::copy_n(past.data<float>(), pk.size(), pk.data<float>());
  std::copy_n(past.data<float>() + pk.size(), pv.size(), pv.data<float>());
  for (bool rotary : {false, true}) {
    SCOPED_TRACE(rotary ? "rotary" : "plain");
    Tensor q(DType::kFloat, {B, 1, D}), k(DType::kFloat, {B, 1, D}), v(DType::kFloat, {B, 1, D});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < D; ++i) {
        const float* row = qkv.data<float>() + b * 3 * D;
        q.data<float>()[b * D + i] = row[i] + bias.data<float>()[i];
        k.data<float>()[b * D + i] = row[D + i] + bias.data<float>()[D + i];
        v.data<float>()[b * D + i] = row[2 * D + i] + bias.data<float>()[2 * D + i];
      }
    if (rotary)
      for (Tensor* t : {&q, &k})
        for (int64_t h = 0; h < B * N; ++h)
          for (int64_t i = 0; i < H; i += 2) {
            float* e = t->data<float>() + h * H + i;
            const double a = P / std::pow(10000.0, double(i) / H), x0 = e[0], x1 = e[1];
            e[0] = static_cast<float>(x0 * std::cos(a) - x1 * std::sin(a));
            e[1] = static_cast<float>(x0 * std::sin(a) + x1 * std::cos(a));
          }
    auto multi = run({{0, q}, {1, k}, {2, v}, {5, pk}, {6, pv}, {7, ints({P}, {1})}});
    auto self = runSelf(x, w, bias, past, P, rotary);
    ASSERT_EQ(multi.size(), 3u);
    ASSERT_EQ(self.size(), 2u);
    EXPECT_LT(maxDiff(multi.at("output"), self.at("output")), 1e-5f);
    const Tensor& present = self.at("present");
    ASSERT_EQ(present.shape(), (Shape{2, B, N, L, H}));
    for (int64_t i = 0; i < pk.size(); ++i) {
      ASSERT_NEAR(present.data<float>()[i], multi.at("present_key").data<float>()[i], 1e-6f);
      ASSERT_NEAR(present.data<float>()[pk.size() + i], multi.at("present_value").data<float>()[i],
                  1e-6f);
    }
  }
}

}  // namespace
}  // namespace dw::engine
