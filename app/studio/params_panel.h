// The Parameters dock: editors generated from the catalogue for the selected node. Every field
// shows its default and can be reset to it; every change goes through the GraphModel (and so is
// one undo step). The panel rebuilds only when the selection changes; model changes (undo,
// redo) refresh the editors' values in place.
#pragma once

#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QMap>
#include <QScrollArea>
#include <QToolButton>
#include <functional>
#include <optional>
#include <vector>

#include "app/studio/graph_model.h"

namespace dw::studio {

// A spin box that shows doubles in the shortest exact form (1e-05, 0.9, 784) instead of a fixed
// number of decimals.
class ScientificSpinBox : public QDoubleSpinBox {
 public:
  explicit ScientificSpinBox(QWidget* parent = nullptr);
  QString textFromValue(double v) const override;
  double valueFromText(const QString& text) const override;
  QValidator::State validate(QString& text, int& pos) const override;
};

// A list of ints, floats or strings: edited inline as "a, b, c", or one item per line in a dialog.
class ListEdit : public QWidget {
  Q_OBJECT
 public:
  enum class Kind { Ints, Floats, Strings };
  // Edits the items in a dialog of its own; nullopt when cancelled.
  using Dialog = std::function<std::optional<QStringList>(QWidget* parent, const QStringList&)>;
  ListEdit(Kind kind, QWidget* parent = nullptr);
  // The title of the one-item-per-line dialog (what is being edited).
  void setDialogTitle(const QString& title) { title_ = title; }
  // Replaces the one-item-per-line dialog.
  void setDialog(Dialog dialog) { dialog_ = std::move(dialog); }
  QToolButton* dialogButton() const { return more_; }
  void setValues(const QStringList& values);
  QStringList values() const;
  QLineEdit* lineEdit() const { return edit_; }
  // Parses the text; on failure returns false with a message naming the bad entry.
  bool parse(QStringList* out, QString* error) const;

 signals:
  void committed();

 private:
  void openDialog();
  Kind kind_;
  QLineEdit* edit_;
  QToolButton* more_;
  QString title_;
  Dialog dialog_;
};

// The specified_outputs_name editor: one row per output port of node `id`, labelled with the
// port's name, each showing the name the tensor gets when left empty. Returns the names (trailing
// empty ones dropped), or nullopt when cancelled.
std::optional<QStringList> editOutputNames(QWidget* parent, const dw::Graph& graph, dw::NodeId id,
                                           const QStringList& current);

class ParamsPanel : public QScrollArea {
  Q_OBJECT
 public:
  ParamsPanel(GraphModel* model, QWidget* parent = nullptr);
  void setNode(dw::NodeId id);  // 0: nothing selected
  dw::NodeId node() const { return id_; }
  // The editor of a field ("name", "specified_outputs_name", "lda coeff", or a parameter name).
  QWidget* editor(const QString& field) const { return editors_.value(field); }
  QWidget* resetButton(const QString& field) const { return resets_.value(field); }

 signals:
  void statusMessage(const QString& text);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void rebuild();
  void refreshValues();
  void report(const dw::Status& st);
  GraphModel* model_;
  dw::NodeId id_ = 0;
  std::vector<std::function<void()>> refreshers_;
  // A validated text field for a number parameter: `shown` gives its text (empty: the
  // placeholder shows), `apply` takes what the user typed.
  QLineEdit* numberField(const QString& pattern, const QString& placeholder,
                         std::function<void(const QString&)> apply, std::function<QString()> shown);
  QMap<QString, QWidget*> editors_;
  QMap<QString, QWidget*> resets_;
  QLabel* problem_ = nullptr;
};

}  // namespace dw::studio
