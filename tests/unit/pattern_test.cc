#include "collage/pattern.h"

#include <gtest/gtest.h>

#include <random>

#include "collage/op_registry.h"
#include "graph_builder.h"

namespace collage {
namespace {

// Registers a few ops with trivial shape functions, so pattern tests don't depend on the
// real op set's state.
void register_fake(const std::string& name, OpKind kind) {
  OpDef def;
  def.name = name;
  def.kind = kind;
  def.infer = [](InferContext& ctx) { ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0)); };
  OpRegistry::global().add(def);
}

// x -> PConv(w) -> PRelu -> PAdd(., y) -> out ; y = PRelu2(x)
struct Fixture {
  Graph g;
  ValueId x, w, conv, relu, y, add;
  Fixture() {
    register_fake("PConv", OpKind::kOutElemwiseFusable);
    register_fake("PRelu1", OpKind::kElementwise);
    register_fake("PAdd", OpKind::kBroadcast);
    x = g.add_value("x", DType::kFloat32, {4}, true);
    w = g.add_constant("w", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
    conv = g.add_value("conv", DType::kFloat32, {4}, true);
    relu = g.add_value("relu", DType::kFloat32, {4}, true);
    y = g.add_value("y", DType::kFloat32, {4}, true);
    add = g.add_value("add", DType::kFloat32, {4}, true);
    g.inputs = {x};
    g.add_node(Node{"c", "PConv", "", {x, w}, {conv}, {}});   // 0
    g.add_node(Node{"r", "PRelu1", "", {conv}, {relu}, {}});  // 1
    g.add_node(Node{"r2", "PRelu1", "", {x}, {y}, {}});       // 2
    g.add_node(Node{"a", "PAdd", "", {relu, y}, {add}, {}});  // 3
    g.outputs = {add};
  }
};

TEST(Pattern, OpWithConstantWeights) {
  Fixture f;
  EXPECT_EQ(op("PConv", {any(), constant()}).match(f.g, f.conv),
            (std::vector<std::vector<NodeId>>{{0}}));
  EXPECT_TRUE(op("PConv", {constant(), any()}).match(f.g, f.conv).empty());
  EXPECT_TRUE(op("PConv", {any(), any(), constant()}).match(f.g, f.conv).empty());
  EXPECT_EQ(op("PConv", {any(), any(), maybe(constant())}).match(f.g, f.conv).size(), 1u);
}

TEST(Pattern, OptionalTailEnumeratesBothForms) {
  Fixture f;
  Pattern conv = op("PConv", {any(), constant()});
  Pattern p = optional(conv, [](const Pattern& c) { return op("PRelu1", {c}); });
  EXPECT_EQ(p.match(f.g, f.relu), (std::vector<std::vector<NodeId>>{{0, 1}}));
  EXPECT_EQ(p.match(f.g, f.conv), (std::vector<std::vector<NodeId>>{{0}}));
}

TEST(Pattern, AlternativesAndPredicates) {
  Fixture f;
  Pattern relu_then_add = op("PAdd", {op("PRelu1"), any()}) | op("PAdd", {any(), op("PRelu1")});
  // Both alternatives match: via the first input (node 1) and via the second (node 2).
  EXPECT_EQ(relu_then_add.match(f.g, f.add), (std::vector<std::vector<NodeId>>{{1, 3}, {2, 3}}));
  Pattern never = op("PAdd").where([](const Graph&, const Node&) { return false; }, "never");
  EXPECT_TRUE(never.match(f.g, f.add).empty());
  EXPECT_NE(never.to_string().find("never"), std::string::npos);
}

TEST(Subgraph, BoundaryConvexityAndExtraction) {
  Fixture f;
  // {conv, add} skips the relu in between: a path leaves and re-enters.
  EXPECT_FALSE(is_convex(f.g, {0, 3}));
  EXPECT_TRUE(is_convex(f.g, {0, 1}));
  EXPECT_TRUE(is_convex(f.g, {0, 1, 2, 3}));

  Boundary b = boundary_of(f.g, {0, 1});
  EXPECT_EQ(b.inputs, (std::vector<ValueId>{f.x}));  // w is a constant: stays inside
  EXPECT_EQ(b.outputs, (std::vector<ValueId>{f.relu}));

  Graph sub = extract_subgraph(f.g, {0, 1});
  ASSERT_EQ(sub.num_nodes(), 2u);
  EXPECT_EQ(sub.inputs.size(), 1u);
  EXPECT_EQ(sub.value(sub.inputs[0]).name, "x");
  EXPECT_EQ(sub.value(sub.outputs[0]).name, "relu");
  EXPECT_TRUE(sub.value(sub.node(0).inputs[1]).is_constant());
}

// Convexity by its definition, on random branchy graphs (nodes with several outputs, inputs
// from any earlier value, so paths leave and re-enter sets in every way): a set is convex
// iff no node outside it is reached from the set and reaches it. is_convex (one forward
// pass over the set's range of node ids) must agree on every random subset.
TEST(Subgraph, ConvexityAgreesWithReachabilityOnRandomGraphs) {
  std::mt19937 rng(5);
  int convex = 0, not_convex = 0;
  for (int trial = 0; trial < 60; ++trial) {
    testing::GraphBuilder b;
    // Shapes {2} and {1} (a Split's halves) broadcast together under Add.
    std::vector<ValueId> values = {b.input("x", DType::kFloat32, {2})};
    const int kNodes = 6 + static_cast<int>(rng() % 10);
    for (int i = 0; i < kNodes; ++i) {
      std::vector<ValueId> ins = {values[rng() % values.size()]};
      if (rng() % 2) ins.push_back(values[rng() % values.size()]);
      if (ins.size() == 1 && b.graph().value(ins[0]).shape == Shape{2} && rng() % 3 == 0) {
        auto outs = b.add("Split", ins, {}, 2);
        values.insert(values.end(), outs.begin(), outs.end());
      } else {
        values.push_back(b.add1(ins.size() == 1 ? "Relu" : "Add", ins));
      }
    }
    b.output(values.back());
    const Graph g = b.finish();
    const int n = static_cast<int>(g.num_nodes());
    // reaches[a][c]: a path of one or more edges from node a to node c.
    std::vector<std::vector<bool>> reaches(n, std::vector<bool>(n, false));
    for (int c = 0; c < n; ++c)
      for (ValueId v : g.node(c).inputs)
        if (NodeId p = g.value(v).producer; p >= 0) {
          reaches[p][c] = true;
          for (int a = 0; a < n; ++a)
            if (reaches[a][p]) reaches[a][c] = true;
        }
    for (int s = 0; s < 40; ++s) {
      std::vector<NodeId> set;
      std::vector<bool> in(n, false);
      for (NodeId i = 0; i < n; ++i)
        if (rng() % 3 == 0) set.push_back(i), in[i] = true;
      std::shuffle(set.begin(), set.end(), rng);  // the order given must not matter
      bool expected = true;
      for (int w = 0; w < n && expected; ++w) {
        if (in[w]) continue;
        bool from_set = false, to_set = false;
        for (int u = 0; u < n; ++u)
          if (in[u]) from_set |= reaches[u][w], to_set |= reaches[w][u];
        expected = !(from_set && to_set);
      }
      EXPECT_EQ(is_convex(g, set), expected) << "trial " << trial << " set " << s;
      (expected ? convex : not_convex) += 1;
    }
  }
  // Both answers must have been exercised for the comparison to mean anything.
  EXPECT_GT(convex, 200);
  EXPECT_GT(not_convex, 200);
}

TEST(Subgraph, InteriorValueReadOutsideBecomesAnOutput) {
  Fixture f;
  // {r2} alone; then {r2, a}: y is read only by a, so it stays interior.
  EXPECT_EQ(boundary_of(f.g, {2}).outputs, (std::vector<ValueId>{f.y}));
  Boundary b = boundary_of(f.g, {0});
  EXPECT_EQ(b.outputs, (std::vector<ValueId>{f.conv}));
  // conv+relu+add minus r2: relu's value is interior, add is the graph output.
  Boundary multi = boundary_of(f.g, {0, 1, 3});
  EXPECT_EQ(multi.inputs, (std::vector<ValueId>{f.x, f.y}));
  EXPECT_EQ(multi.outputs, (std::vector<ValueId>{f.add}));
}

TEST(FusionRules, TailAndRegion) {
  Fixture f;
  auto any_node = [](const Graph&, const Node&) { return true; };
  FusionRule tail =
      fuse_tail("t", {"PConv"}, {OpKind::kElementwise, OpKind::kBroadcast}, 3, any_node);
  std::vector<Match> t = tail.generate(f.g);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].nodes, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(t[1].nodes, (std::vector<NodeId>{0, 1, 3}));

  FusionRule region = fuse_region("r", {OpKind::kElementwise, OpKind::kBroadcast}, 3, any_node);
  std::vector<Match> r = region.generate(f.g);
  bool found = false;
  for (const Match& m : r) found |= m.nodes == std::vector<NodeId>{1, 2, 3};
  EXPECT_TRUE(found);
  for (const Match& m : r) EXPECT_TRUE(is_convex(f.g, m.nodes));
}

}  // namespace
}  // namespace collage
