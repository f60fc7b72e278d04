// The explicit AVX-512 functions (engine/onednn/vector_math.cpp) against float64 from their
// definitions: every length up to a few vectors (the masked tail), lengths that split across
// threads, other alphas, and the extremes where the exponential is clamped; swish, sigmoid,
// softmax rows, row extrema and row dots, and an LSTM cell row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
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

// Sigmoid against float64: every tail length with a guard after the end, a length that splits
// across threads, and the extremes (clamped exponential, infinities, NaN).
TEST(VectorMath, SigmoidMatchesFloat64) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const float inf = std::numeric_limits<float>::infinity();
  auto check = [](const std::vector<float>& x, const std::vector<float>& y) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = 1.0 / (1.0 + std::exp(-double(x[i])));
      ASSERT_LE(std::abs(y[i] - want), 4e-7 * want + 1e-35) << "x " << x[i] << " at " << i;
    }
  };
  for (size_t n = 0; n <= 40; ++n) {
    std::vector<float> x = randoms(n + 1, static_cast<unsigned>(n + 100), 12.0f);
    x[n] = 1234.5f;
    std::vector<float> y = x;
    sigmoidInPlace(y.data(), static_cast<int64_t>(n));
    EXPECT_EQ(y[n], 1234.5f) << n;
    x.pop_back();
    y.pop_back();
    check(x, y);
  }
  std::vector<float> x = randoms(200003, 8, 30.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 80.0f, -80.0f, 87.0f, -87.0f, 88.0f, -88.0f, 100.0f,
                  -100.0f, 1e30f, -1e30f, inf, -inf})
    x.push_back(v);
  std::vector<float> y = x;
  sigmoidInPlace(y.data(), static_cast<int64_t>(y.size()));
  check(x, y);
  std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  sigmoidInPlace(nan.data(), 1);
  EXPECT_TRUE(std::isnan(nan[0]));
}

// Softmax rows against float64: every row length up to a few vectors and some long ones, in
// place and not, enough rows to split across threads, rows with large and -inf entries.
TEST(VectorMath, SoftmaxRowsMatchFloat64) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {63, 64, 65, 128, 1000}) lengths.push_back(n);
  for (int64_t n : lengths) {
    const int64_t rows = 20000 / n + 1;
    std::vector<float> x = randoms(static_cast<size_t>(rows * n), static_cast<unsigned>(n), 20.0f);
    if (n > 1) {  // a masked score (a row of them all is 0 / 0, NaN as in the definition)
      x[0] = -std::numeric_limits<float>::infinity();
      x[1] = 80.0f;
    }
    std::vector<float> y(x.size(), -1.0f), inPlace = x;
    softmaxRows(x.data(), y.data(), rows, n);
    softmaxRows(inPlace.data(), inPlace.data(), rows, n);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * n;
      double top = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) top = std::max<double>(top, xr[i]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(double(xr[i]) - top);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(double(xr[i]) - top) / sum;
        const size_t at = static_cast<size_t>(r * n + i);
        // x - max rounded to float moves its exponential by up to |x - max| float epsilons.
        const double rounding = std::isinf(xr[i]) ? 0.0 : std::abs(double(xr[i]) - top) * 6e-8;
        ASSERT_LE(std::abs(y[at] - want), (1e-6 + rounding) * want + 1e-37)
            << "n " << n << " row " << r;
        ASSERT_EQ(y[at], inPlace[at]);
      }
    }
  }
}

// Row dot products against float64: every tail length of K up to a few vectors, row counts
// that leave partial blocks of four, with and without a bias, and a product large enough to
// split across threads.
TEST(VectorMath, RowDotsMatchFloat64) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (N, K)
  for (int64_t k = 1; k <= 40; ++k) shapes.push_back({7, k});
  for (int64_t n = 1; n <= 9; ++n) shapes.push_back({n, 33});
  shapes.push_back({1000, 1280});
  for (const auto& [N, K] : shapes)
    for (bool withBias : {false, true}) {
      const std::vector<float> a = randoms(K, 1, 1.0f), B = randoms(N * K, 2, 1.0f),
                               bias = randoms(N, 3, 1.0f);
      std::vector<float> y(N + 1, 99.0f);
      rowDots(a.data(), B.data(), N, K, withBias ? bias.data() : nullptr, y.data());
      EXPECT_EQ(y[N], 99.0f) << "wrote past the end";
      for (int64_t n = 0; n < N; ++n) {
        double want = withBias ? bias[n] : 0.0, scale = std::abs(want);
        for (int64_t k = 0; k < K; ++k) {
          want += double(a[k]) * B[n * K + k];
          scale += std::abs(double(a[k]) * B[n * K + k]);
        }
        ASSERT_NEAR(y[n], want, 1e-6 * scale) << "N " << N << " K " << K << " row " << n;
      }
    }
}

}  // namespace
}  // namespace dw::engine::onednn

namespace dw::engine::onednn {
namespace {

// Row maxima and minima at every row length up to a few vectors (the masked tail), across
// threads, with a NaN at the start, in the middle or in the tail of a row.
TEST(VectorMath, RowExtremaMatchAtEveryLength) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int64_t n = 1; n <= 50; ++n) {
    const int64_t rows = n == 50 ? 4001 : 7;
    std::vector<float> x = randoms(static_cast<size_t>(rows * n), static_cast<unsigned>(n), 9.0f);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    x[static_cast<size_t>(1 * n)] = nan;          // row 1, first
    x[static_cast<size_t>(3 * n + n / 2)] = nan;  // row 3, middle
    x[static_cast<size_t>(5 * n + n - 1)] = nan;  // row 5, last (the tail)
    for (bool max : {true, false}) {
      std::vector<float> y(static_cast<size_t>(rows), 0.0f);
      rowExtrema(x.data(), y.data(), rows, n, max);
      for (int64_t r = 0; r < rows; ++r) {
        bool hasNan = false;
        float want = x[static_cast<size_t>(r * n)];
        for (int64_t i = 0; i < n; ++i) {
          const float v = x[static_cast<size_t>(r * n + i)];
          hasNan |= std::isnan(v);
          want = max ? std::max(want, v) : std::min(want, v);
        }
        if (hasNan)
          ASSERT_TRUE(std::isnan(y[r])) << "n " << n << " row " << r;
        else
          ASSERT_EQ(y[r], want) << "n " << n << " row " << r << (max ? " max" : " min");
      }
    }
  }
}

}  // namespace
}  // namespace dw::engine::onednn

namespace dw::engine::onednn {
namespace {

// One LSTM row (onednn::lstmCell) against float64 from ONNX's cell equations: every unit count
// up to a few vectors (the masked tail, with guards after each output), with and without the
// bias and the peepholes, pre-activations from small (tanh's series) to saturating, and NaN and
// infinities carried as the definitions carry them.
TEST(VectorMath, LstmCellMatchesFloat64) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  for (int64_t w = 1; w <= 40; ++w)
    for (int variant = 0; variant < 4; ++variant) {
      const bool withBias = variant & 1, withPeep = variant & 2;
      const int64_t lda = 4 * w + 3, ldx = 4 * w + 5, ldb = w + 2, ldp = w + 1;
      const unsigned seed = static_cast<unsigned>(w * 4 + variant);
      // Products spread wide (saturated gates), the rest small (tanh's series below 0.3).
      const std::vector<float> a = randoms(4 * lda, seed, 6.0f),
                               x = randoms(4 * ldx, seed + 1, 0.2f),
                               bias = randoms(4 * ldb, seed + 2, 0.2f),
                               peep = randoms(3 * ldp, seed + 3, 0.5f),
                               c0 = randoms(w + 1, seed + 4, 2.0f);
      std::vector<float> c = c0, h(w + 1, 77.0f), y(w + 1, 88.0f);
      lstmCell(a.data(), lda, x.data(), ldx, withBias ? bias.data() : nullptr, ldb,
               withPeep ? peep.data() : nullptr, ldp, c.data(), h.data(), y.data(), w);
      EXPECT_EQ(c[w], c0[w]) << "c written past w " << w;
      EXPECT_EQ(h[w], 77.0f) << "h written past w " << w;
      EXPECT_EQ(y[w], 88.0f) << "y written past w " << w;
      for (int64_t j = 0; j < w; ++j) {
        auto pre = [&](int q) {
          return double(a[q * lda + j]) + x[q * ldx + j] + (withBias ? bias[q * ldb + j] : 0.0f);
        };
        const double cp = c0[j];
        const double gi = pre(0) + (withPeep ? double(peep[j]) * cp : 0.0);
        const double gf = pre(2) + (withPeep ? double(peep[2 * ldp + j]) * cp : 0.0);
        const double cn = sig(gf) * cp + sig(gi) * std::tanh(pre(3));
        const double go = pre(1) + (withPeep ? double(peep[ldp + j]) * cn : 0.0);
        const double hn = sig(go) * std::tanh(cn);
        const std::string at = "w " + std::to_string(w) + " variant " + std::to_string(variant) +
                               " unit " + std::to_string(j);
        ASSERT_NEAR(c[j], cn, 1e-6 * (1 + std::abs(cn))) << at;
        ASSERT_NEAR(h[j], hn, 1e-6) << at;
        ASSERT_EQ(y[j], h[j]) << at;
      }
    }
  // NaN stays NaN; infinite pre-activations saturate the gates.
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  //            i     o     f     c
  float a[4] = {inf, -inf, -inf, 0.25f};
  float x[4] = {0, 0, 0, 0};
  float c = 3.0f, h = 0, y = 0;
  lstmCell(a, 1, x, 1, nullptr, 0, nullptr, 0, &c, &h, &y, 1);
  EXPECT_NEAR(c, std::tanh(0.25), 1e-7);  // forget 0, input 1
  // Output gate 0, to the 1e-38 that sigmoid's clamped exponential leaves (as ops/unary.h's).
  EXPECT_NEAR(h, 0.0f, 1e-37f);
  a[3] = nan;
  c = 3.0f;
  lstmCell(a, 1, x, 1, nullptr, 0, nullptr, 0, &c, &h, &y, 1);
  EXPECT_TRUE(std::isnan(c) && std::isnan(h));
}

// swishRows over strided rows: every row's n values, nothing between them.
TEST(VectorMath, SwishRowsLeaveTheGaps) {
  if (!vectorMathAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t rows = 5, n = 21, ld = 40;
  const std::vector<float> x = randoms(rows * ld, 9, 10.0f);
  std::vector<float> y = x;
  swishRows(y.data(), rows, n, ld, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < ld; ++i) {
      const size_t k = static_cast<size_t>(r * ld + i);
      if (i >= n)
        ASSERT_EQ(y[k], x[k]) << "row " << r << " gap " << i;
      else
        ASSERT_NEAR(y[k], swish(x[k], 1.0), 4e-7 * std::abs(swish(x[k], 1.0)) + 1e-35);
    }
}

}  // namespace
}  // namespace dw::engine::onednn
