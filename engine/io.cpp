#include "engine/io.h"

// onnx_pb.h defines ONNX_API, which onnx-data.pb.h needs, so it must come first.
#include <onnx/onnx_pb.h>

#include <onnx/onnx-data.pb.h>

#include <fstream>
#include <sstream>

namespace dw::engine {

namespace {

Result<std::string> readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error("cannot open '" + path + "'");
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

Status writeFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return Status::error("cannot write '" + path + "'");
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) return Status::error("write to '" + path + "' failed");
  return Status();
}

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

DType dtypeFromDescr(const std::string& d) {
  if (d.size() < 3) return DType::kUndefined;
  // Byte order '>' is rejected by the caller; '=' and '|' mean native on little-endian hosts.
  std::string k = d.substr(1);
  if (k == "f4") return DType::kFloat;
  if (k == "f8") return DType::kDouble;
  if (k == "f2") return DType::kFloat16;
  if (k == "i1") return DType::kInt8;
  if (k == "i2") return DType::kInt16;
  if (k == "i4") return DType::kInt32;
  if (k == "i8") return DType::kInt64;
  if (k == "u1") return DType::kUInt8;
  if (k == "u2") return DType::kUInt16;
  if (k == "u4") return DType::kUInt32;
  if (k == "u8") return DType::kUInt64;
  if (k == "b1") return DType::kBool;
  if (k == "V2") return DType::kBFloat16;
  if (k[0] == 'U') return DType::kString;
  return DType::kUndefined;
}

// Extracts the value after `'key':` in the header dict, up to the matching delimiter.
bool headerField(const std::string& h, const std::string& key, std::string* out, size_t* pos) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return false;
  size_t c = h.find(':', k);
  if (c == std::string::npos) return false;
  size_t s = h.find_first_not_of(' ', c + 1);
  if (s == std::string::npos) return false;
  *pos = s;
  size_t e;
  if (h[s] == '\'') {
    e = h.find('\'', s + 1);
    if (e == std::string::npos) return false;
    *out = h.substr(s + 1, e - s - 1);
  } else if (h[s] == '(') {
    e = h.find(')', s);
    if (e == std::string::npos) return false;
    *out = h.substr(s + 1, e - s - 1);
  } else {
    e = h.find_first_of(",}", s);
    if (e == std::string::npos) return false;
    *out = h.substr(s, e - s);
  }
  return true;
}

}  // namespace

Result<Tensor> parseNpy(const std::string& b, const std::string& label) {
  auto err = [&](size_t pos, const std::string& what) {
    return Status::error(label + ": invalid .npy at byte " + std::to_string(pos) + ": " + what);
  };
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) return err(0, "missing \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(b[6]);
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return err(8, "truncated header length");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    headerStart = 12;
  } else {
    return err(6, "unsupported format version " + std::to_string(major));
  }
  if (headerStart + headerLen > b.size()) return err(headerStart, "header runs past end of file");
  const std::string h = b.substr(headerStart, headerLen);
  std::string descr, order, shapeStr;
  size_t p1, p2, p3;
  if (!headerField(h, "descr", &descr, &p1)) return err(headerStart, "header has no 'descr'");
  if (!headerField(h, "fortran_order", &order, &p2))
    return err(headerStart, "header has no 'fortran_order'");
  if (!headerField(h, "shape", &shapeStr, &p3)) return err(headerStart, "header has no 'shape'");
  if (order.find("True") != std::string::npos)
    return err(headerStart + p2, "Fortran-order arrays are not supported; save with C order");
  if (!descr.empty() && descr[0] == '>')
    return err(headerStart + p1, "big-endian dtype '" + descr + "' is not supported");
  DType dt = dtypeFromDescr(descr);
  if (dt == DType::kUndefined) return err(headerStart + p1, "unsupported dtype '" + descr + "'");
  Shape shape;
  std::stringstream ss(shapeStr);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t s = item.find_first_not_of(' ');
    if (s == std::string::npos) continue;
    char* end = nullptr;
    long long v = std::strtoll(item.c_str() + s, &end, 10);
    if (end == item.c_str() + s || v < 0)
      return err(headerStart + p3, "bad shape '(" + shapeStr + ")'");
    shape.push_back(v);
  }
  const size_t dataStart = headerStart + headerLen;  // <= b.size(), checked above
  const int64_t n = numElements(shape);              // saturates: compared, never multiplied
  // Element size: numpy '<U' strings are fixed-width UTF-32.
  const size_t width = dt == DType::kString ? std::strtoul(descr.c_str() + 2, nullptr, 10) : 0;
  const size_t elem = dt == DType::kString ? width * 4 : dtypeSize(dt);
  if (width > (size_t(1) << 20))
    return err(headerStart + p1, "string width " + std::to_string(width) + " is implausible");
  // Divided, so that a header's huge shape cannot overflow into a small size.
  if (n > 0 && elem > 0 && static_cast<uint64_t>(n) > (b.size() - dataStart) / elem)
    return err(b.size(), "data has " + std::to_string(b.size() - dataStart) + " bytes, shape " +
                             shapeToString(shape) + " of " + dtypeName(dt) + " needs " +
                             (static_cast<uint64_t>(n) > UINT64_MAX / elem
                                  ? std::string("more than 2^64")
                                  : std::to_string(static_cast<uint64_t>(n) * elem)));
  if (dt == DType::kString) {
    std::vector<std::string> strs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      std::string s;
      for (size_t c = 0; c < width; ++c) {
        uint32_t cp;
        std::memcpy(&cp, b.data() + dataStart + (i * width + c) * 4, 4);
        if (cp == 0) break;
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
      strs[i] = std::move(s);
    }
    return Tensor::fromStrings(std::move(strs), shape);
  }
  Tensor t(dt, shape);
  if (t.bytes()) std::memcpy(t.raw(), b.data() + dataStart, t.bytes());
  if (dt == DType::kBool)  // a byte other than 0 or 1 is true, not an invalid C++ bool
    for (int64_t i = 0; i < t.size(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  return t;
}

std::string serializeNpy(const Tensor& t) {
  std::string descr;
  size_t width = 0;
  if (t.dtype() == DType::kString) {
    // UTF-32 code units; strings are treated as bytes (Latin-1) beyond ASCII.
    for (const auto& s : t.strings()) width = std::max(width, s.size());
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
    for (const auto& s : t.strings()) {
      for (size_t c = 0; c < width; ++c) {
        uint32_t cp = c < s.size() ? static_cast<unsigned char>(s[c]) : 0;
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
  return writeFile(path, serializeNpy(t));
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
  return writeFile(path, p.SerializeAsString());
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
  return Status::error("'" + path + "': unknown tensor file type; use .npy or .pb");
}

}  // namespace dw::engine
