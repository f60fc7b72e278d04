// Autodiff behaviour beyond per-op gradients: lda coeff, accumulation over several consumers,
// BatchNormalization running statistics, Dropout in eval mode, pruning, error messages, the
// layout of the gradient graph, and lda coeff read from an exported model's metadata.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <random>

#include "engine/session.h"
#include "engine/tensor.h"
#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"

namespace {

using namespace dw::engine;
using namespace dw::engine::training;

// A small model builder: float initializers with seeded random values, nodes, outputs.
class Model {
 public:
  explicit Model(int opset = 17) {
    m_.set_ir_version(8);
    auto* imp = m_.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    m_.mutable_graph()->set_name("test");
  }
  Model& init(const std::string& name, const std::vector<int64_t>& shape, unsigned seed,
              float lo = -1, float hi = 1) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (auto d : shape) {
      t->add_dims(d);
      n *= d;
    }
    for (int64_t i = 0; i < n; ++i) t->add_float_data(u(rng));
    return *this;
  }
  Model& input(const std::string& name, const std::vector<int64_t>& shape) {
    auto* vi = m_.mutable_graph()->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    return *this;
  }
  Model& node(const std::string& op, const std::string& name, std::vector<std::string> in,
              std::vector<std::string> out, std::vector<onnx::AttributeProto> attrs = {}) {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    for (auto& a : attrs) *n->add_attribute() = a;
    return *this;
  }
  Model& output(const std::string& name) {
    auto* o = m_.mutable_graph()->add_output();
    o->set_name(name);
    o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    o->mutable_type()->mutable_tensor_type()->mutable_shape();  // the losses here are scalars
    return *this;
  }
  onnx::ModelProto& proto() { return m_; }

 private:
  onnx::ModelProto m_;
};

Tensor randomTensor(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(numElements(s));
  for (auto& x : v) x = u(rng);
  return Tensor::fromVector(v, s);
}

// Runs the gradient graph with the initial values of the moved initializers fed back in.
std::map<std::string, Tensor> runGradient(const onnx::ModelProto& forward, const GradientGraph& gg,
                                          std::map<std::string, Tensor> feeds) {
  for (const auto& init : forward.graph().initializer())
    for (const auto& in : gg.model.graph().input())
      if (in.name() == init.name() && !feeds.count(init.name()))
        feeds[init.name()] = *tensorFromProto(init);
  auto s = InferenceSession::create(gg.model);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  auto r = (*s)->run(feeds);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::map<std::string, Tensor>{};
}

// x -> Gemm(W1) -> Relu -> Gemm(W2) -> ReduceSum: a two-layer model.
Model mlp() {
  Model m;
  m.input("x", {4, 3})
      .init("W1", {3, 5}, 1)
      .init("b1", {5}, 2)
      .init("W2", {5, 2}, 3)
      .node("Gemm", "fc1", {"x", "W1", "b1"}, {"h"})
      .node("Relu", "act", {"h"}, {"a"})
      .node("Gemm", "fc2", {"a", "W2"}, {"y"})
      .node("ReduceSum", "sum", {"y"}, {"loss"}, {attrI("keepdims", 0)})
      .output("loss");
  return m;
}

TEST(Autodiff, GraphLayoutFollowsTheContract) {
  Model m = mlp();
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W1", "b1", "W2"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  const auto& g = gg->model.graph();
  ASSERT_EQ(g.output_size(), 4);
  EXPECT_EQ(g.output(0).name(), "loss");
  EXPECT_EQ(g.output(1).name(), "W1_grad");
  EXPECT_EQ(g.output(3).name(), "W2_grad");
  EXPECT_EQ(gg->gradOutputs, (std::vector<std::string>{"W1_grad", "b1_grad", "W2_grad"}));
  std::set<std::string> inputs;
  for (const auto& i : g.input()) inputs.insert(i.name());
  EXPECT_TRUE(inputs.count("x") && inputs.count("W1") && inputs.count("W2"));
  for (const auto& i : g.initializer()) EXPECT_NE(i.name(), "W1");
  bool imports = false;
  for (const auto& imp : gg->model.opset_import()) imports |= imp.domain() == kGradDomain;
  EXPECT_TRUE(imports);
  EXPECT_NO_THROW(onnx::checker::check_model(gg->model));
}

TEST(Autodiff, LdaCoeffScalesEverythingUpstream) {
  Model m = mlp();
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W1", "b1", "W2"};
  std::map<std::string, Tensor> feeds{{"x", randomTensor({4, 3}, 9)}};
  auto plain = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(plain.ok());
  opt.ldaCoeff = {{"act", 0.5}};
  auto scaled = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(scaled.ok());
  auto a = runGradient(m.proto(), *plain, feeds);
  auto b = runGradient(m.proto(), *scaled, feeds);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  // W2 sits after the Relu: unchanged. W1 and b1 receive what the Relu sends back: halved.
  for (int64_t i = 0; i < a["W2_grad"].size(); ++i)
    EXPECT_FLOAT_EQ(b["W2_grad"].data<float>()[i], a["W2_grad"].data<float>()[i]);
  double norm = 0;
  for (const char* w : {"W1_grad", "b1_grad"})
    for (int64_t i = 0; i < a[w].size(); ++i) {
      EXPECT_FLOAT_EQ(b[w].data<float>()[i], 0.5f * a[w].data<float>()[i]) << w << "[" << i << "]";
      norm += std::abs(a[w].data<float>()[i]);
    }
  EXPECT_GT(norm, 0);
}

TEST(Autodiff, GradientsFromSeveralConsumersAreSummed) {
  // loss = sum(W * x) + sum(W * W): dW = x + 2W.
  Model m;
  m.input("x", {2, 3})
      .init("W", {2, 3}, 5)
      .node("Mul", "m1", {"W", "x"}, {"p"})
      .node("Mul", "m2", {"W", "W"}, {"q"})
      .node("Add", "add", {"p", "q"}, {"s"})
      .node("ReduceSum", "sum", {"s"}, {"loss"}, {attrI("keepdims", 0)})
      .output("loss");
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  Tensor x = randomTensor({2, 3}, 11);
  auto r = runGradient(m.proto(), *gg, {{"x", x}});
  ASSERT_FALSE(r.empty());
  Tensor w = *tensorFromProto(m.proto().graph().initializer(0));
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_NEAR(r["W_grad"].data<float>()[i], x.data<float>()[i] + 2 * w.data<float>()[i], 1e-5);
}

TEST(Autodiff, BatchNormalizationTrainingUpdatesRunningStatsWithPopulationVariance) {
  Model m;
  m.input("x", {4, 2, 3})
      .init("scale", {2}, 1, 0.5f, 1.5f)
      .init("bias", {2}, 2)
      .init("mean", {2}, 3)
      .init("var", {2}, 4, 0.5f, 1.5f)
      .node("BatchNormalization", "bn", {"x", "scale", "bias", "mean", "var"}, {"y"},
            {attrF("momentum", 0.8f), attrF("epsilon", 1e-3f)})
      .node("ReduceSumSquare", "sum", {"y"}, {"loss"}, {attrI("keepdims", 0)})
      .output("loss");
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"scale", "bias"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  ASSERT_EQ(gg->stateUpdates.size(), 2u);
  EXPECT_EQ(gg->stateUpdates[0], (std::pair<std::string, std::string>{"mean", "mean_new"}));
  EXPECT_EQ(gg->stateUpdates[1], (std::pair<std::string, std::string>{"var", "var_new"}));
  Tensor x = randomTensor({4, 2, 3}, 21);
  auto r = runGradient(m.proto(), *gg, {{"x", x}});
  ASSERT_FALSE(r.empty());
  Tensor mean0 = *tensorFromProto(m.proto().graph().initializer(2));
  Tensor var0 = *tensorFromProto(m.proto().graph().initializer(3));
  for (int c = 0; c < 2; ++c) {
    double s = 0, ss = 0;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 3; ++k) s += x.data<float>()[(n * 2 + c) * 3 + k];
    const double mu = s / 12;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 3; ++k) {
        const double d = x.data<float>()[(n * 2 + c) * 3 + k] - mu;
        ss += d * d;
      }
    const double popVar = ss / 12;  // divide by N, not N - 1
    EXPECT_NEAR(r["mean_new"].data<float>()[c], mean0.data<float>()[c] * 0.8 + mu * 0.2, 1e-5);
    EXPECT_NEAR(r["var_new"].data<float>()[c], var0.data<float>()[c] * 0.8 + popVar * 0.2, 1e-5);
  }
}

TEST(Autodiff, DropoutInEvalModeIsTheIdentity) {
  auto build = [](bool withDropout) {
    Model m;
    m.input("x", {3, 4}).init("W", {4, 4}, 7);
    m.node("MatMul", "mm", {"x", "W"}, {"h"});
    if (withDropout) {
      m.node("Dropout", "drop", {"h"}, {"d"}, {attrI("seed", 1)});
      m.node("ReduceSumSquare", "sum", {"d"}, {"loss"}, {attrI("keepdims", 0)});
    } else {
      m.node("ReduceSumSquare", "sum", {"h"}, {"loss"}, {attrI("keepdims", 0)});
    }
    m.output("loss");
    return m;
  };
  Model a = build(true), b = build(false);
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W"};
  opt.training = false;
  auto ga = buildGradientGraph(a.proto(), opt);
  auto gb = buildGradientGraph(b.proto(), opt);
  ASSERT_TRUE(ga.ok()) << ga.message();
  ASSERT_TRUE(gb.ok()) << gb.message();
  Tensor x = randomTensor({3, 4}, 3);
  auto ra = runGradient(a.proto(), *ga, {{"x", x}});
  auto rb = runGradient(b.proto(), *gb, {{"x", x}});
  ASSERT_FALSE(ra.empty());
  ASSERT_FALSE(rb.empty());
  EXPECT_FLOAT_EQ(ra["loss"].getDouble(0), rb["loss"].getDouble(0));
  for (int64_t i = 0; i < 16; ++i)
    EXPECT_FLOAT_EQ(ra["W_grad"].data<float>()[i], rb["W_grad"].data<float>()[i]);
}

TEST(Autodiff, DropoutInTrainingDrawsANewMaskEveryStep) {
  Model m;
  m.init("W", {16, 16}, 5)
      .node("Dropout", "drop", {"W"}, {"d"}, {attrI("seed", 2)})
      .node("ReduceSum", "sum", {"d"}, {"loss"}, {attrI("keepdims", 0)})
      .output("loss");
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  Tensor w = *tensorFromProto(m.proto().graph().initializer(0));
  auto s = InferenceSession::create(gg->model);
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < 2; ++step) {
    auto r = (*s)->run({{"W", w}});
    ASSERT_TRUE(r.ok()) << r.message();
    const Tensor& g = r->at("W_grad");
    // d loss / dW is mask / (1 - ratio): 0 or 2; and loss = sum(W * dW).
    double loss = 0;
    int kept = 0;
    for (int64_t i = 0; i < g.size(); ++i) {
      const float v = g.data<float>()[i];
      EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
      kept += v != 0;
      loss += w.data<float>()[i] * v;
    }
    EXPECT_NEAR(r->at("loss").getDouble(0), loss, 1e-3);
    EXPECT_GT(kept, 64);
    EXPECT_LT(kept, 192);
    grads.emplace_back(g.data<float>(), g.data<float>() + g.size());
  }
  EXPECT_NE(grads[0], grads[1]);
}

TEST(Autodiff, OpWithoutGradientIsAnErrorNamingTheNode) {
  Model m;
  m.input("x", {2, 3})
      .init("W", {2, 3}, 1)
      .node("Add", "add", {"x", "W"}, {"s"})
      .node("Floor", "my_floor", {"s"}, {"f"})
      .node("ReduceSum", "sum", {"f"}, {"loss"}, {attrI("keepdims", 0)})
      .output("loss");
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_FALSE(gg.ok());
  EXPECT_NE(gg.message().find("node 'my_floor' (Floor"), std::string::npos) << gg.message();
  EXPECT_NE(gg.message().find("no gradient"), std::string::npos) << gg.message();
}

TEST(Autodiff, OnlyPathsFromTrainableWeightsGetBackwardNodes) {
  // A Floor on a branch without trainable weights is pruned; so is everything after the last
  // trainable weight's consumer towards the inputs.
  Model m;
  m.input("x", {2, 3})
      .init("W", {2, 3}, 1)
      .node("Floor", "floor", {"x"}, {"fx"})
      .node("Mul", "mul", {"fx", "W"}, {"p"})
      .node("ReduceSum", "sum", {"p"}, {"loss"}, {attrI("keepdims", 0)})
      .output("loss");
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = {"W"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  int backward = 0;
  for (const auto& n : gg->model.graph().node()) backward += n.name().rfind("grad/", 0) == 0;
  // ReduceSum's gradient and one Mul for dW; no node for dx.
  EXPECT_EQ(backward, 2);
}

TEST(Autodiff, UnknownLossOrWeightIsAnError) {
  Model m = mlp();
  GradientGraphOptions opt;
  opt.losses = {"nope"};
  opt.trainable = {"W1"};
  auto a = buildGradientGraph(m.proto(), opt);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("'nope'"), std::string::npos);
  opt.losses = {"loss"};
  opt.trainable = {"W9"};
  auto b = buildGradientGraph(m.proto(), opt);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("'W9'"), std::string::npos);
}

TEST(Autodiff, LdaCoeffFromExportedMetadata) {
  Model m;
  m.input("x", {2, 3})
      .init("W", {3, 3}, 1)
      .node("MatMul", "mm", {"x", "W"}, {"h"})
      .node("Relu", "dense/Relu_0", {"h"}, {"a"})
      .node("Sigmoid", "dense/Sigmoid_1", {"a"}, {"y"})
      .output("y");
  auto* p = m.proto().add_metadata_props();
  p->set_key("deepwire.graph");
  p->set_value(R"({"nodes": {"node:mm": {"id": 1, "lda_coeff": 0.25},
                              "layer:dense": {"id": 2, "lda_coeff": 2.0},
                              "input:x": {"id": 3}},
                   "layers": {"dense": {"id": 2, "nodes": ["dense/Relu_0", "dense/Sigmoid_1"]}}})");
  auto c = ldaCoeffFromModel(m.proto());
  ASSERT_TRUE(c.ok()) << c.message();
  // A node's coefficient scales the gradients to all its inputs; a layer's, those to the values
  // it reads from outside itself (here h, into its first node), once, and not its weights'.
  EXPECT_EQ(*c,
            (std::map<std::string, double>{{"mm", 0.25}, {ldaInputKey("dense/Relu_0", "h"), 2.0}}));
}

}  // namespace
