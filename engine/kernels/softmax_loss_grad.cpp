// The gradients of Softmax / LogSoftmax and of the two classification losses
// (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss), domain "com.deepwire.grad", in plain
// C++: float and double, so gradient checks can run in double.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// Splits a shape around `axis` into (outer, len, inner).
void splitAxis(const Shape& s, int64_t axis, bool legacy, int64_t* outer, int64_t* len,
               int64_t* inner) {
  *outer = 1;
  *len = 1;
  *inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis)
      *outer *= s[d];
    else if (d == axis || legacy)
      *len *= s[d];
    else
      *inner *= s[d];
  }
}

class SoftmaxGrad : public Kernel {
 public:
  explicit SoftmaxGrad(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", -1)),
        log_(init.attrs.getInt("log", 0) != 0),
        legacy_(init.attrs.getInt("legacy", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& y = ctx.input(1);
    if (!validAxis(axis_, y.rank())) return Status::error("SoftmaxGrad: axis out of range");
    int64_t outer, len, inner;
    splitAxis(y.shape(), normAxis(axis_, y.rank()), legacy_, &outer, &len, &inner);
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), dy.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      const T* py = y.data<T>();
      T* o = dx->data<T>();
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t c = 0; c < inner; ++c) {
          const int64_t base = a * len * inner + c;
          T s = 0;
          if (log_) {
            for (int64_t k = 0; k < len; ++k) s += g[base + k * inner];
            for (int64_t k = 0; k < len; ++k) {
              const int64_t i = base + k * inner;
              o[i] = g[i] - std::exp(py[i]) * s;
            }
          } else {
            for (int64_t k = 0; k < len; ++k) s += g[base + k * inner] * py[base + k * inner];
            for (int64_t k = 0; k < len; ++k) {
              const int64_t i = base + k * inner;
              o[i] = py[i] * (g[i] - s);
            }
          }
        }
      return Status();
    });
  }

 private:
  int64_t axis_;
  bool log_, legacy_;
};

// Shared by the two classification losses: per-sample weights, ignore_index and the reduction.
struct LossScale {
  std::string reduction;
  bool hasIgnore = false;
  int64_t ignore = 0;
  explicit LossScale(const KernelInit& init)
      : reduction(init.attrs.getString("reduction", "mean")),
        hasIgnore(init.attrs.has("ignore_index")),
        ignore(init.attrs.getInt("ignore_index", 0)) {}

  // Fills w[i] (per sample) with weight * upstream gradient / normaliser.
  Status sampleScales(const KernelContext& ctx, const Tensor& labels, int64_t classes,
                      const Tensor* weights, const Tensor& dLoss, std::vector<double>& w) const {
    const int64_t n = labels.size();
    w.assign(n, 0.0);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = labels.getInt(i);
      if (hasIgnore && t == ignore) continue;
      if (t < 0 || t >= classes)
        return Status::error("label " + std::to_string(t) + " is outside [0, " +
                             std::to_string(classes) + ")");
      w[i] = weights ? weights->getDouble(t) : 1.0;
      total += w[i];
    }
    if (reduction == "none") {
      if (dLoss.size() != n) return Status::error("loss gradient does not match the labels");
      for (int64_t i = 0; i < n; ++i) w[i] *= dLoss.getDouble(i);
    } else {
      double s = dLoss.getDouble(0);
      if (reduction == "mean") s = total > 0 ? s / total : 0.0;
      for (auto& v : w) v *= s;
    }
    return Status();
  }
};

// d(scores) of SoftmaxCrossEntropyLoss from its log-probabilities: softmax - onehot.
class SoftmaxCrossEntropyLossGrad : public Kernel {
 public:
  explicit SoftmaxCrossEntropyLossGrad(const KernelInit& init) : scale_(init) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dl = ctx.input(0);
    const Tensor& lp = ctx.input(1);
    const Tensor& labels = ctx.input(2);
    if (lp.rank() < 2) return Status::error("log_prob must have rank >= 2");
    const int64_t n = lp.dim(0), c = lp.dim(1), d = lp.size() / std::max<int64_t>(n * c, 1);
    if (labels.size() != n * d) return Status::error("labels do not match the scores");
    std::vector<double> w;
    DW_RETURN_IF_ERROR(
        scale_.sampleScales(ctx, labels, c, ctx.hasInput(3) ? &ctx.input(3) : nullptr, dl, w));
    DW_ALLOC(dx, ctx.output(0, lp.dtype(), lp.shape()));
    return dispatchFloat(lp.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* p = lp.data<T>();
      T* o = dx->data<T>();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < c; ++k)
          for (int64_t j = 0; j < d; ++j) {
            const int64_t s = i * d + j, idx = (i * c + k) * d + j;
            const T sw = static_cast<T>(w[s]);
            o[idx] =
                sw == 0 ? T(0) : sw * (std::exp(p[idx]) - (labels.getInt(s) == k ? T(1) : T(0)));
          }
      return Status();
    });
  }

 private:
  LossScale scale_;
};

class NegativeLogLikelihoodLossGrad : public Kernel {
 public:
  explicit NegativeLogLikelihoodLossGrad(const KernelInit& init) : scale_(init) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dl = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& labels = ctx.input(2);
    if (x.rank() < 2) return Status::error("input must have rank >= 2");
    const int64_t n = x.dim(0), c = x.dim(1), d = x.size() / std::max<int64_t>(n * c, 1);
    if (labels.size() != n * d) return Status::error("target does not match the input");
    std::vector<double> w;
    DW_RETURN_IF_ERROR(
        scale_.sampleScales(ctx, labels, c, ctx.hasInput(3) ? &ctx.input(3) : nullptr, dl, w));
    DW_ALLOC(dx, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) {
          const int64_t s = i * d + j;
          if (w[s] == 0) continue;
          o[(i * c + labels.getInt(s)) * d + j] = static_cast<T>(-w[s]);
        }
      return Status();
    });
  }

 private:
  LossScale scale_;
};

}  // namespace

void addSoftmaxLossGradKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "SoftmaxGrad", 1, kMaxOpset, &makeKernel<SoftmaxGrad>, true,
        dw::kGradDomain);
  r.add(kReferenceTable, "SoftmaxCrossEntropyLossGrad", 1, kMaxOpset,
        &makeKernel<SoftmaxCrossEntropyLossGrad>, true, dw::kGradDomain);
  r.add(kReferenceTable, "NegativeLogLikelihoodLossGrad", 1, kMaxOpset,
        &makeKernel<NegativeLogLikelihoodLossGrad>, true, dw::kGradDomain);
}

}  // namespace dw::engine
