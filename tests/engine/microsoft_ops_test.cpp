// The com.microsoft operators (nodes/microsoft_domain.cpp) against ONNX Runtime 1.30, which
// defines them: tests/golden/ort-contrib holds one-node models with ONNX Runtime's outputs
// (tests/golden/make_microsoft_cases.py), every attribute and activation its kernels take. Each
// runs through a session (the planner inlines the op's body) within the backend tests' tolerance,
// and passes validation, libonnx's checker and strict shape inference, whose inferred output
// types must be the ones ONNX Runtime returned.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "engine/conformance.h"
#include "engine/session.h"
#include "graphs/onnx_export.h"
#include "nodes/catalogue.h"
#include "nodes/schema_facts.h"
#include "tests/engine/onnx_builder.h"

namespace {

namespace fs = std::filesystem;
using dw::engine::CaseStatus;

onnx::ModelProto load(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(ss.str())) << p;
  return m;
}

std::vector<fs::path> cases(const std::string& suite = "ort-contrib") {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(fs::path(DW_SOURCE_DIR) / "tests/golden" / suite))
    v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

void matchOnnxRuntime(const std::string& suite, size_t atLeast) {
  (void)dw::Catalogue::instance();  // registers the com.microsoft and newer ai.onnx schemas
  const auto all = cases(suite);
  ASSERT_GE(all.size(), atLeast);
  for (const auto& dir : all) {
    SCOPED_TRACE(dir.filename().string());
    const auto r = dw::engine::runConformanceCase(dir.string(), suite, {});
    EXPECT_EQ(r.status, CaseStatus::kPassed) << r.reason;
  }
}

void passCheckerAndStrictInference(const std::string& suite) {
  (void)dw::Catalogue::instance();
  for (const auto& dir : cases(suite)) {
    SCOPED_TRACE(dir.filename().string());
    onnx::ModelProto m = load(dir / "model.onnx");
    bool unsafe = false;
    ASSERT_TRUE(dw::validateModelNodes(m, unsafe).ok());
    try {
      onnx::checker::check_model(m);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    const dw::Status st = dw::inferShapesSafely(m, true, 1, false);
    EXPECT_TRUE(st.ok()) << st.message();
  }
}

TEST(MicrosoftOps, MatchOnnxRuntime) {
  matchOnnxRuntime("ort-contrib", 40);
}

TEST(MicrosoftOps, PassCheckerAndStrictInference) {
  passCheckerAndStrictInference("ort-contrib");
}

// The com.microsoft operators ONNX Runtime runs only on its GPU, against float64 references
// from their definitions (tests/golden/make_reference_cases.py).
TEST(MicrosoftOps, MatchFloat64References) {
  matchOnnxRuntime("ref-contrib", 10);
}

TEST(MicrosoftOps, ReferenceCasesPassCheckerAndStrictInference) {
  passCheckerAndStrictInference("ref-contrib");
}

// The ai.onnx operators added after opset 17 (kernels/opset18_ops.cpp and others), against ONNX
// Runtime's outputs in tests/golden/ort-onnx.
TEST(NewerOnnxOps, MatchOnnxRuntime) {
  matchOnnxRuntime("ort-onnx", 10);
}

// libonnx 1.12 knows neither these opsets nor IR version 10 (which ONNX Runtime wants for
// them): `deepwire check` judges such models on the catalogue's schemas instead.
TEST(NewerOnnxOps, PassDeepwireCheck) {
  (void)dw::Catalogue::instance();
  for (const char* suite : {"ort-onnx", "torch-opset23"})
    for (const auto& dir : cases(suite)) {
      SCOPED_TRACE(dir.filename().string());
      const dw::Status st = dw::checkOnnxModel(load(dir / "model.onnx"));
      EXPECT_TRUE(st.ok()) << st.message();
    }
}

// A transformer block as an opset-23 exporter writes it (RMSNormalization, Attention with four
// causal heads, Gelu, MatMul projections, residual Adds), built by
// tests/golden/make_opset23_transformer.py, against the same block computed by torch in float64
// (ONNX Runtime 1.30 agrees with that reference within 5e-7).
TEST(NewerOnnxOps, Opset23TransformerBlockMatchesTorch) {
  matchOnnxRuntime("torch-opset23", 2);
}

// What a node the body builder refuses reports: the node, the op and why, not "unsupported".
TEST(MicrosoftOps, RefusedAttributesSayWhy) {
  (void)dw::Catalogue::instance();
  onnx::ModelProto m =
      load(fs::path(DW_SOURCE_DIR) / "tests/golden/ort-contrib/fusedgemm_relu/model.onnx");
  m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->set_s("Swoosh");
  for (auto& a : *m.mutable_graph()->mutable_node(0)->mutable_attribute())
    if (a.name() == "activation") a.set_s("Swoosh");
  auto s = dw::engine::InferenceSession::create(m, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("FusedGemm"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("activation 'Swoosh' is not one of"), std::string::npos)
      << s.message();
}

// Nodes whose attributes or shapes their body cannot take: the error names the node of the
// model (not a node of its body), the op, and what is wrong, and nothing crashes.
TEST(MicrosoftOps, BadNodesAreNamedErrors) {
  using dw::engine::test::addInit;
  using dw::engine::test::addNode;
  using dw::engine::test::attrI;
  using dw::engine::test::attrS;
  using dw::engine::test::randomTensor;
  struct Case {
    std::string op;
    std::vector<dw::engine::Shape> shapes;
    std::function<void(onnx::NodeProto*)> attrs;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"FusedMatMul",
       {{3}, {3, 2}},
       [](onnx::NodeProto* n) { attrI(n, "transA", 1); },
       "A has 1 dimension(s); a transposed operand needs 2 or more"},
      {"FusedMatMul",
       {{3, 2}, {2, 3}},
       [](onnx::NodeProto* n) { attrI(n, "transBatchA", 1); },
       "transBatchA/B need 3 or more"},
      {"CDist",
       {{2, 3, 4}, {5, 4}},
       [](onnx::NodeProto*) {},
       "A has 3 dimension(s); CDist takes A (N x D) and B (M x D)"},
      {"FusedConv",
       {{1, 1, 3, 3}, {1, 1, 1, 1}},
       [](onnx::NodeProto* n) { attrS(n, "activation", "Gelu"); },
       "activation 'Gelu' is not one of"},
      {"SkipLayerNormalization",
       {{2, 4}, {2, 4}, {3}},
       [](onnx::NodeProto*) {},
       "in its LayerNormalization"},
      {"Inverse", {{2, 3}}, [](onnx::NodeProto*) {}, "must hold square matrices"},
      {"UnfoldTensor",
       {{3, 4}},
       [](onnx::NodeProto* n) {
         attrI(n, "size", 2);
         attrI(n, "dim", 5);
       },
       "dim 5 is outside the 2 dimension(s) of input"},
      {"NGramRepeatBlock",
       {{2, 3}, {2, 5}},
       [](onnx::NodeProto*) {},
       "the required attribute 'ngram_size' is missing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op + ": " + c.want);
    auto m = dw::engine::test::emptyModel();
    auto* imp = m.add_opset_import();
    imp->set_domain("com.microsoft");
    imp->set_version(1);
    auto* g = m.mutable_graph();
    std::vector<std::string> ins;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      ins.push_back("in" + std::to_string(i));
      addInit(g, ins.back(), randomTensor(c.shapes[i], 3 + static_cast<uint32_t>(i)));
    }
    auto* n = addNode(g, c.op, ins, {"y"});
    n->set_domain("com.microsoft");
    n->set_name("bad");
    c.attrs(n);
    g->add_output()->set_name("y");
    std::string message;
    auto s = dw::engine::InferenceSession::create(m, {});
    if (!s.ok()) {
      message = s.message();
    } else {
      auto r = (*s)->run({});
      ASSERT_FALSE(r.ok());
      message = r.message();
    }
    // Expansion errors say the domain too ("'bad' (FusedConv, com.microsoft)"), kernel errors
    // the op.
    EXPECT_NE(message.find("'bad' (" + c.op), std::string::npos) << message;
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
  }
}

// A golden case's inputs (test_data_set_0/input_N.pb), by name.
std::map<std::string, dw::engine::Tensor> caseInputs(const fs::path& dir) {
  std::map<std::string, dw::engine::Tensor> in;
  for (int i = 0;; ++i) {
    const fs::path p = dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    onnx::TensorProto t;
    EXPECT_TRUE(t.ParseFromString(ss.str())) << p;
    auto tensor = dw::engine::tensorFromProto(t);
    EXPECT_TRUE(tensor.ok()) << tensor.message();
    if (tensor.ok()) in[t.name()] = *tensor;
  }
  return in;
}

// A golden case of `suite` run on its inputs as `edit` changes them.
template <class Edit>
auto runEdited(const std::string& suite, const std::string& name, Edit edit) {
  const fs::path dir = fs::path(DW_SOURCE_DIR) / "tests/golden" / suite / name;
  auto session = dw::engine::InferenceSession::create(load(dir / "model.onnx"));
  EXPECT_TRUE(session.ok()) << session.message();
  auto in = caseInputs(dir);
  edit(in);
  return (*session)->run(in);
}

// Inputs that would make the new kernels read out of bounds or size huge outputs are errors
// that say which input and why.
TEST(MicrosoftOps, KernelsRefuseInputsOutsideTheirRange) {
  (void)dw::Catalogue::instance();
  auto run = [](const std::string& name, auto edit) {
    return runEdited("ort-contrib", name, edit);
  };
  // total_sequence_length far beyond the past and the new tokens: 2^31 - 1 sized the present
  // caches at 8 GB.
  auto r = run("gqa_prompt", [](auto& in) {
    in["total_sequence_length"].template data<int32_t>()[0] = 2147483647;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("total_sequence_length is 2147483647"), std::string::npos)
      << r.message();
  // A NaN region samples nothing: every value is the extrapolation value.
  r = run("cropandresize_bilinear",
          [](auto& in) { in["rois"].template data<float>()[0] = std::nanf(""); });
  ASSERT_TRUE(r.ok()) << r.message();
  const auto& y = r->at("Y");
  const int64_t perRegion = y.size() / y.dim(0);
  for (int64_t i = 0; i < perRegion; ++i) EXPECT_EQ(y.template data<float>()[i], -1.0f) << i;
  // A region of an image the batch does not have.
  r = run("cropandresize_bilinear",
          [](auto& in) { in["batch_indices"].template data<int32_t>()[1] = 7; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("batch_indices[1] is 7"), std::string::npos) << r.message();
  // A string that is not UTF-8.
  r = run("tokenizer_separators_mark",
          [](auto& in) { in["X"].strings()[4] = std::string("caf\xe9 au lait"); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("X[4] is not valid UTF-8"), std::string::npos) << r.message();
  // Overlong and surrogate forms are not UTF-8 either.
  for (const char* bad : {"a\xC0\x80b", "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    r = run("tokenizer_separators_mark", [&](auto& in) { in["X"].strings()[1] = bad; });
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("X[1] is not valid UTF-8"), std::string::npos) << r.message();
  }
  // A guess from past the end of the source, and one of the wrong length.
  r = run("bifurcationdetector_guess_differs",
          [](auto& in) { in["prev_suffix_match_idx"].template data<int64_t>()[0] = 9; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("prev_suffix_match_idx is 9"), std::string::npos) << r.message();
  r = run("bifurcationdetector_guess_differs",
          [](auto& in) { in["prev_suffix_match_idx"].template data<int64_t>()[0] = 3; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("pred_tokens has 7 tokens"), std::string::npos) << r.message();
  // MatMulFpQ4's B_shape claiming more columns than B's bytes hold, and a K that is not A's.
  r = run("matmulfpq4_type1", [](auto& in) { in["B_shape"].template data<int64_t>()[1] = 7; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("B holds 378 bytes; 7 columns of 3 blocks of 21 bytes need 441"),
            std::string::npos)
      << r.message();
  r = run("matmulfpq4_type1", [](auto& in) { in["B_shape"].template data<int64_t>()[0] = 64; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("A's last axis has 70 values, but B_shape says K is 64"),
            std::string::npos)
      << r.message();
}

// Validation builds each body from the types the graph declares, so `check` reports what the
// planner would refuse: an attribute value the op does not have, weights of the wrong layout.
TEST(MicrosoftOps, ValidationFindsWhatABodyRefuses) {
  (void)dw::Catalogue::instance();
  const fs::path golden = fs::path(DW_SOURCE_DIR) / "tests/golden";
  auto problem = [](onnx::ModelProto m) {
    bool unsafe = false;
    return dw::validateModelNodes(m, unsafe);
  };
  onnx::ModelProto moe = load(golden / "ort-contrib/moe_relu_top2/model.onnx");
  ASSERT_TRUE(problem(moe).ok());
  auto* act = moe.mutable_graph()->mutable_node(0)->add_attribute();
  act->set_name("activation_type");
  act->set_type(onnx::AttributeProto::STRING);
  act->set_s("tanh");
  auto st = problem(moe);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(MoE, com.microsoft): activation_type 'tanh' is not one of"),
            std::string::npos)
      << st.message();
  onnx::ModelProto nhwc = load(golden / "ref-contrib/nhwcconv_bias_strides_pads/model.onnx");
  ASSERT_TRUE(problem(nhwc).ok());
  // X declared with 4 channels, against W's [4, 3, 3, 3] (M, kH, kW, C = 3).
  nhwc.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(3)
      ->set_dim_value(4);
  st = problem(nhwc);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("its last axis must be C / group = 4"), std::string::npos)
      << st.message();
}

// Dropout in training mode takes a ratio in [0, 1): -0.5 kept every value and scaled it by
// 1 / 1.5.
TEST(MicrosoftOps, DropoutRefusesARatioOutsideItsRange) {
  (void)dw::Catalogue::instance();
  const fs::path dir =
      fs::path(DW_SOURCE_DIR) / "tests/golden/ref-contrib/bitmaskdropout_inference";
  auto session = dw::engine::InferenceSession::create(load(dir / "model.onnx"));
  ASSERT_TRUE(session.ok()) << session.message();
  for (float ratio : {-0.5f, 1.0f}) {
    auto in = caseInputs(dir);
    in["training_mode"].data<bool>()[0] = true;
    in["ratio"].data<float>()[0] = ratio;
    auto r = (*session)->run(in);
    ASSERT_FALSE(r.ok()) << ratio;
    EXPECT_NE(r.message().find("a dropout ratio must be in [0, 1)"), std::string::npos)
        << r.message();
  }
}

// BitmaskDropout in training: each kept element is scaled by 1 / (1 - ratio) and has its bit
// set, each dropped one is zero with its bit clear, and the bits past the last element are clear
// (in inference the reference case has them all set, as ONNX Runtime fills the mask).
TEST(MicrosoftOps, BitmaskDropoutTrainingPacksItsMask) {
  (void)dw::Catalogue::instance();
  const fs::path dir =
      fs::path(DW_SOURCE_DIR) / "tests/golden/ref-contrib/bitmaskdropout_inference";
  auto session = dw::engine::InferenceSession::create(load(dir / "model.onnx"));
  ASSERT_TRUE(session.ok()) << session.message();
  auto in = caseInputs(dir);
  in["training_mode"].data<bool>()[0] = true;
  const float ratio = in["ratio"].data<float>()[0];
  auto r = (*session)->run(in);
  ASSERT_TRUE(r.ok()) << r.message();
  const auto& x = in["data"];
  const auto& y = r->at("output");
  const auto& mask = r->at("mask");
  ASSERT_EQ(mask.size(), 2);
  int kept = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(i);
    const bool bit = (mask.data<uint32_t>()[i / 32] >> (i % 32)) & 1u;
    kept += bit;
    if (bit)
      EXPECT_NEAR(y.data<float>()[i], x.data<float>()[i] / (1 - ratio), 1e-6);
    else
      EXPECT_EQ(y.data<float>()[i], 0.0f);
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x.size());
  EXPECT_EQ(mask.data<uint32_t>()[1] >> (x.size() - 32), 0u) << "bits past the last element";
}

// QLinearReduceMean, which ONNX Runtime 1.30's CPU build does not run: uint8 data dequantized,
// averaged and requantized, against values worked out here.
TEST(MicrosoftOps, QLinearReduceMeanWorkedValues) {
  using dw::engine::Tensor;
  auto m = dw::engine::test::emptyModel(18);
  auto* imp = m.add_opset_import();
  imp->set_domain("com.microsoft");
  imp->set_version(1);
  auto* g = m.mutable_graph();
  const std::vector<std::string> names{"data", "data_scale", "data_zero_point", "reduced_scale",
                                       "reduced_zero_point"};
  const std::vector<int32_t> types{onnx::TensorProto::UINT8, onnx::TensorProto::FLOAT,
                                   onnx::TensorProto::UINT8, onnx::TensorProto::FLOAT,
                                   onnx::TensorProto::UINT8};
  auto* n = g->add_node();
  n->set_op_type("QLinearReduceMean");
  n->set_domain("com.microsoft");
  for (size_t i = 0; i < names.size(); ++i) {
    n->add_input(names[i]);
    auto* v = g->add_input();
    v->set_name(names[i]);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(types[i]);
  }
  n->add_output("reduced");
  g->add_output()->set_name("reduced");
  auto* axes = n->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(1);
  auto* keep = n->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  auto s = dw::engine::InferenceSession::create(m, {});
  ASSERT_TRUE(s.ok()) << s.message();
  auto u8 = [](std::vector<uint8_t> v, dw::engine::Shape sh) {
    Tensor t(dw::engine::DType::kUInt8, sh);
    std::copy(v.begin(), v.end(), t.data<uint8_t>());
    return t;
  };
  // Rows (x - 10) * 0.5: [1, 2, 3] and [-5, 0, 10]; means 2 and 5/3; over scale 0.25 and zero
  // point 100: 2 / 0.25 + 100 = 108 and 1.6667 / 0.25 = 6.67 -> 7, + 100 = 107.
  auto r = (*s)->run({{"data", u8({12, 14, 16, 0, 10, 30}, {2, 3})},
                      {"data_scale", Tensor::fromVector(std::vector<float>{0.5f}, {})},
                      {"data_zero_point", u8({10}, {})},
                      {"reduced_scale", Tensor::fromVector(std::vector<float>{0.25f}, {})},
                      {"reduced_zero_point", u8({100}, {})}});
  ASSERT_TRUE(r.ok()) << r.message();
  const Tensor& y = r->at("reduced");
  ASSERT_EQ(y.shape(), (dw::engine::Shape{2}));
  EXPECT_EQ(y.data<uint8_t>()[0], 108);
  EXPECT_EQ(y.data<uint8_t>()[1], 107);
}

// Block floating point (deepwire's layout, engine/kernels/bfp.cpp): QuantizeBFP then
// DequantizeBFP gives back each value within half a step of its block, quantizing that again
// gives the same bytes, bfloat16 output holds BFP_1_8_8_16's 8-bit magnitudes exactly, and what
// the layout cannot hold or read is refused with the reason.
TEST(MicrosoftOps, BlockFloatingPointRoundTripsAndRefusesWhatItCannotRead) {
  using dw::engine::test::addInit;
  using dw::engine::test::addNode;
  using dw::engine::test::attrI;
  (void)dw::Catalogue::instance();
  auto model = [](int64_t type, int64_t dtype, const dw::engine::Tensor& x) {
    auto m = dw::engine::test::emptyModel();
    auto* imp = m.add_opset_import();
    imp->set_domain("com.microsoft");
    imp->set_version(1);
    auto* g = m.mutable_graph();
    addInit(g, "x", x);
    for (auto* n : {addNode(g, "QuantizeBFP", {"x"}, {"q", "shape", "strides"}),
                    addNode(g, "DequantizeBFP", {"q", "shape", "strides"}, {"y"})}) {
      n->set_domain("com.microsoft");
      attrI(n, "bfp_type", type);
      attrI(n, "block_dim", 1);
    }
    attrI(g->mutable_node(1), "dtype", dtype);
    g->mutable_node(0)->set_name("quantize");
    for (const char* out : {"q", "y"}) g->add_output()->set_name(out);
    return m;
  };
  // Blocks along axis 1 of [3, 21, 2]: lines of 21 values end in blocks of 5, padded.
  dw::engine::Tensor x = dw::engine::test::randomTensor({3, 21, 2}, 11, -4, 4);
  x.data<float>()[7] = 1e-30f;
  for (int64_t type : {0, 1}) {
    SCOPED_TRACE("bfp_type " + std::to_string(type));
    const int mantissa = type == 0 ? 8 : 4;
    auto s = dw::engine::InferenceSession::create(model(type, 1, x), {});
    ASSERT_TRUE(s.ok()) << s.message();
    auto r = (*s)->run({});
    ASSERT_TRUE(r.ok()) << r.message();
    const dw::engine::Tensor& y = r->at("y");
    ASSERT_EQ(y.shape(), x.shape());
    ASSERT_EQ(r->at("q").size(), 3 * 2 * 2 * (type == 0 ? 19 : 11));
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t b = 0; b < 21; b += 16) {
          float largest = 0;
          for (int64_t k = b; k < std::min<int64_t>(b + 16, 21); ++k)
            largest = std::max(largest, std::fabs(x.data<float>()[(i * 21 + k) * 2 + j]));
          int e = 0;
          std::frexp(largest, &e);
          // The step is 2^(e - mantissa) or, where rounding raised the exponent, twice that.
          const float step = std::ldexp(1.0f, e - mantissa + 1);
          for (int64_t k = b; k < std::min<int64_t>(b + 16, 21); ++k) {
            const int64_t at = (i * 21 + k) * 2 + j;
            EXPECT_LE(std::fabs(y.data<float>()[at] - x.data<float>()[at]), step / 2) << at;
          }
        }
    // Quantizing the dequantized tensor again gives the same bytes.
    auto again = dw::engine::InferenceSession::create(model(type, 1, y), {});
    ASSERT_TRUE(again.ok()) << again.message();
    auto r2 = (*again)->run({});
    ASSERT_TRUE(r2.ok()) << r2.message();
    EXPECT_EQ(std::memcmp(r2->at("q").raw(), r->at("q").raw(), r->at("q").size()), 0);
    if (type == 0) {
      auto bf = dw::engine::InferenceSession::create(model(type, 16, x), {});
      ASSERT_TRUE(bf.ok()) << bf.message();
      auto r3 = (*bf)->run({});
      ASSERT_TRUE(r3.ok()) << r3.message();
      ASSERT_EQ(r3->at("y").dtype(), dw::engine::DType::kBFloat16);
      for (int64_t i = 0; i < y.size(); ++i)
        EXPECT_EQ(dw::engine::bf16ToFloat(r3->at("y").data<uint16_t>()[i]), y.data<float>()[i]);
    }
  }
  // A hardware's own type, NaN, and bytes or strides that do not fit the shape.
  auto custom = dw::engine::InferenceSession::create(model(2, 1, x), {});
  ASSERT_FALSE(custom.ok());
  EXPECT_NE(custom.message().find("Custom_BFP_0) is reserved for a hardware's own layout"),
            std::string::npos)
      << custom.message();
  // `check` judges the attributes too, before anything runs.
  onnx::ModelProto five = model(5, 1, x);
  const dw::Status checked = dw::inferShapesSafely(five, true, 1, false);
  EXPECT_NE(checked.message().find("bfp_type 5 is not a BFP type"), std::string::npos)
      << checked.message();
  dw::engine::Tensor withNan = x;
  withNan.data<float>()[5] = std::nanf("");
  auto nan = (*dw::engine::InferenceSession::create(model(0, 1, withNan), {}))->run({});
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.message().find("quantize"), std::string::npos) << nan.message();
  EXPECT_NE(nan.message().find("at flat index 5; BFP has no code for NaN"), std::string::npos)
      << nan.message();
  auto run = [](const std::string& name, auto edit) {
    return runEdited("ref-contrib", name, edit);
  };
  auto r = run("dequantizebfp_m8_row_major", [](auto& in) {
    in["shape"].template data<int64_t>()[2] = 40;
    in["strides"].template data<int64_t>()[0] = 200;
    in["strides"].template data<int64_t>()[1] = 40;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("x holds 380 bytes; shape [2, 5, 40] with block_dim 2 makes 30 "
                             "blocks of 19 bytes (bfp_type 0), 570 bytes"),
            std::string::npos)
      << r.message();
  r = run("dequantizebfp_m8_row_major",
          [](auto& in) { in["strides"].template data<int64_t>()[0] = 50; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("strides [50, 20, 1] are not a dense layout of [2, 5, 20]"),
            std::string::npos)
      << r.message();
  r = run("dequantizebfp_m8_row_major",
          [](auto& in) { in["shape"].template data<int64_t>()[1] = -5; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("shape [2, -5, 20] has a negative size"), std::string::npos)
      << r.message();
}

}  // namespace
