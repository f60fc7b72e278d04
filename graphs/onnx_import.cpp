#include "graphs/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <map>
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
      nodeOutputs_[np.name()] = {np.output().begin(), np.output().end()};
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
    // Files exported before links named tensors: a link from a layer (gone, its operators came
    // in its place) reads that layer's last operator's output.
    for (auto& l : pendingLinks_) {
      if (g_.node(l.from.node) || !layout_.contains("layers") || !layout_["layers"].is_object())
        continue;
      for (const auto& [name, e] : layout_["layers"].items()) {
        if (!e.is_object() || !e.contains("id") || e["id"] != l.from.node || !e.contains("nodes") ||
            !e["nodes"].is_array() || e["nodes"].empty() || !e["nodes"].back().is_string())
          continue;
        auto it = nodeOutputs_.find(e["nodes"].back().get<std::string>());
        if (it == nodeOutputs_.end() || l.from.port >= static_cast<int>(it->second.size())) break;
        if (auto src = resolve(it->second[l.from.port])) l.from = *src;
        break;
      }
    }
    for (const auto& [value, to] : valueLinks_) {
      auto src = resolve(value);
      if (!src)
        return fail("a training node (#" + std::to_string(to.node) + ") reads '" + value +
                    "', which no node of the model produces; the file's '" +
                    std::string(kLayoutMetadataKey) +
                    "' metadata does not match its graph: import it without that metadata "
                    "entry to get the model alone");
      pendingLinks_.push_back({*src, to});
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
    // Positions for some nodes only (an export's layers became several ops each, which the
    // layout has no place for): the rest piled up on one spot, so the whole graph is laid out.
    if (!hasLayout_ || unplaced_) autoLayout(g_);
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
        d["project"].dump(-1, ' ', false, json::error_handler_t::replace),
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
      for (const auto& l : d["links"]) {
        if (l.is_array() && l.size() == 4 &&
            std::all_of(l.begin(), l.end(), [](const json& v) { return v.is_number_integer(); }))
          pendingLinks_.push_back(
              {{l[0].get<NodeId>(), l[1].get<int>()}, {l[2].get<NodeId>(), l[3].get<int>()}});
        else if (l.is_object() && l.contains("value") && l["value"].is_string() &&
                 l.contains("to") && l["to"].is_array() && l["to"].size() == 2 &&
                 l["to"][0].is_number_integer() && l["to"][1].is_number_integer())
          valueLinks_.push_back(
              {l["value"].get<std::string>(), {l["to"][0].get<NodeId>(), l["to"][1].get<int>()}});
      }
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
      } else {
        unplaced_ = true;
      }
      if (e->contains("lda_coeff") && (*e)["lda_coeff"].is_number())
        n.ldaCoeff = (*e)["lda_coeff"].get<double>();
      if (e->contains("model") && (*e)["model"].is_string())
        n.model = (*e)["model"].get<std::string>();
    } else {
      unplaced_ = true;
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
      if (!ps) {
        std::string names;
        for (const auto& q : spec->params) names += (names.empty() ? "" : ", ") + q.name;
        return fail(where + ": " + np.op_type() + " (opset " + std::to_string(g_.opset(dom)) +
                    ") has no attribute '" + a.name() + "'" +
                    (names.empty() ? "; it takes none" : " (it has: " + names + ")") +
                    "; the model is invalid: remove the attribute or correct its name");
      }
      auto p = paramFromAttribute(a, ps->type);
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
  bool unplaced_ = false;  // a node the layout gives no position
  std::set<NodeId> storedIds_, usedIds_;
  NodeId nextFree_ = 1, lastId_ = 0;
  std::map<std::string, PortRef> producer_;
  std::map<std::string, std::string> alias_;
  std::vector<Link> pendingLinks_;
  // Detached nodes' inputs from the model, by tensor name (resolved once the model is in).
  std::vector<std::pair<std::string, PortRef>> valueLinks_;
  std::map<std::string, std::vector<std::string>> nodeOutputs_;  // by ONNX node name
  std::map<std::string, NodeId> detachedOutputs_;
};

}  // namespace

Result<Graph> importOnnx(const onnx::ModelProto& model, const std::string& source) {
  return Importer(model, source).run();
}

namespace {

// The studio's node geometry (app/studio/graph_scene.cpp: rows, header, width cap), estimated
// here without fonts, generously, so that the layout keeps nodes apart as they are drawn.
constexpr double kMaxNodeWidth = 280;  // NodeItem::kMaxWidth: longer names are elided
constexpr double kMinNodeWidth = 150;
constexpr double kColumnGap = 160;  // room for a link's shape label between two columns
constexpr double kRowGap = 40;      // includes the "graph" captions above a node

struct Footprint {
  double width = kMinNodeWidth, height = 0;
};

Footprint footprint(const Graph& g, const Node& n) {
  const NodeSpec* s = g.spec(n);
  Footprint f;
  if (!s) return f;
  const int in = g.inputPortCount(n.id), out = g.outputPortCount(n.id);
  const bool detail = s->kind != NodeKind::Op && s->kind != NodeKind::Layer;
  f.height = 42 + (detail ? 16 : 0) + std::max({in, out, 1}) * 22 + 6;
  auto portLabel = [&](bool output, int i) -> size_t {
    if (output && i < static_cast<int>(n.specifiedOutputsName.size()) &&
        !n.specifiedOutputsName[i].empty())
      return n.specifiedOutputsName[i].size();
    const PortSpec* ps = output ? s->outputPort(i) : s->inputPort(i);
    return (ps ? ps->name.size() : 2) + 4;
  };
  size_t inChars = 0, outChars = 0;
  for (int i = 0; i < in; ++i) inChars = std::max(inChars, portLabel(false, i));
  for (int i = 0; i < out; ++i) outChars = std::max(outChars, portLabel(true, i));
  // Average advances of the studio's fonts, rounded up: 11 pt bold titles, 9 pt ports.
  f.width = std::max({kMinNodeWidth, n.type.size() * 9.0 + 48, n.name.size() * 7.5 + 32,
                      (inChars + outChars) * 7.0 + 44, detail ? 24 * 7.5 + 32 : 0.0});
  f.width = std::min(f.width, kMaxNodeWidth);
  return f;
}

}  // namespace

void autoLayout(Graph& g) {
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
  std::vector<NodeId> topo;
  while (!ready.empty()) {
    NodeId id = ready.back();
    ready.pop_back();
    topo.push_back(id);
    int d = 0;
    for (NodeId p : producers[id]) d = std::max(d, depth[p] + 1);
    depth[id] = d;
    for (NodeId u : users[id])
      if (--pending[u] == 0) ready.push_back(u);
  }
  // Then every node but the graph's inputs as late as its users allow: what only a later op
  // reads is drawn next to that op, not in the first columns. An exporter's shape arithmetic
  // (Shape -> Gather -> Unsqueeze -> Concat -> a Reshape's shape) made one tall column at the
  // start of a transformer, with links across the whole drawing.
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const Node* n = g.node(*it);
    const NodeSpec* s = n ? g.spec(*n) : nullptr;
    if (!s || s->kind == NodeKind::GraphInput || users[*it].empty()) continue;
    int d = INT32_MAX;
    for (NodeId u : users[*it]) d = std::min(d, depth[u]);
    depth[*it] = std::max(depth[*it], d - 1);
  }
  // Initializers, and ops that read nothing (Constant: mobilenet_v2 has 70 of them, the bounds
  // of its Clips), sit just left of their first user rather than in one tall column, placed
  // after the ops (next to the port they feed), so they do not steer where the ops go: from a
  // column of 70 Constants, the chain drifted down the page.
  std::set<NodeId> nearUser;
  for (const auto& [id, n] : g.nodes()) {
    const NodeSpec* s = g.spec(n);
    const bool source =
        s && (s->kind == NodeKind::Initializer ||
              ((s->kind == NodeKind::Op || s->kind == NodeKind::Layer) && producers[id].empty()));
    if (source && !users[id].empty()) {
      int d = INT32_MAX;
      for (NodeId u : users[id]) d = std::min(d, depth[u]);
      depth[id] = std::max(0, d - 1);
      nearUser.insert(id);
    }
  }
  std::map<NodeId, Footprint> size;
  std::map<int, std::vector<NodeId>> columns;
  for (const auto& [id, n] : g.nodes()) {
    size[id] = footprint(g, n);
    columns[depth[id]].push_back(id);
  }
  // Columns as wide as their widest node, with room for link labels in between.
  std::map<int, double> x;
  double next = 0;
  for (const auto& [d, ids] : columns) {
    x[d] = next;
    double widest = 0;
    for (NodeId id : ids) widest = std::max(widest, size[id].width);
    next += widest + kColumnGap;
  }
  const double totalWidth = next;
  // Columns are laid out in bands, each band below the last: a deep network (mobilenet_v2 is 150
  // columns deep) in one row is a thin line at any zoom that shows all of it. `bandOf` gives a
  // column's band; the first layout has one band, and measures the height that sets how many.
  std::map<int, int> bandOf;
  std::map<NodeId, double> y;
  std::map<NodeId, int> nodeBand;
  auto layOut = [&] {
    y.clear();
    nodeBand.clear();
    // Band and column -> the [top, bottom) spans taken there.
    std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> taken;
    auto place = [&](NodeId id, int band, int d, double want) {
      auto& spans = taken[{band, d}];
      const double h = size[id].height + kRowGap;
      auto freeAt = [&](double top) {
        for (const auto& [a, b] : spans)
          if (top < b && a < top + h) return false;
        return true;
      };
      // Candidates: the wish, and the edges of the spans in the way, nearest first.
      std::vector<double> tops{want};
      for (const auto& [a, b] : spans) tops.insert(tops.end(), {b, a - h});
      std::sort(tops.begin(), tops.end(), [&](double p, double q) {
        return std::abs(p - want) < std::abs(q - want) ||
               (std::abs(p - want) == std::abs(q - want) && p > q);
      });
      double top = want;
      for (double t : tops)
        if (freeAt(t)) {
          top = t;
          break;
        }
      spans.push_back({top, top + h});
      y[id] = top;
      nodeBand[id] = band;
    };
    // Ops go column by column at the mean height of what feeds them (a chain runs straight, and
    // goes on at the same height in the next band), in the order of those heights so that links
    // do not cross needlessly.
    for (const auto& [d, ids] : columns) {
      std::vector<std::pair<double, NodeId>> order;
      double stack = 0;
      for (NodeId id : ids) {
        if (nearUser.count(id)) continue;
        double sum = 0;
        int count = 0;
        for (NodeId p : producers[id])
          if (y.count(p)) sum += y[p], ++count;
        if (count) {
          order.push_back({sum / count, id});
        } else {
          order.push_back({stack, id});
          stack += size[id].height + kRowGap;
        }
      }
      std::stable_sort(order.begin(), order.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [want, id] : order) place(id, bandOf[d], d, want);
    }
    // Initializers beside the row of the port they feed, in that user's band.
    for (NodeId id : nearUser) {
      double want = 0;
      int band = bandOf[depth[id]];
      for (const auto& l : g.outputLinks(id, 0))
        if (depth[l.to.node] == depth[id] + 1 && y.count(l.to.node)) {
          // Its output port (below a three-line header) level with the input it feeds.
          want = y[l.to.node] + 22.0 * l.to.port - 16;
          band = nodeBand[l.to.node];
          break;
        }
      place(id, band, depth[id], want);
    }
  };
  for (const auto& [d, ids] : columns) bandOf[d] = 0;
  layOut();
  // As many bands as make the whole about as wide as a screen is, relative to its height.
  double top = 0, bottom = 0;
  for (const auto& [id, v] : y) {
    top = std::min(top, v);
    bottom = std::max(bottom, v + size[id].height);
  }
  // Rounded down, and eight columns a band at least: a short graph stays in one row (two bands
  // of an Input, a Relu and an Output read worse than one).
  constexpr double kAspect = 1.6, kBandGap = 160;
  constexpr int kMinBandColumns = 8;
  const int bands =
      std::clamp(static_cast<int>(std::sqrt(totalWidth / (kAspect * (bottom - top + kBandGap)))), 1,
                 std::max(1, static_cast<int>(columns.size()) / kMinBandColumns));
  std::map<int, double> bandLeft{{0, 0.0}};
  if (bands > 1) {
    // Break at a column boundary once a band is as wide as its share; a band starts at its
    // first column (the initializers of that column's ops sit left of it).
    const double share = totalWidth / bands;
    int band = 0;
    for (const auto& [d, ids] : columns) {
      if (x[d] - bandLeft[band] >= share && band + 1 < bands) bandLeft[++band] = x[d];
      bandOf[d] = band;
    }
    layOut();
  }
  // Bands stacked top to bottom, each as tall as what it holds.
  std::map<int, std::pair<double, double>> extent;  // band -> [top, bottom)
  for (const auto& [id, v] : y) {
    auto [it, fresh] = extent.try_emplace(nodeBand[id], v, v + size[id].height);
    it->second.first = std::min(it->second.first, v);
    it->second.second = std::max(it->second.second, v + size[id].height);
  }
  std::map<int, double> bandShift;
  double at = 0;
  for (const auto& [band, span] : extent) {
    bandShift[band] = at - span.first;
    at += span.second - span.first + kBandGap;
  }
  for (const auto& [id, v] : y) {
    const int band = nodeBand[id];
    (void)g.moveNode(id, {x[depth[id]] - bandLeft[band], v + bandShift[band]});
  }
}

}  // namespace dw
