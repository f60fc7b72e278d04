// Small helpers that build ONNX models by hand for the engine tests.
#pragma once

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/session.h"
#include "engine/tensor.h"

namespace dw::engine::test {

inline onnx::ModelProto emptyModel(int opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

// A float32 graph input, output or value_info of a fixed shape.
inline void addValue(onnx::ValueInfoProto* v, const std::string& name, const Shape& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// An int64 graph input of n class labels (the target of a classification loss).
inline void addLabels(onnx::GraphProto* g, const std::string& name, int64_t n) {
  auto* v = g->add_input();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::INT64);
  t->mutable_shape()->add_dim()->set_dim_value(n);
}

// The largest |a - b| over two float tensors of the same shape.
inline float maxDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return std::numeric_limits<float>::infinity();
  float m = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// Uniform in [lo, hi), fixed by `seed`.
inline Tensor randomTensor(const Shape& s, uint32_t seed, float lo = -1, float hi = 1) {
  Tensor t(DType::kFloat, s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Standard normal, fixed by `seed`.
inline Tensor normalTensor(const Shape& s, uint32_t seed) {
  Tensor t(DType::kFloat, s);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

inline void addInit(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  auto* p = g->add_initializer();
  p->set_name(name);
  for (int64_t d : t.shape()) p->add_dims(d);
  if (t.dtype() == DType::kInt64) {
    p->set_data_type(onnx::TensorProto::INT64);
    for (int64_t i = 0; i < t.size(); ++i) p->add_int64_data(t.data<int64_t>()[i]);
    return;
  }
  p->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t i = 0; i < t.size(); ++i) p->add_float_data(t.data<float>()[i]);
}

// A node named "<op>_<first output>".
inline onnx::NodeProto* addNode(onnx::GraphProto* g, const std::string& op,
                                const std::vector<std::string>& in,
                                const std::vector<std::string>& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out[0]);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

inline void attrF(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void attrI(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void attrS(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void attrInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// One attribute as a value (for tests that keep a node's attributes in a list).
inline onnx::AttributeProto attribute(const std::string& name, int64_t v) {
  onnx::NodeProto n;
  attrI(&n, name, v);
  return n.attribute(0);
}
inline onnx::AttributeProto attribute(const std::string& name, float v) {
  onnx::NodeProto n;
  attrF(&n, name, v);
  return n.attribute(0);
}
inline onnx::AttributeProto attribute(const std::string& name, const std::string& v) {
  onnx::NodeProto n;
  attrS(&n, name, v);
  return n.attribute(0);
}

inline onnx::AttributeProto attribute(const std::string& name, const std::vector<int64_t>& v) {
  onnx::NodeProto n;
  attrInts(&n, name, v);
  return n.attribute(0);
}

// A graph of the one node `op` at opset 17, its inputs "a", "b", ... of element type `type`
// (an onnx::TensorProto::DataType), fed `in` (an undefined tensor leaves that input out), and
// its output.
inline dw::Result<Tensor> runOneNode(const std::string& op, int32_t type,
                                     const std::vector<Tensor>& in,
                                     const std::vector<onnx::AttributeProto>& attrs = {}) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(op);
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string name = in[i].defined() ? std::string(1, static_cast<char>('a' + i)) : "";
    n->add_input(name);
    if (name.empty()) continue;
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    feeds.emplace(name, in[i]);
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  for (const auto& a : attrs) *n->add_attribute() = a;
  auto s = InferenceSession::create(m);
  if (!s) return s.status();
  auto out = (*s)->run(feeds);
  if (!out) return out.status();
  return out->at("y");
}

}  // namespace dw::engine::test
