// Inverted-residual chains (a 1x1 widening, a depthwise filter, an optional 1x1 narrowing) that
// the session runs as one node (fusion/conv_chains.cpp, onednn/conv_chain.cpp), against a
// float64 evaluation of the same graph: odd planes and channel counts that are no multiple of
// 16, strides 1 and 2, symmetric and one-sided padding, 3x3, 5x5 and 7x7 windows, planes
// smaller than the window, ReLU6 and SiLU, a folded BatchNormalization, the residual, an input
// in NHWC and in nChw16c, one image (its rows, or for a few rows its channels, shared by the
// threads) and several; and a chain
// whose weights outweigh its widened tensor, left as separate nodes; and a chain that ends at its
// depthwise stage taking the GlobalAveragePool after it along.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/onednn/grad_common.h"
#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;

namespace {

using test::addInit;
using test::addNode;
using test::addValue;
using test::attrI;
using test::attrInts;
using test::emptyModel;
using test::randomTensor;

using Planes = std::vector<double>;  // N x C x H x W

struct Geometry {
  int64_t k, stride;
  std::vector<int64_t> pads;  // top, left, bottom, right
};

// conv(x) + b over N x C x H x W planes, `group` groups, square window, in float64.
Planes conv(const Planes& x, int64_t n, int64_t c, int64_t h, int64_t w, const Tensor& wt,
            const Tensor& bias, int64_t group, const Geometry& g, int64_t& oh, int64_t& ow) {
  const int64_t k = wt.dim(0), cg = c / group, kg = k / group, kk = g.k;
  oh = (h + g.pads[0] + g.pads[2] - kk) / g.stride + 1;
  ow = (w + g.pads[1] + g.pads[3] - kk) / g.stride + 1;
  Planes y(static_cast<size_t>(n * k * oh * ow));
  const float *pw = wt.data<float>(), *pb = bias.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < k; ++o)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q) {
          double s = pb[o];
          const int64_t g0 = o / kg * cg;
          for (int64_t ch = 0; ch < cg; ++ch)
            for (int64_t a = 0; a < kk; ++a)
              for (int64_t b = 0; b < kk; ++b) {
                const int64_t ir = r * g.stride - g.pads[0] + a, iq = q * g.stride - g.pads[1] + b;
                if (ir < 0 || ir >= h || iq < 0 || iq >= w) continue;
                s += double(pw[((o * cg + ch) * kk + a) * kk + b]) *
                     x[((i * c + g0 + ch) * h + ir) * w + iq];
              }
          y[((i * k + o) * oh + r) * ow + q] = s;
        }
  return y;
}

enum class Act { kRelu6, kSilu };

Planes activate(Planes v, Act a) {
  for (double& d : v)
    d = a == Act::kRelu6 ? std::min(std::max(d, 0.0), 6.0) : d / (1 + std::exp(-d));
  return v;
}

struct Chain {
  int64_t n, c0, c1, c2, h, w;  // c2 0: no narrowing
  Geometry dw;
  Act act;
  bool residual = false, batchNorm = false;
  bool blockedInput = false;  // the chain's input arrives in nChw16c
  bool fused = true;          // false: the weights outweigh the widened tensor (conv_chains.cpp)
  bool pool = false;          // no narrowing: a GlobalAveragePool reads the chain's output too
};

// x -> stem (3x3, 3 -> c0) -> [1x1 c0 -> c1, act] -> [depthwise, (BN), act] -> [1x1 c1 -> c2,
// (+ stem output)] -> tail (1x1 -> 5) -> y. The stem and the tail make the chain's ends values
// convolutions hand over, as inside a network.
void check(const Chain& k) {
  auto m = emptyModel();
  auto* g = m.mutable_graph();
  addValue(g->add_input(), "x", {k.n, 3, k.h, k.w});
  const Tensor x = randomTensor({k.n, 3, k.h, k.w}, 1);
  int seed = 10;
  auto weights = [&](const std::string& name, Shape s, int64_t fanIn) {
    const float r = 1.5f / std::sqrt(float(fanIn));
    Tensor w = randomTensor(s, seed++, -r, r), b = randomTensor({s[0]}, seed++, -0.3f, 0.3f);
    addInit(g, name + "_w", w);
    addInit(g, name + "_b", b);
    return std::make_pair(w, b);
  };
  addInit(g, "lo", Tensor::scalar(DType::kFloat, 0.0));
  addInit(g, "hi", Tensor::scalar(DType::kFloat, 6.0));
  auto act = [&](const std::string& in, const std::string& out) {
    if (k.act == Act::kRelu6) {
      addNode(g, "Clip", {in, "lo", "hi"}, {out});
    } else {
      addNode(g, "Sigmoid", {in}, {out + "_s"});
      addNode(g, "Mul", {in, out + "_s"}, {out});
    }
  };
  const auto stem = weights("stem", {k.c0, 3, 3, 3}, 27);
  attrInts(addNode(g, "Conv", {"x", "stem_w", "stem_b"}, {"s"}), "pads", {1, 1, 1, 1});
  const auto wide = weights("wide", {k.c1, k.c0, 1, 1}, k.c0);
  addNode(g, "Conv", {"s", "wide_w", "wide_b"}, {"e"});
  act("e", "ea");
  const auto depth = weights("depth", {k.c1, 1, k.dw.k, k.dw.k}, k.dw.k * k.dw.k);
  auto* dn = addNode(g, "Conv", {"ea", "depth_w", "depth_b"}, {"d"});
  attrI(dn, "group", k.c1);
  attrInts(dn, "strides", {k.dw.stride, k.dw.stride});
  attrInts(dn, "pads", k.dw.pads);
  const Tensor scale = randomTensor({k.c1}, 90, 0.5f, 1.5f), shift = randomTensor({k.c1}, 91),
               mean = randomTensor({k.c1}, 92), var = randomTensor({k.c1}, 93, 0.5f, 2.0f);
  std::string dOut = "d";
  if (k.batchNorm) {
    addInit(g, "bn_scale", scale);
    addInit(g, "bn_shift", shift);
    addInit(g, "bn_mean", mean);
    addInit(g, "bn_var", var);
    addNode(g, "BatchNormalization", {"d", "bn_scale", "bn_shift", "bn_mean", "bn_var"}, {"dn"});
    dOut = "dn";
  }
  act(dOut, "da");
  std::pair<Tensor, Tensor> narrow;
  std::string chainOut = "da";
  if (k.c2) {
    narrow = weights("narrow", {k.c2, k.c1, 1, 1}, k.c1);
    addNode(g, "Conv", {"da", "narrow_w", "narrow_b"}, {"p"});
    chainOut = "p";
    if (k.residual) {
      addNode(g, "Add", {"p", "s"}, {"r"});
      chainOut = "r";
    }
  }
  const int64_t cOut = k.c2 ? k.c2 : k.c1;
  const auto tail = weights("tail", {5, cOut, 1, 1}, cOut);
  addNode(g, "Conv", {chainOut, "tail_w", "tail_b"}, {"y"});
  if (k.pool) addNode(g, "GlobalAveragePool", {chainOut}, {"m"});

  // The same in float64.
  Planes px(x.data<float>(), x.data<float>() + x.size());
  int64_t oh = 0, ow = 0, dh = 0, dwid = 0;
  const Geometry one{1, 1, {0, 0, 0, 0}};
  const Planes s =
      conv(px, k.n, 3, k.h, k.w, stem.first, stem.second, 1, {3, 1, {1, 1, 1, 1}}, oh, ow);
  const Planes e =
      activate(conv(s, k.n, k.c0, k.h, k.w, wide.first, wide.second, 1, one, oh, ow), k.act);
  Planes d = conv(e, k.n, k.c1, k.h, k.w, depth.first, depth.second, k.c1, k.dw, dh, dwid);
  if (k.batchNorm)
    for (size_t i = 0; i < d.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i) / (dh * dwid) % k.c1;
      d[i] = (d[i] - mean.data<float>()[c]) / std::sqrt(double(var.data<float>()[c]) + 1e-5) *
                 scale.data<float>()[c] +
             shift.data<float>()[c];
    }
  Planes out = activate(d, k.act);
  if (k.c2) {
    out = conv(out, k.n, k.c1, dh, dwid, narrow.first, narrow.second, 1, one, oh, ow);
    if (k.residual)
      for (size_t i = 0; i < out.size(); ++i) out[i] += s[i];
  }
  const Planes want = conv(out, k.n, cOut, dh, dwid, tail.first, tail.second, 1, one, oh, ow);
  addValue(g->add_output(), "y", {k.n, 5, dh, dwid});
  if (k.pool) addValue(g->add_output(), "m", {k.n, cOut, 1, 1});

  SessionOptions options;
  options.profile = true;
  auto session = InferenceSession::create(m, options);
  ASSERT_TRUE(session.ok()) << session.message();
  const std::string what = "N" + std::to_string(k.n) + " " + std::to_string(k.c0) + "->" +
                           std::to_string(k.c1) + "->" + std::to_string(k.c2) + " " +
                           std::to_string(k.h) + "x" + std::to_string(k.w) + " k" +
                           std::to_string(k.dw.k) + " s" + std::to_string(k.dw.stride);
  // Twice: the second run takes the packed weights the first one left.
  for (int run = 0; run < 2; ++run) {
    auto got = (*session)->run({{"x", x}});
    ASSERT_TRUE(got.ok()) << got.message();
    const Tensor& y = got->at("y");
    ASSERT_EQ(y.shape(), (Shape{k.n, 5, dh, dwid})) << what;
    for (int64_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y.data<float>()[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
          << what << " at " << i << ", run " << run;
    if (!k.pool) continue;
    const Tensor& mean = got->at("m");
    ASSERT_EQ(mean.shape(), (Shape{k.n, cOut, 1, 1})) << what;
    for (int64_t i = 0; i < k.n * cOut; ++i) {
      double sum = 0;
      for (int64_t q = 0; q < dh * dwid; ++q) sum += out[i * dh * dwid + q];
      const double m = sum / double(dh * dwid);
      ASSERT_NEAR(mean.data<float>()[i], m, 2e-5 * (1 + std::fabs(m)))
          << what << ": the mean at " << i << ", run " << run;
    }
  }
  // The stem, the chain as one node, and the tail, where the CPU has AVX-512.
  if (!onednn::avx512Usable()) return;
  const std::string report = (*session)->profileReport(20);
  EXPECT_NE(report.find(k.fused ? "Conv x3" : "Conv x5"), std::string::npos) << what << "\n"
                                                                             << report;
  // The pool goes into the chain where the chain ends at its depthwise stage.
  EXPECT_EQ(report.find("GlobalAveragePool") != std::string::npos, k.pool && !k.fused)
      << what << "\n"
      << report;
  EXPECT_EQ(report.find("input 0 in nChw16c; output 0 in NHWC") != std::string::npos,
            k.blockedInput)
      << what << "\n"
      << report;
}

TEST(ConvChain, MatchesFloat64Reference) {
  const Geometry s2{3, 2, {1, 1, 1, 1}}, s1{3, 1, {1, 1, 1, 1}};
  for (const Chain& k : {
           // mobilenet_v2's widening block, one image: its rows shared by the threads.
           Chain{1, 16, 96, 24, 13, 15, s2, Act::kRelu6},
           // Channels in no whole vectors, the residual (X is also the residual).
           Chain{3, 24, 40, 24, 9, 7, s1, Act::kRelu6, true},
           // EfficientNet's widening: no narrowing, SiLU, a 5x5 window, a folded normalization,
           // and squeeze-excitation's mean of the output (one image, then three).
           Chain{2, 8, 20, 0, 11, 6, {5, 1, {2, 2, 2, 2}}, Act::kSilu, false, true},
           Chain{1, 16, 40, 0, 23, 17, s2, Act::kSilu, false, false, false, true, true},
           Chain{3, 16, 40, 0, 9, 9, s1, Act::kRelu6, false, false, false, true, true},
           // One-sided padding (TensorFlow's SAME at stride 2), SiLU with the narrowing.
           Chain{1, 16, 48, 40, 10, 10, {3, 2, {0, 0, 1, 1}}, Act::kSilu, false, true},
           // Planes narrower than the window: every column at the edge.
           Chain{20, 16, 32, 16, 1, 3, s1, Act::kRelu6, true},
           Chain{4, 8, 24, 8, 5, 5, {7, 1, {3, 3, 3, 3}}, Act::kRelu6},
           // mobilenet_v2's last blocks at batch 1: 1.2 MB of weights for a 188 KB widened
           // tensor stay two nodes.
           Chain{1, 160, 960, 160, 7, 7, s1, Act::kRelu6, true, false, false, false},
           // Large planes of 16 channels: the chain's input comes in nChw16c.
           Chain{8, 16, 32, 32, 56, 56, s2, Act::kRelu6, false, false, true},
           // One image of a few rows, where threads sharing its rows would widen many twice:
           // they split its channels (whole vectors and a part of one), then its pixels.
           Chain{1, 16, 72, 16, 7, 7, {5, 1, {2, 2, 2, 2}}, Act::kSilu, true},
           Chain{1, 16, 100, 24, 7, 9, s1, Act::kRelu6},
           Chain{1, 16, 72, 0, 9, 9, s1, Act::kSilu, false, true, false, true, true},
       })
    check(k);
}

}  // namespace
