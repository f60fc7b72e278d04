#include "app/studio/training_panel.h"

#include <onnx/onnx_pb.h>

#include <unistd.h>
#include <QChart>
#include <QChartView>
#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGraphicsLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QRegularExpression>
#include <QScatterSeries>
#include <QSettings>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QVBoxLayout>
#include <QValueAxis>
#include <chrono>
#include <cmath>
#include <csignal>
#include <tuple>

#include "app/studio/params_panel.h"
#include "engine/backend.h"
#include "engine/session.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"

namespace dw::studio {

using namespace dw::engine::training;

namespace {

// How often a running Fit's steps go to the charts: a tiny model steps far faster than a chart
// can usefully redraw.
constexpr int kDrawEveryMs = 40;

// What Eval Step and Fit evaluate (LoadedData::evaluation): the validation data where the
// dataset has some, else its test data. Charts and summaries call it by that name.
QString evalSetName(const DatasetSpec& d) {
  return !d.validation.empty() || d.validationSplit > 0 ? QObject::tr("validation")
                                                        : QObject::tr("test");
}

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

// "1 epoch", "2 epochs": %n with (s) reads as "1 epoch(s)" without a translation loaded.
QString count(qint64 n, const QString& one, const QString& many) {
  return (n == 1 ? one : many).arg(n);
}

// The first metric that reads as an accuracy, else the first metric; NaN when there is none.
double headlineMetric(const std::map<std::string, double>& metrics) {
  for (const auto& [name, v] : metrics)
    if (name.find("acc") != std::string::npos) return v;
  return metrics.empty() ? std::nan("") : metrics.begin()->second;
}

// What the metric chart draws for an epoch's evaluation: its accuracy, else its first metric.
double evalMetric(const EpochReport& e) {
  return e.testAccuracy >= 0 ? e.testAccuracy : headlineMetric(e.testMetrics);
}

// An Eval Step's metrics are accumulated over the Eval Steps since the last reset; its batch's own
// value follows in parentheses.
QString formatResult(const char* what, const StepResult& r, bool accumulated = false) {
  QString text = QStringLiteral("<b>%1</b>: ").arg(what);
  QStringList parts;
  for (const auto& [name, v] : r.losses)
    parts << QStringLiteral("%1 = %2").arg(qs(name)).arg(v, 0, 'g', 6);
  if (r.regularization != 0)
    parts << QStringLiteral("regularization = %1").arg(r.regularization, 0, 'g', 5);
  for (const auto& [name, v] : r.metrics) {
    QString part = QStringLiteral("%1 = %2").arg(qs(name)).arg(v, 0, 'g', 5);
    auto b = r.batchMetrics.find(name);
    if (accumulated && b != r.batchMetrics.end())
      part += QObject::tr(" (this batch %1)").arg(b->second, 0, 'g', 5);
    parts << part;
  }
  if (r.gradNorm > 0) parts << QStringLiteral("grad norm = %1").arg(r.gradNorm, 0, 'g', 4);
  parts << QObject::tr("%1 samples").arg(r.samples);
  return text + parts.join(QStringLiteral(" · "));
}
}  // namespace

LogAxisRange niceLogRange(double lo, double hi, double pad) {
  LogAxisRange r;
  if (!(lo > 0) || !std::isfinite(hi) || hi < lo) return r;
  lo /= pad;  // a little air, so that a curve never runs along the frame
  hi *= pad;
  static const double kBases[] = {100,
                                  10,
                                  4,
                                  2,
                                  std::sqrt(2.0),
                                  std::pow(2.0, 1 / 4.0),
                                  std::pow(2.0, 1 / 8.0),
                                  std::pow(2.0, 1 / 16.0),
                                  std::pow(2.0, 1 / 32.0),
                                  std::pow(2.0, 1 / 64.0)};
  for (const double base : kBases) {
    const double k0 = std::floor(std::log(lo) / std::log(base) + 1e-9);
    const double k1 = std::ceil(std::log(hi) / std::log(base) - 1e-9);
    const int ticks = int(k1 - k0) + 1;
    r.base = base;
    // QLogValueAxis counts its ticks from the powers' logarithms rounded up: a hair past the
    // powers keeps both ends' ticks whatever the rounding of pow and log.
    r.min = std::pow(base, k0) * (1 - 1e-7);
    r.max = std::pow(base, k1) * (1 + 1e-7);
    r.labelledTicks = ticks;
    // Log paper's minor lines: 2..9 between powers of 10, the midpoint between powers of 2.
    r.minorTicks = base == 10 ? 8 : base == 4 ? 2 : base == 2 ? 1 : 0;
    if (ticks >= 4) break;
  }
  return r;
}

std::pair<double, double> robustRange(std::vector<double> values, bool ignoreOutliers, bool log) {
  std::vector<double> v;
  v.reserve(values.size());
  for (const double y : values)
    if (std::isfinite(y) && (!log || y > 0)) v.push_back(log ? std::log(y) : y);
  if (v.empty()) return {std::nan(""), std::nan("")};
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  double lo = *mn, hi = *mx;
  if (ignoreOutliers) {
    auto rank = [&v](double p) {
      const size_t k = size_t(std::max(1.0, std::ceil(p * double(v.size())))) - 1;
      std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
      return v[k];
    };
    const double q05 = rank(0.05), q95 = rank(0.95);
    // A fifth of the span, and at least a tenth of the values (a quarter more on a log axis):
    // where nearly every value is the same, a small bump is no outlier.
    const double pad = std::max(
        (q95 - q05) * 0.2, log ? std::log(1.25) : 0.1 * std::max(std::abs(q05), std::abs(q95)));
    lo = std::max(lo, q05 - pad);
    hi = std::min(hi, q95 + pad);
  }
  if (log) return {std::exp(lo), std::exp(hi)};
  return {lo, hi};
}

QString findDeepwireCli(QString* looked) {
  QStringList tried;
  const QString env = qEnvironmentVariable("DEEPWIRE_CLI");
  if (!env.isEmpty()) {
    // Asked for by name: no other one stands in for it silently.
    if (QFileInfo(env).isExecutable() && QFileInfo(env).isFile())
      return QFileInfo(env).absoluteFilePath();
    if (looked)
      *looked = QObject::tr("DEEPWIRE_CLI names %1, which is not an executable file").arg(env);
    return QString();
  }
  const QString here = QCoreApplication::applicationDirPath();
  // An installed pair shares a folder; a build tree has app/studio/ beside app/cli/.
  for (const QString& candidate :
       {here + QStringLiteral("/deepwire"), here + QStringLiteral("/../cli/deepwire")}) {
    const QFileInfo f(candidate);
    tried << QDir::cleanPath(candidate);
    if (f.isFile() && f.isExecutable()) return f.canonicalFilePath();
  }
  const QString onPath = QStandardPaths::findExecutable(QStringLiteral("deepwire"));
  if (!onPath.isEmpty()) return onPath;
  tried << QObject::tr("PATH");
  if (looked) *looked = tried.join(QStringLiteral(", "));
  return QString();
}

// ---------------------------------------------------------------------------- TrainingWorker

struct JobRequest {
  int job = 0;
  bool rebuild = false;
  std::shared_ptr<const Graph> graph;     // the canvas with the trained values carried in
  std::shared_ptr<const Graph> document;  // the canvas as it is (a rebuild's only)
  TrainOptions options;
  TrainingConfig config;
  std::string baseDir;
  std::shared_ptr<std::atomic<bool>> cancel;
  // A checkpoint directory the new trainer starts from (weights, optimizer state, counters):
  // the one Load Checkpoint names, or the one a Fit across processes left.
  std::string resumeFrom;
};

// Lives on the training thread and owns everything the engine touches there.
class TrainingWorker : public QObject {
 public:
  explicit TrainingWorker(TrainingPanel* panel) : panel_(panel) {}

  // Runs one job; every report reaches the panel through its event queue.
  void run(const JobRequest& req);
  Result<onnx::ModelProto> exportTraining(const Graph& g, const TrainOptions& o);
  void predict(const JobRequest& req);

 private:
  template <class F>
  void post(F f) {
    QMetaObject::invokeMethod(panel_, std::move(f), Qt::QueuedConnection);
  }
  Status prepare(const JobRequest& req);
  // A trainer from req.graph (and req.resumeFrom), in place of the old one once it stands.
  Status buildTrainer(const JobRequest& req);
  Result<Batch> nextBatch(bool test);
  // True, once, when this Eval Step reads other data than the last one (see evaluated_).
  bool evaluatedElsewhere(const JobRequest& req);

  TrainingPanel* panel_;
  std::unique_ptr<Trainer> trainer_;
  std::string dataKey_;
  std::shared_ptr<const Dataset> train_, test_;  // test_: what Eval Step and Fit evaluate
  // The data the metric sums of the last Eval Steps came from: Eval Steps on other data start
  // them again (their accuracy mixed the validation and test batches).
  std::string evaluated_;
  std::unique_ptr<BatchCursor> trainCursor_, testCursor_;
  bool labelsChecked_ = false;  // the trainer's label ranges held against train_ and test_
  std::string evaluatedSplit_;  // which split test_ is
  // Predict's session: the trainer's weights when it is current, else the canvas's.
  std::unique_ptr<dw::engine::InferenceSession> predictor_;
  int64_t batchSize_ = 0;
  bool pinned_ = false;  // the cursors gather into page-locked memory
  friend class TrainingPanel;
};

Status TrainingWorker::buildTrainer(const JobRequest& req) {
  // The old trainer goes only once the new one stands: a canvas the trainer refuses, or a
  // checkpoint of another model, must not take the trained weights with it.
  auto t = Trainer::create(*req.graph, req.options);
  if (!t.ok()) return t.status();
  const bool loadJob = req.job == static_cast<int>(TrainingPanel::Job::LoadCheckpoint);
  Status resumed;
  if (!req.resumeFrom.empty()) {
    resumed = (*t)->loadCheckpoint(req.resumeFrom);
    if (!resumed.ok() && loadJob) return resumed;
  }
  trainer_ = std::move(*t);
  labelsChecked_ = false;
  post([p = panel_, doc = req.document, notice = qs(trainer_->notice())] {
    p->onTrainerBuilt(doc, notice);
  });
  if (!req.resumeFrom.empty())
    post([p = panel_, error = resumed.ok() ? QString() : qs(resumed.message())] {
      p->onResumed(error);
    });
  return Status();
}

Status TrainingWorker::prepare(const JobRequest& req) {
  const bool predict = req.job == static_cast<int>(TrainingPanel::Job::Predict);
  // A training job changes the weights Predict must use.
  if (req.rebuild || !predict) predictor_.reset();
  if (!predict && (req.rebuild || !trainer_)) DW_RETURN_IF_ERROR(buildTrainer(req));
  // Datasets are loaded once per description and kept across steps.
  TrainingConfig dataOnly;
  dataOnly.dataset = req.config.dataset;
  const std::string key = trainingConfigToJson(dataOnly) + "|" + req.baseDir;
  if (key != dataKey_) {
    train_.reset();
    test_.reset();
    trainCursor_.reset();
    testCursor_.reset();
    dataKey_.clear();
    // The same reading, conversion and split as `deepwire train` (data_source.h).
    auto data = loadData(req.config.dataset, req.baseDir);
    if (!data.ok()) return data.status();
    train_ = data->train;
    test_ = data->evaluation();
    evaluatedSplit_ = data->validation ? "validation" : "test";
    dataKey_ = key;
    labelsChecked_ = false;
  }
  // Labels outside the loss's classes, in all of the data at once: a step finds only those of
  // its own batch, and named the sample by its place in the batch. Predict reads no labels.
  if (!predict && trainer_ && !labelsChecked_) {
    DW_RETURN_IF_ERROR(trainer_->checkLabels(*train_, describeSplit(req.config.dataset, "train")));
    if (test_)
      DW_RETURN_IF_ERROR(
          trainer_->checkLabels(*test_, describeSplit(req.config.dataset, evaluatedSplit_)));
    labelsChecked_ = true;
  }
  // A trainer on a GPU wants its batches in page-locked memory (Trainer::batchStorage): the
  // cursors are made anew when the batch size changes, or when a rebuilt trainer moved to or
  // from a GPU.
  auto storage = trainer_ ? trainer_->batchStorage() : decltype(trainer_->batchStorage()){};
  if (!trainCursor_ || batchSize_ != req.config.batchSize || pinned_ != bool(storage)) {
    batchSize_ = req.config.batchSize;
    pinned_ = bool(storage);
    LoaderOptions lo;
    lo.batchSize = batchSize_;
    lo.shuffle = req.config.shuffle;
    lo.seed = req.config.seed;
    lo.hostBuffers = std::move(storage);
    trainCursor_ = std::make_unique<BatchCursor>(train_, lo);
    lo.shuffle = false;
    testCursor_ = std::make_unique<BatchCursor>(test_ ? test_ : train_, lo);
  }
  return Status();
}

// Predict: the inference model on the first batch of the evaluation data (the training data
// where there is none), no loss needed, so an imported model runs too. Always the same samples,
// so that clicks before and after training compare. The summary shows each output's type and,
// for a [N, classes] output, the classes it picks for the first samples, next to the labels the
// data holds and the batch's accuracy.
void TrainingWorker::predict(const JobRequest& req) {
  auto fail = [this](const std::string& msg) {
    post([p = panel_, m = qs(msg)] { p->onFinished(m, QString()); });
  };
  if (!predictor_) {
    Result<onnx::ModelProto> m = Status::error("");
    if (trainer_ && !req.rebuild) {
      m = trainer_->exportInference();
    } else {
      ExportOptions eo;
      eo.model = req.options.model;
      m = exportOnnx(*req.graph, eo);
    }
    if (!m.ok()) return fail(m.message());
    dw::engine::SessionOptions so;
    so.backend.accelerator = req.options.accelerator;
    so.backend.threads = req.options.threads;
    so.backend.precision = req.options.precision;
    auto s = dw::engine::InferenceSession::create(*m, so);
    if (!s.ok()) return fail(s.message());
    predictor_ = std::move(*s);
  }
  LoaderOptions lo;
  lo.batchSize = req.config.batchSize;
  lo.shuffle = false;
  BatchCursor first(test_ ? test_ : train_, lo);
  auto batch = first.next();
  if (!batch.ok()) return fail(batch.message());
  std::map<std::string, dw::engine::Tensor> feeds;
  for (const auto& in : predictor_->inputs()) {
    auto it = batch->inputs.find(in.name);
    // An input with a default (an initializer also listed as an input, as models before IR
    // version 4 list every weight) runs with its value: a trial's imported test_Conv2d asked for
    // data for its weight '1', which the Data dock does not offer.
    if (it == batch->inputs.end() && in.hasDefault) continue;
    if (it == batch->inputs.end())
      return fail("Predict: the data has nothing for the model's input '" + in.name +
                  "'; give it a source in the Data dock");
    feeds[in.name] = it->second;
  }
  auto out = predictor_->run(feeds);
  if (!out.ok()) return fail(out.message());
  QString summary = QObject::tr("<b>Predict</b> on the first %1 %2 samples")
                        .arg(batch->size)
                        .arg(test_ ? evalSetName(req.config.dataset) : QObject::tr("training"));
  // Class labels the data holds beside the model's inputs (an integer per sample).
  const dw::engine::Tensor* labels = nullptr;
  for (const auto& [name, t] : batch->inputs)
    if (!feeds.count(name) && t.rank() == 1 && t.dim(0) == batch->size &&
        !dw::engine::isFloating(t.dtype()) && t.dtype() != dw::engine::DType::kString)
      labels = &t;
  const int64_t shown = std::min<int64_t>(batch->size, 12);
  for (const auto& [name, t] : *out) {
    QStringList dims;
    for (int64_t d : t.shape()) dims << QString::number(d);
    summary +=
        QStringLiteral("<br>%1: %2[%3]")
            .arg(qs(name).toHtmlEscaped(), qs(dw::engine::dtypeName(t.dtype())), dims.join(','));
    if (t.rank() == 2 && t.dim(1) > 1 && dw::engine::isFloating(t.dtype()) && t.dim(0) > 0) {
      QStringList picked, truth;
      int64_t right = 0;
      for (int64_t r = 0; r < t.dim(0); ++r) {
        int64_t best = 0;
        for (int64_t c = 1; c < t.dim(1); ++c)
          if (t.getDouble(r * t.dim(1) + c) > t.getDouble(r * t.dim(1) + best)) best = c;
        const bool known = labels && r < labels->size();
        if (known && labels->getInt(r) == best) ++right;
        if (r < shown) {
          picked << QString::number(best);
          if (known) truth << QString::number(labels->getInt(r));
        }
      }
      summary += QObject::tr(" · classes picked: %1").arg(picked.join(' '));
      if (labels && labels->size() == t.dim(0))
        summary += QObject::tr(" · labels: %1 · %2 of %3 right")
                       .arg(truth.join(' '))
                       .arg(right)
                       .arg(t.dim(0));
    } else if (t.size() > 0) {
      auto firstValues = [](const dw::engine::Tensor& v) {
        QStringList values;
        for (int64_t i = 0; i < std::min<int64_t>(v.size(), 6); ++i)
          values << QString::number(v.getDouble(i), 'g', 4);
        return values.join(", ") + (v.size() > 6 ? QStringLiteral(", …") : QString());
      };
      summary += QStringLiteral(" · %1").arg(firstValues(t));
      // A regression's targets beside its predictions, where the data holds values of the
      // output's shape (a trial saw predictions with nothing to judge them by).
      for (const auto& [target, v] : batch->inputs)
        if (!feeds.count(target) && dw::engine::isFloating(v.dtype()) && v.shape() == t.shape()) {
          summary +=
              QObject::tr(" · %1 (target): %2").arg(qs(target).toHtmlEscaped(), firstValues(v));
          break;
        }
    }
  }
  post([p = panel_, summary] { p->onFinished(QString(), summary); });
}

bool TrainingWorker::evaluatedElsewhere(const JobRequest& req) {
  // Other data, or weights a training step changed since: a mean over both would describe
  // neither (the trial's accuracy mixed Eval Steps from before and after training).
  const std::string from =
      dataKey_ + "|" +
      (test_ ? evalSetName(req.config.dataset).toStdString() : std::string("train")) + "|" +
      std::to_string(trainer_->counters().optimizerSteps);
  const bool other = !evaluated_.empty() && evaluated_ != from;
  evaluated_ = from;
  return other;
}

Result<Batch> TrainingWorker::nextBatch(bool test) {
  return (test ? testCursor_ : trainCursor_)->next();
}

void TrainingWorker::run(const JobRequest& req) {
  using Clock = std::chrono::steady_clock;
  auto fail = [this](const std::string& msg) {
    post([p = panel_, m = qs(msg)] { p->onFinished(m, QString()); });
  };
  if (req.job == static_cast<int>(TrainingPanel::Job::LoadCheckpoint)) {
    // No data needed: the weights and the optimizer's state are what it loads.
    predictor_.reset();
    if (Status st = buildTrainer(req); !st.ok()) return fail(st.message());
    // In the words `deepwire train --resume` uses for the same checkpoint.
    const TrainerCounters c = trainer_->counters();
    const QString summary =
        QObject::tr("<b>Checkpoint loaded</b> from %1: %2 done%3, %4 optimizer steps (%5)")
            .arg(qs(req.resumeFrom).toHtmlEscaped())
            .arg(count(c.epoch, QObject::tr("%1 epoch"), QObject::tr("%1 epochs")))
            .arg(c.batchInEpoch > 0 ? QObject::tr(" and %1 of epoch %2")
                                          .arg(count(c.batchInEpoch, QObject::tr("%1 batch"),
                                                     QObject::tr("%1 batches")))
                                          .arg(c.epoch + 1)
                                    : QString())
            .arg(c.optimizerSteps)
            .arg(qs(req.config.optimizer.type));
    post([p = panel_, summary, history = trainer_->history()] {
      p->onCheckpointLoaded(summary, history);
    });
    return;
  }
  Status st = prepare(req);
  if (!st.ok()) return fail(st.message());
  const auto job = static_cast<int>(req.job);
  if (job == static_cast<int>(TrainingPanel::Job::Predict)) return predict(req);
  if (job != 3) {  // a single step
    const bool eval = job == 2;
    auto batch = nextBatch(eval);
    if (!batch.ok()) return fail(batch.message());
    const auto t0 = Clock::now();
    Result<StepResult> r = job == 0 ? trainer_->trainStep(*batch)
                           : job == 1
                               ? trainer_->fullTrainStep(*batch)
                               : trainer_->evalStep(*batch, evalStepResetsMetrics(*req.graph) ||
                                                                evaluatedElsewhere(req));
    if (!r.ok() && eval)
      // Say which data: an evaluation batch comes from another split than the training steps'.
      return fail(
          r.status()
              .withContext(
                  "Eval Step on a batch of " +
                  (test_ ? dw::engine::training::describeSplit(
                               req.config.dataset, evalSetName(req.config.dataset).toStdString())
                         : dw::engine::training::describeSplit(req.config.dataset, "train")))
              .message());
    if (!r.ok()) return fail(r.message());
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double sps = secs > 0 ? r->samples / secs : 0;
    const qint64 step = trainer_->counters().trainSteps;
    const double loss = r->totalLoss();
    const double metric = headlineMetric(r->metrics);
    QString summary = formatResult(job == 0   ? "Train Step"
                                   : job == 1 ? "Full Train Step"
                                              : "Eval Step",
                                   *r, eval);
    // Which split was evaluated: without validation or test data the cursor falls back to the
    // train data, and an accuracy on batches the model trains on says nothing of generalisation.
    if (eval)
      summary += test_ ? QObject::tr(" · on a %1 batch").arg(evalSetName(req.config.dataset))
                       : QObject::tr(
                             " · <b>evaluated on a training batch</b>: give the project a "
                             "validation split or test data to measure generalisation");
    const double batchMetric = headlineMetric(r->batchMetrics);
    post([p = panel_, eval, step, loss, sps, metric, batchMetric, summary, updated = job != 0] {
      if (eval)
        p->onEpoch(-1, step, true, loss, metric);
      else
        p->onSteps({{step, loss, batchMetric}}, sps, 1.0, updated);
      p->onFinished(QString(), summary);
    });
    return;
  }

  // Fit: N more epochs from where the trainer stands.
  FitOptions fo;
  fo.train = train_;
  fo.test = test_;
  fo.epochs = trainer_->counters().epoch + req.config.epochs;
  fo.batchSize = req.config.batchSize;
  fo.shuffle = req.config.shuffle;
  fo.accumulationSteps = req.config.accumulationSteps;
  const int64_t firstEpoch = trainer_->counters().epoch;
  const int64_t epochs = req.config.epochs;
  auto lastPost = Clock::now() - std::chrono::seconds(1);
  std::vector<TrainingPanel::StepPoint> pending;
  FitCallbacks cb;
  double progress = 0, sps = 0;
  auto postSteps = [&] {
    panel_->stepsQueued_ = true;
    post([p = panel_, points = std::move(pending), sps, progress] {
      p->stepsQueued_ = false;
      p->onSteps(points, sps, progress);
    });
    pending.clear();
  };
  cb.onStep = [&](const StepInfo& info) {
    // Every step is a point; they go to the charts in bunches, since a tiny model steps far
    // faster than a chart can usefully redraw, and never while the last bunch still waits in the
    // window's queue: a window that falls behind gets fewer, larger bunches, and a click on Stop
    // never queues behind a backlog of them.
    pending.push_back({qint64(trainer_->counters().trainSteps), info.result.totalLoss(),
                       headlineMetric(info.result.batchMetrics)});
    const double done = (info.epoch - firstEpoch) +
                        double(info.batch + 1) / std::max<int64_t>(1, info.batchesPerEpoch);
    progress = std::clamp(done / std::max<int64_t>(1, epochs), 0.0, 1.0);
    sps = info.seconds > 0 ? info.samplesDone / info.seconds : 0;
    const auto now = Clock::now();
    if ((now - lastPost < std::chrono::milliseconds(kDrawEveryMs) &&
         info.batch + 1 < info.batchesPerEpoch) ||
        panel_->stepsQueued_)
      return;
    lastPost = now;
    postSteps();
  };
  cb.onEpoch = [&](const EpochReport& e) {
    // The epoch's evaluation goes after its steps, held back or not.
    if (!pending.empty()) postSteps();
    post([p = panel_, epoch = qint64(e.epoch), step = qint64(trainer_->counters().trainSteps),
          hasTest = e.hasTest, test = e.testLoss,
          testAcc = evalMetric(e)] { p->onEpoch(epoch, step, hasTest, test, testAcc); });
    if (!e.warning.empty())
      post([p = panel_, w = qs("epoch " + std::to_string(e.epoch + 1) + ": " + e.warning)] {
        p->pendingWarning_ = w;
      });
  };
  auto report = trainer_->fit(fo, cb, req.cancel.get());
  if (!pending.empty()) postSteps();  // the steps since the last bunch
  if (!report.ok()) return fail(report.message());
  QString summary;
  if (report->cancelled)
    summary = QObject::tr("<b>Fit stopped</b> after %1")
                  .arg(count(qint64(report->epochs.size()), QObject::tr("%1 complete epoch"),
                             QObject::tr("%1 complete epochs")));
  else if (!report->epochs.empty()) {
    const EpochReport& last = report->epochs.back();
    summary =
        QObject::tr("<b>Fit</b>: %1, train loss %2%3, %4 samples/s")
            .arg(count(qint64(report->epochs.size()), QObject::tr("%1 epoch"),
                       QObject::tr("%1 epochs")))
            .arg(last.trainLoss, 0, 'g', 5)
            .arg(last.hasTest
                     ? QObject::tr(", %1 loss %2%3")
                           .arg(evalSetName(req.config.dataset))
                           .arg(last.testLoss, 0, 'g', 5)
                           .arg(last.testAccuracy >= 0
                                    ? QObject::tr(", accuracy %1").arg(last.testAccuracy, 0, 'f', 4)
                                    : QString())
                     : QString())
            .arg(last.samplesPerSecond, 0, 'f', 0);
  }
  post([p = panel_, summary] { p->onFinished(QString(), summary); });
}

Result<onnx::ModelProto> TrainingWorker::exportTraining(const Graph& g, const TrainOptions& o) {
  auto t = Trainer::create(g, o);
  if (!t.ok()) return t.status();
  return (*t)->exportTraining();
}

// ---------------------------------------------------------------------------- TrainingPanel

TrainingPanel::TrainingPanel(GraphModel* model, QWidget* parent)
    : QWidget(parent), model_(model), cancel_(std::make_shared<std::atomic<bool>>(false)) {
  worker_ = new TrainingWorker(this);
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_.setObjectName(QStringLiteral("training"));
  thread_.start();
  processDraw_ = new QTimer(this);
  processDraw_->setSingleShot(true);
  connect(processDraw_, &QTimer::timeout, this, &TrainingPanel::drawProcessSteps);

  // --- Settings column ---
  // One source of truth: the Accelerator node when the canvas has one (the dock edits it), and
  // what the engine reports usable here decides which choices are enabled.
  accelerator_ = new QComboBox;
  accelerator_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  const auto dev = dw::engine::devices();
  // The Accelerator node's device values (cuda:N for a second GPU is the CLI's).
  for (const std::string a : {"cpu", "cuda", "gpu", "auto"}) {
    accelerator_->addItem(qs(a), qs(a));
    const bool usable =
        std::find(dev.available.begin(), dev.available.end(), a) != dev.available.end() ||
        a == "auto";
    if (!usable) {
      auto* m = qobject_cast<QStandardItemModel*>(accelerator_->model());
      if (m) m->item(accelerator_->count() - 1)->setEnabled(false);
      accelerator_->setItemText(accelerator_->count() - 1, a == "cuda"
                                                               ? tr("cuda (no NVIDIA GPU here)")
                                                               : tr("gpu (no Intel GPU here)"));
      accelerator_->setItemData(accelerator_->count() - 1,
                                a == "cuda" ? qs(dev.cudaUnavailable) : QString(), Qt::ToolTipRole);
    }
  }
  accelerator_->setToolTip(tr("Where training runs (the canvas's Accelerator node, when it has "
                              "one). Usable here: %1. CPU: %2, %3")
                               .arg(qs([&] {
                                      std::string l;
                                      for (const auto& a : dev.available)
                                        l += (l.empty() ? "" : ", ") + a;
                                      return l;
                                    }()),
                                    qs(dev.cpuModel), qs(dev.cpuIsa)));

  data_ = new DataPanel(model_);
  dataStatus_ = new QLabel;
  // Wrapped: the reason data is not ready is what the user has to read and act on, and a line
  // cut at the dock's edge ("takes int6") hid its end.
  dataStatus_->setWordWrap(true);
  dataStatus_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  editData_ = new QPushButton(tr("Data…"));
  editData_->setToolTip(tr("Show the Data panel: a source for each data input, and the splits"));

  optimizer_ = new QComboBox;
  for (const char* o : {"sgd", "adam", "adamw", "adagrad", "rmsprop"}) optimizer_->addItem(o);
  schedule_ = new QComboBox;
  for (const auto& s : scheduleTypes()) schedule_->addItem(qs(s));
  lr_ = new ScientificSpinBox;
  // Wide enough that a value is never clamped without a word (100000 became 10): an absurd
  // rate shows in the loss, and the divergence warning names it.
  lr_->setRange(0, 1e6);
  lr_->setSingleStep(1e-4);
  momentum_ = new ScientificSpinBox;
  momentum_->setRange(0, 1);
  momentum_->setSingleStep(0.1);
  weightDecay_ = new ScientificSpinBox;
  weightDecay_->setRange(0, 10);
  weightDecay_->setSingleStep(1e-4);
  batchSize_ = new QSpinBox;
  batchSize_->setRange(1, 1 << 20);
  epochs_ = new QSpinBox;
  epochs_->setRange(1, 100000);
  processes_ = new QSpinBox;
  processes_->setRange(1, 256);
  processes_->setValue(
      std::clamp(QSettings().value(QStringLiteral("training/processes"), 1).toInt(), 1, 256));
  processes_->setToolTip(
      tr("How many processes Fit trains in, on this machine. 1: in the studio. More: the studio "
         "saves the project and runs mpirun -np N deepwire train --distributed on it; each "
         "process takes a slice of every batch, and the weights come out as one process's would "
         "(within float32 rounding), then come back into the graph. Needs Open MPI's mpirun and "
         "a deepwire command built with MPI. Train Step, Eval Step and Predict always run in the "
         "studio. Kept for this machine, not in the project."));

  trainStep_ = new QPushButton(tr("Train Step"));
  // Said plainly: a user who pressed Train Step again and again saw the same loss (or a higher
  // one, on another batch) and took the model for broken.
  trainStep_->setToolTip(
      tr("Computes the loss and the gradients on one batch, adding the gradients to those of "
         "earlier Train Steps. It does NOT update the weights: the loss will not go down. "
         "Full Train Step also applies the optimizer."));
  fullStep_ = new QPushButton(tr("Full Train Step"));
  fullStep_->setToolTip(
      tr("One training step: the loss and gradients on one batch, then the optimizer updates the "
         "weights and the gradients are reset"));
  evalStep_ = new QPushButton(tr("Eval Step"));
  evalStep_->setToolTip(
      tr("Inference on one batch of the validation data (the test data where there is no "
         "validation split): loss and metrics, no gradients. Metrics accumulate "
         "over Eval Steps until the Eval Step node's reset_metrics?, a changed canvas, other "
         "data or a training step that changed the weights resets them"));
  predict_ = new QPushButton(tr("Predict"));
  predict_->setToolTip(
      tr("Runs the model (no loss needed: an imported model too) on one batch of the "
         "validation or test data, else the training data, and shows its outputs: for class "
         "scores, the classes it picks. Uses the trained weights."));
  fit_ = new QPushButton(tr("Fit"));
  fit_->setToolTip(tr("Train the given number of epochs, evaluating after each"));
  stop_ = new QPushButton(tr("Stop"));
  stop_->setToolTip(
      tr("Stop Fit before its next step (a Fit across processes: every process after the same "
         "step, keeping what it trained; a second Stop ends them at once)"));
  stop_->setEnabled(false);
  writeWeights_ = new QPushButton(tr("Write Weights"));
  writeWeights_->setToolTip(
      tr("Copy the trained weights into the Initializer nodes (undoable), "
         "so Save and Export carry them"));
  resetWeights_ = new QPushButton(tr("Reset Weights"));
  resetWeights_->setToolTip(
      tr("Start training again: every layer takes its seeded initial weights, the optimizer "
         "forgets its state, and Initializer nodes go back to the values the canvas gives them "
         "(undoable). Changing a layer's seed or shape resets that layer only."));
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  progress_->setTextVisible(false);
  throughput_ = new QLabel(tr("— samples/s"));
  throughput_->setMinimumWidth(100);
  result_ = new QLabel;
  result_->setWordWrap(true);
  result_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->setStyleSheet(QStringLiteral("color: #b00020; background: #fdecea; padding: 4px"));
  error_->hide();

  // Compact rows: the dock shares the window's height with the canvas.
  auto row = [](std::initializer_list<std::pair<QString, QWidget*>> items) {
    auto* h = new QHBoxLayout;
    h->setSpacing(6);
    for (const auto& [label, w] : items) {
      if (!label.isEmpty()) h->addWidget(new QLabel(label));
      h->addWidget(w, 1);
    }
    return h;
  };
  auto* left = new QVBoxLayout;
  left->setSpacing(5);
  left->addLayout(row({{tr("Accelerator"), accelerator_},
                       {tr("Processes"), processes_},
                       {tr("Batch size"), batchSize_},
                       {tr("Epochs"), epochs_}}));
  left->addLayout(
      row({{tr("Optimizer"), optimizer_}, {tr("lr"), lr_}, {tr("Schedule"), schedule_}}));
  left->addLayout(row({{tr("Momentum"), momentum_}, {tr("Weight decay"), weightDecay_}}));
  auto* buttons = new QHBoxLayout;
  buttons->setSpacing(4);
  for (QPushButton* b : {trainStep_, fullStep_, evalStep_, predict_, fit_, stop_})
    buttons->addWidget(b);
  left->addLayout(buttons);
  auto* progressRow = new QHBoxLayout;
  progressRow->addWidget(progress_, 1);
  progressRow->addWidget(throughput_);
  progressRow->addWidget(writeWeights_);
  progressRow->addWidget(resetWeights_);
  left->addLayout(progressRow);
  {
    // Below the step buttons: the reason data is not ready takes one to four lines, and above
    // them it moved the buttons away from the pointer whenever it changed (a user pressing
    // Train Step again and again).
    auto* h = new QHBoxLayout;
    h->addWidget(dataStatus_, 1);
    h->addWidget(editData_, 0, Qt::AlignTop);
    left->addLayout(h);
  }
  left->addWidget(result_);
  left->addWidget(error_);
  left->addStretch();
  auto* leftWidget = new QWidget;
  leftWidget->setLayout(left);
  leftWidget->setMinimumWidth(470);
  leftWidget->setMaximumWidth(560);

  // --- Charts ---
  auto makeChart = [](const QString& title, QLineSeries*& train, QLineSeries*& test) {
    auto* chart = new QChart;
    chart->setTitle(title);
    chart->setMargins(QMargins(4, 4, 4, 4));
    chart->legend()->setAlignment(Qt::AlignBottom);
    train = new QLineSeries;
    train->setName(QObject::tr("train"));
    test = new QLineSeries;
    test->setName(QObject::tr("validation"));
    test->setPointsVisible(true);
    chart->addSeries(train);
    chart->addSeries(test);
    auto* x = new QValueAxis;
    x->setTitleText(QObject::tr("step"));
    x->setLabelFormat(QStringLiteral("%.0f"));
    x->setTickCount(6);
    auto* y = new QValueAxis;
    y->setLabelFormat(QStringLiteral("%.3g"));
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    for (auto* s : {train, test}) {
      s->attachAxis(x);
      s->attachAxis(y);
    }
    return chart;
  };
  lossChart_ = makeChart(tr("Loss"), trainLoss_, testLoss_);
  metricChart_ = makeChart(tr("Metric (accuracy)"), trainMetric_, testMetric_);
  trainLossLine_ = std::make_unique<DecimatedLine>(trainLoss_);
  trainMetricLine_ = std::make_unique<DecimatedLine>(trainMetric_);
  // A scatter series of markers on a chart's axes (Eval Step points, off-scale points).
  auto addMarkers = [](QChart* chart, const QString& name, QScatterSeries::MarkerShape shape,
                       qreal size, QColor fill, QColor border) {
    auto* s = new QScatterSeries;
    s->setName(name);
    s->setMarkerShape(shape);
    s->setMarkerSize(size);
    s->setColor(fill);
    s->setBorderColor(border);
    chart->addSeries(s);
    s->attachAxis(chart->axes(Qt::Horizontal).first());
    s->attachAxis(chart->axes(Qt::Vertical).first());
    return s;
  };
  auto addEvalSeries = [&](QChart* chart) {
    return addMarkers(chart, tr("Eval Step"), QScatterSeries::MarkerShapeRotatedRectangle, 9,
                      QColor(0xe6, 0x9f, 0x00), QColor(0x80, 0x58, 0x00));
  };
  evalLoss_ = addEvalSeries(lossChart_);
  evalMetric_ = addEvalSeries(metricChart_);
  best_ = new QScatterSeries;
  best_->setName(tr("best epoch"));
  // A ring around the best epoch's point, drawn over it: a filled dot hid the validation point
  // under it (after a one-epoch Fit, the only one).
  best_->setMarkerSize(17);
  best_->setBrush(Qt::NoBrush);
  QPen ring(QColor(0xe0, 0x3b, 0x3b));
  ring.setWidthF(2.5);
  best_->setPen(ring);
  lossChart_->addSeries(best_);
  best_->attachAxis(lossChart_->axes(Qt::Horizontal).first());
  best_->attachAxis(lossChart_->axes(Qt::Vertical).first());
  // Points outside the range the outliers were ignored for: a triangle on the edge they lie
  // beyond, so that an excursion still shows where the line leaves the plot.
  auto addOffScale = [&](QChart* chart) {
    return addMarkers(chart, tr("off scale"), QScatterSeries::MarkerShapeTriangle, 8,
                      QColor(0xd0, 0x30, 0x30), QColor(0xd0, 0x30, 0x30));
  };
  lossOffScale_ = addOffScale(lossChart_);
  metricOffScale_ = addOffScale(metricChart_);
  auto* lossView = new QChartView(lossChart_);
  lossView->setRenderHint(QPainter::Antialiasing);
  auto* metricView = new QChartView(metricChart_);
  metricView->setRenderHint(QPainter::Antialiasing);
  logScale_ = new QCheckBox(tr("Log scale"));
  logScale_->setToolTip(tr("The loss on a logarithmic axis"));
  // On by default, as in TensorBoard: one diverging step otherwise squeezes the whole curve into
  // a flat line at the bottom.
  ignoreOutliers_ = new QCheckBox(tr("Ignore outliers"));
  ignoreOutliers_->setChecked(true);
  ignoreOutliers_->setToolTip(
      tr("Scale the charts to the 5th-95th percentile of their values (with a margin), as "
         "TensorBoard does: points beyond are marked with a triangle on the edge"));
  auto* clear = new QPushButton(tr("Clear charts"));
  auto* chartBar = new QHBoxLayout;
  chartBar->addWidget(logScale_);
  chartBar->addWidget(ignoreOutliers_);
  chartBar->addStretch();
  chartBar->addWidget(clear);
  auto* charts = new QHBoxLayout;
  charts->addWidget(lossView, 1);
  charts->addWidget(metricView, 1);
  auto* right = new QVBoxLayout;
  right->addLayout(chartBar);
  right->addLayout(charts, 1);

  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(6, 4, 6, 4);
  layout->addWidget(leftWidget);
  layout->addLayout(right, 1);

  // --- Wiring ---
  connect(trainStep_, &QPushButton::clicked, this, [this] { start(Job::TrainStep); });
  connect(fullStep_, &QPushButton::clicked, this, [this] { start(Job::FullTrainStep); });
  connect(evalStep_, &QPushButton::clicked, this, [this] { start(Job::EvalStep); });
  connect(predict_, &QPushButton::clicked, this, [this] { start(Job::Predict); });
  connect(fit_, &QPushButton::clicked, this, [this] { start(Job::Fit); });
  connect(stop_, &QPushButton::clicked, this, [this] {
    if (process_) return stopProcessFit();
    cancel_->store(true);
    emit statusMessage(tr("Stopping after the current step…"));
  });
  connect(writeWeights_, &QPushButton::clicked, this, [this] {
    Status st = writeWeightsToGraph();
    if (!st.ok()) {
      error_->setText(qs(st.message()));
      error_->show();
    }
    emit statusMessage(st.ok() ? tr("Trained weights written to the graph") : qs(st.message()));
  });
  connect(resetWeights_, &QPushButton::clicked, this, [this] {
    Status st = resetWeights();
    if (!st.ok()) {
      error_->setText(qs(st.message()));
      error_->show();
    }
    emit statusMessage(st.ok() ? tr("Weights reset: the next step starts from the layers' seeds")
                               : qs(st.message()));
  });
  connect(logScale_, &QCheckBox::toggled, this, [this] { applyLogScale(); });
  connect(ignoreOutliers_, &QCheckBox::toggled, this, [this] { rescaleAxes(); });
  connect(processes_, &QSpinBox::valueChanged, this,
          [](int n) { QSettings().setValue(QStringLiteral("training/processes"), n); });
  connect(clear, &QPushButton::clicked, this, [this] { clearCharts(); });
  connect(editData_, &QPushButton::clicked, this, [this] { emit showDataRequested(); });
  connect(data_, &DataPanel::sourcesRead, this, [this] { updateDataStatus(); });
  // After every graph edit the Data panel re-reads the inputs' types (debounced): the Data line
  // follows it there, never the inputs as they were before the edit.
  connect(data_, &DataPanel::readinessChanged, this, [this] { updateDataStatus(); });
  connect(data_, &DataPanel::specChanged, this, [this] {
    // Points already drawn keep saying which split they came from: a curve of validation
    // points becomes "validation, then test" rather than "test".
    const QString now = evalSetName(data_->spec());
    for (auto* series : {testLoss_, testMetric_}) {
      const QString was = series->name();
      if (series->count() == 0 || was.isEmpty())
        series->setName(now);
      else if (!was.endsWith(now))
        series->setName(tr("%1, then %2").arg(was, now));
    }
    touched_ = true;
    emit settingsChanged();
    updateDataStatus();
  });
  // A change to the canvas or to the optimizer means a new trainer on the next job.
  auto dirty = [this] { graphDirty_ = true; };
  connect(model_, &GraphModel::nodeAdded, this, dirty);
  connect(model_, &GraphModel::nodeRemoved, this, dirty);
  connect(model_, &GraphModel::nodeChanged, this, [this](qint64 id) {
    graphDirty_ = true;
    const Node* n = model_->graph().node(id);
    if (n && n->type == "Accelerator") acceleratorFromGraph();
  });
  connect(model_, &GraphModel::validated, this, [this] {
    // Not the Data line: the Data panel's rows still hold the inputs as they were until its
    // refresh, which sends readinessChanged. A training error about the canvas is stale once an
    // edit leaves the canvas without problems: the next step would build a new trainer anyway.
    if (!busy_ && !error_->isHidden() && !lastErrorIsData_ && graphDirty_ &&
        model_->problems().empty()) {
      error_->hide();
      emit staleStatus(lastError_);  // the bar may still show it
      lastError_.clear();
    }
  });
  connect(model_, &GraphModel::linkAdded, this, dirty);
  connect(model_, &GraphModel::linkRemoved, this, dirty);
  connect(model_, &GraphModel::modelReset, this, [this] {
    // A new document: nothing of the last one's training carries over.
    resetForNewDocument();
    loadSettingsFromModel();
  });
  auto touched = [this] {
    touched_ = true;
    graphDirty_ = true;
    emit settingsChanged();
  };
  connect(accelerator_, &QComboBox::currentIndexChanged, this, [this, touched] {
    touched();
    acceleratorToGraph();
  });
  connect(optimizer_, &QComboBox::currentIndexChanged, this, touched);
  connect(schedule_, &QComboBox::currentIndexChanged, this, [this, touched] {
    touched();
    describeSchedule();
  });
  for (auto* box : {lr_, momentum_, weightDecay_})
    connect(box, &QDoubleSpinBox::valueChanged, this, touched);
  connect(batchSize_, &QSpinBox::valueChanged, this, [this] {
    touched_ = true;
    emit settingsChanged();
  });
  connect(epochs_, &QSpinBox::valueChanged, this, [this] {
    touched_ = true;
    emit settingsChanged();
  });
  loadSettingsFromModel();
  rescaleAxes();  // whole-step ticks from the start, not a default 0..1 axis
}

TrainingPanel::~TrainingPanel() {
  stopAndWait();
}

void TrainingPanel::stopAndWait() {
  abandonProcessFit();
  cancel_->store(true);
  if (thread_.isRunning()) {
    thread_.quit();
    thread_.wait();
  }
}

void TrainingPanel::setProjectDir(const QString& dir) {
  projectDir_ = dir;
  data_->setBaseDir(dir);
}

void TrainingPanel::movedTo(const QString& dir) {
  setProjectDir(dir);
  auto cfg = trainingConfigFromGraph(model_->graph());
  if (!cfg.ok()) return;
  config_.dataset = cfg->dataset;
  const QSignalBlocker b(data_);
  data_->setSpec(config_.dataset, projectDir_);
}

void TrainingPanel::loadSettingsFromModel() {
  const Graph& g = model_->graph();
  hasSection_ = g.info().sections.count("training") > 0;
  auto cfg = trainingConfigFromGraph(g);
  config_ = cfg.ok() ? *cfg : TrainingConfig{};
  error_->hide();
  if (!cfg.ok()) {
    error_->setText(tr("The project's training section is invalid: %1").arg(qs(cfg.message())));
    error_->show();
  }
  const OptimizerConfig& o = config_.optimizer;
  const QSignalBlocker b1(optimizer_), b2(lr_), b3(momentum_), b4(weightDecay_), b5(batchSize_),
      b6(epochs_), b8(accelerator_), b9(schedule_);
  if (const int i = accelerator_->findData(qs(config_.accelerator)); i >= 0)
    accelerator_->setCurrentIndex(i);
  optimizer_->setCurrentText(qs(o.type));
  // A project's schedule was applied without the dock saying so (a trial saw lr 0.05 while a
  // cosine decay ran).
  schedule_->setCurrentText(qs(o.schedule.type));
  describeSchedule();
  lr_->setValue(o.lr);
  momentum_->setValue(o.momentum);
  weightDecay_->setValue(o.weightDecay);
  batchSize_->setValue(int(config_.batchSize));
  epochs_->setValue(int(config_.epochs));
  {
    const QSignalBlocker b7(data_);
    data_->setSpec(config_.dataset, projectDir_);
  }
  for (auto* series : {testLoss_, testMetric_}) series->setName(evalSetName(config_.dataset));
  if (const auto c = g.info().sections.find("curves"); c != g.info().sections.end())
    restoreCurves(c->second);
  updateDataStatus();
  touched_ = false;
  emit settingsChanged();
}

void TrainingPanel::describeSchedule() {
  const auto& sc = config_.optimizer.schedule;
  const QString kind = schedule_->currentText();
  QString how;
  if (kind == "constant")
    how = tr("the learning rate stays lr");
  else if (kind == "step")
    how = tr("lr is multiplied by %1 every %2 optimizer steps").arg(sc.gamma).arg(sc.stepSize);
  else
    how = (kind == "cosine" ? tr("lr falls along a half cosine to %1").arg(sc.minLr)
                            : tr("lr falls linearly to 0")) +
          (sc.totalSteps > 0 ? tr(" over %1 optimizer steps").arg(sc.totalSteps)
                             : tr(" over each Fit"));
  if (sc.warmupSteps > 0 && kind != "constant" && kind != "step")
    how += tr(", after a warm-up of %1 steps from 0").arg(sc.warmupSteps);
  schedule_->setToolTip(tr("Learning-rate schedule: %1. Its other settings (step_size, gamma, "
                           "warmup_steps, total_steps, min_lr) are the project's training "
                           "section's.")
                            .arg(how));
}

void TrainingPanel::markSettingsSaved() {
  touched_ = false;
  emit settingsChanged();
}

void TrainingPanel::acceleratorFromGraph() {
  TrainingConfig c;
  applyAcceleratorNode(model_->graph(), c);
  const QSignalBlocker b(accelerator_);
  if (const int i = accelerator_->findData(qs(c.accelerator)); i >= 0)
    accelerator_->setCurrentIndex(i);
}

void TrainingPanel::acceleratorToGraph() {
  const QString device = accelerator_->currentData().toString();
  // The node the trainer reads (trainingConfigFromGraph).
  const Node* acc = controlNode(model_->graph(), "Accelerator");
  if (!acc) return;
  auto cur = model_->graph().param(acc->id, "device");
  if (cur && qs(cur->asString()) == device) return;
  Status st = model_->setParam(acc->id, "device", Param::makeString(device.toStdString()));
  if (!st.ok()) emit statusMessage(qs(st.message()));
}

void TrainingPanel::updateDataStatus() {
  const QString problem = data_->readiness();
  const QString text =
      problem.isEmpty()
          ? tr("<b>Data</b>: %1 ready")
                .arg(count(qint64(data_->spec().train.size()), tr("%1 input"), tr("%1 inputs")))
          : tr("<b>Data</b>: %1").arg(problem.toHtmlEscaped());
  // Wrapped (see the constructor); the sentence in the tooltip too.
  dataStatus_->setText(text);
  dataStatus_->setToolTip(problem.isEmpty() ? QString() : problem);
  // A data error is about the sources as they were: it goes once they are ready.
  if (problem.isEmpty() && !busy_ && !error_->isHidden() && lastErrorIsData_) {
    error_->hide();
    emit staleStatus(lastError_);  // the bar may still show it
    lastError_.clear();
    lastErrorIsData_ = false;
  }
}

TrainingConfig TrainingPanel::currentConfig() const {
  TrainingConfig c = config_;
  c.optimizer.type = optimizer_->currentText().toStdString();
  c.optimizer.lr = lr_->value();
  c.optimizer.schedule.type = schedule_->currentText().toStdString();
  c.optimizer.momentum = momentum_->value();
  c.optimizer.weightDecay = weightDecay_->value();
  c.batchSize = batchSize_->value();
  c.epochs = epochs_->value();
  c.dataset = data_->spec();
  // Threads and precision live on the Accelerator node, which the Parameters panel edits
  // directly: take them as the canvas has them now, not as the project was opened. The device is
  // the combo's, which writes it to the node.
  const TrainingConfig defaults;
  c.threads = defaults.threads;
  c.precision = defaults.precision;
  applyAcceleratorNode(model_->graph(), c);
  c.accelerator = accelerator_->currentData().toString().toStdString();
  return c;
}

TrainOptions TrainingPanel::currentOptions() const {
  TrainOptions o;
  const TrainingConfig c = currentConfig();
  o.optimizer = c.optimizer;
  o.accelerator = c.accelerator;
  // Threads and precision are the Accelerator node's parameters (Parameters panel).
  o.threads = c.threads;
  o.precision = c.precision;
  o.seed = c.seed;
  return o;
}

bool TrainingPanel::settingsToKeep() const {
  // The accelerator is kept in the training section too (where `deepwire train` reads it when
  // no Accelerator node holds it).
  const bool onCpu = accelerator_->currentData().toString() == QLatin1String("cpu");
  return hasSection_ || touched_ || !onCpu;  // else nothing to keep: no section of defaults
}

void TrainingPanel::storeSettingsInModel() {
  // An empty text leaves the section out of the file (projectToJsonText skips what is no JSON).
  model_->setSection("curves", curvesJson());
  if (!settingsToKeep()) return;
  model_->setSection("training", trainingConfigToJson(currentConfig()));
  hasSection_ = true;
}

Graph TrainingPanel::documentToKeep() const {
  Graph g = model_->graph();
  ModelInfo info = g.info();
  info.sections["curves"] = curvesJson();
  if (settingsToKeep()) info.sections["training"] = trainingConfigToJson(currentConfig());
  g.setInfo(std::move(info));
  // A running job's worker is using the trainer: its weights are read when it has finished.
  if (busy_ || !worker_->trainer_ || !trained_) return g;
  if (auto states = trainedStates(g); states.ok())
    for (const Node& n : *states) applyNodeState(g, n);
  return g;
}

Result<onnx::ModelProto> TrainingPanel::exportTrainingModel() {
  if (busy_)
    return Status::error("training is running; press Stop and wait for it to finish first");
  // The worker is idle, so reading its trainer (or building one) here does not race with it.
  // A trainer that matches the canvas exports its trained weights and optimizer state.
  if (!graphDirty_ && worker_->trainer_) return worker_->trainer_->exportTraining();
  return worker_->exportTraining(canvasWithTrainedValues(), currentOptions());
}

Result<onnx::ModelProto> TrainingPanel::exportInferenceModel(bool withDataConversion) {
  DW_RETURN_IF_ERROR(syncWeights());
  auto m = exportOnnx(model_->graph());
  if (!m.ok() || !withDataConversion) return m;
  // Relative sources resolve as training resolves them (start()).
  const std::string base =
      projectDir_.isEmpty() ? QDir::currentPath().toStdString() : projectDir_.toStdString();
  DW_RETURN_IF_ERROR(addDataConversion(*m, data_->spec(), base));
  return m;
}

Status TrainingPanel::syncWeights() {
  // Without new steps the graph may still lack trained weights: an undo of Write Weights (or of
  // the write before a Save) takes them out of the graph, not out of the trainer.
  if (!unsynced_ && (!trained_ || busy_ || !worker_->trainer_)) return Status();
  return writeWeightsToGraph();
}

Status TrainingPanel::writeWeightsToGraph() {
  if (busy_)
    return Status::error("training is running; press Stop and wait for it to finish first");
  if (!worker_->trainer_ && processWroteWeights_) {
    // The trial read "nothing trained for this graph yet" under fifteen charted epochs.
    emit statusMessage(
        tr("The graph holds the trained weights already: the Fit across processes "
           "wrote them when it finished"));
    return Status();
  }
  if (!worker_->trainer_)
    return Status::error(
        "nothing trained for this graph yet: press Train Step, Full Train Step or Fit first");
  // After an edit (or an edit and its undo) the trained weights still go to the nodes that have
  // them, by name and id, as a new trainer would start from them: saving must never lose them.
  const bool edited = graphDirty_;
  DW_RETURN_IF_ERROR(copyTrainedWeights());
  // Unedited, the graph now holds what the trainer holds: keep training with it (and its
  // optimizer state). Edited, the next job builds a trainer for the new graph.
  graphDirty_ = edited;
  return Status();
}

Status TrainingPanel::copyTrainedWeights() {
  if (!worker_->trainer_) return Status::error("nothing has been trained yet");
  auto changed = trainedStates(model_->graph());
  if (!changed.ok()) return changed.status();
  // Nothing to write makes no undo step: an empty one made the next Ctrl+Z do nothing.
  if (!changed->empty())
    DW_RETURN_IF_ERROR(model_->applyNodeStates(*changed, tr("Write trained weights")));
  // An Initializer now holding the trained values still takes the trainer's next ones, and
  // again after this write is undone (its origin state).
  for (const Node& n : *changed)
    if (auto it = origins_.find(n.id); it != origins_.end()) it->second.add(n);
  unsynced_ = false;
  emit weightsStateChanged();
  return Status();
}

void TrainingPanel::WeightOrigin::add(const Node& n) {
  if (n.type == "Initializer")
    initializer.push_back(n.params);
  else
    storedWeights.push_back(weightsKey(n.weights));
}

size_t TrainingPanel::weightsKey(const std::map<std::string, std::string>& weights) {
  size_t h = weights.size();
  for (const auto& [name, bytes] : weights)
    h = h * 1000003u ^ std::hash<std::string>{}(name) ^ (std::hash<std::string>{}(bytes) << 1);
  return h;
}

bool TrainingPanel::keepsTrainedValues(const Graph& doc, const Node& now) const {
  auto it = origins_.find(now.id);
  if (it == origins_.end()) return false;
  if (now.type == "Initializer") {
    const auto& states = it->second.initializer;
    return std::find(states.begin(), states.end(), now.params) != states.end();
  }
  const auto& stored = it->second.storedWeights;
  if (std::find(stored.begin(), stored.end(), weightsKey(now.weights)) == stored.end())
    return false;
  // Graph::setParam drops a layer's stored weights when its seed changes; the trainer's copy of
  // them goes the same way. A changed shape needs nothing here: lowering restarts a layer whose
  // stored weights no longer fit from its seed.
  return doc.param(now.id, "seed") == it->second.seed;
}

std::string TrainingPanel::layerState(const Graph& doc, NodeId id) const {
  std::string state;
  if (const Node* n = doc.node(id))
    for (const auto& [name, p] : n->params) state += name + "=" + p.toDisplay() + ";";
  // The model's inferred types are those of the canvas, which is what every caller passes.
  for (const Link& l : doc.links())
    if (l.to.node == id && !l.isGraphLink())
      state += "in" + std::to_string(l.to.port) + ":" + model_->linkLabel(l).toStdString() + ";";
  return state;
}

void TrainingPanel::rememberTrainedLayers() {
  if (!worker_->trainer_ || !trained_ || busy_) return;
  Graph copy = model_->graph();
  if (!worker_->trainer_->writeWeightsTo(copy).ok()) return;
  for (const auto& [id, n] : copy.nodes()) {
    auto o = origins_.find(id);
    if (n.weights.empty() || o == origins_.end() || o->second.layerState.empty()) continue;
    auto& states = earlierLayers_[id];
    std::erase_if(states, [&](const EarlierLayer& e) { return e.state == o->second.layerState; });
    states.push_back({o->second.layerState, n.weights});
    constexpr size_t kStatesPerLayer = 4;
    if (states.size() > kStatesPerLayer) states.erase(states.begin());
  }
}

Result<std::vector<Node>> TrainingPanel::trainedStates(const Graph& doc) const {
  Graph copy = doc;
  DW_RETURN_IF_ERROR(worker_->trainer_->writeWeightsTo(copy));
  std::vector<Node> changed;
  for (const auto& [id, n] : copy.nodes()) {
    const Node* cur = doc.node(id);
    if (!cur) continue;
    Node chosen = n;
    bool keeps = keepsTrainedValues(doc, *cur);
    // A layer in another state than the trainer was built with takes the values trained in its
    // present state earlier, where there are some (the undo of a change of units).
    if (auto e = earlierLayers_.find(id); e != earlierLayers_.end()) {
      const std::string now = layerState(doc, id);
      auto o = origins_.find(id);
      if (o == origins_.end() || o->second.layerState != now)
        for (auto it = e->second.rbegin(); it != e->second.rend(); ++it)
          if (it->state == now) {
            chosen.weights = it->weights;
            keeps = true;
            break;
          }
    }
    if (keeps && (cur->params != chosen.params || cur->weights != chosen.weights))
      changed.push_back(std::move(chosen));
  }
  return changed;
}

Graph TrainingPanel::canvasWithTrainedValues() {
  // The layer states below read the canvas's inferred types: after an edit's debounce they
  // would still be the last validation's.
  model_->validateNow();
  rememberTrainedLayers();
  Graph g = model_->graph();
  if (!worker_->trainer_ || !trained_) return g;
  auto states = trainedStates(g);
  if (!states.ok()) {
    emit statusMessage(tr("Trained weights not kept: %1").arg(qs(states.message())));
    return g;
  }
  for (const Node& n : *states) applyNodeState(g, n);
  return g;
}

void TrainingPanel::onTrainerBuilt(const std::shared_ptr<const Graph>& document,
                                   const QString& notice) {
  awaitingTrainer_ = false;
  pendingNotice_ = notice;
  processWroteWeights_ = false;
  origins_.clear();
  if (!document) return;
  // The canvas is the document still: edits wait while a job runs (GraphModel::setLocked).
  model_->validateNow();
  for (const auto& [id, n] : document->nodes()) {
    WeightOrigin& o = origins_[id];
    o.add(n);
    if (n.type != "Initializer") {
      o.seed = document->param(id, "seed");
      o.layerState = layerState(*document, id);
    }
  }
}

Status TrainingPanel::saveCheckpoint(const QString& dir) {
  if (busy_)
    return Status::error("training is running; press Stop and wait for it to finish first");
  // A Fit across processes' checkpoint that no step has loaded yet is the training so far.
  if (!resumeFrom_.isEmpty()) return copyCheckpoint(resumeFrom_.toStdString(), dir.toStdString());
  if (!worker_->trainer_)
    return Status::error(
        "nothing trained in the studio yet: press Train Step, Full Train Step or Fit first");
  return worker_->trainer_->saveCheckpoint(dir.toStdString());
}

void TrainingPanel::clearResume() {
  resumeFrom_.clear();
  resumeDir_.reset();
  resumeGraph_.reset();
}

void TrainingPanel::loadCheckpoint(const QString& dir) {
  if (busy_) return;
  // It replaces what a Fit across processes left to continue from.
  clearResume();
  loadFrom_ = dir;
  start(Job::LoadCheckpoint);
}

std::optional<TrainerCounters> TrainingPanel::trainerCounters() const {
  if (!worker_->trainer_) return std::nullopt;
  return worker_->trainer_->counters();
}

void TrainingPanel::onResumed(const QString& error) {
  clearResume();
  if (!error.isEmpty()) {
    pendingWarning_ = tr("the trainer starts from the graph's weights with a fresh optimizer "
                         "state: the checkpoint could not be loaded (%1)")
                          .arg(error);
    return;
  }
  // The trainer holds the checkpoint's weights, which the graph may not: Save writes them.
  trained_ = true;
  unsynced_ = true;
  emit weightsStateChanged();
}

void TrainingPanel::onCheckpointLoaded(const QString& summary,
                                       const std::vector<EpochReport>& history) {
  // The checkpoint's epochs, as its run's Fit drew them, in place of what the charts showed: its
  // steps count from its own start, and the next step continues from its last.
  clearCharts();
  stepOffset_ = lastStep_ = 0;
  epochOffset_ = lastEpoch_ = 0;
  QList<QPointF> losses, metrics;
  for (const EpochReport& e : history) {
    const double x = double(e.trainSteps);
    if (std::isfinite(e.trainLoss)) losses.append({x, e.trainLoss});
    if (const double m = headlineMetric(e.trainMetrics); std::isfinite(m)) metrics.append({x, m});
  }
  trainLossLine_->append(losses);
  trainMetricLine_->append(metrics);
  for (const EpochReport& e : history)
    onEpoch(e.epoch, e.trainSteps, e.hasTest, e.testLoss, evalMetric(e));
  if (const auto c = trainerCounters()) lastStep_ = c->trainSteps;
  onFinished(QString(), summary);
  const Status st = writeWeightsToGraph();
  if (!st.ok()) {
    error_->setText(tr("The checkpoint was loaded, but its weights could not be written to the "
                       "graph: %1")
                        .arg(qs(st.message())));
    error_->show();
    return;
  }
  // The graph's values from before the load are no longer the trainer's: an Undo of the load
  // brings them back for the next trainer to start from (a trial's undo kept training the
  // checkpoint's weights). Values the load did not change stay the trainer's.
  for (auto& [id, o] : origins_)
    if (const Node* n = model_->graph().node(id)) {
      o.initializer.clear();
      o.storedWeights.clear();
      o.add(*n);
    }
  result_->setText(summary + tr("; its weights are in the graph, and the next step or Fit goes "
                                "on with its optimizer state (Undo goes back to the weights "
                                "before it; Reset Weights starts afresh)"));
}

Status TrainingPanel::resetWeights() {
  if (busy_)
    return Status::error(
        "training is running; press Stop and wait for it to finish, then reset the weights");
  // The trained values the graph does not hold yet go into it first, a step of their own, so
  // that Undo of the reset brings them back (they lived only in the trainer, and a trial's
  // reset lost a Fit for good).
  Status st;
  if (unsynced_ && trained_ && worker_->trainer_) st = copyTrainedWeights();
  if (st.ok()) {
    forgetTrainer();
    earlierLayers_.clear();
    std::vector<Node> cleared;
    for (const auto& [id, n] : model_->graph().nodes())
      if (!n.weights.empty()) {
        Node c = n;
        c.weights.clear();
        cleared.push_back(std::move(c));
      }
    if (!cleared.empty()) st = model_->applyNodeStates(cleared, tr("Reset weights"));
  }
  emit weightsStateChanged();
  return st;
}

void TrainingPanel::resetForNewDocument() {
  // The document the run trains is gone (the model was already reset): nothing to write back.
  abandonProcessFit();
  stopAndWaitForJob();
  worker_->trainer_.reset();
  worker_->predictor_.reset();
  worker_->dataKey_.clear();
  graphDirty_ = true;
  unsynced_ = false;
  trained_ = false;
  awaitingTrainer_ = false;
  origins_.clear();
  earlierLayers_.clear();
  deviceNotice_.clear();
  stepOffset_ = lastStep_ = 0;
  epochOffset_ = lastEpoch_ = 0;
  clearCharts();
  result_->clear();
  error_->hide();
  lastError_.clear();
  progress_->setValue(0);
  throughput_->setText(tr("— samples/s"));
  emit weightsStateChanged();
}

void TrainingPanel::start(Job job) {
  if (busy_) return;
  const bool load = job == Job::LoadCheckpoint;
  const QString notReady = load ? QString() : data_->readiness();
  if (!notReady.isEmpty()) {
    lastError_ = tr("The data is not ready: %1.").arg(notReady);
    lastErrorIsData_ = true;
    error_->setText(lastError_);
    error_->show();
    emit statusMessage(lastError_);
    emit showDataRequested();
    emit jobFinished();
    return;
  }
  if (job == Job::Fit && processes_->value() > 1) return startProcessFit();
  JobRequest req;
  req.job = static_cast<int>(job);
  const bool predict = job == Job::Predict;
  dirtyBeforeJob_ = graphDirty_;
  // Predict reads the canvas: an undo it sees may still be redone before the next step.
  if (!predict) {
    dropStaleResume();
    req.resumeFrom = (load ? loadFrom_ : resumeFrom_).toStdString();
  }
  req.rebuild = graphDirty_ || (!predict && !worker_->trainer_) || !req.resumeFrom.empty();
  if (req.rebuild && !predict) {  // the new trainer counts from 0
    offsetsBeforeJob_ = {stepOffset_, epochOffset_};
    stepOffset_ = lastStep_;
    epochOffset_ = lastEpoch_;
    // ...or from the steps of the checkpoint a Fit in processes handed back, which go on from
    // the studio's own (charted up to lastStep_): the next step was drawn twice as far right.
    // The same for its epochs: a trial's Fit after a Fit in processes numbered its epoch 15 for
    // 8 (the checkpoint's 7 counted on top of the 7 charted).
    if (!load && !req.resumeFrom.empty())
      if (auto c = readCheckpointCounters(req.resumeFrom); c.ok()) {
        stepOffset_ = std::max<qint64>(0, lastStep_ - c->trainSteps);
        epochOffset_ = std::max<qint64>(0, lastEpoch_ - c->epoch);
      }
    req.document = std::make_shared<const Graph>(model_->graph());
    awaitingTrainer_ = true;
  }
  pendingNotice_.clear();
  // A new trainer (or Predict's session) starts from the trained values, carried in without
  // touching the document: writing them into it made them an undo step, and undoing that step
  // (with a rename before it) made the next trainer start from the untrained weights.
  req.graph =
      std::make_shared<const Graph>(req.rebuild ? canvasWithTrainedValues() : model_->graph());
  req.options = currentOptions();
  req.config = currentConfig();
  if ((job == Job::FullTrainStep || job == Job::Fit) && req.config.optimizer.lr == 0)
    pendingWarning_ =
        tr("the learning rate is 0, so the optimizer leaves the weights as they "
           "are. Set a learning rate in the Training dock (0.001 suits Adam).");
  req.baseDir =
      projectDir_.isEmpty() ? QDir::currentPath().toStdString() : projectDir_.toStdString();
  cancel_->store(false);
  req.cancel = cancel_;
  // Predict leaves the trainer as it is: the next step still sees the canvas changed.
  if (!predict) graphDirty_ = false;
  error_->hide();
  lastError_.clear();
  setBusy(true);
  if (job == Job::Fit) {
    progress_->setValue(0);
    result_->clear();  // the last run's line would read as this one's until it ends
  }
  emit statusMessage(
      job == Job::Fit
          ? tr("Fitting %1…").arg(count(epochs_->value(), tr("%1 epoch"), tr("%1 epochs")))
          : (predict ? tr("Predicting…")
             : load  ? tr("Loading the checkpoint…")
                     : tr("Running a step…")));
  QMetaObject::invokeMethod(
      worker_, [w = worker_, req] { w->run(req); }, Qt::QueuedConnection);
}

void TrainingPanel::stopAndWaitForJob() {
  if (process_) stopProcessFit();
  cancel_->store(true);
  QElapsedTimer t;
  t.start();
  while (busy_ && t.elapsed() < 60000) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
}

void TrainingPanel::setBusy(bool on) {
  busy_ = on;
  model_->setLocked(on ? tr("Training is running on this model: press Stop, or wait for it to "
                            "finish, before changing the model")
                       : QString());
  for (QPushButton* b :
       {trainStep_, fullStep_, evalStep_, fit_, writeWeights_, predict_, resetWeights_})
    b->setEnabled(!on);
  // A running job trains with the settings it started with: they take no edits until it ends
  // (a trial changed lr during a Fit, with no sign of whether it applied).
  for (QWidget* w :
       std::initializer_list<QWidget*>{processes_, accelerator_, optimizer_, lr_, schedule_,
                                       momentum_, weightDecay_, batchSize_, epochs_})
    w->setEnabled(!on);
  stop_->setEnabled(on);
}

void TrainingPanel::onSteps(const std::vector<StepPoint>& points, double samplesPerSec,
                            double progress, bool updated) {
  if (points.empty()) return;
  QList<QPointF> losses, metrics;
  for (const StepPoint& p : points) {
    const double x = double(stepOffset_ + p.step);
    if (std::isfinite(p.loss)) losses.append({x, p.loss});
    // Train Step and Full Train Step see divergence the way Fit's epochs do (kDivergingGrowth
    // times the trainer's first step): every step that is that far gets the warning.
    if (p.step <= 1 || firstStepLoss_ <= 0)
      firstStepLoss_ = p.loss;
    else if (std::isfinite(p.loss) && p.loss > kDivergingGrowth * firstStepLoss_)
      pendingWarning_ = tr("the training loss grew from %1 (first step) to %2: training is "
                           "diverging. Lower the learning rate or clip the gradients' norm.")
                            .arg(firstStepLoss_, 0, 'g', 4)
                            .arg(p.loss, 0, 'g', 4);
    if (std::isfinite(p.metric)) metrics.append({x, p.metric});
  }
  trainLossLine_->append(losses);
  trainMetricLine_->append(metrics);
  const qint64 step = points.back().step;
  lastStep_ = stepOffset_ + step;
  if (step > 0 && updated) trained_ = true;
  if (step > 0 && updated && !unsynced_) {
    unsynced_ = true;
    emit weightsStateChanged();
  }
  throughput_->setText(tr("%1 samples/s").arg(samplesPerSec, 0, 'f', 0));
  progress_->setValue(int(progress * 1000));
  rescaleAxes();
}

void TrainingPanel::onEpoch(qint64 epoch, qint64 step, bool hasTest, double testLoss,
                            double testAcc) {
  const double x = double(stepOffset_ + step);
  QXYSeries* loss = epoch >= 0 ? static_cast<QXYSeries*>(testLoss_) : evalLoss_;
  QXYSeries* metric = epoch >= 0 ? static_cast<QXYSeries*>(testMetric_) : evalMetric_;
  if (hasTest && std::isfinite(testLoss)) loss->append(x, testLoss);
  if (hasTest && std::isfinite(testAcc)) metric->append(x, testAcc);
  if (epoch >= 0) {
    lastEpoch_ = epochOffset_ + epoch + 1;
    // Best epoch: lowest evaluation loss seen in a Fit.
    if (hasTest && std::isfinite(testLoss) && (best_->count() == 0 || testLoss < bestLoss_)) {
      bestLoss_ = testLoss;
      bestEpoch_ = lastEpoch_;
      best_->clear();
      best_->append(x, testLoss);
    }
    showBestInTitle();
  }
  rescaleAxes();
}

void TrainingPanel::showBestInTitle() {
  if (best_->count() > 0)
    lossChart_->setTitle(tr("Loss — best epoch %1 of %2 (%3 %4)")
                             .arg(bestEpoch_)
                             .arg(lastEpoch_)
                             .arg(evalSetName(data_->spec()))
                             .arg(bestLoss_, 0, 'g', 3));
}

namespace {

const char* const kCurveSeries[] = {"train_loss",  "train_metric",   "eval_loss",
                                    "eval_metric", "eval_step_loss", "eval_step_metric"};

QJsonArray pointsJson(const QXYSeries* s) {
  QJsonArray a;
  for (const QPointF& p : s->points()) a.append(QJsonArray{p.x(), p.y()});
  return a;
}

QList<QPointF> pointsFrom(const QJsonValue& v) {
  QList<QPointF> out;
  for (const QJsonValue& p : v.toArray()) {
    const QJsonArray xy = p.toArray();
    if (xy.size() == 2 && xy[0].isDouble() && xy[1].isDouble())
      out.append({xy[0].toDouble(), xy[1].toDouble()});
  }
  return out;
}

}  // namespace

std::string TrainingPanel::curvesJson() const {
  const QXYSeries* series[] = {trainLoss_,  trainMetric_, testLoss_,
                               testMetric_, evalLoss_,    evalMetric_};
  QJsonObject o;
  bool any = false;
  for (size_t i = 0; i < std::size(series); ++i) {
    any = any || series[i]->count() > 0;
    if (series[i]->count() > 0) o[kCurveSeries[i]] = pointsJson(series[i]);
  }
  if (!any) return std::string();
  o["train_stride"] = qint64(trainLossLine_->stride());
  o["train_metric_stride"] = qint64(trainMetricLine_->stride());
  o["last_step"] = lastStep_;
  o["last_epoch"] = lastEpoch_;
  if (best_->count() > 0)
    o["best"] = QJsonObject{
        {"epoch", bestEpoch_}, {"loss", bestLoss_}, {"step", best_->points().front().x()}};
  return QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString();
}

void TrainingPanel::restoreCurves(const std::string& text) {
  clearCharts();
  const QJsonObject o = QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
  if (o.isEmpty()) return;  // a hand-edited or damaged section costs the charts, not the load
  trainLossLine_->restore(pointsFrom(o["train_loss"]), o["train_stride"].toInteger(1));
  trainMetricLine_->restore(pointsFrom(o["train_metric"]), o["train_metric_stride"].toInteger(1));
  QXYSeries* rest[] = {testLoss_, testMetric_, evalLoss_, evalMetric_};
  for (size_t i = 0; i < std::size(rest); ++i) rest[i]->replace(pointsFrom(o[kCurveSeries[i + 2]]));
  lastStep_ = std::max<qint64>(0, o["last_step"].toInteger());
  lastEpoch_ = std::max<qint64>(0, o["last_epoch"].toInteger());
  // The next trainer counts from 0: its steps and epochs go on from these.
  stepOffset_ = lastStep_;
  epochOffset_ = lastEpoch_;
  const QJsonObject best = o["best"].toObject();
  if (best["loss"].isDouble() && best["step"].isDouble()) {
    bestLoss_ = best["loss"].toDouble();
    bestEpoch_ = best["epoch"].toInteger();
    best_->append(best["step"].toDouble(), bestLoss_);
    showBestInTitle();
  }
  rescaleAxes();
}

void TrainingPanel::clearCharts() {
  for (QXYSeries* s : std::initializer_list<QXYSeries*>{trainLoss_, testLoss_, trainMetric_,
                                                        testMetric_, evalLoss_, evalMetric_})
    s->clear();
  trainLossLine_->clear();
  trainMetricLine_->clear();
  for (auto* series : {testLoss_, testMetric_}) series->setName(evalSetName(data_->spec()));
  best_->clear();
  lossOffScale_->clear();
  metricOffScale_->clear();
  lossChart_->setTitle(tr("Loss"));
  // Later points continue from the last step, so a cleared chart never runs backwards.
  rescaleAxes();
}

void TrainingPanel::onFinished(const QString& error, const QString& summary) {
  setBusy(false);
  if (awaitingTrainer_) {
    // The trainer was not rebuilt: the old one (and its weights) stays, and the next job tries
    // again if the canvas asked for it. A checkpoint that would not load leaves the old trainer
    // as it was, optimizer state and all.
    awaitingTrainer_ = false;
    graphDirty_ = dirtyBeforeJob_ || !worker_->trainer_;
    // The old trainer counts on from its own steps: the axes take back its offsets (a failed
    // Load Checkpoint drew every later step one run's length too far right).
    std::tie(stepOffset_, epochOffset_) = offsetsBeforeJob_;
  }
  QString notice = pendingNotice_;
  pendingNotice_.clear();
  if (!notice.isEmpty()) {
    deviceNotice_ = notice;
    // Where "auto" put the training (and what fell back) is said once per new trainer.
    notice[0] = notice[0].toUpper();
  }
  if (!error.isEmpty()) {
    lastError_ = error;
    // The last result was another job's: left on screen it reads as this one's.
    result_->clear();
    error_->setText(error);
    error_->setToolTip(error);
    error_->show();
    emit statusMessage(tr("Training error: %1").arg(error));
  } else {
    error_->hide();
    // A divergence warning from the job leads, where the status bar cannot cut it off.
    const QString warning = pendingWarning_.isEmpty()
                                ? QString()
                                : tr("<b>Warning</b>: %1").arg(pendingWarning_.toHtmlEscaped());
    pendingWarning_.clear();
    result_->setText(warning.isEmpty() ? summary : warning + QStringLiteral("<br>") + summary);
    if (progress_->value() == 0) progress_->setValue(1000);
    // One line for the status bar: line breaks become separators, other tags go.
    QString line = QString(warning.isEmpty() ? summary : warning + QStringLiteral("<br>") + summary)
                       .replace(QStringLiteral("<br>"), QStringLiteral(" · "))
                       .remove(QRegularExpression(QStringLiteral("<[^>]*>")));
    if (!notice.isEmpty()) line += QStringLiteral(" · ") + notice;
    emit statusMessage(line);
  }
  emit jobFinished();
}

// ---------------------------------------------------------------------------- Fit across processes

namespace {
// A command line as a shell would take it back, for the user to read and rerun.
QString shellQuoted(const QStringList& words) {
  static const QRegularExpression kPlain(QStringLiteral("^[A-Za-z0-9_@%+=:,./-]+$"));
  QStringList out;
  for (const QString& w : words)
    out << (kPlain.match(w).hasMatch()
                ? w
                : QStringLiteral("'") + QString(w).replace("'", "'\\''") + QStringLiteral("'"));
  return out.join(' ');
}
}  // namespace

void TrainingPanel::startProcessFit() {
  const int n = processes_->value();
  auto refuse = [this](const QString& why) {
    lastError_ = why;
    lastErrorIsData_ = false;
    result_->clear();
    error_->setText(why);
    error_->setToolTip(why);
    error_->show();
    emit statusMessage(why);
    emit jobFinished();
  };
  const QString mpirun = QStandardPaths::findExecutable(QStringLiteral("mpirun"));
  if (mpirun.isEmpty())
    return refuse(tr("Fit in %1 processes starts them with Open MPI's mpirun, which is not on "
                     "PATH. Install Open MPI (Debian: apt install openmpi-bin) and start the "
                     "studio again, or set Processes to 1 to fit in the studio.")
                      .arg(n));
  QString looked;
  const QString cli = findDeepwireCli(&looked);
  if (cli.isEmpty())
    return refuse(tr("Fit in %1 processes runs the deepwire command under mpirun, and none was "
                     "found (looked at: %2). Build it (cmake --build build --target deepwire) or "
                     "install it next to the studio, or name it in DEEPWIRE_CLI; or set "
                     "Processes to 1 to fit in the studio.")
                      .arg(n)
                      .arg(looked));
  // The processes read the project from disk, with its data paths relative to its folder.
  const QString project = saveForProcesses ? saveForProcesses() : QString();
  if (project.isEmpty())
    return refuse(tr("Fit in %1 processes trains the saved project, and it was not saved: save "
                     "it, then press Fit again (or set Processes to 1 to fit in the studio).")
                      .arg(n));
  runDir_ =
      std::make_unique<QTemporaryDir>(QDir::temp().filePath(QStringLiteral("deepwire-fit-XXXXXX")));
  if (!runDir_->isValid())
    return refuse(
        tr("Cannot make a folder for the trained project: %1").arg(runDir_->errorString()));
  // The run writes the trained project apart, never over the user's file: the document may be
  // edited while it runs, and the file changes only when the user saves.
  const QString trained = runDir_->filePath(QStringLiteral("trained.dwproj"));
  runGraph_ = std::make_shared<const Graph>(model_->graph());
  runCli_ = cli;
  runProcesses_ = n;
  runBatch_ = std::max(1, batchSize_->value());
  runEpochs_ = epochs_->value();
  runSteps_ = runEpochsDone_ = 0;
  runHasTest_ = false;
  runTestAccuracy_ = -1;
  runSamplesPerSec_ = 0;
  runFirstStep_ = -1;
  runInfo_.clear();
  stdout_.clear();
  processSteps_.clear();
  processDrawn_.invalidate();
  stderr_.clear();
  runStarted_ = stopRequested_ = stopSent_ = false;
  // The axes carry on from the last point, as a rebuilt trainer's do.
  stepOffset_ = lastStep_;
  epochOffset_ = lastEpoch_;

  // The run continues where the studio's training stands: from the checkpoint the last run left,
  // or from one of the studio's trainer (its optimizer state and counters; the saved project
  // holds the weights the trainer started from). A trainer for an edited canvas is left out: the
  // project on disk is the edited one.
  dropStaleResume();
  QString resume = resumeFrom_;
  runEpochBase_ = 0;
  if (resume.isEmpty() && worker_->trainer_ && trained_ && !graphDirty_) {
    resume = runDir_->filePath(QStringLiteral("start"));
    if (Status s = worker_->trainer_->saveCheckpoint(resume.toStdString()); !s.ok())
      return refuse(tr("Cannot save the training so far for the processes to continue from: %1")
                        .arg(qs(s.message())));
  }
  if (!resume.isEmpty()) {
    auto c = readCheckpointCounters(resume.toStdString());
    if (!c.ok()) return refuse(qs(c.message()));
    runEpochBase_ = c->epoch;
  }

  QStringList args{QStringLiteral("-np"), QString::number(n)};
  if (::geteuid() == 0) args << QStringLiteral("--allow-run-as-root");
  // All on this machine: loopback is the network every process shares (a VPN or container
  // bridge mpirun might pick otherwise can leave the processes waiting for each other), and N
  // may exceed the cores by the user's choice.
  args << QStringLiteral("--oversubscribe") << QStringLiteral("--mca")
       << QStringLiteral("btl_tcp_if_include") << QStringLiteral("lo") << QStringLiteral("--mca")
       << QStringLiteral("oob_tcp_if_include") << QStringLiteral("lo");
  // The rest of the settings (optimizer and its parameters, seed, data and its splits,
  // accelerator, threads, precision) travel in the saved project, as `deepwire train` reads it.
  args << cli << QStringLiteral("train") << project << QStringLiteral("--distributed")
       << QStringLiteral("--json") << QStringLiteral("--json-steps") << QStringLiteral("--quiet")
       << QStringLiteral("--epochs") << QString::number(runEpochBase_ + runEpochs_)
       << QStringLiteral("--batch-size") << QString::number(runBatch_)
       << QStringLiteral("--save-project") << trained << QStringLiteral("--checkpoint")
       << runDir_->filePath(QStringLiteral("checkpoint"));
  if (!resume.isEmpty()) args << QStringLiteral("--resume") << resume;
  processCommand_ = shellQuoted(QStringList{QStringLiteral("mpirun")} + args);

  process_ = new QProcess(this);
  process_->setWorkingDirectory(QFileInfo(project).absolutePath());
  connect(process_, &QProcess::readyReadStandardOutput, this, &TrainingPanel::readProcessOutput);
  connect(process_, &QProcess::readyReadStandardError, this, &TrainingPanel::readProcessErrors);
  connect(process_, &QProcess::finished, this, &TrainingPanel::onProcessFinished);
  connect(process_, &QProcess::errorOccurred, this, [this, mpirun](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart || !process_) return;
    const QString why = process_->errorString();
    process_->deleteLater();
    process_ = nullptr;
    runDir_.reset();
    onFinished(tr("Cannot start %1: %2").arg(mpirun, why), QString());
  });
  error_->hide();
  lastError_.clear();
  pendingWarning_.clear();
  setBusy(true);
  progress_->setValue(0);
  // What runs, in words; the whole command (a user trial found it filling the dock) is in the
  // tooltip, to copy into a terminal.
  result_->setText(tr("<b>Fit in %1 processes</b>: %2 of %3, global batch %4 (%5 a process) "
                      "&mdash; the mpirun command is in this line's tooltip")
                       .arg(n)
                       .arg(count(runEpochs_, tr("%1 epoch"), tr("%1 epochs")))
                       .arg(QFileInfo(project).fileName().toHtmlEscaped())
                       .arg(runBatch_)
                       .arg(runBatch_ % n
                                ? QStringLiteral("%1-%2").arg(runBatch_ / n).arg(runBatch_ / n + 1)
                                : QString::number(runBatch_ / n)));
  result_->setToolTip(processCommand_);
  emit statusMessage(tr("Fitting %1 in %2 processes…")
                         .arg(count(runEpochs_, tr("%1 epoch"), tr("%1 epochs")))
                         .arg(n));
  process_->start(mpirun, args);
}

void TrainingPanel::readProcessOutput() {
  if (!process_) return;
  stdout_ += process_->readAllStandardOutput();
  // Rank 0's --json lines: one per step (--json-steps), drawn in bunches, and one per epoch;
  // the other ranks print none.
  qsizetype from = 0;
  for (qsizetype nl; (nl = stdout_.indexOf('\n', from)) >= 0; from = nl + 1) {
    const QByteArray line = stdout_.mid(from, nl - from).trimmed();
    if (!line.startsWith('{')) continue;
    const QJsonDocument doc = QJsonDocument::fromJson(line);
    if (!doc.isObject() || takeProcessStep(doc.object(), processSteps_)) continue;
    if (doc.object().contains(QStringLiteral("epoch"))) {
      drawProcessSteps();  // the epoch's evaluation goes after its steps
      onProcessEpoch(doc.object());
    }
  }
  stdout_.remove(0, from);
  if (processSteps_.empty()) return;
  if (!processDrawn_.isValid() || processDrawn_.elapsed() >= kDrawEveryMs) {
    drawProcessSteps();
  } else if (!processDraw_->isActive()) {
    processDraw_->start(int(kDrawEveryMs - processDrawn_.elapsed()));
  }
}

void TrainingPanel::drawProcessSteps() {
  processDraw_->stop();
  processDrawn_.start();
  if (processSteps_.empty()) return;
  onSteps(processSteps_, runSamplesPerSec_, progress_->value() / 1000.0, false);
  processSteps_.clear();
}

bool TrainingPanel::takeProcessStep(const QJsonObject& line, std::vector<StepPoint>& points) {
  const QJsonValue step = line.value(QStringLiteral("step"));
  if (!step.isDouble()) return false;
  if (runFirstStep_ < 0) {
    runFirstStep_ = step.toInteger();
    runClock_.start();
  }
  runSteps_ = step.toInteger() - runFirstStep_ + 1;
  std::map<std::string, double> metrics;
  const QJsonObject m = line.value(QStringLiteral("metrics")).toObject();
  for (auto it = m.begin(); it != m.end(); ++it) metrics[it.key().toStdString()] = it->toDouble();
  points.push_back({runSteps_, line.value(QStringLiteral("loss")).toDouble(std::nan("")),
                    headlineMetric(metrics)});
  // Until an epoch reports the run's own figure: the global batches done over the time taken.
  if (runEpochsDone_ == 0 && runClock_.elapsed() > 0)
    runSamplesPerSec_ = double(runSteps_ * runBatch_) * 1000.0 / double(runClock_.elapsed());
  const double batches = std::max(1.0, line.value(QStringLiteral("batches")).toDouble());
  const double done = line.value(QStringLiteral("epoch")).toDouble() - double(runEpochBase_) - 1 +
                      line.value(QStringLiteral("batch")).toDouble() / batches;
  progress_->setValue(
      int(std::clamp(done / double(std::max<qint64>(1, runEpochs_)), 0.0, 1.0) * 1000));
  return true;
}

void TrainingPanel::readProcessErrors() {
  if (!process_) return;
  stderr_ += QString::fromLocal8Bit(process_->readAllStandardError());
  if (stderr_.size() > 65536) stderr_ = stderr_.right(65536);
  if (runStarted_) return;
  // Rank 0 says how the run is laid out once every process has its signal handlers: a SIGUSR1
  // before then would end a process that has none, and mpirun would call the job failed.
  // Found anywhere in a line: another rank's output once split the line's "deepwire: " from
  // the rest, and Stop waited for a start it never saw, letting the run go to its last epoch.
  static const QRegularExpression kInfo(QStringLiteral("distributed: \\d+ process[^\n]*\n"));
  const QRegularExpressionMatch m = kInfo.match(stderr_);
  if (!m.hasMatch()) return;
  runStarted_ = true;
  runInfo_ = m.captured(0).trimmed();
  emit statusMessage(tr("Fitting: %1").arg(runInfo_));
  if (stopRequested_) {
    stopRequested_ = false;
    stopProcessFit();
  }
}

void TrainingPanel::onProcessEpoch(const QJsonObject& line) {
  // The epoch's evaluation goes where its last step line put the run (runSteps_).
  const qint64 epoch = line.value(QStringLiteral("epoch")).toInteger() - runEpochBase_;
  runSamplesPerSec_ = line.value(QStringLiteral("samples_per_second")).toDouble();
  runEpochsDone_ = epoch;
  runTrainLoss_ = line.value(QStringLiteral("train_loss")).toDouble(std::nan(""));
  const QJsonValue testLoss = line.value(QStringLiteral("eval_loss"));
  const QJsonValue testAcc = line.value(QStringLiteral("eval_accuracy"));
  runHasTest_ = testLoss.isDouble();
  runTestLoss_ = testLoss.toDouble(std::nan(""));
  runTestAccuracy_ = testAcc.isDouble() ? testAcc.toDouble() : -1;
  lastStep_ = stepOffset_ + runSteps_;
  if (const QJsonValue w = line.value(QStringLiteral("warning")); w.isString())
    pendingWarning_ = tr("epoch %1: %2").arg(epoch).arg(w.toString());
  throughput_->setText(tr("%1 samples/s").arg(runSamplesPerSec_, 0, 'f', 0));
  progress_->setValue(
      int(std::clamp(double(epoch) / double(std::max<qint64>(1, runEpochs_)), 0.0, 1.0) * 1000));
  // onEpoch charts the evaluation and rescales the axes.
  onEpoch(epoch - 1, runSteps_, runHasTest_, runTestLoss_,
          runTestAccuracy_ >= 0 ? runTestAccuracy_ : std::nan(""));
  emit statusMessage(tr("Fit in %1 processes: epoch %2 of %3, train loss %4")
                         .arg(runProcesses_)
                         .arg(epoch)
                         .arg(runEpochs_)
                         .arg(runTrainLoss_, 0, 'g', 5));
}

void TrainingPanel::stopProcessFit() {
  if (!process_) return;
  if (stopSent_ || stopRequested_) {
    // A second Stop: mpirun passes SIGTERM on, and ends what does not stop.
    process_->terminate();
    emit statusMessage(tr("Ending the processes now…"));
    return;
  }
  if (!runStarted_) {
    stopRequested_ = true;
    emit statusMessage(tr("Stopping as soon as every process has started…"));
    return;
  }
  stopSent_ = true;
  ::kill(pid_t(process_->processId()), SIGUSR1);
  emit statusMessage(tr("Stopping every process after the current step…"));
}

void TrainingPanel::abandonProcessFit() {
  if (!process_) return;
  QProcess* p = process_;
  process_ = nullptr;
  disconnect(p, nullptr, this, nullptr);
  p->terminate();
  if (!p->waitForFinished(10000)) {
    p->kill();
    p->waitForFinished(3000);
  }
  delete p;
  processDraw_->stop();
  processSteps_.clear();
  runDir_.reset();
  runGraph_.reset();
  setBusy(false);
  emit jobFinished();
}

QString TrainingPanel::processError(int code) const {
  if (stderr_.contains(QStringLiteral("built without MPI")))
    return tr("The deepwire command %1 was built without MPI, so it cannot train across "
              "processes. Install Open MPI (Debian: apt install libopenmpi-dev openmpi-bin) and "
              "build deepwire again (CMake finds it; -DDEEPWIRE_MPI=ON makes its absence an "
              "error), or set Processes to 1 to fit in the studio.")
        .arg(runCli_);
  // deepwire's own errors, once each: every rank may report the same one, prefixed with its
  // rank and host.
  static const QRegularExpression kRank(QStringLiteral("^rank \\d+ on \\S+: "));
  QStringList errors, seen;
  QStringList tail;
  for (QString line : stderr_.split('\n')) {
    line = line.trimmed();
    if (line.isEmpty()) continue;
    tail << line;
    const qsizetype at = line.indexOf(QStringLiteral("deepwire: error: "));
    if (at < 0) continue;
    const QString message = line.mid(at + 17);
    const QString plain = QString(message).remove(kRank);
    if (seen.contains(plain)) continue;
    seen << plain;
    errors << message;
  }
  // Otherwise what mpirun said last (a process killed, a host unreachable).
  if (errors.isEmpty()) errors = tail.mid(std::max<qsizetype>(0, tail.size() - 12));
  return tr("Fit in %1 processes failed (mpirun exit status %2): %3")
      .arg(runProcesses_)
      .arg(code)
      .arg(errors.isEmpty() ? tr("no message") : errors.join('\n'));
}

Status TrainingPanel::writeProcessWeights(const QString& trainedPath, int* kept) {
  auto trained = loadProject(trainedPath.toStdString());
  if (!trained.ok()) return trained.status();
  const Graph& doc = model_->graph();
  std::vector<Node> changed;
  for (const auto& [id, cur] : doc.nodes()) {
    const Node* before = runGraph_ ? runGraph_->node(id) : nullptr;
    const Node* after = trained->node(id);
    if (!before || !after || after->type != before->type || cur.type != before->type) continue;
    // What the run wrote: an Initializer's values, a layer's stored weights.
    Node next = cur;
    bool wrote = false;
    if (cur.type == "Initializer") {
      for (const char* name : {"fill", "values"}) {
        auto a = after->params.find(name), b = before->params.find(name);
        const bool same = a == after->params.end()
                              ? b == before->params.end()
                              : b != before->params.end() && b->second == a->second;
        if (same) continue;
        wrote = true;
        if (a == after->params.end())
          next.params.erase(name);
        else
          next.params[name] = a->second;
      }
    } else if (after->weights != before->weights) {
      wrote = true;
      next.weights = after->weights;
    }
    if (!wrote) continue;
    // Edited while the run went on: the edit stays (a changed seed or shape would not take the
    // trained values anyway).
    if (cur.params != before->params || cur.weights != before->weights) {
      ++*kept;
      continue;
    }
    changed.push_back(std::move(next));
  }
  if (!changed.empty())
    DW_RETURN_IF_ERROR(model_->applyNodeStates(
        changed, tr("Write trained weights (%1 processes)").arg(runProcesses_)));
  // The studio's own trainer still holds the weights from before the run: the next step builds
  // one from the canvas, which now holds the run's.
  forgetTrainer();
  processWroteWeights_ = true;
  emit weightsStateChanged();
  return Status();
}

void TrainingPanel::dropStaleResume() {
  if (resumeFrom_.isEmpty() || !resumeGraph_) return;
  const Graph& now = model_->graph();
  bool same = now.nodes().size() == resumeGraph_->nodes().size();
  for (const auto& [id, then] : resumeGraph_->nodes()) {
    const Node* n = same ? now.node(id) : nullptr;
    same = n && n->type == then.type && n->params == then.params && n->weights == then.weights;
    if (!same) break;
  }
  if (same) return;
  // Edited, or the run's weights undone: those edits decide, and the optimizer starts afresh.
  clearResume();
}

void TrainingPanel::forgetTrainer() {
  clearResume();
  worker_->trainer_.reset();
  worker_->predictor_.reset();
  origins_.clear();
  trained_ = false;
  unsynced_ = false;
  graphDirty_ = true;
}

void TrainingPanel::onProcessFinished(int code, QProcess::ExitStatus status) {
  readProcessOutput();
  drawProcessSteps();
  readProcessErrors();
  QProcess* p = process_;
  process_ = nullptr;
  if (p) p->deleteLater();
  std::unique_ptr<QTemporaryDir> dir = std::move(runDir_);  // removed on return unless kept
  const QString trained = dir ? dir->filePath(QStringLiteral("trained.dwproj")) : QString();
  // Stopped: every process after the same step, with the weights so far saved; the processes
  // exit 0 on the SIGUSR1 Stop sends (130 on the SIGTERM of a second Stop). A run that ended
  // as Stop was pressed has all its epochs.
  const bool stopped = (stopSent_ || stopRequested_) &&
                       (code == 0 || code == 130 || status == QProcess::CrashExit) &&
                       runEpochsDone_ < runEpochs_ && QFileInfo::exists(trained);
  if (!(status == QProcess::NormalExit && code == 0) && !stopped) {
    runGraph_.reset();
    return onFinished(processError(code), QString());
  }
  int kept = 0;
  const Status st = writeProcessWeights(trained, &kept);
  runGraph_.reset();
  if (!st.ok())
    return onFinished(tr("The run ended, but its trained weights could not be read back: %1")
                          .arg(qs(st.message())),
                      QString());
  // The next trainer continues from the run's last checkpoint: its optimizer state and counters
  // (a studio step after a Fit across processes started Adam's moments from zero). Not where a
  // node was edited during the run: the checkpoint would put the trained weights back over it.
  const QString checkpoint = dir->filePath(QStringLiteral("checkpoint"));
  if (kept == 0 &&
      QFileInfo::exists(QDir(checkpoint).filePath(QStringLiteral("checkpoint.json")))) {
    resumeFrom_ = checkpoint;
    resumeDir_ = std::move(dir);
    resumeGraph_ = std::make_shared<const Graph>(model_->graph());
  }
  QString summary;
  if (stopped)
    summary = tr("<b>Fit stopped</b> in %1 processes after %2")
                  .arg(runProcesses_)
                  .arg(count(runEpochsDone_, tr("%1 complete epoch"), tr("%1 complete epochs")));
  else
    summary =
        tr("<b>Fit</b> in %1 processes: %2, train loss %3%4, %5 samples/s")
            .arg(runProcesses_)
            .arg(count(runEpochsDone_, tr("%1 epoch"), tr("%1 epochs")))
            .arg(runTrainLoss_, 0, 'g', 5)
            .arg(runHasTest_ ? tr(", %1 loss %2%3")
                                   .arg(evalSetName(data_->spec()))
                                   .arg(runTestLoss_, 0, 'g', 5)
                                   .arg(runTestAccuracy_ >= 0
                                            ? tr(", accuracy %1").arg(runTestAccuracy_, 0, 'f', 4)
                                            : QString())
                             : QString())
            .arg(runSamplesPerSec_, 0, 'f', 0);
  summary += tr("; the trained weights are in the graph (Undo takes them out)");
  if (kept > 0)
    summary += tr("; %1 edited during the run kept the edit, not the trained weights")
                   .arg(count(kept, tr("%1 node"), tr("%1 nodes")));
  if (!runInfo_.isEmpty()) summary += QStringLiteral("<br>") + runInfo_.toHtmlEscaped();
  onFinished(QString(), summary);
}

QDoubleSpinBox* TrainingPanel::learningRateBox() const {
  return lr_;
}

int TrainingPanel::trainPoints() const {
  return trainLoss_->count();
}

int TrainingPanel::seriesPoints(const QString& which) const {
  if (which == QLatin1String("train loss")) return trainLoss_->count();
  if (which == QLatin1String("validation loss")) return testLoss_->count();
  if (which == QLatin1String("train metric")) return trainMetric_->count();
  if (which == QLatin1String("validation metric")) return testMetric_->count();
  if (which == QLatin1String("eval step loss")) return evalLoss_->count();
  if (which == QLatin1String("eval step metric")) return evalMetric_->count();
  return -1;
}

void TrainingPanel::applyLogScale() {
  QAbstractAxis* old = lossChart_->axes(Qt::Vertical).first();
  QAbstractAxis* y = nullptr;
  if (logScale_->isChecked()) {
    auto* log = new QLogValueAxis;
    log->setBase(10);  // rescaleAxes picks the base that labels the range
    log->setLabelFormat(QStringLiteral("%.3g"));
    y = log;
  } else {
    auto* lin = new QValueAxis;
    lin->setLabelFormat(QStringLiteral("%.3g"));
    y = lin;
  }
  for (QAbstractSeries* s : lossChart_->series()) s->detachAxis(old);
  lossChart_->removeAxis(old);
  delete old;
  lossChart_->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : lossChart_->series()) s->attachAxis(y);
  rescaleAxes();
}

void TrainingPanel::rescaleAxes() {
  auto fit = [this](QChart* chart, std::initializer_list<QXYSeries*> series,
                    QScatterSeries* offScale, bool log) {
    double x0 = INFINITY, x1 = -INFINITY;
    // Each series' range, outliers left out of each: a validation curve far above an
    // overfitting train curve is no outlier of it, and stays on the chart.
    // Eval Step markers are single batches, judged with the train line they sit on (alone, a
    // few points never have an outlier).
    double y0 = NAN, y1 = NAN;
    std::vector<std::vector<double>> values(series.size());
    size_t k = 0;
    for (QXYSeries* s : series) {
      // Markers while a series is sparse, so a single point shows; a line once it is dense.
      const bool line = s->type() == QAbstractSeries::SeriesTypeLine;
      if (line) s->setPointsVisible(s->count() <= 60);
      std::vector<double>& ys = values[line ? k : 0];
      for (const QPointF& p : s->points()) {
        if (log && p.y() <= 0) continue;
        x0 = std::min(x0, p.x());
        x1 = std::max(x1, p.x());
        ys.push_back(p.y());
      }
      ++k;
    }
    for (std::vector<double>& ys : values) {
      const auto [lo, hi] = robustRange(std::move(ys), ignoreOutliers_->isChecked(), log);
      if (std::isfinite(lo)) {
        y0 = std::isfinite(y0) ? std::min(y0, lo) : lo;
        y1 = std::isfinite(y1) ? std::max(y1, hi) : hi;
      }
    }
    // No points (a graph without a metric): the steps so far, not a one-step window at the end.
    if (!std::isfinite(x0)) {
      x0 = 0;
      x1 = double(lastStep_);
    }
    // Whole steps: a tick every 1, 2 or 5 x 10^k steps, about five of them.
    double span = std::max(5.0, x1 - x0);
    double tick = std::pow(10.0, std::floor(std::log10(span / 5)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
      if (span / (tick * m) <= 6) {
        tick *= m;
        break;
      }
    tick = std::max(1.0, tick);
    x0 = std::floor(x0 / tick) * tick;
    x1 = std::max(x0 + tick, std::ceil(x1 / tick) * tick);
    auto* x = static_cast<QValueAxis*>(chart->axes(Qt::Horizontal).first());
    x->setTickType(QValueAxis::TicksDynamic);
    x->setTickAnchor(0);
    x->setTickInterval(tick);
    x->setRange(x0, x1);
    QAbstractAxis* yAxis = chart->axes(Qt::Vertical).first();
    if (log) {
      // No points yet: a plain range that still has labels.
      const LogAxisRange r = std::isfinite(y0) ? niceLogRange(y0, y1) : niceLogRange(0.1, 1, 1);
      auto* y = static_cast<QLogValueAxis*>(yAxis);
      y->setBase(r.base);
      y->setMinorTickCount(r.minorTicks);
      y->setRange(r.min, r.max);
    } else if (!std::isfinite(y0)) {  // no points yet: a plain unit range
      yAxis->setRange(0, 1);
      // In fifths: the tick count a cleared chart kept from its last curve read 0.167, 0.333.
      if (auto* y = qobject_cast<QValueAxis*>(yAxis)) y->setTickCount(6);
    } else {
      // At least 2% of the value: a flat curve still gets ticks that differ at 3 figures.
      const double pad = std::max(std::abs(y1) * 0.02 + 1e-6, (y1 - y0) * 0.08);
      auto* y = static_cast<QValueAxis*>(yAxis);
      y->setRange(y0 >= 0 ? std::max(0.0, y0 - pad) : y0 - pad, y1 + pad);
      if (chart == metricChart_ && y0 >= 0 && y1 <= 1) {
        y->setRange(0, 1);  // accuracies live in [0, 1]: the whole range, not a sliver
        y->setTickCount(6);
      } else {
        y->applyNiceNumbers();  // ticks at 0.5, 1, 2, ... rather than 1.82, 3.64
      }
    }
    // What the range leaves out goes on its edge.
    double lo = 0, hi = 0;
    if (auto* lin = qobject_cast<QValueAxis*>(yAxis)) {
      lo = lin->min();
      hi = lin->max();
    } else if (auto* lg = qobject_cast<QLogValueAxis*>(yAxis)) {
      lo = lg->min();
      hi = lg->max();
    }
    QList<QPointF> off;
    for (QXYSeries* s : series)
      for (const QPointF& p : s->points()) {
        if (!std::isfinite(p.y()) || (log && p.y() <= 0)) continue;
        if (p.y() > hi) off.append({p.x(), hi});
        if (p.y() < lo) off.append({p.x(), lo});
      }
    offScale->replace(off);
    // Only on a change, with the legend laid out again: a marker made visible at every redraw
    // sometimes showed without its label, on top of another marker.
    for (QLegendMarker* m : chart->legend()->markers(offScale))
      if (m->isVisible() == off.isEmpty()) {
        m->setVisible(!off.isEmpty());
        if (QGraphicsLayout* l = chart->legend()->layout()) l->invalidate();
      }
  };
  fit(lossChart_, {trainLoss_, testLoss_, evalLoss_}, lossOffScale_, logScale_->isChecked());
  fit(metricChart_, {trainMetric_, testMetric_, evalMetric_}, metricOffScale_, false);
  // Steps charted and no metric among them: the graph computes none, and the empty chart says
  // how to get one rather than looking broken.
  const bool noMetric = trainLoss_->count() > 0 && trainMetric_->count() == 0 &&
                        testMetric_->count() == 0 && evalMetric_->count() == 0;
  // Titles set only when they change: this runs for every bunch of steps, and a new title
  // lays the chart out again.
  const QString metricTitle =
      noMetric ? tr("No metric: add one from deepwire.metrics") : tr("Metric (accuracy)");
  if (metricChart_->title() != metricTitle) metricChart_->setTitle(metricTitle);
  // A long run's train line is drawn from means of steps (DecimatedLine): the axis says so.
  for (const auto& [chart, line] : {std::pair{lossChart_, trainLossLine_.get()},
                                    std::pair{metricChart_, trainMetricLine_.get()}}) {
    QAbstractAxis* x = chart->axes(Qt::Horizontal).first();
    const QString title = line->stride() > 1
                              ? tr("step (a train point: the mean of %1 steps)").arg(line->stride())
                              : tr("step");
    if (x->titleText() != title) x->setTitleText(title);
  }
}

int TrainingPanel::offScalePoints(QChart* chart) const {
  return chart == lossChart_     ? lossOffScale_->count()
         : chart == metricChart_ ? metricOffScale_->count()
                                 : -1;
}

}  // namespace dw::studio
