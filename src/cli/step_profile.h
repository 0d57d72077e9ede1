// `collage run --profile`: where a plan's time goes once its kernels run next to each other,
// step by step, against what each group cost when the tuner measured it alone. The gap
// between the two is what makes a plan's predicted latency miss its measured one. The same
// samples feed `--json` and the `--trace` timeline.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "collage/plan.h"
#include "collage/session.h"

namespace collage::cli {

struct StepProfile {
  int runs = 0;
  std::vector<PlanGroup> steps;     // the session's steps, in execution order
  std::vector<double> in_model_ms;  // per step: median over the runs
  std::vector<double> alone_ms;     // per step: the plan's cost measured alone (0: unknown)
  std::vector<double> run_sum_ms;   // per run: sum of its steps
  // The timeline, in microseconds from the start of the first profiled run.
  struct Span {
    int run = 0;
    int64_t step = -1;  // -1: the whole run
    double start_us = 0, duration_us = 0;
    int64_t thread = 0;  // 0: the calling thread; k: the worker of lane k
  };
  std::vector<Span> spans;
};

// Runs `session` `runs` times with per-step timing. `plan` (may be null) supplies the costs
// measured alone.
StepProfile profile_steps(Session& session, const std::vector<Tensor>& inputs, int runs,
                          const Plan* plan);

// The slowest steps and a per-backend summary, as text on stdout.
void print_step_profile(const StepProfile& profile);
// The same numbers for `run --json` (every step, not only the slowest).
nlohmann::json step_profile_json(const StepProfile& profile);

}  // namespace collage::cli
