// The Training dock: accelerator, dataset, optimizer, batch size and epochs, the step buttons,
// progress, throughput, and live loss/metric charts. All training runs on one worker thread that
// owns the engine's Trainer; the GUI thread only posts jobs and receives reports, so the window
// never freezes, and Stop cancels a Fit before its next step.
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QThread>
#include <atomic>
#include <memory>

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
class QAbstractAxis;
QT_END_NAMESPACE

namespace dw::studio {

class ScientificSpinBox;
class TrainingWorker;

class TrainingPanel : public QWidget {
  Q_OBJECT
 public:
  TrainingPanel(GraphModel* model, QWidget* parent = nullptr);
  ~TrainingPanel() override;

  // Relative dataset paths resolve against the project's folder.
  void setProjectDir(const QString& dir);
  // Writes the dock's settings into the project's "training" section (before a save).
  void storeSettingsInModel();
  // The gradient graph of the current canvas, for "Export ONNX with training info".
  dw::Result<onnx::ModelProto> exportTrainingModel();

  QPushButton* trainStepButton() const { return trainStep_; }
  QPushButton* evalStepButton() const { return evalStep_; }
  QPushButton* fullTrainStepButton() const { return fullStep_; }
  QPushButton* fitButton() const { return fit_; }
  QPushButton* stopButton() const { return stop_; }
  QPushButton* writeWeightsButton() const { return writeWeights_; }
  // Copies the trained weights into the graph's Initializer nodes (one undo step).
  dw::Status writeWeightsToGraph();
  QSpinBox* batchSizeBox() const { return batchSize_; }
  QSpinBox* epochsBox() const { return epochs_; }
  QComboBox* optimizerBox() const { return optimizer_; }
  QCheckBox* logScaleBox() const { return logScale_; }
  bool busy() const { return busy_; }
  QString lastError() const { return lastError_; }
  QString lastResult() const { return result_->text(); }
  int trainPoints() const;  // points on the train-loss curve
  void stopAndWait();

 signals:
  void statusMessage(const QString& text);
  void jobFinished();  // after every job, successful or not

 private:
  friend class TrainingWorker;
  enum class Job { TrainStep, FullTrainStep, EvalStep, Fit };
  void start(Job job);
  void loadSettingsFromModel();
  void onStep(qint64 step, double loss, double samplesPerSec, double progress);
  void onEpoch(qint64 epoch, qint64 step, double trainLoss, bool hasTest, double testLoss,
               double trainAcc, double testAcc);
  void onFinished(const QString& error, const QString& summary);
  void setBusy(bool on);
  void applyLogScale();
  void rescaleAxes();
  void fillDatasetTable();
  // The dock's settings: the project's config with the widgets' values applied.
  dw::engine::training::TrainingConfig currentConfig() const;
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
  QTableWidget* dataset_;
  QComboBox* optimizer_;
  ScientificSpinBox* lr_;
  ScientificSpinBox* momentum_;
  ScientificSpinBox* weightDecay_;
  QSpinBox* batchSize_;
  QSpinBox* epochs_;
  QPushButton *trainStep_, *evalStep_, *fullStep_, *fit_, *stop_, *writeWeights_;
  QProgressBar* progress_;
  QLabel* throughput_;
  QLabel* result_;
  QLabel* error_;
  QCheckBox* logScale_;
  QChart* lossChart_;
  QChart* metricChart_;
  QLineSeries *trainLoss_, *testLoss_, *trainMetric_, *testMetric_;
  QScatterSeries* best_;
  qint64 stepCount_ = 0;
  double bestLoss_ = 0;
};

}  // namespace dw::studio
