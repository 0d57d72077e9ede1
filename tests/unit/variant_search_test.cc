// Variants through the search: composed variants (collage/backend.h) as text, the
// graph-level genes that give each op-level group a graph-level backend *and* a variant,
// the seeds, and the regions decode_genome assembles from them, compiled on the real
// onednn-graph backend and checked against the reference.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "collage/tune.h"
#include "graph_builder.h"
#include "runtime/partitioner.h"
#include "search/candidates.h"
#include "search/graph_level_search.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::attr_ints;
using testing::GraphBuilder;

TEST(ComposedVariant, CanonicalTextAndBack) {
  // Default parts vanish; names sorted; nodes sorted and merged per name.
  EXPECT_EQ(compose_variant({}), "");
  EXPECT_EQ(compose_variant({{"", {0, 1}}, {"winograd", {}}}), "");
  EXPECT_EQ(compose_variant({{"winograd", {4, 3}}, {"", {0}}, {"alpha", {9}}, {"winograd", {1}}}),
            "alpha@9;winograd@1,3,4");
  auto parts = parse_composed_variant("alpha@9;winograd@1,3,4", 10);
  ASSERT_TRUE(parts.has_value());
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].variant, "alpha");
  EXPECT_EQ((*parts)[0].nodes, std::vector<int>{9});
  EXPECT_EQ((*parts)[1].nodes, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(compose_variant(*parts), "alpha@9;winograd@1,3,4");
  EXPECT_TRUE(parse_composed_variant("", 3)->empty());
  EXPECT_FALSE(parse_composed_variant("winograd", 3).has_value()) << "a plain name";
  for (const char* bad : {"winograd@", "@1", "winograd@1,", "winograd@a", "winograd@3", "w@1;;"}) {
    try {
      parse_composed_variant(bad, 3);
      ADD_FAILURE() << "parsed '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << bad;
    }
  }
  EXPECT_EQ(variant_summary("winograd"), "winograd");
  EXPECT_EQ(variant_summary("winograd@1,3,4"), "winograd(3 nodes)");
  EXPECT_EQ(variant_summary("alpha@9;winograd@1"), "alpha(1 node)+winograd(1 node)");
}

ValueId conv(GraphBuilder& b, ValueId x, int64_t c, int64_t k) {
  const int64_t p = k / 2;
  return b.add1("Conv",
                {x, b.random_constant("w", {c, c, k, k}, 0.2f), b.random_constant("b", {c})},
                {{"pads", attr_ints({p, p, p, p})}});
}

// Nodes: 0 conv3x3, 1 relu, 2 conv3x3, 3 add, 4 relu, 5 conv1x1, 6 relu.
Graph block() {
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 9, 9});
  ValueId y = b.add1("Relu", {conv(b, x, 16, 3)});
  y = b.add1("Relu", {b.add1("Add", {conv(b, y, 16, 3), x})});
  b.output(b.add1("Relu", {conv(b, y, 16, 1)}));
  return b.graph();
}

TEST(GraphLevelVariants, GenesSeedsAndComposedRegions) {
  const Graph g = block();
  BackendRegistry& r = BackendRegistry::global();
  Backend* onednn = &r.get("onednn");
  Backend* graph_level = &r.get("onednn-graph");
  // The op-level answer: the first conv group on onednn/winograd, the rest direct.
  const Placement op_groups = {Candidate{{0, 1}, onednn, "winograd", 1},
                               Candidate{{2, 3, 4}, onednn, "", 1},
                               Candidate{{5, 6}, onednn, "", 1}};
  GraphLevelGenes genes = graph_level_genes(g, op_groups, {graph_level});
  auto value_of = [&](const std::string& variant) {
    auto it = std::find(genes.options.begin(), genes.options.end(), GeneOption{0, variant});
    return it == genes.options.end() ? -1 : static_cast<int>(it - genes.options.begin()) + 1;
  };
  const int plain = value_of(""), wino = value_of("winograd"), wino2x2 = value_of("winograd2x2"),
            blocked = value_of("blocked");
  ASSERT_GT(plain, 0);
  ASSERT_GT(wino, 0);
  ASSERT_GT(wino2x2, 0);
  ASSERT_GT(blocked, 0);
  EXPECT_EQ(genes.choices[0], (std::vector<int>{0, plain, wino, wino2x2, blocked}));
  EXPECT_EQ(genes.choices[1], (std::vector<int>{0, plain, wino, wino2x2, blocked}));
  EXPECT_EQ(genes.choices[2], (std::vector<int>{0, plain, blocked}))
      << "a 1x1 conv has no Winograd";

  const std::vector<Genome> seeds = seed_genomes(genes, op_groups);
  const Genome inherited = {wino, plain, plain}, all_wino = {wino, wino, plain},
               all_plain = {plain, plain, plain}, all_blocked = {blocked, blocked, blocked},
               mixed = {blocked, wino, plain};
  for (const Genome& want : {Genome{0, 0, 0}, all_plain, all_wino, inherited, all_blocked})
    EXPECT_NE(std::find(seeds.begin(), seeds.end(), want), seeds.end());

  struct Case {
    Genome genome;
    std::string variant;
  };
  for (const Case& c :
       {Case{all_plain, ""}, Case{inherited, "winograd@0,1"}, Case{all_wino, "winograd@0,1,2,3,4"},
        Case{all_blocked, "blocked@0,1,2,3,4,5,6"}, Case{mixed, "blocked@0,1;winograd@2,3,4"}}) {
    Placement p = decode_genome(g, op_groups, genes, c.genome, 2);
    ASSERT_EQ(p.size(), 1u) << "one region";
    EXPECT_EQ(p[0].backend, graph_level);
    EXPECT_EQ(p[0].nodes, (std::vector<NodeId>{0, 1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(p[0].variant, c.variant);
    // The composed region compiles and computes what the reference does.
    std::vector<Tensor> inputs = random_inputs(g, 4);
    std::shared_ptr<Kernel> kernel = compile_candidate(g, p[0]);
    std::vector<Tensor> got = {Tensor(DType::kFloat32, g.value(g.outputs[0]).shape)};
    kernel->run(inputs, got);
    Session reference(g, SessionOptions{});
    EXPECT_EQ(compare_outputs(got, reference.run(inputs), Tolerance::backend_vs_reference()), "")
        << c.variant;
  }
  // A single group keeps its own plain variant; a group left at 0 keeps its op-level one.
  Placement split = decode_genome(g, op_groups, genes, Genome{0, wino, 0}, 2);
  ASSERT_EQ(split.size(), 3u);
  for (const Candidate& c : split) {
    if (c.nodes.front() == 0) EXPECT_EQ(c.label(), "onednn/winograd x1");
    if (c.nodes.front() == 2) EXPECT_EQ(c.label(), "onednn-graph/winograd x2");
    if (c.nodes.front() == 5) EXPECT_EQ(c.label(), "onednn x1");
  }
}

// onednn-graph's blocked layouts pay only between convs inside a region: they are a gene
// option of the graph-level search and a single-backend plan's variant, never a candidate
// measured alone (each would cost a measurement per small region of the fusion rule).
TEST(GraphLevelVariants, BlockedIsARegionVariantOnly) {
  const Graph g = block();
  Backend* graph_level = &BackendRegistry::global().get("onednn-graph");
  int winograd = 0;
  for (const Candidate& c : enumerate_candidates(g, {graph_level}, 1)) {
    EXPECT_NE(c.variant, "blocked") << c.label();
    winograd += c.variant == "winograd";
  }
  EXPECT_GT(winograd, 0) << "the other region variant stays a candidate";
  SessionOptions options;
  options.backend = "onednn-graph/blocked";
  Session session(g, options);
  ASSERT_EQ(session.plan().groups.size(), 1u);
  EXPECT_EQ(session.plan().groups[0].variant, "blocked") << "one region, built blocked";
}

TEST(GraphLevelVariants, CandidatesCarryEveryVariant) {
  // enumerate_candidates: each match once per variant its backend offers.
  const Graph g = block();
  Backend* onednn = &BackendRegistry::global().get("onednn");
  int winograd = 0, plain_with_3x3 = 0;
  for (const Candidate& c : enumerate_candidates(g, {onednn}, 1)) {
    if (c.variant == "winograd") {
      ++winograd;
      EXPECT_TRUE(c.nodes.front() == 0 || c.nodes.front() == 2) << c.label();
    } else if (c.nodes.front() == 0 || c.nodes.front() == 2) {
      ++plain_with_3x3;
    }
  }
  EXPECT_GT(winograd, 0);
  EXPECT_EQ(winograd, plain_with_3x3) << "each 3x3 group once per variant";
}

TEST(GraphLevelVariants, TuneMeasuresEachVariantUnderItsOwnKey) {
  // A real (in-process) tune over onednn alone: the conv group is measured once per variant,
  // each checked against the reference and stored under its own backend/variant key; the
  // plan names one of them and runs correctly after a JSON round trip.
  const testing::TempCostDb db("variant_tune");
  GraphBuilder b;
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 12, 12});
  b.output(b.add1("Relu", {conv(b, x, 16, 3)}));
  const Graph g = b.graph();
  TuneOptions options;
  options.backends = {"onednn"};
  options.optimizer = Optimizer::kOpLevel;
  options.budget_s = 0;
  options.threads = 1;
  options.isolate = false;
  options.cost_db_path = db.path();
  TuneResult r = tune(g, options);
  EXPECT_EQ(r.failed, 0u);
  // Conv + Relu as one onednn group, or (on a busy machine, by measurement) two: the conv's
  // group comes first either way.
  ASSERT_GE(r.plan.groups.size(), 1u);
  EXPECT_EQ(r.plan.groups[0].backend, "onednn");
  const std::string chosen = r.plan.groups[0].variant;
  EXPECT_TRUE(chosen.empty() || chosen == "winograd") << chosen;

  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.path().c_str(), &handle), SQLITE_OK);
  std::map<std::string, int> ok_rows;
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT backend, ok FROM costs", -1, &stmt, nullptr),
            SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW)
    ok_rows[reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0))] +=
        sqlite3_column_int(stmt, 1);
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  EXPECT_GE(ok_rows["onednn"], 2) << "conv, conv+relu";
  EXPECT_GE(ok_rows["onednn/winograd"], 2) << "conv, conv+relu, as Winograd";

  Session tuned(g, Plan::from_json(r.plan.to_json()), SessionOptions{});
  EXPECT_EQ(tuned.plan().groups[0].variant, chosen);
  std::vector<Tensor> inputs = random_inputs(g, 3);
  Session reference(g, SessionOptions{});
  EXPECT_EQ(
      compare_outputs(tuned.run(inputs), reference.run(inputs), Tolerance::backend_vs_reference()),
      "");
}

}  // namespace
}  // namespace collage
