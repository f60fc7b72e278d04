// Per-layer finite-difference gradient check: every layer case of tests/graph/layer_cases.h is
// exported to ONNX, given loss = ReduceSum(Y * R) with a fixed random R, and its gradient graph
// w.r.t. the layer's Trainable weights and its float inputs is compared with central differences
// on a fixed-seed sample of elements. Layers whose lowering uses an op without a gradient builder
// are listed in kNoGradient with the op the error must name; the list is checked both ways.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "../graph/layer_cases.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "gradcheck_util.h"
#include "graphs/onnx_export.h"

namespace {

using namespace dw;
using namespace dw::engine;
using namespace dw::engine::training;
namespace lc = dw::test;
namespace gc = dw::engine::training::test;

// Layer -> the op of its lowering that has no gradient builder (the error must name it).
const std::map<std::string, std::string> kNoGradient = {};

// The op the gradient builder must report as missing for case c; "" when c must differentiate.
std::string noGradientOp(const lc::LayerCase& c) {
  auto it = kNoGradient.find(c.layer);
  return it == kNoGradient.end() ? "" : it->second;
}

// Stochastic layers are identities in inference mode; the check runs them that way.
const std::set<std::string> kInferenceMode = {"Dropout", "SpatialDropout", "AlphaDropout",
                                              "GaussianDropout", "GaussianNoise"};

// Max reductions: inputs are a shuffled ramp with steps wider than the difference step, so no
// perturbation changes which element is the maximum.
const std::set<std::string> kDistinctInput = {
    "MaxPool1D", "MaxPool2D", "MaxPool3D", "GlobalMaxPool1D", "GlobalMaxPool2D", "GlobalMaxPool3D"};

// Recurrent cells with a ReLU: a pre-activation within the default step of zero crosses the kink
// (the case's seed has one), so the difference step is smaller.
const std::set<std::string> kSmallStep = {"RNN", "SimpleRNN"};

std::string caseName(const lc::LayerCase& c, size_t index) {
  return c.layer + "_" + std::to_string(index);
}

// Float initializers the export marks Trainable (no "status" in the layout metadata).
std::vector<std::string> trainableWeights(const onnx::ModelProto& m) {
  std::string layout;
  for (const auto& p : m.metadata_props())
    if (p.key() == kLayoutMetadataKey) layout = p.value();
  auto j = nlohmann::json::parse(layout, nullptr, false);
  std::vector<std::string> out;
  if (j.is_discarded() || !j.contains("nodes")) return out;
  for (const auto& init : m.graph().initializer()) {
    const std::string key = "initializer:" + init.name();
    if (init.data_type() == onnx::TensorProto::FLOAT && j["nodes"].contains(key) &&
        !j["nodes"][key].contains("status"))
      out.push_back(init.name());
  }
  return out;
}

struct LayerModel {
  onnx::ModelProto model;
  std::vector<std::string> wrt;  // trainable weights, then float inputs
};

// The exported layer with its data inputs turned into fixed random initializers (so the
// gradient graph treats float inputs like weights) and loss = ReduceSum(Y0 * R) as sole output.
// `opset`: the graph's ai.onnx opset (0: the catalogue's default).
::testing::AssertionResult lossModel(const lc::LayerCase& c, LayerModel* out, int opset = 0) {
  Graph g;
  if (opset) {
    ModelInfo info = g.info();
    info.opsets[kOnnxDomain] = opset;
    g.setInfo(info);
  }
  auto st = lc::buildLayerGraph(c, &g);
  if (!st.ok()) return ::testing::AssertionFailure() << st.message();
  auto m = exportOnnx(g);
  if (!m.ok()) return ::testing::AssertionFailure() << m.message();
  out->model = std::move(*m);
  out->wrt = trainableWeights(out->model);
  auto* graph = out->model.mutable_graph();
  std::mt19937 rng(4321);
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int64_t> idx(0, 3);
  for (const auto& in : graph->input()) {
    const auto& tt = in.type().tensor_type();
    auto* t = graph->add_initializer();
    t->set_name(in.name());
    t->set_data_type(tt.elem_type());
    int64_t n = 1;
    for (const auto& d : tt.shape().dim()) {
      if (!d.has_dim_value())
        return ::testing::AssertionFailure() << "input " << in.name() << " has a symbolic dim";
      t->add_dims(d.dim_value());
      n *= d.dim_value();
    }
    if (tt.elem_type() == onnx::TensorProto::FLOAT && kDistinctInput.count(c.layer)) {
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int64_t i = 0; i < n; ++i)
        t->add_float_data(0.05f * static_cast<float>(order[i] - n / 2));
      out->wrt.push_back(in.name());
    } else if (tt.elem_type() == onnx::TensorProto::FLOAT && c.layer == "ThresholdedReLU") {
      // Both sides of theta = 1 (in (-1, 1) the gradient is zero everywhere), away from the jump.
      for (int64_t i = 0; i < n; ++i) {
        float v = 2 * u(rng);
        if (std::abs(v - 1) < 0.05f) v += 0.1f;
        t->add_float_data(v);
      }
      out->wrt.push_back(in.name());
    } else if (tt.elem_type() == onnx::TensorProto::FLOAT) {
      for (int64_t i = 0; i < n; ++i) t->add_float_data(u(rng));
      out->wrt.push_back(in.name());
    } else if (tt.elem_type() == onnx::TensorProto::INT64) {
      for (int64_t i = 0; i < n; ++i) t->add_int64_data(idx(rng));
    } else {
      return ::testing::AssertionFailure() << "input " << in.name() << ": unhandled type";
    }
  }
  graph->clear_input();
  const onnx::ValueInfoProto y = graph->output(0);
  graph->clear_output();
  auto* r = graph->add_initializer();
  r->set_name("gradcheck.R");
  r->set_data_type(onnx::TensorProto::FLOAT);
  std::normal_distribution<float> nd(0, 1);
  int64_t n = 1;
  for (const auto& d : y.type().tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return ::testing::AssertionFailure() << "output " << y.name() << " has a symbolic dim";
    r->add_dims(d.dim_value());
    n *= d.dim_value();
  }
  for (int64_t i = 0; i < n; ++i) r->add_float_data(nd(rng));
  dw::engine::training::test::addWeightedSum(graph, y.name(), "gradcheck.R", "loss", "gradcheck.");
  dw::engine::training::test::addLossOutput(graph, onnx::TensorProto::FLOAT);
  return ::testing::AssertionSuccess();
}

struct Indexed {
  lc::LayerCase c;
  size_t index;
};

std::vector<Indexed> indexedCases() {
  std::vector<Indexed> v;
  auto cs = lc::layerCases();
  for (size_t i = 0; i < cs.size(); ++i) v.push_back({cs[i], i});
  return v;
}

void PrintTo(const Indexed& i, std::ostream* os) {
  *os << caseName(i.c, i.index);
}

class LayerGradCheck : public ::testing::TestWithParam<Indexed> {};

TEST_P(LayerGradCheck, MatchesFiniteDifferences) {
  const lc::LayerCase& c = GetParam().c;
  const std::string what = caseName(c, GetParam().index);
  LayerModel lm;
  ASSERT_TRUE(lossModel(c, &lm));
  if (lm.wrt.empty()) GTEST_SKIP() << what << " has no float input or Trainable weight";
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = lm.wrt;
  opt.training = !kInferenceMode.count(c.layer);
  auto gg = buildGradientGraph(lm.model, opt);
  const std::string no = noGradientOp(c);
  if (!no.empty()) {
    ASSERT_FALSE(gg.ok()) << c.layer << " is on the no-gradient list but now differentiates: "
                          << "remove it from kNoGradient";
    EXPECT_NE(gg.message().find("(" + no + ","), std::string::npos) << gg.message();
    EXPECT_NE(gg.message().find("no gradient"), std::string::npos) << gg.message();
    return;
  }
  ASSERT_TRUE(gg.ok()) << what << ": " << gg.message();
  auto session = InferenceSession::create(gg->model);
  ASSERT_TRUE(session.ok()) << what << ": " << session.message();
  auto tol = gc::fdTolerance(false);
  tol.maxPerTensor = 20;
  tol.rtol = 3e-2;
  tol.atolScalesWithGradient = true;
  if (kSmallStep.count(c.layer)) tol.h = 1e-3;
  const int checked = gc::checkFiniteDifferences(
      **session, *gg, gc::initializerFeeds(lm.model, *gg), lm.wrt, {}, "loss", tol, what);
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerGradCheck, ::testing::ValuesIn(indexedCases()),
                         [](const ::testing::TestParamInfo<Indexed>& i) {
                           return caseName(i.param.c, i.param.index);
                         });

// The layer added to an imported model of an older opset (its lowering then spells ops as that
// opset does: attribute axes, time-first RNNs, LayerNormalization's arithmetic) trains the same:
// its loss and every gradient agree with the default opset's, which the check above holds to
// finite differences.
TEST_P(LayerGradCheck, OlderOpsetsGiveTheSameGradients) {
  const lc::LayerCase& c = GetParam().c;
  if (!noGradientOp(c).empty()) GTEST_SKIP() << c.layer << " has no gradient";
  auto gradients = [&](int opset) -> std::map<std::string, Tensor> {
    LayerModel lm;
    EXPECT_TRUE(lossModel(c, &lm, opset)) << "opset " << opset;
    GradientGraphOptions opt;
    opt.losses = {"loss"};
    opt.trainable = lm.wrt;
    opt.training = !kInferenceMode.count(c.layer);
    auto gg = buildGradientGraph(lm.model, opt);
    EXPECT_TRUE(gg.ok()) << "opset " << opset << ": " << gg.message();
    if (!gg.ok()) return {};
    auto session = InferenceSession::create(gg->model);
    EXPECT_TRUE(session.ok()) << "opset " << opset << ": " << session.message();
    if (!session.ok()) return {};
    auto out = (*session)->run(gc::initializerFeeds(lm.model, *gg));
    EXPECT_TRUE(out.ok()) << "opset " << opset << ": " << out.message();
    return out.ok() ? *out : std::map<std::string, Tensor>{};
  };
  const auto want = gradients(0);
  ASSERT_FALSE(want.empty());
  for (int opset : {11, 13}) {
    const auto got = gradients(opset);
    ASSERT_EQ(got.size(), want.size()) << "opset " << opset;
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << "opset " << opset << ": no " << name;
      const Tensor& t = got.at(name);
      ASSERT_EQ(t.shape(), w.shape()) << "opset " << opset << ": " << name;
      if (w.dtype() != DType::kFloat) continue;
      for (int64_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(t.data<float>()[i], w.data<float>()[i],
                    1e-4 + 1e-4 * std::abs(w.data<float>()[i]))
            << "opset " << opset << ", " << name << "[" << i << "]";
    }
  }
}

// Every entry of the no-gradient list names a layer that has a case.
TEST(LayerGradCheckList, NamesExistingLayers) {
  std::set<std::string> layers;
  for (const auto& c : lc::layerCases()) layers.insert(c.layer);
  for (const auto& [layer, op] : kNoGradient) EXPECT_TRUE(layers.count(layer)) << layer;
}

}  // namespace
