// Internal: the per-family kernel lists and the per-backend tables that combine them.
#pragma once

#include "engine/kernel.h"

namespace dw::engine {

// The cpu backend's tables (engine/kernels/cpu_table.cpp): "cpu" (oneDNN) and "host" (C++).
void registerCpuKernels(KernelRegistry& r);

// Families, each defined beside its kernels.
void addElementwiseKernels(KernelRegistry& r);  // kernels/elementwise.cpp
void addShapeKernels(KernelRegistry& r);        // kernels/shape_ops.cpp
void addIndexKernels(KernelRegistry& r);        // kernels/index_ops.cpp
void addReduceKernels(KernelRegistry& r);       // kernels/reduce.cpp
void addNnKernels(KernelRegistry& r);           // kernels/nn.cpp
void addControlKernels(KernelRegistry& r);      // kernels/control.cpp
void addSequenceKernels(KernelRegistry& r);     // kernels/sequence.cpp
void addMiscKernels(KernelRegistry& r);         // kernels/misc.cpp
void addRandomKernels(KernelRegistry& r);       // kernels/random.cpp
void addOneDnnKernels(KernelRegistry& r);       // onednn/kernels.cpp

// Gradient and training-mode families (domain com.deepwire.grad).
void addElementwiseGradKernels(KernelRegistry& r);    // kernels/elementwise_grad.cpp
void addSoftmaxLossGradKernels(KernelRegistry& r);    // kernels/softmax_loss_grad.cpp
void addReduceGradKernels(KernelRegistry& r);         // kernels/reduce_grad.cpp
void addDataMovementGradKernels(KernelRegistry& r);   // kernels/data_movement_grad.cpp
void addDropoutTrainingKernels(KernelRegistry& r);    // kernels/dropout_training.cpp
void addLayerNormGradKernels(KernelRegistry& r);      // kernels/layer_norm_grad.cpp
void addResizeGradKernels(KernelRegistry& r);         // kernels/resize_grad.cpp
void addConvGradKernels(KernelRegistry& r);           // onednn/conv_grad.cpp
void addPoolGradKernels(KernelRegistry& r);           // onednn/pool_grad.cpp
void addBatchNormTrainingKernels(KernelRegistry& r);  // onednn/batch_norm_training.cpp

}  // namespace dw::engine
