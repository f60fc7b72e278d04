// Canvas performance of deepwire studio (run with QT_QPA_PLATFORM=offscreen, or on a display):
//   1. open a 500-node ONNX model onto the canvas (read, import with auto-layout, build the
//      scene, fit, first paint): the target is under 2 s;
//   2. drag a node around in that graph: the time per frame (move + links + repaint);
//   3. the live validation pass that follows an edit (validate + lower + shape inference).
// Usage: studio_bench [--nodes N] [--frames F]
#include <onnx/onnx_pb.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "graphs/file_io.h"

namespace {

// A chain x -> Add(c0) -> Mul(c1) -> Relu -> ... with one initializer per binary op, so the
// canvas holds `nodes` nodes and about as many links, spread over many layout columns.
onnx::ModelProto buildModel(int nodes) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("bench");
  auto addValue = [](onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    t->mutable_shape()->add_dim()->set_dim_value(64);
  };
  addValue(g->add_input(), "x");
  std::string prev = "x";
  int count = 2;  // input and output
  for (int i = 0; count < nodes; ++i) {
    const char* ops[] = {"Add", "Relu", "Mul", "Tanh"};
    const std::string op = ops[i % 4];
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(op + std::to_string(i));
    n->add_input(prev);
    ++count;
    if (op == "Add" || op == "Mul") {
      const std::string c = "c" + std::to_string(i);
      auto* init = g->add_initializer();
      init->set_name(c);
      init->set_data_type(onnx::TensorProto::FLOAT);
      init->add_dims(64);
      for (int k = 0; k < 64; ++k) init->add_float_data(op == "Mul" ? 0.5f : 0.01f * k);
      n->add_input(c);
      ++count;
    }
    prev = "t" + std::to_string(i);
    n->add_output(prev);
  }
  auto* out = g->add_node();
  out->set_op_type("Identity");
  out->add_input(prev);
  out->add_output("y");
  addValue(g->add_output(), "y");
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("deepwire");
  QApplication::setApplicationName("deepwire-studio-bench");
  int nodes = 500, frames = 120;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--nodes") nodes = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--frames") frames = std::atoi(argv[i + 1]);
  }
  QTemporaryDir dir;
  const QString path = dir.filePath("bench.onnx");
  if (!dw::writeOnnxFile(buildModel(nodes), path.toStdString()).ok()) return 1;

  dw::studio::MainWindow w(false);
  w.resize(1600, 1000);
  w.show();
  app.processEvents();

  // 1. Open onto the canvas, up to the first painted frame.
  QElapsedTimer t;
  t.start();
  if (!w.openFile(path)) {
    std::fprintf(stderr, "open failed: %s\n", qPrintable(w.lastError()));
    return 1;
  }
  w.view()->viewport()->repaint();
  const double openMs = t.nsecsElapsed() / 1e6;
  const size_t n = w.model()->graph().nodes().size(), l = w.model()->graph().links().size();

  // 3. The validation pass that follows edits (it runs once here, after the open).
  t.restart();
  w.model()->validateNow();
  const double validateMs = t.nsecsElapsed() / 1e6;

  // 2. Drag a node from the middle of the graph at a readable zoom, repainting every frame.
  w.view()->resetTransform();
  auto it = w.model()->graph().nodes().begin();
  std::advance(it, n / 2);
  dw::studio::NodeItem* item = w.scene()->nodeItem(it->first);
  w.view()->centerOn(item);
  w.scene()->selectOnly({it->first});
  app.processEvents();
  std::vector<double> frameMs;
  const QPointF start = item->pos();
  for (int f = 0; f < frames; ++f) {
    QElapsedTimer ft;
    ft.start();
    item->setPos(start + QPointF(3.0 * (f % 40), 2.0 * (f % 30)));
    w.view()->viewport()->repaint();
    frameMs.push_back(ft.nsecsElapsed() / 1e6);
  }
  t.restart();
  w.scene()->commitMoves();  // the mouse release: one undoable move
  const double commitMs = t.nsecsElapsed() / 1e6;
  std::sort(frameMs.begin(), frameMs.end());
  double sum = 0;
  for (double v : frameMs) sum += v;

  // Zoomed out so the whole graph is on screen: the worst case for a repaint.
  w.view()->fitToView();
  app.processEvents();
  std::vector<double> wideMs;
  for (int f = 0; f < 30; ++f) {
    QElapsedTimer ft;
    ft.start();
    item->setPos(start + QPointF(20.0 * (f % 5), 0));
    w.view()->viewport()->repaint();
    wideMs.push_back(ft.nsecsElapsed() / 1e6);
  }
  std::sort(wideMs.begin(), wideMs.end());

  std::printf("graph: %zu nodes, %zu links (platform %s)\n", n, l, qPrintable(app.platformName()));
  std::printf(
      "open 500-node ONNX onto the canvas (read, import, layout, scene, first paint): %.1f ms\n",
      openMs);
  std::printf("live validation pass (validate + lower + checker + shape inference): %.1f ms\n",
              validateMs);
  std::printf(
      "node drag at 100%% zoom: mean %.2f ms/frame, median %.2f, p95 %.2f, max %.2f (%d frames)\n",
      sum / frames, frameMs[frames / 2], frameMs[frames * 95 / 100], frameMs.back(), frames);
  std::printf("node drag, whole graph visible: median %.2f ms/frame, max %.2f\n", wideMs[15],
              wideMs.back());
  std::printf("commit move (undo command): %.2f ms\n", commitMs);
  return 0;
}
