#include "app/studio/graph_view.h"

#include <QDragEnterEvent>
#include <QMimeData>
#include <QScrollBar>
#include <QWheelEvent>
#include <cmath>

#include "app/studio/graph_scene.h"
#include "app/studio/style.h"

namespace dw::studio {

GraphView::GraphView(GraphScene* scene, QWidget* parent)
    : QGraphicsView(scene, parent), scene_(scene) {
  setRenderHints(QPainter::Antialiasing | QPainter::TextAntialiasing);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setDragMode(QGraphicsView::RubberBandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setResizeAnchor(QGraphicsView::AnchorViewCenter);
  setAcceptDrops(true);
  setFocusPolicy(Qt::StrongFocus);
  setOptimizationFlags(QGraphicsView::DontSavePainterState);
  setBackgroundBrush(style::canvas());
  // Panning is by mouse (middle button, space-drag); scroll bars would only take room.
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // Paste goes where the pointer is, which needs moves without a button held.
  viewport()->setMouseTracking(true);
}

void GraphView::drawBackground(QPainter* p, const QRectF& rect) {
  p->fillRect(rect, style::canvas());
  const qreal g = 20;
  if (zoom() < 0.35) return;  // a dense grid only adds noise when zoomed far out
  const qreal left = std::floor(rect.left() / g) * g, top = std::floor(rect.top() / g) * g;
  QVector<QLineF> minor, major;
  for (qreal x = left; x < rect.right(); x += g)
    (std::fmod(std::abs(x), g * 5) < 0.5 ? major : minor)
        .append(QLineF(x, rect.top(), x, rect.bottom()));
  for (qreal y = top; y < rect.bottom(); y += g)
    (std::fmod(std::abs(y), g * 5) < 0.5 ? major : minor)
        .append(QLineF(rect.left(), y, rect.right(), y));
  p->setPen(QPen(style::gridMinor(), 0));
  p->drawLines(minor);
  p->setPen(QPen(style::gridMajor(), 0));
  p->drawLines(major);
}

void GraphView::zoomBy(qreal factor) {
  pendingFit_.reset();
  const qreal z = zoom() * factor;
  if (z < 0.05 || z > 4) return;
  scale(factor, factor);
}

void GraphView::wheelEvent(QWheelEvent* e) {
  // AnchorUnderMouse keeps the point under the cursor fixed while scaling.
  const qreal steps = e->angleDelta().y() / 120.0;
  if (steps == 0) return;
  zoomBy(std::pow(1.15, steps));
  e->accept();
}

void GraphView::mousePressEvent(QMouseEvent* e) {
  pendingFit_.reset();  // the user works on this view now: a resize must not move it
  // The canvas takes the keyboard on any click, so that a Parameters field commits and gives up
  // Ctrl+Z: when a click deselects the node, the field's panel is rebuilt under it and the
  // focus was otherwise left nowhere.
  if (!hasFocus()) setFocus(Qt::MouseFocusReason);
  if (e->button() == Qt::MiddleButton || (spaceHeld_ && e->button() == Qt::LeftButton)) {
    panning_ = true;
    panLast_ = e->position().toPoint();
    viewport()->setCursor(Qt::ClosedHandCursor);
    e->accept();
    return;
  }
  QGraphicsView::mousePressEvent(e);
}

void GraphView::mouseMoveEvent(QMouseEvent* e) {
  pointer_ = e->position().toPoint();
  if (panning_) {
    const QPoint d = e->position().toPoint() - panLast_;
    panLast_ = e->position().toPoint();
    horizontalScrollBar()->setValue(horizontalScrollBar()->value() - d.x());
    verticalScrollBar()->setValue(verticalScrollBar()->value() - d.y());
    e->accept();
    return;
  }
  QGraphicsView::mouseMoveEvent(e);
}

void GraphView::mouseReleaseEvent(QMouseEvent* e) {
  if (panning_ && (e->button() == Qt::MiddleButton || e->button() == Qt::LeftButton)) {
    panning_ = false;
    viewport()->setCursor(spaceHeld_ ? Qt::OpenHandCursor : Qt::ArrowCursor);
    e->accept();
    return;
  }
  QGraphicsView::mouseReleaseEvent(e);
}

void GraphView::keyPressEvent(QKeyEvent* e) {
  if (e->key() == Qt::Key_Space && !e->isAutoRepeat()) {
    spaceHeld_ = true;
    viewport()->setCursor(Qt::OpenHandCursor);
    e->accept();
    return;
  }
  QGraphicsView::keyPressEvent(e);
}

void GraphView::keyReleaseEvent(QKeyEvent* e) {
  if (e->key() == Qt::Key_Space && !e->isAutoRepeat()) {
    spaceHeld_ = false;
    panning_ = false;
    viewport()->setCursor(Qt::ArrowCursor);
    e->accept();
    return;
  }
  QGraphicsView::keyReleaseEvent(e);
}

void GraphView::fitToView(qreal minZoom) {
  pendingFit_ = minZoom;
  // The nodes' extent: a link looping back from the far end of a graph swings out past every
  // node, and a view at a readable zoom anchored on the links' corner showed an empty canvas (an
  // imported transformer opened on nothing).
  QRectF r;
  for (QGraphicsItem* item : scene_->items())
    if (item->type() == NodeItem::Type) r = r.united(item->sceneBoundingRect());
  if (r.isEmpty()) r = scene_->itemsBoundingRect();
  if (r.isEmpty()) {
    resetTransform();
    centerOn(0, 0);
    return;
  }
  r.adjust(-40, -40, 40, 40);
  fitInView(r, Qt::KeepAspectRatio);
  // Small graphs would be blown up past readable proportions; large ones may shrink.
  if (zoom() > 1.25) {
    const qreal f = 1.25 / zoom();
    scale(f, f);
  }
  if (zoom() < minZoom) {
    // Fitted whole, an example's text was 6 px high and unreadable.
    const qreal f = minZoom / zoom();
    scale(f, f);
    const QSizeF seen = mapToScene(viewport()->rect()).boundingRect().size();
    centerOn(seen.width() >= r.width() ? r.center().x() : r.left() + seen.width() / 2,
             seen.height() >= r.height() ? r.center().y() : r.top() + seen.height() / 2);
    return;
  }
  centerOn(r.center());
}

void GraphView::showItem(const QGraphicsItem* item) {
  pendingFit_.reset();
  // Zoomed out past reading (a large model fitted whole), the node found was a speck that
  // said nothing: it comes in to the readable zoom. A closer zoom is the user's and stays.
  if (zoom() < kReadableZoom) {
    const qreal f = kReadableZoom / zoom();
    scale(f, f);
  }
  centerOn(item);
}

std::optional<QPointF> GraphView::pointerScenePos() const {
  if (!pointer_ || !viewport()->rect().contains(*pointer_)) return std::nullopt;
  return mapToScene(*pointer_);
}

bool GraphView::viewportEvent(QEvent* e) {
  if (e->type() == QEvent::Leave) pointer_.reset();
  return QGraphicsView::viewportEvent(e);
}

void GraphView::resizeEvent(QResizeEvent* e) {
  QGraphicsView::resizeEvent(e);
  if (const std::optional<qreal> fit = pendingFit_) fitToView(*fit);
}

QPointF GraphView::placementPoint() const {
  return scene_->snapped(mapToScene(viewport()->rect().center()) - QPointF(75, 30));
}

void GraphView::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasFormat(kNodeMimeType))
    e->acceptProposedAction();
  else
    QGraphicsView::dragEnterEvent(e);
}

void GraphView::dragMoveEvent(QDragMoveEvent* e) {
  if (e->mimeData()->hasFormat(kNodeMimeType))
    e->acceptProposedAction();
  else
    QGraphicsView::dragMoveEvent(e);
}

void GraphView::dropEvent(QDropEvent* e) {
  if (!e->mimeData()->hasFormat(kNodeMimeType)) return QGraphicsView::dropEvent(e);
  const QString key = QString::fromUtf8(e->mimeData()->data(kNodeMimeType));
  const int sep = key.indexOf(QStringLiteral("::"));
  if (sep < 0) return;
  e->acceptProposedAction();
  emit nodeDropped(key.left(sep), key.mid(sep + 2),
                   scene_->snapped(mapToScene(e->position().toPoint())));
}

}  // namespace dw::studio
