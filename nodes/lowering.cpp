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
  if ((op == "ReduceSum" && opset() >= 13) || opset() >= 18) {
    std::vector<std::string> ins = {x};
    if (!axes.empty()) ins.push_back(int64s("axes", axes));
    return op1(op, ins, attrs, out);
  }
  if (!axes.empty()) attrs.push_back(attrInts("axes", axes));
  return op1(op, {x}, attrs, out);
}

namespace {

std::string axesOp(LoweringBuilder& b, const std::string& op, const std::string& x,
                   const std::vector<int64_t>& axes, const std::string& out) {
  if (b.opset() >= 13) return b.op1(op, {x, b.int64s("axes", axes)}, {}, out);
  return b.op1(op, {x}, {attrInts("axes", axes)}, out);
}

}  // namespace

std::string LoweringBuilder::squeeze(const std::string& x, const std::vector<int64_t>& axes,
                                     const std::string& out) {
  return axesOp(*this, "Squeeze", x, axes, out);
}

std::string LoweringBuilder::unsqueeze(const std::string& x, const std::vector<int64_t>& axes,
                                       const std::string& out) {
  return axesOp(*this, "Unsqueeze", x, axes, out);
}

std::string LoweringBuilder::softmax(const std::string& op, const std::string& x, int64_t axis,
                                     int64_t rank, const std::string& out) {
  if (axis < 0) axis += rank;
  if (opset() >= 13 || axis == rank - 1) return op1(op, {x}, {attrInt("axis", axis)}, out);
  std::vector<int64_t> perm;  // swaps the axis and the last one, its own inverse
  for (int64_t a = 0; a < rank; ++a)
    perm.push_back(a == axis ? rank - 1 : a == rank - 1 ? axis : a);
  const auto last =
      op1(op, {op1("Transpose", {x}, {attrInts("perm", perm)})}, {attrInt("axis", -1)});
  return op1("Transpose", {last}, {attrInts("perm", perm)}, out);
}

std::string LoweringBuilder::orEqual(const std::string& op, const std::string& a,
                                     const std::string& b, const std::string& out) {
  if (opset() >= 12) return op1(op, {a, b}, {}, out);
  const std::string strict = op == "GreaterOrEqual" ? "Greater" : "Less";
  return op1("Or", {op1(strict, {a, b}), op1("Equal", {a, b})}, {}, out);
}

std::string LoweringBuilder::shapeSlice(const std::string& x, int64_t start, int64_t end) {
  if (opset() >= 15) return op1("Shape", {x}, {attrInt("start", start), attrInt("end", end)});
  return op1("Slice", {op1("Shape", {x}), int64s("start", {start}), int64s("end", {end})});
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
