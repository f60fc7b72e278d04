#include "app/studio/params_panel.h"

#include <onnx/onnx_pb.h>

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <set>

#include "graphs/tensor_data.h"
#include "nodes/catalogue.h"
#include "nodes/spec.h"
#include "nodes/type_syntax.h"

namespace dw::studio {

// ---------------------------------------------------------------------------- ScientificSpinBox

ScientificSpinBox::ScientificSpinBox(QWidget* parent) : QDoubleSpinBox(parent) {
  setDecimals(17);  // the spin box rounds to `decimals`; keep everything a double holds
  setRange(-std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
  setKeyboardTracking(false);
}

QString ScientificSpinBox::textFromValue(double v) const {
  return QString::number(v, 'g', 9);
}

double ScientificSpinBox::valueFromText(const QString& text) const {
  return QLocale::c().toDouble(text.trimmed());
}

QValidator::State ScientificSpinBox::validate(QString& text, int&) const {
  const QString t = text.trimmed();
  // A sign the range excludes is refused as it is typed: accepted, -0.5 became the minimum 0 when
  // the field lost focus, and training ran at a learning rate of 0 without a word.
  if (minimum() >= 0 && t.startsWith(QLatin1Char('-'))) return QValidator::Invalid;
  bool ok = false;
  QLocale::c().toDouble(t, &ok);
  if (ok) return QValidator::Acceptable;
  static const QRegularExpression kPartial(
      QStringLiteral("^[-+]?[0-9]*\\.?[0-9]*([eE][-+]?[0-9]*)?$"));
  return kPartial.match(t).hasMatch() ? QValidator::Intermediate : QValidator::Invalid;
}

// ---------------------------------------------------------------------------- ListEdit

ListEdit::ListEdit(Kind kind, QWidget* parent) : QWidget(parent), kind_(kind) {
  edit_ = new QLineEdit(this);
  edit_->setPlaceholderText(kind == Kind::Strings ? tr("a, b, c") : tr("1, 2, 3"));
  more_ = new QToolButton(this);
  more_->setText(QStringLiteral("…"));
  more_->setToolTip(tr("Edit the list one item per line"));
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(edit_, 1);
  layout->addWidget(more_);
  connect(edit_, &QLineEdit::editingFinished, this, [this] {
    if (edit_->isModified()) {
      edit_->setModified(false);
      emit committed();
    }
  });
  connect(more_, &QToolButton::clicked, this, &ListEdit::openDialog);
}

void ListEdit::openDialog() {
  QStringList items;
  QString err;
  parse(&items, &err);
  std::optional<QStringList> edited;
  if (dialog_) {
    edited = dialog_(this, items);
  } else {
    QDialog dlg(this);
    dlg.setObjectName(QStringLiteral("listDialog"));
    dlg.setWindowTitle(title_.isEmpty() ? tr("Edit list") : title_);
    auto* text = new QPlainTextEdit(&dlg);
    text->setPlainText(items.join('\n'));
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dlg);
    auto* layout = new QVBoxLayout(&dlg);
    layout->addWidget(new QLabel(tr("One item per line:"), &dlg));
    layout->addWidget(text);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
    if (dlg.exec() == QDialog::Accepted) {
      QStringList lines = text->toPlainText().split('\n');
      while (!lines.isEmpty() && lines.last().trimmed().isEmpty()) lines.removeLast();
      edited = lines;
    }
  }
  if (!edited) return;
  setValues(*edited);
  emit committed();
}

void ListEdit::setValues(const QStringList& values) {
  edit_->setText(values.join(QStringLiteral(", ")));
  edit_->setModified(false);
}

bool ListEdit::parse(QStringList* out, QString* error) const {
  out->clear();
  const QString text = edit_->text().trimmed();
  QString body = text;
  if (body.startsWith('[') && body.endsWith(']')) body = body.mid(1, body.size() - 2);
  if (body.trimmed().isEmpty()) return true;
  const QStringList parts = body.split(',');
  for (int i = 0; i < parts.size(); ++i) {
    const QString item = parts[i].trimmed();
    bool ok = true;
    if (kind_ == Kind::Ints) item.toLongLong(&ok);
    if (kind_ == Kind::Floats) QLocale::c().toDouble(item, &ok);
    if (!ok) {
      *error = tr("item %1 (\"%2\") is not %3")
                   .arg(i + 1)
                   .arg(item, kind_ == Kind::Ints ? tr("an integer") : tr("a number"));
      return false;
    }
    out->append(item);
  }
  return true;
}

QStringList ListEdit::values() const {
  QStringList v;
  QString err;
  parse(&v, &err);
  return v;
}

// ---------------------------------------------------------------------------- editOutputNames

namespace {
QString qs(const std::string& s) {
  return QString::fromStdString(s);
}
}  // namespace

std::optional<QStringList> editOutputNames(QWidget* parent, const Graph& g, NodeId id,
                                           const QStringList& current) {
  const Node* n = g.node(id);
  const NodeSpec* s = n ? g.spec(*n) : nullptr;
  if (!s) return std::nullopt;
  QDialog dlg(parent);
  dlg.setObjectName(QStringLiteral("outputNamesDialog"));
  dlg.setWindowTitle(QObject::tr("Output names of %1").arg(qs(g.describe(id))));
  auto* layout = new QVBoxLayout(&dlg);
  auto* intro =
      new QLabel(QObject::tr("The tensor name of each output port (specified_outputs_name). "
                             "Leave a row empty to keep the name shown in grey."),
                 &dlg);
  intro->setWordWrap(true);
  layout->addWidget(intro);
  auto* form = new QFormLayout;
  layout->addLayout(form);
  // Every port the node shows (a variadic tail shows one free slot), and any name set beyond.
  const int rows = std::max<int>(g.outputPortCount(id), current.size());
  std::vector<QLineEdit*> edits;
  for (int i = 0; i < rows; ++i) {
    const PortSpec* ps = s->outputPort(i);
    QString port = ps ? qs(ps->name) : QString::number(i);
    if (ps && ps->option == PortOption::Variadic)
      port += QStringLiteral("[%1]").arg(i - static_cast<int>(s->outputs.size()) + 1);
    auto* e = new QLineEdit(current.value(i), &dlg);
    e->setObjectName(QStringLiteral("outputName%1").arg(i));
    // The default is what the tensor is called without a specified name; for a port that has one
    // now, the graph's current name is that name, so only say that a default exists.
    const bool named =
        i < static_cast<int>(n->specifiedOutputsName.size()) && !n->specifiedOutputsName[i].empty();
    e->setPlaceholderText(named || i >= g.outputPortCount(id) ? QObject::tr("default name")
                                                              : qs(g.tensorName({id, i})));
    e->setMinimumWidth(220);
    auto* label = new QLabel(port, &dlg);
    if (ps) label->setToolTip(qs(ps->doc));
    form->addRow(label, e);
    edits.push_back(e);
  }
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dlg);
  layout->addWidget(buttons);
  QObject::connect(buttons, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
  QObject::connect(buttons, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
  if (dlg.exec() != QDialog::Accepted) return std::nullopt;
  QStringList names;
  for (QLineEdit* e : edits) names << e->text().trimmed();
  while (!names.isEmpty() && names.last().isEmpty()) names.removeLast();
  return names;
}

// ---------------------------------------------------------------------------- ParamsPanel

namespace {

QStringList paramItems(const Param& p) {
  QStringList out;
  switch (p.type) {
    case ParamType::Ints:
      for (auto v : p.asInts()) out << QString::number(v);
      break;
    case ParamType::Floats:
      for (auto v : p.asFloats()) out << QString::number(v, 'g', 9);
      break;
    case ParamType::Strings:
      for (const auto& v : p.asStrings()) out << qs(v);
      break;
    default:
      break;
  }
  return out;
}

// Zero-width spaces after separators and between camel-case words let a word-wrapped label
// break long names ("SparseCategoricalAccuracy", "/data/train-images.idx") rather than hold the
// whole dock at their width.
QString breakable(const QString& text) {
  // Only words too long for a line get break points: in prose, a line broken after the dot of
  // "deepwire.losses" read as the end of a sentence ("the chosen deepwire. losses loss").
  static const QRegularExpression kLong(QStringLiteral("\\S{21,}"));
  static const QRegularExpression kAfter(QStringLiteral("([/._:,=\\-])(?=\\S)"));
  static const QRegularExpression kCamel(QStringLiteral("([a-z0-9])([A-Z])"));
  QString out;
  qsizetype last = 0;
  for (auto it = kLong.globalMatch(text); it.hasNext();) {
    const auto m = it.next();
    QString word = m.captured();
    word.replace(kAfter, QStringLiteral("\\1\u200B"));
    word.replace(kCamel, QStringLiteral("\\1\u200B\\2"));
    out += text.mid(last, m.capturedStart() - last) + word;
    last = m.capturedEnd();
  }
  return out + text.mid(last);
}

// The first paragraph of a node's documentation, cut at a sentence's end (else a word's) when it
// is long: cut mid-word ("against t…") it read as garbled. The whole text is in the tooltip.
QString briefDoc(const QString& doc) {
  constexpr int kMax = 300;
  QString brief = doc.section(QStringLiteral("\n\n"), 0, 0).trimmed();
  brief.replace(QRegularExpression(QStringLiteral("\\s+")), QStringLiteral(" "));
  if (brief.size() <= kMax) return brief;
  const QString head = brief.left(kMax);
  qsizetype cut = -1;
  for (const QString& end : {QStringLiteral(". "), QStringLiteral("; "), QStringLiteral(": ")})
    cut = std::max(cut, head.lastIndexOf(end));
  if (cut >= kMax / 2) return head.left(cut + 1) + QStringLiteral(" …");
  cut = head.lastIndexOf(QLatin1Char(' '));
  return (cut > 0 ? head.left(cut) : head) + QStringLiteral(" …");
}

QString defaultText(const ParamSpec& ps) {
  if (ps.defaultValue) return qs(ps.defaultValue->toDisplay());
  return ps.required ? QObject::tr("required") : QObject::tr("unset");
}
}  // namespace

QLineEdit* ParamsPanel::numberField(const QString& pattern, const QString& placeholder,
                                    std::function<void(const QString&)> apply,
                                    std::function<QString()> shown) {
  auto* e = new QLineEdit;
  e->setValidator(new QRegularExpressionValidator(QRegularExpression(pattern), e));
  e->setPlaceholderText(placeholder);
  // An emptied field applies nothing: the reset button unsets a parameter.
  connect(e, &QLineEdit::editingFinished, this, [e, apply = std::move(apply)] {
    if (e->isModified() && !e->text().isEmpty()) apply(e->text());
  });
  refreshers_.push_back([e, shown = std::move(shown)] {
    e->setText(shown());
    e->setModified(false);
  });
  return e;
}

ParamsPanel::ParamsPanel(GraphModel* model, QWidget* parent) : QScrollArea(parent), model_(model) {
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  // Rows shrink to the dock's width and texts wrap; a dock narrower than the widest editor
  // scrolls sideways rather than cutting fields off.
  setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  connect(model_, &GraphModel::nodeChanged, this, [this](qint64 id) {
    if (id == id_) refreshValues();
  });
  connect(model_, &GraphModel::nodeRemoved, this, [this](qint64 id) {
    if (id == id_) setNode(0);
  });
  connect(model_, &GraphModel::modelReset, this, [this] { setNode(0); });
  connect(model_, &GraphModel::validated, this, [this] {
    if (!problem_) return;
    const QString text = model_->problemText(id_);
    problem_->setText(breakable(text));
    problem_->setToolTip(text);
    problem_->setVisible(!text.isEmpty());
  });
  rebuild();
}

void ParamsPanel::setNode(NodeId id) {
  if (id == id_ && widget()) return;
  id_ = model_->graph().node(id) ? id : 0;
  rebuild();
}

void ParamsPanel::report(const Status& st) {
  if (!st.ok()) {
    emit statusMessage(qs(st.message()));
    refreshValues();  // show the model's value again, not the refused text
  }
}

void ParamsPanel::refreshValues() {
  if (!model_->graph().node(id_)) return;
  for (auto& f : refreshers_) f();
}

void ParamsPanel::rebuild() {
  refreshers_.clear();
  editors_.clear();
  resets_.clear();
  problem_ = nullptr;
  auto* content = new QWidget;
  auto* outer = new QVBoxLayout(content);
  outer->setContentsMargins(6, 6, 6, 6);
  const Graph& g = model_->graph();
  const Node* n = g.node(id_);
  const NodeSpec* s = n ? g.spec(*n) : nullptr;
  if (!n || !s) {
    auto* hint = new QLabel(tr("Select a node to edit its parameters."), content);
    hint->setWordWrap(true);
    hint->setStyleSheet(QStringLiteral("color: gray"));
    outer->addWidget(hint);
    outer->addStretch();
    setWidget(content);
    return;
  }
  const NodeId id = id_;

  auto* title =
      new QLabel(QStringLiteral("<b style='font-size:12pt'>%1</b> <span style='color:gray'>"
                                "%2 · opset %3 · #%4</span>")
                     .arg(breakable(qs(s->type)).toHtmlEscaped(), qs(s->domain).toHtmlEscaped())
                     .arg(s->version)
                     .arg(id),
                 content);
  title->setObjectName(QStringLiteral("paramsTitle"));
  title->setWordWrap(true);
  title->setToolTip(qs(s->type));
  outer->addWidget(title);
  auto* doc = new QLabel(breakable(briefDoc(qs(s->doc))), content);
  doc->setObjectName(QStringLiteral("paramsDoc"));
  doc->setWordWrap(true);
  doc->setToolTip(qs(s->doc));
  doc->setStyleSheet(QStringLiteral("color: #555"));
  outer->addWidget(doc);
  problem_ = new QLabel(content);
  problem_->setObjectName(QStringLiteral("paramsProblem"));
  problem_->setWordWrap(true);
  problem_->setTextFormat(Qt::PlainText);
  problem_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  problem_->setStyleSheet(
      QStringLiteral("color: #b00020; background: #fdecea; padding: 4px; border-radius: 3px"));
  problem_->setText(breakable(model_->problemText(id)));
  problem_->setToolTip(model_->problemText(id));
  problem_->setVisible(!problem_->text().isEmpty());
  outer->addWidget(problem_);

  // One row: the editor, its default in grey, and a reset button enabled when the value is set.
  auto addRow = [&](QFormLayout* form, const QString& field, const QString& label, QWidget* editor,
                    const QString& def, const QString& tip, std::function<bool()> isSet,
                    std::function<Status()> reset) {
    auto* row = new QWidget;
    auto* h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    h->setSpacing(4);
    // A combo box keeps the width of its longest choice: "glorot_unif" reads as a typo.
    if (auto* combo = qobject_cast<QComboBox*>(editor)) {
      combo->setSizeAdjustPolicy(QComboBox::AdjustToContents);
      combo->setMinimumWidth(combo->sizeHint().width());
    } else {
      editor->setMinimumWidth(60);
    }
    h->addWidget(editor, 1);
    auto* defLabel = new QLabel(def.size() > 16 ? def.left(14) + QStringLiteral("…") : def);
    defLabel->setStyleSheet(QStringLiteral("color: gray; font-size: 8pt"));
    defLabel->setToolTip(tr("Default: %1").arg(def));
    h->addWidget(defLabel);
    auto* resetBtn = new QToolButton;
    resetBtn->setText(QStringLiteral("↺"));
    resetBtn->setToolTip(tr("Reset to default (%1)").arg(def));
    resetBtn->setAutoRaise(true);
    h->addWidget(resetBtn);
    auto* l = new QLabel(label);
    l->setToolTip(tip);
    editor->setToolTip(tip);
    form->addRow(l, row);
    editors_[field] = editor;
    resets_[field] = resetBtn;
    connect(resetBtn, &QToolButton::clicked, this, [this, reset] { report(reset()); });
    refreshers_.push_back([resetBtn, l, isSet] {
      const bool set = isSet();
      resetBtn->setEnabled(set);
      QFont f = l->font();
      f.setBold(set);
      l->setFont(f);
    });
  };
  auto tipFor = [](const QString& doc, const QString& def) {
    return QStringLiteral("<p style='white-space:pre-wrap'>%1</p><p><i>Default: %2</i></p>")
        .arg(doc.toHtmlEscaped(), def.toHtmlEscaped());
  };

  // --- Common fields: name, specified_outputs_name, lda coeff (docs from the catalogue). ---
  auto* common = new QGroupBox(tr("Node"), content);
  auto* commonForm = new QFormLayout(common);
  commonForm->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  // Labels above their fields: beside the widest label (specified_outputs_name) the name field
  // had too little room for a layer's name (sparse_categorical_accuracy was cut off).
  commonForm->setRowWrapPolicy(QFormLayout::WrapAllRows);
  for (const CommonField& cf : commonFields()) {
    const QString field = qs(cf.name);
    const QString def = cf.defaultValue.empty() ? tr("empty") : qs(cf.defaultValue);
    const QString tip = tipFor(qs(cf.doc), def);
    if (cf.name == "name") {
      auto* e = new QLineEdit;
      e->setPlaceholderText(namesItsTensor(s->kind) ? tr("tensor name (required)")
                                                    : tr("optional"));
      connect(e, &QLineEdit::editingFinished, this, [this, e, id] {
        if (e->isModified()) report(model_->rename(id, e->text().toStdString()));
      });
      refreshers_.push_back([this, e, id, tip] {
        const QString name = qs(model_->graph().node(id)->name);
        e->setText(name);
        e->setCursorPosition(0);  // a long name reads from its start
        e->setModified(false);
        // The whole name where the field is too narrow for it ("sparse_categorical_accuracy").
        e->setToolTip(name.isEmpty()
                          ? tip
                          : QStringLiteral("<p><b>%1</b></p>%2").arg(name.toHtmlEscaped(), tip));
      });
      addRow(
          commonForm, field, field, e, def, tip,
          [this, id] { return !model_->graph().node(id)->name.empty(); },
          [this, id] { return model_->rename(id, ""); });
    } else if (cf.name == "specified_outputs_name") {
      auto* e = new ListEdit(ListEdit::Kind::Strings);
      e->setDialog([this, id](QWidget* parent, const QStringList& current) {
        return editOutputNames(parent, model_->graph(), id, current);
      });
      e->dialogButton()->setToolTip(tr("Name each output port"));
      connect(e, &ListEdit::committed, this, [this, e, id] {
        QStringList items;
        QString err;
        if (!e->parse(&items, &err)) return report(Status::error(err.toStdString()));
        std::vector<std::string> names;
        for (const auto& i : items) names.push_back(i.toStdString());
        report(model_->setSpecifiedOutputsName(id, names));
      });
      refreshers_.push_back([this, e, id] {
        QStringList v;
        for (const auto& name : model_->graph().node(id)->specifiedOutputsName) v << qs(name);
        e->setValues(v);
      });
      addRow(
          commonForm, field, field, e, def, tip,
          [this, id] { return !model_->graph().node(id)->specifiedOutputsName.empty(); },
          [this, id] { return model_->setSpecifiedOutputsName(id, {}); });
    } else if (cf.name == "lda coeff") {
      // The seed toolkit's name, kept so that its users find it, tells a newcomer nothing: the
      // tooltip says what the number does and what its values mean.
      const QString ldaTip = tipFor(
          tr("Loss derivative coefficient: scales the derivative of the loss (the gradient) "
             "that flows back through this node to its inputs during training. What the node "
             "computes going forward does not change.\n"
             "1: the gradient passes unchanged. 0: nothing before this node learns through it. "
             "0.1: it learns 10 times slower through this path. Negative: the gradient is "
             "reversed (gradient reversal, as in domain-adversarial training)."),
          def);
      auto* e = new ScientificSpinBox;
      e->setSingleStep(0.1);
      const double defValue = QString::fromStdString(cf.defaultValue).toDouble();
      connect(e, &QDoubleSpinBox::valueChanged, this,
              [this, id](double v) { report(model_->setLdaCoeff(id, v)); });
      refreshers_.push_back([this, e, id] {
        QSignalBlocker block(e);
        e->setValue(model_->graph().node(id)->ldaCoeff);
      });
      addRow(
          commonForm, field, field, e, def, ldaTip,
          [this, id, defValue] { return model_->graph().node(id)->ldaCoeff != defValue; },
          [this, id, defValue] { return model_->setLdaCoeff(id, defValue); });
    }
  }
  outer->addWidget(common);

  // --- The type's own parameters. Initializers show their training fields first. ---
  auto makeGroup = [&](const QString& name) {
    auto* box = new QGroupBox(name, content);
    auto* form = new QFormLayout(box);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->setRowWrapPolicy(QFormLayout::WrapLongRows);
    outer->addWidget(box);
    return form;
  };
  QFormLayout* training = nullptr;
  if (s->kind == NodeKind::Initializer) training = makeGroup(tr("Training"));
  QFormLayout* params = s->params.empty() ? nullptr : makeGroup(tr("Parameters"));
  static const std::set<std::string> kTrainingFields = {"status", "regularizer", "l1", "l2"};

  for (const ParamSpec& ps : s->params) {
    const std::string name = ps.name;
    const QString field = qs(name);
    const QString def = defaultText(ps);
    const QString tip =
        tipFor(qs(ps.doc) + (ps.allowedValues.empty() ? QString() : tr("\nAllowed: %1").arg(qs([&] {
                 std::string a;
                 for (const auto& v : ps.allowedValues) a += (a.empty() ? "" : ", ") + v;
                 return a;
               }()))),
               def);
    QFormLayout* form = training && kTrainingFields.count(name) ? training : params;
    auto current = [this, id, name] { return model_->graph().param(id, name); };
    auto apply = [this, id, name](const Param& p) { report(model_->setParam(id, name, p)); };
    QWidget* editor = nullptr;
    switch (ps.type) {
      case ParamType::Bool: {
        auto* e = new QCheckBox;
        connect(e, &QCheckBox::toggled, this, [apply](bool on) { apply(Param::makeBool(on)); });
        refreshers_.push_back([e, current] {
          QSignalBlocker block(e);
          auto v = current();
          e->setChecked(v && v->asBool());
        });
        editor = e;
        break;
      }
      case ParamType::Int: {
        auto v = current();
        if (!ps.allowedValues.empty()) {
          auto* e = new QComboBox;
          for (const auto& a : ps.allowedValues) e->addItem(qs(a));
          connect(e, &QComboBox::activated, this,
                  [e, apply](int) { apply(Param::makeInt(e->currentText().toLongLong())); });
          refreshers_.push_back([e, current] {
            QSignalBlocker block(e);
            auto v = current();
            e->setCurrentIndex(v ? e->findText(QString::number(v->asInt())) : -1);
          });
          editor = e;
        } else if (ps.defaultValue && (!v || (v->asInt() >= INT_MIN && v->asInt() <= INT_MAX))) {
          auto* e = new QSpinBox;
          e->setRange(INT_MIN, INT_MAX);
          e->setKeyboardTracking(false);
          connect(e, &QSpinBox::valueChanged, this, [apply](int x) { apply(Param::makeInt(x)); });
          refreshers_.push_back([e, current] {
            QSignalBlocker block(e);
            auto v = current();
            e->setValue(v ? static_cast<int>(v->asInt()) : 0);
          });
          editor = e;
        } else {
          // A text field for what a spin box would misstate: a parameter with no default
          // shows empty ("required" or "unset") until it is given, where a spin box would
          // show 0, and values past 32 bits (INT64_MAX sentinels) fit.
          editor = numberField(
              QStringLiteral("-?[0-9]+"), def,
              [apply](const QString& t) { apply(Param::makeInt(t.toLongLong())); },
              [current] {
                auto v = current();
                return v ? QString::number(v->asInt()) : QString();
              });
        }
        break;
      }
      case ParamType::Float: {
        if (!ps.defaultValue) {
          // No default: empty until given (a spin box would show 0), as for integers.
          editor = numberField(
              QStringLiteral("[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?"), def,
              [apply](const QString& t) { apply(Param::makeFloat(t.toDouble())); },
              [current] {
                auto v = current();
                return v ? QString::number(v->asFloat(), 'g', 9) : QString();
              });
          break;
        }
        auto* e = new ScientificSpinBox;
        e->setSingleStep(0.1);
        connect(e, &QDoubleSpinBox::valueChanged, this,
                [apply](double x) { apply(Param::makeFloat(x)); });
        refreshers_.push_back([e, current] {
          QSignalBlocker block(e);
          auto v = current();
          e->setValue(v ? v->asFloat() : 0.0);
        });
        editor = e;
        break;
      }
      case ParamType::String: {
        if (!ps.allowedValues.empty()) {
          auto* e = new QComboBox;
          for (const auto& a : ps.allowedValues) e->addItem(qs(a));
          connect(e, &QComboBox::activated, this,
                  [e, apply](int) { apply(Param::makeString(e->currentText().toStdString())); });
          refreshers_.push_back([e, current] {
            QSignalBlocker block(e);
            auto v = current();
            e->setCurrentIndex(v ? e->findText(qs(v->asString())) : -1);
          });
          editor = e;
        } else {
          auto* e = new QLineEdit;
          connect(e, &QLineEdit::editingFinished, this, [e, apply] {
            if (e->isModified()) apply(Param::makeString(e->text().toStdString()));
          });
          refreshers_.push_back([e, current] {
            auto v = current();
            e->setText(v ? qs(v->asString()) : QString());
            e->setModified(false);
          });
          editor = e;
        }
        break;
      }
      case ParamType::Ints:
      case ParamType::Floats:
      case ParamType::Strings: {
        const auto kind = ps.type == ParamType::Ints     ? ListEdit::Kind::Ints
                          : ps.type == ParamType::Floats ? ListEdit::Kind::Floats
                                                         : ListEdit::Kind::Strings;
        auto* e = new ListEdit(kind);
        const QString what = tr("%1 of %2").arg(field, qs(g.describe(id)));
        e->setDialogTitle(what);
        const ParamType type = ps.type;
        connect(e, &ListEdit::committed, this, [this, e, apply, type, what] {
          QStringList items;
          QString err;
          // The message names the node and the parameter: the status bar outlives the selection.
          if (!e->parse(&items, &err))
            return report(Status::error(
                tr("%1: %2; the value is kept as it was").arg(what, err).toStdString()));
          if (type == ParamType::Ints) {
            std::vector<int64_t> v;
            for (const auto& i : items) v.push_back(i.toLongLong());
            apply(Param::makeInts(v));
          } else if (type == ParamType::Floats) {
            std::vector<double> v;
            for (const auto& i : items) v.push_back(QLocale::c().toDouble(i));
            apply(Param::makeFloats(v));
          } else {
            std::vector<std::string> v;
            for (const auto& i : items) v.push_back(i.toStdString());
            apply(Param::makeStrings(v));
          }
        });
        refreshers_.push_back([e, current] {
          auto v = current();
          e->setValues(v ? paramItems(*v) : QStringList());
        });
        editor = e;
        break;
      }
      default: {
        // Tensors, graphs and type protos come from imports or fills; they are shown, not typed.
        auto* e = new QLabel;
        e->setStyleSheet(QStringLiteral("color: gray"));
        refreshers_.push_back([e, current, type = ps.type] {
          auto v = current();
          // A tensor by its type and size (the serialized bytes, name and dims included, read
          // as 25 bytes for four floats).
          onnx::TensorProto t;
          if (v && type == ParamType::Tensor && t.ParseFromString(v->asString())) {
            QStringList dims;
            for (int64_t d : t.dims()) dims << QString::number(d);
            const int64_t n = dw::elementCount(t);
            e->setText(QObject::tr("%1[%2]: %3 values, %4 bytes (kept from import)")
                           .arg(QString::fromStdString(dw::dtypeName(t.data_type())),
                                dims.join(QLatin1Char(',')))
                           .arg(n)
                           .arg(n * static_cast<int64_t>(dw::dtypeSize(t.data_type()))));
            return;
          }
          e->setText(v ? QObject::tr("%1 (%2 bytes, kept from import)")
                             .arg(paramTypeName(type))
                             .arg(v->asString().size())
                       : QObject::tr("not set"));
        });
        editor = e;
        break;
      }
    }
    addRow(
        form, field, field + (ps.required ? QStringLiteral(" *") : QString()), editor, def, tip,
        [this, id, name] { return model_->graph().node(id)->params.count(name) > 0; },
        [this, id, name] { return model_->resetParam(id, name); });
    // Output Train lists the parameters of every loss (Huber's delta, ...): each shows only
    // while the chosen loss takes it, or greyed out while it is set for another loss (so that
    // it can still be reset).
    if (s->isLoss && s->param("loss") && name != "type" && name != "loss") {
      QStringList users;
      for (const NodeSpec* ls : g.catalogue().all())
        if (ls->domain == kLossesDomain && ls->param(name)) users << qs(ls->type);
      refreshers_.push_back([this, id, name, form, editor, tip, users] {
        const auto loss = model_->graph().param(id, "loss");
        const NodeSpec* ls =
            loss ? model_->graph().catalogue().find(kLossesDomain, loss->asString()) : nullptr;
        const bool used = !ls || ls->param(name);
        const bool set = model_->graph().node(id)->params.count(name) > 0;
        form->setRowVisible(editor->parentWidget(), used || set);
        editor->setEnabled(used);
        editor->setToolTip(used ? tip
                                : (users.size() == 1
                                       ? tr("Only the %1 loss uses this parameter; %2 ignores it. "
                                            "Reset it, or choose %1 as the loss.")
                                       : tr("Only the losses %1 use this parameter; %2 ignores "
                                            "it. Reset it, or choose one of those losses."))
                                      .arg(users.join(QStringLiteral(", ")),
                                           qs(loss ? loss->asString() : std::string())));
      });
    }
  }
  outer->addStretch();
  setWidget(content);
  for (QLineEdit* e : content->findChildren<QLineEdit*>()) e->installEventFilter(this);
  refreshValues();
}

bool ParamsPanel::eventFilter(QObject* watched, QEvent* event) {
  // A field takes Ctrl+Z and Ctrl+Shift+Z even with nothing of its own to undo (its history goes
  // when an edit is committed and the field refreshed): the keys then reach the document's Undo
  // and Redo instead of doing nothing.
  if (event->type() == QEvent::ShortcutOverride)
    if (auto* e = qobject_cast<QLineEdit*>(watched)) {
      auto* key = static_cast<QKeyEvent*>(event);
      const bool undo = key->matches(QKeySequence::Undo) && !e->isUndoAvailable();
      const bool redo = (key->matches(QKeySequence::Redo) ||
                         key->keyCombination() == QKeyCombination(Qt::CTRL, Qt::Key_Y)) &&
                        !e->isRedoAvailable();
      if (undo || redo) {
        event->ignore();
        return true;
      }
    }
  return QScrollArea::eventFilter(watched, event);
}

}  // namespace dw::studio
