// Precision bf16 (BackendOptions::precision): convolution, transposed convolution, MatMul and
// Gemm, forward and their gradients, agree with fp32 to bf16's accuracy (inputs rounded to 8
// significant bits, float32 accumulation); weights that are initializers are converted once and
// the cached copy gives the same results on later runs; a short bf16 training run of the CNN
// example lowers its loss; the Accelerator node's precision reaches the trainer's config; and a
// CPU without native bf16 refuses it with a message that says so.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "engine/training/data.h"
#include "engine/training/trainer.h"
#include "graphs/graph.h"
#include "graphs/project.h"
#include "nodes/catalogue.h"
#include "tests/engine/onnx_builder.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;
using test::addValue;
using test::attrI;
using test::attrInts;
using test::normalTensor;

bool nativeBf16() {
  return !devices().bf16Native.empty();
}

struct OpCase {
  std::string name, op;
  std::vector<std::pair<std::string, Shape>> operands;  // X first, then weights (initializers)
  std::map<std::string, std::vector<int64_t>> ints;     // attributes
  Shape yShape;
};

// Y = op(operands...), loss = ReduceSum(Y * R): the loss gradient reaching Y is the fixed
// random R. Every operand is an initializer, so the gradient graph computes all of them.
onnx::ModelProto buildModel(const OpCase& c) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name(c.name);
  uint32_t seed = 11;
  for (const auto& [name, shape] : c.operands)
    tensorToProto(normalTensor(shape, seed++), g->add_initializer(), name);
  tensorToProto(normalTensor(c.yShape, 5), g->add_initializer(), "R");
  auto* n = g->add_node();
  n->set_op_type(c.op);
  n->set_name(c.name);
  for (const auto& [name, shape] : c.operands) n->add_input(name);
  n->add_output("Y");
  for (const auto& [k, v] : c.ints) {
    if (k == "transB" || k == "group")
      attrI(n, k, v.at(0));
    else
      attrInts(n, k, v);
  }
  auto* mul = g->add_node();
  mul->set_op_type("Mul");
  mul->add_input("Y");
  mul->add_input("R");
  mul->add_output("YR");
  auto* red = g->add_node();
  red->set_op_type("ReduceSum");
  red->add_input("YR");
  red->add_output("loss");
  attrI(red, "keepdims", 0);
  addValue(g->add_output(), "loss", {});
  addValue(g->add_output(), "Y", c.yShape);
  return m;
}

std::map<std::string, Tensor> run(const onnx::ModelProto& m, const std::string& precision,
                                  const std::map<std::string, Tensor>& feeds, int times = 1) {
  SessionOptions o;
  o.backend.threads = 2;
  o.backend.precision = precision;
  auto s = InferenceSession::create(m, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  EXPECT_EQ((*s)->backend().precision(), precision);
  std::map<std::string, Tensor> out;
  for (int i = 0; i < times; ++i) {
    auto r = (*s)->run(feeds);
    EXPECT_TRUE(r.ok()) << r.message();
    if (!r.ok()) return {};
    if (i > 0) {
      // Later runs read the cached converted weights: the same bits as the first.
      for (const auto& [k, t] : *r)
        EXPECT_EQ(0, std::memcmp(t.raw(), out.at(k).raw(), t.bytes())) << k << " run " << i;
    }
    for (auto& [k, t] : *r) out[k] = t.clone();
  }
  return out;
}

// |bf16 - fp32| <= tol * max|fp32| for every element, and (when `differs`) somewhere not exact,
// which shows the bf16 primitives really ran.
void expectClose(const Tensor& ref, const Tensor& got, const std::string& what, bool differs,
                 double tol = 1e-2) {
  ASSERT_EQ(ref.shape(), got.shape()) << what;
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < ref.size(); ++i)
    scale = std::max(scale, std::fabs(static_cast<double>(ref.data<float>()[i])));
  for (int64_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(ref.data<float>()[i]) -
                                      static_cast<double>(got.data<float>()[i])));
  EXPECT_LE(worst, tol * scale + 1e-6)
      << what << ": max |bf16 - fp32| " << worst << " of " << scale;
  if (differs) {
    EXPECT_GT(worst, 0.0) << what << ": bf16 gave exactly the fp32 result";
  }
}

std::vector<OpCase> cases() {
  return {
      {"conv",
       "Conv",
       {{"X", {2, 8, 9, 9}}, {"W", {16, 8, 3, 3}}, {"B", {16}}},
       {{"pads", {1, 1, 1, 1}}},
       {2, 16, 9, 9}},
      {"conv_grouped_strided",
       "Conv",
       {{"X", {2, 16, 10, 10}}, {"W", {16, 8, 3, 3}}},
       {{"strides", {2, 2}}, {"group", {2}}},
       {2, 16, 4, 4}},
      {"conv_transpose",
       "ConvTranspose",
       {{"X", {2, 8, 5, 5}}, {"W", {8, 6, 3, 3}}, {"B", {6}}},
       {{"strides", {2, 2}}},
       {2, 6, 11, 11}},
      {"matmul", "MatMul", {{"X", {3, 20, 24}}, {"W", {24, 16}}}, {}, {3, 20, 16}},
      {"gemm",
       "Gemm",
       {{"X", {10, 32}}, {"W", {12, 32}}, {"B", {12}}},
       {{"transB", {1}}},
       {10, 12}},
  };
}

class MixedPrecision : public ::testing::TestWithParam<OpCase> {};

// Forward with the weights as initializers: the inference path, converted once and cached.
TEST_P(MixedPrecision, ForwardMatchesFp32) {
  if (!nativeBf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  const OpCase& c = GetParam();
  const onnx::ModelProto m = buildModel(c);
  auto ref = run(m, "fp32", {});
  auto got = run(m, "bf16", {}, 3);
  ASSERT_TRUE(ref.count("Y") && got.count("Y"));
  expectClose(ref.at("Y"), got.at("Y"), c.name + " Y", true);
}

// Gradients of every operand through the backward primitives (convolution backward data and
// weights, the matmuls of the MatMul/Gemm gradients).
TEST_P(MixedPrecision, GradientsMatchFp32) {
  if (!nativeBf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  const OpCase& c = GetParam();
  const onnx::ModelProto m = buildModel(c);
  GradientGraphOptions go;
  go.losses = {"loss"};
  for (const auto& [name, shape] : c.operands) go.trainable.push_back(name);
  auto gg = buildGradientGraph(m, go);
  ASSERT_TRUE(gg.ok()) << gg.message();
  std::map<std::string, Tensor> feeds;
  uint32_t seed = 11;
  for (const auto& [name, shape] : c.operands) feeds[name] = normalTensor(shape, seed++);
  auto ref = run(gg->model, "fp32", feeds);
  auto got = run(gg->model, "bf16", feeds, 2);
  ASSERT_EQ(gg->gradOutputs.size(), c.operands.size());
  for (const auto& name : gg->gradOutputs) {
    ASSERT_TRUE(ref.count(name) && got.count(name)) << name;
    // Bias gradients are sums of dY alone: exact in bf16 mode too.
    const bool bias = name.rfind("B_", 0) == 0;
    expectClose(ref.at(name), got.at(name), c.name + " " + name, !bias);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, MixedPrecision, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Image-input convolutions (<= 4 channels per group) stay float32 under bf16: bit-identical.
TEST(MixedPrecisionPolicy, FewChannelConvolutionStaysFp32) {
  if (!nativeBf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  OpCase c{"conv_rgb",
           "Conv",
           {{"X", {2, 3, 12, 12}}, {"W", {8, 3, 3, 3}}, {"B", {8}}},
           {{"pads", {1, 1, 1, 1}}},
           {2, 8, 12, 12}};
  const onnx::ModelProto m = buildModel(c);
  auto ref = run(m, "fp32", {});
  auto got = run(m, "bf16", {});
  ASSERT_TRUE(ref.count("Y") && got.count("Y"));
  EXPECT_EQ(0, std::memcmp(ref.at("Y").raw(), got.at("Y").raw(), ref.at("Y").bytes()));
}

TEST(MixedPrecisionPolicy, UnknownPrecisionIsRefused) {
  BackendOptions o;
  o.precision = "fp16";
  auto b = createBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("unknown precision 'fp16'"), std::string::npos) << b.message();
}

// tf32 is a tensor-core format: the cpu refuses it and says where it runs; auto without a usable
// GPU runs fp32 and says so.
TEST(MixedPrecisionPolicy, Tf32IsCudaOnly) {
  BackendOptions o;
  o.precision = "tf32";
  auto b = createBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("precision tf32 runs on accelerator cuda only"), std::string::npos)
      << b.message();
  o.precision = "fp16";
  b = createBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("use fp32, bf16, tf32"), std::string::npos) << b.message();
  if (cuda::deviceCount(nullptr) > 0) return;  // auto would take the GPU
  o.precision = "tf32";
  o.accelerator = "auto";
  std::string notice;
  auto a = createBackend(o, &notice);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ((*a)->precision(), "fp32");
  EXPECT_NE(notice.find("precision tf32: runs on cuda only; running in fp32"), std::string::npos)
      << notice;
}

TEST(MixedPrecisionPolicy, Bf16NeedsNativeSupport) {
  BackendOptions o;
  o.precision = "bf16";
  std::string notice;
  auto b = createBackend(o, &notice);
  if (nativeBf16()) {
    ASSERT_TRUE(b.ok()) << b.message();
    EXPECT_EQ((*b)->precision(), "bf16");
    EXPECT_NE((*b)->description().find("bf16"), std::string::npos) << (*b)->description();
    return;
  }
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("no native bf16"), std::string::npos) << b.message();
  o.accelerator = "auto";
  auto a = createBackend(o, &notice);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ((*a)->precision(), "fp32");
  EXPECT_NE(notice.find("running in fp32"), std::string::npos) << notice;
}

TEST(MixedPrecisionPolicy, AcceleratorNodeSetsTheTrainingPrecision) {
  Graph g;
  auto acc = g.addNode(kGraphDomain, "Accelerator");
  ASSERT_TRUE(acc.ok()) << acc.message();
  auto cfg = trainingConfigFromGraph(g);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(cfg->precision, "fp32");
  ASSERT_TRUE(g.setParam(*acc, "precision", Param::makeString("bf16")).ok());
  ASSERT_TRUE(g.setParam(*acc, "threads", Param::makeInt(1)).ok());
  cfg = trainingConfigFromGraph(g);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(cfg->precision, "bf16");
  EXPECT_EQ(cfg->threads, 1);
  EXPECT_FALSE(g.setParam(*acc, "precision", Param::makeString("fp8")).ok());
}

// Conv -> BatchNormalization (training) -> Relu -> MaxPool -> loss: the session folds the Relu
// into the normalization and its gradient into the pooling gradient (fuseTrainingChains); the
// loss and every gradient must be exactly those of the unfused graph, for the 2x2/2 window and
// a general overlapping one.
TEST(TrainingFusion, BatchNormReluMaxPoolChainMatchesUnfused) {
  for (const std::vector<int64_t>& pool :
       {std::vector<int64_t>{2, 2, 2, 2, 0, 0}, std::vector<int64_t>{3, 3, 2, 2, 1, 1}}) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("chain");
    addValue(g->add_input(), "X", {4, 3, 10, 10});
    tensorToProto(normalTensor({8, 3, 3, 3}, 1), g->add_initializer(), "W");
    Tensor scale = normalTensor({8}, 2), shift = normalTensor({8}, 3);
    tensorToProto(scale, g->add_initializer(), "scale");
    tensorToProto(shift, g->add_initializer(), "shift");
    tensorToProto(Tensor(DType::kFloat, {8}), g->add_initializer(), "mean");
    Tensor var(DType::kFloat, {8});
    for (int i = 0; i < 8; ++i) var.data<float>()[i] = 1;
    tensorToProto(var, g->add_initializer(), "var");
    const int64_t out = (10 + 2 * pool[4] - pool[0]) / pool[2] + 1;
    tensorToProto(normalTensor({4, 8, out, out}, 4), g->add_initializer(), "R");
    auto node = [&](const std::string& op, std::vector<std::string> in,
                    std::vector<std::string> outs) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->set_name(outs[0]);
      for (auto& i : in) n->add_input(i);
      for (auto& o : outs) n->add_output(o);
      return n;
    };
    attrInts(node("Conv", {"X", "W"}, {"C"}), "pads", {1, 1, 1, 1});
    node("BatchNormalization", {"C", "scale", "shift", "mean", "var"}, {"B"});
    node("Relu", {"B"}, {"A"});
    auto* mp = node("MaxPool", {"A"}, {"P"});
    attrInts(mp, "kernel_shape", {pool[0], pool[1]});
    attrInts(mp, "strides", {pool[2], pool[3]});
    attrInts(mp, "pads", {pool[4], pool[5], pool[4], pool[5]});
    node("Mul", {"P", "R"}, {"PR"});
    auto* red = node("ReduceSum", {"PR"}, {"loss"});
    attrI(red, "keepdims", 0);
    addValue(g->add_output(), "loss", {});
    GradientGraphOptions go;
    go.losses = {"loss"};
    go.trainable = {"W", "scale", "shift"};
    auto gg = buildGradientGraph(m, go);
    ASSERT_TRUE(gg.ok()) << gg.message();
    std::map<std::string, Tensor> feeds{{"X", normalTensor({4, 3, 10, 10}, 5)},
                                        {"W", normalTensor({8, 3, 3, 3}, 1)},
                                        {"scale", scale},
                                        {"shift", shift},
                                        {"mean", Tensor(DType::kFloat, {8})},
                                        {"var", var}};
    std::map<std::string, Tensor> results[2];
    for (int fuse = 0; fuse < 2; ++fuse) {
      SessionOptions o;
      o.backend.threads = 2;
      o.fuse = fuse != 0;
      auto s = InferenceSession::create(gg->model, o);
      ASSERT_TRUE(s.ok()) << s.message();
      auto r = (*s)->run(feeds);
      ASSERT_TRUE(r.ok()) << r.message();
      for (auto& [k, t] : *r) results[fuse][k] = t.clone();
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (const auto& [k, t] : results[0]) {
      const Tensor& f = results[1].at(k);
      ASSERT_EQ(t.shape(), f.shape()) << k;
      EXPECT_EQ(0, std::memcmp(t.raw(), f.raw(), t.bytes())) << k << " pool " << pool[0];
    }
  }
}

// One-input-channel convolutions run direct NCHW loops (single_channel_conv.cpp) unless
// something else is fused in (then oneDNN): both must agree, forward (unfused Relu vs the
// oneDNN post-op) and weight gradients (X without gradient vs X trainable, which takes oneDNN's
// backward primitives), with strides, padding and dilation.
TEST(SingleChannelConv, DirectLoopsMatchOneDnn) {
  const std::vector<std::map<std::string, std::vector<int64_t>>> attrs = {
      {{"pads", {1, 1, 1, 1}}},
      {{"pads", {2, 0, 1, 1}}, {"strides", {2, 1}}, {"dilations", {1, 2}}}};
  const std::vector<Shape> outs = {{3, 5, 11, 9}, {3, 5, 6, 6}};
  for (size_t k = 0; k < attrs.size(); ++k) {
    OpCase c{"conv1ch",
             "Conv",
             {{"X", {3, 1, 11, 9}}, {"W", {5, 1, 3, 3}}, {"B", {5}}},
             attrs[k],
             outs[k]};
    onnx::ModelProto m = buildModel(c);
    // Relu after the convolution: fused into oneDNN's primitive only when fusion is on.
    auto* g = m.mutable_graph();
    for (auto& n : *g->mutable_node())
      if (n.op_type() == "Conv") n.set_output(0, "C");
    auto* relu = g->add_node();
    relu->set_op_type("Relu");
    relu->add_input("C");
    relu->add_output("Y");
    std::map<std::string, Tensor> fwd[2];
    for (int fuse = 0; fuse < 2; ++fuse) {
      SessionOptions o;
      o.fuse = fuse != 0;
      auto s = InferenceSession::create(m, o);
      ASSERT_TRUE(s.ok()) << s.message();
      auto r = (*s)->run({});
      ASSERT_TRUE(r.ok()) << r.message();
      for (auto& [name, t] : *r) fwd[fuse][name] = t.clone();
    }
    expectClose(fwd[1].at("Y"), fwd[0].at("Y"), "forward", false, 1e-5);
    std::map<std::string, Tensor> grads[2];
    for (int withX = 0; withX < 2; ++withX) {
      GradientGraphOptions go;
      go.losses = {"loss"};
      go.trainable =
          withX ? std::vector<std::string>{"W", "B", "X"} : std::vector<std::string>{"W", "B"};
      auto gg = buildGradientGraph(m, go);
      ASSERT_TRUE(gg.ok()) << gg.message();
      std::map<std::string, Tensor> feeds{{"W", normalTensor({5, 1, 3, 3}, 12)},
                                          {"B", normalTensor({5}, 13)},
                                          {"X", normalTensor({3, 1, 11, 9}, 11)}};
      if (!withX) {
        // X stays an initializer of the gradient graph (the same values as fed above).
        feeds.erase("X");
      }
      grads[withX] = run(gg->model, "fp32", feeds);
    }
    for (const char* name : {"W_grad", "B_grad"}) {
      ASSERT_TRUE(grads[0].count(name) && grads[1].count(name)) << name;
      expectClose(grads[1].at(name), grads[0].at(name), name, false, 1e-5);
    }
  }
}

// A few bf16 steps of the Fashion-MNIST CNN (Conv/BN/Relu/MaxPool blocks, Gemm head) on a
// fixed subset: the loss of the last steps is well below the first.
TEST(MixedPrecisionTraining, CnnLossFallsInBf16) {
  if (!nativeBf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  auto project =
      loadProject(std::string(DW_SOURCE_DIR) + "/resources/examples/fashion_mnist_cnn.dwproj");
  ASSERT_TRUE(project.ok()) << project.message();
  auto cfg = trainingConfigFromGraph(*project);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  auto ds = loadDataset(cfg->dataset.train, "");
  ASSERT_TRUE(ds.ok()) << ds.message();
  TrainOptions o;
  o.optimizer.type = "adam";
  o.optimizer.lr = 1e-3;
  o.threads = 2;
  o.precision = "bf16";
  auto t = Trainer::create(*project, o);
  ASSERT_TRUE(t.ok()) << t.message();
  const int64_t batch = 64, steps = 16;
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    Dataset part = ds->slice(s * batch, (s + 1) * batch);
    Batch b;
    b.inputs = part.columns;
    b.size = batch;
    auto r = (*t)->fullTrainStep(b);
    ASSERT_TRUE(r.ok()) << r.message();
    const double l = r->losses.begin()->second;
    ASSERT_TRUE(std::isfinite(l)) << "step " << s;
    losses.push_back(l);
  }
  const double last = (losses[steps - 1] + losses[steps - 2] + losses[steps - 3]) / 3;
  EXPECT_LT(last, 0.75 * losses[0]) << "first " << losses[0] << ", last three " << last;
  for (const auto& [name, w] : (*t)->weights())
    for (int64_t i = 0; i < w.size(); ++i) ASSERT_TRUE(std::isfinite(w.data<float>()[i])) << name;
}

}  // namespace
}  // namespace dw::engine::training
