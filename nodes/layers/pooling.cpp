// The pooling layers of deepwire.layers: MaxPool, AvgPool and their Global forms, 1-D to 3-D.
#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

Status lowerPool(LoweringBuilder& b, size_t nd, bool max) {
  auto rank = b.rankOf(0);
  if (!rank.ok()) return rank.status();
  if (*rank != static_cast<int64_t>(nd) + 2)
    return b.fail("expects a rank-" + std::to_string(nd + 2) + " input (N, C, spatial...)");
  auto k = spatial(b, "pool_size", nd);
  if (!k.ok()) return k.status();
  std::vector<int64_t> strides = b.param("strides").asInts();
  if (strides.empty())
    strides = *k;  // Keras: strides default to pool_size
  else if (strides.size() == 1)
    strides.assign(nd, strides[0]);
  if (strides.size() != nd) return b.fail("strides needs 1 or " + std::to_string(nd) + " values");
  std::vector<onnx::AttributeProto> attrs = {attrInts("kernel_shape", *k),
                                             attrInts("strides", strides)};
  if (strParam(b, "padding") == "same") attrs.push_back(attrString("auto_pad", "SAME_UPPER"));
  b.op1(max ? "MaxPool" : "AveragePool", {b.input(0)}, attrs, b.outputName(0));
  return Status();
}

Status lowerGlobalPool(LoweringBuilder& b, size_t nd, bool max) {
  auto rank = b.rankOf(0);
  if (!rank.ok()) return rank.status();
  const bool last = strParam(b, "data_format") == "channels_last";
  if (*rank != static_cast<int64_t>(nd) + 2)
    return b.fail("expects a rank-" + std::to_string(nd + 2) + " input " +
                  (last ? "(N, spatial..., C)" : "(N, C, spatial...)"));
  if (last) {
    // (N, steps, features) as Keras and the attention layers lay sequences out: a reduction
    // over the axes between the batch and the features.
    std::vector<int64_t> axes;
    for (size_t a = 1; a <= nd; ++a) axes.push_back(static_cast<int64_t>(a));
    b.reduce(max ? "ReduceMax" : "ReduceMean", b.input(0), axes, b.param("keepdims").asBool(),
             b.outputName(0));
  } else if (b.param("keepdims").asBool()) {
    b.op1(max ? "GlobalMaxPool" : "GlobalAveragePool", {b.input(0)}, {}, b.outputName(0));
  } else {
    const auto pooled = b.op1(max ? "GlobalMaxPool" : "GlobalAveragePool", {b.input(0)});
    b.op1("Flatten", {pooled}, {attrInt("axis", 1)}, b.outputName(0));
  }
  return Status();
}

// Capture-less lambdas convert to LowerFn; these adapt the parameterized lowerings.
template <size_t N, bool M>
Status pool(LoweringBuilder& b) {
  return lowerPool(b, N, M);
}
template <size_t N, bool M>
Status gpool(LoweringBuilder& b) {
  return lowerGlobalPool(b, N, M);
}

}  // namespace

void addPooling(CatalogueBuilder& cb, size_t nd) {
  const std::vector<ParamSpec> poolParams = {
      pInts("pool_size", {2}, "Window size: one value or one per axis."),
      pInts("strides", {}, "Strides (empty: pool_size)."),
      pStr("padding", "valid", "valid or same.", {"valid", "same"})};
  const std::vector<ParamSpec> gpoolParams = {
      pBool("keepdims", false, "Keep the spatial axes (as size 1)."),
      pStr("data_format", "channels_first",
           "channels_first: (N, C, spatial...), the ONNX layout the convolutions use; "
           "channels_last: (N, spatial..., C), as sequences are for the attention and recurrent "
           "layers (Keras' default).",
           {"channels_first", "channels_last"})};
  LowerFn pools[2][4] = {{nullptr, pool<1, false>, pool<2, false>, pool<3, false>},
                         {nullptr, pool<1, true>, pool<2, true>, pool<3, true>}};
  LowerFn gpools[2][4] = {{nullptr, gpool<1, false>, gpool<2, false>, gpool<3, false>},
                          {nullptr, gpool<1, true>, gpool<2, true>, gpool<3, true>}};
  const std::string dn = dimsName(nd);
  add(cb, {"MaxPool" + dn,
           "pooling",
           "Max pooling over " + dn + " windows. Lowers to MaxPool.",
           {in()},
           {out()},
           poolParams,
           pools[1][nd],
           {"MaxPooling" + dn}});
  add(cb, {"AvgPool" + dn,
           "pooling",
           "Average pooling over " + dn + " windows (padding not counted). Lowers to AveragePool.",
           {in()},
           {out()},
           poolParams,
           pools[0][nd],
           {"AveragePooling" + dn}});
  add(cb, {"GlobalMaxPool" + dn,
           "pooling",
           "Maximum over all " + dn + " spatial positions. Lowers to GlobalMaxPool.",
           {in()},
           {out()},
           gpoolParams,
           gpools[1][nd],
           {"GlobalMaxPooling" + dn}});
  add(cb, {"GlobalAvgPool" + dn,
           "pooling",
           "Mean over all " + dn + " spatial positions. Lowers to GlobalAveragePool.",
           {in()},
           {out()},
           gpoolParams,
           gpools[0][nd],
           {"GlobalAveragePooling" + dn}});
}

}  // namespace dw::layers
