#include "engine/conformance.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>

#include "engine/io.h"
#include "engine/session.h"

namespace dw::engine {

namespace fs = std::filesystem;

const char* caseStatusName(CaseStatus s) {
  switch (s) {
    case CaseStatus::kPassed:
      return "passed";
    case CaseStatus::kFailed:
      return "failed";
    case CaseStatus::kUnsupported:
      return "unsupported";
    case CaseStatus::kError:
      return "error";
  }
  return "error";
}

std::string compareTensors(const Tensor& e, const Tensor& a) {
  if (e.dtype() != a.dtype())
    return std::string("dtype ") + dtypeName(a.dtype()) + ", expected " + dtypeName(e.dtype());
  if (e.shape() != a.shape())
    return "shape " + shapeToString(a.shape()) + ", expected " + shapeToString(e.shape());
  const int64_t n = e.size();
  if (e.dtype() == DType::kString) {
    for (int64_t i = 0; i < n; ++i)
      if (e.strings()[i] != a.strings()[i])
        return "string mismatch at index " + std::to_string(i) + ": '" + a.strings()[i] +
               "', expected '" + e.strings()[i] + "'";
    return "";
  }
  if (isFloating(e.dtype())) {
    double maxErr = 0;
    int64_t worst = -1;
    for (int64_t i = 0; i < n; ++i) {
      const double x = e.getDouble(i), y = a.getDouble(i);
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) != std::isnan(y)) {
          return "NaN mismatch at index " + std::to_string(i) + ": got " + std::to_string(y) +
                 ", expected " + std::to_string(x);
        }
        continue;
      }
      if (x == y) continue;  // also covers equal infinities
      const double err = std::fabs(x - y);
      if (!(err <= 1e-3 + 1e-3 * std::fabs(x)) && (worst < 0 || err > maxErr || std::isnan(err))) {
        maxErr = err;
        worst = i;
      }
    }
    if (worst >= 0) {
      std::ostringstream os;
      os << "max error " << maxErr << " at index " << worst << " (got " << a.getDouble(worst)
         << ", expected " << e.getDouble(worst) << ")";
      return os.str();
    }
    return "";
  }
  const size_t bytes = e.bytes();
  if (bytes && std::memcmp(e.raw(), a.raw(), bytes) != 0) {
    for (int64_t i = 0; i < n; ++i)
      if (e.getInt(i) != a.getInt(i))
        return "value mismatch at index " + std::to_string(i) + ": got " +
               std::to_string(a.getInt(i)) + ", expected " + std::to_string(e.getInt(i));
    return "value mismatch";
  }
  return "";
}

std::string compareValues(const Value& e, const Value& a) {
  if (e.kind != a.kind) {
    auto k = [](const Value& v) {
      return v.isNone() ? "none" : (v.isTensor() ? "tensor" : "sequence");
    };
    return std::string("got a ") + k(a) + ", expected a " + k(e);
  }
  if (e.isTensor()) return compareTensors(e.tensor, a.tensor);
  if (e.isSequence()) {
    if (e.sequence.size() != a.sequence.size())
      return "sequence length " + std::to_string(a.sequence.size()) + ", expected " +
             std::to_string(e.sequence.size());
    for (size_t i = 0; i < e.sequence.size(); ++i) {
      auto r = compareTensors(e.sequence[i], a.sequence[i]);
      if (!r.empty()) return "sequence element " + std::to_string(i) + ": " + r;
    }
  }
  return "";
}

namespace {

// The ONNX 1.12 test data stores bfloat16 tensors as uint16; view them as declared.
void fixBf16(Value& v, const onnx::TypeProto& type) {
  if (v.isTensor() && type.has_tensor_type() &&
      dtypeFromOnnx(type.tensor_type().elem_type()) == DType::kBFloat16 &&
      v.tensor.dtype() == DType::kUInt16)
    v.tensor = v.tensor.reinterpretAs(DType::kBFloat16);
}

CaseResult runCaseImpl(const fs::path& dir, const std::string& suite,
                       const BackendOptions& backend) {
  CaseResult r;
  r.suite = suite;
  r.name = dir.filename().string();
  auto model = loadOnnxModel((dir / "model.onnx").string());
  if (!model) {
    r.status = CaseStatus::kError;
    r.reason = model.message();
    return r;
  }
  SessionOptions opts;
  opts.backend = backend;
  auto session = InferenceSession::create(**model, opts);
  if (!session) {
    const std::string& m = session.message();
    r.status = m.rfind("unsupported op", 0) == 0 ? CaseStatus::kUnsupported : CaseStatus::kError;
    r.reason = m;
    return r;
  }
  const auto& g = (*model)->graph();
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) {
    r.status = CaseStatus::kError;
    r.reason = "no test_data_set_* directories";
    return r;
  }
  for (const auto& set : sets) {
    std::map<std::string, Value> inputs;
    for (int k = 0; k < g.input_size(); ++k) {
      fs::path p = set / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(p)) break;
      auto v = readValuePb(p.string(), g.input(k).type());
      if (!v) {
        r.status = CaseStatus::kError;
        r.reason = v.message();
        return r;
      }
      fixBf16(*v, g.input(k).type());
      inputs[g.input(k).name()] = std::move(*v);
    }
    auto out = (*session)->runValues(inputs);
    if (!out) {
      r.status = CaseStatus::kError;
      r.reason = out.message();
      return r;
    }
    for (int k = 0; k < g.output_size(); ++k) {
      fs::path p = set / ("output_" + std::to_string(k) + ".pb");
      if (!fs::exists(p)) continue;
      auto expected = readValuePb(p.string(), g.output(k).type());
      if (!expected) {
        r.status = CaseStatus::kError;
        r.reason = expected.message();
        return r;
      }
      fixBf16(*expected, g.output(k).type());
      auto it = out->find(g.output(k).name());
      if (it == out->end()) {
        r.status = CaseStatus::kFailed;
        r.reason = "output '" + g.output(k).name() + "' missing";
        return r;
      }
      std::string diff = compareValues(*expected, it->second);
      if (!diff.empty()) {
        r.status = CaseStatus::kFailed;
        r.reason = "output '" + g.output(k).name() + "' (" + set.filename().string() + "): " + diff;
        return r;
      }
    }
  }
  r.status = CaseStatus::kPassed;
  return r;
}

}  // namespace

CaseResult runConformanceCase(const std::string& caseDir, const std::string& suite,
                              const BackendOptions& backend) {
  try {
    return runCaseImpl(caseDir, suite, backend);
  } catch (const std::exception& e) {
    CaseResult r;
    r.suite = suite;
    r.name = fs::path(caseDir).filename().string();
    r.status = CaseStatus::kError;
    r.reason = std::string("exception: ") + e.what();
    return r;
  }
}

std::vector<CaseResult> runConformance(const ConformanceOptions& o) {
  std::vector<std::pair<std::string, fs::path>> cases;
  std::regex re;
  const bool filtered = !o.filter.empty();
  if (filtered) re = std::regex(o.filter);
  for (const auto& suite : o.suites) {
    fs::path sd = fs::path(o.dataDir) / suite;
    if (!fs::is_directory(sd)) continue;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(sd))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      if (filtered && !std::regex_search(suite + "/" + d.filename().string(), re)) continue;
      cases.emplace_back(suite, d);
    }
  }
  BackendOptions backend;
  backend.threads = o.threads;
  backend.accelerator = o.accelerator;
  backend.emulateDevice = o.emulateDevice;
  std::vector<CaseResult> results;
  results.reserve(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    if (o.progress)
      o.progress(i, cases.size(), cases[i].first + "/" + cases[i].second.filename().string());
    results.push_back(runConformanceCase(cases[i].second.string(), cases[i].first, backend));
  }
  if (o.progress) o.progress(cases.size(), cases.size(), "");
  return results;
}

std::vector<SuiteSummary> summarize(const std::vector<CaseResult>& results,
                                    const std::vector<std::string>& suites) {
  std::vector<SuiteSummary> out;
  for (const auto& s : suites) {
    SuiteSummary sum;
    sum.suite = s;
    for (const auto& r : results) {
      if (r.suite != s) continue;
      ++sum.total;
      switch (r.status) {
        case CaseStatus::kPassed:
          ++sum.passed;
          break;
        case CaseStatus::kFailed:
          ++sum.failed;
          break;
        case CaseStatus::kUnsupported:
          ++sum.unsupported;
          break;
        case CaseStatus::kError:
          ++sum.errors;
          break;
      }
    }
    out.push_back(sum);
  }
  return out;
}

}  // namespace dw::engine
