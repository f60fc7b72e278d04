// Conversions between ONNX AttributeProto and deepwire Param values.
#pragma once

#include <onnx/onnx_pb.h>

namespace onnx {
class OpSchema;
}

#include "nodes/spec.h"
#include "nodes/status.h"

namespace dw {

ParamType paramTypeFromOnnx(int attributeType);
int onnxTypeFromParam(ParamType t);  // Bool -> INT
// The type an attribute's payload has (for attributes written without a type field, as old
// exporters do), UNDEFINED where it holds no value.
int payloadType(const onnx::AttributeProto& attr);
// A float attribute's value as the double the catalogue keeps: the shortest decimal that
// converts back to the same float.
double floatAsDouble(float f);
// `want` refines the result (an INT attribute read as Bool). Attributes written without a type
// field (old exporters) are typed by their payload.
Result<Param> paramFromAttribute(const onnx::AttributeProto& attr, ParamType want);
onnx::AttributeProto attributeFromParam(const std::string& name, const Param& p);
// Builds a NodeSpec from a libonnx schema (used for every version of every ONNX op).
NodeSpec specFromSchema(const onnx::OpSchema& schema, const std::string& canonicalDomain);

}  // namespace dw
