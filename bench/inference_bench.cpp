// Inference speed of deepwire against PyTorch, in the same run, on the two example models
// (resources/examples/fashion_mnist_{mlp,cnn}.dwproj) at batch 1 and 1000, plus the GFLOP/s of
// a 1024x1024 MatMul through the engine against a bare oneDNN matmul primitive (oneDNN's own
// peak on this machine). Both precisions: fp32, and bf16 mixed precision (bf16 operands, f32
// accumulation; PyTorch under bf16 autocast, the oneDNN peak with bf16 operands and f32 output)
// where the CPU has native bf16.
//
// The projects are exported with the inference export (prediction graph only), PyTorch rebuilds
// the same layers with the weights from that ONNX file (bench/inference_torch.py, run with
// /usr/bin/python3), and checks its output against deepwire's before timing.
//
// Usage: inference_bench [--seconds S] [--threads N] [--no-torch] [--precision fp32|bf16|both]
// --threads sets both deepwire's and PyTorch's thread count (default: all cores).
#include <onnx/onnx_pb.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/io.h"
#include "engine/openmp_wait.h"
#include "engine/session.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"

namespace {

using dw::engine::DType;
using dw::engine::Tensor;
using Clock = std::chrono::steady_clock;

double gSeconds = 1.5;
int gThreads = 0;  // 0: all cores

// Runs f repeatedly (after warm-up) for about gSeconds; returns seconds per call.
double timeIt(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  int runs = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    f();
    ++runs;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < gSeconds || runs < 3);
  return elapsed / runs;
}

Tensor randomTensor(const dw::engine::Shape& shape, uint32_t seed) {
  Tensor t(DType::kFloat, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "inference_bench: %s\n", m.c_str());
  std::exit(1);
}

// Keeps the graph outputs that don't look like losses or metrics and the nodes, inputs and
// initializers they need, in case the export carries a training head.
void keepPrediction(onnx::ModelProto& m) {
  auto* g = m.mutable_graph();
  std::vector<onnx::ValueInfoProto> outs;
  for (const auto& o : g->output())
    if (o.name().find("loss") == std::string::npos &&
        o.name().find("accuracy") == std::string::npos)
      outs.push_back(o);
  if (outs.empty() || static_cast<int>(outs.size()) == g->output_size()) return;
  std::set<std::string> need;
  for (const auto& o : outs) need.insert(o.name());
  std::vector<onnx::NodeProto> kept;
  for (int i = g->node_size(); i-- > 0;) {
    const auto& n = g->node(i);
    bool used = false;
    for (const auto& o : n.output()) used = used || need.count(o);
    if (!used) continue;
    for (const auto& in : n.input()) need.insert(in);
    kept.insert(kept.begin(), n);
  }
  g->clear_node();
  for (auto& n : kept) *g->add_node() = n;
  g->clear_output();
  for (auto& o : outs) *g->add_output() = o;
  std::vector<onnx::ValueInfoProto> ins;
  for (const auto& i : g->input())
    if (need.count(i.name())) ins.push_back(i);
  g->clear_input();
  for (auto& i : ins) *g->add_input() = i;
}

struct ModelResult {
  std::string name, precision;
  std::map<int, double> ours, torch;
  double flopPerSample = 0;
};

// Multiply-add FLOPs per sample of the Gemm/MatMul/Conv nodes, from the shapes shape inference
// left in the exported model (batch dimension excluded).
double flopPerSample(const onnx::ModelProto& m) {
  std::map<std::string, std::vector<int64_t>> dims;
  auto take = [&](const onnx::ValueInfoProto& v) {
    std::vector<int64_t> d;
    for (const auto& x : v.type().tensor_type().shape().dim())
      d.push_back(x.has_dim_value() ? x.dim_value() : 1);
    dims[v.name()] = d;
  };
  for (const auto& v : m.graph().input()) take(v);
  for (const auto& v : m.graph().value_info()) take(v);
  for (const auto& v : m.graph().output()) take(v);
  for (const auto& t : m.graph().initializer())
    dims[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  double flop = 0;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "Gemm" && n.op_type() != "MatMul" && n.op_type() != "Conv") continue;
    const auto& w = dims[n.input(1)];
    const auto& y = dims[n.output(0)];
    if (w.empty() || y.empty()) continue;
    double perOut = 1;  // MACs per output element
    if (n.op_type() == "Conv")
      for (size_t i = 1; i < w.size(); ++i) perOut *= static_cast<double>(w[i]);
    else
      perOut = static_cast<double>(dims[n.input(0)].back());
    double outs = 1;
    for (size_t i = 1; i < y.size(); ++i) outs *= static_cast<double>(y[i]);
    flop += 2 * perOut * outs;
  }
  return flop;
}

ModelResult benchModel(const std::string& name, const std::string& project,
                       const std::string& workDir, bool withTorch, const std::string& precision) {
  auto graph = dw::loadProject(project);
  if (!graph) die(graph.status().message());
  auto model = dw::exportOnnx(*graph);
  if (!model) die(model.status().message());
  keepPrediction(*model);
  const double flop = flopPerSample(*model);
  const std::string onnxPath = workDir + "/" + name + ".onnx";
  {
    std::string bytes;
    model->SerializeToString(&bytes);
    FILE* f = std::fopen(onnxPath.c_str(), "wb");
    if (!f) die("cannot write " + onnxPath);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  dw::engine::SessionOptions options;
  options.backend.threads = gThreads;
  options.backend.precision = precision;
  auto session = dw::engine::InferenceSession::create(*model, options);
  if (!session) die(session.status().message());
  auto& s = **session;
  if (s.inputs().size() != 1) die(name + ": expected one graph input, got\n" + s.describeInputs());
  const auto& in = s.inputs()[0];
  ModelResult r{name, precision, {}, {}, flop};
  for (int batch : {1, 1000}) {
    // Under DEEPWIRE_PROFILE the session's report (printed when it ends) covers batch 1000 only.
    if (std::getenv("DEEPWIRE_PROFILE")) s.setProfiling(true);
    dw::engine::Shape shape(in.dims.begin(), in.dims.end());
    shape[0] = batch;
    for (auto& d : shape)
      if (d < 0) die(name + ": input has a dynamic dimension other than the batch");
    Tensor x = randomTensor(shape, 7);
    std::map<std::string, Tensor> feed{{in.name, x}};
    if (batch == 1000) {
      // Reference for PyTorch's correctness check.
      auto out = s.run(feed);
      if (!out) die(out.status().message());
      Tensor small = x.reshaped(shape);
      (void)small;
      for (const auto& [file, t] : {std::pair{"_x.npy", x}, {"_y.npy", out->begin()->second}})
        if (auto st = dw::engine::writeNpy(workDir + "/" + name + file, t); !st.ok())
          die(st.message());
    }
    const double sec = timeIt([&] {
      auto out = s.run(feed);
      if (!out) die(out.status().message());
    });
    r.ours[batch] = batch / sec;
  }
  if (withTorch) {
    const std::string cmd =
        "DW_BENCH_THREADS=" + std::to_string(gThreads) + " DW_BENCH_PRECISION=" + precision +
        " /usr/bin/python3 " + std::string(DW_SOURCE_DIR) + "/bench/inference_torch.py " +
        onnxPath + " " + workDir + "/" + name + "_x.npy " + workDir + "/" + name + "_y.npy 1 1000";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) die("cannot run " + cmd);
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
      int batch = 0;
      double sps = 0, diff = 0;
      if (std::sscanf(line, "{\"batch\": %d, \"samples_per_s\": %lf}", &batch, &sps) == 2)
        r.torch[batch] = sps;
      else if (std::sscanf(line, "{\"max_abs_diff_vs_deepwire\": %lf", &diff) == 1)
        std::printf("  %s %s: PyTorch vs deepwire max |diff| = %.3g\n", name.c_str(),
                    precision.c_str(), diff);
    }
    if (pclose(p) != 0) std::printf("  %s: the PyTorch script failed (see stderr)\n", name.c_str());
  }
  return r;
}

// 1024^2 MatMul: through an InferenceSession, and as a bare oneDNN matmul primitive (under bf16:
// bf16 operands in the layout oneDNN prefers, converted outside the timing, f32 output).
// Returns oneDNN's GFLOP/s.
double benchMatmul(const std::string& precision) {
  const int64_t n = 1024;
  const double flop = 2.0 * n * n * n;
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("matmul");
  for (const char* nm : {"A", "B"}) {
    auto* i = g->add_input();
    i->set_name(nm);
    auto* tt = i->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(n);
    tt->mutable_shape()->add_dim()->set_dim_value(n);
  }
  auto* node = g->add_node();
  node->set_op_type("MatMul");
  node->add_input("A");
  node->add_input("B");
  node->add_output("C");
  g->add_output()->set_name("C");
  dw::engine::SessionOptions options;
  options.backend.threads = gThreads;
  options.backend.precision = precision;
  auto session = dw::engine::InferenceSession::create(m, options);
  if (!session) die(session.status().message());
  Tensor a = randomTensor({n, n}, 1), b = randomTensor({n, n}, 2);
  const double ours = timeIt([&] {
    auto out = (*session)->run({{"A", a}, {"B", b}});
    if (!out) die(out.status().message());
  });

  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  memory::desc md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  const bool bf16 = precision == "bf16";
  const auto ot = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const auto layout = bf16 ? memory::format_tag::any : memory::format_tag::ab;
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(memory::desc({n, n}, ot, layout), memory::desc({n, n}, ot, layout), md),
      eng);
  dnnl::matmul prim(pd);
  Tensor c(DType::kFloat, {n, n});
  memory ua(md, eng, a.raw()), ub(md, eng, b.raw()), mc(md, eng, c.raw());
  memory ma = ua, mb = ub;
  if (pd.src_desc() != md) {
    ma = memory(pd.src_desc(), eng);
    dnnl::reorder(ua, ma).execute(strm, ua, ma);
  }
  if (pd.weights_desc() != md) {
    mb = memory(pd.weights_desc(), eng);
    dnnl::reorder(ub, mb).execute(strm, ub, mb);
  }
  strm.wait();
  const double peak = timeIt([&] {
    prim.execute(strm, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    strm.wait();
  });
  std::printf("\nMatMul 1024x1024x1024 %s (oneDNN: %s)\n", precision.c_str(), pd.impl_info_str());
  std::printf("  deepwire session      %8.1f GFLOP/s\n", flop / ours * 1e-9);
  std::printf("  oneDNN matmul (peak)  %8.1f GFLOP/s\n", flop / peak * 1e-9);
  std::printf("  deepwire / oneDNN     %8.2f\n", peak / ours);
  return flop / peak * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  dw::useShortOpenMpSpin(argv);  // what deepwire's programs run with
  bool withTorch = true;
  std::string precision = "both", models = "both";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc)
      gSeconds = std::atof(argv[++i]);
    else if (a == "--threads" && i + 1 < argc)
      gThreads = std::atoi(argv[++i]);
    else if (a == "--no-torch")
      withTorch = false;
    else if (a == "--precision" && i + 1 < argc)
      precision = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      models = argv[++i];
    else
      die("usage: inference_bench [--seconds S] [--threads N] [--no-torch] "
          "[--precision fp32|bf16|both] [--model mlp|cnn|both]");
  }
  const std::string workDir =
      (std::filesystem::temp_directory_path() / "deepwire_inference_bench").string();
  std::filesystem::create_directories(workDir);
  const std::string ex = std::string(DW_SOURCE_DIR) + "/resources/examples/";
  const auto dev = dw::engine::devices();
  std::printf("deepwire inference bench (%s, %s, %d threads, native bf16: %s)\n",
              dev.cpuModel.c_str(), dev.cpuIsa.c_str(), gThreads > 0 ? gThreads : dev.cpuCores,
              dev.bf16Native.empty() ? "none" : dev.bf16Native.c_str());
  std::vector<std::string> precisions;
  if (precision == "fp32" || precision == "both") precisions.push_back("fp32");
  if ((precision == "bf16" || precision == "both") && !dev.bf16Native.empty())
    precisions.push_back("bf16");
  if (precision == "bf16" && dev.bf16Native.empty()) die("no native bf16 on this CPU");
  if (precisions.empty()) die("--precision takes fp32, bf16 or both");
  if (models != "mlp" && models != "cnn" && models != "both") die("--model takes mlp, cnn or both");
  std::vector<ModelResult> results;
  std::map<std::string, double> peaks;
  for (const auto& p : precisions) {
    for (const char* m : {"mlp", "cnn"})
      if (models == m || models == "both")
        results.push_back(
            benchModel(m, ex + "fashion_mnist_" + m + ".dwproj", workDir, withTorch, p));
    peaks[p] = benchMatmul(p);
  }
  std::printf("\n%-6s %-5s %6s %13s %13s %8s %10s %8s %7s\n", "model", "prec", "batch",
              "deepwire/s", "pytorch/s", "ratio", "GFLOP/s", "of peak", "target");
  for (const auto& r : results) {
    for (const auto& [batch, ours] : r.ours) {
      const double gf = ours * r.flopPerSample * 1e-9;
      const double peak = peaks[r.precision];
      std::string target = "";
      if (batch == 1000) {
        const double want = r.name == "mlp" ? 200000 : 15000;
        target = ours >= want ? "met" : "missed";
      }
      auto t = r.torch.find(batch);
      if (t == r.torch.end())
        std::printf("%-6s %-5s %6d %13.0f %13s %8s %10.1f %7.0f%% %7s\n", r.name.c_str(),
                    r.precision.c_str(), batch, ours, "-", "-", gf, 100 * gf / peak,
                    target.c_str());
      else
        std::printf("%-6s %-5s %6d %13.0f %13.0f %8.2f %10.1f %7.0f%% %7s\n", r.name.c_str(),
                    r.precision.c_str(), batch, ours, t->second, ours / t->second, gf,
                    100 * gf / peak, target.c_str());
    }
  }
  std::printf(
      "targets at batch 1000: mlp >= 200000/s, cnn >= 15000/s; PyTorch bf16 is autocast; "
      "\"of peak\" compares the model's multiply-add GFLOP/s with oneDNN's 1024^2 matmul of the "
      "same precision in this run\n");
  return 0;
}
