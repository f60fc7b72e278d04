// The cuda accelerator of a build without CUDA: every use says how to get one.
#include "engine/cuda/cuda.h"

namespace dw::engine::cuda {

namespace {
const char* kWhy =
    "this deepwire was built without CUDA; install the CUDA toolkit with cuDNN (nvcc under "
    "/usr/local/cuda or on PATH) and rebuild with -DDEEPWIRE_CUDA=ON";
}

bool built() {
  return false;
}
int deviceCount(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}
Result<std::shared_ptr<Backend>> createBackend(int, const BackendOptions&) {
  return Status::error(std::string("accelerator cuda is not available: ") + kWhy);
}
void describe(DeviceReport& report) {
  report.cudaUnavailable = kWhy;
}
size_t peakDeviceBytes() {
  return 0;
}
std::function<std::shared_ptr<Buffer>(size_t)> pinnedHostBuffers(Backend&) {
  return nullptr;
}
void registerKernels(KernelRegistry&) {}
std::unique_ptr<TrainingOps> trainingOps(Backend&) {
  return nullptr;
}

}  // namespace dw::engine::cuda
