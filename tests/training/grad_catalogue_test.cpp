// The catalogue's com.deepwire.grad entries (nodes/grad_domain.cpp) against the engine:
// - every kernel registered in a private domain has a catalogue entry, and every grad-domain
//   entry a kernel, so a new backward kernel cannot ship without its entry;
// - training exports of the example MLP and CNN pass `deepwire check`'s checks, import,
//   validate, and export again to the same nodes, and the re-export computes the same step
//   (losses, gradients, updated weights and optimizer state) bit for bit;
// - the same through the command line (`deepwire check`, `import`, `export`).
// The per-op gradient cases (gradcheck_test.cpp) also pass every gradient graph through
// catalogueAccepts, which covers the grad ops these two models do not use.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "engine/kernel.h"
#include "engine/session.h"
#include "engine/training/autodiff.h"
#include "engine/training/trainer.h"
#include "grad_catalogue_util.h"
#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"
#include "nodes/catalogue.h"

namespace dw::engine::training {
namespace {

namespace fs = std::filesystem;

TEST(GradCatalogue, EveryPrivateDomainKernelHasACatalogueEntry) {
  EXPECT_STREQ(dw::kGradDomain, kGradDomain);  // the catalogue and autodiff spell it alike
  std::set<std::pair<std::string, std::string>> kernels;
  for (const KernelDef* d : KernelRegistry::global().all())
    if (!d->domain.empty() && d->domain != kOnnxDomain) kernels.insert({d->domain, d->op});
  ASSERT_GE(kernels.size(), 20u);  // the grad ops and the optimizers
  for (const auto& [domain, op] : kernels) {
    const NodeSpec* s = Catalogue::instance().find(domain, op);
    ASSERT_NE(s, nullptr) << domain << "::" << op
                          << " has a kernel but no catalogue entry (declare it in "
                             "nodes/grad_domain.cpp)";
    EXPECT_EQ(s->kind, NodeKind::Op) << op;
    if (domain != kGradDomain) continue;
    EXPECT_EQ(s->category, "training internals") << op;
    EXPECT_FALSE(s->doc.empty()) << op;
    for (const auto* ports : {&s->inputs, &s->outputs})
      for (const auto& p : *ports) EXPECT_FALSE(p.doc.empty()) << op << "." << p.name;
    for (const auto& p : s->params) EXPECT_FALSE(p.doc.empty()) << op << "." << p.name;
  }
  for (const NodeSpec* s : Catalogue::instance().all()) {
    if (s->domain == kGradDomain)
      EXPECT_TRUE(kernels.count({s->domain, s->type})) << s->type << " has no kernel";
  }
}

// Attributes a gradient builder copies from the forward node are typed from the forward op's
// schema; where forward ops disagree on a default, there is none.
TEST(GradCatalogue, MirroredAttributesComeFromTheForwardSchemas) {
  const NodeSpec* pool = Catalogue::instance().find(kGradDomain, "PoolGrad");
  ASSERT_NE(pool, nullptr);
  for (const char* name : {"op", "kernel_shape", "strides", "pads", "auto_pad", "ceil_mode",
                           "dilations", "storage_order", "count_include_pad"})
    EXPECT_NE(pool->param(name), nullptr) << name;
  EXPECT_TRUE(pool->param("op")->required);
  EXPECT_FALSE(pool->param("kernel_shape")->required);  // the Global forms have none
  const NodeSpec* unary = Catalogue::instance().find(kGradDomain, "UnaryGrad");
  ASSERT_NE(unary, nullptr);
  ASSERT_NE(unary->param("alpha"), nullptr);
  EXPECT_FALSE(unary->param("alpha")->defaultValue.has_value());  // 0.01 LeakyRelu, 1 Elu, ...
  EXPECT_NE(unary->param("alpha")->doc.find("LeakyRelu 0.01"), std::string::npos);
  ASSERT_NE(unary->param("gamma"), nullptr);
  EXPECT_FLOAT_EQ(static_cast<float>(unary->param("gamma")->defaultValue->asFloat()),
                  1.05070102214813232421875f);
  const auto& ops = unary->param("op")->allowedValues;
  EXPECT_NE(std::find(ops.begin(), ops.end(), "Clip"), ops.end());
  const NodeSpec* bn = Catalogue::instance().find(kGradDomain, "BatchNormalizationTraining");
  ASSERT_NE(bn, nullptr);
  EXPECT_FLOAT_EQ(static_cast<float>(bn->param("momentum")->defaultValue->asFloat()), 0.9f);
  EXPECT_EQ(bn->outputs.size(), 5u);
}

// ---- Training exports of the examples ----------------------------------------------------------

// The examples' data inputs: image float[N,1,28,28] and label int64[N].
Batch randomBatch(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> image(n * 28 * 28);
  for (auto& v : image) v = nd(rng);
  std::vector<int64_t> label(n);
  for (auto& v : label) v = static_cast<int64_t>(rng() % 10);
  Batch b;
  b.inputs["image"] = Tensor::fromVector(image, {n, 1, 28, 28});
  b.inputs["label"] = Tensor::fromVector(label, {n});
  b.size = n;
  return b;
}

// What `deepwire train PROJECT --max-steps 2 --export-training-onnx` writes, on random batches;
// `optimizer` replaces the project's.
onnx::ModelProto trainingExport(const std::string& project,
                                const std::optional<OptimizerConfig>& optimizer = std::nullopt) {
  auto g = loadProject(std::string(DW_SOURCE_DIR) + "/resources/examples/" + project);
  EXPECT_TRUE(g.ok()) << g.message();
  if (!g.ok()) return {};
  auto cfg = trainingConfigFromGraph(*g);
  EXPECT_TRUE(cfg.ok()) << cfg.message();
  TrainOptions o;
  o.optimizer = optimizer ? *optimizer : cfg->optimizer;
  o.seed = cfg->seed;
  o.threads = 1;
  auto t = Trainer::create(*g, o);
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return {};
  for (uint32_t step = 0; step < 2; ++step) {
    auto r = (*t)->fullTrainStep(randomBatch(4, step));
    EXPECT_TRUE(r.ok()) << r.message();
  }
  auto m = (*t)->exportTraining();
  EXPECT_TRUE(m.ok()) << m.message();
  return m.ok() ? *m : onnx::ModelProto();
}

// A node as text: domain, op, inputs, outputs and attributes (sorted by name).
std::map<std::string, std::string> nodesByName(const onnx::GraphProto& g) {
  std::map<std::string, std::string> out;
  for (const auto& n : g.node()) {
    std::string s = canonicalDomain(n.domain()) + "::" + n.op_type() + " (";
    for (const auto& i : n.input()) s += i + ",";
    s += ") -> (";
    for (const auto& o : n.output()) s += o + ",";
    s += ")";
    std::map<std::string, std::string> attrs;
    for (const auto& a : n.attribute()) attrs[a.name()] = a.DebugString();
    for (const auto& [name, text] : attrs) s += "\n  " + text;
    out[n.name()] = s;
  }
  return out;
}

std::vector<std::string> sortedNames(
    const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& v) {
  std::vector<std::string> out;
  for (const auto& vi : v) out.push_back(vi.name());
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, Tensor> runOnce(const onnx::ModelProto& m, const Batch& batch) {
  SessionOptions so;
  so.backend.threads = 1;
  auto s = InferenceSession::create(m, so);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  auto r = (*s)->run(batch.inputs);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::map<std::string, Tensor>();
}

void checkRoundTrip(const std::string& project,
                    const std::optional<OptimizerConfig>& optimizer = std::nullopt) {
  const onnx::ModelProto original = trainingExport(project, optimizer);
  ASSERT_GT(original.graph().node_size(), 0);
  int gradNodes = 0;
  for (const auto& n : original.graph().node()) gradNodes += n.domain() == kGradDomain;
  EXPECT_GT(gradNodes, 0);

  // `deepwire check FILE.onnx`: the ONNX checker with strict shape inference, then the import.
  Status st = checkOnnxModel(original, CheckLevel::Full);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(test::catalogueAccepts(original, project + " training export"));

  // `deepwire import` then `deepwire export`: the same nodes, inputs and outputs.
  auto g = importOnnx(original, project + " training export");
  ASSERT_TRUE(g.ok()) << g.message();
  auto again = exportOnnx(*g);
  ASSERT_TRUE(again.ok()) << again.message();
  const auto want = nodesByName(original.graph()), got = nodesByName(again->graph());
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [name, text] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "node '" << name << "' is missing from the re-export";
      continue;
    }
    EXPECT_EQ(it->second, text) << name;
  }
  EXPECT_EQ(sortedNames(again->graph().input()), sortedNames(original.graph().input()));
  EXPECT_EQ(sortedNames(again->graph().output()), sortedNames(original.graph().output()));

  // One training step of each computes the same losses, gradients, weights and optimizer state.
  const Batch batch = randomBatch(4, 7);
  const auto a = runOnce(original, batch), b = runOnce(*again, batch);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    ASSERT_EQ(it->second.dtype(), t.dtype()) << name;
    ASSERT_EQ(it->second.shape(), t.shape()) << name;
    int64_t differ = 0;
    for (int64_t i = 0; i < t.size(); ++i) differ += it->second.getDouble(i) != t.getDouble(i);
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << t.size() << " values differ";
  }
}

TEST(GradCatalogue, MlpTrainingExportChecksImportsAndRoundTrips) {
  checkRoundTrip("fashion_mnist_mlp.dwproj");
}

TEST(GradCatalogue, CnnTrainingExportChecksImportsAndRoundTrips) {
  checkRoundTrip("fashion_mnist_cnn.dwproj");
}

// The optimizers' update nodes (Momentum, Adagrad, plain ops for RMSprop, AdamW's decay).
TEST(GradCatalogue, TrainingExportRoundTripsWithEveryOptimizer) {
  std::vector<OptimizerConfig> configs(4);
  configs[0].type = "sgd";
  configs[0].momentum = 0.9;
  configs[0].nesterov = true;
  configs[0].weightDecay = 1e-4;
  configs[1].type = "adagrad";
  configs[2].type = "rmsprop";
  configs[3].type = "adamw";
  configs[3].weightDecay = 0.01;
  for (const auto& c : configs) {
    SCOPED_TRACE(c.type);
    checkRoundTrip("fashion_mnist_mlp.dwproj", c);
  }
}

// ---- The command line ----------------------------------------------------------------------

std::string cliPath() {
  // The build tree puts the CLI at app/cli/deepwire, two levels above tests/training/.
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path cli = self.parent_path() / ".." / ".." / "app" / "cli" / "deepwire";
  return !ec && fs::exists(cli) ? fs::canonical(cli).string() : "";
}

int run(const std::string& cmd, std::string* out) {
  FILE* p = popen(("OMP_WAIT_POLICY=passive " + cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(GradCatalogueCli, TrainingExportChecksImportsAndExports) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
  const std::string cli = cliPath();
  ASSERT_FALSE(cli.empty()) << "build the deepwire target first";
  const fs::path dir =
      fs::temp_directory_path() / ("dw_grad_catalogue_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string onnxPath = (dir / "t.onnx").string(), proj = (dir / "t.dwproj").string(),
                    again = (dir / "t2.onnx").string();
  std::string out;
  ASSERT_EQ(run(cli + " train " + DW_SOURCE_DIR +
                    "/resources/examples/fashion_mnist_mlp.dwproj --epochs 1 --max-steps 2 "
                    "--train-limit 256 --threads 1 --quiet --export-training-onnx " +
                    onnxPath,
                &out),
            0)
      << out;
  EXPECT_EQ(run(cli + " check " + onnxPath, &out), 0) << out;
  EXPECT_NE(out.find(onnxPath + ": valid"), std::string::npos) << out;
  ASSERT_EQ(run(cli + " import " + onnxPath + " -o " + proj, &out), 0) << out;
  EXPECT_EQ(run(cli + " check " + proj, &out), 0) << out;
  EXPECT_EQ(run(cli + " export " + proj + " -o " + again, &out), 0) << out;
  EXPECT_EQ(run(cli + " check " + again, &out), 0) << out;
  // The catalogue pages of the grad ops, as the studio's panels show them.
  EXPECT_EQ(run(cli + " describe ReduceGrad --domain com.deepwire.grad", &out), 0) << out;
  EXPECT_NE(out.find("training internals"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dw::engine::training
