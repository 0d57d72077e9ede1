#include "search/op_level_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <queue>

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
};

size_t hash_of(const StateKey& k) {
  size_t h = k.covered.hash();
  for (auto [v, mask] : k.frontier) h = h * 1000003u ^ (static_cast<size_t>(v) << 8 ^ mask);
  // Mixed (splitmix64's finalizer): the index below probes by the low bits.
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

// The states seen so far, each stored once, and an open-addressing index over them. A
// node-based map keyed by a copy of each state, with a state allocated per expansion to look
// it up, spent half of the search in malloc on NASNet-A-Mobile's 723 nodes (1.2 M states).
// The covered sets lie side by side in one array (a set per state was a 96-byte allocation
// each, and the page faults of a million of them ~10 % of a warm NASNet re-tune).
class StateIndex {
 public:
  // `with_frontiers`: states differ by their frontier too (candidates run on devices).
  StateIndex(size_t num_nodes, bool with_frontiers)
      : words_(NodeSet::words_for(num_nodes)), with_frontiers_(with_frontiers) {}

  // The id of `key`, or -1.
  int find(const StateKey& key, size_t hash) const {
    if (slots_.empty()) return -1;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const int id = slots_[i];
      if (id < 0) return -1;
      if (hashes_[id] == hash && same(id, key)) return id;
    }
  }
  // Adds a state find() does not know; returns its id (0, 1, ... in order).
  int add(const StateKey& key, size_t hash) {
    if ((hashes_.size() + 1) * 2 > slots_.size()) grow();
    const int id = static_cast<int>(hashes_.size());
    if (id % kChunkStates == 0)
      chunks_.push_back(std::make_unique<uint64_t[]>(kChunkStates * words_));
    std::copy(key.covered.words().begin(), key.covered.words().end(), covered(id));
    if (with_frontiers_) frontiers_.push_back(key.frontier);
    hashes_.push_back(hash);
    place(id);
    return id;
  }
  // Copies state `id` into `out` (whose covered set has the graph's size).
  void load(int id, StateKey& out) const {
    out.covered.assign_words(covered(id));
    if (with_frontiers_) out.frontier = frontiers_[id];
  }

 private:
  // In chunks, not one growing array: its doublings copied it and held both copies at once.
  static constexpr size_t kChunkStates = 1 << 16;
  uint64_t* covered(int id) const {
    return chunks_[id / kChunkStates].get() + (id % kChunkStates) * words_;
  }
  bool same(int id, const StateKey& key) const {
    return std::equal(key.covered.words().begin(), key.covered.words().end(), covered(id)) &&
           (!with_frontiers_ || frontiers_[id] == key.frontier);
  }
  void place(int id) {
    size_t i = hashes_[id] & mask_;
    while (slots_[i] >= 0) i = (i + 1) & mask_;
    slots_[i] = id;
  }
  void grow() {
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), -1);
    mask_ = slots_.size() - 1;
    for (int id = 0; id < static_cast<int>(hashes_.size()); ++id) place(id);
  }

  size_t words_;  // per covered set
  bool with_frontiers_;
  std::vector<std::unique_ptr<uint64_t[]>> chunks_;  // kChunkStates covered sets each
  std::vector<Frontier> frontiers_;                  // per state, with_frontiers_ only
  std::vector<size_t> hashes_;
  std::vector<int> slots_;  // a power of two of them, at most half in use; -1: empty
  size_t mask_ = 0;
};

struct StateInfo {
  double cost;      // of the cheapest path found here so far
  double floor_ms;  // the lower bound on covering what is left (node_floor below)
  int parent;       // index into states, -1 for the start
  int candidate;    // the candidate that led here
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
                              CostModel& costs, size_t max_states) {
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
  // Candidates of the same nodes on the same device (other backends, variants, thread counts)
  // lead from any state to the same state: only the cheapest is expanded (the first of equals).
  for (std::vector<int>& list : by_first) {
    std::vector<int> kept;
    for (int c : list) {
      auto same = std::find_if(kept.begin(), kept.end(), [&](int k) {
        return dv.device_of[k] == dv.device_of[c] && candidates[k].nodes == candidates[c].nodes;
      });
      if (same == kept.end())
        kept.push_back(c);
      else if (cost_ms[c] < cost_ms[*same])
        *same = c;
    }
    list = std::move(kept);
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

  // A* rather than plain Dijkstra: the queue is ordered by the cost so far plus a lower bound
  // on covering the rest, each uncovered node's cheapest share of a candidate containing it
  // ((cost + step overhead) / nodes; copies only add). The bound never overestimates and
  // drops by at most a step's cost along each step (consistent), so the first complete
  // state popped is still the cheapest cover. Plain Dijkstra expands every state cheaper than
  // the answer, and a model of many parallel branches has a state per combination of progress
  // along them: NASNet-A-Mobile's 723 nodes took 1,347,740 states (1,223,914 with the bound,
  // loose there: 9.39 ms against the optimum's 13.23).
  std::vector<double> node_floor(n, std::numeric_limits<double>::infinity());
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (!std::isfinite(cost_ms[c]) || candidates[c].nodes.empty()) continue;
    const double share =
        (cost_ms[c] + step_overhead_ms) / static_cast<double>(candidates[c].nodes.size());
    for (NodeId node : candidates[c].nodes) node_floor[node] = std::min(node_floor[node], share);
  }
  std::vector<double> floor_of(candidates.size(), 0);  // per candidate: its nodes' floors
  for (size_t c = 0; c < candidates.size(); ++c)
    for (NodeId node : candidates[c].nodes) floor_of[c] += node_floor[node];
  double whole_floor = 0;
  for (double f : node_floor) whole_floor += f;

  StateIndex index(n, with_devices);
  // A state's bytes: its covered set, and ~96 of bookkeeping (hash, slots, StateInfo, queue).
  const size_t state_bytes = NodeSet::words_for(n) * sizeof(uint64_t) + 96;
  const size_t state_limit = std::min(max_states, kOpLevelMaxStateBytes / state_bytes);
  std::vector<StateInfo> states;
  using Item = std::pair<double, int>;  // (cost so far + floor of the rest, state)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> frontier;
  {
    const StateKey start{NodeSet(n), std::move(start_frontier)};
    index.add(start, hash_of(start));
  }
  states.push_back({0.0, whole_floor, -1, -1});
  // A node no candidate can run: no cover exists (the error below, without a search).
  if (std::isfinite(whole_floor)) frontier.push({whole_floor, 0});
  std::vector<bool> done(1, false);

  // Reused: only a new state is copied (into the index).
  StateKey here{NodeSet(n), {}}, next{NodeSet(n), {}};
  // The steps from state s (loaded in `here`, its first uncovered node `first`): each
  // candidate containing that node, disjoint from what is covered and ready;
  // `visit(c, next state, its cost, its floor)`.
  auto for_each_step = [&](int s, NodeId first, auto&& visit) {
    for (int c : by_first[first]) {
      if (footprint[c].intersects(here.covered) || !needs[c].subset_of(here.covered)) continue;
      next.covered = here.covered;
      next.covered |= footprint[c];
      double copies = 0;
      if (with_devices) {
        copies = expand(c, here.frontier, next.covered, next.frontier);
        if (!std::isfinite(copies)) continue;
      }
      const double next_cost = states[s].cost + cost_ms[c] + step_overhead_ms + copies;
      // Rounding must not make the bound negative (it is 0 once everything is covered).
      const double next_floor = std::max(0.0, states[s].floor_ms - floor_of[c]);
      visit(c, next, next_cost, next_floor);
    }
  };
  auto finish = [&](int s) {
    result.cost_ms = states[s].cost;
    for (int at = s; states[at].parent >= 0; at = states[at].parent)
      result.chosen.push_back(states[at].candidate);
    std::reverse(result.chosen.begin(), result.chosen.end());
    return result;
  };
  // Past the bound: from the open state of the lowest estimate, follow the step of the lowest
  // estimate until everything is covered; from a state with no step left (copies no device
  // makes, candidates never ready), the next open state.
  auto complete_greedily = [&]() -> std::optional<OpLevelResult> {
    result.exact = false;
    while (!frontier.empty()) {
      int s = frontier.top().second;
      frontier.pop();
      if (done[s]) continue;
      for (;;) {
        done[s] = true;
        ++result.states_explored;
        index.load(s, here);
        const NodeId first = here.covered.first_missing(n);
        if (first == static_cast<NodeId>(n)) return finish(s);
        int best_c = -1;
        double best_cost = 0, best_floor = 0, best_estimate = 0;
        StateKey best_key;
        for_each_step(s, first, [&](int c, const StateKey& key, double cost, double floor) {
          if (best_c >= 0 && cost + floor >= best_estimate) return;
          best_c = c, best_cost = cost, best_floor = floor, best_estimate = cost + floor;
          best_key = key;
        });
        if (best_c < 0) break;
        // Every step covers more nodes, so a dive ends within one step per node; a state
        // reached before keeps the cheaper of its two paths.
        const size_t hash = hash_of(best_key);
        int id = index.find(best_key, hash);
        if (id < 0) {
          id = index.add(best_key, hash);
          states.push_back({best_cost, best_floor, s, best_c});
          done.push_back(false);
        } else if (best_cost < states[id].cost) {
          states[id] = {best_cost, best_floor, s, best_c};
        }
        s = id;
      }
    }
    return std::nullopt;
  };

  while (!frontier.empty()) {
    if (states.size() >= state_limit) {
      if (auto greedy = complete_greedily()) return *greedy;
      break;
    }
    auto [estimate, s] = frontier.top();
    frontier.pop();
    if (done[s] || estimate > states[s].cost + states[s].floor_ms) continue;
    done[s] = true;
    ++result.states_explored;
    index.load(s, here);
    const NodeId first = here.covered.first_missing(n);
    if (first == static_cast<NodeId>(n)) return finish(s);
    for_each_step(s, first, [&](int c, const StateKey& key, double next_cost, double next_floor) {
      const size_t hash = hash_of(key);
      const int known = index.find(key, hash);
      if (known < 0) {
        const int id = index.add(key, hash);
        states.push_back({next_cost, next_floor, s, c});
        done.push_back(false);
        frontier.push({next_cost + next_floor, id});
      } else if (next_cost < states[known].cost) {
        states[known].cost = next_cost;
        states[known].parent = s;
        states[known].candidate = c;
        frontier.push({next_cost + states[known].floor_ms, known});
      }
    });
  }
  fail(ErrorKind::kInternal, "op-level search: no placement covers the whole graph");
}

}  // namespace collage
