// A direct N-D convolution from its definition (groups, strides, dilations, padding, auto_pad),
// for the kernels whose types oneDNN does not take: ConvInteger and QLinearConv (int32
// accumulators, zero points) and Conv on float64 (kernels/nn.cpp).
#pragma once

#include <string>
#include <vector>

#include "engine/kernel.h"

namespace dw::engine {

struct ConvGeometry {
  int64_t n = 0, c = 0, oc = 0, group = 1;
  std::vector<int64_t> kernel, strides, dilations, padL;
  Shape out, spatialIn, spatialOut;
};

// X's and W's shapes and the node's attributes as one convolution, or an error naming what
// does not fit (channels against the group and weights, a window larger than the padded input).
inline Result<ConvGeometry> convGeometry(const Shape& x, const Shape& w, const Attributes& a) {
  if (x.size() < 3 || w.size() != x.size())
    return Status::error("X and W must have the same rank, 3 or more; got " + shapeToString(x) +
                         " and " + shapeToString(w));
  const size_t ns = x.size() - 2;
  ConvGeometry g;
  g.n = x[0];
  g.c = x[1];
  g.oc = w[0];
  g.group = a.getInt("group", 1);
  if (g.group <= 0 || g.c % g.group || g.oc % g.group || w[1] * g.group != g.c)
    return Status::error("channels " + std::to_string(g.c) + " and weights " + shapeToString(w) +
                         " do not match group " + std::to_string(g.group));
  g.kernel.assign(w.begin() + 2, w.end());
  g.strides = a.getInts("strides");
  g.dilations = a.getInts("dilations");
  const auto pads = a.getInts("pads");
  if (g.strides.empty()) g.strides.assign(ns, 1);
  if (g.dilations.empty()) g.dilations.assign(ns, 1);
  if (g.strides.size() != ns || g.dilations.size() != ns ||
      (!pads.empty() && pads.size() != 2 * ns))
    return Status::error("strides, dilations and pads need one value per spatial axis (" +
                         std::to_string(ns) + ", pads twice that)");
  g.padL.assign(ns, 0);
  const std::string autoPad = a.getString("auto_pad");
  g.out = {g.n, g.oc};
  for (size_t i = 0; i < ns; ++i) {
    if (g.strides[i] <= 0 || g.dilations[i] <= 0)
      return Status::error("strides and dilations must be positive");
    const int64_t in = x[2 + i], ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    int64_t o;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      o = (in + g.strides[i] - 1) / g.strides[i];
      const int64_t total = std::max<int64_t>(0, (o - 1) * g.strides[i] + ek - in);
      g.padL[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else {
      int64_t pl = 0, pr = 0;
      if (autoPad != "VALID" && !pads.empty()) {
        pl = pads[i];
        pr = pads[i + ns];
      }
      g.padL[i] = pl;
      if (in + pl + pr < ek)
        return Status::error("the window (" + std::to_string(ek) +
                             ") is larger than the padded "
                             "input (" +
                             std::to_string(in + pl + pr) + ") on spatial axis " +
                             std::to_string(i));
      o = (in + pl + pr - ek) / g.strides[i] + 1;
    }
    g.out.push_back(o);
  }
  g.spatialIn.assign(x.begin() + 2, x.end());
  g.spatialOut.assign(g.out.begin() + 2, g.out.end());
  return g;
}

// For each output element, in order (n, oc, then the spatial position), calls
// `store(outIndex, oc, acc)` with acc the sum over the window and the group's channels of
// `tap(xIndex, wIndex, oc)`; taps in the padding are skipped.
template <class Acc, class Tap, class Store>
void directConv(const ConvGeometry& g, Tap&& tap, Store&& store) {
  const size_t ns = g.kernel.size();
  const int64_t inPlane = numElements(g.spatialIn), outPlane = numElements(g.spatialOut);
  const int64_t kSize = numElements(g.kernel), cg = g.c / g.group, og = g.oc / g.group;
  std::vector<int64_t> o(ns), pos(ns);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oc = 0; oc < g.oc; ++oc) {
      const int64_t grp = oc / og;
      for (int64_t oi = 0; oi < outPlane; ++oi) {
        int64_t rem = oi;
        for (size_t d = ns; d-- > 0;) {
          o[d] = rem % g.spatialOut[d];
          rem /= g.spatialOut[d];
        }
        Acc acc = 0;
        for (int64_t ki = 0; ki < kSize; ++ki) {
          int64_t r = ki, off = 0;
          bool inside = true;
          for (size_t d = ns; d-- > 0;) {
            const int64_t k = r % g.kernel[d];
            r /= g.kernel[d];
            pos[d] = o[d] * g.strides[d] - g.padL[d] + k * g.dilations[d];
            inside = inside && pos[d] >= 0 && pos[d] < g.spatialIn[d];
          }
          if (!inside) continue;
          for (size_t d = 0; d < ns; ++d) off = off * g.spatialIn[d] + pos[d];
          for (int64_t c = 0; c < cg; ++c)
            acc += tap((n * g.c + grp * cg + c) * inPlane + off, (oc * cg + c) * kSize + ki, oc);
        }
        store((n * g.oc + oc) * outPlane + oi, oc, acc);
      }
    }
}

}  // namespace dw::engine
