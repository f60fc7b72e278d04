// The explicit AVX-512 SiLU (engine/onednn/vector_math.cpp) against float64 from the
// definition: every length up to a few vectors (the masked tail), lengths that split across
// threads, other alphas, and the extremes where its exponential is clamped.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/onednn/vector_math.h"

namespace dw::engine::onednn {
namespace {

double swish(double x, double alpha) {
  return x / (1.0 + std::exp(-alpha * x));
}

// Relative error against float64, with an absolute floor where the result underflows.
void expectClose(const std::vector<float>& x, const std::vector<float>& y, float alpha) {
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = swish(x[i], alpha);
    if (std::isinf(want)) {
      ASSERT_EQ(y[i], want) << "x " << x[i];
      continue;
    }
    // alpha * x rounded to float moves e^(-alpha x) by up to |alpha x| float epsilons.
    const double rounding = alpha == 1.0f ? 0.0 : std::abs(double(alpha) * x[i]) * 1.2e-7;
    ASSERT_LE(std::abs(y[i] - want), (4e-7 + rounding) * std::abs(want) + 1e-35)
        << "x " << x[i] << " alpha " << alpha << " at " << i << " of " << x.size();
  }
}

std::vector<float> randoms(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(VectorMath, SwishMatchesFloat64AtEveryTailLength) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (size_t n = 0; n <= 70; ++n) {
    // A guard value after the end must survive the masked tail.
    std::vector<float> x = randoms(n + 1, static_cast<unsigned>(n), 12.0f);
    x[n] = 1234.5f;
    std::vector<float> y = x;
    swishInPlace(y.data(), static_cast<int64_t>(n), 1.0f);
    EXPECT_EQ(y[n], 1234.5f) << n;
    x.pop_back();
    y.pop_back();
    expectClose(x, y, 1.0f);
  }
}

TEST(VectorMath, SwishMatchesFloat64AcrossThreadsAndAlphas) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (float alpha : {1.0f, 1.702f, 0.25f, -0.5f}) {
    const std::vector<float> x = randoms(200003, 7, 30.0f);
    std::vector<float> y = x;
    swishInPlace(y.data(), static_cast<int64_t>(y.size()), alpha);
    expectClose(x, y, alpha);
  }
}

TEST(VectorMath, SwishAtTheExtremes) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,  -0.0f,  1e-30f, -1e-30f, 80.0f, -80.0f, 87.0f, -87.0f,
                          88.0f, -88.0f, 100.0f, -100.0f, 1e30f, -1e30f, inf};
  std::vector<float> y = x;
  swishInPlace(y.data(), static_cast<int64_t>(y.size()), 1.0f);
  expectClose(x, y, 1.0f);
  // NaN stays NaN; -inf * sigmoid(-inf) is -inf * 0, NaN as in the definition.
  std::vector<float> z = {std::numeric_limits<float>::quiet_NaN(), -inf};
  swishInPlace(z.data(), 2, 1.0f);
  EXPECT_TRUE(std::isnan(z[0]));
  EXPECT_TRUE(std::isnan(z[1]));
}

}  // namespace
}  // namespace dw::engine::onednn
