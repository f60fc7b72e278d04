#include "graphs/graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "graphs/tensor_data.h"
#include "nodes/type_syntax.h"

namespace dw {

namespace {
std::string joinNames(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

// "<who> has no parameter 'x'; its parameters are: a, b" (or "; it takes none").
Status unknownParam(const std::string& who, const NodeSpec& s, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : s.params) names.push_back(p.name);
  return Status::error(who + " has no parameter '" + name + "'" +
                       (names.empty() ? std::string("; it takes none")
                                      : "; its parameters are: " + joinNames(names)));
}

bool isValidTensorName(const std::string& s) {
  return !s.empty() && std::none_of(s.begin(), s.end(),
                                    [](char c) { return c == '\n' || c == '\r' || c == '\t'; });
}

// A stored layer weight (Node::weights) is a float tensor whose data fills its dims.
Status checkStoredWeight(const std::string& name, const std::string& bytes) {
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return Status::error("weight '" + name + "' is not an ONNX tensor");
  if (t.data_type() != onnx::TensorProto::FLOAT)
    return Status::error("weight '" + name + "' is not a float tensor");
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > std::numeric_limits<int64_t>::max() / 4 / d))
      return Status::error("weight '" + name + "' has an invalid dimension " + std::to_string(d));
    count *= d;
  }
  Status raw = toRawData(t);
  if (!raw.ok()) return Status::error("weight '" + name + "': " + raw.message());
  if (t.raw_data().size() != static_cast<size_t>(count) * 4)
    return Status::error("weight '" + name + "' holds " + std::to_string(t.raw_data().size() / 4) +
                         " values but its dims need " + std::to_string(count));
  return Status();
}

// Coerces a value to the spec's type where that loses nothing (1 -> 1.0, 0/1 -> bool).
std::optional<Param> coerce(const Param& v, ParamType want) {
  if (v.type == want) return v;
  if (want == ParamType::Float && (v.type == ParamType::Int || v.type == ParamType::Bool))
    return Param::makeFloat(static_cast<double>(v.asInt()));
  if (want == ParamType::Bool && v.type == ParamType::Int && (v.asInt() == 0 || v.asInt() == 1))
    return Param::makeBool(v.asInt() != 0);
  if (want == ParamType::Int && v.type == ParamType::Bool) return Param::makeInt(v.asInt());
  if (want == ParamType::Int && v.type == ParamType::Float && std::isfinite(v.asFloat()) &&
      std::floor(v.asFloat()) == v.asFloat())
    return Param::makeInt(static_cast<int64_t>(v.asFloat()));
  if (want == ParamType::Floats && v.type == ParamType::Ints) {
    std::vector<double> f(v.asInts().begin(), v.asInts().end());
    return Param::makeFloats(std::move(f));
  }
  return std::nullopt;
}
}  // namespace

Graph::Graph(const Catalogue& catalogue) : catalogue_(&catalogue) {
  info_.opsets[kOnnxDomain] = catalogue.defaultOpsets().count(kOnnxDomain)
                                  ? catalogue.defaultOpsets().at(kOnnxDomain)
                                  : kDefaultOnnxOpset;
}

void Graph::setInfo(ModelInfo info) {
  info_ = std::move(info);
  notify([](GraphObserver* o) { o->modelChanged(); });
}

int Graph::opset(const std::string& domain) const {
  auto it = info_.opsets.find(domain);
  if (it != info_.opsets.end()) return it->second;
  auto def = catalogue_->defaultOpsets().find(domain);
  return def != catalogue_->defaultOpsets().end() ? def->second : 1;
}

const Node* Graph::node(NodeId id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

Node* Graph::mutableNode(NodeId id) {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeSpec* Graph::spec(const Node& n) const {
  return catalogue_->find(n.domain, n.type, opset(n.domain));
}

const NodeSpec* Graph::spec(NodeId id) const {
  const Node* n = node(id);
  return n ? spec(*n) : nullptr;
}

std::string Graph::describe(NodeId id) const {
  const Node* n = node(id);
  if (!n) return "node #" + std::to_string(id);
  std::string out = n->type;
  if (!n->name.empty()) out += " '" + n->name + "'";
  return out + " (#" + std::to_string(id) + ")";
}

std::string snakeCase(const std::string& type) {
  static const std::regex kWord("(.)([A-Z][a-z]+)"), kCamel("([a-z])([A-Z])");
  std::string s = std::regex_replace(std::regex_replace(type, kWord, "$1_$2"), kCamel, "$1_$2");
  std::string out;
  for (char c : s) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool word = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (word)
      out += l;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? std::string("node") : out;
}

std::string Graph::uniqueName(const std::string& base) const {
  std::set<std::string> used;
  for (const auto& [id, n] : nodes_) used.insert(n.name);
  if (!used.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string cand = base + "_" + std::to_string(i);
    if (!used.count(cand)) return cand;
  }
}

std::vector<std::string> Graph::opsetRaiseConflicts(const std::string& domain, int to) const {
  const std::string dom = canonicalDomain(domain);
  const int from = opset(dom);
  std::vector<std::string> out;
  for (const auto& [id, n] : nodes_) {
    if (n.domain != dom) continue;
    const NodeSpec* before = catalogue_->find(dom, n.type, from);
    if (!before) continue;  // already a problem of its own
    const NodeSpec* after = catalogue_->find(dom, n.type, to);
    const std::string at = " at opset " + std::to_string(to);
    if (!after) {
      out.push_back(describe(id) + ": " + n.type + " is not an operator" + at);
      continue;
    }
    if (after->version == before->version) continue;
    for (const auto& p : before->params) {
      const ParamSpec* q = after->param(p.name);
      if (auto set = n.params.find(p.name); set != n.params.end()) {
        if (q && q->type == ParamType::String && !q->allowedValues.empty() &&
            std::find(q->allowedValues.begin(), q->allowedValues.end(), set->second.asString()) ==
                q->allowedValues.end())
          out.push_back(describe(id) + ": its parameter '" + p.name + "' is \"" +
                        set->second.asString() + "\", not one of " + n.type + "'s choices" + at);
        if (!q || q->type != p.type)
          out.push_back(describe(id) + ": its parameter '" + p.name + "' is " +
                        (q ? "of another type" : "not a parameter of " + n.type) + at +
                        (std::any_of(after->inputs.begin(), after->inputs.end(),
                                     [&](const PortSpec& in) { return in.name == p.name; })
                             ? " (it became an input)"
                             : ""));
      } else if (q ? q->defaultValue != p.defaultValue : p.defaultValue.has_value()) {
        out.push_back(describe(id) + ": the default of its parameter '" + p.name + "' changes" +
                      at);
      }
    }
    for (const auto& q : after->params)
      if (q.required && !before->param(q.name))
        out.push_back(describe(id) + ": " + n.type + " needs parameter '" + q.name + "'" + at);
    auto portName = [](const PortSpec* p) -> std::string { return p ? p->name : "(none)"; };
    for (const auto& l : links_) {
      if (l.isGraphLink()) continue;
      if (l.to.node == id) {
        const std::string was = portName(before->inputPort(l.to.port)),
                          is = portName(after->inputPort(l.to.port));
        if (was != is)
          out.push_back(describe(id) + ": its input " + std::to_string(l.to.port) + " is '" + is +
                        "'" + at + ", not '" + was + "'");
      }
      if (l.from.node == id) {
        const std::string was = portName(before->outputPort(l.from.port)),
                          is = portName(after->outputPort(l.from.port));
        if (was != is)
          out.push_back(describe(id) + ": its output " + std::to_string(l.from.port) + " is '" +
                        is + "'" + at + ", not '" + was + "'");
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<NodeId> Graph::addNode(const std::string& domain, const std::string& type, Position pos) {
  const std::string dom = canonicalDomain(domain);
  const NodeSpec* s = catalogue_->find(dom, type, opset(dom));
  if (const NodeSpec* newer = s ? nullptr : catalogue_->find(dom, type);
      newer && newer->version > opset(dom)) {
    // An op newer than the graph's opset: raise that where nothing already here changes.
    const auto conflicts = opsetRaiseConflicts(dom, newer->version);
    if (!conflicts.empty()) {
      std::string msg = type + " first appears in " + dom + " opset " +
                        std::to_string(newer->version) + ", and this graph imports opset " +
                        std::to_string(opset(dom)) + "; raising it would change ";
      for (size_t i = 0; i < conflicts.size() && i < 5; ++i) msg += (i ? "; " : "") + conflicts[i];
      if (conflicts.size() > 5) msg += "; and " + std::to_string(conflicts.size() - 5) + " more";
      return Status::error(msg + ". Rewrite those nodes as opset " +
                           std::to_string(newer->version) + " defines them first.");
    }
    ModelInfo info = info_;
    info.opsets[dom] = newer->version;
    setInfo(std::move(info));
    s = catalogue_->find(dom, type, opset(dom));
  }
  if (!s) {
    std::string msg = "unknown node type '" + type + "' in domain '" + dom + "'";
    auto hints = catalogue_->suggest(type);
    if (!hints.empty()) msg += "; did you mean " + joinNames(hints) + "?";
    return Status::error(msg + " (`deepwire nodes` lists every type)");
  }
  Node n;
  n.id = nextId_;
  n.domain = dom;
  n.type = type;
  n.position = pos;
  if (s->kind == NodeKind::GraphInput) n.name = uniqueName("input");
  if (s->kind == NodeKind::GraphOutput) n.name = uniqueName("output");
  if (s->kind == NodeKind::Initializer) n.name = uniqueName("weight");
  DW_RETURN_IF_ERROR(insertNode(std::move(n)));
  return nextId_ - 1;
}

Status Graph::insertNode(Node n) {
  if (n.id <= 0) return Status::error("node id " + std::to_string(n.id) + " must be positive");
  // Ids stay below 2^53, where JSON numbers are still exact and id + 1 cannot overflow.
  if (n.id >= (int64_t(1) << 53))
    return Status::error("node id " + std::to_string(n.id) +
                         " is too large; ids must be below 2^53 (9007199254740992)");
  if (nodes_.count(n.id))
    return Status::error("node id " + std::to_string(n.id) + " is already used by " +
                         describe(n.id));
  n.domain = canonicalDomain(n.domain);
  if (!spec(n)) {
    std::string msg = "node #" + std::to_string(n.id) + ": unknown node type '" + n.type +
                      "' in domain '" + n.domain + "' at opset " + std::to_string(opset(n.domain));
    auto hints = catalogue_->suggest(n.type);
    if (!hints.empty()) msg += "; did you mean " + joinNames(hints) + "?";
    return Status::error(msg);
  }
  if (!n.weights.empty() && spec(n)->kind != NodeKind::Layer)
    return Status::error("node #" + std::to_string(n.id) + " (" + n.type +
                         "): only layers store trained weights");
  for (const auto& [name, bytes] : n.weights) {
    Status st = checkStoredWeight(name, bytes);
    if (!st.ok())
      return Status::error("node #" + std::to_string(n.id) + " (" + n.type + "): " + st.message());
  }
  // A parameter the type does not have could be saved but never loaded again (values are
  // judged later, by validate(), so that a project with a bad value still opens).
  for (const auto& [name, value] : n.params)
    if (!spec(n)->param(name))
      return unknownParam("node #" + std::to_string(n.id) + " (" + n.type + ")", *spec(n), name);
  const NodeId id = n.id;
  nextId_ = std::max(nextId_, id + 1);
  nodes_.emplace(id, std::move(n));
  notify([id](GraphObserver* o) { o->nodeAdded(id); });
  return Status();
}

Status Graph::removeNode(NodeId id) {
  if (!node(id)) return Status::error("no node #" + std::to_string(id));
  std::vector<Link> gone = outgoing_[id];
  auto end = incoming_.lower_bound({id + 1, kGraphPort});
  for (auto it = incoming_.lower_bound({id, kGraphPort}); it != end; ++it)
    gone.push_back(it->second);
  for (const auto& l : gone) DW_RETURN_IF_ERROR(removeLink(l));
  nodes_.erase(id);
  outgoing_.erase(id);
  notify([id](GraphObserver* o) { o->nodeRemoved(id); });
  return Status();
}

int Graph::inputPortCount(NodeId id) const {
  const NodeSpec* s = spec(id);
  if (!s) return 0;
  int count = static_cast<int>(s->inputs.size());
  if (!s->inputs.empty() && s->inputs.back().option == PortOption::Variadic) {
    int highest = -1;
    auto end = incoming_.lower_bound({id + 1, kGraphPort});
    for (auto it = incoming_.lower_bound({id, 0}); it != end; ++it)
      highest = std::max(highest, it->first.port);
    count = std::max(count, highest + 2);  // one free port past the last connected one
  }
  return count;
}

int Graph::outputPortCount(NodeId id) const {
  const NodeSpec* s = spec(id);
  const Node* n = node(id);
  if (!s || !n) return 0;
  int count = static_cast<int>(s->outputs.size());
  if (!s->outputs.empty() && s->outputs.back().option == PortOption::Variadic) {
    int highest = static_cast<int>(n->specifiedOutputsName.size()) - 1;
    if (auto it = outgoing_.find(id); it != outgoing_.end())
      for (const auto& l : it->second) highest = std::max(highest, l.from.port);
    count = std::max(count, highest + 2);
  }
  return count;
}

std::optional<Link> Graph::inputLink(NodeId id, int port) const {
  auto it = incoming_.find({id, port});
  if (it == incoming_.end()) return std::nullopt;
  return it->second;
}

std::vector<Link> Graph::outputLinks(NodeId id, int port) const {
  std::vector<Link> out;
  if (auto it = outgoing_.find(id); it != outgoing_.end())
    for (const auto& l : it->second)
      if (l.from.port == port) out.push_back(l);
  return out;
}

bool Graph::reaches(NodeId from, NodeId to, bool graphLinks) const {
  std::vector<NodeId> stack{from};
  std::set<NodeId> seen;
  while (!stack.empty()) {
    NodeId cur = stack.back();
    stack.pop_back();
    if (cur == to) return true;
    if (!seen.insert(cur).second) continue;
    if (auto it = outgoing_.find(cur); it != outgoing_.end())
      for (const auto& l : it->second)
        if (l.isGraphLink() == graphLinks) stack.push_back(l.to.node);
  }
  return false;
}

std::vector<std::string> portTypes(const Graph& g, PortRef port, bool isOutput) {
  const Node* n = g.node(port.node);
  const NodeSpec* s = g.spec(port.node);
  if (!n || !s) return {};
  if (s->kind == NodeKind::GraphInput || s->kind == NodeKind::Initializer) {
    std::string text;
    if (s->kind == NodeKind::GraphInput) {
      auto p = g.param(port.node, "type");
      text = p ? p->asString() : "";
    } else {
      auto p = g.param(port.node, "dtype");
      text = p ? p->asString() : "";
    }
    auto t = parseType(text);
    if (t.ok() && t->has_tensor_type())
      return {"tensor(" + dtypeName(t->tensor_type().elem_type()) + ")"};
    return {};
  }
  return isOutput ? s->outputTypes(port.port) : s->inputTypes(port.port);
}

Status Graph::checkLink(const Link& l, bool checkTypes) const {
  const Node* from = node(l.from.node);
  const Node* to = node(l.to.node);
  if (!from)
    return Status::error("link source node #" + std::to_string(l.from.node) + " does not exist");
  if (!to)
    return Status::error("link target node #" + std::to_string(l.to.node) + " does not exist");
  const std::string where =
      "cannot connect " + describe(l.from.node) + " to " + describe(l.to.node);
  if ((l.from.port == kGraphPort) != (l.to.port == kGraphPort))
    return Status::error(where + ": a Graphs out port connects only to a Graphs in port");
  if (l.from.node == l.to.node) return Status::error(where + ": a node cannot feed itself");
  if (l.isGraphLink()) {
    if (inputLink(l.to.node, kGraphPort))
      return Status::error(where + ": its Graphs in port is already connected");
    if (reaches(l.to.node, l.from.node, true))
      return Status::error(where + ": the Graphs link would make a cycle");
    return Status();
  }
  const NodeSpec* fs = spec(*from);
  const NodeSpec* ts = spec(*to);
  const PortSpec* out = fs->outputPort(l.from.port);
  const PortSpec* in = ts->inputPort(l.to.port);
  if (!out)
    return Status::error(where + ": " + describe(l.from.node) + " has no output port " +
                         std::to_string(l.from.port) + " (it has " +
                         std::to_string(fs->outputs.size()) + ")");
  if (!in)
    return Status::error(where + ": " + describe(l.to.node) + " has no input port " +
                         std::to_string(l.to.port) + " (it has " +
                         std::to_string(ts->inputs.size()) + ")");
  const std::string ports = " (output '" + out->name + "' to input '" + in->name + "')";
  if (inputLink(l.to.node, l.to.port))
    return Status::error(where + ports + ": input '" + in->name +
                         "' is already connected; disconnect it first");
  if (reaches(l.to.node, l.from.node, false))
    return Status::error(where + ports + ": the link would make a cycle");
  if (!checkTypes) return Status();
  const auto a = portTypes(*this, l.from, true);
  const auto b = portTypes(*this, l.to, false);
  if (!a.empty() && !b.empty()) {
    bool any = std::any_of(a.begin(), a.end(), [&](const std::string& t) {
      return std::find(b.begin(), b.end(), t) != b.end();
    });
    if (!any)
      return Status::error(where + ports + ": output types {" + joinNames(a) +
                           "} and input types {" + joinNames(b) + "} have nothing in common");
  }
  return Status();
}

Status Graph::addLink(const Link& l, bool checkTypes) {
  DW_RETURN_IF_ERROR(checkLink(l, checkTypes));
  links_.push_back(l);
  incoming_[l.to] = l;
  outgoing_[l.from.node].push_back(l);
  notify([&l](GraphObserver* o) { o->linkAdded(l); });
  return Status();
}

Status Graph::removeLink(const Link& l) {
  auto it = std::find(links_.begin(), links_.end(), l);
  if (it == links_.end())
    return Status::error("no link from " + describe(l.from.node) + " port " +
                         std::to_string(l.from.port) + " to " + describe(l.to.node) + " port " +
                         std::to_string(l.to.port));
  links_.erase(it);
  incoming_.erase(l.to);
  auto& out = outgoing_[l.from.node];
  out.erase(std::find(out.begin(), out.end(), l));
  notify([&l](GraphObserver* o) { o->linkRemoved(l); });
  return Status();
}

Status Graph::checkParam(const Node& n, const NodeSpec& s, const std::string& name,
                         const Param& value) const {
  const ParamSpec* ps = s.param(name);
  if (!ps) return unknownParam(describe(n.id), s, name);
  auto v = coerce(value, ps->type);
  if (!v)
    return Status::error(describe(n.id) + ": parameter '" + name + "' takes a " +
                         paramTypeName(ps->type) + ", not a " + paramTypeName(value.type));
  if (ps->type == ParamType::String && !ps->allowedValues.empty() &&
      std::find(ps->allowedValues.begin(), ps->allowedValues.end(), v->asString()) ==
          ps->allowedValues.end())
    return Status::error(describe(n.id) + ": parameter '" + name + "' is \"" + v->asString() +
                         "\"; allowed values are " + joinNames(ps->allowedValues));
  if (s.kind == NodeKind::GraphInput || s.kind == NodeKind::GraphOutput) {
    if (name == "type" && !(s.kind == NodeKind::GraphOutput && v->asString().empty())) {
      auto t = parseType(v->asString());
      if (!t.ok()) return t.status().withContext(describe(n.id));
    }
  }
  if (s.kind == NodeKind::Initializer && name == "shape") {
    for (int64_t d : v->asInts())
      if (d < 0)
        return Status::error(describe(n.id) + ": shape dimensions must be >= 0, got " +
                             std::to_string(d));
    if (s.shapeRank >= 0 && v->asInts().size() != static_cast<size_t>(s.shapeRank))
      return Status::error(describe(n.id) + ": shape has " + std::to_string(v->asInts().size()) +
                           " dimension(s); a " + s.type + " takes exactly " +
                           std::to_string(s.shapeRank));
  }
  return Status();
}

Status Graph::setParam(NodeId id, const std::string& name, const Param& value) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  const NodeSpec* s = spec(*n);
  DW_RETURN_IF_ERROR(checkParam(*n, *s, name, value));
  Param v = *coerce(value, s->param(name)->type);
  if (name == "seed" && !n->weights.empty() && param(id, name) != v) n->weights.clear();
  n->params[name] = std::move(v);
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

Status Graph::resetParam(NodeId id, const std::string& name) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  if (!spec(*n)->param(name))
    return Status::error(describe(id) + " has no parameter '" + name + "'");
  auto before = param(id, name);
  n->params.erase(name);
  if (name == "seed" && !n->weights.empty() && param(id, name) != before) n->weights.clear();
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

std::optional<Param> Graph::param(NodeId id, const std::string& name) const {
  const Node* n = node(id);
  if (!n) return std::nullopt;
  auto it = n->params.find(name);
  if (it != n->params.end()) return it->second;
  const NodeSpec* s = spec(*n);
  const ParamSpec* ps = s ? s->param(name) : nullptr;
  return ps ? ps->defaultValue : std::nullopt;
}

Status Graph::rename(NodeId id, const std::string& name) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  const NodeSpec* s = spec(*n);
  if (namesItsTensor(s->kind) && !isValidTensorName(name))
    return Status::error(describe(id) + ": an " + n->type +
                         " needs a name without line breaks or tabs; it is the tensor's name");
  n->name = name;
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

Status Graph::setSpecifiedOutputsName(NodeId id, std::vector<std::string> names) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  const NodeSpec* s = spec(*n);
  const bool variadic = !s->outputs.empty() && s->outputs.back().option == PortOption::Variadic;
  if (!variadic && names.size() > s->outputs.size())
    return Status::error(describe(id) + ": specified_outputs_name has " +
                         std::to_string(names.size()) + " names but the node has " +
                         std::to_string(s->outputs.size()) + " outputs");
  n->specifiedOutputsName = std::move(names);
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

Status Graph::setLdaCoeff(NodeId id, double coeff) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  if (!std::isfinite(coeff))
    return Status::error(describe(id) + ": lda coeff must be a finite number");
  n->ldaCoeff = coeff;
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

Status Graph::setModel(NodeId id, const std::string& model) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  n->model = model;
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

Status Graph::setWeights(NodeId id, std::map<std::string, std::string> weights) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  if (!weights.empty() && spec(*n)->kind != NodeKind::Layer)
    return Status::error(describe(id) + ": only layers store trained weights");
  for (const auto& [name, bytes] : weights)
    DW_RETURN_IF_ERROR(checkStoredWeight(name, bytes).withContext(describe(id)));
  if (n->weights == weights) return Status();
  n->weights = std::move(weights);
  notify([id](GraphObserver* o) { o->nodeChanged(id); });
  return Status();
}

Status Graph::moveNode(NodeId id, Position pos) {
  Node* n = mutableNode(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  n->position = pos;
  notify([id](GraphObserver* o) { o->nodeMoved(id); });
  return Status();
}

void Graph::removeObserver(GraphObserver* o) {
  auto& l = observers_.list;
  l.erase(std::remove(l.begin(), l.end(), o), l.end());
}

std::string Graph::modelOf(NodeId id) const {
  std::set<NodeId> seen;
  NodeId cur = id;
  while (seen.insert(cur).second) {
    auto l = inputLink(cur, kGraphPort);
    if (!l) break;
    cur = l->from.node;
  }
  const Node* n = node(cur);
  return n ? n->model : "";
}

std::string Graph::tensorName(PortRef out) const {
  const Node* n = node(out.node);
  const NodeSpec* s = n ? spec(*n) : nullptr;
  if (!s) return "";
  if (namesItsTensor(s->kind)) return n->name;
  if (out.port < static_cast<int>(n->specifiedOutputsName.size()) &&
      !n->specifiedOutputsName[out.port].empty())
    return n->specifiedOutputsName[out.port];
  std::vector<NodeId> outputs;
  for (const auto& l : outputLinks(out.node, out.port)) {
    const Node* c = node(l.to.node);
    const NodeSpec* cs = c ? spec(*c) : nullptr;
    if (cs && cs->kind == NodeKind::GraphOutput) outputs.push_back(c->id);
  }
  if (outputs.size() == 1) return node(outputs[0])->name;
  const std::string base = n->name.empty() ? n->type + "_" + std::to_string(n->id) : n->name;
  const PortSpec* p = s->outputPort(out.port);
  std::string port = p ? p->name : std::to_string(out.port);
  if (out.port >= static_cast<int>(s->outputs.size()) || (p && p->option == PortOption::Variadic))
    port += "_" + std::to_string(out.port - static_cast<int>(s->outputs.size()) + 1);
  return base + "_" + port;
}

std::vector<Problem> Graph::hints() const {
  std::vector<Problem> hints;
  for (const auto& [id, n] : nodes_) {
    const bool onnxOp = n.domain.empty() || n.domain == "ai.onnx";
    // torch.onnx.export(..., training=TRAINING) leaves BatchNormalization normalizing with each
    // batch's own statistics, in every export too: a trial's sample scored 1.0 apart alone and
    // in a batch of 8, without a word from import, check, train or export.
    if (onnxOp && n.type == "BatchNormalization")
      if (auto mode = param(id, "training_mode"); mode && mode->asInt() != 0)
        hints.push_back({id, describe(id) +
                                 ": training_mode is 1, so the model normalizes every batch with "
                                 "that batch's own statistics, exported for inference too (a "
                                 "sample's result depends on the others in its batch). Set "
                                 "training_mode to 0 to use the running statistics"});
    // Its Dropout gets a constant true training_mode: it drops values in every export too.
    if (onnxOp && n.type == "Dropout")
      if (const auto l = inputLink(id, 2))
        if (const Node* src = node(l->from.node);
            src &&
            (src->type == "Initializer" ? src->domain == kGraphDomain : src->type == "Constant")) {
          const auto v = param(src->id, src->type == "Constant" ? "value" : "values");
          onnx::TensorProto t;
          if (v && isProtoParam(v->type) && t.ParseFromString(v->asString()) &&
              t.data_type() == onnx::TensorProto::BOOL && elementCount(t) == 1 &&
              (t.raw_data().empty() ? t.int32_data_size() == 1 && t.int32_data(0) != 0
                                    : t.raw_data()[0] != 0))
            hints.push_back({id, describe(id) +
                                     ": its training_mode input is a constant true, so it drops "
                                     "values at random in every run, exported for inference "
                                     "too. Unwire training_mode (deepwire's training turns "
                                     "dropout on by itself)"});
        }
  }
  // torch's exporter merges initializers of equal values (LayerNorm's ones, zero biases) and
  // hands each user an Identity of the one it keeps: deepwire trains that as one shared weight,
  // as the file says, which PyTorch trained apart (a trial's transformer drifted from torch's
  // loss from the second step).
  for (const auto& [id, n] : nodes_) {
    if (n.domain != kGraphDomain || n.type != "Initializer") continue;
    const auto status = param(id, "status");
    if (status && status->asString() != "Trainable") continue;
    int identities = 0;
    for (const Link& l : outputLinks(id, 0))
      if (const Node* to = node(l.to.node);
          to && (to->domain.empty() || to->domain == kOnnxDomain) && to->type == "Identity")
        ++identities;
    if (identities >= 2)
      hints.push_back({id, describe(id) + ": it feeds " + std::to_string(identities) +
                               " Identity nodes, which is how torch's exporter shares one "
                               "initializer among weights of equal values (LayerNorm's ones, "
                               "zero biases): training updates them as one weight, where PyTorch "
                               "trained them apart. To train them apart, give each Identity's "
                               "readers an Initializer of their own"});
  }
  // TF32 is a tensor-core format: on any other device the first step refused it, while the
  // canvas said "valid" (a trial met it at Train Step).
  for (const auto& [id, n] : nodes_)
    if (n.domain == kGraphDomain && n.type == "Accelerator") {
      const auto device = param(id, "device"), precision = param(id, "precision");
      if (precision && precision->asString() == "tf32" && device &&
          device->asString().rfind("cuda", 0) != 0 && device->asString() != "auto")
        hints.push_back({id, describe(id) + ": precision tf32 runs on accelerator cuda only; on " +
                                 device->asString() +
                                 " choose fp32 or bf16 (training refuses tf32 there)"});
    }
  for (const auto& [id, n] : nodes_) {
    if (n.domain != kLayersDomain || n.type != "Output Train") continue;
    const auto lossType = param(id, "loss");
    const NodeSpec* loss =
        lossType ? catalogue_->find(kLossesDomain, lossType->asString()) : nullptr;
    const ParamSpec* fromLogits = loss ? loss->param("from_logits") : nullptr;
    if (!fromLogits) continue;
    auto set = n.params.find("from_logits");
    const Param value = set != n.params.end()
                            ? set->second
                            : fromLogits->defaultValue.value_or(Param::makeBool(false));
    const auto link = inputLink(id, 0);
    const Node* from = link ? node(link->from.node) : nullptr;
    if (!from) continue;
    if (value.asBool()) {
      // The other way round: probabilities taken for logits are squashed a second time (a
      // trial's model ending in Softmax, imported --from-logits, sat at ln 10).
      const auto act = param(from->id, "activation");
      const bool onnx = from->domain.empty() || from->domain == "ai.onnx";
      const std::string squash =
          act && act->type == ParamType::String &&
                  (act->asString() == "softmax" || act->asString() == "sigmoid")
              ? "activation " + act->asString()
          : onnx && (from->type == "Softmax" || from->type == "Sigmoid") ? from->type
          : from->domain == kLayersDomain && (from->type == "SoftMax" || from->type == "Sigmoid")
              ? from->type
              : "";
      if (!squash.empty())
        hints.push_back({id, describe(id) + ": loss " + lossType->asString() +
                                 " takes raw scores (from_logits is on), but " +
                                 describe(from->id) + " gives probabilities (" + squash +
                                 "): they are squashed twice, and training barely learns. Turn "
                                 "from_logits off, or take the scores from before it"});
      continue;
    }
    // Unnormalized scores: a Keras-style layer whose activation is neither softmax nor
    // sigmoid, or an ONNX product or sum.
    std::string gives, fix;
    if (auto act = param(from->id, "activation"); act && act->type == ParamType::String) {
      const std::string a = act->asString();
      if (a != "softmax" && a != "sigmoid") gives = "activation " + a;
      fix = "give it a softmax activation (sigmoid for yes/no targets)";
    } else if (from->domain.empty() || from->domain == "ai.onnx") {
      for (const char* op : {"Gemm", "MatMul", "Add", "Conv"})
        if (from->type == op) gives = op;
      fix = "put a Softmax (Sigmoid for yes/no targets) after it";
    }
    if (gives.empty()) continue;
    hints.push_back({id, describe(id) + ": loss " + lossType->asString() +
                             " takes its prediction as probabilities (from_logits is off), but " +
                             describe(from->id) + " gives unnormalized scores (" + gives +
                             "). Turn from_logits on, or " + fix +
                             "; as it is, training barely learns"});
  }
  return hints;
}

std::vector<Problem> Graph::validate() const {
  std::vector<Problem> problems;
  auto add = [&](NodeId id, const std::string& msg) {
    problems.push_back({id, id ? describe(id) + ": " + msg : msg});
  };
  std::map<std::string, std::vector<NodeId>> tensorOwners;
  for (const auto& [id, n] : nodes_) {
    const NodeSpec* s = spec(n);
    if (!s) {
      add(id, "unknown node type '" + n.type + "' in domain '" + n.domain + "' at opset " +
                  std::to_string(opset(n.domain)));
      continue;
    }
    // Parameters: known, typed, allowed, and present when required.
    for (const auto& [name, value] : n.params) {
      Status st = checkParam(n, *s, name, value);
      if (!st.ok()) problems.push_back({id, st.message()});
    }
    for (const auto& ps : s->params)
      if (ps.required && !n.params.count(ps.name))
        add(id, "required parameter '" + ps.name + "' is not set");
    // Inputs: every required port is fed; variadic ports have their minimum count.
    // A node nothing reads, left over (pasted, or cut off by an edit): say so, since deleting
    // it is as good a fix as wiring it.
    // (Losses, metrics and Output Train are read by training, not by links.)
    auto outgoing = outgoing_.find(id);
    const bool unread = s->kind != NodeKind::GraphOutput && outputPortCount(id) > 0 &&
                        n.domain != kLossesDomain && n.domain != kMetricsDomain &&
                        n.type != "Output Train" &&
                        (outgoing == outgoing_.end() || outgoing->second.empty());
    for (size_t i = 0; i < s->inputs.size(); ++i) {
      const auto& port = s->inputs[i];
      if (port.option == PortOption::Single && !inputLink(id, static_cast<int>(i)))
        add(id, "required input '" + port.name + "' (port " + std::to_string(i) +
                    ") is not connected" +
                    (unread ? "; nothing reads this node either: wire it in or delete it" : ""));
      if (port.option == PortOption::Variadic) {
        int connected = 0;
        auto end = incoming_.lower_bound({id + 1, kGraphPort});
        for (auto it = incoming_.lower_bound({id, static_cast<int>(i)}); it != end; ++it)
          ++connected;
        if (connected < port.minArity)
          add(id, "variadic input '" + port.name + "' needs at least " +
                      std::to_string(port.minArity) + " connection(s), has " +
                      std::to_string(connected));
      }
    }
    if (namesItsTensor(s->kind) && !isValidTensorName(n.name))
      add(id, "an " + n.type + " needs a name: it is the tensor's name in the model");
    if (s->kind == NodeKind::Initializer) {
      auto fill = param(id, "fill");
      auto dtype = param(id, "dtype");
      if (dtype && !dtypeFromName(dtype->asString()))
        add(id, "dtype '" + dtype->asString() + "' is not an element type");
      if (fill && fill->asString() == "values" && !n.params.count("values"))
        add(id, "fill is 'values' but no values are set");
      if (fill && fill->asString() != "values" && dtype &&
          (dtype->asString() == "string" || dtype->asString().rfind("complex", 0) == 0))
        add(id, "fill '" + fill->asString() + "' cannot make " + dtype->asString() +
                    " data; use fill 'values'");
    }
    // Tensor names must be unique across the model (ONNX is SSA).
    if (s->kind == NodeKind::GraphOutput) continue;
    for (int p = 0; p < outputPortCount(id); ++p) {
      const bool used =
          !outputLinks(id, p).empty() ||
          (p < static_cast<int>(n.specifiedOutputsName.size()) &&
           !n.specifiedOutputsName[p].empty()) ||
          (p < static_cast<int>(s->outputs.size()) && s->outputs[p].option == PortOption::Single);
      if (used) tensorOwners[tensorName({id, p})].push_back(id);
    }
  }
  std::map<std::string, std::vector<NodeId>> outputNames;
  for (const auto& [id, n] : nodes_) {
    const NodeSpec* s = spec(n);
    if (s && s->kind == NodeKind::GraphOutput) outputNames[n.name].push_back(id);
  }
  for (const auto& [name, ids] : outputNames)
    if (ids.size() > 1) add(ids[1], "another Output is also named '" + name + "'");
  for (const auto& [name, ids] : tensorOwners) {
    if (ids.size() < 2) continue;
    std::set<NodeId> distinct(ids.begin(), ids.end());
    std::string who;
    for (NodeId other : distinct) who += (who.empty() ? "" : ", ") + describe(other);
    add(ids[1], "tensor name '" + name + "' is produced more than once (by " + who +
                    "); rename one of them");
  }
  // Cycles (possible in hand-edited files; edits refuse them).
  std::map<NodeId, int> indegree;
  for (const auto& [id, n] : nodes_) indegree[id] = 0;
  for (const auto& l : links_)
    if (!l.isGraphLink() && indegree.count(l.to.node)) ++indegree[l.to.node];
  std::vector<NodeId> ready;
  for (const auto& [id, d] : indegree)
    if (d == 0) ready.push_back(id);
  size_t visited = 0;
  while (!ready.empty()) {
    NodeId cur = ready.back();
    ready.pop_back();
    ++visited;
    if (auto it = outgoing_.find(cur); it != outgoing_.end())
      for (const auto& l : it->second)
        if (!l.isGraphLink() && --indegree[l.to.node] == 0) ready.push_back(l.to.node);
  }
  if (visited != nodes_.size())
    for (const auto& [id, d] : indegree)
      if (d > 0) add(id, "is part of a cycle; remove one of its links");
  return problems;
}

}  // namespace dw
