#include "fuzz/targets.h"

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/io.h"
#include "engine/session.h"
#include "engine/training/data.h"
#include "engine/training/image_folder.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"

namespace dw::fuzz {

namespace {

namespace fs = std::filesystem;
using engine::DType;
using engine::Tensor;
using engine::Value;

// The readers under test take paths, as users give them: each input goes through a file in a
// per-process folder (in memory where /dev/shm exists).
const fs::path& scratchDir() {
  static const fs::path dir = [] {
    std::error_code ec;
    fs::path base =
        fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("deepwire-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d, ec);
    return d;
  }();
  return dir;
}

std::string writeInput(const uint8_t* data, size_t size, const std::string& name) {
  const fs::path p = scratchDir() / name;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p.string();
}

// DW_FUZZ_VERBOSE=1 prints how far each input got, to see what a seed or a finding reaches.
template <class R>
const R& note(const char* step, const R& r) {
  static const bool verbose = std::getenv("DW_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "  %s: %s\n", step, r.ok() ? "ok" : r.message().c_str());
  return r;
}

// An invariant the code promises broke: report it as a crash so the fuzzer keeps the input.
[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A project that was saved must load again, and say the same thing when saved once more:
// otherwise a user's save loses their work.
void checkRoundTrip(const Graph& g, const std::string& origin) {
  const std::string text = projectToJsonText(g);
  auto again = projectFromJsonText(text, "<saved " + origin + ">");
  if (!again.ok()) broken("a saved project does not load: " + again.message());
  if (projectToJsonText(*again) != text) broken("a saved project changes when loaded and saved");
}

// `deepwire check MODEL.onnx`.
int onnxCheck(const uint8_t* data, size_t size) {
  const std::string path = writeInput(data, size, "model.onnx");
  auto m = note("read", readOnnxFile(path));
  if (!m.ok()) return 0;
  note("check", checkOnnxModel(*m, CheckLevel::Full));
  note("import", importOnnx(*m, path));
  return 0;
}

// `deepwire import MODEL.onnx -o P.dwproj`, then what the studio does with the project.
int onnxImport(const uint8_t* data, size_t size) {
  const std::string path = writeInput(data, size, "model.onnx");
  auto m = note("read", readOnnxFile(path));
  if (!m.ok()) return 0;
  auto g = note("import", importOnnx(*m, path));
  if (!g.ok()) return 0;
  checkRoundTrip(*g, "import");
  (void)g->validate();
  note("export", exportOnnx(*g));
  return 0;
}

// Inputs for a model's declared graph inputs: small values (valid as indices for most
// gathers), unknown dims as 1, and nothing at all for inputs too large to be worth making.
bool makeInputs(const engine::InferenceSession& s, std::map<std::string, Value>& inputs) {
  for (const auto& in : s.inputs()) {
    if (in.hasDefault) continue;
    if (in.kind != "tensor" || in.dtype == DType::kUndefined) return false;
    engine::Shape shape;
    int64_t n = 1;
    for (int64_t d : in.dims) {
      const int64_t v = d < 0 ? 1 : d;
      if (v > (1 << 16) || n * std::max<int64_t>(v, 1) > (1 << 16)) return false;
      n *= v;
      shape.push_back(v);
    }
    if (in.dtype == DType::kString) {
      inputs[in.name] = Value(Tensor::fromStrings(std::vector<std::string>(n, "a"), shape));
      continue;
    }
    Tensor t(DType::kDouble, shape);
    auto* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>(i % 3);
    auto c = t.cast(in.dtype);
    if (!c.ok()) return false;
    inputs[in.name] = Value(std::move(*c));
  }
  return true;
}

// `deepwire run MODEL.onnx` on generated inputs, under a memory limit.
int onnxRun(const uint8_t* data, size_t size) {
  const std::string path = writeInput(data, size, "model.onnx");
  auto m = note("read", readOnnxFile(path));
  if (!m.ok()) return 0;
  engine::SessionOptions opts;
  opts.backend.threads = 1;
  opts.memoryLimitBytes = size_t(256) << 20;
  // The default 2^20 iterations take longer than the fuzzer's timeout under the sanitizers.
  opts.maxLoopIterations = 1 << 12;
  auto s = engine::InferenceSession::create(*m, opts);
  note("plan", s);
  if (!s.ok()) return 0;
  std::map<std::string, Value> inputs;
  if (!makeInputs(**s, inputs)) return 0;
  note("run", (*s)->runValues(inputs));
  return 0;
}

// `deepwire check P.dwproj` and `deepwire export`: load, validate, lower to ONNX.
int project(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto g = note("load", projectFromJsonText(text, "<fuzz>"));
  if (!g.ok()) return 0;
  checkRoundTrip(*g, "project");
  if (!g->validate().empty()) return 0;
  auto m = note("export", exportOnnx(*g));
  if (!m.ok()) return 0;
  note("training lowering", checkTrainingLowering(*g));
  return 0;
}

// The dataset and tensor readers of `deepwire train` and `run --input`, and the studio's data
// panel (header only). The first byte picks the reader and its options; the rest is the file.
int dataReaders(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  ++data;
  --size;
  namespace tr = engine::training;
  switch (sel % 5) {
    case 0: {
      const std::string p = writeInput(data, size, sel & 0x80 ? "data.idx.gz" : "data.idx");
      (void)tr::readIdxHeader(p);
      (void)tr::readIdx(p);
      break;
    }
    case 1: {
      const std::string p = writeInput(data, size, "data.csv");
      tr::CsvOptions o;
      o.header = sel & 0x08;
      o.delimiter = sel & 0x10 ? ';' : ',';
      if (sel & 0x20) o.labelColumn = o.header && (sel & 0x40) ? "label" : "0";
      if (sel & 0x80) o.maxRows = 3;
      (void)tr::readCsvHeader(p, o);
      (void)tr::readCsv(p, o);
      break;
    }
    case 2: {
      const std::string p = writeInput(data, size, "data.npy");
      (void)tr::readNpyHeader(p);
      (void)tr::readNpy(p);
      (void)engine::readTensorFile(p);
      break;
    }
    case 3: {
      const std::string p = writeInput(data, size, "tensor.pb");
      (void)engine::readTensorFile(p);
      break;
    }
    case 4: {
      // A .pb for an input declared as a sequence or an optional.
      const std::string p = writeInput(data, size, "value.pb");
      onnx::TypeProto type;
      auto* elem = sel & 0x08 ? type.mutable_optional_type()->mutable_elem_type()
                              : type.mutable_sequence_type()->mutable_elem_type();
      elem->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
      (void)engine::readValuePb(p, type);
      break;
    }
  }
  return 0;
}

// An image folder with one image: the header-only inspection the data panel does, then the
// decode (and resize) that training does. The first byte picks the format and the options.
int image(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  ++data;
  --size;
  const fs::path dir = scratchDir() / "images";
  std::error_code ec;
  fs::remove_all(dir, ec);
  writeInput(data, size, sel & 1 ? "images/a/x.jpg" : "images/a/x.png");
  namespace tr = engine::training;
  (void)tr::inspectImageFolder(dir.string());
  tr::ImageFolderOptions o;
  o.channels = (sel >> 1) % 4 == 3 ? 0 : (sel >> 1) % 4 == 2 ? 3 : 1;
  if (sel & 0x10) o.height = o.width = 1 + (sel >> 5);
  (void)tr::readImageFolder(dir.string(), o);
  return 0;
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"onnx_check", &onnxCheck, ".onnx"},   {"onnx_run", &onnxRun, ".onnx"},
      {"onnx_import", &onnxImport, ".onnx"}, {"project", &project, ".dwproj"},
      {"data_readers", &dataReaders, ""},    {"image", &image, ""},
  };
  return all;
}

const Target* findTarget(const std::string& name) {
  for (const auto& t : targets())
    if (name == t.name) return &t;
  return nullptr;
}

void initialize() {
  // Before oneDNN or OpenMP start: one thread, and workers that sleep between kernels.
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("OMP_WAIT_POLICY", "passive", 0);
  scratchDir();
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(scratchDir(), ec);
  });
}

}  // namespace dw::fuzz
