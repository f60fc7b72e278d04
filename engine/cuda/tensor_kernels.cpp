// Softmax/LogSoftmax, LayerNormalization, Slice, Concat and Gather, and their gradients, on the
// cuda backend (device code in tensor_ops.cu; Concat is cudaMemcpy2D). Float data only: integer
// Concat and Gather compute shapes, which the host reads next, so they stay there.
#include <cstring>

#include "engine/cuda/kernel_util.h"
#include "engine/kernels/common.h"
#include "engine/kernels/slice_plan.h"
#include "nodes/catalogue.h"

namespace dw::engine::cuda {

namespace {

// x viewed as [outer, len, inner] around `axis` (normalized); legacy (opset < 13) folds every
// axis from `axis` on into len.
struct Around {
  int64_t outer = 1, len = 1, inner = 1;
};
Around around(const Shape& s, int64_t axis, bool legacy) {
  Around a;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    (d < axis ? a.outer : (d == axis || legacy ? a.len : a.inner)) *= s[d];
  return a;
}

Result<int64_t> axisOf(int64_t axis, const Shape& s, const char* op) {
  const size_t rank = std::max<size_t>(s.size(), 1);
  if (!validAxis(axis, rank))
    return Status::error(std::string(op) + ": axis " + std::to_string(axis) + " is outside the " +
                         std::to_string(s.size()) + " dimensions of " + shapeToString(s));
  return normAxis(axis, rank);
}

class Softmax : public Kernel {
 public:
  explicit Softmax(const KernelInit& init)
      : legacy_(init.opset < 13),
        log_(init.opType == "LogSoftmax"),
        axis_(init.attrs.getInt("axis")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto ax = axisOf(axis_, x.shape(), log_ ? "LogSoftmax" : "Softmax");
    if (!ax) return ax.status();
    const Around a = around(x.shape(), *ax, legacy_);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    launchSoftmax(fp(x), y->data<float>(), a.outer, a.len, a.inner, log_,
                  cudaBackend(ctx.backend()).stream());
    return launched(log_ ? "LogSoftmax" : "Softmax");
  }

 private:
  bool legacy_, log_;
  int64_t axis_;
};

class SoftmaxGrad : public Kernel {
 public:
  explicit SoftmaxGrad(const KernelInit& init)
      : legacy_(init.attrs.getInt("legacy", 0) != 0),
        log_(init.attrs.getInt("log", 0) != 0),
        axis_(init.attrs.getInt("axis", -1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& y = ctx.input(1);
    if (dy.shape() != y.shape())
      return Status::error("SoftmaxGrad: dY " + shapeToString(dy.shape()) + " and Y " +
                           shapeToString(y.shape()) + " differ");
    auto ax = axisOf(axis_, y.shape(), "SoftmaxGrad");
    if (!ax) return ax.status();
    const Around a = around(y.shape(), *ax, legacy_);
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, y.shape()));
    launchSoftmaxGrad(fp(dy), fp(y), dx->data<float>(), a.outer, a.len, a.inner, log_,
                      cudaBackend(ctx.backend()).stream());
    return launched("SoftmaxGrad");
  }

 private:
  bool legacy_, log_;
  int64_t axis_;
};

// Scale and B broadcast over the normalized axes (a copy of `len` elements is made where they are
// smaller, as in a per-channel scale).
class LayerNormalization : public Kernel {
 public:
  explicit LayerNormalization(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", -1)), eps_(init.attrs.getFloat("epsilon", 1e-5f)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto ax = axisOf(axis_, x.shape(), "LayerNormalization");
    if (!ax) return ax.status();
    if (x.rank() == 0) return Status::error("LayerNormalization: X must have rank 1 or more");
    const Around a = around(x.shape(), *ax, true);
    const Shape tail(x.shape().begin() + *ax, x.shape().end());
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    const float* params[2] = {nullptr, nullptr};
    for (int i : {1, 2}) {
      if (!ctx.hasInput(i)) continue;
      const Tensor& p = ctx.input(i);
      DW_RETURN_IF_ERROR(broadcastsTo(
          p.shape(), tail, i == 1 ? "LayerNormalization: Scale" : "LayerNormalization: B"));
      if (p.size() == a.len) {
        params[i - 1] = fp(p);
        continue;
      }
      DW_RETURN_IF_ERROR(rankOk(tail, "LayerNormalization"));
      Tensor* full = ctx.scratch(DType::kFloat, tail);
      if (!full) return ctx.status();
      launchStridedCopy(p.raw(), broadcastStrides(p.shape(), tail), full->raw(), a.len, 4, s);
      params[i - 1] = full->data<float>();
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    Shape stat(x.shape().begin(), x.shape().begin() + *ax);
    stat.resize(x.rank(), 1);
    float* stats[2] = {nullptr, nullptr};
    for (int i : {1, 2}) {
      if (!ctx.wantsOutput(i)) continue;
      Tensor* t = ctx.output(i, DType::kFloat, stat);
      if (!t) return ctx.status();
      stats[i - 1] = t->data<float>();
    }
    launchLayerNorm(fp(x), params[0], params[1], y->data<float>(), stats[0], stats[1], a.outer,
                    a.len, eps_, s);
    return launched("LayerNormalization");
  }

 private:
  int64_t axis_;
  float eps_;
};

// Scale (and so dScale and dB) broadcast over the normalized axes like the forward's: the sums
// over rows are reduced once more to Scale's shape where it is smaller.
class LayerNormalizationGrad : public Kernel {
 public:
  explicit LayerNormalizationGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", -1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& scale = ctx.input(2);
    auto ax = axisOf(axis_, x.shape(), "LayerNormalizationGrad");
    if (!ax) return ax.status();
    const Around a = around(x.shape(), *ax, true);
    const Shape tail(x.shape().begin() + *ax, x.shape().end());
    if (dy.shape() != x.shape() || ctx.input(3).size() != a.outer || ctx.input(4).size() != a.outer)
      return Status::error("LayerNormalizationGrad: dY " + shapeToString(dy.shape()) + ", X " +
                           shapeToString(x.shape()) + " and the statistics (" +
                           std::to_string(ctx.input(3).size()) + " values) do not match");
    DW_RETURN_IF_ERROR(broadcastsTo(scale.shape(), tail, "LayerNormalizationGrad: Scale"));
    DW_RETURN_IF_ERROR(rankOk(tail, "LayerNormalizationGrad"));
    auto& be = cudaBackend(ctx.backend());
    const cudaStream_t s = be.stream();
    const float* sc = fp(scale);
    if (scale.size() != a.len) {
      Tensor* full = ctx.scratch(DType::kFloat, tail);
      if (!full) return ctx.status();
      launchStridedCopy(scale.raw(), broadcastStrides(scale.shape(), tail), full->raw(), a.len, 4,
                        s);
      sc = full->data<float>();
    }
    float* dx = nullptr;
    if (ctx.wantsOutput(0)) {
      DW_ALLOC(t, ctx.output(0, DType::kFloat, x.shape()));
      dx = t->data<float>();
    }
    Tensor* prod = nullptr;
    if (ctx.wantsOutput(1) && !(prod = ctx.scratch(DType::kFloat, {a.outer, a.len})))
      return ctx.status();
    launchLayerNormGrad(fp(dy), fp(x), sc, fp(ctx.input(3)), fp(ctx.input(4)), dx,
                        prod ? prod->data<float>() : nullptr, a.outer, a.len, s);
    // dScale from dy * xhat, dB from dy: sums over the rows, then over Scale's broadcast axes.
    for (int i : {1, 2}) {
      if (!ctx.wantsOutput(i)) continue;
      const Tensor rowsView = (i == 1 ? *prod : dy).reshaped({a.outer, a.len});
      DW_ALLOC(out, ctx.output(i, DType::kFloat, scale.shape()));
      if (scale.size() == a.len) {
        reduceInto(be, ReduceOp::kSum, rowsView, {true, false}, out->data<float>());
        continue;
      }
      Tensor* sums = ctx.scratch(DType::kFloat, tail);
      if (!sums) return ctx.status();
      reduceInto(be, ReduceOp::kSum, rowsView, {true, false}, sums->data<float>());
      std::vector<bool> reduced(tail.size());
      const size_t lead = tail.size() - scale.rank();
      for (size_t d = 0; d < tail.size(); ++d)
        reduced[d] = tail[d] != 1 && (d < lead || scale.dim(d - lead) == 1);
      reduceInto(be, ReduceOp::kSum, *sums, reduced, out->data<float>());
    }
    return launched("LayerNormalizationGrad");
  }

 private:
  int64_t axis_;
};

// Copies `rows` rows of `width` bytes between pitched buffers on the stream.
Status copyRows(void* dst, int64_t dstPitch, const void* src, int64_t srcPitch, int64_t width,
                int64_t rows, cudaStream_t s) {
  if (width <= 0 || rows <= 0) return Status();
  return check(cudaMemcpy2DAsync(dst, static_cast<size_t>(dstPitch), src,
                                 static_cast<size_t>(srcPitch), static_cast<size_t>(width),
                                 static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s),
               "Concat copy");
}

class Concat : public Kernel {
 public:
  explicit Concat(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Shape& first = ctx.input(0).shape();
    auto ax = axisOf(axis_, first, "Concat");
    if (!ax) return ax.status();
    Shape out = first;
    out[*ax] = 0;
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      const Shape& s = ctx.input(i).shape();
      bool same = s.size() == first.size();
      for (size_t d = 0; same && d < s.size(); ++d)
        same = static_cast<int64_t>(d) == *ax || s[d] == first[d];
      if (!same)
        return Status::error("Concat: input " + std::to_string(i) + " " + shapeToString(s) +
                             " does not match input 0 " + shapeToString(first) + " outside axis " +
                             std::to_string(*ax));
      out[*ax] += s[*ax];
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    const Around a = around(out, *ax, false);
    const int64_t row = a.len * a.inner * 4;
    int64_t offset = 0;
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      const Tensor& xi = ctx.input(i);
      const int64_t width = xi.dim(*ax) * a.inner * 4;
      DW_RETURN_IF_ERROR(
          copyRows(static_cast<char*>(y->raw()) + offset, row, xi.raw(), width, width, a.outer, s));
      offset += width;
    }
    return Status();
  }

 private:
  int64_t axis_;
};

class ConcatGrad : public Kernel {
 public:
  explicit ConcatGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    auto ax = axisOf(axis_, dy.shape(), "ConcatGrad");
    if (!ax) return ax.status();
    const Around a = around(dy.shape(), *ax, false);
    const int64_t row = a.len * a.inner * 4;
    int64_t offset = 0;
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    for (size_t i = 1; i < ctx.numInputs(); ++i) {
      const Shape& xs = ctx.input(i).shape();
      if (xs.size() != dy.rank())
        return Status::error("ConcatGrad: input " + std::to_string(i) + " " + shapeToString(xs) +
                             " does not match dY " + shapeToString(dy.shape()));
      const int64_t width = xs[*ax] * a.inner * 4;
      if (offset + width > row)
        return Status::error("ConcatGrad: the inputs are larger than dY " +
                             shapeToString(dy.shape()) + " along axis " + std::to_string(*ax));
      if (ctx.wantsOutput(i - 1)) {
        DW_ALLOC(o, ctx.output(i - 1, DType::kFloat, xs));
        DW_RETURN_IF_ERROR(copyRows(o->raw(), width, static_cast<const char*>(dy.raw()) + offset,
                                    row, width, a.outer, s));
      }
      offset += width;
    }
    return Status();
  }

 private:
  int64_t axis_;
};

// Slice's starts, ends, axes and steps (inputs since opset 10, attributes before) are read on
// the host; the slice is a strided walk of the input (kernels/slice_plan.h).
class SliceInputs {
 public:
  SliceInputs(const KernelInit& init, int opset)
      : opset_(opset),
        starts_(init.attrs.getInts("starts")),
        ends_(init.attrs.getInts("ends")),
        axes_(init.attrs.getInts("axes")) {}
  // `first`: the input that holds starts.
  Result<SlicePlan> plan(const KernelContext& ctx, const Shape& x, size_t first) const {
    if (opset_ < 10) return planSlice(x, starts_, ends_, axes_, {});
    return planSlice(x, intsInput(ctx, first), intsInput(ctx, first + 1), intsInput(ctx, first + 2),
                     intsInput(ctx, first + 3));
  }

 private:
  int opset_;
  std::vector<int64_t> starts_, ends_, axes_;
};

Result<Strided> walk(const SlicePlan& p, const char* op) {
  DW_RETURN_IF_ERROR(rankOk(p.out, op));
  Strided w;
  w.rank = static_cast<int>(p.out.size());
  for (int d = 0; d < w.rank; ++d) {
    w.dims[d] = p.out[d];
    w.strides[d] = p.strides[d];
  }
  return w;
}

class Slice : public Kernel {
 public:
  explicit Slice(const KernelInit& init) : inputs_(init, init.opset) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto p = inputs_.plan(ctx, x.shape(), 1);
    if (!p) return p.status();
    auto w = walk(*p, "Slice");
    if (!w) return w.status();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, p->out));
    launchStridedCopy(fp(x) + p->base, *w, y->raw(), y->size(), 4,
                      cudaBackend(ctx.backend()).stream());
    return launched("Slice");
  }

 private:
  SliceInputs inputs_;
};

class SliceGrad : public Kernel {
 public:
  explicit SliceGrad(const KernelInit& init)
      : inputs_(init, static_cast<int>(init.attrs.getInt("opset", 13))) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Shape& x = ctx.input(1).shape();
    auto p = inputs_.plan(ctx, x, 2);
    if (!p) return p.status();
    if (dy.shape() != p->out)
      return Status::error("SliceGrad: dY has shape " + shapeToString(dy.shape()) + ", the slice " +
                           shapeToString(p->out));
    auto w = walk(*p, "SliceGrad");
    if (!w) return w.status();
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, x));
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    DW_CUDA_OK(check(cudaMemsetAsync(dx->raw(), 0, dx->bytes(), s), "SliceGrad"));
    launchStridedScatter(fp(dy), *w, dx->data<float>() + p->base, dy.size(), s);
    return launched("SliceGrad");
  }

 private:
  SliceInputs inputs_;
};

// Indices are read on the host, checked and wrapped there, and sent up as int64.
Result<std::vector<int64_t>> hostIndices(const Tensor& idx, int64_t len, const char* op) {
  std::vector<int64_t> v(static_cast<size_t>(idx.size()));
  for (int64_t j = 0; j < idx.size(); ++j) {
    int64_t r = idx.getInt(j);
    if (r < -len || r >= len)
      return Status::error(std::string(op) + ": index " + std::to_string(r) + " (at position " +
                           std::to_string(j) + ") is outside [" + std::to_string(-len) + ", " +
                           std::to_string(len - 1) + "]");
    v[static_cast<size_t>(j)] = r < 0 ? r + len : r;
  }
  return v;
}

Result<Tensor*> upload(KernelContext& ctx, const std::vector<int64_t>& v, cudaStream_t s) {
  Tensor* t = ctx.scratch(DType::kInt64, {static_cast<int64_t>(std::max<size_t>(v.size(), 1))});
  if (!t) return ctx.status();
  // From pageable memory the copy has read `v` when the call returns.
  DW_CUDA_OK(check(
      cudaMemcpyAsync(t->raw(), v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice, s),
      "uploading indices"));
  return t;
}

bool gatherSupported(const KernelInit&, const std::vector<DType>& t) {
  return t.size() == 2 && t[0] == DType::kFloat && (t[1] == DType::kInt64 || t[1] == DType::kInt32);
}

class Gather : public Kernel {
 public:
  explicit Gather(const KernelInit& init) : axis_(init.attrs.getInt("axis")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    if (data.rank() == 0) return Status::error("Gather: data must have rank 1 or more");
    auto ax = axisOf(axis_, data.shape(), "Gather");
    if (!ax) return ax.status();
    const Around a = around(data.shape(), *ax, false);
    auto rows = hostIndices(idx, a.len, "Gather");
    if (!rows) return rows.status();
    Shape out(data.shape().begin(), data.shape().begin() + *ax);
    out.insert(out.end(), idx.shape().begin(), idx.shape().end());
    out.insert(out.end(), data.shape().begin() + *ax + 1, data.shape().end());
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    auto dev = upload(ctx, *rows, s);
    if (!dev) return dev.status();
    launchGather(data.raw(), 4, (*dev)->data<int64_t>(), y->raw(), a.outer, a.len, idx.size(),
                 a.inner, s);
    return launched("Gather");
  }

 private:
  int64_t axis_;
};

class GatherGrad : public Kernel {
 public:
  explicit GatherGrad(const KernelInit& init) : axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Shape& data = ctx.input(1).shape();
    const Tensor& idx = ctx.input(2);
    auto ax = axisOf(axis_, data, "GatherGrad");
    if (!ax) return ax.status();
    const Around a = around(data, *ax, false);
    if (dy.size() != a.outer * idx.size() * a.inner)
      return Status::error("GatherGrad: dY " + shapeToString(dy.shape()) + " does not match data " +
                           shapeToString(data) + " gathered at " + std::to_string(idx.size()) +
                           " indices");
    auto rows = hostIndices(idx, a.len, "GatherGrad");
    if (!rows) return rows.status();
    // Each data row's positions among the indices, in order: a CSR list.
    std::vector<int64_t> start(static_cast<size_t>(a.len) + 1, 0), pos(rows->size());
    for (int64_t r : *rows) ++start[static_cast<size_t>(r) + 1];
    for (size_t r = 0; r < static_cast<size_t>(a.len); ++r) start[r + 1] += start[r];
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (size_t j = 0; j < rows->size(); ++j)
      pos[static_cast<size_t>(fill[static_cast<size_t>((*rows)[j])]++)] = static_cast<int64_t>(j);
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, data));
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    auto dStart = upload(ctx, start, s);
    if (!dStart) return dStart.status();
    auto dPos = upload(ctx, pos, s);
    if (!dPos) return dPos.status();
    launchGatherGrad(fp(dy), (*dStart)->data<int64_t>(), (*dPos)->data<int64_t>(),
                     dx->data<float>(), a.outer, a.len, idx.size(), a.inner, s);
    return launched("GatherGrad");
  }

 private:
  int64_t axis_;
};

bool concatGradSupported(const KernelInit&, const std::vector<DType>& t) {
  return !t.empty() && t[0] == DType::kFloat;
}

bool gatherGradSupported(const KernelInit&, const std::vector<DType>& t) {
  return t.size() == 3 && t[0] == DType::kFloat && (t[2] == DType::kInt64 || t[2] == DType::kInt32);
}

}  // namespace

void addTensorKernels(KernelRegistry& r) {
  add<Softmax>(r, "Softmax", &floatInputs);
  add<Softmax>(r, "LogSoftmax", &floatInputs);
  add<SoftmaxGrad>(r, "SoftmaxGrad", &floatInputs, kGradDomain);
  add<LayerNormalization>(r, "LayerNormalization", &floatInputs);
  add<LayerNormalizationGrad>(r, "LayerNormalizationGrad", &floatInputs, kGradDomain);
  add<Concat>(r, "Concat", &floatInputs);
  // The forward inputs give ConcatGrad their shapes only.
  add<ConcatGrad>(r, "ConcatGrad", &concatGradSupported, kGradDomain, 0, ~1u);
  // starts, ends, axes and steps are read on the host (inputs 1-4; SliceGrad's 2-5, after dY and
  // X, whose shape alone it reads).
  add<Slice>(r, "Slice", &firstFloat, "", 0x1eu);
  add<SliceGrad>(r, "SliceGrad", &firstFloat, kGradDomain, 0x3cu, 2u);
  add<Gather>(r, "Gather", &gatherSupported, "", 2u);
  add<GatherGrad>(r, "GatherGrad", &gatherGradSupported, kGradDomain, 4u, 2u);
}

}  // namespace dw::engine::cuda
