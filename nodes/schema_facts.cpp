#include "nodes/schema_facts.h"

#include "nodes/catalogue.h"
#include "nodes/microsoft_domain.h"

#include <onnx/defs/data_type_utils.h>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "nodes/onnx_params.h"
#include "nodes/type_syntax.h"

namespace dw {

namespace {

// A row of schema_facts.inc: plain literals (a table of std::vectors takes the compiler
// minutes), unpacked once into SchemaFacts.
struct PackedFacts {
  const char* domain;
  const char* op;
  int since, minInputs, maxInputs, minOutputs, maxOutputs;
  const char* inputs;       // "name|option|type;..."
  const char* outputs;      // same
  const char* attributes;   // "name|TYPE|required|default;...", default "i:1", "S:a,b"... or ""
  const char* constraints;  // "name=type,type;..."
};

constexpr PackedFacts kNewerVersions[] = {
#include "nodes/schema_facts.inc"
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

std::vector<FactPort> unpackPorts(const char* packed) {
  std::vector<FactPort> ports;
  for (const auto& p : split(packed, ';')) {
    const auto f = split(p, '|');
    ports.push_back({f.at(0), f.at(1).at(0), f.at(2)});
  }
  return ports;
}

std::optional<Param> unpackDefault(const std::string& d) {
  if (d.size() < 2 || d[1] != ':') return std::nullopt;
  const std::string v = d.substr(2);
  switch (d[0]) {
    case 'i':
      return Param::makeInt(std::stoll(v));
    case 'f':
      return Param::makeFloat(std::stod(v));
    case 's':
      return Param::makeString(v);
    case 'I': {
      std::vector<int64_t> xs;
      for (const auto& x : split(v, ',')) xs.push_back(std::stoll(x));
      return Param::makeInts(std::move(xs));
    }
    case 'F': {
      std::vector<double> xs;
      for (const auto& x : split(v, ',')) xs.push_back(std::stod(x));
      return Param::makeFloats(std::move(xs));
    }
    case 'S':
      return Param::makeStrings(split(v, ','));
    default:
      return std::nullopt;
  }
}

SchemaFacts unpack(const PackedFacts& p) {
  SchemaFacts f;
  f.domain = p.domain;
  f.op = p.op;
  f.since = p.since;
  f.minInputs = p.minInputs;
  f.maxInputs = p.maxInputs;
  f.minOutputs = p.minOutputs;
  f.maxOutputs = p.maxOutputs;
  f.inputs = unpackPorts(p.inputs);
  f.outputs = unpackPorts(p.outputs);
  for (const auto& a : split(p.attributes, ';')) {
    const auto x = split(a, '|');
    onnx::AttributeProto::AttributeType type = onnx::AttributeProto::UNDEFINED;
    onnx::AttributeProto::AttributeType_Parse(x.at(1), &type);
    f.attributes.push_back({x.at(0), type, x.at(2) == "1", unpackDefault(x.at(3))});
  }
  std::sort(f.attributes.begin(), f.attributes.end(),
            [](const FactAttr& a, const FactAttr& b) { return a.name < b.name; });
  for (const auto& c : split(p.constraints, ';')) {
    const size_t eq = c.find('=');
    f.typeConstraints.emplace_back(c.substr(0, eq), split(c.substr(eq + 1), ','));
  }
  return f;
}

// The versions libonnx lacks, by domain and op, oldest first.
using FactsIndex = std::map<std::pair<std::string, std::string>, std::vector<SchemaFacts>>;
const FactsIndex& newerVersions() {
  static const FactsIndex index = [] {
    FactsIndex t;
    for (const auto& p : kNewerVersions) {
      auto& versions = t[{p.domain, p.op}];
      versions.push_back(unpack(p));
      std::sort(versions.begin(), versions.end(),
                [](const SchemaFacts& a, const SchemaFacts& b) { return a.since < b.since; });
    }
    return t;
  }();
  return index;
}

char optionOf(const onnx::OpSchema::FormalParameter& p) {
  switch (p.GetOption()) {
    case onnx::OpSchema::Optional:
      return 'O';
    case onnx::OpSchema::Variadic:
      return 'V';
    default:
      return 'S';
  }
}

SchemaFacts fromSchema(const onnx::OpSchema& s) {
  SchemaFacts f;
  f.domain = s.domain();
  f.op = s.Name();
  f.since = s.since_version();
  f.minInputs = s.min_input();
  f.maxInputs = s.max_input();
  f.minOutputs = s.min_output();
  f.maxOutputs = s.max_output();
  for (const auto& p : s.inputs()) f.inputs.push_back({p.GetName(), optionOf(p), p.GetTypeStr()});
  for (const auto& p : s.outputs()) f.outputs.push_back({p.GetName(), optionOf(p), p.GetTypeStr()});
  for (const auto& [name, a] : s.attributes()) {
    std::optional<Param> def;
    if (!a.required && a.default_value.type() != onnx::AttributeProto::UNDEFINED)
      if (auto p = paramFromAttribute(a.default_value, paramTypeFromOnnx(a.type)); p.ok()) def = *p;
    f.attributes.push_back({name, a.type, a.required, std::move(def)});
  }
  for (const auto& tc : s.typeConstraintParams())
    f.typeConstraints.emplace_back(tc.type_param_str, tc.allowed_type_strs);
  f.fromLibonnx = true;
  return f;
}

}  // namespace

const SchemaFacts* schemaFacts(const std::string& domain, const std::string& op, int opset) {
  // The newest version at or below opset wins; every version in the table is newer than any
  // libonnx has of the same op.
  const auto& index = newerVersions();
  if (auto it = index.find({domain, op}); it != index.end())
    for (auto v = it->second.rbegin(); v != it->second.rend(); ++v)
      if (v->since <= opset) return &*v;
  const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(op, opset, domain);
  if (!s) return nullptr;
  // libonnx's schemas live as long as the process: their facts are made once each.
  static std::mutex m;
  static std::map<const onnx::OpSchema*, SchemaFacts> made;
  std::lock_guard<std::mutex> lock(m);
  auto it = made.find(s);
  if (it == made.end()) it = made.emplace(s, fromSchema(*s)).first;
  return &it->second;
}

std::vector<const SchemaFacts*> opsFirstAfter(const std::string& domain, int opset) {
  std::vector<const SchemaFacts*> out;
  for (const auto& [key, versions] : newerVersions())
    if (key.first == domain && versions.front().since > opset &&
        !onnx::OpSchemaRegistry::Schema(key.second, opset, domain))
      out.push_back(&versions.front());
  return out;
}

namespace {

// What the ai.onnx operators that libonnx 1.12 has no version of do, and their palette
// category, in our words (the facts file holds no documentation).
struct NewOpDoc {
  const char* category;
  const char* doc;
};
const NewOpDoc* newOpDoc(const std::string& domain, const std::string& op) {
  static const std::map<std::string, NewOpDoc> docs = {
      {"AffineGrid",
       {"nn",
        "The sampling grid of an affine transform: theta ([N, 2, 3] or [N, 3, 4]) applied "
        "to the normalized coordinates of every position of an image of `size`; the "
        "grid ([N, H, W, 2] or [N, D, H, W, 3], x first) feeds GridSample."}},
      {"Attention",
       {"nn",
        "Scaled dot-product attention over heads: softmax(Q K^T * scale + mask) V, with "
        "grouped-query heads, a boolean or additive mask, causal masking, key/value caches "
        "(past and present), a softcap and, from opset 25, a sliding window."}},
      {"BitCast",
       {"tensor",
        "The same bytes read as another type of the same width; the shape "
        "does not change."}},
      {"BitwiseAnd", {"logical", "Bitwise AND of two integer tensors, broadcasting."}},
      {"BitwiseNot", {"logical", "Bitwise NOT of an integer tensor."}},
      {"BitwiseOr", {"logical", "Bitwise OR of two integer tensors, broadcasting."}},
      {"BitwiseXor", {"logical", "Bitwise XOR of two integer tensors, broadcasting."}},
      {"CausalConvWithState",
       {"nn",
        "A depthwise 1-D convolution over [B, C, L] that sees only the past, continuing "
        "from past_state (the previous call's last k - 1 inputs), optionally followed by "
        "SiLU; present_state carries on to the next call."}},
      {"CenterCropPad",
       {"tensor",
        "Each listed axis cropped around its centre, or padded with zeros around it, "
        "to the sizes given."}},
      {"Col2Im",
       {"nn",
        "The inverse of extracting sliding blocks: each column of [N, C * "
        "prod(block_shape), L] is added back into the image where its block "
        "lay (strides, pads and dilations as a convolution's)."}},
      {"CumProd",
       {"math",
        "Running products along an axis; exclusive starts from 1, reverse "
        "runs from the end."}},
      {"DeformConv",
       {"nn",
        "A convolution whose every tap reads the input at its regular place moved by a "
        "learned offset per output position, bilinearly interpolated, and optionally "
        "scaled by a mask (deformable convolution v2)."}},
      {"GroupNormalization",
       {"nn",
        "Normalization over groups of channels and the spatial axes of each sample, then "
        "a per-channel scale and bias (per group before opset 21)."}},
      {"Gelu",
       {"math",
        "x * Phi(x), the Gaussian error linear unit: exact (erf), or with the "
        "tanh approximation."}},
      {"ImageDecoder",
       {"tensor",
        "A PNG or JPEG file's bytes (uint8, 1-D) decoded to uint8 pixels [H, W, 3] in "
        "RGB or BGR order, or [H, W, 1] grey."}},
      {"LinearAttention",
       {"nn",
        "Attention as a recurrence over a [key size, value size] state per head: updated "
        "with each token's key and value (linear, gated with a decay, delta or "
        "gated_delta rules) and read by its query; the state carries between calls."}},
      {"Mish", {"math", "x * tanh(softplus(x))."}},
      {"RMSNormalization",
       {"nn",
        "x divided by the root mean square over the trailing axes from `axis`, times a "
        "scale."}},
      {"RegexFullMatch",
       {"tensor", "Whether each string matches `pattern` (RE2 syntax) as a whole."}},
      {"RotaryEmbedding",
       {"nn",
        "Rotates pairs of features of each head (halves, or neighbours with interleaved) "
        "by angles from cos and sin caches indexed by position."}},
      {"StringConcat",
       {"tensor",
        "Elementwise concatenation of two string tensors, "
        "broadcasting."}},
      {"StringSplit",
       {"tensor",
        "Each string split on a delimiter (on runs of whitespace without one), at "
        "most maxsplit times: the pieces padded with empty strings to the longest "
        "row, and each string's count."}},
      {"SwiGLU", {"math", "A * sigmoid(alpha * A) * B: B gated by the Swish of A."}},
      {"Swish", {"math", "x * sigmoid(alpha * x)."}},
      {"TensorScatter",
       {"tensor",
        "A key/value cache updated in place: update written into past_cache along an "
        "axis from each batch entry's write index, wrapping around in circular "
        "mode."}},
  };
  if (domain != "ai.onnx" && !domain.empty()) return nullptr;
  auto it = docs.find(op);
  return it == docs.end() ? nullptr : &it->second;
}

}  // namespace

// The choices of string attributes that versions libonnx lacks added or changed (the facts hold
// no enumerations): the newest entry at or below a version wins. Without one, a version keeps
// its predecessor's choices, which held for the rest; before, an opset-20 GridSample with mode
// "linear" or an opset-19 Pad with mode "wrap" was refused as a choice not on the list.
static const std::vector<std::string>* newerChoices(const std::string& op, const std::string& attr,
                                                    int version) {
  struct Row {
    const char* op;
    const char* attr;
    int since;
    std::vector<std::string> values;
  };
  static const std::vector<Row> rows = {
      {"Pad", "mode", 19, {"constant", "reflect", "edge", "wrap"}},
      {"GridSample", "mode", 20, {"linear", "nearest", "cubic"}},
      {"Resize", "keep_aspect_ratio_policy", 18, {"stretch", "not_larger", "not_smaller"}},
      {"Resize",
       "coordinate_transformation_mode",
       19,
       {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
        "tf_crop_and_resize"}},
      {"ScatterElements", "reduction", 18, {"none", "add", "mul", "max", "min"}},
      {"ScatterND", "reduction", 18, {"none", "add", "mul", "max", "min"}},
      {"Gelu", "approximate", 20, {"none", "tanh"}},
      {"ImageDecoder", "pixel_format", 20, {"RGB", "BGR", "Grayscale"}},
      {"TensorScatter", "mode", 24, {"linear", "circular"}},
      {"LinearAttention", "update_rule", 27, {"linear", "gated", "delta", "gated_delta"}},
  };
  const Row* best = nullptr;
  for (const auto& r : rows)
    if (op == r.op && attr == r.attr && r.since <= version && (!best || r.since > best->since))
      best = &r;
  return best ? &best->values : nullptr;
}

NodeSpec specFromFacts(const SchemaFacts& f, const NodeSpec* older,
                       const std::string& canonicalDomain) {
  NodeSpec spec;
  spec.domain = canonicalDomain;
  spec.type = f.op;
  spec.version = f.since;
  const NewOpDoc* fresh = older ? nullptr : newOpDoc(canonicalDomain, f.op);
  spec.category = older ? older->category : (fresh ? fresh->category : "misc");
  spec.doc = older ? older->doc : (fresh ? fresh->doc : "");
  spec.doc += (spec.doc.empty() ? "" : "\n\n") + std::string("This is version ") +
              std::to_string(f.since) + " of " + f.op +
              ": its ports, types and parameters are listed as that opset defines them.";
  spec.minInputs = f.minInputs;
  spec.maxInputs = f.maxInputs;
  spec.minOutputs = f.minOutputs;
  spec.maxOutputs = f.maxOutputs;
  for (const auto& [name, allowed] : f.typeConstraints) {
    TypeConstraint tc{name, allowed, ""};
    if (older)
      for (const auto& o : older->typeConstraints)
        if (o.name == name) tc.doc = o.doc;
    spec.typeConstraints.push_back(std::move(tc));
  }
  auto portsOf = [&](const std::vector<FactPort>& ps, const std::vector<PortSpec>* was) {
    std::vector<PortSpec> out;
    for (const auto& p : ps) {
      PortSpec port;
      if (was)
        for (const auto& o : *was)
          if (o.name == p.name) port = o;
      port.name = p.name;
      port.typeStr = p.typeStr;
      port.option = p.option == 'O'   ? PortOption::Optional
                    : p.option == 'V' ? PortOption::Variadic
                                      : PortOption::Single;
      port.allowedTypes.clear();
      bool constraint = false;
      for (const auto& tc : f.typeConstraints) constraint |= tc.first == p.typeStr;
      if (!constraint) port.allowedTypes = {p.typeStr};
      out.push_back(std::move(port));
    }
    return out;
  };
  spec.inputs = portsOf(f.inputs, older ? &older->inputs : nullptr);
  spec.outputs = portsOf(f.outputs, older ? &older->outputs : nullptr);
  for (const auto& a : f.attributes) {
    ParamSpec p;
    const ParamSpec* was = nullptr;
    if (older)
      for (const auto& o : older->params)
        if (o.name == a.name) was = &o;
    const ParamType type = paramTypeFromOnnx(a.type);
    // A parameter that kept its name and type keeps its doc, choices and boolean look.
    if (was && (was->type == type || (was->type == ParamType::Bool && type == ParamType::Int)))
      p = *was;
    else
      p.type = type;
    p.name = a.name;
    p.required = a.required;
    if (p.type == ParamType::String && (f.domain.empty() || f.domain == "ai.onnx"))
      if (const auto* choices = newerChoices(f.op, a.name, f.since)) p.allowedValues = *choices;
    if (a.defaultValue) {
      p.defaultValue = *a.defaultValue;
      if (p.type == ParamType::Bool) p.defaultValue->type = ParamType::Bool;
    } else {
      p.defaultValue.reset();
    }
    spec.params.push_back(std::move(p));
  }
  return spec;
}

Status checkNodeAgainst(const onnx::NodeProto& node, const SchemaFacts& f, int opset,
                        const std::string& what) {
  const std::string opName = node.op_type() + " (opset " + std::to_string(opset) + ")";
  auto range = [](int lo, int hi) {
    return lo == hi
               ? std::to_string(lo)
               : std::to_string(lo) + " to " +
                     (hi == std::numeric_limits<int>::max() ? "any number" : std::to_string(hi));
  };
  auto names = [](const std::vector<FactPort>& ps) {
    std::string s;
    for (const auto& p : ps)
      s += (s.empty() ? "" : ", ") + p.name +
           (p.option == 'O'   ? "?"
            : p.option == 'V' ? "..."
                              : "");
    return s;
  };
  // Trailing empty names are omitted optional inputs.
  int given = node.input_size();
  while (given > 0 && node.input(given - 1).empty()) --given;
  if (given < f.minInputs || node.input_size() > f.maxInputs)
    return Status::error(what + " has " + std::to_string(node.input_size()) + " input(s); " +
                         opName + " takes " + range(f.minInputs, f.maxInputs) + ": " +
                         names(f.inputs));
  const auto& formal = f.inputs;
  for (int i = 0; i < node.input_size(); ++i) {
    // Past the formal list, inputs belong to its last, variadic, parameter; only optional
    // ones may be left out.
    const FactPort* port = i < static_cast<int>(formal.size()) ? &formal[i]
                           : formal.empty()                    ? nullptr
                                                               : &formal.back();
    if (node.input(i).empty() && port && port->option != 'O')
      return Status::error(what + ": input " + std::to_string(i) + " (" + port->name + ") is " +
                           (port->option == 'V' ? "variadic and cannot be left out" : "required") +
                           " but has no name");
  }
  if (node.output_size() < f.minOutputs || node.output_size() > f.maxOutputs)
    return Status::error(what + " has " + std::to_string(node.output_size()) + " output(s); " +
                         opName + " has " + range(f.minOutputs, f.maxOutputs) + ": " +
                         names(f.outputs));
  // Attributes: libonnx's inference reads required ones without checking they are there.
  const auto& known = f.attributes;
  auto find = [&](const std::string& name) {
    return std::find_if(known.begin(), known.end(),
                        [&](const FactAttr& k) { return k.name == name; });
  };
  for (const auto& a : node.attribute()) {
    auto k = find(a.name());
    if (k == known.end()) {
      std::string list;
      for (const auto& k2 : known) list += (list.empty() ? "" : ", ") + k2.name;
      // An attribute that became an input (the axes of ReduceMean-18, Squeeze-13...).
      std::string moved;
      for (size_t i = 0; i < formal.size(); ++i)
        if (formal[i].name == a.name())
          moved = "; give it as input " + std::to_string(i) + " (" + formal[i].name + ")";
      return Status::error(what + ": " + opName + " has no attribute '" + a.name() +
                           "' (its attributes: " + (list.empty() ? "none" : list) + ")" + moved);
    }
    // Untyped attributes (old exporters) are judged by the value they carry: one that carries
    // none, or another type's, would otherwise be read as the default by some kernels and as
    // zero by others.
    const int type = a.type() != onnx::AttributeProto::UNDEFINED ? a.type() : payloadType(a);
    using A = onnx::AttributeProto;
    static const std::set<int> kLists = {A::FLOATS, A::INTS,           A::STRINGS,    A::TENSORS,
                                         A::GRAPHS, A::SPARSE_TENSORS, A::TYPE_PROTOS};
    const bool emptyList = type == A::UNDEFINED && kLists.count(k->type);
    if (type != k->type && !emptyList)
      return Status::error(what + ": attribute '" + a.name() + "' has the wrong type (" +
                           (type == onnx::AttributeProto::UNDEFINED
                                ? std::string("no type and no value")
                                : onnx::AttributeProto::AttributeType_Name(
                                      static_cast<onnx::AttributeProto::AttributeType>(type))) +
                           ", expected " + onnx::AttributeProto::AttributeType_Name(k->type) + ")");
  }
  for (const auto& k : known) {
    if (!k.required) continue;
    bool has = false;
    for (const auto& a : node.attribute()) has |= a.name() == k.name;
    if (!has) return Status::error(what + ": the required attribute '" + k.name + "' is missing");
  }
  return Status();
}

std::string nodeName(const onnx::NodeProto& n) {
  if (!n.name().empty()) return n.name();
  std::string out = n.output_size() ? n.output(0) : "";
  return "<" + n.op_type() + (out.empty() ? "" : " -> " + out) + ">";
}

namespace {

// Ranks the graph declares for its inputs and initializers: what an `axis` can be checked with
// before shape inference runs.
void declaredRanks(const onnx::GraphProto& g, std::map<std::string, int>& ranks) {
  auto declare = [&](const onnx::ValueInfoProto& v) {
    if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      ranks[v.name()] = v.type().tensor_type().shape().dim_size();
  };
  for (const auto& v : g.input()) declare(v);
  // libonnx's inference starts from value_info too, so what it declares must hold up.
  for (const auto& v : g.value_info()) declare(v);
  for (const auto& t : g.initializer()) ranks[t.name()] = t.dims_size();
}

// Inputs whose dimensions libonnx 1.12's inference reads without checking there are that many
// (found by fuzzing): op -> (input, the fewest dimensions it must have).
Status checkMinRanks(const onnx::NodeProto& node, const std::map<std::string, int>& ranks,
                     const std::string& what) {
  static const std::map<std::string, std::vector<std::pair<int, int>>> kMinRanks = {
      {"STFT", {{0, 2}, {2, 1}}},
      // Opset 1-6's recurrent inference copies X's first two dimensions unchecked.
      {"RNN", {{0, 3}, {1, 3}, {2, 3}}},
      {"GRU", {{0, 3}, {1, 3}, {2, 3}}},
      {"LSTM", {{0, 3}, {1, 3}, {2, 3}}},
  };
  auto op = kMinRanks.find(node.op_type());
  if (op == kMinRanks.end()) return Status();
  for (const auto& [input, least] : op->second) {
    if (input >= node.input_size() || node.input(input).empty()) continue;
    auto r = ranks.find(node.input(input));
    if (r != ranks.end() && r->second < least)
      return Status::error(what + ": input '" + node.input(input) + "' has " +
                           std::to_string(r->second) + " dimension(s); " + node.op_type() +
                           "'s input " + std::to_string(input) + " needs at least " +
                           std::to_string(least));
  }
  return Status();
}

// A convolution's or pooling's window against the rank of its input X (N, C, spatial...):
// libonnx 1.12's convPoolShapeInference indexes its dilations by the weights' spatial axes and
// reads past them when W has more dimensions than X.
Status checkWindow(const onnx::NodeProto& node, const std::map<std::string, int>& ranks,
                   const std::string& what) {
  static const std::map<std::string, int> kWeights = {
      {"Conv", 1}, {"ConvInteger", 1}, {"ConvTranspose", 1}, {"QLinearConv", 3}};
  static const std::set<std::string> kPools = {"MaxPool", "AveragePool", "LpPool", "MaxUnpool"};
  auto w = kWeights.find(node.op_type());
  if ((w == kWeights.end() && !kPools.count(node.op_type())) || node.input_size() == 0)
    return Status();
  auto x = ranks.find(node.input(0));
  if (x == ranks.end()) return Status();
  const int spatial = x->second - 2;
  if (spatial < 0)
    return Status::error(what + ": input '" + node.input(0) + "' has " + std::to_string(x->second) +
                         " dimension(s); it needs at least 2 (batch, channels, spatial...)");
  if (w != kWeights.end() && node.input_size() > w->second) {
    auto r = ranks.find(node.input(w->second));
    if (r != ranks.end() && r->second != x->second)
      return Status::error(what + ": the weights '" + node.input(w->second) + "' have " +
                           std::to_string(r->second) + " dimensions, but input '" + node.input(0) +
                           "' has " + std::to_string(x->second) +
                           "; the weights of an input [N, C, d1, d2...] are [M, C/group, k1, "
                           "k2...], of the same rank");
  }
  for (const auto& a : node.attribute()) {
    // ConvTranspose's output_shape may give the spatial sizes or the whole shape.
    if (a.name() == "output_shape" && a.ints_size() != spatial && a.ints_size() != spatial + 2)
      return Status::error(what + ": attribute output_shape has " + std::to_string(a.ints_size()) +
                           " value(s); input '" + node.input(0) + "' has " +
                           std::to_string(spatial) + " spatial dimension(s), so it " + "needs " +
                           std::to_string(spatial) + " (or " + std::to_string(spatial + 2) +
                           " with batch and channels)");
    const int want = a.name() == "pads" ? 2 * spatial
                     : a.name() == "kernel_shape" || a.name() == "strides" ||
                             a.name() == "dilations" || a.name() == "output_padding"
                         ? spatial
                         : -1;
    if (want >= 0 && a.ints_size() != want)
      return Status::error(what + ": attribute " + a.name() + " has " +
                           std::to_string(a.ints_size()) + " value(s); input '" + node.input(0) +
                           "' has " + std::to_string(spatial) + " spatial dimension(s), so it " +
                           "needs " + std::to_string(want));
  }
  return Status();
}

const onnx::AttributeProto* findAttribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

Status validateNodesIn(const onnx::GraphProto& g, const std::map<std::string, int>& opsets,
                       const std::set<std::string>& localFunctions, bool& inferenceUnsafe,
                       std::set<std::string> defined) {
  for (const auto& v : g.input()) defined.insert(v.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& t : g.sparse_initializer()) defined.insert(t.values().name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) defined.insert(o);
  std::map<std::string, int> ranks;
  declaredRanks(g, ranks);
  std::optional<std::map<std::string, onnx::TypeProto>> declared;  // for com.microsoft bodies
  for (const auto& node : g.node()) {
    const std::string what = "node '" + nodeName(node) + "' (" + node.op_type() + ")";
    for (const auto& in : node.input())
      if (!in.empty() && !defined.count(in))
        return Status::error(what + " reads '" + in +
                             "', which no node, graph input or initializer defines");
    for (const auto& a : node.attribute()) {
      if (a.has_g())
        DW_RETURN_IF_ERROR(
            validateNodesIn(a.g(), opsets, localFunctions, inferenceUnsafe, defined));
      for (const auto& sg : a.graphs())
        DW_RETURN_IF_ERROR(validateNodesIn(sg, opsets, localFunctions, inferenceUnsafe, defined));
      if (a.name() == "blocksize" && a.type() == onnx::AttributeProto::INT && a.i() <= 0)
        return Status::error(what + ": attribute blocksize is " + std::to_string(a.i()) +
                             "; it must be at least 1");
      if (a.name() == "kernel_shape" || a.name() == "strides" || a.name() == "dilations")
        for (int64_t v : a.ints())
          if (v <= 0)
            return Status::error(what + ": attribute " + a.name() + " has " + std::to_string(v) +
                                 "; its values must be at least 1");
    }
    // A window's attributes give one value per spatial axis (pads two): kernels index them by
    // axis (a MaxPool's single stride for a 2-D window was read past its end).
    if (const onnx::AttributeProto* k = findAttribute(node, "kernel_shape")) {
      const int axes = k->ints_size();
      for (const char* name : {"strides", "dilations", "pads"}) {
        const onnx::AttributeProto* a = findAttribute(node, name);
        const int want = std::string(name) == "pads" ? 2 * axes : axes;
        if (a && a->ints_size() != 0 && a->ints_size() != want)
          return Status::error(what + ": attribute " + name + " has " +
                               std::to_string(a->ints_size()) + " value(s), but kernel_shape has " +
                               std::to_string(axes) + " axes, so it needs " + std::to_string(want));
      }
    }
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    if (localFunctions.count(domain + ":" + node.op_type())) continue;
    auto it = opsets.find(domain);
    if (it == opsets.end()) continue;  // the planner names the missing import
    // The op's version under this opset: libonnx's schema, or for versions newer than libonnx
    // knows (ReduceMean-18 takes its axes as an input) the facts of onnx 1.23's.
    const auto schema = schemaFacts(domain, node.op_type(), it->second);
    if (!schema) {
      // An ONNX op named at an opset before it existed would reach a kernel registered for
      // the op's later versions with nothing checked (CumSum in an opset-7 model).
      if ((domain.empty() || domain == "ai.onnx.ml") &&
          schemaFacts(domain, node.op_type(), std::numeric_limits<int>::max()))
        return Status::error(what + ": " + node.op_type() + " is not in opset " +
                             std::to_string(it->second) + " of " +
                             (domain.empty() ? "ai.onnx" : domain) +
                             "; import the opset that introduced it, or a later one");
      continue;  // the planner reports unsupported ops
    }
    DW_RETURN_IF_ERROR(checkNodeAgainst(node, *schema, it->second, what));
    if (domain == kMicrosoftDomain) {
      if (!declared) declared = declaredTypes(g);
      DW_RETURN_IF_ERROR(checkMicrosoftNode(node, *declared));
    }
    if (node.op_type() == "MaxUnpool" && domain.empty())
      for (int i = 0; i < std::min(2, node.input_size()); ++i)
        for (const auto& v : g.input())
          if (v.name() == node.input(i) && !ranks.count(v.name())) inferenceUnsafe = true;
    if (domain.empty() && node.op_type() == "Transpose")
      for (const auto& a : node.attribute())
        if (a.name() == "perm") {
          // A permutation of 0..n-1: a repeated axis would leave another unwritten, and the
          // gradient inverts it.
          std::vector<bool> seen(a.ints_size(), false);
          for (int64_t p : a.ints()) {
            if (p < 0 || p >= a.ints_size() || seen[p])
              return Status::error(what + ": attribute perm is not a permutation of 0.." +
                                   std::to_string(a.ints_size() - 1) + " (each axis exactly once)");
            seen[p] = true;
          }
        }
    if (domain.empty()) {
      DW_RETURN_IF_ERROR(checkWindow(node, ranks, what));
      DW_RETURN_IF_ERROR(checkMinRanks(node, ranks, what));
    }
    // An axis of these ops counts the dimensions of input 0.
    static const std::set<std::string> kAxisOps = {
        "LayerNormalization", "Softmax",        "LogSoftmax", "Hardmax", "Gather",
        "GatherElements",     "ArgMax",         "ArgMin",     "Concat",  "Split",
        "Compress",           "ReverseSequence"};
    // An absent axis is the schema's default (LayerNormalization's -1 on a scalar X had
    // libonnx 1.12's inference read a dimension that is not there).
    auto r = node.input_size() > 0 ? ranks.find(node.input(0)) : ranks.end();
    if (domain.empty() && kAxisOps.count(node.op_type()) && r != ranks.end())
      for (const auto& fa : schema->attributes) {
        if (fa.name != "axis" && fa.name != "batch_axis" && fa.name != "time_axis") continue;
        std::optional<int64_t> axis;
        for (const auto& a : node.attribute())
          if (a.name() == fa.name) axis = a.i();
        const bool given = axis.has_value();
        if (!axis && fa.defaultValue && std::holds_alternative<int64_t>(fa.defaultValue->value))
          axis = std::get<int64_t>(fa.defaultValue->value);
        if (axis && (*axis < -r->second || *axis >= std::max(r->second, 1)))
          return Status::error(what + ": attribute " + fa.name + " is " + std::to_string(*axis) +
                               (given ? "" : " (its default)") + ", outside the " +
                               std::to_string(r->second) + " dimensions of input '" +
                               node.input(0) + "'");
      }
  }
  return Status();
}

}  // namespace

Status validateNodes(const onnx::GraphProto& g, const std::map<std::string, int>& opsets,
                     const std::set<std::string>& localFunctions, bool& inferenceUnsafe) {
  return validateNodesIn(g, opsets, localFunctions, inferenceUnsafe, {});
}

namespace {

std::string normDomain(const std::string& d) {
  return d == "ai.onnx" ? std::string() : d;
}

// The version of each domain ("" for ai.onnx) the model imports.
std::map<std::string, int> opsetsOf(const onnx::ModelProto& model) {
  std::map<std::string, int> opsets;
  for (const auto& o : model.opset_import())
    opsets[normDomain(o.domain())] = static_cast<int>(o.version());
  if (model.opset_import_size() == 0) opsets[""] = 1;  // IR v1/v2 models predate opset_import
  return opsets;
}

}  // namespace

Status validateModelNodes(const onnx::ModelProto& model, bool& inferenceUnsafe) {
  // Before IR version 3 models had no opset_import (opset 1 is what they mean); since, a model
  // without one was judged at opset 1 and its Cast said "attribute 'to' has the wrong type".
  if (model.opset_import_size() == 0 && model.ir_version() >= 3 && model.graph().node_size() > 0)
    return Status::error("the model (IR version " + std::to_string(model.ir_version()) +
                         ") declares no opset_import, so its operators' versions are unknown "
                         "(a file cut short, or written by a tool that left it out); the "
                         "tool that made it must add the opsets it used, such as ai.onnx 17");
  const auto opsets = opsetsOf(model);
  std::set<std::string> local;
  for (const auto& f : model.functions()) local.insert(normDomain(f.domain()) + ":" + f.name());
  // libonnx's inference functions dereference an input's type without asking whether there is
  // one. The guarded registry skips a node whose required inputs are untyped, but an untyped
  // graph input may also feed optional ones, which some functions read as unchecked: such a
  // model is left to the kernels, which see the real tensors.
  for (const auto& v : model.graph().input())
    if (!v.has_type() || v.type().value_case() == onnx::TypeProto::VALUE_NOT_SET)
      inferenceUnsafe = true;
  return validateNodes(model.graph(), opsets, local, inferenceUnsafe);
}

Status inferShapesSafely(onnx::ModelProto& model, bool checkTypes, int strictMode,
                         bool dataPropagation) {
  bool unsafe = false;
  DW_RETURN_IF_ERROR(validateModelNodes(model, unsafe));
  return inferValidatedShapes(model, unsafe, checkTypes, strictMode, dataPropagation);
}

namespace {

// checkInputTypes over graph `g`, whose enclosing graphs' element types are `elem` (a body sees
// the values of the graphs around it).
Status checkGraphInputTypes(const onnx::GraphProto& g, const std::map<std::string, int>& opsets,
                            std::map<std::string, int32_t> elem) {
  auto note = [&](const onnx::ValueInfoProto& v) {
    if (v.has_type() && v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0)
      elem[v.name()] = v.type().tensor_type().elem_type();
  };
  for (const auto& v : g.input()) note(v);
  for (const auto& v : g.value_info()) note(v);
  for (const auto& v : g.output()) note(v);
  for (const auto& t : g.initializer()) elem[t.name()] = t.data_type();
  for (const auto& node : g.node()) {
    const std::string domain = normDomain(node.domain());
    auto it = opsets.find(domain);
    if (it == opsets.end() || (!domain.empty() && domain != "ai.onnx.ml")) continue;
    const SchemaFacts* f = schemaFacts(domain, node.op_type(), it->second);
    if (!f || f->inputs.empty()) continue;
    // Inputs that share a constraint share one type: kernels read them all as the first's.
    std::map<std::string, std::pair<int, std::string>> bound;  // constraint -> input, type
    for (int i = 0; i < node.input_size(); ++i) {
      auto e = elem.find(node.input(i));
      if (node.input(i).empty() || e == elem.end()) continue;
      const FactPort& port =
          i < static_cast<int>(f->inputs.size()) ? f->inputs[i] : f->inputs.back();
      std::vector<std::string> allowed{port.typeStr};
      for (const auto& [name, types] : f->typeConstraints)
        if (name == port.typeStr) allowed = types;
      // Only tensor types are compared: a port that takes sequences or optionals is left to
      // the kernels.
      if (std::none_of(allowed.begin(), allowed.end(),
                       [](const std::string& t) { return t.rfind("tensor(", 0) == 0; }))
        continue;
      onnx::TypeProto t;
      t.mutable_tensor_type()->set_elem_type(e->second);
      std::string have;
      try {
        have = *onnx::Utils::DataTypeUtils::ToType(t);
      } catch (const std::exception&) {
        continue;  // an element type ONNX does not name: the tensor readers report it
      }
      // Variadic ports may be heterogeneous (Loop's and Scan's states): the facts do not say
      // which, so only single and optional ports are held to one type.
      const bool constraint = allowed.size() > 1 || allowed[0] != port.typeStr;
      if (constraint && port.option != 'V') {
        auto [b, fresh] = bound.emplace(port.typeStr, std::make_pair(i, have));
        if (!fresh && b->second.second != have)
          return Status::error("node '" + nodeName(node) + "' (" + node.op_type() + "): input " +
                               std::to_string(i) + " ('" + node.input(i) + "') is " + have +
                               " but input " + std::to_string(b->second.first) + " ('" +
                               node.input(b->second.first) + "') is " + b->second.second + "; " +
                               node.op_type() + " needs them of one type (" + port.typeStr +
                               "): cast one of them (a Cast node)");
      }
      if (std::find(allowed.begin(), allowed.end(), have) != allowed.end()) continue;
      // deepwire computes every floating-point op in any of the float types (float64 is what
      // its gradient checks run in), so an op that takes float takes them all.
      const bool floatType =
          have == "tensor(double)" || have == "tensor(float16)" || have == "tensor(bfloat16)";
      if (floatType && std::find(allowed.begin(), allowed.end(), "tensor(float)") != allowed.end())
        continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return Status::error("node '" + nodeName(node) + "' (" + node.op_type() + "): input " +
                           std::to_string(i) + " (" + port.name + ", '" + node.input(i) + "') is " +
                           have + ", which " + node.op_type() + " (opset " +
                           std::to_string(it->second) + ") does not take; it takes " + list +
                           ". Cast it first (a Cast node), or export the model with that type");
    }
  }
  // The bodies of If, Loop and Scan (and any other graph attribute), with this graph's values.
  for (const auto& node : g.node())
    for (const auto& a : node.attribute()) {
      const std::string where = "in the " + a.name() + " body of node '" + nodeName(node) + "'";
      if (a.has_g())
        DW_RETURN_IF_ERROR(checkGraphInputTypes(a.g(), opsets, elem).withContext(where));
      for (const auto& sg : a.graphs())
        DW_RETURN_IF_ERROR(checkGraphInputTypes(sg, opsets, elem).withContext(where));
    }
  return Status();
}

}  // namespace

Status checkInputTypes(const onnx::ModelProto& model) {
  // Element types where the model states them: declarations, initializers, inferred values.
  return checkGraphInputTypes(model.graph(), opsetsOf(model), {});
}

namespace {

// ---- Guards around libonnx 1.12's inference functions -------------------------------------
// Several of them index dimensions, attribute lists or initializer data without checking there
// are that many (an audit of the 1.12 sources, each case reproduced by running InferShapes on
// a generated model; most are fixed in later onnx releases). validateNodes catches what the
// declared ranks show, with errors that name the node; these guards run inside inference, per
// node, on the types inference has reached there, so ranks inferred from other nodes, and the
// nodes of If/Loop/Scan bodies and of model-local functions, are covered too. A guard fails
// the node's inference with InferenceError, which libonnx reports as a per-node error.

// The rank the inference code sees: a tensor's dims, 0 for another type that carries a shape
// (sequence, optional and sparse types look like rank 0 to code that reads tensor_type()), -1
// unknown.
int seenRank(onnx::InferenceContext& ctx, size_t i) {
  if (i >= ctx.getNumInputs()) return -1;
  const onnx::TypeProto* t = ctx.getInputType(i);
  if (!t) return -1;
  if (t->value_case() == onnx::TypeProto::kTensorType)
    return t->tensor_type().has_shape() ? t->tensor_type().shape().dim_size() : -1;
  return onnx::hasShape(*t) ? 0 : -1;
}

// Whether an initializer's data holds as many elements as its dims say (libonnx's ParseData
// reads or writes past a short one).
bool dataMatchesDims(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return true;
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > std::numeric_limits<int64_t>::max() / d)) return false;
    count *= d;
  }
  using T = onnx::TensorProto;
  const int type = t.data_type();
  const bool complex = type == T::COMPLEX64 || type == T::COMPLEX128;
  if (t.has_raw_data()) {
    int64_t size = 0;
    switch (type) {
      case T::FLOAT:
      case T::INT32:
      case T::UINT32:
        size = 4;
        break;
      case T::DOUBLE:
      case T::INT64:
      case T::UINT64:
      case T::COMPLEX64:
        size = 8;
        break;
      case T::COMPLEX128:
        size = 16;
        break;
      case T::INT16:
      case T::UINT16:
      case T::FLOAT16:
      case T::BFLOAT16:
        size = 2;
        break;
      case T::INT8:
      case T::UINT8:
      case T::BOOL:
        size = 1;
        break;
      default:
        return true;  // strings and unknown types are not parsed from raw_data
    }
    return count <= std::numeric_limits<int64_t>::max() / size &&
           static_cast<int64_t>(t.raw_data().size()) == count * size;
  }
  const int64_t want = complex ? 2 * count : count;
  switch (type) {
    case T::FLOAT:
    case T::COMPLEX64:
      return t.float_data_size() == want;
    case T::DOUBLE:
    case T::COMPLEX128:
      return t.double_data_size() == want;
    case T::INT64:
      return t.int64_data_size() == want;
    case T::UINT32:
    case T::UINT64:
      return t.uint64_data_size() == want;
    case T::STRING:
      return t.string_data_size() == want;
    case T::INT32:
    case T::INT16:
    case T::INT8:
    case T::UINT16:
    case T::UINT8:
    case T::BOOL:
    case T::FLOAT16:
    case T::BFLOAT16:
      return t.int32_data_size() == want;
    default:
      return true;
  }
}

void guardInference(const std::string& domain, const std::string& op, int version,
                    onnx::InferenceContext& ctx) {
  auto fail = [&](const std::string& why) { fail_shape_inference(op, ": ", why); };
  auto rankAtLeast = [&](size_t input, int least, const char* name) {
    const int r = seenRank(ctx, input);
    if (r >= 0 && r < least)
      fail(std::string(name) + " has " + std::to_string(r) + " dimension(s); it needs " +
           std::to_string(least));
  };
  auto ints = [&](const char* name) {
    std::vector<int64_t> v;
    if (const auto* a = ctx.getAttribute(name)) v.assign(a->ints().begin(), a->ints().end());
    return v;
  };
  for (size_t i = 0; i < ctx.getNumInputs(); ++i)
    if (const onnx::TensorProto* t = ctx.getInputData(i); t && !dataMatchesDims(*t))
      fail("the data of initializer '" + t->name() + "' does not match its dims");
  if (!domain.empty()) return;
  if ((op == "RNN" || op == "GRU" || op == "LSTM") && version < 7) rankAtLeast(0, 3, "X");
  if (op == "STFT") rankAtLeast(0, 2, "the signal");
  if (op == "Gemm" && version < 7) {
    rankAtLeast(0, 2, "A");
    rankAtLeast(1, 2, "B");
  }
  if (op == "MaxRoiPool") rankAtLeast(0, 4, "X");
  if (op == "LayerNormalization") {
    const int r = seenRank(ctx, 0);
    const int64_t axis = onnx::getAttribute(ctx, "axis", int64_t{-1});
    if (r >= 0 && (axis < -r || axis >= std::max(r, 1)))
      fail("axis " + std::to_string(axis) + " is outside the " + std::to_string(r) +
           " dimensions of X");
  }
  static const std::map<std::string, size_t> kWeights = {
      {"Conv", 1}, {"ConvInteger", 1}, {"QLinearConv", 3}, {"ConvTranspose", 1}};
  static const std::set<std::string> kPools = {"AveragePool", "MaxPool", "LpPool"};
  if (auto w = kWeights.find(op); w != kWeights.end() || kPools.count(op)) {
    for (int64_t s : ints("strides"))
      if (s < 1) fail("strides has " + std::to_string(s) + "; strides must be at least 1");
    if (w != kWeights.end()) {
      const int rx = seenRank(ctx, 0), rw = seenRank(ctx, w->second);
      if (op == "ConvTranspose" && rx >= 2) rankAtLeast(1, 2, "W");
      if (!ctx.getAttribute("kernel_shape") && rx >= 0 && rw >= 0 && rx != rw)
        fail("W has " + std::to_string(rw) + " dimensions but X has " + std::to_string(rx));
    }
  }
  if (op == "MaxUnpool" && ctx.getNumInputs() >= 2 && seenRank(ctx, 0) >= 2 && seenRank(ctx, 1) < 2)
    fail("the indices I need a known shape of 2 or more dimensions");
  if (op == "GatherND") {
    if (onnx::getAttribute(ctx, "batch_dims", int64_t{0}) < 0) fail("batch_dims is negative");
    const onnx::TypeProto* idx = ctx.getNumInputs() > 1 ? ctx.getInputType(1) : nullptr;
    if (idx && idx->has_tensor_type() && idx->tensor_type().has_shape())
      for (const auto& d : idx->tensor_type().shape().dim())
        if (d.has_dim_value() && d.dim_value() < 0) fail("the indices have a negative dimension");
  }
  if (op == "Einsum") {
    std::string eq;
    for (char c : onnx::getAttribute(ctx, "equation", std::string()))
      if (c != ' ') eq += c;
    const size_t arrow = eq.find("->");
    for (size_t i = 0; i < eq.size(); ++i) {
      const char c = eq[i];
      const bool letter =
          (c >= 'a' && c <= 'z') || (arrow != std::string::npos && c >= 'A' && c <= 'Z');
      const bool inArrow = arrow != std::string::npos && (i == arrow || i == arrow + 1);
      if (!letter && c != ',' && c != '.' && !inArrow)
        fail(std::string("the equation has '") + c + "', which is not a subscript letter");
    }
  }
  if (op == "Split" && ctx.getNumOutputs() == 0) fail("the node has no outputs");
  if (op == "SplitToSequence" && ctx.getNumInputs() > 1)
    if (const onnx::TensorProto* split = ctx.getInputData(1);
        split && split->dims_size() == 0 && split->data_type() == onnx::TensorProto::INT64) {
      int64_t v = 1;
      if (split->has_raw_data() && split->raw_data().size() == sizeof v)
        std::memcpy(&v, split->raw_data().data(), sizeof v);
      else if (split->int64_data_size() == 1)
        v = split->int64_data(0);
      if (v == 0) fail("split is 0");
    }
  if (op == "Scan") {
    const auto* a = ctx.getAttribute("num_scan_inputs");
    if (!a || a->type() != onnx::AttributeProto::INT || a->i() < 0 ||
        a->i() > static_cast<int64_t>(ctx.getNumInputs()))
      fail("num_scan_inputs is missing or not a count of its inputs");
  }
}

// How the outputs of an ai.onnx op that libonnx 1.12 does not have follow from its inputs, for
// the ones where that is simple: a graph of opset 18 or later that uses them then gets the
// types of what they feed, as it does for older ops (an Output after a Mish had none, and the
// graph could not be exported until the user typed it in). Null: the outputs stay unknown.
onnx::InferenceFunction newOpInference(const std::string& op) {
  auto typed = [](onnx::InferenceContext& c, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (i >= c.getNumInputs() || !c.getInputType(i) ||
          c.getInputType(i)->value_case() != onnx::TypeProto::kTensorType)
        return false;
    return true;
  };
  // Output 0: input 0's shape, and the element type of input `typeFrom` (or `elem`).
  auto like = [typed](size_t typeFrom, int elem) -> onnx::InferenceFunction {
    return [typed, typeFrom, elem](onnx::InferenceContext& c) {
      if (!typed(c, typeFrom + 1)) return;
      auto* out = c.getOutputType(0)->mutable_tensor_type();
      out->set_elem_type(elem ? elem : c.getInputType(typeFrom)->tensor_type().elem_type());
      if (onnx::hasInputShape(c, 0)) onnx::propagateShapeFromInputToOutput(c, 0, 0);
    };
  };
  static const std::set<std::string> sameAsInput = {"Mish",
                                                    "Gelu",
                                                    "Swish",
                                                    "BitwiseNot",
                                                    "CumProd",
                                                    "RotaryEmbedding",
                                                    "GroupNormalization",
                                                    "TensorScatter"};
  if (sameAsInput.count(op)) return like(0, 0);
  if (op == "RMSNormalization") return like(1, 0);  // Y has the scale's type
  if (op == "RegexFullMatch") return like(0, onnx::TensorProto::BOOL);
  if (op == "BitwiseAnd" || op == "BitwiseOr" || op == "BitwiseXor" || op == "StringConcat")
    return [typed](onnx::InferenceContext& c) {
      if (!typed(c, 2)) return;
      onnx::propagateElemTypeFromInputToOutput(c, 0, 0);
      if (onnx::hasNInputShapes(c, 2))
        onnx::bidirectionalBroadcastShapeInference(
            c.getInputType(0)->tensor_type().shape(), c.getInputType(1)->tensor_type().shape(),
            *c.getOutputType(0)->mutable_tensor_type()->mutable_shape());
    };
  return nullptr;
}

// libonnx's registry with every inference function wrapped in guardInference. Subgraph and
// function inference use the registry they were given, so the guards reach them too. The
// ai.onnx ops libonnx lacks get schemas of their own from the facts (newOpInference).
// The output's rank where libonnx 1.12 gives up on a shape whose rank is plain: a Slice with
// computed starts, a Reshape to a computed shape (torch's attention heads export both). Without
// it every tensor after the first such node was untyped, and a loss or metric added to the model
// could not tell a class axis.
void keepKnownRank(const std::string& op, onnx::InferenceContext& c) {
  if (c.getNumOutputs() == 0 || c.getNumInputs() == 0) return;
  onnx::TypeProto* out = c.getOutputType(0);
  if (!out || !out->has_tensor_type() || out->tensor_type().has_shape()) return;
  auto shapeOf = [&](size_t i) -> const onnx::TensorShapeProto* {
    const onnx::TypeProto* t = i < c.getNumInputs() ? c.getInputType(i) : nullptr;
    return t && t->has_tensor_type() && t->tensor_type().has_shape() ? &t->tensor_type().shape()
                                                                     : nullptr;
  };
  // The length of a 1-D shape input, when static.
  auto lengthOf = [&](size_t i) -> int64_t {
    const auto* s = shapeOf(i);
    return s && s->dim_size() == 1 && s->dim(0).has_dim_value() ? s->dim(0).dim_value() : -1;
  };
  int64_t rank = -1;
  if (op == "Slice" || op == "Pad" || op == "Tile" || op == "Resize" || op == "Upsample") {
    if (const auto* s = shapeOf(0)) rank = s->dim_size();
  } else if (op == "Reshape") {
    rank = lengthOf(1);
  } else if (op == "ConstantOfShape") {
    rank = lengthOf(0);
  } else if (op == "Expand") {
    const auto* s = shapeOf(0);
    if (s && lengthOf(1) >= 0) rank = std::max<int64_t>(s->dim_size(), lengthOf(1));
  }
  if (rank < 0 || rank > 64) return;
  auto* shape = out->mutable_tensor_type()->mutable_shape();
  for (int64_t i = 0; i < rank; ++i) shape->add_dim();
}

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& op, const int maxVersion,
                                  const std::string& domain) const override {
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Instance()->GetSchema(op, maxVersion, domain);
    if (!s && normDomain(domain).empty()) return newOpSchema(op, maxVersion);
    if (!s || !s->has_type_and_shape_inference_function()) return s;
    std::lock_guard<std::mutex> lock(m_);
    auto& slot = wrapped_[s];
    if (!slot) {
      slot = std::make_unique<onnx::OpSchema>(*s);
      auto original = s->GetTypeAndShapeInferenceFunction();
      const std::string name = s->Name(), dom = normDomain(s->domain());
      const int version = s->SinceVersion();
      // How many leading inputs are required: a Single is, and a Variadic's first GetMinArity.
      size_t required = 0;
      for (const auto& f : s->inputs()) {
        if (f.GetOption() == onnx::OpSchema::Single) {
          ++required;
          continue;
        }
        if (f.GetOption() == onnx::OpSchema::Variadic)
          required += static_cast<size_t>(std::max(f.GetMinArity(), 0));
        break;
      }
      slot->TypeAndShapeInferenceFunction(
          [original, name, dom, version, required](onnx::InferenceContext& c) {
            guardInference(dom, name, version, c);
            // A required input with no type is the output of a node inference gave up on, or of
            // an op it does not know. libonnx's functions read such a type without a null
            // check (EyeLike with dtype, through propagateShape), so the node's outputs stay
            // unknown, as they would after a failed inference, and no error is added.
            for (size_t i = 0; i < std::min(required, c.getNumInputs()); ++i)
              if (!c.getInputType(i) ||
                  c.getInputType(i)->value_case() == onnx::TypeProto::VALUE_NOT_SET)
                return;
            original(c);
            if (dom.empty()) keepKnownRank(name, c);
          });
      // The same for data propagation (Shape, Size, Gather... with data_prop): Shape's reads
      // its input's type without a null check, found by fuzzing `check` on a project whose
      // accuracy metric compared the logits with themselves.
      if (s->has_data_propagation_function()) {
        auto propagate = s->GetDataPropagationFunction();
        slot->PartialDataPropagationFunction(
            [propagate, required](onnx::DataPropagationContext& c) {
              for (size_t i = 0; i < std::min(required, c.getNumInputs()); ++i)
                if (!c.getInputType(i) ||
                    c.getInputType(i)->value_case() == onnx::TypeProto::VALUE_NOT_SET)
                  return;
              propagate(c);
            });
      }
    }
    return slot.get();
  }

 private:
  const onnx::OpSchema* newOpSchema(const std::string& op, int maxVersion) const {
    const SchemaFacts* f = schemaFacts("", op, maxVersion);
    if (!f || f->fromLibonnx) return nullptr;
    std::lock_guard<std::mutex> lock(m_);
    // Made once per version, or null once for an op without inference.
    auto [it, fresh] = made_.try_emplace(f);
    auto& slot = it->second;
    if (fresh) {
      auto infer = newOpInference(op);
      if (!infer) return nullptr;
      auto schema = std::make_unique<onnx::OpSchema>(
          onnxSchemaOf(specFromFacts(*f, nullptr, "ai.onnx"), "", false));
      schema->TypeAndShapeInferenceFunction(
          [infer, name = f->op, version = f->since](onnx::InferenceContext& c) {
            guardInference("", name, version, c);
            infer(c);
          });
      try {
        schema->Finalize();
      } catch (const std::exception&) {
        return nullptr;
      }
      slot = std::move(schema);
    }
    return slot.get();
  }

  mutable std::mutex m_;
  mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> wrapped_;
  mutable std::map<const SchemaFacts*, std::unique_ptr<onnx::OpSchema>> made_;
};

}  // namespace

void inferAs(const std::string& op, int opset, onnx::InferenceContext& ctx) {
  const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(op, opset, "");
  if (!s || !s->has_type_and_shape_inference_function()) return;
  guardInference("", op, s->SinceVersion(), ctx);
  s->GetTypeAndShapeInferenceFunction()(ctx);
}

onnx::OpSchema onnxSchemaOf(const NodeSpec& spec, const std::string& domain, bool withDefaults) {
  auto option = [](PortOption o) {
    return o == PortOption::Optional   ? onnx::OpSchema::Optional
           : o == PortOption::Variadic ? onnx::OpSchema::Variadic
                                       : onnx::OpSchema::Single;
  };
  auto differentiability = [](Differentiability d) {
    return d == Differentiability::Differentiable      ? onnx::OpSchema::Differentiable
           : d == Differentiability::NonDifferentiable ? onnx::OpSchema::NonDifferentiable
                                                       : onnx::OpSchema::Unknown;
  };
  onnx::OpSchema s(spec.type, __FILE__, __LINE__);
  s.SetDomain(domain).SinceVersion(spec.version).SetDoc(spec.doc);
  std::set<std::string> used;
  int i = 0;
  for (const auto& p : spec.inputs) {
    s.Input(i++, p.name, p.doc, p.typeStr, option(p.option), p.homogeneous, p.minArity,
            differentiability(p.differentiability));
    used.insert(p.typeStr);
  }
  i = 0;
  for (const auto& p : spec.outputs) {
    s.Output(i++, p.name, p.doc, p.typeStr, option(p.option), p.homogeneous, p.minArity,
             differentiability(p.differentiability));
    used.insert(p.typeStr);
  }
  for (const auto& c : spec.typeConstraints) {
    if (!used.count(c.name)) continue;
    // Types newer than libonnx 1.12 (int4, float8...) are left out: it cannot name them.
    auto nameable = [](const std::string& t) {
      try {
        (void)onnx::Utils::DataTypeUtils::ToType(t);
        return true;
      } catch (const std::exception&) {
        return false;
      }
    };
    std::vector<std::string> known;
    for (const auto& t : c.allowedTypes)
      if (nameable(t)) known.push_back(t);
    s.TypeConstraint(c.name, c.allowedTypes.empty() ? onnx::OpSchema::all_tensor_types() : known,
                     c.doc);
  }
  for (const auto& p : spec.params) {
    if (withDefaults && p.defaultValue && !p.required)
      s.Attr(onnx::OpSchema::Attribute(p.name, p.doc, attributeFromParam(p.name, *p.defaultValue)));
    else
      s.Attr(p.name, p.doc,
             static_cast<onnx::AttributeProto::AttributeType>(onnxTypeFromParam(p.type)),
             p.required);
  }
  return s;
}

namespace {

// libonnx's errors name the node ("(op_type:Add, node name: /layer1/Add): [ShapeInferenceError]
// Incompatible dimensions") but not the shapes that disagree. A lenient pass over a copy infers
// what it can; the node's inputs are then listed with their types, so that a person sees
// float[1,64,28,28] against float[1,64,56,56].
std::string inputsOfFailedNode(const onnx::ModelProto& model, const std::string& error,
                               const onnx::ISchemaRegistry* registry) {
  const std::string key = "node name: ";
  const size_t at = error.find(key);
  if (at == std::string::npos) return "";
  const size_t end = error.find(')', at);
  const std::string name = error.substr(
      at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
  if (name.empty()) return "";
  const onnx::NodeProto* node = nullptr;
  for (const auto& n : model.graph().node())
    if (n.name() == name) node = &n;
  if (!node) return "";
  onnx::ModelProto lenient = model;
  try {
    onnx::shape_inference::InferShapes(lenient, registry,
                                       onnx::ShapeInferenceOptions(false, 0, false));
  } catch (const std::exception&) {
    // What it inferred before it stopped is still there.
  }
  const auto types = declaredTypes(lenient.graph());
  std::string listed;
  for (const auto& in : node->input()) {
    if (in.empty()) continue;
    auto it = types.find(in);
    listed += std::string(listed.empty() ? "" : ", ") + in + " " +
              (it == types.end() ? std::string("(type unknown)") : formatType(it->second));
  }
  return listed.empty() ? "" : "; the node's inputs: " + listed;
}

}  // namespace

Status inferValidatedShapes(onnx::ModelProto& model, bool inferenceUnsafe, bool checkTypes,
                            int strictMode, bool dataPropagation) {
  if (inferenceUnsafe) return Status();
  static const GuardedRegistry registry;
  try {
    onnx::shape_inference::InferShapes(
        model, &registry, onnx::ShapeInferenceOptions(checkTypes, strictMode, dataPropagation));
  } catch (const std::exception& e) {
    std::string what = e.what();
    while (!what.empty() && std::isspace(static_cast<unsigned char>(what.back()))) what.pop_back();
    return Status::error("shape inference failed: " + what +
                         inputsOfFailedNode(model, what, &registry));
  }
  return Status();
}

}  // namespace dw
