// The Trainer: step semantics, initializer status, regularizers, accumulation, fit with
// cancellation, bit-exact checkpoint resume, exports, and the PyTorch golden loss curves of the
// example MLP and CNN (tests/golden/training_{mlp,cnn}.json from make_training_golden.py).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <omp.h>
#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "engine/training/trainer.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A 4 -> 3 softmax classifier with one hidden layer; `status` sets fc1's weight status and
// `reg` its regularizer.
std::string tinyProject(const std::string& status = "Trainable", const std::string& reg = "none") {
  json p = {{"format", "deepwire-project"},
            {"version", 1},
            {"model", {{"ir_version", 8}, {"opsets", {{"ai.onnx", 17}}}, {"graph_name", "tiny"}}}};
  auto node = [&](int id, const std::string& dom, const std::string& type, const std::string& name,
                  json params) {
    json n = {{"id", id}, {"domain", dom}, {"type", type}, {"position", {id * 100.0, 0.0}}};
    if (!name.empty()) n["name"] = name;
    if (!params.is_null()) n["params"] = params;
    p["nodes"].push_back(n);
  };
  auto link = [&](int from, int to, int port) {
    p["links"].push_back({{"from", {from, 0}}, {"to", {to, port}}});
  };
  node(1, "deepwire", "Input", "x", {{"type", "float[N,4]"}});
  json w1 = {{"shape", {8, 4}}, {"fill", "glorot_uniform"}, {"seed", 5}, {"status", status}};
  if (reg != "none") {
    w1["regularizer"] = reg;
    w1["l2"] = 0.01;
    w1["l1"] = 0.001;
  }
  node(2, "deepwire", "Initializer", "fc1.weight", w1);
  node(3, "deepwire", "Initializer", "fc1.bias", {{"shape", {8}}, {"fill", "zeros"}});
  node(4, "ai.onnx", "Gemm", "fc1", {{"transB", true}});
  node(5, "ai.onnx", "Tanh", "act", nullptr);
  node(6, "deepwire", "Initializer", "fc2.weight",
       {{"shape", {3, 8}}, {"fill", "glorot_uniform"}, {"seed", 6}});
  node(7, "deepwire", "Initializer", "fc2.bias",
       {{"shape", {3}}, {"fill", "constant"}, {"value", 0.1}, {"status", "Constant"}});
  node(8, "ai.onnx", "Gemm", "fc2", {{"transB", true}});
  node(9, "deepwire", "Input", "label", {{"type", "int64[N]"}});
  node(10, "deepwire.layers", "Output Train", "logits",
       {{"loss", "SparseCategoricalCrossentropy"}, {"from_logits", true}});
  node(11, "deepwire.metrics", "SparseCategoricalAccuracy", "accuracy", nullptr);
  link(1, 4, 0);
  link(2, 4, 1);
  link(3, 4, 2);
  link(4, 5, 0);
  link(5, 8, 0);
  link(6, 8, 1);
  link(7, 8, 2);
  link(8, 10, 0);
  link(9, 10, 1);
  link(8, 11, 0);
  link(9, 11, 1);
  return p.dump();
}

// Three Gaussian blobs in 4-d, labels 0..2; deterministic.
std::shared_ptr<Dataset> blobs(int64_t n, uint64_t seed = 1) {
  std::vector<float> x(static_cast<size_t>(n * 4));
  std::vector<int64_t> y(static_cast<size_t>(n));
  uint64_t s = seed;
  auto uni = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xffffff) / 16777216.f;
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i % 3;
    y[i] = c;
    for (int k = 0; k < 4; ++k) x[i * 4 + k] = (k == c ? 2.f : 0.f) + (uni() - 0.5f) * 1.5f;
  }
  auto d = std::make_shared<Dataset>();
  d->columns["x"] = Tensor::fromVector(x, {n, 4});
  d->columns["label"] = Tensor::fromVector(y, {n});
  return d;
}

Batch firstBatch(const Dataset& d, int64_t n) {
  Dataset s = d.slice(0, n);
  Batch b;
  b.inputs = s.columns;
  b.size = n;
  return b;
}

Result<std::unique_ptr<Trainer>> makeTrainer(const std::string& project, OptimizerConfig opt = {},
                                             uint64_t seed = 3) {
  auto g = projectFromJsonText(project, "<tiny>");
  if (!g) return g.status();
  TrainOptions o;
  o.optimizer = opt;
  o.threads = 1;
  o.seed = seed;
  return Trainer::create(*g, o);
}

std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.size());
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dw_trainer_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// OpenMP keeps its thread count per calling thread, and the trainer's one-thread metric sessions
// are created on the thread that later trains: the training kernels and the optimizer must still
// run with the count the trainer was given.
TEST(TrainerThreads, TrainingUsesItsThreadCountAfterOneThreadMetricSessions) {
  auto g = projectFromJsonText(tinyProject(), "<tiny>");
  ASSERT_TRUE(g.ok()) << g.message();
  TrainOptions o;
  o.threads = 3;
  auto t = Trainer::create(*g, o);
  ASSERT_TRUE(t.ok()) << t.message();
  omp_set_num_threads(1);  // as any other one-thread session created on this thread leaves it
  auto data = blobs(12);
  ASSERT_TRUE((*t)->trainStep(firstBatch(*data, 12)).ok());
  EXPECT_EQ(omp_get_max_threads(), 3);
  omp_set_num_threads(1);
  ASSERT_TRUE((*t)->optimizerStep().ok());
  EXPECT_EQ(omp_get_max_threads(), 3);
}

TEST_F(TrainerTest, StepsAccumulateAndStatusIsRespected) {
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 0.1;
  auto t = makeTrainer(tinyProject("Frozen"), sgd);
  ASSERT_TRUE(t.ok()) << t.message();
  Trainer& tr = **t;
  // fc2.bias is Constant: no gradient at all; fc1.weight is Frozen: a gradient, no update.
  const auto& names = tr.trainableNames();
  EXPECT_EQ(std::count(names.begin(), names.end(), "fc2.bias"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "fc1.weight"), 1);
  EXPECT_EQ(tr.lossNames().size(), 1u);
  auto data = blobs(32);
  Batch b = firstBatch(*data, 16);
  auto r1 = tr.trainStep(b);
  ASSERT_TRUE(r1.ok()) << r1.message();
  ASSERT_EQ(r1->losses.size(), 1u);
  EXPECT_GT(r1->losses.begin()->second, 0.1);
  const auto g1 = values(tr.gradients().at("fc2.weight"));
  auto r2 = tr.trainStep(b);
  ASSERT_TRUE(r2.ok()) << r2.message();
  EXPECT_DOUBLE_EQ(r1->losses.begin()->second, r2->losses.begin()->second);
  const auto g2 = values(tr.gradients().at("fc2.weight"));
  for (size_t i = 0; i < g1.size(); ++i)
    EXPECT_NEAR(g2[i], 2 * g1[i], 1e-6 + 1e-5 * std::fabs(g1[i]));
  EXPECT_EQ(tr.counters().accumulated, 2);

  const auto frozen = values(tr.weights().at("fc1.weight"));
  const auto w2 = values(tr.weights().at("fc2.weight"));
  ASSERT_TRUE(tr.optimizerStep().ok());
  EXPECT_EQ(values(tr.weights().at("fc1.weight")), frozen);
  const auto w2new = values(tr.weights().at("fc2.weight"));
  for (size_t i = 0; i < w2.size(); ++i) EXPECT_NEAR(w2new[i], w2[i] - 0.1f * g2[i], 1e-6);
  tr.resetGrad();
  EXPECT_EQ(tr.counters().accumulated, 0);
  for (float v : values(tr.gradients().at("fc2.weight"))) EXPECT_EQ(v, 0.f);
  EXPECT_FALSE(tr.optimizerStep().ok());  // nothing accumulated

  // update = false only accumulates.
  auto r3 = tr.fullTrainStep(b, false);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(tr.counters().accumulated, 1);
  EXPECT_EQ(values(tr.weights().at("fc2.weight")), w2new);
  auto r4 = tr.fullTrainStep(b, true);
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(tr.counters().accumulated, 0);
  EXPECT_GT(r4->gradNorm, 0);
  EXPECT_NE(values(tr.weights().at("fc2.weight")), w2new);

  auto ev = tr.evalStep(b);
  ASSERT_TRUE(ev.ok()) << ev.message();
  EXPECT_EQ(ev->losses.size(), 1u);
  ASSERT_EQ(ev->metrics.count("accuracy"), 1u);
  EXPECT_GE(ev->metrics.at("accuracy"), 0.0);
  EXPECT_LE(ev->metrics.at("accuracy"), 1.0);
}

TEST_F(TrainerTest, SteadyStateAllocatesNoBuffers) {
  OptimizerConfig adam;
  adam.type = "adam";
  auto t = makeTrainer(tinyProject(), adam);
  ASSERT_TRUE(t.ok()) << t.message();
  auto data = blobs(64);
  const Batch b = firstBatch(*data, 16);
  // The first steps size the pools (the first also differs: no gradient is held yet).
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*t)->fullTrainStep(b).ok());
  ASSERT_TRUE((*t)->evalStep(b).ok());
  ASSERT_TRUE((*t)->evalStep(b).ok());
  const size_t settled = (*t)->bufferAllocations();
  EXPECT_GT(settled, 0u);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*t)->fullTrainStep(b).ok());
    ASSERT_TRUE((*t)->evalStep(b).ok());
  }
  EXPECT_EQ((*t)->bufferAllocations(), settled);
  // Train Step + Optimizer Step + Reset Grad, the studio's three buttons, too.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*t)->trainStep(b).ok());
    ASSERT_TRUE((*t)->optimizerStep().ok());
    (*t)->resetGrad();
  }
  EXPECT_EQ((*t)->bufferAllocations(), settled);
}

TEST_F(TrainerTest, MissingInputIsNamed) {
  auto t = makeTrainer(tinyProject());
  ASSERT_TRUE(t.ok()) << t.message();
  Batch b = firstBatch(*blobs(8), 8);
  b.inputs.erase("label");
  auto r = (*t)->trainStep(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("'label'"), std::string::npos) << r.message();
}

TEST_F(TrainerTest, RegularizerAddsPenaltyAndGradient) {
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 0.5;
  auto plain = makeTrainer(tinyProject(), sgd);
  auto reg = makeTrainer(tinyProject("Trainable", "l1l2"), sgd);
  ASSERT_TRUE(plain.ok() && reg.ok()) << plain.message() << reg.message();
  Batch b = firstBatch(*blobs(16), 16);
  auto rp = (*plain)->fullTrainStep(b);
  auto rr = (*reg)->fullTrainStep(b);
  ASSERT_TRUE(rp.ok() && rr.ok());
  const auto w0 = values((*plain)->weights().at("fc1.weight"));
  EXPECT_DOUBLE_EQ(rp->losses.begin()->second, rr->losses.begin()->second);
  EXPECT_GT(rr->regularization, 0);
  EXPECT_EQ(rp->regularization, 0);
  // Same data gradient; the regularized one also moved by lr * (l1 sign(w) + 2 l2 w).
  const auto wr = values((*reg)->weights().at("fc1.weight"));
  double diff = 0;
  for (size_t i = 0; i < w0.size(); ++i) diff += std::fabs(wr[i] - w0[i]);
  EXPECT_GT(diff, 1e-4);
}

TEST_F(TrainerTest, FitLearnsAndIsDeterministic) {
  OptimizerConfig adam;
  adam.lr = 0.05;
  auto a = makeTrainer(tinyProject(), adam);
  auto b = makeTrainer(tinyProject(), adam);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message();
  FitOptions fo;
  fo.train = blobs(300);
  fo.test = blobs(90, 9);
  fo.epochs = 3;
  fo.batchSize = 16;
  int steps = 0;
  FitCallbacks cb;
  cb.onStep = [&](const StepInfo&) { ++steps; };
  std::vector<EpochReport> epochs;
  cb.onEpoch = [&](const EpochReport& e) { epochs.push_back(e); };
  auto ra = (*a)->fit(fo, cb);
  ASSERT_TRUE(ra.ok()) << ra.message();
  EXPECT_EQ(steps, 3 * 19);
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_LT(epochs[2].trainLoss, epochs[0].trainLoss);
  EXPECT_TRUE(epochs[2].hasTest);
  EXPECT_GT(epochs[2].testAccuracy, 0.8);
  auto rb = (*b)->fit(fo);
  ASSERT_TRUE(rb.ok());
  for (const auto& [name, w] : (*a)->weights())
    EXPECT_EQ(values(w), values((*b)->weights().at(name))) << name;
  EXPECT_EQ(ra->epochs.back().trainLoss, rb->epochs.back().trainLoss);
}

// A cosine (or warmup_linear) schedule without total_steps decays over the fit it is given, to
// its floor at the last step (the studio's Schedule box sets only the kind: it was a constant
// rate), and the next fit decays over its own steps again.
TEST_F(TrainerTest, SchedulesWithoutALengthDecayOverTheFit) {
  for (const char* kind : {"cosine", "warmup_linear"}) {
    OptimizerConfig sgd;
    sgd.type = "sgd";
    sgd.lr = 0.1;
    sgd.schedule.type = kind;
    auto t = makeTrainer(tinyProject(), sgd);
    ASSERT_TRUE(t.ok()) << t.message();
    FitOptions fo;
    fo.train = blobs(160);
    fo.epochs = 2;
    fo.batchSize = 16;
    std::vector<double> rates;
    FitCallbacks cb;
    cb.onStep = [&](const StepInfo& si) { rates.push_back(si.result.lr); };
    ASSERT_TRUE((*t)->fit(fo, cb).ok());
    ASSERT_EQ(rates.size(), 20u) << kind;
    EXPECT_NEAR(rates.front(), 0.1, 1e-3) << kind;
    EXPECT_LT(rates[10], 0.07) << kind;      // halfway down
    EXPECT_LT(rates.back(), 0.011) << kind;  // at the floor by the end
    for (size_t i = 1; i < rates.size(); ++i) EXPECT_LE(rates[i], rates[i - 1]) << kind;
  }
}

// A loss that turns NaN (here from a NaN in the third batch's data) stops fit with an error
// naming the epoch and batch and what to change, instead of training on with "loss nan" for
// the rest of the run; no epoch is reported.
TEST_F(TrainerTest, DivergingLossStopsFit) {
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 0.5;
  auto t = makeTrainer(tinyProject(), sgd);
  ASSERT_TRUE(t.ok()) << t.message();
  auto data = blobs(200);
  data->columns["x"].data<float>()[2 * 16 * 4 + 1] = std::nanf("");
  FitOptions fo;
  fo.train = data;
  fo.shuffle = false;
  fo.epochs = 2;
  fo.batchSize = 16;
  int epochs = 0;
  FitCallbacks cb;
  cb.onEpoch = [&](const EpochReport&) { ++epochs; };
  auto r = (*t)->fit(fo, cb);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("training diverged at epoch 1, batch 3: the loss is NaN"),
            std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("Lower the learning rate (lr 0.5)"), std::string::npos)
      << r.message();
  // No checkpoint to resume from: it does not send the user to one.
  EXPECT_NE(r.message().find("start again from fresh weights"), std::string::npos) << r.message();
  EXPECT_EQ(epochs, 0);
}

// A loss that grows by orders of magnitude without reaching NaN (Adam at lr 500)
// gets a warning on the epoch that names the learning rate; a healthy fit gets none.
TEST_F(TrainerTest, GrowingLossWarns) {
  for (double lr : {0.01, 500.0}) {
    SCOPED_TRACE(lr);
    OptimizerConfig adam;
    adam.type = "adam";
    adam.lr = lr;
    auto t = makeTrainer(tinyProject(), adam);
    ASSERT_TRUE(t.ok()) << t.message();
    // Labels that x cannot predict (each point's class shifted by its index): a large step
    // size throws the logits far out, and the wrongly placed samples' loss with them.
    auto data = blobs(400);
    int64_t* y = data->columns["label"].data<int64_t>();
    for (int64_t i = 0; i < 400; ++i) y[i] = (y[i] + i / 3) % 3;
    FitOptions fo;
    fo.train = data;
    fo.epochs = 3;
    fo.batchSize = 16;
    std::vector<std::string> warnings;
    FitCallbacks cb;
    cb.onEpoch = [&](const EpochReport& e) { warnings.push_back(e.warning); };
    auto r = (*t)->fit(fo, cb);
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(warnings.size(), 3u);
    if (lr < 1) {
      for (const auto& w : warnings) EXPECT_TRUE(w.empty()) << w;
    } else {
      EXPECT_NE(warnings.back().find("training is diverging. Lower the learning rate (lr 500)"),
                std::string::npos)
          << warnings.back();
    }
  }
}

TEST_F(TrainerTest, ValidationSplitAndAccumulation) {
  auto t = makeTrainer(tinyProject());
  ASSERT_TRUE(t.ok());
  FitOptions fo;
  fo.train = blobs(100);
  fo.validationSplit = 0.2;
  fo.batchSize = 10;
  fo.accumulationSteps = 4;
  auto r = (*t)->fit(fo);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->epochs[0].hasTest);
  // 80 training samples in 8 batches: optimizer steps after batches 4 and 8.
  EXPECT_EQ((*t)->counters().optimizerSteps, 2);
  EXPECT_EQ((*t)->counters().trainSteps, 8);
}

TEST_F(TrainerTest, CheckpointResumeIsBitExact) {
  OptimizerConfig adam;
  adam.lr = 0.02;
  adam.schedule.type = "cosine";
  adam.schedule.totalSteps = 40;
  FitOptions fo;
  fo.train = blobs(120);
  fo.epochs = 3;
  fo.batchSize = 8;
  fo.accumulationSteps = 2;
  auto full = makeTrainer(tinyProject(), adam);
  ASSERT_TRUE(full.ok());
  auto rf = (*full)->fit(fo);
  ASSERT_TRUE(rf.ok()) << rf.message();

  // Interrupt in the middle of epoch 2, between the two micro-batches of an accumulation.
  auto first = makeTrainer(tinyProject(), adam);
  ASSERT_TRUE(first.ok());
  std::atomic<bool> cancel{false};
  int steps = 0;
  FitCallbacks cb;
  cb.onStep = [&](const StepInfo&) {
    if (++steps == 15 + 7) cancel = true;
  };
  auto r1 = (*first)->fit(fo, cb, &cancel);
  ASSERT_TRUE(r1.ok()) << r1.message();
  EXPECT_TRUE(r1->cancelled);
  EXPECT_EQ((*first)->counters().epoch, 1);
  EXPECT_EQ((*first)->counters().batchInEpoch, 7);
  EXPECT_EQ((*first)->counters().accumulated, 1);
  ASSERT_TRUE((*first)->saveCheckpoint(dir_.string()).ok());

  auto resumed = makeTrainer(tinyProject(), adam);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->loadCheckpoint(dir_.string()).ok());
  std::vector<EpochReport> rest;
  FitCallbacks cb2;
  cb2.onEpoch = [&](const EpochReport& e) { rest.push_back(e); };
  auto r2 = (*resumed)->fit(fo, cb2);
  ASSERT_TRUE(r2.ok()) << r2.message();
  ASSERT_EQ(rest.size(), 2u);
  for (const auto& [name, w] : (*full)->weights()) {
    const auto a = values(w), b = values((*resumed)->weights().at(name));
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << name;
  }
  EXPECT_EQ(rest.back().trainLoss, rf->epochs.back().trainLoss);
  EXPECT_EQ(rest.front().trainLoss, rf->epochs[1].trainLoss);
  EXPECT_EQ((*resumed)->counters().optimizerSteps, (*full)->counters().optimizerSteps);
  // The history came with the checkpoint (epoch 1, the one finished before the interruption),
  // and the resumed fit added its two: the same three epochs as the uninterrupted run.
  const auto& history = (*resumed)->history();
  ASSERT_EQ(history.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(history[e].epoch, static_cast<int64_t>(e));
    EXPECT_EQ(history[e].trainLoss, rf->epochs[e].trainLoss) << e;
    EXPECT_EQ(history[e].steps, rf->epochs[e].steps) << e;
    EXPECT_EQ(history[e].trainSteps, (*full)->history()[e].trainSteps) << e;
  }

  // A checkpoint of another model is refused with the weight named.
  OptimizerConfig sgd;
  sgd.type = "sgd";
  auto sgdTrainer = makeTrainer(tinyProject(), sgd);
  ASSERT_TRUE(sgdTrainer.ok());
  Status st = (*sgdTrainer)->loadCheckpoint(dir_.string());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("continue with adam"), std::string::npos) << st.message();
  // Its weights alone load whatever the optimizer (deepwire eval --checkpoint).
  ASSERT_TRUE((*sgdTrainer)->loadCheckpoint(dir_.string(), /*weightsOnly=*/true).ok());
  for (const auto& [name, w] : (*first)->weights()) {
    const auto a = values(w), b = values((*sgdTrainer)->weights().at(name));
    ASSERT_EQ(a, b) << name;
  }
  EXPECT_EQ((*sgdTrainer)->counters().optimizerSteps, 0);
  EXPECT_FALSE((*resumed)->loadCheckpoint((dir_ / "nope").string()).ok());
}

TEST_F(TrainerTest, ExportsPassTheChecker) {
  for (const std::string type : {"adam", "sgd", "adagrad", "rmsprop", "adamw"}) {
    SCOPED_TRACE(type);
    OptimizerConfig oc;
    oc.type = type;
    if (type == "sgd") oc.momentum = 0.9;
    auto t = makeTrainer(tinyProject(), oc);
    ASSERT_TRUE(t.ok()) << t.message();
    ASSERT_TRUE((*t)->fullTrainStep(firstBatch(*blobs(8), 8)).ok());
    auto inf = (*t)->exportInference();
    ASSERT_TRUE(inf.ok()) << inf.message();
    Status full = checkOnnxModel(*inf, CheckLevel::Full);
    EXPECT_TRUE(full.ok()) << full.message();
    // The inference model carries the trained weights and no loss output.
    for (const auto& o : inf->graph().output()) EXPECT_EQ(o.name(), "logits");
    auto tr = (*t)->exportTraining();
    ASSERT_TRUE(tr.ok()) << tr.message();
    EXPECT_TRUE(checkOnnxModel(*tr, CheckLevel::Basic).ok());
    bool hasOptimizerOutput = false;
    for (const auto& o : tr->graph().output()) hasOptimizerOutput |= o.name() == "fc1.weight_new";
    EXPECT_TRUE(hasOptimizerOutput);
  }
}

// The exported training step is the trainer's next step: run on the batch the trainer takes
// next, its updated weights are the trainer's after that step. (Adam's bias correction used
// the count of updates done, one short, and missed by 4% of an update.)
TEST_F(TrainerTest, ExportedTrainingStepIsTheTrainersNextStep) {
  for (const std::string type : {"adam", "adamw", "sgd", "adagrad"}) {
    SCOPED_TRACE(type);
    OptimizerConfig oc;
    oc.type = type;
    oc.lr = 0.01;
    if (type == "sgd") oc.momentum = 0.9;
    auto t = makeTrainer(tinyProject(), oc);
    ASSERT_TRUE(t.ok()) << t.message();
    const auto data = blobs(16);
    const Batch batch = firstBatch(*data, 8);
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*t)->fullTrainStep(batch).ok());
    auto m = (*t)->exportTraining();
    ASSERT_TRUE(m.ok()) << m.message();
    SessionOptions so;
    so.backend.threads = 1;
    auto s = InferenceSession::create(*m, so);
    ASSERT_TRUE(s.ok()) << s.message();
    auto r = (*s)->run(batch.inputs);
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_TRUE((*t)->fullTrainStep(batch).ok());
    for (const std::string w : {"fc1.weight", "fc1.bias"}) {
      const auto want = values((*t)->weights().at(w)), got = values(r->at(w + "_new"));
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-6 + 1e-5 * std::abs(want[i])) << w << "[" << i << "]";
    }
  }
}

TEST_F(TrainerTest, WriteWeightsBackIntoTheGraph) {
  auto g = projectFromJsonText(tinyProject(), "<tiny>");
  ASSERT_TRUE(g.ok());
  TrainOptions o;
  o.threads = 1;
  auto t = Trainer::create(*g, o);
  ASSERT_TRUE(t.ok()) << t.message();
  ASSERT_TRUE((*t)->fullTrainStep(firstBatch(*blobs(8), 8)).ok());
  Graph copy = *g;
  ASSERT_TRUE((*t)->writeWeightsTo(copy).ok());
  auto again = Trainer::create(copy, o);
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(values((*again)->weights().at("fc1.weight")), values((*t)->weights().at("fc1.weight")));
}

TEST_F(TrainerTest, TrainingSectionParsesAndRoundTrips) {
  const std::string text = R"({"dataset": {"train": [{"input": "x", "path": "a.npy",
      "normalization": {"scale": 0.5, "mean": 1, "std": 2}, "shape": [2, 2]}],
      "validation_split": 0.1},
      "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true,
                    "schedule": {"type": "step", "step_size": 10, "gamma": 0.5},
                    "clip_norm": 1.0, "clip_norm_type": "inf"},
      "batch_size": 32, "epochs": 4, "seed": 7, "accumulation_steps": 2, "accelerator": "auto"})";
  auto c = parseTrainingConfig(text);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->optimizer.type, "sgd");
  EXPECT_TRUE(c->optimizer.nesterov);
  EXPECT_TRUE(std::isinf(c->optimizer.clipNormType));
  EXPECT_EQ(c->optimizer.schedule.stepSize, 10);
  EXPECT_EQ(c->dataset.train[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(c->accumulationSteps, 2);
  EXPECT_EQ(c->accelerator, "auto");  // the studio's Accelerator box, without the node
  auto back = parseTrainingConfig(trainingConfigToJson(*c));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(trainingConfigToJson(*back), trainingConfigToJson(*c));
  auto bad = parseTrainingConfig(R"({"optimizer": {"type": "adam", "lrr": 1}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/training/optimizer/lrr"), std::string::npos) << bad.message();
  bad = parseTrainingConfig(R"({"batch_size": 0})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("batch_size"), std::string::npos);
  // A trial's find: 10.5 was read as 10 without a word.
  bad = parseTrainingConfig(R"({"batch_size": 10.5})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/training/batch_size: expected a whole number, got 10.5"),
            std::string::npos)
      << bad.message();
  EXPECT_TRUE(parseTrainingConfig(R"({"batch_size": 16.0})").ok());  // whole, as JSON writers do
  bad = parseTrainingConfig(R"({"epochs": 1e300})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("epochs"), std::string::npos) << bad.message();
}

// ---- PyTorch golden loss curves --------------------------------------------------------------

void checkGolden(const std::string& example, const std::string& golden) {
  const std::string root = DW_SOURCE_DIR;
  std::ifstream gf(root + "/tests/golden/" + golden);
  ASSERT_TRUE(gf.good()) << "missing golden " << golden
                         << ": run tests/golden/make_training_golden.py";
  const json g = json::parse(gf);
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  auto project = loadProject(root + "/resources/examples/" + example);
  ASSERT_TRUE(project.ok()) << project.message();
  auto cfg = trainingConfigFromGraph(*project);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  const int64_t steps = g.at("steps"), batch = g.at("batch");
  auto ds = loadDataset(cfg->dataset.train, "");
  ASSERT_TRUE(ds.ok()) << ds.message();
  TrainOptions o;
  const json& oj = g.at("optimizer");
  o.optimizer.type = oj.at("type");
  o.optimizer.lr = oj.at("lr");
  o.optimizer.momentum = oj.value("momentum", 0.0);
  o.threads = 2;
  auto t = Trainer::create(*project, o);
  ASSERT_TRUE(t.ok()) << t.message();
  const auto expected = g.at("losses").get<std::vector<double>>();
  for (int64_t s = 0; s < steps; ++s) {
    Dataset part = ds->slice(s * batch, (s + 1) * batch);
    Batch b;
    b.inputs = part.columns;
    b.size = batch;
    auto r = (*t)->fullTrainStep(b);
    ASSERT_TRUE(r.ok()) << r.message();
    const double got = r->losses.begin()->second;
    EXPECT_NEAR(got, expected[s], 1e-4 * std::fabs(expected[s])) << "step " << s + 1;
  }
  for (const auto& [name, ref] : g.at("running_stats").items()) {
    const auto want = ref.get<std::vector<double>>();
    ASSERT_EQ((*t)->weights().count(name), 1u) << name;
    const auto have = values((*t)->weights().at(name));
    ASSERT_EQ(have.size(), want.size());
    // Twenty float32 steps drift the statistics by ~1e-4 from the float64 reference: the
    // loss curve is checked to 1e-4 relative, the statistics to 1e-3.
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(have[i], want[i], 1e-3 * std::fabs(want[i]) + 1e-3) << name << "[" << i << "]";
  }
}

TEST(TrainerGolden, MlpLossCurveMatchesPyTorch) {
  checkGolden("fashion_mnist_mlp.dwproj", "training_mlp.json");
}

TEST(TrainerGolden, CnnLossCurveAndRunningStatsMatchPyTorch) {
  checkGolden("fashion_mnist_cnn.dwproj", "training_cnn.json");
}

}  // namespace
}  // namespace dw::engine::training

namespace dw::engine::training {
namespace {

// `deepwire train --json` on a subset of Fashion-MNIST: one JSON object per epoch with the
// documented keys, and the training loss falls; then `deepwire eval` on the saved checkpoint
// reports the same test accuracy as the last epoch.
std::string cliPath() {
  // The build tree puts the CLI at app/cli/deepwire, two levels above tests/training/.
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path cli = self.parent_path() / ".." / ".." / "app" / "cli" / "deepwire";
  return !ec && fs::exists(cli) ? fs::canonical(cli).string() : "";
}

TEST(TrainCli, MlpSubsetLossFallsAndEvalMatchesCheckpoint) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
  const std::string cli = cliPath();
  ASSERT_FALSE(cli.empty()) << "build the deepwire target first";
  const std::string root = DW_SOURCE_DIR;
  const fs::path ck = fs::temp_directory_path() / ("dw_cli_ck_" + std::to_string(::getpid()));
  const std::string cmd = std::string("OMP_WAIT_POLICY=passive ") + cli + " train " + root +
                          "/resources/examples/fashion_mnist_mlp.dwproj --epochs 2 " +
                          "--train-limit 2000 --threads 1 --json --checkpoint " + ck.string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::vector<json> epochs;
  char line[4096];
  while (fgets(line, sizeof line, p)) epochs.push_back(json::parse(line));
  ASSERT_EQ(pclose(p), 0);
  ASSERT_EQ(epochs.size(), 2u);
  for (const char* key : {"epoch", "train_loss", "eval_loss", "eval_accuracy", "test_loss",
                          "test_accuracy", "seconds", "samples_per_second"})
    EXPECT_TRUE(epochs[0].contains(key)) << key;
  EXPECT_FALSE(epochs[0].contains("validation_loss"));
  EXPECT_LT(epochs[1]["train_loss"].get<double>(), epochs[0]["train_loss"].get<double>());
  EXPECT_GT(epochs[1]["test_accuracy"].get<double>(), 0.5);
  // The example has its own test files and no validation split: the figures are the test set's.
  EXPECT_EQ(epochs[0].value("evaluated_split", ""), "test");

  const std::string ev = std::string("OMP_WAIT_POLICY=passive ") + cli + " eval " + root +
                         "/resources/examples/fashion_mnist_mlp.dwproj --threads 1 --json " +
                         "--checkpoint " + ck.string();
  p = popen(ev.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  while (fgets(line, sizeof line, p)) out += line;
  ASSERT_EQ(pclose(p), 0);
  const json e = json::parse(out);
  EXPECT_EQ(e["test_accuracy"].get<double>(), epochs[1]["test_accuracy"].get<double>());
  fs::remove_all(ck);
}

// --json-steps adds a line per step before each epoch's: the global step counting on across
// epochs, the epoch, the batch and the epoch's batches, the loss and the batch's metrics. It
// implies --json (alone, it used to print no JSON at all).
TEST(TrainCli, JsonStepsLineEveryStep) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
  const std::string cli = cliPath();
  ASSERT_FALSE(cli.empty()) << "build the deepwire target first";
  const std::string cmd =
      std::string("OMP_WAIT_POLICY=passive ") + cli + " train " + DW_SOURCE_DIR +
      "/resources/examples/fashion_mnist_mlp.dwproj --epochs 2 --max-steps 3 "
      "--threads 1 --json-steps --checkpoint " +
      (fs::temp_directory_path() / ("dw_json_steps_ck_" + std::to_string(::getpid()))).string() +
      " --export-onnx " +
      (fs::temp_directory_path() / ("dw_json_steps_" + std::to_string(::getpid()) + ".onnx"))
          .string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::vector<json> lines;
  char line[4096];
  while (fgets(line, sizeof line, p)) lines.push_back(json::parse(line));
  ASSERT_EQ(pclose(p), 0);
  // The steps and epochs, then a line for the file written (a person's "exported ..." line).
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[8].value("contents", ""), "inference model") << lines[8];
  EXPECT_TRUE(fs::exists(lines[8].value("wrote", ""))) << lines[8];
  fs::remove(lines[8].value("wrote", ""));
  for (int e = 0; e < 2; ++e) {
    for (int b = 0; b < 3; ++b) {
      const json& s = lines[e * 4 + b];
      EXPECT_EQ(s.value("step", -1), e * 3 + b + 1) << s;
      EXPECT_EQ(s.value("epoch", -1), e + 1) << s;
      EXPECT_EQ(s.value("batch", -1), b + 1) << s;
      EXPECT_EQ(s.value("batches", -1), 3) << s;
      EXPECT_TRUE(s.contains("loss") && s["loss"].get<double>() > 0) << s;
      EXPECT_TRUE(s.contains("metrics") && s["metrics"].contains("accuracy")) << s;
    }
    EXPECT_EQ(lines[e * 4 + 3].value("epoch", -1), e + 1);
    EXPECT_TRUE(lines[e * 4 + 3].contains("train_loss"));
    // The epoch's training metrics too, beside the evaluated split's.
    EXPECT_TRUE(lines[e * 4 + 3]["train_metrics"].contains("accuracy")) << lines[e * 4 + 3];
    EXPECT_TRUE(lines[e * 4 + 3]["eval_metrics"].contains("accuracy")) << lines[e * 4 + 3];
    // Where the epoch's checkpoint went (saved before the line).
    EXPECT_NE(lines[e * 4 + 3].value("checkpoint", "").find("dw_json_steps_ck_"), std::string::npos)
        << lines[e * 4 + 3];
  }
}

// ---- Metrics accumulated across Eval Steps ---------------------------------------------------

// tinyProject plus Precision, Recall and PrecisionAtRecall of sigmoid(logits) against a one-hot
// target, and the Mean of the hidden activations; `evalStep` adds an Eval Step node with that
// reset_metrics?.
std::string metricsProject(int evalStep = -1) {
  json p = json::parse(tinyProject());
  auto node = [&](int id, const std::string& dom, const std::string& type, const std::string& name,
                  json params) {
    json n = {{"id", id}, {"domain", dom}, {"type", type}, {"position", {id * 100.0, 200.0}}};
    n["name"] = name;
    if (!params.is_null()) n["params"] = params;
    p["nodes"].push_back(n);
  };
  auto link = [&](int from, int to, int port) {
    p["links"].push_back({{"from", {from, 0}}, {"to", {to, port}}});
  };
  node(12, "deepwire", "Input", "onehot", {{"type", "float[N,3]"}});
  node(13, "ai.onnx", "Sigmoid", "prob", nullptr);
  node(14, "deepwire.metrics", "Precision", "precision", nullptr);
  node(15, "deepwire.metrics", "Recall", "recall", nullptr);
  node(16, "deepwire.metrics", "Mean", "mean_act", nullptr);
  // Confusion counts at 200 thresholds: statistics that are vectors.
  node(18, "deepwire.metrics", "PrecisionAtRecall", "p_at_r", {{"recall", 0.8}});
  link(8, 13, 0);
  for (int m : {14, 15, 18}) {
    link(13, m, 0);
    link(12, m, 1);
  }
  link(5, 16, 0);
  if (evalStep >= 0) node(17, "deepwire", "Eval Step", "eval", {{"reset_metrics?", evalStep == 1}});
  return p.dump();
}

std::shared_ptr<Dataset> blobsOneHot(int64_t n) {
  auto d = blobs(n);
  Tensor oh(DType::kFloat, {n, 3});
  const int64_t* y = d->columns["label"].data<int64_t>();
  for (int64_t i = 0; i < n; ++i) oh.data<float>()[i * 3 + y[i]] = 1.f;
  d->columns["onehot"] = oh;
  return d;
}

Batch rows(const Dataset& d, int64_t from, int64_t to) {
  Dataset s = d.slice(from, to);
  Batch b;
  b.inputs = s.columns;
  b.size = to - from;
  return b;
}

const std::vector<std::string> kAccumulating = {"accuracy", "precision", "recall", "mean_act",
                                                "p_at_r"};

void expectSameMetrics(const std::map<std::string, double>& got,
                       const std::map<std::string, double>& want, const std::string& what) {
  for (const auto& m : kAccumulating) {
    ASSERT_TRUE(got.count(m)) << what << ": no " << m;
    ASSERT_TRUE(want.count(m)) << what << ": no reference " << m;
    EXPECT_NEAR(got.at(m), want.at(m), 1e-6) << what << ": " << m;
  }
}

TEST_F(TrainerTest, EvalStepsAccumulateMetricsUntilReset) {
  auto t = makeTrainer(metricsProject());
  ASSERT_TRUE(t.ok()) << t.message();
  Trainer& tr = **t;
  // Move away from the initial weights so the metrics are not trivially equal per batch.
  auto data = blobsOneHot(60);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tr.fullTrainStep(rows(*data, 0, 60)).ok());

  auto full = tr.evalStep(rows(*data, 0, 30));
  ASSERT_TRUE(full.ok()) << full.message();
  // Recall 1 at threshold 0 with a precision of 1/3: the constrained maximum is at least that.
  EXPECT_GE(full->batchMetrics.at("p_at_r"), 1.0 / 3 - 1e-6);
  // A single step after construction: accumulated == this batch.
  expectSameMetrics(full->metrics, full->batchMetrics, "first step");
  tr.resetMetrics();
  auto acc = tr.accumulatedMetrics();
  ASSERT_TRUE(acc.ok());
  EXPECT_TRUE(acc->empty());

  // Unequal parts, so a mean of the per-batch values would differ from the pooled value.
  auto a = tr.evalStep(rows(*data, 0, 7));
  ASSERT_TRUE(a.ok()) << a.message();
  auto b = tr.evalStep(rows(*data, 7, 30));
  ASSERT_TRUE(b.ok()) << b.message();
  expectSameMetrics(b->metrics, full->batchMetrics, "two accumulated parts");
  bool differs = false;
  for (const auto& m : kAccumulating)
    differs |= std::abs(b->batchMetrics.at(m) - full->batchMetrics.at(m)) > 1e-6;
  EXPECT_TRUE(differs) << "the parts should not each equal the whole (a weak test otherwise)";
  // The pooled accuracy is the fraction of all 30 samples, not the mean of the two fractions.
  EXPECT_NEAR(b->metrics.at("accuracy"),
              (a->batchMetrics.at("accuracy") * 7 + b->batchMetrics.at("accuracy") * 23) / 30,
              1e-6);
  // Losses stay per batch.
  EXPECT_EQ(b->losses.size(), 1u);

  // evaluate() reports its own pass and leaves the Eval Step sums alone.
  auto ev = tr.evaluate(data->gather({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), 4);
  ASSERT_TRUE(ev.ok()) << ev.message();
  auto ten = tr.evalStep(rows(*data, 0, 10), /*resetMetrics=*/true);
  ASSERT_TRUE(ten.ok()) << ten.message();
  expectSameMetrics(ev->metrics, ten->batchMetrics, "evaluate with batches of 4");
  // reset_metrics: the step starts over, so it reports its own batch.
  expectSameMetrics(ten->metrics, ten->batchMetrics, "reset_metrics step");
  auto rest = tr.evalStep(rows(*data, 10, 30));
  ASSERT_TRUE(rest.ok());
  expectSameMetrics(rest->metrics, full->batchMetrics, "after a reset step");
  acc = tr.accumulatedMetrics();
  ASSERT_TRUE(acc.ok());
  expectSameMetrics(*acc, full->batchMetrics, "accumulatedMetrics");

  // evaluate between Eval Steps does not disturb them.
  tr.resetMetrics();
  ASSERT_TRUE(tr.evalStep(rows(*data, 0, 12)).ok());
  ASSERT_TRUE(tr.evaluate(*data, 16).ok());
  auto last = tr.evalStep(rows(*data, 12, 30));
  ASSERT_TRUE(last.ok());
  expectSameMetrics(last->metrics, full->batchMetrics, "evaluate in between");
}

// A checkpoint from the middle of an epoch resumed in another batch size starts where its
// samples end (7 batches of 8 are 14 of 4), or says why it cannot (56 samples are no whole
// number of batches of 5); before, the batch count was taken as is and samples were skipped.
TEST_F(TrainerTest, ResumeInAnotherBatchSizeStartsWhereTheSamplesEnd) {
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 0.05;
  FitOptions fo;
  fo.train = blobs(120);
  fo.epochs = 2;
  fo.batchSize = 8;
  auto first = makeTrainer(tinyProject(), sgd);
  ASSERT_TRUE(first.ok());
  std::atomic<bool> cancel{false};
  int steps = 0;
  FitCallbacks cb;
  cb.onStep = [&](const StepInfo&) {
    if (++steps == 7) cancel = true;
  };
  auto r1 = (*first)->fit(fo, cb, &cancel);
  ASSERT_TRUE(r1.ok() && r1->cancelled);
  ASSERT_EQ((*first)->counters().batchInEpoch, 7);
  ASSERT_TRUE((*first)->saveCheckpoint(dir_.string()).ok());
  for (int64_t batch : {4, 5}) {
    auto resumed = makeTrainer(tinyProject(), sgd);
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((*resumed)->loadCheckpoint(dir_.string()).ok());
    fo.batchSize = batch;
    fo.epochs = 1;
    int64_t firstBatch = -1;
    FitCallbacks cb2;
    cb2.onStep = [&](const StepInfo& si) {
      if (firstBatch < 0) firstBatch = si.batch;
    };
    auto r2 = (*resumed)->fit(fo, cb2);
    if (batch == 4) {
      ASSERT_TRUE(r2.ok()) << r2.message();
      EXPECT_EQ(firstBatch, 14);
      EXPECT_EQ((*resumed)->counters().epoch, 1);
    } else {
      ASSERT_FALSE(r2.ok());
      EXPECT_NE(r2.message().find("after 56 samples (7 batches of 8)"), std::string::npos)
          << r2.message();
    }
  }
}

// A save removes its earlier tensor files by name: into a directory of someone else's files it
// deleted a user's g0_t3.npy. Such a directory is refused, before a run trains and at the save.
TEST_F(TrainerTest, CheckpointsGoOnlyWhereCheckpointsAre) {
  fs::create_directories(dir_);
  // Tensor files alone are a save a kill interrupted before its checkpoint.json: fine.
  { std::ofstream(dir_ / "g0_t3.npy") << "mine"; }
  EXPECT_TRUE(Trainer::checkCheckpointDir(dir_.string()).ok());
  { std::ofstream(dir_ / "notes.txt") << "mine"; }
  const Status before = Trainer::checkCheckpointDir(dir_.string());
  ASSERT_FALSE(before.ok());
  EXPECT_NE(before.message().find("holds notes.txt and no checkpoint.json"), std::string::npos)
      << before.message();
  OptimizerConfig sgd;
  sgd.type = "sgd";
  auto t = makeTrainer(tinyProject(), sgd);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)->saveCheckpoint(dir_.string()).ok());
  EXPECT_TRUE(fs::exists(dir_ / "g0_t3.npy"));
  const fs::path fresh = dir_ / "ck";
  EXPECT_TRUE(Trainer::checkCheckpointDir(fresh.string()).ok());
  ASSERT_TRUE((*t)->saveCheckpoint(fresh.string()).ok());
  EXPECT_TRUE(Trainer::checkCheckpointDir(fresh.string()).ok());  // a checkpoint already
}

// Two runs given one --checkpoint folder overwrote each other's saves: the second is refused
// with who holds it, and the folder is free again once the first lets go.
TEST_F(TrainerTest, ACheckpointFolderHasOneWriterAtATime) {
  const fs::path ck = dir_ / "ck";
  fs::create_directories(ck);
  {
    auto first = FolderLock::take(ck.string(), "wait");
    ASSERT_TRUE(first.ok()) << first.message();
    auto second = FolderLock::take(ck.string(), "give this run its own folder");
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.message().find("another run (process " + std::to_string(::getpid()) +
                                    ") is using this folder; give this run its own folder"),
              std::string::npos)
        << second.message();
    // The claim's file is no reason to call the folder foreign.
    EXPECT_TRUE(Trainer::checkCheckpointDir(ck.string()).ok());
  }
  EXPECT_TRUE(FolderLock::take(ck.string(), "wait").ok());
}

// lda coeff scales the derivative flowing back through a node to its inputs: on a layer, what
// it sends out of itself. Its own weights keep learning (a trial's Dense at 0 stopped learning
// itself, with everything before it).
// x -> Dense "first" (8, tanh) -> Dense "head" (3) -> Output Train, with `first`'s extra
// parameters and `head`'s lda coeff.
json twoDenseProject(const json& firstExtra, double headLda) {
  json p = {{"format", "deepwire-project"},
            {"version", 1},
            {"model", {{"ir_version", 8}, {"opsets", {{"ai.onnx", 17}}}, {"graph_name", "two"}}}};
  auto node = [&](int id, const std::string& dom, const std::string& type, const std::string& name,
                  json params) {
    json n = {{"id", id},
              {"domain", dom},
              {"type", type},
              {"name", name},
              {"position", {id * 100.0, 0.0}}};
    if (!params.is_null()) n["params"] = params;
    p["nodes"].push_back(n);
    return p["nodes"].size() - 1;
  };
  node(1, "deepwire", "Input", "x", {{"type", "float[N,4]"}});
  json first = {{"units", 8}, {"activation", "tanh"}};
  first.update(firstExtra);
  node(2, "deepwire.layers", "Dense", "first", first);
  const size_t head = node(3, "deepwire.layers", "Dense", "head", {{"units", 3}});
  if (headLda != 1.0) p["nodes"][head]["lda_coeff"] = headLda;
  node(4, "deepwire", "Input", "label", {{"type", "int64[N]"}});
  node(5, "deepwire.layers", "Output Train", "logits",
       {{"loss", "SparseCategoricalCrossentropy"}, {"from_logits", true}});
  for (auto [from, to, port] :
       std::vector<std::array<int, 3>>{{1, 2, 0}, {2, 3, 0}, {3, 5, 0}, {4, 5, 1}})
    p["links"].push_back({{"from", {from, 0}}, {"to", {to, port}}});
  return p;
}

// How many of each layer's weights three SGD steps change: {first, head}.
std::pair<int, int> weightsChanged(const json& project) {
  OptimizerConfig sgd;
  sgd.type = "sgd";
  sgd.lr = 0.1;
  auto t = makeTrainer(project.dump(), sgd);
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return {-1, -1};
  std::map<std::string, std::vector<float>> before;  // copies: a Tensor copy shares its data
  for (const auto& [name, w] : (*t)->weights()) before[name] = values(w);
  const auto data = blobs(32);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*t)->fullTrainStep(firstBatch(*data, 16)).ok());
  int first = 0, head = 0;
  for (const auto& [name, w] : (*t)->weights()) {
    const bool changed = values(w) != before.at(name);
    if (name.rfind("head", 0) == 0) head += changed;
    if (name.rfind("first", 0) == 0) first += changed;
  }
  return {first, head};
}

TEST(TrainerLda, ALayersCoefficientScalesWhatLeavesItNotItsWeights) {
  const auto [first, head] = weightsChanged(twoDenseProject(json::object(), 0.0));
  EXPECT_EQ(head, 2) << "the head's kernel and bias learn";
  EXPECT_EQ(first, 0) << "nothing before the head learns through it";
}

// A layer's trainable switched off freezes its weights (fine-tuning), and the layers after it
// still learn; its export still lists them, as Frozen.
TEST(TrainerFreeze, ALayerThatIsNotTrainableKeepsItsWeights) {
  const json frozen = twoDenseProject({{"trainable", false}}, 1.0);
  const auto [first, head] = weightsChanged(frozen);
  EXPECT_EQ(first, 0) << "a frozen layer's kernel and bias stay";
  EXPECT_EQ(head, 2);
  EXPECT_EQ(weightsChanged(twoDenseProject(json::object(), 1.0)).first, 2);
  auto g = projectFromJsonText(frozen.dump(), "frozen.dwproj");
  ASSERT_TRUE(g.ok()) << g.message();
  auto m = exportOnnx(*g);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->graph().initializer_size(), 4);
  json layout;
  for (const auto& p : m->metadata_props())
    if (p.key() == kLayoutMetadataKey) layout = json::parse(p.value());
  EXPECT_EQ(layout["nodes"]["initializer:first.kernel"].value("status", ""), "Frozen");
  EXPECT_EQ(layout["nodes"]["initializer:head.kernel"].value("status", "Trainable"), "Trainable");
}

TEST_F(TrainerTest, CheckpointKeepsEvalStepMetrics) {
  auto data = blobsOneHot(30);
  auto t = makeTrainer(metricsProject());
  ASSERT_TRUE(t.ok()) << t.message();
  ASSERT_TRUE((*t)->fullTrainStep(rows(*data, 0, 30)).ok());
  auto full = (*t)->evalStep(rows(*data, 0, 30), true);
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE((*t)->evalStep(rows(*data, 0, 11), true).ok());
  ASSERT_TRUE((*t)->saveCheckpoint(dir_.string()).ok());

  auto u = makeTrainer(metricsProject());
  ASSERT_TRUE(u.ok()) << u.message();
  ASSERT_TRUE((*u)->evalStep(rows(*data, 0, 5)).ok());  // replaced by the checkpoint's sums
  auto st = (*u)->loadCheckpoint(dir_.string());
  ASSERT_TRUE(st.ok()) << st.message();
  auto rest = (*u)->evalStep(rows(*data, 11, 30));
  ASSERT_TRUE(rest.ok()) << rest.message();
  expectSameMetrics(rest->metrics, full->batchMetrics, "resumed accumulation");

  // A checkpoint saved with no sums clears them on load.
  (*t)->resetMetrics();
  ASSERT_TRUE((*t)->saveCheckpoint(dir_.string()).ok());
  ASSERT_TRUE((*u)->loadCheckpoint(dir_.string()).ok());
  auto acc = (*u)->accumulatedMetrics();
  ASSERT_TRUE(acc.ok());
  EXPECT_TRUE(acc->empty());
}

TEST_F(TrainerTest, EvalStepNodeSaysWhetherToResetMetrics) {
  for (int reset : {-1, 0, 1}) {
    auto g = projectFromJsonText(metricsProject(reset), "<metrics>");
    ASSERT_TRUE(g.ok()) << g.message();
    EXPECT_EQ(evalStepResetsMetrics(*g), reset == 1) << reset;
  }
}

}  // namespace
}  // namespace dw::engine::training

namespace dw::engine::training {
namespace {

// Issue 19: a class label the loss cannot score is a data error that names the sample, the
// input and the class count, not a failing node inside the lowered loss.
TEST(TrainerLabels, OutOfRangeLabelNamesTheSample) {
  auto t = makeTrainer(tinyProject());
  ASSERT_TRUE(t.ok()) << t.message();
  auto data = blobs(12);
  data->columns["label"].data<int64_t>()[7] = 5;  // the tiny model scores 3 classes
  Batch b = firstBatch(*data, 12);
  auto r = (*t)->trainStep(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("sample 7 of the batch has label 5 in input 'label', outside [0, 3)"),
            std::string::npos)
      << r.message();
  FitOptions fo;
  fo.train = data;
  fo.batchSize = 4;
  auto f = (*t)->fit(fo);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("sample 7 of the training data has label 5"), std::string::npos)
      << f.message();
}

}  // namespace
}  // namespace dw::engine::training
