// The onednn-graph backend against the reference backend: regions of several groups whose
// values pass between primitives in blocked layouts, values that are both read inside and
// produced for outside, whole tiny models as one region, and what it must refuse.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "backend_test_util.h"
#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/masked_select.h"
#include "backends/onednn/region_kernel.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "models/families.h"
#include "onednn_test_util.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::outputs_match;
using testing::pick;
using testing::run_backend_and_reference;

Backend& onednn_graph() {
  return BackendRegistry::global().get("onednn-graph");
}

// The whole graph compiled as one region, within 1e-4 (relative) of the reference.
void expect_like_reference(const Graph& g, const std::string& what) {
  SCOPED_TRACE(what);
  auto [got, want] = run_backend_and_reference(onednn_graph(), g);
  EXPECT_TRUE(outputs_match(got, want, Tolerance{1e-4, 1e-4})) << what;
}

ValueId conv(GraphBuilder& b, ValueId x, int64_t in, int64_t out, int64_t k, int64_t stride = 1) {
  const int64_t p = k / 2;
  return b.add1("Conv",
                {x, b.random_constant("w", {out, in, k, k}, 0.2f), b.random_constant("b", {out})},
                {{"pads", attr_ints({p, p, p, p})}, {"strides", attr_ints({stride, stride})}});
}

// conv -> relu -> conv -> add(x) -> relu over `x` of `channels` channels.
ValueId residual_block(GraphBuilder& b, ValueId x, int64_t channels) {
  ValueId y = b.add1("Relu", {conv(b, x, channels, channels, 3)});
  return b.add1("Relu", {b.add1("Add", {conv(b, y, channels, channels, 3), x})});
}

TEST(OnednnGraphBackend, Identity) {
  Backend& b = onednn_graph();
  EXPECT_EQ(b.kind(), BackendKind::kGraphLevel);
  EXPECT_EQ(b.version(), BackendRegistry::global().get("onednn").version());
  EXPECT_EQ(b.thread_model(), "OpenMP");
}

TEST(OnednnGraphBackend, ResidualBlock) {
  // conv -> relu -> conv -> add(x) -> relu: the residual Add is a sum post-op reading a
  // region input, the conv-to-conv value stays blocked.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 32, 14, 14});
  b.output(residual_block(b, x, 32));
  expect_like_reference(b.graph(), "residual block");
}

TEST(OnednnGraphBackend, ConvMaxPoolConv) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 3, 20, 20});
  ValueId y = b.add1("Relu", {conv(b, x, 3, 16, 7, 2)});
  y = b.add1("MaxPool", {y},
             {{"kernel_shape", attr_ints({3, 3})},
              {"strides", attr_ints({2, 2})},
              {"pads", attr_ints({1, 1, 1, 1})}});
  y = conv(b, y, 16, 32, 1);
  b.output(b.add1("GlobalAveragePool", {y}));
  expect_like_reference(b.graph(), "conv -> maxpool -> conv -> gap");
}

TEST(OnednnGraphBackend, IntermediateValueIsAlsoAnOutput) {
  // The first relu's output leaves the region and feeds the second conv: it must be
  // written to its plain output and still be read inside (blocked).
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 10, 10});
  ValueId mid = b.add1("Relu", {conv(b, x, 16, 32, 3)});
  ValueId y = b.add1("Clip", {conv(b, mid, 32, 16, 3), b.constant("lo", Tensor::scalar(0.0f)),
                              b.constant("hi", Tensor::scalar(6.0f))});
  b.output(y);
  b.output(mid);
  expect_like_reference(b.graph(), "intermediate output");
}

// A blocked value flattened into a graph output (a heatmap going to a TopK in another
// kernel) is reordered straight into the output: one reorder there, not a reorder into a
// buffer and a copy. Also when the flattened value is read inside too (a Sigmoid of it, an
// output of its own), and when the blocked value itself is an output as well.
TEST(OnednnGraphBackend, BlockedValueFlattenedIntoAnOutputIsOneReorder) {
  for (int variant = 0; variant < 3; ++variant) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 9, 11});
    ValueId heat = b.add1("Relu", {conv(b, x, 16, 32, 3)});
    ValueId flat = b.add1("Flatten", {heat}, {{"axis", attr_i(1)}});
    b.output(flat);
    if (variant == 1) b.output(b.add1("Sigmoid", {flat}));
    if (variant == 2) b.output(heat);
    const std::string what = "flattened into an output, variant " + std::to_string(variant);
    expect_like_reference(b.graph(), what);
    const testing::ProgramSteps steps =
        testing::steps_of(*onednn_graph().compile(b.graph(), testing::test_options()));
    // The input's reorder into the conv's layout, the heatmap's into the output(s).
    EXPECT_EQ(steps.count(dnnl::primitive::kind::reorder), variant == 2 ? 3 : 2)
        << what << ": " << ::testing::PrintToString(steps.implementations);
  }
}

TEST(OnednnGraphBackend, BranchesEltwiseAndGemm) {
  // Two branches off one value (each reads it blocked), a binary Add of two computed values,
  // a per-channel Mul, then Flatten -> Gemm reading the pooled value row-major.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 12, 12});
  ValueId s = conv(b, x, 8, 16, 3);
  ValueId l = b.add1("Sigmoid", {conv(b, s, 16, 16, 1)});
  ValueId r = b.add1("Relu", {conv(b, s, 16, 16, 3)});
  ValueId sum = b.add1("Add", {l, r});
  ValueId scaled = b.add1("Mul", {sum, b.random_constant("scale", {1, 16, 1, 1})});
  ValueId pooled = b.add1("AveragePool", {scaled},
                          {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});
  ValueId gap = b.add1("GlobalAveragePool", {pooled});
  ValueId flat = b.add1("Flatten", {gap}, {{"axis", attr_i(1)}});
  b.output(b.add1("Gemm",
                  {flat, b.random_constant("fc_w", {10, 16}), b.random_constant("fc_b", {10})},
                  {{"transB", attr_i(1)}}));
  expect_like_reference(b.graph(), "branches, eltwise, gemm");
}

TEST(OnednnGraphBackend, BatchNormInRegion) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 9, 9});
  ValueId y = conv(b, x, 16, 16, 3);
  Tensor var(DType::kFloat32, {16});
  for (int i = 0; i < 16; ++i) var.data<float>()[i] = 0.5f + 0.1f * i;
  y = b.add1("BatchNormalization", {y, b.random_constant("g", {16}), b.random_constant("bt", {16}),
                                    b.random_constant("m", {16}), b.constant("v", var)});
  b.output(conv(b, b.add1("Relu", {y}), 16, 8, 1));
  expect_like_reference(b.graph(), "conv -> bn -> relu -> conv");
}

// Inference BatchNorm of any channel count, alone (plain layout) and after a conv in a region
// (channels-last): like reference, and never on oneDNN 2.6's non-jit batch normalization
// (its nspc kernel for 22 channels took 0.85 ms at 56x56 in NASNet-A-Mobile): where that is
// what oneDNN offers, the BatchNorm is a binary Mul with an Add post-op (norm_kernel.cc).
TEST(OnednnGraphBackend, BatchNormOfAnyChannelCountRunsJit) {
  for (int64_t c : {6, 16, 22, 40})
    for (int relu = 0; relu < 2; ++relu)
      for (int after_conv = 0; after_conv < 2; ++after_conv) {
        const std::string what = fmt::format("{} channels{}{}", c, relu ? ", relu" : "",
                                             after_conv ? ", after a conv" : "");
        GraphBuilder b;
        ValueId y = b.input("x", DType::kFloat32, {1, c, 11, 9});
        if (after_conv) y = conv(b, y, c, c, 3);
        Tensor var(DType::kFloat32, {c});
        for (int64_t i = 0; i < c; ++i) var.data<float>()[i] = 0.5f + 0.05f * static_cast<float>(i);
        y = b.add1("BatchNormalization",
                   {y, b.random_constant("g", {c}), b.random_constant("bt", {c}),
                    b.random_constant("m", {c}), b.constant("v", var)},
                   {{"epsilon", testing::attr_f(1e-3f)}});
        if (relu) y = b.add1("Relu", {y});
        b.output(y);
        // A conv and the BatchNorm after it: one region; the op-level backend takes the
        // BatchNorm alone.
        for (const char* name : {"onednn-graph", "onednn"}) {
          if (after_conv && std::string(name) == "onednn") continue;
          Backend& backend = BackendRegistry::global().get(name);
          testing::expect_fast_and_like_reference(backend, b.graph(), what + " on " + name);
          const testing::ProgramSteps steps =
              testing::steps_of(*backend.compile(b.graph(), testing::test_options()));
          for (const std::string& impl : steps.implementations)
            EXPECT_TRUE(impl.find("bnorm") == std::string::npos || impl.find("jit") == 0 ||
                        impl.find("bnorm_jit") == 0 || impl.find("bnorm_tbb_jit") == 0)
                << what << " on " << name << ": " << impl;
        }
      }
}

TEST(OnednnGraphBackend, WholeTinyResNet) {
  Graph g = models::resnet_tiny(1);
  expect_like_reference(g, "resnet_tiny as one region");
}

TEST(OnednnGraphBackend, RefusesRegionWithNodeItCantTake) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 6, 6});
  ValueId y = b.add1("Relu", {conv(b, x, 8, 8, 3)});
  b.output(b.add1("Hardmax", {y}));  // no primitive and no step of collage's for it
  testing::expect_unsupported(onednn_graph(), b.graph(), "a region with a Hardmax", "Hardmax");
}

TEST(OnednnGraphBackend, ProposesRegionsOfSeveralGroups) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 8, 8});
  b.output(residual_block(b, x, 16));
  size_t largest = 0;
  for (const Match& m : find_matches(b.graph(), onednn_graph()))
    largest = std::max(largest, m.nodes.size());
  EXPECT_EQ(largest, b.graph().num_nodes());
}

// ---- The glue ops inside a region (no holes): each checked against reference on shapes
// drawn at random, channel counts on and off oneDNN's 8/16-channel blocks.

ValueId ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const Shape shape = {static_cast<int64_t>(v.size())};
  return b.constant(name, Tensor::from_vector(shape, v));
}

// Channel counts a test draws: half of them multiples of 16 (blocked concat/slices stay in
// the blocked layout), half not.
int64_t channels(std::mt19937& rng) {
  return pick(rng, 0, 1) ? 16 * pick(rng, 1, 3) : pick(rng, 3, 40);
}

ValueId conv1x1(GraphBuilder& b, ValueId x, int64_t in, int64_t out) {
  return b.add1("Relu", {conv(b, x, in, out, 1)});
}

TEST(OnednnGraphBackend, ConcatOfBranchesInRegion) {
  std::mt19937 rng(15);
  for (int trial = 0; trial < 6; ++trial) {
    GraphBuilder b;
    const int64_t c = channels(rng), hw = pick(rng, 5, 17);
    ValueId x = b.input("x", DType::kFloat32, {1, c, hw, hw});
    std::vector<ValueId> branches;
    int64_t total = 0;
    const int64_t n = pick(rng, 2, 4);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t out = channels(rng);
      branches.push_back(i == n - 1 ? b.add1("MaxPool", {x},
                                             {{"kernel_shape", attr_ints({3, 3})},
                                              {"pads", attr_ints({1, 1, 1, 1})}})
                                    : conv1x1(b, x, c, out));
      total += i == n - 1 ? c : out;
    }
    ValueId cat = b.add1("Concat", branches, {{"axis", attr_i(1)}});
    b.output(conv1x1(b, cat, total, 8));
    if (trial % 2) b.output(cat);  // the concatenation leaves the region too
    expect_like_reference(
        b.graph(), "concat of " + std::to_string(n) + " branches, trial " + std::to_string(trial));
  }
}

// Broadcasts oneDNN 2.6's binary primitive loops over in its reference kernel in the shape
// they come in, run jit over merged dimensions: a normalization over the last axis of a 4-D
// tensor (Swin-T's LayerNorm pieces: 18 ms per Sub there, 0.1 ms merged), its per-channel
// affine as post-ops, and a 5-D attention-mask Add.
TEST(OnednnGraphBackend, BroadcastsRunJitOverMergedDimensions) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 14, 14, 32});
  ValueId mean = b.input("mean", DType::kFloat32, {1, 14, 14, 1});
  ValueId sd = b.input("sd", DType::kFloat32, {1, 14, 14, 1});
  ValueId norm = b.add1("Div", {b.add1("Sub", {x, mean}), sd});
  b.output(b.add1("Add", {b.add1("Mul", {norm, b.random_constant("gamma", {32})}),
                          b.random_constant("beta", {32})}));
  ValueId scores = b.input("scores", DType::kFloat32, {1, 8, 3, 7, 7});
  b.output(b.add1("Relu", {b.add1("Add", {scores, b.random_constant("mask", {1, 8, 1, 7, 7})})}));
  const Graph& g = b.graph();
  expect_like_reference(g, "normalization over the last axis, a 5-D mask");
  testing::expect_no_reference_primitive(*onednn::compile_region(g), "region", 3);
}

// A style-transfer residual block (conv, instance norm, Relu, conv, instance norm, Add) and
// an old-style stem (conv, Relu, LRN, pool) each one region, in blocked layouts, with no
// primitive on oneDNN's reference loops.
TEST(OnednnGraphBackend, InstanceNormAndLrnInsideRegions) {
  auto conv = [](GraphBuilder& b, ValueId v, int64_t cin, int64_t cout, const std::string& name) {
    return b.add1("Conv",
                  {v, b.random_constant(name + "_w", {cout, cin, 3, 3}),
                   b.random_constant(name + "_b", {cout})},
                  {{"pads", attr_ints({1, 1, 1, 1})}});
  };
  auto instance_norm = [](GraphBuilder& b, ValueId v, int64_t c, const std::string& name) {
    return b.add1("InstanceNormalization", {v, b.random_constant(name + "_scale", {c}),
                                            b.random_constant(name + "_bias", {c})});
  };
  GraphBuilder style;
  ValueId x = style.input("x", DType::kFloat32, {1, 32, 12, 12});
  ValueId h = style.add1("Relu", {instance_norm(style, conv(style, x, 32, 32, "c1"), 32, "n1")});
  style.output(
      style.add1("Add", {instance_norm(style, conv(style, h, 32, 32, "c2"), 32, "n2"), x}));
  GraphBuilder stem;
  ValueId image = stem.input("image", DType::kFloat32, {1, 3, 20, 20});
  ValueId lrn = stem.add1("LRN", {stem.add1("Relu", {conv(stem, image, 3, 16, "c")})},
                          {{"size", attr_i(5)}, {"alpha", testing::attr_f(1e-2f)}});
  stem.output(stem.add1("MaxPool", {lrn},
                        {{"kernel_shape", attr_ints({3, 3})}, {"strides", attr_ints({2, 2})}}));
  for (GraphBuilder* b : {&style, &stem}) {
    const Graph& g = b->graph();
    expect_like_reference(g, "region");
    testing::expect_no_reference_primitive(*onednn::compile_region(g), "region");
  }
}

TEST(OnednnGraphBackend, ConcatOnOtherAxesAndOfRegionInputs) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 5, 6, 7});
  ValueId y = b.input("y", DType::kFloat32, {2, 5, 3, 7});
  ValueId h =
      b.add1("Concat", {x, y, b.random_constant("token", {2, 5, 1, 7}), x}, {{"axis", attr_i(2)}});
  ValueId w = b.add1("Concat", {b.add1("Relu", {x}), x}, {{"axis", attr_i(-1)}});
  b.output(h);
  b.output(w);
  expect_like_reference(b.graph(), "concat on H and W of region inputs and a constant");
}

TEST(OnednnGraphBackend, SplitAndSliceInRegion) {
  std::mt19937 rng(16);
  for (int trial = 0; trial < 6; ++trial) {
    GraphBuilder b;
    const int64_t c = channels(rng) + 2, hw = pick(rng, 6, 14);
    ValueId x = b.input("x", DType::kFloat32, {1, 8, hw, hw});
    ValueId y = conv1x1(b, x, 8, c);
    const int64_t first = pick(rng, 1, c - 1);
    std::vector<ValueId> parts =
        b.add("Split", {y, ints(b, "split", {first, c - first})}, {{"axis", attr_i(1)}}, 2);
    ValueId left = conv1x1(b, parts[0], first, 8);
    ValueId right = conv1x1(b, parts[1], c - first, 8);
    // A spatial window of the sum, and a channel slice of the input.
    const int64_t s0 = pick(rng, 0, hw / 2), s1 = pick(rng, s0 + 1, hw);
    ValueId window = b.add1("Slice", {b.add1("Add", {left, right}), ints(b, "starts", {s0, 1}),
                                      ints(b, "ends", {s1, INT64_MAX}), ints(b, "axes", {2, -1})});
    const int64_t c0 = pick(rng, 0, 6);
    ValueId sliced =
        b.add1("Slice", {x, ints(b, "cs", {c0}), ints(b, "ce", {-1}), ints(b, "ca", {1})});
    b.output(window);
    b.output(conv1x1(b, sliced, 7 - c0, 4));
    expect_like_reference(b.graph(), "split " + std::to_string(first) + "/" +
                                         std::to_string(c - first) + ", trial " +
                                         std::to_string(trial));
  }
}

// MaxViT's attention: qkv = x [1, G, P, D] @ W [D, 3D] + b, then q, k, v cut from its last
// axis (Split, or Slices). The MatMul writes its output with the batch flattened ([G*P, 3D]);
// the cuts must see it as [1, G, P, 3D] (they once took a 2-D sub-memory of it, and oneDNN
// refused the reorder: the whole region failed).
TEST(OnednnGraphBackend, CutsOfABatchedMatMulInRegion) {
  std::mt19937 rng(25);
  for (int trial = 0; trial < 4; ++trial) {
    GraphBuilder b;
    const int64_t g = pick(rng, 2, 9), p = pick(rng, 3, 17), d = 8 * pick(rng, 1, 4);
    ValueId x = b.input("x", DType::kFloat32, {1, g, p, d});
    ValueId qkv = b.add1("Add", {b.add1("MatMul", {x, b.random_constant("w", {d, 3 * d}, 0.2f)}),
                                 b.random_constant("b", {3 * d})});
    std::vector<ValueId> parts;
    if (trial % 2 == 0) {
      parts = b.add("Split", {qkv, ints(b, "split", {d, d, d})}, {{"axis", attr_i(-1)}}, 3);
    } else {
      for (int64_t i = 0; i < 3; ++i) {
        const std::string at = std::to_string(i);
        parts.push_back(
            b.add1("Slice", {qkv, ints(b, "s" + at, {i * d}), ints(b, "e" + at, {(i + 1) * d}),
                             ints(b, "a" + at, {3})}));
      }
    }
    for (ValueId part : parts)
      b.output(b.add1("Mul", {part, b.constant("k", Tensor::scalar(0.5f))}));
    const Graph& graph = b.graph();
    expect_like_reference(graph, "cuts of a batched MatMul, trial " + std::to_string(trial));
    testing::expect_no_reference_primitive(*onednn::compile_region(graph), "qkv cuts");
  }
}

// Swin's glue: a Slice with steps (PatchMerging's x[:, 0::2, 1::2, :]) and Gathers of one
// constant index (q, k, v = qkv[0], qkv[1], qkv[2]; a 1-element index keeps the axis), in a
// region, each one reorder from a strided view: like reference, no reference primitive.
TEST(OnednnGraphBackend, StridedSlicesAndConstantGathersInRegion) {
  std::mt19937 rng(18);
  for (int trial = 0; trial < 4; ++trial) {
    GraphBuilder b;
    const int64_t hw = 2 * pick(rng, 2, 7), c = pick(rng, 3, 20);
    ValueId x = b.input("x", DType::kFloat32, {1, hw, hw, c});
    ValueId y = b.add1("Relu", {x});
    const int64_t r0 = pick(rng, 0, 1), c0 = pick(rng, 0, 1), step = trial % 2 ? 2 : 3;
    b.output(b.add1("Slice", {y, ints(b, "s", {r0, c0}), ints(b, "e", {INT64_MAX, INT64_MAX}),
                              ints(b, "a", {1, 2}), ints(b, "st", {2, step})}));
    ValueId qkv = b.add1("Relu", {b.input("qkv", DType::kFloat32, {3, 1, 2, hw, c})});
    for (int64_t i = 0; i < 3; ++i)
      b.output(b.add1("Mul", {b.add1("Gather", {qkv, b.constant("i" + std::to_string(i),
                                                                Tensor::scalar<int64_t>(i - 1))}),
                              b.constant("k" + std::to_string(i), Tensor::scalar(0.5f))}));
    b.output(b.add1("Gather", {qkv, ints(b, "one", {hw - 1})}, {{"axis", attr_i(-2)}}));
    const Graph& g = b.graph();
    expect_like_reference(g, "strided slice and gathers, trial " + std::to_string(trial));
    testing::expect_no_reference_primitive(*onednn::compile_region(g), "strided cuts");
  }
}

// Reductions over other axes than the spatial ones stay in the region (oneDNN's reduction
// primitive): CBAM's spatial attention (channel mean and max of a conv's output, joined, a 7x7
// conv, Sigmoid, times the input), a mean over tokens without keepdims, sums over everything
// and over the last axis, a min over two axes. They ran on the fallback before, and cut the region
// around them. A product over tokens too (ReduceProd, the same primitive).
TEST(OnednnGraphBackend, ReductionsOverAnyAxesInRegion) {
  std::mt19937 rng(19);
  for (int trial = 0; trial < 4; ++trial) {
    GraphBuilder b;
    const int64_t c = trial % 2 ? 16 * pick(rng, 1, 3) : pick(rng, 3, 30), hw = pick(rng, 5, 14);
    ValueId x = b.input("x", DType::kFloat32, {pick(rng, 1, 2), c, hw, hw});
    ValueId y = b.add1("Relu", {conv(b, x, c, c, 3)});
    const std::map<std::string, Attribute> over_channels = {{"axes", attr_ints({1})},
                                                            {"keepdims", attr_i(1)}};
    ValueId pooled =
        b.add1("Concat",
               {b.add1("ReduceMean", {y}, over_channels), b.add1("ReduceMax", {y}, over_channels)},
               {{"axis", attr_i(1)}});
    ValueId gate = b.add1("Sigmoid", {conv(b, pooled, 2, 1, 7)});
    b.output(b.add1("Mul", {y, gate}));
    ValueId tokens = b.add1("Relu", {b.input("tokens", DType::kFloat32, {1, hw, c})});
    b.output(b.add1("ReduceMean", {tokens}, {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}}));
    b.output(b.add1("ReduceSum", {tokens}, {{"keepdims", attr_i(0)}}));
    b.output(b.add1("ReduceSum", {tokens, ints(b, "last", {-1})}));  // opset 13+: an input
    b.output(b.add1("ReduceMin", {y}, {{"axes", attr_ints({-1, 1})}}));
    // A product over tokens of values in (0.5, 1.5), so that it neither vanishes nor explodes.
    ValueId near_one = b.add1(
        "Add", {b.add1("Sigmoid", {tokens}), b.constant("half", Tensor::scalar<float>(0.5f))});
    b.output(b.add1("ReduceProd", {near_one}, {{"axes", attr_ints({1})}}));
    const Graph& g = b.graph();
    expect_like_reference(g, "reductions, trial " + std::to_string(trial));
    testing::expect_no_reference_primitive(*onednn::compile_region(g), "reductions");
  }
}

// ShuffleNetV2's unit: concat -> channel shuffle -> chunk in two -> one half convolved.
TEST(OnednnGraphBackend, ChannelShuffleInRegion) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 6; ++trial) {
    GraphBuilder b;
    const int64_t half = pick(rng, 0, 1) ? 16 * pick(rng, 1, 2) : pick(rng, 3, 30);
    const int64_t groups = trial % 3 == 2 ? 4 : 2, c = groups * half, hw = pick(rng, 4, 12);
    ValueId x = b.input("x", DType::kFloat32, {1, c, hw, hw});
    ValueId y = conv1x1(b, x, c, c);
    ValueId split = b.add1("Reshape", {y, ints(b, "s1", {1, groups, half, hw, hw})});
    ValueId t = b.add1("Transpose", {split}, {{"perm", attr_ints({0, 2, 1, 3, 4})}});
    ValueId shuffled = b.add1("Reshape", {t, ints(b, "s2", {1, c, hw, hw})});
    ValueId a =
        b.add1("Slice", {shuffled, ints(b, "a0", {0}), ints(b, "a1", {half}), ints(b, "ax", {1})});
    ValueId rest =
        b.add1("Slice", {shuffled, ints(b, "b0", {half}), ints(b, "b1", {c}), ints(b, "bx", {1})});
    b.output(b.add1("Concat", {conv1x1(b, a, half, half), rest}, {{"axis", attr_i(1)}}));
    expect_like_reference(b.graph(), "shuffle of " + std::to_string(c) + " channels in " +
                                         std::to_string(groups) + " groups");
    // The three nodes are one group of the onednn backend too.
    EXPECT_TRUE(testing::has_match(BackendRegistry::global().get("onednn"), b.graph(),
                                   {split, t, shuffled}))
        << "no channel-shuffle match";
  }
}

TEST(OnednnGraphBackend, TransposeInRegion) {
  std::mt19937 rng(18);
  for (int trial = 0; trial < 4; ++trial) {
    GraphBuilder b;
    const int64_t c = channels(rng), h = pick(rng, 2, 9), w = pick(rng, 2, 9);
    ValueId x = b.input("x", DType::kFloat32, {2, 8, h, w});
    std::vector<int64_t> perm = {0, 1, 2, 3};
    std::shuffle(perm.begin(), perm.end(), rng);
    b.output(b.add1("Sigmoid",
                    {b.add1("Transpose", {conv1x1(b, x, 8, c)}, {{"perm", attr_ints(perm)}})}));
    expect_like_reference(b.graph(), "transpose, trial " + std::to_string(trial));
  }
}

TEST(OnednnGraphBackend, PadsFoldedAndReal) {
  std::mt19937 rng(19);
  for (int trial = 0; trial < 4; ++trial) {
    GraphBuilder b;
    const int64_t c = channels(rng), hw = pick(rng, 5, 12);
    ValueId x = b.input("x", DType::kFloat32, {1, c, hw, hw});
    const int64_t p0 = pick(rng, 0, 2), p1 = pick(rng, 1, 2);
    ValueId y = conv1x1(b, x, c, c);
    // Folded: into a conv and into an average pool (Inception's count_include_pad pool).
    ValueId padded = b.add1("Pad", {y, ints(b, "p", {0, 0, p0, p1, 0, 0, p1, p0})});
    ValueId into_conv = conv(b, padded, c, 8, 3);
    ValueId into_pool = b.add1("AveragePool", {padded}, {{"kernel_shape", attr_ints({3, 3})}});
    // Real: before a max pool (zeros take part in the max), with a value, on channels, and
    // NASNet's one-pixel shift (Pad the end, Slice off the start).
    ValueId before_max =
        b.add1("MaxPool", {b.add1("Pad", {y, ints(b, "q", {0, 0, 1, 1, 0, 0, 1, 1})})},
               {{"kernel_shape", attr_ints({3, 3})}});
    ValueId valued = b.add1(
        "Pad", {y, ints(b, "r", {0, 0, 0, 2, 0, 0, 1, 0}), b.constant("v", Tensor::scalar(-1.5f))});
    ValueId on_channels = b.add1("Pad", {y, ints(b, "c", {0, 3, 0, 0, 0, 1, 0, 0})});
    ValueId shifted = b.add1(
        "Slice",
        {b.add1("Pad", {b.add1("Relu", {y}), ints(b, "s", {0, 0, 0, 0, 0, 0, 1, 1})}),
         ints(b, "st", {1, 1}), ints(b, "en", {INT64_MAX, INT64_MAX}), ints(b, "ax", {2, 3})});
    for (ValueId out : {into_conv, into_pool, before_max, valued, on_channels})
      b.output(b.add1("Relu", {out}));
    b.output(b.add1("AveragePool", {shifted},
                    {{"kernel_shape", attr_ints({1, 1})}, {"strides", attr_ints({2, 2})}}));
    expect_like_reference(b.graph(), "pads, trial " + std::to_string(trial));
  }
}

// Every pooling form a CNN exports, on a blocked (region) source: ceil mode, padding
// counted or not, asymmetric pads, strides, dilations (max), global pools.
TEST(OnednnGraphBackend, PoolingFormsInRegion) {
  std::mt19937 rng(20);
  for (int trial = 0; trial < 16; ++trial) {
    GraphBuilder b;
    const int64_t c = channels(rng), h = pick(rng, 5, 14), w = pick(rng, 5, 14);
    ValueId x = b.input("x", DType::kFloat32, {1, 8, h, w});
    ValueId y = conv1x1(b, x, 8, c);
    const bool is_max = trial % 2 == 0;
    const int64_t k = pick(rng, 2, 3), s = pick(rng, 1, 2);
    const int64_t pt = pick(rng, 0, k - 1), pl = pick(rng, 0, k - 1);
    const int64_t pb = pick(rng, 0, k - 1), pr = pick(rng, 0, k - 1);
    std::map<std::string, Attribute> attrs = {{"kernel_shape", attr_ints({k, k})},
                                              {"strides", attr_ints({s, s})},
                                              {"pads", attr_ints({pt, pl, pb, pr})},
                                              {"ceil_mode", attr_i(trial % 4 < 2 ? 1 : 0)}};
    if (is_max && trial % 3 == 0) attrs["dilations"] = attr_ints({2, 1});
    if (!is_max) attrs["count_include_pad"] = attr_i(trial % 8 < 4 ? 1 : 0);
    ValueId pooled = b.add1(is_max ? "MaxPool" : "AveragePool", {y}, attrs);
    b.output(conv1x1(b, pooled, c, 4));
    b.output(b.add1(is_max ? "GlobalMaxPool" : "GlobalAveragePool", {y}));
    std::string what = std::string(is_max ? "max" : "avg") + " k" + std::to_string(k) + " s" +
                       std::to_string(s) + " pads " + std::to_string(pt) + std::to_string(pl) +
                       std::to_string(pb) + std::to_string(pr) + " trial " + std::to_string(trial);
    expect_like_reference(b.graph(), what);
  }
}

// Ceil mode whose last window reaches past the end padding, counting padding: the
// divisor counts the padding but not the reach beyond it (ONNX, PyTorch).
TEST(OnednnGraphBackend, CeilModeAveragePoolCountingPadding) {
  for (int64_t pad : {0, 1}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 6, 7});
    ValueId y = conv1x1(b, x, 8, 24);
    b.output(b.add1("AveragePool", {y},
                    {{"kernel_shape", attr_ints({3, 3})},
                     {"strides", attr_ints({2, 2})},
                     {"pads", attr_ints({pad, pad, pad, pad})},
                     {"ceil_mode", attr_i(1)},
                     {"count_include_pad", attr_i(1)}}));
    expect_like_reference(b.graph(),
                          "ceil-mode average counting padding, pads " + std::to_string(pad));
    // Alone, on a row-major source, on the op-level backend.
    GraphBuilder alone;
    ValueId a = alone.input("x", DType::kFloat32, {2, 5, 7, 6});
    alone.output(alone.add1("AveragePool", {a},
                            {{"kernel_shape", attr_ints({3, 2})},
                             {"strides", attr_ints({2, 2})},
                             {"pads", attr_ints({pad, 0, pad, 0})},
                             {"ceil_mode", attr_i(1)},
                             {"count_include_pad", attr_i(1)}}));
    testing::expect_like_reference(BackendRegistry::global().get("onednn"), alone.graph(),
                                   "alone, pads " + std::to_string(pad));
  }
}

// A pool whose source is blocked followed by a residual Add: oneDNN 2.6's jit pooling
// reads a binary post-op operand in the destination's layout.
TEST(OnednnGraphBackend, PoolPlusResidualAddInRegion) {
  for (int64_t c : {16, 24, 40}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 9, 9});
    ValueId y = conv1x1(b, x, 8, c);
    ValueId z = conv(b, x, 8, c, 3);
    for (const char* pool : {"MaxPool", "AveragePool"})
      b.output(b.add1("Add", {b.add1(pool, {y},
                                     {{"kernel_shape", attr_ints({3, 3})},
                                      {"pads", attr_ints({1, 1, 1, 1})},
                                      {"count_include_pad", attr_i(0)}}),
                              z}));
    expect_like_reference(b.graph(), "pool + residual add, " + std::to_string(c) + " channels");
  }
}

TEST(OnednnGraphBackend, SpatialReductionsInRegion) {
  for (int64_t keep : {0, 1}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 8, 7, 5});
    ValueId y = conv1x1(b, x, 8, 24);
    ValueId mean =
        b.add1("ReduceMean", {y}, {{"axes", attr_ints({2, 3})}, {"keepdims", attr_i(keep)}});
    ValueId max =
        b.add1("ReduceMax", {y}, {{"axes", attr_ints({-1, -2})}, {"keepdims", attr_i(keep)}});
    ValueId sum = b.add1("Add", {mean, max});
    ValueId w = b.random_constant("fc", {24, 6});
    b.output(b.add1("MatMul", {b.add1("Reshape", {sum, ints(b, "flat", {2, 24})}), w}));
    expect_like_reference(b.graph(), "spatial mean and max, keepdims " + std::to_string(keep));
  }
}

// EfficientNet/MnasNet/RegNet's squeeze-excitation: global pool -> 1x1 convs -> sigmoid ->
// channel-wise Mul of the block's activation, with SiLU (x * sigmoid x) around it.
TEST(OnednnGraphBackend, SqueezeExcitationInRegion) {
  for (int64_t c : {16, 24}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, 10, 10});
    ValueId y = conv(b, x, c, c, 3);
    y = b.add1("Mul", {y, b.add1("Sigmoid", {y})});
    ValueId s = b.add1("GlobalAveragePool", {y});
    s = conv(b, s, c, 4, 1);
    s = b.add1("Mul", {s, b.add1("Sigmoid", {s})});
    s = b.add1("Sigmoid", {conv(b, s, 4, c, 1)});
    b.output(conv(b, b.add1("Mul", {s, y}), c, 8, 1));
    expect_like_reference(b.graph(), "squeeze-excitation, " + std::to_string(c) + " channels");
  }
}

// SiLU (x * sigmoid x, as PyTorch exports nn.SiLU) is one swish post-op of the conv before
// it, on both backends; alone (after an Add) it is one eltwise primitive.
TEST(OnednnGraphBackend, SiluFusedAsSwish) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 9, 9});
  ValueId c = conv(b, x, 16, 24, 3);
  ValueId sig = b.add1("Sigmoid", {c});
  ValueId silu = b.add1("Mul", {c, sig});
  ValueId sum = b.add1("Add", {silu, conv(b, x, 16, 24, 1)});
  ValueId silu2 = b.add1("Mul", {b.add1("Sigmoid", {sum}), sum});
  b.output(conv(b, silu2, 24, 8, 1));
  expect_like_reference(b.graph(), "conv + SiLU, Add + SiLU");
  Backend& onednn = BackendRegistry::global().get("onednn");
  EXPECT_TRUE(testing::has_match(onednn, b.graph(), {c, sig, silu}))
      << "conv + sigmoid + mul is not one onednn group";
  GraphBuilder alone;
  ValueId a = alone.input("a", DType::kFloat32, {2, 7, 5});
  alone.output(alone.add1("Mul", {a, alone.add1("Sigmoid", {a})}));
  testing::expect_like_reference(onednn, alone.graph(), "SiLU alone");
}

// x * HardSigmoid(x, alpha 1/6) is HardSwish (MobileNetV3 at opset 13): the conv's post-op,
// in the conv's own group and inside a region; another alpha is not, and stays two steps.
TEST(OnednnGraphBackend, HardSwishFusedIntoTheConv) {
  auto hard_sigmoid = [](GraphBuilder& b, ValueId v, float alpha) {
    return b.add1("HardSigmoid", {v}, {{"alpha", testing::attr_f(alpha)}});
  };
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 9, 9});
  ValueId c = conv(b, x, 16, 24, 3);
  ValueId gate = hard_sigmoid(b, c, 1.0f / 6.0f);
  ValueId swish = b.add1("Mul", {c, gate});
  ValueId c2 = conv(b, swish, 24, 24, 1);
  ValueId gate2 = hard_sigmoid(b, c2, 0.2f);
  ValueId other = b.add1("Mul", {gate2, c2});
  b.output(conv(b, other, 24, 8, 1));
  expect_like_reference(b.graph(), "conv + HardSwish, conv + x * HardSigmoid(x, 0.2)");
  testing::expect_no_reference_primitive(*onednn::compile_region(b.graph()), "region");
  Backend& onednn = BackendRegistry::global().get("onednn");
  EXPECT_TRUE(testing::has_match(onednn, b.graph(), {c, gate, swish}))
      << "conv + HardSigmoid(1/6) + Mul is not one onednn group";
  EXPECT_FALSE(testing::has_match(onednn, b.graph(), {c2, gate2, other}))
      << "x * HardSigmoid(x, 0.2) taken for HardSwish";
}

// Every node of `g` runs on onednn-graph when it is the only backend (`run --backend`).
void expect_all_placed(const Graph& g, const std::string& what) {
  SessionOptions options;
  options.backend = "onednn-graph";
  options.strict = true;
  Session session(g, options);
  for (const std::string& backend : session.node_backends())
    EXPECT_EQ(backend, "onednn-graph") << what;
}

// ConvNeXt's block as an opset-13 export writes it: a 7x7 depthwise conv, a Transpose to
// channels-last, the LayerNorm decomposition, Linear + bias + the erf GELU, Linear + bias, a
// layer scale, a Transpose back and the residual Add. One region holds it all (the LayerNorm
// one layer_normalization primitive, the GELU a post-op of the matmul), and a user of
// onednn-graph alone gets every node on it: the size-capped regions never take part of a
// LayerNorm or GELU and leave its ReduceMean or Erf to the fallback (ConvNeXt-T: 60.9 ms,
// 64 steps on reference -> one region, 36-38 ms).
TEST(OnednnGraphBackend, LayerNormAndGeluDecompositionsInRegion) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t c = pick(rng, 5, 40), s = pick(rng, 4, 11);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, s, s});
    ValueId dw = b.add1(
        "Conv", {x, b.random_constant("dw", {c, 1, 7, 7}, 0.2f), b.random_constant("db", {c})},
        {{"pads", attr_ints({3, 3, 3, 3})}, {"group", attr_i(c)}});
    ValueId t = b.add1("Transpose", {dw}, {{"perm", attr_ints({0, 2, 3, 1})}});
    ValueId ln = testing::decomposed_layer_norm(b, t, c, 1e-6f);
    ValueId h = b.add1("Add", {b.add1("MatMul", {ln, b.random_constant("w1", {c, 4 * c}, 0.2f)}),
                               b.random_constant("b1", {4 * c})});
    ValueId o = b.add1(
        "Add",
        {b.add1("MatMul", {testing::erf_gelu(b, h), b.random_constant("w2", {4 * c, c}, 0.2f)}),
         b.random_constant("b2", {c})});
    ValueId scaled = b.add1("Mul", {o, b.random_constant("scale", {c})});
    ValueId back = b.add1("Transpose", {scaled}, {{"perm", attr_ints({0, 3, 1, 2})}});
    b.output(b.add1("Add", {back, x}));
    const std::string what = fmt::format("ConvNeXt block, {} channels {}x{}", c, s, s);
    expect_like_reference(b.graph(), what);
    testing::expect_no_reference_primitive(*onednn::compile_region(b.graph()), what);
    expect_all_placed(b.graph(), what);
  }
}

// A GELU on a value no head fuses it into (a BatchNorm's: MaxViT's MBConv), a Softmax and a
// LayerNormalization op inside regions, each against the reference and all placed.
TEST(OnednnGraphBackend, GeluAloneSoftmaxAndLayerNormOpInRegion) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 24, 7, 7});
  ValueId bn =
      b.add1("BatchNormalization",
             {conv(b, x, 24, 24, 1), b.random_constant("s", {24}), b.random_constant("bias", {24}),
              b.random_constant("m", {24}),
              b.constant("v", Tensor::from_vector<float>({24}, std::vector<float>(24, 1.5f)))});
  b.output(conv(b, testing::erf_gelu(b, bn), 24, 16, 1));
  expect_like_reference(b.graph(), "conv, BatchNorm, GELU, conv");
  expect_all_placed(b.graph(), "conv, BatchNorm, GELU, conv");

  GraphBuilder attention;
  ValueId q = attention.input("q", DType::kFloat32, {2, 9, 16});
  ValueId k = attention.input("k", DType::kFloat32, {2, 16, 9});
  ValueId p = attention.add1("Softmax", {attention.add1("MatMul", {q, k})}, {{"axis", attr_i(-1)}});
  ValueId ctx = attention.add1("MatMul", {p, attention.input("v", DType::kFloat32, {2, 9, 16})});
  attention.output(attention.add1(
      "LayerNormalization",
      {ctx, attention.random_constant("g", {16}), attention.random_constant("beta", {16})},
      {{"axis", attr_i(-1)}}));
  // A LayerNormalization whose scale and shift are computed (inputs, as ONNX's node tests
  // give them), beside the constant ones above.
  ValueId gain = attention.input("gain", DType::kFloat32, {16});
  attention.output(attention.add1(
      "LayerNormalization", {attention.add1("Relu", {ctx}), gain, attention.add1("Neg", {gain})},
      {{"axis", attr_i(-1)}}));
  expect_like_reference(attention.graph(), "matmul, softmax, matmul, LayerNormalization");
  testing::expect_no_reference_primitive(*onednn::compile_region(attention.graph()), "attention");
  expect_all_placed(attention.graph(), "matmul, softmax, matmul, LayerNormalization");
}

// A mask written out as Where of a constant condition (GPT-2's causal mask: Where(triangle,
// scores, lowest), and the other order with a fill tensor broadcast along the rows), inside
// one region with the attention around it, on random head counts and odd sequence lengths.
TEST(OnednnGraphBackend, WhereOfAConstantMaskInRegion) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 5; ++trial) {
    int64_t heads = pick(rng, 1, 6), seq = pick(rng, 3, 21), d = pick(rng, 4, 17);
    // The last one big enough (2^18 scores) for the step and the mask's expansion to run
    // on every thread.
    if (trial == 4) heads = 4, seq = 256, d = 8;
    const bool keep_where_true = trial % 2 == 0;
    GraphBuilder b;
    ValueId q = b.input("q", DType::kFloat32, {1, heads, seq, d});
    ValueId k = b.input("k", DType::kFloat32, {1, heads, d, seq});
    ValueId scores =
        b.add1("Div", {b.add1("MatMul", {q, k}),
                       b.constant("scale", Tensor::scalar(std::sqrt(static_cast<float>(d))))});
    Tensor causal(DType::kBool, {1, 1, seq, seq});
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < seq; ++j)
        causal.data<bool>()[i * seq + j] = (j <= i) == keep_where_true;
    ValueId fill = keep_where_true ? b.constant("lowest", Tensor::scalar(-3.4028234663852886e38f))
                                   : b.random_constant("fill", {1, 1, 1, seq});
    ValueId cond = b.constant("causal", std::move(causal));
    ValueId masked = b.add1("Where", keep_where_true ? std::vector<ValueId>{cond, scores, fill}
                                                     : std::vector<ValueId>{cond, fill, scores});
    ValueId p = b.add1("Softmax", {masked}, {{"axis", attr_i(-1)}});
    b.output(b.add1("MatMul", {p, b.input("v", DType::kFloat32, {1, heads, seq, d})}));
    const std::string what = fmt::format("{} heads, {} tokens, head size {}, {}", heads, seq, d,
                                         keep_where_true ? "scalar fill" : "fill tensor");
    expect_like_reference(b.graph(), what);
    expect_all_placed(b.graph(), what);
  }
  // A condition computed in the model is no mask the region expands at compile: the Where and
  // its comparison are one step of another kind (masked_select.h).
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 4, 5});
  ValueId c = b.add1("Greater", {x, b.constant("zero", Tensor::scalar(0.0f))});
  b.output(b.add1("Where", {c, x, b.constant("fill", Tensor::scalar(-1.0f))}));
  EXPECT_TRUE(onednn::region_node(b.graph(), b.graph().node(0)));
  EXPECT_TRUE(onednn::region_node(b.graph(), b.graph().node(1)));
  const testing::ProgramSteps steps =
      testing::steps_of(*onednn_graph().compile(b.graph(), testing::test_options()));
  EXPECT_EQ(steps.count(onednn::kMaskedSelectStep), 1);
  expect_like_reference(b.graph(), "a computed condition");
  // A constant condition between two ops of the region is a unit of one node: the same step.
  GraphBuilder m;
  Tensor keep(DType::kBool, {1, 4, 5});
  for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = i % 3 != 0;
  ValueId y = m.add1("Relu", {m.input("x", DType::kFloat32, {1, 4, 5})});
  y = m.add1("Where",
             {m.constant("keep", std::move(keep)), y, m.constant("fill", Tensor::scalar(-1.0f))});
  m.output(m.add1("Tanh", {y}));
  EXPECT_EQ(testing::steps_of(*onednn_graph().compile(m.graph(), testing::test_options()))
                .count(onednn::kMaskedSelectStep),
            1);
  expect_like_reference(m.graph(), "a constant condition");
}

// NASNet's branches each apply their own Relu (and pool) to one cell input: a region
// computes each once.
TEST(OnednnGraphBackend, RepeatedComputationsMergedInRegion) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 9, 9});
  ValueId y = conv(b, x, 8, 16, 1);
  std::vector<ValueId> branches;
  for (int i = 0; i < 3; ++i) {
    ValueId r = b.add1("Relu", {y});
    ValueId p = b.add1("MaxPool", {r},
                       {{"kernel_shape", attr_ints({3, 3})}, {"pads", attr_ints({1, 1, 1, 1})}});
    branches.push_back(b.add1("Add", {conv(b, r, 16, 16, 1), p}));
  }
  ValueId r_out = b.add1("Relu", {y});  // a repeat that leaves the region stays
  b.output(b.add1("Concat", branches, {{"axis", attr_i(1)}}));
  b.output(r_out);
  const Graph merged = onednn::merge_duplicates(b.graph());
  // Three Relu + MaxPool pairs become one pair; the convs differ (their own weights).
  EXPECT_EQ(merged.num_nodes(), b.graph().num_nodes() - 4);
  expect_like_reference(b.graph(), "repeated relu and pools");
}

// RegNetY's block: a grouped 3x3 conv of 8-channel groups (oneDNN then keeps 8-channel
// blocks, for which its binary primitive has no jit kernel on AVX-512) and a
// squeeze-excitation Mul of it, plus a residual Add.
TEST(OnednnGraphBackend, GroupedConvSqueezeExcitationInRegion) {
  for (int64_t c : {48, 104}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, c, 12, 12});
    ValueId y =
        b.add1("Relu", {b.add1("Conv", {x, b.random_constant("gw", {c, 8, 3, 3}, 0.2f)},
                               {{"pads", attr_ints({1, 1, 1, 1})}, {"group", attr_i(c / 8)}})});
    ValueId s = b.add1("Relu", {conv(b, b.add1("GlobalAveragePool", {y}), c, 8, 1)});
    s = b.add1("Sigmoid", {conv(b, s, 8, c, 1)});
    ValueId scaled = b.add1("Mul", {y, s});
    b.output(b.add1("Relu", {b.add1("Add", {conv(b, scaled, c, c, 1), x})}));
    expect_like_reference(b.graph(), "grouped conv + SE, " + std::to_string(c) + " channels");
  }
}

TEST(OnednnGraphBackend, ConvWithTwoResidualsOfConvsInRegion) {
  // y = conv(a1) + conv(a2) + conv(a3), each a_i a conv's channels-last output, each Add's
  // operands in either order: the first Add is the conv's sum post-op; a second full-shape
  // operand as a binary post-op after it was read by oneDNN 2.6 in the wrong layout (wrong
  // results, found splitting concatenations into convs), so it runs apart. With the
  // region's inputs read directly by the convs the same chain was right: both forms here.
  for (int form = 0; form < 8; ++form) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 16, 6, 6});
    std::vector<ValueId> a = {x, x, x};
    if (form & 1)
      for (ValueId& v : a) v = b.add1("Conv", {x, b.random_constant("v", {16, 16, 1, 1}, 0.2f)});
    std::vector<ValueId> c;
    for (ValueId v : a)
      c.push_back(b.add1("Conv", {v, b.random_constant("w", {32, 16, 1, 1}, 0.2f)}));
    ValueId s1 = form & 2 ? b.add1("Add", {c[1], c[0]}) : b.add1("Add", {c[0], c[1]});
    ValueId s2 = form & 4 ? b.add1("Add", {c[2], s1}) : b.add1("Add", {s1, c[2]});
    b.output(b.add1("Relu", {s2}));
    SCOPED_TRACE(form);
    testing::expect_like_reference(onednn_graph(), b.graph(), "conv + two residual Adds");
  }
}

// A conv reading another conv's output (channels-last or blocked), then a binary op whose
// other operand is a constant or a region input of a random broadcast shape, in either
// order: like reference. oneDNN 2.6's gemm convolution (what it offers where brgconv takes
// no such post-op) added an operand varying over space at the wrong positions in a
// channels-last output (RAFT's flow head: a conv plus a coordinate grid), so that op runs
// apart there. Also a ConvTranspose and a 3-D conv before the op.
TEST(OnednnGraphBackend, SpatialBinaryOperandAfterAConvLikeReference) {
  std::mt19937 rng(20261207);
  auto one_of = [&rng](std::vector<int64_t> options) { return options[rng() % options.size()]; };
  const std::vector<std::string> ops = {"Add", "Mul", "Sub", "Max"};
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t c0 = one_of({3, 16}), c1 = one_of({8, 16, 32}), c2 = one_of({2, 16});
    const int64_t h = one_of({5, 8, 13}), k2 = one_of({1, 3});
    const int kind = trial % 4;  // 0, 1: conv -> conv; 2: conv -> ConvTranspose; 3: 3-D
    const bool three_d = kind == 3;
    GraphBuilder b;
    const Shape xs = three_d ? Shape{1, c0, 4, h, h} : Shape{1, c0, h, h};
    ValueId x = b.input("x", DType::kFloat32, xs);
    const Shape k1 = three_d ? Shape{c1, c0, 3, 3, 3} : Shape{c1, c0, 3, 3};
    const std::vector<int64_t> p1(2 * (xs.size() - 2), 1);
    ValueId y =
        b.add1("Relu",
               {b.add1("Conv", {x, b.random_constant("w1", k1, 0.2f)}, {{"pads", attr_ints(p1)}})});
    if (kind == 2) {
      y = b.add1("ConvTranspose", {y, b.random_constant("w2", {c1, c2, 2, 2}, 0.2f)},
                 {{"strides", attr_ints({2, 2})}});
    } else {
      Shape k = three_d ? Shape{c2, c1, 1, k2, k2} : Shape{c2, c1, k2, k2};
      std::vector<int64_t> p2(2 * (xs.size() - 2), k2 / 2);
      if (three_d) p2[0] = p2[p2.size() / 2] = 0;
      y = b.add1("Conv", {y, b.random_constant("w2", k, 0.2f), b.random_constant("b2", {c2})},
                 {{"pads", attr_ints(p2)}});
    }
    // The operand: each dim past the batch the output's or 1 (not all 1).
    Shape operand = b.graph().value(y).shape;
    for (size_t d = 1; d < operand.size(); ++d)
      if (rng() % 2) operand[d] = 1;
    if (std::all_of(operand.begin() + 2, operand.end(), [](int64_t d) { return d == 1; }))
      operand.back() = b.graph().value(y).shape.back();
    const bool runtime = rng() % 3 == 0;
    ValueId other =
        runtime ? b.input("other", DType::kFloat32, operand) : b.random_constant("k", operand);
    const std::string op = ops[rng() % ops.size()];
    b.output(rng() % 2 ? b.add1(op, {other, y}) : b.add1(op, {y, other}));
    const std::string what =
        fmt::format("trial {}: {} -> {} with a {} {} {}", trial, shape_to_string(xs),
                    kind == 2 ? "ConvTranspose" : "conv", runtime ? "runtime" : "constant",
                    shape_to_string(operand), op);
    testing::expect_like_reference(onednn_graph(), b.graph(), what);
    // oneDNN's reference loops only where its binary primitive has no jit kernel for the
    // broadcast (a [1,1,H,W] operand of a channels-last value), never the conv's.
    const testing::ProgramSteps steps =
        testing::steps_of(*onednn_graph().compile(b.graph(), testing::test_options()));
    for (size_t i = 0; i < steps.kinds.size(); ++i)
      if (onednn::is_reference_impl(steps.implementations[i]))
        EXPECT_EQ(steps.kinds[i], dnnl::primitive::kind::binary)
            << what << ": " << ::testing::PrintToString(steps.implementations);
  }
}
// Each glue op alone on the op-level onednn backend: a plan never needs reference for it.
TEST(OnednnGraphBackend, GlueOpsAloneOnOnednn) {
  Backend& onednn = BackendRegistry::global().get("onednn");
  auto one = [&](const std::string& op, std::vector<ValueId> (*make)(GraphBuilder&, ValueId)) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 6, 5, 4});
    for (ValueId out : make(b, x)) b.output(out);
    EXPECT_EQ(find_matches(b.graph(), onednn).size() > 0, true) << op << ": no match";
    testing::expect_like_reference(onednn, b.graph(), op);
  };
  one("Concat", [](GraphBuilder& b, ValueId x) {
    return std::vector{b.add1("Concat", {x, x}, {{"axis", attr_i(1)}})};
  });
  one("Split", [](GraphBuilder& b, ValueId x) {
    return b.add("Split", {x, ints(b, "s", {1, 5})}, {{"axis", attr_i(1)}}, 2);
  });
  one("Slice", [](GraphBuilder& b, ValueId x) {
    return std::vector{
        b.add1("Slice", {x, ints(b, "a", {1}), ints(b, "b", {4}), ints(b, "c", {2})})};
  });
  one("Transpose", [](GraphBuilder& b, ValueId x) {
    return std::vector{b.add1("Transpose", {x}, {{"perm", attr_ints({0, 2, 3, 1})}})};
  });
  one("Pad", [](GraphBuilder& b, ValueId x) {
    return std::vector{b.add1("Pad", {x, ints(b, "p", {0, 0, 1, 2, 0, 0, 2, 1})})};
  });
  one("Flatten", [](GraphBuilder& b, ValueId x) {
    return std::vector{b.add1("Flatten", {x}, {{"axis", attr_i(2)}})};
  });
  one("Reshape", [](GraphBuilder& b, ValueId x) {
    return std::vector{b.add1("Reshape", {x, ints(b, "s", {4, -1})})};
  });
  one("ReduceMean", [](GraphBuilder& b, ValueId x) {
    return std::vector{
        b.add1("ReduceMean", {x}, {{"axes", attr_ints({2, 3})}, {"keepdims", attr_i(0)}})};
  });
}

}  // namespace
}  // namespace collage
