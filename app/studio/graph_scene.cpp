#include "app/studio/graph_scene.h"

#include <QFontMetricsF>
#include <QGraphicsSceneHoverEvent>
#include <QGraphicsSceneMouseEvent>
#include <QPainter>
#include <QPointer>
#include <QStyleOptionGraphicsItem>
#include <algorithm>
#include <cmath>
#include <set>

#include "app/studio/style.h"

namespace dw::studio {

namespace {
constexpr qreal kRow = 22;            // one port row
constexpr qreal kPortR = 5.5;         // port radius
constexpr qreal kTitleH = 42;         // type + name
constexpr qreal kDetailH = 16;        // a third header line for inputs, outputs and initializers
constexpr qreal kGraphCaptionH = 13;  // the "graph" captions over the Graphs in / out ports
constexpr qreal kMaxLinkLabel = 170;  // longer shape labels are elided (full in the tooltip)

bool hasDetail(const NodeSpec* s) {
  return s && s->kind != NodeKind::Op && s->kind != NodeKind::Layer;
}

QString detailLine(const Graph& g, const Node& n, const NodeSpec* s) {
  auto str = [&](const char* name) {
    auto p = g.param(n.id, name);
    return p ? QString::fromStdString(p->toDisplay()) : QString();
  };
  auto plain = [&](const char* name) {
    auto p = g.param(n.id, name);
    return p && p->type == ParamType::String ? QString::fromStdString(p->asString()) : QString();
  };
  switch (s->kind) {
    case NodeKind::GraphInput:
      return plain("type");
    case NodeKind::GraphOutput: {
      QString t = plain("type");
      return t.isEmpty() ? QObject::tr("type inferred") : t;
    }
    case NodeKind::Initializer: {
      // Training updates float32 initializers only: the status of others would mislead.
      const QString dtype = plain("dtype");
      const QString line = dtype + str("shape");
      return dtype == QLatin1String("float") || dtype == QLatin1String("float32")
                 ? line + QStringLiteral(" · ") + plain("status")
                 : line;
    }
    default:
      return {};
  }
}
}  // namespace

// ---------------------------------------------------------------------------- NodeItem

NodeItem::NodeItem(GraphScene* scene, NodeId id) : scene_(scene), id_(id) {
  setFlags(ItemIsMovable | ItemIsSelectable | ItemSendsGeometryChanges);
  setAcceptHoverEvents(true);
  setCacheMode(DeviceCoordinateCache);
  refresh();
}

void NodeItem::refresh() {
  const Graph& g = scene_->model()->graph();
  const Node* n = g.node(id_);
  const NodeSpec* s = n ? g.spec(*n) : nullptr;
  if (!n || !s) return;
  inputs_ = g.inputPortCount(id_);
  outputs_ = g.outputPortCount(id_);
  QFontMetricsF title(style::titleFont()), port(style::portFont()), body(style::bodyFont());
  // Optional ports are drawn in italics with a "?": measure them that way.
  QFont italic = style::portFont();
  italic.setItalic(true);
  QFontMetricsF portItalic(italic);
  auto isOptional = [&](bool out, int i) {
    const PortSpec* ps = out ? s->outputPort(i) : s->inputPort(i);
    return ps && ps->option == PortOption::Optional;
  };
  QStringList in, out;
  qreal inW = 0, outW = 0;
  for (bool o : {false, true})
    for (int i = 0, count = o ? outputs_ : inputs_; i < count; ++i) {
      const bool optional = isOptional(o, i);
      QString label = portLabel(o, i) + (optional ? QStringLiteral("?") : QString());
      qreal& w = o ? outW : inW;
      w = std::max(w, (optional ? portItalic : port).horizontalAdvance(label) + 4);
      (o ? out : in).push_back(std::move(label));
    }
  const QString type = QString::fromStdString(n->type), name = QString::fromStdString(n->name);
  const QString detail = hasDetail(s) ? detailLine(g, *n, s) : QString();
  qreal w = std::max({150.0, title.horizontalAdvance(type) + 48, body.horizontalAdvance(name) + 32,
                      inW + outW + 44});
  if (hasDetail(s)) w = std::max(w, body.horizontalAdvance(detail) + 32);
  w = std::min(std::ceil(w / 10) * 10, kMaxWidth);
  const qreal header = kTitleH + (hasDetail(s) ? kDetailH : 0);
  const qreal h = header + std::max({inputs_, outputs_, 1}) * kRow + 6;
  if (w != width_ || h != height_) {
    prepareGeometryChange();
    width_ = w;
    height_ = h;
  }
  // A row's two labels share the room between the ports; a side that needs less than half
  // leaves the rest to the other.
  const qreal room = width_ - 44;
  qreal inRoom = inW, outRoom = outW;
  if (inW + outW > room) {
    if (inW <= room / 2)
      outRoom = room - inW;
    else if (outW <= room / 2)
      inRoom = room - outW;
    else
      inRoom = outRoom = room / 2;
  }
  auto fit = [&](QStringList& labels, bool o, qreal roomFor) {
    for (int i = 0; i < labels.size(); ++i) {
      if (!isOptional(o, i)) {
        labels[i] = port.elidedText(labels[i], Qt::ElideMiddle, roomFor - 4);
      } else {
        labels[i].chop(1);  // keep the "?" whatever is elided
        labels[i] = portItalic.elidedText(labels[i], Qt::ElideMiddle,
                                          roomFor - 4 - portItalic.horizontalAdvance('?')) +
                    QLatin1Char('?');
      }
    }
  };
  // Eliding lays text out again: skip it for the usual node whose labels fit.
  if (inW > inRoom) fit(in, false, inRoom);
  if (outW > outRoom) fit(out, true, outRoom);
  inLabels_ = std::move(in);
  outLabels_ = std::move(out);
  const qreal text = width_ - 32;
  title_ =
      title.horizontalAdvance(type) <= text ? type : title.elidedText(type, Qt::ElideRight, text);
  name_ =
      body.horizontalAdvance(name) <= text ? name : body.elidedText(name, Qt::ElideMiddle, text);
  detail_ = body.horizontalAdvance(detail) <= text ? detail
                                                   : body.elidedText(detail, Qt::ElideRight, text);

  // While a port is hovered the tooltip is the port's; validation must not take it away.
  if (hover_) {
    update();
    return;
  }
  QString problem = scene_->model()->problemText(id_);
  if (!problem.isEmpty()) {
    setToolTip(QStringLiteral("<p style='white-space:pre-wrap'><b>%1</b></p>")
                   .arg(problem.toHtmlEscaped()));
  } else {
    QString doc = QString::fromStdString(s->doc).section(QStringLiteral("\n\n"), 0, 0);
    if (doc.size() > 400) doc = doc.left(400) + QStringLiteral("…");
    // The full type, name and detail: the node may show them elided.
    const QString named = name.isEmpty() ? QString() : QStringLiteral(" '%1'").arg(name);
    setToolTip(QStringLiteral("<p><b>%1</b>%2 · %3</p>%4<p>%5</p>")
                   .arg(type.toHtmlEscaped(), named.toHtmlEscaped(),
                        QString::fromStdString(s->domain),
                        detail.isEmpty() ? QString()
                                         : QStringLiteral("<p>%1</p>").arg(detail.toHtmlEscaped()),
                        doc.toHtmlEscaped()));
  }
  update();
}

QString NodeItem::portLabel(bool output, int port) const {
  const Graph& g = scene_->model()->graph();
  const Node* n = g.node(id_);
  const NodeSpec* s = g.spec(id_);
  if (!n || !s) return {};
  if (output && port < static_cast<int>(n->specifiedOutputsName.size()) &&
      !n->specifiedOutputsName[port].empty())
    return QString::fromStdString(n->specifiedOutputsName[port]);
  const auto& list = output ? s->outputs : s->inputs;
  const PortSpec* ps = output ? s->outputPort(port) : s->inputPort(port);
  if (!ps) return QString::number(port);
  QString label = QString::fromStdString(ps->name);
  if (ps->option == PortOption::Variadic)
    label += QStringLiteral("[%1]").arg(port - static_cast<int>(list.size()) + 1);
  return label;
}

QPointF NodeItem::portPos(bool output, int port) const {
  const NodeSpec* s = scene_->model()->graph().spec(id_);
  const qreal header = kTitleH + (hasDetail(s) ? kDetailH : 0);
  if (port == kGraphPort) return {output ? width_ : 0.0, 13.0};
  return {output ? width_ : 0.0, header + kRow * port + kRow / 2 + 2};
}

QPointF NodeItem::portScenePos(bool output, int port) const {
  return mapToScene(portPos(output, port));
}

std::optional<PortHit> NodeItem::portAt(QPointF local) const {
  auto near = [&](QPointF p) {
    return std::hypot(local.x() - p.x(), local.y() - p.y()) <= kPortR + 5;
  };
  if (near(portPos(false, kGraphPort))) return PortHit{false, kGraphPort};
  if (near(portPos(true, kGraphPort))) return PortHit{true, kGraphPort};
  for (int i = 0; i < inputs_; ++i)
    if (near(portPos(false, i))) return PortHit{false, i};
  for (int i = 0; i < outputs_; ++i)
    if (near(portPos(true, i))) return PortHit{true, i};
  return std::nullopt;
}

QRectF NodeItem::boundingRect() const {
  return QRectF(-kPortR - 4, -kGraphCaptionH - 2, width_ + 2 * kPortR + 8,
                height_ + kGraphCaptionH + 6);
}

void NodeItem::paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) {
  const GraphModel* m = scene_->model();
  const Graph& g = m->graph();
  const Node* n = g.node(id_);
  const NodeSpec* s = n ? g.spec(*n) : nullptr;
  if (!n || !s) return;
  p->setRenderHint(QPainter::Antialiasing);
  const bool bad = !m->problemText(id_).isEmpty();
  const QRectF body(0, 0, width_, height_);
  const qreal header = kTitleH + (hasDetail(s) ? kDetailH : 0);

  // Body and header.
  p->setPen(Qt::NoPen);
  p->setBrush(style::nodeBody());
  p->drawRoundedRect(body, 6, 6);
  QPainterPath head;
  head.addRoundedRect(QRectF(0, 0, width_, header), 6, 6);
  head.addRect(QRectF(0, header - 8, width_, 8));
  p->setBrush(bad ? style::errorHeader() : style::categoryColor(s->category, s->domain));
  p->drawPath(head.simplified());
  QPen border(isSelected() ? style::selection()
              : bad        ? style::error()
                           : style::nodeBorder(),
              isSelected() || bad ? 2.5 : 1.0);
  p->setPen(border);
  p->setBrush(Qt::NoBrush);
  p->drawRoundedRect(body, 6, 6);

  // Title: type, then name (or a hint that it has none), then the detail line.
  p->setPen(style::titleText());
  p->setFont(style::titleFont());
  p->drawText(QRectF(16, 3, width_ - 32, 20), Qt::AlignLeft | Qt::AlignVCenter, title_);
  p->setFont(style::bodyFont());
  p->setPen(n->name.empty() ? style::dimText() : style::nameText());
  p->drawText(QRectF(16, 21, width_ - 32, 18), Qt::AlignLeft | Qt::AlignVCenter,
              n->name.empty() ? QObject::tr("(unnamed)") : name_);
  if (hasDetail(s)) {
    p->setPen(style::dimText());
    p->drawText(QRectF(16, 38, width_ - 32, 16), Qt::AlignLeft | Qt::AlignVCenter, detail_);
  }

  // Graphs in / out: diamonds in the header corners, drawn apart from tensor ports, each
  // captioned just above the node so that it does not read as a tensor port.
  p->setFont(style::graphPortFont());
  p->setPen(style::graphPort());
  p->drawText(QRectF(-6, -kGraphCaptionH, width_ / 2, kGraphCaptionH - 1),
              Qt::AlignLeft | Qt::AlignBottom, QObject::tr("graph"));
  p->drawText(QRectF(width_ / 2, -kGraphCaptionH, width_ / 2 + 6, kGraphCaptionH - 1),
              Qt::AlignRight | Qt::AlignBottom, QObject::tr("graph"));
  for (bool out : {false, true}) {
    const QPointF c = portPos(out, kGraphPort);
    const bool linked =
        out ? !g.outputLinks(id_, kGraphPort).empty() : g.inputLink(id_, kGraphPort).has_value();
    QPolygonF diamond(
        {c + QPointF(0, -6), c + QPointF(6, 0), c + QPointF(0, 6), c + QPointF(-6, 0)});
    p->setPen(QPen(style::graphPort(), 1.5));
    p->setBrush(linked ? style::graphPort() : style::nodeBody());
    p->drawPolygon(diamond);
  }

  // Tensor ports and their labels.
  p->setFont(style::portFont());
  for (bool out : {false, true}) {
    const int count = out ? outputs_ : inputs_;
    for (int i = 0; i < count; ++i) {
      const PortSpec* ps = out ? s->outputPort(i) : s->inputPort(i);
      const QPointF c = portPos(out, i);
      const bool linked = out ? !g.outputLinks(id_, i).empty() : g.inputLink(id_, i).has_value();
      const bool optional = ps && ps->option == PortOption::Optional;
      const bool variadic = ps && ps->option == PortOption::Variadic;
      const bool hovered = hover_ && hover_->output == out && hover_->port == i;
      QPen pen(hovered ? style::selection() : style::portColor(), hovered ? 2.5 : 1.6);
      if (optional && !linked) pen.setStyle(Qt::DotLine);
      p->setPen(pen);
      p->setBrush(linked ? style::portColor() : style::nodeBody());
      if (variadic)
        p->drawRoundedRect(QRectF(c.x() - kPortR, c.y() - kPortR, 2 * kPortR, 2 * kPortR), 2, 2);
      else
        p->drawEllipse(c, kPortR, kPortR);
      QFont f = style::portFont();
      f.setItalic(optional);
      p->setFont(f);
      p->setPen(optional ? style::dimText() : style::portText());
      const QString label = out ? outLabels_.value(i) : inLabels_.value(i);
      if (out)
        // Full-width rects: the node is sized so that a row's two labels never meet.
        p->drawText(QRectF(12, c.y() - kRow / 2, width_ - 24, kRow),
                    Qt::AlignRight | Qt::AlignVCenter, label);
      else
        p->drawText(QRectF(12, c.y() - kRow / 2, width_ - 24, kRow),
                    Qt::AlignLeft | Qt::AlignVCenter, label);
    }
  }
}

QVariant NodeItem::itemChange(GraphicsItemChange change, const QVariant& value) {
  if (change == ItemPositionChange && scene_->snapToGrid() && isSelected() &&
      !scene_->applyingModel())
    return scene_->snapped(value.toPointF());
  if (change == ItemPositionHasChanged) scene_->nodeGeometryChanged(id_);
  return QGraphicsItem::itemChange(change, value);
}

void NodeItem::mousePressEvent(QGraphicsSceneMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    if (auto hit = portAt(e->pos())) {
      scene_->beginLinkDrag(id_, *hit, e->scenePos());
      e->accept();
      return;
    }
  }
  QGraphicsItem::mousePressEvent(e);
}

void NodeItem::hoverMoveEvent(QGraphicsSceneHoverEvent* e) {
  auto hit = portAt(e->pos());
  const bool changed = hit.has_value() != hover_.has_value() ||
                       (hit && (hit->output != hover_->output || hit->port != hover_->port));
  hover_ = hit;
  if (!changed) return;
  if (hit) {
    const Graph& g = scene_->model()->graph();
    const NodeSpec* s = g.spec(id_);
    QString text;
    if (hit->port == kGraphPort) {
      const std::string model = g.modelOf(id_);
      const QString modelText = model.empty()
                                    ? QObject::tr("the default model")
                                    : QObject::tr("model '%1'").arg(QString::fromStdString(model));
      text = hit->output ? QObject::tr(
                               "<b>graph</b> (Graphs out)<br>Carries model membership, not a "
                               "tensor: nodes linked from here join this node's model (%1).")
                               .arg(modelText.toHtmlEscaped())
                         : QObject::tr(
                               "<b>graph</b> (Graphs in)<br>Carries model membership, not a "
                               "tensor: link another node's Graphs out here to put this node "
                               "in that node's model. It is in %1 now.")
                               .arg(modelText.toHtmlEscaped());
    } else {
      const PortSpec* ps = hit->output ? s->outputPort(hit->port) : s->inputPort(hit->port);
      auto types = portTypes(g, {id_, hit->port}, hit->output);
      QString allowed;
      for (const auto& t : types)
        allowed += (allowed.isEmpty() ? "" : ", ") + QString::fromStdString(t);
      text = QStringLiteral("<b>%1</b>%2<br>%3<br><i>%4</i>")
                 .arg(portLabel(hit->output, hit->port).toHtmlEscaped(),
                      ps && ps->option == PortOption::Optional   ? QObject::tr(" (optional)")
                      : ps && ps->option == PortOption::Variadic ? QObject::tr(" (variadic)")
                                                                 : QString(),
                      ps ? QString::fromStdString(ps->doc).toHtmlEscaped() : QString(),
                      allowed.isEmpty() ? QObject::tr("any type") : allowed.toHtmlEscaped());
    }
    setToolTip(text);
    setCursor(Qt::CrossCursor);
  } else {
    refresh();  // back to the node's own tooltip
    unsetCursor();
  }
  update();
}

void NodeItem::hoverLeaveEvent(QGraphicsSceneHoverEvent*) {
  if (hover_) {
    hover_.reset();
    refresh();
  }
}

// ---------------------------------------------------------------------------- LinkItem

LinkItem::LinkItem(GraphScene* scene, const Link& link) : scene_(scene), link_(link) {
  setFlags(ItemIsSelectable);
  setZValue(-1);
  updatePath();
}

void LinkItem::updatePath() {
  NodeItem* a = scene_->nodeItem(link_.from.node);
  NodeItem* b = scene_->nodeItem(link_.to.node);
  if (!a || !b) return;
  const QPointF p0 = a->portScenePos(true, link_.from.port);
  const QPointF p1 = b->portScenePos(false, link_.to.port);
  const qreal dx = std::max(50.0, std::abs(p1.x() - p0.x()) * 0.5);
  QPainterPath path(p0);
  path.cubicTo(p0 + QPointF(dx, 0), p1 - QPointF(dx, 0), p1);
  const QString full = scene_->model()->linkLabel(link_);
  setToolTip(
      full.isEmpty()
          ? QString()
          : QStringLiteral("%1 : %2").arg(
                QString::fromStdString(scene_->model()->graph().tensorName(link_.from)), full));
  // Validation refreshes every link; most have not changed, and placing a label asks the scene
  // what is in the way, which is too slow to repeat for hundreds of links.
  if (path == this->path() && full == fullLabel_ && labelBox_.isNull() == full.isEmpty()) {
    if (!labelBox_.isNull()) scene_->labelPlaced(mapRectToScene(labelBox_));
    return;
  }
  prepareGeometryChange();
  fullLabel_ = full;
  leaderTo_.reset();
  if (full.isEmpty()) {
    label_.clear();
    labelBox_ = QRectF();
  } else {
    const QFontMetricsF fm(style::linkFont());
    label_ = fm.elidedText(full, Qt::ElideMiddle, kMaxLinkLabel);
    const qreal w = fm.horizontalAdvance(label_) + 12;
    auto boxAt = [&](qreal t, bool below) {
      const QPointF p = path.pointAtPercent(t);
      return QRectF(p.x() - w / 2, below ? p.y() + 3 : p.y() - 20, w, 17);
    };
    // The type sits just above the middle of the curve. Where a node or another label is in
    // the way (links that skip columns run behind nodes, beside other links), it takes the
    // nearest clear spot along the curve, above or below it; failing that, one clear of nodes.
    labelBox_ = boxAt(0.5, false);
    std::optional<QRectF> clearOfNodes;
    for (int step = 0; step <= 36; ++step) {
      const qreal t = 0.5 + (step / 2 % 2 ? 1 : -1) * 0.025 * ((step / 2 + 1) / 2);
      const QRectF box = boxAt(t, step % 2);
      const auto [node, label] = scene_->labelSpotTaken(box, this);
      if (!node && !label) {
        clearOfNodes = box;
        break;
      }
      if (!node && !clearOfNodes) clearOfNodes = box;
    }
    if (clearOfNodes) {
      labelBox_ = *clearOfNodes;
    } else {
      // Nowhere along the curve clear of nodes: a link between close nodes is shorter than its
      // label, which then covered both ports. Above (or below) the two nodes, with a leader to
      // the curve; failing that, the label cut to the room between the ports; else only the
      // tooltip.
      const QPointF mid = path.pointAtPercent(0.5);
      const QRectF nodes = a->sceneBoundingRect() | b->sceneBoundingRect();
      const QRectF above(mid.x() - w / 2, nodes.top() - 21, w, 17);
      const QRectF below(mid.x() - w / 2, nodes.bottom() + 4, w, 17);
      const qreal room = std::abs(p1.x() - p0.x()) - 2 * 9;
      auto clear = [&](const QRectF& box) {
        const auto [node, label] = scene_->labelSpotTaken(box, this);
        return !node && !label;
      };
      // Only near the curve: a label far from its link reads as another link's.
      if (mid.y() - above.bottom() <= 90 && clear(above)) {
        labelBox_ = above;
        leaderTo_ = mid;
      } else if (below.top() - mid.y() <= 90 && clear(below)) {
        labelBox_ = below;
        leaderTo_ = mid;
      } else if (room >= 40) {
        // The shape says more than the element type ("[N,784]" rather than "floa…784]").
        const qsizetype bracket = full.indexOf(QLatin1Char('['));
        label_ = fm.elidedText(bracket > 0 ? full.mid(bracket) : full, Qt::ElideMiddle, room - 12);
        const qreal cut = fm.horizontalAdvance(label_) + 12;
        labelBox_ = QRectF(mid.x() - cut / 2, mid.y() - 8.5, cut, 17);
      } else {
        label_.clear();
        labelBox_ = QRectF();
      }
    }
    if (!labelBox_.isNull()) scene_->labelPlaced(mapRectToScene(labelBox_));
  }
  setPath(path);
}

QRectF LinkItem::labelRect() const {
  return labelBox_.isNull() ? QRectF() : mapRectToScene(labelBox_);
}

QRectF LinkItem::boundingRect() const {
  QRectF r = QGraphicsPathItem::boundingRect().adjusted(-4, -4, 4, 4);
  if (!labelBox_.isNull()) r |= labelBox_.adjusted(0, 0, 0, 1);
  if (leaderTo_) r |= QRectF(*leaderTo_, QSizeF(1, 1));
  return r;
}

QPainterPath LinkItem::shape() const {
  QPainterPathStroker stroker;
  stroker.setWidth(10);
  return stroker.createStroke(path());
}

void LinkItem::paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) {
  p->setRenderHint(QPainter::Antialiasing);
  QPen pen(isSelected()          ? style::selection()
           : link_.isGraphLink() ? style::graphPort()
                                 : style::linkColor(),
           isSelected() ? 3.0 : 2.0);
  if (link_.isGraphLink()) pen.setStyle(Qt::DashLine);
  p->setPen(pen);
  p->setBrush(Qt::NoBrush);
  p->drawPath(path());
  if (label_.isEmpty()) return;
  if (leaderTo_) {
    const QPointF from(labelBox_.center().x(),
                       leaderTo_->y() < labelBox_.top() ? labelBox_.top() : labelBox_.bottom());
    p->setPen(QPen(style::labelText(), 1, Qt::DotLine));
    p->drawLine(from, *leaderTo_);
  }
  p->setPen(Qt::NoPen);
  p->setBrush(style::labelBackground());
  p->drawRoundedRect(labelBox_, 4, 4);
  p->setPen(style::labelText());
  p->setFont(style::linkFont());
  p->drawText(labelBox_, Qt::AlignCenter, label_);
}

// ---------------------------------------------------------------------------- GraphScene

GraphScene::GraphScene(GraphModel* model, QObject* parent) : QGraphicsScene(parent), model_(model) {
  setItemIndexMethod(QGraphicsScene::BspTreeIndex);
  setSceneRect(-20000, -20000, 40000, 40000);
  connect(model_, &GraphModel::modelReset, this, &GraphScene::rebuild);
  connect(model_, &GraphModel::nodeAdded, this, [this](qint64 id) { addNodeItem(id); });
  connect(model_, &GraphModel::nodeRemoved, this, [this](qint64 id) {
    auto it = nodes_.find(id);
    if (it == nodes_.end()) return;
    delete it->second;
    nodes_.erase(it);
  });
  connect(model_, &GraphModel::nodeChanged, this, [this](qint64 id) {
    if (auto* item = nodeItem(id)) item->refresh();
    refreshLinksOf(id);
  });
  connect(model_, &GraphModel::nodeMoved, this, [this](qint64 id) {
    NodeItem* item = nodeItem(id);
    const Node* n = model_->graph().node(id);
    if (!item || !n) return;
    applyingModel_ = true;
    item->setPos(n->position.x, n->position.y);
    applyingModel_ = false;
  });
  connect(model_, &GraphModel::linkAdded, this, [this](const Link& l) {
    addLinkItem(l);
    for (NodeId id : {l.from.node, l.to.node}) {
      if (auto* item = nodeItem(id)) item->refresh();  // variadic ports grow
      refreshLinksOf(id);
    }
  });
  connect(model_, &GraphModel::linkRemoved, this, [this](const Link& l) {
    auto it = links_.find(l);
    if (it != links_.end()) {
      delete it->second;
      links_.erase(it);
    }
    for (NodeId id : {l.from.node, l.to.node}) {
      if (auto* item = nodeItem(id)) item->refresh();
      refreshLinksOf(id);
    }
  });
  connect(model_, &GraphModel::validated, this, [this] {
    for (auto& [id, item] : nodes_) item->refresh();
    // Labels placed in one pass look up nodes and earlier labels in a grid built for the pass:
    // hundreds of scene queries took longer than the validation itself.
    obstacles_ = std::make_unique<Obstacles>();
    for (auto& [id, item] : nodes_) obstacles_->add(item->sceneBoundingRect(), true);
    for (auto& [l, item] : links_) item->updatePath();
    obstacles_.reset();
  });
  // The model asks where new nodes fit; a guard, since the model may outlive this scene.
  model_->setPlacer([self = QPointer<GraphScene>(this)](const std::vector<NodeId>& ids) {
    std::optional<Position> shift;
    if (!self) return shift;
    if (auto d = self->freeSpotShift(ids)) shift = Position{d->x(), d->y()};
    return shift;
  });
  rebuild();
}

void GraphScene::Obstacles::add(const QRectF& r, bool node) {
  for (int x = int(std::floor(r.left() / kCell)); x <= int(std::floor(r.right() / kCell)); ++x)
    for (int y = int(std::floor(r.top() / kCell)); y <= int(std::floor(r.bottom() / kCell)); ++y)
      cells[{x, y}].push_back({r, node});
}

std::pair<bool, bool> GraphScene::Obstacles::taken(const QRectF& r) const {
  bool node = false, label = false;
  for (int x = int(std::floor(r.left() / kCell)); x <= int(std::floor(r.right() / kCell)); ++x)
    for (int y = int(std::floor(r.top() / kCell)); y <= int(std::floor(r.bottom() / kCell)); ++y) {
      auto it = cells.find({x, y});
      if (it == cells.end()) continue;
      for (const auto& [rect, isNode] : it->second)
        if (rect.intersects(r)) (isNode ? node : label) = true;
    }
  return {node, label};
}

std::pair<bool, bool> GraphScene::labelSpotTaken(const QRectF& box, const LinkItem* self) const {
  if (obstacles_) return obstacles_->taken(box);
  bool node = false, label = false;
  for (QGraphicsItem* i : items(box, Qt::IntersectsItemBoundingRect)) {
    node |= i->type() == NodeItem::Type;
    label |= i != self && i->type() == LinkItem::Type &&
             static_cast<LinkItem*>(i)->labelRect().intersects(box);
  }
  return {node, label};
}

void GraphScene::labelPlaced(const QRectF& box) {
  if (obstacles_) obstacles_->add(box, false);
}

std::optional<QPointF> GraphScene::freeSpotShift(const std::vector<NodeId>& ids) const {
  std::set<const QGraphicsItem*> mine;
  QRectF group;
  for (NodeId id : ids)
    if (NodeItem* item = nodeItem(id)) {
      mine.insert(item);
      group |= item->sceneBoundingRect();
    }
  if (mine.empty()) return std::nullopt;
  // A grid step of air around the group, so that ports and labels stay apart.
  const QRectF need = group.adjusted(-kGrid, -kGrid, kGrid, kGrid);
  auto blocked = [&](QPointF d) {
    for (QGraphicsItem* item : items(need.translated(d), Qt::IntersectsItemBoundingRect))
      if (item->type() == NodeItem::Type && !mine.count(item)) return true;
    return false;
  };
  if (!blocked({0, 0})) return QPointF(0, 0);
  // Rings of grid steps around the asked-for spot, the nearest spots of a ring first.
  constexpr int kRings = 40;
  for (int r = 1; r <= kRings; ++r) {
    std::vector<QPoint> ring;
    for (int i = -r; i <= r; ++i) {
      ring.push_back({i, -r});
      ring.push_back({i, r});
      if (i != -r && i != r) {
        ring.push_back({-r, i});
        ring.push_back({r, i});
      }
    }
    // Nearest first; on a tie, below before above and right before left, where a reader of a
    // left-to-right graph looks next.
    std::stable_sort(ring.begin(), ring.end(), [](QPoint a, QPoint b) {
      const int da = a.x() * a.x() + a.y() * a.y(), db = b.x() * b.x() + b.y() * b.y();
      if (da != db) return da < db;
      if (a.y() != b.y()) return a.y() > b.y();
      return a.x() > b.x();
    });
    for (QPoint p : ring) {
      const QPointF d(p.x() * kGrid, p.y() * kGrid);
      if (!blocked(d)) return d;
    }
  }
  return std::nullopt;
}

void GraphScene::rebuild() {
  if (dragPath_) {
    delete dragPath_;
    dragPath_ = nullptr;
  }
  for (auto& [l, item] : links_) delete item;
  for (auto& [id, item] : nodes_) delete item;
  links_.clear();
  nodes_.clear();
  for (const auto& [id, n] : model_->graph().nodes()) addNodeItem(id);
  for (const auto& l : model_->graph().links()) addLinkItem(l);
}

void GraphScene::addNodeItem(NodeId id) {
  const Node* n = model_->graph().node(id);
  if (!n || nodes_.count(id)) return;
  auto* item = new NodeItem(this, id);
  nodes_[id] = item;  // before setPos: moving notifies the (not yet existing) links
  item->setPos(n->position.x, n->position.y);
  addItem(item);
}

void GraphScene::addLinkItem(const Link& l) {
  if (links_.count(l) || !nodeItem(l.from.node) || !nodeItem(l.to.node)) return;
  auto* item = new LinkItem(this, l);
  links_[l] = item;
  addItem(item);
}

NodeItem* GraphScene::nodeItem(NodeId id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : it->second;
}

LinkItem* GraphScene::linkItem(const Link& l) const {
  auto it = links_.find(l);
  return it == links_.end() ? nullptr : it->second;
}

std::vector<NodeId> GraphScene::selectedNodes() const {
  std::vector<NodeId> ids;
  for (QGraphicsItem* item : selectedItems())
    if (item->type() == NodeItem::Type) ids.push_back(static_cast<NodeItem*>(item)->id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<Link> GraphScene::selectedLinks() const {
  std::vector<Link> out;
  for (QGraphicsItem* item : selectedItems())
    if (item->type() == LinkItem::Type) out.push_back(static_cast<LinkItem*>(item)->link());
  return out;
}

void GraphScene::selectOnly(const std::vector<NodeId>& ids) {
  clearSelection();
  for (NodeId id : ids)
    if (auto* item = nodeItem(id)) item->setSelected(true);
}

QPointF GraphScene::snapped(QPointF p) const {
  if (!snap_) return p;
  return {std::round(p.x() / kGrid) * kGrid, std::round(p.y() / kGrid) * kGrid};
}

void GraphScene::refreshLinksOf(NodeId id) {
  const Graph& g = model_->graph();
  auto refresh = [&](const Link& l) {
    if (auto* item = linkItem(l)) item->updatePath();
  };
  const int inputs = g.inputPortCount(id), outputs = g.outputPortCount(id);
  for (int p = kGraphPort; p < inputs; ++p)
    if (auto l = g.inputLink(id, p)) refresh(*l);
  for (int p = kGraphPort; p < outputs; ++p)
    for (const auto& l : g.outputLinks(id, p)) refresh(l);
}

void GraphScene::nodeGeometryChanged(NodeId id) {
  refreshLinksOf(id);
}

bool GraphScene::tryConnect(NodeId a, PortHit pa, NodeId b, PortHit pb) {
  if (pa.output == pb.output) {
    emit statusMessage(pa.output
                           ? tr("Cannot connect two outputs: drag from an output to an input")
                           : tr("Cannot connect two inputs: drag from an output to an input"));
    return false;
  }
  if (!pa.output) {
    std::swap(a, b);
    std::swap(pa, pb);
  }
  const std::optional<Link> old = model_->graph().inputLink(b, pb.port);
  Status st = model_->connectPorts({{a, pa.port}, {b, pb.port}});
  if (!st.ok()) {
    emit statusMessage(QString::fromStdString(st.message()));
    return false;
  }
  const Graph& g = model_->graph();
  QString text =
      tr("Connected %1 to %2")
          .arg(QString::fromStdString(g.describe(a)), QString::fromStdString(g.describe(b)));
  if (old && old->from != PortRef{a, pa.port})
    text += tr(", replacing the link from %1 (Undo brings it back)")
                .arg(QString::fromStdString(g.describe(old->from.node)));
  emit statusMessage(text);
  return true;
}

void GraphScene::beginLinkDrag(NodeId node, PortHit port, QPointF scenePos) {
  delete dragPath_;
  dragPath_ = new QGraphicsPathItem;
  QPen pen(port.port == kGraphPort ? style::graphPort() : style::selection(), 2, Qt::DashLine);
  dragPath_->setPen(pen);
  dragPath_->setZValue(10);
  addItem(dragPath_);
  dragNode_ = node;
  dragPort_ = port;
  QPainterPath path(nodeItem(node)->portScenePos(port.output, port.port));
  path.lineTo(scenePos);
  dragPath_->setPath(path);
}

void GraphScene::mouseMoveEvent(QGraphicsSceneMouseEvent* e) {
  if (!dragPath_) return QGraphicsScene::mouseMoveEvent(e);
  NodeItem* src = nodeItem(dragNode_);
  if (!src) return;
  QPointF p0 = src->portScenePos(dragPort_.output, dragPort_.port), p1 = e->scenePos();
  if (!dragPort_.output) std::swap(p0, p1);
  const qreal dx = std::max(50.0, std::abs(p1.x() - p0.x()) * 0.5);
  QPainterPath path(p0);
  path.cubicTo(p0 + QPointF(dx, 0), p1 - QPointF(dx, 0), p1);
  dragPath_->setPath(path);
}

void GraphScene::mouseReleaseEvent(QGraphicsSceneMouseEvent* e) {
  if (!dragPath_) {
    QGraphicsScene::mouseReleaseEvent(e);
    if (e->button() != Qt::LeftButton) return;
    const bool moved = commitMoves();
    // One node dragged onto a link goes into it, as in other node editors (a trial rewired by
    // hand): the link under the pointer, which the node itself hides.
    const auto selected = selectedNodes();
    if (!moved || selected.size() != 1) return;
    for (QGraphicsItem* item : items(e->scenePos())) {
      if (item->type() != LinkItem::Type) continue;
      const dw::Link link = static_cast<LinkItem*>(item)->link();
      if (link.from.node == selected[0] || link.to.node == selected[0]) continue;
      if (Status st = model_->insertIntoLink(selected[0], link); st.ok())
        emit statusMessage(tr("Inserted into the link; Undo takes it out"));
      return;
    }
    return;
  }
  delete dragPath_;
  dragPath_ = nullptr;
  if (QGraphicsItem* grabber = mouseGrabberItem()) grabber->ungrabMouse();
  for (QGraphicsItem* item : items(e->scenePos())) {
    if (item->type() != NodeItem::Type) continue;
    auto* target = static_cast<NodeItem*>(item);
    if (target->id() == dragNode_) continue;
    auto hit = target->portAt(target->mapFromScene(e->scenePos()));
    if (!hit) {
      // Dropped on a node's body: take its first free input (or its first output).
      const Graph& g = model_->graph();
      if (dragPort_.port == kGraphPort) {
        hit = PortHit{!dragPort_.output, kGraphPort};
      } else if (dragPort_.output) {
        for (int i = 0; i < g.inputPortCount(target->id()) && !hit; ++i)
          if (!g.inputLink(target->id(), i)) hit = PortHit{false, i};
      } else if (g.outputPortCount(target->id()) > 0) {
        hit = PortHit{true, 0};
      }
    }
    if (hit) tryConnect(dragNode_, dragPort_, target->id(), *hit);
    return;
  }
}

bool GraphScene::commitMoves() {
  std::map<NodeId, Position> moved;
  const Graph& g = model_->graph();
  for (NodeId id : selectedNodes()) {
    const Node* n = g.node(id);
    const QPointF p = nodeItem(id)->pos();
    if (n && (n->position.x != p.x() || n->position.y != p.y())) moved[id] = {p.x(), p.y()};
  }
  if (moved.empty()) return false;
  Status st = model_->moveNodes(moved);
  if (!st.ok()) emit statusMessage(QString::fromStdString(st.message()));
  return st.ok();
}

}  // namespace dw::studio
