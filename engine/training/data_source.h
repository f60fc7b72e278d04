// Where training data comes from and how it becomes what a graph's inputs take: the project's
// dataset section (one source per data input and split), reading each source, converting it
// (dtype, scale, mean/std, one-hot, reshape), and splitting train into train / validation / test.
//
// The studio's data panel and `deepwire train` both go through loadData(), so they read, convert
// and hold out exactly the same samples. The panel also uses the inspection and proposal
// functions here, so what it proposes is what the engine does, and exportOnnx's data prelude
// (prependDataConversion) applies the same conversion inside the exported model.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "engine/training/data.h"
#include "nodes/status.h"

namespace onnx {
class ModelProto;
}
namespace dw {
class Graph;
}

namespace dw::engine::training {

// One source of one split, feeding one graph input. JSON keys in trainer.h's section comment.
struct DataFileSpec {
  std::string input;   // graph input name
  std::string path;    // file or folder (relative paths resolve against the project's directory)
  std::string format;  // "idx" | "npy" | "csv" | "images" ("" = from the name)
  Normalization normalization;
  std::string dtype;  // convert to this dtype after reading ("" = float for normalized data,
                      // else keep); e.g. "int64" for class labels
  std::vector<int64_t> shape;  // per-sample shape to reshape to (e.g. [1,28,28]); empty = keep
  // "shape": [] was given: one value a sample (labels stored [N, 1] for an input of [N]).
  bool scalarSamples = false;
  bool reshapes() const { return scalarSamples || !shape.empty(); }
  int64_t oneHot = 0;  // > 0: class indices become one-hot float rows of this many classes
  // CSV only: which columns (see CsvOptions).
  std::string csvLabelColumn;
  bool csvHeader = true;
  bool csvTakeLabel = false;  // this file spec takes the CSV's label column instead of features
  std::vector<std::string> csvFeatureColumns;  // empty = every column but the label
  // Image folders only: resize to height x width (0 = keep), channels 1 or 3 (0 = keep); the
  // label spec takes the class index (the subfolder) instead of the pixels.
  int64_t imageHeight = 0, imageWidth = 0, imageChannels = 0;
  bool imageTakeLabel = false;
  // What the source holds per sample as stored (dtype name and shape), recorded when the data
  // panel inspected it; the ONNX data prelude uses it when the file is not at hand.
  std::string storedDtype;
  std::vector<int64_t> storedShape;

  bool convertsData() const;  // any conversion beyond reading
  // Reads and converts as `o` does: the same read options (CSV, image) and conversion, whatever
  // the input, file, format or recorded stored type. A validation or test file whose spec is not
  // the train file's this way has a conversion of its own.
  bool sameConversion(const DataFileSpec& o) const;
  // The conversion in a few words, for the data panel: "float32, ×0.00392, reshape [1,28,28]";
  // "as stored" when there is none.
  std::string conversionText() const;
};

struct DatasetSpec {
  std::vector<DataFileSpec> train;
  std::vector<DataFileSpec> validation;  // own sources; else validationSplit of train
  std::vector<DataFileSpec> test;        // own sources; else testSplit of train
  double validationSplit = 0;
  double testSplit = 0;
  int64_t trainLimit = 0;  // > 0: only the first trainLimit samples of the train sources
};

// How many of n train samples each split gets: floor(n * testSplit) for test,
// floor(n * validationSplit) for validation, the rest for train.
struct SplitSizes {
  int64_t train = 0, validation = 0, test = 0;
};
SplitSizes splitSizes(int64_t n, double validationSplit, double testSplit);
// Which samples: a fixed permutation of [0, n) (shuffledIndices with a constant seed, the same
// on every machine and run) deals the held-out samples; each split keeps file order. Given each
// sample's class, every class is held out in proportion to its size (the splits' sizes stay
// splitSizes'), keeping at least one sample of a class for training where it can: a small
// image folder dealt at random held out 1 of one class's 9 images and 5 of another's.
struct SplitIndices {
  std::vector<int64_t> train, validation, test;
};
SplitIndices splitIndices(int64_t n, double validationSplit, double testSplit,
                          const std::vector<int64_t>& classes = {});
// The class of each sample, for splitIndices: the values of the data's one integer column with
// one value per sample (the labels); empty where there is no such column or more than one.
std::vector<int64_t> sampleClasses(const Dataset& data);

struct LoadedData {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> validation;  // null when there is none
  std::shared_ptr<const Dataset> test;        // null when there is none
  // The set fit evaluates after every epoch: validation, else test (null when neither).
  std::shared_ptr<const Dataset> evaluation() const { return validation ? validation : test; }
};
// Reads, converts and splits every source of `spec`. Errors name the split, the input, the file.
Result<LoadedData> loadData(const DatasetSpec& spec, const std::string& baseDir);

// Loads every source of `files` into one Dataset (columns keyed by input); `limit` > 0 keeps the
// first `limit` samples (read no more of an image folder than that).
Result<Dataset> loadDataset(const std::vector<DataFileSpec>& files, const std::string& baseDir,
                            int64_t limit = 0);

// Single steps (the studio's Train Step and Eval Step buttons): one batch at a time from a
// dataset, starting the next epoch (its own shuffle) when one runs out.
class BatchCursor {
 public:
  BatchCursor(std::shared_ptr<const Dataset> data, LoaderOptions options);
  Result<Batch> next();
  int64_t epoch() const { return epoch_; }

 private:
  BatchLoader loader_;
  int64_t epoch_ = 0;
};

// "idx" | "npy" | "csv" | "images" for a path (a directory is an image folder); an error that
// says which formats exist when the name does not tell.
Result<std::string> detectFormat(const std::string& path);
std::string resolvePath(const std::string& path, const std::string& baseDir);

// ---- What the data panel shows ----------------------------------------------------------------

// What a source holds as stored, before any conversion.
struct SourceSummary {
  std::string path;  // resolved
  std::string format;
  int64_t samples = 0;
  Shape sampleShape;  // per sample, as stored (an image folder: [C, H, W] of its first image)
  DType dtype = DType::kUndefined;
  std::vector<std::string> csvColumns;  // CSV: the header's names (or column numbers)
  std::vector<std::string> classes;     // image folders: the class subfolders
  std::string otherSize;                // image folders: an image of another size, if any
  std::vector<int64_t> labelCounts;     // integer class data: samples per class 0..K-1
  Tensor preview;                       // up to 16 samples as stored (images: [n, C, H, W])
  std::vector<std::vector<std::string>> previewRows;  // CSV: the first rows, as text
  bool isLabels() const { return !labelCounts.empty(); }
};
// Reads the source's header and a few samples (images and labels in full: their counts are what
// the panel shows). `spec` gives the format and the CSV / image options.
Result<SourceSummary> inspectSource(const DataFileSpec& spec, const std::string& baseDir);

// What a source holds as stored, from its header alone (no samples are decoded): for exports,
// for checking a second split's file, and wherever only the type matters.
struct StoredType {
  std::string format;
  int64_t samples = 0;
  DType dtype = DType::kUndefined;
  Shape sampleShape;
};
Result<StoredType> storedType(const DataFileSpec& spec, const std::string& baseDir);

// A validation or test file scaled as the train file for its input is, while stored otherwise:
// floats where the train file holds integers, or the other way (test images saved as floats in
// [0, 1], then scaled by 1/255 again). Its values would not come out as the train data's, and
// training would report a wrong accuracy without a word. "" when that is not so; else one
// sentence naming both files and the fix. `split`: "validation" or "test".
std::string splitScalingProblem(const DataFileSpec& train, DType trainStored,
                                const DataFileSpec& file, DType fileStored,
                                const std::string& split);
// The same for every validation and test file of `spec` (their headers are read): the first
// problem, or ok.
Status checkSplitScaling(const DatasetSpec& spec, const std::string& baseDir);

// The column of a table that reads as its label ("label", "class", "target", ... in that order
// of preference), or "" when none does.
std::string guessLabelColumn(const std::vector<std::string>& columns);

struct DataInput;
// A CSV source given to `input`, read as a person would mean it: the column named like a label
// (guessLabelColumn) is the label; a target input, or one named like it (label, target, y),
// takes that column, any other input the remaining ones. False (spec unchanged) when no column
// reads as a label. The studio's Data panel and `import --data` guess alike.
bool guessCsvLabel(DataFileSpec& spec, const std::vector<std::string>& columns,
                   const DataInput& input);

// "float[N,1,28,28]": an element type and a per-sample shape in the type syntax of an Input node
// (nodes/type_syntax.h), so a proposal can be written into one.
std::string inputTypeText(DType dtype, const std::vector<int64_t>& sampleShape);

// A data input of the graph: a model input, or the target of a loss or metric.
struct DataInput {
  std::string name;
  DType dtype = DType::kFloat;
  std::vector<int64_t> shape;  // with the batch dim first; -1 where a dim is symbolic or unknown
  bool target = false;         // feeds only losses and metrics (not in the inference model)
  std::string typeText;        // as the Input node writes it, e.g. float[N,1,28,28]
};
// Where a split's samples come from, for messages: "the test data (t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz)", or "the validation split of the training data (...)" where the
// split is a fraction of train. `split`: "train", "validation" or "test".
std::string describeSplit(const DatasetSpec& d, const std::string& split);

// The inputs a Batch must feed to train `graph` (its loss export's non-initializer inputs).
Result<std::vector<DataInput>> dataInputsOf(const Graph& graph, const std::string& model = "");

// A classification loss (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss) that reads its
// labels straight from a data input: labels must be class indices below `classes`.
struct LabelRange {
  std::string input;
  std::string loss;  // how messages name it: "the loss of 'logits' (SoftmaxCrossEntropyLoss)"
  int64_t classes = 0;
  bool hasIgnore = false;
  int64_t ignore = 0;
};
// The label ranges of `model`'s losses whose scores' class axis (dim 1) has a known size in
// `types` (value name -> type, from shape inference); `dataInputs`: what the data feeds.
std::vector<LabelRange> labelRangesOf(const onnx::GraphProto& graph,
                                      const std::map<std::string, const onnx::TypeProto*>& types,
                                      const std::vector<std::string>& dataInputs);
// The first label in `columns` outside its range, as an error naming the sample of `where` (its
// index in the files where `origin` maps a split's samples back), the input, the loss and the
// fix.
Status checkLabelValues(const std::vector<LabelRange>& ranges,
                        const std::map<std::string, Tensor>& columns, const std::string& where,
                        const std::vector<int64_t>* origin = nullptr);

// How a source's samples become what an input takes.
struct Proposal {
  DataFileSpec spec;     // `current` with the proposed conversion applied
  bool changes = false;  // spec differs from current
  bool fits = false;     // after the proposal, the data matches the input
  // One sentence: what the data holds, what the input takes, and what the proposal does (or
  // why nothing can make them fit, and what to change).
  std::string message;
  // The Input type that would take the data with `current`'s conversion ("Change the Input").
  std::string inputTypeForData;
};
Proposal proposeConversion(const SourceSummary& source, const DataFileSpec& current,
                           const DataInput& input);
// Checks `spec`'s conversion of `source` against `input`: "" when they fit, else one sentence.
std::string checkFit(const SourceSummary& source, const DataFileSpec& spec, const DataInput& input);

// Mean and standard deviation of the train source after its scale (the values the
// normalization's mean/std are for), over its first `limit` samples when limit > 0.
Result<Normalization> computeNormalization(const DataFileSpec& spec, const std::string& baseDir,
                                           int64_t limit = 0);

// ---- The same conversion inside an exported model ---------------------------------------------

// For every graph input of `model` that a train source in `spec` converts, makes the input take
// the data as stored (its dtype and per-sample shape) and inserts the conversion's nodes (Cast,
// Mul, Sub, Div, Reshape) in front of the old input's readers, so the model gives the same
// answers on raw data outside deepwire. Returns the names of the inputs it changed.
Result<std::vector<std::string>> prependDataConversion(onnx::ModelProto& model,
                                                       const DatasetSpec& spec,
                                                       const std::string& baseDir);

// prependDataConversion, then the full ONNX check when anything changed: what every export that
// takes the data as stored does (the studio's Export ONNX, deepwire export and train).
Status addDataConversion(onnx::ModelProto& model, const DatasetSpec& spec,
                         const std::string& baseDir);

}  // namespace dw::engine::training
