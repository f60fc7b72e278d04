// ConvGrad (domain "com.deepwire.grad") on the oneDNN table: convolution and deconvolution
// backward_data and backward_weights on oneDNN's primitives (bf16 operands under precision
// bf16), float32 tensors. Primitives are cached per input-shape signature and oneDNN chooses
// their layouts, reordered only where they differ from plain. Two cases run our own loops: the
// weight gradient of a one-input-channel convolution (single_channel_conv.cpp) and the data
// gradient of a batched 3x3 convolution (winograd.cpp).
#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <vector>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/grad_common.h"
#include "engine/onednn/onednn_backend.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace onednn {
namespace {

// ConvGrad(dY, X, W) -> dX, dW, dB for Conv (transposed=0) and ConvTranspose (transposed=1).
class ConvGrad : public Kernel {
 public:
  explicit ConvGrad(const KernelInit& init) : ConvGrad(init, fusion::fusedOf(init.attrs)) {}
  ConvGrad(const KernelInit& init, const fusion::Fused& f)
      : attrs_(init.attrs),
        transposed_(init.attrs.getInt("transposed", 0) != 0),
        group_(init.attrs.getInt("group", 1)),
        blockedDy_(fusion::Fused::listed(f.blockedInputs, 0)),
        blockedX_(fusion::Fused::listed(f.blockedInputs, 1)) {}

  Status compute(KernelContext& ctx) override {
    DW_RETURN_IF_ERROR(needFloat(ctx, 3));
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank() || dy.rank() != x.rank())
      return Status::error("ConvGrad: inputs must be 3-D to 5-D with matching ranks");
    auto key = inputShapesKey(ctx);
    if (blockedDy_ && (transposed_ || !onednn::blockedShapeOk(dy.shape()) || x.dim(1) == 1))
      return Status::error("dY of shape " + shapeToString(dy.shape()) +
                           " cannot arrive in the nChw16c layout (it needs a 2-D convolution of "
                           "more than one input channel and output channels a multiple of 16); "
                           "run the session with fuse off");
    if (blockedX_ && (transposed_ || !onednn::blockedShapeOk(x.shape()) || x.dim(1) == 1))
      return Status::error("X of shape " + shapeToString(x.shape()) +
                           " cannot arrive in the nChw16c layout (it needs a 2-D convolution "
                           "whose input channels are a multiple of 16); run the session with "
                           "fuse off");
    if (!ctx.wantsOutput(0) && !transposed_ && group_ == 1 && x.rank() == 4 && x.dim(1) == 1 &&
        w.dim(1) == 1 && w.dim(0) == dy.dim(1))
      return singleChannel(ctx, key);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Entry e;
      DW_RETURN_IF_ERROR(guarded("convolution backward setup", [&] { return build(ctx, e); }));
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    const bool wantX = ctx.wantsOutput(0), wantW = ctx.wantsOutput(1), wantB = ctx.wantsOutput(2);
    Tensor *dx = nullptr, *dw = nullptr, *db = nullptr;
    if (wantX) {
      dx = ctx.output(0, DType::kFloat, x.shape());
      if (!dx) return ctx.status();
    }
    if (wantW || wantB) {
      dw = wantW ? ctx.output(1, DType::kFloat, w.shape()) : ctx.scratch(DType::kFloat, w.shape());
      if (!dw) return ctx.status();
    }
    if (dw) {
      // The weights primitive always computes the bias gradient; unwanted, it goes to scratch.
      db = wantB ? ctx.output(2, DType::kFloat, {e.oc}) : ctx.scratch(DType::kFloat, {e.oc});
      if (!db) return ctx.status();
    }
    return guarded("convolution backward", [&] {
      auto& be = cpuBackend(ctx.backend());
      auto& eng = be.engine();
      auto& s = be.stream();
      memory dyUser(e.userDst, eng, const_cast<void*>(dy.raw()));
      if (dx) {
        memory dxUser(e.userSrc, eng, dx->raw());
        memory mdy = e.rDyData.in(dyUser, e.dataDiffDst, eng, s);
        memory mdx = e.rDx.out(dxUser, e.dataDiffSrc, eng);
        if (e.wino) {
          s.wait();  // the kernel reads the reorder's result on the host
          e.wino->transformWeights(w.data<float>(), true, e.transformed.data());
          e.wino->run(static_cast<const float*>(mdy.get_data_handle()), e.transformed.data(),
                      nullptr, nullptr, false, static_cast<float*>(mdx.get_data_handle()));
        } else {
          memory wUser(e.userW, eng, const_cast<void*>(w.raw()));
          memory mw = e.rW.in(wUser, e.dataW, eng, s);
          e.data.execute(
              s, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx}});
        }
        e.rDx.back(s, mdx, dxUser);
      }
      if (dw) {
        memory xUser(e.userX, eng, const_cast<void*>(x.raw()));
        memory dwUser(e.userW, eng, dw->raw());
        // Both primitives usually want diff_dst alike: then it is converted only once.
        memory mdy = dx && e.wDiffDst == e.dataDiffDst && e.rDyData.scratch
                         ? e.rDyData.scratch
                         : e.rDyW.in(dyUser, e.wDiffDst, eng, s);
        memory mx = e.rX.in(xUser, e.wSrc, eng, s);
        memory mdw = e.rDw.out(dwUser, e.wDiffW, eng);
        e.weights.execute(s, {{DNNL_ARG_DIFF_DST, mdy},
                              {DNNL_ARG_SRC, mx},
                              {DNNL_ARG_DIFF_WEIGHTS, mdw},
                              {DNNL_ARG_DIFF_BIAS, memory(e.biasD, eng, db->raw())}});
        e.rDw.back(s, mdw, dwUser);
      }
      s.wait();
      return Status();
    });
  }

 private:
  struct Entry {
    dnnl::primitive data, weights;
    memory::desc userSrc, userX, userW, userDst, biasD;  // userSrc: dX's, userX: X's
    memory::desc dataDiffDst, dataW, dataDiffSrc, wDiffDst, wSrc, wDiffW;
    Reorderer rDyData, rW, rDx, rDyW, rX, rDw;
    int64_t oc = 0;
    std::optional<onednn::Winograd43> wino;  // our kernel for the data gradient
    std::vector<float> transformed;          // its turned, transformed weights
  };

  // Convolution and deconvolution differ only in their oneDNN types: both take the forward
  // training descriptor as the hint for backward data and backward weights.
  // Under precision bf16 the primitives read bf16 src, weights and diff_dst (`ct`) and write f32
  // diff_src, diff_weights and diff_bias.
  template <class Fwd, class Bd, class Bw>
  static void buildPrims(Entry& e, dnnl::algorithm alg, const Dims& srcDims, const Dims& wDims,
                         const Dims& dstDims, memory::data_type ct, const Dims& st, const Dims& dil,
                         const Dims& pl, const Dims& pr, const dnnl::engine& eng) {
    auto any = [](const Dims& d, memory::data_type t) { return memory::desc(d, t, Tag::any); };
    typename Fwd::primitive_desc hint(
        typename Fwd::desc(dnnl::prop_kind::forward_training, alg, any(srcDims, ct), any(wDims, ct),
                           e.biasD, any(dstDims, ct), st, dil, pl, pr),
        eng);
    typename Bd::primitive_desc bd(typename Bd::desc(alg, any(srcDims, f32), any(wDims, ct),
                                                     any(dstDims, ct), st, dil, pl, pr),
                                   eng, hint);
    typename Bw::primitive_desc bwb(typename Bw::desc(alg, any(srcDims, ct), any(wDims, f32),
                                                      e.biasD, any(dstDims, ct), st, dil, pl, pr),
                                    eng, hint);
    e.data = Bd(bd);
    e.weights = Bw(bwb);
    e.dataDiffDst = bd.diff_dst_desc();
    e.dataW = bd.weights_desc();
    e.dataDiffSrc = bd.diff_src_desc();
    e.wDiffDst = bwb.diff_dst_desc();
    e.wSrc = bwb.src_desc();
    e.wDiffW = bwb.diff_weights_desc();
  }

  // Weight and bias gradients of a one-input-channel convolution whose input needs no gradient
  // (an image input): the direct NCHW loops of single_channel_conv.cpp.
  Status singleChannel(KernelContext& ctx, const std::vector<int64_t>& key) {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    auto it = direct_.find(key);
    if (it == direct_.end()) {
      std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
      auto win = resolveWindow(attrs_, x.shape(), dy.shape(), kernel, false);
      if (!win) return win.status();
      const Window& v = *win;
      onednn::SingleChannelConv g{x.dim(0),  dy.dim(1), x.dim(2),       x.dim(3),      dy.dim(2),
                                  dy.dim(3), kernel[0], kernel[1],      v.strides[0],  v.strides[1],
                                  v.padL[0], v.padL[1], v.dilations[0], v.dilations[1]};
      it = direct_.emplace(key, g).first;
    }
    const int64_t oc = dy.dim(1);
    Tensor* dw = ctx.output(1, DType::kFloat, w.shape());
    if (!dw) return ctx.status();
    Tensor* db = ctx.output(2, DType::kFloat, {oc});
    if (!db) return ctx.status();
    onednn::singleChannelConvWeightGrad(it->second, x.data<float>(), dy.data<float>(),
                                        dw->data<float>(), db->data<float>());
    return Status();
  }

  Status build(KernelContext& ctx, Entry& e) {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    auto& eng = cpuBackend(ctx.backend()).engine();
    std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    auto win = resolveWindow(attrs_, x.shape(), dy.shape(), kernel, transposed_);
    if (!win) return win.status();
    const int64_t g = group_, c = x.dim(1), oc = dy.dim(1);
    if (g <= 0 || c % g || oc % g) return Status::error("channels not divisible by group");
    e.oc = oc;
    const int64_t K = numElements(kernel);
    Dims wdims, wstrides;
    if (!transposed_) {
      wdims = g > 1 ? Dims{g, oc / g, c / g} : Dims{oc, c};
      for (int64_t k : kernel) wdims.push_back(k);
      e.userW = memory::desc(wdims, f32, stridesOf(Shape(wdims.begin(), wdims.end())));
    } else {
      // ONNX ConvTranspose weights are [C_in, C_out/g, k...].
      if (g > 1) {
        wdims = {g, oc / g, c / g};
        wstrides = {(c / g) * (oc / g) * K, K, (oc / g) * K};
      } else {
        wdims = {oc, c};
        wstrides = {K, oc * K};
      }
      for (int64_t k : kernel) wdims.push_back(k);
      for (int64_t s : stridesOf(kernel)) wstrides.push_back(s);
      e.userW = memory::desc(wdims, f32, wstrides);
    }
    e.userSrc = plainDesc(x.shape(), f32);
    e.userX = blockedX_ ? onednn::blockedDesc(x.shape()) : e.userSrc;
    e.userDst = blockedDy_ ? onednn::blockedDesc(dy.shape()) : plainDesc(dy.shape(), f32);
    e.biasD = memory::desc({oc}, f32, Tag::a);
    const Dims srcDims = onednn::toDims(x.shape()), dstDims = onednn::toDims(dy.shape());
    const Dims dil = dilationsMinus1(win->dilations);
    // The forward kernel's channels: a deconvolution's input is its C_in.
    const auto ct = onednn::convComputeType(ctx.backend(), c / g, oc / g);
    if (!transposed_) {
      auto build = [&](dnnl::algorithm alg) {
        buildPrims<dnnl::convolution_forward, dnnl::convolution_backward_data,
                   dnnl::convolution_backward_weights>(
            e, alg, srcDims, wdims, dstDims, ct, win->strides, dil, win->padL, win->padR, eng);
      };
      // As in the forward kernel (kernels.cpp): batched float32 3x3 / stride-1 gradients take
      // oneDNN's Winograd kernels, measured 17% less time than direct for the CNN example's
      // second layer (batch 64, data and weight gradients with their reorders).
      if (ct == f32 && g == 1 && x.dim(0) >= 16 && kernel.size() == 2 && kernel[0] == 3 &&
          kernel[1] == 3 && win->strides == Dims{1, 1} && dil == Dims{0, 0} && c >= 16 &&
          oc >= 16) {
        try {
          build(dnnl::algorithm::convolution_winograd);
          // The data gradient, a convolution of dY with the turned weights, runs our Winograd
          // kernel (winograd.cpp) where it applies: the CNN example's conv2 ConvGrad node took
          // 4.3 ms against 4.8 with oneDNN's (alternating runs).
          if (onednn::Winograd43::usable(kernel, win->strides, win->dilations, win->padL, win->padR,
                                         oc, c, x.dim(2), x.dim(3))) {
            e.wino = onednn::Winograd43{x.dim(0), oc, c, x.dim(2), x.dim(3)};
            e.transformed.resize(static_cast<size_t>(e.wino->weightsSize()));
            e.dataDiffDst = onednn::blockedDesc(dy.shape());
            e.dataDiffSrc = onednn::blockedDesc(x.shape());
          }
          return Status();
        } catch (const dnnl::error&) {
          // not implemented for this ISA or shape: direct below
        }
      }
      build(dnnl::algorithm::convolution_direct);
    } else
      buildPrims<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                 dnnl::deconvolution_backward_weights>(e, dnnl::algorithm::deconvolution_direct,
                                                       srcDims, wdims, dstDims, ct, win->strides,
                                                       dil, win->padL, win->padR, eng);
    return Status();
  }

  Attributes attrs_;
  bool transposed_;
  int64_t group_;
  bool blockedDy_;  // dY arrives in nChw16c (the session's markBlockedLayouts)
  bool blockedX_;   // X arrives in nChw16c (the session's shareConvSourceLayout)
  std::map<std::vector<int64_t>, Entry> cache_;
  std::map<std::vector<int64_t>, onednn::SingleChannelConv> direct_;
};

}  // namespace
}  // namespace onednn

void addConvGradKernels(KernelRegistry& r) {
  r.add(kOneDnnTable, "ConvGrad", 1, kMaxOpset, &makeKernel<onednn::ConvGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
