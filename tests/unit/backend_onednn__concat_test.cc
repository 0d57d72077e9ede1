// Concatenations in onednn-graph regions that move no data: done in place
// (concat_in_place.h: which ones the plan takes, and that densely connected blocks computed
// that way match the reference with no concat primitive and no copy per concatenated input),
// or never made, split into the convolutions reading them (concat_into_convs.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include <fmt/format.h>

#include "backend_test_util.h"
#include "backends/onednn/concat_in_place.h"
#include "backends/onednn/concat_into_convs.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/region_kernel.h"
#include "collage/backend.h"
#include "graph_builder.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::batch_norm;
using testing::GraphBuilder;
using testing::pick;

ValueId conv(GraphBuilder& b, ValueId x, int64_t in, int64_t out, int64_t k) {
  const int64_t p = k / 2;
  return b.add1("Conv", {x, b.random_constant("w", {out, in, k, k}, 0.2f)},
                {{"pads", attr_ints({p, p, p, p})}});
}

// A DenseNet block as torchvision writes it: layer i reads the concatenation of the block's
// input and every earlier layer's output (BN, ReLU, 1x1 conv, BN, ReLU, 3x3 conv). Returns
// the last concatenation.
ValueId dense_block(GraphBuilder& b, ValueId x, int64_t channels, int64_t growth, int layers) {
  std::vector<ValueId> features = {x};
  ValueId cat = x;
  for (int i = 0; i < layers; ++i) {
    const int64_t in = channels + growth * i;
    ValueId h = b.add1("Relu", {batch_norm(b, cat, in)});
    h = b.add1("Relu", {batch_norm(b, conv(b, h, in, 2 * growth, 1), 2 * growth)});
    features.push_back(conv(b, h, 2 * growth, growth, 3));
    cat = b.add1("Concat", features, {{"axis", attr_i(1)}});
  }
  return cat;
}

TEST(OnednnConcatInPlace, PlanTakesChainsOfConcatenationsOnly) {
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Relu", {dense_block(b, conv(b, x, 16, 32, 3), 32, 16, 3)}));
    const onednn::ConcatPlan plan = onednn::plan_concats_in_place(b.graph());
    EXPECT_EQ(plan.roots.size(), 1u);
    EXPECT_EQ(plan.in_place, 3);
    EXPECT_EQ(plan.homes.size(), 4u + 3u);  // the block's input, 3 layers, 3 concatenations
  }
  {
    // The last concatenation is the region's output (bound row-major): the chain before it.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(dense_block(b, conv(b, x, 16, 32, 3), 32, 16, 3));
    EXPECT_EQ(onednn::plan_concats_in_place(b.graph()).in_place, 2);
  }
  {
    // Growth 12: slices that split channel blocks are not contiguous.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    b.output(b.add1("Relu", {dense_block(b, conv(b, x, 16, 32, 3), 32, 12, 3)}));
    EXPECT_TRUE(onednn::plan_concats_in_place(b.graph()).roots.empty());
  }
  {
    // One concatenation (an inception block): kept a copy (measured slower in place).
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
    ValueId cat =
        b.add1("Concat", {conv(b, x, 16, 32, 1), conv(b, x, 16, 16, 3)}, {{"axis", attr_i(1)}});
    b.output(b.add1("Relu", {cat}));
    EXPECT_TRUE(onednn::plan_concats_in_place(b.graph()).roots.empty());
    // Batch 2: the slices are not contiguous either.
    GraphBuilder b2;
    ValueId x2 = b2.input("x", DType::kFloat32, {2, 16, 8, 8});
    b2.output(b2.add1("Relu", {dense_block(b2, conv(b2, x2, 16, 32, 3), 32, 16, 3)}));
    EXPECT_TRUE(onednn::plan_concats_in_place(b2.graph()).roots.empty());
  }
}

// Two random dense blocks with a transition between them, as one region: like the reference,
// no reference primitive, no concat primitive, and only the few reorders of the block inputs
// into their slices (a copy per concatenated input would be one reorder per input and layer).
TEST(OnednnConcatInPlace, DenseBlocksMatchReferenceWithoutCopies) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t s = pick(rng, 5, 13), growth = 16 * pick(rng, 1, 2);
    const int layers = static_cast<int>(pick(rng, 2, 5));
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 3, s, s});
    ValueId cat = dense_block(b, b.add1("Relu", {conv(b, x, 3, 32, 3)}), 32, growth, layers);
    const int64_t c = 32 + growth * layers;
    ValueId t = conv(b, b.add1("Relu", {batch_norm(b, cat, c)}), c, 32, 1);
    t = b.add1("AveragePool", {t},
               {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});
    cat = dense_block(b, t, 32, growth, layers);
    b.output(b.add1("GlobalAveragePool", {cat}));
    const std::string what =
        fmt::format("dense blocks {}x{}, growth {}, {} layers", s, s, growth, layers);
    SCOPED_TRACE(what);
    auto [got, want] = testing::run_backend_and_reference(
        BackendRegistry::global().get("onednn-graph"), b.graph());
    EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{1e-4, 1e-4}));

    std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
    testing::expect_no_reference_primitive(*kernel, what);
    const auto& program = dynamic_cast<const onednn::ProgramKernel&>(*kernel).program();
    const std::vector<dnnl::primitive::kind> kinds = program.step_kinds();
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), dnnl::primitive::kind::concat), 0);
    // At most the two block inputs into their slices, the region input and output.
    EXPECT_LE(std::count(kinds.begin(), kinds.end(), dnnl::primitive::kind::reorder), 4)
        << layers << " layers";
  }
}

std::ptrdiff_t count_op(const Graph& g, const std::string& op) {
  return std::count_if(g.nodes().begin(), g.nodes().end(),
                       [&](const Node& n) { return n.op_type == op; });
}

TEST(OnednnConcatIntoConvs, ConcatenationsReadByConvsAloneAreNeverMade) {
  // SqueezeNet's fire modules and more: two branches (1x1 and 3x3 convs, Relu) concatenated,
  // read by a 1x1 and a padded 3x3 conv (with their own tails), or pooled first (max and
  // average, strided, ceil mode) and then read by a conv. Randomized channels (whole 16-channel
  // blocks), sizes and batch: the region makes no concat and adds the parts' convs as sum
  // post-ops (no binary primitive), and matches the reference.
  std::mt19937 rng(17);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t n = pick(rng, 1, 2), s = pick(rng, 5, 17), parts = 2;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, 16, s, s});
    ValueId squeeze = b.add1("Relu", {conv(b, x, 16, 16, 1)});
    std::vector<ValueId> branches;
    int64_t channels = 0;
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t c = 16 * pick(rng, 1, 4);
      branches.push_back(b.add1("Relu", {conv(b, squeeze, 16, c, p % 2 == 0 ? 1 : 3)}));
      channels += c;
    }
    ValueId cat = b.add1("Concat", branches, {{"axis", attr_i(1)}});
    const bool pooled = trial % 2 == 1;
    if (pooled) {
      const char* pool = trial % 4 == 1 ? "MaxPool" : "AveragePool";
      cat = b.add1(pool, {cat},
                   {{"kernel_shape", attr_ints({3, 3})},
                    {"strides", attr_ints({2, 2})},
                    {"ceil_mode", attr_i(1)}});
      b.output(b.add1("Relu", {conv(b, cat, channels, 24, 1)}));
    } else {
      std::vector<ValueId> in = {cat, b.random_constant("w", {24, channels, 1, 1}, 0.2f),
                                 b.random_constant("b", {24})};
      b.output(b.add1("Relu", {b.add1("Conv", in)}));
      b.output(conv(b, cat, channels, 8, 3));
    }
    const std::string what = fmt::format("trial {}: batch {} {}x{}, {} parts, {} channels{}", trial,
                                         n, s, s, parts, channels, pooled ? ", pooled" : "");
    SCOPED_TRACE(what);
    const Graph split = onednn::split_concats_into_convs(b.graph());
    EXPECT_EQ(count_op(split, "Concat"), 0);
    std::unique_ptr<Kernel> kernel = onednn::compile_region(b.graph());
    EXPECT_EQ(testing::steps_of(*kernel).count(dnnl::primitive::kind::concat), 0);
    EXPECT_EQ(testing::steps_of(*kernel).count(dnnl::primitive::kind::binary), 0);
    testing::expect_no_reference_primitive(*kernel, what);
    testing::expect_like_reference(BackendRegistry::global().get("onednn-graph"), b.graph(), what);
  }
}

TEST(OnednnConcatIntoConvs, OtherConcatenationsStay) {
  // Read by a conv and by something else (a Relu; GoogLeNet's pool beside its convs), a part
  // off the 16-channel blocks, a region output, or three parts: the concatenation is made,
  // as before.
  for (int form = 0; form < 4; ++form) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 6, 6});
    ValueId a = conv(b, x, 16, 32, 1), c = conv(b, x, 16, form == 1 ? 24 : 32, 3);
    std::vector<ValueId> parts = {a, c};
    if (form == 3) parts.push_back(conv(b, x, 16, 16, 1));
    ValueId cat = b.add1("Concat", parts, {{"axis", attr_i(1)}});
    const int64_t channels = form == 1 ? 56 : form == 3 ? 80 : 64;
    b.output(conv(b, cat, channels, 16, 1));
    if (form == 0) b.output(b.add1("Relu", {cat}));
    if (form == 2) b.output(cat);
    SCOPED_TRACE(form);
    EXPECT_EQ(count_op(onednn::split_concats_into_convs(b.graph()), "Concat"), 1);
    testing::expect_like_reference(BackendRegistry::global().get("onednn-graph"), b.graph(),
                                   "concat kept");
  }
}

}  // namespace
}  // namespace collage
