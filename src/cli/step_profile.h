// `collage run --profile`: where a plan's time goes once its kernels run next to each other,
// step by step, against what each group cost when the tuner measured it alone. The gap
// between the two is what makes a plan's predicted latency miss its measured one.
#pragma once

#include <vector>

#include "collage/plan.h"
#include "collage/session.h"

namespace collage::cli {

// Runs `session` `runs` times with per-step timing and prints the slowest steps and a
// per-backend summary. `plan` (may be null) supplies the costs measured alone.
void print_step_profile(Session& session, const std::vector<Tensor>& inputs, int runs,
                        const Plan* plan);

}  // namespace collage::cli
