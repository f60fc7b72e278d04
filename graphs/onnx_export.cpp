#include "graphs/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <set>

#include "graphs/project.h"
#include "graphs/subgraph.h"
#include "graphs/tensor_data.h"
#include "nodes/lowering.h"
#include "nodes/onnx_params.h"
#include "nodes/schema_facts.h"
#include "nodes/type_syntax.h"

namespace dw {

namespace {

using nlohmann::json;

// The exporter's view of one model of the canvas.
class Lowering {
 public:
  Lowering(const Graph& g, const ExportOptions& o) : g_(g), opt_(o) {}

  Result<onnx::ModelProto> run() {
    auto problems = g_.validate();
    if (!problems.empty()) {
      std::string msg = "the graph has " + std::to_string(problems.size()) + " problem(s):";
      for (const auto& p : problems) msg += "\n  " + p.message;
      return Status::error(msg);
    }
    for (const auto& [id, n] : g_.nodes())
      if (g_.modelOf(id) == opt_.model) ids_.push_back(id);
    if (ids_.empty())
      return Status::error(opt_.model.empty() ? "the graph is empty: add an Input, some nodes "
                                                "and an Output"
                                              : "no node belongs to model '" + opt_.model + "'");
    nameNodes();
    auto order = topologicalOrder();
    if (!order.ok()) return order.status();
    findTrainingOnly(*order);

    onnx::ModelProto m;
    const ModelInfo& info = g_.info();
    m.set_ir_version(info.irVersion);
    m.set_producer_name(info.producerName);
    if (!info.producerVersion.empty()) m.set_producer_version(info.producerVersion);
    if (!info.modelDomain.empty()) m.set_domain(info.modelDomain);
    if (info.modelVersion) m.set_model_version(info.modelVersion);
    if (!info.docString.empty()) m.set_doc_string(info.docString);
    auto* graph = m.mutable_graph();
    graph->set_name(info.graphName.empty() ? "deepwire" : info.graphName);

    // Opset imports come first: layers run shape inference on the model as it grows.
    std::map<std::string, int> opsets;
    for (const auto& [dom, v] : info.opsets)
      if (dom != kGraphDomain && dom != kLayersDomain) opsets[dom] = v;
    for (NodeId id : ids_) {
      const Node& n = *g_.node(id);
      if (g_.spec(n)->kind == NodeKind::Op && !skipped(id))
        opsets.emplace(n.domain, g_.opset(n.domain));
    }
    opsets.emplace(kOnnxDomain, g_.opset(kOnnxDomain));
    for (const auto& [dom, v] : opsets) {
      auto* op = m.add_opset_import();
      op->set_domain(onnxDomainName(dom));
      op->set_version(v);
    }
    model_ = &m;
    for (NodeId id : *order) {
      if (skipped(id)) continue;
      const Node& n = *g_.node(id);
      const NodeSpec& s = *g_.spec(n);
      switch (s.kind) {
        case NodeKind::GraphInput:
          DW_RETURN_IF_ERROR(emitInput(n, graph));
          break;
        case NodeKind::Initializer:
          DW_RETURN_IF_ERROR(emitInitializer(n, graph));
          break;
        case NodeKind::GraphOutput:
          outputs_.push_back(id);
          break;
        case NodeKind::Op:
          emitOp(n, s, graph);
          break;
        case NodeKind::Layer:
          if (opt_.withLosses && s.metricStats)
            DW_RETURN_IF_ERROR(emitMetric(n, s));
          else
            DW_RETURN_IF_ERROR(emitLayer(n, s));
          if (opt_.withLosses && s.isLoss && !consumed(id)) {
            training_["losses"].push_back(g_.tensorName({id, 0}));
            extraOutputs_.push_back(g_.tensorName({id, 0}));
          }
          break;
      }
      if (s.kind == NodeKind::GraphInput && trainingOnly_.count(id))
        training_["targets"].push_back(n.name);
    }
    // In the order of the Output nodes (an imported model's order), not of when each became
    // ready: a loss added to one of two outputs, with its new label input, moved that output
    // last, and a caller reading outputs by position mixed them up.
    std::sort(outputs_.begin(), outputs_.end());
    for (NodeId id : outputs_) {
      const Node& n = *g_.node(id);
      DW_RETURN_IF_ERROR(emitOutput(n, graph));
      training_["predictions"].push_back(n.name);
      if (opt_.withLosses && g_.spec(n)->isLoss) DW_RETURN_IF_ERROR(emitTrainLoss(n));
    }
    if (opt_.withLosses) {
      std::set<std::string> declared;
      for (const auto& o : graph->output()) declared.insert(o.name());
      for (const auto& name : extraOutputs_)
        if (declared.insert(name).second) graph->add_output()->set_name(name);
      auto* p = m.add_metadata_props();
      p->set_key(kTrainingMetadataKey);
      p->set_value(training_.dump(-1, ' ', false, json::error_handler_t::replace));
    } else {
      DW_RETURN_IF_ERROR(keepDetached());
    }

    for (const auto& [k, v] : info.metadata) {
      auto* p = m.add_metadata_props();
      p->set_key(k);
      p->set_value(v);
    }
    for (const auto& l : g_.links())
      if (l.isGraphLink()) layout_["graph_links"].push_back({l.from.node, l.to.node});
    auto* p = m.add_metadata_props();
    p->set_key(kLayoutMetadataKey);
    p->set_value(layout_.dump(-1, ' ', false, json::error_handler_t::replace));

    // Before IR version 4 every initializer had to be a graph input too: a weight of an old
    // model taken out of the inputs (its graph_input unchecked) needs the version that allows it.
    if (m.ir_version() < 4) {
      std::set<std::string> inputs;
      for (const auto& in : m.graph().input()) inputs.insert(in.name());
      for (const auto& t : m.graph().initializer())
        if (!inputs.count(t.name())) {
          m.set_ir_version(4);
          break;
        }
    }
    DW_RETURN_IF_ERROR(inferOutputTypes(m));
    if (opt_.check != CheckLevel::None) {
      Status st = checkOnnxModel(m, opt_.check);
      if (!st.ok()) return Status::error(attribute(st.message()) + olderOpsetAdvice());
    }
    return m;
  }

 private:
  void nameNodes() {
    std::set<std::string> used;
    for (NodeId id : ids_) {
      const Node& n = *g_.node(id);
      const NodeKind kind = g_.spec(n)->kind;
      if (namesItsTensor(kind)) continue;
      std::string name = n.name;
      if (name.empty() || used.count(name)) name = n.type + "_" + std::to_string(id);
      while (used.count(name)) name += "_";
      used.insert(name);
      protoName_[id] = name;
    }
  }

  // Kahn's algorithm, lowest id first: an imported model keeps its node order. Subgraphs'
  // references to outer values count as edges too.
  Result<std::vector<NodeId>> topologicalOrder() {
    std::set<NodeId> selected(ids_.begin(), ids_.end());
    std::map<std::string, NodeId> producer;
    for (NodeId id : ids_)
      for (int p = 0; p < g_.outputPortCount(id); ++p) producer[g_.tensorName({id, p})] = id;
    std::map<NodeId, std::set<NodeId>> deps;
    for (const auto& l : g_.links())
      if (!l.isGraphLink() && selected.count(l.to.node) && selected.count(l.from.node))
        deps[l.to.node].insert(l.from.node);
    for (NodeId id : ids_) {
      for (const auto& [name, value] : g_.node(id)->params) {
        if (value.type != ParamType::Graph && value.type != ParamType::Graphs) continue;
        for (const auto& outer : outerNamesOfParam(value)) {
          auto it = producer.find(outer);
          if (it != producer.end() && it->second != id) deps[id].insert(it->second);
        }
      }
    }
    std::map<NodeId, int> indegree;
    std::map<NodeId, std::vector<NodeId>> users;
    for (NodeId id : ids_) indegree[id] = static_cast<int>(deps[id].size());
    for (const auto& [id, ds] : deps)
      for (NodeId d : ds) users[d].push_back(id);
    std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
    for (const auto& [id, d] : indegree)
      if (d == 0) ready.push(id);
    std::vector<NodeId> order;
    while (!ready.empty()) {
      NodeId id = ready.top();
      ready.pop();
      order.push_back(id);
      for (NodeId u : users[id])
        if (--indegree[u] == 0) ready.push(u);
    }
    if (order.size() != ids_.size()) {
      for (const auto& [id, d] : indegree)
        if (d > 0)
          return Status::error(g_.describe(id) +
                               ": is part of a cycle (through a subgraph's outer reference)");
    }
    return order;
  }

  // The nodes that serve training only: loss and metric nodes whose results feed nothing else,
  // and nodes (target inputs among them) whose every use is one of those or the target (or
  // sample weight) of an Output Train. Inference exports leave them out.
  void findTrainingOnly(const std::vector<NodeId>& order) {
    auto trainingUse = [&](const Link& l) {
      if (trainingOnly_.count(l.to.node)) return true;
      const NodeSpec* ts = g_.spec(l.to.node);
      return ts && ts->kind == NodeKind::GraphOutput && ts->isLoss && l.to.port >= 1;
    };
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const NodeSpec& s = *g_.spec(*it);
      if (s.kind == NodeKind::GraphOutput) continue;
      bool any = false, all = true;
      for (int p = 0; p < g_.outputPortCount(*it); ++p)
        for (const auto& l : g_.outputLinks(*it, p)) {
          any = true;
          all = all && trainingUse(l);
        }
      const bool lossOrMetric = s.isLoss || s.metricStats;
      if (all && (any || lossOrMetric)) trainingOnly_.insert(*it);
    }
  }
  bool skipped(NodeId id) const { return !opt_.withLosses && trainingOnly_.count(id); }
  bool consumed(NodeId id) const {
    for (int p = 0; p < g_.outputPortCount(id); ++p)
      if (!g_.outputLinks(id, p).empty()) return true;
    return false;
  }

  // An inference export keeps what it leaves out, and the kind of each Output Predict and
  // Output Train, as a project fragment in the layout metadata: importing the file restores the
  // whole project.
  Status keepDetached() {
    std::set<NodeId> keep;
    for (NodeId id : ids_) {
      const Node& n = *g_.node(id);
      if (skipped(id) || (g_.spec(n)->kind == NodeKind::GraphOutput && n.domain != kGraphDomain))
        keep.insert(id);
    }
    if (keep.empty()) return Status();
    Graph part(g_.catalogue());
    ModelInfo info = g_.info();
    info.sections.clear();
    part.setInfo(info);
    for (NodeId id : keep) DW_RETURN_IF_ERROR(part.insertNode(*g_.node(id)));
    // A link from the model into a kept node names the model's tensor, not the node: a layer
    // comes back from the file as the operators it exported, under other ids.
    json cross = json::array();
    for (const auto& l : g_.links()) {
      if (l.isGraphLink()) continue;
      const bool from = keep.count(l.from.node), to = keep.count(l.to.node);
      if (from && to)
        DW_RETURN_IF_ERROR(part.addLink(l, false));
      else if (to)
        cross.push_back({{"value", g_.tensorName(l.from)}, {"to", {l.to.node, l.to.port}}});
      else if (from)
        cross.push_back({l.from.node, l.from.port, l.to.node, l.to.port});
    }
    layout_["detached"] = {{"project", json::parse(projectToJsonText(part))}, {"links", cross}};
    return Status();
  }

  json& layoutEntry(const std::string& key, const Node& n) {
    json& e = layout_["nodes"][key];
    e["id"] = n.id;
    e["x"] = n.position.x;
    e["y"] = n.position.y;
    if (n.ldaCoeff != 1.0) e["lda_coeff"] = n.ldaCoeff;
    if (!n.model.empty()) e["model"] = n.model;
    return e;
  }

  Status emitInput(const Node& n, onnx::GraphProto* graph) {
    auto* vi = graph->add_input();
    vi->set_name(n.name);
    auto type = parseType(g_.param(n.id, "type")->asString());
    if (!type.ok()) return type.status().withContext(g_.describe(n.id));
    *vi->mutable_type() = *type;
    layoutEntry("input:" + n.name, n);
    return Status();
  }

  Status emitInitializer(const Node& n, onnx::GraphProto* graph) {
    onnx::TensorProto t;
    const std::string fill = g_.param(n.id, "fill")->asString();
    if (fill == "values") {
      if (!t.ParseFromString(g_.param(n.id, "values")->asString()))
        return Status::error(g_.describe(n.id) + ": its values are not a valid ONNX tensor");
      t.set_name(n.name);
      DW_RETURN_IF_ERROR(toRawData(t).withContext(g_.describe(n.id)));
    } else {
      FillSpec f;
      f.fill = fill;
      f.value = g_.param(n.id, "value")->asFloat();
      f.low = g_.param(n.id, "low")->asFloat();
      f.high = g_.param(n.id, "high")->asFloat();
      f.mean = g_.param(n.id, "mean")->asFloat();
      f.stddev = g_.param(n.id, "stddev")->asFloat();
      f.seed = static_cast<uint64_t>(g_.param(n.id, "seed")->asInt());
      auto made = makeFilledTensor(n.name, *dtypeFromName(g_.param(n.id, "dtype")->asString()),
                                   g_.param(n.id, "shape")->asInts(), f);
      if (!made.ok()) return made.status().withContext(g_.describe(n.id));
      t = std::move(made.value());
    }
    if (g_.param(n.id, "graph_input")->asBool()) {
      auto* vi = graph->add_input();
      vi->set_name(n.name);
      auto* tt = vi->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(t.data_type());
      auto* shape = tt->mutable_shape();
      for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    }
    *graph->add_initializer() = std::move(t);
    json& e = layoutEntry("initializer:" + n.name, n);
    for (const char* key : {"status", "regularizer", "l1", "l2"}) {
      auto it = n.params.find(key);
      if (it == n.params.end()) continue;
      if (it->second.type == ParamType::String)
        e[key] = it->second.asString();
      else
        e[key] = it->second.asFloat();
    }
    return Status();
  }

  void emitOp(const Node& n, const NodeSpec& s, onnx::GraphProto* graph) {
    auto* np = graph->add_node();
    np->set_op_type(n.type);
    np->set_domain(onnxDomainName(n.domain));
    np->set_name(protoName_[n.id]);
    std::vector<std::string> inputs;
    for (int p = 0; p < g_.inputPortCount(n.id); ++p) {
      auto l = g_.inputLink(n.id, p);
      inputs.push_back(l ? g_.tensorName(l->from) : "");
    }
    while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
    inputs.resize(std::max<size_t>(inputs.size(), n.inputArity));
    for (const auto& in : inputs) np->add_input(in);
    std::vector<std::string> outputs;
    const int variadicFrom = !s.outputs.empty() && s.outputs.back().option == PortOption::Variadic
                                 ? static_cast<int>(s.outputs.size()) - 1
                                 : -1;
    for (int p = 0; p < g_.outputPortCount(n.id); ++p) {
      const PortSpec* ps = s.outputPort(p);
      const bool named =
          p < static_cast<int>(n.specifiedOutputsName.size()) && !n.specifiedOutputsName[p].empty();
      const bool used =
          named || !g_.outputLinks(n.id, p).empty() || (ps && ps->option == PortOption::Single) ||
          (variadicFrom >= 0 && p >= variadicFrom && p < variadicFrom + (ps ? ps->minArity : 0));
      outputs.push_back(used ? g_.tensorName({n.id, p}) : "");
    }
    while (!outputs.empty() && outputs.back().empty()) outputs.pop_back();
    size_t arity = n.outputArity;
    // A BatchNormalization outputs its running statistics in training mode alone: one switched
    // to inference (training_mode 0, as the hint for torch's training exports advises) keeps
    // just Y where nothing reads them, or the file is invalid (a trial followed the hint, and
    // training failed).
    if (n.type == "BatchNormalization" && (n.domain.empty() || n.domain == kOnnxDomain))
      if (auto mode = g_.param(n.id, "training_mode"); !mode || mode->asInt() == 0) {
        bool read = false;
        for (int p = 1; p < g_.outputPortCount(n.id); ++p)
          read = read || !g_.outputLinks(n.id, p).empty();
        if (!read) {
          arity = std::min<size_t>(arity, 1);
          outputs.resize(std::min<size_t>(outputs.size(), 1));
        }
      }
    outputs.resize(std::max(outputs.size(), arity));
    for (const auto& out : outputs) np->add_output(out);
    for (const auto& [name, value] : n.params)
      *np->add_attribute() = attributeFromParam(name, value);
    json& e = layoutEntry("node:" + np->name(), n);
    if (n.name != np->name()) e["name"] = n.name;
  }

  // The type of a tensor of the model built so far, from (cached) non-strict shape inference.
  std::optional<onnx::TypeProto> typeOf(const std::string& name) {
    const auto& graph = model_->graph();
    const int size = graph.node_size() + graph.initializer_size() + graph.input_size();
    if (size != inferredSize_) {
      inferredSize_ = size;
      inferred_.clear();
      onnx::ModelProto copy = *model_;
      // On failure shapes stay unknown; a layer that needs one reports it, naming itself.
      (void)inferShapesSafely(copy, false, 0, true);
      for (const auto& vi : copy.graph().input()) inferred_[vi.name()] = vi.type();
      // A tensor that is also a graph output (an Output node beside a loss reading the same
      // tensor) has its type there, not in value_info.
      for (const auto& vi : copy.graph().output()) inferred_[vi.name()] = vi.type();
      for (const auto& vi : copy.graph().value_info()) inferred_[vi.name()] = vi.type();
      for (const auto& t : copy.graph().initializer()) {
        // Replaces, not extends, the type of an initializer that is also a graph input.
        inferred_[t.name()].Clear();
        auto& tt = *inferred_[t.name()].mutable_tensor_type();
        tt.set_elem_type(t.data_type());
        auto* shape = tt.mutable_shape();
        for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
      }
    }
    auto it = inferred_.find(name);
    if (it == inferred_.end()) return std::nullopt;
    return it->second;
  }

  class LayerBuilder : public LoweringBuilder {
   public:
    LayerBuilder(Lowering& l, const Node& n, std::string base = "")
        : l_(l), n_(n), base_(base.empty() ? l.protoName_[n.id] : std::move(base)) {}

    std::string input(int i) const override {
      auto link = l_.g_.inputLink(n_.id, i);
      return link ? l_.g_.tensorName(link->from) : "";
    }
    int inputCount() const override { return l_.g_.inputPortCount(n_.id); }
    std::optional<onnx::TypeProto> inputType(int i) override {
      const std::string name = input(i);
      return name.empty() ? std::nullopt : l_.typeOf(name);
    }
    Param param(const std::string& name) const override {
      auto p = l_.g_.param(n_.id, name);
      return p ? *p : Param{};
    }
    std::string outputName(int i) const override { return l_.g_.tensorName({n_.id, i}); }
    int opset() const override { return l_.g_.opset(kOnnxDomain); }
    const NodeSpec& spec() const override { return *l_.g_.spec(n_); }

    std::vector<std::string> op(const std::string& type, const std::vector<std::string>& inputs,
                                std::vector<onnx::AttributeProto> attributes,
                                std::vector<std::string> outputs) override {
      auto* np = l_.model_->mutable_graph()->add_node();
      const std::string name = base_ + "/" + type + "_" + std::to_string(counter_++);
      np->set_op_type(type);
      np->set_name(name);
      for (const auto& in : inputs) np->add_input(in);
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (outputs[k].empty())
          outputs[k] = name + (outputs.size() > 1 ? "_" + std::to_string(k) : "");
        np->add_output(outputs[k]);
      }
      for (auto& a : attributes) *np->add_attribute() = std::move(a);
      l_.layout_["layers"][base_]["nodes"].push_back(name);
      return outputs;
    }

    std::string weight(const std::string& suffix, const std::vector<int64_t>& shape,
                       const WeightFill& fill, const std::string& asked) override {
      // A layer switched to trainable false freezes what would train; its constants stay.
      const bool frozen =
          asked == "Trainable" && spec().param("trainable") && !param("trainable").asBool();
      const std::string status = frozen ? "Frozen" : asked;
      FillSpec f;
      f.fill = fill.fill;
      f.value = fill.value;
      f.low = fill.low;
      f.high = fill.high;
      f.mean = fill.mean;
      f.stddev = fill.stddev;
      f.fanInFirst = fill.fanInFirst;
      f.forgetGateOnes = fill.forgetGateOnes;
      // Each weight draws its own stream: the layer's seed mixed with the weight's name.
      uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(param("seed").asInt());
      for (char c : suffix) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
      f.seed = h;
      const std::string name = base_ + "." + suffix;
      requested_.insert(suffix);
      auto stored = useStored_ ? storedWeight(suffix, shape, status) : std::nullopt;
      if (stored) {
        stored->set_name(name);
        *l_.model_->mutable_graph()->add_initializer() = std::move(*stored);
      } else {
        auto t = makeFilledTensor(name, onnx::TensorProto::FLOAT, shape, f);
        if (!t.ok()) {
          error_ = t.status();
          return name;
        }
        *l_.model_->mutable_graph()->add_initializer() = std::move(t.value());
      }
      json& e = l_.layout_["nodes"]["initializer:" + name];
      e["layer"] = n_.id;
      // Names the weight for Trainer::writeWeightsTo, which stores trained values in the layer.
      if (isLayer_) e["weight"] = suffix;
      if (status != "Trainable") e["status"] = status;
      if (fill.regularizer != "none") {
        e["regularizer"] = fill.regularizer;
        e["l1"] = fill.l1;
        e["l2"] = fill.l2;
      }
      return name;
    }

    std::string constant(const std::string& suffix, const onnx::TensorProto& value) override {
      std::string name = base_ + "." + suffix;
      while (!constants_.insert(name).second) name += "_";
      onnx::TensorProto t = value;
      t.set_name(name);
      // Raw bytes where the dtype allows; one toRawData cannot pack (strings) keeps its typed
      // fields, which are valid ONNX too, so its error is not one to report.
      (void)toRawData(t);
      *l_.model_->mutable_graph()->add_initializer() = std::move(t);
      json& e = l_.layout_["nodes"]["initializer:" + name];
      e["layer"] = n_.id;
      e["status"] = "Constant";
      return name;
    }

    Status fail(const std::string& message) const override {
      return Status::error(l_.g_.describe(n_.id) + ": " + message);
    }

    Status error() const { return error_; }

    // A layer of the canvas (not a metric or a loss): its weights are named in the layout, and
    // with `useStored` its stored trained values replace the seeded fills.
    void asLayer(bool useStored) {
      isLayer_ = true;
      useStored_ = useStored;
    }
    // The stored weights were not exactly the weights the layer made: some had another shape,
    // some trainable weight had none, or some stored one was not asked for.
    bool storedStale() const {
      if (stale_) return true;
      for (const auto& [suffix, bytes] : n_.weights)
        if (!requested_.count(suffix)) return true;
      return false;
    }

   protected:
    std::optional<onnx::TensorProto> storedWeight(const std::string& suffix,
                                                  const std::vector<int64_t>& shape,
                                                  const std::string& status) {
      auto it = n_.weights.find(suffix);
      if (it == n_.weights.end()) {
        // A constant one (BatchNormalization's gamma with scale off) is never trained.
        if (status != "Constant") stale_ = true;
        return std::nullopt;
      }
      onnx::TensorProto t;
      if (!t.ParseFromString(it->second) || t.data_type() != onnx::TensorProto::FLOAT ||
          !std::equal(t.dims().begin(), t.dims().end(), shape.begin(), shape.end()) ||
          !toRawData(t).ok() ||
          t.raw_data().size() != static_cast<size_t>(elementCount(t)) * sizeof(float)) {
        stale_ = true;
        return std::nullopt;
      }
      return t;
    }

    Lowering& l_;
    const Node& n_;
    std::string base_;
    int counter_ = 0;
    std::set<std::string> constants_;
    Status error_;
    bool isLayer_ = false, useStored_ = false, stale_ = false;
    std::set<std::string> requested_;
  };

  // A layer with stored weights that no longer fit (a shape parameter or the input changed) is
  // lowered again from its seed: trained and fresh weights never mix within a layer.
  Status emitLayer(const Node& n, const NodeSpec& s) {
    auto* graph = model_->mutable_graph();
    const int nodes0 = graph->node_size(), inits0 = graph->initializer_size();
    bool useStored = !n.weights.empty();
    for (;;) {
      LayerBuilder b(*this, n);
      b.asLayer(useStored);
      json& e = layout_["layers"][protoName_[n.id]];
      e["id"] = n.id;
      e["type"] = n.type;
      e["nodes"] = json::array();
      DW_RETURN_IF_ERROR(s.lower(b));
      DW_RETURN_IF_ERROR(b.error());
      if (!useStored || !b.storedStale()) break;
      useStored = false;
      graph->mutable_node()->DeleteSubrange(nodes0, graph->node_size() - nodes0);
      for (int i = inits0; i < graph->initializer_size(); ++i)
        layout_["nodes"].erase("initializer:" + graph->initializer(i).name());
      graph->mutable_initializer()->DeleteSubrange(inits0, graph->initializer_size() - inits0);
      inferredSize_ = -1;
    }
    layoutEntry("layer:" + protoName_[n.id], n);
    return Status();
  }

  // Statistics (each also a graph output "<metric>/stat<k>"), then the value from them: the
  // finalize reads the named statistics only, so metricFinalizeModel can cut it out.
  Status emitMetric(const Node& n, const NodeSpec& s) {
    LayerBuilder b(*this, n);
    json& e = layout_["layers"][protoName_[n.id]];
    e["id"] = n.id;
    e["type"] = n.type;
    e["nodes"] = json::array();
    auto stats = s.metricStats(b);
    if (!stats.ok()) return stats.status();
    DW_RETURN_IF_ERROR(b.error());
    const std::string metric = n.name.empty() ? protoName_[n.id] : n.name;
    std::vector<std::string> named;
    for (size_t k = 0; k < stats->size(); ++k)
      named.push_back(b.op1("Identity", {(*stats)[k]}, {}, metric + "/stat" + std::to_string(k)));
    DW_RETURN_IF_ERROR(s.metricFinalize(b, named));
    DW_RETURN_IF_ERROR(b.error());
    layoutEntry("layer:" + protoName_[n.id], n);
    const std::string value = g_.tensorName({n.id, 0});
    training_["metrics"].push_back(
        {{"name", metric}, {"type", n.type}, {"value", value}, {"stats", named}});
    extraOutputs_.push_back(value);
    extraOutputs_.insert(extraOutputs_.end(), named.begin(), named.end());
    return Status();
  }

  // Output Train's loss, lowered by the chosen loss spec with the node's loss parameters.
  class TrainLossBuilder final : public LayerBuilder {
   public:
    TrainLossBuilder(Lowering& l, const Node& n, const NodeSpec& loss, std::string out)
        : LayerBuilder(l, n, out), loss_(loss), out_(std::move(out)) {}
    const NodeSpec& spec() const override { return loss_; }
    std::string outputName(int) const override { return out_; }
    Param param(const std::string& name) const override {
      auto it = n_.params.find(name);
      if (it != n_.params.end()) return it->second;
      const ParamSpec* ps = loss_.param(name);
      return ps && ps->defaultValue ? *ps->defaultValue : Param{};
    }
    Status fail(const std::string& message) const override {
      return LayerBuilder::fail("loss " + loss_.type + ": " + message);
    }

   private:
    const NodeSpec& loss_;
    std::string out_;
  };

  Status emitTrainLoss(const Node& n) {
    const std::string type = g_.param(n.id, "loss")->asString();
    const NodeSpec* loss = g_.catalogue().find(kLossesDomain, type);
    if (!loss || !loss->lower)
      return Status::error(g_.describe(n.id) + ": loss '" + type +
                           "' is not a deepwire.losses type");
    for (const auto& [name, value] : n.params) {
      if (name == "type" || name == "loss" || loss->param(name)) continue;
      const ParamSpec* own = g_.spec(n)->param(name);
      if (own && own->defaultValue && *own->defaultValue == value) continue;
      return Status::error(g_.describe(n.id) + ": parameter '" + name +
                           "' does not apply to loss " + type +
                           "; reset it or choose a loss that takes it");
    }
    const std::string out = n.name + std::string(kLossSuffix);
    TrainLossBuilder b(*this, n, *loss, out);
    json& e = layout_["layers"][out];
    e["id"] = n.id;
    e["type"] = type;
    e["nodes"] = json::array();
    DW_RETURN_IF_ERROR(loss->lower(b));
    DW_RETURN_IF_ERROR(b.error());
    training_["losses"].push_back(out);
    extraOutputs_.push_back(out);
    return Status();
  }

  Status emitOutput(const Node& n, onnx::GraphProto* graph) {
    auto l = g_.inputLink(n.id, 0);
    const std::string src = g_.tensorName(l->from);
    if (src != n.name) {
      // The value is already named otherwise (it feeds two outputs, or its producer names it):
      // an Identity gives the output its own name. Import folds it back.
      auto* np = graph->add_node();
      np->set_op_type("Identity");
      np->set_name("deepwire_output_" + n.name);
      np->add_input(src);
      np->add_output(n.name);
      layout_["synthetic"].push_back(np->name());
    }
    auto* vi = graph->add_output();
    vi->set_name(n.name);
    const std::string typeText = g_.param(n.id, "type")->asString();
    if (!typeText.empty()) {
      auto type = parseType(typeText);
      if (!type.ok()) return type.status().withContext(g_.describe(n.id));
      *vi->mutable_type() = *type;
    }
    layoutEntry("output:" + n.name, n);
    return Status();
  }

  // Outputs without a declared type take the inferred one.
  Status inferOutputTypes(onnx::ModelProto& m) {
    bool missing = false;
    for (const auto& o : m.graph().output()) missing |= !o.has_type();
    if (!missing && !opt_.inferShapes) return Status();
    onnx::ModelProto inferred = m;
    if (Status st = inferShapesSafely(inferred, false, 0, false); !st.ok())
      return Status::error(attribute(st.message()) + olderOpsetAdvice());
    std::map<std::string, const onnx::TypeProto*> known;
    for (const auto& vi : inferred.graph().value_info()) known[vi.name()] = &vi.type();
    for (const auto& vi : inferred.graph().input()) known[vi.name()] = &vi.type();
    for (const auto& vi : inferred.graph().output())
      if (vi.has_type()) known[vi.name()] = &vi.type();
    std::map<std::string, onnx::TypeProto> initTypes;
    for (const auto& t : inferred.graph().initializer()) {
      auto& tt = *initTypes[t.name()].mutable_tensor_type();
      tt.set_elem_type(t.data_type());
      for (int64_t d : t.dims()) tt.mutable_shape()->add_dim()->set_dim_value(d);
      known.emplace(t.name(), &initTypes[t.name()]);
    }
    for (auto& o : *m.mutable_graph()->mutable_output()) {
      if (o.has_type()) continue;
      auto it = known.find(o.name());
      if (it == known.end() || it->second->value_case() == onnx::TypeProto::VALUE_NOT_SET) {
        // Where a node refuses its inputs, that node is the problem, not the output after it
        // (a trial's conv1 of 16 filters before a normalization of 32 channels was reported as
        // the Output Train's missing type): strict inference names it.
        onnx::ModelProto strict = m;
        if (Status st = inferShapesSafely(strict, false, 1, false); !st.ok())
          return Status::error(attribute(st.message()) + olderOpsetAdvice());
        NodeId id = 0;
        for (NodeId out : outputs_)
          if (g_.node(out)->name == o.name()) id = out;
        // A metric's or a loss's output has no Output node to carry a type.
        if (id == 0)
          return Status::error("the model's output '" + o.name() +
                               "': its type could not be inferred from the nodes that compute "
                               "it; check that their inputs fit them (a node whose inputs do "
                               "not leaves its output untyped)");
        return Status::error(g_.describe(id) +
                             ": its type could not be inferred; set its 'type' parameter "
                             "(e.g. float[N,10])");
      }
      *o.mutable_type() = *it->second;
    }
    if (opt_.inferShapes) *m.mutable_graph()->mutable_value_info() = inferred.graph().value_info();
    return Status();
  }

  // Layers, losses and metrics are written for ai.onnx opset 11 on: in an older model, what they
  // lower to may not exist yet, and the checker's complaint about one of their nodes is that.
  std::string olderOpsetAdvice() const {
    const int opset = g_.opset(kOnnxDomain);
    if (opset >= 11) return "";
    for (NodeId id : ids_)
      if (const std::string& d = g_.node(id)->domain;
          d == kLayersDomain || d == kLossesDomain || d == kMetricsDomain)
        return " (the model imports ai.onnx opset " + std::to_string(opset) +
               ", and layers, losses and metrics are written for opset 11 or later: convert the "
               "model to a later opset first, e.g. with onnx.version_converter.convert_version("
               "model, 17))";
    return "";
  }

  // Names the editor node that a checker message is about.
  std::string attribute(const std::string& message) const {
    // A node the message names as one ("node 'fc1'") before any name it merely contains (the
    // tensor flatten_output made the Flatten take the blame for fc1's weight).
    // ONNX's inference errors say "(op_type:BatchNormalization, node name: bn1)".
    for (const auto& [id, name] : protoName_)
      if (!name.empty() && (message.find("node '" + name + "'") != std::string::npos ||
                            message.find("node name: " + name + ")") != std::string::npos))
        return g_.describe(id) + ": " + message;
    // A node a layer or a loss lowered to: "node 'dense/Gemm_0'", "node 'out_loss/Clip_0'".
    for (const auto& [id, name] : protoName_)
      for (const char* tail : {"/", "_loss/"})
        if (!name.empty() && message.find("node '" + name + tail) != std::string::npos)
          return g_.describe(id) + ": " + message;
    NodeId best = 0;
    size_t bestLen = 0;
    for (const auto& [id, name] : protoName_)
      if (name.size() > bestLen && message.find(name) != std::string::npos) {
        best = id;
        bestLen = name.size();
      }
    return best ? g_.describe(best) + ": " + message : message;
  }

  const Graph& g_;
  const ExportOptions& opt_;
  std::vector<NodeId> ids_;
  std::map<NodeId, std::string> protoName_;
  std::vector<NodeId> outputs_;
  onnx::ModelProto* model_ = nullptr;
  std::set<NodeId> trainingOnly_;
  std::vector<std::string> extraOutputs_;  // loss, metric value and statistic outputs
  json training_ = json{{"losses", json::array()},
                        {"metrics", json::array()},
                        {"targets", json::array()},
                        {"predictions", json::array()}};
  int inferredSize_ = -1;
  std::map<std::string, onnx::TypeProto> inferred_;
  json layout_ = json{{"version", 1}, {"nodes", json::object()}};
};

}  // namespace

Result<onnx::ModelProto> exportOnnx(const Graph& graph, const ExportOptions& options) {
  return Lowering(graph, options).run();
}

Result<onnx::ModelProto> metricFinalizeModel(const onnx::ModelProto& m, const std::string& metric) {
  json info;
  for (const auto& p : m.metadata_props())
    if (p.key() == kTrainingMetadataKey) info = json::parse(p.value(), nullptr, false);
  if (!info.is_object() || !info.contains("metrics"))
    return Status::error("the model has no '" + std::string(kTrainingMetadataKey) +
                         "' metadata; export it with losses (ExportOptions::withLosses)");
  const json* entry = nullptr;
  for (const auto& e : info["metrics"])
    if (e.value("name", "") == metric) entry = &e;
  if (!entry) return Status::error("the model has no metric named '" + metric + "'");
  const std::string value = (*entry)["value"].get<std::string>();
  std::set<std::string> stats;
  for (const auto& s : (*entry)["stats"]) stats.insert(s.get<std::string>());

  const auto& g = m.graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  std::map<std::string, int> initializer;
  for (int i = 0; i < g.initializer_size(); ++i) initializer[g.initializer(i).name()] = i;
  std::set<int> nodes, inits;
  std::vector<std::string> todo = {value};
  std::set<std::string> seen;
  while (!todo.empty()) {
    const std::string t = todo.back();
    todo.pop_back();
    if (t.empty() || stats.count(t) || !seen.insert(t).second) continue;
    if (auto it = initializer.find(t); it != initializer.end()) {
      inits.insert(it->second);
      continue;
    }
    auto it = producer.find(t);
    if (it == producer.end())
      return Status::error("metric '" + metric + "': its value depends on '" + t +
                           "', which is not one of its statistics");
    nodes.insert(it->second);
    for (const auto& in : g.node(it->second).input()) todo.push_back(in);
  }
  onnx::ModelProto out;
  out.set_ir_version(m.ir_version());
  out.set_producer_name(m.producer_name());
  *out.mutable_opset_import() = m.opset_import();
  auto* graph = out.mutable_graph();
  graph->set_name(metric + "_finalize");
  std::map<std::string, const onnx::ValueInfoProto*> outputs;
  for (const auto& o : g.output()) outputs[o.name()] = &o;
  for (const auto& s : (*entry)["stats"]) {
    auto it = outputs.find(s.get<std::string>());
    if (it == outputs.end())
      return Status::error("metric '" + metric + "': statistic '" + s.get<std::string>() +
                           "' is not an output");
    *graph->add_input() = *it->second;
  }
  for (int i : nodes) *graph->add_node() = g.node(i);
  for (int i : inits) *graph->add_initializer() = g.initializer(i);
  auto it = outputs.find(value);
  if (it == outputs.end())
    return Status::error("metric '" + metric + "': value '" + value + "' is not an output");
  *graph->add_output() = *it->second;
  DW_RETURN_IF_ERROR(
      checkOnnxModel(out, CheckLevel::Full).withContext("metric '" + metric + "' finalize"));
  return out;
}

namespace {

// libonnx 1.12's checker and inference know ai.onnx up to opset 17 (ai.onnx.ml up to 3), and
// misjudge a newer version of an op by the older one it has. Models importing a newer opset
// are checked by validateModelNodes (nodes/schema_facts.h) alone, plus the check below that
// every op they name exists.
bool beyondLibonnx(const onnx::ModelProto& model) {
  const auto& known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& o : model.opset_import()) {
    const std::string d = o.domain() == "ai.onnx" ? "" : o.domain();
    auto it = known.find(d);
    if ((d.empty() || d == "ai.onnx.ml") && it != known.end() && o.version() > it->second.second)
      return true;
  }
  return false;
}

// Sessions leave an op nobody knows to the planner; `check` must say so itself.
Status checkEveryOpKnown(const onnx::GraphProto& g, const std::map<std::string, int>& opsets) {
  for (const auto& n : g.node()) {
    const std::string d = n.domain() == "ai.onnx" ? "" : n.domain();
    auto it = opsets.find(d);
    if (it == opsets.end()) continue;
    auto facts = schemaFacts(d, n.op_type(), static_cast<int>(it->second));
    const std::string what =
        "node '" + (n.name().empty() ? n.op_type() : n.name()) + "' (" + n.op_type() + ")";
    if (!facts)
      return Status::error(what + ": no operator " + n.op_type() + " in opset " +
                           std::to_string(it->second) + " of " + (d.empty() ? "ai.onnx" : d));
    for (const auto& a : n.attribute()) {
      if (a.has_g()) DW_RETURN_IF_ERROR(checkEveryOpKnown(a.g(), opsets));
      for (const auto& sg : a.graphs()) DW_RETURN_IF_ERROR(checkEveryOpKnown(sg, opsets));
    }
  }
  return Status();
}

}  // namespace

Status checkTrainingLowering(const Graph& graph, const std::string& model) {
  ExportOptions opt;
  opt.model = model;
  opt.check = CheckLevel::None;
  opt.inferShapes = false;
  opt.withLosses = true;
  return exportOnnx(graph, opt).status();
}

// The checker says a value's type lacks a field without saying which value: the first graph
// input, output or value_info that lacks it, as " (output 'y' has no shape)", or "".
static std::string incompleteValueInfo(const onnx::GraphProto& g, const std::string& message) {
  if (message.find("of 'type'") == std::string::npos &&
      message.find("of 'tensor_type'") == std::string::npos &&
      message.find("of 'value_info'") == std::string::npos)
    return "";
  const std::pair<const char*, const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>*>
      lists[] = {{"input", &g.input()}, {"output", &g.output()}, {"value_info", &g.value_info()}};
  for (const auto& [kind, list] : lists)
    for (const auto& v : *list) {
      const char* lacks = !v.has_type()                             ? "no type"
                          : !v.type().has_tensor_type()             ? nullptr
                          : !v.type().tensor_type().has_elem_type() ? "no element type"
                          : !v.type().tensor_type().has_shape()     ? "no shape"
                                                                    : nullptr;
      if (lacks)
        return std::string(" (") + kind + " '" + v.name() + "' has " + lacks +
               "; give it one, with named dims such as N where sizes vary)";
    }
  return "";
}

// libonnx's shape inference of Gemm and MatMul does not compare the inner dimensions: a weight
// of [256, 783] against 784 features passed `check` and `export`, and failed in the first run.
// Where both sizes are known after inference, they must agree.
static Status checkProductShapes(const onnx::GraphProto& g) {
  std::map<std::string, std::vector<int64_t>> dims;  // -1: unknown
  auto take = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
    std::vector<int64_t> d;
    for (const auto& x : v.type().tensor_type().shape().dim())
      d.push_back(x.has_dim_value() ? x.dim_value() : -1);
    dims[v.name()] = d;
  };
  for (const auto& v : g.input()) take(v);
  for (const auto& v : g.value_info()) take(v);
  for (const auto& t : g.initializer()) dims[t.name()] = {t.dims().begin(), t.dims().end()};
  for (const auto& n : g.node()) {
    const bool gemm = n.op_type() == "Gemm", matmul = n.op_type() == "MatMul";
    if ((!gemm && !matmul) || !(n.domain().empty() || n.domain() == "ai.onnx") ||
        n.input_size() < 2)
      continue;
    auto a = dims.find(n.input(0)), b = dims.find(n.input(1));
    if (a == dims.end() || b == dims.end() || a->second.empty() || b->second.empty()) continue;
    const auto& da = a->second;
    const auto& db = b->second;
    bool transA = false, transB = false;
    for (const auto& at : n.attribute()) {
      if (at.name() == "transA") transA = at.i() != 0;
      if (at.name() == "transB") transB = at.i() != 0;
    }
    int64_t ka = -1, kb = -1;
    if (gemm && da.size() == 2 && db.size() == 2) {
      ka = transA ? da[0] : da[1];
      kb = transB ? db[1] : db[0];
    } else if (matmul) {
      ka = da.back();
      kb = db.size() == 1 ? db[0] : db[db.size() - 2];
    }
    if (ka < 0 || kb < 0 || ka == kb) continue;
    auto shape = [](const std::vector<int64_t>& d) {
      std::string s;
      for (int64_t x : d)
        s += (s.empty() ? "" : ",") + (x < 0 ? std::string("?") : std::to_string(x));
      return "[" + s + "]";
    };
    return Status::error("node '" + n.name() + "' (" + n.op_type() + "): " + n.input(0) + " is " +
                         shape(da) + (transA ? " (transposed)" : "") + " and " + n.input(1) +
                         " is " + shape(db) + (transB ? " (transposed)" : "") +
                         ": the inner dimensions " + std::to_string(ka) + " and " +
                         std::to_string(kb) +
                         " differ, so the product cannot be taken; make the weight's size match "
                         "its input");
  }
  return Status();
}

Status checkOnnxModel(const onnx::ModelProto& model, CheckLevel level) {
  if (level == CheckLevel::None) return Status();
  // Building the catalogue registers the schemas of deepwire's own domain (com.deepwire.grad).
  Catalogue::instance();
  // libonnx's checker and shape inference trust the nodes' arity and window attributes (a
  // missing input is a null read, a zero stride a division by zero): judge them first.
  bool inferenceUnsafe = false;
  DW_RETURN_IF_ERROR(validateModelNodes(model, inferenceUnsafe));
  if (beyondLibonnx(model)) {
    std::map<std::string, int> opsets;
    for (const auto& o : model.opset_import())
      opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = static_cast<int>(o.version());
    return checkEveryOpKnown(model.graph(), opsets);
  }
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return Status::error(std::string("ONNX checker: ") + e.what() +
                         incompleteValueInfo(model.graph(), e.what()));
  }
  if (level == CheckLevel::Basic) return Status();
  onnx::ModelProto copy = model;
  DW_RETURN_IF_ERROR(inferValidatedShapes(copy, inferenceUnsafe, true, 1, false));
  return checkProductShapes(copy.graph());
}

}  // namespace dw
