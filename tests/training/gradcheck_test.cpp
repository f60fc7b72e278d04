// Finite-difference gradient checks: one parameterized test over every op with a gradient
// builder. Each case builds a one-op model, adds loss = ReduceSum(Y * R) with a fixed random R,
// builds the gradient graph, and compares every element of every differentiable input's
// gradient with a central difference of the loss (float64 where the kernels allow).
//
// How to add an op: append a GradCase to cases() below with the op, its inputs (shape, value
// range, whether differentiable) and attributes; use dtype float when a kernel is float-only.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <functional>
#include <random>

#include "engine/session.h"
#include "engine/tensor.h"
#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"
#include "grad_catalogue_util.h"
#include "gradcheck_util.h"
#include "nodes/catalogue.h"

namespace {

using namespace dw::engine;
using namespace dw::engine::training;

struct In {
  std::vector<int64_t> shape;
  double lo = -1, hi = 1;
  bool diff = true;            // a trainable input checked by finite differences
  bool awayFromZero = false;   // |v| >= 0.2: keeps kinks (Relu, Abs) out of the differences
  int32_t type = 0;            // 0: the case's dtype; else an ONNX type (int64 labels/indices)
  std::vector<double> values;  // fixed values instead of random ones
};

struct GradCase {
  std::string name;
  std::string op;
  std::vector<In> inputs;
  std::vector<onnx::AttributeProto> attrs;
  bool dbl = true;
  int opset = 17;
  int outputs = 1;  // forward outputs; the loss uses output `lossOutput`
  int lossOutput = 0;
  bool training = true;
  bool distinct = false;  // values must be pairwise distinct (max pooling, Max/Min)
  std::string domain;     // the op's, where it is not ai.onnx (imported at version 1)
};

std::ostream& operator<<(std::ostream& os, const GradCase& c) {
  return os << c.name;
}

int64_t count(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::vector<double> randomValues(const In& in, int64_t n, std::mt19937& rng, bool distinct) {
  if (!in.values.empty()) return in.values;
  std::uniform_real_distribution<double> u(in.lo, in.hi);
  std::vector<double> v(n);
  for (auto& x : v) {
    x = u(rng);
    if (in.awayFromZero) {
      std::uniform_real_distribution<double> m(0.2, 1.0);
      x = (x < (in.lo + in.hi) / 2 ? -1 : 1) * m(rng);
    }
  }
  if (distinct) {
    // A shuffled ramp: maxima are unique and well separated.
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    for (int64_t i = 0; i < n; ++i) v[i] = in.lo + (in.hi - in.lo) * (idx[i] + 0.5) / n;
  }
  return v;
}

struct Built {
  onnx::ModelProto model;
  std::vector<std::string> trainable;
  std::map<std::string, Tensor> values;  // trainable values
};

// The op's model with loss = ReduceSum(Y * R).
Built buildModel(const GradCase& c, const std::vector<int64_t>& yShape, std::mt19937& rng) {
  const int32_t ft = c.dbl ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
  Built b;
  auto* n = test::singleOpModel(b.model, c.opset, c.name, c.op, "op");
  if (!c.domain.empty()) {
    n->set_domain(c.domain);
    auto* imp = b.model.add_opset_import();
    imp->set_domain(c.domain);
    imp->set_version(1);
  }
  auto* g = b.model.mutable_graph();
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    const std::string name = "in" + std::to_string(i);
    const int32_t t = in.type ? in.type : ft;
    auto vals = randomValues(in, count(in.shape), rng, c.distinct && in.diff);
    *g->add_initializer() = test::makeTensor(name, t, in.shape, vals);
    if (in.diff) b.trainable.push_back(name);
    n->add_input(name);
  }
  for (int o = 0; o < c.outputs; ++o) n->add_output("y" + std::to_string(o));
  for (const auto& a : c.attrs) *n->add_attribute() = a;
  {
    std::normal_distribution<double> nd(0, 1);
    std::vector<double> r(count(yShape));
    for (auto& x : r) x = nd(rng);
    *g->add_initializer() = test::makeTensor("R", ft, yShape, r);
  }
  test::addWeightedSum(g, "y" + std::to_string(c.lossOutput), "R", "loss", "loss_");
  test::addLossOutput(g, ft);
  return b;
}

// Y's shape: run the bare op once.
std::vector<int64_t> forwardShape(GradCase c) {
  std::mt19937 rng(7);
  Built b = buildModel(c, {}, rng);
  auto* g = b.model.mutable_graph();
  // Drop the loss nodes and R; expose Y.
  g->mutable_node()->DeleteSubrange(1, 2);
  g->mutable_initializer()->RemoveLast();
  g->clear_output();
  g->add_output()->set_name("y" + std::to_string(c.lossOutput));
  auto s = InferenceSession::create(b.model);
  if (!s.ok()) {
    ADD_FAILURE() << "forward session: " << s.message();
    return {};
  }
  auto r = (*s)->run({});
  if (!r.ok()) {
    ADD_FAILURE() << "forward run: " << r.message();
    return {};
  }
  return r->begin()->second.shape();
}

std::vector<GradCase> cases() {
  std::vector<GradCase> v;
  const In x23{{2, 3}};
  auto unary = [&](const std::string& op, In in = In{{2, 3}},
                   std::vector<onnx::AttributeProto> attrs = {}) {
    v.push_back({op, op, {in}, attrs});
  };
  In kink{{2, 3}};
  kink.awayFromZero = true;
  In pos{{2, 3}, 0.5, 2.0};
  In unit{{2, 3}, -0.8, 0.8};
  // Elementwise arithmetic, with broadcasting.
  v.push_back({"Add", "Add", {In{{2, 3}}, In{{3}}}});
  v.push_back({"Sub", "Sub", {In{{2, 1}}, In{{2, 3}}}});
  v.push_back({"Mul", "Mul", {In{{2, 3}}, In{{1, 3}}}});
  v.push_back({"Div", "Div", {In{{2, 3}}, In{{3}, 0.5, 2.0}}});
  v.push_back({"Pow", "Pow", {In{{2, 3}, 0.5, 2.0}, In{{2, 3}, 0.5, 2.0}}});
  unary("Neg");
  unary("Identity");
  unary("Relu", kink);
  unary("LeakyRelu", kink, {attrF("alpha", 0.1f)});
  unary("Sigmoid");
  unary("Tanh");
  unary("Elu", kink, {attrF("alpha", 0.7f)});
  unary("Selu", kink);
  unary("Celu", kink, {attrF("alpha", 1.3f)});
  unary("ThresholdedRelu", In{{2, 3}, 1.3, 2.0}, {attrF("alpha", 1.0f)});
  unary("Softplus");
  unary("Softsign", kink);
  unary("HardSigmoid", In{{2, 3}, -2.0, 2.0});
  unary("HardSwish", In{{2, 3}, -2.0, 2.0});
  unary("Mish");
  v.back().opset = 18;  // Mish's first opset
  unary("Erf");
  unary("Exp");
  unary("Log", pos);
  unary("Sqrt", pos);
  unary("Abs", kink);
  unary("Reciprocal", pos);
  unary("Sin");
  unary("Cos");
  unary("Tan", unit);
  unary("Asin", unit);
  unary("Acos", unit);
  unary("Atan");
  unary("Sinh");
  unary("Cosh");
  unary("Asinh");
  unary("Acosh", In{{2, 3}, 1.5, 3.0});
  unary("Atanh", unit);
  {
    In lo{{}, 0, 0, false};
    lo.values = {-0.5};
    In hi{{}, 0, 0, false};
    hi.values = {0.5};
    In xin{{3, 4}, -1, 1};
    v.push_back({"Clip", "Clip", {xin, lo, hi}});
    v.back().inputs[0].values = {-0.9, -0.7, -0.3, -0.1, 0.1, 0.2, 0.3, 0.4, 0.7, 0.8, -0.6, 0.0};
  }
  v.push_back({"PRelu", "PRelu", {kink, In{{3}, 0.1, 0.5}}});
  // Softmax family and losses.
  v.push_back({"Softmax", "Softmax", {In{{2, 3, 4}}}, {attrI("axis", 1)}});
  v.push_back({"Softmax_legacy", "Softmax", {In{{2, 3, 4}}}, {attrI("axis", 1)}, true, 11});
  v.push_back({"LogSoftmax", "LogSoftmax", {In{{3, 5}}}});
  {
    In labels{{4}, 0, 0, false};
    labels.type = onnx::TensorProto::INT64;
    labels.values = {1, 0, 4, 2};
    v.push_back({"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss", {In{{4, 5}}, labels}});
    v.back().outputs = 1;
    In w{{5}, 0.5, 1.5, false};
    v.push_back({"SoftmaxCrossEntropyLoss_weighted_sum",
                 "SoftmaxCrossEntropyLoss",
                 {In{{4, 5}}, labels, w},
                 {attrS("reduction", "sum")}});
    v.push_back({"SoftmaxCrossEntropyLoss_ignore",
                 "SoftmaxCrossEntropyLoss",
                 {In{{4, 5}}, labels},
                 {attrI("ignore_index", 4)}});
    In l3{{2, 3}, 0, 0, false};
    l3.type = onnx::TensorProto::INT64;
    l3.values = {1, 0, 3, 2, 2, 1};
    v.push_back({"SoftmaxCrossEntropyLoss_none_3d",
                 "SoftmaxCrossEntropyLoss",
                 {In{{2, 4, 3}}, l3},
                 {attrS("reduction", "none")}});
    v.push_back({"NegativeLogLikelihoodLoss", "NegativeLogLikelihoodLoss", {In{{4, 5}}, labels}});
    v.push_back({"NegativeLogLikelihoodLoss_weighted",
                 "NegativeLogLikelihoodLoss",
                 {In{{4, 5}}, labels, w}});
  }
  // Matrix products (float: the oneDNN matmul).
  v.push_back({"Gemm", "Gemm", {In{{3, 4}}, In{{4, 2}}, In{{2}}}, {}, false});
  v.push_back({"CastLike", "CastLike", {In{{2, 3}}, In{{2, 3}, -1, 1, false}}});
  v.push_back({"Gemm_trans",
               "Gemm",
               {In{{4, 3}}, In{{2, 4}}, In{{3, 2}}},
               {attrI("transA", 1), attrI("transB", 1), attrF("alpha", 0.7f), attrF("beta", 1.5f)},
               false});
  v.push_back({"MatMul", "MatMul", {In{{3, 4}}, In{{4, 2}}}, {}, false});
  v.push_back({"MatMul_batched", "MatMul", {In{{2, 3, 4}}, In{{4, 2}}}, {}, false});
  v.push_back({"MatMul_vector", "MatMul", {In{{4}}, In{{2, 4, 3}}}, {}, false});
  // Shapes and data movement.
  v.push_back({"Flatten", "Flatten", {In{{2, 3, 2}}}, {attrI("axis", 1)}});
  {
    In shape{{2}, 0, 0, false};
    shape.type = onnx::TensorProto::INT64;
    shape.values = {3, 2};
    v.push_back({"Reshape", "Reshape", {x23, shape}});
    In axes{{1}, 0, 0, false};
    axes.type = onnx::TensorProto::INT64;
    axes.values = {1};
    v.push_back({"Squeeze", "Squeeze", {In{{2, 1, 3}}, axes}});
    v.push_back({"Unsqueeze", "Unsqueeze", {x23, axes}});
    In eshape{{3}, 0, 0, false};
    eshape.type = onnx::TensorProto::INT64;
    eshape.values = {2, 2, 3};
    v.push_back({"Expand", "Expand", {In{{1, 3}}, eshape}});
  }
  v.push_back({"Transpose", "Transpose", {In{{2, 3, 4}}}, {attrInts("perm", {2, 0, 1})}});
  v.push_back({"Cast", "Cast", {x23}, {attrI("to", onnx::TensorProto::DOUBLE)}});
  v.push_back({"Concat", "Concat", {In{{2, 3}}, In{{2, 2}}, In{{2, 1}}}, {attrI("axis", 1)}});
  {
    In split{{2}, 0, 0, false};
    split.type = onnx::TensorProto::INT64;
    split.values = {1, 3};
    v.push_back({"Split", "Split", {In{{2, 4}}, split}, {attrI("axis", 1)}, true, 17, 2, 1});
    auto mk = [](std::vector<double> vals) {
      In t{{static_cast<int64_t>(vals.size())}, 0, 0, false};
      t.type = onnx::TensorProto::INT64;
      t.values = vals;
      return t;
    };
    v.push_back({"Slice", "Slice", {In{{3, 5}}, mk({0, 1}), mk({2, 5}), mk({0, 1}), mk({1, 2})}});
    v.push_back(
        {"Slice_negative_step", "Slice", {In{{3, 5}}, mk({-1}), mk({-6}), mk({1}), mk({-2})}});
    v.push_back({"Gather", "Gather", {In{{4, 3}}, mk({0, 2, 0})}, {attrI("axis", 0)}});
    v.push_back({"Gather_axis1", "Gather", {In{{2, 4}}, mk({3, 1})}, {attrI("axis", 1)}});
    v.push_back({"Pad", "Pad", {In{{2, 3}}, mk({0, 1, 1, 2})}});
    v.push_back({"ReduceSum", "ReduceSum", {In{{2, 3, 4}}, mk({1})}});
  }
  {
    // Resize and Scan; resize_scan_gradcheck_test.cpp checks their modes in depth.
    In roi{{0}, 0, 0, false};
    roi.type = onnx::TensorProto::FLOAT;
    In scales{{4}, 0, 0, false};
    scales.type = onnx::TensorProto::FLOAT;
    scales.values = {1, 1, 2, 1.5};
    v.push_back({"Resize", "Resize", {In{{1, 2, 3, 2}}, roi, scales}, {attrS("mode", "linear")}});
    // Body: (s, x_t) -> (Tanh(s * x_t + s), that * x_t).
    onnx::AttributeProto body;
    body.set_name("body");
    body.set_type(onnx::AttributeProto::GRAPH);
    auto* g = body.mutable_g();
    g->set_name("step");
    for (const char* n : {"s", "x_t"}) {
      auto* i = g->add_input();
      i->set_name(n);
      i->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::DOUBLE);
    }
    auto node = [&](const char* op, std::vector<std::string> ins, const char* out) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->set_name(out);
      for (auto& i : ins) n->add_input(i);
      n->add_output(out);
    };
    node("Mul", {"s", "x_t"}, "p");
    node("Add", {"p", "s"}, "q");
    node("Tanh", {"q"}, "s_next");
    node("Mul", {"s_next", "x_t"}, "y");
    for (const char* n : {"s_next", "y"}) g->add_output()->set_name(n);
    v.push_back({"Scan",
                 "Scan",
                 {In{{3}}, In{{4, 3}}},
                 {body, attrI("num_scan_inputs", 1)},
                 true,
                 17,
                 2,
                 1});
    // Loop over the same step, 3 times: (i, cond, s) -> (cond, s_next, y).
    onnx::AttributeProto loopBody = body;
    auto* lg = loopBody.mutable_g();
    lg->set_name("loop_step");
    lg->mutable_input(0)->set_name("i");
    lg->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::INT64);
    lg->mutable_input(1)->set_name("cond");
    lg->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::BOOL);
    auto* si = lg->add_input();
    si->set_name("s");
    si->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::DOUBLE);
    for (auto& n : *lg->mutable_node())
      for (auto& i : *n.mutable_input())
        if (i == "x_t") i = "s";
    g = lg;
    node("Identity", {"cond"}, "cond_next");
    lg->clear_output();
    for (const char* n : {"cond_next", "s_next", "y"}) lg->add_output()->set_name(n);
    In trips{{}, 0, 0, false};
    trips.type = onnx::TensorProto::INT64;
    trips.values = {3};
    In go{{}, 0, 0, false};
    go.type = onnx::TensorProto::BOOL;
    go.values = {1};
    v.push_back({"Loop", "Loop", {trips, go, In{{3}}}, {loopBody}, true, 17, 2, 1});
  }
  for (const char* op : {"ReduceMean", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceL1",
                         "ReduceProd", "ReduceLogSum"})
    v.push_back(
        {op, op, {In{{2, 3, 4}, 0.3, 1.0}}, {attrInts("axes", {0, 2}), attrI("keepdims", 0)}});
  {
    // A product is linear in each factor, so exact zeros are safe for the differences: one
    // zero in the first row (its gradient is the others' product), two in the second (all 0).
    In x{{2, 3}};
    x.values = {0.5, 0.0, -1.5, 0.0, 2.0, 0.0};
    v.push_back({"ReduceProd_zeros", "ReduceProd", {x}, {attrInts("axes", {1})}});
  }
  v.push_back({"ReduceMax", "ReduceMax", {In{{2, 3, 4}}}, {attrInts("axes", {1})}});
  v.back().distinct = true;
  v.push_back({"ReduceMin", "ReduceMin", {In{{2, 3, 4}}}, {}});
  v.back().distinct = true;
  // Variadic and selection.
  v.push_back({"Sum", "Sum", {In{{2, 3}}, In{{3}}, In{{2, 3}}}});
  v.push_back({"Mean", "Mean", {In{{2, 3}}, In{{2, 3}}}});
  v.push_back({"Max", "Max", {In{{2, 3}}, In{{2, 3}}}});
  v.back().distinct = true;
  v.push_back({"Min", "Min", {In{{2, 3}}, In{{2, 3}}}});
  v.back().distinct = true;
  {
    In cond{{2, 3}, 0, 0, false};
    cond.type = onnx::TensorProto::BOOL;
    cond.values = {1, 0, 1, 1, 0, 0};
    v.push_back({"Where", "Where", {cond, In{{2, 3}}, In{{3}}}});
  }
  {
    In ratio{{}, 0, 0, false};
    ratio.values = {0.5};
    In mode{{}, 0, 0, false};
    mode.type = onnx::TensorProto::BOOL;
    mode.values = {1};
    v.push_back({"Dropout_training", "Dropout", {In{{4, 5}}, ratio, mode}, {attrI("seed", 3)}});
  }
  // Neural-network layers (float: oneDNN).
  v.push_back({"Conv",
               "Conv",
               {In{{2, 3, 5, 5}}, In{{4, 3, 3, 3}}, In{{4}}},
               {attrInts("pads", {1, 1, 1, 1}), attrInts("strides", {2, 2})},
               false});
  v.push_back(
      {"Conv_group", "Conv", {In{{1, 4, 4, 4}}, In{{4, 2, 2, 2}}}, {attrI("group", 2)}, false});
  v.push_back({"ConvTranspose",
               "ConvTranspose",
               {In{{1, 2, 3, 3}}, In{{2, 3, 3, 3}}, In{{3}}},
               {attrInts("strides", {2, 2}), attrInts("pads", {1, 1, 1, 1})},
               false});
  v.push_back({"MaxPool",
               "MaxPool",
               {In{{2, 2, 4, 4}}},
               {attrInts("kernel_shape", {2, 2}), attrInts("strides", {2, 2})},
               false});
  v.back().distinct = true;
  v.push_back({"MaxPool_ceil_pad",
               "MaxPool",
               {In{{1, 2, 5, 5}}},
               {attrInts("kernel_shape", {3, 3}), attrInts("strides", {2, 2}),
                attrInts("pads", {1, 1, 0, 0}), attrI("ceil_mode", 1)},
               false});
  v.back().distinct = true;
  // 2x2 / stride 2 with ceil_mode on odd planes: the last window of each row and column is
  // partial, and the gradient must not take the tiled 2x2 loops (they would read and write past
  // the plane, into the next one).
  v.push_back(
      {"MaxPool_2x2_ceil_odd",
       "MaxPool",
       {In{{2, 2, 5, 7}}},
       {attrInts("kernel_shape", {2, 2}), attrInts("strides", {2, 2}), attrI("ceil_mode", 1)},
       false});
  v.back().distinct = true;
  v.push_back({"AveragePool",
               "AveragePool",
               {In{{1, 2, 5, 5}}},
               {attrInts("kernel_shape", {3, 3}), attrInts("strides", {2, 2}),
                attrInts("pads", {1, 1, 1, 1})},
               false});
  v.push_back({"AveragePool_include_pad",
               "AveragePool",
               {In{{1, 2, 4, 4}}},
               {attrInts("kernel_shape", {3, 3}), attrInts("pads", {1, 1, 1, 1}),
                attrI("count_include_pad", 1)},
               false});
  v.push_back({"GlobalAveragePool", "GlobalAveragePool", {In{{2, 3, 3, 3}}}, {}, false});
  v.push_back({"GlobalMaxPool", "GlobalMaxPool", {In{{2, 3, 3, 3}}}, {}, false});
  v.back().distinct = true;
  {
    In mean{{3}, -0.2, 0.2, false};
    In var{{3}, 0.5, 1.5, false};
    v.push_back({"BatchNormalization_training",
                 "BatchNormalization",
                 {In{{4, 3, 2, 2}}, In{{3}, 0.5, 1.5}, In{{3}}, mean, var},
                 {},
                 false});
    v.push_back({"BatchNormalization_inference",
                 "BatchNormalization",
                 {In{{4, 3, 2}}, In{{3}, 0.5, 1.5}, In{{3}}, mean, var},
                 {},
                 false});
    v.back().training = false;
  }
  v.push_back({"LayerNormalization",
               "LayerNormalization",
               {In{{3, 4}}, In{{4}, 0.5, 1.5}, In{{4}}},
               {attrI("axis", -1)}});
  v.back().dbl = false;  // the function body computes its statistics in float
  // Scale and B broadcast over the two normalized axes: their gradients sum over the rest.
  v.push_back({"LayerNormalization_broadcast_scale",
               "LayerNormalization",
               {In{{2, 3, 4}}, In{{1, 4}, 0.5, 1.5}, In{{1}}},
               {attrI("axis", 1)}});
  v.back().dbl = false;
  // RMSNormalization (opset 23): its gradient is composed of ONNX ops, in float and double.
  v.push_back({"RMSNormalization",
               "RMSNormalization",
               {In{{3, 4}}, In{{4}, 0.5, 1.5}},
               {attrI("axis", -1)}});
  v.back().opset = 23;
  v.push_back({"RMSNormalization_broadcast_scale",
               "RMSNormalization",
               {In{{2, 3, 4}}, In{{1, 4}, 0.5, 1.5}},
               {attrI("axis", 1), attrF("epsilon", 1e-3f)}});
  v.back().opset = 23;
  // GroupNormalization: per-channel scale and bias (opset 21) and per group (18).
  v.push_back({"GroupNormalization",
               "GroupNormalization",
               {In{{2, 4, 3}}, In{{4}, 0.5, 1.5}, In{{4}}},
               {attrI("num_groups", 2)}});
  v.back().opset = 21;
  v.push_back({"GroupNormalization_per_group_18",
               "GroupNormalization",
               {In{{2, 6, 2, 2}}, In{{3}, 0.5, 1.5}, In{{3}}},
               {attrI("num_groups", 3), attrF("epsilon", 1e-3f)}});
  v.back().opset = 18;
  // Attention (opset 23): 4-D heads; packed grouped-query heads with is_causal, softcap and a
  // scale; a float mask (a constant) with trainable key/value caches.
  v.push_back({"Attention", "Attention", {In{{1, 2, 3, 4}}, In{{1, 2, 4, 4}}, In{{1, 2, 4, 3}}}});
  v.back().opset = 23;
  v.push_back({"Attention_packed_grouped_causal_softcap",
               "Attention",
               {In{{2, 3, 8}}, In{{2, 3, 4}}, In{{2, 3, 6}}},
               {attrI("q_num_heads", 4), attrI("kv_num_heads", 2), attrI("is_causal", 1),
                attrF("softcap", 2.0f), attrF("scale", 0.7f)}});
  v.back().opset = 23;
  v.push_back({"Attention_past_and_mask",
               "Attention",
               {In{{1, 2, 2, 3}}, In{{1, 2, 2, 3}}, In{{1, 2, 2, 3}}, In{{2, 5}, -1, 1, false},
                In{{1, 2, 3, 3}}, In{{1, 2, 3, 3}}}});
  v.back().opset = 23;
  // Opset 25's sliding window, both sides bounded, over packed grouped-query heads.
  v.push_back({"Attention_window_25",
               "Attention",
               {In{{1, 5, 4}}, In{{1, 5, 2}}, In{{1, 5, 2}}},
               {attrI("q_num_heads", 2), attrI("kv_num_heads", 1), attrI("left_window_size", 1),
                attrI("right_window_size", 2)}});
  v.back().opset = 25;
  // RotaryEmbedding (opset 23): 4-D halves over part of each head; packed interleaved pairs
  // with position ids into [positions, rot / 2] caches.
  v.push_back({"RotaryEmbedding",
               "RotaryEmbedding",
               {In{{1, 2, 3, 6}}, In{{1, 3, 2}, -1, 1, false}, In{{1, 3, 2}, -1, 1, false}},
               {attrI("rotary_embedding_dim", 4)}});
  v.back().opset = 23;
  v.back().dbl = false;  // the schema's types are float, float16 and bfloat16
  {
    In pos{{2, 3}, 0, 0, false};
    pos.type = onnx::TensorProto::INT64;
    pos.values = {0, 1, 2, 4, 3, 1};
    v.push_back({"RotaryEmbedding_packed_interleaved_positions",
                 "RotaryEmbedding",
                 {In{{2, 3, 8}}, In{{5, 2}, -1, 1, false}, In{{5, 2}, -1, 1, false}, pos},
                 {attrI("num_heads", 2), attrI("interleaved", 1)}});
    v.back().opset = 23;
    v.back().dbl = false;
  }
  // CenterCropPad (opset 18): one axis cropped by an odd amount, one padded by an odd amount.
  {
    In sizes{{2}, 0, 0, false};
    sizes.type = onnx::TensorProto::INT64;
    sizes.values = {2, 6};
    v.push_back(
        {"CenterCropPad", "CenterCropPad", {In{{2, 5, 3}}, sizes}, {attrInts("axes", {1, 2})}});
    v.back().opset = 18;
  }
  // SwiGLU (opset 28) with a non-default alpha.
  v.push_back({"SwiGLU", "SwiGLU", {In{{2, 3}, -2, 2}, In{{2, 3}}}, {attrF("alpha", 0.7f)}});
  v.back().opset = 28;
  // AffineGrid (opset 20), 2-D and 3-D, with and without align_corners.
  for (const auto& [size, aligned] : std::vector<std::pair<std::vector<double>, int64_t>>{
           {{2, 1, 3, 4}, 0}, {{1, 2, 2, 3, 2}, 1}}) {
    In sz{{static_cast<int64_t>(size.size())}, 0, 0, false};
    sz.type = onnx::TensorProto::INT64;
    sz.values = size;
    const int64_t sd = static_cast<int64_t>(size.size()) - 2;
    v.push_back({"AffineGrid_" + std::to_string(sd) + "d",
                 "AffineGrid",
                 {In{{static_cast<int64_t>(size[0]), sd, sd + 1}}, sz},
                 {attrI("align_corners", aligned)}});
    v.back().opset = 20;
  }
  // Col2Im (opset 18): overlapping blocks, then strided blocks with padding.
  {
    In image{{2}, 0, 0, false}, block{{2}, 0, 0, false};
    image.type = block.type = onnx::TensorProto::INT64;
    image.values = {3, 4};
    block.values = {2, 2};
    v.push_back({"Col2Im", "Col2Im", {In{{1, 8, 6}}, image, block}, {}});
    v.back().opset = 18;
    image.values = {4, 5};
    v.push_back({"Col2Im_strides_pads",
                 "Col2Im",
                 {In{{1, 4, 6}}, image, block},
                 {attrInts("strides", {2, 2}), attrInts("pads", {1, 0, 0, 1})}});
    v.back().opset = 18;
  }
  // DeformConv (opset 19): offsets that move taps partly outside the image; then groups,
  // offset groups, a bias and a mask, with padding and strides.
  v.push_back({"DeformConv",
               "DeformConv",
               {In{{1, 2, 4, 4}}, In{{2, 2, 2, 2}}, In{{1, 8, 3, 3}, -1.3, 1.3}},
               {}});
  v.back().opset = 19;
  v.push_back({"DeformConv_groups_mask",
               "DeformConv",
               {In{{1, 4, 4, 4}}, In{{2, 2, 2, 2}}, In{{1, 16, 2, 2}, -0.9, 0.9}, In{{2}},
                In{{1, 8, 2, 2}, 0.1, 1.0}},
               {attrI("group", 2), attrI("offset_group", 2), attrInts("pads", {1, 0, 0, 1}),
                attrInts("strides", {2, 2})}});
  v.back().opset = 19;
  // LpNormalization: L2 along axis 1; L1 (kinks at 0 kept out of the differences) on the last.
  v.push_back({"LpNormalization_l2", "LpNormalization", {In{{2, 3, 4}}}, {attrI("axis", 1)}});
  v.back().opset = 22;
  {
    In x{{2, 3, 4}};
    x.awayFromZero = true;
    v.push_back({"LpNormalization_l1", "LpNormalization", {x}, {attrI("p", 1)}});
    v.back().opset = 22;
  }
  // Recurrent ops (float only); rnn_gradcheck_test.cpp checks their configurations in depth.
  for (const auto& [op, gates] :
       std::vector<std::pair<std::string, int64_t>>{{"RNN", 1}, {"GRU", 3}, {"LSTM", 4}})
    v.push_back({op,
                 op,
                 {In{{3, 2, 3}}, In{{1, 2 * gates, 3}}, In{{1, 2 * gates, 2}}},
                 {attrI("hidden_size", 2)},
                 false});
  {
    // Shrink: values kept clear of the kinks at +-lambd.
    In x{{2, 3}};
    x.values = {-0.9, -0.5, -0.2, 0.1, 0.3, 0.8};
    unary("Shrink", x, {attrF("lambd", 0.4f), attrF("bias", 0.2f)});
  }
  {
    // MaxUnpool of 2x2 windows, stride 2; I holds one position per window of the 4x4 output.
    In ind{{1, 1, 2, 2}, 0, 0, false};
    ind.type = onnx::TensorProto::INT64;
    ind.values = {5, 2, 12, 15};
    const std::vector<onnx::AttributeProto> at{attrInts("kernel_shape", {2, 2}),
                                               attrInts("strides", {2, 2})};
    v.push_back({"MaxUnpool", "MaxUnpool", {In{{1, 1, 2, 2}}, ind}, at});
    In outShape{{4}, 0, 0, false};
    outShape.type = onnx::TensorProto::INT64;
    outShape.values = {1, 1, 5, 6};
    v.push_back({"MaxUnpool_output_shape", "MaxUnpool", {In{{1, 1, 2, 2}}, ind, outShape}, at});
    // Overlapping 3x3 windows, stride 1, can pick one position twice: the forward keeps the
    // last write, so the first of the pair has no effect on the loss.
    In dup = ind;
    dup.values = {5, 5, 9, 10};
    v.push_back({"MaxUnpool_repeated_index",
                 "MaxUnpool",
                 {In{{1, 1, 2, 2}}, dup},
                 {attrInts("kernel_shape", {3, 3})}});
  }
  // Lp pooling (reference kernels, so float64): p = 2, 3 and 1, with padding and overlapping
  // windows.
  v.push_back({"LpPool",
               "LpPool",
               {In{{1, 2, 5, 5}}},
               {attrInts("kernel_shape", {3, 3}), attrInts("strides", {2, 2}),
                attrInts("pads", {1, 1, 1, 1})}});
  v.push_back({"LpPool_p3_1d",
               "LpPool",
               {In{{2, 2, 6}}},
               {attrInts("kernel_shape", {3}), attrI("p", 3), attrS("auto_pad", "SAME_UPPER")}});
  {
    In x{{2, 3, 2, 2}};
    x.awayFromZero = true;  // |x| has a kink at 0
    v.push_back({"GlobalLpPool_p1", "GlobalLpPool", {x}, {attrI("p", 1)}});
  }
  v.push_back({"GlobalLpPool", "GlobalLpPool", {In{{2, 3, 3, 2}}}});
  {
    // Two overlapping ROIs of 2x2 bins; the second is scaled down from a 2x larger image.
    In rois{{2, 5}, 0, 0, false};
    rois.values = {0, 0, 0, 3, 3, 1, 2, 4, 8, 9};
    v.push_back({"MaxRoiPool",
                 "MaxRoiPool",
                 {In{{2, 2, 5, 5}}, rois},
                 {attrInts("pooled_shape", {2, 2}), attrF("spatial_scale", 0.5f)}});
    v.back().distinct = true;
  }
  {
    // The largest 2 of each row's 5 distinct values take the gradient; the rest get none.
    GradCase c{"TopK",
               "TopK",
               {In{{3, 5}}, In{{1}, 0, 0, false, false, onnx::TensorProto::INT64, {2}}},
               {attrI("axis", 1)}};
    c.distinct = true;
    c.outputs = 2;
    v.push_back(c);
  }
  // GatherND, a row taken twice (its gradient sums), and ScatterND.
  v.push_back({"GatherND",
               "GatherND",
               {In{{3, 4}}, In{{3, 1}, 0, 0, false, false, onnx::TensorProto::INT64, {2, 0, 2}}}});
  v.push_back(
      {"ScatterND",
       "ScatterND",
       {In{{4, 3}}, In{{2, 1}, 0, 0, false, false, onnx::TensorProto::INT64, {3, 1}}, In{{2, 3}}}});
  // DFT: the opposite transform of dY. A onesided output's missing half counts as zero.
  v.push_back({"DFT_real_onesided", "DFT", {In{{2, 6, 1}}}, {attrI("onesided", 1)}});
  v.push_back({"DFT_inverse_negative_axis",
               "DFT",
               {In{{3, 4, 2}}},
               {attrI("axis", -3), attrI("inverse", 1)}});
  {
    GradCase c{"DFT20_default_axis", "DFT", {In{{2, 5, 1}}}, {attrI("onesided", 1)}};
    c.opset = 20;
    v.push_back(c);
  }
  // com.microsoft ops: autodiff differentiates their bodies of ai.onnx ops
  // (nodes/microsoft_domain.cpp), written at the model's opset (17: Gelu and Swish as formulas).
  auto ms = [&](GradCase c) {
    c.name = "Microsoft" + c.name;
    c.domain = "com.microsoft";
    v.push_back(std::move(c));
  };
  const In x234{{2, 3, 4}}, b4{{4}};
  ms({"Gelu", "Gelu", {x234}});
  ms({"QuickGelu", "QuickGelu", {x234}, {attrF("alpha", 1.5f)}});
  ms({"FastGelu", "FastGelu", {x234, b4}});
  ms({"BiasGelu", "BiasGelu", {x234, b4}});
  ms({"FusedMatMul",
      "FusedMatMul",
      {In{{2, 4, 3}}, In{{2, 5, 4}}},
      {attrI("transA", 1), attrI("transB", 1), attrF("alpha", 0.5f)},
      false});
  ms({"FusedMatMulBatch",
      "FusedMatMul",
      {In{{3, 2, 4}}, In{{2, 4, 5}}},
      {attrI("transBatchA", 1)},
      false});
  ms({"TransposeMatMul", "TransposeMatMul", {In{{4, 3}}, In{{4, 2}}}, {attrI("transA", 1)}, false});
  ms({"FusedGemm",
      "FusedGemm",
      {In{{3, 4}}, In{{2, 4}}, In{{2}}},
      {attrI("transB", 1), attrS("activation", "Tanh")},
      false});
  ms({"FusedGemmScaledTanh",
      "FusedGemm",
      {In{{3, 4}}, In{{4, 2}}},
      {attrS("activation", "ScaledTanh"), attrF("activation_alpha", 0.8f),
       attrF("activation_beta", 1.2f)},
      false});
  ms({"FusedConv",
      "FusedConv",
      {In{{1, 2, 5, 5}}, In{{3, 2, 3, 3}}, In{{3}}, In{{1, 3, 3, 3}}},
      {attrS("activation", "Sigmoid")},
      false});
  ms({"SkipLayerNormalization",
      "SkipLayerNormalization",
      {x234, x234, b4, b4, b4},
      {attrF("epsilon", 1e-5f)}});
  ms({"SkipSimplifiedLayerNormalization",
      "SkipSimplifiedLayerNormalization",
      {x234, x234, b4, b4},
      {attrF("epsilon", 1e-5f)}});
  ms({"CDist", "CDist", {In{{3, 2}}, In{{4, 2}}}, {attrS("metric", "euclidean")}});
  ms({"EmbedLayerNormalization",
      "EmbedLayerNormalization",
      {In{{2, 3}, 0, 0, false, false, onnx::TensorProto::INT32, {1, 4, 2, 0, 4, 3}},
       In{{2, 3}, 0, 0, false, false, onnx::TensorProto::INT32, {0, 1, 1, 0, 0, 1}}, In{{5, 4}},
       In{{3, 4}}, In{{2, 4}}, b4, b4},
      {attrF("epsilon", 1e-5f)}});
  ms({"Pad",
      "Pad",
      {x234, In{{1, 6}, 0, 0, false, false, onnx::TensorProto::INT64, {0, 1, 1, 1, 0, 2}},
       In{{1}, -1, 1, false}}});
  ms({"BiasAdd", "BiasAdd", {x234, b4, x234}});
  ms({"BiasSplitGelu", "BiasSplitGelu", {x234, b4}});
  ms({"ComplexMul", "ComplexMul", {In{{3, 2}}, In{{2, 3, 2}}}});
  ms({"ComplexMulConj", "ComplexMulConj", {In{{3, 2}}, In{{3, 2}}}});
  ms({"FusedMatMulActivation",
      "FusedMatMulActivation",
      {In{{3, 4}}, In{{2, 4}}},
      {attrI("transB", 1), attrS("activation", "Tanh"), attrF("alpha", 0.5f)},
      false});
  ms({"GemmFastGelu", "GemmFastGelu", {In{{3, 4}}, In{{4, 2}}, In{{2}}}, {}, false});
  ms({"GroupNorm",
      "GroupNorm",
      {In{{2, 2, 3, 4}, -2, 2}, b4, b4},
      {attrI("groups", 2), attrI("activation", 1), attrF("epsilon", 1e-3f)}});
  ms({"SkipGroupNorm",
      "SkipGroupNorm",
      {In{{1, 2, 2, 4}, -2, 2}, b4, b4, In{{1, 1, 1, 4}}, b4},
      {attrI("groups", 2), attrI("activation", 0), attrF("epsilon", 1e-3f)}});
  ms({"TorchEmbedding",
      "TorchEmbedding",
      {In{{5, 3}}, In{{2, 2}, 0, 0, false, false, onnx::TensorProto::INT64, {4, 0, 0, 2}}}});
  ms({"ConvTransposeWithDynamicPads",
      "ConvTransposeWithDynamicPads",
      {In{{1, 2, 3, 3}}, In{{2, 1, 3, 3}},
       In{{4}, 0, 0, false, false, onnx::TensorProto::INT64, {1, 0, 0, 1}}, In{{1}}},
      {attrInts("strides", {2, 2})},
      false});
  {
    // In inference mode, where the dropout keeps everything and finite differences can see it.
    GradCase c{"BiasDropout", "BiasDropout", {x234, b4, x234}};
    c.training = false;
    ms(c);
  }
  ms({"RelativePositionBias",
      "RelativePositionBias",
      {In{{8, 2}}, In{{1}, 0, 0, false, false, onnx::TensorProto::INT64, {3}},
       In{{1}, 0, 0, false, false, onnx::TensorProto::INT64, {6}}},
      {attrI("max_distance", 16), attrI("is_bidirectional", 1)}});
  ms({"UnfoldTensor",
      "UnfoldTensor",
      {In{{2, 5, 3}}},
      {attrI("dim", 1), attrI("size", 2), attrI("step", 2)}});
  ms({"BiasSoftmax",
      "BiasSoftmax",
      {In{{2, 3, 4}}, In{{3, 4}}},
      {attrI("axis", 1), attrI("is_inner_broadcast", 0)}});
  ms({"NhwcConv",
      "NhwcConv",
      {In{{1, 4, 5, 4}}, In{{4, 3, 2, 2}}, In{{4}}},
      {attrI("group", 2), attrInts("pads", {1, 0, 0, 1})},
      false});
  ms({"NhwcFusedConv",
      "NhwcFusedConv",
      {In{{1, 4, 4, 2}}, In{{3, 2, 2, 2}}, In{{3}}, In{{1, 3, 3, 3}}},
      {attrS("activation", "Tanh")},
      false});
  ms({"Rfft2dNormalized",
      "Rfft",
      {In{{2, 3, 4}}},
      {attrI("signal_ndim", 2), attrI("normalized", 1)}});
  ms({"Irfft", "Irfft", {In{{2, 4, 2}}}, {attrI("signal_ndim", 1)}});
  ms({"GatedRelativePositionBias",
      "GatedRelativePositionBias",
      {In{{2, 3, 4}}, In{{4}}, In{{1, 2, 3, 3}}, In{{2, 4}}, In{{4}}, In{{1, 2, 1, 1}}},
      {attrI("num_heads", 2)}});
  // The top 2 of 3 experts per row, renormalized: the router's gradient reaches the chosen ones.
  ms({"MoE",
      "MoE",
      {In{{3, 4}}, In{{3, 3}, -2, 2}, In{{3, 5, 4}}, In{{3, 5}}, In{{3, 4, 5}}},
      {attrI("k", 2), attrI("normalize_routing_weights", 1), attrS("activation_type", "gelu")}});
  {
    // Sequences of 3 and 2 tokens packed, at their places in [2, 4]; an opset-23 model, as
    // the body attends through ai.onnx Attention.
    GradCase c{"PackedAttention",
               "PackedAttention",
               {In{{5, 4}}, In{{4, 12}}, In{{12}},
                In{{2, 4}, 0, 0, false, false, onnx::TensorProto::INT32, {0, 1, 2, 4, 5, 3, 6, 7}},
                In{{3}, 0, 0, false, false, onnx::TensorProto::INT32, {0, 3, 5}}},
               {attrI("num_heads", 2)}};
    c.opset = 23;
    ms(c);
  }
  {
    GradCase c{"BitmaskBiasDropout", "BitmaskBiasDropout", {x234, b4, x234}};
    c.training = false;
    ms(c);
  }
  return v;
}

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  auto yShape = forwardShape(c);
  if (::testing::Test::HasFailure()) return;
  std::mt19937 rng(1234);
  Built b = buildModel(c, yShape, rng);
  ASSERT_FALSE(b.trainable.empty());
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = b.trainable;
  opt.training = c.training;
  auto gg = buildGradientGraph(b.model, opt);
  ASSERT_TRUE(gg.ok()) << gg.message();
  EXPECT_TRUE(test::catalogueAccepts(gg->model, c.name));  // its grad ops are catalogued
  auto session = InferenceSession::create(gg->model);
  ASSERT_TRUE(session.ok()) << session.message();
  const int checked =
      test::checkFiniteDifferences(**session, *gg, test::initializerFeeds(b.model, *gg),
                                   b.trainable, {}, "loss", test::fdTolerance(c.dbl), c.name);
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<GradCase>& i) { return i.param.name; });

// Every op with a gradient builder has a finite-difference case above.
TEST(GradCheckCoverage, EveryBuilderHasACase) {
  std::set<std::string> covered;
  for (const auto& c : cases()) covered.insert(c.op);
  for (const auto& op : differentiableOps(17))
    EXPECT_TRUE(covered.count(op)) << op << " has a gradient builder but no finite-difference case";
}

// The finite differences above only check LpPool's gradient against its own forward; these
// norms, worked by hand, check the forward (libonnx 1.12 ships no LpPool backend cases).
TEST(LpPoolForward, MatchesHandComputedNorms) {
  struct Case {
    std::string op;
    std::vector<onnx::AttributeProto> attrs;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      // windows [3, -4] and [0, 12]: sqrt(9 + 16), sqrt(144)
      {"LpPool", {attrInts("kernel_shape", {2}), attrInts("strides", {2})}, {5, 12}},
      // padded windows [pad, 3], [-4, 0], [12, pad]
      {"LpPool",
       {attrInts("kernel_shape", {2}), attrInts("strides", {2}), attrInts("pads", {1, 1})},
       {3, 4, 12}},
      // p = 3 over [3, -4], [-4, 0], [0, 12]: (27 + 64)^(1/3), 4, 12
      {"LpPool", {attrInts("kernel_shape", {2}), attrI("p", 3)}, {std::cbrt(91.0), 4, 12}},
      {"GlobalLpPool", {attrI("p", 1)}, {19}},
      {"GlobalLpPool", {}, {13}},
  };
  for (const auto& c : cases) {
    onnx::ModelProto m;
    auto* n = test::singleOpModel(m, 17, "lp", c.op, "pool");
    *m.mutable_graph()->add_initializer() =
        test::makeTensor("x", onnx::TensorProto::DOUBLE, {1, 1, 4}, {3, -4, 0, 12});
    n->add_input("x");
    n->add_output("y");
    for (const auto& a : c.attrs) *n->add_attribute() = a;
    m.mutable_graph()->add_output()->set_name("y");
    auto s = InferenceSession::create(m);
    ASSERT_TRUE(s.ok()) << s.message();
    auto r = (*s)->run({});
    ASSERT_TRUE(r.ok()) << r.message();
    const Tensor& y = r->begin()->second;
    ASSERT_EQ(y.size(), static_cast<int64_t>(c.expected.size())) << c.op;
    for (size_t i = 0; i < c.expected.size(); ++i)
      EXPECT_NEAR(y.getDouble(i), c.expected[i], 1e-12) << c.op << " output " << i;
  }
}

// MaxRoiPool's bins, worked by hand on a 4x4 ramp (0..15, row-major): libonnx 1.12 ships no
// backend cases for it either.
TEST(MaxRoiPoolForward, MatchesHandComputedBins) {
  struct Case {
    std::vector<double> roi;
    float scale;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      // the whole image in 2x2 bins: maxima at each bin's bottom-right
      {{0, 0, 0, 3, 3}, 1.0f, {5, 7, 13, 15}},
      // a 2x2 ROI: one pixel per bin
      {{0, 1, 1, 2, 2}, 1.0f, {5, 6, 9, 10}},
      // scale 0.5: corners 0 and round(3.5) = 4, 5 rows in bins [0, 3) and [2, 5) clipped to 4
      {{0, 0, 0, 7, 7}, 0.5f, {10, 11, 14, 15}},
  };
  std::vector<double> ramp(16);
  for (int i = 0; i < 16; ++i) ramp[i] = i;
  for (const auto& c : cases) {
    onnx::ModelProto m;
    auto* n = test::singleOpModel(m, 17, "roi", "MaxRoiPool", "pool");
    *m.mutable_graph()->add_initializer() =
        test::makeTensor("x", onnx::TensorProto::DOUBLE, {1, 1, 4, 4}, ramp);
    *m.mutable_graph()->add_initializer() =
        test::makeTensor("rois", onnx::TensorProto::DOUBLE, {1, 5}, c.roi);
    n->add_input("x");
    n->add_input("rois");
    n->add_output("y");
    *n->add_attribute() = attrInts("pooled_shape", {2, 2});
    *n->add_attribute() = attrF("spatial_scale", c.scale);
    m.mutable_graph()->add_output()->set_name("y");
    auto s = InferenceSession::create(m);
    ASSERT_TRUE(s.ok()) << s.message();
    auto r = (*s)->run({});
    ASSERT_TRUE(r.ok()) << r.message();
    const Tensor& y = r->begin()->second;
    ASSERT_EQ(y.size(), 4);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(y.getDouble(i), c.expected[i]) << "bin " << i;
  }
}

// Issue 4's list of ops that must have gradients ("Gemm, MatMul, ..., the pooling ops, every
// activation, ..., the Reduce* ops, ..., LSTM/GRU/RNN", plus the losses), spelled out as the
// ONNX ops of the current opset. Ops of those families judged to have no usable gradient are
// listed with the reason, and must fail with the error that names the node.
struct NoGradient {
  const char* op;
  const char* reason;
};

const std::vector<std::string>& issueOpList() {
  static const std::vector<std::string> ops = {
      // Matrix products, arithmetic and normalization.
      "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Conv", "ConvTranspose",
      "BatchNormalization", "LayerNormalization",
      // The pooling ops.
      "AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool",
      "MaxUnpool", "MaxRoiPool",
      // Every activation of opset 17 (Gelu arrives in opset 20; the GELU layer lowers to Erf).
      "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
      "Tanh", "Softplus", "Softsign", "ThresholdedRelu", "Shrink", "Erf", "Softmax", "LogSoftmax",
      // Shapes and data movement.
      "Reshape", "Flatten", "Transpose", "Concat", "Split", "Slice", "Gather", "Squeeze",
      "Unsqueeze", "Expand", "Pad",
      // The Reduce* ops.
      "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
      "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
      // Selection, variadic, recurrent.
      "Dropout", "Where", "Clip", "Cast", "Identity", "Sum", "Mean", "Max", "Min", "LSTM", "GRU",
      "RNN",
      // The losses, and the float ops the deepwire.losses nodes lower to (MSE, BCE, ...).
      "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Log", "Exp", "Abs", "Neg", "Sqrt"};
  return ops;
}

const std::vector<NoGradient> kNoGradient = {
    {"Hardmax",
     "a one-hot of the arg max: piecewise constant, so its derivative is zero wherever it exists "
     "and a silent zero would stop training without a word"},
};

TEST(GradCheckCoverage, IssueOpListHasBuilders) {
  const int opset = dw::kDefaultOnnxOpset;
  const auto& cat = dw::Catalogue::instance();
  std::set<std::string> fdCases;
  for (const auto& c : cases()) fdCases.insert(c.op);
  for (const auto& op : issueOpList()) {
    // A misspelt or retired name would make the check vacuous.
    EXPECT_NE(cat.find(dw::kOnnxDomain, op, opset), nullptr) << op << " is not an ONNX op";
    EXPECT_NE(findGradBuilder("", op, opset), nullptr)
        << op << " is on issue 4's list but has no gradient builder for opset " << opset;
    EXPECT_TRUE(fdCases.count(op)) << op << " has no finite-difference case";
  }
  for (const auto& ng : kNoGradient) {
    SCOPED_TRACE(std::string(ng.op) + ": " + ng.reason);
    EXPECT_NE(cat.find(dw::kOnnxDomain, ng.op, opset), nullptr);
    EXPECT_EQ(findGradBuilder("", ng.op, opset), nullptr) << "listed as having no gradient";
    // X (trainable) -> op -> loss: building the gradient names the node and says why.
    GradCase c{ng.op, ng.op, {In{{1, 1, 4, 4}}}};
    std::mt19937 rng(1);
    Built b = buildModel(c, {}, rng);  // a scalar R: no forward run needed
    GradientGraphOptions opt;
    opt.losses = {"loss"};
    opt.trainable = b.trainable;
    auto gg = buildGradientGraph(b.model, opt);
    ASSERT_FALSE(gg.ok());
    EXPECT_NE(gg.message().find("node 'op' (" + std::string(ng.op)), std::string::npos)
        << gg.message();
    EXPECT_NE(gg.message().find("no gradient is defined"), std::string::npos) << gg.message();
  }
}

}  // namespace
