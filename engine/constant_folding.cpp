#include "engine/constant_folding.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/onnx_attrs.h"
#include "engine/plan.h"
#include "engine/session.h"
#include "engine/tensor.h"
#include "graphs/subgraph.h"

namespace dw::engine {
namespace {

// Evaluated at plan time when every input is a small constant: the shape arithmetic exporters
// write, whose outputs are at most their inputs' broadcast. Ops whose output size is a value
// read from the file (Range, ConstantOfShape, Expand, Tile) stay out, so that a damaged file
// cannot make the fold itself take the memory.
bool foldable(const std::string& op) {
  static const std::set<std::string> ops = {
      "Constant",  "Gather",     "Unsqueeze",   "Squeeze",   "Concat",
      "Slice",     "Cast",       "Reshape",     "Flatten",   "Identity",
      "Transpose", "Add",        "Sub",         "Mul",       "Div",
      "Mod",       "Neg",        "Abs",         "Floor",     "Ceil",
      "Equal",     "Less",       "LessOrEqual", "Greater",   "GreaterOrEqual",
      "Not",       "And",        "Or",          "Where",     "Max",
      "Min",       "ReduceProd", "ReduceSum",   "ReduceMax", "ReduceMin"};
  return ops.count(op) != 0;
}

// Elements of a value a fold may read or keep: shapes, axes, starts and ends are a handful.
constexpr int64_t kMaxElements = 1024;

int64_t elements(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;
  return n;
}

onnx::TensorProto int64Tensor(const std::string& name, const std::vector<int64_t>& values,
                              bool scalar) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  if (!scalar) t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

// Runs `nodes`, whose inputs are all in `known`, in one session of their own (unfused, one
// thread, no folding of its own) and returns their outputs.
Result<std::map<std::string, Tensor>> evaluate(
    const onnx::ModelProto& model, const std::vector<const onnx::NodeProto*>& nodes,
    const std::map<std::string, onnx::TensorProto>& known) {
  onnx::ModelProto m;
  m.set_ir_version(std::max<int64_t>(model.ir_version(), 4));
  *m.mutable_opset_import() = model.opset_import();
  auto* g = m.mutable_graph();
  std::set<std::string> added;
  for (const auto* n : nodes) {
    *g->add_node() = *n;
    for (const auto& in : n->input())
      if (!in.empty() && added.insert(in).second) *g->add_initializer() = known.at(in);
    for (const auto& out : n->output())
      if (!out.empty()) g->add_output()->set_name(out);
  }
  SessionOptions options;
  options.fuse = false;
  options.foldConstants = false;
  options.recordRuns = false;
  options.backend.threads = 1;
  auto session = InferenceSession::create(m, options);
  if (!session) return session.status();
  (*session)->setProfiling(false);  // DEEPWIRE_PROFILE is about the model's session, not this one
  return (*session)->run({});
}

}  // namespace

std::optional<onnx::ModelProto> foldConstants(const onnx::ModelProto& model,
                                              const onnx::GraphProto& inferred) {
  const onnx::GraphProto& g = model.graph();
  int opset = model.opset_import_size() == 0 ? 1 : 0;
  for (const auto& imp : model.opset_import())
    if (detail::normDomain(imp.domain()).empty()) opset = static_cast<int>(imp.version());

  std::set<std::string> feeds, graphOutputs;
  for (const auto& v : g.input()) feeds.insert(v.name());
  for (const auto& v : g.output()) graphOutputs.insert(v.name());
  // Static shapes a Shape node may be folded with: those of graph inputs (a run refuses a feed
  // of another shape), of initializers, and those shape inference worked out. A shape only the
  // file declares (value_info, an output's type) is not trusted: a damaged file would fold a
  // wrong one where the run would have measured the right one.
  std::set<std::string> declared;
  for (const auto& v : g.value_info()) declared.insert(v.name());
  for (const auto& v : g.output()) declared.insert(v.name());
  std::unordered_map<std::string, std::vector<int64_t>> shapes;
  auto noteShape = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
    std::vector<int64_t> dims;
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0) return;
      dims.push_back(d.dim_value());
    }
    shapes[v.name()] = std::move(dims);
  };
  for (const auto& v : inferred.input()) noteShape(v);
  for (const auto& v : inferred.value_info())
    if (!declared.count(v.name())) noteShape(v);

  std::map<std::string, onnx::TensorProto> known;  // small constants a fold may read
  for (const auto& init : g.initializer()) {
    if (feeds.count(init.name())) continue;
    shapes[init.name()] = {init.dims().begin(), init.dims().end()};
    if (elements(init) <= kMaxElements && init.data_location() != onnx::TensorProto::EXTERNAL)
      known[init.name()] = init;
  }

  const int n = g.node_size();
  std::vector<bool> folded(n, false), tried(n, false);
  std::map<std::string, onnx::TensorProto> made;  // every folded value, whatever its size
  auto keep = [&](onnx::TensorProto t) {
    if (elements(t) <= kMaxElements) known[t.name()] = t;
    made[t.name()] = std::move(t);
  };
  bool any = false;
  for (;;) {
    std::vector<int> wave;
    for (int i = 0; i < n; ++i) {
      if (tried[i]) continue;
      const onnx::NodeProto& node = g.node(i);
      const std::string& op = node.op_type();
      bool eligible = detail::normDomain(node.domain()).empty() && node.output_size() >= 1;
      for (const auto& out : node.output()) eligible = eligible && !graphOutputs.count(out);
      if (!eligible) {
        tried[i] = true;
        continue;
      }
      if ((op == "Shape" || op == "Size") && node.input_size() == 1) {
        auto it = shapes.find(node.input(0));
        if (it == shapes.end()) continue;  // a later wave's fold cannot give it a shape
        tried[i] = folded[i] = any = true;
        const auto& dims = it->second;
        if (op == "Size") {
          int64_t count = 1;
          for (int64_t d : dims) count *= d;
          keep(int64Tensor(node.output(0), {count}, true));
          continue;
        }
        const int64_t rank = static_cast<int64_t>(dims.size());
        int64_t start = 0, end = rank;
        if (opset >= 15) {
          if (const auto* a = findAttr(node, "start")) start = a->i();
          if (const auto* a = findAttr(node, "end")) end = a->i();
        }
        auto clampAxis = [rank](int64_t a) {
          return std::clamp(a < 0 ? a + rank : a, int64_t(0), rank);
        };
        start = clampAxis(start);
        end = std::max(start, clampAxis(end));
        keep(int64Tensor(node.output(0), {dims.begin() + start, dims.begin() + end}, false));
        continue;
      }
      if (op == "Constant" && node.output_size() == 1) {
        if (const auto* a = findAttr(node, "value");
            a && a->has_t() && node.attribute_size() == 1 &&
            a->t().data_location() != onnx::TensorProto::EXTERNAL) {
          onnx::TensorProto t = a->t();
          t.set_name(node.output(0));
          tried[i] = folded[i] = any = true;
          shapes[t.name()] = {t.dims().begin(), t.dims().end()};
          keep(std::move(t));
          continue;
        }
      }
      if (!foldable(op) ||
          std::any_of(node.attribute().begin(), node.attribute().end(),
                      [](const auto& a) { return a.has_g() || a.graphs_size() > 0; })) {
        tried[i] = true;
        continue;
      }
      const bool ready =
          std::all_of(node.input().begin(), node.input().end(),
                      [&](const std::string& in) { return in.empty() || known.count(in); });
      if (ready) wave.push_back(i);
    }
    if (wave.empty()) break;
    std::vector<const onnx::NodeProto*> nodes;
    for (int i : wave) nodes.push_back(&g.node(i));
    auto together = evaluate(model, nodes, known);
    for (int i : wave) {
      tried[i] = true;
      const onnx::NodeProto& node = g.node(i);
      // One node the engine refuses leaves the others of its wave foldable, each alone.
      std::map<std::string, Tensor> alone;
      const std::map<std::string, Tensor>* outs = together ? &*together : nullptr;
      if (!outs) {
        auto r = evaluate(model, {&node}, known);
        if (!r) continue;
        alone = std::move(*r);
        outs = &alone;
      }
      bool small = true;
      for (const auto& out : node.output())
        if (!out.empty()) {
          auto it = outs->find(out);
          small = small && it != outs->end() && it->second.size() <= kMaxElements;
        }
      if (!small) continue;
      folded[i] = any = true;
      for (const auto& out : node.output()) {
        if (out.empty()) continue;
        onnx::TensorProto t;
        tensorToProto(outs->at(out), &t, out);
        shapes[out] = {t.dims().begin(), t.dims().end()};
        keep(std::move(t));
      }
    }
  }
  if (!any) return std::nullopt;

  // The folded model: the nodes left, and an initializer for each folded value they (or their
  // subgraphs) read.
  onnx::ModelProto out = model;
  onnx::GraphProto* og = out.mutable_graph();
  og->clear_node();
  std::set<std::string> read;
  for (int i = 0; i < n; ++i) {
    if (folded[i]) continue;
    const onnx::NodeProto& node = g.node(i);
    *og->add_node() = node;
    for (const auto& in : node.input()) read.insert(in);
    for (const auto& a : node.attribute()) {
      if (a.has_g()) read.merge(dw::outerNames(a.g()));
      for (const auto& sg : a.graphs()) read.merge(dw::outerNames(sg));
    }
  }
  for (auto& [name, t] : made)
    if (read.count(name)) *og->add_initializer() = std::move(t);
  return out;
}

}  // namespace dw::engine
