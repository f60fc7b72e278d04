// Plan-time constant folding (engine/constant_folding.h): what folds, what must not, and that a
// folded session computes what the unfolded one does.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <set>

#include "engine/constant_folding.h"
#include "engine/session.h"
#include "nodes/schema_facts.h"
#include "onnx_builder.h"

namespace dw::engine::test {
namespace {

std::set<std::string> opsOf(const onnx::ModelProto& m) {
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert(n.op_type());
  return ops;
}

// The inferred graph a session would hand foldConstants.
onnx::GraphProto inferred(const onnx::ModelProto& m) {
  onnx::ModelProto copy = m;
  EXPECT_TRUE(inferValidatedShapes(copy, false, false, 0, false).ok());
  return copy.graph();
}

void addConstant(onnx::GraphProto* g, const std::string& name, const Tensor& value) {
  auto* n = addNode(g, "Constant", {}, {name});
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  tensorToProto(value, a->mutable_t());
}

// x -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) -> Relu: how exporters write
// x.view(x.size(0), -1).
onnx::ModelProto flattenByShape(const std::string& batch) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  auto* x = g->add_input();
  addValue(x, "x", {2, 3, 4});
  if (!batch.empty()) {
    auto* d = x->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
    d->clear_dim_value();
    d->set_dim_param(batch);
  }
  addNode(g, "Shape", {"x"}, {"shape"});
  addConstant(g, "zero", Tensor::fromVector<int64_t>({0}, {}));
  addNode(g, "Gather", {"shape", "zero"}, {"n"});
  addInit(g, "axes", Tensor::fromVector<int64_t>({0}, {1}));
  addNode(g, "Unsqueeze", {"n", "axes"}, {"n1"});
  addConstant(g, "rest", Tensor::fromVector<int64_t>({-1}, {1}));
  attrI(addNode(g, "Concat", {"n1", "rest"}, {"target"}), "axis", 0);
  addNode(g, "Reshape", {"x", "target"}, {"flat"});
  addNode(g, "Relu", {"flat"}, {"y"});
  g->add_output()->set_name("y");
  return m;
}

Tensor runModel(const onnx::ModelProto& m, const std::map<std::string, Tensor>& feeds, bool fold) {
  SessionOptions o;
  o.foldConstants = fold;
  auto s = InferenceSession::create(m, o);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s) return {};
  auto out = (*s)->run(feeds);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out ? out->begin()->second : Tensor();
}

TEST(ConstantFolding, ShapeArithmeticOfAStaticInputFolds) {
  const auto m = flattenByShape("");
  const auto folded = foldConstants(m, inferred(m));
  ASSERT_TRUE(folded.has_value());
  EXPECT_EQ(opsOf(*folded), (std::set<std::string>{"Reshape", "Relu"}));
  // Shape inference now knows the Reshape's output.
  onnx::ModelProto again = *folded;
  ASSERT_TRUE(inferValidatedShapes(again, false, false, 0, false).ok());
  bool seen = false;
  for (const auto& v : again.graph().value_info())
    if (v.name() == "flat") {
      seen = true;
      ASSERT_EQ(v.type().tensor_type().shape().dim_size(), 2);
      EXPECT_EQ(v.type().tensor_type().shape().dim(1).dim_value(), 12);
    }
  EXPECT_TRUE(seen);
  const Tensor x = randomTensor({2, 3, 4}, 1);
  const Tensor a = runModel(m, {{"x", x}}, true), b = runModel(m, {{"x", x}}, false);
  EXPECT_EQ(a.shape(), (Shape{2, 12}));
  EXPECT_EQ(maxDiff(a, b), 0.0f);
}

TEST(ConstantFolding, ADynamicDimensionIsMeasuredEachRun) {
  const auto m = flattenByShape("N");
  const auto folded = foldConstants(m, inferred(m));
  ASSERT_TRUE(folded.has_value());  // the Constant nodes still fold
  EXPECT_TRUE(opsOf(*folded).count("Shape"));
  EXPECT_FALSE(opsOf(*folded).count("Constant"));
  for (int64_t n : {2, 5}) {
    const Tensor y = runModel(m, {{"x", randomTensor({n, 3, 4}, 2)}}, true);
    EXPECT_EQ(y.shape(), (Shape{n, 12}));
  }
}

TEST(ConstantFolding, AnInitializerAFeedCanReplaceStaysLive) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {3});
  addValue(g->add_input(), "k", {3});
  addInit(g, "k", Tensor::fromVector<float>({1, 2, 3}, {3}));
  addInit(g, "two", Tensor::fromVector<float>({2}, {1}));
  addNode(g, "Mul", {"k", "two"}, {"k2"});
  addNode(g, "Add", {"x", "k2"}, {"y"});
  g->add_output()->set_name("y");
  EXPECT_FALSE(foldConstants(m, inferred(m)).has_value());
  const Tensor y = runModel(m,
                            {{"x", Tensor::fromVector<float>({0, 0, 0}, {3})},
                             {"k", Tensor::fromVector<float>({5, 5, 5}, {3})}},
                            true);
  EXPECT_EQ(y.data<float>()[0], 10.0f);
}

TEST(ConstantFolding, AShapeOnlyTheFileDeclaresIsNotTrusted) {
  // value_info says r is [5, 5]; the run makes it [2, 3]. Folding Shape(r) from the declaration
  // would give the wrong answer.
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 3});
  addValue(g->add_value_info(), "r", {5, 5});
  addNode(g, "Relu", {"x"}, {"r"});
  addNode(g, "Shape", {"r"}, {"s"});
  auto* cast = addNode(g, "Cast", {"s"}, {"y"});
  attrI(cast, "to", onnx::TensorProto::FLOAT);
  g->add_output()->set_name("y");
  onnx::ModelProto declaredOnly = m;  // what a session plans when inference gives up
  const auto folded = foldConstants(m, declaredOnly.graph());
  EXPECT_FALSE(folded.has_value());
  const Tensor y = runModel(m, {{"x", randomTensor({2, 3}, 3)}}, true);
  ASSERT_EQ(y.size(), 2);
  EXPECT_EQ(y.data<float>()[0], 2.0f);
  EXPECT_EQ(y.data<float>()[1], 3.0f);
}

TEST(ConstantFolding, GraphOutputsAndShapeStartEndAreKept) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 3, 4});
  addNode(g, "Shape", {"x"}, {"s"});
  auto* tail = addNode(g, "Shape", {"x"}, {"t"});
  attrI(tail, "start", -2);
  addNode(g, "ReduceProd", {"t"}, {"p"});
  auto* cast = addNode(g, "Cast", {"p"}, {"pf"});
  attrI(cast, "to", onnx::TensorProto::FLOAT);
  addNode(g, "Mul", {"x", "pf"}, {"y"});
  g->add_output()->set_name("s");
  g->add_output()->set_name("y");
  const auto folded = foldConstants(m, inferred(m));
  ASSERT_TRUE(folded.has_value());
  // Shape -> s is an output and stays; the tail's product (12) folds into the Mul's operand.
  EXPECT_EQ(opsOf(*folded), (std::set<std::string>{"Shape", "Mul"}));
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const Tensor x = randomTensor({2, 3, 4}, 4);
  auto out = (*s)->run({{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->at("s").data<int64_t>()[2], 4);
  EXPECT_FLOAT_EQ(out->at("y").data<float>()[5], x.data<float>()[5] * 12);
}

TEST(ConstantFolding, LargeConstantNodesBecomeInitializers) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {5000});
  const Tensor c = randomTensor({5000}, 5);
  addConstant(g, "c", c);
  addNode(g, "Add", {"x", "c"}, {"y"});
  g->add_output()->set_name("y");
  const auto folded = foldConstants(m, inferred(m));
  ASSERT_TRUE(folded.has_value());
  EXPECT_EQ(opsOf(*folded), (std::set<std::string>{"Add"}));
  const Tensor x = randomTensor({5000}, 6);
  const Tensor y = runModel(m, {{"x", x}}, true);
  EXPECT_FLOAT_EQ(y.data<float>()[4999], x.data<float>()[4999] + c.data<float>()[4999]);
}

TEST(ConstantFolding, ANodeTheKernelRefusesStaysAndReportsAtRunTime) {
  // Gather index 7 of 3 values: folding fails quietly, the others of its wave still fold, and
  // the run names the node as it would without folding.
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {1});
  addInit(g, "v", Tensor::fromVector<int64_t>({1, 2, 3}, {3}));
  addInit(g, "bad", Tensor::fromVector<int64_t>({7}, {1}));
  addInit(g, "good", Tensor::fromVector<int64_t>({1}, {1}));
  addNode(g, "Gather", {"v", "bad"}, {"gb"});
  addNode(g, "Gather", {"v", "good"}, {"gg"});
  addNode(g, "Add", {"gb", "gg"}, {"sum"});
  auto* cast = addNode(g, "Cast", {"sum"}, {"sf"});
  attrI(cast, "to", onnx::TensorProto::FLOAT);
  addNode(g, "Add", {"x", "sf"}, {"y"});
  g->add_output()->set_name("y");
  const auto folded = foldConstants(m, inferred(m));
  ASSERT_TRUE(folded.has_value());
  int gathers = 0;
  for (const auto& n : folded->graph().node()) gathers += n.op_type() == "Gather";
  EXPECT_EQ(gathers, 1);
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto out = (*s)->run({{"x", Tensor::fromVector<float>({0}, {1})}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Gather_gb"), std::string::npos) << out.status().message();
}

}  // namespace
}  // namespace dw::engine::test
