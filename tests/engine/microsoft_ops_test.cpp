// The com.microsoft operators (nodes/microsoft_domain.cpp) against ONNX Runtime 1.30, which
// defines them: tests/golden/ort-contrib holds one-node models with ONNX Runtime's outputs
// (tests/golden/make_microsoft_cases.py), every attribute and activation its kernels take. Each
// runs through a session (the planner inlines the op's body) within the backend tests' tolerance,
// and passes validation, libonnx's checker and strict shape inference, whose inferred output
// types must be the ones ONNX Runtime returned.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <functional>
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

// The ai.onnx operators added after opset 17 (kernels/opset18_ops.cpp and others), against ONNX
// Runtime's outputs in tests/golden/ort-onnx.
TEST(NewerOnnxOps, MatchOnnxRuntime) {
  matchOnnxRuntime("ort-onnx", 10);
}

// libonnx 1.12 knows neither these opsets nor IR version 10 (which ONNX Runtime wants for
// them): `deepwire check` judges such models on the catalogue's schemas instead.
TEST(NewerOnnxOps, PassDeepwireCheck) {
  (void)dw::Catalogue::instance();
  for (const auto& dir : cases("ort-onnx")) {
    SCOPED_TRACE(dir.filename().string());
    const dw::Status st = dw::checkOnnxModel(load(dir / "model.onnx"));
    EXPECT_TRUE(st.ok()) << st.message();
  }
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
    EXPECT_NE(message.find("'bad' (" + c.op + ", com.microsoft)"), std::string::npos) << message;
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
  }
}

}  // namespace
