// cudnn: what it proposes is checked on any machine; its kernels need a GPU, and skip
// without one (ctest reports them as skipped).
#include <gtest/gtest.h>

#include <random>

#include "backend_test_util.h"
#include "gpu_test_util.h"
#include "op_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::expect_gpu_like_reference;
using testing::GraphBuilder;
using testing::pick;
using Attrs = std::map<std::string, Attribute>;

Backend& cudnn() {
  return BackendRegistry::global().get("cudnn");
}

// x -> Conv -> BatchNormalization -> Add(x) -> Relu: a ResNet block's tail.
Graph residual_block(int64_t c, int64_t hw) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, c, hw, hw});
  ValueId y = b.add1("Conv", {x, b.random_constant("w", {c, c, 3, 3}, 0.3f)},
                     {{"pads", attr_ints({1, 1, 1, 1})}});
  y = b.add1("BatchNormalization",
             {y, b.random_constant("scale", {c}), b.random_constant("shift", {c}),
              b.random_constant("mean", {c}),
              b.constant("var", Tensor::from_vector<float>({c}, std::vector<float>(c, 2)))},
             {{"epsilon", attr_f(1e-5f)}});
  y = b.add1("Relu", {b.add1("Add", {y, x})});
  b.output(y);
  return b.finish();
}

TEST(Cudnn, RunsOnTheCudaDevice) {
  EXPECT_NE(cudnn().device(), nullptr);
  // Each convolution algorithm is a variant; "" (cuDNN's heuristic) first.
  const Graph g = residual_block(4, 8);
  std::vector<std::string> v = cudnn().variants(extract_subgraph(g, {0}));
  ASSERT_GE(v.size(), 2u);
  EXPECT_EQ(v[0], "");
  EXPECT_NE(std::find(v.begin(), v.end(), "winograd"), v.end());
}

TEST(Cudnn, ProposesTheWholeResidualTailAndItsPrefixes) {
  const Graph g = residual_block(4, 8);
  std::set<std::vector<std::string>> proposed;
  for (const Match& m : find_matches(g, cudnn())) {
    std::vector<std::string> ops;
    for (NodeId n : m.nodes) ops.push_back(g.node(n).op_type);
    proposed.insert(ops);
  }
  EXPECT_TRUE(proposed.count({"Conv"}));
  EXPECT_TRUE(proposed.count({"Conv", "BatchNormalization"}));
  EXPECT_TRUE(proposed.count({"Conv", "BatchNormalization", "Add"}));
  EXPECT_TRUE(proposed.count({"Conv", "BatchNormalization", "Add", "Relu"}));
}

TEST(Cudnn, DoesNotFuseAResidualOfAnotherShapeOrAConstant) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 4, 6, 6});
  ValueId y = b.add1("Conv", {x, b.random_constant("w", {4, 4, 1, 1})});
  ValueId z = b.add1("Add", {y, b.random_constant("c", {1, 4, 1, 1})});  // a bias, not a residual
  b.output(b.add1("Relu", {z}));
  const Graph g = b.finish();
  for (const Match& m : find_matches(g, cudnn()))
    for (NodeId n : m.nodes) EXPECT_NE(g.node(n).op_type, "Add");
}

// ---- on a device --------------------------------------------------------------------------

TEST(CudnnDevice, Conv2dRandomizedInEveryAlgorithm) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 3) * 4, h = pick(rng, 5, 12),
                  w = pick(rng, 5, 12), k = pick(rng, 1, 3), s = pick(rng, 1, 2),
                  d = pick(rng, 1, 2), p = pick(rng, 0, 1);
    const int group_kind = trial % 3;  // dense, depthwise, two groups
    const int64_t group = group_kind == 0 ? 1 : group_kind == 1 ? c : 2;
    const int64_t m = group_kind == 1 ? c : pick(rng, 1, 3) * 4;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    std::vector<ValueId> in = {x, b.random_constant("w", {m, c / group, k, k})};
    if (trial % 2 == 0) in.push_back(b.random_constant("b", {m}));
    ValueId y = b.add1("Conv", in,
                       {{"strides", attr_ints({s, s})},
                        {"dilations", attr_ints({d, d})},
                        {"pads", attr_ints({p, p, p, p})},
                        {"group", attr_i(group)}});
    if (trial % 4 == 1) y = b.add1("Relu", {y});
    b.output(y);
    const Graph g = b.finish();
    const std::string what = "conv trial " + std::to_string(trial);
    expect_gpu_like_reference("cudnn", g, what);
    // Every algorithm cuDNN accepts for this shape computes the same; at least the default.
    int compiled = 0;
    for (const std::string& variant : cudnn().variants(g)) {
      try {
        cudnn().compile(g, CompileOptions{variant, 1});
        ++compiled;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << variant << ": " << e.what();
      }
    }
    EXPECT_GE(compiled, 1) << what;
  }
}

TEST(CudnnDevice, EveryAlgorithmMatchesReference) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  const Graph g = residual_block(8, 10);
  Session reference(g, SessionOptions{});
  std::vector<Tensor> inputs = random_inputs(g, 4);
  std::vector<Tensor> want = reference.run(inputs);
  int ran = 0;
  SessionOptions on_cudnn;
  on_cudnn.backend = "cudnn";
  const Plan fused = Session(g, on_cudnn).plan();
  for (const std::string& variant : cudnn().variants(g)) {
    Plan plan = fused;
    for (PlanGroup& group : plan.groups)
      if (group.backend == "cudnn") group.variant = variant;
    try {
      Session s(g, plan, SessionOptions{});
      EXPECT_TRUE(testing::outputs_match(s.run(inputs), want, Tolerance{1e-3, 1e-4})) << variant;
      ++ran;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << variant << ": " << e.what();
    }
  }
  EXPECT_GE(ran, 2);
}

TEST(CudnnDevice, ResidualBlockFusedWholeLikeReference) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  const Graph g = residual_block(8, 14);
  SessionOptions options;
  options.backend = "cudnn";
  Session s(g, options);
  EXPECT_EQ(s.num_steps(), 1u) << "Conv + BN + Add + Relu as one kernel";
  expect_gpu_like_reference("cudnn", g, "residual block");
}

TEST(CudnnDevice, Conv1dAnd3d) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 3, 17});
    b.output(b.add1("Conv", {x, b.random_constant("w", {5, 3, 4}), b.random_constant("b", {5})},
                    {{"pads", attr_ints({1, 1})}, {"strides", attr_ints({2})}}));
    expect_gpu_like_reference("cudnn", b.finish(), "conv 1d");
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 4, 5, 6, 7});
    b.output(b.add1(
        "Relu",
        {b.add1("Conv", {x, b.random_constant("w", {6, 2, 3, 1, 3}), b.random_constant("b", {6})},
                {{"group", attr_i(2)}, {"pads", attr_ints({1, 0, 1, 1, 0, 1})}})}));
    expect_gpu_like_reference("cudnn", b.finish(), "conv 3d grouped");
  }
}

TEST(CudnnDevice, ConvTransposeWithOutputPadding) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  for (int64_t out_pad : {0, 1}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 8, 5, 5});
    b.output(b.add1("Relu",
                    {b.add1("ConvTranspose",
                            {x, b.random_constant("w", {8, 4, 4, 4}), b.random_constant("b", {4})},
                            {{"strides", attr_ints({2, 2})},
                             {"pads", attr_ints({1, 1, 1, 1})},
                             {"output_padding", attr_ints({out_pad, out_pad})}})}));
    expect_gpu_like_reference("cudnn", b.finish(), "conv transpose");
  }
}

TEST(CudnnDevice, Pools) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  for (const char* op : {"MaxPool", "AveragePool"})
    for (int64_t include_pad : {0, 1}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {1, 3, 11, 11});
      Attrs attrs = {{"kernel_shape", attr_ints({3, 3})},
                     {"strides", attr_ints({2, 2})},
                     {"pads", attr_ints({1, 1, 1, 1})}};
      if (std::string(op) == "AveragePool") attrs["count_include_pad"] = attr_i(include_pad);
      b.output(b.add1(op, {x}, attrs));
      expect_gpu_like_reference("cudnn", b.finish(), op);
    }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 16, 7, 7});
    b.output(b.add1(op, {x}));
    expect_gpu_like_reference("cudnn", b.finish(), op);
  }
}

TEST(CudnnDevice, RefusesAsymmetricPadding) {
  COLLAGE_SKIP_WITHOUT_GPU("cudnn");
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 3, 8, 8});
  b.output(b.add1("Conv", {x, b.random_constant("w", {4, 3, 3, 3})},
                  {{"pads", attr_ints({0, 1, 1, 0})}}));
  testing::expect_unsupported(cudnn(), b.finish(), "asymmetric pads", "asymmetric");
}

}  // namespace
}  // namespace collage
