// Internal to engine/: the plan a session makes of a graph once and then runs many times. The
// planner (planner.cpp) builds it, the executor (executor.cpp) runs it, the profile (profile.cpp)
// reads the times the executor records in it, and InferenceSession (session.cpp) owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/fusion/fusion.h"
#include "engine/kernel.h"
#include "engine/session.h"

// session.h declares GraphPlan in dw::engine, so the plan structures live there rather than in
// detail; nothing outside engine/ includes this header.
namespace dw::engine {

struct PlanNode {
  std::string name, op, domain;
  // For a node of an inlined function body, the node the model has ("'name' (Op, domain)"):
  // errors name it rather than the body's node.
  std::string origin;
  // "node 'name' (op)", or for a body's node "node 'outer' (Outer, domain), in its op".
  std::string describe() const {
    return origin.empty() ? "node '" + name + "' (" + op + ")"
                          : "node " + origin + ", in its " + op;
  }
  int opset = 0;
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;   // value ids, -1 for an omitted optional input
  std::vector<int> outputs;  // value ids, -1 for an omitted optional output
  std::vector<int> release;  // values whose last reader is this node
  std::vector<bool>
      lastRead;  // per input: its value is in `release` (KernelContext::outputReusing)
  bool halfViaFloat = false;
  // Where it runs: the session's backend, or for an op the device backend lacks, its host
  // fallback. `memory` is set when the kernel works on device memory; its inputs are copied
  // there, except those in `hostInputs` (bit i: input i), which it reads on the host.
  Backend* backend = nullptr;
  Backend* memory = nullptr;
  uint32_t hostInputs = 0;
  uint32_t shapeOnlyInputs = 0;
  // For the profile: tensors handed over in nChw16c (markBlockedLayouts), a convolution fused in.
  std::string layouts;
  double seconds = 0;       // kernel time, when the plan is profiled
  double firstSeconds = 0;  // of that, the first run's (algorithm searches, device copies)
  int64_t calls = 0;
};

class GraphPlan {
 public:
  std::vector<std::string> names;
  std::unordered_map<std::string, int> ids;
  std::vector<int> inputIds, outputIds;
  std::vector<std::pair<int, Value>> constants;
  std::vector<int> outerIds;  // read from enclosing scopes
  std::vector<PlanNode> nodes;
  // The backend whose device memory values may live in (cuda), or null.
  Backend* device = nullptr;
  // Device copies of constants, made on first use and kept across runs.
  struct DeviceConstant {
    const Buffer* host = nullptr;  // the constant's own storage (a feed may replace it)
    Value device;
  };
  std::unordered_map<int, DeviceConstant> deviceConstants;
  bool profile = false;
  // Called after each node of a top-level run with the graph outputs it produced (ids into
  // names; often none): InferenceSession::setProgressListener.
  std::function<void(const std::vector<int>& outputs, const std::vector<Value>& values)> afterNode;
  std::vector<bool> isOutput;  // by id, for afterNode; filled when afterNode is set
  RunInfo run;                 // InferenceSession::setRunInfo
  double runSeconds = 0;       // whole runs, when profiled: the rest is the executor's own time
  double firstRunSeconds = 0;
  int64_t runs = 0;

  int id(const std::string& n) {
    auto it = ids.find(n);
    if (it != ids.end()) return it->second;
    int i = static_cast<int>(names.size());
    names.push_back(n);
    ids.emplace(n, i);
    return i;
  }
};

namespace detail {

using ProfileClock = std::chrono::steady_clock;

// The default domain is written both "" and "ai.onnx"; opset maps and kernel lookups use "".
inline std::string normDomain(const std::string& d) {
  return d == "ai.onnx" ? "" : d;
}

// Plans `model`'s main graph for `backend`: function expansion, the fusion passes, topological
// order, kernels and liveness. `inferred` is the graph after shape inference, whose value types
// the placement and the context-dependent function builders read.
Result<std::unique_ptr<GraphPlan>> planModel(const onnx::ModelProto& model,
                                             const onnx::GraphProto& inferred,
                                             const OpsetMap& opsets, Backend& backend,
                                             const SessionOptions& options);

// Runs every node of `plan` in order; `values` holds the plan's values by id, with the graph
// inputs set, and `parent` resolves what a subgraph reads from its enclosing graphs.
Status executePlan(GraphPlan& plan, std::vector<Value>& values, Backend& backend, BufferPool& pool,
                   const Scope* parent);

// The planner compiles If/Loop/Scan bodies into these; the executor runs them (executor.cpp).
class SubgraphImpl : public Subgraph {
 public:
  SubgraphImpl(std::unique_ptr<GraphPlan> plan, std::shared_ptr<BufferPool> unused)
      : plan_(std::move(plan)) {}
  size_t numInputs() const override { return plan_->inputIds.size(); }
  size_t numOutputs() const override { return plan_->outputIds.size(); }
  Result<std::vector<Value>> run(KernelContext& caller, std::vector<Value> inputs) override;

 private:
  std::unique_ptr<GraphPlan> plan_;
};

// Inline: the executor calls it for every value a node releases, and session.cpp too.
inline void releaseValue(Value& v, BufferPool& pool) {
  if (v.isTensor()) {
    auto b = v.tensor.buffer();
    v = Value();
    pool.give(std::move(b));
  } else {
    v = Value();
  }
}

}  // namespace detail
}  // namespace dw::engine
