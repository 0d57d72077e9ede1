// A cost model the search tests control (the search sees nothing else): a cost per candidate
// node set and thread count, and fixed step and stage overheads.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "collage/backend.h"
#include "search/cost_model.h"

namespace collage::testing {

class TableCosts : public CostModel {
 public:
  using Key = std::pair<std::vector<NodeId>, int>;  // nodes, threads (0: any count)
  TableCosts(std::map<Key, double> costs, double step_overhead, double stage_overhead = 0)
      : costs_(std::move(costs)), step_(step_overhead), stage_(stage_overhead) {}
  // Costs by node set alone, whatever the thread count.
  TableCosts(const std::map<std::vector<NodeId>, double>& costs, double step_overhead)
      : step_(step_overhead) {
    for (const auto& [nodes, ms] : costs) costs_[{nodes, 0}] = ms;
  }
  double cost_ms(const Candidate& c) override {
    auto it = costs_.find({c.nodes, c.threads});
    if (it == costs_.end()) it = costs_.find({c.nodes, 0});
    if (it == costs_.end())
      ADD_FAILURE() << "no cost for a candidate of " << c.nodes.size() << " nodes from node "
                    << c.nodes.front() << " on " << c.threads << " threads";
    return it == costs_.end() ? 1e9 : it->second;
  }
  double step_overhead_ms() override { return step_; }
  double stage_overhead_ms() override { return stage_; }

 private:
  std::map<Key, double> costs_;
  double step_, stage_;
};

// Candidates on the fallback backend for `sets` (which backend does not matter to a search
// driven by a TableCosts).
inline std::vector<Candidate> candidates_for(const std::vector<std::vector<NodeId>>& sets,
                                             int threads = 1) {
  std::vector<Candidate> out;
  for (const auto& s : sets)
    out.push_back(Candidate{s, &BackendRegistry::global().fallback(), "", threads});
  return out;
}

}  // namespace collage::testing
