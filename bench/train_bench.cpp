// Training speed of deepwire against PyTorch, in the same run: the example Fashion-MNIST MLP and
// CNN (resources/examples/fashion_mnist_{mlp,cnn}.dwproj), Adam lr 1e-3, batch 64, shuffled,
// a fixed thread count (default 2) on both sides. PyTorch runs bench/train_torch.py with
// /usr/bin/python3 on the same architecture, as a child process that takes its turns with ours:
// --rounds R alternate runs of each side (default 5), and the time ratio is the median of the
// rounds' ratios, so that a drift of the machine's speed during the run cancels out.
//
// Prints per model: seconds per epoch (deepwire measured over --steps steps in all, or a whole
// epoch with --steps 0, and extrapolated to the 938 steps of an epoch), PyTorch's, their ratio,
// and a breakdown of a step: waiting for data, the training-graph run (kernels + executor), the
// optimizer update and the trainer's own bookkeeping; in both precisions (fp32, and bf16 mixed
// precision where the CPU has native bf16), PyTorch in fp32 and under bf16 autocast. A summary
// table ends the run with the targets (MLP <= 1.0 s/epoch, CNN <= 12 s/epoch). Peak RSS
// at the end.
//
// Usage: train_bench [--model mlp|cnn|both] [--steps N] [--rounds R] [--threads T] [--no-torch]
//                    [--precision fp32|bf16|tf32|both|P,P...] [--accelerator cpu|cuda]
//                    [--batch B]
// --accelerator cuda trains deepwire on the GPU and PyTorch on the same GPU (the python3 on PATH
// there must have a CUDA PyTorch); each side copies its batches up every step. There, bf16 is
// PyTorch's cuda autocast and tf32 (cuda only) turns on PyTorch's TF32 for both convolutions
// and matmuls; fp32 turns it off for both.
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda.h"
#include "engine/openmp_wait.h"
#include "engine/training/trainer.h"
#include "graphs/project.h"

#ifndef DW_SOURCE_DIR
#define DW_SOURCE_DIR "."  // bench/CMakeLists.txt passes the source tree
#endif

namespace {

std::string gAccelerator = "cpu";  // --accelerator: both sides
int64_t gBatch = 64;               // --batch: both sides

using namespace dw::engine::training;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "train_bench: %s\n", m.c_str());
  std::exit(1);
}

struct Figures {
  double seconds = 0, dataWait = 0, train = 0, optim = 0, other = 0;
  int64_t steps = 0;
  double perStep() const { return seconds / static_cast<double>(std::max<int64_t>(steps, 1)); }
};

// One model's deepwire training, set up and warmed up once, then timed a chunk of steps at a
// time.
class DeepwireRun {
 public:
  DeepwireRun(const std::string& project, int threads, const std::string& precision) {
    auto g = dw::loadProject(project);
    if (!g) die(g.message());
    auto cfg = trainingConfigFromGraph(*g);
    if (!cfg) die(cfg.message());
    auto ds = loadDataset(cfg->dataset.train, "");
    if (!ds) die(ds.message());
    auto data = std::make_shared<Dataset>(std::move(ds.value()));
    TrainOptions o;
    o.optimizer.type = "adam";
    o.optimizer.lr = 1e-3;
    o.threads = threads;
    o.precision = precision;
    o.accelerator = gAccelerator;
    auto t = Trainer::create(*g, o);
    if (!t) die(t.message());
    trainer_ = std::move(t.value());
    LoaderOptions lo;
    lo.batchSize = gBatch;
    lo.seed = 1;
    lo.hostBuffers = trainer_->batchStorage();
    loader_ = std::make_unique<BatchLoader>(data, lo);
    loader_->startEpoch(0);
    // Warm-up: plans, primitive caches and pooled buffers settle in the first steps.
    for (int i = 0; i < 5; ++i) {
      auto r = trainer_->fullTrainStep(next());
      if (!r) die(r.message());
    }
    loader_->startEpoch(++epoch_);
  }
  int64_t stepsPerEpoch() const { return loader_->batchesPerEpoch(); }

  // Times `steps` more steps into figures(); returns their seconds.
  double chunk(int64_t steps) {
    const auto start = Clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      auto t0 = Clock::now();
      const Batch b = next();
      auto t1 = Clock::now();
      auto r = trainer_->trainStep(b);
      if (!r) die(r.message());
      auto t2 = Clock::now();
      auto st = trainer_->optimizerStep();
      if (!st.ok()) die(st.message());
      auto t3 = Clock::now();
      trainer_->resetGrad();
      auto t4 = Clock::now();
      f_.dataWait += std::chrono::duration<double>(t1 - t0).count();
      f_.train += std::chrono::duration<double>(t2 - t1).count();
      f_.optim += std::chrono::duration<double>(t3 - t2).count();
      f_.other += std::chrono::duration<double>(t4 - t3).count();
      ++f_.steps;
    }
    const double seconds = since(start);
    f_.seconds += seconds;
    return seconds;
  }
  const Figures& figures() const { return f_; }

 private:
  Batch next() {
    auto b = loader_->next();
    if (!b) {
      loader_->startEpoch(++epoch_);
      b = loader_->next();
    }
    if (!b) die("the dataset gives no batch of " + std::to_string(gBatch));
    return std::move(*b);
  }

  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<BatchLoader> loader_;
  int64_t epoch_ = 0;
  Figures f_;
};

// bench/train_torch.py in its serve mode, a child process fed step counts on a pipe: runs of
// both sides alternate, so that both see the same phases of a machine whose speed drifts (on
// the shared VMs this runs on, PyTorch's CNN epoch varied from 80 to 123 s within minutes).
class TorchServer {
 public:
  TorchServer(const std::string& root, const std::string& model, int threads,
              const std::string& precision) {
    // A child that dies between rounds must fail a write, not kill the benchmark.
    std::signal(SIGPIPE, SIG_IGN);
    int toChild[2] = {-1, -1}, fromChild[2] = {-1, -1};
    if (pipe(toChild) == 0 && pipe(fromChild) == 0) {
      const std::string script = root + "/bench/train_torch.py", th = std::to_string(threads);
      std::vector<std::string> args{"python3", script,    model,        "serve",
                                    th,        precision, gAccelerator, std::to_string(gBatch)};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_adddup2(&fa, toChild[0], 0);
      posix_spawn_file_actions_adddup2(&fa, fromChild[1], 1);
      for (int fd : {toChild[0], toChild[1], fromChild[0], fromChild[1]})
        posix_spawn_file_actions_addclose(&fa, fd);
      if (posix_spawn(&pid_, "/usr/bin/python3", &fa, nullptr, argv.data(), environ) != 0)
        pid_ = -1;
      posix_spawn_file_actions_destroy(&fa);
    }
    // The child's ends, and on failure ours too.
    for (int fd : {toChild[0], fromChild[1]})
      if (fd >= 0) close(fd);
    if (pid_ > 0) {
      in_ = fdopen(toChild[1], "w");
      out_ = fdopen(fromChild[0], "r");
    }
    if (!in_ && toChild[1] >= 0) close(toChild[1]);
    if (!out_ && fromChild[0] >= 0) close(fromChild[0]);
    ok_ = in_ && out_ && readLine() == "ready";
    if (!ok_) std::fprintf(stderr, "train_bench: the PyTorch side did not start\n");
  }
  ~TorchServer() { finish(); }
  bool ok() const { return ok_; }

  // Times `steps` more PyTorch steps; returns their seconds, or a negative number on failure.
  double chunk(int64_t steps) {
    if (!ok_) return -1;
    const bool sent =
        std::fprintf(in_, "%lld\n", static_cast<long long>(steps)) > 0 && std::fflush(in_) == 0;
    const std::string line = sent ? readLine() : "";
    if (line.empty()) {
      ok_ = false;
      std::fprintf(stderr, "train_bench: the PyTorch side stopped\n");
      return -1;
    }
    const double seconds = std::atof(line.c_str());
    seconds_ += seconds;
    steps_ += steps;
    return seconds;
  }
  double perStep() const { return steps_ > 0 ? seconds_ / static_cast<double>(steps_) : 0; }
  int64_t steps() const { return steps_; }

  // Ends the child; returns its peak RSS in MiB (0 if unknown); gpuMib gets its peak GPU memory.
  double finish(double* gpuMib = nullptr) {
    if (in_) std::fclose(in_);
    in_ = nullptr;
    double rss = 0;
    const std::string json = out_ ? readLine() : "";
    if (auto pos = json.find("\"peak_rss_mib\": "); pos != std::string::npos)
      rss = std::atof(json.c_str() + pos + 16);
    if (auto pos = json.find("\"peak_gpu_mib\": "); gpuMib && pos != std::string::npos)
      *gpuMib = std::atof(json.c_str() + pos + 16);
    if (out_) std::fclose(out_);
    out_ = nullptr;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return rss;
  }

 private:
  std::string readLine() {
    char buf[1024];
    if (!out_ || !std::fgets(buf, sizeof buf, out_)) return "";
    std::string s = buf;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }

  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  bool ok_ = false;
  double seconds_ = 0;
  int64_t steps_ = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  dw::useShortOpenMpSpin(argv);  // what deepwire's programs run with
  std::string which = "both";
  int64_t steps = 300, rounds = 5;
  int threads = 2;
  bool torch = true;
  std::string precision = "both";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      which = argv[++i];
    else if (a == "--steps" && i + 1 < argc)
      steps = std::atoll(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::max<int64_t>(1, std::atoll(argv[++i]));
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--no-torch")
      torch = false;
    else if (a == "--precision" && i + 1 < argc)
      precision = argv[++i];
    else if (a == "--accelerator" && i + 1 < argc)
      gAccelerator = argv[++i];
    else if (a == "--batch" && i + 1 < argc)
      gBatch = std::max<int64_t>(1, std::atoll(argv[++i]));
    else
      die("usage: train_bench [--model mlp|cnn|both] [--steps N] [--rounds R] [--threads T] "
          "[--no-torch] [--precision fp32|bf16|tf32|both|P,P...] [--accelerator cpu|cuda] "
          "[--batch B]");
  }
  const std::string root = DW_SOURCE_DIR;
  std::vector<std::string> models, precisions;
  if (which == "mlp" || which == "both") models.push_back("mlp");
  if (which == "cnn" || which == "both") models.push_back("cnn");
  // "both": fp32 and bf16; otherwise a comma-separated list.
  std::vector<std::string> asked;
  if (precision == "both") precision = "fp32,bf16";
  for (size_t at = 0; at <= precision.size();) {
    const size_t comma = std::min(precision.find(',', at), precision.size());
    asked.push_back(precision.substr(at, comma - at));
    at = comma + 1;
  }
  for (const auto& p : asked) {
    if (p == "bf16" && gAccelerator != "cuda" && dw::engine::devices().bf16Native.empty())
      std::printf("precision bf16: no native bf16 on this CPU, not measured\n");
    else if (p == "tf32" && gAccelerator != "cuda")
      std::printf("precision tf32: cuda only, not measured\n");
    else if (p == "fp32" || p == "bf16" || p == "tf32")
      precisions.push_back(p);
    else
      die("unknown precision '" + p + "'");
  }
  if (models.empty() || precisions.empty()) die("nothing to measure");
  std::printf(
      "training benchmark: Adam lr 1e-3, batch %lld, %d threads, %s, Fashion-MNIST (%lld "
      "steps/epoch)\n",
      static_cast<long long>(gBatch), threads, gAccelerator.c_str(),
      static_cast<long long>((60000 + gBatch - 1) / gBatch));
  if (torch)
    std::printf(
        "deepwire and PyTorch alternate in %lld rounds; the ratio is the median of the rounds' "
        "ratios\n",
        static_cast<long long>(rounds));
  struct Row {
    std::string model, precision;
    double ours = 0, torch = 0, ratio = 0;
  };
  std::vector<Row> rows;
  for (const auto& m : models) {
    const std::string project = root + "/resources/examples/fashion_mnist_" + m + ".dwproj";
    for (const auto& p : precisions) {
      DeepwireRun ours(project, threads, p);
      const int64_t perEpoch = ours.stepsPerEpoch();
      const int64_t total = steps > 0 ? steps : perEpoch;
      // PyTorch's CNN takes ~0.1 s a step here (~1 s under bf16 autocast): time fewer steps
      // and extrapolate.
      const int64_t torchSteps =
          m == "cnn" ? (p == "bf16" && gAccelerator != "cuda" ? 10 : 60) : 300;
      std::unique_ptr<TorchServer> server;
      if (torch) server = std::make_unique<TorchServer>(root, m, threads, p);
      const bool paired = server && server->ok();
      const int64_t n = paired ? std::min(rounds, total) : 1;  // each round a step at least
      std::vector<double> ratios;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t ourSteps = total * (r + 1) / n - total * r / n;
        const int64_t theirSteps =
            std::max<int64_t>(1, torchSteps * (r + 1) / n - torchSteps * r / n);
        const double a = ours.chunk(ourSteps) / static_cast<double>(ourSteps);
        if (!paired) continue;
        const double b = server->chunk(theirSteps);
        if (b <= 0) break;
        ratios.push_back(a / (b / static_cast<double>(theirSteps)));
      }
      const Figures& f = ours.figures();
      const double perStep = f.perStep(), count = static_cast<double>(f.steps);
      Row row{m, p, perStep * static_cast<double>(perEpoch), 0, 0};
      std::printf("\n%s %s: deepwire %.3f s/epoch (%.2f ms/step over %lld steps)\n", m.c_str(),
                  p.c_str(), row.ours, perStep * 1e3, static_cast<long long>(f.steps));
      std::printf(
          "  per step: data wait %.3f ms, training graph %.3f ms, optimizer %.3f ms, "
          "reset/bookkeeping %.3f ms\n",
          f.dataWait / count * 1e3, f.train / count * 1e3, f.optim / count * 1e3,
          f.other / count * 1e3);
      std::printf("  outside the training graph: %.3f ms/step (%.1f%% of the step)\n",
                  (perStep - f.train / count) * 1e3, 100.0 * (perStep - f.train / count) / perStep);
      if (server && !ratios.empty()) {
        const double theirs = server->perStep() * static_cast<double>(perEpoch);
        const long long timed = static_cast<long long>(server->steps());
        double gpu = 0;
        const double rss = server->finish(&gpu);
        if (gAccelerator == "cuda")
          std::printf(
              "  GPU memory at peak: deepwire %.0f MiB (this process so far), PyTorch "
              "%.0f MiB\n",
              static_cast<double>(dw::engine::cuda::peakDeviceBytes()) / (1 << 20), gpu);
        row.torch = theirs;
        row.ratio = median(ratios);
        std::printf(
            "  PyTorch (%s) %.3f s/epoch (%lld steps timed, peak RSS %.0f MiB); "
            "deepwire/PyTorch time ratio %.3f (%.1fx faster)\n  ratio by round:",
            p == "bf16" ? "bf16 autocast" : p.c_str(), theirs, timed, rss, row.ratio,
            1.0 / row.ratio);
        for (double r : ratios) std::printf(" %.3f", r);
        std::printf("\n");
      }
      rows.push_back(row);
    }
  }
  std::printf("\n%-5s %-9s %14s %14s %10s %12s\n", "model", "precision", "deepwire s/ep",
              "PyTorch s/ep", "dw/torch", "target s/ep");
  for (const auto& r : rows) {
    // The issues' targets: cpu (2 threads) MLP 1.0 and CNN 12 s/epoch; cuda MLP 0.5, CNN 0.9.
    const double target =
        gAccelerator == "cuda" ? (r.model == "mlp" ? 0.5 : 0.9) : (r.model == "mlp" ? 1.0 : 12.0);
    char torchCol[32] = "-", ratio[32] = "-";
    if (r.torch > 0) {
      std::snprintf(torchCol, sizeof torchCol, "%.2f", r.torch);
      std::snprintf(ratio, sizeof ratio, "%.3f", r.ratio);
    }
    std::printf("%-5s %-9s %14.2f %14s %10s %8.1f %s\n", r.model.c_str(), r.precision.c_str(),
                r.ours, torchCol, ratio, target, r.ours <= target ? "met" : "missed");
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("\ndeepwire peak RSS %.0f MiB (dataset, both models, sessions)\n",
              static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
}
