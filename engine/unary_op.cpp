#include "engine/unary_op.h"

#include <onnx/defs/schema.h>

#include <cmath>
#include <string>

#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// The default of float attribute `a` of `row`: the newest libonnx schema's, else the row's.
float defaultOf(const ops::UnaryOp& row, const ops::UnaryAttr& a) {
  if (row.isOp()) {
    if (const auto* s = onnx::OpSchemaRegistry::Schema(row.name, kDefaultOnnxOpset)) {
      auto it = s->attributes().find(a.name);
      if (it != s->attributes().end() && it->second.default_value.has_f())
        return it->second.default_value.f();
    }
  }
  return a.fallback;
}

ops::EltwiseCall withParams(ops::EltwiseCall c, const ops::UnaryParams& p) {
  if (c.alphaFromParam) c.alpha = p.alpha;
  if (c.betaFromParam) c.beta = p.beta;
  return c;
}

}  // namespace

Result<UnaryInstance> resolveUnary(const ops::UnaryOp& row, const Attributes& attrs) {
  ops::UnaryParams params;
  for (const auto& a : row.attrs)
    if (a.name) params.*a.slot = attrs.has(a.name) ? attrs.getFloat(a.name) : defaultOf(row, a);
  if (!row.choiceAttr) return unaryWithParams(row, params);
  return unaryWithChoice(row, params, attrs.getString(row.choiceAttr, row.choices[0].value));
}

Result<UnaryInstance> unaryWithChoice(const ops::UnaryOp& row, const ops::UnaryParams& params,
                                      const std::string& choice) {
  UnaryInstance u = unaryWithParams(row, params);
  if (choice.empty()) return u;
  const ops::UnaryChoice* found = nullptr;
  std::string allowed;
  for (const auto& c : row.choices) {
    if (!c.value) continue;
    if (choice == c.value) found = &c;
    allowed += std::string(allowed.empty() ? "" : ", ") + "\"" + c.value + "\"";
  }
  if (!row.choiceAttr)
    return Status::error(std::string(row.name) + " has no choice \"" + choice + "\"");
  if (!found)
    return Status::error(std::string("attribute ") + row.choiceAttr + " is \"" + choice +
                         "\"; it must be one of " + allowed);
  u.fn = found->fn;
  u.onednn = withParams(found->onednn, params);
  return u;
}

UnaryInstance resolveUnary(const ops::UnaryOp& row, float alpha, float beta) {
  ops::UnaryParams params;
  const float given[2] = {alpha, beta};
  for (size_t i = 0; i < row.attrs.size(); ++i) {
    const auto& a = row.attrs[i];
    if (a.name) params.*a.slot = std::isnan(given[i]) ? defaultOf(row, a) : given[i];
  }
  return unaryWithParams(row, params);
}

UnaryInstance unaryWithParams(const ops::UnaryOp& row, const ops::UnaryParams& params) {
  UnaryInstance u;
  u.op = &row;
  u.fn = row.fn;
  u.params = params;
  u.onednn = withParams(row.onednn, params);
  return u;
}

}  // namespace dw::engine
