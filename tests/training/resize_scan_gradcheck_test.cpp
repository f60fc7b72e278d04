// Finite-difference checks of the Resize and Scan gradients (engine/training/grad_resize.cpp,
// grad_scan.cpp), in float64: Resize in every mode over 1-D, 2-D and 3-D inputs, with scales and
// with sizes; Scan with states, scan inputs, outer weights its body reads, both directions,
// several scan outputs and a nested Scan. Each model ends in loss = sum_k ReduceSum(Y_k * R_k)
// with fixed random R_k, so every output's gradient is exercised. Loop shares Scan's machinery
// and is checked with a fixed trip count and with a condition that stops it early.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <random>

#include "engine/session.h"
#include "engine/tensor.h"
#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"
#include "gradcheck_util.h"

namespace {

using namespace dw::engine;
using namespace dw::engine::training;

constexpr int32_t kF64 = onnx::TensorProto::DOUBLE;

int64_t count(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

void addNode(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& ins,
             const std::vector<std::string>& outs, std::vector<onnx::AttributeProto> attrs = {}) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  for (auto& a : attrs) *n->add_attribute() = std::move(a);
}

onnx::ValueInfoProto value(const std::string& name, int32_t type, int rank) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* tt = v.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  auto* sh = tt->mutable_shape();
  for (int i = 0; i < rank; ++i) sh->add_dim();
  return v;
}

onnx::AttributeProto graphAttr(const std::string& name, const onnx::GraphProto& g) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::GRAPH);
  *a.mutable_g() = g;
  return a;
}

// A model under construction: trainable initializers (random), fixed ones, nodes; then a loss.
class Model {
 public:
  explicit Model(int opset, uint32_t seed = 1234) : rng_(seed) {
    m_.set_ir_version(8);
    auto* imp = m_.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    m_.mutable_graph()->set_name("gradcheck");
  }
  onnx::GraphProto* graph() { return m_.mutable_graph(); }
  Model& trainable(const std::string& name, const std::vector<int64_t>& shape, double lo = -1,
                   double hi = 1) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(count(shape));
    for (auto& x : v) x = u(rng_);
    *graph()->add_initializer() = test::makeTensor(name, kF64, shape, v);
    wrt_.push_back(name);
    return *this;
  }
  Model& fixed(const std::string& name, int32_t type, const std::vector<int64_t>& shape,
               const std::vector<double>& v) {
    *graph()->add_initializer() = test::makeTensor(name, type, shape, v);
    return *this;
  }
  Model& node(const std::string& op, const std::vector<std::string>& ins,
              const std::vector<std::string>& outs, std::vector<onnx::AttributeProto> attrs = {}) {
    addNode(graph(), op, ins, outs, std::move(attrs));
    return *this;
  }
  // loss = sum over `outputs` of ReduceSum(Y * R); the shapes come from one forward run.
  ::testing::AssertionResult finish(const std::vector<std::string>& outputs) {
    onnx::ModelProto probe = m_;
    for (const auto& o : outputs) probe.mutable_graph()->add_output()->set_name(o);
    auto s = InferenceSession::create(probe);
    if (!s.ok()) return ::testing::AssertionFailure() << "forward session: " << s.message();
    auto r = (*s)->run({});
    if (!r.ok()) return ::testing::AssertionFailure() << "forward run: " << r.message();
    std::normal_distribution<double> nd(0, 1);
    std::vector<std::string> terms;
    for (const auto& o : outputs) {
      const Shape shape = r->at(o).shape();
      std::vector<double> v(r->at(o).size());
      for (auto& x : v) x = nd(rng_);
      fixed(o + "_R", kF64, std::vector<int64_t>(shape.begin(), shape.end()), v);
      node("Mul", {o, o + "_R"}, {o + "_weighted"});
      onnx::AttributeProto kd;
      kd.set_name("keepdims");
      kd.set_type(onnx::AttributeProto::INT);
      kd.set_i(0);
      node("ReduceSum", {o + "_weighted"}, {o + "_term"}, {kd});
      terms.push_back(o + "_term");
    }
    // Add rather than Sum: Sum has a gradient from opset 8 on, and Upsample-7 models are opset 7.
    std::string total = terms[0];
    for (size_t i = 1; i < terms.size(); ++i) {
      node("Add", {total, terms[i]}, {"loss_" + std::to_string(i)});
      total = "loss_" + std::to_string(i);
    }
    node("Identity", {total}, {"loss"});
    auto* out = graph()->add_output();
    out->set_name("loss");
    out->mutable_type()->mutable_tensor_type()->set_elem_type(kF64);
    out->mutable_type()->mutable_tensor_type()->mutable_shape();
    return ::testing::AssertionSuccess();
  }
  const onnx::ModelProto& proto() const { return m_; }
  const std::vector<std::string>& wrt() const { return wrt_; }

 private:
  onnx::ModelProto m_;
  std::vector<std::string> wrt_;
  std::mt19937 rng_;
};

// Builds the gradient graph and compares every element of every trainable's gradient with
// central differences of the loss.
void expectMatchesFiniteDifferences(const Model& model, const std::string& what) {
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = model.wrt();
  auto gg = buildGradientGraph(model.proto(), opt);
  ASSERT_TRUE(gg.ok()) << what << ": " << gg.message();
  // The training graph, reverse Scan bodies included, is a valid ONNX model.
  try {
    onnx::checker::check_model(gg->model);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
  auto session = InferenceSession::create(gg->model);
  ASSERT_TRUE(session.ok()) << what << ": " << session.message();
  const int checked =
      test::checkFiniteDifferences(**session, *gg, test::initializerFeeds(model.proto(), *gg),
                                   model.wrt(), {}, "loss", test::fdTolerance(true), what);
  EXPECT_GT(checked, 0) << what;
}

onnx::AttributeProto attrStr(const std::string& n, const std::string& v) {
  return attrS(n, v);
}

// ---- Resize ---------------------------------------------------------------------------------

struct ResizeCase {
  std::string name;
  std::vector<int64_t> shape;
  std::string mode, coord, nearest;  // "" keeps the default
  std::vector<double> scales;        // or
  std::vector<int64_t> sizes;
  std::vector<double> roi;  // tf_crop_and_resize
  float cubicA = 0;         // 0 keeps the default
  bool excludeOutside = false;
  float extrapolation = 0;
  int opset = 13;
  std::string op = "Resize";
};

void PrintTo(const ResizeCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<ResizeCase> resizeCases() {
  std::vector<ResizeCase> v;
  const std::vector<int64_t> s1{2, 5}, s2{1, 2, 4, 3}, s3{1, 1, 3, 2, 4};
  // Nearest: every nearest_mode, several coordinate transformations, up and down.
  v.push_back({"Nearest1dFloorAsymmetricUp", s1, "nearest", "asymmetric", "floor", {1, 2.5}});
  v.push_back({"Nearest1dCeilHalfPixelUp", s1, "nearest", "half_pixel", "ceil", {1, 1.7}});
  v.push_back(
      {"Nearest1dRoundFloorDown", s1, "nearest", "half_pixel", "round_prefer_floor", {1, 0.6}});
  v.push_back({"Nearest2dRoundCeilAlignCorners",
               s2,
               "nearest",
               "align_corners",
               "round_prefer_ceil",
               {1, 1, 2, 1.5}});
  v.push_back({"Nearest2dTfHalfPixelSizes",
               s2,
               "nearest",
               "tf_half_pixel_for_nn",
               "round_prefer_floor",
               {},
               {1, 2, 7, 2}});
  v.push_back({"Nearest3dFloorSizes", s3, "nearest", "asymmetric", "floor", {}, {1, 1, 5, 4, 3}});
  // Linear (n-D): every coordinate transformation.
  v.push_back({"Linear1dHalfPixelUp", s1, "linear", "half_pixel", "", {1, 2}});
  v.push_back({"Linear1dPytorchHalfPixelDown", s1, "linear", "pytorch_half_pixel", "", {1, 0.6}});
  v.push_back({"Linear2dAlignCornersSizes", s2, "linear", "align_corners", "", {}, {1, 2, 7, 5}});
  v.push_back({"Linear2dAsymmetric", s2, "linear", "asymmetric", "", {1, 1, 1.5, 2.5}});
  ResizeCase crop{
      "Linear2dTfCropAndResize", s2, "linear", "tf_crop_and_resize", "", {}, {1, 2, 5, 4}};
  crop.roi = {0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3};  // part of the crop lies outside
  crop.extrapolation = 0.5f;
  v.push_back(crop);
  v.push_back({"Linear3dHalfPixelScales", s3, "linear", "half_pixel", "", {1, 1, 2, 1.5, 0.75}});
  // Cubic: default A, another A with exclude_outside, up and down, scales and sizes.
  v.push_back({"Cubic1dHalfPixelUp", s1, "cubic", "half_pixel", "", {1, 2.2}});
  ResizeCase ex{"Cubic2dExcludeOutsideDown", s2, "cubic", "half_pixel", "", {1, 1, 0.75, 0.7}};
  ex.cubicA = -0.5f;
  ex.excludeOutside = true;
  v.push_back(ex);
  v.push_back({"Cubic2dAlignCornersSizes", s2, "cubic", "align_corners", "", {}, {1, 2, 6, 5}});
  v.push_back({"Cubic3dAsymmetric", s3, "cubic", "asymmetric", "", {1, 1, 1.5, 2, 1.25}});
  // Earlier signatures: Resize-10 (X, scales) and Upsample-9 / -7 (asymmetric, floor).
  ResizeCase r10{"Resize10Linear", s2, "linear", "", "", {1, 1, 2, 2}};
  r10.opset = 10;
  v.push_back(r10);
  ResizeCase up9{"Upsample9Nearest", s2, "nearest", "", "", {1, 1, 2, 3}};
  up9.opset = 9;
  up9.op = "Upsample";
  v.push_back(up9);
  ResizeCase up7{"Upsample7Linear", s2, "linear", "", "", {1, 1, 2, 1.5}};
  up7.opset = 7;
  up7.op = "Upsample";
  v.push_back(up7);
  return v;
}

class ResizeGradCheck : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(ResizeGradCheck, MatchesFiniteDifferences) {
  const ResizeCase& c = GetParam();
  Model m(c.opset);
  m.trainable("X", c.shape);
  std::vector<onnx::AttributeProto> attrs;
  if (!c.mode.empty()) attrs.push_back(attrStr("mode", c.mode));
  if (!c.coord.empty()) attrs.push_back(attrStr("coordinate_transformation_mode", c.coord));
  if (!c.nearest.empty()) attrs.push_back(attrStr("nearest_mode", c.nearest));
  if (c.cubicA != 0) attrs.push_back(attrF("cubic_coeff_a", c.cubicA));
  if (c.excludeOutside) attrs.push_back(attrI("exclude_outside", 1));
  if (c.extrapolation != 0) attrs.push_back(attrF("extrapolation_value", c.extrapolation));
  const int64_t r = static_cast<int64_t>(c.shape.size());
  std::vector<std::string> ins{"X"};
  if (c.op == "Upsample" && c.opset < 9) {
    std::vector<float> f(c.scales.begin(), c.scales.end());
    onnx::AttributeProto a;
    a.set_name("scales");
    a.set_type(onnx::AttributeProto::FLOATS);
    for (float x : f) a.add_floats(x);
    attrs.push_back(a);
  } else if (c.op == "Upsample" || c.opset < 11) {
    m.fixed("scales", onnx::TensorProto::FLOAT, {r}, c.scales);
    ins.push_back("scales");
  } else {
    m.fixed("roi", onnx::TensorProto::FLOAT, {static_cast<int64_t>(c.roi.size())}, c.roi);
    ins.push_back("roi");
    if (c.sizes.empty()) {
      m.fixed("scales", onnx::TensorProto::FLOAT, {r}, c.scales);
      ins.push_back("scales");
    } else {
      m.fixed("sizes", onnx::TensorProto::INT64, {r},
              std::vector<double>(c.sizes.begin(), c.sizes.end()));
      ins.push_back("");
      ins.push_back("sizes");
    }
  }
  m.node(c.op, ins, {"Y"}, attrs);
  ASSERT_TRUE(m.finish({"Y"}));
  expectMatchesFiniteDifferences(m, c.name);
}

INSTANTIATE_TEST_SUITE_P(Modes, ResizeGradCheck, ::testing::ValuesIn(resizeCases()),
                         [](const ::testing::TestParamInfo<ResizeCase>& i) {
                           return i.param.name;
                         });

TEST(ResizeGrad, UnsupportedAttributeIsAnErrorNamingNodeAndAttribute) {
  Model m(17);
  m.trainable("X", {1, 1, 4});
  m.fixed("scales", onnx::TensorProto::FLOAT, {3}, {1, 1, 0.5});
  m.node("Resize", {"X", "", "scales"}, {"Y"}, {attrStr("mode", "linear"), attrI("antialias", 1)});
  m.graph()->mutable_node(0)->set_name("shrink");
  ASSERT_TRUE(m.graph()->node_size() == 1);
  // No forward run: the forward kernel refuses antialias too.
  auto* out = m.graph()->add_output();
  out->set_name("Y");
  GradientGraphOptions opt;
  opt.losses = {"Y"};
  opt.trainable = {"X"};
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_FALSE(gg.ok());
  EXPECT_NE(gg.message().find("node 'shrink' (Resize"), std::string::npos) << gg.message();
  EXPECT_NE(gg.message().find("antialias"), std::string::npos) << gg.message();
}

// ---- Scan -----------------------------------------------------------------------------------

// Body: (s [n], x_t [n]) -> s' = Tanh(s * W + sum(s * W) + x_t), y1 = s' * x_t,
// y2 = Sigmoid(s) + b, reading W [n] and b [n] from the outer graph (float64 kernels: no MatMul).
onnx::GraphProto rnnBody() {
  onnx::GraphProto b;
  b.set_name("step");
  *b.add_input() = value("s", kF64, 1);
  *b.add_input() = value("x_t", kF64, 1);
  addNode(&b, "Mul", {"s", "W"}, {"sw"});
  addNode(&b, "ReduceSum", {"sw"}, {"mix"});
  addNode(&b, "Add", {"sw", "mix"}, {"swm"});
  addNode(&b, "Add", {"swm", "x_t"}, {"pre"});
  addNode(&b, "Tanh", {"pre"}, {"s_next"});
  addNode(&b, "Mul", {"s_next", "x_t"}, {"y1"});
  addNode(&b, "Sigmoid", {"s"}, {"sig"});
  addNode(&b, "Add", {"sig", "b"}, {"y2"});
  for (const char* o : {"s_next", "y1", "y2"}) *b.add_output() = value(o, kF64, 1);
  return b;
}

struct ScanCase {
  std::string name;
  std::vector<int64_t> inAxes, inDirs, outAxes, outDirs;
  std::vector<int64_t> xShape;
};

void PrintTo(const ScanCase& c, std::ostream* os) {
  *os << c.name;
}

class ScanGradCheck : public ::testing::TestWithParam<ScanCase> {};

TEST_P(ScanGradCheck, MatchesFiniteDifferences) {
  const ScanCase& c = GetParam();
  Model m(16);
  m.trainable("s0", {3}).trainable("X", c.xShape).trainable("W", {3}, -0.8, 0.8);
  m.trainable("b", {3});
  std::vector<onnx::AttributeProto> attrs = {graphAttr("body", rnnBody()),
                                             attrI("num_scan_inputs", 1)};
  if (!c.inAxes.empty()) attrs.push_back(attrInts("scan_input_axes", c.inAxes));
  if (!c.inDirs.empty()) attrs.push_back(attrInts("scan_input_directions", c.inDirs));
  if (!c.outAxes.empty()) attrs.push_back(attrInts("scan_output_axes", c.outAxes));
  if (!c.outDirs.empty()) attrs.push_back(attrInts("scan_output_directions", c.outDirs));
  m.node("Scan", {"s0", "X"}, {"s_final", "Y1", "Y2"}, attrs);
  ASSERT_TRUE(m.finish({"s_final", "Y1", "Y2"}));
  expectMatchesFiniteDifferences(m, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Directions, ScanGradCheck,
    ::testing::Values(ScanCase{"Forward", {}, {}, {}, {}, {4, 3}},
                      ScanCase{"ReverseInput", {}, {1}, {}, {}, {4, 3}},
                      ScanCase{"ReverseOutputs", {}, {}, {}, {1, 0}, {4, 3}},
                      ScanCase{"AxesAndBothReversed", {1}, {1}, {1, -1}, {0, 1}, {3, 5}}),
    [](const ::testing::TestParamInfo<ScanCase>& i) { return i.param.name; });

// Two more kinds of state: an int64 step counter the body uses (saved per step, carries no
// gradient) and a weight passed in as a state the body returns unchanged (read from the outer
// value by the backward, its gradient summed over the steps).
TEST(ScanGrad, CounterAndPassThroughStates) {
  onnx::GraphProto b;
  b.set_name("step");
  *b.add_input() = value("s", kF64, 1);
  *b.add_input() = value("k", onnx::TensorProto::INT64, 0);
  *b.add_input() = value("v", kF64, 1);
  *b.add_input() = value("x_t", kF64, 1);
  addNode(&b, "Cast", {"k"}, {"kf"}, {attrI("to", kF64)});
  addNode(&b, "Mul", {"s", "v"}, {"sv"});
  addNode(&b, "Mul", {"x_t", "kf"}, {"xk"});
  addNode(&b, "Add", {"sv", "xk"}, {"pre"});
  addNode(&b, "Sin", {"pre"}, {"s_next"});
  addNode(&b, "Add", {"k", "one"}, {"k_next"});
  addNode(&b, "Identity", {"v"}, {"v_next"});
  addNode(&b, "Mul", {"s_next", "s"}, {"y"});
  *b.add_output() = value("s_next", kF64, 1);
  *b.add_output() = value("k_next", onnx::TensorProto::INT64, 0);
  *b.add_output() = value("v_next", kF64, 1);
  *b.add_output() = value("y", kF64, 1);
  Model m(16);
  m.trainable("s0", {2}).trainable("v0", {2}).trainable("X", {5, 2});
  m.fixed("k0", onnx::TensorProto::INT64, {}, {1}).fixed("one", onnx::TensorProto::INT64, {}, {1});
  m.node("Scan", {"s0", "k0", "v0", "X"}, {"s_final", "k_final", "v_final", "Y"},
         {graphAttr("body", b), attrI("num_scan_inputs", 1)});
  ASSERT_TRUE(m.finish({"s_final", "Y"}));
  expectMatchesFiniteDifferences(m, "CounterAndPassThroughStates");
}

// A Scan inside the body of a Scan, the inner body reading the outer graph's weight: the
// autodiff recurses into both bodies, and the weight's gradient sums over both loops.
TEST(ScanGrad, NestedScanReadsOuterWeight) {
  onnx::GraphProto inner;
  inner.set_name("inner");
  *inner.add_input() = value("a", kF64, 1);
  *inner.add_input() = value("e", kF64, 1);
  addNode(&inner, "Mul", {"a", "W"}, {"aw"});
  addNode(&inner, "Add", {"aw", "e"}, {"a_pre"});
  addNode(&inner, "Tanh", {"a_pre"}, {"a_next"});
  *inner.add_output() = value("a_next", kF64, 1);
  onnx::GraphProto outer;
  outer.set_name("outer");
  *outer.add_input() = value("s", kF64, 1);
  *outer.add_input() = value("x_t", kF64, 2);
  addNode(&outer, "Scan", {"s", "x_t"}, {"s_inner"},
          {graphAttr("body", inner), attrI("num_scan_inputs", 1)});
  addNode(&outer, "Mul", {"s_inner", "s"}, {"y"});
  *outer.add_output() = value("s_inner", kF64, 1);
  *outer.add_output() = value("y", kF64, 1);
  Model m(16);
  m.trainable("s0", {2}).trainable("X", {3, 2, 2}).trainable("W", {2});
  m.node("Scan", {"s0", "X"}, {"s_final", "Y"},
         {graphAttr("body", outer), attrI("num_scan_inputs", 1)});
  ASSERT_TRUE(m.finish({"s_final", "Y"}));
  expectMatchesFiniteDifferences(m, "NestedScanReadsOuterWeight");
}

// An op without a gradient inside the body: the error names the Scan, its body and the op.
TEST(ScanGrad, BodyOpWithoutGradientIsAnErrorNamingIt) {
  onnx::GraphProto b;
  b.set_name("step");
  *b.add_input() = value("s", kF64, 1);
  *b.add_input() = value("x_t", kF64, 1);
  addNode(&b, "Add", {"s", "x_t"}, {"sum"});
  b.mutable_node(0)->set_name("step_add");
  addNode(&b, "Floor", {"sum"}, {"s_next"});
  b.mutable_node(1)->set_name("step_floor");
  *b.add_output() = value("s_next", kF64, 1);
  Model m(16);
  m.trainable("s0", {2}).trainable("X", {3, 2});
  m.node("Scan", {"s0", "X"}, {"s_final"}, {graphAttr("body", b), attrI("num_scan_inputs", 1)});
  m.graph()->mutable_node(0)->set_name("my_scan");
  ASSERT_TRUE(m.finish({"s_final"}));
  GradientGraphOptions opt;
  opt.losses = {"loss"};
  opt.trainable = m.wrt();
  auto gg = buildGradientGraph(m.proto(), opt);
  ASSERT_FALSE(gg.ok());
  EXPECT_NE(gg.message().find("node 'my_scan' (Scan"), std::string::npos) << gg.message();
  EXPECT_NE(gg.message().find("body 'step'"), std::string::npos) << gg.message();
  EXPECT_NE(gg.message().find("node 'step_floor' (Floor"), std::string::npos) << gg.message();
}

// ---- Loop -----------------------------------------------------------------------------------

// Body: (i, cond, s [2]) -> (cond', s' = Tanh(s * W + i), y = s' * s), W read from the outer
// graph; cond' = cond for a fixed trip count, or i < 2 for a loop that stops early.
onnx::GraphProto loopBody(bool stopEarly) {
  onnx::GraphProto b;
  b.set_name("loop_step");
  *b.add_input() = value("i", onnx::TensorProto::INT64, 0);
  *b.add_input() = value("cond", onnx::TensorProto::BOOL, 0);
  *b.add_input() = value("s", kF64, 1);
  addNode(&b, "Cast", {"i"}, {"i_f"}, {attrI("to", kF64)});
  addNode(&b, "Mul", {"s", "W"}, {"sw"});
  addNode(&b, "Add", {"sw", "i_f"}, {"pre"});
  addNode(&b, "Tanh", {"pre"}, {"s_next"});
  addNode(&b, "Mul", {"s_next", "s"}, {"y"});
  if (stopEarly)
    addNode(&b, "Less", {"i", "two"}, {"cond_next"});
  else
    addNode(&b, "Identity", {"cond"}, {"cond_next"});
  *b.add_output() = value("cond_next", onnx::TensorProto::BOOL, 0);
  *b.add_output() = value("s_next", kF64, 1);
  *b.add_output() = value("y", kF64, 1);
  return b;
}

TEST(LoopGrad, FixedTripCount) {
  Model m(16);
  m.trainable("s0", {2}).trainable("W", {2});
  m.fixed("M", onnx::TensorProto::INT64, {}, {4});
  m.fixed("go", onnx::TensorProto::BOOL, {}, {1});
  m.node("Loop", {"M", "go", "s0"}, {"s_final", "Y"}, {graphAttr("body", loopBody(false))});
  ASSERT_TRUE(m.finish({"s_final", "Y"}));
  expectMatchesFiniteDifferences(m, "LoopFixedTripCount");
}

// The condition ends the loop after 3 of at most 10 steps: the backward replays the 3 that ran.
TEST(LoopGrad, ConditionStopsEarly) {
  Model m(16);
  m.trainable("s0", {2}).trainable("W", {2});
  m.fixed("M", onnx::TensorProto::INT64, {}, {10});
  m.fixed("go", onnx::TensorProto::BOOL, {}, {1});
  m.fixed("two", onnx::TensorProto::INT64, {}, {2});
  m.node("Loop", {"M", "go", "s0"}, {"s_final", "Y"}, {graphAttr("body", loopBody(true))});
  ASSERT_TRUE(m.finish({"s_final", "Y"}));
  expectMatchesFiniteDifferences(m, "LoopConditionStopsEarly");
}

}  // namespace
