// cublas: what it proposes is checked on any machine (cuBLASLt is not even loaded for that);
// its kernels need a GPU, and skip without one.
#include <gtest/gtest.h>

#include <random>

#include "backend_test_util.h"
#include "gpu_test_util.h"
#include "op_test_util.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::expect_gpu_like_reference;
using testing::GraphBuilder;
using testing::pick;

Backend& cublas() {
  return BackendRegistry::global().get("cublas");
}

// GPT-2's MLP up-projection: MatMul + bias + GELU (tanh form), as the zoo writes it.
ValueId gelu_tanh(GraphBuilder& b, ValueId x) {
  ValueId half = b.add1("Mul", {x, b.constant("half", Tensor::scalar(0.5f))});
  ValueId cube = b.add1("Pow", {x, b.constant("three", Tensor::scalar(3.0f))});
  ValueId inner =
      b.add1("Add", {x, b.add1("Mul", {cube, b.constant("c", Tensor::scalar(0.044715f))})});
  ValueId t =
      b.add1("Tanh", {b.add1("Mul", {inner, b.constant("s", Tensor::scalar(0.7978845608f))})});
  return b.add1("Mul", {half, b.add1("Add", {t, b.constant("one", Tensor::scalar(1.0f))})});
}

Graph mlp(int64_t tokens, int64_t width, bool gelu) {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {1, tokens, width});
  ValueId y = b.add1("MatMul", {x, b.random_constant("w", {width, 4 * width}, 0.1f)});
  y = b.add1("Add", {y, b.random_constant("b", {4 * width})});
  b.output(gelu ? gelu_tanh(b, y) : b.add1("Relu", {y}));
  return b.finish();
}

TEST(Cublas, ProposesEpilogueChains) {
  EXPECT_NE(cublas().device(), nullptr);
  for (bool gelu : {false, true}) {
    const Graph g = mlp(4, 8, gelu);
    size_t largest = 0;
    for (const Match& m : find_matches(g, cublas())) largest = std::max(largest, m.nodes.size());
    EXPECT_EQ(largest, g.num_nodes()) << (gelu ? "gelu" : "relu") << ": the whole chain";
  }
  // The erf form is not cuBLASLt's GELU: not fused.
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {4, 8});
  ValueId y = b.add1("MatMul", {x, b.random_constant("w", {8, 8})});
  ValueId e = b.add1("Erf", {b.add1("Div", {y, b.constant("r2", Tensor::scalar(1.4142135f))})});
  b.output(b.add1("Mul",
                  {b.add1("Mul", {y, b.add1("Add", {e, b.constant("one", Tensor::scalar(1.0f))})}),
                   b.constant("half", Tensor::scalar(0.5f))}));
  const Graph g = b.finish();
  for (const Match& m : find_matches(g, cublas())) EXPECT_EQ(m.nodes.size(), 1u);
}

TEST(Cublas, HeuristicAlgorithmsAreVariants) {
  const Graph g = mlp(4, 8, false);
  std::vector<std::string> v = cublas().variants(g);
  ASSERT_GE(v.size(), 2u);
  EXPECT_EQ(v[0], "");
  EXPECT_EQ(v[1], "algo1");
}

// ---- on a device --------------------------------------------------------------------------

TEST(CublasDevice, MatMulRandomized) {
  COLLAGE_SKIP_WITHOUT_GPU("cublas");
  std::mt19937 rng(5);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t m = pick(rng, 1, 70), k = pick(rng, 1, 70), n = pick(rng, 1, 70);
    GraphBuilder b(13);
    ValueId a, w;
    switch (trial % 4) {
      case 0:  // activations x weights
        a = b.input("a", DType::kFloat32, {2, m, k});
        w = b.random_constant("w", {k, n});
        break;
      case 1:  // batched, both computed (attention)
        a = b.input("a", DType::kFloat32, {1, 3, m, k});
        w = b.input("b", DType::kFloat32, {1, 3, k, n});
        break;
      case 2:  // one matrix for every batch
        a = b.input("a", DType::kFloat32, {m, k});
        w = b.input("b", DType::kFloat32, {4, k, n});
        break;
      default:
        a = b.input("a", DType::kFloat32, {m, k});
        w = b.input("b", DType::kFloat32, {k, n});
    }
    b.output(b.add1("MatMul", {a, w}));
    expect_gpu_like_reference("cublas", b.finish(), "matmul trial " + std::to_string(trial));
  }
}

TEST(CublasDevice, GemmTransposesAlphaBetaBias) {
  COLLAGE_SKIP_WITHOUT_GPU("cublas");
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t m = 5, k = 7, n = 9;
      GraphBuilder b(13);
      ValueId a = b.input("a", DType::kFloat32, ta ? Shape{k, m} : Shape{m, k});
      ValueId w = b.random_constant("w", tb ? Shape{n, k} : Shape{k, n});
      b.output(b.add1("Gemm", {a, w, b.random_constant("c", {n})},
                      {{"transA", attr_i(ta)},
                       {"transB", attr_i(tb)},
                       {"alpha", attr_f(0.5f)},
                       {"beta", attr_f(2.0f)}}));
      expect_gpu_like_reference("cublas", b.finish(), fmt::format("gemm {}{}", ta, tb));
    }
}

TEST(CublasDevice, EpiloguesLikeReferenceInOneKernel) {
  COLLAGE_SKIP_WITHOUT_GPU("cublas");
  for (bool gelu : {false, true}) {
    const Graph g = mlp(16, 32, gelu);
    SessionOptions options;
    options.backend = "cublas";
    EXPECT_EQ(Session(g, options).num_steps(), 1u);
    expect_gpu_like_reference("cublas", g, gelu ? "bias + gelu" : "bias + relu");
  }
}

TEST(CublasDevice, EveryProposedAlgorithmComputesTheSame) {
  COLLAGE_SKIP_WITHOUT_GPU("cublas");
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {64, 96});
  b.output(b.add1("MatMul", {x, b.random_constant("w", {96, 128})}));
  const Graph g = b.finish();
  int ran = 0;
  for (const std::string& variant : cublas().variants(g)) {
    try {
      std::unique_ptr<Kernel> k = cublas().compile(g, CompileOptions{variant, 1});
      ++ran;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << variant << ": " << e.what();
    }
  }
  EXPECT_GE(ran, 1);
}

}  // namespace
}  // namespace collage
