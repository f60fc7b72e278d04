#include "app/studio/welcome_page.h"

#include <QCoreApplication>
#include <QDir>
#include <QDragEnterEvent>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMimeData>
#include <QResizeEvent>
#include <QScopeGuard>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

#include "app/studio/data_panel.h"
#include "app/studio/graph_scene.h"
#include "app/studio/graph_view.h"
#include "app/studio/main_window.h"
#include "app/studio/style.h"
#include "app/studio/training_panel.h"
#include "engine/training/data_source.h"

namespace dw::studio {

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

// The page sits where the dark canvas will be, so it uses the canvas's colours: opening a
// document then changes what is on the canvas, not the look of the window.
QString pageStyle() {
  const QString canvas = style::canvas().name();
  const QString card = style::nodeBody().name();
  const QString accent = style::selection().name();
  const QString dim = style::dimText().name();
  return QStringLiteral(
             "#welcomeContent, QScrollArea#welcomeScroll, QWidget#welcomeViewport "
             "{ background: %1; }"
             "QLabel { color: %4; background: transparent; }"
             "QLabel#welcomeTitle { color: white; font-size: 22pt; font-weight: 600; }"
             "QLabel#welcomeTagline { color: %4; font-size: 12pt; }"
             "QLabel#sectionTitle { color: %3; font-size: 10pt; font-weight: 700; "
             "  letter-spacing: 1px; }"
             "QLabel#sectionHint { color: %4; font-size: 9pt; }"
             "QLabel#cardTitle { color: white; font-size: 11pt; font-weight: 600; }"
             "QLabel#cardDetail { color: %4; font-size: 9pt; }"
             "QLabel#welcomeTip { color: %4; font-size: 9pt; }"
             "QPushButton[welcomeCard=\"true\"] { background: %2; border: 1px solid #4a4f59; "
             "  border-radius: 8px; text-align: left; }"
             "QPushButton[welcomeCard=\"true\"]:hover { border: 1px solid %3; "
             "  background: #414650; }"
             "QPushButton[welcomeCard=\"true\"]:pressed { background: #2f3239; }"
             "QPushButton[welcomeCard=\"true\"]:focus { border: 1px solid %3; }")
      .arg(canvas, card, accent, dim);
}

// What each shipped example is, in a line; other projects found there get their node count.
QString exampleTitle(const QString& fileName) {
  static const std::map<QString, QString> titles = {
      {QStringLiteral("fashion_mnist_mlp.dwproj"), QObject::tr("Fashion-MNIST MLP")},
      {QStringLiteral("fashion_mnist_cnn.dwproj"), QObject::tr("Fashion-MNIST CNN")},
  };
  if (auto it = titles.find(fileName); it != titles.end()) return it->second;
  QString t = QFileInfo(fileName).completeBaseName().replace(QLatin1Char('_'), QLatin1Char(' '));
  if (!t.isEmpty()) t[0] = t[0].toUpper();
  return t;
}
QString exampleDetail(const QString& fileName) {
  if (fileName == QStringLiteral("fashion_mnist_mlp.dwproj"))
    return QObject::tr("Three dense layers on 28×28 clothing images. Press Fit.");
  if (fileName == QStringLiteral("fashion_mnist_cnn.dwproj"))
    return QObject::tr("Conv, BatchNorm and MaxPool blocks, then dense layers. Press Fit.");
  return QObject::tr("An example project");
}

// The column of a CSV table that holds the class: one named like a label, else the last.

QString dimsText(const std::vector<int64_t>& dims) {
  QStringList parts;
  for (int64_t d : dims) parts << QString::number(d);
  return parts.join(QLatin1Char(','));
}

}  // namespace

// ---------------------------------------------------------------------------- examples

QStringList findExamples() {
  QStringList dirs;
  if (const QString env = qEnvironmentVariable("DEEPWIRE_EXAMPLES"); !env.isEmpty()) dirs << env;
  // A build tree (build/app/studio, build-x/app/studio/tests) sits inside the source tree, so
  // walking up from the executable reaches resources/examples; an install keeps them in share/.
  QDir d(QCoreApplication::applicationDirPath());
  dirs << d.absoluteFilePath(QStringLiteral("../share/deepwire/examples"));
  for (int up = 0; up < 6; ++up) {
    dirs << d.absoluteFilePath(QStringLiteral("resources/examples"));
    if (!d.cdUp()) break;
  }
  dirs << QDir::current().absoluteFilePath(QStringLiteral("resources/examples"));
  for (const QString& dir : dirs) {
    const QDir examples(dir);
    const QStringList files =
        examples.entryList({QStringLiteral("*.dwproj")}, QDir::Files, QDir::Name);
    if (files.isEmpty()) continue;
    QStringList out;
    for (const QString& f : files) out << QDir::cleanPath(examples.absoluteFilePath(f));
    // The MLP first: it is the one the quick start and scripts/run begin with.
    std::stable_sort(out.begin(), out.end(), [](const QString& a, const QString& b) {
      return a.endsWith(QStringLiteral("_mlp.dwproj")) &&
             !b.endsWith(QStringLiteral("_mlp.dwproj"));
    });
    return out;
  }
  return {};
}

// ---------------------------------------------------------------------------- templates

QString buildClassifier(MainWindow& w, ClassifierTemplate kind, const TemplateSource& source) {
  using namespace dw::engine::training;
  const bool cnn = kind == ClassifierTemplate::kCnn;
  const QString samplesPath = QFileInfo(source.samples).absoluteFilePath();

  // 1. What the data holds: the per-sample shape, and the classes from the labels.
  auto format = detectFormat(samplesPath.toStdString());
  if (!format.ok()) return qs(format.message());
  DataFileSpec sampleSpec;
  sampleSpec.path = samplesPath.toStdString();
  sampleSpec.format = *format;
  DataFileSpec labelSpec = sampleSpec;
  std::string csvLabel;
  if (*format == "csv") {
    if (cnn)
      return QObject::tr(
          "A CNN classifier learns from images: choose an image folder or an IDX/NPY file of "
          "images, or take the MLP classifier for a CSV table.");
    // The header names the columns; the label is the one named like it, else the last.
    auto header = readCsvHeader(sampleSpec.path);
    if (!header.ok()) return qs(header.message());
    csvLabel = guessLabelColumn(header->csvColumns);
    if (csvLabel.empty() && !header->csvColumns.empty()) csvLabel = header->csvColumns.back();
    sampleSpec.csvLabelColumn = csvLabel;
    labelSpec = sampleSpec;
    labelSpec.csvTakeLabel = true;
  } else if (*format == "images") {
    labelSpec.imageTakeLabel = true;  // the class index is the subfolder
  } else {
    if (source.labels.isEmpty())
      return QObject::tr("%1 holds the samples only: choose the file with their class labels too.")
          .arg(QFileInfo(samplesPath).fileName());
    labelSpec = DataFileSpec();
    labelSpec.path = QFileInfo(source.labels).absoluteFilePath().toStdString();
    auto lf = detectFormat(labelSpec.path);
    if (!lf.ok()) return qs(lf.message());
    labelSpec.format = *lf;
  }
  // The samples' type is in their header; the labels are read whole, for their classes.
  auto samples = storedType(sampleSpec, "");
  if (!samples.ok()) return qs(samples.message());
  auto labels = inspectSource(labelSpec, "");
  if (!labels.ok()) return qs(labels.message());
  const int64_t classes = int64_t(std::max(labels->labelCounts.size(), labels->classes.size()));
  if (!labels->isLabels() || classes < 2)
    return QObject::tr(
               "%1 holds no class labels (integers 0..K-1 with K of at least 2): choose the file "
               "of class labels that goes with the samples.")
        .arg(QFileInfo(qs(labels->path)).fileName());
  if (labels->samples != samples->samples)
    return QObject::tr("%1 has %2 samples but %3 has %4 labels: they must be the same data set.")
        .arg(QFileInfo(samplesPath).fileName())
        .arg(samples->samples)
        .arg(QFileInfo(qs(labels->path)).fileName())
        .arg(labels->samples);

  // 2. The Input takes one sample as float; a CNN needs channels first.
  std::vector<int64_t> shape(samples->sampleShape.begin(), samples->sampleShape.end());
  if (*format == "images" && shape.size() == 3) {
    // Photos get resized (the Data panel proposes it): a 1000x800 image would make the first
    // Dense layer huge, and a template should train in seconds.
    const int64_t longest = std::max(shape[1], shape[2]), cap = 64;
    if (longest > cap) {
      shape[1] = std::max<int64_t>(1, shape[1] * cap / longest);
      shape[2] = std::max<int64_t>(1, shape[2] * cap / longest);
    }
  }
  if (cnn) {
    if (shape.size() == 2) shape.insert(shape.begin(), 1);  // [H,W] grey images: one channel
    if (shape.size() != 3 || shape[0] > 4)
      return QObject::tr(
                 "%1 holds samples of shape [%2], not images: a CNN classifier needs [H,W] or "
                 "[C,H,W] per sample (channels first). Try the MLP classifier.")
          .arg(QFileInfo(samplesPath).fileName())
          .arg(dimsText(samples->sampleShape));
    if (std::min(shape[1], shape[2]) < 4)
      return QObject::tr("%1 holds %2x%3 images: a CNN classifier needs at least 4x4.")
          .arg(QFileInfo(samplesPath).fileName())
          .arg(shape[1])
          .arg(shape[2]);
  }
  if (shape.empty()) shape.push_back(1);  // one value per sample

  // 3. The graph: one undo step, on a new document.
  w.newDocument();
  GraphModel* m = w.model();
  QString failure;
  std::vector<dw::NodeId> chain;  // left to right along the main row
  auto make = [&](const char* domain, const char* type) -> dw::NodeId {
    if (!failure.isEmpty()) return 0;
    auto id = m->createNode(domain, type, {double(chain.size()) * 300.0, 0.0});
    if (!id.ok()) {
      failure = qs(id.message());
      return 0;
    }
    return *id;
  };
  auto set = [&](dw::NodeId id, const char* name, dw::Param value) {
    if (!failure.isEmpty()) return;
    if (Status st = m->setParam(id, name, value); !st.ok()) failure = qs(st.message());
  };
  auto link = [&](dw::NodeId from, dw::NodeId to, int port) {
    if (!failure.isEmpty()) return;
    if (Status st = m->connectPorts({{from, 0}, {to, port}}); !st.ok()) failure = qs(st.message());
  };
  auto next = [&](const char* domain, const char* type) {
    const dw::NodeId id = make(domain, type);
    if (id && !chain.empty()) link(chain.back(), id, 0);
    if (id) chain.push_back(id);
    return id;
  };

  // The graph and its data (the Data panel's changes are undo steps too) are one undo step.
  m->undoStack()->beginMacro(cnn ? QObject::tr("CNN classifier template")
                                 : QObject::tr("MLP classifier template"));
  bool macroOpen = true;
  auto endMacro = [&] {
    if (macroOpen) m->undoStack()->endMacro();
    macroOpen = false;
  };
  const auto closeMacro = qScopeGuard(endMacro);
  const bool images = shape.size() >= 2;
  const dw::NodeId input = next("deepwire", "Input");
  if (input) {
    if (Status st = m->rename(input, images ? "image" : "features"); !st.ok())
      failure = qs(st.message());
  }
  set(input, "type", dw::Param::makeString(inputTypeText(dw::engine::DType::kFloat, shape)));
  if (cnn) {
    // Two blocks of convolution and pooling where the image is big enough for both.
    const int blocks = std::min(shape[1], shape[2]) >= 8 ? 2 : 1;
    for (int b = 0; b < blocks; ++b) {
      const dw::NodeId conv = next("deepwire.layers", "Conv2D");
      set(conv, "filters", dw::Param::makeInt(b == 0 ? 32 : 64));
      set(conv, "kernel_size", dw::Param::makeInts({3}));
      set(conv, "padding", dw::Param::makeString("same"));
      set(conv, "activation", dw::Param::makeString("relu"));
      set(conv, "kernel_initializer", dw::Param::makeString("he_uniform"));
      set(conv, "seed", dw::Param::makeInt(b + 1));
      next("deepwire.layers", "MaxPool2D");
    }
  }
  if (shape.size() >= 2) next("deepwire.layers", "Flatten");
  const dw::NodeId hidden = next("deepwire.layers", "Dense");
  set(hidden, "units", dw::Param::makeInt(128));
  set(hidden, "activation", dw::Param::makeString("relu"));
  set(hidden, "kernel_initializer", dw::Param::makeString("he_uniform"));
  set(hidden, "seed", dw::Param::makeInt(11));
  const dw::NodeId logits = next("deepwire.layers", "Dense");
  set(logits, "units", dw::Param::makeInt(classes));
  set(logits, "seed", dw::Param::makeInt(12));
  const dw::NodeId out = next("deepwire.layers", "Output Train");
  set(out, "loss", dw::Param::makeString("SparseCategoricalCrossentropy"));
  set(out, "from_logits", dw::Param::makeBool(true));
  const dw::NodeId label = make("deepwire", "Input");
  if (label) {
    if (Status st = m->rename(label, "label"); !st.ok()) failure = qs(st.message());
  }
  set(label, "type", dw::Param::makeString("int64[N]"));
  const dw::NodeId accuracy = make("deepwire.metrics", "SparseCategoricalAccuracy");
  link(label, out, 1);
  link(logits, accuracy, 0);
  link(label, accuracy, 1);

  // Left to right by the nodes' drawn widths, the label and the metric on a row below, under
  // the logits and the output they belong to.
  if (failure.isEmpty()) {
    std::map<dw::NodeId, dw::Position> to;
    std::map<dw::NodeId, double> column;
    double x = 0, rowHeight = 0;
    constexpr double kGap = 70;
    for (dw::NodeId id : chain) {
      const NodeItem* item = w.scene()->nodeItem(id);
      const QRectF r = item ? item->boundingRect() : QRectF(0, 0, 200, 80);
      to[id] = {x, 0};
      column[id] = x;
      x += r.width() + kGap;
      rowHeight = std::max(rowHeight, r.height());
    }
    const double below = std::ceil((rowHeight + 90) / GraphScene::kGrid) * GraphScene::kGrid;
    to[label] = {column[logits], below};
    to[accuracy] = {column[out], below};
    if (Status st = m->moveNodes(to); !st.ok()) failure = qs(st.message());
  }
  if (failure.isEmpty()) {
    m->validateNow();
    if (!m->problems().empty()) failure = qs(m->problems().front().message);
  }
  if (!failure.isEmpty()) {
    endMacro();
    w.newDocument();
    return QObject::tr("The template could not be built: %1").arg(failure);
  }
  w.view()->fitToView(GraphView::kReadableZoom);

  // 4. The data, through the Data panel as a user gives it, accepting what it proposes.
  DataPanel* data = w.training()->dataPanel();
  data->refreshInputs();
  const QString inputName = images ? QStringLiteral("image") : QStringLiteral("features");
  // The panel reads sources in the background; each step waits for its reading to finish.
  // User input stays queued meanwhile, so no click can start a second template halfway.
  auto settle = [data] {
    QElapsedTimer t;
    t.start();
    while (data->busy() && t.elapsed() < 120'000)
      QCoreApplication::processEvents(QEventLoop::ExcludeUserInputEvents, 20);
  };
  auto give = [&](const QString& name, const QString& path) {
    QLineEdit* e = data->pathEdit(name);
    if (!e) return false;
    e->setText(path);
    emit e->editingFinished();
    settle();
    return true;
  };
  auto choose = [&](QComboBox* box, int index) {
    if (!box || index < 0) return;
    box->setCurrentIndex(index);
    emit box->activated(index);
    settle();
  };
  auto convert = [&](const QString& name) {
    // A resize re-reads the images, after which the panel may propose the rest (a reshape).
    for (int i = 0; i < 3; ++i) {
      QPushButton* b = data->convertButton(name);
      if (!b || !b->isEnabled()) break;
      b->click();
      settle();
    }
  };
  if (!give(inputName, samplesPath) || !give(QStringLiteral("label"), qs(labelSpec.path)))
    return QObject::tr("The Data panel has no rows for the template's inputs.");
  if (*format == "csv") {
    for (const QString& name : {inputName, QStringLiteral("label")}) {
      QComboBox* col = data->csvLabelColumnBox(name);
      if (col) choose(col, col->findText(qs(csvLabel)));
    }
    choose(data->csvTakeBox(QStringLiteral("label")), 1);
  } else if (*format == "images") {
    choose(data->imageTakeBox(QStringLiteral("label")), 1);
  }
  convert(inputName);
  convert(QStringLiteral("label"));
  // Hold out a tenth for the per-epoch validation curve (dealt across the whole source, so an
  // image folder read class by class still validates on every class).
  data->splitModeBox(DataPanel::kValidation)->setCurrentIndex(DataPanel::kFraction);
  data->splitFractionBox(DataPanel::kValidation)->setValue(0.1);
  // Settings that train a fresh classifier well without tuning (Keras' defaults for Adam).
  TrainingPanel* panel = w.training();
  panel->optimizerBox()->setCurrentText(QStringLiteral("adam"));
  panel->learningRateBox()->setValue(0.001);
  panel->batchSizeBox()->setValue(samples->samples >= 2000 ? 64 : 16);
  if (const QString why = data->readiness(); !why.isEmpty())
    return QObject::tr("The graph is built, but its data needs a look in the Data panel: %1")
        .arg(why);
  return QString();
}

// ---------------------------------------------------------------------------- widgets

WelcomeCard::WelcomeCard(const QString& title, const QString& detail, Detail mode, QWidget* parent)
    : QPushButton(parent), title_(title), detail_(detail), mode_(mode) {
  setProperty("welcomeCard", true);
  setCursor(Qt::PointingHandCursor);
  setAccessibleName(title);
  setToolTip(detail);
  titleLabel_ = new QLabel(title, this);
  titleLabel_->setObjectName(QStringLiteral("cardTitle"));
  detailLabel_ = new QLabel(detail, this);
  detailLabel_->setObjectName(QStringLiteral("cardDetail"));
  for (QLabel* l : {titleLabel_, detailLabel_}) {
    l->setWordWrap(mode == Detail::kWrap);
    l->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    // The button takes the clicks; the labels only draw.
    l->setAttribute(Qt::WA_TransparentForMouseEvents);
    l->setTextInteractionFlags(Qt::NoTextInteraction);
  }
  // The labels are placed by hand (resizeEvent): a layout inside a button does not pass the
  // wrapped text's height for the card's width up to the column, and the text got clipped.
  QSizePolicy policy(QSizePolicy::Preferred, QSizePolicy::Fixed);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
}

QSize WelcomeCard::sizeHint() const {
  const int w = width() > 50 ? width() : 260;
  return {260, heightForWidth(w)};
}

QSize WelcomeCard::minimumSizeHint() const {
  return {180, heightForWidth(width() > 50 ? width() : 260)};
}

int WelcomeCard::textHeight(const QLabel* label, const QString& text, int inner) const {
  label->ensurePolished();  // the style sheet sets the font
  const int line = label->fontMetrics().height();
  if (mode_ == Detail::kElide) return line;
  const QRect r =
      label->fontMetrics().boundingRect(QRect(0, 0, inner, 10000), Qt::TextWordWrap, text);
  return std::max(line, r.height());
}

int WelcomeCard::heightForWidth(int width) const {
  const int inner = std::max(40, width - 2 * kPadX);
  return kPadTop + textHeight(titleLabel_, title_, inner) + kGap +
         textHeight(detailLabel_, detail_, inner) + kPadBottom;
}

void WelcomeCard::resizeEvent(QResizeEvent* e) {
  QPushButton::resizeEvent(e);
  const int inner = std::max(40, e->size().width() - 2 * kPadX);
  const int titleH = textHeight(titleLabel_, title_, inner);
  // A file's name is cut in its middle, where its start and extension both stay; a template's
  // or an example's title wraps ("Fashion…IST MLP" said less than "Fashion-MNIST / MLP").
  if (mode_ == Detail::kElide) {
    titleLabel_->setText(titleLabel_->fontMetrics().elidedText(title_, Qt::ElideMiddle, inner));
    detailLabel_->setText(detailLabel_->fontMetrics().elidedText(detail_, Qt::ElideMiddle, inner));
  }
  titleLabel_->setGeometry(kPadX, kPadTop, inner, titleH);
  detailLabel_->setGeometry(kPadX, kPadTop + titleH + kGap, inner,
                            textHeight(detailLabel_, detail_, inner));
  // The height follows the width: the explanation wraps to more or fewer lines.
  const int h = heightForWidth(e->size().width());
  if (h != height()) setFixedHeight(h);
}

void WelcomeCard::changeEvent(QEvent* e) {
  QPushButton::changeEvent(e);
  // Polishing applies the style sheet's fonts: measure again then.
  if (e->type() == QEvent::StyleChange || e->type() == QEvent::FontChange)
    setFixedHeight(heightForWidth(width() > 50 ? width() : 260));
}

WelcomePage::WelcomePage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("welcomePage"));
  setAcceptDrops(true);
  setStyleSheet(pageStyle());
  lastDir_ = QSettings().value(QStringLiteral("dataPanel/lastDir")).toString();

  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea;
  scroll->setObjectName(QStringLiteral("welcomeScroll"));
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidgetResizable(true);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->viewport()->setObjectName(QStringLiteral("welcomeViewport"));
  outer->addWidget(scroll);

  auto* content = new QWidget;
  content->setObjectName(QStringLiteral("welcomeContent"));
  scroll->setWidget(content);
  auto* centre = new QHBoxLayout(content);
  centre->setContentsMargins(36, 16, 36, 12);
  auto* body = new QWidget;
  body->setMaximumWidth(1100);
  centre->addStretch(1);
  centre->addWidget(body, 20);
  centre->addStretch(1);

  auto* v = new QVBoxLayout(body);
  v->setContentsMargins(0, 0, 0, 0);
  v->setSpacing(4);
  auto* title = new QLabel(tr("deepwire studio"));
  title->setObjectName(QStringLiteral("welcomeTitle"));
  auto* tagline = new QLabel(
      tr("Wire a deep-learning model from nodes, give it data, train it, and export it to ONNX."));
  tagline->setObjectName(QStringLiteral("welcomeTagline"));
  tagline->setWordWrap(true);
  // The tip sits under the tagline: at the bottom of the page it was the first thing cut off in a
  // 1500x920 window.
  auto* tip =
      new QLabel(tr("Tip: drop a node from the Palette here to start an empty canvas with it. "
                    "View → Welcome Page brings this page back."));
  tip->setObjectName(QStringLiteral("welcomeTip"));
  tip->setWordWrap(true);
  v->addWidget(title);
  v->addWidget(tagline);
  v->addWidget(tip);
  v->addSpacing(12);

  // Three ways in side by side, each a short column of cards; recent files run below them.
  auto* columns = new QHBoxLayout;
  columns->setSpacing(22);
  v->addLayout(columns);
  auto column = [&](const QString& title, const QString& hint) {
    auto* c = new QVBoxLayout;
    c->setSpacing(8);
    columns->addLayout(c, 1);
    QVBoxLayout* cards = section(c, title, hint);
    c->addStretch(1);
    return cards;
  };
  QVBoxLayout* start = column(tr("START"), tr("An empty canvas, or a file of your own."));
  newCard_ = new WelcomeCard(tr("New empty canvas"),
                             tr("Drag nodes from the Palette on the left and wire them."));
  openCard_ = new WelcomeCard(tr("Open…"), tr("A deepwire project (.dwproj) or an ONNX model."));
  start->addWidget(newCard_);
  start->addWidget(openCard_);
  connect(newCard_, &QPushButton::clicked, this, &WelcomePage::newRequested);
  connect(openCard_, &QPushButton::clicked, this, [this] { emit openRequested(QString()); });

  QVBoxLayout* templates = column(tr("TEMPLATES"), tr("Built for your data, ready to Fit."));
  mlpCard_ = new WelcomeCard(
      tr("MLP classifier"),
      tr("Dense layers, one output per class. For an image folder, IDX/NPY files or a CSV table."));
  cnnCard_ = new WelcomeCard(
      tr("CNN classifier"),
      tr("Conv2D + MaxPool blocks, then Dense. For images: a folder or IDX/NPY files."));
  templates->addWidget(mlpCard_);
  templates->addWidget(cnnCard_);
  connect(mlpCard_, &QPushButton::clicked, this,
          [this] { emit templateRequested(ClassifierTemplate::kMlp); });
  connect(cnnCard_, &QPushButton::clicked, this,
          [this] { emit templateRequested(ClassifierTemplate::kCnn); });

  examples_ = column(tr("EXAMPLES"), tr("Fashion-MNIST projects, ready to Fit."));

  v->addSpacing(10);
  auto* recentColumn = new QVBoxLayout;
  QVBoxLayout* recentHost =
      section(recentColumn, tr("RECENT FILES"), tr("The projects you opened or saved last."));
  recent_ = new QGridLayout;
  recent_->setHorizontalSpacing(22);
  recent_->setVerticalSpacing(8);
  for (int c = 0; c < 3; ++c) recent_->setColumnStretch(c, 1);
  recentHost->addLayout(recent_);
  v->addLayout(recentColumn);
  v->addStretch(1);
  setRecentFiles({});
}

QVBoxLayout* WelcomePage::section(QVBoxLayout* column, const QString& title, const QString& hint) {
  auto* t = new QLabel(title);
  t->setObjectName(QStringLiteral("sectionTitle"));
  auto* h = new QLabel(hint);
  h->setObjectName(QStringLiteral("sectionHint"));
  h->setWordWrap(true);
  column->addWidget(t);
  column->addWidget(h);
  column->addSpacing(4);
  auto* cards = new QVBoxLayout;
  cards->setSpacing(8);
  column->addLayout(cards);
  return cards;
}

void WelcomePage::clearCards(QLayout* layout) {
  while (QLayoutItem* item = layout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
}

void WelcomePage::setExamples(const QStringList& paths) {
  clearCards(examples_);
  for (const QString& path : paths) {
    const QString name = QFileInfo(path).fileName();
    auto* card = new WelcomeCard(exampleTitle(name), exampleDetail(name));
    card->setProperty("path", path);
    card->setToolTip(path);
    examples_->addWidget(card);
    connect(card, &QPushButton::clicked, this, [this, path] { emit openRequested(path); });
  }
  if (paths.isEmpty()) {
    auto* none = new QLabel(tr("No examples found (they live in resources/examples)."));
    none->setObjectName(QStringLiteral("sectionHint"));
    examples_->addWidget(none);
  }
}

void WelcomePage::setRecentFiles(const QStringList& paths) {
  clearCards(recent_);
  constexpr int kShown = 6;  // two rows: the page stays one screen
  for (int i = 0; i < std::min<int>(kShown, int(paths.size())); ++i) {
    const QString path = paths[i];
    const QFileInfo info(path);
    auto* card = new WelcomeCard(info.fileName(), QDir::toNativeSeparators(info.absolutePath()),
                                 WelcomeCard::Detail::kElide);
    card->setProperty("path", path);
    card->setToolTip(path);
    card->setEnabled(info.exists());  // a moved or deleted project stays listed, greyed
    recent_->addWidget(card, i / 3, i % 3);
    connect(card, &QPushButton::clicked, this, [this, path] { emit openRequested(path); });
  }
  if (paths.isEmpty()) {
    auto* none = new QLabel(tr("Nothing yet: the projects you open or save appear here."));
    none->setObjectName(QStringLiteral("sectionHint"));
    recent_->addWidget(none, 0, 0, 1, 3);
  }
}

WelcomeCard* WelcomePage::exampleCard(const QString& fileName) const {
  for (int i = 0; i < examples_->count(); ++i)
    if (auto* c = qobject_cast<WelcomeCard*>(examples_->itemAt(i)->widget()))
      if (QFileInfo(c->property("path").toString()).fileName() == fileName) return c;
  return nullptr;
}

WelcomeCard* WelcomePage::templateCard(ClassifierTemplate kind) const {
  return kind == ClassifierTemplate::kMlp ? mlpCard_ : cnnCard_;
}

WelcomeCard* WelcomePage::recentCard(const QString& path) const {
  for (int i = 0; i < recent_->count(); ++i)
    if (auto* c = qobject_cast<WelcomeCard*>(recent_->itemAt(i)->widget()))
      if (c->property("path").toString() == path) return c;
  return nullptr;
}

std::optional<TemplateSource> WelcomePage::askTemplateSource(ClassifierTemplate kind) {
  QMenu menu(this);
  QAction* folder = menu.addAction(tr("An image folder (one subfolder of PNG/JPEG per class)…"));
  QAction* files = menu.addAction(tr("A data file and its labels file (IDX or NPY)…"));
  QAction* csv = kind == ClassifierTemplate::kMlp
                     ? menu.addAction(tr("A CSV table with a label column…"))
                     : nullptr;
  WelcomeCard* card = templateCard(kind);
  QAction* picked = menu.exec(card->mapToGlobal(QPoint(0, card->height())));
  if (!picked) return std::nullopt;

  QString start = lastDir_;
  if (start.isEmpty() && QFileInfo::exists(QStringLiteral("/usr/share/datasets")))
    start = QStringLiteral("/usr/share/datasets");  // where Debian's dataset packages go
  const QString what = kind == ClassifierTemplate::kMlp ? tr("MLP") : tr("CNN");
  TemplateSource s;
  if (picked == folder) {
    s.samples = QFileDialog::getExistingDirectory(
        this, tr("Image folder for the %1 classifier (one subfolder per class)").arg(what), start);
    s.labels = s.samples;
  } else if (picked == csv) {
    s.samples = QFileDialog::getOpenFileName(this, tr("CSV table for the MLP classifier"), start,
                                             tr("Tables (*.csv *.tsv);;All files (*)"));
    s.labels = s.samples;
  } else {
    Q_UNUSED(files);
    s.samples = QFileDialog::getOpenFileName(
        this, tr("Samples for the %1 classifier (images or features)").arg(what), start,
        tr("Data files (*.gz *ubyte* *.idx *.npy);;All files (*)"));
    if (s.samples.isEmpty()) return std::nullopt;
    s.labels = QFileDialog::getOpenFileName(
        this, tr("Class labels for %1").arg(QFileInfo(s.samples).fileName()),
        QFileInfo(s.samples).absolutePath(),
        tr("Data files (*.gz *ubyte* *.idx *.npy);;All files (*)"));
    if (s.labels.isEmpty()) return std::nullopt;
  }
  if (s.samples.isEmpty()) return std::nullopt;
  lastDir_ = QFileInfo(s.samples).absolutePath();
  QSettings().setValue(QStringLiteral("dataPanel/lastDir"), lastDir_);
  return s;
}

void WelcomePage::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasFormat(kNodeMimeType)) e->acceptProposedAction();
}

void WelcomePage::dragMoveEvent(QDragMoveEvent* e) {
  if (e->mimeData()->hasFormat(kNodeMimeType)) e->acceptProposedAction();
}

void WelcomePage::dropEvent(QDropEvent* e) {
  const QString key = QString::fromUtf8(e->mimeData()->data(kNodeMimeType));
  const int sep = key.indexOf(QStringLiteral("::"));
  if (sep < 0) return;
  e->acceptProposedAction();
  emit nodeDropped(key.left(sep), key.mid(sep + 2), e->position().toPoint());
}

}  // namespace dw::studio
