// Output Predict and Output Train (domain deepwire.layers, as the seed toolkit lists them among
// the layers). Both are graph outputs: their `name` is the output tensor's. Output Train also
// carries the loss that training minimizes: a deepwire.losses type, that loss's parameters, and
// the target (and optional sample weight) inputs. Export (graphs/onnx_export.cpp) gives them their
// meaning: an inference export writes the prediction only and drops what feeds just the loss; an
// export with losses adds the target as an input and the loss as a scalar output.
#include <map>

#include "nodes/catalogue.h"
#include "nodes/losses.h"

namespace dw {

namespace {

PortSpec port(const std::string& name, const std::string& type, const std::string& doc,
              PortOption option, Differentiability diff) {
  return lossPort(name, type, doc, option, diff);
}

ParamSpec typeParam() {
  ParamSpec p;
  p.name = "type";
  p.type = ParamType::String;
  p.defaultValue = Param::makeString("");
  p.doc = "The output's type, e.g. float[N,10]. Empty: inferred from the graph.";
  return p;
}

}  // namespace

void addOutputsDomain(CatalogueBuilder& b) {
  NodeSpec predict;
  predict.domain = kLayersDomain;
  predict.type = "Output Predict";
  predict.category = "core";
  predict.kind = NodeKind::GraphOutput;
  predict.doc = "Marks a model output: its `name` is the output's tensor name.";
  predict.inputs = {port("prediction", "T", "The value returned to the caller.", PortOption::Single,
                         Differentiability::Differentiable)};
  predict.typeConstraints = {{"T", {}, "Any ONNX type."}};
  predict.params = {typeParam()};
  predict.minInputs = predict.maxInputs = 1;
  b.add(std::move(predict));

  NodeSpec train;
  train.domain = kLayersDomain;
  train.type = "Output Train";
  train.category = "core";
  train.kind = NodeKind::GraphOutput;
  train.isLoss = true;
  train.doc =
      "Marks a model output together with its loss. An inference export writes the prediction "
      "as the output named `name` and leaves out the loss and whatever only feeds it (the target "
      "input, metrics). An export with losses (training) also computes the chosen deepwire.losses "
      "loss of the prediction against the target and returns it as the scalar output "
      "`<name>_loss`. The loss parameters below apply to the losses named in their docs.";
  train.inputs = {port("prediction", "T", "The model's prediction (the output's value).",
                       PortOption::Single, Differentiability::Differentiable),
                  port("target", "L", "The expected values (y_true); usually a graph Input.",
                       PortOption::Single, Differentiability::NonDifferentiable),
                  port("sample_weight", "L", "Optional per-sample weights of the loss.",
                       PortOption::Optional, Differentiability::NonDifferentiable)};
  train.typeConstraints = {
      {"T", {"tensor(float)"}, "Float32 predictions."},
      {"L", lossSpecs().front().constraint("L")->allowedTypes, "Any numeric type."}};

  ParamSpec loss;
  loss.name = "loss";
  loss.type = ParamType::String;
  loss.doc = "The loss (a deepwire.losses type) between the prediction and the target.";
  loss.defaultValue = Param::makeString("MeanSquaredError");
  train.params = {typeParam(), loss};
  // The loss parameters, each once, with the losses that take it; a default is the loss spec's.
  std::map<std::string, std::vector<std::string>> users;
  for (const NodeSpec& s : lossSpecs()) {
    train.params[1].allowedValues.push_back(s.type);
    for (const ParamSpec& p : s.params) {
      if (!users.count(p.name)) {
        ParamSpec copy = p;
        if (p.name == "reduction") {
          copy.allowedValues = {"mean", "sum"};  // a training loss is a scalar
          copy.doc = "mean: weighted sum / number of values (Keras' sum_over_batch_size); sum.";
        }
        train.params.push_back(copy);
      }
      users[p.name].push_back(s.type);
    }
  }
  for (auto& p : train.params) {
    if (!users.count(p.name) || p.name == "reduction") continue;
    std::string list;
    for (const auto& u : users[p.name]) list += (list.empty() ? "" : ", ") + u;
    p.doc += " (" + list + ")";
  }
  train.minInputs = 2;
  train.maxInputs = 3;
  b.add(std::move(train));
}

}  // namespace dw
