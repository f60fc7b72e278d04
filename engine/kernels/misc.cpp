#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

void addMiscKernels(KernelRegistry& r) {}

}  // namespace dw::engine
