#include "app/studio/decimated_line.h"

#include <QLineSeries>
#include <algorithm>

namespace dw::studio {

DecimatedLine::DecimatedLine(QLineSeries* series, int cap)
    : series_(series), cap_(std::max(2, cap)) {}

void DecimatedLine::clear() {
  series_->clear();
  stride_ = 1;
  open_ = 0;
}

void DecimatedLine::restore(const QList<QPointF>& points, int64_t stride) {
  clear();
  stride_ = std::max<int64_t>(1, stride);
  // Past the cap (a file's line drawn with another cap) pairs merge as they would have.
  QList<QPointF> kept = points;
  while (kept.size() > cap_) {
    QList<QPointF> merged;
    for (qsizetype i = 0; i + 1 < kept.size(); i += 2)
      merged.append({kept[i + 1].x(), (kept[i].y() + kept[i + 1].y()) / 2});
    if (kept.size() % 2 == 1) merged.append(kept.back());
    kept = merged;
    stride_ *= 2;
  }
  series_->replace(kept);
}

void DecimatedLine::append(const QList<QPointF>& steps) {
  if (steps.isEmpty()) return;
  // One replace for the whole batch: the series redraws once, not once a step.
  QList<QPointF> drawn = series_->points();
  for (const QPointF& p : steps) {
    if (open_ > 0) {
      QPointF& last = drawn.back();
      last = {p.x(), (last.y() * double(open_) + p.y()) / double(open_ + 1)};
      ++open_;
    } else {
      drawn.append(p);
      open_ = 1;
    }
    if (open_ == stride_) open_ = 0;
    if (drawn.size() <= cap_) continue;
    // Pairs of whole points become one of twice the stride. A whole point left without a
    // partner and the open one after it (or it alone) become the new open point.
    const qsizetype whole = drawn.size() - (open_ > 0 ? 1 : 0);
    QList<QPointF> merged;
    merged.reserve(drawn.size() / 2 + 1);
    for (qsizetype i = 0; i + 1 < whole; i += 2)
      merged.append({drawn[i + 1].x(), (drawn[i].y() + drawn[i + 1].y()) / 2});
    int64_t open = 0;
    if (whole % 2 == 1) {
      const QPointF& a = drawn[whole - 1];
      if (open_ > 0) {
        const QPointF& b = drawn.back();
        merged.append(
            {b.x(), (a.y() * double(stride_) + b.y() * double(open_)) / double(stride_ + open_)});
        open = stride_ + open_;
      } else {
        merged.append(a);
        open = stride_;
      }
    } else if (open_ > 0) {
      merged.append(drawn.back());
      open = open_;
    }
    stride_ *= 2;
    open_ = open;
    drawn = std::move(merged);
  }
  series_->replace(drawn);
}

}  // namespace dw::studio
