// A chart line of per-step values (the train loss and metric) drawn from a bounded number of
// points. A Fit of a small model makes thousands of steps a second; a QLineSeries redraws all of
// its points on every change, so a line with a point per step cost the window more and more each
// time it grew, until it fell minutes behind the training and Stop waited in its queue.
#pragma once

#include <QList>
#include <QPointF>
#include <cstdint>

class QLineSeries;

namespace dw::studio {

class DecimatedLine {
 public:
  // Draws on `series` (which it does not own) from at most `cap` points (cap >= 2).
  explicit DecimatedLine(QLineSeries* series, int cap = 2000);

  // Adds steps (x: the step, y: its value). Each drawn point is the mean of `stride()` steps, at
  // the last of them; the newest may hold fewer while it fills. Past the cap, neighbouring points
  // merge in pairs and the stride doubles.
  void append(const QList<QPointF>& steps);
  void clear();
  int64_t stride() const { return stride_; }
  // Draws `points` (a line as it was drawn, each the mean of `stride` steps) and continues from
  // them: the next step starts a new point.
  void restore(const QList<QPointF>& points, int64_t stride);

 private:
  QLineSeries* series_;
  int cap_;
  int64_t stride_ = 1;
  int64_t open_ = 0;  // steps in the newest drawn point while it holds fewer than stride_
};

}  // namespace dw::studio
