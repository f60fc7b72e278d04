// The "cuda" kernel table: kernels whose tensors live in GPU memory. Each reads its inputs and
// writes its outputs there, on the backend's stream; the device code is in the .cu files of
// this folder (launch.h). Ops missing here run on the cpu backend, which the planner picks.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cuda/kernel_util.h"
#include "engine/kernels/common.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"
#include "ops/binary_table.h"
#include "ops/dropout.h"
#include "ops/reduce_table.h"

namespace dw::engine::cuda {

namespace {

// ---- Element-wise ----

// The ops of ops/unary_table.h, on float tensors.
class Unary : public Kernel {
 public:
  explicit Unary(const KernelInit& init) {
    const ops::UnaryOp* row = ops::findUnaryOp(init.opType);
    auto u =
        row ? resolveUnary(*row, init.attrs) : Status::error("cuda: no unary op " + init.opType);
    if (u)
      u_ = *u;
    else
      fail(u.status().message());
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    launchUnary(u_.fn, u_.params, fp(x), y->data<float>(), x.size(),
                cudaBackend(ctx.backend()).stream());
    return launched("Unary");
  }

 private:
  UnaryInstance u_;
};

// Clip's bounds: attributes before opset 11, the optional inputs `first` and `first + 1` (scalars
// the host reads) since. Unbounded sides clip at float's range, as on the host.
struct ClipBounds {
  ClipBounds(const KernelInit& init, bool fromInputs)
      : fromInputs_(fromInputs),
        lo_(init.attrs.getFloat("min", std::numeric_limits<float>::lowest())),
        hi_(init.attrs.getFloat("max", std::numeric_limits<float>::max())) {}
  ops::UnaryParams params(KernelContext& ctx, int first) const {
    ops::UnaryParams p;
    p.alpha = lo_;
    p.beta = hi_;
    if (fromInputs_) {
      if (ctx.hasInput(first)) p.alpha = static_cast<float>(ctx.input(first).getDouble(0));
      if (ctx.hasInput(first + 1)) p.beta = static_cast<float>(ctx.input(first + 1).getDouble(0));
    }
    return p;
  }

 private:
  bool fromInputs_;
  float lo_, hi_;
};

class Clip : public Kernel {
 public:
  explicit Clip(const KernelInit& init) : bounds_(init, init.opset >= 11) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    for (int i = 1; i < 3; ++i)
      if (ctx.hasInput(i) && ctx.input(i).size() != 1)
        return Status::error("Clip: input " + std::to_string(i) + " (" + (i == 1 ? "min" : "max") +
                             ") must hold one value, not " + shapeToString(ctx.input(i).shape()));
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    launchUnary(ops::UnaryFn::kClip, bounds_.params(ctx, 1), fp(x), y->data<float>(), x.size(),
                cudaBackend(ctx.backend()).stream());
    return launched("Clip");
  }

 private:
  ClipBounds bounds_;
};

// The rows with a gradient, and Clip (bounds: the attributes min/max, or inputs 3 and 4).
bool unaryGradSupported(const KernelInit& init, const std::vector<DType>& t) {
  const std::string op = init.attrs.getString("op");
  if (op == "Clip") return init.numInputs <= 5 && floatInputs(init, t);
  const ops::UnaryOp* row = ops::findUnaryOp(op);
  return row && row->gradient && init.numInputs <= 3 && floatInputs(init, t);
}

class UnaryGrad : public Kernel {
 public:
  explicit UnaryGrad(const KernelInit& init)
      : clip_(init.attrs.getString("op") == "Clip"), bounds_(init, true) {
    if (clip_) return;
    const std::string name = init.attrs.getString("op");
    const ops::UnaryOp* row = ops::findUnaryOp(name);
    auto u = row && row->gradient ? resolveUnary(*row, init.attrs)
                                  : Status::error("cuda: no UnaryGrad of " + name);
    if (u)
      u_ = *u;
    else
      fail(u.status().message());
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    if (dy.shape() != x.shape() || y.shape() != x.shape())
      return Status::error("UnaryGrad: dY, X and Y must have the same shape");
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, dy.shape()));
    const ops::UnaryFn fn = clip_ ? ops::UnaryFn::kClip : u_.fn;
    launchUnaryGrad(fn, clip_ ? bounds_.params(ctx, 3) : u_.params, fp(dy), fp(x), fp(y),
                    dx->data<float>(), dy.size(), cudaBackend(ctx.backend()).stream());
    return launched("UnaryGrad");
  }

 private:
  bool clip_;
  ClipBounds bounds_;
  UnaryInstance u_;
};

// The ops of ops/binary_table.h marked for the cuda table: arithmetic on float, comparisons also
// on integers and bool. Integer arithmetic stays on the host: it computes shapes, which the host
// reads next.
bool binarySupported(const KernelInit& init, const std::vector<DType>& t) {
  const ops::BinaryOp* row = ops::findBinaryOp(init.opType);
  if (!row || !row->cuda || t.size() != 2 || t[0] != t[1]) return false;
  if (ops::kindOf(row->fn) != ops::BinaryKind::kCompare) return t[0] == DType::kFloat;
  ElemType e;
  return elemType(t[0], e);
}

class Binary : public Kernel {
 public:
  explicit Binary(const KernelInit& init) {
    const ops::BinaryOp* row = ops::findBinaryOp(init.opType);
    if (!row || !row->cuda) {
      fail("cuda: no binary op " + init.opType);
      return;
    }
    fn_ = row->fn;
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    ElemType e;
    if (a.dtype() != b.dtype() || !elemType(a.dtype(), e))
      return Status::error("cuda: unsupported dtypes " + std::string(dtypeName(a.dtype())) +
                           " and " + dtypeName(b.dtype()));
    auto shape = broadcastShapes({a.shape(), b.shape()});
    if (!shape) return shape.status();
    DW_RETURN_IF_ERROR(rankOk(*shape, "broadcast"));
    const bool cmp = ops::kindOf(fn_) == ops::BinaryKind::kCompare;
    DW_ALLOC(y, ctx.output(0, cmp ? DType::kBool : a.dtype(), *shape));
    launchBinary(fn_, e, a.raw(), broadcastStrides(a.shape(), *shape), b.raw(),
                 broadcastStrides(b.shape(), *shape), y->raw(), y->size(),
                 cudaBackend(ctx.backend()).stream());
    return launched("binary op");
  }

 private:
  ops::BinaryFn fn_ = ops::BinaryFn::kAdd;
};

bool whereSupported(const KernelInit&, const std::vector<DType>& t) {
  return t.size() == 3 && t[0] == DType::kBool && t[1] == DType::kFloat && t[2] == DType::kFloat;
}

class Where : public Kernel {
 public:
  explicit Where(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& c = ctx.input(0);
    const Tensor& a = ctx.input(1);
    const Tensor& b = ctx.input(2);
    auto shape = broadcastShapes({c.shape(), a.shape(), b.shape()});
    if (!shape) return shape.status();
    DW_RETURN_IF_ERROR(rankOk(*shape, "Where"));
    DW_ALLOC(y, ctx.output(0, DType::kFloat, *shape));
    launchWhere(c.data<uint8_t>(), broadcastStrides(c.shape(), *shape), fp(a),
                broadcastStrides(a.shape(), *shape), fp(b), broadcastStrides(b.shape(), *shape),
                y->data<float>(), y->size(), cudaBackend(ctx.backend()).stream());
    return launched("Where");
  }
};

bool castSupported(const KernelInit& init, const std::vector<DType>& t) {
  ElemType e;
  const DType to = dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("to")));
  return t.size() == 1 && elemType(t[0], e) && elemType(to, e);
}

class Cast : public Kernel {
 public:
  explicit Cast(const KernelInit& init)
      : to_(dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("to")))) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    ElemType from, to;
    if (!elemType(x.dtype(), from) || !elemType(to_, to))
      return Status::error("cuda: Cast between these dtypes is not implemented here");
    DW_ALLOC(y, ctx.output(0, to_, x.shape()));
    if (x.dtype() == to_) {
      DW_CUDA_OK(check(cudaMemcpyAsync(y->raw(), x.raw(), x.bytes(), cudaMemcpyDeviceToDevice,
                                       cudaBackend(ctx.backend()).stream()),
                       "Cast"));
      return Status();
    }
    launchCast(from, x.raw(), to, y->raw(), x.size(), cudaBackend(ctx.backend()).stream());
    return launched("Cast");
  }

 private:
  DType to_;
};

class Transpose : public Kernel {
 public:
  explicit Transpose(const KernelInit& init) : perm_(init.attrs.getInts("perm")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DW_RETURN_IF_ERROR(rankOk(x.shape(), "Transpose"));
    std::vector<int64_t> perm = perm_;
    if (perm.empty())
      for (size_t i = x.rank(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    if (perm.size() != x.rank()) return Status::error("Transpose: perm does not match the rank");
    const Strided in = contiguousOf(x.shape());
    Strided s;
    s.rank = static_cast<int>(x.rank());
    Shape out(x.rank());
    for (size_t d = 0; d < x.rank(); ++d) {
      const int64_t p = perm[d];
      if (p < 0 || p >= static_cast<int64_t>(x.rank()))
        return Status::error("Transpose: perm value out of range");
      out[d] = x.dim(p);
      s.dims[d] = x.dim(p);
      s.strides[d] = in.strides[p];
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    launchStridedCopy(x.raw(), s, y->raw(), y->size(), static_cast<int>(dtypeSize(x.dtype())),
                      cudaBackend(ctx.backend()).stream());
    return launched("Transpose");
  }

 private:
  std::vector<int64_t> perm_;
};

bool plainSupported(const KernelInit&, const std::vector<DType>& t) {
  return !t.empty() && t[0] != DType::kString && t[0] != DType::kUndefined;
}

// ---- Reductions ----

class Reduce : public Kernel {
 public:
  explicit Reduce(const KernelInit& init)
      : keep_(init.attrs.getInt("keepdims") != 0),
        noop_(init.attrs.getInt("noop_with_empty_axes", 0) != 0) {
    const ops::ReduceOp* row = ops::findReduceOp(init.opType);
    if (!row || !row->cuda) {
      fail("cuda: no reduction " + init.opType);
      return;
    }
    op_ = row->fn;
    // Before the table's axes-input opset the axes are an attribute.
    if (!row->axesAsInput(init.opset)) axes_ = init.attrs.getInts("axes");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DW_RETURN_IF_ERROR(rankOk(x.shape(), "reduction"));
    auto& be = cudaBackend(ctx.backend());
    // The reference kernels' geometry: the same axes rules and errors.
    auto plan =
        planReduce(x.shape(), ctx.hasInput(1) ? ctx.input(1).toInt64Vector() : axes_, keep_, noop_);
    if (!plan) return plan.status();
    if (plan->empty) {
      DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
      return check(
          cudaMemcpyAsync(y->raw(), x.raw(), x.bytes(), cudaMemcpyDeviceToDevice, be.stream()),
          "reduction");
    }
    std::vector<bool> reduced(x.rank());
    for (size_t d = 0; d < x.rank(); ++d) reduced[d] = plan->outKeep[d] == 1 && x.dim(d) != 1;
    DW_ALLOC(y, ctx.output(0, DType::kFloat, plan->outShape));
    reduceInto(be, op_, x, reduced, y->data<float>());
    return launched("reduction");
  }

 private:
  ReduceOp op_ = ReduceOp::kSum;
  bool keep_, noop_;
  std::vector<int64_t> axes_;
};

// The gradient of a broadcast: dY summed down to the target's shape.
class SumToShape : public Kernel {
 public:
  explicit SumToShape(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& g = ctx.input(0);
    const Shape& target = ctx.input(1).shape();
    if (sumToShapeByView(ctx, g, target)) return Status();
    auto b = broadcastShapes({g.shape(), target});
    if (!b || *b != g.shape() || target.size() > g.rank())
      return Status::error("cannot reduce a gradient of shape " + shapeToString(g.shape()) +
                           " to " + shapeToString(target));
    DW_RETURN_IF_ERROR(rankOk(g.shape(), "SumToShape"));
    std::vector<bool> reduced(g.rank(), false);
    const size_t lead = g.rank() - target.size();
    for (size_t d = 0; d < g.rank(); ++d)
      reduced[d] = d < lead || (target[d - lead] == 1 && g.dim(d) != 1);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, target));
    reduceInto(cudaBackend(ctx.backend()), ReduceOp::kSum, g, reduced, y->data<float>());
    return launched("SumToShape");
  }
};

bool reduceGradSupported(const KernelInit& init, const std::vector<DType>& t) {
  const std::string op = init.attrs.getString("op");
  return (op == "ReduceSum" || op == "ReduceMean") && firstFloat(init, t);
}

// dX of ReduceSum (dY broadcast back) and ReduceMean (divided by the count).
class ReduceGrad : public Kernel {
 public:
  explicit ReduceGrad(const KernelInit& init)
      : mean_(init.attrs.getString("op") == "ReduceMean"),
        axes_(init.attrs.getInts("axes")),
        noop_(init.attrs.getInt("noop_with_empty_axes", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    // The forward reduction's geometry: x's shape with the reduced axes 1, as dY has it.
    auto plan =
        planReduce(x.shape(), ctx.hasInput(3) ? ctx.input(3).toInt64Vector() : axes_, true, noop_);
    if (!plan) return plan.status().withContext("ReduceGrad");
    if (plan->empty) {
      ctx.setOutput(0, ctx.inputValue(0));
      return Status();
    }
    DW_RETURN_IF_ERROR(rankOk(x.shape(), "ReduceGrad"));
    const Shape& red = plan->outKeep;
    const int64_t count = x.size() / std::max<int64_t>(numElements(red), 1);
    if (numElements(red) != dy.size())
      return Status::error("ReduceGrad: gradient shape does not match the reduction");
    auto& be = cudaBackend(ctx.backend());
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, x.shape()));
    launchStridedCopy(dy.raw(), broadcastStrides(red, x.shape()), dx->raw(), dx->size(), 4,
                      be.stream());
    if (mean_)
      launchScale(dx->data<float>(), dx->size(), 1.f / static_cast<float>(count), be.stream());
    return launched("ReduceGrad");
  }

 private:
  bool mean_;
  std::vector<int64_t> axes_;
  bool noop_;
};

bool argSupported(const KernelInit&, const std::vector<DType>& t) {
  return !t.empty() && t[0] == DType::kFloat;
}

class ArgExtreme : public Kernel {
 public:
  explicit ArgExtreme(const KernelInit& init)
      : max_(init.opType == "ArgMax"),
        axis_(init.attrs.getInt("axis")),
        keep_(init.attrs.getInt("keepdims") != 0),
        last_(init.attrs.getInt("select_last_index", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validAxis(axis_, x.rank())) return Status::error("ArgMax/ArgMin: axis out of range");
    const size_t ax = static_cast<size_t>(normAxis(axis_, x.rank()));
    if (x.dim(ax) == 0) return Status::error("ArgMax/ArgMin over an empty axis");
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < ax; ++d) outer *= x.dim(d);
    for (size_t d = ax + 1; d < x.rank(); ++d) inner *= x.dim(d);
    Shape out = x.shape();
    if (keep_)
      out[ax] = 1;
    else
      out.erase(out.begin() + static_cast<long>(ax));
    DW_ALLOC(y, ctx.output(0, DType::kInt64, out));
    launchArgExtreme(max_, last_, fp(x), outer, x.dim(ax), inner, y->data<int64_t>(),
                     cudaBackend(ctx.backend()).stream());
    return launched("ArgMax");
  }

 private:
  bool max_;
  int64_t axis_;
  bool keep_, last_;
};

// ---- Softmax cross-entropy ----

bool labelsOk(DType t) {
  return t == DType::kInt64 || t == DType::kInt32;
}

bool sceSupported(const KernelInit& init, const std::vector<DType>& t) {
  const bool weights =
      t.size() > 2 && init.node && init.node->input_size() > 2 && !init.node->input(2).empty();
  return t.size() >= 2 && t[0] == DType::kFloat && labelsOk(t[1]) && !weights;
}

class SoftmaxCrossEntropy : public Kernel {
 public:
  explicit SoftmaxCrossEntropy(const KernelInit& init)
      : reduction_(init.attrs.getString("reduction", "mean")),
        hasIgnore_(init.attrs.has("ignore_index")),
        ignore_(init.attrs.getInt("ignore_index", 0)) {
    if (reduction_ != "none" && reduction_ != "mean" && reduction_ != "sum")
      fail("SoftmaxCrossEntropyLoss: unknown reduction '" + reduction_ + "'");
  }
  Status beforeReplay() override { return badHost_ ? takeBadLabel() : Status(); }
  ~SoftmaxCrossEntropy() override {
    if (badHost_) cudaFreeHost(badHost_);
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    if (x.rank() < 2) return Status::error("SoftmaxCrossEntropyLoss: scores need rank >= 2");
    const int64_t n = x.dim(0), c = x.dim(1), d = x.size() / std::max<int64_t>(n * c, 1);
    if (labels.size() != n * d)
      return Status::error("SoftmaxCrossEntropyLoss: labels of shape " +
                           shapeToString(labels.shape()) + " do not match scores of shape " +
                           shapeToString(x.shape()));
    auto& be = cudaBackend(ctx.backend());
    Tensor* lp = ctx.output(1, DType::kFloat, x.shape());
    if (!lp) return ctx.status();
    Shape perShape = labels.shape();
    Tensor* per = reduction_ == "none" ? ctx.output(0, DType::kFloat, perShape)
                                       : ctx.scratch(DType::kFloat, perShape);
    if (!per) return ctx.status();
    const bool l64 = labels.dtype() == DType::kInt64;
    // Bad labels are found on the GPU without waiting for it: the kernel records one, the copy
    // back lands before this run's outputs do, and the next call reports it (the loss of the
    // batch that had it is NaN).
    classes_ = c;
    DW_RETURN_IF_ERROR(checkLabels(be));
    // All bits set: -1, without a copy from pageable memory (which would wait for the GPU).
    DW_CUDA_OK(
        check(cudaMemsetAsync(bad_.raw(), 0xFF, sizeof(int64_t), be.stream()), "label check"));
    launchSoftmaxCrossEntropy(fp(x), labels.raw(), l64, n, c, d, ignore_, hasIgnore_,
                              lp->data<float>(), per->data<float>(), bad_.data<int64_t>(),
                              be.stream());
    DW_CUDA_OK(check(
        cudaMemcpyAsync(badHost_, bad_.raw(), sizeof(int64_t), cudaMemcpyDeviceToHost, be.stream()),
        "label check"));
    if (reduction_ != "none") {
      DW_ALLOC(y, ctx.output(0, DType::kFloat, {}));
      float* count = nullptr;
      if (reduction_ == "mean" && hasIgnore_) {
        Tensor* cnt = ctx.scratch(DType::kFloat, {1});
        if (!cnt) return ctx.status();
        count = cnt->data<float>();
        launchCountNotIgnored(labels.raw(), l64, n * d, ignore_, count, be.stream());
      }
      launchLossReduce(per->data<float>(), n * d, reduction_ == "mean", count, y->data<float>(),
                       be.stream());
    }
    return launched("SoftmaxCrossEntropyLoss");
  }

 private:
  static constexpr int64_t kNoBadLabel = -1;

  // The label the previous call found outside [0, classes), if any; sets up the buffers on
  // first use.
  Status checkLabels(CudaBackend& be) {
    if (!badHost_) {
      DW_CUDA_OK(check(
          cudaHostAlloc(reinterpret_cast<void**>(&badHost_), sizeof(int64_t), cudaHostAllocDefault),
          "label check"));
      *badHost_ = kNoBadLabel;
      auto b = be.allocate(sizeof(int64_t));
      if (!b) return b.status();
      bad_ = Tensor(DType::kInt64, {1}, *b);
    }
    return takeBadLabel();
  }
  Status takeBadLabel() {
    const int64_t bad = *badHost_;
    *badHost_ = kNoBadLabel;
    if (bad != kNoBadLabel)
      return Status::error("SoftmaxCrossEntropyLoss: label " + std::to_string(bad) +
                           " (in the previous batch) is outside [0, " + std::to_string(classes_) +
                           "): the labels must be class indices below the number of scores");
    return Status();
  }

  std::string reduction_;
  bool hasIgnore_;
  int64_t ignore_;
  Tensor bad_;                  // device: a bad label of the last call, or -1
  int64_t* badHost_ = nullptr;  // pinned: where it is copied back
  int64_t classes_ = 0;
};

bool sceGradSupported(const KernelInit& init, const std::vector<DType>& t) {
  const bool weights = init.node && init.node->input_size() > 3 && !init.node->input(3).empty();
  return t.size() >= 3 && t[0] == DType::kFloat && t[1] == DType::kFloat && labelsOk(t[2]) &&
         !weights;
}

class SoftmaxCrossEntropyGrad : public Kernel {
 public:
  explicit SoftmaxCrossEntropyGrad(const KernelInit& init)
      : reduction_(init.attrs.getString("reduction", "mean")),
        hasIgnore_(init.attrs.has("ignore_index")),
        ignore_(init.attrs.getInt("ignore_index", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dl = ctx.input(0);
    const Tensor& lp = ctx.input(1);
    const Tensor& labels = ctx.input(2);
    if (lp.rank() < 2) return Status::error("log_prob must have rank >= 2");
    const int64_t n = lp.dim(0), c = lp.dim(1), d = lp.size() / std::max<int64_t>(n * c, 1);
    if (labels.size() != n * d) return Status::error("labels do not match the scores");
    auto& be = cudaBackend(ctx.backend());
    const bool l64 = labels.dtype() == DType::kInt64;
    const bool perSample = reduction_ == "none";
    if (perSample && dl.size() != n * d)
      return Status::error("SoftmaxCrossEntropyLossGrad: the loss gradient has " +
                           std::to_string(dl.size()) + " elements, expected " +
                           std::to_string(n * d));
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, lp.shape()));
    float factor = 1.f;
    const float* scale = fp(dl);
    if (reduction_ == "mean") {
      if (hasIgnore_) {
        // The count of kept labels divides dL on the device: no copy to the host.
        Tensor* cnt = ctx.scratch(DType::kFloat, {1});
        Tensor* s = ctx.scratch(DType::kFloat, {1});
        if (!cnt || !s) return ctx.status();
        launchCountNotIgnored(labels.raw(), l64, n * d, ignore_, cnt->data<float>(), be.stream());
        launchBinary(ops::BinaryFn::kDiv, ElemType::kFloat, dl.raw(), contiguousOf({1}), cnt->raw(),
                     contiguousOf({1}), s->raw(), 1, be.stream());
        scale = s->data<float>();
      } else {
        factor = 1.f / static_cast<float>(n * d);
      }
    }
    launchSoftmaxCrossEntropyGrad(scale, perSample, factor, fp(lp), labels.raw(), l64, n, c, d,
                                  ignore_, hasIgnore_, dx->data<float>(), be.stream());
    return launched("SoftmaxCrossEntropyLossGrad");
  }

 private:
  std::string reduction_;
  bool hasIgnore_;
  int64_t ignore_;
};

// ---- Dropout in training graphs (DropoutTraining / DropoutGrad) ----

// The ratio: the optional input `index` (kept on the host) or the attribute.
Result<double> dropoutRatio(KernelContext& ctx, int index, float attr) {
  const double r = ctx.hasInput(index) ? ctx.input(index).getDouble(0) : attr;
  if (!(r >= 0 && r < 1)) return Status::error("Dropout ratio must be in [0, 1)");
  return r;
}

// As the cpu's DropoutTraining (engine/kernels/dropout_training.cpp): under the trainer, whose
// run says the step and the batch's place in the global batch, the mask is bit for bit the
// cpu's. Without that (a plain session run) each call takes the next key of step -1's
// sequence, which differs from the cpu's stream.
class DropoutTraining : public Kernel {
 public:
  explicit DropoutTraining(const KernelInit& init)
      : ratio_(init.attrs.getFloat("ratio", 0.5f)),
        seed_(static_cast<uint64_t>(init.attrs.getInt("seed", 0))) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto ratio = dropoutRatio(ctx, 1, ratio_);
    if (!ratio) return ratio.status();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    DW_ALLOC(m, ctx.output(1, DType::kBool, x.shape()));
    const RunInfo* run = ctx.runInfo();
    const auto d = calls_.next(seed_, run ? run->step : -1, run ? run->sampleOffset : 0, x.size(),
                               x.rank() ? x.dim(0) : 0);
    launchDropout(fp(x), x.size(), d.key, d.first, *ratio, static_cast<float>(1.0 / (1.0 - *ratio)),
                  y->data<float>(), m->data<uint8_t>(), cudaBackend(ctx.backend()).stream());
    return launched("DropoutTraining");
  }

 private:
  float ratio_;
  uint64_t seed_;
  ops::DropoutCalls calls_;
};

class DropoutGrad : public Kernel {
 public:
  explicit DropoutGrad(const KernelInit& init) : ratio_(init.attrs.getFloat("ratio", 0.5f)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& mask = ctx.input(1);
    if (mask.size() != dy.size() || mask.dtype() != DType::kBool)
      return Status::error("DropoutGrad: the mask must be bool with dY's " +
                           std::to_string(dy.size()) + " elements");
    auto ratio = dropoutRatio(ctx, 2, ratio_);
    if (!ratio) return ratio.status();
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, dy.shape()));
    launchDropoutGrad(fp(dy), mask.data<uint8_t>(), dy.size(),
                      static_cast<float>(1.0 / (1.0 - *ratio)), dx->data<float>(),
                      cudaBackend(ctx.backend()).stream());
    return launched("DropoutGrad");
  }

 private:
  float ratio_;
};

// The reference table's view kernels (they only relabel the shape of the same buffer) serve device
// tensors as they are; their shape and axes inputs are read on the host.
void addViews(KernelRegistry& r) {
  const std::pair<const char*, uint32_t> views[] = {
      {"Identity", 0}, {"Reshape", 2u}, {"Flatten", 0}, {"Squeeze", 2u}, {"Unsqueeze", 2u}};
  for (const auto& [op, hostInputs] : views) {
    std::vector<KernelDef> found;
    for (const KernelDef* d : r.all())
      if (d->table == kReferenceTable && d->domain.empty() && d->op == op) found.push_back(*d);
    for (KernelDef d : found) {
      d.table = kCudaTable;
      d.hostInputs = hostInputs;
      d.supports = &plainSupported;
      r.add(std::move(d));
    }
  }
}

}  // namespace

void registerKernels(KernelRegistry& r) {
  for (const auto& op : ops::unaryOps())
    if (op.tableKernels()) add<Unary>(r, op.name, &floatInputs);
  add<Clip>(r, "Clip", &floatInputs, "", 6u);
  add<UnaryGrad>(r, "UnaryGrad", &unaryGradSupported, kGradDomain, 24u);
  for (const auto& op : ops::binaryOps())
    if (op.cuda) add<Binary>(r, op.name, &binarySupported);
  add<Where>(r, "Where", &whereSupported);
  add<Cast>(r, "Cast", &castSupported);
  add<Transpose>(r, "Transpose", &plainSupported);
  for (const auto& red : ops::reduceOps())
    if (red.cuda) add<Reduce>(r, red.name, &firstFloat, "", 2u);
  add<SumToShape>(r, "SumToShape", &firstFloat, kGradDomain, 0, 2u);
  add<ReduceGrad>(r, "ReduceGrad", &reduceGradSupported, kGradDomain, 8u);
  add<ArgExtreme>(r, "ArgMax", &argSupported);
  add<ArgExtreme>(r, "ArgMin", &argSupported);
  add<SoftmaxCrossEntropy>(r, "SoftmaxCrossEntropyLoss", &sceSupported);
  add<SoftmaxCrossEntropyGrad>(r, "SoftmaxCrossEntropyLossGrad", &sceGradSupported, kGradDomain);
  add<DropoutTraining>(r, "DropoutTraining", &firstFloat, kGradDomain, 2u);
  add<DropoutGrad>(r, "DropoutGrad", &firstFloat, kGradDomain, 4u);
  addViews(r);
  addMatMulKernels(r);
  addNnKernels(r);
  addTensorKernels(r);
}

}  // namespace dw::engine::cuda
