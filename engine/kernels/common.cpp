#include "engine/kernels/common.h"

namespace dw::engine {

Result<Shape> broadcastShapes(const std::vector<Shape>& shapes) {
  size_t r = 0;
  for (const auto& s : shapes) r = std::max(r, s.size());
  Shape out(r, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[r - s.size() + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string msg = "shapes cannot be broadcast together:";
      for (const auto& x : shapes) msg += " " + shapeToString(x);
      return Status::error(msg);
    }
  }
  return out;
}

Status broadcastsTo(const Shape& from, const Shape& to, const std::string& what) {
  auto b = broadcastShapes({from, to});
  if (b && *b == to) return Status();
  return Status::error(what + " " + shapeToString(from) + " does not broadcast to " +
                       shapeToString(to));
}

std::vector<int64_t> broadcastOffsets(const Shape& from, const Shape& to) {
  std::vector<int64_t> at(static_cast<size_t>(numElements(to)));
  forEachBroadcast<1>(to, {&from},
                      [&](int64_t k, const std::array<int64_t, 1>& off) { at[k] = off[0]; });
  return at;
}

std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t v = 1;
  for (size_t i = in.size(); i-- > 0;) {
    size_t o = out.size() - in.size() + i;
    st[o] = in[i] == 1 ? 0 : v;
    v *= in[i];
  }
  return st;
}

Status copyToOutput(KernelContext& ctx, size_t i, const Tensor& t, Shape shape) {
  DW_ALLOC(o, ctx.output(i, t.dtype(), std::move(shape)));
  if (t.dtype() == DType::kString)
    o->strings() = t.strings();
  else if (t.bytes())
    std::memcpy(o->raw(), t.raw(), t.bytes());
  return Status();
}

}  // namespace dw::engine
