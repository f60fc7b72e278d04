// An activation absorbed by the session's fusion pass (Fused::activation, or a chain stage's: a
// row of ops/unary_table.h marked postOp, with its resolved constants), applied as a oneDNN
// eltwise post-op, or on host memory where the primitive could not take it.
#pragma once

#include <limits>
#include <string>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/onednn/vector_math.h"
#include "ops/unary_table.h"

namespace dw::engine::onednn {

struct FusedActivation {
  FusedActivation() = default;
  explicit FusedActivation(const fusion::Fused& f) {
    if (postOp(f.activation))
      if (auto r = fusion::activationOf(f)) u = *r;
  }
  explicit FusedActivation(const fusion::ChainStage& s) {
    if (postOp(s.activation))
      if (auto r = fusion::activationOf(s)) u = *r;
  }
  bool any() const { return u.op != nullptr; }
  void addTo(dnnl::primitive_attr& attr) const {
    if (!any()) return;
    dnnl::post_ops po;
    appendTo(po);
    attr.set_post_ops(po);
  }
  void appendTo(dnnl::post_ops& po) const {
    if (any())
      po.append_eltwise(1.0f, eltwiseAlgorithm(u.onednn.alg), u.onednn.alpha, u.onednn.beta);
  }
  void applyHost(float* v, int64_t n) const {
    if (!any()) return;
    if (hostFaster())
      swishInPlace(v, n, u.params.alpha);
    else if (u.fn == ops::UnaryFn::kSigmoid && vectorMathAvailable())
      sigmoidInPlace(v, n);  // the table's loop: 9 ns a value (runPointwise)
    else
      u.apply(v, v, n);
  }
  // applyHost over `rows` rows of n values, `ld` floats apart.
  void applyHostRows(float* v, int64_t rows, int64_t n, int64_t ld) const {
    if (hostFaster())
      swishRows(v, rows, n, ld, u.params.alpha);
    else
      for (int64_t r = 0; r < rows; ++r) applyHost(v + r * ld, n);
  }
  // SiLU (Swish) costs oneDNN 2.6's post-op (its exp and a division per value) more than a
  // pass of onednn/vector_math.h over the output once it is written: efficientnet_b0 on 2
  // threads went from 9.0 to 8.0 ms at batch 1 and from 57 to 53 ms at batch 8.
  bool hostFaster() const { return any() && u.fn == ops::UnaryFn::kSwish && vectorMathAvailable(); }
  // Relu and Clip: a clamp to [lo, hi] that a kernel applies in its registers.
  bool clamp(float& lo, float& hi) const {
    lo = -std::numeric_limits<float>::infinity();
    hi = std::numeric_limits<float>::infinity();
    if (!any()) return true;
    if (u.fn == ops::UnaryFn::kRelu) return lo = 0.0f, true;
    if (u.fn == ops::UnaryFn::kClip) return lo = u.params.alpha, hi = u.params.beta, true;
    return false;
  }
  UnaryInstance u;

 private:
  static bool postOp(const std::string& op) {
    if (op.empty()) return false;
    const ops::UnaryOp* row = ops::findUnaryOp(op);
    return row && row->postOp;
  }
};

}  // namespace dw::engine::onednn
