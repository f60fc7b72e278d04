// The direct single-input-channel convolution (engine/onednn/single_channel_conv.cpp) against a
// plain double-precision reference written from the definition, on both of its code paths
// (AVX-512 register blocks and the portable loops): forward with and without the fused
// Relu/MaxPool epilogue, and the weight and bias gradients. The geometries cover partial
// channel and tap blocks, planes that are not a whole number of vectors, padding that is
// asymmetric or negative, dilation, larger kernels and strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/onednn/onednn_backend.h"

namespace dw::engine::onednn {
namespace {

struct Geometry {
  int64_t n, oc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, padB, padR;
};

SingleChannelConv convOf(const Geometry& q) {
  const int64_t oh = (q.h + q.ph + q.padB - ((q.kh - 1) * q.dh + 1)) / q.sh + 1;
  const int64_t ow = (q.w + q.pw + q.padR - ((q.kw - 1) * q.dw + 1)) / q.sw + 1;
  return {q.n, q.oc, q.h, q.w, oh, ow, q.kh, q.kw, q.sh, q.sw, q.ph, q.pw, q.dh, q.dw};
}

std::vector<float> randoms(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

double xAt(const SingleChannelConv& g, const std::vector<float>& x, int64_t n, int64_t oh,
           int64_t ow, int64_t kh, int64_t kw) {
  const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
  if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) return 0;
  return x[(n * g.h + ih) * g.w + iw];
}

std::vector<double> referenceForward(const SingleChannelConv& g, const std::vector<float>& x,
                                     const std::vector<float>& w, const std::vector<float>& b) {
  std::vector<double> y(g.n * g.oc * g.oh * g.ow);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.oc; ++o)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          double s = b[o];
          for (int64_t kh = 0; kh < g.kh; ++kh)
            for (int64_t kw = 0; kw < g.kw; ++kw)
              s += w[(o * g.kh + kh) * g.kw + kw] * xAt(g, x, n, oh, ow, kh, kw);
          y[((n * g.oc + o) * g.oh + oh) * g.ow + ow] = s;
        }
  return y;
}

// One geometry's convolution with random input, weights and bias, and its reference output.
struct Problem {
  Problem(const Geometry& q, unsigned seed)
      : g(convOf(q)),
        x(randoms(g.n * g.h * g.w, seed)),
        w(randoms(g.oc * g.kh * g.kw, seed + 1)),
        b(randoms(g.oc, seed + 2)),
        ref(referenceForward(g, x, w, b)) {}
  SingleChannelConv g;
  std::vector<float> x, w, b;
  std::vector<double> ref;
};

class SingleChannelConvKernel : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { singleChannelConvGenericOnly(GetParam()); }
  void TearDown() override { singleChannelConvGenericOnly(false); }
};

const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> all = {
      // n, oc, h, w, kh, kw, sh, sw, ph, pw, dh, dw, padB, padR
      {3, 32, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // the Fashion-MNIST CNN's first layer
      {2, 7, 11, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    // channel blocks of 4 + 3 and 2 + 1
      {2, 5, 13, 17, 5, 5, 1, 1, 2, 0, 1, 1, 1, 3},   // 25 taps: tap blocks 9 + 9 + 7
      {2, 3, 10, 12, 3, 2, 1, 1, 2, 1, 2, 3, 0, 2},   // dilation, asymmetric padding
      {1, 6, 9, 9, 3, 3, 1, 1, -1, 0, 1, 1, 0, 0},    // negative (cropping) padding
      {2, 4, 1, 40, 1, 7, 1, 1, 0, 3, 1, 1, 0, 3},    // one row
      {2, 5, 12, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   // stride 2: the plain loops
  };
  return all;
}

TEST_P(SingleChannelConvKernel, ForwardMatchesReference) {
  unsigned seed = 1;
  for (const auto& q : geometries()) {
    const Problem pr(q, seed += 3);
    const auto& [g, x, w, b, ref] = pr;
    std::vector<float> y(ref.size(), std::numeric_limits<float>::quiet_NaN());
    singleChannelConvForward(g, x.data(), w.data(), b.data(), y.data());
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], ref[i], 1e-5 * (1 + std::abs(ref[i])))
          << "geometry " << seed << " at " << i;
    // Without a bias.
    std::vector<float> zero(g.oc, 0.0f), y0(ref.size());
    const auto ref0 = referenceForward(g, x, w, zero);
    singleChannelConvForward(g, x.data(), w.data(), nullptr, y0.data());
    for (size_t i = 0; i < y0.size(); ++i)
      ASSERT_NEAR(y0[i], ref0[i], 1e-5 * (1 + std::abs(ref0[i])));
  }
}

TEST_P(SingleChannelConvKernel, FusedReluMaxPoolMatchesReference) {
  unsigned seed = 100;
  for (const auto& q : geometries()) {
    const Problem pr(q, seed += 3);
    const auto& [g, x, w, b, ref] = pr;
    // The 2x2 / stride 2 window has its own vector path; 3x2 / stride (2, 1) takes the general one.
    for (auto [kh, kw, sh, sw] : {std::array<int64_t, 4>{2, 2, 2, 2}, {3, 2, 2, 1}}) {
      if (g.oh < kh || g.ow < kw) continue;
      for (bool relu : {false, true}) {
        SingleChannelEpilogue ep;
        ep.relu = relu;
        ep.kh = kh, ep.kw = kw, ep.sh = sh, ep.sw = sw;
        ep.oh = (g.oh - kh) / sh + 1;
        ep.ow = (g.ow - kw) / sw + 1;
        std::vector<float> y(g.n * g.oc * ep.oh * ep.ow, std::numeric_limits<float>::quiet_NaN());
        singleChannelConvForward(g, x.data(), w.data(), b.data(), y.data(), &ep);
        for (int64_t p = 0; p < g.n * g.oc; ++p)
          for (int64_t oh = 0; oh < ep.oh; ++oh)
            for (int64_t ow = 0; ow < ep.ow; ++ow) {
              double m = -std::numeric_limits<double>::infinity();
              for (int64_t i = 0; i < kh; ++i)
                for (int64_t j = 0; j < kw; ++j)
                  m = std::max(m, ref[(p * g.oh + oh * sh + i) * g.ow + ow * sw + j]);
              if (relu) m = std::max(m, 0.0);
              ASSERT_NEAR(y[(p * ep.oh + oh) * ep.ow + ow], m, 1e-5 * (1 + std::abs(m)))
                  << "geometry " << seed << " window " << kh << "x" << kw << " relu " << relu;
            }
      }
    }
  }
}

TEST_P(SingleChannelConvKernel, WeightGradientMatchesReference) {
  unsigned seed = 200;
  for (const auto& q : geometries()) {
    const auto g = convOf(q);
    const auto x = randoms(g.n * g.h * g.w, seed++);
    const auto dy = randoms(g.n * g.oc * g.oh * g.ow, seed++);
    std::vector<float> dw(g.oc * g.kh * g.kw), db(g.oc);
    singleChannelConvWeightGrad(g, x.data(), dy.data(), dw.data(), db.data());
    for (int64_t o = 0; o < g.oc; ++o) {
      double sb = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < g.oh * g.ow; ++i) sb += dy[(n * g.oc + o) * g.oh * g.ow + i];
      ASSERT_NEAR(db[o], sb, 1e-4 * (1 + std::abs(sb))) << "geometry " << seed << " bias " << o;
      for (int64_t kh = 0; kh < g.kh; ++kh)
        for (int64_t kw = 0; kw < g.kw; ++kw) {
          double s = 0;
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t oh = 0; oh < g.oh; ++oh)
              for (int64_t ow = 0; ow < g.ow; ++ow)
                s += dy[((n * g.oc + o) * g.oh + oh) * g.ow + ow] * xAt(g, x, n, oh, ow, kh, kw);
          ASSERT_NEAR(dw[(o * g.kh + kh) * g.kw + kw], s, 1e-4 * (1 + std::abs(s)))
              << "geometry " << seed << " channel " << o << " tap " << kh << "," << kw;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, SingleChannelConvKernel, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Portable" : "Native"; });

}  // namespace
}  // namespace dw::engine::onednn
