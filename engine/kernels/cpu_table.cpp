#include "engine/kernels/tables.h"

namespace dw::engine {

// Two tables: "cpu" holds the oneDNN kernels of the cpu backend; "host" holds plain C++ kernels
// on host memory, which the session uses when the selected backend has no kernel for an op and
// which oneDNN kernels call for dtypes or attribute combinations oneDNN does not cover.
void registerCpuKernels(KernelRegistry& r) {
  addOneDnnKernels(r);
  addElementwiseKernels(r);
  addShapeKernels(r);
  addIndexKernels(r);
  addReduceKernels(r);
  addNnKernels(r);
  addControlKernels(r);
  addSequenceKernels(r);
  addMiscKernels(r);
  addRandomKernels(r);
  addElementwiseGradKernels(r);
  addSoftmaxLossGradKernels(r);
  addReduceGradKernels(r);
  addDataMovementGradKernels(r);
  addDropoutTrainingKernels(r);
  addLayerNormGradKernels(r);
  addResizeGradKernels(r);
  addConvGradKernels(r);
  addPoolGradKernels(r);
  addBatchNormTrainingKernels(r);
}

}  // namespace dw::engine
