// 2-D depthwise convolutions in onednn-graph regions built blocked run as collage's own
// channel-blocked step (depthwise_conv2d.h): on randomized channel counts (multiples of 16 and
// not), sizes (narrower than the kernel to wide enough for its four-pixel loop), strides 1 and 2,
// pads 0 to K - 1 per side, batches 1 and 2, with and without a bias and a tail (Relu, Clip, both,
// LeakyRelu, SiLU, HardSwish), between two 1x1 convs, alone, and written into a concatenation done
// in place: like the reference backend, the step in the program (once per depthwise conv) and no
// oneDNN depthwise kernel; 5x5 convs, a tail the step does not take and the default (direct)
// variant keep oneDNN's kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/depthwise_conv2d.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::onednn_graph;
using testing::pick;

using Tail = testing::ConvTail;

struct Depthwise2d {
  int64_t batch = 1, channels = 16, h = 8, w = 8, kernel = 3, stride = 1;
  int64_t pads[4] = {1, 1, 1, 1};
  bool bias = true;
  int convs = 1;  // depthwise convs side by side, concatenated when 2
  bool between_convs = true;
  Tail tail = Tail::kNone;
  std::string text() const {
    return fmt::format("N{} C{} {}x{} k{} s{} p{},{},{},{}{}{} x{} tail {}", batch, channels, h, w,
                       kernel, stride, pads[0], pads[1], pads[2], pads[3], bias ? " bias" : "",
                       between_convs ? " in a region" : "", convs, static_cast<int>(tail));
  }
};

Graph depthwise_graph(const Depthwise2d& c) {
  GraphBuilder b;
  const int64_t ch = c.channels;
  ValueId x = b.input("x", DType::kFloat32, {c.batch, ch, c.h, c.w});
  auto pointwise = [&](ValueId v, int64_t in, const std::string& name) {
    return b.add1("Relu", {b.add1("Conv", {v, b.random_constant(name, {ch, in, 1, 1}, 0.3f)})});
  };
  if (c.between_convs) x = pointwise(x, ch, "before");
  std::vector<ValueId> outs;
  for (int i = 0; i < c.convs; ++i) {
    std::vector<ValueId> in = {
        x, b.random_constant(fmt::format("w{}", i), {ch, 1, c.kernel, c.kernel}, 0.5f)};
    if (c.bias) in.push_back(b.random_constant(fmt::format("b{}", i), {ch}));
    ValueId y = b.add1("Conv", in,
                       {{"group", attr_i(ch)},
                        {"kernel_shape", attr_ints({c.kernel, c.kernel})},
                        {"strides", attr_ints({c.stride, c.stride})},
                        {"pads", attr_ints({c.pads[0], c.pads[1], c.pads[2], c.pads[3]})}});
    y = testing::add_conv_tail(b, y, c.tail);
    outs.push_back(y);
  }
  ValueId y = outs.size() == 1 ? outs[0] : b.add1("Concat", outs, {{"axis", attr_i(1)}});
  if (c.between_convs) y = pointwise(y, ch * c.convs, "after");
  b.output(y);
  return b.finish();
}

testing::ProgramSteps expect_variant_like_reference(const Graph& g, const std::string& variant,
                                                    const std::string& what) {
  return testing::variant_steps_like_reference(g, variant, what, 11);
}

std::ptrdiff_t onednn_depthwise_kernels(const testing::ProgramSteps& steps) {
  return std::count_if(
      steps.implementations.begin(), steps.implementations.end(),
      [](const std::string& impl) { return impl.find("dw") != std::string::npos; });
}

TEST(OnednnDepthwiseConv2d, RandomShapesInBlockedRegionsRunAsTheStepLikeReference) {
  std::mt19937 rng(71);
  const Tail tails[] = {Tail::kNone,         Tail::kRelu,      Tail::kClip, Tail::kReluThenClip,
                        Tail::kClipThenRelu, Tail::kLeakyRelu, Tail::kSilu, Tail::kHardSwish};
  for (int trial = 0; trial < testing::random_graph_count(32); ++trial) {
    Depthwise2d c;
    c.batch = pick(rng, 1, 2);
    c.channels = trial % 3 == 0 ? 16 * pick(rng, 1, 3) : pick(rng, 1, 40);
    c.stride = pick(rng, 1, 2);
    for (int64_t& p : c.pads) p = pick(rng, 0, static_cast<int>(c.kernel - 1));
    c.h = pick(rng, static_cast<int>(std::max<int64_t>(1, c.kernel - c.pads[0] - c.pads[2])), 20);
    c.w = pick(rng, static_cast<int>(std::max<int64_t>(1, c.kernel - c.pads[1] - c.pads[3])), 20);
    c.bias = pick(rng, 0, 1) == 1;
    c.tail = tails[pick(rng, 0, 7)];
    c.between_convs = trial % 5 != 4;
    // Two side by side into a concatenation done in place (whole channel blocks each).
    c.convs = c.between_convs && c.channels % 16 == 0 && trial % 2 == 0 ? 2 : 1;
    SCOPED_TRACE(c.text());
    const Graph g = depthwise_graph(c);
    for (const Node& n : g.nodes()) {
      if (n.op_type == "Conv" && n.attr_int("group", 1) > 1) {
        ASSERT_TRUE(onednn::depthwise_conv2d_shape(g, n));
      }
    }
    const testing::ProgramSteps blocked = expect_variant_like_reference(g, "blocked", c.text());
    const std::string listed = ::testing::PrintToString(blocked.implementations);
    EXPECT_EQ(blocked.count(std::string(onednn::kDepthwiseConv2dStep)), c.convs) << listed;
    EXPECT_EQ(onednn_depthwise_kernels(blocked), 0) << listed;
    for (const std::string& impl : blocked.implementations)
      EXPECT_FALSE(onednn::is_reference_impl(impl)) << listed;
  }
}

TEST(OnednnDepthwiseConv2d, OtherTailsAndTheDirectVariantKeepOnednnsKernel) {
  Depthwise2d c;
  c.channels = 24;
  c.h = 13;
  c.w = 11;
  c.tail = Tail::kTanh;  // a function the step does not evaluate
  const Graph tanh = depthwise_graph(c);
  const testing::ProgramSteps blocked = expect_variant_like_reference(tanh, "blocked", c.text());
  EXPECT_EQ(blocked.count(std::string(onednn::kDepthwiseConv2dStep)), 0);
  EXPECT_EQ(onednn_depthwise_kernels(blocked), 1)
      << ::testing::PrintToString(blocked.implementations);
  c.tail = Tail::kSilu;
  c.kernel = 5;  // 5x5: oneDNN's (depthwise_conv2d.h)
  c.pads[0] = c.pads[1] = c.pads[2] = c.pads[3] = 2;
  const Graph five = depthwise_graph(c);
  for (const Node& n : five.nodes()) {
    if (n.attr_int("group", 1) > 1) {
      EXPECT_FALSE(onednn::depthwise_conv2d_shape(five, n));
    }
  }
  const testing::ProgramSteps blocked5 = expect_variant_like_reference(five, "blocked", c.text());
  EXPECT_EQ(blocked5.count(std::string(onednn::kDepthwiseConv2dStep)), 0);
  EXPECT_EQ(onednn_depthwise_kernels(blocked5), 1)
      << ::testing::PrintToString(blocked5.implementations);
  c.kernel = 3;
  c.pads[0] = c.pads[1] = c.pads[2] = c.pads[3] = 1;
  c.tail = Tail::kClip;
  const Graph relu6 = depthwise_graph(c);
  const testing::ProgramSteps direct = expect_variant_like_reference(relu6, "", c.text());
  EXPECT_EQ(direct.count(std::string(onednn::kDepthwiseConv2dStep)), 0);
  EXPECT_EQ(onednn_depthwise_kernels(direct), 1)
      << ::testing::PrintToString(direct.implementations);
  EXPECT_EQ(expect_variant_like_reference(relu6, "blocked", c.text())
                .count(std::string(onednn::kDepthwiseConv2dStep)),
            1);
}

// A NaN in the input comes out as NaN where its taps reach, as on reference (the clamp
// keeps it), and nowhere else.
TEST(OnednnDepthwiseConv2d, NanStaysNan) {
  Depthwise2d c;
  c.channels = 16;
  c.h = 9;
  c.w = 12;
  c.between_convs = false;
  c.tail = Tail::kClip;
  const Graph g = depthwise_graph(c);
  std::vector<Tensor> inputs = random_inputs(g, 5);
  inputs[0].data<float>()[3 * 12 + 5] = std::nanf("");  // channel 0, row 3, column 5
  CompileOptions options = testing::test_options(2);
  options.variant = "blocked";
  auto [got, want] = testing::run_backend_and_reference(onednn_graph(), g, inputs, options);
  EXPECT_TRUE(testing::outputs_match(got, want));
  const float* y = got[0].data<float>();
  int nans = 0;
  for (int64_t i = 0; i < got[0].numel(); ++i) nans += std::isnan(y[i]);
  EXPECT_EQ(nans, 9);  // a 3x3 window around (3, 5) in channel 0
}

}  // namespace
}  // namespace collage
