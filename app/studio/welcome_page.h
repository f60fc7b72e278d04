// The welcome page: what the studio shows in place of an empty canvas when it starts with no file.
// A new user gets three ways in that each end on a canvas that can train: an example project, a
// template classifier built for their own data, or a recent file. It stands in the central area
// (MainWindow keeps it in a stack with the canvas view) and goes away as soon as a document is
// opened, a template is built, New is chosen or a node is placed.
//
// The templates are built here with the same public calls a user's clicks make: Keras-style
// nodes through the GraphModel, and the data sources given to the Data panel, accepting its
// proposed conversion. So a template is exactly what the quick start in the README builds by
// hand, shaped to the data the user picked.
#pragma once

#include <QPushButton>
#include <QString>
#include <QStringList>
#include <QWidget>
#include <optional>

class QGridLayout;
class QLabel;
class QLayout;
class QVBoxLayout;

namespace dw::studio {

class MainWindow;

enum class ClassifierTemplate { kMlp, kCnn };

// Where a template's data comes from: the samples (an IDX or NPY file, a CSV table, or an image
// folder with one subfolder per class) and their class labels (the matching IDX/NPY labels file;
// for an image folder or a CSV table, the same path: the subfolders or the label column).
struct TemplateSource {
  QString samples;
  QString labels;
};

// The example projects that ship with deepwire (resources/examples/*.dwproj), found from the
// executable's folder upwards, so the studio finds them from any build tree or the source tree,
// and under ../share/deepwire/examples when installed. DEEPWIRE_EXAMPLES overrides both.
QStringList findExamples();

// Replaces the canvas with a classifier for `source` (a new document): reads the data's
// per-sample shape and class count, wires Input -> layers -> Dense(classes) -> Output Train
// (SparseCategoricalCrossentropy from logits) with a label Input and SparseCategoricalAccuracy,
// lays it out left to right, and gives the Data panel the sources with its proposed conversion
// accepted. "" on success, else why not (the canvas is then left empty).
QString buildClassifier(MainWindow& window, ClassifierTemplate kind, const TemplateSource& source);

// One clickable card: a bold title and a one-line explanation under it, wrapped (kWrap) or, for
// a path, elided in the middle (kElide). Its height follows its width, so nothing is clipped.
class WelcomeCard : public QPushButton {
  Q_OBJECT
 public:
  enum class Detail { kWrap, kElide };
  WelcomeCard(const QString& title, const QString& detail, Detail mode = Detail::kWrap,
              QWidget* parent = nullptr);
  QString title() const { return title_; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;

 protected:
  void resizeEvent(QResizeEvent* e) override;
  void changeEvent(QEvent* e) override;

 private:
  static constexpr int kPadX = 14, kPadTop = 10, kPadBottom = 11, kGap = 3;
  // A label's height for `text` at the inner width: one line where the card elides, else the
  // wrapped text's.
  int textHeight(const QLabel* label, const QString& text, int inner) const;
  QString title_, detail_;
  Detail mode_;
  QLabel* titleLabel_ = nullptr;
  QLabel* detailLabel_ = nullptr;
};

class WelcomePage : public QWidget {
  Q_OBJECT
 public:
  explicit WelcomePage(QWidget* parent = nullptr);

  void setExamples(const QStringList& paths);
  void setRecentFiles(const QStringList& paths);
  // Asks the user for a template's data: the kind of source (a menu at the card), then a file
  // dialog, and for an IDX/NPY file a second one for its labels. nullopt when cancelled.
  std::optional<TemplateSource> askTemplateSource(ClassifierTemplate kind);

  // The cards, for tests: by example file name ("fashion_mnist_mlp.dwproj"), template, or path.
  WelcomeCard* exampleCard(const QString& fileName) const;
  WelcomeCard* templateCard(ClassifierTemplate kind) const;
  WelcomeCard* recentCard(const QString& path) const;
  WelcomeCard* newCard() const { return newCard_; }
  WelcomeCard* openCard() const { return openCard_; }

 signals:
  void openRequested(const QString& path);  // an example or recent file, or "" for the dialog
  void newRequested();
  void templateRequested(dw::studio::ClassifierTemplate kind);
  // A palette entry dropped on the page: the user wants the canvas (position in page pixels).
  void nodeDropped(const QString& domain, const QString& type, QPoint pos);

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dragMoveEvent(QDragMoveEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  QVBoxLayout* section(QVBoxLayout* column, const QString& title, const QString& hint);
  void clearCards(QLayout* layout);

  QVBoxLayout* examples_ = nullptr;
  QGridLayout* recent_ = nullptr;
  WelcomeCard* newCard_ = nullptr;
  WelcomeCard* openCard_ = nullptr;
  WelcomeCard* mlpCard_ = nullptr;
  WelcomeCard* cnnCard_ = nullptr;
  QString lastDir_;
};

}  // namespace dw::studio
