// Element-wise kernels: unary functions and their derivatives, broadcasting binary ops, casts,
// strided copies (transpose, expand) and Where.
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/grid.h"
#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

namespace {

template <ops::UnaryFn F>
__global__ void unaryKernel(ops::UnaryParams p, const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = ops::unaryForward<F>(x[i], p);
}

template <ops::UnaryFn F>
__global__ void unaryGradKernel(ops::UnaryParams p, const float* dy, const float* x, const float* y,
                                float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // A zero upstream gradient stays zero whatever f'(x) is (0 * inf).
    const float g = dy[i];
    dx[i] = g == 0.f ? 0.f : g * ops::unaryDerivative<F>(x[i], y[i], p);
  }
}

// The functions the cuda table runs (ops/binary_table.h marks them): arithmetic, comparisons.
template <ops::BinaryFn F>
constexpr bool kOnDevice = ops::kindOf(F) == ops::BinaryKind::kCompare ||
                           (ops::kindOf(F) == ops::BinaryKind::kArithmetic &&
                            F != ops::BinaryFn::kMod && F != ops::BinaryFn::kFmod);

template <ops::BinaryFn F, class T>
__device__ inline void binaryAt(const T* a, int64_t ia, const T* b, int64_t ib, void* out,
                                int64_t i) {
  const auto v = ops::binaryForward<F>(a[ia], b[ib]);
  if constexpr (ops::kindOf(F) == ops::BinaryKind::kCompare)
    static_cast<uint8_t*>(out)[i] = v ? 1 : 0;
  else
    static_cast<T*>(out)[i] = v;
}

template <ops::BinaryFn F, class T>
__global__ void binaryKernel(const T* a, Strided as, const T* b, Strided bs, void* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    binaryAt<F>(a, offsetOf(i, as), b, offsetOf(i, bs), out, i);
}

// Same shapes on both sides: no index arithmetic.
template <ops::BinaryFn F, class T>
__global__ void binaryFlatKernel(const T* a, const T* b, void* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    binaryAt<F>(a, i, b, i, out, i);
}

bool contiguous(const Strided& s) {
  int64_t want = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    if (s.dims[d] != 1 && s.strides[d] != want) return false;
    want *= s.dims[d];
  }
  return true;
}

template <class T>
void binaryTyped(ops::BinaryFn fn, const void* a, Strided as, const void* b, Strided bs, void* out,
                 int64_t n, cudaStream_t s) {
  coalesce({&as, &bs});
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  const bool flat = contiguous(as) && contiguous(bs);
  ops::visitBinary(fn, [&](auto f) {
    constexpr ops::BinaryFn kF = decltype(f)::value;
    if constexpr (kOnDevice<kF>) {
      if (flat)
        binaryFlatKernel<kF, T><<<blocksFor(n), kThreads, 0, s>>>(pa, pb, out, n);
      else
        binaryKernel<kF, T><<<blocksFor(n), kThreads, 0, s>>>(pa, as, pb, bs, out, n);
    }
  });
}

template <class T>
__global__ void stridedCopyKernel(const T* src, Strided ss, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = src[offsetOf(i, ss)];
}

// The inverse walk: src (contiguous) lands at out's strided positions (distinct ones: no races).
__global__ void stridedScatterKernel(const float* src, Strided os, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[offsetOf(i, os)] = src[i];
}

template <class From, class To>
__global__ void castKernel(const From* x, To* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = static_cast<To>(x[i]);
}

template <class From>
__global__ void castToBoolKernel(const From* x, uint8_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] != From(0) ? 1 : 0;
}

template <class From>
void castFrom(const From* x, ElemType to, void* y, int64_t n, cudaStream_t s) {
  switch (to) {
    case ElemType::kFloat:
      castKernel<<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<float*>(y), n);
      break;
    case ElemType::kDouble:
      castKernel<<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<double*>(y), n);
      break;
    case ElemType::kInt64:
      castKernel<<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<int64_t*>(y), n);
      break;
    case ElemType::kInt32:
      castKernel<<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<int32_t*>(y), n);
      break;
    case ElemType::kUInt8:
      castToBoolKernel<<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<uint8_t*>(y), n);
      break;
  }
}

__global__ void whereKernel(const uint8_t* c, Strided cs, const float* a, Strided as,
                            const float* b, Strided bs, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = c[offsetOf(i, cs)] ? a[offsetOf(i, as)] : b[offsetOf(i, bs)];
}

__global__ void toBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void fromBf16Kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

}  // namespace

void launchToBf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  if (n > 0) toBf16Kernel<<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<__nv_bfloat16*>(y), n);
}

void launchFromBf16(const void* x, float* y, int64_t n, cudaStream_t s) {
  if (n > 0)
    fromBf16Kernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(x), y, n);
}

void launchUnary(ops::UnaryFn fn, const ops::UnaryParams& p, const float* x, float* y, int64_t n,
                 cudaStream_t s) {
  if (n <= 0) return;
  ops::visitUnary(fn, [&](auto f) {
    unaryKernel<decltype(f)::value><<<blocksFor(n), kThreads, 0, s>>>(p, x, y, n);
  });
}

void launchUnaryGrad(ops::UnaryFn fn, const ops::UnaryParams& p, const float* dy, const float* x,
                     const float* y, float* dx, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  ops::visitUnary(fn, [&](auto f) {
    unaryGradKernel<decltype(f)::value><<<blocksFor(n), kThreads, 0, s>>>(p, dy, x, y, dx, n);
  });
}

void launchBinary(ops::BinaryFn op, ElemType t, const void* a, const Strided& as, const void* b,
                  const Strided& bs, void* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  switch (t) {
    case ElemType::kFloat:
      binaryTyped<float>(op, a, as, b, bs, out, n, s);
      break;
    case ElemType::kDouble:
      binaryTyped<double>(op, a, as, b, bs, out, n, s);
      break;
    case ElemType::kInt64:
      binaryTyped<int64_t>(op, a, as, b, bs, out, n, s);
      break;
    case ElemType::kInt32:
      binaryTyped<int32_t>(op, a, as, b, bs, out, n, s);
      break;
    case ElemType::kUInt8:
      binaryTyped<uint8_t>(op, a, as, b, bs, out, n, s);
      break;
  }
}

void launchStridedCopy(const void* src, const Strided& walk, void* out, int64_t n, int elemBytes,
                       cudaStream_t s) {
  if (n <= 0) return;
  Strided ss = walk;
  coalesce({&ss});
  switch (elemBytes) {
    case 1:
      stridedCopyKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint8_t*>(src), ss,
                                                          static_cast<uint8_t*>(out), n);
      break;
    case 2:
      stridedCopyKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(src), ss,
                                                          static_cast<uint16_t*>(out), n);
      break;
    case 4:
      stridedCopyKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint32_t*>(src), ss,
                                                          static_cast<uint32_t*>(out), n);
      break;
    default:
      stridedCopyKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const uint64_t*>(src), ss,
                                                          static_cast<uint64_t*>(out), n);
      break;
  }
}

void launchStridedScatter(const float* src, const Strided& walk, float* out, int64_t n,
                          cudaStream_t s) {
  Strided os = walk;
  coalesce({&os});
  if (n > 0) stridedScatterKernel<<<blocksFor(n), kThreads, 0, s>>>(src, os, out, n);
}

void launchCast(ElemType from, const void* x, ElemType to, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  switch (from) {
    case ElemType::kFloat:
      castFrom(static_cast<const float*>(x), to, y, n, s);
      break;
    case ElemType::kDouble:
      castFrom(static_cast<const double*>(x), to, y, n, s);
      break;
    case ElemType::kInt64:
      castFrom(static_cast<const int64_t*>(x), to, y, n, s);
      break;
    case ElemType::kInt32:
      castFrom(static_cast<const int32_t*>(x), to, y, n, s);
      break;
    case ElemType::kUInt8:
      castFrom(static_cast<const uint8_t*>(x), to, y, n, s);
      break;
  }
}

void launchWhere(const uint8_t* c, Strided cs, const float* a, Strided as, const float* b,
                 Strided bs, float* out, int64_t n, cudaStream_t s) {
  coalesce({&cs, &as, &bs});
  if (n > 0) whereKernel<<<blocksFor(n), kThreads, 0, s>>>(c, cs, a, as, b, bs, out, n);
}

}  // namespace dw::engine::cuda
