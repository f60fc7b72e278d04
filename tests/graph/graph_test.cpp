// The graph model's editing API: every edit is validated and errors name the node.
#include <gtest/gtest.h>

#include "graphs/graph.h"
#include "graphs/onnx_export.h"
#include "nodes/type_syntax.h"
#include "test_util.h"

namespace dw {
namespace {

using test::tinyGraph;

TEST(Graph, AddNodeGivesStableIds) {
  Graph g;
  auto a = g.addNode(kOnnxDomain, "Relu");
  auto b = g.addNode(kOnnxDomain, "Relu");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  ASSERT_TRUE(g.removeNode(*a).ok());
  auto c = g.addNode(kOnnxDomain, "Relu");
  EXPECT_GT(*c, *b);  // ids are never reused
  EXPECT_EQ(g.node(*b)->type, "Relu");
}

TEST(Graph, UnknownTypeSuggests) {
  Graph g;
  auto r = g.addNode(kOnnxDomain, "BatchNorm");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("BatchNormalization"), std::string::npos) << r.message();
}

// An op newer than the graph's opset (Mish: 18, Gelu: 20) raises it where nothing already in
// the graph would change meaning, and is refused, naming what would, where something would.
TEST(Graph, NewerOpRaisesTheOpsetWhenNothingChanges) {
  Graph g;
  ASSERT_EQ(g.opset(kOnnxDomain), 17);
  NodeId in = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(in, "type", Param::makeString("float[2,4]")).ok());
  NodeId mean = *g.addNode(kOnnxDomain, "ReduceMean");  // all axes: the same at 18
  ASSERT_TRUE(g.addLink({{in, 0}, {mean, 0}}).ok());
  auto mish = g.addNode(kOnnxDomain, "Mish");
  ASSERT_TRUE(mish.ok()) << mish.message();
  EXPECT_EQ(g.opset(kOnnxDomain), 18);
  EXPECT_EQ(g.spec(*mish)->version, 18);
  ASSERT_TRUE(g.addLink({{in, 0}, {*mish, 0}}).ok());
  auto gelu = g.addNode(kOnnxDomain, "Gelu");
  ASSERT_TRUE(gelu.ok()) << gelu.message();
  EXPECT_EQ(g.opset(kOnnxDomain), 20);
  // ReduceMean is now version 18, with axes an input.
  EXPECT_EQ(g.spec(mean)->version, 18);
  EXPECT_EQ(g.spec(mean)->param("axes"), nullptr);

  Graph h;
  NodeId r = *h.addNode(kOnnxDomain, "ReduceMean");
  ASSERT_TRUE(h.setParam(r, "axes", Param::makeInts({1})).ok());
  ASSERT_TRUE(h.rename(r, "m").ok());
  NodeId split = *h.addNode(kOnnxDomain, "Split");
  auto refused = h.addNode(kOnnxDomain, "Mish");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("opset 18"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("ReduceMean 'm'"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("'axes'"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("became an input"), std::string::npos) << refused.message();
  EXPECT_EQ(h.opset(kOnnxDomain), 17);
  EXPECT_EQ(h.nodes().size(), 2u);
  (void)split;
  // A node type that is in no opset at all is still unknown.
  EXPECT_FALSE(h.addNode(kOnnxDomain, "Mishh").ok());
}

// What an op libonnx 1.12 does not know feeds gets its type, as after an older op: an Output
// after Mish had none, and the graph could not be exported until the user typed it in.
TEST(Graph, NewerOpsInferTheirOutputs) {
  Graph g;
  NodeId a = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(a, "type", Param::makeString("float[2,4]")).ok());
  NodeId mish = *g.addNode(kOnnxDomain, "Mish");
  NodeId gelu = *g.addNode(kOnnxDomain, "Gelu");
  ASSERT_TRUE(g.addLink({{a, 0}, {mish, 0}}).ok());
  ASSERT_TRUE(g.addLink({{mish, 0}, {gelu, 0}}).ok());
  NodeId y = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.addLink({{gelu, 0}, {y, 0}}).ok());
  NodeId i = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(i, "type", Param::makeString("int32[3,1]")).ok());
  NodeId j = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(j, "type", Param::makeString("int32[5]")).ok());
  NodeId band = *g.addNode(kOnnxDomain, "BitwiseAnd");
  ASSERT_TRUE(g.addLink({{i, 0}, {band, 0}}).ok());
  ASSERT_TRUE(g.addLink({{j, 0}, {band, 1}}).ok());
  NodeId z = *g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.addLink({{band, 0}, {z, 0}}).ok());
  EXPECT_EQ(g.opset(kOnnxDomain), 20);
  auto m = exportOnnx(g);
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->graph().output_size(), 2);
  EXPECT_EQ(formatType(m->graph().output(0).type()), "float[2,4]");
  EXPECT_EQ(formatType(m->graph().output(1).type()), "int32[3,5]");
}

// String parameters whose choices a newer version changed offer that version's: GridSample's
// modes were renamed at 20, Pad gained wrap at 19, Gelu (20) takes none or tanh.
TEST(Graph, NewerVersionsHaveTheirOwnChoices) {
  auto at = [](int opset) {
    Graph g;
    ModelInfo info = g.info();
    info.opsets[kOnnxDomain] = opset;
    g.setInfo(info);
    return g;
  };
  Graph g17 = at(17);
  NodeId gs = *g17.addNode(kOnnxDomain, "GridSample");
  EXPECT_TRUE(g17.setParam(gs, "mode", Param::makeString("bilinear")).ok());
  EXPECT_FALSE(g17.setParam(gs, "mode", Param::makeString("linear")).ok());
  Graph g20 = at(20);
  gs = *g20.addNode(kOnnxDomain, "GridSample");
  EXPECT_TRUE(g20.setParam(gs, "mode", Param::makeString("linear")).ok());
  auto refused = g20.setParam(gs, "mode", Param::makeString("bilinear"));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("linear, nearest"), std::string::npos) << refused.message();
  NodeId pad = *g20.addNode(kOnnxDomain, "Pad");
  EXPECT_TRUE(g20.setParam(pad, "mode", Param::makeString("wrap")).ok());
  NodeId gelu = *g20.addNode(kOnnxDomain, "Gelu");
  EXPECT_EQ(g20.spec(gelu)->param("approximate")->allowedValues,
            (std::vector<std::string>{"none", "tanh"}));
  NodeId pad17 = *g17.addNode(kOnnxDomain, "Pad");
  EXPECT_FALSE(g17.setParam(pad17, "mode", Param::makeString("wrap")).ok());
  // A GridSample set to bilinear at 17 blocks the raise to 20, which renamed that mode.
  ASSERT_TRUE(g17.setParam(g17.nodes().begin()->first, "mode", Param::makeString("bilinear")).ok());
  const auto conflicts = g17.opsetRaiseConflicts(kOnnxDomain, 20);
  ASSERT_FALSE(conflicts.empty());
  EXPECT_NE(conflicts[0].find("\"bilinear\", not one of GridSample's choices at opset 20"),
            std::string::npos)
      << conflicts[0];
}

TEST(Graph, ParamsAreValidated) {
  Graph g;
  NodeId gemm = *g.addNode(kOnnxDomain, "Gemm");
  EXPECT_TRUE(g.setParam(gemm, "alpha", Param::makeFloat(2)).ok());
  EXPECT_TRUE(g.setParam(gemm, "alpha", Param::makeInt(3)).ok());  // widened to float
  EXPECT_EQ(g.node(gemm)->params.at("alpha").type, ParamType::Float);
  Status unknown = g.setParam(gemm, "alpah", Param::makeFloat(1));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("Gemm (#1)"), std::string::npos) << unknown.message();
  EXPECT_NE(unknown.message().find("alpha"), std::string::npos);
  Status wrongType = g.setParam(gemm, "transB", Param::makeString("yes"));
  ASSERT_FALSE(wrongType.ok());
  EXPECT_NE(wrongType.message().find("takes a bool"), std::string::npos) << wrongType.message();
  NodeId conv = *g.addNode(kOnnxDomain, "Conv");
  Status badEnum = g.setParam(conv, "auto_pad", Param::makeString("SAME"));
  ASSERT_FALSE(badEnum.ok());
  EXPECT_NE(badEnum.message().find("SAME_UPPER"), std::string::npos) << badEnum.message();
  ASSERT_TRUE(g.resetParam(gemm, "alpha").ok());
  EXPECT_FLOAT_EQ(g.param(gemm, "alpha")->asFloat(), 1.0);
}

TEST(Graph, LinksAreValidated) {
  NodeId relu = 0;
  Graph g = tinyGraph(&relu);
  NodeId relu2 = *g.addNode(kOnnxDomain, "Relu");
  ASSERT_TRUE(g.addLink({{relu, 0}, {relu2, 0}}).ok());
  // Cycle.
  Status cycle = g.addLink({{relu2, 0}, {relu, 0}});
  ASSERT_FALSE(cycle.ok());
  // The input is taken already, so that is reported first; free it and the cycle shows.
  auto feed = g.inputLink(relu, 0);
  ASSERT_TRUE(g.removeLink(*feed).ok());
  cycle = g.addLink({{relu2, 0}, {relu, 0}});
  ASSERT_FALSE(cycle.ok());
  EXPECT_NE(cycle.message().find("cycle"), std::string::npos) << cycle.message();
  EXPECT_NE(cycle.message().find("Relu (#"), std::string::npos);
  // Port out of range.
  Status port = g.addLink({{relu2, 3}, {relu, 0}});
  EXPECT_NE(port.message().find("no output port 3"), std::string::npos) << port.message();
  // Incompatible types: an int64 input into Sigmoid (float types only).
  NodeId ints = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.setParam(ints, "type", Param::makeString("int64[3]")).ok());
  NodeId relu3 = *g.addNode(kOnnxDomain, "Sigmoid");
  Status types = g.addLink({{ints, 0}, {relu3, 0}});
  ASSERT_FALSE(types.ok());
  EXPECT_NE(types.message().find("nothing in common"), std::string::npos) << types.message();
}

TEST(Graph, ValidateReportsMissingInputsAndNames) {
  Graph g;
  NodeId gemm = *g.addNode(kOnnxDomain, "Gemm");
  ASSERT_TRUE(g.rename(gemm, "fc").ok());
  auto problems = g.validate();
  ASSERT_EQ(problems.size(), 2u);  // A and B are required; C is optional
  EXPECT_EQ(problems[0].node, gemm);
  EXPECT_NE(problems[0].message.find("Gemm 'fc' (#1)"), std::string::npos);
  EXPECT_NE(problems[0].message.find("required input 'A'"), std::string::npos);
  NodeId concat = *g.addNode(kOnnxDomain, "Concat");
  problems = g.validate();
  bool required = false;
  for (const auto& p : problems)
    if (p.node == concat && p.message.find("required parameter 'axis'") != std::string::npos)
      required = true;
  EXPECT_TRUE(required);
}

TEST(Graph, DuplicateTensorNamesAreProblems) {
  NodeId relu = 0;
  Graph g = tinyGraph(&relu);
  ASSERT_TRUE(g.setSpecifiedOutputsName(relu, {"x"}).ok());  // clashes with the input
  auto problems = g.validate();
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("tensor name 'x'"), std::string::npos) << problems[0].message;
  Status tooMany = g.setSpecifiedOutputsName(relu, {"a", "b"});
  EXPECT_FALSE(tooMany.ok());
}

TEST(Graph, VariadicInputsGrow) {
  Graph g;
  NodeId concat = *g.addNode(kOnnxDomain, "Concat");
  EXPECT_EQ(g.inputPortCount(concat), 1);
  NodeId a = *g.addNode(kGraphDomain, "Input");
  NodeId b = *g.addNode(kGraphDomain, "Input");
  ASSERT_TRUE(g.addLink({{a, 0}, {concat, 0}}).ok());
  EXPECT_EQ(g.inputPortCount(concat), 2);
  ASSERT_TRUE(g.addLink({{b, 0}, {concat, 1}}).ok());
  EXPECT_EQ(g.inputPortCount(concat), 3);
}

TEST(Graph, GraphLinksCarryModelMembership) {
  Graph g;
  NodeId a = *g.addNode(kOnnxDomain, "Relu");
  NodeId b = *g.addNode(kOnnxDomain, "Relu");
  NodeId c = *g.addNode(kOnnxDomain, "Relu");
  ASSERT_TRUE(g.setModel(a, "variant").ok());
  ASSERT_TRUE(g.addLink({{a, kGraphPort}, {b, kGraphPort}}).ok());
  EXPECT_EQ(g.modelOf(b), "variant");
  EXPECT_EQ(g.modelOf(c), "");
  EXPECT_FALSE(g.addLink({{b, kGraphPort}, {a, kGraphPort}}).ok());  // cycle
  EXPECT_FALSE(g.addLink({{a, kGraphPort}, {c, 0}}).ok());           // graph to tensor port
}

TEST(Graph, ObserversHearEdits) {
  struct Recorder : GraphObserver {
    int added = 0, removed = 0, changed = 0, links = 0;
    void nodeAdded(NodeId) override { ++added; }
    void nodeRemoved(NodeId) override { ++removed; }
    void nodeChanged(NodeId) override { ++changed; }
    void linkAdded(const Link&) override { ++links; }
    void linkRemoved(const Link&) override { --links; }
  } rec;
  Graph g;
  g.addObserver(&rec);
  NodeId a = *g.addNode(kOnnxDomain, "Relu");
  NodeId b = *g.addNode(kOnnxDomain, "Relu");
  ASSERT_TRUE(g.addLink({{a, 0}, {b, 0}}).ok());
  ASSERT_TRUE(g.rename(a, "r").ok());
  ASSERT_TRUE(g.removeNode(a).ok());
  EXPECT_EQ(rec.added, 2);
  EXPECT_EQ(rec.removed, 1);
  EXPECT_EQ(rec.changed, 1);
  EXPECT_EQ(rec.links, 0);

  // A copy is not watched: its edits are not the original's. An assignment keeps the watchers
  // of the graph assigned to.
  Graph copy = g;
  ASSERT_TRUE(copy.rename(b, "copy").ok());
  (void)*copy.addNode(kOnnxDomain, "Relu");
  EXPECT_EQ(rec.added, 2);
  EXPECT_EQ(rec.changed, 1);
  g = copy;
  ASSERT_TRUE(g.rename(b, "again").ok());
  EXPECT_EQ(rec.changed, 2);
}

TEST(Graph, LdaCoeffMustBeFinite) {
  Graph g;
  NodeId a = *g.addNode(kOnnxDomain, "Relu");
  EXPECT_TRUE(g.setLdaCoeff(a, 0.5).ok());
  EXPECT_DOUBLE_EQ(g.node(a)->ldaCoeff, 0.5);
  EXPECT_FALSE(g.setLdaCoeff(a, std::numeric_limits<double>::infinity()).ok());
}

// ONNX allows any string as a dimension's name; the project's type text quotes those beyond its
// bare names, so that import -> project -> export keeps them (a comma split one dimension in
// two, and torch's "Squeezeonnx::Slice_10_dim_0" made a project that would not load).
TEST(TypeSyntax, AnyDimensionNameSurvivesTheText) {
  for (const std::string name : {"N", "batch", "a,b", "batch size", "Squeezeonnx::Slice_10_dim_0",
                                 "3d", "-x", "\xc3\xbc", "q\"u\\o", "x]"}) {
    onnx::TypeProto t;
    auto* tt = t.mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param(name);
    tt->mutable_shape()->add_dim()->set_dim_value(3);
    const std::string text = formatType(t);
    auto back = parseType(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.message();
    ASSERT_EQ(back->tensor_type().shape().dim_size(), 2) << text;
    EXPECT_EQ(back->tensor_type().shape().dim(0).dim_param(), name) << text;
    EXPECT_EQ(back->tensor_type().shape().dim(1).dim_value(), 3) << text;
  }
  EXPECT_EQ(parseType("float[N,3]")->tensor_type().shape().dim(0).dim_param(), "N");
  auto negative = parseType("float[-3,4,8,8]");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.message().find("dimension -3 is negative"), std::string::npos)
      << negative.message();
  EXPECT_FALSE(parseType("float[\"open,3]").ok());
  EXPECT_FALSE(parseType("float[\"\",3]").ok());
}
// A pasted layer left unwired: the problem says nothing reads it, so deleting it is a fix too.
TEST(Graph, AnUnwiredNodeSaysNothingReadsIt) {
  Graph g;
  auto dense = g.addNode(kLayersDomain, "Dense");
  ASSERT_TRUE(dense.ok());
  auto problems = g.validate();
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("nothing reads this node either: wire it in or delete it"),
            std::string::npos)
      << problems[0].message;
  auto out = g.addNode(kGraphDomain, "Output");
  ASSERT_TRUE(g.addLink({{*dense, 0}, {*out, 0}}).ok());
  for (const auto& p : g.validate())
    EXPECT_EQ(p.message.find("nothing reads"), std::string::npos) << p.message;
}
}  // namespace
}  // namespace dw
