#include "search/cost_model.h"

#include <algorithm>

namespace collage {

double predict_sequential_ms(CostModel& costs, const Placement& placement) {
  double total = 0;
  for (const Candidate& c : placement) total += costs.cost_ms(c) + costs.step_overhead_ms();
  return total;
}

double predict_copies_ms(const Graph& graph, const Placement& placement, CostModel& costs) {
  std::vector<Device*> on(graph.num_nodes(), nullptr);
  bool any = false;
  for (const Candidate& c : placement) {
    Device* d = c.backend->device();
    any = any || d;
    for (NodeId n : c.nodes) on[n] = d;
  }
  if (!any) return 0;
  std::vector<std::vector<Device*>> readers(graph.num_values());
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    for (ValueId v : graph.node(static_cast<NodeId>(n)).inputs)
      if (v != kNoValue) readers[v].push_back(on[n]);
  for (ValueId v : graph.outputs) readers[v].push_back(nullptr);
  double total = 0;
  for (size_t v = 0; v < graph.num_values(); ++v) {
    const Value& value = graph.value(static_cast<ValueId>(v));
    if (value.is_constant()) continue;  // uploaded once, when a session is made
    Device* home = value.producer >= 0 ? on[value.producer] : nullptr;
    std::vector<Device*>& r = readers[v];
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    const size_t bytes = static_cast<size_t>(shape_numel(value.shape)) * dtype_size(value.dtype);
    for (Device* reader : r)
      if (reader != home) total += costs.copy_ms(home ? *home : *reader, reader == nullptr, bytes);
  }
  return total;
}

}  // namespace collage
