// End-to-end tuning on a small graph with real measurements: the plan covers the graph,
// runs correctly, and a second tuning reuses every cost from the database.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <omp.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <thread>

#include "backend_test_util.h"
#include "collage/session.h"
#include "collage/tune.h"
#include "graph_builder.h"
#include "search/measured_costs.h"
#include "search/never_worse.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

using testing::TempCostDb;

// The test's own SQL on a cost DB (tables of cost_db_sqlite.cc): counts and rewrites.
class CostDbSql {
 public:
  explicit CostDbSql(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
  }
  ~CostDbSql() { sqlite3_close(db_); }
  CostDbSql(const CostDbSql&) = delete;
  CostDbSql& operator=(const CostDbSql&) = delete;

  int count(const std::string& where) {
    sqlite3_stmt* stmt = nullptr;
    const std::string q = "SELECT count(*) FROM costs WHERE " + where;
    EXPECT_EQ(sqlite3_prepare_v2(db_, q.c_str(), -1, &stmt, nullptr), SQLITE_OK) << q;
    EXPECT_EQ(sqlite3_step(stmt), SQLITE_ROW) << q;
    const int n = sqlite3_column_int(stmt, 0);
    sqlite3_finalize(stmt);
    return n;
  }
  // The cost_ms of every record `where` selects.
  std::vector<double> costs(const std::string& where) { return reals("cost_ms", where); }
  // A REAL column of every record `where` selects.
  std::vector<double> reals(const std::string& column, const std::string& where) {
    sqlite3_stmt* stmt = nullptr;
    const std::string q = "SELECT " + column + " FROM costs WHERE " + where;
    EXPECT_EQ(sqlite3_prepare_v2(db_, q.c_str(), -1, &stmt, nullptr), SQLITE_OK) << q;
    std::vector<double> out;
    while (sqlite3_step(stmt) == SQLITE_ROW) out.push_back(sqlite3_column_double(stmt, 0));
    sqlite3_finalize(stmt);
    return out;
  }
  void exec(const std::string& statement) {
    EXPECT_EQ(sqlite3_exec(db_, statement.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << statement;
  }

 private:
  sqlite3* db_ = nullptr;
};

Graph small_cnn(int64_t in_channels = 8, int64_t out_channels = 16, int64_t side = 12) {
  testing::GraphBuilder b(13);
  ValueId x = b.input("x", DType::kFloat32, {1, in_channels, side, side});
  ValueId w = b.random_constant("w", {out_channels, in_channels, 3, 3}, 0.2f);
  ValueId bias = b.random_constant("b", {out_channels}, 0.1f);
  ValueId c = b.add1("Conv", {x, w, bias}, {{"pads", testing::attr_ints({1, 1, 1, 1})}});
  ValueId r = b.add1("Relu", {c});
  ValueId p = b.add1("GlobalAveragePool", {r});
  ValueId f = b.add1("Flatten", {p});
  ValueId fc = b.random_constant("fc", {out_channels, 10}, 0.3f);
  ValueId m = b.add1("MatMul", {f, fc});
  b.output(b.add1("Sigmoid", {m}));
  return b.finish();
}

// Two backends and the op-level search into `db`: a tune of small_cnn in about a second,
// for the tests that rewrite its cost DB between tunes.
TuneOptions quick_tune_options(const TempCostDb& db) {
  TuneOptions options;
  options.cost_db_path = db.path();
  options.backends = {"onednn", "blas"};
  options.optimizer = Optimizer::kOpLevel;
  return options;
}

TEST(Tune, PlanCoversGraphRunsCorrectlyAndReusesCosts) {
  TempCostDb db("tune_test");
  Graph g = small_cnn();
  TuneOptions options;
  options.cost_db_path = db.path();
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

  // The winner is never slower than a single-backend plan measured beside it, nor slower
  // than a tuned one but for the margin a plan of fewer kernels is given
  // (search/never_worse.h).
  double winner_ms = first.plan.measured_ms;
  for (const PlanTiming& t : first.timings) {
    if (!t.timed) continue;
    const bool single_backend = t.name.rfind("tuned", 0) != 0;
    EXPECT_LE(winner_ms, (single_backend ? 1 : 1 + kSimplerPlanMargin) * t.measured_ms + 1e-9)
        << t.name;
    if (winner_ms > t.measured_ms) EXPECT_LT(first.plan.groups.size(), t.steps) << t.name;
  }
  EXPECT_GT(first.plans_timed, 0u);
  // A graph-level backend's plan is a contender in each region variant its conv takes too.
  std::set<std::string> contenders;
  for (const PlanTiming& t : first.timings) contenders.insert(t.name);
  for (const char* variant :
       {"onednn-graph/blocked", "onednn-graph/winograd", "onednn-graph/winograd2x2"})
    EXPECT_EQ(contenders.count(variant), 1u) << variant;
  EXPECT_EQ(contenders.count("onednn-graph/"), 0u);

  // The plan survives JSON and runs with outputs matching reference.
  Plan plan = Plan::from_json(first.plan.to_json());
  Session tuned(g, plan, SessionOptions{});
  Session reference(g, SessionOptions{});
  auto inputs = random_inputs(g, 9);
  EXPECT_TRUE(testing::outputs_match(tuned.run(inputs), reference.run(inputs)));

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
}

// Where candidates cost about the same, the search keeps the one whose sample came out
// lowest; the written prediction must come from a second measurement of the winners, not
// from the samples the choice was made by. A DB whose kernel costs are all 1.5x too low (a
// search fed only lucky samples) must not change the prediction of a warm re-tune. A
// confirmation 1000x off (timed while something else held the cores) is settled by a third
// sample, the median of the three kept.
// The budget bounds the graph-level search's wall time: each plan it tries is charged all
// it made the tuner do, the measuring of its new merged regions alone included
// (fitness_of in search/tuner.cc).
TEST(Tune, TheSearchChargesEachPlanTheRegionsItMeasuredFirst) {
  TempCostDb db("tune_search_clock");
  // A chain longer than the candidates' regions (at most 8 nodes): the search's seeds merge
  // it into regions first measured when a genome holds them.
  testing::GraphBuilder b(21);
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 24, 24});
  for (int i = 0; i < 8; ++i) {
    ValueId w = b.random_constant(fmt::format("w{}", i), {16, 16, 3, 3}, 0.1f);
    x = b.add1("Relu", {b.add1("Conv", {x, w}, {{"pads", testing::attr_ints({1, 1, 1, 1})}})});
  }
  b.output(x);
  Graph g = b.finish();
  TuneOptions options;
  options.cost_db_path = db.path();
  options.backends = {"onednn", "onednn-graph"};
  options.budget_s = 120;  // the search ends by patience
  TuneResult r = tune(g, options);
  ASSERT_GT(r.genomes_evaluated, 0u);
  CostDbSql sql(db.path());
  const std::vector<double> charged = sql.reals("spent_s", "backend = 'plan'");
  ASSERT_FALSE(charged.empty());
  const double charged_s = std::accumulate(charged.begin(), charged.end(), 0.0);
  // A region measured alone (compiled, checked against reference, timed with evictions) takes
  // many times the ~5 runs of a plan's timing: off the clock, the plans held about half of
  // the search's time here (0.013 of 0.029 s), on it ~97 %.
  EXPECT_GT(charged_s, 0.7 * r.graph_search_s) << charged_s << " of " << r.graph_search_s << " s";
  EXPECT_LE(charged_s, r.graph_search_s);
}

TEST(Tune, ThePredictionTakesConfirmedCostsNotTheSamplesTheChoiceWasMadeBy) {
  TempCostDb db("tune_confirm");
  Graph g = small_cnn();
  const TuneOptions options = quick_tune_options(db);
  TuneResult first = tune(g, options);
  ASSERT_GT(first.plan.predicted_ms, 0);
  double groups_ms = 0;
  for (const PlanGroup& group : first.plan.groups) groups_ms += group.cost_ms;
  EXPECT_GT(groups_ms, 0);
  EXPECT_LE(groups_ms, first.plan.predicted_ms);

  CostDbSql sql(db.path());
  auto count = [&](const std::string& where) { return sql.count(where); };
  auto exec = [&](const std::string& statement) { sql.exec(statement); };
  // A confirmation for each group of the tuned placement (and of the written plan's, when a
  // single-backend plan won).
  EXPECT_GE(count("backend = 'confirmation' AND ok = 1"),
            static_cast<int>(first.plan.groups.size()));
  // From here on the arithmetic is the test's, not the machine's: each confirmation set to
  // its kernel's first sample (a confirmation's key is the sample's plus "\nconfirmation"),
  // the third samples dropped, and `first` re-read from that DB. Real samples on a loaded
  // machine disagree past 2x now and then (a clean-clone `make test` of 2026-11-29, another
  // test holding the cores: a third sample in the cold tune failed every count below).
  // A recheck (a sample taken when the cold tune's plan timed far from its prediction: a
  // clean-clone `make test` of 2026-12-06, another test holding the cores, timed a 0.031 ms
  // prediction at 1.236 ms side by side) is kept as a confirmation record too, and is the
  // newest sample, which confirmed_cost_ms takes over the confirmations: the arithmetic
  // below leaves it as it is, and the last part, about confirmations, removes it.
  const char* thirds = "backend = 'confirmation' AND subgraph LIKE '%confirmation 2%'";
  const char* rechecks = "backend = 'confirmation' AND subgraph LIKE '%recheck%'";
  exec(std::string("DELETE FROM costs WHERE ") + thirds);
  exec(
      "UPDATE costs SET cost_ms = (SELECT s.cost_ms FROM costs s WHERE s.key || char(10) || "
      "'confirmation' = costs.key) WHERE backend = 'confirmation' AND ok = 1 AND subgraph NOT "
      "LIKE '%recheck%'");
  first = tune(g, options);
  EXPECT_EQ(first.measured, 0u);
  // The confirmed costs the rest compares with are now those of this DB.
  groups_ms = 0;
  for (const PlanGroup& group : first.plan.groups) groups_ms += group.cost_ms;
  EXPECT_LE(groups_ms, first.plan.predicted_ms);
  // Every kernel's first sample 1.5x too low, and the overheads with them (so that the
  // search, seeing the same ratios, makes the same choice).
  const char* samples = "backend NOT IN ('confirmation', 'plan', 'plan-side-by-side') AND ok = 1";
  ASSERT_GT(count(samples), 0);
  exec(std::string("UPDATE costs SET cost_ms = cost_ms / 1.5 WHERE ") + samples);
  EXPECT_EQ(count(thirds), 0);

  TuneResult second = tune(g, options);
  EXPECT_EQ(second.measured, 0u);
  EXPECT_EQ(second.winner, first.winner);
  ASSERT_EQ(second.plan.groups.size(), first.plan.groups.size());
  for (size_t i = 0; i < first.plan.groups.size(); ++i)
    EXPECT_EQ(second.plan.groups[i].cost_ms, first.plan.groups[i].cost_ms) << i;
  // The sum of the confirmed costs, plus the step overheads (now 1.5x smaller).
  EXPECT_GE(second.plan.predicted_ms, groups_ms);
  EXPECT_LE(second.plan.predicted_ms, first.plan.predicted_ms);
  // Samples that agree within 2x: no third was taken.
  EXPECT_EQ(count(thirds), 0);

  // Confirmations a million times too high (timed while something else held the cores):
  // every group gets a third sample, and the median of the three is not the outlier. The
  // third is a real timing: with another test holding both cores, a 16 us kernel's came
  // out at 1000x or more (its OpenMP team waiting for a descheduled thread; a clean-clone
  // `make test` of 2026-11-27), so the outlier is far beyond what a loaded machine makes and
  // the bound sits between them.
  exec(std::string("DELETE FROM costs WHERE ") + rechecks);
  exec("UPDATE costs SET cost_ms = cost_ms * 1e6 WHERE backend = 'confirmation' AND ok = 1");
  TuneResult third = tune(g, options);
  EXPECT_EQ(third.winner, first.winner);
  EXPECT_GE(count(thirds), 1);
  ASSERT_EQ(third.plan.groups.size(), first.plan.groups.size());
  for (size_t i = 0; i < first.plan.groups.size(); ++i)
    EXPECT_LE(third.plan.groups[i].cost_ms, 1e4 * first.plan.groups[i].cost_ms) << i;
}

// Both early samples of every kernel far too high (taken while something else held the
// cores: the median of a third keeps them) and the plans' times side by side right: the
// tune's written plan is timed far from its prediction, so its kernels are sampled once
// more and the prediction takes those samples; a later tune reads them and samples nothing.
// The recheck records of a cost DB (MeasuredCosts::recheck_cost_ms).
const std::string kRechecks = "backend = 'confirmation' AND subgraph LIKE '%recheck%'";
constexpr double kOff = 100;

// After a cold tune: its own rechecks, if it took any, deleted, and every kernel sample,
// confirmation and overhead kOff times (the search sees the same ratios and makes the same
// choice); the plans' side-by-side times left as measured.
void scale_kernel_records(CostDbSql& sql) {
  sql.exec("DELETE FROM costs WHERE " + kRechecks);
  sql.exec(
      fmt::format("UPDATE costs SET cost_ms = cost_ms * {} WHERE backend NOT IN ('plan', "
                  "'plan-side-by-side') AND ok = 1",
                  kOff));
}

TEST(Tune, APredictionItsPlansTimeContradictsIsSampledAgainOnce) {
  TempCostDb db("tune_recheck");
  Graph g = small_cnn();
  const TuneOptions options = quick_tune_options(db);
  const TuneResult first = tune(g, options);
  ASSERT_GT(first.plan.measured_ms, 0);
  CostDbSql sql(db.path());
  scale_kernel_records(sql);
  // The plans' side-by-side times 100x the kernels' (still far from the predictions): the
  // recheck bound (Tune.ARecheckSlowerThanItsWholePlan...) then refuses no real sample here.
  // At their real ~7 us it refused a microsecond kernel's sample that a test beside this one
  // slowed past 0.1 ms, and the kernel kept its 100x record (a clean-clone `make test` of
  // 2026-12-07).
  constexpr double kPlanOff = kOff * 100;
  sql.exec(fmt::format(
      "UPDATE costs SET cost_ms = cost_ms * {} WHERE backend = 'plan-side-by-side' AND ok = 1",
      kPlanOff));
  const std::string& rechecks = kRechecks;

  const TuneResult second = tune(g, options);
  EXPECT_EQ(second.measured, 0u);
  EXPECT_EQ(second.winner, first.winner);
  EXPECT_EQ(second.plan.measured_ms, first.plan.measured_ms * kPlanOff);
  // One new sample per kernel of the written plan, and each kernel's cost is one of them, not
  // its 100x record. (Compared by identity, not by size: a unit test beside it in a loaded
  // clean-clone `make test` ran a ~5 us kernel's real sample at 1.49 ms, past kOff / 4 x its
  // first cost, on 2026-12-07.)
  const std::vector<double> samples = sql.costs(rechecks + " AND ok = 1");
  EXPECT_EQ(samples.size(), second.plan.groups.size());
  ASSERT_EQ(second.plan.groups.size(), first.plan.groups.size());
  for (size_t i = 0; i < first.plan.groups.size(); ++i) {
    const double cost = second.plan.groups[i].cost_ms;
    EXPECT_GT(cost, 0) << i;
    EXPECT_NE(std::find(samples.begin(), samples.end(), cost), samples.end()) << i;
    EXPECT_NE(cost, first.plan.groups[i].cost_ms * kOff) << i;
  }

  // The new samples are the confirmed costs from now on: nothing sampled again.
  const TuneResult third = tune(g, options);
  EXPECT_EQ(third.measured, 0u);
  EXPECT_EQ(sql.count(rechecks), static_cast<int>(second.plan.groups.size()));
  ASSERT_EQ(third.plan.groups.size(), second.plan.groups.size());
  for (size_t i = 0; i < second.plan.groups.size(); ++i)
    EXPECT_EQ(third.plan.groups[i].cost_ms, second.plan.groups[i].cost_ms) << i;
  EXPECT_EQ(third.plan.predicted_ms, second.plan.predicted_ms);
}

// A recheck sample much slower than the whole plan it belongs to (timed side by side) fell in
// a slow window: the kernel keeps its confirmed cost, and the recheck record says so. Here the
// kernels' records read 100x and the plans' side-by-side times ~0: every real recheck sample
// is over its plan's time. Fails if such samples were taken (the costs would drop to the
// real ones, as in the test above).
TEST(Tune, ARecheckSlowerThanItsWholePlanKeepsAnEarlierSampleUnderIt) {
  TempCostDb db("tune_recheck_bound");
  // A conv of ~0.4 ms: its samples exceed a plan of ~0 ms by more than the 0.1 ms a
  // microsecond kernel's noise is allowed.
  Graph g = small_cnn(32, 64, 56);
  const TuneOptions options = quick_tune_options(db);
  const TuneResult first = tune(g, options);
  ASSERT_GT(first.plan.measured_ms, 0);
  CostDbSql sql(db.path());
  scale_kernel_records(sql);
  sql.exec("UPDATE costs SET cost_ms = 1e-6 WHERE backend = 'plan-side-by-side' AND ok = 1");
  const std::string& rechecks = kRechecks;

  const TuneResult second = tune(g, options);
  EXPECT_EQ(second.measured, 0u);
  ASSERT_GT(second.plan.groups.size(), 0u);
  // One recheck per kernel of the written plan. The conv's real samples (~0.4 ms) are over
  // the bound: its recheck holds its confirmed cost, no less than the least of its (100x)
  // first sample and confirmations, where the real sample would be ~1/100 of them. The
  // microsecond kernels' samples are within the 0.1 ms allowed and are taken.
  const int groups = static_cast<int>(second.plan.groups.size());
  EXPECT_EQ(sql.count(rechecks + " AND ok = 1"), groups);
  const std::string bounded = rechecks + " AND reason LIKE '%over its whole plan%'";
  EXPECT_GE(sql.count(bounded), 1);
  const std::string base = "replace(costs.key, char(10) || 'recheck', '')";
  EXPECT_EQ(sql.count(bounded + fmt::format(" AND cost_ms >= (SELECT min(c.cost_ms) FROM costs "
                                            "c WHERE c.key IN ({0}, {0} || char(10) || "
                                            "'confirmation', {0} || char(10) || "
                                            "'confirmation 2'))",
                                            base)),
            sql.count(bounded));
  EXPECT_EQ(sql.count(rechecks + " AND reason = '' AND cost_ms <= 0.1001"),
            groups - sql.count(bounded));
  // A warm re-tune reads the same costs.
  const TuneResult third = tune(g, options);
  EXPECT_EQ(third.measured, 0u);
  EXPECT_EQ(third.plan.predicted_ms, second.plan.predicted_ms);
}

// The recheck bound's fallback (MeasuredCosts::recheck_cost_ms): where the confirmed cost is
// over the bound too, a bounded recheck keeps the first sample. A real conv of ~0.4 ms, its
// confirmation set 100x too high and its first sample under the 0.1 ms bound of a ~0 ms plan;
// the real recheck sample (over that bound) is not taken. Fails if the recheck kept the
// confirmation or the sample.
TEST(Tune, ABoundedRecheckFallsBackToTheFirstSampleWhenTheConfirmationIsOverTheBoundToo) {
  TempCostDb db("tune_recheck_first");
  const Graph g = small_cnn(32, 64, 56);
  Backend& onednn = BackendRegistry::global().get("onednn");
  const Candidate conv{{0, 1}, &onednn, "", 1};
  {
    CostDb costs_db(db.path());
    MeasuredCosts costs(g, costs_db, this_machine(1), 1, false, 30);
    ASSERT_TRUE(std::isfinite(costs.confirmed_cost_ms(conv)));
  }
  CostDbSql sql(db.path());
  const std::string first = "backend = 'onednn'", confirmation = "backend = 'confirmation'";
  ASSERT_EQ(sql.count(first + " AND ok = 1"), 1);
  ASSERT_GE(sql.count(confirmation + " AND ok = 1"), 1);
  sql.exec("UPDATE costs SET cost_ms = 0.05 WHERE " + first);
  sql.exec("UPDATE costs SET cost_ms = cost_ms * 100 WHERE " + confirmation);
  CostDb costs_db(db.path());
  MeasuredCosts costs(g, costs_db, this_machine(1), 1, false, 30);
  // Over the bound: the 100x confirmation, or a real third sample where the two disagree.
  ASSERT_GT(costs.confirmed_cost_ms(conv), 0.1);
  EXPECT_EQ(costs.recheck_cost_ms(conv, 1e-6), 0.05);
  EXPECT_EQ(sql.count(kRechecks + " AND cost_ms = 0.05 AND reason LIKE '%over its whole plan%'"),
            1);
}

TEST(Search, APredictionIsContradictedByATimeOffByATenthAndATenthOfAMillisecond) {
  EXPECT_FALSE(prediction_contradicted(10.0, 10.9));
  EXPECT_TRUE(prediction_contradicted(10.0, 8.9));
  EXPECT_TRUE(prediction_contradicted(14.8, 9.2));
  // Microsecond plans miss by their step overheads: not a reason to sample again.
  EXPECT_FALSE(prediction_contradicted(0.084, 0.063));
  EXPECT_FALSE(prediction_contradicted(std::numeric_limits<double>::quiet_NaN(), 1.0));
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

// Every distinct value of a column of the cost database's records.
std::vector<std::string> distinct_column(const fs::path& db, const char* column) {
  sqlite3* handle = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::vector<std::string> values;
  sqlite3_stmt* stmt = nullptr;
  const std::string sql = std::string("SELECT DISTINCT ") + column + " FROM costs";
  EXPECT_EQ(sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW)
    values.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return values;
}

// The thread count is a parameter of the whole tuning: measured, searched and written with
// it, never with every core (which the step-overhead measurement once switched to).
TEST(Tune, OneThreadIsMeasuredAndWrittenThroughout) {
  if (std::thread::hardware_concurrency() < 2)
    GTEST_SKIP() << "needs 2+ cores to tell one thread from every core";
  TempCostDb db("tune_1t");
  Graph g = small_cnn();
  TuneOptions options;
  options.cost_db_path = db.path();
  options.threads = 1;
  options.budget_s = 10;
  TuneResult r = tune(g, options);
  EXPECT_EQ(r.plan.threads, 1);
  EXPECT_NE(r.plan.hardware.find("| 1 threads"), std::string::npos) << r.plan.hardware;
  EXPECT_EQ(r.concurrent_stages, 0);
  for (const PlanGroup& group : r.plan.groups) {
    EXPECT_EQ(group.threads, 1) << group.backend << " " << group.nodes.front();
    EXPECT_EQ(group.stage, 0);
    EXPECT_EQ(group.lane, 0);
  }
  // Every record: kernels, the step overhead, whole-plan latencies.
  std::vector<std::string> hardware = distinct_column(db.path(), "hardware");
  ASSERT_FALSE(hardware.empty());
  for (const std::string& h : hardware)
    EXPECT_NE(h.find("| 1 threads"), std::string::npos) << "a record measured with " << h;
  std::vector<std::string> kinds = distinct_column(db.path(), "backend");
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "step-overhead"), kinds.end());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "plan-side-by-side"), kinds.end());
  // The session it makes runs on one thread too.
  Session session(g, r.plan, SessionOptions{});
  EXPECT_EQ(session.threads(), 1);
}

// A test backend named `name` that takes every Relu and runs it with a `RunKernel`.
template <class RunKernel>
class ReluBackend : public Backend {
 public:
  explicit ReluBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "1"; }
  std::vector<PatternEntry> patterns() const override { return {{"relu", op("Relu"), {}}}; }
  std::unique_ptr<Kernel> compile(const Graph&, const CompileOptions&) override {
    return std::make_unique<RunKernel>();
  }

 private:
  std::string name_;
};

// Three Relus in a row on 64 floats.
Graph relu_chain() {
  testing::GraphBuilder b;
  ValueId v = b.input("x", DType::kFloat32, {64});
  for (int i = 0; i < 3; ++i) v = b.add1("Relu", {v});
  b.output(v);
  return b.finish();
}

// A backend whose Relu kernels record the OpenMP thread count they run with (the count
// OpenMP libraries such as oneDNN use).
std::set<int>& seen_thread_counts() {
  static std::set<int> seen;
  return seen;
}
class ThreadProbeKernel : public Kernel {
 public:
  void run(std::span<const Tensor> in, std::span<const Tensor> out) override {
    seen_thread_counts().insert(omp_get_max_threads());
    const float* x = in[0].data<float>();
    float* y = out[0].data<float>();
    for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = x[i] > 0 ? x[i] : 0;
  }
};

TEST(Tune, KernelsRunWithTheTuningsThreadCount) {
  if (std::thread::hardware_concurrency() < 2)
    GTEST_SKIP() << "needs 2+ cores to tell one thread from every core";
  BackendRegistry::global().add(
      std::make_shared<ReluBackend<ThreadProbeKernel>>("test-thread-probe"));
  const Graph g = relu_chain();
  for (int threads : {1, 2}) {
    TempCostDb db(fmt::format("tune_probe_{}", threads));
    seen_thread_counts().clear();
    TuneOptions options;
    options.cost_db_path = db.path();
    options.threads = threads;
    options.backends = {"test-thread-probe"};
    options.budget_s = 5;
    TuneResult r = tune(g, options);
    EXPECT_EQ(r.winner, "tuned");
    EXPECT_EQ(seen_thread_counts(), (std::set<int>{threads}))
        << "kernels of a " << threads << "-thread tuning ran with other counts";
  }
}

// A Relu kernel that computes garbage (every output 7): each kernel of a backend of it fails
// the check against reference, so its single-backend plan cannot run; tune's table says so instead
// of leaving it out (as it did for cuda-graph under TF32, DESIGN "GPU backends").
class WrongReluKernel : public Kernel {
 public:
  void run(std::span<const Tensor>, std::span<const Tensor> out) override {
    float* y = out[0].data<float>();
    for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = 7.0f;
  }
};

TEST(Tune, ASingleBackendPlanThatCannotRunIsARowWithItsReason) {
  BackendRegistry::global().add(std::make_shared<ReluBackend<WrongReluKernel>>("test-wrong-relu"));
  const Graph g = relu_chain();
  TempCostDb db("tune_wrong_relu");
  TuneOptions options;
  options.cost_db_path = db.path();
  options.threads = 1;
  options.backends = {"test-wrong-relu"};
  options.budget_s = 5;
  TuneResult r = tune(g, options);
  EXPECT_EQ(r.winner, "tuned");
  auto row = std::find_if(r.timings.begin(), r.timings.end(),
                          [](const PlanTiming& t) { return t.name == "test-wrong-relu"; });
  ASSERT_NE(row, r.timings.end()) << "the single-backend plan is missing from the table";
  EXPECT_FALSE(row->timed);
  EXPECT_NE(row->not_timed_reason.find("failed when measured alone"), std::string::npos)
      << row->not_timed_reason;
  // The written plan runs nothing of it.
  for (const PlanGroup& group : r.plan.groups) EXPECT_NE(group.backend, "test-wrong-relu");
}

}  // namespace
}  // namespace collage
