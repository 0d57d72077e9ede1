// The blas backend against the reference ops: every pattern it claims (MatMul, Gemm, Conv,
// ConvTranspose, each with fused epilogues) on randomized shapes and attributes, its
// pattern matching on small graphs, and its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend_test_util.h"
#include "backends/blas/fast_math.h"
#include "graph_builder.h"

namespace collage::testing {
namespace {

Backend& blas() {
  return BackendRegistry::global().get("blas");
}

// Compiles the whole graph on blas and compares with reference.
::testing::AssertionResult check(const Graph& g) {
  return testing::backend_matches_reference(blas(), g);
}

ValueId weights(GraphBuilder& b, const std::string& name, Shape shape, int64_t fan_in) {
  return b.random_constant(name, std::move(shape), 1.0f / std::sqrt(static_cast<float>(fan_in)));
}

TEST(BlasBackend, DescribesLibrary) {
  Backend& backend = blas();
  EXPECT_EQ(backend.thread_model(), "OpenBLAS pthreads");
  EXPECT_EQ(backend.version().rfind("0.", 0), 0u) << backend.version();
  std::vector<std::string> details = backend.details();
  ASSERT_FALSE(details.empty());
  EXPECT_EQ(details[0].rfind("kernel: ", 0), 0u);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (forced && *forced) {
    EXPECT_NE(details.back().find("OPENBLAS_CORETYPE"), std::string::npos);
  }
}

TEST(BlasFastMath, MatchesLibm) {
  for (float x = -12.0f; x <= 12.0f; x += 0.0013f) {
    EXPECT_NEAR(blas::fast_exp(x), std::exp(x), 2e-7f * std::exp(x)) << x;
    EXPECT_NEAR(blas::fast_sigmoid(x), 1.0f / (1.0f + std::exp(-x)), 3e-7f) << x;
    EXPECT_NEAR(blas::fast_tanh(x), std::tanh(x),
                3e-7f * std::max(1e-3f, std::fabs(std::tanh(x))) + 1e-9f)
        << x;
    EXPECT_NEAR(blas::fast_erf(x), std::erf(x), 3e-7f) << x;
  }
  EXPECT_NEAR(blas::fast_erf(1e-4f), std::erf(1e-4f), 1e-11f);
  EXPECT_EQ(blas::fast_exp(-200.0f) < 1e-37f, true);
  EXPECT_TRUE(std::isfinite(blas::fast_sigmoid(-200.0f)));
}

TEST(BlasBackend, MatMulShapes) {
  std::mt19937 rng(11);
  struct Case {
    Shape a, b;
    bool b_constant;
  };
  std::vector<Case> cases = {
      {{pick(rng, 1, 40), pick(rng, 1, 70)}, {}, true},           // 2-D x constant
      {{2, pick(rng, 3, 20), 48}, {48, pick(rng, 1, 50)}, true},  // batched x shared B
      {{3, 17, 16}, {3, 16, 19}, false},                          // attention-style
      {{2, 1, 5, 8}, {3, 8, 6}, false},                           // broadcast batch dims
      {{8}, {2, 8, 5}, true},                                     // 1-D A
      {{4, 9}, {9}, true},                                        // 1-D B
      {{5, 12}, {2, 12, 7}, false},                               // A broadcast over B's batch
  };
  cases[0].b = {cases[0].a[1], pick(rng, 1, 60)};
  for (const Case& c : cases) {
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, c.a);
    ValueId w =
        c.b_constant ? weights(b, "w", c.b, c.a.back()) : b.input("w", DType::kFloat32, c.b);
    b.output(b.add1("MatMul", {a, w}));
    EXPECT_TRUE(check(b.finish())) << shape_to_string(c.a) << " x " << shape_to_string(c.b);
  }
}

TEST(BlasBackend, GemmAttributes) {
  std::mt19937 rng(5);
  for (int i = 0; i < 6; ++i) {
    const int64_t m = pick(rng, 1, 30), n = pick(rng, 1, 40), k = pick(rng, 1, 50);
    const bool ta = i & 1, tb = i & 2;
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, ta ? Shape{k, m} : Shape{m, k});
    ValueId w = weights(b, "w", tb ? Shape{n, k} : Shape{k, n}, k);
    std::vector<Shape> c_shapes = {{n}, {m, 1}, {}, {m, n}, {1, n}};
    std::vector<ValueId> inputs = {a, w};
    if (i < 5)
      inputs.push_back(b.random_constant("c", c_shapes[i]));
    else
      inputs.push_back(b.input("c", DType::kFloat32, {m, n}));  // computed C, beta 1
    std::map<std::string, Attribute> attrs = {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}};
    if (i < 5) {
      attrs["alpha"] = attr_f(0.5f + i * 0.25f);
      attrs["beta"] = attr_f(i == 2 ? 0.0f : 1.5f);
    }
    b.output(b.add1("Gemm", inputs, attrs));
    EXPECT_TRUE(check(b.finish())) << "case " << i;
  }
}

// One row of A (a batch-1 classifier) runs as sgemv: every transposition, alpha, a bias C
// and a fused Relu, a MatMul of a [1, K] row and of a batch of single rows, against
// reference on random sizes (K and N past OpenBLAS's blocking, so its threads split them).
TEST(BlasBackend, OneRowGemmAndMatMul) {
  std::mt19937 rng(17);
  for (int i = 0; i < 4; ++i) {
    const int64_t n = pick(rng, 1, 700), k = pick(rng, 1, 900);
    const bool ta = i & 1, tb = i & 2;
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, ta ? Shape{k, 1} : Shape{1, k});
    ValueId w = weights(b, "w", tb ? Shape{n, k} : Shape{k, n}, k);
    ValueId y = b.add1("Gemm", {a, w, b.random_constant("c", {n})},
                       {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}, {"alpha", attr_f(0.75f)}});
    b.output(b.add1("Relu", {y}));
    EXPECT_TRUE(check(b.finish())) << "Gemm case " << i << ": " << k << " -> " << n;
  }
  for (const Shape& a_shape : {Shape{1, 333}, Shape{3, 1, 333}}) {
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, a_shape);
    b.output(b.add1("MatMul", {a, weights(b, "w", {333, 129}, 333)}));
    EXPECT_TRUE(check(b.finish())) << shape_to_string(a_shape);
  }
}

// The activations the epilogue runs, each after a MatMul + bias.
TEST(BlasBackend, MatMulBiasActivations) {
  const std::vector<std::pair<std::string, std::map<std::string, Attribute>>> acts = {
      {"Relu", {}}, {"Sigmoid", {}}, {"Tanh", {}}, {"LeakyRelu", {{"alpha", attr_f(0.2f)}}},
      {"Erf", {}},  {"Clip", {}}};
  for (const auto& [act, attrs] : acts) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 13, 24});
    ValueId y = b.add1("MatMul", {x, weights(b, "w", {24, 1100}, 24)});
    y = b.add1("Add", {b.random_constant("bias", {1100}), y});
    std::vector<ValueId> in = {y};
    if (act == "Clip") {
      in.push_back(b.constant("lo", Tensor::scalar<float>(-0.3f)));
      in.push_back(b.constant("hi", Tensor::scalar<float>(0.6f)));
    }
    b.output(b.add1(act, in, attrs));
    EXPECT_TRUE(check(b.finish())) << act;
  }
}

// The GELU exported from PyTorch: x * 0.5 * (1 + erf(x / sqrt(2))), after MatMul + bias.
Graph matmul_gelu(Shape x_shape, int64_t n) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, x_shape);
  ValueId h = b.add1("MatMul", {x, weights(b, "w", {x_shape.back(), n}, x_shape.back())});
  h = b.add1("Add", {h, b.random_constant("bias", {n})});
  ValueId d = b.add1("Div", {h, b.constant("sqrt2", Tensor::scalar<float>(1.4142135f))});
  ValueId e = b.add1("Erf", {d});
  ValueId p = b.add1("Add", {e, b.constant("one", Tensor::scalar<float>(1.0f))});
  ValueId m = b.add1("Mul", {h, p});
  b.output(b.add1("Mul", {m, b.constant("half", Tensor::scalar<float>(0.5f))}));
  return b.finish();
}

TEST(BlasBackend, MatMulGelu) {
  EXPECT_TRUE(check(matmul_gelu({1, 24, 32}, 96)));
  EXPECT_TRUE(check(matmul_gelu({3, 40}, 2500)));  // segments split rows, threads share
}

TEST(BlasBackend, EpilogueConstantsOfEveryBroadcast) {
  // Per-row ([M,1]), per-matrix ([M,N]) and per-batch ([B,1,1]) constants, Sub/Div order.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {3, 6, 10});
  ValueId y = b.add1("MatMul", {x, b.input("w", DType::kFloat32, {3, 10, 7})});
  y = b.add1("Sub", {b.random_constant("rows", {6, 1}), y});
  y = b.add1("Mul", {y, b.random_constant("mat", {6, 7})});
  y = b.add1("Div", {y, b.random_constant("batch", {3, 1, 1}, 1.0f)});
  b.output(b.add1("Relu", {y}));
  Graph g = b.finish();
  // Keep the divisor away from 0.
  float* d = g.value(*g.find_value("batch")).constant.data<float>();
  for (int i = 0; i < 3; ++i) d[i] = 0.5f + i;
  EXPECT_TRUE(check(g));
}

TEST(BlasBackend, MultipleOutputs) {
  // The MatMul's value and an interior epilogue value are read outside the group.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {9, 16});
  ValueId h = b.add1("MatMul", {x, weights(b, "w", {16, 12}, 16)});
  ValueId s = b.add1("Sigmoid", {h});
  ValueId r = b.add1("Mul", {s, h});
  b.output(h);
  b.output(r);
  b.output(s);
  EXPECT_TRUE(check(b.finish()));
}

struct ConvCase {
  Shape x, w;
  std::map<std::string, Attribute> attrs;
  bool bias;
};

Graph conv_graph(const std::string& op, const ConvCase& c, const std::string& tail) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, c.x);
  int64_t fan_in = 1;
  for (size_t i = 1; i < c.w.size(); ++i) fan_in *= c.w[i];
  std::vector<ValueId> in = {x, weights(b, "w", c.w, fan_in)};
  if (c.bias) {
    int64_t group = c.attrs.count("group") ? c.attrs.at("group").i : 1;
    in.push_back(b.random_constant("b", {op == "Conv" ? c.w[0] : c.w[1] * group}));
  }
  ValueId y = b.add1(op, in, c.attrs);
  if (tail == "relu") y = b.add1("Relu", {y});
  if (tail == "residual") {
    ValueId skip = b.input("skip", DType::kFloat32, b.graph().value(y).shape);
    y = b.add1("Relu", {b.add1("Add", {y, skip})});
  }
  b.output(y);
  return b.finish();
}

TEST(BlasBackend, ConvAttributes) {
  std::mt19937 rng(3);
  std::vector<ConvCase> cases = {
      {{1, 8, 9, 11}, {6, 8, 3, 3}, {{"pads", attr_ints({1, 1, 1, 1})}}, true},
      {{2, 6, 12, 10}, {8, 6, 1, 1}, {}, true},  // pointwise: plain GEMM
      {{1, 4, 13, 12},
       {6, 4, 3, 2},
       {{"strides", attr_ints({2, 1})},
        {"dilations", attr_ints({1, 2})},
        {"pads", attr_ints({0, 2, 1, 0})}},
       false},
      {{2, 8, 7, 7},
       {12, 2, 3, 3},
       {{"group", attr_i(4)}, {"auto_pad", attr_s("SAME_UPPER")}},
       true},
      {{1, 5, 9, 8},
       {4, 5, 4, 3},
       {{"auto_pad", attr_s("SAME_LOWER")}, {"strides", attr_ints({2, 2})}},
       true},
      {{1, 3, 10, 10}, {4, 3, 3, 3}, {{"auto_pad", attr_s("VALID")}}, false},
      {{2, 6, 20},
       {5, 6, 5},
       {{"pads", attr_ints({2, 1})}, {"strides", attr_ints({3})}},
       true},                                                                               // 1-D
      {{1, 3, 5, 6, 7}, {4, 3, 2, 3, 2}, {{"pads", attr_ints({1, 0, 1, 0, 1, 1})}}, true},  // 3-D
      {{1, 16, 8, 8}, {8, 16, 1, 1}, {{"strides", attr_ints({2, 2})}}, true},  // 1x1 stride 2
  };
  // A few random 2-D ones on top.
  for (int i = 0; i < 3; ++i) {
    const int64_t c = pick(rng, 1, 8), k = pick(rng, 1, 4), s = pick(rng, 1, 3),
                  p = pick(rng, 0, 2);
    cases.push_back({{1, c, pick(rng, 6, 20), pick(rng, 6, 20)},
                     {pick(rng, 1, 10), c, k, k},
                     {{"strides", attr_ints({s, s})}, {"pads", attr_ints({p, p, p, p})}},
                     i % 2 == 0});
  }
  for (size_t i = 0; i < cases.size(); ++i)
    for (const char* tail : {"", "relu", "residual"})
      EXPECT_TRUE(check(conv_graph("Conv", cases[i], tail))) << "case " << i << " " << tail;
}

TEST(BlasBackend, ConvTransposeAttributes) {
  std::vector<ConvCase> cases = {
      {{1, 6, 5, 7},
       {6, 4, 3, 3},
       {{"strides", attr_ints({2, 2})},
        {"pads", attr_ints({1, 1, 1, 1})},
        {"output_padding", attr_ints({1, 0})}},
       true},
      {{2, 8, 4, 4}, {8, 3, 2, 2}, {{"strides", attr_ints({2, 2})}, {"group", attr_i(2)}}, true},
      {{1, 4, 6, 5}, {4, 5, 3, 2}, {{"dilations", attr_ints({2, 1})}}, false},
      {{1, 5, 9},
       {5, 3, 4},
       {{"strides", attr_ints({3})}, {"auto_pad", attr_s("SAME_UPPER")}},
       true},
      {{1, 4, 5, 5},
       {4, 2, 3, 3},
       {{"strides", attr_ints({2, 2})}, {"output_shape", attr_ints({10, 10})}},
       true},
      {{1, 6, 6, 6}, {6, 7, 1, 1}, {}, true},  // 1x1: the GEMM writes the output directly
      {{1, 3, 3, 4, 3}, {3, 2, 2, 2, 3}, {{"strides", attr_ints({1, 2, 1})}}, true},  // 3-D
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (const char* tail : {"", "relu"})
      EXPECT_TRUE(check(conv_graph("ConvTranspose", cases[i], tail)))
          << "case " << i << " " << tail;
}

std::vector<std::vector<NodeId>> match_sets(const Graph& g) {
  std::vector<std::vector<NodeId>> sets;
  for (const Match& m : find_matches(g, blas())) sets.push_back(m.nodes);
  std::sort(sets.begin(), sets.end());
  return sets;
}

TEST(BlasBackend, MatchesEpilogueChains) {
  // MatMul(0) -> Add bias(1) -> Relu(2) -> Softmax(3): the Softmax never joins.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 8});
  ValueId y = b.add1("MatMul", {x, weights(b, "w", {8, 6}, 8)});
  y = b.add1("Add", {y, b.random_constant("bias", {6})});
  y = b.add1("Relu", {y});
  b.output(b.add1("Softmax", {y}));
  EXPECT_EQ(match_sets(b.finish()), (std::vector<std::vector<NodeId>>{{0}, {0, 1}, {0, 1, 2}}));
}

TEST(BlasBackend, MatchesGeluAsOneGroup) {
  Graph g = matmul_gelu({2, 8, 16}, 32);
  std::vector<std::vector<NodeId>> sets = match_sets(g);
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.front(), std::vector<NodeId>{0});
  // MatMul, Add, Div, Erf, Add, Mul, Mul: every prefix of the growth, ending with all.
  EXPECT_EQ(sets.size(), g.num_nodes());
  EXPECT_EQ(sets.back(), (std::vector<NodeId>{0, 1, 2, 3, 4, 5, 6}));
  // Placed on blas, the whole model is one kernel.
  SessionOptions options;
  options.backend = "blas";
  options.strict = true;
  Session session(g, options);
  EXPECT_EQ(session.num_steps(), 1u);
  Session reference(g, SessionOptions{});
  std::vector<Tensor> inputs = random_inputs(g, 9);
  EXPECT_TRUE(testing::outputs_match(session.run(inputs), reference.run(inputs)));
}

TEST(BlasBackend, MatchesResidualConvButNotDepthwise) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 4, 6, 6});
  ValueId c =
      b.add1("Conv", {x, weights(b, "w", {4, 4, 3, 3}, 36)}, {{"pads", attr_ints({1, 1, 1, 1})}});
  ValueId r = b.add1("Relu", {b.add1("Add", {c, x})});                                       // 1, 2
  b.output(b.add1("Conv", {r, weights(b, "dw", {4, 1, 3, 3}, 9)}, {{"group", attr_i(4)}}));  // 3
  EXPECT_EQ(match_sets(b.finish()), (std::vector<std::vector<NodeId>>{{0}, {0, 1}, {0, 1, 2}}));
}

TEST(BlasBackend, RefusesWhatItCannotRun) {
  auto expect_unsupported = [](const Graph& g, const char* what) {
    testing::expect_unsupported(blas(), g, what);
  };
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 4, 6, 6});
    b.output(b.add1("Conv", {x, weights(b, "dw", {4, 1, 3, 3}, 9)}, {{"group", attr_i(4)}}));
    expect_unsupported(b.finish(), "depthwise conv");
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {4, 8});
    ValueId y = b.add1("MatMul", {x, weights(b, "w", {8, 8}, 8)});
    b.output(b.add1("MatMul", {y, weights(b, "w2", {8, 8}, 8)}));
    expect_unsupported(b.finish(), "two GEMMs");
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {4, 8});
    b.output(b.add1("Softmax", {b.add1("MatMul", {x, weights(b, "w", {8, 8}, 8)})}));
    expect_unsupported(b.finish(), "softmax tail");
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat64, {4, 8});
    b.output(b.add1("MatMul", {x, b.input("w", DType::kFloat64, {8, 3})}));
    expect_unsupported(b.finish(), "float64");
  }
  {
    GraphBuilder b;  // a bias that grows the result: [4, 8] + [2, 4, 8]
    ValueId x = b.input("x", DType::kFloat32, {4, 8});
    ValueId y = b.add1("MatMul", {x, weights(b, "w", {8, 8}, 8)});
    b.output(b.add1("Add", {y, b.random_constant("big", {2, 4, 8})}));
    expect_unsupported(b.finish(), "growing broadcast");
  }
  {
    GraphBuilder b;
    b.output(b.add1("Relu", {b.input("x", DType::kFloat32, {4, 8})}));
    expect_unsupported(b.finish(), "no GEMM");
  }
}

}  // namespace
}  // namespace collage::testing
