// Convolution through cuDNN (forward, data and weight gradients), pooling and batch
// normalization (nn.cu) on the cuda backend.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include "engine/cuda/kernel_util.h"
#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/kernels/pool_geometry.h"
#include "ops/unary_table.h"
#include "nodes/catalogue.h"

namespace dw::engine::cuda {

namespace {

// ---- cuDNN descriptors, owned ----

struct TensorDesc {
  const Libs* l = nullptr;
  cudnnTensorDescriptor_t d = nullptr;
  ~TensorDesc() {
    if (d) l->cudnnDestroyTensorDescriptor(d);
  }
};
struct FilterDesc {
  const Libs* l = nullptr;
  cudnnFilterDescriptor_t d = nullptr;
  ~FilterDesc() {
    if (d) l->cudnnDestroyFilterDescriptor(d);
  }
};
struct ConvDesc {
  const Libs* l = nullptr;
  cudnnConvolutionDescriptor_t d = nullptr;
  ~ConvDesc() {
    if (d) l->cudnnDestroyConvolutionDescriptor(d);
  }
};

std::vector<int> toInts(const Shape& s) {
  return std::vector<int>(s.begin(), s.end());
}

// A packed NCHW (or NCDHW) tensor; 1-D convolutions get a height of 1 (cuDNN wants 4 dims).
Status setTensor(const Libs& l, TensorDesc& t, const Shape& shape,
                 cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  t.l = &l;
  if (!t.d) DW_CUDA_OK(check(l, l.cudnnCreateTensorDescriptor(&t.d), "tensor descriptor"));
  std::vector<int> dims = toInts(shape), strides(dims.size());
  int st = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = st;
    st *= std::max(dims[i], 1);
  }
  return check(l,
               l.cudnnSetTensorNdDescriptor(t.d, type, static_cast<int>(dims.size()), dims.data(),
                                            strides.data()),
               "tensor descriptor");
}

Shape as4d(Shape s) {
  if (s.size() == 3) s.insert(s.begin() + 2, 1);
  return s;
}

bool convSupported(const KernelInit& init, const std::vector<DType>& t) {
  if (t.empty() || t[0] != DType::kFloat) return false;
  auto l = libs();  // without cuDNN, convolutions run on the cpu
  if (!l || !(*l)->cudnn) return false;
  const std::string ap = init.attrs.getString("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID") return false;
  const auto pads = init.attrs.getInts("pads");
  for (size_t i = 0; i < pads.size() / 2; ++i)
    if (pads[i] != pads[i + pads.size() / 2]) return false;  // cuDNN pads symmetrically
  if (init.opType == "ConvGrad" && init.attrs.getInt("transposed", 0) != 0) return false;
  if (fusion::fusedOf(init.attrs).hasMaxPool()) return false;  // the cpu's oneDNN fusion
  return true;
}

// The algorithm cuDNN's timing chose for one direction of a convolution, with the math it was
// timed under (set on the descriptor before it runs) and its workspace; made on first use.
template <class Algo>
struct Choice {
  Algo algo{};
  cudnnMathType_t math{};
  size_t workspace = 0;
  bool made = false;
};

// What a convolution node's attributes and shapes fix: the cuDNN descriptors and the chosen
// algorithms, built once per input shape.
struct ConvPlan {
  Shape x, w, y;  // as the graph sees them
  TensorDesc xd, yd;
  FilterDesc wd;
  ConvDesc cd;
  Choice<cudnnConvolutionFwdAlgo_t> fwd;
  Choice<cudnnConvolutionBwdDataAlgo_t> data;
  Choice<cudnnConvolutionBwdFilterAlgo_t> filter;
};

class ConvBase : public Kernel {
 protected:
  explicit ConvBase(const KernelInit& init)
      : strides_(init.attrs.getInts("strides")),
        dilations_(init.attrs.getInts("dilations")),
        pads_(init.attrs.getInts("pads")),
        group_(init.attrs.getInt("group", 1)),
        valid_(init.attrs.getString("auto_pad", "NOTSET") == "VALID") {}

  // The plan for input x and weights w (cached by shape).
  Result<ConvPlan*> plan(CudaBackend& be, const Shape& x, const Shape& w) {
    auto key = std::make_pair(x, w);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    const Libs& l = be.libs();
    if (!be.ctx().cudnn) return Status::error("cuda: convolution needs cuDNN: " + l.cudnnWhy);
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
      return Status::error("Conv on cuda: X " + shapeToString(x) + " and W " + shapeToString(w) +
                           " must be 3- to 5-dimensional");
    const size_t sr = x.size() - 2;
    if (x[1] != w[1] * group_)
      return Status::error("Conv: X has " + std::to_string(x[1]) + " channels, W expects " +
                           std::to_string(w[1] * group_));
    auto p = std::make_unique<ConvPlan>();
    p->x = x;
    p->w = w;
    std::vector<int> pad(sr), str(sr), dil(sr);
    Shape y{x[0], w[0]};
    for (size_t i = 0; i < sr; ++i) {
      pad[i] = valid_ || pads_.empty() ? 0 : static_cast<int>(pads_[i]);
      str[i] = strides_.empty() ? 1 : static_cast<int>(strides_[i]);
      dil[i] = dilations_.empty() ? 1 : static_cast<int>(dilations_[i]);
      const int64_t span = static_cast<int64_t>(dil[i]) * (w[2 + i] - 1) + 1;
      const int64_t o = (x[2 + i] + 2 * pad[i] - span) / str[i] + 1;
      if (o < 1)
        return Status::error("Conv: the kernel " + shapeToString(w) + " does not fit the input " +
                             shapeToString(x));
      y.push_back(o);
    }
    p->y = y;
    if (sr == 1) {  // cuDNN needs at least two spatial dimensions
      pad.insert(pad.begin(), 0);
      str.insert(str.begin(), 1);
      dil.insert(dil.begin(), 1);
    }
    // Under precision bf16 cuDNN reads and writes bf16 copies (kernel outputs stay float) and
    // accumulates in float.
    const bool bf16 = be.math() == Math::kBf16;
    const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    DW_RETURN_IF_ERROR(setTensor(l, p->xd, as4d(x), type));
    DW_RETURN_IF_ERROR(setTensor(l, p->yd, as4d(y), type));
    p->wd.l = &l;
    DW_CUDA_OK(check(l, l.cudnnCreateFilterDescriptor(&p->wd.d), "filter descriptor"));
    const std::vector<int> wdims = toInts(as4d(w));
    DW_CUDA_OK(check(l,
                     l.cudnnSetFilterNdDescriptor(p->wd.d, type, CUDNN_TENSOR_NCHW,
                                                  static_cast<int>(wdims.size()), wdims.data()),
                     "filter descriptor"));
    p->cd.l = &l;
    DW_CUDA_OK(check(l, l.cudnnCreateConvolutionDescriptor(&p->cd.d), "convolution descriptor"));
    DW_CUDA_OK(check(l,
                     l.cudnnSetConvolutionNdDescriptor(p->cd.d, static_cast<int>(pad.size()),
                                                       pad.data(), str.data(), dil.data(),
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                     "convolution descriptor"));
    DW_CUDA_OK(check(l, l.cudnnSetConvolutionGroupCount(p->cd.d, static_cast<int>(group_)),
                     "convolution groups"));
    // fp32: full fp32 products, as on the cpu (no TF32). tf32 and bf16 let cuDNN time its
    // tensor-core algorithms too.
    DW_RETURN_IF_ERROR(setMath(l, *p, searchMath(be.math())));
    ConvPlan* raw = p.get();
    plans_.emplace(key, std::move(p));
    return raw;
  }

  // cuDNN times its algorithms on these buffers (once per shape) and we take the fastest that
  // is deterministic, so that runs repeat bit for bit. Under fp32 it must compute in full fp32
  // (FMA math: no TF32 rounding), to stay close to the cpu; tf32 and bf16 take tensor cores too,
  // but never a conversion to fp16. The buffers it writes are written again by the real call.
  template <class Perf>
  static const Perf* pick(const Perf* perf, int n, Math math, size_t room) {
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
          (math == Math::kFp32 ? perf[i].mathType == CUDNN_FMA_MATH
                               : perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) &&
          perf[i].memory <= room)
        return &perf[i];
    return nullptr;
  }

  // The room cuDNN times its algorithms in, held only while it times. Tensor-core algorithms on
  // NCHW tensors transpose their operands there, so a small cap hides the fastest ones (a 64 MiB
  // cap did for resnet18's 56x56 layers at batch 64 and the example CNN at batch 1024): a
  // quarter of the free memory, at most 2 GiB, less if that cannot be had.
  struct SearchSpace {
    void* p = nullptr;
    size_t bytes = 0;
    SearchSpace() {
      size_t freeB = 0, total = 0;
      if (cudaMemGetInfo(&freeB, &total) != cudaSuccess) cudaGetLastError();
      for (size_t want = std::min(size_t(2) << 30, freeB / 4); want >= (size_t(16) << 20);
           want /= 2) {
        if (cudaMalloc(&p, want) == cudaSuccess) {
          bytes = want;
          return;
        }
        cudaGetLastError();
        p = nullptr;
      }
    }
    ~SearchSpace() {
      if (p) cudaFree(p);
    }
    SearchSpace(const SearchSpace&) = delete;
    SearchSpace& operator=(const SearchSpace&) = delete;
  };

  // DEEPWIRE_CUDNN_LOG=1: each choice on stderr, with the candidates cuDNN timed.
  template <class Perf>
  static void logChoice(const char* what, const ConvPlan& p, cudnnMathType_t searched,
                        const Perf* perf, int n, const Perf* best, size_t room) {
    static const bool on = std::getenv("DEEPWIRE_CUDNN_LOG") != nullptr;
    if (!on) return;
    std::fprintf(stderr, "cuDNN %s X %s W %s, math %d, room %zu MiB: %s", what,
                 shapeToString(p.x).c_str(), shapeToString(p.w).c_str(), int(searched), room >> 20,
                 best ? "chose" : "none chosen");
    if (best)
      std::fprintf(stderr, " algo %d (%.3f ms, %zu MiB)", int(best->algo), best->time,
                   best->memory >> 20);
    std::fprintf(stderr, "; timed:");
    for (int i = 0; i < n && i < 6; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS)
        std::fprintf(stderr, " [algo %d math %d %s %.3f ms %zu MiB]", int(perf[i].algo),
                     int(perf[i].mathType),
                     perf[i].determinism == CUDNN_DETERMINISTIC ? "det" : "nondet", perf[i].time,
                     perf[i].memory >> 20);
    std::fprintf(stderr, "\n");
  }

  // What a cuDNN call reads for `t`: t itself, or under bf16 its bf16 copy in scratch.
  static Result<const void*> dnnInput(KernelContext& ctx, CudaBackend& be, const Tensor& t) {
    if (be.math() != Math::kBf16) return t.raw();
    Tensor* c = ctx.scratch(DType::kBFloat16, t.shape());
    if (!c) return ctx.status();
    launchToBf16(fp(t), c->raw(), t.size(), be.stream());
    DW_RETURN_IF_ERROR(launched("bf16 copy of a convolution input"));
    return static_cast<const void*>(c->raw());
  }
  // Where a cuDNN call writes `out`: out itself, or under bf16 a scratch buffer that fromDnn
  // then copies into it.
  static Result<void*> dnnOutput(KernelContext& ctx, CudaBackend& be, Tensor& out) {
    if (be.math() != Math::kBf16) return out.raw();
    Tensor* c = ctx.scratch(DType::kBFloat16, out.shape());
    if (!c) return ctx.status();
    return c->raw();
  }
  static Status fromDnn(CudaBackend& be, const void* written, Tensor& out) {
    if (written == out.raw()) return Status();
    launchFromBf16(written, out.data<float>(), out.size(), be.stream());
    return launched("float copy of a convolution result");
  }
  static cudnnMathType_t searchMath(Math m) {
    return m == Math::kFp32   ? CUDNN_FMA_MATH
           : m == Math::kBf16 ? CUDNN_TENSOR_OP_MATH
                              : CUDNN_DEFAULT_MATH;
  }
  static Status setMath(const Libs& l, ConvPlan& p, cudnnMathType_t m) {
    return check(l, l.cudnnSetConvolutionMathType(p.cd.d, m), "math type");
  }

  // The workspace for running `c`, which is made first if need be: `find(perf, &count,
  // workspace, bytes)` times the algorithms under the precision's math, then under FMA math if
  // that found no deterministic one (cuDNN lists some shapes' deterministic algorithms only
  // there: TF32 backward data of X [1024, 32, 14, 14] by W [64, 32, 3, 3] on an H100). Leaves
  // the descriptor set to the chosen algorithm's math. Callers hold the device context's mutex.
  template <class Perf, class Algo, class Find>
  static Result<void*> prepare(CudaBackend& be, ConvPlan& p, Choice<Algo>& c, const char* what,
                               Find find) {
    const Libs& l = be.libs();
    if (!c.made) {
      SearchSpace space;
      const std::string timing = std::string("timing ") + what + " algorithms";
      for (cudnnMathType_t m : {searchMath(be.math()), CUDNN_FMA_MATH}) {
        DW_RETURN_IF_ERROR(setMath(l, p, m));
        Perf perf[16];
        int n = 0;
        DW_CUDA_OK(check(l, find(perf, &n, space.p, space.bytes), timing.c_str()));
        const Perf* best = pick(perf, n, be.math(), space.bytes);
        logChoice(what, p, m, perf, n, best, space.bytes);
        if (best) {
          c = {best->algo, best->mathType, best->memory, true};
          break;
        }
        if (m == CUDNN_FMA_MATH)
          return Status::error("cuDNN offers no deterministic " + be.precision() + " " + what +
                               " algorithm for X " + shapeToString(p.x) + ", W " +
                               shapeToString(p.w));
      }
    }
    DW_RETURN_IF_ERROR(setMath(l, p, c.math));
    return workspace(be, c.workspace);
  }

  // The device's shared workspace, grown when a choice needs more (steady steps allocate
  // nothing). Callers hold the device context's mutex.
  static Result<void*> workspace(CudaBackend& be, size_t bytes) {
    if (bytes == 0) return static_cast<void*>(nullptr);
    auto& w = be.ctx().workspace;
    if (!w || w->capacity < bytes) {
      // Nodes recorded before this one hold the old workspace's address.
      if (be.recording())
        return Status::error("cuda: the convolution workspace would grow while a run is recorded");
      w.reset();
      auto b = be.allocate(bytes);
      if (!b) return b.status();
      w = std::move(*b);
    }
    return w->data;
  }

  std::vector<int64_t> strides_, dilations_, pads_;
  int64_t group_;
  bool valid_;
  std::map<std::pair<Shape, Shape>, std::unique_ptr<ConvPlan>> plans_;
};

class Conv : public ConvBase {
 public:
  explicit Conv(const KernelInit& init) : ConvBase(init) {
    const fusion::Fused f = fusion::fusedOf(init.attrs);
    bnEpsilon_ = f.bnEpsilon;
    if (f.activation.empty()) return;
    if (auto u = fusion::activationOf(f))
      act_ = u->fn, actParams_ = u->params;
    else
      fail("cuda Conv: " + u.message());
  }
  Status compute(KernelContext& ctx) override {
    auto& be = cudaBackend(ctx.backend());
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    auto p = plan(be, x.shape(), w.shape());
    if (!p) return p.status();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, (*p)->y));
    auto xin = dnnInput(ctx, be, x);
    auto win = xin ? dnnInput(ctx, be, w) : xin;
    if (!win) return win.status();
    auto yout = dnnOutput(ctx, be, *y);
    if (!yout) return yout.status();
    const Libs& l = be.libs();
    ConvPlan& P = **p;
    {
      std::lock_guard<std::mutex> lock(be.ctx().mutex);
      auto ws = prepare<cudnnConvolutionFwdAlgoPerf_t>(
          be, P, P.fwd, "convolution", [&](auto* perf, int* n, void* search, size_t room) {
            return l.cudnnFindConvolutionForwardAlgorithmEx(be.ctx().cudnn, P.xd.d, *xin, P.wd.d,
                                                            *win, P.cd.d, P.yd.d, *yout, 16, n,
                                                            perf, search, room);
          });
      if (!ws) return ws.status();
      const float one = 1.f, zero = 0.f;
      DW_CUDA_OK(
          check(l,
                l.cudnnConvolutionForward(be.ctx().cudnn, &one, P.xd.d, *xin, P.wd.d, *win, P.cd.d,
                                          P.fwd.algo, *ws, P.fwd.workspace, &zero, P.yd.d, *yout),
                "convolution"));
    }
    DW_RETURN_IF_ERROR(fromDnn(be, *yout, *y));
    // The epilogue: bias, or a folded BatchNormalization (inputs 3 to 6: its scale, B, mean and
    // var), then the fused activation, in one pass over y.
    const int64_t c = y->dim(1);
    const float* bias = nullptr;
    if (ctx.hasInput(2)) {
      if (ctx.input(2).size() != c)
        return Status::error("Conv: B has " + std::to_string(ctx.input(2).size()) +
                             " elements, expected " + std::to_string(c));
      bias = fp(ctx.input(2));
    }
    const float *scale = nullptr, *shift = bias;
    if (bnEpsilon_) {
      const char* names[] = {"scale", "B", "mean", "var"};
      for (int i = 3; i < 7; ++i)
        if (!ctx.hasInput(i) || ctx.input(i).size() != c)
          return Status::error(
              std::string("Conv: the BatchNormalization folded into it needs its ") + names[i - 3] +
              " with " + std::to_string(c) + " elements");
      Tensor* folded = ctx.scratch(DType::kFloat, {2 * c});
      if (!folded) return ctx.status();
      float* f = folded->data<float>();
      launchBatchNormFold(fp(ctx.input(3)), fp(ctx.input(4)), fp(ctx.input(5)), fp(ctx.input(6)),
                          bias, *bnEpsilon_, c, f, f + c, be.stream());
      scale = f;
      shift = f + c;
    }
    if (!scale && !shift && act_ == ops::UnaryFn::kCount) return Status();
    launchChannelEpilogue(y->data<float>(), y->dim(0), c,
                          y->size() / std::max<int64_t>(y->dim(0) * c, 1), scale, shift, act_,
                          actParams_, be.stream());
    return launched("Conv epilogue");
  }

 private:
  std::optional<float> bnEpsilon_;
  ops::UnaryFn act_ = ops::UnaryFn::kCount;
  ops::UnaryParams actParams_;
};

class ConvGrad : public ConvBase {
 public:
  explicit ConvGrad(const KernelInit& init) : ConvBase(init) {}
  Status compute(KernelContext& ctx) override {
    auto& be = cudaBackend(ctx.backend());
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    auto p = plan(be, x.shape(), w.shape());
    if (!p) return p.status();
    if (dy.shape() != (*p)->y)
      return Status::error("ConvGrad: dY has shape " + shapeToString(dy.shape()) + ", expected " +
                           shapeToString((*p)->y));
    const Libs& l = be.libs();
    ConvPlan& P = **p;
    const float one = 1.f, zero = 0.f;
    auto dyin = dnnInput(ctx, be, dy);
    if (!dyin) return dyin.status();
    if (ctx.wantsOutput(0)) {
      DW_ALLOC(dx, ctx.output(0, DType::kFloat, x.shape()));
      auto win = dnnInput(ctx, be, w);
      if (!win) return win.status();
      auto dxout = dnnOutput(ctx, be, *dx);
      if (!dxout) return dxout.status();
      std::lock_guard<std::mutex> lock(be.ctx().mutex);
      auto ws = prepare<cudnnConvolutionBwdDataAlgoPerf_t>(
          be, P, P.data, "backward-data", [&](auto* perf, int* n, void* search, size_t room) {
            return l.cudnnFindConvolutionBackwardDataAlgorithmEx(be.ctx().cudnn, P.wd.d, *win,
                                                                 P.yd.d, *dyin, P.cd.d, P.xd.d,
                                                                 *dxout, 16, n, perf, search, room);
          });
      if (!ws) return ws.status();
      DW_CUDA_OK(check(
          l,
          l.cudnnConvolutionBackwardData(be.ctx().cudnn, &one, P.wd.d, *win, P.yd.d, *dyin, P.cd.d,
                                         P.data.algo, *ws, P.data.workspace, &zero, P.xd.d, *dxout),
          "convolution backward data"));
      DW_RETURN_IF_ERROR(fromDnn(be, *dxout, *dx));
    }
    if (ctx.wantsOutput(1)) {
      DW_ALLOC(dw, ctx.output(1, DType::kFloat, w.shape()));
      auto xin = dnnInput(ctx, be, x);
      if (!xin) return xin.status();
      auto dwout = dnnOutput(ctx, be, *dw);
      if (!dwout) return dwout.status();
      std::lock_guard<std::mutex> lock(be.ctx().mutex);
      auto ws = prepare<cudnnConvolutionBwdFilterAlgoPerf_t>(
          be, P, P.filter, "backward-filter", [&](auto* perf, int* n, void* search, size_t room) {
            return l.cudnnFindConvolutionBackwardFilterAlgorithmEx(
                be.ctx().cudnn, P.xd.d, *xin, P.yd.d, *dyin, P.cd.d, P.wd.d, *dwout, 16, n, perf,
                search, room);
          });
      if (!ws) return ws.status();
      DW_CUDA_OK(check(l,
                       l.cudnnConvolutionBackwardFilter(be.ctx().cudnn, &one, P.xd.d, *xin, P.yd.d,
                                                        *dyin, P.cd.d, P.filter.algo, *ws,
                                                        P.filter.workspace, &zero, P.wd.d, *dwout),
                       "convolution backward filter"));
      DW_RETURN_IF_ERROR(fromDnn(be, *dwout, *dw));
    }
    if (ctx.wantsOutput(2)) {
      DW_ALLOC(db, ctx.output(2, DType::kFloat, {w.dim(0)}));
      const int64_t n = dy.dim(0), c = dy.dim(1), hw = dy.size() / std::max<int64_t>(n * c, 1);
      Tensor* partials = ctx.scratch(DType::kFloat, {c * channelSlices(c, n, hw)});
      if (!partials) return ctx.status();
      launchChannelSum(fp(dy), n, c, hw, partials->data<float>(), db->data<float>(), be.stream());
      return launched("Conv bias gradient");
    }
    return Status();
  }
};

// ---- Pooling: max, average and global average ----

// 2-D windows without dilation: what the pooling kernels of nn.cu compute.
bool plainWindow2d(const Attributes& a) {
  for (int64_t d : a.getInts("dilations"))
    if (d != 1) return false;
  return a.getInts("kernel_shape").size() == 2;
}

bool maxPoolSupported(const KernelInit& init, const std::vector<DType>& t) {
  if (t.empty() || t[0] != DType::kFloat) return false;
  if (init.opType == "MaxPool" && init.numOutputs > 1 && init.node && !init.node->output(1).empty())
    return false;  // Indices
  return init.attrs.getInt("storage_order", 0) == 0 && plainWindow2d(init.attrs);
}

bool avgPoolSupported(const KernelInit& init, const std::vector<DType>& t) {
  return !t.empty() && t[0] == DType::kFloat && plainWindow2d(init.attrs);
}

bool poolGradSupported(const KernelInit& init, const std::vector<DType>& t) {
  const std::string op = init.attrs.getString("op");
  if (op == "MaxPool") return maxPoolSupported(init, t);
  if (op == "AveragePool") return avgPoolSupported(init, t);
  return op == "GlobalAveragePool" && firstFloat(init, t);
}

Result<Pool2d> pool2d(const Attributes& a, const Shape& x) {
  if (x.size() != 4) return Status::error("2-D pooling on cuda: the input must be NCHW");
  auto g = poolGeometry(a, x, a.getInts("kernel_shape"));
  if (!g) return g.status();
  Pool2d p{};
  p.planes = x[0] * x[1];
  p.h = x[2];
  p.w = x[3];
  p.oh = g->out[0];
  p.ow = g->out[1];
  p.kh = g->kernel[0];
  p.kw = g->kernel[1];
  p.sh = g->strides[0];
  p.sw = g->strides[1];
  p.ph = g->padL[0];
  p.pw = g->padL[1];
  p.pb = g->padR[0];
  p.pr = g->padR[1];
  p.includePad = a.getInt("count_include_pad", 0) != 0;
  return p;
}

// MaxPool and AveragePool.
class Pool : public Kernel {
 public:
  explicit Pool(const KernelInit& init) : attrs_(init.attrs), max_(init.opType == "MaxPool") {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto p = pool2d(attrs_, x.shape());
    if (!p) return p.status();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, {x.dim(0), x.dim(1), p->oh, p->ow}));
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    if (max_)
      launchMaxPool(*p, fp(x), y->data<float>(), s);
    else
      launchAvgPool(*p, fp(x), y->data<float>(), s);
    return launched(max_ ? "MaxPool" : "AveragePool");
  }

 private:
  Attributes attrs_;
  bool max_;
};

// The mean over every axis after the first two, of any rank.
class GlobalAveragePool : public Kernel {
 public:
  explicit GlobalAveragePool(const KernelInit&) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 3)
      return Status::error("GlobalAveragePool: the input " + shapeToString(x.shape()) +
                           " needs a spatial axis (rank 3 or more)");
    DW_RETURN_IF_ERROR(rankOk(x.shape(), "GlobalAveragePool"));
    Shape out(x.rank(), 1);
    out[0] = x.dim(0);
    out[1] = x.dim(1);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    std::vector<bool> reduced(x.rank(), true);
    reduced[0] = reduced[1] = false;
    reduceInto(cudaBackend(ctx.backend()), ReduceOp::kMean, x, reduced, y->data<float>());
    return launched("GlobalAveragePool");
  }
};

class PoolGrad : public Kernel {
 public:
  explicit PoolGrad(const KernelInit& init)
      : attrs_(init.attrs),
        op_(init.attrs.getString("op")),
        reluGrad_(fusion::fusedOf(init.attrs).reluGrad) {
    if (reluGrad_ && op_ != "MaxPool") fail("a fused Relu gradient needs max pooling");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const cudaStream_t s = cudaBackend(ctx.backend()).stream();
    auto mismatch = [&] {
      return Status::error("PoolGrad (" + op_ + "): dY has shape " + shapeToString(dy.shape()) +
                           ", which does not match the pooling of " + shapeToString(x.shape()));
    };
    if (op_ == "GlobalAveragePool") {
      if (x.rank() < 3) return mismatch();
      const int64_t planes = x.dim(0) * x.dim(1);
      if (dy.size() != planes) return mismatch();
      DW_ALLOC(dx, ctx.output(0, DType::kFloat, x.shape()));
      launchSpreadMean(fp(dy), planes, x.size() / std::max<int64_t>(planes, 1), dx->data<float>(),
                       s);
      return launched("GlobalAveragePool gradient");
    }
    auto p = pool2d(attrs_, x.shape());
    if (!p) return p.status();
    if (dy.size() != p->planes * p->oh * p->ow) return mismatch();
    DW_ALLOC(dx, ctx.output(0, DType::kFloat, x.shape()));
    if (op_ == "MaxPool")
      launchMaxPoolGrad(*p, fp(x), fp(dy), reluGrad_, dx->data<float>(), s);
    else
      launchAvgPoolGrad(*p, fp(dy), dx->data<float>(), s);
    return launched("pooling gradient");
  }

 private:
  Attributes attrs_;
  std::string op_;
  bool reluGrad_;  // a Relu gradient fused by the session (fuseTrainingChains)
};

// ---- Batch normalization ----

struct Channels {
  int64_t n, c, hw;
};
Result<Channels> channelsOf(const Tensor& x) {
  if (x.rank() < 2) return Status::error("BatchNormalization: X needs rank >= 2");
  return Channels{x.dim(0), x.dim(1), x.size() / std::max<int64_t>(x.dim(0) * x.dim(1), 1)};
}

Status checkPerChannel(const Tensor& t, int64_t c, const char* what) {
  if (t.size() != c)
    return Status::error(std::string("BatchNormalization: ") + what + " has " +
                         std::to_string(t.size()) + " elements, X has " + std::to_string(c) +
                         " channels");
  return Status();
}

// The window of a max pooling fused into the normalization (fusion/training_chains.cpp) over
// x's planes.
Result<Pool2d> fusedPool2d(const fusion::Fused& f, const Shape& x) {
  auto g = fusion::fusedMaxPool(f.maxPool, x);
  if (!g) return g.status();
  Pool2d p{};
  p.planes = x[0] * x[1];
  p.h = g->h, p.w = g->w, p.oh = g->oh, p.ow = g->ow, p.kh = g->kh, p.kw = g->kw;
  p.sh = g->sh, p.sw = g->sw, p.ph = g->ph, p.pw = g->pw, p.pb = g->pb, p.pr = g->pr;
  return p;
}
static_assert(kNoWinner == fusion::kNoWinner);

// Training's normalization with the batch statistics. The session may fuse a Relu and a max
// pooling after it (fuseTrainingChains): Y is then the pooled output and output 5 the windows'
// winners for the fused gradient, and the full-size activation is never written.
class BatchNormTraining : public Kernel {
 public:
  explicit BatchNormTraining(const KernelInit& init)
      : eps_(init.attrs.getFloat("epsilon", 1e-5f)),
        momentum_(init.attrs.getFloat("momentum", 0.9f)),
        fused_(fusion::fusedOf(init.attrs)),
        relu_(fused_.activation == "Relu") {
    if (!fused_.activation.empty() && !relu_)
      fail("cuda BatchNormalizationTraining cannot apply fused " + fused_.activation);
    if (!fused_.conv.empty() || !fused_.blockedInputs.empty())
      fail("cuda BatchNormalizationTraining: fused convolutions and blocked layouts are cpu-only");
    if (fused_.hasMaxPool() && init.numOutputs < 6)
      fail("a fused max pooling needs the winners output");
  }
  Status compute(KernelContext& ctx) override {
    auto& be = cudaBackend(ctx.backend());
    const Tensor& x = ctx.input(0);
    auto ch = channelsOf(x);
    if (!ch) return ch.status();
    const int64_t c = ch->c;
    for (int i = 1; i < 5; ++i)
      DW_RETURN_IF_ERROR(checkPerChannel(ctx.input(i), c, i == 1 ? "scale" : "a statistic"));
    std::optional<Pool2d> pool;
    if (fused_.hasMaxPool()) {
      auto p = fusedPool2d(fused_, x.shape());
      if (!p) return p.status();
      pool = *p;
    }
    const Shape yShape = pool ? Shape{ch->n, c, pool->oh, pool->ow} : x.shape();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, yShape));
    DW_ALLOC(rm, ctx.output(1, DType::kFloat, {c}));
    DW_ALLOC(rv, ctx.output(2, DType::kFloat, {c}));
    DW_ALLOC(mean, ctx.output(3, DType::kFloat, {c}));
    DW_ALLOC(var, ctx.output(4, DType::kFloat, {c}));
    Tensor* partials = ctx.scratch(DType::kFloat, {3 * c * channelSlices(c, ch->n, ch->hw)});
    if (!partials) return ctx.status();
    launchChannelStats(fp(x), ch->n, c, ch->hw, partials->data<float>(), mean->data<float>(),
                       var->data<float>(), be.stream());
    const float *sc = fp(ctx.input(1)), *b = fp(ctx.input(2));
    if (pool) {
      DW_ALLOC(won, ctx.output(5, DType::kUInt8, yShape));
      launchBatchNormMaxPool(fp(x), *pool, c, mean->data<float>(), var->data<float>(), sc, b, eps_,
                             relu_, y->data<float>(), won->data<uint8_t>(), be.stream());
    } else {
      launchBatchNormApply(fp(x), ch->n, c, ch->hw, mean->data<float>(), var->data<float>(), sc, b,
                           eps_, relu_, y->data<float>(), be.stream());
    }
    launchRunningStats(fp(ctx.input(3)), fp(ctx.input(4)), mean->data<float>(), var->data<float>(),
                       c, momentum_, rm->data<float>(), rv->data<float>(), be.stream());
    return launched("BatchNormalizationTraining");
  }

 private:
  float eps_, momentum_;
  fusion::Fused fused_;
  bool relu_;  // a Relu on the output, fused by the session
};

bool bnInferenceSupported(const KernelInit& init, const std::vector<DType>& t) {
  return floatInputs(init, t) && init.attrs.getInt("training_mode", 0) == 0 && init.numOutputs == 1;
}

class BatchNormInference : public Kernel {
 public:
  explicit BatchNormInference(const KernelInit& init) : eps_(init.attrs.getFloat("epsilon")) {}
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    auto ch = channelsOf(x);
    if (!ch) return ch.status();
    for (int i = 1; i < 5; ++i)
      DW_RETURN_IF_ERROR(checkPerChannel(ctx.input(i), ch->c, "a per-channel input"));
    DW_ALLOC(y, ctx.output(0, DType::kFloat, x.shape()));
    launchBatchNormApply(fp(x), ch->n, ch->c, ch->hw, fp(ctx.input(3)), fp(ctx.input(4)),
                         fp(ctx.input(1)), fp(ctx.input(2)), eps_, /*relu=*/false, y->data<float>(),
                         cudaBackend(ctx.backend()).stream());
    return launched("BatchNormalization");
  }

 private:
  float eps_;
};

// The gradient of training's normalization (or, with global_stats, of constant statistics).
// With a max pooling fused in, dY is the pooled output's gradient and input 6 the winners.
class BatchNormGrad : public Kernel {
 public:
  explicit BatchNormGrad(const KernelInit& init)
      : eps_(init.attrs.getFloat("epsilon", 1e-5f)),
        global_(init.attrs.getInt("global_stats", 0) != 0),
        fused_(fusion::fusedOf(init.attrs)) {
    if (!fused_.conv.empty() || !fused_.blockedInputs.empty() || !fused_.blockedOutputs.empty())
      fail("cuda BatchNormalizationGrad: fused convolutions and blocked layouts are cpu-only");
    if (fused_.hasMaxPool() && global_) fail("a fused max pooling needs the batch statistics");
  }
  Status compute(KernelContext& ctx) override {
    auto& be = cudaBackend(ctx.backend());
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    auto ch = channelsOf(x);
    if (!ch) return ch.status();
    const int64_t c = ch->c;
    std::optional<Pool2d> pool;
    if (fused_.hasMaxPool()) {
      auto p = fusedPool2d(fused_, x.shape());
      if (!p) return p.status();
      pool = *p;
      const Shape pooled{ch->n, c, pool->oh, pool->ow};
      if (dy.shape() != pooled || !ctx.hasInput(6) || ctx.input(6).dtype() != DType::kUInt8 ||
          ctx.input(6).shape() != pooled)
        return Status::error(
            "BatchNormalizationGrad with a fused max pooling: dY and the winners (its 7th "
            "input, uint8) must have the pooled shape " +
            shapeToString(pooled));
    } else if (dy.shape() != x.shape()) {
      return Status::error("BatchNormalizationGrad: dY and X must have the same shape");
    }
    for (int i = 2; i < 5; ++i)
      DW_RETURN_IF_ERROR(checkPerChannel(ctx.input(i), c, "a per-channel input"));
    const bool needSums = ctx.wantsOutput(1) || ctx.wantsOutput(2) || !global_;
    Tensor* ds = ctx.output(1, DType::kFloat, {c});
    Tensor* db = ctx.output(2, DType::kFloat, {c});
    if (!ds || !db) return ctx.status();
    if (pool) {
      Tensor* dx = nullptr;
      if (ctx.wantsOutput(0) && !(dx = ctx.output(0, DType::kFloat, x.shape())))
        return ctx.status();
      Tensor* partials =
          ctx.scratch(DType::kFloat, {2 * c * channelSlices(c, ch->n, pool->oh * pool->ow)});
      if (!partials) return ctx.status();
      launchBatchNormMaxPoolGrad(fp(dy), ctx.input(6).data<uint8_t>(), fp(x), *pool, c,
                                 fp(ctx.input(3)), fp(ctx.input(4)), fp(ctx.input(2)), eps_,
                                 partials->data<float>(), ds->data<float>(), db->data<float>(),
                                 dx ? dx->data<float>() : nullptr, be.stream());
      return launched("BatchNormalizationGrad (max pooling fused)");
    }
    if (needSums) {
      Tensor* partials = ctx.scratch(DType::kFloat, {2 * c * channelSlices(c, ch->n, ch->hw)});
      if (!partials) return ctx.status();
      launchBatchNormGradSums(fp(dy), fp(x), ch->n, c, ch->hw, fp(ctx.input(3)), fp(ctx.input(4)),
                              eps_, partials->data<float>(), ds->data<float>(), db->data<float>(),
                              be.stream());
    }
    if (ctx.wantsOutput(0)) {
      DW_ALLOC(dx, ctx.output(0, DType::kFloat, x.shape()));
      launchBatchNormGradInput(fp(dy), fp(x), ch->n, c, ch->hw, fp(ctx.input(3)), fp(ctx.input(4)),
                               fp(ctx.input(2)), eps_, ds->data<float>(), db->data<float>(),
                               global_, dx->data<float>(), be.stream());
    }
    return launched("BatchNormalizationGrad");
  }

 private:
  float eps_;
  bool global_;
  fusion::Fused fused_;
};

}  // namespace

void addNnKernels(KernelRegistry& r) {
  add<Conv>(r, "Conv", &convSupported);
  add<ConvGrad>(r, "ConvGrad", &convSupported, kGradDomain);
  add<Pool>(r, "MaxPool", &maxPoolSupported);
  add<Pool>(r, "AveragePool", &avgPoolSupported);
  add<GlobalAveragePool>(r, "GlobalAveragePool", &firstFloat);
  add<PoolGrad>(r, "PoolGrad", &poolGradSupported, kGradDomain);
  add<BatchNormTraining>(r, "BatchNormalizationTraining", &floatInputs, kGradDomain);
  add<BatchNormInference>(r, "BatchNormalization", &bnInferenceSupported);
  add<BatchNormGrad>(r, "BatchNormalizationGrad", &firstFloat, kGradDomain);
}

}  // namespace dw::engine::cuda
