// Turning a placement (which nodes run together on which backend) into executable steps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/plan.h"
#include "runtime/executor.h"

namespace collage {

struct Group {
  std::vector<NodeId> nodes;  // sorted
  Backend* backend = nullptr;
  std::shared_ptr<Kernel> kernel;  // compiled already, or null (build_steps compiles it)
};

// True when running each group as one step leaves the step graph acyclic. `group_of[n]` is
// node n's group, or -1 for a node that runs alone.
bool groups_are_acyclic(const Graph& graph, const std::vector<int>& group_of);

// Compiles each group (extracting its subgraph) and every node outside all groups on
// reference, and orders the steps topologically. Throws when a group fails to compile.
std::vector<Step> build_steps(const Graph& graph, std::vector<Group>& groups);

// The groups of a tuned plan, checked against the graph: every node named exactly once,
// backends known and available. Throws Error(kInvalidArgument) naming the problem.
std::vector<Group> groups_from_plan(const Graph& graph, const Plan& plan);

// The plan `collage run --backend NAME` uses: at each first uncovered node (in topological
// order) take the largest match of `backend` that starts there, compiles and keeps the
// step graph acyclic; nodes it can't take run on reference. `log` receives one line per
// candidate the backend refused to compile.
std::vector<Group> place_on_single_backend(const Graph& graph, Backend& backend,
                                           std::vector<std::string>* log = nullptr);

}  // namespace collage
