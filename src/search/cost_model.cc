#include "search/cost_model.h"

namespace collage {

double predict_sequential_ms(CostModel& costs, const Placement& placement) {
  double total = 0;
  for (const Candidate& c : placement) total += costs.cost_ms(c) + costs.step_overhead_ms();
  return total;
}

}  // namespace collage
