// What the studio's QTest suites share: creating nodes, wiring by mouse, waiting for the
// Training dock and the Data panel, and the test data's whereabouts. Header-only: each suite is
// its own executable.
#pragma once

#include <QElapsedTimer>
#include <QString>
#include <QTest>
#include <string>

#include "app/studio/data_panel.h"
#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "app/studio/training_panel.h"

namespace dw::studio::test {

inline QString example(const char* name) {
  return QStringLiteral(DW_SOURCE_DIR "/resources/examples/") + QString::fromLatin1(name);
}

// Through the model, as code (not a user) would create a node; fails the test run if refused.
inline dw::NodeId addNode(MainWindow& w, const char* domain, const char* type, double x, double y) {
  auto id = w.model()->createNode(domain, type, {x, y});
  if (!id.ok()) qFatal("createNode %s: %s", type, id.message().c_str());
  return *id;
}

inline dw::NodeId findByName(const dw::Graph& g, const std::string& name) {
  for (const auto& [id, n] : g.nodes())
    if (n.name == name) return id;
  return 0;
}

// Presses the mouse on a port and releases it on another, as a user wires a link.
inline void dragLink(MainWindow& w, QPointF fromScene, QPointF toScene) {
  QWidget* vp = w.view()->viewport();
  const QPoint a = w.view()->mapFromScene(fromScene), b = w.view()->mapFromScene(toScene);
  QTest::mousePress(vp, Qt::LeftButton, {}, a);
  QTest::mouseMove(vp, (a + b) / 2);
  QTest::mouseMove(vp, b);
  QTest::mouseRelease(vp, Qt::LeftButton, {}, b);
}

// Output port `out` of `from` to input port `in` of `to`, by mouse.
inline void wire(MainWindow& w, dw::NodeId from, int out, dw::NodeId to, int in) {
  dragLink(w, w.scene()->nodeItem(from)->portScenePos(true, out),
           w.scene()->nodeItem(to)->portScenePos(false, in));
}

// Runs the event loop until the Training dock is idle; false if it is still busy after `ms`.
inline bool waitIdle(TrainingPanel* p, int ms = 300000) {
  QElapsedTimer t;
  t.start();
  while (p->busy() && t.elapsed() < ms) QTest::qWait(10);
  return !p->busy();
}

// Runs the event loop while the Data panel reads sources in the background.
inline void settle(DataPanel* d) {
  QElapsedTimer t;
  t.start();
  while (d->busy() && t.elapsed() < 60000) QTest::qWait(10);
  if (d->busy()) qFatal("the Data panel is still reading after a minute");
}

}  // namespace dw::studio::test
