// The deepwire command line: output formats, exit codes, and errors on stderr.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "graphs/file_io.h"
#include "test_util.h"

namespace dw {
namespace {

using test::runCommand;

const std::string kCli = DW_CLI_PATH;

std::string run(const std::string& args, int* rc = nullptr) {
  std::string out;
  const int code = runCommand(kCli + " " + args, &out);
  if (rc) *rc = code;
  return out;
}

TEST(Cli, NodesJsonListsTheCatalogue) {
  std::string out;
  ASSERT_EQ(runCommand(kCli + " nodes --json", &out, false), 0);
  auto j = nlohmann::json::parse(out);
  ASSERT_TRUE(j.is_array());
  EXPECT_GE(j.size(), 185u);
  bool found = false;
  for (const auto& n : j) {
    for (const char* key : {"type", "domain", "category", "inputs", "outputs", "params"})
      ASSERT_TRUE(n.contains(key)) << key;
    if (n["type"] != "BatchNormalization" || n["domain"] != "ai.onnx") continue;
    found = true;
    EXPECT_EQ(n["domain"], "ai.onnx");
    EXPECT_EQ(n["category"], "nn");
    std::map<std::string, nlohmann::json> params;
    for (const auto& p : n["params"]) {
      for (const char* key : {"name", "type", "default", "doc"}) ASSERT_TRUE(p.contains(key));
      params[p["name"]] = p["default"];
    }
    EXPECT_FLOAT_EQ(params["epsilon"].get<double>(), 1e-5);
    EXPECT_FLOAT_EQ(params["momentum"].get<double>(), 0.9);
    EXPECT_EQ(params["training_mode"], false);
    EXPECT_EQ(params["lda coeff"], 1.0);
    EXPECT_TRUE(params.count("specified_outputs_name"));
    EXPECT_TRUE(params.count("name"));
  }
  EXPECT_TRUE(found);
}

TEST(Cli, NodesByCategory) {
  int rc = 0;
  const std::string out = run("nodes --category rnn", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("LSTM"), std::string::npos);
  EXPECT_EQ(out.find("Conv "), std::string::npos);
  run("nodes --category nonsense", &rc);
  EXPECT_EQ(rc, 1);
}

// `deepwire nodes WORD`: what a user types to find a node, matched in any case against names,
// seed spellings and descriptions.
TEST(Cli, NodesBySearchWord) {
  int rc = 0;
  std::string out = run("nodes qorderedatt", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("QOrderedAttention"), std::string::npos);
  EXPECT_NE(out.find("1 node type\n"), std::string::npos);
  out = run("nodes --domain com.microsoft ATTENTION", &rc);
  EXPECT_NE(out.find("GroupQueryAttention"), std::string::npos);
  EXPECT_EQ(out.find("deepwire.layers"), std::string::npos);
  run("nodes nosuchthingatall", &rc);
  EXPECT_EQ(rc, 1);
}

TEST(Cli, DescribeShowsTheNodePage) {
  int rc = 0;
  std::string out = run("describe BatchNormalization", &rc);
  EXPECT_EQ(rc, 0);
  for (const char* s : {"input_mean", "running_var (optional", "epsilon : float = 1e-05",
                        "momentum : float = 0.9", "training_mode : bool = false", "lda coeff",
                        "specified_outputs_name", "Graphs in", "Graphs out"})
    EXPECT_NE(out.find(s), std::string::npos) << s;
  out = run("describe LayerNormalization --domain ai.onnx --json", &rc);
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["outputs"].size(), 3u);
  out = run("describe BatchNorm", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("did you mean BatchNormalization"), std::string::npos) << out;
  // An operator newer than the palette's opset: its page at its first version, or at the
  // version a given opset has.
  for (const char* cmd : {"describe RMSNormalization", "describe RMSNormalization --opset 23"}) {
    out = run(cmd, &rc);
    EXPECT_EQ(rc, 0) << cmd;
    for (const char* s : {"since opset 23", "scale", "epsilon", "Gradient: yes"})
      EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
  }
  out = run("describe RMSNormalization --opset 17", &rc);
  EXPECT_EQ(rc, 1);
  // An opset past every operator of the domain is said to be (it showed the latest version).
  out = run("describe Gelu --opset 99 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--opset 99: ai.onnx's operators go up to opset"), std::string::npos) << out;
  // Keras' names for the pooling layers find them.
  out = run("describe MaxPooling2D", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.rfind("MaxPool2D  (deepwire.layers", 0), 0u) << out;
}

TEST(Cli, ExportImportCheck) {
  auto dir = test::tempDir();
  const std::string onnx = (dir / "mlp.onnx").string();
  const std::string proj = (dir / "mlp.dwproj").string();
  int rc = 0;
  std::string out = run("export " + test::example("fashion_mnist_mlp.dwproj") + " -o " + onnx, &rc);
  ASSERT_EQ(rc, 0) << out;
  // The project's data section scales, normalizes and reshapes the IDX pixels: five nodes in
  // front of Flatten, 3 Gemm and 2 Relu, so the model takes the pixels as stored.
  EXPECT_NE(out.find("11 nodes"), std::string::npos) << out;
  std::string plain = run("export " + test::example("fashion_mnist_mlp.dwproj") + " -o " + onnx +
                              " --no-data-conversion",
                          &rc);
  ASSERT_EQ(rc, 0) << plain;
  EXPECT_NE(plain.find("6 nodes"), std::string::npos) << plain;
  out = run("check " + onnx, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = run("import " + onnx + " -o " + proj, &rc);
  ASSERT_EQ(rc, 0) << out;
  out = run("check " + proj, &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST(Cli, CheckReportsOneLinePerProblem) {
  auto dir = test::tempDir();
  const std::string proj = (dir / "bad.dwproj").string();
  std::string text = readFile(test::example("fashion_mnist_mlp.dwproj")).value();
  // Drop the links: every op loses its inputs.
  text = text.substr(0, text.find("\"links\"")) + "\"links\": []}";
  ASSERT_TRUE(writeFileAtomic(proj, text).ok());
  int rc = 0;
  std::string out;
  rc = runCommand(kCli + " check " + proj + " 2>/dev/null", &out, false);
  EXPECT_EQ(rc, 1);
  int lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_GE(lines, 6);
  EXPECT_NE(out.find("Gemm 'fc1' (#"), std::string::npos) << out;
  EXPECT_NE(out.find("required input 'A'"), std::string::npos) << out;
}

// `check` reports what `train` would refuse at once about the training section (a user trial
// found "valid" for a misspelled key, a missing data file and a source feeding no input).
TEST(Cli, CheckReadsTheTrainingSection) {
  auto dir = test::tempDir();
  const std::string text = readFile(test::example("fashion_mnist_mlp.dwproj")).value();
  auto write = [&](const std::string& name, std::string from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    const std::string proj = (dir / name).string();
    EXPECT_TRUE(writeFileAtomic(proj, t).ok());
    return proj;
  };
  std::string out;
  EXPECT_EQ(runCommand(kCli + " check " + write("key.dwproj", "\"batch_size\"", "\"batch_sise\""),
                       &out, false),
            1);
  EXPECT_NE(out.find("/training/batch_sise: unknown key"), std::string::npos) << out;
  EXPECT_EQ(runCommand(kCli + " check " +
                           write("path.dwproj", "/usr/share/datasets/fashion-mnist/train-images",
                                 "data/train-images"),
                       &out, false),
            1);
  EXPECT_NE(out.find("/training/dataset/train/0/path:"), std::string::npos) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  EXPECT_EQ(runCommand(kCli + " check " +
                           write("input.dwproj", "\"input\": \"label\"", "\"input\": \"labelz\""),
                       &out, false),
            1);
  EXPECT_NE(out.find("'labelz' is not an input of the model"), std::string::npos) << out;
  // ... and the data input it should feed then has no train source, which training would meet
  // at its first batch (a user renamed an Input after choosing its data).
  EXPECT_NE(out.find("/training/dataset/train: nothing feeds the graph input 'label' (int64[N]); "
                     "give it a train source; the sources name 'labelz', which the graph does "
                     "not have: was the Input renamed?"),
            std::string::npos)
      << out;
  // A device as a data source, or as the file itself, is refused at once: /dev/zero was read
  // until memory ran out.
  EXPECT_EQ(runCommand(kCli + " check " +
                           write("zero.dwproj",
                                 "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz",
                                 "/dev/zero"),
                       &out, false),
            1);
  EXPECT_NE(out.find("/training/dataset/test/1: /dev/zero: is a device or a socket, not a file"),
            std::string::npos)
      << out;
  for (const char* cmd : {" check /dev/zero", " run /dev/zero", " train /dev/zero"}) {
    EXPECT_EQ(runCommand(kCli + cmd + " 2>&1", &out, false), 1) << cmd;
    EXPECT_NE(out.find("/dev/zero: is a device or a socket, not a file"), std::string::npos)
        << cmd << ": " << out;
  }
  // A value of the wrong JSON type says what the key takes, not the JSON library's exception.
  EXPECT_EQ(
      runCommand(kCli + " check " + write("type.dwproj", "\"dtype\": \"int64\"", "\"dtype\": 5"),
                 &out, false),
      1);
  EXPECT_NE(out.find("/training/dataset/train/1/dtype: expected a string (in quotes), got 5"),
            std::string::npos)
      << out;
  // Sources of one split with different sample counts (the train labels beside the test
  // images).
  if (std::filesystem::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
    EXPECT_EQ(runCommand(kCli + " check " +
                             write("count.dwproj", "/fashion-mnist/t10k-labels-idx1-ubyte.gz",
                                   "/fashion-mnist/train-labels-idx1-ubyte.gz"),
                         &out, false),
              1);
    EXPECT_NE(out.find("/training/dataset/test: 'label' has 60000 samples "
                       "(train-labels-idx1-ubyte.gz) but 'image' has 10000"),
              std::string::npos)
        << out;
  }
  // A source of any split whose data does not fit its input (images where labels go), found
  // before the first evaluation.
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"))
    return;
  EXPECT_EQ(runCommand(kCli + " check " +
                           write("fit.dwproj", "/fashion-mnist/t10k-labels-idx1-ubyte.gz",
                                 "/fashion-mnist/t10k-images-idx3-ubyte.gz"),
                       &out, false),
            1);
  // ... with the train source fitting, the advice is to choose another file, not to change
  // the Input (which would break the train source).
  EXPECT_NE(out.find("/training/dataset/test/1: t10k-images-idx3-ubyte.gz gives int64[N,28,28] "
                     "but input 'label' takes int64[N]: the train source "
                     "train-labels-idx1-ubyte.gz fits it, so this file is the odd one"),
            std::string::npos)
      << out;
  // A label outside the loss's classes, found by reading the label source whole (train found
  // it only at its first step): 10000 labels (IDX: magic 00 00 08 01, the count big-endian), all
  // class 3 but sample 37, class 12.
  std::string raw("\x00\x00\x08\x01\x00\x00\x27\x10", 8);
  raw += std::string(10000, '\x03');
  raw[8 + 37] = 12;
  ASSERT_TRUE(writeFileAtomic((dir / "bad-labels.idx").string(), raw).ok());
  EXPECT_EQ(runCommand(kCli + " check " +
                           write("labels.dwproj",
                                 "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz",
                                 (dir / "bad-labels.idx").string()),
                       &out, false),
            1);
  EXPECT_NE(out.find("sample 37 of /training/dataset/test/1 (bad-labels.idx) has label 12 in "
                     "input 'label', outside [0, 10)"),
            std::string::npos)
      << out;
}

// `run` takes a sequence input from a .pb holding a SequenceProto, as the ONNX backend tests
// store one (it read it as a tensor and reported nonsense dims), and refuses a name given twice.
TEST(Cli, RunTakesSequenceInputs) {
  const std::string d = "/usr/share/libonnx-testdata/data/node/test_sequence_insert_at_back/";
  if (!std::filesystem::exists(d)) GTEST_SKIP() << "no ONNX backend test data";
  std::string out;
  ASSERT_EQ(runCommand(kCli + " run " + d + "model.onnx --input sequence=" + d +
                           "test_data_set_0/input_0.pb --input tensor=" + d +
                           "test_data_set_0/input_1.pb",
                       &out, false),
            0)
      << out;
  EXPECT_NE(out.find("output_sequence_3: int64[3] [10, 11, 12]"), std::string::npos) << out;
  EXPECT_NE(runCommand(kCli + " run " + d + "model.onnx --input tensor=" + d +
                           "test_data_set_0/input_1.pb --input tensor=" + d +
                           "test_data_set_0/input_1.pb 2>&1",
                       &out, false),
            0);
  EXPECT_NE(out.find("given twice"), std::string::npos) << out;
}

// A mistyped command is named with the closest one; a capitalized optimizer is understood.
TEST(Cli, MistypedCommandsAndCase) {
  std::string out;
  EXPECT_EQ(runCommand(kCli + " tran x 2>&1", &out, false), 2);
  EXPECT_NE(out.find("'tran' is not a deepwire command; did you mean train?"), std::string::npos)
      << out;
  EXPECT_EQ(runCommand(kCli + " train " + test::example("fashion_mnist_mlp.dwproj") +
                           " --optimizer Adam --epochs 1 --train-limit 64 --quiet 2>&1",
                       &out, false),
            0)
      << out;
}

TEST(Cli, ErrorsGoToStderrWithNonZeroExit) {
  std::string out;
  const int rc =
      runCommand(kCli + " export /nonexistent.dwproj -o x.onnx 2>/dev/null", &out, false);
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(out.empty()) << out;
  auto dir = test::tempDir();
  const std::string junk = (dir / "junk.dwproj").string();
  ASSERT_TRUE(writeFileAtomic(junk, "{\"format\": \"deepwire-project\", \"ver").ok());
  int code = 0;
  out = run("export " + junk + " -o " + (dir / "x.onnx").string(), &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("line 1"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.onnx"));
}

// The numbers are printed, and a warning says the model declared another shape.
TEST(Cli, RunWarnsWhenAnOutputIsNotTheDeclaredShape) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type("Constant");
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("value_floats");
  a->set_type(onnx::AttributeProto::FLOATS);
  a->add_floats(1.5f);
  a->add_floats(2.5f);
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  y->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(5);
  auto dir = test::tempDir();
  const std::string path = (dir / "declared.onnx").string();
  ASSERT_TRUE(writeFileAtomic(path, m.SerializeAsString()).ok());
  int code = 0;
  const std::string out = run("run " + path + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("y: float32[2] [1.5, 2.5]"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: output 'y' has shape [2], but the model declares y: float32[5]"),
            std::string::npos)
      << out;
}

// A .npy (format 1.0) written by hand: `descr` ('|u1', '<f4') and each element's bytes.
template <class Bytes>
void writeNpyFile(const std::string& path, const std::vector<int64_t>& shape,
                  const std::string& descr, Bytes element) {
  std::string dims;
  int64_t n = 1;
  for (int64_t d : shape) dims += std::to_string(d) + ", ", n *= d;
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  for (int64_t i = 0; i < n; ++i) bytes += element(i);
  ASSERT_TRUE(writeFileAtomic(path, bytes).ok());
}

// uint8 values, as the examples' IDX files store them.
void writeUint8Npy(const std::string& path, const std::vector<int64_t>& shape, uint8_t seed) {
  writeNpyFile(path, shape, "|u1", [&](int64_t i) {
    return std::string(1, static_cast<char>((i * 37 + seed) & 0xff));
  });
}

// float32 values i * 0.01 (cycling every 100).
void writeFloatNpy(const std::string& path, const std::vector<int64_t>& shape) {
  writeNpyFile(path, shape, "<f4", [](int64_t i) {
    const float v = 0.01f * static_cast<float>(i % 100);
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  });
}

// A grey PNG written by hand: its pixels in one stored (uncompressed) deflate block, with the
// CRC-32 and Adler-32 that the format asks for.
void writeGreyPng(const std::string& path, int w, int h, const std::vector<uint8_t>& px) {
  auto crc = [](const std::string& bytes) {
    uint32_t c = 0xffffffffu;
    for (unsigned char b : bytes) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
  };
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc(type + data));
  };
  std::string rows;
  for (int y = 0; y < h; ++y) {
    rows += '\0';  // filter: none
    rows.append(reinterpret_cast<const char*>(px.data()) + y * w, w);
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : rows) a = (a + c) % 65521, b = (b + a) % 65521;
  const auto len = static_cast<uint16_t>(rows.size());
  std::string z = std::string("\x78\x01\x01", 3) + char(len & 0xff) + char(len >> 8) +
                  char(~len & 0xff) + char((~len >> 8) & 0xff) + rows + be32((b << 16) | a);
  const std::string header = be32(w) + be32(h) + std::string("\x08\x00\x00\x00\x00", 5);
  ASSERT_TRUE(writeFileAtomic(path, std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", header) +
                                        chunk("IDAT", z) + chunk("IEND", ""))
                  .ok());
}

// `run` on a project takes what `run` on its export takes: the data as stored (raw uint8
// pixels), converted by the project's Data panel in front of the model; with
// --no-data-conversion it wants the converted data.
TEST(Cli, RunOnAProjectTakesWhatItsExportTakes) {
  auto dir = test::tempDir();
  const std::string project = test::example("fashion_mnist_mlp.dwproj");
  const std::string onnxPath = (dir / "mlp.onnx").string(), pixels = (dir / "px.npy").string();
  writeUint8Npy(pixels, {2, 28, 28}, 5);
  int code = 0;
  std::string out = run("export " + project + " -o " + onnxPath, &code);
  ASSERT_EQ(code, 0) << out;
  const std::string fromProject = run("run " + project + " --input image=" + pixels, &code);
  ASSERT_EQ(code, 0) << fromProject;
  const std::string fromExport = run("run " + onnxPath + " --input image=" + pixels, &code);
  ASSERT_EQ(code, 0) << fromExport;
  EXPECT_EQ(fromProject, fromExport);
  EXPECT_NE(fromProject.find("logits: float32[2, 10]"), std::string::npos) << fromProject;
  // The same pixels as an MNIST-style IDX file, the format the dataset comes in.
  std::string idx("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c", 16);
  for (int64_t i = 0; i < 2 * 28 * 28; ++i) idx += static_cast<char>((i * 37 + 5) & 0xff);
  const std::string idxPath = (dir / "px-idx3-ubyte").string();
  ASSERT_TRUE(writeFileAtomic(idxPath, idx).ok());
  EXPECT_EQ(run("run " + onnxPath + " --input image=" + idxPath, &code), fromExport);
  EXPECT_EQ(code, 0);
  // The model has one input: the file alone names it.
  EXPECT_EQ(run("run " + onnxPath + " --input " + idxPath, &code), fromExport);
  EXPECT_EQ(code, 0);
  out = run("run " + onnxPath + " --input other=" + idxPath + " 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("no input named 'other'"), std::string::npos) << out;
  // The same pixels as CSV rows (one sample a row) and the first as a PNG image: what a user
  // has at hand, fitted to the input (uint8[N, 28, 28]).
  std::string csv;
  std::vector<uint8_t> first;
  for (int64_t i = 0; i < 2 * 28 * 28; ++i) {
    const int v = (i * 37 + 5) & 0xff;
    csv += std::to_string(v) + ((i + 1) % 784 ? "," : "\n");
    if (i < 784) first.push_back(static_cast<uint8_t>(v));
  }
  const std::string csvPath = (dir / "px.csv").string(), pngPath = (dir / "px.png").string();
  ASSERT_TRUE(writeFileAtomic(csvPath, csv).ok());
  EXPECT_EQ(run("run " + project + " --input image=" + csvPath, &code), fromExport);
  EXPECT_EQ(code, 0);
  writeGreyPng(pngPath, 28, 28, first);
  const std::string onePixels = (dir / "one.npy").string();
  writeUint8Npy(onePixels, {1, 28, 28}, 5);
  const std::string fromPng = run("run " + project + " --input " + pngPath, &code);
  EXPECT_EQ(code, 0) << fromPng;
  EXPECT_EQ(fromPng, run("run " + project + " --input " + onePixels, &code));
  EXPECT_NE(fromPng.find("logits: float32[1, 10]"), std::string::npos) << fromPng;
  out = run("run " + project + " --no-data-conversion --input image=" + pixels + " 2>&1", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("has dtype uint8, but the model expects image: float32[N, 1, 28, 28]; "
                     "convert it to float32 first (numpy: a.astype('float32'))"),
            std::string::npos)
      << out;
  // Data already converted (floats in [0, 1]) into the project's conversion: the way out is
  // --no-data-conversion, not the dtype's cast to uint8 (which makes black images).
  const std::string floats = (dir / "floats.npy").string();
  writeFloatNpy(floats, {2, 28, 28});
  out = run("run " + project + " --input image=" + floats + " 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("input 'image' has float32 values, but this project's model starts with its "
                     "data conversion"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("--no-data-conversion"), std::string::npos) << out;
  EXPECT_EQ(out.find("astype('uint8')"), std::string::npos) << out;
  // On an .onnx the flag has nothing to leave out: said, not ignored.
  out = run("run " + onnxPath + " --no-data-conversion --input image=" + pixels + " 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--no-data-conversion applies to a project"), std::string::npos) << out;
  // Imported back, the conversion's constants are constants, not weights to train (a trial's
  // 1/255 trained to 0.0022).
  const std::string imported = (dir / "imported.dwproj").string();
  out = run("import " + onnxPath + " -o " + imported + " 2>&1", &code);
  ASSERT_EQ(code, 0) << out;
  auto text = readFile(imported);
  ASSERT_TRUE(text.ok());
  int prelude = 0;
  const auto importedJson = nlohmann::json::parse(*text);
  for (const auto& n : importedJson["nodes"])
    if (n.value("name", "").find("/data_prelude/") != std::string::npos &&
        n["type"] == "Initializer") {
      ++prelude;
      EXPECT_EQ(n["params"].value("status", "Trainable"), "Constant") << n.dump();
    }
  EXPECT_GT(prelude, 0);
  // The conversion's nodes have no place in the export's layout: the import lays the whole
  // graph out instead of piling them on one spot (a trial's studio showed them stacked).
  std::set<std::pair<double, double>> places;
  for (const auto& n : importedJson["nodes"])
    places.insert({n["position"][0].get<double>(), n["position"][1].get<double>()});
  EXPECT_EQ(places.size(), importedJson["nodes"].size());
}

// The MLP example exported into `dir` as mlp.onnx; "" (and a failure) if the export fails.
std::string exportedMlp(const std::filesystem::path& dir) {
  const std::string path = (dir / "mlp.onnx").string();
  int code = 0;
  const std::string out =
      run("export " + test::example("fashion_mnist_mlp.dwproj") + " -o " + path, &code);
  EXPECT_EQ(code, 0) << out;
  return code == 0 ? path : std::string();
}

// A weight that does not fit its input is found by check and export (libonnx's inference of
// Gemm does not compare the inner dimensions: it was found in the first run), on the Gemm.
TEST(Cli, CheckFindsAWeightThatDoesNotFitItsInput) {
  auto dir = test::tempDir();
  auto text = readFile(test::example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  for (auto& n : j["nodes"])
    if (n.value("name", "") == "fc1.weight") n["params"]["shape"] = {256, 783};
  const std::string project = (dir / "misfit.dwproj").string();
  ASSERT_TRUE(writeFileAtomic(project, j.dump()).ok());
  int code = 0;
  for (const std::string cmd :
       {"check " + project, "export " + project + " -o " + (dir / "m.onnx").string()}) {
    const std::string out = run(cmd + " 2>&1", &code);
    EXPECT_NE(code, 0) << cmd;
    EXPECT_NE(out.find("Gemm 'fc1' (#"), std::string::npos) << out;
    EXPECT_NE(out.find("the inner dimensions 784 and 783 differ"), std::string::npos) << out;
  }
}

// import --loss makes a model someone else exported trainable from the command line: its
// output becomes an Output Train against a new label input, with a metric, and each --data
// source gets the conversion the Data panel would propose (a trial edited the JSON by hand).
TEST(Cli, ImportWithALossMakesAModelTrainable) {
  const std::string data = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(data + "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
  auto dir = test::tempDir();
  const std::string exported = exportedMlp(dir);
  ASSERT_FALSE(exported.empty());
  // Without deepwire's layout, as any other tool's export: a plain output.
  auto m = readOnnxFile(exported);
  ASSERT_TRUE(m.ok());
  m->clear_metadata_props();
  const std::string foreign = (dir / "foreign.onnx").string();
  ASSERT_TRUE(writeOnnxFile(*m, foreign).ok());
  const std::string project = (dir / "foreign.dwproj").string();
  int code = 0;
  std::string out = run("import " + foreign + " -o " + project +
                            " --loss SparseCategoricalCrossentropy --from-logits --metric "
                            "SparseCategoricalAccuracy --data image=" +
                            data + "train-images-idx3-ubyte.gz --data label=" + data +
                            "train-labels-idx1-ubyte.gz --test-data image=" + data +
                            "t10k-images-idx3-ubyte.gz --test-data label=" + data +
                            "t10k-labels-idx1-ubyte.gz 2>&1",
                        &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("trainable: loss SparseCategoricalCrossentropy"), std::string::npos) << out;
  out = run("check " + project + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  out = run("train " + project + " --epochs 1 --max-steps 100 --threads 1 --quiet 2>&1", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
  // Data paths are the shell's, from the current folder, kept relative to the project's.
  std::filesystem::create_directories(dir / "data");
  std::filesystem::create_directories(dir / "sub");
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    std::filesystem::create_symlink(data + f, dir / "data" / f);
  code = runCommand("cd " + dir.string() + " && " + kCli + " import " + foreign +
                        " -o sub/relative.dwproj --loss SparseCategoricalCrossentropy " +
                        "--from-logits --data image=data/train-images-idx3-ubyte.gz " +
                        "--data label=data/train-labels-idx1-ubyte.gz 2>&1",
                    &out);
  ASSERT_EQ(code, 0) << out;
  auto saved = readFile((dir / "sub" / "relative.dwproj").string());
  ASSERT_TRUE(saved.ok());
  EXPECT_NE(saved->find("\"../data/train-images-idx3-ubyte.gz\""), std::string::npos) << *saved;
  out = run("check " + (dir / "sub" / "relative.dwproj").string() + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  // The options explain themselves when misused.
  out = run("import " + foreign + " -o " + (dir / "x.dwproj").string() + " --metric X 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("go with --loss"), std::string::npos) << out;
  out = run("import " + foreign + " -o " + (dir / "x.dwproj").string() +
                " --loss SparseCategoricalCrossentropy --data img=x.gz 2>&1",
            &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("no data input 'img'; its data inputs: 'image' 'label'"), std::string::npos)
      << out;
}

// Model-local functions (torch's export_modules_as_functions, onnxscript) are imported as their
// bodies, nested calls too: check passes, and the project computes what the file does (import
// refused them, and check failed a model run executed).
TEST(Cli, LocalFunctionsImportAsTheirBodies) {
  auto dir = test::tempDir();
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* local = m.add_opset_import();
  local->set_domain("my.functions");
  local->set_version(1);
  auto function = [&](const std::string& name, const std::string& op) {
    auto* f = m.add_functions();
    f->set_name(name);
    f->set_domain("my.functions");
    f->add_input("a");
    f->add_output("b");
    f->add_opset_import()->set_version(17);
    auto* own = f->add_opset_import();
    own->set_domain("my.functions");
    own->set_version(1);
    auto* n = f->add_node();
    n->set_op_type(op);
    if (op == "Add") {
      n->add_input("a");
      n->add_input("a");
      n->add_output("b");
      return;
    }
    n->set_domain("my.functions");  // Quad calls Twice twice
    n->add_input("a");
    n->add_output("t");
    auto* again = f->add_node();
    again->set_op_type(op);
    again->set_domain("my.functions");
    again->add_input("t");
    again->add_output("b");
  };
  function("Twice", "Add");
  function("Quad", "Twice");
  auto* g = m.mutable_graph();
  g->set_name("local");
  auto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  auto* call = g->add_node();
  call->set_op_type("Quad");
  call->set_domain("my.functions");
  call->add_input("x");
  call->add_output("y");
  auto* y = g->add_output();
  *y = *x;
  y->set_name("y");
  const std::string model = (dir / "local.onnx").string(),
                    project = (dir / "local.dwproj").string(), data = (dir / "x.npy").string();
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  writeFloatNpy(data, {2, 3});
  int code = 0;
  std::string out = run("check " + model + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  out = run("import " + model + " -o " + project + " 2>&1", &code);
  ASSERT_EQ(code, 0) << out;
  const std::string fromFile = run("run " + model + " --input " + data, &code);
  ASSERT_EQ(code, 0) << fromFile;
  EXPECT_NE(fromFile.find("y: float32[2, 3] [0, 0.04, 0.08, 0.12, 0.16, 0.2]"), std::string::npos)
      << fromFile;
  EXPECT_EQ(run("run " + project + " --input " + data, &code), fromFile);
  EXPECT_EQ(code, 0);
}

// A float value of `dims`, -1 standing for the batch (named N).
void floatValue(onnx::ValueInfoProto* v, const std::string& name,
                const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (d < 0)
      dim->set_dim_param("N");
    else
      dim->set_dim_value(d);
  }
}

// x (of `xDims`, its last k) -> MatMul with a [k, n] weight -> "logits": the small model other
// tools' exports stand for in the import tests.
onnx::ModelProto matMulModel(const std::vector<int64_t>& xDims, int64_t n) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("matmul");
  floatValue(g->add_input(), "x", xDims);
  auto* w = g->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(xDims.back());
  w->add_dims(n);
  for (int64_t i = 0; i < xDims.back() * n; ++i)
    w->add_float_data(0.05f * static_cast<float>(i % 7) - 0.1f);
  auto* node = g->add_node();
  node->set_op_type("MatMul");
  node->add_input("x");
  node->add_input("W");
  node->add_output("logits");
  g->add_output()->set_name("logits");
  return m;
}

// Class indices per time step (a tagger: [N, T] labels for [N, T, classes] scores) give the
// label input the label file's shape: it was int64[N], and training failed on the ranks.
TEST(Cli, ImportWithALossTakesTheLabelFilesShape) {
  auto dir = test::tempDir();
  const onnx::ModelProto m = matMulModel({-1, 7, 4}, 5);
  const std::string model = (dir / "tagger.onnx").string(), xs = (dir / "x.npy").string(),
                    ys = (dir / "y.npy").string(), project = (dir / "tagger.dwproj").string();
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  writeFloatNpy(xs, {16, 7, 4});
  writeNpyFile(ys, {16, 7}, "<i8", [](int64_t i) {
    const int64_t v = i % 5;
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  });
  int code = 0;
  std::string out = run("import " + model + " -o " + project +
                            " --loss SparseCategoricalCrossentropy --from-logits --data x=" + xs +
                            " --data label=" + ys + " 2>&1",
                        &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("input 'label' takes int64[N,7]: it fits"), std::string::npos) << out;
  out = run("train " + project + " --epochs 1 --batch-size 4 --quiet 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
}

// Layers, losses and metrics are written for opset 11 on: in an older model the failure says so
// and how to convert it (it named a lowered Clip's inputs alone).
TEST(Cli, LossesInOlderOpsetsSayHowToConvert) {
  const std::string model =
      "/usr/share/libonnx-testdata/data/pytorch-converted/test_Sigmoid/model.onnx";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no ONNX backend test data";
  auto dir = test::tempDir();
  int code = 0;
  const std::string out = run(
      "import " + model + " -o " + (dir / "s.dwproj").string() + " --loss BinaryCrossentropy 2>&1",
      &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("the model imports ai.onnx opset 6, and layers, losses and metrics are "
                     "written for opset 11 or later"),
            std::string::npos)
      << out;
}

// Two inputs that name their batch alike and are given different batches are told so by name
// (the run failed at the first node that met both, "shapes cannot be broadcast together").
TEST(Cli, RunSaysWhichInputsDisagreeOnADimension) {
  auto dir = test::tempDir();
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("sum");
  for (const char* name : {"x1", "x2"}) floatValue(g->add_input(), name, {-1, 28});
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x1");
  n->add_input("x2");
  n->add_output("y");
  g->add_output()->set_name("y");
  const std::string model = (dir / "sum.onnx").string(), a = (dir / "a.npy").string(),
                    b = (dir / "b.npy").string();
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  writeFloatNpy(a, {4, 28});
  writeFloatNpy(b, {3, 28});
  int code = 0;
  std::string out = run("run " + model + " --input x1=" + a + " --input x2=" + b + " 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("inputs 'x1' and 'x2' share the dimension N but have 4 and 3 along it"),
            std::string::npos)
      << out;
  out = run("run " + model + " --input x1=" + a + " --input x2=" + a + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
}

// A loss added to one of two outputs keeps the outputs' order, and its metric reads what the
// loss reads from logits (sigmoid here) under a name train --json reports it by.
TEST(Cli, ImportWithALossKeepsTheOutputsOrder) {
  auto dir = test::tempDir();
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  g->set_name("two_outputs");
  floatValue(g->add_input(), "x", {-1, 3});
  for (const auto& [op, out] :
       {std::pair<std::string, std::string>{"Identity", "cls"}, {"Neg", "reg"}}) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->add_input("x");
    n->add_output(out);
    floatValue(g->add_output(), out, {-1, 3});
  }
  const std::string model = (dir / "two.onnx").string(), project = (dir / "two.dwproj").string(),
                    exported = (dir / "exported.onnx").string();
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  int code = 0;
  std::string out = run("import " + model + " -o " + project +
                            " --loss BinaryCrossentropy --from-logits --output-name cls" +
                            " --metric BinaryAccuracy 2>&1 && " + kCli + " export " + project +
                            " -o " + exported + " 2>&1",
                        &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("--metric BinaryAccuracy reads sigmoid of the logits"), std::string::npos)
      << out;
  auto back = readOnnxFile(exported);
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(back->graph().output_size(), 2);
  EXPECT_EQ(back->graph().output(0).name(), "cls");
  EXPECT_EQ(back->graph().output(1).name(), "reg");
  auto saved = readFile(project);
  ASSERT_TRUE(saved.ok());
  const auto j = nlohmann::json::parse(*saved);
  std::map<std::string, std::string> typeOf;
  for (const auto& n : j["nodes"])
    if (n.contains("name")) typeOf[n["name"]] = n["type"];
  EXPECT_EQ(typeOf["binary_accuracy"], "BinaryAccuracy") << *saved;
  EXPECT_EQ(typeOf["probabilities"], "Sigmoid") << *saved;
}

// One table for every input: its label column goes to the label input and the rest to the
// features, as the studio guesses (a trial's import fed the whole table to both, and training
// failed on the label's dtype).
TEST(Cli, ImportWithALossReadsATableForEveryInput) {
  auto dir = test::tempDir();
  const onnx::ModelProto m = matMulModel({-1, 3}, 2);
  const std::string model = (dir / "linear.onnx").string(), table = (dir / "t.csv").string();
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  std::string rows = "a,b,c,label\n";
  for (int i = 0; i < 40; ++i)
    rows +=
        std::to_string(i % 5) + "," + std::to_string(i % 3) + ",1," + std::to_string(i % 2) + "\n";
  ASSERT_TRUE(writeFileAtomic(table, rows).ok());
  const std::string project = (dir / "linear.dwproj").string();
  int code = 0;
  std::string out;  // the table named from the project's folder: the project keeps "t.csv"
  code = runCommand("cd " + dir.string() + " && " + kCli + " import " + model + " -o " + project +
                        " --loss SparseCategoricalCrossentropy --from-logits --data x=t.csv" +
                        " --data label=t.csv",
                    &out);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("data x: t.csv: 40 samples of float[N,3]"), std::string::npos) << out;
  EXPECT_NE(out.find("data label: t.csv: 40 samples of int64[N]"), std::string::npos) << out;
  out = run("train " + project + " --epochs 1 --batch-size 8 --quiet 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  // Saved by train into another folder, the project still finds its data (its relative paths
  // are rebased there; they led nowhere).
  const std::string elsewhere = (dir / "out" / "sub" / "trained.dwproj").string();
  out = run("train " + project + " --epochs 1 --batch-size 8 --quiet --save-project " + elsewhere +
                " 2>&1",
            &code);
  ASSERT_EQ(code, 0) << out;
  auto saved = readFile(elsewhere);
  ASSERT_TRUE(saved.ok());
  EXPECT_NE(saved->find("\"../../t.csv\""), std::string::npos) << *saved;
  out = run("train " + elsewhere + " --epochs 1 --batch-size 8 --quiet 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
}

// Weights kept beside the model (onnx.save_model(..., save_as_external_data=True)) are read
// from the model's folder wherever the command runs, and an import holds them: check and run
// looked in the current folder, and an imported project could not run or export.
TEST(Cli, ExternalDataComesFromTheModelsFolder) {
  auto dir = test::tempDir();
  std::filesystem::create_directories(dir / "model");
  const std::vector<float> w = {1.5f, -2.0f, 0.25f, 4.0f};
  std::string bytes(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  ASSERT_TRUE(writeFileAtomic((dir / "model" / "weights.bin").string(), "pad!" + bytes).ok());
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("external");
  auto* t = g->add_initializer();
  t->set_name("W");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(4);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  for (const auto& [k, v] : {std::pair<std::string, std::string>{"location", "weights.bin"},
                             {"offset", "4"},
                             {"length", "16"}}) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->add_input("W");
  n->add_output("Y");
  auto* y = g->add_output();
  y->set_name("Y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  y->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  const std::string model = (dir / "model" / "m.onnx").string();
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  std::string out;
  int code = runCommand("cd / && " + kCli + " check " + model, &out);
  EXPECT_EQ(code, 0) << out;
  const std::string project = (dir / "m.dwproj").string(), exported = (dir / "m.onnx").string();
  code = runCommand("cd / && " + kCli + " import " + model + " -o " + project + " && " + kCli +
                        " export " + project + " -o " + exported,
                    &out);
  ASSERT_EQ(code, 0) << out;
  auto back = readOnnxFile(exported);
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(back->graph().initializer_size(), 1);
  EXPECT_NE(back->graph().initializer(0).data_location(), onnx::TensorProto::EXTERNAL);
  EXPECT_EQ(back->graph().initializer(0).raw_data(), bytes);
  // A location outside the model's folder is refused, as ONNX Runtime refuses it.
  t->mutable_external_data(0)->set_value("../m.dwproj");
  ASSERT_TRUE(writeOnnxFile(m, model).ok());
  code = runCommand(kCli + " check " + model, &out);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("must be a relative path inside the model's folder"), std::string::npos)
      << out;
}

// train on an ONNX file says that training needs a project and how to make one; out-of-range
// numbers read as a person would write them.
TEST(Cli, TrainExplainsWhatItNeeds) {
  auto dir = test::tempDir();
  const std::string onnxPath = exportedMlp(dir);
  ASSERT_FALSE(onnxPath.empty());
  int code = 0;
  std::string out;
  out = run("train " + onnxPath + " 2>&1", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("is an ONNX model; training needs a project (.dwproj)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("deepwire import " + onnxPath + " -o model.dwproj"), std::string::npos) << out;
  out = run("train " + test::example("fashion_mnist_mlp.dwproj") + " --epochs 0 2>&1", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("deepwire: error: --epochs: '0' must be more than 0"), std::string::npos)
      << out;
  // A mistyped option is named, as typed, with the option it was probably meant to be.
  out = run("train " + test::example("fashion_mnist_mlp.dwproj") + " --epoch 1 2>&1", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(
      out.find("deepwire: error: --epoch is not an option of 'train'; did you mean --epochs?"),
      std::string::npos)
      << out;
}

// import writes projects only (an .onnx name would hide the JSON, and `-o` naming the model
// itself destroyed it), says what of the model is wrong instead of succeeding in silence, and
// export named with a model says how to make a project of it.
TEST(Cli, ImportAndExportSayWhichFileIsWhich) {
  auto dir = test::tempDir();
  const std::string onnxPath = exportedMlp(dir);
  ASSERT_FALSE(onnxPath.empty());
  int code = 0;
  std::string out;
  const auto before = std::filesystem::file_size(onnxPath);
  out = run("import " + onnxPath + " -o " + onnxPath + " 2>&1", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("choose a name such as mlp.dwproj"), std::string::npos) << out;
  EXPECT_EQ(std::filesystem::file_size(onnxPath), before);
  out = run("export " + onnxPath + " -o " + (dir / "again.onnx").string() + " 2>&1", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("export takes a project (*.dwproj)"), std::string::npos) << out;
  // A model with a weight of an element type ONNX does not have (a damaged file): imported,
  // with a warning that names it.
  onnx::ModelProto m;
  {
    auto read = readOnnxFile(onnxPath);
    ASSERT_TRUE(read.ok()) << read.message();
    m = std::move(*read);
  }
  ASSERT_GT(m.graph().initializer_size(), 0);
  m.mutable_graph()->mutable_initializer(0)->set_data_type(105);
  const std::string broken = (dir / "broken.onnx").string();
  ASSERT_TRUE(writeOnnxFile(m, broken).ok());
  out = run("import " + broken + " -o " + (dir / "broken.dwproj").string() + " 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("deepwire: warning: Initializer"), std::string::npos) << out;
  EXPECT_NE(out.find("deepwire check"), std::string::npos) << out;
}

// An error quoting a name that is not UTF-8 (a damaged file's, a file's own) prints U+FFFD for
// the bad bytes, and '?' for control characters, instead of passing them to the terminal.
TEST(Cli, ErrorsPrintBytesThatAreNotUtf8Safely) {
  auto dir = test::tempDir();
  const std::string path = (dir / "bad\xff\x07name.onnx").string();
  {
    std::ofstream f(path, std::ios::binary);
    f << "\x08\x07\x12";
  }
  int code = 0;
  const std::string out = run("check '" + path + "' 2>&1", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("bad\xef\xbf\xbd?name.onnx"), std::string::npos) << out;
  EXPECT_EQ(out.find('\xff'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x07'), std::string::npos) << out;
}

// A hang-up stops a run the way Ctrl-C does (checkpoint saved, exit 130), unless the process
// was started to ignore it: `nohup deepwire train ... &` outlives the terminal (a trial's run
// stopped when its SSH session closed).
TEST(Cli, NohupRunsOutliveTheTerminal) {
  auto dir = test::tempDir();
  const std::string project = test::example("fashion_mnist_mlp.dwproj");
  auto trainWithHangUp = [&](bool ignored, const std::string& name) {
    const std::string log = (dir / (name + ".jsonl")).string();
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (ignored) std::signal(SIGHUP, SIG_IGN);
      if (!std::freopen(log.c_str(), "w", stdout)) ::_exit(126);
      if (!std::freopen("/dev/null", "w", stderr)) ::_exit(126);
      const std::string ck = (dir / (name + "_ck")).string();
      ::execl(kCli.c_str(), kCli.c_str(), "train", project.c_str(), "--epochs", "1",
              "--train-limit", "32000", "--threads", "1", "--json-steps", "--checkpoint",
              ck.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // The hang-up comes once the first step is out, with a thousand still to go (a shorter run
    // could end before it on a busy machine).
    for (int i = 0; i < 600; ++i) {
      std::ifstream f(log);
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (text.find("\"step\"") != std::string::npos) break;
      ::usleep(50000);
    }
    EXPECT_EQ(::kill(pid, SIGHUP), 0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::ifstream f(log);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
  };
  const auto [stopped, stoppedLog] = trainWithHangUp(false, "terminal");
  EXPECT_EQ(stopped, 130) << stoppedLog;
  EXPECT_NE(stoppedLog.find("\"interrupted\""), std::string::npos) << stoppedLog;
  const auto [finished, finishedLog] = trainWithHangUp(true, "nohup");
  EXPECT_EQ(finished, 0) << finishedLog;
  EXPECT_EQ(finishedLog.find("\"interrupted\""), std::string::npos) << finishedLog;
  EXPECT_NE(finishedLog.find("\"samples_per_second\""), std::string::npos) << finishedLog;
}

// A resumed run takes the learning rate asked for now, and says so (it kept the checkpoint's in
// silence); --seed cannot change a resumed epoch's data order, and says that.
TEST(Cli, ResumeTakesANewLearningRate) {
  auto dir = test::tempDir();
  const std::string ck = (dir / "ck").string(), project = test::example("fashion_mnist_mlp.dwproj");
  int code = 0;
  std::string out = run("train " + project + " --epochs 1 --max-steps 5 --train-limit 2000 " +
                            "--checkpoint " + ck + " 2>&1",
                        &code);
  ASSERT_EQ(code, 0) << out;
  out = run("train " + project + " --epochs 2 --max-steps 5 --train-limit 2000 --resume " + ck +
                " --lr 0.0005 --seed 3 2>&1",
            &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("the learning rate is 0.0005 from here (the checkpoint trained at 0.001)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("--seed is not used with --resume"), std::string::npos) << out;
  // Without --checkpoint the resumed epochs go back into the folder resumed from (they were
  // thrown away in silence), and a third run starts after them.
  EXPECT_NE(out.find("checkpoints go to " + ck + ", the folder resumed from"), std::string::npos)
      << out;
  out = run(
      "train " + project + " --epochs 3 --max-steps 5 --train-limit 2000 --resume " + ck + " 2>&1",
      &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("resuming from " + ck + ": 2 epochs done"), std::string::npos) << out;
}

// eval reads its --checkpoint: a missing one is an error and is not made (train's check of
// where it writes does not apply to it), and without one it says what it scores.
TEST(Cli, EvalReadsItsCheckpointAndSaysWithoutOne) {
  auto dir = test::tempDir();
  const std::string missing = (dir / "nowhere").string();
  int code = 0;
  std::string out = run("eval " + test::example("fashion_mnist_mlp.dwproj") +
                            " --threads 1 --checkpoint " + missing + " 2>&1",
                        &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_FALSE(std::filesystem::exists(missing));
  out = run("eval " + test::example("fashion_mnist_mlp.dwproj") + " --threads 1 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("no --checkpoint: evaluating the weights the project holds"),
            std::string::npos)
      << out;
}

// eval --split scores the validation fraction (or the training samples) as well as the test
// data; a split the project does not have is named with how to get one.
TEST(Cli, EvalScoresTheSplitAskedFor) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
  auto dir = test::tempDir();
  auto text = dw::readFile(test::example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  j["training"]["dataset"]["train_limit"] = 1000;
  const std::string plain = (dir / "plain.dwproj").string();
  ASSERT_TRUE(dw::writeFileAtomic(plain, j.dump()).ok());
  j["training"]["dataset"]["validation_split"] = 0.1;
  const std::string held = (dir / "held.dwproj").string();
  ASSERT_TRUE(dw::writeFileAtomic(held, j.dump()).ok());
  int code = 0;
  for (auto [split, samples] : {std::pair{"validation", 100}, {"train", 900}}) {
    std::string out;
    code =
        runCommand(kCli + " eval " + held + " --threads 1 --json --batch-size 7 --split " + split,
                   &out, false);
    ASSERT_EQ(code, 0) << out;
    const auto r = nlohmann::json::parse(out);
    EXPECT_EQ(r["split"], split);
    EXPECT_EQ(r["samples"], samples);
    EXPECT_TRUE(r.contains(std::string(split) + "_loss")) << out;
  }
  const std::string out = run("eval " + plain + " --threads 1 --split validation 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("no validation data to evaluate"), std::string::npos) << out;
}

// Numbers past what an option can hold are refused, not clamped: --epochs 1e20 became 2^63-1
// and trained forever, --lr 1e400 became infinity.
TEST(Cli, OutOfRangeNumbersAreRefused) {
  int code = 0;
  const std::string project = test::example("fashion_mnist_mlp.dwproj");
  std::string out = run("train " + project + " --epochs 99999999999999999999 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--epochs: '99999999999999999999' is too large"), std::string::npos) << out;
  out = run("train " + project + " --lr 1e400 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("is not a finite number"), std::string::npos) << out;
}

// A model of a fixed batch (torch's export without dynamic_axes) trains and is evaluated in
// batches of that size; a trial trained an epoch at its batch size, then lost it when the
// evaluation's batches did not fit, and another trial was refused at its own batch size.
TEST(Cli, FixedBatchModelsTrainInTheirBatchSize) {
  auto dir = test::tempDir();
  auto text = dw::readFile(test::example("fashion_mnist_mlp.dwproj"));
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  for (auto& n : j["nodes"])
    if (n["type"] == "Input" && n["name"] == "image") n["params"]["type"] = "float[2,1,28,28]";
  const std::string fixed = (dir / "fixed.dwproj").string();
  ASSERT_TRUE(dw::writeFileAtomic(fixed, j.dump()).ok());
  // Another batch size is refused before anything runs, saying both ways out.
  int code = 0;
  std::string out = run(
      "train " + fixed + " --batch-size 32 --checkpoint " + (dir / "ck").string() + " 2>&1", &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("input 'image' takes batches of exactly 2 (float[2,1,28,28]), and "
                     "training's are 32: train with --batch-size 2, or make its batch dimension "
                     "free by setting the Input's type to float[N,1,28,28]"),
            std::string::npos)
      << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "ck"));  // nothing trained, nothing written
  // Its own batch size trains, and the test split is evaluated in it (it failed there, the
  // epoch lost); a last partial batch is left out, and the run says so.
  out = run("train " + fixed + " --batch-size 2 --epochs 1 --max-steps 5 --train-limit 101 " +
                "--threads 1 2>&1",
            &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("a last partial batch of training or evaluation is left out"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
  out = run("eval " + fixed + " --threads 1 2>&1", &code);
  EXPECT_EQ(code, 0) << out;
}

// deepwire runs with OpenMP's short idle spin (engine/openmp_wait.h) unless the user set one:
// seen in the environment the running process was started with.
TEST(Cli, RunsWithAShortOpenMpSpin) {
  auto dir = test::tempDir();
  const std::string fifo = (dir / "x.npy").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto environmentOf = [&](const char* preset) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::unsetenv("GOMP_SPINCOUNT");
      ::unsetenv("OMP_WAIT_POLICY");
      if (preset) ::setenv("GOMP_SPINCOUNT", preset, 1);
      // Blocks reading the pipe, which nothing writes: the process waits to be looked at.
      ::execl(kCli.c_str(), kCli.c_str(), "run", test::example("fashion_mnist_mlp.dwproj").c_str(),
              "--input", ("image=" + fifo).c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::string env;
    for (int i = 0; i < 100 && env.find("GOMP_SPINCOUNT") == std::string::npos; ++i) {
      ::usleep(50000);
      std::ifstream f("/proc/" + std::to_string(pid) + "/environ");
      env.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return env;
  };
  EXPECT_NE(environmentOf(nullptr).find(std::string("GOMP_SPINCOUNT=1000") + '\0'),
            std::string::npos);
  EXPECT_NE(environmentOf("77").find(std::string("GOMP_SPINCOUNT=77") + '\0'), std::string::npos);
}

TEST(Cli, ConformanceJsonSurvivesNamesThatAreNotUtf8) {
  const std::filesystem::path relu = "/usr/share/libonnx-testdata/data/node/test_relu";
  if (!std::filesystem::exists(relu)) GTEST_SKIP() << "no ONNX backend test data";
  auto dir = test::tempDir();
  // A case directory named with a byte that is not UTF-8 (0xFF) used to abort all JSON output.
  std::filesystem::create_directories(dir / "node");
  std::filesystem::copy(relu, dir / "node" / "test_relu_\xff",
                        std::filesystem::copy_options::recursive);
  std::string out;
  ASSERT_EQ(
      runCommand(kCli + " conformance --json --data " + dir.string() + " 2>/dev/null", &out, false),
      0);
  auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["cases"].size(), 1u);
  EXPECT_EQ(j["cases"][0]["name"], "test_relu_\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(j["suites"]["node"]["passed"], 1);
}

TEST(Cli, HelpOnEveryCommand) {
  for (const char* cmd : {"", "nodes", "describe", "export", "import", "check"}) {
    int rc = 0;
    const std::string out = run(std::string(cmd) + " --help", &rc);
    EXPECT_EQ(rc, 0) << cmd;
    EXPECT_NE(out.find("Usage"), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace dw
