// Depthwise 3-D convolutions on the onednn backends run as collage's own channels-last step
// (depthwise_conv3d.h), where oneDNN has only its gemm-based kernel: on randomized channel
// counts (multiples of 16 and not), sizes, kernels (3x3x3, X3D's 5x1x1 and others), strides,
// dilations and pads, with and without a bias and a tail (a Relu, a residual Add), between
// two 1x1x1 convs of a region and alone: like the reference backend, the step in the program
// and no gemm-based or reference primitive.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/depthwise_conv3d.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;
using testing::steps_of;

struct Depthwise3d {
  int64_t channels = 16, size[3] = {5, 6, 7}, kernel[3] = {3, 3, 3}, stride[3] = {1, 1, 1},
          dilation[3] = {1, 1, 1}, pad[6] = {1, 1, 1, 1, 1, 1};
  bool bias = true, between_convs = true;
  int tail = 0;  // 0 none, 1 Relu, 2 a residual Add of the input (stride 1, same size)
  std::string text() const {
    return fmt::format("C{} {}x{}x{} k{}x{}x{} s{}{}{} d{}{}{} p{},{},{},{},{},{}{}{} tail {}",
                       channels, size[0], size[1], size[2], kernel[0], kernel[1], kernel[2],
                       stride[0], stride[1], stride[2], dilation[0], dilation[1], dilation[2],
                       pad[0], pad[1], pad[2], pad[3], pad[4], pad[5], bias ? " bias" : "",
                       between_convs ? " in a region" : "", tail);
  }
};

Graph depthwise_graph(const Depthwise3d& c) {
  GraphBuilder b;
  const int64_t ch = c.channels;
  ValueId x = b.input("x", DType::kFloat32, {1, ch, c.size[0], c.size[1], c.size[2]});
  auto pointwise = [&](ValueId v, const std::string& name) {
    return b.add1("Conv", {v, b.random_constant(name + "_w", {ch, ch, 1, 1, 1}, 0.3f)});
  };
  if (c.between_convs) x = pointwise(x, "before");
  std::vector<ValueId> in = {
      x, b.random_constant("w", {ch, 1, c.kernel[0], c.kernel[1], c.kernel[2]})};
  if (c.bias) in.push_back(b.random_constant("b", {ch}));
  ValueId y =
      b.add1("Conv", in,
             {{"group", attr_i(ch)},
              {"kernel_shape", attr_ints({c.kernel[0], c.kernel[1], c.kernel[2]})},
              {"strides", attr_ints({c.stride[0], c.stride[1], c.stride[2]})},
              {"dilations", attr_ints({c.dilation[0], c.dilation[1], c.dilation[2]})},
              {"pads", attr_ints({c.pad[0], c.pad[1], c.pad[2], c.pad[3], c.pad[4], c.pad[5]})}});
  if (c.tail == 1) y = b.add1("Relu", {y});
  if (c.tail == 2) y = b.add1("Add", {y, x});
  if (c.between_convs) y = pointwise(y, "after");
  b.output(y);
  return b.finish();
}

TEST(OnednnDepthwiseConv3d, RandomShapesRunAsTheStepLikeReference) {
  std::mt19937 rng(53);
  for (int trial = 0; trial < testing::random_graph_count(20); ++trial) {
    Depthwise3d c;
    c.channels = trial % 3 == 0 ? 16 * pick(rng, 1, 3) : pick(rng, 1, 40);
    c.tail = pick(rng, 0, 2);
    c.bias = pick(rng, 0, 1) == 1;
    c.between_convs = trial % 4 != 3;
    for (int i = 0; i < 3; ++i) {
      c.kernel[i] = trial % 5 == 4 ? (i == 0 ? 5 : 1) : pick(rng, 1, 3);
      c.dilation[i] = c.tail == 2 ? 1 : pick(rng, 1, 2);
      c.stride[i] = c.tail == 2 ? 1 : pick(rng, 1, 2);
      const int64_t span = (c.kernel[i] - 1) * c.dilation[i];
      // Same-size padding for the residual Add; else any pads up to the span.
      c.pad[i] = c.tail == 2 ? span / 2 : pick(rng, 0, static_cast<int>(span));
      c.pad[i + 3] = c.tail == 2 ? span - span / 2 : pick(rng, 0, static_cast<int>(span));
      c.size[i] =
          pick(rng, static_cast<int>(std::max<int64_t>(1, span + 1 - c.pad[i] - c.pad[i + 3])), 9);
    }
    SCOPED_TRACE(c.text());
    const Graph g = depthwise_graph(c);
    const NodeId dw = c.between_convs ? 1 : 0;
    ASSERT_TRUE(onednn::depthwise_conv3d_takes(g, g.node(dw)));
    const std::vector<Tensor> inputs = random_inputs(g, static_cast<uint64_t>(trial));
    const std::vector<Tensor> want = Session(g, SessionOptions{}).run(inputs);
    for (const char* backend : {"onednn", "onednn-graph"})
      EXPECT_TRUE(
          testing::expect_session_like_reference(backend, g, 2, inputs, want, c.text()).empty())
          << backend;
    std::unique_ptr<Kernel> kernel = onednn_graph().compile(g, testing::test_options(2));
    const testing::ProgramSteps steps = steps_of(*kernel);
    EXPECT_EQ(steps.count(std::string(onednn::kDepthwiseConv3dStep)), 1);
    for (const std::string& impl : steps.implementations) {
      EXPECT_EQ(impl.find("gemm"), std::string::npos) << impl;
      EXPECT_FALSE(onednn::is_reference_impl(impl)) << impl;
    }
  }
}

}  // namespace
}  // namespace collage
