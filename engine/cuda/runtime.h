// Internal to engine/cuda: the cuda backend, its device context and the libraries it loads.
// The CUDA runtime is linked statically (it finds the driver, libcuda.so.1, at run time);
// cuBLAS and cuDNN are opened with dlopen when a cuda backend is first created, so a deepwire
// built with CUDA still starts, and runs on cpu, on a machine without them.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/backend.h"

namespace dw::engine::cuda {

// Function pointers into libcublas, libcublasLt and libcudnn, named after the functions they
// point to.
struct Libs {
#define DW_CUDA_FN(name) decltype(&::name) name = nullptr;
#define DW_CUBLAS_FNS(X) \
  X(cublasCreate_v2)     \
  X(cublasDestroy_v2)    \
  X(cublasSetStream_v2)  \
  X(cublasSetMathMode)   \
  X(cublasGetVersion_v2) X(cublasSgemm_v2) X(cublasSgemmStridedBatched) X(cublasSetWorkspace_v2)
#define DW_CUBLASLT_FNS(X)                \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)
#define DW_CUDNN_FNS(X)                                                                           \
  X(cudnnCreate)                                                                                  \
  X(cudnnDestroy)                                                                                 \
  X(cudnnSetStream)                                                                               \
  X(cudnnGetVersion)                                                                              \
  X(cudnnGetErrorString)                                                                          \
  X(cudnnCreateTensorDescriptor)                                                                  \
  X(cudnnSetTensorNdDescriptor)                                                                   \
  X(cudnnDestroyTensorDescriptor)                                                                 \
  X(cudnnCreateFilterDescriptor)                                                                  \
  X(cudnnSetFilterNdDescriptor)                                                                   \
  X(cudnnDestroyFilterDescriptor)                                                                 \
  X(cudnnCreateConvolutionDescriptor)                                                             \
  X(cudnnSetConvolutionNdDescriptor)                                                              \
  X(cudnnSetConvolutionGroupCount)                                                                \
  X(cudnnSetConvolutionMathType) X(cudnnDestroyConvolutionDescriptor)                             \
      X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionForwardWorkspaceSize) X(     \
          cudnnConvolutionForward) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                 \
          X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData) X(      \
              cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                      \
              X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionBackwardFilter) \
                  X(cudnnCreatePoolingDescriptor) X(cudnnSetPoolingNdDescriptor)                  \
                      X(cudnnDestroyPoolingDescriptor) X(cudnnPoolingForward)                     \
                          X(cudnnPoolingBackward) X(cudnnDeriveBNTensorDescriptor)                \
                              X(cudnnBatchNormalizationForwardTraining)                           \
                                  X(cudnnBatchNormalizationForwardInference)                      \
                                      X(cudnnBatchNormalizationBackward)                          \
                                          X(cudnnFindConvolutionForwardAlgorithmEx)               \
                                              X(cudnnFindConvolutionBackwardDataAlgorithmEx)      \
                                                  X(cudnnFindConvolutionBackwardFilterAlgorithmEx)
  DW_CUBLAS_FNS(DW_CUDA_FN)
  DW_CUBLASLT_FNS(DW_CUDA_FN)
  DW_CUDNN_FNS(DW_CUDA_FN)
#undef DW_CUDA_FN
  // cublas_api.h overloads it for C++ (a cudaDataType compute type), so decltype cannot name
  // the C function: its type is spelled out.
  cublasStatus_t (*cublasGemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                               int, int, int, const void*, const void*,
                                               cudaDataType, int, long long, const void*,
                                               cudaDataType, int, long long, const void*, void*,
                                               cudaDataType, int, long long, int,
                                               cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  bool cudnn = false;    // all cuDNN functions resolved
  std::string cudnnWhy;  // why not
  std::string versions;  // "cuBLAS 13.1.0, cuDNN 9.19.0"
};
// Opens the libraries once; an error names the library that is missing and how to get it.
Result<const Libs*> libs();

// Caches freed device blocks by rounded size, so steady-state steps never call cudaMalloc.
class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}
  Result<std::shared_ptr<Buffer>> get(size_t bytes);
  size_t mallocs() const { return mallocs_; }
  size_t peakBytes() const { return peak_; }

 private:
  void give(void* p, size_t bytes);
  void releaseCached();
  int device_;
  std::mutex m_;
  std::multimap<size_t, void*> free_;
  size_t mallocs_ = 0, inUse_ = 0, peak_ = 0;
};

// One per GPU and process: every session on a GPU shares its stream, handles and memory, so
// a tensor one session writes (weights after an optimizer step) is ready for the next kernel
// another session queues, without events.
struct DeviceContext {
  int index = 0;
  cudaDeviceProp props{};
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // cuBLASLt runs the products that carry an epilogue (bias, activation, bias gradient), with
  // a workspace of its own allocated once, so that recorded steps never allocate.
  cublasLtHandle_t lt = nullptr;
  std::shared_ptr<Buffer> ltWorkspace;
  static constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
  cudnnHandle_t cudnn = nullptr;  // null where cuDNN is missing
  const Libs* libs = nullptr;
  std::shared_ptr<DeviceAllocator> allocator;
  // The convolutions' workspace, grown to the largest any chosen algorithm needs. One suffices:
  // every kernel on this GPU queues on `stream`, so no two convolutions overlap.
  std::shared_ptr<Buffer> workspace;
  std::mutex mutex;               // sessions on several threads take turns on the handles
  std::recursive_mutex runMutex;  // and on whole runs (CudaBackend::lockRun)
};
Result<std::shared_ptr<DeviceContext>> deviceContext(int index);

// How a cuda session's convolutions and matrix products multiply (BackendOptions::precision):
// full fp32 on the FMA units, or on tensor cores from TF32-rounded or bf16 copies of their
// inputs, accumulating in fp32.
enum class Math { kFp32, kTf32, kBf16 };

class CudaBackend : public Backend {
 public:
  CudaBackend(std::shared_ptr<DeviceContext> ctx, std::shared_ptr<Backend> host, Math math);
  std::string name() const override { return "cuda"; }
  std::string kernelTable() const override { return kCudaTable; }
  std::string description() const override;
  int threads() const override { return host_->threads(); }
  // Also makes this GPU the calling thread's current device (kernels launch on it).
  void applyThreads() const override;
  size_t deviceAllocations() const override { return ctx_->allocator->mallocs(); }
  Device memory() const override { return Device::kCuda; }
  Backend* hostBackend() override { return host_.get(); }
  Result<std::shared_ptr<Buffer>> allocate(size_t bytes) override;
  Result<Tensor> toDevice(const Tensor& host, std::shared_ptr<Buffer> buffer) override;
  Result<Tensor> toHost(const Tensor& device, std::shared_ptr<Buffer> buffer) override;
  Result<Tensor> toHostQueued(const Tensor& device, std::shared_ptr<Buffer> buffer) override;
  Status synchronize() override;
  Fusions fusions() const override { return Fusions::kConvEpilogue; }
  bool canRecord() const override { return true; }
  Status beginRecording() override;
  Result<std::unique_ptr<RecordedWork>> endRecording() override;
  Status copyInto(const Tensor& src, Tensor& dst) override;
  std::unique_lock<std::recursive_mutex> lockRun() override {
    return std::unique_lock<std::recursive_mutex>(ctx_->runMutex);
  }
  // Whether this device's stream is being recorded now.
  bool recording() const;
  std::string precision() const override;
  Math math() const { return math_; }

  DeviceContext& ctx() { return *ctx_; }
  cudaStream_t stream() const { return ctx_->stream; }
  const Libs& libs() const { return *ctx_->libs; }

 private:
  std::shared_ptr<DeviceContext> ctx_;
  std::shared_ptr<Backend> host_;
  Math math_;
};

CudaBackend& cudaBackend(Backend& b);

// Errors from CUDA calls, with what was being done.
Status check(cudaError_t e, const char* what);
Status check(cublasStatus_t e, const char* what);
Status check(const Libs& l, cudnnStatus_t e, const char* what);
// The error of the last kernel launch, if any.
Status launched(const char* what);

}  // namespace dw::engine::cuda

#define DW_CUDA_OK(expr)       \
  do {                         \
    ::dw::Status st_ = (expr); \
    if (!st_.ok()) return st_; \
  } while (0)
