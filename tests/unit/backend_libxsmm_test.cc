// The libxsmm backend against the reference backend, with the tuner's own check
// (Tolerance::backend_vs_reference): 1x1 convolutions and MatMul/Gemm on randomized shapes
// (tile remainders in both directions, batches, constant and runtime operands) with their
// bias/Relu/Clip tails; what it proposes, and what it must refuse. Compiled into the unit
// tests only when the backend is built (COLLAGE_BACKEND_TESTS).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::GraphBuilder;
using testing::pick;

Backend& xsmm() {
  return BackendRegistry::global().get("libxsmm");
}

// The whole graph as one libxsmm kernel (compile must succeed: no fallback exists inside a
// kernel) against the reference, on `threads` threads.
void expect_like_reference(const Graph& g, const std::string& what, int threads = 2) {
  SCOPED_TRACE(what);
  std::vector<Tensor> inputs = random_inputs(g, 9);
  std::unique_ptr<Kernel> kernel;
  try {
    kernel = xsmm().compile(g, testing::test_options(threads));
  } catch (const Error& e) {
    FAIL() << what << ": refused: " << e.what();
  }
  std::vector<Tensor> got;
  for (ValueId v : g.outputs) got.emplace_back(g.value(v).dtype, g.value(v).shape);
  // Garbage in the output buffer must be overwritten, not accumulated into.
  for (Tensor& t : got)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = NAN;
  kernel->run(inputs, got);
  Session reference(g, SessionOptions{});
  EXPECT_EQ(compare_outputs(got, reference.run(inputs), Tolerance::backend_vs_reference()), "")
      << what;
}

// Whether the backend proposes the whole graph as one match.
bool matches_whole(const Graph& g) {
  std::vector<NodeId> all(g.num_nodes());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<NodeId>(i);
  for (const Match& m : find_matches(g, xsmm()))
    if (m.nodes == all) return true;
  return false;
}

// Appends tail `kind` to `y`: 0 none, 1 bias Add, 2 Relu, 3 bias Add + Clip(0, 6).
ValueId add_tail(GraphBuilder& b, ValueId y, int kind, const Shape& bias_shape) {
  if (kind == 1 || kind == 3) y = b.add1("Add", {y, b.random_constant("bias", bias_shape)});
  if (kind == 2) y = b.add1("Relu", {y});
  if (kind == 3)
    y = b.add1("Clip",
               {y, b.constant("lo", Tensor::scalar(0.0f)), b.constant("hi", Tensor::scalar(6.0f))});
  return y;
}

TEST(LibxsmmBackend, Identity) {
  Backend& b = xsmm();
  EXPECT_EQ(b.kind(), BackendKind::kOpLevel);
  EXPECT_EQ(b.version().rfind("1.17", 0), 0u) << b.version();
  EXPECT_TRUE(b.available()) << "this machine has AVX2 at least";
  ASSERT_FALSE(b.details().empty());
  EXPECT_NE(b.details()[0].find("JIT target"), std::string::npos);
}

// libxsmm 1.17's init putenv()s OMP_PROC_BIND=TRUE when the environment names no thread
// binding; every process started afterwards (the tuner's measure worker) then bound its
// threads, pools made from its main thread all on CPU 0 (tiled_gemm.cc). The backend undoes
// it. /proc/self/environ is the environment this process started with: what the user set.
TEST(LibxsmmBackend, InitLeavesNoThreadBindingInTheEnvironment) {
  std::ifstream start("/proc/self/environ");
  std::string variables((std::istreambuf_iterator<char>(start)), std::istreambuf_iterator<char>());
  for (const char* name : {"OMP_PROC_BIND=", "GOMP_CPU_AFFINITY=", "KMP_AFFINITY="})
    if (variables.find(name) != std::string::npos)
      GTEST_SKIP() << "the environment names a thread binding already (" << name << ")";
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 4, 4});
  b.output(b.add1("Conv", {x, b.random_constant("w", {16, 8, 1, 1})}));
  expect_like_reference(b.graph(), "a 1x1 conv: libxsmm initialised");
  EXPECT_EQ(getenv("OMP_PROC_BIND"), nullptr) << getenv("OMP_PROC_BIND");
}

TEST(LibxsmmBackend, Conv1x1Randomized) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 12; ++trial) {
    // Pixels and output channels on both sides of the 64-wide tiles.
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 90), m = pick(rng, 1, 150),
                  h = pick(rng, 1, 14), w = pick(rng, 1, 14);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    std::vector<ValueId> in = {x, b.random_constant("w", {m, c, 1, 1}, 0.5f)};
    if (trial % 2) in.push_back(b.random_constant("b", {m}));
    ValueId y = b.add1("Conv", in);
    b.output(add_tail(b, y, trial % 4, trial % 3 ? Shape{m, 1, 1} : Shape{1, m, 1, 1}));
    const std::string what =
        fmt::format("trial {}: n{} c{} m{} {}x{} tail {}", trial, n, c, m, h, w, trial % 4);
    ASSERT_TRUE(matches_whole(b.graph())) << what;
    expect_like_reference(b.graph(), what, 1 + trial % 2);
  }
  // 1-D and 3-D 1x1 convs are the same GEMM.
  GraphBuilder b1;
  ValueId x1 = b1.input("x", DType::kFloat32, {2, 5, 33});
  b1.output(b1.add1("Relu", {b1.add1("Conv", {x1, b1.random_constant("w", {7, 5, 1})})}));
  expect_like_reference(b1.graph(), "conv1d 1x1");
  GraphBuilder b3;
  ValueId x3 = b3.input("x", DType::kFloat32, {1, 6, 3, 4, 5});
  b3.output(b3.add1("Conv", {x3, b3.random_constant("w", {9, 6, 1, 1, 1})}));
  expect_like_reference(b3.graph(), "conv3d 1x1");
}

TEST(LibxsmmBackend, MatMulAndGemmRandomized) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t batch = pick(rng, 1, 3), rows = pick(rng, 1, 80), k = pick(rng, 1, 100),
                  cols = pick(rng, 1, 140);
    GraphBuilder b;
    const int form = trial % 4;  // 0: 2-D, 1: 3-D x 2-D, 2: batched, 3: runtime B
    Shape as = form == 0 || form == 3 ? Shape{rows, k} : Shape{batch, rows, k};
    Shape bs = form == 2 ? Shape{batch, k, cols} : Shape{k, cols};
    ValueId a = b.input("a", DType::kFloat32, as);
    ValueId w = form == 3 ? b.input("w", DType::kFloat32, bs) : b.random_constant("w", bs, 0.5f);
    ValueId y = b.add1("MatMul", {a, w});
    b.output(add_tail(b, y, trial % 4, trial % 2 ? Shape{cols} : Shape{1, cols}));
    const std::string what = fmt::format("matmul trial {}: form {} batch{} {}x{}x{} tail {}", trial,
                                         form, batch, rows, k, cols, trial % 4);
    ASSERT_TRUE(matches_whole(b.graph())) << what;
    expect_like_reference(b.graph(), what);
  }
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t rows = pick(rng, 1, 70), k = pick(rng, 1, 90), cols = pick(rng, 1, 130);
    const bool trans_b = trial % 2;
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, {rows, k});
    std::vector<ValueId> in = {
        a, b.random_constant("w", trans_b ? Shape{cols, k} : Shape{k, cols}, 0.5f)};
    if (trial % 3 != 2)
      in.push_back(b.random_constant("c", trial % 3 ? Shape{cols} : Shape{1, cols}));
    ValueId y = b.add1("Gemm", in,
                       {{"transB", attr_i(trans_b)},
                        {"alpha", attr_f(trial == 1 ? 0.5f : 1.0f)},
                        {"beta", attr_f(trial == 3 ? 2.0f : 1.0f)}});
    b.output(add_tail(b, y, trial % 3 == 0 ? 2 : 0, {cols}));
    expect_like_reference(
        b.graph(), fmt::format("gemm trial {}: {}x{}x{} transB {}", trial, rows, k, cols, trans_b));
  }
}

TEST(LibxsmmBackend, ProposesOnlyWhatItCompiles) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 6, 6});
  ValueId one = b.add1("Conv", {x, b.random_constant("w1", {16, 8, 1, 1})});
  ValueId biased = b.add1("Add", {one, b.random_constant("bias", {16, 1, 1})});
  ValueId act = b.add1("Relu", {biased});
  ValueId three = b.add1("Conv", {act, b.random_constant("w3", {16, 16, 3, 3})},
                         {{"pads", attr_ints({1, 1, 1, 1})}});
  ValueId strided = b.add1("Conv", {three, b.random_constant("w2", {8, 16, 1, 1})},
                           {{"strides", attr_ints({2, 2})}});
  ValueId spatial_bias =
      b.add1("Add", {b.add1("Conv", {strided, b.random_constant("w4", {4, 8, 1, 1})}),
                     b.random_constant("sb", {1, 1, 3, 3})});
  b.output(b.add1("Sigmoid", {spatial_bias}));
  const Graph& g = b.graph();
  std::set<std::vector<NodeId>> matches;
  for (const Match& m : find_matches(g, xsmm())) matches.insert(m.nodes);
  // conv, conv+add, conv+add+relu; the 3x3 and strided convs are not GEMMs here; the last
  // conv alone (its Add is not per-channel: no conv+add, and Sigmoid is no tail).
  const std::set<std::vector<NodeId>> want = {{0}, {0, 1}, {0, 1, 2}, {5}};
  EXPECT_EQ(matches, want);
  for (const auto& nodes : matches) {
    const Graph sub = extract_subgraph(g, nodes);
    EXPECT_NO_THROW(xsmm().compile(sub, testing::test_options()));
  }
  // Refused at compile: the per-spatial Add, a grouped 1x1, a Gemm with transA.
  testing::expect_unsupported(xsmm(), extract_subgraph(g, {5, 6}), "conv + spatial Add");
  GraphBuilder grouped;
  ValueId gx = grouped.input("x", DType::kFloat32, {1, 8, 4, 4});
  grouped.output(grouped.add1("Conv", {gx, grouped.random_constant("w", {8, 4, 1, 1})},
                              {{"group", attr_i(2)}}));
  testing::expect_unsupported(xsmm(), grouped.graph(), "grouped 1x1");
  GraphBuilder trans_a;
  ValueId ta = trans_a.input("a", DType::kFloat32, {5, 4});
  trans_a.output(
      trans_a.add1("Gemm", {ta, trans_a.random_constant("w", {5, 3})}, {{"transA", attr_i(1)}}));
  testing::expect_unsupported(xsmm(), trans_a.graph(), "Gemm transA");
  GraphBuilder big;
  ValueId ba = big.input("a", DType::kFloat32, {512, 512});
  big.output(big.add1("MatMul", {ba, big.random_constant("w", {512, 512})}));
  EXPECT_TRUE(find_matches(big.graph(), xsmm()).empty()) << "512^3 is not small";
}

TEST(LibxsmmBackend, SessionPlacesGemmsOnIt) {
  // `run --backend libxsmm` on a small CNN tail: the 1x1 convs and the classifier run on
  // libxsmm (not on the fallback), and the whole model matches the reference.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 7, 7});
  ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w1", {32, 16, 1, 1}),
                                              b.random_constant("b1", {32})})});
  y = b.add1("GlobalAveragePool", {y});
  y = b.add1("Flatten", {y});
  b.output(b.add1("Gemm", {y, b.random_constant("fc", {10, 32}), b.random_constant("fcb", {10})},
                  {{"transB", attr_i(1)}}));
  SessionOptions options;
  options.backend = "libxsmm";
  Session session(b.graph(), options);
  std::vector<std::string> on = session.node_backends();
  EXPECT_EQ(on[0], "libxsmm");
  EXPECT_EQ(on[1], "libxsmm");
  EXPECT_EQ(on[4], "libxsmm");
  std::vector<Tensor> inputs = random_inputs(b.graph(), 1);
  Session reference(b.graph(), SessionOptions{});
  EXPECT_EQ(compare_outputs(session.run(inputs), reference.run(inputs),
                            Tolerance::backend_vs_reference()),
            "");
}

}  // namespace
}  // namespace collage
