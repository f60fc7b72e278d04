// Optimizer update rules. Each loop keeps PyTorch's order of float operations where it matters
// for matching its results to ~1e-6 (e.g. Adam's denominator sqrt(v)/sqrt(bc2) + eps), with one
// deliberate exception: Adam multiplies by 1/sqrt(bc2) where PyTorch divides by sqrt(bc2), which
// moves the denominator by about an ulp (see Step::run).
#include "engine/training/optimizers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace dw::engine::training {

double scheduledLr(const ScheduleConfig& s, double lr, int64_t step) {
  if (s.type == "constant") return lr;
  if (s.type == "step") {
    const int64_t k = s.stepSize > 0 ? step / s.stepSize : 0;
    return lr * std::pow(s.gamma, static_cast<double>(k));
  }
  if (s.warmupSteps > 0 && step < s.warmupSteps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(s.warmupSteps);
  if (s.type == "warmup_linear") {
    if (s.totalSteps <= s.warmupSteps) return lr;
    const double left = static_cast<double>(s.totalSteps - step) /
                        static_cast<double>(s.totalSteps - s.warmupSteps);
    return lr * std::max(0.0, left);
  }
  if (s.type == "cosine") {
    if (s.totalSteps <= s.warmupSteps) return lr;
    const double t = std::min(1.0, static_cast<double>(step - s.warmupSteps) /
                                       static_cast<double>(s.totalSteps - s.warmupSteps));
    return s.minLr + (lr - s.minLr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  }
  return lr;
}

const std::vector<std::string>& scheduleTypes() {
  static const std::vector<std::string> types = {"constant", "step", "warmup_linear", "cosine"};
  return types;
}

Status validateOptimizerConfig(const OptimizerConfig& c) {
  static const char* kTypes[] = {"sgd", "adam", "adamw", "adagrad", "rmsprop"};
  if (std::find(std::begin(kTypes), std::end(kTypes), c.type) == std::end(kTypes))
    return Status::error("optimizer type '" + c.type +
                         "' is not supported; use sgd, adam, adamw, adagrad or rmsprop");
  if (!(c.lr >= 0)) return Status::error("optimizer lr must be >= 0");
  if (c.momentum < 0) return Status::error("optimizer momentum must be >= 0");
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
    return Status::error("optimizer nesterov needs momentum > 0 and dampening 0");
  if (c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1)
    return Status::error("optimizer beta1 and beta2 must be in [0, 1)");
  if (!(c.eps >= 0)) return Status::error("optimizer eps must be >= 0");
  if (c.weightDecay < 0) return Status::error("optimizer weight_decay must be >= 0");
  if (c.adamwMode != "pytorch" && c.adamwMode != "huggingface")
    return Status::error("optimizer adamw_mode '" + c.adamwMode +
                         "' is not supported; use pytorch or huggingface");
  const auto& schedules = scheduleTypes();
  if (std::find(schedules.begin(), schedules.end(), c.schedule.type) == schedules.end())
    return Status::error("schedule type '" + c.schedule.type +
                         "' is not supported; use constant, step, warmup_linear or cosine");
  if (c.clipNorm < 0) return Status::error("clip_norm must be >= 0");
  return Status();
}

ops::AdagradScalars adagradScalars(const OptimizerConfig& c, double lr, int64_t step) {
  return {static_cast<float>(lr / (1.0 + static_cast<double>(step - 1) * c.lrDecay)),
          static_cast<float>(c.eps), static_cast<float>(c.weightDecay)};
}

ops::RmsPropScalars rmspropScalars(const OptimizerConfig& c, double lr) {
  return {static_cast<float>(lr), static_cast<float>(c.alpha), static_cast<float>(c.eps),
          static_cast<float>(c.momentum), static_cast<float>(c.weightDecay)};
}

namespace {

std::vector<float>& buf(ParamState& s, const char* name, int64_t n, float init = 0.f) {
  auto& b = s.buffers[name];
  if (b.size() != static_cast<size_t>(n)) b.assign(static_cast<size_t>(n), init);
  return b;
}

void addWeightDecay(const float* w, float* g, int64_t n, float wd) {
  if (wd == 0) return;
  for (int64_t i = 0; i < n; ++i) g[i] += wd * w[i];
}

// torch.optim.SGD.
class Sgd final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void update(float* w, float* g, int64_t n, double lr, ParamState& s) const override {
    const float flr = static_cast<float>(lr), mom = static_cast<float>(config_.momentum);
    const float damp = 1.f - static_cast<float>(config_.dampening);
    addWeightDecay(w, g, n, static_cast<float>(config_.weightDecay));
    if (mom != 0) {
      const bool first = s.buffers.find("momentum") == s.buffers.end();
      float* b = buf(s, "momentum", n).data();
      if (first) {
        std::copy(g, g + n, b);
      } else {
        for (int64_t i = 0; i < n; ++i) b[i] = mom * b[i] + damp * g[i];
      }
      if (config_.nesterov) {
        for (int64_t i = 0; i < n; ++i) w[i] -= flr * (g[i] + mom * b[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) w[i] -= flr * b[i];
      }
    } else {
      for (int64_t i = 0; i < n; ++i) w[i] -= flr * g[i];
    }
    ++s.step;
  }
};

// One Adam/AdamW update over [lo, hi), in PyTorch's order of float operations. Each stage is its
// own branch-free loop so that it vectorizes. This file is built without multiply-add contraction
// (engine/CMakeLists.txt): the scalar copies of these loops, which run the elements an alignment
// peel or a failed alias check leaves them, must round exactly as the vector copies do.
struct Step {
  float *w, *g, *m, *v, *vmax;
  float b1, b2, eps, stepSize, invSbc2 = 1, preScale = 1, l2 = 0, postDecay = 0;
  bool hf;
  // Cloned for AVX-512: the update is bound by sqrt and division throughput, which 512-bit
  // vectors quadruple over the baseline SSE2 build; the loader picks the clone at run time.
  __attribute__((target_clones("avx512f", "default"))) void run(int64_t lo, int64_t hi) const {
    float* __restrict pw = w + lo;
    float* __restrict pg = g + lo;
    float* __restrict pm = m + lo;
    float* __restrict pv = v + lo;
    const int64_t n = hi - lo;
    // Locals, not members: the compiler must otherwise assume stores through pw/pm/pv change them.
    const float scale = preScale, l2c = l2, fb1 = b1, fb2 = b2, omb1 = 1.f - b1, omb2 = 1.f - b2;
    const float step = stepSize, e = eps, is2 = invSbc2, decay = postDecay;
    if (scale != 1)
      for (int64_t i = 0; i < n; ++i) pw[i] *= scale;
    if (l2c != 0)
      for (int64_t i = 0; i < n; ++i) pg[i] += l2c * pw[i];
    for (int64_t i = 0; i < n; ++i) {
      pm[i] = fb1 * pm[i] + omb1 * pg[i];
      pv[i] = fb2 * pv[i] + omb2 * pg[i] * pg[i];
    }
    // amsgrad's denominator reads the running maximum of v instead of v itself.
    const float* __restrict den = pv;
    if (vmax) {
      float* __restrict px = vmax + lo;
      for (int64_t i = 0; i < n; ++i) px[i] = std::max(px[i], pv[i]);
      den = px;
    }
    if (hf) {
      for (int64_t i = 0; i < n; ++i) pw[i] -= step * pm[i] / (std::sqrt(den[i]) + e);
      if (decay != 0)
        for (int64_t i = 0; i < n; ++i) pw[i] -= decay * pw[i];
    } else {
      // sqrt and division share one unit and bound this loop: a multiplication in place of
      // PyTorch's division by sqrt(bc2) takes one of three off it (MLP example: Adam 0.30 ->
      // 0.25 ms a step).
      for (int64_t i = 0; i < n; ++i) pw[i] -= step * pm[i] / (std::sqrt(den[i]) * is2 + e);
    }
  }
};

}  // namespace

AdamScalars adamScalars(const OptimizerConfig& c, bool decoupled, double lr, int64_t step) {
  const double b1 = c.beta1, b2 = c.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  AdamScalars a;
  a.hf = decoupled && c.adamwMode == "huggingface";
  a.b1 = static_cast<float>(b1);
  a.b2 = static_cast<float>(b2);
  a.eps = static_cast<float>(c.eps);
  const double wd = c.weightDecay;
  if (decoupled && !a.hf) a.preScale = static_cast<float>(1.0 - lr * wd);
  if (!decoupled) a.l2 = static_cast<float>(wd);
  if (a.hf) {
    a.stepSize = static_cast<float>(lr * std::sqrt(bc2) / bc1);
    a.postDecay = static_cast<float>(lr * wd);
  } else {
    a.stepSize = static_cast<float>(lr / bc1);
    a.invSbc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  }
  return a;
}

namespace {

// torch.optim.Adam / AdamW, and Hugging Face's transformers AdamW (decay applied after the Adam
// step with the same lr, bias correction folded into the step size).
class Adam final : public Optimizer {
 public:
  Adam(OptimizerConfig c, bool decoupled) : Optimizer(std::move(c)), decoupled_(decoupled) {}
  void update(float* w, float* g, int64_t n, double lr, ParamState& s) const override {
    ++s.step;
    const AdamScalars k = adamScalars(config_, decoupled_, lr, s.step);
    Step a;
    a.w = w;
    a.g = g;
    a.m = buf(s, "m", n).data();
    a.v = buf(s, "v", n).data();
    a.vmax = config_.amsgrad ? buf(s, "vmax", n).data() : nullptr;
    a.b1 = k.b1;
    a.b2 = k.b2;
    a.eps = k.eps;
    a.hf = k.hf;
    a.preScale = k.preScale;
    a.l2 = k.l2;
    a.stepSize = k.stepSize;
    a.postDecay = k.postDecay;
    a.invSbc2 = k.invSbc2;
    // Cache-sized chunks, each running every stage of the update before the next chunk, split
    // over the threads; every element is computed the same way whatever the split.
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t c = 0; c < chunks; ++c) a.run(c * kChunk, std::min(n, (c + 1) * kChunk));
  }

 private:
  bool decoupled_;
};

// torch.optim.Adagrad (ops/optimizer.h, shared with the cuda kernel).
class Adagrad final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void update(float* w, float* g, int64_t n, double lr, ParamState& s) const override {
    ++s.step;
    const ops::AdagradScalars k = adagradScalars(config_, lr, s.step);
    float* sum = buf(s, "sum", n, static_cast<float>(config_.initialAccumulator)).data();
    for (int64_t i = 0; i < n; ++i) ops::adagradStep(k, w[i], g[i], sum[i]);
  }
};

// torch.optim.RMSprop (ops/optimizer.h, shared with the cuda kernel).
class RmsProp final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void update(float* w, float* g, int64_t n, double lr, ParamState& s) const override {
    ++s.step;
    const ops::RmsPropScalars k = rmspropScalars(config_, lr);
    float* sq = buf(s, "square_avg", n).data();
    float* ga = config_.centered ? buf(s, "grad_avg", n).data() : nullptr;
    float* mb = k.momentum > 0 ? buf(s, "momentum", n).data() : nullptr;
    for (int64_t i = 0; i < n; ++i)
      ops::rmspropStep(k, w[i], g[i], sq[i], ga ? ga + i : nullptr, mb ? mb + i : nullptr);
  }
};

}  // namespace

Result<std::unique_ptr<Optimizer>> Optimizer::create(const OptimizerConfig& config) {
  DW_RETURN_IF_ERROR(validateOptimizerConfig(config));
  std::unique_ptr<Optimizer> o;
  if (config.type == "sgd") o.reset(new Sgd(config));
  if (config.type == "adam") o.reset(new Adam(config, false));
  if (config.type == "adamw") o.reset(new Adam(config, true));
  if (config.type == "adagrad") o.reset(new Adagrad(config));
  if (config.type == "rmsprop") o.reset(new RmsProp(config));
  return o;
}

double Regularizer::penalty(const float* w, int64_t n) const {
  double p = 0;
  if (type == "l1" || type == "l1l2") {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::fabs(w[i]);
    p += l1 * s;
  }
  if (type == "l2" || type == "l1l2") {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * w[i];
    p += l2 * s;
  }
  return p;
}

void Regularizer::addGradient(const float* w, float* g, int64_t n) const {
  if (type == "l1" || type == "l1l2") {
    const float c = static_cast<float>(l1);
    for (int64_t i = 0; i < n; ++i) g[i] += w[i] > 0 ? c : (w[i] < 0 ? -c : 0.f);
  }
  if (type == "l2" || type == "l1l2") {
    const float c = static_cast<float>(2 * l2);
    for (int64_t i = 0; i < n; ++i) g[i] += c * w[i];
  }
}

namespace {
// Sum of f(g[i]) in 16 float lanes (vectorizable, same order on every run), then in double.
template <class F>
double laneSum(const float* g, int64_t n, F f) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += f(g[i + k]);
  double s = 0;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  for (; i < n; ++i) s += f(g[i]);
  return s;
}
}  // namespace

double gradNorm(const std::vector<std::pair<float*, int64_t>>& grads, double normType) {
  const bool inf = std::isinf(normType) || normType <= 0;
  // Fixed-size chunks, each summed alone and then added in order: the threads share the work
  // (this runs before every update, over every weight) and the result does not depend on how
  // many there are.
  constexpr int64_t kChunk = 16384;
  auto chunk = [&](const float* g, int64_t n) {
    if (inf) {
      float m = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(g[i]));
      return static_cast<double>(m);
    }
    if (normType == 2) return laneSum(g, n, [](float v) { return v * v; });
    if (normType == 1) return laneSum(g, n, [](float v) { return std::fabs(v); });
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::fabs(static_cast<double>(g[i])), normType);
    return acc;
  };
  // The calling thread's buffers, named through references: inside the parallel loop the
  // thread_local names would be each thread's own (empty) copies.
  thread_local std::vector<std::pair<const float*, int64_t>> chunkBuf;  // no allocation per step
  thread_local std::vector<double> partBuf;
  auto& chunks = chunkBuf;
  auto& parts = partBuf;
  chunks.clear();
  for (const auto& [g, n] : grads)
    for (int64_t i = 0; i < n; i += kChunk) chunks.emplace_back(g + i, std::min(kChunk, n - i));
  parts.resize(chunks.size());
  const int64_t count = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t c = 0; c < count; ++c) parts[c] = chunk(chunks[c].first, chunks[c].second);
  double acc = 0;
  for (double v : parts) acc = inf ? std::max(acc, v) : acc + v;
  if (inf || normType == 1) return acc;
  if (normType == 2) return std::sqrt(acc);
  return std::pow(acc, 1.0 / normType);
}

double clipGradNorm(const std::vector<std::pair<float*, int64_t>>& grads, double maxNorm,
                    double normType) {
  const double norm = gradNorm(grads, normType);
  const double coef = maxNorm / (norm + 1e-6);
  if (maxNorm > 0 && coef < 1) {
    const float c = static_cast<float>(coef);
    for (const auto& [g, n] : grads)
      for (int64_t i = 0; i < n; ++i) g[i] *= c;
  }
  return norm;
}

}  // namespace dw::engine::training
