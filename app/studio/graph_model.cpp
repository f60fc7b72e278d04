#include "app/studio/graph_model.h"

#include <QRegularExpression>
#include <set>

#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "nodes/type_syntax.h"

namespace dw::studio {

class GraphModel::Relay : public dw::GraphObserver {
 public:
  explicit Relay(GraphModel* m) : m_(m) {}
  void nodeAdded(NodeId id) override { emit m_->nodeAdded(id), m_->scheduleValidation(); }
  void nodeRemoved(NodeId id) override { emit m_->nodeRemoved(id), m_->scheduleValidation(); }
  void nodeChanged(NodeId id) override { emit m_->nodeChanged(id), m_->scheduleValidation(); }
  void nodeMoved(NodeId id) override { emit m_->nodeMoved(id); }
  void linkAdded(const Link& l) override { emit m_->linkAdded(l), m_->scheduleValidation(); }
  void linkRemoved(const Link& l) override { emit m_->linkRemoved(l), m_->scheduleValidation(); }
  void modelChanged() override { m_->scheduleValidation(); }

 private:
  GraphModel* m_;
};

void applyNodeState(Graph& g, const Node& target) {
  const Node* cur = g.node(target.id);
  if (!cur) return;
  std::vector<std::string> drop;
  for (const auto& [name, v] : cur->params)
    if (!target.params.count(name)) drop.push_back(name);
  for (const auto& name : drop) (void)g.resetParam(target.id, name);
  for (const auto& [name, v] : target.params) {
    auto it = cur->params.find(name);
    if (it == cur->params.end() || !(it->second == v)) (void)g.setParam(target.id, name, v);
  }
  if (cur->name != target.name) (void)g.rename(target.id, target.name);
  if (cur->specifiedOutputsName != target.specifiedOutputsName)
    (void)g.setSpecifiedOutputsName(target.id, target.specifiedOutputsName);
  if (cur->ldaCoeff != target.ldaCoeff) (void)g.setLdaCoeff(target.id, target.ldaCoeff);
  if (cur->model != target.model) (void)g.setModel(target.id, target.model);
  // After the params: a changed seed drops stored weights that the target may still hold.
  if (cur->weights != target.weights) (void)g.setWeights(target.id, target.weights);
}

// Inserts (or, inverted, removes) a set of nodes and links: create, paste, duplicate, delete,
// connect and disconnect are all this command.
class FragmentCommand : public QUndoCommand {
 public:
  FragmentCommand(GraphModel* m, std::vector<Node> nodes, std::vector<Link> links, bool insert,
                  const QString& text)
      : QUndoCommand(text),
        m_(m),
        nodes_(std::move(nodes)),
        links_(std::move(links)),
        insert_(insert) {}
  void redo() override {
    if (skipRedo_) {  // the edit was applied before the command was pushed
      skipRedo_ = false;
      return;
    }
    insert_ ? add() : remove();
  }
  void undo() override { insert_ ? remove() : add(); }

 private:
  void add() {
    Graph& g = m_->mutableGraph();
    for (const auto& n : nodes_) (void)g.insertNode(n);
    // These links existed before (or were checked when made): restore them as they were.
    for (const auto& l : links_) (void)g.addLink(l, false);
  }
  void remove() {
    Graph& g = m_->mutableGraph();
    for (const auto& l : links_) (void)g.removeLink(l);
    for (const auto& n : nodes_) (void)g.removeNode(n.id);
  }
  GraphModel* m_;
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  bool insert_;
  bool skipRedo_ = true;
};

// The model's settings (its opsets) from `before` to `after`: a node newer than the graph's
// opset raises it, and undoing the node's creation lowers it again.
class InfoCommand : public QUndoCommand {
 public:
  InfoCommand(GraphModel* m, ModelInfo before, ModelInfo after)
      : m_(m), before_(std::move(before)), after_(std::move(after)) {}
  void redo() override {
    if (skipRedo_) {
      skipRedo_ = false;
      return;
    }
    m_->mutableGraph().setInfo(after_);
  }
  void undo() override { m_->mutableGraph().setInfo(before_); }

 private:
  GraphModel* m_;
  ModelInfo before_, after_;
  bool skipRedo_ = true;
};

class MoveCommand : public QUndoCommand {
 public:
  MoveCommand(GraphModel* m, std::map<NodeId, std::pair<Position, Position>> moves)
      : QUndoCommand(moves.size() == 1 ? QObject::tr("Move node")
                                       : QObject::tr("Move %1 nodes").arg(moves.size())),
        m_(m),
        moves_(std::move(moves)) {}
  void redo() override {
    if (skipRedo_) {
      skipRedo_ = false;
      return;
    }
    for (const auto& [id, mv] : moves_) (void)m_->mutableGraph().moveNode(id, mv.second);
  }
  void undo() override {
    for (const auto& [id, mv] : moves_) (void)m_->mutableGraph().moveNode(id, mv.first);
  }

 private:
  GraphModel* m_;
  std::map<NodeId, std::pair<Position, Position>> moves_;
  bool skipRedo_ = true;
};

// Parameter edits, resets, renames, outputs names and lda coeff: the node's state before and after.
class NodeStateCommand : public QUndoCommand {
 public:
  NodeStateCommand(GraphModel* m, Node before, Node after, const QString& text)
      : QUndoCommand(text), m_(m), before_(std::move(before)), after_(std::move(after)) {}
  void redo() override {
    if (skipRedo_) {
      skipRedo_ = false;
      return;
    }
    applyNodeState(m_->mutableGraph(), after_);
  }
  void undo() override { applyNodeState(m_->mutableGraph(), before_); }

 private:
  GraphModel* m_;
  Node before_, after_;
  bool skipRedo_ = true;
};

GraphModel::GraphModel(QObject* parent) : QObject(parent), relay_(std::make_unique<Relay>(this)) {
  graph_.addObserver(relay_.get());
  validateTimer_.setSingleShot(true);
  validateTimer_.setInterval(120);
  connect(&validateTimer_, &QTimer::timeout, this, &GraphModel::validateNow);
}

GraphModel::~GraphModel() {
  graph_.removeObserver(relay_.get());
}

void GraphModel::reset(Graph graph) {
  undo_.clear();
  // clear() leaves an empty stack's clean state alone: after a recovered autosave (marked
  // unclean with nothing to undo), every document opened later showed as modified.
  undo_.setClean();
  graph_ = std::move(graph);  // keeps graph_'s observer, ours
  problems_.clear();
  nodeProblems_.clear();
  portTypes_.clear();
  emit modelReset();
  validateNow();
}

void GraphModel::scheduleValidation() {
  validateTimer_.start();
}

void GraphModel::setLocked(const QString& reason) {
  const bool was = locked();
  locked_ = reason;
  if (was != locked()) emit lockChanged(locked());
}

Status GraphModel::unlocked() const {
  return locked() ? Status::error(locked_.toStdString()) : Status();
}

Result<NodeId> GraphModel::createNode(const std::string& domain, const std::string& type,
                                      Position pos) {
  DW_RETURN_IF_ERROR(unlocked());
  const ModelInfo before = graph_.info();
  auto id = graph_.addNode(domain, type, pos);
  if (!id.ok()) return id;
  const NodeSpec* s = graph_.spec(*id);
  if (s && s->kind == NodeKind::Layer && graph_.node(*id)->name.empty())
    (void)graph_.rename(*id, graph_.uniqueName(snakeCase(type)));
  placeNew({*id});
  const QString text = tr("Create %1").arg(QString::fromStdString(type));
  const bool raised = graph_.info().opsets != before.opsets;
  if (raised) {
    undo_.beginMacro(text);
    undo_.push(new InfoCommand(this, before, graph_.info()));
  }
  undo_.push(new FragmentCommand(this, {*graph_.node(*id)}, {}, true, text));
  if (raised) {
    undo_.endMacro();
    const std::string dom = graph_.node(*id)->domain;
    emit opsetRaised(QString::fromStdString(type), QString::fromStdString(dom),
                     before.opsets.count(dom) ? before.opsets.at(dom) : 0, graph_.opset(dom));
  }
  return id;
}

Status GraphModel::removeItems(const std::vector<NodeId>& ids, const std::vector<Link>& links) {
  DW_RETURN_IF_ERROR(unlocked());
  std::set<NodeId> gone(ids.begin(), ids.end());
  std::vector<Node> nodes;
  for (NodeId id : gone)
    if (const Node* n = graph_.node(id)) nodes.push_back(*n);
  // Every link that disappears: the ones asked for, and those touching a removed node.
  std::vector<Link> dropped;
  for (const auto& l : graph_.links())
    if (gone.count(l.from.node) || gone.count(l.to.node) ||
        std::find(links.begin(), links.end(), l) != links.end())
      dropped.push_back(l);
  if (nodes.empty() && dropped.empty()) return Status();
  for (const auto& l : dropped) DW_RETURN_IF_ERROR(graph_.removeLink(l));
  for (const auto& n : nodes) DW_RETURN_IF_ERROR(graph_.removeNode(n.id));
  QString text = nodes.empty() ? tr("Delete %n link(s)", "", int(dropped.size()))
                               : tr("Delete %n node(s)", "", int(nodes.size()));
  undo_.push(new FragmentCommand(this, std::move(nodes), std::move(dropped), false, text));
  return Status();
}

Status GraphModel::moveNodes(const std::map<NodeId, Position>& to) {
  std::map<NodeId, std::pair<Position, Position>> moves;
  for (const auto& [id, pos] : to) {
    const Node* n = graph_.node(id);
    if (!n) return Status::error("no node #" + std::to_string(id));
    if (n->position == pos) continue;
    moves[id] = {n->position, pos};
  }
  if (moves.empty()) return Status();
  for (const auto& [id, mv] : moves) DW_RETURN_IF_ERROR(graph_.moveNode(id, mv.second));
  undo_.push(new MoveCommand(this, std::move(moves)));
  return Status();
}

void GraphModel::placeNew(const std::vector<NodeId>& ids) {
  if (!placer_ || ids.empty()) return;
  const std::optional<Position> shift = placer_(ids);
  if (!shift || (shift->x == 0 && shift->y == 0)) return;
  for (NodeId id : ids)
    if (const Node* n = graph_.node(id))
      (void)graph_.moveNode(id, {n->position.x + shift->x, n->position.y + shift->y});
}

Status GraphModel::connectPorts(const Link& link) {
  DW_RETURN_IF_ERROR(unlocked());
  const std::optional<Link> old = graph_.inputLink(link.to.node, link.to.port);
  if (!old || *old == link) {
    DW_RETURN_IF_ERROR(graph_.addLink(link));
    undo_.push(new FragmentCommand(this, {}, {link}, true, tr("Connect")));
    return Status();
  }
  // The new link is checked as if the input were free (its types may have been bound by the old
  // one), so the old link goes first and comes back if the new one is refused.
  DW_RETURN_IF_ERROR(graph_.removeLink(*old));
  if (Status st = graph_.addLink(link); !st.ok()) {
    (void)graph_.addLink(*old, false);
    return st;
  }
  undo_.beginMacro(tr("Replace link"));
  undo_.push(new FragmentCommand(this, {}, {*old}, false, tr("Disconnect")));
  undo_.push(new FragmentCommand(this, {}, {link}, true, tr("Connect")));
  undo_.endMacro();
  return Status();
}

Status GraphModel::insertIntoLink(NodeId node, const Link& link) {
  DW_RETURN_IF_ERROR(unlocked());
  if (link.isGraphLink() || link.from.node == node || link.to.node == node)
    return Status::error("a node goes into a tensor link of two other nodes");
  if (graph_.inputPortCount(node) < 1 || graph_.outputPortCount(node) < 1)
    return Status::error(graph_.describe(node) + " has no input and output to go between them");
  if (graph_.inputLink(node, 0))
    return Status::error(graph_.describe(node) + "'s first input is already connected");
  for (const Link& l : graph_.links())
    if (l.from.node == node && l.from.port == 0 && !l.isGraphLink())
      return Status::error(graph_.describe(node) + "'s first output is already connected");
  const Link in{link.from, {node, 0}}, out{{node, 0}, link.to};
  DW_RETURN_IF_ERROR(graph_.removeLink(link));
  if (Status st = graph_.addLink(in); !st.ok()) {
    (void)graph_.addLink(link, false);
    return st;
  }
  if (Status st = graph_.addLink(out); !st.ok()) {
    (void)graph_.removeLink(in);
    (void)graph_.addLink(link, false);
    return st;
  }
  undo_.beginMacro(tr("Insert %1").arg(QString::fromStdString(graph_.node(node)->type)));
  undo_.push(new FragmentCommand(this, {}, {link}, false, tr("Disconnect")));
  undo_.push(new FragmentCommand(this, {}, {in, out}, true, tr("Connect")));
  undo_.endMacro();
  return Status();
}

Status GraphModel::disconnect(const Link& link) {
  DW_RETURN_IF_ERROR(unlocked());
  DW_RETURN_IF_ERROR(graph_.removeLink(link));
  undo_.push(new FragmentCommand(this, {}, {link}, false, tr("Disconnect")));
  return Status();
}

Status GraphModel::recordNodeEdit(const Node& before, const QString& text) {
  const Node* after = graph_.node(before.id);
  if (!after) return Status::error("no node #" + std::to_string(before.id));
  undo_.push(new NodeStateCommand(this, before, *after, text));
  return Status();
}

namespace {
Result<Node> snapshot(const Graph& g, NodeId id) {
  const Node* n = g.node(id);
  if (!n) return Status::error("no node #" + std::to_string(id));
  return *n;
}
}  // namespace

Status GraphModel::setParam(NodeId id, const std::string& name, const Param& value) {
  DW_RETURN_IF_ERROR(unlocked());
  auto before = snapshot(graph_, id);
  if (!before.ok()) return before.status();
  if (auto cur = graph_.param(id, name); cur && *cur == value && before->params.count(name))
    return Status();
  DW_RETURN_IF_ERROR(graph_.setParam(id, name, value));
  return recordNodeEdit(*before, tr("Set %1").arg(QString::fromStdString(name)));
}

Status GraphModel::resetParam(NodeId id, const std::string& name) {
  DW_RETURN_IF_ERROR(unlocked());
  auto before = snapshot(graph_, id);
  if (!before.ok()) return before.status();
  if (!before->params.count(name)) return Status();
  DW_RETURN_IF_ERROR(graph_.resetParam(id, name));
  return recordNodeEdit(*before, tr("Reset %1").arg(QString::fromStdString(name)));
}

Status GraphModel::rename(NodeId id, const std::string& name) {
  DW_RETURN_IF_ERROR(unlocked());
  auto before = snapshot(graph_, id);
  if (!before.ok()) return before.status();
  if (before->name == name) return Status();
  DW_RETURN_IF_ERROR(graph_.rename(id, name));
  return recordNodeEdit(*before, tr("Rename to %1").arg(QString::fromStdString(name)));
}

Status GraphModel::setSpecifiedOutputsName(NodeId id, std::vector<std::string> names) {
  DW_RETURN_IF_ERROR(unlocked());
  auto before = snapshot(graph_, id);
  if (!before.ok()) return before.status();
  if (before->specifiedOutputsName == names) return Status();
  DW_RETURN_IF_ERROR(graph_.setSpecifiedOutputsName(id, std::move(names)));
  return recordNodeEdit(*before, tr("Set specified_outputs_name"));
}

Status GraphModel::setLdaCoeff(NodeId id, double coeff) {
  DW_RETURN_IF_ERROR(unlocked());
  auto before = snapshot(graph_, id);
  if (!before.ok()) return before.status();
  if (before->ldaCoeff == coeff) return Status();
  DW_RETURN_IF_ERROR(graph_.setLdaCoeff(id, coeff));
  return recordNodeEdit(*before, tr("Set lda coeff"));
}

Status GraphModel::applyNodeStates(const std::vector<Node>& after, const QString& text) {
  for (const auto& n : after)
    if (!graph_.node(n.id)) return Status::error("no node #" + std::to_string(n.id));
  undo_.beginMacro(text);
  for (const auto& n : after) {
    const Node before = *graph_.node(n.id);
    applyNodeState(graph_, n);
    undo_.push(new NodeStateCommand(this, before, *graph_.node(n.id), text));
  }
  undo_.endMacro();
  return Status();
}

void GraphModel::setSection(const std::string& name, const std::string& json) {
  ModelInfo info = graph_.info();
  if (info.sections[name] == json) return;
  info.sections[name] = json;
  graph_.setInfo(std::move(info));
}

std::string GraphModel::copyFragment(const std::vector<NodeId>& ids) const {
  Graph frag(graph_.catalogue());
  frag.setInfo(graph_.info());
  std::set<NodeId> keep;
  for (NodeId id : ids)
    if (const Node* n = graph_.node(id); n && frag.insertNode(*n).ok()) keep.insert(id);
  for (const auto& l : graph_.links())
    if (keep.count(l.from.node) && keep.count(l.to.node)) (void)frag.addLink(l, false);
  return projectToJsonText(frag);
}

Result<std::vector<NodeId>> GraphModel::pasteFragment(const std::string& json, Position offset) {
  DW_RETURN_IF_ERROR(unlocked());
  auto frag = projectFromJsonText(json, "<clipboard>");
  if (!frag.ok()) return frag.status();
  std::set<std::string> used;
  for (const auto& [id, n] : graph_.nodes()) used.insert(n.name);
  std::map<NodeId, NodeId> fresh;
  std::vector<Node> nodes;
  NodeId next = graph_.nextId();
  for (const auto& [id, src] : frag->nodes()) {
    Node n = src;
    n.id = next++;
    fresh[id] = n.id;
    n.position = {n.position.x + offset.x, n.position.y + offset.y};
    // Tensor names are unique in a model: a pasted "fc1.weight" becomes "fc1.weight_1".
    if (!n.name.empty() && used.count(n.name)) {
      std::string base = n.name;
      for (int i = 1; used.count(n.name); ++i) n.name = base + "_" + std::to_string(i);
    }
    used.insert(n.name);
    n.specifiedOutputsName.clear();
    nodes.push_back(std::move(n));
  }
  std::vector<Link> links;
  for (const auto& l : frag->links())
    links.push_back({{fresh[l.from.node], l.from.port}, {fresh[l.to.node], l.to.port}});
  std::vector<NodeId> added;
  for (const auto& n : nodes) {
    Status st = graph_.insertNode(n);
    if (!st.ok()) {
      for (NodeId id : added) (void)graph_.removeNode(id);
      return st;
    }
    added.push_back(n.id);
  }
  for (const auto& l : links) (void)graph_.addLink(l, false);
  placeNew(added);
  for (auto& n : nodes) n.position = graph_.node(n.id)->position;
  undo_.push(new FragmentCommand(this, std::move(nodes), std::move(links), true,
                                 tr("Paste %n node(s)", "", int(added.size()))));
  return added;
}

QString GraphModel::problemText(NodeId id) const {
  auto it = nodeProblems_.find(id);
  return it == nodeProblems_.end() ? QString() : it->second;
}

QString GraphModel::linkLabel(const Link& link) const {
  if (link.isGraphLink()) return {};
  auto it = portTypes_.find(link.from);
  return it == portTypes_.end() ? QString() : it->second;
}

namespace {

const QRegularExpression& nodeRef() {
  static const QRegularExpression kNodeRef(QStringLiteral("\\(#(\\d+)\\)"));
  return kNodeRef;
}

// The node an export error names ("Gemm 'fc1' (#3): ..."), or 0.
NodeId nodeNamedIn(const std::string& message) {
  auto match = nodeRef().match(QString::fromStdString(message));
  return match.hasMatch() ? match.captured(1).toLongLong() : 0;
}

// Every tensor of a lowered model with its inferred type, by tensor name.
void collectTypes(const onnx::ModelProto& m, std::map<std::string, QString>& types) {
  const auto& g = m.graph();
  for (const auto& vi : g.input()) types[vi.name()] = QString::fromStdString(formatType(vi.type()));
  for (const auto& vi : g.value_info())
    types[vi.name()] = QString::fromStdString(formatType(vi.type()));
  for (const auto& vi : g.output())
    types[vi.name()] = QString::fromStdString(formatType(vi.type()));
  for (const auto& init : g.initializer()) {
    if (types.count(init.name())) continue;
    QString dims;
    for (int i = 0; i < init.dims_size(); ++i)
      dims += (i ? "," : "") + QString::number(init.dims(i));
    types[init.name()] = QString::fromStdString(dtypeName(init.data_type())) + "[" + dims + "]";
  }
}

// Resolves tensor names to the output ports of `g` that write them; ports already known keep
// their type.
void typesToPorts(const Graph& g, const std::map<std::string, QString>& types,
                  std::map<PortRef, QString>& ports) {
  if (types.empty()) return;
  for (const auto& [id, n] : g.nodes())
    for (int p = 0; p < g.outputPortCount(id); ++p) {
      auto it = types.find(g.tensorName({id, p}));
      if (it != types.end()) ports.emplace(PortRef{id, p}, it->second);
    }
}

std::set<std::string> modelsOf(const Graph& g) {
  std::set<std::string> models;
  for (const auto& [id, n] : g.nodes()) models.insert(g.modelOf(id));
  return models;
}

}  // namespace

void GraphModel::validateNow() {
  validateTimer_.stop();
  problems_ = graph_.validate();
  hints_ = graph_.hints();
  portTypes_.clear();
  if (problems_.empty() && !graph_.nodes().empty()) {
    // Each model on the canvas is lowered on its own; the checker and shape inference find what
    // the graph model alone cannot (shape mismatches, opset rules).
    std::map<std::string, QString> types;
    // A lowering error names its node; the problem goes there (or to the graph).
    auto problem = [&](const std::string& message) {
      const NodeId id = nodeNamedIn(message);
      problems_.push_back({graph_.node(id) ? id : 0, message});
    };
    for (const auto& model : modelsOf(graph_)) {
      ExportOptions opt;
      opt.model = model;
      opt.check = CheckLevel::Full;
      opt.inferShapes = true;
      auto m = exportOnnx(graph_, opt);
      if (!m.ok()) {
        problem(m.message());
        continue;
      }
      collectTypes(*m, types);
      // The losses and metrics, as training lowers them: a target that does not fit its loss
      // shows here, not only when Train Step runs.
      if (Status st = checkTrainingLowering(graph_, model); !st.ok()) problem(st.message());
    }
    typesToPorts(graph_, types, portTypes_);
  }
  if (!problems_.empty()) inferTypesAroundProblems();
  nodeProblems_.clear();
  for (const auto& p : problems_) {
    if (!p.node) continue;
    QString& text = nodeProblems_[p.node];
    text += (text.isEmpty() ? "" : "\n") + QString::fromStdString(p.message);
  }
  emit validated();
}

void GraphModel::inferTypesAroundProblems() {
  std::set<NodeId> drop;
  for (const auto& p : problems_)
    if (graph_.node(p.node)) drop.insert(p.node);
  // A problem that names no node cannot be cut out of the graph.
  if (drop.empty()) return;
  // A copy without observers: the widgets must not hear about the pruning.
  Graph part(graph_.catalogue());
  part.setInfo(graph_.info());
  for (const auto& [id, n] : graph_.nodes()) (void)part.insertNode(n);
  for (const auto& l : graph_.links()) (void)part.addLink(l, false);
  // A few rounds: cutting nodes out can leave, or the checker can find, new problems.
  for (int round = 0; round < 6 && !drop.empty(); ++round) {
    // Whatever a problem feeds has no type to infer either.
    std::vector<NodeId> todo(drop.begin(), drop.end());
    while (!todo.empty()) {
      const NodeId id = todo.back();
      todo.pop_back();
      for (int p = 0; p < part.outputPortCount(id); ++p)
        for (const auto& l : part.outputLinks(id, p))
          if (drop.insert(l.to.node).second) todo.push_back(l.to.node);
    }
    for (NodeId id : drop) (void)part.removeNode(id);
    drop.clear();
    if (part.nodes().empty()) return;
    for (const auto& p : part.validate()) {
      if (!part.node(p.node)) return;
      drop.insert(p.node);
    }
    if (!drop.empty()) continue;
    std::map<std::string, QString> types;
    for (const auto& model : modelsOf(part)) {
      ExportOptions opt;
      opt.model = model;
      opt.check = CheckLevel::None;  // only the types are wanted, not a verdict
      opt.inferShapes = true;
      auto m = exportOnnx(part, opt);
      if (m.ok()) {
        collectTypes(*m, types);
      } else if (const NodeId id = nodeNamedIn(m.message()); part.node(id)) {
        drop.insert(id);
      }
    }
    typesToPorts(part, types, portTypes_);
  }
}

}  // namespace dw::studio
