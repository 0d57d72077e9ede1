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
};

// Candidates `costs` gives +inf are never chosen. Throws Error(kInternal) when no cover
// exists (a node no candidate can run).
OpLevelResult op_level_search(const Graph& graph, const std::vector<Candidate>& candidates,
                              CostModel& costs);

}  // namespace collage
