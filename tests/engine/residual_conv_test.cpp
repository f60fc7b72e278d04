// Inference convolution chains as ResNet and MobileNet blocks write them: the residual Add fused
// into the convolution before it (fuseForOneDnn), added in place where the convolution is the
// residual's last reader, in NHWC chains and on plain tensors, on our Winograd kernel (both of
// its schedules) and on oneDNN's. Checked against a float64 evaluation of the same graph.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <vector>

#include "engine/fusion/fused.h"
#include "engine/fusion/fusion.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;

namespace {

using test::addInit;
using test::addNode;
using test::addValue;
using test::attrInts;
using test::emptyModel;
using test::randomTensor;

using Planes = std::vector<double>;  // N x C x H x W, row-major

// conv(x, w) + b with 3x3 filters and one pixel of zero padding, in float64.
Planes conv3x3(const Planes& x, int64_t n, int64_t c, int64_t h, int64_t w, const Tensor& wt,
               const Tensor& bias) {
  const int64_t k = wt.dim(0);
  Planes y(static_cast<size_t>(n * k * h * w));
  const float *pw = wt.data<float>(), *pb = bias.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < k; ++o)
      for (int64_t r = 0; r < h; ++r)
        for (int64_t q = 0; q < w; ++q) {
          double s = pb[o];
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t a = 0; a < 3; ++a)
              for (int64_t b = 0; b < 3; ++b) {
                const int64_t ir = r + a - 1, iq = q + b - 1;
                if (ir < 0 || ir >= h || iq < 0 || iq >= w) continue;
                s += double(pw[((o * c + ch) * 3 + a) * 3 + b]) *
                     x[((i * c + ch) * h + ir) * w + iq];
              }
          y[((i * k + o) * h + r) * w + q] = s;
        }
  return y;
}

Planes relu(Planes v) {
  for (double& d : v) d = std::max(d, 0.0);
  return v;
}

Planes add(Planes a, const Planes& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// x -> conv0 -> a; a -> conv1 -> Relu -> conv2 -> Add(., a) -> Relu -> r; r -> conv3 -> y.
// `keepA`: `a` is also a graph output, so the convolution that adds it may not write into it.
// `swap`: the Add reads the residual first. `laterReader`: a convolution after the block reads
// `a` too (y2 = GlobalAveragePool(conv4(a))), so the chain stays NHWC but the convolution that
// adds `a` is not its last reader and works on a copy.
struct Block {
  int64_t n, c, h, w;
  bool keepA, swap, laterReader = false;
};

void checkBlock(const Block& k) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {k.n, k.c, k.h, k.w});
  addValue(g->add_output(), "y", {k.n, k.c, k.h, k.w});
  if (k.keepA) addValue(g->add_output(), "a", {k.n, k.c, k.h, k.w});
  if (k.laterReader) addValue(g->add_output(), "y2", {k.n, k.c, 1, 1});
  std::vector<Tensor> ws, bs;
  for (int i = 0; i < 5; ++i) {
    // Scaled so that the activations stay of order one through four convolutions.
    const float s = 1.0f / std::sqrt(9.0f * k.c);
    ws.push_back(randomTensor({k.c, k.c, 3, 3}, 10 + i, -s, s));
    bs.push_back(randomTensor({k.c}, 20 + i, -0.2f, 0.2f));
    addInit(g, "w" + std::to_string(i), ws.back());
    addInit(g, "b" + std::to_string(i), bs.back());
  }
  auto conv = [&](const std::string& in, int i, const std::string& out) {
    attrInts(addNode(g, "Conv", {in, "w" + std::to_string(i), "b" + std::to_string(i)}, {out}),
             "pads", {1, 1, 1, 1});
  };
  conv("x", 0, "a");
  conv("a", 1, "c1");
  addNode(g, "Relu", {"c1"}, {"r1"});
  conv("r1", 2, "c2");
  addNode(g, "Add",
          k.swap ? std::vector<std::string>{"a", "c2"} : std::vector<std::string>{"c2", "a"},
          {"s"});
  addNode(g, "Relu", {"s"}, {"r"});
  conv("r", 3, "y");
  if (k.laterReader) {
    conv("a", 4, "t");
    addNode(g, "GlobalAveragePool", {"t"}, {"y2"});
  }

  const Tensor x = randomTensor({k.n, k.c, k.h, k.w}, 30);
  Planes px(x.data<float>(), x.data<float>() + x.size());
  const Planes a = conv3x3(px, k.n, k.c, k.h, k.w, ws[0], bs[0]);
  const Planes r1 = relu(conv3x3(a, k.n, k.c, k.h, k.w, ws[1], bs[1]));
  const Planes r = relu(add(conv3x3(r1, k.n, k.c, k.h, k.w, ws[2], bs[2]), a));
  const Planes want = conv3x3(r, k.n, k.c, k.h, k.w, ws[3], bs[3]);

  auto s = InferenceSession::create(m, SessionOptions());
  ASSERT_TRUE(s.ok()) << s.message();
  // Twice: the second run reuses the kernels' cached primitives and transformed weights.
  for (int run = 0; run < 2; ++run) {
    auto out = (*s)->run({{"x", x}});
    ASSERT_TRUE(out.ok()) << out.message();
    const Tensor& y = out->at("y");
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
          << "N" << k.n << " C" << k.c << " " << k.h << "x" << k.w << " at " << i << ", run "
          << run;
    if (k.laterReader) {
      const Planes t = conv3x3(a, k.n, k.c, k.h, k.w, ws[4], bs[4]);
      const Tensor& y2 = out->at("y2");
      for (int64_t i = 0; i < k.n * k.c; ++i) {
        double mean = 0;
        for (int64_t p = 0; p < k.h * k.w; ++p) mean += t[i * k.h * k.w + p];
        mean /= double(k.h * k.w);
        ASSERT_NEAR(y2.data<float>()[i], mean, 1e-4 * (1 + std::fabs(mean)))
            << "the residual a was overwritten before its last reader, at " << i;
      }
    }
    if (k.keepA) {
      const Tensor& ta = out->at("a");
      for (int64_t i = 0; i < ta.size(); ++i)
        ASSERT_NEAR(ta.data<float>()[i], a[i], 1e-4 * (1 + std::fabs(a[i])))
            << "the residual a was overwritten at " << i;
    }
  }
}

struct GroupedOnly {
  explicit GroupedOnly(bool on) { onednn::winogradGroupedOnly(on); }
  ~GroupedOnly() { onednn::winogradGroupedOnly(false); }
};

}  // namespace

// Batch 1 and a 13 x 15 plane (16 tiles, partial ones at the edges) take the grouped Winograd
// schedule; batches 8 and 2 the per-image one on few threads; under 16 tiles (8 x 8 and 5 x 4
// planes) the convolutions stay on oneDNN's direct kernel, whose sum post-op adds the residual.
// Where `a` is not an output the chain is NHWC and the residual is added in place (or, where a
// later node reads it, into a copy); where it is, the chain is plain and the residual is copied
// into the convolution's blocked output first.
TEST(ResidualConv, ChainsMatchFloat64Reference) {
  for (const bool grouped : {false, true}) {
    GroupedOnly mode(grouped);
    for (const Block& k :
         {Block{1, 16, 13, 15, false, false}, Block{8, 32, 14, 14, false, true},
          Block{3, 16, 5, 4, false, false}, Block{2, 16, 12, 12, true, true},
          Block{2, 16, 8, 8, true, false}, Block{3, 16, 5, 4, true, false},
          Block{1, 16, 13, 15, false, false, true}, Block{3, 16, 5, 4, false, true, true}})
      checkBlock(k);
  }
}

// The pass's decisions: Add(y, r) and Add(r, y) after a Conv are absorbed with r as input
// kResidualInput and the Relu after them as the activation; an Add whose conv output another
// node also reads, or that broadcasts, stays a node.
TEST(ResidualConv, FusionAbsorbsOnlySameShapeAdds) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addNode(g, "Conv", {"x", "w"}, {"c1"});
  addNode(g, "Add", {"x", "c1"}, {"s1"});
  addNode(g, "Relu", {"s1"}, {"r1"});
  addNode(g, "Conv", {"r1", "w"}, {"c2"});
  addNode(g, "Add", {"c2", "v"}, {"s2"});  // v broadcasts: [1, C, 1, 1]
  addNode(g, "Conv", {"s2", "w"}, {"c3"});
  addNode(g, "Add", {"c3", "s2"}, {"s3"});
  addNode(g, "Mul", {"c3", "s3"}, {"y"});  // c3 has a second reader
  g->add_output()->set_name("y");
  fusion::ValueTypes types;
  auto set = [&](const std::string& v, std::vector<int64_t> dims) {
    auto* t = types[v].mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  for (const char* v : {"x", "c1", "s1", "r1", "c2", "s2", "c3", "s3", "y"}) set(v, {2, 16, 8, 8});
  set("v", {1, 16, 1, 1});
  fusion::PlanNodes nodes;
  for (const auto& n : g->node()) nodes.push_back({n, {{"", 17}}});
  fusion::fuseForOneDnn(nodes, *g, types);
  std::vector<std::string> ops;
  for (const auto& [n, opsets] : nodes) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Conv", "Conv", "Add", "Conv", "Add", "Mul"}));
  const auto& first = nodes[0].first;
  const auto f = fusion::fusedOf(first);
  EXPECT_TRUE(f.residual);
  EXPECT_EQ(f.activation, "Relu");
  ASSERT_EQ(first.input_size(), fusion::Fused::kResidualInput + 1);
  EXPECT_EQ(first.input(fusion::Fused::kResidualInput), "x");
  EXPECT_EQ(first.output(0), "r1");
  EXPECT_FALSE(fusion::fusedOf(nodes[1].first).residual);
  EXPECT_FALSE(fusion::fusedOf(nodes[3].first).residual);
}
