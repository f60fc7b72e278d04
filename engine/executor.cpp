// The executor: runs a plan's nodes in order, moving values between host and device memory for
// the kernels that need them there, converting half-precision inputs for float-only kernels and
// giving each value's buffer back to the pool after its last reader.
#include <algorithm>
#include <chrono>
#include <new>
#include <string>
#include <vector>

#include "engine/plan.h"

namespace dw::engine::detail {

namespace {

class LocalScope : public Scope {
 public:
  LocalScope(const GraphPlan& p, const std::vector<Value>& v, const Scope* parent)
      : plan_(p), values_(v), parent_(parent) {}
  const Value* lookup(const std::string& name) const override {
    auto it = plan_.ids.find(name);
    if (it != plan_.ids.end() && !values_[it->second].isNone()) return &values_[it->second];
    return parent_ ? parent_->lookup(name) : nullptr;
  }
  const RunInfo* runInfo() const override {
    if (plan_.run.set) return &plan_.run;
    return parent_ ? parent_->runInfo() : nullptr;
  }

 private:
  const GraphPlan& plan_;
  const std::vector<Value>& values_;
  const Scope* parent_;
};

bool isHalf(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16;
}

}  // namespace

Status executePlan(GraphPlan& plan, std::vector<Value>& values, Backend& backend, BufferPool& pool,
                   const Scope* parent) {
  LocalScope scope(plan, values, parent);
  for (int id : plan.outerIds) {
    const Value* v = parent ? parent->lookup(plan.names[id]) : nullptr;
    if (v) values[id] = *v;
  }
  for (auto& [id, v] : plan.constants)
    if (values[id].isNone()) values[id] = v;
  // Copies of values in the other memory (device <-> host) for readers there; they go with the
  // value when its last reader has run.
  std::vector<Value> mirrors;
  for (auto& node : plan.nodes) {
    Backend& nodeBackend = node.backend ? *node.backend : backend;
    KernelContext ctx(nodeBackend, pool, &scope, node.memory);
    // Converted half-precision inputs live here for the duration of the call.
    std::vector<Value> converted;
    DType halfType = DType::kUndefined;
    auto shapeOnlyInput = [&](size_t i) { return i < 32 && (node.shapeOnlyInputs >> i & 1u); };
    // The value the kernel reads for input i: values[id] or its copy in the memory it needs.
    auto placed = [&](size_t i, int id) -> Result<const Value*> {
      const Value& v = values[id];
      if (!plan.device || !v.isTensor() || !v.tensor.buffer()) return &v;
      if (shapeOnlyInput(i)) return &v;
      const bool wantDevice = node.memory && !(i < 32 && (node.hostInputs >> i & 1u));
      if (v.tensor.onHost() != wantDevice) return &v;
      if (mirrors.size() < values.size()) mirrors.resize(values.size());
      Value& m = mirrors[id];
      if (m.isTensor() && m.tensor.onHost() != wantDevice) return &m;
      auto cached = plan.deviceConstants.find(id);
      if (wantDevice && cached != plan.deviceConstants.end() &&
          cached->second.host == v.tensor.buffer().get())
        return &cached->second.device;
      const size_t bytes = v.tensor.bytes();
      auto buf = pool.get(bytes, wantDevice ? plan.device : nullptr);
      if (!buf) return buf.status();
      auto copy = wantDevice ? plan.device->toDevice(v.tensor, std::move(*buf))
                             : plan.device->toHost(v.tensor, std::move(*buf));
      if (!copy) return copy.status();
      if (wantDevice &&
          std::any_of(plan.constants.begin(), plan.constants.end(), [&](const auto& c) {
            return c.first == id && c.second.tensor.buffer() == v.tensor.buffer();
          })) {
        auto& dc = plan.deviceConstants[id];
        dc.host = v.tensor.buffer().get();
        dc.device = Value(std::move(*copy));
        return &dc.device;
      }
      m = Value(std::move(*copy));
      return &m;
    };
    if (node.halfViaFloat) {
      for (int id : node.inputs)
        if (id >= 0 && values[id].isTensor() && isHalf(values[id].tensor.dtype()))
          halfType = values[id].tensor.dtype();
    }
    converted.reserve(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int id = node.inputs[i];
      if (id < 0) {
        ctx.inputs_.push_back(nullptr);
        continue;
      }
      auto pv = placed(i, id);
      if (!pv) return pv.status().withContext(node.describe());
      const Value& v = **pv;
      if (halfType != DType::kUndefined && !shapeOnlyInput(i) && v.isTensor() &&
          isHalf(v.tensor.dtype())) {
        auto f = v.tensor.cast(DType::kFloat);
        if (!f) return f.status();
        converted.emplace_back(std::move(*f));
        ctx.inputs_.push_back(&converted.back());
      } else {
        ctx.inputs_.push_back(&v);
      }
    }
    for (int id : node.outputs) ctx.outputs_.push_back(id < 0 ? nullptr : &values[id]);
    ctx.lastRead_ = &node.lastRead;
    Status st;
    const auto t0 = plan.profile ? ProfileClock::now() : ProfileClock::time_point();
    try {
      st = node.kernel->compute(ctx);
    } catch (const std::bad_alloc&) {
      st = Status::error(
          "out of memory: the host could not allocate what this node needs; use a smaller batch "
          "or smaller inputs");
    } catch (const std::exception& e) {
      st = Status::error(std::string("internal error: ") + e.what());
    }
    // Under a device backend kernels only queue work: profiling waits for each, so that the
    // times are the device's.
    if (plan.profile && plan.device && st.ok()) st = plan.device->synchronize();
    if (plan.profile) {
      node.seconds += std::chrono::duration<double>(ProfileClock::now() - t0).count();
      ++node.calls;
    }
    if (!st.ok()) return st.withContext(node.describe());
    for (auto& t : ctx.scratch_) {
      auto b = t.buffer();
      t = Tensor();
      pool.give(std::move(b));
    }
    for (auto& d : ctx.dropped_) releaseValue(d, pool);
    if (halfType != DType::kUndefined) {
      for (int id : node.outputs) {
        if (id >= 0 && values[id].isTensor() && values[id].tensor.dtype() == DType::kFloat) {
          auto h = values[id].tensor.cast(halfType);
          if (!h) return h.status();
          values[id] = Value(std::move(*h));
        }
      }
    }
    if (plan.afterNode) {
      std::vector<int> produced;
      for (int id : node.outputs)
        if (id >= 0 && static_cast<size_t>(id) < plan.isOutput.size() && plan.isOutput[id])
          produced.push_back(id);
      plan.afterNode(produced, values);
    }
    for (int id : node.release) {
      releaseValue(values[id], pool);
      if (static_cast<size_t>(id) < mirrors.size()) releaseValue(mirrors[id], pool);
    }
  }
  return Status();
}

Result<std::vector<Value>> SubgraphImpl::run(KernelContext& caller, std::vector<Value> inputs) {
  GraphPlan& p = *plan_;
  // A body declaring more inputs than its node passes would run nodes on values nobody set.
  if (inputs.size() != p.inputIds.size())
    return Status::error("the body graph takes " + std::to_string(p.inputIds.size()) +
                         " inputs, but its node passes it " + std::to_string(inputs.size()) +
                         "; make the body's inputs match the node's (for Loop: the iteration "
                         "number, the condition, then one per loop-carried value)");
  std::vector<Value> values(p.names.size());
  for (size_t i = 0; i < p.inputIds.size(); ++i) values[p.inputIds[i]] = std::move(inputs[i]);
  DW_RETURN_IF_ERROR(executePlan(p, values, caller.backend(), caller.pool(), caller.scope()));
  std::vector<Value> out;
  out.reserve(p.outputIds.size());
  for (int id : p.outputIds) {
    // The control-flow kernels that run bodies (If, Loop, Scan) are reference kernels: they read a
    // body's results (a loop condition, scan outputs to stack) in host memory.
    if (p.device && values[id].isTensor() && !values[id].tensor.onHost()) {
      auto h = p.device->toHost(values[id].tensor);
      if (!h) return h.status();
      values[id] = Value(std::move(*h));
    }
    out.push_back(values[id]);
  }
  return out;
}

}  // namespace dw::engine::detail
