// `collage run --profile --trace FILE`: the profiled runs as a Chrome-trace JSON timeline
// (the Trace Event Format that chrome://tracing, Perfetto and speedscope open). One "X"
// (complete) event per step per run, named after its backend so both viewers colour each
// backend alike, nested in one "X" event per run; every event carries the OS thread that
// ran it, so a multi-threaded executor shows one track per worker.
#pragma once

#include <string>

#include "cli/step_profile.h"

namespace collage::cli {

struct TraceInfo {
  std::string model, plan;  // plan: "" when run with --backend
  std::string backend;      // the --backend when there is no plan
};

// Throws Error(kIo) when the file cannot be written.
void write_chrome_trace(const std::string& path, const StepProfile& profile, const TraceInfo& info);

}  // namespace collage::cli
