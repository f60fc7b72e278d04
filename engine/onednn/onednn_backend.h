// Internal: the oneDNN-backed CPU backend. oneDNN types stay inside engine/onednn/.
#pragma once

#include <dnnl.hpp>

#include "engine/backend.h"
#include "engine/kernel.h"
#include "engine/tensor.h"

namespace dw::engine::onednn {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads, bool bf16 = false);
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  int threads() const override { return threads_; }
  std::string precision() const override { return bf16_ ? "bf16" : "fp32"; }
  // Precision bf16: kernels build their compute-bound primitives on bf16 operands.
  bool bf16() const { return bf16_; }
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

 private:
  int threads_;
  bool bf16_;
  dnnl::engine engine_;
  dnnl::stream stream_;
};

// The oneDNN engine of whatever backend a kernel runs on (a CPU engine today).
CpuBackend& cpuBackend(Backend& b);

// What the compute-bound primitives (convolution, deconvolution, matmul and their backward
// passes) read: bf16 under precision bf16, else f32. Their outputs stay f32 either way.
inline dnnl::memory::data_type computeType(Backend& b) {
  return cpuBackend(b).bf16() ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// The type a convolution or deconvolution (forward and backward) computes in. Image-input
// convolutions (a few input channels per group) stay f32 under bf16 too: their reduction is too
// short for AMX tiles, and oneDNN's bf16 kernels for them ran slower than f32 here while adding
// the conversion of the input.
inline dnnl::memory::data_type convComputeType(Backend& b, int64_t icPerGroup, int64_t ocPerGroup) {
  if (icPerGroup <= 4 || ocPerGroup <= 4) return dnnl::memory::data_type::f32;
  return computeType(b);
}

// The plain C++ ("host") kernel of the same op, for dtypes and attribute combinations a oneDNN
// kernel hands over; nullptr where there is none.
std::unique_ptr<Kernel> hostKernel(const KernelInit& init);

inline dnnl::memory::dims toDims(const Shape& s) {
  return dnnl::memory::dims(s.begin(), s.end());
}
dnnl::memory::data_type toDnnl(DType t);  // undef where oneDNN lacks the type
// Plain row-major descriptor for a tensor's shape (scalars become {1}).
dnnl::memory::desc plainDesc(const Shape& s, dnnl::memory::data_type dt);
dnnl::memory::format_tag plainTag(size_t rank);

// Moves data between a kernel's plain f32 tensors and the type and layout a primitive chose,
// through a scratch memory. The reorder primitives are built once per layout pair: creating one
// per call cost more than running it on the small tensors of an MLP step.
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
// dW and dB from dY; dX is not computed (an image input has no gradient).
void singleChannelConvWeightGrad(const SingleChannelConv& g, const float* x, const float* dy,
                                 float* dw, float* db);

// Max pooling of one H x W plane into OH x OW (window kh x kw, strides sh/sw, top/left padding
// ph/pw; padding never wins the max), shared by the MaxPool kernel and the fused conv epilogue.
void maxPoolPlane(const float* in, int64_t H, int64_t W, float* out, int64_t OH, int64_t OW,
                  int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw);

// "amx", "avx512_bf16" or "" where oneDNN has no native bf16 kernels on this CPU.
std::string nativeBf16();

}  // namespace dw::engine::onednn
