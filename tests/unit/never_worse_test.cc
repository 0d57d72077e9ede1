// The never-worse rule's choice among plans timed side by side (search/never_worse.h): the
// fastest median, unless a plan of fewer kernels is within kSimplerPlanMargin of it and no
// slower than any single-backend plan.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "search/never_worse.h"

namespace collage {
namespace {

TEST(NeverWorse, FewerKernelsWithinTheMarginWin) {
  // A 7-kernel tuned mix 3.6 % faster than one region (single-backend): the region
  // (ResNet-50's case); blas's plan far behind.
  EXPECT_EQ(side_by_side_winner({24.5, 25.4, 58.4}, {7, 1, 57}, {false, true, true}), 1u);
  // Beyond the margin the faster mix is kept.
  EXPECT_EQ(side_by_side_winner({20.0, 25.4, 58.4}, {7, 1, 57}, {false, true, true}), 0u);
  // Just inside and just outside the margin.
  const double edge = 10.0 * (1 + kSimplerPlanMargin);
  EXPECT_EQ(side_by_side_winner({10.0, edge * 0.999}, {3, 1}, {false, false}), 1u);
  EXPECT_EQ(side_by_side_winner({10.0, edge * 1.001}, {3, 1}, {false, false}), 0u);
  // Of several within the margin, the fewest kernels, then the lowest median.
  EXPECT_EQ(
      side_by_side_winner({10.0, 10.3, 10.2, 10.1}, {9, 2, 2, 4}, {false, false, false, false}),
      2u);
}

TEST(NeverWorse, NeverSlowerThanEverySingleBackendPlan) {
  // The fastest is a single-backend plan: a tuned plan of fewer kernels 3 % slower is not
  // kept over it, nor is another single-backend plan of fewer kernels.
  EXPECT_EQ(side_by_side_winner({10.3, 10.0, 10.2}, {2, 75, 3}, {false, true, true}), 1u);
  // A tuned mix fastest, the best single-backend plan 2 % behind, a tuned plan of one kernel
  // 4 % behind (slower than that single-backend plan): the single-backend plan.
  EXPECT_EQ(side_by_side_winner({10.0, 10.2, 10.4}, {9, 3, 1}, {false, true, false}), 1u);
}

TEST(NeverWorse, FastestWhereKernelsAreEqualOrMoreAndTheFirstOnATie) {
  EXPECT_EQ(side_by_side_winner({10.0, 9.0, 9.5}, {1, 1, 1}, {false, true, true}), 1u);
  // A slower plan with more kernels never wins, however close.
  EXPECT_EQ(side_by_side_winner({10.0, 10.1}, {1, 5}, {false, true}), 0u);
  // Equal medians and kernels: the first (the tuner lists its tuned plan first).
  EXPECT_EQ(side_by_side_winner({10.0, 10.0}, {1, 1}, {false, true}), 0u);
}

TEST(NeverWorse, UntimedPlansNeverWin) {
  const double nan = std::nan("");
  EXPECT_EQ(side_by_side_winner({nan, 11.4, 11.0}, {1, 1, 3}, {true, false, false}), 1u);
  EXPECT_EQ(side_by_side_winner({nan, 30.0}, {1, 5}, {true, false}), 1u);
  EXPECT_EQ(side_by_side_winner({5.0}, {2}, {false}), 0u);
  EXPECT_EQ(side_by_side_winner({}, {}, {}), 0u);
}

// A plan far behind after kDropAfterRounds rounds is timed no more; the others are timed in
// every round, and a plan within kDropSlowerThan of the fastest is never dropped. (Sleeps of
// 2, 2.4 and 8 ms: ratios 1.2 and 4 against the 1.5 bound, far from it for a loaded machine.)
TEST(NeverWorse, PlansFarBehindStopBeingTimed) {
  auto sleeper = [](double ms) {
    return [ms] { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
  };
  const SideBySide t = time_side_by_side({sleeper(2), sleeper(8), sleeper(2.4)}, 8);
  ASSERT_EQ(t.samples.size(), 3u);
  EXPECT_EQ(t.samples[0].size(), 8u);
  EXPECT_EQ(t.samples[1].size(), static_cast<size_t>(kDropAfterRounds));
  EXPECT_EQ(t.samples[2].size(), 8u);
  EXPECT_GE(t.median_ms[1], 8.0);
  EXPECT_LT(t.median_ms[0], t.median_ms[2]);
  // One plan alone is timed in every round.
  EXPECT_EQ(time_side_by_side({sleeper(1)}, 4).samples[0].size(), 4u);
}

}  // namespace
}  // namespace collage
