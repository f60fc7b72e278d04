// The canvas view: wheel zoom around the cursor, pan with the middle button or space-drag,
// rubber-band selection, a grid background, fit to view, and drops from the palette.
#pragma once

#include <QGraphicsView>

namespace dw::studio {

class GraphScene;

// The MIME type the palette puts on a drag: "domain::type".
inline constexpr const char* kNodeMimeType = "application/x-deepwire-node";

class GraphView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit GraphView(GraphScene* scene, QWidget* parent = nullptr);
  GraphScene* graphScene() const { return scene_; }
  // The smallest zoom at which the canvas's text stays readable (port names about 9 px).
  static constexpr qreal kReadableZoom = 0.75;
  // Shows the whole graph. With `minZoom`, never smaller than that: a graph too big to show whole
  // at it shows its start (top left, where data enters); the rest is a pan away.
  void fitToView(qreal minZoom = 0);
  void zoomBy(qreal factor);
  qreal zoom() const { return transform().m11(); }
  // Where a node created without a drop position goes: the visible centre, snapped.
  QPointF placementPoint() const;

 signals:
  // A palette entry was dropped at `scenePos`.
  void nodeDropped(const QString& domain, const QString& type, QPointF scenePos);

 protected:
  void drawBackground(QPainter* p, const QRectF& rect) override;
  void wheelEvent(QWheelEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;
  void keyReleaseEvent(QKeyEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dragMoveEvent(QDragMoveEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  GraphScene* scene_;
  bool spaceHeld_ = false;
  bool panning_ = false;
  QPoint panLast_;
};

}  // namespace dw::studio
