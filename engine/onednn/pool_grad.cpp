// PoolGrad (domain "com.deepwire.grad") on the oneDNN table, float32 tensors: 2-D max pooling
// runs direct NCHW loops (max_pool_planes.cpp), optionally with a fused Relu gradient; other
// pooling runs oneDNN's backward primitive, max pooling recomputing its workspace with a
// forward_training pass. Primitives are cached per input-shape signature.
#include <onnx/onnx_pb.h>

#include <map>
#include <unordered_map>
#include <vector>

#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/onednn/grad_common.h"
#include "engine/onednn/max_pool_planes.h"
#include "engine/onednn/onednn_backend.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace onednn {
namespace {

// PoolGrad(dY, X) -> dX for MaxPool, AveragePool and their Global forms.
class PoolGrad : public Kernel {
 public:
  explicit PoolGrad(const KernelInit& init)
      : attrs_(init.attrs),
        op_(init.attrs.getString("op")),
        global_(op_.rfind("Global", 0) == 0),
        max_(op_.find("Max") != std::string::npos),
        includePad_(init.attrs.getInt("count_include_pad", 0) != 0),
        reluGrad_(fusion::fusedOf(init.attrs).reluGrad) {
    if (init.attrs.getInt("storage_order", 0) != 0) fail("storage_order=1 is not supported");
    if (reluGrad_ && !max_) fail("a fused Relu gradient needs max pooling");
  }

  Status compute(KernelContext& ctx) override {
    DW_RETURN_IF_ERROR(needFloat(ctx, 2));
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (x.rank() < 3 || x.rank() > 5 || dy.rank() != x.rank())
      return Status::error("PoolGrad: input must be 3-D to 5-D");
    auto key = inputShapesKey(ctx);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Entry e;
      DW_RETURN_IF_ERROR(guarded("pooling backward setup", [&]() -> Status {
        auto& eng = cpuBackend(ctx.backend()).engine();
        std::vector<int64_t> kernel =
            global_ ? std::vector<int64_t>(x.shape().begin() + 2, x.shape().end())
                    : attrs_.getInts("kernel_shape");
        if (kernel.size() != x.rank() - 2)
          return Status::error("kernel_shape must have one entry per spatial axis");
        Window win;
        if (global_) {
          win.kernel = Dims(kernel.begin(), kernel.end());
          win.strides = Dims(kernel.size(), 1);
          win.dilations = Dims(kernel.size(), 1);
          win.padL = Dims(kernel.size(), 0);
          win.padR = Dims(kernel.size(), 0);
        } else {
          auto r = resolveWindow(attrs_, x.shape(), dy.shape(), kernel, false);
          if (!r) return r.status();
          win = *r;
        }
        e.win = win;
        e.direct = max_ && x.rank() == 4 && win.dilations == Dims{1, 1};
        if (e.direct) return Status();
        const auto alg = max_ ? dnnl::algorithm::pooling_max
                              : (includePad_ ? dnnl::algorithm::pooling_avg_include_padding
                                             : dnnl::algorithm::pooling_avg_exclude_padding);
        e.src = plainDesc(x.shape(), f32);
        e.dst = plainDesc(dy.shape(), f32);
        const Dims dil = dilationsMinus1(win.dilations);
        using Fwd = dnnl::pooling_v2_forward;
        using Bwd = dnnl::pooling_v2_backward;
        Fwd::primitive_desc fpd(Fwd::desc(dnnl::prop_kind::forward_training, alg, e.src, e.dst,
                                          win.strides, win.kernel, dil, win.padL, win.padR),
                                eng);
        Bwd::primitive_desc bpd(
            Bwd::desc(alg, e.src, e.dst, win.strides, win.kernel, dil, win.padL, win.padR), eng,
            fpd);
        if (max_) {
          e.fwd = Fwd(fpd);
          e.ws = memory(fpd.workspace_desc(), eng);
          e.scratchDst = memory(e.dst, eng);
        }
        e.bwd = Bwd(bpd);
        return Status();
      }));
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, x.shape()));
    if (e.direct) {
      maxPool2dBackward(x, dy, e.win, reluGrad_, *dx);
      return Status();
    }
    DW_RETURN_IF_ERROR(guarded("pooling backward", [&] {
      auto& be = cpuBackend(ctx.backend());
      auto& eng = be.engine();
      auto& s = be.stream();
      memory mdx(e.src, eng, dx->raw()), mdy(e.dst, eng, const_cast<void*>(dy.raw()));
      std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_SRC, mdx}};
      if (max_) {
        // Recompute where the maxima were: a forward pass that fills the workspace.
        memory mx(e.src, eng, const_cast<void*>(x.raw()));
        e.fwd.execute(
            s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DST, e.scratchDst}, {DNNL_ARG_WORKSPACE, e.ws}});
        args[DNNL_ARG_WORKSPACE] = e.ws;
      }
      e.bwd.execute(s, args);
      s.wait();
      return Status();
    }));
    if (reluGrad_) {
      // The fused Relu gradient: the pool's input is the Relu's output.
      const float* px = x.data<float>();
      float* pd = dx->data<float>();
      for (int64_t i = 0; i < x.size(); ++i) pd[i] = px[i] > 0 ? pd[i] : 0.0f;
    }
    return Status();
  }

 private:
  struct Entry {
    dnnl::primitive fwd, bwd;
    memory::desc src, dst;
    memory ws, scratchDst;
    Window win;
    bool direct = false;  // 2-D max pooling without dilation: maxPool2dBackward
  };

  static void maxPool2dBackward(const Tensor& x, const Tensor& dy, const Window& w, bool relu,
                                Tensor& dx) {
    MaxPool2d g;
    g.h = x.dim(2), g.w = x.dim(3), g.oh = dy.dim(2), g.ow = dy.dim(3);
    g.kh = w.kernel[0], g.kw = w.kernel[1], g.sh = w.strides[0], g.sw = w.strides[1];
    g.ph = w.padL[0], g.pw = w.padL[1];
    const int64_t planes = x.dim(0) * x.dim(1);
    const float* px = x.data<float>();
    const float* pg = dy.data<float>();
    float* pd = dx.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl)
      maxPoolBackwardPlane(g, px + pl * g.h * g.w, pg + pl * g.oh * g.ow, relu,
                           pd + pl * g.h * g.w);
  }
  Attributes attrs_;
  std::string op_;
  bool global_, max_, includePad_;
  bool reluGrad_;  // a Relu gradient fused by the session (fuseTrainingChains)
  std::map<std::vector<int64_t>, Entry> cache_;
};

}  // namespace
}  // namespace onednn

void addPoolGradKernels(KernelRegistry& r) {
  r.add(kOneDnnTable, "PoolGrad", 1, kMaxOpset, &makeKernel<onednn::PoolGrad>, true,
        dw::kGradDomain);
}

}  // namespace dw::engine
