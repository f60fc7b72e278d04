#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

void addNnKernels(KernelRegistry& r) {}

}  // namespace dw::engine
