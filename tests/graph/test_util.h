// Helpers shared by the foundation tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "graphs/graph.h"

namespace dw::test {

inline std::string sourceDir() { return DW_SOURCE_DIR; }
inline std::string example(const std::string& name) {
  return sourceDir() + "/resources/examples/" + name;
}

// A fresh empty directory for one test.
inline std::filesystem::path tempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() / "deepwire-tests" /
             (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs a shell command, returning its exit status and capturing stdout (and stderr unless
// mergeStderr is false).
inline int runCommand(const std::string& cmd, std::string* output = nullptr,
                      bool mergeStderr = true) {
  std::string full = mergeStderr ? cmd + " 2>&1" : cmd;
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  std::string out;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A small valid model: x -> Relu -> y.
inline Graph tinyGraph(NodeId* relu = nullptr) {
  Graph g;
  auto in = g.addNode(kGraphDomain, "Input");
  auto r = g.addNode(kOnnxDomain, "Relu");
  auto out = g.addNode(kGraphDomain, "Output");
  EXPECT_TRUE(in.ok() && r.ok() && out.ok());
  EXPECT_TRUE(g.rename(*in, "x").ok());
  EXPECT_TRUE(g.setParam(*in, "type", Param::makeString("float[N,4]")).ok());
  EXPECT_TRUE(g.rename(*out, "y").ok());
  EXPECT_TRUE(g.addLink({{*in, 0}, {*r, 0}}).ok());
  EXPECT_TRUE(g.addLink({{*r, 0}, {*out, 0}}).ok());
  if (relu) *relu = *r;
  return g;
}

}  // namespace dw::test
