// The slow-window guard (search/calm_wait.h): with a scripted probe and sleeps, what it waits
// and when it gives up; and a tune's wiring, with a scripted probe. (Whether a slow window
// is caught on this machine is a timing: bench/slow_window.sh measures it.)
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <numeric>

#include "backend_test_util.h"
#include "collage/tune.h"
#include "graph_builder.h"
#include "search/calm_wait.h"

namespace collage {
namespace {

Graph small_conv() {
  testing::GraphBuilder b(3);
  ValueId x = b.input("x", DType::kFloat32, {1, 16, 24, 24});
  ValueId w = b.random_constant("w", {32, 16, 3, 3}, 0.2f);
  ValueId c = b.add1("Conv", {x, w}, {{"pads", testing::attr_ints({1, 1, 1, 1})}});
  b.output(b.add1("Relu", {c}));
  return b.finish();
}

TuneOptions quick_options(const testing::TempCostDb& db) {
  TuneOptions options;
  options.cost_db_path = db.path();
  options.backends = {"onednn", "blas"};
  options.optimizer = Optimizer::kOpLevel;
  options.calm_wait_s = 8;
  return options;
}

// A probe that reads the scripted milliseconds in order (then the last one forever), and
// sleeps that only add up.
struct Script {
  std::deque<double> readings;
  double last = 1;
  int reads = 0;
  double slept_s = 0;

  std::unique_ptr<CalmWait> wait(CalmWaitOptions options) {
    return std::make_unique<CalmWait>(
        [this] {
          ++reads;
          if (!readings.empty()) {
            last = readings.front();
            readings.pop_front();
          }
          return last;
        },
        options, [this](double s) { slept_s += s; });
  }
};

CalmWaitOptions options_with_bound(double bound_s) {
  CalmWaitOptions o;
  o.bound_s = bound_s;
  o.poll_s = 0.5;
  o.recheck_every_s = 0;  // every call reads (no clock in these tests)
  return o;
}

TEST(CalmWait, WaitsWhileTheProbeReadsSlowThenGoesOn) {
  Script script;
  // Calm at 1 ms (a plan's fitness), then a window of three slow readings.
  script.readings = {1.6, 1.5, 1.4, 1.02};
  auto calm = script.wait(options_with_bound(20));
  calm->seed_calm_ms(1.0);
  EXPECT_TRUE(calm->wait_until_calm("confirming"));
  // Read slow (1.6), slept and read 1.5, 1.4, then 1.02: three naps.
  EXPECT_DOUBLE_EQ(script.slept_s, 1.5);
  ASSERT_EQ(calm->waits().size(), 1u);
  const SlowWindowWait& w = calm->waits()[0];
  EXPECT_EQ(w.phase, "confirming");
  EXPECT_DOUBLE_EQ(w.slowdown, 1.6);
  EXPECT_DOUBLE_EQ(w.waited_s, 1.5);
  EXPECT_DOUBLE_EQ(w.slowdown_after, 1.02);
  EXPECT_TRUE(w.calm_after);
  // Calm now: the next phase reads once and does not wait.
  const int reads = script.reads;
  EXPECT_TRUE(calm->wait_until_calm("comparing"));
  EXPECT_EQ(script.reads, reads + 1);
  EXPECT_DOUBLE_EQ(script.slept_s, 1.5);
  EXPECT_EQ(calm->waits().size(), 1u);
}

TEST(CalmWait, TheCalmTimeIsTheFastestReading) {
  Script script;
  script.readings = {1.2, 1.0, 2.0, 1.1};
  auto calm = script.wait(options_with_bound(20));
  // No seed: the first readings set the calm time, and are calm by it.
  EXPECT_TRUE(calm->wait_until_calm("confirming"));
  EXPECT_TRUE(calm->wait_until_calm("rechecking"));
  EXPECT_EQ(calm->calm_ms(), 1.0);
  EXPECT_TRUE(calm->wait_until_calm("comparing"));  // 2.0, then 1.1
  EXPECT_DOUBLE_EQ(script.slept_s, 0.5);
  ASSERT_EQ(calm->waits().size(), 1u);
  EXPECT_DOUBLE_EQ(calm->waits()[0].slowdown, 2.0);
  // A seed above the calm time changes nothing; one below it is the calm time.
  calm->seed_calm_ms(5);
  EXPECT_EQ(calm->calm_ms(), 1.0);
  calm->seed_calm_ms(0.8);
  EXPECT_EQ(calm->calm_ms(), 0.8);
}

TEST(CalmWait, WithinTheProbesSpreadIsCalm) {
  Script script;
  // 1.2x the calm time is a plan's own spread side by side, not a window.
  script.readings = {1.2, 1.24};
  auto calm = script.wait(options_with_bound(20));
  calm->seed_calm_ms(1.0);
  EXPECT_TRUE(calm->wait_until_calm("confirming"));
  EXPECT_TRUE(calm->wait_until_calm("comparing"));
  EXPECT_EQ(script.slept_s, 0);
  EXPECT_TRUE(calm->waits().empty());
}

TEST(CalmWait, GivesUpAtHalfTheBoundPerPhaseAndAtTheBoundInAll) {
  Script script;
  script.readings = {3.0};  // slow for good
  auto calm = script.wait(options_with_bound(6));
  calm->seed_calm_ms(1.0);
  EXPECT_FALSE(calm->wait_until_calm("confirming"));
  EXPECT_DOUBLE_EQ(script.slept_s, 3);  // half the bound
  // The same phase again (its next kernel): its half is spent, so it reads and goes on.
  EXPECT_FALSE(calm->wait_until_calm("confirming"));
  EXPECT_DOUBLE_EQ(script.slept_s, 3);
  EXPECT_FALSE(calm->wait_until_calm("comparing"));
  EXPECT_DOUBLE_EQ(script.slept_s, 6);  // the other half
  // The bound spent: no more waiting, nor reading.
  const int reads = script.reads;
  EXPECT_FALSE(calm->wait_until_calm("rechecking"));
  EXPECT_EQ(script.reads, reads);
  EXPECT_DOUBLE_EQ(calm->waited_s(), 6);
  ASSERT_EQ(calm->waits().size(), 2u);
  EXPECT_EQ(calm->waits()[0].phase, "confirming");
  EXPECT_DOUBLE_EQ(calm->waits()[0].waited_s, 3);
  EXPECT_FALSE(calm->waits()[0].calm_after);
  EXPECT_DOUBLE_EQ(calm->waits()[0].slowdown_after, 3);
  EXPECT_EQ(calm->waits()[1].phase, "comparing");
  EXPECT_DOUBLE_EQ(calm->waits()[1].waited_s, 3);
}

TEST(CalmWait, ABoundOfZeroNeverReadsAndAProbeThatCannotRunReadsCalm) {
  Script script;
  script.readings = {5.0};
  auto off = script.wait(options_with_bound(0));
  off->seed_calm_ms(1.0);
  EXPECT_FALSE(off->enabled());
  EXPECT_TRUE(off->wait_until_calm("confirming"));
  EXPECT_EQ(script.reads, 0);
  EXPECT_TRUE(off->waits().empty());
  CalmWait nan([] { return std::nan(""); }, options_with_bound(20), [](double) {});
  nan.seed_calm_ms(1.0);
  EXPECT_TRUE(nan.wait_until_calm("confirming"));
  EXPECT_TRUE(nan.waits().empty());
}

// The tuner's wiring, with a scripted probe: the comparison's rounds wait while it reads
// slow (two readings here, from the progress report of the phase on), and the tune's
// result says so.
TEST(CalmWait, ATuneWaitsBeforeItsSideBySideRoundsWhileTheProbeReadsSlow) {
  testing::TempCostDb db("calm_wait");
  Graph g = small_conv();
  TuneOptions options = quick_options(db);
  int slow_readings = 0;  // left to read slow
  std::string phase;      // the last phase reported, but the wait's own progress lines
  std::map<std::string, int> readings;  // by phase
  options.progress = [&](const TuneProgress& p) {
    if (p.phase.rfind("waiting", 0) == 0) return;
    if (p.phase == "comparing" && phase != "comparing") slow_readings = 2;
    phase = p.phase;
  };
  options.speed_probe = [&] {
    ++readings[phase];
    return slow_readings > 0 ? (--slow_readings, 3.0) : 1.0;
  };
  TuneResult r = tune(g, options);
  std::string seen;
  for (const auto& [name, n] : readings) seen += fmt::format("{}: {}; ", name, n);
  ASSERT_EQ(r.slow_windows.size(), 1u) << seen;
  const SlowWindowWait& wait = r.slow_windows[0];
  EXPECT_EQ(wait.phase, "comparing");
  EXPECT_DOUBLE_EQ(wait.slowdown, 3);
  EXPECT_DOUBLE_EQ(wait.waited_s, 1);  // two naps of 0.5 s
  EXPECT_TRUE(wait.calm_after);
  // Confirming read it (calm: the first reading sets the calm time; once more for a
  // sample over 5 s after, on a loaded machine); comparing read slow, slow, then calm; a
  // recheck, if the plan's time contradicted its prediction, reads calm once more.
  auto in = [&](const std::string& name) {
    auto it = readings.find(name);
    return it == readings.end() ? 0 : it->second;
  };
  EXPECT_EQ(in("confirming") + in("comparing") + in("rechecking"),
            std::accumulate(readings.begin(), readings.end(), 0,
                            [](int sum, const auto& entry) { return sum + entry.second; }))
      << seen;
  EXPECT_GE(in("confirming"), 1) << seen;
  EXPECT_EQ(in("comparing"), 3) << seen;
  EXPECT_LE(in("rechecking"), 1) << seen;
  EXPECT_GT(r.plan.measured_ms, 0);

  // Without the guard the probe is never read.
  testing::TempCostDb db2("calm_wait_off");
  options.cost_db_path = db2.path();
  options.calm_wait_s = 0;
  readings.clear();
  phase.clear();
  r = tune(g, options);
  EXPECT_TRUE(r.slow_windows.empty());
  EXPECT_TRUE(readings.empty());
}

// With a graph-level search, the chosen plan's fitness (timed in this tune) is its calm time
// from the start: a first reading far above it is a window, waited out before confirming.
TEST(CalmWait, TheChosenPlansFitnessIsItsCalmTime) {
  testing::TempCostDb db("calm_wait_fitness");
  Graph g = small_conv();
  TuneOptions options = quick_options(db);
  options.backends = {"onednn", "onednn-graph"};
  options.optimizer = Optimizer::kTwoLevel;
  options.budget_s = 2;
  int readings = 0;
  options.speed_probe = [&] { return ++readings == 1 ? 1e4 : 1e-3; };
  TuneResult r = tune(g, options);
  EXPECT_GT(r.genomes_evaluated, 0u);
  ASSERT_EQ(r.slow_windows.size(), 1u);
  EXPECT_EQ(r.slow_windows[0].phase, "confirming");
  EXPECT_GT(r.slow_windows[0].slowdown, 1e3);
  EXPECT_DOUBLE_EQ(r.slow_windows[0].waited_s, 0.5);
  EXPECT_TRUE(r.slow_windows[0].calm_after);
}

}  // namespace
}  // namespace collage
