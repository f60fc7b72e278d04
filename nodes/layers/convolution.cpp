// The convolution layers of deepwire.layers (Conv, ConvTranspose, DepthwiseConv2D,
// SeparableConv) and the spatial layers that go with them: ZeroPadding, Cropping and UpSampling.
#include <cstdint>
#include <utility>

#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

Status lowerConv(LoweringBuilder& b, size_t nd, bool transpose) {
  auto dims = b.staticDims(0, "a convolution needs the input's channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 2)
    return b.fail("expects a rank-" + std::to_string(nd + 2) +
                  " input (N, C, spatial...), got rank " + std::to_string(dims->size()));
  const int64_t cin = (*dims)[1], filters = intParam(b, "filters"), groups = intParam(b, "groups");
  if (cin <= 0) return b.fail("the input's channel count (axis 1) is unknown");
  if (filters <= 0 || groups <= 0 || cin % groups || filters % groups)
    return b.fail("filters and input channels must be positive multiples of groups");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  std::vector<int64_t> wshape = transpose ? std::vector<int64_t>{cin, filters / groups}
                                          : std::vector<int64_t>{filters, cin / groups};
  wshape.insert(wshape.end(), k->begin(), k->end());
  std::vector<std::string> ins = {b.input(0),
                                  b.weight("kernel", wshape, fillFor(b, "kernel_initializer"))};
  if (b.param("use_bias").asBool())
    ins.push_back(b.weight("bias", {filters}, fillFor(b, "bias_initializer")));
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k), attrInts("strides", *s),
                                             attrInts("dilations", *d), attrInt("group", groups)};
  const bool same = strParam(b, "padding") == "same";
  if (!transpose) {
    if (same) attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  } else {
    // Keras output sizes: same -> in * stride; valid -> in * stride + max(k - stride, 0).
    std::vector<int64_t> pads(2 * nd, 0), outPad(nd, 0);
    for (size_t i = 0; i < nd; ++i) {
      const int64_t keff = ((*k)[i] - 1) * (*d)[i] + 1, total = keff - (*s)[i];
      if (total < 0)
        outPad[i] = -total;
      else if (same)
        pads[i] = total / 2, pads[i + nd] = total - total / 2;
    }
    attrs.push_back(attrInts("pads", pads));
    attrs.push_back(attrInts("output_padding", outPad));
  }
  const std::string act = strParam(b, "activation");
  const auto y = b.op1(transpose ? "ConvTranspose" : "Conv", ins, attrs,
                       act == "linear" ? b.outputName(0) : "");
  return act == "linear" ? Status() : finish(b, y, act);
}

std::vector<ParamSpec> convParams() {
  std::vector<ParamSpec> v = {
      pInt("filters", 32, "Number of output channels."),
      pInts("kernel_size", {3}, "Kernel size: one value, or one per spatial axis."),
      pInts("strides", {1}, "Strides: one value, or one per spatial axis."),
      pStr("padding", "valid", "valid: no padding; same: output size = ceil(input / stride).",
           {"valid", "same"}),
      pInts("dilation_rate", {1}, "Dilation: one value, or one per spatial axis."),
      pInt("groups", 1, "Channel groups (filters and input channels must divide by it)."),
      activationParam()};
  auto w = weightParams();
  v.insert(v.end(), w.begin(), w.end());
  return v;
}

// The depthwise Conv (groups = channels) that DepthwiseConv and SeparableConv start with, on
// the builder's input; `what` names the layer in errors.
Result<std::string> depthwiseConv(LoweringBuilder& b, size_t nd, const std::string& what,
                                  int64_t& channels, const std::string& output = "") {
  auto dims = b.staticDims(0, "a " + what + " needs the channel count");
  if (!dims.ok()) return dims.status();
  if (dims->size() != nd + 2) return b.fail("expects a rank-" + std::to_string(nd + 2) + " input");
  const int64_t c = (*dims)[1], mult = intParam(b, "depth_multiplier");
  if (c <= 0 || mult <= 0)
    return b.fail("channels and depth_multiplier must be known and positive");
  auto k = spatial(b, "kernel_size", nd);
  auto s = spatial(b, "strides", nd);
  auto d = spatial(b, "dilation_rate", nd);
  if (!k.ok()) return k.status();
  if (!s.ok()) return s.status();
  if (!d.ok()) return d.status();
  std::vector<int64_t> wshape = {c * mult, 1};
  wshape.insert(wshape.end(), k->begin(), k->end());
  std::vector<std::string> ins = {
      b.input(0), b.weight("depthwise_kernel", wshape, fillFor(b, "kernel_initializer"))};
  // Only DepthwiseConv has a bias here; SeparableConv adds its own after the pointwise step.
  if (!output.empty() && b.param("use_bias").asBool())
    ins.push_back(b.weight("bias", {c * mult}, fillFor(b, "bias_initializer")));
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k), attrInts("strides", *s),
                                             attrInts("dilations", *d), attrInt("group", c)};
  if (strParam(b, "padding") == "same") attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  channels = c * mult;
  return b.op1("Conv", ins, attrs, output);
}

// DepthwiseConv2D: a grouped Conv with groups = channels.
Status lowerDepthwise(LoweringBuilder& b, size_t nd) {
  const std::string act = strParam(b, "activation");
  int64_t channels = 0;
  auto y = depthwiseConv(b, nd, "depthwise convolution", channels,
                         act == "linear" ? b.outputName(0) : "");
  if (!y.ok()) return y.status();
  return act == "linear" ? Status() : finish(b, *y, act);
}

// SeparableConv: the depthwise Conv, then a 1x1 pointwise Conv.
Status lowerSeparable(LoweringBuilder& b, size_t nd) {
  int64_t channels = 0;
  auto depth = depthwiseConv(b, nd, "separable convolution", channels);
  if (!depth.ok()) return depth.status();
  const int64_t filters = intParam(b, "filters");
  if (filters <= 0) return b.fail("filters must be positive");
  std::vector<int64_t> pshape = {filters, channels};
  pshape.insert(pshape.end(), nd, 1);
  std::vector<std::string> ins = {
      *depth, b.weight("pointwise_kernel", pshape, fillFor(b, "kernel_initializer"))};
  if (b.param("use_bias").asBool())
    ins.push_back(b.weight("bias", {filters}, fillFor(b, "bias_initializer")));
  const std::string act = strParam(b, "activation");
  const auto y = b.op1("Conv", ins, {attrInts("kernel_shape", std::vector<int64_t>(nd, 1))},
                       act == "linear" ? b.outputName(0) : "");
  return act == "linear" ? Status() : finish(b, y, act);
}

// Capture-less lambdas convert to LowerFn; these adapt the parameterized lowerings.
template <size_t N, bool T>
Status conv(LoweringBuilder& b) {
  return lowerConv(b, N, T);
}

}  // namespace

void addConvolutions(CatalogueBuilder& cb) {
  add(cb, {"Conv1D",
           "convolution",
           "1-D convolution over (N, C, L). Lowers to Conv.",
           {in()},
           {out()},
           convParams(),
           conv<1, false>});
  add(cb, {"Conv2D",
           "convolution",
           "2-D convolution over (N, C, H, W). Lowers to Conv.",
           {in()},
           {out()},
           convParams(),
           conv<2, false>});
  add(cb, {"Conv3D",
           "convolution",
           "3-D convolution over (N, C, D, H, W). Lowers to Conv.",
           {in()},
           {out()},
           convParams(),
           conv<3, false>});
  add(cb, {"Conv1DTranspose",
           "convolution",
           "Transposed 1-D convolution, with Keras' output sizes. Lowers to ConvTranspose.",
           {in()},
           {out()},
           convParams(),
           conv<1, true>});
  add(cb, {"Conv2DTranspose",
           "convolution",
           "Transposed 2-D convolution, with Keras' output sizes. Lowers to ConvTranspose.",
           {in()},
           {out()},
           convParams(),
           conv<2, true>});
  add(cb, {"Conv3DTranspose",
           "convolution",
           "Transposed 3-D convolution, with Keras' output sizes. Lowers to ConvTranspose.",
           {in()},
           {out()},
           convParams(),
           conv<3, true>});
  {
    std::vector<ParamSpec> v = {
        pInts("kernel_size", {3}, "Kernel size: one value or one per axis."),
        pInts("strides", {1}, "Strides."),
        pStr("padding", "valid", "valid or same.", {"valid", "same"}),
        pInts("dilation_rate", {1}, "Dilation."),
        pInt("depth_multiplier", 1, "Output channels per input channel."),
        activationParam()};
    auto w = weightParams();
    v.insert(v.end(), w.begin(), w.end());
    add(cb,
        {"DepthwiseConv2D",
         "convolution",
         "Depthwise 2-D convolution: one filter set per input channel. Lowers to a grouped Conv.",
         {in()},
         {out()},
         v,
         [](LoweringBuilder& b) { return lowerDepthwise(b, 2); }});
    v.insert(v.begin(), pInt("filters", 32, "Output channels of the pointwise step."));
    add(cb, {"SeparableConv1D",
             "convolution",
             "Depthwise then pointwise 1-D convolution. Lowers to two Convs.",
             {in()},
             {out()},
             v,
             [](LoweringBuilder& b) { return lowerSeparable(b, 1); }});
    add(cb, {"SeparableConv2D",
             "convolution",
             "Depthwise then pointwise 2-D convolution. Lowers to two Convs.",
             {in()},
             {out()},
             v,
             [](LoweringBuilder& b) { return lowerSeparable(b, 2); }});
  }
}

namespace {

// Padding/cropping amounts: one value for all, one per axis (symmetric), or begin/end per axis.
Result<std::pair<std::vector<int64_t>, std::vector<int64_t>>> amounts(LoweringBuilder& b,
                                                                      const std::string& name,
                                                                      size_t nd) {
  std::vector<int64_t> v = b.param(name).asInts();
  std::vector<int64_t> begin(nd), end(nd);
  if (v.size() == 1) {
    begin.assign(nd, v[0]);
    end.assign(nd, v[0]);
  } else if (v.size() == nd) {
    begin = end = v;
  } else if (v.size() == 2 * nd) {
    for (size_t i = 0; i < nd; ++i) begin[i] = v[2 * i], end[i] = v[2 * i + 1];
  } else {
    return b.fail(name + " needs 1, " + std::to_string(nd) + " or " + std::to_string(2 * nd) +
                  " values");
  }
  for (size_t i = 0; i < nd; ++i)
    if (begin[i] < 0 || end[i] < 0) return b.fail(name + " values must be >= 0");
  return std::make_pair(begin, end);
}

Status lowerZeroPadding(LoweringBuilder& b, size_t nd) {
  auto a = amounts(b, "padding", nd);
  if (!a.ok()) return a.status();
  std::vector<int64_t> pads(2 * (nd + 2), 0);
  for (size_t i = 0; i < nd; ++i) pads[2 + i] = a->first[i], pads[nd + 4 + i] = a->second[i];
  b.op1("Pad", {b.input(0), b.int64s("pads", pads)}, {attrString("mode", "constant")},
        b.outputName(0));
  return Status();
}

Status lowerCropping(LoweringBuilder& b, size_t nd) {
  auto a = amounts(b, "cropping", nd);
  if (!a.ok()) return a.status();
  std::vector<int64_t> starts, ends, axes;
  for (size_t i = 0; i < nd; ++i) {
    starts.push_back(a->first[i]);
    ends.push_back(a->second[i] ? -a->second[i] : INT64_MAX);
    axes.push_back(static_cast<int64_t>(i) + 2);
  }
  b.op1("Slice",
        {b.input(0), b.int64s("starts", starts), b.int64s("ends", ends), b.int64s("axes", axes)},
        {}, b.outputName(0));
  return Status();
}

Status lowerUpSampling(LoweringBuilder& b, size_t nd) {
  auto size = spatial(b, "size", nd);
  if (!size.ok()) return size.status();
  onnx::TensorProto scales;
  scales.set_data_type(onnx::TensorProto::FLOAT);
  scales.add_dims(static_cast<int64_t>(nd + 2));
  scales.add_float_data(1);
  scales.add_float_data(1);
  for (int64_t s : *size) scales.add_float_data(static_cast<float>(s));
  const std::string mode = strParam(b, "interpolation") == "bilinear" ? "linear" : "nearest";
  std::vector<onnx::AttributeProto> attrs = {attrString("mode", mode)};
  if (mode == "nearest") {
    attrs.push_back(attrString("coordinate_transformation_mode", "asymmetric"));
    attrs.push_back(attrString("nearest_mode", "floor"));
  } else {
    attrs.push_back(attrString("coordinate_transformation_mode", "half_pixel"));
  }
  // roi may be left out since opset 13; before, an empty one stands for none.
  std::string roi;
  if (b.opset() < 13) {
    onnx::TensorProto none;
    none.set_data_type(onnx::TensorProto::FLOAT);
    none.add_dims(0);
    roi = b.constant("roi", none);
  }
  b.op1("Resize", {b.input(0), roi, b.constant("scales", scales)}, attrs, b.outputName(0));
  return Status();
}

// Capture-less lambdas convert to LowerFn; these adapt the parameterized lowerings.
template <size_t N>
Status zpad(LoweringBuilder& b) {
  return lowerZeroPadding(b, N);
}
template <size_t N>
Status crop(LoweringBuilder& b) {
  return lowerCropping(b, N);
}
template <size_t N>
Status upsample(LoweringBuilder& b) {
  return lowerUpSampling(b, N);
}

}  // namespace

void addPaddingAndResampling(CatalogueBuilder& cb, size_t nd) {
  LowerFn zpads[4] = {nullptr, zpad<1>, zpad<2>, zpad<3>};
  LowerFn crops[4] = {nullptr, crop<1>, crop<2>, crop<3>};
  LowerFn ups[4] = {nullptr, upsample<1>, upsample<2>, upsample<3>};
  const std::string dn = dimsName(nd);
  add(cb, {"ZeroPadding" + dn,
           "reshaping",
           "Pads the spatial axes with zeros: one amount, one per axis, or (begin, end) per "
           "axis. Lowers to Pad.",
           {in()},
           {out()},
           {pInts("padding", {1}, "Padding amounts.")},
           zpads[nd]});
  add(cb, {"Cropping" + dn,
           "reshaping",
           "Crops the spatial axes: one amount, one per axis, or (begin, end) per axis. Lowers "
           "to Slice.",
           {in()},
           {out()},
           {pInts("cropping", {1}, "Cropping amounts.")},
           crops[nd]});
  add(cb,
      {"UpSampling" + dn,
       "reshaping",
       "Repeats (nearest) or interpolates (bilinear) the spatial axes by size. Lowers to Resize.",
       {in()},
       {out()},
       {pInts("size", {2}, "Factor: one value or one per axis."),
        pStr("interpolation", "nearest", "nearest or bilinear.", {"nearest", "bilinear"})},
       ups[nd]});
}

}  // namespace dw::layers
