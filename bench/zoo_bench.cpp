// One side of bench/zoo/run: times one model through deepwire's InferenceSession the way
// bench/zoo/ort_run.js times it through ONNX Runtime, so the driver can alternate the two.
//
// Usage: zoo_bench MODEL.onnx INPUT.npy --threads N --runs R [--warmup W] [--out OUT.npy]
//        [--accelerator cpu|cuda|...] [--precision fp32|bf16|tf32]
// Prints one line of JSON: {"create_ms": ..., "runs_ms": [...], "off_accelerator": [...]} (the
// session's creation, each timed run after W untimed ones, host to host, and the op types of the
// nodes that did not run on the accelerator asked for); --out writes the first output.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/io.h"
#include "engine/openmp_wait.h"
#include "engine/session.h"

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int fail(const std::string& what) {
  std::fprintf(stderr, "zoo_bench: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  dw::useShortOpenMpSpin(argv);  // what deepwire's programs run with
  if (argc < 3)
    return fail(
        "usage: zoo_bench MODEL.onnx INPUT.npy --threads N --runs R [--warmup W] [--out OUT.npy]");
  const std::string modelPath = argv[1], inputPath = argv[2];
  int threads = 0, runs = 10, warmup = 3;
  std::string out, accelerator = "cpu", precision = "fp32";
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (a == "--warmup")
      warmup = std::atoi(argv[i + 1]);
    else if (a == "--out")
      out = argv[i + 1];
    else if (a == "--accelerator")
      accelerator = argv[i + 1];
    else if (a == "--precision")
      precision = argv[i + 1];
    else
      return fail("unknown option " + a);
  }
  auto model = dw::engine::loadOnnxModel(modelPath);
  if (!model) return fail(model.message());
  auto x = dw::engine::readNpy(inputPath);
  if (!x) return fail(x.message());
  dw::engine::SessionOptions opt;
  opt.backend.threads = threads;
  opt.backend.accelerator = accelerator;
  opt.backend.precision = precision;
  const auto t0 = Clock::now();
  auto s = dw::engine::InferenceSession::create(**model, opt);
  if (!s) return fail(s.message());
  const double createMs = msSince(t0);
  const std::string inName = (*s)->inputs().at(0).name;
  std::vector<double> times;
  for (int r = 0; r < warmup + runs; ++r) {
    const auto t = Clock::now();
    auto y = (*s)->run({{inName, *x}});
    const double ms = msSince(t);
    if (!y) return fail(y.message());
    if (r >= warmup) times.push_back(ms);
    if (r == 0 && !out.empty()) {
      if (auto st = dw::engine::writeNpy(out, y->begin()->second); !st.ok())
        return fail(st.message());
    }
  }
  std::printf("{\"create_ms\": %.3f, \"runs_ms\": [", createMs);
  for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.4f", i ? ", " : "", times[i]);
  std::printf("], \"off_accelerator\": [");
  // placement() names nodes; count the op types of those placed elsewhere.
  std::map<std::string, int> off;
  std::map<std::string, std::string> types;
  for (const auto& n : (**model).graph().node())
    types[n.name().empty() ? (n.output_size() ? n.output(0) : "") : n.name()] = n.op_type();
  const std::string asked = accelerator.substr(0, accelerator.find(':'));
  for (const auto& [node, backend] : (*s)->placement())
    if (backend != asked) ++off[types.count(node) ? types[node] : node];
  bool first = true;
  for (const auto& [type, count] : off) {
    std::printf("%s\"%s x%d\"", first ? "" : ", ", type.c_str(), count);
    first = false;
  }
  std::printf("]}\n");
  return 0;
}
