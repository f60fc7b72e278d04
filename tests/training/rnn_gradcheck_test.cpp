// Gradients of ONNX RNN, GRU and LSTM (engine/training/grad_rnn.cpp, kernel
// engine/onednn/rnn_grad.cpp): finite-difference checks of every float input over directions,
// optional inputs, sequence_lens, layout, clip, custom activations and losses on any subset of
// Y, Y_h, Y_c; and agreement of the oneDNN backward with the plain C++ one.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <random>

#include "engine/session.h"
#include "engine/tensor.h"
#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"
#include "gradcheck_util.h"

namespace {

using namespace dw::engine;
using namespace dw::engine::training;

struct RnnCase {
  std::string name;
  std::string op;  // RNN, GRU, LSTM
  std::string direction = "forward";
  bool bias = false, h0 = false, c0 = false, peephole = false;
  std::vector<int64_t> lens;  // empty: no sequence_lens
  int64_t layout = 0;
  std::vector<int> lossOutputs{0};  // outputs the loss reads
  std::vector<onnx::AttributeProto> attrs;
  int opset = 14;
};

std::ostream& operator<<(std::ostream& os, const RnnCase& c) {
  return os << c.name;
}

constexpr int64_t kT = 3, kB = 2, kI = 3, kH = 2;

onnx::TensorProto floatTensor(const std::string& name, const std::vector<int64_t>& shape,
                              std::mt19937& rng, double scale) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_dims(d);
    n *= d;
  }
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) t.add_float_data(static_cast<float>(scale) * u(rng));
  return t;
}

struct Built {
  onnx::ModelProto model;
  std::vector<std::string> trainable;
};

// One recurrent node on initializers, loss = sum over lossOutputs k of ReduceSum(out_k * R_k).
Built buildModel(const RnnCase& c) {
  const int64_t G = c.op == "LSTM" ? 4 : (c.op == "GRU" ? 3 : 1);
  const int64_t D = c.direction == "bidirectional" ? 2 : 1;
  std::mt19937 rng(2024);
  Built b;
  auto* n = test::singleOpModel(b.model, c.opset, c.name, c.op, "rnn");
  auto* g = b.model.mutable_graph();
  // Inputs in ONNX order; absent optional ones stay empty names (trailing ones dropped).
  std::vector<std::string> ins(8);
  auto add = [&](int index, const std::string& name, std::vector<int64_t> shape, double scale) {
    *g->add_initializer() = floatTensor(name, shape, rng, scale);
    b.trainable.push_back(name);
    ins[index] = name;
  };
  const bool lstm = c.op == "LSTM";
  const std::vector<int64_t> state =
      c.layout ? std::vector<int64_t>{kB, D, kH} : std::vector<int64_t>{D, kB, kH};
  add(0, "X", c.layout ? std::vector<int64_t>{kB, kT, kI} : std::vector<int64_t>{kT, kB, kI}, 1.0);
  add(1, "W", {D, G * kH, kI}, 0.8);
  add(2, "R", {D, G * kH, kH}, 0.8);
  if (c.bias) add(3, "B", {D, 2 * G * kH}, 0.5);
  if (!c.lens.empty()) {
    onnx::TensorProto t;
    t.set_name("lens");
    t.set_data_type(onnx::TensorProto::INT32);
    t.add_dims(kB);
    for (int64_t l : c.lens) t.add_int32_data(static_cast<int32_t>(l));
    *g->add_initializer() = t;
    ins[4] = "lens";
  }
  if (c.h0) add(5, "h0", state, 0.7);
  if (lstm && c.c0) add(6, "c0", state, 0.7);
  if (lstm && c.peephole) add(7, "P", {D, 3 * kH}, 0.5);
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  for (const auto& i : ins) n->add_input(i);
  const int outputs = lstm ? 3 : 2;
  for (int o = 0; o < outputs; ++o) n->add_output("y" + std::to_string(o));
  *n->add_attribute() = attrI("hidden_size", kH);
  if (c.direction != "forward") *n->add_attribute() = attrS("direction", c.direction);
  if (c.layout) *n->add_attribute() = attrI("layout", c.layout);
  for (const auto& a : c.attrs) *n->add_attribute() = a;

  std::vector<std::string> terms;
  for (int o : c.lossOutputs) {
    std::vector<int64_t> shape;
    if (o == 0)
      shape = c.layout ? std::vector<int64_t>{kB, kT, D, kH} : std::vector<int64_t>{kT, D, kB, kH};
    else
      shape = state;
    const std::string k = std::to_string(o);
    auto r = floatTensor("Rw" + k, shape, rng, 1.0);
    *g->add_initializer() = r;
    terms.push_back(c.lossOutputs.size() == 1 ? "loss" : "term" + k);
    test::addWeightedSum(g, "y" + k, "Rw" + k, terms.back(), "loss" + k + "_");
  }
  if (terms.size() > 1) {
    auto* s = g->add_node();
    s->set_op_type("Sum");
    s->set_name("loss_total");
    for (const auto& t : terms) s->add_input(t);
    s->add_output("loss");
  }
  test::addLossOutput(g, onnx::TensorProto::FLOAT);
  return b;
}

// Gradients of the loss w.r.t. every float input.
dw::Result<GradientGraph> gradientGraph(const Built& b) {
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = b.trainable;
  return buildGradientGraph(b.model, opt);
}

std::vector<RnnCase> cases() {
  std::vector<RnnCase> v;
  auto acts = [](std::vector<std::string> names) {
    onnx::AttributeProto a;
    a.set_name("activations");
    a.set_type(onnx::AttributeProto::STRINGS);
    for (auto& s : names) a.add_strings(s);
    return a;
  };
  for (const std::string op : {"LSTM", "GRU", "RNN"}) {
    const bool lstm = op == "LSTM";
    // Every direction, with all optional inputs (oneDNN path).
    for (const std::string dir : {"forward", "reverse", "bidirectional"}) {
      RnnCase c{op + "_" + dir, op, dir, true, true, lstm, lstm};
      c.lossOutputs = lstm ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
      v.push_back(c);
    }
    // Bare inputs X, W, R only.
    v.push_back({op + "_no_optional_inputs", op});
    // sequence_lens: the C++ path, both directions at once.
    {
      RnnCase c{op + "_sequence_lens", op, "bidirectional", true, true, lstm, lstm};
      c.lens = {3, 1};
      c.lossOutputs = lstm ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
      v.push_back(c);
    }
    {
      RnnCase c{op + "_reverse_sequence_lens", op, "reverse", true, true};
      c.lens = {2, 0};
      c.lossOutputs = {0, 1};
      v.push_back(c);
    }
    // layout=1 (batch-major), bidirectional.
    {
      RnnCase c{op + "_layout1", op, "bidirectional", true, true, lstm};
      c.layout = 1;
      c.lossOutputs = {0, 1};
      v.push_back(c);
    }
    // Losses on the final states only.
    {
      RnnCase c{op + "_final_states_only", op, "forward", true, true, lstm};
      c.lossOutputs = lstm ? std::vector<int>{1, 2} : std::vector<int>{1};
      v.push_back(c);
    }
    if (lstm) {
      RnnCase c{"LSTM_Yc_only", op, "reverse", true, true, true, true};
      c.lossOutputs = {2};
      v.push_back(c);
    }
  }
  // GRU linear_before_reset=1 (oneDNN lbr_gru) in each direction and with sequence_lens.
  for (const std::string dir : {"forward", "reverse", "bidirectional"}) {
    RnnCase c{"GRU_lbr_" + dir, "GRU", dir, true, true};
    c.attrs = {attrI("linear_before_reset", 1)};
    c.lossOutputs = {0, 1};
    v.push_back(c);
  }
  {
    RnnCase c{"GRU_lbr_sequence_lens_layout1", "GRU", "bidirectional", true, true};
    c.attrs = {attrI("linear_before_reset", 1)};
    c.lens = {1, 3};
    c.layout = 1;
    c.lossOutputs = {0, 1};
    v.push_back(c);
  }
  // Non-default activations, clip and input_forget (the C++ path).
  {
    RnnCase c{"LSTM_clip_input_forget_activations", "LSTM", "bidirectional", true, true, true};
    c.attrs = {attrF("clip", 0.9f), attrI("input_forget", 1),
               acts({"HardSigmoid", "Softsign", "ScaledTanh", "Sigmoid", "Tanh", "Softplus"})};
    onnx::AttributeProto alpha = attrF("activation_alpha", 0);
    alpha.set_type(onnx::AttributeProto::FLOATS);
    alpha.add_floats(0.3f);
    alpha.add_floats(1.2f);
    onnx::AttributeProto beta = attrF("activation_beta", 0);
    beta.set_type(onnx::AttributeProto::FLOATS);
    beta.add_floats(0.45f);
    beta.add_floats(0.8f);
    c.attrs.push_back(alpha);
    c.attrs.push_back(beta);
    c.lossOutputs = {0, 1, 2};
    v.push_back(c);
  }
  {
    RnnCase c{"GRU_activations_clip", "GRU", "forward", true, true};
    c.attrs = {acts({"Sigmoid", "Elu"}), attrF("clip", 1.0f)};
    v.push_back(c);
  }
  {
    RnnCase c{"RNN_relu", "RNN", "bidirectional", true, true};
    c.attrs = {acts({"Relu"})};
    c.lossOutputs = {0, 1};
    v.push_back(c);
  }
  {
    RnnCase c{"RNN_sigmoid", "RNN", "forward", true};
    c.attrs = {acts({"Sigmoid"})};
    v.push_back(c);
  }
  {
    RnnCase c{"RNN_affine_scaledtanh", "RNN", "bidirectional", true, true};
    c.attrs = {acts({"Affine", "ScaledTanh"})};
    onnx::AttributeProto alpha = attrF("activation_alpha", 0);
    alpha.set_type(onnx::AttributeProto::FLOATS);
    alpha.add_floats(0.7f);
    alpha.add_floats(1.3f);
    c.attrs.push_back(alpha);
    c.lossOutputs = {0, 1};
    v.push_back(c);
  }
  // Older opsets (no layout attribute).
  {
    RnnCase c{"LSTM_opset8", "LSTM", "forward", true, true, true, true};
    c.opset = 8;  // LSTM-7 semantics; Sum (the loss) needs 8
    c.lossOutputs = {0, 2};
    v.push_back(c);
  }
  return v;
}

class RnnGradCheck : public ::testing::TestWithParam<RnnCase> {};

TEST_P(RnnGradCheck, MatchesFiniteDifferences) {
  const RnnCase& c = GetParam();
  Built b = buildModel(c);
  auto gg = gradientGraph(b);
  ASSERT_TRUE(gg.ok()) << gg.message();
  auto session = InferenceSession::create(gg->model);
  ASSERT_TRUE(session.ok()) << session.message();
  auto tol = test::fdTolerance(false);
  tol.atolScalesWithGradient = true;
  const int checked = test::checkFiniteDifferences(
      **session, *gg, test::initializerFeeds(b.model, *gg), b.trainable, {}, "loss", tol, c.name);
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Recurrent, RnnGradCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<RnnCase>& i) { return i.param.name; });

// Runs the gradient graph with the RecurrentGrad node forced to `impl`.
std::map<std::string, Tensor> gradientsWith(const Built& b, const GradientGraph& gg,
                                            const std::string& impl) {
  onnx::ModelProto m = gg.model;
  int found = 0;
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (n.op_type() == "RecurrentGrad") {
      *n.add_attribute() = attrS("impl", impl);
      ++found;
    }
  EXPECT_EQ(found, 1);
  auto session = InferenceSession::create(m);
  EXPECT_TRUE(session.ok()) << session.message();
  if (!session.ok()) return {};
  auto r = (*session)->run(test::initializerFeeds(b.model, gg));
  EXPECT_TRUE(r.ok()) << impl << ": " << r.message();
  return r.ok() ? *r : std::map<std::string, Tensor>{};
}

// The oneDNN backward primitives and the C++ backpropagation through time give the same
// gradients on every configuration oneDNN computes.
TEST(RnnGradPaths, OneDnnMatchesReference) {
  int compared = 0;
  for (const auto& c : cases()) {
    bool oneDnn = c.lens.empty();
    for (const auto& a : c.attrs) {
      if (a.name() == "clip" || a.name() == "input_forget") oneDnn = false;
      if (a.name() == "activations")
        oneDnn = oneDnn && c.op == "RNN" && a.strings_size() == 1;  // Relu, Sigmoid
    }
    if (!oneDnn) continue;
    SCOPED_TRACE(c.name);
    Built b = buildModel(c);
    auto gg = gradientGraph(b);
    ASSERT_TRUE(gg.ok()) << gg.message();
    auto fast = gradientsWith(b, *gg, "onednn");
    auto ref = gradientsWith(b, *gg, "reference");
    for (const auto& name : gg->gradOutputs) {
      ASSERT_TRUE(fast.count(name) && ref.count(name)) << name;
      const Tensor& x = fast.at(name);
      const Tensor& y = ref.at(name);
      ASSERT_EQ(x.shape(), y.shape()) << name;
      for (int64_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(x.getDouble(i), y.getDouble(i), 1e-4 + 1e-4 * std::abs(y.getDouble(i)))
            << c.name << " " << name << "[" << i << "]";
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);
}

// impl=onednn refuses what oneDNN's cells cannot compute instead of silently falling back.
TEST(RnnGradPaths, OneDnnRefusesCustomConfigurations) {
  RnnCase c{"clip", "LSTM", "forward", true};
  c.attrs = {attrF("clip", 0.5f)};
  Built b = buildModel(c);
  auto gg = gradientGraph(b);
  ASSERT_TRUE(gg.ok()) << gg.message();
  onnx::ModelProto m = gg->model;
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (n.op_type() == "RecurrentGrad") *n.add_attribute() = attrS("impl", "onednn");
  auto session = InferenceSession::create(m);
  ASSERT_TRUE(session.ok()) << session.message();
  auto r = (*session)->run(test::initializerFeeds(b.model, *gg));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("clip"), std::string::npos) << r.message();
}

// Only the requested gradients are computed: with X as the sole trainable input the backward
// node has one output, and the recurrent ops' integer sequence_lens never asks for one.
TEST(RnnGradBuilder, EmitsOnlyRequestedGradients) {
  RnnCase c{"x_only", "GRU", "forward", true, true};
  c.lens = {3, 2};
  Built b = buildModel(c);
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"X"};
  auto gg = buildGradientGraph(b.model, opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  int nodes = 0;
  for (const auto& n : gg->model.graph().node())
    if (n.op_type() == "RecurrentGrad") {
      ++nodes;
      EXPECT_EQ(n.domain(), kGradDomain);
      ASSERT_EQ(n.output_size(), 1);
      EXPECT_FALSE(n.output(0).empty());
    }
  EXPECT_EQ(nodes, 1);
}

}  // namespace
