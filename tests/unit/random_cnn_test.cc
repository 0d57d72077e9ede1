// Differential test over random CNNs (random_cnn.h): every host backend, run as `collage run
// --backend NAME --strict` runs it (the nodes it takes, the rest on the fallback), computes
// what reference computes; and so does a plan that mixes them at random, with concurrent
// stages, as a tuned plan does. It found torch-graph's ReLU6 miscompile (libtorch's
// optimize_for_inference; TorchGraphBackend.ConvThenReluSixKeepsItsClamp).
//
// COLLAGE_RANDOM_GRAPHS=N runs N graphs instead of the default few: a longer campaign is
// `COLLAGE_RANDOM_GRAPHS=200 build/tests/collage_unit_tests
// --gtest_filter='*RandomCnn*:*RandomTransformer*'`.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "random_cnn.h"
#include "random_plan.h"

namespace collage {
namespace {

TEST(RandomCnn, EveryHostBackendMatchesReference) {
  const std::vector<std::string> backends = testing::host_backends();
  for (int seed = 100; seed < 100 + testing::random_graph_count(6); ++seed) {
    const Graph g = testing::random_cnn(seed);
    const std::string what = "random CNN seed " + std::to_string(seed);
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const std::string& backend : backends)
      testing::expect_session_like_reference(backend, g, 2, inputs, want, what);
  }
}

TEST(RandomCnn, RandomlyMixedPlansMatchReference) {
  testing::MixedPlans mixed;
  for (int seed = 200; seed < 200 + testing::random_graph_count(6); ++seed) {
    const Graph g = testing::random_cnn(seed);
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    mixed.expect_like_reference(g, inputs, Session(g, SessionOptions{}).run(inputs), seed,
                                "random CNN seed " + std::to_string(seed));
  }
  // What the test is for: plans that mix backends and run steps concurrently.
  EXPECT_GE(mixed.most_backends, 4u);
  EXPECT_GT(mixed.concurrent_plans, 0u);
}

// What a user's ONNX file goes through: the graph written as ONNX and loaded back runs the
// import passes (identity removal, constant folding, BatchNorm folding into convs, dead-code
// removal) on shapes and neighbourhoods no hand-written test lists; the loaded graph must
// compute what the original does, on reference and on onednn-graph.
TEST(RandomCnn, ImportPassesKeepWhatTheGraphComputes) {
  for (int seed = 300; seed < 300 + testing::random_graph_count(8); ++seed) {
    const Graph g = testing::random_cnn(seed);
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    testing::expect_onnx_round_trip_like_reference(g, "onednn-graph", inputs,
                                                   Session(g, SessionOptions{}).run(inputs),
                                                   "random CNN seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace collage
