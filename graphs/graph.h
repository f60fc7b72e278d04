// The graph document: nodes with stable ids, links between ports, and the model-level settings.
// It holds no Qt and no ONNX protos; lowering (onnx_export.h) and loading (onnx_import.h,
// project.h) convert it. Every edit is validated against the catalogue and fails with a message
// that names the node; observers hear about every change (the studio's adapter is one).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nodes/catalogue.h"
#include "nodes/spec.h"
#include "nodes/status.h"

namespace dw {

using NodeId = int64_t;
inline constexpr int kGraphPort = -1;  // the Graphs in / Graphs out port of any node

struct Position {
  double x = 0, y = 0;
  bool operator==(const Position&) const = default;
};

struct PortRef {
  NodeId node = 0;
  int port = 0;  // tensor port index, or kGraphPort
  auto operator<=>(const PortRef&) const = default;
};

// A link runs from an output port to an input port. Graph links (kGraphPort on both ends) carry
// model membership; tensor links carry values.
struct Link {
  PortRef from;
  PortRef to;
  bool isGraphLink() const { return from.port == kGraphPort; }
  auto operator<=>(const Link&) const = default;
};

struct Node {
  NodeId id = 0;
  std::string domain;  // canonical ("ai.onnx", "deepwire", ...)
  std::string type;
  std::string name;  // optional for ops; the tensor name for Input/Output/Initializer
  std::map<std::string, Param> params;  // only values that differ from, or have no, default
  std::vector<std::string> specifiedOutputsName;
  double ldaCoeff = 1.0;
  Position position;
  std::string model;  // model name for nodes without a Graphs-in link ("" = the default model)
  // Slots written to ONNX at least, padded with "" (kept from imports that list trailing empty
  // optional inputs or outputs explicitly).
  int inputArity = 0;
  int outputArity = 0;
  // Layer nodes only: trained weight values by weight name ("kernel", "moving_mean"), each a
  // serialized float onnx::TensorProto (the encoding of an Initializer's `values`, without a
  // name). Lowering uses them instead of the seeded fills while they are still exactly the
  // weights the layer makes (same names, same shapes); otherwise the layer starts again from
  // its seed. Trainer::writeWeightsTo fills them.
  std::map<std::string, std::string> weights;
};

// Model-level settings, kept so that an imported ONNX file exports again unchanged.
struct ModelInfo {
  int64_t irVersion = 8;
  std::map<std::string, int> opsets;  // canonical domain -> version
  std::string graphName = "deepwire";
  std::string docString;
  std::string producerName = "deepwire";
  std::string producerVersion;
  std::string modelDomain;
  int64_t modelVersion = 0;
  std::map<std::string, std::string> metadata;  // metadata_props other than deepwire's own
  // Project sections the graph model does not interpret (e.g. "training": dataset, loss,
  // optimizer), as JSON text keyed by section name; kept verbatim through load and save.
  std::map<std::string, std::string> sections;
};

// One problem found by validation. node = 0 for model-wide problems.
struct Problem {
  NodeId node = 0;
  std::string message;  // already names the node
};

class GraphObserver {
 public:
  virtual ~GraphObserver() = default;
  virtual void nodeAdded(NodeId) {}
  virtual void nodeRemoved(NodeId) {}
  virtual void nodeChanged(NodeId) {}  // params, name, outputs names, lda coeff, model
  virtual void nodeMoved(NodeId) {}
  virtual void linkAdded(const Link&) {}
  virtual void linkRemoved(const Link&) {}
  virtual void modelChanged() {}  // ModelInfo
};

// Keras's to_snake_case, so a node reads as it would in Keras: "SparseCategoricalAccuracy" ->
// "sparse_categorical_accuracy", "Conv2D" -> "conv2d"; other characters become underscores.
std::string snakeCase(const std::string& type);

class Graph {
 public:
  explicit Graph(const Catalogue& catalogue = Catalogue::instance());
  Graph(const Graph&) = default;
  Graph& operator=(const Graph&) = default;

  const Catalogue& catalogue() const { return *catalogue_; }
  const ModelInfo& info() const { return info_; }
  void setInfo(ModelInfo info);
  int opset(const std::string& domain) const;

  // --- Edits. Each validates against the catalogue and names the node on failure. ---
  // Adds a node of a catalogue type; Input/Output/Initializer get a unique default name. A type
  // that first appears in a newer opset of its domain than the graph imports (Mish: ai.onnx 18)
  // raises the graph's opset to that version where no node of the graph would mean something
  // else there; otherwise the error names those nodes (opsetRaiseConflicts).
  Result<NodeId> addNode(const std::string& domain, const std::string& type, Position pos = {});
  // The nodes of `domain` that would mean something else if the graph imported `opset` of it:
  // a parameter they set that the newer version moved to an input or dropped, a default that
  // changed, a linked port renamed or gone. One line each, naming the node; empty where the
  // raise is safe.
  std::vector<std::string> opsetRaiseConflicts(const std::string& domain, int opset) const;
  // Re-creates a node with a given id (undo, paste, loading); the id must be free.
  Status insertNode(Node node);
  Status removeNode(NodeId id);  // also removes its links
  // checkTypes=false skips the type-constraint check: loaders accept what ONNX's checker accepts
  // (old opsets feed, e.g., an int64 Constant to Reshape although Constant-1 declares floats).
  Status addLink(const Link& link, bool checkTypes = true);
  Status removeLink(const Link& link);
  // Sets a parameter; an unknown name or a value of the wrong type is refused.
  Status setParam(NodeId id, const std::string& name, const Param& value);
  Status resetParam(NodeId id, const std::string& name);  // back to the default
  Status rename(NodeId id, const std::string& name);
  Status setSpecifiedOutputsName(NodeId id, std::vector<std::string> names);
  Status setLdaCoeff(NodeId id, double coeff);
  Status setModel(NodeId id, const std::string& model);
  // Replaces a Layer node's stored weights (Node::weights); an empty map drops them. Each value
  // must be a float TensorProto whose data matches its dims. Changing a layer's `seed` drops
  // them too: the seed only says what the weights start from.
  Status setWeights(NodeId id, std::map<std::string, std::string> weights);
  Status moveNode(NodeId id, Position pos);

  // --- Queries ---
  const Node* node(NodeId id) const;
  const std::map<NodeId, Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  // The spec of a node at this graph's opset for its domain.
  const NodeSpec* spec(const Node& node) const;
  const NodeSpec* spec(NodeId id) const;
  // The value of a parameter: set value, else default, else nullopt.
  std::optional<Param> param(NodeId id, const std::string& name) const;
  // The link feeding an input port, if any.
  std::optional<Link> inputLink(NodeId id, int port) const;
  std::vector<Link> outputLinks(NodeId id, int port) const;
  // Number of input/output ports to show: grows past a connected variadic tail.
  int inputPortCount(NodeId id) const;
  int outputPortCount(NodeId id) const;
  // Model name of a node, following Graphs-in links upstream.
  std::string modelOf(NodeId id) const;
  // "Gemm 'fc1' (#3)": how errors name a node.
  std::string describe(NodeId id) const;
  // The ONNX tensor name export writes for an output port: specified_outputs_name, else the name
  // of the single Output node it feeds, else "<name or Type_id>_<port name>".
  std::string tensorName(PortRef output) const;
  NodeId nextId() const { return nextId_; }

  // Full validation: required params and inputs, names, types, cycles.
  std::vector<Problem> validate() const;
  // Advice that does not block an export but would spoil training: a cross-entropy told it gets
  // probabilities (from_logits off) whose prediction comes from a layer or product that gives
  // unnormalized scores.
  std::vector<Problem> hints() const;
  // `base` where no node has that name, else the first free "base_1", "base_2"... (as Keras
  // numbers its layers).
  std::string uniqueName(const std::string& base) const;

  void addObserver(GraphObserver* o) { observers_.list.push_back(o); }
  void removeObserver(GraphObserver* o);

 private:
  Status checkParam(const Node& node, const NodeSpec& spec, const std::string& name,
                    const Param& value) const;
  Status checkLink(const Link& link, bool checkTypes) const;
  bool reaches(NodeId from, NodeId to, bool graphLinks) const;
  Node* mutableNode(NodeId id);
  template <class F>
  void notify(F f) {
    for (auto* o : observers_.list) f(o);
  }

  const Catalogue* catalogue_;
  ModelInfo info_;
  std::map<NodeId, Node> nodes_;
  std::vector<Link> links_;
  // Indexes over links_: the link into each input port, and the links out of each node.
  std::map<PortRef, Link> incoming_;
  std::map<NodeId, std::vector<Link>> outgoing_;
  NodeId nextId_ = 1;
  // Who watches this graph. A copy starts unwatched, and an assignment keeps the watchers of
  // the graph assigned to: an edit of a copy (the trainer's weights written into one, a layout
  // computed on one) reached the studio's model as an edit of its document, marked it changed,
  // and could do so from the training thread.
  struct Observers {
    std::vector<GraphObserver*> list;
    Observers() = default;
    Observers(const Observers&) {}
    Observers& operator=(const Observers&) { return *this; }
  };
  Observers observers_;
};

// A graph port's allowed types ("tensor(float)", ...); empty means any.
std::vector<std::string> portTypes(const Graph& g, PortRef port, bool isOutput);

}  // namespace dw
