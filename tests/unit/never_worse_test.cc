// The never-worse rule's choice among plans timed side by side (search/never_worse.h): the
// fastest median, unless a plan of fewer kernels is within kSimplerPlanMargin of it and no
// slower than any single-backend plan.
#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace collage
