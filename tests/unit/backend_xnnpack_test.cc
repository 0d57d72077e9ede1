// The xnnpack backends (`xnnpack` op-level, `xnnpack-graph` graph-level) against the
// reference backend on randomized small graphs, plus their pattern matches and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <tuple>

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
using testing::compile_error;
using testing::GraphBuilder;
using testing::pick;

Backend& op_level() {
  return BackendRegistry::global().get("xnnpack");
}
Backend& graph_level() {
  return BackendRegistry::global().get("xnnpack-graph");
}

// `backend` compiling `graph` whole, against the reference.
::testing::AssertionResult like_reference(Backend& backend, const Graph& graph) {
  return testing::backend_matches_reference(backend, graph);
}

// Both backends must take single-op (+ clamp) graphs; the graph-level one any region.
void expect_both_match_reference(const Graph& graph, const std::string& what) {
  EXPECT_TRUE(like_reference(op_level(), graph)) << "xnnpack: " << what;
  EXPECT_TRUE(like_reference(graph_level(), graph)) << "xnnpack-graph: " << what;
}

std::vector<std::vector<NodeId>> match_sets(const Graph& graph, const Backend& backend) {
  std::vector<std::vector<NodeId>> sets;
  for (const Match& m : find_matches(graph, backend)) sets.push_back(m.nodes);
  std::sort(sets.begin(), sets.end());
  return sets;
}

// Whether xnnpack-graph proposes node `n` on its own (its single-op pattern).
bool subgraph_supports_node(const Graph& graph, NodeId n) {
  for (const Match& m : find_matches(graph, graph_level()))
    if (m.nodes == std::vector<NodeId>{n}) return true;
  return false;
}

bool contains(const std::vector<std::vector<NodeId>>& sets, const std::vector<NodeId>& set) {
  return std::find(sets.begin(), sets.end(), set) != sets.end();
}

// Appends Relu, Clip or nothing after `v` (trial t picks which).
ValueId maybe_clamp(GraphBuilder& b, ValueId v, int t) {
  if (t % 3 == 1) return b.add1("Relu", {v});
  if (t % 3 == 2)
    return b.add1("Clip", {v, b.constant("lo", Tensor::scalar<float>(-0.25f)),
                           b.constant("hi", Tensor::scalar<float>(0.5f))});
  return v;
}

TEST(XnnpackBackend, RegisteredWithVersionAndThreadModel) {
  for (Backend* b : {&op_level(), &graph_level()}) {
    EXPECT_TRUE(b->available()) << b->name();
    EXPECT_EQ(b->thread_model(), "pthreadpool");
    EXPECT_NE(b->version(), "");
    EXPECT_NE(b->version(), "unknown") << "CMake did not pass the package version in";
    EXPECT_FALSE(b->details().empty());
  }
  EXPECT_EQ(op_level().kind(), BackendKind::kOpLevel);
  EXPECT_EQ(graph_level().kind(), BackendKind::kGraphLevel);
}

TEST(XnnpackBackend, ConvRandomized) {
  std::mt19937 rng(7);
  for (int t = 0; t < 8; ++t) {
    int n = pick(rng, 1, 2), h = pick(rng, 5, 11), w = pick(rng, 5, 11);
    int k = std::vector<int>{1, 3, 5}[pick(rng, 0, 2)];
    int stride = pick(rng, 1, 2), dilation = k > 1 ? pick(rng, 1, 2) : 1;
    // Regular, grouped and depthwise (with a channel multiplier) in turn.
    int groups = std::vector<int>{1, 2, 4}[t % 3];
    int c = groups * pick(rng, 1, 3), m = groups * pick(rng, 1, 3);
    if (t % 3 == 2) c = groups;
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    std::vector<ValueId> ins = {x, b.random_constant("w", {m, c / groups, k, k})};
    if (t % 2 == 0) ins.push_back(b.random_constant("b", {m}));
    std::map<std::string, Attribute> attrs = {{"group", attr_i(groups)},
                                              {"strides", attr_ints({stride, stride})},
                                              {"dilations", attr_ints({dilation, dilation})}};
    if (t % 4 == 3)
      attrs["auto_pad"] = attr_s(t % 8 == 3 ? "SAME_UPPER" : "SAME_LOWER");
    else
      attrs["pads"] =
          attr_ints({pick(rng, 0, 2), pick(rng, 0, 2), pick(rng, 0, 2), pick(rng, 0, 2)});
    b.output(maybe_clamp(b, b.add1("Conv", ins, attrs), t));
    expect_both_match_reference(b.finish(), "conv trial " + std::to_string(t));
  }
}

TEST(XnnpackBackend, FullyConnectedRandomized) {
  std::mt19937 rng(11);
  for (int t = 0; t < 6; ++t) {
    int m = pick(rng, 1, 9), k = pick(rng, 1, 33), n = pick(rng, 1, 33);
    GraphBuilder b;
    ValueId y;
    if (t % 2 == 0) {
      // MatMul with a batched (3-D) or plain A.
      Shape a = t % 4 == 0 ? Shape{2, m, k} : Shape{m, k};
      y = b.add1("MatMul", {b.input("a", DType::kFloat32, a), b.random_constant("b", {k, n})});
    } else {
      bool trans_b = t % 3 != 0;
      std::vector<ValueId> ins = {b.input("a", DType::kFloat32, {m, k}),
                                  b.random_constant("b", trans_b ? Shape{n, k} : Shape{k, n})};
      if (t != 5) ins.push_back(b.random_constant("c", t == 1 ? Shape{n} : Shape{1, n}));
      y = b.add1("Gemm", ins,
                 {{"transB", attr_i(trans_b)}, {"alpha", attr_f(0.5f)}, {"beta", attr_f(2.0f)}});
    }
    b.output(maybe_clamp(b, y, t));
    expect_both_match_reference(b.finish(), "fully connected trial " + std::to_string(t));
  }
}

TEST(XnnpackBackend, PoolsRandomized) {
  std::mt19937 rng(13);
  for (int t = 0; t < 9; ++t) {
    int n = pick(rng, 1, 2), c = pick(rng, 1, 6), h = pick(rng, 6, 12), w = pick(rng, 6, 12);
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {n, c, h, w});
    const char* type =
        std::vector<const char*>{"MaxPool", "AveragePool", "GlobalAveragePool"}[t % 3];
    std::map<std::string, Attribute> attrs;
    if (t % 3 != 2) {
      int k = pick(rng, 2, 3), s = pick(rng, 1, 2), p = pick(rng, 0, k - 1);
      attrs = {{"kernel_shape", attr_ints({k, k})},
               {"strides", attr_ints({s, s})},
               {"pads", attr_ints({p, p, 0, p})},
               {"ceil_mode", attr_i(t >= 3)}};
      if (t % 3 == 0 && t > 3) attrs["dilations"] = attr_ints({2, 1});
    }
    b.output(b.add1(type, {x}, attrs));
    expect_both_match_reference(b.finish(), std::string(type) + " trial " + std::to_string(t));
  }
}

TEST(XnnpackBackend, AveragePoolCountIncludePadWithoutPadding) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 3, 7, 7});
  b.output(b.add1("AveragePool", {x},
                  {{"kernel_shape", attr_ints({3, 3})},
                   {"strides", attr_ints({2, 2})},
                   {"count_include_pad", attr_i(1)},
                   {"ceil_mode", attr_i(1)}}));
  expect_both_match_reference(b.finish(), "count_include_pad without pads");
}

// XNNPACK refuses a 1x1 pooling window (invalid parameter) while ONNX allows it: a strided
// 1x1 AveragePool picks every other pixel in NASNet's factorized reductions, and both
// backends proposed it, so every tune of such a model measured candidates that failed to
// compile. Neither proposes one now; every match they do propose runs like reference.
TEST(XnnpackBackend, ProposesOnlyPoolingWindowsItBuilds) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 9, 9});
  const std::map<std::string, Attribute> one_by_one = {{"kernel_shape", attr_ints({1, 1})},
                                                       {"strides", attr_ints({2, 2})}};
  ValueId picked = b.add1("AveragePool", {x}, one_by_one);
  ValueId maxed = b.add1("MaxPool", {x}, one_by_one);
  ValueId pooled = b.add1("AveragePool", {x},
                          {{"kernel_shape", attr_ints({3, 3})},
                           {"pads", attr_ints({1, 1, 1, 1})},
                           {"count_include_pad", attr_i(0)}});
  b.output(b.add1("Relu", {picked}));
  b.output(b.add1("Relu", {maxed}));
  b.output(b.add1("Relu", {pooled}));
  const Graph& g = b.graph();
  const NodeId refused[] = {g.value(picked).producer, g.value(maxed).producer};
  for (Backend* backend : {&op_level(), &graph_level()}) {
    EXPECT_TRUE(testing::every_match_runs_like_reference(*backend, g));
    bool takes_3x3 = false;
    for (const Match& m : find_matches(g, *backend)) {
      for (NodeId n : refused)
        EXPECT_EQ(std::count(m.nodes.begin(), m.nodes.end(), n), 0)
            << backend->name() << " proposes a 1x1 " << g.node(n).op_type;
      takes_3x3 |= std::count(m.nodes.begin(), m.nodes.end(), g.value(pooled).producer) > 0;
    }
    EXPECT_TRUE(takes_3x3) << backend->name() << " no longer proposes the 3x3 AveragePool";
    for (NodeId n : refused)
      EXPECT_EQ(compile_error(*backend, extract_subgraph(g, {n})), ErrorKind::kUnsupported)
          << backend->name() << " on a 1x1 " << g.node(n).op_type;
  }
}

TEST(XnnpackBackend, BinaryBroadcastRandomized) {
  struct Case {
    Shape a, c;
    bool c_constant;
  };
  const std::vector<Case> shapes = {
      {{2, 3, 4, 5}, {2, 3, 4, 5}, false}, {{2, 3, 4, 5}, {1, 3, 1, 1}, true},
      {{3, 1, 5}, {1, 4, 1}, false},       {{4, 6}, {6}, true},
      {{2, 3, 4, 5}, {5}, true},           {{2, 3, 4, 5}, {2, 3, 1, 1}, false},
      {{2, 3, 4, 5}, {3, 1, 1}, true},     {{2, 6}, {}, true}};
  const char* types[] = {"Add", "Mul", "Sub", "Div"};
  for (size_t t = 0; t < shapes.size(); ++t) {
    GraphBuilder b;
    ValueId a = b.input("a", DType::kFloat32, shapes[t].a);
    const char* type = types[t % 4];
    ValueId c;
    if (std::string(type) == "Div") {
      // A constant divisor kept away from zero.
      Tensor d(DType::kFloat32, shapes[t].c);
      for (int64_t i = 0; i < d.numel(); ++i) d.data<float>()[i] = 1.5f + 0.25f * (i % 5);
      c = b.constant("d", d);
    } else {
      c = shapes[t].c_constant ? b.random_constant("c", shapes[t].c)
                               : b.input("c", DType::kFloat32, shapes[t].c);
    }
    b.output(maybe_clamp(b, b.add1(type, {a, c}), static_cast<int>(t)));
    expect_both_match_reference(b.finish(), std::string(type) + " trial " + std::to_string(t));
  }
  // A computed lower-rank operand of a 4-D result would be broadcast against NHWC data
  // inside a region: only the op-level backend (which stays NCHW) takes it.
  GraphBuilder b;
  ValueId a = b.input("a", DType::kFloat32, {2, 3, 4, 5});
  b.output(b.add1("Add", {a, b.input("c", DType::kFloat32, {4, 5})}));
  Graph g = b.finish();
  EXPECT_TRUE(like_reference(op_level(), g));
  EXPECT_EQ(compile_error(graph_level(), g), ErrorKind::kUnsupported);
}

TEST(XnnpackBackend, ClampSigmoidSoftmax) {
  for (int opset : {6, 13}) {
    GraphBuilder b(opset);
    ValueId x = b.input("x", DType::kFloat32, {2, 3, 5});
    if (opset < 11)
      b.output(b.add1("Clip", {x}, {{"min", attr_f(-0.3f)}, {"max", attr_f(0.2f)}}));
    else
      b.output(b.add1("Clip", {x, b.constant("lo", Tensor::scalar<float>(-0.3f))}));
    expect_both_match_reference(b.finish(), "Clip at opset " + std::to_string(opset));
  }
  for (const char* type : {"Relu", "Sigmoid"}) {
    GraphBuilder b;
    b.output(b.add1(type, {b.input("x", DType::kFloat32, {3, 4, 5, 6})}));
    expect_both_match_reference(b.finish(), type);
  }
  // Softmax: opset 13 over the last axis; opset 11 flattening from axis 1.
  for (int opset : {11, 13}) {
    GraphBuilder b(opset);
    b.output(b.add1("Softmax", {b.input("x", DType::kFloat32, {3, 4, 7})}));
    expect_both_match_reference(b.finish(), "Softmax at opset " + std::to_string(opset));
  }
}

TEST(XnnpackBackend, RefusesWhatItCannotRunExactly) {
  auto single = [](const std::string& type, std::vector<ValueId> (*inputs)(GraphBuilder&),
                   std::map<std::string, Attribute> attrs, int64_t opset = 17) {
    GraphBuilder b(opset);
    std::vector<ValueId> ins = inputs(b);
    b.output(b.add1(type, ins, std::move(attrs)));
    return b.finish();
  };
  auto nchw = [](GraphBuilder& b) {
    return std::vector<ValueId>{b.input("x", DType::kFloat32, {1, 2, 6, 6})};
  };
  // Padding counted in the average: XNNPACK always excludes it.
  Graph avg = single("AveragePool", nchw,
                     {{"kernel_shape", attr_ints({3, 3})},
                      {"pads", attr_ints({1, 1, 1, 1})},
                      {"count_include_pad", attr_i(1)}});
  // Softmax over a non-innermost axis.
  Graph softmax = single("Softmax",
                         [](GraphBuilder& b) {
                           return std::vector<ValueId>{b.input("x", DType::kFloat32, {3, 4})};
                         },
                         {{"axis", attr_i(0)}});
  // Weights computed at run time.
  Graph conv = single("Conv",
                      [](GraphBuilder& b) {
                        return std::vector<ValueId>{b.input("x", DType::kFloat32, {1, 2, 5, 5}),
                                                    b.input("w", DType::kFloat32, {3, 2, 3, 3})};
                      },
                      {});
  Graph gemm = single("Gemm",
                      [](GraphBuilder& b) {
                        return std::vector<ValueId>{b.input("a", DType::kFloat32, {4, 3}),
                                                    b.random_constant("b", {4, 5})};
                      },
                      {{"transA", attr_i(1)}});
  Graph ints = single("Add",
                      [](GraphBuilder& b) {
                        return std::vector<ValueId>{b.input("a", DType::kInt32, {4}),
                                                    b.input("b", DType::kInt32, {4})};
                      },
                      {});
  Graph clip = single("Clip",
                      [](GraphBuilder& b) {
                        return std::vector<ValueId>{b.input("x", DType::kFloat32, {4}),
                                                    b.constant("lo", Tensor::scalar<float>(1.0f)),
                                                    b.constant("hi", Tensor::scalar<float>(0.0f))};
                      },
                      {});
  for (Backend* backend : {&op_level(), &graph_level()}) {
    for (const Graph* g : {&avg, &softmax, &conv, &gemm, &ints, &clip})
      EXPECT_EQ(compile_error(*backend, *g), ErrorKind::kUnsupported)
          << backend->name() << " on " << g->node(0).op_type;
  }

  // An op XNNPACK has no operator for, and (op-level) more than op + clamp.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 3});
  ValueId r = b.add1("Relu", {b.add1("Exp", {x})});
  b.output(b.add1("Sigmoid", {r}));
  Graph mixed = b.finish();
  EXPECT_EQ(compile_error(op_level(), mixed), ErrorKind::kUnsupported);
  EXPECT_EQ(compile_error(graph_level(), mixed), ErrorKind::kUnsupported);
  GraphBuilder b2;
  ValueId y = b2.add1("Relu", {b2.input("x", DType::kFloat32, {2, 3})});
  b2.output(b2.add1("Sigmoid", {b2.add1("Relu", {y})}));
  EXPECT_EQ(compile_error(op_level(), b2.finish()), ErrorKind::kUnsupported);
}

// x -> Conv -> Relu -> MaxPool -> Conv -> Add(., pooled) -> Relu -> Flatten -> Gemm -> Softmax
struct SmallCnn {
  Graph graph;
  SmallCnn() {
    GraphBuilder b;
    ValueId x = b.input("x", DType::kFloat32, {1, 3, 10, 10});
    ValueId c1 =
        b.add1("Conv", {x, b.random_constant("w1", {8, 3, 3, 3}), b.random_constant("b1", {8})},
               {{"pads", attr_ints({1, 1, 1, 1})}});  // 0
    ValueId r1 = b.add1("Relu", {c1});                // 1
    ValueId p = b.add1("MaxPool", {r1},
                       {{"kernel_shape", attr_ints({2, 2})}, {"strides", attr_ints({2, 2})}});  // 2
    ValueId c2 = b.add1("Conv", {p, b.random_constant("w2", {8, 8, 3, 3})},
                        {{"pads", attr_ints({1, 1, 1, 1})}});  // 3
    ValueId sum = b.add1("Add", {c2, p});                      // 4
    ValueId r2 = b.add1("Relu", {sum});                        // 5
    ValueId f = b.add1("Flatten", {r2});                       // 6
    ValueId fc =
        b.add1("Gemm", {f, b.random_constant("wf", {5, 200}, 0.1f)}, {{"transB", attr_i(1)}});  // 7
    b.output(b.add1("Softmax", {fc}));                                                          // 8
    graph = b.finish();
  }
};

TEST(XnnpackBackend, OpLevelMatches) {
  SmallCnn cnn;
  auto sets = match_sets(cnn.graph, op_level());
  EXPECT_TRUE(contains(sets, {0}));
  EXPECT_TRUE(contains(sets, {0, 1}));  // Conv with its Relu folded in
  EXPECT_TRUE(contains(sets, {1}));
  EXPECT_TRUE(contains(sets, {2}));
  EXPECT_TRUE(contains(sets, {4, 5}));  // Add + Relu
  EXPECT_TRUE(contains(sets, {7}));
  EXPECT_TRUE(contains(sets, {8}));
  EXPECT_FALSE(contains(sets, {6}));  // Flatten is not an XNNPACK operator here
  // The Conv -> Add is not a pattern, nor is anything larger than op + clamp.
  for (const auto& s : sets) EXPECT_LE(s.size(), 2u);

  // A conv whose pre-activation output is read elsewhere keeps its Relu separate.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 2, 5, 5});
  ValueId c = b.add1("Conv", {x, b.random_constant("w", {2, 2, 1, 1})});
  b.output(b.add1("Relu", {c}));
  b.output(c);
  auto shared = match_sets(b.finish(), op_level());
  EXPECT_TRUE(contains(shared, {0}));
  EXPECT_FALSE(contains(shared, {0, 1}));
}

TEST(XnnpackBackend, GraphLevelRegions) {
  SmallCnn cnn;
  auto sets = match_sets(cnn.graph, graph_level());
  EXPECT_TRUE(contains(sets, {0, 1, 2, 3, 4, 5}));  // the conv block as one region
  EXPECT_TRUE(contains(sets, {7, 8}));              // the classifier head
  EXPECT_TRUE(contains(sets, {0}));                 // single ops too
  for (const auto& s : sets) {
    EXPECT_FALSE(std::find(s.begin(), s.end(), 6) != s.end()) << "Flatten in a region";
    EXPECT_TRUE(is_convex(cnn.graph, s));
  }
  // The block compiled as one region matches the reference, outputs of several kinds too.
  Graph block = extract_subgraph(cnn.graph, {0, 1, 2, 3, 4, 5});
  EXPECT_TRUE(like_reference(graph_level(), block));
  Graph head = extract_subgraph(cnn.graph, {7, 8});
  EXPECT_TRUE(like_reference(graph_level(), head));
}

TEST(XnnpackBackend, RegionWithSeveralOutputsAndBroadcasts) {
  // Squeeze-and-excitation: features * sigmoid(conv(relu(conv(gap(features))))), plus a
  // per-channel constant [C,1,1] reordered to NHWC, and the features read outside too.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 8, 6, 6});
  ValueId f = b.add1("Conv", {x, b.random_constant("w", {8, 8, 3, 3})},
                     {{"pads", attr_ints({1, 1, 1, 1})}});
  f = b.add1("Add", {f, b.random_constant("bias", {8, 1, 1})});
  ValueId g = b.add1("GlobalAveragePool", {f});
  ValueId s = b.add1("Relu", {b.add1("Conv", {g, b.random_constant("w1", {4, 8, 1, 1})})});
  s = b.add1("Sigmoid", {b.add1("Conv", {s, b.random_constant("w2", {8, 4, 1, 1})})});
  b.output(b.add1("Mul", {f, s}));
  b.output(f);
  b.output(g);
  EXPECT_TRUE(like_reference(graph_level(), b.finish()));

  // Transformer-ish: 3-D activations through two fully-connected layers, residual, softmax.
  GraphBuilder t;
  ValueId h = t.input("h", DType::kFloat32, {1, 8, 16});
  ValueId u = t.add1("MatMul", {h, t.random_constant("w1", {16, 32})});
  u = t.add1("Relu", {t.add1("Add", {u, t.random_constant("b1", {32})})});
  u = t.add1("MatMul", {u, t.random_constant("w2", {32, 16})});
  t.output(t.add1("Softmax", {t.add1("Add", {u, h})}));
  EXPECT_TRUE(like_reference(graph_level(), t.finish()));
}

// The glue a CNN's head and Inception's pools need, inside one region: a zero or valued
// Pad (pads in NHWC order), and Flatten/Reshape/Squeeze of a pooled [N, C, 1, 1] (the same
// bytes in NHWC). A Flatten of a larger image stays out (its bytes differ in NHWC).
TEST(XnnpackBackend, PadsAndPooledViewsInRegions) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 4; ++trial) {
    GraphBuilder b;
    const int64_t c = pick(rng, 3, 20), hw = pick(rng, 4, 10);
    ValueId x = b.input("x", DType::kFloat32, {1, c, hw, hw});
    ValueId y = b.add1("Relu", {b.add1("Conv", {x, b.random_constant("w", {c, c, 1, 1})})});
    const int64_t p = pick(rng, 0, 1), q = pick(rng, 1, 2);
    ValueId padded = b.add1(
        "Pad",
        {y, b.constant("pads", Tensor::from_vector<int64_t>({8}, {0, 0, p, q, 0, 0, q, p}))});
    ValueId avg = b.add1("AveragePool", {padded}, {{"kernel_shape", attr_ints({3, 3})}});
    ValueId valued = b.add1(
        "Pad", {y, b.constant("p2", Tensor::from_vector<int64_t>({8}, {0, 1, 0, 1, 0, 2, 1, 0})),
                b.constant("v", Tensor::scalar<float>(0.5f))});
    ValueId pooled = b.add1("GlobalAveragePool", {b.add1("Add", {avg, avg})});
    ValueId flat =
        trial % 2 ? b.add1("Flatten", {pooled}, {{"axis", attr_i(1)}})
                  : b.add1("Reshape",
                           {pooled, b.constant("s", Tensor::from_vector<int64_t>({2}, {1, c}))});
    b.output(b.add1("Gemm", {flat, b.random_constant("fc", {5, c})}, {{"transB", attr_i(1)}}));
    b.output(b.add1("MaxPool", {valued}, {{"kernel_shape", attr_ints({2, 2})}}));
    Graph g = b.finish();
    for (size_t n = 0; n < g.num_nodes(); ++n)
      EXPECT_TRUE(subgraph_supports_node(g, static_cast<NodeId>(n))) << g.node(NodeId(n)).op_type;
    EXPECT_TRUE(like_reference(graph_level(), g)) << "trial " << trial;
  }
}

// A 4-D operand broadcast into a 5-D result (Swin-T's shifted-window attention adds a
// [1, windows, 49, 49] mask to [1, 64, windows, 49, 49] scores): a 4-D constant keeps its
// order there (it was reordered to NHWC, and XNNPACK refused the shapes when the runtime was
// set up: eight failed candidates per tune), and a 4-D value computed in the region, which is
// NHWC there, is not proposed in such a broadcast.
TEST(XnnpackBackend, FourDOperandsOfFiveDResults) {
  GraphBuilder b;
  ValueId scores = b.input("scores", DType::kFloat32, {1, 4, 2, 7, 7});
  ValueId mask = b.random_constant("mask", {1, 2, 7, 7});
  ValueId masked = b.add1("Add", {scores, mask});
  b.output(b.add1("Softmax", {masked}, {{"axis", attr_i(-1)}}));
  ValueId computed = b.add1("Relu", {b.input("m", DType::kFloat32, {1, 2, 7, 7})});
  ValueId sum = b.add1("Add", {scores, computed});
  b.output(sum);
  const Graph& g = b.graph();
  EXPECT_TRUE(testing::every_match_runs_like_reference(graph_level(), g));
  EXPECT_TRUE(subgraph_supports_node(g, g.value(masked).producer));
  EXPECT_FALSE(subgraph_supports_node(g, g.value(sum).producer));
}

TEST(XnnpackBackend, SoftmaxOnNhwcRegions) {
  // Opset 13 over channels (innermost in NHWC); opset 11 over a whole image or batch.
  for (auto [opset, axis] : std::vector<std::pair<int, int>>{{13, 1}, {11, 1}, {11, 0}}) {
    GraphBuilder b(opset);
    ValueId x = b.input("x", DType::kFloat32, {2, 5, 3, 4});
    ValueId c = b.add1("Conv", {x, b.random_constant("w", {6, 5, 1, 1})});
    b.output(b.add1("Softmax", {c}, {{"axis", attr_i(axis)}}));
    Graph g = b.finish();
    EXPECT_TRUE(like_reference(graph_level(), g)) << "opset " << opset << " axis " << axis;
    if (opset == 13) {
      // On its own, in NCHW, the channel axis is strided: the op-level backend refuses it.
      EXPECT_EQ(compile_error(op_level(), extract_subgraph(g, {1})), ErrorKind::kUnsupported);
    }
  }
  // Over W in NCHW (opset 13, axis 3) is strided in NHWC: not in a region.
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {2, 5, 3, 4});
  b.output(b.add1("Softmax", {x}, {{"axis", attr_i(3)}}));
  Graph g = b.finish();
  EXPECT_EQ(compile_error(graph_level(), g), ErrorKind::kUnsupported);
  EXPECT_TRUE(like_reference(op_level(), g));
}

TEST(XnnpackBackend, RebindsWhenCallerBuffersMove) {
  // Fully-connected operands are bound directly: new buffers must be picked up.
  GraphBuilder b;
  b.output(
      b.add1("MatMul", {b.input("a", DType::kFloat32, {3, 8}), b.random_constant("w", {8, 4})}));
  Graph g = b.finish();
  for (Backend* backend : {&op_level(), &graph_level()}) {
    std::unique_ptr<Kernel> kernel = backend->compile(g, testing::test_options());
    Session reference(g, SessionOptions{});
    for (uint64_t seed : {1, 2, 3}) {
      std::vector<Tensor> in = random_inputs(g, seed);
      std::vector<Tensor> out = {Tensor(DType::kFloat32, {3, 4})};
      kernel->run(in, out);
      EXPECT_TRUE(testing::outputs_match(out, reference.run(in)))
          << backend->name() << " seed " << seed;
    }
  }
}

TEST(XnnpackBackend, KernelsOfEveryThreadCountComputeTheSame) {
  // Each thread count has its pool (one thread: none); kernels of several counts live side
  // by side in one process, as in a plan whose concurrent stages give steps a share.
  SmallCnn cnn;
  Graph block = extract_subgraph(cnn.graph, {0, 1, 2, 3, 4, 5});
  std::vector<Tensor> in = random_inputs(block, 5);
  Session reference(block, SessionOptions{});
  const std::vector<Tensor> want = reference.run(in);
  std::vector<std::unique_ptr<Kernel>> kernels;
  for (int threads : {1, 2, 3}) kernels.push_back(graph_level().compile(block, {"", threads}));
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<Tensor> out;
    for (ValueId v : block.outputs) out.emplace_back(DType::kFloat32, block.value(v).shape);
    kernels[k]->run(in, out);
    EXPECT_TRUE(testing::outputs_match(out, want)) << "kernel " << k;
  }
}

// The threads of this process, by id.
std::set<std::string> thread_ids() {
  std::set<std::string> ids;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
    ids.insert(task.path().filename().string());
  return ids;
}

// CPU time (ns) threads `ids` have had (schedstat's first field).
uint64_t cpu_ns(const std::set<std::string>& ids) {
  uint64_t total = 0;
  for (const std::string& id : ids) {
    std::ifstream stat("/proc/self/task/" + id + "/schedstat");
    uint64_t ns = 0;
    if (stat >> ns) total += ns;
  }
  return total;
}

// A kernel's run leaves its pool's workers asleep: pthreadpool's spin after a call without
// PTHREADPOOL_FLAG_YIELD_WORKERS held a core the next kernel (of another library) needed
// (thread_pool.h, yield_workers). Seven threads: a pool no other test makes, so its workers
// are the threads this test starts (others, such as OpenBLAS's, spin on their own terms).
TEST(XnnpackBackend, KernelsLeaveTheirPoolAsleep) {
  SmallCnn cnn;
  const Graph conv = extract_subgraph(cnn.graph, {0});
  const Graph block = extract_subgraph(cnn.graph, {0, 1, 2, 3, 4, 5});
  const std::set<std::string> before = thread_ids();
  std::unique_ptr<Kernel> op_kernel = op_level().compile(conv, {"", 7});
  std::unique_ptr<Kernel> region_kernel = graph_level().compile(block, {"", 7});
  std::set<std::string> workers;
  for (const std::string& id : thread_ids())
    if (!before.count(id)) workers.insert(id);
  ASSERT_FALSE(workers.empty()) << "no pool thread was started";
  for (auto [name, kernel, g] : {std::tuple{"xnnpack", op_kernel.get(), &conv},
                                 std::tuple{"xnnpack-graph", region_kernel.get(), &block}}) {
    std::vector<Tensor> inputs = random_inputs(*g, 5);
    std::vector<Tensor> out;
    for (ValueId v : g->outputs) out.emplace_back(DType::kFloat32, g->value(v).shape);
    for (int run = 0; run < 3; ++run) kernel->run(inputs, out);
    const uint64_t start = cpu_ns(workers);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double spent_ms = static_cast<double>(cpu_ns(workers) - start) / 1e6;
    EXPECT_LT(spent_ms, 5.0) << name << ": the pool's workers ran " << spent_ms
                             << " ms while the caller slept 50 ms after its runs";
  }
}

TEST(XnnpackBackend, RunsWholeModelsThroughTheSession) {
  for (const char* name : {"xnnpack", "xnnpack-graph"}) {
    SmallCnn cnn;
    SessionOptions options;
    options.backend = name;
    options.strict = true;
    Session session(cnn.graph, options);
    std::vector<std::string> placed = session.node_backends();
    EXPECT_EQ(placed[0], name);
    EXPECT_EQ(placed[6], "reference");  // Flatten
    Session reference(cnn.graph, SessionOptions{});
    std::vector<Tensor> in = random_inputs(cnn.graph, 9);
    EXPECT_TRUE(testing::outputs_match(session.run(in), reference.run(in))) << name;
  }
}

}  // namespace
}  // namespace collage
