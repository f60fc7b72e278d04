#include "engine/training/data_source.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "engine/io.h"
#include "engine/onnx_attrs.h"
#include "engine/training/image_folder.h"
#include "graphs/file_io.h"
#include "graphs/graph.h"
#include "graphs/onnx_export.h"
#include "nodes/type_syntax.h"

namespace dw::engine::training {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Engine dtypes by the names the project JSON and the panel use: ONNX's (type_syntax.h) and the
// engine's own (float32).
DType dtypeByName(const std::string& name) {
  if (name == "float32") return DType::kFloat;
  const auto onnx = dw::dtypeFromName(name);
  return onnx ? dtypeFromOnnx(*onnx) : DType::kUndefined;
}

bool isIntegral(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

std::string dimsText(const std::vector<int64_t>& dims, bool batch) {
  std::string s = "[";
  if (batch) s += "N";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (batch || i > 0) s += ",";
    s += dims[i] < 0 ? "?" : std::to_string(dims[i]);
  }
  return s + "]";
}

// The first n samples of a tensor (a copy; the whole tensor when it holds no more).
Tensor firstSamples(Tensor t, int64_t n) {
  if (t.rank() == 0 || t.dim(0) <= n) return t;
  Dataset one;
  one.columns.emplace("", std::move(t));
  return one.slice(0, n).columns.begin()->second;
}

// Six significant digits: 0.00392157 for 1/255.
std::string shortNumber(double v) {
  std::ostringstream os;
  os << std::setprecision(6) << v;
  return os.str();
}

std::string fileName(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  return name.empty() ? path : name;
}

bool wantsFloat(const DataFileSpec& s) {
  return !s.normalization.isIdentity() || s.dtype == "float" || s.dtype == "float32";
}

// The CSV options a spec asks for. Labels are read as the spec's dtype where it names one (int64
// class indices refuse fractions), else as stored: a trial's regression target (y = 3 x1 - 2 x2)
// was refused as "not a whole number" whatever the input took.
CsvOptions csvOptions(const DataFileSpec& s) {
  CsvOptions o;
  const DType dt = s.dtype.empty() ? DType::kUndefined : dtypeByName(s.dtype);
  o.labelType = dt == DType::kUndefined ? DType::kUndefined
                : isFloating(dt)        ? DType::kFloat
                                        : DType::kInt64;
  o.header = s.csvHeader;
  o.labelColumn = s.csvLabelColumn;
  o.featureColumns = s.csvFeatureColumns;
  return o;
}

ImageFolderOptions imageOptions(const DataFileSpec& s) {
  ImageFolderOptions o;
  o.height = s.imageHeight;
  o.width = s.imageWidth;
  o.channels = s.imageChannels;
  return o;
}

// A source as stored: the tensor a spec reads before any conversion.
Result<Tensor> readRaw(const DataFileSpec& spec, const std::string& path, const std::string& format,
                       int64_t limit, std::vector<std::string>* csvColumns = nullptr) {
  if (format == "idx") return readIdx(path);
  if (format == "npy") return readNpy(path);
  if (format == "pb") return readTensorPb(path);
  if (format == "csv") {
    auto r = readCsv(path, csvOptions(spec));
    if (!r) return r.status();
    if (csvColumns) *csvColumns = r->columns;
    if (spec.csvTakeLabel) {
      if (!r->labels)
        return Status::error(path +
                             ": this source takes the label column, but none is chosen; "
                             "choose the CSV's label column");
      return *r->labels;
    }
    return r->features;
  }
  if (format == "images") {
    if (spec.imageTakeLabel) {
      // The class of each image from the listing, in sample order (class 0's files, then class
      // 1's...): nothing decoded, so the labels of a folder of mixed sizes need no resize of
      // their own (they failed where the pixels' source had one).
      auto info = inspectImageFolder(path);
      if (!info) return info.status();
      std::vector<int64_t> labels;
      for (size_t c = 0; c < info->countPerClass.size(); ++c)
        labels.insert(labels.end(), static_cast<size_t>(info->countPerClass[c]),
                      static_cast<int64_t>(c));
      if (limit > 0 && limit < static_cast<int64_t>(labels.size()))
        labels.resize(static_cast<size_t>(limit));
      const auto n = static_cast<int64_t>(labels.size());
      return Tensor::fromVector<int64_t>(std::move(labels), {n});
    }
    auto r = readImageFolder(path, imageOptions(spec), limit);
    if (!r) return r.status();
    return r->images;
  }
  return Status::error(path + ": format '" + format +
                       "' is not supported; use idx, npy, csv, pb or images (a folder)");
}

// Class indices [n] (or [n, 1]) to one-hot float rows [n, classes].
Result<Tensor> oneHot(const Tensor& t, int64_t classes, const std::string& path) {
  if (!isIntegral(t.dtype()) && !isFloating(t.dtype()))
    return Status::error(path + ": one-hot needs class indices, not " + dtypeName(t.dtype()));
  const int64_t n = t.rank() ? t.dim(0) : 1;
  if (t.size() != n)
    return Status::error(path + ": one-hot needs one class index per sample, the data holds " +
                         shapeToString(t.shape()));
  Tensor out(DType::kFloat, {n, classes});
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = t.getDouble(i);
    if (v < 0 || v >= static_cast<double>(classes) || v != std::floor(v))
      return Status::error(path + ": sample " + std::to_string(i) + " has class " +
                           std::to_string(v) + ", outside 0.." + std::to_string(classes - 1) +
                           "; raise the one-hot class count or fix the labels");
    o[i * classes + static_cast<int64_t>(v)] = 1.0f;
  }
  return out;
}

// Floating data as it is stored: every value finite, and whole where the spec casts it to
// integers (class labels). A NaN pixel passed through ReLU as 0 in the forward pass but filled
// the weights with NaN through the gradients: training went on at a loss of ln(10) and exited 0;
// a label of 2.5 or NaN became some class without a word.
Status checkStoredValues(const Tensor& t, const DataFileSpec& spec, const std::string& path) {
  if (t.dtype() != DType::kFloat && t.dtype() != DType::kDouble) return Status();
  const DType to = wantsFloat(spec) ? DType::kFloat : dtypeByName(spec.dtype);
  const bool whole = to != DType::kUndefined && !isFloating(to);
  const int64_t perSample = t.rank() > 0 && t.dim(0) > 0 ? t.size() / t.dim(0) : 1;
  auto where = [&](int64_t i) {
    return "sample " + std::to_string(i / std::max<int64_t>(1, perSample)) +
           (perSample > 1 ? ", value " + std::to_string(i % perSample) + " of its " +
                                std::to_string(perSample)
                          : std::string());
  };
  auto scan = [&](const auto* v) -> Status {
    for (int64_t i = 0; i < t.size(); ++i) {
      const double x = static_cast<double>(v[i]);
      if (!std::isfinite(x))
        return Status::error(
            path + ": " + where(i) + " is " + (std::isnan(x) ? "NaN" : "infinite") +
            "; training needs finite numbers: drop or repair that sample "
            "(numpy: np.isfinite(a).all(axis=tuple(range(1, a.ndim))) finds them)");
      if (whole && x != std::floor(x))
        return Status::error(path + ": " + where(i) + " is " + shortNumber(x) + ", but its " +
                             spec.dtype + " data are whole numbers (class indices); fix the " +
                             "file, or read it as float32");
    }
    return Status();
  };
  return t.dtype() == DType::kFloat ? scan(t.data<float>()) : scan(t.data<double>());
}

// Applies a spec's conversion to a source as stored: normalize (to float) or cast, then one-hot,
// then the per-sample reshape.
Result<Tensor> convert(Tensor t, const DataFileSpec& spec, const std::string& path) {
  DW_RETURN_IF_ERROR(checkStoredValues(t, spec, path));
  if (wantsFloat(spec)) {
    auto r = normalize(t, spec.normalization);
    if (!r) return r.status().withContext(path);
    t = std::move(r.value());
  } else if (!spec.dtype.empty()) {
    const DType to = dtypeByName(spec.dtype);
    if (to == DType::kUndefined)
      return Status::error(path + ": dtype '" + spec.dtype +
                           "' is not supported; use float32, int64, int32, uint8, ...");
    if (to != t.dtype()) {
      auto r = t.cast(to);
      if (!r) return r.status().withContext(path);
      t = std::move(r.value());
    }
  }
  if (spec.oneHot > 0) {
    auto r = oneHot(t, spec.oneHot, path);
    if (!r) return r.status();
    t = std::move(r.value());
  }
  if (spec.reshapes()) {
    Shape s{t.rank() ? t.dim(0) : 1};
    s.insert(s.end(), spec.shape.begin(), spec.shape.end());
    if (numElements(s) != t.size())
      return Status::error(path + ": cannot reshape " + shapeToString(t.shape()) + " to " +
                           shapeToString(s) + " (\"shape\" is the per-sample shape)");
    t = t.reshaped(s);
  }
  return t;
}

// The dtype and per-sample shape a spec's conversion gives a source (what checkFit compares).
std::pair<DType, Shape> convertedType(const SourceSummary& src, const DataFileSpec& spec) {
  DType t = src.dtype;
  Shape s = src.sampleShape;
  if (src.format == "images" && !spec.imageTakeLabel && s.size() == 3) {
    if (spec.imageChannels > 0) s[0] = spec.imageChannels;
    if (spec.imageHeight > 0) s[1] = spec.imageHeight;
    if (spec.imageWidth > 0) s[2] = spec.imageWidth;
  }
  if (wantsFloat(spec))
    t = DType::kFloat;
  else if (const DType to = dtypeByName(spec.dtype); to != DType::kUndefined)
    t = to;
  if (spec.oneHot > 0) {
    t = DType::kFloat;
    s = {spec.oneHot};
  }
  if (spec.reshapes() && numElements(spec.shape) == numElements(s)) s = spec.shape;
  return {t, s};
}

std::vector<int64_t> perSample(const DataInput& in) {
  if (in.shape.empty()) return {};
  return std::vector<int64_t>(in.shape.begin() + 1, in.shape.end());
}

bool fullyKnown(const std::vector<int64_t>& dims) {
  return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 0; });
}

}  // namespace

bool DataFileSpec::convertsData() const {
  return wantsFloat(*this) || !dtype.empty() || oneHot > 0 || !shape.empty();
}

bool DataFileSpec::sameConversion(const DataFileSpec& o) const {
  auto key = [](const DataFileSpec& f) {
    return std::tie(f.dtype, f.shape, f.scalarSamples, f.normalization.scale, f.normalization.mean,
                    f.normalization.std, f.oneHot, f.csvLabelColumn, f.csvHeader, f.csvTakeLabel,
                    f.csvFeatureColumns, f.imageHeight, f.imageWidth, f.imageChannels,
                    f.imageTakeLabel);
  };
  return key(*this) == key(o);
}

std::string DataFileSpec::conversionText() const {
  std::vector<std::string> steps;
  if (imageHeight > 0 || imageWidth > 0)
    steps.push_back("resize " + (imageHeight > 0 ? std::to_string(imageHeight) : "?") + "x" +
                    (imageWidth > 0 ? std::to_string(imageWidth) : "?"));
  if (imageChannels > 0) steps.push_back(std::to_string(imageChannels) + " channels");
  if (wantsFloat(*this))
    steps.push_back("float32");
  else if (!dtype.empty())
    steps.push_back(dtype);
  if (normalization.scale != 1.0) steps.push_back("×" + shortNumber(normalization.scale));
  if (normalization.mean != 0.0 || normalization.std != 1.0)
    steps.push_back("−" + shortNumber(normalization.mean) + " ÷" + shortNumber(normalization.std));
  if (oneHot > 0) steps.push_back("one-hot " + std::to_string(oneHot));
  if (reshapes()) steps.push_back("reshape " + dimsText(shape, false));
  if (steps.empty()) return "as stored";
  std::string s;
  for (const auto& step : steps) s += (s.empty() ? "" : ", ") + step;
  return s;
}

std::string resolvePath(const std::string& path, const std::string& baseDir) {
  fs::path p(path);
  if (p.is_relative() && !baseDir.empty()) p = fs::path(baseDir) / p;
  return p.string();
}

Result<std::string> detectFormat(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return std::string("images");
  std::string name = lower(fs::path(path).filename().string());
  if (endsWith(name, ".gz")) name = name.substr(0, name.size() - 3);
  // The extension first: "idx.npy" (a file of indices) was read as an IDX file.
  if (endsWith(name, ".npy")) return std::string("npy");
  // A serialized onnx.TensorProto, as the ONNX test data stores a model's inputs.
  if (endsWith(name, ".pb")) return std::string("pb");
  if (endsWith(name, ".csv") || endsWith(name, ".tsv")) return std::string("csv");
  if (name.find("idx") != std::string::npos || name.find("ubyte") != std::string::npos)
    return std::string("idx");
  // A missing file is the likelier mistake than an unusual name (a relative path read from
  // another folder): say that first.
  if (!fs::exists(path, ec))
    return Status::error(path +
                         ": no such file or folder (a relative path is read from the "
                         "project's folder); check the path");
  return Status::error(path +
                       ": cannot tell the format from the name; give an IDX (MNIST-style), NPY, "
                       "CSV or TensorProto (.pb) file, or a folder with one subfolder of images "
                       "per class (a file "
                       "named otherwise takes its source's \"format\" in the project)");
}

SplitSizes splitSizes(int64_t n, double validationSplit, double testSplit) {
  SplitSizes s;
  auto part = [n](double f) {
    return f > 0 ? static_cast<int64_t>(std::floor(static_cast<double>(n) * f)) : int64_t{0};
  };
  s.test = part(testSplit);
  s.validation = part(validationSplit);
  s.train = n - s.test - s.validation;
  return s;
}

// Splits `total` held-out samples between classes in proportion to their sizes (largest
// remainders get the leftover ones), preferring classes that keep a training sample after it.
static std::vector<int64_t> classQuotas(const std::vector<int64_t>& sizes,
                                        const std::vector<int64_t>& taken, int64_t total,
                                        int64_t n) {
  std::vector<int64_t> quota(sizes.size());
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t c = 0; c < sizes.size(); ++c) {
    const double ideal =
        static_cast<double>(sizes[c]) * static_cast<double>(total) / static_cast<double>(n);
    quota[c] = std::min(static_cast<int64_t>(std::floor(ideal)), sizes[c] - taken[c]);
    given += quota[c];
    rest.push_back({ideal - static_cast<double>(quota[c]), c});
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const int64_t keep : {int64_t{1}, int64_t{0}})
    for (const auto& [r, c] : rest) {
      if (given == total) break;
      if (sizes[c] - taken[c] - quota[c] > keep) ++quota[c], ++given;
    }
  return quota;
}

SplitIndices splitIndices(int64_t n, double validationSplit, double testSplit,
                          const std::vector<int64_t>& classes) {
  const SplitSizes sizes = splitSizes(n, validationSplit, testSplit);
  SplitIndices out;
  if (sizes.validation == 0 && sizes.test == 0) {
    out.train.resize(static_cast<size_t>(n));
    std::iota(out.train.begin(), out.train.end(), int64_t{0});
    return out;
  }
  // A constant seed: the held-out samples are a property of the data, not of a run.
  constexpr uint64_t kSplitSeed = 0x5d1e5eedULL;
  const std::vector<int64_t> order = shuffledIndices(n, kSplitSeed, 0);
  if (static_cast<int64_t>(classes.size()) != n) {
    const auto cut1 = static_cast<std::ptrdiff_t>(sizes.train);
    const auto cut2 = static_cast<std::ptrdiff_t>(sizes.train + sizes.validation);
    out.train.assign(order.begin(), order.begin() + cut1);
    out.validation.assign(order.begin() + cut1, order.begin() + cut2);
    out.test.assign(order.begin() + cut2, order.end());
  } else {
    std::map<int64_t, size_t> slot;
    for (const int64_t c : classes) slot.emplace(c, 0);
    size_t k = 0;
    for (auto& [c, s] : slot) s = k++;
    std::vector<int64_t> classSize(slot.size()), none(slot.size());
    for (const int64_t c : classes) ++classSize[slot[c]];
    const std::vector<int64_t> test = classQuotas(classSize, none, sizes.test, n);
    const std::vector<int64_t> validation = classQuotas(classSize, test, sizes.validation, n);
    // Each class deals its samples in the shuffled order: its test share first, then validation.
    std::vector<int64_t> dealt(slot.size());
    for (const int64_t i : order) {
      const size_t c = slot[classes[static_cast<size_t>(i)]];
      const int64_t d = dealt[c]++;
      (d < test[c]                   ? out.test
       : d < test[c] + validation[c] ? out.validation
                                     : out.train)
          .push_back(i);
    }
  }
  for (auto* v : {&out.train, &out.validation, &out.test}) std::sort(v->begin(), v->end());
  return out;
}

std::vector<int64_t> sampleClasses(const Dataset& data) {
  const int64_t n = data.size();
  const Tensor* labels = nullptr;
  for (const auto& [name, t] : data.columns) {
    const Shape& s = t.shape();
    const bool perSample = s.size() == 1 || (s.size() == 2 && s[1] == 1);
    if (!perSample || isFloating(t.dtype()) || t.dtype() == DType::kString ||
        t.dtype() == DType::kBool || s[0] != n)
      continue;
    if (labels) return {};  // two candidates: which one holds the classes is a guess
    labels = &t;
  }
  if (!labels) return {};
  return labels->toInt64Vector();
}

// Sources reading one CSV share its label column: the one a source names, or, where a source
// takes the labels without naming it, the header's label column (guessLabelColumn). The other
// sources of the file then leave it out of their features (a user's features source read the label
// as a pixel).
static std::vector<DataFileSpec> withSharedLabelColumns(std::vector<DataFileSpec> files,
                                                        const std::string& baseDir) {
  for (auto& taker : files) {
    if (!taker.csvTakeLabel) continue;
    const std::string path = resolvePath(taker.path, baseDir);
    std::string column = taker.csvLabelColumn;
    for (const auto& f : files)
      if (column.empty() && resolvePath(f.path, baseDir) == path) column = f.csvLabelColumn;
    if (column.empty() && regularFile(path).ok()) {  // the reader below says what is wrong
      std::ifstream in(path);
      std::string line;
      std::vector<std::string> cells;
      if (in && std::getline(in, line) && splitCsvLine(line, ',', cells) && csvLineIsHeader(cells))
        column = guessLabelColumn(cells);
    }
    if (column.empty()) continue;
    for (auto& f : files)
      if (f.csvLabelColumn.empty() && resolvePath(f.path, baseDir) == path)
        f.csvLabelColumn = column;
  }
  return files;
}

Result<Dataset> loadDataset(const std::vector<DataFileSpec>& sources, const std::string& baseDir,
                            int64_t limit) {
  Dataset d;
  const std::vector<DataFileSpec> files = withSharedLabelColumns(sources, baseDir);
  for (const auto& spec : files) {
    const std::string path = resolvePath(spec.path, baseDir);
    std::string format = spec.format;
    if (format.empty()) {
      auto f = detectFormat(path);
      if (!f) return f.status();
      format = *f;
    }
    auto raw = readRaw(spec, path, format, limit);
    if (!raw) return raw.status();
    Tensor t = std::move(raw.value());
    if (limit > 0) t = firstSamples(std::move(t), limit);
    auto c = convert(std::move(t), spec, path);
    if (!c) return c.status();
    if (d.columns.count(spec.input))
      return Status::error(path + ": input '" + spec.input +
                           "' is fed by two sources; remove one of them");
    d.columns[spec.input] = std::move(c.value());
  }
  DW_RETURN_IF_ERROR(d.validate());
  return d;
}

std::string splitScalingProblem(const DataFileSpec& train, DType trainStored,
                                const DataFileSpec& file, DType fileStored,
                                const std::string& split) {
  const double scale = file.normalization.scale;
  if (scale == 1.0 || scale != train.normalization.scale ||
      isFloating(trainStored) == isFloating(fileStored))
    return "";
  return "the " + split + " file " + fileName(file.path) + " holds " + dtypeName(fileStored) +
         " values where the train file " + fileName(train.path) + " holds " +
         dtypeName(trainStored) + ", and both are scaled by " + shortNumber(scale) +
         ": its values would not come out as the train data's (a wrong " + split +
         " accuracy, without an error). Give it a conversion of its own: in the studio, Convert " +
         "this file beside it; in the project, its own \"normalization\" (scale 1 for floats "
         "already scaled)";
}

Status checkSplitScaling(const DatasetSpec& spec, const std::string& baseDir) {
  for (auto [split, files] : {std::pair{"validation", &spec.validation}, {"test", &spec.test}})
    for (const DataFileSpec& f : *files) {
      const auto t = std::find_if(spec.train.begin(), spec.train.end(),
                                  [&](const DataFileSpec& s) { return s.input == f.input; });
      if (t == spec.train.end()) continue;
      auto a = storedType(*t, baseDir);
      auto b = storedType(f, baseDir);
      if (!a.ok() || !b.ok()) continue;  // reading the file says what is wrong with it
      if (const std::string p = splitScalingProblem(*t, a->dtype, f, b->dtype, split); !p.empty())
        return Status::error("/training/dataset/" + std::string(split) + ", input '" + f.input +
                             "': " + p);
    }
  return Status();
}

Result<LoadedData> loadData(const DatasetSpec& spec, const std::string& baseDir) {
  if (spec.train.empty())
    return Status::error(
        "no training data: choose a source for each data input (the studio's Data panel, or the "
        "project's training/dataset/train list)");
  DW_RETURN_IF_ERROR(checkSplitScaling(spec, baseDir));
  auto train = loadDataset(spec.train, baseDir, spec.trainLimit);
  if (!train) return train.status().withContext("train split");
  LoadedData out;
  const SplitIndices split =
      splitIndices(train->size(), spec.validation.empty() ? spec.validationSplit : 0,
                   spec.test.empty() ? spec.testSplit : 0, sampleClasses(*train));
  if (split.train.empty())
    return Status::error("train split: " + std::to_string(train->size()) +
                         " samples leave none for training after the validation and test "
                         "fractions; lower the fractions or add data");
  auto sameInputs = [&](const Dataset& d, const char* split) -> Status {
    for (const auto& [name, t] : train->columns)
      if (!d.columns.count(name))
        return Status::error(std::string(split) + " split: no source for input '" + name +
                             "', which the train split feeds; add one");
    for (const auto& [name, t] : d.columns)
      if (!train->columns.count(name))
        return Status::error(std::string(split) + " split: input '" + name +
                             "' has a source here but none in the train split");
    return Status();
  };
  auto own = [&](const std::vector<DataFileSpec>& files,
                 const char* split) -> Result<std::shared_ptr<const Dataset>> {
    auto d = loadDataset(files, baseDir);
    if (!d) return d.status().withContext(std::string(split) + " split");
    DW_RETURN_IF_ERROR(sameInputs(*d, split));
    return std::shared_ptr<const Dataset>(std::make_shared<Dataset>(std::move(d.value())));
  };
  if (!spec.validation.empty()) {
    auto v = own(spec.validation, "validation");
    if (!v) return v.status();
    out.validation = *v;
  } else if (!split.validation.empty()) {
    out.validation = std::make_shared<Dataset>(train->gather(split.validation));
  }
  if (!spec.test.empty()) {
    auto t = own(spec.test, "test");
    if (!t) return t.status();
    out.test = *t;
  } else if (!split.test.empty()) {
    out.test = std::make_shared<Dataset>(train->gather(split.test));
  }
  out.train = static_cast<int64_t>(split.train.size()) == train->size()
                  ? std::make_shared<Dataset>(std::move(train.value()))
                  : std::make_shared<Dataset>(train->gather(split.train));
  return out;
}

BatchCursor::BatchCursor(std::shared_ptr<const Dataset> data, LoaderOptions options)
    : loader_(std::move(data), options) {
  loader_.startEpoch(epoch_);
}

Result<Batch> BatchCursor::next() {
  auto b = loader_.next();
  if (!b) {  // the epoch ran out: single steps walk the data epoch after epoch
    loader_.startEpoch(++epoch_);
    b = loader_.next();
  }
  if (!b) return Status::error("the dataset has no samples");
  return std::move(*b);
}

// ---- Inspection ---------------------------------------------------------------------------------

Result<SourceSummary> inspectSource(const DataFileSpec& spec, const std::string& baseDir) {
  SourceSummary s;
  s.path = resolvePath(spec.path, baseDir);
  std::error_code ec;
  if (spec.path.empty()) return Status::error("no file chosen");
  if (!fs::exists(s.path, ec))
    return Status::error(s.path + ": no such file or folder; choose an existing one");
  if (!fs::is_directory(s.path, ec)) DW_RETURN_IF_ERROR(regularFile(s.path));
  s.format = spec.format;
  if (s.format.empty()) {
    auto f = detectFormat(s.path);
    if (!f) return f.status();
    s.format = *f;
  }
  Tensor t;
  if (s.format == "images") {
    auto info = inspectImageFolder(s.path);
    if (!info) return info.status();
    s.classes = info->classes;
    s.samples = info->samples;
    s.otherSize = info->otherSize;
    if (spec.imageTakeLabel) {
      s.dtype = DType::kInt64;
      s.labelCounts = info->countPerClass;
      return s;
    }
    s.dtype = DType::kUInt8;
    ImageFolderOptions o = imageOptions(spec);
    const int64_t c = o.channels > 0 ? o.channels : info->firstChannels;
    const int64_t h = o.height > 0 ? o.height : info->firstHeight;
    const int64_t w = o.width > 0 ? o.width : info->firstWidth;
    s.sampleShape = {c, h, w};
    // Every preview the same size, so they stack; the first image's when no resize is set.
    o.channels = c;
    o.height = h;
    o.width = w;
    const auto count = static_cast<int64_t>(info->firstFiles.size());
    s.preview = Tensor(DType::kUInt8, {count, c, h, w});
    for (int64_t i = 0; i < count; ++i) {
      auto img = readImage(info->firstFiles[static_cast<size_t>(i)], o);
      if (!img) return img.status();
      std::copy_n(img->data<uint8_t>(), c * h * w, s.preview.data<uint8_t>() + i * c * h * w);
    }
    return s;
  }
  if (s.format == "csv") {
    // The first rows as text, so the panel shows the table as written (the reader's numbers
    // would drop a text column).
    std::ifstream f(s.path);
    std::string line;
    std::vector<std::string> cells;
    for (bool header = spec.csvHeader; s.previewRows.size() < 5 && std::getline(f, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      splitCsvLine(line, ',', cells);
      if (!header || !csvLineIsHeader(cells)) s.previewRows.push_back(cells);
      header = false;
    }
  }
  auto raw = readRaw(spec, s.path, s.format, 0, &s.csvColumns);
  if (!raw) return raw.status();
  t = std::move(raw.value());
  s.dtype = t.dtype();
  s.samples = t.rank() ? t.dim(0) : 1;
  if (t.rank() > 0) s.sampleShape.assign(t.shape().begin() + 1, t.shape().end());
  const int64_t per = numElements(s.sampleShape);
  if (t.rank() > 0) s.preview = firstSamples(t, 16);
  // Integer data with one value per sample and a small range reads as class labels.
  if (isIntegral(t.dtype()) && per == 1 && s.samples > 0) {
    int64_t lo = 0, hi = -1;
    bool ok = true;
    for (int64_t i = 0; i < t.size() && ok; ++i) {
      const int64_t v = t.getInt(i);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      ok = lo >= 0 && hi < 10000;
    }
    if (ok) {
      s.labelCounts.assign(static_cast<size_t>(hi + 1), 0);
      for (int64_t i = 0; i < t.size(); ++i) ++s.labelCounts[static_cast<size_t>(t.getInt(i))];
    }
  }
  return s;
}

Result<StoredType> storedType(const DataFileSpec& spec, const std::string& baseDir) {
  StoredType out;
  const std::string path = resolvePath(spec.path, baseDir);
  out.format = spec.format;
  if (out.format.empty()) {
    auto f = detectFormat(path);
    if (!f) return f.status();
    out.format = *f;
  }
  if (out.format == "images") {
    auto info = inspectImageFolder(path);
    if (!info) return info.status();
    out.samples = info->samples;
    out.dtype = spec.imageTakeLabel ? DType::kInt64 : DType::kUInt8;
    if (!spec.imageTakeLabel)
      out.sampleShape = {spec.imageChannels > 0 ? spec.imageChannels : info->firstChannels,
                         spec.imageHeight > 0 ? spec.imageHeight : info->firstHeight,
                         spec.imageWidth > 0 ? spec.imageWidth : info->firstWidth};
    return out;
  }
  if (out.format == "pb") {  // no header of its own: the tensor is read
    auto t = readTensorPb(path);
    if (!t) return t.status();
    out.samples = t->rank() ? t->dim(0) : 0;
    out.dtype = t->dtype();
    if (t->rank() > 1) out.sampleShape.assign(t->shape().begin() + 1, t->shape().end());
    return out;
  }
  Result<SourceHeader> h =
      out.format == "idx"   ? readIdxHeader(path)
      : out.format == "npy" ? readNpyHeader(path)
      : out.format == "csv"
          ? readCsvHeader(path, csvOptions(spec))
          : Result<SourceHeader>(
                Status::error(path + ": format '" + out.format +
                              "' is not supported; use idx, npy, csv, pb or images (a folder)"));
  if (!h) return h.status();
  out.samples = h->shape.empty() ? 0 : h->shape[0];
  out.dtype = h->dtype;
  if (h->shape.size() > 1) out.sampleShape.assign(h->shape.begin() + 1, h->shape.end());
  if (out.format == "csv") {  // what readCsv makes of the columns the spec takes
    if (spec.csvTakeLabel) {
      // The spec's dtype where it names one; as stored, it depends on the values: then the
      // column is read (a label column is one number a row).
      const CsvOptions o = csvOptions(spec);
      out.dtype = o.labelType;
      if (o.labelType == DType::kUndefined) {
        auto r = readCsv(path, o);
        if (!r) return r.status();
        out.dtype = r->labels ? r->labels->dtype() : DType::kInt64;
      }
      out.sampleShape.clear();
    } else {
      const auto all = static_cast<int64_t>(h->csvColumns.size());
      out.sampleShape = {!spec.csvFeatureColumns.empty()
                             ? static_cast<int64_t>(spec.csvFeatureColumns.size())
                             : all - (spec.csvLabelColumn.empty() ? 0 : 1)};
    }
  }
  return out;
}

bool guessCsvLabel(DataFileSpec& spec, const std::vector<std::string>& columns,
                   const DataInput& input) {
  const std::string column = guessLabelColumn(columns);
  if (column.empty()) return false;
  spec.csvLabelColumn = column;
  const std::string name = lower(input.name);
  spec.csvTakeLabel = input.target || name.find("label") != std::string::npos ||
                      name.find("target") != std::string::npos || name == "y";
  return true;
}

std::string guessLabelColumn(const std::vector<std::string>& columns) {
  // In order of preference: "y" only when nothing says label more plainly.
  for (const char* wanted : {"label", "labels", "class", "target", "category", "y"})
    for (const auto& c : columns) {
      std::string name = c;
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (lower(name) == wanted) return c;
    }
  return "";
}

std::string inputTypeText(DType dtype, const std::vector<int64_t>& sampleShape) {
  return dw::dtypeName(dtypeToOnnx(dtype)) + dimsText(sampleShape, true);
}

Result<std::vector<DataInput>> dataInputsOf(const Graph& graph, const std::string& model) {
  ExportOptions eo;
  eo.model = model;
  eo.withLosses = true;
  eo.check = CheckLevel::None;
  eo.inferShapes = false;
  auto withLosses = exportOnnx(graph, eo);
  if (!withLosses) return withLosses.status();
  // The export lists the inputs only losses and metrics read (the targets) in its metadata.
  std::set<std::string> targets;
  for (const auto& p : withLosses->metadata_props())
    if (p.key() == kTrainingMetadataKey) {
      const auto meta = nlohmann::json::parse(p.value(), nullptr, false);
      if (meta.is_object() && meta.contains("targets") && meta["targets"].is_array())
        for (const auto& t : meta["targets"])
          if (t.is_string()) targets.insert(t.get<std::string>());
    }
  std::set<std::string> inits;
  for (const auto& i : withLosses->graph().initializer()) inits.insert(i.name());
  std::vector<DataInput> out;
  for (const auto& in : withLosses->graph().input()) {
    if (inits.count(in.name())) continue;
    DataInput d;
    d.name = in.name();
    d.target = targets.count(in.name()) > 0;
    d.typeText = formatType(in.type());
    if (in.type().has_tensor_type()) {
      const auto& tt = in.type().tensor_type();
      d.dtype = dtypeFromOnnx(tt.elem_type());
      if (tt.has_shape())
        for (const auto& dim : tt.shape().dim())
          d.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

// Images stored channels-last ([H, W, C], as numpy, PIL and Keras keep them) for an input that
// takes them channels-first ([C, H, W], as torch exports), or the other way round, with more than
// one channel: the element counts agree, but a reshape would scramble the pixels (a trial's
// CIFAR-like data trained on noise, every check saying it fit). A transpose is what they need.
bool channelsMoved(const std::vector<int64_t>& stored, const std::vector<int64_t>& want) {
  if (stored.size() != 3 || want.size() != 3 || stored == want) return false;
  const bool lastToFirst =
      stored[2] > 1 && stored[2] == want[0] && stored[0] == want[1] && stored[1] == want[2];
  const bool firstToLast =
      stored[0] > 1 && stored[0] == want[2] && stored[1] == want[0] && stored[2] == want[1];
  return lastToFirst || firstToLast;
}

std::string channelsAdvice(const std::vector<int64_t>& stored, const std::vector<int64_t>& want) {
  const bool toFirst = stored[2] == want[0];
  return std::string(toFirst ? "the data is channels-last (height, width, channels) and the input "
                               "channels-first"
                             : "the data is channels-first and the input channels-last") +
         ": a reshape would scramble the pixels. Transpose the data (numpy: x.transpose" +
         (toFirst ? "(0, 3, 1, 2)" : "(0, 2, 3, 1)") + ") and give the file again";
}

}  // namespace

std::string checkFit(const SourceSummary& src, const DataFileSpec& spec, const DataInput& input) {
  const auto [dtype, shape] = convertedType(src, spec);
  const std::string data = fileName(src.path) + " gives " + inputTypeText(dtype, shape);
  const std::string wants = "input '" + input.name + "' takes " + input.typeText;
  // Images of several sizes stack only once resized to one.
  if (src.format == "images" && !spec.imageTakeLabel && !src.otherSize.empty() &&
      (spec.imageHeight <= 0 || spec.imageWidth <= 0))
    return fileName(src.path) + ": the images differ in size (" + src.otherSize +
           "): set a height and width to resize them to";
  // A reshape already in the project that moves the channels (one an earlier version proposed).
  if (spec.reshapes() && channelsMoved(src.sampleShape, spec.shape))
    return fileName(src.path) + " holds " + inputTypeText(src.dtype, src.sampleShape) +
           ", which the source reshapes to " + dimsText(spec.shape, false) + ": " +
           channelsAdvice(src.sampleShape, spec.shape);
  if (dtype != input.dtype) {
    // A cast fixes the type alone; with the shape wrong too the file is likely not the one for
    // this input (class labels where images go, or the other way).
    const std::vector<int64_t> want =
        input.shape.empty() ? std::vector<int64_t>{} : perSample(input);
    const bool shapeFits = input.shape.empty() ||
                           (want.size() == shape.size() &&
                            std::equal(want.begin(), want.end(), shape.begin(),
                                       [](int64_t w, int64_t s) { return w < 0 || w == s; })) ||
                           (fullyKnown(want) && numElements(want) == numElements(shape));
    if (shapeFits) return data + " but " + wants + ": convert the dtype";
    return data + " but " + wants + ": neither the type nor the shape of a sample fit (" +
           std::to_string(numElements(shape)) + " values against " +
           (fullyKnown(want) ? std::to_string(numElements(want)) : std::string("another shape")) +
           "); is it the file for this input? (class labels where samples go, or the other way)";
  }
  if (input.shape.empty()) return "";  // unknown rank: anything goes
  const auto want = perSample(input);
  if (want.size() != shape.size()) {
    if (fullyKnown(want) && numElements(want) == numElements(shape))
      return data + " but " + wants + ": reshape each sample to " + dimsText(want, false) +
             (want.empty() ? " (one value a sample: \"shape\": [] in the source, [] in the "
                             "Data panel's Reshape box)"
                           : "");
    if (fullyKnown(want))
      return data + " but " + wants + ": " + std::to_string(numElements(shape)) +
             " values per sample against " + std::to_string(numElements(want)) +
             "; change the Input's type to " + inputTypeText(dtype, shape) +
             ", or the data's size (image folders: resize)";
    return data + " but " + wants + ": the ranks differ; change the Input's type or reshape";
  }
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] >= 0 && want[i] != shape[i]) {
      if (channelsMoved(shape, want))
        return data + " but " + wants + ": " + channelsAdvice(shape, want);
      if (fullyKnown(want) && numElements(want) == numElements(shape))
        return data + " but " + wants + ": reshape each sample to " + dimsText(want, false);
      return data + " but " + wants + ": " + std::to_string(numElements(shape)) +
             " values per sample against " +
             (fullyKnown(want) ? std::to_string(numElements(want)) : std::string("another shape")) +
             "; change the Input's type to " + inputTypeText(dtype, shape);
    }
  return "";
}

Proposal proposeConversion(const SourceSummary& src, const DataFileSpec& current,
                           const DataInput& input) {
  Proposal p;
  DataFileSpec s = current;
  {
    const auto [t, shape] = convertedType(src, current);
    p.inputTypeForData = inputTypeText(t, shape);
  }
  s.storedDtype = dtypeName(src.dtype);
  s.storedShape = src.sampleShape;
  const auto want = perSample(input);
  std::vector<std::string> steps;
  // Image folders are resized to the input's height and width, in its channel count.
  if (src.format == "images" && !s.imageTakeLabel && want.size() >= 2) {
    const size_t r = want.size();
    const int64_t h = want[r - 2], w = want[r - 1];
    const int64_t c = r >= 3 ? want[r - 3] : 1;
    // A folder of mixed sizes is resized even where its first image has the input's size.
    const bool mixed = !src.otherSize.empty() && (s.imageHeight <= 0 || s.imageWidth <= 0);
    if (h > 0 && w > 0 && (s.imageHeight != h || s.imageWidth != w) &&
        (mixed || src.sampleShape.size() != 3 || src.sampleShape[1] != h ||
         src.sampleShape[2] != w)) {
      s.imageHeight = h;
      s.imageWidth = w;
      steps.push_back("resize to " + std::to_string(h) + "x" + std::to_string(w));
    }
    if ((c == 1 || c == 3) && src.sampleShape.size() == 3 && src.sampleShape[0] != c &&
        s.imageChannels != c) {
      s.imageChannels = c;
      steps.push_back(c == 1 ? "convert to grey" : "convert to RGB");
    }
  }
  if (isFloating(input.dtype)) {
    const bool classes = src.isLabels() && want.size() == 1 && want[0] > 1;
    if (classes) {
      if (s.oneHot != want[0]) {
        s.oneHot = want[0];
        steps.push_back("one-hot encode " + std::to_string(want[0]) + " classes");
      }
      s.dtype.clear();
      s.normalization = {};
    } else {
      if (src.dtype == DType::kUInt8 && s.normalization.scale == 1.0) {
        s.normalization.scale = 1.0 / 255.0;
        steps.push_back("scale by 1/255");
      }
      const std::string name = dtypeName(input.dtype);
      if (input.dtype == DType::kFloat && !wantsFloat(s) && src.dtype != DType::kFloat) {
        s.dtype = "float32";
        steps.push_back("convert to float32");
      } else if (input.dtype != DType::kFloat && s.dtype != name && src.dtype != input.dtype) {
        s.dtype = name;
        steps.push_back("convert to " + name);
      } else if (steps.size() && wantsFloat(s) && src.dtype != DType::kFloat) {
        // Scaling makes float32 anyway; saying so in the spec shows it in the Type box too.
        s.dtype = "float32";
        steps.back() += " as float32";
      }
    }
  } else if (input.dtype != DType::kUndefined && input.dtype != DType::kString) {
    const std::string name = dtypeName(input.dtype);
    if (src.dtype != input.dtype && s.dtype != name) {
      s.dtype = name;
      s.normalization = {};
      s.oneHot = 0;
      steps.push_back("convert to " + name);
    }
  }
  // Reshape each sample when the counts agree and the layouts do not.
  {
    DataFileSpec noShape = s;
    noShape.shape.clear();
    noShape.scalarSamples = false;
    const auto [t, shape] = convertedType(src, noShape);
    // want is [] for an input of one value a sample ([N]) as well as for one of unknown rank.
    if ((!want.empty() || !input.shape.empty()) && fullyKnown(want) &&
        numElements(want) == numElements(shape) && want != shape && !channelsMoved(shape, want)) {
      if (s.shape != want || !s.reshapes())
        steps.push_back("reshape each sample to " + dimsText(want, false));
      s.shape = want;
      s.scalarSamples = want.empty();
    } else if (s.reshapes() && numElements(s.shape) != numElements(shape)) {
      s.shape.clear();
      s.scalarSamples = false;
    }
  }
  const std::string stored = fileName(src.path) + ": " + std::to_string(src.samples) +
                             " samples of " + inputTypeText(src.dtype, src.sampleShape);
  const std::string misfit = checkFit(src, s, input);
  p.fits = misfit.empty();
  p.changes = !steps.empty();
  p.spec = std::move(s);
  if (!p.fits)
    p.message = misfit;
  else if (steps.empty())
    p.message = stored + "; input '" + input.name + "' takes " + input.typeText + ": it fits.";
  else {
    std::string list;
    for (size_t i = 0; i < steps.size(); ++i)
      list += (i == 0 ? "" : i + 1 == steps.size() ? " and " : ", ") + steps[i];
    p.message = stored + "; input '" + input.name + "' takes " + input.typeText + ": " + list + ".";
  }
  return p;
}

Result<Normalization> computeNormalization(const DataFileSpec& spec, const std::string& baseDir,
                                           int64_t limit) {
  DataFileSpec s = spec;
  s.normalization.mean = 0;
  s.normalization.std = 1;
  s.oneHot = 0;
  s.shape.clear();
  s.dtype = "float32";
  auto d = loadDataset({s}, baseDir, limit);
  if (!d) return d.status();
  const Tensor& t = d->columns.begin()->second;
  const float* p = t.data<float>();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < t.size(); ++i) sum += p[i];
  const double mean = t.size() ? sum / static_cast<double>(t.size()) : 0;
  for (int64_t i = 0; i < t.size(); ++i) sq += (p[i] - mean) * (p[i] - mean);
  const double var = t.size() ? sq / static_cast<double>(t.size()) : 0;
  if (!(var > 0))
    return Status::error(resolvePath(spec.path, baseDir) +
                         ": every value is the same, so there is no spread to normalize by");
  Normalization n;
  n.scale = spec.normalization.scale;
  n.mean = mean;
  n.std = std::sqrt(var);
  return n;
}

// ---- The ONNX data prelude ----------------------------------------------------------------------

namespace {

void renameInputs(onnx::GraphProto& g, const std::string& from, const std::string& to) {
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input())
      if (in == from) in = to;
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) renameInputs(*a.mutable_g(), from, to);
      for (auto& sub : *a.mutable_graphs()) renameInputs(sub, from, to);
    }
  }
  for (auto& o : *g.mutable_output())
    if (o.name() == from) o.set_name(to);
}

}  // namespace

// What names the prelude's nodes and constants, after the input they convert.
constexpr const char* kPreludeMark = "/data_prelude/";

Result<std::vector<std::string>> prependDataConversion(onnx::ModelProto& model,
                                                       const DatasetSpec& spec,
                                                       const std::string& baseDir) {
  std::vector<std::string> changed;
  onnx::GraphProto& g = *model.mutable_graph();
  std::vector<onnx::NodeProto> prelude;
  for (const DataFileSpec& f : spec.train) {
    if (!f.convertsData()) continue;
    int index = -1;
    for (int i = 0; i < g.input_size(); ++i)
      if (g.input(i).name() == f.input) index = i;
    if (index < 0) continue;  // a target: not in this model
    // What the source holds now (its image size may have changed since the panel recorded
    // it); the recorded type when the file is not at hand.
    DType stored = DType::kUndefined;
    std::vector<int64_t> storedShape;
    if (auto s = storedType(f, baseDir); s.ok()) {
      stored = s->dtype;
      storedShape = s->sampleShape;
    } else if (dtypeByName(f.storedDtype) != DType::kUndefined) {
      stored = dtypeByName(f.storedDtype);
      storedShape = f.storedShape;
    } else {
      return s.status().withContext(
          "the data conversion of input '" + f.input +
          "' needs its source's stored type; make the file available or export without the "
          "data conversion");
    }
    onnx::ValueInfoProto& in = *g.mutable_input(index);
    const int32_t finalType = in.type().tensor_type().elem_type();
    const std::string prefix = f.input + kPreludeMark;
    std::string cur = f.input;
    auto addNode = [&](const std::string& op, std::vector<std::string> inputs,
                       const std::string& out) {
      onnx::NodeProto n;
      n.set_op_type(op);
      n.set_name(prefix + out);
      for (auto& i : inputs) n.add_input(i);
      n.add_output(prefix + out);
      prelude.push_back(n);
      cur = prefix + out;
      return &prelude.back();
    };
    auto addScalar = [&](const std::string& name, float v) {
      tensorToProto(Tensor::fromVector<float>({v}, {}), g.add_initializer(), prefix + name);
      return prefix + name;
    };
    int32_t curType = dtypeToOnnx(stored);
    if (wantsFloat(f)) {
      if (stored != DType::kFloat) {
        addIntAttr(*addNode("Cast", {cur}, "float"), "to", onnx::TensorProto::FLOAT);
        curType = onnx::TensorProto::FLOAT;
      }
      // The same float operations as normalize(): (x * scale - mean) * (1 / std).
      const Normalization& n = f.normalization;
      if (n.scale != 1.0)
        addNode("Mul", {cur, addScalar("scale", static_cast<float>(n.scale))}, "scaled");
      if (n.mean != 0.0)
        addNode("Sub", {cur, addScalar("mean", static_cast<float>(n.mean))}, "centred");
      if (n.std != 1.0)
        addNode("Mul", {cur, addScalar("inv_std", static_cast<float>(1.0 / n.std))}, "normalized");
    } else if (const DType to = dtypeByName(f.dtype); to != DType::kUndefined && to != stored) {
      curType = dtypeToOnnx(to);
      addIntAttr(*addNode("Cast", {cur}, "cast"), "to", curType);
    }
    if (f.oneHot > 0) {
      if (curType != onnx::TensorProto::INT64) {
        addIntAttr(*addNode("Cast", {cur}, "indices"), "to", onnx::TensorProto::INT64);
      }
      tensorToProto(Tensor::fromVector<int64_t>({f.oneHot}, {}), g.add_initializer(),
                    prefix + "depth");
      tensorToProto(Tensor::fromVector<float>({0.0f, 1.0f}, {2}), g.add_initializer(),
                    prefix + "on_off");
      addIntAttr(*addNode("OneHot", {cur, prefix + "depth", prefix + "on_off"}, "one_hot"), "axis",
                 -1);
      curType = onnx::TensorProto::FLOAT;
    }
    if (f.reshapes() && f.shape != storedShape) {
      std::vector<int64_t> target{-1};
      target.insert(target.end(), f.shape.begin(), f.shape.end());
      tensorToProto(Tensor::fromVector<int64_t>(target, {static_cast<int64_t>(target.size())}),
                    g.add_initializer(), prefix + "shape");
      addNode("Reshape", {cur, prefix + "shape"}, "reshaped");
    }
    if (curType != finalType) addIntAttr(*addNode("Cast", {cur}, "typed"), "to", finalType);
    if (cur == f.input) continue;  // nothing to do after all
    // Readers of the input now read the prelude's result; the input takes the stored data.
    renameInputs(g, f.input, cur);
    std::string batchParam = "N";
    int64_t batchValue = -1;
    if (in.type().tensor_type().has_shape() && in.type().tensor_type().shape().dim_size() > 0) {
      const auto& d0 = in.type().tensor_type().shape().dim(0);
      if (d0.has_dim_value()) batchValue = d0.dim_value();
      if (d0.has_dim_param()) batchParam = d0.dim_param();
    }
    auto* tt = in.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtypeToOnnx(stored));
    tt->clear_shape();
    auto* shape = tt->mutable_shape();
    auto* d0 = shape->add_dim();
    if (batchValue >= 0)
      d0->set_dim_value(batchValue);
    else
      d0->set_dim_param(batchParam);
    for (int64_t d : storedShape) shape->add_dim()->set_dim_value(d);
    for (int i = 0; i < g.value_info_size(); ++i)
      if (g.value_info(i).name() == f.input) {
        g.mutable_value_info()->DeleteSubrange(i, 1);
        break;
      }
    changed.push_back(f.input);
  }
  if (!prelude.empty()) {
    // The prelude's constants are no weights: the layout says so, or a project imported from
    // the export trained its 1/255 (a trial's came back as 0.0022).
    for (auto& prop : *model.mutable_metadata_props()) {
      if (prop.key() != kLayoutMetadataKey) continue;
      auto layout = nlohmann::json::parse(prop.value(), nullptr, false);
      if (!layout.is_object()) break;
      for (const auto& init : g.initializer())
        if (init.name().find(kPreludeMark) != std::string::npos)
          layout["nodes"]["initializer:" + init.name()]["status"] = "Constant";
      prop.set_value(layout.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    // The prelude runs first: prepend it, keeping the graph's topological order.
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (auto& n : prelude) *nodes.Add() = std::move(n);
    for (auto& n : *g.mutable_node()) *nodes.Add() = std::move(n);
    g.mutable_node()->Swap(&nodes);
  }
  return changed;
}

Status addDataConversion(onnx::ModelProto& model, const DatasetSpec& spec,
                         const std::string& baseDir) {
  auto changed = prependDataConversion(model, spec, baseDir);
  if (!changed) return changed.status();
  if (changed->empty()) return Status();
  return checkOnnxModel(model).withContext("the model with its data conversion");
}

std::string describeSplit(const DatasetSpec& d, const std::string& split) {
  auto names = [](const std::vector<DataFileSpec>& files) {
    std::string list;
    for (const auto& f : files)
      list += (list.empty() ? "" : ", ") + std::filesystem::path(f.path).filename().string();
    return list;
  };
  const std::vector<DataFileSpec>& own = split == "validation" ? d.validation
                                         : split == "test"     ? d.test
                                                               : d.train;
  const std::string word = split == "train" ? "training" : split;
  if (!own.empty() || split == "train") return "the " + word + " data (" + names(own) + ")";
  return "the " + word + " split of the training data (" + names(d.train) + ")";
}

std::vector<LabelRange> labelRangesOf(const onnx::GraphProto& graph,
                                      const std::map<std::string, const onnx::TypeProto*>& types,
                                      const std::vector<std::string>& dataInputs) {
  std::vector<LabelRange> ranges;
  for (const auto& n : graph.node()) {
    if (!(n.domain().empty() || n.domain() == "ai.onnx") || n.input_size() < 2) continue;
    if (n.op_type() != "SoftmaxCrossEntropyLoss" && n.op_type() != "NegativeLogLikelihoodLoss")
      continue;
    if (std::find(dataInputs.begin(), dataInputs.end(), n.input(1)) == dataInputs.end()) continue;
    auto t = types.find(n.input(0));
    if (t == types.end() || !t->second->has_tensor_type()) continue;
    const auto& shape = t->second->tensor_type().shape();
    if (shape.dim_size() < 2 || !shape.dim(1).has_dim_value()) continue;
    LabelRange c;
    c.input = n.input(1);
    // An Output Train node's loss is lowered as "<node>_loss/...": named by that node, which
    // is the one the user sees, rather than by the lowered operator.
    const std::string name = n.name().empty() ? n.output(0) : n.name();
    const std::string head = name.substr(0, name.find('/'));
    const size_t k = kLossSuffix.size();
    c.loss = head.size() > k && head.size() < name.size() && head.ends_with(kLossSuffix)
                 ? "the loss of '" + head.substr(0, head.size() - k) + "' (" + n.op_type() + ")"
                 : "the loss '" + name + "'";
    c.classes = shape.dim(1).dim_value();
    for (const auto& a : n.attribute())
      if (a.name() == "ignore_index") {
        c.hasIgnore = true;
        c.ignore = a.i();
      }
    ranges.push_back(c);
  }
  return ranges;
}

Status checkLabelValues(const std::vector<LabelRange>& ranges,
                        const std::map<std::string, Tensor>& columns, const std::string& where,
                        const std::vector<int64_t>* origin) {
  for (const auto& c : ranges) {
    auto it = columns.find(c.input);
    if (it == columns.end()) continue;
    const Tensor& t = it->second;
    if (!t.onHost() || (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)) continue;
    const int64_t perSample = t.rank() > 0 && t.dim(0) > 0 ? t.size() / t.dim(0) : 1;
    for (int64_t i = 0; i < t.size(); ++i) {
      const int64_t v = t.getInt(i);
      if ((v >= 0 && v < c.classes) || (c.hasIgnore && v == c.ignore)) continue;
      const int64_t sample = i / perSample;
      const bool mapped = origin && !origin->empty();
      return Status::error(
          "sample " + std::to_string(mapped ? (*origin)[static_cast<size_t>(sample)] : sample) +
          " of " + where + (mapped ? " (its index in the source files)" : "") + " has label " +
          std::to_string(v) + " in input '" + c.input + "', outside [0, " +
          std::to_string(c.classes) + "): " + c.loss + " scores " + std::to_string(c.classes) +
          " classes, so labels must be class indices 0 to " + std::to_string(c.classes - 1) +
          " (fix the data, or give the model that many outputs)");
    }
  }
  return Status();
}

}  // namespace dw::engine::training
