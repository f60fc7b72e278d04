// Optimizers, learning-rate schedules, regularizers and gradient clipping, as plain loops over
// float buffers (the compiler vectorizes them). The formulas follow PyTorch's torch.optim (and
// Hugging Face's AdamW for adamwMode "huggingface"); tests/training/optimizers_test.cpp checks
// them against golden values produced by PyTorch.
//
// State is kept per parameter in named float buffers ("m", "v", "momentum", "sum", ...) so a
// checkpoint can save and restore it exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nodes/status.h"
#include "ops/optimizer.h"

namespace dw::engine::training {

struct ScheduleConfig {
  std::string type = "constant";  // constant | step | warmup_linear | cosine
  int64_t stepSize = 1000;        // step: multiply by gamma every stepSize optimizer steps
  double gamma = 0.1;
  int64_t warmupSteps = 0;  // warmup_linear and cosine: linear ramp 0 -> lr
  // warmup_linear reaches 0 here, cosine its floor; 0: over the fit that trains with it (one
  // step outside a fit: no decay).
  int64_t totalSteps = 0;
  double minLr = 0;  // cosine floor
};
// The schedule types, in the order the studio offers them.
const std::vector<std::string>& scheduleTypes();
// The learning rate at optimizer step `step` (0-based) for base rate `lr`.
double scheduledLr(const ScheduleConfig& s, double lr, int64_t step);

struct OptimizerConfig {
  std::string type = "adam";  // sgd | adam | adamw | adagrad | rmsprop
  double lr = 1e-3;
  double momentum = 0;                            // sgd, rmsprop
  double dampening = 0;                           // sgd
  bool nesterov = false;                          // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw (eps also adagrad, rmsprop)
  double weightDecay = 0;             // sgd/adam/adagrad/rmsprop: L2 added to the gradient;
                                      // adamw: decoupled decay
  std::string adamwMode = "pytorch";  // pytorch | huggingface (see AdamW below)
  bool amsgrad = false;               // adam, adamw
  double alpha = 0.99;                // rmsprop smoothing constant
  bool centered = false;              // rmsprop
  double lrDecay = 0;                 // adagrad
  double initialAccumulator = 0;      // adagrad
  ScheduleConfig schedule;
  double clipNorm = 0;      // > 0: scale gradients so their total norm is at most clipNorm
  double clipNormType = 2;  // p of the p-norm; inf (or <= 0 given as "inf") = max-abs
};
// Checks the type and ranges; names the offending field.
Status validateOptimizerConfig(const OptimizerConfig& c);

// Per-parameter state: named buffers of the parameter's size, plus a step count.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, std::vector<float>> buffers;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  static Result<std::unique_ptr<Optimizer>> create(const OptimizerConfig& config);

  // One update of `w` (n floats) from gradient `g`, at learning rate `lr` (already scheduled).
  // `g` may be modified (weight decay folded in).
  virtual void update(float* w, float* g, int64_t n, double lr, ParamState& state) const = 0;
  const OptimizerConfig& config() const { return config_; }

 protected:
  explicit Optimizer(OptimizerConfig c) : config_(std::move(c)) {}
  OptimizerConfig config_;
};

// The scalars of one Adam/AdamW step at `lr` (step: the count after this step), shared by the
// host loop and the cuda kernel so both follow one rule.
struct AdamScalars {
  float b1 = 0, b2 = 0, eps = 0, stepSize = 0, invSbc2 = 1, preScale = 1, l2 = 0, postDecay = 0;
  bool hf = false;  // Hugging Face's AdamW
};
AdamScalars adamScalars(const OptimizerConfig& c, bool decoupled, double lr, int64_t step);

// The scalars of one Adagrad step (step: the count after it) and one RMSprop step at `lr`, for
// ops/optimizer.h's rules on either accelerator.
ops::AdagradScalars adagradScalars(const OptimizerConfig& c, double lr, int64_t step);
ops::RmsPropScalars rmspropScalars(const OptimizerConfig& c, double lr);

// ---- Regularization and clipping ----------------------------------------------------------

struct Regularizer {
  std::string type = "none";  // none | l1 | l2 | l1l2
  double l1 = 0, l2 = 0;
  bool active() const { return type != "none"; }
  // Penalty value: l1 * sum|w| + l2 * sum w^2 (each term only where the type includes it).
  double penalty(const float* w, int64_t n) const;
  // Adds the penalty's gradient to g: l1 * sign(w) + 2 * l2 * w.
  void addGradient(const float* w, float* g, int64_t n) const;
};

// The p-norm of all gradients together (p = inf for max-abs), as torch.nn.utils.clip_grad_norm_.
double gradNorm(const std::vector<std::pair<float*, int64_t>>& grads, double normType);
// Scales the gradients by maxNorm / (norm + 1e-6) when norm > maxNorm; returns the norm before
// clipping.
double clipGradNorm(const std::vector<std::pair<float*, int64_t>>& grads, double maxNorm,
                    double normType);

}  // namespace dw::engine::training
