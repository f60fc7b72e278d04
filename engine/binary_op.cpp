#include "engine/binary_op.h"

#include <onnx/onnx_pb.h>

#include <string>

namespace dw::engine {

Result<ops::BinaryFn> chooseBinary(const ops::BinaryOp& row, const Attributes& attrs) {
  if (!row.choiceAttr) return row.fn;
  // The schema's default, where it has one, is already among the attributes.
  const auto* a = attrs.get(row.choiceAttr);
  std::string allowed;
  for (const auto& c : row.choices)
    if (c.value) allowed += std::string(allowed.empty() ? "" : " or ") + c.value;
  if (!a)
    return Status::error(std::string("attribute ") + row.choiceAttr + " is required (" + allowed +
                         ")");
  const std::string v = a->type() == onnx::AttributeProto::INT ? std::to_string(a->i()) : a->s();
  for (const auto& c : row.choices)
    if (c.value && v == c.value) return c.fn;
  return Status::error(std::string(row.name) + " " + row.choiceAttr + " must be " + allowed +
                       ", got '" + v + "'");
}

}  // namespace dw::engine
