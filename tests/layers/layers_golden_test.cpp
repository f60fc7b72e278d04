// Forward passes of the deepwire.layers layers against PyTorch golden outputs.
//
// tests/golden/make_layer_golden.py writes tests/golden/layers/manifest.json and, per case, the
// inputs, the weights (keyed by the suffix the lowering gives them: "kernel", "bias", ...) and
// the expected outputs as .npy files. Each case here builds Input -> layer -> Output in a Graph,
// exports it (full ONNX check), replaces every initializer `L.<suffix>` by the golden weight of
// that suffix (the shapes must be identical: this checks the lowering's weight layout), runs the
// model in the engine and compares with |got - expected| <= atol + rtol * |expected|.
//
// How to add a case: add a `case(...)` to the script and rerun it; nothing changes here unless
// the layer needs a new kind of harness (as BatchNormalization's training mode does).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/io.h"
#include "engine/session.h"
#include "graphs/onnx_export.h"
#include "nodes/type_syntax.h"

namespace dw {
namespace {

using nlohmann::json;

const std::string kDir = DW_GOLDEN_DIR;

json loadManifest() {
  std::ifstream f(kDir + "/manifest.json");
  if (!f) return json();
  return json::parse(f, nullptr, /*allow_exceptions=*/false);
}

const json& manifest() {
  static const json m = loadManifest();
  return m;
}

struct GoldenCase {
  std::string name;
  json spec;
};
void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<GoldenCase> goldenCases() {
  std::vector<GoldenCase> v;
  const json& m = manifest();
  if (m.is_object() && m.contains("cases"))
    for (const auto& c : m["cases"]) v.push_back({c["name"].get<std::string>(), c});
  // A missing or unreadable manifest must fail, not run zero cases.
  if (v.empty()) v.push_back({"missing_manifest", json()});
  return v;
}

// A JSON parameter value in the type the layer's spec declares.
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
      return Param::makeInts(v.is_array() ? v.get<std::vector<int64_t>>()
                                          : std::vector<int64_t>{v.get<int64_t>()});
    default:
      return Status::error("parameter '" + name + "' has a type this test cannot set");
  }
}

std::string typeOf(const engine::Tensor& t) {
  std::string s = dtypeName(engine::dtypeToOnnx(t.dtype())) + "[";
  for (size_t i = 0; i < t.rank(); ++i) s += (i ? "," : "") + std::to_string(t.dim(i));
  return s + "]";
}

struct Comparison {
  bool pass = true;
  double maxAbs = 0, maxRel = 0;  // maxRel over elements with |expected| >= 1e-3
  std::string firstBad;
};

Comparison compare(const engine::Tensor& got, const engine::Tensor& want, double rtol,
                   double atol) {
  Comparison c;
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < want.size(); ++i) {
    const double e = w[i], d = std::abs(double(g[i]) - e);
    if (!(d <= atol + rtol * std::abs(e))) {  // also catches NaN
      if (c.pass)
        c.firstBad = "element " + std::to_string(i) + ": got " + std::to_string(g[i]) +
                     ", expected " + std::to_string(e);
      c.pass = false;
    }
    if (std::isnan(d)) c.maxAbs = NAN;
    c.maxAbs = std::max(c.maxAbs, d);
    if (std::abs(e) >= 1e-3) c.maxRel = std::max(c.maxRel, d / std::abs(e));
  }
  return c;
}

// Switches the layer's BatchNormalization node to training mode, exposing the updated moving
// statistics as graph outputs: what a training step runs.
Status enableTrainingMode(onnx::ModelProto& m, std::map<std::string, std::string>* outs) {
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "BatchNormalization") continue;
    auto* a = n.add_attribute();
    a->set_name("training_mode");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
    int64_t channels = 0;
    for (const auto& init : m.graph().initializer())
      if (init.name() == n.input(3)) channels = init.dims(0);
    for (const char* stat : {"running_mean", "running_var"}) {
      const std::string name = std::string("golden_") + stat;
      n.add_output(name);
      auto* vi = m.mutable_graph()->add_output();
      vi->set_name(name);
      auto* tt = vi->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(onnx::TensorProto::FLOAT);
      tt->mutable_shape()->add_dim()->set_dim_value(channels);
      (*outs)[stat] = name;
    }
    return checkOnnxModel(m);
  }
  return Status::error("the lowered model has no BatchNormalization node");
}

class LayerGolden : public ::testing::TestWithParam<GoldenCase> {};

// `opset`: the graph's ai.onnx opset (0: the catalogue's default).
void checkGolden(const GoldenCase& gc, int opset) {
  ASSERT_FALSE(gc.spec.is_null()) << "cannot read " << kDir
                                  << "/manifest.json; run /usr/bin/python3 "
                                     "tests/golden/make_layer_golden.py";
  const json& c = gc.spec;
  const std::string dir = kDir + "/" + gc.name + "/";
  const double rtol = manifest()["rtol"].get<double>(), atol = manifest()["atol"].get<double>();

  Graph g;
  if (opset) {
    ModelInfo info = g.info();
    info.opsets[kOnnxDomain] = opset;
    g.setInfo(info);
  }
  auto layer = g.addNode(kLayersDomain, c["layer"].get<std::string>());
  ASSERT_TRUE(layer.ok()) << layer.message();
  ASSERT_TRUE(g.rename(*layer, "L").ok());
  for (const auto& [k, v] : c["params"].items()) {
    auto p = toParam(*g.spec(*layer), k, v);
    ASSERT_TRUE(p.ok()) << p.message();
    ASSERT_TRUE(g.setParam(*layer, k, *p).ok()) << k;
  }
  std::map<std::string, engine::Tensor> feeds;
  int port = 0;
  for (const auto& file : c["inputs"]) {
    auto t = engine::readNpy(dir + file.get<std::string>());
    ASSERT_TRUE(t.ok()) << t.message();
    const std::string name = "x" + std::to_string(port);
    NodeId in = *g.addNode(kGraphDomain, "Input");
    ASSERT_TRUE(g.rename(in, name).ok());
    // A case may declare the Input with symbolic dims ("input_types"), as a user's model would.
    const std::string type =
        c.contains("input_types") ? c["input_types"][port].get<std::string>() : typeOf(*t);
    ASSERT_TRUE(g.setParam(in, "type", Param::makeString(type)).ok());
    ASSERT_TRUE(g.addLink({{in, 0}, {*layer, port++}}).ok());
    feeds[name] = *t;
  }
  const auto& outputs = c["outputs"];
  for (size_t o = 0; o < outputs.size(); ++o) {
    NodeId out = *g.addNode(kGraphDomain, "Output");
    ASSERT_TRUE(g.rename(out, "y" + std::to_string(o)).ok());
    ASSERT_TRUE(g.addLink({{*layer, static_cast<int>(o)}, {out, 0}}).ok());
  }
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();

  // The golden weights replace the seeded ones, by suffix and with identical shapes.
  std::set<std::string> replaced;
  for (const auto& [suffix, file] : c["weights"].items()) {
    auto w = engine::readNpy(dir + file.get<std::string>());
    ASSERT_TRUE(w.ok()) << w.message();
    const std::string name = "L." + suffix;
    onnx::TensorProto* init = nullptr;
    for (auto& t : *m->mutable_graph()->mutable_initializer())
      if (t.name() == name) init = &t;
    ASSERT_NE(init, nullptr) << "the lowering has no weight '" << name << "'";
    ASSERT_EQ(std::vector<int64_t>(init->dims().begin(), init->dims().end()), w->shape())
        << "weight '" << name << "' has another layout than the golden one";
    engine::tensorToProto(*w, init, name);
    replaced.insert(name);
  }
  // Every weight of the layer (what the export's layout names as one, trainable or not) must
  // come from the golden file: a weight left at deepwire's seeded values would make the
  // comparison meaningless. The lowering's own constants (shapes, axes, epsilons, RoPE's
  // tables) are not weights.
  nlohmann::json layout;
  for (const auto& p : m->metadata_props())
    if (p.key() == kLayoutMetadataKey) layout = nlohmann::json::parse(p.value());
  ASSERT_TRUE(layout.contains("nodes")) << "the export has no layout";
  int weights = 0;
  for (const auto& [key, e] : layout["nodes"].items()) {
    if (key.rfind("initializer:", 0) != 0 || !e.contains("weight")) continue;
    ++weights;
    const std::string name = key.substr(12);
    EXPECT_TRUE(replaced.count(name)) << "weight '" << name << "' has no golden value";
  }
  EXPECT_EQ(weights, static_cast<int>(c["weights"].size()));

  std::map<std::string, std::string> trainingOutputs;
  if (c.value("training", false)) {
    ASSERT_TRUE(enableTrainingMode(*m, &trainingOutputs).ok());
  }

  auto session = engine::InferenceSession::create(*m);
  ASSERT_TRUE(session.ok()) << "engine cannot plan the lowered model: " << session.message();
  auto results = (*session)->run(feeds);
  ASSERT_TRUE(results.ok()) << "engine run failed: " << results.message();

  std::vector<std::pair<std::string, std::string>> checks;  // (graph output, golden file)
  for (size_t o = 0; o < outputs.size(); ++o)
    checks.push_back({"y" + std::to_string(o), outputs[o].get<std::string>()});
  if (c.contains("training_outputs"))
    for (const auto& [stat, file] : c["training_outputs"].items())
      checks.push_back({trainingOutputs[stat], file.get<std::string>()});
  double maxRel = 0, maxAbs = 0;
  for (const auto& [name, file] : checks) {
    auto want = engine::readNpy(dir + file);
    ASSERT_TRUE(want.ok()) << want.message();
    ASSERT_TRUE(results->count(name)) << "no output " << name;
    const engine::Tensor& got = results->at(name);
    ASSERT_EQ(got.dtype(), engine::DType::kFloat) << name;
    ASSERT_EQ(got.shape(), want->shape()) << name << ": got " << engine::shapeToString(got.shape())
                                          << ", expected " << engine::shapeToString(want->shape());
    const Comparison cmp = compare(got, *want, rtol, atol);
    EXPECT_TRUE(cmp.pass) << name << " differs from PyTorch at " << cmp.firstBad
                          << " (max abs error " << cmp.maxAbs << ")";
    maxRel = std::max(maxRel, cmp.maxRel);
    maxAbs = std::max(maxAbs, cmp.maxAbs);
  }
  ::testing::Test::RecordProperty("max_rel_error", std::to_string(maxRel));
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(maxAbs));
  std::cout << "[golden] " << gc.name << " (" << c["layer"].get<std::string>() << ", opset "
            << (opset ? std::to_string(opset) : "default") << "): max rel error " << maxRel
            << ", max abs error " << maxAbs << "\n";
}

// At the default opset, and in a graph of opset 18 (layers added to an imported opset-18 model):
// the lowering spells each op as the graph's opset defines it (the Reduce ops' axes became an
// input at 18, Split wants num_outputs).
TEST_P(LayerGolden, MatchesPyTorch) {
  for (int opset : {0, 18}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    checkGolden(GetParam(), opset);
  }
}

std::string caseName(const ::testing::TestParamInfo<GoldenCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, LayerGolden, ::testing::ValuesIn(goldenCases()), caseName);

// The layers the issue checks against PyTorch each have at least one golden case.
TEST(LayerGoldenCoverage, EveryLayerWithAPyTorchCounterpartHasACase) {
  std::set<std::string> covered;
  for (const auto& c : goldenCases())
    if (!c.spec.is_null()) covered.insert(c.spec["layer"].get<std::string>());
  for (const char* layer : {"Dense",
                            "Conv1D",
                            "Conv2D",
                            "Conv3D",
                            "Conv1DTranspose",
                            "Conv2DTranspose",
                            "Conv3DTranspose",
                            "DepthwiseConv2D",
                            "SeparableConv1D",
                            "SeparableConv2D",
                            "MaxPool1D",
                            "MaxPool2D",
                            "MaxPool3D",
                            "AvgPool1D",
                            "AvgPool2D",
                            "AvgPool3D",
                            "GlobalMaxPool1D",
                            "GlobalMaxPool2D",
                            "GlobalMaxPool3D",
                            "GlobalAvgPool1D",
                            "GlobalAvgPool2D",
                            "GlobalAvgPool3D",
                            "BatchNormalization",
                            "LayerNormalization",
                            "Embedding",
                            "LSTM",
                            "GRU",
                            "SimpleRNN",
                            "RNN",
                            "Bidirectional",
                            "ConvLSTM1D",
                            "ConvLSTM2D",
                            "ConvLSTM3D",
                            "MultiHeadAttention",
                            "UpSampling1D",
                            "UpSampling2D",
                            "UpSampling3D",
                            "ZeroPadding1D",
                            "ZeroPadding2D",
                            "ZeroPadding3D",
                            "Cropping1D",
                            "Cropping2D",
                            "Cropping3D",
                            "ReLU",
                            "LeakyReLU",
                            "ELU",
                            "PReLU",
                            "SELU",
                            "Sigmoid",
                            "TanH",
                            "SoftMax",
                            "SoftPlus",
                            "SoftSign",
                            "Swish",
                            "GELU",
                            "HardSigmoid",
                            "ThresholdedReLU",
                            "Exponential",
                            "Linear"})
    EXPECT_TRUE(covered.count(layer)) << layer << " has no PyTorch golden case";
}

}  // namespace
}  // namespace dw
