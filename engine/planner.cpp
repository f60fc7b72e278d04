#include "engine/session.h"

#include "graphs/subgraph.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/fusion/fused.h"
#include "engine/fusion/fusion.h"
#include "engine/fusion/graph_queries.h"
#include "engine/kernel.h"
#include "engine/onnx_attrs.h"
#include "engine/training/autodiff.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"
#include "nodes/schema_facts.h"

namespace dw::engine {

using fusion::displayName;

namespace {

std::string displayDomain(const std::string& d) {
  return d.empty() ? "ai.onnx" : d;
}
std::string normDomain(const std::string& d) {
  return d == "ai.onnx" ? "" : d;
}

}  // namespace

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
  if (t->has_tensor_type()) {
    const auto& tt = t->tensor_type();
    info.dtype = dtypeFromOnnx(tt.elem_type());
    if (tt.has_shape()) {
      info.hasShape = true;
      for (const auto& d : tt.shape().dim()) {
        info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
        info.dimNames.push_back(d.has_dim_param() ? d.dim_param() : "");
      }
    }
  }
  return info;
}

// ---------------------------------------------------------------------------------------------
// Planning

struct PlanNode {
  std::string name, op, domain;
  int opset = 0;
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;   // value ids, -1 for an omitted optional input
  std::vector<int> outputs;  // value ids, -1 for an omitted optional output
  std::vector<int> release;  // values whose last reader is this node
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
  double seconds = 0;  // kernel time, when the plan is profiled
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
  double runSeconds = 0;  // whole runs, when profiled: the rest is the executor's own time
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

namespace {

struct Placement {
  const KernelDef* def = nullptr;
  Backend* backend = nullptr;
};

struct Planner {
  Backend* backend;
  const KernelRegistry* registry;
  // Types known from shape inference, used by context-dependent function builders.
  std::unordered_map<std::string, onnx::TypeProto> types;
  std::map<std::string, const onnx::FunctionProto*> localFunctions;  // "domain:name"
  int counter = 0;
  bool fuse = true;            // SessionOptions::fuse
  bool blockedLayouts = true;  // SessionOptions::blockedLayouts
  // Initializers of the graph being planned (and its enclosing ones) that are not graph inputs:
  // KernelInit::constantInputs.
  std::set<std::string> constants;

  Result<std::unique_ptr<GraphPlan>> plan(const onnx::GraphProto& g, const OpsetMap& opsets,
                                          const std::set<std::string>& outerNames);
  Status expand(const onnx::NodeProto& node, const OpsetMap& opsets,
                std::vector<std::pair<onnx::NodeProto, OpsetMap>>& out, int depth,
                const onnx::TypeProto* fallbackType = nullptr);
  Status buildKernel(PlanNode& pn, const onnx::NodeProto& node, const OpsetMap& opsets,
                     const std::set<std::string>& visible);
  void propagateTypes(const onnx::NodeProto& node, const OpsetMap& opsets);
  // Which table's kernel runs `node` (with `init`'s attributes), judged on its input types
  // (given back in `inTypes` when asked).
  Placement place(const onnx::NodeProto& node, const KernelInit& init,
                  std::vector<DType>* inTypes = nullptr);
};

// The backend's own table first (when its kernel supports the node: `init` and `types` given),
// then for a device backend its host fallback's table, then the reference table.
Placement findKernel(const KernelRegistry& r, Backend& b, const std::string& domain,
                     const std::string& op, int opset, const KernelInit* init = nullptr,
                     const std::vector<DType>* types = nullptr) {
  if (auto* d = r.find(domain, op, opset, b.kernelTable()))
    if (!d->supports || !init || d->supports(*init, *types)) return {d, &b};
  Backend* host = b.hostBackend() ? b.hostBackend() : &b;
  if (host != &b)
    if (auto* d = r.find(domain, op, opset, host->kernelTable())) return {d, host};
  return {r.find(domain, op, opset, kReferenceTable), host};
}

int opsetFor(const OpsetMap& m, const std::string& domain) {
  auto it = m.find(normDomain(domain));
  return it == m.end() ? -1 : it->second;
}

// Names a graph reads without defining them: what it needs from enclosing scopes.
void applyDefaults(const onnx::OpSchema* schema, const onnx::NodeProto& node, Attributes& attrs) {
  if (schema) {
    for (const auto& [name, a] : schema->attributes()) {
      if (a.default_value.type() != onnx::AttributeProto::UNDEFINED || a.default_value.has_f() ||
          a.default_value.has_i() || a.default_value.has_s()) {
        onnx::AttributeProto d = a.default_value;
        d.set_name(name);
        attrs.set(d);
      }
    }
  }
  for (const auto& a : node.attribute()) attrs.set(a);
}

// Renames references to function-scope values inside a body node's subgraphs; names the
// subgraph defines itself shadow them.
void renameInSubgraph(onnx::GraphProto* g,
                      const std::unordered_map<std::string, std::string>& rename) {
  std::set<std::string> local;
  for (const auto& i : g->input()) local.insert(i.name());
  for (const auto& i : g->initializer()) local.insert(i.name());
  for (const auto& n : g->node())
    for (const auto& o : n.output()) local.insert(o);
  auto fix = [&](const std::string& n) -> std::string {
    if (local.count(n)) return n;
    auto it = rename.find(n);
    return it == rename.end() ? n : it->second;
  };
  for (auto& n : *g->mutable_node()) {
    for (int i = 0; i < n.input_size(); ++i) n.set_input(i, fix(n.input(i)));
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) renameInSubgraph(a.mutable_g(), rename);
      for (auto& sg : *a.mutable_graphs()) renameInSubgraph(&sg, rename);
    }
  }
  for (auto& o : *g->mutable_output()) o.set_name(fix(o.name()));
}

// Inlines a function body for `node`: formal parameters map to the node's actual values,
// internal values get unique names, and attribute references take the node's values.
Status inlineFunction(const onnx::NodeProto& node, const onnx::FunctionProto& fn,
                      const Attributes& attrs, int uid, std::vector<onnx::NodeProto>& out) {
  std::unordered_map<std::string, std::string> rename;
  for (int i = 0; i < fn.input_size(); ++i)
    rename[fn.input(i)] = i < node.input_size() ? node.input(i) : "";
  for (int i = 0; i < fn.output_size(); ++i)
    rename[fn.output(i)] = i < node.output_size() ? node.output(i) : "";
  const std::string prefix = "__fn" + std::to_string(uid) + "_" +
                             (node.name().empty() ? node.op_type() : node.name()) + "/";
  auto map = [&](const std::string& n) -> std::string {
    if (n.empty()) return n;
    auto it = rename.find(n);
    if (it != rename.end()) return it->second;
    return rename[n] = prefix + n;
  };
  for (const auto& bn : fn.node()) {
    onnx::NodeProto n = bn;
    n.set_name(prefix + bn.name());
    for (int i = 0; i < n.input_size(); ++i) n.set_input(i, map(bn.input(i)));
    for (int i = 0; i < n.output_size(); ++i) n.set_output(i, map(bn.output(i)));
    n.clear_attribute();
    for (const auto& a : bn.attribute()) {
      if (!a.ref_attr_name().empty()) {
        if (const auto* v = attrs.get(a.ref_attr_name())) {
          onnx::AttributeProto c = *v;
          c.set_name(a.name());
          *n.add_attribute() = c;
        }
      } else {
        onnx::AttributeProto c = a;
        if (c.has_g()) renameInSubgraph(c.mutable_g(), rename);
        for (auto& sg : *c.mutable_graphs()) renameInSubgraph(&sg, rename);
        *n.add_attribute() = c;
      }
    }
    out.push_back(std::move(n));
  }
  return Status();
}

}  // namespace

Status Planner::expand(const onnx::NodeProto& node, const OpsetMap& opsets,
                       std::vector<std::pair<onnx::NodeProto, OpsetMap>>& out, int depth,
                       const onnx::TypeProto* fallbackType) {
  const std::string domain = normDomain(node.domain());
  const int opset = opsetFor(opsets, domain);
  auto unsupported = [&]() {
    return Status::error("unsupported op " + node.op_type() + " (" + displayDomain(domain) +
                         ", opset " + std::to_string(opset) + ") at node '" + displayName(node) +
                         "'");
  };
  if (depth > 32)
    return Status::error("function expansion too deep at node '" + displayName(node) + "'");
  auto lf = localFunctions.find(domain + ":" + node.op_type());
  if (opset < 0 && lf == localFunctions.end())
    return Status::error("node '" + displayName(node) + "' uses domain '" + displayDomain(domain) +
                         "' which the model does not import");
  KernelInit probe;
  probe.node = &node;
  probe.domain = domain;
  probe.opType = node.op_type();
  probe.opset = opset;
  probe.numInputs = node.input_size();
  probe.numOutputs = node.output_size();
  if (lf == localFunctions.end() && opset >= 0)
    applyDefaults(onnx::OpSchemaRegistry::Schema(node.op_type(), opset, domain), node, probe.attrs);
  if (lf == localFunctions.end() && place(node, probe).def) {
    out.emplace_back(node, opsets);
    return Status();
  }
  onnx::FunctionProto body;
  Attributes attrs;
  OpsetMap fnOpsets = opsets;
  if (lf != localFunctions.end()) {
    body = *lf->second;
    for (const auto& a : node.attribute()) attrs.set(a);
  } else {
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), opset, domain);
    if (!schema) return unsupported();
    applyDefaults(schema, node, attrs);
    if (schema->HasFunction() && schema->GetFunction()) {
      body = *schema->GetFunction();
    } else if (schema->HasContextDependentFunction()) {
      // Values inside an expanded function have no inferred type; their builders only need the
      // element type, which follows the enclosing node's first input.
      std::vector<onnx::TypeProto> inTypes;
      for (int i = 0; i < node.input_size(); ++i) {
        auto it = types.find(node.input(i));
        if (it != types.end())
          inTypes.push_back(it->second);
        else if (i == 0 && fallbackType)
          inTypes.push_back(*fallbackType);
        else
          inTypes.push_back(onnx::TypeProto());
      }
      // Builders read attributes from the node, so give them the defaulted ones too.
      onnx::NodeProto withDefaults = node;
      withDefaults.clear_attribute();
      for (const auto& [name, a] : schema->attributes()) {
        if (const auto* v = attrs.get(name)) *withDefaults.add_attribute() = *v;
      }
      onnx::FunctionBodyBuildContextImpl ctx(withDefaults, inTypes);
      bool built = false;
      try {
        built = schema->BuildContextDependentFunction(ctx, body);
      } catch (const std::exception&) {
        built = false;
      }
      if (!built) return unsupported();
    } else {
      return unsupported();
    }
  }
  for (const auto& imp : body.opset_import()) fnOpsets[normDomain(imp.domain())] = imp.version();
  if (fnOpsets.find("") == fnOpsets.end()) fnOpsets[""] = opset;
  std::vector<onnx::NodeProto> inlined;
  DW_RETURN_IF_ERROR(inlineFunction(node, body, attrs, counter++, inlined));
  const onnx::TypeProto* firstType = fallbackType;
  if (node.input_size() > 0) {
    auto it = types.find(node.input(0));
    if (it != types.end()) firstType = &it->second;
  }
  for (const auto& n : inlined) {
    auto st = expand(n, fnOpsets, out, depth + 1, firstType);
    if (!st.ok()) {
      // Report the op the user wrote, not an op inside its expansion.
      if (st.message().rfind("unsupported op", 0) == 0)
        return Status::error(unsupported().message() +
                             " (its function body needs: " + st.message() + ")");
      return st;
    }
  }
  return Status();
}

class SubgraphImpl;

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

Placement Planner::place(const onnx::NodeProto& node, const KernelInit& init,
                         std::vector<DType>* inTypes) {
  std::vector<DType> own;
  std::vector<DType>& t = inTypes ? *inTypes : own;
  t.clear();
  for (const auto& in : node.input()) {
    auto it = in.empty() ? types.end() : types.find(in);
    t.push_back(it != types.end() && it->second.has_tensor_type()
                    ? dtypeFromOnnx(it->second.tensor_type().elem_type())
                    : DType::kUndefined);
  }
  return findKernel(*registry, *backend, init.domain, init.opType, init.opset, &init, &t);
}

// Element types of outputs that shape inference left unknown (it gives up on a whole graph at
// its first failure, and on values downstream of an unknown one), from the node's schema: an
// output shares its type parameter with an input, or has a fixed type. Placement reads them:
// device kernels accept only some dtypes.
void Planner::propagateTypes(const onnx::NodeProto& node, const OpsetMap& opsets) {
  const std::string domain = normDomain(node.domain());
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(node.op_type(), opsetFor(opsets, domain), domain);
  if (!schema || schema->outputs().empty()) return;
  const auto& ins = schema->inputs();
  const auto& outs = schema->outputs();
  for (int o = 0; o < node.output_size(); ++o) {
    const std::string& name = node.output(o);
    if (name.empty() || types.count(name)) continue;
    const std::string& ts = outs[std::min<size_t>(o, outs.size() - 1)].GetTypeStr();
    int32_t elem = 0;
    for (int i = 0; i < node.input_size() && !ins.empty() && !elem; ++i) {
      if (ins[std::min<size_t>(i, ins.size() - 1)].GetTypeStr() != ts) continue;
      auto it = types.find(node.input(i));
      if (it != types.end() && it->second.has_tensor_type())
        elem = it->second.tensor_type().elem_type();
    }
    if (!elem) {
      static const std::map<std::string, int32_t> fixed = {
          {"tensor(float)", onnx::TensorProto::FLOAT},
          {"tensor(int64)", onnx::TensorProto::INT64},
          {"tensor(int32)", onnx::TensorProto::INT32},
          {"tensor(bool)", onnx::TensorProto::BOOL}};
      auto f = fixed.find(ts);
      if (f != fixed.end()) elem = f->second;
    }
    if (elem) types[name].mutable_tensor_type()->set_elem_type(elem);
  }
}

Status Planner::buildKernel(PlanNode& pn, const onnx::NodeProto& node, const OpsetMap& opsets,
                            const std::set<std::string>& visible) {
  const std::string domain = normDomain(node.domain());
  const int opset = opsetFor(opsets, domain);
  KernelInit init;
  init.node = &node;
  init.domain = domain;
  init.opType = node.op_type();
  init.opset = opset;
  init.numInputs = node.input_size();
  init.numOutputs = node.output_size();
  for (const auto& in : node.input())
    init.constantInputs.push_back(!in.empty() && constants.count(in) != 0);
  applyDefaults(onnx::OpSchemaRegistry::Schema(node.op_type(), opset, domain), node, init.attrs);
  for (const auto& a : node.attribute()) {
    if (a.has_g() || a.type() == onnx::AttributeProto::GRAPH) {
      auto sub = plan(a.g(), opsets, visible);
      if (!sub)
        return sub.status().withContext("subgraph '" + a.name() + "' of node '" +
                                        displayName(node) + "'");
      init.subgraphs[a.name()] = std::make_shared<SubgraphImpl>(std::move(*sub), nullptr);
    }
  }
  std::vector<DType> inTypes;
  const Placement pl = place(node, init, &inTypes);
  if (std::getenv("DEEPWIRE_PLACEMENT")) {
    // Why a node landed where it did: its input types as the planner knows them. The table
    // tells a backend's own kernel from the reference one it fell back to.
    std::string in;
    for (int i = 0; i < node.input_size(); ++i)
      in += std::string(in.empty() ? "" : ", ") + node.input(i) + ":" +
            (inTypes[i] == DType::kUndefined ? "?" : dtypeName(inTypes[i]));
    std::fprintf(stderr, "placement: %s (%s) on %s, table %s [%s]\n", displayName(node).c_str(),
                 node.op_type().c_str(), pl.backend ? pl.backend->name().c_str() : "-",
                 pl.def ? pl.def->table.c_str() : "-", in.c_str());
  }
  if (!pl.def)
    return Status::error("unsupported op " + node.op_type() + " (" + displayDomain(domain) +
                         ", opset " + std::to_string(opset) + ") at node '" + displayName(node) +
                         "'");
  init.backend = pl.backend;
  auto k = pl.def->factory(init);
  if (!k)
    return k.status().withContext("node '" + displayName(node) + "' (" + node.op_type() + ")");
  pn.kernel = std::move(*k);
  pn.halfViaFloat = pl.def->halfViaFloat;
  pn.backend = pl.backend;
  pn.memory = pl.backend->memory() == Device::kHost ? nullptr : pl.backend;
  pn.hostInputs = pl.def->hostInputs;
  pn.shapeOnlyInputs = pl.def->shapeOnlyInputs;
  return Status();
}

Result<std::unique_ptr<GraphPlan>> Planner::plan(const onnx::GraphProto& g, const OpsetMap& opsets,
                                                 const std::set<std::string>& outerNames) {
  auto p = std::make_unique<GraphPlan>();
  if (backend->memory() != Device::kHost) p->device = backend;
  std::set<std::string> available;
  for (const auto& init : g.initializer()) {
    if (init.name().empty()) return Status::error("an initializer has no name");
    auto t = tensorFromProto(init);
    if (!t) return t.status().withContext("initializer '" + init.name() + "'");
    p->constants.emplace_back(p->id(init.name()), Value(std::move(*t)));
    available.insert(init.name());
  }
  for (const auto& sp : g.sparse_initializer()) {
    auto vals = tensorFromProto(sp.values());
    auto idx = tensorFromProto(sp.indices());
    if (!vals || !idx)
      return Status::error("invalid sparse initializer '" + sp.values().name() + "'");
    Tensor dense(vals->dtype(), Shape(sp.dims().begin(), sp.dims().end()));
    const size_t es = dtypeSize(vals->dtype());
    const int64_t nnz = vals->size();
    const bool coo2d = idx->rank() == 2;
    for (int64_t i = 0; i < nnz; ++i) {
      int64_t lin = 0;
      if (coo2d) {
        for (size_t d = 0; d < dense.rank(); ++d)
          lin = lin * dense.dim(d) + idx->getInt(i * dense.rank() + d);
      } else {
        lin = idx->getInt(i);
      }
      if (lin < 0 || lin >= dense.size())
        return Status::error("sparse initializer index out of range");
      std::memcpy(static_cast<char*>(dense.raw()) + lin * es,
                  static_cast<const char*>(vals->raw()) + i * es, es);
    }
    p->constants.emplace_back(p->id(sp.values().name()), Value(std::move(dense)));
    available.insert(sp.values().name());
  }
  for (const auto& in : g.input()) {
    p->inputIds.push_back(p->id(in.name()));
    available.insert(in.name());
  }
  // A subgraph's constants stay its own: the enclosing graph's set comes back when this returns.
  struct RestoreConstants {
    std::set<std::string>& set;
    std::set<std::string> saved;
    ~RestoreConstants() { set = std::move(saved); }
  } restoreConstants{constants, constants};
  for (const auto& init : g.initializer()) constants.insert(init.name());
  for (const auto& in : g.input()) constants.erase(in.name());
  // Expand functions first so that ordering and liveness see the real nodes.
  std::vector<std::pair<onnx::NodeProto, OpsetMap>> expanded;
  for (const auto& n : g.node()) DW_RETURN_IF_ERROR(expand(n, opsets, expanded, 0));
  if (fuse && backend->oneDnnFusions()) {
    fusion::fuseForOneDnn(expanded, g, types);
    if (blockedLayouts && backend->precision() == "fp32")
      fusion::markNhwcChains(expanded, g, types);
    // bf16 convolutions want NHWC bf16 operands, so an nChw16c handoff would only move their
    // reorder and add the normalization's transposes.
    fusion::fuseTrainingChains(expanded, g, types,
                               blockedLayouts && backend->precision() == "fp32");
  }

  // Topological order (Kahn), counting values a node's subgraphs read as its inputs too.
  const size_t n = expanded.size();
  std::vector<std::vector<std::string>> reads(n);
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i) {
    const auto& node = expanded[i].first;
    for (const auto& o : node.output()) {
      if (o.empty()) continue;
      if (producer.count(o) || available.count(o))
        return Status::error("value '" + o + "' is defined more than once (node '" +
                             displayName(node) + "')");
      producer[o] = i;
    }
    for (const auto& in : node.input())
      if (!in.empty()) reads[i].push_back(in);
    for (const auto& a : node.attribute()) {
      std::set<std::string> inner;
      if (a.has_g()) inner.merge(dw::outerNames(a.g()));
      for (const auto& sg : a.graphs()) inner.merge(dw::outerNames(sg));
      for (const auto& s : inner) reads[i].push_back(s);
    }
  }
  std::vector<int> pending(n, 0);
  std::unordered_map<size_t, std::vector<size_t>> consumers;
  for (size_t i = 0; i < n; ++i) {
    std::set<size_t> deps;
    for (const auto& r : reads[i]) {
      auto it = producer.find(r);
      if (it != producer.end()) {
        if (it->second != i) deps.insert(it->second);
      } else if (!available.count(r) && !outerNames.count(r)) {
        return Status::error("node '" + displayName(expanded[i].first) + "' (" +
                             expanded[i].first.op_type() + ") reads '" + r +
                             "', which no node, input or initializer defines");
      }
    }
    pending[i] = static_cast<int>(deps.size());
    for (size_t d : deps) consumers[d].push_back(i);
  }
  std::vector<size_t> order, ready;
  for (size_t i = n; i-- > 0;)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<size_t> newly;
    for (size_t c : consumers[i])
      if (--pending[c] == 0) newly.push_back(c);
    // Keep file order among ready nodes for predictable execution.
    std::sort(newly.begin(), newly.end(), std::greater<size_t>());
    for (size_t c : newly) ready.push_back(c);
    std::sort(ready.begin(), ready.end(), std::greater<size_t>());
  }
  if (order.size() != n) return Status::error("the graph has a cycle");

  std::set<std::string> visible = outerNames;
  for (const auto& s : available) visible.insert(s);
  for (const auto& [name, idx] : producer) visible.insert(name);

  std::vector<int> lastUse;
  for (size_t oi = 0; oi < n; ++oi) {
    const auto& [node, nodeOpsets] = expanded[order[oi]];
    PlanNode pn;
    pn.name = displayName(node);
    pn.op = node.op_type();
    pn.domain = normDomain(node.domain());
    pn.opset = opsetFor(nodeOpsets, pn.domain);
    // The profile's note of what the fusion passes changed about the node's tensors.
    const fusion::Fused fused = fusion::fusedOf(node);
    auto list = [](const std::vector<int64_t>& ins, const std::vector<int64_t>& outs) {
      std::string s;
      for (int64_t i : ins) s += std::string(s.empty() ? "" : ", ") + "input " + std::to_string(i);
      for (int64_t i : outs)
        s += std::string(s.empty() ? "" : ", ") + "output " + std::to_string(i);
      return s;
    };
    pn.layouts = list(fused.blockedInputs, fused.blockedOutputs);
    if (!pn.layouts.empty()) pn.layouts += " in nChw16c";
    const std::string nhwc = list(fused.nhwcInputs, fused.nhwcOutputs);
    if (!nhwc.empty()) pn.layouts += (pn.layouts.empty() ? "" : "; ") + nhwc + " in NHWC";
    if (!fused.conv.empty())
      pn.layouts += (pn.layouts.empty() ? "" : "; ") + fused.conv + " fused in";
    DW_RETURN_IF_ERROR(buildKernel(pn, node, nodeOpsets, visible));
    propagateTypes(node, nodeOpsets);
    for (const auto& in : node.input()) pn.inputs.push_back(in.empty() ? -1 : p->id(in));
    for (const auto& o : node.output()) pn.outputs.push_back(o.empty() ? -1 : p->id(o));
    for (const auto& r : reads[order[oi]]) {
      int id = p->id(r);
      if (lastUse.size() <= static_cast<size_t>(id)) lastUse.resize(id + 1, -1);
      lastUse[id] = static_cast<int>(oi);
    }
    p->nodes.push_back(std::move(pn));
  }
  for (const auto& o : g.output()) {
    if (!visible.count(o.name()))
      return Status::error("graph output '" + o.name() + "' is not produced by any node");
    p->outputIds.push_back(p->id(o.name()));
  }
  // Outer-scope reads: referenced names not defined here.
  for (size_t i = 0; i < p->names.size(); ++i) {
    const auto& nm = p->names[i];
    if (!available.count(nm) && !producer.count(nm) && outerNames.count(nm))
      p->outerIds.push_back(static_cast<int>(i));
  }
  std::set<int> keep(p->outputIds.begin(), p->outputIds.end());
  for (size_t id = 0; id < lastUse.size(); ++id) {
    if (lastUse[id] >= 0 && !keep.count(static_cast<int>(id)))
      p->nodes[lastUse[id]].release.push_back(static_cast<int>(id));
  }
  // Outputs nobody reads are released right after their producer.
  for (size_t oi = 0; oi < p->nodes.size(); ++oi) {
    for (int o : p->nodes[oi].outputs) {
      if (o >= 0 && !keep.count(o) && (lastUse.size() <= static_cast<size_t>(o) || lastUse[o] < 0))
        p->nodes[oi].release.push_back(o);
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Execution

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

 private:
  const GraphPlan& plan_;
  const std::vector<Value>& values_;
  const Scope* parent_;
};

bool isHalf(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16;
}

void releaseValue(Value& v, BufferPool& pool) {
  if (v.isTensor()) {
    auto b = v.tensor.buffer();
    v = Value();
    pool.give(std::move(b));
  } else {
    v = Value();
  }
}

}  // namespace

using ProfileClock = std::chrono::steady_clock;

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
      if (!pv) return pv.status().withContext("node '" + node.name + "' (" + node.op + ")");
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
    if (!st.ok()) return st.withContext("node '" + node.name + "' (" + node.op + ")");
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
    for (int id : node.release) {
      releaseValue(values[id], pool);
      if (static_cast<size_t>(id) < mirrors.size()) releaseValue(mirrors[id], pool);
    }
  }
  return Status();
}

Result<std::vector<Value>> SubgraphImpl::run(KernelContext& caller, std::vector<Value> inputs) {
  GraphPlan& p = *plan_;
  std::vector<Value> values(p.names.size());
  for (size_t i = 0; i < p.inputIds.size() && i < inputs.size(); ++i)
    values[p.inputIds[i]] = std::move(inputs[i]);
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

// ---------------------------------------------------------------------------------------------
// Session

InferenceSession::~InferenceSession() {
  if (plan_ && plan_->profile && plan_->runs > 0 && std::getenv("DEEPWIRE_PROFILE"))
    std::fprintf(stderr, "%s", profileReport().c_str());
}

void InferenceSession::setProfiling(bool on) {
  plan_->profile = on;
  plan_->runSeconds = 0;
  plan_->runs = 0;
  for (auto& n : plan_->nodes) n.seconds = 0, n.calls = 0;
}

std::string InferenceSession::profileReport(size_t top) const {
  const GraphPlan& p = *plan_;
  if (p.runs == 0) return "profile: no runs recorded\n";
  // Per op type, then the costliest nodes: the two views a slow graph is usually read with.
  std::map<std::string, std::pair<double, int64_t>> byOp;
  double kernels = 0;
  for (const auto& n : p.nodes) {
    auto& e = byOp[n.domain.empty() ? n.op : n.domain + ":" + n.op];
    e.first += n.seconds;
    ++e.second;
    kernels += n.seconds;
  }
  const double runs = static_cast<double>(p.runs);
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line,
                "profile: %lld runs, %.3f ms/run: kernels %.3f ms, executor %.3f ms\n",
                static_cast<long long>(p.runs), 1e3 * p.runSeconds / runs, 1e3 * kernels / runs,
                1e3 * (p.runSeconds - kernels) / runs);
  os << line;
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [op, e] : byOp) ops.emplace_back(e.first, op + " x" + std::to_string(e.second));
  std::sort(ops.rbegin(), ops.rend());
  for (size_t i = 0; i < ops.size() && i < top; ++i) {
    std::snprintf(line, sizeof line, "  %8.3f ms %5.1f%%  %s\n", 1e3 * ops[i].first / runs,
                  100 * ops[i].first / std::max(kernels, 1e-12), ops[i].second.c_str());
    os << line;
  }
  if (p.device) {
    // The ops listed here ran on the host backend, their inputs and outputs copied across.
    std::map<std::string, int> host;
    for (const auto& n : p.nodes)
      if (!n.memory) ++host[n.domain.empty() ? n.op : n.domain + ":" + n.op];
    std::string l;
    for (const auto& [op, c] : host) l += (l.empty() ? "" : ", ") + op + " x" + std::to_string(c);
    os << "  on " << p.device->hostBackend()->name() << " (no " << p.device->name()
       << " kernel): " << (l.empty() ? "none" : l) << "\n";
  }
  std::vector<const PlanNode*> nodes;
  for (const auto& n : p.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(),
            [](const PlanNode* a, const PlanNode* b) { return a->seconds > b->seconds; });
  os << "  costliest nodes:\n";
  for (size_t i = 0; i < nodes.size() && i < top; ++i) {
    std::snprintf(line, sizeof line, "  %8.3f ms  %s (%s%s%s)\n", 1e3 * nodes[i]->seconds / runs,
                  nodes[i]->name.c_str(), nodes[i]->op.c_str(),
                  nodes[i]->layouts.empty() ? "" : "; ", nodes[i]->layouts.c_str());
    os << line;
  }
  return os.str();
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
  bool inferenceUnsafe = false;
  // Arity and window attributes first: autodiff, libonnx's shape inference and the kernels all
  // assume them (a missing input was a null read, a zero stride a division by zero).
  {
    std::set<std::string> local;
    for (const auto& f : model.functions()) local.insert(normDomain(f.domain()) + ":" + f.name());
    DW_RETURN_IF_ERROR(validateNodes(model.graph(), opsets, local, inferenceUnsafe));
  }
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
  try {
    if (!inferenceUnsafe) onnx::shape_inference::InferShapes(inferred);
  } catch (const std::exception&) {
    inferred = model;
  }
  Planner planner;
  planner.backend = s->backend_.get();
  planner.registry = &KernelRegistry::global();
  planner.fuse = options.fuse;
  planner.blockedLayouts = options.blockedLayouts;
  const auto& ig = inferred.graph();
  for (const auto& v : ig.input()) planner.types[v.name()] = v.type();
  for (const auto& v : ig.value_info()) planner.types[v.name()] = v.type();
  for (const auto& v : ig.output()) planner.types[v.name()] = v.type();
  for (const auto& init : ig.initializer()) {
    onnx::TypeProto t;
    t.mutable_tensor_type()->set_elem_type(init.data_type());
    for (auto d : init.dims())
      t.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    planner.types[init.name()] = t;
  }
  for (const auto& f : model.functions())
    planner.localFunctions[normDomain(f.domain()) + ":" + f.name()] = &f;

  // Refuse models that declare tensors larger than memory before allocating anything.
  auto checkDeclared = [&](const onnx::ValueInfoProto& v) -> Status {
    IoInfo info = ioInfoFromType(v.name(), v.type());
    if (!info.hasShape || info.dtype == DType::kUndefined || info.dtype == DType::kString)
      return Status();
    long double bytes = dtypeSize(info.dtype);
    for (int64_t d : info.dims) {
      if (d < 0) return Status();
      bytes *= d;
    }
    if (bytes > static_cast<long double>(limit))
      return Status::error("tensor '" + v.name() + "' is declared as " + info.describe() + " (" +
                           std::to_string(static_cast<unsigned long long>(bytes)) +
                           " bytes), more than the " + std::to_string(limit) +
                           " bytes of available memory");
    return Status();
  };
  for (const auto& v : ig.input()) DW_RETURN_IF_ERROR(checkDeclared(v));
  for (const auto& v : ig.output()) DW_RETURN_IF_ERROR(checkDeclared(v));
  for (const auto& v : ig.value_info()) DW_RETURN_IF_ERROR(checkDeclared(v));

  auto plan = planner.plan(model.graph(), opsets, {});
  if (!plan) return plan.status();
  s->plan_ = std::move(*plan);
  s->plan_->profile = options.profile || std::getenv("DEEPWIRE_PROFILE") != nullptr;
  s->deviceOutputs_ = options.deviceOutputs;

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
        return Status::error("input '" + name + "' has dtype " + dtypeName(t.dtype()) +
                             ", but the model expects " + info.describe());
      if (info.hasShape) {
        bool okShape = t.rank() == info.dims.size();
        for (size_t d = 0; okShape && d < info.dims.size(); ++d)
          okShape = info.dims[d] < 0 || info.dims[d] == t.dim(d);
        if (!okShape)
          return Status::error("input '" + name + "' has shape " + shapeToString(t.shape()) +
                               ", but the model expects " + info.describe());
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
  reclaimOutputs();
  backend_->applyThreads();
  const auto t0 = ProfileClock::now();
  DW_RETURN_IF_ERROR(executePlan(p, values, *backend_, *pool_, nullptr));
  if (p.profile) {
    p.runSeconds += std::chrono::duration<double>(ProfileClock::now() - t0).count();
    ++p.runs;
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

Result<std::unique_ptr<onnx::ModelProto>> loadOnnxModel(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error("cannot open model '" + path + "'");
  std::ostringstream os;
  os << f.rdbuf();
  const std::string bytes = os.str();
  auto m = std::make_unique<onnx::ModelProto>();
  if (!m->ParseFromString(bytes))
    return Status::error("'" + path + "' is not a valid ONNX model (protobuf parse failed, " +
                         std::to_string(bytes.size()) + " bytes)");
  // Inline external data so that planning never needs the model's directory.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  for (auto& init : *m->mutable_graph()->mutable_initializer()) {
    if (init.data_location() != onnx::TensorProto::EXTERNAL) continue;
    auto t = tensorFromProto(init, dir);
    if (!t) return t.status().withContext(path);
    std::string name = init.name();
    tensorToProto(*t, &init, name);
  }
  return m;
}

}  // namespace dw::engine
