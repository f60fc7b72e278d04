// The normalization layers of deepwire.layers: BatchNormalization, LayerNormalization,
// GroupNormalization and RMSNormalization. The last two lower to opset-17 operators (ONNX has
// GroupNormalization from 18 and RMSNormalization from 23), so they work in any graph.
#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

// The input's static dims and the "axis" parameter made non-negative, with a known size.
struct NormalizedAxis {
  std::vector<int64_t> dims;
  int64_t rank = 0, axis = 0, size = 0;
};
Result<NormalizedAxis> normalizedAxis(LoweringBuilder& b, const std::string& why) {
  auto dims = b.staticDims(0, why);
  if (!dims.ok()) return dims.status();
  NormalizedAxis n;
  n.rank = static_cast<int64_t>(dims->size());
  n.axis = intParam(b, "axis");
  if (n.axis < 0) n.axis += n.rank;
  if (n.axis < 0 || n.axis >= n.rank)
    return b.fail("axis is out of range for a rank-" + std::to_string(n.rank) + " input");
  n.size = (*dims)[n.axis];
  if (n.size <= 0) return b.fail("the size of axis " + std::to_string(n.axis) + " is unknown");
  n.dims = std::move(*dims);
  return n;
}

Status lowerNorm(LoweringBuilder& b, bool batch) {
  auto na = normalizedAxis(b, "a normalization needs the normalized axis' size");
  if (!na.ok()) return na.status();
  const std::vector<int64_t>& dims = na->dims;
  const int64_t axis = na->axis, c = na->size;
  const bool center = b.param("center").asBool(), scale = b.param("scale").asBool();
  WeightFill ones, zeros;
  ones.fill = "ones";
  zeros.fill = "zeros";
  if (batch) {
    if (axis != 1) return b.fail("BatchNormalization normalizes the channel axis 1 (ONNX layout)");
    const auto gamma =
        scale ? b.weight("gamma", {c}, ones) : b.weight("gamma", {c}, ones, "Constant");
    const auto beta =
        center ? b.weight("beta", {c}, zeros) : b.weight("beta", {c}, zeros, "Constant");
    const auto mean = b.weight("moving_mean", {c}, zeros, "Constant");
    const auto var = b.weight("moving_variance", {c}, ones, "Constant");
    b.op1("BatchNormalization", {b.input(0), gamma, beta, mean, var},
          {attrFloat("epsilon", static_cast<float>(b.param("epsilon").asFloat())),
           attrFloat("momentum", static_cast<float>(b.param("momentum").asFloat()))},
          b.outputName(0));
    return Status();
  }
  std::vector<int64_t> shape(dims.begin() + axis, dims.end());
  for (int64_t d : shape)
    if (d <= 0) return b.fail("LayerNormalization needs static sizes from axis on");
  const auto gamma =
      scale ? b.weight("gamma", shape, ones) : b.weight("gamma", shape, ones, "Constant");
  const std::string beta = center ? b.weight("beta", shape, zeros) : "";
  if (b.opset() < 17) {
    // The op came at opset 17; before it, what it computes.
    std::vector<int64_t> over;
    for (int64_t a = axis; a < static_cast<int64_t>(dims.size()); ++a) over.push_back(a);
    const auto centered =
        b.op1("Sub", {b.input(0), b.reduce("ReduceMean", b.input(0), over, true)});
    const auto var = b.reduce("ReduceMean", b.op1("Mul", {centered, centered}), over, true);
    const auto eps = b.floatScalar("epsilon", static_cast<float>(b.param("epsilon").asFloat()));
    const auto normed = b.op1("Div", {centered, b.op1("Sqrt", {b.op1("Add", {var, eps})})});
    if (beta.empty()) {
      b.op1("Mul", {normed, gamma}, {}, b.outputName(0));
    } else {
      b.op1("Add", {b.op1("Mul", {normed, gamma}), beta}, {}, b.outputName(0));
    }
    return Status();
  }
  std::vector<std::string> ins = {b.input(0), gamma};
  if (!beta.empty()) ins.push_back(beta);
  b.op1("LayerNormalization", ins,
        {attrInt("axis", axis),
         attrFloat("epsilon", static_cast<float>(b.param("epsilon").asFloat()))},
        b.outputName(0));
  return Status();
}

// Keras' GroupNormalization: the channels fall into `groups` groups, each normalized over its
// channels and every spatial position, per sample; then gamma and beta per channel. The channels
// are axis 1 (ONNX layout, X seen as [N, groups, rest]) or the last axis (channels last, X seen
// as [N, rest, groups, C / groups]); either view keeps the batch free.
Status lowerGroupNorm(LoweringBuilder& b) {
  auto dims = b.staticDims(0, "GroupNormalization needs the channel and spatial sizes");
  if (!dims.ok()) return dims.status();
  const int64_t rank = static_cast<int64_t>(dims->size());
  if (rank < 2) return b.fail("GroupNormalization needs (batch, channels, ...) input");
  int64_t axis = intParam(b, "axis");
  if (axis < 0) axis += rank;
  if (axis != 1 && axis != rank - 1)
    return b.fail("GroupNormalization groups the channel axis, 1 (ONNX layout) or the last " +
                  std::string("(channels last); axis is ") + std::to_string(intParam(b, "axis")));
  const int64_t c = (*dims)[axis], groups = intParam(b, "groups");
  for (int64_t a = 1; a < rank; ++a)
    if ((*dims)[a] <= 0) return b.fail("GroupNormalization needs static sizes after the batch");
  if (groups <= 0 || c % groups != 0)
    return b.fail("groups " + std::to_string(groups) + " must divide the " + std::to_string(c) +
                  " channels; choose a divisor of " + std::to_string(c));
  const bool last = axis == rank - 1 && axis != 1;
  const float eps = static_cast<float>(b.param("epsilon").asFloat());
  const auto grouped =
      b.op1("Reshape", {b.input(0), last ? b.int64s("grouped", {0, -1, groups, c / groups})
                                         : b.int64s("grouped", {0, groups, -1})});
  const std::vector<int64_t> over = last ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{2};
  const auto mean = b.reduce("ReduceMean", grouped, over, true);
  const auto centered = b.op1("Sub", {grouped, mean});
  const auto var = b.reduce("ReduceMean", b.op1("Mul", {centered, centered}), over, true);
  const auto stddev = b.op1("Sqrt", {b.op1("Add", {var, b.floatScalar("epsilon", eps)})});
  std::vector<int64_t> shape(dims->begin(), dims->end());
  shape[0] = 0;  // the batch, copied from the input
  std::string y =
      b.op1("Reshape", {b.op1("Div", {centered, stddev}), b.int64s("ungrouped", shape)});
  // gamma and beta [C], broadcast as [C, 1, ...] (channels last: as they are).
  std::vector<int64_t> perChannel(last ? 1 : rank - 1, 1);
  perChannel[0] = c;
  WeightFill ones, zeros;
  ones.fill = "ones";
  zeros.fill = "zeros";
  const bool center = b.param("center").asBool(), scale = b.param("scale").asBool();
  const auto channelShape = b.int64s("channel_shape", perChannel);
  if (scale)
    y = b.op1("Mul", {y, b.op1("Reshape", {b.weight("gamma", {c}, ones), channelShape})}, {},
              center ? "" : b.outputName(0));
  if (center)
    b.op1("Add", {y, b.op1("Reshape", {b.weight("beta", {c}, zeros), channelShape})}, {},
          b.outputName(0));
  if (!scale && !center) b.op1("Identity", {y}, {}, b.outputName(0));
  return Status();
}

// Keras' RMSNormalization: x / sqrt(mean(x^2 over axis) + epsilon) * scale, scale [size of axis].
Status lowerRmsNorm(LoweringBuilder& b) {
  auto na = normalizedAxis(b, "RMSNormalization needs the normalized axis' size");
  if (!na.ok()) return na.status();
  const int64_t rank = na->rank, axis = na->axis, n = na->size;
  const std::string x = b.input(0);
  const auto meanSquare = b.reduce("ReduceMean", b.op1("Mul", {x, x}), {axis}, true);
  const auto rms = b.op1(
      "Sqrt",
      {b.op1("Add", {meanSquare,
                     b.floatScalar("epsilon", static_cast<float>(b.param("epsilon").asFloat()))})});
  WeightFill ones;
  ones.fill = "ones";
  std::string scale = b.weight("scale", {n}, ones);
  if (axis != rank - 1) {
    std::vector<int64_t> shape(rank - axis, 1);
    shape[0] = n;
    scale = b.op1("Reshape", {scale, b.int64s("scale_shape", shape)});
  }
  b.op1("Mul", {b.op1("Div", {x, rms}), scale}, {}, b.outputName(0));
  return Status();
}

}  // namespace

void addNormalization(CatalogueBuilder& cb) {
  add(cb, {"BatchNormalization",
           "normalization",
           "Normalizes each channel (axis 1) with batch statistics in training and moving "
           "statistics in inference. Lowers to BatchNormalization; gamma and beta train, the "
           "moving statistics are updated by the op itself.",
           {in()},
           {out()},
           {pInt("axis", 1, "The channel axis (1 in ONNX layout)."),
            pFloat("momentum", 0.99,
                   "Moving-average factor: moving = moving * momentum + batch * (1 - momentum)."),
            pFloat("epsilon", 0.001, "Added to the variance."),
            pBool("center", true, "Learn beta."), pBool("scale", true, "Learn gamma.")},
           [](LoweringBuilder& b) { return lowerNorm(b, true); }});
  add(cb, {"LayerNormalization",
           "normalization",
           "Normalizes over the axes from axis to the last. Lowers to LayerNormalization.",
           {in()},
           {out()},
           {pInt("axis", -1, "First normalized axis."),
            pFloat("epsilon", 0.001, "Added to the variance."),
            pBool("center", true, "Learn beta."), pBool("scale", true, "Learn gamma.")},
           [](LoweringBuilder& b) { return lowerNorm(b, false); }});
  add(cb,
      {"GroupNormalization",
       "normalization",
       "Splits the channels (axis 1, or the last) into groups and normalizes each group over its "
       "channels and all positions, per sample, then scales and shifts each channel. "
       "Independent of the batch size, so it suits small batches; groups = channels is "
       "instance normalization, groups = 1 layer normalization over (C, ...). Lowers to "
       "Reshape, ReduceMean and elementwise ops (ONNX's GroupNormalization needs opset 18).",
       {in()},
       {out()},
       {pInt("groups", 32, "Number of groups; must divide the channels."),
        pInt("axis", 1, "The channel axis: 1 (ONNX layout) or -1 (channels last, Keras')."),
        pFloat("epsilon", 0.001, "Added to the variance."), pBool("center", true, "Learn beta."),
        pBool("scale", true, "Learn gamma.")},
       lowerGroupNorm});
  add(cb, {"RMSNormalization",
           "normalization",
           "Root-mean-square normalization, as in LLaMA-style transformers: x divided by "
           "sqrt(mean(x^2) + epsilon) over one axis, times a learned scale (no centering, no "
           "bias). Lowers to ReduceMean and elementwise ops (ONNX's RMSNormalization needs "
           "opset 23).",
           {in()},
           {out()},
           {pInt("axis", -1, "The normalized axis."),
            pFloat("epsilon", 1e-6, "Added to the mean square.")},
           lowerRmsNorm});
}

}  // namespace dw::layers
