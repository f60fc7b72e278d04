// The Training dock: accelerator, processes, dataset, optimizer, batch size and epochs, the step
// buttons, progress, throughput, and live loss/metric charts. All training in the studio's own
// process runs on one worker thread that owns the engine's Trainer; the GUI thread only posts jobs
// and receives reports, so the window never freezes, and Stop cancels a Fit before its next step.
// With Processes above 1, Fit runs `mpirun -np N deepwire train --distributed` on the saved
// project instead, as a QProcess whose JSON lines feed the same charts.
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QLabel>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "app/studio/data_panel.h"
#include "app/studio/decimated_line.h"
#include "app/studio/graph_model.h"
#include "engine/training/trainer.h"

namespace onnx {
class ModelProto;
}

QT_BEGIN_NAMESPACE
class QChart;
class QChartView;
class QLineSeries;
class QScatterSeries;
class QXYSeries;
class QAbstractAxis;
class QJsonObject;
QT_END_NAMESPACE

namespace dw::studio {

// A log axis that labels several ticks for any range of positive values. QLogValueAxis labels
// only the powers of its base, so base 10 over a loss between 0.3 and 3 labelled "1" and nothing
// else: the base is the largest of 100, 10, 4, 2, sqrt(2), 2^(1/4), ... that puts at least four
// powers in the range, and the range runs from a power to a power, so both ends are labelled.
struct LogAxisRange {
  double base = 10, min = 0.1, max = 1;
  int minorTicks = 0;
  int labelledTicks = 0;  // the powers of `base` within [min, max]
};
LogAxisRange niceLogRange(double lo, double hi, double pad = 1.02);

// The y range a chart shows for `values`. With `ignoreOutliers`, TensorBoard's rule: the 5th to
// 95th percentile (nearest rank, so that fewer than 20 values are all kept) widened by a fifth of
// its span (at least a tenth of the values), but never past the values themselves; a few blown-up
// losses after a divergence then no longer flatten the rest of the curve. `log`: the same in log
// space, over positive values only. {NaN, NaN} without values.
std::pair<double, double> robustRange(std::vector<double> values, bool ignoreOutliers, bool log);

// The deepwire command a Fit across processes starts under mpirun: $DEEPWIRE_CLI, else the one
// next to the studio (an installed pair, or the build tree's app/cli), else the one on PATH. ""
// when there is none; `looked` then says where it looked.
QString findDeepwireCli(QString* looked = nullptr);

class ScientificSpinBox;
class TrainingWorker;

class TrainingPanel : public QWidget {
  Q_OBJECT
 public:
  TrainingPanel(GraphModel* model, QWidget* parent = nullptr);
  ~TrainingPanel() override;

  // Relative dataset paths resolve against the project's folder.
  void setProjectDir(const QString& dir);
  QString projectDir() const { return projectDir_; }
  // The project was saved into `dir` with its data paths rebased there (rebaseDataPaths): the
  // Data panel takes them from the model's training section.
  void movedTo(const QString& dir);
  // The Data dock's panel (created here: the dataset is part of the training settings).
  DataPanel* dataPanel() const { return data_; }
  // Forgets the trainer, the charts and the results (New, Open, Import).
  void resetForNewDocument();
  // Trained weights the graph does not hold yet (the document is modified until they are
  // written and saved).
  bool hasUnsyncedWeights() const { return unsynced_; }
  // The dock's or the Data panel's settings changed since the project was opened or saved.
  bool hasUnsavedSettings() const { return touched_; }
  void markSettingsSaved();
  // Writes the trained weights into the graph when it lacks them (before Save and Export).
  dw::Status syncWeights();
  // The inference model of the canvas, with the data conversion in front of its inputs unless
  // `withDataConversion` is false, checked.
  dw::Result<onnx::ModelProto> exportInferenceModel(bool withDataConversion);
  // Writes the dock's settings into the project's "training" section, and the charts' curves
  // into its "curves" section (before a save).
  void storeSettingsInModel();
  // The document as a save would write it, leaving the document itself alone: the dock's
  // settings in its training section and, unless a job is using the trainer, the trained
  // weights carried in (the autosave, which must recover what a crash would lose).
  dw::Graph documentToKeep() const;
  // The gradient graph of the current canvas, for "Export ONNX with training info".
  dw::Result<onnx::ModelProto> exportTrainingModel();

  QPushButton* trainStepButton() const { return trainStep_; }
  QPushButton* evalStepButton() const { return evalStep_; }
  QPushButton* predictButton() const { return predict_; }
  QPushButton* fullTrainStepButton() const { return fullStep_; }
  QPushButton* fitButton() const { return fit_; }
  QPushButton* stopButton() const { return stop_; }
  QPushButton* writeWeightsButton() const { return writeWeights_; }
  QPushButton* resetWeightsButton() const { return resetWeights_; }
  // Copies the trained weights into the graph's Initializer nodes (one undo step).
  dw::Status writeWeightsToGraph();
  // The trainer's weights, optimizer state and counters into checkpoint directory `dir`, as
  // `deepwire train --checkpoint` writes one (`--resume` continues from it).
  dw::Status saveCheckpoint(const QString& dir);
  // Starts from checkpoint directory `dir` (one of `deepwire train --checkpoint`, or of Save
  // Checkpoint): a trainer for the canvas takes its weights, optimizer state and counters, and
  // the weights go into the graph (one undo step). Runs as a job: jobFinished() ends it, and
  // lastError() says why it could not (a checkpoint of another model).
  void loadCheckpoint(const QString& dir);
  // Where the trainer stands (epoch, batch, optimizer steps); nullopt before the first job.
  std::optional<dw::engine::training::TrainerCounters> trainerCounters() const;
  // Forgets the trained weights and the optimizer's state: the next job starts every layer again
  // from its seed (stored layer weights are dropped from the graph, one undo step).
  dw::Status resetWeights();
  // The device the last trainer reported it runs on ("" before the first or without a notice).
  QString deviceNotice() const { return deviceNotice_; }
  QSpinBox* batchSizeBox() const { return batchSize_; }
  // How many processes Fit trains in: 1 in the studio, more under mpirun on this machine. A
  // setting of the machine (its cores, its Open MPI), not of the project: kept in QSettings.
  QSpinBox* processesBox() const { return processes_; }
  // Called before a Fit across processes, which reads the project from disk: saves the document
  // (asking where when it has no file yet) and returns its path, or "" when it was not saved.
  std::function<QString()> saveForProcesses;
  // The command line of the last Fit across processes ("" before one).
  QString processCommand() const { return processCommand_; }
  QComboBox* acceleratorBox() const { return accelerator_; }
  QLabel* dataStatusLabel() const { return dataStatus_; }
  // Points on the charts' series, for tests: train loss / train metric per step, validation
  // loss / metric per epoch of a Fit, eval step loss / metric per Eval Step.
  int seriesPoints(const QString& which) const;
  QChart* lossChart() const { return lossChart_; }
  QChart* metricChart() const { return metricChart_; }
  QSpinBox* epochsBox() const { return epochs_; }
  QComboBox* optimizerBox() const { return optimizer_; }
  QComboBox* scheduleBox() const { return schedule_; }
  // The dock's settings: the project's config with the widgets' values applied.
  dw::engine::training::TrainingConfig currentConfig() const;
  QDoubleSpinBox* learningRateBox() const;
  QCheckBox* logScaleBox() const { return logScale_; }
  QCheckBox* ignoreOutliersBox() const { return ignoreOutliers_; }
  // Points drawn at a chart's edge because they lie outside its range (ignored outliers).
  int offScalePoints(QChart* chart) const;
  bool busy() const { return busy_; }
  QString lastError() const { return lastError_; }
  QString lastResult() const { return result_->text(); }
  int trainPoints() const;  // points on the train-loss curve
  void stopAndWait();
  // Cancels a running job and waits (processing events) until it has finished.
  void stopAndWaitForJob();

 signals:
  void statusMessage(const QString& text);
  // A message this panel put in the status bar no longer holds: clear the bar if it shows it.
  void staleStatus(const QString& text);
  void showDataRequested();    // the user asked for the Data dock
  void weightsStateChanged();  // trained weights appeared in, or were written from, the trainer
  void settingsChanged();      // hasUnsavedSettings() may have changed
  void jobFinished();          // after every job, successful or not

 private:
  friend class TrainingWorker;
  enum class Job { TrainStep, FullTrainStep, EvalStep, Fit, Predict, LoadCheckpoint };
  void start(Job job);
  void loadSettingsFromModel();
  // Whether the project keeps a training section (not one of defaults only).
  bool settingsToKeep() const;
  // One chart point per training step (step, loss, headline metric); Fit sends them in bunches.
  struct StepPoint {
    qint64 step;
    double loss, metric;
  };
  // `updated`: the optimizer changed the weights (not after a Train Step, which only adds up
  // gradients: the graph then still holds what the trainer holds, and Save has nothing to write).
  void onSteps(const std::vector<StepPoint>& points, double samplesPerSec, double progress,
               bool updated = true);
  // epoch < 0: an Eval Step (one batch), charted apart from a Fit's per-epoch evaluation.
  void onEpoch(qint64 epoch, qint64 step, bool hasTest, double testLoss, double testAcc);
  void clearCharts();
  // The charts as the project keeps them (a reopened project showed empty charts, its training
  // history lost): the drawn points of each line, the best epoch, and where steps and epochs
  // stood, so the next training continues to the right. "" when nothing is charted.
  std::string curvesJson() const;
  void restoreCurves(const std::string& text);
  void showBestInTitle();
  // --- Fit across processes (mpirun) ---
  void startProcessFit();
  void readProcessOutput();
  void readProcessErrors();
  // Drops the studio's own trainer (and predictor): the next job builds one from the canvas.
  void forgetTrainer();
  // Forgets the checkpoint a Fit across processes left if the document changed since.
  void dropStaleResume();
  // Forgets the checkpoint the next trainer was to start from.
  void clearResume();
  void onProcessEpoch(const QJsonObject& line);
  // Steps of one read of the run's output; false when `line` is no step line.
  bool takeProcessStep(const QJsonObject& line, std::vector<StepPoint>& points);
  void onProcessFinished(int code, QProcess::ExitStatus status);
  // SIGUSR1 to mpirun: every process stops after the same step and saves what it trained.
  void stopProcessFit();
  // What the run's stderr says went wrong: deepwire's own error lines, else its last lines.
  QString processError(int code) const;
  // The trained project's weights into the document (one undo step), for the nodes the user
  // left alone since the run started; `kept` counts those edited meanwhile, which keep the edit.
  dw::Status writeProcessWeights(const QString& trainedPath, int* kept);
  // Ends a run whose document is going away (New, Open, close): its weights are not wanted.
  void abandonProcessFit();
  // The trainer's weights into the graph (one undo step), whatever the canvas did since, except
  // where an edit since invalidated them (keepsTrainedValues).
  dw::Status copyTrainedWeights();
  // The worker built a trainer from `document` (the canvas as it was, before the trained values
  // were carried in); `notice` says where it runs.
  void onTrainerBuilt(const std::shared_ptr<const dw::Graph>& document, const QString& notice);
  // The new trainer took the checkpoint of JobRequest::resumeFrom ("" error), or could not (it
  // then starts from the canvas with a fresh optimizer state, and says so).
  void onResumed(const QString& error);
  // Load Checkpoint's job finished: the summary, then the weights into the graph.
  void onCheckpointLoaded(const QString& summary,
                          const std::vector<dw::engine::training::EpochReport>& history);
  // Whether node `now` of the canvas still takes the trainer's values: not after its layer's seed
  // changed (which drops stored weights), nor after an Initializer was edited, since the trainer
  // was built; not for a node the trainer was not built with.
  bool keepsTrainedValues(const dw::Graph& doc, const dw::Node& now) const;
  // The nodes of `doc` with the trainer's values written in, those that keep them only.
  dw::Result<std::vector<dw::Node>> trainedStates(const dw::Graph& doc) const;
  // The canvas with the trained values carried in: what a rebuilt trainer, Predict and the
  // training export start from, so that an edit never loses what was trained.
  dw::Graph canvasWithTrainedValues();
  void updateDataStatus();
  void describeSchedule();  // the Schedule box's tooltip: what it does with the project's settings
  void acceleratorFromGraph();
  void acceleratorToGraph();
  void onFinished(const QString& error, const QString& summary);
  void setBusy(bool on);
  void applyLogScale();
  void rescaleAxes();
  dw::engine::training::TrainOptions currentOptions() const;

  GraphModel* model_;
  QString projectDir_;
  dw::engine::training::TrainingConfig config_;  // as loaded from the project
  bool hasSection_ = false;                      // the project has a "training" section
  bool touched_ = false;                         // the user changed a setting in the dock
  bool graphDirty_ = true;  // the canvas changed since the worker built its trainer
  bool busy_ = false;
  QString lastError_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  QThread thread_;
  TrainingWorker* worker_;

  QComboBox* accelerator_;
  DataPanel* data_;
  QLabel* dataStatus_;
  QPushButton* editData_;
  QComboBox* optimizer_;
  QComboBox* schedule_;  // the learning rate's schedule: its kind (the rest stays the project's)
  ScientificSpinBox* lr_;
  ScientificSpinBox* momentum_;
  ScientificSpinBox* weightDecay_;
  QSpinBox* batchSize_;
  QSpinBox* epochs_;
  QSpinBox* processes_;
  QPushButton *trainStep_, *evalStep_, *fullStep_, *fit_, *stop_, *writeWeights_, *predict_,
      *resetWeights_;
  QProgressBar* progress_;
  QLabel* throughput_;
  QLabel* result_;
  QLabel* error_;
  QCheckBox* logScale_;
  QCheckBox* ignoreOutliers_;
  // Per chart: points outside its range, drawn as triangles on its top or bottom edge.
  QScatterSeries *lossOffScale_, *metricOffScale_;
  QChart* lossChart_;
  QChart* metricChart_;
  QLineSeries *trainLoss_, *testLoss_, *trainMetric_, *testMetric_;
  // The train lines, a point per step until there are too many to redraw (DecimatedLine).
  std::unique_ptr<DecimatedLine> trainLossLine_, trainMetricLine_;
  // Eval Step results: single batches, as points never joined to the per-epoch line (a line from
  // a batch's loss to the next Fit's epoch read as a trend).
  QScatterSeries *evalLoss_, *evalMetric_;
  QScatterSeries* best_;
  double bestLoss_ = 0;
  qint64 bestEpoch_ = 0;
  // Epochs count on across Fits like steps do (a rebuilt trainer counts from 0 again, and a
  // second Fit's best epoch must not read "epoch 1" again): epochOffset_ plus the trainer's own.
  qint64 epochOffset_ = 0;
  qint64 lastEpoch_ = 0;
  // Steps continue across trainers (a rebuilt one counts from 0): the x of a point is
  // stepOffset_ plus the trainer's own step.
  qint64 stepOffset_ = 0;
  qint64 lastStep_ = 0;
  bool unsynced_ = false;  // the trainer holds weights the graph does not
  // The trainer's weights came from training (carried across rebuilds), not from the seeds.
  bool trained_ = false;
  // A job asked for a new trainer and the worker has not reported it built yet: if the job fails,
  // the old trainer stays and the next job must try again.
  bool awaitingTrainer_ = false;
  bool dirtyBeforeJob_ = false;  // graphDirty_ as the running job found it
  // The chart offsets before a job that builds a new trainer moved them.
  std::pair<qint64, qint64> offsetsBeforeJob_{0, 0};
  // What the current trainer was built from, per node: a layer's seed, or the Initializer's
  // parameters (with those Write Weights gave it since). See keepsTrainedValues.
  struct WeightOrigin {
    std::optional<dw::Param> seed;
    std::vector<std::map<std::string, dw::Param>> initializer;
    std::string layerState;  // layerState() of a layer when the trainer was built
    // A layer's stored weights (weightsKey) when the trainer was built and as writes of the
    // trainer's values left them: other ones (an undo of a Fit across processes' write) are
    // the canvas's to keep, not the trainer's to replace.
    std::vector<size_t> storedWeights;
    // `n`'s present values count as the trainer's: its parameters (an Initializer) or its stored
    // weights (a layer).
    void add(const dw::Node& n);
  };
  static size_t weightsKey(const std::map<std::string, std::string>& weights);
  // A Fit across processes wrote its weights into the graph, and no trainer was built since.
  bool processWroteWeights_ = false;
  // A layer's trained values by the state they were trained in (layerState: its parameters and
  // the types of its inputs), kept when a trainer is replaced. An edit that changes a layer's
  // shape restarts the layer from its seed; undoing the edit (or typing the old value back)
  // finds the values trained before and takes them again. A few states per layer, newest last.
  struct EarlierLayer {
    std::string state;
    std::map<std::string, std::string> weights;
  };
  std::map<dw::NodeId, std::vector<EarlierLayer>> earlierLayers_;
  std::string layerState(const dw::Graph& doc, dw::NodeId id) const;
  // The current trainer's layer values into earlierLayers_, before it is replaced.
  void rememberTrainedLayers();
  std::map<dw::NodeId, WeightOrigin> origins_;
  QString deviceNotice_;
  QString pendingNotice_;         // the notice of the trainer built for the running job
  bool lastErrorIsData_ = false;  // the shown error is the Data panel's (cleared when fixed)
  // The current trainer's first step loss, for the divergence warning.
  double firstStepLoss_ = -1;
  // A divergence warning for the running job, shown with its result when it finishes (a status
  // message of its own would be replaced by the result's at once).
  QString pendingWarning_;
  // A bunch of Fit's step points is on its way to onSteps (set by the training thread, cleared
  // here): the training thread holds the next ones back until it lands.
  std::atomic<bool> stepsQueued_{false};

  // The Fit across processes in flight (null when none).
  QProcess* process_ = nullptr;
  std::unique_ptr<QTemporaryDir> runDir_;      // the trained project the run writes
  std::shared_ptr<const dw::Graph> runGraph_;  // the document as the run read it
  QString processCommand_;
  QString runCli_;     // the deepwire command the run started
  QByteArray stdout_;  // rank 0's output not yet split into lines
  // Step lines read but not yet charted: drawn at most every kDrawEveryMs, as the studio's own
  // Fit draws. Charting each read as it came (a few lines each, a thousand a second for the
  // MLP) kept the event loop so busy that Stop took 1.8 s to be seen, and the run itself
  // slowed, waiting on its full output pipe.
  std::vector<StepPoint> processSteps_;
  QElapsedTimer processDrawn_;
  QTimer* processDraw_ = nullptr;  // the last bunch, where no line follows it soon
  void drawProcessSteps();
  QString stderr_;           // the run's stderr (its last 64 KiB)
  QString runInfo_;          // the CLI's "distributed: N processes ..." line
  bool runStarted_ = false;  // every process has its signal handlers (the info line came)
  bool stopRequested_ = false, stopSent_ = false;
  int runProcesses_ = 0;
  qint64 runBatch_ = 1, runEpochs_ = 0, runSteps_ = 0, runEpochsDone_ = 0;
  double runTrainLoss_ = 0, runTestLoss_ = 0, runTestAccuracy_ = -1, runSamplesPerSec_ = 0;
  bool runHasTest_ = false;
  // The CLI's --json-steps lines: the run's steps as they come (its step counter at the first,
  // and the clock of the samples/s shown until the first epoch ends).
  qint64 runFirstStep_ = -1;
  QElapsedTimer runClock_;
  // The epoch the run resumed at (the studio's trainer's, or the last run's checkpoint's): its
  // lines count epochs from the checkpoint's start, the dock from the run's.
  qint64 runEpochBase_ = 0;
  // The checkpoint the next trainer starts from: Load Checkpoint's directory while its job runs,
  // or a Fit across processes' last one, whose optimizer state the next step, Fit or run
  // continues with (resumeDir_ holds it until then).
  QString resumeFrom_;
  std::unique_ptr<QTemporaryDir> resumeDir_;
  // The document as the run's weights left it: an edit since (an undo of them too) drops the
  // checkpoint, whose weights would otherwise come back over the edit.
  std::shared_ptr<const dw::Graph> resumeGraph_;
  QString loadFrom_;  // Load Checkpoint's directory, for its job
};

}  // namespace dw::studio
