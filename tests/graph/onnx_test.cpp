// Lowering to ONNX, importing ONNX, and project round trips.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"
#include "graphs/tensor_data.h"
#include "test_util.h"

namespace dw {
namespace {

using test::example;
using test::tinyGraph;

const onnx::NodeProto* findNode(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& n : m.graph().node())
    if (n.name() == name) return &n;
  return nullptr;
}

TEST(Export, TinyGraphPassesChecker) {
  NodeId relu = 0;
  Graph g = tinyGraph(&relu);
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->graph().node_size(), 1);
  EXPECT_EQ(m->graph().node(0).op_type(), "Relu");
  EXPECT_EQ(m->graph().node(0).input(0), "x");
  EXPECT_EQ(m->graph().node(0).output(0), "y");  // named after the Output it feeds
  ASSERT_EQ(m->graph().output_size(), 1);
  EXPECT_EQ(m->graph().output(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(m->opset_import_size(), 1);
  EXPECT_EQ(m->opset_import(0).domain(), "");
  EXPECT_EQ(m->opset_import(0).version(), 17);
  EXPECT_TRUE(checkOnnxModel(*m).ok());
}

TEST(Export, TensorNamesFollowNameAndSpecifiedOutputsName) {
  Graph g;
  NodeId x = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.rename(x, "x").ok());
  ASSERT_TRUE(g.setParam(x, "type", Param::makeString("float[2,3]")).ok());
  NodeId a = *g.addNode(kOnnxDomain, "Relu");
  ASSERT_TRUE(g.rename(a, "act").ok());
  NodeId b = *g.addNode(kOnnxDomain, "Sigmoid");
  ASSERT_TRUE(g.setSpecifiedOutputsName(b, {"probabilities"}).ok());
  NodeId c = *g.addNode(kOnnxDomain, "Tanh");
  NodeId out = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.rename(out, "result").ok());
  ASSERT_TRUE(g.addLink({{x, 0}, {a, 0}}).ok());
  ASSERT_TRUE(g.addLink({{a, 0}, {b, 0}}).ok());
  ASSERT_TRUE(g.addLink({{b, 0}, {c, 0}}).ok());
  ASSERT_TRUE(g.addLink({{c, 0}, {out, 0}}).ok());
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(findNode(*m, "act")->output(0), "act_Y");
  EXPECT_EQ(findNode(*m, "Sigmoid_" + std::to_string(b))->output(0), "probabilities");
  EXPECT_EQ(findNode(*m, "Tanh_" + std::to_string(c))->input(0), "probabilities");
  EXPECT_EQ(findNode(*m, "Tanh_" + std::to_string(c))->output(0), "result");
}

TEST(Export, InvalidGraphNamesTheNode) {
  Graph g;
  NodeId gemm = *g.addNode(kOnnxDomain, "Gemm");
  ASSERT_TRUE(g.rename(gemm, "fc1").ok());
  auto m = exportOnnx(g);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("Gemm 'fc1'"), std::string::npos) << m.message();
}

TEST(Export, CheckerErrorsNameTheNode) {
  // Shapes that cannot multiply: the checker's strict inference refuses, naming our node.
  Graph g;
  NodeId a = *g.addNode(kGraphDomain, "Input");
  NodeId b = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(a, "type", Param::makeString("float[2,3]")).ok());
  ASSERT_TRUE(g.setParam(b, "type", Param::makeString("float[4,5]")).ok());
  NodeId mm = *g.addNode(kOnnxDomain, "MatMul");
  ASSERT_TRUE(g.rename(mm, "proj").ok());
  NodeId out = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.setParam(out, "type", Param::makeString("float[2,5]")).ok());
  ASSERT_TRUE(g.addLink({{a, 0}, {mm, 0}}).ok());
  ASSERT_TRUE(g.addLink({{b, 0}, {mm, 1}}).ok());
  ASSERT_TRUE(g.addLink({{mm, 0}, {out, 0}}).ok());
  auto m = exportOnnx(g);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("MatMul 'proj'"), std::string::npos) << m.message();
  // And which shapes disagree, which libonnx's message leaves out.
  EXPECT_NE(m.message().find("the node's inputs: "), std::string::npos) << m.message();
  EXPECT_NE(m.message().find(" float[2,3], "), std::string::npos) << m.message();
  EXPECT_NE(m.message().find(" float[4,5]"), std::string::npos) << m.message();
}

// libonnx's checker says a type lacks its shape without saying whose: the message names the
// value (a user's hand-made model with an output declared without one).
TEST(Export, CheckerErrorsNameTheValueWithoutAShape) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->add_input("x");
  n->add_output("y");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  const Status st = checkOnnxModel(m);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(output 'y' has no shape;"), std::string::npos) << st.message();
}

// A node whose inputs do not fit it is the problem named, not an output after it that could
// not be typed: a trial's CNN with 16 filters in conv1 before a normalization of 32 channels was
// told to give the Output Train a type.
TEST(Export, AMismatchNamesTheNodeThatRefusesIt) {
  auto g = loadProject(example("fashion_mnist_cnn.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  for (const auto& [id, n] : g->nodes()) {
    if (n.name == "conv1.weight")
      ASSERT_TRUE(g->setParam(id, "shape", Param::makeInts({16, 1, 3, 3})).ok());
    if (n.name == "conv1.bias") ASSERT_TRUE(g->setParam(id, "shape", Param::makeInts({16})).ok());
  }
  auto m = exportOnnx(*g);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.message().rfind("BatchNormalization 'bn1'", 0), 0u) << m.message();
  EXPECT_NE(m.message().find("between 32 and 16"), std::string::npos) << m.message();
}

// A sparse categorical loss on one score a sample (a regression head) is refused when the graph
// is checked, saying which loss fits: it passed validation and failed at the first batch with
// "GatherElements: index 1 out of range".
TEST(Export, SparseLossesNeedClasses) {
  Graph g;
  auto x = g.addNode(kGraphDomain, "Input");
  auto dense = g.addNode(kLayersDomain, "Dense");
  auto out = g.addNode(kLayersDomain, "Output Train");
  auto y = g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(x.ok() && dense.ok() && out.ok() && y.ok());
  ASSERT_TRUE(g.setParam(*x, "type", Param::makeString("float[N,2]")).ok());
  ASSERT_TRUE(g.setParam(*y, "type", Param::makeString("float[N,1]")).ok());
  ASSERT_TRUE(g.setParam(*dense, "units", Param::makeInt(1)).ok());
  ASSERT_TRUE(g.setParam(*out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
  ASSERT_TRUE(g.addLink({{*x, 0}, {*dense, 0}}).ok());
  ASSERT_TRUE(g.addLink({{*dense, 0}, {*out, 0}}).ok());
  ASSERT_TRUE(g.addLink({{*y, 0}, {*out, 1}}).ok());
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(g, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("the prediction has one score a sample"), std::string::npos)
      << m.message();
  EXPECT_NE(m.message().find("MeanSquaredError"), std::string::npos) << m.message();
}

// A BatchNormalization imported in training mode (torch's training export: three outputs) and
// switched to inference, as the hint advises, exports with Y alone: it kept the running
// statistics' outputs, which ONNX refuses outside training mode (a trial followed the hint and
// training failed).
TEST(Export, BatchNormalizationSwitchedToInferenceDropsItsStatistics) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(15);
  auto* g = m.mutable_graph();
  g->set_name("bn");
  auto typed = [](onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  typed(g->add_input(), "x", {2, 3, 4, 4});
  for (const char* w : {"scale", "bias", "mean", "var"}) {
    auto* t = g->add_initializer();
    t->set_name(w);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(3);
    for (int i = 0; i < 3; ++i) t->add_float_data(1.0f);
  }
  auto* n = g->add_node();
  n->set_op_type("BatchNormalization");
  n->set_name("bn");
  for (const char* in : {"x", "scale", "bias", "mean", "var"}) n->add_input(in);
  for (const char* out : {"y", "running_mean", "running_var"}) n->add_output(out);
  auto* mode = n->add_attribute();
  mode->set_name("training_mode");
  mode->set_type(onnx::AttributeProto::INT);
  mode->set_i(1);
  typed(g->add_output(), "y", {2, 3, 4, 4});
  auto imported = importOnnx(m, "bn.onnx");
  ASSERT_TRUE(imported.ok()) << imported.message();
  Graph& graph = *imported;
  NodeId bn = 0;
  for (const auto& [id, node] : graph.nodes())
    if (node.type == "BatchNormalization") bn = id;
  ASSERT_NE(bn, 0);
  ASSERT_TRUE(graph.setParam(bn, "training_mode", Param::makeInt(0)).ok());
  ExportOptions opt;
  opt.check = CheckLevel::Full;
  auto out = exportOnnx(graph, opt);
  ASSERT_TRUE(out.ok()) << out.message();
  for (const auto& node : out->graph().node())
    if (node.op_type() == "BatchNormalization") EXPECT_EQ(node.output_size(), 1);
}

TEST(Export, ExamplesExportCleanly) {
  for (const char* name : {"fashion_mnist_mlp.dwproj", "fashion_mnist_cnn.dwproj"}) {
    auto g = loadProject(example(name));
    ASSERT_TRUE(g.ok()) << g.message();
    EXPECT_TRUE(g->validate().empty());
    auto m = exportOnnx(*g);
    ASSERT_TRUE(m.ok()) << name << ": " << m.message();
    for (const auto& t : m->graph().initializer()) {
      EXPECT_TRUE(t.has_raw_data()) << t.name();
      EXPECT_EQ(static_cast<int64_t>(t.raw_data().size()), elementCount(t) * 4) << t.name();
    }
  }
  auto mlp = exportOnnx(*loadProject(example("fashion_mnist_mlp.dwproj")));
  std::vector<std::string> ops;
  for (const auto& n : mlp->graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Flatten", "Gemm", "Relu", "Gemm", "Relu", "Gemm"}));
  const auto& out = mlp->graph().output(0).type().tensor_type().shape();
  ASSERT_EQ(out.dim_size(), 2);
  EXPECT_EQ(out.dim(1).dim_value(), 10);
}

TEST(Export, PythonCheckerAcceptsExamples) {
  auto dir = test::tempDir();
  std::string files;
  for (const char* name : {"fashion_mnist_mlp", "fashion_mnist_cnn"}) {
    auto m = exportOnnx(*loadProject(example(std::string(name) + ".dwproj")));
    ASSERT_TRUE(m.ok());
    const std::string path = (dir / (std::string(name) + ".onnx")).string();
    ASSERT_TRUE(writeOnnxFile(*m, path).ok());
    files += " " + path;
  }
  std::string out;
  const int rc = test::runCommand(
      "/usr/bin/python3 -c \"import sys, onnx\n"
      "for f in sys.argv[1:]: onnx.checker.check_model(onnx.load(f), full_check=True)\n"
      "print('ok')\"" +
          files,
      &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST(Export, FillsAreDeterministicAndScaled) {
  FillSpec f;
  f.fill = "glorot_uniform";
  f.seed = 7;
  auto a = makeFilledTensor("w", onnx::TensorProto::FLOAT, {64, 32}, f);
  auto b = makeFilledTensor("w", onnx::TensorProto::FLOAT, {64, 32}, f);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->raw_data(), b->raw_data());
  const float limit = std::sqrt(6.0f / 96.0f);
  const auto* v = reinterpret_cast<const float*>(a->raw_data().data());
  float maxAbs = 0;
  double mean = 0;
  for (int i = 0; i < 64 * 32; ++i) {
    maxAbs = std::max(maxAbs, std::abs(v[i]));
    mean += v[i];
  }
  EXPECT_LE(maxAbs, limit);
  EXPECT_GT(maxAbs, 0.9f * limit);
  EXPECT_NEAR(mean / 2048, 0.0, 0.02);
  f.seed = 8;
  EXPECT_NE(makeFilledTensor("w", onnx::TensorProto::FLOAT, {64, 32}, f)->raw_data(),
            a->raw_data());
  // A shape past what a model's tensor holds is an error naming it, not a bad_alloc.
  auto huge = makeFilledTensor("w", onnx::TensorProto::FLOAT, {int64_t(1) << 31, 1 << 30}, f);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than a model's tensor can hold (2 GiB)"),
            std::string::npos)
      << huge.status().message();
}

// Compares two graphs field by field (what a round trip must keep).
void expectSameGraph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (const auto& [id, na] : a.nodes()) {
    const Node* nb = b.node(id);
    ASSERT_NE(nb, nullptr) << "node #" << id << " lost";
    EXPECT_EQ(na.type, nb->type);
    EXPECT_EQ(na.domain, nb->domain);
    EXPECT_EQ(na.name, nb->name) << a.describe(id);
    EXPECT_EQ(na.position, nb->position) << a.describe(id);
    EXPECT_EQ(na.ldaCoeff, nb->ldaCoeff) << a.describe(id);
    for (const char* key : {"status", "regularizer"})
      EXPECT_EQ(a.param(id, key).has_value() ? a.param(id, key)->toDisplay() : "",
                b.param(id, key).has_value() ? b.param(id, key)->toDisplay() : "");
  }
  auto la = a.links(), lb = b.links();
  std::sort(la.begin(), la.end());
  std::sort(lb.begin(), lb.end());
  EXPECT_EQ(la, lb);
}

TEST(RoundTrip, OnnxKeepsLayoutLdaCoeffAndStatus) {
  auto g = loadProject(example("fashion_mnist_cnn.dwproj"));
  ASSERT_TRUE(g.ok());
  NodeId conv = 0, weight = 0;
  for (const auto& [id, n] : g->nodes()) {
    if (n.name == "conv1") conv = id;
    if (n.name == "fc1.weight") weight = id;
  }
  ASSERT_TRUE(g->setLdaCoeff(conv, 0.25).ok());
  ASSERT_TRUE(g->setParam(weight, "status", Param::makeString("Frozen")).ok());
  ASSERT_TRUE(g->setParam(weight, "regularizer", Param::makeString("l2")).ok());
  ASSERT_TRUE(g->moveNode(conv, {123.5, -42}).ok());
  auto m = exportOnnx(*g);
  ASSERT_TRUE(m.ok()) << m.message();
  std::string bytes;
  ASSERT_TRUE(m->SerializeToString(&bytes));
  onnx::ModelProto reread;
  ASSERT_TRUE(reread.ParseFromString(bytes));
  auto back = importOnnx(reread);
  ASSERT_TRUE(back.ok()) << back.message();
  expectSameGraph(*g, *back);
  // And the re-export is the same model.
  auto again = exportOnnx(*back);
  ASSERT_TRUE(again.ok()) << again.message();
  ASSERT_EQ(again->graph().node_size(), m->graph().node_size());
  for (int i = 0; i < m->graph().node_size(); ++i)
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(m->graph().node(i),
                                                                   again->graph().node(i)));
  for (int i = 0; i < m->graph().initializer_size(); ++i)
    EXPECT_TRUE(sameTensor(m->graph().initializer(i), again->graph().initializer(i)));
}

// An inference export keeps the training nodes it leaves out (Output Train, metrics, the label
// input) in its metadata. Those fed by a Keras-style layer must come back linked to what the
// layer became in the file (its operators, under other ids): found once by a user whose
// Dense-layer project exported a file that deepwire's own `check` and `import` refused.
TEST(RoundTrip, TrainingNodesFedByALayerComeBackLinked) {
  auto g = loadProject(example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  NodeId train = 0;
  for (const auto& [id, n] : g->nodes())
    if (n.type == "Output Train") train = id;
  ASSERT_NE(train, 0u);
  const NodeId fc3 = g->inputLink(train, 0)->from.node;
  const NodeId dense = *g->addNode(kLayersDomain, "Dense");
  ASSERT_TRUE(g->setParam(dense, "units", Param::makeInt(10)).ok());
  ASSERT_TRUE(g->removeLink(*g->inputLink(train, 0)).ok());
  ASSERT_TRUE(g->addLink({{fc3, 0}, {dense, 0}}).ok());
  ASSERT_TRUE(g->addLink({{dense, 0}, {train, 0}}).ok());
  auto m = exportOnnx(*g);
  ASSERT_TRUE(m.ok()) << m.message();
  auto back = importOnnx(*m, "mlp.onnx");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_TRUE(back->validate().empty());
  NodeId restored = 0;
  for (const auto& [id, n] : back->nodes())
    if (n.type == "Output Train") restored = id;
  ASSERT_NE(restored, 0u);
  const auto in = back->inputLink(restored, 0);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(back->node(in->from.node)->type, "Gemm");     // the Dense layer's product
  EXPECT_TRUE(back->inputLink(restored, 1).has_value());  // the labels
}

TEST(RoundTrip, SharedOutputGetsIdentityThatImportFolds) {
  NodeId relu = 0;
  Graph g = tinyGraph(&relu);
  NodeId out2 = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.rename(out2, "y2").ok());
  ASSERT_TRUE(g.addLink({{relu, 0}, {out2, 0}}).ok());
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->graph().node_size(), 3);  // Relu + one Identity per Output
  auto back = importOnnx(*m);
  ASSERT_TRUE(back.ok()) << back.message();
  expectSameGraph(g, *back);
}

// PyTorch 2.x exports opset 18 by default. libonnx 1.12 stops at 17, so ReduceMean-18 (axes
// as input 1) comes from nodes/schema_facts.inc: it imports with both ports, passes the check,
// and exports back at opset 18.
TEST(RoundTrip, Opset18ReduceMeanWithAxesInput) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(18);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int d : {2, 3})
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  auto* axes = g->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(1);
  auto* n = g->add_node();
  n->set_op_type("ReduceMean");
  n->set_name("mean");
  n->add_input("x");
  n->add_input("axes");
  n->add_output("y");
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  EXPECT_TRUE(checkOnnxModel(m).ok()) << checkOnnxModel(m).message();
  auto imported = importOnnx(m);
  ASSERT_TRUE(imported.ok()) << imported.message();
  auto back = exportOnnx(*imported);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->opset_import(0).version(), 18);
  bool found = false;
  for (const auto& node : back->graph().node())
    if (node.op_type() == "ReduceMean") {
      found = true;
      EXPECT_EQ(node.input_size(), 2);
    }
  EXPECT_TRUE(found);
  // Still an attribute: opset 18 has none of that name, and the error says where it went.
  n->clear_input();
  n->add_input("x");
  auto* a = n->add_attribute();
  a->set_name("axes");
  a->set_type(onnx::AttributeProto::INTS);
  a->add_ints(1);
  Status st = checkOnnxModel(m);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("give it as input 1 (axes)"), std::string::npos) << st.message();
}

TEST(RoundTrip, ProjectJsonIsStable) {
  auto g = loadProject(example("fashion_mnist_cnn.dwproj"));
  ASSERT_TRUE(g.ok()) << g.message();
  const std::string text = projectToJsonText(*g);
  auto back = projectFromJsonText(text, "<memory>");
  ASSERT_TRUE(back.ok()) << back.message();
  expectSameGraph(*g, *back);
  EXPECT_EQ(projectToJsonText(*back), text);
}

TEST(RoundTrip, ProjectKeepsUnknownSections) {
  auto g = loadProject(example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(g.ok());
  ModelInfo info = g->info();
  info.sections["training"] = R"({"epochs":3,"optimizer":{"lr":0.001,"type":"adam"}})";
  g->setInfo(info);
  auto back = projectFromJsonText(projectToJsonText(*g), "<memory>");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->info().sections.at("training"), info.sections.at("training"));
}

TEST(RoundTrip, ProjectKeepsOddParams) {
  Graph g;
  NodeId clip = *g.addNode(kOnnxDomain, "LeakyRelu");
  ASSERT_TRUE(g.setParam(clip, "alpha", Param::makeFloat(0.1f)).ok());
  NodeId c = *g.addNode(kOnnxDomain, "Constant");
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_float_data(std::numeric_limits<float>::infinity());
  ASSERT_TRUE(
      g.setParam(c, "value", Param::makeProto(ParamType::Tensor, t.SerializeAsString())).ok());
  NodeId hard = *g.addNode(kOnnxDomain, "HardSigmoid");
  ASSERT_TRUE(g.setParam(hard, "alpha", Param::makeFloat(std::nan(""))).ok());
  auto back = projectFromJsonText(projectToJsonText(g), "<memory>");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->node(clip)->params.at("alpha").asFloat(), static_cast<double>(0.1f));
  EXPECT_EQ(back->node(c)->params.at("value").asString(), t.SerializeAsString());
  EXPECT_TRUE(std::isnan(back->node(hard)->params.at("alpha").asFloat()));
}

TEST(RoundTrip, SaveIsAtomicAndLoadLeavesSourceAlone) {
  auto dir = test::tempDir();
  const std::string path = (dir / "p.dwproj").string();
  auto g = loadProject(example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(saveProject(*g, path).ok());
  const auto before = readFile(path).value();
  const auto mtime = std::filesystem::last_write_time(path);
  ASSERT_TRUE(loadProject(path).ok());
  EXPECT_EQ(readFile(path).value(), before);
  EXPECT_EQ(std::filesystem::last_write_time(path), mtime);
  // No temporary files are left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) (void)e, ++files;
  EXPECT_EQ(files, 1);
  // A save into a missing folder fails and says so.
  EXPECT_FALSE(saveProject(*g, (dir / "missing" / "p.dwproj").string()).ok());
}

TEST(Import, AutoLayoutSpreadsNodes) {
  NodeId relu = 0;
  Graph g = tinyGraph(&relu);
  auto m = exportOnnx(g);
  m->clear_metadata_props();
  auto back = importOnnx(*m);
  ASSERT_TRUE(back.ok());
  std::set<std::pair<double, double>> positions;
  for (const auto& [id, n] : back->nodes()) positions.insert({n.position.x, n.position.y});
  EXPECT_EQ(positions.size(), back->nodes().size());
  // Inputs sit left of the ops that read them.
  double inputX = 0, reluX = 0;
  for (const auto& [id, n] : back->nodes()) {
    if (n.type == "Input") inputX = n.position.x;
    if (n.type == "Relu") reluX = n.position.x;
  }
  EXPECT_LT(inputX, reluX);
}

// A deep chain (mobilenet_v2 is 150 ops deep) wraps into bands that read left to right, top to
// bottom, and the Constants that feed its Clips sit beside them instead of in one tall column
// that pulled the chain down the page.
TEST(Import, AutoLayoutWrapsDeepChainsIntoBands) {
  Graph g;
  auto in = g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(in.ok());
  ASSERT_TRUE(g.setParam(*in, "type", Param::makeString("float[N,4]")).ok());
  std::vector<NodeId> chain, constants;
  PortRef prev{*in, 0};
  for (int i = 0; i < 90; ++i) {
    auto clip = g.addNode(kOnnxDomain, "Clip");
    auto lo = g.addNode(kOnnxDomain, "Constant");
    ASSERT_TRUE(clip.ok() && lo.ok());
    ASSERT_TRUE(g.addLink({prev, {*clip, 0}}).ok());
    ASSERT_TRUE(g.addLink({{*lo, 0}, {*clip, 1}}).ok());
    chain.push_back(*clip);
    constants.push_back(*lo);
    prev = {*clip, 0};
  }
  auto out = g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(g.addLink({prev, {*out, 0}}).ok());
  autoLayout(g);
  auto at = [&](NodeId id) { return g.node(id)->position; };
  double left = 1e18, right = -1e18, top = 1e18, bottom = -1e18;
  std::set<std::pair<double, double>> positions;
  for (const auto& [id, n] : g.nodes()) {
    left = std::min(left, n.position.x), right = std::max(right, n.position.x);
    top = std::min(top, n.position.y), bottom = std::max(bottom, n.position.y);
    positions.insert({n.position.x, n.position.y});
  }
  EXPECT_EQ(positions.size(), g.nodes().size());
  // Several bands, and the whole roughly screen-shaped (in one row it was 180 to 1).
  const double aspect = (right - left) / (bottom - top);
  EXPECT_GT(aspect, 0.5);
  EXPECT_LT(aspect, 4.0);
  // Reading order: each Clip right of the one before it in the same band, or in a band below.
  int bands = 1;
  for (size_t i = 1; i < chain.size(); ++i) {
    const Position a = at(chain[i - 1]), b = at(chain[i]);
    if (b.x > a.x) {
      EXPECT_NEAR(b.y, a.y, 1e-9) << i;  // a chain runs straight
    } else {
      EXPECT_GT(b.y, a.y) << i;
      ++bands;
    }
  }
  EXPECT_GE(bands, 3);
  // Each Constant just left of its Clip, near its row.
  for (size_t i = 0; i < chain.size(); ++i) {
    const Position c = at(constants[i]), u = at(chain[i]);
    EXPECT_LT(c.x, u.x) << i;
    EXPECT_GT(c.x, u.x - 600) << i;
    EXPECT_LT(std::abs(c.y - u.y), 200) << i;
  }
}

TEST(Import, SubgraphsStayIntact) {
  const std::string path = "/usr/share/libonnx-testdata/data/node/test_if_seq/model.onnx";
  auto m = readOnnxFile(path);
  ASSERT_TRUE(m.ok()) << m.message();
  auto g = importOnnx(*m, path);
  ASSERT_TRUE(g.ok()) << g.message();
  auto again = exportOnnx(*g);
  ASSERT_TRUE(again.ok()) << again.message();
  const onnx::NodeProto* orig = nullptr;
  for (const auto& n : m->graph().node())
    if (n.op_type() == "If") orig = &n;
  ASSERT_NE(orig, nullptr);
  const onnx::NodeProto* copy = nullptr;
  for (const auto& n : again->graph().node())
    if (n.op_type() == "If") copy = &n;
  ASSERT_NE(copy, nullptr);
  ASSERT_EQ(orig->attribute_size(), copy->attribute_size());
  for (const auto& a : orig->attribute()) {
    bool found = false;
    for (const auto& b : copy->attribute())
      if (a.name() == b.name())
        found = google::protobuf::util::MessageDifferencer::Equals(a.g(), b.g());
    EXPECT_TRUE(found) << a.name();
  }
}

}  // namespace
}  // namespace dw
