// Gradient of Resize (opset 10+) and Upsample (7-9): one ResizeGrad node (kernels/resize_grad.cpp)
// that scatters dY back through the very taps the forward reference kernel gathers with
// (kernels/resize_sampling.h). Only X gets a gradient: roi, scales and sizes choose where to
// sample, and the sizes are integers anyway.
#include "engine/kernel.h"
#include "engine/kernels/resize_sampling.h"
#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"

namespace dw::engine::training {

Status gradResize(GradCtx& c) {
  // The forward kernel's own attribute check: what it cannot run has no gradient either, and
  // the error names the attribute.
  Attributes attrs;
  for (const auto& a : c.node.attribute()) attrs.set(a);
  auto spec = ResizeSpec::fromAttributes(attrs, c.node.op_type(), c.opset);
  if (!spec) return spec.status();
  if (!c.need(0)) return Status();
  auto gradAttrs = c.forwardAttrs();
  gradAttrs.push_back(attrS("op", c.node.op_type()));
  gradAttrs.push_back(attrI("opset", c.opset));
  std::vector<std::string> ins{c.dY[0], c.shapeOf(c.in(0))};
  for (int i = 1; i < c.node.input_size(); ++i) ins.push_back(c.in(i));
  c.dX[0] = c.e.op1("ResizeGrad", ins, gradAttrs, kGradDomain);
  return Status();
}

}  // namespace dw::engine::training
