#include "engine/tensor.h"

#include <onnx/onnx_pb.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "graphs/tensor_data.h"

namespace dw::engine {

size_t dtypeSize(DType t) {
  switch (t) {
    case DType::kFloat:
      return 4;
    case DType::kDouble:
      return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16:
      return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return 1;
    case DType::kInt32:
    case DType::kUInt32:
      return 4;
    case DType::kInt64:
    case DType::kUInt64:
      return 8;
    case DType::kString:
    case DType::kUndefined:
      return 0;
  }
  return 0;
}

const char* dtypeName(DType t) {
  switch (t) {
    case DType::kFloat:
      return "float32";
    case DType::kDouble:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
    case DType::kUInt16:
      return "uint16";
    case DType::kUInt32:
      return "uint32";
    case DType::kUInt64:
      return "uint64";
    case DType::kBool:
      return "bool";
    case DType::kString:
      return "string";
    case DType::kUndefined:
      return "undefined";
  }
  return "undefined";
}

DType dtypeFromOnnx(int32_t t) {
  using P = onnx::TensorProto;
  switch (t) {
    case P::FLOAT:
      return DType::kFloat;
    case P::DOUBLE:
      return DType::kDouble;
    case P::FLOAT16:
      return DType::kFloat16;
    case P::BFLOAT16:
      return DType::kBFloat16;
    case P::INT8:
      return DType::kInt8;
    case P::INT16:
      return DType::kInt16;
    case P::INT32:
      return DType::kInt32;
    case P::INT64:
      return DType::kInt64;
    case P::UINT8:
      return DType::kUInt8;
    case P::UINT16:
      return DType::kUInt16;
    case P::UINT32:
      return DType::kUInt32;
    case P::UINT64:
      return DType::kUInt64;
    case P::BOOL:
      return DType::kBool;
    case P::STRING:
      return DType::kString;
    default:
      return DType::kUndefined;
  }
}

int32_t dtypeToOnnx(DType t) {
  using P = onnx::TensorProto;
  switch (t) {
    case DType::kFloat:
      return P::FLOAT;
    case DType::kDouble:
      return P::DOUBLE;
    case DType::kFloat16:
      return P::FLOAT16;
    case DType::kBFloat16:
      return P::BFLOAT16;
    case DType::kInt8:
      return P::INT8;
    case DType::kInt16:
      return P::INT16;
    case DType::kInt32:
      return P::INT32;
    case DType::kInt64:
      return P::INT64;
    case DType::kUInt8:
      return P::UINT8;
    case DType::kUInt16:
      return P::UINT16;
    case DType::kUInt32:
      return P::UINT32;
    case DType::kUInt64:
      return P::UINT64;
    case DType::kBool:
      return P::BOOL;
    case DType::kString:
      return P::STRING;
    case DType::kUndefined:
      return P::UNDEFINED;
  }
  return P::UNDEFINED;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal half -> normal float
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // Inf or NaN; keep NaN quiet and non-zero
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> Inf
  if (absx < 0x38800000u) {  // subnormal or zero in half: scale and round via float arithmetic
    float af;
    std::memcpy(&af, &absx, 4);
    float scaled = af * 16777216.0f;  // 2^24: units of the smallest half subnormal
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even
  return static_cast<uint16_t>(sign | h);
}

float bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

int64_t numElements(const Shape& s) {
  // Saturates instead of overflowing: shapes come from files, and [2^40, 2^40, 0] is empty
  // while its leading product is not representable.
  for (int64_t d : s)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  return n;
}

std::string shapeToString(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

Buffer::Buffer(size_t bytes) {
  // Round up so that vector loops may safely read a full 64-byte line past the end.
  capacity = bytes;
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  data = std::aligned_alloc(64, alloc);
  if (!data) throw std::bad_alloc();
  std::memset(data, 0, alloc);
}

Buffer::Buffer(void* d, size_t cap, Device dev, std::function<void(void*)> release)
    : data(d), capacity(cap), device(dev), release_(std::move(release)) {}

Buffer::~Buffer() {
  if (release_)
    release_(data);
  else
    std::free(data);
}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), size_(numElements(shape_)) {
  if (dtype_ == DType::kString) {
    strings_ = std::make_shared<std::vector<std::string>>(static_cast<size_t>(size()));
  } else {
    buffer_ = std::make_shared<Buffer>(bytes());
  }
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer)
    : dtype_(dtype), shape_(std::move(shape)), size_(numElements(shape_)) {
  if (dtype_ == DType::kString) {
    strings_ = std::make_shared<std::vector<std::string>>(static_cast<size_t>(size()));
  } else if (buffer && buffer->capacity >= bytes()) {
    buffer_ = std::move(buffer);
  } else {
    buffer_ = std::make_shared<Buffer>(bytes());
  }
}

Tensor Tensor::fromStrings(std::vector<std::string> v, Shape shape) {
  Tensor t;
  t.dtype_ = DType::kString;
  t.shape_ = std::move(shape);
  t.size_ = numElements(t.shape_);
  t.strings_ = std::make_shared<std::vector<std::string>>(std::move(v));
  return t;
}

namespace {
template <class F>
auto visitNumeric(DType t, F&& f) {
  switch (t) {
    case DType::kFloat:
      return f(float{});
    case DType::kDouble:
      return f(double{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kInt16:
      return f(int16_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kUInt16:
      return f(uint16_t{});
    case DType::kUInt32:
      return f(uint32_t{});
    case DType::kUInt64:
      return f(uint64_t{});
    case DType::kBool:
      return f(bool{});
    default:
      return f(float{});
  }
}
}  // namespace

Tensor Tensor::scalar(DType dtype, double value) {
  Tensor t(dtype, {});
  if (dtype == DType::kFloat16) {
    *t.data<uint16_t>() = floatToHalf(static_cast<float>(value));
  } else if (dtype == DType::kBFloat16) {
    *t.data<uint16_t>() = floatToBf16(static_cast<float>(value));
  } else if (dtype == DType::kString) {
    t.strings()[0] = std::to_string(value);
  } else {
    visitNumeric(dtype, [&](auto z) { *t.data<decltype(z)>() = static_cast<decltype(z)>(value); });
  }
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.size_ = numElements(t.shape_);
  return t;
}

Tensor Tensor::reinterpretAs(DType dtype) const {
  Tensor t = *this;
  if (dtypeSize(dtype) == dtypeSize(dtype_) && dtype != DType::kString && dtype_ != DType::kString)
    t.dtype_ = dtype;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (dtype_ == DType::kString) {
    t.strings() = strings();
  } else if (bytes()) {
    std::memcpy(t.raw(), raw(), bytes());
  }
  return t;
}

double Tensor::getDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat16:
      return halfToFloat(data<uint16_t>()[i]);
    case DType::kBFloat16:
      return bf16ToFloat(data<uint16_t>()[i]);
    case DType::kString:
      return std::strtod(strings()[i].c_str(), nullptr);
    case DType::kUndefined:
      return 0;
    default:
      return visitNumeric(dtype_,
                          [&](auto z) { return static_cast<double>(data<decltype(z)>()[i]); });
  }
}

int64_t Tensor::getInt(int64_t i) const {
  switch (dtype_) {
    case DType::kInt64:
      return data<int64_t>()[i];
    case DType::kUInt64:
      return static_cast<int64_t>(data<uint64_t>()[i]);
    case DType::kString:
      return std::strtoll(strings()[i].c_str(), nullptr, 10);
    default:
      return static_cast<int64_t>(getDouble(i));
  }
}

std::vector<int64_t> Tensor::toInt64Vector() const {
  std::vector<int64_t> v(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) v[i] = getInt(i);
  return v;
}

namespace {

template <class To, class From>
void castLoop(const From* src, To* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<To>(src[i]);
}

// Float -> integer casts of out-of-range values are UB in C++; saturate-free wraparound is what
// numpy produces via int64, so go through int64 for narrower integer targets.
template <class To>
To fromDouble(double v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != 0;
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(v);
  } else {
    if (std::isnan(v)) return To(0);
    if constexpr (std::is_unsigned_v<To> && sizeof(To) == 8) {
      if (v >= 9.2e18) return static_cast<To>(v);
    }
    if (v >= 9.2e18 || v <= -9.2e18) return static_cast<To>(std::numeric_limits<int64_t>::min());
    return static_cast<To>(static_cast<int64_t>(v));
  }
}

std::string formatFloatString(double v, DType from) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  // Shortest round-trip digits, which is what NumPy prints for str(np.float32(x)).
  char buf[64];
  auto r = from == DType::kDouble ? std::to_chars(buf, buf + sizeof buf, v)
                                  : std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  return std::string(buf, r.ptr);
}

}  // namespace

Result<Tensor> Tensor::cast(DType to) const {
  if (!onHost())
    return Status::error("internal error: a cast on the host of a tensor in GPU memory");
  if (to == dtype_) return clone();
  if (to == DType::kUndefined || dtype_ == DType::kUndefined)
    return Status::error("cannot cast to or from an undefined dtype");
  Tensor out(to, shape_);
  DW_RETURN_IF_ERROR(castInto(out, 0, size()));
  return out;
}

Status Tensor::castInto(Tensor& out, int64_t from, int64_t to) const {
  if (!onHost() || !out.onHost())
    return Status::error("internal error: a cast on the host of a tensor in GPU memory");
  if (out.dtype_ == DType::kUndefined || dtype_ == DType::kUndefined)
    return Status::error("cannot cast to or from an undefined dtype");
  if (out.shape_ != shape_ || from < 0 || to > size() || from > to)
    return Status::error("internal error: a cast into a tensor of another shape");
  const DType target = out.dtype_;
  if (target == dtype_) {
    if (dtype_ == DType::kString)
      std::copy(strings().begin() + from, strings().begin() + to, out.strings().begin() + from);
    else
      std::memcpy(static_cast<char*>(out.raw()) + from * dtypeSize(dtype_),
                  static_cast<const char*>(raw()) + from * dtypeSize(dtype_),
                  static_cast<size_t>(to - from) * dtypeSize(dtype_));
    return Status();
  }
  if (dtype_ == DType::kString) {
    for (int64_t i = from; i < to; ++i) {
      const std::string& s = strings()[i];
      double v;
      if (s == "INF" || s == "inf" || s == "+INF" || s == "Infinity")
        v = std::numeric_limits<double>::infinity();
      else if (s == "-INF" || s == "-inf" || s == "-Infinity")
        v = -std::numeric_limits<double>::infinity();
      else if (s == "NaN" || s == "nan" || s == "NAN")
        v = std::numeric_limits<double>::quiet_NaN();
      else
        v = std::strtod(s.c_str(), nullptr);
      if (target == DType::kFloat16)
        out.data<uint16_t>()[i] = floatToHalf(static_cast<float>(v));
      else if (target == DType::kBFloat16)
        out.data<uint16_t>()[i] = floatToBf16(static_cast<float>(v));
      else if (target == DType::kInt64)
        out.data<int64_t>()[i] = std::strtoll(s.c_str(), nullptr, 10);
      else if (target == DType::kUInt64)
        out.data<uint64_t>()[i] = std::strtoull(s.c_str(), nullptr, 10);
      else
        visitNumeric(target,
                     [&](auto z) { out.data<decltype(z)>()[i] = fromDouble<decltype(z)>(v); });
    }
    return Status();
  }
  if (target == DType::kString) {
    for (int64_t i = from; i < to; ++i) {
      if (isFloating(dtype_))
        out.strings()[i] = formatFloatString(getDouble(i), dtype_);
      else if (dtype_ == DType::kUInt64)
        out.strings()[i] = std::to_string(data<uint64_t>()[i]);
      else
        out.strings()[i] = std::to_string(getInt(i));
    }
    return Status();
  }
  if (dtype_ == DType::kFloat16 || dtype_ == DType::kBFloat16 || target == DType::kFloat16 ||
      target == DType::kBFloat16) {
    // Half types go through float, which represents every half/bfloat16 value exactly.
    std::vector<float> tmp(static_cast<size_t>(to - from));
    if (dtype_ == DType::kFloat16)
      for (int64_t i = from; i < to; ++i) tmp[i - from] = halfToFloat(data<uint16_t>()[i]);
    else if (dtype_ == DType::kBFloat16)
      for (int64_t i = from; i < to; ++i) tmp[i - from] = bf16ToFloat(data<uint16_t>()[i]);
    else if (dtype_ == DType::kDouble)
      for (int64_t i = from; i < to; ++i) tmp[i - from] = static_cast<float>(data<double>()[i]);
    else
      for (int64_t i = from; i < to; ++i) tmp[i - from] = static_cast<float>(getDouble(i));
    if (target == DType::kFloat16)
      for (int64_t i = from; i < to; ++i) out.data<uint16_t>()[i] = floatToHalf(tmp[i - from]);
    else if (target == DType::kBFloat16)
      for (int64_t i = from; i < to; ++i) out.data<uint16_t>()[i] = floatToBf16(tmp[i - from]);
    else
      visitNumeric(target, [&](auto z) {
        auto* d = out.data<decltype(z)>();
        for (int64_t i = from; i < to; ++i) d[i] = fromDouble<decltype(z)>(tmp[i - from]);
      });
    return Status();
  }
  visitNumeric(dtype_, [&](auto zf) {
    using From = decltype(zf);
    const From* src = data<From>();
    visitNumeric(target, [&](auto zt) {
      using To = decltype(zt);
      To* dst = out.data<To>();
      if constexpr (std::is_floating_point_v<From> && !std::is_floating_point_v<To>) {
        for (int64_t i = from; i < to; ++i) dst[i] = fromDouble<To>(src[i]);
      } else if constexpr (std::is_same_v<To, bool>) {
        for (int64_t i = from; i < to; ++i) dst[i] = src[i] != From(0);
      } else {
        castLoop(src + from, dst + from, to - from);
      }
    });
  });
  return Status();
}

namespace {

template <class T, class Field>
void copyField(const Field& f, Tensor& t) {
  T* d = t.data<T>();
  for (int i = 0; i < f.size(); ++i) d[i] = static_cast<T>(f.Get(i));
}

}  // namespace

Result<Tensor> tensorFromProto(const onnx::TensorProto& p, const std::string& baseDir) {
  DType dt = dtypeFromOnnx(p.data_type());
  if (dt == DType::kUndefined)
    return Status::error("tensor '" + p.name() + "' has unsupported data type " +
                         std::to_string(p.data_type()));
  Shape shape(p.dims().begin(), p.dims().end());
  // Sizes are checked before anything is allocated: a file may declare far more than it holds.
  long double declared = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::error("tensor '" + p.name() + "' has a negative dimension");
    declared *= static_cast<long double>(d);
  }
  // Strings count as one byte each here: their shape alone can overflow the element count.
  if (declared * std::max<size_t>(dtypeSize(dt), 1) > static_cast<long double>(int64_t(1) << 48))
    return Status::error("tensor '" + p.name() + "' declares dims " + shapeToString(shape) +
                         ", more elements than any memory holds");
  const int64_t n = numElements(shape);
  if (dt == DType::kString) {
    if (p.string_data_size() != n)
      return Status::error("tensor '" + p.name() + "' has " + std::to_string(p.string_data_size()) +
                           " strings for shape " + shapeToString(shape));
    return Tensor::fromStrings({p.string_data().begin(), p.string_data().end()}, shape);
  }
  const size_t bytes = static_cast<size_t>(n) * dtypeSize(dt);
  std::string external;
  const std::string* raw = nullptr;
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    auto read = readExternalData(p, baseDir, bytes);
    if (!read.ok()) return read.status();
    external = std::move(*read);
    raw = &external;
  } else if (p.has_raw_data()) {
    raw = &p.raw_data();
  }
  if (raw) {
    if (raw->size() != bytes)
      return Status::error("tensor '" + p.name() + "' raw_data has " + std::to_string(raw->size()) +
                           " bytes, expected " + std::to_string(bytes) + " for shape " +
                           shapeToString(shape));
    Tensor t(dt, shape);
    if (bytes) std::memcpy(t.raw(), raw->data(), bytes);
    // A bool is one byte, 0 or 1, to C++: any other byte a file holds means true.
    if (dt == DType::kBool)
      for (auto* b = static_cast<uint8_t*>(t.raw()); b != static_cast<uint8_t*>(t.raw()) + bytes;
           ++b)
        *b = *b != 0;
    return t;
  }
  auto check = [&](int count) -> Status {
    if (count != n)
      return Status::error("tensor '" + p.name() + "' has " + std::to_string(count) +
                           " values for shape " + shapeToString(shape));
    return Status();
  };
  // The typed field this dtype's values are stored in must hold exactly n of them.
  switch (dt) {
    case DType::kFloat:
      DW_RETURN_IF_ERROR(check(p.float_data_size()));
      break;
    case DType::kDouble:
      DW_RETURN_IF_ERROR(check(p.double_data_size()));
      break;
    case DType::kInt64:
      DW_RETURN_IF_ERROR(check(p.int64_data_size()));
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      DW_RETURN_IF_ERROR(check(p.uint64_data_size()));
      break;
    default:
      DW_RETURN_IF_ERROR(check(p.int32_data_size()));
  }
  Tensor t(dt, shape);
  switch (dt) {
    case DType::kFloat:
      copyField<float>(p.float_data(), t);
      break;
    case DType::kDouble:
      copyField<double>(p.double_data(), t);
      break;
    case DType::kInt64:
      copyField<int64_t>(p.int64_data(), t);
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      if (dt == DType::kUInt32)
        copyField<uint32_t>(p.uint64_data(), t);
      else
        copyField<uint64_t>(p.uint64_data(), t);
      break;
    default:  // int32_data carries all narrower types, including fp16/bf16 bit patterns.
      switch (dt) {
        case DType::kInt32:
          copyField<int32_t>(p.int32_data(), t);
          break;
        case DType::kInt16:
          copyField<int16_t>(p.int32_data(), t);
          break;
        case DType::kInt8:
          copyField<int8_t>(p.int32_data(), t);
          break;
        case DType::kUInt16:
        case DType::kFloat16:
        case DType::kBFloat16:
          copyField<uint16_t>(p.int32_data(), t);
          break;
        case DType::kUInt8:
          copyField<uint8_t>(p.int32_data(), t);
          break;
        case DType::kBool:
          copyField<bool>(p.int32_data(), t);
          break;
        default:
          break;
      }
  }
  return t;
}

void tensorToProto(const Tensor& t, onnx::TensorProto* p, const std::string& name) {
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(dtypeToOnnx(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  if (t.dtype() == DType::kString) {
    for (const auto& s : t.strings()) p->add_string_data(s);
  } else {
    p->set_raw_data(t.raw(), t.bytes());
  }
}

}  // namespace dw::engine
