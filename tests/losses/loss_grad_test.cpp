// Gradients of every loss, as training computes them: the golden loss cases (reduction sum or
// mean) become an Output Train whose prediction is a trainable weight; autodiff's gradient of
// "<name>_loss" with respect to it must match central finite differences of the forward model.
// Cases at a kink or a clip boundary (all correct, all wrong, ...) are left out: there the
// one-sided derivatives differ and finite differences say nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "golden.h"
#include "graphs/graph.h"
#include "graphs/onnx_export.h"

namespace dw {
namespace {

using engine::Tensor;
using nlohmann::json;

using test::GoldenGroup;

// Loss cases with a scalar result, except those at a kink or a clip boundary.
bool gradCase(const json& c) {
  if (c["kind"] != "loss" || c["params"]["reduction"] == "none") return false;
  const std::string name = c["name"].get<std::string>();
  for (const char* skip : {"all correct", "all wrong", "zero target", "extreme"})
    if (name.find(skip) != std::string::npos) return false;
  return true;
}

Tensor toTensor(const json& t) {
  return test::goldenTensor(t);
}
std::string typeText(const json& t) {
  return test::goldenType(t, false);
}

// pred (a Trainable Initializer holding the golden prediction) -> Output Train "y".
Result<onnx::ModelProto> exportLoss(const json& c, bool predIsInput) {
  Graph g;
  auto out = g.addNode(kLayersDomain, "Output Train");
  if (!out.ok()) return out.status();
  DW_RETURN_IF_ERROR(g.rename(*out, "y"));
  DW_RETURN_IF_ERROR(g.setParam(*out, "loss", Param::makeString(c["type"].get<std::string>())));
  for (const auto& [name, v] : c["params"].items()) {
    const ParamSpec* ps = g.spec(*out)->param(name);
    if (!ps) return Status::error("Output Train has no parameter " + name);
    Param p = ps->type == ParamType::Bool    ? Param::makeBool(v.get<bool>())
              : ps->type == ParamType::Int   ? Param::makeInt(v.get<int64_t>())
              : ps->type == ParamType::Float ? Param::makeFloat(v.get<double>())
                                             : Param::makeString(v.get<std::string>());
    DW_RETURN_IF_ERROR(g.setParam(*out, name, p));
  }
  const json& pred = c["inputs"]["prediction"];
  auto w = g.addNode(kGraphDomain, "Initializer");
  DW_RETURN_IF_ERROR(g.rename(*w, "pred"));
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : pred["shape"].get<std::vector<int64_t>>()) t.add_dims(d);
  for (const auto& x : pred["data"]) t.add_float_data(static_cast<float>(x.get<double>()));
  DW_RETURN_IF_ERROR(
      g.setParam(*w, "shape", Param::makeInts(pred["shape"].get<std::vector<int64_t>>())));
  DW_RETURN_IF_ERROR(g.setParam(*w, "fill", Param::makeString("values")));
  DW_RETURN_IF_ERROR(
      g.setParam(*w, "values", Param::makeProto(ParamType::Tensor, t.SerializeAsString())));
  if (predIsInput) DW_RETURN_IF_ERROR(g.setParam(*w, "graph_input", Param::makeBool(true)));
  DW_RETURN_IF_ERROR(g.addLink({{*w, 0}, {*out, 0}}));
  for (const char* port : {"target", "sample_weight"}) {
    if (!c["inputs"].contains(port)) continue;
    auto in = g.addNode(kGraphDomain, "Input");
    DW_RETURN_IF_ERROR(g.rename(*in, port));
    DW_RETURN_IF_ERROR(g.setParam(*in, "type", Param::makeString(typeText(c["inputs"][port]))));
    DW_RETURN_IF_ERROR(g.addLink({{*in, 0}, {*out, std::string(port) == "target" ? 1 : 2}}));
  }
  ExportOptions opt;
  opt.withLosses = true;
  return exportOnnx(g, opt);
}

void checkGradient(const json& c) {
  std::map<std::string, Tensor> feeds;
  for (const char* port : {"target", "sample_weight"})
    if (c["inputs"].contains(port)) feeds[port] = toTensor(c["inputs"][port]);
  const Tensor pred = toTensor(c["inputs"]["prediction"]);

  auto fwd = exportLoss(c, false);
  ASSERT_TRUE(fwd.ok()) << fwd.message();
  engine::training::GradientGraphOptions gopt;
  gopt.losses = {"y_loss"};
  gopt.trainable = {"pred"};
  auto grad = engine::training::buildGradientGraph(*fwd, gopt);
  ASSERT_TRUE(grad.ok()) << grad.message();
  auto gs = engine::InferenceSession::create(grad->model);
  ASSERT_TRUE(gs.ok()) << gs.message();
  auto gfeeds = feeds;
  gfeeds["pred"] = pred;
  auto gout = (*gs)->run(gfeeds);
  ASSERT_TRUE(gout.ok()) << gout.message();
  const Tensor& g = gout->at(grad->gradOutputs.at(0));
  ASSERT_EQ(g.shape(), pred.shape());

  auto probe = exportLoss(c, true);
  ASSERT_TRUE(probe.ok()) << probe.message();
  auto fs = engine::InferenceSession::create(*probe);
  ASSERT_TRUE(fs.ok()) << fs.message();
  auto lossAt = [&](int64_t i, float delta) {
    Tensor p = pred.clone();
    p.data<float>()[i] += delta;
    auto f = feeds;
    f["pred"] = p;
    auto r = (*fs)->run(f);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.ok() ? static_cast<double>(r->at("y_loss").data<float>()[0]) : 0.0;
  };
  // About six elements spread over the tensor keep the test fast; a step one past size / 6
  // walks across rows and columns alike.
  const int64_t step = pred.size() <= 6 ? 1 : pred.size() / 6 + 1;
  for (int64_t i = 0; i < pred.size(); i += step) {
    const float x = pred.data<float>()[i];
    const float h = 1e-3f * std::max(1.0f, std::abs(x));
    const double fd = (lossAt(i, h) - lossAt(i, -h)) / (2.0 * h);
    EXPECT_NEAR(g.data<float>()[i], fd, 2e-3 + 2e-2 * std::abs(fd)) << "element " << i;
  }
}

class LossGradient : public ::testing::TestWithParam<GoldenGroup> {};

TEST_P(LossGradient, MatchesFiniteDifferences) {
  const json& cases = GetParam().spec;
  ASSERT_TRUE(cases.is_array()) << "tests/golden/losses_golden.json is missing or unreadable";
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    checkGradient(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, LossGradient,
                         ::testing::ValuesIn(test::goldenGroups(
                             gradCase, [](const json& c) { return c["type"].get<std::string>(); })),
                         [](const ::testing::TestParamInfo<GoldenGroup>& info) {
                           return test::testName(info.param.name, info.index);
                         });

}  // namespace
}  // namespace dw
