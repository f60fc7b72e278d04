// Optimizers, clipping, schedules and regularizers against PyTorch golden values
// (tests/golden/training_optimizers.json, from tests/golden/make_training_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/training/optimizers.h"

namespace dw::engine::training {
namespace {

using json = nlohmann::json;

json loadGolden() {
  std::ifstream f(std::string(DW_SOURCE_DIR) + "/tests/golden/training_optimizers.json");
  EXPECT_TRUE(f.good()) << "golden file missing: run tests/golden/make_training_golden.py";
  return json::parse(f);
}

OptimizerConfig configFrom(const json& c) {
  OptimizerConfig o;
  o.type = c.at("type");
  o.lr = c.at("lr");
  o.momentum = c.value("momentum", 0.0);
  o.dampening = c.value("dampening", 0.0);
  o.nesterov = c.value("nesterov", false);
  o.beta1 = c.value("beta1", 0.9);
  o.beta2 = c.value("beta2", 0.999);
  o.eps = c.value("eps", 1e-8);
  o.weightDecay = c.value("weight_decay", 0.0);
  o.adamwMode = c.value("adamw_mode", std::string("pytorch"));
  o.amsgrad = c.value("amsgrad", false);
  o.alpha = c.value("alpha", 0.99);
  o.centered = c.value("centered", false);
  o.lrDecay = c.value("lr_decay", 0.0);
  o.initialAccumulator = c.value("initial_accumulator", 0.0);
  return o;
}

TEST(Optimizers, MatchPyTorchGolden) {
  const json g = loadGolden();
  const auto w0 = g.at("w0").get<std::vector<float>>();
  const auto grads = g.at("grads").get<std::vector<std::vector<float>>>();
  ASSERT_GE(g.at("cases").size(), 10u);
  for (const auto& c : g.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    auto opt = Optimizer::create(configFrom(c.at("config")));
    ASSERT_TRUE(opt.ok()) << opt.message();
    std::vector<float> w = w0;
    ParamState state;
    const auto expected = c.at("weights").get<std::vector<std::vector<float>>>();
    for (size_t s = 0; s < expected.size(); ++s) {
      std::vector<float> gr = grads[s];
      (*opt)->update(w.data(), gr.data(), static_cast<int64_t>(w.size()), (*opt)->config().lr,
                     state);
      for (size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(w[i], expected[s][i], 2e-6 + 2e-5 * std::fabs(expected[s][i]))
            << "step " << s + 1 << " element " << i;
    }
    EXPECT_EQ(state.step, static_cast<int64_t>(expected.size()));
  }
}

TEST(Optimizers, ClipGradNormMatchesPyTorch) {
  const json g = loadGolden();
  const auto grads = g.at("grads").get<std::vector<std::vector<float>>>();
  for (const auto& c : g.at("clip")) {
    std::vector<float> a(grads[0].begin(), grads[0].begin() + 5);
    std::vector<float> b(grads[1].begin(), grads[1].begin() + 7);
    const double type = c.at("norm_type").is_string() ? INFINITY : c.at("norm_type").get<double>();
    SCOPED_TRACE(type);
    const double norm = clipGradNorm({{a.data(), 5}, {b.data(), 7}}, c.at("max_norm"), type);
    EXPECT_NEAR(norm, c.at("norm").get<double>(), 1e-5 * c.at("norm").get<double>());
    const auto clipped = c.at("clipped").get<std::vector<std::vector<float>>>();
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(a[i], clipped[0][i], 1e-6);
    for (int i = 0; i < 7; ++i) EXPECT_NEAR(b[i], clipped[1][i], 1e-6);
  }
}

TEST(Optimizers, ClipLeavesSmallGradientsAlone) {
  std::vector<float> g = {0.1f, -0.2f};
  const double n = clipGradNorm({{g.data(), 2}}, 10.0, 2.0);
  EXPECT_NEAR(n, std::sqrt(0.05), 1e-7);
  EXPECT_FLOAT_EQ(g[0], 0.1f);
  EXPECT_FLOAT_EQ(g[1], -0.2f);
}

TEST(Optimizers, Schedules) {
  ScheduleConfig s;
  EXPECT_DOUBLE_EQ(scheduledLr(s, 0.1, 1000), 0.1);
  s.type = "step";
  s.stepSize = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(scheduledLr(s, 0.1, 9), 0.1);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 0.1, 10), 0.05);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 0.1, 25), 0.025);
  s = ScheduleConfig{};
  s.type = "warmup_linear";
  s.warmupSteps = 4;
  s.totalSteps = 14;
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 0), 0.25);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 9), 0.5);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 14), 0.0);
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 20), 0.0);
  s.type = "cosine";
  s.warmupSteps = 0;
  s.totalSteps = 100;
  s.minLr = 0.1;
  EXPECT_DOUBLE_EQ(scheduledLr(s, 1.0, 0), 1.0);
  EXPECT_NEAR(scheduledLr(s, 1.0, 50), 0.55, 1e-12);
  EXPECT_NEAR(scheduledLr(s, 1.0, 100), 0.1, 1e-12);
  EXPECT_NEAR(scheduledLr(s, 1.0, 150), 0.1, 1e-12);
}

TEST(Optimizers, Regularizers) {
  const std::vector<float> w = {1.f, -2.f, 0.f};
  Regularizer l1{"l1", 0.1, 0.0};
  Regularizer l2{"l2", 0.0, 0.5};
  Regularizer both{"l1l2", 0.1, 0.5};
  EXPECT_NEAR(l1.penalty(w.data(), 3), 0.3, 1e-7);
  EXPECT_NEAR(l2.penalty(w.data(), 3), 2.5, 1e-7);
  EXPECT_NEAR(both.penalty(w.data(), 3), 2.8, 1e-7);
  std::vector<float> g(3, 0.f);
  both.addGradient(w.data(), g.data(), 3);
  EXPECT_FLOAT_EQ(g[0], 0.1f + 1.f);
  EXPECT_FLOAT_EQ(g[1], -0.1f - 2.f);
  EXPECT_FLOAT_EQ(g[2], 0.f);
  // The penalty's gradient matches a finite difference of the penalty.
  std::vector<float> wv = {0.7f, -0.3f, 1.2f};
  std::vector<float> ga(3, 0.f);
  both.addGradient(wv.data(), ga.data(), 3);
  for (int i = 0; i < 3; ++i) {
    auto wp = wv, wm = wv;
    wp[i] += 1e-3f;
    wm[i] -= 1e-3f;
    const double fd = (both.penalty(wp.data(), 3) - both.penalty(wm.data(), 3)) / 2e-3;
    EXPECT_NEAR(ga[i], fd, 1e-3);
  }
}

// The same update from the same state gives the same bits wherever the buffers lie. The
// vectorized update loops fall back to their scalar copies when buffers lie closer together than
// a vector (runtime alias checks) and peel elements for alignment, so which copy computes an
// element depends on the addresses: both copies must round alike. A multiply-add fused in one
// copy and not the other made two identical Trainer::fit runs differ in the last bits.
TEST(Optimizers, UpdateIsIndependentOfBufferAddresses) {
  OptimizerConfig adam;
  adam.type = "adam";
  adam.lr = 0.05;
  OptimizerConfig adamw = adam;
  adamw.type = "adamw";
  adamw.weightDecay = 0.01;
  OptimizerConfig hf = adamw;
  hf.adamwMode = "huggingface";
  OptimizerConfig ams = adam;
  ams.amsgrad = true;
  ams.weightDecay = 0.01;
  OptimizerConfig rms;
  rms.type = "rmsprop";
  rms.lr = 0.01;
  rms.momentum = 0.9;
  rms.centered = true;
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.weightDecay = 0.01;
  for (const OptimizerConfig& config : {adam, adamw, hf, ams, rms, sgd}) {
    auto opt = Optimizer::create(config);
    ASSERT_TRUE(opt.ok()) << opt.message();
    for (int64_t n : {8, 37, 100}) {
      SCOPED_TRACE(config.type + (config.amsgrad ? " amsgrad " : " ") + config.adamwMode +
                   " n=" + std::to_string(n));
      std::vector<float> w0(n), g0(n);
      for (int64_t i = 0; i < n; ++i) {
        w0[i] = std::sin(0.7f * static_cast<float>(i) + 0.3f);
        g0[i] = 0.05f * std::cos(1.3f * static_cast<float>(i));
      }
      // Weight and gradient in one line of memory, `gap` floats apart (or far apart), and the
      // state buffers wherever the allocator puts them; a few steps, so the moments mix.
      alignas(64) float store[2 * 100 + 64 + 256];
      auto run = [&](size_t wOffset, size_t gap) {
        float* w = store + wOffset;
        float* g = w + n + gap;
        std::memcpy(w, w0.data(), n * sizeof(float));
        ParamState state;
        for (int step = 0; step < 4; ++step) {
          for (int64_t i = 0; i < n; ++i) g[i] = g0[i] * static_cast<float>(step + 1);
          (*opt)->update(w, g, n, config.lr, state);
        }
        return std::vector<float>(w, w + n);
      };
      const std::vector<float> ref = run(0, 256);
      for (size_t wOffset : {0, 1, 4, 13})
        for (size_t gap : {0, 1, 3, 4, 8, 16, 37, 64}) {
          const std::vector<float> got = run(wOffset, gap);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(std::memcmp(&got[i], &ref[i], sizeof(float)), 0)
                << "element " << i << ": " << got[i] << " vs " << ref[i] << " (w at +" << wOffset
                << " floats, g " << gap << " floats after it)";
        }
    }
  }
}

TEST(Optimizers, RejectsBadConfigWithFieldName) {
  OptimizerConfig c;
  c.type = "lbfgs";
  auto o = Optimizer::create(c);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.message().find("lbfgs"), std::string::npos);
  c = OptimizerConfig{};
  c.beta1 = 1.5;
  EXPECT_NE(validateOptimizerConfig(c).message().find("beta1"), std::string::npos);
  c = OptimizerConfig{};
  c.type = "sgd";
  c.nesterov = true;
  EXPECT_NE(validateOptimizerConfig(c).message().find("nesterov"), std::string::npos);
  c = OptimizerConfig{};
  c.schedule.type = "exp";
  EXPECT_NE(validateOptimizerConfig(c).message().find("schedule"), std::string::npos);
}

}  // namespace
}  // namespace dw::engine::training
