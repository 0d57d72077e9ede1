// The onednn backends on random CNNs (random_cnn.h), whose graphs meet every region rewrite
// (post-op fusion, depthwise fusion, concat in place or split into convs, pad folding,
// squeeze-excitation, concurrent lanes, Winograd) in combinations no hand-written test
// lists: both, in their default and Winograd variants (onednn-graph also blocked),
// must compute what reference computes at one thread and at two, and onednn-graph must
// leave no node to the fallback: every op these graphs use is one its regions take (a
// bilinear Resize with align_corners, which oneDNN's resampling does not compute, as
// collage's taps step since r30, taps_resize.h).
// COLLAGE_RANDOM_GRAPHS=N runs N graphs (see random_cnn_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/region_kernel.h"
#include "collage/session.h"
#include "onednn_test_util.h"
#include "random_cnn.h"

namespace collage {
namespace {

TEST(OnednnRandomCnn, MatchesReferenceAndOnednnGraphLeavesNoHoles) {
  for (int seed = 0; seed < testing::random_graph_count(16); ++seed) {
    const Graph g = testing::random_cnn(seed);
    const std::string what = "random CNN seed " + std::to_string(seed) + " (" +
                             std::to_string(g.num_nodes()) + " nodes)";
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (int threads : {1, 2}) {
      // Each also with every conv it can as Winograd (collage's channels-last F(4,3) step
      // or oneDNN's; onednn-graph's F(2,2) too), and onednn-graph with every conv on
      // channel-blocked activations.
      for (const std::string variant : {"", "/winograd", "/winograd2x2", "/blocked"}) {
        for (NodeId n : testing::expect_session_like_reference("onednn-graph" + variant, g, threads,
                                                               inputs, want, what))
          ADD_FAILURE() << g.node(n).op_type << " '" << g.node(n).name
                        << "' left to the fallback by onednn-graph" << variant << ", " << what;
        if (variant != "/blocked" && variant != "/winograd2x2")  // onednn-graph's only
          testing::expect_session_like_reference("onednn" + variant, g, threads, inputs, want,
                                                 what);
      }
    }
  }
}

// The same graphs with every independent step of a region in a concurrent lane, whatever
// it costs (by default a stage is kept only where it measured faster, so few random graphs
// would get one): races and buffer reuse across lanes show up as wrong outputs.
TEST(OnednnRandomCnn, EveryPossibleConcurrentStageMatchesReference) {
  testing::WithLanes lanes("always");
  int concurrent_regions = 0;
  for (int seed = 0; seed < testing::random_graph_count(16); ++seed) {
    const Graph g = testing::random_cnn(seed);
    const std::string what = "random CNN seed " + std::to_string(seed) + ", lanes always";
    const std::vector<Tensor> inputs = random_inputs(g, seed);
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const std::string variant : {"", "/blocked"})
      testing::expect_session_like_reference("onednn-graph" + variant, g, 2, inputs, want, what);
    concurrent_regions += testing::steps_of(*onednn::compile_region(g)).concurrent_stages > 0;
  }
  EXPECT_GT(concurrent_regions, 0);
}

}  // namespace
}  // namespace collage
