// The fair baseline: a graph-level backend's single-backend plan (what `collage run
// --backend`, `collage bench` and the tuner's never-worse table use) is what a user of that
// runtime alone gets, its maximal regions, not the bounded pieces its fusion rule proposes
// to the search.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "models/families.h"
#include "runtime/partitioner.h"

namespace collage {
namespace {

size_t largest_match(const Graph& g, const Backend& backend) {
  size_t largest = 0;
  for (const Match& m : find_matches(g, backend)) largest = std::max(largest, m.nodes.size());
  return largest;
}

size_t largest_group(const Placement& placement) {
  size_t largest = 0;
  for (const Candidate& c : placement) largest = std::max(largest, c.nodes.size());
  return largest;
}

// onednn-graph takes every node of these CNNs, glue included: one region each, though its
// fusion rule proposes at most a handful of nodes at a time.
TEST(FairBaseline, OnednnGraphTakesWholeCnnsAsOneRegion) {
  Backend& backend = BackendRegistry::global().get("onednn-graph");
  const std::pair<const char*, Graph> models[] = {
      {"resnet-tiny", models::resnet_tiny(1)},
      {"googlenet-tiny", models::googlenet_tiny(1)},
      {"inception-v3-tiny", models::inception_v3_tiny(1)},
      {"nasnet-tiny", models::nasnet_tiny(1)}};
  for (const auto& [name, g] : models) {
    SCOPED_TRACE(name);
    std::vector<std::string> refused;
    const Placement placement = place_on_single_backend(g, backend, 1, &refused);
    ASSERT_EQ(placement.size(), 1u) << (refused.empty() ? "" : refused.front());
    EXPECT_EQ(placement[0].backend, &backend);
    EXPECT_EQ(placement[0].nodes.size(), g.num_nodes());
    EXPECT_LT(largest_match(g, backend), g.num_nodes() / 2);
  }
}

// Every graph-level backend: its single-backend plan on a CNN has a region larger than any
// piece its rules propose, and fewer groups than nodes it takes.
TEST(FairBaseline, GraphLevelBackendsGetTheirMaximalRegions) {
  const Graph g = models::resnet_tiny(1);
  int checked = 0;
  for (Backend* b : BackendRegistry::global().all()) {
    if (b->kind() != BackendKind::kGraphLevel || !b->available()) continue;
    SCOPED_TRACE(b->name());
    const Placement placement = place_on_single_backend(g, *b, 1);
    ASSERT_FALSE(placement.empty());
    EXPECT_GT(largest_group(placement), largest_match(g, *b));
    size_t taken = 0;
    for (const Candidate& c : placement) taken += c.nodes.size();
    EXPECT_LT(placement.size() * 4, taken);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

// A graph-level backend that compiles regions of at most `kMax` nodes (its kernels are the
// reference's: what is under test is the placement): a union it refuses is split into the
// longest runs it takes, not back into the pieces its rule proposed.
class CappedRegions : public Backend {
 public:
  static constexpr size_t kMax = 5;
  std::string name() const override { return "capped-regions"; }
  std::string version() const override { return "1"; }
  BackendKind kind() const override { return BackendKind::kGraphLevel; }
  std::vector<PatternEntry> patterns() const override { return {}; }
  std::vector<FusionRule> fusion_rules() const override {
    return {fuse_region("pairs", {OpKind::kElementwise}, 2,
                        [](const Graph&, const Node&) { return true; })};
  }
  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    ++compiles;
    if (subgraph.num_nodes() > kMax)
      fail(ErrorKind::kUnsupported, "capped-regions: {} nodes", subgraph.num_nodes());
    return BackendRegistry::global().fallback().compile(subgraph, options);
  }
  int compiles = 0;
};

Graph chain_of_twelve() {
  testing::GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {4, 8});
  for (int i = 0; i < 12; ++i) x = b.add1(i % 2 ? "Relu" : "Sigmoid", {x});
  b.output(x);
  return b.finish();
}

TEST(FairBaseline, RefusedUnionSplitsIntoTheLongestRunsItTakes) {
  const Graph g = chain_of_twelve();
  CappedRegions backend;
  EXPECT_EQ(largest_match(g, backend), 2u);
  std::vector<std::string> refused;
  const Placement placement = place_on_single_backend(g, backend, 1, &refused);
  // Six pairs; the union of twelve is refused, runs of two pairs (four nodes) are taken.
  ASSERT_EQ(placement.size(), 3u) << refused.size() << " refusals";
  for (const Candidate& c : placement) EXPECT_EQ(c.nodes.size(), 4u);
  EXPECT_FALSE(refused.empty());
  auto steps = build_steps(g, complete_placement(g, placement, 1));
  EXPECT_EQ(steps.size(), 3u);
}

// The tuner knows from its measurements which candidates compiled: those are placed without
// compiling them again (a warm re-tune of NASNet-A-Mobile spent 50 of its 74 s compiling
// every op on every backend), the rest are compiled to find out. The placement is the same.
TEST(FairBaseline, CandidatesKnownToCompileArePlacedWithoutCompiling) {
  const Graph g = chain_of_twelve();
  CappedRegions alone;
  const Placement expected = place_on_single_backend(g, alone, 1);
  ASSERT_EQ(expected.size(), 3u);
  const int compiles_alone = alone.compiles;

  // The pairs its rule proposed are known (measured); the unions are not.
  CappedRegions backend;
  int asked = 0;
  std::vector<std::shared_ptr<Kernel>> kernels;
  const Placement placement =
      place_on_single_backend(g, backend, 1, nullptr, &kernels, false, "", [&](const Candidate& c) {
        ++asked;
        return c.nodes.size() <= 2;
      });
  ASSERT_EQ(placement.size(), expected.size());
  for (size_t i = 0; i < placement.size(); ++i) EXPECT_EQ(placement[i].nodes, expected[i].nodes);
  EXPECT_GT(asked, 6);
  EXPECT_EQ(backend.compiles, compiles_alone - 6);  // the six pairs were not compiled
  ASSERT_EQ(kernels.size(), placement.size());
  for (const auto& k : kernels) EXPECT_NE(k, nullptr);  // the runs of four were compiled

  // What it says is taken as said: a union it knows compiles is one region, compiled never.
  CappedRegions trusting;
  kernels.clear();
  const Placement whole = place_on_single_backend(g, trusting, 1, nullptr, &kernels, false, "",
                                                  [](const Candidate&) { return true; });
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].nodes.size(), 12u);
  EXPECT_EQ(trusting.compiles, 0);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0], nullptr);
}

}  // namespace
}  // namespace collage
