#include "graphs/onnx_import.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "nodes/onnx_params.h"
#include "nodes/type_syntax.h"

namespace dw {

using nlohmann::json;

namespace {

class Importer {
 public:
  Importer(const onnx::ModelProto& m, std::string source) : m_(m), source_(std::move(source)) {}

  Result<Graph> run() {
    const auto& graph = m_.graph();
    ModelInfo info;
    info.irVersion = m_.ir_version();
    info.opsets.clear();
    for (const auto& op : m_.opset_import())
      info.opsets[canonicalDomain(op.domain())] = static_cast<int>(op.version());
    if (info.opsets.empty()) info.opsets[kOnnxDomain] = 1;  // IR < 3 models imply opset 1
    info.graphName = graph.name();
    info.docString = m_.doc_string();
    info.producerName = m_.producer_name();
    info.producerVersion = m_.producer_version();
    info.modelDomain = m_.domain();
    info.modelVersion = m_.model_version();
    for (const auto& p : m_.metadata_props()) {
      if (p.key() == kLayoutMetadataKey) {
        layout_ = json::parse(p.value(), nullptr, false);
        if (!layout_.is_object()) layout_ = json::object();
      } else {
        info.metadata[p.key()] = p.value();
      }
    }
    if (!m_.functions().empty())
      return fail("the model defines local functions (" + m_.functions(0).name() +
                  ", ...), which deepwire cannot import yet");
    if (graph.sparse_initializer_size())
      return fail("the model has sparse initializers, which deepwire cannot import yet");
    g_.setInfo(info);
    reserveIds();
    DW_RETURN_IF_ERROR(restoreDetached());

    std::set<std::string> initNames;
    for (const auto& t : graph.initializer()) initNames.insert(t.name());
    std::set<std::string> inputInits;
    for (const auto& vi : graph.input()) {
      if (initNames.count(vi.name())) {
        inputInits.insert(vi.name());
        continue;
      }
      Node n = makeNode(kGraphDomain, "Input", "input:" + vi.name());
      n.name = vi.name();
      n.params["type"] = Param::makeString(formatType(vi.type()));
      DW_RETURN_IF_ERROR(add(std::move(n), "graph input '" + vi.name() + "'"));
      producer_[vi.name()] = {lastId_, 0};
    }
    for (const auto& t : graph.initializer()) {
      Node n = makeNode(kGraphDomain, "Initializer", "initializer:" + t.name());
      n.name = t.name();
      n.params["dtype"] = Param::makeString(dtypeName(t.data_type()));
      n.params["shape"] = Param::makeInts({t.dims().begin(), t.dims().end()});
      n.params["fill"] = Param::makeString("values");
      n.params["values"] = Param::makeProto(ParamType::Tensor, t.SerializeAsString());
      if (inputInits.count(t.name())) n.params["graph_input"] = Param::makeBool(true);
      if (const json* e = entry("initializer:" + t.name())) {
        for (const char* key : {"status", "regularizer"})
          if (e->contains(key) && (*e)[key].is_string())
            n.params[key] = Param::makeString((*e)[key].get<std::string>());
        for (const char* key : {"l1", "l2"})
          if (e->contains(key) && (*e)[key].is_number())
            n.params[key] = Param::makeFloat((*e)[key].get<double>());
      }
      DW_RETURN_IF_ERROR(add(std::move(n), "initializer '" + t.name() + "'"));
      producer_[t.name()] = {lastId_, 0};
    }

    std::set<std::string> synthetic;
    if (layout_.contains("synthetic") && layout_["synthetic"].is_array())
      for (const auto& s : layout_["synthetic"])
        if (s.is_string()) synthetic.insert(s.get<std::string>());
    for (int i = 0; i < graph.node_size(); ++i) {
      const auto& np = graph.node(i);
      if (synthetic.count(np.name()) && np.op_type() == "Identity" && np.input_size() == 1 &&
          np.output_size() == 1) {
        alias_[np.output(0)] = np.input(0);  // an Identity export added for an output's name
        continue;
      }
      DW_RETURN_IF_ERROR(importNode(np, i));
    }
    for (const auto& vi : graph.output()) {
      // A restored Output Predict / Output Train: its links came with it.
      if (detachedOutputs_.count(vi.name())) continue;
      Node n = makeNode(kGraphDomain, "Output", "output:" + vi.name());
      n.name = vi.name();
      if (vi.has_type()) n.params["type"] = Param::makeString(formatType(vi.type()));
      DW_RETURN_IF_ERROR(add(std::move(n), "graph output '" + vi.name() + "'"));
      const NodeId id = lastId_;
      auto src = resolve(vi.name());
      if (!src)
        return fail("graph output '" + vi.name() +
                    "' is not produced by any node, input or initializer");
      pendingLinks_.push_back({{*src}, {id, 0}});
    }
    for (const auto& l : pendingLinks_) {
      Status st = g_.addLink(l, false);
      if (!st.ok()) return fail(st.message());
    }
    if (layout_.contains("graph_links") && layout_["graph_links"].is_array())
      for (const auto& gl : layout_["graph_links"])
        if (gl.is_array() && gl.size() == 2 && gl[0].is_number_integer() &&
            gl[1].is_number_integer())
          (void)g_.addLink({{gl[0].get<NodeId>(), kGraphPort}, {gl[1].get<NodeId>(), kGraphPort}});
    if (!hasLayout_) autoLayout(g_);
    return std::move(g_);
  }

 private:
  Status fail(const std::string& msg) const { return Status::error(source_ + ": " + msg); }

  const json* entry(const std::string& key) const {
    if (!layout_.contains("nodes") || !layout_["nodes"].is_object()) return nullptr;
    auto it = layout_["nodes"].find(key);
    return it == layout_["nodes"].end() || !it->is_object() ? nullptr : &*it;
  }

  // Ids stored by a previous export are kept, so project and ONNX agree on node identity.
  void reserveIds() {
    if (!layout_.contains("nodes") || !layout_["nodes"].is_object()) return;
    for (const auto& [key, e] : layout_["nodes"].items())
      if (e.is_object() && e.contains("id") && e["id"].is_number_integer())
        storedIds_.insert(e["id"].get<NodeId>());
  }

  // What an inference export left out (training-only nodes, the kinds of Output Predict and
  // Output Train), stored as a project fragment with the links that cross into the model.
  Status restoreDetached() {
    if (!layout_.contains("detached") || !layout_["detached"].is_object()) return Status();
    const json& d = layout_["detached"];
    if (!d.contains("project") || !d["project"].is_object()) return Status();
    auto part = projectFromJsonText(
        d["project"].dump(),
        source_ + " (metadata '" + std::string(kLayoutMetadataKey) + "', detached nodes)");
    if (!part.ok()) return part.status();
    for (const auto& [id, n] : part->nodes()) storedIds_.insert(id);
    for (const auto& [id, n] : part->nodes()) {
      usedIds_.insert(id);
      DW_RETURN_IF_ERROR(add(n, "detached node #" + std::to_string(id)));
      const NodeSpec* s = g_.spec(id);
      if (s && s->kind == NodeKind::GraphOutput) detachedOutputs_[n.name] = id;
    }
    for (const auto& l : part->links()) pendingLinks_.push_back(l);
    if (d.contains("links") && d["links"].is_array())
      for (const auto& l : d["links"])
        if (l.is_array() && l.size() == 4 &&
            std::all_of(l.begin(), l.end(), [](const json& v) { return v.is_number_integer(); }))
          pendingLinks_.push_back(
              {{l[0].get<NodeId>(), l[1].get<int>()}, {l[2].get<NodeId>(), l[3].get<int>()}});
    return Status();
  }

  Node makeNode(const std::string& domain, const std::string& type, const std::string& key) {
    Node n;
    n.domain = domain;
    n.type = type;
    if (const json* e = entry(key)) {
      if (e->contains("id") && (*e)["id"].is_number_integer()) {
        const NodeId id = (*e)["id"].get<NodeId>();
        if (!usedIds_.count(id)) n.id = id;
      }
      if (e->contains("x") && (*e)["x"].is_number() && e->contains("y") && (*e)["y"].is_number()) {
        n.position = {(*e)["x"].get<double>(), (*e)["y"].get<double>()};
        hasLayout_ = true;
      }
      if (e->contains("lda_coeff") && (*e)["lda_coeff"].is_number())
        n.ldaCoeff = (*e)["lda_coeff"].get<double>();
      if (e->contains("model") && (*e)["model"].is_string())
        n.model = (*e)["model"].get<std::string>();
    }
    if (n.id == 0) {
      while (usedIds_.count(nextFree_) || storedIds_.count(nextFree_)) ++nextFree_;
      n.id = nextFree_++;
    }
    usedIds_.insert(n.id);
    return n;
  }

  Status add(Node n, const std::string& what) {
    lastId_ = n.id;
    Status st = g_.insertNode(std::move(n));
    return st.ok() ? st : fail(what + ": " + st.message());
  }

  std::optional<PortRef> resolve(std::string name) const {
    for (auto it = alias_.find(name); it != alias_.end(); it = alias_.find(name)) name = it->second;
    auto it = producer_.find(name);
    if (it == producer_.end()) return std::nullopt;
    return it->second;
  }

  Status importNode(const onnx::NodeProto& np, int index) {
    const std::string dom = canonicalDomain(np.domain());
    const std::string where = "node " + std::to_string(index) +
                              (np.name().empty() ? "" : " '" + np.name() + "'") + " (" +
                              np.op_type() + ")";
    const NodeSpec* spec = g_.catalogue().find(dom, np.op_type(), g_.opset(dom));
    if (!spec)
      return fail(where + ": op '" + np.op_type() + "' of domain '" + dom + "' at opset " +
                  std::to_string(g_.opset(dom)) + " is not in deepwire's catalogue");
    Node n = makeNode(dom, np.op_type(), "node:" + np.name());
    n.name = np.name();
    if (const json* e = entry("node:" + np.name());
        e && e->contains("name") && (*e)["name"].is_string())
      n.name = (*e)["name"].get<std::string>();
    for (const auto& a : np.attribute()) {
      const ParamSpec* ps = spec->param(a.name());
      auto p = ps ? paramFromAttribute(a, ps->type) : paramFromAttribute(a);
      if (!p.ok()) return fail(where + ": " + p.message());
      n.params[a.name()] = std::move(p.value());
    }
    n.specifiedOutputsName.assign(np.output().begin(), np.output().end());
    while (!n.specifiedOutputsName.empty() && n.specifiedOutputsName.back().empty())
      n.specifiedOutputsName.pop_back();
    if (np.input_size() && np.input(np.input_size() - 1).empty()) n.inputArity = np.input_size();
    if (np.output_size() && np.output(np.output_size() - 1).empty())
      n.outputArity = np.output_size();
    const NodeId id = n.id;
    DW_RETURN_IF_ERROR(add(std::move(n), where));
    for (int i = 0; i < np.input_size(); ++i) {
      if (np.input(i).empty()) continue;
      auto src = resolve(np.input(i));
      if (!src)
        return fail(where + ": input '" + np.input(i) +
                    "' is not produced by any earlier node, graph input or initializer");
      pendingLinks_.push_back({*src, {id, i}});
    }
    for (int i = 0; i < np.output_size(); ++i)
      if (!np.output(i).empty()) producer_[np.output(i)] = {id, i};
    return Status();
  }

  const onnx::ModelProto& m_;
  std::string source_;
  Graph g_;
  json layout_ = json::object();
  bool hasLayout_ = false;
  std::set<NodeId> storedIds_, usedIds_;
  NodeId nextFree_ = 1, lastId_ = 0;
  std::map<std::string, PortRef> producer_;
  std::map<std::string, std::string> alias_;
  std::vector<Link> pendingLinks_;
  std::map<std::string, NodeId> detachedOutputs_;
};

}  // namespace

Result<Graph> importOnnx(const onnx::ModelProto& model, const std::string& source) {
  return Importer(model, source).run();
}

void autoLayout(Graph& g) {
  constexpr double kColumn = 260, kRow = 140;
  // Depth of each op: 1 + deepest producer; sources (inputs) at 0.
  std::map<NodeId, int> depth;
  std::map<NodeId, std::vector<NodeId>> users, producers;
  for (const auto& l : g.links())
    if (!l.isGraphLink()) {
      users[l.from.node].push_back(l.to.node);
      producers[l.to.node].push_back(l.from.node);
    }
  std::map<NodeId, int> pending;
  std::vector<NodeId> ready;
  for (const auto& [id, n] : g.nodes()) {
    pending[id] = static_cast<int>(producers[id].size());
    if (pending[id] == 0) ready.push_back(id);
  }
  while (!ready.empty()) {
    NodeId id = ready.back();
    ready.pop_back();
    int d = 0;
    for (NodeId p : producers[id]) d = std::max(d, depth[p] + 1);
    depth[id] = d;
    for (NodeId u : users[id])
      if (--pending[u] == 0) ready.push_back(u);
  }
  // Initializers sit just left of their first user rather than in one tall column.
  for (const auto& [id, n] : g.nodes()) {
    const NodeSpec* s = g.spec(n);
    if (s && s->kind == NodeKind::Initializer && !users[id].empty()) {
      int d = INT32_MAX;
      for (NodeId u : users[id]) d = std::min(d, depth[u]);
      depth[id] = std::max(0, d - 1);
    }
  }
  std::map<int, int> rows;
  for (const auto& [id, n] : g.nodes()) {
    const int d = depth[id];
    (void)g.moveNode(id, {d * kColumn, rows[d]++ * kRow});
  }
}

}  // namespace dw
