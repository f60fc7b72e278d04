// The studio's adapter over the Qt-free document (graphs/graph.h), in the manner of QtNodes'
// AbstractGraphModel: it owns the dw::Graph, turns GraphObserver callbacks into Qt signals, and is
// the only way widgets change the document. Every edit runs on the graph first (so a refused edit
// reports the graph's own message and leaves no trace) and is then recorded as a QUndoCommand.
// The scene and panels keep no graph data: they ask this model.
//
// Validation is live but debounced: after a burst of edits the model re-validates, lowers the
// graph to ONNX with shape inference, and publishes problems per node and the inferred type of
// every tensor (the links' labels).
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <QUndoStack>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "graphs/graph.h"

namespace dw::studio {

// Brings a node's editable fields to `target`'s values through the graph's own edit calls, so
// observers hear every change.
void applyNodeState(dw::Graph& g, const dw::Node& target);

class GraphModel : public QObject {
  Q_OBJECT
 public:
  explicit GraphModel(QObject* parent = nullptr);
  ~GraphModel() override;

  const dw::Graph& graph() const { return graph_; }
  QUndoStack* undoStack() { return &undo_; }

  // Replaces the document (New, Open, Import); clears undo history.
  void reset(dw::Graph graph);

  // Where freshly created or pasted nodes go: given their ids (already in the graph, at the
  // requested places), the shift that moves them all onto free space, or nullopt to leave them.
  // The canvas installs it, since only the canvas knows how big a node is drawn.
  using Placer = std::function<std::optional<dw::Position>(const std::vector<dw::NodeId>&)>;
  void setPlacer(Placer placer) { placer_ = std::move(placer); }

  // While `reason` is set (a training run reads the model), every edit but a move is refused
  // with it, and lockChanged tells the undo and redo actions to wait: a run keeps training the
  // model it started with, so an edit meanwhile would be trained past and its weights lost.
  void setLocked(const QString& reason);
  bool locked() const { return !locked_.isEmpty(); }
  const QString& lockReason() const { return locked_; }

  // --- Edits: each is one undo step; a refused edit returns the reason and changes nothing. ---
  // Layers, losses and metrics get a unique snake_case name after their type ("dense_1",
  // "sparse_categorical_accuracy"): that name is what training reports and charts show.
  dw::Result<dw::NodeId> createNode(const std::string& domain, const std::string& type,
                                    dw::Position pos);
  dw::Status removeItems(const std::vector<dw::NodeId>& nodes, const std::vector<dw::Link>& links);
  dw::Status moveNodes(const std::map<dw::NodeId, dw::Position>& to);
  // An input that is already connected gives up its old link: the swap is one undo step, and a
  // refused new link leaves the old one in place.
  dw::Status connectPorts(const dw::Link& link);
  dw::Status disconnect(const dw::Link& link);
  // `node` (whose first input and first output are free) into `link`: the link's source feeds
  // the node's input 0 and its output 0 feeds the link's target, as one undo step; refused
  // links leave the graph as it was.
  dw::Status insertIntoLink(dw::NodeId node, const dw::Link& link);
  dw::Status setParam(dw::NodeId id, const std::string& name, const dw::Param& value);
  dw::Status resetParam(dw::NodeId id, const std::string& name);
  dw::Status rename(dw::NodeId id, const std::string& name);
  dw::Status setSpecifiedOutputsName(dw::NodeId id, std::vector<std::string> names);
  dw::Status setLdaCoeff(dw::NodeId id, double coeff);

  // Brings several nodes to new states (params, names, ...) as one undo step; used to write
  // trained weights back into Initializer nodes.
  dw::Status applyNodeStates(const std::vector<dw::Node>& after, const QString& text);
  // A project section the studio edits outside the graph (the Training dock's settings). Not an
  // undo step: these are settings, not edits of the model.
  void setSection(const std::string& name, const std::string& json);

  // Clipboard fragments: the selected nodes and the links among them, as project JSON.
  std::string copyFragment(const std::vector<dw::NodeId>& ids) const;
  // Inserts a fragment with fresh ids, shifted by `offset`; tensor names made unique.
  dw::Result<std::vector<dw::NodeId>> pasteFragment(const std::string& json, dw::Position offset);

  // --- Validation results (refreshed after edits; call validateNow() to force) ---
  void validateNow();
  const std::vector<dw::Problem>& problems() const { return problems_; }
  // Advice that blocks nothing (Graph::hints), refreshed with the problems.
  const std::vector<dw::Problem>& hints() const { return hints_; }
  QString problemText(dw::NodeId id) const;  // "" when the node is fine
  // "float[N,256]" for a tensor link once its shape is inferred, else "". Known also while other
  // parts of the graph have problems: only what the problems feed stays unknown.
  QString linkLabel(const dw::Link& link) const;

 signals:
  void nodeAdded(qint64 id);
  void nodeRemoved(qint64 id);
  void nodeChanged(qint64 id);
  void nodeMoved(qint64 id);
  void linkAdded(const dw::Link& link);
  void linkRemoved(const dw::Link& link);
  void modelReset();
  void validated();  // problems() and linkLabel() changed
  // createNode raised the graph's opset of `domain` from `from` to `to` for a node of `type`.
  void opsetRaised(const QString& type, const QString& domain, int from, int to);
  void lockChanged(bool locked);

 private:
  class Relay;  // the GraphObserver that re-emits the graph's callbacks as signals
  friend class Relay;
  friend class FragmentCommand;
  friend class MoveCommand;
  friend class InfoCommand;
  friend class NodeStateCommand;
  dw::Graph& mutableGraph() { return graph_; }
  void scheduleValidation();
  dw::Status unlocked() const;
  // Records an edit already applied to the graph, from the node's state `before` it.
  dw::Status recordNodeEdit(const dw::Node& before, const QString& text);
  // Moves just-inserted nodes where the placer says, before their undo command is recorded.
  void placeNew(const std::vector<dw::NodeId>& ids);
  // Fills portTypes_ from the part of the graph upstream of every problem.
  void inferTypesAroundProblems();

  dw::Graph graph_;
  std::unique_ptr<Relay> relay_;
  QUndoStack undo_;
  QTimer validateTimer_;
  std::vector<dw::Problem> hints_;
  std::vector<dw::Problem> problems_;
  std::map<dw::NodeId, QString> nodeProblems_;
  // The inferred type of each tensor output port.
  std::map<dw::PortRef, QString> portTypes_;
  Placer placer_;
  QString locked_;
};

}  // namespace dw::studio
