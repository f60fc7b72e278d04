#include <algorithm>
#include <limits>
#include <optional>

#include "engine/fusion/fused.h"
#include "engine/fusion/graph_queries.h"
#include "engine/onnx_attrs.h"
#include "engine/tensor.h"
#include "engine/unary_op.h"
#include "graphs/subgraph.h"

namespace dw::engine::fusion {

// Graph-level fusion for the oneDNN kernels: Conv followed by an inference-mode
// BatchNormalization folds the normalization into the convolution, and Conv/Gemm/MatMul followed
// by an activation runs it as a oneDNN post-op. Only values with a single reader that are not
// graph outputs are fused away, so nothing another node (or a backward pass) reads disappears.
// The fused node keeps its op type; its Fused record (fusion/fused.h) and appended BN inputs tell
// the kernel what it absorbed.
void fuseForOneDnn(std::vector<std::pair<onnx::NodeProto, OpsetMap>>& nodes,
                   const onnx::GraphProto& g,
                   const std::unordered_map<std::string, onnx::TypeProto>& types,
                   bool epiloguesOnly) {
  // The fused kernels compute in float32; other dtypes take the reference kernels, unfused.
  auto isFloat = [&](const std::string& v) {
    auto it = types.find(v);
    if (it == types.end() || !it->second.has_tensor_type()) return false;
    const int t = it->second.tensor_type().elem_type();
    return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::FLOAT16 ||
           t == onnx::TensorProto::BFLOAT16;
  };
  std::unordered_map<std::string, int> readers;
  std::set<std::string> outputs;
  for (const auto& o : g.output()) outputs.insert(o.name());
  for (const auto& [node, ops] : nodes) {
    for (const auto& in : node.input())
      if (!in.empty()) ++readers[in];
    for (const auto& a : node.attribute()) {
      std::set<std::string> inner;
      if (a.has_g()) inner.merge(dw::outerNames(a.g()));
      for (const auto& sg : a.graphs()) inner.merge(dw::outerNames(sg));
      for (const auto& s : inner) readers[s] += 2;  // never fuse what a subgraph reads
    }
  }
  std::unordered_map<std::string, size_t> consumer;
  std::unordered_map<std::string, std::vector<size_t>> consumers;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& in : nodes[i].first.input())
      if (!in.empty()) {
        consumer[in] = i;
        consumers[in].push_back(i);
      }
  std::vector<bool> removed(nodes.size(), false);
  auto soleReader = [&](const onnx::NodeProto& n) -> int {
    if (n.output_size() < 1 || n.output(0).empty()) return -1;
    for (int i = 1; i < n.output_size(); ++i)
      if (!n.output(i).empty()) return -1;
    const std::string& y = n.output(0);
    if (outputs.count(y) || readers[y] != 1) return -1;
    auto it = consumer.find(y);
    if (it == consumer.end() || removed[it->second]) return -1;
    const auto& c = nodes[it->second].first;
    if (!c.domain().empty() && c.domain() != "ai.onnx") return -1;
    if (c.input_size() < 1 || c.input(0) != y) return -1;
    for (int i = 1; i < c.input_size(); ++i)
      if (c.input(i) == y) return -1;
    return static_cast<int>(it->second);
  };
  auto absorb = [&](onnx::NodeProto& n, size_t c) {
    n.set_output(0, nodes[c].first.output(0));
    removed[c] = true;
  };
  // Clip's bounds where they are known now: attributes before opset 11, then inputs that are
  // initializers or Constant nodes (ReLU6 as exported); absent ones are unbounded.
  std::unordered_map<std::string, const onnx::TensorProto*> constants;
  for (const auto& t : g.initializer()) constants[t.name()] = &t;
  for (const auto& in : g.input()) constants.erase(in.name());  // a feed may replace those
  for (const auto& [node, ops] : nodes) {
    if (!node.domain().empty() || node.output_size() != 1) continue;
    if (node.op_type() == "Constant") {
      if (const auto* v = findAttr(node, "value"); v && v->has_t())
        constants[node.output(0)] = &v->t();
    } else if (node.op_type() == "Identity" && node.input_size() == 1) {
      // Exporters share one weight between layers through Identity nodes.
      if (auto it = constants.find(node.input(0)); it != constants.end())
        constants[node.output(0)] = it->second;
    }
  }
  // A Pad of zeros on every side is a copy: torch writes one before each AveragePool it exports
  // (DenseNet's transitions). As an Identity it keeps a convolution chain's layout.
  for (auto& [node, ops] : nodes) {
    if (!isOp(node, "", "Pad") || node.input_size() < 2 || node.output_size() != 1) continue;
    auto it = constants.find(node.input(1));
    if (it == constants.end()) continue;
    auto pads = tensorFromProto(*it->second);
    if (!pads || pads->dtype() != DType::kInt64) continue;
    const int64_t* p = pads->data<int64_t>();
    if (!std::all_of(p, p + pads->size(), [](int64_t v) { return v == 0; })) continue;
    node.set_op_type("Identity");
    node.clear_attribute();
    while (node.input_size() > 1) node.mutable_input()->RemoveLast();
  }
  auto clipBounds = [&](const onnx::NodeProto& clip,
                        int opset) -> std::optional<std::pair<float, float>> {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    std::pair<float, float> b{-kInf, kInf};
    if (opset < 11) {
      if (const auto* a = findAttr(clip, "min")) b.first = a->f();
      if (const auto* a = findAttr(clip, "max")) b.second = a->f();
      return b;
    }
    for (int i : {1, 2}) {
      if (clip.input_size() <= i || clip.input(i).empty()) continue;
      auto it = constants.find(clip.input(i));
      if (it == constants.end()) return std::nullopt;
      auto t = tensorFromProto(*it->second);
      if (!t || t->size() != 1 || t->dtype() != DType::kFloat) return std::nullopt;
      (i == 1 ? b.first : b.second) = t->data<float>()[0];
    }
    return b;
  };
  // MatMul then Add of a constant vector along the last axis (a Linear layer as exported): the
  // vector becomes the matmul primitive's bias, a third input.
  auto fuseBias = [&](onnx::NodeProto& n) {
    const std::string& y = n.output(0);
    const auto& rs = consumers[y];
    if (outputs.count(y) || readers[y] != 1 || rs.size() != 1 || removed[rs[0]]) return;
    const auto& add = nodes[rs[0]].first;
    if (!isOp(add, "", "Add") || add.input_size() != 2 || add.input(0) == add.input(1)) return;
    const int other = add.input(0) == y ? 1 : (add.input(1) == y ? 0 : -1);
    if (other < 0) return;
    auto it = constants.find(add.input(other));
    const auto w = staticDims(types, n.input(1));
    if (it == constants.end() || it->second->data_type() != onnx::TensorProto::FLOAT ||
        it->second->dims_size() != 1 || w.size() < 2 || it->second->dims(0) != w.back())
      return;
    n.add_input(add.input(other));
    absorb(n, rs[0]);
  };
  // Add(y, r) or Add(r, y) of the Conv's output y (read by nothing else) and a tensor r of the
  // same shape: a residual connection (ResNet, MobileNet, EfficientNet blocks), added inside
  // the convolution's epilogue instead of in one more pass over both tensors. Before any
  // activation: the one after the Add becomes the Conv's.
  auto fuseResidual = [&](onnx::NodeProto& n) {
    const std::string& y = n.output(0);
    const auto& rs = consumers[y];
    if (outputs.count(y) || readers[y] != 1 || rs.size() != 1 || removed[rs[0]]) return false;
    const auto& add = nodes[rs[0]].first;
    if (!isOp(add, "", "Add") || add.input_size() != 2 || add.output_size() != 1 ||
        add.input(0) == add.input(1))
      return false;
    const int other = add.input(0) == y ? 1 : (add.input(1) == y ? 0 : -1);
    if (other < 0 || add.input(other).empty()) return false;
    // Shapes compared as text, so that a dynamic batch ("?N") matches itself.
    const auto shape = shapeOf(types, y);
    if (shape.empty() || shapeOf(types, add.input(other)) != shape ||
        shapeOf(types, add.output(0)) != shape || !isFloat(add.input(other)))
      return false;
    setResidual(n, add.input(other));
    absorb(n, rs[0]);
    return true;
  };
  // A MaxPool after a Conv (and its BN/activation) pools in oneDNN's blocked layout before the
  // result goes back to plain NCHW: explicit pads only, no ceil_mode, dilation or Indices.
  auto fuseMaxPool = [&](onnx::NodeProto& n, size_t c) {
    const auto& mp = nodes[c].first;
    const auto* ap = findAttr(mp, "auto_pad");
    const auto* cm = findAttr(mp, "ceil_mode");
    const auto* so = findAttr(mp, "storage_order");
    const auto* dl = findAttr(mp, "dilations");
    const auto* ks = findAttr(mp, "kernel_shape");
    if (!ks || (ap && ap->s() != "NOTSET") || (cm && cm->i() != 0) || (so && so->i() != 0)) return;
    if (mp.output_size() > 1 && !mp.output(1).empty()) return;
    if (dl)
      for (auto d : dl->ints())
        if (d != 1) return;
    const auto kernel = attrInts(mp, "kernel_shape"), strides = attrInts(mp, "strides"),
               pads = attrInts(mp, "pads");
    if ((!strides.empty() && strides.size() != kernel.size()) ||
        (!pads.empty() && pads.size() != 2 * kernel.size()))
      return;  // the kernels of an unfused MaxPool report it
    setMaxPool(n, {kernel, strides, pads, {}});
    absorb(n, c);
  };
  // A BatchNormalization of inference (one output, statistics given).
  auto inferenceBn = [&](size_t i) {
    const auto& bn = nodes[i].first;
    const auto* tm = findAttr(bn, "training_mode");
    const int bnOpset = nodes[i].second.count("") ? nodes[i].second.at("") : 0;
    return bn.output_size() == 1 && bn.input_size() == 5 && bnOpset >= 7 && (!tm || tm->i() == 0) &&
           !findAttr(bn, "spatial");
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (removed[i]) continue;
    onnx::NodeProto& n = nodes[i].first;
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    const bool conv = n.op_type() == "Conv";
    if (!conv && n.op_type() != "Gemm" && n.op_type() != "MatMul") continue;
    if (n.output_size() < 1 || !isFloat(n.output(0))) continue;
    if (n.op_type() == "MatMul" && n.input_size() == 2) fuseBias(n);
    int c = soleReader(n);
    if (conv && c >= 0 && nodes[c].first.op_type() == "BatchNormalization") {
      const auto& bn = nodes[c].first;
      if (inferenceBn(c)) {
        while (n.input_size() < 3) n.add_input("");
        for (int k = 1; k < 5; ++k) n.add_input(bn.input(k));
        const auto* eps = findAttr(bn, "epsilon");
        setBnEpsilon(n, eps ? eps->f() : 1e-5f);
        absorb(n, c);
        c = soleReader(n);
      }
    }
    const bool residual = conv && !epiloguesOnly && fuseResidual(n);
    if (residual) c = soleReader(n);
    if (c < 0) {
      // SiLU as exporters write it, Mul(v, Sigmoid(v)), with v read by just those two: the
      // Swish post-op (alpha 1).
      const std::string& v = n.output(0);
      const auto& rs = consumers[v];
      if (n.output_size() != 1 || outputs.count(v) || readers[v] != 2 || rs.size() != 2 ||
          removed[rs[0]] || removed[rs[1]])
        continue;
      for (int k = 0; k < 2; ++k) {
        const auto& sig = nodes[rs[k]].first;
        const auto& mul = nodes[rs[1 - k]].first;
        if (!isOp(sig, "", "Sigmoid") || !isOp(mul, "", "Mul") || sig.output_size() != 1 ||
            mul.input_size() != 2)
          continue;
        const std::string& s = sig.output(0);
        if (outputs.count(s) || readers[s] != 1 ||
            !((mul.input(0) == v && mul.input(1) == s) || (mul.input(0) == s && mul.input(1) == v)))
          continue;
        setActivation(n, "Swish", ops::UnaryParams{1.0f, 0.0f, 0.0f});
        removed[rs[k]] = true;
        absorb(n, rs[1 - k]);
        break;
      }
      continue;
    }
    const auto& act = nodes[c].first;
    const std::string& op = act.op_type();
    const ops::UnaryOp* row =
        (act.domain().empty() || act.domain() == "ai.onnx") ? ops::findUnaryOp(op) : nullptr;
    Result<UnaryInstance> fused = Status::error("not fusable");
    std::string choice;
    if (row && row->postOp && op == "Clip") {
      const int clipOpset = nodes[c].second.count("") ? nodes[c].second.at("") : 0;
      if (auto bounds = clipBounds(act, clipOpset))
        fused = unaryWithParams(*row, ops::UnaryParams{bounds->first, bounds->second});
    } else if (row && row->postOp) {
      Attributes actAttrs;
      for (const auto& a : act.attribute()) actAttrs.set(a);
      fused = resolveUnary(*row, actAttrs);
      if (row->choiceAttr) choice = actAttrs.getString(row->choiceAttr, row->choices[0].value);
    }
    if (!fused) {
      if (conv && !epiloguesOnly && !residual && op == "MaxPool") fuseMaxPool(n, c);
      continue;
    }
    setActivation(n, op, fused->params, choice);
    absorb(n, c);
    c = soleReader(n);
    if (conv && !epiloguesOnly && !residual && c >= 0 && nodes[c].first.op_type() == "MaxPool")
      fuseMaxPool(n, c);
  }
  // A BatchNormalization of its own (DenseNet's and pre-activation ResNets' BN -> ReLU -> Conv)
  // takes the Relu after it: oneDNN's normalization applies it in the same pass.
  for (size_t i = 0; i < nodes.size() && !epiloguesOnly; ++i) {
    onnx::NodeProto& n = nodes[i].first;
    if (removed[i] || !isOp(n, "", "BatchNormalization") || !inferenceBn(i) ||
        !isFloat(n.output(0)))
      continue;
    const int c = soleReader(n);
    if (c < 0 || !isOp(nodes[c].first, "", "Relu")) continue;
    setActivation(n, "Relu", ops::UnaryParams{});
    absorb(n, c);
  }
  dropRemoved(nodes, removed);
}

}  // namespace dw::engine::fusion
