// The profile of a session's runs: kernel time per op type and per node, which the executor
// records in the plan (DEEPWIRE_PROFILE, SessionOptions::profile).
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/plan.h"

namespace dw::engine {

void InferenceSession::setProfiling(bool on) {
  plan_->profile = on;
  plan_->runSeconds = 0;
  plan_->firstRunSeconds = 0;
  plan_->runs = 0;
  for (auto& n : plan_->nodes) n.seconds = 0, n.firstSeconds = 0, n.calls = 0;
}

std::string InferenceSession::profileReport(size_t top) const {
  const GraphPlan& p = *plan_;
  if (p.runs == 0) return "profile: no runs recorded\n";
  // The averages leave the first run out when there are others: it pays for one-time work.
  const bool steady = p.runs > 1;
  auto timeOf = [&](const PlanNode& n) { return steady ? n.seconds - n.firstSeconds : n.seconds; };
  // Per op type, then the costliest nodes: the two views a slow graph is usually read with.
  std::map<std::string, std::pair<double, int64_t>> byOp;
  double kernels = 0;
  for (const auto& n : p.nodes) {
    auto& e = byOp[n.domain.empty() ? n.op : n.domain + ":" + n.op];
    e.first += timeOf(n);
    ++e.second;
    kernels += timeOf(n);
  }
  const double runs = static_cast<double>(steady ? p.runs - 1 : p.runs);
  const double runSeconds = steady ? p.runSeconds - p.firstRunSeconds : p.runSeconds;
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line,
                "profile: %lld runs%s, %.3f ms/run: kernels %.3f ms, executor %.3f ms\n",
                static_cast<long long>(runs), steady ? " after the first" : "",
                1e3 * runSeconds / runs, 1e3 * kernels / runs, 1e3 * (runSeconds - kernels) / runs);
  os << line;
  if (steady) {
    std::snprintf(line, sizeof line, "  first run %.3f ms (one-time setup included)\n",
                  1e3 * p.firstRunSeconds);
    os << line;
  }
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [op, e] : byOp) ops.emplace_back(e.first, op + " x" + std::to_string(e.second));
  std::sort(ops.rbegin(), ops.rend());
  for (size_t i = 0; i < ops.size() && i < top; ++i) {
    std::snprintf(line, sizeof line, "  %8.3f ms %5.1f%%  %s\n", 1e3 * ops[i].first / runs,
                  100 * ops[i].first / std::max(kernels, 1e-12), ops[i].second.c_str());
    os << line;
  }
  if (p.device) {
    // The ops listed here ran on the host backend, their inputs and outputs copied across.
    std::map<std::string, int> host;
    for (const auto& n : p.nodes)
      if (!n.memory) ++host[n.domain.empty() ? n.op : n.domain + ":" + n.op];
    std::string l;
    for (const auto& [op, c] : host) l += (l.empty() ? "" : ", ") + op + " x" + std::to_string(c);
    os << "  on " << p.device->hostBackend()->name() << " (no " << p.device->name()
       << " kernel): " << (l.empty() ? "none" : l) << "\n";
  }
  std::vector<const PlanNode*> nodes;
  for (const auto& n : p.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(),
            [&](const PlanNode* a, const PlanNode* b) { return timeOf(*a) > timeOf(*b); });
  os << "  costliest nodes:\n";
  for (size_t i = 0; i < nodes.size() && i < top; ++i) {
    std::snprintf(line, sizeof line, "  %8.3f ms  %s (%s%s%s)\n", 1e3 * timeOf(*nodes[i]) / runs,
                  nodes[i]->name.c_str(), nodes[i]->op.c_str(),
                  nodes[i]->layouts.empty() ? "" : "; ", nodes[i]->layouts.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace dw::engine
