// Shape inference with folding, constant folding, dead-code removal, model_stats and the
// import lowerings.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <utility>

#include "backend_test_util.h"
#include "collage/model.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "import_test_util.h"
#include "op_test_util.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::expect_error;
using testing::kTestDomain;
using testing::test_data;

class Passes : public ::testing::Test {
 protected:
  void SetUp() override { testing::register_test_ops(); }
};

Node test_node(const std::string& name, const std::string& op, std::vector<ValueId> in,
               std::vector<ValueId> out) {
  return Node{name, op, kTestDomain, std::move(in), std::move(out), {}};
}

// k (constant) -> AddOne -> k1 -> AddW(x, k1) -> y
Graph constant_branch_graph() {
  Graph g;
  ValueId x = g.add_value("x", DType::kFloat32, {3}, true);
  ValueId k = g.add_constant("k", Tensor::from_vector<float>({3}, {1, 2, 3}));
  ValueId k1 = g.add_value("k1");
  ValueId y = g.add_value("y");
  g.add_node(test_node("inc", "AddOne", {k}, {k1}));
  g.add_node(test_node("add", "AddW", {x, k1}, {y}));
  g.inputs = {x};
  g.outputs = {y};
  return g;
}

TEST_F(Passes, InferShapesFoldsAsItGoes) {
  Graph g = constant_branch_graph();
  infer_shapes(g, {});
  const Value& k1 = g.value(*g.find_value("k1"));
  ASSERT_TRUE(k1.is_constant());
  EXPECT_EQ(k1.constant.to_float_vector(), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(g.num_nodes(), 2u);  // folded, but removal is fold_constants' job
  const Value& y = g.value(*g.find_value("y"));
  EXPECT_EQ(y.shape, (Shape{3}));
  EXPECT_FALSE(y.is_constant());  // x is a runtime input

  fold_constants(g, {});
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.node(0).name, "add");
  const Value& folded = g.value(g.node(0).inputs[1]);
  EXPECT_EQ(folded.producer, -1);
  EXPECT_EQ(folded.constant.to_float_vector(), (std::vector<float>{2, 3, 4}));
  EXPECT_FALSE(g.find_value("k").has_value());  // no longer referenced
  g.validate();
}

TEST_F(Passes, LoadFoldsAChainIntoAConstantOutput) {
  int runs_before = testing::add_one_runs;
  Graph g = load_model(test_data("fold_chain.onnx"));
  EXPECT_EQ(testing::add_one_runs - runs_before, 2);  // each AddOne evaluated once
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.node(0).op_type, "AddW");
  ASSERT_EQ(g.outputs.size(), 2u);
  const Value& c = g.value(g.outputs[1]);
  EXPECT_EQ(c.name, "c");
  ASSERT_TRUE(c.is_constant());
  EXPECT_EQ(c.constant.to_float_vector(), (std::vector<float>{3, 4, 5}));
}

TEST_F(Passes, WithoutOptimizeEveryNodeStaysAndComputes) {
  LoadOptions options;
  options.optimize = false;
  Graph g = load_model(test_data("fold_chain.onnx"), options);
  EXPECT_EQ(g.num_nodes(), 3u);
  for (const Node& node : g.nodes())
    for (ValueId v : node.outputs) {
      EXPECT_FALSE(g.value(v).is_constant()) << g.value(v).name;
      EXPECT_TRUE(g.value(v).shape_known);
    }
}

TEST_F(Passes, DeadCodeIsRemoved) {
  Graph g = load_model(test_data("dead_code.onnx"));
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.node(0).name, "live");
  EXPECT_FALSE(g.find_value("u").has_value());
  EXPECT_FALSE(g.find_value("t").has_value());

  LoadOptions options;
  options.optimize = false;
  EXPECT_EQ(load_model(test_data("dead_code.onnx"), options).num_nodes(), 3u);
}

TEST_F(Passes, DeadCodeRemovalKeepsInputsAndConstantOutputs) {
  Graph g;
  ValueId x = g.add_value("x", DType::kFloat32, {2}, true);
  ValueId unused = g.add_value("unused");
  ValueId c = g.add_constant("c", Tensor::from_vector<float>({1}, {7}));
  g.add_node(test_node("n", "NegT", {x}, {unused}));
  g.inputs = {x};
  g.outputs = {c};
  remove_dead_code(g);
  EXPECT_EQ(g.num_nodes(), 0u);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.value(g.inputs[0]).name, "x");
  EXPECT_EQ(g.value(g.outputs[0]).constant.to_float_vector(), (std::vector<float>{7}));
}

TEST_F(Passes, UnsupportedOpsAreAllListed) {
  Graph g;
  ValueId x = g.add_value("x", DType::kFloat32, {2}, true);
  ValueId a = g.add_value("a");
  ValueId b = g.add_value("b");
  g.add_node(Node{"first", "Frobnicate", "", {x}, {a}, {}});
  g.add_node(Node{"second", "Custom", "com.example", {a}, {b}, {}});
  g.inputs = {x};
  g.outputs = {b};
  expect_error([&] { infer_shapes(g, {}); }, ErrorKind::kUnsupported,
               "node 'first': op 'Frobnicate' is not supported");
  expect_error([&] { infer_shapes(g, {}); }, ErrorKind::kUnsupported, "com.example.Custom");
}

TEST_F(Passes, InferredTensorOverTheLimit) {
  Graph g = constant_branch_graph();
  LoadOptions options;
  options.max_tensor_bytes = 8;
  expect_error([&] { infer_shapes(g, options); }, ErrorKind::kLimit, "'k1'");
}

TEST_F(Passes, ShapeFunctionErrorsNameTheNode) {
  Graph g;
  ValueId x = g.add_value("x", DType::kFloat32, {2}, true);
  ValueId z = g.add_value("z", DType::kFloat32, {3}, true);
  ValueId y = g.add_value("y");
  g.add_node(test_node("mismatch", "AddW", {x, z}, {y}));
  g.inputs = {x, z};
  g.outputs = {y};
  expect_error([&] { infer_shapes(g, {}); }, ErrorKind::kShape, "node 'mismatch'");
}

TEST_F(Passes, ShapeGatherConcatReshapeChainFolds) {
  Graph g = load_model(test_data("shape_chain.onnx"));
  ASSERT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.node(0).op_type, "Reshape");
  const Value& shape = g.value(g.node(0).inputs[1]);
  ASSERT_TRUE(shape.is_constant());
  EXPECT_EQ(shape.constant.to_int_vector(), (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(g.value(g.outputs[0]).shape, (Shape{2, 12}));
}

TEST_F(Passes, LegacyBroadcastAxisReshapesTheConstant) {
  Graph g;
  g.opset = 6;
  ValueId a = g.add_value("a", DType::kFloat32, {2, 3, 4}, true);
  ValueId b = g.add_constant("b", Tensor::from_vector<float>({3}, {1, 2, 3}));
  ValueId y = g.add_value("y");
  Node add{"add", "Add", "", {a, b}, {y}, {}};
  add.attrs["broadcast"] = testing::attr_i(1);
  add.attrs["axis"] = testing::attr_i(1);
  g.add_node(add);
  g.inputs = {a};
  g.outputs = {y};
  infer_shapes(g, {});
  EXPECT_EQ(g.value(y).shape, (Shape{2, 3, 4}));
  EXPECT_EQ(g.value(g.node(0).inputs[1]).shape, (Shape{3, 1}));
  EXPECT_FALSE(g.node(0).has_attr("axis"));
}

TEST(ModelStats, CountsMacsOfTheHeavyOps) {
  Graph g;
  auto tensor = [&](const std::string& name, Shape s) {
    return g.add_value(name, DType::kFloat32, std::move(s), true);
  };
  auto weight = [&](const std::string& name, Shape s) {
    return g.add_constant(name, Tensor(DType::kFloat32, std::move(s)));
  };
  ValueId x = tensor("x", {1, 3, 8, 8});
  ValueId conv_out = tensor("c", {1, 4, 8, 8});
  g.add_node(
      Node{"conv", "Conv", "", {x, weight("W", {4, 3, 3, 3}), weight("B", {4})}, {conv_out}, {}});
  ValueId t_in = tensor("ti", {1, 2, 3, 3});
  g.add_node(Node{"convt",
                  "ConvTranspose",
                  "",
                  {t_in, weight("Wt", {2, 4, 3, 3})},
                  {tensor("to", {1, 4, 5, 5})},
                  {}});
  Node gemm{
      "gemm", "Gemm", "", {tensor("ga", {5, 2}), weight("gb", {5, 7})}, {tensor("go", {2, 7})}, {}};
  gemm.attrs["transA"] = testing::attr_i(1);
  g.add_node(gemm);
  g.add_node(Node{"mm",
                  "MatMul",
                  "",
                  {tensor("ma", {3, 2, 5}), tensor("mb", {5, 4})},
                  {tensor("mo", {3, 2, 4})},
                  {}});
  g.add_node(Node{"relu", "Relu", "", {conv_out}, {tensor("r", {1, 4, 8, 8})}, {}});
  g.add_constant("unused_weight", Tensor(DType::kFloat32, {100}));
  g.add_constant("int_constant", Tensor(DType::kInt64, {100}));

  ModelStats s = model_stats(g);
  // Conv: 256 outputs x 27; ConvTranspose: 18 inputs x 36; Gemm: 14 x 5; MatMul: 24 x 5.
  const double macs = 256 * 27 + 18 * 36 + 14 * 5 + 24 * 5;
  EXPECT_DOUBLE_EQ(s.gflops, 2 * macs / 1e9);
  EXPECT_EQ(s.parameters, 108 + 4 + 72 + 35);
  EXPECT_EQ(s.op_histogram.at("Conv"), 1);
  EXPECT_EQ(s.op_histogram.at("Relu"), 1);
  EXPECT_EQ(s.op_histogram.size(), 5u);
}

}  // namespace
}  // namespace collage

namespace collage {
namespace {

// `g` saved as ONNX and loaded back with the import passes (first) and without (second).
std::pair<Graph, Graph> load_both_ways(const Graph& g) {
  const std::string bytes = model_to_bytes(g);
  LoadOptions plain;
  plain.optimize = false;
  return {load_model_from_bytes(bytes, ""), load_model_from_bytes(bytes, "", plain)};
}

// The op types of `g`'s nodes in order, each followed by a space.
std::string op_list(const Graph& g) {
  std::string out;
  for (const Node& n : g.nodes()) out += n.op_type + " ";
  return out;
}

// Identity and inference-form Dropout (a training-mode one of ratio 0 too) vanish on import,
// as do ops their constants make copies (a Pad of zeros, an identity Transpose, a Slice of
// everything, a Reshape to the same shape, a Cast to the same type, a one-input Concat); a
// reversing Slice, a real Transpose, a Dropout whose mask is read and one whose output is the
// graph's stay. Outputs unchanged.
TEST(RemoveIdentities, NoOpNodesGoUnlessTheirOutputIsNeeded) {
  using testing::attr_i;
  using testing::attr_ints;
  testing::GraphBuilder b(13);
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    return b.constant(name, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  };
  ValueId x = b.input("x", DType::kFloat32, {2, 5});
  ValueId ratio = b.constant("ratio", Tensor::from_vector<float>({}, {0.0f}));
  ValueId training = b.constant("training", Tensor::from_vector<bool>({}, {true}));
  ValueId y = b.add1("Relu", {b.add1("Identity", {x})});
  y = b.add1("Dropout", {y, ratio, training});
  y = b.add1("Pad", {y, ints("zeros", {0, 0, 0, 0})});
  y = b.add1("Transpose", {y}, {{"perm", attr_ints({0, 1})}});
  y = b.add1("Slice", {y, ints("starts", {0}), ints("ends", {5}), ints("axes", {1})});
  y = b.add1("Reshape", {y, ints("shape", {2, 5})});
  y = b.add1("Cast", {y}, {{"to", attr_i(1)}});
  y = b.add1("Concat", {y}, {{"axis", attr_i(0)}});
  y = b.add1("Slice", {y, ints("starts2", {4}), ints("ends2", {-6}), ints("axes2", {1}),
                       ints("steps", {-1})});  // reversed: stays
  y = b.add1("Transpose", {b.add1("Reshape", {y, ints("square", {5, 2})})},
             {{"perm", attr_ints({1, 0})}});  // stays
  std::vector<ValueId> with_mask = b.add("Dropout", {y}, {}, 2);
  ValueId mask = b.add1("Cast", {with_mask[1]}, {{"to", attr_i(1)}});
  b.output(b.add1("Dropout", {b.add1("Sigmoid", {with_mask[0]})}));
  b.output(mask);
  const auto [optimized, kept] = load_both_ways(b.graph());
  EXPECT_EQ(kept.num_nodes(), 16u) << op_list(kept);
  EXPECT_EQ(op_list(optimized), "Relu Slice Reshape Transpose Dropout Cast Sigmoid Dropout ");
  const std::vector<Tensor> inputs = random_inputs(kept, 4);
  const std::vector<Tensor> want = Session(kept, SessionOptions{}).run(inputs);
  const std::vector<Tensor> got = Session(optimized, SessionOptions{}).run(inputs);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(testing::outputs_match(got, want, Tolerance{0, 0}));
}

// A BatchNormalization after a Conv (with and without a bias, grouped, the graph's output) is
// folded into its weights on import; one whose input is read twice, or made by a Relu or a
// ConvTranspose, stays. Outputs as the unfolded graph's.
TEST(FoldBatchNorms, IntoTheConvolutionBeforeThem) {
  using testing::attr_i;
  using testing::attr_ints;
  using testing::batch_norm;
  testing::GraphBuilder b(17);
  ValueId x = b.input("x", DType::kFloat32, {1, 4, 7, 6});
  const std::map<std::string, Attribute> pad = {{"pads", attr_ints({1, 1, 1, 1})}};
  ValueId y =
      b.add1("Conv", {x, b.random_constant("w1", {8, 4, 3, 3}), b.random_constant("b1", {8})}, pad);
  y = b.add1("Relu", {batch_norm(b, y, 8)});
  y = batch_norm(b, b.add1("Conv", {y, b.random_constant("w2", {6, 8, 1, 1})}), 6);
  b.output(batch_norm(
      b, b.add1("Conv", {y, b.random_constant("w3", {10, 3, 2, 2})}, {{"group", attr_i(2)}}), 10));
  // Stay: the conv output is read by the Add too; a Relu, a ConvTranspose.
  ValueId c = b.add1("Conv", {y, b.random_constant("w4", {6, 6, 1, 1})});
  ValueId twice = b.add1("Add", {batch_norm(b, c, 6), c});
  b.output(batch_norm(b, b.add1("Relu", {twice}), 6));
  b.output(batch_norm(b,
                      b.add1("ConvTranspose", {y, b.random_constant("w5", {6, 5, 2, 2})},
                             {{"strides", attr_ints({2, 2})}}),
                      5));
  const auto [folded, kept] = load_both_ways(b.graph());
  EXPECT_EQ(op_list(folded),
            "Conv Relu Conv Conv Conv BatchNormalization Add Relu BatchNormalization "
            "ConvTranspose BatchNormalization ");
  EXPECT_EQ(folded.outputs.size(), 3u);
  const std::vector<Tensor> inputs = random_inputs(kept, 4);
  const std::vector<Tensor> want = Session(kept, SessionOptions{}).run(inputs);
  const std::vector<Tensor> got = Session(folded, SessionOptions{}).run(inputs);
  EXPECT_EQ(compare_outputs(got, want, Tolerance::backend_vs_reference()), "");
}

// Runs `lowered` (the graph loaded with the import lowerings) on the reference kernels, within
// `on_reference`, and on onednn-graph and onednn (strict: every node on that backend), within
// `on_backends`, each against the reference kernels on `kept` (loaded without them);
// onednn-graph must take it as one region.
void expect_lowered_runs_fast_and_right(const Graph& lowered, const Graph& kept, int seed,
                                        Tolerance on_reference = Tolerance::backend_vs_reference(),
                                        Tolerance on_backends = Tolerance::backend_vs_reference()) {
  const std::vector<Tensor> inputs = random_inputs(kept, seed);
  const std::vector<Tensor> want = Session(kept, SessionOptions{}).run(inputs);
  EXPECT_TRUE(
      testing::outputs_match(Session(lowered, SessionOptions{}).run(inputs), want, on_reference));
  for (const char* backend : {"onednn-graph", "onednn"}) {
    SessionOptions on;
    on.backend = backend;
    on.strict = true;
    Session session(lowered, on);
    EXPECT_TRUE(testing::outputs_match(session.run(inputs), want, on_backends)) << backend;
    for (const PlanGroup& group : session.plan().groups) EXPECT_EQ(group.backend, backend);
    if (std::string(backend) == "onednn-graph") EXPECT_EQ(session.num_steps(), 1u);
  }
}

// A Pad in "reflect" or "edge" mode (random ranks, shapes and pads; pads as an input and,
// before opset 11, as an attribute; opsets 9, 10 and 13) is lowered on import to Slices and
// Concats that compute what the reference Pad kernel does, element for element; between two
// Relus, onednn-graph then takes the whole graph as one region (before, the Pad was the
// reference kernel's and cut it in three). A negative pad (a crop), a "constant" one and one
// over 8 wide stay Pads.
TEST(LowerEdgePads, ComputesWhatTheReferencePadDoesAndLeavesNoHole) {
  using testing::attr_ints;
  using testing::attr_s;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const bool reflect = trial % 2 == 0, as_attribute = trial % 3 == 0;
    const size_t rank = 3 + trial % 3;
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(2 + static_cast<int64_t>(rng() % 5));
    std::vector<int64_t> pads(2 * rank, 0);
    for (size_t i = 0; i < pads.size(); ++i) {
      const int64_t limit = std::min<int64_t>(3, reflect ? shape[i % rank] - 1 : 3);
      pads[i] = static_cast<int64_t>(rng() % (limit + 1));
    }
    pads[rank - 1] = 1;  // some padding
    SCOPED_TRACE(fmt::format("trial {} {} shape [{}] pads [{}]", trial,
                             reflect ? "reflect" : "edge", fmt::join(shape, ","),
                             fmt::join(pads, ",")));
    // Opset 9: the lowering's Slices take their bounds as attributes; 10: as inputs.
    testing::GraphBuilder b(as_attribute ? (trial % 2 ? 9 : 10) : 13);
    ValueId y = b.add1("Relu", {b.input("x", DType::kFloat32, shape)});
    std::map<std::string, Attribute> attrs = {{"mode", attr_s(reflect ? "reflect" : "edge")}};
    if (as_attribute) {
      attrs["pads"] = attr_ints(pads);
      y = b.add1("Pad", {y}, attrs);
    } else {
      const ValueId p = b.constant(
          "pads", Tensor::from_vector<int64_t>({static_cast<int64_t>(pads.size())}, pads));
      y = b.add1("Pad", {y, p}, attrs);
    }
    b.output(b.add1("Relu", {y}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(kept), "Relu Pad Relu ");
    EXPECT_EQ(op_list(lowered).find("Pad"), std::string::npos) << op_list(lowered);
    expect_lowered_runs_fast_and_right(lowered, kept, trial, Tolerance{0, 0}, Tolerance{0, 0});
  }
  // What stays a Pad.
  for (const auto& [mode, pads] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"reflect", {0, 0, -1, 0, 0, 1}},
                                                                 {"constant", {0, 0, 1, 0, 0, 1}},
                                                                 {"edge", {0, 0, 9, 0, 0, 0}}}) {
    testing::GraphBuilder b(13);
    const ValueId p =
        b.constant("pads", Tensor::from_vector<int64_t>({static_cast<int64_t>(pads.size())}, pads));
    b.output(
        b.add1("Pad", {b.input("x", DType::kFloat32, {2, 3, 4}), p}, {{"mode", attr_s(mode)}}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered), "Pad ") << mode << " " << fmt::format("{}", fmt::join(pads, ","));
  }
}

// A Pad that crops (a negative pad; random ranks, shapes and pads, as an attribute before
// opset 11 and as an input after it, with a constant value or without) is lowered on import to
// Slices of the cropped axes, then in "constant" mode a Pad of the sides that grow, which
// compute what the reference Pad does, element for element; between two Relus onednn-graph
// then takes the whole graph as one region and onednn every node (the crop was the reference
// kernel's: onednn's Pad takes no negative pads).
TEST(LowerEdgePads, CropsBecomeSlicesAndLeaveNoHole) {
  using testing::attr_f;
  using testing::attr_ints;
  using testing::attr_s;
  std::mt19937 rng(23);
  for (int trial = 0; trial < 12; ++trial) {
    const std::string mode = trial % 3 == 0 ? "constant" : trial % 3 == 1 ? "reflect" : "edge";
    const bool as_attribute = trial % 4 == 0;
    const size_t rank = 3 + trial % 3;
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(5 + static_cast<int64_t>(rng() % 4));
    std::vector<int64_t> pads(2 * rank, 0);
    for (int64_t& p : pads) p = static_cast<int64_t>(rng() % 4) - 2;  // -2 .. 1: never empty
    pads[rng() % pads.size()] = -1;                                   // a crop at least
    if (mode != "constant")
      for (int64_t& p : pads) p = std::min<int64_t>(p, 0);  // those modes only crop here
    SCOPED_TRACE(fmt::format("{} pads [{}] on [{}]{}", mode, fmt::join(pads, ","),
                             fmt::join(shape, ","), as_attribute ? " (attribute)" : ""));
    testing::GraphBuilder b(as_attribute ? 9 : 13);
    ValueId y = b.add1("Relu", {b.input("x", DType::kFloat32, shape)});
    std::map<std::string, Attribute> attrs = {{"mode", attr_s(mode)}};
    if (as_attribute) {
      attrs["pads"] = attr_ints(pads);
      attrs["value"] = attr_f(0.5f);
      y = b.add1("Pad", {y}, attrs);
    } else {
      const ValueId p = b.constant(
          "pads", Tensor::from_vector<int64_t>({static_cast<int64_t>(pads.size())}, pads));
      y = b.add1("Pad", {y, p, b.constant("value", Tensor::scalar(-0.25f))}, attrs);
    }
    b.output(b.add1("Relu", {y}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(kept), "Relu Pad Relu ");
    const bool grows = std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p > 0; });
    EXPECT_EQ(op_list(lowered).find("Pad") != std::string::npos, grows) << op_list(lowered);
    EXPECT_NE(op_list(lowered).find("Slice"), std::string::npos) << op_list(lowered);
    expect_lowered_runs_fast_and_right(lowered, kept, trial, Tolerance{0, 0}, Tolerance{0, 0});
  }
}

// Selu, Celu, ThresholdedRelu, Shrink, variadic Sum/Mean/Max/Min (one to four inputs, broadcast
// shapes) and ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum (random axes, keepdims or not,
// opsets 11 and 13) are lowered on import to the ops ONNX defines them by, which compute what their
// reference kernels do; between two elementwise ops onednn-graph then takes the whole graph as one
// region (before, the op was the reference kernel's and cut it). Binary Max and Min, and a
// float64 Selu, stay as they are.
TEST(LowerFunctionOps, ComputeWhatTheReferenceKernelsDoAndLeaveNoHole) {
  using testing::attr_f;
  using testing::attr_i;
  using testing::attr_ints;
  std::mt19937 rng(5);
  auto random_shape = [&](size_t rank) {
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(2 + static_cast<int64_t>(rng() % 5));
    return shape;
  };
  int seed = 0;
  // Activations, with the attributes' defaults and without.
  for (const auto& [op, attrs] :
       std::vector<std::pair<std::string, std::map<std::string, Attribute>>>{
           {"Selu", {}},
           {"Selu", {{"alpha", attr_f(1.3f)}, {"gamma", attr_f(0.8f)}}},
           {"Celu", {}},
           {"Celu", {{"alpha", attr_f(0.4f)}}},
           {"ThresholdedRelu", {}},
           {"ThresholdedRelu", {{"alpha", attr_f(-0.3f)}}},
           {"Shrink", {}},
           {"Shrink", {{"bias", attr_f(0.2f)}, {"lambd", attr_f(0.7f)}}}}) {
    SCOPED_TRACE(fmt::format("{} with {} attributes", op, attrs.size()));
    testing::GraphBuilder b(13);
    ValueId y = b.add1("Tanh", {b.input("x", DType::kFloat32, random_shape(2 + rng() % 3))});
    y = b.add1(op, {b.add1("Mul", {y, b.constant("three", Tensor::scalar<float>(3.0f))})}, attrs);
    b.output(b.add1("Tanh", {y}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered).find(op), std::string::npos) << op_list(lowered);
    expect_lowered_runs_fast_and_right(lowered, kept, ++seed);
  }
  // Variadic ops: each input a Tanh of its own, some broadcast.
  for (const auto& [op, n] : std::vector<std::pair<std::string, size_t>>{
           {"Sum", 1}, {"Sum", 2}, {"Sum", 4}, {"Mean", 3}, {"Max", 3}, {"Min", 4}, {"Mean", 1}}) {
    SCOPED_TRACE(fmt::format("{} of {}", op, n));
    testing::GraphBuilder b(13);
    const Shape full = random_shape(3);
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < n; ++i) {
      Shape shape = full;
      if (i % 2 == 1) shape[rng() % 3] = 1;  // broadcast along one axis
      inputs.push_back(b.add1("Tanh", {b.input(fmt::format("x{}", i), DType::kFloat32, shape)}));
    }
    b.output(b.add1("Tanh", {b.add1(op, inputs)}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    // Sum and Mean go; Max and Min stay binary.
    for (const Node& node : lowered.nodes()) {
      EXPECT_NE(node.op_type, op == "Sum" || op == "Mean" ? op : "") << op_list(lowered);
      EXPECT_LE(node.inputs.size(), 2u) << op_list(lowered);
    }
    expect_lowered_runs_fast_and_right(lowered, kept, ++seed);
  }
  // Reductions.
  for (const std::string op :
       {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    for (const int64_t opset : {11, 13}) {
      const size_t rank = 2 + rng() % 3;
      std::vector<int64_t> axes;
      for (int64_t a = 0; a < static_cast<int64_t>(rank); ++a)
        if (rng() % 2) axes.push_back(rng() % 2 ? a : a - static_cast<int64_t>(rank));
      const int64_t keepdims = static_cast<int64_t>(rng() % 2);
      SCOPED_TRACE(fmt::format("{} opset {} rank {} axes [{}] keepdims {}", op, opset, rank,
                               fmt::join(axes, ","), keepdims));
      testing::GraphBuilder b(opset);
      // Sigmoid: positive sums for ReduceLogSum's Log.
      const ValueId x = b.add1("Sigmoid", {b.input("x", DType::kFloat32, random_shape(rank))});
      std::map<std::string, Attribute> attrs = {{"keepdims", attr_i(keepdims)}};
      if (!axes.empty()) attrs["axes"] = attr_ints(axes);  // none: every axis
      b.output(b.add1("Tanh", {b.add1(op, {x}, attrs)}));
      const auto [lowered, kept] = load_both_ways(b.graph());
      EXPECT_EQ(op_list(lowered).find(op), std::string::npos) << op_list(lowered);
      expect_lowered_runs_fast_and_right(lowered, kept, ++seed);
    }
  // ReduceLogSumExp where an axis's maximum is not finite: every element -inf, one +inf, one
  // NaN; the result is that maximum, as the reference kernel returns it.
  {
    testing::GraphBuilder b(13);
    b.output(b.add1("ReduceLogSumExp", {b.input("x", DType::kFloat32, {4, 3, 2})},
                    {{"axes", attr_ints({1})}, {"keepdims", attr_i(0)}}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered).find("ReduceLogSumExp"), std::string::npos) << op_list(lowered);
    std::vector<Tensor> inputs = random_inputs(kept, 9);
    float* x = inputs[0].data<float>();
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < 3; ++k) x[k * 2] = -inf;          // [0, :, 0]
    x[6 + 2 * 1 + 1] = inf;                                   // [1, 1, 1]
    x[12 + 2 * 2] = std::numeric_limits<float>::quiet_NaN();  // [2, 2, 0]
    const std::vector<Tensor> want = Session(kept, SessionOptions{}).run(inputs);
    ASSERT_TRUE(std::isinf(want[0].data<float>()[0]) && std::isinf(want[0].data<float>()[3]) &&
                std::isnan(want[0].data<float>()[4]));
    EXPECT_TRUE(testing::outputs_match(Session(lowered, SessionOptions{}).run(inputs), want));
    SessionOptions on;
    on.backend = "onednn-graph";
    on.strict = true;
    EXPECT_TRUE(testing::outputs_match(Session(lowered, on).run(inputs), want));
  }
  // What stays.
  {
    testing::GraphBuilder b(13);
    const ValueId x = b.input("x", DType::kFloat32, {2, 3});
    b.output(b.add1("Max", {x, b.input("y", DType::kFloat32, {2, 3})}));
    b.output(b.add1("Selu", {b.input("z", DType::kFloat64, {2, 3})}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered), "Max Selu ");
  }
}

// LpPool (orders 1-3, 1-D and 2-D windows, strides, explicit pads and auto_pad; opsets 11 and
// 13) and GlobalLpPool (1-3 spatial axes; the ReduceSum's axes an attribute at opset 11, an
// input at 13) are lowered on import to a pooled or reduced sum of powers and its root, which
// compute what the reference's pooling loop does; between two Tanhs onednn-graph then takes
// the whole graph as one region.
TEST(LowerFunctionOps, LpPoolsComputeWhatTheReferenceKernelsDoAndLeaveNoHole) {
  using testing::attr_i;
  using testing::attr_ints;
  using testing::attr_s;
  std::mt19937 rng(29);
  for (int trial = 0; trial < 12; ++trial) {
    const bool global = trial % 4 == 3;
    const int64_t p = 1 + trial % 3, opset = trial % 2 ? 11 : 13;
    const size_t spatial = global ? 1 + trial % 3 : 1 + trial % 2;
    Shape shape = {1 + static_cast<int64_t>(rng() % 2), 2 + static_cast<int64_t>(rng() % 4)};
    for (size_t d = 0; d < spatial; ++d) shape.push_back(5 + static_cast<int64_t>(rng() % 6));
    std::map<std::string, Attribute> attrs = {{"p", attr_i(p)}};
    if (!global) {
      std::vector<int64_t> kernel, strides, pads(2 * spatial);
      for (size_t d = 0; d < spatial; ++d) {
        kernel.push_back(2 + static_cast<int64_t>(rng() % 2));
        strides.push_back(1 + static_cast<int64_t>(rng() % 2));
        pads[d] = static_cast<int64_t>(rng() % 2);
        pads[d + spatial] = static_cast<int64_t>(rng() % 2);
      }
      attrs["kernel_shape"] = attr_ints(kernel);
      attrs["strides"] = attr_ints(strides);
      if (trial % 3 == 0)
        attrs["auto_pad"] = attr_s("SAME_UPPER");
      else
        attrs["pads"] = attr_ints(pads);
    }
    SCOPED_TRACE(fmt::format("trial {} {} p {} opset {} shape [{}]", trial,
                             global ? "GlobalLpPool" : "LpPool", p, opset, fmt::join(shape, ",")));
    testing::GraphBuilder b(opset);
    const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, shape)});
    b.output(b.add1("Tanh", {b.add1(global ? "GlobalLpPool" : "LpPool", {x}, attrs)}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered).find("LpPool"), std::string::npos) << op_list(lowered);
    expect_lowered_runs_fast_and_right(lowered, kept, 100 + trial);
  }
}

// A Gather of a 1-D constant index list (random ranks, axes, runs of consecutive indices,
// negative indices, repeated runs; opsets 9 and 13) and a Tile of constant repeats are lowered
// on import to Slices and Concats that compute what their reference kernels do, element for
// element; between two Tanhs onednn-graph then takes the whole graph as one region. A scalar
// index (a cut already), a Gather of more than 8 runs or of indices known only at run time,
// and a Tile over 8 stay.
TEST(LowerGathersAndTiles, ComputeWhatTheReferenceKernelsDoAndLeaveNoHole) {
  using testing::attr_i;
  std::mt19937 rng(23);
  for (int trial = 0; trial < 10; ++trial) {
    const size_t rank = 2 + trial % 3;
    Shape shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(2 + static_cast<int64_t>(rng() % 6));
    const int64_t axis = static_cast<int64_t>(rng() % rank);
    const bool tile = trial % 3 == 2;
    testing::GraphBuilder b(trial % 2 ? 9 : 13);
    const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, shape)});
    ValueId y;
    std::string what;
    if (tile) {
      std::vector<int64_t> repeats(rank, 1);
      repeats[static_cast<size_t>(axis)] = 2 + static_cast<int64_t>(rng() % 3);
      repeats[rng() % rank] += 1;
      what = fmt::format("Tile [{}]", fmt::join(repeats, ","));
      y = b.add1("Tile", {x, b.constant("repeats", Tensor::from_vector<int64_t>(
                                                       {static_cast<int64_t>(rank)}, repeats))});
    } else {
      // Up to 4 runs of up to 3 consecutive indices each, some negative.
      const int64_t length = shape[static_cast<size_t>(axis)];
      std::vector<int64_t> index;
      for (size_t r = 0, runs = 1 + rng() % 4; r < runs; ++r) {
        const int64_t start = static_cast<int64_t>(rng() % length);
        for (int64_t i = start; i < std::min<int64_t>(length, start + 1 + rng() % 3); ++i)
          index.push_back(rng() % 2 ? i : i - length);
      }
      what = fmt::format("Gather axis {} of [{}]", axis, fmt::join(index, ","));
      y = b.add1("Gather",
                 {x, b.constant("index", Tensor::from_vector<int64_t>(
                                             {static_cast<int64_t>(index.size())}, index))},
                 {{"axis", attr_i(trial % 2 ? axis : axis - static_cast<int64_t>(rank))}});
    }
    SCOPED_TRACE(fmt::format("trial {} shape [{}] {}", trial, fmt::join(shape, ","), what));
    b.output(b.add1("Tanh", {y}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered).find(tile ? "Tile" : "Gather"), std::string::npos)
        << op_list(lowered);
    expect_lowered_runs_fast_and_right(lowered, kept, trial, Tolerance{0, 0});
  }
  // What stays.
  testing::GraphBuilder b(13);
  const ValueId x = b.input("x", DType::kFloat32, {20, 3});
  auto index = [&](const std::string& name, std::vector<int64_t> values) {
    const Shape shape = values.size() == 1 ? Shape{} : Shape{static_cast<int64_t>(values.size())};
    return b.constant(name, Tensor::from_vector<int64_t>(shape, values));
  };
  b.output(b.add1("Gather", {x, index("one", {3})}));
  b.output(b.add1("Gather", {x, index("nine_runs", {0, 2, 4, 6, 8, 10, 12, 14, 16})}));
  b.output(b.add1("Gather", {b.constant("table", Tensor::from_vector<float>({4}, {1, 2, 3, 4})),
                             b.input("i", DType::kInt64, {2})}));
  b.output(b.add1("Tile", {x, index("nine", {9, 1})}));
  const auto [lowered, kept] = load_both_ways(b.graph());
  EXPECT_EQ(op_list(lowered), "Gather Gather Gather Tile ");
}

// A reader that broadcasts its inputs reads an Expand's input instead of its output where its
// own output keeps its shape (F.normalize's Div of the norm, an Add, a Where's condition);
// the Expand is then dead and goes. An Expand that makes the reader's output larger, one read
// by a non-broadcasting op, and one that is a graph output stay. Outputs unchanged.
TEST(BypassBroadcastExpands, ReadersThatBroadcastAnywayReadTheExpandsInput) {
  using testing::attr_i;
  using testing::attr_ints;
  testing::GraphBuilder b(13);
  const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, {1, 8, 4, 4})});
  const ValueId full = b.constant("full", Tensor::from_vector<int64_t>({4}, {1, 8, 4, 4}));
  const ValueId norm =
      b.add1("ReduceMean", {x}, {{"axes", attr_ints({2, 3})}, {"keepdims", attr_i(1)}});
  // Bypassed: the Div and Add read the [1,8,1,1] norm directly.
  const ValueId expanded = b.add1("Expand", {norm, full});
  const ValueId divided = b.add1("Div", {x, expanded});
  b.output(b.add1("Add", {expanded, divided}));
  // Stays: broadcasting the Expand's input would give [1,8,4,4], not [2,8,4,4].
  const ValueId twice = b.constant("twice", Tensor::from_vector<int64_t>({4}, {2, 8, 4, 4}));
  b.output(b.add1("Mul", {b.add1("Expand", {x, twice}), x}));
  // Stays: a Relu does not broadcast.
  b.output(b.add1("Relu", {b.add1("Expand", {norm, full})}));
  const auto [bypassed, kept] = load_both_ways(b.graph());
  EXPECT_EQ(op_list(kept), "Tanh ReduceMean Expand Div Add Expand Mul Expand Relu ");
  EXPECT_EQ(op_list(bypassed), "Tanh ReduceMean Div Add Expand Mul Expand Relu ");
  const std::vector<Tensor> inputs = random_inputs(kept, 3);
  EXPECT_TRUE(testing::outputs_match(Session(bypassed, SessionOptions{}).run(inputs),
                                     Session(kept, SessionOptions{}).run(inputs), Tolerance{0, 0}));
}

// A binary op whose two inputs both broadcast (x.mean(2) * x.mean(3), an outer sum; random
// shapes, ranks and which axes each keeps) gets an Expand of its larger computed input to the
// output's shape on import; the Expand is a step of onednn's own, so onednn-graph takes the
// whole graph as one region and onednn every node (both had left the op, or an Expand a Relu
// reads, to the fallback), computing what the reference kernels do on the graph as written.
// A one-sided broadcast stays as it is.
TEST(ExpandTwoSidedBroadcasts, GiveBinaryOpsOneFullOperandAndLeaveNoHole) {
  std::mt19937 rng(17);
  int seed = 0;
  for (const std::string op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    for (int trial = 0; trial < 2; ++trial) {
      const size_t rank = 3 + rng() % 3;
      Shape full, a, b_shape;
      for (size_t d = 0; d < rank; ++d) full.push_back(2 + static_cast<int64_t>(rng() % 4));
      a = b_shape = full;
      // Each input drops a different axis (and the second maybe its leading ones too).
      const size_t da = rng() % rank, db = (da + 1 + rng() % (rank - 1)) % rank;
      a[da] = 1;
      b_shape[db] = 1;
      // (Only axes before both dropped ones: the output keeps its full shape.)
      if (trial == 1) b_shape.erase(b_shape.begin(), b_shape.begin() + std::min(da, db));
      SCOPED_TRACE(
          fmt::format("{} of [{}] and [{}]", op, fmt::join(a, ","), fmt::join(b_shape, ",")));
      testing::GraphBuilder b(13);
      const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, a)});
      // Div: a divisor away from zero.
      const ValueId y = b.add1("Sigmoid", {b.input("y", DType::kFloat32, b_shape)});
      b.output(b.add1("Relu", {b.add1(op, {x, y})}));
      const auto [lowered, kept] = load_both_ways(b.graph());
      EXPECT_EQ(op_list(lowered), "Tanh Sigmoid Expand " + op + " Relu ");
      expect_lowered_runs_fast_and_right(lowered, kept, ++seed, Tolerance{0, 0});
    }
  // Against a constant that broadcasts too: the computed input is expanded.
  {
    testing::GraphBuilder b(13);
    const ValueId r = b.add1("Tanh", {b.input("r", DType::kFloat32, {1, 1, 3, 3})});
    b.output(b.add1("Add", {r, b.random_constant("c", {1, 4, 1, 1})}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered), "Tanh Expand Add ");
    expect_lowered_runs_fast_and_right(lowered, kept, ++seed, Tolerance{0, 0});
  }
  // An Expand no reader bypasses (a Relu reads it), to a larger rank: one step of its own.
  {
    testing::GraphBuilder b(13);
    const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, {3, 1, 5})});
    const ValueId shape = b.constant("shape", Tensor::from_vector<int64_t>({4}, {2, 3, 4, 5}));
    b.output(b.add1("Relu", {b.add1("Expand", {x, shape})}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered), "Tanh Expand Relu ");
    expect_lowered_runs_fast_and_right(lowered, kept, ++seed, Tolerance{0, 0});
  }
  // What stays: one input has the output's shape.
  {
    testing::GraphBuilder b(13);
    const ValueId x = b.add1("Tanh", {b.input("x", DType::kFloat32, {1, 4, 3, 3})});
    b.output(b.add1("Mul", {x, b.add1("Tanh", {b.input("s", DType::kFloat32, {1, 4, 1, 1})})}));
    const auto [lowered, kept] = load_both_ways(b.graph());
    EXPECT_EQ(op_list(lowered), "Tanh Tanh Mul ");
  }
}

}  // namespace
}  // namespace collage
