// Backends own a device's execution resources. Kernels are registered per backend name, so a
// new backend (e.g. "cuda") adds its own table without touching other backends' kernels; the
// session falls back to "cpu" kernels for ops the selected backend lacks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nodes/status.h"

namespace dw::engine {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // registry key: "cpu", "gpu"
  virtual std::string description() const = 0;  // for logs: device and ISA
  virtual int threads() const = 0;
};

struct BackendOptions {
  std::string accelerator = "cpu";  // cpu | gpu | auto
  int threads = 0;                  // 0: all cores
};

// `notice` receives a message when "auto" falls back to another device.
Result<std::shared_ptr<Backend>> createBackend(const BackendOptions& options,
                                               std::string* notice = nullptr);

struct DeviceReport {
  std::string cpuModel;
  std::string cpuIsa;  // as oneDNN dispatches it
  int cpuCores = 0;
  int gpuEngines = 0;                 // oneDNN GPU engines (Intel GPUs through OpenCL)
  std::vector<std::string> gpuNames;  // OpenCL GPU devices: "vendor: name"
  std::vector<std::string> available;  // accelerator names usable here
  std::string onednnVersion;
};
DeviceReport devices();

}  // namespace dw::engine
