// The canvas view: wheel zoom around the cursor, pan with the middle button or space-drag,
// rubber-band selection, a grid background, fit to view, and drops from the palette.
#pragma once

#include <QGraphicsView>
#include <optional>

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
  // at it shows its start (top left, where data enters); the rest is a pan away. The fit is
  // redone when the view changes size before the user zooms, pans or clicks (a file opened at
  // start-up is fitted before the docks have their sizes).
  void fitToView(qreal minZoom = 0);
  // Centres `item` (Find, a problem clicked), zooming in to kReadableZoom where the view is
  // further out, and otherwise keeping the zoom.
  void showItem(const QGraphicsItem* item);
  // The pointer's place on the canvas, or nothing when it is not over the canvas.
  std::optional<QPointF> pointerScenePos() const;
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
  bool viewportEvent(QEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;

 private:
  GraphScene* scene_;
  bool spaceHeld_ = false;
  bool panning_ = false;
  QPoint panLast_;
  std::optional<QPoint> pointer_;    // over the viewport, in its coordinates
  std::optional<qreal> pendingFit_;  // fitToView's minZoom while a resize should refit
};

}  // namespace dw::studio
