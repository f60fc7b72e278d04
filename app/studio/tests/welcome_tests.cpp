// The welcome page (CTest label "gui"): it shows when the studio starts with no file and makes way
// for the canvas; its examples open; its classifier templates build a valid graph for real data
// (Fashion-MNIST IDX files, an image folder written here) whose Data panel is ready and whose
// Train Step runs; recent files are listed and open.
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QMimeData>
#include <QScrollArea>
#include <QSettings>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <random>

#include "app/studio/data_panel.h"
#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "app/studio/tests/studio_test_util.h"
#include "app/studio/training_panel.h"
#include "app/studio/welcome_page.h"

using dw::studio::ClassifierTemplate;
using dw::studio::MainWindow;
using dw::studio::TemplateSource;

using namespace dw::studio::test;

namespace {

const QString kFashion = QStringLiteral("/usr/share/datasets/fashion-mnist/");

const dw::Node* nodeOfType(const MainWindow& w, const std::string& type, int nth = 0) {
  for (const auto& [id, n] : w.model()->graph().nodes())
    if (n.type == type && nth-- == 0) return &n;
  return nullptr;
}

std::string paramText(const MainWindow& w, const dw::Node* n, const char* name) {
  auto p = w.model()->graph().param(n->id, name);
  return p ? p->asString() : std::string();
}

int64_t paramInt(const MainWindow& w, const dw::Node* n, const char* name) {
  auto p = w.model()->graph().param(n->id, name);
  return p ? p->asInt() : -1;
}

// The checks every template must pass: valid, data ready, tidy, and one Train Step trains.
void checkTrainable(MainWindow& w, int64_t classes) {
  w.model()->validateNow();
  const auto& problems = w.model()->problems();
  QVERIFY2(problems.empty(), problems.empty() ? "" : problems.front().message.c_str());
  QVERIFY(!w.welcomeVisible());
  QVERIFY2(w.training()->dataPanel()->readiness().isEmpty(),
           qPrintable(w.training()->dataPanel()->readiness()));
  const dw::Node* logits = nodeOfType(w, "Dense", 1);
  QVERIFY(logits);
  QCOMPARE(paramInt(w, logits, "units"), classes);
  const dw::Node* out = nodeOfType(w, "Output Train");
  QVERIFY(out);
  QCOMPARE(paramText(w, out, "loss"), std::string("SparseCategoricalCrossentropy"));
  QVERIFY(w.model()->graph().param(out->id, "from_logits")->asBool());
  QVERIFY(nodeOfType(w, "SparseCategoricalAccuracy"));
  // No two nodes overlap.
  std::vector<QRectF> boxes;
  for (const auto& [id, n] : w.model()->graph().nodes())
    boxes.push_back(w.scene()->nodeItem(id)->sceneBoundingRect());
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size(); ++j) QVERIFY(!boxes[i].intersects(boxes[j]));

  auto* panel = w.training();
  QTest::mouseClick(panel->trainStepButton(), Qt::LeftButton);
  QVERIFY(waitIdle(panel));
  QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
  QCOMPARE(panel->seriesPoints("train loss"), 1);
}

}  // namespace

class WelcomeTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QFile::remove(MainWindow::autosavePath());
  }

  // At 1500x920 the tip at the page's foot was cut off and needed scrolling.
  void tipIsVisibleWithoutScrolling() {
    QSettings().setValue(
        QStringLiteral("recentFiles"),
        QStringList{example("fashion_mnist_mlp.dwproj"), example("fashion_mnist_cnn.dwproj"),
                    "/tmp/a.dwproj", "/tmp/b.dwproj", "/tmp/c.dwproj"});
    MainWindow w(false);
    w.resize(1500, 920);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTest::qWait(50);  // the window's deferred dock sizes
    w.setWelcomeVisible(true);
    QApplication::processEvents();
    auto* tip = w.welcome()->findChild<QLabel*>(QStringLiteral("welcomeTip"));
    auto* scroll = w.welcome()->findChild<QScrollArea*>(QStringLiteral("welcomeScroll"));
    QVERIFY(tip && scroll);
    QVERIFY(tip->isVisible());
    const QRect r(tip->mapTo(scroll->viewport(), QPoint(0, 0)), tip->size());
    QVERIFY2(scroll->viewport()->rect().contains(r),
             qPrintable(QStringLiteral("tip at %1,%2 %3x%4 in a %5x%6 viewport")
                            .arg(r.x())
                            .arg(r.y())
                            .arg(r.width())
                            .arg(r.height())
                            .arg(scroll->viewport()->width())
                            .arg(scroll->viewport()->height())));
    QSettings().remove(QStringLiteral("recentFiles"));
  }

  void showsAtStartAndGivesWayToAnExample() {
    MainWindow w(false);
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(!w.welcomeVisible());  // never unless asked: tests drop straight onto the canvas
    QVERIFY(w.openAtStart(QString()));
    QVERIFY(w.welcomeVisible());
    QVERIFY(w.welcome()->isVisible());
    QVERIFY(!w.view()->isVisible());

    // The examples are found from the build tree, MLP first.
    const QStringList examples = dw::studio::findExamples();
    QVERIFY2(examples.size() >= 2, qPrintable(examples.join(", ")));
    QVERIFY(examples.first().endsWith("fashion_mnist_mlp.dwproj"));
    auto* card = w.welcome()->exampleCard(QStringLiteral("fashion_mnist_mlp.dwproj"));
    QVERIFY(card);
    QVERIFY(card->isVisible());
    QTest::mouseClick(card, Qt::LeftButton);
    QVERIFY(!w.welcomeVisible());
    QVERIFY(w.view()->isVisible());
    QVERIFY(w.currentFile().endsWith("fashion_mnist_mlp.dwproj"));
    QVERIFY(!w.model()->graph().nodes().empty());

    // View → Welcome Page brings it back; New sends it away with an empty canvas.
    QAction* again = w.action(QStringLiteral("welcome"));
    QVERIFY(again);
    again->trigger();
    QVERIFY(w.welcomeVisible());
    QVERIFY(again->isChecked());
    QTest::mouseClick(w.welcome()->newCard(), Qt::LeftButton);
    QVERIFY(!w.welcomeVisible());
    QVERIFY(!again->isChecked());
    QVERIFY(w.model()->graph().nodes().empty());

    // File > Close: done with a document, back on the page with nothing open.
    QVERIFY(w.openFile(examples.first()));
    QVERIFY(!w.welcomeVisible());
    w.action(QStringLiteral("close"))->trigger();
    QVERIFY(w.welcomeVisible());
    QVERIFY(w.currentFile().isEmpty());
    QVERIFY(w.model()->graph().nodes().empty());

    // A file that cannot be opened at start leaves the page up, with the reason.
    QVERIFY(!w.openAtStart(QStringLiteral("/nonexistent/nothing.dwproj")));
    QVERIFY(w.welcomeVisible());
    QVERIFY(!w.lastError().isEmpty());

    // A palette entry dropped on the page lands on the canvas as a node.
    QMimeData data;
    data.setData(dw::studio::kNodeMimeType, QByteArray("deepwire.layers::Dense"));
    const QPoint at(300, 200);
    QDragEnterEvent enter(at, Qt::CopyAction, &data, Qt::LeftButton, {});
    QApplication::sendEvent(w.welcome(), &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(at, Qt::CopyAction, &data, Qt::LeftButton, {});
    QApplication::sendEvent(w.welcome(), &drop);
    QVERIFY(!w.welcomeVisible());
    QCOMPARE(w.model()->graph().nodes().size(), size_t(1));
  }

  void mlpAndCnnTemplatesFromFashionMnist() {
    if (!QFile::exists(kFashion + "train-images-idx3-ubyte.gz"))
      QSKIP("dataset-fashion-mnist is not installed");
    const TemplateSource source{kFashion + "train-images-idx3-ubyte.gz",
                                kFashion + "train-labels-idx1-ubyte.gz"};
    {
      MainWindow w(false);
      w.resize(1600, 1000);
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      w.openAtStart(QString());
      const QString error = dw::studio::buildClassifier(w, ClassifierTemplate::kMlp, source);
      QVERIFY2(error.isEmpty(), qPrintable(error));
      // The Input takes one 28x28 sample as float, flattened for the dense layers; the Data
      // panel scales the raw bytes and casts the labels.
      const dw::Node* image = nodeOfType(w, "Input");
      QVERIFY(image);
      QCOMPARE(paramText(w, image, "type"), std::string("float[N,28,28]"));
      QVERIFY(nodeOfType(w, "Flatten"));
      QVERIFY(!nodeOfType(w, "Conv2D"));
      const auto spec = w.training()->dataPanel()->spec();
      QCOMPARE(spec.train.size(), size_t(2));
      QCOMPARE(spec.validationSplit, 0.1);
      for (const auto& f : spec.train) {
        if (f.input == "image") QCOMPARE(f.normalization.scale, 1.0 / 255.0);
        if (f.input == "label") QCOMPARE(f.dtype, std::string("int64"));
      }
      // Left to right: each node of the main chain starts right of the one before it.
      const dw::Node* dense = nodeOfType(w, "Dense", 0);
      const dw::Node* logits = nodeOfType(w, "Dense", 1);
      QVERIFY(image->position.x < dense->position.x && dense->position.x < logits->position.x);
      checkTrainable(w, 10);
    }
    {  // The CNN reshapes each 28x28 sample to one channel.
      MainWindow w(false);
      w.resize(1600, 1000);
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      const QString error = dw::studio::buildClassifier(w, ClassifierTemplate::kCnn, source);
      QVERIFY2(error.isEmpty(), qPrintable(error));
      QCOMPARE(paramText(w, nodeOfType(w, "Input"), "type"), std::string("float[N,1,28,28]"));
      QVERIFY(nodeOfType(w, "Conv2D", 1));  // two blocks
      QVERIFY(nodeOfType(w, "MaxPool2D", 1));
      checkTrainable(w, 10);
    }
  }

  void cnnTemplateFromAnImageFolder() {
    QTemporaryDir tmp;
    // Three classes of 20x20 RGB images: a bright square in a different corner each.
    const char* names[] = {"topleft", "topright", "bottom"};
    for (int cls = 0; cls < 3; ++cls) {
      const QString folder = tmp.filePath(QStringLiteral("shapes/") + names[cls]);
      QVERIFY(QDir().mkpath(folder));
      std::mt19937 rng(cls + 3);
      std::uniform_int_distribution<int> noise(0, 50);
      for (int i = 0; i < 24; ++i) {
        QImage img(20, 20, QImage::Format_RGB32);
        for (int y = 0; y < 20; ++y)
          for (int x = 0; x < 20; ++x) {
            const bool on = cls == 0   ? (x < 10 && y < 10)
                            : cls == 1 ? (x >= 10 && y < 10)
                                       : y >= 10;
            const int v = (on ? 180 : 0) + noise(rng);
            img.setPixelColor(x, y, QColor(v, v / 2, 255 - v));
          }
        QVERIFY(img.save(folder + QStringLiteral("/%1.png").arg(i, 3, 10, QLatin1Char('0'))));
      }
    }
    MainWindow w(false);
    w.resize(1600, 1000);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const QString folder = tmp.filePath("shapes");
    const QString error =
        dw::studio::buildClassifier(w, ClassifierTemplate::kCnn, {folder, folder});
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QCOMPARE(paramText(w, nodeOfType(w, "Input"), "type"), std::string("float[N,3,20,20]"));
    checkTrainable(w, 3);
    // And Fit runs right away.
    auto* panel = w.training();
    panel->epochsBox()->setValue(2);
    QTest::mouseClick(panel->fitButton(), Qt::LeftButton);
    QVERIFY(waitIdle(panel));
    QVERIFY2(panel->lastError().isEmpty(), qPrintable(panel->lastError()));
    QVERIFY(panel->seriesPoints("train loss") > 2);
    // The whole template is one undo step.
    w.model()->undoStack()->undo();
    QVERIFY(w.model()->graph().nodes().empty());
  }

  void templatesSayWhyNot() {
    QTemporaryDir tmp;
    QFile csv(tmp.filePath("table.csv"));
    QVERIFY(csv.open(QIODevice::WriteOnly));
    csv.write("a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
    csv.close();
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // A CNN needs images.
    QString error =
        dw::studio::buildClassifier(w, ClassifierTemplate::kCnn, {csv.fileName(), csv.fileName()});
    QVERIFY2(error.contains("image"), qPrintable(error));
    QVERIFY(w.model()->graph().nodes().empty());
    // An IDX file of samples needs its labels.
    if (QFile::exists(kFashion + "train-images-idx3-ubyte.gz")) {
      error = dw::studio::buildClassifier(w, ClassifierTemplate::kMlp,
                                          {kFashion + "train-images-idx3-ubyte.gz", QString()});
      QVERIFY2(error.contains("labels"), qPrintable(error));
      // Labels of another set (the test set's) do not match the samples.
      error = dw::studio::buildClassifier(
          w, ClassifierTemplate::kMlp,
          {kFashion + "train-images-idx3-ubyte.gz", kFashion + "t10k-labels-idx1-ubyte.gz"});
      QVERIFY2(error.contains("60000") || error.contains("10000"), qPrintable(error));
    }
    QVERIFY(w.model()->graph().nodes().empty());
    // The MLP takes the CSV table: the label column is found by its name.
    error =
        dw::studio::buildClassifier(w, ClassifierTemplate::kMlp, {csv.fileName(), csv.fileName()});
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QCOMPARE(paramText(w, nodeOfType(w, "Input"), "type"), std::string("float[N,2]"));
    QCOMPARE(paramInt(w, nodeOfType(w, "Dense", 1), "units"), int64_t(2));
    QVERIFY2(w.training()->dataPanel()->readiness().isEmpty(),
             qPrintable(w.training()->dataPanel()->readiness()));
  }

  void recentFilesAppear() {
    QTemporaryDir tmp;
    const QString path = tmp.filePath("mine.dwproj");
    {
      MainWindow w(false);
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      w.placeNode(QStringLiteral("deepwire.layers"), QStringLiteral("Dense"));
      QVERIFY2(w.saveTo(path), qPrintable(w.lastError()));
      QVERIFY(w.recentFiles().contains(QFileInfo(path).absoluteFilePath()));
    }
    MainWindow w(false);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.openAtStart(QString());
    auto* card = w.welcome()->recentCard(QFileInfo(path).absoluteFilePath());
    QVERIFY(card);
    QVERIFY(card->isVisible());
    QCOMPARE(card->title(), QStringLiteral("mine.dwproj"));
    QTest::mouseClick(card, Qt::LeftButton);
    QVERIFY(!w.welcomeVisible());
    QCOMPARE(w.currentFile(), QFileInfo(path).absoluteFilePath());
    QCOMPARE(w.model()->graph().nodes().size(), size_t(1));
  }
};

QTEST_MAIN(WelcomeTest)
#include "welcome_tests.moc"
