#include "engine/kernels/tables.h"

namespace dw::engine {

// The onednn table: kernels on oneDNN's primitives (and our own loops where those cost more),
// which the cpu and gpu accelerators both run, each on its own oneDNN engine.
void registerOneDnnKernels(KernelRegistry& r) {
  addOneDnnKernels(r);
  addConvGradKernels(r);
  addPoolGradKernels(r);
  addBatchNormTrainingKernels(r);
}

}  // namespace dw::engine
