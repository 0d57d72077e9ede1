// The op-level search (the paper's DP, in TVM's Dijkstra formulation): the cheapest cover of
// the graph by disjoint candidates under an additive cost model.
//
// State = the set of covered nodes. From a state, only candidates containing the first
// uncovered node (in topological order) are expanded: every cover is reached in exactly one
// order, so symmetric orderings are never explored. A candidate is also expanded only when
// everything it reads from outside is already covered ("ready"), so each path of the search
// is an executable order of kernels and no cover has groups that depend on each other in a
// cycle. The first state popped that covers everything is optimal.
//
// Devices: where candidates run on a device (Backend::device()), a value read on another
// device than the one that computed it costs a copy (CostModel::copy_ms), charged once per
// value and device as the executor makes them, and a graph output computed on a device costs
// its copy to the host. The state then also says where each value still to be read is (a
// bitmask of host/devices per value), so the search stays exact; with no device candidate
// the state is the covered set alone, as before.
#pragma once

#include <vector>

#include "collage/graph.h"
#include "runtime/candidate.h"
#include "search/cost_model.h"

namespace collage {

struct OpLevelResult {
  std::vector<int> chosen;  // indices into the candidate list, in execution order
  double cost_ms = 0;       // sum of chosen costs + one step overhead per chosen candidate + copies
  size_t states_explored = 0;
  // False when the search stopped at its state bound and completed the cover greedily: a
  // valid cover, not proven cheapest.
  bool exact = true;
};

// States kept before the search stops being exact: the fewer of kOpLevelMaxStates and what
// fits in kOpLevelMaxStateBytes (a state holds its covered set, a bit per node, and ~96 bytes
// of bookkeeping: ~190 bytes for NASNet-A-Mobile's 723 nodes). The states grow with the
// product of the progress along parallel branches: NASNet-A-Mobile takes 1.1-1.3 M, and
// sixteen parallel chains of six nodes with fusable runs of up to three would take ~8 M (14:
// 1.3 M; each added branch x2.5), so a model with many more branches side by side would
// exhaust memory. Past the bound the best state found so far is completed greedily.
inline constexpr size_t kOpLevelMaxStates = 4'000'000;
inline constexpr size_t kOpLevelMaxStateBytes = size_t{1} << 30;

// Candidates `costs` gives +inf are never chosen. Throws Error(kInternal) when no cover
// exists (a node no candidate can run). Exact (A*) until `max_states` states (or
// kOpLevelMaxStateBytes of them) are kept; then
// the open state of the lowest estimate is completed by always taking the step of the lowest
// estimate (cost so far + the bound on the rest), and `exact` is false.
OpLevelResult op_level_search(const Graph& graph, const std::vector<Candidate>& candidates,
                              CostModel& costs, size_t max_states = kOpLevelMaxStates);

}  // namespace collage
