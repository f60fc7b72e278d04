// Trained weights of Keras-style layers persist: Trainer::writeWeightsTo stores them (and the
// BatchNormalization running statistics) in their layer nodes, a saved and reloaded project
// exports them bit-exactly, a shape change starts the layer again from its seed, and
// `deepwire train --save-project` writes the trained project.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/training/trainer.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "graphs/tensor_data.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// x float[N,4] -> Dense "fc1" (8) -> BatchNormalization "bn" -> Dense "fc2" (3) -> Output Train
// "logits" (sparse categorical cross-entropy against int64 "label").
struct LayerModel {
  Graph g;
  NodeId fc1 = 0, bn = 0, fc2 = 0;
  LayerModel() {
    NodeId x = *g.addNode(kGraphDomain, "Input");
    NodeId label = *g.addNode(kGraphDomain, "Input");
    fc1 = *g.addNode(kLayersDomain, "Dense");
    bn = *g.addNode(kLayersDomain, "BatchNormalization");
    fc2 = *g.addNode(kLayersDomain, "Dense");
    NodeId out = *g.addNode(kLayersDomain, "Output Train");
    EXPECT_TRUE(g.rename(x, "x").ok());
    EXPECT_TRUE(g.setParam(x, "type", Param::makeString("float[N,4]")).ok());
    EXPECT_TRUE(g.rename(label, "label").ok());
    EXPECT_TRUE(g.setParam(label, "type", Param::makeString("int64[N]")).ok());
    EXPECT_TRUE(g.rename(fc1, "fc1").ok());
    EXPECT_TRUE(g.setParam(fc1, "units", Param::makeInt(8)).ok());
    EXPECT_TRUE(g.setParam(fc1, "seed", Param::makeInt(3)).ok());
    EXPECT_TRUE(g.rename(bn, "bn").ok());
    EXPECT_TRUE(g.rename(fc2, "fc2").ok());
    EXPECT_TRUE(g.setParam(fc2, "units", Param::makeInt(3)).ok());
    EXPECT_TRUE(g.rename(out, "logits").ok());
    EXPECT_TRUE(g.setParam(out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
    EXPECT_TRUE(g.setParam(out, "from_logits", Param::makeBool(true)).ok());
    EXPECT_TRUE(g.addLink({{x, 0}, {fc1, 0}}).ok());
    EXPECT_TRUE(g.addLink({{fc1, 0}, {bn, 0}}).ok());
    EXPECT_TRUE(g.addLink({{bn, 0}, {fc2, 0}}).ok());
    EXPECT_TRUE(g.addLink({{fc2, 0}, {out, 0}}).ok());
    EXPECT_TRUE(g.addLink({{label, 0}, {out, 1}}).ok());
  }
};

// Three Gaussian blobs in 4-d, labels 0..2; deterministic.
Dataset blobs(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n * 4));
  std::vector<int64_t> y(static_cast<size_t>(n));
  uint64_t s = 7;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = i % 3;
    for (int k = 0; k < 4; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>((s >> 40) & 0xffffff) / 16777216.f;
      x[i * 4 + k] = (k == y[i] ? 2.f : 0.f) + (u - 0.5f) * 1.5f;
    }
  }
  Dataset d;
  d.columns["x"] = Tensor::fromVector(x, {n, 4});
  d.columns["label"] = Tensor::fromVector(y, {n});
  return d;
}

std::unique_ptr<Trainer> trained(const Graph& g, int steps) {
  TrainOptions o;
  o.threads = 1;
  o.optimizer.type = "adam";
  o.optimizer.lr = 0.05;
  auto t = Trainer::create(g, o);
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return nullptr;
  const Dataset data = blobs(48);
  for (int s = 0; s < steps; ++s) {
    Batch b;
    b.inputs = data.slice(s * 16 % 48, s * 16 % 48 + 16).columns;
    b.size = 16;
    auto r = (*t)->fullTrainStep(b);
    EXPECT_TRUE(r.ok()) << r.message();
  }
  return std::move(t.value());
}

std::map<std::string, onnx::TensorProto> initializers(const onnx::ModelProto& m) {
  std::map<std::string, onnx::TensorProto> out;
  for (const auto& t : m.graph().initializer()) {
    onnx::TensorProto c = t;
    EXPECT_TRUE(toRawData(c).ok());
    out[t.name()] = std::move(c);
  }
  return out;
}

std::string bytesOf(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw()), t.bytes());
}

TEST(LayerWeights, TrainedValuesSurviveWriteBackSaveReloadAndExport) {
  LayerModel m;
  auto before = exportOnnx(m.g);
  ASSERT_TRUE(before.ok()) << before.message();
  auto t = trained(m.g, 4);
  ASSERT_NE(t, nullptr);
  Graph copy = m.g;
  ASSERT_TRUE(t->writeWeightsTo(copy).ok());
  for (NodeId id : {m.fc1, m.fc2}) {
    EXPECT_EQ(copy.node(id)->weights.size(), 2u);  // kernel, bias
  }
  std::set<std::string> bnKeys;
  for (const auto& [k, v] : copy.node(m.bn)->weights) bnKeys.insert(k);
  EXPECT_EQ(bnKeys, (std::set<std::string>{"beta", "gamma", "moving_mean", "moving_variance"}));

  const std::string text = projectToJsonText(copy);
  auto reloaded = projectFromJsonText(text, "<trained>");
  ASSERT_TRUE(reloaded.ok()) << reloaded.message();
  auto e = exportOnnx(*reloaded);
  ASSERT_TRUE(e.ok()) << e.message();
  auto exported = initializers(*e), initial = initializers(*before);
  ASSERT_EQ(t->weights().size(), 8u);  // 3 layers' trainables + 2 running statistics
  for (const auto& [name, w] : t->weights()) {
    ASSERT_TRUE(exported.count(name)) << name;
    EXPECT_EQ(exported[name].raw_data(), bytesOf(w)) << name << " is not the trained value";
    // Training moved every one of them (the statistics too), so this tests something.
    EXPECT_NE(initial[name].raw_data(), bytesOf(w)) << name << " did not train";
  }
  // The trainer's own export of the trained inference model agrees.
  auto inference = t->exportInference();
  ASSERT_TRUE(inference.ok()) << inference.message();
  for (const auto& [name, tensor] : initializers(*inference))
    EXPECT_EQ(exported[name].raw_data(), tensor.raw_data()) << name;
  // A trainer made from the reloaded project starts from the trained values.
  TrainOptions o;
  o.threads = 1;
  auto again = Trainer::create(*reloaded, o);
  ASSERT_TRUE(again.ok()) << again.message();
  for (const auto& [name, w] : t->weights())
    EXPECT_EQ(bytesOf((*again)->weights().at(name)), bytesOf(w)) << name;
}

TEST(LayerWeights, UnitsChangeReseedsTheLayerAndWhatItFeeds) {
  LayerModel m;
  auto t = trained(m.g, 2);
  ASSERT_NE(t, nullptr);
  Graph copy = m.g;
  ASSERT_TRUE(t->writeWeightsTo(copy).ok());
  auto reloaded = projectFromJsonText(projectToJsonText(copy), "<trained>");
  ASSERT_TRUE(reloaded.ok()) << reloaded.message();
  ASSERT_TRUE(reloaded->setParam(m.fc1, "units", Param::makeInt(6)).ok());
  ASSERT_TRUE(m.g.setParam(m.fc1, "units", Param::makeInt(6)).ok());
  auto e = exportOnnx(*reloaded), seeded = exportOnnx(m.g);
  ASSERT_TRUE(e.ok()) << e.message();
  ASSERT_TRUE(seeded.ok()) << seeded.message();
  auto got = initializers(*e), want = initializers(*seeded);
  ASSERT_EQ(got.size(), want.size());
  // fc1 (units), bn (its channels) and fc2 (its input) all start again from their seeds.
  for (const auto& [name, tensor] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(sameTensor(got[name], tensor)) << name;
  }
  EXPECT_EQ(got["fc1.kernel"].dims(1), 6);
  EXPECT_EQ(got["bn.moving_variance"].dims(0), 6);
  EXPECT_EQ(got["fc2.kernel"].dims(0), 6);
  // And the model trains from there.
  auto t2 = trained(*reloaded, 1);
  ASSERT_NE(t2, nullptr);
  Graph back = *reloaded;
  ASSERT_TRUE(t2->writeWeightsTo(back).ok());
  onnx::TensorProto k;
  ASSERT_TRUE(k.ParseFromString(back.node(m.fc1)->weights.at("kernel")));
  EXPECT_EQ(k.dims(1), 6);
}

TEST(LayerWeights, WriteBackOnlyTouchesTheSameLayers) {
  LayerModel m;
  auto t = trained(m.g, 1);
  ASSERT_NE(t, nullptr);
  // A graph where node fc2's id holds another type takes nothing there.
  Graph other = m.g;
  Node fc2 = *other.node(m.fc2);
  std::vector<Link> links = other.links();
  ASSERT_TRUE(other.removeNode(m.fc2).ok());
  fc2.type = "LayerNormalization";
  fc2.params.clear();
  ASSERT_TRUE(other.insertNode(fc2).ok());
  ASSERT_TRUE(t->writeWeightsTo(other).ok());
  EXPECT_TRUE(other.node(m.fc2)->weights.empty());
  EXPECT_FALSE(other.node(m.fc1)->weights.empty());
}

// The CLI path: `deepwire train --save-project` writes the trained project; its export equals
// the trained model `--export-onnx` writes, bit for bit.
std::string cliPath() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path cli = self.parent_path() / ".." / ".." / "app" / "cli" / "deepwire";
  return !ec && fs::exists(cli) ? fs::canonical(cli).string() : "";
}

TEST(LayerWeights, TrainCliSavesTheTrainedProject) {
  const std::string cli = cliPath();
  ASSERT_FALSE(cli.empty()) << "build the deepwire target first";
  const fs::path dir =
      fs::temp_directory_path() / ("dw_layer_weights_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Dataset data = blobs(96);
  ASSERT_TRUE(writeNpy((dir / "x.npy").string(), data.columns.at("x")).ok());
  ASSERT_TRUE(writeNpy((dir / "label.npy").string(), data.columns.at("label")).ok());
  LayerModel m;
  ModelInfo info = m.g.info();
  info.sections["training"] = json{
      {"dataset",
       {{"train",
         {{{"input", "x"}, {"path", "x.npy"}}, {{"input", "label"}, {"path", "label.npy"}}}}}},
      {"optimizer", {{"type", "adam"}, {"lr", 0.05}}},
      {"batch_size", 16},
      {"epochs", 2},
      {"seed", 1}}.dump();
  m.g.setInfo(info);
  const std::string project = (dir / "model.dwproj").string();
  const std::string saved = (dir / "trained.dwproj").string();
  const std::string onnxPath = (dir / "trained.onnx").string();
  ASSERT_TRUE(saveProject(m.g, project).ok());
  const std::string cmd = "OMP_WAIT_POLICY=passive " + cli + " train " + project +
                          " --threads 1 --quiet --save-project " + saved + " --export-onnx " +
                          onnxPath + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char line[4096];
  while (fgets(line, sizeof line, p)) out += line;
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("saved " + saved), std::string::npos) << out;

  auto g = loadProject(saved);
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->node(m.bn)->weights.size(), 4u);
  EXPECT_EQ(g->info().sections.count("training"), 1u);  // the rest of the project is kept
  auto e = exportOnnx(*g);
  ASSERT_TRUE(e.ok()) << e.message();
  auto cliModel = readOnnxFile(onnxPath);
  ASSERT_TRUE(cliModel.ok()) << cliModel.message();
  auto got = initializers(*e), want = initializers(*cliModel);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, tensor] : want) EXPECT_TRUE(sameTensor(got[name], tensor)) << name;
  // And the untrained export differs: the saved project holds trained values.
  auto untrained = exportOnnx(m.g);
  ASSERT_TRUE(untrained.ok());
  EXPECT_FALSE(sameTensor(initializers(*untrained)["fc1.kernel"], got["fc1.kernel"]));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dw::engine::training
