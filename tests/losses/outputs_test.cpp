// Output Predict / Output Train and the two exports (ExportOptions::withLosses), on the example
// projects and on small graphs.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/session.h"
#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"

namespace dw {
namespace {

using nlohmann::json;

std::string example(const std::string& name) {
  return std::string(DW_SOURCE_DIR) + "/resources/examples/" + name;
}

json trainingInfo(const onnx::ModelProto& m) {
  for (const auto& p : m.metadata_props())
    if (p.key() == kTrainingMetadataKey) return json::parse(p.value());
  return json();
}

std::vector<std::string> names(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& v) {
  std::vector<std::string> out;
  for (const auto& x : v) out.push_back(x.name());
  return out;
}

TEST(TrainingExport, ExamplesCarryLossAndMetric) {
  for (const char* file : {"fashion_mnist_mlp.dwproj", "fashion_mnist_cnn.dwproj"}) {
    auto g = loadProject(example(file));
    ASSERT_TRUE(g.ok()) << g.message();
    // Inference: image -> logits only, no metadata about training.
    auto inf = exportOnnx(*g);
    ASSERT_TRUE(inf.ok()) << inf.message();
    EXPECT_EQ(names(inf->graph().input()), std::vector<std::string>{"image"}) << file;
    EXPECT_EQ(names(inf->graph().output()), std::vector<std::string>{"logits"}) << file;
    EXPECT_TRUE(trainingInfo(*inf).is_null());
    // With losses: the label is an input, the loss and the metric's value and statistics are
    // outputs, and the metadata says which is which.
    ExportOptions opt;
    opt.withLosses = true;
    auto tr = exportOnnx(*g, opt);
    ASSERT_TRUE(tr.ok()) << tr.message();
    EXPECT_EQ(names(tr->graph().input()), (std::vector<std::string>{"image", "label"})) << file;
    const json info = trainingInfo(*tr);
    EXPECT_EQ(info["losses"], json({"logits_loss"}));
    EXPECT_EQ(info["targets"], json({"label"}));
    EXPECT_EQ(info["predictions"], json({"logits"}));
    ASSERT_EQ(info["metrics"].size(), 1u);
    EXPECT_EQ(info["metrics"][0]["name"], "accuracy");
    EXPECT_EQ(info["metrics"][0]["type"], "SparseCategoricalAccuracy");
    EXPECT_EQ(info["metrics"][0]["stats"], json({"accuracy/stat0", "accuracy/stat1"}));
    const auto outs = names(tr->graph().output());
    for (const std::string o :
         {"logits", "logits_loss", "accuracy_value", "accuracy/stat0", "accuracy/stat1"})
      EXPECT_NE(std::find(outs.begin(), outs.end(), o), outs.end()) << o;
    for (const auto& o : tr->graph().output())
      if (o.name() == "logits_loss") {
        EXPECT_EQ(o.type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
        EXPECT_EQ(o.type().tensor_type().shape().dim_size(), 0) << "the loss is a scalar";
      }
    // The SoftmaxCrossEntropyLoss lowering is used.
    bool sce = false;
    for (const auto& n : tr->graph().node()) sce |= n.op_type() == "SoftmaxCrossEntropyLoss";
    EXPECT_TRUE(sce);
  }
}

TEST(TrainingExport, MlpLossAndAccuracyMatchTheLogits) {
  auto g = loadProject(example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(*g, opt);
  ASSERT_TRUE(m.ok()) << m.message();
  auto s = engine::InferenceSession::create(*m);
  ASSERT_TRUE(s.ok()) << s.message();
  const int n = 5;
  std::vector<float> image(n * 784);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<float>(std::sin(0.37 * i));
  std::vector<int64_t> label = {0, 3, 9, 2, 7};
  auto out = (*s)->run({{"image", engine::Tensor::fromVector(image, {n, 1, 28, 28})},
                        {"label", engine::Tensor::fromVector(label, {n})}});
  ASSERT_TRUE(out.ok()) << out.message();
  const auto& logits = out->at("logits");
  double loss = 0, hits = 0;
  for (int i = 0; i < n; ++i) {
    const float* row = logits.data<float>() + i * 10;
    double mx = row[0], sum = 0;
    int arg = 0;
    for (int c = 0; c < 10; ++c)
      if (row[c] > mx) mx = row[c], arg = c;
    for (int c = 0; c < 10; ++c) sum += std::exp(row[c] - mx);
    loss += -(row[label[i]] - mx - std::log(sum)) / n;
    hits += arg == label[i];
  }
  EXPECT_NEAR(out->at("logits_loss").data<float>()[0], loss, 1e-5 * std::abs(loss) + 1e-6);
  EXPECT_FLOAT_EQ(out->at("accuracy_value").data<float>()[0], static_cast<float>(hits / n));
  EXPECT_FLOAT_EQ(out->at("accuracy/stat0").data<float>()[0], static_cast<float>(hits));
  EXPECT_FLOAT_EQ(out->at("accuracy/stat1").data<float>()[0], static_cast<float>(n));
  // The epoch finalize of the metric, on its own.
  auto fin = metricFinalizeModel(*m, "accuracy");
  ASSERT_TRUE(fin.ok()) << fin.message();
  EXPECT_EQ(fin->graph().input_size(), 2);
  EXPECT_EQ(metricFinalizeModel(*m, "nope").ok(), false);
}

TEST(TrainingExport, InferenceExportRoundTripsTheTrainingParts) {
  auto g = loadProject(example("fashion_mnist_cnn.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  auto m = exportOnnx(*g);
  ASSERT_TRUE(m.ok()) << m.message();
  auto back = importOnnx(*m);
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(back->nodes().size(), g->nodes().size());
  for (const auto& [id, n] : g->nodes()) {
    const Node* b = back->node(id);
    ASSERT_NE(b, nullptr) << g->describe(id);
    EXPECT_EQ(b->type, n.type);
    EXPECT_EQ(b->name, n.name);
    if (n.type == "Output Train") {
      EXPECT_EQ(b->params, n.params);
    }
  }
  EXPECT_TRUE(back->validate().empty());
  ExportOptions opt;
  opt.withLosses = true;
  EXPECT_TRUE(exportOnnx(*back, opt).ok());
}

struct Small {
  Graph g;
  NodeId pred = 0, target = 0, out = 0;
};

// x: float[N,3] -> Output Train "y" against t: int64[N].
Small smallGraph() {
  Small s;
  auto x = s.g.addNode(kGraphDomain, "Input");
  auto t = s.g.addNode(kGraphDomain, "Input");
  auto o = s.g.addNode(kLayersDomain, "Output Train");
  EXPECT_TRUE(x.ok() && t.ok() && o.ok());
  EXPECT_TRUE(s.g.rename(*x, "x").ok());
  EXPECT_TRUE(s.g.setParam(*x, "type", Param::makeString("float[N,3]")).ok());
  EXPECT_TRUE(s.g.rename(*t, "t").ok());
  EXPECT_TRUE(s.g.setParam(*t, "type", Param::makeString("int64[N]")).ok());
  EXPECT_TRUE(s.g.rename(*o, "y").ok());
  EXPECT_TRUE(s.g.addLink({{*x, 0}, {*o, 0}}).ok());
  EXPECT_TRUE(s.g.addLink({{*t, 0}, {*o, 1}}).ok());
  s.pred = *x;
  s.target = *t;
  s.out = *o;
  return s;
}

TEST(OutputTrain, RefusesAParameterItsLossDoesNotTake) {
  Small s = smallGraph();
  ASSERT_TRUE(s.g.setParam(s.out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
  ASSERT_TRUE(s.g.setParam(s.out, "delta", Param::makeFloat(2.0)).ok());
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(s.g, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("'delta' does not apply to loss SparseCategoricalCrossentropy"),
            std::string::npos)
      << m.message();
  EXPECT_NE(m.message().find("'y'"), std::string::npos) << m.message();
  // The inference export does not compute the loss, so it does not mind.
  EXPECT_TRUE(exportOnnx(s.g).ok());
  // 'none' is no training loss.
  EXPECT_FALSE(s.g.setParam(s.out, "reduction", Param::makeString("none")).ok());
  EXPECT_FALSE(s.g.setParam(s.out, "loss", Param::makeString("Accuracy")).ok());
}

TEST(OutputTrain, LossErrorsNameTheNode) {
  Small s = smallGraph();
  // A rank-1 prediction has no class axis.
  ASSERT_TRUE(s.g.setParam(s.pred, "type", Param::makeString("float[N]")).ok());
  ASSERT_TRUE(s.g.setParam(s.out, "loss", Param::makeString("CategoricalCrossentropy")).ok());
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(s.g, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("Output Train 'y'"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("loss CategoricalCrossentropy"), std::string::npos) << m.message();
}

// A user's graph: Dense left at 32 units, a float[N] target, the default MeanSquaredError.
// Broadcasting compared every output with every label and failed only at a smaller last batch.
TEST(OutputTrain, ElementwiseLossesAndMetricsNeedTheTargetsShape) {
  Small s = smallGraph();  // x: float[N,3], t: int64[N], the default loss MeanSquaredError
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(s.g, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("the prediction [N,3] and the target [N] must have the same shape"),
            std::string::npos)
      << m.message();
  EXPECT_NE(m.message().find("Output Train 'y'"), std::string::npos) << m.message();
  // Class indices against class scores are what the Sparse losses take.
  ASSERT_TRUE(s.g.setParam(s.out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
  EXPECT_TRUE(exportOnnx(s.g, opt).ok());
  // The same shape trains; so does a dim known on one side only.
  ASSERT_TRUE(s.g.setParam(s.out, "loss", Param::makeString("MeanSquaredError")).ok());
  ASSERT_TRUE(s.g.setParam(s.target, "type", Param::makeString("float[N,3]")).ok());
  EXPECT_TRUE(exportOnnx(s.g, opt).ok());
  ASSERT_TRUE(s.g.setParam(s.target, "type", Param::makeString("float[N,?]")).ok());
  EXPECT_TRUE(exportOnnx(s.g, opt).ok());
  // A metric that compares element by element says the same.
  auto acc = s.g.addNode(kMetricsDomain, "BinaryAccuracy");
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(s.g.setParam(s.target, "type", Param::makeString("float[N]")).ok());
  ASSERT_TRUE(s.g.setParam(s.out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
  ASSERT_TRUE(s.g.addLink({{s.pred, 0}, {*acc, 0}}).ok());
  ASSERT_TRUE(s.g.addLink({{s.target, 0}, {*acc, 1}}).ok());
  m = exportOnnx(s.g, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("must have the same shape"), std::string::npos) << m.message();
}

// An imported model's Output node and an Output Train added beside it read one tensor, which is
// then a graph output: the loss found no type for it and said its rank was unknown (user trial).
TEST(OutputTrain, ReadsATensorThatIsAlsoAGraphOutput) {
  // In the imported model's order: the Output node exists before the Output Train.
  Graph g;
  auto x = *g.addNode(kGraphDomain, "Input");
  auto relu = *g.addNode(kOnnxDomain, "Relu");
  auto logits = *g.addNode(kGraphDomain, "Output");
  auto out = *g.addNode(kLayersDomain, "Output Train");
  auto t = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.rename(x, "x").ok() && g.rename(t, "t").ok() && g.rename(logits, "logits").ok());
  ASSERT_TRUE(g.rename(out, "output").ok());
  ASSERT_TRUE(g.setParam(x, "type", Param::makeString("float[N,3]")).ok());
  ASSERT_TRUE(g.setParam(t, "type", Param::makeString("int64[N]")).ok());
  ASSERT_TRUE(g.setParam(logits, "type", Param::makeString("float[N,3]")).ok());
  // As import names it: the operator's output is the graph output's tensor itself.
  ASSERT_TRUE(g.setSpecifiedOutputsName(relu, {"logits"}).ok());
  ASSERT_TRUE(g.setParam(out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
  ASSERT_TRUE(g.addLink({{x, 0}, {relu, 0}}).ok());
  ASSERT_TRUE(g.addLink({{relu, 0}, {logits, 0}}).ok());
  ASSERT_TRUE(g.addLink({{relu, 0}, {out, 0}}).ok());
  ASSERT_TRUE(g.addLink({{t, 0}, {out, 1}}).ok());
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(g, opt);
  ASSERT_TRUE(m.ok()) << m.message();
}

TEST(TrainingExport, AnUnusedLossNodeIsALossOutput) {
  Graph g;
  auto x = *g.addNode(kGraphDomain, "Input");
  auto t = *g.addNode(kGraphDomain, "Input");
  auto loss = *g.addNode(kLossesDomain, "MeanSquaredError");
  auto out = *g.addNode(kLayersDomain, "Output Predict");
  ASSERT_TRUE(g.rename(x, "x").ok() && g.rename(t, "t").ok() && g.rename(out, "y").ok());
  ASSERT_TRUE(g.rename(loss, "mse").ok());
  ASSERT_TRUE(g.setParam(x, "type", Param::makeString("float[N,2]")).ok());
  ASSERT_TRUE(g.setParam(t, "type", Param::makeString("float[N,2]")).ok());
  ASSERT_TRUE(g.addLink({{x, 0}, {out, 0}}).ok());
  ASSERT_TRUE(g.addLink({{x, 0}, {loss, 0}}).ok());
  ASSERT_TRUE(g.addLink({{t, 0}, {loss, 1}}).ok());
  auto inf = exportOnnx(g);
  ASSERT_TRUE(inf.ok()) << inf.message();
  EXPECT_EQ(names(inf->graph().input()), std::vector<std::string>{"x"});
  EXPECT_EQ(inf->graph().node_size(), 1);  // the Identity naming y
  ExportOptions opt;
  opt.withLosses = true;
  auto tr = exportOnnx(g, opt);
  ASSERT_TRUE(tr.ok()) << tr.message();
  EXPECT_EQ(trainingInfo(*tr)["losses"], json({"mse_loss"}));
  EXPECT_EQ(trainingInfo(*tr)["targets"], json({"t"}));
}

// `deepwire nodes --json` lists the losses, metrics and outputs under their domains.
TEST(Cli, NodesJsonListsLossesAndMetrics) {
  const std::string cmd = std::string(DW_CLI_PATH) + " nodes --json";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0);
  const json all = json::parse(text, nullptr, false);
  ASSERT_TRUE(all.is_array());
  std::map<std::string, std::set<std::string>> byDomain;
  for (const auto& s : all)
    byDomain[s["domain"].get<std::string>()].insert(s["type"].get<std::string>());
  for (const NodeSpec* s : Catalogue::instance().all()) {
    if (s->domain == kLossesDomain || s->domain == kMetricsDomain) {
      EXPECT_TRUE(byDomain[s->domain].count(s->type)) << s->key();
    }
  }
  EXPECT_EQ(byDomain[kLossesDomain].size(), 15u);
  EXPECT_TRUE(byDomain[kMetricsDomain].count("SparseCategoricalAccuracy"));
  EXPECT_TRUE(byDomain[kLayersDomain].count("Output Train"));
  EXPECT_TRUE(byDomain[kLayersDomain].count("Output Predict"));
}

}  // namespace
}  // namespace dw
