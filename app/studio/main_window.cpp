#include "app/studio/main_window.h"

#include <QAbstractScrollArea>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QComboBox>
#include <QCryptographicHash>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QMouseEvent>
#include <QPushButton>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QToolButton>
#include <QUndoGroup>
#include <algorithm>
#include <limits>
#include <tuple>

#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/palette.h"
#include "app/studio/params_panel.h"
#include "app/studio/training_panel.h"
#include "app/studio/welcome_page.h"
#include "engine/training/trainer.h"
#include "engine/function_inline.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"

namespace dw::studio {

namespace {
constexpr const char* kFragmentMime = "application/x-deepwire-fragment";
constexpr int kMaxRecent = 8;
QString qs(const std::string& s) {
  return QString::fromStdString(s);
}
// "1 node", "2 nodes": %n with (s) reads as "1 node(s)" without a translation loaded.
QString count(qint64 n, const QString& one, const QString& many) {
  return (n == 1 ? one : many).arg(n);
}

// Puts a file dialog's title inside it, over its folder box: where no window manager draws
// titles (a bare X server, some kiosk setups), a template's "Samples for the CNN classifier" and
// "Class labels for ..." dialogs looked the same, and a trial picked the labels as samples.
class FileDialogTitles : public QObject {
 public:
  using QObject::QObject;
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() == QEvent::Show)
      if (auto* d = qobject_cast<QFileDialog*>(watched); d && !d->windowTitle().isEmpty())
        d->setLabelText(QFileDialog::LookIn, d->windowTitle() + QStringLiteral(" — look in:"));
    return false;
  }
};

// A wheel turned over a spin box or a combo box the user has not clicked into scrolls what holds
// it, as in browsers' forms, instead of changing its value: a trial scrolling the Parameters
// panel set a weight's regularizer to l1l2, one undo step per notch, without noticing.
class WheelGuard : public QObject {
 public:
  using QObject::QObject;
  bool eventFilter(QObject* watched, QEvent* event) override {
    auto* w = qobject_cast<QWidget*>(watched);
    const bool guarded = w && (qobject_cast<QAbstractSpinBox*>(w) || qobject_cast<QComboBox*>(w));
    if (!guarded) return false;
    // Qt would focus them on the wheel (Qt::WheelFocus), which lets the value change.
    if (event->type() == QEvent::Polish && (w->focusPolicy() & Qt::WheelFocus) == Qt::WheelFocus)
      w->setFocusPolicy(Qt::StrongFocus);
    if (event->type() != QEvent::Wheel || w->hasFocus()) return false;
    for (QWidget* p = w->parentWidget(); p; p = p->parentWidget())
      if (auto* area = qobject_cast<QAbstractScrollArea*>(p)) {
        QCoreApplication::sendEvent(area->viewport(), event);
        break;
      }
    return true;
  }
};
}  // namespace

StatusMessage::StatusMessage(QWidget* parent) : QLabel(parent) {
  setObjectName(QStringLiteral("statusMessage"));
  setTextFormat(Qt::PlainText);
  // Ignored: the label never asks for the whole message's width, so the summary keeps its room.
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  setMinimumWidth(60);
}

void StatusMessage::setMessage(const QString& message) {
  message_ = message;
  // One line in the bar (a message's lines joined).
  line_ = message.trimmed();
  line_.replace(QRegularExpression(QStringLiteral("\\s*\\n\\s*")), QStringLiteral(" · "));
  // Rich text, so that the tooltip wraps instead of running off the screen.
  setToolTip(message.isEmpty() ? QString()
                               : QStringLiteral("<p style='white-space:pre-wrap'>%1</p>")
                                     .arg(message.trimmed().toHtmlEscaped()));
  elide();
}

void StatusMessage::elide() {
  const QString shown = fontMetrics().elidedText(line_, Qt::ElideRight, contentsRect().width());
  setText(shown);
  setCursor(isElided() ? Qt::PointingHandCursor : Qt::ArrowCursor);
}

void StatusMessage::resizeEvent(QResizeEvent* e) {
  QLabel::resizeEvent(e);
  elide();
}

void StatusMessage::mouseReleaseEvent(QMouseEvent* e) {
  QLabel::mouseReleaseEvent(e);
  if (e->button() == Qt::LeftButton && isElided() && onClicked) onClicked();
}

MainWindow::MainWindow(bool interactive, QWidget* parent)
    : QMainWindow(parent), interactive_(interactive) {
  if (static bool once = false; !once && qApp) {
    once = true;
    qApp->installEventFilter(new FileDialogTitles(qApp));
    qApp->installEventFilter(new WheelGuard(qApp));
  }
  model_ = new GraphModel(this);
  scene_ = new GraphScene(model_, this);
  view_ = new GraphView(scene_, this);
  // The canvas and the welcome page share the central area; the canvas is the default.
  central_ = new QStackedWidget(this);
  central_->addWidget(view_);
  welcome_ = new WelcomePage(central_);
  examples_ = findExamples();
  welcome_->setExamples(examples_);
  central_->addWidget(welcome_);
  central_->setCurrentWidget(view_);
  setCentralWidget(central_);
  summary_ = new QLabel(this);
  summary_->setObjectName(QStringLiteral("graphSummary"));
  message_ = new StatusMessage(this);
  // A normal widget with all the stretch: it ends where the permanent summary begins.
  statusBar()->addWidget(message_, 1);
  statusBar()->addPermanentWidget(summary_);
  messageTimer_.setSingleShot(true);
  messageTimer_.setInterval(15'000);
  connect(&messageTimer_, &QTimer::timeout, this, [this] { message_->setMessage(QString()); });
  message_->onClicked = [this] {
    auto* box = new QMessageBox(QMessageBox::Information, tr("Message"), message_->message(),
                                QMessageBox::Ok, this);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setTextInteractionFlags(Qt::TextSelectableByMouse);
    box->open();
  };
  createDocks();
  createActions();
  createMenus();
  createFindBar();

  connect(scene_, &GraphScene::statusMessage, this, &MainWindow::showStatus);
  connect(params_, &ParamsPanel::statusMessage, this, &MainWindow::showStatus);
  connect(training_, &TrainingPanel::statusMessage, this, &MainWindow::showStatus);
  connect(training_, &TrainingPanel::staleStatus, this, [this](const QString& message) {
    if (!message.isEmpty() && message_->message().contains(message)) showStatus(QString());
  });
  connect(view_, &GraphView::nodeDropped, this,
          [this](const QString& d, const QString& t, QPointF pos) { placeNode(d, t, pos); });
  connect(palette_, &Palette::placeRequested, this,
          [this](const QString& d, const QString& t) { placeNode(d, t); });
  connect(scene_, &QGraphicsScene::selectionChanged, this, [this] {
    auto ids = scene_->selectedNodes();
    params_->setNode(ids.size() == 1 ? ids.front() : 0);
  });
  connect(model_, &GraphModel::validated, this, &MainWindow::refreshProblems);
  connect(model_, &GraphModel::opsetRaised, this,
          [this](const QString& type, const QString& domain, int from, int to) {
            showStatus(tr("%1 is in %2 opset %3: the model now imports opset %3 (was %4; "
                          "Undo puts it back)")
                           .arg(type, domain)
                           .arg(to)
                           .arg(from));
          });
  // Any document (New, Open, Import, recovery) or any node placed means the canvas is wanted.
  connect(model_, &GraphModel::modelReset, this, [this] { setWelcomeVisible(false); });
  connect(model_, &GraphModel::nodeAdded, this, [this] { setWelcomeVisible(false); });
  connect(welcome_, &WelcomePage::newRequested, this, [this] {
    if (maybeSave()) newDocument();
  });
  connect(welcome_, &WelcomePage::openRequested, this, [this](const QString& path) {
    if (path.isEmpty()) return action("open")->trigger();
    if (maybeSave()) openFile(path);
  });
  connect(welcome_, &WelcomePage::templateRequested, this,
          [this](ClassifierTemplate kind) { startTemplate(int(kind)); });
  connect(welcome_, &WelcomePage::nodeDropped, this,
          [this](const QString& d, const QString& t, QPoint pos) {
            setWelcomeVisible(false);
            placeNode(d, t,
                      scene_->snapped(view_->mapToScene(
                          view_->viewport()->mapFrom(this, welcome_->mapTo(this, pos)))));
          });
  connect(model_->undoStack(), &QUndoStack::cleanChanged, this, [this] { updateTitle(); });
  // Edits, the trainer's new weights and the dock's settings each make the autosave stale.
  for (auto changed : {&TrainingPanel::weightsStateChanged, &TrainingPanel::settingsChanged,
                       &TrainingPanel::jobFinished})
    connect(training_, changed, this, [this] { autosaveDirty_ = true; });
  connect(model_->undoStack(), &QUndoStack::indexChanged, this, [this] { autosaveDirty_ = true; });

  autosaveTimer_.setInterval(30'000);
  connect(&autosaveTimer_, &QTimer::timeout, this, &MainWindow::autosaveNow);
  autosaveTimer_.start();
  diskCheck_.setSingleShot(true);
  diskCheck_.setInterval(300);
  connect(&diskCheck_, &QTimer::timeout, this, &MainWindow::checkDisk);
  connect(&watcher_, &QFileSystemWatcher::fileChanged, this, [this] { diskCheck_.start(); });

  resize(1500, 920);
  updateTitle();
  refreshProblems();
  // The autosave recovery prompt waits for openAtStart: asked before the file given on the
  // command line was open, it could not say what recovering would replace, and Yes was then
  // overwritten by that file.
}

MainWindow::~MainWindow() {
  // Items die with the scene below; their selection changes must not reach half-destroyed docks.
  scene_->blockSignals(true);
  training_->stopAndWait();
  // The model and its undo stack are children, deleted after this destructor has run: what they
  // emit then must not reach this window's slots (UBSan: member access within a MainWindow that
  // is no longer one).
  QObject::disconnect(model_->undoStack(), nullptr, this, nullptr);
  QObject::disconnect(model_, nullptr, this, nullptr);
}

QAction* MainWindow::action(const QString& name) const {
  auto it = actions_.find(name);
  return it == actions_.end() ? nullptr : it->second;
}

void MainWindow::createDocks() {
  setDockOptions(AnimatedDocks | AllowTabbedDocks);
  palette_ = new Palette(this);
  auto* paletteDock = new QDockWidget(tr("Palette"), this);
  paletteDock->setObjectName("paletteDock");
  paletteDock->setWidget(palette_);
  addDockWidget(Qt::LeftDockWidgetArea, paletteDock);

  params_ = new ParamsPanel(model_, this);
  auto* paramsDock = new QDockWidget(tr("Parameters"), this);
  paramsDock->setObjectName("paramsDock");
  paramsDock->setWidget(params_);
  addDockWidget(Qt::RightDockWidgetArea, paramsDock);

  training_ = new TrainingPanel(model_, this);
  auto* trainingDock = new QDockWidget(tr("Training"), this);
  trainingDock->setObjectName("trainingDock");
  trainingDock->setWidget(training_);
  addDockWidget(Qt::BottomDockWidgetArea, trainingDock);

  auto* dataDock = new QDockWidget(tr("Data"), this);
  dataDock->setObjectName("dataDock");
  dataDock->setWidget(training_->dataPanel());
  addDockWidget(Qt::RightDockWidgetArea, dataDock);
  tabifyDockWidget(paramsDock, dataDock);
  paramsDock->raise();
  connect(training_, &TrainingPanel::showDataRequested, this, [dataDock] {
    dataDock->show();
    dataDock->raise();
  });
  connect(training_, &TrainingPanel::weightsStateChanged, this, &MainWindow::updateTitle);
  // A Fit across processes trains the project on disk: what the user sees must be in it. Unsaved
  // changes go into the user's file only when the user says so (a trial's edits were written
  // over the project without a word).
  training_->saveForProcesses = [this]() -> QString {
    if (!currentFile_.isEmpty() && !hasUnsavedWork() && QFileInfo::exists(currentFile_))
      return currentFile_;
    // An example is not the user's to overwrite: its changes go into a copy (Save As below).
    if (!currentFile_.isEmpty() && !showsExample()) {
      if (interactive_) {
        const int n = training_->processesBox()->value();
        QMessageBox box(QMessageBox::Question, tr("Save before fitting in %1 processes?").arg(n),
                        tr("The %1 processes train the project file, so %2 must first hold what "
                           "you see here, your unsaved changes included.\n\nSave it and fit?")
                            .arg(n)
                            .arg(QFileInfo(currentFile_).fileName()),
                        QMessageBox::NoButton, this);
        QPushButton* go = box.addButton(tr("Save and Fit"), QMessageBox::AcceptRole);
        box.addButton(QMessageBox::Cancel);
        box.setDefaultButton(go);
        box.exec();
        if (box.clickedButton() != go) return QString();
      }
      return saveTo(currentFile_) ? currentFile_ : QString();
    }
    if (!interactive_) return QString();
    return saveAs(tr("Save the project to fit it in %1 processes")
                      .arg(training_->processesBox()->value()))
               ? currentFile_
               : QString();
  };
  connect(training_, &TrainingPanel::settingsChanged, this, &MainWindow::updateTitle);

  problems_ = new QListWidget(this);
  problems_->setWordWrap(true);
  problems_->setAlternatingRowColors(true);
  problemsDock_ = new QDockWidget(tr("Problems"), this);
  problemsDock_->setObjectName("problemsDock");
  problemsDock_->setWidget(problems_);
  addDockWidget(Qt::BottomDockWidgetArea, problemsDock_);
  tabifyDockWidget(trainingDock, problemsDock_);
  trainingDock->raise();
  // Dock sizes apply once the window is laid out.
  QTimer::singleShot(0, this, [this, paletteDock, paramsDock, trainingDock] {
    // Wide enough for the Data panel's source rows (it shares this area with Parameters).
    resizeDocks({paletteDock, paramsDock}, {palette_->preferredWidth(), 430}, Qt::Horizontal);
    resizeDocks({trainingDock}, {330}, Qt::Vertical);
  });

  connect(problems_, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
    const NodeId id = item->data(Qt::UserRole).toLongLong();
    if (NodeItem* node = scene_->nodeItem(id)) {
      scene_->selectOnly({id});
      view_->showItem(node);
    }
  });
}

void MainWindow::createActions() {
  auto make = [this](const QString& name, const QString& text, QKeySequence key,
                     std::function<void()> fn) {
    auto* a = new QAction(text, this);
    a->setObjectName(name);
    if (!key.isEmpty()) a->setShortcut(key);
    connect(a, &QAction::triggered, this, [fn] { fn(); });
    actions_[name] = a;
    addAction(a);
    return a;
  };
  make("new", tr("&New"), QKeySequence::New, [this] {
    if (maybeSave()) newDocument();
  });
  // Done with a document without quitting: back to the welcome page, as an empty one.
  make("close", tr("&Close"), QKeySequence::Close, [this] {
    if (!maybeSave()) return;
    newDocument();
    setWelcomeVisible(true);
  });
  make("open", tr("&Open…"), QKeySequence::Open, [this] {
    if (!maybeSave()) return;
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open"), QString(), tr("deepwire projects and ONNX models (*.dwproj *.onnx)"));
    takeKeyboardBack();
    if (!path.isEmpty()) openFile(path);
  });
  make("reload", tr("Re&load from Disk"), QKeySequence(), [this] {
    if (hasUnsavedWork() && interactive_ &&
        QMessageBox::question(this, tr("Reload from disk"),
                              tr("Reload %1 as it is on disk? Your unsaved changes are lost.")
                                  .arg(QFileInfo(currentFile_).fileName()),
                              QMessageBox::Yes | QMessageBox::No,
                              QMessageBox::No) != QMessageBox::Yes)
      return;
    reloadFromDisk();
  });
  make("save", tr("&Save"), QKeySequence::Save, [this] { save(); });
  // Not QKeySequence::SaveAs: it is empty on several Linux desktops.
  make("saveAs", tr("Save &As…"), QKeySequence(tr("Ctrl+Shift+S")), [this] { saveAs(); });
  make("importOnnx", tr("&Import ONNX…"), QKeySequence(tr("Ctrl+I")), [this] {
    if (!maybeSave()) return;
    const QString path = QFileDialog::getOpenFileName(this, tr("Import ONNX"), QString(),
                                                      tr("ONNX models (*.onnx)"));
    takeKeyboardBack();
    if (!path.isEmpty()) openFile(path);
  });
  // A graph with problems cannot be exported: said before the file dialog, not after it.
  auto exportable = [this] {
    const auto problems = model_->graph().validate();
    if (problems.empty()) return true;
    QStringList lines;
    for (size_t i = 0; i < problems.size() && i < 5; ++i) lines << qs(problems[i].message);
    if (problems.size() > 5) lines << tr("… and %1 more").arg(problems.size() - 5);
    showError(tr("Cannot export ONNX"),
              tr("Fix the graph's problems first (the Problems dock lists them):\n%1")
                  .arg(lines.join('\n')));
    return false;
  };
  make("exportOnnx", tr("&Export ONNX for Inference…"), QKeySequence(tr("Ctrl+E")),
       [this, exportable] {
         if (!exportable()) return;
         const QString path = QFileDialog::getSaveFileName(
             this, tr("Export ONNX"), exportSuggestion(QString()), tr("ONNX models (*.onnx)"));
         takeKeyboardBack();
         if (!path.isEmpty()) exportOnnxTo(path, false);
       });
  make("exportTraining", tr("Export ONNX with &Training Info…"), QKeySequence(tr("Ctrl+Shift+E")),
       [this, exportable] {
         if (!exportable()) return;
         const QString path = QFileDialog::getSaveFileName(
             this, tr("Export ONNX with training info"),
             exportSuggestion(QStringLiteral("_training")), tr("ONNX models (*.onnx)"));
         takeKeyboardBack();
         if (!path.isEmpty()) exportOnnxTo(path, true);
       });
  QAction* conv = make("exportDataConversion", tr("Export Includes the &Data Conversion"),
                       QKeySequence(), [this] {
                         QSettings().setValue(QStringLiteral("exportDataConversion"),
                                              action("exportDataConversion")->isChecked());
                       });
  conv->setCheckable(true);
  conv->setChecked(QSettings().value(QStringLiteral("exportDataConversion"), true).toBool());
  conv->setToolTip(
      tr("The exported model starts with the Data panel's conversion (cast, scale, "
         "normalization, reshape), so it takes the data as stored. Off: it takes converted "
         "data, for callers that convert it themselves."));
  make("quit", tr("&Quit"), QKeySequence::Quit, [this] { close(); });

  // Through a group of the one stack, so that a locked model (a training run) can take the
  // stack out of it: the actions are then disabled, even after a move pushes a step.
  auto* undoGroup = new QUndoGroup(this);
  undoGroup->addStack(model_->undoStack());
  undoGroup->setActiveStack(model_->undoStack());
  connect(model_, &GraphModel::lockChanged, this, [this, undoGroup](bool locked) {
    undoGroup->setActiveStack(locked ? nullptr : model_->undoStack());
  });
  QAction* undo = undoGroup->createUndoAction(this, tr("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  undo->setObjectName("undo");
  actions_["undo"] = undo;
  QAction* redo = undoGroup->createRedoAction(this, tr("&Redo"));
  redo->setShortcuts({QKeySequence::Redo, QKeySequence(tr("Ctrl+Y"))});
  redo->setObjectName("redo");
  actions_["redo"] = redo;
  make("cut", tr("Cu&t"), QKeySequence::Cut, [this] { cutSelection(); });
  make("copy", tr("&Copy"), QKeySequence::Copy, [this] { copySelection(); });
  make("paste", tr("&Paste"), QKeySequence::Paste, [this] { paste(); });
  make("duplicate", tr("D&uplicate"), QKeySequence(tr("Ctrl+D")), [this] { duplicateSelection(); });
  make("delete", tr("&Delete"), QKeySequence::Delete, [this] {
    deleteSelection();
  })->setShortcuts({QKeySequence::Delete, QKeySequence(Qt::Key_Backspace)});
  make("selectAll", tr("Select &All"), QKeySequence::SelectAll, [this] { selectAll(); });
  make("find", tr("&Find Node…"), QKeySequence::Find, [this] { showFind(); });
  make("findNext", tr("Find &Next"), QKeySequence(Qt::Key_F3), [this] {
    if (findBar_->isHidden() || findEdit_->text().trimmed().isEmpty())
      showFind();
    else
      findNext(1);
  });
  make("findPrevious", tr("Find Pre&vious"), QKeySequence(Qt::SHIFT | Qt::Key_F3), [this] {
    if (findBar_->isHidden() || findEdit_->text().trimmed().isEmpty())
      showFind();
    else
      findNext(-1);
  });

  make("freezeSelected", tr("&Freeze Selected Weights"), QKeySequence(), [this] {
    setSelectionTrainable(false);
  })->setToolTip(tr("Training leaves the selected layers' and Initializers' weights as they are"));
  make("unfreezeSelected", tr("&Unfreeze Selected Weights"), QKeySequence(), [this] {
    setSelectionTrainable(true);
  })->setToolTip(tr("Training updates the selected layers' and Initializers' weights again"));
  make("writeWeights", tr("&Write Weights to the Graph"), QKeySequence(), [this] {
    training_->writeWeightsButton()->click();
  })->setToolTip(training_->writeWeightsButton()->toolTip());
  make("resetWeights", tr("&Reset Weights"), QKeySequence(), [this] {
    training_->resetWeightsButton()->click();
  })->setToolTip(training_->resetWeightsButton()->toolTip());
  // Checkpoints are what `deepwire train --checkpoint` writes and `--resume` reads: training
  // moves between the command line and the studio with its optimizer state.
  auto checkpointStart = [this] {
    return currentFile_.isEmpty() ? QDir::currentPath() : QFileInfo(currentFile_).absolutePath();
  };
  make("loadCheckpoint", tr("&Load Checkpoint…"), QKeySequence(),
       [this, checkpointStart] {
         const QString dir = QFileDialog::getExistingDirectory(
             this, tr("Load a checkpoint (a folder with checkpoint.json)"), checkpointStart());
         if (dir.isEmpty()) return;
         // Its error in a box: the dock's error line may be scrolled out of a short dock, and the
         // status bar's is easily missed.
         connect(
             training_, &TrainingPanel::jobFinished, this,
             [this] {
               if (!training_->lastError().isEmpty())
                 showError(tr("Load Checkpoint"), training_->lastError());
             },
             Qt::SingleShotConnection);
         training_->loadCheckpoint(dir);
       })
      ->setToolTip(tr("Continue from a checkpoint of deepwire train --checkpoint or of Save "
                      "Checkpoint: its weights go into the graph, and the next step or Fit goes "
                      "on with its optimizer state"));
  make(
      "saveCheckpoint", tr("&Save Checkpoint…"), QKeySequence(),
      [this, checkpointStart] {
        // A file dialog, not a folder one: a new folder's name can be typed (saving creates it).
        const QString dir = QFileDialog::getSaveFileName(
            this, tr("Save a checkpoint as a folder (a new name makes one)"),
            QDir(checkpointStart()).filePath(QStringLiteral("checkpoint")), QString(), nullptr,
            QFileDialog::DontConfirmOverwrite);
        if (dir.isEmpty()) return;
        if (QFileInfo(dir).isFile())
          return showError(tr("Save Checkpoint"),
                           tr("%1 is a file: a checkpoint is a folder; choose a new name or a "
                              "checkpoint's folder")
                               .arg(dir));
        const Status st = training_->saveCheckpoint(dir);
        if (!st.ok())
          showError(tr("Save Checkpoint"), qs(st.message()));
        else
          showStatus(
              tr("Checkpoint saved to %1 (deepwire train --resume %1 continues from it)").arg(dir));
      })
      ->setToolTip(tr("The trained weights, optimizer state and counters into a folder, for Load "
                      "Checkpoint or deepwire train --resume"));
  make("fit", tr("&Fit to View"), QKeySequence(tr("F")), [this] { view_->fitToView(); });
  make("zoomIn", tr("Zoom &In"), QKeySequence::ZoomIn, [this] { view_->zoomBy(1.25); });
  make("zoomOut", tr("Zoom &Out"), QKeySequence::ZoomOut, [this] { view_->zoomBy(0.8); });
  QAction* snap = make("snap", tr("&Snap to Grid"), QKeySequence(),
                       [this] { scene_->setSnapToGrid(action("snap")->isChecked()); });
  snap->setCheckable(true);
  snap->setChecked(scene_->snapToGrid());
  make("autoLayout", tr("Auto &Layout"), QKeySequence(tr("Ctrl+L")), [this] {
    // Layout as one undoable move: compute on a copy, then move every node there.
    Graph copy = model_->graph();
    autoLayout(copy);
    std::map<NodeId, Position> to;
    for (const auto& [id, n] : copy.nodes()) to[id] = n.position;
    const dw::Status st = model_->moveNodes(to);
    if (!st.ok()) showStatus(tr("Auto layout: %1").arg(qs(st.message())));
    view_->fitToView();
  });
  make("validate", tr("&Validate Now"), QKeySequence(tr("F5")), [this] { model_->validateNow(); });
  QAction* welcome = make("welcome", tr("&Welcome Page"), QKeySequence(),
                          [this] { setWelcomeVisible(action("welcome")->isChecked()); });
  welcome->setCheckable(true);
}

void MainWindow::createMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(action("new"));
  file->addAction(action("open"));
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  file->addAction(action("reload"));
  file->addSeparator();
  file->addAction(action("save"));
  file->addAction(action("saveAs"));
  file->addSeparator();
  file->addAction(action("importOnnx"));
  file->addAction(action("exportOnnx"));
  file->addAction(action("exportTraining"));
  file->addAction(action("exportDataConversion"));
  file->addSeparator();
  file->addAction(action("close"));
  file->addAction(action("quit"));
  rebuildRecentMenu();

  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  edit->addAction(action("undo"));
  edit->addAction(action("redo"));
  edit->addSeparator();
  for (const char* name : {"cut", "copy", "paste", "duplicate", "delete"})
    edit->addAction(action(name));
  edit->addSeparator();
  edit->addAction(action("selectAll"));
  edit->addSeparator();
  for (const char* name : {"find", "findNext", "findPrevious"}) edit->addAction(action(name));

  QMenu* trainingMenu = menuBar()->addMenu(tr("&Training"));
  trainingMenu->setToolTipsVisible(true);
  trainingMenu->addAction(action("writeWeights"));
  trainingMenu->addAction(action("resetWeights"));
  trainingMenu->addSeparator();
  trainingMenu->addAction(action("freezeSelected"));
  trainingMenu->addAction(action("unfreezeSelected"));
  trainingMenu->addSeparator();
  trainingMenu->addAction(action("loadCheckpoint"));
  trainingMenu->addAction(action("saveCheckpoint"));
  // Not while a job runs: the dock's buttons say when they can be used.
  connect(trainingMenu, &QMenu::aboutToShow, this, [this] {
    action("writeWeights")->setEnabled(training_->writeWeightsButton()->isEnabled());
    action("resetWeights")->setEnabled(training_->resetWeightsButton()->isEnabled());
    action("loadCheckpoint")->setEnabled(!training_->busy());
    action("saveCheckpoint")->setEnabled(!training_->busy() && training_->trainerCounters());
  });

  QMenu* viewMenu = menuBar()->addMenu(tr("&View"));
  viewMenu->addAction(action("welcome"));
  viewMenu->addSeparator();
  for (const char* name : {"fit", "zoomIn", "zoomOut", "snap", "autoLayout", "validate"})
    viewMenu->addAction(action(name));
  viewMenu->addSeparator();
  for (QDockWidget* dock : findChildren<QDockWidget*>())
    viewMenu->addAction(dock->toggleViewAction());
}

void MainWindow::showError(const QString& title, const QString& message) {
  lastError_ = message;
  showStatus(title + QStringLiteral(": ") + message);
  if (!interactive_) return;
  // Non-modal: an error never blocks the event loop (training keeps reporting behind it).
  auto* box = new QMessageBox(QMessageBox::Critical, title, message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

void MainWindow::showStatus(const QString& message) {
  message_->setMessage(message);
  messageTimer_.start();
}

QString MainWindow::statusMessage() const {
  return message_->message();
}

void MainWindow::updateTitle() {
  const QString name = !currentFile_.isEmpty() ? QFileInfo(currentFile_).fileName()
                       : !importedFrom_.isEmpty()
                           ? tr("%1 (imported)").arg(QFileInfo(importedFrom_).fileName())
                           : tr("untitled");
  setWindowTitle(QStringLiteral("%1[*] — deepwire studio").arg(name));
  // Trained weights the graph does not hold yet are unsaved work too.
  setWindowModified(hasUnsavedWork());
}

void MainWindow::refreshProblems() {
  problems_->clear();
  auto addAll = [this](const std::vector<dw::Problem>& entries, QStyle::StandardPixmap icon) {
    for (const auto& p : entries) {
      auto* item = new QListWidgetItem(style()->standardIcon(icon), qs(p.message), problems_);
      item->setData(Qt::UserRole, static_cast<qlonglong>(p.node));
      item->setToolTip(qs(p.message));
    }
  };
  const auto& list = model_->problems();
  const auto& hints = model_->hints();
  addAll(list, QStyle::SP_MessageBoxCritical);
  // Hints follow the problems, with a warning icon: they block nothing.
  addAll(hints, QStyle::SP_MessageBoxWarning);
  const qint64 shown = qint64(list.size() + hints.size());
  problemsDock_->setWindowTitle(shown == 0 ? tr("Problems") : tr("Problems (%1)").arg(shown));
  const Graph& g = model_->graph();
  QString state =
      list.empty() ? tr("valid") : count(qint64(list.size()), tr("%1 problem"), tr("%1 problems"));
  if (!hints.empty())
    state += QStringLiteral(" · ") + count(qint64(hints.size()), tr("%1 hint"), tr("%1 hints"));
  summary_->setText(QStringLiteral("%1 · %2 · %3")
                        .arg(count(qint64(g.nodes().size()), tr("%1 node"), tr("%1 nodes")),
                             count(qint64(g.links().size()), tr("%1 link"), tr("%1 links")),
                             state));
}

bool MainWindow::writeAtomically(const QString& path, const QByteArray& bytes) {
  // The same write as the CLI's (unique temp file, fsync, rename): one guarantee, one place.
  const Status st = writeFileAtomic(path.toStdString(), bytes.toStdString());
  if (!st.ok()) {
    showError(tr("Cannot save"), qs(st.message()));
    return false;
  }
  return true;
}

void MainWindow::setWelcomeVisible(bool on) {
  if (on) welcome_->setRecentFiles(recentFiles());
  central_->setCurrentWidget(on ? static_cast<QWidget*>(welcome_) : view_);
  if (QAction* a = action(QStringLiteral("welcome"))) {
    const QSignalBlocker b(a);
    a->setChecked(on);
  }
}

bool MainWindow::welcomeVisible() const {
  return central_->currentWidget() == welcome_;
}

bool MainWindow::openAtStart(const QString& file) {
  // Before this version every document shared one autosave file: it belongs to the document its
  // settings name, and moves to that document's own file.
  const QString legacy =
      QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/autosave.dwproj";
  if (QFileInfo::exists(legacy)) {
    QSettings settings;
    const QString source = settings.value(QStringLiteral("autosave/source")).toString();
    const QString target = autosavePath(source);
    QDir().mkpath(QFileInfo(target).absolutePath());
    if (QFileInfo::exists(target) || !QFile::rename(legacy, target)) QFile::remove(legacy);
    if (source.isEmpty())
      settings.setValue(QStringLiteral("autosave/untitledImported"),
                        settings.value(QStringLiteral("autosave/imported")));
    settings.remove(QStringLiteral("autosave/source"));
    settings.remove(QStringLiteral("autosave/imported"));
  }
  if (!file.isEmpty() && openFile(file)) return true;
  setWelcomeVisible(true);
  // Without a document of its own, the studio offers the untitled one it lost (nothing else's).
  if (currentFile_.isEmpty() && model_->graph().nodes().empty()) offerRecovery();
  return file.isEmpty();
}

void MainWindow::offerRecovery() {
  const QString autosave = autosavePath(currentFile_);
  if (!interactive_ || autosave == ownAutosave_ || !QFileInfo::exists(autosave)) return;
  // Once the window is up and the file open: the prompt then says what it would replace.
  QTimer::singleShot(0, this, &MainWindow::askToRecover);
}

QString MainWindow::recoveryQuestion() const {
  const QFileInfo autosave(autosavePath(currentFile_));
  if (!autosave.exists() || autosave.absoluteFilePath() == ownAutosave_) return QString();
  const QString imported =
      QSettings().value(QStringLiteral("autosave/untitledImported")).toString();
  const QString document = !currentFile_.isEmpty() ? QDir::toNativeSeparators(currentFile_)
                           : !imported.isEmpty()
                               ? tr("an untitled document (imported from %1)").arg(imported)
                               : tr("an untitled document");
  const QLocale locale;
  QString text = tr("deepwire studio did not close normally while %1 had unsaved changes. They "
                    "were autosaved %2.")
                     .arg(document, locale.toString(autosave.lastModified(), QLocale::LongFormat));
  const QFileInfo file(currentFile_);
  if (!currentFile_.isEmpty() && file.exists() && file.lastModified() > autosave.lastModified())
    text += QStringLiteral("\n\n") +
            tr("The file was saved after that (%1): recovering shows the older autosaved "
               "version, and the file stays as it is until you save.")
                .arg(locale.toString(file.lastModified(), QLocale::LongFormat));
  return text + QStringLiteral("\n\n") + tr("Recover it? No deletes the autosave.");
}

void MainWindow::askToRecover() {
  const QString question = recoveryQuestion();
  if (question.isEmpty()) return;
  const QString autosave = autosavePath(currentFile_);
  const auto answer = QMessageBox::question(this, tr("Recover unsaved work?"), question,
                                            QMessageBox::Yes | QMessageBox::No, QMessageBox::Yes);
  // The document may have changed while the question was open (it does not block the window's
  // timers): the answer is about the autosave it was asked about.
  if (autosavePath(currentFile_) != autosave) return;
  if (answer == QMessageBox::Yes)
    recoverAutosave();
  else
    QFile::remove(autosave);
}

void MainWindow::startTemplate(int kind) {
  const auto k = static_cast<ClassifierTemplate>(kind);
  if (!maybeSave()) return;
  const std::optional<TemplateSource> source = welcome_->askTemplateSource(k);
  if (!source) return;
  QApplication::setOverrideCursor(Qt::WaitCursor);
  const QString error = buildClassifier(*this, k, *source);
  QApplication::restoreOverrideCursor();
  if (!error.isEmpty()) {
    // Nothing built: back to the page, so the user can pick other data.
    if (model_->graph().nodes().empty()) setWelcomeVisible(true);
    showError(tr("Template"), error);
    return;
  }
  // The Data dock shows what the template did with the data: the sources and their conversion.
  if (auto* dock = findChild<QDockWidget*>(QStringLiteral("dataDock"))) {
    dock->show();
    dock->raise();
  }
  // The whole template in view, once the docks it showed have taken their room (the trial's
  // template ran off the right edge, its Output Train out of sight).
  QTimer::singleShot(0, view_, [v = view_] { v->fitToView(); });
  showStatus(tr("Built the %1 classifier for %2: press Fit in the Training dock to train it")
                 .arg(k == ClassifierTemplate::kMlp ? tr("MLP") : tr("CNN"),
                      QFileInfo(source->samples).fileName()));
}

void MainWindow::newDocument() {
  discardOwnAutosave();  // the user saved or discarded that document (maybeSave)
  training_->setProjectDir(QString());
  model_->reset(Graph());
  currentFile_.clear();
  importedFrom_.clear();
  watchFile(QByteArray());
  pasteCount_ = 0;
  training_->setProjectDir(QString());
  updateTitle();
  view_->resetTransform();
  view_->centerOn(0, 0);
  statusBar()->clearMessage();  // the last document's result is not this one's
}

bool MainWindow::openFile(const QString& path) {
  return loadDocument(path, false);
}

bool MainWindow::reloadFromDisk() {
  if (currentFile_.isEmpty()) {
    showStatus(tr("Nothing to reload: the document has not been saved to a file"));
    return false;
  }
  if (training_->busy()) {
    showStatus(tr("Reload after training: the project cannot be replaced while it trains"));
    return false;
  }
  return loadDocument(currentFile_, true);
}

bool MainWindow::hasUnsavedWork() const {
  return !model_->undoStack()->isClean() || training_->hasUnsyncedWeights() ||
         training_->hasUnsavedSettings();
}

void MainWindow::watchFile(const QByteArray& bytes) {
  onDisk_ = bytes;
  fileGone_ = false;
  if (!watcher_.files().isEmpty()) watcher_.removePaths(watcher_.files());
  if (!currentFile_.isEmpty()) watcher_.addPath(currentFile_);
}

void MainWindow::checkDisk() {
  if (currentFile_.isEmpty()) return;
  // A save by rename (ours, the CLI's) replaces the file, and the watch goes with the old one.
  QFile f(currentFile_);
  if (!f.open(QIODevice::ReadOnly)) {
    if (!fileGone_)
      showStatus(tr("%1 is gone from the disk (moved or deleted); Save writes it again")
                     .arg(QFileInfo(currentFile_).fileName()));
    fileGone_ = true;
    return;
  }
  fileGone_ = false;
  if (!watcher_.files().contains(currentFile_)) watcher_.addPath(currentFile_);
  const QByteArray bytes = f.readAll();
  if (bytes == onDisk_) return;
  onDisk_ = bytes;  // asked about once per version of the file
  const QString name = QFileInfo(currentFile_).fileName();
  if (training_->busy()) {
    showStatus(tr("%1 changed on disk; it is not reloaded while training runs (File > Reload "
                  "from Disk once it is done)")
                   .arg(name));
    return;
  }
  if (hasUnsavedWork()) {
    if (!interactive_) {
      showStatus(tr("%1 changed on disk; your unsaved changes are kept (File > Reload from Disk "
                    "takes the file's version, Save overwrites it)")
                     .arg(name));
      return;
    }
    QMessageBox box(QMessageBox::Question, tr("Project changed on disk"),
                    tr("%1 was changed by another program, and this window has unsaved "
                       "changes.\n\nReload the file (your changes are lost), or keep your "
                       "version (Save will overwrite the file)?")
                        .arg(name),
                    QMessageBox::NoButton, this);
    QAbstractButton* reload = box.addButton(tr("Reload"), QMessageBox::DestructiveRole);
    QPushButton* keep = box.addButton(tr("Keep Mine"), QMessageBox::RejectRole);
    box.setDefaultButton(keep);
    box.exec();
    if (box.clickedButton() != reload) return;
  }
  loadDocument(currentFile_, true);
}

bool MainWindow::loadDocument(const QString& path, bool reload) {
  const std::string p = path.toStdString();
  const bool isOnnx = path.endsWith(QStringLiteral(".onnx"), Qt::CaseInsensitive);
  // A project's bytes, read once: parsed here and kept to tell another program's change of the
  // file from this window's own saves.
  QByteArray bytes;
  Result<Graph> g = [&]() -> Result<Graph> {
    if (!isOnnx) {
      auto text = readFile(p);
      if (!text.ok()) return text.status();
      bytes = QByteArray::fromStdString(*text);
      return projectFromJsonText(*text, p);
    }
    auto m = readOnnxFile(p);
    if (m.ok()) m = engine::inlineLocalFunctions(*m);  // functions become their bodies
    if (!m.ok()) return m.status();
    return importOnnx(*m, p);  // lays the graph out when the file has no deepwire layout
  }();
  if (!g.ok()) {
    showError(isOnnx   ? tr("Cannot import ONNX")
              : reload ? tr("Cannot reload the project")
                       : tr("Cannot open project"),
              qs(g.message()));
    return false;
  }
  discardOwnAutosave();  // the user saved or discarded the document this one replaces
  training_->setProjectDir(QFileInfo(path).absolutePath());
  const QTransform zoom = view_->transform();
  const QPointF centre = view_->mapToScene(view_->viewport()->rect().center());
  model_->reset(std::move(*g));
  // An imported model is a new document: Save asks where to put the project.
  currentFile_ = isOnnx ? QString() : QFileInfo(path).absoluteFilePath();
  // Untitled, but named after its file in the title bar until saved.
  importedFrom_ = isOnnx ? QFileInfo(path).absoluteFilePath() : QString();
  training_->setProjectDir(QFileInfo(path).absolutePath());
  if (!isOnnx) addRecent(currentFile_);
  pasteCount_ = 0;
  updateTitle();
  watchFile(bytes);
  if (reload) {
    view_->setTransform(zoom);
    view_->centerOn(centre);
  } else {
    view_->fitToView(GraphView::kReadableZoom);
  }
  const QString nodes =
      count(qint64(model_->graph().nodes().size()), tr("%1 node"), tr("%1 nodes"));
  const QString file = QFileInfo(path).fileName();
  showStatus(reload ? tr("Reloaded %1 from disk (another program changed it): %2").arg(file, nodes)
             : isOnnx ? tr("Imported %1: %2").arg(file, nodes)
                      : tr("Opened %1: %2").arg(file, nodes));
  // This project's own unsaved work from a crash, if any (an import is a new, untitled
  // document: an untitled autosave is not its own).
  if (!isOnnx && !reload) offerRecovery();
  return true;
}

bool MainWindow::saveTo(const QString& path) {
  // Save keeps what was just trained, and the training panel's settings travel in the
  // project's "training" section.
  // Weights that cannot be written (training still running) never block saving the graph.
  QString weightsNote;
  if (Status st = training_->syncWeights(); !st.ok()) weightsNote = qs(st.message());
  training_->storeSettingsInModel();
  // A project saved into another folder has its relative data paths rebased there (they led
  // nowhere). (An untitled document's are the project's to be: they are kept as they are.)
  const QString dir = QFileInfo(path).absolutePath();
  Graph saved = model_->graph();
  if (!training_->projectDir().isEmpty())
    engine::training::rebaseDataPaths(saved, training_->projectDir().toStdString(),
                                      dir.toStdString());
  const QByteArray bytes = QByteArray::fromStdString(projectToJsonText(saved));
  if (!writeAtomically(path, bytes)) return false;
  const auto section = saved.info().sections.find("training");
  const bool rebased = section != saved.info().sections.end() &&
                       model_->graph().info().sections.at("training") != section->second;
  if (rebased) model_->setSection("training", section->second);
  // Saved, the document's autosave holds nothing more (under its old name, after Save As).
  discardOwnAutosave();
  currentFile_ = QFileInfo(path).absoluteFilePath();
  importedFrom_.clear();
  if (rebased)
    training_->movedTo(dir);
  else
    training_->setProjectDir(dir);
  model_->undoStack()->setClean();
  training_->markSettingsSaved();
  addRecent(currentFile_);
  watchFile(bytes);
  updateTitle();
  if (!weightsNote.isEmpty())
    showError(tr("Saved without the latest trained weights"),
              tr("%1 holds the graph and the weights it had before this training. The trained "
                 "weights were not written: %2")
                  .arg(path, weightsNote));
  else
    showStatus(tr("Saved %1").arg(path));
  return true;
}

bool MainWindow::showsExample() const {
  return !currentFile_.isEmpty() && examples_.contains(QDir::cleanPath(currentFile_));
}

bool MainWindow::save() {
  // An example opens from where deepwire keeps it: Save makes the user's copy (it overwrote the
  // shipped example, or failed where that is read-only).
  if (showsExample()) return saveAs(tr("Save your copy of the example"));
  return currentFile_.isEmpty() ? saveAs() : saveTo(currentFile_);
}

void MainWindow::takeKeyboardBack() {
  // A closed file dialog can leave no window active (seen without a window manager, and on the
  // offscreen platform): the window's shortcuts, Ctrl+S among them, then reached nothing.
  activateWindow();
  QWidget* focus = focusWidget();
  if (!focus || !focus->isVisible()) view_->setFocus(Qt::OtherFocusReason);
}

bool MainWindow::saveAs(const QString& title) {
  // An imported model's project is offered beside it, named after it (else in Documents); an
  // example's copy and an untitled project in Documents (the dialog opened in the folder of the
  // last file chosen, a dataset's, and a trial saved the project among the data).
  const QString documents = [] {
    const QString d = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    return QFileInfo(d).isDir() ? d : QDir::homePath();
  }();
  QString suggestion = currentFile_;
  if (showsExample()) {
    suggestion = QDir(documents).filePath(QFileInfo(currentFile_).fileName());
  } else if (suggestion.isEmpty() && !importedFrom_.isEmpty()) {
    const QFileInfo from(importedFrom_);
    QString dir = from.absolutePath();
    if (!QFileInfo(dir).isWritable()) dir = documents;
    suggestion = QDir(dir).filePath(from.completeBaseName() + QStringLiteral(".dwproj"));
  } else if (suggestion.isEmpty()) {
    suggestion = QDir(documents).filePath(QStringLiteral("untitled.dwproj"));
  }
  QString path = QFileDialog::getSaveFileName(this, title.isEmpty() ? tr("Save project") : title,
                                              suggestion, tr("deepwire projects (*.dwproj)"));
  takeKeyboardBack();
  if (path.isEmpty()) return false;
  if (!path.endsWith(QStringLiteral(".dwproj"))) path += QStringLiteral(".dwproj");
  return saveTo(path);
}

bool MainWindow::maybeSave() {
  // A running job is unsaved work too: its weights are the trainer's until it stops. Saving
  // while it ran wrote the weights from before it (a trial's Quit > Save kept three more epochs
  // of curves and none of their training).
  const bool running = training_->busy();
  if ((!hasUnsavedWork() && !running) || !interactive_) return true;
  // Named: the question comes before an Open or a Close, when the window may show another.
  const QString name =
      currentFile_.isEmpty() ? tr("The untitled document") : QFileInfo(currentFile_).fileName();
  const auto answer = QMessageBox::warning(
      this, tr("Unsaved changes"),
      running ? tr("%1 is training. Stop the training and save what it has learned?").arg(name)
              : tr("%1 has unsaved changes. Save them?").arg(name),
      QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
  if (answer == QMessageBox::Cancel) return false;
  if (running) training_->stopAndWaitForJob();
  return answer == QMessageBox::Save ? save() : true;
}

QString MainWindow::exportSuggestion(const QString& suffix) const {
  // Next to the project, named after it; else in Documents: never the last folder a data
  // source was chosen from (often a read-only dataset folder).
  if (!currentFile_.isEmpty()) {
    const QFileInfo f(currentFile_);
    return f.absoluteDir().filePath(f.completeBaseName() + suffix + QStringLiteral(".onnx"));
  }
  QString dir = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
  if (dir.isEmpty() || !QFileInfo(dir).isWritable()) dir = QDir::homePath();
  return QDir(dir).filePath(QStringLiteral("model") + suffix + QStringLiteral(".onnx"));
}

bool MainWindow::exportOnnxTo(const QString& path, bool withTrainingInfo) {
  // The weights just trained, and (unless switched off) the Data panel's conversion in front of
  // the inputs, so the model takes the data as stored.
  const bool conversion = action(QStringLiteral("exportDataConversion"))->isChecked();
  Result<onnx::ModelProto> m = withTrainingInfo ? training_->exportTrainingModel()
                                                : training_->exportInferenceModel(conversion);
  if (!m.ok()) {
    showError(tr("Cannot export ONNX"), qs(m.message()));
    return false;
  }
  std::string bytes;
  if (!m->SerializeToString(&bytes)) {
    showError(tr("Cannot export ONNX"), tr("the model could not be serialized"));
    return false;
  }
  if (!writeAtomically(path, QByteArray::fromStdString(bytes))) return false;
  showStatus(tr("Exported %1 (%2)")
                 .arg(path, withTrainingInfo ? tr("with training info")
                            : conversion     ? tr("inference, taking the data as stored")
                                             : tr("inference")));
  return true;
}

NodeId MainWindow::placeNode(const QString& domain, const QString& type,
                             std::optional<QPointF> scenePos) {
  const QPointF pos = scenePos ? *scenePos : view_->placementPoint();
  // Dropped on a link, the node goes into it (as a node dragged onto one does).
  std::optional<Link> under;
  if (scenePos)
    for (QGraphicsItem* item : scene_->items(*scenePos))
      if (item->type() == LinkItem::Type) {
        under = static_cast<LinkItem*>(item)->link();
        break;
      }
  auto id = model_->createNode(domain.toStdString(), type.toStdString(), {pos.x(), pos.y()});
  if (!id.ok()) {
    showError(tr("Cannot create node"), qs(id.message()));
    return 0;
  }
  if (under && model_->insertIntoLink(*id, *under).ok())
    showStatus(tr("%1 inserted into the link; Undo takes it out").arg(type));
  scene_->selectOnly({*id});
  view_->setFocus();
  return *id;
}

QStringList MainWindow::recentFiles() const {
  return QSettings().value(QStringLiteral("recentFiles")).toStringList();
}

void MainWindow::addRecent(const QString& path) {
  QStringList list = recentFiles();
  list.removeAll(path);
  list.prepend(path);
  while (list.size() > kMaxRecent) list.removeLast();
  QSettings().setValue(QStringLiteral("recentFiles"), list);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  if (!recentMenu_) return;
  recentMenu_->clear();
  const QStringList list = recentFiles();
  for (const QString& path : list) {
    QAction* a = recentMenu_->addAction(QFileInfo(path).fileName());
    a->setToolTip(path);
    connect(a, &QAction::triggered, this, [this, path] {
      if (maybeSave()) openFile(path);
    });
  }
  recentMenu_->setEnabled(!list.isEmpty());
  if (welcome_) welcome_->setRecentFiles(list);
}

QString MainWindow::autosavePath(const QString& document) {
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                      QStringLiteral("/autosave");
  if (document.isEmpty()) return dir + QStringLiteral("/untitled.dwproj");
  // Named after the project, for a user who looks in the folder, and told apart from another
  // folder's project of the same name by a hash of its whole path.
  const QFileInfo f(document);
  const QByteArray key =
      QCryptographicHash::hash(f.absoluteFilePath().toUtf8(), QCryptographicHash::Sha1).toHex();
  return QStringLiteral("%1/%2-%3.dwproj")
      .arg(dir, f.completeBaseName(), QString::fromLatin1(key.left(12)));
}

void MainWindow::discardOwnAutosave() {
  if (ownAutosave_.isEmpty()) return;
  QFile::remove(ownAutosave_);
  ownAutosave_.clear();
}

void MainWindow::autosaveNow() {
  if (!autosaveDirty_ || !hasUnsavedWork()) return;
  const QString path = autosavePath(currentFile_);
  // A crash's autosave of this document that the user has not answered about yet (the question
  // is open, and this timer still runs) is theirs to recover: not overwritten with this session's
  // edits. A window that never asks (tests, screenshots) writes its own.
  if (interactive_ && path != ownAutosave_ && QFileInfo::exists(path)) return;
  QDir().mkpath(QFileInfo(path).absolutePath());
  // Quietly: a failed autosave is retried at the next tick, and never interrupts the user.
  if (writeFileAtomic(path.toStdString(), projectToJsonText(training_->documentToKeep())).ok()) {
    if (currentFile_.isEmpty())
      QSettings().setValue(QStringLiteral("autosave/untitledImported"), importedFrom_);
    ownAutosave_ = path;
    autosaveDirty_ = false;
  }
}

bool MainWindow::recoverAutosave() {
  const QString path = autosavePath(currentFile_);
  auto g = loadProject(path.toStdString());
  if (!g.ok()) {
    showError(tr("Cannot recover the autosave"), qs(g.message()));
    return false;
  }
  const QString file = currentFile_;
  model_->reset(std::move(*g));
  currentFile_ = file;
  importedFrom_ = file.isEmpty()
                      ? QSettings().value(QStringLiteral("autosave/untitledImported")).toString()
                      : QString();
  // The recovered work is this window's unsaved work now: its autosave goes when it is saved.
  ownAutosave_ = path;
  // Recovered work is unsaved: mark the document modified until the user saves it.
  model_->undoStack()->resetClean();
  updateTitle();
  view_->fitToView(GraphView::kReadableZoom);
  showStatus(tr("Recovered unsaved work from %1").arg(path));
  return true;
}

void MainWindow::keyPressEvent(QKeyEvent* e) {
  // The disabled Undo and Redo let Ctrl+Z through to here: said, where a trial's keypress
  // during a Fit did nothing without a word.
  if (model_->locked() && (e->matches(QKeySequence::Undo) || e->matches(QKeySequence::Redo))) {
    showStatus(tr("Undo and Redo wait: %1").arg(model_->lockReason()));
    return;
  }
  QMainWindow::keyPressEvent(e);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  if (!maybeSave()) {
    e->ignore();
    return;
  }
  training_->stopAndWait();
  discardOwnAutosave();
  e->accept();
}

// ---------------------------------------------------------------------------- Edit

void MainWindow::copySelection() {
  const auto ids = scene_->selectedNodes();
  if (ids.empty()) return;
  auto* data = new QMimeData;
  const QByteArray json = QByteArray::fromStdString(model_->copyFragment(ids));
  data->setData(kFragmentMime, json);
  data->setText(QString::fromUtf8(json));
  QApplication::clipboard()->setMimeData(data);
  pasteCount_ = 0;
  showStatus(tr("Copied %1").arg(count(qint64(ids.size()), tr("%1 node"), tr("%1 nodes"))));
}

void MainWindow::cutSelection() {
  copySelection();
  deleteSelection();
}

void MainWindow::paste() {
  const QMimeData* data = QApplication::clipboard()->mimeData();
  if (!data) return;
  QByteArray json = data->data(kFragmentMime);
  if (json.isEmpty() && data->hasText()) json = data->text().toUtf8();  // a project pasted as text
  if (json.isEmpty()) return;
  // Where the nodes were copied from: the paste moves them by their top left.
  auto fragment = projectFromJsonText(json.toStdString(), "<clipboard>");
  if (!fragment.ok()) {
    showError(tr("Cannot paste"), qs(fragment.message()));
    return;
  }
  QPointF topLeft(std::numeric_limits<qreal>::max(), std::numeric_limits<qreal>::max());
  for (const auto& [id, n] : fragment->nodes())
    topLeft = {std::min(topLeft.x(), n.position.x), std::min(topLeft.y(), n.position.y)};
  if (fragment->nodes().empty()) topLeft = {};
  // At the pointer when it is over the canvas (Ctrl+V where the user looks); else a step down
  // and right of the originals per paste, kept inside what the view shows.
  QPointF to;
  if (const std::optional<QPointF> at = view_->pointerScenePos()) {
    to = scene_->snapped(*at);
  } else {
    ++pasteCount_;
    to = topLeft + QPointF(40.0 * pasteCount_, 40.0 * pasteCount_);
    const QRectF seen = view_->mapToScene(view_->viewport()->rect()).boundingRect();
    const QRectF inside = seen.adjusted(20, 20, -200, -100);  // room for a node's body
    if (inside.isValid() && !inside.contains(to))
      to = scene_->snapped(QPointF(std::clamp(to.x(), inside.left(), inside.right()),
                                   std::clamp(to.y(), inside.top(), inside.bottom())));
  }
  auto ids =
      model_->pasteFragment(json.toStdString(), {to.x() - topLeft.x(), to.y() - topLeft.y()});
  if (!ids.ok()) {
    showError(tr("Cannot paste"), qs(ids.message()));
    return;
  }
  scene_->selectOnly(*ids);
  // Moved to free space, the nodes may have left the view: bring them into it.
  QRectF pasted;
  for (NodeId id : *ids)
    if (NodeItem* item = scene_->nodeItem(id)) pasted |= item->sceneBoundingRect();
  if (!pasted.isNull()) view_->ensureVisible(pasted, 20, 20);
  showStatus(tr("Pasted %1").arg(count(qint64(ids->size()), tr("%1 node"), tr("%1 nodes"))));
}

void MainWindow::duplicateSelection() {
  const auto ids = scene_->selectedNodes();
  if (ids.empty()) return;
  auto fresh = model_->pasteFragment(model_->copyFragment(ids), {40, 40});
  if (!fresh.ok()) {
    showError(tr("Cannot duplicate"), qs(fresh.message()));
    return;
  }
  scene_->selectOnly(*fresh);
}

void MainWindow::deleteSelection() {
  Status st = model_->removeItems(scene_->selectedNodes(), scene_->selectedLinks());
  if (!st.ok()) showError(tr("Cannot delete"), qs(st.message()));
}

void MainWindow::createFindBar() {
  // Over the canvas's top right corner, like a browser's find bar.
  findBar_ = new QFrame(view_);
  findBar_->setObjectName(QStringLiteral("findBar"));
  static_cast<QFrame*>(findBar_)->setFrameShape(QFrame::StyledPanel);
  findBar_->setAutoFillBackground(true);
  auto* h = new QHBoxLayout(findBar_);
  h->setContentsMargins(6, 3, 3, 3);
  h->addWidget(new QLabel(tr("Find"), findBar_));
  findEdit_ = new QLineEdit(findBar_);
  findEdit_->setObjectName(QStringLiteral("findEdit"));
  findEdit_->setPlaceholderText(tr("node name or type"));
  findEdit_->setMinimumWidth(200);
  findEdit_->setToolTip(
      tr("Enter or F3: next match · Shift+Enter or Shift+F3: previous · "
         "Esc: close"));
  h->addWidget(findEdit_);
  findCount_ = new QLabel(findBar_);
  findCount_->setMinimumWidth(70);
  h->addWidget(findCount_);
  auto* close = new QToolButton(findBar_);
  close->setText(QStringLiteral("✕"));
  close->setAutoRaise(true);
  close->setToolTip(tr("Close (Esc)"));
  h->addWidget(close);
  findBar_->hide();
  connect(close, &QToolButton::clicked, this, [this] {
    findBar_->hide();
    view_->setFocus();
  });
  connect(findEdit_, &QLineEdit::textEdited, this, [this] {
    // As the user types, the first match from the start.
    lastFound_ = 0;
    findNext(1);
  });
  findEdit_->installEventFilter(this);
  view_->installEventFilter(this);
}

void MainWindow::placeFindBar() {
  findBar_->adjustSize();
  findBar_->move(std::max(0, view_->width() - findBar_->width() - 12), 8);
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  if (watched == view_ && event->type() == QEvent::Resize && findBar_ && findBar_->isVisible())
    placeFindBar();
  if (watched == findEdit_ && event->type() == QEvent::KeyPress) {
    auto* key = static_cast<QKeyEvent*>(event);
    if (key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) {
      findNext(key->modifiers() & Qt::ShiftModifier ? -1 : 1);
      return true;
    }
    if (key->key() == Qt::Key_Escape) {
      findBar_->hide();
      view_->setFocus();
      return true;
    }
  }
  return QMainWindow::eventFilter(watched, event);
}

void MainWindow::showFind() {
  setWelcomeVisible(false);
  findBar_->show();
  findBar_->raise();
  placeFindBar();
  findEdit_->setFocus(Qt::ShortcutFocusReason);
  findEdit_->selectAll();
}

bool MainWindow::findNext(int step) {
  const QString q = findEdit_->text().trimmed();
  if (q.isEmpty()) {
    findCount_->clear();
    return false;
  }
  // Nodes whose type matches come first ("conv" finds the Conv nodes before the
  // Initializers named conv1.weight), then those matched by name; each group left to right,
  // then top to bottom: the order the graph reads in.
  std::vector<const Node*> matches;
  for (const auto& [id, n] : model_->graph().nodes())
    if (qs(n.name).contains(q, Qt::CaseInsensitive) || qs(n.type).contains(q, Qt::CaseInsensitive))
      matches.push_back(&n);
  auto byName = [&](const Node* n) { return !qs(n->type).contains(q, Qt::CaseInsensitive); };
  std::sort(matches.begin(), matches.end(), [&](const Node* a, const Node* b) {
    const bool na = byName(a), nb = byName(b);
    return std::tie(na, a->position.x, a->position.y, a->id) <
           std::tie(nb, b->position.x, b->position.y, b->id);
  });
  if (matches.empty()) {
    // The match of a shorter query stayed selected, as if it were this one's.
    scene_->clearSelection();
    lastFound_ = 0;
    findCount_->setText(tr("no match"));
    showStatus(tr("No node's name or type contains \"%1\"").arg(q));
    return false;
  }
  const int n = int(matches.size());
  int at = -1;
  for (int i = 0; i < n; ++i)
    if (matches[size_t(i)]->id == lastFound_) at = i;
  at = at < 0 ? (step >= 0 ? 0 : n - 1) : ((at + step) % n + n) % n;
  const Node* found = matches[size_t(at)];
  lastFound_ = found->id;
  findCount_->setText(tr("%1 of %2").arg(at + 1).arg(n));
  // Typing on past a miss: the bar's "No node ..." was left under the match found.
  showStatus(
      tr("Found %1 (%2), %3 of %4").arg(qs(found->name), qs(found->type)).arg(at + 1).arg(n));
  scene_->selectOnly({found->id});
  if (NodeItem* item = scene_->nodeItem(found->id)) view_->showItem(item);
  return true;
}

int MainWindow::setSelectionTrainable(bool trainable) {
  if (model_->locked()) {  // a run trains the model it started with
    showStatus(model_->lockReason());
    return 0;
  }
  const Graph& g = model_->graph();
  std::vector<Node> after;
  int layers = 0, initializers = 0;
  for (NodeId id : scene_->selectedNodes()) {
    const Node* n = g.node(id);
    const NodeSpec* spec = n ? g.spec(*n) : nullptr;
    if (!spec) continue;
    Node changed = *n;
    if (spec->kind == NodeKind::Layer && spec->param("trainable")) {
      if (g.param(id, "trainable")->asBool() == trainable) continue;
      if (trainable)
        changed.params.erase("trainable");  // the default
      else
        changed.params["trainable"] = Param::makeBool(false);
      ++layers;
    } else if (spec->kind == NodeKind::Initializer && spec->param("status")) {
      const std::string status = g.param(id, "status")->asString();
      if (status != (trainable ? "Frozen" : "Trainable")) continue;  // Constant stays
      changed.params["status"] = Param::makeString(trainable ? "Trainable" : "Frozen");
      ++initializers;
    } else {
      continue;
    }
    after.push_back(std::move(changed));
  }
  if (after.empty()) {
    showStatus(trainable ? tr("Nothing to unfreeze: select frozen layers or Initializers")
                         : tr("Nothing to freeze: select layers or Initializers whose weights "
                              "train"));
    return 0;
  }
  QStringList parts;  // what changed, not "0 layers and 6 Initializers"
  if (layers) parts << count(layers, tr("%1 layer"), tr("%1 layers"));
  if (initializers) parts << count(initializers, tr("%1 Initializer"), tr("%1 Initializers"));
  const QString what = parts.join(tr(" and "));
  if (Status st =
          model_->applyNodeStates(after, trainable ? tr("Unfreeze weights") : tr("Freeze weights"));
      !st.ok()) {
    showError(trainable ? tr("Unfreeze") : tr("Freeze"), qs(st.message()));
    return 0;
  }
  showStatus(trainable ? tr("Unfroze %1: training updates their weights").arg(what)
                       : tr("Froze %1: training leaves their weights as they are").arg(what));
  return int(after.size());
}

void MainWindow::selectAll() {
  for (QGraphicsItem* item : scene_->items())
    if (item->type() == NodeItem::Type) item->setSelected(true);
}

}  // namespace dw::studio
