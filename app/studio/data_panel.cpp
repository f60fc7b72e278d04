#include "app/studio/data_panel.h"

#include <QApplication>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontMetrics>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QMenu>
#include <QPainter>
#include <QScrollArea>
#include <QSettings>
#include <QUndoCommand>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "app/studio/params_panel.h"
#include "engine/training/trainer.h"
#include "nodes/type_syntax.h"

namespace dw::studio {

using namespace dw::engine::training;
using dw::engine::DType;
using dw::engine::Shape;
using dw::engine::Tensor;

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

QString splitName(DataPanel::Split s) {
  return s == DataPanel::kTrain        ? QObject::tr("Train")
         : s == DataPanel::kValidation ? QObject::tr("Validation")
                                       : QObject::tr("Test");
}

QString shapeText(const Shape& s) {
  QStringList parts;
  for (int64_t d : s) parts << QString::number(d);
  return QStringLiteral("[%1]").arg(parts.join(QStringLiteral(",")));
}

// What one sample is, in words: "1×28×28", or "one value" for a scalar per sample.
QString sampleText(const Shape& s) {
  if (s.empty()) return QObject::tr("one value");
  QStringList parts;
  for (int64_t d : s) parts << (d < 0 ? QStringLiteral("?") : QString::number(d));
  return parts.join(QStringLiteral("×"));
}

// An Input type's element type and per-sample shape: "float[N,1,28,28]" is float, [1,28,28].
std::optional<std::pair<DType, Shape>> parseInputType(const std::string& text) {
  auto t = parseType(text);
  if (!t.ok() || !t->has_tensor_type() || !t->tensor_type().has_shape() ||
      t->tensor_type().shape().dim_size() == 0)
    return std::nullopt;
  Shape sample;
  const auto& dims = t->tensor_type().shape().dim();
  for (int i = 1; i < dims.size(); ++i)
    sample.push_back(dims[i].has_dim_value() ? dims[i].dim_value() : -1);
  return std::make_pair(dw::engine::dtypeFromOnnx(t->tensor_type().elem_type()), sample);
}

// Up to 16 samples as a grid of thumbnails: uint8 or float images of [H,W], [C,H,W] (C = 1 or
// 3) per sample, each scaled to its own min..max when it is not 8-bit.
QPixmap thumbnails(const Tensor& t) {
  if (t.rank() < 3) return {};
  const int64_t n = t.dim(0);
  int64_t c = 1, h = 0, w = 0;
  if (t.rank() == 3) {
    h = t.dim(1);
    w = t.dim(2);
  } else if (t.rank() == 4 && (t.dim(1) == 1 || t.dim(1) == 3)) {
    c = t.dim(1);
    h = t.dim(2);
    w = t.dim(3);
  } else {
    return {};
  }
  if (h <= 0 || w <= 0 || h * w > 4096 * 4096) return {};
  const int cell = 34, cols = 8;
  const int rows = int((n + cols - 1) / cols);
  QPixmap pix(cols * cell, rows * cell);
  pix.fill(Qt::transparent);
  QPainter p(&pix);
  p.setRenderHint(QPainter::SmoothPixmapTransform);
  const int64_t plane = h * w;
  for (int64_t i = 0; i < n; ++i) {
    double lo = 0, hi = 255;
    if (t.dtype() != DType::kUInt8) {
      lo = INFINITY;
      hi = -INFINITY;
      for (int64_t k = 0; k < c * plane; ++k) {
        const double v = t.getDouble(i * c * plane + k);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (!(hi > lo)) hi = lo + 1;
    }
    QImage img(int(w), int(h), QImage::Format_RGB32);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        int rgb[3];
        for (int k = 0; k < 3; ++k) {
          const int64_t ch = c == 3 ? k : 0;
          const double v = t.getDouble(i * c * plane + ch * plane + y * w + x);
          rgb[k] = std::clamp(int(std::lround((v - lo) / (hi - lo) * 255)), 0, 255);
        }
        img.setPixel(int(x), int(y), qRgb(rgb[0], rgb[1], rgb[2]));
      }
    const QRect r(int(i % cols) * cell + 2, int(i / cols) * cell + 2, cell - 4, cell - 4);
    p.drawImage(r, img);
  }
  return pix;
}

// Samples per class as bars, with the class names (or indices) under them. Names wider than
// their bar are written upwards, elided to a common height: side by side they ran together
// ("sneakertrouser").
QPixmap histogram(const std::vector<int64_t>& counts, const std::vector<std::string>& names) {
  const int k = int(counts.size());
  if (k == 0) return {};
  const int barW = std::clamp(320 / k, 4, 40), height = 90;
  QFont f;
  f.setPointSizeF(7);
  const QFontMetrics fm(f);
  QStringList labels;
  int widest = 0;
  for (int i = 0; i < k; ++i) {
    labels << (i < int(names.size()) ? qs(names[size_t(i)]) : QString::number(i));
    widest = std::max(widest, fm.horizontalAdvance(labels.back()));
  }
  const bool upright = widest <= barW - 4;
  // Upwards, a label needs a bar as wide as a line of text; thinner bars go unlabelled.
  const bool labelled = upright || barW >= fm.height();
  const int labelH = !labelled ? 0 : upright ? fm.height() + 2 : std::min(widest, 64) + 4;
  QPixmap pix(std::max(k * barW, 120), height + labelH);
  pix.fill(Qt::transparent);
  QPainter p(&pix);
  p.setFont(f);
  const int64_t top = *std::max_element(counts.begin(), counts.end());
  for (int i = 0; i < k; ++i) {
    const int bh = top > 0 ? int(double(counts[size_t(i)]) / double(top) * (height - 12)) : 0;
    p.fillRect(i * barW + 1, height - bh, barW - 2, bh, QColor(0x3b, 0x7d, 0xd8));
    if (!labelled) continue;
    if (upright) {
      p.drawText(QRect(i * barW, height, barW, labelH), Qt::AlignCenter, labels[i]);
      continue;
    }
    p.save();
    p.translate(i * barW + (barW - fm.height()) / 2, height + labelH);
    p.rotate(-90);
    // Right-aligned: every name starts just under its bar.
    p.drawText(QRect(0, 0, labelH - 4, fm.height()), Qt::AlignRight | Qt::AlignVCenter,
               fm.elidedText(labels[i], Qt::ElideRight, labelH - 4));
    p.restore();
  }
  p.drawText(QRect(0, 0, pix.width(), 12), Qt::AlignLeft, QObject::tr("max %1 per class").arg(top));
  return pix;
}

QString tableHtml(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
  const size_t cols = std::min<size_t>(8, header.size());
  QString html = QStringLiteral("<table cellspacing=0 cellpadding=2 style='font-size:small'><tr>");
  for (size_t i = 0; i < cols; ++i)
    html += QStringLiteral("<th>%1</th>").arg(qs(header[i]).toHtmlEscaped());
  if (header.size() > cols) html += QStringLiteral("<th>…</th>");
  html += QStringLiteral("</tr>");
  for (const auto& r : rows) {
    html += QStringLiteral("<tr>");
    for (size_t i = 0; i < cols; ++i)
      html +=
          QStringLiteral("<td>%1</td>").arg(i < r.size() ? qs(r[i]).toHtmlEscaped() : QString());
    if (header.size() > cols) html += QStringLiteral("<td>…</td>");
    html += QStringLiteral("</tr>");
  }
  return html + QStringLiteral("</table>");
}

// "Test: idx · 10,000 samples · uint8[28,28]": what a split's source holds, as read.
QString sourceLine(DataPanel::Split split, const SourceSummary& s) {
  return DataPanel::tr("%1: %2 · %3 · %4%5")
      .arg(splitName(split), qs(s.format))
      .arg((s.samples == 1 ? DataPanel::tr("%1 sample") : DataPanel::tr("%1 samples"))
               .arg(QLocale().toString(qlonglong(s.samples))))
      .arg(dw::engine::dtypeName(s.dtype))
      .arg(shapeText(s.sampleShape));
}

// A source's first samples as stored (thumbnails, a CSV's first rows, first values), or its
// labels' counts per class, into `label`: the train source's and a split file's alike.
void showPreview(QLabel* label, const SourceSummary& s) {
  label->clear();
  label->setToolTip(QString());
  if (s.isLabels()) {
    label->setPixmap(histogram(s.labelCounts, s.classes));
    // The names in full (the bars may elide them), with their counts.
    QStringList lines;
    for (size_t i = 0; i < s.labelCounts.size() && i < 50; ++i)
      lines << DataPanel::tr("%1: %2")
                   .arg(i < s.classes.size() ? qs(s.classes[i]) : QString::number(i))
                   .arg(QLocale().toString(qlonglong(s.labelCounts[i])));
    if (s.labelCounts.size() > 50) lines << QStringLiteral("…");
    label->setToolTip(DataPanel::tr("Samples per class") + QStringLiteral("\n") +
                      lines.join(QStringLiteral("\n")));
  } else if (s.format == "csv") {
    label->setText(tableHtml(s.csvColumns, s.previewRows));
  } else {
    QPixmap pix = thumbnails(s.preview);
    if (!pix.isNull()) {
      label->setPixmap(pix);
      label->setToolTip(DataPanel::tr("The first samples, as stored"));
    } else if (s.preview.defined() && s.preview.size() > 0) {
      QStringList vals;
      for (int64_t i = 0; i < std::min<int64_t>(8, s.preview.size()); ++i)
        vals << QString::number(s.preview.getDouble(i), 'g', 4);
      label->setText(DataPanel::tr("first values: %1…").arg(vals.join(QStringLiteral(", "))));
    }
  }
}

}  // namespace

struct DataPanel::InputRow {
  DataInput input;
  DataFileSpec conv;  // format options and conversion; path unused
  QString paths[3];
  // The validation and test files' own formats ("" = told from the name): a file's format is
  // its own, while its conversion is the train source's (train's format is conv.format).
  std::string formats[3];
  // What the validation and test files hold per sample (their headers), to hold against the
  // train source's: they are read with its conversion unless they have their own.
  std::optional<StoredType> stored[3];
  // A validation or test file's own conversion, where it is not the train source's (a project
  // that says so, or "Convert this file"): test images stored flat where train's are [1,28,28].
  std::optional<DataFileSpec> own[3];
  // What `split`'s file is read with: its own conversion, else train's.
  const DataFileSpec& conversion(int split) const {
    return split != kTrain && own[split] ? *own[split] : conv;
  }
  std::optional<SourceSummary> summary;
  QString error;
  bool inspected = false;
  int generation = 0;        // the newest inspection; older results are dropped
  int applied = 0;           // the inspection whose result the row shows
  QString csvGuessedFor;     // the CSV whose label column was guessed (once per file)
  QString imagesGuessedFor;  // the image folder whose take was guessed (once per folder)

  QGroupBox* box = nullptr;
  QWidget* pathRow[3] = {};
  QLineEdit* path[3] = {};
  QPushButton* browse[3] = {};
  QWidget* splitFix[3] = {};  // under a validation or test file: its misfit or own conversion
  QLabel* splitNote[3] = {};
  QPushButton* splitConvert[3] = {};
  // A validation or test file's first samples (splitPreview) under a caption of what it holds,
  // in one box, after the train source's.
  QWidget* splitShown[3] = {};
  QLabel* splitCaption[3] = {};
  QLabel* splitPreview[3] = {};
  int splitGeneration[3] = {};  // its newest read; older results are dropped
  QLabel* info = nullptr;
  QLabel* preview = nullptr;
  QLabel* fit = nullptr;
  QPushButton* convert = nullptr;
  QPushButton* changeInput = nullptr;
  QComboBox* dtype = nullptr;
  ScientificSpinBox *scale = nullptr, *mean = nullptr, *std = nullptr;
  QPushButton* computeNorm = nullptr;
  QLineEdit* reshape = nullptr;
  QSpinBox* oneHot = nullptr;
  QWidget* csvRow = nullptr;
  QCheckBox* csvHeader = nullptr;
  QComboBox* csvLabel = nullptr;
  QComboBox* csvTake = nullptr;
  QLineEdit* csvFeatures = nullptr;
  QWidget* imageRow = nullptr;
  QSpinBox *imageH = nullptr, *imageW = nullptr;
  QComboBox* imageChannels = nullptr;
  QComboBox* imageTake = nullptr;
};

DataPanel::DataPanel(GraphModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  lastDir_ = QSettings().value(QStringLiteral("dataPanel/lastDir")).toString();
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(4, 4, 4, 4);

  auto* splits = new QGroupBox(tr("Splits"));
  auto* form = new QFormLayout(splits);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  trainLimit_ = new QSpinBox;
  trainLimit_->setRange(0, std::numeric_limits<int>::max());
  trainLimit_->setSpecialValueText(tr("all"));
  trainLimit_->setToolTip(tr("Train on the first N samples of the train sources (all: 0)"));
  form->addRow(tr("Train samples"), trainLimit_);
  auto splitRow = [this, form](const QString& label, QComboBox*& mode, QDoubleSpinBox*& fraction) {
    mode = new QComboBox;
    mode->addItems({tr("none"), tr("fraction of train"), tr("own sources")});
    mode->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    fraction = new QDoubleSpinBox;
    fraction->setRange(0, 0.9);
    fraction->setSingleStep(0.05);
    fraction->setDecimals(3);
    auto* h = new QHBoxLayout;
    h->setContentsMargins(0, 0, 0, 0);
    h->addWidget(mode);
    h->addWidget(fraction, 1);
    auto* w = new QWidget;
    w->setLayout(h);
    form->addRow(label, w);
    connect(mode, &QComboBox::currentIndexChanged, this, [this] {
      updateSplitWidgets();
      changed();
    });
    connect(fraction, &QDoubleSpinBox::valueChanged, this, [this] { changed(); });
  };
  splitRow(tr("Validation"), valMode_, valFraction_);
  splitRow(tr("Test"), testMode_, testFraction_);
  valMode_->setToolTip(tr("Evaluated after every epoch of Fit, and by Eval Step"));
  testMode_->setToolTip(tr("Held out: evaluated by Eval Step when there is no validation split"));
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  form->addRow(summary_);
  connect(trainLimit_, &QSpinBox::valueChanged, this, [this] { changed(); });
  outer->addWidget(splits);

  empty_ = new QLabel(
      tr("The graph has no data inputs yet. Add an <b>Input</b> node (and a loss or Output Train "
         "for its targets); each one gets its data here."));
  empty_->setWordWrap(true);
  outer->addWidget(empty_);

  rowsHost_ = new QWidget;
  auto* rowsLayout = new QVBoxLayout(rowsHost_);
  rowsLayout->setContentsMargins(0, 0, 0, 0);
  rowsLayout->addStretch();
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setWidget(rowsHost_);
  rowsHost_->setMinimumWidth(0);
  scroll->setFrameShape(QFrame::NoFrame);
  outer->addWidget(scroll, 1);

  refresh_.setSingleShot(true);
  refresh_.setInterval(150);
  connect(&refresh_, &QTimer::timeout, this, &DataPanel::refreshInputs);
  connect(model_, &GraphModel::validated, this, [this] { refresh_.start(); });
  updateSplitWidgets();
}

DataPanel::~DataPanel() = default;

bool DataPanel::eventFilter(QObject* watched, QEvent* event) {
  // Scrolling the panel must not change a setting that passes under the pointer.
  if (event->type() == QEvent::Wheel) {
    auto* w = qobject_cast<QWidget*>(watched);
    if (w && !w->hasFocus() && w->parentWidget()) {
      QCoreApplication::sendEvent(w->parentWidget(), event);  // on to the scroll area
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

void DataPanel::setBaseDir(const QString& dir) {
  baseDir_ = dir;
}

namespace {

// The spec as the project writes it: what tells two states of the panel apart.
std::string specText(const DatasetSpec& spec) {
  dw::engine::training::TrainingConfig c;
  c.dataset = spec;
  return dw::engine::training::trainingConfigToJson(c);
}

// A change of the Data panel as one step of the document's undo stack, beside the graph's: the
// sources, conversions and splits before and after. Changes within a moment of each other (a
// spin box stepped, a file's label column guessed once it is read) are one step.
class DataSpecCommand : public QUndoCommand {
 public:
  DataSpecCommand(DataPanel* panel, DatasetSpec before, DatasetSpec after)
      : QUndoCommand(QObject::tr("Change the data")),
        panel_(panel),
        before_(std::move(before)),
        after_(std::move(after)) {
    made_.start();
  }
  void undo() override { panel_->restoreSpec(before_); }
  void redo() override {
    if (first_) {
      first_ = false;  // pushed after the change was made
      return;
    }
    panel_->restoreSpec(after_);
  }
  int id() const override { return 0x44617461; }
  bool mergeWith(const QUndoCommand* other) override {
    const auto* o = static_cast<const DataSpecCommand*>(other);
    if (o->panel_ != panel_ || made_.elapsed() > 1000) return false;
    after_ = o->after_;
    made_.restart();
    return true;
  }

 private:
  DataPanel* panel_;
  DatasetSpec before_, after_;
  QElapsedTimer made_;
  bool first_ = true;
};

}  // namespace

void DataPanel::restoreSpec(const DatasetSpec& spec) {
  setSpec(spec, baseDir_);  // which records it as the undo stack's
  updateSummary();
  emit specChanged();
}

void DataPanel::setSpec(const DatasetSpec& spec, const QString& baseDir) {
  loading_ = true;
  baseDir_ = baseDir;
  spec_ = spec;
  for (auto& r : rows_) delete r->box;
  rows_.clear();
  valMode_->setCurrentIndex(!spec.validation.empty()   ? kOwnFiles
                            : spec.validationSplit > 0 ? kFraction
                                                       : kNone);
  valFraction_->setValue(spec.validationSplit > 0 ? spec.validationSplit : 0.1);
  testMode_->setCurrentIndex(!spec.test.empty()   ? kOwnFiles
                             : spec.testSplit > 0 ? kFraction
                                                  : kNone);
  testFraction_->setValue(spec.testSplit > 0 ? spec.testSplit : 0.1);
  trainLimit_->setValue(int(std::min<int64_t>(spec.trainLimit, std::numeric_limits<int>::max())));
  loading_ = false;
  refreshInputs();
  committed_ = this->spec();
}

std::vector<DataInput> DataPanel::graphInputs() const {
  auto in = dataInputsOf(model_->graph());
  if (in.ok()) return *in;
  // A graph that does not lower yet still shows its Input nodes, typed as they say.
  std::vector<DataInput> out;
  for (const auto& [id, n] : model_->graph().nodes()) {
    const NodeSpec* s = model_->graph().spec(n);
    if (!s || s->kind != NodeKind::GraphInput) continue;
    DataInput d;
    d.name = n.name;
    if (auto v = model_->graph().param(id, "type")) d.typeText = v->asString();
    if (auto t = parseType(d.typeText); t.ok() && t->has_tensor_type()) {
      d.dtype = dw::engine::dtypeFromOnnx(t->tensor_type().elem_type());
      if (t->tensor_type().has_shape())
        for (const auto& dim : t->tensor_type().shape().dim())
          d.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    }
    out.push_back(std::move(d));
  }
  return out;
}

void DataPanel::refreshInputs() {
  rebuildRows(graphInputs());
  emit readinessChanged();
}

void DataPanel::rebuildRows(const std::vector<DataInput>& inputs) {
  // Rows are kept by input name, so a graph edit never loses a chosen source. A renamed input
  // (one name gone, one new, and nothing chosen yet for the new one) keeps its row: renaming an
  // Input node, or undoing that, lost its sources and conversion.
  {
    auto named = [&](const std::string& name) {
      return std::any_of(inputs.begin(), inputs.end(),
                         [&](const DataInput& in) { return in.name == name; });
    };
    std::vector<InputRow*> gone;
    for (const auto& r : rows_)
      if (r && !named(r->input.name) &&
          std::any_of(std::begin(r->paths), std::end(r->paths),
                      [](const QString& p) { return !p.isEmpty(); }))
        gone.push_back(r.get());
    auto known = [&](const std::string& name) {
      auto in = [&](const std::vector<DataFileSpec>& files) {
        return std::any_of(files.begin(), files.end(),
                           [&](const DataFileSpec& f) { return f.input == name; });
      };
      return in(spec_.train) || in(spec_.validation) || in(spec_.test) ||
             std::any_of(rows_.begin(), rows_.end(),
                         [&](const auto& r) { return r && r->input.name == name; });
    };
    std::vector<const DataInput*> fresh;
    for (const DataInput& in : inputs)
      if (!known(in.name)) fresh.push_back(&in);
    if (gone.size() == 1 && fresh.size() == 1) {
      InputRow* r = gone[0];
      // The project's copy follows too: an Undo of the rename then finds the new name unknown
      // and carries the row back, instead of building one from the sources as they were opened.
      for (auto* files : {&spec_.train, &spec_.validation, &spec_.test})
        for (auto& f : *files)
          if (f.input == r->input.name) f.input = fresh[0]->name;
      r->input.name = fresh[0]->name;
      r->conv.input = fresh[0]->name;
      r->input.typeText.clear();  // retitled below
      r->box->setObjectName(QStringLiteral("data:") + qs(fresh[0]->name));
    }
  }
  std::vector<std::unique_ptr<InputRow>> next;
  bool structural = inputs.size() != rows_.size();
  for (const DataInput& in : inputs) {
    auto it = std::find_if(rows_.begin(), rows_.end(),
                           [&](const auto& r) { return r && r->input.name == in.name; });
    if (it != rows_.end()) {
      const bool retyped = (*it)->input.typeText != in.typeText;
      (*it)->input = in;
      next.push_back(std::move(*it));
      if (retyped)
        next.back()->box->setTitle(tr("%1 — takes %2").arg(qs(in.name), qs(in.typeText)));
      // Also when only the nodes around it changed (a loss chosen for these labels).
      updateFit(next.back().get());
      continue;
    }
    structural = true;
    auto r = std::make_unique<InputRow>();
    r->input = in;
    // The project's sources for this input, if it names any.
    auto find = [&](const std::vector<DataFileSpec>& files) -> const DataFileSpec* {
      for (const auto& f : files)
        if (f.input == in.name) return &f;
      return nullptr;
    };
    if (const DataFileSpec* f = find(spec_.train)) {
      r->conv = *f;
      r->paths[kTrain] = qs(f->path);
      r->imagesGuessedFor = r->paths[kTrain];  // the project's choice stands
    }
    for (auto [split, files] : {std::pair{kValidation, &spec_.validation}, {kTest, &spec_.test}})
      if (const DataFileSpec* f = find(*files)) {
        r->paths[split] = qs(f->path);
        r->formats[split] = f->format;
        // Kept as the project has it: saving must not give the file the train source's.
        if (!f->sameConversion(r->conv)) r->own[split] = *f;
      }
    for (Split split : {kValidation, kTest}) probeSplit(r.get(), split);
    r->conv.input = in.name;

    InputRow* row = r.get();
    r->box = new QGroupBox(tr("%1 — takes %2").arg(qs(in.name), qs(in.typeText)));
    r->box->setObjectName(QStringLiteral("data:") + qs(in.name));
    r->box->setToolTip(in.target ? tr("A target: what the losses and metrics compare against")
                                 : tr("A model input"));
    auto* v = new QVBoxLayout(r->box);
    v->setSpacing(3);
    for (Split s : {kTrain, kValidation, kTest}) {
      auto* h = new QHBoxLayout;
      h->setContentsMargins(0, 0, 0, 0);
      auto* label = new QLabel(splitName(s));
      label->setMinimumWidth(62);
      h->addWidget(label);
      r->path[s] = new QLineEdit(r->paths[s]);
      r->path[s]->setPlaceholderText(tr("a file (IDX, NPY, CSV) or an image folder"));
      r->path[s]->setToolTip(r->paths[s]);
      h->addWidget(r->path[s], 1);
      r->browse[s] = new QPushButton(tr("Choose…"));
      h->addWidget(r->browse[s]);
      r->pathRow[s] = new QWidget;
      r->pathRow[s]->setLayout(h);
      v->addWidget(r->pathRow[s]);
      if (s != kTrain) {
        r->splitFix[s] = new QWidget;
        auto* fh = new QHBoxLayout(r->splitFix[s]);
        fh->setContentsMargins(66, 0, 0, 0);
        r->splitNote[s] = new QLabel;
        r->splitNote[s]->setWordWrap(true);
        r->splitNote[s]->setTextInteractionFlags(Qt::TextSelectableByMouse);
        fh->addWidget(r->splitNote[s], 1);
        r->splitConvert[s] = new QPushButton;
        fh->addWidget(r->splitConvert[s], 0, Qt::AlignTop);
        r->splitFix[s]->hide();
        v->addWidget(r->splitFix[s]);
        r->splitShown[s] = new QWidget;
        auto* sv = new QVBoxLayout(r->splitShown[s]);
        sv->setContentsMargins(0, 4, 0, 0);
        sv->setSpacing(2);
        r->splitCaption[s] = new QLabel;
        r->splitPreview[s] = new QLabel;
        r->splitPreview[s]->setWordWrap(true);
        sv->addWidget(r->splitCaption[s]);
        sv->addWidget(r->splitPreview[s]);
        r->splitShown[s]->hide();  // laid out under train's preview, below
        connect(r->splitConvert[s], &QPushButton::clicked, this,
                [this, row, s] { toggleOwnConversion(row, s); });
      }
      connect(r->path[s], &QLineEdit::editingFinished, this, [this, row, s] {
        if (row->path[s]->text() != row->paths[s]) setPath(row, s, row->path[s]->text());
      });
      connect(r->browse[s], &QPushButton::clicked, this, [this, row, s] { chooseFile(row, s); });
    }
    r->info = new QLabel;
    r->info->setWordWrap(true);
    r->info->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(r->info);
    r->preview = new QLabel;
    r->preview->setWordWrap(true);
    v->addWidget(r->preview);
    for (Split split : {kValidation, kTest}) {
      v->addWidget(r->splitShown[split]);
      previewSplit(row, split);  // its file was probed above
    }

    // Format options.
    r->csvRow = new QWidget;
    {
      auto* rows = new QVBoxLayout(r->csvRow);
      rows->setContentsMargins(0, 0, 0, 0);
      auto* h = new QHBoxLayout;
      auto* h2 = new QHBoxLayout;
      rows->addLayout(h);
      rows->addLayout(h2);
      r->csvHeader = new QCheckBox(tr("Header row"));
      r->csvHeader->setChecked(r->conv.csvHeader);
      r->csvLabel = new QComboBox;
      r->csvLabel->setSizeAdjustPolicy(QComboBox::AdjustToContents);
      r->csvTake = new QComboBox;
      r->csvTake->addItems({tr("feature columns"), tr("label column")});
      r->csvTake->setCurrentIndex(r->conv.csvTakeLabel ? 1 : 0);
      h->addWidget(new QLabel(tr("Label column")));
      h->addWidget(r->csvLabel, 1);
      h->addWidget(r->csvHeader);
      h2->addWidget(new QLabel(tr("Takes")));
      h2->addWidget(r->csvTake, 1);
      r->csvFeatures = new QLineEdit(qs([&] {
        std::string l;
        for (const auto& c : r->conv.csvFeatureColumns) l += (l.empty() ? "" : ", ") + c;
        return l;
      }()));
      r->csvFeatures->setPlaceholderText(tr("feature columns: all but the label"));
      r->csvFeatures->setToolTip(
          tr("The columns the features come from, by name or number, separated by commas; "
             "empty: every column but the label"));
      rows->addWidget(r->csvFeatures);
      connect(r->csvFeatures, &QLineEdit::editingFinished, this, [this, row] {
        std::vector<std::string> cols;
        for (const QString& c :
             row->csvFeatures->text().split(QLatin1Char(','), Qt::SkipEmptyParts))
          if (!c.trimmed().isEmpty()) cols.push_back(c.trimmed().toStdString());
        if (cols == row->conv.csvFeatureColumns) return;
        row->conv.csvFeatureColumns = cols;
        inspect(row);
        changed();
      });
      connect(r->csvHeader, &QCheckBox::toggled, this, [this, row](bool on) {
        row->conv.csvHeader = on;
        inspect(row);
        changed();
      });
      connect(r->csvLabel, &QComboBox::activated, this, [this, row] {
        row->conv.csvLabelColumn = row->csvLabel->currentIndex() <= 0
                                       ? std::string()
                                       : row->csvLabel->currentText().toStdString();
        inspect(row);
        changed();
      });
      connect(r->csvTake, &QComboBox::activated, this, [this, row](int i) {
        row->conv.csvTakeLabel = i == 1;
        inspect(row);
        changed();
      });
    }
    v->addWidget(r->csvRow);
    r->imageRow = new QWidget;
    {
      auto* rows = new QVBoxLayout(r->imageRow);
      rows->setContentsMargins(0, 0, 0, 0);
      auto* h = new QHBoxLayout;
      auto* h2 = new QHBoxLayout;
      rows->addLayout(h);
      rows->addLayout(h2);
      r->imageTake = new QComboBox;
      r->imageTake->addItems({tr("pixels"), tr("class index")});
      r->imageTake->setCurrentIndex(r->conv.imageTakeLabel ? 1 : 0);
      r->imageH = new QSpinBox;
      r->imageW = new QSpinBox;
      for (QSpinBox* b : {r->imageH, r->imageW}) {
        b->setRange(0, 8192);
        b->setSpecialValueText(tr("keep"));
      }
      r->imageH->setValue(int(r->conv.imageHeight));
      r->imageW->setValue(int(r->conv.imageWidth));
      r->imageChannels = new QComboBox;
      r->imageChannels->addItems({tr("as stored"), tr("grey"), tr("RGB")});
      r->imageChannels->setCurrentIndex(r->conv.imageChannels == 1   ? 1
                                        : r->conv.imageChannels == 3 ? 2
                                                                     : 0);
      h->addWidget(new QLabel(tr("Takes")));
      h->addWidget(r->imageTake);
      h->addWidget(r->imageChannels);
      h->addStretch();
      h2->addWidget(new QLabel(tr("Size")));
      h2->addWidget(r->imageH, 1);
      h2->addWidget(new QLabel(QStringLiteral("×")));
      h2->addWidget(r->imageW, 1);
      auto apply = [this, row] {
        row->conv.imageTakeLabel = row->imageTake->currentIndex() == 1;
        row->conv.imageHeight = row->imageH->value();
        row->conv.imageWidth = row->imageW->value();
        const int c = row->imageChannels->currentIndex();
        row->conv.imageChannels = c == 1 ? 1 : c == 2 ? 3 : 0;
        inspect(row);
        changed();
      };
      connect(r->imageTake, &QComboBox::activated, this, apply);
      connect(r->imageChannels, &QComboBox::activated, this, apply);
      connect(r->imageH, &QSpinBox::editingFinished, this, apply);
      connect(r->imageW, &QSpinBox::editingFinished, this, apply);
    }
    v->addWidget(r->imageRow);

    // Conversion.
    auto* conv = new QWidget;
    auto* grid = new QFormLayout(conv);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    r->dtype = new QComboBox;
    r->dtype->addItems({tr("as stored"), "float32", "int64", "int32", "uint8", "double"});
    r->dtype->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    r->scale = new ScientificSpinBox;
    r->mean = new ScientificSpinBox;
    r->std = new ScientificSpinBox;
    // A double spin box sizes itself for its longest value (17 digits): let the layout decide.
    for (auto* b : {r->scale, r->mean, r->std}) {
      b->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
      b->setMinimumWidth(70);
    }
    r->scale->setToolTip(tr("Each value is multiplied by this first (1/255 for 8-bit images)"));
    r->mean->setToolTip(tr("Then this is subtracted"));
    r->std->setToolTip(tr("Then the result is divided by this"));
    r->computeNorm = new QPushButton(tr("Compute from train"));
    r->computeNorm->setToolTip(
        tr("Mean and standard deviation of the train samples after the scale"));
    // Two rows, so the dock never needs to be wider than one spin box pair.
    auto* normRow = new QHBoxLayout;
    normRow->addWidget(new QLabel(tr("mean")));
    normRow->addWidget(r->mean, 1);
    normRow->addWidget(new QLabel(tr("std")));
    normRow->addWidget(r->std, 1);
    auto* normHost = new QWidget;
    normRow->setContentsMargins(0, 0, 0, 0);
    normHost->setLayout(normRow);
    r->reshape = new QLineEdit;
    r->reshape->setPlaceholderText(tr("per sample, e.g. 1,28,28; [] one value (empty: keep)"));
    r->oneHot = new QSpinBox;
    r->oneHot->setRange(0, 100000);
    r->oneHot->setSpecialValueText(tr("off"));
    r->oneHot->setToolTip(tr("Turn class indices into one-hot rows of this many classes"));
    auto* dtypeRow = new QHBoxLayout;
    dtypeRow->setContentsMargins(0, 0, 0, 0);
    dtypeRow->addWidget(r->dtype);
    dtypeRow->addWidget(new QLabel(tr("One-hot")));
    dtypeRow->addWidget(r->oneHot, 1);
    auto* dtypeHost = new QWidget;
    dtypeHost->setLayout(dtypeRow);
    grid->addRow(tr("Type"), dtypeHost);
    grid->addRow(tr("Scale ×"), r->scale);
    grid->addRow(tr("Then −/÷"), normHost);
    grid->addRow(QString(), r->computeNorm);
    grid->addRow(tr("Reshape"), r->reshape);
    v->addWidget(conv);
    auto edited = [this, row] {
      if (loading_) return;
      widgetsToConversion(row);
      updateFit(row);
      changed();
    };
    connect(r->dtype, &QComboBox::activated, this, edited);
    for (auto* b : {r->scale, r->mean, r->std})
      connect(b, &QDoubleSpinBox::valueChanged, this, edited);
    connect(r->oneHot, &QSpinBox::valueChanged, this, edited);
    connect(r->reshape, &QLineEdit::editingFinished, this, edited);
    connect(r->computeNorm, &QPushButton::clicked, this,
            [this, row] { computeNormalization(row); });

    r->fit = new QLabel;
    r->fit->setWordWrap(true);
    r->fit->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(r->fit);
    auto* fixes = new QHBoxLayout;
    r->convert = new QPushButton(tr("Convert the data"));
    r->convert->setToolTip(tr("Apply the proposed conversion (shown above); undo by editing it"));
    r->changeInput = new QPushButton(tr("Change the Input"));
    r->changeInput->setToolTip(tr("Set the Input node's type to what the data holds"));
    fixes->addWidget(r->convert);
    fixes->addWidget(r->changeInput);
    fixes->addStretch();
    v->addLayout(fixes);
    connect(r->convert, &QPushButton::clicked, this, [this, row] { applyProposal(row); });
    connect(r->changeInput, &QPushButton::clicked, this, [this, row] { changeInput(row); });

    for (QWidget* w : r->box->findChildren<QWidget*>())
      if (qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractSpinBox*>(w)) {
        w->setFocusPolicy(Qt::StrongFocus);
        w->installEventFilter(this);
      }
    conversionToWidgets(row);
    next.push_back(std::move(r));
  }
  for (auto& r : rows_)
    if (r) delete r->box;  // inputs gone from the graph
  rows_ = std::move(next);
  if (structural) {
    auto* layout = static_cast<QVBoxLayout*>(rowsHost_->layout());
    for (auto& r : rows_) layout->removeWidget(r->box);
    int i = 0;
    for (auto& r : rows_) layout->insertWidget(i++, r->box);
  }
  empty_->setVisible(rows_.empty());
  updateSplitWidgets();
  for (auto& r : rows_)
    if (!r->inspected) inspect(r.get());
  updateSummary();
}

void DataPanel::updateSplitWidgets() {
  valFraction_->setVisible(valMode_->currentIndex() == kFraction);
  testFraction_->setVisible(testMode_->currentIndex() == kFraction);
  for (auto& r : rows_) {
    r->pathRow[kValidation]->setVisible(valMode_->currentIndex() == kOwnFiles);
    r->pathRow[kTest]->setVisible(testMode_->currentIndex() == kOwnFiles);
    for (Split s : {kValidation, kTest}) {
      updateSplitFit(r.get(), s);
      showSplitBox(r.get(), s);
    }
  }
  updateSummary();
}

void DataPanel::chooseFile(InputRow* r, Split split) {
  // A source is a file, or a folder with one subfolder of images per class.
  QMenu menu;
  menu.addAction(tr("File (IDX, NPY, CSV)…"));
  QAction* folder = menu.addAction(tr("Image folder (one subfolder per class)…"));
  QAction* picked = menu.exec(r->browse[split]->mapToGlobal(QPoint(0, r->browse[split]->height())));
  if (!picked) return;
  const QString start =
      r->paths[split].isEmpty() ? lastDir_ : QFileInfo(r->paths[split]).absolutePath();
  const QString title = tr("Data for %1 (%2)").arg(qs(r->input.name), splitName(split));
  const QString path =
      picked == folder
          ? QFileDialog::getExistingDirectory(this, title, start)
          : QFileDialog::getOpenFileName(
                this, title, start,
                tr("Data files (*.gz *ubyte* *.idx *.npy *.pb *.csv *.tsv);;All files (*)"));
  if (path.isEmpty()) return;
  lastDir_ = QFileInfo(path).absolutePath();
  QSettings().setValue(QStringLiteral("dataPanel/lastDir"), lastDir_);
  setPath(r, split, path);
}

void DataPanel::setPath(InputRow* r, Split split, const QString& path) {
  const QString before = r->paths[split];
  r->paths[split] = path.trimmed();
  {
    const QSignalBlocker b(r->path[split]);
    r->path[split]->setText(r->paths[split]);
    r->path[split]->setToolTip(r->paths[split]);
  }
  if (split == kTrain) {
    // A new source may be another format: its format options start over, and so do the CSV
    // columns chosen or guessed for another file (a trial's reg_x.csv was read for a label
    // column 'y' that only the earlier file had, with the column picker hidden by the error).
    r->conv.format.clear();
    if (before != r->paths[kTrain]) {
      r->conv.csvLabelColumn.clear();
      r->conv.csvTakeLabel = false;
      r->conv.csvFeatureColumns.clear();
      r->csvGuessedFor.clear();
    }
    inspect(r);
  } else {
    // Other splits are read with the train source's conversion, each in its own format (told
    // from the new file's name); check now that the file is there and readable (its header is
    // enough).
    r->formats[split].clear();
    r->own[split].reset();  // another file: it may hold what train's conversion fits
    if (const QString error = probeSplit(r, split); !error.isEmpty())
      r->info->setText(tr("<span style='color:#b00020'>%1: %2</span>")
                           .arg(splitName(split), error.toHtmlEscaped()));
  }
  changed();
}

QString DataPanel::probeSplit(InputRow* r, Split split) {
  r->stored[split].reset();
  if (r->paths[split].isEmpty()) return QString();
  DataFileSpec probe = r->conversion(split);
  probe.path = r->paths[split].toStdString();
  probe.format = r->formats[split];
  auto s = storedType(probe, baseDir_.toStdString());
  if (!s.ok()) return qs(s.message());
  r->stored[split] = *s;
  if (r->splitFix[split]) updateSplitFit(r, split);
  previewSplit(r, split);
  return QString();
}

void DataPanel::showSplitBox(InputRow* r, Split split) {
  const QLabel* p = r->splitPreview[split];
  r->splitShown[split]->setVisible(hasOwnFiles(split) &&
                                   (!p->pixmap().isNull() || !p->text().isEmpty()));
}

void DataPanel::previewSplit(InputRow* r, Split split) {
  QLabel* label = r->splitPreview[split];
  if (!label) return;  // the row's widgets come after its first probe (rebuildRows)
  const int generation = ++r->splitGeneration[split];
  label->clear();
  r->splitShown[split]->hide();
  if (r->paths[split].isEmpty() || !r->stored[split]) return;
  DataFileSpec probe = r->conversion(split);
  probe.path = r->paths[split].toStdString();
  probe.format = r->formats[split];
  auto* watcher = new QFutureWatcher<Result<SourceSummary>>(r->box);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, r, split, watcher, generation] {
    watcher->deleteLater();
    const Result<SourceSummary> read = watcher->result();  // by value: keep it
    if (generation != r->splitGeneration[split] || !read.ok()) return;
    showPreview(r->splitPreview[split], read.value());
    r->splitCaption[split]->setText(sourceLine(split, read.value()));
    showSplitBox(r, split);
  });
  watcher->setFuture(QtConcurrent::run(
      [probe, base = baseDir_.toStdString()] { return inspectSource(probe, base); }));
}

namespace {

// What a split's file holds, from its header, as the proposal and fit checks take it. Class
// labels are told by their counts, which a header does not give: an integer file whose train
// source holds class labels is taken to hold them too.
SourceSummary headerSummary(const StoredType& t, const QString& path, const SourceSummary* train) {
  SourceSummary s;
  s.path = path.toStdString();
  s.format = t.format;
  s.samples = t.samples;
  s.dtype = t.dtype;
  s.sampleShape = t.sampleShape;
  const bool integer = !dw::engine::isFloating(t.dtype) && t.dtype != DType::kBool &&
                       t.dtype != DType::kString && t.dtype != DType::kUndefined;
  if (train && train->isLabels() && integer) s.labelCounts = train->labelCounts;
  return s;
}

}  // namespace

Proposal DataPanel::splitProposal(const InputRow* r, Split split) const {
  // From the train source's conversion, so that the values come out as train's do (its mean and
  // std), less what belongs to train's storage: its reshape, and a 1/255 for 8-bit data where
  // this file holds floats already.
  DataFileSpec base = r->conversion(split);
  base.format = r->formats[split];
  base.shape.clear();
  base.scalarSamples = false;
  if (r->summary && r->summary->dtype == DType::kUInt8 &&
      dw::engine::isFloating(r->stored[split]->dtype))
    base.normalization.scale = 1.0;
  return proposeConversion(
      headerSummary(*r->stored[split], r->paths[split], r->summary ? &*r->summary : nullptr), base,
      r->input);
}

void DataPanel::updateSplitFit(InputRow* r, Split split) {
  const bool shown = hasOwnFiles(split) && !r->paths[split].isEmpty();
  const QString misfit = shown ? splitMisfit(r, split) : QString();
  if (!shown || (!r->own[split] && misfit.isEmpty())) {
    r->splitFix[split]->hide();
    return;
  }
  QString text;
  if (r->own[split]) {
    text = tr("Converted on its own: %1.").arg(qs(r->own[split]->conversionText())).toHtmlEscaped();
    r->splitConvert[split]->setText(tr("Use train's conversion"));
    r->splitConvert[split]->setToolTip(tr("Read this file with the train source's conversion (%1)")
                                           .arg(qs(r->conv.conversionText())));
    r->splitConvert[split]->setEnabled(true);
  } else {
    r->splitConvert[split]->setText(tr("Convert this file"));
    const bool known = r->stored[split].has_value();
    const Proposal p = known ? splitProposal(r, split) : Proposal{};
    r->splitConvert[split]->setEnabled(known && p.fits);
    r->splitConvert[split]->setToolTip(
        known && p.fits ? tr("Give this file a conversion of its own: %1").arg(qs(p.message))
                        : tr("No conversion makes this file fit the input"));
  }
  if (!misfit.isEmpty())
    text += QStringLiteral("%1<span style='color:#b00020'>✘ %2</span>")
                .arg(text.isEmpty() ? QString() : QStringLiteral("<br>"), misfit.toHtmlEscaped());
  r->splitNote[split]->setText(text);
  r->splitFix[split]->show();
}

void DataPanel::toggleOwnConversion(InputRow* r, Split split) {
  if (r->own[split]) {
    r->own[split].reset();
  } else {
    if (!r->stored[split]) return;
    const Proposal p = splitProposal(r, split);
    if (!p.fits) return;
    r->own[split] = p.spec;
    r->own[split]->input = r->input.name;
  }
  // The CSV options may differ between the two: read the header again.
  probeSplit(r, split);
  updateSplitFit(r, split);
  changed();
}

QString DataPanel::splitMisfit(const InputRow* r, Split split) const {
  const auto& other = r->stored[split];
  if (!other) return QString();
  // Read with its own conversion, or with train's: what comes out must fit the input, and must
  // not be scaled as train's data is where it is stored otherwise (floats already scaled).
  const DataFileSpec& conv = r->conversion(split);
  const SourceSummary header =
      headerSummary(*other, r->paths[split], r->summary ? &*r->summary : nullptr);
  // A resized image folder's first image may be any size: only its pixels' type counts.
  const bool resized = other->format == "images" && conv.imageHeight > 0;
  std::string m = resized ? std::string() : checkFit(header, conv, r->input);
  bool scaling = false;  // the scaling rule's message, which says the fix itself
  if (m.empty() && r->summary) {
    DataFileSpec trainSpec = r->conv;
    trainSpec.path = r->paths[kTrain].toStdString();
    DataFileSpec file = conv;
    file.path = r->paths[split].toStdString();
    m = splitScalingProblem(trainSpec, r->summary->dtype, file, other->dtype,
                            splitName(split).toLower().toStdString());
    scaling = !m.empty();
  }
  if (m.empty()) return QString();
  const QString name = splitName(split).toLower();
  if (r->own[split]) return tr("the %1 source with its own conversion: %2").arg(name, qs(m));
  if (scaling)
    return tr("the %1 source, read with the train source's conversion: %2").arg(name, qs(m));
  // The train source fits the input: this file is the odd one, and changing the Input (which
  // checkFit may advise) would break the train source.
  const std::string takes = " takes " + r->input.typeText;
  if (const size_t cut = m.find(takes); cut != std::string::npos && r->summary)
    m = m.substr(0, cut + takes.size()) + ", which the train source " +
        QFileInfo(r->paths[kTrain]).fileName().toStdString() + " fits: choose the " +
        name.toStdString() + " file that holds what that one holds";
  return tr("the %1 source, read with the train source's conversion: %2 (or Convert this file, "
            "beside it, to give it a conversion of its own)")
      .arg(name, qs(m));
}

void DataPanel::inspect(InputRow* r) {
  r->inspected = true;
  const int generation = ++r->generation;
  if (r->paths[kTrain].isEmpty()) {
    r->applied = generation;
    inspected(r, Status::error(""));
    return;
  }
  DataFileSpec probe = r->conv;
  probe.path = r->paths[kTrain].toStdString();
  r->info->setText(
      tr("<i>Reading %1…</i>").arg(QFileInfo(r->paths[kTrain]).fileName().toHtmlEscaped()));
  // Reading a source can take seconds (a large CSV, a gzip IDX): off the GUI thread.
  auto* watcher = new QFutureWatcher<Result<SourceSummary>>(r->box);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, r, watcher, generation] {
    watcher->deleteLater();
    if (generation == r->generation) {
      r->applied = generation;
      inspected(r, watcher->result());
    }
    if (!busy()) emit sourcesRead();
  });
  watcher->setFuture(QtConcurrent::run(
      [probe, base = baseDir_.toStdString()] { return inspectSource(probe, base); }));
}

bool DataPanel::busy() const {
  // Until its result is shown: a finished future's signal may still be queued.
  for (const auto& r : rows_)
    if (r->applied != r->generation) return true;
  return false;
}

void DataPanel::inspected(InputRow* r, const Result<SourceSummary>& s) {
  // A CSV with a column named like a label: that column is the label, and a target input (or
  // one named like it) takes it while the others take the remaining columns, so giving the
  // same file to both rows is all a table needs. Shown in the combos; once per file.
  if (s.ok() && s->format == "csv" && r->conv.csvLabelColumn.empty() &&
      r->csvGuessedFor != r->paths[kTrain]) {
    r->csvGuessedFor = r->paths[kTrain];
    if (guessCsvLabel(r->conv, s->csvColumns, r->input)) {
      r->csvTake->setCurrentIndex(r->conv.csvTakeLabel ? 1 : 0);
      inspect(r);  // the features without the label column
      changed();
      return;
    }
  }
  // An image folder gives pixels or each image's class: an input of an integer type or a
  // label-like name takes the class, once per folder, as the user would choose (it was left at
  // pixels, which an int64 input cannot take). A float target may be an autoencoder's pixels.
  if (s.ok() && s->format == "images" && r->imagesGuessedFor != r->paths[kTrain]) {
    r->imagesGuessedFor = r->paths[kTrain];
    const QString input = qs(r->input.name).toLower();
    const bool label = !dw::engine::isFloating(r->input.dtype) || input.contains("label") ||
                       input.contains("target") || input == "y";
    if (label != r->conv.imageTakeLabel) {
      r->conv.imageTakeLabel = label;
      r->imageTake->setCurrentIndex(label ? 1 : 0);
      inspect(r);
      changed();
      return;
    }
  }
  r->summary.reset();
  r->error.clear();
  if (s.ok()) {
    // The spec keeps the user's format ("" = from the name): what was detected is shown, not
    // stored, so reading a source never changes what training loads.
    r->summary = s.value();
  } else if (!r->paths[kTrain].isEmpty()) {
    r->error = qs(s.message());
  }
  showSummary(r);
  updateFit(r);
  updateSummary();
  emit readinessChanged();
}

QString DataPanel::sampleCountProblem() const {
  const InputRow* first = nullptr;
  for (const auto& r : rows_) {
    if (!r->summary) continue;
    if (!first) {
      first = r.get();
    } else if (r->summary->samples != first->summary->samples) {
      return tr("%1 has %2 samples but %3 has %4: give every input a source with the same "
                "samples, in the same order")
          .arg(qs(first->input.name))
          .arg(QLocale().toString(qlonglong(first->summary->samples)))
          .arg(qs(r->input.name))
          .arg(QLocale().toString(qlonglong(r->summary->samples)));
    }
  }
  // The same within a split of files of its own (1,000 test images against 10,000 test labels
  // passed until Eval Step read them).
  for (Split split : {kValidation, kTest}) {
    if (!hasOwnFiles(split)) continue;
    const InputRow* one = nullptr;
    for (const auto& r : rows_) {
      if (r->paths[split].isEmpty() || !r->stored[split]) continue;
      if (!one) {
        one = r.get();
      } else if (r->stored[split]->samples != one->stored[split]->samples) {
        return tr("the %1 sources of %2 and %3 hold %4 and %5 samples: a split's sources need "
                  "the same samples, in the same order")
            .arg(splitName(split).toLower(), qs(one->input.name), qs(r->input.name))
            .arg(QLocale().toString(qlonglong(one->stored[split]->samples)))
            .arg(QLocale().toString(qlonglong(r->stored[split]->samples)));
      }
    }
  }
  return QString();
}

void DataPanel::showSummary(InputRow* r) {
  const bool csv = r->summary && r->summary->format == "csv";
  const bool images = r->summary && r->summary->format == "images";
  r->csvRow->setVisible(csv);
  r->csvFeatures->setVisible(!r->conv.csvTakeLabel);
  r->imageRow->setVisible(images);
  r->preview->clear();
  if (!r->error.isEmpty()) {
    r->info->setText(
        QStringLiteral("<span style='color:#b00020'>%1</span>").arg(r->error.toHtmlEscaped()));
    return;
  }
  if (!r->summary) {
    r->info->setText(tr("<i>Choose a source for the train split.</i>"));
    return;
  }
  const SourceSummary& s = *r->summary;
  r->info->setText(sourceLine(kTrain, s));
  if (csv) {
    const QSignalBlocker b(r->csvLabel);
    r->csvLabel->clear();
    r->csvLabel->addItem(tr("(none)"));
    for (const auto& c : s.csvColumns) r->csvLabel->addItem(qs(c));
    const int i = r->csvLabel->findText(qs(r->conv.csvLabelColumn));
    r->csvLabel->setCurrentIndex(std::max(0, i));
  }
  showPreview(r->preview, s);
}

void DataPanel::conversionToWidgets(InputRow* r) {
  const bool was = loading_;
  loading_ = true;
  const DataFileSpec& c = r->conv;
  const int d =
      c.dtype.empty() ? 0 : r->dtype->findText(qs(c.dtype == "float" ? "float32" : c.dtype));
  r->dtype->setCurrentIndex(std::max(0, d));
  r->scale->setValue(c.normalization.scale);
  r->mean->setValue(c.normalization.mean);
  r->std->setValue(c.normalization.std);
  QStringList dims;
  for (int64_t x : c.shape) dims << QString::number(x);
  r->reshape->setText(c.scalarSamples ? QStringLiteral("[]") : dims.join(QStringLiteral(",")));
  r->oneHot->setValue(int(c.oneHot));
  r->imageH->setValue(int(c.imageHeight));
  r->imageW->setValue(int(c.imageWidth));
  r->imageChannels->setCurrentIndex(c.imageChannels == 1 ? 1 : c.imageChannels == 3 ? 2 : 0);
  loading_ = was;
}

void DataPanel::widgetsToConversion(InputRow* r) {
  DataFileSpec& c = r->conv;
  c.dtype = r->dtype->currentIndex() == 0 ? std::string() : r->dtype->currentText().toStdString();
  c.normalization.scale = r->scale->value();
  c.normalization.mean = r->mean->value();
  c.normalization.std = r->std->value() == 0 ? 1.0 : r->std->value();
  c.shape.clear();
  // "[]": one value a sample (labels stored [N, 1]); brackets around a list are read too.
  const QString text = r->reshape->text().trimmed();
  c.scalarSamples = text == QStringLiteral("[]");
  for (const QString& part : QString(text)
                                 .remove(QLatin1Char('['))
                                 .remove(QLatin1Char(']'))
                                 .split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    bool ok = false;
    const qlonglong v = part.trimmed().toLongLong(&ok);
    if (ok && v > 0) c.shape.push_back(v);
  }
  c.oneHot = r->oneHot->value();
}

void DataPanel::updateFit(InputRow* r) {
  // The other splits' files are checked against what this one's conversion makes of them.
  for (Split s : {kValidation, kTest}) updateSplitFit(r, s);
  r->convert->setEnabled(false);
  r->changeInput->setEnabled(false);
  if (!r->summary) {
    r->fit->clear();
    r->convert->hide();
    r->changeInput->hide();
    return;
  }
  const QString misfit = this->misfit(r);
  const Proposal p = proposeConversion(*r->summary, r->conv, r->input);
  QString text;
  if (misfit.isEmpty()) {
    text = QStringLiteral("<span style='color:#1b7a30'>✔ %1</span>")
               .arg(tr("Fits input '%1' (%2).").arg(qs(r->input.name), qs(r->input.typeText)));
    if (p.changes && p.fits)
      text += QStringLiteral("<br>") + tr("Suggested: %1").arg(qs(p.message));
  } else {
    text = QStringLiteral("<span style='color:#b00020'>✘ %1.</span>").arg(misfit.toHtmlEscaped());
    if (p.fits && p.changes)
      text += QStringLiteral("<br>") + tr("Proposed: %1").arg(qs(p.message).toHtmlEscaped());
  }
  if (const QString hint = lossHint(r); !hint.isEmpty())
    text += QStringLiteral("<br><i>%1</i>").arg(hint.toHtmlEscaped());
  r->fit->setText(text);
  r->convert->setVisible(p.changes);
  r->convert->setEnabled(p.changes && p.fits);
  // Only an Input node's type can change; a target's type comes from its loss.
  bool isInputNode = false;
  for (const auto& [id, n] : model_->graph().nodes()) {
    const NodeSpec* s = model_->graph().spec(n);
    if (s && s->kind == NodeKind::GraphInput && n.name == r->input.name) isInputNode = true;
  }
  const std::string type = inputTypeForData(r);
  const bool canChange = isInputNode && !misfit.isEmpty() && type != r->input.typeText;
  r->changeInput->setVisible(canChange);
  r->changeInput->setEnabled(canChange);
  const auto data = parseInputType(p.inputTypeForData);
  r->changeInput->setToolTip(
      data && data->first != r->input.dtype
          ? tr("Set input '%1' to %2 and convert the data to %3")
                .arg(qs(r->input.name), qs(type), qs(dw::engine::dtypeName(r->input.dtype)))
          : tr("Set input '%1' to %2").arg(qs(r->input.name), qs(type)));
}

QString DataPanel::misfit(const InputRow* r) const {
  if (!r->summary) return QString();
  const std::string m = checkFit(*r->summary, r->conv, r->input);
  if (m.empty()) return QString();
  // checkFit names the dtype first even where the shapes differ too; then "convert the dtype" is
  // the wrong advice: converting leaves a shape the input cannot take, and Convert cannot fix
  // it. Where no conversion makes the data fit, the shape is what to name.
  const Proposal p = proposeConversion(*r->summary, r->conv, r->input);
  const auto data = parseInputType(p.inputTypeForData);
  if (p.fits || !data || data->first == r->input.dtype) return qs(m);
  DataInput sameType = r->input;
  sameType.dtype = data->first;
  if (checkFit(*r->summary, r->conv, sameType).empty()) return qs(m);  // the dtype alone
  const Shape want =
      r->input.shape.empty() ? Shape() : Shape(r->input.shape.begin() + 1, r->input.shape.end());
  return tr("%1 gives %2 but input '%3' takes %4: the shapes differ (each sample is %5, the input "
            "takes %6); change the Input to %7")
      .arg(QFileInfo(qs(r->summary->path)).fileName(), qs(p.inputTypeForData), qs(r->input.name),
           qs(r->input.typeText), sampleText(data->second), sampleText(want),
           qs(inputTypeForData(r)));
}

std::string DataPanel::inputTypeForData(const InputRow* r) const {
  const Proposal p = proposeConversion(*r->summary, r->conv, r->input);
  // The data's shape, in the Input's own float type where the data converts to it (pixels:
  // scaled by 1/255): the layers after an Input take float, and an Input retyped to uint8 only
  // moved the error onto them. Class labels keep their integer type (a sparse loss wants it).
  const auto data = parseInputType(p.inputTypeForData);
  if (!data || r->summary->isLabels() || !dw::engine::isFloating(r->input.dtype) ||
      data->first == DType::kString || data->first == DType::kBool ||
      data->first == DType::kUndefined)
    return p.inputTypeForData;
  return inputTypeText(r->input.dtype, data->second);
}

QString DataPanel::lossHint(const InputRow* r) const {
  // Class indices fed as the target of a loss that compares values (the default
  // MeanSquaredError): a new user's model then trains on the wrong objective. Say so where the
  // labels are chosen; the fix is one choice in Output Train's parameters.
  if (!r->summary || !r->summary->isLabels() || r->summary->labelCounts.size() < 2 ||
      r->conv.oneHot > 0)
    return QString();
  const Graph& g = model_->graph();
  NodeId input = 0;
  for (const auto& [id, n] : g.nodes())
    if (n.name == r->input.name && g.spec(n) && g.spec(n)->kind == NodeKind::GraphInput) input = id;
  if (!input) return QString();
  for (const Link& l : g.links()) {
    if (l.from.node != input || l.to.port != 1) continue;
    const Node* out = g.node(l.to.node);
    if (!out || out->type != "Output Train") continue;
    const auto loss = g.param(out->id, "loss");
    const std::string name = loss ? loss->asString() : std::string();
    if (name.find("Sparse") != std::string::npos || name == "BinaryCrossentropy") continue;
    return tr("These are class indices (%1 classes), but Output Train '%2' uses %3, which "
              "compares values: choose SparseCategoricalCrossentropy in its Parameters (with "
              "from_logits when its last layer has no softmax).")
        .arg(r->summary->labelCounts.size())
        .arg(qs(out->name), qs(name));
  }
  return QString();
}

void DataPanel::applyProposal(InputRow* r) {
  if (!r->summary) return;
  const Proposal p = proposeConversion(*r->summary, r->conv, r->input);
  const bool reinspect = p.spec.imageHeight != r->conv.imageHeight ||
                         p.spec.imageWidth != r->conv.imageWidth ||
                         p.spec.imageChannels != r->conv.imageChannels;
  r->conv = p.spec;
  conversionToWidgets(r);
  if (reinspect)
    inspect(r);
  else
    updateFit(r);
  changed();
}

void DataPanel::changeInput(InputRow* r) {
  if (!r->summary) return;
  const std::string type = inputTypeForData(r);
  for (const auto& [id, n] : model_->graph().nodes()) {
    const NodeSpec* s = model_->graph().spec(n);
    if (s && s->kind == NodeKind::GraphInput && n.name == r->input.name) {
      Status st = model_->setParam(id, "type", Param::makeString(type));
      if (!st.ok()) {
        r->fit->setText(QStringLiteral("<span style='color:#b00020'>%1</span>")
                            .arg(qs(st.message()).toHtmlEscaped()));
        return;
      }
      break;
    }
  }
  const QString name = qs(r->input.name);
  model_->validateNow();
  refreshInputs();
  // An Input that kept its float type takes the data once converted (uint8 pixels scaled by
  // 1/255): the same click does that, so the row ends ready rather than on a second misfit.
  r = row(name);  // the refresh may have dropped the row (an Input no longer read)
  if (r && r->summary && !misfit(r).isEmpty()) {
    const Proposal p = proposeConversion(*r->summary, r->conv, r->input);
    if (p.changes && p.fits) applyProposal(r);
  }
}

void DataPanel::computeNormalization(InputRow* r) {
  if (r->paths[kTrain].isEmpty()) return;
  DataFileSpec probe = r->conv;
  probe.path = r->paths[kTrain].toStdString();
  QApplication::setOverrideCursor(Qt::WaitCursor);
  auto n = dw::engine::training::computeNormalization(probe, baseDir_.toStdString(),
                                                      trainLimit_->value());
  QApplication::restoreOverrideCursor();
  if (!n.ok()) {
    r->fit->setText(QStringLiteral("<span style='color:#b00020'>%1</span>")
                        .arg(qs(n.message()).toHtmlEscaped()));
    return;
  }
  r->conv.normalization = *n;
  conversionToWidgets(r);
  updateFit(r);
  changed();
}

void DataPanel::changed() {
  if (loading_) return;
  updateSummary();
  // The kept copy of the sources is the rows' own now, with those of inputs not on the canvas
  // (a row built again later starts from what was last chosen, not from what the file had).
  const DatasetSpec now = spec();
  {
    DatasetSpec kept = now;
    auto shown = [&](const std::string& name) {
      return std::any_of(rows_.begin(), rows_.end(),
                         [&](const auto& r) { return r && r->input.name == name; });
    };
    for (auto [from, to] : {std::pair{&spec_.train, &kept.train},
                            {&spec_.validation, &kept.validation},
                            {&spec_.test, &kept.test}})
      for (const auto& f : *from)
        if (!shown(f.input)) to->push_back(f);
    spec_ = std::move(kept);
  }
  // A step on the undo stack: Ctrl+Z after a data edit took back the graph edit before it.
  if (specText(now) != specText(committed_)) {
    model_->undoStack()->push(new DataSpecCommand(this, committed_, now));
    committed_ = now;
  }
  emit specChanged();
}

void DataPanel::updateSummary() {
  int64_t n = -1;
  for (auto& r : rows_)
    if (r->summary) n = n < 0 ? r->summary->samples : std::min(n, r->summary->samples);
  if (n < 0) {
    summary_->setText(tr("<i>No train source yet.</i>"));
    return;
  }
  if (trainLimit_->value() > 0) n = std::min<int64_t>(n, trainLimit_->value());
  const double vs = valMode_->currentIndex() == kFraction ? valFraction_->value() : 0;
  const double ts = testMode_->currentIndex() == kFraction ? testFraction_->value() : 0;
  const SplitSizes s = splitSizes(n, vs, ts);
  auto count = [](int64_t v) { return QLocale().toString(qlonglong(v)); };
  QString text = tr("Train %1").arg(count(s.train));
  text += tr(" · validation %1")
              .arg(valMode_->currentIndex() == kOwnFiles   ? tr("own sources")
                   : valMode_->currentIndex() == kFraction ? count(s.validation)
                                                           : tr("none"));
  text += tr(" · test %1")
              .arg(testMode_->currentIndex() == kOwnFiles   ? tr("own sources")
                   : testMode_->currentIndex() == kFraction ? count(s.test)
                                                            : tr("none"));
  if (const QString counts = sampleCountProblem(); !counts.isEmpty())
    text += QStringLiteral("<br><span style='color:#b00020'>%1</span>").arg(counts.toHtmlEscaped());
  summary_->setText(text);
}

DatasetSpec DataPanel::spec() const {
  DatasetSpec d;
  d.trainLimit = trainLimit_->value();
  if (valMode_->currentIndex() == kFraction) d.validationSplit = valFraction_->value();
  if (testMode_->currentIndex() == kFraction) d.testSplit = testFraction_->value();
  for (const auto& r : rows_) {
    auto add = [&](Split s, std::vector<DataFileSpec>& to) {
      if (r->paths[s].isEmpty()) return;
      DataFileSpec f = r->conversion(s);
      f.input = r->input.name;
      f.path = r->paths[s].toStdString();
      if (s != kTrain) f.format = r->formats[s];
      to.push_back(std::move(f));
    };
    add(kTrain, d.train);
    if (valMode_->currentIndex() == kOwnFiles) add(kValidation, d.validation);
    if (testMode_->currentIndex() == kOwnFiles) add(kTest, d.test);
  }
  return d;
}

QString DataPanel::readiness() const {
  if (rows_.empty()) return tr("the graph has no data inputs");
  QStringList missing, misfit;
  QStringList missingSplit;
  for (const auto& r : rows_) {
    if (r->paths[kTrain].isEmpty())
      missing << qs(r->input.name);
    else if (!r->error.isEmpty())
      misfit << tr("%1: %2").arg(qs(r->input.name), r->error);
    else if (const QString m = this->misfit(r.get()); !m.isEmpty())
      misfit << m;
    // A split with files of its own needs one for every input, like train, and files that hold
    // what the train source holds.
    for (Split split : {kValidation, kTest}) {
      if (!hasOwnFiles(split)) continue;
      if (r->paths[split].isEmpty())
        missingSplit << tr("a %1 source for %2").arg(splitName(split).toLower(), qs(r->input.name));
      else if (const QString m = splitMisfit(r.get(), split); !m.isEmpty())
        misfit << tr("%1: %2").arg(qs(r->input.name), m);
    }
  }
  if (!missing.isEmpty())
    return tr("choose a train source for %1 in the Data panel").arg(missing.join(tr(", ")));
  if (!missingSplit.isEmpty())
    return tr("choose %1 in the Data panel (a split with files of its own needs one for every "
              "input), or take the split as a fraction of train")
        .arg(missingSplit.join(tr(", ")));
  // A source still being read is not held against training: the trainer reads it anyway and
  // says what is wrong with it.
  if (const QString counts = sampleCountProblem(); !counts.isEmpty()) misfit << counts;
  if (!misfit.isEmpty()) return misfit.join(QStringLiteral("; "));
  return QString();
}

DataPanel::InputRow* DataPanel::row(const QString& input) const {
  for (const auto& r : rows_)
    if (qs(r->input.name) == input) return r.get();
  return nullptr;
}
QLineEdit* DataPanel::pathEdit(const QString& input, Split split) const {
  auto* r = row(input);
  return r ? r->path[split] : nullptr;
}
QPushButton* DataPanel::browseButton(const QString& input, Split split) const {
  auto* r = row(input);
  return r ? r->browse[split] : nullptr;
}
QPushButton* DataPanel::splitConvertButton(const QString& input, Split split) const {
  auto* r = row(input);
  return r ? r->splitConvert[split] : nullptr;
}
QLabel* DataPanel::splitNoteLabel(const QString& input, Split split) const {
  auto* r = row(input);
  return r ? r->splitNote[split] : nullptr;
}
QLabel* DataPanel::splitPreviewLabel(const QString& input, Split split) const {
  auto* r = row(input);
  return r ? r->splitPreview[split] : nullptr;
}
QPushButton* DataPanel::convertButton(const QString& input) const {
  auto* r = row(input);
  return r ? r->convert : nullptr;
}
QPushButton* DataPanel::changeInputButton(const QString& input) const {
  auto* r = row(input);
  return r ? r->changeInput : nullptr;
}
QLabel* DataPanel::fitLabel(const QString& input) const {
  auto* r = row(input);
  return r ? r->fit : nullptr;
}
QLabel* DataPanel::infoLabel(const QString& input) const {
  auto* r = row(input);
  return r ? r->info : nullptr;
}
QLabel* DataPanel::previewLabel(const QString& input) const {
  auto* r = row(input);
  return r ? r->preview : nullptr;
}
QPushButton* DataPanel::computeNormButton(const QString& input) const {
  auto* r = row(input);
  return r ? r->computeNorm : nullptr;
}
QComboBox* DataPanel::csvLabelColumnBox(const QString& input) const {
  auto* r = row(input);
  return r ? r->csvLabel : nullptr;
}
QComboBox* DataPanel::csvTakeBox(const QString& input) const {
  auto* r = row(input);
  return r ? r->csvTake : nullptr;
}
QLineEdit* DataPanel::csvFeatureColumnsEdit(const QString& input) const {
  auto* r = row(input);
  return r ? r->csvFeatures : nullptr;
}
QComboBox* DataPanel::imageTakeBox(const QString& input) const {
  auto* r = row(input);
  return r ? r->imageTake : nullptr;
}
QSpinBox* DataPanel::imageSizeBox(const QString& input, bool width) const {
  auto* r = row(input);
  return r ? (width ? r->imageW : r->imageH) : nullptr;
}
QStringList DataPanel::inputNames() const {
  QStringList names;
  for (const auto& r : rows_) names << qs(r->input.name);
  return names;
}

}  // namespace dw::studio
