// Choosing which steps of a placement run at the same time, and on how many threads each.
//
// Small kernels scale badly to all cores, so part of every core idles while one runs alone;
// running independent branches of the step graph at once, each on a share of the threads,
// uses them (graph pipeline parallelism's insight: keep the DAG, run independent operators
// concurrently). The choice is made from measured costs at each thread count, per stage:
//
// - A step that every other step depends on or follows (a "sequential point": a model's
//   trunk, an inception block's Concat) runs alone on every thread.
// - Between two sequential points lie independent parts (the branches of the block): the
//   weakly connected components of the steps there. They can form one concurrent stage of k
//   lanes, each on B/k of the budget B threads, the components packed into lanes
//   longest-first; the stage costs its slowest lane plus a measured hand-off.
// - A stage runs concurrently only where that is predicted faster than its steps one after
//   another; a part with one component is split again at its own sequential points.
//
// The tuner then measures the scheduled plan end to end against the same placement run
// sequentially (the never-worse rule), so a schedule the additive model got wrong is not
// written.
#pragma once

#include <string>
#include <vector>

#include "runtime/candidate.h"
#include "runtime/partitioner.h"
#include "search/cost_model.h"

namespace collage {

struct ScheduledPlan {
  Placement placement;  // in execution order; each candidate with its thread count
  Schedule schedule;    // parallel to placement
  double predicted_ms = 0;
  double sequential_ms = 0;  // the same placement, one step after another, on every thread
  int concurrent_stages = 0;
  bool concurrent() const { return concurrent_stages > 0; }
  // A stable description of the schedule for cost-DB keys ("" when sequential).
  std::string text() const;
};

// The thread shares a concurrent stage may give each of its lanes with `threads` in all:
// threads / k for k = 2 .. threads lanes (every share once; nothing for one thread).
std::vector<int> lane_shares(int threads);

// The best schedule of a complete placement under `costs` (candidates' threads are set to
// the share they run with). With one thread, or when no concurrent stage is predicted to
// pay, the sequential schedule.
ScheduledPlan choose_schedule(const Graph& graph, const Placement& placement, CostModel& costs,
                              int threads);

}  // namespace collage
