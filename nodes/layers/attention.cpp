// The attention layers of deepwire.layers: Attention (Luong), AdditiveAttention (Bahdanau),
// MultiHeadAttention, and RotaryEmbedding for the queries and keys of a transformer block.
#include <cmath>
#include <cstring>

#include "nodes/layers/common.h"

namespace dw::layers {

namespace {

// Scaled dot-product attention core: softmax(q k^T * scale) v, batched over leading axes.
std::string attend(LoweringBuilder& b, const std::string& q, const std::string& k,
                   const std::string& v, const std::string& scale, int64_t rank,
                   const std::string& out) {
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i;
  std::swap(perm[rank - 1], perm[rank - 2]);
  auto scores = b.op1("MatMul", {q, b.op1("Transpose", {k}, {attrInts("perm", perm)})});
  if (!scale.empty()) scores = b.op1("Mul", {scores, scale});
  const auto weights = b.op1("Softmax", {scores}, {attrInt("axis", -1)});
  return b.op1("MatMul", {weights, v}, {}, out);
}

Status lowerAttention(LoweringBuilder& b) {
  const std::string q = b.input(0), v = b.input(1), k = b.input(2).empty() ? v : b.input(2);
  std::string scale;
  if (b.param("use_scale").asBool()) {
    WeightFill one;
    one.fill = "ones";
    scale = b.weight("scale", {}, one);
  }
  attend(b, q, k, v, scale, 3, b.outputName(0));
  return Status();
}

Status lowerAdditiveAttention(LoweringBuilder& b) {
  auto dims = b.staticDims(0, "AdditiveAttention needs the feature size");
  if (!dims.ok()) return dims.status();
  if (dims->size() != 3 || dims->back() <= 0)
    return b.fail("expects query (batch, Tq, dim) with a known dim");
  const std::string q = b.input(0), v = b.input(1), k = b.input(2).empty() ? v : b.input(2);
  // scores[b, i, j] = sum_d scale[d] * tanh(q[b, i, d] + k[b, j, d])
  const auto sum = b.op1("Add", {b.unsqueeze(q, {2}), b.unsqueeze(k, {1})});
  std::string t = b.op1("Tanh", {sum});
  if (b.param("use_scale").asBool()) {
    WeightFill f = fillFor(b, "kernel_initializer");
    t = b.op1("Mul", {t, b.weight("scale", {dims->back()}, f)});
  }
  const auto scores = b.reduce("ReduceSum", t, {-1}, false);
  const auto weights = b.op1("Softmax", {scores}, {attrInt("axis", -1)});
  b.op1("MatMul", {weights, v}, {}, b.outputName(0));
  return Status();
}

// Multi-head attention: per-head projections, scaled dot products, and an output projection.
Status lowerMultiHeadAttention(LoweringBuilder& b) {
  auto qd = b.staticDims(0, "MultiHeadAttention needs the query's feature size");
  auto vd = b.staticDims(1, "MultiHeadAttention needs the value's feature size");
  if (!qd.ok()) return qd.status();
  if (!vd.ok()) return vd.status();
  if (qd->size() != 3 || vd->size() != 3)
    return b.fail("query and value must be (batch, time, features)");
  const int64_t heads = intParam(b, "num_heads"), kdim = intParam(b, "key_dim");
  const int64_t vdim = intParam(b, "value_dim") > 0 ? intParam(b, "value_dim") : kdim;
  const int64_t dq = qd->back(), dv = vd->back();
  if (heads <= 0 || kdim <= 0 || dq <= 0 || dv <= 0)
    return b.fail("num_heads, key_dim and feature sizes must be positive");
  std::string kIn = b.input(2).empty() ? b.input(1) : b.input(2);
  int64_t dk = dv;
  if (!b.input(2).empty()) {
    auto kd = b.staticDims(2, "MultiHeadAttention needs the key's feature size");
    if (!kd.ok()) return kd.status();
    dk = kd->back();
  }
  const bool bias = b.param("use_bias").asBool();
  WeightFill kf = fillFor(b, "kernel_initializer");
  kf.fanInFirst = true;
  auto project = [&](const std::string& x, int64_t in, int64_t width, const std::string& name) {
    auto y = b.op1("MatMul", {x, b.weight(name + "_kernel", {in, heads * width}, kf)});
    if (bias)
      y = b.op1("Add",
                {y, b.weight(name + "_bias", {heads * width}, fillFor(b, "bias_initializer"))});
    // (N, T, heads*width) -> (N, heads, T, width)
    y = b.op1("Reshape", {y, b.int64s(name + "_heads", {0, 0, heads, width})});
    return b.op1("Transpose", {y}, {attrInts("perm", {0, 2, 1, 3})});
  };
  const auto q = project(b.input(0), dq, kdim, "query");
  const auto k = project(kIn, dk, kdim, "key");
  const auto v = project(b.input(1), dv, vdim, "value");
  const auto ctx = attend(b, q, k, v, b.floatScalar("scale", 1.0f / std::sqrt(float(kdim))), 4, "");
  const auto merged = b.op1("Reshape", {b.op1("Transpose", {ctx}, {attrInts("perm", {0, 2, 1, 3})}),
                                        b.int64s("merge", {0, 0, heads * vdim})});
  const int64_t outDim = intParam(b, "output_dim") > 0 ? intParam(b, "output_dim") : dq;
  auto y = b.op1("MatMul", {merged, b.weight("output_kernel", {heads * vdim, outDim}, kf)}, {},
                 bias ? "" : b.outputName(0));
  if (bias)
    b.op1("Add", {y, b.weight("output_bias", {outDim}, fillFor(b, "bias_initializer"))}, {},
          b.outputName(0));
  return Status();
}

// Rotary position embedding (RoFormer; keras_hub's RotaryEmbedding): the feature axis splits
// into halves x1, x2, and position p turns each pair (x1[i], x2[i]) by the angle
// p * scaling^-1 * max_wavelength^(-2i / d): y = x cos + [-x2, x1] sin. With a static sequence
// length, cos and sin are tables computed here (float64, stored as float); otherwise the graph
// computes them from the input's length each run. Either is shaped to broadcast over every axis
// but the sequence and feature ones.
Status lowerRotaryEmbedding(LoweringBuilder& b) {
  auto dims = b.staticDims(0, "RotaryEmbedding needs the sequence and feature sizes");
  if (!dims.ok()) return dims.status();
  const int64_t rank = static_cast<int64_t>(dims->size());
  int64_t seqAxis = intParam(b, "sequence_axis"), featAxis = intParam(b, "feature_axis");
  if (seqAxis < 0) seqAxis += rank;
  if (featAxis < 0) featAxis += rank;
  if (seqAxis < 0 || seqAxis >= rank || featAxis < 0 || featAxis >= rank || seqAxis == featAxis)
    return b.fail("sequence_axis and feature_axis must be two different axes of the rank-" +
                  std::to_string(rank) + " input");
  const int64_t seq = (*dims)[seqAxis], d = (*dims)[featAxis];
  if (d <= 0) return b.fail("the feature size must be static");
  if (d % 2) return b.fail("the feature size " + std::to_string(d) + " must be even");
  const double wavelength = b.param("max_wavelength").asFloat(),
               scaling = b.param("scaling_factor").asFloat();
  if (!(wavelength > 0) || !(scaling > 0))
    return b.fail("max_wavelength and scaling_factor must be positive");
  std::vector<int64_t> tableDims(rank, 1);
  tableDims[seqAxis] = seq > 0 ? seq : -1;
  tableDims[featAxis] = d;
  auto floats = [&](const std::string& suffix, const std::vector<float>& v,
                    const std::vector<int64_t>& shape) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t dim : shape) t.add_dims(dim);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    return b.constant(suffix, t);
  };
  std::string cosT, sinT;
  if (seq > 0) {
    // Table element (p, j) in the row-major order of tableDims.
    const int64_t seqStride = seqAxis < featAxis ? d : 1, featStride = seqAxis < featAxis ? 1 : seq;
    std::vector<float> c(seq * d), sn(seq * d);
    for (int64_t p = 0; p < seq; ++p)
      for (int64_t j = 0; j < d; ++j) {
        const int64_t i = j % (d / 2);
        const double angle = p / scaling * std::pow(wavelength, -2.0 * i / d);
        c[p * seqStride + j * featStride] = static_cast<float>(std::cos(angle));
        sn[p * seqStride + j * featStride] = static_cast<float>(std::sin(angle));
      }
    cosT = floats("cos", c, tableDims);
    sinT = floats("sin", sn, tableDims);
  } else {
    // A sequence of any length: the angles from the positions the input has, each run.
    std::vector<float> inverse(d);
    for (int64_t j = 0; j < d; ++j)
      inverse[j] = static_cast<float>(std::pow(wavelength, -2.0 * (j % (d / 2)) / d) / scaling);
    auto scalar = [&](const std::string& suffix, int64_t v) {  // Range takes 0-D bounds
      onnx::TensorProto t;
      t.set_data_type(onnx::TensorProto::INT64);
      t.set_raw_data(std::string(reinterpret_cast<const char*>(&v), 8));
      return b.constant(suffix, t);
    };
    const auto length =
        b.op1("Gather", {b.op1("Shape", {b.input(0)}), scalar("seq_axis", seqAxis)});
    const auto positions = b.op1(
        "Cast", {b.op1("Range", {scalar("first_position", 0), length, scalar("position_step", 1)})},
        {attrInt("to", onnx::TensorProto::FLOAT)});
    std::string angles = b.op1("Mul", {b.op1("Reshape", {positions, b.int64s("column", {-1, 1})}),
                                       floats("inverse_frequencies", inverse, {d})});
    if (seqAxis > featAxis) angles = b.op1("Transpose", {angles}, {attrInts("perm", {1, 0})});
    const auto shape = b.int64s("table_shape", tableDims);
    cosT = b.op1("Reshape", {b.op1("Cos", {angles}), shape});
    sinT = b.op1("Reshape", {b.op1("Sin", {angles}), shape});
  }
  const std::string x = b.input(0);
  const auto begin = b.int64s("half_begin", {0}), middle = b.int64s("half_middle", {d / 2}),
             end = b.int64s("half_end", {d}), axes = b.int64s("feature_axis", {featAxis});
  const auto x1 = b.op1("Slice", {x, begin, middle, axes});
  const auto x2 = b.op1("Slice", {x, middle, end, axes});
  const auto turned = b.op1("Concat", {b.op1("Neg", {x2}), x1}, {attrInt("axis", featAxis)});
  b.op1("Add", {b.op1("Mul", {x, cosT}), b.op1("Mul", {turned, sinT})}, {}, b.outputName(0));
  return Status();
}

}  // namespace

void addAttention(CatalogueBuilder& cb) {
  const std::vector<PortSpec> qvk = {
      port("query", "Query (batch, Tq, dim)."), port("value", "Value (batch, Tv, dim)."),
      port("key", "Key (batch, Tv, dim); defaults to value.", PortOption::Optional)};
  add(cb, {"Attention",
           "attention",
           "Dot-product (Luong) attention: softmax(query . key^T) . value. Lowers to MatMul, "
           "Softmax, MatMul.",
           qvk,
           {out()},
           {pBool("use_scale", false, "Learn a scalar that scales the scores.")},
           lowerAttention});
  add(cb, {"AdditiveAttention",
           "attention",
           "Additive (Bahdanau) attention: scores = sum(scale * tanh(query + key)).",
           qvk,
           {out()},
           {pBool("use_scale", true, "Learn a per-feature scale."),
            initParam("kernel_initializer", "glorot_uniform", "scale"),
            pFloat("initializer_value", 0.0, "Value used by the 'constant' initializer."),
            pInt("seed", 0, "Seed of the initializer.")},
           lowerAdditiveAttention});
  {
    std::vector<ParamSpec> v = {pInt("num_heads", 2, "Number of attention heads."),
                                pInt("key_dim", 16, "Size of each head for query and key."),
                                pInt("value_dim", 0, "Size of each head for value (0: key_dim)."),
                                pInt("output_dim", 0, "Output feature size (0: the query's).")};
    auto w = weightParams();
    v.insert(v.end(), w.begin(), w.end());
    add(cb, {"MultiHeadAttention",
             "attention",
             "Multi-head attention as in 'Attention is all you need'. Lowers to MatMul, Reshape, "
             "Transpose and Softmax.",
             qvk,
             {out()},
             v,
             lowerMultiHeadAttention});
  }
  add(cb, {"RotaryEmbedding",
           "attention",
           "Rotary position embedding (RoPE) for a transformer block's queries and keys: each "
           "position turns the pairs of the feature axis' two halves by angles that grow with "
           "the position, so that attention scores depend on relative positions. Apply it to "
           "(batch, sequence, features) or (batch, sequence, heads, head size) before the "
           "attention; any sequence length. No weights; lowers to Slice, Concat and "
           "elementwise ops with cos and sin tables (computed from the length where it varies).",
           {in()},
           {out()},
           {pFloat("max_wavelength", 10000, "The longest wavelength of the angles."),
            pFloat("scaling_factor", 1.0, "Positions are divided by it (context extension)."),
            pInt("sequence_axis", 1, "The position axis."),
            pInt("feature_axis", -1, "The rotated axis (even size).")},
           lowerRotaryEmbedding});
}

}  // namespace dw::layers
