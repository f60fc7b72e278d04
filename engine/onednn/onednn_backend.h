// Internal: the oneDNN-backed backends. oneDNN types stay inside engine/onednn/.
#pragma once

#include <deque>
#include <dnnl.hpp>

#include "engine/backend.h"
#include "engine/kernel.h"
#include "engine/tensor.h"
#include "ops/unary_table.h"

namespace dw::engine::onednn {

class CpuBackend;

// A backend whose kernels run oneDNN primitives on its engine and stream. Tensors always live in
// host memory; kernels hand them to primitives through Bindings, which is what differs between a
// CPU engine (the host buffer itself) and a device engine (a device buffer and copies).
class DnnlBackend : public Backend {
 public:
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }
  // Whether oneDNN memory on this engine may wrap a host pointer: false for a GPU engine (and the
  // emulated device path of tests), where every bound tensor is copied.
  bool hostMemory() const { return !hostEngine_; }
  // Precision bf16: kernels build their compute-bound primitives on bf16 operands.
  bool bf16() const { return bf16_; }
  std::string precision() const override { return bf16_ ? "bf16" : "fp32"; }
  size_t deviceAllocations() const override { return deviceAllocations_; }
  std::string kernelTable() const override { return kOneDnnTable; }
  // The CPU backend of kernels that only run on a CPU engine: this one, or a GPU's companion.
  virtual CpuBackend& cpu() = 0;

 protected:
  // `hostEngine`: the CPU engine wrapping host tensors for the copies to and from a device
  // engine; empty where the engine uses host memory in place.
  DnnlBackend(dnnl::engine engine, dnnl::engine hostEngine, bool bf16)
      : engine_(std::move(engine)),
        stream_(engine_),
        hostEngine_(std::move(hostEngine)),
        bf16_(bf16) {}

 private:
  friend class Bindings;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::engine hostEngine_;
  bool bf16_;
  size_t deviceAllocations_ = 0;
};

class CpuBackend : public DnnlBackend {
 public:
  explicit CpuBackend(int threads, bool bf16 = false);
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  bool convChains() const override;  // conv_chain.cpp
  int threads() const override { return threads_; }
  void applyThreads() const override;
  CpuBackend& cpu() override { return *this; }

 private:
  int threads_;
};

// The oneDNN GPU engine (OpenCL; oneDNN supports Intel GPUs only). It runs the kernels of the
// onednn table, which take engine and stream from the backend they run on. Kernels written
// for a CPU engine only (the training gradients of conv_grad.cpp, pool_grad.cpp,
// batch_norm_training.cpp and rnn_grad.cpp, the direct single-channel convolution) run on a
// companion CpuBackend through cpuBackend(); as tensors live in host memory, mixing them with GPU
// kernels in one graph needs no transfers of its own. Precision is fp32 only.
class GpuBackend : public DnnlBackend {
 public:
  // `emulated` (tests only): a CPU engine stands in for the GPU, and every bound tensor goes
  // through an engine-allocated buffer and the explicit copies exactly as on a GPU.
  GpuBackend(size_t index, int threads, bool emulated);
  std::string name() const override { return "gpu"; }
  std::string description() const override { return description_; }
  int threads() const override { return cpu_.threads(); }
  void applyThreads() const override { cpu_.applyThreads(); }
  CpuBackend& cpu() override { return cpu_; }

 private:
  GpuBackend(dnnl::engine engine, size_t index, int threads, bool emulated);
  CpuBackend cpu_;
  std::string description_;
};

// The backend a oneDNN kernel runs on: its engine, stream and precision.
DnnlBackend& dnnlBackend(Backend& b);
// The CPU backend of kernels that need a CPU engine (under gpu: the companion).
CpuBackend& cpuBackend(Backend& b);

// The one way kernels hand host tensors to primitives on a backend's engine. A CPU engine reads
// and writes the host buffer in place (no copy). On a device engine each (slot, descriptor) gets
// a device buffer, allocated on first use and kept, so running the same shapes again allocates
// nothing: in() enqueues the copy from the host, finish() the copies back of what out() bound.
// The copies are reorders between a CPU engine wrapping the host buffer and the device, on the
// backend's in-order stream, so they need no synchronization beyond finish()'s wait. Descriptors
// must be plain (user layouts): their size is what the host buffer holds. A kernel keeps one
// Bindings for all its runs, and calls discard() where a run fails before finish().
class Bindings {
 public:
  // `constant`: `host` is an initializer no feed overrides (KernelInit::constantInputs), copied
  // again only when the slot last held other data.
  dnnl::memory in(DnnlBackend& be, int slot, const dnnl::memory::desc& d, const void* host,
                  bool constant = false);
  dnnl::memory out(DnnlBackend& be, int slot, const dnnl::memory::desc& d, void* host);
  // Copies outputs back and waits for the stream: call once after the primitives of a run.
  void finish(DnnlBackend& be);
  // After a failed run: drops its copies back, whose host buffers may be gone by the next run.
  void discard() { pending_.clear(); }

 private:
  struct Buffer {
    int slot;
    dnnl::memory::desc desc;
    dnnl::memory device;
    dnnl::reorder up, down;
    const void* uploaded = nullptr;  // the constant input it holds
  };
  Buffer& buffer(DnnlBackend& be, int slot, const dnnl::memory::desc& d);
  std::deque<Buffer> buffers_;
  std::vector<std::pair<Buffer*, dnnl::memory>> pending_;  // outputs with their host memory
};

// Runs oneDNN and converts its exceptions into a Status naming the primitive (or op); a run that
// fails drops what `bind` was to copy back.
template <class F>
Status guarded(const std::string& what, Bindings* bind, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    if (bind) bind->discard();
    return Status::error("oneDNN " + what + ": " + e.what());
  }
}
template <class F>
Status guarded(const std::string& what, F&& f) {
  return guarded(what, nullptr, std::forward<F>(f));
}

// The shapes of a node's inputs as a primitive-cache key (absent or non-tensor inputs marked).
std::vector<int64_t> inputShapesKey(const KernelContext& ctx);

// What the compute-bound primitives (convolution, deconvolution, matmul and their backward
// passes) read: bf16 under precision bf16, else f32. Their outputs stay f32 either way.
inline dnnl::memory::data_type computeType(Backend& b) {
  return dnnlBackend(b).bf16() ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// The type a convolution or deconvolution (forward and backward) computes in. Image-input
// convolutions (a few input channels per group) stay f32 under bf16 too: their reduction is too
// short for AMX tiles, and oneDNN's bf16 kernels for them ran slower than f32 here while adding
// the conversion of the input.
inline dnnl::memory::data_type convComputeType(Backend& b, int64_t icPerGroup, int64_t ocPerGroup) {
  if (icPerGroup <= 4 || ocPerGroup <= 4) return dnnl::memory::data_type::f32;
  return computeType(b);
}

// The reference table's kernel of the same op, for dtypes and attribute combinations a oneDNN
// kernel hands over; an error where there is none, or where it refuses the node (naming the
// attribute it cannot take).
Result<std::unique_ptr<Kernel>> referenceKernel(const KernelInit& init);
// That kernel, made on first use, for a oneDNN kernel to hand its node over to.
class ReferenceFallback {
 public:
  Status compute(const KernelInit& init, KernelContext& ctx) {
    if (!kernel_) {
      auto k = referenceKernel(init);
      if (!k) return k.status();
      kernel_ = std::move(*k);
    }
    return kernel_->compute(ctx);
  }

 private:
  std::unique_ptr<Kernel> kernel_;
};

// conv_chain.cpp: the kernel of a Conv carrying a chain of convolutions (fusion::Fused::chain).
Result<std::unique_ptr<Kernel>> makeConvChain(const KernelInit& init);
// An inference BatchNormalization folded into the convolution before it: per output channel c,
// wOut = w * k and bOut = (bias - mean) * k + shift with k = scale / sqrt(var + epsilon), over
// `per` weights a channel (bias may be null).
void foldBatchNorm(const float* w, const float* bias, const float* scale, const float* shift,
                   const float* mean, const float* var, float epsilon, int64_t oc, int64_t per,
                   float* wOut, float* bOut);

inline dnnl::memory::dims toDims(const Shape& s) {
  return dnnl::memory::dims(s.begin(), s.end());
}
dnnl::memory::data_type toDnnl(DType t);  // undef where oneDNN lacks the type
// oneDNN's algorithm for an eltwise call of ops/unary_table.h (not Eltwise::kNone).
dnnl::algorithm eltwiseAlgorithm(ops::Eltwise e);
// Plain row-major descriptor for a tensor's shape (scalars become {1}).
dnnl::memory::desc plainDesc(const Shape& s, dnnl::memory::data_type dt);
dnnl::memory::format_tag plainTag(size_t rank);

// Where a convolution's output or its gradient feeds only kernels that know it (the training
// CNN block Conv -> BatchNormalization, see the session's markBlockedLayouts), the tensor is
// handed over in oneDNN's nChw16c layout instead of plain NCHW, which saves the reorder of a
// large activation on each side. The session lists such inputs and outputs by index in the
// fusion::Fused (blockedInputs / blockedOutputs); the tensor keeps its NCHW shape and
// element count (C is a multiple of 16), its elements lying at [n][c / 16][h][w][c % 16].
constexpr int64_t kChannelBlock = 16;
bool blockedShapeOk(const Shape& s);             // 4-D with C a multiple of kChannelBlock
dnnl::memory::desc blockedDesc(const Shape& s);  // f32 nChw16c

// Moves data between a kernel's plain f32 tensors and the type and layout a primitive chose,
// through a scratch memory. The reorder primitives are built once per layout pair: creating one
// per call cost more than running it on the small tensors of an MLP step. `user` is memory on
// `eng`: what Bindings bound for a tensor, or memory the kernel owns.
class Reorderer {
 public:
  // `user` as `want`: `user` itself when the descriptors match, else the scratch after a reorder.
  dnnl::memory in(const dnnl::memory& user, const dnnl::memory::desc& want, dnnl::engine& eng,
                  dnnl::stream& s);
  // Where a primitive writes a `want`-shaped result destined for `user`.
  dnnl::memory out(const dnnl::memory& user, const dnnl::memory::desc& want, dnnl::engine& eng);
  // Copies `from` (what out() returned, once written) into `user` when they differ.
  void back(dnnl::stream& s, dnnl::memory& from, dnnl::memory& user);
  dnnl::memory scratch;

 private:
  dnnl::reorder toPrim_, backPrim_;
  dnnl::memory::desc toFrom_, backFrom_, backTo_;
};

// 2-D convolution of an N x 1 x H x W input with OC x 1 x KH x KW weights on plain NCHW
// (single_channel_conv.cpp): strides s, left pads p, dilations d (1 = none).
struct SingleChannelConv {
  int64_t n, oc, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};
// What a fused inference Conv(+BatchNormalization, folded into w and b)+Relu+MaxPool applies
// after the convolution, plane by plane while it is still in cache: the full-size convolution
// output (the largest tensor of an image CNN) is then never written out.
struct SingleChannelEpilogue {
  bool relu = false;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1;  // max pool window and strides (no padding); kh 0: none
  int64_t oh = 0, ow = 0;                  // pooled plane
};
// y = conv(x, w) + b (b may be null), then `ep` where given (y is then the pooled output).
void singleChannelConvForward(const SingleChannelConv& g, const float* x, const float* w,
                              const float* b, float* y, const SingleChannelEpilogue* ep = nullptr);
// dW and dB from dY; dX is not computed (an image input has no gradient). Each image's sums
// are kept apart and added in image order, so the result does not depend on the thread count.
void singleChannelConvWeightGrad(const SingleChannelConv& g, const float* x, const float* dy,
                                 float* dw, float* db);

// With stride 1 every image is first copied into KW zero-padded planes, one per kernel column,
// shifted by that column's offset (single_channel_conv.cpp): `ok` is false for other strides.
struct SingleChannelShifted {
  bool ok = false;
  int64_t rows = 0;           // input rows the taps reach: oh + (kh - 1) * dh
  int64_t len = 0;            // outputs per plane: oh * ow
  int64_t span = 0;           // len rounded up to whole forward blocks
  int64_t copy = 0;           // floats per shifted plane, with room for the blocks' overrun
  std::vector<int64_t> offs;  // each tap's offset into the shifted planes
};

// The per-image work of a SingleChannelConv, for kernels that run it inside their own loops:
// the training CNN block fuses its first convolution into the BatchNormalization after it
// (batch_norm_training.cpp), recomputing the activation wherever it is read instead of storing it.
// singleChannelConvForward and singleChannelConvWeightGrad run the same functions, so fused and
// unfused results are bit-identical.
class SingleChannelImages {
 public:
  explicit SingleChannelImages(const SingleChannelConv& g);
  const SingleChannelConv& geometry() const { return g_; }
  int64_t taps() const { return g_.kh * g_.kw; }
  // Floats one prepared image takes.
  int64_t preparedSize() const;
  // One h x w image in the form forward() and weightGrad() read: `buf` (preparedSize() floats)
  // filled, or the image itself where it needs no preparation.
  const float* prepare(const float* image, float* buf) const;
  // Output channels [o, o + count) of a prepared image into planes `stride` floats apart, oh * ow
  // floats each (nothing is written between them). b may be null.
  void forward(const float* xp, const float* w, const float* b, int64_t o, int64_t count,
               float* out, int64_t stride) const;
  // For the channels c < count of dY planes (oh * ow floats each, contiguous from dy):
  // dwdb[c * (taps + 1) + t] = sum(dY * the input under tap t), then at index taps sum(dY).
  void weightGrad(const float* xp, const float* dy, int64_t count, double* dwdb) const;

 private:
  SingleChannelConv g_;
  SingleChannelShifted p_;
};
// Tests: true makes the direct loops take their portable path even where AVX-512 is available,
// so that both paths are checked on one machine.
void singleChannelConvGenericOnly(bool on);

// Winograd F(4x4, 3x3) convolution (winograd.cpp): 3 x 3 filters, stride 1, one pixel of zero
// padding on every side, n images of c channels (h x w) to k channels of the same size, each
// side in nChw16c or NHWC. c and k are multiples of kChannelBlock.
struct Winograd43 {
  int64_t n, c, k, h, w;
  bool nhwcIn = false, nhwcOut = false;  // x, and y with the residual, in NHWC
  // Whether a convolution's window (a 2-D kernel, strides, dilations with 1 = none, and pads),
  // the CPU, the channel counts and the plane's size (an image's work within 4 MiB) allow it.
  static bool usable(const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                     const std::vector<int64_t>& dilations, const std::vector<int64_t>& padL,
                     const std::vector<int64_t>& padR, int64_t c, int64_t k, int64_t h, int64_t w);
  int64_t weightsSize() const { return 36 * c * k; }
  // The transformed filters the convolution reads: from weights [k][c][3][3], or with `flip`
  // from [c][k][3][3] turned by 180 degrees, which makes run() the data gradient of a
  // convolution of k to c channels with those weights.
  void transformWeights(const float* w, bool flip, float* u) const;
  // y = conv(x) + bias + residual (bias and residual may be null), then max(y, 0) with `relu`.
  void run(const float* x, const float* u, const float* bias, const float* residual, bool relu,
           float* y) const;
};
// Tests: true makes every batch take Winograd43's grouped schedule (images' tiles together,
// threads sharing each stage), which otherwise only small batches and wide layers take.
void winogradGroupedOnly(bool on);

// Max pooling of one H x W plane into OH x OW (window kh x kw, strides sh/sw, top/left padding
// ph/pw; padding never wins the max), shared by the MaxPool kernel and the fused conv epilogue.
void maxPoolPlane(const float* in, int64_t H, int64_t W, float* out, int64_t OH, int64_t OW,
                  int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw);

// "amx", "avx512_bf16" or "" where oneDNN has no native bf16 kernels on this CPU.
std::string nativeBf16();

}  // namespace dw::engine::onednn
