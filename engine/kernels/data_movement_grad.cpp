// The scatter-style gradients of data-movement ops (MaxUnpool, Gather, Slice, Concat), domain
// "com.deepwire.grad", in plain C++: float and double, so gradient checks can run in double.
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/kernels/common.h"
#include "engine/kernels/slice_plan.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// MaxUnpool's gradient: dY (cropped to the default output shape) read at each index of I. Where
// I repeats an index, the forward kept the last write, so only that element gets the gradient.
class MaxUnpoolGrad : public Kernel {
 public:
  explicit MaxUnpoolGrad(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), ind.shape()));
    std::vector<bool> taken(dy.size(), false);
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      for (int64_t i = ind.size(); i-- > 0;) {
        const int64_t at = ind.getInt(i);
        if (at < 0 || at >= dy.size())
          return Status::error("MaxUnpoolGrad: index " + std::to_string(at) +
                               " is outside the output");
        o[i] = taken[at] ? T(0) : g[at];
        taken[at] = true;
      }
      return Status();
    });
  }
};

// Scatter-add of dY into the gathered rows.
class GatherGrad : public Kernel {
 public:
  explicit GatherGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& data = ctx.input(1);
    const Tensor& idx = ctx.input(2);
    if (!validAxis(axis_, data.rank())) return Status::error("GatherGrad: axis out of range");
    const int64_t ax = normAxis(axis_, data.rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < ax; ++d) outer *= data.dim(d);
    for (size_t d = ax + 1; d < data.rank(); ++d) inner *= data.dim(d);
    const int64_t len = data.dim(ax), k = idx.size();
    if (dy.size() != outer * k * inner) return Status::error("GatherGrad: shape mismatch");
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), data.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t j = 0; j < k; ++j) {
          int64_t r = idx.getInt(j);
          if (r < 0) r += len;
          if (r < 0 || r >= len) return Status::error("GatherGrad: index out of range");
          const T* src = g + (a * k + j) * inner;
          T* dst = o + (a * len + r) * inner;
          for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
      return Status();
    });
  }

 private:
  int64_t axis_;
};

// Zeros with dY scattered into the sliced positions.
class SliceGrad : public Kernel {
 public:
  explicit SliceGrad(const KernelInit& init)
      : opset_(init.attrs.getInt("opset", 13)),
        starts_(init.attrs.getInts("starts")),
        ends_(init.attrs.getInts("ends")),
        axes_(init.attrs.getInts("axes")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    auto plan = opset_ >= 10 ? planSlice(x.shape(), intsInput(ctx, 2), intsInput(ctx, 3),
                                         intsInput(ctx, 4), intsInput(ctx, 5))
                             : planSlice(x.shape(), starts_, ends_, axes_, {});
    if (!plan) return plan.status();
    if (dy.shape() != plan->out)
      return Status::error("SliceGrad: dY has shape " + shapeToString(dy.shape()) + ", the slice " +
                           shapeToString(plan->out));
    const size_t r = x.rank();
    DW_ALLOC(dx, ctx.output(0, dy.dtype(), x.shape()));
    return dispatchFloat(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* g = dy.data<T>();
      T* o = dx->data<T>();
      std::fill_n(o, dx->size(), T(0));
      std::vector<int64_t> idx(r, 0);
      const int64_t n = dy.size();
      for (int64_t i = 0; i < n; ++i) {
        int64_t off = plan->base;
        for (size_t d = 0; d < r; ++d) off += idx[d] * plan->strides[d];
        o[off] = g[i];
        for (size_t d = r; d-- > 0;) {
          if (++idx[d] < dy.dim(d)) break;
          idx[d] = 0;
        }
      }
      return Status();
    });
  }

 private:
  int64_t opset_;
  std::vector<int64_t> starts_, ends_, axes_;
};

// dY split back into the pieces Concat joined (inputs 1.. give their shapes).
class ConcatGrad : public Kernel {
 public:
  explicit ConcatGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    if (!validAxis(axis_, dy.rank())) return Status::error("ConcatGrad: axis out of range");
    const int64_t ax = normAxis(axis_, dy.rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < ax; ++d) outer *= dy.dim(d);
    for (size_t d = ax + 1; d < dy.rank(); ++d) inner *= dy.dim(d);
    const size_t es = dtypeSize(dy.dtype());
    const int64_t rowBytes = dy.dim(ax) * inner * static_cast<int64_t>(es);
    int64_t offset = 0;
    for (size_t i = 1; i < ctx.numInputs(); ++i) {
      const Tensor& xi = ctx.input(i);
      const int64_t chunk = xi.dim(ax) * inner * static_cast<int64_t>(es);
      if (ctx.wantsOutput(i - 1)) {
        DW_ALLOC(o, ctx.output(i - 1, dy.dtype(), xi.shape()));
        const char* src = static_cast<const char*>(dy.raw()) + offset;
        char* dst = static_cast<char*>(o->raw());
        for (int64_t a = 0; a < outer; ++a)
          std::memcpy(dst + a * chunk, src + a * rowBytes, static_cast<size_t>(chunk));
      }
      offset += chunk;
    }
    return Status();
  }

 private:
  int64_t axis_;
};

}  // namespace

void addDataMovementGradKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "GatherGrad", 1, kMaxOpset, &makeKernel<GatherGrad>, false,
        dw::kGradDomain);
  r.add(kReferenceTable, "MaxUnpoolGrad", 1, kMaxOpset, &makeKernel<MaxUnpoolGrad>, true,
        dw::kGradDomain);
  r.add(kReferenceTable, "SliceGrad", 1, kMaxOpset, &makeKernel<SliceGrad>, true, dw::kGradDomain);
  r.add(kReferenceTable, "ConcatGrad", 1, kMaxOpset, &makeKernel<ConcatGrad>, false,
        dw::kGradDomain);
}

}  // namespace dw::engine
