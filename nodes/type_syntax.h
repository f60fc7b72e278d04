// A compact text form of ONNX value types, for graph inputs and outputs in panels and JSON:
//   float[N,3,224,224]   a float tensor; dims are numbers, symbolic names or ? (unknown)
//   float["batch size",3] a name beyond letters, digits, _ . - (not first) is quoted
//   int64[]              a scalar;  int64 (no brackets) has unknown rank
//   seq(float[?])  optional(seq(int64[2]))  map(string,float[])  sparse(float[10,10])
#pragma once

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <vector>

#include "nodes/status.h"

namespace dw {

// "float", "int64", ... for TensorProto::DataType values; "undefined" for 0.
std::string dtypeName(int dtype);
std::optional<int> dtypeFromName(const std::string& name);
const std::vector<std::string>& dtypeNames();  // every name dtypeFromName accepts

Result<onnx::TypeProto> parseType(const std::string& text);
std::string formatType(const onnx::TypeProto& type);
// A tensor type's text with its first dimension the free N (float[2,1,28,28] ->
// float[N,1,28,28]): what takes any batch. `text` as it is where it names no such dimension.
std::string withFreeBatch(const std::string& text);

}  // namespace dw
