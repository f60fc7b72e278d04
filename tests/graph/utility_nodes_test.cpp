// The seed toolkit's utility nodes in domain "deepwire": the ranked Initializer variants,
// Constant, Generator, Accelerator and the Train/Eval/Full Train Step control nodes. Each one is
// a catalogue entry, and a model using it exports to ONNX that passes the full checker.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"
#include "nodes/type_syntax.h"
#include "test_util.h"

namespace dw {
namespace {

const NodeSpec& spec(const std::string& type) {
  const NodeSpec* s = Catalogue::instance().find(kGraphDomain, type);
  EXPECT_NE(s, nullptr) << type;
  static NodeSpec none;
  return s ? *s : none;
}

std::vector<std::string> paramNames(const NodeSpec& s) {
  std::vector<std::string> v;
  for (const auto& p : s.params) v.push_back(p.name);
  return v;
}

// node -> Output "y"; returns the exported model (the test fails if export fails).
onnx::ModelProto exportToOutput(Graph& g, NodeId node) {
  NodeId out = *g.addNode(kGraphDomain, "Output");
  EXPECT_TRUE(g.rename(out, "y").ok());
  EXPECT_TRUE(g.addLink({{node, 0}, {out, 0}}).ok());
  auto m = exportOnnx(g);
  EXPECT_TRUE(m.ok()) << m.message();
  return m.ok() ? *m : onnx::ModelProto();
}

struct Variant {
  std::string type;
  int rank;
  bool isInt;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (int rank = 0; rank <= 6; ++rank) {
    const std::string suffix = rank == 0 ? "Scalar" : std::to_string(rank) + "D";
    v.push_back({"Initializer" + suffix, rank, false});
    v.push_back({"IntInitializer" + suffix, rank, true});
  }
  return v;
}

class InitializerVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(InitializerVariant, SharesTheInitializerParametersAndExports) {
  const Variant& v = GetParam();
  const NodeSpec& s = spec(v.type);
  EXPECT_EQ(s.kind, NodeKind::Initializer);
  EXPECT_EQ(s.shapeRank, v.rank);
  EXPECT_EQ(s.category, "initializers");
  // Extends the generic Initializer: the same parameters, in the same order.
  EXPECT_EQ(paramNames(s), paramNames(spec("Initializer")));

  Graph g;
  auto n = g.addNode(kGraphDomain, v.type);
  ASSERT_TRUE(n.ok()) << n.message();
  ASSERT_TRUE(g.rename(*n, "w").ok());
  EXPECT_EQ(g.param(*n, "shape")->asInts().size(), static_cast<size_t>(v.rank));
  EXPECT_EQ(g.param(*n, "dtype")->asString(), v.isInt ? "int64" : "float");
  std::vector<int64_t> shape;
  for (int i = 0; i < v.rank; ++i) shape.push_back(i + 2);
  ASSERT_TRUE(g.setParam(*n, "shape", Param::makeInts(shape)).ok());
  ASSERT_TRUE(g.setParam(*n, "fill", Param::makeString("uniform")).ok());
  ASSERT_TRUE(g.setParam(*n, "low", Param::makeFloat(-3)).ok());
  ASSERT_TRUE(g.setParam(*n, "high", Param::makeFloat(3)).ok());
  ASSERT_TRUE(g.setParam(*n, "status", Param::makeString("Frozen")).ok());
  ASSERT_TRUE(g.setParam(*n, "regularizer", Param::makeString("l2")).ok());
  if (v.isInt) ASSERT_TRUE(g.setParam(*n, "dtype", Param::makeString("int32")).ok());

  const auto m = exportToOutput(g, *n);
  ASSERT_EQ(m.graph().initializer_size(), 1);
  const auto& t = m.graph().initializer(0);
  EXPECT_EQ(t.name(), "w");
  EXPECT_EQ(t.data_type(), v.isInt ? onnx::TensorProto::INT32 : onnx::TensorProto::FLOAT);
  EXPECT_EQ(std::vector<int64_t>(t.dims().begin(), t.dims().end()), shape);
  if (v.isInt) {
    const auto* d = reinterpret_cast<const int32_t*>(t.raw_data().data());
    for (int64_t i = 0; i < static_cast<int64_t>(t.raw_data().size() / 4); ++i)
      EXPECT_TRUE(d[i] >= -3 && d[i] <= 3) << d[i];
  }
  // Status and regularizer travel with the model.
  std::string layout;
  for (const auto& p : m.metadata_props())
    if (p.key() == kLayoutMetadataKey) layout = p.value();
  auto j = nlohmann::json::parse(layout);
  EXPECT_EQ(j["nodes"]["initializer:w"]["status"], "Frozen");
  EXPECT_EQ(j["nodes"]["initializer:w"]["regularizer"], "l2");
}

TEST_P(InitializerVariant, RefusesAnotherRankOrFamily) {
  const Variant& v = GetParam();
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, v.type);
  auto wrong = g.setParam(n, "shape", Param::makeInts(std::vector<int64_t>(v.rank + 1, 2)));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("takes exactly " + std::to_string(v.rank)), std::string::npos)
      << wrong.message();
  EXPECT_NE(wrong.message().find(v.type), std::string::npos) << wrong.message();
  EXPECT_FALSE(g.setParam(n, "dtype", Param::makeString(v.isInt ? "float" : "int64")).ok());
  if (v.isInt) EXPECT_FALSE(g.setParam(n, "fill", Param::makeString("glorot_uniform")).ok());
  EXPECT_FALSE(g.setParam(n, "status", Param::makeString("Sometimes")).ok());
}

INSTANTIATE_TEST_SUITE_P(AllVariants, InitializerVariant, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return info.param.type;
                         });

TEST(UtilityNodes, GenericInitializerKeepsAnyRank) {
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Initializer");
  EXPECT_TRUE(g.setParam(n, "shape", Param::makeInts({2, 3, 4, 5, 6, 7, 8})).ok());
  EXPECT_EQ(spec("Initializer").shapeRank, -1);
}

TEST(UtilityNodes, ConstantRepeatsOneValueAsRawData) {
  struct C {
    std::string dtype;
    std::vector<int64_t> shape;
    double value;
    std::string type;
  };
  for (const C& c : {C{"float", {2, 3}, 1.5, "float[2,3]"}, C{"int64", {}, 7, "int64[]"},
                     C{"bool", {4}, 1, "bool[4]"}, C{"float16", {1, 2}, -2, "float16[1,2]"},
                     C{"uint8", {0, 3}, 9, "uint8[0,3]"}}) {
    Graph g;
    NodeId n = *g.addNode(kGraphDomain, "Constant");
    ASSERT_TRUE(g.setParam(n, "dtype", Param::makeString(c.dtype)).ok());
    ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts(c.shape)).ok());
    ASSERT_TRUE(g.setParam(n, "value", Param::makeFloat(c.value)).ok());
    const auto m = exportToOutput(g, n);
    ASSERT_EQ(m.graph().node_size(), 1) << c.dtype;
    const auto& node = m.graph().node(0);
    EXPECT_EQ(node.op_type(), "Constant");
    EXPECT_EQ(node.output(0), "y");
    const auto& t = node.attribute(0).t();
    int64_t count = 1;
    for (int64_t d : c.shape) count *= d;
    EXPECT_FALSE(t.raw_data().empty() && count > 0);
    EXPECT_EQ(formatType(m.graph().output(0).type()), c.type);
    if (c.dtype == "float") {
      ASSERT_EQ(t.raw_data().size(), 24u);
      for (int i = 0; i < 6; ++i) {
        float f;
        std::memcpy(&f, t.raw_data().data() + 4 * i, 4);
        EXPECT_EQ(f, 1.5f);
      }
    }
    if (c.dtype == "int64") {
      int64_t v;
      ASSERT_EQ(t.raw_data().size(), 8u);
      std::memcpy(&v, t.raw_data().data(), 8);
      EXPECT_EQ(v, 7);
    }
  }
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Constant");
  EXPECT_FALSE(g.setParam(n, "dtype", Param::makeString("string")).ok());
  ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts({-1})).ok());
  NodeId out = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.addLink({{n, 0}, {out, 0}}).ok());
  auto bad = exportOnnx(g);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("Constant"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find(">= 0"), std::string::npos) << bad.message();
}

TEST(UtilityNodes, GeneratorLowersToTheOnnxOps) {
  {
    Graph g;
    NodeId n = *g.addNode(kGraphDomain, "Generator");
    ASSERT_TRUE(g.setParam(n, "shape", Param::makeInts({2, 5})).ok());
    const auto m = exportToOutput(g, n);
    ASSERT_EQ(m.graph().node_size(), 1);
    const auto& node = m.graph().node(0);
    EXPECT_EQ(node.op_type(), "RandomUniform");
    std::map<std::string, onnx::AttributeProto> a;
    for (const auto& x : node.attribute()) a[x.name()] = x;
    EXPECT_EQ(a["dtype"].i(), onnx::TensorProto::FLOAT);
    EXPECT_EQ(a["high"].f(), 1.0f);
    EXPECT_EQ(a["low"].f(), 0.0f);
    EXPECT_EQ(a["seed"].f(), 0.0f);
    EXPECT_EQ(formatType(m.graph().output(0).type()), "float[2,5]");
  }
  {
    Graph g;
    NodeId n = *g.addNode(kGraphDomain, "Generator");
    ASSERT_TRUE(g.setParam(n, "generator", Param::makeString("RandomNormal")).ok());
    ASSERT_TRUE(g.setParam(n, "dtype", Param::makeString("double")).ok());
    ASSERT_TRUE(g.setParam(n, "scale", Param::makeFloat(2)).ok());
    const auto m = exportToOutput(g, n);
    EXPECT_EQ(m.graph().node(0).op_type(), "RandomNormal");
    EXPECT_EQ(formatType(m.graph().output(0).type()), "double[1]");
  }
  {
    Graph g;
    NodeId n = *g.addNode(kGraphDomain, "Generator");
    ASSERT_TRUE(g.setParam(n, "generator", Param::makeString("SequenceEmpty")).ok());
    ASSERT_TRUE(g.setParam(n, "dtype", Param::makeString("int64")).ok());
    const auto m = exportToOutput(g, n);
    EXPECT_EQ(m.graph().node(0).op_type(), "SequenceEmpty");
    EXPECT_EQ(formatType(m.graph().output(0).type()), "seq(int64)");
  }
  Graph g;
  NodeId n = *g.addNode(kGraphDomain, "Generator");
  ASSERT_TRUE(g.setParam(n, "dtype", Param::makeString("int32")).ok());
  NodeId out = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.addLink({{n, 0}, {out, 0}}).ok());
  auto bad = exportOnnx(g);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("Generator"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("int32"), std::string::npos) << bad.message();
}

// Accelerator and the step nodes leave the exported model exactly as it is without them.
TEST(UtilityNodes, ControlNodesExportNothing) {
  NodeId relu = 0;
  Graph plain = test::tinyGraph(&relu);
  auto base = exportOnnx(plain);
  ASSERT_TRUE(base.ok()) << base.message();

  Graph g = test::tinyGraph(&relu);
  NodeId acc = *g.addNode(kGraphDomain, "Accelerator");
  ASSERT_TRUE(g.setParam(acc, "device", Param::makeString("auto")).ok());
  ASSERT_TRUE(g.setParam(acc, "threads", Param::makeInt(2)).ok());
  EXPECT_FALSE(g.setParam(acc, "device", Param::makeString("tpu")).ok());
  NodeId train = *g.addNode(kGraphDomain, "Train Step");
  NodeId full = *g.addNode(kGraphDomain, "Full Train Step");
  ASSERT_TRUE(g.setParam(full, "update?", Param::makeBool(false)).ok());
  NodeId eval = *g.addNode(kGraphDomain, "Eval Step");
  // A step joins its model through the Graphs wire; it has no tensor port to wire a loss into.
  ASSERT_TRUE(g.addLink({{relu, kGraphPort}, {train, kGraphPort}}).ok());
  EXPECT_FALSE(g.addLink({{relu, 0}, {eval, 0}}).ok());
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->graph().node_size(), base->graph().node_size());
  EXPECT_EQ(m->graph().initializer_size(), base->graph().initializer_size());
  EXPECT_EQ(m->graph().input_size(), base->graph().input_size());
  EXPECT_EQ(m->graph().output_size(), base->graph().output_size());
  EXPECT_TRUE(checkOnnxModel(*m).ok());

  ASSERT_TRUE(g.setParam(acc, "threads", Param::makeInt(-1)).ok());
  auto bad = exportOnnx(g);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("Accelerator"), std::string::npos) << bad.message();
}

// With losses (what the trainer exports), the steps change nothing either.
TEST(UtilityNodes, ControlNodesLeaveTrainingExportsAlone) {
  auto build = [](bool withSteps) {
    NodeId relu = 0;
    Graph g = test::tinyGraph(&relu);
    NodeId y = 0;
    for (const auto& [id, n] : g.nodes())
      if (n.type == "Output") y = id;
    EXPECT_TRUE(g.removeNode(y).ok());
    NodeId train = *g.addNode(kLayersDomain, "Output Train");
    EXPECT_TRUE(g.rename(train, "y").ok());
    NodeId target = *g.addNode(kGraphDomain, "Input");
    EXPECT_TRUE(g.rename(target, "t").ok());
    EXPECT_TRUE(g.setParam(target, "type", Param::makeString("float[N,4]")).ok());
    EXPECT_TRUE(g.addLink({{relu, 0}, {train, 0}}).ok());
    EXPECT_TRUE(g.addLink({{target, 0}, {train, 1}}).ok());
    if (withSteps)
      for (const char* t : {"Train Step", "Full Train Step", "Eval Step", "Accelerator"})
        EXPECT_TRUE(g.addNode(kGraphDomain, t).ok());
    ExportOptions o;
    o.withLosses = true;
    auto m = exportOnnx(g, o);
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? *m : onnx::ModelProto();
  };
  const auto plain = build(false), steps = build(true);
  ASSERT_GT(plain.graph().node_size(), 1);
  EXPECT_EQ(steps.graph().node_size(), plain.graph().node_size());
  EXPECT_EQ(steps.graph().output_size(), plain.graph().output_size());
  EXPECT_EQ(steps.graph().input_size(), plain.graph().input_size());
  auto meta = [](const onnx::ModelProto& m) {
    for (const auto& p : m.metadata_props())
      if (p.key() == "deepwire.training") return p.value();
    return std::string();
  };
  EXPECT_FALSE(meta(plain).empty());
  EXPECT_EQ(meta(steps), meta(plain));
}

// The project file keeps every utility node with its parameters (export keeps none of the
// control nodes, so the project is where they live).
TEST(UtilityNodes, ProjectsKeepThem) {
  Graph g;
  NodeId acc = *g.addNode(kGraphDomain, "Accelerator");
  ASSERT_TRUE(g.setParam(acc, "device", Param::makeString("gpu")).ok());
  ASSERT_TRUE(g.setParam(acc, "threads", Param::makeInt(3)).ok());
  NodeId full = *g.addNode(kGraphDomain, "Full Train Step");
  ASSERT_TRUE(g.setParam(full, "update?", Param::makeBool(false)).ok());
  NodeId init = *g.addNode(kGraphDomain, "IntInitializer3D");
  ASSERT_TRUE(g.setParam(init, "shape", Param::makeInts({2, 3, 4})).ok());
  NodeId gen = *g.addNode(kGraphDomain, "Generator");
  ASSERT_TRUE(g.setParam(gen, "generator", Param::makeString("RandomNormal")).ok());
  auto back = projectFromJsonText(projectToJsonText(g), "test");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->node(acc)->type, "Accelerator");
  EXPECT_EQ(*back->param(acc, "device"), Param::makeString("gpu"));
  EXPECT_EQ(*back->param(acc, "threads"), Param::makeInt(3));
  EXPECT_EQ(back->node(full)->type, "Full Train Step");
  EXPECT_EQ(*back->param(full, "update?"), Param::makeBool(false));
  EXPECT_EQ(back->node(init)->type, "IntInitializer3D");
  EXPECT_EQ(back->param(init, "shape")->asInts(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(*back->param(gen, "generator"), Param::makeString("RandomNormal"));
}

TEST(UtilityNodes, StepNodesAreCatalogueEntries) {
  for (const char* type : {"Train Step", "Full Train Step", "Eval Step", "Accelerator"}) {
    const NodeSpec& s = spec(type);
    EXPECT_EQ(s.category, "training") << type;
    EXPECT_TRUE(s.outputs.empty()) << type;
    EXPECT_NE(s.lower, nullptr) << type;
  }
  for (const char* type : {"Train Step", "Full Train Step", "Eval Step", "Accelerator"})
    EXPECT_TRUE(spec(type).inputs.empty()) << type;
  ASSERT_NE(spec("Full Train Step").param("update?"), nullptr);
  EXPECT_EQ(*spec("Full Train Step").param("update?")->defaultValue, Param::makeBool(true));
  ASSERT_NE(spec("Eval Step").param("reset_metrics?"), nullptr);
  ASSERT_NE(spec("Accelerator").param("device"), nullptr);
  EXPECT_EQ(spec("Accelerator").param("device")->allowedValues,
            (std::vector<std::string>{"cpu", "cuda", "gpu", "auto"}));
  ASSERT_NE(spec("Accelerator").param("threads"), nullptr);
}

// A cross-entropy told it gets probabilities, fed by a layer that gives raw scores, trains to
// little: Graph::hints says so (the studio and `deepwire check`/`train` show it) without
// making the project invalid, and the hint goes once from_logits is on or the layer ends in a
// softmax.
TEST(UtilityNodes, NonLogitsLossOnRawScoresGetsAHint) {
  auto g = loadProject(test::example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  NodeId train = 0;
  for (const auto& [id, n] : g->nodes())
    if (n.type == "Output Train") train = id;
  ASSERT_NE(train, 0u);
  EXPECT_TRUE(g->hints().empty());
  ASSERT_TRUE(g->setParam(train, "from_logits", Param::makeBool(false)).ok());
  auto hints = g->hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_EQ(hints[0].node, train);
  EXPECT_NE(hints[0].message.find("from_logits is off"), std::string::npos) << hints[0].message;
  EXPECT_NE(hints[0].message.find("Gemm 'fc3' (#13) gives unnormalized scores"), std::string::npos)
      << hints[0].message;
  EXPECT_TRUE(g->validate().empty());
  ASSERT_TRUE(g->setParam(train, "from_logits", Param::makeBool(true)).ok());
  EXPECT_TRUE(g->hints().empty());
  // A Keras-style layer: its activation decides.
  const NodeId fc3 = g->inputLink(train, 0)->from.node;
  const NodeId dense = *g->addNode(kLayersDomain, "Dense");
  ASSERT_TRUE(g->setParam(dense, "units", Param::makeInt(10)).ok());
  ASSERT_TRUE(g->removeLink(*g->inputLink(train, 0)).ok());
  ASSERT_TRUE(g->addLink({{fc3, 0}, {dense, 0}}).ok());
  ASSERT_TRUE(g->addLink({{dense, 0}, {train, 0}}).ok());
  ASSERT_TRUE(g->setParam(train, "from_logits", Param::makeBool(false)).ok());
  hints = g->hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].message.find("(activation linear)"), std::string::npos) << hints[0].message;
  ASSERT_TRUE(g->setParam(dense, "activation", Param::makeString("softmax")).ok());
  EXPECT_TRUE(g->hints().empty());
  // The other way round: probabilities taken for logits are squashed twice (a trial's model
  // ending in Softmax, imported --from-logits, sat at ln 10).
  ASSERT_TRUE(g->setParam(train, "from_logits", Param::makeBool(true)).ok());
  hints = g->hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].message.find("from_logits is on"), std::string::npos) << hints[0].message;
  EXPECT_NE(hints[0].message.find("(activation softmax): they are squashed twice"),
            std::string::npos)
      << hints[0].message;
}

// An initializer shared through Identity nodes (torch's exporter merging weights of equal
// values) gets a hint: deepwire trains it as one weight, PyTorch trained the copies apart.
TEST(UtilityNodes, AnInitializerSharedThroughIdentitiesGetsAHint) {
  Graph g;
  auto w = g.addNode(kGraphDomain, "Initializer");
  ASSERT_TRUE(w.ok()) << w.message();
  ASSERT_TRUE(g.setParam(*w, "shape", Param::makeInts({4})).ok());
  std::vector<NodeId> ids;
  for (int i = 0; i < 2; ++i) {
    auto id = g.addNode(kOnnxDomain, "Identity");
    ASSERT_TRUE(id.ok()) << id.message();
    ASSERT_TRUE(g.addLink({{*w, 0}, {*id, 0}}).ok());
    ids.push_back(*id);
  }
  auto hints = g.hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_EQ(hints[0].node, *w);
  EXPECT_NE(hints[0].message.find("feeds 2 Identity nodes"), std::string::npos) << hints[0].message;
  ASSERT_TRUE(g.setParam(*w, "status", Param::makeString("Constant")).ok());
  EXPECT_TRUE(g.hints().empty());  // a constant is not trained at all
}

// TF32 on a device other than cuda is a hint on the Accelerator node while the canvas is
// edited, not a surprise at the first step.
TEST(UtilityNodes, Tf32OffCudaGetsAHint) {
  Graph g;
  auto acc = g.addNode(kGraphDomain, "Accelerator");
  ASSERT_TRUE(acc.ok()) << acc.message();
  EXPECT_TRUE(g.hints().empty());
  ASSERT_TRUE(g.setParam(*acc, "precision", Param::makeString("tf32")).ok());
  auto hints = g.hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].message.find("precision tf32 runs on accelerator cuda only"),
            std::string::npos)
      << hints[0].message;
  ASSERT_TRUE(g.setParam(*acc, "device", Param::makeString("cuda")).ok());
  EXPECT_TRUE(g.hints().empty());
}

// A BatchNormalization left in training mode (torch's training export) normalizes each batch by
// itself in every export: a hint says so, and goes once the mode is 0.
TEST(UtilityNodes, BatchNormalizationInTrainingModeGetsAHint) {
  auto g = loadProject(test::example("fashion_mnist_cnn.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  NodeId bn = 0;
  for (const auto& [id, n] : g->nodes())
    if (n.type == "BatchNormalization") bn = id;
  ASSERT_NE(bn, 0u);
  EXPECT_TRUE(g->hints().empty());
  ASSERT_TRUE(g->setParam(bn, "training_mode", Param::makeInt(1)).ok());
  auto hints = g->hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_EQ(hints[0].node, bn);
  EXPECT_NE(hints[0].message.find("training_mode is 1"), std::string::npos) << hints[0].message;
  ASSERT_TRUE(g->setParam(bn, "training_mode", Param::makeInt(0)).ok());
  EXPECT_TRUE(g->hints().empty());
}

// torch's training export also gives Dropout a constant true training_mode: it drops values in
// every run, the exported model's too. A hint says so; unwired, training turns dropout on itself.
TEST(UtilityNodes, DropoutForcedIntoTrainingModeGetsAHint) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("dropout");
  auto io = [](onnx::ValueInfoProto* v, const char* name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    t->mutable_shape()->add_dim()->set_dim_value(4);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  auto* c = g->add_node();
  c->set_op_type("Constant");
  c->add_output("on");
  auto* value = c->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
  value->mutable_t()->set_raw_data(std::string(1, '\1'));
  auto* d = g->add_node();
  d->set_op_type("Dropout");
  for (const char* in : {"x", "", "on"}) d->add_input(in);
  d->add_output("y");
  auto imported = importOnnx(m);
  ASSERT_TRUE(imported.ok()) << imported.message();
  auto hints = imported->hints();
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].message.find("training_mode input is a constant true"), std::string::npos)
      << hints[0].message;
  value->mutable_t()->set_raw_data(std::string(1, '\0'));
  EXPECT_TRUE(importOnnx(m)->hints().empty());  // false: inference, as it should be
}

TEST(UtilityNodes, DescribeAndNodesShowThem) {
  const std::string cli = DW_CLI_PATH;
  std::string out;
  ASSERT_EQ(test::runCommand(cli + " describe 'Full Train Step'", &out), 0) << out;
  EXPECT_NE(out.find("update?"), std::string::npos) << out;
  EXPECT_NE(out.find("Output Train"), std::string::npos) << out;
  ASSERT_EQ(test::runCommand(cli + " describe Constant --domain deepwire", &out), 0) << out;
  EXPECT_NE(out.find("raw"), std::string::npos) << out;
  ASSERT_EQ(test::runCommand(cli + " nodes --json --domain deepwire", &out, false), 0);
  auto j = nlohmann::json::parse(out);
  std::set<std::string> types;
  for (const auto& n : j) types.insert(n["type"].get<std::string>());
  for (const char* t : {"Initializer", "Initializer1D", "Initializer6D", "InitializerScalar",
                        "IntInitializer3D", "IntInitializerScalar", "Constant", "Generator",
                        "Accelerator", "Train Step", "Eval Step", "Full Train Step"})
    EXPECT_TRUE(types.count(t)) << t;
}

}  // namespace
}  // namespace dw
