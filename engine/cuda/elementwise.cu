// Element-wise kernels: unary functions and their derivatives, broadcasting binary ops, casts,
// strided copies (transpose, expand) and Where.
#include <cstdint>

#include "engine/cuda/grid.h"
#include "engine/cuda/launch.h"

namespace dw::engine::cuda {

namespace {

__device__ inline float unaryF(UnaryOp op, float x, float a, float b) {
  switch (op) {
    case UnaryOp::kRelu:
      return x > 0.f ? x : 0.f;
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kExp:
      return expf(x);
    case UnaryOp::kLog:
      return logf(x);
    case UnaryOp::kSqrt:
      return sqrtf(x);
    case UnaryOp::kSigmoid:
      return 1.f / (1.f + expf(-x));
    case UnaryOp::kTanh:
      return tanhf(x);
    case UnaryOp::kAbs:
      return fabsf(x);
    case UnaryOp::kLeakyRelu:
      return x >= 0.f ? x : a * x;
    case UnaryOp::kElu:
      return x >= 0.f ? x : a * (expf(x) - 1.f);
    case UnaryOp::kSoftplus:
      return x > 20.f ? x : log1pf(expf(x));
    case UnaryOp::kReciprocal:
      return 1.f / x;
    case UnaryOp::kFloor:
      return floorf(x);
    case UnaryOp::kCeil:
      return ceilf(x);
    case UnaryOp::kErf:
      return erff(x);
    case UnaryOp::kHardSigmoid:
      return fmaxf(0.f, fminf(1.f, a * x + b));
    case UnaryOp::kSelu:
      return x > 0.f ? b * x : b * (a * expf(x) - a);
    case UnaryOp::kSin:
      return sinf(x);
    case UnaryOp::kCos:
      return cosf(x);
    case UnaryOp::kIdentity:
      return x;
  }
  return x;
}

// d f(x) / dx, given x and y = f(x).
__device__ inline float unaryD(UnaryOp op, float x, float y, float a, float b) {
  switch (op) {
    case UnaryOp::kRelu:
      return x > 0.f ? 1.f : 0.f;
    case UnaryOp::kNeg:
      return -1.f;
    case UnaryOp::kExp:
      return y;
    case UnaryOp::kLog:
      return 1.f / x;
    case UnaryOp::kSqrt:
      return 0.5f / y;
    case UnaryOp::kSigmoid:
      return y * (1.f - y);
    case UnaryOp::kTanh:
      return 1.f - y * y;
    case UnaryOp::kAbs:
      return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f);
    case UnaryOp::kLeakyRelu:
      return x >= 0.f ? 1.f : a;
    case UnaryOp::kElu:
      return x >= 0.f ? 1.f : y + a;
    case UnaryOp::kSoftplus:
      return 1.f / (1.f + expf(-x));
    case UnaryOp::kReciprocal:
      return -y * y;
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
      return 0.f;
    case UnaryOp::kErf:
      return 1.1283791670955126f * expf(-x * x);
    case UnaryOp::kHardSigmoid: {
      const float v = a * x + b;
      return v > 0.f && v < 1.f ? a : 0.f;
    }
    case UnaryOp::kSelu:
      return x > 0.f ? b : b * a * expf(x);
    case UnaryOp::kSin:
      return cosf(x);
    case UnaryOp::kCos:
      return -sinf(x);
    case UnaryOp::kIdentity:
      return 1.f;
  }
  return 1.f;
}

__global__ void unaryKernel(UnaryOp op, float a, float b, const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = unaryF(op, x[i], a, b);
}

__global__ void unaryGradKernel(UnaryOp op, float a, float b, const float* dy, const float* x,
                                const float* y, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // Relu's derivative reads x; a zero upstream gradient stays zero whatever f'(x) is (0 * inf).
    const float g = dy[i];
    dx[i] = g == 0.f ? 0.f : g * unaryD(op, x ? x[i] : 0.f, y ? y[i] : 0.f, a, b);
  }
}

__device__ inline int64_t offsetOf(int64_t i, const Strided& s) {
  int64_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t dim = s.dims[d];
    const int64_t c = i % dim;
    i /= dim;
    off += c * s.strides[d];
  }
  return off;
}

template <class T>
__device__ inline T arith(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
    case BinaryOp::kMax:
      return a > b ? a : b;
    case BinaryOp::kMin:
      return a < b ? a : b;
    default:
      return a;
  }
}
template <>
__device__ inline float arith<float>(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return powf(a, b);
    case BinaryOp::kMax:
      return fmaxf(a, b);
    case BinaryOp::kMin:
      return fminf(a, b);
    default:
      return a;
  }
}

template <class T>
__device__ inline bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kEqual:
      return a == b;
    case BinaryOp::kLess:
      return a < b;
    case BinaryOp::kGreater:
      return a > b;
    case BinaryOp::kLessEqual:
      return a <= b;
    case BinaryOp::kGreaterEqual:
      return a >= b;
    default:
      return false;
  }
}

template <class T>
__global__ void binaryKernel(BinaryOp op, const T* a, Strided as, const T* b, Strided bs, void* out,
                             int64_t n, bool cmp) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const T x = a[offsetOf(i, as)], y = b[offsetOf(i, bs)];
    if (cmp)
      static_cast<uint8_t*>(out)[i] = compare(op, x, y) ? 1 : 0;
    else
      static_cast<T*>(out)[i] = arith(op, x, y);
  }
}

// Same shapes on both sides: no index arithmetic.
template <class T>
__global__ void binaryFlatKernel(BinaryOp op, const T* a, const T* b, void* out, int64_t n,
                                 bool cmp) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (cmp)
      static_cast<uint8_t*>(out)[i] = compare(op, a[i], b[i]) ? 1 : 0;
    else
      static_cast<T*>(out)[i] = arith(op, a[i], b[i]);
  }
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
void binaryTyped(BinaryOp op, const void* a, const Strided& as, const void* b, const Strided& bs,
                 void* out, int64_t n, cudaStream_t s) {
  const bool cmp = op >= BinaryOp::kEqual;
  if (contiguous(as) && contiguous(bs))
    binaryFlatKernel<T><<<blocksFor(n), kThreads, 0, s>>>(op, static_cast<const T*>(a),
                                                          static_cast<const T*>(b), out, n, cmp);
  else
    binaryKernel<T><<<blocksFor(n), kThreads, 0, s>>>(op, static_cast<const T*>(a), as,
                                                      static_cast<const T*>(b), bs, out, n, cmp);
}

template <class T>
__global__ void stridedCopyKernel(const T* src, Strided ss, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = src[offsetOf(i, ss)];
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

}  // namespace

void launchUnary(UnaryOp op, float alpha, float beta, const float* x, float* y, int64_t n,
                 cudaStream_t s) {
  if (n > 0) unaryKernel<<<blocksFor(n), kThreads, 0, s>>>(op, alpha, beta, x, y, n);
}

void launchUnaryGrad(UnaryOp op, float alpha, float beta, const float* dy, const float* x,
                     const float* y, float* dx, int64_t n, cudaStream_t s) {
  if (n > 0) unaryGradKernel<<<blocksFor(n), kThreads, 0, s>>>(op, alpha, beta, dy, x, y, dx, n);
}

void launchBinary(BinaryOp op, ElemType t, const void* a, const Strided& as, const void* b,
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

void launchStridedCopy(const void* src, const Strided& ss, void* out, int64_t n, int elemBytes,
                       cudaStream_t s) {
  if (n <= 0) return;
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

void launchWhere(const uint8_t* c, const Strided& cs, const float* a, const Strided& as,
                 const float* b, const Strided& bs, float* out, int64_t n, cudaStream_t s) {
  if (n > 0) whereKernel<<<blocksFor(n), kThreads, 0, s>>>(c, cs, a, as, b, bs, out, n);
}

}  // namespace dw::engine::cuda
