// Gradient builders, one per forward op family, and the table listing them with the forward
// opset range each covers (how to add one: grad_builder.h).
#include <algorithm>
#include <limits>

#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"
#include "ops/reduce_table.h"
#include "ops/unary_table.h"

namespace dw::engine::training {

namespace {

constexpr int kMax = std::numeric_limits<int>::max();

// ---- elementwise arithmetic ---------------------------------------------------------------

Status gradAdd(GradCtx& c) {
  for (int i = 0; i < 2; ++i)
    if (c.need(i)) c.dX[i] = c.sumTo(c.dY[0], c.out(0), c.in(i));
  return Status();
}

Status gradSub(GradCtx& c) {
  if (c.need(0)) c.dX[0] = c.sumTo(c.dY[0], c.out(0), c.in(0));
  if (c.need(1)) c.dX[1] = c.e.op1("Neg", {c.sumTo(c.dY[0], c.out(0), c.in(1))});
  return Status();
}

Status gradMul(GradCtx& c) {
  if (c.need(0)) c.dX[0] = c.sumTo(c.e.op1("Mul", {c.dY[0], c.in(1)}), c.out(0), c.in(0));
  if (c.need(1)) c.dX[1] = c.sumTo(c.e.op1("Mul", {c.dY[0], c.in(0)}), c.out(0), c.in(1));
  return Status();
}

Status gradDiv(GradCtx& c) {
  if (c.need(0)) c.dX[0] = c.sumTo(c.e.op1("Div", {c.dY[0], c.in(1)}), c.out(0), c.in(0));
  if (c.need(1)) {
    // d(a/b)/db = -y/b
    auto t = c.e.op1("Div", {c.e.op1("Mul", {c.dY[0], c.out(0)}), c.in(1)});
    c.dX[1] = c.sumTo(c.e.op1("Neg", {t}), c.out(0), c.in(1));
  }
  return Status();
}

Status gradPow(GradCtx& c) {
  const int32_t t = c.gradType();
  std::string b = c.in(1);
  if (c.types.elemType(b) && c.types.elemType(b) != t) b = c.e.op1("Cast", {b}, {attrI("to", t)});
  if (c.need(0)) {
    // b * a^(b-1)
    auto pw = c.e.op1("Pow", {c.in(0), c.e.op1("Sub", {b, c.e.scalar(1, t)})});
    auto d = c.e.op1("Mul", {c.e.op1("Mul", {c.dY[0], b}), pw});
    c.dX[0] = c.sumTo(d, c.out(0), c.in(0));
  }
  if (c.need(1)) {
    auto d = c.e.op1("Mul", {c.e.op1("Mul", {c.dY[0], c.out(0)}), c.e.op1("Log", {c.in(0)})});
    c.dX[1] = c.sumTo(d, c.out(0), c.in(1));
  }
  return Status();
}

Status gradNeg(GradCtx& c) {
  c.dX[0] = c.e.op1("Neg", {c.dY[0]});
  return Status();
}

Status gradIdentity(GradCtx& c) {
  c.dX[0] = c.dY[0];
  return Status();
}

// Activations and unary math: one fused kernel reading X and/or Y.
Status gradUnary(GradCtx& c) {
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrS("op", c.node.op_type()));
  c.dX[0] = c.e.op1("UnaryGrad", {c.dY[0], c.in(0), c.out(0)}, attrs, kGradDomain);
  return Status();
}

Status gradClip(GradCtx& c) {
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrS("op", "Clip"));
  if (c.need(1) || c.need(2))
    return Status::error("gradients for Clip's min and max are not supported; make them Constant");
  c.dX[0] =
      c.e.op1("UnaryGrad", {c.dY[0], c.in(0), c.out(0), c.in(1), c.in(2)}, attrs, kGradDomain);
  return Status();
}

Status gradPRelu(GradCtx& c) {
  const int32_t t = c.gradType();
  auto pos = c.e.op1("Greater", {c.in(0), c.e.scalar(0, t)});
  if (c.need(0)) {
    auto neg = c.e.op1("Mul", {c.dY[0], c.in(1)});
    c.dX[0] = c.sumTo(c.e.op1("Where", {pos, c.dY[0], neg}), c.out(0), c.in(0));
  }
  if (c.need(1)) {
    auto d = c.e.op1("Where", {pos, c.e.scalar(0, t), c.e.op1("Mul", {c.dY[0], c.in(0)})});
    c.dX[1] = c.sumTo(d, c.out(0), c.in(1));
  }
  return Status();
}

Status gradSoftmax(GradCtx& c) {
  const bool legacy = c.opset < 13;
  const int64_t axis = attrInt(c.node, "axis", legacy ? 1 : -1);
  c.dX[0] = c.e.op1("SoftmaxGrad", {c.dY[0], c.out(0)},
                    {attrI("axis", axis), attrI("log", c.node.op_type() == "LogSoftmax"),
                     attrI("legacy", legacy)},
                    kGradDomain);
  return Status();
}

// ---- variadic -----------------------------------------------------------------------------

Status gradSum(GradCtx& c) {
  for (int i = 0; i < c.node.input_size(); ++i)
    if (c.need(i)) c.dX[i] = c.sumTo(c.dY[0], c.out(0), c.in(i));
  return Status();
}

Status gradMean(GradCtx& c) {
  auto d = c.e.op1("Mul", {c.dY[0], c.e.scalar(1.0 / c.node.input_size(), c.gradType())});
  for (int i = 0; i < c.node.input_size(); ++i)
    if (c.need(i)) c.dX[i] = c.sumTo(d, c.out(0), c.in(i));
  return Status();
}

// Max/Min: the gradient goes to every input equal to the result (ties share it, as in ORT).
Status gradMaxMin(GradCtx& c) {
  for (int i = 0; i < c.node.input_size(); ++i) {
    if (!c.need(i)) continue;
    auto mask =
        c.e.op1("Cast", {c.e.op1("Equal", {c.in(i), c.out(0)})}, {attrI("to", c.gradType())});
    c.dX[i] = c.sumTo(c.e.op1("Mul", {c.dY[0], mask}), c.out(0), c.in(i));
  }
  return Status();
}

Status gradWhere(GradCtx& c) {
  auto zero = c.e.scalar(0, c.gradType());
  if (c.need(1)) c.dX[1] = c.sumTo(c.e.op1("Where", {c.in(0), c.dY[0], zero}), c.out(0), c.in(1));
  if (c.need(2)) c.dX[2] = c.sumTo(c.e.op1("Where", {c.in(0), zero, c.dY[0]}), c.out(0), c.in(2));
  return Status();
}

// ---- matrix products ----------------------------------------------------------------------

// Y = alpha op(A) op(B) + beta C. Each gradient is a Gemm with transposes as attributes, so the
// engine's matmul reads the operands in place.
Status gradGemm(GradCtx& c) {
  const bool ta = attrInt(c.node, "transA", 0), tb = attrInt(c.node, "transB", 0);
  const float alpha = attrFloat(c.node, "alpha", 1.0f), beta = attrFloat(c.node, "beta", 1.0f);
  auto gemm = [&](const std::string& a, const std::string& b, bool t1, bool t2) {
    std::vector<onnx::AttributeProto> at{attrI("transA", t1), attrI("transB", t2)};
    if (alpha != 1.0f) at.push_back(attrF("alpha", alpha));
    return c.e.op1("Gemm", {a, b}, at);
  };
  const std::string& dY = c.dY[0];
  if (c.need(0)) c.dX[0] = ta ? gemm(c.in(1), dY, tb, true) : gemm(dY, c.in(1), false, !tb);
  if (c.need(1)) c.dX[1] = tb ? gemm(dY, c.in(0), true, ta) : gemm(c.in(0), dY, !ta, false);
  if (c.need(2)) {
    std::string d = c.sumTo(dY, c.out(0), c.in(2));
    if (beta != 1.0f) d = c.e.op1("Mul", {d, c.e.scalar(beta, c.gradType())});
    c.dX[2] = d;
  }
  return Status();
}

std::string unsqueeze(GradCtx& c, const std::string& x, int64_t axis) {
  if (c.opset >= 13) return c.e.op1("Unsqueeze", {x, c.e.ints({axis})});
  return c.e.op1("Unsqueeze", {x}, {attrInts("axes", {axis})});
}

Status gradMatMul(GradCtx& c) {
  const int ra = c.types.rank(c.in(0)), rb = c.types.rank(c.in(1));
  const std::string& dY = c.dY[0];
  if (ra == 2 && rb == 2) {
    if (c.need(0)) c.dX[0] = c.e.op1("Gemm", {dY, c.in(1)}, {attrI("transB", 1)});
    if (c.need(1)) c.dX[1] = c.e.op1("Gemm", {c.in(0), dY}, {attrI("transA", 1)});
    return Status();
  }
  if (ra < 1 || rb < 1)
    return Status::error(
        "MatMul gradients need the ranks of both operands; shape inference "
        "could not find them");
  // General case: vectors become matrices, the other operand's last two axes swap through a
  // Transpose, and broadcast batch axes are summed away.
  std::string a = c.in(0), b = c.in(1), g = dY;
  if (ra == 1) a = c.e.op1("Reshape", {a, c.e.ints({1, -1})});
  if (rb == 1) b = c.e.op1("Reshape", {b, c.e.ints({-1, 1})});
  if (ra == 1 && rb == 1)
    g = c.e.op1("Reshape", {g, c.e.ints({1, 1})});
  else if (ra == 1)
    g = unsqueeze(c, g, -2);
  else if (rb == 1)
    g = unsqueeze(c, g, -1);
  auto swapLast = [&](const std::string& x, int rank) {
    std::vector<int64_t> perm(rank);
    for (int i = 0; i < rank; ++i) perm[i] = i;
    std::swap(perm[rank - 1], perm[rank - 2]);
    return c.e.op1("Transpose", {x}, {attrInts("perm", perm)});
  };
  auto finish = [&](const std::string& d, const std::string& promoted, int i, bool vec) {
    std::string r = c.e.op1("SumToShape", {d, promoted}, {}, kGradDomain);
    return vec ? c.e.op1("Reshape", {r, c.shapeOf(c.in(i))}) : r;
  };
  if (c.need(0))
    c.dX[0] = finish(c.e.op1("MatMul", {g, swapLast(b, std::max(rb, 2))}), a, 0, ra == 1);
  if (c.need(1))
    c.dX[1] = finish(c.e.op1("MatMul", {swapLast(a, std::max(ra, 2)), g}), b, 1, rb == 1);
  return Status();
}

// ---- shape and data movement --------------------------------------------------------------

Status gradReshapeLike(GradCtx& c) {
  c.dX[0] = c.e.op1("Reshape", {c.dY[0], c.shapeOf(c.in(0))});
  return Status();
}

Status gradTranspose(GradCtx& c) {
  auto perm = attrInts(c.node, "perm");
  if (perm.empty()) {
    c.dX[0] = c.e.op1("Transpose", {c.dY[0]});
    return Status();
  }
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  c.dX[0] = c.e.op1("Transpose", {c.dY[0]}, {attrInts("perm", inv)});
  return Status();
}

Status gradCast(GradCtx& c) {
  const int32_t from = c.types.elemType(c.in(0));
  if (!from) return Status::error("the input type of Cast is unknown");
  if (from == c.types.elemType(c.out(0)))
    c.dX[0] = c.dY[0];
  else
    c.dX[0] = c.e.op1("Cast", {c.dY[0]}, {attrI("to", from)});
  return Status();
}

Status gradExpand(GradCtx& c) {
  c.dX[0] = c.e.op1("SumToShape", {c.dY[0], c.in(0)}, {}, kGradDomain);
  return Status();
}

Status gradConcat(GradCtx& c) {
  std::vector<std::string> ins{c.dY[0]};
  std::vector<std::string> outs;
  for (int i = 0; i < c.node.input_size(); ++i) {
    ins.push_back(c.in(i));
    outs.push_back(c.need(i) ? "" : "-");
  }
  auto r =
      c.e.op("ConcatGrad", ins, outs, {attrI("axis", attrInt(c.node, "axis", 0))}, kGradDomain);
  for (int i = 0; i < c.node.input_size(); ++i)
    if (c.need(i)) c.dX[i] = r[i];
  return Status();
}

Status gradSplit(GradCtx& c) {
  std::vector<std::string> parts;
  for (int i = 0; i < c.node.output_size(); ++i) parts.push_back(c.dYOrZeros(i));
  c.dX[0] = c.e.op1("Concat", parts, {attrI("axis", attrInt(c.node, "axis", 0))});
  return Status();
}

Status gradSlice(GradCtx& c) {
  std::vector<std::string> ins{c.dY[0], c.in(0)};
  for (int i = 1; i < c.node.input_size(); ++i) ins.push_back(c.in(i));
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrI("opset", c.opset));
  c.dX[0] = c.e.op1("SliceGrad", ins, attrs, kGradDomain);
  return Status();
}

Status gradGather(GradCtx& c) {
  if (c.need(1)) return Status::error("indices are not differentiable");
  c.dX[0] = c.e.op1("GatherGrad", {c.dY[0], c.in(0), c.in(1)},
                    {attrI("axis", attrInt(c.node, "axis", 0))}, kGradDomain);
  return Status();
}

// GatherND: each gathered slice's gradient goes back to where it came from, summed where
// indices repeat (ScatterND with reduction add onto zeros).
Status gradGatherND(GradCtx& c) {
  if (c.need(1)) return Status::error("indices are not differentiable");
  if (attrInt(c.node, "batch_dims", 0) != 0)
    return Status::error(
        "GatherND with batch_dims has no gradient here; gather with batch_dims "
        "0 (indices that name the batch too)");
  c.dX[0] =
      c.e.op1("ScatterND", {c.zerosLike(c.in(0)), c.in(1), c.dY[0]}, {attrS("reduction", "add")});
  return Status();
}

// ScatterND (reduction none): the written slices come from updates, so data's gradient is dY
// with them zeroed and updates' is dY gathered there (with repeated indices, where the last
// write wins, every one of them gets it).
Status gradScatterND(GradCtx& c) {
  if (c.need(1)) return Status::error("indices are not differentiable");
  const std::string reduction = attrString(c.node, "reduction", "none");
  if (reduction != "none")
    return Status::error("ScatterND with reduction '" + reduction +
                         "' has no gradient here; only reduction none has one");
  if (c.need(0)) c.dX[0] = c.e.op1("ScatterND", {c.dY[0], c.in(1), c.zerosLike(c.in(2))});
  if (c.need(2)) c.dX[2] = c.e.op1("GatherND", {c.dY[0], c.in(1)});
  return Status();
}

// TopK: each value's gradient goes back to the element it was taken from. The indices of a
// slice are distinct, so scattering dValues onto zeros at them is exact.
Status gradTopK(GradCtx& c) {
  if (c.need(1)) return Status::error("K is not differentiable");
  if (!c.need(0) || c.dY[0].empty()) return Status();
  const std::string indices = c.ensureOutput(1, "topk_indices");
  c.dX[0] = c.e.op1("ScatterElements", {c.zerosLike(c.in(0)), indices, c.dY[0]},
                    {attrI("axis", attrInt(c.node, "axis", -1))});
  return Status();
}

Status gradPad(GradCtx& c) {
  const std::string mode = attrString(c.node, "mode", "constant");
  if (mode != "constant")
    return Status::error("only constant-mode Pad has a gradient (mode is '" + mode + "')");
  if (c.opset < 11) {
    auto pads = attrInts(c.node, c.opset < 2 ? "paddings" : "pads");
    for (auto& p : pads) p = -p;
    c.dX[0] = c.e.op1("Pad", {c.dY[0]}, {attrInts(c.opset < 2 ? "paddings" : "pads", pads)});
    return Status();
  }
  // Cropping by the negated pads undoes the padding; the constant value gets no gradient.
  std::vector<std::string> ins{c.dY[0], c.e.op1("Neg", {c.in(1)})};
  if (c.node.input_size() > 3 && !c.in(3).empty()) {
    ins.push_back("");
    ins.push_back(c.in(3));
  }
  c.dX[0] = c.e.op1("Pad", ins);
  return Status();
}

Status gradDropoutTraining(GradCtx& c) {
  std::vector<onnx::AttributeProto> attrs;
  if (const auto* r = findAttr(c.node, "ratio")) attrs.push_back(*r);
  c.dX[0] = c.e.op1("DropoutGrad", {c.dY[0], c.out(1), c.in(1)}, attrs, kGradDomain);
  return Status();
}

Status gradDropout(GradCtx& c) {
  const bool active = c.opset >= 12 && c.node.input_size() > 2 && !c.in(2).empty();
  if (!active) {
    c.dX[0] = c.dY[0];
    return Status();
  }
  std::string mask = c.ensureOutput(1, "mask");
  c.dX[0] = c.e.op1("DropoutGrad", {c.dY[0], mask, c.in(1)}, {}, kGradDomain);
  return Status();
}

// ---- reductions and losses ----------------------------------------------------------------

Status gradReduce(GradCtx& c) {
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrS("op", c.node.op_type()));
  std::vector<std::string> ins{c.dY[0], c.in(0), c.out(0)};
  if (c.node.input_size() > 1) ins.push_back(c.in(1));
  c.dX[0] = c.e.op1("ReduceGrad", ins, attrs, kGradDomain);
  return Status();
}

Status gradSoftmaxCrossEntropy(GradCtx& c) {
  if (c.need(2)) return Status::error("class weights are not differentiable");
  std::string logProb = c.ensureOutput(1, "log_prob");
  std::vector<std::string> ins{c.dY[0], logProb, c.in(1)};
  if (c.node.input_size() > 2) ins.push_back(c.in(2));
  c.dX[0] = c.e.op1("SoftmaxCrossEntropyLossGrad", ins, c.forwardAttrs(), kGradDomain);
  if (!c.dY[1].empty()) {
    // log_prob is also used downstream: its gradient adds through LogSoftmax's.
    auto extra = c.e.op1("SoftmaxGrad", {c.dY[1], logProb},
                         {attrI("axis", 1), attrI("log", 1), attrI("legacy", 0)}, kGradDomain);
    c.dX[0] = c.e.op1("Add", {c.dX[0], extra});
  }
  return Status();
}

Status gradNll(GradCtx& c) {
  if (c.need(2)) return Status::error("class weights are not differentiable");
  std::vector<std::string> ins{c.dY[0], c.in(0), c.in(1)};
  if (c.node.input_size() > 2) ins.push_back(c.in(2));
  c.dX[0] = c.e.op1("NegativeLogLikelihoodLossGrad", ins, c.forwardAttrs(), kGradDomain);
  return Status();
}

// ---- neural-network layers ----------------------------------------------------------------

Status gradConv(GradCtx& c) {
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrI("transposed", c.node.op_type() == "ConvTranspose"));
  std::vector<std::string> outs{c.need(0) ? "" : "-", c.need(1) ? "" : "-", c.need(2) ? "" : "-"};
  auto r = c.e.op("ConvGrad", {c.dY[0], c.in(0), c.in(1)}, outs, attrs, kGradDomain);
  for (int i = 0; i < 3; ++i)
    if (c.need(i)) c.dX[i] = r[i];
  return Status();
}

Status gradPool(GradCtx& c) {
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrS("op", c.node.op_type()));
  c.dX[0] = c.e.op1("PoolGrad", {c.dY[0], c.in(0)}, attrs, kGradDomain);
  return Status();
}

// Training mode (the forward was rewritten to BatchNormalizationTraining, which saves the batch
// statistics) and inference mode (running statistics are constants) share one kernel.
Status gradBatchNorm(GradCtx& c) {
  if (c.need(3) || c.need(4))
    return Status::error("running statistics are not differentiable; make them Constant");
  const bool training = c.node.op_type() == "BatchNormalizationTraining";
  std::string mean = training ? c.out(3) : c.in(3);
  std::string var = training ? c.out(4) : c.in(4);
  std::vector<std::string> outs{c.need(0) ? "" : "-", c.need(1) ? "" : "-", c.need(2) ? "" : "-"};
  auto r = c.e.op("BatchNormalizationGrad", {c.dY[0], c.in(0), c.in(1), mean, var, c.in(2)}, outs,
                  {attrF("epsilon", attrFloat(c.node, "epsilon", 1e-5f)),
                   attrI("global_stats", training ? 0 : 1)},
                  kGradDomain);
  for (int i = 0; i < 3; ++i)
    if (c.need(i)) c.dX[i] = r[i];
  return Status();
}

Status gradLayerNorm(GradCtx& c) {
  std::string mean = c.ensureOutput(1, "mean");
  std::string invStd = c.ensureOutput(2, "inv_std_dev");
  std::vector<std::string> outs{c.need(0) ? "" : "-", c.need(1) ? "" : "-", c.need(2) ? "" : "-"};
  auto r = c.e.op("LayerNormalizationGrad", {c.dY[0], c.in(0), c.in(1), mean, invStd}, outs,
                  {attrI("axis", attrInt(c.node, "axis", -1))}, kGradDomain);
  for (int i = 0; i < 3; ++i)
    if (c.need(i)) c.dX[i] = r[i];
  // dB comes out shaped like Scale; a B that broadcasts further sums it down.
  if (c.need(2)) c.dX[2] = c.sumTo(r[2], c.in(1), c.in(2));
  return Status();
}

// RMSNormalization over the axes A from `axis` on, with inv = (mean_A(x^2) + eps)^-1/2,
// xhat = x * inv and g = dY * scale: dX = inv * (g - xhat * mean_A(g * xhat)), and dScale is
// dY * xhat summed down to Scale's shape.
Status gradRmsNorm(GradCtx& c) {
  const int r = c.types.rank(c.in(0));
  if (r < 1) return Status::error("the rank of X must be known");
  int64_t axis = attrInt(c.node, "axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return Status::error("axis is outside X's dimensions");
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < r; ++d) axes.push_back(d);
  const int32_t t = c.types.elemType(c.in(0));
  auto mean = [&](const std::string& v) {
    return c.e.op1("ReduceMean", {v, c.e.ints(axes)}, {attrI("keepdims", 1)});
  };
  const std::string& x = c.in(0);
  const std::string ms = mean(c.e.op1("Mul", {x, x}));
  const std::string inv = c.e.op1(
      "Reciprocal",
      {c.e.op1("Sqrt",
               {c.e.op1("Add", {ms, c.e.scalar(attrFloat(c.node, "epsilon", 1e-5f), t)})})});
  const std::string xhat = c.e.op1("Mul", {x, inv});
  if (c.need(0)) {
    const std::string g = c.e.op1("Mul", {c.dY[0], c.in(1)});
    const std::string m = mean(c.e.op1("Mul", {g, xhat}));
    c.dX[0] = c.e.op1("Mul", {inv, c.e.op1("Sub", {g, c.e.op1("Mul", {xhat, m})})});
  }
  if (c.need(1)) c.dX[1] = c.sumTo(c.e.op1("Mul", {c.dY[0], xhat}), c.out(0), c.in(1));
  return Status();
}

// GroupNormalization, in the view v = X reshaped to [N, G, rest]: with xhat = (v - mean) * inv
// and dxhat = dY * scale per channel, dX = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat *
// xhat)) over each group; dScale and dB sum dY * xhat and dY over the images and positions of
// each channel (and, for opset 18's per-group scale and bias, over the channels of a group).
Status gradGroupNorm(GradCtx& c) {
  std::vector<int64_t> xd;
  if (!c.types.dims(c.in(0), &xd) || xd.size() < 2 || xd[1] < 1)
    return Status::error("the gradient needs X's channel count known");
  const int64_t C = xd[1], G = attrInt(c.node, "num_groups", 1), r = xd.size();
  if (G < 1 || C % G) return Status::error("num_groups must divide the channels");
  const bool perGroup = c.opset < 21;
  const int32_t t = c.types.elemType(c.in(0));
  const std::string& x = c.in(0);
  const std::string shape = c.e.op1("Shape", {x});
  const std::string grouped = c.e.ints({0, G, -1});
  auto view = [&](const std::string& v) { return c.e.op1("Reshape", {v, grouped}); };
  auto mean = [&](const std::string& v) {
    return c.e.op1("ReduceMean", {v, c.e.ints({2})}, {attrI("keepdims", 1)});
  };
  // Per-channel scale [C, 1, ...] (opset 18: each group's value repeated over its channels).
  std::vector<int64_t> chanShape(r - 1, 1);
  chanShape[0] = C;
  auto perChannel = [&](const std::string& v) {
    std::string w = v;
    if (perGroup)
      w = c.e.op1(
          "Reshape",
          {c.e.op1("Expand", {c.e.op1("Reshape", {v, c.e.ints({G, 1})}), c.e.ints({G, C / G})}),
           c.e.ints({C})});
    return c.e.op1("Reshape", {w, c.e.ints(chanShape)});
  };
  const std::string vx = view(x);
  const std::string centered = c.e.op1("Sub", {vx, mean(vx)});
  const std::string var = mean(c.e.op1("Mul", {centered, centered}));
  const std::string inv = c.e.op1(
      "Reciprocal",
      {c.e.op1("Sqrt",
               {c.e.op1("Add", {var, c.e.scalar(attrFloat(c.node, "epsilon", 1e-5f), t)})})});
  const std::string xhat = c.e.op1("Mul", {centered, inv});  // grouped view
  if (c.need(0)) {
    const std::string g = view(c.e.op1("Mul", {c.dY[0], perChannel(c.in(1))}));
    const std::string inner = c.e.op1(
        "Sub",
        {c.e.op1("Sub", {g, mean(g)}), c.e.op1("Mul", {xhat, mean(c.e.op1("Mul", {g, xhat}))})});
    c.dX[0] = c.e.op1("Reshape", {c.e.op1("Mul", {inv, inner}), shape});
  }
  // Sums over every axis but the channels', then over each group's channels for opset 18.
  std::vector<int64_t> rest{0};
  for (int64_t d = 2; d < r; ++d) rest.push_back(d);
  auto perParam = [&](const std::string& v) {
    std::string s = c.e.op1("ReduceSum", {v, c.e.ints(rest)}, {attrI("keepdims", 0)});
    if (perGroup)
      s = c.e.op1("ReduceSum", {c.e.op1("Reshape", {s, c.e.ints({G, C / G})}), c.e.ints({1})},
                  {attrI("keepdims", 0)});
    return s;
  };
  if (c.need(1)) c.dX[1] = perParam(c.e.op1("Mul", {c.dY[0], c.e.op1("Reshape", {xhat, shape})}));
  if (c.need(2)) c.dX[2] = perParam(c.dY[0]);
  return Status();
}

// Attention: one AttentionGrad node (kernels/attention.cpp) recomputes the weights and gives
// dQ, dK, dV and the caches' gradients. Gradients arriving through present_key, present_value
// or qk_matmul_output, and a float mask's own gradient, are not computed: such graphs are
// refused with what to change.
Status gradAttention(GradCtx& c) {
  for (int o = 1; o < static_cast<int>(c.dY.size()); ++o)
    if (!c.dY[o].empty())
      return Status::error("gradients through Attention's output " + std::to_string(o) + " ('" +
                           c.out(o) +
                           "') are not supported; train from Y, or feed the caches as inputs "
                           "without gradients");
  if (c.need(3))
    return Status::error(
        "attn_mask's gradient is not supported; make the mask a constant or an "
        "input the training does not update");
  std::vector<std::string> ins{c.dY[0], c.in(0), c.in(1), c.in(2),
                               c.in(3), c.in(4), c.in(5), c.in(6)};
  while (ins.size() > 4 && ins.back().empty()) ins.pop_back();
  std::vector<onnx::AttributeProto> attrs;
  for (const auto& a : c.node.attribute())
    if (a.name() == "is_causal" || a.name() == "q_num_heads" || a.name() == "kv_num_heads" ||
        a.name() == "scale" || a.name() == "softcap" || a.name() == "left_window_size" ||
        a.name() == "right_window_size")
      attrs.push_back(a);
  const int wants[5] = {0, 1, 2, 4, 5};
  std::vector<std::string> outs;
  for (int w : wants) outs.push_back(c.need(w) ? "" : "-");
  auto r = c.e.op("AttentionGrad", ins, outs, attrs, kGradDomain);
  for (int k = 0; k < 5; ++k)
    if (c.need(wants[k])) c.dX[wants[k]] = r[k];
  return Status();
}

// RotaryEmbedding rotates pairs of X by fixed angles: dX rotates dY back, the same op with the
// sines negated. The caches and positions are constants.
Status gradRotaryEmbedding(GradCtx& c) {
  if (c.need(1) || c.need(2))
    return Status::error("the cos and sin caches are not differentiable; make them constants");
  if (!c.need(0)) return Status();
  std::vector<std::string> ins{c.dY[0], c.in(1), c.e.op1("Neg", {c.in(2)})};
  if (!c.in(3).empty()) ins.push_back(c.in(3));
  c.dX[0] = c.e.op1("RotaryEmbedding", ins, c.forwardAttrs());
  return Status();
}

// CenterCropPad keeps a centred span of each axis listed: dX puts dY back, the same op from Y's
// sizes to X's (the centring offsets agree both ways).
Status gradCenterCropPad(GradCtx& c) {
  if (!c.need(0)) return Status();
  std::string sizes = c.e.op1("Shape", {c.in(0)});
  if (const auto* a = findAttr(c.node, "axes"); a && a->ints_size() > 0)
    sizes = c.e.op1("Gather", {sizes, c.e.ints({a->ints().begin(), a->ints().end()})});
  c.dX[0] = c.e.op1("CenterCropPad", {c.dY[0], sizes}, c.forwardAttrs());
  return Status();
}

// SwiGLU (opset 28): Y = A s B with s = sigmoid(alpha A), so dB = dY A s and
// dA = dY B s (1 + alpha A (1 - s)).
Status gradSwiGlu(GradCtx& c) {
  const int32_t t = c.gradType();
  const std::string a = c.in(0), b = c.in(1);
  const std::string scaled = c.e.op1("Mul", {a, c.e.scalar(attrFloat(c.node, "alpha", 1.0f), t)});
  const std::string s = c.e.op1("Sigmoid", {scaled});
  const std::string gs = c.e.op1("Mul", {c.dY[0], s});
  if (c.need(1)) c.dX[1] = c.e.op1("Mul", {gs, a});
  if (c.need(0)) {
    const std::string one = c.e.scalar(1.0, t);
    const std::string slope =
        c.e.op1("Add", {one, c.e.op1("Mul", {scaled, c.e.op1("Sub", {one, s})})});
    c.dX[0] = c.e.op1("Mul", {c.e.op1("Mul", {gs, b}), slope});
  }
  return Status();
}

// AffineGrid (opset 20) is linear in theta: grid[n, p] = theta[n] [base_p; 1], so
// dtheta[n] = sum_p dGrid[n, p]^T [base_p; 1]. The base coordinates come from the op itself,
// run on identity matrices, with a 1 appended to each; the sizes are not differentiable.
Status gradAffineGrid(GradCtx& c) {
  if (c.need(1)) return Status::error("size is not differentiable");
  if (!c.need(0)) return Status();
  const onnx::TypeProto* tt = c.types.type(c.in(0));
  int64_t sd = 0;
  if (tt && tt->tensor_type().has_shape() && tt->tensor_type().shape().dim_size() == 3)
    sd = tt->tensor_type().shape().dim(1).dim_value();
  if (sd != 2 && sd != 3)
    return Status::error("theta's shape must be known to be [N, 2, 3] or [N, 3, 4] to train it");
  onnx::TensorProto eye;
  eye.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {int64_t{1}, sd, sd + 1}) eye.add_dims(d);
  for (int64_t r = 0; r < sd; ++r)
    for (int64_t k = 0; k <= sd; ++k) eye.add_float_data(r == k ? 1.0f : 0.0f);
  const std::string n = c.e.op1("Slice", {c.in(1), c.e.ints({0}), c.e.ints({1})});
  const std::string eyes = c.e.op1(
      "Expand", {c.e.op1("CastLike", {c.e.op1("Constant", {}, {attrT("value", eye)}), c.in(0)}),
                 c.e.op1("Concat", {n, c.e.ints({sd, sd + 1})}, {attrI("axis", 0)})});
  const std::string base = c.e.op1("AffineGrid", {eyes, c.in(1)}, c.forwardAttrs());
  std::vector<int64_t> pads(2 * (sd + 2), 0);
  pads.back() = 1;
  const std::string homogeneous =
      c.e.op1("Pad", {base, c.e.ints(pads), c.e.scalar(1.0, c.gradType())});
  const std::string b3 = c.e.op1("Reshape", {homogeneous, c.e.ints({0, -1, sd + 1})});
  const std::string g3 = c.e.op1("Reshape", {c.dY[0], c.e.ints({0, -1, sd})});
  c.dX[0] = c.e.op1("MatMul", {c.e.op1("Transpose", {g3}, {attrInts("perm", {0, 2, 1})}), b3});
  return Status();
}

// Col2Im (opset 18) adds each column into the image, so dX gathers the image back into
// columns (Col2ImGrad).
Status gradCol2Im(GradCtx& c) {
  if (c.need(1) || c.need(2))
    return Status::error("image_shape and block_shape are not differentiable");
  if (!c.need(0)) return Status();
  c.dX[0] = c.e.op("Col2ImGrad", {c.dY[0], c.in(0), c.in(1), c.in(2)}, {"dX"}, c.forwardAttrs(),
                   kGradDomain)[0];
  return Status();
}

// DeformConv (opset 19): DeformConvGrad gives every input's gradient at once (the sampled
// columns it needs are rebuilt from X and the offsets).
Status gradDeformConv(GradCtx& c) {
  std::vector<std::string> ins{c.dY[0], c.in(0), c.in(1), c.in(2), c.in(4)};
  const int wants[5] = {0, 1, 2, 3, 4};  // X, W, offset, B, mask
  std::vector<std::string> outs;
  for (int k : wants) outs.push_back(c.need(k) ? "d" : "");
  auto r = c.e.op("DeformConvGrad", ins, outs, c.forwardAttrs(), kGradDomain);
  for (int k : wants)
    if (c.need(k)) c.dX[k] = r[k];
  return Status();
}

// LpNormalization: y = x / n with n the L1 or L2 norm along the axis, so
// dx = (dY - s * sum(dY * y)) / n, with s = y for L2 and sign(x) for L1. Where n is 0 (y is
// 0 whatever x does nearby) the gradient is 0.
Status gradLpNormalization(GradCtx& c) {
  if (!c.need(0)) return Status();
  const int32_t t = c.gradType();
  const int64_t p = attrInt(c.node, "p", 2);
  const std::string axes = c.e.ints({attrInt(c.node, "axis", -1)});
  const auto keep = std::vector<onnx::AttributeProto>{attrI("keepdims", 1)};
  const std::string x = c.in(0), y = c.out(0);
  const std::string n =
      p == 1 ? c.e.op1("ReduceSum", {c.e.op1("Abs", {x}), axes}, keep)
             : c.e.op1("Sqrt", {c.e.op1("ReduceSum", {c.e.op1("Mul", {x, x}), axes}, keep)});
  const std::string dot = c.e.op1("ReduceSum", {c.e.op1("Mul", {c.dY[0], y}), axes}, keep);
  const std::string s = p == 1 ? c.e.op1("Sign", {x}) : y;
  const std::string num = c.e.op1("Sub", {c.dY[0], c.e.op1("Mul", {s, dot})});
  const std::string zero = c.e.op1("Equal", {n, c.e.scalar(0.0, t)});
  const std::string safe = c.e.op1("Where", {zero, c.e.scalar(1.0, t), n});
  c.dX[0] = c.e.op1("Where", {zero, c.e.scalar(0.0, t), c.e.op1("Div", {num, safe})});
  return Status();
}

// ---- Unpooling and the Lp and ROI pools -------------------------------------------

// MaxUnpool scatters X to the flat positions I of its default output shape, so X's gradient
// reads dY at I (MaxUnpoolGrad, which also knows that the last of repeated indices wins). With
// an explicit output_shape the same coordinates sit in a larger tensor: cropping dY to the
// default shape first restores the flat addressing.
Status gradMaxUnpool(GradCtx& c) {
  if (c.need(1) || c.need(2)) return Status::error("MaxUnpool's indices and shape are integers");
  std::string g = c.dY[0];
  if (c.node.input_size() > 2 && !c.in(2).empty()) {
    const int r = c.types.rank(c.in(0));
    if (r < 3) return Status::error("MaxUnpool gradients need the rank of X from shape inference");
    const size_t n = static_cast<size_t>(r - 2);
    auto kernel = attrInts(c.node, "kernel_shape"), strides = attrInts(c.node, "strides"),
         pads = attrInts(c.node, "pads");
    if (kernel.size() != n) return Status::error("kernel_shape needs one entry per spatial axis");
    if (strides.empty()) strides.assign(n, 1);
    if (pads.empty()) pads.assign(2 * n, 0);
    // default = (shape(X) - 1) * strides + kernel - pads_begin - pads_end, N and C unchanged.
    std::vector<int64_t> s{1, 1}, k{1, 1};
    s.insert(s.end(), strides.begin(), strides.end());
    for (size_t i = 0; i < n; ++i) k.push_back(kernel[i] - pads[i] - pads[i + n]);
    auto def = c.e.op1(
        "Add", {c.e.op1("Mul", {c.e.op1("Sub", {c.e.op1("Shape", {c.in(0)}), c.e.ints({1})}),
                                c.e.ints(s)}),
                c.e.ints(k)});
    g = c.e.op1("Slice", {g, c.e.ints(std::vector<int64_t>(r, 0)), def});
  }
  c.dX[0] = c.e.op1("MaxUnpoolGrad", {g, c.in(1)}, {}, kGradDomain);
  return Status();
}

// LpPool and GlobalLpPool: one kernel walks the forward windows again (kernels/lp_pool.cpp).
Status gradLpPool(GradCtx& c) {
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrS("op", c.node.op_type()));
  c.dX[0] = c.e.op1("LpPoolGrad", {c.dY[0], c.in(0), c.out(0)}, attrs, kGradDomain);
  return Status();
}

// MaxRoiPool: each bin's gradient goes to its maximum (kernels/max_roi_pool.cpp). The ROI
// corners snap to whole pixels, so the output is piecewise constant in them.
Status gradMaxRoiPool(GradCtx& c) {
  if (c.need(1))
    return Status::error(
        "MaxRoiPool's rois get no gradient (their corners are rounded to whole pixels); make "
        "them Constant or a data input");
  c.dX[0] = c.e.op1("MaxRoiPoolGrad", {c.dY[0], c.in(0), c.in(1)}, c.forwardAttrs(), kGradDomain);
  return Status();
}

// ---- signal -------------------------------------------------------------------------------

// DFT is linear: the gradient of y_k = c sum_t x_t w^(s k t) (w = e^(2 pi i / n); s = -1 and
// c = 1 forward, s = +1 and c = 1/n inverse) is c sum_k dy_k w^(-s k t): the opposite transform
// of dY over the same n, whose dft_length zero-fills the half that a onesided output left out,
// times n after an inverse DFT (which divides by n), or over n after a forward one. A real
// input keeps the real part. The axis is passed on as the node has it: dY has the input's rank.
Status gradDft(GradCtx& c) {
  if (!c.need(0)) return Status();
  if (!c.in(1).empty())
    return Status::error(
        "DFT with dft_length has no gradient: to train through it, leave dft_length out (the "
        "signal's own length) and pad or slice the signal before the DFT");
  const bool inverse = attrInt(c.node, "inverse", 0) != 0;
  const bool axisInput = c.opset >= 20;
  const std::string shape = c.e.op1("Shape", {c.in(0)});
  // The axis as a scalar, so that n (its length, dft_length of the opposite DFT) is one too.
  const std::string axis = !axisInput
                               ? c.e.scalar(attrInt(c.node, "axis", 1), onnx::TensorProto::INT64)
                           : c.in(2).empty() ? c.e.scalar(-2, onnx::TensorProto::INT64)
                                             : c.in(2);
  const std::string n = c.e.op1("Gather", {shape, axis});
  std::vector<onnx::AttributeProto> attrs{attrI("inverse", inverse ? 0 : 1), attrI("onesided", 0)};
  if (!axisInput) attrs.push_back(attrI("axis", attrInt(c.node, "axis", 1)));
  std::vector<std::string> ins{c.dY[0], n};
  if (axisInput) ins.push_back(axis);
  const std::string g = c.e.op1("DFT", ins, attrs);
  const std::string nf = c.e.op1("Cast", {n}, {attrI("to", c.gradType())});
  const std::string scaled = c.e.op1(inverse ? "Div" : "Mul", {g, nf});
  // (real, imaginary) where the input was complex, the real part alone where it was real.
  const std::string width = c.e.op1("Gather", {shape, c.e.ints({-1})});
  c.dX[0] = c.e.op1("Slice", {scaled, c.e.ints({0}), width, c.e.ints({-1})});
  return Status();
}

}  // namespace

Status gradResize(GradCtx& c);  // grad_resize.cpp
Status gradScan(GradCtx& c);    // grad_scan.cpp
Status gradLoop(GradCtx& c);    // grad_scan.cpp

Status gradRecurrent(GradCtx& c);  // grad_rnn.cpp

const std::vector<GradBuilder>& gradBuilders() {
  static const std::vector<GradBuilder> table = [] {
    std::vector<GradBuilder> t = {
        {"Add", 7, kMax, gradAdd},
        {"Sub", 7, kMax, gradSub},
        {"Mul", 7, kMax, gradMul},
        {"Div", 7, kMax, gradDiv},
        {"Pow", 7, kMax, gradPow},
        {"Neg", 6, kMax, gradNeg},
        {"Identity", 1, kMax, gradIdentity},
        {"Clip", 11, kMax, gradClip},
        {"Clip", 6, 10, gradUnary},
        {"PRelu", 7, kMax, gradPRelu},
        {"Softmax", 1, kMax, gradSoftmax},
        {"LogSoftmax", 1, kMax, gradSoftmax},
        {"Sum", 8, kMax, gradSum},
        {"Mean", 8, kMax, gradMean},
        {"Max", 8, kMax, gradMaxMin},
        {"Min", 8, kMax, gradMaxMin},
        {"Where", 9, kMax, gradWhere},
        {"Gemm", 7, kMax, gradGemm},
        {"MatMul", 1, kMax, gradMatMul},
        {"Reshape", 5, kMax, gradReshapeLike},
        {"Flatten", 1, kMax, gradReshapeLike},
        {"Squeeze", 1, kMax, gradReshapeLike},
        {"Unsqueeze", 1, kMax, gradReshapeLike},
        {"Transpose", 1, kMax, gradTranspose},
        {"Cast", 6, kMax, gradCast},
        // Input 1 gives only the type: no gradient goes to it.
        {"CastLike", 15, kMax, gradCast},
        {"Expand", 8, kMax, gradExpand},
        {"Concat", 4, kMax, gradConcat},
        {"Split", 2, kMax, gradSplit},
        {"Slice", 1, kMax, gradSlice},
        {"Gather", 1, kMax, gradGather},
        {"TopK", 11, kMax, gradTopK},          // ScatterElements
        {"GatherND", 16, kMax, gradGatherND},  // ScatterND's reduction
        {"ScatterND", 11, kMax, gradScatterND},
        {"DFT", 17, kMax, gradDft},
        {"Pad", 2, kMax, gradPad},
        {"Dropout", 7, kMax, gradDropout},
        {"SoftmaxCrossEntropyLoss", 12, kMax, gradSoftmaxCrossEntropy},
        {"NegativeLogLikelihoodLoss", 12, kMax, gradNll},
        {"Conv", 1, kMax, gradConv},
        {"ConvTranspose", 1, kMax, gradConv},
        {"MaxPool", 1, kMax, gradPool},
        {"AveragePool", 1, kMax, gradPool},
        {"GlobalAveragePool", 1, kMax, gradPool},
        {"GlobalMaxPool", 1, kMax, gradPool},
        {"BatchNormalization", 9, kMax, gradBatchNorm},
        {"LayerNormalization", 17, kMax, gradLayerNorm},
        {"RMSNormalization", 23, kMax, gradRmsNorm},
        {"GroupNormalization", 18, kMax, gradGroupNorm},
        {"Attention", 23, kMax, gradAttention},
        {"RotaryEmbedding", 23, kMax, gradRotaryEmbedding},
        {"CenterCropPad", 18, kMax, gradCenterCropPad},
        {"SwiGLU", 28, kMax, gradSwiGlu},
        {"AffineGrid", 20, kMax, gradAffineGrid},
        {"Col2Im", 18, kMax, gradCol2Im},
        {"DeformConv", 19, kMax, gradDeformConv},
        {"LpNormalization", 1, kMax, gradLpNormalization},
        {"Resize", 10, kMax, gradResize},
        {"Upsample", 7, 9, gradResize},
        {"Scan", 9, kMax, gradScan},
        {"Loop", 1, kMax, gradLoop},
        {"RNN", 7, kMax, gradRecurrent},
        {"GRU", 7, kMax, gradRecurrent},
        {"LSTM", 7, kMax, gradRecurrent},
    };
    // Opset 6 dropped the consumed_inputs attribute of the oldest versions.
    for (const auto& op : ops::unaryOps())
      if (op.isOp() && op.gradient) t.push_back({op.name, std::max(6, op.since), kMax, gradUnary});
    for (const auto& op : ops::reduceOps())
      if (op.gradient) t.push_back({op.name, 1, kMax, gradReduce});
    t.push_back({"MaxUnpool", 9, kMax, gradMaxUnpool});
    t.push_back({"LpPool", 2, kMax, gradLpPool});
    t.push_back({"GlobalLpPool", 2, kMax, gradLpPool});
    t.push_back({"MaxRoiPool", 1, kMax, gradMaxRoiPool});
    return t;
  }();
  return table;
}

const GradBuilder* findGradBuilder(const std::string& domain, const std::string& op, int opset) {
  if (domain == kGradDomain) {
    static const GradBuilder bnTraining{"BatchNormalizationTraining", 1, 1, gradBatchNorm};
    static const GradBuilder dropout{"DropoutTraining", 1, 1, gradDropoutTraining};
    if (op == bnTraining.op) return &bnTraining;
    return op == dropout.op ? &dropout : nullptr;
  }
  if (!domain.empty()) return nullptr;
  for (const auto& b : gradBuilders())
    if (op == b.op && opset >= b.since && opset <= b.until) return &b;
  return nullptr;
}

}  // namespace dw::engine::training
