// The canvas scene: one NodeItem per node and one LinkItem per link, kept in step with the
// GraphModel's signals. Items hold only ids and read everything they draw from the model; the
// scene's only state is presentation (which item shows which id, a link being dragged).
#pragma once

#include <QGraphicsPathItem>
#include <QGraphicsScene>
#include <QStringList>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "app/studio/graph_model.h"

namespace dw::studio {

class GraphScene;

struct PortHit {
  bool output = false;
  int port = 0;  // tensor port index, or dw::kGraphPort
};

class NodeItem : public QGraphicsItem {
 public:
  // Wider nodes are elided (full names in the tooltips): the automatic layout places columns
  // this far apart, and long imported tensor names would otherwise push nodes over each other.
  static constexpr qreal kMaxWidth = 280;

  NodeItem(GraphScene* scene, dw::NodeId id);
  dw::NodeId id() const { return id_; }
  // Re-reads the model: ports, labels, size, problem state.
  void refresh();
  QPointF portScenePos(bool output, int port) const;
  std::optional<PortHit> portAt(QPointF local) const;
  QRectF boundingRect() const override;
  void paint(QPainter* p, const QStyleOptionGraphicsItem* opt, QWidget* w) override;
  enum { Type = UserType + 1 };
  int type() const override { return Type; }

 protected:
  QVariant itemChange(GraphicsItemChange change, const QVariant& value) override;
  void mousePressEvent(QGraphicsSceneMouseEvent* e) override;
  void hoverMoveEvent(QGraphicsSceneHoverEvent* e) override;
  void hoverLeaveEvent(QGraphicsSceneHoverEvent* e) override;

 private:
  QPointF portPos(bool output, int port) const;
  QString portLabel(bool output, int port) const;
  GraphScene* scene_;
  dw::NodeId id_;
  // Layout cached from the last refresh(); recomputed from the model, never edited.
  qreal width_ = 160, height_ = 60;
  int inputs_ = 0, outputs_ = 0;
  // The texts as drawn: elided to fit width_.
  QString title_, name_, detail_;
  QStringList inLabels_, outLabels_;
  std::optional<PortHit> hover_;
};

class LinkItem : public QGraphicsPathItem {
 public:
  LinkItem(GraphScene* scene, const dw::Link& link);
  const dw::Link& link() const { return link_; }
  void updatePath();
  void paint(QPainter* p, const QStyleOptionGraphicsItem* opt, QWidget* w) override;
  QRectF boundingRect() const override;
  QPainterPath shape() const override;
  // The shape label as drawn ("" when the type is unknown); the full text is in the tooltip.
  QString label() const { return label_; }
  QRectF labelRect() const;  // in scene coordinates; empty without a label
  enum { Type = UserType + 2 };
  int type() const override { return Type; }

 private:
  GraphScene* scene_;
  dw::Link link_;
  QString label_;
  QString fullLabel_;  // the label before eliding: with the path, what the label was placed for
  QRectF labelBox_;    // item coordinates
  // Where the curve is when the label had to move clear of the nodes beside a short link: a thin
  // leader joins them. None when the label sits on the curve.
  std::optional<QPointF> leaderTo_;
};

class GraphScene : public QGraphicsScene {
  Q_OBJECT
 public:
  static constexpr qreal kGrid = 20;

  GraphScene(GraphModel* model, QObject* parent = nullptr);
  GraphModel* model() const { return model_; }

  NodeItem* nodeItem(dw::NodeId id) const;
  LinkItem* linkItem(const dw::Link& link) const;
  std::vector<dw::NodeId> selectedNodes() const;
  std::vector<dw::Link> selectedLinks() const;
  void selectOnly(const std::vector<dw::NodeId>& ids);

  bool snapToGrid() const { return snap_; }
  void setSnapToGrid(bool on) { snap_ = on; }
  QPointF snapped(QPointF p) const;
  // True while items are being placed where the model says (no snapping then).
  bool applyingModel() const { return applyingModel_; }

  // Connects two ports through the model; a refusal goes to the status bar. Either end may be
  // the output.
  bool tryConnect(dw::NodeId a, PortHit pa, dw::NodeId b, PortHit pb);
  void beginLinkDrag(dw::NodeId node, PortHit port, QPointF scenePos);
  // Keeps the links of a node glued to it while the user drags it (before the move is recorded).
  void nodeGeometryChanged(dw::NodeId id);
  // Records the positions of items moved by the mouse as one undoable move.
  bool commitMoves();  // whether any selected node moved
  // Whether a link label at `box` (scene coordinates) would cover {a node, another label}.
  std::pair<bool, bool> labelSpotTaken(const QRectF& box, const LinkItem* self) const;
  void labelPlaced(const QRectF& box);
  // The shift (in whole grid steps, nearest first) that puts the nodes `ids` as a group clear
  // of every other node; nullopt when there is no room nearby.
  std::optional<QPointF> freeSpotShift(const std::vector<dw::NodeId>& ids) const;

 signals:
  void statusMessage(const QString& text);

 protected:
  void mouseMoveEvent(QGraphicsSceneMouseEvent* e) override;
  void mouseReleaseEvent(QGraphicsSceneMouseEvent* e) override;

 private:
  void rebuild();
  void addNodeItem(dw::NodeId id);
  void addLinkItem(const dw::Link& link);
  void refreshLinksOf(dw::NodeId id);
  // Node and label rectangles bucketed by cell, while every link's label is placed at once.
  struct Obstacles {
    static constexpr qreal kCell = 256;
    std::map<std::pair<int, int>, std::vector<std::pair<QRectF, bool>>> cells;  // rect, is node
    void add(const QRectF& r, bool node);
    std::pair<bool, bool> taken(const QRectF& r) const;
  };
  GraphModel* model_;
  std::unique_ptr<Obstacles> obstacles_;
  std::map<dw::NodeId, NodeItem*> nodes_;
  std::map<dw::Link, LinkItem*> links_;
  bool snap_ = true;
  bool applyingModel_ = false;
  // A link being dragged from a port.
  QGraphicsPathItem* dragPath_ = nullptr;
  dw::NodeId dragNode_ = 0;
  PortHit dragPort_;
};

}  // namespace dw::studio
