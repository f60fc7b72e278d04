#include <CL/cl.h>
#include <omp.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "engine/onednn/onednn_backend.h"

namespace dw::engine {

namespace onednn {

CpuBackend::CpuBackend(int threads, bool bf16)
    : threads_(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency())),
      bf16_(bf16),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {
  // This oneDNN build uses the OpenMP runtime, so the thread count is OpenMP's.
  omp_set_num_threads(threads_);
}

std::string CpuBackend::description() const {
  return "cpu (oneDNN, " + std::to_string(threads_) + " threads" +
         (bf16_ ? ", bf16 mixed precision on " + nativeBf16() : std::string()) + ")";
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

CpuBackend& cpuBackend(Backend& b) {
  return static_cast<CpuBackend&>(b);
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
  auto info = [](cl_device_id d, cl_device_info what) {
    size_t n = 0;
    if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return std::string();
    std::string v(n, '\0');
    clGetDeviceInfo(d, what, n, v.data(), nullptr);
    while (!v.empty() && v.back() == '\0') v.pop_back();
    return v;
  };
  for (auto p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devs(nd);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, nd, devs.data(), nullptr) != CL_SUCCESS) continue;
    for (auto d : devs) names.push_back(info(d, CL_DEVICE_VENDOR) + ": " + info(d, CL_DEVICE_NAME));
  }
  return names;
}

}  // namespace

DeviceReport devices() {
  DeviceReport r;
  r.cpuModel = cpuModelName();
  r.cpuIsa = isaName(dnnl::get_effective_cpu_isa());
  r.cpuCores = static_cast<int>(std::thread::hardware_concurrency());
  r.gpuEngines = gpuEngineCount();
  r.gpuNames = openClGpuNames();
  r.available.push_back("cpu");
  r.bf16Native = onednn::nativeBf16();
  const dnnl_version_t* v = dnnl_version();
  r.onednnVersion =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  return r;
}

Result<std::shared_ptr<Backend>> createBackend(const BackendOptions& o, std::string* notice) {
  if (o.threads < 0) return Status::error("--threads must be >= 0 (0 uses all cores)");
  if (o.precision != "fp32" && o.precision != "bf16")
    return Status::error("unknown precision '" + o.precision + "'; use fp32 or bf16");
  bool bf16 = o.precision == "bf16";
  std::string bf16Notice;
  if (bf16 && onednn::nativeBf16().empty()) {
    const std::string why = std::string("this CPU has no native bf16 arithmetic (oneDNN ISA ") +
                            isaName(dnnl::get_effective_cpu_isa()) +
                            "; bf16 needs AVX512-BF16 or AMX)";
    // Emulated bf16 would be slower than fp32 and less exact: only auto may quietly degrade.
    if (o.accelerator != "auto")
      return Status::error("precision bf16 is not available: " + why +
                           ". Use precision fp32, or accelerator auto to fall back to it");
    bf16 = false;
    bf16Notice = "precision bf16: " + why + "; running in fp32";
  }
  auto withNotice = [&](std::string n) {
    if (!notice) return;
    if (!bf16Notice.empty()) n += (n.empty() ? "" : "; ") + bf16Notice;
    *notice = n;
  };
  if (o.accelerator == "cpu") {
    withNotice("");
    return std::shared_ptr<Backend>(new onednn::CpuBackend(o.threads, bf16));
  }
  const int gpus = gpuEngineCount();
  if (o.accelerator == "gpu") {
    if (gpus == 0)
      return Status::error(
          "accelerator 'gpu' is not available: oneDNN found no OpenCL GPU engine (Intel GPUs "
          "only). Available accelerators: cpu");
    return Status::error("accelerator 'gpu': " + std::to_string(gpus) +
                         " oneDNN GPU engine(s) found, but this build has no GPU kernels yet. "
                         "Available accelerators: cpu");
  }
  if (o.accelerator == "auto") {
    withNotice(gpus == 0 ? "accelerator auto: no oneDNN GPU engine found, running on cpu"
                         : "accelerator auto: " + std::to_string(gpus) +
                               " oneDNN GPU engine(s) found, but GPU kernels are not built; "
                               "running on cpu");
    return std::shared_ptr<Backend>(new onednn::CpuBackend(o.threads, bf16));
  }
  return Status::error("unknown accelerator '" + o.accelerator + "'; use cpu, gpu or auto");
}

}  // namespace dw::engine
