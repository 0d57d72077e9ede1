// Grouped 3x3 convs of narrow groups in onednn-graph regions run as collage's own step
// (grouped_conv2d.h): on randomized channel counts (multiples of 16), group widths 4 (stride 1
// and 2) and 8 (stride 2), sizes (narrower than the kernel to wide enough for its four-pixel
// loop), pads 0 to 2 per side, batches 1 and 2, with and without a bias and a tail (Relu, Clip,
// both, LeakyRelu, SiLU, HardSwish), between two 1x1 convs and alone, in the default
// (channels-last) and blocked (nChw16c) variants: like the reference backend, the step in the
// program (once per grouped conv) and no oneDNN convolution for it; widths it does not take (8 at
// stride 1, 16) and a tail it does not apply keep oneDNN's kernel. A NaN stays where its taps
// reach.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/grouped_conv2d.h"
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

struct Grouped2d {
  int64_t batch = 1, channels = 32, width = 4, h = 8, w = 8, stride = 1;
  int64_t pads[4] = {1, 1, 1, 1};
  bool bias = true;
  bool between_convs = true;
  Tail tail = Tail::kRelu;
  std::string text() const {
    return fmt::format("N{} C{} G{} {}x{} s{} p{},{},{},{}{}{} tail {}", batch, channels, width, h,
                       w, stride, pads[0], pads[1], pads[2], pads[3], bias ? " bias" : "",
                       between_convs ? " in a region" : "", static_cast<int>(tail));
  }
};

Graph grouped_graph(const Grouped2d& c) {
  GraphBuilder b;
  const int64_t ch = c.channels;
  ValueId x = b.input("x", DType::kFloat32, {c.batch, ch, c.h, c.w});
  auto pointwise = [&](ValueId v, const std::string& name) {
    return b.add1("Relu", {b.add1("Conv", {v, b.random_constant(name, {ch, ch, 1, 1}, 0.3f)})});
  };
  if (c.between_convs) x = pointwise(x, "before");
  std::vector<ValueId> in = {x, b.random_constant("w", {ch, c.width, 3, 3}, 0.4f)};
  if (c.bias) in.push_back(b.random_constant("b", {ch}));
  ValueId y = b.add1("Conv", in,
                     {{"group", attr_i(ch / c.width)},
                      {"kernel_shape", attr_ints({3, 3})},
                      {"strides", attr_ints({c.stride, c.stride})},
                      {"pads", attr_ints({c.pads[0], c.pads[1], c.pads[2], c.pads[3]})}});
  y = testing::add_conv_tail(b, y, c.tail);
  if (c.between_convs) y = pointwise(y, "after");
  b.output(y);
  return b.finish();
}

testing::ProgramSteps expect_variant_like_reference(const Graph& g, const std::string& variant,
                                                    const std::string& what) {
  return testing::variant_steps_like_reference(g, variant, what, 13);
}

// oneDNN convolutions in the program besides the 1x1 convs around the grouped one.
std::ptrdiff_t onednn_grouped_convs(const testing::ProgramSteps& steps, const Grouped2d& c) {
  return steps.count(dnnl::primitive::kind::convolution) -
         steps.count(std::string(onednn::kGroupedConv2dStep)) - (c.between_convs ? 2 : 0);
}

TEST(OnednnGroupedConv2d, RandomShapesRunAsTheStepLikeReference) {
  std::mt19937 rng(83);
  const Tail tails[] = {Tail::kNone,         Tail::kRelu,      Tail::kClip, Tail::kReluThenClip,
                        Tail::kClipThenRelu, Tail::kLeakyRelu, Tail::kSilu, Tail::kHardSwish};
  for (int trial = 0; trial < testing::random_graph_count(24); ++trial) {
    Grouped2d c;
    c.batch = pick(rng, 1, 2);
    c.channels = 16 * pick(rng, 1, 4);
    c.width = trial % 3 == 2 ? 8 : 4;
    c.stride = c.width == 8 ? 2 : pick(rng, 1, 2);
    for (int64_t& p : c.pads) p = pick(rng, 0, 2);
    c.h = pick(rng, static_cast<int>(std::max<int64_t>(1, 3 - c.pads[0] - c.pads[2])), 20);
    c.w = pick(rng, static_cast<int>(std::max<int64_t>(1, 3 - c.pads[1] - c.pads[3])), 20);
    c.bias = pick(rng, 0, 1) == 1;
    c.tail = tails[pick(rng, 0, 7)];
    c.between_convs = trial % 4 != 3;
    SCOPED_TRACE(c.text());
    const Graph g = grouped_graph(c);
    for (const Node& n : g.nodes()) {
      if (n.op_type == "Conv" && n.attr_int("group", 1) > 1) {
        ASSERT_TRUE(onednn::grouped_conv2d_shape(g, n));
      }
    }
    for (const std::string variant : {"", "blocked"}) {
      const testing::ProgramSteps steps = expect_variant_like_reference(g, variant, c.text());
      const std::string listed = ::testing::PrintToString(steps.implementations);
      EXPECT_EQ(steps.count(std::string(onednn::kGroupedConv2dStep)), 1) << variant << listed;
      EXPECT_EQ(onednn_grouped_convs(steps, c), 0) << variant << listed;
      for (const std::string& impl : steps.implementations)
        EXPECT_FALSE(onednn::is_reference_impl(impl)) << listed;
    }
  }
}

TEST(OnednnGroupedConv2d, OtherWidthsAndTailsKeepOnednnsKernel) {
  Grouped2d c;
  c.channels = 64;
  c.h = 13;
  c.w = 11;
  c.width = 8;  // stride 1: as fast as oneDNN's (grouped_conv2d.h)
  const Graph eight = grouped_graph(c);
  c.width = 16;
  c.stride = 2;
  const Graph sixteen = grouped_graph(c);
  c.width = 4;
  c.stride = 1;
  c.tail = Tail::kTanh;  // a function the step does not evaluate
  const Graph tanh = grouped_graph(c);
  for (const Graph* g : {&eight, &sixteen, &tanh}) {
    const testing::ProgramSteps steps = expect_variant_like_reference(*g, "", c.text());
    EXPECT_EQ(steps.count(std::string(onednn::kGroupedConv2dStep)), 0)
        << ::testing::PrintToString(steps.implementations);
    EXPECT_EQ(onednn_grouped_convs(steps, c), 1) << ::testing::PrintToString(steps.implementations);
  }
  for (const Node& n : eight.nodes())
    if (n.attr_int("group", 1) > 1) EXPECT_FALSE(onednn::grouped_conv2d_shape(eight, n));
}

// A NaN in the input comes out as NaN where its taps reach, as on reference, and nowhere else.
TEST(OnednnGroupedConv2d, NanStaysNan) {
  Grouped2d c;
  c.channels = 16;
  c.h = 9;
  c.w = 12;
  c.between_convs = false;
  c.tail = Tail::kClip;
  const Graph g = grouped_graph(c);
  std::vector<Tensor> inputs = random_inputs(g, 5);
  inputs[0].data<float>()[3 * 12 + 5] = std::nanf("");  // channel 0, row 3, column 5
  auto [got, want] =
      testing::run_backend_and_reference(onednn_graph(), g, inputs, testing::test_options(2));
  EXPECT_TRUE(testing::outputs_match(got, want));
  const float* y = got[0].data<float>();
  int nans = 0;
  for (int64_t i = 0; i < got[0].numel(); ++i) nans += std::isnan(y[i]);
  EXPECT_EQ(nans, 4 * 9);  // a 3x3 window around (3, 5) in the 4 channels of group 0
}

}  // namespace
}  // namespace collage
