// Slices with negative steps (a flip) and Gathers of constant index lists as collage's own copy
// step in onednn programs (index_copy.h): random ranks, shapes, axes, steps, clamped bounds
// and index lists (negative indices, repeats, 2-D lists), each between two Relus, which
// onednn-graph takes as one region and onednn node by node, exactly as the reference kernels
// compute them.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/index_copy.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::GraphBuilder;
using testing::onednn_graph;

ValueId ints(GraphBuilder& b, const std::string& name, const std::vector<int64_t>& v) {
  return b.constant(name, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

void expect_one_copy_step_like_reference(const Graph& g, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<Tensor> inputs = random_inputs(g, 3);
  const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
  std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, testing::test_options());
  const testing::ProgramSteps steps = testing::steps_of(*kernel);
  EXPECT_EQ(steps.count(onednn::kIndexCopyStep), 1);
  for (const std::string& impl : steps.implementations)
    EXPECT_FALSE(onednn::is_reference_impl(impl)) << impl;
  std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
  kernel->run(inputs, got);
  EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{0, 0}));
  for (const char* backend : {"onednn-graph", "onednn"})
    EXPECT_TRUE(testing::expect_session_like_reference(backend, g, 2, inputs, want, what).empty())
        << backend;
}

TEST(OnednnIndexCopy, SlicesWithNegativeStepsLikeReference) {
  std::mt19937 rng(31);
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  for (int trial = 0; trial < 16; ++trial) {
    const size_t rank = 2 + trial % 4;
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(2 + static_cast<int64_t>(rng() % 6));
    std::vector<int64_t> starts, ends, axes, steps;
    for (size_t d = 0; d < rank; ++d) {
      if (d != 0 && rng() % 2) continue;  // axis 0 always, others sometimes
      const int64_t n = shape[d];
      const int64_t step = d == 0 || rng() % 2 ? -1 - static_cast<int64_t>(rng() % 3)
                                               : 1 + static_cast<int64_t>(rng() % 2);
      // Bounds in range, negative, or clamped (a full flip is starts -1, ends -huge).
      int64_t start = static_cast<int64_t>(rng() % n) - (rng() % 2 ? n : 0);
      int64_t end = step < 0 ? -kHuge : kHuge;
      if (rng() % 2) end = static_cast<int64_t>(rng() % n);
      if (step < 0 && trial % 4 == 0) start = -1;
      // Keep it non-empty: a negative step walks from a later start to an earlier end.
      const int64_t s = start < 0 ? start + n : start;
      if (end != kHuge && end != -kHuge && (step < 0 ? end >= s : end <= s))
        end = step < 0 ? -kHuge : kHuge;
      starts.push_back(start);
      ends.push_back(end);
      axes.push_back(static_cast<int64_t>(d) - (rng() % 2 ? static_cast<int64_t>(rank) : 0));
      steps.push_back(step);
    }
    GraphBuilder b(13);
    const ValueId x = b.add1("Relu", {b.input("x", DType::kFloat32, shape)});
    const ValueId y = b.add1("Slice", {x, ints(b, "starts", starts), ints(b, "ends", ends),
                                       ints(b, "axes", axes), ints(b, "steps", steps)});
    b.output(b.add1("Relu", {y}));
    expect_one_copy_step_like_reference(
        b.graph(), fmt::format("shape [{}] starts [{}] ends [{}] axes [{}] steps [{}]",
                               fmt::join(shape, ","), fmt::join(starts, ","), fmt::join(ends, ","),
                               fmt::join(axes, ","), fmt::join(steps, ",")));
  }
}

TEST(OnednnIndexCopy, GathersOfIndexListsLikeReference) {
  std::mt19937 rng(37);
  for (int trial = 0; trial < 16; ++trial) {
    const size_t rank = 1 + trial % 4;
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(2 + static_cast<int64_t>(rng() % 7));
    const int64_t axis = static_cast<int64_t>(rng() % rank);
    const int64_t n = shape[axis];
    // 2-12 indices in any order, repeats and negative ones; every fourth a 2-D list.
    std::vector<int64_t> list(2 + rng() % 11);
    for (int64_t& i : list) i = static_cast<int64_t>(rng() % n) - (rng() % 2 ? n : 0);
    const Shape index_shape = trial % 4 == 3 && list.size() % 2 == 0
                                  ? Shape{2, static_cast<int64_t>(list.size() / 2)}
                                  : Shape{static_cast<int64_t>(list.size())};
    GraphBuilder b(13);
    const ValueId x = b.add1("Relu", {b.input("x", DType::kFloat32, shape)});
    const ValueId y = b.add1(
        "Gather", {x, b.constant("indices", Tensor::from_vector<int64_t>(index_shape, list))},
        {{"axis", attr_i(axis - (trial % 2 ? static_cast<int64_t>(rank) : 0))}});
    b.output(b.add1("Relu", {y}));
    expect_one_copy_step_like_reference(
        b.graph(), fmt::format("shape [{}] axis {} indices [{}] as [{}]", fmt::join(shape, ","),
                               axis, fmt::join(list, ","), fmt::join(index_shape, ",")));
  }
}

}  // namespace
}  // namespace collage
