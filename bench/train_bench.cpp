// Training speed of deepwire against PyTorch, in the same run: the example Fashion-MNIST MLP and
// CNN (resources/examples/fashion_mnist_{mlp,cnn}.dwproj), Adam lr 1e-3, batch 64, shuffled,
// a fixed thread count (default 2) on both sides. PyTorch runs bench/train_torch.py with
// /usr/bin/python3 on the same architecture.
//
// Prints per model: seconds per epoch (deepwire measured over --steps steps, or a whole epoch
// with --steps 0, and extrapolated to the 938 steps of an epoch), PyTorch's, their ratio, and a
// breakdown of a step: waiting for data, the training-graph run (kernels + executor), the
// optimizer update and the trainer's own bookkeeping; in both precisions (fp32, and bf16 mixed
// precision where the CPU has native bf16), PyTorch in fp32 and under bf16 autocast. A summary
// table ends the run with the targets (MLP <= 1.0 s/epoch, CNN <= 12 s/epoch). Peak RSS
// at the end.
//
// Usage: train_bench [--model mlp|cnn|both] [--steps N] [--threads T] [--no-torch]
//                    [--precision fp32|bf16|both]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/training/trainer.h"
#include "graphs/project.h"

#ifndef DW_SOURCE_DIR
#define DW_SOURCE_DIR "."  // bench/CMakeLists.txt passes the source tree
#endif

namespace {

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
  double perStep = 0, dataWait = 0, train = 0, optim = 0, other = 0;
  double perEpoch = 0;
  int64_t steps = 0;
};

Figures benchDeepwire(const std::string& project, int64_t steps, int threads,
                      const std::string& precision) {
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
  auto t = Trainer::create(*g, o);
  if (!t) die(t.message());
  Trainer& tr = **t;
  LoaderOptions lo;
  lo.batchSize = 64;
  lo.seed = 1;
  BatchLoader loader(data, lo);
  const int64_t perEpoch = loader.batchesPerEpoch();
  if (steps <= 0 || steps > perEpoch) steps = perEpoch;
  loader.startEpoch(0);
  // Warm-up: plans, primitive caches and pooled buffers settle in the first steps.
  for (int i = 0; i < 5; ++i) {
    auto b = loader.next();
    if (!b) die("dataset too small");
    auto r = tr.fullTrainStep(*b);
    if (!r) die(r.message());
  }
  loader.startEpoch(1);
  Figures f;
  const auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    auto t0 = Clock::now();
    auto b = loader.next();
    if (!b) break;
    auto t1 = Clock::now();
    auto r = tr.trainStep(*b);
    if (!r) die(r.message());
    auto t2 = Clock::now();
    auto st = tr.optimizerStep();
    if (!st.ok()) die(st.message());
    auto t3 = Clock::now();
    tr.resetGrad();
    auto t4 = Clock::now();
    f.dataWait += std::chrono::duration<double>(t1 - t0).count();
    f.train += std::chrono::duration<double>(t2 - t1).count();
    f.optim += std::chrono::duration<double>(t3 - t2).count();
    f.other += std::chrono::duration<double>(t4 - t3).count();
    ++f.steps;
  }
  const double total = since(start);
  f.perStep = total / static_cast<double>(f.steps);
  f.dataWait /= static_cast<double>(f.steps);
  f.train /= static_cast<double>(f.steps);
  f.optim /= static_cast<double>(f.steps);
  f.other /= static_cast<double>(f.steps);
  f.perEpoch = f.perStep * static_cast<double>(perEpoch);
  return f;
}

// Runs the PyTorch side and returns its seconds per epoch (0 when unavailable).
double benchTorch(const std::string& root, const std::string& model, int64_t steps, int threads,
                  const std::string& precision, double* rssMib) {
  const std::string cmd = "/usr/bin/python3 " + root + "/bench/train_torch.py " + model + " " +
                          std::to_string(steps) + " " + std::to_string(threads) + " " + precision;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  if (pclose(p) != 0) {
    std::fprintf(stderr, "train_bench: PyTorch side failed: %s\n", out.c_str());
    return 0;
  }
  double epoch = 0;
  if (auto pos = out.find("\"seconds_per_epoch\": "); pos != std::string::npos)
    epoch = std::atof(out.c_str() + pos + 21);
  if (auto pos = out.find("\"peak_rss_mib\": "); pos != std::string::npos && rssMib)
    *rssMib = std::atof(out.c_str() + pos + 16);
  return epoch;
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "both";
  int64_t steps = 300;
  int threads = 2;
  bool torch = true;
  std::string precision = "both";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc)
      which = argv[++i];
    else if (a == "--steps" && i + 1 < argc)
      steps = std::atoll(argv[++i]);
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--no-torch")
      torch = false;
    else if (a == "--precision" && i + 1 < argc)
      precision = argv[++i];
    else
      die("usage: train_bench [--model mlp|cnn|both] [--steps N] [--threads T] [--no-torch] "
          "[--precision fp32|bf16|both]");
  }
  const std::string root = DW_SOURCE_DIR;
  std::vector<std::string> models, precisions;
  if (which == "mlp" || which == "both") models.push_back("mlp");
  if (which == "cnn" || which == "both") models.push_back("cnn");
  if (precision == "fp32" || precision == "both") precisions.push_back("fp32");
  if (precision == "bf16" || precision == "both") {
    if (dw::engine::devices().bf16Native.empty())
      std::printf("precision bf16: no native bf16 on this CPU, not measured\n");
    else
      precisions.push_back("bf16");
  }
  if (models.empty() || precisions.empty()) die("nothing to measure");
  std::printf(
      "training benchmark: Adam lr 1e-3, batch 64, %d threads, Fashion-MNIST (938 steps/epoch)\n",
      threads);
  struct Row {
    std::string model, precision;
    double ours = 0, torch = 0;
  };
  std::vector<Row> rows;
  for (const auto& m : models) {
    const std::string project = root + "/resources/examples/fashion_mnist_" + m + ".dwproj";
    for (const auto& p : precisions) {
      Figures f = benchDeepwire(project, steps, threads, p);
      std::printf("\n%s %s: deepwire %.3f s/epoch (%.2f ms/step over %lld steps)\n", m.c_str(),
                  p.c_str(), f.perEpoch, f.perStep * 1e3, static_cast<long long>(f.steps));
      std::printf(
          "  per step: data wait %.3f ms, training graph %.3f ms, optimizer %.3f ms, "
          "reset/bookkeeping %.3f ms\n",
          f.dataWait * 1e3, f.train * 1e3, f.optim * 1e3, f.other * 1e3);
      std::printf("  outside the training graph: %.3f ms/step (%.1f%% of the step)\n",
                  (f.perStep - f.train) * 1e3, 100.0 * (f.perStep - f.train) / f.perStep);
      Row row{m, p, f.perEpoch, 0};
      if (torch) {
        double rss = 0;
        // PyTorch's CNN takes ~0.1 s a step here (~1 s under bf16 autocast): time fewer steps
        // and extrapolate.
        const int64_t torchSteps = m == "cnn" ? (p == "bf16" ? 10 : 60) : 300;
        row.torch = benchTorch(root, m, torchSteps, threads, p, &rss);
        if (row.torch > 0)
          std::printf(
              "  PyTorch (%s) %.3f s/epoch (%lld steps timed, peak RSS %.0f MiB); "
              "deepwire/PyTorch time ratio %.3f (%.1fx faster)\n",
              p == "bf16" ? "bf16 autocast" : "fp32", row.torch, static_cast<long long>(torchSteps),
              rss, f.perEpoch / row.torch, row.torch / f.perEpoch);
      }
      rows.push_back(row);
    }
  }
  std::printf("\n%-5s %-9s %14s %14s %10s %12s\n", "model", "precision", "deepwire s/ep",
              "PyTorch s/ep", "dw/torch", "target s/ep");
  for (const auto& r : rows) {
    const double target = r.model == "mlp" ? 1.0 : 12.0;
    char torchCol[32] = "-", ratio[32] = "-";
    if (r.torch > 0) {
      std::snprintf(torchCol, sizeof torchCol, "%.2f", r.torch);
      std::snprintf(ratio, sizeof ratio, "%.3f", r.ours / r.torch);
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
