#include "engine/function_inline.h"

#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace dw::engine {

namespace {

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

}  // namespace

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
  for (int k = 0; k < fn.node_size(); ++k) {
    const onnx::NodeProto& bn = fn.node(k);
    onnx::NodeProto n = bn;
    // Unique names: autodiff keys a node's lda coeff by its name.
    n.set_name(prefix + (bn.name().empty() ? bn.op_type() + std::to_string(k) : bn.name()));
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

namespace {

std::string domainOf(const std::string& d) {
  return d == "ai.onnx" ? std::string() : d;
}

struct LocalInliner {
  std::map<std::string, const onnx::FunctionProto*> functions;  // "domain:name"
  std::map<std::string, int64_t> opsets;                        // the model's
  int uid = 0;

  Status graph(onnx::GraphProto& g, int depth) {
    if (depth > 64)
      return Status::error("local functions call each other more than 64 deep (a recursion?)");
    google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
    bool again = false;
    for (auto& n : *g.mutable_node()) {
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_g()) DW_RETURN_IF_ERROR(graph(*a.mutable_g(), depth + 1));
        for (auto& sg : *a.mutable_graphs()) DW_RETURN_IF_ERROR(graph(sg, depth + 1));
      }
      auto f = functions.find(domainOf(n.domain()) + ":" + n.op_type());
      if (f == functions.end()) {
        *out.Add() = n;
        continue;
      }
      const onnx::FunctionProto& fn = *f->second;
      for (const auto& imp : fn.opset_import()) {
        auto have = opsets.find(domainOf(imp.domain()));
        if (have != opsets.end() && have->second != imp.version())
          return Status::error("local function " + fn.name() + " imports " +
                               (imp.domain().empty() ? "ai.onnx" : imp.domain()) + " opset " +
                               std::to_string(imp.version()) + " and the model opset " +
                               std::to_string(have->second) +
                               ": its body cannot join the model's graph");
      }
      Attributes attrs;
      for (const auto& a : n.attribute()) attrs.set(a);
      std::vector<onnx::NodeProto> body;
      DW_RETURN_IF_ERROR(inlineFunction(n, fn, attrs, uid++, body));
      for (auto& b : body) {
        again |= functions.count(domainOf(b.domain()) + ":" + b.op_type()) != 0;
        *out.Add() = std::move(b);
      }
    }
    g.mutable_node()->Swap(&out);
    return again ? graph(g, depth + 1) : Status();
  }
};

}  // namespace

Result<onnx::ModelProto> inlineLocalFunctions(const onnx::ModelProto& model) {
  if (model.functions_size() == 0) return model;
  onnx::ModelProto m = model;
  LocalInliner in;
  for (const auto& f : model.functions()) in.functions[domainOf(f.domain()) + ":" + f.name()] = &f;
  for (const auto& o : model.opset_import()) in.opsets[domainOf(o.domain())] = o.version();
  DW_RETURN_IF_ERROR(in.graph(*m.mutable_graph(), 0));
  // Domains the bodies use that the model did not import come with the functions' versions.
  for (const auto& f : model.functions())
    for (const auto& imp : f.opset_import())
      if (!in.opsets.count(domainOf(imp.domain()))) {
        in.opsets[domainOf(imp.domain())] = imp.version();
        *m.add_opset_import() = imp;
      }
  m.clear_functions();
  return m;
}

}  // namespace dw::engine
