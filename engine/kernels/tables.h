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
void addGradKernels(KernelRegistry& r);         // kernels/grad_kernels.cpp (+ onednn/)
void addOneDnnKernels(KernelRegistry& r);       // onednn/kernels.cpp

}  // namespace dw::engine
