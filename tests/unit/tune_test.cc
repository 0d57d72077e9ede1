// End-to-end tuning on a small graph with real measurements: the plan covers the graph,
// runs correctly, and a second tuning reuses every cost from the database.
#include <gtest/gtest.h>

#include <filesystem>

#include "collage/session.h"
#include "collage/tune.h"
#include "graph_builder.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

Graph small_cnn() {
  testing::GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {1, 8, 12, 12});
  ValueId w = b.random_constant("w", {16, 8, 3, 3}, 0.2f);
  ValueId bias = b.random_constant("b", {16}, 0.1f);
  ValueId c = b.add1("Conv", {x, w, bias}, {{"pads", testing::attr_ints({1, 1, 1, 1})}});
  ValueId r = b.add1("Relu", {c});
  ValueId p = b.add1("GlobalAveragePool", {r});
  ValueId f = b.add1("Flatten", {p});
  ValueId fc = b.random_constant("fc", {16, 10}, 0.3f);
  ValueId m = b.add1("MatMul", {f, fc});
  b.output(b.add1("Sigmoid", {m}));
  return b.finish();
}

TEST(Tune, PlanCoversGraphRunsCorrectlyAndReusesCosts) {
  fs::path db =
      fs::temp_directory_path() / ("collage_tune_test_" + std::to_string(::getpid()) + ".db");
  fs::remove(db);
  Graph g = small_cnn();
  TuneOptions options;
  options.cost_db_path = db.string();
  // Enough for the evolutionary search to converge, not to run out of time: a warm re-tune
  // then retraces the same search (below).
  options.budget_s = 120;
  size_t progress_calls = 0;
  options.progress = [&](const TuneProgress&) { ++progress_calls; };
  TuneResult first = tune(g, options);
  EXPECT_GT(progress_calls, 0u);
  EXPECT_GT(first.candidates, 0u);
  EXPECT_EQ(first.measured + first.cache_hits, first.candidates);
  EXPECT_GT(first.measured, 0u);
  ASSERT_FALSE(first.timings.empty());
  EXPECT_EQ(first.timings[0].name, "tuned");

  // Every node placed exactly once.
  std::map<std::string, int> placed;
  for (const PlanGroup& group : first.plan.groups)
    for (const std::string& n : group.nodes) ++placed[n];
  EXPECT_EQ(placed.size(), g.num_nodes());
  for (const auto& [name, count] : placed) EXPECT_EQ(count, 1) << name;

  // The winner is never slower than any single-backend plan measured beside it.
  double winner_ms = first.plan.measured_ms;
  for (const PlanTiming& t : first.timings) {
    if (t.timed) EXPECT_LE(winner_ms, t.measured_ms + 1e-9) << t.name;
  }
  EXPECT_GT(first.plans_timed, 0u);

  // The plan survives JSON and runs with outputs matching reference.
  Plan plan = Plan::from_json(first.plan.to_json());
  Session tuned(g, plan, SessionOptions{});
  Session reference(g, SessionOptions{});
  auto inputs = random_inputs(g, 9);
  EXPECT_LE(testing::tolerance_ratio(tuned.run(inputs), reference.run(inputs)), 1.0);

  // Second tuning: everything comes from the cost database.
  TuneResult second = tune(g, options);
  EXPECT_EQ(second.measured, 0u);
  EXPECT_EQ(second.cache_hits, second.candidates);
  // ... and so does every whole-plan latency: the same winner, nothing timed again.
  EXPECT_EQ(second.plans_timed, 0u);
  EXPECT_EQ(second.winner, first.winner);
  EXPECT_EQ(second.plan.measured_ms, first.plan.measured_ms);
  ASSERT_EQ(second.plan.groups.size(), first.plan.groups.size());
  for (size_t i = 0; i < first.plan.groups.size(); ++i) {
    EXPECT_EQ(second.plan.groups[i].backend, first.plan.groups[i].backend);
    EXPECT_EQ(second.plan.groups[i].nodes, first.plan.groups[i].nodes);
  }
  fs::remove(db);
}

TEST(Tune, PlanForAnotherModelIsRefused) {
  Graph g = small_cnn();
  Session s(g, SessionOptions{});
  Plan plan = s.plan();
  plan.model_hash = "not-this-model";
  try {
    Session other(g, plan, SessionOptions{});
    FAIL() << "plan accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos);
  }
  Plan unknown = s.plan();
  unknown.groups[0].backend = "no-such-backend";
  EXPECT_THROW(Session(g, unknown, SessionOptions{}), Error);
  Plan missing = s.plan();
  missing.groups.pop_back();
  EXPECT_THROW(Session(g, missing, SessionOptions{}), Error);
}

}  // namespace
}  // namespace collage
