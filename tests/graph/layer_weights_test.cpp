// Layers' stored trained weights (Node::weights): every layer's export uses them while they fit,
// starts again from its seed when a shape parameter or the input changes, and project files
// keep them bit-exactly (format 2) or refuse them with the JSON path when they are corrupt.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "graphs/tensor_data.h"
#include "layer_cases.h"
#include "test_util.h"

namespace dw {
namespace {

using json = nlohmann::json;

// A float tensor with values start, start + step, ... (no name: how layers store them).
std::string floatTensor(const std::vector<int64_t>& dims, float start, float step = 0.25f) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  std::string raw(static_cast<size_t>(n) * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = start + step * static_cast<float>(i);
    std::memcpy(&raw[static_cast<size_t>(i) * 4], &v, 4);
  }
  t.set_raw_data(raw);
  return t.SerializeAsString();
}

std::map<std::string, const onnx::TensorProto*> initializers(const onnx::ModelProto& m) {
  std::map<std::string, const onnx::TensorProto*> out;
  for (const auto& t : m.graph().initializer()) out[t.name()] = &t;
  return out;
}

// The exported tensor `name` holds exactly the stored bytes' values and dims.
void expectStored(const onnx::ModelProto& m, const std::string& name, const std::string& bytes) {
  auto inits = initializers(m);
  ASSERT_TRUE(inits.count(name)) << name;
  onnx::TensorProto want;
  ASSERT_TRUE(want.ParseFromString(bytes));
  want.set_name(name);
  EXPECT_TRUE(sameTensor(*inits[name], want)) << name;
}

// x float[N,4] -> Dense "fc" (3 units) -> BatchNormalization "bn" -> Output y.
struct DenseBn {
  Graph g;
  NodeId in = 0, fc = 0, bn = 0;
  DenseBn() {
    in = *g.addNode(kGraphDomain, "Input");
    fc = *g.addNode(kLayersDomain, "Dense");
    bn = *g.addNode(kLayersDomain, "BatchNormalization");
    NodeId out = *g.addNode(kGraphDomain, "Output");
    EXPECT_TRUE(g.rename(in, "x").ok());
    EXPECT_TRUE(g.setParam(in, "type", Param::makeString("float[N,4]")).ok());
    EXPECT_TRUE(g.rename(fc, "fc").ok());
    EXPECT_TRUE(g.setParam(fc, "units", Param::makeInt(3)).ok());
    EXPECT_TRUE(g.setParam(fc, "seed", Param::makeInt(11)).ok());
    EXPECT_TRUE(g.rename(bn, "bn").ok());
    EXPECT_TRUE(g.rename(out, "y").ok());
    EXPECT_TRUE(g.addLink({{in, 0}, {fc, 0}}).ok());
    EXPECT_TRUE(g.addLink({{fc, 0}, {bn, 0}}).ok());
    EXPECT_TRUE(g.addLink({{bn, 0}, {out, 0}}).ok());
  }
  std::map<std::string, std::string> fcWeights(int64_t units = 3) const {
    return {{"kernel", floatTensor({4, units}, -1.f)}, {"bias", floatTensor({units}, 0.5f)}};
  }
  std::map<std::string, std::string> bnWeights(int64_t c = 3) const {
    return {{"gamma", floatTensor({c}, 2.f)},
            {"beta", floatTensor({c}, -0.5f)},
            {"moving_mean", floatTensor({c}, 0.125f)},
            {"moving_variance", floatTensor({c}, 1.5f)}};
  }
};

TEST(LayerWeights, ExportUsesStoredWeightsAndRunningStatistics) {
  DenseBn m;
  const auto fcW = m.fcWeights(), bnW = m.bnWeights();
  ASSERT_TRUE(m.g.setWeights(m.fc, fcW).ok());
  ASSERT_TRUE(m.g.setWeights(m.bn, bnW).ok());
  auto e = exportOnnx(m.g);
  ASSERT_TRUE(e.ok()) << e.message();
  for (const auto& [k, v] : fcW) expectStored(*e, "fc." + k, v);
  for (const auto& [k, v] : bnW) expectStored(*e, "bn." + k, v);
  // The layout names the layer and weight of each, which is how the trainer writes them back.
  json layout;
  for (const auto& p : e->metadata_props())
    if (p.key() == kLayoutMetadataKey) layout = json::parse(p.value());
  EXPECT_EQ(layout["nodes"]["initializer:fc.kernel"]["layer"], m.fc);
  EXPECT_EQ(layout["nodes"]["initializer:fc.kernel"]["weight"], "kernel");
  EXPECT_EQ(layout["nodes"]["initializer:bn.moving_mean"]["weight"], "moving_mean");
}

TEST(LayerWeights, ShapeChangeStartsTheLayerAgainFromItsSeed) {
  DenseBn m;
  ASSERT_TRUE(m.g.setWeights(m.fc, m.fcWeights()).ok());
  ASSERT_TRUE(m.g.setWeights(m.bn, m.bnWeights()).ok());
  // A parameter that shapes nothing keeps them.
  ASSERT_TRUE(m.g.setParam(m.fc, "activation", Param::makeString("relu")).ok());
  EXPECT_EQ(m.g.node(m.fc)->weights.size(), 2u);
  ASSERT_TRUE(m.g.setParam(m.fc, "units", Param::makeInt(5)).ok());
  auto e = exportOnnx(m.g);
  ASSERT_TRUE(e.ok()) << e.message();
  Graph fresh = m.g;
  ASSERT_TRUE(fresh.setWeights(m.fc, {}).ok());
  ASSERT_TRUE(fresh.setWeights(m.bn, {}).ok());
  auto seeded = exportOnnx(fresh);
  ASSERT_TRUE(seeded.ok()) << seeded.message();
  auto got = initializers(*e), want = initializers(*seeded);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(sameTensor(*got[name], *t)) << name << " is not the seeded one";
  }
  // The shapes follow the new units, the BatchNormalization's channels included.
  EXPECT_EQ(std::vector<int64_t>(got["fc.kernel"]->dims().begin(), got["fc.kernel"]->dims().end()),
            (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(got["bn.moving_mean"]->dims(0), 5);
  // The seeded kernel is not the stored one reshaped.
  onnx::TensorProto stored;
  ASSERT_TRUE(stored.ParseFromString(m.fcWeights().at("kernel")));
  EXPECT_NE(got["fc.kernel"]->raw_data().substr(0, 12), stored.raw_data().substr(0, 12));
}

TEST(LayerWeights, InputShapeChangeAndMixedSetsFallBackToTheSeed) {
  DenseBn m;
  ASSERT_TRUE(m.g.setWeights(m.fc, m.fcWeights()).ok());
  auto seededOf = [&](const Graph& g) {
    Graph fresh = g;
    EXPECT_TRUE(fresh.setWeights(m.fc, {}).ok());
    return exportOnnx(fresh);
  };
  // Upstream change: the kernel no longer fits, so the bias (which would) is not kept either.
  Graph wider = m.g;
  ASSERT_TRUE(wider.setParam(m.in, "type", Param::makeString("float[N,6]")).ok());
  auto e = exportOnnx(wider);
  auto s = seededOf(wider);
  ASSERT_TRUE(e.ok() && s.ok()) << e.message() << s.message();
  EXPECT_TRUE(sameTensor(*initializers(*e)["fc.bias"], *initializers(*s)["fc.bias"]));
  // A stored weight the layer no longer makes (use_bias off) also means the set is stale.
  Graph noBias = m.g;
  ASSERT_TRUE(noBias.setParam(m.fc, "use_bias", Param::makeBool(false)).ok());
  e = exportOnnx(noBias);
  s = seededOf(noBias);
  ASSERT_TRUE(e.ok() && s.ok());
  EXPECT_TRUE(sameTensor(*initializers(*e)["fc.kernel"], *initializers(*s)["fc.kernel"]));
  EXPECT_EQ(initializers(*e).count("fc.bias"), 0u);
  // A trainable weight without a stored value, likewise.
  Graph partial = m.g;
  ASSERT_TRUE(partial.setWeights(m.fc, {{"kernel", m.fcWeights().at("kernel")}}).ok());
  e = exportOnnx(partial);
  s = seededOf(partial);
  ASSERT_TRUE(e.ok() && s.ok());
  EXPECT_TRUE(sameTensor(*initializers(*e)["fc.kernel"], *initializers(*s)["fc.kernel"]));
  // The re-lowered layer leaves nothing of the first attempt behind: the model is the seeded one.
  EXPECT_EQ(e->graph().node_size(), s->graph().node_size());
  EXPECT_EQ(e->graph().initializer_size(), s->graph().initializer_size());
}

TEST(LayerWeights, ConstantWeightsNeedNoStoredValue) {
  // BatchNormalization with scale off: gamma is a Constant, never trained, never stored.
  DenseBn m;
  ASSERT_TRUE(m.g.setParam(m.bn, "scale", Param::makeBool(false)).ok());
  auto bnW = m.bnWeights();
  bnW.erase("gamma");
  ASSERT_TRUE(m.g.setWeights(m.bn, bnW).ok());
  auto e = exportOnnx(m.g);
  ASSERT_TRUE(e.ok()) << e.message();
  for (const auto& [k, v] : bnW) expectStored(*e, "bn." + k, v);
}

TEST(LayerWeights, SeedChangeDropsThem) {
  DenseBn m;
  ASSERT_TRUE(m.g.setWeights(m.fc, m.fcWeights()).ok());
  ASSERT_TRUE(m.g.setParam(m.fc, "seed", Param::makeInt(11)).ok());  // unchanged: kept
  EXPECT_FALSE(m.g.node(m.fc)->weights.empty());
  ASSERT_TRUE(m.g.setParam(m.fc, "seed", Param::makeInt(12)).ok());
  EXPECT_TRUE(m.g.node(m.fc)->weights.empty());
  ASSERT_TRUE(m.g.setWeights(m.fc, m.fcWeights()).ok());
  ASSERT_TRUE(m.g.resetParam(m.fc, "seed").ok());
  EXPECT_TRUE(m.g.node(m.fc)->weights.empty());
}

TEST(LayerWeights, InvalidWeightsAreRefused) {
  DenseBn m;
  Status notLayer = m.g.setWeights(m.in, m.fcWeights());
  ASSERT_FALSE(notLayer.ok());
  EXPECT_NE(notLayer.message().find("only layers"), std::string::npos) << notLayer.message();
  onnx::TensorProto shortData;
  ASSERT_TRUE(shortData.ParseFromString(floatTensor({4, 3}, 0)));
  shortData.mutable_raw_data()->resize(8);
  Status wrongSize = m.g.setWeights(m.fc, {{"kernel", shortData.SerializeAsString()}});
  ASSERT_FALSE(wrongSize.ok());
  EXPECT_NE(wrongSize.message().find("Dense 'fc'"), std::string::npos) << wrongSize.message();
  EXPECT_NE(wrongSize.message().find("holds 2 values but its dims need 12"), std::string::npos)
      << wrongSize.message();
  onnx::TensorProto ints;
  ints.set_data_type(onnx::TensorProto::INT64);
  ints.add_int64_data(1);
  Status notFloat = m.g.setWeights(m.fc, {{"kernel", ints.SerializeAsString()}});
  EXPECT_FALSE(notFloat.ok());
  EXPECT_TRUE(m.g.node(m.fc)->weights.empty());
}

TEST(LayerWeights, ProjectRoundTripIsBitExact) {
  DenseBn m;
  const std::string plain = projectToJsonText(m.g);
  EXPECT_EQ(json::parse(plain)["version"], 1);  // format 1 readers still open it
  ASSERT_TRUE(m.g.setWeights(m.fc, m.fcWeights()).ok());
  ASSERT_TRUE(m.g.setWeights(m.bn, m.bnWeights()).ok());
  const std::string text = projectToJsonText(m.g);
  EXPECT_EQ(json::parse(text)["version"], 2);
  auto back = projectFromJsonText(text, "<memory>");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->node(m.fc)->weights, m.g.node(m.fc)->weights);
  EXPECT_EQ(back->node(m.bn)->weights, m.g.node(m.bn)->weights);
  EXPECT_EQ(projectToJsonText(*back), text);
  auto e = exportOnnx(*back);
  ASSERT_TRUE(e.ok()) << e.message();
  for (const auto& [k, v] : m.fcWeights()) expectStored(*e, "fc." + k, v);

  const auto dir = test::tempDir();
  const std::string path = (dir / "weights.dwproj").string();
  ASSERT_TRUE(saveProject(m.g, path).ok());
  auto loaded = loadProject(path);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(loaded->node(m.bn)->weights, m.g.node(m.bn)->weights);
}

TEST(LayerWeights, CorruptWeightsInAProjectNameTheirPath) {
  DenseBn m;
  ASSERT_TRUE(m.g.setWeights(m.fc, m.fcWeights()).ok());
  json p = json::parse(projectToJsonText(m.g));
  size_t fcIndex = 0;
  for (size_t i = 0; i < p["nodes"].size(); ++i)
    if (p["nodes"][i]["id"] == m.fc) fcIndex = i;
  const std::string where = "/nodes/" + std::to_string(fcIndex) + "/weights";
  auto loadWith = [&](const std::function<void(json&)>& edit) {
    json q = p;
    edit(q["nodes"][fcIndex]);
    auto g = projectFromJsonText(q.dump(), "w.dwproj");
    return g.ok() ? std::string() : g.message();
  };
  std::string msg = loadWith([](json& n) { n["weights"]["kernel"] = "not base64!"; });
  EXPECT_NE(msg.find("w.dwproj: " + where + "/kernel: invalid base64"), std::string::npos) << msg;
  msg = loadWith([](json& n) { n["weights"] = json::array(); });
  EXPECT_NE(msg.find(where + ": expected an object"), std::string::npos) << msg;
  msg = loadWith([](json& n) { n["weights"]["bias"] = nullptr; });
  EXPECT_NE(msg.find(where + "/bias: expected a base64 string"), std::string::npos) << msg;
  msg = loadWith([](json& n) { n["weights"]["kernel"] = n["weights"]["bias"]; });
  EXPECT_TRUE(msg.empty()) << msg;  // a wrong shape is no error: export re-seeds the layer
  msg = loadWith([](json& n) { n["weights"]["kernel"] = "AAAA"; });  // three zero bytes
  EXPECT_NE(msg.find("/nodes/" + std::to_string(fcIndex) + ": "), std::string::npos) << msg;
  EXPECT_NE(msg.find("weight 'kernel' is not an ONNX tensor"), std::string::npos) << msg;
  // Weights on a node that is no layer.
  json q = p;
  q["nodes"][0]["weights"] = p["nodes"][fcIndex]["weights"];
  auto g = projectFromJsonText(q.dump(), "w.dwproj");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("/nodes/0/weights: only layers store trained weights"),
            std::string::npos)
      << g.message();
  // A newer format is refused with the version it needs.
  q = p;
  q["version"] = 3;
  g = projectFromJsonText(q.dump(), "w.dwproj");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("reads format 2 and older"), std::string::npos) << g.message();
}

// Every layer honours stored weights under the exact names its export gives them.
TEST(LayerWeights, EveryLayerExportsItsStoredWeights) {
  int layersWithWeights = 0;
  for (const auto& c : test::layerCases()) {
    SCOPED_TRACE(c.layer);
    Graph g;
    ASSERT_TRUE(test::buildLayerGraph(c, &g).ok());
    auto first = exportOnnx(g);
    ASSERT_TRUE(first.ok()) << first.message();
    json layout;
    for (const auto& p : first->metadata_props())
      if (p.key() == kLayoutMetadataKey) layout = json::parse(p.value());
    std::map<std::string, std::string> stored, exported;
    for (const auto& t : first->graph().initializer()) {
      const json& e = layout["nodes"]["initializer:" + t.name()];
      if (!e.contains("weight")) continue;
      std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
      // Values no fill makes, so a seeded tensor cannot pass for them.
      const std::string bytes = floatTensor(dims, 0.375f, 0.0625f);
      stored[e["weight"].get<std::string>()] = bytes;
      exported[t.name()] = bytes;
    }
    if (stored.empty()) continue;
    ++layersWithWeights;
    ASSERT_TRUE(g.setWeights(1, stored).ok());
    auto second = exportOnnx(g);
    ASSERT_TRUE(second.ok()) << second.message();
    for (const auto& [name, bytes] : exported) expectStored(*second, name, bytes);
  }
  EXPECT_GE(layersWithWeights, 10);
}

}  // namespace
}  // namespace dw
