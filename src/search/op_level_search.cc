#include "search/op_level_search.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <unordered_map>

#include "search/node_set.h"

namespace collage {
namespace {

struct StateInfo {
  double cost;
  int parent;     // index into states, -1 for the start
  int candidate;  // the candidate that led here
};

}  // namespace

OpLevelResult op_level_search(const Graph& graph, const std::vector<Candidate>& candidates,
                              CostModel& costs) {
  const size_t n = graph.num_nodes();
  OpLevelResult result;
  if (n == 0) return result;
  const double step_overhead_ms = costs.step_overhead_ms();
  std::vector<double> cost_ms;
  for (const Candidate& c : candidates) cost_ms.push_back(costs.cost_ms(c));

  // Per candidate: its footprint, and the producers outside it that must run first.
  std::vector<NodeSet> footprint, needs;
  std::vector<std::vector<int>> by_first(n);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const auto& cand = candidates[c];
    footprint.emplace_back(n, cand.nodes);
    NodeSet need(n);
    for (NodeId node : cand.nodes)
      for (ValueId v : graph.node(node).inputs)
        if (v != kNoValue) {
          NodeId p = graph.value(v).producer;
          if (p >= 0 && !footprint.back().contains(p)) need.insert(p);
        }
    needs.push_back(std::move(need));
    if (std::isfinite(cost_ms[c]) && !cand.nodes.empty())
      by_first[cand.nodes.front()].push_back(static_cast<int>(c));
  }

  std::vector<NodeSet> state_sets;
  std::vector<StateInfo> states;
  std::unordered_map<NodeSet, int, NodeSetHash> index;
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> frontier;
  state_sets.emplace_back(n);
  states.push_back({0.0, -1, -1});
  index[state_sets[0]] = 0;
  frontier.push({0.0, 0});
  std::vector<bool> done(1, false);

  while (!frontier.empty()) {
    auto [cost, s] = frontier.top();
    frontier.pop();
    if (done[s] || cost > states[s].cost) continue;
    done[s] = true;
    ++result.states_explored;
    NodeId first = state_sets[s].first_missing(n);
    if (first == static_cast<NodeId>(n)) {
      result.cost_ms = cost;
      for (int at = s; states[at].parent >= 0; at = states[at].parent)
        result.chosen.push_back(states[at].candidate);
      std::reverse(result.chosen.begin(), result.chosen.end());
      return result;
    }
    for (int c : by_first[first]) {
      if (footprint[c].intersects(state_sets[s]) || !needs[c].subset_of(state_sets[s])) continue;
      NodeSet next = state_sets[s];
      next |= footprint[c];
      double next_cost = cost + cost_ms[c] + step_overhead_ms;
      auto it = index.find(next);
      if (it == index.end()) {
        int id = static_cast<int>(states.size());
        index.emplace(next, id);
        state_sets.push_back(std::move(next));
        states.push_back({next_cost, s, c});
        done.push_back(false);
        frontier.push({next_cost, id});
      } else if (next_cost < states[it->second].cost) {
        states[it->second] = {next_cost, s, c};
        frontier.push({next_cost, it->second});
      }
    }
  }
  fail(ErrorKind::kInternal, "op-level search: no placement covers the whole graph");
}

}  // namespace collage
