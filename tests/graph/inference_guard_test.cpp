// libonnx 1.12's shape inference on models that crash it unguarded (tests/graph/inference_guards:
// each model reads or writes out of bounds, or divides by zero, inside one op's inference
// function when libonnx's own registry is used). Through inferValidatedShapes, which wraps every
// inference function in deepwire's guards, each must come back, and in strict mode with an error
// that names the op: the process surviving is the test. The guards see ranks inference reached
// (rnn1_inferred_rank1: a Squeeze makes the RNN's X rank 1) and the nodes of subgraphs
// (rnn1_in_if), which the checks of declared ranks in validateNodes cannot.
// eyelike_dtype_untyped: a Cast with an unknown `to` leaves its output untyped, and EyeLike's
// inference reads that missing type; every required input is checked for one.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "nodes/schema_facts.h"

namespace {

namespace fs = std::filesystem;

onnx::ModelProto load(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(ss.str())) << p;
  return m;
}

TEST(InferenceGuards, LibonnxCrashesBecomeErrors) {
  // The op each model's error names.
  const std::map<std::string, std::string> want = {
      {"conv_stride0", "Conv"},
      {"conv_w_highrank", "Conv"},
      {"conv_w_lowrank_autopad", "Conv"},
      {"convT_w_lowrank", "ConvTranspose"},
      {"convT_w_rank1", "ConvTranspose"},
      {"einsum_c7b", "Einsum"},
      {"eyelike_dtype_untyped", "EyeLike"},
      {"gathernd11_negdim", "GatherND"},
      {"gathernd_negbd", "GatherND"},
      {"gemm6_rank1", "Gemm"},
      {"gemm6_seq", "Gemm"},
      {"layernorm_scalar", "LayerNormalization"},
      {"maxpool_stride0", "MaxPool"},
      {"maxroipool_rank2", "MaxRoiPool"},
      {"maxroipool_rank3", "MaxRoiPool"},
      {"maxunpool_i_noshape", "MaxUnpool"},
      {"maxunpool_i_rank1", "MaxUnpool"},
      {"maxunpool_i_untyped", "MaxUnpool"},
      {"ml_CategoryMapper1_untyped", "CategoryMapper"},
      {"ml_LabelEncoder2_untyped", "LabelEncoder"},
      {"range_emptyscalar", "Range"},
      {"reshape_raw_misaligned", "Reshape"},
      {"rnn1_in_if", "RNN"},
      {"rnn1_inferred_rank1", "RNN"},
      {"rnn1_rank1", "RNN"},
      {"scan_no_attr", "Scan"},
      {"shape_dataprop_untyped", "Cast"},
      {"split2seq_zero", "SplitToSequence"},
      {"split_zero_outputs", "Split"},
      {"squeeze_raw3", "Squeeze"},
      {"stft_window_rank0", "STFT"},
      {"topk_rawshort", "TopK"},
  };
  int seen = 0;
  for (const auto& e :
       fs::directory_iterator(fs::path(DW_SOURCE_DIR) / "tests/graph/inference_guards")) {
    const std::string name = e.path().stem().string();
    SCOPED_TRACE(name);
    auto it = want.find(name);
    ASSERT_NE(it, want.end()) << "a model without an expectation";
    ++seen;
    onnx::ModelProto lenient = load(e.path());
    EXPECT_TRUE(dw::inferValidatedShapes(lenient, false, false, 0, false).ok());
    // With data propagation too (Shape's propagator reads its input's type unchecked).
    onnx::ModelProto propagated = load(e.path());
    EXPECT_TRUE(dw::inferValidatedShapes(propagated, false, false, 0, true).ok());
    onnx::ModelProto strict = load(e.path());
    const dw::Status st = dw::inferValidatedShapes(strict, false, false, 1, false);
    // libonnx does not report a node's error in strict mode inside an If branch, or after a
    // node of an unknown op (whose output the guarded node reads untyped): there surviving is
    // all there is to see.
    if (name == "rnn1_in_if" || name.find("untyped") != std::string::npos) continue;
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(it->second), std::string::npos) << st.message();
  }
  EXPECT_EQ(seen, static_cast<int>(want.size()));
}

}  // namespace
