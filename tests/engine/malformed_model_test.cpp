// Models whose nodes disagree with their schemas (issue 19): each is refused when the session is
// created, with the node, what it has and what the op takes, before shape inference or a
// kernel could trust it.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <functional>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

using namespace dw::engine;
using namespace dw::engine::test;

namespace {

using N = onnx::NodeProto*;

// A one-node model over float inputs x0..x{inputs-1} of shape [1, 2, 4, 4].
std::string createError(const std::string& op, std::vector<std::string> in, int outputs,
                        const std::function<void(N)>& attrs = nullptr) {
  onnx::ModelProto m = emptyModel(17);
  auto* g = m.mutable_graph();
  for (const auto& name : in)
    if (!name.empty()) addValue(g->add_input(), name, {1, 2, 4, 4});
  std::vector<std::string> out;
  for (int i = 0; i < outputs; ++i) out.push_back("y" + std::to_string(i));
  N n = addNode(g, op, in, out);
  n->set_name("bad");
  if (attrs) attrs(n);
  for (const auto& o : out) addValue(g->add_output(), o, {});
  auto s = InferenceSession::create(m);
  return s.ok() ? std::string() : s.message();
}

TEST(MalformedModel, TooFewInputs) {
  const std::string e = createError("Add", {"x0"}, 1);
  EXPECT_NE(e.find("node 'bad' (Add) has 1 input(s); Add (opset 17) takes 2: A, B"),
            std::string::npos)
      << e;
  EXPECT_NE(createError("Relu", {}, 1).find("has 0 input(s)"), std::string::npos);
}

TEST(MalformedModel, TooManyInputs) {
  const std::string e = createError("Conv", {"x0", "x1", "x2", "x3"}, 1);
  EXPECT_NE(e.find("has 4 input(s); Conv (opset 17) takes 2 to 3: X, W, B?"), std::string::npos)
      << e;
}

TEST(MalformedModel, RequiredInputWithoutName) {
  const std::string e = createError("Gemm", {"", "x1"}, 1);
  EXPECT_NE(e.find("input 0 (A) is required but has no name"), std::string::npos) << e;
}

TEST(MalformedModel, TooManyOutputs) {
  const std::string e = createError("Relu", {"x0"}, 2);
  EXPECT_NE(e.find("has 2 output(s); Relu (opset 17) has 1: Y"), std::string::npos) << e;
}

TEST(MalformedModel, ZeroStrideAndKernel) {
  std::string e = createError("Conv", {"x0", "x1"}, 1, [](N n) { attrInts(n, "strides", {0, 1}); });
  EXPECT_NE(e.find("attribute strides has 0; its values must be at least 1"), std::string::npos)
      << e;
  e = createError("MaxPool", {"x0"}, 1, [](N n) { attrInts(n, "kernel_shape", {0, 2}); });
  EXPECT_NE(e.find("attribute kernel_shape has 0"), std::string::npos) << e;
}

TEST(MalformedModel, OmittedOptionalInputsAreFine) {
  EXPECT_EQ(createError("Clip", {"x0", "", ""}, 1), "");
  EXPECT_EQ(createError("Conv", {"x0", "x1", ""}, 1), "");
}

}  // namespace
