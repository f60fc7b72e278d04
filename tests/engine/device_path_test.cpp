// The gpu backend's device code path, run on a CPU engine (BackendOptions::emulateDevice): every
// tensor a oneDNN primitive touches is copied into an engine-allocated buffer and back, exactly
// as on an Intel GPU, so machines without one test the bindings of every oneDNN kernel. Results
// must equal the plain cpu backend's (same primitives on the same CPU, so bit for bit), a second
// run of the same shapes must allocate no device buffer, and the ONNX cases must still match
// their expected outputs.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <regex>
#include <set>

#include "engine/conformance.h"
#include "engine/io.h"
#include "engine/kernel.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "tests/engine/onnx_builder.h"
#include "tests/graph/test_util.h"

using namespace dw::engine;
namespace fs = std::filesystem;

namespace {

SessionOptions deviceOptions() {
  SessionOptions o;
  o.backend.accelerator = "gpu";
  o.backend.emulateDevice = true;
  return o;
}

using test::addNode;

void addAttr(onnx::NodeProto* n, const std::string& name, int64_t i) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(i);
}

// `m` with a scalar output "loss" = ReduceSumSquare(`of`), and its gradient graph w.r.t. the
// initializers `weights` (which it feeds from `given`).
training::GradientGraph gradientGraph(onnx::ModelProto m, const std::string& of,
                                      const std::map<std::string, Tensor>& weights) {
  auto* g = m.mutable_graph();
  addAttr(addNode(g, "ReduceSumSquare", {of}, {"loss"}), "keepdims", 0);
  test::addValue(g->add_output(), "loss", {});
  training::GradientGraphOptions go;
  go.losses = {"loss"};
  for (const auto& [name, t] : weights) {
    test::addInit(g, name, t);
    go.trainable.push_back(name);
  }
  auto gg = training::buildGradientGraph(m, go);
  EXPECT_TRUE(gg.ok()) << gg.message();
  return gg.ok() ? *gg : training::GradientGraph();
}

// Every float of `b` equals `a`'s (NaN where `a` has NaN), or is within `tolerance` of it
// (relative and absolute); other dtypes compare exactly.
void expectSame(const Value& a, const Value& b, const std::string& what, float tolerance = 0) {
  ASSERT_TRUE(a.isTensor() && b.isTensor()) << what;
  const Tensor &x = a.tensor, &y = b.tensor;
  ASSERT_EQ(x.shape(), y.shape()) << what;
  ASSERT_EQ(x.dtype(), y.dtype()) << what;
  if (x.dtype() != DType::kFloat) {
    EXPECT_EQ(compareTensors(x, y), "") << what;
    return;
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    const float p = x.data<float>()[i], q = y.data<float>()[i];
    if (!(p == q || (std::isnan(p) && std::isnan(q)) ||
          std::fabs(p - q) <= tolerance * (1 + std::fabs(p))))
      ++bad;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << x.size() << " elements differ";
}

// Runs `model` on cpu and on the device path, twice each, and checks that the outputs agree,
// that the device path bound tensors (`wantDevice`: a oneDNN kernel ran there) and that its
// second run allocated nothing. Returns the device path's outputs.
std::map<std::string, Value> runBoth(const onnx::ModelProto& model,
                                     const std::map<std::string, Value>& in,
                                     const std::string& what, bool wantDevice = true,
                                     float tolerance = 0) {
  auto cpu = InferenceSession::create(model);
  EXPECT_TRUE(cpu.ok()) << what << ": " << cpu.message();
  auto dev = InferenceSession::create(model, deviceOptions());
  EXPECT_TRUE(dev.ok()) << what << ": " << dev.message();
  if (!cpu.ok() || !dev.ok()) return {};
  EXPECT_EQ((*dev)->backend().name(), "gpu");
  auto expected = (*cpu)->runValues(in);
  EXPECT_TRUE(expected.ok()) << what << ": " << expected.message();
  std::map<std::string, Value> got;
  size_t buffers = 0, pooled = 0;
  for (int run = 0; run < 2; ++run) {
    got.clear();  // the pool reuses the previous run's outputs once they are let go
    auto r = (*dev)->runValues(in);
    EXPECT_TRUE(r.ok()) << what << ": " << r.message();
    if (!r.ok() || !expected.ok()) return {};
    got = std::move(*r);
    if (run == 0) {
      buffers = (*dev)->backend().deviceAllocations();
      pooled = (*dev)->allocationCount();
      if (wantDevice) {
        EXPECT_GT(buffers, 0u) << what << ": no oneDNN kernel ran on the device";
      }
    } else {
      EXPECT_EQ((*dev)->backend().deviceAllocations(), buffers)
          << what << ": the second run allocated device buffers";
      EXPECT_EQ((*dev)->allocationCount(), pooled) << what << ": the second run allocated";
    }
  }
  for (const auto& [name, v] : *expected) {
    auto it = got.find(name);
    EXPECT_NE(it, got.end()) << what << ": output " << name << " missing";
    if (it != got.end()) expectSame(v, it->second, what + " output " + name, tolerance);
  }
  return got;
}

onnx::ModelProto exportExample(const std::string& file, bool withLosses) {
  auto g = dw::loadProject(DW_SOURCE_DIR "/resources/examples/" + file);
  EXPECT_TRUE(g.ok()) << g.status().message();
  dw::ExportOptions eo;
  eo.withLosses = withLosses;
  auto m = dw::exportOnnx(*g, eo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : onnx::ModelProto();
}

// A feed for every graph input of `m` without a value in `given`: floats in [-1, 1), integers
// (class labels) in [0, 10), dynamic dimensions `batch`.
std::map<std::string, Value> feeds(const onnx::ModelProto& m, int64_t batch,
                                   std::map<std::string, Value> given = {}) {
  uint32_t seed = 1;
  for (const auto& in : m.graph().input()) {
    if (given.count(in.name())) continue;
    const IoInfo io = ioInfoFromType(in.name(), in.type());
    Shape s;
    for (int64_t d : io.dims) s.push_back(d < 0 ? batch : d);
    Tensor t;
    if (io.dtype == DType::kFloat) {
      t = test::randomTensor(s, seed++);
    } else {
      EXPECT_EQ(io.dtype, DType::kInt64) << in.name();
      t = Tensor(DType::kInt64, s);
      for (int64_t i = 0; i < t.size(); ++i) t.data<int64_t>()[i] = (i * 7 + 3) % 10;
    }
    given[in.name()] = Value(t);
  }
  return given;
}

}  // namespace

// Issue 3: gpu without a oneDNN GPU engine is an error naming what is available; auto falls
// back to cpu and says so. The emulated device path is for tests and needs accelerator gpu.
TEST(DevicePath, AcceleratorSelection) {
  const DeviceReport d = devices();
  EXPECT_EQ(d.available.front(), "cpu");
  EXPECT_EQ(static_cast<int>(d.available.size()), 1 + d.gpuEngines);
  BackendOptions o;
  std::string notice;
  if (d.gpuEngines == 0) {
    for (const char* acc : {"gpu", "gpu:0", "gpu:1"}) {
      o.accelerator = acc;
      auto g = createBackend(o);
      ASSERT_FALSE(g.ok()) << acc;
      EXPECT_NE(g.message().find("oneDNN found no OpenCL GPU engine"), std::string::npos);
      EXPECT_NE(g.message().find("Available accelerators: cpu"), std::string::npos) << g.message();
    }
    o.accelerator = "auto";
    auto a = createBackend(o, &notice);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_EQ((*a)->name(), "cpu");
    // The device first, the reasons after it.
    EXPECT_EQ(notice.rfind("accelerator auto: running on cpu (", 0), 0u) << notice;
    EXPECT_NE(notice.find("no oneDNN GPU engine found)"), std::string::npos) << notice;
  } else {
    o.accelerator = "auto";
    auto a = createBackend(o, &notice);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_EQ((*a)->name(), "gpu");
    EXPECT_NE(notice.find("running on gpu"), std::string::npos) << notice;
  }
  o.accelerator = "gpu:x";
  EXPECT_NE(createBackend(o).message().find("gpu:N"), std::string::npos);
  o.accelerator = "tpu";
  EXPECT_NE(createBackend(o).message().find("use cpu, gpu, gpu:N or auto"), std::string::npos);
  o.accelerator = "cpu";
  o.emulateDevice = true;
  EXPECT_FALSE(createBackend(o).ok());
  // The emulated device: a gpu backend whose cpu-only kernels have a companion cpu backend.
  o.accelerator = "gpu";
  notice.clear();
  auto e = createBackend(o, &notice);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ((*e)->name(), "gpu");
  EXPECT_EQ((*e)->kernelTable(), kOneDnnTable);
  EXPECT_NE(notice.find("training gradients and single-channel convolutions on cpu"),
            std::string::npos)
      << notice;
  // bf16 is refused on gpu, and auto on a gpu runs it in fp32.
  o.precision = "bf16";
  auto b = createBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("not available on accelerator gpu"), std::string::npos);
}

// The command line: --accelerator takes gpu:N, and a missing GPU is the backend's error.
TEST(DevicePath, CliAccelerator) {
  const std::string cli = DW_CLI_PATH;
  const std::string mlp = DW_SOURCE_DIR "/resources/examples/fashion_mnist_mlp.dwproj";
  std::string out;
  EXPECT_NE(dw::test::runCommand(cli + " run " + mlp + " --accelerator tpu", &out), 0);
  EXPECT_NE(out.find("use cpu, gpu, gpu:N or auto"), std::string::npos) << out;
  ASSERT_EQ(dw::test::runCommand(cli + " devices", &out), 0);
  if (devices().gpuEngines > 0) return;
  EXPECT_NE(out.find("accelerators available: cpu\n"), std::string::npos) << out;
  EXPECT_NE(dw::test::runCommand(cli + " run " + mlp + " --accelerator gpu:1", &out), 0);
  EXPECT_NE(out.find("accelerator 'gpu:1' is not available"), std::string::npos) << out;
  EXPECT_NE(out.find("Available accelerators: cpu"), std::string::npos) << out;
}

// The two example models (inference exports) through the device path.
TEST(DevicePath, ExampleModelsMatchCpu) {
  for (const char* name : {"fashion_mnist_mlp.dwproj", "fashion_mnist_cnn.dwproj"}) {
    const onnx::ModelProto m = exportExample(name, false);
    // At batch 1 the classifier's Gemm runs as row dot products on host memory
    // (onednn/vector_math.h) and as oneDNN's matmul on the device: they round differently.
    for (int64_t batch : {1, 5}) runBoth(m, feeds(m, batch), name, true, batch == 1 ? 1e-6f : 0.0f);
  }
}

// A training step of the CNN example under gpu: forward kernels on the device path, gradient
// kernels (engine/onednn/*_grad.cpp) on the companion cpu engine, all in one graph.
TEST(DevicePath, TrainingGraphMixesDeviceAndCpuKernels) {
  const onnx::ModelProto fwd = exportExample("fashion_mnist_cnn.dwproj", true);
  training::GradientGraphOptions go;
  std::set<std::string> bnStats;
  for (const auto& n : fwd.graph().node())
    if (n.op_type() == "BatchNormalization")
      for (int i = 3; i < std::min(5, n.input_size()); ++i) bnStats.insert(n.input(i));
  std::map<std::string, Value> given;
  for (const auto& t : fwd.graph().initializer()) {
    auto v = tensorFromProto(t);
    ASSERT_TRUE(v.ok()) << v.message();
    given[t.name()] = Value(*v);
    if (t.data_type() == onnx::TensorProto::FLOAT && !bnStats.count(t.name()))
      go.trainable.push_back(t.name());
  }
  for (const auto& o : fwd.graph().output())
    if (o.name().size() > 5 && o.name().substr(o.name().size() - 5) == "_loss")
      go.losses.push_back(o.name());
  ASSERT_FALSE(go.losses.empty());
  auto gg = training::buildGradientGraph(fwd, go);
  ASSERT_TRUE(gg.ok()) << gg.message();
  auto out = runBoth(gg->model, feeds(gg->model, 4, given), "cnn training graph");
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.count(go.trainable.front() + "_grad"));
}

// The backward kernels of eltwise.cpp (UnaryGrad, LayerNormalizationGrad, SoftmaxGrad) run on
// the device path too: the gradient graph of MatMul, Tanh, LayerNormalization, Softmax.
TEST(DevicePath, EltwiseGradientsMatchCpu) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("grads");
  test::addValue(g->add_input(), "X", {4, 6});
  addNode(g, "MatMul", {"X", "W"}, {"h"});
  addNode(g, "Tanh", {"h"}, {"t"});
  addNode(g, "LayerNormalization", {"t", "scale", "bias"}, {"n"});
  addNode(g, "Softmax", {"n"}, {"p"});
  const std::map<std::string, Tensor> weights{{"W", test::randomTensor({6, 6}, 11)},
                                              {"scale", test::randomTensor({6}, 12)},
                                              {"bias", test::randomTensor({6}, 13)}};
  const auto gg = gradientGraph(m, "p", weights);
  std::map<std::string, Value> given;
  for (const auto& [name, t] : weights) given[name] = Value(t);
  // The softmax rounds differently on host memory (onednn/vector_math.h) and on the device.
  auto out = runBoth(gg.model, feeds(gg.model, 1, given), "eltwise gradients", true, 1e-6f);
  EXPECT_TRUE(out.count("W_grad") && out.count("scale_grad") && out.count("bias_grad"));
}

// A bidirectional LSTM (the oneDNN path with directions concatenated through a scratch tensor)
// and GRU with initial state, and their gradients (rnn_grad.cpp, on the companion cpu engine).
TEST(DevicePath, RecurrentMatchesCpu) {
  for (const std::string op : {"LSTM", "GRU"}) {
    // A batch above rnn.cpp's kSmallBatch, which the plain loops take on the cpu backend.
    const int64_t T = 4, B = 17, I = 5, H = 6, D = 2, G = op == "LSTM" ? 4 : 3;
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("rnn");
    auto* n = addNode(g, op, {"X", "W", "R", "B", "", "h0"}, {"Y", "Yh"});
    addAttr(n, "hidden_size", H);
    auto* dir = n->add_attribute();
    dir->set_name("direction");
    dir->set_type(onnx::AttributeProto::STRING);
    dir->set_s("bidirectional");
    test::addValue(g->add_input(), "X", {T, B, I});
    test::addValue(g->add_input(), "h0", {D, B, H});
    test::addValue(g->add_output(), "Y", {T, D, B, H});
    test::addValue(g->add_output(), "Yh", {D, B, H});
    const std::map<std::string, Tensor> weights{{"W", test::randomTensor({D, G * H, I}, 21)},
                                                {"R", test::randomTensor({D, G * H, H}, 22)},
                                                {"B", test::randomTensor({D, 2 * G * H}, 23)}};
    std::map<std::string, Value> given;
    for (const auto& [name, t] : weights) given[name] = Value(t);
    onnx::ModelProto fwd = m;
    for (const auto& [name, t] : weights) test::addInit(fwd.mutable_graph(), name, t);
    runBoth(fwd, feeds(fwd, 1), op + " bidirectional");
    const auto gg = gradientGraph(m, "Y", weights);
    // The loss sums Y: on the cpu in sixteen partial sums (eltwise.cpp's host reduction), on
    // the device by oneDNN's one running sum, so the two round differently.
    auto out = runBoth(gg.model, feeds(gg.model, 1, given), op + " gradients", true, 1e-6f);
    EXPECT_TRUE(out.count("W_grad") && out.count("R_grad") && out.count("B_grad")) << op;
  }
}

// ONNX backend cases covering every oneDNN kernel of kernels.cpp, eltwise.cpp and rnn.cpp: the
// device path equals the cpu backend and still matches the expected outputs.
TEST(DevicePath, OnnxCasesMatchCpuAndExpected) {
  const fs::path data = "/usr/share/libonnx-testdata/data";
  if (!fs::is_directory(data)) GTEST_SKIP() << "no ONNX test data at " << data;
  const std::vector<std::string> cases{"pytorch-converted/test_Conv2d_groups",
                                       "pytorch-converted/test_Conv2d_dilated",
                                       "pytorch-converted/test_Conv2d_depthwise_strided",
                                       "pytorch-converted/test_Conv3d_stride",
                                       "pytorch-converted/test_Conv1d_pad2",
                                       "pytorch-converted/test_Conv2d_strided",
                                       "pytorch-converted/test_Conv2d_padding",
                                       "node/test_convtranspose",
                                       "node/test_convtranspose_dilations",
                                       "node/test_convtranspose_output_shape",
                                       "node/test_convtranspose_3d",
                                       "pytorch-converted/test_ConvTranspose2d",
                                       "node/test_matmul_4d",
                                       "node/test_matmul_2d",
                                       "node/test_gemm_all_attributes",
                                       "node/test_gemm_default_vector_bias",
                                       "node/test_gemm_transposeB",
                                       "node/test_averagepool_2d_pads_count_include_pad",
                                       "node/test_averagepool_3d_default",
                                       "node/test_maxpool_2d_dilations",
                                       "node/test_maxpool_1d_default",
                                       "node/test_globalaveragepool",
                                       "node/test_batchnorm_example",
                                       "pytorch-converted/test_BatchNorm3d_eval",
                                       "node/test_layer_normalization_4d_axis1",
                                       "node/test_layer_normalization_3d_axis_negative_2_epsilon",
                                       "node/test_lrn",
                                       "node/test_relu",
                                       "node/test_elu",
                                       "node/test_sigmoid",
                                       "node/test_tanh",
                                       "node/test_exp",
                                       "node/test_softplus",
                                       "node/test_hardswish",
                                       "node/test_reciprocal",
                                       "node/test_leakyrelu",
                                       "node/test_softmax_axis_1",
                                       "node/test_softmax_large_number",
                                       "node/test_logsoftmax_axis_0",
                                       "node/test_add_bcast",
                                       "node/test_mul_bcast",
                                       "node/test_sub_bcast",
                                       "node/test_div_bcast",
                                       "node/test_reduce_sum_keepdims_random",
                                       "node/test_reduce_mean_do_not_keepdims_random",
                                       "node/test_reduce_max_keepdims_random",
                                       "node/test_reduce_l2_do_not_keepdims_random",
                                       "node/test_reduce_prod_default_axes_keepdims_random",
                                       "node/test_reduce_sum_square_keepdims_random",
                                       "node/test_concat_3d_axis_1",
                                       "node/test_concat_2d_axis_negative_1",
                                       "node/test_resize_upsample_scales_linear",
                                       "node/test_lstm_with_peepholes",
                                       "node/test_lstm_with_initial_bias",
                                       "node/test_gru_with_initial_bias",
                                       "node/test_gru_defaults",
                                       "node/test_simple_rnn_with_initial_bias",
                                       "node/test_prelu_broadcast",
                                       "node/test_prelu_example"};
  for (const auto& c : cases) {
    const fs::path dir = data / c;
    ASSERT_TRUE(fs::exists(dir / "model.onnx")) << dir;
    auto model = loadOnnxModel((dir / "model.onnx").string());
    ASSERT_TRUE(model.ok()) << c << ": " << model.message();
    const auto& g = (*model)->graph();
    std::map<std::string, Value> in;
    for (int k = 0; k < g.input_size(); ++k) {
      const fs::path p = dir / "test_data_set_0" / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(p)) break;
      auto v = readValuePb(p.string(), g.input(k).type());
      ASSERT_TRUE(v.ok()) << c << ": " << v.message();
      in[g.input(k).name()] = *v;
    }
    // Small recurrent batches run the plain loops on the cpu backend and oneDNN's cells on a
    // device (rnn.cpp's kSmallBatch): the two round differently.
    const bool smallRnn = c.find("lstm") != std::string::npos ||
                          c.find("gru") != std::string::npos || c.find("rnn") != std::string::npos;
    // So do softmax on the innermost axis: host memory takes onednn/vector_math.h's rows, the
    // device oneDNN's primitive.
    const bool softmax = c.find("test_softmax") != std::string::npos;
    auto out = runBoth(**model, in, c, true, smallRnn ? 1e-5f : (softmax ? 1e-6f : 0.0f));
    for (int k = 0; k < g.output_size(); ++k) {
      const fs::path p = dir / "test_data_set_0" / ("output_" + std::to_string(k) + ".pb");
      if (!fs::exists(p) || !out.count(g.output(k).name())) continue;
      auto e = readValuePb(p.string(), g.output(k).type());
      ASSERT_TRUE(e.ok()) << c << ": " << e.message();
      EXPECT_EQ(compareValues(*e, out.at(g.output(k).name())), "") << c;
    }
  }
}

// The conformance runner through the device path: every backend test case ends as it does on
// cpu (about a second each way).
TEST(DevicePath, ConformancePassesAsOnCpu) {
  ConformanceOptions o;
  if (!fs::is_directory(o.dataDir)) GTEST_SKIP() << "no ONNX test data at " << o.dataDir;
  const auto cpu = runConformance(o);
  o.accelerator = "gpu";
  o.emulateDevice = true;
  const auto dev = runConformance(o);
  ASSERT_EQ(cpu.size(), dev.size());
  ASSERT_GT(cpu.size(), 1000u);
  // Ops that draw random numbers may land on the expected values by chance in one run only.
  const std::regex random("bernoulli|random|multinomial|dropout", std::regex::icase);
  int passed = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    passed += dev[i].status == CaseStatus::kPassed;
    if (std::regex_search(dev[i].name, random)) continue;
    EXPECT_EQ(caseStatusName(dev[i].status), caseStatusName(cpu[i].status))
        << dev[i].suite << "/" << dev[i].name << ": " << dev[i].reason;
  }
  std::cout << "device path: " << passed << " of " << dev.size() << " cases passed\n";
}
