// Every deepwire.losses and deepwire.metrics node, lowered to ONNX and run by the engine, against
// the references of tests/golden/make_loss_golden.py (tests/golden/losses_golden.json).
//
// Per golden case: Inputs (first axis symbolic, N) -> the node -> Output, exported with the full
// checker, run, compared with |got - expected| <= atol + rtol |expected|. A loss case runs again
// through an Output Train exported with losses (its "<name>_loss" output); a metric case runs
// again exported with losses on the two halves of its batch, the statistics summed and finalized
// by metricFinalizeModel: Keras' epoch accumulation must give the single-batch value.
//
// How to add a case: add it to the script and rerun it; nothing changes here.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/session.h"
#include "golden.h"
#include "graphs/graph.h"
#include "graphs/onnx_export.h"

namespace dw {
namespace {

using engine::Tensor;
using nlohmann::json;

constexpr double kRtol = 1e-5, kAtol = 2e-6;

using test::GoldenGroup;

Result<Param> toParam(const NodeSpec& spec, const std::string& name, const json& v) {
  const ParamSpec* ps = spec.param(name);
  if (!ps) return Status::error(spec.type + " has no parameter '" + name + "'");
  switch (ps->type) {
    case ParamType::Int:
      return Param::makeInt(v.get<int64_t>());
    case ParamType::Float:
      return Param::makeFloat(v.get<double>());
    case ParamType::Bool:
      return Param::makeBool(v.get<bool>());
    case ParamType::String:
      return Param::makeString(v.get<std::string>());
    case ParamType::Ints:
      return Param::makeInts(v.get<std::vector<int64_t>>());
    case ParamType::Floats:
      return Param::makeFloats(v.get<std::vector<double>>());
    default:
      return Status::error("parameter '" + name + "' has a type this test cannot set");
  }
}

Tensor toTensor(const json& t, int64_t from = 0, int64_t to = -1) {
  return test::goldenTensor(t, from, to);
}
std::string typeText(const json& t) {
  return test::goldenType(t, true);
}

// Input per golden input -> node (a loss or metric, or Output Train when `asOutputTrain`) ->
// Output "value".
// `opset`: the graph's ai.onnx opset (0: the catalogue's default).
Result<Graph> buildGraph(const json& c, bool asOutputTrain, int opset = 0) {
  Graph g;
  if (opset) {
    ModelInfo info = g.info();
    info.opsets[kOnnxDomain] = opset;
    g.setInfo(info);
  }
  const bool loss = c["kind"] == "loss";
  const std::string domain = asOutputTrain ? kLayersDomain : loss ? kLossesDomain : kMetricsDomain;
  auto node = g.addNode(domain, asOutputTrain ? "Output Train" : c["type"].get<std::string>());
  if (!node.ok()) return node.status();
  const NodeSpec& spec = *g.spec(*node);
  if (asOutputTrain) {
    DW_RETURN_IF_ERROR(g.rename(*node, "y"));
    DW_RETURN_IF_ERROR(g.setParam(*node, "loss", Param::makeString(c["type"].get<std::string>())));
  }
  for (const auto& [name, v] : c["params"].items()) {
    auto p = toParam(spec, name, v);
    if (!p.ok()) return p.status();
    DW_RETURN_IF_ERROR(g.setParam(*node, name, *p));
  }
  for (const auto& [port, t] : c["inputs"].items()) {
    int index = -1;
    for (size_t i = 0; i < spec.inputs.size(); ++i)
      if (spec.inputs[i].name == port) index = static_cast<int>(i);
    if (index < 0) return Status::error(spec.type + " has no input '" + port + "'");
    auto in = g.addNode(kGraphDomain, "Input");
    DW_RETURN_IF_ERROR(g.rename(*in, port));
    DW_RETURN_IF_ERROR(g.setParam(*in, "type", Param::makeString(typeText(t))));
    DW_RETURN_IF_ERROR(g.addLink({{*in, 0}, {*node, index}}));
  }
  if (!asOutputTrain) {
    auto out = g.addNode(kGraphDomain, "Output");
    DW_RETURN_IF_ERROR(g.rename(*out, "value"));
    DW_RETURN_IF_ERROR(g.addLink({{*node, 0}, {*out, 0}}));
  }
  return g;
}

Result<std::map<std::string, Tensor>> run(const onnx::ModelProto& m,
                                          const std::map<std::string, Tensor>& inputs) {
  auto s = engine::InferenceSession::create(m);
  if (!s.ok()) return s.status();
  return (*s)->run(inputs);
}

std::map<std::string, Tensor> feeds(const json& c, int64_t from = 0, int64_t to = -1) {
  std::map<std::string, Tensor> f;
  for (const auto& [port, t] : c["inputs"].items()) f[port] = toTensor(t, from, to);
  return f;
}

void expectClose(const Tensor& got, const json& expected, const std::string& what) {
  const auto shape = expected["shape"].get<std::vector<int64_t>>();
  ASSERT_EQ(got.dtype(), engine::DType::kFloat) << what;
  ASSERT_EQ(got.shape(), shape) << what;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double e = expected["data"][i].get<double>(), v = got.data<float>()[i];
    EXPECT_LE(std::abs(v - e), kAtol + kRtol * std::abs(e))
        << what << ": element " << i << " is " << v << ", expected " << e;
  }
}

// torch.onnx exported opset 11 to 14 by default for years; 18 moved the Reduce ops' axes.
constexpr int kOtherOpsets[] = {11, 12, 13, 14, 15, 16, 18, 21};

void checkMetricStatistics(const json& c, const ExportOptions& opt, int opset);

void checkCase(const json& c) {
  auto g = buildGraph(c, false);
  ASSERT_TRUE(g.ok()) << g.message();
  ExportOptions opt;
  opt.check = CheckLevel::Full;
  auto m = exportOnnx(*g, opt);
  ASSERT_TRUE(m.ok()) << m.message();
  auto out = run(*m, feeds(c));
  ASSERT_TRUE(out.ok()) << out.message();
  expectClose(out->at("value"), c["expected"], "inference export");
  // Again in a graph of another opset (a loss added to an imported model): the lowering writes
  // each op as that opset defines it.
  for (int opset : kOtherOpsets) {
    auto newer = buildGraph(c, false, opset);
    ASSERT_TRUE(newer.ok()) << newer.message();
    auto nm = exportOnnx(*newer, opt);
    ASSERT_TRUE(nm.ok()) << "opset " << opset << ": " << nm.message();
    auto nout = run(*nm, feeds(c));
    ASSERT_TRUE(nout.ok()) << "opset " << opset << ": " << nout.message();
    expectClose(nout->at("value"), c["expected"], "opset " + std::to_string(opset));
  }

  if (c["kind"] == "loss") {
    if (c["params"]["reduction"] == "none") return;
    // The same loss as an Output Train, exported with losses, at the default opset and others.
    opt.withLosses = true;
    for (int opset : {0, 11, 13, 14, 18}) {
      auto t = buildGraph(c, true, opset);
      ASSERT_TRUE(t.ok()) << t.message();
      auto tm = exportOnnx(*t, opt);
      ASSERT_TRUE(tm.ok()) << "opset " << opset << ": " << tm.message();
      auto tout = run(*tm, feeds(c));
      ASSERT_TRUE(tout.ok()) << "opset " << opset << ": " << tout.message();
      expectClose(tout->at("y_loss"), c["expected"],
                  "Output Train loss at opset " + std::to_string(opset));
    }
    return;
  }

  // Metric: statistics of each half, summed, finalized (at opset 14, torch 1.13's default, a
  // metric's statistics used opset 15's Shape and broke the whole training export).
  opt.withLosses = true;
  for (int opset : {0, 11, 13, 14, 18}) checkMetricStatistics(c, opt, opset);
}

void checkMetricStatistics(const json& c, const ExportOptions& opt, int opset) {
  SCOPED_TRACE("opset " + std::to_string(opset));
  auto g = buildGraph(c, false, opset);
  ASSERT_TRUE(g.ok()) << g.message();
  auto tm = exportOnnx(*g, opt);
  ASSERT_TRUE(tm.ok()) << tm.message();
  std::string metric;
  for (const auto& [id, n] : g->nodes())
    if (n.domain == kMetricsDomain) metric = n.type + "_" + std::to_string(id);
  auto fin = metricFinalizeModel(*tm, metric);
  ASSERT_TRUE(fin.ok()) << fin.message();
  ASSERT_EQ(fin->graph().output_size(), 1);
  const std::string valueName = fin->graph().output(0).name();
  const int64_t n = c["inputs"].begin().value()["shape"][0].get<int64_t>();
  const bool split = c["type"] != "MeanTensor" && n >= 2;
  std::vector<std::pair<int64_t, int64_t>> halves = {{0, n}};
  if (split) halves = {{0, n / 2}, {n / 2, n}};
  std::map<std::string, Tensor> sums;
  for (const auto& [from, to] : halves) {
    auto part = run(*tm, feeds(c, from, to));
    ASSERT_TRUE(part.ok()) << part.message();
    for (const auto& in : fin->graph().input()) {
      const Tensor& s = part->at(in.name());
      ASSERT_EQ(s.dtype(), engine::DType::kFloat) << in.name();
      if (!sums.count(in.name())) {
        sums[in.name()] = s.clone();
        continue;
      }
      Tensor& acc = sums[in.name()];
      ASSERT_EQ(acc.shape(), s.shape())
          << in.name() << ": statistics must not depend on the batch size";
      for (int64_t i = 0; i < s.size(); ++i) acc.data<float>()[i] += s.data<float>()[i];
    }
  }
  auto value = run(*fin, sums);
  ASSERT_TRUE(value.ok()) << value.message();
  expectClose(value->at(valueName), c["expected"], split ? "two accumulated halves" : "finalize");
}

std::string kindAndType(const json& c) {
  return c["kind"].get<std::string>() + " " + c["type"].get<std::string>();
}

// One test per loss or metric type (a process each under CTest), running all its cases.
class LossGolden : public ::testing::TestWithParam<GoldenGroup> {};

TEST_P(LossGolden, MatchesReference) {
  const json& cases = GetParam().spec;
  ASSERT_TRUE(cases.is_array()) << "tests/golden/losses_golden.json is missing or unreadable; run "
                                   "/usr/bin/python3 tests/golden/make_loss_golden.py";
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    checkCase(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, LossGolden,
                         ::testing::ValuesIn(test::goldenGroups([](const json&) { return true; },
                                                                kindAndType)),
                         [](const ::testing::TestParamInfo<GoldenGroup>& info) {
                           return test::testName(info.param.name, info.index);
                         });

// Every loss and metric the issue lists is in the catalogue, in its domain, and a golden case
// covers it.
// The trial wired an image [N, 28, 28] to the prediction: the message blamed the (correct)
// target. It names both ranks, and what goes with what, for the loss and the accuracy metric.
TEST(LossMessages, ClassIndicesOfTheWrongRankNameBothInputs) {
  for (const char* type : {"SparseCategoricalCrossentropy", "SparseCategoricalAccuracy"}) {
    const json c = {
        {"kind", std::string(type).find("Accuracy") != std::string::npos ? "metric" : "loss"},
        {"type", type},
        {"params", json::object()},
        {"inputs",
         {{"prediction", {{"dtype", "float"}, {"shape", {2, 28, 28}}, {"data", {}}}},
          {"target", {{"dtype", "int64"}, {"shape", {2}}, {"data", {}}}}}}};
    auto g = buildGraph(c, false);
    ASSERT_TRUE(g.ok()) << g.message();
    auto m = exportOnnx(*g);
    ASSERT_FALSE(m.ok()) << type;
    EXPECT_NE(m.message().find("the prediction has rank 3 and the target rank 1"),
              std::string::npos)
        << m.message();
  }
}

TEST(LossCatalogue, EveryLossAndMetricIsCoveredByGoldens) {
  const std::vector<std::string> losses = {"BinaryCrossentropy",
                                           "CategoricalCrossentropy",
                                           "CategoricalHinge",
                                           "CosineSimilarity",
                                           "Hinge",
                                           "Huber",
                                           "KLDivergence",
                                           "LogCoshError",
                                           "MeanAbsoluteError",
                                           "MeanAbsolutePercentageError",
                                           "MeanSquaredError",
                                           "MeanSquaredLogarithmicError",
                                           "Poisson",
                                           "SparseCategoricalCrossentropy",
                                           "SquaredHinge"};
  const std::vector<std::string> metrics = {"Accuracy",
                                            "BinaryAccuracy",
                                            "BinaryIoU",
                                            "CategoricalAccuracy",
                                            "FalseNegatives",
                                            "FalsePositives",
                                            "IoU",
                                            "Mean",
                                            "MeanIoU",
                                            "MeanRelativeError",
                                            "MeanTensor",
                                            "OneHotIoU",
                                            "OneHotMeanIoU",
                                            "Precision",
                                            "PrecisionAtRecall",
                                            "Recall",
                                            "RecallAtPrecision",
                                            "RootMeanSquaredError",
                                            "SensitivityAtSpecificity",
                                            "SparseCategoricalAccuracy",
                                            "SparseTopKCategoricalAccuracy",
                                            "Specificity",
                                            "SpecificityAtSensitivity",
                                            "Sum",
                                            "TopKCategoricalAccuracy",
                                            "TrueNegatives",
                                            "TruePositives"};
  std::set<std::string> covered;
  if (test::lossGolden().is_object())
    for (const auto& c : test::lossGolden()["cases"])
      covered.insert(c["kind"].get<std::string>() + ":" + c["type"].get<std::string>());
  const auto& cat = Catalogue::instance();
  for (const auto& l : losses) {
    const NodeSpec* s = cat.find(kLossesDomain, l);
    ASSERT_NE(s, nullptr) << l;
    EXPECT_TRUE(s->isLoss && s->lower) << l;
    EXPECT_TRUE(covered.count("loss:" + l)) << l;
    EXPECT_TRUE(covered.count("metric:" + l)) << l << " as a metric";
  }
  for (const auto& m : metrics) {
    const NodeSpec* s = cat.find(kMetricsDomain, m);
    ASSERT_NE(s, nullptr) << m;
    EXPECT_TRUE(s->metricStats && s->metricFinalize && s->lower) << m;
    EXPECT_TRUE(covered.count("metric:" + m)) << m;
  }
  for (const NodeSpec* s : cat.all()) {
    if (s->domain == kMetricsDomain || s->domain == kLossesDomain) {
      EXPECT_FALSE(s->category.empty()) << s->key();
    }
  }
}

}  // namespace
}  // namespace dw
