// Indexing ops: gathers, scatters, TopK, NonZero, OneHot, Compress. Indices are validated
// (negative values wrap once) and out-of-range indices are errors, never memory accesses.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

Status fixIndex(int64_t& i, int64_t n) {
  const int64_t given = i;  // the message names the file's value, not the wrapped one
  if (i < 0) i += n;
  if (i < 0 || i >= n)
    return Status::error("index " + std::to_string(given) + " out of range [-" + std::to_string(n) +
                         ", " + std::to_string(n) + ")");
  return Status();
}

template <class F>
Status dispatchData(const Tensor& t, F&& f) {
  if (t.dtype() == DType::kString) return f(std::string{});
  return dispatchBytes(t.dtype(), std::forward<F>(f));
}

template <class T>
T* elems(Tensor& t) {
  if constexpr (std::is_same_v<T, std::string>)
    return t.strings().data();
  else
    return t.data<T>();
}
template <class T>
const T* elems(const Tensor& t) {
  if constexpr (std::is_same_v<T, std::string>)
    return t.strings().data();
  else
    return t.data<T>();
}

class Gather : public Kernel {
 public:
  explicit Gather(const KernelInit& init) : axis_(init.attrs.getInt("axis")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    Shape out(x.shape().begin(), x.shape().begin() + a);
    out.insert(out.end(), idx.shape().begin(), idx.shape().end());
    out.insert(out.end(), x.shape().begin() + a + 1, x.shape().end());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const int64_t n = x.dim(a), ni = idx.size();
    std::vector<int64_t> ind = idx.toInt64Vector();
    for (auto& i : ind) DW_RETURN_IF_ERROR(fixIndex(i, n));
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    return dispatchData(x, [&](auto z) {
      using T = decltype(z);
      const T* s = elems<T>(x);
      T* d = elems<T>(*y);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < ni; ++j)
          std::copy_n(s + (o * n + ind[j]) * inner, inner, d + (o * ni + j) * inner);
      return Status();
    });
  }

 private:
  int64_t axis_;
};

// GatherElements and ScatterElements share the index walk.
class Elements : public Kernel {
 public:
  explicit Elements(const KernelInit& init)
      : scatter_(init.opType != "GatherElements"),
        axis_(init.attrs.getInt("axis", 0)),
        reduction_(init.attrs.getString("reduction", "none")) {
    if (reduction_ != "none" && reduction_ != "add" && reduction_ != "mul")
      fail("reduction '" + reduction_ + "' is not supported");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    if (!validAxis(axis_, x.rank()) || idx.rank() != x.rank() || x.rank() == 0)
      return Status::error("axis " + std::to_string(axis_) + " or indices of shape " +
                           shapeToString(idx.shape()) + " do not fit data of shape " +
                           shapeToString(x.shape()) + " (the same rank, at least 1)");
    const int64_t a = normAxis(axis_, x.rank());
    // Off the axis an index position addresses the same position of the data, so it must exist
    // there; each update pairs with one index.
    for (size_t d = 0; d < x.rank(); ++d)
      if (static_cast<int64_t>(d) != a && idx.dim(d) > x.dim(d))
        return Status::error("indices of shape " + shapeToString(idx.shape()) +
                             " do not fit data of shape " + shapeToString(x.shape()) +
                             " off axis " + std::to_string(a) + " (dimension " + std::to_string(d) +
                             ")");
    if (scatter_ && ctx.input(2).dtype() != x.dtype())
      return Status::error(std::string("updates are ") + dtypeName(ctx.input(2).dtype()) +
                           ", data " + dtypeName(x.dtype()) + "; they must be of one type");
    if (scatter_ && ctx.input(2).shape() != idx.shape())
      return Status::error("updates of shape " + shapeToString(ctx.input(2).shape()) +
                           " differ from indices of shape " + shapeToString(idx.shape()) +
                           "; ScatterElements takes one update per index");
    auto xs = stridesOf(x.shape());
    auto is = stridesOf(idx.shape());
    std::vector<int64_t> ind = idx.toInt64Vector();
    std::vector<int64_t> offs(ind.size());
    // Map each index position to the data offset it addresses.
    std::vector<int64_t> pos(idx.rank(), 0);
    for (int64_t k = 0; k < idx.size(); ++k) {
      int64_t v = ind[k];
      DW_RETURN_IF_ERROR(fixIndex(v, x.dim(a)));
      int64_t off = 0;
      for (size_t d = 0; d < idx.rank(); ++d)
        off += (static_cast<int64_t>(d) == a ? v : pos[d]) * xs[d];
      offs[k] = off;
      for (size_t d = idx.rank(); d-- > 0;) {
        if (++pos[d] < idx.dim(d)) break;
        pos[d] = 0;
      }
    }
    if (!scatter_) {
      DW_ALLOC(y, ctx.output(0, x.dtype(), idx.shape()));
      return dispatchData(x, [&](auto z) {
        using T = decltype(z);
        const T* s = elems<T>(x);
        T* d = elems<T>(*y);
        for (size_t k = 0; k < offs.size(); ++k) d[k] = s[offs[k]];
        return Status();
      });
    }
    const Tensor& upd = ctx.input(2);
    DW_RETURN_IF_ERROR(copyToOutput(ctx, 0, x, x.shape()));
    Tensor& y = ctx.outputs_[0] ? ctx.outputs_[0]->tensor : ctx.dropped_.back().tensor;
    if (reduction_ == "none") {
      return dispatchData(x, [&](auto z) {
        using T = decltype(z);
        const T* u = elems<T>(upd);
        T* d = elems<T>(y);
        for (size_t k = 0; k < offs.size(); ++k) d[offs[k]] = u[k];
        return Status();
      });
    }
    const bool add = reduction_ == "add";
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* u = upd.data<T>();
      T* d = y.data<T>();
      for (size_t k = 0; k < offs.size(); ++k)
        d[offs[k]] = add ? static_cast<T>(d[offs[k]] + u[k]) : static_cast<T>(d[offs[k]] * u[k]);
      return Status();
    });
  }

 private:
  bool scatter_;
  int64_t axis_;
  std::string reduction_;
};

class GatherND : public Kernel {
 public:
  explicit GatherND(const KernelInit& init) : batch_(init.attrs.getInt("batch_dims", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const int64_t q = static_cast<int64_t>(idx.rank()), r = static_cast<int64_t>(x.rank());
    if (q < 1) return Status::error("indices must have rank >= 1");
    if (batch_ < 0 || batch_ >= std::min(q, r))
      return Status::error("batch_dims " + std::to_string(batch_) +
                           " must be at least 0 and below both ranks (indices " +
                           std::to_string(q) + ", data " + std::to_string(r) + ")");
    for (int64_t d = 0; d < batch_; ++d)
      if (idx.dim(d) != x.dim(d))
        return Status::error("the batch dimensions of indices " + shapeToString(idx.shape()) +
                             " and data " + shapeToString(x.shape()) + " differ");
    const int64_t k = idx.dim(q - 1);
    if (k + batch_ > r) return Status::error("last indices dimension too large");
    Shape out(idx.shape().begin(), idx.shape().end() - 1);
    for (int64_t d = batch_ + k; d < r; ++d) out.push_back(x.dim(d));
    int64_t batchN = 1;
    for (int64_t d = 0; d < batch_; ++d) batchN *= x.dim(d);
    int64_t slice = 1;
    for (int64_t d = batch_ + k; d < r; ++d) slice *= x.dim(d);
    auto xs = stridesOf(x.shape());
    const int64_t perBatchData = batch_ ? xs[batch_ - 1] : x.size();
    const int64_t tuples = k ? idx.size() / k : idx.size();
    const int64_t perBatchTuples = tuples / std::max<int64_t>(batchN, 1);
    auto ind = idx.toInt64Vector();
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    std::vector<int64_t> offs(tuples);
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = (t / std::max<int64_t>(perBatchTuples, 1)) * perBatchData;
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = ind[t * k + j];
        DW_RETURN_IF_ERROR(fixIndex(v, x.dim(batch_ + j)));
        off += v * xs[batch_ + j];
      }
      offs[t] = off;
    }
    return dispatchData(x, [&](auto z) {
      using T = decltype(z);
      const T* s = elems<T>(x);
      T* d = elems<T>(*y);
      for (int64_t t = 0; t < tuples; ++t) std::copy_n(s + offs[t], slice, d + t * slice);
      return Status();
    });
  }

 private:
  int64_t batch_;
};

class ScatterND : public Kernel {
 public:
  explicit ScatterND(const KernelInit& init)
      : reduction_(init.attrs.getString("reduction", "none")) {
    if (reduction_ != "none" && reduction_ != "add" && reduction_ != "mul")
      fail("reduction '" + reduction_ + "' is not supported");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    if (idx.rank() == 0 || idx.dim(idx.rank() - 1) > static_cast<int64_t>(x.rank()))
      return Status::error("indices of shape " + shapeToString(idx.shape()) +
                           " must end in a dimension of at most the data's rank " +
                           std::to_string(x.rank()));
    const int64_t k = idx.dim(idx.rank() - 1);
    // One update slice per index tuple: indices' leading dims, then the data's trailing ones.
    Shape want(idx.shape().begin(), idx.shape().end() - 1);
    want.insert(want.end(), x.shape().begin() + k, x.shape().end());
    if (upd.dtype() != x.dtype())
      return Status::error(std::string("updates are ") + dtypeName(upd.dtype()) + ", data " +
                           dtypeName(x.dtype()) + "; they must be of one type");
    if (upd.shape() != want)
      return Status::error("updates have shape " + shapeToString(upd.shape()) + "; indices " +
                           shapeToString(idx.shape()) + " into data " + shapeToString(x.shape()) +
                           " take " + shapeToString(want));
    int64_t slice = 1;
    for (size_t d = k; d < x.rank(); ++d) slice *= x.dim(d);
    auto xs = stridesOf(x.shape());
    auto ind = idx.toInt64Vector();
    const int64_t tuples = k ? idx.size() / k : 0;
    DW_RETURN_IF_ERROR(copyToOutput(ctx, 0, x, x.shape()));
    Tensor& y = ctx.outputs_[0] ? ctx.outputs_[0]->tensor : ctx.dropped_.back().tensor;
    std::vector<int64_t> offs(tuples);
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = ind[t * k + j];
        DW_RETURN_IF_ERROR(fixIndex(v, x.dim(j)));
        off += v * xs[j];
      }
      offs[t] = off;
    }
    if (reduction_ == "none") {
      return dispatchData(x, [&](auto z) {
        using T = decltype(z);
        for (int64_t t = 0; t < tuples; ++t)
          std::copy_n(elems<T>(upd) + t * slice, slice, elems<T>(y) + offs[t]);
        return Status();
      });
    }
    const bool add = reduction_ == "add";
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      for (int64_t t = 0; t < tuples; ++t)
        for (int64_t e = 0; e < slice; ++e) {
          T& d = y.data<T>()[offs[t] + e];
          const T u = upd.data<T>()[t * slice + e];
          d = add ? static_cast<T>(d + u) : static_cast<T>(d * u);
        }
      return Status();
    });
  }

 private:
  std::string reduction_;
};

class OneHot : public Kernel {
 public:
  explicit OneHot(const KernelInit& init) : axis_(init.attrs.getInt("axis", -1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& idx = ctx.input(0);
    const int64_t depth = static_cast<int64_t>(ctx.input(1).getDouble(0));
    const Tensor& values = ctx.input(2);
    const size_t r = idx.rank() + 1;
    if (!validAxis(axis_, r)) return axisError(axis_, r);
    const int64_t a = normAxis(axis_, r);
    Shape out(idx.shape().begin(), idx.shape().begin() + a);
    out.push_back(depth);
    out.insert(out.end(), idx.shape().begin() + a, idx.shape().end());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= idx.dim(d);
    for (size_t d = a; d < idx.rank(); ++d) inner *= idx.dim(d);
    DW_ALLOC(y, ctx.output(0, values.dtype(), out));
    return dispatchBytes(values.dtype(), [&](auto z) {
      using T = decltype(z);
      const T off = values.data<T>()[0], on = values.data<T>()[1];
      T* d = y->data<T>();
      std::fill_n(d, y->size(), off);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t v = static_cast<int64_t>(idx.getDouble(o * inner + i));
          if (v < 0) v += depth;
          if (v >= 0 && v < depth) d[(o * depth + v) * inner + i] = on;
        }
      return Status();
    });
  }

 private:
  int64_t axis_;
};

class TopK : public Kernel {
 public:
  explicit TopK(const KernelInit& init)
      : opset_(init.opset),
        axis_(init.attrs.getInt("axis")),
        kAttr_(init.attrs.getInt("k", 0)),
        largest_(init.attrs.getInt("largest", 1) != 0),
        sorted_(init.attrs.getInt("sorted", 1) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t k = opset_ >= 10 ? ctx.input(1).getInt(0) : kAttr_;
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    const int64_t n = x.dim(a);
    if (k < 0 || k > n)
      return Status::error("k=" + std::to_string(k) + " is out of range for axis length " +
                           std::to_string(n));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    Shape out = x.shape();
    out[a] = k;
    DW_ALLOC(v, ctx.output(0, x.dtype(), out));
    DW_ALLOC(ix, ctx.output(1, DType::kInt64, out));
    if (k == 0) return Status();
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.data<T>();
      T* values = v->data<T>();
      int64_t* indices = ix->data<int64_t>();
      const bool largest = largest_;
      // Each (outer, inner) line on its own, in pieces on the session's threads (a partial sort
      // through an index array took 0.6 us a line of 56; this, 0.1). Ties keep the lower index
      // first, as the ONNX reference does; NaN counts as the largest value, so that the order
      // is a strict one (with a comparison false both ways a sort is undefined).
      forThreadRanges(outer * inner, x.size() * 4, [&](int64_t from, int64_t to) {
        std::vector<std::pair<T, int64_t>> line(static_cast<size_t>(n));
        auto before = [largest](const std::pair<T, int64_t>& l, const std::pair<T, int64_t>& r) {
          if constexpr (std::is_floating_point_v<T>) {
            const bool ln = std::isnan(l.first), rn = std::isnan(r.first);
            if (ln || rn) return ln != rn ? (largest ? ln : rn) : l.second < r.second;
          }
          if (l.first != r.first) return largest ? l.first > r.first : l.first < r.first;
          return l.second < r.second;
        };
        for (int64_t u = from; u < to; ++u) {
          const int64_t o = u / inner, i = u % inner;
          const T* p = s + o * n * inner + i;
          // The best k so far, in order: most values lose to the k-th at once (a small k
          // of a long line).
          int64_t kept = 0;
          for (int64_t j = 0; j < n; ++j) {
            const std::pair<T, int64_t> c{p[j * inner], j};
            if (kept == k && !before(c, line[k - 1])) continue;
            int64_t at = kept < k ? kept++ : k - 1;
            for (; at > 0 && before(c, line[at - 1]); --at) line[at] = line[at - 1];
            line[at] = c;
          }
          for (int64_t j = 0; j < k; ++j) {
            values[(o * k + j) * inner + i] = line[j].first;
            indices[(o * k + j) * inner + i] = line[j].second;
          }
        }
      });
      return Status();
    });
  }

 private:
  int opset_;
  int64_t axis_, kAttr_;
  bool largest_, sorted_;
};

class NonZero : public Kernel {
 public:
  explicit NonZero(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < x.size(); ++i)
      if (x.getDouble(i) != 0) hits.push_back(i);
    const int64_t r = static_cast<int64_t>(std::max<size_t>(x.rank(), 1));
    const int64_t m = static_cast<int64_t>(hits.size());
    DW_ALLOC(y, ctx.output(0, DType::kInt64, {static_cast<int64_t>(x.rank()), m}));
    auto st = stridesOf(x.shape());
    for (int64_t j = 0; j < m; ++j)
      for (size_t d = 0; d < x.rank(); ++d)
        y->data<int64_t>()[d * m + j] = (hits[j] / st[d]) % x.dim(d);
    (void)r;
    return Status();
  }
};

class Compress : public Kernel {
 public:
  explicit Compress(const KernelInit& init)
      : hasAxis_(init.attrs.has("axis")), axis_(init.attrs.getInt("axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    Tensor x = ctx.input(0);
    const Tensor& c = ctx.input(1);
    if (!hasAxis_) x = x.reshaped({x.size()});
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = hasAxis_ ? normAxis(axis_, x.rank()) : 0;
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < std::min(c.size(), x.dim(a)); ++i)
      if (c.getInt(i)) keep.push_back(i);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    Shape out = x.shape();
    out[a] = static_cast<int64_t>(keep.size());
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    const int64_t n = x.dim(a), m = out[a];
    return dispatchData(x, [&](auto z) {
      using T = decltype(z);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < m; ++j)
          std::copy_n(elems<T>(x) + (o * n + keep[j]) * inner, inner,
                      elems<T>(*y) + (o * m + j) * inner);
      return Status();
    });
  }

 private:
  bool hasAxis_;
  int64_t axis_;
};

class ReverseSequence : public Kernel {
 public:
  explicit ReverseSequence(const KernelInit& init)
      : batchAxis_(init.attrs.getInt("batch_axis", 1)),
        timeAxis_(init.attrs.getInt("time_axis", 0)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto lens = ctx.input(1).toInt64Vector();
    if (x.rank() < 2 || batchAxis_ + timeAxis_ != 1 || batchAxis_ * timeAxis_ != 0)
      return Status::error(
          "ReverseSequence takes batch_axis and time_axis 0 and 1, one each, "
          "over an input of at least 2 dimensions; got " +
          std::to_string(batchAxis_) + " and " + std::to_string(timeAxis_) + " over " +
          shapeToString(x.shape()));
    const int64_t T = x.dim(timeAxis_), B = x.dim(batchAxis_);
    if (static_cast<int64_t>(lens.size()) != B)
      return Status::error("sequence_lens has " + std::to_string(lens.size()) +
                           " values for a batch of " + std::to_string(B));
    for (int64_t v : lens)
      if (v < 0 || v > T)
        return Status::error("a sequence length of " + std::to_string(v) + " is outside [0, " +
                             std::to_string(T) + "]");
    DW_RETURN_IF_ERROR(copyToOutput(ctx, 0, x, x.shape()));
    Tensor& y = ctx.outputs_[0] ? ctx.outputs_[0]->tensor : ctx.dropped_.back().tensor;
    auto st = stridesOf(x.shape());
    int64_t inner = 1;
    for (size_t d = 2; d < x.rank(); ++d) inner *= x.dim(d);
    return dispatchData(x, [&](auto z) {
      using E = decltype(z);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < std::min(lens[b], T); ++t) {
          const int64_t src = t * st[timeAxis_] + b * st[batchAxis_];
          const int64_t dst = (lens[b] - 1 - t) * st[timeAxis_] + b * st[batchAxis_];
          std::copy_n(elems<E>(x) + src, inner, elems<E>(y) + dst);
        }
      return Status();
    });
  }

 private:
  int64_t batchAxis_, timeAxis_;
};

}  // namespace

void addIndexKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  r.add(h, "Gather", 1, kMaxOpset, &makeKernel<Gather>, false);
  r.add(h, "GatherElements", 1, kMaxOpset, &makeKernel<Elements>, false);
  r.add(h, "ScatterElements", 1, kMaxOpset, &makeKernel<Elements>, false);
  r.add(h, "Scatter", 1, 10, &makeKernel<Elements>, false);
  r.add(h, "GatherND", 1, kMaxOpset, &makeKernel<GatherND>, false);
  r.add(h, "ScatterND", 1, kMaxOpset, &makeKernel<ScatterND>, false);
  r.add(h, "OneHot", 1, kMaxOpset, &makeKernel<OneHot>, false);
  r.add(h, "TopK", 1, kMaxOpset, &makeKernel<TopK>);
  r.add(h, "NonZero", 1, kMaxOpset, &makeKernel<NonZero>, false);
  r.add(h, "Compress", 1, kMaxOpset, &makeKernel<Compress>, false);
  r.add(h, "ReverseSequence", 1, kMaxOpset, &makeKernel<ReverseSequence>, false);
}

}  // namespace dw::engine
