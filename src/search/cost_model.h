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
};

// The additive prediction of a complete placement run one step after another: each
// candidate's cost plus one step overhead. +inf when some candidate cannot run.
double predict_sequential_ms(CostModel& costs, const Placement& placement);

}  // namespace collage
