// The palette: every catalogue node type in a tree by domain and category, filtered as the user
// types. Entries carry their doc as tooltip, drag onto the canvas, and double-click to place.
#pragma once

#include <QLineEdit>
#include <QTreeWidget>
#include <QWidget>

namespace dw::studio {

class PaletteTree : public QTreeWidget {
  Q_OBJECT
 public:
  using QTreeWidget::QTreeWidget;

 protected:
  QMimeData* mimeData(const QList<QTreeWidgetItem*>& items) const override;
  QStringList mimeTypes() const override;
};

class Palette : public QWidget {
  Q_OBJECT
 public:
  explicit Palette(QWidget* parent = nullptr);
  QLineEdit* filterEdit() const { return filter_; }
  QTreeWidget* tree() const { return tree_; }
  // The leaf entry for a node type, or nullptr.
  QTreeWidgetItem* entry(const QString& domain, const QString& type) const;
  void setFilter(const QString& text);
  int visibleEntries() const;
  // Wide enough to show the names of deepwire's own nodes whole (SparseCategoricalAccuracy), and
  // no wider than a side dock should start: the ONNX operators' longest names still elide.
  int preferredWidth() const;

 signals:
  void placeRequested(const QString& domain, const QString& type);

 private:
  QLineEdit* filter_;
  PaletteTree* tree_;
};

}  // namespace dw::studio
