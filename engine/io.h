// Reading and writing tensors as files: NumPy .npy (v1/v2/v3 headers, C order) and serialized
// onnx TensorProto / SequenceProto / OptionalProto (.pb). Errors name the file and, for format
// errors, the byte position where parsing stopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/tensor.h"
#include "nodes/status.h"

namespace onnx {
class TypeProto;
class SequenceProto;
class OptionalProto;
class SparseTensorProto;
}  // namespace onnx

namespace dw::engine {

// NumPy dtypes read: f2 f4 f8 i1-i8 u1-u8 b1 in either byte order, '<U<width>' strings
// (fixed-width UTF-32, read as UTF-8) and 'V2' as bfloat16 (ml_dtypes saves it so). Fortran
// order is refused with a message. Errors name the file, the byte position and a fix.
Result<Tensor> readNpy(const std::string& path);
// Writes atomically (a temporary file renamed over `path`), little-endian, C order.
Status writeNpy(const std::string& path, const Tensor& t);
// Parses an in-memory .npy image; `label` names it in errors.
Result<Tensor> parseNpy(const std::string& bytes, const std::string& label);
// Strings are written as UTF-32 code points decoded from their UTF-8 (a byte outside a valid
// sequence stands for itself), so that parseNpy gives them back. `t` must not be undefined.
std::string serializeNpy(const Tensor& t);

struct NpyHeader {
  DType dtype = DType::kUndefined;
  Shape shape;
  size_t dataStart = 0;
  bool littleEndian = true;
  uint64_t dataBytes = 0;
  size_t stringWidth = 0;     // code points per element of a kString array
  bool fortranOrder = false;  // the data runs first axis fastest (parseNpy turns it round)
};
// `bytes` holds at least the file's first bytes up to the header's end when the file has them,
// so a preview need not read a huge file; `fileSize` is the whole file's, and a file too short
// for the data the header promises fails here already.
Result<NpyHeader> parseNpyHeader(const std::string& bytes, uint64_t fileSize,
                                 const std::string& label);

// ---- Shared with the other binary readers (engine/training's IDX) ------------------------------

// "00 01 08 03": how a file really starts says what it is when its magic is wrong.
std::string hexBytes(const std::string& bytes, size_t n);
bool hostLittleEndian();
void byteSwapInPlace(void* data, size_t count, size_t width);
// Bytes `shape` of `elementBytes` each take, or nullopt past 2^63: a corrupt header's dims can
// multiply to anything, and the comparison with the file's size must not wrap.
std::optional<uint64_t> payloadBytes(const Shape& shape, size_t elementBytes);
// The truncation message: what the header promised after `dataStart`, what the file holds.
// `where` qualifies the byte positions (" of the decompressed data"), `fix` ends the message.
Status truncatedData(const std::string& path, const Shape& shape, DType dtype, size_t dataStart,
                     uint64_t available, const std::optional<uint64_t>& need,
                     const std::string& where, const std::string& fix);

Result<Tensor> readTensorPb(const std::string& path);
Status writeTensorPb(const std::string& path, const Tensor& t, const std::string& name = "");

// Loads a .pb holding the value kind that `type` (a graph input/output type) describes.
// A sparse tensor (COO: indices [nnz, rank] or linear [nnz]) as its dense equivalent; repeated
// indices add up. deepwire holds sparse tensors dense (sparse initializers, sparse inputs).
Result<Tensor> tensorFromSparseProto(const onnx::SparseTensorProto& p);
Result<Value> readValuePb(const std::string& path, const onnx::TypeProto& type);
Result<Value> valueFromSequenceProto(const onnx::SequenceProto& p);
Result<Value> valueFromOptionalProto(const onnx::OptionalProto& p);

// .npy or .pb chosen by extension.
Result<Tensor> readTensorFile(const std::string& path);

}  // namespace dw::engine
