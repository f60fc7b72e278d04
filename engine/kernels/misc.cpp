// Kernels that fit no other family:
// - optimizer ops of the ai.onnx.preview.training domain: Adagrad, Momentum (standard and
//   Nesterov) and Adam. Each takes R (learning rate) and T (update count) and then groups of n
//   tensors (X..., G..., state...), and returns the updated X... and state..., following the
//   formulas in the ONNX operator documentation;
// - NonMaxSuppression, Unique, Einsum, Det, and the signal ops DFT, STFT, MelWeightMatrix.
#include <algorithm>
#include <cmath>
#include <complex>
#include <map>
#include <numeric>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

enum class Rule { kAdagrad, kMomentum, kAdam };

class Optimizer : public Kernel {
 public:
  explicit Optimizer(const KernelInit& init) {
    const auto& a = init.attrs;
    rule_ = init.opType == "Adam" ? Rule::kAdam
                                  : (init.opType == "Adagrad" ? Rule::kAdagrad : Rule::kMomentum);
    states_ = rule_ == Rule::kAdam ? 2 : 1;
    norm_ = a.getFloat("norm_coefficient", 0.0f);
    if (rule_ == Rule::kAdagrad) {
      decay_ = a.getFloat("decay_factor");
      eps_ = a.getFloat("epsilon");
    } else if (rule_ == Rule::kMomentum) {
      alpha_ = a.getFloat("alpha", 0.0f);
      beta_ = a.getFloat("beta", 0.0f);
      const std::string mode = a.getString("mode", "standard");
      if (mode != "standard" && mode != "nesterov")
        fail("Momentum mode '" + mode + "' must be 'standard' or 'nesterov'");
      nesterov_ = mode == "nesterov";
    } else {
      alpha_ = a.getFloat("alpha");
      beta_ = a.getFloat("beta");
      eps_ = a.getFloat("epsilon");
      normPost_ = a.getFloat("norm_coefficient_post");
    }
    const int groups = 2 + states_;  // X, G and the states
    if (init.numInputs < 2 + groups || (init.numInputs - 2) % groups != 0)
      fail(init.opType + " takes R, T and " + std::to_string(groups) +
           " groups of n tensors; got " + std::to_string(init.numInputs) + " inputs");
    n_ = (init.numInputs - 2) / groups;
    if (init.numOutputs != n_ * (1 + states_))
      fail(init.opType + " with " + std::to_string(n_) + " tensors must have " +
           std::to_string(n_ * (1 + states_)) + " outputs");
  }

  Status compute(KernelContext& ctx) override {
    if (ctx.input(0).size() != 1 || ctx.input(1).size() != 1)
      return Status::error("R and T must be scalars");
    const double r = ctx.input(0).getDouble(0);
    const int64_t t = ctx.input(1).getInt(0);
    for (int i = 0; i < n_; ++i) {
      const Tensor& x = ctx.input(2 + i);
      const Tensor& g = ctx.input(2 + n_ + i);
      const Tensor& s1 = ctx.input(2 + 2 * n_ + i);
      const Tensor* s2 = states_ == 2 ? &ctx.input(2 + 3 * n_ + i) : nullptr;
      if (g.shape() != x.shape() || s1.shape() != x.shape() || (s2 && s2->shape() != x.shape()))
        return Status::error("tensor " + std::to_string(i) +
                             ": X, G and the optimizer states must have the same shape");
      if (g.dtype() != x.dtype() || s1.dtype() != x.dtype() || (s2 && s2->dtype() != x.dtype()))
        return Status::error("tensor " + std::to_string(i) +
                             ": X, G and the optimizer states must have the same dtype");
      DW_ALLOC(xo, ctx.output(i, x.dtype(), x.shape()));
      DW_ALLOC(s1o, ctx.output(n_ + i, x.dtype(), x.shape()));
      Tensor* s2o = nullptr;
      if (s2) {
        s2o = ctx.output(2 * n_ + i, x.dtype(), x.shape());
        if (!s2o) return ctx.status();
      }
      DW_RETURN_IF_ERROR(dispatchFloat(x.dtype(), [&](auto z) -> Status {
        using T = decltype(z);
        update<T>(r, t, x.data<T>(), g.data<T>(), s1.data<T>(), s2 ? s2->data<T>() : nullptr,
                  xo->data<T>(), s1o->data<T>(), s2o ? s2o->data<T>() : nullptr, x.size());
        return Status();
      }));
    }
    return Status();
  }

 private:
  template <class T>
  void update(double r, int64_t t, const T* x, const T* g, const T* s1, const T* s2, T* xo, T* s1o,
              T* s2o, int64_t n) const {
    const T norm = static_cast<T>(norm_);
    if (rule_ == Rule::kAdagrad) {
      const T rr = static_cast<T>(r / (1.0 + static_cast<double>(t) * decay_));
      for (int64_t i = 0; i < n; ++i) {
        const T gr = norm * x[i] + g[i];
        const T h = s1[i] + gr * gr;
        s1o[i] = h;
        xo[i] = x[i] - rr * gr / (std::sqrt(h) + static_cast<T>(eps_));
      }
    } else if (rule_ == Rule::kMomentum) {
      const T alpha = static_cast<T>(alpha_);
      const T beta = t > 0 ? static_cast<T>(beta_) : T(1);
      const T rr = static_cast<T>(r);
      for (int64_t i = 0; i < n; ++i) {
        const T gr = norm * x[i] + g[i];
        const T v = alpha * s1[i] + beta * gr;
        s1o[i] = v;
        xo[i] = nesterov_ ? x[i] - rr * (gr + alpha * v) : x[i] - rr * v;
      }
    } else {
      const T alpha = static_cast<T>(alpha_), beta = static_cast<T>(beta_);
      double ra = r;
      if (t > 0)
        ra = r * std::sqrt(1.0 - std::pow(static_cast<double>(beta_), static_cast<double>(t))) /
             (1.0 - std::pow(static_cast<double>(alpha_), static_cast<double>(t)));
      const T rr = static_cast<T>(ra);
      const T post = static_cast<T>(1.0 - normPost_);
      for (int64_t i = 0; i < n; ++i) {
        const T gr = norm * x[i] + g[i];
        const T v = alpha * s1[i] + (1 - alpha) * gr;
        const T h = beta * s2[i] + (1 - beta) * gr * gr;
        s1o[i] = v;
        s2o[i] = h;
        xo[i] = post * (x[i] - rr * (v / (std::sqrt(h) + static_cast<T>(eps_))));
      }
    }
  }

  Rule rule_;
  int states_ = 1, n_ = 0;
  float norm_ = 0, normPost_ = 0, decay_ = 0, eps_ = 0, alpha_ = 0, beta_ = 0;
  bool nesterov_ = false;
};

class NonMaxSuppression : public Kernel {
 public:
  explicit NonMaxSuppression(const KernelInit& init)
      : center_(init.attrs.getInt("center_point_box") != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& boxes = ctx.input(0);
    const Tensor& scores = ctx.input(1);
    if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 ||
        scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
      return Status::error("boxes must be [B, N, 4] and scores [B, C, N]");
    const int64_t maxOut = ctx.hasInput(2) && ctx.input(2).size() ? ctx.input(2).getInt(0) : 0;
    const double iouTh = ctx.hasInput(3) && ctx.input(3).size() ? ctx.input(3).getDouble(0) : 0;
    const bool hasScoreTh = ctx.hasInput(4) && ctx.input(4).size();
    const double scoreTh = hasScoreTh ? ctx.input(4).getDouble(0) : 0;
    const int64_t B = boxes.dim(0), N = boxes.dim(1), C = scores.dim(1);
    std::vector<int64_t> sel;
    auto corners = [&](int64_t b, int64_t i, double* c) {
      double v[4];
      for (int k = 0; k < 4; ++k) v[k] = boxes.getDouble((b * N + i) * 4 + k);
      if (center_) {
        c[0] = v[1] - v[3] / 2;  // y1
        c[1] = v[0] - v[2] / 2;  // x1
        c[2] = v[1] + v[3] / 2;
        c[3] = v[0] + v[2] / 2;
      } else {
        c[0] = std::min(v[0], v[2]);
        c[1] = std::min(v[1], v[3]);
        c[2] = std::max(v[0], v[2]);
        c[3] = std::max(v[1], v[3]);
      }
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) {
        std::vector<int64_t> cand;
        for (int64_t i = 0; i < N; ++i)
          if (!hasScoreTh || scores.getDouble((b * C + c) * N + i) > scoreTh) cand.push_back(i);
        std::stable_sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) {
          return scores.getDouble((b * C + c) * N + x) > scores.getDouble((b * C + c) * N + y);
        });
        std::vector<int64_t> kept;
        for (int64_t i : cand) {
          if (static_cast<int64_t>(kept.size()) >= maxOut) break;
          double bi[4];
          corners(b, i, bi);
          bool keep = true;
          for (int64_t j : kept) {
            double bj[4];
            corners(b, j, bj);
            const double ih = std::max(0.0, std::min(bi[2], bj[2]) - std::max(bi[0], bj[0]));
            const double iw = std::max(0.0, std::min(bi[3], bj[3]) - std::max(bi[1], bj[1]));
            const double inter = ih * iw;
            const double uni =
                (bi[2] - bi[0]) * (bi[3] - bi[1]) + (bj[2] - bj[0]) * (bj[3] - bj[1]) - inter;
            if (uni > 0 && inter / uni > iouTh) {
              keep = false;
              break;
            }
          }
          if (keep) kept.push_back(i);
        }
        for (int64_t i : kept) {
          sel.push_back(b);
          sel.push_back(c);
          sel.push_back(i);
        }
      }
    const int64_t k = static_cast<int64_t>(sel.size() / 3);
    DW_ALLOC(y, ctx.output(0, DType::kInt64, {k, 3}));
    std::copy(sel.begin(), sel.end(), y->data<int64_t>());
    return Status();
  }

 private:
  bool center_;
};

class Unique : public Kernel {
 public:
  explicit Unique(const KernelInit& init)
      : hasAxis_(init.attrs.has("axis")),
        axis_(init.attrs.getInt("axis", 0)),
        sorted_(init.attrs.getInt("sorted") != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (hasAxis_ && !validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = hasAxis_ ? normAxis(axis_, x.rank()) : 0;
    const Shape shape = hasAxis_ ? x.shape() : Shape{x.size()};
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= shape[d];
    for (size_t d = a + 1; d < shape.size(); ++d) inner *= shape[d];
    const int64_t n = shape[a];
    return dispatchNumeric(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* px = x.data<T>();
      auto slice = [&](int64_t j) {
        std::vector<T> v;
        v.reserve(outer * inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) v.push_back(px[(o * n + j) * inner + i]);
        return v;
      };
      std::vector<std::vector<T>> uniq;
      std::vector<int64_t> first, counts, inverse(n);
      std::map<std::vector<T>, int64_t> seen;
      for (int64_t j = 0; j < n; ++j) {
        auto v = slice(j);
        auto it = seen.find(v);
        if (it == seen.end()) {
          it = seen.emplace(v, static_cast<int64_t>(uniq.size())).first;
          uniq.push_back(std::move(v));
          first.push_back(j);
          counts.push_back(0);
        }
        inverse[j] = it->second;
        ++counts[it->second];
      }
      std::vector<int64_t> order(uniq.size());
      std::iota(order.begin(), order.end(), 0);
      if (sorted_)
        std::sort(order.begin(), order.end(),
                  [&](int64_t p, int64_t q) { return uniq[p] < uniq[q]; });
      std::vector<int64_t> rank(uniq.size());
      for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<int64_t>(r);
      const int64_t u = static_cast<int64_t>(uniq.size());
      Shape ys = shape;
      ys[a] = u;
      DW_ALLOC(y, ctx.output(0, x.dtype(), ys));
      for (int64_t r = 0; r < u; ++r) {
        const auto& v = uniq[order[r]];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i)
            y->data<T>()[(o * u + r) * inner + i] = v[o * inner + i];
      }
      auto writeInts = [&](size_t idx, int64_t len, auto&& f) -> Status {
        if (!ctx.wantsOutput(idx)) return Status();
        Tensor* t = ctx.output(idx, DType::kInt64, {len});
        if (!t) return ctx.status();
        for (int64_t i = 0; i < len; ++i) t->data<int64_t>()[i] = f(i);
        return Status();
      };
      DW_RETURN_IF_ERROR(writeInts(1, u, [&](int64_t r) { return first[order[r]]; }));
      DW_RETURN_IF_ERROR(writeInts(2, n, [&](int64_t j) { return rank[inverse[j]]; }));
      return writeInts(3, u, [&](int64_t r) { return counts[order[r]]; });
    });
  }

 private:
  bool hasAxis_;
  int64_t axis_;
  bool sorted_;
};

// Einsum by direct summation over every label's range: handles repeated labels (diagonals),
// ellipses with broadcasting, and the implicit output (labels seen once, in alphabetical order).
class Einsum : public Kernel {
 public:
  explicit Einsum(const KernelInit& init) : equation_(init.attrs.getString("equation")) {
    equation_.erase(std::remove(equation_.begin(), equation_.end(), ' '), equation_.end());
  }
  Status compute(KernelContext& ctx) override {
    const size_t nin = ctx.numInputs();
    const auto arrow = equation_.find("->");
    const std::string lhs = equation_.substr(0, arrow);
    std::vector<std::string> terms;
    size_t start = 0;
    for (size_t i = 0; i <= lhs.size(); ++i)
      if (i == lhs.size() || lhs[i] == ',') {
        terms.push_back(lhs.substr(start, i - start));
        start = i + 1;
      }
    if (terms.size() != nin)
      return Status::error("equation '" + equation_ + "' has " + std::to_string(terms.size()) +
                           " operands for " + std::to_string(nin) + " inputs");
    // Ellipsis dims become labels '0'.. (right-aligned, broadcast across operands).
    size_t ell = 0;
    for (size_t k = 0; k < nin; ++k) {
      const auto p = terms[k].find("...");
      if (p == std::string::npos) continue;
      // The ellipsis stands for the dimensions the term's own labels leave; a term with more
      // labels than its operand has dimensions would make that count wrap around.
      if (terms[k].size() - 3 > ctx.input(k).rank())
        return Status::error("operand " + std::to_string(k) + " has rank " +
                             std::to_string(ctx.input(k).rank()) + " but its term '" + terms[k] +
                             "' names " + std::to_string(terms[k].size() - 3) + " dimensions");
      ell = std::max(ell, ctx.input(k).rank() - (terms[k].size() - 3));
    }
    std::string ellLabels;
    for (size_t i = 0; i < ell; ++i) ellLabels.push_back(static_cast<char>('0' + i));
    std::map<char, int64_t> dims;
    std::vector<std::string> labels(nin);
    for (size_t k = 0; k < nin; ++k) {
      std::string t = terms[k];
      const auto p = t.find("...");
      const Tensor& in = ctx.input(k);
      if (p != std::string::npos) {
        const size_t own = in.rank() - (t.size() - 3);
        t = t.substr(0, p) + ellLabels.substr(ell - own) + t.substr(p + 3);
      }
      if (t.size() != in.rank())
        return Status::error("operand " + std::to_string(k) + " has rank " +
                             std::to_string(in.rank()) + " but its term is '" + terms[k] + "'");
      for (size_t d = 0; d < t.size(); ++d) {
        auto& v = dims[t[d]];
        if (v <= 1)
          v = in.dim(d);
        else if (in.dim(d) != v && in.dim(d) != 1)
          return Status::error(std::string("label '") + t[d] + "' has inconsistent sizes");
      }
      labels[k] = t;
    }
    std::string out;
    if (arrow != std::string::npos) {
      out = equation_.substr(arrow + 2);
      const auto p = out.find("...");
      if (p != std::string::npos) out = out.substr(0, p) + ellLabels + out.substr(p + 3);
    } else {
      std::map<char, int> seen;
      for (const auto& l : labels)
        for (char c : l) ++seen[c];
      out = ellLabels;
      for (const auto& [c, n] : seen)
        if (n == 1 && !(c >= '0' && c <= '9')) out.push_back(c);
    }
    std::string all = out;
    for (const auto& [c, d] : dims)
      if (out.find(c) == std::string::npos) all.push_back(c);
    Shape outShape;
    for (char c : out) {
      if (!dims.count(c)) return Status::error(std::string("output label '") + c + "' is unknown");
      outShape.push_back(dims[c]);
    }
    DW_RETURN_IF_ERROR(sameDtypes(ctx, "Einsum"));
    const DType dt = ctx.input(0).dtype();
    DW_ALLOC(y, ctx.output(0, dt, outShape));
    // Per operand, the stride each label contributes (0 where broadcast).
    std::vector<std::vector<int64_t>> strides(nin, std::vector<int64_t>(all.size(), 0));
    for (size_t k = 0; k < nin; ++k) {
      const auto st = stridesOf(ctx.input(k).shape());
      for (size_t d = 0; d < labels[k].size(); ++d) {
        const size_t li = all.find(labels[k][d]);
        if (ctx.input(k).dim(d) != 1) strides[k][li] += st[d];
      }
    }
    std::vector<int64_t> extent;
    for (char c : all) extent.push_back(dims[c]);
    const int64_t outCount = numElements(outShape);
    int64_t sumCount = 1;
    for (size_t i = out.size(); i < all.size(); ++i) sumCount *= extent[i];
    return dispatchNumeric(dt, [&](auto z) -> Status {
      using T = decltype(z);
      std::vector<int64_t> idx(all.size());
      for (int64_t o = 0; o < outCount; ++o) {
        int64_t rem = o;
        for (size_t d = out.size(); d-- > 0;) {
          idx[d] = rem % extent[d];
          rem /= extent[d];
        }
        double acc = 0;
        for (int64_t s = 0; s < sumCount; ++s) {
          int64_t r = s;
          for (size_t d = all.size(); d-- > out.size();) {
            idx[d] = r % extent[d];
            r /= extent[d];
          }
          double prod = 1;
          for (size_t k = 0; k < nin; ++k) {
            int64_t off = 0;
            for (size_t d = 0; d < all.size(); ++d) off += idx[d] * strides[k][d];
            prod *= static_cast<double>(ctx.input(k).data<T>()[off]);
          }
          acc += prod;
        }
        y->data<T>()[o] = static_cast<T>(acc);
      }
      return Status();
    });
  }

 private:
  std::string equation_;
};

class Det : public Kernel {
 public:
  explicit Det(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
      return Status::error("Det needs square matrices [..., M, M]");
    const int64_t m = x.dim(x.rank() - 1);
    Shape out(x.shape().begin(), x.shape().end() - 2);
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      std::vector<double> a(m * m);
      for (int64_t b = 0; b < y->size(); ++b) {
        for (int64_t i = 0; i < m * m; ++i) a[i] = x.data<T>()[b * m * m + i];
        double det = 1;
        for (int64_t c = 0; c < m; ++c) {
          int64_t p = c;
          for (int64_t r = c + 1; r < m; ++r)
            if (std::fabs(a[r * m + c]) > std::fabs(a[p * m + c])) p = r;
          if (a[p * m + c] == 0) {
            det = 0;
            break;
          }
          if (p != c) {
            for (int64_t k = 0; k < m; ++k) std::swap(a[p * m + k], a[c * m + k]);
            det = -det;
          }
          det *= a[c * m + c];
          for (int64_t r = c + 1; r < m; ++r) {
            const double f = a[r * m + c] / a[c * m + c];
            for (int64_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
          }
        }
        y->data<T>()[b] = static_cast<T>(det);
      }
      return Status();
    });
  }
};

// DFT (opset 17) along one axis of a real ([..., 1]) or complex ([..., 2]) signal, by direct
// summation in double.
class Dft : public Kernel {
 public:
  // Since opset 20 the axis is input 2, -2 (the last signal axis) where it is left out.
  explicit Dft(const KernelInit& init)
      : axisInput_(init.opset >= 20),
        axis_(axisInput_ ? -2 : init.attrs.getInt("axis")),
        inverse_(init.attrs.getInt("inverse") != 0),
        onesided_(init.attrs.getInt("onesided") != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t r = x.rank();
    if (r < 2 || (x.dim(r - 1) != 1 && x.dim(r - 1) != 2))
      return Status::error("input must end in a dimension of 1 (real) or 2 (complex)");
    int64_t axis = axis_;
    if (axisInput_ && ctx.hasInput(2)) {
      if (ctx.input(2).size() != 1) return Status::error("axis must be a single value");
      axis = ctx.input(2).getInt(0);
    }
    // Negative axes count from the back of all the dimensions, the complex one included (-2
    // is the last signal axis), as ONNX and ONNX Runtime read them.
    if (axis < -static_cast<int64_t>(r) || axis > static_cast<int64_t>(r) - 2 || axis == -1)
      return Status::error("axis " + std::to_string(axis) +
                           " does not name a signal dimension "
                           "of the rank-" +
                           std::to_string(r) + " input (0 to " + std::to_string(r - 2) + ", or -" +
                           std::to_string(r) + " to -2)");
    const int64_t a = axis < 0 ? axis + static_cast<int64_t>(r) : axis;
    const bool complexIn = x.dim(r - 1) == 2;
    const int64_t n0 = x.dim(a);
    const int64_t n = ctx.hasInput(1) && ctx.input(1).size() ? ctx.input(1).getInt(0) : n0;
    if (n <= 0) return Status::error("dft_length must be positive");
    const int64_t outLen = onesided_ ? n / 2 + 1 : n;
    Shape out = x.shape();
    out[a] = outLen;
    out[r - 1] = 2;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d + 1 < r; ++d) inner *= x.dim(d);
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* py = y->data<T>();
      const int64_t ci = complexIn ? 2 : 1;
      const double sign = inverse_ ? 1.0 : -1.0;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i)
          for (int64_t k = 0; k < outLen; ++k) {
            std::complex<double> acc = 0;
            for (int64_t t = 0; t < std::min(n, n0); ++t) {
              const int64_t at = ((o * n0 + t) * inner + i) * ci;
              const std::complex<double> v(px[at], complexIn ? px[at + 1] : 0.0);
              const double ang = sign * 2 * M_PI * static_cast<double>((k * t) % n) / n;
              acc += v * std::complex<double>(std::cos(ang), std::sin(ang));
            }
            if (inverse_) acc /= static_cast<double>(n);
            const int64_t ot = ((o * outLen + k) * inner + i) * 2;
            py[ot] = static_cast<T>(acc.real());
            py[ot + 1] = static_cast<T>(acc.imag());
          }
      return Status();
    });
  }

 private:
  bool axisInput_;
  int64_t axis_;
  bool inverse_, onesided_;
};

// STFT (opset 17): frames of frame_length every frame_step, multiplied by the window, each
// transformed by a direct DFT; onesided keeps frame_length / 2 + 1 bins.
class Stft : public Kernel {
 public:
  explicit Stft(const KernelInit& init) : onesided_(init.attrs.getInt("onesided") != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
      return Status::error("signal must be [batch, length, 1 or 2]");
    const int64_t step = ctx.input(1).getInt(0);
    const bool hasWindow = ctx.hasInput(2);
    int64_t frameLen = hasWindow ? ctx.input(2).size() : 0;
    if (ctx.hasInput(3)) frameLen = ctx.input(3).getInt(0);
    if (frameLen <= 0 || step <= 0)
      return Status::error("frame_step and the frame length (window or frame_length) must be > 0");
    if (hasWindow && ctx.input(2).size() != frameLen)
      return Status::error("window length must equal frame_length");
    const int64_t B = x.dim(0), L = x.dim(1), ci = x.dim(2);
    if (L < frameLen) return Status::error("the signal is shorter than one frame");
    const int64_t frames = 1 + (L - frameLen) / step;
    const int64_t bins = onesided_ ? frameLen / 2 + 1 : frameLen;
    DW_ALLOC(y, ctx.output(0, x.dtype(), {B, frames, bins, 2}));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* py = y->data<T>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t f = 0; f < frames; ++f)
          for (int64_t k = 0; k < bins; ++k) {
            std::complex<double> acc = 0;
            for (int64_t t = 0; t < frameLen; ++t) {
              const int64_t at = (b * L + f * step + t) * ci;
              const double w = hasWindow ? ctx.input(2).getDouble(t) : 1.0;
              const std::complex<double> v(px[at] * w, ci == 2 ? px[at + 1] * w : 0.0);
              const double ang = -2 * M_PI * static_cast<double>((k * t) % frameLen) / frameLen;
              acc += v * std::complex<double>(std::cos(ang), std::sin(ang));
            }
            const int64_t o = ((b * frames + f) * bins + k) * 2;
            py[o] = static_cast<T>(acc.real());
            py[o + 1] = static_cast<T>(acc.imag());
          }
      return Status();
    });
  }

 private:
  bool onesided_;
};

// MelWeightMatrix (opset 17): triangular filters between mel-spaced frequency bins, as the ONNX
// operator's reference computes them.
class MelWeightMatrix : public Kernel {
 public:
  explicit MelWeightMatrix(const KernelInit& init)
      : outType_(dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("output_datatype")))) {}
  Status compute(KernelContext& ctx) override {
    const int64_t mels = ctx.input(0).getInt(0), dft = ctx.input(1).getInt(0),
                  rate = ctx.input(2).getInt(0);
    const double lo = ctx.input(3).getDouble(0), hi = ctx.input(4).getDouble(0);
    if (mels <= 0 || dft <= 0 || rate <= 0)
      return Status::error("num_mel_bins, dft_length and sample_rate must be positive");
    const int64_t specBins = dft / 2 + 1;
    const double loMel = 2595 * std::log10(1 + lo / 700), hiMel = 2595 * std::log10(1 + hi / 700);
    const double step = (hiMel - loMel) / static_cast<double>(mels + 2);
    std::vector<int64_t> f(mels + 2);
    for (int64_t i = 0; i < mels + 2; ++i) {
      const double hz = 700 * (std::pow(10.0, (i * step + loMel) / 2595) - 1);
      f[i] = static_cast<int64_t>(std::floor((dft + 1) * hz / rate));
    }
    std::vector<double> w(specBins * mels, 0.0);
    auto at = [&](int64_t j, int64_t i) -> double* {
      return j >= 0 && j < specBins ? &w[j * mels + i] : nullptr;
    };
    for (int64_t i = 0; i < mels; ++i) {
      const int64_t l = f[i], c = f[i + 1], h = f[i + 2];
      if (c - l == 0) {
        if (auto* p = at(c, i)) *p = 1;
      } else {
        for (int64_t j = l; j <= c; ++j)
          if (auto* p = at(j, i)) *p = static_cast<double>(j - l) / (c - l);
      }
      if (h - c > 0)
        for (int64_t j = c; j < h; ++j)
          if (auto* p = at(j, i)) *p = static_cast<double>(h - j) / (h - c);
    }
    const DType dt = outType_ == DType::kUndefined ? DType::kFloat : outType_;
    DW_ALLOC(y, ctx.output(0, dt, {specBins, mels}));
    return dispatchNumeric(dt, [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < y->size(); ++i) y->data<T>()[i] = static_cast<T>(w[i]);
      return Status();
    });
  }

 private:
  DType outType_;
};

}  // namespace

void addQuantizeKernels(KernelRegistry& r);  // kernels/quantize.cpp
void addTextKernels(KernelRegistry& r);      // kernels/text.cpp

void addMiscKernels(KernelRegistry& r) {
  addQuantizeKernels(r);
  addTextKernels(r);
  r.add(kReferenceTable, "NonMaxSuppression", 10, kMaxOpset, &makeKernel<NonMaxSuppression>, false);
  r.add(kReferenceTable, "Unique", 11, kMaxOpset, &makeKernel<Unique>, false);
  r.add(kReferenceTable, "Einsum", 12, kMaxOpset, &makeKernel<Einsum>, false);
  r.add(kReferenceTable, "Det", 11, kMaxOpset, &makeKernel<Det>);
  r.add(kReferenceTable, "DFT", 17, kMaxOpset, &makeKernel<Dft>);
  r.add(kReferenceTable, "STFT", 17, kMaxOpset, &makeKernel<Stft>);
  r.add(kReferenceTable, "MelWeightMatrix", 17, kMaxOpset, &makeKernel<MelWeightMatrix>, false);
  const std::string training = "ai.onnx.preview.training";
  for (const char* op : {"Adagrad", "Momentum", "Adam"})
    r.add(kReferenceTable, op, 1, kMaxOpset, &makeKernel<Optimizer>, true, training);
}

}  // namespace dw::engine
