// Grouped and depthwise 1-D convolutions on the onednn backends run as 2-D ones of height 1
// (conv1d_as_2d.h): on randomized shapes (kernel 1-31, stride and dilation 1-2, pads, two
// to all channels per group), alone and with an activation after them, and inside a
// Conformer-style convolution module in a region, each computes what the reference backend
// does, and the undilated depthwise ones (oneDNN's 1-D form of them is its gemm-based
// convolution) run on no gemm-based kernel.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/onednn/conv1d_as_2d.h"
#include "backends/onednn/region_kernel.h"
#include "collage/backend.h"
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

struct Conv1d {
  int64_t channels = 16, group = 16, kernel = 3, stride = 1, dilation = 1, pad = 1;
};

ValueId conv1d(GraphBuilder& b, ValueId x, const Conv1d& c, const std::string& name) {
  return b.add1("Conv",
                {x, b.random_constant(name + "_w", {c.channels, c.channels / c.group, c.kernel}),
                 b.random_constant(name + "_b", {c.channels})},
                {{"group", attr_i(c.group)},
                 {"kernel_shape", attr_ints({c.kernel})},
                 {"strides", attr_ints({c.stride})},
                 {"dilations", attr_ints({c.dilation})},
                 {"pads", attr_ints({c.pad, c.kernel / 2})}});
}

// No step of `kernel` is oneDNN's gemm-based convolution or a reference implementation.
void expect_no_gemm_conv(const Kernel& kernel, const std::string& what) {
  for (const std::string& impl : steps_of(kernel).implementations) {
    EXPECT_EQ(impl.find("gemm"), std::string::npos) << what << ": " << impl;
    EXPECT_FALSE(onednn::is_reference_impl(impl)) << what << ": " << impl;
  }
}

TEST(OnednnConv1d, GroupedAndDepthwiseRunAs2dLikeReference) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 12; ++trial) {
    Conv1d c;
    c.channels = 16 * pick(rng, 1, 4);
    // Undilated depthwise: oneDNN has a jit kernel for its 2-D form (brdgmm) and none for its
    // 1-D one. Every third trial groups of 16 channels, and trials 4k+3 dilated or of 2
    // channels a group: lifted only where oneDNN has a jit kernel for the 2-D form alone,
    // computed like reference either way.
    const bool jit_form = trial % 4 != 3 && trial % 3 != 0;
    c.group = trial % 3 == 0 ? c.channels / (trial % 4 != 3 ? 16 : 2) : c.channels;
    c.kernel = std::vector<int64_t>{1, 3, 5, 15, 31}[pick(rng, 0, 4)];
    c.stride = pick(rng, 1, 2);
    c.dilation = trial % 4 != 3 ? 1 : 2;
    c.pad = pick(rng, 0, c.kernel / 2);
    const Shape xs = {pick(rng, 1, 2), c.channels, pick(rng, 40, 120)};
    GraphBuilder b;
    ValueId y = conv1d(b, b.input("x", DType::kFloat32, xs), c, "dw");
    if (trial % 2) y = b.add1("Mul", {y, b.add1("Sigmoid", {y})});  // SiLU after it
    b.output(y);
    const Graph g = b.finish();
    const std::string what =
        fmt::format("trial {}: x {} group {} kernel {} stride {} dilation {} pad {}", trial,
                    shape_to_string(xs), c.group, c.kernel, c.stride, c.dilation, c.pad);
    // Whether oneDNN has a jit kernel for the others' 2-D form depends on their sizes.
    const bool lifted = onednn::conv1d_faster_as_2d(g, g.node(0));
    if (jit_form) EXPECT_TRUE(lifted) << what;
    for (Backend* backend : {&onednn(), &onednn_graph()}) {
      std::unique_ptr<Kernel> kernel = backend->compile(g, testing::test_options());
      if (lifted) expect_no_gemm_conv(*kernel, what);
      testing::expect_like_reference(*backend, g, what);
    }
  }
}

TEST(OnednnConv1d, ConformerConvolutionModuleInARegionLikeReference) {
  // Pointwise conv to 2C, GLU (Split, Sigmoid, Mul), depthwise conv of kernel 31, SiLU,
  // pointwise conv back, read by a residual Add: the depthwise conv runs as 2-D, the rest
  // in the region as before.
  for (int threads : {1, 2}) {
    GraphBuilder b;
    const int64_t c = 32;
    ValueId x = b.input("x", DType::kFloat32, {1, c, 50});
    ValueId wide = b.add1("Conv", {x, b.random_constant("pw1", {2 * c, c, 1})});
    std::vector<ValueId> halves =
        b.add("Split", {wide, b.constant("sizes", Tensor::from_vector<int64_t>({2}, {c, c}))},
              {{"axis", attr_i(1)}}, 2);
    ValueId glu = b.add1("Mul", {halves[0], b.add1("Sigmoid", {halves[1]})});
    Conv1d dw;
    dw.channels = dw.group = c;
    dw.kernel = 31;
    dw.pad = 15;
    ValueId h = conv1d(b, glu, dw, "dw");
    h = b.add1("Mul", {h, b.add1("Sigmoid", {h})});
    h = b.add1("Conv", {h, b.random_constant("pw2", {c, c, 1})});
    b.output(b.add1("Add", {x, h}));
    const std::string what = fmt::format("threads {}", threads);
    use_threads_on_this_thread(threads);
    std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
    expect_no_gemm_conv(*kernel, what);
    testing::expect_like_reference(onednn_graph(), b.graph(), what);
  }
}

TEST(OnednnConv1d, GroupOneAndTwoDimensionalConvsKeepTheirForm) {
  GraphBuilder b;
  Conv1d dense;
  dense.group = 1;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 30});
  b.output(conv1d(b, x, dense, "c"));
  const Graph g = b.finish();
  EXPECT_FALSE(onednn::conv1d_faster_as_2d(g, g.node(0)));
  EXPECT_EQ(onednn::lift_1d_convs_to_2d(g).num_nodes(), 1u);
}

}  // namespace
}  // namespace collage
