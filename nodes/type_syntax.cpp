#include "nodes/type_syntax.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace dw {

namespace {
struct DtypeEntry {
  int dtype;
  const char* name;
};
constexpr DtypeEntry kDtypes[] = {
    {onnx::TensorProto::FLOAT, "float"},         {onnx::TensorProto::DOUBLE, "double"},
    {onnx::TensorProto::FLOAT16, "float16"},     {onnx::TensorProto::BFLOAT16, "bfloat16"},
    {onnx::TensorProto::INT8, "int8"},           {onnx::TensorProto::INT16, "int16"},
    {onnx::TensorProto::INT32, "int32"},         {onnx::TensorProto::INT64, "int64"},
    {onnx::TensorProto::UINT8, "uint8"},         {onnx::TensorProto::UINT16, "uint16"},
    {onnx::TensorProto::UINT32, "uint32"},       {onnx::TensorProto::UINT64, "uint64"},
    {onnx::TensorProto::BOOL, "bool"},           {onnx::TensorProto::STRING, "string"},
    {onnx::TensorProto::COMPLEX64, "complex64"}, {onnx::TensorProto::COMPLEX128, "complex128"},
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Result<onnx::TypeProto> parseAll() {
    onnx::TypeProto t;
    DW_RETURN_IF_ERROR(parse(&t));
    skipSpace();
    if (pos_ != s_.size()) return fail("unexpected '" + s_.substr(pos_, 1) + "'");
    return t;
  }

 private:
  Status parse(onnx::TypeProto* t) {
    skipSpace();
    const std::string word = ident();
    if (word.empty()) return fail("expected a type such as float[N,784]");
    if (word == "seq" || word == "optional") {
      DW_RETURN_IF_ERROR(expect('('));
      onnx::TypeProto* inner = word == "seq" ? t->mutable_sequence_type()->mutable_elem_type()
                                             : t->mutable_optional_type()->mutable_elem_type();
      DW_RETURN_IF_ERROR(parse(inner));
      return expect(')');
    }
    if (word == "map") {
      DW_RETURN_IF_ERROR(expect('('));
      skipSpace();
      const std::string key = ident();
      auto kd = dtypeFromName(key);
      if (!kd) return fail("unknown map key type '" + key + "'");
      t->mutable_map_type()->set_key_type(*kd);
      DW_RETURN_IF_ERROR(expect(','));
      DW_RETURN_IF_ERROR(parse(t->mutable_map_type()->mutable_value_type()));
      return expect(')');
    }
    if (word == "sparse") {
      DW_RETURN_IF_ERROR(expect('('));
      skipSpace();
      const std::string dt = ident();
      auto d = dtypeFromName(dt);
      if (!d) return fail("unknown element type '" + dt + "'");
      auto* st = t->mutable_sparse_tensor_type();
      st->set_elem_type(*d);
      DW_RETURN_IF_ERROR(parseShape(st));
      return expect(')');
    }
    auto d = dtypeFromName(word);
    if (!d) return fail("unknown element type '" + word + "'");
    auto* tt = t->mutable_tensor_type();
    tt->set_elem_type(*d);
    return parseShape(tt);
  }

  template <class T>
  Status parseShape(T* tensorType) {
    skipSpace();
    if (pos_ >= s_.size() || s_[pos_] != '[') return Status();  // unknown rank
    ++pos_;
    auto* shape = tensorType->mutable_shape();
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Status();
    }
    while (true) {
      skipSpace();
      auto* dim = shape->add_dim();
      if (pos_ < s_.size() && s_[pos_] == '?') {
        ++pos_;
      } else if (pos_ < s_.size() && s_[pos_] == '"') {
        auto name = quoted();
        if (!name.ok()) return name.status();
        if (name->empty()) return fail("a dimension's name is empty; write ? for an unknown one");
        dim->set_dim_param(*name);
      } else if (pos_ + 1 < s_.size() && s_[pos_] == '-' &&
                 std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
        const size_t at = pos_++;
        const std::string digits = ident();
        pos_ = at;
        return fail("dimension -" + digits +
                    " is negative; a dimension is a size (0 or more), a name or ?");
      } else if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        size_t end = pos_;
        while (end < s_.size() && std::isdigit(static_cast<unsigned char>(s_[end]))) ++end;
        int64_t v = 0;
        auto [ptr, ec] = std::from_chars(s_.data() + pos_, s_.data() + end, v);
        if (ec != std::errc() || ptr != s_.data() + end)
          return fail("dimension " + s_.substr(pos_, end - pos_) + " is too large");
        dim->set_dim_value(v);
        pos_ = end;
      } else {
        const std::string param = ident();
        if (param.empty()) return fail("expected a dimension (a number, a name or ?)");
        dim->set_dim_param(param);
      }
      skipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      return expect(']');
    }
  }

  // A dimension name in double quotes, for names beyond ident()'s letters (ONNX allows any
  // string: exporters write "batch size" or "Squeezeonnx::Slice_10_dim_0"); \" and \\ escape.
  Result<std::string> quoted() {
    const size_t start = pos_++;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) {
      pos_ = start;
      return fail("the quoted dimension name is not closed with '\"'");
    }
    ++pos_;
    return out;
  }
  std::string ident() {
    size_t end = pos_;
    while (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) ||
                               s_[end] == '_' || s_[end] == '.' || s_[end] == '-'))
      ++end;
    std::string out = s_.substr(pos_, end - pos_);
    pos_ = end;
    return out;
  }
  Status expect(char c) {
    skipSpace();
    if (pos_ >= s_.size() || s_[pos_] != c) return fail(std::string("expected '") + c + "'");
    ++pos_;
    return Status();
  }
  void skipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  Status fail(const std::string& what) const {
    return Status::error("type \"" + s_ + "\", column " + std::to_string(pos_ + 1) + ": " + what);
  }

  const std::string& s_;
  size_t pos_ = 0;
};

// A dimension name as the parser reads it back: bare where ident() takes it whole and it
// cannot be read as a number or a negative size, else quoted.
std::string formatDimName(const std::string& name) {
  auto identChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  };
  const bool bare =
      !name.empty() &&
      (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_' || name[0] == '.') &&
      std::all_of(name.begin(), name.end(), identChar) &&
      static_cast<unsigned char>(name[0]) < 0x80;
  if (bare) return name;
  std::string out = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

template <class T>
std::string formatTensor(const T& tt) {
  std::string out = dtypeName(tt.elem_type());
  if (!tt.has_shape()) return out;
  out += "[";
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    if (i) out += ",";
    if (d.has_dim_value())
      out += std::to_string(d.dim_value());
    else if (d.has_dim_param() && !d.dim_param().empty())
      out += formatDimName(d.dim_param());
    else
      out += "?";
  }
  return out + "]";
}
}  // namespace

std::string dtypeName(int dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e.name;
  return dtype == 0 ? "undefined" : "dtype" + std::to_string(dtype);
}

std::optional<int> dtypeFromName(const std::string& name) {
  for (const auto& e : kDtypes)
    if (name == e.name) return e.dtype;
  if (name == "undefined") return 0;  // an element type left open (e.g. an empty sequence's)
  return std::nullopt;
}

const std::vector<std::string>& dtypeNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> v;
    for (const auto& e : kDtypes) v.push_back(e.name);
    return v;
  }();
  return kNames;
}

Result<onnx::TypeProto> parseType(const std::string& text) {
  return Parser(text).parseAll();
}

std::string formatType(const onnx::TypeProto& t) {
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType:
      return formatTensor(t.tensor_type());
    case onnx::TypeProto::kSequenceType:
      return "seq(" + formatType(t.sequence_type().elem_type()) + ")";
    case onnx::TypeProto::kOptionalType:
      return "optional(" + formatType(t.optional_type().elem_type()) + ")";
    case onnx::TypeProto::kMapType:
      return "map(" + dtypeName(t.map_type().key_type()) + "," +
             formatType(t.map_type().value_type()) + ")";
    case onnx::TypeProto::kSparseTensorType:
      return "sparse(" + formatTensor(t.sparse_tensor_type()) + ")";
    default:
      return "";
  }
}

std::string withFreeBatch(const std::string& text) {
  auto type = parseType(text);
  if (!type.ok() || !type->has_tensor_type() || !type->tensor_type().has_shape() ||
      type->tensor_type().shape().dim_size() == 0)
    return text;
  auto* d0 = type->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  d0->clear_dim_value();
  d0->set_dim_param("N");
  return formatType(*type);
}

}  // namespace dw
