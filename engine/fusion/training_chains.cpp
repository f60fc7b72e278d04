#include <algorithm>

#include "engine/fusion/fused.h"
#include "engine/fusion/graph_queries.h"
#include "engine/onnx_attrs.h"
#include "nodes/catalogue.h"

namespace dw::engine::fusion {

namespace {

// Training-graph fusion for the CNN pattern MaxPool(Relu(BatchNormalizationTraining(...))):
// the Relu gradient is folded into the max-pooling gradient (the pool's input is the Relu's
// output, so "Relu input > 0" is "pool input > 0": no extra read), after which the
// normalization's output has the Relu as its only reader and the Relu runs inside the
// normalization's output pass. Each saves a full pass over the block's largest activation.
// Kernels see Fused::reluGrad on PoolGrad and Fused::activation on BatchNormalizationTraining.
// Then, where the normalization's output feeds only the MaxPool and its gradient, and that
// gradient feeds only the normalization's gradient, the pooling joins both: the forward pools
// while it normalises and keeps each window's winner (a new uint8 value, its output 5), and the
// gradient scatters the pooled gradient through the winners inside its own passes. The
// full-size activation and its gradient are then never written (Fused::maxPool on both nodes;
// see onednn/batch_norm_training.cpp).
// The domain of the gradient nodes the fusion passes below look for and rewrite.
constexpr const char* kGrad = dw::kGradDomain;

// The last step of fuseTrainingChains (see there): BatchNormalizationTraining -> MaxPool and
// PoolGrad -> BatchNormalizationGrad become the two normalization nodes with the pooling inside.
void fuseMaxPoolIntoBatchNorm(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                              const std::set<std::string>& outputs, std::vector<bool>& removed) {
  std::unordered_map<std::string, std::vector<size_t>> users;
  std::set<std::string> names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (removed[i]) continue;
    for (const auto& in : nodes[i].first.input())
      if (!in.empty()) users[in].push_back(i), names.insert(in);
    for (const auto& o : nodes[i].first.output()) names.insert(o);
  }
  auto onnxOp = [](const onnx::NodeProto& n, const char* op) {
    return (n.domain().empty() || n.domain() == "ai.onnx") && n.op_type() == op;
  };
  auto gradOp = [&](const onnx::NodeProto& n, const char* op) {
    return n.domain() == kGrad && n.op_type() == op;
  };
  // The window of a 2-D MaxPool or its PoolGrad, defaults filled in; empty where the fused
  // kernels do not cover it (auto_pad, ceil_mode, dilation, storage_order, > 254 elements).
  struct Win {
    std::vector<int64_t> kernel, strides, pads;
    bool ok = false;
  };
  auto window = [&](const onnx::NodeProto& n) {
    Win w{attrInts(n, "kernel_shape", {}), attrInts(n, "strides", {1, 1}),
          attrInts(n, "pads", {0, 0, 0, 0})};
    if (w.kernel.size() != 2 || w.strides.size() != 2 || w.pads.size() != 4) return w;
    if (w.kernel[0] < 1 || w.kernel[1] < 1 || w.kernel[0] * w.kernel[1] >= kNoWinner) return w;
    const std::string autoPad = attrString(n, "auto_pad", "NOTSET");
    if (autoPad == "VALID")
      w.pads = {0, 0, 0, 0};
    else if (autoPad != "NOTSET")
      return w;
    if (attrInt(n, "ceil_mode", 0) != 0 || attrInt(n, "storage_order", 0) != 0) return w;
    for (int64_t d : attrInts(n, "dilations", {1, 1}))
      if (d != 1) return w;
    w.ok = true;
    return w;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    onnx::NodeProto& bn = nodes[i].first;
    if (removed[i] || !gradOp(bn, "BatchNormalizationTraining") || bn.input_size() != 5 ||
        bn.output_size() != 5 || fusedOf(bn).hasMaxPool())
      continue;
    const std::string& act = bn.output(0);
    if (act.empty() || outputs.count(act) || users[act].size() != 2) continue;
    int mp = -1, pg = -1;
    for (size_t u : users[act]) {
      const auto& n = nodes[u].first;
      if (onnxOp(n, "MaxPool") && n.input_size() == 1 &&
          (n.output_size() == 1 || n.output(1).empty()))
        mp = static_cast<int>(u);
      else if (gradOp(n, "PoolGrad") && attrString(n, "op", "") == "MaxPool" &&
               n.input_size() == 2 && n.input(1) == act && n.input(0) != act &&
               n.output_size() == 1)
        pg = static_cast<int>(u);
    }
    if (mp < 0 || pg < 0) continue;
    const auto& pool = nodes[mp].first;
    const auto& poolGrad = nodes[pg].first;
    const auto win = window(pool), gradWin = window(poolGrad);
    if (!win.ok || !gradWin.ok || win.kernel != gradWin.kernel || win.strides != gradWin.strides ||
        win.pads != gradWin.pads)
      continue;
    // The Relu gradient was folded into the pooling gradient exactly when the Relu was folded
    // into the normalization.
    if (fusedOf(poolGrad).reluGrad != (fusedOf(bn).activation == "Relu")) continue;
    const std::string& dAct = poolGrad.output(0);
    if (dAct.empty() || outputs.count(dAct) || users[dAct].size() != 1) continue;
    const size_t gi = users[dAct][0];
    onnx::NodeProto& grad = nodes[gi].first;
    if (removed[gi] || !gradOp(grad, "BatchNormalizationGrad") || grad.input_size() != 6 ||
        grad.input(0) != dAct || grad.input(1) != bn.input(0) || grad.input(2) != bn.input(1) ||
        grad.input(3) != bn.output(3) || grad.input(4) != bn.output(4) ||
        attrInt(grad, "global_stats", 0) != 0)
      continue;
    std::string winners = act + "__dw_maxpool_winners";
    while (names.count(winners)) winners += "_";
    names.insert(winners);
    for (onnx::NodeProto* n : {&bn, &grad}) setMaxPool(*n, {win.kernel, win.strides, win.pads, {}});
    bn.set_output(0, pool.output(0));
    bn.add_output(winners);
    grad.set_input(0, poolGrad.input(0));
    grad.add_input(winners);
    removed[mp] = removed[pg] = true;
  }
}

// A Conv the layout passes (markBlockedLayouts, shareConvSourceLayout) may rewrite: group 1, a
// single output, weights given, and no max pooling fused into it.
bool layoutConv(const onnx::NodeProto& conv) {
  return isOp(conv, "", "Conv") && conv.input_size() >= 2 && conv.output_size() == 1 &&
         attrInt(conv, "group", 1) == 1 && !fusedOf(conv).hasMaxPool() && !fusedOf(conv).residual;
}

// The training CNN block Conv -> BatchNormalizationTraining (its max pooling fused in): the
// convolution's output is read only by the normalization and the normalization's gradient, and
// that gradient's dX only by the convolution's ConvGrad, as dY. Both tensors are then handed
// over in oneDNN's nChw16c layout instead of plain NCHW (onednn_backend.h): the convolution
// primitives read and write them as they are, and the normalization kernels work on 16
// channels per vector (or, for windows other than 2x2 / stride 2, gather and scatter one
// channel block at a time while it is in cache). This saves two reorders of the block's
// activation per step. (The block's other end, the pooled output feeding the next convolution,
// measured no gain: its tensors are a quarter the size, and the transposes cost what the
// reorders did.) Needs statically known weights of 2-D convolutions (group 1, more than one
// input channel, output channels a multiple of 16).
void markBlockedLayouts(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                        const std::set<std::string>& outputs, const std::vector<bool>& removed,
                        const std::unordered_map<std::string, onnx::TypeProto>& types) {
  auto users = readersOf(nodes, removed);
  for (size_t i = 0; i < nodes.size(); ++i) {
    onnx::NodeProto& conv = nodes[i].first;
    if (removed[i] || !layoutConv(conv)) continue;
    const std::string& y = conv.output(0);
    const auto w = staticDims(types, conv.input(1));
    if (y.empty() || outputs.count(y) || w.size() != 4 || w[1] < 2 || w[0] % 16 != 0) continue;
    std::vector<std::pair<size_t, int>> bns, grads;
    bool ok = true;
    for (const auto& [u, k] : users[y]) {
      const auto& n = nodes[u].first;
      if (k == 0 && isOp(n, kGrad, "BatchNormalizationTraining") && fusedOf(n).hasMaxPool())
        bns.emplace_back(u, k);
      else if (k == 1 && isOp(n, kGrad, "BatchNormalizationGrad") && fusedOf(n).hasMaxPool())
        grads.emplace_back(u, k);
      else
        ok = false;
    }
    if (!ok || bns.empty()) continue;
    markOutput(conv, Layout::kBlocked, 0);
    for (const auto& [u, k] : bns) markInput(nodes[u].first, Layout::kBlocked, k);
    for (const auto& [u, k] : grads) {
      onnx::NodeProto& grad = nodes[u].first;
      markInput(grad, Layout::kBlocked, k);
      const std::string& dx = grad.output(0);
      if (dx.empty() || outputs.count(dx) || users[dx].empty()) continue;
      bool convGradsOnly = true;
      for (const auto& [cu, ck] : users[dx]) {
        const auto& cg = nodes[cu].first;
        convGradsOnly &= ck == 0 && isOp(cg, kGrad, "ConvGrad") && cg.input_size() >= 3 &&
                         cg.input(1) == conv.input(0) && cg.input(2) == conv.input(1) &&
                         attrInt(cg, "transposed", 0) == 0;
      }
      if (!convGradsOnly) continue;
      markOutput(grad, Layout::kBlocked, 0);
      for (const auto& [cu, ck] : users[dx]) markInput(nodes[cu].first, Layout::kBlocked, ck);
    }
  }
}

// A 2-D Conv whose input X the weight gradient (its ConvGrad) reads as well: oneDNN's kernels
// for 16 or more input channels read X in nChw16c, so the forward and the backward pass each
// converted the plain X (the CNN's second layer: 1.6 MB, 0.2 ms a conversion). The Conv now
// keeps its converted X as a second output (blocked output 1), which the ConvGrad reads in its
// place (blocked input 1). Needs group 1, statically known 4-D weights with input
// channels a multiple of 16, and no pooling or normalization fused into the Conv.
void shareConvSourceLayout(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                           const std::vector<bool>& removed,
                           const std::unordered_map<std::string, onnx::TypeProto>& types) {
  auto users = readersOf(nodes, removed);
  for (size_t i = 0; i < nodes.size(); ++i) {
    onnx::NodeProto& conv = nodes[i].first;
    if (removed[i] || !layoutConv(conv) || fusedOf(conv).bnEpsilon) continue;
    const std::string& x = conv.input(0);
    const auto w = staticDims(types, conv.input(1));
    if (x.empty() || w.size() != 4 || w[1] < 16 || w[1] % 16 != 0) continue;
    std::vector<size_t> grads;
    for (const auto& [u, k] : users[x]) {
      const auto& cg = nodes[u].first;
      const bool wantsWeights = (cg.output_size() > 1 && !cg.output(1).empty()) ||
                                (cg.output_size() > 2 && !cg.output(2).empty());
      if (k == 1 && isOp(cg, kGrad, "ConvGrad") && cg.input_size() >= 3 &&
          cg.input(2) == conv.input(1) && attrInt(cg, "transposed", 0) == 0 &&
          attrInt(cg, "group", 1) == 1 && wantsWeights)
        grads.push_back(u);
    }
    if (grads.empty()) continue;
    // Named after the Conv too: a residual block's two convolutions read the same X.
    const std::string kept = "__dw_nChw16c/" + x + "/" + conv.output(0);
    conv.add_output(kept);
    markOutput(conv, Layout::kBlocked, 1);
    for (size_t u : grads) {
      nodes[u].first.set_input(1, kept);
      markInput(nodes[u].first, Layout::kBlocked, 1);
    }
  }
}

// The training CNN's first block, Conv -> BatchNormalizationTraining (its max pooling fused in)
// on a one-channel image: where the convolution's output X is read only by the normalization
// and its gradient, and that gradient's dX only by the convolution's ConvGrad (whose own dX,
// the image's gradient, nobody wants), the convolution moves into both normalization nodes
// (Fused::conv and its window; see FusedConv in batch_norm_training.cpp). They compute X's channels
// where they read them, and the gradient node sums the weight and bias gradients from dX's rows
// as it makes them: X and dX, the block's two largest tensors, are never written, and the
// Conv and ConvGrad nodes go. Needs stride, pads and dilations the direct one-channel loops
// take (auto_pad NOTSET or VALID) and statically known N x 1 x KH x KW weights.
void fuseConvIntoBatchNorm(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                           const std::set<std::string>& outputs, std::vector<bool>& removed,
                           const std::unordered_map<std::string, onnx::TypeProto>& types) {
  auto users = readersOf(nodes, removed);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const onnx::NodeProto& conv = nodes[i].first;
    if (removed[i] || !isOp(conv, "", "Conv") || conv.input_size() < 2 || conv.input_size() > 3 ||
        conv.output_size() != 1 || conv.output(0).empty() || outputs.count(conv.output(0)))
      continue;
    bool plain = true;  // no attribute the direct loops or the fused window do not take
    for (const auto& a : conv.attribute())
      plain &= a.name() == "kernel_shape" || a.name() == "strides" || a.name() == "pads" ||
               a.name() == "dilations" || (a.name() == "group" && a.i() == 1) ||
               (a.name() == "auto_pad" && (a.s() == "NOTSET" || a.s() == "VALID"));
    const auto w = staticDims(types, conv.input(1));
    if (!plain || w.size() != 4 || w[1] != 1) continue;
    const auto* autoPad = findAttr(conv, "auto_pad");
    const bool valid = autoPad && autoPad->s() == "VALID";
    const std::vector<int64_t> strides = attrInts(conv, "strides", {1, 1});
    const std::vector<int64_t> pads =
        valid ? std::vector<int64_t>{0, 0, 0, 0} : attrInts(conv, "pads", {0, 0, 0, 0});
    const std::vector<int64_t> dilations = attrInts(conv, "dilations", {1, 1});
    if (strides.size() != 2 || pads.size() != 4 || dilations.size() != 2) continue;
    if (attrInts(conv, "kernel_shape", {w[2], w[3]}) != std::vector<int64_t>{w[2], w[3]}) continue;
    int bn = -1, grad = -1;
    bool ok = users[conv.output(0)].size() == 2;
    for (const auto& [u, k] : users[conv.output(0)]) {
      const auto& n = nodes[u].first;
      const Fused f = fusedOf(n);
      if (k == 0 && isOp(n, kGrad, "BatchNormalizationTraining") && n.input_size() == 5 &&
          f.hasMaxPool() && f.conv.empty())
        bn = static_cast<int>(u);
      else if (k == 1 && isOp(n, kGrad, "BatchNormalizationGrad") && n.input_size() == 7 &&
               n.output_size() == 3 && f.hasMaxPool() && f.conv.empty())
        grad = static_cast<int>(u);
      else
        ok = false;
    }
    if (!ok || bn < 0 || grad < 0) continue;
    onnx::NodeProto& bnNode = nodes[bn].first;
    onnx::NodeProto& gradNode = nodes[grad].first;
    if (gradNode.input(2) != bnNode.input(1) || gradNode.input(3) != bnNode.output(3) ||
        gradNode.input(4) != bnNode.output(4))
      continue;
    const std::string& dx = gradNode.output(0);
    if (dx.empty() || outputs.count(dx) || users[dx].size() != 1) continue;
    const size_t cgi = users[dx][0].first;
    const onnx::NodeProto& cg = nodes[cgi].first;
    const auto* transposed = findAttr(cg, "transposed");
    if (users[dx][0].second != 0 || !isOp(cg, kGrad, "ConvGrad") || cg.input_size() != 3 ||
        cg.input(1) != conv.input(0) || cg.input(2) != conv.input(1) ||
        (transposed && transposed->i() != 0) || (cg.output_size() > 0 && !cg.output(0).empty()))
      continue;
    const std::string bias = conv.input_size() > 2 ? conv.input(2) : "";
    const std::string dw = cg.output_size() > 1 ? cg.output(1) : "";
    const std::string dbias = cg.output_size() > 2 ? cg.output(2) : "";
    if (bias.empty() && !dbias.empty()) continue;
    for (onnx::NodeProto* n : {&bnNode, &gradNode})
      setConv(*n, displayName(conv), {{}, strides, pads, dilations});
    bnNode.set_input(0, conv.input(0));
    bnNode.add_input(conv.input(1));
    bnNode.add_input(bias);
    gradNode.set_input(1, conv.input(0));
    gradNode.add_input(conv.input(1));
    gradNode.add_input(bias);
    gradNode.set_output(0, "");
    gradNode.add_output(dw);
    gradNode.add_output(dbias);
    removed[i] = removed[cgi] = true;
  }
}

}  // namespace

void fuseTrainingChains(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                        const onnx::GraphProto& g,
                        const std::unordered_map<std::string, onnx::TypeProto>& types,
                        bool blockedLayouts, bool convIntoBatchNorm) {
  std::set<std::string> outputs;
  for (const auto& o : g.output()) outputs.insert(o.name());
  std::vector<bool> removed(nodes.size(), false);
  std::unordered_map<std::string, int> readers;
  std::unordered_map<std::string, size_t> consumer;
  auto count = [&] {
    readers.clear();
    consumer.clear();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (removed[i]) continue;
      const auto& n = nodes[i].first;
      for (const auto& in : n.input())
        if (!in.empty()) ++readers[in], consumer[in] = i;
      for (const auto& a : n.attribute())
        if (a.has_g() || a.graphs_size() > 0) return false;  // subgraphs: leave the graph alone
    }
    return true;
  };
  // The node that alone reads output 0 of n, if any.
  auto soleReader = [&](const onnx::NodeProto& n) -> int {
    if (n.output_size() < 1 || n.output(0).empty() || outputs.count(n.output(0))) return -1;
    if (readers[n.output(0)] != 1) return -1;
    return static_cast<int>(consumer.at(n.output(0)));
  };
  if (!count()) return;
  for (size_t i = 0; i < nodes.size(); ++i) {
    onnx::NodeProto& n = nodes[i].first;
    if (n.domain() != kGrad || n.op_type() != "PoolGrad" || attrString(n, "op", "") != "MaxPool")
      continue;
    if (n.output_size() != 1 || n.input_size() != 2) continue;
    const int c = soleReader(n);
    if (c < 0) continue;
    const auto& ug = nodes[c].first;
    if (ug.domain() != kGrad || ug.op_type() != "UnaryGrad" || attrString(ug, "op", "") != "Relu" ||
        ug.input_size() != 3 || ug.input(0) != n.output(0) || ug.input(2) != n.input(1))
      continue;
    setReluGrad(n);
    n.set_output(0, ug.output(0));
    removed[c] = true;
  }
  count();
  for (size_t i = 0; i < nodes.size(); ++i) {
    onnx::NodeProto& n = nodes[i].first;
    if (removed[i] || n.domain() != kGrad || n.op_type() != "BatchNormalizationTraining") continue;
    const int c = soleReader(n);
    if (c < 0) continue;
    const auto& relu = nodes[c].first;
    if ((!relu.domain().empty() && relu.domain() != "ai.onnx") || relu.op_type() != "Relu" ||
        relu.output_size() != 1)
      continue;
    setActivation(n, "Relu", {});
    n.set_output(0, relu.output(0));
    removed[c] = true;
  }
  fuseMaxPoolIntoBatchNorm(nodes, outputs, removed);
  if (convIntoBatchNorm) fuseConvIntoBatchNorm(nodes, outputs, removed, types);
  if (blockedLayouts) {
    markBlockedLayouts(nodes, outputs, removed, types);
    shareConvSourceLayout(nodes, removed, types);
  }
  dropRemoved(nodes, removed);
}

}  // namespace dw::engine::fusion
