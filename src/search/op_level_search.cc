#include "search/op_level_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>

#include "collage/device.h"
#include "search/node_set.h"

namespace collage {
namespace {

// Where the values that uncovered nodes still read are: bit 0 the host, bit k device k.
// Sorted by value. Empty when no candidate runs on a device (then the covered set alone is
// the state, as it always was).
using Frontier = std::vector<std::pair<ValueId, uint32_t>>;

struct StateKey {
  NodeSet covered;
  Frontier frontier;
  bool operator==(const StateKey&) const = default;
};

struct StateKeyHash {
  size_t operator()(const StateKey& k) const {
    size_t h = k.covered.hash();
    for (auto [v, mask] : k.frontier) h = h * 1000003u ^ (static_cast<size_t>(v) << 8 ^ mask);
    return h;
  }
};

struct StateInfo {
  double cost;
  int parent;     // index into states, -1 for the start
  int candidate;  // the candidate that led here
};

// What the search needs to charge copies between the host and devices (see op_level_search.h).
struct DeviceView {
  std::vector<Device*> devices;              // device k + 1 of the masks
  std::vector<int> device_of;                // per candidate: 0 host, k device k
  std::vector<std::vector<ValueId>> reads;   // per candidate: its boundary inputs
  std::vector<std::vector<ValueId>> writes;  // per candidate: its boundary outputs
  std::vector<NodeSet> readers;              // per value: the nodes reading it
  std::vector<bool> graph_output;
  std::vector<size_t> bytes;
};

uint32_t bit(int device) {
  return uint32_t{1} << device;
}

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

  // Devices: a value read on another device than the one that computed it costs a copy, once
  // per device (the executor keeps the copy for later readers there). Which copies a path
  // made is part of its state, so the search stays exact with them.
  DeviceView dv;
  for (const Candidate& c : candidates) {
    Device* d = c.backend ? c.backend->device() : nullptr;
    int index = 0;
    if (d) {
      auto it = std::find(dv.devices.begin(), dv.devices.end(), d);
      if (it == dv.devices.end()) it = dv.devices.insert(dv.devices.end(), d);
      index = static_cast<int>(it - dv.devices.begin()) + 1;
    }
    dv.device_of.push_back(index);
  }
  const bool with_devices = !dv.devices.empty();
  Frontier start_frontier;
  if (with_devices) {
    const size_t nv = graph.num_values();
    dv.readers.assign(nv, NodeSet(n));
    dv.graph_output.assign(nv, false);
    dv.bytes.assign(nv, 0);
    for (size_t node = 0; node < n; ++node)
      for (ValueId v : graph.node(static_cast<NodeId>(node)).inputs)
        if (v != kNoValue) dv.readers[v].insert(static_cast<NodeId>(node));
    for (ValueId v : graph.outputs) dv.graph_output[v] = true;
    for (size_t v = 0; v < nv; ++v) {
      const Value& value = graph.value(static_cast<ValueId>(v));
      dv.bytes[v] = static_cast<size_t>(shape_numel(value.shape)) * dtype_size(value.dtype);
    }
    for (const Candidate& c : candidates) {
      Boundary b = boundary_of(graph, c.nodes);
      dv.reads.push_back(std::move(b.inputs));
      dv.writes.push_back(std::move(b.outputs));
    }
    for (ValueId v : graph.inputs) start_frontier.emplace_back(v, bit(0));
    std::sort(start_frontier.begin(), start_frontier.end());
  }
  // Expands candidate c from a frontier: the copies it needs (ms; +inf when the executor
  // could not make them) and the frontier after it, given the covered set after it.
  auto expand = [&](int c, const Frontier& from, const NodeSet& covered, Frontier& to) -> double {
    to = from;
    const int d = dv.device_of[c];
    double copies = 0;
    auto find = [&](ValueId v) {
      auto it = std::lower_bound(to.begin(), to.end(), std::make_pair(v, uint32_t{0}));
      return it != to.end() && it->first == v ? it : to.end();
    };
    for (ValueId v : dv.reads[c]) {
      auto it = find(v);
      if (it == to.end()) continue;  // not produced yet: the ready check rules that out
      if (it->second & bit(d)) continue;
      if (d == 0) {
        // From the device that computed it.
        int from_device = __builtin_ctz(it->second);
        copies += costs.copy_ms(*dv.devices[from_device - 1], true, dv.bytes[v]);
      } else if (it->second & bit(0)) {
        copies += costs.copy_ms(*dv.devices[d - 1], false, dv.bytes[v]);
      } else {
        return std::numeric_limits<double>::infinity();  // device to device: not made
      }
      it->second |= bit(d);
    }
    for (ValueId v : dv.writes[c]) {
      uint32_t mask = bit(d);
      if (dv.graph_output[v] && d != 0) {
        copies += costs.copy_ms(*dv.devices[d - 1], true, dv.bytes[v]);
        mask |= bit(0);
      }
      to.emplace_back(v, mask);
    }
    std::erase_if(to, [&](const std::pair<ValueId, uint32_t>& e) {
      return dv.readers[e.first].subset_of(covered);
    });
    std::sort(to.begin(), to.end());
    return copies;
  };

  std::vector<StateKey> state_keys;
  std::vector<StateInfo> states;
  std::unordered_map<StateKey, int, StateKeyHash> index;
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> frontier;
  state_keys.push_back({NodeSet(n), std::move(start_frontier)});
  states.push_back({0.0, -1, -1});
  index[state_keys[0]] = 0;
  frontier.push({0.0, 0});
  std::vector<bool> done(1, false);

  while (!frontier.empty()) {
    auto [cost, s] = frontier.top();
    frontier.pop();
    if (done[s] || cost > states[s].cost) continue;
    done[s] = true;
    ++result.states_explored;
    NodeId first = state_keys[s].covered.first_missing(n);
    if (first == static_cast<NodeId>(n)) {
      result.cost_ms = cost;
      for (int at = s; states[at].parent >= 0; at = states[at].parent)
        result.chosen.push_back(states[at].candidate);
      std::reverse(result.chosen.begin(), result.chosen.end());
      return result;
    }
    for (int c : by_first[first]) {
      const NodeSet& covered = state_keys[s].covered;
      if (footprint[c].intersects(covered) || !needs[c].subset_of(covered)) continue;
      StateKey next{covered, {}};
      next.covered |= footprint[c];
      double copies = 0;
      if (with_devices) {
        copies = expand(c, state_keys[s].frontier, next.covered, next.frontier);
        if (!std::isfinite(copies)) continue;
      }
      double next_cost = cost + cost_ms[c] + step_overhead_ms + copies;
      auto it = index.find(next);
      if (it == index.end()) {
        int id = static_cast<int>(states.size());
        index.emplace(next, id);
        state_keys.push_back(std::move(next));
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
