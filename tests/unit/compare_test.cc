// The comparison rule of util/compare.h on float32 tensors, element by element, against a
// plain statement of it: within atol + atol_fraction * max|finite expected| + rtol *
// |expected|, NaN only against NaN, an infinity only against the same one. compare_tensors
// takes a vectorized path where every element matches and its element loop otherwise, so
// the two must agree on every kind of element (a path that rounded the bound in float, left
// out atol_fraction or passed a NaN would let a wrong kernel through).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "util/compare.h"

namespace collage {
namespace {

int64_t mismatches_by_the_rule(const Tensor& actual, const Tensor& expected, const Tolerance& tol) {
  const float* a = actual.data<float>();
  const float* b = expected.data<float>();
  double scale = 0;
  for (int64_t i = 0; i < expected.numel(); ++i)
    if (std::isfinite(b[i])) scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  const double atol = tol.atol + tol.atol_fraction * scale;
  int64_t count = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double x = a[i], y = b[i];
    bool ok;
    if (std::isnan(x) || std::isnan(y))
      ok = std::isnan(x) && std::isnan(y);
    else if (std::isinf(x) || std::isinf(y))
      ok = x == y;
    else
      ok = std::fabs(x - y) <= atol + tol.rtol * std::fabs(y);
    count += ok ? 0 : 1;
  }
  return count;
}

TEST(Compare, Float32FollowsTheRuleOnEveryKindOfElement) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(-1, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  int passing = 0, failing = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Tolerance tol{1e-3, 1e-6, trial % 2 ? 1e-4 : 0.0};
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    Tensor expected(DType::kFloat32, {n}), actual(DType::kFloat32, {n});
    float* b = expected.data<float>();
    float* a = actual.data<float>();
    const double magnitude = std::pow(10.0, static_cast<int>(rng() % 7) - 3);
    for (int64_t i = 0; i < n; ++i) {
      b[i] = static_cast<float>(unit(rng) * magnitude);
      a[i] = b[i];
    }
    // Most trials pass: every element moved within the bound, and NaN or same-signed
    // infinities on both sides. The others hold one element of a failing kind.
    const int kind = static_cast<int>(rng() % 12);
    const int64_t at = static_cast<int64_t>(rng() % n);
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] * static_cast<float>(1 + 0.5e-3 * unit(rng));
    switch (kind) {
      case 0:
        a[at] = b[at] = nan;
        break;
      case 1:
        a[at] = b[at] = (at % 2 ? inf : -inf);
        break;
      case 2:
        a[at] = nan;
        break;
      case 3:
        b[at] = nan;
        break;
      case 4:
        a[at] = inf;
        break;
      case 5:
        a[at] = inf, b[at] = -inf;
        break;
      case 6:
        b[at] = inf;
        break;
      // Just past the bound, either side (by 0.1 % of it, 16x float32's rounding of a[at]).
      case 7:
      case 8: {
        double scale = 0;
        for (int64_t i = 0; i < n; ++i)
          if (std::isfinite(b[i])) scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
        const double bound = tol.atol + tol.atol_fraction * scale + tol.rtol * std::fabs(b[at]);
        a[at] = static_cast<float>(b[at] + (kind == 7 ? 1 : -1) * bound * 1.001);
        break;
      }
      default:
        break;
    }
    const int64_t expected_count = mismatches_by_the_rule(actual, expected, tol);
    const std::string diff = compare_tensors(actual, expected, tol);
    EXPECT_EQ(diff.empty(), expected_count == 0)
        << "trial " << trial << " kind " << kind << ": " << diff;
    if (expected_count) {
      EXPECT_EQ(diff.rfind(std::to_string(expected_count) + " of " + std::to_string(n), 0), 0u)
          << diff;
      ++failing;
    } else {
      ++passing;
    }
  }
  // Both sides of the rule were exercised.
  EXPECT_GT(passing, 100);
  EXPECT_GT(failing, 100);
}

}  // namespace
}  // namespace collage
