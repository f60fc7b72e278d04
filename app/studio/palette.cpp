#include "app/studio/palette.h"

#include <QHeaderView>
#include <QMimeData>
#include <QSignalBlocker>
#include <QStyle>
#include <QVBoxLayout>
#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "app/studio/graph_view.h"
#include "engine/op_support.h"
#include "nodes/catalogue.h"

namespace dw::studio {

namespace {
constexpr int kDomainRole = Qt::UserRole;
constexpr int kTypeRole = Qt::UserRole + 1;
// Other names the search finds the node by: its aliases and the seed toolkit's spellings.
constexpr int kOtherNamesRole = Qt::UserRole + 2;
// A domain's place in the catalogue's order, to put it back when the search is cleared.
constexpr int kOrderRole = Qt::UserRole + 3;

// Which domain's match a search lists first, when the names match equally well: the Keras-style
// layers a user builds with, the graph nodes, losses and metrics, then the ONNX operators, the
// contributed ones, and last the gradient ops of exported training graphs.
int domainPriority(const QString& domain) {
  static const QStringList order = {
      QString::fromLatin1(kLayersDomain), QString::fromLatin1(kGraphDomain),
      QString::fromLatin1(kLossesDomain), QString::fromLatin1(kMetricsDomain)};
  if (const int i = int(order.indexOf(domain)); i >= 0) return i;
  if (domain.startsWith(QStringLiteral("deepwire"))) return 4;
  if (domain == QLatin1String(kOnnxDomain)) return 5;
  if (domain == QLatin1String(kGradDomain)) return 9;
  if (domain == QLatin1String(kTrainingDomain)) return 6;
  return 7;
}

// How well a leaf matches: 0 its name (or another of its names) exactly, 1 a name's start,
// 2 elsewhere in a name or its category, -1 not at all.
int matchTier(const QTreeWidgetItem* leaf, const QString& q) {
  if (q.isEmpty()) return 2;
  QStringList names = leaf->data(0, kOtherNamesRole).toStringList();
  names.prepend(leaf->text(0));
  int best = -1;
  for (const QString& n : names) {
    const int tier = n.compare(q, Qt::CaseInsensitive) == 0 ? 0
                     : n.startsWith(q, Qt::CaseInsensitive) ? 1
                     : n.contains(q, Qt::CaseInsensitive)   ? 2
                                                            : -1;
    if (tier >= 0 && (best < 0 || tier < best)) best = tier;
  }
  if (best < 0 && leaf->parent()->text(0).contains(q, Qt::CaseInsensitive)) best = 2;
  return best;
}

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
  // Three levels deep, the default indentation took 60 pixels from every entry's name.
  tree_->setIndentation(12);
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
      dom->setData(0, kOrderRole, tree_->topLevelItemCount() - 1);
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
  // Enter in the search places the best match (selected by the search).
  connect(filter_, &QLineEdit::returnPressed, this, [this] {
    QTreeWidgetItem* item = tree_->currentItem();
    if (item && !item->isHidden() && !item->data(0, kTypeRole).isNull() &&
        !filter_->text().trimmed().isEmpty())
      emit placeRequested(item->data(0, kDomainRole).toString(),
                          item->data(0, kTypeRole).toString());
  });
  connect(tree_, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item, int) {
    if (!item->data(0, kTypeRole).isNull())
      emit placeRequested(item->data(0, kDomainRole).toString(),
                          item->data(0, kTypeRole).toString());
  });
}

int Palette::preferredWidth() const {
  int widest = 0;
  for (QTreeWidgetItemIterator it(tree_); *it; ++it) {
    const QString domain = (*it)->data(0, kDomainRole).toString();
    if ((*it)->data(0, kTypeRole).isNull() || domain == QLatin1String(kOnnxDomain) ||
        domain == QLatin1String(kTrainingDomain) || domain == QLatin1String(kGradDomain))
      continue;
    widest = std::max(widest, tree_->fontMetrics().horizontalAdvance((*it)->text(0)));
  }
  // Three levels of indentation, the item's padding, the tree's frame and scroll bar, the margins.
  const int chrome = 3 * tree_->indentation() + 16 +
                     tree_->style()->pixelMetric(QStyle::PM_ScrollBarExtent) + 2 * 4 + 8;
  return std::clamp(widest + chrome, 220, 320);
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
  // Gradient ops are parts of exported training graphs that nobody places by hand, and a search
  // for "Dropout" listed DropoutGrad first: they show for their full name, or for a search that
  // names their domain ("grad", "com.deepwire.grad").
  const QString gradDomain = QString::fromLatin1(kGradDomain);
  const bool gradAsked = q.contains(QStringLiteral("grad"), Qt::CaseInsensitive) &&
                         gradDomain.contains(q, Qt::CaseInsensitive);
  struct Domain {
    QTreeWidgetItem* item = nullptr;
    int tier = -1;                                         // the best leaf's
    std::vector<std::pair<QTreeWidgetItem*, int>> leaves;  // with their tier
  };
  std::vector<Domain> doms;
  QTreeWidgetItem* best = nullptr;
  std::tuple<int, int, int> bestKey{3, 99, 0};
  for (int d = 0; d < tree_->topLevelItemCount(); ++d) {
    Domain dom;
    dom.item = tree_->topLevelItem(d);
    const bool grad = dom.item->text(0) == gradDomain;
    for (int c = 0; c < dom.item->childCount(); ++c) {
      QTreeWidgetItem* cat = dom.item->child(c);
      for (int i = 0; i < cat->childCount(); ++i) {
        QTreeWidgetItem* leaf = cat->child(i);
        int tier = matchTier(leaf, q);
        if (grad && !q.isEmpty()) tier = gradAsked ? std::max(tier, 2) : tier == 0 ? 0 : -1;
        dom.leaves.push_back({leaf, tier});
        if (tier >= 0 && (dom.tier < 0 || tier < dom.tier)) dom.tier = tier;
        const std::tuple<int, int, int> key{tier, domainPriority(dom.item->text(0)),
                                            dom.item->data(0, kOrderRole).toInt()};
        if (tier >= 0 && key < bestKey) {
          bestKey = key;
          best = leaf;
        }
      }
    }
    doms.push_back(std::move(dom));
  }
  // Best matches first: an exact name before a partial one, then the domain's priority; the
  // catalogue's order when the search is cleared.
  std::vector<Domain*> order;
  for (auto& d : doms) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [&](const Domain* a, const Domain* b) {
    const int ao = a->item->data(0, kOrderRole).toInt(), bo = b->item->data(0, kOrderRole).toInt();
    if (q.isEmpty()) return ao < bo;
    const int at = a->tier < 0 ? 3 : a->tier, bt = b->tier < 0 ? 3 : b->tier;
    return std::tuple(at, domainPriority(a->item->text(0)), ao) <
           std::tuple(bt, domainPriority(b->item->text(0)), bo);
  });
  bool reordered = false;
  for (int i = 0; i < int(order.size()); ++i)
    reordered |= tree_->topLevelItem(i) != order[size_t(i)]->item;
  if (reordered) {
    // Taken out of the tree, items forget whether they were expanded: note it, put it back.
    std::map<QTreeWidgetItem*, bool> expanded;
    for (auto& d : doms) {
      expanded[d.item] = d.item->isExpanded();
      for (int c = 0; c < d.item->childCount(); ++c)
        expanded[d.item->child(c)] = d.item->child(c)->isExpanded();
    }
    const QSignalBlocker block(tree_);
    while (tree_->topLevelItemCount() > 0) tree_->takeTopLevelItem(0);
    for (Domain* d : order) tree_->addTopLevelItem(d->item);
    for (const auto& [item, open] : expanded) item->setExpanded(open);
  }
  for (auto& dom : doms) {
    std::map<QTreeWidgetItem*, int> shownIn;
    for (const auto& [leaf, tier] : dom.leaves) {
      leaf->setHidden(tier < 0);
      shownIn[leaf->parent()] += tier >= 0;
    }
    int domShown = 0;
    for (int c = 0; c < dom.item->childCount(); ++c) {
      QTreeWidgetItem* cat = dom.item->child(c);
      const int shown = shownIn[cat];
      cat->setHidden(shown == 0);
      if (!q.isEmpty()) cat->setExpanded(shown > 0);
      domShown += shown;
    }
    dom.item->setHidden(domShown == 0);
    if (!q.isEmpty()) dom.item->setExpanded(domShown > 0);
  }
  if (!q.isEmpty() && best) {
    tree_->setCurrentItem(best);
    tree_->scrollToItem(best);
  } else if (q.isEmpty()) {
    tree_->scrollToTop();
  }
}

int Palette::visibleEntries() const {
  int n = 0;
  for (QTreeWidgetItemIterator it(tree_, QTreeWidgetItemIterator::NotHidden); *it; ++it)
    if (!(*it)->data(0, kTypeRole).isNull() && !(*it)->parent()->isHidden()) ++n;
  return n;
}

}  // namespace dw::studio
