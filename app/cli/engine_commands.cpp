// Engine subcommands: run (inference), devices, conformance (ONNX backend test suite).
#include <onnx/onnx_pb.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "app/cli/cli_util.h"
#include "app/cli/commands.h"
#include "engine/backend.h"
#include "engine/conformance.h"
#include "engine/io.h"
#include "engine/session.h"
#include "engine/training/data.h"
#include "engine/training/data_source.h"
#include "engine/training/image_folder.h"
#include "graphs/file_io.h"
#include "nodes/catalogue.h"

namespace dw::cli {

namespace {

namespace fs = std::filesystem;
using namespace dw::engine;

// The single place that turns a path (.onnx or .dwproj) into a model: a project runs as
// `deepwire export` writes it, so both take the same input files.
Result<onnx::ModelProto> modelFromPath(const std::string& path, bool withoutConversion) {
  if (isProjectFile(path)) return projectAsOnnx(path, ExportOptions{}, withoutConversion);
  return dw::loadAsOnnx(path);
}

std::string firstValues(const Tensor& t, int64_t limit = 8) {
  std::ostringstream os;
  os << "[";
  const int64_t n = std::min<int64_t>(t.size(), limit);
  for (int64_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    if (t.dtype() == DType::kString)
      os << '"' << t.strings()[i] << '"';
    else if (isFloating(t.dtype()) && std::isnan(t.getDouble(i)))
      os << "nan";  // not "-nan": a NaN's sign bit means nothing to a reader
    else if (isFloating(t.dtype()))
      os << std::setprecision(6) << t.getDouble(i);
    else if (t.dtype() == DType::kBool)
      os << (t.getInt(i) ? "true" : "false");
    else
      os << t.getInt(i);
  }
  if (t.size() > limit) os << ", ...";
  os << "]";
  return os.str();
}

std::string safeFileName(const std::string& name) {
  std::string s;
  for (char c : name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return s.empty() ? "output" : s;
}

bool isImageFile(const std::string& file) {
  std::string ext = fs::path(file).extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// An image for input `in`: [N, C, H, W] or [C, H, W] with C 1 or 3, or grey [N, H, W] or
// [H, W] (as MNIST-style data is stored). Decoded, resized to the input's H and W where they are
// static, as uint8 or as float values 0-255 (the model's own scaling, if it expects one, is not
// applied: `note` says so).
Result<Tensor> readImageInput(const std::string& file, const IoInfo& in, std::string& note) {
  const auto& d = in.dims;
  const size_t rank = in.hasShape ? d.size() : 0;
  const bool chw = rank == 4 || (rank == 3 && (d[0] == 1 || d[0] == 3));
  const int64_t c = chw ? d[rank - 3] : 1;
  if (rank < 2 || rank > 4 || (chw && c != 1 && c != 3))
    return Status::error(file + ": an image needs a model input of [N, C, H, W] or [C, H, W] " +
                         "with C 1 or 3, or grey [N, H, W] or [H, W]; " + in.describe() +
                         " is none of these; convert the image to .npy in the layout it takes");
  if (in.dtype != DType::kUInt8 && in.dtype != DType::kFloat)
    return Status::error(file + ": " + in.describe() +
                         " takes neither uint8 nor float32 pixels; convert the image to .npy");
  training::ImageFolderOptions o;
  o.channels = c;
  if (d[rank - 2] > 0 && d[rank - 1] > 0) {
    o.height = d[rank - 2];
    o.width = d[rank - 1];
  }
  auto img = training::readImage(file, o);
  if (!img) return img.status();
  Shape shape = img->shape();                                            // [C, H, W]
  if (!chw) shape.erase(shape.begin());                                  // grey: [H, W]
  if (rank == 4 || (rank == 3 && !chw)) shape.insert(shape.begin(), 1);  // one sample
  Tensor t = img->reshaped(shape);
  if (in.dtype == DType::kUInt8) return t;
  note = in.name + ": " + fs::path(file).filename().string() +
         " as float32 pixel values 0 to 255; any scaling or normalization the model expects "
         "of its input is not applied (an export with its project's data conversion takes the "
         "image as stored)";
  return t.cast(DType::kFloat);
}

// CSV rows as samples: every column a feature (a header line is skipped), reshaped to the
// input's per-sample shape where its size matches, in the input's dtype.
Result<Tensor> readCsvInput(const std::string& file, const IoInfo& in) {
  auto csv = training::readCsv(file);
  if (!csv) return csv.status();
  Tensor t = std::move(csv->features);
  const int64_t rows = t.dim(0), cols = t.dim(1);
  if (in.hasShape && in.dims.size() >= 2) {
    int64_t per = 1;
    for (size_t k = 1; k < in.dims.size() && per > 0; ++k)
      per = in.dims[k] > 0 ? per * in.dims[k] : -1;
    if (per > 0 && per != cols)
      return Status::error(file + ": " + std::to_string(cols) + " columns a row, but " +
                           in.describe() + " takes " + std::to_string(per) +
                           " values a sample; give one sample per row");
    if (per == cols) {
      Shape shape(in.dims.begin(), in.dims.end());
      shape[0] = rows;
      t = t.reshaped(shape);
    }
  } else if (in.hasShape && in.dims.size() == 1) {
    t = t.reshaped({rows * cols});
  }
  if (in.dtype != DType::kUndefined && in.dtype != DType::kFloat) return t.cast(in.dtype);
  return t;
}

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::string outputDir;
  std::string accelerator = "cpu";
  std::string precision = "fp32";
  int threads = 0;
  bool noDataConversion = false;
};

int runCommand(const RunArgs& a) {
  // An .onnx holds its conversion as nodes like any other: the flag would do nothing, silently.
  if (a.noDataConversion && !isProjectFile(a.model))
    return fail(a.model +
                ": --no-data-conversion applies to a project, whose Data panel conversion run "
                "adds; in an .onnx file it is part of the model (export the project with "
                "--no-data-conversion for a model without it)");
  auto model = modelFromPath(a.model, a.noDataConversion);
  if (!model) return fail(model.message());
  SessionOptions opts;
  opts.backend.accelerator = a.accelerator;
  opts.backend.threads = a.threads;
  opts.backend.precision = a.precision;
  auto session = InferenceSession::create(*model, opts);
  if (!session) return fail(session.message());
  if (!(*session)->notice().empty()) std::cerr << "deepwire: " << (*session)->notice() << "\n";
  std::map<std::string, Value> inputs;
  // A model of one input takes a bare FILE as well (also one whose path has an '=' in it).
  std::vector<std::string> required;
  for (const auto& i : (*session)->inputs())
    if (!i.hasDefault) required.push_back(i.name);
  for (const auto& spec : a.inputs) {
    const auto eq = spec.find('=');
    const bool hasName = eq != std::string::npos && eq > 0;
    const std::string prefix = hasName ? spec.substr(0, eq) : std::string();
    const bool named =
        hasName && std::any_of((*session)->inputs().begin(), (*session)->inputs().end(),
                               [&](const IoInfo& i) { return i.name == prefix; });
    const bool bare =
        !named && required.size() == 1 && (eq == std::string::npos || fs::exists(spec));
    if (!named && !bare && !hasName) {
      std::string names;
      for (const auto& i : (*session)->inputs()) names += (names.empty() ? "" : ", ") + i.name;
      return fail(
          "--input expects NAME=FILE (the model's inputs: " + names + "), got '" + spec + "'", 2);
    }
    // Otherwise a NAME= the model lacks is said by the session, with the names it has.
    const std::string name = bare ? required[0] : prefix;
    const std::string file = bare ? spec : spec.substr(eq + 1);
    if (file.empty())
      return fail("--input " + name + "= names no file; write " + name +
                      "=FILE (.npy, .pb, "
                      "an IDX file, an image or a CSV file)",
                  2);
    if (fs::is_directory(file))
      return fail("--input " + name + ": '" + file + "' is a directory; give a file in it", 2);
    if (inputs.count(name))
      return fail("--input " + name + " is given twice; give each input once", 2);
    // A .pb for a sequence, optional or sparse input holds a SequenceProto, OptionalProto or
    // SparseTensorProto (as the ONNX backend tests store them), read by the input's declared
    // type.
    const onnx::TypeProto* declared = nullptr;
    for (const auto& in : model->graph().input())
      if (in.name() == name) declared = &in.type();
    if (declared &&
        (declared->has_sequence_type() || declared->has_optional_type() ||
         declared->has_sparse_tensor_type()) &&
        file.size() >= 3 && file.compare(file.size() - 3, 3, ".pb") == 0) {
      auto v = readValuePb(file, *declared);
      if (!v) return fail(v.message());
      inputs[name] = std::move(*v);
      continue;
    }
    // MNIST-style IDX files too, whole, in their stored dtype: what an export made with its data
    // conversion takes (raw pixels, converted inside the model).
    // Images and CSV rows too, fitted to the input's type (the session checks the rest).
    const IoInfo* info = nullptr;
    for (const auto& i : (*session)->inputs())
      if (i.name == name) info = &i;
    auto format = training::detectFormat(file);
    std::string note;
    auto t = format.ok() && *format == "idx"           ? training::readIdx(file)
             : info && isImageFile(file)               ? readImageInput(file, *info, note)
             : info && format.ok() && *format == "csv" ? readCsvInput(file, *info)
                                                       : readTensorFile(file);
    if (!t) return fail(t.message());
    if (!note.empty()) std::cerr << "deepwire: " << note << "\n";
    inputs[name] = Value(std::move(*t));
  }
  // Two inputs that name one dimension alike (N) must agree on it: the run failed deep in the
  // model, at the first node that met both ("shapes cannot be broadcast together").
  std::map<std::string, std::pair<std::string, int64_t>> sizeOf;  // dim name -> input, size
  for (const auto& in : model->graph().input()) {
    auto it = inputs.find(in.name());
    if (it == inputs.end() || !it->second.isTensor() || !in.type().has_tensor_type()) continue;
    const Tensor& t = it->second.tensor;
    const auto& dims = in.type().tensor_type().shape().dim();
    for (int d = 0; d < dims.size() && d < static_cast<int>(t.rank()); ++d) {
      if (dims[d].dim_param().empty()) continue;
      auto [seen, fresh] = sizeOf.emplace(dims[d].dim_param(), std::make_pair(in.name(), t.dim(d)));
      if (!fresh && seen->second.second != t.dim(d))
        return fail("inputs '" + seen->second.first + "' and '" + in.name() +
                    "' share the dimension " + dims[d].dim_param() + " but have " +
                    std::to_string(seen->second.second) + " and " + std::to_string(t.dim(d)) +
                    " along it: give them the same number (of samples, for a batch)");
    }
  }
  // A project's model starts with its data conversion and takes the data as stored: data that
  // is already converted (floats where it takes bytes) is what --no-data-conversion is for. The
  // dtype's own advice, a cast to uint8, would turn 0-1 floats into black images.
  if (isProjectFile(a.model) && !a.noDataConversion)
    for (const auto& info : (*session)->inputs()) {
      auto it = inputs.find(info.name);
      if (it == inputs.end() || !it->second.isTensor()) continue;
      const DType given = it->second.tensor.dtype();
      if (isFloating(given) && info.dtype != DType::kUndefined && !isFloating(info.dtype))
        return fail("input '" + info.name + "' has " + dtypeName(given) +
                    " values, but this project's model starts with its data conversion and "
                    "takes the data as stored (" +
                    info.describe() +
                    "): give it the stored data, or run with --no-data-conversion to give it "
                    "data already converted");
    }
  auto out = (*session)->runValues(inputs);
  if (!out) return fail(out.message());
  if (!a.outputDir.empty()) {
    std::error_code ec;
    fs::create_directories(a.outputDir, ec);
    if (ec) return fail("cannot create output directory '" + a.outputDir + "': " + ec.message(), 2);
  }
  for (const auto& info : (*session)->outputs()) {
    const Value& v = out->at(info.name);
    auto write = [&](const Tensor& t, const std::string& fileStem) -> int {
      std::cout << fileStem << ": " << dtypeName(t.dtype()) << shapeToString(t.shape()) << " "
                << firstValues(t) << "\n";
      // A declared shape the result does not have is the model's mistake, or a sign that the
      // inputs are not what it was made for: say so, the numbers stand.
      bool differs = info.hasShape && info.dims.size() != t.rank();
      for (size_t d = 0; !differs && info.hasShape && d < info.dims.size(); ++d)
        differs = info.dims[d] >= 0 && info.dims[d] != t.dim(d);
      if (differs && fileStem == info.name)
        std::cerr << "deepwire: warning: output '" << info.name << "' has shape "
                  << shapeToString(t.shape()) << ", but the model declares " << info.describe()
                  << "\n";
      if (a.outputDir.empty()) return 0;
      const std::string path = (fs::path(a.outputDir) / (safeFileName(fileStem) + ".npy")).string();
      auto st = writeNpy(path, t);
      if (!st.ok()) return fail(st.message(), 2);
      // The file's name is the output's, made safe for a file system ("onnx::Slice_10" ->
      // onnx__Slice_10.npy): say where it went.
      if (safeFileName(fileStem) != fileStem) std::cout << "  written to " << path << "\n";
      return 0;
    };
    if (v.isTensor()) {
      if (int rc = write(v.tensor, info.name)) return rc;
    } else if (v.isSequence()) {
      std::cout << info.name << ": sequence of " << v.sequence.size() << " tensors\n";
      for (size_t i = 0; i < v.sequence.size(); ++i)
        if (int rc = write(v.sequence[i], info.name + "_" + std::to_string(i))) return rc;
    } else {
      std::cout << info.name << ": (empty optional)\n";
    }
  }
  return 0;
}

int devicesCommand() {
  DeviceReport r = devices();
  std::cout << "cpu: " << r.cpuModel << "\n"
            << "  cores: " << r.cpuCores << "\n"
            << "  oneDNN " << r.onednnVersion << " ISA: " << r.cpuIsa << "\n"
            << "gpu engines (oneDNN OpenCL, Intel GPUs): " << r.gpuEngines << "\n";
  for (const auto& g : r.gpuNames) std::cout << "  OpenCL GPU: " << g << "\n";
  if (r.gpuNames.empty()) std::cout << "  no OpenCL GPU devices\n";
  if (r.gpuEngines > 0)
    std::cout << "  accelerator gpu (fp32) runs the oneDNN kernels there; training gradients and "
                 "single-channel convolutions stay on the cpu\n";
  std::cout << "NVIDIA GPUs (accelerator cuda): " << r.cudaDevices.size() << "\n";
  for (const auto& g : r.cudaDevices) std::cout << "  " << g << "\n";
  if (!r.cudaLibraries.empty()) std::cout << "  " << r.cudaLibraries << "\n";
  if (!r.cudaUnavailable.empty()) std::cout << "  not available: " << r.cudaUnavailable << "\n";
  std::cout << "accelerators available:";
  for (const auto& s : r.available) std::cout << " " << s;
  std::cout << "\n";
  if (r.bf16Native.empty())
    std::cout << "precision bf16: not available (no native bf16 on this CPU: it needs AVX512-BF16 "
                 "or AMX); fp32 only\n";
  else
    std::cout << "precision bf16: native ("
              << (r.bf16Native == "amx" ? "AMX tiles" : "AVX512-BF16 dot products")
              << "); fp32 is the default\n";
  return 0;
}

struct ConformanceArgs {
  std::vector<std::string> suites;
  std::string filter;
  std::string data = "/usr/share/libonnx-testdata/data";
  bool json = false;
  int threads = 1;
  std::string accelerator = "cpu";
};

int conformanceCommand(const ConformanceArgs& a) {
  ConformanceOptions o;
  o.dataDir = a.data;
  if (!a.suites.empty()) o.suites = a.suites;
  o.filter = a.filter;
  o.threads = a.threads;
  o.accelerator = a.accelerator;
  BackendOptions probe;
  probe.accelerator = a.accelerator;
  if (auto b = createBackend(probe); !b) return fail(b.message(), 2);
  if (!fs::is_directory(o.dataDir))
    return fail("data directory '" + o.dataDir + "' does not exist", 2);
  try {
    std::regex check(o.filter);
  } catch (const std::regex_error& e) {
    return fail("--filter is not a valid regular expression: " + std::string(e.what()), 2);
  }
  const bool tty = isatty(2);
  o.progress = [&](size_t i, size_t n, const std::string& name) {
    if (!tty && i != n) return;
    const int width = 30;
    const int filled = n ? static_cast<int>(width * i / n) : width;
    std::cerr << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << i
              << "/" << n << " " << std::left << std::setw(50) << name.substr(0, 50) << std::flush;
    if (i == n) std::cerr << "\n";
  };
  auto results = runConformance(o);
  auto sums = summarize(results, o.suites);
  if (a.json) {
    nlohmann::json j;
    j["suites"] = nlohmann::json::object();
    for (const auto& s : sums)
      j["suites"][s.suite] = {{"total", s.total},
                              {"passed", s.passed},
                              {"failed", s.failed + s.errors},
                              {"unsupported", s.unsupported}};
    j["cases"] = nlohmann::json::array();
    for (const auto& r : results)
      j["cases"].push_back({{"name", r.name},
                            {"suite", r.suite},
                            {"status", caseStatusName(r.status)},
                            {"reason", r.reason}});
    std::cout << jsonText(j, 2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(20) << "suite" << std::right << std::setw(8) << "total"
            << std::setw(8) << "passed" << std::setw(8) << "failed" << std::setw(13)
            << "unsupported"
            << "\n";
  for (const auto& s : sums)
    std::cout << std::left << std::setw(20) << s.suite << std::right << std::setw(8) << s.total
              << std::setw(8) << s.passed << std::setw(8) << s.failed + s.errors << std::setw(13)
              << s.unsupported << "\n";
  bool header = false;
  for (const auto& r : results) {
    if (r.status == CaseStatus::kPassed) continue;
    if (!header) {
      std::cout << "\nnot passing (failed counts errors too):\n";
      header = true;
    }
    std::cout << "  " << r.suite << "/" << r.name << " [" << caseStatusName(r.status) << "] "
              << r.reason << "\n";
  }
  return 0;
}

}  // namespace

void registerEngineCommands(CLI::App& app, int& exitCode) {
  auto run = std::make_shared<RunArgs>();
  CLI::App* r = app.add_subcommand("run", "Run a model (.onnx or .dwproj) on input tensors");
  r->add_option("MODEL", run->model, "Model file")->required();
  r->add_option("--input", run->inputs,
                "NAME=FILE input (.npy, .pb, a PNG or JPEG image for a [N,C,H,W] input, CSV "
                "rows as samples, or an MNIST-style IDX file such as "
                "t10k-images-idx3-ubyte.gz); repeat per input. A model of one input takes "
                "FILE alone");
  r->add_option("--output-dir", run->outputDir,
                "Write each output as NAME.npy here (characters a file name cannot hold become "
                "_, and the run says so)");
  r->add_option("--accelerator", run->accelerator, "cpu, cuda, cuda:N, gpu, gpu:N or auto")
      ->check(checkAccelerator);
  r->add_option("--threads", run->threads, "CPU threads (0: all cores)")->check(atLeast(0));
  r->add_flag("--no-data-conversion", run->noDataConversion,
              "A project: run its model without the data conversion in front of the inputs "
              "(the inputs then take the converted data), as export --no-data-conversion");
  r->add_option("--precision", run->precision,
                "fp32; bf16: convolutions and matmuls read bf16 inputs and accumulate in float32 "
                "(CPUs with native bf16, NVIDIA GPUs of compute capability 8.0+; see `deepwire "
                "devices`); tf32: the same on cuda's tensor cores in TF32")
      ->check(CLI::IsMember(dw::precisionNames()));
  r->callback([run, &exitCode] { exitCode = runCommand(*run); });

  CLI::App* d = app.add_subcommand("devices", "List compute devices and the ISA oneDNN uses");
  d->callback([&exitCode] { exitCode = devicesCommand(); });

  auto conf = std::make_shared<ConformanceArgs>();
  CLI::App* c = app.add_subcommand("conformance", "Run the ONNX backend test suites");
  c->add_option("--suite", conf->suites,
                "Suites: node, simple, pytorch-converted, pytorch-operator; ort-contrib (ONNX "
                "Runtime's com.microsoft operators) and ort-onnx (ai.onnx operators after opset "
                "17, against ONNX Runtime), ref-contrib (com.microsoft operators ONNX Runtime "
                "runs only on GPUs, against float64 references), torch-opset23 (an opset-23 "
                "transformer block against torch): --data tests/golden of the source tree")
      ->delimiter(',')
      ->check(CLI::IsMember({"node", "simple", "pytorch-converted", "pytorch-operator",
                             "ort-contrib", "ort-onnx", "ref-contrib", "torch-opset23"}));
  c->add_option("--filter", conf->filter, "Regex over suite/case names");
  c->add_option("--data", conf->data, "Test data directory");
  c->add_option("--threads", conf->threads, "CPU threads per case")->check(positive());
  c->add_option("--accelerator", conf->accelerator,
                "Where the cases run: cpu, cuda, cuda:N, gpu, gpu:N or auto")
      ->check(checkAccelerator);
  c->add_flag("--json", conf->json, "Print results as JSON");
  c->callback([conf, &exitCode] { exitCode = conformanceCommand(*conf); });
}

}  // namespace dw::cli
