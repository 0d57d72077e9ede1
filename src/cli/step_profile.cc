#include "cli/step_profile.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "runtime/interleaved_timing.h"

namespace collage::cli {
namespace {

constexpr size_t kStepsShown = 15;

std::string describe(const PlanGroup& g) {
  if (g.nodes.size() == 1) return g.nodes.front();
  return fmt::format("{} .. {} ({} nodes)", g.nodes.front(), g.nodes.back(), g.nodes.size());
}

// The plan's cost for each step (0 when the plan has no group with the same nodes and
// backend, e.g. a session built without a plan).
std::vector<double> alone_costs(const std::vector<PlanGroup>& steps, const Plan* plan) {
  std::map<std::pair<std::string, std::vector<std::string>>, double> by_group;
  if (plan)
    for (const PlanGroup& g : plan->groups) by_group[{g.backend, g.nodes}] = g.cost_ms;
  std::vector<double> costs;
  for (const PlanGroup& g : steps) {
    auto it = by_group.find({g.backend, g.nodes});
    costs.push_back(it == by_group.end() ? 0 : it->second);
  }
  return costs;
}

// "-" where the plan gave no cost (a session without a plan).
std::string ms_or_dash(double ms) {
  return ms > 0 ? fmt::format("{:.3f}", ms) : std::string("-");
}

std::string ratio(double in_model, double alone) {
  return alone > 0 ? fmt::format("{:.2f}x", in_model / alone) : std::string("-");
}

}  // namespace

void print_step_profile(Session& session, const std::vector<Tensor>& inputs, int runs,
                        const Plan* plan) {
  const std::vector<PlanGroup> steps = session.plan().groups;
  std::vector<std::vector<double>> samples(steps.size());
  std::vector<StepTiming> timings;
  std::vector<double> totals;
  for (int r = 0; r < runs; ++r) {
    session.run_profiled(inputs, timings);
    double total = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      samples[s].push_back(timings[s].end_ms - timings[s].start_ms);
      total += samples[s].back();
    }
    totals.push_back(total);
  }
  std::vector<double> in_model(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) in_model[s] = median_of(samples[s]);
  const std::vector<double> alone = alone_costs(steps, plan);

  std::vector<size_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return in_model[a] > in_model[b]; });
  fmt::print(
      "profile: median of {} runs per step; 'alone' is the cost the tuner measured for "
      "the group by itself\n",
      runs);
  fmt::print("  {:>5} {:<14} {:>10} {:>10} {:>7}  {}\n", "step", "backend", "in-model ms",
             "alone ms", "ratio", "nodes");
  for (size_t k = 0; k < std::min(kStepsShown, order.size()); ++k) {
    size_t s = order[k];
    fmt::print("  {:>5} {:<14} {:>10.3f} {:>10} {:>7}  {}\n", s, steps[s].backend, in_model[s],
               ms_or_dash(alone[s]), ratio(in_model[s], alone[s]), describe(steps[s]));
  }
  if (order.size() > kStepsShown) fmt::print("  ... {} more steps\n", order.size() - kStepsShown);

  struct Share {
    size_t steps = 0;
    double in_model = 0, alone = 0;
  };
  std::map<std::string, Share> shares;
  for (size_t s = 0; s < steps.size(); ++s) {
    Share& share = shares[steps[s].backend];
    share.steps++;
    share.in_model += in_model[s];
    share.alone += alone[s];
  }
  fmt::print("  by backend:\n");
  for (const auto& [name, share] : shares)
    fmt::print("  {:>5} {:<14} {:>10.3f} {:>10} {:>7}  {} steps\n", "", name, share.in_model,
               ms_or_dash(share.alone), ratio(share.in_model, share.alone), share.steps);
  fmt::print(
      "  sum of steps: median {:.3f} ms per run (the rest of a run's latency is the "
      "executor's own work)\n",
      median_of(totals));
}

}  // namespace collage::cli
