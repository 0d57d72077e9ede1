// Random plans for differential tests: a random cover of a graph by every host backend's
// candidates (each taken or skipped at random, those compile() refuses skipped, the rest on
// the fallback), scheduled for two threads with concurrent stages where the graph has
// independent branches, as a Plan a Session loads. A tuned plan is one such cover chosen by
// measurement; these reach the boundaries between backends (layouts, copies, buffers
// shared across steps, lanes) in combinations the tuner's choices on the zoo never do.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/error.h"
#include "collage/plan.h"
#include "collage/session.h"
#include "runtime/partitioner.h"
#include "search/candidates.h"
#include "search/cost_model.h"
#include "search/schedule.h"

namespace collage::testing {

// Costs under which concurrency pays: every kernel ~ its node count, and barely faster on
// two threads than on one (as small kernels are).
class PoorlyScalingCosts : public CostModel {
 public:
  double cost_ms(const Candidate& c) override {
    return static_cast<double>(c.nodes.size()) * (c.threads > 1 ? 0.9 : 1.0);
  }
  double step_overhead_ms() override { return 0; }
  double stage_overhead_ms() override { return 0; }
};

// Whether the candidate's backend builds it: a pattern may claim what compile() then
// refuses (kUnsupported), which the tuner records as a failed candidate and never plans.
inline bool compiles(const Graph& g, const Candidate& c) {
  try {
    compile_candidate(g, c);
    return true;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) ADD_FAILURE() << e.what();
    return false;
  }
}

// A random cover of `g` by the host backends' candidates (each taken or skipped at random,
// the rest on the fallback), scheduled for two threads, as a plan.
inline Plan random_plan(const Graph& g, std::mt19937& rng) {
  std::vector<Candidate> candidates = enumerate_candidates(g, select_backends({}), 2);
  std::erase_if(candidates, [](const Candidate& c) { return c.backend->device() != nullptr; });
  std::shuffle(candidates.begin(), candidates.end(), rng);
  Placement placement;
  std::vector<int> group_of(g.num_nodes(), -1);
  for (const Candidate& c : candidates) {
    if (std::bernoulli_distribution(0.3)(rng) ||
        std::any_of(c.nodes.begin(), c.nodes.end(), [&](NodeId n) { return group_of[n] >= 0; }))
      continue;
    for (NodeId n : c.nodes) group_of[n] = static_cast<int>(placement.size());
    if (!groups_are_acyclic(g, group_of) || !compiles(g, c)) {
      for (NodeId n : c.nodes) group_of[n] = -1;
      continue;
    }
    placement.push_back(c);
  }
  PoorlyScalingCosts costs;
  const ScheduledPlan scheduled = choose_schedule(g, complete_placement(g, placement, 2), costs, 2);
  Plan plan;
  plan.model_hash = model_hash(g);
  plan.threads = 2;
  for (size_t i = 0; i < scheduled.placement.size(); ++i) {
    const Candidate& c = scheduled.placement[i];
    PlanGroup group;
    for (NodeId n : c.nodes) group.nodes.push_back(g.node(n).name);
    group.backend = c.backend->name();
    group.variant = c.variant;
    group.threads = c.threads;
    group.stage = scheduled.schedule[i].stage;
    group.lane = scheduled.schedule[i].lane;
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

// Runs random plans of graphs against reference's outputs, and counts what they mixed.
struct MixedPlans {
  size_t most_backends = 0;     // the most distinct backends one plan used
  size_t concurrent_plans = 0;  // plans with a concurrent stage

  void expect_like_reference(const Graph& g, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& want, uint64_t seed,
                             const std::string& what) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const Plan plan = random_plan(g, rng);
    std::set<std::string> backends;
    bool concurrent = false;
    for (const PlanGroup& group : plan.groups) {
      backends.insert(group.backend);
      concurrent = concurrent || group.lane > 0;
    }
    most_backends = std::max(most_backends, backends.size());
    concurrent_plans += concurrent;
    const std::string described = what + ", a plan of " + std::to_string(plan.groups.size()) +
                                  " groups on " + std::to_string(backends.size()) + " backends";
    SessionOptions options;
    options.threads = 2;
    try {
      Session session(g, plan, options);
      EXPECT_TRUE(outputs_match(session.run(inputs), want)) << described;
    } catch (const std::exception& e) {
      ADD_FAILURE() << described << ": " << e.what();
    }
  }
};

}  // namespace collage::testing
