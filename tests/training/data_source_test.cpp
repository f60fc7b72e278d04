// engine/training/data_source.h: the split rule, loadData's held-out samples (what the studio's
// Data panel and `deepwire train` both read), the conversion a panel proposes, and the data
// prelude of an exported model.
#include "engine/training/data_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/io.h"
#include "engine/training/trainer.h"
#include "nodes/type_syntax.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;

std::string tempDir() {
  const fs::path p = fs::temp_directory_path() / ("dw_data_source_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p.string();
}

TEST(DataSource, SplitSizesFloorAndTakeFromTheEnd) {
  const SplitSizes s = splitSizes(100, 0.1, 0.2);
  EXPECT_EQ(s.train, 70);
  EXPECT_EQ(s.validation, 10);
  EXPECT_EQ(s.test, 20);
  EXPECT_EQ(splitSizes(5, 0.1, 0).validation, 0);  // floor: too few samples hold out none
  EXPECT_EQ(splitSizes(5, 0.1, 0).train, 5);
}

TEST(DataSource, SplitIndicesDealEveryClassAndNeverChange) {
  // 100 samples stored class by class (as an image folder is): 50 of class 0, then 50 of 1.
  const SplitIndices s = splitIndices(100, 0.2, 0.1);
  ASSERT_EQ(s.train.size(), 70u);
  ASSERT_EQ(s.validation.size(), 20u);
  ASSERT_EQ(s.test.size(), 10u);
  std::vector<int64_t> all;
  for (const auto* v : {&s.train, &s.validation, &s.test}) {
    EXPECT_TRUE(std::is_sorted(v->begin(), v->end()));  // file order inside a split
    all.insert(all.end(), v->begin(), v->end());
  }
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(all[size_t(i)], i);  // disjoint, complete
  const auto classOne =
      std::count_if(s.validation.begin(), s.validation.end(), [](int64_t i) { return i >= 50; });
  EXPECT_GT(classOne, 3);  // both classes are held out, not only the last one stored
  EXPECT_LT(classOne, 17);
  const SplitIndices again = splitIndices(100, 0.2, 0.1);
  EXPECT_EQ(again.validation, s.validation);
  EXPECT_EQ(again.test, s.test);
  EXPECT_EQ(splitIndices(100, 0, 0).train.size(), 100u);
}

TEST(DataSource, SplitIndicesHoldOutEveryClassInProportion) {
  // A small image folder: three classes of 9, stored class by class, and a fifth held out. Dealt
  // at random, one class lost 5 of its 9 to validation and another 1.
  std::vector<int64_t> classes(27);
  for (size_t i = 0; i < classes.size(); ++i) classes[i] = int64_t(i / 9);
  const SplitIndices s = splitIndices(27, 0.2, 0, classes);
  ASSERT_EQ(s.validation.size(), 5u);  // splitSizes' totals are kept
  ASSERT_EQ(s.train.size(), 22u);
  for (int64_t c = 0; c < 3; ++c) {
    const auto held = std::count_if(s.validation.begin(), s.validation.end(),
                                    [&](int64_t i) { return classes[size_t(i)] == c; });
    EXPECT_GE(held, 1) << "class " << c;
    EXPECT_LE(held, 2) << "class " << c;
  }
  std::vector<int64_t> all = s.train;
  all.insert(all.end(), s.validation.begin(), s.validation.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 27; ++i) ASSERT_EQ(all[size_t(i)], i);
  EXPECT_EQ(splitIndices(27, 0.2, 0, classes).validation, s.validation);  // never changes

  // A class of one sample keeps it for training while others can give the held-out ones.
  std::vector<int64_t> rare(20, 0);
  rare[7] = 5;
  for (size_t i = 10; i < 20; ++i) rare[i] = 1;
  const SplitIndices r = splitIndices(20, 0.25, 0.1, rare);
  EXPECT_EQ(r.validation.size(), 5u);
  EXPECT_EQ(r.test.size(), 2u);
  EXPECT_NE(std::find(r.train.begin(), r.train.end(), 7), r.train.end());
}

TEST(DataSource, SampleClassesAreTheOneIntegerColumn) {
  Dataset d;
  d.columns["x"] = Tensor::fromVector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(sampleClasses(d).empty());  // no labels: the split is dealt at random
  d.columns["y"] = Tensor::fromVector(std::vector<int64_t>{3, 1}, {2, 1});
  EXPECT_EQ(sampleClasses(d), (std::vector<int64_t>{3, 1}));
  d.columns["z"] = Tensor::fromVector(std::vector<int32_t>{0, 1}, {2});
  EXPECT_TRUE(sampleClasses(d).empty());  // two candidates: not a guess
}

TEST(DataSource, LoadDataHoldsOutTheSplitIndices) {
  const std::string dir = tempDir();
  std::vector<float> x(20);
  std::vector<int64_t> y(20);
  for (int i = 0; i < 20; ++i) {
    x[size_t(i)] = float(i);
    y[size_t(i)] = i % 3;
  }
  ASSERT_TRUE(writeNpy(dir + "/x.npy", Tensor::fromVector(x, {20, 1})).ok());
  ASSERT_TRUE(writeNpy(dir + "/y.npy", Tensor::fromVector(y, {20})).ok());
  DatasetSpec spec;
  spec.train = {{"x", "x.npy"}, {"y", "y.npy"}};
  spec.trainLimit = 18;
  spec.validationSplit = 0.25;  // floor(18 * 0.25) = 4
  spec.testSplit = 0.1;         // floor(1.8) = 1
  auto d = loadData(spec, dir);
  ASSERT_TRUE(d.ok()) << d.message();
  ASSERT_TRUE(d->validation && d->test);
  EXPECT_EQ(d->train->size(), 13);
  EXPECT_EQ(d->validation->size(), 4);
  EXPECT_EQ(d->test->size(), 1);
  // y is the one integer column: the classes the split is dealt by.
  const SplitIndices s =
      splitIndices(18, 0.25, 0.1, std::vector<int64_t>(y.begin(), y.begin() + 18));
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(d->validation->columns.at("x").data<float>()[i], float(s.validation[i]));
  EXPECT_EQ(d->test->columns.at("x").data<float>()[0], float(s.test[0]));
  // Each split knows where its samples sit in the files (errors name that index).
  EXPECT_EQ(d->validation->origin, s.validation);
  EXPECT_EQ(d->train->originOf(0), s.train[0]);
  EXPECT_EQ(d->train->gather({2}).origin, std::vector<int64_t>{s.train[2]});
  EXPECT_EQ(d->evaluation(), d->validation);
  // The same section through the project's JSON (what deepwire train parses) gives the same.
  TrainingConfig c;
  c.dataset = spec;
  auto parsed = parseTrainingConfig(trainingConfigToJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  auto again = loadData(parsed->dataset, dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->validation->columns.at("x").data<float>()[0], float(s.validation[0]));
  EXPECT_EQ(again->train->size(), 13);
  // A split left with no training samples is an error that says how to fix it.
  spec.validationSplit = 0.5;
  spec.testSplit = 0.5;
  auto none = loadData(spec, dir);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("lower the fractions"), std::string::npos);
  fs::remove_all(dir);
}

// A NaN pixel trained as a loss of ln(10) to the end and exited 0 (ReLU read NaN as 0; the
// gradients filled the weights with it), and float labels of 2.5 or NaN became classes: both
// are errors naming the file and the sample.
TEST(DataSource, NonFiniteValuesAndFractionalLabelsAreRefused) {
  const std::string dir = tempDir();
  std::vector<float> x(12, 0.5f), y(6, 1.0f);
  ASSERT_TRUE(writeNpy(dir + "/x.npy", Tensor::fromVector(x, {6, 2})).ok());
  ASSERT_TRUE(writeNpy(dir + "/y.npy", Tensor::fromVector(y, {6})).ok());
  DataFileSpec xs{"x", "x.npy"}, ys{"y", "y.npy"};
  ys.dtype = "int64";
  ASSERT_TRUE(loadDataset({xs, ys}, dir, 0).ok());
  x[7] = std::nanf("");
  ASSERT_TRUE(writeNpy(dir + "/x.npy", Tensor::fromVector(x, {6, 2})).ok());
  auto nan = loadDataset({xs, ys}, dir, 0);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.message().find("x.npy: sample 3, value 1 of its 2 is NaN"), std::string::npos)
      << nan.message();
  x[7] = 0.5f;
  x[0] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(writeNpy(dir + "/x.npy", Tensor::fromVector(x, {6, 2})).ok());
  EXPECT_NE(loadDataset({xs, ys}, dir, 0).message().find("sample 0, value 0 of its 2 is infinite"),
            std::string::npos);
  x[0] = 0.5f;
  ASSERT_TRUE(writeNpy(dir + "/x.npy", Tensor::fromVector(x, {6, 2})).ok());
  y[4] = 2.5f;
  ASSERT_TRUE(writeNpy(dir + "/y.npy", Tensor::fromVector(y, {6})).ok());
  auto half = loadDataset({xs, ys}, dir, 0);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.message().find("y.npy: sample 4 is 2.5, but its int64 data are whole numbers"),
            std::string::npos)
      << half.message();
  fs::remove_all(dir);
}

TEST(DataSource, ProposesScaleAndReshapeForBytesIntoAFloatImageInput) {
  SourceSummary src;
  src.path = "/data/train-images-idx3-ubyte.gz";
  src.format = "idx";
  src.samples = 60000;
  src.sampleShape = {28, 28};
  src.dtype = DType::kUInt8;
  DataInput in{"image", DType::kFloat, {-1, 1, 28, 28}, false, "float[N,1,28,28]"};
  DataFileSpec current;
  current.input = "image";
  EXPECT_NE(checkFit(src, current, in), "");  // uint8 into float: not yet
  const Proposal p = proposeConversion(src, current, in);
  EXPECT_TRUE(p.fits) << p.message;
  EXPECT_TRUE(p.changes);
  EXPECT_DOUBLE_EQ(p.spec.normalization.scale, 1.0 / 255.0);
  EXPECT_EQ(p.spec.shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(p.spec.storedDtype, "uint8");
  EXPECT_EQ(checkFit(src, p.spec, in), "");
  EXPECT_NE(p.message.find("1/255"), std::string::npos) << p.message;
  // Class labels into a float [N,10] input: one-hot, never scaled.
  SourceSummary labels = src;
  labels.sampleShape = {};
  labels.labelCounts = std::vector<int64_t>(10, 6000);
  DataInput onehot{"label", DType::kFloat, {-1, 10}, true, "float[N,10]"};
  const Proposal q = proposeConversion(labels, DataFileSpec{}, onehot);
  EXPECT_TRUE(q.fits) << q.message;
  EXPECT_EQ(q.spec.oneHot, 10);
  EXPECT_DOUBLE_EQ(q.spec.normalization.scale, 1.0);
  // 144 values against 64: nothing converts them; the sentence says what to change.
  SourceSummary big = src;
  big.sampleShape = {12, 12};
  DataInput small{"x", DType::kFloat, {-1, 64}, false, "float[N,64]"};
  const Proposal r = proposeConversion(big, DataFileSpec{}, small);
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.message.find("144"), std::string::npos) << r.message;
  // "Change the Input" writes this into the Input's type: it must be the Input's own syntax.
  SourceSummary floats = big;
  floats.dtype = DType::kFloat;
  const Proposal t = proposeConversion(floats, DataFileSpec{}, small);
  EXPECT_EQ(t.inputTypeForData, "float[N,12,12]");
  EXPECT_TRUE(dw::parseType(t.inputTypeForData).ok()) << t.inputTypeForData;
}

// Labels stored [N, 1] for an input of [N]: the proposal reshapes each sample to one value
// ("shape": [], which had read as "keep", so the advice could not be followed), and the
// training section keeps that through its JSON.
TEST(DataSource, LabelsStoredAsColumnsReshapeToOneValueASample) {
  SourceSummary src;
  src.path = "labels.npy";
  src.format = "npy";
  src.samples = 100;
  src.sampleShape = {1};
  src.dtype = DType::kInt64;
  DataInput in{"label", DType::kInt64, {-1}, true, "int64[N]"};
  EXPECT_NE(checkFit(src, DataFileSpec{}, in)
                .find("reshape each sample to [] (one value a "
                      "sample: \"shape\": [] in the source"),
            std::string::npos)
      << checkFit(src, DataFileSpec{}, in);
  const Proposal p = proposeConversion(src, DataFileSpec{}, in);
  EXPECT_TRUE(p.fits) << p.message;
  EXPECT_TRUE(p.spec.scalarSamples);
  EXPECT_EQ(checkFit(src, p.spec, in), "");
  auto cfg = parseTrainingConfig(
      R"({"dataset": {"train": [{"input": "label", "path": "l.npy", "shape": []}]}})");
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  ASSERT_EQ(cfg->dataset.train.size(), 1u);
  EXPECT_TRUE(cfg->dataset.train[0].scalarSamples);
  EXPECT_NE(trainingConfigToJson(*cfg).find("\"shape\": []"), std::string::npos)
      << trainingConfigToJson(*cfg);
}

}  // namespace
}  // namespace dw::engine::training

namespace dw::engine::training {
namespace {

TEST(DataSource, BatchCursorWalksEpochAfterEpoch) {
  auto d = std::make_shared<Dataset>();
  d->columns["x"] = Tensor::fromVector<float>({0, 1, 2, 3, 4}, {5});
  LoaderOptions lo;
  lo.batchSize = 2;
  lo.shuffle = false;
  BatchCursor c(d, lo);
  std::vector<int64_t> sizes;
  for (int i = 0; i < 4; ++i) {
    auto b = c.next();
    ASSERT_TRUE(b.ok()) << b.message();
    sizes.push_back(b->size);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1, 2}));  // the fourth starts epoch 1
  EXPECT_EQ(c.epoch(), 1);
  BatchCursor empty(std::make_shared<Dataset>(), lo);
  EXPECT_FALSE(empty.next().ok());
}

}  // namespace
}  // namespace dw::engine::training

// A path that does not exist is reported as missing, not as an unknown format (a user trial's
// relative "data/train.gz" said "cannot tell the format from the name").
TEST(DataSource, MissingFileIsSaidToBeMissing) {
  auto f = dw::engine::training::detectFormat("/nonexistent/data/train.gz");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("no such file"), std::string::npos) << f.status().message();
  auto odd = dw::engine::training::detectFormat(std::filesystem::temp_directory_path().string());
  EXPECT_TRUE(odd.ok());  // a folder: images
  // The extension decides before a name's "idx" (a file of indices, idx.npy, read as IDX).
  EXPECT_EQ(dw::engine::training::detectFormat("idx.npy").value(), "npy");
  EXPECT_EQ(dw::engine::training::detectFormat("train_idx.csv").value(), "csv");
  EXPECT_EQ(dw::engine::training::detectFormat("t10k-images-idx3-ubyte.gz").value(), "idx");
}

// Images stored channels-last for a channels-first input are not reshaped into it (the pixels
// would be scrambled, and a trial's model trained on noise with every check saying it fit): the
// proposal says to transpose them, and a project that already reshapes them is told so.
TEST(DataSource, ChannelsLastImagesAreNotReshapedIntoChannelsFirst) {
  using namespace dw::engine::training;
  using dw::engine::DType;
  SourceSummary src;
  src.path = "/data/nhwc.npy";
  src.format = "npy";
  src.samples = 64;
  src.sampleShape = {32, 32, 3};
  src.dtype = DType::kFloat;
  DataInput in{"x", DType::kFloat, {-1, 3, 32, 32}, false, "float[N,3,32,32]"};
  DataFileSpec spec;
  spec.input = "x";
  const Proposal p = proposeConversion(src, spec, in);
  EXPECT_FALSE(p.fits) << p.message;
  EXPECT_NE(p.message.find("x.transpose(0, 3, 1, 2)"), std::string::npos) << p.message;
  spec.shape = {3, 32, 32};  // an earlier proposal's reshape
  const std::string misfit = checkFit(src, spec, in);
  EXPECT_NE(misfit.find("would scramble the pixels"), std::string::npos) << misfit;
  // One channel is the same either way: the reshape stands.
  src.sampleShape = {28, 28, 1};
  DataInput grey{"x", DType::kFloat, {-1, 1, 28, 28}, false, "float[N,1,28,28]"};
  EXPECT_TRUE(proposeConversion(src, DataFileSpec{}, grey).fits);
}

// A folder of images of several sizes is resized to the input's (it showed as fitting, from its
// first image, and failed at the first batch): inspect finds another size, the proposal resizes,
// and without a size the fit says to set one.
TEST(DataSource, MixedImageSizesAreResized) {
  using namespace dw::engine::training;
  using dw::engine::DType;
  SourceSummary src;
  src.path = "/data/pictures";
  src.format = "images";
  src.samples = 4;
  src.sampleShape = {3, 50, 50};
  src.dtype = DType::kUInt8;
  src.otherSize = "/data/pictures/b/1.png is 40x30, /data/pictures/a/0.png 50x50";
  DataInput in{"image", DType::kFloat, {-1, 3, 50, 50}, false, "float[N,3,50,50]"};
  DataFileSpec keep;
  keep.input = "image";
  const std::string misfit = checkFit(src, keep, in);
  EXPECT_NE(misfit.find("the images differ in size"), std::string::npos) << misfit;
  const Proposal p = proposeConversion(src, keep, in);
  EXPECT_TRUE(p.fits) << p.message;
  EXPECT_EQ(p.spec.imageHeight, 50);
  EXPECT_EQ(p.spec.imageWidth, 50);
}

// A serialized TensorProto (.pb, as the ONNX test data stores a model's inputs) is a source like
// an NPY file: a trial's Data dock could not tell its format from the name.
TEST(DataSource, TensorProtoFilesAreSources) {
  using namespace dw::engine::training;
  const std::string file =
      "/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d/test_data_set_0/input_0.pb";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no ONNX backend test data";
  EXPECT_EQ(detectFormat(file).value(), "pb");
  DataFileSpec spec;
  spec.input = "x";
  spec.path = file;
  auto s = inspectSource(spec, "");
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto t = dw::engine::readTensorPb(file);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(s->samples, t->dim(0));
  EXPECT_EQ(s->dtype, t->dtype());
  auto stored = storedType(spec, "");
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->samples, t->dim(0));
  auto d = loadDataset({spec}, "", 0);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->columns.at("x").shape(), t->shape());
}

// A CSV's target column of fractions is a regression target: read as stored (float32), it goes
// into a float input with the proposal's reshape, and trains (a trial's y = 3 x1 - 2 x2 + noise
// was refused as "not a whole number" whatever the input took). Into an int64 input the
// fractions are still an error that says what to do.
TEST(DataSource, CsvTargetsOfFractionsAreRegressionTargets) {
  using namespace dw::engine::training;
  using dw::engine::DType;
  const auto dir = std::filesystem::temp_directory_path() / "dw_csv_regression";
  std::filesystem::create_directories(dir);
  std::ofstream((dir / "r.csv").string()) << "x1,x2,y\n1,2,-0.5\n3,4,1.25\n5,6,3\n";
  DataFileSpec target;
  target.input = "y";
  target.path = "r.csv";
  target.csvLabelColumn = "y";
  target.csvTakeLabel = true;
  auto src = inspectSource(target, dir.string());
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_EQ(src->dtype, DType::kFloat);
  DataInput in{"y", DType::kFloat, {-1, 1}, false, "float[N,1]"};
  const Proposal p = proposeConversion(*src, target, in);
  ASSERT_TRUE(p.fits) << p.message;
  DataFileSpec features = target;
  features.input = "x";
  features.csvTakeLabel = false;
  auto d = loadDataset({features, p.spec}, dir.string(), 0);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const auto& y = d->columns.at("y");
  EXPECT_EQ(y.shape(), (dw::engine::Shape{3, 1}));
  EXPECT_FLOAT_EQ(y.data<float>()[1], 1.25f);
  // Whole numbers stay class indices.
  std::ofstream((dir / "c.csv").string()) << "x1,y\n1,0\n3,2\n";
  DataFileSpec classes = target;
  classes.path = "c.csv";
  auto c = inspectSource(classes, dir.string());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->dtype, DType::kInt64);
  // Fractions asked for as class indices.
  target.dtype = "int64";
  auto bad = loadDataset({features, target}, dir.string(), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'-0.5' is not a whole number"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("give the input a float type"), std::string::npos)
      << bad.status().message();
  std::filesystem::remove_all(dir);
}

// A source that takes a CSV's labels without naming the column finds the header's label column,
// and the file's other source leaves it out of its features (a user's features read the label as
// a 785th pixel).
TEST(DataSource, CsvSourcesShareTheLabelColumn) {
  const auto dir = std::filesystem::temp_directory_path() / "dw_csv_label_share";
  std::filesystem::create_directories(dir);
  std::ofstream((dir / "t.csv").string()) << "a,b,Label\n1,2,0\n3,4,1\n5,6,2\n";
  dw::engine::training::DataFileSpec features, labels;
  features.input = "x";
  features.path = "t.csv";
  labels.input = "y";
  labels.path = "t.csv";
  labels.csvTakeLabel = true;
  labels.dtype = "int64";
  auto d = dw::engine::training::loadDataset({features, labels}, dir.string(), 0);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->columns.at("x").shape(), (dw::engine::Shape{3, 2}));
  EXPECT_EQ(d->columns.at("y").data<int64_t>()[2], 2);
  std::filesystem::remove_all(dir);
}
