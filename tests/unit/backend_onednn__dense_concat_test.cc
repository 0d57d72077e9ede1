// Concatenations of dense parts that share a plain layout run on the onednn backends as
// collage's copies (dense_concat.h): row-major parts joined along any axis, with runs long
// enough to be cut into pieces and short ones, and channels-last conv outputs joined on the
// channels: like the reference backend on 1-3 threads and inside a lane, the step in the
// program where the parts are row-major.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dense_concat.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn_graph;
using testing::pick;
using testing::steps_of;

TEST(OnednnDenseConcat, RandomPartsAndAxesLikeReference) {
  std::mt19937 rng(67);
  for (int trial = 0; trial < testing::random_graph_count(24); ++trial) {
    const bool after_convs = trial % 3 == 2;
    const bool long_runs = trial % 6 == 1;  // runs cut into several pieces each
    const int64_t rank = after_convs || long_runs ? 4 : pick(rng, 1, 5);
    const int64_t axis = after_convs || long_runs ? 1 : pick(rng, 0, rank - 1);
    Shape base;
    for (int64_t d = 0; d < rank; ++d) base.push_back(pick(rng, 1, trial % 4 == 3 ? 40 : 7));
    if (long_runs) base = {2, 1, 70, pick(rng, 60, 90)};
    const int64_t parts = pick(rng, 2, 5);
    GraphBuilder b;
    std::vector<ValueId> joined;
    std::string what = fmt::format("{} parts of {} on axis {}", parts, shape_to_string(base), axis);
    if (after_convs) {
      // Odd channel counts: channels-last conv outputs (no 16-channel blocks).
      const ValueId x = b.input("x", DType::kFloat32, {1, 5, base[2], base[3]});
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t ch = 2 * pick(rng, 1, 6) + 1;
        joined.push_back(
            b.add1("Conv", {x, b.random_constant("w" + std::to_string(p), {ch, 5, 3, 3}, 0.3f)},
                   {{"pads", attr_ints({1, 1, 1, 1})}}));
      }
      what += " after convs";
    } else {
      for (int64_t p = 0; p < parts; ++p) {
        Shape s = base;
        s[static_cast<size_t>(axis)] = pick(rng, 1, 6);
        joined.push_back(b.add1("Relu", {b.input("x" + std::to_string(p), DType::kFloat32, s)}));
      }
    }
    b.output(b.add1("Concat", joined, {{"axis", attr_i(axis)}}));
    const Graph g = b.finish();
    SCOPED_TRACE(what);
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(trial));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const char* backend : {"onednn", "onednn-graph"})
      for (int threads : {1, 2, 3})
        EXPECT_TRUE(
            testing::expect_session_like_reference(backend, g, threads, inputs, want, what).empty())
            << backend << " on " << threads << " threads";
    std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, testing::test_options(2));
    EXPECT_TRUE(testing::outputs_match(testing::run_in_a_lane(*kernel, g, inputs), want))
        << "in a lane";
    if (!after_convs) EXPECT_EQ(steps_of(*kernel).count(std::string(onednn::kDenseConcatStep)), 1);
  }
}

}  // namespace
}  // namespace collage
