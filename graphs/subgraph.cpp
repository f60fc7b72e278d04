#include "graphs/subgraph.h"

namespace dw {

std::set<std::string> outerNames(const onnx::GraphProto& g) {
  std::set<std::string> defined, read;
  for (const auto& vi : g.input()) defined.insert(vi.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& t : g.sparse_initializer()) defined.insert(t.values().name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) defined.insert(o);
  for (const auto& n : g.node()) {
    for (const auto& i : n.input())
      if (!i.empty()) read.insert(i);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) read.merge(outerNames(a.g()));
      for (const auto& sub : a.graphs()) read.merge(outerNames(sub));
    }
  }
  for (const auto& o : g.output()) read.insert(o.name());
  std::set<std::string> outer;
  for (const auto& r : read)
    if (!defined.count(r)) outer.insert(r);
  return outer;
}

std::set<std::string> outerNamesOfParam(const Param& p) {
  std::set<std::string> out;
  if (p.type == ParamType::Graph) {
    onnx::GraphProto g;
    if (g.ParseFromString(p.asString())) out = outerNames(g);
  } else if (p.type == ParamType::Graphs) {
    for (const auto& bytes : p.asStrings()) {
      onnx::GraphProto g;
      if (g.ParseFromString(bytes)) out.merge(outerNames(g));
    }
  }
  return out;
}

}  // namespace dw
