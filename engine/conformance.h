// Runs the ONNX backend test cases (model.onnx + test_data_set_N/{input,output}_K.pb) and
// compares results with onnxruntime's rule: floats pass when |e - a| <= 1e-3 + 1e-3 * |e|,
// everything else must match exactly, and NaN matches only NaN.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"

namespace dw::engine {

enum class CaseStatus { kPassed, kFailed, kUnsupported, kError };
const char* caseStatusName(CaseStatus s);

struct CaseResult {
  std::string suite;
  std::string name;
  CaseStatus status = CaseStatus::kError;
  std::string reason;  // empty when passed
};

struct ConformanceOptions {
  std::string dataDir = "/usr/share/libonnx-testdata/data";
  std::vector<std::string> suites = {"node", "simple", "pytorch-converted", "pytorch-operator"};
  std::string filter;  // ECMAScript regex searched in "suite/case"; empty: all
  int threads = 1;     // oneDNN threads per case
  // Where the cases run (BackendOptions::accelerator): gpu checks the GPU backend against the
  // same expected outputs.
  std::string accelerator = "cpu";
  bool emulateDevice = false;  // tests only: BackendOptions::emulateDevice
  // Called before each case with (index, total, "suite/case").
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct SuiteSummary {
  std::string suite;
  int total = 0, passed = 0, failed = 0, unsupported = 0, errors = 0;
};

std::vector<CaseResult> runConformance(const ConformanceOptions& options);
CaseResult runConformanceCase(const std::string& caseDir, const std::string& suite,
                              const BackendOptions& backend);
std::vector<SuiteSummary> summarize(const std::vector<CaseResult>& results,
                                    const std::vector<std::string>& suites);

// Compares `actual` with `expected` under the rule above; returns "" on a match, else why not.
std::string compareValues(const Value& expected, const Value& actual);
std::string compareTensors(const Tensor& expected, const Tensor& actual);

}  // namespace dw::engine
