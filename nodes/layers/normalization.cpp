// The normalization layers of deepwire.layers: BatchNormalization and LayerNormalization.
#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

Status lowerNorm(LoweringBuilder& b, bool batch) {
  auto dims = b.staticDims(0, "a normalization needs the normalized axis' size");
  if (!dims.ok()) return dims.status();
  const int64_t rank = static_cast<int64_t>(dims->size());
  int64_t axis = intParam(b, "axis");
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    return b.fail("axis is out of range for a rank-" + std::to_string(rank) + " input");
  const int64_t c = (*dims)[axis];
  if (c <= 0) return b.fail("the size of axis " + std::to_string(axis) + " is unknown");
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
  std::vector<int64_t> shape(dims->begin() + axis, dims->end());
  for (int64_t d : shape)
    if (d <= 0) return b.fail("LayerNormalization needs static sizes from axis on");
  const auto gamma =
      scale ? b.weight("gamma", shape, ones) : b.weight("gamma", shape, ones, "Constant");
  std::vector<std::string> ins = {b.input(0), gamma};
  if (center) ins.push_back(b.weight("beta", shape, zeros));
  b.op1("LayerNormalization", ins,
        {attrInt("axis", axis),
         attrFloat("epsilon", static_cast<float>(b.param("epsilon").asFloat()))},
        b.outputName(0));
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
}

}  // namespace dw::layers
