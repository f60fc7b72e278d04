// Every op of the catalogue against the engine: which ones run (a kernel in some table, or an
// ONNX function body the session expands) must match the list of those that do not,
// tests/engine/ops_without_kernel.txt. Removing a kernel from a table makes an op fall off and
// fails here; so does an op that starts to run while still listed (take it off the list). Every
// op autodiff differentiates must run, and `deepwire describe` says both.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "engine/kernel.h"
#include "engine/op_support.h"
#include "nodes/catalogue.h"
#include "tests/graph/test_util.h"

using namespace dw::engine;

namespace {

std::set<std::string> listedWithoutKernel() {
  std::set<std::string> s;
  std::ifstream f(std::string(DW_SOURCE_DIR) + "/tests/engine/ops_without_kernel.txt");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty() && line[0] != '#') s.insert(line);
  return s;
}

TEST(OpSupport, CatalogueOpsRunUnlessListed) {
  const auto listed = listedWithoutKernel();
  ASSERT_FALSE(listed.empty()) << "tests/engine/ops_without_kernel.txt is missing";
  std::set<std::string> without;
  int ops = 0;
  for (const auto* s : dw::Catalogue::instance().all()) {
    if (s->kind != dw::NodeKind::Op) continue;
    ++ops;
    const OpSupport sup = opSupport(s->domain, s->type, s->version);
    if (!sup.runs()) without.insert(s->key());
    if (sup.gradient) {
      EXPECT_TRUE(sup.runs()) << s->key() << " has a gradient builder but nothing runs it";
    }
  }
  for (const auto& k : without)
    EXPECT_TRUE(listed.count(k)) << k << " has no kernel and no function body (was it removed "
                                 << "from a kernel table?)";
  for (const auto& k : listed)
    EXPECT_TRUE(without.count(k)) << k
                                  << " runs now: take it off tests/engine/ops_without_kernel.txt";
  std::printf("%d catalogue ops, %zu without a kernel\n", ops, without.size());
}

TEST(OpSupport, KnownOps) {
  const OpSupport relu = opSupport("ai.onnx", "Relu", 14);
  EXPECT_TRUE(relu.runs());
  EXPECT_TRUE(relu.gradient);
  EXPECT_NE(std::find(relu.tables.begin(), relu.tables.end(), kReferenceTable), relu.tables.end());
  const OpSupport argmax = opSupport("", "ArgMax", 13);
  EXPECT_TRUE(argmax.runs());
  EXPECT_FALSE(argmax.gradient);
  EXPECT_FALSE(opSupport("", "NoSuchOp", 13).runs());
}

TEST(OpSupport, DescribeShowsKernelsAndGradient) {
  std::string out;
  ASSERT_EQ(dw::test::runCommand(std::string(DW_CLI_PATH) + " describe Conv", &out), 0) << out;
  EXPECT_NE(out.find("Runs on: "), std::string::npos) << out;
  EXPECT_NE(out.find(kOneDnnTable), std::string::npos) << out;
  EXPECT_NE(out.find("Gradient: yes"), std::string::npos) << out;
  ASSERT_EQ(dw::test::runCommand(std::string(DW_CLI_PATH) + " describe ArgMax --json", &out), 0);
  EXPECT_NE(out.find("\"gradient\": false"), std::string::npos) << out;
}

}  // namespace
