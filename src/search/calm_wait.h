// Waiting out a slow window of the machine before the timings a tune keeps.
//
// Why: this machine is shared (a VM on a cloud host) and has windows of seconds in which a
// plan runs 1.4-1.5x slower than a few seconds before or after. Timings taken in one agree
// with each other, so no check between them catches it. NASNet-A-Mobile's cold tune of
// 2026-11-29 (bench/results/cnn): the graph-level search's plans read 9.3-9.9 ms until
// 14:47:32, then the written region's two confirmations read 15.5 and 14.1 ms and the plans
// side by side 13.8-15.6 within six seconds, and the bench ran the plan at 9.4 a minute
// later: the prediction was 47 % off (vit-tiny's the same day: +34 %). The same happened in
// this session's tunes, and to `collage run` processes of that plan one after another
// (10.1, 10.1, 14.4 ms; 15.4, 14.7, 15.3, then 10.6 and below).
//
// What: a probe read before the samples a tune keeps (confirmations, rechecks) and before
// the side-by-side rounds: the tune's chosen plan itself, run a few times (Tuner), against
// its calm time (its fastest reading, or the fitness this tune timed it at in the search).
// Where a reading is over slow_factor x the calm time, the tune sleeps and reads again,
// until it reads calm or its bound runs out (then it goes on, and the tune's result says
// so). Why the plan and not a fixed piece of work: fixed probes of three kinds (arithmetic
// in L2 over 48 parallel regions, FMA-bound registers, an 8 MiB stream per thread), read
// between `collage run` processes of NASNet's plan, stayed within their usual spread while
// the plan ran 14 ms instead of 9.5 (docs/DESIGN.md, "Search", (6)); the plan is slowed by
// whatever slows it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "collage/tune.h"

namespace collage {

struct CalmWaitOptions {
  // The most seconds waited in all (TuneOptions::calm_wait_s); 0 or less: never read.
  double bound_s = 20;
  // The most seconds waited before one phase (half the bound): a longer window is not
  // waited out, and the rest of the bound is kept for a later phase.
  double phase_bound_s() const { return bound_s / 2; }
  // Slow: a reading over this times the calm time. A plan's fitness is the fastest of many
  // medians and runs up to ~13 % slower side by side (GoogLeNet: 9.18 against 10.41 ms);
  // the windows seen were 1.4-1.6x.
  double slow_factor = 1.25;
  double poll_s = 0.5;  // between readings while waiting
  // Within one phase (confirmations come one kernel at a time), a calm reading holds for
  // this long: a plan's reading costs a few of its runs.
  double recheck_every_s = 5;
};

class CalmWait {
 public:
  using Probe = std::function<double()>;      // one reading, milliseconds
  using Sleep = std::function<void(double)>;  // seconds
  // `sleep` is std::this_thread::sleep_for but in tests, which script it and the probe.
  CalmWait(Probe probe, CalmWaitOptions options, Sleep sleep = {});

  bool enabled() const { return options_.bound_s > 0; }
  // A time the probe is known to read when calm (a plan's fitness timed in this tune).
  void seed_calm_ms(double ms);
  // Called before each sleep, with the phase's wait so far (the tuner's progress line).
  void on_wait(std::function<void(const SlowWindowWait&)> callback) {
    on_wait_ = std::move(callback);
  }
  // Before `phase`'s kept timings: reads the probe (unless this phase read it calm within
  // recheck_every_s) and, while it reads slow and the bounds allow, sleeps and reads again.
  // Returns true when the machine read calm at the end.
  bool wait_until_calm(const std::string& phase);

  double calm_ms() const { return calm_ms_; }
  double waited_s() const { return waited_s_; }
  // The phases that found the machine slow, in order.
  const std::vector<SlowWindowWait>& waits() const { return waits_; }

 private:
  using Clock = std::chrono::steady_clock;
  double read();  // a reading; lowers the calm time
  bool slow(double ms) const { return ms > options_.slow_factor * calm_ms_; }

  Probe probe_;
  CalmWaitOptions options_;
  Sleep sleep_;
  double calm_ms_;
  double waited_s_ = 0;
  bool last_slow_ = false;
  std::string last_phase_;  // of the last wait_until_calm
  Clock::time_point last_read_{};
  std::vector<SlowWindowWait> waits_;
  std::function<void(const SlowWindowWait&)> on_wait_;
};

}  // namespace collage
