#include "ops/unary_table.h"

#include <algorithm>
#include <cctype>

namespace dw::ops {

namespace {

using F = UnaryFn;
using E = Eltwise;
using P = UnaryParams;

constexpr UnaryAttr attr(const char* name, float P::*slot) {
  return {name, slot, 0, false};
}
constexpr UnaryAttr attr(const char* name, float P::*slot, float fallback) {
  return {name, slot, fallback, true};
}
constexpr EltwiseCall dnnl(E alg, float alpha = 0, float beta = 0) {
  return {alg, alpha, beta};
}
constexpr EltwiseCall dnnlAlpha(E alg) {
  return {alg, 0, 0, true};
}

// Opsets are each op's first version; later versions only widened the types.
// One row per op reads as a table, which clang-format would spread over many lines.
// clang-format off
const UnaryOp kUnaryOps[] = {
    {.name = "Abs", .fn = F::kAbs, .since = 1, .gradient = true, .onednn = dnnl(E::kAbs),
     .integers = Integers::kNative},
    {.name = "Neg", .fn = F::kNeg, .since = 1, .onednn = dnnl(E::kLinear, -1.0f),
     .integers = Integers::kNative},
    {.name = "Sign", .fn = F::kSign, .since = 9, .integers = Integers::kNative},
    {.name = "Relu", .fn = F::kRelu, .since = 1, .gradient = true, .onednn = dnnl(E::kRelu),
     .integers = Integers::kNative, .rnnActivation = true, .postOp = true},
    {.name = "Floor", .fn = F::kFloor, .since = 1},
    {.name = "Ceil", .fn = F::kCeil, .since = 1},
    {.name = "Round", .fn = F::kRound, .since = 11},
    {.name = "Reciprocal", .fn = F::kReciprocal, .since = 1, .gradient = true,
     .onednn = dnnl(E::kPow, 1.0f, -1.0f)},
    {.name = "Sqrt", .fn = F::kSqrt, .since = 1, .gradient = true, .onednn = dnnl(E::kSqrt)},
    {.name = "Exp", .fn = F::kExp, .since = 1, .gradient = true, .onednn = dnnl(E::kExp)},
    // Not oneDNN 2.6's eltwise_log: it is off by -1.4e-6 everywhere (log(1) is not 0), which
    // moved a T5 relative-position bucket (floor of a log ratio) and every loss's log.
    {.name = "Log", .fn = F::kLog, .since = 1, .gradient = true},
    {.name = "Sin", .fn = F::kSin, .since = 7, .gradient = true},
    {.name = "Cos", .fn = F::kCos, .since = 7, .gradient = true},
    {.name = "Tan", .fn = F::kTan, .since = 7, .gradient = true},
    {.name = "Asin", .fn = F::kAsin, .since = 7, .gradient = true},
    {.name = "Acos", .fn = F::kAcos, .since = 7, .gradient = true},
    {.name = "Atan", .fn = F::kAtan, .since = 7, .gradient = true},
    {.name = "Sinh", .fn = F::kSinh, .since = 9, .gradient = true},
    {.name = "Cosh", .fn = F::kCosh, .since = 9, .gradient = true},
    {.name = "Asinh", .fn = F::kAsinh, .since = 9, .gradient = true},
    {.name = "Acosh", .fn = F::kAcosh, .since = 9, .gradient = true},
    {.name = "Atanh", .fn = F::kAtanh, .since = 9, .gradient = true},
    {.name = "Sigmoid", .fn = F::kSigmoid, .since = 1, .gradient = true,
     .onednn = dnnl(E::kLogistic), .rnnActivation = true, .postOp = true},
    {.name = "Tanh", .fn = F::kTanh, .since = 1, .gradient = true, .onednn = dnnl(E::kTanh),
     .rnnActivation = true, .postOp = true},
    {.name = "Erf", .fn = F::kErf, .since = 9, .gradient = true},
    {.name = "Softplus", .fn = F::kSoftplus, .since = 1, .gradient = true,
     .onednn = dnnl(E::kSoftRelu), .rnnActivation = true},
    {.name = "Softsign", .fn = F::kSoftsign, .since = 1, .gradient = true, .rnnActivation = true},
    {.name = "LeakyRelu", .fn = F::kLeakyRelu, .since = 1, .attrs = {attr("alpha", &P::alpha)},
     .gradient = true, .onednn = dnnlAlpha(E::kRelu), .rnnActivation = true, .postOp = true},
    {.name = "Elu", .fn = F::kElu, .since = 1, .attrs = {attr("alpha", &P::alpha)},
     .gradient = true, .onednn = dnnlAlpha(E::kElu), .rnnActivation = true},
    {.name = "Selu", .fn = F::kSelu, .since = 1,
     .attrs = {attr("alpha", &P::alpha), attr("gamma", &P::gamma)}, .gradient = true},
    {.name = "Celu", .fn = F::kCelu, .since = 12, .attrs = {attr("alpha", &P::alpha)},
     .gradient = true},
    {.name = "HardSigmoid", .fn = F::kHardSigmoid, .since = 1,
     .attrs = {attr("alpha", &P::alpha), attr("beta", &P::beta)}, .gradient = true,
     .rnnActivation = true},
    {.name = "ThresholdedRelu", .fn = F::kThresholdedRelu, .since = 10,
     .attrs = {attr("alpha", &P::alpha)}, .gradient = true, .rnnActivation = true},
    {.name = "HardSwish", .fn = F::kHardSwish, .since = 14, .gradient = true,
     .onednn = dnnl(E::kHardswish)},
    {.name = "Mish", .fn = F::kMish, .since = 18, .gradient = true, .onednn = dnnl(E::kMish)},
    // Integer inputs keep their type, with the float thresholds compared in double.
    {.name = "Shrink", .fn = F::kShrink, .since = 9,
     .attrs = {attr("lambd", &P::alpha), attr("bias", &P::beta)}, .gradient = true,
     .integers = Integers::kViaDouble},
    {.name = "Gelu", .fn = F::kGelu, .since = 20, .gradient = true, .onednn = dnnl(E::kGeluErf),
     .postOp = true, .choiceAttr = "approximate",
     .choices = {{{"none", F::kGelu, dnnl(E::kGeluErf)},
                  {"tanh", F::kGeluTanh, dnnl(E::kGeluTanh)}}}},
    {.name = "Swish", .fn = F::kSwish, .since = 24, .attrs = {attr("alpha", &P::alpha, 1.0f)},
     .gradient = true, .onednn = dnnlAlpha(E::kSwish), .postOp = true},
    // Fused after a Conv/Gemm/MatMul as oneDNN's clip when its bounds are constants (ReLU6).
    {.name = "Clip", .fn = F::kClip, .since = 6,
     .onednn = {.alg = E::kClip, .alphaFromParam = true, .betaFromParam = true}, .postOp = true,
     .ownKernels = true},
    // Recurrent-cell activations that are not ops of their own (ONNX's RNN, GRU and LSTM).
    {.name = "Affine", .fn = F::kAffine, .since = 0,
     .attrs = {attr("alpha", &P::alpha, 1.0f), attr("beta", &P::beta, 0.0f)},
     .rnnActivation = true},
    {.name = "ScaledTanh", .fn = F::kScaledTanh, .since = 0,
     .attrs = {attr("alpha", &P::alpha, 1.0f), attr("beta", &P::beta, 1.0f)},
     .rnnActivation = true},
};
// clang-format on

bool equalNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::span<const UnaryOp> unaryOps() {
  return kUnaryOps;
}

const UnaryOp* findUnaryOp(std::string_view name) {
  for (const auto& op : kUnaryOps)
    if (op.isOp() && name == op.name) return &op;
  return nullptr;
}

const UnaryOp* findRnnActivation(std::string_view name) {
  for (const auto& op : kUnaryOps)
    if (op.rnnActivation && equalNoCase(name, op.name)) return &op;
  return nullptr;
}

}  // namespace dw::ops
