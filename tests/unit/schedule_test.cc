// The schedule search under costs the test controls (its choices are known), and the
// concurrent executor on real kernels: running branches at once never changes the outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "collage/session.h"
#include "graph_builder.h"
#include "models/zoo.h"
#include "runtime/executor.h"
#include "runtime/partitioner.h"
#include "search/schedule.h"
#include "table_costs.h"
#include "util/compare.h"

namespace collage {
namespace {

using testing::candidates_for;
using testing::TableCosts;

// x -> a -> {b, c} -> d(Add): a fork of two branches joined again.
Graph fork_join() {
  testing::GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {8});
  ValueId a = gb.add1("Relu", {x});
  ValueId b = gb.add1("Sigmoid", {a});
  ValueId c = gb.add1("Tanh", {a});
  gb.output(gb.add1("Add", {b, c}));
  return gb.finish();
}

// The slot of the candidate that holds `node`.
Slot slot_of(const ScheduledPlan& p, NodeId node) {
  for (size_t i = 0; i < p.placement.size(); ++i)
    if (std::count(p.placement[i].nodes.begin(), p.placement[i].nodes.end(), node))
      return p.schedule[i];
  ADD_FAILURE() << "node " << node << " not scheduled";
  return {};
}
int threads_of(const ScheduledPlan& p, NodeId node) {
  for (const Candidate& c : p.placement)
    if (std::count(c.nodes.begin(), c.nodes.end(), node)) return c.threads;
  return -1;
}

TEST(Schedule, BranchesThatScaleBadlyRunAtOnce) {
  Graph g = fork_join();
  // Each step 1 ms on two threads; the branches take 1.2 ms on one. Sequential: 4 ms; the
  // branches at once: 1 + (1.2 + 0.1 hand-off) + 1 = 3.3 ms.
  TableCosts costs({{{{0}, 2}, 1.0},
                    {{{1}, 2}, 1.0},
                    {{{2}, 2}, 1.0},
                    {{{3}, 2}, 1.0},
                    {{{1}, 1}, 1.2},
                    {{{2}, 1}, 1.2}},
                   0.0, 0.1);
  ScheduledPlan p = choose_schedule(g, candidates_for({{0}, {1}, {2}, {3}}, 2), costs, 2);
  ASSERT_TRUE(p.concurrent());
  EXPECT_EQ(p.concurrent_stages, 1);
  EXPECT_NEAR(p.predicted_ms, 3.3, 1e-12);
  EXPECT_NEAR(p.sequential_ms, 4.0, 1e-12);
  EXPECT_EQ(slot_of(p, 1).stage, slot_of(p, 2).stage);
  EXPECT_NE(slot_of(p, 1).lane, slot_of(p, 2).lane);
  EXPECT_LT(slot_of(p, 0).stage, slot_of(p, 1).stage);
  EXPECT_GT(slot_of(p, 3).stage, slot_of(p, 1).stage);
  EXPECT_EQ(threads_of(p, 1), 1);
  EXPECT_EQ(threads_of(p, 2), 1);
  EXPECT_EQ(threads_of(p, 0), 2);
  EXPECT_EQ(threads_of(p, 3), 2);
}

TEST(Schedule, BranchesThatScaleWellRunOneAfterAnother) {
  Graph g = fork_join();
  // On one thread each branch takes 2.5 ms (more than both on two threads, 2 ms).
  TableCosts costs({{{{0}, 2}, 1.0},
                    {{{1}, 2}, 1.0},
                    {{{2}, 2}, 1.0},
                    {{{3}, 2}, 1.0},
                    {{{1}, 1}, 2.5},
                    {{{2}, 1}, 2.5}},
                   0.0, 0.1);
  ScheduledPlan p = choose_schedule(g, candidates_for({{0}, {1}, {2}, {3}}, 2), costs, 2);
  EXPECT_FALSE(p.concurrent());
  EXPECT_NEAR(p.predicted_ms, p.sequential_ms, 1e-12);
  for (const Candidate& c : p.placement) EXPECT_EQ(c.threads, 2);
  for (const Slot& s : p.schedule) EXPECT_EQ(s, (Slot{0, 0}));
}

TEST(Schedule, OneThreadNeverRunsAnythingAtOnce) {
  Graph g = fork_join();
  TableCosts costs({{{{0}, 1}, 1.0}, {{{1}, 1}, 1.0}, {{{2}, 1}, 1.0}, {{{3}, 1}, 1.0}}, 0.0, 0.0);
  ScheduledPlan p = choose_schedule(g, candidates_for({{0}, {1}, {2}, {3}}, 1), costs, 1);
  EXPECT_FALSE(p.concurrent());
  for (const Slot& s : p.schedule) EXPECT_EQ(s, (Slot{0, 0}));
  EXPECT_TRUE(lane_shares(1).empty());
  EXPECT_EQ(lane_shares(2), (std::vector<int>{1}));
  EXPECT_EQ(lane_shares(8), (std::vector<int>{4, 2, 1}));
}

// x -> a -> four branches of 4, 3, 2 and 1 steps -> Concat: an inception block.
TEST(Schedule, BranchesArePackedLongestFirst) {
  testing::GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {8});
  ValueId a = gb.add1("Relu", {x});
  std::vector<ValueId> ends;
  for (int length : {4, 3, 2, 1}) {
    ValueId v = a;
    for (int i = 0; i < length; ++i) v = gb.add1("Relu", {v});
    ends.push_back(v);
  }
  gb.output(gb.add1("Concat", ends, {{"axis", testing::attr_i(0)}}));
  Graph g = gb.finish();
  std::vector<std::vector<NodeId>> sets;
  std::map<TableCosts::Key, double> table;
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    sets.push_back({static_cast<NodeId>(n)});
    table[{{static_cast<NodeId>(n)}, 2}] = 1.0;
    table[{{static_cast<NodeId>(n)}, 1}] = 1.0;  // no gain from a second thread at all
  }
  TableCosts costs(table, 0.0, 0.0);
  ScheduledPlan p = choose_schedule(g, candidates_for(sets, 2), costs, 2);
  ASSERT_TRUE(p.concurrent());
  // Lanes {4, 1} and {3, 2}: 5 ms, between the trunk's two steps.
  EXPECT_NEAR(p.predicted_ms, 1 + 5 + 1, 1e-12);
  EXPECT_NEAR(p.sequential_ms, 12, 1e-12);
  // The first branch's steps (nodes 1-4) and the last one's (node 10) share a lane.
  EXPECT_EQ(slot_of(p, 1).lane, slot_of(p, 10).lane);
  EXPECT_EQ(slot_of(p, 5).lane, slot_of(p, 8).lane);
  EXPECT_NE(slot_of(p, 1).lane, slot_of(p, 5).lane);
}

TEST(Schedule, ParallelismNestedInABranchIsFoundWhenTheOuterOneDoesNotPay) {
  // x -> a -> { b -> {c, d} -> e }, { f } -> g: running the two outer branches at once does
  // not pay (the long one scales well), but c and d inside it do.
  testing::GraphBuilder gb;
  ValueId x = gb.input("x", DType::kFloat32, {8});
  ValueId a = gb.add1("Relu", {x});     // 0
  ValueId b = gb.add1("Relu", {a});     // 1
  ValueId c = gb.add1("Sigmoid", {b});  // 2
  ValueId d = gb.add1("Tanh", {b});     // 3
  ValueId e = gb.add1("Add", {c, d});   // 4
  ValueId f = gb.add1("Neg", {a});      // 5
  gb.output(gb.add1("Add", {e, f}));    // 6
  Graph g = gb.finish();
  std::map<TableCosts::Key, double> table;
  for (NodeId n = 0; n < 7; ++n) table[{{n}, 2}] = 1.0;
  table[{{5}, 2}] = 0.1;
  for (NodeId n : {1, 4}) table[{{n}, 1}] = 2.0;
  for (NodeId n : {2, 3}) table[{{n}, 1}] = 1.1;
  table[{{5}, 1}] = 0.1;
  TableCosts costs(table, 0.0, 0.1);
  ScheduledPlan p =
      choose_schedule(g, candidates_for({{0}, {1}, {2}, {3}, {4}, {5}, {6}}, 2), costs, 2);
  ASSERT_EQ(p.concurrent_stages, 1);
  EXPECT_EQ(slot_of(p, 2).stage, slot_of(p, 3).stage);
  EXPECT_NE(slot_of(p, 2).lane, slot_of(p, 3).lane);
  EXPECT_NE(slot_of(p, 1).stage, slot_of(p, 2).stage);
  EXPECT_NEAR(p.predicted_ms, 1 + 1 + (1.1 + 0.1) + 1 + 0.1 + 1, 1e-12);
}

// `g` on onednn's kernels, scheduled with costs that make every concurrent stage pay (each
// kernel twice as fast on half the threads).
ScheduledPlan schedule_where_concurrency_pays(const Graph& g, int threads) {
  Backend& backend = BackendRegistry::global().get("onednn");
  Placement placement =
      complete_placement(g, place_on_single_backend(g, backend, threads), threads);
  std::map<TableCosts::Key, double> table;
  for (const Candidate& c : placement) {
    table[{c.nodes, threads}] = 1.0;
    table[{c.nodes, 1}] = 0.5;
  }
  TableCosts costs(table, 0.0, 0.0);
  return choose_schedule(g, placement, costs, threads);
}

// A whole CNN with concurrent stages wherever the graph allows (costs that make every
// concurrent stage pay), on a real backend's kernels: the outputs equal reference's, run
// after run, so no two concurrently live values shared bytes and no lane read a value
// before another lane wrote it.
TEST(ConcurrentExecutor, ComputesWhatReferenceComputesRunAfterRun) {
  const Graph g = models::build_zoo_model("googlenet-tiny");
  const int threads = 2;
  ScheduledPlan p = schedule_where_concurrency_pays(g, threads);
  ASSERT_GE(p.concurrent_stages, 3) << "googlenet-tiny has inception blocks";
  Executor concurrent(g, build_steps(g, p.placement, &p.schedule));
  EXPECT_EQ(concurrent.max_lanes(), 2);
  Session reference(g, SessionOptions{});
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    std::vector<Tensor> inputs = random_inputs(g, seed);
    std::vector<Tensor> got = concurrent.run(inputs);
    for (Tensor& t : got) t = t.clone();
    EXPECT_EQ(compare_outputs(got, reference.run(inputs), Tolerance::backend_vs_reference()), "")
        << "seed " << seed;
  }
  // The plan of this executor says so, and runs the same way from JSON.
  Plan plan = plan_of_steps(g, concurrent.steps(), threads, "test");
  Plan again = Plan::from_json(plan.to_json());
  std::set<int> stages_with_two_lanes;
  for (const PlanGroup& group : again.groups)
    if (group.lane == 1) stages_with_two_lanes.insert(group.stage);
  EXPECT_EQ(static_cast<int>(stages_with_two_lanes.size()), p.concurrent_stages);
  SessionOptions options;
  options.threads = threads;
  Session from_plan(g, again, options);
  std::vector<Tensor> inputs = random_inputs(g, 99);
  EXPECT_EQ(compare_outputs(from_plan.run(inputs), reference.run(inputs),
                            Tolerance::backend_vs_reference()),
            "");
}

// Plan format 1 (before schedules) has no variant, threads, stage or lane per group: such a
// plan still loads, and runs one step after another with the plan's thread count.
TEST(ConcurrentExecutor, VersionOnePlanRunsSequentially) {
  const Graph g = models::build_zoo_model("googlenet-tiny");
  const int threads = 2;
  ScheduledPlan p = schedule_where_concurrency_pays(g, threads);
  ASSERT_GE(p.concurrent_stages, 1);
  Executor concurrent(g, build_steps(g, p.placement, &p.schedule));
  nlohmann::json v1 =
      nlohmann::json::parse(plan_of_steps(g, concurrent.steps(), threads, "test").to_json());
  v1["version"] = 1;
  for (nlohmann::json& group : v1["groups"])
    for (const char* field : {"variant", "threads", "stage", "lane"}) group.erase(field);
  Plan old = Plan::from_json(v1.dump());
  SessionOptions options;
  options.threads = threads;
  Session session(g, old, options);
  for (const PlanGroup& group : session.plan().groups) {
    EXPECT_EQ(group.lane, 0);
    EXPECT_EQ(group.threads, threads);
  }
  Session reference(g, SessionOptions{});
  std::vector<Tensor> inputs = random_inputs(g, 7);
  EXPECT_EQ(compare_outputs(session.run(inputs), reference.run(inputs),
                            Tolerance::backend_vs_reference()),
            "");
}

TEST(ConcurrentExecutor, RefusesAPlanWhoseLanesReadEachOther) {
  Graph g = fork_join();
  Backend& fallback = BackendRegistry::global().fallback();
  // b and d in one stage on two lanes, but d reads b's value.
  Placement placement = {Candidate{{0}, &fallback, "", 1}, Candidate{{1}, &fallback, "", 1},
                         Candidate{{2}, &fallback, "", 1}, Candidate{{3}, &fallback, "", 1}};
  Schedule bad = {{0, 0}, {1, 0}, {2, 0}, {2, 1}};
  try {
    build_steps(g, placement, &bad);
    FAIL() << "a lane reading another lane's value was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("another lane"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collage
