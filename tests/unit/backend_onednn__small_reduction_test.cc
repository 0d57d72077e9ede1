// Sums and means over a few elements per output on the onednn backends run as collage's
// step (small_reduction.h), read through the strides of the value they reduce: on random
// shapes and axes (up to kMaxSmallReduction reduced elements, and more, which stay oneDNN's
// jit reduction), keepdims either way, alone on a graph input, after a conv in a region (a
// ResNeSt-style [N, radix, C, H, W] view of its output summed over the radix) and over the
// last axis of a product (a complex pair's power): like the reference backend on 1-3 threads
// and inside a lane, the step in the program exactly when the reduction is small.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/small_reduction.h"
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

enum class Context { kInput, kAfterConv, kPower };

struct Case {
  Context context = Context::kInput;
  Shape shape;  // the reduced value's
  std::vector<int64_t> axes;
  bool keepdims = true, mean = false;
  int64_t reduced() const {
    int64_t n = 1;
    for (int64_t a : axes) n *= shape[static_cast<size_t>(a)];
    return n;
  }
  std::string text() const {
    static const char* contexts[] = {"on an input", "after a conv", "of a power"};
    return fmt::format("{} {} axes {} keepdims {} {}", mean ? "ReduceMean" : "ReduceSum",
                       shape_to_string(shape), fmt::join(axes, ","), keepdims,
                       contexts[static_cast<int>(context)]);
  }
};

Graph reduction_graph(const Case& c) {
  GraphBuilder b;
  ValueId x;
  if (c.context == Context::kAfterConv) {
    // [N, r, C, H, W] is the conv's [N, r*C, H, W] output seen with its channels split.
    const Shape& s = c.shape;
    const int64_t channels = s[1] * s[2];
    const ValueId image = b.input("x", DType::kFloat32, {s[0], 8, s[3], s[4]});
    const ValueId conv = b.add1("Conv", {image, b.random_constant("w", {channels, 8, 3, 3}, 0.3f)},
                                {{"pads", attr_ints({1, 1, 1, 1})}});
    x = b.add1("Reshape",
               {b.add1("Relu", {conv}), b.constant("to", Tensor::from_vector<int64_t>({5}, s))});
  } else if (c.context == Context::kPower) {
    const ValueId pair = b.input("x", DType::kFloat32, c.shape);
    x = b.add1("Mul", {pair, pair});
  } else {
    x = b.input("x", DType::kFloat32, c.shape);
  }
  const Attribute keep = attr_i(c.keepdims ? 1 : 0);
  const ValueId y =
      c.mean ? b.add1("ReduceMean", {x}, {{"axes", attr_ints(c.axes)}, {"keepdims", keep}})
             : b.add1("ReduceSum",
                      {x, b.constant("axes", Tensor::from_vector<int64_t>(
                                                 {static_cast<int64_t>(c.axes.size())}, c.axes))},
                      {{"keepdims", keep}});
  b.output(y);
  return b.finish();
}

Case random_case(std::mt19937& rng, int trial) {
  Case c;
  c.context = static_cast<Context>(trial % 3);
  c.keepdims = pick(rng, 0, 1) == 1;
  c.mean = c.context == Context::kInput && pick(rng, 0, 1) == 1;
  if (c.context == Context::kAfterConv) {
    c.shape = {1, pick(rng, 2, 4), pick(rng, 1, 40), pick(rng, 1, 9), pick(rng, 1, 9)};
    c.axes = {1};
  } else if (c.context == Context::kPower) {
    const int64_t rank = pick(rng, 2, 4);
    for (int64_t d = 0; d + 1 < rank; ++d) c.shape.push_back(pick(rng, 1, 20));
    c.shape.push_back(2);
    c.axes = {rank - 1};
  } else if (trial % 6 == 3) {  // more than the step takes: oneDNN's jit reduction
    c.shape = {pick(rng, 1, 4), 5, pick(rng, 4, 9)};
    c.axes = {1, 2};
  } else {
    const int64_t rank = pick(rng, 1, 5);
    for (int64_t d = 0; d < rank; ++d) c.shape.push_back(pick(rng, 1, 7));
    for (int64_t d = 0; d < rank; ++d)
      if (pick(rng, 0, 2) == 0) c.axes.push_back(d);
    if (c.axes.empty()) c.axes.push_back(pick(rng, 0, rank - 1));
  }
  if (!c.keepdims && static_cast<int64_t>(c.axes.size()) == static_cast<int64_t>(c.shape.size()))
    c.keepdims = true;  // a scalar output is not this step's
  return c;
}

TEST(OnednnSmallReduction, RandomShapesAndAxesLikeReference) {
  std::mt19937 rng(61);
  int small = 0, large = 0;
  for (int trial = 0; trial < testing::random_graph_count(30); ++trial) {
    const Case c = random_case(rng, trial);
    SCOPED_TRACE(c.text());
    const Graph g = reduction_graph(c);
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(trial));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const char* backend : {"onednn", "onednn-graph"})
      for (int threads : {1, 2, 3})
        EXPECT_TRUE(
            testing::expect_session_like_reference(backend, g, threads, inputs, want, c.text())
                .empty())
            << backend << " on " << threads << " threads";
    std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, testing::test_options(2));
    EXPECT_TRUE(testing::outputs_match(testing::run_in_a_lane(*kernel, g, inputs), want))
        << "in a lane";
    const bool is_small = c.reduced() <= onednn::kMaxSmallReduction;
    (is_small ? small : large) += 1;
    EXPECT_EQ(steps_of(*kernel).count(std::string(onednn::kSmallReductionStep)), is_small ? 1 : 0);
  }
  EXPECT_GT(small, 10);
  EXPECT_GT(large, 0);
}

}  // namespace
}  // namespace collage
