// The never-worse comparison, one rule for the tuner and `collage bench`: plans of one model
// are timed side by side (interleaved rounds, time_interleaved), except those whose estimate
// is so far above the best that timing them would only cost time; in the tuner, a plan that
// times far behind the best in the first rounds is timed no more.
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

// A plan whose median after kDropAfterRounds rounds is over kDropSlowerThan times the best
// median stops being timed: only a plan within kSimplerPlanMargin of the fastest can be kept.
// Inception-v3's comparison timed four single-backend plans 1.8-2.35x slower than the tuned
// one for all 15 rounds: a re-tune redoing only the comparison took 24.7 s, 17.3 with them
// dropped after 3 (the same plan written).
inline constexpr int kDropAfterRounds = 3;
inline constexpr double kDropSlowerThan = 1.5;

struct SideBySide {
  std::vector<std::vector<double>> samples;  // per run, one per round it was timed in
  std::vector<double> median_ms;
};
// Runs each once (warm-up), then up to `rounds` interleaved timed rounds, each run timed
// until it falls behind (kDropSlowerThan, above).
SideBySide time_side_by_side(const std::vector<std::function<void()>>& runs, int rounds);

// How much faster (a share of its median) a plan with more steps must time than one with
// fewer to be kept over it.
inline constexpr double kSimplerPlanMargin = 0.05;

// The plan to keep of those timed side by side (`median_ms`, NaN: not timed; `steps`: the
// kernels each runs; `baseline`: a single-backend plan): of the plans within
// kSimplerPlanMargin of the lowest median and no slower than the fastest single-backend
// plan, the one with the fewest steps, then the lowest median (the first on a tie). So the
// plan kept is never slower than every single-backend plan (the never-worse rule), and a
// mix beats a plan of fewer kernels only by more than the margin. Medians of 15 interleaved
// rounds a few percent apart swap from run to run on a shared machine, and the plan with
// more kernels (more libraries, more boundaries) is the one that came out slower in the
// bench each time (bench/results, 2026-11-26: ResNet-50's tuned 7-kernel mix kept for 24.5
// ms against one region's 25.4 ran 26.6 against 25.4; DenseNet-121's 33-kernel mix and
// RegNetY's 15-kernel mix 0.93x and 0.97x of one region). Decided on the medians alone, so a
// warm re-tune (medians from the cost DB) keeps what the cold one kept.
size_t side_by_side_winner(const std::vector<double>& median_ms, const std::vector<size_t>& steps,
                           const std::vector<bool>& baseline);

}  // namespace collage
