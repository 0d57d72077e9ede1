// The never-worse comparison, one rule for the tuner and `collage bench`: plans of one model
// are timed side by side (interleaved rounds, time_interleaved), except those whose estimate
// is so far above the best that timing them would only cost time.
#pragma once

#include <functional>
#include <vector>

namespace collage {

// A plan is not timed when its estimate (its prediction, or a warm-up run when it has none)
// is over this times the best estimate: a whole CNN on Halide's generated convolutions takes
// seconds per run next to milliseconds.
inline constexpr double kNotWorthTiming = 3;

// Which plans to time: every one marked in `must`, and every one whose estimate is finite
// and within kNotWorthTiming of the best finite estimate.
std::vector<bool> worth_timing(const std::vector<double>& estimates_ms,
                               const std::vector<bool>& must);

struct SideBySide {
  std::vector<std::vector<double>> samples;  // per run, one per round
  std::vector<double> median_ms;
};
// Runs each once (warm-up), then `rounds` interleaved timed rounds.
SideBySide time_side_by_side(const std::vector<std::function<void()>>& runs, int rounds);

}  // namespace collage
