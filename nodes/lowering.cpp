#include "nodes/lowering.h"

#include <cstring>

namespace dw {

onnx::AttributeProto attrInt(const std::string& name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

onnx::AttributeProto attrFloat(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

onnx::AttributeProto attrString(const std::string& name, const std::string& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}

onnx::AttributeProto attrInts(const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
  return a;
}

std::string LoweringBuilder::int64s(const std::string& suffix, const std::vector<int64_t>& values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8));
  return constant(suffix, t);
}

std::string LoweringBuilder::floatScalar(const std::string& suffix, float value) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(&value), 4));
  return constant(suffix, t);
}

std::string LoweringBuilder::reduce(const std::string& op, const std::string& x,
                                    const std::vector<int64_t>& axes, bool keepdims,
                                    const std::string& out) {
  std::vector<onnx::AttributeProto> attrs = {attrInt("keepdims", keepdims ? 1 : 0)};
  if (op == "ReduceSum" || opset() >= 18) {
    std::vector<std::string> ins = {x};
    if (!axes.empty()) ins.push_back(int64s("axes", axes));
    return op1(op, ins, attrs, out);
  }
  if (!axes.empty()) attrs.push_back(attrInts("axes", axes));
  return op1(op, {x}, attrs, out);
}

Result<int64_t> LoweringBuilder::rankOf(int i) {
  auto t = inputType(i);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape())
    return fail("the rank of input " + std::to_string(i) +
                " is unknown; give the model's Input a shape");
  return static_cast<int64_t>(t->tensor_type().shape().dim_size());
}

Result<std::vector<int64_t>> LoweringBuilder::staticDims(int i, const std::string& why) {
  auto t = inputType(i);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape())
    return fail("the shape of input " + std::to_string(i) + " is unknown, but " + why +
                "; give the model's Input a shape");
  std::vector<int64_t> dims;
  for (const auto& d : t->tensor_type().shape().dim())
    dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return dims;
}

}  // namespace dw
