#include "search/never_worse.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/interleaved_timing.h"

namespace collage {

std::vector<bool> worth_timing(const std::vector<double>& estimates_ms,
                               const std::vector<bool>& must) {
  double best = std::numeric_limits<double>::infinity();
  for (double e : estimates_ms)
    if (std::isfinite(e)) best = std::min(best, e);
  std::vector<bool> timed(estimates_ms.size());
  for (size_t i = 0; i < timed.size(); ++i)
    timed[i] =
        must[i] || (std::isfinite(estimates_ms[i]) && !(estimates_ms[i] > kNotWorthTiming * best));
  return timed;
}

SideBySide time_side_by_side(const std::vector<std::function<void()>>& runs, int rounds) {
  for (const auto& run : runs) run();  // warm-up
  SideBySide out;
  out.samples.resize(runs.size());
  std::vector<size_t> active(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) active[i] = i;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::function<void()>> round;
    for (size_t i : active) round.push_back(runs[i]);
    const std::vector<std::vector<double>> samples = time_interleaved(round, 1);
    for (size_t k = 0; k < active.size(); ++k) out.samples[active[k]].push_back(samples[k][0]);
    if (r + 1 < kDropAfterRounds) continue;
    double best = std::numeric_limits<double>::infinity();
    for (size_t i : active) best = std::min(best, median_of(out.samples[i]));
    std::erase_if(active,
                  [&](size_t i) { return median_of(out.samples[i]) > kDropSlowerThan * best; });
  }
  for (const std::vector<double>& s : out.samples) out.median_ms.push_back(median_of(s));
  return out;
}

size_t side_by_side_winner(const std::vector<double>& median_ms, const std::vector<size_t>& steps,
                           const std::vector<bool>& baseline) {
  const size_t n = median_ms.size();
  if (n == 0) return 0;
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (std::isnan(median_ms[best]) || median_ms[i] < median_ms[best]) best = i;
  if (steps.size() != n || baseline.size() != n || std::isnan(median_ms[best])) return best;
  double limit = (1 + kSimplerPlanMargin) * median_ms[best];
  for (size_t i = 0; i < n; ++i)
    if (baseline[i] && median_ms[i] < limit) limit = median_ms[i];
  size_t kept = best;
  for (size_t i = 0; i < n; ++i) {
    if (!(median_ms[i] <= limit)) continue;
    if (steps[i] < steps[kept] || (steps[i] == steps[kept] && median_ms[i] < median_ms[kept]))
      kept = i;
  }
  return kept;
}

}  // namespace collage
