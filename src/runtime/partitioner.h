// Turning a placement (which nodes run together on which backend, built how) into executable
// steps, a plan into a placement, and steps back into a plan.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/plan.h"
#include "runtime/candidate.h"
#include "runtime/executor.h"

namespace collage {

// When a placement's candidates run: parallel to the placement, in its order (see Plan).
struct Slot {
  int stage = 0;
  int lane = 0;
  bool operator==(const Slot&) const = default;
};
using Schedule = std::vector<Slot>;

// True when running each group as one step leaves the step graph acyclic. `group_of[n]` is
// node n's group, or -1 for a node that runs alone.
bool groups_are_acyclic(const Graph& graph, const std::vector<int>& group_of);

// Adds a fallback candidate (one node, `threads`) for every node the placement leaves out,
// and splits fallback candidates of several nodes into single nodes (the fallback runs node
// by node: one kernel per node costs nothing over a graph of them).
Placement complete_placement(const Graph& graph, Placement placement, int threads);

// A compiled kernel for a candidate; the tuner passes its cache. Default: compile it.
using KernelSource = std::function<std::shared_ptr<Kernel>(const Graph& graph, const Candidate&)>;
std::shared_ptr<Kernel> compile_candidate(const Graph& graph, const Candidate& candidate);

// The steps of a complete placement. Without a schedule (or with an all-sequential one):
// one after another in a topological order that keeps the model's order where it is free.
// With a concurrent schedule: in the placement's order, which must be executable (every
// step after what it reads; a stage reads its own values only from earlier steps of the same
// lane), else Error(kInvalidArgument). Throws what compiling a candidate throws, and
// Error(kInternal) when the candidates depend on each other in a cycle.
std::vector<Step> build_steps(const Graph& graph, const Placement& placement,
                              const Schedule* schedule = nullptr,
                              const KernelSource& source = compile_candidate);

// The placement and schedule of a tuned plan, checked against the graph: every node named
// exactly once, backends known and available. Groups without a thread count get `threads`.
// Throws Error(kInvalidArgument) naming the problem.
struct ScheduledPlacement {
  Placement placement;
  Schedule schedule;
};
ScheduledPlacement placement_from_plan(const Graph& graph, const Plan& plan, int threads);

// The plan that runs `steps` (names, backends, variants, threads, schedule, versions); no costs.
Plan plan_of_steps(const Graph& graph, const std::vector<Step>& steps, int threads,
                   const std::string& hardware);

// What a user of `backend` alone gets (`collage run --backend NAME`, and the never-worse
// baseline): at each first uncovered node (in topological order) the largest match of the
// backend that starts there, compiles and keeps the step graph acyclic; nodes it can't take
// run on the fallback. A graph-level backend then merges neighbouring regions while the union
// stays convex and acyclic: its maximal regions, as its own runtime would take them; where it
// refuses a union, the longest runs of it (in step order) that it compiles. `log` receives one
// line per candidate the backend refused to compile. Compiled kernels come back in `kernels`
// (parallel to the placement) when it is given.
// A refusal is honest when compile() throws Error(kUnsupported). Any other Error (kInternal,
// kBackend...) is a broken backend: `strict` rethrows it (the per-backend tests, which must
// not pass on the fallback's results); otherwise it is logged as a warning and the nodes
// fall back, as a user of that backend alone would want. With a `variant`, each candidate
// is built as it where the backend offers it for the candidate's nodes, else as the default.
// A candidate `known_to_compile` says compiles is placed without compiling it (its kernel in
// `kernels` is then null): the tuner knows from its measurements which candidates compiled,
// and compiling each of a model's ops again on every backend took most of NASNet-A-Mobile's
// warm re-tune.
using CompilesCheck = std::function<bool(const Candidate&)>;
Placement place_on_single_backend(const Graph& graph, Backend& backend, int threads,
                                  std::vector<std::string>* log = nullptr,
                                  std::vector<std::shared_ptr<Kernel>>* kernels = nullptr,
                                  bool strict = false, const std::string& variant = "",
                                  const CompilesCheck& known_to_compile = {});

// How much of the graph `backend` takes: the nodes its patterns and fusion rules match
// (before compiling) and the nodes a placement puts on it. A single-backend run that places
// none of the matched nodes ran the fallback's code, not the backend's.
struct BackendCoverage {
  size_t matched = 0;
  size_t placed = 0;
};
BackendCoverage backend_coverage(const Graph& graph, const Backend& backend,
                                 const std::vector<std::string>& node_backends);

}  // namespace collage
