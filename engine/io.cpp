#include "engine/io.h"

// onnx_pb.h defines ONNX_API, which onnx-data.pb.h needs, so it must come first.
#include <onnx/onnx_pb.h>

#include <onnx/onnx-data.pb.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "graphs/file_io.h"

namespace dw::engine {

namespace {

constexpr const char* kResaveNpy = "re-save the array with numpy.save";
// A wider '<U' dtype (over 4 MiB an element) is a corrupt header rather than text.
constexpr size_t kMaxStringWidth = size_t(1) << 20;

const char* npyDescr(DType t) {
  switch (t) {
    case DType::kFloat:
      return "<f4";
    case DType::kDouble:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt8:
      return "|i1";
    case DType::kInt16:
      return "<i2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kUInt8:
      return "|u1";
    case DType::kUInt16:
      return "<u2";
    case DType::kUInt32:
      return "<u4";
    case DType::kUInt64:
      return "<u8";
    case DType::kBool:
      return "|b1";
    // NumPy has no bfloat16; ml_dtypes writes it as a 2-byte void, which we mirror.
    case DType::kBFloat16:
      return "|V2";
    default:
      return nullptr;
  }
}

// The dtype whose descr (without its byte order) is `code`; the writer's table read backwards,
// so that what we write we also read.
DType dtypeFromNpyCode(const std::string& code) {
  for (int i = 0; i < static_cast<int>(DType::kString); ++i) {
    const char* d = npyDescr(static_cast<DType>(i));
    if (d && code == d + 1) return static_cast<DType>(i);
  }
  return DType::kUndefined;
}

// Value of `key` in the NPY header dict (a Python literal), raw text up to the next top-level
// comma or closing brace.
std::optional<std::string> npyField(const std::string& header, const std::string& key) {
  const std::string k = "'" + key + "'";
  auto pos = header.find(k);
  if (pos == std::string::npos) return std::nullopt;
  pos = header.find(':', pos + k.size());
  if (pos == std::string::npos) return std::nullopt;
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string v = header.substr(pos, end - pos);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

// "(2, 3)", "(5,)" or "()": anything else (names, negative or fractional dims) is refused
// rather than half-read.
std::optional<Shape> parseNpyShape(const std::string& text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return std::nullopt;
  const std::string inner = text.substr(1, text.size() - 2);
  std::vector<std::string> cells;
  for (size_t pos = 0;;) {
    const size_t comma = inner.find(',', pos);
    cells.push_back(
        inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  Shape shape;
  for (size_t i = 0; i < cells.size(); ++i) {
    std::string cell = cells[i];
    cell.erase(0, std::min(cell.size(), cell.find_first_not_of(' ')));
    while (!cell.empty() && cell.back() == ' ') cell.pop_back();
    // Python 2 wrote long dims with an L suffix.
    if (!cell.empty() && cell.back() == 'L') cell.pop_back();
    if (cell.empty()) {
      // Only "()" itself, or the empty item after a 1-tuple's trailing comma ("(5,)").
      if (i + 1 == cells.size()) continue;
      return std::nullopt;
    }
    if (cell.find_first_not_of("0123456789") != std::string::npos || cell.size() > 18)
      return std::nullopt;
    shape.push_back(std::stoll(cell));
  }
  return shape;
}

void appendUtf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// NumPy pads each fixed-width element with NUL code points; the first one ends the string.
std::vector<std::string> decodeUtf32(const char* data, size_t count, size_t width, bool swap) {
  std::vector<std::string> out(count);
  for (size_t i = 0; i < count; ++i) {
    for (size_t c = 0; c < width; ++c) {
      uint32_t cp;
      std::memcpy(&cp, data + (i * width + c) * 4, 4);
      if (swap) byteSwapInPlace(&cp, 1, 4);
      if (cp == 0) break;
      appendUtf8(out[i], cp);
    }
  }
  return out;
}

}  // namespace

std::string hexBytes(const std::string& bytes, size_t n) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < std::min(n, bytes.size()); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (i) out += ' ';
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

bool hostLittleEndian() {
  const uint16_t x = 1;
  return *reinterpret_cast<const uint8_t*>(&x) == 1;
}

void byteSwapInPlace(void* data, size_t count, size_t width) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i) std::reverse(p + i * width, p + (i + 1) * width);
}

std::optional<uint64_t> payloadBytes(const Shape& shape, size_t elementBytes) {
  unsigned __int128 n = elementBytes;
  for (int64_t d : shape) {
    n *= static_cast<uint64_t>(d);
    if (n > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
  }
  return static_cast<uint64_t>(n);
}

Status truncatedData(const std::string& path, const Shape& shape, DType dtype, size_t dataStart,
                     uint64_t available, const std::optional<uint64_t>& need,
                     const std::string& where, const std::string& fix) {
  return Status::error(path + ": truncated: the header promises " +
                       (need ? std::to_string(*need) : std::string("more than 2^63")) +
                       " bytes of data after byte " + std::to_string(dataStart) + where +
                       " (shape " + shapeToString(shape) + ", " + dtypeName(dtype) +
                       "), the file holds " + std::to_string(available) + " (it ends at byte " +
                       std::to_string(dataStart + available) + "); " + fix);
}

Result<NpyHeader> parseNpyHeader(const std::string& b, uint64_t fileSize, const std::string& path) {
  if (b.size() < 6 || b.compare(0, 6, "\x93NUMPY") != 0)
    return Status::error(path + ": not an NPY file: it starts with " + hexBytes(b, 6) +
                         " at byte 0, where an NPY file starts with 93 4E 55 4D 50 59 "
                         "(\\x93NUMPY); " +
                         kResaveNpy);
  if (b.size() < 10)
    return Status::error(path + ": truncated: the NPY preamble needs 10 bytes, the file holds " +
                         std::to_string(b.size()) + "; " + kResaveNpy);
  const int major = static_cast<unsigned char>(b[6]);
  size_t headerLen = 0, headerStart = 0;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12)
      return Status::error(path + ": truncated: the NPY version " + std::to_string(major) +
                           " preamble needs 12 bytes, the file holds " + std::to_string(b.size()) +
                           "; " + kResaveNpy);
    for (int i = 0; i < 4; ++i)
      headerLen |= size_t(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    headerStart = 12;
  } else {
    return Status::error(path + ": NPY version " + std::to_string(major) +
                         " at byte 6 is not supported (1, 2 or 3); " + kResaveNpy);
  }
  if (fileSize < headerStart + headerLen || b.size() < headerStart + headerLen)
    return Status::error(path + ": truncated: the NPY header (length " + std::to_string(headerLen) +
                         " at byte 8) needs " + std::to_string(headerStart + headerLen) +
                         " bytes, the file holds " + std::to_string(fileSize) + "; " + kResaveNpy);
  const std::string header = b.substr(headerStart, headerLen);
  const std::string at = " in the header at byte " + std::to_string(headerStart);
  const std::string shown = header.size() > 120 ? header.substr(0, 120) + "..." : header;
  const auto open = header.find_first_not_of(' ');
  if (open == std::string::npos || header[open] != '{' || header.find('}') == std::string::npos)
    return Status::error(path + ": NPY header at byte " + std::to_string(headerStart) +
                         " is not a Python dict: '" + shown + "'; " + kResaveNpy);
  auto descr = npyField(header, "descr");
  auto fortran = npyField(header, "fortran_order");
  auto shapeText = npyField(header, "shape");
  if (!descr || !fortran || !shapeText)
    return Status::error(path + ": NPY header at byte " + std::to_string(headerStart) + " lacks " +
                         (!descr     ? "descr"
                          : !fortran ? "fortran_order"
                                     : "shape") +
                         ": '" + shown + "'; " + kResaveNpy);
  if (*fortran != "False" && *fortran != "True")
    return Status::error(path + ": NPY fortran_order '" + *fortran + "'" + at +
                         " is neither True nor False; " + kResaveNpy);
  std::string d = *descr;
  if (d.size() < 2 || (d.front() != '\'' && d.front() != '"') || d.back() != d.front())
    return Status::error(path + ": NPY dtype " + d + at +
                         " is a structured or object dtype; save a plain numeric array");
  d = d.substr(1, d.size() - 2);
  if (d.size() < 3)
    return Status::error(path + ": NPY dtype '" + d + "'" + at + " is not understood");
  const char endian = d[0];
  const std::string code = d.substr(1);
  NpyHeader l;
  const bool isString =
      code[0] == 'U' && code.find_first_not_of("0123456789", 1) == std::string::npos;
  l.dtype = isString ? DType::kString : dtypeFromNpyCode(code);
  if (l.dtype == DType::kUndefined ||
      (endian != '<' && endian != '>' && endian != '|' && endian != '='))
    return Status::error(path + ": NPY dtype '" + d + "'" + at +
                         " is not supported (f2 f4 f8 i1-i8 u1-u8 b1, U strings, V2 bfloat16); "
                         "convert it with numpy's astype and save it again");
  size_t elementBytes = dtypeSize(l.dtype);
  if (isString) {
    // More than 7 digits is past the limit already, and would overflow the conversion.
    l.stringWidth = code.size() > 8 ? kMaxStringWidth + 1 : std::stoul(code.substr(1));
    if (l.stringWidth == 0 || l.stringWidth > kMaxStringWidth)
      return Status::error(path + ": NPY dtype '" + d + "'" + at + ": a string width of " +
                           code.substr(1) + " is implausible (1 to 2^20 characters); " +
                           kResaveNpy);
    elementBytes = 4 * l.stringWidth;
  }
  auto shape = parseNpyShape(*shapeText);
  if (!shape)
    return Status::error(path + ": NPY shape " + *shapeText + at +
                         " is not a tuple of non-negative integers; " + kResaveNpy);
  l.shape = *shape;
  // '|' (no byte order) and '=' (native) mean the writer's host order, taken to be ours.
  l.littleEndian = endian == '<' || (endian != '>' && hostLittleEndian());
  l.fortranOrder = *fortran == "True";
  l.dataStart = headerStart + headerLen;
  const auto need = payloadBytes(l.shape, elementBytes);
  if (!need || fileSize - l.dataStart < *need)
    return truncatedData(path, l.shape, l.dtype, l.dataStart, fileSize - l.dataStart, need, "",
                         kResaveNpy);
  l.dataBytes = *need;
  return l;
}

namespace {

// For a Fortran-order array of `shape`: f(c, k) for each element, c its row-major index and k
// its index in the file (the first axis runs fastest there).
template <class F>
void forFortranElements(const Shape& shape, F f) {
  const int64_t n = numElements(shape), rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> stride(rank), at(rank, 0);
  for (int64_t a = 0, s = 1; a < rank; ++a) stride[a] = s, s *= shape[a];
  int64_t k = 0;
  for (int64_t c = 0; c < n; ++c) {
    f(c, k);
    for (int64_t a = rank - 1; a >= 0; --a) {  // the row-major counter, last axis fastest
      k += stride[a];
      if (++at[a] < shape[a]) break;
      k -= at[a] * stride[a];
      at[a] = 0;
    }
  }
}

}  // namespace

Result<Tensor> parseNpy(const std::string& b, const std::string& label) {
  auto h = parseNpyHeader(b, b.size(), label);
  if (!h) return h.status();
  const char* data = b.data() + h->dataStart;
  const bool swap = h->littleEndian != hostLittleEndian();
  if (h->dtype == DType::kString) {
    std::vector<std::string> strings =
        decodeUtf32(data, static_cast<size_t>(numElements(h->shape)), h->stringWidth, swap);
    if (h->fortranOrder) {
      std::vector<std::string> rowMajor(strings.size());
      forFortranElements(h->shape, [&](int64_t c, int64_t k) { rowMajor[c] = strings[k]; });
      strings.swap(rowMajor);
    }
    return Tensor::fromStrings(std::move(strings), h->shape);
  }
  Tensor t(h->dtype, h->shape);
  const size_t width = dtypeSize(h->dtype);
  if (h->fortranOrder && h->shape.size() > 1) {
    auto* out = static_cast<char*>(t.raw());
    forFortranElements(h->shape, [&](int64_t c, int64_t k) {
      std::memcpy(out + c * width, data + k * width, width);
    });
  } else if (h->dataBytes) {
    std::memcpy(t.raw(), data, h->dataBytes);
  }
  if (swap && width > 1) byteSwapInPlace(t.raw(), static_cast<size_t>(t.size()), width);
  if (h->dtype == DType::kBool)  // a byte other than 0 or 1 is true, not an invalid C++ bool
    for (int64_t i = 0; i < t.size(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  return t;
}

namespace {

// The code points of a UTF-8 string, as numpy's '<U' arrays hold them. A byte that does not
// start a well-formed sequence stands for itself (Latin-1), so nothing is dropped.
std::vector<uint32_t> codePoints(const std::string& s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c >> 6) == 2;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (!ok) {
      cps.push_back(b);
      ++i;
    } else {
      cps.push_back(cp);
      i += len;
    }
  }
  return cps;
}

}  // namespace

std::string serializeNpy(const Tensor& t) {
  std::string descr;
  size_t width = 0;
  std::vector<std::vector<uint32_t>> strings;
  if (t.dtype() == DType::kString) {
    for (const auto& s : t.strings()) {
      strings.push_back(codePoints(s));
      width = std::max(width, strings.back().size());
    }
    if (width == 0) width = 1;
    descr = "<U" + std::to_string(width);
  } else {
    descr = npyDescr(t.dtype());
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i) shape += std::to_string(t.dim(i)) + ", ";
  if (t.rank() > 1) shape.resize(shape.size() - 2);
  if (t.rank() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  h += std::string(pad, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>((h.size() >> 8) & 0xff);
  out += h;
  if (t.dtype() == DType::kString) {
    for (const auto& cps : strings) {
      for (size_t c = 0; c < width; ++c) {
        const uint32_t cp = c < cps.size() ? cps[c] : 0;
        out.append(reinterpret_cast<const char*>(&cp), 4);
      }
    }
  } else {
    out.append(static_cast<const char*>(t.raw()), t.bytes());
  }
  return out;
}

Result<Tensor> readNpy(const std::string& path) {
  auto bytes = readFile(path);
  if (!bytes) return bytes.status();
  return parseNpy(*bytes, path);
}

Status writeNpy(const std::string& path, const Tensor& t) {
  if (t.dtype() == DType::kUndefined)
    return Status::error("cannot write an undefined tensor to '" + path + "'");
  return writeFileAtomic(path, serializeNpy(t));
}

Result<Tensor> readTensorPb(const std::string& path) {
  auto bytes = readFile(path);
  if (!bytes) return bytes.status();
  onnx::TensorProto p;
  if (!p.ParseFromString(*bytes))
    return Status::error(path + ": not a valid serialized onnx.TensorProto (" +
                         std::to_string(bytes->size()) + " bytes)");
  auto dir =
      path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  auto t = tensorFromProto(p, dir);
  if (!t) return t.status().withContext(path);
  return t;
}

Status writeTensorPb(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensorToProto(t, &p, name);
  return writeFileAtomic(path, p.SerializeAsString());
}

Result<Value> valueFromSequenceProto(const onnx::SequenceProto& p) {
  std::vector<Tensor> items;
  if (p.elem_type() != onnx::SequenceProto::TENSOR &&
      p.elem_type() != onnx::SequenceProto::UNDEFINED)
    return Status::error("only sequences of tensors are supported");
  for (const auto& tp : p.tensor_values()) {
    auto t = tensorFromProto(tp);
    if (!t) return t.status();
    items.push_back(std::move(*t));
  }
  return Value::makeSequence(std::move(items));
}

Result<Value> valueFromOptionalProto(const onnx::OptionalProto& p) {
  switch (p.elem_type()) {
    case onnx::OptionalProto::UNDEFINED:
      return Value();
    case onnx::OptionalProto::TENSOR: {
      if (!p.has_tensor_value()) return Value();
      auto t = tensorFromProto(p.tensor_value());
      if (!t) return t.status();
      return Value(std::move(*t));
    }
    case onnx::OptionalProto::SEQUENCE:
      if (!p.has_sequence_value()) return Value();
      return valueFromSequenceProto(p.sequence_value());
    default:
      return Status::error("unsupported optional element type");
  }
}

Result<Tensor> tensorFromSparseProto(const onnx::SparseTensorProto& p) {
  const std::string name = p.values().name();
  auto vals = tensorFromProto(p.values());
  if (!vals) return vals.status().withContext("sparse tensor '" + name + "' values");
  auto idx = tensorFromProto(p.indices());
  if (!idx) return idx.status().withContext("sparse tensor '" + name + "' indices");
  Shape dims(p.dims().begin(), p.dims().end());
  // The dense size is checked before it is allocated: a few values may declare a huge tensor.
  long double declared = 1;
  for (int64_t d : dims) {
    if (d < 0) return Status::error("sparse tensor '" + name + "' has a negative dimension");
    declared *= static_cast<long double>(d);
  }
  if (declared * std::max<size_t>(dtypeSize(vals->dtype()), 1) >
      static_cast<long double>(int64_t(1) << 40))
    return Status::error("sparse tensor '" + name + "' declares dims " + shapeToString(dims) +
                         ", more than deepwire holds dense (it keeps sparse tensors dense)");
  Tensor dense(vals->dtype(), dims);
  std::memset(dense.raw(), 0, dense.bytes());
  const int64_t nnz = vals->size(), rank = static_cast<int64_t>(dims.size());
  const bool coo = idx->rank() == 2;
  if (vals->rank() != 1 || (idx->dtype() != DType::kInt64 && idx->dtype() != DType::kInt32) ||
      (coo ? idx->dim(0) != nnz || idx->dim(1) != rank : idx->size() != nnz))
    return Status::error("sparse tensor '" + name + "': " + std::to_string(nnz) +
                         " values need indices [" + std::to_string(nnz) + ", " +
                         std::to_string(rank) + "] or [" + std::to_string(nnz) + "], got " +
                         shapeToString(idx->shape()));
  const size_t es = dtypeSize(vals->dtype());
  for (int64_t i = 0; i < nnz; ++i) {
    int64_t lin = 0;
    if (coo) {
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t v = idx->getInt(i * rank + d);
        if (v < 0 || v >= dims[d])
          return Status::error("sparse tensor '" + name + "': index " + std::to_string(v) +
                               " of value " + std::to_string(i) + " is outside dimension " +
                               std::to_string(d) + " (" + std::to_string(dims[d]) + ")");
        lin = lin * dims[d] + v;
      }
    } else {
      lin = idx->getInt(i);
      if (lin < 0 || lin >= dense.size())
        return Status::error("sparse tensor '" + name + "': index " + std::to_string(lin) +
                             " is outside its " + std::to_string(dense.size()) + " elements");
    }
    char* to = static_cast<char*>(dense.raw()) + lin * es;
    const char* from = static_cast<const char*>(vals->raw()) + i * es;
    // A repeated index adds, as a sparse sum does.
    switch (vals->dtype()) {
      case DType::kFloat:
        *reinterpret_cast<float*>(to) += *reinterpret_cast<const float*>(from);
        break;
      case DType::kDouble:
        *reinterpret_cast<double*>(to) += *reinterpret_cast<const double*>(from);
        break;
      case DType::kInt64:
        *reinterpret_cast<int64_t*>(to) += *reinterpret_cast<const int64_t*>(from);
        break;
      case DType::kInt32:
        *reinterpret_cast<int32_t*>(to) += *reinterpret_cast<const int32_t*>(from);
        break;
      default:
        std::memcpy(to, from, es);
    }
  }
  return dense;
}

Result<Value> readValuePb(const std::string& path, const onnx::TypeProto& type) {
  auto bytes = readFile(path);
  if (!bytes) return bytes.status();
  const auto bad = [&](const char* what) {
    return Status::error(path + ": not a valid serialized onnx." + std::string(what));
  };
  if (type.has_sequence_type()) {
    onnx::SequenceProto p;
    if (!p.ParseFromString(*bytes)) return bad("SequenceProto");
    auto v = valueFromSequenceProto(p);
    if (!v) return v.status().withContext(path);
    return v;
  }
  if (type.has_sparse_tensor_type()) {
    onnx::SparseTensorProto p;
    if (!p.ParseFromString(*bytes)) return bad("SparseTensorProto");
    auto t = tensorFromSparseProto(p);
    if (!t) return t.status().withContext(path);
    return Value(std::move(*t));
  }
  if (type.has_optional_type()) {
    onnx::OptionalProto p;
    if (!p.ParseFromString(*bytes)) return bad("OptionalProto");
    auto v = valueFromOptionalProto(p);
    if (!v) return v.status().withContext(path);
    return v;
  }
  onnx::TensorProto p;
  if (!p.ParseFromString(*bytes)) return bad("TensorProto");
  auto t = tensorFromProto(p);
  if (!t) return t.status().withContext(path);
  return Value(std::move(*t));
}

Result<Tensor> readTensorFile(const std::string& path) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0) return readNpy(path);
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, ".pb") == 0) return readTensorPb(path);
  return Status::error("'" + path +
                       "': unknown tensor file type; use .npy, .pb or an MNIST-style IDX file "
                       "(a name with idx or ubyte in it, .gz allowed)");
}

}  // namespace dw::engine
