// Internal to engine/training: what a gradient builder sees and the helpers it emits nodes with.
//
// How to add a gradient
// ---------------------
// 1. Write `Status gradFoo(GradCtx& c)` in the grad_*.cpp file of its family. Read the forward
//    node (c.node, c.in(i), c.out(i), attributes through attrInt/attrFloat/...), the gradients of
//    its outputs (c.dY[i], "" where nothing flows back) and which inputs want a gradient
//    (c.needDx[i]). Emit backward nodes with c.e.op(...) and set c.dX[i] for each needed input
//    (leave it "" for a zero gradient).
// 2. Prefer standard ONNX ops; put what they cannot express in a kGradDomain op and give it a
//    kernel in its family's *_grad.cpp file in engine/kernels/ (plain C++) or engine/onednn/
//    (engine/kernels/tables.h lists them), and a catalogue entry in nodes/grad_domain.cpp (check,
//    import and the studio read it).
// 3. List it with the forward opset range it covers in gradBuilders() (grad_ops.cpp) and
//    add a case to the finite-difference test tests/training/gradcheck_test.cpp.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/onnx_attrs.h"
#include "nodes/status.h"

namespace dw::engine::training {

// Static type facts from shape inference (elem type 0 / rank -1 where unknown).
class TypeTable {
 public:
  void add(const std::string& name, const onnx::TypeProto& t);
  int32_t elemType(const std::string& name) const;
  const onnx::TypeProto* type(const std::string& name) const;
  int rank(const std::string& name) const;
  // Fully known dims, or false.
  bool dims(const std::string& name, std::vector<int64_t>* out) const;
  const std::map<std::string, onnx::TypeProto>& all() const { return types_; }

 private:
  std::map<std::string, onnx::TypeProto> types_;
};

// Appends nodes and constants to the graph being built, with unique names.
class Emitter {
 public:
  Emitter(onnx::GraphProto* g, std::string prefix);
  onnx::GraphProto* graph() { return g_; }
  std::string fresh(const std::string& hint);
  // Emits one node; outputs get fresh names from `hint` (an empty entry in `outs` stays an
  // omitted output). Returns the output names.
  std::vector<std::string> op(const std::string& type, const std::vector<std::string>& inputs,
                              std::vector<std::string> outs,
                              std::vector<onnx::AttributeProto> attrs = {},
                              const std::string& domain = "");
  // One-output convenience.
  std::string op1(const std::string& type, const std::vector<std::string>& inputs,
                  std::vector<onnx::AttributeProto> attrs = {}, const std::string& domain = "",
                  const std::string& hint = "");
  // Scalar (rank 0) constant of an ONNX elem type; cached.
  std::string scalar(double v, int32_t elemType);
  std::string ints(const std::vector<int64_t>& v);  // 1-D int64 constant; cached
  std::string boolScalar(bool v);
  void setNodeName(const std::string& n) { nodeName_ = n; }

 private:
  onnx::GraphProto* g_;
  std::string prefix_;
  std::string nodeName_;
  std::map<std::string, int> used_;
  std::map<std::string, std::string> constants_;
  int counter_ = 0;
};

onnx::AttributeProto attrI(const std::string& n, int64_t v);
onnx::AttributeProto attrF(const std::string& n, float v);
onnx::AttributeProto attrS(const std::string& n, const std::string& v);
onnx::AttributeProto attrInts(const std::string& n, const std::vector<int64_t>& v);
onnx::AttributeProto attrT(const std::string& n, const onnx::TensorProto& t);
// The readers (engine/onnx_attrs.h), visible next to the builders' attrInts of the same name.
using dw::engine::attrFloat;
using dw::engine::attrInt;
using dw::engine::attrInts;
using dw::engine::attrString;
using dw::engine::findAttr;

struct GradCtx {
  Emitter& e;
  onnx::NodeProto& node;  // the forward node, in the graph being built (builders may add outputs)
  int opset;              // of the node's domain
  const TypeTable& types;
  bool training;
  std::vector<std::string> dY;  // per output
  std::vector<bool> needDx;     // per input
  std::vector<std::string> dX;  // per input: result

  std::string in(int i) const { return i < node.input_size() ? node.input(i) : ""; }
  std::string out(int i) const { return i < node.output_size() ? node.output(i) : ""; }
  bool need(int i) const { return i < static_cast<int>(needDx.size()) && needDx[i]; }
  // Element type of the gradient: the type of output 0 (float when unknown).
  int32_t gradType() const;
  // dY[i], or zeros shaped like output i where no gradient flows into it.
  std::string dYOrZeros(int i);
  // Output i of the forward node, added (with a fresh name) when the model leaves it out.
  std::string ensureOutput(int i, const std::string& hint);
  // Reduces `g`, shaped like the broadcast result `y`, to the shape of input `x`; a no-op when
  // shape inference knows the two shapes are equal.
  std::string sumTo(const std::string& g, const std::string& y, const std::string& x);
  std::string zerosLike(const std::string& x);
  std::string shapeOf(const std::string& x);  // a constant where the shape is static
  // Attributes of the forward node, copied (for grad ops that mirror the forward op).
  std::vector<onnx::AttributeProto> forwardAttrs() const;
};

using GradFn = Status (*)(GradCtx&);

struct GradBuilder {
  const char* op;
  int since;  // forward opset range covered (default domain)
  int until;
  GradFn fn;
};

const std::vector<GradBuilder>& gradBuilders();
const GradBuilder* findGradBuilder(const std::string& domain, const std::string& op, int opset);

// Control flow (grad_scan.cpp, autodiff.cpp) ----------------------------------------------------

// Scan and Loop bodies read outer values directly. Each float one that depends on a `wrt` leaf
// becomes an extra state the body passes through unchanged, so that its gradient leaves the node
// through an input like any other (summed over the iterations by the state's gradient chain).
Status exposeSubgraphCaptures(onnx::GraphProto& g, const TypeTable& types,
                              const std::vector<std::string>& wrt, int opset);

// The same autodiff on a subgraph (a Scan body wrapped in `model` with its opset imports):
// appends to model's graph the nodes computing the gradient of every `wrt` entry, given the
// gradients of the `seeds` values (names the caller has declared as graph inputs). knownTypes
// types the graph's inputs and the outer values it reads, for shape inference only. Returns the
// gradient per wrt entry, "" where none reaches it.
struct SubgraphGradRequest {
  std::vector<std::pair<std::string, std::string>> seeds;  // (value, its gradient)
  std::vector<std::string> wrt;
  std::map<std::string, onnx::TypeProto> knownTypes;
  bool training = false;
  std::string prefix;
};
Result<std::vector<std::string>> differentiateSubgraph(onnx::ModelProto& model,
                                                       const SubgraphGradRequest& req);

}  // namespace dw::engine::training
