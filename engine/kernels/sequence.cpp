// Sequence and optional ops. Sequences are vectors of (shared) tensors, so inserting or erasing
// copies tensor handles, not data.
#include <algorithm>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

Status seqIndex(const KernelContext& ctx, size_t i, int64_t n, bool allowEnd, int64_t* out) {
  int64_t p = ctx.input(i).getInt(0);
  if (p < 0) p += n;
  if (p < 0 || p > n || (!allowEnd && p == n))
    return Status::error("sequence position " + std::to_string(ctx.input(i).getInt(0)) +
                         " out of range for length " + std::to_string(n));
  *out = p;
  return Status();
}

class SequenceOp : public Kernel {
 public:
  explicit SequenceOp(const KernelInit& init) : op_(init.opType) {
    if (init.attrs.has("dtype"))
      dtype_ = dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("dtype")));
  }
  Status compute(KernelContext& ctx) override {
    if (op_ == "SequenceEmpty") {
      ctx.setOutput(0,
                    Value::makeSequence({}, dtype_ == DType::kUndefined ? DType::kFloat : dtype_));
      return Status();
    }
    if (op_ == "SequenceConstruct") {
      std::vector<Tensor> items;
      for (size_t i = 0; i < ctx.numInputs(); ++i) items.push_back(ctx.input(i));
      ctx.setOutput(0, Value::makeSequence(std::move(items),
                                           items.empty() ? DType::kUndefined : items[0].dtype()));
      return Status();
    }
    const Value& s = ctx.inputValue(0);
    if (!s.isSequence()) return Status::error("input 0 must be a sequence");
    const int64_t n = static_cast<int64_t>(s.sequence.size());
    if (op_ == "SequenceLength") {
      DW_ALLOC(y, ctx.output(0, DType::kInt64, {}));
      *y->data<int64_t>() = n;
      return Status();
    }
    if (op_ == "SequenceAt") {
      int64_t p;
      DW_RETURN_IF_ERROR(seqIndex(ctx, 1, n, false, &p));
      ctx.setOutput(0, Value(s.sequence[p]));
      return Status();
    }
    std::vector<Tensor> items = s.sequence;
    if (op_ == "SequenceInsert") {
      int64_t p = n;
      if (ctx.hasInput(2)) DW_RETURN_IF_ERROR(seqIndex(ctx, 2, n, true, &p));
      items.insert(items.begin() + p, ctx.input(1));
    } else {  // SequenceErase
      int64_t p = n - 1;
      if (ctx.hasInput(1)) DW_RETURN_IF_ERROR(seqIndex(ctx, 1, n, false, &p));
      if (n == 0) return Status::error("cannot erase from an empty sequence");
      items.erase(items.begin() + p);
    }
    ctx.setOutput(0, Value::makeSequence(std::move(items), s.elemType));
    return Status();
  }

 private:
  std::string op_;
  DType dtype_ = DType::kUndefined;
};

class SplitToSequence : public Kernel {
 public:
  explicit SplitToSequence(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", 0)), keep_(init.attrs.getInt("keepdims", 1) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    std::vector<int64_t> sizes;
    bool squeeze = false;
    if (!ctx.hasInput(1)) {
      sizes.assign(x.dim(a), 1);
      squeeze = !keep_;
    } else if (ctx.input(1).rank() == 0) {
      const int64_t c = ctx.input(1).getInt(0);
      if (c <= 0) return Status::error("split must be positive");
      for (int64_t o = 0; o < x.dim(a); o += c) sizes.push_back(std::min(c, x.dim(a) - o));
    } else {
      sizes = ctx.input(1).toInt64Vector();
    }
    DW_RETURN_IF_ERROR(checkSplitSizes(sizes, x.shape(), a));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    std::vector<Tensor> items;
    int64_t off = 0;
    const size_t es = dtypeSize(x.dtype());
    for (int64_t sz : sizes) {
      Shape s = x.shape();
      s[a] = sz;
      Tensor t(x.dtype(), s);
      for (int64_t o = 0; o < outer; ++o) {
        if (x.dtype() == DType::kString)
          std::copy_n(x.strings().begin() + (o * x.dim(a) + off) * inner, sz * inner,
                      t.strings().begin() + o * sz * inner);
        else
          std::memcpy(static_cast<char*>(t.raw()) + o * sz * inner * es,
                      static_cast<const char*>(x.raw()) + (o * x.dim(a) + off) * inner * es,
                      sz * inner * es);
      }
      if (squeeze) s.erase(s.begin() + a);
      items.push_back(t.reshaped(s));
      off += sz;
    }
    ctx.setOutput(0, Value::makeSequence(std::move(items), x.dtype()));
    return Status();
  }

 private:
  int64_t axis_;
  bool keep_;
};

class ConcatFromSequence : public Kernel {
 public:
  explicit ConcatFromSequence(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", 0)), newAxis_(init.attrs.getInt("new_axis", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Value& s = ctx.inputValue(0);
    if (!s.isSequence() || s.sequence.empty())
      return Status::error("input must be a non-empty sequence");
    std::vector<Tensor> items;
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : s.sequence) {
      if (newAxis_) {
        Shape sh = t.shape();
        const size_t r = sh.size() + 1;
        if (!validAxis(axis_, r)) return axisError(axis_, r);
        sh.insert(sh.begin() + normAxis(axis_, r), 1);
        items.push_back(t.reshaped(sh));
      } else {
        items.push_back(t);
      }
    }
    for (const auto& t : items) ptrs.push_back(&t);
    return concatTensors(ctx, ptrs, axis_, 0);
  }

 private:
  int64_t axis_;
  bool newAxis_;
};

class OptionalOp : public Kernel {
 public:
  explicit OptionalOp(const KernelInit& init) : op_(init.opType) {}
  Status compute(KernelContext& ctx) override {
    if (op_ == "Optional") {
      ctx.setOutput(0, ctx.hasInput(0) ? ctx.inputValue(0) : Value());
      return Status();
    }
    const bool has = ctx.hasInput(0);
    if (op_ == "OptionalHasElement") {
      DW_ALLOC(y, ctx.output(0, DType::kBool, {}));
      *y->data<bool>() = has;
      return Status();
    }
    if (!has) return Status::error("the optional has no element");
    ctx.setOutput(0, ctx.inputValue(0));
    return Status();
  }

 private:
  std::string op_;
};

}  // namespace

void addSequenceKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  for (const char* op : {"SequenceEmpty", "SequenceConstruct", "SequenceLength", "SequenceAt",
                         "SequenceInsert", "SequenceErase"})
    r.add(h, op, 1, kMaxOpset, &makeKernel<SequenceOp>, false);
  r.add(h, "SplitToSequence", 1, kMaxOpset, &makeKernel<SplitToSequence>, false);
  r.add(h, "ConcatFromSequence", 1, kMaxOpset, &makeKernel<ConcatFromSequence>, false);
  for (const char* op : {"Optional", "OptionalHasElement", "OptionalGetElement"})
    r.add(h, op, 1, kMaxOpset, &makeKernel<OptionalOp>, false);
}

}  // namespace dw::engine
