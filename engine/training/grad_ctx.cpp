// The emitter and context gradient builders use (grad_builder.h).
#include <cstring>

#include "engine/training/autodiff.h"
#include "engine/training/grad_builder.h"

namespace dw::engine::training {

void TypeTable::add(const std::string& name, const onnx::TypeProto& t) {
  if (t.has_tensor_type()) types_[name] = t;
}

int32_t TypeTable::elemType(const std::string& name) const {
  auto it = types_.find(name);
  return it == types_.end() ? 0 : it->second.tensor_type().elem_type();
}

const onnx::TypeProto* TypeTable::type(const std::string& name) const {
  auto it = types_.find(name);
  return it == types_.end() ? nullptr : &it->second;
}

int TypeTable::rank(const std::string& name) const {
  auto it = types_.find(name);
  if (it == types_.end() || !it->second.tensor_type().has_shape()) return -1;
  return it->second.tensor_type().shape().dim_size();
}

bool TypeTable::dims(const std::string& name, std::vector<int64_t>* out) const {
  auto it = types_.find(name);
  if (it == types_.end() || !it->second.tensor_type().has_shape()) return false;
  out->clear();
  for (const auto& d : it->second.tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return false;
    out->push_back(d.dim_value());
  }
  return true;
}

Emitter::Emitter(onnx::GraphProto* g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {
  for (const auto& n : g->node())
    for (const auto& o : n.output()) used_[o] = 1;
  for (const auto& i : g->input()) used_[i.name()] = 1;
  for (const auto& i : g->initializer()) used_[i.name()] = 1;
}

std::string Emitter::fresh(const std::string& hint) {
  std::string base = hint.empty() ? prefix_ + nodeName_ + "/t" : hint;
  std::string name = base;
  while (used_.count(name)) name = base + "_" + std::to_string(++counter_);
  used_[name] = 1;
  return name;
}

std::vector<std::string> Emitter::op(const std::string& type,
                                     const std::vector<std::string>& inputs,
                                     std::vector<std::string> outs,
                                     std::vector<onnx::AttributeProto> attrs,
                                     const std::string& domain) {
  auto* n = g_->add_node();
  n->set_op_type(type);
  n->set_domain(domain);
  n->set_name(fresh(prefix_ + nodeName_ + "/" + type));
  for (const auto& i : inputs) n->add_input(i);
  while (n->input_size() > 0 && n->input(n->input_size() - 1).empty())
    n->mutable_input()->RemoveLast();
  for (auto& o : outs) {
    if (o == "-")
      o.clear();  // an omitted output
    else
      o = fresh(o.empty() ? prefix_ + nodeName_ + "/" + type + "_out" : o);
    n->add_output(o);
  }
  while (n->output_size() > 0 && n->output(n->output_size() - 1).empty())
    n->mutable_output()->RemoveLast();
  for (auto& a : attrs) *n->add_attribute() = std::move(a);
  return outs;
}

std::string Emitter::op1(const std::string& type, const std::vector<std::string>& inputs,
                         std::vector<onnx::AttributeProto> attrs, const std::string& domain,
                         const std::string& hint) {
  return op(type, inputs, {hint}, std::move(attrs), domain)[0];
}

std::string Emitter::scalar(double v, int32_t elemType) {
  if (elemType == 0) elemType = onnx::TensorProto::FLOAT;
  const std::string key = "s" + std::to_string(elemType) + ":" + std::to_string(v);
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  onnx::TensorProto t;
  t.set_data_type(elemType);
  switch (elemType) {
    case onnx::TensorProto::DOUBLE:
      t.add_double_data(v);
      break;
    case onnx::TensorProto::INT64:
      t.add_int64_data(static_cast<int64_t>(v));
      break;
    case onnx::TensorProto::INT32:
      t.add_int32_data(static_cast<int32_t>(v));
      break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      // Stored as float and cast where used would need a node; these types keep float
      // constants through Cast below.
      t.set_data_type(onnx::TensorProto::FLOAT);
      t.add_float_data(static_cast<float>(v));
      break;
    }
    default:
      t.add_float_data(static_cast<float>(v));
  }
  std::string name = fresh(prefix_ + "const_" + std::to_string(constants_.size()));
  t.set_name(name);
  *g_->add_initializer() = t;
  constants_[key] = name;
  if (elemType == onnx::TensorProto::FLOAT16 || elemType == onnx::TensorProto::BFLOAT16) {
    std::string cast = op1("Cast", {name}, {attrI("to", elemType)});
    constants_[key] = cast;
    return cast;
  }
  return name;
}

std::string Emitter::ints(const std::vector<int64_t>& v) {
  std::string key = "i";
  for (int64_t x : v) key += std::to_string(x) + ",";
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t.add_int64_data(x);
  std::string name = fresh(prefix_ + "const_" + std::to_string(constants_.size()));
  t.set_name(name);
  *g_->add_initializer() = t;
  constants_[key] = name;
  return name;
}

std::string Emitter::boolScalar(bool v) {
  const std::string key = v ? "btrue" : "bfalse";
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::BOOL);
  t.add_int32_data(v ? 1 : 0);
  std::string name = fresh(prefix_ + "const_" + std::to_string(constants_.size()));
  t.set_name(name);
  *g_->add_initializer() = t;
  constants_[key] = name;
  return name;
}

onnx::AttributeProto attrI(const std::string& n, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(n);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}
onnx::AttributeProto attrF(const std::string& n, float v) {
  onnx::AttributeProto a;
  a.set_name(n);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}
onnx::AttributeProto attrS(const std::string& n, const std::string& v) {
  onnx::AttributeProto a;
  a.set_name(n);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(v);
  return a;
}
onnx::AttributeProto attrInts(const std::string& n, const std::vector<int64_t>& v) {
  onnx::AttributeProto a;
  a.set_name(n);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
  return a;
}
onnx::AttributeProto attrT(const std::string& n, const onnx::TensorProto& t) {
  onnx::AttributeProto a;
  a.set_name(n);
  a.set_type(onnx::AttributeProto::TENSOR);
  *a.mutable_t() = t;
  return a;
}

int32_t GradCtx::gradType() const {
  int32_t t = types.elemType(out(0));
  if (!t) t = types.elemType(in(0));
  return t ? t : onnx::TensorProto::FLOAT;
}

std::string GradCtx::shapeOf(const std::string& x) {
  std::vector<int64_t> d;
  if (types.dims(x, &d)) return e.ints(d);
  return e.op1("Shape", {x});
}

std::string GradCtx::zerosLike(const std::string& x) {
  const int32_t known = types.elemType(x);
  const int32_t et = known ? known : gradType();
  onnx::TensorProto v;
  v.set_data_type(et);
  v.add_dims(1);
  if (et == onnx::TensorProto::DOUBLE)
    v.add_double_data(0);
  else
    v.add_float_data(0);
  const std::string zeros = e.op1("ConstantOfShape", {shapeOf(x)}, {attrT("value", v)});
  // A value inside an expanded function may have no inferred type: the zeros take x's, through
  // CastLike from opset 15; before it, x - x (zero wherever x is finite, as a gradient of
  // anything non-finite is no number either).
  if (known) return zeros;
  return opset >= 15 ? e.op1("CastLike", {zeros, x}) : e.op1("Sub", {x, x});
}

std::string GradCtx::dYOrZeros(int i) {
  if (i < static_cast<int>(dY.size()) && !dY[i].empty()) return dY[i];
  return zerosLike(ensureOutput(i, ""));
}

std::string GradCtx::ensureOutput(int i, const std::string& hint) {
  while (node.output_size() <= i) node.add_output("");
  if (static_cast<int>(dY.size()) < node.output_size()) dY.resize(node.output_size());
  if (node.output(i).empty())
    node.set_output(i, e.fresh((node.name().empty() ? node.op_type() : node.name()) + "/" +
                               (hint.empty() ? "out" + std::to_string(i) : hint)));
  return node.output(i);
}

std::string GradCtx::sumTo(const std::string& g, const std::string& y, const std::string& x) {
  std::vector<int64_t> dy, dx;
  if (types.dims(y, &dy) && types.dims(x, &dx) && dy == dx) return g;
  return e.op1("SumToShape", {g, x}, {}, kGradDomain);
}

std::vector<onnx::AttributeProto> GradCtx::forwardAttrs() const {
  return std::vector<onnx::AttributeProto>(node.attribute().begin(), node.attribute().end());
}

}  // namespace dw::engine::training
