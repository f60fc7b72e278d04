// Tensor: the engine's unit of data. A dense, contiguous, row-major buffer shared between copies
// (copying a Tensor aliases it; clone() copies the data), 64-byte aligned so kernels and oneDNN
// can use aligned vector loads. String tensors keep their elements in a separate vector.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nodes/status.h"

namespace onnx {
class TensorProto;
}

namespace dw::engine {

enum class DType : uint8_t {
  kUndefined,
  kFloat,
  kDouble,
  kFloat16,
  kBFloat16,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kBool,
  kString,
};

size_t dtypeSize(DType t);
const char* dtypeName(DType t);
// ONNX TensorProto::DataType <-> DType; unsupported ONNX types (complex) map to kUndefined.
DType dtypeFromOnnx(int32_t onnxType);
int32_t dtypeToOnnx(DType t);
inline bool isFloating(DType t) {
  return t == DType::kFloat || t == DType::kDouble || t == DType::kFloat16 || t == DType::kBFloat16;
}

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);  // round to nearest even, keeps NaN/Inf
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);  // round to nearest even, keeps NaN

using Shape = std::vector<int64_t>;
int64_t numElements(const Shape& s);
std::string shapeToString(const Shape& s);

// Where a buffer's bytes live. Host code (every kernel of the onednn and reference tables, Tensor's
// own element accessors) reads only kHost buffers; the session copies a value to the memory its
// reader needs (see Backend::upload/download).
enum class Device : uint8_t { kHost, kCuda };

// Raw storage; `capacity` may exceed the tensor's byte size when a pooled buffer is reused.
struct Buffer {
  explicit Buffer(size_t bytes);  // host memory, zeroed
  // Memory a backend allocated (device memory, pinned host memory): `release` gives it back.
  Buffer(void* data, size_t capacity, Device device, std::function<void(void*)> release);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data = nullptr;
  size_t capacity = 0;
  Device device = Device::kHost;

 private:
  std::function<void(void*)> release_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-initialised
  // Uses `buffer` as storage when it is large enough (buffer reuse); allocates otherwise.
  Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer);

  template <class T>
  static Tensor fromVector(const std::vector<T>& v, Shape shape);
  static Tensor fromStrings(std::vector<std::string> v, Shape shape);
  static Tensor scalar(DType dtype, double value);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t rank() const { return shape_.size(); }
  int64_t size() const { return size_; }
  size_t bytes() const { return static_cast<size_t>(size()) * dtypeSize(dtype_); }
  bool defined() const { return dtype_ != DType::kUndefined; }
  Device device() const { return buffer_ ? buffer_->device : Device::kHost; }
  bool onHost() const { return device() == Device::kHost; }

  void* raw() { return buffer_ ? buffer_->data : nullptr; }
  const void* raw() const { return buffer_ ? buffer_->data : nullptr; }
  template <class T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }
  std::vector<std::string>& strings() { return *strings_; }
  const std::vector<std::string>& strings() const { return *strings_; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  // Same data, new shape (element count must match); the buffer is shared.
  Tensor reshaped(Shape shape) const;
  Tensor clone() const;
  // Same bytes viewed as another dtype of equal element size (e.g. uint16 bits as bfloat16).
  Tensor reinterpretAs(DType dtype) const;
  // Element i converted to double / int64 whatever the dtype (for shape inputs, scalars).
  double getDouble(int64_t i) const;
  int64_t getInt(int64_t i) const;
  std::vector<int64_t> toInt64Vector() const;
  // Converts to another dtype (numeric <-> numeric, bool, and string <-> numeric as ONNX Cast).
  Result<Tensor> cast(DType to) const;
  // The same into `out` (this shape, the target dtype, already allocated: a kernel's output from
  // its pool), elements [from, to) only, so that pieces can run on threads of their own.
  Status castInto(Tensor& out, int64_t from, int64_t to) const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  // numElements(shape_), kept with the shape: kernels loop `i < t.size()`, and an out-of-line
  // product of the dims on every test took 84% of a Clip over 1.6M values (6.7 ms, not 0.1).
  int64_t size_ = 1;
  std::shared_ptr<Buffer> buffer_;
  std::shared_ptr<std::vector<std::string>> strings_;
};

Result<Tensor> tensorFromProto(const onnx::TensorProto& proto, const std::string& baseDir = "");
void tensorToProto(const Tensor& t, onnx::TensorProto* proto, const std::string& name = "");

// C++ type <-> DType mapping for templates.
template <class T>
struct DTypeOf;
#define DW_DTYPE_OF(T, D)             \
  template <>                         \
  struct DTypeOf<T> {                 \
    static constexpr DType value = D; \
  };
DW_DTYPE_OF(float, DType::kFloat)
DW_DTYPE_OF(double, DType::kDouble)
DW_DTYPE_OF(int8_t, DType::kInt8)
DW_DTYPE_OF(int16_t, DType::kInt16)
DW_DTYPE_OF(int32_t, DType::kInt32)
DW_DTYPE_OF(int64_t, DType::kInt64)
DW_DTYPE_OF(uint8_t, DType::kUInt8)
DW_DTYPE_OF(uint16_t, DType::kUInt16)
DW_DTYPE_OF(uint32_t, DType::kUInt32)
DW_DTYPE_OF(uint64_t, DType::kUInt64)
DW_DTYPE_OF(bool, DType::kBool)
#undef DW_DTYPE_OF

template <class T>
Tensor Tensor::fromVector(const std::vector<T>& v, Shape shape) {
  Tensor t(DTypeOf<T>::value, std::move(shape));
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(T));
  return t;
}

// A runtime value: absent (empty optional / unset), a tensor, or a sequence of tensors.
struct Value {
  enum class Kind : uint8_t { kNone, kTensor, kSequence };
  Kind kind = Kind::kNone;
  Tensor tensor;
  std::vector<Tensor> sequence;
  // Element type of an empty sequence, needed to report dtypes of SequenceEmpty and friends.
  DType elemType = DType::kUndefined;

  Value() = default;
  Value(Tensor t) : kind(Kind::kTensor), tensor(std::move(t)) {}
  static Value makeSequence(std::vector<Tensor> s, DType elem = DType::kUndefined) {
    Value v;
    v.kind = Kind::kSequence;
    v.sequence = std::move(s);
    v.elemType = elem;
    return v;
  }
  bool isTensor() const { return kind == Kind::kTensor; }
  bool isSequence() const { return kind == Kind::kSequence; }
  bool isNone() const { return kind == Kind::kNone; }
};

}  // namespace dw::engine
