// The planner: turns a graph into a GraphPlan (plan.h) once per session. It expands functions
// the kernel tables cannot run, runs the fusion passes (engine/fusion/), orders the nodes, places
// each on a backend's kernel table and builds its kernel, and works out after which node every
// value can be released.
#include "engine/plan.h"

#include "graphs/subgraph.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "engine/function_inline.h"
#include "engine/fusion/fused.h"
#include "engine/fusion/fusion.h"
#include "engine/fusion/graph_queries.h"
#include "engine/io.h"
#include "engine/kernel.h"

namespace dw::engine {

using detail::normDomain;
using detail::SubgraphImpl;
using fusion::displayName;

namespace {

std::string displayDomain(const std::string& d) {
  return d.empty() ? "ai.onnx" : d;
}

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
  // Inlined body nodes by name: the node of the model each came from (PlanNode::origin).
  std::map<std::string, std::string> origins;
  bool fuse = true;               // SessionOptions::fuse
  bool blockedLayouts = true;     // SessionOptions::blockedLayouts
  bool trainingChains = true;     // SessionOptions::trainingChains
  int64_t maxLoopIterations = 0;  // SessionOptions::maxLoopIterations
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

// What kernels read: the defaults of the schema for the node's opset, then the node's own
// attributes over them.
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
      // libonnx's SequenceMap builder reads the sequence type of every input without checking
      // there is one (a fuzzed model crashed it).
      if (node.op_type() == "SequenceMap")
        for (size_t i = 0; i < inTypes.size(); ++i)
          if (!inTypes[i].has_sequence_type() && !inTypes[i].has_tensor_type())
            return Status::error("node '" + displayName(node) +
                                 "' (SequenceMap): the type of "
                                 "input '" +
                                 node.input(static_cast<int>(i)) +
                                 "' is unknown; declare it in the graph's inputs or value_info");
      onnx::FunctionBodyBuildContextImpl ctx(withDefaults, inTypes);
      bool built = false;
      try {
        built = schema->BuildContextDependentFunction(ctx, body);
      } catch (const std::exception& e) {
        // A builder that refuses the node's attributes or input types says why.
        return Status::error("node '" + displayName(node) + "' (" + node.op_type() + ", " +
                             displayDomain(domain) + "): " + e.what());
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
  {
    auto outer = origins.find(node.name());
    const std::string origin = outer != origins.end()
                                   ? outer->second
                                   : "'" + displayName(node) + "' (" + node.op_type() +
                                         (domain.empty() ? "" : ", " + displayDomain(domain)) + ")";
    for (const auto& n : inlined) origins[n.name()] = origin;
  }
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
  init.maxLoopIterations = maxLoopIterations;
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
  if (!k) return k.status().withContext(pn.describe());
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
    auto dense = tensorFromSparseProto(sp);
    if (!dense) return dense.status();
    p->constants.emplace_back(p->id(sp.values().name()), Value(std::move(*dense)));
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
  if (fuse && backend->fusions() == Backend::Fusions::kConvEpilogue) {
    if (trainingChains) fusion::fuseMatMulGradients(expanded, types, /*biasGradients=*/true);
    fusion::fuseForOneDnn(expanded, g, types, /*epiloguesOnly=*/true);
    if (trainingChains)
      fusion::fuseTrainingChains(expanded, g, types, /*blockedLayouts=*/false,
                                 /*convIntoBatchNorm=*/false);
  }
  if (fuse && backend->fusions() == Backend::Fusions::kOneDnn) {
    if (trainingChains) fusion::fuseMatMulGradients(expanded, types, /*biasGradients=*/false);
    fusion::fuseForOneDnn(expanded, g, types);
    if (blockedLayouts && backend->precision() == "fp32")
      fusion::markNhwcChains(expanded, g, types, backend->convChains());
    // bf16 convolutions want NHWC bf16 operands, so an nChw16c handoff would only move their
    // reorder and add the normalization's transposes.
    if (trainingChains)
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
  // Among ready nodes, those that write a graph output run first, then file order. An output
  // is then ready as soon as it can be: a training step's gradients are summed across
  // processes while its backward pass goes on (setProgressListener), and the autodiff names
  // each gradient with an Identity placed after the whole backward pass. File order keeps
  // execution predictable.
  std::set<std::string> graphOutputs;
  for (const auto& o : g.output()) graphOutputs.insert(o.name());
  std::vector<bool> writesOutput(n, false);
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : expanded[i].first.output())
      if (graphOutputs.count(o)) writesOutput[i] = true;
  // ready.back() runs next.
  auto later = [&](size_t a, size_t b) {
    return writesOutput[a] != writesOutput[b] ? writesOutput[b] : a > b;
  };
  std::vector<size_t> order, ready;
  for (size_t i = n; i-- > 0;)
    if (pending[i] == 0) ready.push_back(i);
  std::sort(ready.begin(), ready.end(), later);
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.push_back(c);
    std::sort(ready.begin(), ready.end(), later);
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
    if (auto o = origins.find(node.name()); o != origins.end()) pn.origin = o->second;
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
  for (auto& node : p->nodes) {
    node.lastRead.resize(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i)
      node.lastRead[i] = node.inputs[i] >= 0 && std::find(node.release.begin(), node.release.end(),
                                                          node.inputs[i]) != node.release.end();
  }
  return p;
}

Result<std::unique_ptr<GraphPlan>> detail::planModel(const onnx::ModelProto& model,
                                                     const onnx::GraphProto& inferred,
                                                     const OpsetMap& opsets, Backend& backend,
                                                     const SessionOptions& options) {
  Planner planner;
  planner.backend = &backend;
  planner.registry = &KernelRegistry::global();
  planner.fuse = options.fuse;
  planner.blockedLayouts = options.blockedLayouts;
  planner.trainingChains = options.trainingChains;
  planner.maxLoopIterations = options.maxLoopIterations;
  for (const auto& v : inferred.input()) planner.types[v.name()] = v.type();
  for (const auto& v : inferred.value_info()) planner.types[v.name()] = v.type();
  for (const auto& v : inferred.output()) planner.types[v.name()] = v.type();
  for (const auto& init : model.graph().initializer()) {
    onnx::TypeProto t;
    t.mutable_tensor_type()->set_elem_type(init.data_type());
    for (auto d : init.dims())
      t.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    planner.types[init.name()] = t;
  }
  for (const auto& f : model.functions())
    planner.localFunctions[normDomain(f.domain()) + ":" + f.name()] = &f;
  return planner.plan(model.graph(), opsets, {});
}

}  // namespace dw::engine
