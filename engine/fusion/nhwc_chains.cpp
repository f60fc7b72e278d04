#include <algorithm>
#include <functional>

#include "engine/fusion/fused.h"
#include "engine/fusion/graph_queries.h"
#include "engine/onnx_attrs.h"
#include "graphs/subgraph.h"
#include "ops/unary_table.h"

namespace dw::engine::fusion {

// Inference chains of convolutions (MobileNet, ResNet, EfficientNet blocks) keep their
// activations in NHWC between the convolutions instead of NCHW: oneDNN's 1x1 and depthwise
// kernels work on NHWC, so every plain tensor cost a reorder in and one out, more than the
// convolutions themselves on mobilenet_v2 at batch 1 (6.9 of 12 ms). Elementwise ops between
// the convolutions (Relu, Clip, Add of two such tensors of the same shape) do not care about the
// layout, so a group of values joined through them shares one: it goes NHWC when every value
// is a float32 4-D tensor (a dynamic batch is fine), made by a convolution or such an elementwise
// op, and read only by them, as a convolution's input X or by a global pooling (the network's
// head, which would otherwise cost a reorder of the widest tensor), and none is a graph input or
// output. The convolutions writing or reading it are marked (fusion/fused.h: nhwcOutputs /
// nhwcInputs); the shapes stay NCHW, only the memory order differs. Groups of large planes take
// oneDNN's blocked nChw16c instead (blockedInputs / blockedOutputs), below.
void markNhwcChains(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                    const onnx::GraphProto& g,
                    const std::unordered_map<std::string, onnx::TypeProto>& types,
                    bool convChains) {
  std::set<std::string> fixed;  // graph inputs, outputs, initializers
  for (const auto& v : g.input()) fixed.insert(v.name());
  for (const auto& v : g.output()) fixed.insert(v.name());
  for (const auto& v : g.initializer()) fixed.insert(v.name());
  auto float4d = [&](const std::string& v) {
    auto it = types.find(v);
    return it != types.end() && it->second.tensor_type().elem_type() == onnx::TensorProto::FLOAT &&
           shapeOf(types, v).size() == 4;
  };
  // Convolutions whose kernel can read and write NHWC: 2-D, not transposed, not the
  // one-input-channel direct loops, nothing training handed over. A fused max pooling (a
  // ResNet's stem) pools in NHWC.
  auto nhwcConv = [&](const onnx::NodeProto& n) {
    if (!isOp(n, "", "Conv") || n.input_size() < 2 || n.output_size() != 1) return false;
    const Fused f = fusedOf(n);
    if (!f.blockedOutputs.empty() || !f.blockedInputs.empty()) return false;
    const auto w = staticDims(types, n.input(1));
    return w.size() == 4 && !(w[1] == 1 && attrInt(n, "group", 1) == 1);
  };
  // Max and average pooling over a 2-D window carry the layout from input 0 to output 0, as a
  // convolution does (oneDNN's pooling reads and writes either), where nothing asks for the
  // reference kernel (Indices, column-major indices).
  auto nhwcPool = [&](const onnx::NodeProto& n) {
    if (!isOp(n, "", "MaxPool") && !isOp(n, "", "AveragePool")) return false;
    if (n.input_size() != 1 || n.output_size() != 1 || attrInt(n, "storage_order", 0) != 0)
      return false;
    return attrInts(n, "kernel_shape").size() == 2 && float4d(n.input(0)) && float4d(n.output(0));
  };
  // Nodes that read input 0 and write output 0 in a chain's layout, each side a group of its own.
  auto carrier = [&](const onnx::NodeProto& n) { return nhwcConv(n) || nhwcPool(n); };
  // The inputs of an elementwise node that share its output's layout.
  auto elementwiseInputs = [&](const onnx::NodeProto& n) -> std::vector<int> {
    if (!n.domain().empty() && n.domain() != "ai.onnx") return {};
    if (n.output_size() != 1 || n.input_size() < 1) return {};
    const std::string& op = n.op_type();
    if (op == "Identity") return {0};
    // An inference BatchNormalization is per channel: oneDNN's reads either layout (its scale,
    // bias and statistics are vectors of their own).
    if (op == "BatchNormalization" && n.input_size() == 5 && attrInt(n, "training_mode", 0) == 0)
      return {0};
    // A concatenation of channels (Inception, SqueezeNet's Fire, DenseNet, ShuffleNet): every
    // input in the output's layout. In NHWC each pixel's channels are joined; nChw16c (whole
    // blocks of 16) joins per image as plain NCHW does.
    if (op == "Concat" && float4d(n.output(0))) {
      const int64_t axis = attrInt(n, "axis", 1);
      if (axis != 1 && axis != -3) return {};
      std::vector<int> all;
      for (int k = 0; k < n.input_size(); ++k) {
        if (n.input(k).empty() || !float4d(n.input(k))) return {};
        all.push_back(k);
      }
      return all;
    }
    if (op == "Clip") return {0};
    if (const auto* row = ops::findUnaryOp(op); row && row->tableKernels()) return {0};
    if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && n.input_size() == 2) {
      // Shapes compared as text, so that a dynamic batch ("?N") matches itself.
      const auto a = shapeOf(types, n.input(0)), b = shapeOf(types, n.input(1));
      const auto y = shapeOf(types, n.output(0));
      if (a.empty() || y.empty()) return {};
      if (a == b && a == y) return {0, 1};
      // One 4-D operand and one that broadcasts per channel ([N|1, C|1, 1, 1], the same bytes in
      // either layout): squeeze-and-excitation's scaling. Its kernel is told which.
      auto perChannel = [&](const std::vector<std::string>& s) {
        if (s.empty() || s.size() > 4 || y.size() != 4) return false;
        std::vector<std::string> r(4 - s.size(), "1");
        r.insert(r.end(), s.begin(), s.end());
        return r[2] == "1" && r[3] == "1" && (r[0] == "1" || r[0] == y[0]) &&
               (r[1] == "1" || r[1] == y[1]);
      };
      const bool commutes = op == "Add" || op == "Mul";
      if (a == y && perChannel(b)) return {0};
      if (commutes && b == y && perChannel(a) && !(a == b)) return {1};
      return {};
    }
    return {};
  };
  // Readers that take an NHWC input 0 besides convolutions.
  auto nhwcReader = [&](const onnx::NodeProto& n) {
    return isOp(n, "", "GlobalAveragePool") && n.output_size() == 1;
  };
  std::unordered_map<std::string, std::string> parent;
  std::function<std::string(const std::string&)> find = [&](const std::string& v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return v;
    return it->second = find(it->second);
  };
  auto unite = [&](const std::string& a, const std::string& b) { parent[find(a)] = find(b); };
  std::vector<std::vector<int>> shared(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i].first;
    // A convolution's fused residual is added to its output as it is written: one layout.
    if (nhwcConv(n) && fusedOf(n).residual && n.input_size() > Fused::kResidualInput)
      shared[i] = {Fused::kResidualInput};
    else
      shared[i] = elementwiseInputs(n);
    for (int k : shared[i])
      if (!n.input(k).empty()) unite(n.input(k), n.output(0));
  }
  // Disqualify groups: a member that is fixed, not float 4-D, made or read by anything else.
  std::set<std::string> bad;
  std::set<std::string> madeByConv;
  std::set<std::string> readByConv;  // or by a global pooling that reads NHWC
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i].first;
    const bool conv = carrier(n);
    for (int k = 0; k < n.input_size(); ++k) {
      const std::string& v = n.input(k);
      if (v.empty()) continue;
      const bool ok = ((conv || nhwcReader(n)) && k == 0) ||
                      std::find(shared[i].begin(), shared[i].end(), k) != shared[i].end();
      if (!ok) bad.insert(find(v));
      if ((conv || nhwcReader(n)) && k == 0) readByConv.insert(find(v));
    }
    for (int k = 0; k < n.output_size(); ++k) {
      const std::string& v = n.output(k);
      if (v.empty()) continue;
      const bool ok = k == 0 && (conv || !shared[i].empty());
      if (!ok) bad.insert(find(v));
      if (conv) madeByConv.insert(find(v));
      if (fixed.count(v) || !float4d(v)) bad.insert(find(v));
    }
    // Subgraphs read values by name: keep those plain.
    for (const auto& a : n.attribute()) {
      std::set<std::string> inner;
      if (a.has_g()) inner.merge(dw::outerNames(a.g()));
      for (const auto& sg : a.graphs()) inner.merge(dw::outerNames(sg));
      for (const auto& v : inner) bad.insert(find(v));
    }
  }
  for (const auto& v : fixed) bad.insert(find(v));
  auto nhwc = [&](const std::string& v) {
    const std::string r = find(v);
    return !bad.count(r) && madeByConv.count(r) && readByConv.count(r);
  };
  // A pooling reads and writes one layout: where only one side of it can change, neither does
  // (which may undo another pooling's sides in turn).
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [n, opsets] : nodes)
      if (nhwcPool(n) && nhwc(n.input(0)) != nhwc(n.output(0))) {
        bad.insert(find(n.input(0)));
        bad.insert(find(n.output(0)));
        changed = true;
      }
  }
  // Which of the two layouts a group takes. On large planes oneDNN's blocked kernels (nChw16c)
  // beat its NHWC ones (brgconv, brdgmm) by 1.3-2x: at batch 8, 2 threads, a depthwise 3x3 on
  // 144 x 56 x 56 took 1.8 against 3.1 ms and a 1x1 144 -> 24 2.3 against 3.5, and equal or
  // better at batch 1. Without padding, nChw16c needs channels in whole blocks of 16; and from
  // 8 x 28 x 28 down the two are even, while NHWC saves the reorders where a group of 24 or 40
  // channels meets one in nChw16c. So a group is blocked where every tensor in it has a
  // multiple of 16 channels and at least 8 x 56 x 56 values per channel, all known.
  constexpr int64_t kBlockedPlanes = 8 * 56 * 56;
  std::unordered_map<std::string, bool> blockedGroup;
  auto consider = [&](const std::string& v) {
    if (v.empty() || !nhwc(v)) return;
    const std::string r = find(v);
    const auto d = staticDims(types, v);
    const bool fits = d.size() == 4 && d[1] % 16 == 0 && d[0] * d[2] * d[3] >= kBlockedPlanes;
    auto [it, fresh] = blockedGroup.emplace(r, fits);
    if (!fresh) it->second = it->second && fits;
  };
  // Dense 3x3 stride-1 convolutions of 16k channels run our Winograd kernel, which took twice
  // as long reading and writing nChw16c as NHWC on resnet18's 64 x 56 x 56 planes at batch 8
  // (17 against 8 ms).
  auto winogradCandidate = [&](const onnx::NodeProto& n) {
    if (!nhwcConv(n) || attrInt(n, "group", 1) != 1) return false;
    const auto w = staticDims(types, n.input(1));
    const auto s = attrInts(n, "strides"), d = attrInts(n, "dilations");
    auto ones = [](const std::vector<int64_t>& v) {
      return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
    };
    return w.size() == 4 && w[0] % 16 == 0 && w[1] % 16 == 0 && w[2] == 3 && w[3] == 3 && ones(s) &&
           ones(d);
  };
  for (const auto& [n, opsets] : nodes) {
    for (const auto& v : n.input()) consider(v);
    for (const auto& v : n.output()) consider(v);
    if (winogradCandidate(n))
      for (const std::string& v : {n.input(0), n.output(0)})
        if (nhwc(v)) blockedGroup[find(v)] = false;
  }
  // A fused chain of convolutions (conv_chains.cpp) writes NHWC only (it reads either).
  const auto chains =
      convChains ? findConvChains(nodes, types, nhwc) : std::vector<std::vector<size_t>>{};
  for (const auto& chain : chains)
    for (size_t k : chain)  // the last convolution's output matters; the others vanish
      if (isOp(nodes[k].first, "", "Conv")) blockedGroup[find(nodes[k].first.output(0))] = false;
  // Both sides of a pooling in one layout: NHWC unless both groups would be blocked.
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [n, opsets] : nodes) {
      if (!nhwcPool(n) || !nhwc(n.input(0))) continue;
      bool& in = blockedGroup[find(n.input(0))];
      bool& out = blockedGroup[find(n.output(0))];
      if (in != out) {
        in = out = false;
        changed = true;
      }
    }
  }
  auto layoutOf = [&](const std::string& v) {
    auto it = blockedGroup.find(find(v));
    return it != blockedGroup.end() && it->second ? Layout::kBlocked : Layout::kNhwc;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    onnx::NodeProto& n = nodes[i].first;
    if (carrier(n)) {
      if (nhwc(n.input(0))) markInput(n, layoutOf(n.input(0)), 0);
      if (nhwc(n.output(0))) markOutput(n, layoutOf(n.output(0)), 0);
    } else if (isOp(n, "", "Concat") && shared[i].size() > 1 && nhwc(n.output(0))) {
      markOutput(n, layoutOf(n.output(0)), 0);
    } else if (isOp(n, "", "BatchNormalization") && shared[i].size() == 1 && nhwc(n.output(0))) {
      markInput(n, layoutOf(n.output(0)), 0);
    } else if (nhwcReader(n) && nhwc(n.input(0))) {
      markInput(n, layoutOf(n.input(0)), 0);
    } else if (shared[i].size() == 1 && n.input_size() == 2 && nhwc(n.output(0))) {
      // A per-channel broadcast: its kernel must know which operand is in the chain's layout.
      markInput(n, layoutOf(n.output(0)), shared[i][0]);
    }
  }
  fuseConvChains(nodes, chains);
}

}  // namespace dw::engine::fusion
