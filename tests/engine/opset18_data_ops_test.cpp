// Data operators ONNX added after opset 17, with expected values written out from their
// definitions (CenterCropPad matched ONNX Runtime 1.30 exactly on three layouts when written):
// - CenterCropPad (18): each listed axis cropped to its centre, from (in - out) / 2, or padded
//   with zeros placing the input at (out - in) / 2; strings pad with empty strings.
// - StringConcat (20): elementwise concatenation with broadcasting.
#include <gtest/gtest.h>

#include <map>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;

dw::Result<Tensor> runOne(const std::string& op, int opset, const std::map<std::string, Tensor>& in,
                          const std::vector<int64_t>& axes = {}) {
  onnx::ModelProto m = test::emptyModel(opset);
  m.set_ir_version(10);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(op);
  for (const auto& [name, t] : in) {
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(
        t.dtype() == DType::kString  ? onnx::TensorProto::STRING
        : t.dtype() == DType::kInt64 ? onnx::TensorProto::INT64
                                     : onnx::TensorProto::FLOAT);
    n->add_input(name);
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  if (!axes.empty()) {
    auto* a = n->add_attribute();
    a->set_name("axes");
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : axes) a->add_ints(v);
  }
  auto s = InferenceSession::create(m);
  if (!s) return s.status();
  auto out = (*s)->run(in);
  if (!out) return out.status();
  return out->at("y");
}

TEST(CenterCropPad, CropsAndPadsAroundTheCentre) {
  // [2, 5] -> [4, 2]: rows padded (1 above), columns cropped (from 1).
  std::vector<float> x(10);
  for (int i = 0; i < 10; ++i) x[i] = static_cast<float>(i + 1);
  auto y = runOne("CenterCropPad", 18,
                  {{"a_x", Tensor::fromVector(x, {2, 5})},
                   {"b_shape", Tensor::fromVector(std::vector<int64_t>{4, 2}, {2})}});
  ASSERT_TRUE(y.ok()) << y.message();
  ASSERT_EQ(y->shape(), (Shape{4, 2}));
  const std::vector<float> want{0, 0, 2, 3, 7, 8, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y->data<float>()[i], want[i]) << i;
  // Only axis -1 of strings, padded by 3: one empty string before, two after.
  auto s = runOne("CenterCropPad", 18,
                  {{"a_x", Tensor::fromStrings({"p", "q"}, {1, 2})},
                   {"b_shape", Tensor::fromVector(std::vector<int64_t>{5}, {1})}},
                  {-1});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->strings(), (std::vector<std::string>{"", "p", "q", "", ""}));
  auto bad = runOne("CenterCropPad", 18,
                    {{"a_x", Tensor::fromVector(x, {2, 5})},
                     {"b_shape", Tensor::fromVector(std::vector<int64_t>{4}, {1})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("1 sizes for 2 axes"), std::string::npos) << bad.message();
}

TEST(StringConcat, ConcatenatesWithBroadcasting) {
  auto y = runOne("StringConcat", 20,
                  {{"a", Tensor::fromStrings({"ab", "c", "", "\xc3\xa9"}, {2, 2})},
                   {"b", Tensor::fromStrings({"1", "xy"}, {2})}});
  ASSERT_TRUE(y.ok()) << y.message();
  EXPECT_EQ(y->strings(), (std::vector<std::string>{"ab1", "cxy", "1", "\xc3\xa9xy"}));
}

}  // namespace
