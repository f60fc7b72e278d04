// Gradients through Scan (opset 9+) and Loop.
//
// The backward of a Scan or Loop is a Scan running the other way whose body is the gradient of
// the forward body, built by the same autodiff (differentiateSubgraph, recursively for nested
// bodies). Each backward step recomputes its forward step from the values that step started
// from: the forward node is rewritten to also emit its per-step input states as scan outputs
// (states the body passes through unchanged are read from the outer value instead; a Loop also
// saves each step's iteration number and condition), and a Scan's scan inputs are read again. The
// backward body carries the gradients of the states and emits the gradients of the scan inputs'
// slices. Outer values the body reads are first turned into pass-through states
// (exposeSubgraphCaptures), so their gradients, summed over the steps by the state gradient chain,
// leave the Scan through its inputs.
#include <algorithm>
#include <map>
#include <set>

#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"
#include "graphs/subgraph.h"

namespace dw::engine::training {

namespace {

bool isFloatElem(int32_t t) {
  return t == 0 || t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::DOUBLE ||
         t == onnx::TensorProto::FLOAT16 || t == onnx::TensorProto::BFLOAT16;
}

onnx::GraphProto* bodyOf(onnx::NodeProto& n) {
  for (auto& a : *n.mutable_attribute())
    if (a.name() == "body" && a.has_g()) return a.mutable_g();
  return nullptr;
}

onnx::AttributeProto* mutableAttr(onnx::NodeProto& n, const std::string& name) {
  for (auto& a : *n.mutable_attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::set<std::string> definedIn(const onnx::GraphProto& g) {
  std::set<std::string> d;
  for (const auto& i : g.input()) d.insert(i.name());
  for (const auto& i : g.initializer()) d.insert(i.name());
  for (const auto& i : g.sparse_initializer()) d.insert(i.values().name());
  for (const auto& n : g.node())
    for (const auto& o : n.output())
      if (!o.empty()) d.insert(o);
  return d;
}

// Names a node reads, those its subgraphs read from enclosing scopes included.
std::set<std::string> nodeReads(const onnx::NodeProto& n) {
  std::set<std::string> r;
  for (const auto& i : n.input())
    if (!i.empty()) r.insert(i);
  for (const auto& a : n.attribute()) {
    if (a.has_g()) r.merge(dw::outerNames(a.g()));
    for (const auto& sg : a.graphs()) r.merge(dw::outerNames(sg));
  }
  return r;
}

// Every name used anywhere in g and its subgraphs (fresh names avoid them all).
void allNames(const onnx::GraphProto& g, std::set<std::string>& out) {
  for (const auto& i : g.input()) out.insert(i.name());
  for (const auto& i : g.output()) out.insert(i.name());
  for (const auto& i : g.initializer()) out.insert(i.name());
  for (const auto& n : g.node()) {
    for (const auto& s : n.input()) out.insert(s);
    for (const auto& s : n.output()) out.insert(s);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) allNames(a.g(), out);
      for (const auto& sg : a.graphs()) allNames(sg, out);
    }
  }
}

// Renames reads of `from` in g and its subgraphs, except where a graph defines `from` itself.
void renameReads(onnx::GraphProto& g, const std::string& from, const std::string& to) {
  if (definedIn(g).count(from)) return;
  for (auto& n : *g.mutable_node()) {
    for (int i = 0; i < n.input_size(); ++i)
      if (n.input(i) == from) n.set_input(i, to);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) renameReads(*a.mutable_g(), from, to);
      for (auto& sg : *a.mutable_graphs()) renameReads(sg, from, to);
    }
  }
  for (auto& o : *g.mutable_output())
    if (o.name() == from) o.set_name(to);
}

template <class Field, class T>
void insertAt(Field* f, int pos, T value) {
  *f->Add() = std::move(value);
  for (int k = f->size() - 1; k > pos; --k) f->SwapElements(k, k - 1);
}

class FreshNames {
 public:
  explicit FreshNames(std::set<std::string> used) : used_(std::move(used)) {}
  std::string operator()(const std::string& base) {
    std::string n = base;
    for (int k = 1; used_.count(n); ++k) n = base + "_" + std::to_string(k);
    used_.insert(n);
    return n;
  }

 private:
  std::set<std::string> used_;
};

onnx::ValueInfoProto valueInfo(const std::string& name, const onnx::TypeProto* type) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  if (type) *v.mutable_type() = *type;
  return v;
}

}  // namespace

Status exposeSubgraphCaptures(onnx::GraphProto& g, const TypeTable& types,
                              const std::vector<std::string>& wrt, int opset) {
  // Values depending on a wrt leaf, counting what subgraphs read as their node's inputs; the
  // sweep repeats until nothing changes, so the graph's node order does not matter.
  std::set<std::string> needs(wrt.begin(), wrt.end());
  std::vector<std::set<std::string>> reads;
  for (const auto& n : g.node()) reads.push_back(nodeReads(n));
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g.node_size(); ++i) {
      bool any = false;
      for (const auto& r : reads[i]) any |= needs.count(r) > 0;
      if (!any) continue;
      for (const auto& o : g.node(i).output())
        if (!o.empty() && isFloatElem(types.elemType(o)) && needs.insert(o).second) changed = true;
    }
  }
  std::set<std::string> used;
  allNames(g, used);
  FreshNames fresh(std::move(used));
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto& n = *g.mutable_node(i);
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    const bool scan = n.op_type() == "Scan" && opset >= 9, loop = n.op_type() == "Loop";
    if (!scan && !loop) continue;
    onnx::GraphProto* body = bodyOf(n);
    if (!body) continue;
    std::set<std::string> captured;
    captured.merge(dw::outerNames(*body));
    const std::string owner = n.name().empty() ? n.op_type() : n.name();
    for (const auto& w : captured) {
      if (!needs.count(w)) continue;
      // Scan: states come first among inputs and outputs, on the node and in the body. Loop:
      // the node has (M, cond, states...), the body (iter, cond, states...) -> (cond, states...).
      const int nState = scan ? n.input_size() - static_cast<int>(attrInt(n, "num_scan_inputs", 0))
                              : n.input_size() - 2;
      if (nState < 0) continue;
      const int bodyIn = scan ? nState : 2 + nState, bodyOut = scan ? nState : 1 + nState;
      if (body->input_size() < bodyIn || body->output_size() < bodyOut) continue;
      const std::string inner = fresh(owner + "/" + w);
      renameReads(*body, w, inner);
      auto* pass = body->add_node();
      pass->set_op_type("Identity");
      pass->set_name(fresh(inner + "/pass"));
      pass->add_input(inner);
      pass->add_output(fresh(inner + "/next"));
      insertAt(body->mutable_input(), bodyIn, valueInfo(inner, types.type(w)));
      insertAt(body->mutable_output(), bodyOut, valueInfo(pass->output(0), types.type(w)));
      insertAt(n.mutable_input(), scan ? nState : n.input_size(), w);
      while (n.output_size() < nState) n.add_output("");
      insertAt(n.mutable_output(), nState, fresh(owner + "/" + w + "/final"));
    }
  }
  return Status();
}

namespace {

// Where a Scan's or a Loop's parts sit among the node's and the body's inputs and outputs.
// Scan: node (states, scan inputs) -> (states, scan outputs), body likewise. Loop: node
// (M, cond, states) -> (states, scan outputs), body (iteration, cond, states) -> (cond, states,
// scan outputs).
struct Layout {
  int nState = 0, nScanIn = 0, nScanOut = 0;
  int bodyStateIn = 0, bodyStateOut = 0, nodeStateIn = 0;  // first state (node outputs: 0)
  int bodyScanOut = 0;                                     // first scan output in the body
  std::vector<int> stepInputs;  // other body inputs the step reads (Loop: iteration, cond)
  std::vector<int64_t> inAxes, inDirs, outAxes, outDirs;
  int64_t inAxis(int k) const { return k < static_cast<int>(inAxes.size()) ? inAxes[k] : 0; }
  int64_t inDir(int k) const { return k < static_cast<int>(inDirs.size()) ? inDirs[k] : 0; }
  int64_t outAxis(int k) const { return k < static_cast<int>(outAxes.size()) ? outAxes[k] : 0; }
  int64_t outDir(int k) const { return k < static_cast<int>(outDirs.size()) ? outDirs[k] : 0; }
};

// The backward of a Scan or Loop (file comment): a reverse Scan over the saved per-step values.
Status gradLoopBody(GradCtx& c, const Layout& L) {
  onnx::GraphProto* fwdBody = bodyOf(c.node);
  const onnx::GraphProto body = *fwdBody;  // as it was, before the rewrite below
  const int nState = L.nState, nScanIn = L.nScanIn, nScanOut = L.nScanOut;
  auto stateIn = [&](int i) -> const onnx::ValueInfoProto& {
    return body.input(L.bodyStateIn + i);
  };
  auto stateOut = [&](int i) -> const onnx::ValueInfoProto& {
    return body.output(L.bodyStateOut + i);
  };
  auto scanIn = [&](int m) -> const onnx::ValueInfoProto& { return body.input(nState + m); };
  auto scanOut = [&](int k) -> const onnx::ValueInfoProto& {
    return body.output(L.bodyScanOut + k);
  };
  auto outerState = [&](int i) { return c.in(L.nodeStateIn + i); };
  auto outerScanIn = [&](int m) { return c.in(nState + m); };

  const std::set<std::string> bodyDefined = definedIn(body);
  std::set<std::string> bodyNames;
  allNames(body, bodyNames);
  FreshNames freshBody(bodyNames);
  std::map<std::string, const onnx::NodeProto*> producer;
  for (const auto& n : body.node())
    for (const auto& o : n.output()) producer[o] = &n;
  auto isFloatValue = [&](const onnx::ValueInfoProto& v, const std::string& outer) {
    if (v.type().value_case() != onnx::TypeProto::VALUE_NOT_SET && !v.type().has_tensor_type())
      return false;  // sequences, optionals
    const int32_t t = v.type().tensor_type().elem_type();
    return isFloatElem(t ? t : c.types.elemType(outer));
  };

  // Per state: whether a gradient flows along it (float), and whether the body passes it
  // through unchanged (then every step sees the outer value, and nothing needs saving).
  std::vector<bool> carried(nState), invariant(nState);
  for (int i = 0; i < nState; ++i) {
    const std::string& in = stateIn(i).name();
    const std::string& out = stateOut(i).name();
    auto p = producer.find(out);
    const bool passes = out == in || (p != producer.end() && p->second->op_type() == "Identity" &&
                                      p->second->input_size() == 1 && p->second->input(0) == in);
    invariant[i] = passes && !bodyDefined.count(outerState(i));
    carried[i] = isFloatValue(stateIn(i), outerState(i));
  }

  // Forward rewrite: the per-step values of the other states and of the step inputs become
  // extra scan outputs (axis 0, forward order).
  while (c.node.output_size() < nState + nScanOut) c.node.add_output("");
  const std::string owner = c.node.name().empty() ? c.node.op_type() : c.node.name();
  std::vector<int> saved;  // body inputs saved per step, in the order of `perStep`
  for (int k : L.stepInputs) saved.push_back(k);
  for (int i = 0; i < nState; ++i)
    if (!invariant[i]) saved.push_back(L.bodyStateIn + i);
  std::vector<std::string> perStep;
  for (int k : saved) {
    const onnx::ValueInfoProto& v = body.input(k);
    auto* id = fwdBody->add_node();
    id->set_op_type("Identity");
    id->set_name(freshBody(v.name() + "/saved"));
    id->add_input(v.name());
    id->add_output(freshBody(v.name() + "/saved"));
    *fwdBody->add_output() = valueInfo(id->output(0), &v.type());
    perStep.push_back(c.e.fresh(owner + "/" + v.name() + "/per_step"));
    c.node.add_output(perStep.back());
    if (auto* a = mutableAttr(c.node, "scan_output_axes")) a->add_ints(0);
    if (auto* a = mutableAttr(c.node, "scan_output_directions")) a->add_ints(0);
  }
  c.dY.resize(c.node.output_size());
  auto dyOut = [&](int k) -> const std::string& { return c.dY[nState + k]; };

  // The backward body: the forward body's nodes (recomputing the step) plus their gradients.
  onnx::ModelProto wrap;
  wrap.set_ir_version(8);
  auto* imp = wrap.add_opset_import();
  imp->set_domain("");
  imp->set_version(c.opset);
  onnx::GraphProto& bb = *wrap.mutable_graph();
  bb = body;
  bb.set_name(body.name() + "_grad");
  bb.clear_input();
  bb.clear_output();
  SubgraphGradRequest req;
  req.training = c.training;
  req.prefix = c.e.fresh(owner + "/body_grad") + "/";
  for (int i = 0; i < nState; ++i) {
    if (!carried[i]) continue;
    const std::string g = freshBody(stateOut(i).name() + "_grad");
    *bb.add_input() = valueInfo(g, &stateOut(i).type());
    req.seeds.push_back({stateOut(i).name(), g});
  }
  int nBackScanIn = 0;
  for (int k : saved) {
    *bb.add_input() = body.input(k);
    ++nBackScanIn;
  }
  for (int i = 0, first = 0; i < nState; ++i) {
    if (!invariant[i]) continue;
    onnx::NodeProto id;  // first: the step's nodes read it
    id.set_op_type("Identity");
    id.set_name(freshBody(stateIn(i).name() + "/outer"));
    id.add_input(outerState(i));
    id.add_output(stateIn(i).name());
    insertAt(bb.mutable_node(), first++, std::move(id));
  }
  for (int m = 0; m < nScanIn; ++m) *bb.add_input() = scanIn(m);
  nBackScanIn += nScanIn;
  for (int k = 0; k < nScanOut; ++k) {
    if (dyOut(k).empty()) continue;
    const std::string g = freshBody(scanOut(k).name() + "_grad");
    *bb.add_input() = valueInfo(g, &scanOut(k).type());
    req.seeds.push_back({scanOut(k).name(), g});
    ++nBackScanIn;
  }
  std::vector<bool> needIn(nScanIn);
  for (int i = 0; i < nState; ++i)
    if (carried[i]) req.wrt.push_back(stateIn(i).name());
  for (int m = 0; m < nScanIn; ++m) {
    needIn[m] = c.need(nState + m) && isFloatValue(scanIn(m), outerScanIn(m));
    if (needIn[m]) req.wrt.push_back(scanIn(m).name());
  }
  // Types for shape inference: scan slices have fixed shapes, states only where the forward's
  // types show they keep theirs (pass-through states are typed through the outer value their
  // Identity reads, below).
  for (int i = 0; i < nState; ++i) {
    std::vector<int64_t> a, b;
    const bool stable = c.types.dims(outerState(i), &a) && c.types.dims(c.out(i), &b) && a == b;
    if (!invariant[i] && stable && c.types.type(outerState(i)))
      req.knownTypes[stateIn(i).name()] = *c.types.type(outerState(i));
  }
  for (int m = 0; m < nScanIn; ++m) {
    const onnx::TypeProto* t = c.types.type(outerScanIn(m));
    if (!t || !t->tensor_type().has_shape()) continue;
    onnx::TypeProto slice = *t;
    auto* dims = slice.mutable_tensor_type()->mutable_shape()->mutable_dim();
    int64_t a = L.inAxis(m);
    if (a < 0) a += dims->size();
    if (a < 0 || a >= dims->size()) continue;
    dims->DeleteSubrange(static_cast<int>(a), 1);
    req.knownTypes[scanIn(m).name()] = slice;
  }
  std::set<std::string> outer;
  outer.merge(dw::outerNames(bb));
  for (const auto& o : outer)
    if (const auto* t = c.types.type(o)) req.knownTypes[o] = *t;

  auto grads = differentiateSubgraph(wrap, req);
  if (!grads) return grads.status().withContext(c.node.op_type() + " body '" + body.name() + "'");

  // The backward body's outputs: state gradients, then the needed scan inputs' slice gradients.
  Emitter be(&bb, req.prefix + "out/");
  std::set<std::string> inputs, outputs;
  for (const auto& v : bb.input()) inputs.insert(v.name());
  size_t gi = 0;
  auto emitOutput = [&](const std::string& grad, const onnx::ValueInfoProto& like) {
    std::string name = grad;
    if (name.empty()) {
      // Nothing reaches it this step: zeros shaped like the forward value.
      int32_t et = like.type().tensor_type().elem_type();
      if (!et) et = c.gradType();
      onnx::TensorProto zero;
      zero.set_data_type(et);
      zero.add_dims(1);
      if (et == onnx::TensorProto::DOUBLE)
        zero.add_double_data(0);
      else
        zero.add_float_data(0);
      name = be.op1("ConstantOfShape", {be.op1("Shape", {like.name()})}, {attrT("value", zero)});
    } else if (inputs.count(name) || outputs.count(name)) {
      name = be.op1("Identity", {name});
    }
    outputs.insert(name);
    *bb.add_output() = valueInfo(name, &like.type());
  };
  for (int i = 0; i < nState; ++i)
    if (carried[i]) emitOutput((*grads)[gi++], stateIn(i));
  for (int m = 0; m < nScanIn; ++m)
    if (needIn[m]) emitOutput((*grads)[gi++], scanIn(m));

  // The reverse Scan: its states are the state gradients; it reads the saved values, the
  // forward's scan inputs and the scan outputs' gradients from the last step back.
  std::vector<std::string> ins;
  std::vector<int64_t> bInAxes, bInDirs, bOutAxes, bOutDirs;
  for (int i = 0; i < nState; ++i)
    if (carried[i]) ins.push_back(c.dYOrZeros(i));
  for (const auto& p : perStep) {
    ins.push_back(p);
    bInAxes.push_back(0);
    bInDirs.push_back(1);
  }
  for (int m = 0; m < nScanIn; ++m) {
    ins.push_back(outerScanIn(m));
    bInAxes.push_back(L.inAxis(m));
    bInDirs.push_back(1 - L.inDir(m));
  }
  for (int k = 0; k < nScanOut; ++k) {
    if (dyOut(k).empty()) continue;
    ins.push_back(dyOut(k));
    bInAxes.push_back(L.outAxis(k));
    bInDirs.push_back(1 - L.outDir(k));
  }
  std::vector<std::string> outs;
  for (int i = 0; i < nState; ++i)
    if (carried[i]) outs.push_back("");  // named even when unused: the kernel counts outputs
  for (int m = 0; m < nScanIn; ++m) {
    if (!needIn[m]) continue;
    outs.push_back("");
    bOutAxes.push_back(L.inAxis(m));
    bOutDirs.push_back(1 - L.inDir(m));
  }
  onnx::AttributeProto bodyAttr;
  bodyAttr.set_name("body");
  bodyAttr.set_type(onnx::AttributeProto::GRAPH);
  *bodyAttr.mutable_g() = bb;
  std::vector<onnx::AttributeProto> attrs = {bodyAttr, attrI("num_scan_inputs", nBackScanIn),
                                             attrInts("scan_input_axes", bInAxes),
                                             attrInts("scan_input_directions", bInDirs)};
  if (!bOutAxes.empty()) {
    attrs.push_back(attrInts("scan_output_axes", bOutAxes));
    attrs.push_back(attrInts("scan_output_directions", bOutDirs));
  }
  auto r = c.e.op("Scan", ins, outs, std::move(attrs));
  size_t ri = 0;
  for (int i = 0; i < nState; ++i) {
    if (!carried[i]) continue;
    if (c.need(L.nodeStateIn + i)) c.dX[L.nodeStateIn + i] = r[ri];
    ++ri;
  }
  for (int m = 0; m < nScanIn; ++m)
    if (needIn[m]) c.dX[nState + m] = r[ri++];
  return Status();
}

}  // namespace

Status gradScan(GradCtx& c) {
  const onnx::GraphProto* body = bodyOf(c.node);
  if (!body) return Status::error("Scan has no body graph");
  Layout L;
  L.nScanIn = static_cast<int>(attrInt(c.node, "num_scan_inputs", 0));
  L.nState = c.node.input_size() - L.nScanIn;
  if (L.nScanIn < 1 || L.nState < 0 || body->input_size() != L.nState + L.nScanIn ||
      body->output_size() < L.nState)
    return Status::error("the body's inputs and outputs do not match the node's (" +
                         std::to_string(L.nState) + " states, " + std::to_string(L.nScanIn) +
                         " scan inputs)");
  L.nScanOut = body->output_size() - L.nState;
  L.bodyScanOut = L.nState;
  L.inAxes = attrInts(c.node, "scan_input_axes");
  L.inDirs = attrInts(c.node, "scan_input_directions");
  L.outAxes = attrInts(c.node, "scan_output_axes");
  L.outDirs = attrInts(c.node, "scan_output_directions");
  for (int k = 0; k < L.nScanIn; ++k)
    if (L.inDir(k) != 0 && L.inDir(k) != 1)
      return Status::error("scan_input_directions must hold 0 or 1");
  for (int k = 0; k < L.nScanOut; ++k)
    if (L.outDir(k) != 0 && L.outDir(k) != 1)
      return Status::error("scan_output_directions must hold 0 or 1");
  return gradLoopBody(c, L);
}

// Loop: whatever the trip count and condition, the steps that ran are the steps saved, so the
// reverse Scan replays exactly those; the iteration number and the condition a step saw are saved
// with its states.
Status gradLoop(GradCtx& c) {
  const onnx::GraphProto* body = bodyOf(c.node);
  if (!body) return Status::error("Loop has no body graph");
  Layout L;
  L.nState = c.node.input_size() - 2;
  if (L.nState < 0 || body->input_size() != 2 + L.nState || body->output_size() < 1 + L.nState)
    return Status::error("the body's inputs and outputs do not match the node's (" +
                         std::to_string(std::max(L.nState, 0)) + " loop-carried values)");
  L.nScanOut = body->output_size() - 1 - L.nState;
  L.bodyStateIn = 2;
  L.bodyStateOut = 1;
  L.nodeStateIn = 2;
  L.bodyScanOut = 1 + L.nState;
  L.stepInputs = {0, 1};
  return gradLoopBody(c, L);
}

}  // namespace dw::engine::training
