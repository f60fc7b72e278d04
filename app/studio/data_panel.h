// The Data dock: where each data input of the graph (a model Input, or the target of a loss or
// metric) gets its training, validation and test sources, and how they are converted to what the
// input takes. Everything it shows comes from engine/training/data_source.h, the same functions
// `deepwire train` loads with, so what the panel proposes is what training does.
//
// Per input: a file (or image folder) for train and, when the split has its own sources, for
// validation and test; what the source holds (samples, shape, dtype, a preview: thumbnails,
// table rows or a label histogram); the conversion (dtype, scale, mean/std, one-hot, reshape,
// image size); and one sentence saying whether the data fits the input, with the fix one click
// away: "Convert the data" or "Change the Input".
#pragma once

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <optional>
#include <vector>

#include "app/studio/graph_model.h"
#include "engine/training/data_source.h"

namespace dw::studio {

class DataPanel : public QWidget {
  Q_OBJECT
 public:
  enum Split { kTrain = 0, kValidation = 1, kTest = 2 };
  enum SplitMode { kNone = 0, kFraction = 1, kOwnFiles = 2 };

  explicit DataPanel(GraphModel* model, QWidget* parent = nullptr);
  ~DataPanel() override;

  // The project's dataset (on open / new) and the folder relative paths resolve against.
  void setSpec(const dw::engine::training::DatasetSpec& spec, const QString& baseDir);
  void setBaseDir(const QString& dir);
  dw::engine::training::DatasetSpec spec() const;
  // "" when every data input has a train source that fits it; else what is missing or wrong.
  QString readiness() const;
  // A source is being read (in the background: a large file never freezes the window).
  bool busy() const;

  // The widgets a test (or a user) drives.
  struct InputRow;
  InputRow* row(const QString& input) const;
  QLineEdit* pathEdit(const QString& input, Split split = kTrain) const;
  QPushButton* browseButton(const QString& input, Split split = kTrain) const;
  // Under a validation or test file: "Convert this file" / "Use train's conversion".
  QPushButton* splitConvertButton(const QString& input, Split split) const;
  QLabel* splitNoteLabel(const QString& input, Split split) const;
  // Under a validation or test file: its first samples (or its labels' counts), as stored.
  QLabel* splitPreviewLabel(const QString& input, Split split) const;
  QPushButton* convertButton(const QString& input) const;
  QPushButton* changeInputButton(const QString& input) const;
  QLabel* fitLabel(const QString& input) const;
  QLabel* infoLabel(const QString& input) const;
  QLabel* previewLabel(const QString& input) const;
  QPushButton* computeNormButton(const QString& input) const;
  QComboBox* csvLabelColumnBox(const QString& input) const;
  QComboBox* csvTakeBox(const QString& input) const;
  QLineEdit* csvFeatureColumnsEdit(const QString& input) const;
  QComboBox* imageTakeBox(const QString& input) const;
  QSpinBox* imageSizeBox(const QString& input, bool width) const;
  QComboBox* splitModeBox(Split split) const { return split == kTest ? testMode_ : valMode_; }
  QDoubleSpinBox* splitFractionBox(Split split) const {
    return split == kTest ? testFraction_ : valFraction_;
  }
  QSpinBox* trainLimitBox() const { return trainLimit_; }
  // The validation or test split takes files of its own (not a fraction of train, not none).
  bool hasOwnFiles(Split split) const { return splitModeBox(split)->currentIndex() == kOwnFiles; }
  QLabel* summaryLabel() const { return summary_; }
  QStringList inputNames() const;
  // Re-reads the graph's data inputs now (normally debounced after edits).
  void refreshInputs();
  // Puts the panel back to `spec` (Undo and Redo of its changes, which are steps on the
  // model's undo stack).
  void restoreSpec(const dw::engine::training::DatasetSpec& spec);

 signals:
  void specChanged();  // a source, conversion or split changed (by the user)
  void sourcesRead();  // every source has been read: readiness() is up to date
  // readiness() may say something else now: the rows were re-read from the graph (an Input
  // retyped, renamed, added), or a source's fit was checked again.
  void readinessChanged();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void rebuildRows(const std::vector<dw::engine::training::DataInput>& inputs);
  void chooseFile(InputRow* r, Split split);
  void setPath(InputRow* r, Split split, const QString& path);
  void inspect(InputRow* r);
  void inspected(InputRow* r, const dw::Result<dw::engine::training::SourceSummary>& s);
  QString sampleCountProblem() const;
  // A sentence when class labels feed a loss that compares values; "" otherwise.
  QString lossHint(const InputRow* r) const;
  // Why the row's data does not fit its input ("" when it does): what the panel and the
  // Training dock both show, so the two never disagree.
  QString misfit(const InputRow* r) const;
  // Reads the header of the row's file for `split` (validation, test): "" or why it cannot.
  QString probeSplit(InputRow* r, Split split);
  // Reads the first samples of the row's file for `split` in the background, for its preview.
  void previewSplit(InputRow* r, Split split);
  // Shows the file's box where the split takes files of its own and its preview has something.
  void showSplitBox(InputRow* r, Split split);
  // Why the row's file for `split` does not hold what its train source holds ("" when it does,
  // or is not known yet).
  QString splitMisfit(const InputRow* r, Split split) const;
  // What would make the row's file for `split` fit the input, from its header.
  dw::engine::training::Proposal splitProposal(const InputRow* r, Split split) const;
  // Shows, under the file for `split`, why it does not fit or its own conversion, and the button
  // that gives it one ("Convert this file") or takes it back ("Use train's conversion").
  void updateSplitFit(InputRow* r, Split split);
  void toggleOwnConversion(InputRow* r, Split split);
  // The type "Change the Input" gives the row's Input node.
  std::string inputTypeForData(const InputRow* r) const;
  void showSummary(InputRow* r);
  void updateFit(InputRow* r);
  void conversionToWidgets(InputRow* r);
  void widgetsToConversion(InputRow* r);
  void applyProposal(InputRow* r);
  void changeInput(InputRow* r);
  void computeNormalization(InputRow* r);
  void updateSplitWidgets();
  void updateSummary();
  void changed();
  std::vector<dw::engine::training::DataInput> graphInputs() const;

  GraphModel* model_;
  QString baseDir_;
  QString lastDir_;
  dw::engine::training::DatasetSpec spec_;  // what setSpec gave, for inputs not on the canvas
  std::vector<std::unique_ptr<InputRow>> rows_;
  QWidget* rowsHost_;
  QComboBox *valMode_, *testMode_;
  QDoubleSpinBox *valFraction_, *testFraction_;
  QSpinBox* trainLimit_;
  QLabel* summary_;
  QLabel* empty_;
  QTimer refresh_;
  bool loading_ = false;
  // What the undo stack last recorded: a change is a step when spec() differs from it.
  dw::engine::training::DatasetSpec committed_;
};

}  // namespace dw::studio
