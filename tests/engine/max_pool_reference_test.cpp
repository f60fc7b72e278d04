// MaxPool with its Indices output (the reference kernel, which walks each window clipped to the
// input) against a brute-force walk of the whole window, on random shapes with padding wider
// than the input, strides, dilations, ceil_mode, both storage orders and 1 to 3 spatial axes.
// Small integer values make ties common: the first maximum in row-major window order wins.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <random>
#include <vector>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;

namespace {

using test::addNode;
using test::addValue;
using test::attrI;
using test::attrInts;
using test::emptyModel;

struct Case {
  Shape x;
  std::vector<int64_t> kernel, strides, dilations, pads;
  bool ceil = false;
  bool columnMajor = false;
};

// The whole window, position by position, as ONNX describes MaxPool.
void bruteForce(const Case& c, const std::vector<float>& x, const Shape& out, std::vector<float>& y,
                std::vector<int64_t>& idx) {
  const size_t n = c.kernel.size();
  Shape in(c.x.begin() + 2, c.x.end());
  int64_t inPlane = 1, outPlane = 1, windows = 1;
  for (size_t d = 0; d < n; ++d) {
    inPlane *= in[d];
    outPlane *= out[2 + d];
    windows *= c.kernel[d];
  }
  y.assign(static_cast<size_t>(c.x[0] * c.x[1] * outPlane), 0);
  idx.assign(y.size(), 0);
  for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p)
    for (int64_t oi = 0; oi < outPlane; ++oi) {
      std::vector<int64_t> o(n);
      for (int64_t d = static_cast<int64_t>(n) - 1, r = oi; d >= 0; --d) {
        o[d] = r % out[2 + d];
        r /= out[2 + d];
      }
      float best = 0;
      int64_t at = -1;
      for (int64_t wi = 0; wi < windows; ++wi) {
        std::vector<int64_t> pos(n);
        bool inside = true;
        for (int64_t d = static_cast<int64_t>(n) - 1, r = wi; d >= 0; --d) {
          pos[d] = o[d] * c.strides[d] - c.pads[d] + (r % c.kernel[d]) * c.dilations[d];
          r /= c.kernel[d];
          inside = inside && pos[d] >= 0 && pos[d] < in[d];
        }
        if (!inside) continue;
        int64_t off = 0, col = 0, stride = 1;
        for (size_t d = 0; d < n; ++d) off = off * in[d] + pos[d];
        for (size_t d = 0; d < n; ++d) {
          col += pos[d] * stride;
          stride *= in[d];
        }
        const float v = x[static_cast<size_t>(p * inPlane + off)];
        if (at < 0 || v > best) {
          best = v;
          at = c.columnMajor ? col : off;
        }
      }
      y[static_cast<size_t>(p * outPlane + oi)] = at < 0 ? 0 : best;
      idx[static_cast<size_t>(p * outPlane + oi)] = p * inPlane + std::max<int64_t>(at, 0);
    }
}

}  // namespace

TEST(MaxPoolReference, ClippedWindowsMatchTheWholeWindow) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 60; ++t) {
    Case c;
    const int n = pick(1, 3);
    c.x = {pick(1, 2), pick(1, 3)};
    for (int d = 0; d < n; ++d) {
      c.x.push_back(pick(1, n == 3 ? 5 : 9));
      c.kernel.push_back(pick(1, 4));
      c.strides.push_back(pick(1, 3));
      c.dilations.push_back(pick(1, 2));
    }
    for (int d = 0; d < 2 * n; ++d) c.pads.push_back(pick(0, 6));
    // ONNX requires a pad smaller than the kernel's extent: keep the wide ones for larger kernels.
    for (int d = 0; d < n; ++d) {
      const int64_t extent = (c.kernel[d] - 1) * c.dilations[d] + 1;
      c.pads[d] = std::min<int64_t>(c.pads[d], extent - 1);
      c.pads[d + n] = std::min<int64_t>(c.pads[d + n], extent - 1);
    }
    c.ceil = pick(0, 1) == 1;
    c.columnMajor = n == 2 && pick(0, 1) == 1;
    Shape out{c.x[0], c.x[1]};
    bool valid = true;
    for (int d = 0; d < n; ++d) {
      const int64_t extent = (c.kernel[d] - 1) * c.dilations[d] + 1;
      const int64_t span = c.x[2 + d] + c.pads[d] + c.pads[d + n] - extent;
      if (span < 0) valid = false;
      int64_t o = c.ceil ? (span + c.strides[d] - 1) / c.strides[d] + 1 : span / c.strides[d] + 1;
      // ceil_mode: a last window starting in the right padding is dropped.
      if (c.ceil && (o - 1) * c.strides[d] >= c.x[2 + d] + c.pads[d]) --o;
      out.push_back(o);
    }
    if (!valid) continue;
    SCOPED_TRACE("case " + std::to_string(t));

    auto m = emptyModel();
    auto* g = m.mutable_graph();
    addValue(g->add_input(), "x", c.x);
    addValue(g->add_output(), "y", out);
    auto* yi = g->add_output();
    yi->set_name("i");
    yi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
    auto* node = addNode(g, "MaxPool", {"x"}, {"y", "i"});
    attrInts(node, "kernel_shape", c.kernel);
    attrInts(node, "strides", c.strides);
    attrInts(node, "dilations", c.dilations);
    attrInts(node, "pads", c.pads);
    attrI(node, "ceil_mode", c.ceil ? 1 : 0);
    attrI(node, "storage_order", c.columnMajor ? 1 : 0);

    Tensor x(DType::kFloat, c.x);
    std::vector<float> xs(static_cast<size_t>(x.size()));
    for (auto& v : xs) v = static_cast<float>(pick(-3, 3));  // ties are common
    std::copy(xs.begin(), xs.end(), x.data<float>());
    std::vector<float> wantY;
    std::vector<int64_t> wantI;
    bruteForce(c, xs, out, wantY, wantI);

    auto s = InferenceSession::create(m, SessionOptions());
    ASSERT_TRUE(s.ok()) << s.message();
    auto r = (*s)->run({{"x", x}});
    ASSERT_TRUE(r.ok()) << r.message();
    const Tensor& y = r->at("y");
    const Tensor& i = r->at("i");
    ASSERT_EQ(y.shape(), out);
    for (int64_t k = 0; k < y.size(); ++k) {
      ASSERT_EQ(y.data<float>()[k], wantY[static_cast<size_t>(k)]) << "at " << k;
      ASSERT_EQ(i.data<int64_t>()[k], wantI[static_cast<size_t>(k)]) << "at " << k;
    }
  }
}
