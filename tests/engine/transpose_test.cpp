// Transpose of tensors large enough for the oneDNN reorder path (eltwise.cpp's TransposeOp):
// every permutation of rank 3, some of rank 4 and 6, the default (reversed) perm, float32 and
// int32, against an index-by-index reference. Small tensors and other dtypes take the reference
// kernel, which the conformance suite checks.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <numeric>

#include "engine/kernels/common.h"
#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;

namespace {

using test::addNode;
using test::addValue;
using test::attrInts;
using test::emptyModel;

Tensor iota(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.size(); ++i) {
    if (dtype == DType::kFloat)
      t.data<float>()[i] = static_cast<float>(i) * 0.5f;
    else
      t.data<int32_t>()[i] = static_cast<int32_t>(i);
  }
  return t;
}

void checkTranspose(DType dtype, const Shape& shape, const std::vector<int64_t>& perm) {
  const size_t r = shape.size();
  std::vector<int64_t> p = perm;
  if (p.empty())
    for (size_t i = 0; i < r; ++i) p.push_back(static_cast<int64_t>(r - 1 - i));
  Shape out(r);
  for (size_t i = 0; i < r; ++i) out[i] = shape[p[i]];
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  addValue(in, "x", shape);
  in->mutable_type()->mutable_tensor_type()->set_elem_type(
      dtype == DType::kFloat ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT32);
  auto* o = g->add_output();
  addValue(o, "y", out);
  o->mutable_type()->mutable_tensor_type()->set_elem_type(
      dtype == DType::kFloat ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT32);
  auto* n = addNode(g, "Transpose", {"x"}, {"y"});
  if (!perm.empty()) attrInts(n, "perm", perm);
  auto s = InferenceSession::create(m, SessionOptions());
  ASSERT_TRUE(s.ok()) << s.message();
  const Tensor x = iota(dtype, shape);
  auto res = (*s)->run({{"x", x}});
  ASSERT_TRUE(res.ok()) << res.message();
  const Tensor& y = res->at("y");
  ASSERT_EQ(y.shape(), out);
  ASSERT_EQ(y.dtype(), dtype);
  const auto inStrides = stridesOf(shape);
  std::vector<int64_t> idx(r, 0);
  for (int64_t k = 0; k < y.size(); ++k) {
    int64_t from = 0;
    for (size_t i = 0; i < r; ++i) from += idx[i] * inStrides[p[i]];
    const bool same = dtype == DType::kFloat ? y.data<float>()[k] == x.data<float>()[from]
                                             : y.data<int32_t>()[k] == x.data<int32_t>()[from];
    ASSERT_TRUE(same) << "shape " << shapeToString(shape) << " perm " << shapeToString(p)
                      << " at output element " << k;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

TEST(TransposeKernel, LargeTensorsMatchIndexReference) {
  for (DType t : {DType::kFloat, DType::kInt32}) {
    std::vector<int64_t> p3{0, 1, 2};
    do {
      checkTranspose(t, {33, 16, 24}, p3);
    } while (std::next_permutation(p3.begin(), p3.end()));
    checkTranspose(t, {8, 12, 16, 5}, {0, 2, 1, 3});
    checkTranspose(t, {8, 12, 16, 5}, {3, 1, 0, 2});
    checkTranspose(t, {2, 3, 4, 5, 6, 7}, {5, 0, 4, 1, 3, 2});
    checkTranspose(t, {64, 100}, {});
    checkTranspose(t, {1, 128, 1, 64}, {2, 3, 0, 1});  // unit dims
    // Over 512 KB: the row copies split across the threads (rows not a multiple of them).
    for (const std::vector<int64_t>& p : {std::vector<int64_t>{1, 0, 2}, {2, 0, 1}, {0, 2, 1}})
      checkTranspose(t, {127, 33, 64}, p);
  }
}

// A permutation that moves only axes of size 1 leaves every element in place: the kernel hands
// the input over as the output instead of copying it (a transformer's [S, 1, D] -> [1, S, D]).
TEST(TransposeKernel, UnitAxesOnlyHandTheInputOver) {
  for (const auto& [shape, perm] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{64, 1, 32}, {1, 0, 2}}, {{1, 40, 1, 7}, {2, 1, 0, 3}}, {{5, 1}, {1, 0}}}) {
    checkTranspose(DType::kFloat, shape, perm);
    auto m = emptyModel();
    auto* g = m.mutable_graph();
    addValue(g->add_input(), "x", shape);
    Shape out;
    for (int64_t p : perm) out.push_back(shape[static_cast<size_t>(p)]);
    addValue(g->add_output(), "y", out);
    attrInts(addNode(g, "Transpose", {"x"}, {"y"}), "perm", perm);
    auto s = InferenceSession::create(m, SessionOptions());
    ASSERT_TRUE(s.ok()) << s.message();
    const Tensor x = iota(DType::kFloat, shape);
    auto res = (*s)->run({{"x", x}});
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->at("y").raw(), x.raw())
        << shapeToString(shape) << " perm " << shapeToString(perm);
  }
}

namespace {

// Concat copies the output's bytes in equal shares per thread, whichever input rows they fall
// in: against an index-by-index reference, along every axis of tensors large enough to split
// (a share starting and ending mid-row), with an empty input among them, for float32 and int64.
TEST(ConcatKernel, ThreadedSharesMatchTheDefinition) {
  const std::vector<Shape> parts{
      {2, 5, 37, 129}, {2, 3, 37, 129}, {2, 0, 37, 129}, {2, 1, 37, 129}};
  for (int axis = 0; axis < 4; ++axis)
    for (int32_t type : {onnx::TensorProto::FLOAT, onnx::TensorProto::INT64}) {
      std::vector<Tensor> in;
      int64_t seed = 0;
      for (Shape s : parts) {
        // The parts differ along `axis` only.
        Shape t{2, 5, 37, 129};
        t[axis] = s[1] == 5 ? t[axis] : (s[1] == 0 ? 0 : s[1] + axis);
        const int64_t n = numElements(t);
        if (type == onnx::TensorProto::FLOAT) {
          std::vector<float> v(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) v[i] = float(seed * 1000003 + i);
          in.push_back(Tensor::fromVector(v, t));
        } else {
          std::vector<int64_t> v(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) v[i] = seed * 1000003 + i;
          in.push_back(Tensor::fromVector(v, t));
        }
        ++seed;
      }
      auto y = test::runOneNode("Concat", type, in, {test::attribute("axis", int64_t{axis})});
      ASSERT_TRUE(y.ok()) << y.message();
      Shape want = in[0].shape();
      want[axis] = 0;
      for (const Tensor& t : in) want[axis] += t.dim(axis);
      ASSERT_EQ(y->shape(), want) << "axis " << axis;
      // Walk the output index by index, finding the input and its index.
      const auto ys = stridesOf(want);
      for (int64_t k = 0; k < y->size(); ++k) {
        std::vector<int64_t> idx(4);
        for (int d = 0, r = 0; d < 4; ++d) {
          idx[d] = (k - r) / ys[d] % want[d];
          r += idx[d] * ys[d];
        }
        size_t part = 0;
        while (idx[axis] >= in[part].dim(axis)) idx[axis] -= in[part++].dim(axis);
        const auto xs = stridesOf(in[part].shape());
        int64_t at = 0;
        for (int d = 0; d < 4; ++d) at += idx[d] * xs[d];
        const double got =
            type == onnx::TensorProto::FLOAT ? y->data<float>()[k] : double(y->data<int64_t>()[k]);
        const double expect = type == onnx::TensorProto::FLOAT
                                  ? in[part].data<float>()[at]
                                  : double(in[part].data<int64_t>()[at]);
        ASSERT_EQ(got, expect) << "axis " << axis << " type " << type << " at " << k;
      }
    }
}

}  // namespace
