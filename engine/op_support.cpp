#include "engine/op_support.h"

#include <onnx/defs/schema.h>

#include "engine/kernel.h"
#include "engine/training/autodiff.h"

namespace dw::engine {

std::string OpSupport::describe() const {
  std::string s;
  for (const auto& t : tables)
    s += (s.empty() ? "" : ", ") + t +
         (t == kReferenceTable ? " (C++)"
          : t == kCudaTable    ? " (NVIDIA GPUs)"
                               : "");
  if (s.empty()) return function ? "expanded into other ops (its ONNX function)" : "no kernel";
  return s;
}

OpSupport opSupport(const std::string& domain, const std::string& op, int opset) {
  const std::string d = domain == "ai.onnx" ? "" : domain;
  OpSupport s;
  const auto& r = KernelRegistry::global();
  for (const char* table : {kCudaTable, kOneDnnTable, kReferenceTable})
    if (r.find(d, op, opset, table)) s.tables.push_back(table);
  if (s.tables.empty()) {
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op, opset, d);
    s.function = schema && (schema->HasFunction() || schema->HasContextDependentFunction());
    // The session replaces ONNX's Gradient node with the backward nodes autodiff builds.
    if (d == "ai.onnx.preview.training" && op == "Gradient") s.function = true;
  }
  s.gradient = training::hasGradient(d, op, opset);
  return s;
}

}  // namespace dw::engine
