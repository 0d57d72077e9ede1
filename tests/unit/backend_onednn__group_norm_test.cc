// GroupNorm as PyTorch exports it (Reshape, InstanceNormalization, Reshape, Mul, Add) and
// InstanceNormalization alone on the onednn backends: one step of collage's code
// (kGroupNormStep) that computes what the reference backend does, on randomized shapes
// (Conv1d/2d/3d inputs, one or two images, group sizes from 1 to all channels, with and
// without the affine), alone and inside onednn-graph regions between convolutions.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/group_norm.h"
#include "backends/onednn/region_kernel.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_ints;
using testing::GraphBuilder;
using testing::has_match;
using testing::onednn;
using testing::onednn_graph;
using testing::pick;
using testing::steps_of;

struct Affine {
  bool mul = true, add = true;
  bool channel_first_shape = true;  // gamma [C, 1, ...] as torch exports, else [1, C, 1, ...]
};

// A per-channel constant of x's rank: [C, 1, ...] (rank - 1 dims) or [1, C, 1, ...].
ValueId channel_constant(GraphBuilder& b, const std::string& name, const Shape& xs,
                         bool channel_first) {
  Shape s(xs.size() - (channel_first ? 1 : 0), 1);
  s[channel_first ? 0 : 1] = xs[1];
  return b.random_constant(name, s);
}

// GroupNorm(groups) of `x` as torch.onnx exports it below opset 18; the InstanceNormalization's
// scale and bias random too (torch writes ones and zeros), so the step composes them.
ValueId group_norm(GraphBuilder& b, ValueId x, int64_t groups, const Affine& a,
                   const std::string& name) {
  const Shape xs = b.graph().value(x).shape;
  Tensor planes_shape = Tensor::from_vector<int64_t>({3}, {xs[0], groups, -1});
  Tensor back_shape = Tensor::from_vector<int64_t>({static_cast<int64_t>(xs.size())},
                                                   std::vector<int64_t>(xs.begin(), xs.end()));
  ValueId planes = b.add1("Reshape", {x, b.constant(name + "_planes", planes_shape)});
  ValueId norm = b.add1(
      "InstanceNormalization",
      {planes, b.random_constant(name + "_s", {groups}), b.random_constant(name + "_b", {groups})},
      {{"epsilon", testing::attr_f(1e-5f)}});
  ValueId y = b.add1("Reshape", {norm, b.constant(name + "_back", back_shape)});
  if (a.mul)
    y = b.add1("Mul", {y, channel_constant(b, name + "_gamma", xs, a.channel_first_shape)});
  if (a.add) y = b.add1("Add", {y, channel_constant(b, name + "_beta", xs, a.channel_first_shape)});
  return y;
}

TEST(OnednnGroupNorm, EveryExportedFormIsOneStepLikeReference) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 12; ++trial) {
    // Conv1d, Conv2d and Conv3d activations; trial 2 mod 4 is over the size at which the
    // step splits its planes across the team.
    const int64_t groups = std::vector<int64_t>{1, 2, 4, 8, 32}[pick(rng, 0, 4)];
    const int64_t channels = groups * pick(rng, 1, 4);
    Shape xs = {pick(rng, 1, 2), channels};
    const int spatial_rank = 1 + trial % 3;
    for (int d = 0; d < spatial_rank; ++d)
      xs.push_back(trial % 4 == 2 ? pick(rng, 20, 40) : pick(rng, 1, 9));
    Affine a;
    a.mul = trial % 4 != 3;
    a.add = trial % 5 != 4;
    a.channel_first_shape = trial % 2 == 0;
    const bool silu = trial % 3 == 1;  // a SiLU after it joins the step
    GraphBuilder b;
    ValueId y = group_norm(b, b.input("x", DType::kFloat32, xs), groups, a, "gn");
    if (silu) y = b.add1("Mul", {y, b.add1("Sigmoid", {y})});
    b.output(y);
    const Graph g = b.finish();
    const std::string what = fmt::format("trial {}: x {} groups {} mul {} add {} silu {}", trial,
                                         shape_to_string(xs), groups, a.mul, a.add, silu);
    ASSERT_TRUE(onednn::group_norm_group(g)) << what;
    std::vector<ValueId> all;
    for (const Node& n : g.nodes()) all.push_back(n.outputs[0]);
    EXPECT_TRUE(has_match(onednn(), g, all)) << what;
    std::unique_ptr<Kernel> kernel = onednn().compile(g, testing::test_options());
    const testing::ProgramSteps steps = steps_of(*kernel);
    EXPECT_EQ(steps.count(std::string(onednn::kGroupNormStep)), 1) << what;
    EXPECT_EQ(steps.implementations.size(), 1u) << what;
    testing::expect_like_reference(onednn(), g, what);
  }
}

TEST(OnednnGroupNorm, InstanceNormalizationAloneIsTheStepWhereOneDnnsWouldNotBeJit) {
  // Plain [N, C, S] data: oneDNN 2.6's batch normalization there is its C++ loop kernel.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    const Shape xs = {pick(rng, 1, 2), pick(rng, 1, 40), trial % 2 ? pick(rng, 300, 600) : 7};
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, xs);
    b.output(b.add1("InstanceNormalization",
                    {x, b.random_constant("s", {xs[1]}), b.random_constant("b", {xs[1]})}));
    const Graph g = b.finish();
    const std::string what = fmt::format("trial {}: x {}", trial, shape_to_string(xs));
    std::unique_ptr<Kernel> kernel = onednn().compile(g, testing::test_options());
    EXPECT_EQ(steps_of(*kernel).count(std::string(onednn::kGroupNormStep)), 1) << what;
    testing::expect_like_reference(onednn(), g, what);
  }
}

TEST(OnednnGroupNorm, InRegionsBetweenConvolutionsLikeReference) {
  // As in a diffusion UNet's residual block: conv -> GroupNorm -> SiLU -> conv, twice, the
  // block's input read again by the residual Add. The region runs each GroupNorm and its SiLU
  // as one step: no batch normalization primitive, no binary primitive for the affine, no
  // eltwise one for the SiLU. The second reads and writes the channels-last layout the convs
  // around it use where they use one (brgconv): then the only reorders are the block's input
  // to the first conv and to the residual sum, and the sum's output to row-major.
  for (int threads : {1, 2}) {
    const int64_t images = threads;  // two images with two threads: the step walks each
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {images, 32, 12, 12});
    ValueId h = x;
    for (int layer = 0; layer < 2; ++layer) {
      const std::string name = fmt::format("l{}", layer);
      h = group_norm(b, h, 8, Affine{}, name);
      h = b.add1("Mul", {h, b.add1("Sigmoid", {h})});
      h = testing::conv3x3(b, h, 32, name + "_conv");
    }
    b.output(b.add1("Add", {x, h}));
    const std::string what = fmt::format("threads {} images {}", threads, images);
    use_threads_on_this_thread(threads);
    std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
    const testing::ProgramSteps steps = steps_of(*kernel);
    EXPECT_EQ(steps.count(std::string(onednn::kGroupNormStep)), 2) << what;
    EXPECT_EQ(steps.count(dnnl::primitive::kind::batch_normalization), 0) << what;
    EXPECT_EQ(steps.count(dnnl::primitive::kind::binary), 0) << what;
    EXPECT_EQ(steps.count(dnnl::primitive::kind::eltwise), 0) << what;
    const bool channels_last_convs =
        std::any_of(steps.implementations.begin(), steps.implementations.end(),
                    [](const std::string& impl) { return impl.rfind("brgconv", 0) == 0; });
    if (channels_last_convs) EXPECT_EQ(steps.count(dnnl::primitive::kind::reorder), 3) << what;
    testing::expect_like_reference(onednn_graph(), b.graph(), what);
  }
}

TEST(OnednnGroupNorm, FewGroupsSplitTheirPlanesAcrossTheTeam) {
  // GroupNorm(1) (PoolFormer's LayerNorm over C, H, W) and GroupNorm(2) over 65536 floats:
  // fewer planes than threads, so the team splits each plane's sums and writing; row-major
  // alone, and channels-last after a conv in a region (where the team splits the pixels).
  use_threads_on_this_thread(2);
  for (int64_t groups : {1, 2}) {
    for (bool after_conv : {false, true}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {1, 16, 64, 64});
      if (after_conv) x = testing::conv3x3(b, x, 16, "conv");
      ValueId y = group_norm(b, x, groups, Affine{}, "gn");
      b.output(b.add1("Mul", {y, b.add1("Sigmoid", {y})}));
      const std::string what = fmt::format("groups {} after a conv {}", groups, after_conv);
      std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
      EXPECT_EQ(steps_of(*kernel).count(std::string(onednn::kGroupNormStep)), 1) << what;
      testing::expect_like_reference(onednn_graph(), b.graph(), what);
    }
  }
}

TEST(OnednnGroupNorm, TakesNoMoreThanReadsItAlone) {
  // An interior value read outside (the InstanceNormalization's output) leaves no GroupNorm;
  // a Mul by a per-pixel constant, or one whose output is read twice, stays out of it.
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 5, 5});
    ValueId y = group_norm(b, x, 4, Affine{}, "gn");
    b.output(y);
    b.output(b.graph().node(1).outputs[0]);  // the InstanceNormalization's output
    const Graph g = b.finish();
    EXPECT_FALSE(onednn::match_group_norm(g, g.consumers(), 0).has_value());
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 5, 5});
    ValueId y = group_norm(b, x, 4, Affine{false, false}, "gn");
    ValueId per_pixel = b.add1("Mul", {y, b.random_constant("p", {1, 1, 5, 5})});
    b.output(b.add1("Add", {per_pixel, b.random_constant("q", {8, 1, 1})}));
    const Graph g = b.finish();
    const std::optional<onednn::GroupNorm> gn = onednn::match_group_norm(g, g.consumers(), 0);
    ASSERT_TRUE(gn.has_value());
    EXPECT_EQ(gn->nodes.size(), 3u);
    testing::expect_like_reference(onednn_graph(), g, "a per-pixel Mul after it");
  }
}

}  // namespace
}  // namespace collage
