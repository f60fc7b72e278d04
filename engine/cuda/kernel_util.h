// Internal to engine/cuda: what the kernel files share.
#pragma once

#include "engine/cuda/cuda.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/runtime.h"
#include "engine/kernel.h"

namespace dw::engine::cuda {

inline bool floatInputs(const KernelInit&, const std::vector<DType>& t) {
  for (DType d : t)
    if (d != DType::kFloat) return false;
  return !t.empty();
}
inline bool firstFloat(const KernelInit&, const std::vector<DType>& t) {
  return !t.empty() && t[0] == DType::kFloat;
}

inline bool elemType(DType t, ElemType& e) {
  switch (t) {
    case DType::kFloat:
      e = ElemType::kFloat;
      return true;
    case DType::kDouble:
      e = ElemType::kDouble;
      return true;
    case DType::kInt64:
      e = ElemType::kInt64;
      return true;
    case DType::kInt32:
      e = ElemType::kInt32;
      return true;
    case DType::kBool:
      e = ElemType::kUInt8;
      return true;
    default:
      return false;
  }
}

// `in`'s strides when read over `out`'s shape (numpy broadcasting, right-aligned).
inline Strided broadcastStrides(const Shape& in, const Shape& out) {
  Strided s;
  s.rank = static_cast<int>(out.size());
  int64_t stride = 1;
  for (int d = s.rank - 1, k = static_cast<int>(in.size()) - 1; d >= 0; --d, --k) {
    s.dims[d] = out[d];
    const int64_t dim = k >= 0 ? in[k] : 1;
    s.strides[d] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return s;
}

inline Strided contiguousOf(const Shape& shape) {
  return broadcastStrides(shape, shape);
}

inline Status rankOk(const Shape& s, const char* op) {
  if (s.size() > static_cast<size_t>(kMaxRank))
    return Status::error(std::string(op) + " on cuda: rank " + std::to_string(s.size()) +
                         " exceeds " + std::to_string(kMaxRank));
  return Status();
}

inline const float* fp(const Tensor& t) {
  return t.data<float>();
}

// Reduces float `x` over `reduced` axes into `y` (its element count: the kept axes' product).
inline void reduceInto(CudaBackend& be, ReduceOp op, const Tensor& x,
                       const std::vector<bool>& reduced, float* y) {
  const Strided all = contiguousOf(x.shape());
  Strided kept, red;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < x.rank(); ++d) {
    Strided& s = reduced[d] ? red : kept;
    s.dims[s.rank] = x.dim(d);
    s.strides[s.rank] = all.strides[d];
    ++s.rank;
    (reduced[d] ? inner : outer) *= x.dim(d);
  }
  launchReduce(op, fp(x), kept, red, y, outer, inner, be.stream());
}

template <class K>
void add(KernelRegistry& r, const std::string& op, KernelSupports supports,
         const std::string& domain = "", uint32_t hostInputs = 0, uint32_t shapeOnly = 0) {
  KernelDef d;
  d.domain = domain;
  d.op = op;
  d.table = kCudaTable;
  d.factory = &makeKernel<K>;
  d.supports = supports;
  d.hostInputs = hostInputs;
  d.shapeOnlyInputs = shapeOnly;
  r.add(std::move(d));
}

// Gemm and MatMul (cuBLAS, cuBLASLt): matmul.cpp.
void addMatMulKernels(KernelRegistry& r);
// Convolution (cuDNN), pooling and batch normalization: nn_kernels.cpp.
void addNnKernels(KernelRegistry& r);
// Softmax, Concat, Gather and their gradients: tensor_kernels.cpp.
void addTensorKernels(KernelRegistry& r);

}  // namespace dw::engine::cuda
