#include <CL/cl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <oneapi/dnnl/dnnl_ocl.hpp>
#include <thread>

#include "engine/cuda/cuda.h"
#include "engine/onednn/onednn_backend.h"
#include "nodes/catalogue.h"

namespace dw::engine {

Result<std::shared_ptr<Buffer>> Backend::allocate(size_t) {
  return Status::error("accelerator " + name() + " keeps tensors in host memory");
}
Result<Tensor> Backend::toDevice(const Tensor&, std::shared_ptr<Buffer>) {
  return Status::error("accelerator " + name() + " keeps tensors in host memory");
}
Result<Tensor> Backend::toHost(const Tensor& t, std::shared_ptr<Buffer>) {
  if (t.onHost()) return t;
  return Status::error("accelerator " + name() + " cannot read device memory");
}

namespace {

std::string clDeviceInfo(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return std::string();
  std::string v(n, '\0');
  clGetDeviceInfo(d, what, n, v.data(), nullptr);
  while (!v.empty() && v.back() == '\0') v.pop_back();
  return v;
}

}  // namespace

namespace onednn {

CpuBackend::CpuBackend(int threads, bool bf16)
    : DnnlBackend(dnnl::engine(dnnl::engine::kind::cpu, 0), dnnl::engine(), bf16),
      threads_(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency())) {}

// This oneDNN build uses the OpenMP runtime, so the thread count is OpenMP's.
void CpuBackend::applyThreads() const {
  if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
}

std::string CpuBackend::description() const {
  return "cpu (oneDNN, " + std::to_string(threads_) + " threads" +
         (bf16() ? ", bf16 mixed precision on " + nativeBf16() : std::string()) + ")";
}

GpuBackend::GpuBackend(size_t index, int threads, bool emulated)
    : GpuBackend(emulated ? dnnl::engine(dnnl::engine::kind::cpu, 0)
                          : dnnl::engine(dnnl::engine::kind::gpu, index),
                 index, threads, emulated) {}

// Emulated, the host side of the copies is the device engine itself: oneDNN runs a reorder
// between two CPU engines only on a stream of the engine it picked.
GpuBackend::GpuBackend(dnnl::engine engine, size_t index, int threads, bool emulated)
    : DnnlBackend(engine, emulated ? engine : dnnl::engine(dnnl::engine::kind::cpu, 0), false),
      cpu_(threads) {
  const std::string device =
      emulated
          ? "emulated on the cpu engine, for tests"
          : "oneDNN OpenCL: " + clDeviceInfo(dnnl::ocl_interop::get_device(engine), CL_DEVICE_NAME);
  description_ = "gpu:" + std::to_string(index) + " (" + device +
                 "); training gradients and single-channel convolutions on cpu (oneDNN, " +
                 std::to_string(cpu_.threads()) + " threads)";
}

DnnlBackend& dnnlBackend(Backend& b) {
  return static_cast<DnnlBackend&>(b);
}

CpuBackend& cpuBackend(Backend& b) {
  return dnnlBackend(b).cpu();
}

Bindings::Buffer& Bindings::buffer(DnnlBackend& be, int slot, const dnnl::memory::desc& d) {
  for (Buffer& b : buffers_)
    if (b.slot == slot && b.desc == d) return b;
  ++be.deviceAllocations_;
  return buffers_.emplace_back(Buffer{slot, d, dnnl::memory(d, be.engine()), {}, {}, nullptr});
}

dnnl::memory Bindings::in(DnnlBackend& be, int slot, const dnnl::memory::desc& d, const void* host,
                          bool constant) {
  if (be.hostMemory()) return dnnl::memory(d, be.engine(), const_cast<void*>(host));
  Buffer& b = buffer(be, slot, d);
  if (constant && b.uploaded == host) return b.device;
  b.uploaded = nullptr;
  dnnl::memory h(d, be.hostEngine_, const_cast<void*>(host));
  if (!b.up) b.up = dnnl::reorder(h, b.device);
  b.up.execute(be.stream(), h, b.device);
  if (constant) b.uploaded = host;
  return b.device;
}

dnnl::memory Bindings::out(DnnlBackend& be, int slot, const dnnl::memory::desc& d, void* host) {
  if (be.hostMemory()) return dnnl::memory(d, be.engine(), host);
  Buffer& b = buffer(be, slot, d);
  dnnl::memory h(d, be.hostEngine_, host);
  if (!b.down) b.down = dnnl::reorder(b.device, h);
  pending_.emplace_back(&b, std::move(h));
  return b.device;
}

void Bindings::finish(DnnlBackend& be) {
  for (auto& [b, h] : pending_) b->down.execute(be.stream(), b->device, h);
  pending_.clear();
  be.stream().wait();
}

dnnl::memory Reorderer::in(const dnnl::memory& user, const dnnl::memory::desc& want,
                           dnnl::engine& eng, dnnl::stream& s) {
  const dnnl::memory::desc from = user.get_desc();
  if (from == want) return user;
  if (!scratch || scratch.get_desc() != want) {
    scratch = dnnl::memory(want, eng);
    toPrim_ = dnnl::reorder();
  }
  if (!toPrim_ || toFrom_ != from) {
    toPrim_ = dnnl::reorder(user, scratch);
    toFrom_ = from;
  }
  toPrim_.execute(s, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, scratch}});
  return scratch;
}

dnnl::memory Reorderer::out(const dnnl::memory& user, const dnnl::memory::desc& want,
                            dnnl::engine& eng) {
  if (user.get_desc() == want) return user;
  if (!scratch || scratch.get_desc() != want) scratch = dnnl::memory(want, eng);
  return scratch;
}

void Reorderer::back(dnnl::stream& s, dnnl::memory& from, dnnl::memory& user) {
  if (from == user) return;
  const dnnl::memory::desc f = from.get_desc(), t = user.get_desc();
  if (!backPrim_ || backFrom_ != f || backTo_ != t) {
    backPrim_ = dnnl::reorder(from, user);
    backFrom_ = f;
    backTo_ = t;
  }
  backPrim_.execute(s, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, user}});
}

std::string nativeBf16() {
  // The ISA values are nested bit sets: each level contains the bits of the ones below it.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl::cpu_isa want) {
    const auto w = static_cast<unsigned>(want);
    return (isa & w) == w;
  };
  if (has(dnnl::cpu_isa::avx512_core_amx)) return "amx";
  if (has(dnnl::cpu_isa::avx512_core_bf16)) return "avx512_bf16";
  return "";
}

std::vector<int64_t> inputShapesKey(const KernelContext& ctx) {
  std::vector<int64_t> k;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.hasInput(i) || !ctx.inputValue(i).isTensor()) {
      k.push_back(-2);
      continue;
    }
    for (int64_t d : ctx.input(i).shape()) k.push_back(d);
    k.push_back(-1);
  }
  return k;
}

dnnl::algorithm eltwiseAlgorithm(ops::Eltwise e) {
  using A = dnnl::algorithm;
  using E = ops::Eltwise;
  switch (e) {
    case E::kRelu:
      return A::eltwise_relu;
    case E::kElu:
      return A::eltwise_elu;
    case E::kLogistic:
      return A::eltwise_logistic;
    case E::kTanh:
      return A::eltwise_tanh;
    case E::kExp:
      return A::eltwise_exp;
    case E::kLog:
      return A::eltwise_log;
    case E::kAbs:
      return A::eltwise_abs;
    case E::kSqrt:
      return A::eltwise_sqrt;
    case E::kLinear:
      return A::eltwise_linear;
    case E::kPow:
      return A::eltwise_pow;
    case E::kHardswish:
      return A::eltwise_hardswish;
    case E::kSoftRelu:
      return A::eltwise_soft_relu;
    case E::kMish:
      return A::eltwise_mish;
    case E::kGeluErf:
      return A::eltwise_gelu_erf;
    case E::kGeluTanh:
      return A::eltwise_gelu_tanh;
    case E::kSwish:
      return A::eltwise_swish;
    case E::kClip:
      return A::eltwise_clip;
    case E::kNone:
      break;
  }
  return A::undef;
}

dnnl::memory::data_type toDnnl(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::kFloat:
      return dt::f32;
    case DType::kFloat16:
      return dt::f16;
    case DType::kBFloat16:
      return dt::bf16;
    case DType::kInt32:
      return dt::s32;
    case DType::kInt8:
      return dt::s8;
    case DType::kUInt8:
      return dt::u8;
    default:
      return dt::undef;
  }
}

dnnl::memory::format_tag plainTag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  switch (rank) {
    case 0:
    case 1:
      return tag::a;
    case 2:
      return tag::ab;
    case 3:
      return tag::abc;
    case 4:
      return tag::abcd;
    case 5:
      return tag::abcde;
    case 6:
      return tag::abcdef;
    default:
      return tag::undef;
  }
}

bool blockedShapeOk(const Shape& s) {
  return s.size() == 4 && s[1] % kChannelBlock == 0;
}

dnnl::memory::desc blockedDesc(const Shape& s) {
  return dnnl::memory::desc(toDims(s), dnnl::memory::data_type::f32,
                            dnnl::memory::format_tag::aBcd16b);
}

dnnl::memory::desc plainDesc(const Shape& s, dnnl::memory::data_type dt) {
  if (s.empty()) return dnnl::memory::desc({1}, dt, dnnl::memory::format_tag::a);
  dnnl::memory::dims strides(s.size());
  int64_t st = 1;
  for (size_t i = s.size(); i-- > 0;) {
    strides[i] = st;
    st *= std::max<int64_t>(s[i], 1);
  }
  return dnnl::memory::desc(toDims(s), dt, strides);
}

}  // namespace onednn

namespace {

std::string cpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(' ', p + 1));
    }
  }
  return "unknown";
}

const char* isaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::all:
      return "all";
    default:
      return "generic";
  }
}

int gpuEngineCount() {
  try {
    return static_cast<int>(dnnl::engine::get_count(dnnl::engine::kind::gpu));
  } catch (...) {
    return 0;
  }
}

// Every OpenCL GPU device with its vendor, so that `deepwire devices` names what oneDNN could
// (Intel) or could not (other vendors) use.
std::vector<std::string> openClGpuNames() {
  std::vector<std::string> names;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return names;
  std::vector<cl_platform_id> platforms(np);
  if (clGetPlatformIDs(np, platforms.data(), nullptr) != CL_SUCCESS) return names;
  for (auto p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devs(nd);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, nd, devs.data(), nullptr) != CL_SUCCESS) continue;
    for (auto d : devs)
      names.push_back(clDeviceInfo(d, CL_DEVICE_VENDOR) + ": " + clDeviceInfo(d, CL_DEVICE_NAME));
  }
  return names;
}

// The accelerator names usable with `gpus` oneDNN GPU engines: cpu, gpu (engine 0), gpu:1...
std::vector<std::string> acceleratorNames(int gpus) {
  std::vector<std::string> names{"cpu"};
  for (int i = 0; i < gpus; ++i) names.push_back(i ? "gpu:" + std::to_string(i) : "gpu");
  return names;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

DeviceReport devices() {
  DeviceReport r;
  r.cpuModel = cpuModelName();
  r.cpuIsa = isaName(dnnl::get_effective_cpu_isa());
  r.cpuCores = static_cast<int>(std::thread::hardware_concurrency());
  r.gpuEngines = gpuEngineCount();
  r.gpuNames = openClGpuNames();
  r.available = acceleratorNames(r.gpuEngines);
  r.bf16Native = onednn::nativeBf16();
  const dnnl_version_t* v = dnnl_version();
  r.onednnVersion =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  cuda::describe(r);
  if (!r.cudaDevices.empty()) {
    std::vector<std::string> names{r.available.front()};
    for (size_t i = 0; i < r.cudaDevices.size(); ++i)
      names.push_back(i ? "cuda:" + std::to_string(i) : "cuda");
    names.insert(names.end(), r.available.begin() + 1, r.available.end());
    r.available = names;
  }
  return r;
}

Result<std::shared_ptr<Backend>> createBackend(const BackendOptions& o, std::string* notice) {
  if (o.threads < 0) return Status::error("--threads must be >= 0 (0 uses all cores)");
  // OpenMP starts every thread asked for: tens of thousands ran out of resources inside a
  // kernel's parallel region and took the process down.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int maxThreads = std::max(1024, 4 * cores);
  if (o.threads > maxThreads)
    return Status::error("--threads " + std::to_string(o.threads) + " is more than " +
                         std::to_string(maxThreads) + " threads; this machine has " +
                         std::to_string(cores) + " cores (0 uses them all)");
  const auto& precisions = precisionNames();
  if (std::find(precisions.begin(), precisions.end(), o.precision) == precisions.end())
    return Status::error("unknown precision '" + o.precision + "'; use " + joined(precisions));
  const std::string& acc = o.accelerator;
  const bool isAuto = acc == "auto";
  bool gpu = acc == "gpu" || acc.rfind("gpu:", 0) == 0;
  size_t index = 0;
  if (acc.rfind("gpu:", 0) == 0) {
    const std::string n = acc.substr(4);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
      return Status::error("accelerator '" + acc + "': write gpu:N with N the GPU engine index");
    index = std::stoul(n);
  }
  if (acc == "cuda" || acc.rfind("cuda:", 0) == 0) {
    int cudaIndex = 0;
    if (acc.size() > 5) {
      const std::string n = acc.substr(5);
      if (n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
        return Status::error("accelerator '" + acc + "': write cuda:N with N the GPU index");
      cudaIndex = std::stoi(n);
    } else if (acc != "cuda") {
      return Status::error("accelerator '" + acc + "': write cuda:N with N the GPU index");
    }
    auto b = cuda::createBackend(cudaIndex, o);
    if (b && notice) *notice = "accelerator " + acc + ": running on " + (*b)->description();
    return b;
  }
  std::string cudaWhy;
  if (isAuto) {
    std::string& why = cudaWhy;
    if (cuda::deviceCount(&why) > 0) {
      auto b = cuda::createBackend(0, o);
      std::string precisionWhy;
      if (!b && o.precision != "fp32") {
        // A GPU too old for the precision still beats the cpu: run it in fp32 and say so.
        precisionWhy = "; " + b.message() + "; running in fp32";
        BackendOptions co = o;
        co.precision = "fp32";
        b = cuda::createBackend(0, co);
      }
      if (b) {
        if (notice) *notice = "accelerator auto: running on " + (*b)->description() + precisionWhy;
        return b;
      }
      why = b.message();
    }
  }
  if (!gpu && !isAuto && acc != "cpu")
    return Status::error("unknown accelerator '" + acc +
                         "'; use cpu, gpu, gpu:N or auto (cuda, cuda:N: NVIDIA GPUs)");
  if (o.emulateDevice && !gpu)
    return Status::error("emulateDevice (tests only) needs accelerator gpu");
  const int gpus = o.emulateDevice ? static_cast<int>(index) + 1 : gpuEngineCount();
  if (gpu && static_cast<int>(index) >= gpus)
    return Status::error("accelerator '" + acc + "' is not available: " +
                         (gpus == 0
                              ? std::string("oneDNN found no OpenCL GPU engine (Intel GPUs only)")
                              : "oneDNN found " + std::to_string(gpus) + " GPU engine(s)") +
                         ". Available accelerators: " + joined(acceleratorNames(gpus)));
  if (isAuto) gpu = gpus > 0;
  bool bf16 = o.precision == "bf16";
  std::string bf16Notice;
  if (o.precision == "tf32") {
    // TF32 is a tensor-core format; neither oneDNN engine computes in it.
    if (!isAuto)
      return Status::error(
          "precision tf32 runs on accelerator cuda only (NVIDIA GPUs of compute "
          "capability 8.0 or later); on " +
          acc + " use fp32 or bf16");
    bf16Notice = "precision tf32: runs on cuda only; running in fp32";
  }
  // oneDNN's GPU bf16 support depends on the device; the GPU backend is validated in fp32 only.
  if (bf16 && gpu && !isAuto)
    return Status::error(
        "precision bf16 is not available on accelerator gpu (it runs fp32 only). Use precision "
        "fp32, or accelerator cpu");
  std::shared_ptr<onednn::GpuBackend> device;
  // The device first: the reasons (a driver's message can be long) after it.
  std::string choice =
      isAuto ? "accelerator auto: running on cpu (" +
                   (cuda::built() ? "no usable NVIDIA GPU: " + cudaWhy + "; " : std::string()) +
                   "no oneDNN GPU engine found)"
             : "";
  if (gpu) {
    try {
      device = std::make_shared<onednn::GpuBackend>(index, o.threads, o.emulateDevice);
      choice = "accelerator " + acc + ": running on " + device->description();
    } catch (const dnnl::error& e) {
      if (!isAuto)
        return Status::error("accelerator '" + acc + "': oneDNN could not open the GPU engine: " +
                             e.what() + ". Available accelerators: cpu");
      choice = "accelerator auto: running on cpu (oneDNN could not open GPU engine 0: " +
               std::string(e.what()) + ")";
    }
  }
  if (bf16 && device) {
    bf16 = false;
    bf16Notice = "precision bf16: the gpu runs fp32 only; running in fp32";
  }
  if (bf16 && onednn::nativeBf16().empty()) {
    const std::string why = std::string("this CPU has no native bf16 arithmetic (oneDNN ISA ") +
                            isaName(dnnl::get_effective_cpu_isa()) +
                            "; bf16 needs AVX512-BF16 or AMX)";
    // Emulated bf16 would be slower than fp32 and less exact: only auto may quietly degrade.
    if (!isAuto)
      return Status::error("precision bf16 is not available: " + why +
                           ". Use precision fp32, or accelerator auto to fall back to it");
    bf16 = false;
    bf16Notice = "precision bf16: " + why + "; running in fp32";
  }
  if (notice) {
    if (!bf16Notice.empty()) choice += (choice.empty() ? "" : "; ") + bf16Notice;
    *notice = choice;
  }
  if (device) return std::shared_ptr<Backend>(std::move(device));
  return std::shared_ptr<Backend>(new onednn::CpuBackend(o.threads, bf16));
}

}  // namespace dw::engine
