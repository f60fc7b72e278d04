// An elementwise op of one input as a node uses it: its row of ops/unary_table.h, the function
// its attributes choose, and the constants they set. Every backend's kernels, the recurrent
// cells and the fusion pass resolve their ops through here.
#pragma once

#include <string_view>

#include "engine/kernel.h"
#include "ops/unary_table.h"

namespace dw::engine {

struct UnaryInstance {
  const ops::UnaryOp* op = nullptr;
  ops::UnaryFn fn = ops::UnaryFn::kCount;
  ops::UnaryParams params;
  ops::EltwiseCall onednn;  // alpha and beta filled in

  // y = f(x) over n values, in place allowed.
  template <class T>
  void apply(const T* x, T* y, int64_t n) const {
    ops::visitUnary(fn, [&](auto f) {
      constexpr ops::UnaryFn kF = decltype(f)::value;
      const ops::UnaryParams p = params;
      for (int64_t i = 0; i < n; ++i) y[i] = ops::unaryForward<kF>(x[i], p);
    });
  }
};

// `row` as configured by `attrs`. Attributes the node leaves out take the default of the op's
// schema (libonnx's, or the row's own where libonnx has none): autodiff copies only the forward
// node's explicit attributes onto UnaryGrad, and recurrent cells take the standalone op's.
Result<UnaryInstance> resolveUnary(const ops::UnaryOp& row, const Attributes& attrs);
// The same for `alpha`/`beta` given positionally (the recurrent cells' activation_alpha/beta);
// NaN leaves the default.
UnaryInstance resolveUnary(const ops::UnaryOp& row, float alpha, float beta);
// The row's own function with constants resolved before (a fused activation its node carries).
UnaryInstance unaryWithParams(const ops::UnaryOp& row, const ops::UnaryParams& params);
// The same with the function that the row's choice attribute picked (Gelu's approximate="tanh";
// empty: the row's own): a fused activation as fusion::Fused carries it. An error names a
// choice the row does not have.
Result<UnaryInstance> unaryWithChoice(const ops::UnaryOp& row, const ops::UnaryParams& params,
                                      const std::string& choice);

}  // namespace dw::engine
