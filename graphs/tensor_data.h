// Helpers for ONNX TensorProto payloads: raw-data conversion, comparison and seeded fills.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "nodes/status.h"

namespace dw {

// Bytes per element; 0 for string (and undefined).
size_t dtypeSize(int dtype);
// The product of the dims; -1 where one is negative or the product overflows.
int64_t elementCount(const onnx::TensorProto& t);
// Moves typed payloads (float_data, int32_data, ...) into little-endian raw_data. Strings stay
// in string_data (ONNX has no raw form for them). External data is refused.
Status toRawData(onnx::TensorProto& t);
// The bytes of a tensor kept outside its model (data_location EXTERNAL: a location, an offset and
// a length), read from `baseDir`, the model's folder: `expected` of them. A location that leaves
// that folder is refused, as ONNX Runtime refuses it, so a model cannot make deepwire read
// arbitrary files.
Result<std::string> readExternalData(const onnx::TensorProto& t, const std::string& baseDir,
                                     size_t expected);
// Every tensor of `model` kept outside it (initializers, Constant and other tensor attributes,
// in subgraphs too) read into it from `baseDir`: what reads the model then never needs to know
// where its file was.
Status inlineExternalData(onnx::ModelProto& model, const std::string& baseDir);
// Same name, type, dims and element values (whatever the payload fields).
bool sameTensor(const onnx::TensorProto& a, const onnx::TensorProto& b);

struct FillSpec {
  std::string fill = "zeros";  // see initializerFills()
  double value = 0, low = -0.05, high = 0.05, mean = 0, stddev = 0.05;
  uint64_t seed = 0;
  bool fanInFirst = false;     // fan_in = shape[0], fan_out = shape[1] (MatMul kernels)
  int64_t forgetGateOnes = 0;  // see WeightFill
};
// A tensor made by a fill, deterministic for a seed on every platform.
Result<onnx::TensorProto> makeFilledTensor(const std::string& name, int dtype,
                                           const std::vector<int64_t>& shape, const FillSpec& f);

}  // namespace dw
