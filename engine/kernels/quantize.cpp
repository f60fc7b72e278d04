// Quantization ops: QuantizeLinear / DequantizeLinear (per tensor or per axis), the integer
// products MatMulInteger / ConvInteger (int32 accumulation), and their requantizing forms
// QLinearMatMul / QLinearConv. Rounding is half-to-even and results saturate to the output type,
// as the ONNX operator documentation defines. DynamicQuantizeLinear expands from its function
// body onto these.
#include <algorithm>
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/direct_conv.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

// Reads element i of an 8-bit (or int32) integer tensor.
inline int32_t intAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kUInt8:
      return t.data<uint8_t>()[i];
    case DType::kInt8:
      return t.data<int8_t>()[i];
    case DType::kInt32:
      return t.data<int32_t>()[i];
    default:
      return static_cast<int32_t>(t.getInt(i));
  }
}

bool isQuantType(DType t) {
  return t == DType::kUInt8 || t == DType::kInt8;
}

// Writes a rounded value saturated to the quantized type. NaN (a NaN input, or a zero scale
// over zero) becomes 0 rather than an undefined conversion.
inline void storeQuant(Tensor& t, int64_t i, double v) {
  if (std::isnan(v)) v = 0;
  if (t.dtype() == DType::kUInt8)
    t.data<uint8_t>()[i] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
  else
    t.data<int8_t>()[i] = static_cast<int8_t>(std::clamp(v, -128.0, 127.0));
}

// Index of the per-axis parameter that element i of a tensor of `shape` uses.
struct AxisParam {
  int64_t inner = 1, dim = 1;
  bool perAxis = false;
  int64_t at(int64_t i) const { return perAxis ? (i / inner) % dim : 0; }
};

Result<AxisParam> axisParam(const Shape& shape, const Tensor& param, int64_t axis) {
  AxisParam p;
  if (param.size() <= 1 && param.rank() <= 1) return p;
  if (param.rank() != 1 || !validAxis(axis, shape.size()))
    return Status::error("scale and zero point must be scalars or 1-D along a valid axis");
  const int64_t a = normAxis(axis, shape.size());
  if (param.size() != shape[a])
    return Status::error("per-axis scale has " + std::to_string(param.size()) +
                         " values for an axis of " + std::to_string(shape[a]));
  p.perAxis = true;
  p.dim = shape[a];
  for (size_t d = a + 1; d < shape.size(); ++d) p.inner *= shape[d];
  return p;
}

class QuantizeLinear : public Kernel {
 public:
  explicit QuantizeLinear(const KernelInit& init) : axis_(init.attrs.getInt("axis", 1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    const DType out = ctx.hasInput(2) ? ctx.input(2).dtype() : DType::kUInt8;
    if (!isQuantType(out)) return Status::error("y_zero_point must be uint8 or int8");
    auto p = axisParam(x.shape(), scale, axis_);
    if (!p) return p.status();
    DW_ALLOC(y, ctx.output(0, out, x.shape()));
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c = p->at(i);
      const float v = static_cast<float>(x.getDouble(i)) / static_cast<float>(scale.getDouble(c));
      const int32_t zp = ctx.hasInput(2) ? intAt(ctx.input(2), c) : 0;
      storeQuant(*y, i, std::nearbyint(v) + zp);
    }
    return Status();
  }

 private:
  int64_t axis_;
};

class DequantizeLinear : public Kernel {
 public:
  explicit DequantizeLinear(const KernelInit& init) : axis_(init.attrs.getInt("axis", 1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    auto p = axisParam(x.shape(), scale, axis_);
    if (!p) return p.status();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c = p->at(i);
      const int32_t zp = ctx.hasInput(2) ? intAt(ctx.input(2), c) : 0;
      y->data<float>()[i] =
          static_cast<float>(intAt(x, i) - zp) * static_cast<float>(scale.getDouble(c));
    }
    return Status();
  }

 private:
  int64_t axis_;
};

// A scale, zero point or bias read as one value or one per row, column or channel: it must hold
// 1 or `n` values (exactly n where `one` is false), or the kernel would read past it.
Status checkCount(const Tensor* t, int64_t n, const char* what, bool one = true) {
  if (!t || (one && t->size() == 1) || t->size() == n) return Status();
  return Status::error(std::string(what) + " has " + std::to_string(t->size()) +
                       " values; it takes " + (one ? "1 or " : "") + std::to_string(n));
}

// int32 = sum_k (a[m,k] - azp[m]) * (b[k,n] - bzp[n]) with numpy batch broadcasting; QLinear
// requantizes with scales (a per row, b per column, or scalars).
class MatMulInt : public Kernel {
 public:
  explicit MatMulInt(const KernelInit& init) : qlinear_(init.opType == "QLinearMatMul") {}
  Status compute(KernelContext& ctx) override {
    const int ia = 0, ib = qlinear_ ? 3 : 1;
    const Tensor& a = ctx.input(ia);
    const Tensor& b = ctx.input(ib);
    if (!isQuantType(a.dtype()) || !isQuantType(b.dtype()))
      return Status::error("A and B must be uint8 or int8");
    auto geo = matMulGeometry(a.shape(), b.shape());
    if (!geo) return geo.status();
    const int64_t M = geo->M, K = geo->K, N = geo->N;
    const Tensor* azp = nullptr;
    const Tensor* bzp = nullptr;
    if (qlinear_) {
      azp = &ctx.input(2);
      bzp = &ctx.input(5);
    } else {
      if (ctx.hasInput(2)) azp = &ctx.input(2);
      if (ctx.hasInput(3)) bzp = &ctx.input(3);
    }
    DW_RETURN_IF_ERROR(checkCount(azp, M, "A's zero point (one per row)"));
    DW_RETURN_IF_ERROR(checkCount(bzp, N, "B's zero point (one per column)"));
    if (qlinear_) {
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(1), M, "A's scale (one per row)"));
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(4), N, "B's scale (one per column)"));
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(6), 1, "Y's scale"));
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(7), 1, "Y's zero point"));
    }
    DType outType = DType::kInt32;
    if (qlinear_) outType = ctx.input(7).dtype();
    DW_ALLOC(y, ctx.output(0, outType, geo->out));
    std::vector<int32_t> acc(N);
    for (int64_t bi = 0; bi < geo->batches; ++bi) {
      const auto [oa, ob] = geo->operands(bi);
      for (int64_t m = 0; m < M; ++m) {
        const int32_t za = azp ? intAt(*azp, azp->size() > 1 ? m : 0) : 0;
        std::fill(acc.begin(), acc.end(), 0);
        for (int64_t k = 0; k < K; ++k) {
          const int32_t av = intAt(a, (oa * M + m) * K + k) - za;
          if (av == 0) continue;
          for (int64_t n = 0; n < N; ++n)
            acc[n] += av * (intAt(b, (ob * K + k) * N + n) -
                            (bzp ? intAt(*bzp, bzp->size() > 1 ? n : 0) : 0));
        }
        for (int64_t n = 0; n < N; ++n) {
          const int64_t o = (bi * M + m) * N + n;
          if (!qlinear_) {
            y->data<int32_t>()[o] = acc[n];
            continue;
          }
          const Tensor &as = ctx.input(1), &bs = ctx.input(4), &ys = ctx.input(6);
          const double scale = as.getDouble(as.size() > 1 ? m : 0) *
                               bs.getDouble(bs.size() > 1 ? n : 0) / ys.getDouble(0);
          storeQuant(*y, o, std::nearbyint(acc[n] * scale) + intAt(ctx.input(7), 0));
        }
      }
    }
    return Status();
  }

 private:
  bool qlinear_;
};

// ConvInteger and QLinearConv: the direct convolution (direct_conv.h), accumulating
// (x - x_zp) * (w - w_zp) in int32.
class ConvInt : public Kernel {
 public:
  explicit ConvInt(const KernelInit& init)
      : qlinear_(init.opType == "QLinearConv"), attrs_(init.attrs) {}

  Status compute(KernelContext& ctx) override {
    const int ix = 0, iw = qlinear_ ? 3 : 1;
    const Tensor& x = ctx.input(ix);
    const Tensor& w = ctx.input(iw);
    if (!isQuantType(x.dtype()) || !isQuantType(w.dtype()))
      return Status::error("x and w must be uint8 or int8");
    auto g = convGeometry(x.shape(), w.shape(), attrs_);
    if (!g) return g.status();
    const Tensor* xzp = qlinear_ ? &ctx.input(2) : (ctx.hasInput(2) ? &ctx.input(2) : nullptr);
    const Tensor* wzp = qlinear_ ? &ctx.input(5) : (ctx.hasInput(3) ? &ctx.input(3) : nullptr);
    DW_RETURN_IF_ERROR(checkCount(xzp, 1, "x's zero point"));
    DW_RETURN_IF_ERROR(checkCount(wzp, g->oc, "w's zero point (one per output channel)"));
    if (qlinear_) {
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(1), 1, "x's scale"));
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(4), g->oc, "w's scale (one per output channel)"));
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(6), 1, "y's scale"));
      DW_RETURN_IF_ERROR(checkCount(&ctx.input(7), 1, "y's zero point"));
      if (ctx.hasInput(8))
        DW_RETURN_IF_ERROR(checkCount(&ctx.input(8), g->oc, "B (one per output channel)", false));
    }
    const DType outType = qlinear_ ? ctx.input(7).dtype() : DType::kInt32;
    DW_ALLOC(y, ctx.output(0, outType, g->out));
    const int32_t zx = xzp ? intAt(*xzp, 0) : 0;
    std::vector<int32_t> zw(static_cast<size_t>(g->oc), 0);
    for (int64_t oc = 0; oc < g->oc && wzp; ++oc) zw[oc] = intAt(*wzp, wzp->size() > 1 ? oc : 0);
    directConv<int32_t>(
        *g,
        [&](int64_t xi, int64_t wi, int64_t oc) {
          return (intAt(x, xi) - zx) * (intAt(w, wi) - zw[oc]);
        },
        [&](int64_t at, int64_t oc, int32_t acc) {
          if (!qlinear_) {
            y->data<int32_t>()[at] = acc;
            return;
          }
          if (ctx.hasInput(8)) acc += intAt(ctx.input(8), oc);
          const Tensor &xs = ctx.input(1), &ws = ctx.input(4), &ys = ctx.input(6);
          const double scale =
              xs.getDouble(0) * ws.getDouble(ws.size() > 1 ? oc : 0) / ys.getDouble(0);
          storeQuant(*y, at, std::nearbyint(acc * scale) + intAt(ctx.input(7), 0));
        });
    return Status();
  }

 private:
  bool qlinear_;
  Attributes attrs_;
};

}  // namespace

void addQuantizeKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  r.add(h, "QuantizeLinear", 10, kMaxOpset, &makeKernel<QuantizeLinear>, false);
  r.add(h, "DequantizeLinear", 10, kMaxOpset, &makeKernel<DequantizeLinear>, false);
  r.add(h, "MatMulInteger", 10, kMaxOpset, &makeKernel<MatMulInt>, false);
  r.add(h, "QLinearMatMul", 10, kMaxOpset, &makeKernel<MatMulInt>, false);
  r.add(h, "ConvInteger", 10, kMaxOpset, &makeKernel<ConvInt>, false);
  r.add(h, "QLinearConv", 10, kMaxOpset, &makeKernel<ConvInt>, false);
}

}  // namespace dw::engine
