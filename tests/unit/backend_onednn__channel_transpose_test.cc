// Collage's channel transpose (channel_transpose.h), the layout copy a oneDNN program makes of
// a 2-4 channel image between channel-first and channels-last: it writes exactly what oneDNN's
// reorder writes, on random shapes, batches and ranks, both ways, on a team and in a lane;
// it takes no other pair of layouts; and a region reading an RGB image runs it instead of a
// reorder and computes what the reference backend does.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/onednn/channel_transpose.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/region_kernel.h"
#include "collage/tensor.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

tag channel_first(size_t rank) {
  return rank == 3 ? tag::ncw : rank == 4 ? tag::nchw : tag::ncdhw;
}
tag channels_last(size_t rank) {
  return rank == 3 ? tag::nwc : rank == 4 ? tag::nhwc : tag::ndhwc;
}

// oneDNN's reorder of `data` from `from` to `to`.
std::vector<float> onednn_reorder(const std::vector<float>& data, const dnnl::memory::desc& from,
                                  const dnnl::memory::desc& to) {
  std::vector<float> in = data, out(data.size());
  dnnl::memory src(from, cpu_engine(), in.data()), dst(to, cpu_engine(), out.data());
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  return out;
}

TEST(ChannelTranspose, WritesWhatOnednnsReorderWritesBothWays) {
  testing::WithLanes lanes("off");  // a team of two threads
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t rank = 3 + rng() % 3;
    dnnl::memory::dims dims = {1 + static_cast<int64_t>(rng() % 3),
                               2 + static_cast<int64_t>(rng() % (kMaxTransposedChannels - 1))};
    // Up to ~3000 pixels: one work item and several, ends not on an item's boundary.
    for (size_t i = 2; i < rank; ++i) dims.push_back(1 + rng() % (rank == 5 ? 14 : 55));
    const bool to_last = trial % 2 == 0;
    const dnnl::memory::desc first(dims, dt::f32, channel_first(rank)),
        last(dims, dt::f32, channels_last(rank));
    const dnnl::memory::desc& from = to_last ? first : last;
    const dnnl::memory::desc& to = to_last ? last : first;
    SCOPED_TRACE(::testing::Message() << "dims " << ::testing::PrintToString(dims)
                                      << (to_last ? " to channels-last" : " to channel-first"));
    std::vector<float> data(from.get_size() / sizeof(float));
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    for (float& x : data) x = value(rng);
    const std::vector<float> want = onednn_reorder(data, from, to);

    // Through a program: its copy is the channel transpose, reported as a reorder.
    Program p;
    dnnl::memory in = p.input(0, from), out = p.output(0, to);
    p.copy(in, out);
    p.finalize();
    ASSERT_EQ(p.implementations(), std::vector<std::string>{"collage:channel_transpose"});
    ASSERT_EQ(p.step_kinds(), std::vector<dnnl::primitive::kind>{dnnl::primitive::kind::reorder});
    const Shape shape(dims.begin(), dims.end());
    Tensor input = Tensor::from_vector<float>(shape, data);
    Tensor output(DType::kFloat32, shape);
    p.run(std::span<const Tensor>(&input, 1), std::span<const Tensor>(&output, 1));
    ASSERT_EQ(std::memcmp(output.data<float>(), want.data(), want.size() * sizeof(float)), 0);

    // In a lane of a concurrent stage (inside a parallel region): on its own thread.
    const std::optional<ChannelTranspose> transpose = channel_transpose(from, to);
    ASSERT_TRUE(transpose.has_value());
    std::vector<float> in_lane(want.size(), 0.0f);
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 1) (*transpose)(data.data(), in_lane.data());
    ASSERT_EQ(in_lane, want);
  }
}

TEST(ChannelTranspose, TakesOnlyDenseFewChannelImagesBetweenTheTwoOrders) {
  const dnnl::memory::dims dims = {1, 3, 8, 8};
  const dnnl::memory::desc nchw(dims, dt::f32, tag::nchw), nhwc(dims, dt::f32, tag::nhwc);
  EXPECT_TRUE(channel_transpose(nchw, nhwc).has_value());
  EXPECT_TRUE(channel_transpose(nhwc, nchw).has_value());
  // The same order both sides: a plain copy, oneDNN's; and so is one channel either way.
  EXPECT_FALSE(channel_transpose(nchw, nchw).has_value());
  const dnnl::memory::dims gray = {1, 1, 8, 8};
  EXPECT_FALSE(channel_transpose(dnnl::memory::desc(gray, dt::f32, tag::nchw),
                                 dnnl::memory::desc(gray, dt::f32, tag::nhwc))
                   .has_value());
  // Five channels and more: oneDNN's reorder is the faster there.
  const dnnl::memory::dims wide = {1, kMaxTransposedChannels + 1, 8, 8};
  EXPECT_FALSE(channel_transpose(dnnl::memory::desc(wide, dt::f32, tag::nchw),
                                 dnnl::memory::desc(wide, dt::f32, tag::nhwc))
                   .has_value());
  // Other layouts, types, dims, a view at an offset.
  EXPECT_FALSE(channel_transpose(nchw, dnnl::memory::desc(dims, dt::f32, tag::nChw16c)));
  EXPECT_FALSE(channel_transpose(nchw, dnnl::memory::desc(dims, dt::f32, tag::acbd)));
  EXPECT_FALSE(channel_transpose(dnnl::memory::desc(dims, dt::bf16, tag::nchw),
                                 dnnl::memory::desc(dims, dt::bf16, tag::nhwc)));
  EXPECT_FALSE(channel_transpose(nchw, dnnl::memory::desc({1, 3, 8, 9}, dt::f32, tag::nhwc)));
  const dnnl::memory::desc bigger({1, 3, 8, 16}, dt::f32, tag::nhwc);
  EXPECT_FALSE(channel_transpose(nchw, bigger.submemory_desc(dims, {0, 0, 0, 8})));
  const dnnl::memory::desc flat({3, 64}, dt::f32, tag::ab);
  EXPECT_FALSE(channel_transpose(flat, dnnl::memory::desc({3, 64}, dt::f32, tag::ba)));
}

TEST(ChannelTranspose, ARegionReadingAnRgbImageRunsItAndComputesTheSame) {
  testing::GraphBuilder b;
  ValueId x = b.input("image", DType::kFloat32, {1, 3, 37, 29});
  ValueId y =
      b.add1("Conv", {x, b.random_constant("w", {32, 3, 3, 3}, 0.3f)},
             {{"pads", testing::attr_ints({1, 1, 1, 1})}, {"strides", testing::attr_ints({2, 2})}});
  y = b.add1("Relu", {y});
  y = b.add1("Conv", {y, b.random_constant("w2", {32, 32, 1, 1}, 0.2f)});
  b.output(y);
  std::unique_ptr<Kernel> kernel = compile_region(b.graph());
  const testing::ProgramSteps steps = testing::steps_of(*kernel);
  EXPECT_EQ(steps.count("collage:channel_transpose"), 1)
      << ::testing::PrintToString(steps.implementations);
  testing::expect_no_reference_primitive(*kernel, "rgb region");
  testing::expect_like_reference(testing::onednn_graph(), b.graph(), "rgb region");
}

}  // namespace
}  // namespace collage::onednn
