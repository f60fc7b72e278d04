#include "graphs/project.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "graphs/file_io.h"

namespace dw {

using nlohmann::json;

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64Encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], kB64[(v >> 6) & 63], kB64[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {kB64[v >> 18], kB64[(v >> 12) & 63], kB64[(v >> 6) & 63], '='};
  }
  return out;
}

std::optional<std::string> base64Decode(const std::string& in) {
  int8_t table[256];
  std::fill(std::begin(table), std::end(table), int8_t{-1});
  for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(kB64[i])] = static_cast<int8_t>(i);
  if (in.size() % 4) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int8_t d = table[static_cast<uint8_t>(c)];
      if (d < 0 || pad) return std::nullopt;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 255);
    if (pad < 1) out += static_cast<char>(v & 255);
  }
  return out;
}

json floatToJson(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::optional<double> floatFromJson(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  return std::nullopt;
}

json paramToJson(const Param& p) {
  switch (p.type) {
    case ParamType::Float:
      return floatToJson(p.asFloat());
    case ParamType::Int:
      return p.asInt();
    case ParamType::Bool:
      return p.asBool();
    case ParamType::String:
      return p.asString();
    case ParamType::Ints:
      return p.asInts();
    case ParamType::Floats: {
      json a = json::array();
      for (double v : p.asFloats()) a.push_back(floatToJson(v));
      return a;
    }
    case ParamType::Strings:
      return p.asStrings();
    case ParamType::Tensor:
    case ParamType::Graph:
    case ParamType::SparseTensor:
    case ParamType::TypeProto:
      return base64Encode(p.asString());
    default: {
      json a = json::array();
      for (const auto& b : p.asStrings()) a.push_back(base64Encode(b));
      return a;
    }
  }
}

// Reads a value of a known type; on failure says what was expected.
Result<Param> paramFromJson(const json& j, ParamType t) {
  auto bad = [&](const std::string& expected) {
    return Status::error("expected " + expected + ", got " + std::string(j.type_name()) + " " +
                         j.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40));
  };
  switch (t) {
    case ParamType::Float: {
      auto v = floatFromJson(j);
      if (!v) return bad("a number");
      return Param::makeFloat(*v);
    }
    case ParamType::Int:
      if (!j.is_number_integer()) return bad("an integer");
      return Param::makeInt(j.get<int64_t>());
    case ParamType::Bool:
      if (j.is_boolean()) return Param::makeBool(j.get<bool>());
      if (j.is_number_integer() && (j.get<int64_t>() == 0 || j.get<int64_t>() == 1))
        return Param::makeBool(j.get<int64_t>() == 1);
      return bad("true or false");
    case ParamType::String:
      if (!j.is_string()) return bad("a string");
      return Param::makeString(j.get<std::string>());
    case ParamType::Ints: {
      if (!j.is_array()) return bad("an array of integers");
      std::vector<int64_t> v;
      for (const auto& e : j) {
        if (!e.is_number_integer()) return bad("an array of integers");
        v.push_back(e.get<int64_t>());
      }
      return Param::makeInts(std::move(v));
    }
    case ParamType::Floats: {
      if (!j.is_array()) return bad("an array of numbers");
      std::vector<double> v;
      for (const auto& e : j) {
        auto f = floatFromJson(e);
        if (!f) return bad("an array of numbers");
        v.push_back(*f);
      }
      return Param::makeFloats(std::move(v));
    }
    case ParamType::Strings: {
      if (!j.is_array()) return bad("an array of strings");
      std::vector<std::string> v;
      for (const auto& e : j) {
        if (!e.is_string()) return bad("an array of strings");
        v.push_back(e.get<std::string>());
      }
      return Param::makeStrings(std::move(v));
    }
    case ParamType::Tensor:
    case ParamType::Graph:
    case ParamType::SparseTensor:
    case ParamType::TypeProto: {
      if (!j.is_string()) return bad("a base64 string");
      auto bytes = base64Decode(j.get<std::string>());
      if (!bytes) return Status::error("invalid base64 data");
      return Param::makeProto(t, std::move(*bytes));
    }
    default: {
      if (!j.is_array()) return bad("an array of base64 strings");
      std::vector<std::string> v;
      for (const auto& e : j) {
        if (!e.is_string()) return bad("an array of base64 strings");
        auto bytes = base64Decode(e.get<std::string>());
        if (!bytes) return Status::error("invalid base64 data");
        v.push_back(std::move(*bytes));
      }
      return Param{t, std::move(v)};
    }
  }
}

// Top-level keys the reader interprets; any other is a section kept verbatim.
const std::set<std::string> kKnownKeys = {"format", "version", "model", "nodes", "links"};

json portToJson(int port) {
  return port == kGraphPort ? json("graph") : json(port);
}

// Reads the fields of a project, tracking the JSON path for messages.

// Whether a JSON value is an integer that T holds: nlohmann converts any number to an integer,
// and a float beyond its range is undefined behaviour there, so integers must be written as
// integers.
template <class T>
bool fitsInteger(const json& v) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
  const int64_t i = v.get<int64_t>();
  if constexpr (std::is_unsigned_v<T>)
    return i >= 0 && uint64_t(i) <= uint64_t(std::numeric_limits<T>::max());
  else
    return i >= int64_t(std::numeric_limits<T>::min()) &&
           i <= int64_t(std::numeric_limits<T>::max());
}

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status fail(const std::string& path, const std::string& msg) const {
    return Status::error(source_ + ": " + path + ": " + msg);
  }

  template <class T>
  Status get(const json& obj, const std::string& path, const char* key, T* out, bool required,
             const char* expected) const {
    auto it = obj.find(key);
    if (it == obj.end())
      return required ? fail(path, std::string("missing \"") + key + "\"") : Status();
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!fitsInteger<T>(*it))
        return fail(path + "/" + key, std::string("expected ") + expected + ", got " +
                                          it->type_name() + " " + it->dump().substr(0, 40));
    }
    try {
      *out = it->template get<T>();
    } catch (const json::exception&) {
      return fail(path + "/" + key,
                  std::string("expected ") + expected + ", got " + it->type_name());
    }
    return Status();
  }

  Result<Graph> read(const json& root) const {
    if (!root.is_object()) return fail("/", "a project is a JSON object");
    std::string format;
    DW_RETURN_IF_ERROR(get(root, "", "format", &format, false, "a string"));
    if (format != "deepwire-project")
      return fail("/format", "not a deepwire project (expected \"format\": \"deepwire-project\")");
    int version = 0;
    DW_RETURN_IF_ERROR(get(root, "", "version", &version, true, "an integer"));
    if (version > kProjectFormatVersion)
      return fail("/version", "written by a newer deepwire (project format " +
                                  std::to_string(version) + "); this build reads format " +
                                  std::to_string(kProjectFormatVersion) +
                                  " and older. Update deepwire to open it.");
    if (version < 1) return fail("/version", "format version must be at least 1");

    Graph g;
    ModelInfo info = g.info();
    if (auto it = root.find("model"); it != root.end()) {
      const json& m = *it;
      if (!m.is_object()) return fail("/model", "expected an object");
      DW_RETURN_IF_ERROR(get(m, "/model", "ir_version", &info.irVersion, false, "an integer"));
      // Each version checked to be an int before converting: a float beyond int's range was
      // undefined behaviour in nlohmann's conversion of the whole map. Domains are used as they
      // are (they may hold any byte, NUL included, so no lookup by C string).
      std::map<std::string, int> opsets;
      if (auto os = m.find("opsets"); os != m.end()) {
        if (!os->is_object()) return fail("/model/opsets", "expected an object of integers");
        for (const auto& [domain, v] : os->items()) {
          if (!fitsInteger<int>(v))
            return fail("/model/opsets/" + domain,
                        std::string("expected an integer version, got ") + v.type_name() + " " +
                            v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40));
          opsets[domain] = v.get<int>();
        }
      }
      if (!opsets.empty()) {
        info.opsets.clear();
        for (const auto& [d, v] : opsets) info.opsets[canonicalDomain(d)] = v;
      }
      DW_RETURN_IF_ERROR(get(m, "/model", "graph_name", &info.graphName, false, "a string"));
      DW_RETURN_IF_ERROR(get(m, "/model", "doc", &info.docString, false, "a string"));
      DW_RETURN_IF_ERROR(get(m, "/model", "producer_name", &info.producerName, false, "a string"));
      DW_RETURN_IF_ERROR(
          get(m, "/model", "producer_version", &info.producerVersion, false, "a string"));
      DW_RETURN_IF_ERROR(get(m, "/model", "domain", &info.modelDomain, false, "a string"));
      DW_RETURN_IF_ERROR(
          get(m, "/model", "model_version", &info.modelVersion, false, "an integer"));
      DW_RETURN_IF_ERROR(
          get(m, "/model", "metadata", &info.metadata, false, "an object of strings"));
    }
    for (const auto& [key, value] : root.items())
      if (!kKnownKeys.count(key))
        info.sections[key] = value.dump(-1, ' ', false, json::error_handler_t::replace);
    g.setInfo(info);

    auto nodes = root.find("nodes");
    if (nodes == root.end()) return fail("/", "missing \"nodes\"");
    if (!nodes->is_array()) return fail("/nodes", "expected an array");
    for (size_t i = 0; i < nodes->size(); ++i) {
      const std::string path = "/nodes/" + std::to_string(i);
      DW_RETURN_IF_ERROR(readNode((*nodes)[i], path, g));
    }
    if (auto links = root.find("links"); links != root.end()) {
      if (!links->is_array()) return fail("/links", "expected an array");
      for (size_t i = 0; i < links->size(); ++i) {
        const std::string path = "/links/" + std::to_string(i);
        const json& l = (*links)[i];
        Link link;
        DW_RETURN_IF_ERROR(readEnd(l, path, "from", &link.from));
        DW_RETURN_IF_ERROR(readEnd(l, path, "to", &link.to));
        Status st = g.addLink(link, false);
        if (!st.ok()) return fail(path, st.message());
      }
    }
    return g;
  }

 private:
  Status readEnd(const json& l, const std::string& path, const char* key, PortRef* out) const {
    if (!l.is_object())
      return fail(path, "a link is an object {\"from\": [node, port], \"to\": ...}");
    auto it = l.find(key);
    if (it == l.end()) return fail(path, std::string("missing \"") + key + "\"");
    const json& e = *it;
    const std::string p = path + "/" + key;
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer())
      return fail(p, "expected [node id, port index or \"graph\"]");
    out->node = e[0].get<NodeId>();
    if (e[1].is_string() && e[1].get<std::string>() == "graph")
      out->port = kGraphPort;
    else if (e[1].is_number_integer() && e[1].get<int64_t>() >= 0 && e[1].get<int64_t>() < 1 << 20)
      out->port = e[1].get<int>();
    else
      return fail(p + "/1", "expected a port index or \"graph\"");
    return Status();
  }

  Status readNode(const json& j, const std::string& path, Graph& g) const {
    if (!j.is_object()) return fail(path, "a node is an object");
    Node n;
    DW_RETURN_IF_ERROR(get(j, path, "id", &n.id, true, "an integer"));
    DW_RETURN_IF_ERROR(get(j, path, "domain", &n.domain, false, "a string"));
    DW_RETURN_IF_ERROR(get(j, path, "type", &n.type, true, "a string"));
    DW_RETURN_IF_ERROR(get(j, path, "name", &n.name, false, "a string"));
    DW_RETURN_IF_ERROR(get(j, path, "specified_outputs_name", &n.specifiedOutputsName, false,
                           "an array of strings"));
    DW_RETURN_IF_ERROR(get(j, path, "lda_coeff", &n.ldaCoeff, false, "a number"));
    DW_RETURN_IF_ERROR(get(j, path, "model", &n.model, false, "a string"));
    DW_RETURN_IF_ERROR(get(j, path, "input_arity", &n.inputArity, false, "an integer"));
    DW_RETURN_IF_ERROR(get(j, path, "output_arity", &n.outputArity, false, "an integer"));
    if (n.inputArity < 0 || n.inputArity > 4096 || n.outputArity < 0 || n.outputArity > 4096)
      return fail(path, "input_arity and output_arity must be between 0 and 4096");
    if (!std::isfinite(n.ldaCoeff)) return fail(path + "/lda_coeff", "must be a finite number");
    std::array<double, 2> pos{0, 0};
    DW_RETURN_IF_ERROR(get(j, path, "position", &pos, false, "[x, y]"));
    n.position = {pos[0], pos[1]};
    n.domain = canonicalDomain(n.domain);
    const NodeSpec* spec = g.catalogue().find(n.domain, n.type, g.opset(n.domain));
    if (!spec) {
      std::string msg = "unknown node type '" + n.type + "' in domain '" + n.domain + "'";
      auto hints = g.catalogue().suggest(n.type);
      if (!hints.empty()) {
        msg += "; did you mean";
        for (const auto& h : hints) msg += " " + h;
        msg += "?";
      }
      return fail(path + "/type", msg);
    }
    if (auto params = j.find("params"); params != j.end()) {
      if (!params->is_object()) return fail(path + "/params", "expected an object");
      for (const auto& [key, value] : params->items()) {
        const ParamSpec* ps = spec->param(key);
        if (!ps) {
          std::string names;
          for (const auto& p : spec->params) names += (names.empty() ? "" : ", ") + p.name;
          return fail(path + "/params/" + key,
                      n.type + " has no parameter '" + key + "'" +
                          (names.empty() ? "" : " (it has: " + names + ")"));
        }
        auto p = paramFromJson(value, ps->type);
        if (!p.ok()) return fail(path + "/params/" + key, p.message());
        n.params[key] = std::move(p.value());
      }
    }
    if (auto weights = j.find("weights"); weights != j.end()) {
      if (!weights->is_object()) return fail(path + "/weights", "expected an object");
      if (spec->kind != NodeKind::Layer)
        return fail(path + "/weights", "only layers store trained weights, not a " + n.type);
      for (const auto& [key, value] : weights->items()) {
        auto p = paramFromJson(value, ParamType::Tensor);
        if (!p.ok()) return fail(path + "/weights/" + key, p.message());
        n.weights[key] = p->asString();
      }
    }
    Status st = g.insertNode(std::move(n));
    if (!st.ok()) return fail(path, st.message());
    return Status();
  }

  std::string source_;
};

}  // namespace

std::string projectToJsonText(const Graph& g) {
  json root;
  root["format"] = "deepwire-project";
  // Format 1 readers would silently drop stored layer weights; other projects stay readable.
  bool hasWeights = false;
  for (const auto& [id, n] : g.nodes()) hasWeights |= !n.weights.empty();
  root["version"] = hasWeights ? 2 : 1;
  const ModelInfo& info = g.info();
  json m;
  m["ir_version"] = info.irVersion;
  m["opsets"] = info.opsets;
  m["graph_name"] = info.graphName;
  if (!info.docString.empty()) m["doc"] = info.docString;
  m["producer_name"] = info.producerName;
  if (!info.producerVersion.empty()) m["producer_version"] = info.producerVersion;
  if (!info.modelDomain.empty()) m["domain"] = info.modelDomain;
  if (info.modelVersion) m["model_version"] = info.modelVersion;
  if (!info.metadata.empty()) m["metadata"] = info.metadata;
  root["model"] = m;
  json nodes = json::array();
  for (const auto& [id, n] : g.nodes()) {
    json jn;
    jn["id"] = id;
    jn["domain"] = n.domain;
    jn["type"] = n.type;
    if (!n.name.empty()) jn["name"] = n.name;
    jn["position"] = {n.position.x, n.position.y};
    if (!n.params.empty()) {
      json params = json::object();
      for (const auto& [k, v] : n.params) params[k] = paramToJson(v);
      jn["params"] = params;
    }
    if (!n.specifiedOutputsName.empty()) jn["specified_outputs_name"] = n.specifiedOutputsName;
    if (n.ldaCoeff != 1.0) jn["lda_coeff"] = n.ldaCoeff;
    if (!n.model.empty()) jn["model"] = n.model;
    if (n.inputArity) jn["input_arity"] = n.inputArity;
    if (n.outputArity) jn["output_arity"] = n.outputArity;
    if (!n.weights.empty()) {
      json weights = json::object();
      for (const auto& [k, bytes] : n.weights)
        weights[k] = paramToJson(Param::makeProto(ParamType::Tensor, bytes));
      jn["weights"] = std::move(weights);
    }
    nodes.push_back(std::move(jn));
  }
  root["nodes"] = std::move(nodes);
  json links = json::array();
  for (const auto& l : g.links())
    links.push_back({{"from", {l.from.node, portToJson(l.from.port)}},
                     {"to", {l.to.node, portToJson(l.to.port)}}});
  root["links"] = std::move(links);
  for (const auto& [key, text] : info.sections) {
    auto value = json::parse(text, nullptr, false);
    if (!value.is_discarded()) root[key] = std::move(value);
  }
  // Invalid UTF-8 in a name is written as U+FFFD rather than failing the save. Object keys
  // are sorted by their bytes before that replacement, so a key with invalid bytes (an opset
  // domain of a damaged model) may land elsewhere once the file is read back: such a text is
  // read and written once more here, so that saving what was loaded gives the same file.
  std::string text = root.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  if (text.find("\xEF\xBF\xBD") != std::string::npos)
    text = json::parse(text).dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  return text;
}

namespace {

constexpr int kMaxJsonDepth = 64;

// Nesting depth of `j`, without recursion (a hostile file could be deep enough to overflow it).
int jsonDepth(const json& j) {
  int deepest = 0;
  std::vector<std::pair<const json*, int>> stack{{&j, 1}};
  while (!stack.empty()) {
    auto [v, d] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, d);
    if (d > kMaxJsonDepth) break;
    if (v->is_structured())
      for (const auto& child : *v) stack.emplace_back(&child, d + 1);
  }
  return deepest;
}

}  // namespace

Result<Graph> projectFromJsonText(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column 5: ...;
    // last read: '...'". What it last read can be a whole base64 weight (kilobytes in a dialog
    // wider than the screen): its end is what shows where the file breaks off.
    if (const auto lr = what.find("last read: '"); lr != std::string::npos) {
      const size_t start = lr + 12, end = what.rfind('\'');
      constexpr size_t kShown = 40;
      if (end != std::string::npos && end > start + kShown)
        what = what.substr(0, start) + "..." + what.substr(end - kShown);
    }
    const auto pos = what.find("parse error");
    return Status::error(source + ": invalid JSON (" +
                         (pos == std::string::npos ? what : what.substr(pos)) +
                         "); the file may be truncated");
  } catch (const json::exception& e) {
    // A number beyond double's range ('1e999'): nlohmann names the token, not where it is.
    std::string what = e.what(), where;
    const auto q = what.find('\'');
    if (q != std::string::npos) {
      const std::string token = what.substr(q + 1, what.rfind('\'') - q - 1);
      const auto at = token.empty() ? std::string::npos : text.find(token);
      if (at != std::string::npos) {
        const auto lineStart = text.rfind('\n', at);
        where = " at line " +
                std::to_string(1 + std::count(text.begin(), text.begin() + at, '\n')) +
                ", column " +
                std::to_string(at - (lineStart == std::string::npos ? 0 : lineStart + 1) + 1);
      }
    }
    const auto pos = what.find("] ");
    return Status::error(source + ": invalid JSON" + where + " (" +
                         (pos == std::string::npos ? what : what.substr(pos + 2)) + ")" +
                         (what.find("number overflow") != std::string::npos
                              ? "; numbers must fit a double (about 1.8e308 at most)"
                              : ""));
  }
  // Readers, error messages and the writer recurse over the document: a file nested deeper
  // than any project is refused here instead of running out of stack there.
  if (jsonDepth(root) > kMaxJsonDepth)
    return Status::error(source + ": the JSON nests more than " + std::to_string(kMaxJsonDepth) +
                         " levels deep, deeper than any project");
  return Reader(source).read(root);
}

Status saveProject(const Graph& graph, const std::string& path) {
  return writeFileAtomic(path, projectToJsonText(graph));
}

Result<Graph> loadProject(const std::string& path) {
  auto text = readFile(path);
  if (!text.ok()) return text.status();
  return projectFromJsonText(*text, path);
}

}  // namespace dw
