#include "engine/kernels/tables.h"

namespace dw::engine {

// The reference table: plain C++ kernels on host memory. The planner places here what a
// backend's own table lacks, and oneDNN kernels hand it the dtypes and attribute combinations
// oneDNN does not cover (onednn::referenceKernel).
void registerReferenceKernels(KernelRegistry& r) {
  addElementwiseKernels(r);
  addShapeKernels(r);
  addIndexKernels(r);
  addReduceKernels(r);
  addNnKernels(r);
  addAttentionKernels(r);
  addControlKernels(r);
  addSequenceKernels(r);
  addMiscKernels(r);
  addRandomKernels(r);
  addOpset18Kernels(r);
  addMicrosoftKernels(r);
  addGenerationKernels(r);
  addDecoderAttentionKernels(r);
  addOrderedQuantKernels(r);
  addBfpKernels(r);
  addContribRnnKernels(r);
  addLongformerKernels(r);
  addElementwiseGradKernels(r);
  addSoftmaxLossGradKernels(r);
  addReduceGradKernels(r);
  addDataMovementGradKernels(r);
  addDropoutTrainingKernels(r);
  addLayerNormGradKernels(r);
  addResizeGradKernels(r);
}

}  // namespace dw::engine
