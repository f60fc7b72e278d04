// Reverse-mode autodiff over ONNX graphs (contract in autodiff.h). Forward nodes are visited in
// reverse topological order; each node with a gradient on an output and an input that needs one
// calls its builder, which appends backward nodes. Several contributions to one value are summed.
#include "engine/training/autodiff.h"

#include "engine/function_inline.h"
#include "nodes/microsoft_domain.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "engine/training/grad_builder.h"
#include "nodes/schema_facts.h"

namespace dw::engine::training {

namespace {

using json = nlohmann::json;

int opsetOf(const onnx::ModelProto& m, const std::string& domain) {
  for (const auto& imp : m.opset_import()) {
    const std::string d = imp.domain() == "ai.onnx" ? "" : imp.domain();
    if (d == domain) return static_cast<int>(imp.version());
  }
  return domain.empty() && m.opset_import_size() == 0 ? 1 : -1;
}

std::string normDomain(const std::string& d) {
  return d == "ai.onnx" ? "" : d;
}

// Kahn's algorithm keeping the model's order among ready nodes.
Result<std::vector<int>> topoOrder(const onnx::GraphProto& g) {
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output())
      if (!o.empty()) producer[o] = i;
  std::vector<int> indeg(g.node_size(), 0);
  std::vector<std::vector<int>> users(g.node_size());
  for (int i = 0; i < g.node_size(); ++i) {
    std::set<int> deps;
    for (const auto& in : g.node(i).input()) {
      auto it = producer.find(in);
      if (it != producer.end() && it->second != i) deps.insert(it->second);
    }
    indeg[i] = static_cast<int>(deps.size());
    for (int d : deps) users[d].push_back(i);
  }
  std::set<int> ready;
  for (int i = 0; i < g.node_size(); ++i)
    if (!indeg[i]) ready.insert(i);
  std::vector<int> order;
  while (!ready.empty()) {
    int i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int u : users[i])
      if (--indeg[u] == 0) ready.insert(u);
  }
  if (order.size() != static_cast<size_t>(g.node_size()))
    return Status::error("the graph has a cycle; autodiff needs an acyclic graph");
  return order;
}

bool isFloatType(int32_t t) {
  return t == 0 || t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::DOUBLE ||
         t == onnx::TensorProto::FLOAT16 || t == onnx::TensorProto::BFLOAT16;
}

void addInputFromInitializer(onnx::GraphProto* g, const onnx::TensorProto& t) {
  for (const auto& in : g->input())
    if (in.name() == t.name()) return;
  auto* vi = g->add_input();
  vi->set_name(t.name());
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(t.data_type());
  auto* sh = tt->mutable_shape();
  for (int64_t d : t.dims()) sh->add_dim()->set_dim_value(d);
}

void addOutput(onnx::GraphProto* g, const std::string& name, const TypeTable& types,
               const std::string& like) {
  for (const auto& o : g->output())
    if (o.name() == name) return;
  auto* vi = g->add_output();
  vi->set_name(name);
  if (const auto* t = types.type(like)) {
    *vi->mutable_type() = *t;
    return;
  }
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
}

void addForwardValueInfo(onnx::GraphProto* g, const TypeTable& types) {
  std::set<std::string> known;
  for (const auto& v : g->input()) known.insert(v.name());
  for (const auto& v : g->output()) known.insert(v.name());
  for (const auto& v : g->value_info()) known.insert(v.name());
  for (const auto& t : g->initializer()) known.insert(t.name());
  std::set<std::string> produced;
  for (const auto& n : g->node())
    for (const auto& o : n.output()) produced.insert(o);
  for (const auto& [name, type] : types.all()) {
    if (known.count(name) || !produced.count(name)) continue;
    auto* vi = g->add_value_info();
    vi->set_name(name);
    *vi->mutable_type() = type;
  }
}

TypeTable inferTypes(const onnx::ModelProto& m) {
  TypeTable types;
  onnx::ModelProto inferred = m;
  if (!inferShapesSafely(inferred, false, 0, false).ok()) inferred = m;
  const auto& g = inferred.graph();
  for (const auto& t : g.initializer()) {
    onnx::TypeProto tp;
    auto* tt = tp.mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* sh = tt->mutable_shape();
    for (int64_t d : t.dims()) sh->add_dim()->set_dim_value(d);
    types.add(t.name(), tp);
  }
  for (const auto& v : g.input()) types.add(v.name(), v.type());
  for (const auto& v : g.value_info()) types.add(v.name(), v.type());
  for (const auto& v : g.output()) types.add(v.name(), v.type());
  return types;
}

// What the core needs besides the options: where gradients start and what they are for.
struct BackwardRequest {
  std::vector<std::string> seeds;  // values whose gradient is ones (summed losses)
  // Values whose gradient is a given value (a subgraph's output gradients, fed to it as inputs).
  std::vector<std::pair<std::string, std::string>> seedGrads;
  std::vector<std::string> wrt;  // leaves that need gradients
  std::map<std::string, double> ldaCoeff;
  bool training = false;
  std::string prefix;
};

// Emits the backward nodes into `model` and returns the (summed) gradient name per wrt entry,
// "" where no gradient reaches it.
Result<std::vector<std::string>> emitBackward(onnx::ModelProto& model, const TypeTable& types,
                                              const BackwardRequest& req) {
  onnx::GraphProto* g = model.mutable_graph();
  DW_RETURN_IF_ERROR(exposeSubgraphCaptures(*g, types, req.wrt, opsetOf(model, "")));
  auto order = topoOrder(*g);
  if (!order) return order.status();
  const int forwardCount = g->node_size();

  // Values that depend on a leaf through float values: only they can carry gradients.
  std::set<std::string> needsGrad(req.wrt.begin(), req.wrt.end());
  for (int i : *order) {
    const auto& n = g->node(i);
    bool any = false;
    // CastLike reads only the element type of its second input (a mask's constants cast like
    // the activations do not depend on their values).
    const int inputs = normDomain(n.domain()).empty() && n.op_type() == "CastLike"
                           ? std::min(1, n.input_size())
                           : n.input_size();
    for (int k = 0; k < inputs; ++k) any |= !n.input(k).empty() && needsGrad.count(n.input(k));
    if (!any) continue;
    for (const auto& o : n.output())
      if (!o.empty() && isFloatType(types.elemType(o))) needsGrad.insert(o);
  }
  // Values the seeds depend on: nodes outside this cone get no backward nodes.
  std::set<std::string> feedsSeed(req.seeds.begin(), req.seeds.end());
  for (const auto& sg : req.seedGrads) feedsSeed.insert(sg.first);
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    const auto& n = g->node(*it);
    bool any = false;
    for (const auto& o : n.output()) any |= feedsSeed.count(o) > 0;
    if (!any) continue;
    for (const auto& in : n.input())
      if (!in.empty()) feedsSeed.insert(in);
  }

  Emitter e(g, req.prefix);
  std::map<std::string, std::vector<std::string>> contrib;
  for (const auto& s : req.seeds) {
    std::string one;
    std::vector<int64_t> dims;
    const int32_t et = types.elemType(s) ? types.elemType(s) : onnx::TensorProto::FLOAT;
    if (types.dims(s, &dims) && dims.empty()) {
      one = e.scalar(1.0, et);
    } else {
      onnx::TensorProto v;
      v.set_data_type(et);
      v.add_dims(1);
      if (et == onnx::TensorProto::DOUBLE)
        v.add_double_data(1.0);
      else if (et == onnx::TensorProto::FLOAT)
        v.add_float_data(1.0f);
      else
        return Status::error("loss '" + s + "' must be float or double");
      one = e.op1("ConstantOfShape", {e.op1("Shape", {s})}, {attrT("value", v)}, "",
                  s + "_grad_seed");
    }
    contrib[s].push_back(one);
  }
  for (const auto& [v, grad] : req.seedGrads) contrib[v].push_back(grad);
  // Sums the contributions to `v` (once) and returns the gradient's name.
  std::map<std::string, std::string> summed;
  auto gradOf = [&](const std::string& v) -> std::string {
    auto s = summed.find(v);
    if (s != summed.end()) return s->second;
    auto it = contrib.find(v);
    std::string r;
    if (it != contrib.end() && !it->second.empty())
      r = it->second.size() == 1 ? it->second[0]
                                 : e.op1("Sum", it->second, {}, "", v + "_grad_sum");
    summed[v] = r;
    return r;
  };

  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    if (*it >= forwardCount) continue;
    // Copy: emitting nodes may reallocate the repeated field.
    onnx::NodeProto* np = g->mutable_node(*it);
    std::vector<std::string> dY(np->output_size());
    bool anyDy = false;
    for (int o = 0; o < np->output_size(); ++o) {
      if (np->output(o).empty() || !feedsSeed.count(np->output(o))) continue;
      dY[o] = gradOf(np->output(o));
      anyDy |= !dY[o].empty();
    }
    if (!anyDy) continue;
    std::vector<bool> need(np->input_size(), false);
    bool anyNeed = false;
    for (int i = 0; i < np->input_size(); ++i) {
      need[i] = !np->input(i).empty() && needsGrad.count(np->input(i)) > 0;
      anyNeed |= need[i];
    }
    if (!anyNeed) continue;
    const std::string domain = normDomain(np->domain());
    const int opset = domain == kGradDomain ? 1 : opsetOf(model, domain);
    const GradBuilder* b = findGradBuilder(domain, np->op_type(), opset);
    const std::string label = "node '" + np->name() + "' (" + np->op_type() +
                              (domain.empty() ? "" : ", domain " + domain) + ", opset " +
                              std::to_string(opset) + ")";
    if (!b)
      return Status::error(label +
                           ": no gradient is defined for this op, and it lies on the path from a "
                           "trainable weight to a loss; make its inputs Constant, or remove it "
                           "from that path");
    onnx::NodeProto fwd = *np;
    GradCtx c{e, fwd, opset, types, req.training, dY, need, {}};
    c.dX.assign(need.size(), "");
    e.setNodeName(np->name().empty() ? np->op_type() : np->name());
    Status st = b->fn(c);
    if (!st.ok()) return st.withContext(label);
    *g->mutable_node(*it) = fwd;  // builders may have added forward outputs
    double nodeCoeff = 1.0;
    auto lc = req.ldaCoeff.find(fwd.name());
    if (lc != req.ldaCoeff.end()) nodeCoeff = lc->second;
    for (int i = 0; i < fwd.input_size(); ++i) {
      if (!need[i] || i >= static_cast<int>(c.dX.size()) || c.dX[i].empty()) continue;
      std::string gx = c.dX[i];
      double coeff = nodeCoeff;
      if (auto li = req.ldaCoeff.find(ldaInputKey(fwd.name(), fwd.input(i)));
          li != req.ldaCoeff.end())
        coeff = li->second;
      if (coeff != 1.0) {
        int32_t et = types.elemType(fwd.input(i));
        gx = e.op1("Mul", {gx, e.scalar(coeff, et ? et : onnx::TensorProto::FLOAT)}, {}, "",
                   fwd.input(i) + "_grad_lda");
      }
      contrib[fwd.input(i)].push_back(gx);
    }
  }
  std::vector<std::string> result;
  for (const auto& w : req.wrt) result.push_back(gradOf(w));
  return result;
}

void ensureOpsetImport(onnx::ModelProto& m, const std::string& domain, int version) {
  for (const auto& imp : m.opset_import())
    if (imp.domain() == domain) return;
  auto* op = m.add_opset_import();
  op->set_domain(domain);
  op->set_version(version);
}

}  // namespace

namespace {

// The model with each com.microsoft node replaced by its body of ai.onnx operators
// (nodes/microsoft_domain.cpp), whose gradient builders then serve it. A node's lda coeff goes
// to every body node that reads one of its inputs: the gradients it sends upstream are scaled
// once. Nodes in subgraphs stay (their bodies are differentiated without this pass).
Result<onnx::ModelProto> inlineMicrosoftOps(const onnx::ModelProto& forward,
                                            std::map<std::string, double>& ldaCoeff) {
  bool any = false;
  for (const auto& n : forward.graph().node()) any |= normDomain(n.domain()) == kMicrosoftDomain;
  if (!any) return forward;
  const TypeTable types = inferTypes(forward);
  onnx::ModelProto m = forward;
  auto* nodes = m.mutable_graph()->mutable_node();
  std::vector<onnx::NodeProto> kept;
  int uid = 0;
  for (const auto& n : forward.graph().node()) {
    // Ops with kernels of their own (Inverse, MurmurHash3...) stay; none has a gradient.
    if (normDomain(n.domain()) != kMicrosoftDomain || !microsoftHasBody(n.op_type())) {
      kept.push_back(n);
      continue;
    }
    std::vector<onnx::TypeProto> inTypes;
    for (const auto& in : n.input()) {
      const onnx::TypeProto* t = in.empty() ? nullptr : types.type(in);
      inTypes.push_back(t ? *t : onnx::TypeProto());
    }
    onnx::FunctionProto body;
    DW_RETURN_IF_ERROR(microsoftBody(n, inTypes, opsetOf(forward, ""), body));
    std::vector<onnx::NodeProto> inlined;
    DW_RETURN_IF_ERROR(inlineFunction(n, body, Attributes(), uid++, inlined));
    auto coeff = ldaCoeff.find(n.name());
    for (auto& b : inlined) {
      for (const auto& in : b.input()) {
        if (in.empty() || std::find(n.input().begin(), n.input().end(), in) == n.input().end())
          continue;
        if (coeff != ldaCoeff.end()) ldaCoeff[ldaInputKey(b.name(), in)] = coeff->second;
        if (auto one = ldaCoeff.find(ldaInputKey(n.name(), in)); one != ldaCoeff.end())
          ldaCoeff[ldaInputKey(b.name(), in)] = one->second;
      }
      kept.push_back(std::move(b));
    }
  }
  nodes->Clear();
  for (auto& n : kept) *nodes->Add() = std::move(n);
  return m;
}

}  // namespace

Result<GradientGraph> buildGradientGraph(const onnx::ModelProto& original,
                                         const GradientGraphOptions& options) {
  if (options.losses.empty()) return Status::error("autodiff needs at least one loss output");
  GradientGraphOptions opt = options;
  auto inlined = inlineMicrosoftOps(original, opt.ldaCoeff);
  if (!inlined) return inlined.status();
  const onnx::ModelProto& forward = *inlined;
  GradientGraph out;
  out.model = forward;
  onnx::ModelProto& m = out.model;
  onnx::GraphProto* g = m.mutable_graph();
  const TypeTable types = inferTypes(forward);

  std::set<std::string> produced, outputs;
  for (const auto& n : g->node())
    for (const auto& o : n.output()) produced.insert(o);
  for (const auto& o : g->output()) outputs.insert(o.name());
  std::map<std::string, int> initIndex;
  for (int i = 0; i < g->initializer_size(); ++i) initIndex[g->initializer(i).name()] = i;
  for (const auto& l : opt.losses)
    if (!outputs.count(l)) return Status::error("loss '" + l + "' is not an output of the model");
  for (const auto& w : opt.trainable) {
    if (!initIndex.count(w))
      return Status::error("trainable weight '" + w + "' is not an initializer of the model");
    if (!isFloatType(g->initializer(initIndex[w]).data_type()))
      return Status::error("trainable weight '" + w + "' is not a floating-point tensor");
  }

  // Training mode: BatchNormalization normalises with batch statistics and updates its running
  // ones; the running statistics become inputs and their new values outputs.
  std::set<std::string> moveToInputs(opt.trainable.begin(), opt.trainable.end());
  if (opt.training) {
    const int opset = opsetOf(forward, "");
    for (auto& n : *g->mutable_node()) {
      if (normDomain(n.domain()) != "" || n.op_type() != "BatchNormalization") continue;
      if (opset < 9 && attrInt(n, "spatial", 1) == 0)
        return Status::error("node '" + n.name() +
                             "' (BatchNormalization): spatial=0 is not supported in training");
      if (n.input_size() < 5)
        return Status::error("node '" + n.name() + "' (BatchNormalization) needs 5 inputs");
      onnx::NodeProto t;
      t.set_name(n.name());
      t.set_op_type("BatchNormalizationTraining");
      t.set_domain(kGradDomain);
      for (const auto& in : n.input()) t.add_input(in);
      *t.add_attribute() = attrF("epsilon", attrFloat(n, "epsilon", 1e-5f));
      *t.add_attribute() = attrF("momentum", attrFloat(n, "momentum", 0.9f));
      t.add_output(n.output(0));
      for (int k = 0; k < 2; ++k) {
        const std::string& stat = n.input(3 + k);
        std::string name = n.output_size() > 1 + k && !n.output(1 + k).empty() && opset >= 9
                               ? n.output(1 + k)
                               : stat + "_new";
        t.add_output(name);
        if (initIndex.count(stat)) moveToInputs.insert(stat);
        bool dup = false;
        for (const auto& su : out.stateUpdates) dup |= su.first == stat;
        if (!dup) out.stateUpdates.emplace_back(stat, name);
      }
      t.add_output(n.name() + "_saved_mean");
      t.add_output(n.name() + "_saved_var");
      n = t;
    }
  }
  // Training mode: a Dropout whose model does not wire training_mode itself becomes
  // DropoutTraining, whose mask changes from step to step (reproducibly for a seed).
  if (opt.training) {
    const int opset = opsetOf(forward, "");
    for (auto& n : *g->mutable_node()) {
      if (normDomain(n.domain()) != "" || n.op_type() != "Dropout" || opset < 7) continue;
      if (n.input_size() > 2 && !n.input(2).empty()) continue;
      onnx::NodeProto t;
      t.set_name(n.name());
      t.set_op_type("DropoutTraining");
      t.set_domain(kGradDomain);
      t.add_input(n.input(0));
      if (n.input_size() > 1 && !n.input(1).empty()) t.add_input(n.input(1));
      if (const auto* r = findAttr(n, "ratio")) *t.add_attribute() = *r;
      if (const auto* s = findAttr(n, "seed")) *t.add_attribute() = *s;
      t.add_output(n.output(0));
      t.add_output(n.output_size() > 1 && !n.output(1).empty()
                       ? n.output(1)
                       : (n.name().empty() ? n.output(0) : n.name()) + "_mask");
      n = t;
    }
  }
  // Move trainables and running statistics from initializers to graph inputs, keeping values
  // as defaults would let a stale copy win; the caller feeds them every step.
  {
    google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
    for (auto& t : *g->mutable_initializer()) {
      if (moveToInputs.count(t.name()))
        addInputFromInitializer(g, t);
      else
        *kept.Add() = t;
    }
    g->mutable_initializer()->Swap(&kept);
  }
  ensureOpsetImport(m, kGradDomain, 1);

  BackwardRequest req;
  req.seeds = opt.losses;
  req.wrt = opt.trainable;
  req.ldaCoeff = opt.ldaCoeff;
  req.training = opt.training;
  req.prefix = "grad/";
  auto grads = emitBackward(m, types, req);
  if (!grads) return grads.status();

  // Outputs: losses first (kept in their order), then gradients, then new statistics.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> outs;
  std::map<std::string, onnx::ValueInfoProto> byName;
  for (const auto& o : g->output()) byName[o.name()] = o;
  for (const auto& l : opt.losses) *outs.Add() = byName[l];
  for (const auto& k : opt.keepOutputs)
    if (byName.count(k) && std::find(opt.losses.begin(), opt.losses.end(), k) == opt.losses.end())
      *outs.Add() = byName[k];
  g->mutable_output()->Swap(&outs);
  Emitter e(g, "grad_out/");
  for (size_t i = 0; i < opt.trainable.size(); ++i) {
    const std::string& w = opt.trainable[i];
    const std::string name = w + "_grad";
    std::string src = (*grads)[i];
    auto* n = g->add_node();
    n->set_name("grad_out/" + w);
    if (src.empty()) {
      // Nothing reaches this weight from the losses: its gradient is zero.
      n->set_op_type("Mul");
      n->add_input(w);
      n->add_input(e.scalar(0.0, types.elemType(w)));
    } else {
      n->set_op_type("Identity");
      n->add_input(src);
    }
    n->add_output(name);
    addOutput(g, name, types, w);
    out.gradOutputs.push_back(name);
  }
  for (const auto& [stat, name] : out.stateUpdates) addOutput(g, name, types, stat);
  // Forward types as value_info: shape inference stops at the grad-domain ops in a process that
  // has not built the catalogue (which registers their schemas), and function-expanded ops such
  // as SoftmaxCrossEntropyLoss need their input types.
  addForwardValueInfo(g, types);
  return out;
}

bool hasGradientOps(const onnx::ModelProto& model) {
  for (const auto& n : model.graph().node())
    if (n.op_type() == "Gradient" && n.domain() == "ai.onnx.preview.training") return true;
  return false;
}

Result<onnx::ModelProto> expandGradientOps(const onnx::ModelProto& model) {
  onnx::ModelProto m = model;
  const TypeTable types = inferTypes(model);
  ensureOpsetImport(m, kGradDomain, 1);
  int count = 0;
  while (true) {
    onnx::GraphProto* g = m.mutable_graph();
    int idx = -1;
    for (int i = 0; i < g->node_size(); ++i)
      if (g->node(i).op_type() == "Gradient" && g->node(i).domain() == "ai.onnx.preview.training") {
        idx = i;
        break;
      }
    if (idx < 0) break;
    onnx::NodeProto gn = g->node(idx);
    g->mutable_node()->DeleteSubrange(idx, 1);
    const std::string label = "node '" + gn.name() + "' (Gradient)";
    const std::string y = attrString(gn, "y", "");
    std::vector<std::string> xs;
    if (const auto* a = findAttr(gn, "xs"))
      for (const auto& s : a->strings()) xs.push_back(s);
    if (y.empty() || xs.empty()) return Status::error(label + ": needs attributes y and xs");
    if (gn.output_size() != static_cast<int>(xs.size()))
      return Status::error(label + ": needs one output per entry of xs");
    BackwardRequest req;
    req.seeds = {y};
    req.wrt = xs;
    req.prefix = (gn.name().empty() ? "gradient" + std::to_string(count) : gn.name()) + "/";
    auto grads = emitBackward(m, types, req);
    if (!grads) return grads.status().withContext(label);
    g = m.mutable_graph();
    Emitter e(g, req.prefix + "out/");
    for (size_t i = 0; i < xs.size(); ++i) {
      if (gn.output(i).empty()) continue;
      auto* n = g->add_node();
      n->set_name(req.prefix + "out_" + std::to_string(i));
      if ((*grads)[i].empty()) {
        n->set_op_type("Mul");
        n->add_input(xs[i]);
        n->add_input(e.scalar(0.0, types.elemType(xs[i])));
      } else {
        n->set_op_type("Identity");
        n->add_input((*grads)[i]);
      }
      n->add_output(gn.output(i));
    }
    ++count;
  }
  addForwardValueInfo(m.mutable_graph(), types);
  return m;
}

Result<std::vector<std::string>> differentiateSubgraph(onnx::ModelProto& model,
                                                       const SubgraphGradRequest& req) {
  // Shape inference on a copy whose inputs carry the caller's (more specific) types and which
  // declares the outer values the subgraph reads, so that they are typed too.
  onnx::ModelProto typed = model;
  onnx::GraphProto* tg = typed.mutable_graph();
  std::set<std::string> declared;
  for (const auto& n : tg->node())
    for (const auto& o : n.output()) declared.insert(o);
  for (auto& in : *tg->mutable_input()) {
    declared.insert(in.name());
    auto it = req.knownTypes.find(in.name());
    if (it != req.knownTypes.end()) *in.mutable_type() = it->second;
  }
  for (const auto& [name, type] : req.knownTypes) {
    if (declared.count(name)) continue;
    auto* vi = tg->add_input();
    vi->set_name(name);
    *vi->mutable_type() = type;
  }
  const TypeTable types = inferTypes(typed);
  ensureOpsetImport(model, kGradDomain, 1);
  BackwardRequest br;
  br.seedGrads = req.seeds;
  br.wrt = req.wrt;
  br.training = req.training;
  br.prefix = req.prefix;
  auto grads = emitBackward(model, types, br);
  if (!grads) return grads.status();
  addForwardValueInfo(model.mutable_graph(), types);
  return grads;
}

Result<std::map<std::string, double>> ldaCoeffFromModel(const onnx::ModelProto& model) {
  std::map<std::string, double> out;
  const std::string* text = nullptr;
  for (const auto& p : model.metadata_props())
    if (p.key() == "deepwire.graph") text = &p.value();
  if (!text) return out;
  json layout = json::parse(*text, nullptr, false);
  if (layout.is_discarded() || !layout.is_object())
    return Status::error("metadata_props 'deepwire.graph' is not valid JSON");
  if (!layout.contains("nodes") || !layout["nodes"].is_object()) return out;
  std::map<std::string, const onnx::NodeProto*> byName;
  for (const auto& n : model.graph().node()) byName[n.name()] = &n;
  for (const auto& [key, entry] : layout["nodes"].items()) {
    if (!entry.is_object() || !entry.contains("lda_coeff") || !entry["lda_coeff"].is_number())
      continue;
    const double c = entry["lda_coeff"].get<double>();
    if (c == 1.0) continue;
    if (key.rfind("node:", 0) == 0) {
      out[key.substr(5)] = c;
    } else if (key.rfind("layer:", 0) == 0) {
      const std::string layer = key.substr(6);
      if (!layout.contains("layers") || !layout["layers"].contains(layer)) continue;
      const json& entryOf = layout["layers"][layer];
      const json& nodes = entryOf["nodes"];
      if (!nodes.is_array()) continue;
      std::set<std::string> members, made;
      for (const auto& nn : nodes)
        if (nn.is_string()) members.insert(nn.get<std::string>());
      for (const auto& name : members)
        if (auto it = byName.find(name); it != byName.end())
          for (const auto& o : it->second->output()) made.insert(o);
      // The layer's own weights: the initializers its lowering made (the layout names their
      // layer by id).
      auto ownWeight = [&](const std::string& v) {
        const std::string k = "initializer:" + v;
        return layout["nodes"].contains(k) && entryOf.contains("id") &&
               layout["nodes"][k].value("layer", json()) == entryOf["id"];
      };
      // The derivative flows back through the layer to its inputs: scaled where it leaves the
      // layer, on the values the members read from outside it. Its own weights keep theirs (a
      // Dense at lda 0 stopped learning itself, and so did everything before it).
      for (const auto& name : members) {
        auto it = byName.find(name);
        if (it == byName.end()) continue;
        for (const auto& in : it->second->input())
          if (!in.empty() && !made.count(in) && !ownWeight(in)) out[ldaInputKey(name, in)] = c;
      }
    }
  }
  return out;
}

bool hasGradient(const std::string& domain, const std::string& op, int opset) {
  if (normDomain(domain) == kMicrosoftDomain) {
    // Differentiated through its body: every op there (at its default attributes) has a
    // gradient, or makes a constant.
    onnx::NodeProto n;
    n.set_op_type(op);
    n.set_domain(kMicrosoftDomain);
    onnx::FunctionProto body;
    if (!microsoftBody(n, {}, kDefaultOnnxOpset, body).ok()) return false;
    for (const auto& b : body.node())
      if (b.op_type() != "Constant" && !findGradBuilder("", b.op_type(), kDefaultOnnxOpset))
        return false;
    return true;
  }
  return findGradBuilder(domain, op, opset) != nullptr;
}

std::vector<std::string> differentiableOps(int opset) {
  std::vector<std::string> ops;
  for (const auto& b : gradBuilders())
    if (opset >= b.since && opset <= b.until) ops.push_back(b.op);
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

}  // namespace dw::engine::training
