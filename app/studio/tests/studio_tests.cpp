// QTest suite of deepwire studio, run on the offscreen platform (CTest label "gui").
// Each test drives the real MainWindow the way a user does (palette, canvas, panels, buttons)
// and checks the Qt-free document underneath.
#include <QAbstractSeries>
#include <QApplication>
#include <QChart>
#include <QCheckBox>
#include <QComboBox>
#include <QDate>
#include <QDialog>
#include <QDir>
#include <QDropEvent>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QMessageBox>
#include <QMimeData>
#include <QRegularExpression>
#include <QScopeGuard>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QValueAxis>
#include <QXYSeries>
#include <random>

#include <nlohmann/json.hpp>
#include "app/studio/decimated_line.h"
#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "app/studio/palette.h"
#include "app/studio/params_panel.h"
#include "app/studio/tests/studio_test_util.h"
#include "app/studio/training_panel.h"

#include "engine/training/data.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"

using dw::studio::DataPanel;
using dw::studio::MainWindow;

using namespace dw::studio::test;

namespace {

std::string json(const MainWindow& w) {
  return dw::projectToJsonText(w.model()->graph());
}

// The document with its links in a canonical order: undoing a delete restores the same links,
// though the graph lists them in a new order.
std::string canonical(const MainWindow& w) {
  const dw::Graph& g = w.model()->graph();
  dw::Graph copy(g.catalogue());
  copy.setInfo(g.info());
  for (const auto& [id, n] : g.nodes()) (void)copy.insertNode(n);
  std::vector<dw::Link> links = g.links();
  std::sort(links.begin(), links.end());
  for (const auto& l : links) (void)copy.addLink(l, false);
  return dw::projectToJsonText(copy);
}

// An image folder as a user has one: a subfolder per class of 28x28 grey PNGs.
QString pngClassFolder(const QString& dir, int perClass) {
  const QString root = dir + "/pngs";
  const char* classes[] = {"sneaker", "trouser", "tshirt"};
  for (int c = 0; c < 3; ++c) {
    QDir().mkpath(root + "/" + classes[c]);
    for (int i = 0; i < perClass; ++i) {
      QImage img(28, 28, QImage::Format_Grayscale8);
      img.fill(40 * c + 5 * i);
      img.save(QStringLiteral("%1/%2/%3.png").arg(root, classes[c]).arg(i));
    }
  }
  return root;
}

// input (image) -> Conv2D -> Flatten -> Dense(3) -> Output Train <- input_1 (label), both Inputs
// left at their default type, float[N], as a new user places them.
void buildSmallCnn(MainWindow& w) {
  using dw::Param;
  auto* m = w.model();
  const dw::NodeId image = addNode(w, "deepwire", "Input", 0, 0);
  const dw::NodeId label = addNode(w, "deepwire", "Input", 0, 300);
  const dw::NodeId conv = addNode(w, "deepwire.layers", "Conv2D", 250, 0);
  const dw::NodeId flatten = addNode(w, "deepwire.layers", "Flatten", 500, 0);
  const dw::NodeId dense = addNode(w, "deepwire.layers", "Dense", 750, 0);
  const dw::NodeId out = addNode(w, "deepwire.layers", "Output Train", 1000, 0);
  QVERIFY(m->setParam(dense, "units", Param::makeInt(3)).ok());
  QVERIFY(m->setParam(out, "loss", Param::makeString("SparseCategoricalCrossentropy")).ok());
  for (dw::Link l : std::vector<dw::Link>{{{image, 0}, {conv, 0}},
                                          {{conv, 0}, {flatten, 0}},
                                          {{flatten, 0}, {dense, 0}},
                                          {{dense, 0}, {out, 0}},
                                          {{label, 0}, {out, 1}}}) {
    dw::Status st = m->connectPorts(l);
    QVERIFY2(st.ok(), st.message().c_str());
  }
  m->validateNow();
}

}  // namespace

class StudioTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QDir(QFileInfo(MainWindow::autosavePath()).absolutePath()).removeRecursively();
    // Processes is a setting of the machine (QSettings): a test that sets it puts 1 back, and a
    // run that was cut off must not leave the others fitting under mpirun.
    QSettings().remove(QStringLiteral("training/processes"));
  }

  // The train line of a long Fit: at most `cap` drawn points however many steps come, each the
  // mean of its steps at the last of them, the stride doubling as pairs merge, the newest point
  // growing until it is whole, and clear() going back to a point a step.
  void decimatedLineKeepsMeansWithinItsCap() {
    QLineSeries series;
    dw::studio::DecimatedLine line(&series, 8);
    QList<QPointF> steps;
    for (int i = 1; i <= 8; ++i) steps.append({double(i), double(i)});
    line.append(steps);
    QCOMPARE(series.count(), 8);  // up to the cap: a point a step
    QCOMPARE(line.stride(), int64_t(1));
    // Steps 9..1000 in uneven bunches, as a window that falls behind receives them.
    int next = 9;
    for (int bunch : {1, 3, 50, 7, 300, 631}) {
      QList<QPointF> more;
      for (int k = 0; k < bunch; ++k, ++next) more.append({double(next), double(next)});
      line.append(more);
      QVERIFY2(series.count() <= 8, qPrintable(QString::number(series.count())));
    }
    QCOMPARE(next, 1001);
    const QList<QPointF> pts = series.points();
    const int64_t stride = line.stride();
    QVERIFY(stride >= 128 && (stride & (stride - 1)) == 0);
    QCOMPARE(pts.back().x(), 1000.0);
    // y = step: a whole point over steps (x - stride, x] has the mean x - (stride - 1) / 2.
    for (qsizetype i = 0; i + 1 < pts.size(); ++i) {
      QCOMPARE(pts[i].x(), double((i + 1) * stride));
      QCOMPARE(pts[i].y(), pts[i].x() - double(stride - 1) / 2);
    }
    const double openSteps = 1000.0 - double((pts.size() - 1) * stride);
    QCOMPARE(pts.back().y(), 1000.0 - (openSteps - 1) / 2);
    line.clear();
    QCOMPARE(series.count(), 0);
    line.append({{1.0, 5.0}, {2.0, 6.0}});
    QCOMPARE(series.count(), 2);
    QCOMPARE(line.stride(), int64_t(1));

    // A saved line comes back as drawn and goes on: the next step is a point of its own.
    line.restore({{4, 1}, {8, 2}, {12, 3}}, 4);
    QCOMPARE(series.count(), 3);
    QCOMPARE(line.stride(), int64_t(4));
    line.append({{13, 7}});
    QCOMPARE(series.count(), 4);
    QCOMPARE(series.points().back(), QPointF(13, 7));
    // One drawn with a larger cap merges pairs to fit this one's.
    QList<QPointF> many;
    for (int i = 1; i <= 20; ++i) many.append({double(i), double(i)});
    line.restore(many, 1);
    QVERIFY(series.count() <= 8);
    QCOMPARE(line.stride(), int64_t(4));
    QCOMPARE(series.points().front(), QPointF(4, 2.5));
  }

  void paletteFiltersAndDoubleClickPlaces() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* palette = w.palette();
    const int all = palette->visibleEntries();
    QVERIFY(all > 150);  // the whole ONNX operator set and deepwire's own nodes
    QTest::keyClicks(palette->filterEdit(), "relu");
    QVERIFY(palette->visibleEntries() < 10);
    QTreeWidgetItem* relu = palette->entry("ai.onnx", "Relu");
    QVERIFY(relu && !relu->isHidden());
    QVERIFY(relu->toolTip(0).contains("Relu"));  // the doc from the schema
    QTreeWidgetItem* conv = palette->entry("ai.onnx", "Conv");
    QVERIFY(conv && conv->isHidden());
    // The seed toolkit's spellings find their node.
    palette->setFilter("Bernouilli");
    QCOMPARE(palette->visibleEntries(), 1);
    QVERIFY(!palette->entry("ai.onnx", "Bernoulli")->isHidden());
    palette->setFilter("MicrosoftGelu");
    QCOMPARE(palette->visibleEntries(), 1);
    QVERIFY(!palette->entry("com.microsoft", "Gelu")->isHidden());
    palette->filterEdit()->clear();
    QTest::keyClicks(palette->filterEdit(), "relu");

    // Double-click: the node appears at the centre of the view.
    palette->tree()->scrollToItem(relu);
    const QRect r = palette->tree()->visualItemRect(relu);
    QTest::mouseClick(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
    QTest::mouseDClick(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
    const auto& nodes = w.model()->graph().nodes();
    QCOMPARE(nodes.size(), size_t(1));
    QCOMPARE(nodes.begin()->second.type, std::string("Relu"));
    const QPointF centre = w.view()->mapToScene(w.view()->viewport()->rect().center());
    QVERIFY(std::abs(nodes.begin()->second.position.x - centre.x()) < 200);
    QVERIFY(w.scene()->nodeItem(nodes.begin()->first));
  }

  // An operator newer than the model's opset (Mish: ai.onnx 18) is in the palette; placing it
  // raises the model's opset, says so, and one Undo takes both back.
  void newerOperatorRaisesTheOpsetUndoably() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* palette = w.palette();
    QTest::keyClicks(palette->filterEdit(), "mish");
    QTreeWidgetItem* mish = palette->entry("ai.onnx", "Mish");
    QVERIFY(mish && !mish->isHidden());
    QVERIFY(mish->toolTip(0).contains("since opset 18"));
    QCOMPARE(w.model()->graph().opset("ai.onnx"), 17);
    palette->tree()->scrollToItem(mish);
    const QRect r = palette->tree()->visualItemRect(mish);
    QTest::mouseClick(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
    QTest::mouseDClick(palette->tree()->viewport(), Qt::LeftButton, {}, r.center());
    QCOMPARE(w.model()->graph().nodes().size(), size_t(1));
    QCOMPARE(w.model()->graph().opset("ai.onnx"), 18);
    QVERIFY(w.statusMessage().contains("opset 18"));
    w.model()->undoStack()->undo();
    QCOMPARE(w.model()->graph().nodes().size(), size_t(0));
    QCOMPARE(w.model()->graph().opset("ai.onnx"), 17);
    w.model()->undoStack()->redo();
    QCOMPARE(w.model()->graph().nodes().size(), size_t(1));
    QCOMPARE(w.model()->graph().opset("ai.onnx"), 18);
  }

  void paletteDragAndDropCreatesNode() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.palette()->setFilter("Gemm");
    QTreeWidgetItem* gemm = w.palette()->entry("ai.onnx", "Gemm");
    QVERIFY(gemm);
    // The drag carries exactly what the palette's own drag would (its mimeData()).
    QModelIndex index = w.palette()->tree()->model()->index(0, 0);
    for (QTreeWidgetItemIterator it(w.palette()->tree()); *it; ++it)
      if (*it == gemm) break;
    QMimeData* data =
        w.palette()->tree()->model()->mimeData({w.palette()->tree()->indexFromItem(gemm)});
    Q_UNUSED(index);
    QVERIFY(data && data->hasFormat(dw::studio::kNodeMimeType));
    QWidget* vp = w.view()->viewport();
    const QPoint at(200, 150);
    QDragEnterEvent enter(at, Qt::CopyAction, data, Qt::LeftButton, {});
    QApplication::sendEvent(vp, &enter);
    QVERIFY(enter.isAccepted());
    QDragMoveEvent move(at, Qt::CopyAction, data, Qt::LeftButton, {});
    QApplication::sendEvent(vp, &move);
    QDropEvent drop(at, Qt::CopyAction, data, Qt::LeftButton, {});
    QApplication::sendEvent(vp, &drop);
    delete data;
    const auto& nodes = w.model()->graph().nodes();
    QCOMPARE(nodes.size(), size_t(1));
    const dw::Node& n = nodes.begin()->second;
    QCOMPARE(n.type, std::string("Gemm"));
    const QPointF expect = w.scene()->snapped(w.view()->mapToScene(at));
    QCOMPARE(n.position.x, expect.x());
    QCOMPARE(n.position.y, expect.y());
    // The new node shows its schema ports: A, B and an optional C.
    QVERIFY(w.scene()->nodeItem(n.id)->portAt(w.scene()->nodeItem(n.id)->mapFromScene(
        w.scene()->nodeItem(n.id)->portScenePos(false, 2))));
  }

  void connectByMouseAndRefuseIncompatible() {
    MainWindow w(false);
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId in = addNode(w, "deepwire", "Input", 0, 0);
    QVERIFY(w.model()->setParam(in, "type", dw::Param::makeString("float[N,4]")).ok());
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 240, 0);
    const dw::NodeId sqrt = addNode(w, "ai.onnx", "Sqrt", 240, 160);
    const dw::NodeId boolIn = addNode(w, "deepwire", "Input", 0, 160);
    QVERIFY(w.model()->setParam(boolIn, "type", dw::Param::makeString("bool[N]")).ok());
    w.view()->fitToView();
    QApplication::processEvents();

    auto* scene = w.scene();
    dragLink(w, scene->nodeItem(in)->portScenePos(true, 0),
             scene->nodeItem(relu)->portScenePos(false, 0));
    QCOMPARE(w.model()->graph().links().size(), size_t(1));
    const dw::Link link = w.model()->graph().links().front();
    QCOMPARE(link.from.node, in);
    QCOMPARE(link.to.node, relu);
    QVERIFY(scene->linkItem(link));

    // bool into Sqrt (floats only): refused, with the reason in the status bar.
    dragLink(w, scene->nodeItem(boolIn)->portScenePos(true, 0),
             scene->nodeItem(sqrt)->portScenePos(false, 0));
    QCOMPARE(w.model()->graph().links().size(), size_t(1));
    QVERIFY2(w.statusMessage().contains("nothing in common"), qPrintable(w.statusMessage()));
    // A cycle is refused too.
    QVERIFY(!scene->tryConnect(relu, {true, 0}, relu, {false, 0}));
    QVERIFY(w.model()->connectPorts({{relu, 0}, {sqrt, 0}}).ok());
    QVERIFY(!scene->tryConnect(sqrt, {true, 0}, relu, {false, 0}));
    QVERIFY(w.statusMessage().contains("already connected") || w.statusMessage().contains("cycle"));

    // Shapes are inferred once the graph is valid: the link shows its tensor type.
    const dw::NodeId out = addNode(w, "deepwire", "Output", 480, 0);
    QVERIFY(w.model()->connectPorts({{sqrt, 0}, {out, 0}}).ok());
    QVERIFY(w.model()->removeItems({boolIn}, {}).ok());
    w.model()->validateNow();
    QVERIFY2(w.model()->problems().empty(),
             w.model()->problems().empty() ? "" : w.model()->problems().front().message.c_str());
    QCOMPARE(w.model()->linkLabel(link), QStringLiteral("float[N,4]"));
  }

  void variadicInputGrows() {
    MainWindow w(false);
    const dw::NodeId a = addNode(w, "deepwire", "Input", 0, 0);
    const dw::NodeId b = addNode(w, "deepwire", "Input", 0, 100);
    const dw::NodeId concat = addNode(w, "ai.onnx", "Concat", 200, 0);
    const int before = w.model()->graph().inputPortCount(concat);
    QVERIFY(w.model()->connectPorts({{a, 0}, {concat, 0}}).ok());
    QVERIFY(w.model()->connectPorts({{b, 0}, {concat, 1}}).ok());
    QCOMPARE(w.model()->graph().inputPortCount(concat), 3);
    QVERIFY(before < 3);
    // The item grew with the model: its third port is hit-testable.
    auto* item = w.scene()->nodeItem(concat);
    auto hit = item->portAt(item->mapFromScene(item->portScenePos(false, 2)));
    QVERIFY(hit && !hit->output && hit->port == 2);
  }

  // A parameter with no default shows empty, with "required" or "unset" in grey, until it is
  // given; a spin box would show a 0 that was never set.
  void parametersWithoutDefaultShowEmpty() {
    MainWindow w(false);
    w.show();
    const dw::NodeId concat = addNode(w, "ai.onnx", "Concat", 0, 0);
    const dw::NodeId bernoulli = addNode(w, "ai.onnx", "Bernoulli", 240, 0);
    w.scene()->selectOnly({concat});
    auto* axis = qobject_cast<QLineEdit*>(w.params()->editor("axis"));
    QVERIFY(axis);
    QCOMPARE(axis->text(), QString());
    QCOMPARE(axis->placeholderText(), QStringLiteral("required"));
    axis->setText("-1");
    axis->setModified(true);
    emit axis->editingFinished();
    QCOMPARE(w.model()->graph().param(concat, "axis")->asInt(), int64_t(-1));
    QCOMPARE(axis->text(), QStringLiteral("-1"));

    w.scene()->selectOnly({bernoulli});
    auto* seed = qobject_cast<QLineEdit*>(w.params()->editor("seed"));
    QVERIFY(seed);
    QCOMPARE(seed->text(), QString());
    QCOMPARE(seed->placeholderText(), QStringLiteral("unset"));
    QVERIFY(!w.model()->graph().node(bernoulli)->params.count("seed"));
    seed->setText("2.5e1");
    seed->setModified(true);
    emit seed->editingFinished();
    QCOMPARE(w.model()->graph().param(bernoulli, "seed")->asFloat(), 25.0);
    // Emptied again: nothing is applied (the reset button unsets it).
    seed->setText("");
    seed->setModified(true);
    emit seed->editingFinished();
    QCOMPARE(w.model()->graph().param(bernoulli, "seed")->asFloat(), 25.0);
  }

  void editParametersUndoRedoEverything() {
    MainWindow w(false);
    w.show();
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    std::vector<std::string> states{canonical(w)};
    const dw::Graph& g = w.model()->graph();
    const dw::NodeId flatten = findByName(g, "flatten");
    const dw::NodeId fc1 = findByName(g, "fc1");
    QVERIFY(flatten && fc1);

    // Parameter edits through the generated editors.
    w.scene()->selectOnly({flatten});
    QCOMPARE(w.params()->node(), flatten);
    auto* axis = qobject_cast<QSpinBox*>(w.params()->editor("axis"));
    QVERIFY(axis);
    axis->setValue(2);
    QCOMPARE(w.model()->graph().param(flatten, "axis")->asInt(), int64_t(2));
    states.push_back(canonical(w));

    w.scene()->selectOnly({fc1});
    auto* alpha = qobject_cast<QDoubleSpinBox*>(w.params()->editor("alpha"));
    QVERIFY(alpha);
    alpha->setValue(0.5);
    QCOMPARE(w.model()->graph().param(fc1, "alpha")->asFloat(), 0.5);
    states.push_back(canonical(w));
    auto* transB = qobject_cast<QCheckBox*>(w.params()->editor("transB"));
    QVERIFY(transB && transB->isChecked());
    // Reset to default: transB back to 0 (the schema's default), shown by the editor.
    QVERIFY(w.params()->resetButton("transB")->isEnabled());
    qobject_cast<QToolButton*>(w.params()->resetButton("transB"))->click();
    QVERIFY(!w.model()->graph().node(fc1)->params.count("transB"));
    QVERIFY(!transB->isChecked());
    states.push_back(canonical(w));

    // Rename and lda coeff (common fields).
    auto* name = qobject_cast<QLineEdit*>(w.params()->editor("name"));
    name->setText("dense1");
    name->setModified(true);
    emit name->editingFinished();
    QCOMPARE(w.model()->graph().node(fc1)->name, std::string("dense1"));
    states.push_back(canonical(w));
    qobject_cast<QDoubleSpinBox*>(w.params()->editor("lda coeff"))->setValue(0.25);
    QCOMPARE(w.model()->graph().node(fc1)->ldaCoeff, 0.25);
    states.push_back(canonical(w));

    // A refused value leaves no trace: a negative Initializer shape.
    const dw::NodeId weight = findByName(g, "fc1.weight");
    w.scene()->selectOnly({weight});
    auto* shape = w.params()->editor("shape")->findChild<QLineEdit*>();
    QVERIFY(shape);
    shape->setText("256, -1");
    shape->setModified(true);
    emit shape->editingFinished();
    QCOMPARE(w.model()->graph().param(weight, "shape")->asInts(), (std::vector<int64_t>{256, 784}));
    QVERIFY(w.statusMessage().contains(">= 0"));
    QCOMPARE(canonical(w), states.back());
    // Initializer status (a combo from the catalogue's allowed values).
    auto* status = qobject_cast<QComboBox*>(w.params()->editor("status"));
    QVERIFY(status);
    status->setCurrentText("Frozen");
    emit status->activated(status->currentIndex());
    QCOMPARE(w.model()->graph().param(weight, "status")->asString(), std::string("Frozen"));
    states.push_back(canonical(w));

    // Structural edits: create, connect, move, delete, paste.
    const dw::NodeId sig = w.placeNode("ai.onnx", "Sigmoid");
    states.push_back(canonical(w));
    QVERIFY(w.model()->connectPorts({{findByName(g, "relu2"), 0}, {sig, 0}}).ok());
    states.push_back(canonical(w));
    QVERIFY(w.model()->moveNodes({{sig, {500, 500}}}).ok());
    states.push_back(canonical(w));
    w.scene()->selectOnly({findByName(g, "relu1")});
    w.deleteSelection();
    states.push_back(canonical(w));
    w.scene()->selectOnly({sig});
    w.duplicateSelection();
    states.push_back(canonical(w));

    // Undo everything, checking each state, then redo everything.
    QAction* undo = w.action("undo");
    QAction* redo = w.action("redo");
    for (size_t i = states.size() - 1; i > 0; --i) {
      QVERIFY(undo->isEnabled());
      undo->trigger();
      QVERIFY2(canonical(w) == states[i - 1],
               qPrintable(QStringLiteral("undo to state %1 of %2: %3")
                              .arg(i - 1)
                              .arg(states.size())
                              .arg(QString::fromStdString(canonical(w)).left(0))));
    }
    QVERIFY(!undo->isEnabled());
    for (size_t i = 1; i < states.size(); ++i) {
      redo->trigger();
      QVERIFY2(canonical(w) == states[i], qPrintable(QStringLiteral("redo to state %1").arg(i)));
    }
    // The scene mirrors the model after all that: one item per node and per link.
    for (const auto& [id, n] : w.model()->graph().nodes()) {
      QVERIFY(w.scene()->nodeItem(id));
      QCOMPARE(w.scene()->nodeItem(id)->pos(), QPointF(n.position.x, n.position.y));
    }
    for (const auto& l : w.model()->graph().links()) QVERIFY(w.scene()->linkItem(l));
  }

  void moveByMouseIsOneUndoStep() {
    MainWindow w(false);
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId relu = addNode(w, "ai.onnx", "Relu", 0, 0);
    w.view()->resetTransform();
    w.view()->centerOn(0, 0);
    QApplication::processEvents();
    QWidget* vp = w.view()->viewport();
    const QPoint a = w.view()->mapFromScene(QPointF(60, 12));  // the header, not a port
    QTest::mousePress(vp, Qt::LeftButton, {}, a);
    QTest::mouseMove(vp, a + QPoint(50, 30));
    QTest::mouseMove(vp, a + QPoint(103, 61));
    QTest::mouseRelease(vp, Qt::LeftButton, {}, a + QPoint(103, 61));
    const dw::Position p = w.model()->graph().node(relu)->position;
    QCOMPARE(p.x, 100.0);  // snapped to the 20 px grid
    QCOMPARE(p.y, 60.0);
    w.action("undo")->trigger();
    QCOMPARE(w.model()->graph().node(relu)->position, (dw::Position{0, 0}));
    QCOMPARE(w.scene()->nodeItem(relu)->pos(), QPointF(0, 0));
  }

  void copyPasteKeepsLinksAndRenames() {
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    const dw::Graph& g = w.model()->graph();
    const size_t nodes = g.nodes().size(), links = g.links().size();
    w.scene()->selectOnly(
        {findByName(g, "fc1.weight"), findByName(g, "fc1.bias"), findByName(g, "fc1")});
    w.copySelection();
    w.paste();
    QCOMPARE(g.nodes().size(), nodes + 3);
    QCOMPARE(g.links().size(), links + 2);  // weight->fc1 and bias->fc1, not flatten->fc1
    QVERIFY(findByName(g, "fc1.weight_1"));
    QCOMPARE(w.scene()->selectedNodes().size(), size_t(3));
    w.cutSelection();
    QCOMPARE(g.nodes().size(), nodes);
    w.selectAll();
    QCOMPARE(w.scene()->selectedNodes().size(), nodes);
  }

  // A loss that cannot take its target is a problem on the canvas as soon as it is chosen, not
  // only when Train Step runs: MeanSquaredError on the MLP's class indices.
  void lossTargetMismatchIsAProblemBeforeTraining() {
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    dw::NodeId out = 0;
    for (const auto& [id, n] : w.model()->graph().nodes())
      if (n.type == "Output Train") out = id;
    QVERIFY(out);
    QVERIFY(w.model()->setParam(out, "loss", dw::Param::makeString("MeanSquaredError")).ok());
    QVERIFY(w.model()->resetParam(out, "from_logits").ok());
    w.model()->validateNow();
    QString all;
    bool onNode = false;
    for (const auto& p : w.model()->problems()) {
      all += QString::fromStdString(p.message) + "\n";
      onNode |= p.node == out && p.message.find("must have the same shape") != std::string::npos;
    }
    QVERIFY2(onNode, qPrintable(all));
    // Train Step says the same; choosing a loss that fits clears the message.
    auto* panel = w.training();
    QTest::mouseClick(panel->trainStepButton(), Qt::LeftButton);
    QVERIFY(waitIdle(panel));
    QVERIFY(panel->lastError().contains("must have the same shape"));
    QVERIFY(w.model()
                ->setParam(out, "loss", dw::Param::makeString("SparseCategoricalCrossentropy"))
                .ok());
    w.model()->validateNow();
    QString left;
    for (const auto& p : w.model()->problems()) left += QString::fromStdString(p.message);
    QVERIFY2(left.isEmpty(), qPrintable(left));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
  }

  // The MLP example evaluates its own test files (no validation split): the charts say "test".
  void chartsNameTheSetTheyEvaluate() {
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    QStringList names;
    for (auto* series : w.training()->lossChart()->series()) names << series->name();
    QVERIFY2(names.contains("test") && !names.contains("validation"), qPrintable(names.join(",")));
  }

  // Renaming an Input keeps its data: the Data panel's sources and conversion follow the new
  // name (and come back with Undo), and Save writes them under it; a user's rename lost them,
  // and the project failed at its first batch.
  void renamedInputKeepsItsData() {
    QTemporaryDir dir;
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    const QString images = data->pathEdit("image")->text();
    QVERIFY(images.endsWith("train-images-idx3-ubyte.gz"));
    auto* m = w.model();
    const dw::NodeId input = findByName(m->graph(), "image");
    QVERIFY(m->rename(input, "pixels").ok());
    data->refreshInputs();
    QVERIFY(!data->row("image"));
    QVERIFY(data->pathEdit("pixels"));
    QCOMPARE(data->pathEdit("pixels")->text(), images);
    const auto spec = data->spec();
    QVERIFY(std::any_of(spec.train.begin(), spec.train.end(), [](const auto& f) {
      return f.input == "pixels" && f.normalization.scale != 1.0;
    }));
    QVERIFY(std::none_of(spec.train.begin(), spec.train.end(),
                         [](const auto& f) { return f.input == "image"; }));
    const QString path = dir.filePath("renamed.dwproj");
    QVERIFY(w.saveTo(path));
    QFile saved(path);
    QVERIFY(saved.open(QIODevice::ReadOnly));
    QVERIFY(saved.readAll().contains("\"input\": \"pixels\""));
    m->undoStack()->undo();
    data->refreshInputs();
    QVERIFY(data->pathEdit("image"));
    QCOMPARE(data->pathEdit("image")->text(), images);

    // A data edit, then a rename and its Undo: the edit stands (the Undo built the row again
    // from the sources as the file had them, and the edit was lost).
    const QString other = QString(images).replace("train-images", "t10k-images");
    data->pathEdit("image", DataPanel::kTest)->setText(other + ".copy");
    emit data->pathEdit("image", DataPanel::kTest)->editingFinished();
    QCOMPARE(data->pathEdit("image", DataPanel::kTest)->text(), other + ".copy");
    QTest::qWait(1100);  // a separate step from the rename below
    QVERIFY(m->rename(input, "pixels").ok());
    data->refreshInputs();
    QCOMPARE(data->pathEdit("pixels", DataPanel::kTest)->text(), other + ".copy");
    QCOMPARE(m->undoStack()->undoText(), QStringLiteral("Rename to pixels"));
    m->undoStack()->undo();
    data->refreshInputs();
    QVERIFY(data->pathEdit("image"));
    QCOMPARE(data->pathEdit("image", DataPanel::kTest)->text(), other + ".copy");
    QCOMPARE(m->undoStack()->undoText(), QStringLiteral("Change the data"));
  }

  // A Data panel edit is an undo step of its own: Ctrl+Z after it takes it back, not the graph
  // edit before it (a user's Undo removed a link and left the data edit standing).
  void dataEditsAreUndoSteps() {
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    auto* m = w.model();
    QVERIFY(m->undoStack()->isClean());
    const dw::NodeId first = m->graph().nodes().begin()->first;
    const auto where = m->graph().node(first)->position;
    QVERIFY(m->moveNodes({{first, {where.x + 50, where.y}}}).ok());
    data->trainLimitBox()->setValue(500);
    QCOMPARE(data->spec().trainLimit, int64_t(500));
    QCOMPARE(m->undoStack()->undoText(), QStringLiteral("Change the data"));
    m->undoStack()->undo();
    QCOMPARE(data->spec().trainLimit, int64_t(0));
    QCOMPARE(data->trainLimitBox()->value(), 0);
    QCOMPARE(m->graph().node(first)->position.x, where.x + 50);  // the move stands
    m->undoStack()->undo();
    QCOMPARE(m->graph().node(first)->position.x, where.x);
    m->undoStack()->redo();
    m->undoStack()->redo();
    QCOMPARE(data->spec().trainLimit, int64_t(500));
    QCOMPARE(m->graph().node(first)->position.x, where.x + 50);
    // The sources survive the round trip.
    QVERIFY(data->pathEdit("image")->text().endsWith("train-images-idx3-ubyte.gz"));
  }

  // A label outside the loss's classes anywhere in the data stops Train Step before it runs,
  // naming the sample in its split and the files (a step found it only in its own batch, as
  // "sample 12 of the batch").
  void trainStepChecksEveryLabel() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    std::string idx("\x00\x00\x08\x01\x00\x00\x27\x10", 8);
    idx += std::string(10000, '\x03');
    idx[8 + 37] = 12;
    const QString labels = dir.filePath("bad-labels.idx");
    QVERIFY(dw::writeFileAtomic(labels.toStdString(), idx).ok());
    const QString project = exampleVariant(dir, "bad.dwproj", [&](nlohmann::json& j) {
      j["training"]["dataset"]["test"][1]["path"] = labels.toStdString();
    });
    QVERIFY(!project.isEmpty());
    MainWindow w(false);
    QVERIFY(w.openFile(project));
    auto* panel = w.training();
    QTest::mouseClick(panel->trainStepButton(), Qt::LeftButton);
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().contains("sample 37 of the test data") &&
                 panel->lastError().contains("bad-labels.idx") &&
                 panel->lastError().contains("has label 12"),
             qPrintable(panel->lastError()));
  }

  // Each split's file is read in its own format: train from NPY and test from the IDX files
  // (the CLI trained such a project; the studio read the IDX test files as NPY and refused).
  void splitsKeepTheirOwnFormats() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    using dw::engine::DType;
    using dw::engine::Tensor;
    Tensor images(DType::kUInt8, {100, 28, 28}), labels(DType::kUInt8, {100});
    for (int64_t i = 0; i < images.size(); ++i) images.data<uint8_t>()[i] = uint8_t(i * 7);
    for (int64_t i = 0; i < 100; ++i) labels.data<uint8_t>()[i] = uint8_t(i % 10);
    const QString imagesNpy = dir.filePath("images.npy"), labelsNpy = dir.filePath("labels.npy");
    QVERIFY(dw::engine::training::writeNpy(imagesNpy.toStdString(), images).ok());
    QVERIFY(dw::engine::training::writeNpy(labelsNpy.toStdString(), labels).ok());
    const QString project = exampleVariant(dir, "npy_train.dwproj", [&](nlohmann::json& j) {
      for (auto& f : j["training"]["dataset"]["train"]) {
        f["path"] = (f["input"] == "image" ? imagesNpy : labelsNpy).toStdString();
        f["format"] = "npy";
      }
      for (auto& f : j["training"]["dataset"]["test"]) f["format"] = "idx";
    });
    QVERIFY(!project.isEmpty());
    MainWindow w(false);
    DataPanel* data = openAndRead(w, project);
    QVERIFY(data);
    QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
    for (const auto& f : data->spec().test) QCOMPARE(QString::fromStdString(f.format), "idx");
    for (const auto& f : data->spec().train) QCOMPARE(QString::fromStdString(f.format), "npy");
  }

  // A test file stored otherwise than train's (flat float32 rows, already scaled, where train
  // holds 8-bit 28x28 images) gets a conversion of its own from "Convert this file", keeps it
  // through a save and a reopen, and gives it back with "Use train's conversion". The studio
  // used to read every split with the train source's conversion, and saving a project the CLI
  // trained gave its test file the train file's.
  void splitFilesGetTheirOwnConversion() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    using dw::engine::DType;
    using dw::engine::Tensor;
    // Labels as int64, where train's are uint8 read as int64: train's conversion fits them.
    Tensor images(DType::kFloat, {100, 784}), labels(DType::kInt64, {100});
    for (int64_t i = 0; i < images.size(); ++i)
      images.data<float>()[i] = float((i * 7) % 256) / 255.0f;
    for (int64_t i = 0; i < 100; ++i) labels.data<int64_t>()[i] = i % 10;
    const QString imagesNpy = dir.filePath("test-images.npy");
    const QString labelsNpy = dir.filePath("test-labels.npy");
    QVERIFY(dw::engine::training::writeNpy(imagesNpy.toStdString(), images).ok());
    QVERIFY(dw::engine::training::writeNpy(labelsNpy.toStdString(), labels).ok());
    const QString project = exampleVariant(dir, "flat_test.dwproj", [&](nlohmann::json& j) {
      for (auto& f : j["training"]["dataset"]["test"]) {
        f["path"] = (f["input"] == "image" ? imagesNpy : labelsNpy).toStdString();
        f["format"] = "npy";
      }
    });
    QVERIFY(!project.isEmpty());
    // The command line refuses the same project: scaled by 1/255 again, the test accuracy was
    // wrong without a word.
    {
      QProcess check;
      check.start(QStringLiteral(DW_BINARY_DIR "/app/cli/deepwire"), {"check", project});
      QVERIFY(check.waitForFinished(60000));
      const QString out = check.readAllStandardOutput() + check.readAllStandardError();
      QVERIFY2(check.exitCode() != 0 && out.contains("both are scaled by"), qPrintable(out));
    }
    auto testImage = [](DataPanel* data) {
      for (const auto& f : data->spec().test)
        if (f.input == "image") return f;
      return dw::engine::training::DataFileSpec{};
    };
    const QString saved = dir.filePath("saved.dwproj");
    {
      MainWindow w(false);
      DataPanel* data = openAndRead(w, project);
      QVERIFY(data);
      QVERIFY2(data->readiness().contains("the test file test-images.npy holds float32 values "
                                          "where the train file train-images-idx3-ubyte.gz holds "
                                          "uint8, and both are scaled by"),
               qPrintable(data->readiness()));
      // Each test file shows what it holds, apart from train's: the labels' counts, the
      // images' first values (flat rows are no pictures).
      QLabel* labelsPreview = data->splitPreviewLabel("label", DataPanel::kTest);
      QTRY_VERIFY(labelsPreview->isVisibleTo(data) && !labelsPreview->pixmap().isNull());
      QLabel* imagesPreview = data->splitPreviewLabel("image", DataPanel::kTest);
      QTRY_VERIFY2(imagesPreview->text().startsWith("first values: 0, 0.02745"),
                   qPrintable(imagesPreview->text()));
      QPushButton* convert = data->splitConvertButton("image", DataPanel::kTest);
      QVERIFY(convert && convert->isVisibleTo(data) && convert->isEnabled());
      QCOMPARE(convert->text(), "Convert this file");
      QVERIFY(!data->splitConvertButton("label", DataPanel::kTest)->isVisibleTo(data));
      QTest::mouseClick(convert, Qt::LeftButton);
      QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
      // Scaled already: train's 1/255 is left out, its mean and std kept.
      const auto own = testImage(data);
      QCOMPARE(own.normalization.scale, 1.0);
      QCOMPARE(own.normalization.mean, 0.286);
      QCOMPARE(own.shape, (std::vector<int64_t>{1, 28, 28}));
      QCOMPARE(data->spec().train[0].normalization.scale, 1.0 / 255.0);
      QVERIFY2(data->splitNoteLabel("image", DataPanel::kTest)->text().contains("on its own"),
               qPrintable(data->splitNoteLabel("image", DataPanel::kTest)->text()));
      auto* panel = w.training();
      panel->batchSizeBox()->setValue(50);
      panel->evalStepButton()->click();
      QVERIFY(waitIdle(panel));
      QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
      // Test labels of another length: said before any step reads them.
      const QString ownLabels = data->pathEdit("label", DataPanel::kTest)->text();
      data->pathEdit("label", DataPanel::kTest)
          ->setText("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
      emit data->pathEdit("label", DataPanel::kTest)->editingFinished();
      QVERIFY2(data->readiness().contains("hold 100 and 10,000 samples"),
               qPrintable(data->readiness()));
      data->pathEdit("label", DataPanel::kTest)->setText(ownLabels);
      emit data->pathEdit("label", DataPanel::kTest)->editingFinished();
      QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
      QVERIFY(w.saveTo(saved));
    }
    {
      MainWindow w(false);
      DataPanel* data = openAndRead(w, saved);
      QVERIFY(data);
      QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
      QCOMPARE(testImage(data).normalization.scale, 1.0);
      QCOMPARE(testImage(data).shape, (std::vector<int64_t>{1, 28, 28}));
      QPushButton* back = data->splitConvertButton("image", DataPanel::kTest);
      QCOMPARE(back->text(), "Use train's conversion");
      QTest::mouseClick(back, Qt::LeftButton);
      QCOMPARE(testImage(data).normalization.scale, 1.0 / 255.0);
      QVERIFY2(data->readiness().contains("the test file test-images.npy holds float32 values"),
               qPrintable(data->readiness()));
      w.model()->undoStack()->undo();
      QCOMPARE(testImage(data).normalization.scale, 1.0);
      QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
    }
  }

  // The validation and test files are held against the train source in the readiness the
  // Training dock shows: a file of other samples, and an input without a file in a split that
  // has its own (both passed until Eval Step failed on them).
  void splitSourcesAreChecked() {
    MainWindow w(false);
    DataPanel* data = openWithData(w);
    QVERIFY(data);
    QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
    const QString labels = data->pathEdit("label", DataPanel::kTest)->text();
    data->pathEdit("image", DataPanel::kTest)->setText(labels);
    emit data->pathEdit("image", DataPanel::kTest)->editingFinished();
    QVERIFY2(data->readiness().contains("t10k-labels-idx1-ubyte.gz gives float[N] but input "
                                        "'image' takes float[N,1,28,28], which the train source "
                                        "train-images-idx3-ubyte.gz fits"),
             qPrintable(data->readiness()));
    w.model()->undoStack()->undo();
    data->refreshInputs();
    QVERIFY2(data->readiness().isEmpty(), qPrintable(data->readiness()));
    data->pathEdit("label", DataPanel::kTest)->setText(QString());
    emit data->pathEdit("label", DataPanel::kTest)->editingFinished();
    QVERIFY2(data->readiness().contains("choose a test source for label"),
             qPrintable(data->readiness()));
  }

  // Eval Steps add their batches up until the evaluated data changes: after a switch from the
  // test files to a validation fraction the sums start again (they mixed the two splits).
  void evalStepsStartAgainOnOtherData() {
    MainWindow w(false);
    DataPanel* data = openWithData(w);
    QVERIFY(data);
    auto* panel = w.training();
    panel->batchSizeBox()->setValue(16);
    for (int i = 0; i < 2; ++i) {
      panel->evalStepButton()->click();
      QVERIFY(waitIdle(panel));
      QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    }
    // "accuracy = A (this batch B)": A over the Eval Steps since the sums started, B this one's.
    auto accuracies = [&] {
      const QRegularExpression re(
          QStringLiteral("accuracy = ([0-9.e-]+) \\(this batch ([0-9.e-]+)\\)"));
      const auto m = re.match(panel->lastResult());
      return m.hasMatch() ? std::pair{m.captured(1), m.captured(2)} : std::pair<QString, QString>{};
    };
    QVERIFY2(!accuracies().first.isEmpty(), qPrintable(panel->lastResult()));
    data->splitModeBox(DataPanel::kValidation)->setCurrentIndex(DataPanel::kFraction);
    data->splitFractionBox(DataPanel::kValidation)->setValue(0.1);
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("on a validation batch"),
             qPrintable(panel->lastResult()));
    const auto [sum, batch] = accuracies();
    QVERIFY2(!sum.isEmpty() && sum == batch, qPrintable(panel->lastResult()));
  }

  // A curve of evaluation points keeps naming the split they came from when the project's
  // evaluated split changes (the validation curve was relabelled "test").
  void evaluationCurveKeepsItsSplitName() {
    MainWindow w(false);
    DataPanel* data = openWithData(w);
    QVERIFY(data);
    auto* panel = w.training();
    auto names = [&] {
      QStringList n;
      for (auto* series : panel->lossChart()->series()) n << series->name();
      return n;
    };
    data->splitModeBox(DataPanel::kValidation)->setCurrentIndex(DataPanel::kFraction);
    data->splitFractionBox(DataPanel::kValidation)->setValue(0.1);
    QVERIFY2(names().contains("validation"), qPrintable(names().join(",")));
    data->trainLimitBox()->setValue(640);
    panel->epochsBox()->setValue(1);
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QCOMPARE(panel->seriesPoints("validation loss"), 1);
    data->splitModeBox(DataPanel::kValidation)->setCurrentIndex(DataPanel::kNone);
    QVERIFY2(names().contains("validation, then test"), qPrintable(names().join(",")));
  }

  void saveReloadCompare() {
    QTemporaryDir dir;
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_cnn.dwproj")));
    QVERIFY(w.model()->moveNodes({{w.model()->graph().nodes().begin()->first, {-40, 20}}}).ok());
    const QString path = dir.filePath("saved.dwproj");
    QVERIFY(w.saveTo(path));
    QVERIFY(w.model()->undoStack()->isClean());
    QVERIFY(w.recentFiles().contains(QFileInfo(path).absoluteFilePath()));
    MainWindow again(false);
    QVERIFY(again.openFile(path));
    QCOMPARE(json(again), json(w));
    QCOMPARE(again.model()->graph().nodes().size(), w.model()->graph().nodes().size());
  }

  // A project rewritten by another program (here another window; `deepwire train
  // --save-project` writes the same way, by rename) comes back by itself when this window has
  // nothing unsaved, the view kept where it was; with unsaved changes they are kept and the
  // status bar says how to take the file's version. Its own saves change nothing.
  void projectChangedOnDiskIsReloaded() {
    QTemporaryDir dir;
    const QString path = dir.filePath("shared.dwproj");
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_cnn.dwproj")));
    QVERIFY(w.saveTo(path));
    w.view()->scale(1.5, 1.5);
    const QTransform zoom = w.view()->transform();
    QTest::qWait(700);  // its own save is not news
    QVERIFY2(w.statusMessage().startsWith("Saved"), qPrintable(w.statusMessage()));

    MainWindow other(false);
    QVERIFY(other.openFile(path));
    const dw::NodeId first = other.model()->graph().nodes().begin()->first;
    QVERIFY(other.model()->moveNodes({{first, {-333, 77}}}).ok());
    QVERIFY(other.saveTo(path));
    QTRY_COMPARE_WITH_TIMEOUT(json(w), json(other), 5000);
    QVERIFY2(w.statusMessage().startsWith("Reloaded shared.dwproj from disk"),
             qPrintable(w.statusMessage()));
    QCOMPARE(w.view()->transform(), zoom);
    QVERIFY(w.model()->undoStack()->isClean());

    // Unsaved changes here: kept, and said.
    QVERIFY(w.model()->moveNodes({{first, {10, 10}}}).ok());
    const std::string mine = json(w);
    QVERIFY(other.model()->moveNodes({{first, {-111, 5}}}).ok());
    QVERIFY(other.saveTo(path));
    QTRY_VERIFY_WITH_TIMEOUT(w.statusMessage().contains("changed on disk"), 5000);
    QVERIFY2(w.statusMessage().contains("unsaved changes are kept"), qPrintable(w.statusMessage()));
    QCOMPARE(json(w), mine);
    // File > Reload from Disk takes the file's version.
    QVERIFY(w.reloadFromDisk());
    QCOMPARE(json(w), json(other));

    // A file that goes away is said once; Save writes it again.
    QVERIFY(QFile::remove(path));
    QTRY_VERIFY_WITH_TIMEOUT(w.statusMessage().contains("gone from the disk"), 5000);
    QVERIFY(w.saveTo(path));
    QVERIFY(QFileInfo::exists(path));
  }

  void exportOnnxPassesChecker() {
    QTemporaryDir dir;
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    const QString path = dir.filePath("mlp.onnx");
    // Without the data conversion: the model takes what the graph's Input says.
    w.action("exportDataConversion")->setChecked(false);
    QVERIFY2(w.exportOnnxTo(path, false), qPrintable(w.lastError()));
    auto m = dw::readOnnxFile(path.toStdString());
    QVERIFY(m.ok());
    dw::Status st = dw::checkOnnxModel(*m, dw::CheckLevel::Full);
    QVERIFY2(st.ok(), st.message().c_str());
    QCOMPARE(m->graph().node_size(), 6);                                // Flatten, 3 Gemm, 2 Relu
    QCOMPARE(m->graph().input(0).type().tensor_type().elem_type(), 1);  // float
    // With it: the raw IDX pixels go in (uint8[N,28,28]) and the example's scale, mean/std and
    // reshape run first.
    w.action("exportDataConversion")->setChecked(true);
    QVERIFY2(w.exportOnnxTo(path, false), qPrintable(w.lastError()));
    m = dw::readOnnxFile(path.toStdString());
    QVERIFY(m.ok());
    st = dw::checkOnnxModel(*m, dw::CheckLevel::Full);
    QVERIFY2(st.ok(), st.message().c_str());
    QCOMPARE(m->graph().node_size(), 11);  // Cast, Mul, Sub, Mul, Reshape first
    QCOMPARE(m->graph().node(0).op_type(), std::string("Cast"));
    QCOMPARE(m->graph().input(0).type().tensor_type().elem_type(), 2);  // uint8
    QCOMPARE(m->graph().input(0).type().tensor_type().shape().dim_size(), 3);
  }

  void importOnnxTestData() {
    MainWindow w(false);
    for (const char* name :
         {"test_relu", "test_gemm_default_single_elem_vector_bias", "test_concat_3d_axis_0"}) {
      const QString path =
          QStringLiteral("/usr/share/libonnx-testdata/data/node/%1/model.onnx").arg(name);
      QVERIFY2(w.openFile(path), qPrintable(w.lastError()));
      QVERIFY(w.currentFile().isEmpty());  // an import is a new, unsaved document
      const dw::Graph& g = w.model()->graph();
      QVERIFY(g.nodes().size() >= 3);
      // Auto-layout: inputs left of their users.
      for (const auto& l : g.links())
        QVERIFY(g.node(l.from.node)->position.x < g.node(l.to.node)->position.x);
      QCOMPARE(w.scene()->items().size() >= g.nodes().size() + g.links().size(), true);
      w.model()->validateNow();
      QVERIFY(w.model()->problems().empty());
    }
  }

  void corruptFilesShowAnErrorNotACrash() {
    QTemporaryDir dir;
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    const std::string before = json(w);
    const QString proj = dir.filePath("bad.dwproj");
    QFile f(proj);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"format\": \"deepwire-project\", \"version\": 1, \"nodes\": [ {\"id\": ");
    f.close();
    QVERIFY(!w.openFile(proj));
    QVERIFY2(w.lastError().contains("bad.dwproj"), qPrintable(w.lastError()));
    QCOMPARE(json(w), before);  // the open document is untouched

    const QString onnx = dir.filePath("bad.onnx");
    QFile g(onnx);
    QVERIFY(g.open(QIODevice::WriteOnly));
    g.write(QByteArray(300, '\xff'));
    g.close();
    QVERIFY(!w.openFile(onnx));
    QVERIFY(!w.lastError().isEmpty());
    QVERIFY(!w.openFile(dir.filePath("missing.dwproj")));
    QCOMPARE(json(w), before);
  }

  void autosaveRecovers() {
    QFile::remove(MainWindow::autosavePath());
    {
      MainWindow w(false);
      QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
      w.placeNode("ai.onnx", "Tanh");
      w.autosaveNow();
      QVERIFY(QFileInfo::exists(MainWindow::autosavePath(example("fashion_mnist_mlp.dwproj"))));
      // No close event: as if the process died here.
    }
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    QVERIFY(w.recoverAutosave());
    bool found = false;
    for (const auto& [id, n] : w.model()->graph().nodes()) found |= n.type == "Tanh";
    QVERIFY(found);
    QVERIFY(!w.model()->undoStack()->isClean());
    w.close();  // a normal close removes the autosave
    QVERIFY(!QFileInfo::exists(MainWindow::autosavePath(example("fashion_mnist_mlp.dwproj"))));
  }

  // Ctrl+Z while training runs says why nothing happens (the disabled action let it pass
  // without a word).
  void undoDuringTrainingSaysWhy() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.placeNode("ai.onnx", "Relu");
    w.model()->setLocked(QStringLiteral("training"));
    w.view()->setFocus();
    QTest::keyClick(w.view(), Qt::Key_Z, Qt::ControlModifier);
    QVERIFY2(w.statusMessage().startsWith("Undo and Redo wait"), qPrintable(w.statusMessage()));
    QCOMPARE(w.model()->graph().nodes().size(), size_t(1));
    w.model()->setLocked(QString());
  }

  // An example opens from where deepwire keeps it; Save makes the user's copy instead of
  // overwriting it (a trial noticed Ctrl+S would write over the shipped file).
  void saveNeverOverwritesAnExample() {
    const QString project = example("fashion_mnist_mlp.dwproj");
    const auto before = dw::readFile(project.toStdString());
    QVERIFY(before.ok());
    MainWindow w(false);
    w.show();
    QVERIFY(w.openFile(project));
    w.placeNode("ai.onnx", "Tanh");
    // Save asks where the copy goes (the dialog is cancelled here) instead of writing over it.
    bool asked = false;
    QString suggested;
    QTimer::singleShot(200, [&] {
      if (auto* d = qobject_cast<QFileDialog*>(QApplication::activeModalWidget())) {
        asked = true;
        suggested = d->selectedFiles().value(0);
        d->reject();
      }
    });
    QVERIFY(!w.save());
    QVERIFY(asked);
    QVERIFY2(!suggested.startsWith(QFileInfo(project).absolutePath()), qPrintable(suggested));
    QCOMPARE(dw::readFile(project.toStdString()).value(), *before);
    QFile::remove(MainWindow::autosavePath(project));
  }

  // After a recovery, the next document is clean again: a trial found every later one modified
  // (the recovered one's unclean mark outlived it on the emptied undo stack).
  void documentsAfterARecoveryStartClean() {
    const QString project = example("fashion_mnist_mlp.dwproj");
    {
      MainWindow w(false);
      QVERIFY(w.openFile(project));
      w.placeNode("ai.onnx", "Tanh");
      w.autosaveNow();
    }
    MainWindow w(false);
    QVERIFY(w.openFile(project));
    QVERIFY(w.recoverAutosave());
    QVERIFY(w.isWindowModified());
    w.newDocument();
    QVERIFY(w.model()->undoStack()->isClean());
    QVERIFY(!w.isWindowModified());
    QVERIFY(w.openFile(project));
    QVERIFY(!w.isWindowModified());
    QFile::remove(MainWindow::autosavePath(project));
  }

  // The autosave holds what a crash would lose besides edits: the dock's settings and the
  // trained weights (the trial's recovery came back with no data, batch 32 and no training).
  void autosaveKeepsSettingsAndTrainedWeights() {
    QTemporaryDir dir;
    QString trained, project;
    {
      MainWindow w(false);
      buildRegression(w, dir.path(), 256, true);
      project = w.currentFile();
      QFile::remove(MainWindow::autosavePath(project));
      auto* panel = w.training();
      panel->batchSizeBox()->setValue(24);
      QVERIFY(fullTrainSteps(panel, 2));
      trained = outputsOf(predicted(panel));
      QVERIFY(!trained.isEmpty());
      QVERIFY(w.model()->undoStack()->isClean());  // no edit: only training and a setting
      w.autosaveNow();
      QVERIFY(QFileInfo::exists(MainWindow::autosavePath(project)));
    }
    MainWindow w(false);
    QVERIFY(w.openFile(project));
    QVERIFY(outputsOf(predicted(w.training())) != trained);
    QVERIFY(w.recoverAutosave());
    QCOMPARE(w.training()->batchSizeBox()->value(), 24);
    QCOMPARE(outputsOf(predicted(w.training())), trained);
    QFile::remove(MainWindow::autosavePath(project));
  }

  void invalidNodeTurnsRedAndProblemSelects() {
    MainWindow w(false);
    const dw::NodeId gemm = addNode(w, "ai.onnx", "Gemm", 0, 0);
    w.model()->validateNow();
    QVERIFY(!w.model()->problemText(gemm).isEmpty());  // A and B are not connected
    QVERIFY(w.scene()->nodeItem(gemm)->toolTip().contains("required input"));
    QVERIFY(w.problemsList()->count() >= 2);
    QListWidgetItem* item = w.problemsList()->item(0);
    emit w.problemsList()->itemClicked(item);
    QCOMPARE(w.scene()->selectedNodes(), std::vector<dw::NodeId>{gemm});
  }

  // ---- Training (the engine's Trainer on the worker thread) ----

  void trainStepReportsLoss() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);
    auto* panel = w.training();
    panel->batchSizeBox()->setValue(32);
    panel->trainStepButton()->click();
    QVERIFY(panel->busy());  // the step runs on the worker; the UI keeps going
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("pred_loss"), qPrintable(panel->lastResult()));
    QCOMPARE(panel->trainPoints(), 1);
    for (int i = 0; i < 3; ++i) {
      panel->fullTrainStepButton()->click();
      QVERIFY(waitIdle(panel));
    }
    QCOMPARE(panel->trainPoints(), 4);
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY(panel->lastResult().startsWith("<b>Eval Step"));
    QVERIFY2(panel->lastResult().contains("on a validation batch"),
             qPrintable(panel->lastResult()));
    panel->logScaleBox()->setChecked(true);  // swaps the axis without losing points
    QCOMPARE(panel->trainPoints(), 4);

    // Trained weights go back into the Initializer nodes as one undo step.
    const std::string before = json(w);
    panel->writeWeightsButton()->click();
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    const dw::NodeId weight = findByName(w.model()->graph(), "weight");
    QVERIFY(weight);
    QCOMPARE(w.model()->graph().param(weight, "fill")->asString(), std::string("values"));
    QVERIFY(json(w) != before);
    w.action("undo")->trigger();
    QCOMPARE(json(w), before);
  }

  // Save As into another folder rebases the project's relative data paths there, in the file and
  // in the Data panel (a project saved elsewhere lost its data).
  void saveAsElsewhereKeepsTheData() {
    const QString data = QStringLiteral("/usr/share/datasets/fashion-mnist");
    if (!QFileInfo::exists(data + "/train-images-idx3-ubyte.gz")) QSKIP("no Fashion-MNIST");
    QTemporaryDir dir;
    for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
      QVERIFY(QFile::link(data + "/" + f, dir.filePath(f)));
    QFile example(QStringLiteral(DW_SOURCE_DIR "/resources/examples/fashion_mnist_mlp.dwproj"));
    QVERIFY(example.open(QIODevice::ReadOnly));
    QByteArray text = example.readAll();
    text.replace(data.toUtf8() + "/", "");  // relative to the project's folder
    const QString project = dir.filePath("relative.dwproj");
    QFile out(project);
    QVERIFY(out.open(QIODevice::WriteOnly));
    out.write(text);
    out.close();
    MainWindow w(false);
    QVERIFY(w.openFile(project));
    QVERIFY(w.training()->dataPanel()->readiness().isEmpty());
    QVERIFY(QDir(dir.path()).mkpath("sub"));
    QVERIFY(w.saveTo(dir.filePath("sub/moved.dwproj")));
    QFile saved(dir.filePath("sub/moved.dwproj"));
    QVERIFY(saved.open(QIODevice::ReadOnly));
    QVERIFY(saved.readAll().contains("\"../train-images-idx3-ubyte.gz\""));
    DataPanel* panel = w.training()->dataPanel();
    panel->refreshInputs();
    settle(panel);
    QVERIFY2(panel->readiness().isEmpty(), qPrintable(panel->readiness()));
  }

  // The dock shows the project's learning-rate schedule and says what it does (a trial saw
  // lr 0.05 while the CNN example's cosine decay ran), and a running Fit's settings take no
  // edits (a trial changed lr mid-Fit with no sign of whether it applied).
  void scheduleIsShownAndSettingsWaitForTheRun() {
    MainWindow w(false);
    QVERIFY(w.openFile(example("fashion_mnist_cnn.dwproj")));
    auto* panel = w.training();
    QCOMPARE(panel->scheduleBox()->currentText(), QStringLiteral("cosine"));
    QVERIFY2(panel->scheduleBox()->toolTip().contains("over 9380 optimizer steps"),
             qPrintable(panel->scheduleBox()->toolTip()));
    panel->scheduleBox()->setCurrentText(QStringLiteral("constant"));
    QCOMPARE(panel->currentConfig().optimizer.schedule.type, std::string("constant"));
    QVERIFY(panel->scheduleBox()->toolTip().contains("stays lr"));
    QVERIFY(panel->learningRateBox()->isEnabled());
    panel->fitButton()->click();
    QVERIFY(!panel->learningRateBox()->isEnabled());
    QVERIFY(!panel->scheduleBox()->isEnabled());
    QVERIFY(!panel->batchSizeBox()->isEnabled());
    panel->stopButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY(panel->learningRateBox()->isEnabled());
    QVERIFY(panel->scheduleBox()->isEnabled());
  }

  // A model from before IR version 4 lists its weights as inputs too: Predict runs them with
  // their values, given data for the real input alone (a .pb, as the ONNX test data stores it);
  // a trial's imported test_Conv2d asked for data for its weight '1'.
  void predictRunsAnOldModelOnItsTestData() {
    const QString root =
        QStringLiteral("/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d");
    if (!QFileInfo::exists(root + "/model.onnx")) QSKIP("no ONNX backend test data");
    MainWindow w(false);
    QVERIFY(w.openFile(root + "/model.onnx"));
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    QLineEdit* path = data->pathEdit("0");
    QVERIFY(path);
    path->clear();
    QTest::keyClicks(path, root + "/test_data_set_0/input_0.pb");
    QTest::keyClick(path, Qt::Key_Return);
    settle(data);
    QVERIFY2(data->fitLabel("0")->text().contains("Fits"),
             qPrintable(data->infoLabel("0")->text() + data->fitLabel("0")->text()));
    auto* panel = w.training();
    panel->predictButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("<b>Predict</b>"), qPrintable(panel->lastResult()));
  }

  // Predict runs the inference model on one batch, no loss involved, before any training
  // (the canvas's weights) and after (the trainer's), and says what it ran on.
  void predictShowsTheOutputs() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);
    auto* panel = w.training();
    // Every Predict runs on the same first batch, so results differ only where the weights do.
    panel->batchSizeBox()->setValue(16);
    auto predict = [&] {
      panel->predictButton()->click();
      if (!waitIdle(panel) || !panel->lastError().isEmpty()) return QString();
      return panel->lastResult();
    };
    const QString untrained = predict();
    QVERIFY2(untrained.startsWith("<b>Predict</b> on the first ") &&
                 untrained.contains(" validation samples") && untrained.contains("pred: float32["),
             qPrintable(untrained + panel->lastError()));
    QCOMPARE(predict(), untrained);
    // A regression shows its targets beside the predictions.
    QVERIFY2(untrained.contains(" (target): "), qPrintable(untrained));
    QCOMPARE(panel->trainPoints(), 0);
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    const QString trained = predict();
    QVERIFY2(!trained.isEmpty() && trained != untrained, qPrintable(trained));
    // The weights of the latest step, not those of the last Predict.
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    const QString again = predict();
    QVERIFY2(!again.isEmpty() && again != trained, qPrintable(again));
  }

  void stopDuringFit() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 4096);
    auto* panel = w.training();
    panel->batchSizeBox()->setValue(1);
    panel->epochsBox()->setValue(1000);
    panel->fitButton()->click();
    QVERIFY(panel->stopButton()->isEnabled());
    // Let it train a little, then stop: it must come back well before 1000 epochs.
    QElapsedTimer t;
    t.start();
    while (panel->trainPoints() < 2 && t.elapsed() < 60000) QTest::qWait(10);
    QVERIFY(panel->busy());
    panel->stopButton()->click();
    QVERIFY(waitIdle(panel, 30000));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("stopped"), qPrintable(panel->lastResult()));
    QVERIFY(panel->fitButton()->isEnabled());
  }

  void trainingErrorShowsInDock() {
    MainWindow w(false);
    addNode(w, "ai.onnx", "Relu", 0, 0);  // no loss, no data
    w.training()->trainStepButton()->click();
    QVERIFY(waitIdle(w.training()));
    QVERIFY(!w.training()->lastError().isEmpty());
    QVERIFY(w.training()->trainStepButton()->isEnabled());
  }

  // Log scale: QLogValueAxis labels only the powers of its base, and base 10 over a loss
  // between 3 and 6 labelled nothing at all.
  void logAxisLabelsAnyRange() {
    const std::vector<std::pair<double, double>> ranges = {
        {3, 6}, {0.3, 3}, {0.2, 2}, {0.03, 15}, {0.5, 0.52}, {1e-4, 10}, {1, 1}, {2.3, 2.31}};
    for (const auto& [lo, hi] : ranges) {
      const dw::studio::LogAxisRange r = dw::studio::niceLogRange(lo, hi);
      const QString what = QStringLiteral("%1..%2: base %3, %4..%5")
                               .arg(lo)
                               .arg(hi)
                               .arg(r.base)
                               .arg(r.min)
                               .arg(r.max);
      QVERIFY2(r.min <= lo && r.max >= hi, qPrintable(what));
      // The labels QLogValueAxis draws: the powers of the base within the range, "%.3g".
      QStringList labels;
      for (int k = -2000; k <= 2000; ++k) {
        const double v = std::pow(r.base, k);
        if (v >= r.min && v <= r.max) labels << QString::asprintf("%.3g", v);
      }
      QVERIFY2(labels.size() >= 3 && labels.size() <= 8,
               qPrintable(what + ": " + labels.join(" ")));
      QCOMPARE(labels.size(), r.labelledTicks);
      QCOMPARE(labels.removeDuplicates(), 0);  // every label says something different
      // The data fills a good part of the axis.
      QVERIFY2(std::log(hi * 1.02 / lo * 1.02) / std::log(r.max / r.min) > 0.3 || hi / lo < 1.05,
               qPrintable(what));
    }
  }

  // Eval Steps are single batches: charted as points of their own, never joined by a line to a
  // Fit's per-epoch validation. Epochs count on across Fits, as steps do.
  void chartsKeepEvalStepsApartAndCountEpochs() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);
    auto* panel = w.training();
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QCOMPARE(panel->seriesPoints("eval step loss"), 1);
    QCOMPARE(panel->seriesPoints("eval step metric"), 0);  // no metric on this graph
    QCOMPARE(panel->seriesPoints("validation loss"), 0);
    panel->epochsBox()->setValue(2);
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("2 epochs"), qPrintable(panel->lastResult()));
    QCOMPARE(panel->seriesPoints("validation loss"), 2);
    QCOMPARE(panel->seriesPoints("eval step loss"), 1);
    // Steps charted and no metric: the empty chart says where one comes from.
    QVERIFY2(panel->metricChart()->title().contains("deepwire.metrics"),
             qPrintable(panel->metricChart()->title()));
    // A changed setting rebuilds the trainer, whose epochs count from 0 again.
    panel->learningRateBox()->setValue(0.02);
    panel->epochsBox()->setValue(1);
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("1 epoch,"), qPrintable(panel->lastResult()));
    QCOMPARE(panel->seriesPoints("validation loss"), 3);
    const QString title = panel->lossChart()->title();
    QVERIFY2(title.contains(" of 3 "), qPrintable(title));
    QVERIFY2(!title.contains("best epoch 1 "), qPrintable(title));  // this loss only falls
    for (QAbstractSeries* s : panel->lossChart()->series())
      if (s->name() == "Eval Step") QCOMPARE(s->type(), QAbstractSeries::SeriesTypeScatter);

    // The log axis labels at least three ticks of whatever range the losses span.
    panel->logScaleBox()->setChecked(true);
    auto* y = qobject_cast<QLogValueAxis*>(panel->lossChart()->axes(Qt::Vertical).first());
    QVERIFY(y);
    int labelled = 0;
    for (int k = -2000; k <= 2000; ++k) {
      const double v = std::pow(y->base(), k);
      labelled += v >= y->min() && v <= y->max();
    }
    QVERIFY2(
        labelled >= 3,
        qPrintable(QStringLiteral("base %1, %2..%3").arg(y->base()).arg(y->min()).arg(y->max())));
  }

  // Output Train's description read "computes the chosen deepwire. losses loss of the prediction
  // against t…": a line broken after the dot of a name, and the text cut mid-word.
  void nodeDescriptionReadsAsWritten() {
    MainWindow w(false);
    w.resize(1500, 920);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const dw::NodeId out = addNode(w, "deepwire.layers", "Output Train", 0, 0);
    w.scene()->selectOnly({out});
    QApplication::processEvents();
    auto* doc = w.params()->widget()->findChild<QLabel*>(QStringLiteral("paramsDoc"));
    QVERIFY(doc);
    const QString text = doc->text();
    QVERIFY2(!text.contains(QChar(0x200B)), qPrintable(text));  // no break inside short words
    QVERIFY2(text.endsWith(QStringLiteral(". …")) || text.endsWith(QLatin1Char('.')),
             qPrintable(text));
    QVERIFY(doc->toolTip().contains("deepwire.losses loss of the prediction"));
  }

  // The Eval Step button's metrics accumulate over Eval Steps; the canvas's Eval Step node with
  // reset_metrics? on makes every step start over.
  void evalStepMetricsAccumulateOrReset() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);  // 64 validation samples: two batches of 32
    auto* m = w.model();
    dw::NodeId gemm = 0;
    for (const auto& [id, n] : m->graph().nodes())
      if (n.type == "Gemm") gemm = id;
    const dw::NodeId mse = addNode(w, "deepwire.metrics", "MeanSquaredError", 480, 200);
    QVERIFY(m->rename(mse, "mse").ok());
    for (dw::Link l : std::vector<dw::Link>{{{gemm, 0}, {mse, 0}},
                                            {{findByName(m->graph(), "y"), 0}, {mse, 1}}}) {
      dw::Status st = m->connectPorts(l);
      QVERIFY2(st.ok(), st.message().c_str());
    }
    auto* panel = w.training();
    panel->batchSizeBox()->setValue(32);
    // "mse = <accumulated> (this batch <batch>)"
    auto evalStep = [&](double& acc, double& batch) {
      panel->evalStepButton()->click();
      QVERIFY(waitIdle(panel));
      QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
      const QRegularExpression re(
          QStringLiteral("mse = ([-0-9.e+]+) \\(this batch ([-0-9.e+]+)\\)"));
      const auto match = re.match(panel->lastResult());
      QVERIFY2(match.hasMatch(), qPrintable(panel->lastResult()));
      acc = match.captured(1).toDouble();
      batch = match.captured(2).toDouble();
    };
    double a1, b1, a2, b2;
    evalStep(a1, b1);
    QCOMPARE(a1, b1);
    evalStep(a2, b2);
    QVERIFY2(std::abs(b2 - b1) > 1e-3 * b1, "the two validation batches should differ");
    QVERIFY2(std::abs(a2 - (b1 + b2) / 2) < 1e-3 * a2, qPrintable(panel->lastResult()));
    // New weights start the mean again: one over two sets of weights describes neither.
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    evalStep(a1, b1);
    QCOMPARE(a1, b1);

    const dw::NodeId step = addNode(w, "deepwire", "Eval Step", 700, 0);
    QVERIFY(m->setParam(step, "reset_metrics?", dw::Param::makeBool(true)).ok());
    for (int i = 0; i < 2; ++i) {
      evalStep(a1, b1);
      QCOMPARE(a1, b1);
    }
  }

  // ---- The Data dock and the Training dock's Data line ----

  // The trial's repro: the Data dock said "Fits" after "Change the Input" while the Training
  // dock still showed the mismatch from before it, one edit behind, since it was updated before
  // the Data panel had re-read the graph's inputs.
  void trainingDataLineFollowsEveryEdit() {
    QTemporaryDir dir;
    const QString pngs = pngClassFolder(dir.path(), 4);
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    buildSmallCnn(w);
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    QCOMPARE(data->inputNames(), QStringList({"input", "input_1"}));
    QLabel* line = w.training()->dataStatusLabel();
    for (const char* input : {"input", "input_1"}) {
      data->pathEdit(input)->setText(pngs);
      emit data->pathEdit(input)->editingFinished();
      settle(data);
    }
    QComboBox* take = data->imageTakeBox("input_1");
    take->setCurrentIndex(1);  // the class index
    emit take->activated(1);
    settle(data);
    QVERIFY2(data->fitLabel("input_1")->text().contains("✘"),
             qPrintable(data->fitLabel("input_1")->text()));
    QTRY_VERIFY2(line->text().contains("input_1"), qPrintable(line->text()));
    // Where the step buttons are while the line gives a reason; a trial found them moving
    // whenever the line changed.
    QApplication::processEvents();
    QPushButton* trainStep = w.training()->trainStepButton();
    const int buttonsAt = trainStep->mapTo(&w, QPoint()).y();

    // "Change the Input" for the labels: int64[N]. Both docks agree it fits now.
    QPushButton* change = data->changeInputButton("input_1");
    QVERIFY(change->isVisible() && change->isEnabled());
    QTest::mouseClick(change, Qt::LeftButton);
    settle(data);
    QVERIFY2(data->fitLabel("input_1")->text().contains("Fits input 'input_1' (int64[N])"),
             qPrintable(data->fitLabel("input_1")->text()));
    QTRY_VERIFY2(!line->text().contains("input_1"), qPrintable(line->text()));
    QApplication::processEvents();
    QCOMPARE(trainStep->mapTo(&w, QPoint()).y(), buttonsAt);

    // And back: an Input retyped on the canvas misfits again in both, without another edit.
    const dw::NodeId label = findByName(w.model()->graph(), "input_1");
    QVERIFY(w.model()->setParam(label, "type", dw::Param::makeString("float[N]")).ok());
    w.model()->validateNow();
    QTRY_VERIFY2(data->fitLabel("input_1")->text().contains("✘"),
                 qPrintable(data->fitLabel("input_1")->text()));
    QTRY_VERIFY2(line->text().contains("input_1"), qPrintable(line->text()));
    QCOMPARE(line->toolTip(), data->readiness());
  }

  // A file dialog carries its title inside, over the folder box: without a window manager the
  // template's samples and labels dialogs looked the same.
  void fileDialogsSayWhatTheyAreFor() {
    MainWindow w(false);
    QFileDialog d(&w, QStringLiteral("Class labels for train-images"));
    d.setOption(QFileDialog::DontUseNativeDialog);
    d.show();
    QVERIFY2(d.labelText(QFileDialog::LookIn).startsWith("Class labels for train-images"),
             qPrintable(d.labelText(QFileDialog::LookIn)));
    d.close();
  }

  // Training > Freeze Selected Weights: every selected layer (and Initializer) at once, in one
  // undo step; a trial found no way to freeze a model's many layers but one by one.
  void freezeSelectedWeightsInOneStep() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
    const dw::Graph& g = w.model()->graph();
    auto frozenLayers = [&] {  // layers and Initializers
      int n = 0;
      for (const auto& [id, node] : g.nodes())
        if (const auto p = g.param(id, "trainable"); p && !p->asBool())
          ++n;
        else if (const auto st = g.param(id, "status"); st && st->asString() == "Frozen")
          ++n;
      return n;
    };
    QCOMPARE(frozenLayers(), 0);
    QCOMPARE(w.setSelectionTrainable(false), 0);  // nothing selected
    QVERIFY2(w.statusMessage().contains("Nothing to freeze"), qPrintable(w.statusMessage()));
    w.selectAll();
    const int changed = w.setSelectionTrainable(false);
    QVERIFY(changed >= 2);
    QCOMPARE(frozenLayers(), changed);
    QVERIFY2(w.statusMessage().startsWith("Froze"), qPrintable(w.statusMessage()));
    QCOMPARE(w.setSelectionTrainable(false), 0);  // already frozen
    w.model()->undoStack()->undo();
    QCOMPARE(frozenLayers(), 0);
    w.model()->undoStack()->redo();
    QCOMPARE(frozenLayers(), changed);
    QCOMPARE(w.setSelectionTrainable(true), changed);
    QCOMPARE(frozenLayers(), 0);
    QVERIFY(w.action("freezeSelected") && w.action("unfreezeSelected"));
    // A layer: its trainable parameter.
    const dw::NodeId dense = addNode(w, "deepwire.layers", "Dense", 900, 600);
    w.scene()->selectOnly({dense});
    QCOMPARE(w.setSelectionTrainable(false), 1);
    QVERIFY(!g.param(dense, "trainable")->asBool());
    QCOMPARE(w.setSelectionTrainable(true), 1);
    QVERIFY(g.param(dense, "trainable")->asBool());
  }

  // A trial's find: an int64 label input given an image folder was left taking pixels, and
  // said it did not fit. It takes each image's class; a float input keeps the pixels.
  void imageFolderGivesClassesToALabelInput() {
    QTemporaryDir dir;
    const QString pngs = pngClassFolder(dir.path(), 4);
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    buildSmallCnn(w);
    const dw::NodeId label = findByName(w.model()->graph(), "input_1");
    QVERIFY(w.model()->setParam(label, "type", dw::Param::makeString("int64[N]")).ok());
    w.model()->validateNow();
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    for (const char* input : {"input", "input_1"}) {
      data->pathEdit(input)->setText(pngs);
      emit data->pathEdit(input)->editingFinished();
      settle(data);
    }
    QCOMPARE(data->imageTakeBox("input_1")->currentIndex(), 1);
    QCOMPARE(data->imageTakeBox("input")->currentIndex(), 0);
    QVERIFY2(data->fitLabel("input_1")->text().contains("Fits input 'input_1'"),
             qPrintable(data->fitLabel("input_1")->text()));
  }

  // An image folder for an Input left at float[N]: the advice names the shape (no dtype
  // conversion can make 1x28x28 pixels one value), and "Change the Input" keeps float, taking
  // only the images' shape, and converts the pixels (1/255), so the Conv2D after it accepts it.
  void changeInputKeepsFloatForImages() {
    QTemporaryDir dir;
    const QString pngs = pngClassFolder(dir.path(), 4);
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    buildSmallCnn(w);
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    data->pathEdit("input")->setText(pngs);
    emit data->pathEdit("input")->editingFinished();
    settle(data);
    QVERIFY2(data->infoLabel("input")->text().contains("12 samples"),
             qPrintable(data->infoLabel("input")->text()));
    const QString fit = data->fitLabel("input")->text();
    QVERIFY2(fit.contains("shapes differ") && !fit.contains("convert the dtype"), qPrintable(fit));
    QVERIFY2(fit.contains("float[N,1,28,28]"), qPrintable(fit));
    QPushButton* change = data->changeInputButton("input");
    QVERIFY(change->isVisible() && change->isEnabled());
    QVERIFY2(change->toolTip().contains("float[N,1,28,28]"), qPrintable(change->toolTip()));
    QTest::mouseClick(change, Qt::LeftButton);
    settle(data);
    const dw::Graph& g = w.model()->graph();
    QCOMPARE(g.param(findByName(g, "input"), "type")->asString(), std::string("float[N,1,28,28]"));
    QVERIFY2(data->fitLabel("input")->text().contains("Fits"),
             qPrintable(data->fitLabel("input")->text()));
    QCOMPARE(data->spec().train.front().normalization.scale, 1.0 / 255.0);
    w.model()->validateNow();
    const auto& problems = w.model()->problems();
    QVERIFY2(problems.empty(), problems.empty() ? "" : problems.front().message.c_str());
    // One sample reads "1 sample".
    QTemporaryDir one;
    const QString single = one.filePath("single");
    QDir().mkpath(single + "/only");
    QImage img(28, 28, QImage::Format_Grayscale8);
    img.fill(9);
    QVERIFY(img.save(single + "/only/0.png"));
    data->pathEdit("input")->setText(single);
    emit data->pathEdit("input")->editingFinished();
    settle(data);
    QVERIFY2(data->infoLabel("input")->text().contains("1 sample ·"),
             qPrintable(data->infoLabel("input")->text()));
  }

  // Eval Step says which split it evaluated; without validation or test data, that it was a
  // training batch (the trial read a training accuracy as the model's).
  void evalStepNamesTheSplit() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 128);
    auto* panel = w.training();
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastResult().contains("on a validation batch"),
             qPrintable(panel->lastResult()));
    panel->dataPanel()->splitModeBox(DataPanel::kValidation)->setCurrentIndex(DataPanel::kNone);
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("evaluated on a training batch"),
             qPrintable(panel->lastResult()));
    QVERIFY(w.statusMessage().contains("validation split or test data"));
  }

  // Searching a layer's name lists the Keras-style layer first and no gradient op, unless the
  // search names one in full or names the gradient domain.
  void paletteRanksLayersFirstAndHidesGradients() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* palette = w.palette();
    for (const char* name : {"Dropout", "BatchNormalization"}) {
      palette->setFilter(QString::fromLatin1(name));
      QTreeWidget* tree = palette->tree();
      QTreeWidgetItem* first = nullptr;
      for (int d = 0; d < tree->topLevelItemCount() && !first; ++d)
        if (!tree->topLevelItem(d)->isHidden()) first = tree->topLevelItem(d);
      QVERIFY(first);
      QCOMPARE(first->text(0), QStringLiteral("deepwire.layers"));
      QCOMPARE(tree->currentItem(), palette->entry("deepwire.layers", name));
      for (int d = 0; d < tree->topLevelItemCount(); ++d)
        if (tree->topLevelItem(d)->text(0) == "com.deepwire.grad")
          QVERIFY2(tree->topLevelItem(d)->isHidden(), name);
      // ai.onnx's exact match comes before contributed partial ones.
      int onnx = -1, microsoft = -1;
      for (int d = 0; d < tree->topLevelItemCount(); ++d) {
        if (tree->topLevelItem(d)->text(0) == "ai.onnx") onnx = d;
        if (tree->topLevelItem(d)->text(0) == "com.microsoft") microsoft = d;
      }
      QVERIFY(onnx > 0 && onnx < microsoft);
    }
    palette->setFilter("DropoutGrad");
    QTreeWidgetItem* grad = palette->entry("com.deepwire.grad", "DropoutGrad");
    QVERIFY(grad && !grad->isHidden());
    palette->setFilter("com.deepwire.grad");
    QVERIFY(palette->visibleEntries() > 5);
    QVERIFY(!grad->isHidden());
    // Cleared: the catalogue's order again, every entry there.
    const int all = [&] {
      palette->setFilter(QString());
      return palette->visibleEntries();
    }();
    QCOMPARE(palette->tree()->topLevelItem(0)->text(0), QStringLiteral("ai.onnx"));
    QVERIFY(all > 150);
    // Enter in the search places the best match.
    QTest::keyClicks(palette->filterEdit(), "Dropout");
    QTest::keyClick(palette->filterEdit(), Qt::Key_Return);
    QCOMPARE(w.model()->graph().nodes().size(), size_t(1));
    QCOMPARE(w.model()->graph().nodes().begin()->second.domain, std::string("deepwire.layers"));
  }

  // The recovery prompt names the document the autosave holds and when it was written.
  // Ctrl+Z right after a Parameters field was edited (Enter) undoes that edit, whether the field
  // still has the focus or the canvas was clicked: the first press did nothing in a user trial
  // (the field took it for its own, empty, undo history).
  void firstUndoAfterAFieldEditUndoesIt() {
    MainWindow w(false);
    w.show();
    QApplication::setActiveWindow(&w);
    QVERIFY(QTest::qWaitForWindowActive(&w));
    const dw::NodeId dense = w.placeNode("deepwire.layers", "Dense", QPointF(0, 0));
    QVERIFY(dense);
    for (bool clickCanvas : {false, true}) {
      w.scene()->selectOnly({dense});
      auto* names =
          qobject_cast<dw::studio::ListEdit*>(w.params()->editor("specified_outputs_name"));
      QVERIFY(names);
      const int before = w.model()->undoStack()->index();
      names->lineEdit()->setFocus();
      QTest::keyClicks(names->lineEdit(), "scores");
      QTest::keyClick(names->lineEdit(), Qt::Key_Return);
      QCOMPARE(w.model()->graph().node(dense)->specifiedOutputsName,
               std::vector<std::string>{"scores"});
      QCOMPARE(w.model()->undoStack()->index(), before + 1);
      if (clickCanvas) {
        const QPointF far = w.scene()->nodeItem(dense)->sceneBoundingRect().bottomRight();
        QTest::mouseClick(w.view()->viewport(), Qt::LeftButton, {},
                          w.view()->mapFromScene(far + QPointF(300, 300)));
        QCOMPARE(QApplication::focusWidget(), static_cast<QWidget*>(w.view()));
      }
      QWidget* focus = QApplication::focusWidget() ? QApplication::focusWidget() : &w;
      QTest::keyClick(focus, Qt::Key_Z, Qt::ControlModifier);
      QVERIFY2(w.model()->graph().node(dense)->specifiedOutputsName.empty(),
               clickCanvas ? "after a click on the canvas" : "with the focus in the field");
      QCOMPARE(w.model()->undoStack()->index(), before);
    }
  }

  // Closing the window during a Fit asks, stops the training and saves what it learned: the
  // save wrote the weights from before the Fit (a trial's Quit > Save kept three more epochs of
  // curves and none of their training).
  void closingDuringAFitSavesWhatItLearned() {
    QTemporaryDir dir;
    MainWindow w(true);
    buildRegression(w, dir.path(), 4096, true);
    const QString path = dir.filePath("fit.dwproj");
    QVERIFY(w.saveTo(path));
    auto hiddenWeights = [&] {
      QFile f(path);
      if (!f.open(QIODevice::ReadOnly)) return std::string();
      const auto j = nlohmann::json::parse(f.readAll().toStdString());
      for (const auto& n : j["nodes"])
        if (n.value("name", "") == "hidden" && n.contains("weights")) return n["weights"].dump();
      return std::string();
    };
    const std::string untrained = hiddenWeights();
    auto* panel = w.training();
    panel->epochsBox()->setValue(1000);
    panel->batchSizeBox()->setValue(4);
    panel->fitButton()->click();
    QTRY_VERIFY2(panel->trainPoints() > 20,
                 qPrintable(QString::number(panel->trainPoints()) + " " + panel->lastError() +
                            (panel->busy() ? " busy" : " idle")));
    QVERIFY(panel->busy());
    bool asked = false;
    QTimer::singleShot(200, [&asked] {
      if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
        asked = box->text().contains("is training");
        box->button(QMessageBox::Save)->click();
      }
    });
    QVERIFY(w.close());
    QVERIFY(asked);
    QVERIFY(!panel->busy());
    const std::string trained = hiddenWeights();
    QVERIFY2(!trained.empty(), qPrintable(w.statusMessage() + " | " + panel->lastResult()));
    QVERIFY(trained != untrained);
  }

  // Ctrl+S works once the Export dialog is closed: the window takes the keyboard back.
  void saveShortcutWorksAfterTheExportDialog() {
    MainWindow w(false);
    w.show();
    QApplication::setActiveWindow(&w);
    QVERIFY(QTest::qWaitForWindowActive(&w));
    w.placeNode("deepwire", "Input", QPointF(0, 0));
    auto closeDialog = [](bool* seen) {
      QTimer::singleShot(200, [seen] {
        if (auto* d = qobject_cast<QDialog*>(QApplication::activeModalWidget())) {
          *seen = true;
          d->reject();
        }
      });
    };
    bool exportShown = false;
    closeDialog(&exportShown);
    w.action("exportOnnx")->trigger();
    QVERIFY(exportShown);
    QTRY_COMPARE(QApplication::activeWindow(), static_cast<QWidget*>(&w));
    QTRY_VERIFY(QApplication::focusWidget() && QApplication::focusWidget()->window() == &w);
    bool saveShown = false;
    closeDialog(&saveShown);
    QTest::keyClick(QApplication::focusWidget(), Qt::Key_S, Qt::ControlModifier);
    QVERIFY(saveShown);
  }

  // Changing a Dense layer's seed starts that layer again in the live training session too: in a
  // user trial, weights blown up by lr = 5 came back after both seeds were changed.
  void seedChangeRestartsTheTrainedLayers() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    auto* m = w.model();
    panel->batchSizeBox()->setValue(16);
    const dw::NodeId hidden = findByName(m->graph(), "hidden");
    const dw::NodeId head = findByName(m->graph(), "head");
    QVERIFY(hidden && head);
    auto setSeeds = [&](int64_t seed) {
      for (dw::NodeId id : {hidden, head})
        QVERIFY(m->setParam(id, "seed", dw::Param::makeInt(seed)).ok());
    };
    setSeeds(7);
    const QString fresh7 = predicted(panel);
    setSeeds(3);
    const QString fresh3 = predicted(panel);
    QVERIFY2(!fresh7.isEmpty() && fresh7 != fresh3, qPrintable(fresh7 + panel->lastError()));
    panel->learningRateBox()->setValue(5);
    QVERIFY(fullTrainSteps(panel, 3));
    QVERIFY(predicted(panel) != fresh3);
    panel->learningRateBox()->setValue(0.05);
    setSeeds(7);
    QCOMPARE(predicted(panel), fresh7);
    // The trainer itself starts again from there (a Train Step leaves the weights as they are).
    panel->trainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QCOMPARE(predicted(panel), fresh7);
    // And what Save writes is those weights, not the blown-up ones.
    QVERIFY(w.saveTo(dir.path() + "/seeded.dwproj"));
    QVERIFY(w.openFile(dir.path() + "/seeded.dwproj"));
    QCOMPARE(predicted(panel), fresh7);
  }

  // A loss that grows a hundredfold short of NaN is called divergence after the step that saw
  // it, ahead of the step's result (the trial's Adam at lr 5 reached 1e5 without a word).
  void growingLossWarnsAfterTheStep() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    panel->batchSizeBox()->setValue(16);
    panel->learningRateBox()->setValue(50);
    QSignalSpy status(panel, &dw::studio::TrainingPanel::statusMessage);
    bool warned = false;
    for (int i = 0; i < 6 && !warned; ++i) {
      panel->fullTrainStepButton()->click();
      QVERIFY(waitIdle(panel));
      QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
      for (const auto& args : status)
        warned = warned || args.at(0).toString().startsWith("Warning: the training loss grew from");
    }
    QVERIFY(warned);
  }

  // Edits that leave the weights' shapes alone never lose what was trained: the trial's
  // sequence (Fit, rename the output and Predict, Undo twice and Redo, delete a node and undo it,
  // accelerator cpu -> auto) ended with the untrained loss.
  void trainedWeightsSurviveEditsUndoAndTheAccelerator() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    auto* m = w.model();
    panel->batchSizeBox()->setValue(16);
    const QString untrained = outputsOf(predicted(panel));
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    const dw::NodeId out = findByName(m->graph(), "pred");
    QVERIFY(m->rename(out, "prediction").ok());
    const QString trained = outputsOf(predicted(panel));
    QVERIFY2(!trained.isEmpty() && trained != untrained, qPrintable(trained));
    w.action("undo")->trigger();
    w.action("undo")->trigger();
    w.action("redo")->trigger();
    QCOMPARE(m->graph().node(out)->name, std::string("prediction"));
    QCOMPARE(outputsOf(predicted(panel)), trained);
    const dw::NodeId y = findByName(m->graph(), "y");
    QVERIFY(m->removeItems({y}, {}).ok());
    w.action("undo")->trigger();
    QVERIFY(m->graph().node(y));
    auto* acc = panel->acceleratorBox();
    acc->setCurrentIndex(acc->findData(QStringLiteral("auto")));
    // A Train Step builds a new trainer (it leaves the weights as they are): Predict then runs the
    // trainer's weights.
    panel->trainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QCOMPARE(outputsOf(predicted(panel)), trained);
    // Write Weights undone: the trainer keeps them, and Save writes them again.
    panel->writeWeightsButton()->click();
    QVERIFY(!m->graph().node(findByName(m->graph(), "hidden"))->weights.empty());
    w.action("undo")->trigger();
    QVERIFY(m->graph().node(findByName(m->graph(), "hidden"))->weights.empty());
    QVERIFY(w.saveTo(dir.path() + "/kept.dwproj"));
    QVERIFY(!m->graph().node(findByName(m->graph(), "hidden"))->weights.empty());
  }

  // A change of units restarts its layer (and the next, whose input it shapes) from the seed; its
  // undo brings the trained values back, also after a step ran on the new shape: the trial's undo
  // after an Eval Step left the MLP untrained, and saving would have kept it so.
  void undoOfAShapeEditBringsTheTrainedLayersBack() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    auto* m = w.model();
    panel->batchSizeBox()->setValue(16);
    QVERIFY(fullTrainSteps(panel, 3));
    const QString trained = outputsOf(predicted(panel));
    QVERIFY(!trained.isEmpty());
    const dw::NodeId hidden = findByName(m->graph(), "hidden");
    QVERIFY(m->setParam(hidden, "units", dw::Param::makeInt(5)).ok());
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY(outputsOf(predicted(panel)) != trained);
    w.action("undo")->trigger();
    QCOMPARE(m->graph().param(hidden, "units")->asInt(), int64_t(8));
    QCOMPARE(outputsOf(predicted(panel)), trained);
    panel->evalStepButton()->click();  // a trainer for the shape again, from those values
    QVERIFY(waitIdle(panel));
    QCOMPARE(outputsOf(predicted(panel)), trained);
    QVERIFY(w.saveTo(dir.path() + "/undone.dwproj"));
    QVERIFY(w.openFile(dir.path() + "/undone.dwproj"));
    QCOMPARE(outputsOf(predicted(panel)), trained);
  }

  // While a job runs, the model refuses edits (moves aside) with a reason and undo waits: the
  // trial's edit during a Fit was trained past, and the run's weights and the earlier ones lost.
  void editsWaitWhileAJobRuns() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 4096, true);
    auto* panel = w.training();
    auto* m = w.model();
    panel->batchSizeBox()->setValue(1);
    panel->epochsBox()->setValue(1000);
    const dw::NodeId hidden = findByName(m->graph(), "hidden");
    QVERIFY(m->setParam(hidden, "units", dw::Param::makeInt(8)).ok());
    QVERIFY(m->rename(hidden, "hidden").ok());
    QVERIFY(m->moveNodes({{hidden, {260, 20}}}).ok());
    QVERIFY(w.action("undo")->isEnabled());
    panel->fitButton()->click();
    QVERIFY(panel->busy());
    const dw::Status refused = m->setParam(hidden, "units", dw::Param::makeInt(5));
    QVERIFY(!refused.ok());
    QVERIFY2(QString::fromStdString(refused.message()).contains("press Stop"),
             refused.message().c_str());
    QVERIFY(!m->removeItems({hidden}, {}).ok());
    QCOMPARE(m->graph().param(hidden, "units")->asInt(), int64_t(8));
    QVERIFY(m->moveNodes({{hidden, {300, 40}}}).ok());
    QVERIFY(!w.action("undo")->isEnabled());
    panel->stopButton()->click();
    QVERIFY(waitIdle(panel, 30000));
    QVERIFY(w.action("undo")->isEnabled());
    QVERIFY(m->setParam(hidden, "units", dw::Param::makeInt(5)).ok());
  }

  // The trial typed -0.5 as the learning rate: it showed 0, and training ran without a word.
  void learningRateRefusesASignAndWarnsAtZero() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);
    auto* panel = w.training();
    QDoubleSpinBox* lr = panel->learningRateBox();
    lr->selectAll();
    QTest::keyClicks(lr, "-0.5");
    QTest::keyClick(lr, Qt::Key_Return);
    QCOMPARE(lr->value(), 0.5);
    lr->setValue(0);
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastResult().contains("learning rate is 0"), qPrintable(panel->lastResult()));
  }

  // Training > Reset Weights: every layer back to its seeded weights, undoably.
  void resetWeightsStartsAgainFromTheSeeds() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    auto* m = w.model();
    panel->batchSizeBox()->setValue(16);
    const QString untrained = predicted(panel);
    for (int i = 0; i < 2; ++i) {
      panel->fullTrainStepButton()->click();
      QVERIFY(waitIdle(panel));
    }
    QVERIFY(predicted(panel) != untrained);
    panel->writeWeightsButton()->click();
    const dw::NodeId hidden = findByName(m->graph(), "hidden");
    QVERIFY(!m->graph().node(hidden)->weights.empty());
    QVERIFY(w.action("resetWeights"));
    w.action("resetWeights")->trigger();
    QVERIFY(m->graph().node(hidden)->weights.empty());
    QCOMPARE(predicted(panel), untrained);
    panel->trainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QCOMPARE(predicted(panel), untrained);
    w.action("undo")->trigger();
    QVERIFY(!m->graph().node(hidden)->weights.empty());
    // Trained values the graph did not hold yet come back with Undo too (a trial's Reset lost
    // a Fit for good).
    for (int i = 0; i < 2; ++i) {
      panel->fullTrainStepButton()->click();
      QVERIFY(waitIdle(panel));
    }
    const QString trained = predicted(panel);
    QVERIFY(trained != untrained);
    QVERIFY(panel->hasUnsyncedWeights());
    w.action("resetWeights")->trigger();
    QCOMPARE(predicted(panel), untrained);
    QCOMPARE(m->undoStack()->undoText(), QStringLiteral("Reset weights"));
    w.action("undo")->trigger();
    QCOMPARE(predicted(panel), trained);
  }

  // The Accelerator choice travels with the project (no Accelerator node on this canvas), and
  // with auto the status line says where training went.
  void acceleratorIsSavedWithTheProject() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);
    auto* acc = w.training()->acceleratorBox();
    QCOMPARE(acc->currentData().toString(), QStringLiteral("cpu"));
    acc->setCurrentIndex(acc->findData(QStringLiteral("auto")));
    const QString path = dir.path() + "/auto.dwproj";
    QVERIFY(w.saveTo(path));
    QVERIFY(w.openFile(path));
    QCOMPARE(w.training()->acceleratorBox()->currentData().toString(), QStringLiteral("auto"));
    w.training()->fullTrainStepButton()->click();
    QVERIFY(waitIdle(w.training()));
    QVERIFY2(w.training()->lastError().isEmpty(), qPrintable(w.training()->lastError()));
    QVERIFY2(w.statusMessage().contains("Accelerator auto: ") &&
                 w.statusMessage().contains("running on"),
             qPrintable(w.statusMessage()));
    acc = w.training()->acceleratorBox();
    acc->setCurrentIndex(acc->findData(QStringLiteral("cpu")));
    QVERIFY(w.saveTo(path));
    QVERIFY(w.openFile(path));
    QCOMPARE(w.training()->acceleratorBox()->currentData().toString(), QStringLiteral("cpu"));
  }

  // Output Train lists every loss's parameters: Huber's delta shows for Huber only.
  void lossParametersShowForTheirLossOnly() {
    MainWindow w(false);
    w.show();
    const dw::NodeId out = w.placeNode("deepwire.layers", "Output Train", QPointF(0, 0));
    w.scene()->selectOnly({out});
    QWidget* delta = w.params()->editor("delta");
    QVERIFY(delta);
    QVERIFY(!delta->isVisibleTo(w.params()));
    QVERIFY(w.model()->setParam(out, "loss", dw::Param::makeString("Huber")).ok());
    QVERIFY(delta->isVisibleTo(w.params()) && delta->isEnabled());
    QVERIFY(w.model()->setParam(out, "delta", dw::Param::makeFloat(2)).ok());
    QVERIFY(w.model()->setParam(out, "loss", dw::Param::makeString("MeanSquaredError")).ok());
    // Set for another loss: shown greyed out, saying whose it is, so that it can be reset.
    QVERIFY(delta->isVisibleTo(w.params()) && !delta->isEnabled());
    QVERIFY2(delta->toolTip().contains("Huber"), qPrintable(delta->toolTip()));
    qobject_cast<QToolButton*>(w.params()->resetButton("delta"))->click();
    QVERIFY(!delta->isVisibleTo(w.params()));
  }

  // The best-epoch marker is a ring: after a one-epoch Fit the validation point under it shows.
  void bestEpochMarkerLeavesTheValidationPointVisible() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256);
    auto* panel = w.training();
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QCOMPARE(panel->seriesPoints("validation loss"), 1);
    QXYSeries* best = nullptr;
    QXYSeries* validation = nullptr;
    for (QAbstractSeries* s : panel->lossChart()->series()) {
      if (s->name() == "best epoch") best = static_cast<QXYSeries*>(s);
      if (s->name() == "validation") validation = static_cast<QXYSeries*>(s);
    }
    QVERIFY(best && validation);
    QCOMPARE(best->count(), 1);
    QCOMPARE(best->at(0), validation->at(0));
    QVERIFY(best->brush().style() == Qt::NoBrush || best->brush().color().alpha() == 0);
    QVERIFY(best->markerSize() > validation->markerSize());
  }

  // Long names show whole: the palette's SparseCategoricalAccuracy, and the Parameters name
  // field's sparse_categorical_accuracy (or at least its tooltip).
  void longNamesShowWhole() {
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(50);  // the docks take their sizes once the window is laid out
    QTreeWidgetItem* entry = w.palette()->entry("deepwire.metrics", "SparseCategoricalAccuracy");
    QVERIFY(entry);
    QTreeWidget* tree = w.palette()->tree();
    tree->scrollToItem(entry);
    const QRect r = tree->visualItemRect(entry);
    QVERIFY2(r.left() + tree->fontMetrics().horizontalAdvance(entry->text(0)) + 8 <=
                 tree->viewport()->width(),
             qPrintable(QStringLiteral("%1 + %2 > %3")
                            .arg(r.left())
                            .arg(tree->fontMetrics().horizontalAdvance(entry->text(0)))
                            .arg(tree->viewport()->width())));
    const dw::NodeId metric =
        w.placeNode("deepwire.metrics", "SparseCategoricalAccuracy", QPointF(0, 0));
    w.scene()->selectOnly({metric});
    auto* name = qobject_cast<QLineEdit*>(w.params()->editor("name"));
    QVERIFY(name);
    QCOMPARE(name->text(), QStringLiteral("sparse_categorical_accuracy"));
    QVERIFY(name->toolTip().contains("sparse_categorical_accuracy"));
    QTest::qWait(20);
    QVERIFY2(name->width() >= name->fontMetrics().horizontalAdvance(name->text()) + 8,
             qPrintable(QString::number(name->width())));
  }

  void recoveryQuestionNamesTheDocument() {
    QDir(QFileInfo(MainWindow::autosavePath()).absolutePath()).removeRecursively();
    QTemporaryDir dir;
    const QString project = dir.filePath("mine.dwproj");
    {
      MainWindow w(false);
      QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
      QVERIFY(w.saveTo(project));
      w.placeNode("ai.onnx", "Tanh");
      w.autosaveNow();
      QVERIFY(QFileInfo::exists(MainWindow::autosavePath(project)));
    }
    {
      MainWindow w(false);
      const QString q = w.recoveryQuestion();
      QVERIFY2(q.isEmpty(), qPrintable(q));  // untitled: mine.dwproj's autosave is not its own
      QVERIFY(w.openFile(project));
      const QString mine = w.recoveryQuestion();
      QVERIFY2(mine.contains(QDir::toNativeSeparators(project)), qPrintable(mine));
      QVERIFY2(mine.contains(QString::number(QDate::currentDate().year())), qPrintable(mine));
    }
    {
      MainWindow w(false);
      w.placeNode("ai.onnx", "Tanh");  // untitled
      w.autosaveNow();
    }
    {
      MainWindow w(false);
      QVERIFY2(w.recoveryQuestion().contains("untitled"), qPrintable(w.recoveryQuestion()));
    }
    QDir(QFileInfo(MainWindow::autosavePath()).absolutePath()).removeRecursively();
    MainWindow w(false);
    QVERIFY(w.recoveryQuestion().isEmpty());
  }

  // Opening a project offers its own autosave only: another document's (/tmp/trial2's, when
  // /tmp/x/a.dwproj was opened) was offered, and Yes replaced the project just opened with it.
  void autosaveIsOfferedForItsOwnDocumentOnly() {
    QDir(QFileInfo(MainWindow::autosavePath()).absolutePath()).removeRecursively();
    QTemporaryDir dir;
    QDir().mkpath(dir.filePath("x"));
    QDir().mkpath(dir.filePath("y"));
    const QString trial = dir.filePath("trial2.dwproj");
    const QString a = dir.filePath("x/a.dwproj");
    const QString sameName = dir.filePath("y/a.dwproj");  // another folder's a.dwproj
    {
      MainWindow w(false);
      QVERIFY(w.openFile(example("fashion_mnist_mlp.dwproj")));
      QVERIFY(w.saveTo(a));
      QVERIFY(w.saveTo(sameName));
      QVERIFY(w.saveTo(trial));
      w.placeNode("ai.onnx", "Tanh");
      w.autosaveNow();  // then the studio dies with trial2's changes unsaved
    }
    QVERIFY(QFileInfo::exists(MainWindow::autosavePath(trial)));
    QVERIFY(MainWindow::autosavePath(a) != MainWindow::autosavePath(sameName));
    {
      MainWindow w(false);
      for (const QString& other : {a, sameName}) {
        QVERIFY(w.openFile(other));
        QVERIFY2(w.recoveryQuestion().isEmpty(), qPrintable(w.recoveryQuestion()));
        QVERIFY(!QFileInfo::exists(MainWindow::autosavePath(other)));
      }
      // Editing a.dwproj autosaves to a's own file, and leaves trial2's alone.
      w.placeNode("ai.onnx", "Relu");
      w.autosaveNow();
      QVERIFY(QFileInfo::exists(MainWindow::autosavePath(sameName)));
      QVERIFY(QFileInfo::exists(MainWindow::autosavePath(trial)));
      // Saved, its autosave holds nothing more.
      QVERIFY(w.saveTo(sameName));
      QVERIFY(!QFileInfo::exists(MainWindow::autosavePath(sameName)));
      QVERIFY(w.openFile(trial));
      QVERIFY2(w.recoveryQuestion().contains("trial2.dwproj"), qPrintable(w.recoveryQuestion()));
      QVERIFY(w.recoverAutosave());
      int tanh = 0;
      for (const auto& [id, n] : w.model()->graph().nodes()) tanh += n.type == "Tanh";
      QCOMPARE(tanh, 1);
      QCOMPARE(w.currentFile(), QFileInfo(trial).absoluteFilePath());
      // Recovered and saved: the autosave goes.
      QVERIFY(w.saveTo(trial));
      QVERIFY(!QFileInfo::exists(MainWindow::autosavePath(trial)));
    }
    QDir(QFileInfo(MainWindow::autosavePath()).absolutePath()).removeRecursively();
  }

  // Save adds a "Write trained weights" undo step only when training changed the weights: after
  // Train Steps alone (gradients added up, no update) it wrote the untrained values over the
  // Initializers' seeded fills, and the title said modified though nothing had changed.
  void saveWithoutChangesAddsNoUndoStep() {
    {
      QTemporaryDir dir;
      MainWindow w(false);
      buildRegression(w, dir.path(), 256);
      auto* panel = w.training();
      const dw::NodeId weight = findByName(w.model()->graph(), "weight");
      QVERIFY(weight);
      for (int i = 0; i < 2; ++i) {
        panel->trainStepButton()->click();
        QVERIFY(waitIdle(panel));
        QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
      }
      QCOMPARE(panel->trainPoints(), 2);
      QVERIFY(!w.isWindowModified());
      QVERIFY(w.saveTo(dir.filePath("saved.dwproj")));
      QCOMPARE(w.model()->undoStack()->count(), 0);
      QCOMPARE(w.model()->graph().param(weight, "fill")->asString(), std::string("glorot_uniform"));
      // The gradients gathered are still applied by the next Full Train Step, and that one is
      // written.
      panel->fullTrainStepButton()->click();
      QVERIFY(waitIdle(panel));
      QVERIFY(w.isWindowModified());
      QVERIFY(w.saveTo(dir.filePath("saved.dwproj")));
      QCOMPARE(w.model()->undoStack()->count(), 1);
    }
    for (bool dense : {false, true}) {
      QTemporaryDir dir;
      MainWindow w(false);
      buildRegression(w, dir.path(), 256, dense);
      auto* panel = w.training();
      auto* undo = w.model()->undoStack();
      panel->fitButton()->click();
      QVERIFY(waitIdle(panel));
      QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
      const QString path = dir.filePath("saved.dwproj");
      QVERIFY(w.saveTo(path));
      const int steps = undo->count();
      QCOMPARE(undo->text(steps - 1), QStringLiteral("Write trained weights"));
      for (int i = 0; i < 3; ++i) {
        QVERIFY(w.saveTo(path));
        QVERIFY2(undo->count() == steps, qPrintable(QStringLiteral("%1: save %2 added '%3'")
                                                        .arg(dense ? "layers" : "initializers")
                                                        .arg(i + 2)
                                                        .arg(undo->text(undo->count() - 1))));
      }
      QVERIFY(undo->isClean());
      // An Export with nothing new trained adds none either.
      QVERIFY(w.exportOnnxTo(dir.filePath("m.onnx"), false));
      QCOMPARE(undo->count(), steps);
    }
  }

  // The loss chart's range ignores a divergence's few blown-up points (TensorBoard's 5th-95th
  // percentile, per series), marks them on the edge, and shows everything with the box unticked.
  void chartRangeIgnoresOutliers() {
    using dw::studio::robustRange;
    std::vector<double> curve;
    for (int i = 1; i <= 40; ++i) curve.push_back(1.0 + 1.0 / i);
    auto [lo, hi] = robustRange(curve, true, false);
    // A smooth curve keeps its body; of its steep start, what lies a fifth of the body's span
    // above it goes to the edge (TensorBoard cuts the same).
    QVERIFY2(hi > 1.3 && hi < 2.0, qPrintable(QString::number(hi)));
    QCOMPARE(lo, curve.back());
    std::vector<double> flat(40, 0.5);
    flat[3] = 0.52;
    std::tie(lo, hi) = robustRange(flat, true, false);
    QCOMPARE(hi, 0.52);
    curve.push_back(1e6);
    curve.push_back(3e7);
    std::tie(lo, hi) = robustRange(curve, true, false);
    QVERIFY2(hi < 3, qPrintable(QString::number(hi)));
    std::tie(lo, hi) = robustRange(curve, false, false);
    QCOMPARE(hi, 3e7);
    std::tie(lo, hi) = robustRange(curve, true, true);  // log scale
    QVERIFY2(hi < 10 && lo > 1, qPrintable(QStringLiteral("%1 %2").arg(lo).arg(hi)));
    std::tie(lo, hi) = robustRange({1, 2, 1e9}, true, false);  // too few to call any an outlier
    QCOMPARE(hi, 1e9);

    MainWindow w(false);
    auto* panel = w.training();
    QXYSeries* train = nullptr;
    for (QAbstractSeries* series : panel->lossChart()->series())
      if (series->name() == "train") train = static_cast<QXYSeries*>(series);
    QVERIFY(train);
    for (int i = 0; i < 40; ++i) train->append(i + 1, curve[size_t(i)]);
    train->append(41, 1e6);
    QVERIFY(panel->ignoreOutliersBox()->isChecked());  // on by default, as in TensorBoard
    panel->ignoreOutliersBox()->setChecked(false);
    auto* y = qobject_cast<QValueAxis*>(panel->lossChart()->axes(Qt::Vertical).first());
    QVERIFY(y);
    QVERIFY(y->max() >= 1e6);
    QCOMPARE(panel->offScalePoints(panel->lossChart()), 0);
    panel->ignoreOutliersBox()->setChecked(true);
    QVERIFY2(y->max() < 5, qPrintable(QString::number(y->max())));
    QCOMPARE(panel->offScalePoints(panel->lossChart()), 1);
    panel->logScaleBox()->setChecked(true);
    QCOMPARE(panel->offScalePoints(panel->lossChart()), 1);
    panel->logScaleBox()->setChecked(false);
    QCOMPARE(train->count(), 41);  // nothing is dropped, only drawn on the edge
    // A validation curve well above the train curve (overfitting) is no outlier of it: each
    // series' outliers are its own.
    QXYSeries* validation = nullptr;  // the evaluation line: the line that is not "train"
    for (QAbstractSeries* series : panel->lossChart()->series())
      if (series->type() == QAbstractSeries::SeriesTypeLine && series != train)
        validation = static_cast<QXYSeries*>(series);
    QVERIFY(validation);
    validation->append(20, 7.0);  // one epoch: a point among 42, in the top 5% of them all
    panel->logScaleBox()->setChecked(true);  // any change of the box rescales
    panel->logScaleBox()->setChecked(false);
    y = qobject_cast<QValueAxis*>(panel->lossChart()->axes(Qt::Vertical).first());  // a new one
    QVERIFY(y);
    QVERIFY2(y->max() >= 7 && y->max() < 50, qPrintable(QString::number(y->max())));
    QCOMPARE(panel->offScalePoints(panel->lossChart()), 1);  // still only the blown-up step
  }

  // "lda coeff" keeps the seed toolkit's name; its tooltip says what it does.
  void ldaCoeffSaysWhatItDoes() {
    MainWindow w(false);
    w.show();
    const dw::NodeId relu = w.placeNode("ai.onnx", "Relu", QPointF(0, 0));
    w.scene()->selectOnly({relu});
    QWidget* lda = w.params()->editor("lda coeff");
    QVERIFY(lda);
    for (const char* words : {"scales the derivative of the loss", "flows back through this node",
                              "0: nothing before this node learns"})
      QVERIFY2(lda->toolTip().contains(words), qPrintable(lda->toolTip()));
    // The label, where the pointer rests first, says the same.
    bool labelled = false;
    for (QLabel* l : w.params()->findChildren<QLabel*>())
      if (l->text() == "lda coeff") labelled = l->toolTip() == lda->toolTip();
    QVERIFY(labelled);
  }

  // Processes > 1 without mpirun or without the deepwire command: Fit says what is missing and
  // how to get it, and Processes 1 still fits in the studio.
  void fitAcrossProcessesSaysWhatIsMissing() {
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    const auto toOne = qScopeGuard([panel] { panel->processesBox()->setValue(1); });
    const QByteArray path = qgetenv("PATH"), cli = qgetenv("DEEPWIRE_CLI");
    panel->processesBox()->setValue(2);
    qputenv("PATH", dir.path().toLocal8Bit());  // no mpirun there
    panel->fitButton()->click();
    qputenv("PATH", path);
    QVERIFY(!panel->busy());
    QVERIFY2(panel->lastError().contains("mpirun") && panel->lastError().contains("openmpi-bin") &&
                 panel->lastError().contains("Processes to 1"),
             qPrintable(panel->lastError()));
    if (!QStandardPaths::findExecutable("mpirun").isEmpty()) {
      qputenv("DEEPWIRE_CLI", QByteArray(dir.filePath("no-such-deepwire").toLocal8Bit()));
      panel->fitButton()->click();
      QVERIFY(!panel->busy());
      QVERIFY2(panel->lastError().contains("DEEPWIRE_CLI") &&
                   panel->lastError().contains("no-such-deepwire"),
               qPrintable(panel->lastError()));
    }
    if (cli.isNull())
      qunsetenv("DEEPWIRE_CLI");
    else
      qputenv("DEEPWIRE_CLI", cli);
    QCOMPARE(panel->seriesPoints("train loss"), 0);
    panel->processesBox()->setValue(1);
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY(panel->seriesPoints("train loss") > 0);
  }

  // Processes 2 with unsaved edits: the processes train the file, so Fit asks before writing
  // the edits into it; Cancel leaves the file as it was and starts nothing.
  void fitAcrossProcessesAsksBeforeSavingEdits() {
    if (QStandardPaths::findExecutable("mpirun").isEmpty()) QSKIP("no mpirun on PATH");
    if (qEnvironmentVariableIsEmpty("DEEPWIRE_CLI"))
      qputenv("DEEPWIRE_CLI", QByteArray(DW_BINARY_DIR "/app/cli/deepwire"));
    if (dw::studio::findDeepwireCli().isEmpty()) QSKIP("no deepwire command built");
    QTemporaryDir dir;
    MainWindow w(true);
    buildRegression(w, dir.path(), 64, true);
    auto* panel = w.training();
    const auto toOne = qScopeGuard([panel] { panel->processesBox()->setValue(1); });
    const QString file = dir.filePath("fit.dwproj");
    QVERIFY(w.saveTo(file));
    auto bytes = [&] {
      QFile f(file);
      return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    const QByteArray saved = bytes();
    const dw::NodeId hidden = findByName(w.model()->graph(), "hidden");
    QVERIFY(w.model()->rename(hidden, "edited").ok());
    panel->processesBox()->setValue(2);
    QString asked;
    QTimer::singleShot(200, [&asked] {
      if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
        asked = box->text();
        box->reject();
      }
    });
    panel->fitButton()->click();
    QVERIFY2(asked.contains("fit.dwproj") && asked.contains("unsaved"), qPrintable(asked));
    QVERIFY(!panel->busy());
    QVERIFY2(panel->lastError().contains("not saved"), qPrintable(panel->lastError()));
    QCOMPARE(bytes(), saved);
    QVERIFY(!w.model()->undoStack()->isClean());
  }

  // Processes 2: Fit saves the project, runs mpirun -np 2 deepwire train --distributed on it,
  // charts rank 0's epochs as they come, and writes the trained weights back into the document as
  // one undo step; Stop ends every process after the same step, keeping what was trained.
  void fitAcrossProcessesThroughMpirun() {
    if (QStandardPaths::findExecutable("mpirun").isEmpty()) QSKIP("no mpirun on PATH");
    // The build's own deepwire unless the run names another (a build without MPI has nothing to
    // offer here: skipped below).
    if (qEnvironmentVariableIsEmpty("DEEPWIRE_CLI"))
      qputenv("DEEPWIRE_CLI", QByteArray(DW_BINARY_DIR "/app/cli/deepwire"));
    if (dw::studio::findDeepwireCli().isEmpty()) QSKIP("no deepwire command built");
    qputenv("OMP_WAIT_POLICY", "passive");
    QTemporaryDir dir;
    MainWindow w(false);
    buildRegression(w, dir.path(), 256, true);
    auto* panel = w.training();
    const auto toOne = qScopeGuard([panel] { panel->processesBox()->setValue(1); });
    auto* m = w.model();
    const dw::NodeId hidden = findByName(m->graph(), "hidden");
    panel->fullTrainStepButton()->click();  // trained in the studio first: the run carries on
    QVERIFY(waitIdle(panel));
    QVERIFY(m->graph().node(hidden)->weights.empty());  // not written yet
    panel->processesBox()->setValue(2);
    panel->epochsBox()->setValue(3);
    panel->fitButton()->click();
    QVERIFY(panel->busy());
    QVERIFY2(panel->processCommand().contains("-np 2") &&
                 panel->processCommand().contains("--distributed --json"),
             qPrintable(panel->processCommand()));
    // It goes on from the studio's step, optimizer state and counters included.
    QVERIFY2(panel->processCommand().contains("--resume") &&
                 panel->processCommand().contains("--checkpoint"),
             qPrintable(panel->processCommand()));
    // Saved first, with the step's weights, which the run starts from.
    QVERIFY(w.model()->undoStack()->isClean());
    const auto before = m->graph().node(hidden)->weights;
    QVERIFY(!before.empty());
    QVERIFY(waitIdle(panel, 120000));
    if (panel->lastError().contains("built without MPI")) QSKIP(qPrintable(panel->lastError()));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("in 2 processes: 3 epochs"),
             qPrintable(panel->lastResult()));
    // Every step of the run is drawn as it comes (--json-steps), not a point per epoch.
    QVERIFY2(panel->processCommand().contains("--json-steps"), qPrintable(panel->processCommand()));
    QVERIFY2(panel->seriesPoints("train loss") > 1 + 3 * 2,
             qPrintable(QString::number(panel->seriesPoints("train loss"))));
    QCOMPARE(panel->seriesPoints("validation loss"), 3);
    const auto after = m->graph().node(hidden)->weights;
    QVERIFY(!after.empty() && after != before);
    QCOMPARE(m->undoStack()->undoText(), QStringLiteral("Write trained weights (2 processes)"));
    QVERIFY(!m->undoStack()->isClean());
    // The studio trains on from the run's weights.
    panel->processesBox()->setValue(1);
    const QString fromRun = predicted(panel);
    m->undoStack()->undo();
    QCOMPARE(m->graph().node(hidden)->weights, before);
    QVERIFY(predicted(panel) != fromRun);
    m->undoStack()->redo();
    QCOMPARE(predicted(panel), fromRun);
    // Save Checkpoint before any step: the run's own.
    QVERIFY(panel->saveCheckpoint(dir.filePath("after-run")).ok());
    const auto saved =
        dw::engine::training::readCheckpointCounters(dir.filePath("after-run").toStdString());
    QVERIFY2(saved.ok(), saved.ok() ? "" : saved.message().c_str());
    QCOMPARE(saved->epoch, 3);
    // The next step goes on from the run's checkpoint: three epochs done, and the optimizer's
    // steps counted on (a new trainer would stand at epoch 0 after one step).
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY(panel->trainerCounters().has_value());
    QCOMPARE(panel->trainerCounters()->epoch, 3);
    QVERIFY(panel->trainerCounters()->optimizerSteps > 3);
    // Drawn right after the run's last step: the trainer's steps go on from the studio's, and
    // were added to the run's offset once more (a user trial's step landed at twice its place).
    {
      const QXYSeries* train = nullptr;
      for (QAbstractSeries* series : panel->lossChart()->series())
        if (series->name() == "train") train = qobject_cast<QXYSeries*>(series);
      QVERIFY(train && train->count() > 1);
      const auto pts = train->points();
      QCOMPARE(pts.last().x(), pts[pts.size() - 2].x() + 1);
    }
    // A Fit in the studio after it numbers its epoch 4: a trial's was numbered by the
    // checkpoint's epochs on top of the ones charted (15 for 8).
    panel->processesBox()->setValue(1);
    panel->epochsBox()->setValue(1);
    panel->fitButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lossChart()->title().contains(" of 4"), qPrintable(panel->lossChart()->title()));

    // Stop: after the first epoch line of a long run.
    panel->processesBox()->setValue(2);
    panel->epochsBox()->setValue(100000);
    const int points = panel->seriesPoints("train loss");
    panel->fitButton()->click();
    QElapsedTimer t;
    t.start();
    while (panel->seriesPoints("train loss") == points && panel->busy() && t.elapsed() < 60000)
      QTest::qWait(20);
    QVERIFY(panel->busy());
    panel->stopButton()->click();
    QVERIFY(waitIdle(panel, 60000));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("Fit stopped"), qPrintable(panel->lastResult()));
    QVERIFY(m->graph().node(hidden)->weights != after);

    // An Eval Step builds a trainer from the stopped run's weights; undoing their write still
    // takes them away from what it evaluates and what Save writes (a trial's Eval Step and
    // export kept them).
    panel->processesBox()->setValue(1);
    const auto written = m->graph().node(hidden)->weights;
    const QString fromStopped = predicted(panel);
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(m->undoStack()->undoText().startsWith("Write trained weights"),
             qPrintable(m->undoStack()->undoText()));
    m->undoStack()->undo();
    QVERIFY(m->graph().node(hidden)->weights != written);
    panel->evalStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY(predicted(panel) != fromStopped);
    QVERIFY(panel->syncWeights().ok());  // what Save and Export do first
    QVERIFY(m->graph().node(hidden)->weights != written);
  }

  // Save Checkpoint writes what `deepwire train --resume` continues from, and Load Checkpoint
  // takes the command's checkpoint back: its weights into the graph (an undo step), its
  // optimizer state and counters into the trainer, which the next step continues. Training
  // moved between the two only as weights, and Adam's moments started again from zero.
  void checkpointsCarryTrainingBetweenStudioAndCommandLine() {
    const QString cli = QStringLiteral(DW_BINARY_DIR "/app/cli/deepwire");
    if (!QFileInfo::exists(cli)) QSKIP("no deepwire command built");
    QTemporaryDir dir;
    const QString project = dir.filePath("regression.dwproj");
    {
      MainWindow w(false);
      buildRegression(w, dir.path(), 256, true);
      auto* panel = w.training();
      panel->optimizerBox()->setCurrentIndex(panel->optimizerBox()->findText("adam"));
      QVERIFY(fullTrainSteps(panel, 2));
      QCOMPARE(panel->trainerCounters()->optimizerSteps, 2);
      QVERIFY(panel->saveCheckpoint(dir.filePath("studio")).ok());
      QVERIFY(w.saveTo(project));  // with Adam, which the checkpoint's state is for
    }
    QProcess run;
    run.start(cli, {"train", project, "--resume", dir.filePath("studio"), "--checkpoint",
                    dir.filePath("cli"), "--epochs", "2", "--quiet"});
    QVERIFY(run.waitForFinished(180000));
    const QString err = QString::fromLocal8Bit(run.readAllStandardError());
    QVERIFY2(run.exitStatus() == QProcess::NormalExit && run.exitCode() == 0, qPrintable(err));
    QVERIFY2(err.contains("2 optimizer steps"), qPrintable(err));

    MainWindow w(false);
    QVERIFY(w.openFile(project));
    auto* panel = w.training();
    auto* m = w.model();
    const dw::NodeId hidden = findByName(m->graph(), "hidden");
    const auto before = m->graph().node(hidden)->weights;
    panel->loadCheckpoint(dir.filePath("cli"));
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY2(panel->lastResult().contains("Checkpoint loaded"), qPrintable(panel->lastResult()));
    const auto c = panel->trainerCounters();
    QVERIFY(c.has_value());
    QCOMPARE(c->epoch, 2);
    QVERIFY(c->optimizerSteps > 2);
    QVERIFY(m->graph().node(hidden)->weights != before);
    QCOMPARE(m->undoStack()->undoText(), QStringLiteral("Write trained weights"));
    // The command's two epochs are on the charts, as its Fit would have drawn them.
    QCOMPARE(panel->seriesPoints("train loss"), 2);
    QCOMPARE(panel->seriesPoints("validation loss"), 2);
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QCOMPARE(panel->trainerCounters()->optimizerSteps, c->optimizerSteps + 1);
    // A folder that holds no checkpoint: said, and the trainer keeps its state.
    panel->loadCheckpoint(dir.path());
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().contains("checkpoint.json"), qPrintable(panel->lastError()));
    QCOMPARE(panel->trainerCounters()->optimizerSteps, c->optimizerSteps + 1);
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QCOMPARE(panel->trainerCounters()->optimizerSteps, c->optimizerSteps + 2);
    // Drawn at its own step: the failed load had moved the axis one run's length to the right.
    {
      const QXYSeries* train = nullptr;
      for (QAbstractSeries* series : panel->lossChart()->series())
        if (series->name() == "train") train = qobject_cast<QXYSeries*>(series);
      QVERIFY(train && train->count() > 0);
      QCOMPARE(train->points().last().x(), double(panel->trainerCounters()->trainSteps));
    }
    // Loading again replaces what the charts show: the checkpoint's own epochs, on its own steps.
    panel->loadCheckpoint(dir.filePath("cli"));
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastResult().contains("2 epochs done"), qPrintable(panel->lastResult()));
    QCOMPARE(panel->seriesPoints("train loss"), 2);
    QCOMPARE(panel->seriesPoints("validation loss"), 2);
    QCOMPARE(panel->trainerCounters()->optimizerSteps, c->optimizerSteps);
    // Undo goes back to before the load: the graph's earlier weights, which the next step
    // trains from a fresh start and Save keeps (a trial's undo went on with the checkpoint's).
    const auto loaded = m->graph().node(hidden)->weights;
    const auto beforeLoad = [&] {
      m->undoStack()->undo();
      return m->graph().node(hidden)->weights;
    }();
    QVERIFY(beforeLoad != loaded);
    QVERIFY2(w.saveTo(dir.filePath("undone.dwproj")), qPrintable(w.lastError()));
    QCOMPARE(m->graph().node(hidden)->weights, beforeLoad);
    panel->fullTrainStepButton()->click();
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QCOMPARE(panel->trainerCounters()->optimizerSteps, 1);
  }

 private:
  // The MLP example opened in `w`, its Data panel's rows read from the graph and every source
  // read; null if it does not open.
  // The MLP example as `edit` changes its JSON, saved as `name` in `dir`; "" if that failed.
  template <class Edit>
  static QString exampleVariant(const QTemporaryDir& dir, const char* name, Edit edit) {
    auto text = dw::readFile(example("fashion_mnist_mlp.dwproj").toStdString());
    if (!text.ok()) return QString();
    auto j = nlohmann::json::parse(*text);
    edit(j);
    const QString project = dir.filePath(QString::fromUtf8(name));
    return dw::writeFileAtomic(project.toStdString(), j.dump(1)).ok() ? project : QString();
  }

  static DataPanel* openWithData(MainWindow& w) {
    return openAndRead(w, example("fashion_mnist_mlp.dwproj"));
  }
  // `project` opened in `w`, its Data panel's rows read from the graph and every source read;
  // null if it does not open.
  static DataPanel* openAndRead(MainWindow& w, const QString& project) {
    if (!w.openFile(project)) return nullptr;
    DataPanel* data = w.training()->dataPanel();
    data->refreshInputs();
    QElapsedTimer t;
    t.start();
    while (data->busy() && t.elapsed() < 30000) QTest::qWait(20);
    return data->busy() ? nullptr : data;
  }

  // Predict's summary (the first batch's outputs), or "" with the error.
  // `n` Full Train Steps, each ending without an error (the first one's is printed).
  static bool fullTrainSteps(dw::studio::TrainingPanel* panel, int n) {
    for (int i = 0; i < n; ++i) {
      panel->fullTrainStepButton()->click();
      if (!waitIdle(panel) || !panel->lastError().isEmpty()) {
        qWarning("Full Train Step %d: %s", i + 1, qPrintable(panel->lastError()));
        return false;
      }
    }
    return true;
  }
  static QString predicted(dw::studio::TrainingPanel* panel) {
    panel->predictButton()->click();
    if (!waitIdle(panel) || !panel->lastError().isEmpty()) return QString();
    return panel->lastResult();
  }
  // The values of a Predict summary, without the output's name.
  static QString outputsOf(const QString& summary) {
    return summary.section(QStringLiteral("float32["), 1);
  }

  // y = x . [1, -2, 3, 0.5] + 0.25 as a Gemm with an Output Train (mean squared error), and its
  // data as NPY files in `dir`, wired through the project's training section.
  // dense: two Dense layers (8 relu units, then 1) named "hidden" and "head" instead of the Gemm.
  void buildRegression(MainWindow& w, const QString& dir, int samples, bool dense = false) {
    using dw::Param;
    auto* m = w.model();
    const dw::NodeId x = addNode(w, "deepwire", "Input", 0, 0);
    QVERIFY(m->rename(x, "x").ok());
    QVERIFY(m->setParam(x, "type", Param::makeString("float[N,4]")).ok());
    const dw::NodeId y = addNode(w, "deepwire", "Input", 0, 200);
    QVERIFY(m->rename(y, "y").ok());
    QVERIFY(m->setParam(y, "type", Param::makeString("float[N,1]")).ok());
    if (dense) {
      const dw::NodeId hidden = addNode(w, "deepwire.layers", "Dense", 240, 0);
      QVERIFY(m->rename(hidden, "hidden").ok());
      QVERIFY(m->setParam(hidden, "units", Param::makeInt(8)).ok());
      QVERIFY(m->setParam(hidden, "activation", Param::makeString("relu")).ok());
      const dw::NodeId head = addNode(w, "deepwire.layers", "Dense", 480, 0);
      QVERIFY(m->rename(head, "head").ok());
      QVERIFY(m->setParam(head, "units", Param::makeInt(1)).ok());
      const dw::NodeId out = addNode(w, "deepwire.layers", "Output Train", 720, 0);
      QVERIFY(m->rename(out, "pred").ok());
      for (dw::Link l : std::vector<dw::Link>{{{x, 0}, {hidden, 0}},
                                              {{hidden, 0}, {head, 0}},
                                              {{head, 0}, {out, 0}},
                                              {{y, 0}, {out, 1}}}) {
        dw::Status st = m->connectPorts(l);
        QVERIFY2(st.ok(), st.message().c_str());
      }
    } else {
      buildGemm(w, x, y);
    }
    writeRegressionData(w, dir, samples);
  }

  void buildGemm(MainWindow& w, dw::NodeId x, dw::NodeId y) {
    using dw::Param;
    auto* m = w.model();
    const dw::NodeId wt = addNode(w, "deepwire", "Initializer", 0, 100);
    QVERIFY(m->setParam(wt, "shape", Param::makeInts({1, 4})).ok());
    QVERIFY(m->setParam(wt, "fill", Param::makeString("glorot_uniform")).ok());
    const dw::NodeId b = addNode(w, "deepwire", "Initializer", 0, 150);
    QVERIFY(m->setParam(b, "shape", Param::makeInts({1})).ok());
    const dw::NodeId gemm = addNode(w, "ai.onnx", "Gemm", 240, 0);
    QVERIFY(m->setParam(gemm, "transB", Param::makeBool(true)).ok());
    const dw::NodeId out = addNode(w, "deepwire.layers", "Output Train", 480, 0);
    QVERIFY(m->rename(out, "pred").ok());
    for (dw::Link l : std::vector<dw::Link>{{{x, 0}, {gemm, 0}},
                                            {{wt, 0}, {gemm, 1}},
                                            {{b, 0}, {gemm, 2}},
                                            {{gemm, 0}, {out, 0}},
                                            {{y, 0}, {out, 1}}}) {
      dw::Status st = m->connectPorts(l);
      QVERIFY2(st.ok(), st.message().c_str());
    }
  }

  void writeRegressionData(MainWindow& w, const QString& dir, int samples) {
    auto* m = w.model();
    std::mt19937 rng(7);
    std::normal_distribution<float> n;
    std::vector<float> xs(samples * 4), ys(samples);
    for (int i = 0; i < samples; ++i) {
      for (int j = 0; j < 4; ++j) xs[i * 4 + j] = n(rng);
      ys[i] = xs[i * 4] - 2 * xs[i * 4 + 1] + 3 * xs[i * 4 + 2] + 0.5f * xs[i * 4 + 3] + 0.25f;
    }
    using dw::engine::Tensor;
    QVERIFY(dw::engine::training::writeNpy((dir + "/x.npy").toStdString(),
                                           Tensor::fromVector(xs, {samples, 4}))
                .ok());
    QVERIFY(dw::engine::training::writeNpy((dir + "/y.npy").toStdString(),
                                           Tensor::fromVector(ys, {samples, 1}))
                .ok());
    m->setSection(
        "training",
        R"({"dataset": {"train": [{"input": "x", "path": "x.npy"}, {"input": "y", "path": "y.npy"}],
                      "validation_split": 0.25},
                      "optimizer": {"type": "sgd", "lr": 0.05}, "batch_size": 32, "epochs": 1})");
    // A project's settings are read when it is opened: save and reopen, as a user would.
    const QString path = dir + "/regression.dwproj";
    QVERIFY(w.saveTo(path));
    QVERIFY(w.openFile(path));
    m->validateNow();
    QVERIFY2(m->problems().empty(),
             m->problems().empty() ? "" : m->problems().front().message.c_str());
  }
};

QTEST_MAIN(StudioTest)
#include "studio_tests.moc"
