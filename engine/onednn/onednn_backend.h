// Internal: the oneDNN-backed CPU backend. oneDNN types stay inside engine/onednn/.
#pragma once

#include <dnnl.hpp>

#include "engine/backend.h"
#include "engine/kernel.h"
#include "engine/tensor.h"

namespace dw::engine::onednn {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  int threads() const override { return threads_; }
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

 private:
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
};

// The oneDNN engine of whatever backend a kernel runs on (a CPU engine today).
CpuBackend& cpuBackend(Backend& b);

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

}  // namespace dw::engine::onednn
