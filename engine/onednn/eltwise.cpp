// oneDNN-backed kernels of the onednn table (run by the cpu and gpu backends on their engines,
// tensors bound through onednn::Bindings) for the "light" ops oneDNN has primitives for:
// eltwise activations, binary arithmetic with broadcasting, softmax / logsoftmax, layer
// normalization, concat, PRelu, reductions and linear resampling. Each runs float32 on oneDNN and
// hands every other dtype or attribute combination oneDNN can't express to the op's kernel in
// the reference table (engine/kernels/), which stays the reference for the conformance suite.
// Primitives are cached per input-shape signature.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/kernels/concat_rows.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/onednn/vector_math.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"
#include "ops/binary_table.h"
#include "ops/reduce_table.h"

namespace dw::engine {

namespace {

using dnnl::memory;
constexpr auto f32 = memory::data_type::f32;
using onednn::dnnlBackend;
using onednn::plainDesc;

using onednn::inputShapesKey;

bool allFloat(const KernelContext& ctx) {
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i) && (!ctx.inputValue(i).isTensor() || ctx.input(i).dtype() != DType::kFloat))
      return false;
  return true;
}

// o = x op f over `rows` rows of `c` values: f per column (`perColumn`) or the scalar `f0`.
// Compiled for AVX-512 and AVX2 too: the engine's baseline is SSE2.
__attribute__((target_clones("avx512f", "avx2", "default"))) void scaleRows(ops::BinaryFn fn,
                                                                            const float* x,
                                                                            const float* perColumn,
                                                                            float f0, int64_t rows,
                                                                            int64_t c, float* o) {
  auto pass = [&](auto op) {
    for (int64_t r = 0; r < rows; ++r, x += c, o += c) {
      if (perColumn)
        for (int64_t k = 0; k < c; ++k) o[k] = op(x[k], perColumn[k]);
      else
        for (int64_t k = 0; k < c; ++k) o[k] = op(x[k], f0);
    }
  };
  using F = ops::BinaryFn;
  switch (fn) {
    case F::kAdd:
      return pass([](float u, float v) { return u + v; });
    case F::kSub:
      return pass([](float u, float v) { return u - v; });
    case F::kMul:
      return pass([](float u, float v) { return u * v; });
    default:
      return pass([](float u, float v) { return u / v; });
  }
}

// Common shell: cached primitive per shape key, reference kernel for the rest.
class DnnlOrReference : public Kernel {
 public:
  // The node pointer doesn't outlive planning; reference kernels built later don't need it.
  explicit DnnlOrReference(const KernelInit& init) : init_(init) { init_.node = nullptr; }

 protected:
  Status reference(KernelContext& ctx) { return reference_.compute(init_, ctx); }
  template <class F>
  Status guarded(F&& f) {
    return onednn::guarded(init_.opType, &bind_, std::forward<F>(f));
  }
  // One argument of a primitive call: a tensor as `desc`.
  struct Arg {
    int id;
    memory::desc desc;
    const Tensor* tensor;
  };
  // Runs `prim` on the tensors `in` it reads and `out` it writes, and waits for it: the tensors
  // may be released as soon as the kernel returns.
  void execute(onednn::DnnlBackend& be, const dnnl::primitive& prim, const std::vector<Arg>& in,
               const std::vector<Arg>& out) {
    std::unordered_map<int, memory> m;
    for (const Arg& a : in) m.emplace(a.id, bind_.in(be, a.id, a.desc, a.tensor->raw()));
    for (const Arg& a : out)
      m.emplace(a.id, bind_.out(be, a.id, a.desc, const_cast<void*>(a.tensor->raw())));
    prim.execute(be.stream(), m);
    bind_.finish(be);
  }
  KernelInit init_;
  onednn::ReferenceFallback reference_;
  std::map<std::vector<int64_t>, dnnl::primitive> cache_;
  onednn::Bindings bind_;
};

// The oneDNN eltwise call computing an op of ops/unary_table.h, shared by the forward kernel
// and the UnaryGrad backward kernel; an error where oneDNN has none or the node's attributes are
// invalid.
struct EltwiseAlg {
  dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
  float alpha = 0, beta = 0;
};
Status eltwiseAlg(const std::string& op, const Attributes& a, EltwiseAlg* e) {
  const ops::UnaryOp* row = ops::findUnaryOp(op);
  // Rows with kernels of their own (Clip: bounds from inputs) are not computed from attributes.
  if (!row || row->ownKernels) return Status::error("no table-driven elementwise op " + op);
  auto u = resolveUnary(*row, a);
  if (!u) return u.status();
  if (u->onednn.alg == ops::Eltwise::kNone) return Status::error("no oneDNN eltwise for " + op);
  e->alg = onednn::eltwiseAlgorithm(u->onednn.alg);
  e->alpha = u->onednn.alpha;
  e->beta = u->onednn.beta;
  return Status();
}

// Unary activations with a oneDNN eltwise algorithm.
class Eltwise : public DnnlOrReference {
 public:
  explicit Eltwise(const KernelInit& init) : DnnlOrReference(init) {
    if (Status st = eltwiseAlg(init.opType, init.attrs, &e_); !st.ok()) fail(st.message());
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.size() == 0) return reference(ctx);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    if (e_.alg == dnnl::algorithm::eltwise_relu && e_.alpha == 0.0f &&
        dnnlBackend(ctx.backend()).hostMemory()) {
      // oneDNN's Relu turns NaN into 0, which would hide a diverged model's NaNs; this loop
      // keeps them (it compiles to max(0, x), which returns x where x is NaN) at the same speed.
      const float* in = x.data<float>();
      float* out = y->data<float>();
      const int64_t n = x.size();
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 16))
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] < 0.0f ? 0.0f : in[i];
      return Status();
    }
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      // Elementwise: any shape is a flat vector.
      const memory::desc md({x.size()}, f32, memory::format_tag::a);
      auto& prim = cache_[{x.size()}];
      if (!prim) {
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, e_.alg, md, e_.alpha,
                                      e_.beta);
        prim = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, be.engine()));
      }
      execute(be, prim, {{DNNL_ARG_SRC, md, &x}}, {{DNNL_ARG_DST, md, y}});
      return Status();
    });
  }

 private:
  EltwiseAlg e_;
};

// UnaryGrad(dY, X, Y) (com.deepwire.grad, attribute op = the forward op) on oneDNN's eltwise
// backward from the source X; ops without a oneDNN algorithm and other dtypes use the plain
// kernel.
class EltwiseGrad : public DnnlOrReference {
 public:
  explicit EltwiseGrad(const KernelInit& init) : DnnlOrReference(init) {
    ok_ = eltwiseAlg(init.attrs.getString("op"), init.attrs, &e_).ok();
  }
  Status compute(KernelContext& ctx) override {
    if (!ok_ || !allFloat(ctx) || ctx.input(0).size() == 0 ||
        ctx.input(0).shape() != ctx.input(1).shape())
      return reference(ctx);
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, dy.shape()));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc md({dy.size()}, f32, memory::format_tag::a);
      auto& prim = cache_[{dy.size()}];
      if (!prim) {
        dnnl::eltwise_forward::primitive_desc fpd(
            dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, e_.alg, md, e_.alpha,
                                        e_.beta),
            be.engine());
        prim = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
            dnnl::eltwise_backward::desc(e_.alg, md, md, e_.alpha, e_.beta), be.engine(), fpd));
      }
      execute(be, prim, {{DNNL_ARG_DIFF_DST, md, &dy}, {DNNL_ARG_SRC, md, &x}},
              {{DNNL_ARG_DIFF_SRC, md, dx}});
      return Status();
    });
  }

 private:
  EltwiseAlg e_;
  bool ok_ = false;
};

// Add/Sub/Mul/Div with numpy broadcasting, where oneDNN can take it: src0 has the output shape
// (or the operands commute) and src1 broadcasts along whole dimensions.
class BinaryOp : public DnnlOrReference {
 public:
  explicit BinaryOp(const KernelInit& init) : DnnlOrReference(init) {
    const ops::BinaryOp* row = ops::findBinaryOp(init.opType);
    if (!row || row->onednn == ops::BinaryAlg::kNone) {
      fail("no oneDNN binary algorithm for " + init.opType);
      return;
    }
    using A = dnnl::algorithm;
    using B = ops::BinaryAlg;
    alg_ = row->onednn == B::kAdd   ? A::binary_add
           : row->onednn == B::kSub ? A::binary_sub
           : row->onednn == B::kMul ? A::binary_mul
                                    : A::binary_div;
    fn_ = row->fn;
    commutes_ = row->fn == ops::BinaryFn::kAdd || row->fn == ops::BinaryFn::kMul;
    legacy_ = init.opset < 7 && init.attrs.getInt("broadcast") != 0;
    const auto f = fusion::fusedOf(init.attrs);
    blocked_ = !f.blockedInputs.empty();
    nhwc_ = !f.nhwcInputs.empty() || blocked_;
    nhwcInput_ = blocked_ ? f.blockedInputs[0] : (nhwc_ ? f.nhwcInputs[0] : 0);
  }
  Status compute(KernelContext& ctx) override {
    const Tensor* a = &ctx.input(0);
    const Tensor* b = &ctx.input(1);
    auto out = broadcastShapes({a->shape(), b->shape()});
    if (!out) return out.status();
    if (nhwc_) {
      // The session's markNhwcChains: input nhwcInput_ and the output are NHWC 4-D tensors, the
      // other operand broadcasts per channel ([N|1, C, 1, 1], the same in either layout).
      if (nhwcInput_ == 1) std::swap(a, b);
      if (legacy_ || !allFloat(ctx) || out->size() != 4 || a->shape() != *out ||
          (nhwcInput_ == 1 && !commutes_) || (blocked_ && !onednn::blockedShapeOk(*out)))
        return Status::error(
            "this node cannot take an NHWC or nChw16c operand; run the session with fuse "
            "off");
    } else {
      if (legacy_ || !allFloat(ctx)) return reference(ctx);
      if (numElements(*out) == 0 || out->empty()) return reference(ctx);
      if (a->shape() != *out) {
        if (!commutes_ || b->shape() != *out) return reference(ctx);
        std::swap(a, b);
      }
    }
    Shape sb = b->shape();
    while (sb.size() < out->size()) sb.insert(sb.begin(), 1);
    if (blocked_) {
      if (!dnnlBackend(ctx.backend()).hostMemory())
        return Status::error("an nChw16c operand needs host memory; run the session with fuse off");
      return perChannel(ctx, *a, sb, *b, *out, onednn::kChannelBlock);
    }
    // oneDNN 2.6's binary primitive writes a new tensor at about a third of the speed (0.11
    // against 0.04 ms for efficientnet_b0's first squeeze-excitation scale at batch 1).
    if (nhwc_ && sb[2] == 1 && sb[3] == 1 && dnnlBackend(ctx.backend()).hostMemory())
      return perChannel(ctx, *a, sb, *b, *out, (*out)[1]);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, *out));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc da = nhwc_ ? memory::desc(onednn::toDims(*out), f32,
                                                   memory::format_tag::acdb)
                                    : plainDesc(*out, f32),
                         db = plainDesc(sb, f32);
      std::vector<int64_t> key = *out;
      key.push_back(-1);
      key.insert(key.end(), sb.begin(), sb.end());
      auto& prim = cache_[key];
      if (!prim) {
        dnnl::binary::desc d(alg_, da, db, da);
        prim = dnnl::binary(dnnl::binary::primitive_desc(d, be.engine()));
      }
      execute(be, prim, {{DNNL_ARG_SRC_0, da, a}, {DNNL_ARG_SRC_1, db, b}},
              {{DNNL_ARG_DST, da, y}});
      return Status();
    });
  }

 private:
  // Squeeze-and-excitation's scaling of X ([N, C, H, W] in NHWC or nChw16c) by a value per
  // channel (`sb`: [N|1, C|1, 1, 1]) on host memory, in X's memory where X dies here. For
  // nChw16c, oneDNN 2.6's binary primitive has no kernel but its reference one, 150x slower
  // (efficientnet_b0 at batch 8: 290 ms for the 16 of them, against 1.3 ms here). The tensor is
  // rows of `c` channels (16 for nChw16c, all of them for NHWC), `rows` of them per image and
  // channel block.
  Status perChannel(KernelContext& ctx, const Tensor& x, const Shape& sb, const Tensor& s,
                    const Shape& out, int64_t c) {
    DW_ALLOC(y, ctx.outputReusing(0, static_cast<size_t>(nhwcInput_), DType::kFloat, out));
    const int64_t blocks = out[1] / c;
    const int64_t rows = out[2] * out[3], count = out[0] * blocks * rows;
    const int64_t perImage = sb[0] == 1 ? 0 : out[1];
    const bool perChannel = sb[1] != 1;
    const float* xv = x.data<float>();
    const float* sv = s.data<float>();
    float* yv = y->data<float>();
    // Each thread a contiguous range of rows, walked a block (image * blocks + channel block:
    // one set of factors) at a time.
    forThreadRanges(count, count * c, [&](int64_t p, int64_t to) {
      while (p < to) {
        const int64_t block = p / rows, end = std::min(to, (block + 1) * rows);
        const float* f = sv + (block / blocks) * perImage + (perChannel ? (block % blocks) * c : 0);
        scaleRows(fn_, xv + p * c, perChannel ? f : nullptr, f[0], end - p, c, yv + p * c);
        p = end;
      }
    });
    return Status();
  }

  dnnl::algorithm alg_;
  ops::BinaryFn fn_ = ops::BinaryFn::kAdd;
  bool commutes_ = false, legacy_ = false;
  bool nhwc_ = false;      // one operand and the output are NHWC (markNhwcChains)
  bool blocked_ = false;   // or nChw16c
  int64_t nhwcInput_ = 0;  // which operand
};

// The shape oneDNN's softmax sees and its axis: opset 13 normalizes along one axis; earlier
// opsets (`legacy`) flatten to [prod(dims before axis), prod(dims from axis)] and normalize the
// second dimension. False where the view has more dimensions than oneDNN takes.
bool softmaxView(const Shape& s, int64_t axisAttr, bool legacy, Shape* view, int* axis) {
  const int64_t a = normAxis(axisAttr, s.size());
  *view = s;
  *axis = static_cast<int>(a);
  if (legacy) {
    int64_t outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= s[d];
    *view = {outer, numElements(s) / outer};
    *axis = 1;
  }
  return view->size() <= 6;
}

// Softmax / LogSoftmax: opset 13 normalizes along one axis; earlier opsets flatten to
// [prod(dims before axis), prod(dims from axis)] and normalize the second dimension.
class SoftmaxOp : public DnnlOrReference {
 public:
  explicit SoftmaxOp(const KernelInit& init)
      : DnnlOrReference(init),
        log_(init.opType == "LogSoftmax"),
        legacy_(init.opset < 13),
        axis_(init.attrs.getInt("axis")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.size() == 0 || x.rank() == 0) return reference(ctx);
    if (!validAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    Shape view;
    int axis = 0;
    if (!softmaxView(x.shape(), axis_, legacy_, &view, &axis)) return reference(ctx);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    if (!log_ && axis + 1 == static_cast<int>(view.size()) && vectorMathAvailable() &&
        dnnlBackend(ctx.backend()).hostMemory()) {
      // Along the innermost axis (attention scores): onednn/vector_math.h's rows took half the
      // time of oneDNN 2.6's softmax on the zoo transformer's 4096 rows of 128.
      const int64_t n = view.back();
      onednn::softmaxRows(x.data<float>(), y->data<float>(), x.size() / n, n);
      return Status();
    }
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc md = plainDesc(view, f32);
      std::vector<int64_t> key = view;
      key.push_back(axis);
      auto& prim = cache_[key];
      if (!prim) {
        dnnl::softmax_v2_forward::desc d(
            dnnl::prop_kind::forward_inference,
            log_ ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md, md, axis);
        prim = dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(d, be.engine()));
      }
      execute(be, prim, {{DNNL_ARG_SRC, md, &x}}, {{DNNL_ARG_DST, md, y}});
      // oneDNN 2.6's log gives up to a few units in the last place above 0 for a row's clear
      // winner (1.4e-6 at 12.7 against -9.3 and -7.9): a log-probability is at most 0, and a
      // cross-entropy from it came out negative (a trial's loss curve ran below zero).
      if (log_) {
        float* p = y->data<float>();
        const int64_t n = y->size();
        forThreadRanges(n, n, [&](int64_t from, int64_t to) {
          for (int64_t i = from; i < to; ++i) p[i] = std::min(p[i], 0.0f);
        });
      }
      return Status();
    });
  }

 private:
  bool log_, legacy_;
  int64_t axis_;
};

// SoftmaxGrad(dY, Y) (com.deepwire.grad; attributes axis, log, legacy as the forward) on
// oneDNN's softmax backward, which reads the forward's output.
class SoftmaxGradOp : public DnnlOrReference {
 public:
  explicit SoftmaxGradOp(const KernelInit& init)
      : DnnlOrReference(init),
        log_(init.attrs.getInt("log", 0) != 0),
        legacy_(init.attrs.getInt("legacy", 0) != 0),
        axis_(init.attrs.getInt("axis", -1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& y = ctx.input(1);
    if (!allFloat(ctx) || y.size() == 0 || y.rank() == 0 || dy.shape() != y.shape() ||
        !validAxis(axis_, y.rank()))
      return reference(ctx);
    Shape view;
    int axis = 0;
    if (!softmaxView(y.shape(), axis_, legacy_, &view, &axis)) return reference(ctx);
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, y.shape()));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc md = plainDesc(view, f32);
      std::vector<int64_t> key = view;
      key.push_back(axis);
      auto& prim = cache_[key];
      if (!prim) {
        const auto alg = log_ ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
        dnnl::softmax_v2_forward::primitive_desc fpd(
            dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training, alg, md, md, axis),
            be.engine());
        prim = dnnl::softmax_v2_backward(dnnl::softmax_v2_backward::primitive_desc(
            dnnl::softmax_v2_backward::desc(alg, md, md, md, axis), be.engine(), fpd));
      }
      execute(be, prim, {{DNNL_ARG_DIFF_DST, md, &dy}, {DNNL_ARG_DST, md, &y}},
              {{DNNL_ARG_DIFF_SRC, md, dx}});
      return Status();
    });
  }

 private:
  bool log_, legacy_;
  int64_t axis_;
};

// LayerNormalization (opset 17) over the dimensions from `axis` on: oneDNN's layer normalization
// over [outer, inner] when Scale/B are full [inner] vectors (forward_training when the Mean /
// InvStdDev outputs are wanted: oneDNN gives the variance, InvStdDev is 1/sqrt(var + epsilon));
// otherwise the plain loop below, which also serves every other float dtype.
class LayerNorm : public DnnlOrReference {
 public:
  explicit LayerNorm(const KernelInit& init)
      : DnnlOrReference(init),
        axis_(init.attrs.getInt("axis")),
        eps_(init.attrs.getFloat("epsilon")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validAxis(axis_, x.rank()) || x.rank() == 0) return Status::error("axis out of range");
    const int64_t a = normAxis(axis_, x.rank());
    int64_t outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    const int64_t inner = outer ? x.size() / outer : 0;
    const Shape tail(x.shape().begin() + a, x.shape().end());
    for (int i : {1, 2})
      if (ctx.hasInput(i))
        DW_RETURN_IF_ERROR(
            broadcastsTo(ctx.input(i).shape(), tail,
                         i == 1 ? "LayerNormalization: Scale" : "LayerNormalization: B"));
    const bool stats = ctx.wantsOutput(1) || ctx.wantsOutput(2);
    const bool dnnlOk = allFloat(ctx) && inner > 0 && outer > 0 && ctx.input(1).size() == inner &&
                        (!ctx.hasInput(2) || ctx.input(2).size() == inner);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    Shape statShape(x.shape().begin(), x.shape().begin() + a);
    while (statShape.size() < x.rank()) statShape.push_back(1);
    Tensor* mean = nullptr;
    Tensor* inv = nullptr;
    if (ctx.wantsOutput(1) && !(mean = ctx.output(1, DType::kFloat, statShape)))
      return ctx.status();
    if (ctx.wantsOutput(2) && !(inv = ctx.output(2, DType::kFloat, statShape))) return ctx.status();
    if (dnnlOk) {
      return guarded([&] {
        auto& be = dnnlBackend(ctx.backend());
        const memory::desc md = plainDesc({outer, inner}, f32);
        const memory::desc vd({inner}, f32, memory::format_tag::a);
        const memory::desc sd({outer}, f32, memory::format_tag::a);
        auto& prim = cache_[{outer, inner, ctx.hasInput(2), stats}];
        auto flags = dnnl::normalization_flags::use_scale;
        if (ctx.hasInput(2)) flags = flags | dnnl::normalization_flags::use_shift;
        if (!prim) {
          dnnl::layer_normalization_forward::desc d(
              stats ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, md,
              eps_, flags);
          prim = dnnl::layer_normalization_forward(
              dnnl::layer_normalization_forward::primitive_desc(d, be.engine()));
        }
        std::vector<Arg> in{{DNNL_ARG_SRC, md, &x}, {DNNL_ARG_SCALE, vd, &ctx.input(1)}};
        std::vector<Arg> out{{DNNL_ARG_DST, md, y}};
        if (ctx.hasInput(2)) in.push_back({DNNL_ARG_SHIFT, vd, &ctx.input(2)});
        Tensor* var = nullptr;
        if (stats) {
          Tensor* m = mean ? mean : ctx.scratch(DType::kFloat, {outer});
          var = ctx.scratch(DType::kFloat, {outer});
          if (!m || !var) return ctx.status();
          out.push_back({DNNL_ARG_MEAN, sd, m});
          out.push_back({DNNL_ARG_VARIANCE, sd, var});
        }
        execute(be, prim, in, out);
        if (inv) {
          const float* v = var->data<float>();
          float* r = inv->data<float>();
          for (int64_t o = 0; o < outer; ++o) r[o] = 1.f / std::sqrt(v[o] + eps_);
        }
        return Status();
      });
    }
    // Plain path: statistics in double, Scale/B broadcast over the normalized dimensions.
    std::vector<double> scale(inner, 1.0), bias(inner, 0.0);
    for (int i : {1, 2}) {
      if (!ctx.hasInput(i)) continue;
      const Tensor& p = ctx.input(i);
      const auto st = broadcastStrides(p.shape(), tail);
      const auto ts = stridesOf(tail);
      for (int64_t j = 0; j < inner; ++j) {
        int64_t off = 0;
        for (size_t d = 0; d < tail.size(); ++d) off += ((j / ts[d]) % tail[d]) * st[d];
        (i == 1 ? scale : bias)[j] = p.getDouble(off);
      }
    }
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      for (int64_t o = 0; o < outer; ++o) {
        const T* p = x.data<T>() + o * inner;
        T* q = y->data<T>() + o * inner;
        double m = 0, v = 0;
        for (int64_t j = 0; j < inner; ++j) m += p[j];
        m /= inner;
        for (int64_t j = 0; j < inner; ++j) v += (p[j] - m) * (p[j] - m);
        v /= inner;
        const double r = 1.0 / std::sqrt(v + eps_);
        for (int64_t j = 0; j < inner; ++j)
          q[j] = static_cast<T>((p[j] - m) * r * scale[j] + bias[j]);
        if (mean) mean->data<float>()[o] = static_cast<float>(m);
        if (inv) inv->data<float>()[o] = static_cast<float>(r);
      }
      return Status();
    });
  }

 private:
  int64_t axis_;
  float eps_;
};

// LayerNormalizationGrad (com.deepwire.grad; inputs dY, X, Scale, Mean, InvStdDev; outputs dX,
// dScale, dB) on oneDNN's layer normalization backward. oneDNN wants the variance: with epsilon
// 0 in the primitive, variance = 1 / InvStdDev^2 reproduces the forward's 1/sqrt(var + eps)
// without knowing eps. Non-float inputs and partial Scale go to the plain kernel.
class LayerNormGrad : public DnnlOrReference {
 public:
  explicit LayerNormGrad(const KernelInit& init)
      : DnnlOrReference(init), axis_(init.attrs.getInt("axis", -1)) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(1);
    if (!allFloat(ctx) || x.rank() == 0 || !validAxis(axis_, x.rank())) return reference(ctx);
    const int64_t a = normAxis(axis_, x.rank());
    int64_t outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    const int64_t inner = outer ? x.size() / outer : 0;
    if (outer == 0 || inner == 0 || ctx.input(0).shape() != x.shape() ||
        ctx.input(2).size() != inner || ctx.input(3).size() != outer ||
        ctx.input(4).size() != outer)
      return reference(ctx);
    Tensor* dx = ctx.output(0, DType::kFloat, x.shape());
    Tensor* ds = ctx.output(1, DType::kFloat, ctx.input(2).shape());
    Tensor* db = ctx.output(2, DType::kFloat, ctx.input(2).shape());
    Tensor* var = ctx.scratch(DType::kFloat, {outer});
    if (!dx || !ds || !db || !var) return ctx.status();
    const float* is = ctx.input(4).data<float>();
    for (int64_t o = 0; o < outer; ++o) var->data<float>()[o] = 1.f / (is[o] * is[o]);
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc md = plainDesc({outer, inner}, f32);
      const memory::desc vd({inner}, f32, memory::format_tag::a);
      const memory::desc sd({outer}, f32, memory::format_tag::a);
      auto& prim = cache_[{outer, inner}];
      if (!prim) {
        const auto flags =
            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
        dnnl::layer_normalization_forward::desc fd(dnnl::prop_kind::forward_training, md, 0.f,
                                                   flags);
        dnnl::layer_normalization_forward::primitive_desc fpd(fd, be.engine());
        dnnl::layer_normalization_backward::desc bd(dnnl::prop_kind::backward, md, md, 0.f, flags);
        prim = dnnl::layer_normalization_backward(
            dnnl::layer_normalization_backward::primitive_desc(bd, be.engine(), fpd));
      }
      execute(be, prim,
              {{DNNL_ARG_DIFF_DST, md, &ctx.input(0)},
               {DNNL_ARG_SRC, md, &x},
               {DNNL_ARG_SCALE, vd, &ctx.input(2)},
               // oneDNN 2.6 refuses to run without a shift argument under use_shift although
               // backward never reads it.
               {DNNL_ARG_SHIFT, vd, &ctx.input(2)},
               {DNNL_ARG_MEAN, sd, &ctx.input(3)},
               {DNNL_ARG_VARIANCE, sd, var}},
              {{DNNL_ARG_DIFF_SRC, md, dx},
               {DNNL_ARG_DIFF_SCALE, vd, ds},
               {DNNL_ARG_DIFF_SHIFT, vd, db}});
      return Status();
    });
  }

 private:
  int64_t axis_;
};

class ConcatOp : public DnnlOrReference {
 public:
  explicit ConcatOp(const KernelInit& init)
      : DnnlOrReference(init),
        axis_(init.attrs.getInt("axis", init.opset < 4 ? 1 : 0)),
        nhwc_(fusion::Fused::listed(fusion::fusedOf(init.attrs).nhwcOutputs, 0)) {}
  Status compute(KernelContext& ctx) override {
    if (nhwc_) return joinPixels(ctx);
    // On host memory the plain kernel's threaded copies: oneDNN 2.6's concat of plain layouts
    // took 0.08 ms to join two [1, 58, 28, 28] halves (ShuffleNet V2 at batch 1: 0.69 ms of
    // its 2.9 in 14 of them).
    if (!allFloat(ctx) || ctx.numInputs() < 2 || dnnlBackend(ctx.backend()).hostMemory())
      return reference(ctx);
    const Tensor& x0 = ctx.input(0);
    const size_t r = x0.rank();
    if (r == 0 || r > 6 || !validAxis(axis_, r)) return reference(ctx);
    const int a = static_cast<int>(normAxis(axis_, r));
    Shape out = x0.shape();
    out[a] = 0;
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      if (!ctx.hasInput(i)) return reference(ctx);
      const Tensor& t = ctx.input(i);
      if (t.rank() != r || t.size() == 0) return reference(ctx);
      for (size_t d = 0; d < r; ++d)
        if (static_cast<int>(d) != a && t.dim(d) != x0.dim(d)) return reference(ctx);
      out[a] += t.dim(a);
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      std::vector<memory::desc> mds;
      for (size_t i = 0; i < ctx.numInputs(); ++i)
        mds.push_back(plainDesc(ctx.input(i).shape(), f32));
      const memory::desc od = plainDesc(out, f32);
      auto key = inputShapesKey(ctx);
      key.push_back(a);
      auto& prim = cache_[key];
      if (!prim) prim = dnnl::concat(dnnl::concat::primitive_desc(od, a, mds, be.engine()));
      std::vector<Arg> in;
      for (size_t i = 0; i < mds.size(); ++i)
        in.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), mds[i], &ctx.input(i)});
      execute(be, prim, in, {{DNNL_ARG_DST, od, y}});
      return Status();
    });
  }

 private:
  // Channels joined in NHWC (markNhwcChains: float 4-D tensors, axis 1): each pixel's row of
  // channels is every input's row in turn. (nChw16c needs nothing of its own: whole blocks of
  // 16 join per image, as plain NCHW does.)
  Status joinPixels(KernelContext& ctx) {
    std::vector<const Tensor*> ins;
    const Tensor& x0 = ctx.input(0);
    Shape out = x0.shape();
    out[1] = 0;
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      const Tensor& t = ctx.input(i);
      if (t.rank() != 4 || t.dtype() != DType::kFloat || t.dim(0) != x0.dim(0) ||
          t.dim(2) != x0.dim(2) || t.dim(3) != x0.dim(3))
        return Status::error("input shapes " + shapeToString(x0.shape()) + " and " +
                             shapeToString(t.shape()) + " differ off the concat axis");
      out[1] += t.dim(1);
      ins.push_back(&t);
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    return concatRows(ins, 1, out[0] * out[2] * out[3], 1, *y);
  }

  int64_t axis_;
  bool nhwc_;  // the output, and so every input, is in NHWC
};

// Transpose of a float32 or int32 tensor as a oneDNN reorder from the input seen through permuted
// strides: threaded and blocked, where the reference kernel copies element by element on one
// thread (a transformer's attention heads, [S, B*H, D] to [B*H, S, D] and back, spent 11% of
// its time there at batch 8). Small tensors stay on the reference kernel, whose copy costs
// less than a primitive call.
class TransposeOp : public DnnlOrReference {
 public:
  explicit TransposeOp(const KernelInit& init)
      : DnnlOrReference(init), perm_(init.attrs.getInts("perm")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t r = x.rank();
    const bool f = x.dtype() == DType::kFloat, i32 = x.dtype() == DType::kInt32;
    if ((!f && !i32) || r < 2 || r > 6 || x.size() < 4096) return reference(ctx);
    std::vector<int64_t> perm = perm_;
    if (perm.empty())
      for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
    // An invalid perm gets the reference kernel's error.
    std::vector<bool> seen(r, false);
    if (perm.size() != r) return reference(ctx);
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(r) || seen[p]) return reference(ctx);
      seen[p] = true;
    }
    // Where the last axis stays last (attention's [S, B*H, D] -> [B*H, S, D]) the copy is of
    // whole rows, and the reference kernel's threaded row copy took half of a reorder's time
    // (1 MB at 2 threads: 0.03-0.05 against 0.07-0.2 ms).
    if (perm.back() == static_cast<int64_t>(r) - 1 && x.shape().back() >= 16) return reference(ctx);
    const auto in = stridesOf(x.shape());
    Shape out(r);
    memory::dims dims(r), from(r);
    for (size_t i = 0; i < r; ++i) {
      out[i] = dims[i] = x.dim(perm[i]);
      from[i] = in[perm[i]];
    }
    DW_ALLOC(y, ctx.output(0, x.dtype(), out));
    const auto t = f ? f32 : memory::data_type::s32;
    const memory::desc src(dims, t, from), dst(dims, t, onednn::toDims(stridesOf(out)));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      auto key = inputShapesKey(ctx);
      key.push_back(f);
      auto& prim = cache_[key];
      if (!prim)
        prim = dnnl::reorder(dnnl::reorder::primitive_desc(be.engine(), src, be.engine(), dst));
      execute(be, prim, {{DNNL_ARG_FROM, src, &x}}, {{DNNL_ARG_TO, dst, y}});
      return Status();
    });
  }

 private:
  std::vector<int64_t> perm_;
};

// PRelu: the slope broadcasts unidirectionally to X; oneDNN takes it as same-rank weights.
class PReluOp : public DnnlOrReference {
 public:
  explicit PReluOp(const KernelInit& init) : DnnlOrReference(init) {}
  Status compute(KernelContext& ctx) override {
    if (!allFloat(ctx)) return reference(ctx);
    const Tensor& x = ctx.input(0);
    Shape ws = ctx.input(1).shape();
    if (x.rank() == 0 || x.rank() > 6 || x.size() == 0 || ws.size() > x.rank())
      return reference(ctx);
    while (ws.size() < x.rank()) ws.insert(ws.begin(), 1);
    for (size_t d = 0; d < ws.size(); ++d)
      if (ws[d] != 1 && ws[d] != x.dim(d)) return reference(ctx);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc xd = plainDesc(x.shape(), f32), wd = plainDesc(ws, f32);
      auto& prim = cache_[inputShapesKey(ctx)];
      if (!prim) {
        dnnl::prelu_forward::desc d(dnnl::prop_kind::forward_inference, xd, wd);
        prim = dnnl::prelu_forward(dnnl::prelu_forward::primitive_desc(d, be.engine()));
      }
      execute(be, prim, {{DNNL_ARG_SRC, xd, &x}, {DNNL_ARG_WEIGHTS, wd, &ctx.input(1)}},
              {{DNNL_ARG_DST, xd, y}});
      return Status();
    });
  }
};

// Reduce{Sum,Mean,Max,Min,Prod,L1,L2,SumSquare} on oneDNN's reduction primitive for float32;
// LogSum/LogSumExp, other dtypes, empty reductions and NaN-propagating Max/Min inputs stay on
// the reference kernel.
class ReduceOp : public DnnlOrReference {
 public:
  explicit ReduceOp(const KernelInit& init) : DnnlOrReference(init) {
    const ops::ReduceOp* row = ops::findReduceOp(init.opType);
    if (!row || row->onednn == ops::ReduceAlg::kNone) {
      fail("no oneDNN reduction for " + init.opType);
      return;
    }
    using A = dnnl::algorithm;
    using R = ops::ReduceAlg;
    switch (row->onednn) {
      case R::kSum:
        alg_ = A::reduction_sum;
        break;
      case R::kMean:
        alg_ = A::reduction_mean;
        break;
      case R::kMax:
        alg_ = A::reduction_max;
        break;
      case R::kMin:
        alg_ = A::reduction_min;
        break;
      case R::kMul:
        alg_ = A::reduction_mul;
        break;
      case R::kNormLpSum:
        alg_ = A::reduction_norm_lp_sum;
        break;
      case R::kNormLpPowerPSum:
        alg_ = A::reduction_norm_lp_power_p_sum;
        break;
      case R::kNone:
        break;
    }
    p_ = row->p;
    keep_ = init.attrs.getInt("keepdims") != 0;
    noop_ = init.attrs.getInt("noop_with_empty_axes", 0) != 0;
    axes_ = init.attrs.getInts("axes");
    axesInput_ = row->axesAsInput(init.opset);
    maxMin_ = row->fn == ops::ReduceFn::kMax || row->fn == ops::ReduceFn::kMin;
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.rank() == 0 || x.rank() > 6 || x.size() == 0)
      return reference(ctx);
    std::vector<int64_t> axes = axesInput_ ? intsInput(ctx, 1) : axes_;
    auto plan = planReduce(x.shape(), axes, keep_, noop_ && axesInput_);
    if (!plan) return plan.status();
    if (plan->empty || plan->outKeep == x.shape()) return reference(ctx);
    if (dnnlBackend(ctx.backend()).hostMemory()) {
      if (auto run = oneRun(x.shape(), *plan)) {
        DW_ALLOC(y, ctx.output(0, DType::kFloat, plan->outShape));
        hostReduce(x.data<float>(), *run, y->data<float>());
        return Status();
      }
    }
    if (maxMin_) {
      const float* p = x.data<float>();
      for (int64_t i = 0; i < x.size(); ++i)
        if (std::isnan(p[i])) return reference(ctx);
    }
    DW_ALLOC(y, ctx.output(0, DType::kFloat, plan->outShape));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc sd = plainDesc(x.shape(), f32), dd = plainDesc(plan->outKeep, f32);
      std::vector<int64_t> key = x.shape();
      key.push_back(-1);
      key.insert(key.end(), plan->outKeep.begin(), plan->outKeep.end());
      auto& prim = cache_[key];
      if (!prim) {
        dnnl::reduction::desc d(alg_, sd, dd, p_, 0.0f);
        prim = dnnl::reduction(dnnl::reduction::primitive_desc(d, be.engine()));
      }
      execute(be, prim, {{DNNL_ARG_SRC, sd, &x}}, {{DNNL_ARG_DST, dd, y}});
      return Status();
    });
  }

 private:
  // Sum, mean, max, min or sum of squares over one run of adjacent axes ([outer, R, inner]:
  // the channels of NCHW, the heads of attention, the last axes, all of them) on the host, on
  // the session's threads, NaN propagating through max and min as in the reference kernels.
  // oneDNN 2.6's reduction took 20 ms for the channels of [8, 64, 56, 56] and 40 ms to sum the
  // squares of all 1.6M values (one thread, one running float sum, 0.1% off); max and min first
  // scanned for NaN on one thread. Long rows are cut into pieces with partial results, which
  // also keeps the rounding of a sum small. Empty: another reduction, left to oneDNN.
  enum class HostOp { kSum, kMax, kMin, kSumSquare };
  struct Run {
    int64_t outer = 1, reduced = 1, inner = 1;
  };
  std::optional<Run> oneRun(const Shape& in, const ReducePlan& plan) const {
    if (!hostOp()) return std::nullopt;
    const Shape& keep = plan.outKeep;
    size_t first = in.size(), last = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (keep[d] != in[d]) {
        first = std::min(first, d);
        last = d;
      }
    if (first > last) return std::nullopt;
    for (size_t d = first; d <= last; ++d)
      if (keep[d] == in[d] && in[d] != 1) return std::nullopt;  // not one run
    Run r;
    for (size_t d = 0; d < in.size(); ++d)
      (d < first ? r.outer : d <= last ? r.reduced : r.inner) *= in[d];
    if (r.inner == 1 ? r.reduced < 16 : r.inner < 16) return std::nullopt;
    return r;
  }
  std::optional<HostOp> hostOp() const {
    using A = dnnl::algorithm;
    if (alg_ == A::reduction_sum || alg_ == A::reduction_mean) return HostOp::kSum;
    if (alg_ == A::reduction_max) return HostOp::kMax;
    if (alg_ == A::reduction_min) return HostOp::kMin;
    if (alg_ == A::reduction_norm_lp_power_p_sum && p_ == 2.0f) return HostOp::kSumSquare;
    return std::nullopt;
  }
  template <HostOp Op>
  static float take(float v) {
    return Op == HostOp::kSumSquare ? v * v : v;
  }
  // Max and min as selects the compiler makes vector instructions of, with a NaN met kept aside
  // (`nan`) and given back at the end: a NaN anywhere makes the result NaN, as in the reference
  // kernels.
  template <HostOp Op>
  static float fold(float acc, float v) {
    if constexpr (Op == HostOp::kMax) return acc < v ? v : acc;
    if constexpr (Op == HostOp::kMin) return v < acc ? v : acc;
    return acc + v;
  }
  static constexpr bool kCompares(HostOp op) { return op == HostOp::kMax || op == HostOp::kMin; }
  // One row of n values: sixteen partial results, then combined.
  template <HostOp Op>
  static float foldRow(const float* row, int64_t n) {
    int nan = 0;
    float acc;
    int64_t r = 0;
    if (n >= 16) {
      float part[16];
      for (int k = 0; k < 16; ++k) {
        part[k] = take<Op>(row[k]);
        if constexpr (kCompares(Op)) nan |= row[k] != row[k];
      }
      for (r = 16; r + 16 <= n; r += 16)
        for (int k = 0; k < 16; ++k) {
          const float v = row[r + k];
          part[k] = fold<Op>(part[k], take<Op>(v));
          if constexpr (kCompares(Op)) nan |= v != v;
        }
      for (int step = 8; step > 0; step /= 2)
        for (int k = 0; k < step; ++k) part[k] = fold<Op>(part[k], part[k + step]);
      acc = part[0];
    } else {
      acc = take<Op>(row[0]);
      if constexpr (kCompares(Op)) nan |= row[0] != row[0];
      r = 1;
    }
    for (; r < n; ++r) {
      acc = fold<Op>(acc, take<Op>(row[r]));
      if constexpr (kCompares(Op)) nan |= row[r] != row[r];
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : acc;
  }
  void hostReduce(const float* src, const Run& run, float* dst) const {
    switch (*hostOp()) {
      case HostOp::kSum:
        return hostReduce<HostOp::kSum>(src, run, dst);
      case HostOp::kMax:
        return hostReduce<HostOp::kMax>(src, run, dst);
      case HostOp::kMin:
        return hostReduce<HostOp::kMin>(src, run, dst);
      case HostOp::kSumSquare:
        return hostReduce<HostOp::kSumSquare>(src, run, dst);
    }
  }
  template <HostOp Op>
  void hostReduce(const float* src, const Run& run, float* dst) const {
    const bool mean = alg_ == dnnl::algorithm::reduction_mean;
    const float count = static_cast<float>(run.reduced);
    const int64_t total = run.outer * run.reduced * run.inner;
    if (run.inner == 1 && kCompares(Op) && vectorMathAvailable()) {
      onednn::rowExtrema(src, dst, run.outer, run.reduced, Op == HostOp::kMax);
      return;
    }
    if (run.inner == 1) {
      // Rows. Fewer rows than pieces of 64K: each row's pieces on the threads, then combined.
      constexpr int64_t kPiece = 1 << 16;
      const int64_t pieces = (run.reduced + kPiece - 1) / kPiece;
      if (pieces > 1 && run.outer < 8) {
        std::vector<float> partial(static_cast<size_t>(run.outer * pieces));
        forThreadRanges(run.outer * pieces, total, [&](int64_t from, int64_t to) {
          for (int64_t u = from; u < to; ++u) {
            const int64_t o = u / pieces, at = (u % pieces) * kPiece;
            partial[u] =
                foldRow<Op>(src + o * run.reduced + at, std::min(kPiece, run.reduced - at));
          }
        });
        for (int64_t o = 0; o < run.outer; ++o) {
          float acc = partial[o * pieces];
          for (int64_t k = 1; k < pieces; ++k) acc = fold<Op>(acc, partial[o * pieces + k]);
          dst[o] = mean ? acc / count : acc;
        }
        return;
      }
      forThreadRanges(run.outer, total, [&](int64_t from, int64_t to) {
        for (int64_t o = from; o < to; ++o) {
          const float acc = foldRow<Op>(src + o * run.reduced, run.reduced);
          dst[o] = mean ? acc / count : acc;
        }
      });
      return;
    }
    // Each piece of inner takes the R rows into its slice of the output, in order.
    constexpr int64_t kPiece = 512;
    const int64_t pieces = (run.inner + kPiece - 1) / kPiece;
    forThreadRanges(run.outer * pieces, total, [&](int64_t from, int64_t to) {
      float acc[kPiece];
      int nan[kPiece];
      for (int64_t u = from; u < to; ++u) {
        const int64_t o = u / pieces, i0 = (u % pieces) * kPiece;
        const int64_t n = std::min(kPiece, run.inner - i0);
        const float* row = src + o * run.reduced * run.inner + i0;
        for (int64_t k = 0; k < n; ++k) {
          acc[k] = take<Op>(row[k]);
          nan[k] = row[k] != row[k];
        }
        for (int64_t r = 1; r < run.reduced; ++r) {
          const float* next = row + r * run.inner;
          for (int64_t k = 0; k < n; ++k) acc[k] = fold<Op>(acc[k], take<Op>(next[k]));
          if constexpr (kCompares(Op))
            for (int64_t k = 0; k < n; ++k) nan[k] |= next[k] != next[k];
        }
        float* out = dst + o * run.inner + i0;
        for (int64_t k = 0; k < n; ++k)
          out[k] = kCompares(Op) && nan[k] ? std::numeric_limits<float>::quiet_NaN()
                   : mean                  ? acc[k] / count
                                           : acc[k];
      }
    });
  }

  dnnl::algorithm alg_ = dnnl::algorithm::reduction_sum;
  float p_ = 0;
  bool keep_ = true, noop_ = false, axesInput_ = false, maxMin_ = false;
  std::vector<int64_t> axes_;
};

// Resize (opset 11+) in linear mode with half_pixel coordinates, resizing spatial dimensions
// only by exact integer-consistent factors: oneDNN's linear resampling computes exactly that.
// Every other mode, coordinate transformation or factor goes to the reference Resize.
class ResampleOp : public DnnlOrReference {
 public:
  explicit ResampleOp(const KernelInit& init) : DnnlOrReference(init) {
    const auto& a = init.attrs;
    ok_ = init.opset >= 11 && a.getString("mode") == "linear" &&
          a.getString("coordinate_transformation_mode") == "half_pixel" &&
          a.getInt("exclude_outside") == 0;
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!ok_ || x.dtype() != DType::kFloat || x.rank() < 3 || x.rank() > 5 || x.size() == 0)
      return reference(ctx);
    const size_t r = x.rank();
    Shape out(r);
    if (ctx.hasInput(3) && ctx.input(3).size() > 0) {
      auto sizes = ctx.input(3).toInt64Vector();
      if (sizes.size() != r) return reference(ctx);
      out = Shape(sizes.begin(), sizes.end());
    } else if (ctx.hasInput(2) && ctx.input(2).size() == static_cast<int64_t>(r)) {
      for (size_t d = 0; d < r; ++d) {
        const double sc = ctx.input(2).getDouble(d);
        const double o = x.dim(d) * sc;
        // The transform uses the scale itself: only exact factors match out / in.
        if (o != std::floor(o) || !(o >= 0 && o < double(int64_t(1) << 40))) return reference(ctx);
        out[d] = static_cast<int64_t>(o);
      }
    } else {
      return reference(ctx);
    }
    if (out[0] != x.dim(0) || out[1] != x.dim(1)) return reference(ctx);
    for (int64_t d : out)
      if (d <= 0) return reference(ctx);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    return guarded([&] {
      auto& be = dnnlBackend(ctx.backend());
      const memory::desc sd = plainDesc(x.shape(), f32), dd = plainDesc(out, f32);
      std::vector<int64_t> key = x.shape();
      key.insert(key.end(), out.begin(), out.end());
      auto& prim = cache_[key];
      if (!prim) {
        dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_inference,
                                         dnnl::algorithm::resampling_linear, sd, dd);
        prim = dnnl::resampling_forward(dnnl::resampling_forward::primitive_desc(d, be.engine()));
      }
      execute(be, prim, {{DNNL_ARG_SRC, sd, &x}}, {{DNNL_ARG_DST, dd, y}});
      return Status();
    });
  }

 private:
  bool ok_ = false;
};

}  // namespace

void addOneDnnEltwiseKernels(KernelRegistry& r) {
  const char* c = kOneDnnTable;
  for (const auto& op : ops::unaryOps())
    if (op.tableKernels() && op.onednn.alg != ops::Eltwise::kNone)
      r.add(c, op.name, op.since, kMaxOpset, &makeKernel<Eltwise>);
  for (const auto& op : ops::binaryOps())
    if (op.onednn != ops::BinaryAlg::kNone)
      r.add(c, op.name, op.since, kMaxOpset, &makeKernel<BinaryOp>);
  r.add(c, "Softmax", 1, kMaxOpset, &makeKernel<SoftmaxOp>);
  r.add(c, "LogSoftmax", 1, kMaxOpset, &makeKernel<SoftmaxOp>);
  r.add(c, "LayerNormalization", 17, kMaxOpset, &makeKernel<LayerNorm>);
  const char* grad = dw::kGradDomain;
  r.add(c, "LayerNormalizationGrad", 1, kMaxOpset, &makeKernel<LayerNormGrad>, true, grad);
  r.add(c, "SoftmaxGrad", 1, kMaxOpset, &makeKernel<SoftmaxGradOp>, true, grad);
  r.add(c, "UnaryGrad", 1, kMaxOpset, &makeKernel<EltwiseGrad>, true, grad);
  r.add(c, "Concat", 1, kMaxOpset, &makeKernel<ConcatOp>, false);
  r.add(c, "Transpose", 1, kMaxOpset, &makeKernel<TransposeOp>, false);
  r.add(c, "PRelu", 1, kMaxOpset, &makeKernel<PReluOp>);
  for (const auto& op : ops::reduceOps())
    if (op.onednn != ops::ReduceAlg::kNone) r.add(c, op.name, 1, kMaxOpset, &makeKernel<ReduceOp>);
  r.add(c, "Resize", 11, kMaxOpset, &makeKernel<ResampleOp>);
}

}  // namespace dw::engine
