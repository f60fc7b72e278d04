// Reading and writing tensors as files: NumPy .npy (v1/v2/v3 headers, C order) and serialized
// onnx TensorProto / SequenceProto / OptionalProto (.pb). Errors name the file and, for format
// errors, the byte position where parsing stopped.
#pragma once

#include <string>

#include "engine/tensor.h"
#include "nodes/status.h"

namespace onnx {
class TypeProto;
class SequenceProto;
class OptionalProto;
}  // namespace onnx

namespace dw::engine {

Result<Tensor> readNpy(const std::string& path);
Status writeNpy(const std::string& path, const Tensor& t);
// Parses an in-memory .npy image; `label` names it in errors.
Result<Tensor> parseNpy(const std::string& bytes, const std::string& label);
std::string serializeNpy(const Tensor& t);

Result<Tensor> readTensorPb(const std::string& path);
Status writeTensorPb(const std::string& path, const Tensor& t, const std::string& name = "");

// Loads a .pb holding the value kind that `type` (a graph input/output type) describes.
Result<Value> readValuePb(const std::string& path, const onnx::TypeProto& type);
Result<Value> valueFromSequenceProto(const onnx::SequenceProto& p);
Result<Value> valueFromOptionalProto(const onnx::OptionalProto& p);

// .npy or .pb chosen by extension.
Result<Tensor> readTensorFile(const std::string& path);

}  // namespace dw::engine
