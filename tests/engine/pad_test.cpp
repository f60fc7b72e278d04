// Pad copies whole rows of its last axis and maps only the padded elements (shape_ops.cpp): every
// mode, pads on every axis, negative pads that crop, pads wider than the axis (reflect wraps
// around), a row entirely outside the input, and a scalar, against an element-by-element
// reference written from the operator's definition.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <random>

#include "engine/kernels/common.h"
#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;

namespace {

using test::addInit;
using test::addNode;
using test::addValue;
using test::attrS;
using test::emptyModel;
using test::randomTensor;

// Where output index o of an axis of n elements padded by `before` reads (-1: the constant).
int64_t sourceIndex(const std::string& mode, int64_t o, int64_t before, int64_t n) {
  int64_t i = o - before;
  if (i >= 0 && i < n) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  // reflect: bounce between 0 and n - 1 without repeating the edge
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
  return i;
}

void checkPad(const Shape& shape, const std::vector<int64_t>& pads, const std::string& mode) {
  const size_t r = shape.size();
  Shape out(r);
  for (size_t d = 0; d < r; ++d) out[d] = shape[d] + pads[d] + pads[d + r];
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", shape);
  addValue(g->add_output(), "y", out);
  addInit(g, "pads", Tensor::fromVector(pads, {static_cast<int64_t>(pads.size())}));
  addInit(g, "value", Tensor::scalar(DType::kFloat, 7.5));
  attrS(addNode(g, "Pad", {"x", "pads", "value"}, {"y"}), "mode", mode);
  auto s = InferenceSession::create(m, SessionOptions());
  ASSERT_TRUE(s.ok()) << s.message();
  const Tensor x = randomTensor(shape, 5);
  auto res = (*s)->run({{"x", x}});
  ASSERT_TRUE(res.ok()) << res.message();
  const Tensor& y = res->at("y");
  ASSERT_EQ(y.shape(), out);
  const auto xs = stridesOf(shape);
  std::vector<int64_t> idx(r, 0);
  for (int64_t k = 0; k < y.size(); ++k) {
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < r; ++d) {
      const int64_t i = sourceIndex(mode, idx[d], pads[d], shape[d]);
      if (i < 0) inside = false;
      off += i * xs[d];
    }
    const float want = inside ? x.data<float>()[off] : 7.5f;
    ASSERT_EQ(y.data<float>()[k], want)
        << mode << " " << shapeToString(shape) << " pads " << shapeToString(pads) << " at " << k;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

TEST(PadKernel, RowsMatchElementReference) {
  for (const std::string mode : {"constant", "edge", "reflect"}) {
    checkPad({3, 4, 5}, {1, 2, 3, 2, 0, 4}, mode);
    checkPad({2, 3, 6}, {0, -1, -2, 1, 0, -3}, mode);  // crops
    checkPad({2, 4}, {0, 7, 0, 9}, mode);              // wider than the axis
    checkPad({1, 5}, {2, 0, 3, 0}, mode);              // whole rows outside the input
    checkPad({2, 1, 3}, {0, 2, 1, 0, 3, 1}, mode);     // an axis of one
  }
  checkPad({}, {}, "constant");
}
