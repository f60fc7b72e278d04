// The golden file of tests/golden/make_loss_golden.py, shared by the loss and metric tests.
#pragma once

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace dw::test {

using nlohmann::json;

inline const json& lossGolden() {
  static const json g = [] {
    std::ifstream f(DW_LOSS_GOLDEN);
    return f ? json::parse(f, nullptr, false) : json();
  }();
  return g;
}

// The cases `keep` accepts, grouped by `key` (one test per group keeps CTest's process count
// low). spec is a JSON array of cases; a missing golden file gives one group with a null spec,
// which the test must fail on.
struct GoldenGroup {
  std::string name;
  json spec;
};
inline void PrintTo(const GoldenGroup& g, std::ostream* os) {
  *os << g.name;
}

inline std::vector<GoldenGroup> goldenGroups(const std::function<bool(const json&)>& keep,
                                             const std::function<std::string(const json&)>& key) {
  std::vector<GoldenGroup> v;
  std::map<std::string, size_t> index;
  if (lossGolden().is_object())
    for (const auto& c : lossGolden()["cases"]) {
      if (!keep(c)) continue;
      const std::string k = key(c);
      if (!index.count(k)) {
        index[k] = v.size();
        v.push_back({k, json::array()});
      }
      v[index[k]].spec.push_back(c);
    }
  if (v.empty()) v.push_back({"missing_golden_file", json()});
  return v;
}

inline std::string testName(std::string s, size_t index) {
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s + "_" + std::to_string(index);
}

// Rows [from, to) of a golden tensor (all rows when to < 0).
inline engine::Tensor goldenTensor(const json& t, int64_t from = 0, int64_t to = -1) {
  std::vector<int64_t> shape = t["shape"].get<std::vector<int64_t>>();
  int64_t inner = 1;
  for (size_t i = 1; i < shape.size(); ++i) inner *= shape[i];
  if (to < 0) to = shape.empty() ? 1 : shape[0];
  if (!shape.empty()) shape[0] = to - from;
  const auto& data = t["data"];
  if (t["dtype"] == "int64") {
    std::vector<int64_t> v;
    for (int64_t i = from * inner; i < to * inner; ++i) v.push_back(data[i].get<int64_t>());
    return engine::Tensor::fromVector(v, shape);
  }
  std::vector<float> v;
  for (int64_t i = from * inner; i < to * inner; ++i)
    v.push_back(static_cast<float>(data[i].get<double>()));
  return engine::Tensor::fromVector(v, shape);
}

// "float[N,4]" (symbolicBatch) or "float[6,4]".
inline std::string goldenType(const json& t, bool symbolicBatch) {
  std::string s = t["dtype"].get<std::string>() + "[";
  const auto shape = t["shape"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + (i == 0 && symbolicBatch ? std::string("N") : std::to_string(shape[i]));
  return s + "]";
}

}  // namespace dw::test
