// The standard ONNX operators, read from libonnx's OpSchemaRegistry: names, ports, type
// constraints, attributes, defaults and docs all come from the schema. Only two things are derived
// here: the category (the defs/<dir>/ the schema is defined in) and, from the doc text, which INT
// attributes are flags and which STRING attributes are enumerations.
#include <onnx/defs/schema.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>

#include <cstring>
#include "nodes/catalogue.h"
#include "nodes/onnx_params.h"
#include "nodes/schema_facts.h"

namespace dw {

namespace {

struct DomainInfo {
  const char* onnxName;  // as registered in libonnx
  const char* canonical;
  int maxOpset;  // newest opset deepwire targets for this domain
};
constexpr DomainInfo kOnnxDomains[] = {
    {"", kOnnxDomain, kDefaultOnnxOpset},
    {"ai.onnx.preview.training", kTrainingDomain, 1},
};

std::string categoryFromFile(const std::string& file) {
  static const std::map<std::string, std::string> kPretty = {
      {"controlflow", "control flow"},
      {"object_detection", "object detection"},
      {"traditionalml", "traditional ml"}};
  const auto pos = file.rfind("defs/");
  if (pos == std::string::npos) return "misc";
  const auto start = pos + 5;
  const auto end = file.find('/', start);
  if (end == std::string::npos) return "misc";
  std::string dir = file.substr(start, end - start);
  auto it = kPretty.find(dir);
  return it != kPretty.end() ? it->second : dir;
}

bool isIdentifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Schema docs are C++ string literals indented like the code around them; remove the common
// indentation of the lines after the first so the text reads well in panels and tooltips.
std::string dedent(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  size_t common = std::string::npos;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t lead = lines[i].find_first_not_of(" \t");
    if (lead != std::string::npos) common = std::min(common, lead);
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string line = lines[i];
    if (i > 0 && common != std::string::npos)
      line = line.size() > common ? line.substr(common) : "";
    if (i == 0) line = trim(line);
    out += (i ? "\n" : "") + line;
  }
  return trim(out);
}

// An INT attribute is a flag when it defaults to 0 or 1 and its doc speaks of it as one.
bool looksBoolean(const std::string& name, const std::string& doc, int64_t def) {
  if (def != 0 && def != 1) return false;
  // Words that mark an integer setting rather than a switch (axis, layout, group, sizes...).
  static const std::set<std::string> kNotFlagWords = {
      "axis", "layout", "order", "box",   "dtype", "datatype", "group",
      "size", "height", "width", "ratio", "stash", "start",    "k"};
  size_t pos = 0;
  while (pos <= name.size()) {
    const size_t us = name.find('_', pos);
    if (kNotFlagWords.count(
            name.substr(pos, us == std::string::npos ? std::string::npos : us - pos)))
      return false;
    if (us == std::string::npos) break;
    pos = us + 1;
  }
  static const std::regex kFlagDoc(
      R"(\b(whether|boolean|true|false|or not|if set to 1|if 1\b|is 1\b|=1\b|one of 0, or 1))",
      std::regex::icase);
  return std::regex_search(doc, kFlagDoc);
}

// Enumerations a STRING attribute's doc fixes: quoted values, or a list after "either", "one of",
// "modes:" and the like. Returns nothing unless the default is among them.
std::vector<std::string> enumFromDoc(const std::string& name, const std::string& doc,
                                     const std::string& def) {
  std::vector<std::string> values;
  auto accept = [&](const std::vector<std::string>& v) {
    if (v.size() < 2) return false;
    if (!def.empty() && std::find(v.begin(), v.end(), def) == v.end()) return false;
    values = v;
    return true;
  };
  auto addUnique = [](std::vector<std::string>& v, const std::string& s) {
    if (isIdentifier(s) && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  };
  // 1. A list after a trigger phrase, up to the sentence's end.
  static const std::regex kTrigger(
      R"((either|one of|modes:|Valid values are|Allowed values are|apply to loss:|apply:|modes are supported:)\s*([^.]*))",
      std::regex::icase);
  std::smatch m;
  if (std::regex_search(doc, m, kTrigger)) {
    std::string list = m[2].str();
    list = std::regex_replace(list, std::regex(R"(\([^)]*\))"), " ");  // drop "(default)" notes
    list = std::regex_replace(list, std::regex(R"(\b(or|and)\b)"), ",");
    std::vector<std::string> v;
    size_t pos = 0;
    while (pos <= list.size()) {
      size_t comma = list.find(',', pos);
      std::string tok =
          trim(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      tok.erase(std::remove_if(tok.begin(), tok.end(),
                               [](char c) { return c == '"' || c == '\'' || c == '`'; }),
                tok.end());
      if (!tok.empty()) {
        if (!isIdentifier(tok)) {
          v.clear();
          break;
        }
        addUnique(v, tok);
      }
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (accept(v)) return values;
  }
  // 2. Values quoted in the doc ("x", 'x', `x`). Without a default to anchor them, quoted words
  // are as likely to be input names (Gradient's "xs", "zs"), so they are not taken.
  if (def.empty()) return {};
  std::vector<std::string> quoted;
  static const std::regex kQuoted(R"(["'`]([A-Za-z_][A-Za-z0-9_]*)["'`])");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), kQuoted);
       it != std::sregex_iterator(); ++it)
    addUnique(quoted, (*it)[1].str());
  if (accept(quoted)) return values;
  return {};
}

std::vector<std::string> typeStrings(const onnx::OpSchema::FormalParameter& p) {
  std::vector<std::string> out;
  for (const auto* t : p.GetTypes()) out.push_back(*t);
  std::sort(out.begin(), out.end());
  return out;
}

PortSpec portFromFormal(const onnx::OpSchema::FormalParameter& p, const onnx::OpSchema& schema) {
  PortSpec port;
  port.name = p.GetName();
  port.typeStr = p.GetTypeStr();
  port.doc = p.GetDescription();
  switch (p.GetOption()) {
    case onnx::OpSchema::Optional:
      port.option = PortOption::Optional;
      break;
    case onnx::OpSchema::Variadic:
      port.option = PortOption::Variadic;
      break;
    default:
      port.option = PortOption::Single;
  }
  switch (p.GetDifferentiationCategory()) {
    case onnx::OpSchema::Differentiable:
      port.differentiability = Differentiability::Differentiable;
      break;
    case onnx::OpSchema::NonDifferentiable:
      port.differentiability = Differentiability::NonDifferentiable;
      break;
    default:
      port.differentiability = Differentiability::Unknown;
  }
  port.homogeneous = p.GetIsHomogeneous();
  port.minArity = p.GetMinArity();
  // A literal type ("tensor(int64)") is not a constraint name: list it as the allowed type.
  bool isConstraint = false;
  for (const auto& tc : schema.typeConstraintParams())
    if (tc.type_param_str == port.typeStr) isConstraint = true;
  if (!isConstraint) port.allowedTypes = typeStrings(p);
  return port;
}

}  // namespace

NodeSpec specFromSchema(const onnx::OpSchema& schema, const std::string& canonicalDomain) {
  NodeSpec spec;
  spec.domain = canonicalDomain;
  spec.type = schema.Name();
  spec.version = schema.since_version();
  spec.category = categoryFromFile(schema.file());
  spec.doc = dedent(schema.doc() ? schema.doc() : "");
  spec.deprecated = schema.Deprecated();
  spec.minInputs = schema.min_input();
  spec.maxInputs = schema.max_input();
  spec.minOutputs = schema.min_output();
  spec.maxOutputs = schema.max_output();
  for (const auto& in : schema.inputs()) spec.inputs.push_back(portFromFormal(in, schema));
  for (const auto& out : schema.outputs()) spec.outputs.push_back(portFromFormal(out, schema));
  for (const auto& tc : schema.typeConstraintParams())
    spec.typeConstraints.push_back({tc.type_param_str, tc.allowed_type_strs, tc.description});
  for (const auto& [name, attr] : schema.attributes()) {
    ParamSpec p;
    p.name = name;
    p.doc = dedent(attr.description);
    p.required = attr.required;
    p.type = paramTypeFromOnnx(attr.type);
    if (attr.default_value.has_name() || attr.default_value.type() != 0) {
      auto def = paramFromAttribute(attr.default_value, p.type);
      if (def.ok()) p.defaultValue = *def;
    }
    if (p.type == ParamType::Int && p.defaultValue &&
        looksBoolean(name, p.doc, p.defaultValue->asInt())) {
      p.type = ParamType::Bool;
      p.defaultValue->type = ParamType::Bool;
      p.allowedValues = {"false", "true"};
    }
    if (p.type == ParamType::String) {
      const std::string def = p.defaultValue ? p.defaultValue->asString() : "";
      p.allowedValues = enumFromDoc(name, p.doc, def);
    }
    spec.params.push_back(std::move(p));
  }
  return spec;
}

void addOnnxDomains(CatalogueBuilder& b) {
  // Newest version of each op not above the domain's target opset.
  std::map<std::pair<std::string, std::string>, const onnx::OpSchema*> latest;
  static const auto all = onnx::OpSchemaRegistry::get_all_schemas_with_history();
  for (const auto& d : kOnnxDomains) {
    for (const auto& s : all) {
      if (s.domain() != d.onnxName || s.since_version() > d.maxOpset) continue;
      auto& slot = latest[{d.canonical, s.Name()}];
      if (!slot || slot->since_version() < s.since_version()) slot = &s;
    }
    b.setDefaultOpset(d.canonical, d.maxOpset);
    const std::string onnxName = d.onnxName, canonical = d.canonical;
    // Versions newer than libonnx's come from nodes/schema_facts.inc, lent the docs of the
    // version before.
    b.setVersionedLookup(canonical, [onnxName, canonical](const std::string& type, int opset) {
      const auto* schema = onnx::OpSchemaRegistry::Schema(type, opset, onnxName);
      auto older =
          schema ? std::make_unique<NodeSpec>(specFromSchema(*schema, canonical)) : nullptr;
      auto facts = schemaFacts(onnxName, type, opset);
      if (!facts || facts->fromLibonnx) return older;
      return std::make_unique<NodeSpec>(specFromFacts(*facts, older.get(), canonical));
    });
  }
  for (const auto& [key, schema] : latest) b.add(specFromSchema(*schema, key.first));
  // Ops that first appear after the target opset (Mish at 18, Gelu at 20, Attention at 23) are
  // listed at their first version, so the palette and `deepwire nodes` offer them; a graph
  // gets them at its own opset, and Graph::addNode raises that where it is lower.
  for (const auto& d : kOnnxDomains)
    for (const SchemaFacts* f : opsFirstAfter(d.onnxName, d.maxOpset))
      b.add(specFromFacts(*f, nullptr, d.canonical));
}

}  // namespace dw
