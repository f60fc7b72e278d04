// Internal: what the oneDNN gradient kernels (conv_grad.cpp, pool_grad.cpp,
// batch_norm_training.cpp) share: oneDNN's type names, the float32 check, the window of a
// convolution or pooling resolved against its gradient's shapes, and the switch to their explicit
// AVX-512 code.
#pragma once

#include <cstdint>
#include <dnnl.hpp>
#include <vector>

#include "engine/kernel.h"

namespace dw::engine::onednn {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;
inline constexpr auto f32 = memory::data_type::f32;

Status needFloat(const KernelContext& ctx, size_t n);

// oneDNN counts a dilation of 1 (none) as 0.
Dims dilationsMinus1(const std::vector<int64_t>& d);

// Spatial geometry of a convolution or pooling window: resolved from the forward attributes
// and the known input and output (gradient) shapes, so ceil_mode, auto_pad, output_padding and
// output_shape all come out as explicit left/right padding.
struct Window {
  Dims kernel, strides, dilations, padL, padR;
};

Result<Window> resolveWindow(const Attributes& a, const Shape& in, const Shape& out,
                             const std::vector<int64_t>& kernel, bool transposed);

// The project builds for baseline x86-64: AVX-512 loops are compiled for it explicitly and run
// where the CPU has it.
#define DW_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
bool avx512Usable();

}  // namespace dw::engine::onednn
