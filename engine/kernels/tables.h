// Internal: the kernel tables (kernel.h names them) and the per-family kernel lists they combine.
#pragma once

#include "engine/kernel.h"

namespace dw::engine {

// One function per table, each listing the families of that table in one file.
void registerReferenceKernels(KernelRegistry& r);  // kernels/reference_table.cpp
void registerOneDnnKernels(KernelRegistry& r);     // onednn/onednn_table.cpp

// Reference families (plain C++), each defined beside its kernels.
void addElementwiseKernels(KernelRegistry& r);       // kernels/elementwise.cpp
void addShapeKernels(KernelRegistry& r);             // kernels/shape_ops.cpp
void addIndexKernels(KernelRegistry& r);             // kernels/index_ops.cpp
void addReduceKernels(KernelRegistry& r);            // kernels/reduce.cpp
void addNnKernels(KernelRegistry& r);                // kernels/nn.cpp
void addAttentionKernels(KernelRegistry& r);         // kernels/attention.cpp
void addControlKernels(KernelRegistry& r);           // kernels/control.cpp
void addSequenceKernels(KernelRegistry& r);          // kernels/sequence.cpp
void addMiscKernels(KernelRegistry& r);              // kernels/misc.cpp
void addRandomKernels(KernelRegistry& r);            // kernels/random.cpp
void addOpset18Kernels(KernelRegistry& r);           // kernels/opset18_ops.cpp
void addMicrosoftKernels(KernelRegistry& r);         // kernels/microsoft_ops.cpp
void addGenerationKernels(KernelRegistry& r);        // kernels/generation.cpp
void addDecoderAttentionKernels(KernelRegistry& r);  // kernels/decoder_attention.cpp
void addOrderedQuantKernels(KernelRegistry& r);      // kernels/ordered_quant.cpp
void addBfpKernels(KernelRegistry& r);               // kernels/bfp.cpp
void addContribRnnKernels(KernelRegistry& r);        // onednn/rnn_contrib.cpp
void addLongformerKernels(KernelRegistry& r);        // kernels/longformer_attention.cpp
// Their gradient and training-mode kernels (domain com.deepwire.grad).
void addElementwiseGradKernels(KernelRegistry& r);   // kernels/elementwise_grad.cpp
void addSoftmaxLossGradKernels(KernelRegistry& r);   // kernels/softmax_loss_grad.cpp
void addReduceGradKernels(KernelRegistry& r);        // kernels/reduce_grad.cpp
void addDataMovementGradKernels(KernelRegistry& r);  // kernels/data_movement_grad.cpp
void addDropoutTrainingKernels(KernelRegistry& r);   // kernels/dropout_training.cpp
void addLayerNormGradKernels(KernelRegistry& r);     // kernels/layer_norm_grad.cpp
void addResizeGradKernels(KernelRegistry& r);        // kernels/resize_grad.cpp

// oneDNN families.
void addOneDnnKernels(KernelRegistry& r);  // onednn/kernels.cpp (+ eltwise.cpp, rnn.cpp)
// Their gradient and training-mode kernels (domain com.deepwire.grad).
void addConvGradKernels(KernelRegistry& r);           // onednn/conv_grad.cpp
void addPoolGradKernels(KernelRegistry& r);           // onednn/pool_grad.cpp
void addBatchNormTrainingKernels(KernelRegistry& r);  // onednn/batch_norm_training.cpp

}  // namespace dw::engine
