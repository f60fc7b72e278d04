// oneDNN-backed kernels of the onednn table (run by the cpu and gpu backends on their engines,
// tensors bound through onednn::Bindings): convolution, deconvolution, pooling, matmul/Gemm,
// batch normalization and LRN on float32 tensors (fp16/bf16 tensors arrive as float via
// halfViaFloat). Under precision bf16 (onednn::computeType) convolution, deconvolution and
// matmul primitives read bf16 copies of their inputs and write float32. Primitives and reorders
// are built once per input-shape signature and cached; convolution lets oneDNN pick blocked
// layouts (format_tag::any) and reorders only where the chosen layout differs; weights that are
// initializers are converted once. 2-D max pooling and one-input-channel convolutions run direct
// NCHW loops instead, where oneDNN's plain-layout kernels or reorders cost more.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/depthwise_planes.h"
#include "engine/onednn/fused_activation.h"
#include "engine/onednn/onednn_backend.h"
#include "engine/onednn/rnn_common.h"
#include "engine/onednn/vector_math.h"
#include "engine/unary_op.h"

namespace dw::engine {

namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;
using onednn::dnnlBackend;
using onednn::plainDesc;

using onednn::guarded;
using onednn::inputShapesKey;

struct SpatialParams {
  std::vector<int64_t> kernel, strides, dilations, padL, padR;
};

// Reads strides/dilations/pads/auto_pad and resolves SAME padding for input spatial dims.
class ConvLikeAttrs {
 public:
  explicit ConvLikeAttrs(const KernelInit& init) {
    const auto& a = init.attrs;
    kernel_ = a.getInts("kernel_shape");
    strides_ = a.getInts("strides");
    dilations_ = a.getInts("dilations");
    pads_ = a.getInts("pads");
    autoPad_ = a.getString("auto_pad", "NOTSET");
  }

  Result<SpatialParams> resolve(const Shape& in, const std::vector<int64_t>& kernel,
                                bool ceilMode = false) const {
    const size_t n = kernel.size();
    SpatialParams p;
    p.kernel = kernel;
    // Assigned rather than built from a conditional temporary, which GCC 12 reports as a free
    // of a non-heap pointer once inlined.
    if (strides_.empty())
      p.strides.assign(n, 1);
    else
      p.strides = strides_;
    if (dilations_.empty())
      p.dilations.assign(n, 1);
    else
      p.dilations = dilations_;
    if (p.strides.size() != n || p.dilations.size() != n)
      return Status::error("strides/dilations rank mismatch");
    p.padL.assign(n, 0);
    p.padR.assign(n, 0);
    if (autoPad_ == "NOTSET") {
      if (!pads_.empty()) {
        if (pads_.size() != 2 * n)
          return Status::error("pads must have 2 entries per spatial axis");
        for (size_t i = 0; i < n; ++i) {
          p.padL[i] = pads_[i];
          p.padR[i] = pads_[i + n];
        }
      }
    } else if (autoPad_ == "SAME_UPPER" || autoPad_ == "SAME_LOWER") {
      for (size_t i = 0; i < n; ++i) {
        const int64_t in_ = in[2 + i], s = p.strides[i];
        const int64_t out = (in_ + s - 1) / s;
        const int64_t total =
            std::max<int64_t>(0, (out - 1) * s + (kernel[i] - 1) * p.dilations[i] + 1 - in_);
        p.padL[i] = autoPad_ == "SAME_UPPER" ? total / 2 : total - total / 2;
        p.padR[i] = total - p.padL[i];
      }
    } else if (autoPad_ != "VALID") {
      return Status::error("auto_pad '" + autoPad_ + "' is not supported");
    }
    if (ceilMode) {
      // Extend the right padding so that the last, partial window is produced.
      for (size_t i = 0; i < n; ++i) {
        const int64_t ek = (kernel[i] - 1) * p.dilations[i] + 1;
        const int64_t span = in[2 + i] + p.padL[i] + p.padR[i] - ek;
        int64_t out = (span + p.strides[i] - 1) / p.strides[i] + 1;
        // The last window must start inside the input or left padding.
        if ((out - 1) * p.strides[i] >= in[2 + i] + p.padL[i]) --out;
        p.padR[i] = (out - 1) * p.strides[i] + ek - in[2 + i] - p.padL[i];
      }
    }
    return p;
  }

  const std::vector<int64_t>& kernelShape() const { return kernel_; }

 private:
  std::vector<int64_t> kernel_, strides_, dilations_, pads_;
  std::string autoPad_;
};

Dims minus1(const std::vector<int64_t>& d) {
  Dims r;
  for (int64_t v : d) r.push_back(v - 1);
  return r;
}

using onednn::FusedActivation;
using onednn::Reorderer;

class Conv : public Kernel {
 public:
  explicit Conv(const KernelInit& init) : Conv(init, fusion::fusedOf(init.attrs)) {}
  Conv(const KernelInit& init, const fusion::Fused& f)
      : attrs_(init),
        transposed_(init.opType == "ConvTranspose"),
        group_(init.attrs.getInt("group")),
        outputPadding_(init.attrs.getInts("output_padding")),
        outputShape_(init.attrs.getInts("output_shape")),
        act_(f),
        bnFused_(f.bnEpsilon.has_value()),
        bnEps_(f.bnEpsilon.value_or(0.0f)),
        residual_(f.residual),
        poolKernel_(f.maxPool.kernel),
        poolStrides_(f.maxPool.strides),
        poolPads_(f.maxPool.pads),
        blockedX_(fusion::Fused::listed(f.blockedInputs, 0)),
        blockedY_(fusion::Fused::listed(f.blockedOutputs, 0)),
        keepSrc_(fusion::Fused::listed(f.blockedOutputs, 1)),
        nhwcX_(fusion::Fused::listed(f.nhwcInputs, 0)),
        nhwcY_(fusion::Fused::listed(f.nhwcOutputs, 0)),
        fusedPlain_(!act_.any() && !bnFused_ && !residual_ && poolKernel_.empty() &&
                    f.blockedInputs.empty() && f.blockedOutputs.empty() && f.nhwcInputs.empty() &&
                    f.nhwcOutputs.empty()),
        init_(init) {
    // Weights (and a fused BatchNormalization's parameters, folded into them) that are
    // initializers are folded and reordered once, on the first run of each shape.
    constWeights_ = init.constantInputs.size() > 1;
    for (size_t i = 1; i < init.constantInputs.size(); ++i)
      if ((i == 1 || bnFused_) && !init.constantInputs[i]) constWeights_ = false;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    if ((x.dtype() == DType::kDouble || w.dtype() == DType::kDouble) && !transposed_ &&
        fusedPlain_) {
      // float64: the direct convolution of the reference table (kernels/nn.cpp).
      return fallback_.compute(init_, ctx);
    }
    if (x.dtype() != DType::kFloat || w.dtype() != DType::kFloat)
      return Status::error(std::string("only float32") + (transposed_ ? "" : " and float64") +
                           " are supported, got " + dtypeName(x.dtype()));
    if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank())
      return Status::error("input must be 3-D to 5-D with matching weight rank");
    auto key = inputShapesKey(ctx);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Entry e;
      DW_RETURN_IF_ERROR(guarded("convolution setup", [&] { return build(ctx, e); }));
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    if (residual_ &&
        (!ctx.hasInput(fusion::Fused::kResidualInput) ||
         residualInput(ctx).dtype() != DType::kFloat || residualInput(ctx).shape() != e.outShape))
      return Status::error(
          "the residual Add fused into this convolution needs a float32 tensor "
          "of the output's shape " +
          shapeToString(e.outShape) + "; run the session with fuse off");
    // A fused residual is added in place: Y starts as the residual (its memory where this node
    // is its last reader, else a copy made below).
    DW_ALLOC(y, residual_ && !e.residualAfter
                    ? ctx.outputReusing(0, fusion::Fused::kResidualInput, DType::kFloat, e.outShape)
                    : ctx.output(0, DType::kFloat, e.outShape));
    Tensor* kept = keepSrc_ ? ctx.output(1, DType::kFloat, x.shape()) : nullptr;
    if (keepSrc_ && !kept) return ctx.status();
    if (y->size() == 0) return Status();
    if (ctx.hasInput(2) &&
        (ctx.input(2).dtype() != DType::kFloat || ctx.input(2).size() != e.outShape[1]))
      return Status::error("bias of shape " + shapeToString(ctx.input(2).shape()) +
                           " does not match the " + std::to_string(e.outShape[1]) +
                           " output channels (float32)");
    if (e.pointwise) return runPointwise(ctx, e, x, w, *y);
    if (e.gemm || e.depthwise) return runPlain(ctx, e, x, w, *y);
    if (e.direct) {
      const void* wd = w.raw();
      const void* bd = ctx.hasInput(2) ? ctx.input(2).raw() : nullptr;
      if (bnFused_) DW_RETURN_IF_ERROR(foldBatchNorm(ctx, e.outShape[1], wd, bd));
      onednn::singleChannelConvForward(*e.direct, x.data<float>(), static_cast<const float*>(wd),
                                       static_cast<const float*>(bd), y->data<float>(),
                                       &e.epilogue);
      return Status();
    }
    const void* wData = w.raw();
    const void* biasData = ctx.hasInput(2) ? ctx.input(2).raw() : nullptr;
    const bool wReady = constWeights_ && e.wFrom == w.raw();
    if (bnFused_) {
      if (wReady)
        biasData = foldedB_.data();
      else
        DW_RETURN_IF_ERROR(foldBatchNorm(ctx, e.outShape[1], wData, biasData));
    }
    if (e.wino)
      return runWinograd(ctx, e, x, static_cast<const float*>(wData),
                         static_cast<const float*>(biasData), wReady, kept, y);
    return guarded("convolution", &bind_, [&] {
      auto& be = dnnlBackend(ctx.backend());
      auto& eng = be.engine();
      auto& s = be.stream();
      memory srcUser = bind_.in(be, DNNL_ARG_SRC, e.userSrc, x.raw());
      if (kept) {
        // X in nChw16c for the ConvGrad that reads it too (shareConvSourceLayout): converted
        // once here, straight into the output when that is what the primitive reads.
        memory k = bind_.out(be, DNNL_ARG_DST_1, e.keptSrc, kept->raw());
        e.keep.execute(s, srcUser, k);
        srcUser = k;
      }
      memory src = e.rSrc.in(srcUser, e.pd_src, eng, s);
      memory wts = e.wKept;
      if (!wReady) {
        wts = e.rW.in(bind_.in(be, DNNL_ARG_WEIGHTS, e.userW, wData), e.pd_w, eng, s);
        if (constWeights_) {
          // Keep a copy the kernel owns: the folded weights are rewritten by other shapes.
          if (wts != e.rW.scratch) {
            memory own(e.pd_w, eng);
            dnnl::reorder(wts, own).execute(s, wts, own);
            wts = own;
          }
          e.wKept = wts;
          e.wFrom = w.raw();
        }
      }
      memory dstUser = bind_.out(be, DNNL_ARG_DST, e.userDst, y->raw());
      // With a fused MaxPool the convolution output stays in oneDNN's layout and only the
      // pooled result is reordered to the plain output.
      const memory::desc& last = e.pooled ? e.poolDst : e.pd_dst;
      memory convDst = !e.pooled && e.userDst == e.pd_dst
                           ? dstUser
                           : (e.dstR ? e.dstR : (e.dstR = memory(e.pd_dst, eng)));
      if (residual_ && !e.residualAfter) seedResidual(ctx, e, *y, dstUser, convDst);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, convDst}};
      if (biasData) args[DNNL_ARG_BIAS] = bind_.in(be, DNNL_ARG_BIAS, e.biasD, biasData);
      e.prim.execute(s, args);
      if (e.actAfter && !e.residualAfter) {
        s.wait();
        act_.applyHost(static_cast<float*>(convDst.get_data_handle()),
                       static_cast<int64_t>(convDst.get_desc().get_size() / sizeof(float)));
      }
      memory result = convDst;
      if (e.pooled) {
        result = e.userDst == last ? dstUser : (e.poolR ? e.poolR : (e.poolR = memory(last, eng)));
        e.pool.execute(s, {{DNNL_ARG_SRC, convDst}, {DNNL_ARG_DST, result}});
      }
      e.rOut.back(s, result, dstUser);
      bind_.finish(be);
      if (e.residualAfter) {
        // The primitive took no residual post-op for this layout: add it, then apply the
        // activation, on the output in place (same layout as the residual).
        float* out = y->data<float>();
        const float* r = residualInput(ctx).data<float>();
        const int64_t count = y->size();
        for (int64_t i = 0; i < count; ++i) out[i] += r[i];
        act_.applyHost(out, count);
      }
      return Status();
    });
  }

 private:
  struct Entry;

  const Tensor& residualInput(KernelContext& ctx) const {
    return ctx.input(fusion::Fused::kResidualInput);
  }

  // About 20 us of one core: beyond it the primitive's threads pay for themselves.
  static constexpr int64_t kPointwiseMacs = int64_t{1} << 22;

  // Y[n][o] = b[o] + sum_c W[o][c] X[n][c], then the fused activation: the weights transposed
  // once (while they are the same constant) for rnn::smallGemm's rows of sums.
  Status runPointwise(KernelContext& ctx, Entry& e, const Tensor& x, const Tensor& w, Tensor& y) {
    const int64_t n = x.dim(0), ci = x.dim(1), co = e.outShape[1];
    if (!constWeights_ || e.wFrom != w.raw()) {
      const float* wd = w.data<float>();
      e.wT.resize(static_cast<size_t>(ci * co));
      for (int64_t o = 0; o < co; ++o)
        for (int64_t k = 0; k < ci; ++k) e.wT[k * co + o] = wd[o * ci + k];
      e.wFrom = constWeights_ ? w.raw() : nullptr;
    }
    float* out = y.data<float>();
    rnn::smallGemm(n, co, ci, x.data<float>(), ci, e.wT.data(), co, out, co);
    if (ctx.hasInput(2)) {
      const float* b = ctx.input(2).data<float>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < co; ++o) out[r * co + o] += b[o];
    }
    act_.applyHost(out, n * co);
    return Status();
  }

  // The convolutions between plain NCHW tensors that need no oneDNN: a 1x1 as Y[n] = W X[n] + b
  // for each image (Entry::gemm), a depthwise one plane by plane (Entry::depthwise); then the
  // fused activation, with a fused BatchNormalization folded into W and b (once, while they are
  // the same constants).
  Status runPlain(KernelContext& ctx, Entry& e, const Tensor& x, const Tensor& w, Tensor& y) {
    const int64_t n = x.dim(0), ci = x.dim(1), co = e.outShape[1];
    const int64_t hw = numElements(Shape(x.shape().begin() + 2, x.shape().end()));
    const float* wd = w.data<float>();
    const float* bd = ctx.hasInput(2) ? ctx.input(2).data<float>() : nullptr;
    if (bnFused_) {
      if (!constWeights_ || e.wFrom != w.raw()) {
        const void *wf = nullptr, *bf = nullptr;
        DW_RETURN_IF_ERROR(foldBatchNorm(ctx, co, wf, bf));
        e.wFrom = constWeights_ ? w.raw() : nullptr;
      }
      wd = foldedW_.data();
      bd = foldedB_.data();
    }
    float* out = y.data<float>();
    if (e.depthwise) {
      float lo = 0, hi = 0;
      const bool clampOnly = act_.clamp(lo, hi);
      onednn::depthwisePlanes(*e.depthwise, x.data<float>(), wd, bd,
                              clampOnly ? lo : -std::numeric_limits<float>::infinity(),
                              clampOnly ? hi : std::numeric_limits<float>::infinity(), out);
      if (!clampOnly) act_.applyHost(out, y.size());
      return Status();
    }
    if (hw == 1) {
      // One pixel an image (a classifier written as a convolution, at a batch too large for
      // runPointwise): the images' rows in one product, Y = X W^T.
      rnn::gemm(false, true, n, co, ci, x.data<float>(), ci, wd, ci, 0.0f, out, co);
      if (bd)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t o = 0; o < co; ++o) out[i * co + o] += bd[o];
    } else {
      for (int64_t i = 0; i < n; ++i) {
        float* yi = out + i * co * hw;
        rnn::gemm(false, false, co, hw, ci, wd, ci, x.data<float>() + i * ci * hw, hw, 0.0f, yi,
                  hw);
        if (bd)
          for (int64_t o = 0; o < co; ++o)
            for (int64_t j = 0; j < hw; ++j) yi[o * hw + j] += bd[o];
      }
    }
    act_.applyHost(out, y.size());
    return Status();
  }

  // Puts the fused residual into `target`, the memory the convolution writes and adds to: Y
  // itself (`dstUser`, which may already hold it) or a buffer in the primitive's layout.
  void seedResidual(KernelContext& ctx, Entry& e, Tensor& y, memory& dstUser, memory& target) {
    const Tensor& r = residualInput(ctx);
    auto& be = dnnlBackend(ctx.backend());
    if (target == dstUser) {
      if (y.raw() != r.raw()) std::memcpy(y.raw(), r.raw(), y.bytes());
      return;
    }
    if (!e.residualIn)
      e.residualIn = dnnl::reorder(
          dnnl::reorder::primitive_desc(be.engine(), e.residualD, be.engine(), target.get_desc()));
    memory from(e.residualD, be.engine(), const_cast<void*>(r.raw()));
    e.residualIn.execute(be.stream(), from, target);
  }

  // The convolution on our Winograd kernel: X in nChw16c (reordered into output 1 where it is
  // kept) or NHWC, the weights transformed (once, when they are constant), and Y written in
  // nChw16c, then made plain, or handed over so or in NHWC.
  Status runWinograd(KernelContext& ctx, Entry& e, const Tensor& x, const float* w,
                     const float* bias, bool wReady, Tensor* kept, Tensor* y) {
    return guarded("convolution", &bind_, [&] {
      auto& be = dnnlBackend(ctx.backend());
      auto& eng = be.engine();
      auto& s = be.stream();
      memory src = bind_.in(be, DNNL_ARG_SRC, e.userSrc, x.raw());
      memory blockedX;
      if (kept) {
        blockedX = bind_.out(be, DNNL_ARG_DST_1, e.keptSrc, kept->raw());
        e.keep.execute(s, src, blockedX);
      } else {
        blockedX = e.rSrc.in(src, e.pd_src, eng, s);
      }
      memory dst = bind_.out(be, DNNL_ARG_DST, e.userDst, y->raw());
      memory blockedY = e.rOut.out(dst, e.pd_dst, eng);
      const float* residual = nullptr;
      if (residual_) {
        // Added in place: each output element is read before it is written.
        seedResidual(ctx, e, *y, dst, blockedY);
        residual = static_cast<const float*>(blockedY.get_data_handle());
      }
      s.wait();  // the kernel reads the reorders' results on the host
      if (!wReady) {
        e.wino->transformWeights(w, false, e.transformed.data());
        if (constWeights_) e.wFrom = ctx.input(1).raw();
      }
      e.wino->run(static_cast<const float*>(blockedX.get_data_handle()), e.transformed.data(), bias,
                  residual, act_.any(), static_cast<float*>(blockedY.get_data_handle()));
      e.rOut.back(s, blockedY, dst);
      bind_.finish(be);
      return Status();
    });
  }

  struct Entry {
    dnnl::primitive prim, pool;
    memory::desc userSrc, userW, userDst, biasD, pd_src, pd_w, pd_dst, poolDst;
    memory::desc keptSrc;  // output 1 (keepSrc_): X in nChw16c
    dnnl::reorder keep;
    std::optional<onednn::Winograd43> wino;  // our Winograd kernel instead of a primitive
    std::vector<float> transformed;          // its transformed weights
    memory dstR, poolR;
    Reorderer rSrc, rW, rOut;
    dnnl::reorder residualIn;    // the residual into the primitive's layout, where Y's differs
    memory::desc residualD;      // the fused residual, in Y's layout (plain or NHWC)
    bool residualAfter = false;  // added (and the activation applied) after the primitive
    bool actAfter = false;       // the activation applied after the primitive (hostFaster)
    memory wKept;                // constant weights, already in the primitive's type and layout
    const void* wFrom = nullptr;
    Shape outShape;
    bool pooled = false;
    std::optional<onednn::SingleChannelConv> direct;
    onednn::SingleChannelEpilogue epilogue;
    bool pointwise = false;  // a 1x1 kernel over a 1x1 input: runPointwise
    bool gemm = false;       // a 1x1 kernel between plain NCHW tensors: runPlain
    std::optional<onednn::DepthwisePlanes> depthwise;  // a depthwise one so: runPlain
    std::vector<float> wT;                             // its weights transposed, [C_in][C_out]
  };

  Status build(KernelContext& ctx, Entry& e) {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    auto& eng = dnnlBackend(ctx.backend()).engine();
    const size_t ns = x.rank() - 2;
    std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    if (!attrs_.kernelShape().empty() && attrs_.kernelShape() != kernel)
      return Status::error("kernel_shape does not match the weights");
    const int64_t g = group_, n = x.dim(0), c = x.dim(1);
    if (g <= 0 || c % g) return Status::error("channels not divisible by group");
    Shape out{n, 0};
    SpatialParams p;
    if (!transposed_) {
      auto r = attrs_.resolve(x.shape(), kernel);
      if (!r) return r.status();
      p = *r;
      if (w.dim(1) * g != c)
        return Status::error("weight shape " + shapeToString(w.shape()) +
                             " does not match input channels " + std::to_string(c));
      out[1] = w.dim(0);
      for (size_t i = 0; i < ns; ++i) {
        const int64_t ek = (kernel[i] - 1) * p.dilations[i] + 1;
        out.push_back((x.dim(2 + i) + p.padL[i] + p.padR[i] - ek) / p.strides[i] + 1);
      }
    } else {
      // Deconvolution: resolve padding from output_shape / auto_pad as the ONNX spec does.
      auto r = attrs_.resolve(x.shape(), kernel);
      if (!r) return r.status();
      p = *r;
      if (w.dim(0) != c) return Status::error("weight shape does not match input channels");
      out[1] = w.dim(1) * g;
      if ((!outputShape_.empty() && outputShape_.size() < ns) ||
          (!outputPadding_.empty() && outputPadding_.size() != ns))
        return Status::error(
            "output_shape and output_padding need a value per spatial "
            "dimension of the input (" +
            std::to_string(ns) + ")");
      std::vector<int64_t> op =
          outputPadding_.empty() ? std::vector<int64_t>(ns, 0) : outputPadding_;
      for (size_t i = 0; i < ns; ++i) {
        const int64_t ek = (kernel[i] - 1) * p.dilations[i] + 1;
        const int64_t full = p.strides[i] * (x.dim(2 + i) - 1) + op[i] + ek;
        int64_t target = -1;
        if (!outputShape_.empty())
          target = outputShape_[outputShape_.size() - ns + i];
        else if (autoPadSame_)
          target = x.dim(2 + i) * p.strides[i];
        if (target >= 0) {
          const int64_t total = full - target;
          if (autoPadLower_) {
            p.padL[i] = total - total / 2;
            p.padR[i] = total / 2;
          } else {
            p.padL[i] = total / 2;
            p.padR[i] = total - total / 2;
          }
        }
        out.push_back(full - p.padL[i] - p.padR[i]);
        // oneDNN has no output_padding: fold it into (possibly negative) right padding.
        p.padR[i] -= op[i];
      }
    }
    e.outShape = out;
    if (blockedY_ && (transposed_ || !onednn::blockedShapeOk(out) || (g == 1 && c == 1)))
      return Status::error("output of shape " + shapeToString(out) +
                           " cannot be handed over in the nChw16c layout (it needs a 2-D "
                           "convolution of more than one input channel and output channels a "
                           "multiple of 16); run the session with fuse off");
    if (blockedX_ && (transposed_ || !onednn::blockedShapeOk(x.shape()) || keepSrc_))
      return Status::error("input of shape " + shapeToString(x.shape()) +
                           " cannot arrive in the nChw16c layout (it needs a 2-D convolution "
                           "and input channels a multiple of 16); run the session with fuse off");
    if (keepSrc_ && (transposed_ || !poolKernel_.empty() || bnFused_ ||
                     !onednn::blockedShapeOk(x.shape()) || (g == 1 && c == 1)))
      return Status::error("input of shape " + shapeToString(x.shape()) +
                           " cannot be kept in the nChw16c layout (it needs a 2-D convolution, "
                           "no fused pooling or normalization, and input channels a multiple of "
                           "16); run the session with fuse off");
    bool unpaddedPool = poolKernel_.size() == 2;
    for (int64_t v : poolPads_) unpaddedPool &= v == 0;
    const bool nhwc = nhwcX_ || nhwcY_;
    if (nhwc && (transposed_ || ns != 2 || keepSrc_))
      return Status::error(
          "a convolution of this kind cannot hand over NHWC tensors; run the "
          "session with fuse off");
    if (residual_ && (transposed_ || !poolKernel_.empty() || keepSrc_))
      return Status::error(
          "a residual Add cannot be fused into a transposed convolution, one with pooling or "
          "one keeping its input; run the session with fuse off");
    if (!nhwc && !blockedX_ && !blockedY_ && !residual_ && !transposed_ && g == 1 && c == 1 &&
        ns == 2 && (poolKernel_.empty() || unpaddedPool) &&
        (!act_.any() || act_.u.fn == ops::UnaryFn::kRelu)) {
      // One input channel: the direct NCHW loops (single_channel_conv.cpp), no oneDNN, with a
      // fused BatchNormalization folded into the weights and Relu/MaxPool applied per plane.
      e.direct = onednn::SingleChannelConv{
          n,         out[1],    x.dim(2),       x.dim(3),      out[2],
          out[3],    kernel[0], kernel[1],      p.strides[0],  p.strides[1],
          p.padL[0], p.padL[1], p.dilations[0], p.dilations[1]};
      e.epilogue.relu = act_.any();
      if (unpaddedPool) {
        auto& ep = e.epilogue;
        ep.kh = poolKernel_[0];
        ep.kw = poolKernel_[1];
        ep.sh = poolStrides_.empty() ? 1 : poolStrides_[0];
        ep.sw = poolStrides_.empty() ? 1 : poolStrides_[1];
        ep.oh = (out[2] - ep.kh) / ep.sh + 1;
        ep.ow = (out[3] - ep.kw) / ep.sw + 1;
        if (ep.oh < 1 || ep.ow < 1)
          return Status::error("the fused MaxPool window exceeds the input");
        e.outShape = {out[0], out[1], ep.oh, ep.ow};
      }
      return Status();
    }
    // A 1x1 kernel over a 1x1 input (squeeze-excitation's two products, a classifier written
    // as a convolution) is a small matrix product: oneDNN's primitive spent 3-8 us a call in
    // dispatch and its threads' meeting, 0.19 ms of efficientnet_b0's 3.6 at batch 1 over 32
    // such nodes. Up to kPointwiseMacs it runs on one thread (runPointwise); NHWC and NCHW
    // are the same layout there.
    bool pointwise = !transposed_ && g == 1 && !bnFused_ && !residual_ && poolKernel_.empty() &&
                     !keepSrc_ && !blockedX_ && !blockedY_ && n * c * out[1] <= kPointwiseMacs;
    for (size_t i = 0; i < ns && pointwise; ++i)
      pointwise = x.dim(2 + i) == 1 && kernel[i] == 1 && p.padL[i] == 0 && p.padR[i] == 0;
    if (pointwise) {
      e.pointwise = true;
      return Status();
    }
    // A 1x1 convolution between plain NCHW tensors (values whose layout markNhwcChains could
    // not settle: ShuffleNet's branches, between its Slices and Concats, whose shapes ONNX's
    // inference leaves unknown) is a matrix product an image, Y[n] = W X[n] (C_out x C_in times
    // C_in x H W), that reads and writes both tensors where they are. oneDNN's kernels want NHWC:
    // a reorder in and one out cost as much as the product (ShuffleNet V2 at batch 1: 98
    // reorders, 0.69 ms of its 2.9).
    const bool plain = !transposed_ && !residual_ && poolKernel_.empty() && !keepSrc_ &&
                       !blockedX_ && !blockedY_ && !nhwcX_ && !nhwcY_ &&
                       dnnlBackend(ctx.backend()).hostMemory();
    bool gemm = plain && g == 1 && onednn::convComputeType(ctx.backend(), c, out[1]) == f32;
    for (size_t i = 0; i < ns && gemm; ++i)
      gemm = kernel[i] == 1 && p.strides[i] == 1 && p.padL[i] == 0 && p.padR[i] == 0;
    if (gemm) {
      e.gemm = true;
      return Status();
    }
    // A depthwise convolution between plain NCHW tensors, plane by plane (depthwise_planes.h).
    if (plain && g == c && out[1] == c && ns == 2 && p.dilations[0] == 1 && p.dilations[1] == 1) {
      const onednn::DepthwisePlanes d{n * c,     c,         x.dim(2),  x.dim(3),     out[2],
                                      out[3],    kernel[0], kernel[1], p.strides[0], p.strides[1],
                                      p.padL[0], p.padL[1]};
      if (onednn::depthwisePlanesFit(d)) {
        e.depthwise = d;
        return Status();
      }
    }
    e.userSrc = blockedX_ ? onednn::blockedDesc(x.shape())
                : nhwcX_  ? memory::desc(onednn::toDims(x.shape()), f32, Tag::acdb)
                          : plainDesc(x.shape(), f32);
    if (keepSrc_) {
      e.keptSrc = onednn::blockedDesc(x.shape());
      e.keep = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e.userSrc, eng, e.keptSrc));
    }
    e.userDst = blockedY_ ? onednn::blockedDesc(out)
                : nhwcY_  ? memory::desc(onednn::toDims(out), f32, Tag::acdb)
                          : plainDesc(out, f32);
    e.residualD = e.userDst;
    const int64_t oc = out[1];
    Dims wdims, wstrides;
    const int64_t K = numElements(kernel);
    auto ks = stridesOf(kernel);
    if (!transposed_) {
      if (g > 1)
        wdims = {g, oc / g, c / g};
      else
        wdims = {oc, c};
    } else {
      if (g > 1) {
        wdims = {g, oc / g, c / g};
        wstrides = {(c / g) * (oc / g) * K, K, (oc / g) * K};
      } else {
        wdims = {oc, c};
        wstrides = {K, oc * K};
      }
    }
    for (int64_t k : kernel) wdims.push_back(k);
    if (!transposed_) {
      e.userW = memory::desc(wdims, f32, stridesOf(Shape(wdims.begin(), wdims.end())));
    } else {
      for (int64_t s : ks) wstrides.push_back(s);
      e.userW = memory::desc(wdims, f32, wstrides);
    }
    Dims srcAny = onednn::toDims(x.shape()), dstAny = onednn::toDims(out);
    const auto ct = onednn::convComputeType(ctx.backend(), c / g, oc / g);
    memory::desc srcMd(srcAny, ct, Tag::any), dstMd(dstAny, f32, Tag::any),
        wMd(wdims, ct, Tag::any);
    // A pooled NHWC output: the convolution writes NHWC too (pooling keeps its source's layout).
    if (nhwcY_ && !poolKernel_.empty()) dstMd = memory::desc(dstAny, f32, Tag::acdb);
    // An inference chain in nChw16c (markNhwcChains, constant weights): the blocked kernels on
    // both sides, whatever the neighbour's layout. format_tag::any would pick oneDNN's NHWC
    // kernels (brgconv, brdgmm), and a primitive reading NHWC and writing nChw16c is its
    // reference implementation; the other side is reordered instead.
    if ((blockedX_ || blockedY_) && constWeights_ && !transposed_) {
      srcMd = memory::desc(srcAny, ct, Tag::aBcd16b);
      dstMd = memory::desc(dstAny, f32, Tag::aBcd16b);
    }
    // With few input channels (image inputs) oneDNN's direct "first convolution" kernels read
    // plain NCHW and are far faster than what format_tag::any picks for the source. Not for
    // grouped convolutions: with a plain source a depthwise one (one channel per group) falls
    // to im2col and a GEMM per group, 10x slower than its blocked kernel. Nor where Y goes on in
    // NHWC: the first convolution's blocked output then cost a reorder as long as the
    // convolution (mobilenet_v2's stem at batch 8: 0.41 ms after 0.66), while oneDNN's NHWC
    // kernel reads a copy of the image in NHWC, cheap with its 3 channels, and writes Y in NHWC.
    if (!transposed_ && g == 1 && c <= 4 && !nhwcX_ && !nhwcY_ && !blockedX_)
      srcMd = plainDesc(x.shape(), ct);
    e.biasD = memory::desc({oc}, f32, Tag::a);
    memory::desc biasMd = ctx.hasInput(2) || bnFused_ ? e.biasD : memory::desc();
    // Post-ops: the residual (a sum: Y holds it when the primitive runs; oneDNN 2.6's brgconv
    // kernels take no full-size binary add), then the activation.
    auto attrs = [&](bool residual) {
      dnnl::primitive_attr a;
      dnnl::post_ops po;
      if (residual) po.append_sum(1.0f);
      if (!e.actAfter) act_.appendTo(po);
      a.set_post_ops(po);
      return a;
    };
    // Off host memory (oneDNN's GPU engine) the residual is added after the primitive, on the
    // host copy of Y.
    if (residual_ && !dnnlBackend(ctx.backend()).hostMemory()) e.residualAfter = true;
    e.actAfter =
        act_.hostFaster() && poolKernel_.empty() && dnnlBackend(ctx.backend()).hostMemory();
    dnnl::primitive_attr attr = attrs(residual_ && !e.residualAfter);
    const int64_t tiles = ns == 2 ? n * ((x.dim(2) + 3) / 4) * ((x.dim(3) + 3) / 4) : 0;
    if (!transposed_ && ct == f32 && poolKernel_.empty() && g == 1 && ns == 2 && !blockedY_ &&
        (constWeights_ ? tiles >= 16 : !bnFused_ && !nhwc && n >= 16) &&
        (!act_.any() || act_.u.fn == ops::UnaryFn::kRelu) &&
        dnnlBackend(ctx.backend()).hostMemory() &&
        onednn::Winograd43::usable(kernel, p.strides, p.dilations, p.padL, p.padR, c, oc, x.dim(2),
                                   x.dim(3))) {
      // Our Winograd kernel (winograd.cpp) for 3x3 convolutions of 16k channels. Training's
      // batched ones: on the CNN example's second layer the node took 1.7-2.0 ms against 2.2-2.4
      // with oneDNN's. Inference, whose weights are transformed once, from 16 tiles up
      // (resnet18's stride-1 layers at batch 1 but its 7 x 7 ones only batched): at batch 1 on
      // 2 threads 0.16-0.21 ms against 0.44-0.46 for oneDNN's direct kernel, and at batch 8
      // 1.2-1.8 ms against 3.5-3.7 (2.5 against 4.4 on the 7 x 7 planes).
      e.wino = onednn::Winograd43{n, c, oc, x.dim(2), x.dim(3), nhwcX_, nhwcY_};
      e.transformed.resize(static_cast<size_t>(e.wino->weightsSize()));
      e.pd_src = nhwcX_ ? e.userSrc : onednn::blockedDesc(x.shape());
      e.pd_dst = nhwcY_ ? e.userDst : onednn::blockedDesc(out);
      return Status();
    }
    if (!transposed_) {
      // Winograd under forward_inference wants its weights pre-transformed by a reorder: worth it
      // for weights reordered once, but weights that change every run (training) cost a reorder
      // per run as long as the convolution itself, so there forward_training, which transforms
      // them inside the kernel, is used.
      const auto prop =
          constWeights_ ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
      auto describe = [&](dnnl::algorithm alg) {
        dnnl::convolution_forward::desc d(prop, alg, srcMd, wMd, biasMd, dstMd, p.strides,
                                          minus1(p.dilations), p.padL, p.padR);
        if (residual_ && !e.residualAfter) {
          try {
            return dnnl::convolution_forward::primitive_desc(d, attr, eng);
          } catch (const dnnl::error&) {
            // No kernel takes the sum post-op here: the kernel adds the residual after.
            e.residualAfter = true;
            attr = dnnl::primitive_attr();
          }
        }
        return dnnl::convolution_forward::primitive_desc(d, attr, eng);
      };
      // Batched float32 3x3 / stride 1 convolutions take oneDNN's Winograd F(4x4, 3x3) kernel:
      // 4x fewer multiplications; measured 25-35% less time than the direct kernel on the
      // CNN example's second layer from batch 16 up, at float32 rounding-level differences.
      // Small batches stay direct (no gain), and so does any shape Winograd does not cover.
      bool winograd = ct == f32 && g == 1 && n >= 16 && ns == 2 && kernel[0] == 3 &&
                      kernel[1] == 3 && p.strides[0] == 1 && p.strides[1] == 1 &&
                      p.dilations[0] == 1 && p.dilations[1] == 1 && c >= 16 && oc >= 16;
      dnnl::convolution_forward::primitive_desc pd;
      if (winograd) {
        try {
          pd = describe(dnnl::algorithm::convolution_winograd);
        } catch (const dnnl::error&) {
          winograd = false;  // not implemented for this ISA or shape
        }
      }
      if (!winograd) pd = describe(dnnl::algorithm::convolution_direct);
      e.pd_src = pd.src_desc();
      e.pd_w = pd.weights_desc();
      e.pd_dst = pd.dst_desc();
      e.prim = dnnl::convolution_forward(pd);
      if (!poolKernel_.empty()) {
        if (poolKernel_.size() != ns) return Status::error("fused MaxPool rank mismatch");
        Shape pooled{out[0], out[1]};
        std::vector<int64_t> padL(ns), padR(ns), strides(ns), zero(ns, 0);
        for (size_t i = 0; i < ns; ++i) {
          strides[i] = poolStrides_.empty() ? 1 : poolStrides_[i];
          padL[i] = poolPads_.empty() ? 0 : poolPads_[i];
          padR[i] = poolPads_.empty() ? 0 : poolPads_[i + ns];
          pooled.push_back((out[2 + i] + padL[i] + padR[i] - poolKernel_[i]) / strides[i] + 1);
        }
        memory::desc pdst(onednn::toDims(pooled), f32,
                          nhwcY_ ? Tag::acdb : (blockedY_ ? Tag::aBcd16b : Tag::any));
        dnnl::pooling_v2_forward::desc pdesc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::pooling_max, e.pd_dst, pdst, strides,
                                             poolKernel_, zero, padL, padR);
        dnnl::pooling_v2_forward::primitive_desc ppd(pdesc, eng);
        e.pool = dnnl::pooling_v2_forward(ppd);
        e.poolDst = ppd.dst_desc();
        e.pooled = true;
        e.outShape = pooled;
        e.userDst = nhwcY_ || blockedY_ ? pdst : plainDesc(pooled, f32);
      }
    } else {
      dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::deconvolution_direct, srcMd, wMd, biasMd,
                                          dstMd, p.strides, minus1(p.dilations), p.padL, p.padR);
      dnnl::deconvolution_forward::primitive_desc pd(d, attr, eng);
      e.pd_src = pd.src_desc();
      e.pd_w = pd.weights_desc();
      e.pd_dst = pd.dst_desc();
      e.prim = dnnl::deconvolution_forward(pd);
    }
    return Status();
  }

  // Folds an inference BatchNormalization (inputs 3..6: scale, B, mean, var) into scaled weights
  // and a bias: w' = w * s, b' = (b - mean) * s + B with s = scale / sqrt(var + eps).
  Status foldBatchNorm(KernelContext& ctx, int64_t oc, const void*& wData, const void*& biasData) {
    for (int i = 3; i <= 6; ++i)
      if (!ctx.hasInput(i) || ctx.input(i).dtype() != DType::kFloat || ctx.input(i).size() != oc)
        return Status::error(
            "the fused BatchNormalization needs float32 scale, B, mean and var "
            "of " +
            std::to_string(oc) + " elements");
    const Tensor& w = ctx.input(1);
    // Kernel-owned, so the same shapes reuse them on every run.
    foldedW_.resize(w.size());
    foldedB_.resize(oc);
    onednn::foldBatchNorm(w.data<float>(), ctx.hasInput(2) ? ctx.input(2).data<float>() : nullptr,
                          ctx.input(3).data<float>(), ctx.input(4).data<float>(),
                          ctx.input(5).data<float>(), ctx.input(6).data<float>(), bnEps_, oc,
                          w.size() / oc, foldedW_.data(), foldedB_.data());
    wData = foldedW_.data();
    biasData = foldedB_.data();
    return Status();
  }

  ConvLikeAttrs attrs_;
  bool transposed_;
  int64_t group_;
  std::vector<int64_t> outputPadding_, outputShape_;
  FusedActivation act_;
  bool bnFused_;
  float bnEps_;
  bool residual_;  // input kResidualInput is added before the activation (fuseForOneDnn)
  std::vector<float> foldedW_, foldedB_;
  bool constWeights_ = false;
  std::vector<int64_t> poolKernel_, poolStrides_, poolPads_;  // a fused MaxPool
  bool blockedX_;       // X arrives in nChw16c (the session's markNhwcChains)
  bool blockedY_;       // Y leaves in nChw16c (markBlockedLayouts, markNhwcChains)
  bool keepSrc_;        // output 1 is X in nChw16c (the session's shareConvSourceLayout)
  bool nhwcX_, nhwcY_;  // X arrives, Y leaves in NHWC (the session's markNhwcChains)
  bool fusedPlain_;     // nothing fused in, plain layouts: float64 can take the reference kernel
  KernelInit init_;
  onednn::ReferenceFallback fallback_;
  std::string autoPad_;
  bool autoPadSame_ = false, autoPadLower_ = false;
  std::map<std::vector<int64_t>, Entry> cache_;
  onednn::Bindings bind_;

 public:
  void setAutoPad(const std::string& a) {
    autoPad_ = a;
    autoPadSame_ = a == "SAME_UPPER" || a == "SAME_LOWER";
    autoPadLower_ = a == "SAME_LOWER";
  }
};

Result<std::unique_ptr<Kernel>> makeConv(const KernelInit& init) {
  if (!fusion::fusedOf(init.attrs).chain.empty()) return onednn::makeConvChain(init);
  auto k = std::make_unique<Conv>(init);
  k->setAutoPad(init.attrs.getString("auto_pad"));
  if (!k->initStatus().ok()) return k->initStatus();
  return std::unique_ptr<Kernel>(std::move(k));
}

class Pool : public Kernel {
 public:
  explicit Pool(const KernelInit& init)
      : attrs_(init),
        global_(init.opType.rfind("Global", 0) == 0),
        max_(init.opType.find("Max") != std::string::npos),
        ceil_(init.attrs.getInt("ceil_mode", 0) != 0),
        includePad_(init.attrs.getInt("count_include_pad", 0) != 0),
        nhwcX_(fusion::Fused::listed(fusion::fusedOf(init.attrs).nhwcInputs, 0)),
        blockedX_(fusion::Fused::listed(fusion::fusedOf(init.attrs).blockedInputs, 0)),
        nhwcY_(fusion::Fused::listed(fusion::fusedOf(init.attrs).nhwcOutputs, 0)),
        blockedY_(fusion::Fused::listed(fusion::fusedOf(init.attrs).blockedOutputs, 0)),
        init_(init) {
    // oneDNN has no Indices output, column-major indices or integer max pooling: the reference
    // MaxPool (kernels/nn.cpp) takes those.
    needReference_ = init.attrs.getInt("storage_order", 0) != 0 ||
                     (init.numOutputs > 1 && !init.node->output(1).empty());
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    // markNhwcChains gives a window pooling its input's layout on both sides, and a global one
    // a plain output (its 1x1 planes read the same either way).
    const bool chained = nhwcX_ || blockedX_;
    if (chained && (needReference_ || x.dtype() != DType::kFloat || x.rank() != 4 ||
                    (blockedX_ && !onednn::blockedShapeOk(x.shape())) ||
                    (!global_ && (nhwcX_ != nhwcY_ || blockedX_ != blockedY_))))
      return Status::error(
          "only a float32 2-D pooling reads an NHWC or nChw16c input, and a window pooling "
          "writes the same layout; run the session with fuse off");
    if (needReference_ || x.dtype() != DType::kFloat) {
      return fallback_.compute(init_, ctx);
    }
    if (x.rank() < 3 || x.rank() > 5) return Status::error("input must be 3-D to 5-D");
    auto key = inputShapesKey(ctx);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Entry e;
      DW_RETURN_IF_ERROR(guarded("pooling setup", [&]() -> Status {
        std::vector<int64_t> kernel =
            global_ ? std::vector<int64_t>(x.shape().begin() + 2, x.shape().end())
                    : attrs_.kernelShape();
        if (kernel.size() != x.rank() - 2)
          return Status::error("kernel_shape must have one entry per spatial axis");
        SpatialParams p;
        if (global_) {
          p.kernel = kernel;
          p.strides.assign(kernel.size(), 1);
          p.dilations.assign(kernel.size(), 1);
          p.padL.assign(kernel.size(), 0);
          p.padR.assign(kernel.size(), 0);
        } else {
          auto r = attrs_.resolve(x.shape(), kernel, ceil_);
          if (!r) return r.status();
          p = *r;
        }
        Shape out{x.dim(0), x.dim(1)};
        for (size_t i = 0; i < kernel.size(); ++i) {
          const int64_t ek = (kernel[i] - 1) * p.dilations[i] + 1;
          out.push_back((x.dim(2 + i) + p.padL[i] + p.padR[i] - ek) / p.strides[i] + 1);
        }
        e.outShape = out;
        e.params = p;
        e.direct = max_ && !global_ && !chained && x.rank() == 4 &&
                   p.dilations == std::vector<int64_t>{1, 1};
        if (e.direct) return Status();
        auto& eng = dnnlBackend(ctx.backend()).engine();
        const auto alg = max_ ? dnnl::algorithm::pooling_max
                              : (includePad_ ? dnnl::algorithm::pooling_avg_include_padding
                                             : dnnl::algorithm::pooling_avg_exclude_padding);
        // An NHWC or nChw16c input (the session's markNhwcChains): a window pooling's output is
        // in that layout too, and a global pooling's 1x1 planes are the same in either
        // (channels in whole blocks for nChw16c).
        const Tag chain = blockedX_ ? Tag::aBcd16b : Tag::acdb;
        e.src = nhwcX_ || blockedX_ ? memory::desc(onednn::toDims(x.shape()), f32, chain)
                                    : plainDesc(x.shape(), f32);
        // Its output described in the same layout, or oneDNN takes its reference implementation.
        const memory::desc dst = nhwcX_ || blockedX_ ? memory::desc(onednn::toDims(out), f32, chain)
                                                     : plainDesc(out, f32);
        dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, e.src, dst,
                                         p.strides, p.kernel, minus1(p.dilations), p.padL, p.padR);
        dnnl::pooling_v2_forward::primitive_desc pd(d, eng);
        e.prim = dnnl::pooling_v2_forward(pd);
        e.dst = dst;
        return Status();
      }));
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    DW_ALLOC(y, ctx.output(0, DType::kFloat, e.outShape));
    if (y->size() == 0) return Status();
    if (e.direct) {
      maxPool2d(x, e.params, *y);
      return Status();
    }
    return guarded("pooling", &bind_, [&] {
      auto& be = dnnlBackend(ctx.backend());
      e.prim.execute(be.stream(), {{DNNL_ARG_SRC, bind_.in(be, DNNL_ARG_SRC, e.src, x.raw())},
                                   {DNNL_ARG_DST, bind_.out(be, DNNL_ARG_DST, e.dst, y->raw())}});
      bind_.finish(be);
      return Status();
    });
  }

 private:
  struct Entry {
    dnnl::primitive prim;
    memory::desc src, dst;
    Shape outShape;
    SpatialParams params;
    bool direct = false;  // 2-D max pooling without dilation: maxPool2d
  };

  // 2-D max pooling on plain NCHW, a thread per (n, c) plane: oneDNN's plain-layout pooling
  // took several times longer (it is tuned for blocked layouts). Padding never wins the max.
  static void maxPool2d(const Tensor& x, const SpatialParams& p, Tensor& y) {
    const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
    const int64_t OH = y.dim(2), OW = y.dim(3);
    const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.strides[0], sw = p.strides[1];
    const int64_t ph = p.padL[0], pw = p.padL[1];
    const float* px = x.data<float>();
    float* py = y.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl)
      onednn::maxPoolPlane(px + pl * H * W, H, W, py + pl * OH * OW, OH, OW, kh, kw, sh, sw, ph,
                           pw);
  }
  ConvLikeAttrs attrs_;
  bool global_, max_, ceil_, includePad_, needReference_ = false;
  bool nhwcX_;             // X arrives in NHWC
  bool blockedX_;          // or in nChw16c
  bool nhwcY_, blockedY_;  // Y leaves in either (a window pooling: as X arrives)
  KernelInit init_;
  onednn::ReferenceFallback fallback_;
  std::map<std::vector<int64_t>, Entry> cache_;
  onednn::Bindings bind_;
};

// C = alpha * op(A) @ op(B) (+ beta * C for Gemm), via the oneDNN matmul primitive with the
// transposes expressed as strides. MatMul broadcasts batch dimensions numpy-style.
class MatMulKernel : public Kernel {
 public:
  explicit MatMulKernel(const KernelInit& init)
      : gemm_(init.opType == "Gemm"),
        transA_(init.attrs.getInt("transA", 0) != 0),
        transB_(init.attrs.getInt("transB", 0) != 0),
        alpha_(init.attrs.getFloat("alpha", 1.0f)),
        beta_(init.attrs.getFloat("beta", 1.0f)),
        init_(init),
        act_(fusion::fusedOf(init.attrs)),
        constB_(init.constantInputs.size() > 1 && init.constantInputs[1]) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& a0 = ctx.input(0);
    const Tensor& b0 = ctx.input(1);
    if (a0.dtype() != DType::kFloat || b0.dtype() != DType::kFloat) {
      return fallback_.compute(init_, ctx);
    }
    Shape sa = a0.shape(), sb = b0.shape();
    if (gemm_) {
      if (sa.size() != 2 || sb.size() != 2) return Status::error("Gemm needs 2-D A and B");
    } else {
      if (sa.empty() || sb.empty()) return Status::error("MatMul inputs must have rank >= 1");
    }
    const bool aVec = sa.size() == 1, bVec = sb.size() == 1;
    if (aVec) sa.insert(sa.begin(), 1);
    if (bVec) sb.push_back(1);
    // A batch of A against one B (a Linear layer on [seq, batch, features]) is one matrix
    // product with the batch folded into M: one primitive call instead of one per batch entry.
    Shape foldedOut;  // the output's shape, where A's batch was folded
    if (!gemm_ && !transA_ && !aVec && sa.size() > 2 &&
        numElements(Shape(sb.begin(), sb.end() - 2)) == 1) {
      auto batch =
          broadcastShapes({Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2)});
      if (!batch) return batch.status();
      foldedOut = *batch;
      foldedOut.push_back(sa[sa.size() - 2]);
      if (!bVec) foldedOut.push_back(sb.back());
      sa = {numElements(Shape(sa.begin(), sa.end() - 1)), sa.back()};
      sb = {sb[sb.size() - 2], sb.back()};
    }
    const int64_t M = transA_ ? sa[sa.size() - 1] : sa[sa.size() - 2];
    const int64_t K = transA_ ? sa[sa.size() - 2] : sa[sa.size() - 1];
    const int64_t Kb = transB_ ? sb[sb.size() - 1] : sb[sb.size() - 2];
    const int64_t N = transB_ ? sb[sb.size() - 2] : sb[sb.size() - 1];
    if (K != Kb)
      return Status::error("inner dimensions differ: " + shapeToString(a0.shape()) + " x " +
                           shapeToString(b0.shape()));
    Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    auto batch = broadcastShapes({ba, bb});
    if (!batch) return batch.status();
    const int64_t B = numElements(*batch);
    Shape out = *batch;
    if (!aVec) out.push_back(M);
    if (!bVec) out.push_back(N);
    if (!foldedOut.empty()) out = foldedOut;
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    if (y->size() == 0) return Status();
    // Operands whose batch dims differ from the broadcast batch are expanded first.
    Tensor a = a0, b = b0;
    auto expand = [&](const Tensor& t, const Shape& s2, const Shape& bt) -> Result<Tensor> {
      const int64_t bn = numElements(bt);
      if (bn == B || bn == 1) return t.reshaped({bn, s2[s2.size() - 2], s2[s2.size() - 1]});
      Shape full = *batch;
      full.push_back(s2[s2.size() - 2]);
      full.push_back(s2[s2.size() - 1]);
      Tensor* tmp = ctx.scratch(DType::kFloat, full);
      if (!tmp) return ctx.status();
      DW_RETURN_IF_ERROR(
          stridedCopyForKernels(t.reshaped(s2), *tmp, full, broadcastStrides(s2, full), 0));
      return tmp->reshaped({B, s2[s2.size() - 2], s2[s2.size() - 1]});
    };
    auto ea = expand(a, sa, ba);
    if (!ea) return ea.status();
    auto eb = expand(b, sb, bb);
    if (!eb) return eb.status();
    a = *ea;
    b = *eb;
    // Gemm's C goes in as the primitive's bias when it needs no scaling and broadcasts as
    // [1|M, 1|N]; then a fused activation can follow as a post-op too. A MatMul has a third
    // input where the session fused the Add of a bias vector into it (fuseForOneDnn).
    const bool hasC = ctx.hasInput(2) && (!gemm_ || beta_ != 0);
    int64_t cm = 1, cn = 1;
    bool cAsBias = false;
    if (hasC) {
      const Tensor& c = ctx.input(2);
      if (c.dtype() != DType::kFloat) return Status::error("C must be float32");
      const Shape& cs = c.shape();
      if (cs.size() <= 2) {
        cn = cs.empty() ? 1 : cs.back();
        cm = cs.size() == 2 ? cs[0] : 1;
        cAsBias = alpha_ == 1.0f && beta_ == 1.0f && (cm == 1 || cm == M) && (cn == 1 || cn == N);
      }
    }
    const bool actInPrim = !hasC || cAsBias;
    // A short reduction into a wide output, such as the input and weight gradients of a wide
    // Dense layer, runs as oneDNN's sgemm: on the CNN example's M64 K128 N3136 (dX) and M128 K64
    // N3136 (dW) it took 0.34 ms against the matmul primitive's 0.50. Longer reductions stay on
    // the primitive, which won them (M64 K3136 N128 transB: 0.37 against 0.43 ms), and so does
    // everything small, where the two are even.
    if (!hasC && B == 1 && !act_.any() && K <= 256 && N >= 512 && M * N * K >= (int64_t{1} << 20) &&
        dnnlBackend(ctx.backend()).hostMemory() && onednn::computeType(ctx.backend()) == f32) {
      const dnnl::status st =
          dnnl::sgemm(transA_ ? 'T' : 'N', transB_ ? 'T' : 'N', M, N, K, alpha_, a.data<float>(),
                      transA_ ? M : K, b.data<float>(), transB_ ? K : N, 0.0f, y->data<float>(), N);
      if (st != dnnl::status::success)
        return Status::error("oneDNN sgemm failed for " + shapeToString(a0.shape()) + " x " +
                             shapeToString(b0.shape()));
      return Status();
    }
    // One row against a transposed B (a batch-1 classifier, 1280 -> 1000 in mobilenet_v2): row
    // dot products at memory speed, where oneDNN's matmul took 1.6x as long.
    if (M == 1 && B == 1 && transB_ && !transA_ && alpha_ == 1.0f &&
        (!hasC || (cAsBias && cm == 1)) && dnnlBackend(ctx.backend()).hostMemory() &&
        onednn::computeType(ctx.backend()) == f32 && vectorMathAvailable()) {
      onednn::rowDots(a.data<float>(), b.data<float>(), N, K,
                      hasC && cn == N ? ctx.input(2).data<float>() : nullptr, y->data<float>());
      if (hasC && cn == 1) {
        const float c = ctx.input(2).data<float>()[0];
        for (int64_t n = 0; n < N; ++n) y->data<float>()[n] += c;
      }
      act_.applyHost(y->data<float>(), y->size());
      return Status();
    }
    auto key = std::vector<int64_t>{a.dim(0), b.dim(0), M, K, N, cAsBias, cm, cn};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Entry e;
      DW_RETURN_IF_ERROR(guarded("matmul setup", [&]() -> Status {
        auto& eng = dnnlBackend(ctx.backend()).engine();
        const int64_t Ba = a.dim(0), Bb = b.dim(0);
        auto descA = [&](memory::data_type t) {
          return transA_ ? memory::desc({Ba, M, K}, t, {M * K, 1, M})
                         : memory::desc({Ba, M, K}, t, {M * K, K, 1});
        };
        auto descB = [&](memory::data_type t) {
          return transB_ ? memory::desc({Bb, K, N}, t, {K * N, 1, K})
                         : memory::desc({Bb, K, N}, t, {K * N, N, 1});
        };
        e.a = descA(f32);
        e.b = descB(f32);
        e.c = memory::desc({B, M, N}, f32, {M * N, N, 1});
        if (cAsBias) e.bias = memory::desc({1, cm, cn}, f32, {cm * cn, cn, 1});
        dnnl::primitive_attr attr;
        if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
        if (actInPrim) act_.addTo(attr);
        // Precision bf16: the primitive reads bf16 copies of the f32 inputs. A constant B is
        // converted once, into the layout the primitive prefers (AMX wants it blocked). Operands
        // that change every run keep their own element order: a plain conversion is cheap, while
        // a transposing one (Gemm's transB weights during training) cost more than the matmul
        // (M64 K3136 N128: 0.46 -> 0.29 ms for conversion and matmul together).
        const auto ct = onednn::computeType(ctx.backend());
        memory::desc pa = descA(ct);
        memory::desc pb = constB_ ? memory::desc({Bb, K, N}, ct, Tag::any) : descB(ct);
        if (ct == f32) {
          pa = e.a;
          pb = e.b;
        }
        dnnl::matmul::desc d =
            cAsBias ? dnnl::matmul::desc(pa, pb, e.bias, e.c) : dnnl::matmul::desc(pa, pb, e.c);
        dnnl::matmul::primitive_desc pd(d, attr, eng);
        e.pa = pd.src_desc();
        e.pb = pd.weights_desc();
        e.prim = dnnl::matmul(pd);
        return Status();
      }));
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    DW_RETURN_IF_ERROR(guarded("matmul", &bind_, [&] {
      auto& be = dnnlBackend(ctx.backend());
      auto& eng = be.engine();
      auto& s = be.stream();
      memory ma = e.rA.in(bind_.in(be, DNNL_ARG_SRC, e.a, a.raw()), e.pa, eng, s);
      memory mb;
      if (constB_ && e.bFrom == b0.raw()) {
        mb = e.rB.scratch;
      } else {
        mb = e.rB.in(bind_.in(be, DNNL_ARG_WEIGHTS, e.b, b.raw(), constB_ && b.raw() == b0.raw()),
                     e.pb, eng, s);
        if (constB_ && mb == e.rB.scratch) e.bFrom = b0.raw();
      }
      memory mc = bind_.out(be, DNNL_ARG_DST, e.c, y->raw());
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
      if (cAsBias) args[DNNL_ARG_BIAS] = bind_.in(be, DNNL_ARG_BIAS, e.bias, ctx.input(2).raw());
      e.prim.execute(s, args);
      bind_.finish(be);
      return Status();
    }));
    if (hasC && !cAsBias) {
      const Tensor& c = ctx.input(2);
      auto sh = broadcastShapes({c.shape(), out});
      if (!sh || *sh != out)
        return Status::error("C of shape " + shapeToString(c.shape()) + " does not broadcast to " +
                             shapeToString(out));
      float* py = y->data<float>();
      const float beta = beta_;
      broadcastBinary(py, out, c.data<float>(), c.shape(), py, out,
                      [beta](float v, float w) { return v + beta * w; });
    }
    if (!actInPrim) act_.applyHost(y->data<float>(), y->size());
    return Status();
  }

 private:
  struct Entry {
    dnnl::primitive prim;
    memory::desc a, b, c, bias, pa, pb;
    Reorderer rA, rB;
    const void* bFrom = nullptr;  // constant B already converted into rB.scratch
  };
  bool gemm_, transA_, transB_;
  float alpha_, beta_;
  KernelInit init_;
  FusedActivation act_;
  bool constB_;
  onednn::ReferenceFallback fallback_;
  std::map<std::vector<int64_t>, Entry> cache_;
  onednn::Bindings bind_;
};

class BatchNorm : public Kernel {
 public:
  explicit BatchNorm(const KernelInit& init)
      : eps_(init.attrs.getFloat("epsilon")),
        relu_(FusedActivation(fusion::fusedOf(init.attrs)).any()),
        nhwc_(fusion::Fused::listed(fusion::fusedOf(init.attrs).nhwcInputs, 0)),
        blocked_(fusion::Fused::listed(fusion::fusedOf(init.attrs).blockedInputs, 0)),
        init_(init) {
    training_ = init.opset >= 14
                    ? init.attrs.getInt("training_mode") != 0
                    : (init.opset < 7 ? init.attrs.getInt("is_test") == 0 && init.numOutputs > 1
                                      : init.numOutputs > 1);
    if (init.opset < 9 && init.attrs.getInt("spatial") == 0)
      fail("BatchNormalization spatial=0 is not supported");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const bool chained = nhwc_ || blocked_;
    if (chained && (x.rank() != 4 || x.dtype() != DType::kFloat ||
                    (blocked_ && !onednn::blockedShapeOk(x.shape()))))
      return Status::error(
          "only a float32 4-D BatchNormalization reads an NHWC or nChw16c input; run the "
          "session with fuse off");
    if (training_ || x.dtype() != DType::kFloat || x.rank() < 2 || x.rank() > 5) {
      DW_RETURN_IF_ERROR(fallback_.compute(init_, ctx));
      // The Relu fused in (fuseForOneDnn) is this kernel's to apply.
      if (relu_ && ctx.wantsOutput(0)) {
        Tensor& y = ctx.outputs_[0]->tensor;
        if (y.dtype() != DType::kFloat) return Status::error("a fused Relu needs float32");
        float* py = y.data<float>();
        for (int64_t i = 0; i < y.size(); ++i) py[i] = std::max(py[i], 0.0f);
      }
      return Status();
    }
    for (int i = 1; i <= 4; ++i)
      if (ctx.input(i).dtype() != DType::kFloat || ctx.input(i).size() != x.dim(1))
        return Status::error("scale, bias, mean and var must be float32 vectors of length C");
    auto key = x.shape();
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Entry e;
      DW_RETURN_IF_ERROR(guarded("batch normalization setup", [&]() -> Status {
        auto& eng = dnnlBackend(ctx.backend()).engine();
        // In a convolution chain's layout (markNhwcChains), the output in the same one.
        e.data = chained ? memory::desc(onednn::toDims(x.shape()), f32,
                                        blocked_ ? Tag::aBcd16b : Tag::acdb)
                         : plainDesc(x.shape(), f32);
        auto flags = dnnl::normalization_flags::use_global_stats |
                     dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
        if (relu_) flags |= dnnl::normalization_flags::fuse_norm_relu;
        dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, e.data, eps_,
                                                  flags);
        dnnl::batch_normalization_forward::primitive_desc pd(d, eng);
        e.prim = dnnl::batch_normalization_forward(pd);
        return Status();
      }));
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    if (y->size() == 0) return Status();
    return guarded("batch normalization", &bind_, [&] {
      auto& be = dnnlBackend(ctx.backend());
      memory::desc vec({x.dim(1)}, f32, Tag::a);
      auto m = [&](int arg, int i) { return bind_.in(be, arg, vec, ctx.input(i).raw()); };
      e.prim.execute(be.stream(), {{DNNL_ARG_SRC, bind_.in(be, DNNL_ARG_SRC, e.data, x.raw())},
                                   {DNNL_ARG_DST, bind_.out(be, DNNL_ARG_DST, e.data, y->raw())},
                                   {DNNL_ARG_SCALE, m(DNNL_ARG_SCALE, 1)},
                                   {DNNL_ARG_SHIFT, m(DNNL_ARG_SHIFT, 2)},
                                   {DNNL_ARG_MEAN, m(DNNL_ARG_MEAN, 3)},
                                   {DNNL_ARG_VARIANCE, m(DNNL_ARG_VARIANCE, 4)}});
      bind_.finish(be);
      return Status();
    });
  }

 private:
  struct Entry {
    dnnl::primitive prim;
    memory::desc data;
  };
  float eps_;
  bool training_ = false;
  bool relu_;            // a Relu after it is applied in its pass (fuseForOneDnn)
  bool nhwc_, blocked_;  // X arrives, Y leaves in NHWC or nChw16c (markNhwcChains)
  KernelInit init_;
  onednn::ReferenceFallback fallback_;
  std::map<Shape, Entry> cache_;
  onednn::Bindings bind_;
};

class Lrn : public Kernel {
 public:
  explicit Lrn(const KernelInit& init)
      : size_(init.attrs.getInt("size", 1)),
        alpha_(init.attrs.getFloat("alpha")),
        beta_(init.attrs.getFloat("beta")),
        bias_(init.attrs.getFloat("bias")) {
    if (size_ % 2 == 0) fail("LRN with an even size is not supported by oneDNN");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.rank() < 3 || x.rank() > 5)
      return Status::error("LRN supports float32 inputs of rank 3 to 5");
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    return guarded("lrn", &bind_, [&] {
      auto& be = dnnlBackend(ctx.backend());
      if (!prim_ || shape_ != x.shape()) {
        md_ = plainDesc(x.shape(), f32);
        dnnl::lrn_forward::desc d(dnnl::prop_kind::forward_inference,
                                  dnnl::algorithm::lrn_across_channels, md_, size_, alpha_, beta_,
                                  bias_);
        prim_ = dnnl::lrn_forward(dnnl::lrn_forward::primitive_desc(d, be.engine()));
        shape_ = x.shape();
      }
      prim_.execute(be.stream(), {{DNNL_ARG_SRC, bind_.in(be, DNNL_ARG_SRC, md_, x.raw())},
                                  {DNNL_ARG_DST, bind_.out(be, DNNL_ARG_DST, md_, y->raw())}});
      bind_.finish(be);
      return Status();
    });
  }

 private:
  int64_t size_;
  float alpha_, beta_, bias_;
  dnnl::primitive prim_;
  memory::desc md_;
  Shape shape_;
  onednn::Bindings bind_;
};

}  // namespace

namespace onednn {
Result<std::unique_ptr<Kernel>> referenceKernel(const KernelInit& init) {
  const KernelDef* d =
      KernelRegistry::global().find(init.domain, init.opType, init.opset, kReferenceTable);
  if (!d)
    return Status::error("no reference kernel for " + init.opType + " at opset " +
                         std::to_string(init.opset));
  return d->factory(init);
}
}  // namespace onednn

void addRnnKernels(KernelRegistry& r);            // onednn/rnn.cpp
void addOneDnnEltwiseKernels(KernelRegistry& r);  // onednn/eltwise.cpp

void addOneDnnKernels(KernelRegistry& r) {
  addRnnKernels(r);
  addOneDnnEltwiseKernels(r);
  const char* c = kOneDnnTable;
  r.add(c, "Conv", 1, kMaxOpset, &makeConv);
  r.add(c, "ConvTranspose", 1, kMaxOpset, &makeConv);
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
    r.add(c, op, 1, kMaxOpset, &makeKernel<Pool>);
  r.add(c, "MatMul", 1, kMaxOpset, &makeKernel<MatMulKernel>);
  r.add(c, "Gemm", 1, kMaxOpset, &makeKernel<MatMulKernel>);
  r.add(c, "BatchNormalization", 1, kMaxOpset, &makeKernel<BatchNorm>);
  r.add(c, "LRN", 1, kMaxOpset, &makeKernel<Lrn>);
}

}  // namespace dw::engine
