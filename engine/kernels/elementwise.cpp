// Element-wise ops in plain C++: unary math, activations, broadcasting binary and variadic ops,
// comparisons, logic. Each op is one tight loop per dtype so the compiler can vectorize it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "engine/binary_op.h"
#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/kernels/vector_float.h"
#include "engine/unary_op.h"

namespace dw::engine {

namespace {

// The ops of ops/unary_table.h: one loop per function and dtype.
class Unary : public Kernel {
 public:
  explicit Unary(const KernelInit& init) {
    const ops::UnaryOp* row = ops::findUnaryOp(init.opType);
    if (!row) fail("no unary op " + init.opType);
    auto u = resolveUnary(*row, init.attrs);
    if (!u) fail(u.status().message());
    u_ = *u;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    const int64_t n = x.size();
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* py = y->data<T>();
      if constexpr (std::is_floating_point_v<T>) {
        if constexpr (std::is_same_v<T, float>)
          if (vectorUnaryFloat(u_.fn, px, py, n)) return Status();
        forThreadRanges(
            n, n, [&](int64_t from, int64_t to) { u_.apply(px + from, py + from, to - from); });
        return Status();
      } else {
        return ops::visitUnary(u_.fn, [&](auto f) {
          constexpr ops::UnaryFn kF = decltype(f)::value;
          const ops::UnaryParams p = u_.params;
          if constexpr (ops::nativeIntegers(kF)) {
            for (int64_t i = 0; i < n; ++i) py[i] = ops::unaryForward<kF>(px[i], p);
          } else {
            if (u_.op->integers != ops::Integers::kViaDouble)
              return Status::error(std::string(dtypeName(x.dtype())) +
                                   " input is not supported by " + u_.op->name +
                                   "; it takes floating-point tensors");
            for (int64_t i = 0; i < n; ++i)
              py[i] = static_cast<T>(ops::unaryForward<kF>(static_cast<double>(px[i]), p));
          }
          return Status();
        });
      }
    });
  }

 private:
  UnaryInstance u_;
};

// BitwiseNot: ~x of integer tensors.
class BitwiseNot : public Kernel {
 public:
  explicit BitwiseNot(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchNumeric(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      if constexpr (!std::is_integral_v<T> || std::is_same_v<T, bool>) {
        return Status::error(std::string(dtypeName(x.dtype())) +
                             " input is not supported: BitwiseNot takes integer tensors");
      } else {
        const T* px = x.data<T>();
        T* py = y->data<T>();
        for (int64_t i = 0; i < x.size(); ++i) py[i] = static_cast<T>(~px[i]);
        return Status();
      }
    });
  }
};

// Tests of each value with a bool result: Not, IsNaN, IsInf.
class Predicate : public Kernel {
 public:
  explicit Predicate(const KernelInit& init)
      : op_(init.opType),
        detectPos_(init.attrs.getInt("detect_positive") != 0),
        detectNeg_(init.attrs.getInt("detect_negative") != 0) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t n = x.size();
    DW_ALLOC(y, ctx.output(0, DType::kBool, x.shape()));
    bool* d = y->data<bool>();
    if (op_ == "Not") {
      if (x.dtype() != DType::kBool) return Status::error("Not needs a bool tensor");
      const bool* s = x.data<bool>();
      for (int64_t i = 0; i < n; ++i) d[i] = !s[i];
      return Status();
    }
    return dispatchFloat(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* s = x.data<T>();
      if (op_ == "IsNaN")
        for (int64_t i = 0; i < n; ++i) d[i] = std::isnan(s[i]);
      else
        for (int64_t i = 0; i < n; ++i)
          d[i] = std::isinf(s[i]) && ((s[i] > 0 && detectPos_) || (s[i] < 0 && detectNeg_));
      return Status();
    });
  }

 private:
  std::string op_;
  bool detectPos_, detectNeg_;
};

// The ops of ops/binary_table.h, with numpy broadcasting; Pow also takes an exponent of another
// type.
class Binary : public Kernel {
 public:
  explicit Binary(const KernelInit& init) {
    const ops::BinaryOp* row = ops::findBinaryOp(init.opType);
    if (!row) {
      fail("no binary op " + init.opType);
      return;
    }
    auto fn = chooseBinary(*row, init.attrs);
    if (!fn) {
      fail(fn.status().message());
      return;
    }
    fn_ = *fn;
    // Opsets before 7 broadcast only with broadcast=1 and an axis; numpy rules cover axis=-1.
    if (init.opset < 7 && init.attrs.getInt("broadcast") && init.attrs.has("axis"))
      legacyAxis_ = init.attrs.getInt("axis", -1);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    Tensor b = ctx.input(1);
    if (legacyAxis_ != kNoAxis) {
      // Legacy broadcast aligns b at `axis` of a; pad b with trailing 1s to get numpy rules.
      int64_t ax = normAxis(legacyAxis_, a.rank());
      Shape s = b.shape();
      while (static_cast<int64_t>(s.size()) + ax < static_cast<int64_t>(a.rank())) s.push_back(1);
      b = b.reshaped(s);
    }
    auto shape = broadcastShapes({a.shape(), b.shape()});
    if (!shape) return shape.status();
    if (fn_ == ops::BinaryFn::kPow) return pow(ctx, a, b, *shape);
    if (a.dtype() != b.dtype())
      return Status::error(std::string("input dtypes differ: ") + dtypeName(a.dtype()) + " and " +
                           dtypeName(b.dtype()));
    return ops::visitBinary(fn_, [&](auto f) -> Status {
      constexpr ops::BinaryFn kF = decltype(f)::value;
      constexpr ops::BinaryKind kKind = ops::kindOf(kF);
      if constexpr (kF == ops::BinaryFn::kPow) {
        return Status();  // handled above
      } else if constexpr (kKind == ops::BinaryKind::kLogic) {
        if (a.dtype() != DType::kBool) return Status::error("logical ops need bool inputs");
        DW_ALLOC(y, ctx.output(0, DType::kBool, *shape));
        broadcastBinary(a.data<bool>(), a.shape(), b.data<bool>(), b.shape(), y->data<bool>(),
                        *shape, [&](bool x, bool w) { return ops::binaryForward<kF>(x, w); });
        return Status();
      } else if constexpr (kKind == ops::BinaryKind::kCompare) {
        DW_ALLOC(y, ctx.output(0, DType::kBool, *shape));
        if (a.dtype() == DType::kString) {
          if constexpr (kF != ops::BinaryFn::kEqual) {
            return Status::error("strings support only Equal");
          } else {
            const auto& sa = a.strings();
            const auto& sb = b.strings();
            bool* py = y->data<bool>();
            std::array<const Shape*, 2> ins{&a.shape(), &b.shape()};
            forEachBroadcast<2>(*shape, ins, [&](int64_t i, const std::array<int64_t, 2>& o) {
              py[i] = sa[o[0]] == sb[o[1]];
            });
            return Status();
          }
        }
        return dispatchNumericBool(a.dtype(), [&](auto z) {
          using T = decltype(z);
          broadcastBinary(a.data<T>(), a.shape(), b.data<T>(), b.shape(), y->data<bool>(), *shape,
                          [&](T x, T w) { return ops::binaryForward<kF>(x, w); });
          return Status();
        });
      } else {
        DW_ALLOC(y, ctx.output(0, a.dtype(), *shape));
        return dispatchNumeric(a.dtype(), [&](auto z) {
          using T = decltype(z);
          if constexpr (kKind == ops::BinaryKind::kShift && !std::is_unsigned_v<T>) {
            return Status::error("BitShift needs unsigned integers");
          } else if constexpr (kKind == ops::BinaryKind::kBitwise &&
                               (!std::is_integral_v<T> || std::is_same_v<T, bool>)) {
            return Status::error(std::string(dtypeName(a.dtype())) +
                                 " inputs are not supported: bitwise ops take integer tensors");
          } else {
            const T* pb = b.data<T>();
            if constexpr (std::is_integral_v<T> &&
                          (kF == ops::BinaryFn::kDiv || kF == ops::BinaryFn::kMod ||
                           kF == ops::BinaryFn::kFmod)) {
              for (int64_t i = 0; i < b.size() && y->size() > 0; ++i)
                if (pb[i] == 0)
                  return Status::error(std::string("integer ") +
                                       (kF == ops::BinaryFn::kDiv ? "division" : "modulo") +
                                       " by zero");
            }
            broadcastBinary(a.data<T>(), a.shape(), pb, b.shape(), y->data<T>(), *shape,
                            [&](T x, T w) { return ops::binaryForward<kF>(x, w); });
            return Status();
          }
        });
      }
    });
  }

 private:
  static constexpr int64_t kNoAxis = std::numeric_limits<int64_t>::min();

  Status pow(KernelContext& ctx, const Tensor& a, const Tensor& b, const Shape& shape) {
    DW_ALLOC(y, ctx.output(0, a.dtype(), shape));
    if (a.dtype() == DType::kFloat && a.shape() == shape && powFloat(a, b, *y)) return Status();
    return dispatchNumeric(a.dtype(), [&](auto z) {
      using T = decltype(z);
      return dispatchNumeric(b.dtype(), [&](auto w) {
        using U = decltype(w);
        broadcastBinary(a.data<T>(), a.shape(), b.data<U>(), b.shape(), y->data<T>(), shape,
                        [](T x, U e) { return ops::powOf(x, e); });
        return Status();
      });
    });
  }

  // A float base of the output's shape with one exponent, or one per element: a square as
  // x * x (what a LayerNorm or a variance exported as ops raises to), any other through
  // vectorPowFloat. False: the broadcasting loop's case.
  static bool powFloat(const Tensor& a, const Tensor& b, Tensor& y) {
    const int64_t n = a.size();
    const float* x = a.data<float>();
    float* out = y.data<float>();
    float e = 0;
    const bool scalar = b.size() == 1;
    if (scalar && b.dtype() == DType::kFloat) {
      e = b.data<float>()[0];
    } else if (scalar && (b.dtype() == DType::kInt64 || b.dtype() == DType::kInt32)) {
      const int64_t v = b.dtype() == DType::kInt64 ? b.data<int64_t>()[0] : b.data<int32_t>()[0];
      if (v < -(int64_t(1) << 24) || v > (int64_t(1) << 24)) return false;  // exact in float
      e = static_cast<float>(v);
    } else if (b.dtype() != DType::kFloat || b.shape() != a.shape()) {
      return false;
    }
    if (scalar && e == 2.0f) {
      forThreadRanges(n, n, [&](int64_t from, int64_t to) {
        for (int64_t i = from; i < to; ++i) out[i] = x[i] * x[i];
      });
      return true;
    }
    return vectorPowFloat(x, scalar ? &e : b.data<float>(), scalar, out, n);
  }

  ops::BinaryFn fn_ = ops::BinaryFn::kAdd;
  int64_t legacyAxis_ = kNoAxis;
};

// Sum, Mean, Max, Min over any number of broadcast inputs.
class Variadic : public Kernel {
 public:
  explicit Variadic(const KernelInit& init) : op_(init.opType) {}
  Status compute(KernelContext& ctx) override {
    std::vector<Shape> shapes;
    for (size_t i = 0; i < ctx.numInputs(); ++i) shapes.push_back(ctx.input(i).shape());
    auto shape = broadcastShapes(shapes);
    if (!shape) return shape.status();
    DW_RETURN_IF_ERROR(sameDtypes(ctx, op_));
    const Tensor& first = ctx.input(0);
    DW_ALLOC(y, ctx.output(0, first.dtype(), *shape));
    return dispatchNumeric(first.dtype(), [&](auto z) {
      using T = decltype(z);
      T* py = y->data<T>();
      const int64_t n = y->size();
      {
        const T* s = first.data<T>();
        if (first.shape() == *shape) {
          std::copy(s, s + n, py);
        } else {
          std::array<const Shape*, 1> ins{&first.shape()};
          forEachBroadcast<1>(*shape, ins,
                              [&](int64_t i, const std::array<int64_t, 1>& o) { py[i] = s[o[0]]; });
        }
      }
      for (size_t k = 1; k < ctx.numInputs(); ++k) {
        const Tensor& t = ctx.input(k);
        if (t.dtype() != first.dtype()) return Status::error("inputs must share one dtype");
        const T* s = t.data<T>();
        if (op_ == "Sum" || op_ == "Mean")
          broadcastBinary(py, *shape, s, t.shape(), py, *shape,
                          [](T x, T w) { return static_cast<T>(x + w); });
        else if (op_ == "Max")
          broadcastBinary(py, *shape, s, t.shape(), py, *shape, [](T x, T w) {
            if constexpr (std::is_floating_point_v<T>) {
              if (std::isnan(x) || std::isnan(w)) return std::numeric_limits<T>::quiet_NaN();
            }
            return x > w ? x : w;
          });
        else
          broadcastBinary(py, *shape, s, t.shape(), py, *shape, [](T x, T w) {
            if constexpr (std::is_floating_point_v<T>) {
              if (std::isnan(x) || std::isnan(w)) return std::numeric_limits<T>::quiet_NaN();
            }
            return x < w ? x : w;
          });
      }
      if (op_ == "Mean") {
        const T c = static_cast<T>(ctx.numInputs());
        for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(py[i] / c);
      }
      return Status();
    });
  }

 private:
  std::string op_;
};

class Clip : public Kernel {
 public:
  explicit Clip(const KernelInit& init) : opset_(init.opset) {
    lo_ = init.attrs.getFloat("min", -std::numeric_limits<float>::max());
    hi_ = init.attrs.getFloat("max", std::numeric_limits<float>::max());
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
      if (opset_ < 11) {
        lo = static_cast<T>(std::max<double>(lo_, static_cast<double>(lo)));
        hi = static_cast<T>(std::min<double>(hi_, static_cast<double>(hi)));
      } else {
        if (ctx.hasInput(1)) lo = ctx.input(1).data<T>()[0];
        if (ctx.hasInput(2)) hi = ctx.input(2).data<T>()[0];
      }
      const T* s = x.data<T>();
      T* d = y->data<T>();
      const int64_t n = x.size();
      forThreadRanges(n, n, [&](int64_t from, int64_t to) {
        for (int64_t i = from; i < to; ++i) d[i] = std::min(std::max(s[i], lo), hi);
      });
      return Status();
    });
  }

 private:
  int opset_;
  float lo_, hi_;
};

class PRelu : public Kernel {
 public:
  explicit PRelu(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor s = ctx.input(1);
    // Before opset 7 a 1-D slope of length C applies per channel (axis 1).
    if (s.rank() == 1 && x.rank() > 2 && s.dim(0) == x.dim(1) && s.dim(0) != x.dim(x.rank() - 1)) {
      Shape sh(x.rank() - 1, 1);
      sh[0] = s.dim(0);
      s = s.reshaped(sh);
    }
    auto shape = broadcastShapes({x.shape(), s.shape()});
    if (!shape) return shape.status();
    DW_ALLOC(y, ctx.output(0, x.dtype(), *shape));
    return dispatchNumeric(x.dtype(), [&](auto z) {
      using T = decltype(z);
      broadcastBinary(x.data<T>(), x.shape(), s.data<T>(), s.shape(), y->data<T>(), *shape,
                      [](T v, T a) { return v < 0 ? static_cast<T>(a * v) : v; });
      return Status();
    });
  }
};

class Where : public Kernel {
 public:
  explicit Where(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& c = ctx.input(0);
    const Tensor& a = ctx.input(1);
    const Tensor& b = ctx.input(2);
    if (c.dtype() != DType::kBool || a.dtype() != b.dtype())
      return Status::error(std::string("Where takes a bool condition and two values of one type, "
                                       "not ") +
                           dtypeName(c.dtype()) + ", " + dtypeName(a.dtype()) + " and " +
                           dtypeName(b.dtype()));
    auto shape = broadcastShapes({c.shape(), a.shape(), b.shape()});
    if (!shape) return shape.status();
    DW_ALLOC(y, ctx.output(0, a.dtype(), *shape));
    const bool* pc = c.data<bool>();
    std::array<const Shape*, 3> ins{&c.shape(), &a.shape(), &b.shape()};
    if (a.dtype() == DType::kString) {
      forEachBroadcast<3>(*shape, ins, [&](int64_t i, const std::array<int64_t, 3>& o) {
        y->strings()[i] = pc[o[0]] ? a.strings()[o[1]] : b.strings()[o[2]];
      });
      return Status();
    }
    return dispatchBytes(a.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* py = y->data<T>();
      // A choice by bit mask (T is an unsigned integer of the element's size) rather than a
      // branch: a mask of random bits mispredicted every other element, 4 ns an element.
      auto pick = [](bool cond, T yes, T no) {
        const T m = static_cast<T>(T(0) - static_cast<T>(cond));
        return static_cast<T>((yes & m) | (no & ~m));
      };
      // Each input whole (of the output's shape) or one value: a flat loop per combination
      // (a mask and a fill value, the usual masking of attention scores), 20x the broadcasting
      // loop's speed.
      auto flat = [&](const Tensor& t) { return t.shape() == *shape || t.size() == 1; };
      if (flat(c) && flat(a) && flat(b)) {
        const int64_t n = y->size();
        auto loop = [&](auto wc, auto wa, auto wb) {
          constexpr bool kC = decltype(wc)::value, kA = decltype(wa)::value,
                         kB = decltype(wb)::value;
          forThreadRanges(n, n, [pc, pa, pb, py, pick](int64_t from, int64_t to) {
            for (int64_t i = from; i < to; ++i)
              py[i] = pick(pc[kC ? i : 0], pa[kA ? i : 0], pb[kB ? i : 0]);
          });
        };
        // Whole or one value, per input, as a type the loop is compiled for.
        auto whole = [&](const Tensor& t, auto next) {
          return t.shape() == *shape ? next(std::true_type{}) : next(std::false_type{});
        };
        whole(c, [&](auto wc) {
          whole(a, [&](auto wa) { whole(b, [&](auto wb) { loop(wc, wa, wb); }); });
        });
        return Status();
      }
      forEachBroadcastParallel<3>(*shape, ins, [&](int64_t i, const std::array<int64_t, 3>& o) {
        py[i] = pick(pc[o[0]], pa[o[1]], pb[o[2]]);
      });
      return Status();
    });
  }
};

}  // namespace

void addElementwiseKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  for (const auto& op : ops::unaryOps())
    if (op.tableKernels()) r.add(h, op.name, op.since, kMaxOpset, &makeKernel<Unary>);
  r.add(h, "Not", 1, kMaxOpset, &makeKernel<Predicate>, false);
  r.add(h, "BitwiseNot", 18, kMaxOpset, &makeKernel<BitwiseNot>, false);
  for (const char* op : {"IsNaN", "IsInf"}) r.add(h, op, 1, kMaxOpset, &makeKernel<Predicate>);
  for (const auto& op : ops::binaryOps())
    r.add(h, op.name, op.since, kMaxOpset, &makeKernel<Binary>);
  for (const char* op : {"Sum", "Mean", "Max", "Min"})
    r.add(h, op, 1, kMaxOpset, &makeKernel<Variadic>);
  r.add(h, "Clip", 1, kMaxOpset, &makeKernel<Clip>);
  r.add(h, "PRelu", 1, kMaxOpset, &makeKernel<PRelu>);
  r.add(h, "Where", 1, kMaxOpset, &makeKernel<Where>, false);
}

}  // namespace dw::engine
