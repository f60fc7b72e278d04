// The catalogue must match libonnx's schema registry exactly: every op of ai.onnx (newest version
// up to opset 17) and ai.onnx.preview.training, with ports, params, defaults and docs from the
// schema.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>

#include <map>
#include <set>

#include "nodes/catalogue.h"
#include "nodes/schema_facts.h"

namespace dw {
namespace {

const NodeSpec& spec(const std::string& type, const std::string& domain = kOnnxDomain) {
  const NodeSpec* s = Catalogue::instance().find(domain, type);
  EXPECT_NE(s, nullptr) << type;
  return *s;
}

const PortSpec* port(const std::vector<PortSpec>& ports, const std::string& name) {
  for (const auto& p : ports)
    if (p.name == name) return &p;
  return nullptr;
}

TEST(Catalogue, MatchesSchemaRegistry) {
  std::map<std::pair<std::string, std::string>, int> expected;
  for (const auto& s : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
    const int limit = s.domain().empty() ? 17 : s.domain() == "ai.onnx.preview.training" ? 1 : -1;
    if (limit < 0 || s.since_version() > limit) continue;
    auto& v = expected[{canonicalDomain(s.domain()), s.Name()}];
    v = std::max(v, s.since_version());
  }
  ASSERT_GT(expected.size(), 180u);
  // Ops that first appear after opset 17 are listed at their first version, from the facts.
  std::map<std::string, int> newer;
  for (const SchemaFacts* f : opsFirstAfter("", 17)) newer[f->op] = f->since;
  for (const char* op : {"Mish", "Gelu", "Attention", "RMSNormalization", "BitwiseAnd", "Swish"})
    EXPECT_TRUE(newer.count(op)) << op;
  size_t onnxCount = 0, newerCount = 0;
  for (const auto* s : Catalogue::instance().all())
    if (s->domain == kOnnxDomain || s->domain == kTrainingDomain) {
      if (s->domain == kOnnxDomain && newer.count(s->type)) {
        EXPECT_EQ(s->version, newer[s->type]) << s->type;
        EXPECT_FALSE(s->doc.empty()) << s->type;
        EXPECT_FALSE(expected.count({s->domain, s->type})) << s->type;
        ++newerCount;
        continue;
      }
      ++onnxCount;
      auto it = expected.find({s->domain, s->type});
      ASSERT_NE(it, expected.end()) << s->type << " is not in the registry";
      EXPECT_EQ(s->version, it->second) << s->type;
    }
  EXPECT_EQ(onnxCount, expected.size());
  EXPECT_EQ(newerCount, newer.size());
  for (const auto& [key, version] : expected) {
    const NodeSpec* s = Catalogue::instance().find(key.first, key.second);
    ASSERT_NE(s, nullptr) << key.second;
    const auto* schema =
        onnx::OpSchemaRegistry::Schema(key.second, version, onnxDomainName(key.first));
    ASSERT_NE(schema, nullptr);
    ASSERT_EQ(s->inputs.size(), schema->inputs().size()) << key.second;
    for (size_t i = 0; i < s->inputs.size(); ++i)
      EXPECT_EQ(s->inputs[i].name, schema->inputs()[i].GetName());
    ASSERT_EQ(s->outputs.size(), schema->outputs().size()) << key.second;
    EXPECT_EQ(s->params.size(), schema->attributes().size()) << key.second;
    for (const auto& [name, attr] : schema->attributes()) {
      const ParamSpec* p = s->param(name);
      ASSERT_NE(p, nullptr) << key.second << "." << name;
      EXPECT_EQ(p->required, attr.required) << key.second << "." << name;
      EXPECT_EQ(p->doc.empty(), std::string(attr.description).empty()) << key.second << "." << name;
    }
    EXPECT_FALSE(s->category.empty());
  }
}

TEST(Catalogue, BatchNormalizationPage) {
  const NodeSpec& s = spec("BatchNormalization");
  EXPECT_EQ(s.version, 15);
  EXPECT_EQ(s.category, "nn");
  std::vector<std::string> inputs;
  for (const auto& p : s.inputs) inputs.push_back(p.name);
  EXPECT_EQ(inputs, (std::vector<std::string>{"X", "scale", "B", "input_mean", "input_var"}));
  ASSERT_EQ(s.outputs.size(), 3u);
  EXPECT_EQ(s.outputs[0].name, "Y");
  EXPECT_EQ(s.outputs[0].option, PortOption::Single);
  EXPECT_EQ(s.outputs[1].name, "running_mean");
  EXPECT_EQ(s.outputs[1].option, PortOption::Optional);
  EXPECT_EQ(s.outputs[2].name, "running_var");
  EXPECT_EQ(s.outputs[2].option, PortOption::Optional);
  EXPECT_FLOAT_EQ(s.param("epsilon")->defaultValue->asFloat(), 1e-5);
  EXPECT_FLOAT_EQ(s.param("momentum")->defaultValue->asFloat(), 0.9);
  EXPECT_EQ(s.param("training_mode")->type, ParamType::Bool);
  EXPECT_FALSE(s.param("training_mode")->defaultValue->asBool());
  EXPECT_EQ(s.param("training_mode")->defaultValue->toDisplay(), "false");
  EXPECT_EQ(s.inputs[0].differentiability, Differentiability::Differentiable);
  EXPECT_NE(s.doc.find("running_mean = input_mean * momentum"), std::string::npos);
  // The common fields of the seed toolkit.
  std::set<std::string> common;
  for (const auto& c : commonFields()) common.insert(c.name);
  EXPECT_EQ(common, (std::set<std::string>{"Graphs in", "Graphs out", "name",
                                           "specified_outputs_name", "lda coeff"}));
}

TEST(Catalogue, LayerNormalizationPage) {
  const NodeSpec& s = spec("LayerNormalization");
  EXPECT_EQ(s.version, 17);
  EXPECT_EQ(s.param("axis")->defaultValue->asInt(), -1);
  EXPECT_FLOAT_EQ(s.param("epsilon")->defaultValue->asFloat(), 1e-5);
  EXPECT_EQ(s.param("stash_type")->type, ParamType::Int);
  EXPECT_EQ(s.param("stash_type")->defaultValue->asInt(), 1);
  std::vector<std::string> outputs;
  for (const auto& p : s.outputs) outputs.push_back(p.name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"Y", "Mean", "InvStdDev"}));
}

TEST(Catalogue, EnumerationsFromDocs) {
  EXPECT_EQ(spec("Conv").param("auto_pad")->allowedValues,
            (std::vector<std::string>{"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}));
  EXPECT_EQ(spec("Pad").param("mode")->allowedValues,
            (std::vector<std::string>{"constant", "reflect", "edge"}));
  EXPECT_EQ(spec("LSTM").param("direction")->allowedValues,
            (std::vector<std::string>{"forward", "reverse", "bidirectional"}));
  EXPECT_EQ(spec("SoftmaxCrossEntropyLoss").param("reduction")->allowedValues,
            (std::vector<std::string>{"none", "sum", "mean"}));
  const auto& resize = spec("Resize").param("coordinate_transformation_mode")->allowedValues;
  EXPECT_NE(std::find(resize.begin(), resize.end(), "half_pixel"), resize.end());
  EXPECT_NE(std::find(resize.begin(), resize.end(), "tf_crop_and_resize"), resize.end());
  EXPECT_TRUE(spec("Einsum").param("equation")->allowedValues.empty());
  EXPECT_EQ(spec("Gemm").param("transB")->type, ParamType::Bool);
  EXPECT_EQ(spec("Flatten").param("axis")->type, ParamType::Int);  // default 1, but not a flag
}

TEST(Catalogue, CategoriesAndDomains) {
  const auto cats = Catalogue::instance().categories();
  for (const char* c : {"math", "nn", "tensor", "reduction", "rnn", "logical", "control flow",
                        "training", "generator", "sequence", "graph"})
    EXPECT_NE(std::find(cats.begin(), cats.end(), c), cats.end()) << c;
  EXPECT_EQ(spec("Adam", kTrainingDomain).category, "training");
  EXPECT_EQ(spec("If").category, "control flow");
  EXPECT_EQ(spec("Input", kGraphDomain).kind, NodeKind::GraphInput);
  EXPECT_EQ(spec("Initializer", kGraphDomain).kind, NodeKind::Initializer);
}

TEST(Catalogue, VersionedLookupForOlderOpsets) {
  const NodeSpec* bn9 = Catalogue::instance().find(kOnnxDomain, "BatchNormalization", 9);
  ASSERT_NE(bn9, nullptr);
  EXPECT_EQ(bn9->version, 9);
  EXPECT_EQ(bn9->param("training_mode"), nullptr);
  const NodeSpec* bn6 = Catalogue::instance().find(kOnnxDomain, "BatchNormalization", 6);
  ASSERT_NE(bn6, nullptr);
  EXPECT_NE(bn6->param("is_test"), nullptr);
  EXPECT_EQ(Catalogue::instance().find(kOnnxDomain, "BatchNormalization", 17),
            Catalogue::instance().find(kOnnxDomain, "BatchNormalization"));
}

TEST(Catalogue, SuggestsNearNames) {
  auto s = Catalogue::instance().suggest("BatchNorm");
  EXPECT_NE(std::find(s.begin(), s.end(), "BatchNormalization"), s.end());
  s = Catalogue::instance().suggest("Relu6");
  EXPECT_NE(std::find(s.begin(), s.end(), "Relu"), s.end());
}

// Versions libonnx 1.12 lacks come from nodes/schema_facts.inc: the new ports and parameters,
// with the older version's docs where the names stayed.
TEST(Catalogue, VersionsNewerThanLibonnx) {
  const auto& cat = Catalogue::instance();
  const NodeSpec* rm17 = cat.find("", "ReduceMean", 17);
  const NodeSpec* rm18 = cat.find("", "ReduceMean", 18);
  ASSERT_TRUE(rm17 && rm18);
  EXPECT_EQ(rm17->version, 13);
  EXPECT_EQ(rm18->version, 18);
  ASSERT_EQ(rm18->inputs.size(), 2u);
  EXPECT_EQ(rm18->inputs[1].name, "axes");
  EXPECT_EQ(rm18->inputs[1].option, PortOption::Optional);
  EXPECT_EQ(rm18->inputs[1].allowedTypes, std::vector<std::string>{"tensor(int64)"});
  EXPECT_EQ(rm18->category, rm17->category);
  EXPECT_EQ(rm18->inputs[0].doc, rm17->inputs[0].doc);
  bool axesParam = false;
  for (const auto& p : rm18->params) axesParam |= p.name == "axes";
  EXPECT_FALSE(axesParam);
  const NodeSpec* gelu = cat.find("", "Gelu", 20);
  ASSERT_NE(gelu, nullptr);
  ASSERT_EQ(gelu->params.size(), 1u);
  EXPECT_EQ(gelu->params[0].name, "approximate");
  ASSERT_TRUE(gelu->params[0].defaultValue);
  EXPECT_EQ(gelu->params[0].defaultValue->asString(), "none");
  EXPECT_EQ(cat.find("", "Gelu", 17), nullptr);
  // An op that did not change after 17 keeps libonnx's version.
  const NodeSpec* add = cat.find("", "Add", 20);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->version, 14);
}

// The ai.onnx operators libonnx has no version of get a description and a palette category of
// their own, not only the facts' ports.
TEST(Catalogue, OperatorsAfterOpset17HaveTheirOwnDocs) {
  const auto& cat = Catalogue::instance();
  for (const char* op : {"AffineGrid",
                         "Attention",
                         "BitCast",
                         "BitwiseAnd",
                         "CausalConvWithState",
                         "CenterCropPad",
                         "Col2Im",
                         "CumProd",
                         "DeformConv",
                         "Gelu",
                         "GroupNormalization",
                         "ImageDecoder",
                         "LinearAttention",
                         "Mish",
                         "RMSNormalization",
                         "RegexFullMatch",
                         "RotaryEmbedding",
                         "StringConcat",
                         "StringSplit",
                         "SwiGLU",
                         "Swish",
                         "TensorScatter"}) {
    SCOPED_TRACE(op);
    const NodeSpec* s = cat.find("", op, 28);
    ASSERT_NE(s, nullptr);
    EXPECT_NE(s->category, "misc");
    EXPECT_NE(s->doc.rfind("This is version", 0), 0u) << s->doc;
  }
}

}  // namespace
}  // namespace dw
