#include "engine/onnx_attrs.h"

namespace dw::engine {

const onnx::AttributeProto* findAttr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t attrInt(const onnx::NodeProto& n, const std::string& name, int64_t def) {
  const auto* a = findAttr(n, name);
  return a ? a->i() : def;
}

float attrFloat(const onnx::NodeProto& n, const std::string& name, float def) {
  const auto* a = findAttr(n, name);
  return a ? a->f() : def;
}

std::string attrString(const onnx::NodeProto& n, const std::string& name, const std::string& def) {
  const auto* a = findAttr(n, name);
  return a ? a->s() : def;
}

std::vector<int64_t> attrInts(const onnx::NodeProto& n, const std::string& name,
                              std::vector<int64_t> def) {
  const auto* a = findAttr(n, name);
  if (!a || a->ints_size() == 0) return def;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

namespace {
onnx::AttributeProto* added(onnx::NodeProto& n, const std::string& name,
                            onnx::AttributeProto::AttributeType type) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}
}  // namespace

void addIntAttr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  added(n, name, onnx::AttributeProto::INT)->set_i(v);
}
void addFloatAttr(onnx::NodeProto& n, const std::string& name, float v) {
  added(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
void addStringAttr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  added(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
void addIntsAttr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = added(n, name, onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void appendIntsAttr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  for (auto& a : *n.mutable_attribute())
    if (a.name() == name) return a.add_ints(v);
  addIntsAttr(n, name, {v});
}

}  // namespace dw::engine
