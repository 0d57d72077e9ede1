// What the search needs to know about costs, behind an interface a test can replace (TVM's
// Collage has a CostEstimator for this): how long a candidate takes on this machine, and
// the executor's fixed cost per step. The tuner's implementation measures (MeasuredCosts);
// the search tests give costs of their own.
#pragma once

#include <limits>

#include "runtime/candidate.h"

namespace collage {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Milliseconds `candidate` (nodes of the model this estimator is for) takes; +inf when it
  // cannot run.
  virtual double cost_ms(const Candidate& candidate) = 0;
  virtual double step_overhead_ms() = 0;
  // What a concurrent stage costs beyond its slowest lane: handing lanes to the workers and
  // waiting for them.
  virtual double stage_overhead_ms() = 0;
  // Copying `bytes` between the host and `device` (to the device, or to the host when
  // `to_host`): a step of its own where a placement crosses between them. Host-only cost
  // models never see a device.
  virtual double copy_ms(Device& device, bool to_host, size_t bytes) { return 0; }
};

// The additive prediction of a complete placement run one step after another: each
// candidate's cost plus one step overhead. +inf when some candidate cannot run.
double predict_sequential_ms(CostModel& costs, const Placement& placement);

// What the copies between the host and devices cost in a complete placement of `graph`: one
// per value and device that reads it away from where it was computed, as the executor makes
// them (graph outputs read on the host). 0 for a host-only placement.
double predict_copies_ms(const Graph& graph, const Placement& placement, CostModel& costs);

}  // namespace collage
