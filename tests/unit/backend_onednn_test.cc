// The onednn backend against the reference backend: every pattern it claims, on
// randomized shapes and attributes, plus what find_matches proposes and what compile()
// must refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "graph_builder.h"

namespace collage {
namespace {

using testing::attr_f;
using testing::attr_i;
using testing::attr_ints;
using testing::attr_s;
using testing::GraphBuilder;
using testing::has_match;
using testing::outputs_match;
using testing::pick;
using testing::run_backend_and_reference;
using Attrs = std::map<std::string, Attribute>;

Backend& onednn() {
  return BackendRegistry::global().get("onednn");
}

void expect_like_reference(const Graph& g, const std::string& what) {
  testing::expect_like_reference(onednn(), g, what);
}
ErrorKind compile_error(const Graph& g) {
  return testing::compile_error(onednn(), g);
}
std::vector<std::set<std::string>> match_op_sets(const Graph& g) {
  return testing::match_op_sets(onednn(), g);
}

// An activation applied to `v` (index picks one), for tails.
ValueId add_activation(GraphBuilder& b, ValueId v, int which) {
  switch (which) {
    case 0:
      return v;
    case 1:
      return b.add1("Relu", {v});
    case 2:
      return b.add1("Clip", {v, b.constant("lo", Tensor::scalar(0.0f)),
                             b.constant("hi", Tensor::scalar(6.0f))});
    case 3:
      return b.add1("Sigmoid", {v});
    case 4:
      return b.add1("Tanh", {v});
    default:
      return b.add1("LeakyRelu", {v}, {{"alpha", attr_f(0.1f)}});
  }
}

TEST(OnednnBackend, Identity) {
  Backend& b = onednn();
  EXPECT_EQ(b.kind(), BackendKind::kOpLevel);
  EXPECT_EQ(b.version().rfind("2.", 0), 0u) << b.version();
  EXPECT_EQ(b.thread_model(), "OpenMP");
  ASSERT_FALSE(b.details().empty());
  EXPECT_NE(b.details()[0].find("ISA"), std::string::npos);
}

// ------------------------------------------------------------------------------ Conv

TEST(OnednnBackend, Conv2dRandomized) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 3) * 4, h = pick(rng, 5, 12),
                  w = pick(rng, 5, 12), k = pick(rng, 1, 3), s = pick(rng, 1, 2),
                  d = pick(rng, 1, 2);
    const int group_kind = trial % 3;  // 0: dense, 1: depthwise, 2: two groups
    const int64_t group = group_kind == 0 ? 1 : group_kind == 1 ? c : 2;
    const int64_t m = group_kind == 1 ? c : pick(rng, 1, 3) * 4;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    std::vector<ValueId> in = {x, b.random_constant("w", {m, c / group, k, k})};
    if (trial % 2 == 0) in.push_back(b.random_constant("b", {m}));
    Attrs attrs = {{"strides", attr_ints({s, 1})},
                   {"dilations", attr_ints({d, 1})},
                   {"pads", attr_ints({pick(rng, 0, 1), 1, pick(rng, 0, 1), 0})},
                   {"group", attr_i(group)}};
    ValueId y = add_activation(b, b.add1("Conv", in, attrs), trial % 6);
    b.output(y);
    expect_like_reference(b.graph(), "conv trial " + std::to_string(trial));
  }
}

TEST(OnednnBackend, Conv1dAnd3dAndAutoPad) {
  const char* pads[] = {"SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"};
  for (int i = 0; i < 4; ++i) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 3, 11});
    b.output(b.add1("Conv", {x, b.random_constant("w", {5, 3, 4})},
                    {{"auto_pad", attr_s(pads[i])}, {"strides", attr_ints({2})}}));
    expect_like_reference(b.graph(), std::string("conv1d ") + pads[i]);
  }
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 4, 5, 6, 7});
  ValueId y =
      b.add1("Conv", {x, b.random_constant("w", {6, 2, 3, 1, 2}), b.random_constant("b", {6})},
             {{"group", attr_i(2)}, {"pads", attr_ints({1, 0, 1, 1, 0, 0})}});
  b.output(b.add1("Relu", {y}));
  expect_like_reference(b.graph(), "conv3d grouped + relu");
}

TEST(OnednnBackend, ConvResidualAndChannelTails) {
  // Conv -> Add(per-channel constant) -> Add(residual) -> Relu: bias, sum, eltwise.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 8, 9, 9});
  ValueId r = b.input("r", DType::kFloat32, {2, 16, 9, 9});
  ValueId y = b.add1("Conv", {x, b.random_constant("w", {16, 8, 3, 3})},
                     {{"pads", attr_ints({1, 1, 1, 1})}});
  y = b.add1("Add", {y, b.random_constant("cb", {16, 1, 1})});
  y = b.add1("Add", {r, y});
  y = b.add1("Mul", {y, b.random_constant("scale", {1, 16, 1, 1})});
  y = b.add1("Relu", {y});
  b.output(y);
  expect_like_reference(b.graph(), "conv + bias + residual + scale + relu");
  // All five nodes are proposed as one kernel.
  EXPECT_TRUE(has_match(onednn(), b.graph(),
                        {b.graph().node(0).outputs[0], b.graph().node(1).outputs[0],
                         b.graph().node(2).outputs[0], b.graph().node(3).outputs[0], y}));
}

TEST(OnednnBackend, ConvTransposeRandomized) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 5; ++trial) {
    const int64_t group = trial % 2 ? 2 : 1, c = 4, m = 2 * group, s = pick(rng, 1, 2),
                  k = pick(rng, 2, 3), p = pick(rng, 0, 1), n = pick(rng, 1, 2);
    // The ConvTranspose alone, or followed by an activation.
    auto build = [&](bool activation) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {n, c, 5, 6});
      std::vector<ValueId> in = {x, b.random_constant("w", {c, m / group, k, k})};
      if (trial % 3 != 2) in.push_back(b.random_constant("b", {m}));
      Attrs attrs = {{"strides", attr_ints({s, s})},
                     {"pads", attr_ints({p, 0, 0, p})},
                     {"group", attr_i(group)}};
      if (s == 2) attrs["output_padding"] = attr_ints({1, 0});
      if (trial == 4) attrs = {{"strides", attr_ints({2, 2})}, {"auto_pad", attr_s("SAME_UPPER")}};
      ValueId y = b.add1("ConvTranspose", in, attrs);
      b.output(activation ? add_activation(b, y, trial + 1) : y);
      return b;
    };
    expect_like_reference(build(false).graph(), "conv transpose trial " + std::to_string(trial));
    GraphBuilder fused = build(true);
    expect_like_reference(fused.graph(), "conv transpose + activation " + std::to_string(trial));
  }
}

// ---------------------------------------------------------------------------- MatMul

TEST(OnednnBackend, MatMulShapes) {
  struct Case {
    Shape a, b;
    bool b_const;
  };
  const Case cases[] = {
      {{7, 5}, {5, 9}, true},
      {{2, 7, 5}, {5, 9}, true},  // batch folded into M
      {{3, 4, 6}, {3, 6, 5}, false},
      {{2, 3, 4, 6}, {3, 6, 5}, false},
      {{2, 1, 4, 6}, {1, 3, 6, 5}, false},
      {{6}, {6, 4}, true},
      {{3, 4, 6}, {6}, false},
  };
  for (const Case& c : cases) {
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, c.a);
    ValueId w = c.b_const ? b.random_constant("w", c.b) : b.input("w", DType::kFloat32, c.b);
    b.output(b.add1("MatMul", {a, w}));
    expect_like_reference(b.graph(),
                          "matmul " + shape_to_string(c.a) + " x " + shape_to_string(c.b));
  }
}

// BERT's FFN: MatMul -> Add(bias) -> exported GELU, and MatMul -> Add(bias) -> Add(residual).
TEST(OnednnBackend, MatMulBiasGeluAndResidual) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 6, 16});
  ValueId h = b.add1("MatMul", {x, b.random_constant("w1", {16, 32})});
  h = b.add1("Add", {h, b.random_constant("b1", {32})});
  ValueId e = b.add1("Erf", {b.add1("Div", {h, b.constant("sqrt2", Tensor::scalar(1.4142135f))})});
  ValueId g = b.add1(
      "Mul", {b.add1("Mul", {h, b.add1("Add", {e, b.constant("one", Tensor::scalar(1.0f))})}),
              b.constant("half", Tensor::scalar(0.5f))});
  ValueId o = b.add1("MatMul", {g, b.random_constant("w2", {32, 16})});
  o = b.add1("Add", {b.random_constant("b2", {16}), o});
  o = b.add1("Add", {o, x});
  b.output(o);
  // The first MatMul with its bias and GELU (7 nodes) and the second with bias + residual.
  const Graph& graph = b.graph();
  std::vector<ValueId> first_kernel, second_kernel;
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    (n < 7 ? first_kernel : second_kernel).push_back(graph.node(static_cast<NodeId>(n)).outputs[0]);
  EXPECT_TRUE(has_match(onednn(), graph, first_kernel));
  EXPECT_TRUE(has_match(onednn(), graph, second_kernel));
  // And a session on onednn alone runs them as two kernels.
  SessionOptions options;
  options.backend = "onednn";
  options.strict = true;
  Session session(graph, options);
  EXPECT_EQ(session.num_steps(), 2u);
  for (const std::string& backend : session.node_backends()) EXPECT_EQ(backend, "onednn");
  std::vector<Tensor> inputs = random_inputs(graph, 4);
  Session reference(graph, SessionOptions{});
  EXPECT_TRUE(outputs_match(session.run(inputs), reference.run(inputs)));
}

TEST(OnednnBackend, GemmVariants) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t m = pick(rng, 2, 9), k = pick(rng, 2, 9), n = pick(rng, 2, 9);
    const bool ta = trial & 1, tb = trial & 2;
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, ta ? Shape{k, m} : Shape{m, k});
    Shape bs = tb ? Shape{n, k} : Shape{k, n};
    ValueId w = trial == 5 ? b.input("w", DType::kFloat32, bs) : b.random_constant("w", bs);
    std::vector<ValueId> in = {a, w};
    if (trial % 3 == 0) in.push_back(b.random_constant("c", {n}));
    if (trial % 3 == 1) in.push_back(b.input("c", DType::kFloat32, {m, n}));
    Attrs attrs = {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}};
    if (trial >= 3) attrs["alpha"] = attr_f(0.5f);
    if (trial % 3 == 0) attrs["beta"] = attr_f(2.0f);
    b.output(add_activation(b, b.add1("Gemm", in, attrs), trial));
    expect_like_reference(b.graph(), "gemm trial " + std::to_string(trial));
  }
}

// --------------------------------------------------------------------------- Pooling

TEST(OnednnBackend, PoolingRandomized) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 8; ++trial) {
    const bool is_max = trial % 2 == 0;
    const int64_t k = pick(rng, 2, 3), s = pick(rng, 1, 2), p = pick(rng, 0, 1);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {pick(rng, 1, 2), 3, pick(rng, 6, 11), 9});
    Attrs attrs = {{"kernel_shape", attr_ints({k, k})},
                   {"strides", attr_ints({s, s})},
                   {"pads", attr_ints({p, p, p, 0})},
                   {"ceil_mode", attr_i(trial / 2 % 2)}};
    if (!is_max) attrs["count_include_pad"] = attr_i(trial == 5 ? 1 : 0);
    if (is_max && trial == 6) attrs["dilations"] = attr_ints({2, 1});
    b.output(b.add1(is_max ? "MaxPool" : "AveragePool", {x}, attrs));
    expect_like_reference(b.graph(), "pool trial " + std::to_string(trial));
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 5, 7, 6});
    b.output(b.add1(op, {x}));
    expect_like_reference(b.graph(), op);
  }
}

TEST(OnednnBackend, PoolingThenResidualAdd) {
  // NASNet's cells: a pool whose output is added to another branch of the same shape. As a
  // sum post-op oneDNN 2.6's pooling dropped the addend (the kernel returned the pool
  // alone); the tuner's check caught it, but a whole-model onednn plan ran it wrong.
  for (const char* op : {"MaxPool", "AveragePool"})
    for (int64_t stride : {1, 2}) {
      GraphBuilder b;
      const int64_t in = stride == 2 ? 23 : 12, out = 12;
      ValueId x = b.input("x", DType::kFloat32, {1, 11, in, in});
      ValueId other = b.input("other", DType::kFloat32, {1, 11, out, out});
      Attrs attrs = {{"kernel_shape", attr_ints({3, 3})},
                     {"strides", attr_ints({stride, stride})},
                     {"pads", attr_ints({1, 1, 1, 1})}};
      if (std::string(op) == "AveragePool") attrs["count_include_pad"] = attr_i(0);
      ValueId pooled = b.add1(op, {x}, attrs);
      b.output(b.add1("Add", {pooled, other}));
      const std::string what = std::string(op) + " stride " + std::to_string(stride);
      ASSERT_TRUE(has_match(onednn(), b.graph(), {pooled, b.graph().outputs[0]})) << what;
      expect_like_reference(b.graph(), what);
    }
}

// ------------------------------------------------------------------- Normalizations

TEST(OnednnBackend, BatchNormalization) {
  for (int relu = 0; relu < 2; ++relu) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 6, 5, 4});
    Tensor var(DType::kFloat32, {6});
    for (int i = 0; i < 6; ++i) var.data<float>()[i] = 0.5f + 0.1f * i;
    ValueId y = b.add1("BatchNormalization",
                       {x, b.random_constant("scale", {6}), b.random_constant("bias", {6}),
                        b.random_constant("mean", {6}), b.constant("var", var)},
                       {{"epsilon", attr_f(1e-3f)}});
    if (relu) y = b.add1("Relu", {y});
    b.output(y);
    expect_like_reference(b.graph(), relu ? "bn + relu" : "bn");
  }
}

// A BatchNormalization whose output something besides its Relu reads (a cell's residual
// or concat) is not proposed fused with the Relu: that group's kernel writes the Relu's
// output only and refused it at compile time, a failed candidate in every tune of such a
// model. Both ops are still proposed alone, and the fused pair where the Relu is the only
// reader.
TEST(OnednnBackend, BatchNormReadElsewhereIsNotFusedWithItsRelu) {
  for (int read_elsewhere = 0; read_elsewhere < 2; ++read_elsewhere) {
    GraphBuilder b;
    ValueId y = testing::batch_norm(b, b.input("x", DType::kFloat32, {1, 22, 7, 7}), 22);
    ValueId r = b.add1("Relu", {y});
    b.output(read_elsewhere ? b.add1("Add", {y, r}) : r);
    const Graph& g = b.graph();
    EXPECT_TRUE(testing::every_match_runs_like_reference(onednn(), g));
    const std::vector<NodeId> pair = {g.value(y).producer, g.value(r).producer};
    EXPECT_TRUE(has_match(onednn(), g, {y}));
    EXPECT_TRUE(has_match(onednn(), g, {r}));
    bool fused = false;
    for (const Match& m : find_matches(g, onednn())) fused |= m.nodes == pair;
    EXPECT_EQ(fused, !read_elsewhere) << (read_elsewhere ? "read elsewhere" : "read by the Relu");
  }
}

// Every (n, c) plane normalized by its own statistics: batch normalization computing them,
// over one image, or over N images seen as one of N x C channels (their planes must not
// share statistics). Random scale and bias, 1-3 spatial dims, planes of 1 to 63 elements.
TEST(OnednnBackend, InstanceNormalizationOfEachPlane) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 9; ++trial) {
    GraphBuilder b;
    const int64_t c = pick(rng, 1, 19);
    Shape shape = {trial < 6 ? 1 : pick(rng, 2, 3), c};
    for (int k = 0; k < 1 + trial % 3; ++k) shape.push_back(pick(rng, 1, 9 - 2 * (trial % 3)));
    ValueId x = b.input("x", DType::kFloat32, shape);
    b.output(b.add1("InstanceNormalization",
                    {x, b.random_constant("scale", {c}), b.random_constant("bias", {c})},
                    {{"epsilon", attr_f(trial % 2 ? 1e-3f : 1e-5f)}}));
    ASSERT_TRUE(has_match(onednn(), b.graph(), {b.graph().outputs[0]})) << trial;
    expect_like_reference(b.graph(), "instance norm of " + shape_to_string(shape));
  }
}

// Across channels, odd sizes (ONNX's window is then oneDNN's symmetric one).
TEST(OnednnBackend, LrnAcrossChannels) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 6; ++trial) {
    GraphBuilder b;
    const int64_t size = 1 + 2 * pick(rng, 0, 3);
    ValueId x =
        b.input("x", DType::kFloat32, {1, pick(rng, 2, 24), pick(rng, 1, 9), pick(rng, 1, 9)});
    b.output(b.add1("LRN", {x},
                    {{"size", attr_i(size)},
                     {"alpha", attr_f(trial % 2 ? 1e-4f : 0.3f)},
                     {"beta", attr_f(trial % 3 ? 0.75f : 0.5f)},
                     {"bias", attr_f(trial % 2 ? 1.0f : 2.0f)}}));
    ASSERT_TRUE(has_match(onednn(), b.graph(), {b.graph().outputs[0]})) << trial;
    expect_like_reference(b.graph(), "LRN size " + std::to_string(size));
  }
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 5, 5});
  b.output(b.add1("LRN", {x}, {{"size", attr_i(4)}}));
  EXPECT_FALSE(has_match(onednn(), b.graph(), {b.graph().outputs[0]}));
  testing::expect_unsupported(onednn(), b.graph(), "LRN of an even size", "LRN of size 4");
}

TEST(OnednnBackend, LayerNormalizationOp) {
  for (int64_t axis : {-1, 1}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {3, 4, 10});
    Shape ps = axis == -1 ? Shape{10} : Shape{4, 10};
    b.output(b.add1("LayerNormalization",
                    {x, b.random_constant("g", ps), b.random_constant("b", ps)},
                    {{"axis", attr_i(axis)}, {"epsilon", attr_f(1e-5f)}}));
    expect_like_reference(b.graph(), "layer norm axis " + std::to_string(axis));
  }
}

// The opset-13 exporter's LayerNorm: nine nodes, one kernel.
Graph layer_norm_decomposition(bool affine) {
  GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {2, 5, 12});
  Attrs mean_attrs = {{"axes", attr_ints({-1})}};
  ValueId mean = b.add1("ReduceMean", {x}, mean_attrs);
  ValueId d = b.add1("Sub", {x, mean});
  ValueId var = b.add1("ReduceMean", {b.add1("Pow", {d, b.constant("two", Tensor::scalar(2.0f))})},
                       mean_attrs);
  ValueId sd = b.add1("Sqrt", {b.add1("Add", {var, b.constant("eps", Tensor::scalar(1e-5f))})});
  ValueId y = b.add1("Div", {d, sd});
  if (affine) {
    y = b.add1("Mul", {y, b.random_constant("gamma", {12})});
    y = b.add1("Add", {y, b.random_constant("beta", {12})});
  }
  b.output(y);
  return b.finish();
}

TEST(OnednnBackend, LayerNormDecomposition) {
  for (bool affine : {false, true}) {
    Graph g = layer_norm_decomposition(affine);
    expect_like_reference(g, affine ? "ln decomposition affine" : "ln decomposition");
    std::vector<ValueId> all;
    for (const Node& n : g.nodes()) all.push_back(n.outputs[0]);
    EXPECT_TRUE(has_match(onednn(), g, all)) << "affine " << affine;
  }
  // Pow with exponent 3 is not a variance: the whole pattern must not be proposed.
  Graph g = layer_norm_decomposition(true);
  g.value(g.node(2).inputs[1]).constant = Tensor::scalar(3.0f);
  std::vector<ValueId> all;
  for (const Node& n : g.nodes()) all.push_back(n.outputs[0]);
  EXPECT_FALSE(has_match(onednn(), g, all));
}

TEST(OnednnBackend, SoftmaxAndLogSoftmax) {
  for (int64_t axis : {-1, 1, 0}) {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      GraphBuilder b;
      ValueId x = b.input("x", DType::kFloat32, {3, 4, 7});
      b.output(b.add1(op, {x}, {{"axis", attr_i(axis)}}));
      expect_like_reference(b.graph(), std::string(op) + " axis " + std::to_string(axis));
    }
  }
  GraphBuilder b(11);  // before opset 13: coerced to 2-D at the axis
  ValueId x = b.input("x", DType::kFloat32, {3, 4, 7});
  b.output(b.add1("Softmax", {x}, {{"axis", attr_i(1)}}));
  expect_like_reference(b.graph(), "softmax opset 11");
}

// ------------------------------------------------------------------------ Elementwise

TEST(OnednnBackend, UnaryOps) {
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Elu", "Exp", "Abs", "Neg", "Softplus",
                         "HardSwish", "HardSigmoid", "LeakyRelu"}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 3, 5});
    b.output(b.add1(op, {x}));
    expect_like_reference(b.graph(), op);
  }
  // Log / Sqrt / Reciprocal on positive inputs.
  for (const char* op : {"Log", "Sqrt", "Reciprocal"}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {4, 6});
    ValueId pos = b.add1("Add", {b.add1("Abs", {x}), b.constant("c", Tensor::scalar(0.5f))});
    b.output(b.add1(op, {pos}));
    expect_like_reference(b.graph(), op);
  }
}

TEST(OnednnBackend, BinaryBroadcastAndChains) {
  struct Case {
    const char* op;
    Shape a, b;
    bool b_const;
  };
  const Case cases[] = {
      {"Add", {2, 3, 4}, {2, 3, 4}, false}, {"Sub", {2, 3, 4}, {4}, false},
      {"Sub", {4}, {2, 3, 4}, false},       {"Mul", {2, 1, 4}, {2, 3, 4}, false},
      {"Div", {2, 3, 4}, {3, 1}, true},     {"Div", {3, 1}, {2, 3, 4}, false},
      {"Max", {2, 3, 4}, {1}, true},        {"Min", {2, 3, 4}, {2, 3, 4}, false},
      {"Pow", {2, 3, 4}, {}, true},
  };
  for (const Case& c : cases) {
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, c.a);
    ValueId v = !c.b_const    ? b.input("b", DType::kFloat32, c.b)
                : c.b.empty() ? b.constant("b", Tensor::scalar(2.0f))
                              : b.random_constant("b", c.b);
    b.output(b.add1(c.op, {a, v}));
    expect_like_reference(
        b.graph(), std::string(c.op) + " " + shape_to_string(c.a) + " " + shape_to_string(c.b));
  }
  // A chain: Add(x, y) -> Relu -> Mul(const) -> Sub(const - .) as one kernel.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {3, 8});
  ValueId y = b.input("y", DType::kFloat32, {3, 8});
  ValueId z = b.add1("Relu", {b.add1("Add", {x, y})});
  z = b.add1("Mul", {z, b.random_constant("s", {8})});
  z = b.add1("Sub", {b.constant("one", Tensor::scalar(1.0f)), z});
  b.output(z);
  expect_like_reference(b.graph(), "elementwise chain");
  EXPECT_TRUE(has_match(onednn(), b.graph(),
                        {b.graph().node(0).outputs[0], b.graph().node(1).outputs[0],
                         b.graph().node(2).outputs[0], z}));
}

// oneDNN 2.6 evaluates repeated eltwise post-ops of one kind with the first one's
// parameters: (relu(x) + 1) * 3 came out as relu(x) + 2. The backend folds adjacent linear
// ops and refuses other repeats; both chains must come out right (whole or split).
TEST(OnednnBackend, RepeatedLinearPostOps) {
  for (bool separated : {false, true}) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 3, 4, 4});
    ValueId z = b.add1("Relu", {x});
    z = b.add1("Add", {z, b.constant("one", Tensor::scalar(1.0f))});
    if (separated) z = b.add1("Sqrt", {z});
    z = b.add1("Mul", {z, b.constant("three", Tensor::scalar(3.0f))});
    b.output(z);
    const std::vector<Tensor> inputs = random_inputs(b.graph(), 7);
    Session session(b.graph(), SessionOptions{.backend = "onednn", .strict = true});
    std::vector<Tensor> got = session.run(inputs);
    Session reference(b.graph(), SessionOptions{});
    std::vector<Tensor> want = reference.run(inputs);
    EXPECT_TRUE(outputs_match(got, want)) << (separated ? "with sqrt" : "adjacent");
  }
}

TEST(OnednnBackend, GeluDecompositionStandalone) {
  // x * 0.5 first (HF BERT's order) and the (x * (1 + erf)) * 0.5 order.
  for (int order = 0; order < 2; ++order) {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {4, 9});
    ValueId e =
        b.add1("Erf", {b.add1("Div", {x, b.constant("sqrt2", Tensor::scalar(1.4142135f))})});
    ValueId one_plus = b.add1("Add", {e, b.constant("one", Tensor::scalar(1.0f))});
    ValueId half = b.constant("half", Tensor::scalar(0.5f));
    ValueId y = order == 0 ? b.add1("Mul", {b.add1("Mul", {x, half}), one_plus})
                           : b.add1("Mul", {b.add1("Mul", {x, one_plus}), half});
    b.output(y);
    expect_like_reference(b.graph(), "gelu order " + std::to_string(order));
    std::vector<ValueId> all;
    for (const Node& n : b.graph().nodes()) all.push_back(n.outputs[0]);
    EXPECT_TRUE(has_match(onednn(), b.graph(), all)) << "order " << order;
  }
}

// ---------------------------------------------------------------- Matching / refusals

TEST(OnednnBackend, FindMatchesConvRelu) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 4, 6, 6});
  ValueId c = b.add1("Conv", {x, b.random_constant("w", {8, 4, 3, 3})});
  ValueId r = b.add1("Relu", {c});
  ValueId p = b.add1("MaxPool", {r}, {{"kernel_shape", attr_ints({2, 2})}});
  b.output(p);
  const Graph& g = b.graph();
  EXPECT_TRUE(has_match(onednn(), g, {c, r}));
  EXPECT_TRUE(has_match(onednn(), g, {c}));
  EXPECT_TRUE(has_match(onednn(), g, {r}));
  EXPECT_TRUE(has_match(onednn(), g, {p}));
  // Relu and MaxPool are not a head + tail (pooling is no post-op).
  EXPECT_FALSE(has_match(onednn(), g, {c, r, p}));
  EXPECT_FALSE(has_match(onednn(), g, {r, p}));
  // When the conv's output is also read elsewhere, Conv+Relu is not proposed.
  GraphBuilder b2;
  ValueId x2 = b2.input("x", DType::kFloat32, {1, 4, 6, 6});
  ValueId c2 = b2.add1("Conv", {x2, b2.random_constant("w", {4, 4, 3, 3})});
  ValueId r2 = b2.add1("Relu", {c2});
  b2.output(r2);
  b2.output(c2);
  EXPECT_FALSE(has_match(onednn(), b2.graph(), {c2, r2}));
  EXPECT_FALSE(match_op_sets(b2.graph()).empty());
}

TEST(OnednnBackend, RefusesWhatItCannotRun) {
  {  // Conv with a computed bias (computed weights it takes: computed_weights_test).
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 2, 5, 5});
    ValueId bias = b.input("b", DType::kFloat32, {3});
    b.output(b.add1("Conv", {x, b.random_constant("w", {3, 2, 3, 3}), bias}));
    EXPECT_EQ(compile_error(b.graph()), ErrorKind::kUnsupported);
  }
  {  // A fused kernel whose interior value is read outside.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 2, 5, 5});
    ValueId c = b.add1("Conv", {x, b.random_constant("w", {3, 2, 3, 3})});
    b.output(b.add1("Relu", {c}));
    b.output(c);
    EXPECT_EQ(compile_error(b.graph()), ErrorKind::kUnsupported);
  }
  {  // Softmax followed by an op: not a post-op chain.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 5});
    b.output(b.add1("Relu", {b.add1("Softmax", {x})}));
    EXPECT_EQ(compile_error(b.graph()), ErrorKind::kUnsupported);
  }
  {  // Integer elementwise.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kInt32, {2, 5});
    ValueId y = b.input("y", DType::kInt32, {2, 5});
    b.output(b.add1("Add", {x, y}));
    EXPECT_EQ(compile_error(b.graph()), ErrorKind::kUnsupported);
  }
  {  // An op it has no primitive or step of collage's for (a lone Erf is unary_math.h's now).
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {2, 5});
    b.output(b.add1("Hardmax", {x}));
    EXPECT_EQ(compile_error(b.graph()), ErrorKind::kUnsupported);
  }
  {  // MaxPool's Indices output.
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 2, 6, 6});
    auto outs = b.add("MaxPool", {x}, {{"kernel_shape", attr_ints({2, 2})}}, 2);
    b.output(outs[0]);
    b.output(outs[1]);
    EXPECT_EQ(compile_error(b.graph()), ErrorKind::kUnsupported);
  }
}

// A small residual block through a Session placed on onednn: every node on onednn.
TEST(OnednnBackend, SessionOnResidualBlock) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 8, 10, 10});
  Attrs same = {{"pads", attr_ints({1, 1, 1, 1})}};
  ValueId y =
      b.add1("Relu",
             {b.add1("Conv",
                     {x, b.random_constant("w1", {8, 8, 3, 3}, 0.3f), b.random_constant("b1", {8})},
                     same)});
  y = b.add1("Conv", {y, b.random_constant("w2", {8, 8, 3, 3}, 0.3f), b.random_constant("b2", {8})},
             same);
  y = b.add1("Relu", {b.add1("Add", {y, x})});
  y = b.add1("GlobalAveragePool", {y});
  b.output(y);
  const Graph& g = b.graph();
  SessionOptions options;
  options.backend = "onednn";
  options.strict = true;
  Session session(g, options);
  for (const std::string& backend : session.node_backends()) EXPECT_EQ(backend, "onednn");
  EXPECT_EQ(session.num_steps(), 3u);  // conv+relu, conv+add+relu, pool
  std::vector<Tensor> inputs = random_inputs(g, 9);
  Session reference(g, SessionOptions{});
  EXPECT_TRUE(outputs_match(session.run(inputs), reference.run(inputs)));
}

}  // namespace
}  // namespace collage
