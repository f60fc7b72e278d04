#include <algorithm>
#include <optional>

#include "engine/fusion/fused.h"
#include "engine/fusion/graph_queries.h"
#include "engine/onnx_attrs.h"

namespace dw::engine::fusion {

// MobileNet's and EfficientNet's blocks widen a tensor with a 1x1 convolution, filter it with a
// depthwise one and narrow it with another 1x1. Between them the widened tensor is the largest
// of the network (8 x 96 x 112 x 112 floats, 38 MB, in mobilenet_v2's second block at batch 8),
// and each convolution alone is bound by memory: it is written and read back twice. One kernel
// running the stages a band of rows at a time (onednn/conv_chain.cpp) keeps it in the cache.
// A chain is a 1x1, a depthwise and an optional 1x1 convolution, float32 NHWC at both ends (or
// nChw16c at its input), each intermediate read by the next stage alone; only the last stage
// may add a residual, and only a 1x1 one.

namespace {

enum class Kind { kPointwise, kDepthwise };

// What a Conv node is as a chain stage, if anything: its window and group from its attributes
// and constant weights' dims.
std::optional<Kind> stageKind(const onnx::NodeProto& n, const ValueTypes& types) {
  if (!isOp(n, "", "Conv") || n.input_size() < 2 || n.output_size() != 1) return std::nullopt;
  const Fused f = fusedOf(n);
  if (f.hasMaxPool() || !f.chain.empty() || !f.blockedInputs.empty() || !f.blockedOutputs.empty())
    return std::nullopt;
  const auto w = staticDims(types, n.input(1));
  if (w.size() != 4) return std::nullopt;
  const std::string autoPad = attrString(n, "auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID") return std::nullopt;
  const auto kernel = attrInts(n, "kernel_shape", {w[2], w[3]});
  const auto strides = attrInts(n, "strides", {1, 1});
  const auto dilations = attrInts(n, "dilations", {1, 1});
  auto pads = attrInts(n, "pads", {0, 0, 0, 0});
  if (autoPad == "VALID") pads = {0, 0, 0, 0};
  if (kernel != std::vector<int64_t>{w[2], w[3]} || strides.size() != 2 || pads.size() != 4 ||
      dilations != std::vector<int64_t>{1, 1})
    return std::nullopt;
  const int64_t group = attrInt(n, "group", 1);
  if (group == 1 && w[2] == 1 && w[3] == 1 && strides == std::vector<int64_t>{1, 1} &&
      pads == std::vector<int64_t>{0, 0, 0, 0})
    return Kind::kPointwise;
  // The kernel's depthwise loops take windows up to 7 x 7 and strides up to 4; padding
  // narrower than the window.
  const bool window = w[2] <= 7 && w[3] <= 7 && strides[0] >= 1 && strides[0] <= 4 &&
                      strides[1] >= 1 && strides[1] <= 4 && pads[0] < w[2] && pads[2] < w[2] &&
                      pads[1] < w[3] && pads[3] < w[3] &&
                      std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p >= 0; });
  if (group > 1 && w[0] == group && w[1] == 1 && window) return Kind::kDepthwise;
  return std::nullopt;
}

}  // namespace

std::vector<std::vector<size_t>> findConvChains(
    const PlanNodes& nodes, const ValueTypes& types,
    const std::function<bool(const std::string&)>& nhwc) {
  const auto readers = readersOf(nodes, std::vector<bool>(nodes.size(), false));
  // The node reading `v` as its input 0, where that is v's only use.
  auto next = [&](const std::string& v) -> std::optional<size_t> {
    auto it = readers.find(v);
    if (it == readers.end() || it->second.size() != 1 || it->second[0].second != 0)
      return std::nullopt;
    return it->second[0].first;
  };
  std::vector<std::optional<Kind>> kind(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) kind[i] = stageKind(nodes[i].first, types);
  std::vector<bool> taken(nodes.size(), false);
  std::vector<std::vector<size_t>> chains;
  // Whether node i's output goes on to node j of kind `want`, as its sole reader.
  auto followedBy = [&](size_t i, Kind want) -> std::optional<size_t> {
    const onnx::NodeProto& n = nodes[i].first;
    const auto j = next(n.output(0));
    if (!j || taken[*j] || kind[*j] != want || !nhwc(n.output(0)) || fusedOf(n).residual)
      return std::nullopt;
    return j;
  };
  // Whether the widened tensor outweighs the 1x1 stages' weights, which every thread reads
  // whole: each band of rows is multiplied by all of them, where two separate nodes split the
  // channels between the threads. On small planes of many channels the separate nodes won:
  // mobilenet_v2 at batch 1, 7 x 7 planes widened 160 -> 960 (1.2 MB of weights for a 188 KB
  // tensor) took 0.105 ms fused against 0.096; 14 x 14 by 96 -> 576, 0.138 against 0.128;
  // 14 x 14 by 64 -> 384 (196 KB of weights, 301 KB widened) went from 0.072 to 0.063.
  // Unknown dims: fused.
  auto pays = [&](const std::vector<size_t>& chain) {
    const auto x = staticDims(types, nodes[chain.front()].first.input(0));
    int64_t weights = 0;
    for (size_t k : chain) {
      const auto w = staticDims(types, nodes[k].first.input(1));
      if (kind[k] == Kind::kPointwise && w.size() == 4) weights += w[0] * w[1];
    }
    const auto wide = staticDims(types, nodes[chain.front()].first.input(1));
    if (x.size() != 4 || wide.size() != 4) return true;
    return 2 * x[0] * x[2] * x[3] * wide[0] > 3 * weights;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    // Without a widening stage the depthwise input comes from memory either way, and oneDNN's
    // blocked kernels (with the layout the chain's input could keep) were faster: mobilenet_v2's
    // first block at batch 8 took 1.2 ms fused against 1.1 as two nodes.
    if (kind[i] != Kind::kPointwise || taken[i] || !nhwc(nodes[i].first.input(0))) continue;
    const auto d = followedBy(i, Kind::kDepthwise);
    if (!d) continue;
    std::vector<size_t> chain{i, *d};
    if (const auto p = followedBy(*d, Kind::kPointwise)) chain.push_back(*p);
    // The chain ends where its output can be NHWC (a 1x1 convolution writing a graph output
    // stays out); the kernel adds a residual after a 1x1 stage only.
    auto endsWell = [&] {
      const onnx::NodeProto& end = nodes[chain.back()].first;
      return nhwc(end.output(0)) &&
             !(fusedOf(end).residual && kind[chain.back()] == Kind::kDepthwise);
    };
    if (!endsWell()) chain.pop_back();
    if (chain.size() < 2 || !endsWell() || !pays(chain)) continue;
    for (size_t k : chain) taken[k] = true;
    // Squeeze-excitation after the depthwise stage averages its output over the planes: the
    // kernel sums the rows as it writes them, instead of a GlobalAveragePool reading the
    // tensor back (efficientnet_b0: 17 such nodes).
    if (kind[chain.back()] == Kind::kDepthwise) {
      auto it = readers.find(nodes[chain.back()].first.output(0));
      if (it != readers.end())
        for (const auto& [r, input] : it->second)
          if (input == 0 && isOp(nodes[r].first, "", "GlobalAveragePool") &&
              nodes[r].first.output_size() == 1) {
            chain.push_back(r);
            taken[r] = true;
            break;
          }
    }
    chains.push_back(std::move(chain));
  }
  return chains;
}

void fuseConvChains(PlanNodes& nodes, const std::vector<std::vector<size_t>>& chains) {
  std::vector<bool> removed(nodes.size(), false);
  for (const auto& chain : chains) {
    onnx::NodeProto& first = nodes[chain.front()].first;
    const bool pooled = isOp(nodes[chain.back()].first, "", "GlobalAveragePool");
    const size_t stages = chain.size() - (pooled ? 1 : 0);
    const onnx::NodeProto& last = nodes[chain[stages - 1]].first;
    // The residual first: setResidual puts it at its own index, before the stages' inputs.
    if (fusedOf(last).residual) setResidual(first, last.input(Fused::kResidualInput));
    for (size_t k = 1; k < stages; ++k) {
      const onnx::NodeProto& n = nodes[chain[k]].first;
      const Fused f = fusedOf(n);
      ChainStage s;
      s.window = {{}, attrInts(n, "strides", {1, 1}), attrInts(n, "pads", {0, 0, 0, 0}), {}};
      if (attrString(n, "auto_pad", "NOTSET") == "VALID") s.window.pads = {0, 0, 0, 0};
      s.group = attrInt(n, "group", 1);
      s.activation = f.activation;
      s.activationParams = f.activationParams;
      s.activationChoice = f.activationChoice;
      s.bnEpsilon = f.bnEpsilon;
      s.hasBias = n.input_size() > 2 && !n.input(2).empty();
      std::vector<std::string> inputs{n.input(1), s.hasBias ? n.input(2) : ""};
      for (int b = 3; b <= 6; ++b)
        inputs.push_back(f.bnEpsilon && n.input_size() > b ? n.input(b) : "");
      appendChainStage(first, s, inputs);
      removed[chain[k]] = true;
    }
    *first.mutable_output(0) = last.output(0);
    clearOutputMarks(first);
    markOutput(first, Layout::kNhwc, 0);
    if (pooled) {
      setMeanOutput(first, nodes[chain.back()].first.output(0));
      removed[chain.back()] = true;
    }
  }
  dropRemoved(nodes, removed);
}

}  // namespace dw::engine::fusion
