#include "engine/fusion/fused.h"

#include <algorithm>

#include "engine/kernel.h"
#include "engine/onnx_attrs.h"

namespace dw::engine::fusion {

namespace {

// The private attributes; ONNX has none that start with "__".
constexpr const char* kActivation = "__dw_activation";
constexpr const char* kActivationAlpha = "__dw_activation_alpha";
constexpr const char* kActivationBeta = "__dw_activation_beta";
constexpr const char* kActivationGamma = "__dw_activation_gamma";
constexpr const char* kActivationChoice = "__dw_activation_choice";
constexpr const char* kBnEpsilon = "__dw_bn_epsilon";
constexpr const char* kResidual = "__dw_residual";
constexpr const char* kPoolKernel = "__dw_maxpool_kernel";
constexpr const char* kPoolStrides = "__dw_maxpool_strides";
constexpr const char* kPoolPads = "__dw_maxpool_pads";
constexpr const char* kConv = "__dw_conv";
constexpr const char* kConvStrides = "__dw_conv_strides";
constexpr const char* kConvPads = "__dw_conv_pads";
constexpr const char* kConvDilations = "__dw_conv_dilations";
constexpr const char* kReluGrad = "__dw_relu_grad";
constexpr const char* kBiasGradOf = "__dw_bias_grad_of";
constexpr const char* kBlockedInputs = "__dw_blocked_inputs";
constexpr const char* kBlockedOutputs = "__dw_blocked_outputs";
constexpr const char* kNhwcInputs = "__dw_nhwc_inputs";
constexpr const char* kNhwcOutputs = "__dw_nhwc_outputs";
// A chain's stage i: kChain + its number + one of the suffixes.
constexpr const char* kChainStages = "__dw_chain_stages";
constexpr const char* kMeanOutput = "__dw_mean_output";
constexpr const char* kChain = "__dw_chain";
const char* const kStageStrides = "_strides";
const char* const kStagePads = "_pads";
const char* const kStageGroup = "_group";
const char* const kStageBias = "_bias";
const char* const kStageActivation = "_activation";
const char* const kStageAlpha = "_activation_alpha";
const char* const kStageBeta = "_activation_beta";
const char* const kStageGamma = "_activation_gamma";
const char* const kStageChoice = "_activation_choice";
const char* const kStageBnEpsilon = "_bn_epsilon";

std::string stageAttr(size_t i, const char* suffix) {
  return kChain + std::to_string(i) + suffix;
}

// Sets (replacing) an attribute: a pass that fuses twice keeps the last.
template <class Add>
void replace(onnx::NodeProto& n, const char* name, Add add) {
  auto* attrs = n.mutable_attribute();
  attrs->erase(std::remove_if(attrs->begin(), attrs->end(),
                              [&](const onnx::AttributeProto& a) { return a.name() == name; }),
               attrs->end());
  add();
}

}  // namespace

bool Fused::listed(const std::vector<int64_t>& v, int64_t i) {
  return std::find(v.begin(), v.end(), i) != v.end();
}

Result<MaxPoolGeometry> fusedMaxPool(const Window& win, const Shape& x) {
  const auto& k = win.kernel;
  if (x.size() != 4 || k.size() != 2 || (!win.strides.empty() && win.strides.size() != 2) ||
      (!win.pads.empty() && win.pads.size() != 4) || k[0] < 1 || k[1] < 1 ||
      k[0] * k[1] >= kNoWinner)
    return Status::error("the fused max pooling needs a 4-D input and a 2-D window under " +
                         std::to_string(kNoWinner) + " elements; run the session with fuse off");
  MaxPoolGeometry g;
  g.h = x[2];
  g.w = x[3];
  g.kh = k[0];
  g.kw = k[1];
  if (!win.strides.empty()) g.sh = win.strides[0], g.sw = win.strides[1];
  if (!win.pads.empty())
    g.ph = win.pads[0], g.pw = win.pads[1], g.pb = win.pads[2], g.pr = win.pads[3];
  if (g.sh < 1 || g.sw < 1 || g.ph < 0 || g.pw < 0 || g.pb < 0 || g.pr < 0)
    return Status::error("the fused max pooling has invalid strides or pads");
  // Before dividing (which truncates toward zero): then every size below is at least 1.
  if (g.h + g.ph + g.pb < g.kh || g.w + g.pw + g.pr < g.kw)
    return Status::error("the fused max pooling's window exceeds the input");
  g.oh = (g.h + g.ph + g.pb - g.kh) / g.sh + 1;
  g.ow = (g.w + g.pw + g.pr - g.kw) / g.sw + 1;
  return g;
}

Fused fusedOf(const Attributes& a) {
  Fused f;
  f.activation = a.getString(kActivation);
  f.activationParams.alpha = a.getFloat(kActivationAlpha);
  f.activationParams.beta = a.getFloat(kActivationBeta);
  f.activationParams.gamma = a.getFloat(kActivationGamma);
  f.activationChoice = a.getString(kActivationChoice);
  if (a.has(kBnEpsilon)) f.bnEpsilon = a.getFloat(kBnEpsilon);
  f.residual = a.getInt(kResidual, 0) != 0;
  f.maxPool = {a.getInts(kPoolKernel), a.getInts(kPoolStrides), a.getInts(kPoolPads), {}};
  f.conv = a.getString(kConv);
  f.convWindow = {{}, a.getInts(kConvStrides), a.getInts(kConvPads), a.getInts(kConvDilations)};
  f.reluGrad = a.getInt(kReluGrad, 0) != 0;
  f.biasGradOf = static_cast<int>(a.getInt(kBiasGradOf, -1));
  f.blockedInputs = a.getInts(kBlockedInputs);
  f.blockedOutputs = a.getInts(kBlockedOutputs);
  f.nhwcInputs = a.getInts(kNhwcInputs);
  f.nhwcOutputs = a.getInts(kNhwcOutputs);
  f.meanOutput = a.getInt(kMeanOutput, 0) != 0;
  const int64_t stages = a.getInt(kChainStages, 0);
  for (int64_t i = 0; i < stages; ++i) {
    ChainStage s;
    auto at = [&](const char* suffix) { return stageAttr(static_cast<size_t>(i), suffix); };
    s.window = {{}, a.getInts(at(kStageStrides)), a.getInts(at(kStagePads)), {}};
    s.group = a.getInt(at(kStageGroup), 1);
    s.hasBias = a.getInt(at(kStageBias), 0) != 0;
    s.activation = a.getString(at(kStageActivation));
    s.activationParams = {a.getFloat(at(kStageAlpha)), a.getFloat(at(kStageBeta)),
                          a.getFloat(at(kStageGamma))};
    s.activationChoice = a.getString(at(kStageChoice));
    if (a.has(at(kStageBnEpsilon))) s.bnEpsilon = a.getFloat(at(kStageBnEpsilon));
    f.chain.push_back(std::move(s));
  }
  return f;
}

namespace {
Result<UnaryInstance> activationNamed(const std::string& op, const ops::UnaryParams& params,
                                      const std::string& choice) {
  if (op.empty()) return UnaryInstance{};
  const ops::UnaryOp* row = ops::findUnaryOp(op);
  if (!row) return Status::error("no activation " + op);
  return unaryWithChoice(*row, params, choice);
}
}  // namespace

Result<UnaryInstance> activationOf(const Fused& f) {
  return activationNamed(f.activation, f.activationParams, f.activationChoice);
}

Result<UnaryInstance> activationOf(const ChainStage& s) {
  return activationNamed(s.activation, s.activationParams, s.activationChoice);
}

Fused fusedOf(const onnx::NodeProto& node) {
  Attributes a;
  for (const auto& attr : node.attribute())
    if (attr.name().rfind("__dw_", 0) == 0) a.set(attr);
  return fusedOf(a);
}

void setActivation(onnx::NodeProto& n, const std::string& op, const ops::UnaryParams& p,
                   const std::string& choice) {
  replace(n, kActivation, [&] { addStringAttr(n, kActivation, op); });
  replace(n, kActivationAlpha, [&] { addFloatAttr(n, kActivationAlpha, p.alpha); });
  replace(n, kActivationBeta, [&] { addFloatAttr(n, kActivationBeta, p.beta); });
  replace(n, kActivationGamma, [&] { addFloatAttr(n, kActivationGamma, p.gamma); });
  replace(n, kActivationChoice, [&] {
    if (!choice.empty()) addStringAttr(n, kActivationChoice, choice);
  });
}

void setBnEpsilon(onnx::NodeProto& n, float epsilon) {
  replace(n, kBnEpsilon, [&] { addFloatAttr(n, kBnEpsilon, epsilon); });
}

void setResidual(onnx::NodeProto& n, const std::string& value) {
  while (n.input_size() < Fused::kResidualInput) n.add_input("");
  n.add_input(value);
  replace(n, kResidual, [&] { addIntAttr(n, kResidual, 1); });
}

void setMaxPool(onnx::NodeProto& n, const Window& w) {
  replace(n, kPoolKernel, [&] { addIntsAttr(n, kPoolKernel, w.kernel); });
  replace(n, kPoolStrides, [&] { addIntsAttr(n, kPoolStrides, w.strides); });
  replace(n, kPoolPads, [&] { addIntsAttr(n, kPoolPads, w.pads); });
}

void setConv(onnx::NodeProto& n, const std::string& name, const Window& w) {
  replace(n, kConv, [&] { addStringAttr(n, kConv, name); });
  replace(n, kConvStrides, [&] { addIntsAttr(n, kConvStrides, w.strides); });
  replace(n, kConvPads, [&] { addIntsAttr(n, kConvPads, w.pads); });
  replace(n, kConvDilations, [&] { addIntsAttr(n, kConvDilations, w.dilations); });
}

void setReluGrad(onnx::NodeProto& n) {
  replace(n, kReluGrad, [&] { addIntAttr(n, kReluGrad, 1); });
}

void setBiasGrad(onnx::NodeProto& n, int operand) {
  replace(n, kBiasGradOf, [&] { addIntAttr(n, kBiasGradOf, operand); });
}

void appendChainStage(onnx::NodeProto& n, const ChainStage& s,
                      const std::vector<std::string>& inputs) {
  const size_t i = fusedOf(n).chain.size();
  auto at = [&](const char* suffix) { return stageAttr(i, suffix); };
  replace(n, kChainStages, [&] { addIntAttr(n, kChainStages, static_cast<int64_t>(i + 1)); });
  addIntsAttr(n, at(kStageStrides), s.window.strides);
  addIntsAttr(n, at(kStagePads), s.window.pads);
  addIntAttr(n, at(kStageGroup), s.group);
  addIntAttr(n, at(kStageBias), s.hasBias ? 1 : 0);
  if (!s.activation.empty()) {
    addStringAttr(n, at(kStageActivation), s.activation);
    addFloatAttr(n, at(kStageAlpha), s.activationParams.alpha);
    addFloatAttr(n, at(kStageBeta), s.activationParams.beta);
    addFloatAttr(n, at(kStageGamma), s.activationParams.gamma);
    if (!s.activationChoice.empty()) addStringAttr(n, at(kStageChoice), s.activationChoice);
  }
  if (s.bnEpsilon) addFloatAttr(n, at(kStageBnEpsilon), *s.bnEpsilon);
  while (n.input_size() < Fused::chainInput(i, 0)) n.add_input("");
  for (int k = 0; k < Fused::kChainInputs; ++k)
    n.add_input(k < static_cast<int>(inputs.size()) ? inputs[k] : "");
}

void setMeanOutput(onnx::NodeProto& n, const std::string& value) {
  while (n.output_size() < 1) n.add_output("");
  n.add_output(value);
  replace(n, kMeanOutput, [&] { addIntAttr(n, kMeanOutput, 1); });
}

void clearOutputMarks(onnx::NodeProto& n) {
  replace(n, kBlockedOutputs, [] {});
  replace(n, kNhwcOutputs, [] {});
}

void markInput(onnx::NodeProto& n, Layout layout, int64_t index) {
  appendIntsAttr(n, layout == Layout::kBlocked ? kBlockedInputs : kNhwcInputs, index);
}

void markOutput(onnx::NodeProto& n, Layout layout, int64_t index) {
  appendIntsAttr(n, layout == Layout::kBlocked ? kBlockedOutputs : kNhwcOutputs, index);
}

}  // namespace dw::engine::fusion
