// The recurrent layers of deepwire.layers: LSTM, GRU, SimpleRNN / RNN and Bidirectional, which
// lower to ONNX's recurrent ops, and ConvLSTM, which lowers to a Scan over time.
#include <cstdint>

#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

Status lowerRecurrent(LoweringBuilder& b, const std::string& kind, bool bidirectional) {
  auto dims = b.staticDims(0, "a recurrent layer needs the feature count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != 3) return b.fail("expects a rank-3 input (batch, time, features)");
  const int64_t features = (*dims)[2], units = intParam(b, "units");
  if (features <= 0 || units <= 0) return b.fail("features and units must be known and positive");
  const int64_t gates = kind == "LSTM" ? 4 : kind == "GRU" ? 3 : 1, dirs = bidirectional ? 2 : 1;
  WeightFill rf = fillFor(b, "recurrent_initializer");
  const auto w =
      b.weight("kernel", {dirs, gates * units, features}, fillFor(b, "kernel_initializer"));
  const auto r = b.weight("recurrent_kernel", {dirs, gates * units, units}, rf);
  std::vector<std::string> ins = {b.input(0), w, r};
  if (b.param("use_bias").asBool()) {
    WeightFill bf = fillFor(b, "bias_initializer");
    if (kind == "LSTM" && b.param("unit_forget_bias").asBool())
      bf.forgetGateOnes = units;  // iofc: f is gate 2
    ins.push_back(b.weight("bias", {dirs, 2 * gates * units}, bf));
  }
  // Batch-first `layout` came at opset 14; before it, time goes first and comes back.
  const bool batchFirst = b.opset() >= 14;
  if (!batchFirst) ins[0] = b.op1("Transpose", {ins[0]}, {attrInts("perm", {1, 0, 2})});
  std::vector<onnx::AttributeProto> attrs = {attrInt("hidden_size", units)};
  if (batchFirst) attrs.push_back(attrInt("layout", 1));
  if (bidirectional)
    attrs.push_back(attrString("direction", "bidirectional"));
  else if (b.param("go_backwards").asBool())
    attrs.push_back(attrString("direction", "reverse"));
  if (kind == "GRU")
    attrs.push_back(attrInt("linear_before_reset", b.param("reset_after").asBool() ? 1 : 0));
  if (kind == "RNN") {
    const std::string act = strParam(b, "activation");
    const std::string onnxAct = act == "tanh"      ? "Tanh"
                                : act == "relu"    ? "Relu"
                                : act == "sigmoid" ? "Sigmoid"
                                                   : "";
    if (onnxAct.empty()) return b.fail("SimpleRNN supports activation tanh, relu or sigmoid");
    onnx::AttributeProto a;
    a.set_name("activations");
    a.set_type(onnx::AttributeProto::STRINGS);
    for (int64_t i = 0; i < dirs; ++i) a.add_strings(onnxAct);
    attrs.push_back(a);
  }
  const bool sequences = b.param("return_sequences").asBool();
  // layout=1: Y is [N, T, dirs, units], Y_h is [N, dirs, units].
  auto outs = b.op(kind, ins, attrs, {"", ""});
  std::string y = sequences ? outs[0] : outs[1];
  if (!batchFirst)  // [T, dirs, N, units] and [dirs, N, units]
    y = b.op1("Transpose", {y},
              {attrInts("perm", sequences ? std::vector<int64_t>{2, 0, 1, 3}
                                          : std::vector<int64_t>{1, 0, 2})});
  if (!bidirectional) {
    // Keras returns a go_backwards layer's sequence in processing order (last time step
    // first); ONNX's reverse direction aligns Y with the input's time axis, so flip it back.
    const bool flip = sequences && b.param("go_backwards").asBool();
    const auto squeezed = b.squeeze(y, {sequences ? 2 : 1}, flip ? "" : b.outputName(0));
    if (flip)
      b.op1("Slice",
            {squeezed, b.int64s("starts", {-1}), b.int64s("ends", {INT64_MIN}),
             b.int64s("axes", {1}), b.int64s("steps", {-1})},
            {}, b.outputName(0));
    return Status();
  }
  const std::string mode = strParam(b, "merge_mode");
  const int64_t dirAxis = sequences ? 2 : 1;
  if (mode == "concat") {
    std::vector<int64_t> shape =
        sequences ? std::vector<int64_t>{0, 0, 2 * units} : std::vector<int64_t>{0, 2 * units};
    b.op1("Reshape", {y, b.int64s("shape", shape)}, {}, b.outputName(0));
  } else {
    const std::string reduce = mode == "sum"   ? "ReduceSum"
                               : mode == "ave" ? "ReduceMean"
                                               : "ReduceProd";
    b.reduce(reduce, y, {dirAxis}, false, b.outputName(0));
  }
  return Status();
}

std::vector<ParamSpec> recurrentParams(const std::string& kind, bool bidirectional) {
  std::vector<ParamSpec> v = {
      pInt("units", 32, "Size of the hidden state."),
      pBool("return_sequences", false,
            "Return the whole output sequence (batch, time, units) "
            "rather than the last state (batch, units)."),
      initParam("kernel_initializer", "glorot_uniform", "input kernel"),
      initParam("recurrent_initializer", "orthogonal", "recurrent kernel"),
      pBool("use_bias", true, "Whether the layer adds biases."),
      initParam("bias_initializer", "zeros", "biases"),
      pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
      pInt("seed", 0, "Seed of the weight initializers.")};
  const auto r = regularizerParams({"kernel", "recurrent", "bias"});
  v.insert(v.end(), r.begin(), r.end());
  if (kind == "LSTM")
    v.push_back(pBool("unit_forget_bias", true, "Initialize the forget gate's bias to 1."));
  if (kind == "GRU")
    v.push_back(pBool("reset_after", true,
                      "Apply the reset gate after the matrix product (Keras default; ONNX "
                      "linear_before_reset)."));
  if (kind == "RNN")
    v.push_back(
        pStr("activation", "tanh", "Activation of the recurrence.", {"tanh", "relu", "sigmoid"}));
  if (bidirectional) {
    v.push_back(pStr("layer", "LSTM", "The recurrent layer run in both directions.",
                     {"LSTM", "GRU", "SimpleRNN"}));
    v.push_back(pStr("merge_mode", "concat", "How the two directions combine.",
                     {"concat", "sum", "mul", "ave"}));
  } else {
    v.push_back(pBool("go_backwards", false,
                      "Process the sequence backwards (with return_sequences, the output is in "
                      "processing order: last time step first, as Keras returns it)."));
  }
  return v;
}

Status lowerBidirectional(LoweringBuilder& b) {
  const std::string layer = strParam(b, "layer");
  if (layer == "SimpleRNN") return lowerRecurrent(b, "RNN", true);
  return lowerRecurrent(b, layer, true);
}

// A value_info of element type `elem` and rank `rank`, dims unknown (a Scan body's interface).
onnx::ValueInfoProto bodyValue(const std::string& name, int32_t elem, size_t rank) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* tt = v.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < rank; ++i) shape->add_dim();
  return v;
}

// ConvLSTM: an LSTM whose input and recurrent transforms are convolutions, over (batch, time,
// channels, spatial...). ONNX has no such op, so it lowers to a Scan over the time axis whose
// body runs one step: Conv(x_t) + Conv(h) -> gates (ONNX LSTM order i, o, f, c) -> c, h. The
// weights stay initializers of the outer graph and the body reads them from there. The recurrent
// convolution is 'same' with stride 1, as in Keras, so the state keeps the input conv's size.
Status lowerConvLSTM(LoweringBuilder& b, size_t nd) {
  auto dims = b.staticDims(0, "ConvLSTM needs the input's channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 3)
    return b.fail("expects a rank-" + std::to_string(nd + 3) +
                  " input (batch, time, channels, spatial...), got rank " +
                  std::to_string(dims->size()));
  const int64_t cin = (*dims)[2], filters = intParam(b, "filters");
  if (cin <= 0) return b.fail("the input's channel count (axis 2) is unknown");
  if (filters <= 0) return b.fail("filters must be positive");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  const std::string act = strParam(b, "activation"), ract = strParam(b, "recurrent_activation");
  const auto type = b.inputType(0);
  const int32_t elem = type ? type->tensor_type().elem_type() : onnx::TensorProto::FLOAT;

  std::vector<int64_t> wshape = {4 * filters, cin}, ushape = {4 * filters, filters};
  wshape.insert(wshape.end(), k->begin(), k->end());
  ushape.insert(ushape.end(), k->begin(), k->end());
  const auto w = b.weight("kernel", wshape, fillFor(b, "kernel_initializer"));
  const auto u = b.weight("recurrent_kernel", ushape, fillFor(b, "recurrent_initializer"));
  std::string bias;
  if (b.param("use_bias").asBool()) {
    // (1, 4 * filters), as LSTM's (directions, ...): the fill sets the forget gate (gate 2) to 1.
    WeightFill bf = fillFor(b, "bias_initializer");
    if (b.param("unit_forget_bias").asBool()) bf.forgetGateOnes = filters;
    bias = b.squeeze(b.weight("bias", {1, 4 * filters}, bf), {0});
  }
  std::vector<onnx::AttributeProto> convAttrs = {
      attrInts("kernel_shape", *k), attrInts("strides", *s), attrInts("dilations", *d)};
  if (strParam(b, "padding") == "same") convAttrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  const std::vector<onnx::AttributeProto> recurrentAttrs = {attrInts("kernel_shape", *k),
                                                            attrString("auto_pad", "SAME_UPPER")};

  // Zero initial state shaped like the first step's gates for one gate: (N, filters, out...).
  const auto first = b.op1("Gather", {b.input(0), b.int64s("step0", {0})}, {attrInt("axis", 1)});
  std::vector<std::string> firstIns = {b.squeeze(first, {1}), w};
  const auto gates0 = b.op1("Conv", firstIns, convAttrs);
  const auto oneGate =
      b.op1("Slice", {gates0, b.int64s("gate_start", {0}), b.int64s("gate_end", {filters}),
                      b.int64s("gate_axis", {1})});
  const auto zeros = b.op1("ConstantOfShape", {b.op1("Shape", {oneGate})});

  // The step body.
  const std::string p = b.outputName(0) + "/step/";
  onnx::GraphProto body;
  body.set_name(p + "body");
  const size_t rank = nd + 2;
  *body.add_input() = bodyValue(p + "h_prev", elem, rank);
  *body.add_input() = bodyValue(p + "c_prev", elem, rank);
  *body.add_input() = bodyValue(p + "x_t", elem, rank);
  auto node = [&](const std::string& op, std::vector<std::string> ins,
                  std::vector<std::string> outs, std::vector<onnx::AttributeProto> attrs = {}) {
    auto* n = body.add_node();
    n->set_op_type(op);
    n->set_name(p + op + "_" + std::to_string(body.node_size()));
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(p + o);
    for (auto& a : attrs) *n->add_attribute() = std::move(a);
  };
  std::vector<std::string> xIns = {p + "x_t", w};
  if (!bias.empty()) xIns.push_back(bias);
  node("Conv", xIns, {"zx"}, convAttrs);
  node("Conv", {p + "h_prev", u}, {"zh"}, recurrentAttrs);
  node("Add", {p + "zx", p + "zh"}, {"z"});
  std::vector<onnx::AttributeProto> splitAttrs = {attrInt("axis", 1)};
  if (b.opset() >= 18) splitAttrs.push_back(attrInt("num_outputs", 4));
  node("Split", {p + "z"}, {"zi", "zo", "zf", "zc"}, splitAttrs);
  auto gate = [&](const std::string& fn, const std::string& in, const std::string& out) {
    if (fn == "hard_sigmoid")
      node("HardSigmoid", {p + in}, {out}, {attrFloat("alpha", 1.0f / 6), attrFloat("beta", 0.5f)});
    else
      node(fn == "sigmoid" ? "Sigmoid" : fn == "relu" ? "Relu" : "Tanh", {p + in}, {out});
  };
  gate(ract, "zi", "i");
  gate(ract, "zo", "o");
  gate(ract, "zf", "f");
  gate(act, "zc", "g");
  node("Mul", {p + "f", p + "c_prev"}, {"fc"});
  node("Mul", {p + "i", p + "g"}, {"ig"});
  node("Add", {p + "fc", p + "ig"}, {"c"});
  gate(act, "c", "ac");
  node("Mul", {p + "o", p + "ac"}, {"h"});
  node("Identity", {p + "h"}, {"h_out"});
  for (const char* o : {"h", "c", "h_out"}) *body.add_output() = bodyValue(p + o, elem, rank);

  onnx::AttributeProto bodyAttr;
  bodyAttr.set_name("body");
  bodyAttr.set_type(onnx::AttributeProto::GRAPH);
  *bodyAttr.mutable_g() = std::move(body);
  // Keras returns a go_backwards sequence in processing order: the outputs are not reversed.
  std::vector<onnx::AttributeProto> scanAttrs = {
      bodyAttr, attrInt("num_scan_inputs", 1), attrInts("scan_input_axes", {1}),
      attrInts("scan_output_axes", {1}),
      attrInts("scan_input_directions", {b.param("go_backwards").asBool() ? 1 : 0})};
  const bool sequences = b.param("return_sequences").asBool();
  b.op("Scan", {zeros, zeros, b.input(0)}, std::move(scanAttrs),
       {sequences ? "" : b.outputName(0), "", sequences ? b.outputName(0) : ""});
  return Status();
}

std::vector<ParamSpec> convLstmParams() {
  std::vector<ParamSpec> v = {
      pInt("filters", 16, "Channels of the hidden state."),
      pInts("kernel_size", {3}, "Kernel size: one value, or one per spatial axis."),
      pInts("strides", {1}, "Strides of the input convolution."),
      pStr("padding", "valid", "Padding of the input convolution: valid or same.",
           {"valid", "same"}),
      pInts("dilation_rate", {1}, "Dilation of the input convolution."),
      pStr("activation", "tanh", "Activation of the cell input and output.", {"tanh", "relu"}),
      pStr("recurrent_activation", "sigmoid", "Activation of the gates.",
           {"sigmoid", "hard_sigmoid"}),
      pBool("return_sequences", false,
            "Return every step's state (batch, time, filters, spatial...) rather than the "
            "last one."),
      pBool("go_backwards", false,
            "Process the sequence backwards (the sequence output stays in processing order, "
            "as Keras returns it)."),
      initParam("kernel_initializer", "glorot_uniform", "input kernel"),
      initParam("recurrent_initializer", "orthogonal", "recurrent kernel"),
      pBool("use_bias", true, "Whether the layer adds a bias."),
      initParam("bias_initializer", "zeros", "bias"),
      pBool("unit_forget_bias", true, "Initialize the forget gate's bias to 1."),
      pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
      pInt("seed", 0, "Seed of the weight initializers.")};
  const auto r = regularizerParams({"kernel", "recurrent", "bias"});
  v.insert(v.end(), r.begin(), r.end());
  return v;
}

// Capture-less lambdas convert to LowerFn; this adapts the parameterized lowering.
template <size_t N>
Status convlstm(LoweringBuilder& b) {
  return lowerConvLSTM(b, N);
}

}  // namespace

void addRecurrent(CatalogueBuilder& cb) {
  add(cb, {"LSTM",
           "recurrent",
           "Long short-term memory over (batch, time, features). Lowers to ONNX LSTM (batch-first "
           "layout, gates in ONNX order i, o, f, c).",
           {in()},
           {out()},
           recurrentParams("LSTM", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "LSTM", false); }});
  add(cb, {"GRU",
           "recurrent",
           "Gated recurrent unit over (batch, time, features). Lowers to ONNX GRU.",
           {in()},
           {out()},
           recurrentParams("GRU", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "GRU", false); }});
  add(cb, {"SimpleRNN",
           "recurrent",
           "Fully connected recurrence over (batch, time, features). Lowers to ONNX RNN.",
           {in()},
           {out()},
           recurrentParams("RNN", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "RNN", false); }});
  add(cb, {"RNN",
           "recurrent",
           "A recurrent layer with a simple cell (as SimpleRNN). Lowers to ONNX RNN.",
           {in()},
           {out()},
           recurrentParams("RNN", false),
           [](LoweringBuilder& b) { return lowerRecurrent(b, "RNN", false); }});
  {
    auto params = recurrentParams("LSTM", true);
    params.push_back(
        pBool("reset_after", true, "GRU only: apply the reset gate after the matrix product."));
    params.push_back(
        pStr("activation", "tanh", "SimpleRNN only: activation.", {"tanh", "relu", "sigmoid"}));
    add(cb, {"Bidirectional",
             "recurrent",
             "Runs a recurrent layer forwards and backwards and merges the two. Lowers to one "
             "bidirectional ONNX LSTM/GRU/RNN.",
             {in()},
             {out()},
             params,
             lowerBidirectional});
  }

  for (size_t nd = 1; nd <= 3; ++nd) {
    static const LowerFn convLstm[4] = {nullptr, convlstm<1>, convlstm<2>, convlstm<3>};
    add(cb,
        {"ConvLSTM" + dimsName(nd),
         "recurrent",
         "Convolutional LSTM over (batch, time, channels, spatial...): the LSTM's matrix "
         "products are " +
             dimsName(nd) +
             " convolutions. Lowers to a Scan over time whose "
             "body holds two Convs and the gates (kernel (4*filters, channels, k...) and "
             "recurrent_kernel (4*filters, filters, k...), gates in ONNX LSTM order i, o, f, c).",
         {in()},
         {out()},
         convLstmParams(),
         convLstm[nd]});
  }
}

}  // namespace dw::layers
