// The attention layers of deepwire.layers: Attention (Luong), AdditiveAttention (Bahdanau) and
// MultiHeadAttention.
#include <cmath>

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
  const auto sum = b.op1("Add", {b.op1("Unsqueeze", {q, b.int64s("q_axis", {2})}),
                                 b.op1("Unsqueeze", {k, b.int64s("k_axis", {1})})});
  std::string t = b.op1("Tanh", {sum});
  if (b.param("use_scale").asBool()) {
    WeightFill f = fillFor(b, "kernel_initializer");
    t = b.op1("Mul", {t, b.weight("scale", {dims->back()}, f)});
  }
  const auto scores = b.op1("ReduceSum", {t, b.int64s("sum_axis", {-1})}, {attrInt("keepdims", 0)});
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
}

}  // namespace dw::layers
