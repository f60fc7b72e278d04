// InferenceSession: what session.h promises, on top of the planner (planner.cpp) and the
// executor (executor.cpp): checking a model before planning it, checking a run's inputs, and
// handing its outputs back in the memory the caller asked for.
#include "engine/session.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/constant_folding.h"
#include "engine/plan.h"
#include "engine/training/autodiff.h"
#include "graphs/file_io.h"
#include "nodes/catalogue.h"
#include "nodes/schema_facts.h"

namespace dw::engine {

using detail::normDomain;
using detail::ProfileClock;
using detail::releaseValue;

std::string IoInfo::describe() const {
  std::string s = name + ": ";
  if (kind != "tensor") s += kind + "(";
  s += dtypeName(dtype);
  if (hasShape) {
    s += "[";
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i) s += ", ";
      if (dims[i] >= 0)
        s += std::to_string(dims[i]);
      else
        s += dimNames[i].empty() ? "?" : dimNames[i];
    }
    s += "]";
  }
  if (kind != "tensor") s += ")";
  if (hasDefault) s += " (optional, has a default)";
  return s;
}

IoInfo ioInfoFromType(const std::string& name, const onnx::TypeProto& type) {
  IoInfo info;
  info.name = name;
  const onnx::TypeProto* t = &type;
  if (t->has_optional_type()) {
    info.kind = "optional";
    t = &t->optional_type().elem_type();
  }
  if (t->has_sequence_type()) {
    if (info.kind == "tensor") info.kind = "sequence";
    t = &t->sequence_type().elem_type();
  }
  auto fill = [&](const auto& tt) {
    info.dtype = dtypeFromOnnx(tt.elem_type());
    if (!tt.has_shape()) return;
    info.hasShape = true;
    for (const auto& d : tt.shape().dim()) {
      info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      info.dimNames.push_back(d.has_dim_param() ? d.dim_param() : "");
    }
  };
  if (t->has_tensor_type()) fill(t->tensor_type());
  // A sparse tensor is held dense: it is fed and checked as the tensor it stands for.
  if (t->has_sparse_tensor_type()) fill(t->sparse_tensor_type());
  return info;
}

// A run recorded for one set of input shapes: the device work and the private buffers it reads
// and writes (never handed out: inputs are copied into `slots`, device outputs out of
// `outputs`).
struct InferenceSession::Recording {
  int runs = 0;          // runs seen with these shapes
  uint64_t lastUse = 0;  // for evicting the least recently used
  bool failed = false;   // recording was tried and cannot work: run as usual
  std::unique_ptr<BufferPool> pool;
  std::vector<std::pair<int, Tensor>> slots;  // input value id -> its device copy
  std::vector<Value> outputs;                 // by plan output
  std::unique_ptr<RecordedWork> work;
};

// Why this session's runs are never recorded; empty when they may be. Host kernels in a device
// plan must compute only from constants and shapes (their results are baked into the
// recording): anything random, a body to run, or a read of device data rules it out.
std::string InferenceSession::whyNotRecorded(const SessionOptions& o) const {
  const GraphPlan& p = *plan_;
  if (!o.recordRuns) return "SessionOptions::recordRuns is off";
  if (!backend_->canRecord() || !p.device) return backend_->name() + " does not record runs";
  if (const char* e = std::getenv("DEEPWIRE_CUDA_GRAPHS"); e && std::string(e) == "0")
    return "DEEPWIRE_CUDA_GRAPHS=0";
  std::vector<bool> fixed(p.names.size(), false);
  for (const auto& [id, v] : p.constants) fixed[id] = true;
  for (const auto& n : p.nodes) {
    const bool random = n.op.find("Random") != std::string::npos ||
                        n.op.find("Dropout") != std::string::npos || n.op == "Bernoulli" ||
                        n.op == "Multinomial";
    if (random)
      return "node '" + n.name + "' (" + n.op +
             ") draws random numbers, which a replayed recording would draw once";
    if (n.op == "If" || n.op == "Loop" || n.op == "Scan")
      return "node '" + n.name + "' (" + n.op + ") runs a body on the host";
    if (n.memory) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int id = n.inputs[i];
      const bool shapeOnly = i < 32 && (n.shapeOnlyInputs >> i & 1u);
      if (id >= 0 && !shapeOnly && !fixed[id])
        return "node '" + n.name + "' (" + n.op + ") runs on the host from data of the run";
    }
    for (int id : n.outputs)
      if (id >= 0) fixed[id] = true;
  }
  return "";
}

Result<bool> InferenceSession::runRecorded(std::vector<Value>& values) {
  GraphPlan& p = *plan_;
  std::string key;
  for (int id : p.inputIds) {
    const Value& v = values[id];
    if (v.isNone()) {
      key += "-;";
      continue;
    }
    if (!v.isTensor() || v.tensor.dtype() == DType::kString) return false;
    key += std::string(dtypeName(v.tensor.dtype())) + shapeToString(v.tensor.shape()) +
           (v.tensor.onHost() ? "h;" : "d;");
  }
  auto& slot = recordings_[key];
  if (!slot) {
    // Each recording holds a run's worth of device memory: keep the two used last (a training
    // epoch's full batches and its smaller last one).
    while (recordings_.size() > 2) {
      auto oldest = recordings_.end();
      for (auto it = recordings_.begin(); it != recordings_.end(); ++it)
        if (it->second &&
            (oldest == recordings_.end() || it->second->lastUse < oldest->second->lastUse))
          oldest = it;
      recordings_.erase(oldest);
    }
    slot = std::make_unique<Recording>();
  }
  Recording& rec = *slot;
  rec.lastUse = ++useClock_;
  // The first run with these shapes makes the one-time choices (cuDNN's search, device copies
  // of constants) that a recording must not contain.
  if (rec.failed || ++rec.runs < 2) return false;
  if (!rec.work) {
    pool_->dropDeviceBuffers();
    rec.pool = std::make_unique<BufferPool>(pool_->limit());
    rec.pool->keepHostBuffers();
    std::vector<Value> vals(values.size());
    for (int id : p.inputIds) {
      if (!values[id].isTensor()) continue;
      const Tensor& t = values[id].tensor;
      auto buf = rec.pool->get(std::max<size_t>(t.bytes(), 1), p.device);
      if (!buf) return buf.status();
      Tensor copy(t.dtype(), t.shape(), *buf);
      rec.slots.emplace_back(id, copy);
      vals[id] = Value(copy);
    }
    Status st = backend_->beginRecording();
    if (st.ok()) st = detail::executePlan(p, vals, *backend_, *rec.pool, nullptr);
    auto work = backend_->endRecording();
    if (!work) {
      // Something in the run needs the device to finish first: this plan is not recordable.
      // The run goes ahead as usual, and reports any error of its own.
      rec = Recording();
      rec.failed = true;
      if (std::getenv("DEEPWIRE_CUDA_GRAPHS"))
        std::fprintf(stderr, "deepwire: run not recorded: %s%s%s\n",
                     work.status().message().c_str(), st.ok() ? "" : "; ",
                     st.ok() ? "" : st.message().c_str());
      return false;
    }
    if (!st.ok()) {
      rec = Recording();
      return st;
    }
    rec.work = std::move(*work);
    for (int id : p.outputIds) rec.outputs.push_back(vals[id]);
  }
  for (auto& [id, t] : rec.slots) DW_RETURN_IF_ERROR(backend_->copyInto(values[id].tensor, t));
  for (auto& n : p.nodes)
    DW_RETURN_IF_ERROR(n.kernel->beforeReplay().withContext("node '" + n.name + "'"));
  DW_RETURN_IF_ERROR(rec.work->replay());
  ++replays_;
  for (size_t i = 0; i < p.outputIds.size(); ++i) {
    const Value& g = rec.outputs[i];
    Value& out = values[p.outputIds[i]];
    if (!g.isTensor() || !g.tensor.buffer()) {
      out = g;
      continue;
    }
    // Fresh copies for the caller, who may keep them past the next replay.
    const Tensor& t = g.tensor;
    if (t.onHost()) {
      auto buf = pool_->get(t.bytes());
      if (!buf) return buf.status();
      Tensor h(t.dtype(), t.shape(), *buf);
      if (t.bytes()) std::memcpy(h.raw(), t.raw(), t.bytes());
      out = Value(std::move(h));
    } else if (deviceOutputs_.count(outputs_[i].name)) {
      auto buf = pool_->get(std::max<size_t>(t.bytes(), 1), p.device);
      if (!buf) return buf.status();
      Tensor d(t.dtype(), t.shape(), *buf);
      DW_RETURN_IF_ERROR(backend_->copyInto(t, d));
      out = Value(std::move(d));
    } else {
      out = g;  // copied to the host below, straight from the recording's buffer
    }
  }
  return true;
}

InferenceSession::~InferenceSession() {
  // DEEPWIRE_PROFILE=N lists the N costliest nodes (1 or any other value: 12).
  const char* env = std::getenv("DEEPWIRE_PROFILE");
  if (plan_ && plan_->profile && plan_->runs > 0 && env) {
    const long top = std::strtol(env, nullptr, 10);
    std::fprintf(stderr, "%s", profileReport(top > 1 ? static_cast<size_t>(top) : 12).c_str());
  }
}

std::map<std::string, std::string> InferenceSession::placement() const {
  std::map<std::string, std::string> m;
  for (const auto& n : plan_->nodes) m[n.name] = n.backend ? n.backend->name() : backend_->name();
  return m;
}

size_t InferenceSession::allocationCount() const {
  return pool_->allocations();
}

std::string InferenceSession::describeInputs() const {
  std::string s;
  for (const auto& i : inputs_) s += "  " + i.describe() + "\n";
  return s;
}

Result<std::unique_ptr<InferenceSession>> InferenceSession::create(const onnx::ModelProto& model,
                                                                   const SessionOptions& options) {
  // The catalogue registers the gradient ops' ONNX schemas, which validation, shape inference
  // and the planner's type propagation read: a training graph run on its own needs them too.
  (void)Catalogue::instance();
  if (!model.has_graph()) return Status::error("the model has no graph");
  OpsetMap opsets;
  for (const auto& imp : model.opset_import())
    opsets[normDomain(imp.domain())] = static_cast<int>(imp.version());
  if (model.opset_import_size() == 0) opsets[""] = 1;  // IR v1/v2 models predate opset_import
  // Arity and window attributes first: autodiff, libonnx's shape inference and the kernels all
  // assume them (a missing input was a null read, a zero stride a division by zero).
  bool inferenceUnsafe = false;
  DW_RETURN_IF_ERROR(validateModelNodes(model, inferenceUnsafe));
  // ONNX Gradient nodes (ai.onnx.preview.training) are replaced by the backward nodes that
  // compute them (engine/training/autodiff) before planning.
  if (training::hasGradientOps(model)) {
    auto expanded = training::expandGradientOps(model);
    if (!expanded) return expanded.status();
    return create(*expanded, options);
  }
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  auto backend = createBackend(options.backend, &s->notice_);
  if (!backend) return backend.status();
  s->backend_ = std::move(*backend);
  const size_t limit = options.memoryLimitBytes ? options.memoryLimitBytes : availableMemoryBytes();
  s->pool_ = std::make_unique<BufferPool>(limit);

  // Static shapes where ONNX can infer them; failures only cost us static information.
  onnx::ModelProto inferred = model;
  // Before IR version 4 every initializer was also a graph input, and shape inference types
  // only those; a file that declares an older version without listing them (a damaged header)
  // left its initializers untyped, every shape after them unknown, and the size check below
  // blind to a Pad of 44 TB until the nodes before it had run.
  if (inferred.ir_version() < 4) inferred.set_ir_version(4);
  if (!inferValidatedShapes(inferred, inferenceUnsafe, false, 0, false).ok()) inferred = model;
  DW_RETURN_IF_ERROR(checkInputTypes(inferred));
  // Only its types are read from here on: the weights in it would be a third copy while the
  // folded model is made (the planner types initializers from the model it plans).
  inferred.mutable_graph()->clear_initializer();
  // Folding constants can tell shape inference what it could not see (the starts of a Slice
  // computed from a Shape): the folded model is inferred again and planned as it is then.
  bool foldedPlan = false;
  if (options.foldConstants) {
    if (auto folded = foldConstants(model, inferred.graph())) {
      if (folded->ir_version() < 4) folded->set_ir_version(4);
      if (inferValidatedShapes(*folded, inferenceUnsafe, false, 0, false).ok()) {
        inferred = std::move(*folded);
        foldedPlan = true;
      }
    }
  }
  const onnx::ModelProto& planned = foldedPlan ? inferred : model;
  const auto& ig = inferred.graph();

  // Refuse models that declare tensors larger than memory, or whose shapes make one, before
  // allocating anything. A value made by a node is named with that node.
  auto checkDeclared = [&](const onnx::ValueInfoProto& v) -> Status {
    IoInfo info = ioInfoFromType(v.name(), v.type());
    if (!info.hasShape || info.dtype == DType::kUndefined || info.dtype == DType::kString)
      return Status();
    long double bytes = dtypeSize(info.dtype);
    for (int64_t d : info.dims) {
      if (d < 0) return Status();
      bytes *= d;
    }
    if (bytes <= static_cast<long double>(limit)) return Status();
    char count[32];  // beyond 2^64 the count is only printable in floating point
    std::snprintf(count, sizeof(count), bytes < 1e19L ? "%.0Lf" : "%.3Lg", bytes);
    const std::string size = info.describe() + " (" + count + " bytes), more than the " +
                             std::to_string(limit) + " bytes of available memory";
    const auto& nodes = planned.graph().node();
    const auto made = std::find_if(nodes.begin(), nodes.end(), [&](const onnx::NodeProto& n) {
      return std::find(n.output().begin(), n.output().end(), v.name()) != n.output().end();
    });
    if (made == nodes.end())
      return Status::error("tensor '" + v.name() + "' is declared as " + size);
    const onnx::NodeProto& n = *made;
    return Status::error("node '" + nodeName(n) + "' (" + n.op_type() + ") would make " + size +
                         "; check the node's inputs and attributes (pads, scales, shapes)");
  };
  for (const auto& v : ig.input()) DW_RETURN_IF_ERROR(checkDeclared(v));
  for (const auto& v : ig.output()) DW_RETURN_IF_ERROR(checkDeclared(v));
  for (const auto& v : ig.value_info()) DW_RETURN_IF_ERROR(checkDeclared(v));

  auto plan = detail::planModel(planned, ig, opsets, *s->backend_, options);
  if (!plan) return plan.status();
  s->plan_ = std::move(*plan);
  s->plan_->profile = options.profile || std::getenv("DEEPWIRE_PROFILE") != nullptr;
  s->deviceOutputs_ = options.deviceOutputs;
  s->notRecorded_ = s->whyNotRecorded(options);

  std::set<std::string> inits;
  for (const auto& i : model.graph().initializer()) inits.insert(i.name());
  for (const auto& v : model.graph().input()) {
    IoInfo info = ioInfoFromType(v.name(), v.type());
    info.hasDefault = inits.count(v.name()) != 0;
    s->inputs_.push_back(info);
  }
  for (const auto& v : model.graph().output())
    s->outputs_.push_back(ioInfoFromType(v.name(), v.type()));
  return s;
}

Result<std::map<std::string, Value>> InferenceSession::runValues(
    const std::map<std::string, Value>& inputs) {
  GraphPlan& p = *plan_;
  std::vector<Value> values(p.names.size());
  for (const auto& [name, v] : inputs) {
    auto it = std::find_if(inputs_.begin(), inputs_.end(),
                           [&n = name](const IoInfo& i) { return i.name == n; });
    if (it == inputs_.end())
      return Status::error("the model has no input named '" + name + "'; expected inputs:\n" +
                           describeInputs());
    const IoInfo& info = *it;
    if (info.kind == "tensor") {
      if (!v.isTensor()) return Status::error("input '" + name + "' must be a tensor");
      const Tensor& t = v.tensor;
      if (info.dtype != DType::kUndefined && t.dtype() != info.dtype)
        return Status::error(
            "input '" + name + "' has dtype " + dtypeName(t.dtype()) + ", but the model expects " +
            info.describe() + "; convert it to " + dtypeName(info.dtype) + " first" +
            // numpy has no bfloat16 of its own
            (info.dtype == DType::kBFloat16
                 ? std::string()
                 : std::string(" (numpy: a.astype('") + dtypeName(info.dtype) + "'))"));
      if (info.hasShape) {
        bool okShape = t.rank() == info.dims.size();
        for (size_t d = 0; okShape && d < info.dims.size(); ++d)
          okShape = info.dims[d] < 0 || info.dims[d] == t.dim(d);
        if (!okShape) {
          // A fixed batch (torch's export without dynamic_axes) is the usual cause: say so.
          bool onlyBatch = t.rank() == info.dims.size() && !info.dims.empty() && info.dims[0] > 0 &&
                           info.dims[0] != t.dim(0);
          for (size_t d = 1; onlyBatch && d < info.dims.size(); ++d)
            onlyBatch = info.dims[d] < 0 || info.dims[d] == t.dim(d);
          return Status::error(
              "input '" + name + "' has shape " + shapeToString(t.shape()) +
              ", but the model expects " + info.describe() +
              (onlyBatch ? "; the model takes batches of exactly " + std::to_string(info.dims[0]) +
                               " (a free batch dimension, N in the Input's type, takes any)"
                         : ""));
        }
      }
    } else if (info.kind == "sequence" && !v.isSequence()) {
      return Status::error("input '" + name + "' must be a sequence of tensors");
    }
    values[p.ids.at(name)] = v;
  }
  std::vector<std::string> missing;
  for (const auto& i : inputs_)
    if (!inputs.count(i.name) && !i.hasDefault && i.kind != "optional") missing.push_back(i.name);
  if (!missing.empty()) {
    std::string m;
    for (const auto& x : missing) m += (m.empty() ? "" : ", ") + ("'" + x + "'");
    return Status::error("missing input " + m + "; the model expects:\n" + describeInputs());
  }
  const auto runLock = backend_->lockRun();
  reclaimOutputs();
  backend_->applyThreads();
  bool replayed = false;
  if (notRecorded_.empty() && !p.profile) {  // profiling times nodes, which replays skip
    auto r = runRecorded(values);
    if (!r) return r.status();
    replayed = *r;
  }
  const auto t0 = ProfileClock::now();
  if (!replayed) DW_RETURN_IF_ERROR(detail::executePlan(p, values, *backend_, *pool_, nullptr));
  if (p.profile) {
    p.runSeconds += std::chrono::duration<double>(ProfileClock::now() - t0).count();
    if (++p.runs == 1) {
      // The first run pays for one-time work (cuDNN's algorithm search, constants copied to the
      // device, oneDNN primitive creation): the report keeps it apart from the steady state.
      p.firstRunSeconds = p.runSeconds;
      for (auto& n : p.nodes) n.firstSeconds = n.seconds;
    }
  }
  std::map<std::string, Value> out;
  bool queued = false;  // device outputs copied down: one wait for all of them, below
  for (size_t i = 0; i < p.outputIds.size(); ++i) {
    Value& v = values[p.outputIds[i]];
    if (p.device && v.isTensor() && v.tensor.onHost() && v.tensor.buffer() &&
        deviceOutputs_.count(outputs_[i].name)) {
      // Produced by a host kernel: the caller asked for it in device memory.
      auto d = p.device->toDevice(v.tensor);
      if (!d) return d.status().withContext("output '" + outputs_[i].name + "'");
      v = Value(std::move(*d));
    }
    if (v.isTensor() && !v.tensor.onHost() && !deviceOutputs_.count(outputs_[i].name)) {
      auto buf = pool_->get(v.tensor.bytes());
      if (!buf) return buf.status();
      queued = true;
      auto host = backend_->toHostQueued(v.tensor, std::move(*buf));
      if (!host) return host.status().withContext("output '" + outputs_[i].name + "'");
      releaseValue(v, *pool_);
      v = Value(std::move(*host));
    }
    if (v.isTensor() && v.tensor.buffer()) handedOut_.push_back(v.tensor.buffer());
    out[outputs_[i].name] = v;
  }
  if (queued) DW_RETURN_IF_ERROR(backend_->synchronize());
  return out;
}

void InferenceSession::reclaimOutputs() {
  // Callers usually drop a run's outputs (or replace them with the next run's) before running
  // again, so their buffers serve the next run; those still held stay tracked for a few runs and
  // are then forgotten, so a caller that keeps every output never makes this list grow.
  std::vector<std::shared_ptr<Buffer>> still;
  for (auto& b : handedOut_) {
    if (b.use_count() == 1)
      pool_->give(std::move(b));
    else
      still.push_back(std::move(b));
  }
  const size_t keep = 4 * outputs_.size() + 4;
  if (still.size() > keep) still.erase(still.begin(), still.end() - static_cast<long>(keep));
  handedOut_ = std::move(still);
}

Result<std::map<std::string, Tensor>> InferenceSession::run(
    const std::map<std::string, Tensor>& inputs) {
  std::map<std::string, Value> in;
  for (const auto& [k, t] : inputs) in.emplace(k, Value(t));
  auto r = runValues(in);
  if (!r) return r.status();
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : *r) {
    if (!v.isTensor())
      return Status::error("output '" + k +
                           "' is not a tensor; use runValues for sequences and optionals");
    out.emplace(k, std::move(v.tensor));
  }
  return out;
}

void InferenceSession::setRunInfo(const RunInfo& info) {
  plan_->run = info;
  plan_->run.set = true;
}

void InferenceSession::setProgressListener(ProgressListener listener) {
  GraphPlan& p = *plan_;
  if (!listener) {
    p.afterNode = nullptr;
    return;
  }
  p.isOutput.assign(p.names.size(), false);
  for (int id : p.outputIds) p.isOutput[static_cast<size_t>(id)] = true;
  p.afterNode = [&p, listener = std::move(listener)](const std::vector<int>& outputs,
                                                     const std::vector<Value>& values) {
    std::vector<std::pair<std::string, const Tensor*>> produced;
    for (int id : outputs)
      if (values[static_cast<size_t>(id)].isTensor())
        produced.emplace_back(p.names[static_cast<size_t>(id)],
                              &values[static_cast<size_t>(id)].tensor);
    listener(produced);
  };
}

Result<std::unique_ptr<onnx::ModelProto>> loadOnnxModel(const std::string& path) {
  auto m = readOnnxFile(path);  // external data read in from the model's folder
  if (!m.ok()) return m.status();
  return std::make_unique<onnx::ModelProto>(std::move(*m));
}

}  // namespace dw::engine
