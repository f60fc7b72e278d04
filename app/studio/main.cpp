// deepwire-studio [FILE.dwproj|FILE.onnx] [--screenshot PNG [--train-steps N]]
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QStyleFactory>
#include <QTimer>
#include <cstdio>

#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "app/studio/training_panel.h"
#include "engine/openmp_wait.h"

namespace {

// Waits for the training dock's current job without blocking the event loop.
void waitForTraining(dw::studio::TrainingPanel* panel) {
  QElapsedTimer t;
  t.start();
  while (panel->busy() && t.elapsed() < 300'000)
    QApplication::processEvents(QEventLoop::AllEvents, 50);
}

}  // namespace

int main(int argc, char** argv) {
  dw::useShortOpenMpSpin(argv);
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("deepwire"));
  QApplication::setApplicationName(QStringLiteral("deepwire-studio"));
  QApplication::setApplicationVersion(QStringLiteral("0.1.0"));
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));

  QCommandLineParser cli;
  cli.setApplicationDescription(QStringLiteral("deepwire studio: wire, train and export models"));
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addPositionalArgument(QStringLiteral("file"),
                            QStringLiteral("A project (.dwproj) or ONNX model (.onnx) to open"));
  QCommandLineOption shot(QStringLiteral("screenshot"),
                          QStringLiteral("Render the window to PNG and exit (for docs)"),
                          QStringLiteral("png"));
  QCommandLineOption steps(QStringLiteral("train-steps"),
                           QStringLiteral("With --screenshot: press Full Train Step N times first"),
                           QStringLiteral("n"), QStringLiteral("0"));
  QCommandLineOption select(QStringLiteral("select"),
                            QStringLiteral("With --screenshot: select the node with this name"),
                            QStringLiteral("name"));
  cli.addOptions({shot, steps, select});
  cli.process(app);

  const bool screenshot = cli.isSet(shot);
  dw::studio::MainWindow window(/*interactive=*/!screenshot);
  if (screenshot) window.resize(1920, 1080);
  window.show();
  QApplication::processEvents();
  const QString file = cli.positionalArguments().value(0);
  // Interactively, no file (or one that cannot be opened) starts on the welcome page.
  if (!screenshot ? !window.openAtStart(file) : !file.isEmpty() && !window.openFile(file)) {
    std::fprintf(stderr, "deepwire-studio: %s\n", qPrintable(window.lastError()));
    if (screenshot) return 1;
  }
  if (!screenshot) return app.exec();

  QApplication::processEvents();
  window.view()->fitToView();
  auto* panel = window.training();
  for (int i = 0; i < cli.value(steps).toInt(); ++i) {
    panel->fullTrainStepButton()->click();
    waitForTraining(panel);
    if (!panel->lastError().isEmpty()) {
      std::fprintf(stderr, "deepwire-studio: training: %s\n", qPrintable(panel->lastError()));
      break;
    }
  }
  if (cli.value(steps).toInt() > 0 && panel->lastError().isEmpty()) {
    panel->evalStepButton()->click();  // a validation point and the metric, too
    waitForTraining(panel);
  }
  if (cli.isSet(select)) {
    for (const auto& [id, n] : window.model()->graph().nodes())
      if (QString::fromStdString(n.name) == cli.value(select)) window.scene()->selectOnly({id});
  }
  window.model()->validateNow();
  for (int i = 0; i < 10; ++i) QApplication::processEvents();
  window.view()->fitToView();  // again: the docks have settled to their final sizes
  QApplication::processEvents();
  const QPixmap pix = window.grab();
  if (!pix.save(cli.value(shot))) {
    std::fprintf(stderr, "deepwire-studio: cannot write %s\n", qPrintable(cli.value(shot)));
    return 1;
  }
  return 0;
}
