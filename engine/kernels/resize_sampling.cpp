// Resize / Upsample sampling geometry (resize_sampling.h).
#include "engine/kernels/resize_sampling.h"

#include <algorithm>
#include <cmath>

namespace dw::engine {

Result<ResizeSpec> ResizeSpec::fromAttributes(const Attributes& a, const std::string& opType,
                                              int opset) {
  ResizeSpec s;
  s.opset = opset;
  s.upsample = opType == "Upsample";
  s.mode = a.getString("mode", "nearest");
  std::transform(s.mode.begin(), s.mode.end(), s.mode.begin(), ::tolower);
  if (s.mode == "bilinear") s.mode = "linear";
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic")
    return Status::error("mode '" + s.mode + "' must be nearest, linear or cubic");
  if (s.upsample || opset < 11) {
    s.coord = "asymmetric";
    s.nearest = "floor";
  } else {
    s.coord = a.getString("coordinate_transformation_mode", "half_pixel");
    s.nearest = a.getString("nearest_mode", "round_prefer_floor");
  }
  static const std::vector<std::string> coords = {"half_pixel",           "pytorch_half_pixel",
                                                  "align_corners",        "asymmetric",
                                                  "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find(coords.begin(), coords.end(), s.coord) == coords.end())
    return Status::error("coordinate_transformation_mode '" + s.coord + "' is not supported");
  if (s.nearest != "floor" && s.nearest != "ceil" && s.nearest != "round_prefer_floor" &&
      s.nearest != "round_prefer_ceil")
    return Status::error("nearest_mode '" + s.nearest + "' is not supported");
  // Opset 18 additions this kernel does not implement: refuse rather than ignore them.
  if (a.getInt("antialias", 0) != 0)
    return Status::error("antialias=1 is not supported; use antialias=0");
  if (!a.getInts("axes").empty())
    return Status::error(
        "the axes attribute is not supported; give scales or sizes for every "
        "axis");
  const std::string aspect = a.getString("keep_aspect_ratio_policy", "stretch");
  if (aspect != "stretch")
    return Status::error("keep_aspect_ratio_policy '" + aspect + "' is not supported; use stretch");
  s.cubicA = a.getFloat("cubic_coeff_a", -0.75f);
  s.excludeOutside = a.getInt("exclude_outside", 0) != 0;
  s.extrapolation = a.getFloat("extrapolation_value", 0.0f);
  s.scalesAttr = a.getFloats("scales");
  return s;
}

bool ResizePlan::resamples(const ResizeSpec& spec, size_t d) const {
  return !(out[d] == in[d] && scales[d] == 1.0 && spec.coord != "tf_crop_and_resize");
}

Result<ResizePlan> planResize(const ResizeSpec& spec, const Shape& in, const KernelContext& ctx,
                              size_t firstExtra) {
  const size_t r = in.size();
  ResizePlan p;
  p.in = in;
  std::vector<int64_t> sizes;
  auto doubles = [&](size_t i, std::vector<double>* v) {
    for (int64_t k = 0; k < ctx.input(i).size(); ++k) v->push_back(ctx.input(i).getDouble(k));
  };
  if (spec.upsample && spec.opset < 9) {
    for (float f : spec.scalesAttr) p.scales.push_back(f);
  } else if (spec.upsample || spec.opset < 11) {
    if (!ctx.hasInput(firstExtra)) return Status::error("scales (input 1) is missing");
    doubles(firstExtra, &p.scales);
  } else {
    if (ctx.hasInput(firstExtra)) doubles(firstExtra, &p.roi);
    if (ctx.hasInput(firstExtra + 1)) doubles(firstExtra + 1, &p.scales);
    if (ctx.hasInput(firstExtra + 2)) sizes = ctx.input(firstExtra + 2).toInt64Vector();
  }
  p.out.resize(r);
  if (!sizes.empty()) {
    if (sizes.size() != r) return Status::error("sizes must have one entry per input axis");
    p.scales.assign(r, 1.0);
    for (size_t d = 0; d < r; ++d) {
      p.out[d] = sizes[d];
      p.scales[d] = in[d] ? static_cast<double>(sizes[d]) / in[d] : 1.0;
    }
  } else {
    if (p.scales.size() != r)
      return Status::error("scales must have one entry per input axis (got " +
                           std::to_string(p.scales.size()) + ")");
    for (size_t d = 0; d < r; ++d) {
      if (!(p.scales[d] > 0)) return Status::error("scales must be positive");
      const double o = std::floor(in[d] * p.scales[d]);
      if (!(o < double(int64_t(1) << 40)))
        return Status::error("scale " + std::to_string(p.scales[d]) + " of axis " +
                             std::to_string(d) + " makes an output dimension of " +
                             std::to_string(o));
      p.out[d] = static_cast<int64_t>(o);
    }
  }
  if (spec.coord == "tf_crop_and_resize" && p.roi.size() != 2 * r)
    return Status::error("tf_crop_and_resize needs an roi of 2 * rank values");
  return p;
}

Result<ResizeAxisTaps> resizeAxisTaps(const ResizeSpec& spec, const ResizePlan& plan, size_t d) {
  const size_t r = plan.in.size();
  const int64_t in = plan.in[d], on = plan.out[d];
  ResizeAxisTaps at;
  at.taps.resize(on);
  at.outside.assign(on, false);
  const std::string& coord = spec.coord;
  for (int64_t j = 0; j < on; ++j) {
    double xo;
    const double sc = plan.scales[d];
    // The reference implementation uses the unrounded resized length in_len * scale.
    const double onF = in * sc;
    if (coord == "half_pixel") {
      xo = (j + 0.5) / sc - 0.5;
    } else if (coord == "pytorch_half_pixel") {
      xo = onF > 1 ? (j + 0.5) / sc - 0.5 : 0.0;
    } else if (coord == "align_corners") {
      xo = onF == 1 ? 0.0 : j * static_cast<double>(in - 1) / (onF - 1);
    } else if (coord == "asymmetric") {
      xo = j / sc;
    } else if (coord == "tf_half_pixel_for_nn") {
      xo = (j + 0.5) / sc;
    } else if (coord == "tf_crop_and_resize") {
      const double s0 = plan.roi[d], e0 = plan.roi[r + d];
      xo = onF > 1 ? s0 * (in - 1) + j * (e0 - s0) * (in - 1) / (onF - 1)
                   : 0.5 * (s0 + e0) * (in - 1);
      if (xo < 0 || xo > in - 1) {
        at.outside[j] = true;
        continue;
      }
    } else {
      return Status::error("coordinate_transformation_mode '" + coord + "' is not supported");
    }
    auto clampIdx = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (spec.mode == "nearest") {
      int64_t i;
      const double fl = std::floor(xo);
      if (spec.nearest == "floor") {
        i = static_cast<int64_t>(fl);
      } else if (spec.nearest == "ceil") {
        i = static_cast<int64_t>(std::ceil(xo));
      } else if (xo - fl == 0.5) {
        i = static_cast<int64_t>(spec.nearest == "round_prefer_ceil" ? fl + 1 : fl);
      } else {
        i = static_cast<int64_t>(std::round(xo));
      }
      at.taps[j].push_back({clampIdx(i), 1.0});
      continue;
    }
    const int64_t base = static_cast<int64_t>(std::ceil(xo)) - 1;
    const double ratio = xo - base;
    std::vector<std::pair<int64_t, double>> t;
    if (spec.mode == "linear") {
      t = {{base, 1 - ratio}, {base + 1, ratio}};
    } else {
      const double A = spec.cubicA, rr = ratio;
      auto far = [&](double v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };
      auto near = [&](double v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };
      t = {{base - 1, far(rr + 1)},
           {base, near(rr)},
           {base + 1, near(1 - rr)},
           {base + 2, far(2 - rr)}};
    }
    if (spec.excludeOutside) {
      double sum = 0;
      for (auto& [i, w] : t) {
        if (i < 0 || i >= in) w = 0;
        sum += w;
      }
      if (sum != 0)
        for (auto& tw : t) tw.second /= sum;
    }
    for (auto& [i, w] : t) at.taps[j].push_back({clampIdx(i), w});
  }
  return at;
}

}  // namespace dw::engine
