// deepwire train / eval: fit a project's model on the dataset its "training" section names,
// report per-epoch figures, save checkpoints, export ONNX.
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "app/cli/cli_util.h"
#include "app/cli/commands.h"
#include "engine/distributed/communicator.h"
#include "engine/training/trainer.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "nodes/catalogue.h"
#include "nodes/type_syntax.h"

namespace dw::cli {

namespace {

namespace fs = std::filesystem;
using namespace dw::engine::training;
namespace distributed = dw::engine::distributed;
using json = nlohmann::json;

struct TrainArgs {
  std::string project;
  int64_t epochs = -1, batchSize = -1, maxSteps = 0, trainLimit = 0;
  double lr = -1;
  // accelerator, precision and threads default to the project's Accelerator node ("", -1).
  std::string optimizer, accelerator, precision, checkpoint, resume, exportOnnx, exportTraining;
  std::string saveProject;        // the project with its trained weights (--save-project)
  bool noDataConversion = false;  // --export-onnx without the data panel's conversion prelude
  int64_t seed = -1;
  int threads = -1;
  bool json = false, jsonSteps = false, quiet = false;
  bool distributed = false;  // --distributed: one of the processes mpirun started
  int localProcesses = 1;    // processes of the job on this machine
  double distributedTimeout = 300;
  double bucketMb = 25;
  bool noOverlap = false;
  bool syncBatchNorm = false;
  bool evalOnly = false;
  std::string evalSplit = "test";  // eval --split: test, validation or train
};

std::atomic<bool> gInterrupted{false};
// The interrupt was SIGUSR1: a stop asked for (the studio's Stop, `kill -USR1`), not a Ctrl-C.
std::atomic<bool> gStopAsked{false};
extern "C" void onSigint(int) {
  gInterrupted = true;
}
extern "C" void onSigusr1(int) {
  gStopAsked = true;
  gInterrupted = true;
}

struct Setup {
  Graph graph;
  TrainingConfig config;
  std::unique_ptr<Trainer> trainer;
  std::string baseDir;  // the project's folder: relative data paths resolve against it
  std::shared_ptr<const Dataset> train, test;
  // What `test` holds while fitting: the validation split where there is one (as the studio
  // calls it), else the test split.
  const char* heldOut = "test";
};

// An ONNX file holds a model but no loss, optimizer or data, which training needs: say how to
// make a project of it rather than fail to read it as one.
bool looksLikeOnnx(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".onnx") return true;
  if (!dw::regularFile(path).ok()) return false;  // the project reader says what it is
  std::ifstream f(path, std::ios::binary);
  char first = 0;
  // A project is JSON ('{' after any whitespace); a serialized ModelProto starts with a field
  // tag byte (ir_version: 0x08).
  while (f.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  return f && first == 0x08;
}

Result<Setup> prepare(const TrainArgs& a) {
  if (looksLikeOnnx(a.project))
    return Status::error(
        a.project +
        " is an ONNX model; training needs a project (.dwproj), which adds the loss, the "
        "optimizer and the data. Make one with `deepwire import " +
        a.project +
        " -o model.dwproj`, then give it an Output Train node and data sources in the studio "
        "(or the file's \"training\" section)");
  auto g = loadProject(a.project);
  if (!g) return g.status();
  Setup s{std::move(g.value()), {}, nullptr, {}, nullptr, nullptr};
  auto cfg = trainingConfigFromGraph(s.graph);
  if (!cfg) return cfg.status().withContext(a.project);
  s.config = std::move(cfg.value());
  TrainingConfig& c = s.config;
  if (a.epochs >= 0) c.epochs = a.epochs;
  if (a.batchSize > 0) c.batchSize = a.batchSize;
  if (!a.optimizer.empty()) {
    // A different optimizer type starts from that type's defaults, keeping lr and schedule.
    if (a.optimizer != c.optimizer.type) {
      OptimizerConfig o;
      o.type = a.optimizer;
      o.lr = c.optimizer.lr;
      o.schedule = c.optimizer.schedule;
      o.clipNorm = c.optimizer.clipNorm;
      o.clipNormType = c.optimizer.clipNormType;
      if (o.type == "sgd" && a.lr < 0) o.lr = 0.01;
      c.optimizer = o;
    }
  }
  if (a.lr >= 0) c.optimizer.lr = a.lr;
  if (a.seed >= 0) c.seed = static_cast<uint64_t>(a.seed);
  DW_RETURN_IF_ERROR(validateOptimizerConfig(c.optimizer));
  if (c.dataset.train.empty() && !a.evalOnly)
    return Status::error(a.project +
                         ": the project has no training dataset: give each data input a source "
                         "in the studio's Data panel, or add a \"training\" section with "
                         "dataset/train files (see README, \"The training section\")");
  s.baseDir = fs::absolute(a.project).parent_path().string();
  if (a.trainLimit > 0) c.dataset.trainLimit = a.trainLimit;
  const std::vector<DataFileSpec>* own = a.evalSplit == "test"         ? &c.dataset.test
                                         : a.evalSplit == "validation" ? &c.dataset.validation
                                                                       : nullptr;
  if (a.evalOnly && own && !own->empty()) {
    // Only the split's own sources: evaluating needs nothing else read.
    auto d = loadDataset(*own, s.baseDir);
    if (!d) return d.status().withContext(a.project + ": " + a.evalSplit + " split");
    s.test = std::make_shared<Dataset>(std::move(d.value()));
  } else if (!c.dataset.train.empty()) {
    // The same reading, conversion and split as the studio's Data panel (data_source.h).
    auto d = loadData(c.dataset, s.baseDir);
    if (!d) return d.status().withContext(a.project);
    s.train = d->train;
    s.test = !a.evalOnly                   ? d->evaluation()
             : a.evalSplit == "validation" ? d->validation
             : a.evalSplit == "train"      ? d->train
                                           : d->test;
    if (!a.evalOnly && d->validation) s.heldOut = "validation";
    if (a.evalOnly && !s.test && a.evalSplit == "test" && d->validation)
      return Status::error(a.project +
                           ": the training section names no test data to evaluate, only a "
                           "validation split: evaluate it with --split validation, or give the "
                           "test split its own sources or a fraction of train (test_split)");
  }
  if (a.evalOnly && !s.test)
    return Status::error(
        a.project + ": the training section names no " + a.evalSplit + " data to evaluate: " +
        (a.evalSplit == "train"
             ? std::string("give each data input a train source")
             : "give the " + a.evalSplit + " split its own sources or a fraction of train (" +
                   a.evalSplit + "_split)"));
  // A model exported with a fixed batch (torch.onnx.export without dynamic_axes) takes batches
  // of exactly that size: it trains in batches of that size and is evaluated in them, a last
  // partial batch left out. Another batch size is refused before anything runs (a trial trained
  // an epoch at --batch-size 2 to fail at its evaluation, the epoch lost).
  if (auto inputs = dataInputsOf(s.graph); inputs.ok())
    for (const DataInput& in : *inputs) {
      if (in.shape.empty() || in.shape[0] <= 0) continue;
      const int64_t fixed = in.shape[0];
      const std::string freeIt = "make its batch dimension free by setting the Input's type to " +
                                 withFreeBatch(in.typeText) +
                                 " (the studio's Parameters panel, or the node's \"type\" in "
                                 "the project)";
      if (!a.evalOnly && c.batchSize != fixed)
        return Status::error(a.project + ": input '" + in.name + "' takes batches of exactly " +
                             std::to_string(fixed) + " (" + in.typeText + "), and training's are " +
                             std::to_string(c.batchSize) + ": train with --batch-size " +
                             std::to_string(fixed) + ", or " + freeIt);
      if (a.distributed)
        return Status::error(a.project + ": input '" + in.name + "' takes batches of exactly " +
                             std::to_string(fixed) + " (" + in.typeText +
                             "), which processes cannot share: " + freeIt);
      note("input '" + in.name + "' takes batches of exactly " + std::to_string(fixed) + " (" +
           in.typeText + "): a last partial batch of training or evaluation is left out; to use " +
           "every sample, " + freeIt);
      break;
    }
  TrainOptions to;
  to.optimizer = c.optimizer;
  to.accelerator = a.accelerator.empty() ? c.accelerator : a.accelerator;
  to.threads = a.threads >= 0 ? a.threads : c.threads;
  // "All cores" under mpirun: the processes on this machine share them, instead of each
  // starting a thread per core.
  if (to.threads == 0 && a.localProcesses > 1)
    to.threads =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / a.localProcesses);
  to.precision = a.precision.empty() ? c.precision : a.precision;
  to.seed = c.seed;
  to.bucketBytes = std::max<int64_t>(4, static_cast<int64_t>(a.bucketMb * (1 << 20)));
  to.overlap = !a.noOverlap;
  to.syncBatchNorm = a.syncBatchNorm;
  auto t = Trainer::create(s.graph, to);
  if (!t) return t.status().withContext(a.project);
  s.trainer = std::move(t.value());
  return s;
}

void progressBar(const StepInfo& si, int64_t epochs) {
  const int width = 30;
  const double frac = si.batchesPerEpoch ? static_cast<double>(si.batch + 1) /
                                               static_cast<double>(si.batchesPerEpoch)
                                         : 1.0;
  const int filled = static_cast<int>(frac * width);
  const double sps = si.seconds > 0 ? static_cast<double>(si.samplesDone) / si.seconds : 0;
  std::fprintf(stderr, "\repoch %lld/%lld [%.*s%*s] %3d%%  %8.0f samples/s  loss %.4f ",
               static_cast<long long>(si.epoch + 1), static_cast<long long>(epochs), filled,
               "##############################", width - filled, "", static_cast<int>(frac * 100),
               sps, si.result.totalLoss());
  std::fflush(stderr);
}

// Whether `path` can be written, its folder made where missing (as --checkpoint makes its own).
Status writableFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Status::error(path + ": is a directory; give a file name");
  return writableDir(fs::absolute(path).parent_path().string()).withContext(path);
}

// The loaded project with the trainer's weights written into it (Initializer values and layers'
// stored weights), saved atomically.
Status saveTrainedProject(const Setup& st, const std::string& path, const std::string& project) {
  Graph g = st.graph;
  DW_RETURN_IF_ERROR(st.trainer->writeWeightsTo(g));
  rebaseDataPaths(g, std::filesystem::path(project).parent_path().string(),
                  std::filesystem::path(path).parent_path().string());
  return saveProject(g, path);
}

int train(const TrainArgs& args, const std::shared_ptr<distributed::Communicator>& comm) {
  TrainArgs a = args;
  // A resumed run goes on writing where it resumed from, where it can: its new epochs were
  // thrown away in silence when --checkpoint was left out. (A folder that is not there is for
  // loading the checkpoint to report, not to be made here.)
  std::string kept;  // what the run keeps, for a note; empty when it writes somewhere
  std::error_code ec;
  if (!a.resume.empty() && a.checkpoint.empty() && std::filesystem::is_directory(a.resume, ec)) {
    if (Trainer::checkCheckpointDir(a.resume).ok()) {
      a.checkpoint = a.resume;
      kept = "checkpoints go to " + a.resume + ", the folder resumed from (--checkpoint DIR " +
             "writes them elsewhere)";
    } else {
      kept = "nothing this run trains is kept: " + a.resume + " cannot be written; add " +
             "--checkpoint DIR, --save-project or --export-onnx";
    }
  } else if (a.checkpoint.empty() && a.saveProject.empty() && a.exportOnnx.empty() &&
             a.exportTraining.empty()) {
    kept =
        "nothing this run trains is kept; add --checkpoint DIR, --save-project FILE or "
        "--export-onnx FILE";
  }
  if (comm) {
    if (comm->rank() != 0) {
      // Rank 0 alone reports and writes: checkpoints, exports and the saved project.
      a.json = false;
      a.quiet = true;
      a.checkpoint.clear();
      a.exportOnnx.clear();
      a.exportTraining.clear();
      a.saveProject.clear();
    }
  }
  auto s = prepare(a);
  if (!s) return fail(s.message());
  // Where the run writes is checked before it trains: a read-only or missing place was found
  // only once the epoch was done, its training lost.
  FolderLock checkpointLock;  // held to the end of the run
  if (!a.checkpoint.empty()) {
    if (Status c = Trainer::checkCheckpointDir(a.checkpoint); !c.ok()) return fail(c.message(), 2);
    auto lock = FolderLock::take(a.checkpoint,
                                 "give this run a --checkpoint folder of its own, or wait for "
                                 "that run to end (--resume may read a folder in use)");
    if (!lock) return fail(lock.message(), 2);
    checkpointLock = std::move(*lock);
  }
  for (const std::string* out : {&a.exportOnnx, &a.exportTraining, &a.saveProject})
    if (!out->empty())
      if (Status w = writableFile(*out); !w.ok()) return fail(w.message(), 2);
  // From here an interrupt stops the run where it is and saves the checkpoint, including one
  // that arrives before the first step: fit() then ends at once. (Before, it arrived ahead of
  // the handlers while the checkpoint loaded, and ended the process, which mpirun reported as a
  // failed job.) mpirun answers Ctrl-C by sending its processes SIGTERM (then SIGKILL a moment
  // later): under it, SIGTERM stops training as Ctrl-C does. Open MPI 4.1's SIGTERM came only
  // as its kill timeout (odls_base_sigkill_timeout) ran out, the SIGKILL just after, so a slow
  // step lost the checkpoint. SIGUSR1, which mpirun passes on to every process at once, stops
  // them all too, with no kill behind it: `kill -USR1 <mpirun's pid>`.
  // A single process takes SIGTERM and SIGHUP the same way: job schedulers, `timeout` and
  // container stops send SIGTERM, a closed terminal SIGHUP, and either lost up to an epoch.
  // A signal the process was started to ignore stays ignored: `nohup deepwire train ... &` must
  // outlive the terminal it came from (a trial's run stopped when its SSH session closed).
  struct Handlers {
    Handlers() {
      gInterrupted = false;
      gStopAsked = false;
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        old[sig] = std::signal(sig, onSigint);
        if (old[sig] == SIG_IGN) std::signal(sig, SIG_IGN);
      }
      old[SIGUSR1] = std::signal(SIGUSR1, onSigusr1);
    }
    ~Handlers() {
      for (const auto& [sig, handler] : old) std::signal(sig, handler);
    }
    std::map<int, void (*)(int)> old;
  } handlers;
  Setup& st = s.value();
  Trainer& tr = *st.trainer;
  if (comm) {
    tr.setCommunicator(comm);
    // Every process has its handlers before the run says it started: an interrupt that follows
    // that line cannot find a process still without them (which it ended, and mpirun with it).
    if (Status b = comm->barrier(); !b.ok()) return fail(b.message());
    if (comm->rank() == 0) {
      const int64_t p = comm->size(), b = st.config.batchSize;
      std::ostringstream info;
      info << "distributed: " << p << (p == 1 ? " process" : " processes") << " (";
      for (int r = 0; r < p; ++r)
        info << (r ? ", " : "") << "rank " << r << " on " << comm->hosts()[r];
      info << "); global batch " << b << ", " << b / p
           << (b % p ? " or " + std::to_string(b / p + 1) : std::string()) << " per process; "
           << tr.threads() << (tr.threads() == 1 ? " thread" : " threads") << " each";
      note(info.str());
    }
  }
  // Once for the job: every rank chose the same device the same way.
  if (!tr.notice().empty() && (!comm || comm->rank() == 0)) note(tr.notice());
  if (!comm || comm->rank() == 0) {
    for (const auto& h : groupedHints(st.graph.hints())) note("hint: " + h);
    if (!kept.empty()) note(kept);
    if (st.config.optimizer.lr == 0)
      note("the learning rate is 0: the trainable weights will not change (normalization "
           "statistics still do)");
  }
  if (!a.resume.empty()) {
    Status ls = tr.loadCheckpoint(a.resume);
    if (!ls.ok()) return fail(ls.message());
    // The checkpoint brings back the rate it trained at; a different one asked for now (--lr,
    // or the project's) is what the rest of the run uses, and said. (It was ignored.) The seed
    // stays the checkpoint's: a resumed epoch's data order depends on it.
    const double asked = st.config.optimizer.lr, trained = tr.baseLearningRate();
    if (asked != trained) {
      tr.setLearningRate(asked);
      if (!comm || comm->rank() == 0)
        std::cerr << "deepwire: the learning rate is " << asked << " from here (the checkpoint "
                  << "trained at " << trained << ")\n";
    }
    if (a.seed >= 0 && (!comm || comm->rank() == 0))
      std::cerr << "deepwire: --seed is not used with --resume: the run keeps the checkpoint's "
                   "data order\n";
    if (!comm || comm->rank() == 0) {
      const auto& c = tr.counters();
      std::cerr << "deepwire: resuming from " << a.resume << ": "
                << count(c.epoch, "epoch", "epochs") << " done"
                << (c.batchInEpoch ? " and " + count(c.batchInEpoch, "batch", "batches") +
                                         " of epoch " + std::to_string(c.epoch + 1)
                                   : std::string())
                << ", " << count(c.optimizerSteps, "optimizer step", "optimizer steps")
                << (c.epoch < st.config.epochs
                        ? "; training continues to epoch " + std::to_string(st.config.epochs)
                        : "; that is all the " + std::to_string(st.config.epochs) +
                              " this run asks for (--epochs counts from the start)")
                << "\n";
    }
  }
  FitOptions fo;
  fo.train = st.train;
  fo.test = st.test;
  fo.epochs = st.config.epochs;
  fo.batchSize = st.config.batchSize;
  fo.shuffle = st.config.shuffle;
  fo.accumulationSteps = st.config.accumulationSteps;
  fo.maxStepsPerEpoch = a.maxSteps;
  fo.checkpointDir = a.checkpoint;
  const bool tty = isatty(STDERR_FILENO) && !a.quiet;
  FitCallbacks cb;
  int64_t lastDrawn = -1;
  if (tty) {
    cb.onStep = [&](const StepInfo& si) {
      // Redraw about 50 times per epoch: the bar must not cost training time.
      const int64_t every = std::max<int64_t>(1, si.batchesPerEpoch / 50);
      if (si.batch % every == 0 || si.batch + 1 == si.batchesPerEpoch) {
        if (si.batch != lastDrawn) progressBar(si, fo.epochs);
        lastDrawn = si.batch;
      }
    };
  } else if (!a.quiet && !a.json && (!comm || comm->rank() == 0)) {
    // Output to a file or a pipe (mpirun's, a log) has no bar: a line every 10 s of an epoch
    // instead, so that a long epoch is not minutes of silence.
    cb.onStep = [&, next = 10.0](const StepInfo& si) mutable {
      if (si.batch == 0) next = 10.0;
      if (si.seconds < next || si.batch + 1 == si.batchesPerEpoch) return;
      next = si.seconds + 10.0;
      std::fprintf(stderr, "epoch %lld/%lld: batch %lld/%lld (%d%%), %.0f samples/s, loss %.4f\n",
                   static_cast<long long>(si.epoch + 1), static_cast<long long>(fo.epochs),
                   static_cast<long long>(si.batch + 1), static_cast<long long>(si.batchesPerEpoch),
                   static_cast<int>(100.0 * static_cast<double>(si.batch + 1) /
                                    static_cast<double>(std::max<int64_t>(1, si.batchesPerEpoch))),
                   si.seconds > 0 ? static_cast<double>(si.samplesDone) / si.seconds : 0.0,
                   si.result.totalLoss());
      std::fflush(stderr);
    };
  }
  if (a.json && a.jsonSteps) {
    // A line per step for a program drawing the curves as they come (the studio's Fit across
    // processes): the global step, and the loss and metrics of the batch (under --distributed,
    // of rank 0's slice of it).
    cb.onStep = [&, shown = std::move(cb.onStep)](const StepInfo& si) {
      if (shown) shown(si);
      json j = {{"step", tr.counters().trainSteps},
                {"epoch", si.epoch + 1},
                {"batch", si.batch + 1},
                {"batches", si.batchesPerEpoch},
                {"loss", si.result.totalLoss()}};
      if (!si.result.batchMetrics.empty()) j["metrics"] = si.result.batchMetrics;
      std::cout << jsonText(j) << std::endl;
    };
  }
  cb.onEpoch = [&](const EpochReport& e) {
    if (comm && comm->rank() != 0) return;
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (a.json) {
      json j = {{"epoch", e.epoch + 1},
                {"train_loss", e.trainLoss},
                {"seconds", e.seconds},
                {"samples_per_second", e.samplesPerSecond}};
      // The epoch's training metrics, as the step lines and the checkpoint's history have them
      // (a trial's script could not read the training accuracy from the epoch lines).
      for (const auto& [k, v] : e.trainMetrics) j["train_metrics"][k] = v;
      for (const auto& [k, v] : e.testMetrics) j["eval_metrics"][k] = v;
      // Saved before this line is written: where to --resume from after this epoch.
      if (!a.checkpoint.empty()) j["checkpoint"] = a.checkpoint;
      // The held-out split's figures under its own name (validation_loss or test_loss: a
      // test_loss that held the validation loss misled a script), and as eval_loss and
      // eval_accuracy for a reader that takes whichever split the run evaluates.
      j["eval_loss"] = e.hasTest ? json(e.testLoss) : json(nullptr);
      j["eval_accuracy"] = e.hasTest && e.testAccuracy >= 0 ? json(e.testAccuracy) : json(nullptr);
      if (e.hasTest) {
        j["evaluated_split"] = st.heldOut;
        j[std::string(st.heldOut) + "_loss"] = j["eval_loss"];
        j[std::string(st.heldOut) + "_accuracy"] = j["eval_accuracy"];
      }
      if (!e.warning.empty()) j["warning"] = e.warning;
      if (comm && comm->size() > 1) {
        j["waited_seconds"] = e.waitSeconds;
        if (e.sumSeconds >= 0) {
          j["sum_wait_seconds"] = e.sumSeconds;
          j["skew_wait_seconds"] = e.skewSeconds;
        }
      }
      std::cout << jsonText(j) << std::endl;
    } else {
      std::printf("epoch %lld/%lld  train loss %.4f", static_cast<long long>(e.epoch + 1),
                  static_cast<long long>(fo.epochs), e.trainLoss);
      if (e.hasTest) std::printf("  %s loss %.4f", st.heldOut, e.testLoss);
      if (e.hasTest && e.testAccuracy >= 0)
        std::printf("  %s accuracy %.4f", st.heldOut, e.testAccuracy);
      std::printf("  %.2f s  %.0f samples/s\n", e.seconds, e.samplesPerSecond);
      std::fflush(stdout);
    }
    if (!e.warning.empty())
      std::cerr << "deepwire: warning: epoch " << e.epoch + 1 << ": " << e.warning << "\n";
  };
  auto report = tr.fit(fo, cb, &gInterrupted);
  if (!report) {
    if (tty) std::fprintf(stderr, "\n");
    return fail(report.message());
  }
  if (report->cancelled) {
    if (tty) std::fprintf(stderr, "\n");
    if (!a.checkpoint.empty()) {
      Status cs = tr.saveCheckpoint(a.checkpoint);
      if (!cs.ok()) return fail(cs.message());
      std::cerr << "deepwire: interrupted; checkpoint saved to " << a.checkpoint
                << " (continue with --resume " << a.checkpoint << ")\n";
    } else {
      if (!comm || comm->rank() == 0) std::cerr << "deepwire: interrupted\n";
    }
    if (!a.saveProject.empty()) {
      Status ss = saveTrainedProject(st, a.saveProject, a.project);
      if (!ss.ok()) return fail(ss.message(), 2);
      std::cerr << "deepwire: the weights trained so far are saved in " << a.saveProject << "\n";
    }
    // A program reading --json learns of the stop too, not only a person reading stderr.
    if (a.json)
      std::cout << jsonText(
                       {{"interrupted", true},
                        {"checkpoint", a.checkpoint.empty() ? json(nullptr) : json(a.checkpoint)}})
                << std::endl;
    // A stop asked for with SIGUSR1 ended as asked: exit 0, or mpirun, seeing a process fail,
    // spends 2 s sending every process SIGCONT, SIGTERM and SIGKILL after they have exited
    // (the studio's Stop waited 3 s for the job to end, 0.08 s of it for the processes).
    // Ctrl-C and SIGTERM keep the shell's 130.
    return gStopAsked ? 0 : 130;
  }
  if (report->epochs.empty() && (!comm || comm->rank() == 0))
    std::cerr << "deepwire: nothing to train: the model has "
              << count(tr.counters().epoch, "epoch", "epochs")
              << " behind it and this run asks for " << fo.epochs
              << " in all (epochs count from the start, a resumed run's too); ask "
              << "for more to continue\n";
  if (!a.checkpoint.empty() && report->epochs.empty()) {
    Status cs = tr.saveCheckpoint(a.checkpoint);
    if (!cs.ok()) return fail(cs.message());
  }
  // Each file written, as a line a person reads or, with --json, a JSON line of its own (the
  // step and epoch readers skip it: it has neither key).
  auto wrote = [&](const std::string& path, const std::string& kind, const std::string& text) {
    if (a.json)
      std::cout << json{{"wrote", path}, {"contents", kind}}.dump(-1, ' ', false,
                                                                  json::error_handler_t::replace)
                << "\n";
    else
      std::cout << text << "\n";
  };
  // A write that fails after training (a full disk) does not take the training with it: the
  // message says where the weights are, in a checkpoint written for them if there was none (a
  // trial's three epochs were lost to a full disk at --save-project).
  auto writeFailed = [&](const Status& failed) {
    std::string where;
    if (!a.checkpoint.empty()) {
      where = "; the trained weights are in the checkpoint " + a.checkpoint;
    } else {
      for (const auto& dir : {std::filesystem::absolute(a.project).parent_path() / "deepwire-rescue",
                              std::filesystem::temp_directory_path() /
                                  ("deepwire-rescue-" + std::to_string(::getpid()))})
        if (tr.saveCheckpoint(dir.string()).ok()) {
          where = "; the trained weights are kept in the checkpoint " + dir.string() +
                  " (train --resume " + dir.string() + " --save-project FILE writes them out)";
          break;
        }
    }
    return fail(failed.message() + where, 2);
  };
  if (!a.exportOnnx.empty()) {
    auto m = tr.exportInference();
    if (!m) return fail(m.message());
    if (!a.noDataConversion) {
      Status cs = addDataConversion(*m, st.config.dataset, st.baseDir);
      if (!cs.ok()) return fail(cs.message());
    }
    Status ws = writeOnnxFile(*m, a.exportOnnx);
    if (!ws.ok()) return writeFailed(ws);
    wrote(a.exportOnnx, "inference model", "exported " + a.exportOnnx);
  }
  if (!a.saveProject.empty()) {
    Status ss = saveTrainedProject(st, a.saveProject, a.project);
    if (!ss.ok()) return writeFailed(ss);
    wrote(a.saveProject, "project with the trained weights",
          "saved " + a.saveProject + " (with the trained weights)");
  }
  if (!a.exportTraining.empty()) {
    auto m = tr.exportTraining();
    if (!m) return fail(m.message());
    Status ws = writeOnnxFile(*m, a.exportTraining);
    if (!ws.ok()) return writeFailed(ws);
    wrote(a.exportTraining, "training model",
          "exported " + a.exportTraining + " (with training info)");
  }
  if (comm && comm->size() > 1 && comm->rank() == 0 && !report->epochs.empty()) {
    double seconds = 0, waited = 0, sums = 0, skew = 0;
    bool split = true;
    for (const auto& e : report->epochs) {
      seconds += e.seconds;
      waited += e.waitSeconds;
      split = split && e.sumSeconds >= 0;
      sums += e.sumSeconds;
      skew += e.skewSeconds;
    }
    // One write, so that mpirun's forwarding does not split the line.
    char line[512];
    int n = std::snprintf(line, sizeof line,
                          "deepwire: rank 0 waited %.2f s for the other processes in %.2f s of "
                          "training (%.0f%%)",
                          waited, seconds, seconds > 0 ? 100.0 * waited / seconds : 0.0);
    if (split && n > 0 && n < static_cast<int>(sizeof line))
      std::snprintf(line + n, sizeof line - n,
                    "; from the end of its backward passes to its summed gradients, %.2f s "
                    "while slower processes finished theirs and %.2f s for the sums themselves",
                    skew, sums);
    std::fprintf(stderr, "%s\n", line);
  }
  return 0;
}

// --distributed: one process of an MPI job. A process that fails ends the whole job, since the
// others may be waiting for it in a collective.
int trainCommand(const TrainArgs& a) {
  if (!a.distributed) {
    // Several copies of one training, each writing the same checkpoints and project, are
    // never what `mpirun -np N deepwire train` meant.
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = std::getenv("PMI_SIZE");
    if (distributed::launchedByMpi() && size && std::atoi(size) > 1)
      return fail("started by mpirun as one of " + std::string(size) +
                  " processes, but without --distributed: each would train the whole model "
                  "alone and write the same files; add --distributed to train data-parallel, or "
                  "run without mpirun");
    return train(a, nullptr);
  }
  auto c = distributed::mpiCommunicator(a.distributedTimeout);
  if (!c) return fail(c.message());
  const auto& comm = c.value();
  TrainArgs local = a;
  if (const char* n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    local.localProcesses = std::max(1, std::atoi(n));
  if (comm->size() > 1)
    failSpeaker() = "rank " + std::to_string(comm->rank()) + " on " +
                    comm->hosts()[static_cast<size_t>(comm->rank())] + ": ";
  const int code = train(local, comm);
  // Interrupted (130), every process stopped after the same step and exits on its own.
  if (code != 0 && code != 130 && comm->size() > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    comm->abort(code);
  }
  return code;
}

int evalCommand(const TrainArgs& a) {
  auto s = prepare(a);
  if (!s) return fail(s.message());
  Trainer& tr = *s->trainer;
  // What train says of the model holds for its scores too (a normalization in training mode
  // makes them depend on the batch size).
  for (const auto& h : groupedHints(s->graph.hints())) note("hint: " + h);
  if (a.checkpoint.empty())
    std::cerr << "deepwire: no --checkpoint: evaluating the weights the project holds (its "
                 "layers' seeds where it holds none)\n";
  if (!a.checkpoint.empty()) {
    // The weights are what is evaluated: a checkpoint of another optimizer evaluates too.
    Status ls = tr.loadCheckpoint(a.checkpoint, /*weightsOnly=*/true);
    if (!ls.ok()) return fail(ls.message());
  }
  // Batches of 256 or the training's, larger; --batch-size for a model or a memory that wants
  // another.
  auto r = tr.evaluate(*s->test,
                       a.batchSize > 0 ? a.batchSize : std::max<int64_t>(s->config.batchSize, 256));
  const std::string& split = a.evalSplit;
  if (!r)
    return fail(r.status()
                    .withContext("evaluating " +
                                 dw::engine::training::describeSplit(s->config.dataset, split))
                    .message());
  double acc = -1;
  for (const auto& [k, v] : r->metrics) {
    std::string lower = k;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (acc < 0 && lower.find("acc") != std::string::npos) acc = v;
  }
  if (a.json) {
    // The split's name in the keys, as train's --json names its held-out split's.
    json j = {{"split", split}, {split + "_loss", r->totalLoss()}, {"samples", r->samples}};
    j[split + "_accuracy"] = acc >= 0 ? json(acc) : json(nullptr);
    for (const auto& [k, v] : r->metrics) j["metrics"][k] = v;
    std::cout << jsonText(j) << std::endl;
  } else {
    std::printf("%s loss %.4f", split.c_str(), r->totalLoss());
    if (acc >= 0) std::printf("  %s accuracy %.4f", split.c_str(), acc);
    std::printf("  (%lld samples)\n", static_cast<long long>(r->samples));
  }
  return 0;
}

}  // namespace

void registerTrainingCommands(CLI::App& app, int& exitCode) {
  auto train = std::make_shared<TrainArgs>();
  CLI::App* t = app.add_subcommand(
      "train", "Train a project's model on the dataset its training section names");
  t->add_option("PROJECT", train->project, "Project file (.dwproj)")->required();
  t->add_option("--epochs", train->epochs, "Epochs (default: the project's)")->check(positive());
  t->add_option("--batch-size", train->batchSize, "Batch size")->check(positive());
  t->add_option("--lr", train->lr, "Learning rate")->check(atLeast(0));
  t->add_option("--optimizer", train->optimizer, "sgd, adam, adamw, adagrad or rmsprop")
      ->transform(CLI::IsMember({"sgd", "adam", "adamw", "adagrad", "rmsprop"}, CLI::ignore_case));
  t->add_option("--accelerator", train->accelerator,
                "cpu, cuda, cuda:N, gpu, gpu:N or auto (default: the project's Accelerator node, "
                "else its training section's accelerator, else cpu)")
      ->check(checkAccelerator);
  t->add_option("--threads", train->threads, "CPU threads (0: all cores; default: the project's)")
      ->check(atLeast(0));
  t->add_option("--precision", train->precision,
                "fp32; bf16 mixed precision (CPUs with native bf16, NVIDIA GPUs); tf32 (cuda "
                "only). Default: the project's Accelerator node, else fp32")
      ->check(CLI::IsMember(dw::precisionNames()));
  t->add_option("--seed", train->seed, "Seed for shuffling (default: the project's)")
      ->check(atLeast(0));
  t->add_option("--checkpoint", train->checkpoint, "Save a checkpoint here after every epoch");
  t->add_option("--resume", train->resume, "Continue from this checkpoint directory");
  t->add_option("--export-onnx", train->exportOnnx, "Write the trained inference model here");
  t->add_flag("--no-data-conversion", train->noDataConversion,
              "Export the model without the data conversion (cast, scale, normalization, "
              "reshape) in front of its inputs: for callers that convert the data themselves");
  t->add_option("--export-training-onnx", train->exportTraining,
                "Write the training graph (gradients, optimizer state) here");
  t->add_option("--save-project", train->saveProject,
                "Save the project with its trained weights here (atomically; may be PROJECT)");
  t->add_option("--max-steps", train->maxSteps,
                "Stop each epoch after this many batches (0: no limit, the default)")
      ->check(atLeast(0));
  t->add_option("--train-limit", train->trainLimit,
                "Use only the first N training samples (0: all, the default)")
      ->check(atLeast(0));
  t->add_flag("--json", train->json, "One JSON object per epoch on stdout");
  // Implies --json: the per-step lines without the epochs' would be a stream no reader expects,
  // and ignoring the flag (as it was) printed nothing the user asked for.
  t->add_flag("--json-steps", train->jsonSteps,
              "Also one JSON object per training step (implies --json): step, epoch, batch, "
              "batches, loss and the batch's metrics")
      ->each([train](const std::string&) { train->json = true; });
  t->add_flag("--quiet", train->quiet, "No progress bar");
  t->add_flag("--distributed", train->distributed,
              "Data-parallel across the processes an MPI launcher started (mpirun -np N "
              "deepwire train ... --distributed): each trains on its slice of every batch, the "
              "gradients are summed, and rank 0 reports and writes");
  t->add_option("--bucket-mb", train->bucketMb,
                "Distributed: sum the gradients in buckets of about this many MiB as the "
                "backward pass produces them (default 25; the first at most 1)")
      ->check(positive());
  t->add_flag("--sync-batchnorm", train->syncBatchNorm,
              "Distributed: BatchNormalization normalizes with the statistics of every "
              "process's samples together, so the processes train as one would (slower: its "
              "kernels run unfused and wait for the others twice per pass)");
  t->add_flag("--no-overlap", train->noOverlap,
              "Distributed: sum the gradients after the backward pass instead of during it "
              "(to measure what the overlap hides)");
  t->add_option("--distributed-timeout", train->distributedTimeout,
                "Seconds a process waits for the others in a step before the job ends with an "
                "error (default 300)")
      ->check(positive());
  t->callback([train, &exitCode] { exitCode = trainCommand(*train); });

  auto ev = std::make_shared<TrainArgs>();
  ev->evalOnly = true;
  CLI::App* e =
      app.add_subcommand("eval", "Evaluate a project's model on its test (or another) split");
  e->add_option("PROJECT", ev->project, "Project file (.dwproj)")->required();
  e->add_option("--checkpoint", ev->checkpoint, "Load weights from this checkpoint directory");
  e->add_option("--accelerator", ev->accelerator,
                "cpu, cuda, cuda:N, gpu, gpu:N or auto (default: the project's Accelerator node, "
                "else its training section's accelerator, else cpu)")
      ->check(checkAccelerator);
  e->add_option("--threads", ev->threads, "CPU threads (0: all cores; default: the project's)")
      ->check(atLeast(0));
  e->add_option("--precision", ev->precision,
                "fp32, bf16 or tf32 (default: the project's Accelerator node, else fp32)")
      ->check(CLI::IsMember(dw::precisionNames()));
  e->add_option("--batch-size", ev->batchSize,
                "Samples per evaluation batch (default: 256, or the training batch if larger)")
      ->check(positive());
  e->add_option("--split", ev->evalSplit,
                "Which data to score: test (the default), validation, or train (the samples "
                "training learns from, after the held-out fractions)")
      ->check(CLI::IsMember({"test", "validation", "train"}));
  e->add_flag("--json", ev->json, "Print the result as one JSON object");
  e->callback([ev, &exitCode] { exitCode = evalCommand(*ev); });
}

}  // namespace dw::cli
