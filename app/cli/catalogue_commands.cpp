// deepwire nodes / describe: the catalogue, as text or JSON.
#include <nlohmann/json.hpp>

#include <cctype>

#include "app/cli/cli_util.h"
#include "app/cli/commands.h"
#include "engine/op_support.h"
#include "nodes/catalogue.h"

namespace dw::cli {

namespace {

using nlohmann::json;

const char* optionName(PortOption o) {
  switch (o) {
    case PortOption::Optional:
      return "optional";
    case PortOption::Variadic:
      return "variadic";
    default:
      return "single";
  }
}

const char* diffName(Differentiability d) {
  switch (d) {
    case Differentiability::Differentiable:
      return "differentiable";
    case Differentiability::NonDifferentiable:
      return "non-differentiable";
    default:
      return "unknown";
  }
}

json paramValueJson(const Param& p) {
  switch (p.type) {
    case ParamType::Float:
      return std::stod(p.toDisplay());  // 1e-05 rather than 9.99999975e-06
    case ParamType::Int:
      return p.asInt();
    case ParamType::Bool:
      return p.asBool();
    case ParamType::String:
      return p.asString();
    case ParamType::Ints:
      return p.asInts();
    case ParamType::Floats:
      return p.asFloats();
    case ParamType::Strings:
      return p.asStrings();
    default:
      return p.toDisplay();
  }
}

json portJson(const NodeSpec& s, const PortSpec& p, bool isInput, int index) {
  return {{"name", p.name},
          {"type", p.typeStr},
          {"allowed_types", isInput ? s.inputTypes(index) : s.outputTypes(index)},
          {"option", optionName(p.option)},
          {"differentiability", diffName(p.differentiability)},
          {"doc", p.doc}};
}

json specJson(const NodeSpec& s, bool full) {
  json j{{"type", s.type}, {"domain", s.domain}, {"category", s.category}, {"version", s.version}};
  if (!s.aliases.empty()) j["aliases"] = s.aliases;
  if (!s.seedNames.empty()) j["seed_names"] = s.seedNames;
  json inputs = json::array(), outputs = json::array(), params = json::array();
  for (size_t i = 0; i < s.inputs.size(); ++i)
    inputs.push_back(portJson(s, s.inputs[i], true, int(i)));
  for (size_t i = 0; i < s.outputs.size(); ++i)
    outputs.push_back(portJson(s, s.outputs[i], false, int(i)));
  for (const auto& p : s.params) {
    json jp{{"name", p.name},
            {"type", paramTypeName(p.type)},
            {"default", p.defaultValue ? paramValueJson(*p.defaultValue) : json(nullptr)},
            {"required", p.required},
            {"doc", p.doc}};
    if (!p.allowedValues.empty()) jp["allowed"] = p.allowedValues;
    params.push_back(std::move(jp));
  }
  // The seed toolkit's common fields sit with the parameters; Graphs in/out are ports.
  for (const auto& c : commonFields()) {
    if (c.type == "cluster") continue;
    json def = c.type == "float"      ? json(std::stod(c.defaultValue))
               : c.type == "string[]" ? json::array()
                                      : json(nullptr);
    params.push_back({{"name", c.name},
                      {"type", c.type},
                      {"default", def},
                      {"required", false},
                      {"doc", c.doc},
                      {"common", true}});
  }
  j["inputs"] = std::move(inputs);
  j["outputs"] = std::move(outputs);
  j["params"] = std::move(params);
  j["graphs_in"] = true;
  j["graphs_out"] = true;
  if (s.deprecated) j["deprecated"] = true;
  if (full) {
    j["doc"] = s.doc;
    if (s.kind == NodeKind::Op) {
      const auto sup = dw::engine::opSupport(s.domain, s.type, s.version);
      j["kernels"] = sup.tables;
      j["runs_as_function"] = sup.function;
      j["gradient"] = sup.gradient;
    }
    json tcs = json::array();
    for (const auto& tc : s.typeConstraints)
      tcs.push_back({{"name", tc.name}, {"allowed_types", tc.allowedTypes}, {"doc", tc.doc}});
    j["type_constraints"] = std::move(tcs);
    j["min_inputs"] = s.minInputs;
    j["max_inputs"] = s.maxInputs;
    j["min_outputs"] = s.minOutputs;
    j["max_outputs"] = s.maxOutputs;
  } else {
    j["doc"] = s.doc.substr(0, s.doc.find('\n'));
  }
  return j;
}

std::string portSummary(const std::vector<PortSpec>& ports) {
  std::string out;
  for (const auto& p : ports) {
    if (!out.empty()) out += ", ";
    out += p.name;
    if (p.option == PortOption::Optional) out += "?";
    if (p.option == PortOption::Variadic) out += "...";
  }
  return out;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out = pad;
  for (char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

void printDescribe(const NodeSpec& s) {
  std::cout << s.type << "  (" << s.domain << ", since opset " << s.version << ", category "
            << s.category << ")" << (s.deprecated ? "  [deprecated]" : "") << "\n\n"
            << indent(s.doc, "  ") << "\n\n";
  if (s.kind == NodeKind::Op) {
    const auto sup = dw::engine::opSupport(s.domain, s.type, s.version);
    std::cout << "Runs on: " << sup.describe()
              << "\nGradient: " << (sup.gradient ? "yes" : "no (training stops here)") << "\n\n";
  }
  std::cout << "Ports\n"
            << "  Graphs in   the model this node joins\n";
  auto ports = [&](const char* title, const std::vector<PortSpec>& list, bool isInput) {
    std::cout << title << "\n";
    if (list.empty()) std::cout << "  (none)\n";
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& p = list[i];
      std::cout << "  " << p.name << " (" << optionName(p.option) << ", "
                << diffName(p.differentiability) << ") : " << p.typeStr;
      const auto types = isInput ? s.inputTypes(int(i)) : s.outputTypes(int(i));
      if (!types.empty()) {
        std::cout << " in {";
        for (size_t k = 0; k < types.size(); ++k) std::cout << (k ? ", " : "") << types[k];
        std::cout << "}";
      }
      std::cout << "\n";
      if (!p.doc.empty()) std::cout << indent(p.doc, "      ") << "\n";
    }
  };
  ports("Inputs", s.inputs, true);
  ports("Outputs", s.outputs, false);
  std::cout << "  Graphs out  the model, with this node added\n\nParameters\n";
  if (s.params.empty()) std::cout << "  (none)\n";
  for (const auto& p : s.params) {
    std::cout << "  " << p.name << " : " << paramTypeName(p.type) << " = "
              << (p.required       ? "required"
                  : p.defaultValue ? p.defaultValue->toDisplay()
                                   : "(unset)");
    if (!p.allowedValues.empty()) {
      std::cout << "  one of {";
      for (size_t k = 0; k < p.allowedValues.size(); ++k)
        std::cout << (k ? ", " : "") << p.allowedValues[k];
      std::cout << "}";
    }
    std::cout << "\n";
    if (!p.doc.empty()) std::cout << indent(p.doc, "      ") << "\n";
  }
  std::cout << "\nCommon fields\n";
  for (const auto& c : commonFields()) {
    if (c.type == "cluster") continue;
    std::cout << "  " << c.name << " : " << c.type
              << (c.defaultValue.empty() ? "" : " = " + c.defaultValue) << "\n"
              << indent(c.doc, "      ") << "\n";
  }
}

}  // namespace

void registerCatalogueCommands(CLI::App& app, int& exitCode) {
  auto* nodes = app.add_subcommand("nodes", "List the node catalogue");
  auto jsonOut = std::make_shared<bool>(false);
  auto category = std::make_shared<std::string>();
  auto domain = std::make_shared<std::string>();
  auto word = std::make_shared<std::string>();
  nodes->add_option("WORD", *word,
                    "Only types whose name, seed name or description contains WORD (any case), "
                    "e.g. attention");
  nodes->add_flag("--json", *jsonOut, "Print a JSON array of node types");
  nodes->add_option("--category", *category, "Only this category (math, nn, tensor, ...)");
  nodes->add_option("--domain", *domain, "Only this domain (ai.onnx, deepwire, ...)");
  nodes->callback([jsonOut, category, domain, word, &exitCode] {
    const auto& cat = Catalogue::instance();
    auto lower = [](std::string t) {
      for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return t;
    };
    const std::string w = lower(*word);
    auto mentions = [&](const NodeSpec& s) {
      if (w.empty()) return true;
      auto has = [&](const std::string& t) { return lower(t).find(w) != std::string::npos; };
      if (has(s.type) || has(s.doc)) return true;
      for (const auto& n : s.aliases)
        if (has(n)) return true;
      for (const auto& n : s.seedNames)
        if (has(n)) return true;
      return false;
    };
    std::vector<const NodeSpec*> list;
    for (const auto* s : cat.all())
      if ((category->empty() || s->category == *category) &&
          (domain->empty() || s->domain == canonicalDomain(*domain)) && mentions(*s))
        list.push_back(s);
    if (list.empty()) {
      if (!w.empty()) {
        exitCode = fail("no node type mentions '" + *word + "'" +
                        (category->empty() && domain->empty() ? "" : " in that category/domain") +
                        "; `deepwire nodes` lists them all");
        return;
      }
      std::string known;
      for (const auto& c : cat.categories()) known += (known.empty() ? "" : ", ") + c;
      exitCode = fail("no node matches; categories are: " + known);
      return;
    }
    if (*jsonOut) {
      json arr = json::array();
      for (const auto* s : list) arr.push_back(specJson(*s, false));
      std::cout << jsonText(arr, 1) << "\n";
      return;
    }
    std::string lastGroup;
    for (const auto* s : list) {
      const std::string group = s->domain + " / " + s->category;
      if (group != lastGroup) std::cout << (lastGroup.empty() ? "" : "\n") << group << "\n";
      lastGroup = group;
      std::string seed;
      for (const auto& n : s->seedNames) seed += (seed.empty() ? "  [seed: " : ", ") + n;
      if (!seed.empty()) seed += "]";
      std::printf("  %-28s (%s) -> (%s)%s%s\n", s->type.c_str(), portSummary(s->inputs).c_str(),
                  portSummary(s->outputs).c_str(), s->deprecated ? "  [deprecated]" : "",
                  seed.c_str());
    }
    std::cout << "\n" << list.size() << (list.size() == 1 ? " node type\n" : " node types\n");
  });

  auto* describe = app.add_subcommand("describe", "Show one node type in full");
  auto type = std::make_shared<std::string>();
  auto ddomain = std::make_shared<std::string>();
  auto djson = std::make_shared<bool>(false);
  auto dopset = std::make_shared<int>(0);
  describe->add_option("TYPE", *type, "Node type, e.g. BatchNormalization")->required();
  describe->add_option("--domain", *ddomain, "Domain, when a type exists in several");
  describe
      ->add_option("--opset", *dopset,
                   "The version a model importing this opset of the node's domain gets "
                   "(operators newer than the palette's opset, e.g. Attention at 23)")
      ->check(positive());
  describe->add_flag("--json", *djson, "Print JSON");
  describe->callback([type, ddomain, djson, dopset, &exitCode] {
    const auto& cat = Catalogue::instance();
    std::vector<const NodeSpec*> found;
    const std::string domain = ddomain->empty() ? kOnnxDomain : canonicalDomain(*ddomain);
    if (!ddomain->empty()) {
      const auto domains = cat.domains();
      if (std::find(domains.begin(), domains.end(), domain) == domains.end()) {
        std::string known;
        for (const auto& d : domains) known += (known.empty() ? "" : ", ") + d;
        exitCode = fail("unknown domain '" + *ddomain + "'; the domains are " + known);
        return;
      }
    }
    if (*dopset > 0) {
      // An opset no operator of the domain reaches was answered with its latest version.
      int latest = 0;
      for (const auto* s : cat.all())
        if (s->domain == domain) latest = std::max(latest, s->version);
      if (*dopset > latest) {
        exitCode = fail("--opset " + std::to_string(*dopset) + ": " + domain +
                        "'s operators go up to opset " + std::to_string(latest) +
                        "; give that or an earlier one");
        return;
      }
      if (const NodeSpec* s = cat.find(domain, *type, *dopset)) {
        if (*djson)
          std::cout << jsonText(specJson(*s, true), 1) << "\n";
        else
          printDescribe(*s);
      } else {
        exitCode = fail("no node type '" + *type + "' in opset " + std::to_string(*dopset) +
                        " of " + domain);
      }
      return;
    }
    auto named = [&](const NodeSpec* s) {
      if (s->type == *type) return true;
      // Other spellings the node answers to (Keras' MaxPooling2D for MaxPool2D).
      return std::find(s->aliases.begin(), s->aliases.end(), *type) != s->aliases.end();
    };
    for (const auto* s : cat.all())
      if (named(s) && (ddomain->empty() || s->domain == canonicalDomain(*ddomain)))
        found.push_back(s);
    if (found.empty()) {
      std::string msg = "unknown node type '" + *type + "'";
      auto hints = cat.suggest(*type);
      if (!hints.empty()) {
        msg += "; did you mean";
        for (const auto& h : hints) msg += " " + h;
        msg += "?";
      }
      exitCode = fail(msg + " (`deepwire nodes` lists every type)");
      return;
    }
    if (found.size() > 1) {
      // The standard op is what most people mean; say where else the name exists.
      std::string doms;
      const NodeSpec* onnxSpec = nullptr;
      for (const auto* s : found) {
        doms += " " + s->domain;
        if (s->domain == kOnnxDomain) onnxSpec = s;
      }
      if (!onnxSpec) {
        exitCode = fail("'" + *type + "' exists in several domains:" + doms + "; pass --domain");
        return;
      }
      std::cerr << "deepwire: '" << *type << "' exists in domains" << doms
                << "; showing ai.onnx (pass --domain for another)\n";
      found = {onnxSpec};
    }
    if (*djson)
      std::cout << jsonText(specJson(*found[0], true), 1) << "\n";
    else
      printDescribe(*found[0]);
  });
}

}  // namespace dw::cli
