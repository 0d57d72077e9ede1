// The never-worse rule's choice among plans timed side by side (search/never_worse.h): the
// fastest median, unless a plan of fewer kernels is within kSimplerPlanMargin of it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "search/never_worse.h"

namespace collage {
namespace {

TEST(NeverWorse, FewerKernelsWithinTheMarginWin) {
  // A 7-kernel mix 3.6 % faster than one region: the region (ResNet-50's case).
  EXPECT_EQ(side_by_side_winner({24.5, 25.4, 58.4}, {7, 1, 57}), 1u);
  // Beyond the margin the faster mix is kept.
  EXPECT_EQ(side_by_side_winner({20.0, 25.4, 58.4}, {7, 1, 57}), 0u);
  // Just inside and just outside the margin.
  const double edge = 10.0 * (1 + kSimplerPlanMargin);
  EXPECT_EQ(side_by_side_winner({10.0, edge * 0.999}, {3, 1}), 1u);
  EXPECT_EQ(side_by_side_winner({10.0, edge * 1.001}, {3, 1}), 0u);
  // Of several within the margin, the fewest kernels, then the lowest median.
  EXPECT_EQ(side_by_side_winner({10.0, 10.3, 10.2, 10.1}, {9, 2, 2, 4}), 2u);
}

TEST(NeverWorse, FastestWhereKernelsAreEqualOrMoreAndTheFirstOnATie) {
  EXPECT_EQ(side_by_side_winner({10.0, 9.0, 9.5}, {1, 1, 1}), 1u);
  // A slower plan with more kernels never wins, however close.
  EXPECT_EQ(side_by_side_winner({10.0, 10.1}, {1, 5}), 0u);
  // Equal medians and kernels: the first (the tuner lists its tuned plan first).
  EXPECT_EQ(side_by_side_winner({10.0, 10.0}, {1, 1}), 0u);
}

TEST(NeverWorse, UntimedPlansNeverWin) {
  const double nan = std::nan("");
  EXPECT_EQ(side_by_side_winner({nan, 11.4, 11.0}, {1, 1, 3}), 1u);
  EXPECT_EQ(side_by_side_winner({nan, 30.0}, {1, 5}), 1u);
  EXPECT_EQ(side_by_side_winner({5.0}, {2}), 0u);
  EXPECT_EQ(side_by_side_winner({}, {}), 0u);
}

}  // namespace
}  // namespace collage
