// The onednn-graph backend against the reference backend: regions of several groups whose
// values pass between primitives in blocked layouts, values that are both read inside and
// produced for outside, whole tiny models as one region, and what it must refuse.
#include <gtest/gtest.h>

#include <string>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "models/families.h"

namespace collage {
namespace {

using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::outputs_match;
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

TEST(OnednnGraphBackend, WholeTinyResNet) {
  Graph g = models::resnet_tiny(1);
  expect_like_reference(g, "resnet_tiny as one region");
}

TEST(OnednnGraphBackend, RefusesRegionWithNodeItCantTake) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 6, 6});
  ValueId y = b.add1("Relu", {conv(b, x, 8, 8, 3)});
  b.output(b.add1("Softmax", {y}, {{"axis", attr_i(1)}}));
  testing::expect_unsupported(onednn_graph(), b.graph(), "a region with a Softmax", "Softmax");
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

}  // namespace
}  // namespace collage
