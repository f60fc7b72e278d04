// Reading and adding a NodeProto's attributes, for the passes that rewrite graphs before kernels
// see them (the session's fusions, the autodiff's gradient builders).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dw::engine {

const onnx::AttributeProto* findAttr(const onnx::NodeProto& n, const std::string& name);
int64_t attrInt(const onnx::NodeProto& n, const std::string& name, int64_t def);
float attrFloat(const onnx::NodeProto& n, const std::string& name, float def);
std::string attrString(const onnx::NodeProto& n, const std::string& name, const std::string& def);
// `def` where the attribute is absent or empty.
std::vector<int64_t> attrInts(const onnx::NodeProto& n, const std::string& name,
                              std::vector<int64_t> def = {});

// Appending an attribute (fusion/fused.cpp writes the fusion passes' private ones).
void addIntAttr(onnx::NodeProto& n, const std::string& name, int64_t v);
void addFloatAttr(onnx::NodeProto& n, const std::string& name, float v);
void addStringAttr(onnx::NodeProto& n, const std::string& name, const std::string& v);
void addIntsAttr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
// Appends v to the ints attribute `name`, adding the attribute where n has none yet.
void appendIntsAttr(onnx::NodeProto& n, const std::string& name, int64_t v);

}  // namespace dw::engine
