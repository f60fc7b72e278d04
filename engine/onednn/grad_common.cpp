#include "engine/onednn/grad_common.h"

#include <algorithm>
#include <string>

namespace dw::engine::onednn {

Status needFloat(const KernelContext& ctx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (ctx.hasInput(i) && ctx.input(i).dtype() != DType::kFloat)
      return Status::error(std::string("only float32 is supported, got ") +
                           dtypeName(ctx.input(i).dtype()));
  return Status();
}

Dims dilationsMinus1(const std::vector<int64_t>& d) {
  Dims r;
  for (int64_t v : d) r.push_back(v - 1);
  return r;
}

Result<Window> resolveWindow(const Attributes& a, const Shape& in, const Shape& out,
                             const std::vector<int64_t>& kernel, bool transposed) {
  const size_t n = kernel.size();
  Window w;
  w.kernel = Dims(kernel.begin(), kernel.end());
  auto strides = a.getInts("strides"), dil = a.getInts("dilations"), pads = a.getInts("pads");
  w.strides = strides.empty() ? Dims(n, 1) : Dims(strides.begin(), strides.end());
  w.dilations = dil.empty() ? Dims(n, 1) : Dims(dil.begin(), dil.end());
  if (w.strides.size() != n || w.dilations.size() != n)
    return Status::error("strides/dilations rank mismatch");
  w.padL.assign(n, 0);
  w.padR.assign(n, 0);
  const std::string autoPad = a.getString("auto_pad", "NOTSET");
  if (autoPad == "NOTSET" && !pads.empty()) {
    if (pads.size() != 2 * n) return Status::error("pads must have 2 entries per spatial axis");
    for (size_t i = 0; i < n; ++i) {
      w.padL[i] = pads[i];
      w.padR[i] = pads[i + n];
    }
  }
  const bool lower = autoPad == "SAME_LOWER";
  for (size_t i = 0; i < n; ++i) {
    const int64_t ek = (kernel[i] - 1) * w.dilations[i] + 1;
    const int64_t s = w.strides[i], xi = in[2 + i], yi = out[2 + i];
    if (!transposed) {
      if (autoPad == "SAME_UPPER" || lower) {
        const int64_t total = std::max<int64_t>(0, (yi - 1) * s + ek - xi);
        w.padL[i] = lower ? total - total / 2 : total / 2;
        w.padR[i] = total - w.padL[i];
      }
      // Make the right padding reproduce the output size exactly (ceil_mode, floor drops).
      if ((xi + w.padL[i] + w.padR[i] - ek) / s + 1 != yi)
        w.padR[i] = (yi - 1) * s + ek - xi - w.padL[i];
    } else {
      // Deconvolution: full = s*(x-1) + ek; out = full - padL - padR (output_padding and
      // output_shape only move the right padding, as in the forward kernel).
      const int64_t full = s * (xi - 1) + ek;
      const bool fromShape = !a.getInts("output_shape").empty() || autoPad == "SAME_UPPER" || lower;
      if (fromShape) {
        const int64_t total = full - yi;
        w.padL[i] = lower ? total - total / 2 : total / 2;
      }
      w.padR[i] = full - yi - w.padL[i];
    }
  }
  return w;
}

bool avx512Usable() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
  return ok;
}

}  // namespace dw::engine::onednn
