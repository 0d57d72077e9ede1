#include "search/calm_wait.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

namespace collage {

CalmWait::CalmWait(Probe probe, CalmWaitOptions options, Sleep sleep)
    : probe_(std::move(probe)),
      options_(options),
      sleep_(sleep ? std::move(sleep) : Sleep([](double s) {
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
      })),
      calm_ms_(std::numeric_limits<double>::infinity()) {}

void CalmWait::seed_calm_ms(double ms) {
  if (std::isfinite(ms) && ms > 0) calm_ms_ = std::min(calm_ms_, ms);
}

double CalmWait::read() {
  const double ms = probe_();
  spdlog::debug("calm probe: {:.3f} ms (calm {:.3f} ms so far)", ms, calm_ms_);
  last_read_ = Clock::now();
  // A probe that could not run (NaN) reads calm: nothing to wait for.
  last_slow_ = slow(ms);
  if (std::isfinite(ms) && ms > 0) calm_ms_ = std::min(calm_ms_, ms);
  return ms;
}

bool CalmWait::wait_until_calm(const std::string& phase) {
  if (!enabled() || !probe_) return true;
  // A new phase always reads: the first kept sample of each is guarded.
  if (phase == last_phase_ && !last_slow_ &&
      std::chrono::duration<double>(Clock::now() - last_read_).count() < options_.recheck_every_s)
    return true;
  last_phase_ = phase;
  // The bound spent: nothing to wait for, and nothing to read.
  if (waited_s_ >= options_.bound_s) return !last_slow_;
  double ms = read();
  if (!slow(ms)) return true;
  // One entry per phase (confirmations come one kernel at a time).
  if (waits_.empty() || waits_.back().phase != phase) waits_.push_back({phase, 1, 0, 1, true});
  SlowWindowWait& wait = waits_.back();
  wait.slowdown = std::max(wait.slowdown, ms / calm_ms_);
  while (slow(ms)) {
    const double left =
        std::min(options_.phase_bound_s() - wait.waited_s, options_.bound_s - waited_s_);
    if (left <= 0) break;
    const double nap = std::min(options_.poll_s, left);
    wait.slowdown_after = ms / calm_ms_;
    if (on_wait_) on_wait_(wait);
    sleep_(nap);
    wait.waited_s += nap;
    waited_s_ += nap;
    ms = read();
  }
  wait.slowdown_after = ms / calm_ms_;
  wait.calm_after = !slow(ms);
  if (slow(ms))
    spdlog::warn(
        "the plan runs {:.2f}x slower than its calm time in this tune, after waiting {:.1f} s "
        "before {}: its timings may read slow",
        wait.slowdown_after, wait.waited_s, phase);
  else
    spdlog::info("the plan ran {:.2f}x slower than its calm time before {}: waited {:.1f} s",
                 wait.slowdown, phase, wait.waited_s);
  return !slow(ms);
}

}  // namespace collage
