// The studio's main window: the canvas in the middle, the palette, parameters, problems and
// training docks around it, and the File / Edit / View menus. File operations call graphs/
// (projects, ONNX import/export); every document write goes through graphs/file_io.h's
// writeFileAtomic (temp, fsync, rename).
#pragma once

#include <QAction>
#include <QFileSystemWatcher>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMainWindow>
#include <QStackedWidget>
#include <QTimer>
#include <functional>

#include "app/studio/graph_model.h"

namespace dw::studio {

class GraphScene;
class GraphView;
class Palette;
class ParamsPanel;
class TrainingPanel;
class WelcomePage;

// The status bar's message. QStatusBar cuts a long temporary message off mid-word where the
// permanent summary starts, which reads as text running under it: this label takes the room left
// of the summary, elides what does not fit, shows the whole text in a wrapped tooltip, and a
// click on an elided message opens it in a box.
class StatusMessage : public QLabel {
 public:
  explicit StatusMessage(QWidget* parent = nullptr);
  void setMessage(const QString& message);
  QString message() const { return message_; }
  bool isElided() const { return !line_.isEmpty() && text() != line_; }
  std::function<void()> onClicked;

 protected:
  void resizeEvent(QResizeEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;

 private:
  void elide();
  QString message_;
  QString line_;  // the message on one line
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // `interactive` = false (tests, screenshots): errors are recorded and shown in the status bar
  // but never pop up modal dialogs, and no autosave recovery prompt appears.
  explicit MainWindow(bool interactive = true, QWidget* parent = nullptr);
  ~MainWindow() override;

  GraphModel* model() const { return model_; }
  GraphScene* scene() const { return scene_; }
  GraphView* view() const { return view_; }
  Palette* palette() const { return palette_; }
  ParamsPanel* params() const { return params_; }
  TrainingPanel* training() const { return training_; }
  QListWidget* problemsList() const { return problems_; }
  QAction* action(const QString& objectName) const;
  WelcomePage* welcome() const { return welcome_; }

  // The welcome page stands in for the canvas until there is something to show: a document is
  // opened, New or a template is chosen, or a node is placed. It is never shown unless asked
  // (tests and screenshots drop nodes straight onto the canvas).
  void setWelcomeVisible(bool on);
  bool welcomeVisible() const;
  // What the studio does on start: opens `file`, or shows the welcome page when there is none
  // (or when it cannot be opened: false then, with lastError()).
  bool openAtStart(const QString& file);

  // Opens a project (.dwproj) or imports an ONNX model (.onnx); false, with the error shown, if
  // it cannot. The current document is replaced only on success.
  bool openFile(const QString& path);
  bool saveTo(const QString& path);
  // File > Save: to the project's file, or Save As for an untitled one and for a shipped example
  // (whose copy the user keeps; the example stays as it is).
  bool save();
  // The open project as its file now is, the view kept where it was (File > Reload from Disk).
  // A project rewritten by another program (`deepwire train --save-project`, an editor) is
  // reloaded by itself when this window has no unsaved changes; with unsaved changes the user is
  // asked (non-interactive: they are kept, and the status bar says so). Not while training runs.
  bool reloadFromDisk();
  // Lowers the canvas to ONNX: for inference, or with training info (the gradient graph).
  bool exportOnnxTo(const QString& path, bool withTrainingInfo);
  void newDocument();
  // Creates a node of a catalogue type at `scenePos`, or at the view centre.
  dw::NodeId placeNode(const QString& domain, const QString& type,
                       std::optional<QPointF> scenePos = std::nullopt);

  QString currentFile() const { return currentFile_; }
  QString lastError() const { return lastError_; }
  // The status bar's message, whole (the bar shows it elided to the room it has).
  QString statusMessage() const;
  StatusMessage* statusMessageLabel() const { return message_; }
  QLabel* summaryLabel() const { return summary_; }
  QStringList recentFiles() const;

  // Autosave: while the document has unsaved changes it is written periodically to a file of its
  // own, `document`'s (its absolute path; "" for an untitled document). The file goes when the
  // document is saved, discarded or closed normally; finding one means a crash, and it is offered
  // back only with its own document: when that project is opened (an untitled one's when the
  // studio starts without a file).
  static QString autosavePath(const QString& document = QString());
  void autosaveNow();
  // Replaces the document with its autosave (the current document's: the same file, or
  // untitled).
  bool recoverAutosave();
  // The question asked when the current document has an autosave left over from a crash: which
  // document it holds and when it was written. "" when there is none.
  QString recoveryQuestion() const;

  // Edit actions (also on the menu).
  void copySelection();
  void cutSelection();
  void paste();
  void duplicateSelection();
  void deleteSelection();
  void selectAll();
  // Training > Freeze/Unfreeze Selected: the selected layers' trainable and the selected
  // Initializers' status (Trainable <-> Frozen) in one undo step, for fine-tuning a model's
  // many weights at once. How many nodes changed; the status bar says what happened.
  int setSelectionTrainable(bool trainable);
  // Find (Ctrl+F): the bar over the canvas where a node's name or type is typed; Enter or F3
  // selects and centres the next match, Shift+Enter or Shift+F3 the one before.
  void showFind();
  bool findNext(int step = 1);
  QLineEdit* findEdit() const { return findEdit_; }

 protected:
  void closeEvent(QCloseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void createActions();
  void createDocks();
  void createMenus();
  void showError(const QString& title, const QString& message);
  void showStatus(const QString& message);
  void updateTitle();
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void refreshProblems();
  void createFindBar();
  void placeFindBar();
  void askToRecover();
  void startTemplate(int kind);  // a ClassifierTemplate chosen on the welcome page
  bool maybeSave();
  bool writeAtomically(const QString& path, const QByteArray& bytes);
  QString exportSuggestion(const QString& suffix) const;
  bool saveAs(const QString& title = QString());
  // The document's autosave this window wrote (or recovered), removed once it is saved,
  // discarded or closed.
  void discardOwnAutosave();
  // The current project's autosave left by a crash: offered (interactive) once the event loop
  // runs.
  void offerRecovery();
  // After a modal file dialog: the window is active again and a widget of it has the keyboard.
  void takeKeyboardBack();
  // openFile and reloadFromDisk.
  bool loadDocument(const QString& path, bool reload);
  // The project file as this window last read or wrote it, and the watch on it.
  void watchFile(const QByteArray& bytes);
  void checkDisk();
  bool hasUnsavedWork() const;

  bool interactive_;
  GraphModel* model_;
  GraphScene* scene_;
  GraphView* view_;
  QStackedWidget* central_ = nullptr;
  WelcomePage* welcome_ = nullptr;
  Palette* palette_;
  ParamsPanel* params_;
  TrainingPanel* training_;
  QListWidget* problems_;
  QDockWidget* problemsDock_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  QLabel* summary_;
  StatusMessage* message_;
  QTimer messageTimer_;  // a message goes after a while, as QStatusBar's temporary ones do
  QTimer autosaveTimer_;
  QString currentFile_;
  QString importedFrom_;      // the ONNX file an unsaved document was imported from (its path)
  QStringList examples_;      // the shipped examples: Save keeps them as they are (see save())
  bool showsExample() const;  // the document is one of examples_, opened where it ships
  QWidget* findBar_ = nullptr;
  QLineEdit* findEdit_ = nullptr;
  QLabel* findCount_ = nullptr;
  dw::NodeId lastFound_ = 0;
  QString lastError_;
  int pasteCount_ = 0;
  bool autosaveDirty_ = false;
  QString ownAutosave_;
  QFileSystemWatcher watcher_;
  QTimer diskCheck_;       // gathers a save's several change signals into one look
  QByteArray onDisk_;      // the project file's bytes as last read or written here
  bool fileGone_ = false;  // the file was missing at the last look (said once)
  std::map<QString, QAction*> actions_;
};

}  // namespace dw::studio
