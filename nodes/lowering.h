// Lowering: how a composite node (a Keras-style layer, a loss, a metric) becomes standard ONNX.
// A NodeSpec of kind Layer carries a LowerFn; at export the exporter hands it a LoweringBuilder
// through which it reads its inputs and parameters and emits ONNX nodes and weights. Layers never
// see protobuf graphs directly, so one builder serves export, training and docs alike.
#pragma once

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <vector>

#include "nodes/spec.h"
#include "nodes/status.h"

namespace dw {

// How a layer's weight is filled (see initializerFills()).
struct WeightFill {
  std::string fill = "glorot_uniform";
  double value = 0;  // for "constant"
  double low = -0.05, high = 0.05, mean = 0, stddev = 0.05;
  bool fanInFirst = false;     // shape is (fan_in, fan_out, ...) as a Keras/MatMul kernel
  int64_t forgetGateOnes = 0;  // LSTM bias: set gate 2 (forget, ONNX order) of this width to 1
  // Keras kernel_regularizer & co.: the penalty the trainer adds to the loss for this weight.
  std::string regularizer = "none";  // none | l1 | l2 | l1l2
  double l1 = 0.01, l2 = 0.01;
};

class LoweringBuilder {
 public:
  virtual ~LoweringBuilder() = default;

  // The ONNX tensor feeding input port `i`; "" when unconnected.
  virtual std::string input(int i) const = 0;
  virtual int inputCount() const = 0;
  // The inferred type of input `i` (dims may be symbolic or unknown); nullopt if unknown.
  virtual std::optional<onnx::TypeProto> inputType(int i) = 0;
  // A parameter value: the node's, else the spec's default.
  virtual Param param(const std::string& name) const = 0;
  // The tensor name the layer must give output port `i` (what downstream nodes read).
  virtual std::string outputName(int i) const = 0;
  virtual int opset() const = 0;
  virtual const NodeSpec& spec() const = 0;

  // Emits one ONNX node; `outputs` entries left empty get unique names. Returns the outputs.
  virtual std::vector<std::string> op(const std::string& type,
                                      const std::vector<std::string>& inputs,
                                      std::vector<onnx::AttributeProto> attributes = {},
                                      std::vector<std::string> outputs = {""}) = 0;
  // A trainable weight of this layer, created with the node's seeded RNG (or, at export, the
  // trained value the node stores for `suffix`, see Node::weights); its tensor name. `suffix`
  // names the weight within the layer, so it must not depend on anything but the layer's kind.
  virtual std::string weight(const std::string& suffix, const std::vector<int64_t>& shape,
                             const WeightFill& fill, const std::string& status = "Trainable") = 0;
  // A constant stored as an initializer (status Constant).
  virtual std::string constant(const std::string& suffix, const onnx::TensorProto& value) = 0;
  // An error that names this node.
  virtual Status fail(const std::string& message) const = 0;

  // Conveniences.
  // Ops whose spelling changed between opsets, spelled for the graph's: layers, losses and
  // metrics join imported models of any opset from 11 on (torch exported 11-14 for years).
  // Reductions over `axes` (all axes when empty): ReduceSum takes axes as an input since 13, the
  // other Reduce* ops since 18 (an attribute before).
  std::string reduce(const std::string& op, const std::string& x, const std::vector<int64_t>& axes,
                     bool keepdims, const std::string& out = "");
  // Squeeze and Unsqueeze take axes as an input since 13.
  std::string squeeze(const std::string& x, const std::vector<int64_t>& axes,
                      const std::string& out = "");
  std::string unsqueeze(const std::string& x, const std::vector<int64_t>& axes,
                        const std::string& out = "");
  // Softmax, LogSoftmax or Hardmax over `axis` of a rank-`rank` x: before opset 13 they
  // flattened x into two dimensions at the axis, which is the same thing only for the last one.
  std::string softmax(const std::string& op, const std::string& x, int64_t axis, int64_t rank,
                      const std::string& out = "");
  // GreaterOrEqual or LessOrEqual (opset 12), as Greater or Less, Or Equal before (NaN gives
  // false either way).
  std::string orEqual(const std::string& op, const std::string& a, const std::string& b,
                      const std::string& out = "");
  // Dimensions [start, end) of x's shape, an int64 vector (Shape's own start and end are 15's).
  std::string shapeSlice(const std::string& x, int64_t start, int64_t end);
  std::string op1(const std::string& type, const std::vector<std::string>& inputs,
                  std::vector<onnx::AttributeProto> attributes = {}, const std::string& out = "") {
    return op(type, inputs, std::move(attributes), {out}).front();
  }
  std::string int64s(const std::string& suffix, const std::vector<int64_t>& values);
  std::string floatScalar(const std::string& suffix, float value);
  // The static dims of input `i`, or an error naming what is unknown.
  Result<std::vector<int64_t>> staticDims(int i, const std::string& why);
  Result<int64_t> rankOf(int i);
};

onnx::AttributeProto attrInt(const std::string& name, int64_t v);
onnx::AttributeProto attrFloat(const std::string& name, float v);
onnx::AttributeProto attrString(const std::string& name, const std::string& v);
onnx::AttributeProto attrInts(const std::string& name, const std::vector<int64_t>& v);

}  // namespace dw
