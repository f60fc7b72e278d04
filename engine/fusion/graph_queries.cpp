#include "engine/fusion/graph_queries.h"

namespace dw::engine::fusion {

std::unordered_map<std::string, std::vector<std::pair<size_t, int>>> readersOf(
    const PlanNodes& nodes, const std::vector<bool>& removed) {
  std::unordered_map<std::string, std::vector<std::pair<size_t, int>>> users;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (removed[i]) continue;
    for (int k = 0; k < nodes[i].first.input_size(); ++k)
      if (!nodes[i].first.input(k).empty()) users[nodes[i].first.input(k)].emplace_back(i, k);
  }
  return users;
}

void dropRemoved(PlanNodes& nodes, const std::vector<bool>& removed) {
  PlanNodes kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
}

std::string displayName(const onnx::NodeProto& n) {
  if (!n.name().empty()) return n.name();
  std::string out = n.output_size() ? n.output(0) : "";
  return "<" + n.op_type() + (out.empty() ? "" : " -> " + out) + ">";
}

bool isOp(const onnx::NodeProto& n, const char* domain, const char* op) {
  const std::string d = n.domain() == "ai.onnx" ? "" : n.domain();
  return d == domain && n.op_type() == op;
}

std::vector<std::string> shapeOf(const ValueTypes& types, const std::string& v) {
  std::vector<std::string> d;
  auto it = types.find(v);
  if (it == types.end() || !it->second.has_tensor_type() || !it->second.tensor_type().has_shape())
    return d;
  for (const auto& x : it->second.tensor_type().shape().dim()) {
    if (x.has_dim_value())
      d.push_back(std::to_string(x.dim_value()));
    else if (x.has_dim_param() && !x.dim_param().empty())
      d.push_back("?" + x.dim_param());
    else
      return {};
  }
  return d;
}

std::vector<int64_t> staticDims(const ValueTypes& types, const std::string& v) {
  std::vector<int64_t> d;
  auto it = types.find(v);
  if (it == types.end() || !it->second.has_tensor_type() || !it->second.tensor_type().has_shape())
    return d;
  for (const auto& x : it->second.tensor_type().shape().dim()) {
    if (!x.has_dim_value()) return std::vector<int64_t>{};
    d.push_back(x.dim_value());
  }
  return d;
}

}  // namespace dw::engine::fusion
