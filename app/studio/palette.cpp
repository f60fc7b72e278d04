#include "app/studio/palette.h"

#include <QHeaderView>
#include <QMimeData>
#include <QVBoxLayout>
#include <map>

#include "app/studio/graph_view.h"
#include "engine/op_support.h"
#include "nodes/catalogue.h"

namespace dw::studio {

namespace {
constexpr int kDomainRole = Qt::UserRole;
constexpr int kTypeRole = Qt::UserRole + 1;
// Other names the search finds the node by: its aliases and the seed toolkit's spellings.
constexpr int kOtherNamesRole = Qt::UserRole + 2;

QString docTooltip(const NodeSpec& s) {
  QString doc = QString::fromStdString(s.doc).trimmed();
  if (doc.size() > 1200) doc = doc.left(1200) + QStringLiteral("…");
  // What the engine does with an op node: where it runs, and whether training goes through it.
  QString engine;
  if (s.kind == dw::NodeKind::Op) {
    const auto sup = dw::engine::opSupport(s.domain, s.type, s.version);
    engine = QStringLiteral("<p><i>Runs on: %1. Gradient: %2.</i></p>")
                 .arg(QString::fromStdString(sup.describe()).toHtmlEscaped(),
                      sup.gradient ? QStringLiteral("yes") : QStringLiteral("no"));
  }
  return QStringLiteral(
             "<p><b>%1</b> <span style='color:gray'>%2 · %3 · since opset %4</span></p>"
             "%6<p style='white-space:pre-wrap'>%5</p>")
      .arg(QString::fromStdString(s.type), QString::fromStdString(s.domain),
           QString::fromStdString(s.category), QString::number(s.version), doc.toHtmlEscaped(),
           engine);
}
}  // namespace

QStringList PaletteTree::mimeTypes() const {
  return {QString::fromLatin1(kNodeMimeType)};
}

QMimeData* PaletteTree::mimeData(const QList<QTreeWidgetItem*>& items) const {
  if (items.isEmpty() || items.first()->data(0, kTypeRole).isNull()) return nullptr;
  auto* data = new QMimeData;
  const QString key = items.first()->data(0, kDomainRole).toString() + QStringLiteral("::") +
                      items.first()->data(0, kTypeRole).toString();
  data->setData(kNodeMimeType, key.toUtf8());
  data->setText(items.first()->data(0, kTypeRole).toString());
  return data;
}

Palette::Palette(QWidget* parent) : QWidget(parent) {
  filter_ = new QLineEdit(this);
  filter_->setPlaceholderText(tr("Search nodes…"));
  filter_->setClearButtonEnabled(true);
  tree_ = new PaletteTree(this);
  tree_->setHeaderHidden(true);
  tree_->setDragEnabled(true);
  tree_->setDragDropMode(QAbstractItemView::DragOnly);
  tree_->setSelectionMode(QAbstractItemView::SingleSelection);
  tree_->setUniformRowHeights(true);
  // Long type names (SparseCategoricalCrossentropy) elide in the middle, so both the start and
  // the end stay readable; the column follows the dock's width instead of scrolling sideways.
  tree_->setTextElideMode(Qt::ElideMiddle);
  tree_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  tree_->header()->setStretchLastSection(false);
  tree_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(filter_);
  layout->addWidget(tree_);

  // Domain -> category -> entries, in the catalogue's own order (domain, category, type).
  std::map<std::string, QTreeWidgetItem*> domains, categories;
  for (const NodeSpec* s : Catalogue::instance().all()) {
    if (s->deprecated) continue;
    QTreeWidgetItem*& dom = domains[s->domain];
    if (!dom) {
      dom = new QTreeWidgetItem(tree_, {QString::fromStdString(s->domain)});
      dom->setFlags(Qt::ItemIsEnabled);
      QFont f = dom->font(0);
      f.setBold(true);
      dom->setFont(0, f);
      dom->setToolTip(0, QString::fromStdString(s->domain));
    }
    QTreeWidgetItem*& cat = categories[s->domain + "/" + s->category];
    if (!cat) {
      cat = new QTreeWidgetItem(dom, {QString::fromStdString(s->category)});
      cat->setFlags(Qt::ItemIsEnabled);
      cat->setToolTip(0, QString::fromStdString(s->category));
    }
    auto* leaf = new QTreeWidgetItem(cat, {QString::fromStdString(s->type)});
    leaf->setData(0, kDomainRole, QString::fromStdString(s->domain));
    leaf->setData(0, kTypeRole, QString::fromStdString(s->type));
    QStringList others;
    for (const auto* names : {&s->aliases, &s->seedNames})
      for (const auto& n : *names) others << QString::fromStdString(n);
    leaf->setData(0, kOtherNamesRole, others);
    leaf->setToolTip(0, docTooltip(*s));
    leaf->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsDragEnabled);
  }
  // The small hand-made domains open; the big ONNX one and the training internals (nodes of
  // exported training graphs) stay folded until searched.
  for (auto& [name, item] : domains)
    item->setExpanded(name != kOnnxDomain && name != kTrainingDomain && name != kGradDomain);

  connect(filter_, &QLineEdit::textChanged, this, &Palette::setFilter);
  connect(tree_, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item, int) {
    if (!item->data(0, kTypeRole).isNull())
      emit placeRequested(item->data(0, kDomainRole).toString(),
                          item->data(0, kTypeRole).toString());
  });
}

QTreeWidgetItem* Palette::entry(const QString& domain, const QString& type) const {
  for (QTreeWidgetItemIterator it(tree_); *it; ++it)
    if ((*it)->data(0, kTypeRole).toString() == type &&
        (*it)->data(0, kDomainRole).toString() == domain)
      return *it;
  return nullptr;
}

void Palette::setFilter(const QString& text) {
  const QString q = text.trimmed();
  for (int d = 0; d < tree_->topLevelItemCount(); ++d) {
    QTreeWidgetItem* dom = tree_->topLevelItem(d);
    int domShown = 0;
    for (int c = 0; c < dom->childCount(); ++c) {
      QTreeWidgetItem* cat = dom->child(c);
      int shown = 0;
      for (int i = 0; i < cat->childCount(); ++i) {
        QTreeWidgetItem* leaf = cat->child(i);
        bool match = q.isEmpty() || leaf->text(0).contains(q, Qt::CaseInsensitive) ||
                     cat->text(0).contains(q, Qt::CaseInsensitive);
        for (const QString& other : leaf->data(0, kOtherNamesRole).toStringList())
          match = match || other.contains(q, Qt::CaseInsensitive);
        leaf->setHidden(!match);
        shown += match;
      }
      cat->setHidden(shown == 0);
      if (!q.isEmpty()) cat->setExpanded(shown > 0);
      domShown += shown;
    }
    dom->setHidden(domShown == 0);
    if (!q.isEmpty()) dom->setExpanded(domShown > 0);
  }
}

int Palette::visibleEntries() const {
  int n = 0;
  for (QTreeWidgetItemIterator it(tree_, QTreeWidgetItemIterator::NotHidden); *it; ++it)
    if (!(*it)->data(0, kTypeRole).isNull() && !(*it)->parent()->isHidden()) ++n;
  return n;
}

}  // namespace dw::studio
