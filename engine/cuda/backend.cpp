#include <dlfcn.h>

#include <cstdio>

#include "engine/cuda/cuda.h"
#include "engine/cuda/runtime.h"

namespace dw::engine::cuda {

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status();
  return Status::error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

Status check(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status();
  return Status::error(std::string("cuBLAS: ") + what + " failed (status " +
                       std::to_string(static_cast<int>(e)) + ")");
}

Status check(const Libs& l, cudnnStatus_t e, const char* what) {
  if (e == CUDNN_STATUS_SUCCESS) return Status();
  return Status::error(std::string("cuDNN: ") + what + ": " + l.cudnnGetErrorString(e));
}

Status launched(const char* what) {
  return check(cudaGetLastError(), what);
}

namespace {

std::string versionString(int v, int majorDiv, int minorDiv) {
  return std::to_string(v / majorDiv) + "." + std::to_string(v % majorDiv / minorDiv) + "." +
         std::to_string(v % minorDiv);
}

// The first of `names` dlopen finds; `tried` collects why each failed.
void* openFirst(std::initializer_list<const char*> names, std::string& tried) {
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (e ? e : n);
  }
  return nullptr;
}

Result<Libs*> openLibs() {
  auto* l = new Libs();  // lives as long as the process: kernels hold its function pointers
  std::string tried;
  void* blas = openFirst({"libcublas.so.13", "libcublas.so.12", "libcublas.so"}, tried);
  if (!blas)
    return Status::error(
        "accelerator cuda needs cuBLAS (libcublas.so.13), which was not found (" + tried +
        "). Install the CUDA toolkit's cuBLAS, or add its lib64 folder to LD_LIBRARY_PATH");
#define DW_CUDA_SYM(name)                                                         \
  l->name = reinterpret_cast<decltype(l->name)>(dlsym(blas, #name));              \
  if (!l->name)                                                                   \
    return Status::error("accelerator cuda: the cuBLAS found lacks " #name " (" + \
                         std::string("need cuBLAS 12 or 13)"));
  DW_CUBLAS_FNS(DW_CUDA_SYM)
  DW_CUDA_SYM(cublasGemmStridedBatchedEx)
#undef DW_CUDA_SYM
  void* lt = openFirst({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}, tried);
  if (!lt)
    return Status::error(
        "accelerator cuda needs cuBLASLt (libcublasLt.so.13), which was not found (" + tried +
        "). It comes with the CUDA toolkit's cuBLAS; add its lib64 folder to LD_LIBRARY_PATH");
#define DW_CUDA_SYM(name)                                                           \
  l->name = reinterpret_cast<decltype(l->name)>(dlsym(lt, #name));                  \
  if (!l->name)                                                                     \
    return Status::error("accelerator cuda: the cuBLASLt found lacks " #name " (" + \
                         std::string("need cuBLAS 12 or 13)"));
  DW_CUBLASLT_FNS(DW_CUDA_SYM)
#undef DW_CUDA_SYM
  std::string dnnTried;
  void* dnn = openFirst({"libcudnn.so.9", "libcudnn.so"}, dnnTried);
  l->cudnn = dnn != nullptr;
  if (!dnn) l->cudnnWhy = "cuDNN 9 (libcudnn.so.9) was not found (" + dnnTried + ")";
#define DW_CUDA_SYM(name)                                             \
  if (l->cudnn) {                                                     \
    l->name = reinterpret_cast<decltype(l->name)>(dlsym(dnn, #name)); \
    if (!l->name) {                                                   \
      l->cudnn = false;                                               \
      l->cudnnWhy = "the cuDNN found lacks " #name " (need cuDNN 9)"; \
    }                                                                 \
  }
  DW_CUDNN_FNS(DW_CUDA_SYM)
#undef DW_CUDA_SYM
  return l;
}

}  // namespace

Result<const Libs*> libs() {
  static std::mutex m;
  static Libs* loaded = nullptr;
  static Status failed;
  std::lock_guard<std::mutex> lock(m);
  if (loaded) return static_cast<const Libs*>(loaded);
  if (!failed.ok()) return failed;
  auto r = openLibs();
  if (!r) {
    failed = r.status();
    return failed;
  }
  loaded = *r;
  int v = 0;
  cublasHandle_t h = nullptr;
  if (loaded->cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS) {
    loaded->cublasGetVersion_v2(h, &v);
    loaded->cublasDestroy_v2(h);
  }
  loaded->versions = "cuBLAS " + versionString(v, 10000, 100);
  loaded->versions +=
      loaded->cudnn
          ? ", cuDNN " + versionString(static_cast<int>(loaded->cudnnGetVersion()), 10000, 100)
          : ", no cuDNN: " + loaded->cudnnWhy;
  return static_cast<const Libs*>(loaded);
}

// ---- Memory ----

namespace {
size_t roundedSize(size_t bytes) {
  const size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes <= (size_t(1) << 20)) return std::max(kSmall, (bytes + kSmall - 1) / kSmall * kSmall);
  return (bytes + kLarge - 1) / kLarge * kLarge;
}
}  // namespace

Result<std::shared_ptr<Buffer>> DeviceAllocator::get(size_t bytes) {
  const size_t size = roundedSize(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(m_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
    }
  }
  if (!p) {
    cudaSetDevice(device_);
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      releaseCached();
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t freeB = 0, total = 0;
      cudaMemGetInfo(&freeB, &total);
      return Status::error("cuda: out of GPU memory allocating " + std::to_string(bytes) +
                           " bytes (" + std::to_string(freeB >> 20) + " MiB free of " +
                           std::to_string(total >> 20) +
                           " MiB); use a smaller batch size or accelerator cpu");
    }
    std::lock_guard<std::mutex> lock(m_);
    ++mallocs_;
  }
  {
    std::lock_guard<std::mutex> lock(m_);
    inUse_ += size;
    peak_ = std::max(peak_, inUse_);
  }
  auto self = shared_from_this();
  return std::make_shared<Buffer>(p, size, Device::kCuda,
                                  [self, size](void* q) { self->give(q, size); });
}

void DeviceAllocator::give(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(m_);
  inUse_ -= bytes;
  free_.emplace(bytes, p);
}

void DeviceAllocator::releaseCached() {
  std::lock_guard<std::mutex> lock(m_);
  cudaDeviceSynchronize();
  for (auto& [size, p] : free_) cudaFree(p);
  free_.clear();
}

namespace {
std::mutex contextsMutex;
// Never destroyed: buffers and kernels may outlive any session, up to process exit.
auto* contexts = new std::map<int, std::shared_ptr<DeviceContext>>();
}  // namespace

std::function<std::shared_ptr<Buffer>(size_t)> pinnedHostBuffers(Backend& backend) {
  if (backend.memory() != Device::kCuda) return nullptr;
  const int device = cudaBackend(backend).ctx().index;
  return [device](size_t bytes) -> std::shared_ptr<Buffer> {
    if (bytes == 0) return nullptr;
    // The calling thread (a loader's worker) must not open a context on GPU 0 for a trainer
    // on another GPU; portable: page-locked for every GPU's context.
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) cudaSetDevice(device);
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();  // no room: plain memory serves
      return nullptr;
    }
    return std::make_shared<Buffer>(p, bytes, Device::kHost, [](void* q) { cudaFreeHost(q); });
  };
}

size_t peakDeviceBytes() {
  std::lock_guard<std::mutex> lock(contextsMutex);
  size_t total = 0;
  for (const auto& [i, c] : *contexts) total += c->allocator->peakBytes();
  return total;
}

Result<std::shared_ptr<DeviceContext>> deviceContext(int index) {
  std::lock_guard<std::mutex> lock(contextsMutex);
  if (auto it = contexts->find(index); it != contexts->end()) return it->second;
  std::string why;
  const int n = deviceCount(&why);
  if (n == 0) return Status::error("accelerator cuda is not available: " + why);
  if (index >= n)
    return Status::error("accelerator cuda:" + std::to_string(index) +
                         " does not exist: " + std::to_string(n) +
                         " NVIDIA GPU(s) found (cuda:0 to cuda:" + std::to_string(n - 1) + ")");
  auto l = libs();
  if (!l) return l.status();
  auto c = std::make_shared<DeviceContext>();
  c->index = index;
  c->libs = *l;
  DW_CUDA_OK(check(cudaSetDevice(index), "selecting the GPU"));
  DW_CUDA_OK(check(cudaGetDeviceProperties(&c->props, index), "reading the GPU's properties"));
  DW_CUDA_OK(
      check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating a stream"));
  DW_CUDA_OK(check(c->libs->cublasCreate_v2(&c->cublas), "creating a cuBLAS handle"));
  DW_CUDA_OK(check(c->libs->cublasSetStream_v2(c->cublas, c->stream), "binding cuBLAS"));
  // Full fp32 products, as the cpu computes them (no TF32 rounding of the inputs).
  DW_CUDA_OK(check(c->libs->cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH), "math mode"));
  if (c->libs->cudnn) {
    auto& L = *c->libs;
    DW_CUDA_OK(check(L, L.cudnnCreate(&c->cudnn), "creating a cuDNN handle"));
    DW_CUDA_OK(check(L, L.cudnnSetStream(c->cudnn, c->stream), "binding cuDNN"));
  }
  c->allocator = std::make_shared<DeviceAllocator>(index);
  DW_CUDA_OK(check(c->libs->cublasLtCreate(&c->lt), "creating a cuBLASLt handle"));
  auto ws = c->allocator->get(DeviceContext::kLtWorkspaceBytes);
  if (!ws) return ws.status();
  c->ltWorkspace = *ws;
  (*contexts)[index] = c;
  return c;
}

// ---- Backend ----

CudaBackend::CudaBackend(std::shared_ptr<DeviceContext> ctx, std::shared_ptr<Backend> host,
                         Math math)
    : ctx_(std::move(ctx)), host_(std::move(host)), math_(math) {}

std::string CudaBackend::precision() const {
  return math_ == Math::kBf16 ? "bf16" : math_ == Math::kTf32 ? "tf32" : "fp32";
}

std::string CudaBackend::description() const {
  const auto& p = ctx_->props;
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(p.totalGlobalMem) / (1 << 30));
  return "cuda:" + std::to_string(ctx_->index) + " (" + p.name + ", " + mem + ", " +
         ctx_->libs->versions + (math_ == Math::kFp32 ? "" : ", precision " + precision()) +
         "); ops without a cuda kernel on " + host_->description();
}

void CudaBackend::applyThreads() const {
  host_->applyThreads();
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != ctx_->index) cudaSetDevice(ctx_->index);
}

Result<std::shared_ptr<Buffer>> CudaBackend::allocate(size_t bytes) {
  return ctx_->allocator->get(bytes);
}

Result<Tensor> CudaBackend::toDevice(const Tensor& host, std::shared_ptr<Buffer> buffer) {
  if (!host.onHost()) return host;
  if (host.dtype() == DType::kString) return Status::error("cuda: string tensors stay on the host");
  if (!buffer || buffer->device != Device::kCuda || buffer->capacity < host.bytes()) {
    auto b = allocate(host.bytes());
    if (!b) return b.status();
    buffer = std::move(*b);
  }
  Tensor t(host.dtype(), host.shape(), buffer);
  if (host.bytes())
    DW_CUDA_OK(check(
        cudaMemcpyAsync(t.raw(), host.raw(), host.bytes(), cudaMemcpyHostToDevice, ctx_->stream),
        "copying to the GPU"));
  return t;
}

Result<Tensor> CudaBackend::toHostQueued(const Tensor& device, std::shared_ptr<Buffer> buffer) {
  if (device.onHost()) return device;
  if (!buffer || buffer->device != Device::kHost || buffer->capacity < device.bytes())
    buffer = std::make_shared<Buffer>(device.bytes());
  Tensor t(device.dtype(), device.shape(), buffer);
  if (device.bytes())
    DW_CUDA_OK(check(cudaMemcpyAsync(t.raw(), device.raw(), device.bytes(), cudaMemcpyDeviceToHost,
                                     ctx_->stream),
                     "copying from the GPU"));
  return t;
}

Result<Tensor> CudaBackend::toHost(const Tensor& device, std::shared_ptr<Buffer> buffer) {
  auto t = toHostQueued(device, std::move(buffer));
  if (!t || device.onHost()) return t;
  DW_CUDA_OK(synchronize());
  return t;
}

Status CudaBackend::synchronize() {
  return check(cudaStreamSynchronize(ctx_->stream), "running the GPU's queued work");
}

namespace {
// A run's captured work: a CUDA graph, and the convolution workspace its nodes write (which a
// later, larger one would otherwise replace and free).
class CudaGraph : public RecordedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, std::shared_ptr<Buffer> workspace)
      : exec_(exec), stream_(stream), workspace_(std::move(workspace)) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  Status replay() override { return check(cudaGraphLaunch(exec_, stream_), "replaying a run"); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::shared_ptr<Buffer> workspace_;
};
}  // namespace

Status CudaBackend::beginRecording() {
  applyThreads();
  // Relaxed: kernels may still cudaMalloc what the pool lacks while the stream is captured.
  return check(cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeRelaxed),
               "recording a run");
}

Result<std::unique_ptr<RecordedWork>> CudaBackend::endRecording() {
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(ctx_->stream, &graph);
  if (e != cudaSuccess || !graph) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return Status::error(std::string("cuda: the run could not be recorded: ") +
                         cudaGetErrorString(e));
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::error(std::string("cuda: the recorded run cannot be replayed: ") +
                         cudaGetErrorString(e));
  }
  return std::unique_ptr<RecordedWork>(new CudaGraph(exec, ctx_->stream, ctx_->workspace));
}

bool CudaBackend::recording() const {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(ctx_->stream, &st) != cudaSuccess) cudaGetLastError();
  return st != cudaStreamCaptureStatusNone;
}

Status CudaBackend::copyInto(const Tensor& src, Tensor& dst) {
  if (dst.onHost() || src.bytes() != dst.bytes())
    return Status::error("cuda: copyInto needs a device tensor of " + std::to_string(src.bytes()) +
                         " bytes");
  if (src.bytes() == 0) return Status();
  return check(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(),
                               src.onHost() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice,
                               ctx_->stream),
               src.onHost() ? "copying to the GPU" : "copying on the GPU");
}

CudaBackend& cudaBackend(Backend& b) {
  return static_cast<CudaBackend&>(b);
}

// ---- What the rest of the engine calls ----

bool built() {
  return true;
}

int deviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why)
      *why = e == cudaErrorNoDevice ? "no NVIDIA GPU found"
             : e == cudaErrorInsufficientDriver
                 ? std::string(
                       "no usable NVIDIA driver (libcuda.so.1 missing or older "
                       "than this CUDA runtime, ") +
                       std::to_string(CUDART_VERSION / 1000) + ".x): install the NVIDIA driver"
                 : std::string("the CUDA runtime reports: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "no NVIDIA GPU found";
  return n;
}

Result<std::shared_ptr<Backend>> createBackend(int index, const BackendOptions& o) {
  auto c = deviceContext(index);
  if (!c) return c.status();
  // engine::createBackend has checked the name against precisionNames().
  const Math math = o.precision == "bf16"   ? Math::kBf16
                    : o.precision == "tf32" ? Math::kTf32
                                            : Math::kFp32;
  const auto& props = (*c)->props;
  // Tensor cores take bf16 and TF32 from Ampere (compute capability 8.0) on.
  if (math != Math::kFp32 && props.major < 8)
    return Status::error(
        "precision " + o.precision +
        " needs an NVIDIA GPU of compute capability 8.0 or later; cuda:" + std::to_string(index) +
        " (" + props.name + ") is " + std::to_string(props.major) + "." +
        std::to_string(props.minor) + ". Use precision fp32");
  BackendOptions ho;
  ho.accelerator = "cpu";
  ho.threads = o.threads;
  auto host = engine::createBackend(ho);
  if (!host) return host.status();
  return std::shared_ptr<Backend>(std::make_shared<CudaBackend>(*c, *host, math));
}

void describe(DeviceReport& r) {
  std::string why;
  const int n = deviceCount(&why);
  if (n == 0) {
    r.cudaUnavailable = why;
    return;
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  r.cudaLibraries = "CUDA runtime " + std::to_string(rt / 1000) + "." +
                    std::to_string(rt % 1000 / 10) + ", driver " + std::to_string(drv / 1000) +
                    "." + std::to_string(drv % 1000 / 10);
  auto l = libs();
  if (!l) {
    r.cudaUnavailable = l.message();
    return;
  }
  r.cudaLibraries += ", " + (*l)->versions;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    char line[512];
    std::snprintf(line, sizeof line, "cuda:%d: %s, %.1f GiB, compute capability %d.%d, %d SMs", i,
                  p.name, static_cast<double>(p.totalGlobalMem) / (1 << 30), p.major, p.minor,
                  p.multiProcessorCount);
    r.cudaDevices.push_back(line);
  }
}

}  // namespace dw::engine::cuda
