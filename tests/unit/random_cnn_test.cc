// Differential test over random CNNs (random_cnn.h): every host backend, run as `collage run
// --backend NAME --strict` runs it (the nodes it takes, the rest on the fallback), computes
// what reference computes; and so does a plan that mixes them at random, with concurrent
// stages, as a tuned plan does. It found torch-graph's ReLU6 miscompile (libtorch's
// optimize_for_inference; TorchGraphBackend.ConvThenReluSixKeepsItsClamp).
//
// COLLAGE_RANDOM_CNN_SEEDS=N runs N graphs instead of the default few: a longer campaign is
// `COLLAGE_RANDOM_CNN_SEEDS=200 build/tests/collage_unit_tests --gtest_filter='RandomCnn*'`.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/plan.h"
#include "collage/session.h"
#include "random_cnn.h"
#include "runtime/partitioner.h"
#include "search/candidates.h"
#include "search/cost_model.h"
#include "search/schedule.h"

namespace collage {
namespace {

TEST(RandomCnn, EveryHostBackendMatchesReference) {
  std::vector<std::string> backends;
  for (Backend* b : BackendRegistry::global().all())
    if (!BackendRegistry::global().is_fallback(*b) && !b->device()) backends.push_back(b->name());
  for (int seed = 100; seed < 100 + testing::random_cnn_seeds(6); ++seed) {
    const Graph g = testing::random_cnn(seed);
    const std::string what = "random CNN seed " + std::to_string(seed);
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const std::string& backend : backends)
      testing::expect_session_like_reference(backend, g, 2, inputs, want, what);
  }
}

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
bool compiles(const Graph& g, const Candidate& c) {
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
Plan random_plan(const Graph& g, std::mt19937& rng) {
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

TEST(RandomCnn, RandomlyMixedPlansMatchReference) {
  size_t most_backends = 0, concurrent_plans = 0;
  for (int seed = 200; seed < 200 + testing::random_cnn_seeds(6); ++seed) {
    const Graph g = testing::random_cnn(seed);
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
    const std::string what = "random CNN seed " + std::to_string(seed) + ", a plan of " +
                             std::to_string(plan.groups.size()) + " groups on " +
                             std::to_string(backends.size()) + " backends";
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    SessionOptions options;
    options.threads = 2;
    try {
      Session mixed(g, plan, options);
      EXPECT_TRUE(testing::outputs_match(mixed.run(inputs), want)) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  // What the test is for: plans that mix backends and run steps concurrently.
  EXPECT_GE(most_backends, 4u);
  EXPECT_GT(concurrent_plans, 0u);
}

}  // namespace
}  // namespace collage
