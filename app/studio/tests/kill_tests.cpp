// Nothing lost when the studio dies mid-save (issue 19): a child studio saves its project and
// autosaves over and over while the test kills it with SIGKILL at random moments. After every
// kill the project file and the autosave are each absent or complete, and a new window recovers
// the autosave. DW_KILL_RUNS sets the number of kills (default 30; 200 for a manual run).
#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

#include "app/studio/graph_model.h"
#include "app/studio/main_window.h"
#include "graphs/project.h"

using dw::studio::MainWindow;

namespace {

constexpr const char* kChildFlag = "--save-until-killed";

int tanhCount(const dw::Graph& g) {
  int n = 0;
  for (const auto& [id, node] : g.nodes()) n += node.type == "Tanh";
  return n;
}

// The child: every pass adds a node, saves the project, adds another and autosaves, so that
// each file on disk is rewritten continuously with a different document.
int saveUntilKilled(const QString& dir) {
  MainWindow w(false);
  if (!w.openFile(QStringLiteral(DW_SOURCE_DIR "/resources/examples/fashion_mnist_cnn.dwproj")))
    return 3;
  const QString project = QDir(dir).filePath(QStringLiteral("project.dwproj"));
  for (;;) {
    w.placeNode(QStringLiteral("ai.onnx"), QStringLiteral("Tanh"));
    if (!w.saveTo(project)) return 4;
    w.placeNode(QStringLiteral("ai.onnx"), QStringLiteral("Tanh"));
    w.autosaveNow();
    QCoreApplication::processEvents();
  }
}

}  // namespace

class KillTests : public QObject {
  Q_OBJECT
 private slots:
  void everySaveIsOldOrNewNeverTorn() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString project = dir.filePath(QStringLiteral("project.dwproj"));
    // The child autosaves the project it saved: that document's own autosave.
    const QString autosave = MainWindow::autosavePath(project);
    QFile::remove(autosave);
    const int runs = qEnvironmentVariableIntValue("DW_KILL_RUNS") > 0
                         ? qEnvironmentVariableIntValue("DW_KILL_RUNS")
                         : 30;
    int projects = 0, autosaves = 0, recovered = 0;
    for (int r = 0; r < runs; ++r) {
      QProcess child;
      child.setProcessChannelMode(QProcess::ForwardedErrorChannel);
      child.setStandardOutputFile(QProcess::nullDevice());
      child.start(QCoreApplication::applicationFilePath(), {QString(kChildFlag), dir.path()});
      QVERIFY2(child.waitForStarted(), "the child studio did not start");
      // From before the first save (the child opens a project first) to many saves in.
      QTest::qWait(100 + QRandomGenerator::global()->bounded(1400));
      QVERIFY2(child.state() == QProcess::Running,
               qPrintable(
                   QStringLiteral("the child studio exited early, code %1").arg(child.exitCode())));
      child.kill();  // SIGKILL
      QVERIFY(child.waitForFinished());

      const std::string where = "after kill " + std::to_string(r) + ": ";
      if (QFileInfo::exists(project)) {
        auto g = dw::loadProject(project.toStdString());
        QVERIFY2(g.ok(), (where + g.message()).c_str());
        QVERIFY2(tanhCount(*g) > 0, (where + "the project was saved without its edit").c_str());
        ++projects;
      }
      if (QFileInfo::exists(autosave)) {
        auto g = dw::loadProject(autosave.toStdString());
        QVERIFY2(g.ok(), (where + "autosave: " + g.message()).c_str());
        ++autosaves;
        // What opening the project offers to recover is what the file holds; a window takes long
        // enough to build that every few kills suffice.
        if (r % 5 == 0) {
          MainWindow w(false);
          QVERIFY2(w.openFile(project), qPrintable(w.lastError()));
          QVERIFY2(w.recoverAutosave(), qPrintable(w.lastError()));
          QCOMPARE(tanhCount(w.model()->graph()), tanhCount(*g));
          ++recovered;
        }
      }
    }
    qInfo("kills: %d; checked %d projects, %d autosaves, %d recoveries", runs, projects, autosaves,
          recovered);
    QVERIFY2(projects > 0, "no kill came late enough to test a save");
    QVERIFY2(autosaves > 0, "no kill came late enough to test an autosave");
    QFile::remove(autosave);
  }
};

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  if (argc >= 3 && QString::fromLocal8Bit(argv[1]) == QLatin1String(kChildFlag))
    return saveUntilKilled(QString::fromLocal8Bit(argv[2]));
  KillTests t;
  return QTest::qExec(&t, argc, argv);
}

#include "kill_tests.moc"
