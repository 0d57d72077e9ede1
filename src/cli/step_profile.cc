#include "cli/step_profile.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <tuple>

#include "collage/backend.h"

#include "runtime/interleaved_timing.h"

namespace collage::cli {
namespace {

constexpr size_t kStepsShown = 15;

// "onednn-graph/winograd(13 nodes)": what ran the step, as it was built.
std::string built_as(const PlanGroup& g) {
  return g.variant.empty() ? g.backend : g.backend + "/" + variant_summary(g.variant);
}

std::string describe(const PlanGroup& g) {
  if (g.nodes.size() == 1) return g.nodes.front();
  return fmt::format("{} .. {} ({} nodes)", g.nodes.front(), g.nodes.back(), g.nodes.size());
}

// The plan's cost for each step (0 when the plan has no group with the same nodes and
// backend, e.g. a session built without a plan).
std::vector<double> alone_costs(const std::vector<PlanGroup>& steps, const Plan* plan) {
  std::map<std::tuple<std::string, std::string, std::vector<std::string>>, double> by_group;
  if (plan)
    for (const PlanGroup& g : plan->groups) by_group[{g.backend, g.variant, g.nodes}] = g.cost_ms;
  std::vector<double> costs;
  for (const PlanGroup& g : steps) {
    auto it = by_group.find({g.backend, g.variant, g.nodes});
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

struct Share {
  size_t steps = 0;
  double in_model = 0, alone = 0;
};

std::map<std::string, Share> shares_by_backend(const StepProfile& p) {
  std::map<std::string, Share> shares;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    Share& share = shares[p.steps[s].backend];
    share.steps++;
    share.in_model += p.in_model_ms[s];
    share.alone += p.alone_ms[s];
  }
  return shares;
}

}  // namespace

StepProfile profile_steps(Session& session, const std::vector<Tensor>& inputs, int runs,
                          const Plan* plan) {
  using Clock = std::chrono::steady_clock;
  StepProfile p;
  p.runs = runs;
  p.steps = session.plan().groups;
  p.alone_ms = alone_costs(p.steps, plan);
  std::vector<std::vector<double>> samples(p.steps.size());
  std::vector<StepTiming> timings;
  const Clock::time_point origin = Clock::now();
  auto us_since_origin = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  for (int r = 0; r < runs; ++r) {
    Clock::time_point start = Clock::now();
    session.run_profiled(inputs, timings);
    Clock::time_point stop = Clock::now();
    const double run_start = us_since_origin(start), run_end = us_since_origin(stop);
    // Tracks: the calling thread is worker 0, the worker of lane k of a concurrent stage k.
    p.spans.push_back({r, -1, run_start, run_end - run_start, 0});
    double sum = 0;
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const double ms = timings[s].end_ms - timings[s].start_ms;
      samples[s].push_back(ms);
      sum += ms;
      p.spans.push_back({r, static_cast<int64_t>(s), run_start + timings[s].start_ms * 1000,
                         ms * 1000, timings[s].worker});
    }
    p.run_sum_ms.push_back(sum);
  }
  for (size_t s = 0; s < p.steps.size(); ++s) p.in_model_ms.push_back(median_of(samples[s]));
  return p;
}

void print_step_profile(const StepProfile& p) {
  std::vector<size_t> order(p.steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return p.in_model_ms[a] > p.in_model_ms[b]; });
  fmt::print(
      "profile: median of {} runs per step; 'alone' is the cost the tuner measured for "
      "the group by itself\n",
      p.runs);
  fmt::print("  {:>5} {:<14} {:>10} {:>10} {:>7}  {}\n", "step", "backend", "in-model ms",
             "alone ms", "ratio", "nodes");
  for (size_t k = 0; k < std::min(kStepsShown, order.size()); ++k) {
    size_t s = order[k];
    fmt::print("  {:>5} {:<14} {:>10.3f} {:>10} {:>7}  {}\n", s, built_as(p.steps[s]),
               p.in_model_ms[s], ms_or_dash(p.alone_ms[s]), ratio(p.in_model_ms[s], p.alone_ms[s]),
               describe(p.steps[s]));
  }
  if (order.size() > kStepsShown) fmt::print("  ... {} more steps\n", order.size() - kStepsShown);
  fmt::print("  by backend:\n");
  for (const auto& [name, share] : shares_by_backend(p))
    fmt::print("  {:>5} {:<14} {:>10.3f} {:>10} {:>7}  {} steps\n", "", name, share.in_model,
               ms_or_dash(share.alone), ratio(share.in_model, share.alone), share.steps);
  fmt::print(
      "  sum of steps: median {:.3f} ms per run (the rest of a run's latency is the "
      "executor's own work)\n",
      median_of(p.run_sum_ms));
}

nlohmann::json step_profile_json(const StepProfile& p) {
  auto ms_or_null = [](double ms) { return ms > 0 ? nlohmann::json(ms) : nlohmann::json(); };
  nlohmann::json steps = nlohmann::json::array();
  for (size_t s = 0; s < p.steps.size(); ++s)
    steps.push_back({{"step", s},
                     {"backend", p.steps[s].backend},
                     {"variant", p.steps[s].variant},
                     {"nodes", p.steps[s].nodes},
                     {"in_model_ms", p.in_model_ms[s]},
                     {"alone_ms", ms_or_null(p.alone_ms[s])}});
  nlohmann::json by_backend = nlohmann::json::array();
  for (const auto& [name, share] : shares_by_backend(p))
    by_backend.push_back({{"backend", name},
                          {"steps", share.steps},
                          {"in_model_ms", share.in_model},
                          {"alone_ms", ms_or_null(share.alone)}});
  return {{"runs", p.runs},
          {"steps", steps},
          {"by_backend", by_backend},
          {"sum_of_steps_median_ms", median_of(p.run_sum_ms)}};
}

}  // namespace collage::cli
