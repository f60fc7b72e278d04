// The reshaping layers of deepwire.layers that only move data: Flatten, Reshape, Permute3D and
// Split (the spatial ones, padding, cropping and upsampling, are in convolution.cpp).
#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

Status lowerFlatten(LoweringBuilder& b) {
  b.op1("Flatten", {b.input(0)}, {attrInt("axis", 1)}, b.outputName(0));
  return Status();
}

Status lowerReshape(LoweringBuilder& b) {
  std::vector<int64_t> shape = {0};  // keep the batch axis
  const Param target = b.param("target_shape");
  for (int64_t d : target.asInts()) shape.push_back(d);
  b.op1("Reshape", {b.input(0), b.int64s("shape", shape)}, {}, b.outputName(0));
  return Status();
}

Status lowerPermute(LoweringBuilder& b) {
  std::vector<int64_t> perm = {0};
  const Param dims = b.param("dims");
  for (int64_t d : dims.asInts()) perm.push_back(d);
  b.op1("Transpose", {b.input(0)}, {attrInts("perm", perm)}, b.outputName(0));
  return Status();
}

}  // namespace

void addReshaping(CatalogueBuilder& cb) {
  add(cb, {"Flatten",
           "reshaping",
           "Flattens all axes but the batch axis. Lowers to Flatten.",
           {in()},
           {out()},
           {},
           lowerFlatten});
  add(cb, {"Reshape",
           "reshaping",
           "Reshapes all axes but the batch axis to target_shape "
           "(-1 infers one axis). Lowers to Reshape.",
           {in()},
           {out()},
           {pInts("target_shape", {-1}, "The new shape, without the batch axis.")},
           lowerReshape});
  add(cb, {"Permute3D",
           "reshaping",
           "Permutes the three non-batch axes of a rank-4 input; dims "
           "are 1-based, as in Keras. Lowers to Transpose.",
           {in()},
           {out()},
           {pInts("dims", {2, 1, 3}, "Permutation of axes 1, 2, 3.")},
           lowerPermute});
}

namespace {

Status lowerSplit(LoweringBuilder& b) {
  const int64_t n = intParam(b, "num_or_size_splits");
  if (n <= 0) return b.fail("num_or_size_splits must be positive");
  std::vector<std::string> outs;
  for (int64_t i = 0; i < n; ++i) outs.push_back(b.outputName(static_cast<int>(i)));
  std::vector<onnx::AttributeProto> attrs = {attrInt("axis", intParam(b, "axis"))};
  // Opset 18's Split wants the count said (num_outputs) when no sizes are given.
  if (b.opset() >= 18) attrs.push_back(attrInt("num_outputs", n));
  b.op("Split", {b.input(0)}, std::move(attrs), outs);
  return Status();
}

}  // namespace

void addSplit(CatalogueBuilder& cb) {
  {
    LayerDef split{
        "Split",
        "reshaping",
        "Splits the input into equal parts along an axis. Lowers to Split.",
        {in()},
        {},
        {pInt("num_or_size_splits", 2, "Number of equal parts."), pInt("axis", -1, "Split axis.")},
        lowerSplit};
    split.outputs = {port("outputs", "The parts.", PortOption::Variadic)};
    add(cb, std::move(split));
  }
}

}  // namespace dw::layers
