#include "graphs/tensor_data.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <vector>

#include "nodes/half.h"
#include "nodes/type_syntax.h"

namespace dw {

using onnx::TensorProto;

size_t dtypeSize(int dtype) {
  switch (dtype) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      return 4;
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
    case TensorProto::UINT64:
    case TensorProto::COMPLEX64:
      return 8;
    case TensorProto::COMPLEX128:
      return 16;
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::INT16:
    case TensorProto::UINT16:
      return 2;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

int64_t elementCount(const TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;  // no real tensor has such dims
  return n;
}

Result<std::string> readExternalData(const TensorProto& t, const std::string& baseDir,
                                     size_t expected) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : t.external_data()) {
    if (e.key() == "location") location = e.value();
    if (e.key() != "offset" && e.key() != "length") continue;
    int64_t v = 0;
    const char* end = e.value().data() + e.value().size();
    auto [ptr, ec] = std::from_chars(e.value().data(), end, v);
    if (ec != std::errc() || ptr != end || v < 0 || v > (int64_t(1) << 48))
      return Status::error("tensor '" + t.name() + "': external data " + e.key() + " '" +
                           e.value() + "' is not a byte count");
    (e.key() == "offset" ? offset : length) = v;
  }
  const bool escapes = location.empty() || location[0] == '/' ||
                       ("/" + location + "/").find("/../") != std::string::npos;
  if (escapes)
    return Status::error("tensor '" + t.name() + "': external data location '" + location +
                         "' must be a relative path inside the model's folder");
  const std::string path = baseDir.empty() ? location : baseDir + "/" + location;
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f)
    return Status::error("tensor '" + t.name() + "': cannot open its external data file '" + path +
                         "' (ONNX keeps it next to the model: copy or move the two together)");
  const auto fileSize = static_cast<int64_t>(f.tellg());
  const int64_t want = length >= 0 ? length : static_cast<int64_t>(expected);
  if (want != static_cast<int64_t>(expected) || offset + want > fileSize)
    return Status::error("external data of tensor '" + t.name() + "' (" + std::to_string(want) +
                         " bytes at offset " + std::to_string(offset) + " of '" + path + "', " +
                         std::to_string(fileSize) + " bytes long) does not hold its " +
                         std::to_string(expected) + " bytes");
  std::string bytes(static_cast<size_t>(want), '\0');
  f.seekg(offset);
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<size_t>(f.gcount()) != bytes.size())
    return Status::error("external data file '" + path + "' is shorter than tensor '" + t.name() +
                         "' needs");
  return bytes;
}

namespace {

Status inlineTensor(TensorProto& t, const std::string& baseDir) {
  if (t.data_location() != TensorProto::EXTERNAL) return Status();
  const int64_t n = elementCount(t);
  const size_t size = dtypeSize(t.data_type());
  if (n < 0 || size == 0)
    return Status::error("tensor '" + t.name() + "' keeps data of a type or shape that cannot be " +
                         "stored outside the model");
  auto bytes = readExternalData(t, baseDir, static_cast<size_t>(n) * size);
  if (!bytes.ok()) return bytes.status();
  t.clear_external_data();
  t.set_data_location(TensorProto::DEFAULT);
  t.set_raw_data(std::move(*bytes));
  return Status();
}

Status inlineGraph(onnx::GraphProto& g, const std::string& baseDir) {
  for (auto& t : *g.mutable_initializer()) DW_RETURN_IF_ERROR(inlineTensor(t, baseDir));
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_t()) DW_RETURN_IF_ERROR(inlineTensor(*a.mutable_t(), baseDir));
      for (auto& t : *a.mutable_tensors()) DW_RETURN_IF_ERROR(inlineTensor(t, baseDir));
      if (a.has_g()) DW_RETURN_IF_ERROR(inlineGraph(*a.mutable_g(), baseDir));
      for (auto& sg : *a.mutable_graphs()) DW_RETURN_IF_ERROR(inlineGraph(sg, baseDir));
    }
  return Status();
}

}  // namespace

Status inlineExternalData(onnx::ModelProto& model, const std::string& baseDir) {
  return inlineGraph(*model.mutable_graph(), baseDir);
}

namespace {
template <class T>
void append(std::string& raw, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as ONNX requires
  raw.append(buf, sizeof(T));
}

// Raw little-endian bytes of a tensor's values, whichever field holds them.
Result<std::string> rawBytes(const TensorProto& t) {
  if (t.data_location() == TensorProto::EXTERNAL)
    return Status::error("tensor '" + t.name() +
                         "' keeps its data in an external file, which deepwire does not read yet");
  if (t.has_raw_data()) return t.raw_data();
  std::string raw;
  switch (t.data_type()) {
    case TensorProto::FLOAT:
    case TensorProto::COMPLEX64:
      for (float v : t.float_data()) append(raw, v);
      break;
    case TensorProto::DOUBLE:
    case TensorProto::COMPLEX128:
      for (double v : t.double_data()) append(raw, v);
      break;
    case TensorProto::INT64:
      for (int64_t v : t.int64_data()) append(raw, v);
      break;
    case TensorProto::UINT64:
    case TensorProto::UINT32:
      for (uint64_t v : t.uint64_data()) {
        if (t.data_type() == TensorProto::UINT32)
          append(raw, static_cast<uint32_t>(v));
        else
          append(raw, v);
      }
      break;
    case TensorProto::INT32:
      for (int32_t v : t.int32_data()) append(raw, v);
      break;
    case TensorProto::INT16:
      for (int32_t v : t.int32_data()) append(raw, static_cast<int16_t>(v));
      break;
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      for (int32_t v : t.int32_data()) append(raw, static_cast<uint16_t>(v));
      break;
    case TensorProto::INT8:
      for (int32_t v : t.int32_data()) append(raw, static_cast<int8_t>(v));
      break;
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      for (int32_t v : t.int32_data()) append(raw, static_cast<uint8_t>(v));
      break;
    default:
      return Status::error("tensor '" + t.name() + "' has element type " +
                           dtypeName(t.data_type()) + ", which has no raw form");
  }
  return raw;
}

// splitmix64: tiny, fast, and identical on every platform (unlike std:: distributions).
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};
}  // namespace

Status toRawData(TensorProto& t) {
  if (t.data_type() == TensorProto::STRING || t.has_raw_data()) return Status();
  auto raw = rawBytes(t);
  if (!raw.ok()) return raw.status();
  t.clear_float_data();
  t.clear_double_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_uint64_data();
  t.set_raw_data(std::move(raw.value()));
  return Status();
}

bool sameTensor(const TensorProto& a, const TensorProto& b) {
  if (a.name() != b.name() || a.data_type() != b.data_type() || a.dims_size() != b.dims_size())
    return false;
  for (int i = 0; i < a.dims_size(); ++i)
    if (a.dims(i) != b.dims(i)) return false;
  if (a.data_type() == TensorProto::STRING) {
    if (a.string_data_size() != b.string_data_size()) return false;
    for (int i = 0; i < a.string_data_size(); ++i)
      if (a.string_data(i) != b.string_data(i)) return false;
    return true;
  }
  auto ra = rawBytes(a), rb = rawBytes(b);
  return ra.ok() && rb.ok() && *ra == *rb;
}

Result<TensorProto> makeFilledTensor(const std::string& name, int dtype,
                                     const std::vector<int64_t>& shape, const FillSpec& f) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(dtype);
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::error("initializer '" + name + "': negative dimension");
    t.add_dims(d);
    if (__builtin_mul_overflow(count, d, &count))
      return Status::error("initializer '" + name +
                           "': its shape holds more values than a 64-bit count can hold; "
                           "check its dimensions");
  }
  const size_t esize = dtypeSize(dtype);
  if (esize == 0 || dtype == TensorProto::COMPLEX64 || dtype == TensorProto::COMPLEX128)
    return Status::error("initializer '" + name + "': fill '" + f.fill + "' cannot make " +
                         dtypeName(dtype) + " data; give its values instead");
  // A tensor stored in a model (protobuf) holds at most 2 GiB: a larger shape is a mistake, and
  // filling it ended in "internal error: std::bad_alloc".
  constexpr double kMaxBytes = 2.0 * (1 << 30);
  if (static_cast<double>(count) * static_cast<double>(esize) > kMaxBytes) {
    std::string dims;
    for (int64_t d : shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    return Status::error("initializer '" + name + "': shape [" + dims + "] holds " +
                         std::to_string(count) +
                         " values, more than a model's tensor can hold (2 GiB); check its "
                         "dimensions");
  }
  // fan_out = shape[0], fan_in = shape[1], each times the receptive field (Conv layout).
  double receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
  double fanOut = shape.empty() ? 1 : static_cast<double>(shape[0]) * receptive;
  double fanIn = shape.size() < 2 ? fanOut : static_cast<double>(shape[1]) * receptive;
  if (f.fanInFirst) std::swap(fanIn, fanOut);

  Rng rng{f.seed};
  std::function<double()> gen;
  const std::string& k = f.fill;
  if (k == "zeros")
    gen = [] { return 0.0; };
  else if (k == "ones")
    gen = [] { return 1.0; };
  else if (k == "constant")
    gen = [&] { return f.value; };
  else if (k == "uniform")
    gen = [&] { return f.low + (f.high - f.low) * rng.uniform(); };
  else if (k == "normal")
    gen = [&] { return f.mean + f.stddev * rng.normal(); };
  else if (k == "orthogonal") {
    // Rows of a (rows x cols) view made orthonormal (or columns, when rows > cols) by
    // Gram-Schmidt on Gaussian vectors, as Keras and PyTorch do with a QR decomposition.
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t cols = rows ? count / rows : 0;
    const int64_t n = std::min(rows, cols), len = std::max(rows, cols);
    std::vector<double> basis(static_cast<size_t>(n * len));
    for (int64_t i = 0; i < n; ++i) {
      double* v = &basis[static_cast<size_t>(i * len)];
      double norm = 0;
      do {
        for (int64_t j = 0; j < len; ++j) v[j] = rng.normal();
        for (int64_t p = 0; p < i; ++p) {
          const double* u = &basis[static_cast<size_t>(p * len)];
          double dot = 0;
          for (int64_t j = 0; j < len; ++j) dot += u[j] * v[j];
          for (int64_t j = 0; j < len; ++j) v[j] -= dot * u[j];
        }
        norm = 0;
        for (int64_t j = 0; j < len; ++j) norm += v[j] * v[j];
        norm = std::sqrt(norm);
      } while (norm < 1e-6);
      for (int64_t j = 0; j < len; ++j) v[j] /= norm;
    }
    auto values = std::make_shared<std::vector<double>>(static_cast<size_t>(count));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        (*values)[static_cast<size_t>(r * cols + c)] =
            rows <= cols ? basis[static_cast<size_t>(r * len + c)]
                         : basis[static_cast<size_t>(c * len + r)];
    auto index = std::make_shared<int64_t>(0);
    gen = [values, index] { return (*values)[static_cast<size_t>((*index)++)]; };
  } else {
    double scale = 0;  // limit (uniform) or stddev (normal)
    const bool uniform = k.find("uniform") != std::string::npos;
    if (k.rfind("glorot", 0) == 0)
      scale = uniform ? std::sqrt(6.0 / (fanIn + fanOut)) : std::sqrt(2.0 / (fanIn + fanOut));
    else if (k.rfind("he", 0) == 0)
      scale = uniform ? std::sqrt(6.0 / fanIn) : std::sqrt(2.0 / fanIn);
    else if (k.rfind("lecun", 0) == 0)
      scale = uniform ? std::sqrt(3.0 / fanIn) : std::sqrt(1.0 / fanIn);
    else
      return Status::error("initializer '" + name + "': unknown fill '" + k + "'");
    if (uniform)
      gen = [&rng, scale] { return scale * (2 * rng.uniform() - 1); };
    else
      gen = [&rng, scale] { return scale * rng.normal(); };
  }
  std::string raw;
  raw.reserve(static_cast<size_t>(count) * esize);
  const int64_t rowWidth = shape.empty() ? 1 : count / std::max<int64_t>(shape[0], 1);
  for (int64_t i = 0; i < count; ++i) {
    double v = gen();
    if (f.forgetGateOnes) {
      const int64_t col = i % rowWidth;
      if (col >= 2 * f.forgetGateOnes && col < 3 * f.forgetGateOnes) v = 1.0;
    }
    switch (dtype) {
      case TensorProto::FLOAT:
        append(raw, static_cast<float>(v));
        break;
      case TensorProto::DOUBLE:
        append(raw, v);
        break;
      case TensorProto::FLOAT16:
        append(raw, floatToHalf(static_cast<float>(v)));
        break;
      case TensorProto::BFLOAT16:
        append(raw, floatToBfloat16(static_cast<float>(v)));
        break;
      case TensorProto::INT8:
        append(raw, static_cast<int8_t>(std::llround(v)));
        break;
      case TensorProto::INT16:
        append(raw, static_cast<int16_t>(std::llround(v)));
        break;
      case TensorProto::INT32:
        append(raw, static_cast<int32_t>(std::llround(v)));
        break;
      case TensorProto::INT64:
        append(raw, static_cast<int64_t>(std::llround(v)));
        break;
      case TensorProto::UINT8:
        append(raw, static_cast<uint8_t>(std::llround(v)));
        break;
      case TensorProto::UINT16:
        append(raw, static_cast<uint16_t>(std::llround(v)));
        break;
      case TensorProto::UINT32:
        append(raw, static_cast<uint32_t>(std::llround(v)));
        break;
      case TensorProto::UINT64:
        append(raw, static_cast<uint64_t>(std::llround(v)));
        break;
      case TensorProto::BOOL:
        append(raw, static_cast<uint8_t>(v != 0));
        break;
    }
  }
  t.set_raw_data(std::move(raw));
  return t;
}

}  // namespace dw
