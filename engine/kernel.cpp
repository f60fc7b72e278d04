#include "engine/kernel.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <mutex>

#include "engine/backend.h"
#include "engine/cuda/cuda.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

Attributes::Attributes(const Attributes& o) {
  *this = o;
}
Attributes& Attributes::operator=(const Attributes& o) {
  if (this == &o) return *this;
  attrs_.clear();
  for (const auto& [k, v] : o.attrs_) attrs_[k] = std::make_unique<onnx::AttributeProto>(*v);
  return *this;
}
Attributes::~Attributes() = default;

void Attributes::set(const onnx::AttributeProto& a) {
  attrs_[a.name()] = std::make_unique<onnx::AttributeProto>(a);
}
bool Attributes::has(const std::string& n) const {
  return attrs_.count(n) != 0;
}
const onnx::AttributeProto* Attributes::get(const std::string& n) const {
  auto it = attrs_.find(n);
  return it == attrs_.end() ? nullptr : it->second.get();
}
int64_t Attributes::getInt(const std::string& n, int64_t def) const {
  auto* a = get(n);
  return a && a->has_i() ? a->i() : def;
}
float Attributes::getFloat(const std::string& n, float def) const {
  auto* a = get(n);
  return a && a->has_f() ? a->f() : def;
}
std::string Attributes::getString(const std::string& n, const std::string& def) const {
  auto* a = get(n);
  return a && a->has_s() ? a->s() : def;
}
std::vector<int64_t> Attributes::getInts(const std::string& n, std::vector<int64_t> def) const {
  auto* a = get(n);
  if (!a || a->type() != onnx::AttributeProto::INTS) return def;
  return {a->ints().begin(), a->ints().end()};
}
std::vector<float> Attributes::getFloats(const std::string& n, std::vector<float> def) const {
  auto* a = get(n);
  if (!a || a->type() != onnx::AttributeProto::FLOATS) return def;
  return {a->floats().begin(), a->floats().end()};
}
std::vector<std::string> Attributes::getStrings(const std::string& n) const {
  auto* a = get(n);
  if (!a) return {};
  return {a->strings().begin(), a->strings().end()};
}
const onnx::TensorProto* Attributes::getTensor(const std::string& n) const {
  auto* a = get(n);
  return a && a->has_t() ? &a->t() : nullptr;
}

Tensor* KernelContext::output(size_t i, DType dtype, Shape shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      status_ = Status::error("negative output dimension in " + shapeToString(shape));
      return nullptr;
    }
  }
  Value* slot = wantsOutput(i) ? outputs_[i] : nullptr;
  if (!slot) {
    dropped_.emplace_back();
    slot = &dropped_.back();
  }
  if (dtype == DType::kString) {
    *slot = Value(Tensor(dtype, std::move(shape)));
    return &slot->tensor;
  }
  size_t bytes = static_cast<size_t>(numElements(shape)) * dtypeSize(dtype);
  auto buf = pool_.get(bytes, memory_);
  if (!buf) {
    status_ = buf.status();
    return nullptr;
  }
  *slot = Value(Tensor(dtype, std::move(shape), std::move(*buf)));
  return &slot->tensor;
}

Tensor* KernelContext::outputReusing(size_t i, size_t in, DType dtype, Shape shape) {
  const bool can = [&] {
    if (!wantsOutput(i) || !lastRead_ || in >= lastRead_->size() || !(*lastRead_)[in] ||
        !hasInput(in))
      return false;
    const Tensor& t = input(in);
    const auto& b = t.buffer();
    // use_count 1: only the value itself (no view, constant or graph output shares it).
    if (!b || b.use_count() != 1 || t.dtype() != dtype || t.shape() != shape ||
        t.device() != (memory_ ? memory_->memory() : Device::kHost))
      return false;
    for (size_t j = 0; j < inputs_.size(); ++j)
      if (j != in && hasInput(j) && input(j).buffer() == b) return false;
    return true;
  }();
  if (!can) return output(i, dtype, std::move(shape));
  *outputs_[i] = Value(Tensor(dtype, std::move(shape), input(in).buffer()));
  return &outputs_[i]->tensor;
}

void KernelContext::setOutput(size_t i, Value v) {
  if (wantsOutput(i)) *outputs_[i] = std::move(v);
}

Tensor* KernelContext::scratch(DType dtype, Shape shape) {
  size_t bytes = static_cast<size_t>(numElements(shape)) * dtypeSize(dtype);
  auto buf = pool_.get(bytes, memory_);
  if (!buf) {
    status_ = buf.status();
    return nullptr;
  }
  scratch_.emplace_back(dtype, std::move(shape), std::move(*buf));
  return &scratch_.back();
}

Result<std::shared_ptr<Buffer>> BufferPool::get(size_t bytes, Backend* device) {
  auto& list = device ? deviceFree_ : free_;
  auto it = list.lower_bound(bytes);
  // Reuse only buffers of similar size so a tiny tensor doesn't pin a huge one.
  if (it != list.end() && it->first <= bytes * 2 + 4096) {
    auto b = std::move(it->second);
    list.erase(it);
    return b;
  }
  if (device) {
    auto b = device->allocate(bytes);
    if (b) ++allocations_;
    return b;
  }
  if (bytes > limit_)
    return Status::error("tensor of " + std::to_string(bytes) +
                         " bytes exceeds available memory (" + std::to_string(limit_) +
                         " bytes MemAvailable)");
  try {
    ++allocations_;
    return std::make_shared<Buffer>(bytes);
  } catch (const std::bad_alloc&) {
    return Status::error("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
}

void BufferPool::give(std::shared_ptr<Buffer> b) {
  if (!b || b.use_count() != 1) return;
  if (keepHost_ && b->device == Device::kHost) {
    keptHost_.push_back(std::move(b));
    return;
  }
  auto& list = b->device == Device::kHost ? free_ : deviceFree_;
  list.emplace(b->capacity, std::move(b));
}

size_t availableMemoryBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return size_t(1) << 40;
}

void KernelRegistry::add(KernelDef def) {
  std::string key = def.domain + ":" + def.op;
  defs_.emplace(std::move(key), std::move(def));
}

void KernelRegistry::add(const std::string& table, const std::string& op, int since, int until,
                         KernelFactory f, bool halfViaFloat, const std::string& domain) {
  KernelDef d;
  d.domain = domain;
  d.op = op;
  d.since = since;
  d.until = until;
  d.table = table;
  d.factory = f;
  d.halfViaFloat = halfViaFloat;
  add(std::move(d));
}

const KernelDef* KernelRegistry::find(const std::string& domain, const std::string& op, int opset,
                                      const std::string& table) const {
  std::string dom = domain == "ai.onnx" ? "" : domain;
  auto range = defs_.equal_range(dom + ":" + op);
  for (auto it = range.first; it != range.second; ++it) {
    const KernelDef& d = it->second;
    if (d.table == table && opset >= d.since && opset <= d.until) return &d;
  }
  return nullptr;
}

void KernelRegistry::setShapeOnlyInputs(const std::string& table, const std::string& op,
                                        uint32_t mask, const std::string& domain) {
  auto range = defs_.equal_range(domain + ":" + op);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second.table == table) it->second.shapeOnlyInputs = mask;
}

std::vector<const KernelDef*> KernelRegistry::all() const {
  std::vector<const KernelDef*> r;
  for (const auto& [k, d] : defs_) r.push_back(&d);
  return r;
}

const KernelRegistry& KernelRegistry::global() {
  static const KernelRegistry reg = [] {
    KernelRegistry r;
    registerOneDnnKernels(r);
    registerReferenceKernels(r);
    cuda::registerKernels(r);  // last: its view kernels are copies of the reference table's
    return r;
  }();
  return reg;
}

}  // namespace dw::engine
