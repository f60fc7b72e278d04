#include "engine/training/trainer_impl.h"

namespace dw::engine::training {

// ---- Export -----------------------------------------------------------------------------------

namespace {

void setInitializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  for (auto& init : *g->mutable_initializer())
    if (init.name() == name) {
      tensorToProto(t, &init, name);
      return;
    }
  tensorToProto(t, g->add_initializer(), name);
}

void addOutput(onnx::GraphProto* g, const std::string& name, const Tensor& like) {
  auto* vi = g->add_output();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtypeToOnnx(like.dtype()));
  for (int64_t d : like.shape()) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* addNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                         const std::vector<std::string>& in, const std::vector<std::string>& out,
                         const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  if (!domain.empty()) n->set_domain(domain);
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
  return n;
}

void setAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void setAttr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

}  // namespace

Result<onnx::ModelProto> Trainer::Impl::exportInference() const {
  DW_RETURN_IF_ERROR(syncHost());
  // The clean inference model from the same graph (no losses), with the trained values.
  onnx::ModelProto m = inference;
  for (auto& init : *m.mutable_graph()->mutable_initializer()) {
    auto it = weights.find(init.name());
    if (it == weights.end()) continue;
    const std::string name = init.name();  // tensorToProto clears the proto first
    tensorToProto(it->second, &init, name);
  }
  return m;
}

Result<onnx::ModelProto> Trainer::Impl::exportTraining() const {
  DW_RETURN_IF_ERROR(syncHost());
  onnx::ModelProto m = gg.model;
  auto* g = m.mutable_graph();
  // Current weights and statistics become the defaults of their inputs.
  for (const auto& [name, t] : weights) setInitializer(g, name, t);
  const OptimizerConfig& oc = opt.optimizer;
  const std::string trainingDomain = "ai.onnx.preview.training";
  bool needsTrainingOpset = false;
  const double lr = scheduledLr(oc.schedule, baseLr, counters.optimizerSteps);
  setInitializer(g, "training.lr", Tensor::scalar(DType::kFloat, lr));
  setInitializer(g, "training.step",
                 Tensor::scalar(DType::kInt64, static_cast<double>(counters.optimizerSteps)));
  std::vector<const ParamEntry*> upd;
  std::vector<std::string> gradNames;
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].frozen) {
      upd.push_back(&params[i]);
      gradNames.push_back(gg.gradOutputs[i]);
    }
  auto stateTensor = [&](const ParamEntry& p, const std::string& buf) {
    const Tensor& w = weights.at(p.name);
    Tensor t(DType::kFloat, w.shape());
    auto it = p.state.buffers.find(buf);
    if (it != p.state.buffers.end())
      std::copy(it->second.begin(), it->second.end(), t.data<float>());
    return t;
  };
  auto stateName = [](const ParamEntry& p, const std::string& buf) {
    return p.name + ".optimizer." + buf;
  };
  std::vector<std::string> in = {"training.lr", "training.step"}, out;
  auto addStates = [&](const std::vector<std::string>& bufs, std::vector<std::string>& ins,
                       std::vector<std::string>& outs) {
    for (const auto& b : bufs)
      for (const auto* p : upd) {
        const std::string s = stateName(*p, b);
        setInitializer(g, s, stateTensor(*p, b));
        ins.push_back(s);
        outs.push_back(s + "_new");
        addOutput(g, s + "_new", weights.at(p->name));
      }
  };
  std::vector<std::string> xs;
  for (const auto* p : upd) xs.push_back(p->name);
  if (oc.type == "adam" || (oc.type == "adamw" && oc.adamwMode == "huggingface") ||
      (oc.type == "adamw" && oc.adamwMode == "pytorch")) {
    std::vector<std::string> xin = xs;
    if (oc.type == "adamw" && oc.adamwMode == "pytorch" && oc.weightDecay > 0) {
      // PyTorch's AdamW decays before the Adam step: X * (1 - lr * wd).
      setInitializer(g, "training.decay", Tensor::scalar(DType::kFloat, 1.0 - lr * oc.weightDecay));
      for (auto& x : xin) {
        const std::string d = x + ".decayed";
        addNode(g, "Mul", x + ".decay", {x, "training.decay"}, {d});
        x = d;
      }
    }
    in.insert(in.end(), xin.begin(), xin.end());
    in.insert(in.end(), gradNames.begin(), gradNames.end());
    for (const auto& x : xs) {
      out.push_back(x + "_new");
      addOutput(g, x + "_new", weights.at(x));
    }
    addStates({"m", "v"}, in, out);
    // ONNX's Adam corrects the moments' bias with T, the count that includes the update it
    // makes (PyTorch's step after its increment): training.step counts the updates done, one
    // fewer, and with it a trial's exported step differed from the trainer's next by 4% of the
    // update (at 0 ONNX skips the correction).
    setInitializer(g, "training.one", Tensor::scalar(DType::kInt64, 1));
    addNode(g, "Add", "optimizer.adam_t", {"training.step", "training.one"}, {"training.adam_t"});
    in[1] = "training.adam_t";
    auto* n = addNode(g, "Adam", "optimizer.adam", in, out, trainingDomain);
    setAttr(n, "alpha", static_cast<float>(oc.beta1));
    setAttr(n, "beta", static_cast<float>(oc.beta2));
    // ONNX adds epsilon to the uncorrected sqrt(v), PyTorch to the corrected one: scaled by
    // sqrt(1 - beta2^t), the two agree exactly at the step exported (t = updates done + 1).
    const double t = static_cast<double>(counters.optimizerSteps + 1);
    setAttr(n, "epsilon", static_cast<float>(oc.eps * std::sqrt(1.0 - std::pow(oc.beta2, t))));
    setAttr(n, "norm_coefficient", static_cast<float>(oc.type == "adam" ? oc.weightDecay : 0.0));
    if (oc.type == "adamw" && oc.adamwMode == "huggingface")
      setAttr(n, "norm_coefficient_post", static_cast<float>(lr * oc.weightDecay));
    needsTrainingOpset = true;
  } else if (oc.type == "sgd" || oc.type == "adagrad") {
    in.insert(in.end(), xs.begin(), xs.end());
    in.insert(in.end(), gradNames.begin(), gradNames.end());
    for (const auto& x : xs) {
      out.push_back(x + "_new");
      addOutput(g, x + "_new", weights.at(x));
    }
    if (oc.type == "sgd") {
      addStates({"momentum"}, in, out);
      auto* n = addNode(g, "Momentum", "optimizer.momentum", in, out, trainingDomain);
      setAttr(n, "alpha", static_cast<float>(oc.momentum));
      setAttr(n, "beta", static_cast<float>(1.0 - oc.dampening));
      setAttr(n, "mode", std::string(oc.nesterov ? "nesterov" : "standard"));
      setAttr(n, "norm_coefficient", static_cast<float>(oc.weightDecay));
    } else {
      addStates({"sum"}, in, out);
      auto* n = addNode(g, "Adagrad", "optimizer.adagrad", in, out, trainingDomain);
      setAttr(n, "decay_factor", static_cast<float>(oc.lrDecay));
      setAttr(n, "epsilon", static_cast<float>(oc.eps));
      setAttr(n, "norm_coefficient", static_cast<float>(oc.weightDecay));
    }
    needsTrainingOpset = true;
  } else if (oc.type == "rmsprop") {
    // No standard node: RMSprop as plain ops, sq' = a*sq + (1-a)*g^2; x' = x -
    // lr*g/(sqrt(sq')+eps).
    setInitializer(g, "training.rms.alpha", Tensor::scalar(DType::kFloat, oc.alpha));
    setInitializer(g, "training.rms.one_minus_alpha", Tensor::scalar(DType::kFloat, 1 - oc.alpha));
    setInitializer(g, "training.rms.eps", Tensor::scalar(DType::kFloat, oc.eps));
    for (size_t i = 0; i < upd.size(); ++i) {
      const std::string& x = xs[i];
      const std::string& gr = gradNames[i];
      const std::string sq = stateName(*upd[i], "square_avg");
      setInitializer(g, sq, stateTensor(*upd[i], "square_avg"));
      const std::string p = x + ".rms.";
      addNode(g, "Mul", p + "g2", {gr, gr}, {p + "g2"});
      addNode(g, "Mul", p + "a_sq", {sq, "training.rms.alpha"}, {p + "a_sq"});
      addNode(g, "Mul", p + "b_g2", {p + "g2", "training.rms.one_minus_alpha"}, {p + "b_g2"});
      addNode(g, "Add", p + "sq_new", {p + "a_sq", p + "b_g2"}, {sq + "_new"});
      addNode(g, "Sqrt", p + "root", {sq + "_new"}, {p + "root"});
      addNode(g, "Add", p + "denom", {p + "root", "training.rms.eps"}, {p + "denom"});
      addNode(g, "Div", p + "ratio", {gr, p + "denom"}, {p + "ratio"});
      addNode(g, "Mul", p + "step", {p + "ratio", "training.lr"}, {p + "step"});
      addNode(g, "Sub", p + "x_new", {x, p + "step"}, {x + "_new"});
      addOutput(g, x + "_new", weights.at(x));
      addOutput(g, sq + "_new", weights.at(x));
    }
  }
  if (needsTrainingOpset) {
    bool has = false;
    for (const auto& op : m.opset_import()) has |= op.domain() == trainingDomain;
    if (!has) {
      auto* op = m.add_opset_import();
      op->set_domain(trainingDomain);
      op->set_version(1);
    }
  }
  auto* p = m.add_metadata_props();
  p->set_key("deepwire.optimizer");
  p->set_value(configJson(oc).dump());
  Status st = checkOnnxModel(m, CheckLevel::Basic);
  if (!st.ok()) return st.withContext("training graph export");
  return m;
}

}  // namespace dw::engine::training
