// Control flow: If, Loop and Scan run compiled subgraphs; the subgraphs read outer-scope values
// through the calling context's scope.
#include <algorithm>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

std::shared_ptr<Subgraph> subgraph(const KernelInit& init, const char* name) {
  auto it = init.subgraphs.find(name);
  return it == init.subgraphs.end() ? nullptr : it->second;
}

// Stacks per-iteration tensors along a new axis `axis`.
Result<Tensor> stack(const std::vector<Tensor>& parts, int64_t axis, bool reverse) {
  if (parts.empty()) return Tensor(DType::kFloat, {0});
  const Tensor& f = parts[0];
  const size_t r = f.rank() + 1;
  const int64_t a = normAxis(axis, r);
  Shape out = f.shape();
  out.insert(out.begin() + a, static_cast<int64_t>(parts.size()));
  Tensor y(f.dtype(), out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= f.dim(d);
  for (size_t d = a; d < f.rank(); ++d) inner *= f.dim(d);
  const int64_t n = static_cast<int64_t>(parts.size());
  const size_t es = dtypeSize(f.dtype());
  for (int64_t k = 0; k < n; ++k) {
    const Tensor& p = parts[reverse ? n - 1 - k : k];
    if (p.shape() != f.shape() || p.dtype() != f.dtype())
      return Status::error("scan outputs differ in shape between iterations");
    for (int64_t o = 0; o < outer; ++o) {
      if (f.dtype() == DType::kString)
        std::copy_n(p.strings().begin() + o * inner, inner,
                    y.strings().begin() + (o * n + k) * inner);
      else
        std::memcpy(static_cast<char*>(y.raw()) + (o * n + k) * inner * es,
                    static_cast<const char*>(p.raw()) + o * inner * es, inner * es);
    }
  }
  return y;
}

class If : public Kernel {
 public:
  explicit If(const KernelInit& init)
      : then_(subgraph(init, "then_branch")), else_(subgraph(init, "else_branch")) {
    if (!then_ || !else_) fail("If needs then_branch and else_branch");
  }
  Status compute(KernelContext& ctx) override {
    const bool c = ctx.input(0).getInt(0) != 0;
    auto out = (c ? then_ : else_)->run(ctx, {});
    if (!out) return out.status();
    for (size_t i = 0; i < out->size() && i < ctx.numOutputs(); ++i)
      ctx.setOutput(i, std::move((*out)[i]));
    return Status();
  }

 private:
  std::shared_ptr<Subgraph> then_, else_;
};

class Loop : public Kernel {
 public:
  explicit Loop(const KernelInit& init)
      : body_(subgraph(init, "body")), maxIterations_(init.maxLoopIterations) {
    if (!body_) fail("Loop needs a body");
  }
  Status compute(KernelContext& ctx) override {
    for (size_t i : {0, 1})
      if (ctx.hasInput(i) && ctx.input(i).size() != 1)
        return Status::error(std::string("Loop's ") + (i ? "cond" : "M (trip count)") +
                             " input must hold one value, it has shape " +
                             shapeToString(ctx.input(i).shape()));
    const int64_t maxTrip = ctx.hasInput(0) ? ctx.input(0).getInt(0) : INT64_MAX;
    bool cond = ctx.hasInput(1) ? ctx.input(1).getInt(0) != 0 : true;
    const size_t nState = ctx.numInputs() - 2;
    std::vector<Value> state;
    for (size_t i = 0; i < nState; ++i) {
      if (!ctx.hasInput(2 + i))
        return Status::error("Loop's loop-carried input " + std::to_string(2 + i) +
                             " is empty; every loop-carried value needs an initial value");
      state.push_back(ctx.inputValue(2 + i));
    }
    const size_t nScan = ctx.numOutputs() - nState;
    std::vector<std::vector<Tensor>> scans(nScan);
    size_t scanBytes = 0;
    for (int64_t it = 0; it < maxTrip && cond; ++it) {
      // A loop whose condition never turns false (or a trip count from a damaged file) would
      // otherwise hang the run: real models loop thousands of times, not millions.
      if (it == maxIterations_)
        return Status::error("Loop ran " + std::to_string(maxIterations_) +
                             " iterations without stopping (trip count " +
                             (ctx.hasInput(0) ? std::to_string(maxTrip) : "none") +
                             "); deepwire stops loops there: check the trip count input and the "
                             "body's condition output");
      std::vector<Value> in;
      in.push_back(Value(Tensor::fromVector(std::vector<int64_t>{it}, {})));
      Tensor c(DType::kBool, {});
      *c.data<bool>() = cond;
      in.push_back(Value(c));
      for (auto& s : state) in.push_back(s);
      auto out = body_->run(ctx, std::move(in));
      if (!out) return out.status();
      if (out->size() != 1 + nState + nScan)
        return Status::error("Loop body returned the wrong number of outputs");
      cond = (*out)[0].isTensor() ? (*out)[0].tensor.getInt(0) != 0 : cond;
      for (size_t i = 0; i < nState; ++i) state[i] = (*out)[1 + i];
      for (size_t i = 0; i < nScan; ++i) {
        scans[i].push_back((*out)[1 + nState + i].tensor);
        scanBytes += scans[i].back().bytes();
      }
      // The stacked scan outputs are one tensor in the end: refuse them once they pass the
      // memory limit instead of growing until the process is killed.
      if (scanBytes > ctx.pool().limit())
        return Status::error("Loop's scan outputs reached " + std::to_string(scanBytes) +
                             " bytes after " + std::to_string(it + 1) +
                             " iterations, over the memory limit of " +
                             std::to_string(ctx.pool().limit()) +
                             " bytes: check the trip count input and the body's condition output");
    }
    for (size_t i = 0; i < nState; ++i) ctx.setOutput(i, state[i]);
    for (size_t i = 0; i < nScan; ++i) {
      auto t = stack(scans[i], 0, false);
      if (!t) return t.status();
      ctx.setOutput(nState + i, Value(std::move(*t)));
    }
    return Status();
  }

 private:
  std::shared_ptr<Subgraph> body_;
  int64_t maxIterations_;
};

class Scan : public Kernel {
 public:
  explicit Scan(const KernelInit& init)
      : body_(subgraph(init, "body")),
        batched_(init.opset < 9),
        nScanIn_(init.attrs.getInt("num_scan_inputs", 0)),
        inAxes_(init.attrs.getInts("scan_input_axes")),
        inDirs_(init.attrs.getInts(init.opset < 9 ? "directions" : "scan_input_directions")),
        outAxes_(init.attrs.getInts("scan_output_axes")),
        outDirs_(init.attrs.getInts("scan_output_directions")) {
    if (!body_) fail("Scan needs a body");
  }

  Status compute(KernelContext& ctx) override {
    if (!batched_) {
      std::vector<Value> in;
      for (size_t i = 0; i < ctx.numInputs(); ++i) in.push_back(ctx.inputValue(i));
      auto out = scan(ctx, std::move(in));
      if (!out) return out.status();
      for (size_t i = 0; i < out->size(); ++i) ctx.setOutput(i, (*out)[i]);
      return Status();
    }
    // Opset 8: input 0 is sequence_lens, every other input and output has a leading batch
    // dimension; each batch entry is an opset-9 scan over its own slice.
    const size_t nIn = ctx.numInputs() - 1;
    if (nIn == 0 || !ctx.hasInput(1)) return Status::error("Scan needs state or scan inputs");
    if (ctx.input(1).rank() == 0)
      return Status::error("every Scan input must have the batch dimension first");
    const int64_t batch = ctx.input(1).dim(0);
    if (ctx.hasInput(0) && ctx.input(0).size() != batch)
      return Status::error("sequence_lens has " + std::to_string(ctx.input(0).size()) +
                           " values for a batch of " + std::to_string(batch));
    std::vector<std::vector<Tensor>> perOutput(ctx.numOutputs());
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Value> in;
      for (size_t i = 1; i <= nIn; ++i) {
        const Tensor& t = ctx.input(i);
        if (t.rank() == 0 || t.dim(0) != batch)
          return Status::error("every Scan input must have the batch dimension first");
        if (i > nIn - nScanIn_ && ctx.hasInput(0)) {
          if (t.rank() < 2)
            return Status::error("a Scan input of shape " + shapeToString(t.shape()) +
                                 " has no sequence axis after its batch axis");
          const int64_t len = ctx.input(0).getInt(b);
          if (len != t.dim(1))
            return Status::error(
                "Scan (opset 8) with sequence_lens shorter than the sequence "
                "is not supported");
        }
        auto slice = sliceAt(t, 0, b);
        if (!slice) return slice.status();
        in.push_back(Value(std::move(*slice)));
      }
      auto out = scan(ctx, std::move(in));
      if (!out) return out.status();
      for (size_t i = 0; i < out->size(); ++i) perOutput[i].push_back((*out)[i].tensor);
    }
    for (size_t i = 0; i < perOutput.size(); ++i) {
      auto t = stack(perOutput[i], 0, false);
      if (!t) return t.status();
      ctx.setOutput(i, Value(std::move(*t)));
    }
    return Status();
  }

 private:
  static Result<Tensor> sliceAt(const Tensor& t, int64_t a, int64_t pos) {
    Shape s = t.shape();
    s.erase(s.begin() + a);
    Tensor slice(t.dtype(), s);
    auto st = stridesOf(t.shape());
    Shape sub = t.shape();
    sub[a] = 1;
    Tensor view = slice.reshaped(sub);
    DW_RETURN_IF_ERROR(stridedCopyForKernels(t, view, sub, st, pos * st[a]));
    return slice;
  }

  // One opset-9 scan: states first, then scan inputs; returns final states then scan outputs.
  Result<std::vector<Value>> scan(KernelContext& ctx, std::vector<Value> inputs) {
    const size_t nIn = inputs.size();
    // The attributes must describe the node they are on: a damaged file's counts would index
    // past the inputs, the axes or the body's outputs.
    if (nScanIn_ < 1 || static_cast<size_t>(nScanIn_) > nIn ||
        (!inAxes_.empty() && static_cast<int64_t>(inAxes_.size()) != nScanIn_) ||
        (!inDirs_.empty() && static_cast<int64_t>(inDirs_.size()) != nScanIn_) ||
        nIn - nScanIn_ > ctx.numOutputs())
      return Status::error("Scan's num_scan_inputs (" + std::to_string(nScanIn_) +
                           "), scan_input_axes and scan_input_directions do not fit its " +
                           std::to_string(nIn) + " inputs and " + std::to_string(ctx.numOutputs()) +
                           " outputs");
    const size_t nState = nIn - nScanIn_;
    std::vector<Value> state(inputs.begin(), inputs.begin() + nState);
    std::vector<int64_t> axes;
    int64_t len = -1;
    for (int64_t k = 0; k < nScanIn_; ++k) {
      const Tensor& t = inputs[nState + k].tensor;
      if (!inAxes_.empty() && !validDimAxis(inAxes_[k], t.rank()))
        return axisError(inAxes_[k], t.rank());
      if (inAxes_.empty() && t.rank() == 0) return axisError(0, 0);
      int64_t a = inAxes_.empty() ? 0 : normAxis(inAxes_[k], t.rank());
      axes.push_back(a);
      if (len >= 0 && t.dim(a) != len) return Status::error("scan inputs differ in length");
      len = t.dim(a);
    }
    const size_t nScanOut = ctx.numOutputs() - nState;
    std::vector<std::vector<Tensor>> outs(nScanOut);
    for (int64_t it = 0; it < std::max<int64_t>(len, 0); ++it) {
      std::vector<Value> in = state;
      for (int64_t k = 0; k < nScanIn_; ++k) {
        const Tensor& t = inputs[nState + k].tensor;
        const int64_t pos = (!inDirs_.empty() && inDirs_[k]) ? len - 1 - it : it;
        auto slice = sliceAt(t, axes[k], pos);
        if (!slice) return slice.status();
        in.push_back(Value(std::move(*slice)));
      }
      auto out = body_->run(ctx, std::move(in));
      if (!out) return out.status();
      if (out->size() != nState + nScanOut)
        return Status::error("Scan's body returned " + std::to_string(out->size()) +
                             " values; the node has " + std::to_string(nState + nScanOut) +
                             " outputs");
      for (size_t i = 0; i < nState; ++i) state[i] = (*out)[i];
      for (size_t i = 0; i < nScanOut; ++i) outs[i].push_back((*out)[nState + i].tensor);
    }
    std::vector<Value> result = state;
    for (size_t i = 0; i < nScanOut; ++i) {
      int64_t a = outAxes_.empty() ? 0 : outAxes_[i];
      bool rev = !outDirs_.empty() && outDirs_[i];
      auto t = stack(outs[i], a, rev);
      if (!t) return t.status();
      result.push_back(Value(std::move(*t)));
    }
    return result;
  }

  std::shared_ptr<Subgraph> body_;
  bool batched_;
  int64_t nScanIn_;
  std::vector<int64_t> inAxes_, inDirs_, outAxes_, outDirs_;
};

}  // namespace

void addControlKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  r.add(h, "If", 1, kMaxOpset, &makeKernel<If>, false);
  r.add(h, "Loop", 1, kMaxOpset, &makeKernel<Loop>, false);
  r.add(h, "Scan", 1, kMaxOpset, &makeKernel<Scan>, false);
}

}  // namespace dw::engine
