// QTest suite of the studio's canvas and panels (CTest label "gui"): link labels, rewiring,
// placement, panels that never clip, imported layouts, the Graphs ports, node colours, the
// specified_outputs_name editor and default node names. Like studio_tests, each test drives a
// real MainWindow with mouse and key events where a user would.
#include <onnx/onnx_pb.h>

#include <QApplication>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDockWidget>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPushButton>
#include <QScrollBar>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QUndoStack>
#include <functional>

#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "app/studio/palette.h"
#include "app/studio/params_panel.h"
#include "app/studio/style.h"
#include "app/studio/tests/studio_test_util.h"
#include "graphs/file_io.h"
#include "nodes/catalogue.h"

using dw::studio::MainWindow;

using namespace dw::studio::test;

namespace {

dw::NodeId addInput(MainWindow& w, const char* type, double x, double y) {
  const dw::NodeId id = addNode(w, "deepwire", "Input", x, y);
  if (!w.model()->setParam(id, "type", dw::Param::makeString(type)).ok()) qFatal("Input type");
  return id;
}

dw::NodeId findByType(const dw::Graph& g, const std::string& type) {
  for (const auto& [id, n] : g.nodes())
    if (n.type == type) return id;
  return 0;
}

// Double-clicks a palette entry, which places the node at the centre of the view.
dw::NodeId placeFromPalette(MainWindow& w, const char* domain, const char* type) {
  auto* palette = w.palette();
  palette->filterEdit()->clear();
  QTest::keyClicks(palette->filterEdit(), type);
  QTreeWidgetItem* item = palette->entry(domain, type);
  if (!item || item->isHidden()) return 0;
  palette->tree()->scrollToItem(item);
  const QRect r = palette->tree()->visualItemRect(item);
  const auto before = w.model()->graph().nodes().size();
  QTest::mouseClick(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
  QTest::mouseDClick(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
  // QTest leaves the button down after a double-click: let it go, or later moves would drag.
  QTest::mouseRelease(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
  if (w.model()->graph().nodes().size() != before + 1) return 0;
  return w.model()->graph().nodes().rbegin()->first;
}

// The drawn body of a node (its bounding rect without the port knobs and caption margins).
QRectF body(dw::studio::NodeItem* item) {
  const QRectF b = item->sceneBoundingRect();
  return b.adjusted(9.5, 15, -9.5, -4);
}

// Runs `f` on the modal dialog that `open` brings up (once it is up), then returns.
void withModal(const std::function<void()>& open, const std::function<void(QDialog*)>& f) {
  bool ran = false;
  QTimer::singleShot(0, [&] {
    QTRY_VERIFY(qobject_cast<QDialog*>(QApplication::activeModalWidget()));
    auto* dlg = qobject_cast<QDialog*>(QApplication::activeModalWidget());
    f(dlg);
    ran = true;
    if (dlg->isVisible()) dlg->reject();
  });
  open();
  QVERIFY(ran);
}

// The colour at a scene point as the view draws it.
QColor pixelAt(MainWindow& w, QPointF scenePos) {
  const QImage img = w.view()->viewport()->grab().toImage();
  return img.pixelColor(w.view()->mapFromScene(scenePos));
}

bool reddish(const QColor& c) {
  const int h = c.hslHue();
  return c.hslSaturation() > 60 && h >= 0 && (h < 20 || h > 340);
}

}  // namespace

class CanvasTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QFile::remove(MainWindow::autosavePath());
  }

  // Issue 16: every link's shape label disappeared while any node had an error.
  void shapeLabelsStayWhileOtherNodesHaveErrors() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId in = addInput(w, "float[N,4]", 0, 0);
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 260, 0);
    const dw::NodeId out = addNode(w, "deepwire", "Output", 520, 0);
    const dw::NodeId gemm = addNode(w, "ai.onnx", "Gemm", 520, 240);  // B is never given
    const dw::Link a{{in, 0}, {relu, 0}}, b{{relu, 0}, {out, 0}}, c{{relu, 0}, {gemm, 0}};
    const dw::NodeId sqrt = addNode(w, "ai.onnx", "Sqrt", 780, 240);
    const dw::Link d{{gemm, 0}, {sqrt, 0}};
    for (const auto& l : {a, b, c, d}) QVERIFY(w.model()->connectPorts(l).ok());
    w.view()->fitToView();
    // The debounced validation runs as it does after any edit.
    QTRY_VERIFY(!w.model()->problemText(gemm).isEmpty());
    auto* scene = w.scene();
    QCOMPARE(scene->linkItem(a)->label(), QStringLiteral("float[N,4]"));
    QCOMPARE(scene->linkItem(b)->label(), QStringLiteral("float[N,4]"));
    // The link into the broken Gemm carries a known tensor too; what the Gemm makes does not.
    QCOMPARE(scene->linkItem(c)->label(), QStringLiteral("float[N,4]"));
    QVERIFY(scene->linkItem(d)->label().isEmpty());
    QVERIFY(scene->linkItem(a)->toolTip().contains("float[N,4]"));
    // Drawn: the label's dark box over the canvas.
    w.view()->resetTransform();
    w.view()->centerOn(scene->linkItem(a)->labelRect().center());
    QApplication::processEvents();
    const QColor px = pixelAt(w, scene->linkItem(a)->labelRect().topLeft() + QPointF(2.5, 8.5));
    QVERIFY2(px.red() < 0x20 && px.green() < 0x20, qPrintable(px.name()));
  }

  // Issue 16: a link dropped on a connected input was refused ("disconnect it first").
  void dropOnConnectedInputReplacesLinkInOneUndoStep() {
    MainWindow w(false);
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId a = addInput(w, "float[N,4]", 0, 0);
    const dw::NodeId b = addInput(w, "float[N,4]", 0, 200);
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 300, 100);
    w.view()->fitToView();
    QApplication::processEvents();
    auto* scene = w.scene();
    const dw::Link first{{a, 0}, {relu, 0}}, second{{b, 0}, {relu, 0}};
    dragLink(w, scene->nodeItem(a)->portScenePos(true, 0),
             scene->nodeItem(relu)->portScenePos(false, 0));
    QCOMPARE(w.model()->graph().links(), std::vector<dw::Link>{first});
    const int steps = w.model()->undoStack()->count();

    dragLink(w, scene->nodeItem(b)->portScenePos(true, 0),
             scene->nodeItem(relu)->portScenePos(false, 0));
    QCOMPARE(w.model()->graph().links(), std::vector<dw::Link>{second});
    QVERIFY(scene->linkItem(second) && !scene->linkItem(first));
    QVERIFY2(w.statusMessage().contains("replacing"), qPrintable(w.statusMessage()));
    QCOMPARE(w.model()->undoStack()->count(), steps + 1);

    w.action("undo")->trigger();
    QCOMPARE(w.model()->graph().links(), std::vector<dw::Link>{first});
    QVERIFY(scene->linkItem(first) && !scene->linkItem(second));
    w.action("redo")->trigger();
    QCOMPARE(w.model()->graph().links(), std::vector<dw::Link>{second});

    // A refused replacement keeps the old link: Relu cannot feed itself through a cycle.
    const dw::NodeId sig = addNode(w, "ai.onnx", "Sigmoid", 600, 100);
    QVERIFY(w.model()->connectPorts({{relu, 0}, {sig, 0}}).ok());
    QVERIFY(!scene->tryConnect(sig, {true, 0}, relu, {false, 0}));
    QVERIFY(w.model()->graph().inputLink(relu, 0) == second);
    QVERIFY(w.statusMessage().contains("cycle"));
  }

  // A node dropped on a link, from the palette or dragged there, goes into it: the link's source
  // feeds its first input and its first output the link's target, and Undo takes it out (a trial
  // rewired by hand).
  void nodesDroppedOnALinkGoIntoIt() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId in = addInput(w, "float[N,4]", 0, 0);
    const dw::NodeId out = addNode(w, "deepwire", "Output", 900, 0);
    const dw::Link direct{{in, 0}, {out, 0}};
    QVERIFY(w.model()->connectPorts(direct).ok());
    QApplication::processEvents();
    auto* scene = w.scene();
    auto middle = [&](const dw::Link& l) {
      dw::studio::LinkItem* item = scene->linkItem(l);
      return item ? item->mapToScene(item->path().pointAtPercent(0.5)) : QPointF();
    };
    const dw::NodeId relu = w.placeNode("ai.onnx", "Relu", middle(direct));
    QVERIFY(relu);
    const dw::Link toRelu{{in, 0}, {relu, 0}}, fromRelu{{relu, 0}, {out, 0}};
    auto links = w.model()->graph().links();
    QVERIFY(std::find(links.begin(), links.end(), toRelu) != links.end());
    QVERIFY(std::find(links.begin(), links.end(), fromRelu) != links.end());
    QVERIFY(std::find(links.begin(), links.end(), direct) == links.end());
    w.action("undo")->trigger();  // out of the link, still on the canvas
    QVERIFY(w.model()->graph().node(relu));
    QCOMPARE(w.model()->graph().inputLink(out, 0), std::optional<dw::Link>(direct));
    // Dragged by its title onto the link.
    const dw::NodeId sig = addNode(w, "ai.onnx", "Sigmoid", 400, 400);
    QApplication::processEvents();
    w.view()->fitToView();
    QApplication::processEvents();
    auto* item = scene->nodeItem(sig);
    const QPoint grab =
        w.view()->mapFromScene(item->sceneBoundingRect().topLeft() + QPointF(30, 8));
    const QPoint drop = w.view()->mapFromScene(middle(direct));
    QTest::mousePress(w.view()->viewport(), Qt::LeftButton, {}, grab);
    for (int i = 1; i <= 8; ++i)
      QTest::mouseMove(w.view()->viewport(), grab + (drop - grab) * i / 8);
    QTest::mouseRelease(w.view()->viewport(), Qt::LeftButton, {}, drop);
    QApplication::processEvents();
    QCOMPARE(w.model()->graph().inputLink(sig, 0), std::optional<dw::Link>({{in, 0}, {sig, 0}}));
    QCOMPARE(w.model()->graph().inputLink(out, 0), std::optional<dw::Link>({{sig, 0}, {out, 0}}));
  }

  // A graph opened at a readable zoom shows its first nodes: the view was anchored on the
  // corner of every item, and a link looping back from the far end of a wide graph put that
  // corner in empty canvas (an imported transformer opened on nothing).
  void readableFitShowsTheFirstNodes() {
    MainWindow w(false);
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId first = addInput(w, "float[N,4]", 0, 0);
    dw::NodeId prev = first;
    for (int i = 1; i <= 40; ++i) {  // far wider than the view at a readable zoom
      const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 600.0 * i, 0);
      QVERIFY(w.model()->connectPorts({{prev, 0}, {relu, 0}}).ok());
      prev = relu;
    }
    // The last node's output back into an Add beside the first: a long backward link.
    const dw::NodeId add = addNode(w, "ai.onnx", "Add", 0, 300);
    QVERIFY(w.model()->connectPorts({{first, 0}, {add, 0}}).ok());
    QVERIFY(w.model()->connectPorts({{prev, 0}, {add, 1}}).ok());
    QApplication::processEvents();
    w.view()->fitToView(dw::studio::GraphView::kReadableZoom);
    QApplication::processEvents();
    const QRectF seen = w.view()->mapToScene(w.view()->viewport()->rect()).boundingRect();
    QVERIFY2(seen.intersects(w.scene()->nodeItem(first)->sceneBoundingRect()),
             qPrintable(QStringLiteral("view %1,%2 %3x%4")
                            .arg(seen.x())
                            .arg(seen.y())
                            .arg(seen.width())
                            .arg(seen.height())));
  }

  // Issue 16: new and pasted nodes landed on top of existing ones.
  void newAndPastedNodesLandOnFreeSpace() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* scene = w.scene();
    std::vector<dw::NodeId> ids;
    for (int i = 0; i < 3; ++i) {
      const dw::NodeId id = placeFromPalette(w, "ai.onnx", "Relu");
      QVERIFY(id);
      ids.push_back(id);
    }
    // Dropped from the palette onto an existing node: moved next to it.
    const QPoint onFirst = w.view()->mapFromScene(scene->nodeItem(ids[0])->pos() + QPointF(30, 30));
    QMimeData* data = w.palette()->tree()->model()->mimeData(
        {w.palette()->tree()->indexFromItem(w.palette()->entry("ai.onnx", "Relu"))});
    QDropEvent drop(onFirst, Qt::CopyAction, data, Qt::LeftButton, {});
    QDragEnterEvent enter(onFirst, Qt::CopyAction, data, Qt::LeftButton, {});
    QApplication::sendEvent(w.view()->viewport(), &enter);
    QApplication::sendEvent(w.view()->viewport(), &drop);
    delete data;
    ids.push_back(w.model()->graph().nodes().rbegin()->first);
    QCOMPARE(w.model()->graph().nodes().size(), size_t(4));

    // Copy two and paste them twice: each paste lands clear of everything.
    scene->selectOnly({ids[0], ids[1]});
    w.view()->setFocus();
    QTest::keyClick(w.view(), Qt::Key_C, Qt::ControlModifier);
    QTest::keyClick(w.view(), Qt::Key_V, Qt::ControlModifier);
    QTest::keyClick(w.view(), Qt::Key_V, Qt::ControlModifier);
    QCOMPARE(w.model()->graph().nodes().size(), size_t(8));
    for (const auto& [i, ni] : w.model()->graph().nodes())
      for (const auto& [j, nj] : w.model()->graph().nodes()) {
        if (i >= j) continue;
        QVERIFY2(!body(scene->nodeItem(i)).intersects(body(scene->nodeItem(j))),
                 qPrintable(QStringLiteral("#%1 overlaps #%2").arg(i).arg(j)));
        // The model holds where the items are: an undo puts them back exactly.
        QCOMPARE(scene->nodeItem(i)->pos(), QPointF(ni.position.x, ni.position.y));
      }
    // Still snapped to the grid, and each placement one undo step.
    for (const auto& [id, n] : w.model()->graph().nodes())
      QCOMPARE(scene->snapped(QPointF(n.position.x, n.position.y)),
               QPointF(n.position.x, n.position.y));
    w.action("undo")->trigger();
    QCOMPARE(w.model()->graph().nodes().size(), size_t(6));
  }

  // Issue 16: a long type name widened the Parameters dock beyond its width, cutting off fields
  // and errors; combo boxes and palette entries were truncated.
  // The wheel over a field the user has not clicked into scrolls the panel; it changed the
  // value (a trial set a regularizer to l1l2 scrolling past it). Clicked into, it steps.
  void wheelOverAFieldScrollsInsteadOfEditing() {
    MainWindow w(false);
    w.resize(1400, 500);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId init = addNode(w, "deepwire", "Initializer", 0, 0);
    w.scene()->selectOnly({init});
    QApplication::processEvents();
    auto* fill = qobject_cast<QComboBox*>(w.params()->editor("fill"));
    QVERIFY(fill && fill->isVisible());
    const std::string before = w.model()->graph().param(init, "fill")->asString();
    auto turn = [&](QWidget* target) {
      const QPointF at(target->width() / 2.0, target->height() / 2.0);
      QWheelEvent wheel(at, target->mapToGlobal(at), QPoint(), QPoint(0, -120), Qt::NoButton,
                        Qt::NoModifier, Qt::NoScrollPhase, false);
      QApplication::sendEvent(target, &wheel);
      QApplication::processEvents();
    };
    w.params()->setFocus();
    for (int i = 0; i < 3; ++i) turn(fill);
    QCOMPARE(w.model()->graph().param(init, "fill")->asString(), before);
    QVERIFY(!fill->hasFocus());
    fill->setFocus();
    turn(fill);
    QVERIFY(w.model()->graph().param(init, "fill")->asString() != before);
  }

  void panelsNeverClip() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* paramsDock = w.findChild<QDockWidget*>("paramsDock");
    auto* paletteDock = w.findChild<QDockWidget*>("paletteDock");
    QVERIFY(paramsDock && paletteDock);
    QTest::qWait(50);  // the window's deferred dock sizes
    w.resizeDocks({paramsDock, paletteDock}, {280, 170}, Qt::Horizontal);
    QApplication::processEvents();

    const dw::NodeId metric = placeFromPalette(w, "deepwire.metrics", "SparseCategoricalAccuracy");
    QVERIFY(metric);
    w.scene()->selectOnly({metric});
    QTRY_VERIFY(!w.model()->problemText(metric).isEmpty());  // its inputs are not wired
    auto* params = w.params();
    QApplication::processEvents();
    QWidget* content = params->widget();
    QVERIFY2(content->width() <= params->viewport()->width(),
             qPrintable(QStringLiteral("content %1 > viewport %2")
                            .arg(content->width())
                            .arg(params->viewport()->width())));
    auto* problem = content->findChild<QLabel*>("paramsProblem");
    QVERIFY(problem && problem->isVisible());
    QVERIFY(problem->geometry().right() <= params->viewport()->width());
    QVERIFY(problem->text().remove(QChar(0x200B)).contains("SparseCategoricalAccuracy"));
    auto* title = content->findChild<QLabel*>("paramsTitle");
    QVERIFY(title && title->geometry().right() <= params->viewport()->width());
    for (const QString field : {"name", "specified_outputs_name", "lda coeff"}) {
      QWidget* e = params->editor(field);
      QVERIFY(e && e->isVisible());
      const QPoint right = e->mapTo(content, QPoint(e->width(), 0));
      QVERIFY2(right.x() <= params->viewport()->width(), qPrintable(field));
    }

    // A combo box shows its longest choice whole.
    const dw::NodeId init = addNode(w, "deepwire", "Initializer", 0, 400);
    QVERIFY(w.model()->setParam(init, "fill", dw::Param::makeString("glorot_uniform")).ok());
    w.scene()->selectOnly({init});
    QApplication::processEvents();
    auto* fill = qobject_cast<QComboBox*>(params->editor("fill"));
    QVERIFY(fill && fill->currentText() == "glorot_uniform");
    QVERIFY2(
        fill->width() >= fill->sizeHint().width(),
        qPrintable(QStringLiteral("%1 < %2").arg(fill->width()).arg(fill->sizeHint().width())));
    const QPoint right = fill->mapTo(params->widget(), QPoint(fill->width(), 0));
    QVERIFY(right.x() <= params->viewport()->width() || params->horizontalScrollBar()->isVisible());

    // Palette names elide in the middle within the dock, the full name in the tooltip.
    QTreeWidget* tree = w.palette()->tree();
    QCOMPARE(tree->textElideMode(), Qt::ElideMiddle);
    w.palette()->setFilter("SparseCategorical");
    QApplication::processEvents();
    QVERIFY(tree->header()->sectionSize(0) <= tree->viewport()->width());
    QTreeWidgetItem* entry = w.palette()->entry("deepwire.metrics", "SparseCategoricalAccuracy");
    QVERIFY(entry && entry->toolTip(0).contains("SparseCategoricalAccuracy"));
    const QRect r = tree->visualItemRect(entry);
    QVERIFY(r.right() <= tree->viewport()->width());
  }

  // Issue 16: errors in the Parameters dock must clear when their cause is gone.
  void panelErrorClearsWhenFixed() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 300, 0);
    w.scene()->selectOnly({relu});
    QTRY_VERIFY(!w.model()->problemText(relu).isEmpty());
    auto* problem = w.params()->widget()->findChild<QLabel*>("paramsProblem");
    QTRY_VERIFY(problem->isVisible());
    const dw::NodeId in = addInput(w, "float[N,4]", 0, 0);
    const dw::NodeId out = addNode(w, "deepwire", "Output", 600, 0);
    QVERIFY(w.model()->connectPorts({{in, 0}, {relu, 0}}).ok());
    QVERIFY(w.model()->connectPorts({{relu, 0}, {out, 0}}).ok());
    QTRY_VERIFY(w.model()->problems().empty());
    QVERIFY(!problem->isVisible());
    QVERIFY(problem->text().isEmpty());
    // And back again with Undo.
    w.action("undo")->trigger();
    w.action("undo")->trigger();
    w.action("undo")->trigger();
    QTRY_VERIFY(problem->isVisible());
  }

  // Issue 16: long tensor names in imported ONNX graphs widened nodes until they overlapped.
  void importedGraphLaysOutWithoutOverlaps() {
    // x -> MatMul(w_i) -> Add(b_i) -> Relu -> Add(residual), three times, every tensor named
    // like an exporter of a deep model names them.
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("long_names");
    auto value = [](onnx::ValueInfoProto* v, const std::string& name, int width) {
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(onnx::TensorProto::FLOAT);
      t->mutable_shape()->add_dim()->set_dim_param("batch_size");
      t->mutable_shape()->add_dim()->set_dim_value(width);
    };
    const std::string prefix = "model/encoder/transformer_block_with_a_long_scope/";
    std::string prev = prefix + "input_embeddings:0";
    value(g->add_input(), prev, 8);
    for (int i = 0; i < 3; ++i) {
      const std::string layer = prefix + "dense_layer_" + std::to_string(i) + "/";
      auto* w = g->add_initializer();
      w->set_name(layer + "kernel/read:0");
      w->set_data_type(onnx::TensorProto::FLOAT);
      w->add_dims(8);
      w->add_dims(8);
      for (int k = 0; k < 64; ++k) w->add_float_data(0.01f * k);
      auto* bias = g->add_initializer();
      bias->set_name(layer + "bias/read:0");
      bias->set_data_type(onnx::TensorProto::FLOAT);
      bias->add_dims(8);
      for (int k = 0; k < 8; ++k) bias->add_float_data(0.1f);
      // A residual Add: its link from `prev` skips three columns.
      const std::vector<std::pair<std::string, std::vector<std::string>>> ops = {
          {"MatMul", {prev, layer + "kernel/read:0"}},
          {"Add", {layer + "MatMul:0", layer + "bias/read:0"}},
          {"Relu", {layer + "BiasAdd:0"}},
          {"Add", {layer + "Relu:0", prev}}};
      const std::vector<std::string> outs = {layer + "MatMul:0", layer + "BiasAdd:0",
                                             layer + "Relu:0", layer + "residual_add:0"};
      for (size_t k = 0; k < ops.size(); ++k) {
        auto* n = g->add_node();
        n->set_op_type(ops[k].first);
        n->set_name(layer + ops[k].first + std::to_string(k));
        for (const auto& input : ops[k].second) n->add_input(input);
        n->add_output(outs[k]);
      }
      prev = outs.back();
    }
    value(g->add_output(), prev, 8);
    QTemporaryDir dir;
    const QString path = dir.filePath("long_names.onnx");
    QVERIFY(dw::writeOnnxFile(m, path.toStdString()).ok());

    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY2(w.openFile(path), qPrintable(w.lastError()));
    w.model()->validateNow();
    QVERIFY(w.model()->problems().empty());
    auto* scene = w.scene();
    std::vector<dw::studio::NodeItem*> nodes;
    std::vector<dw::studio::LinkItem*> links;
    for (QGraphicsItem* item : scene->items()) {
      if (item->type() == dw::studio::NodeItem::Type)
        nodes.push_back(static_cast<dw::studio::NodeItem*>(item));
      if (item->type() == dw::studio::LinkItem::Type)
        links.push_back(static_cast<dw::studio::LinkItem*>(item));
    }
    QCOMPARE(nodes.size(), w.model()->graph().nodes().size());
    for (auto* a : nodes) {
      QVERIFY(body(a).width() <= dw::studio::NodeItem::kMaxWidth);
      for (auto* b : nodes)
        if (a < b)
          QVERIFY2(!body(a).intersects(body(b)),
                   qPrintable(QStringLiteral("#%1 overlaps #%2").arg(a->id()).arg(b->id())));
    }
    int labelled = 0;
    for (auto* a : links) {
      if (a->label().isEmpty()) continue;
      ++labelled;
      for (auto* b : links)
        if (a < b && !b->label().isEmpty())
          QVERIFY2(!a->labelRect().intersects(b->labelRect()),
                   qPrintable(a->toolTip() + " / " + b->toolTip()));
      for (auto* n : nodes) QVERIFY2(!a->labelRect().intersects(body(n)), qPrintable(a->toolTip()));
    }
    QVERIFY(labelled >= 18);
    // An elided name is whole in the tooltips: the node's, and its port's on hover.
    const dw::NodeId matmul = findByType(w.model()->graph(), "MatMul");
    auto* item = scene->nodeItem(matmul);
    const std::string name = w.model()->graph().node(matmul)->name;
    QVERIFY(item->toolTip().contains(QString::fromStdString(name)));
    w.view()->resetTransform();
    w.view()->centerOn(item);
    QApplication::processEvents();
    QTest::mouseMove(w.view()->viewport(),
                     w.view()->mapFromScene(item->portScenePos(true, 0) - QPointF(2, 0)));
    QTRY_VERIFY2(item->toolTip().contains(prefix.c_str()), qPrintable(item->toolTip()));
  }

  // Issue 16: the yellow Graphs in / out diamonds carried no label or tooltip.
  void graphPortsAreLabelledAndExplained() {
    MainWindow w(false);
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 0, 0);
    auto* item = w.scene()->nodeItem(relu);
    w.view()->resetTransform();
    w.view()->centerOn(item);
    QApplication::processEvents();
    // The "graph" captions: yellow text just above both top corners.
    const QImage img = w.view()->viewport()->grab().toImage();
    const QPointF corners[] = {item->pos(), item->pos() + QPointF(body(item).width(), 0)};
    for (QPointF corner : corners) {
      int yellow = 0;
      const QPoint c = w.view()->mapFromScene(corner);
      for (int y = c.y() - 13; y < c.y() - 1; ++y)
        for (int x = c.x() - 30; x < c.x() + 30; ++x) {
          const QColor px = img.pixelColor(x, y);
          if (std::abs(px.red() - 0xf2) < 40 && std::abs(px.green() - 0xb8) < 40 &&
              px.blue() < 0x90)
            ++yellow;
        }
      QVERIFY2(yellow > 10, qPrintable(QString::number(yellow)));
    }
    // Hovering a diamond says what it carries.
    for (bool out : {false, true}) {
      QTest::mouseMove(w.view()->viewport(),
                       w.view()->mapFromScene(item->portScenePos(out, dw::kGraphPort)));
      QTRY_VERIFY2(item->toolTip().contains("model membership"), qPrintable(item->toolTip()));
      QVERIFY(item->toolTip().contains(out ? "Graphs out" : "Graphs in"));
      QTest::mouseMove(w.view()->viewport(), w.view()->mapFromScene(item->pos() + QPointF(60, 70)));
    }
  }

  // Issue 16: the Accelerator node's header was error-red while the graph was valid.
  void validNodesAreNeverDrawnRed() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(
        w.openFile(QStringLiteral(DW_SOURCE_DIR "/resources/examples/fashion_mnist_mlp.dwproj")));
    const dw::NodeId acc = placeFromPalette(w, "deepwire", "Accelerator");
    QVERIFY(acc);
    w.model()->validateNow();
    const auto& problems = w.model()->problems();
    QVERIFY2(problems.empty(), problems.empty() ? "" : problems.front().message.c_str());
    auto* item = w.scene()->nodeItem(acc);
    w.view()->resetTransform();
    w.view()->centerOn(item);
    w.scene()->clearSelection();
    QApplication::processEvents();
    const QColor header = pixelAt(w, item->pos() + QPointF(body(item).width() - 8, 30));
    QVERIFY2(!reddish(header), qPrintable(header.name()));
    // No category draws a red header: red means a problem.
    for (const dw::NodeSpec* s : dw::Catalogue::instance().all()) {
      const QColor c = dw::studio::style::categoryColor(s->category, s->domain);
      QVERIFY2(!reddish(c), qPrintable(QString::fromStdString(s->type + " " + s->category)));
    }
    QVERIFY(reddish(dw::studio::style::errorHeader()));
  }

  // Issue 16: the specified_outputs_name editor was an untitled "One item per line:" dialog.
  void outputNamesDialogHasARowPerPort() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId topk = addNode(w, "ai.onnx", "TopK", 0, 0);
    w.scene()->selectOnly({topk});
    auto* editor =
        qobject_cast<dw::studio::ListEdit*>(w.params()->editor("specified_outputs_name"));
    QVERIFY(editor);
    withModal([&] { QTest::mouseClick(editor->dialogButton(), Qt::LeftButton); },
              [&](QDialog* dlg) {
                QVERIFY2(dlg->windowTitle().contains("Output names") &&
                             dlg->windowTitle().contains("TopK"),
                         qPrintable(dlg->windowTitle()));
                auto* values = dlg->findChild<QLineEdit*>("outputName0");
                auto* indices = dlg->findChild<QLineEdit*>("outputName1");
                QVERIFY(values && indices && !dlg->findChild<QLineEdit*>("outputName2"));
                auto* form = dlg->findChild<QFormLayout*>();
                QVERIFY(form);
                auto label = [&](QLineEdit* e) {
                  return qobject_cast<QLabel*>(form->labelForField(e))->text();
                };
                QCOMPARE(label(values), QStringLiteral("Values"));
                QCOMPARE(label(indices), QStringLiteral("Indices"));
                QVERIFY(!values->placeholderText().isEmpty());
                QTest::keyClicks(values, "top_values");
                QTest::keyClicks(indices, "top_indices");
                QTest::mouseClick(dlg->findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok),
                                  Qt::LeftButton);
              });
    QCOMPARE(w.model()->graph().node(topk)->specifiedOutputsName,
             (std::vector<std::string>{"top_values", "top_indices"}));
    // Naming only the second port leaves the first empty, and its default.
    withModal([&] { QTest::mouseClick(editor->dialogButton(), Qt::LeftButton); },
              [&](QDialog* dlg) {
                auto* values = dlg->findChild<QLineEdit*>("outputName0");
                QCOMPARE(values->text(), QStringLiteral("top_values"));
                values->clear();
                QTest::mouseClick(dlg->findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok),
                                  Qt::LeftButton);
              });
    QCOMPARE(w.model()->graph().node(topk)->specifiedOutputsName,
             (std::vector<std::string>{"", "top_indices"}));
    // Other lists keep the one-per-line dialog, titled with what they edit.
    const dw::NodeId conv = addNode(w, "ai.onnx", "Conv", 300, 0);
    w.scene()->selectOnly({conv});
    auto* pads = qobject_cast<dw::studio::ListEdit*>(w.params()->editor("pads"));
    QVERIFY(pads);
    withModal([&] { QTest::mouseClick(pads->dialogButton(), Qt::LeftButton); },
              [&](QDialog* dlg) {
                QVERIFY2(dlg->windowTitle().contains("pads") && dlg->windowTitle().contains("Conv"),
                         qPrintable(dlg->windowTitle()));
              });
  }

  // Issue 16: metrics were called "SparseCategoricalAccuracy_8" where a user reads them.
  // The trial's status bar: "1 nodes · 1 links", and long messages cut off mid-word where the
  // permanent summary begins, so that they seemed to run under it.
  void statusBarCountsAndLongMessages() {
    MainWindow w(false);
    w.resize(1500, 920);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QLabel* summary = w.summaryLabel();
    QCOMPARE(summary->text(), QStringLiteral("0 nodes · 0 links · valid"));
    const dw::NodeId in = addInput(w, "float[N,4]", 0, 0);
    w.model()->validateNow();
    QVERIFY2(summary->text().startsWith("1 node · 0 links"), qPrintable(summary->text()));
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 260, 0);
    QVERIFY(w.model()->connectPorts({{in, 0}, {relu, 0}}).ok());
    w.model()->validateNow();
    QVERIFY2(summary->text().startsWith("2 nodes · 1 link ·"), qPrintable(summary->text()));

    // A message far wider than the bar: elided before the summary, whole in the tooltip.
    const QString missing = QStringLiteral("/no/such/folder/") + QString(300, QLatin1Char('x')) +
                            QStringLiteral(".dwproj");
    QVERIFY(!w.openFile(missing));
    QApplication::processEvents();
    auto* message = w.statusMessageLabel();
    QVERIFY(w.statusMessage().contains(missing));
    QVERIFY(message->isVisible());
    QVERIFY(message->isElided());
    QVERIFY(message->text().endsWith(QChar(0x2026)));
    const QRect m = message->geometry(), sum = summary->geometry();
    QVERIFY2(m.right() < sum.left(), qPrintable(QStringLiteral("message ends at %1, summary "
                                                               "starts at %2")
                                                    .arg(m.right())
                                                    .arg(sum.left())));
    QVERIFY(message->fontMetrics().horizontalAdvance(message->text()) <= m.width());
    QVERIFY(message->toolTip().contains(QString(300, QLatin1Char('x'))));
    // A short one is shown whole, and says "1 node".
    w.scene()->selectOnly({in});
    w.copySelection();
    QCOMPARE(message->text(), QStringLiteral("Copied 1 node"));
    QVERIFY(!message->isElided());
    QVERIFY(w.training()->dataStatusLabel()->wordWrap());  // the Data line wraps, never cut
  }

  // A cross-entropy told it gets probabilities, on a Gemm's raw scores, trains to little: the
  // Problems list carries Graph::hints' warning, the summary counts it, and the graph stays
  // valid.
  void lossHintShowsInProblems() {
    MainWindow w(false);
    QVERIFY2(w.openFile(example("fashion_mnist_mlp.dwproj")), qPrintable(w.lastError()));
    w.model()->validateNow();
    QVERIFY2(w.summaryLabel()->text().endsWith("valid"), qPrintable(w.summaryLabel()->text()));
    dw::NodeId train = 0;
    for (const auto& [id, n] : w.model()->graph().nodes())
      if (n.type == "Output Train") train = id;
    QVERIFY(train != 0);
    QVERIFY(w.model()->setParam(train, "from_logits", dw::Param::makeBool(false)).ok());
    w.model()->validateNow();
    QVERIFY2(w.summaryLabel()->text().endsWith("valid · 1 hint"),
             qPrintable(w.summaryLabel()->text()));
    QCOMPARE(w.problemsList()->count(), 1);
    QVERIFY(w.problemsList()->item(0)->text().contains("from_logits is off"));
  }

  // Opening an example fitted it whole at a zoom where its text was 6 px high.
  void openingAnExampleKeepsTextReadable() {
    MainWindow w(false);
    w.resize(1500, 920);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(50);  // the window's deferred dock sizes
    QVERIFY2(w.openFile(example("fashion_mnist_mlp.dwproj")), qPrintable(w.lastError()));
    QVERIFY2(w.view()->zoom() >= dw::studio::GraphView::kReadableZoom - 1e-6,
             qPrintable(QString::number(w.view()->zoom())));
    // The start of the graph shows: its leftmost node is in view.
    const QRectF seen = w.view()->mapToScene(w.view()->viewport()->rect()).boundingRect();
    qreal left = 1e9;
    for (const auto& [id, n] : w.model()->graph().nodes()) left = std::min(left, n.position.x);
    QVERIFY2(seen.left() <= left && seen.right() > left + 100,
             qPrintable(QStringLiteral("view %1..%2, leftmost node at %3")
                            .arg(seen.left())
                            .arg(seen.right())
                            .arg(left)));
    // Fit to View (F) still shows the whole graph, however small.
    w.action("fit")->trigger();
    const QRectF all = w.view()->mapToScene(w.view()->viewport()->rect()).boundingRect();
    QVERIFY(all.contains(w.scene()->itemsBoundingRect()));

    // Shape labels never sit on the ports they join (short links put them beside the nodes).
    w.model()->validateNow();
    for (const auto& l : w.model()->graph().links()) {
      auto* item = w.scene()->linkItem(l);
      if (!item || item->label().isEmpty()) continue;
      const QRectF r = item->labelRect();
      for (const QPointF port : {w.scene()->nodeItem(l.from.node)->portScenePos(true, l.from.port),
                                 w.scene()->nodeItem(l.to.node)->portScenePos(false, l.to.port)})
        QVERIFY2(!r.intersects(QRectF(port - QPointF(6, 6), QSizeF(12, 12))),
                 qPrintable(item->toolTip()));
    }
  }

  // Ctrl+V with the pointer over the canvas pastes there; from the menu (pointer elsewhere), a
  // step from the originals but inside the view. The trial's paste landed half off the view.
  void pasteGoesToThePointer() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(50);
    const dw::NodeId relu = placeFromPalette(w, "ai.onnx", "Relu");
    QVERIFY(relu);
    w.scene()->selectOnly({relu});
    w.view()->setFocus();
    QTest::keyClick(w.view(), Qt::Key_C, Qt::ControlModifier);
    QWidget* vp = w.view()->viewport();
    const QPoint at = vp->rect().center() + QPoint(-250, 150);
    QTest::mouseMove(vp, at);
    QTest::keyClick(w.view(), Qt::Key_V, Qt::ControlModifier);
    const auto& nodes = w.model()->graph().nodes();
    QCOMPARE(nodes.size(), size_t(2));
    const dw::NodeId pasted = nodes.rbegin()->first;
    const QPointF want = w.scene()->snapped(w.view()->mapToScene(at));
    const dw::Position& p = w.model()->graph().node(pasted)->position;
    QCOMPARE(QPointF(p.x, p.y), want);
    QCOMPARE(w.statusMessage(), QStringLiteral("Pasted 1 node"));

    // The pointer gone from the canvas (on the palette): next to the originals, in view, even
    // when the original sits at the top edge of the view.
    const QRectF seen = w.view()->mapToScene(vp->rect()).boundingRect();
    QVERIFY(w.model()->moveNodes({{relu, {seen.left() + 300, seen.top() + 2}}}).ok());
    QTest::mouseMove(w.palette()->tree()->viewport(), QPoint(10, 10));
    QVERIFY(!w.view()->pointerScenePos());
    w.scene()->selectOnly({relu});
    w.copySelection();
    w.paste();
    QCOMPARE(nodes.size(), size_t(3));
    const QRectF now = w.view()->mapToScene(vp->rect()).boundingRect();
    const QRectF second = body(w.scene()->nodeItem(nodes.rbegin()->first));
    QVERIFY2(
        now.contains(second),
        qPrintable(QStringLiteral("(%1,%2) not in view").arg(second.left()).arg(second.top())));
    QVERIFY(!second.intersects(body(w.scene()->nodeItem(relu))));
  }

  // Ctrl+F finds nodes by name or type: each match selected and centred, Enter and F3 for the
  // next, Shift+Enter for the one before.
  void findNodeSelectsAndCentres() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openFile(example("fashion_mnist_cnn.dwproj")));
    QAction* find = w.action("find");
    QVERIFY(find);
    QCOMPARE(find->shortcut(), QKeySequence(QKeySequence::Find));
    find->trigger();
    QLineEdit* edit = w.findEdit();
    QVERIFY(edit->isVisible());
    QTRY_VERIFY(edit->hasFocus());
    w.view()->zoomBy(2.0);
    auto centred = [&](dw::NodeId id) {
      const QPointF c = w.view()->mapToScene(w.view()->viewport()->rect().center());
      return QLineF(c, w.scene()->nodeItem(id)->sceneBoundingRect().center()).length() < 5;
    };
    QTest::keyClicks(edit, "conv");
    auto selected = w.scene()->selectedNodes();
    QCOMPARE(selected.size(), size_t(1));
    const dw::NodeId first = selected.front();
    const dw::Graph& g = w.model()->graph();
    // The Conv nodes before the Initializers named conv1.weight.
    QCOMPARE(QString::fromStdString(g.node(first)->type), QStringLiteral("Conv"));
    QVERIFY(centred(first));
    QTest::keyClick(edit, Qt::Key_Return);
    const dw::NodeId second = w.scene()->selectedNodes().front();
    QVERIFY(second != first);
    QVERIFY(centred(second));
    QTest::keyClick(edit, Qt::Key_Return, Qt::ShiftModifier);
    QCOMPARE(w.scene()->selectedNodes().front(), first);
    w.action("findNext")->trigger();  // F3
    QCOMPARE(w.scene()->selectedNodes().front(), second);
    // No match: the status bar says so.
    edit->clear();
    QTest::keyClicks(edit, "no such node");
    QVERIFY(!w.findNext());
    QVERIFY2(w.statusMessage().contains("No node"), qPrintable(w.statusMessage()));
    // ... and nothing stays selected as if it matched (a shorter query's match did).
    QVERIFY(w.scene()->selectedNodes().empty());
    // Typed on to a match, the miss is no longer what the bar says.
    edit->clear();
    QTest::keyClicks(edit, "relu");
    QVERIFY2(w.statusMessage().startsWith("Found"), qPrintable(w.statusMessage()));
    // Zoomed out past reading, the match comes in to a zoom where it can be read; nearer, the
    // user's zoom stays.
    w.view()->zoomBy(0.2 / w.view()->zoom());
    QVERIFY(w.findNext());
    QCOMPARE(w.view()->zoom(), dw::studio::GraphView::kReadableZoom);
    QVERIFY(centred(w.scene()->selectedNodes().front()));
    w.view()->zoomBy(2.0);
    const qreal near = w.view()->zoom();
    QVERIFY(w.findNext());
    QCOMPARE(w.view()->zoom(), near);
    QTest::keyClick(edit, Qt::Key_Escape);
    QVERIFY(!edit->isVisible());
    // In the Edit menu, with Save As's shortcut there too.
    QCOMPARE(w.action("saveAs")->shortcut(), QKeySequence(QStringLiteral("Ctrl+Shift+S")));
  }

  // An imported ONNX file names the window; opened at start-up, it is fitted like File > Open
  // once the window has its final size.
  void importedFileTitleAndFit() {
    QTemporaryDir dir;
    const QString onnx = dir.filePath("cnn_model.onnx");
    {
      MainWindow w(false);
      QVERIFY(w.openFile(example("fashion_mnist_cnn.dwproj")));
      QVERIFY2(w.exportOnnxTo(onnx, false), qPrintable(w.lastError()));
    }
    MainWindow w(false);
    w.show();
    QApplication::processEvents();
    QVERIFY2(w.openAtStart(onnx), qPrintable(w.lastError()));
    QVERIFY2(w.windowTitle().contains("cnn_model.onnx"), qPrintable(w.windowTitle()));
    QVERIFY(w.currentFile().isEmpty());  // Save still asks where the project goes
    // The docks settle, the window grows: the fit follows until the user touches the view.
    w.resize(1500, 950);
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(100);
    const qreal settled = w.view()->zoom();
    QVERIFY(settled >= dw::studio::GraphView::kReadableZoom - 1e-6);
    const QRectF seen = w.view()->mapToScene(w.view()->viewport()->rect()).boundingRect();
    const QTransform before = w.view()->transform();
    w.view()->fitToView(dw::studio::GraphView::kReadableZoom);
    QCOMPARE(w.view()->transform(), before);
    QCOMPARE(w.view()->mapToScene(w.view()->viewport()->rect()).boundingRect(), seen);
    // Once the user zooms, a resize leaves the view alone.
    w.view()->zoomBy(1.25);
    const qreal zoomed = w.view()->zoom();
    w.resize(1300, 900);
    QTest::qWait(50);
    QCOMPARE(w.view()->zoom(), zoomed);
    // Saved, the project's name replaces the import's.
    QVERIFY(w.saveTo(dir.filePath("saved.dwproj")));
    QVERIFY2(w.windowTitle().startsWith("saved.dwproj"), qPrintable(w.windowTitle()));
  }

  void newNodesAreNamedAfterTheirType() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId a = placeFromPalette(w, "deepwire.metrics", "SparseCategoricalAccuracy");
    const dw::NodeId b = placeFromPalette(w, "deepwire.metrics", "SparseCategoricalAccuracy");
    const dw::NodeId dense = placeFromPalette(w, "deepwire.layers", "Dense");
    const dw::NodeId relu = placeFromPalette(w, "ai.onnx", "Relu");
    QVERIFY(a && b && dense && relu);
    const dw::Graph& g = w.model()->graph();
    QCOMPARE(g.node(a)->name, std::string("sparse_categorical_accuracy"));
    QCOMPARE(g.node(b)->name, std::string("sparse_categorical_accuracy_1"));
    QCOMPARE(g.node(dense)->name, std::string("dense"));
    QVERIFY(g.node(relu)->name.empty());  // ONNX ops stay unnamed, as ONNX allows
    // The name is part of the creation: one undo removes the node, and redo brings it back named.
    const int before = w.model()->undoStack()->count();
    const dw::NodeId c = placeFromPalette(w, "deepwire.metrics", "Accuracy");
    QCOMPARE(g.node(c)->name, std::string("accuracy"));
    QCOMPARE(w.model()->undoStack()->count(), before + 1);
    w.action("undo")->trigger();
    QVERIFY(!g.node(c));
    w.action("redo")->trigger();
    QCOMPARE(g.node(c)->name, std::string("accuracy"));
    // The node shows the name, and the panel edits it.
    w.scene()->selectOnly({a});
    QCOMPARE(qobject_cast<QLineEdit*>(w.params()->editor("name"))->text(),
             QStringLiteral("sparse_categorical_accuracy"));
  }
};

QTEST_MAIN(CanvasTest)
#include "canvas_tests.moc"
