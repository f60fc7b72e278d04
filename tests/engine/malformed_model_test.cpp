// Models whose nodes disagree with their schemas (issue 19): each is refused when the session is
// created, with the node, what it has and what the op takes, before shape inference or a
// kernel could trust it.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;
using namespace dw::engine::test;

namespace {

using N = onnx::NodeProto*;

// A one-node model over float inputs x0..x{inputs-1} of shape [1, 2, 4, 4].
std::string createError(const std::string& op, std::vector<std::string> in, int outputs,
                        const std::function<void(N)>& attrs = nullptr) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  for (const auto& name : in)
    if (!name.empty()) addValue(g->add_input(), name, {1, 2, 4, 4});
  std::vector<std::string> out;
  for (int i = 0; i < outputs; ++i) out.push_back("y" + std::to_string(i));
  N n = addNode(g, op, in, out);
  n->set_name("bad");
  if (attrs) attrs(n);
  for (const auto& o : out) addValue(g->add_output(), o, {});
  auto s = InferenceSession::create(m);
  return s.ok() ? std::string() : s.message();
}

TEST(MalformedModel, TooFewInputs) {
  const std::string e = createError("Add", {"x0"}, 1);
  EXPECT_NE(e.find("node 'bad' (Add) has 1 input(s); Add (opset 17) takes 2: A, B"),
            std::string::npos)
      << e;
  EXPECT_NE(createError("Relu", {}, 1).find("has 0 input(s)"), std::string::npos);
}

TEST(MalformedModel, TooManyInputs) {
  const std::string e = createError("Conv", {"x0", "x1", "x2", "x3"}, 1);
  EXPECT_NE(e.find("has 4 input(s); Conv (opset 17) takes 2 to 3: X, W, B?"), std::string::npos)
      << e;
}

TEST(MalformedModel, RequiredInputWithoutName) {
  const std::string e = createError("Gemm", {"", "x1"}, 1);
  EXPECT_NE(e.find("input 0 (A) is required but has no name"), std::string::npos) << e;
}

TEST(MalformedModel, TooManyOutputs) {
  const std::string e = createError("Relu", {"x0"}, 2);
  EXPECT_NE(e.find("has 2 output(s); Relu (opset 17) has 1: Y"), std::string::npos) << e;
}

TEST(MalformedModel, ZeroStrideAndKernel) {
  std::string e = createError("Conv", {"x0", "x1"}, 1, [](N n) { attrInts(n, "strides", {0, 1}); });
  EXPECT_NE(e.find("attribute strides has 0; its values must be at least 1"), std::string::npos)
      << e;
  e = createError("MaxPool", {"x0"}, 1, [](N n) { attrInts(n, "kernel_shape", {0, 2}); });
  EXPECT_NE(e.find("attribute kernel_shape has 0"), std::string::npos) << e;
}

TEST(MalformedModel, OmittedOptionalInputsAreFine) {
  EXPECT_EQ(createError("Clip", {"x0", "", ""}, 1), "");
  EXPECT_EQ(createError("Conv", {"x0", "x1", ""}, 1), "");
}

}  // namespace

namespace {

// A tensor that declares more than it holds is refused before anything is allocated (a file
// of a few bytes used to cost gigabytes first).
TEST(MalformedModel, TensorSizesAreCheckedBeforeAllocating) {
  onnx::TensorProto p;
  p.set_name("big");
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.add_dims(1000000000);
  for (int i = 0; i < 3; ++i) p.add_float_data(1.f);
  auto t = tensorFromProto(p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("tensor 'big' has 3 values for shape [1000000000]"), std::string::npos)
      << t.message();
  p.set_raw_data(std::string(12, '\0'));
  t = tensorFromProto(p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("raw_data has 12 bytes, expected 4000000000"), std::string::npos)
      << t.message();
  p.add_dims(int64_t(1) << 31);
  p.add_dims(int64_t(1) << 31);
  t = tensorFromProto(p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("more elements than any memory holds"), std::string::npos)
      << t.message();
}

}  // namespace

namespace {

TEST(MalformedModel, AttributesAgainstTheSchema) {
  std::string e = createError("Relu", {"x0"}, 1, [](N n) { attrI(n, "alpha", 1); });
  EXPECT_NE(e.find("Relu (opset 17) has no attribute 'alpha' (its attributes: none)"),
            std::string::npos)
      << e;
  e = createError("Cast", {"x0"}, 1);
  EXPECT_NE(e.find("the required attribute 'to' is missing"), std::string::npos) << e;
  e = createError("Softmax", {"x0"}, 1, [](N n) { attrF(n, "axis", 1.f); });
  EXPECT_NE(e.find("attribute 'axis' has the wrong type (FLOAT, expected INT)"), std::string::npos)
      << e;
}

TEST(MalformedModel, AxisOutsideTheDeclaredRank) {
  const std::string e = createError("Softmax", {"x0"}, 1, [](N n) { attrI(n, "axis", -5); });
  EXPECT_NE(e.find("attribute axis is -5, outside the 4 dimensions of input 'x0'"),
            std::string::npos)
      << e;
}

TEST(MalformedModel, UndefinedInput) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2});
  addNode(g, "Add", {"x", "nowhere"}, {"y"})->set_name("add");
  addValue(g->add_output(), "y", {2});
  auto s = InferenceSession::create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("node 'add' (Add) reads 'nowhere', which no node, graph input or "
                             "initializer defines"),
            std::string::npos)
      << s.message();
}

// libonnx 1.12 stops at opset 17. A model importing opset 18 gets opset 18's ReduceMean, whose
// axes are input 1, and not the opset-13 schema libonnx would hand back for it.
TEST(MalformedModel, NewerOpsetsAreNotJudgedByOlderSchemas) {
  onnx::ModelProto m = emptyModel(18);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 3});
  addInit(g, "axes", Tensor::fromVector(std::vector<int64_t>{1}, {1}));
  addNode(g, "ReduceMean", {"x", "axes"}, {"y"})->set_name("mean");
  addValue(g->add_output(), "y", {});
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  auto y = (*s)->run({{"x", Tensor::fromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})}});
  ASSERT_TRUE(y.ok()) << y.message();
  const Tensor& t = y->at("y");
  ASSERT_EQ(t.shape(), (Shape{2, 1}));
  EXPECT_FLOAT_EQ(t.data<float>()[0], 2.f);
  EXPECT_FLOAT_EQ(t.data<float>()[1], 5.f);
}

// Opset 18's ReduceMean has no axes attribute: a model that still sets one is refused, with
// where the axes go now, instead of reducing every axis.
TEST(MalformedModel, NewerOpsetsAreCheckedAgainstTheirOwnVersion) {
  onnx::ModelProto m = emptyModel(18);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 3});
  auto* n = addNode(g, "ReduceMean", {"x"}, {"y"});
  n->set_name("mean");
  attrInts(n, "axes", {1});
  addValue(g->add_output(), "y", {});
  auto s = InferenceSession::create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("node 'mean' (ReduceMean): ReduceMean (opset 18) has no attribute "
                             "'axes' (its attributes: keepdims, noop_with_empty_axes); give it "
                             "as input 1 (axes)"),
            std::string::npos)
      << s.message();
  // Split-18 takes num_outputs; three inputs are too many.
  onnx::ModelProto m2 = emptyModel(18);
  auto* g2 = m2.mutable_graph();
  addValue(g2->add_input(), "x", {6});
  addNode(g2, "Split", {"x", "x", "x"}, {"a", "b"})->set_name("split");
  addValue(g2->add_output(), "a", {});
  addValue(g2->add_output(), "b", {});
  auto s2 = InferenceSession::create(m2);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.message().find("Split (opset 18) takes 1 to 2: input, split?"), std::string::npos)
      << s2.message();
}

}  // namespace

namespace {

void typed(onnx::ValueInfoProto* v, const std::string& name, int elem, const Shape& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// Loop over a body that passes its condition through and emits the outer tensor `big` as a scan
// output; `trips` is the trip count input's value (none: omitted), `tripShape` its shape.
onnx::ModelProto loopModel(std::optional<int64_t> trips, const Shape& tripShape, int64_t bigSize) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  if (trips)
    addInit(g, "M",
            Tensor::fromVector(std::vector<int64_t>(tripShape.empty() ? 1 : tripShape[0], *trips),
                               tripShape));
  Tensor cond(DType::kBool, {});
  *cond.data<bool>() = true;
  tensorToProto(cond, g->add_initializer(), "cond");
  addInit(g, "big", Tensor(DType::kFloat, {bigSize}));
  N loop = addNode(g, "Loop", {trips ? "M" : "", "cond"}, {"scan"});
  loop->set_name("forever");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  auto* body = a->mutable_g();
  body->set_name("body");
  typed(body->add_input(), "i", onnx::TensorProto::INT64, {});
  typed(body->add_input(), "c", onnx::TensorProto::BOOL, {});
  typed(body->add_output(), "c_out", onnx::TensorProto::BOOL, {});
  typed(body->add_output(), "s", onnx::TensorProto::FLOAT, {bigSize});
  addNode(body, "Identity", {"c"}, {"c_out"});
  addNode(body, "Identity", {"big"}, {"s"});
  typed(g->add_output(), "scan", onnx::TensorProto::FLOAT, {});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  return m;
}

std::string runError(const onnx::ModelProto& m, size_t memoryLimit = 0) {
  SessionOptions o;
  o.memoryLimitBytes = memoryLimit;
  auto s = InferenceSession::create(m, o);
  if (!s.ok()) return s.message();
  auto r = (*s)->run({});
  return r.ok() ? std::string() : r.message();
}

// A loop that never stops, whether its condition stays true or a damaged file gives it a huge
// trip count, ends in an error instead of a hang or a killed process (issue 19).
TEST(MalformedModel, EndlessLoopsStop) {
  // Scan outputs past the memory limit stop it early: 1 MiB per iteration against 16 MiB.
  std::string e = runError(loopModel(std::nullopt, {}, 1 << 18), 16 << 20);
  EXPECT_NE(e.find("Loop's scan outputs reached"), std::string::npos) << e;
  EXPECT_NE(e.find("forever"), std::string::npos) << e;
  // Otherwise the iteration count does.
  e = runError(loopModel(int64_t(1) << 60, {}, 1));
  EXPECT_NE(e.find("iterations without stopping (trip count 1152921504606846976)"),
            std::string::npos)
      << e;
  // A trip count of the wrong shape is named, not read past its end.
  e = runError(loopModel(3, {0}, 1));
  EXPECT_NE(e.find("M (trip count) input must hold one value, it has shape [0]"), std::string::npos)
      << e;
  EXPECT_EQ(runError(loopModel(3, {}, 4)), "");
}

// An input whose type the op's constraint excludes is refused when the session is created,
// naming the node, the input, its type and what the op takes; float ops also take the other
// float types, which deepwire computes them in.
TEST(MalformedModel, InputTypeOutsideTheConstraint) {
  auto model = [](const std::string& op, int32_t elem) {
    onnx::ModelProto m = emptyModel(17);
    auto* g = m.mutable_graph();
    auto* in = g->add_input();
    addValue(in, "x", {2, 3});
    in->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    g->add_output()->set_name("y");
    addNode(g, op, {"x"}, {"y"})->set_name("n");
    return m;
  };
  auto s = InferenceSession::create(model("ReduceLogSum", onnx::TensorProto::INT8));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("node 'n' (ReduceLogSum): input 0 (data, 'x') is tensor(int8), "
                             "which ReduceLogSum (opset 17) does not take"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("tensor(int32)"), std::string::npos) << s.message();
  EXPECT_TRUE(InferenceSession::create(model("ReduceLogSum", onnx::TensorProto::INT32)).ok());
  EXPECT_TRUE(InferenceSession::create(model("Celu", onnx::TensorProto::DOUBLE)).ok());
  EXPECT_FALSE(InferenceSession::create(model("Celu", onnx::TensorProto::INT64)).ok());
  // Inputs bound to one constraint must agree (kernels read them all as the first one's type).
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "a", {2, 3});
  auto* b = g->add_input();
  addValue(b, "b", {2, 3});
  b->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::DOUBLE);
  g->add_output()->set_name("y");
  addNode(g, "Add", {"a", "b"}, {"y"})->set_name("sum");
  s = InferenceSession::create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("node 'sum' (Add): input 1 ('b') is tensor(double) but input 0 "
                             "('a') is tensor(float)"),
            std::string::npos)
      << s.message();
  // A variadic port is left to its kernel, which refuses mixed types when it runs.
  g->mutable_node(0)->set_op_type("Sum");
  s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  auto r = (*s)->run({{"a", Tensor(DType::kFloat, {2, 3})}, {"b", Tensor(DType::kDouble, {2, 3})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("input 1 is float64 but input 0 is float32"), std::string::npos)
      << r.message();
}

// The same checks reach the bodies of If, Loop and Scan, which see the enclosing graph's values:
// an Add inside a then_branch of a float graph input and a double one of the branch's own.
TEST(MalformedModel, InputTypesInsideBodies) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "a", {2, 3});
  auto* c = g->add_input();
  c->set_name("c");
  c->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  g->add_output()->set_name("y");
  auto* n = addNode(g, "If", {"c"}, {"y"});
  n->set_name("branch");
  for (const char* name : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* body = a->mutable_g();
    body->set_name(name);
    auto* k = body->add_initializer();
    k->set_name(std::string(name) + "_k");
    k->set_data_type(onnx::TensorProto::DOUBLE);
    k->add_double_data(1.0);
    addValue(body->add_output(), std::string(name) + "_y", {2, 3});
    addNode(body, "Add", {"a", std::string(name) + "_k"}, {std::string(name) + "_y"})
        ->set_name(std::string(name) + "_add");
  }
  auto s = InferenceSession::create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("then_branch body of node 'branch'"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("input 1 ('then_branch_k') is tensor(double)"), std::string::npos)
      << s.message();
}

// Split sizes fed at run time that exceed the axis (or go negative) are refused before any copy:
// they read past X (a fuzzed PackedAttention's qkv_hidden_sizes did, through its body's Split).
TEST(MalformedModel, SplitSizesBeyondTheAxisAreRefused) {
  onnx::ModelProto m = emptyModel(13);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 4});
  auto* sizesIn = g->add_input();
  addValue(sizesIn, "sizes", {2});
  sizesIn->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  g->add_output()->set_name("a");
  g->add_output()->set_name("b");
  attrI(addNode(g, "Split", {"x", "sizes"}, {"a", "b"}), "axis", 1);
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{3, 3}, {6, -2}}) {
    auto r = (*s)->run(
        {{"x", Tensor(DType::kFloat, {2, 4})}, {"sizes", Tensor::fromVector(sizes, {2})}});
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.message().find("split sizes add up to 6") != std::string::npos ||
                r.message().find("must not be negative") != std::string::npos)
        << r.message();
  }
  auto fine = (*s)->run({{"x", Tensor(DType::kFloat, {2, 4})},
                         {"sizes", Tensor::fromVector(std::vector<int64_t>{1, 3}, {2})}});
  ASSERT_TRUE(fine.ok()) << fine.message();
  EXPECT_EQ(fine->at("b").shape(), (Shape{2, 3}));
}

// QLinearMatMul's per-row scale with fewer values than A has rows was read past its end (found
// by fuzzing); scales and zero points must hold 1 value or one per row, column or channel.
TEST(MalformedModel, QuantizedScalesOfTheWrongCountAreRefused) {
  onnx::ModelProto m = emptyModel(10);
  auto* g = m.mutable_graph();
  auto input = [&](const char* name, Shape dims, int type) {
    auto* v = g->add_input();
    addValue(v, name, dims);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  };
  input("a", {2, 34, 4}, onnx::TensorProto::UINT8);
  input("a_scale", {11}, onnx::TensorProto::FLOAT);
  input("a_zero_point", {1}, onnx::TensorProto::UINT8);
  input("b", {2, 4, 3}, onnx::TensorProto::UINT8);
  input("b_scale", {1}, onnx::TensorProto::FLOAT);
  input("b_zero_point", {1}, onnx::TensorProto::UINT8);
  input("y_scale", {1}, onnx::TensorProto::FLOAT);
  input("y_zero_point", {1}, onnx::TensorProto::UINT8);
  g->add_output()->set_name("y");
  addNode(
      g, "QLinearMatMul",
      {"a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"},
      {"y"});
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  std::map<std::string, Tensor> feeds;
  for (const auto& in : (*s)->inputs()) {
    Tensor t(in.dtype, in.dims);
    if (in.dtype == DType::kFloat) std::fill_n(t.data<float>(), t.size(), 0.5f);
    feeds[in.name] = t;
  }
  auto r = (*s)->run(feeds);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("A's scale (one per row) has 11 values; it takes 1 or 34"),
            std::string::npos)
      << r.message();
}

// A graph input declared without a type crashed libonnx's shape inference (EyeLike's reads the
// input's type unasked); the model now runs on the kernels, which see the real tensor.
TEST(MalformedModel, UntypedGraphInputRuns) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  g->add_input()->set_name("x");
  addValue(g->add_output(), "y", {3, 4});
  attrI(addNode(g, "EyeLike", {"x"}, {"y"}), "k", 1);
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  auto r = (*s)->run({{"x", Tensor(DType::kFloat, {3, 4})}});
  ASSERT_TRUE(r.ok()) << r.message();
  const Tensor& y = r->at("y");
  ASSERT_EQ(y.shape(), (Shape{3, 4}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(y.data<float>()[i * 4 + j], j == i + 1 ? 1.0f : 0.0f) << i << "," << j;
}

// A body that declares a loop-carried input its Loop node does not pass ran its nodes on a value
// nobody set (a fuzzed model crashed `deepwire run`): it is an error naming both counts.
TEST(MalformedModel, LoopBodyTakingMoreInputsThanPassed) {
  onnx::ModelProto m = loopModel(3, {}, 4);
  auto* body = m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g();
  typed(body->add_input(), "acc", onnx::TensorProto::FLOAT, {4});
  const std::string e = runError(m);
  EXPECT_NE(e.find("the body graph takes 3 inputs, but its node passes it 2"), std::string::npos)
      << e;
  EXPECT_NE(e.find("forever"), std::string::npos) << e;
}

}  // namespace

namespace {

// libonnx's GRU-1 schema gives direction the default "foward"; a GRU-1 that leaves direction
// out is a forward GRU, as ONNX Runtime runs it, not an error.
TEST(MalformedModel, Gru1WithoutDirectionIsForward) {
  onnx::ModelProto m = emptyModel(2);
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2, 1, 3});
  addInit(g, "w", randomTensor({1, 6, 3}, 1));
  addInit(g, "r", randomTensor({1, 6, 2}, 2));
  N n = addNode(g, "GRU", {"x", "w", "r"}, {"y", "y_h"});
  attrI(n, "hidden_size", 2);
  addValue(g->add_output(), "y", {2, 1, 1, 2});
  addValue(g->add_output(), "y_h", {1, 1, 2});
  auto s = InferenceSession::create(m);
  ASSERT_TRUE(s.ok()) << s.message();
  auto r = (*s)->run({{"x", randomTensor({2, 1, 3}, 3)}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->at("y").shape(), (Shape{2, 1, 1, 2}));
}

}  // namespace

namespace {

// An attribute written without a type (as old exporters do) is judged by the value it carries.
TEST(MalformedModel, UntypedAttributeOfTheWrongKind) {
  std::string e = createError("ReduceSum", {"x0"}, 1, [](N n) {
    auto* a = n->add_attribute();
    a->set_name("keepdims");
    a->set_f(1.5f);
  });
  EXPECT_NE(e.find("attribute 'keepdims' has the wrong type (FLOAT, expected INT)"),
            std::string::npos)
      << e;
  e = createError("ReduceSum", {"x0"}, 1, [](N n) { n->add_attribute()->set_name("keepdims"); });
  EXPECT_NE(e.find("(no type and no value, expected INT)"), std::string::npos) << e;
  // Untyped and right: still fine.
  EXPECT_EQ(createError("ReduceSum", {"x0"}, 1,
                        [](N n) {
                          auto* a = n->add_attribute();
                          a->set_name("keepdims");
                          a->set_i(0);
                        }),
            "");
}

}  // namespace

// An index out of range is named as the file has it, with the range negative indices may take
// (an index of -7 on 6 values was reported as -1, the range as [0, 6)).
TEST(MalformedModel, OutOfRangeIndexIsNamedAsGiven) {
  auto r = runOneNode("Gather", onnx::TensorProto::INT64,
                      {Tensor::fromVector<int64_t>({1, 2, 3, 4, 5, 6}, {6}),
                       Tensor::fromVector<int64_t>({-7}, {1})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("index -7 out of range [-6, 6)"), std::string::npos)
      << r.status().message();
}

// A model since IR version 3 without opset_import is refused as such: judged at opset 1 (what
// IR versions 1 and 2 meant), its Cast's 'to' was called the wrong type.
TEST(MalformedModel, NoOpsetImportIsSaidToBeMissing) {
  onnx::ModelProto m = emptyModel(17);
  m.clear_opset_import();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {2});
  addNode(g, "Relu", {"x"}, {"y"});
  addValue(g->add_output(), "y", {2});
  auto s = InferenceSession::create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("declares no opset_import"), std::string::npos) << s.message();
}
