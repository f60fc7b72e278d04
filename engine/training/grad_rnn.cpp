// Gradient of the recurrent ops RNN, GRU and LSTM: one RecurrentGrad node (kernel in
// engine/onednn/rnn_grad.cpp) that recomputes the forward pass and backpropagates through time,
// for every direction, layout, optional input and activation the forward kernels support.
#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"

namespace dw::engine::training {

Status gradRecurrent(GradCtx& c) {
  if (c.need(4)) return Status::error("sequence_lens is not differentiable");
  // Inputs: the forward's eight (absent ones stay empty), then dY, dY_h, dY_c where gradients
  // flow (absent: zero, so outputs nothing reads cost nothing).
  std::vector<std::string> ins;
  for (int i = 0; i < 8; ++i) ins.push_back(c.in(i));
  for (int o = 0; o < 3; ++o) ins.push_back(o < static_cast<int>(c.dY.size()) ? c.dY[o] : "");
  auto attrs = c.forwardAttrs();
  attrs.push_back(attrS("op", c.node.op_type()));
  // Outputs sit at the index of the input they are the gradient of (none for sequence_lens).
  std::vector<std::string> outs;
  for (int i = 0; i < 8; ++i) outs.push_back(i != 4 && c.need(i) ? "" : "-");
  auto r = c.e.op("RecurrentGrad", ins, outs, attrs, kGradDomain);
  for (int i = 0; i < 8 && i < static_cast<int>(c.dX.size()); ++i)
    if (c.need(i)) c.dX[i] = r[i];
  return Status();
}

}  // namespace dw::engine::training
