#include "cli/chrome_trace.h"

#include <fmt/core.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "collage/backend.h"
#include "collage/version.h"

namespace collage::cli {
namespace {

// chrome://tracing colours an event by `cname` from its own reserved set (Perfetto ignores
// it and colours by name, which is the backend's). Indexed like show's palette: by the
// backend's position in the registry.
constexpr const char* kTraceColors[] = {"grey",
                                        "thread_state_running",
                                        "thread_state_iowait",
                                        "rail_response",
                                        "rail_animation",
                                        "thread_state_uninterruptible",
                                        "good",
                                        "rail_load",
                                        "yellow",
                                        "olive",
                                        "cq_build_failed",
                                        "startup",
                                        "generic_work",
                                        "thread_state_runnable",
                                        "terrible",
                                        "rail_idle"};
constexpr size_t kNumTraceColors = sizeof(kTraceColors) / sizeof(kTraceColors[0]);

std::string trace_color(const std::string& backend) {
  std::vector<Backend*> all = BackendRegistry::global().all();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i]->name() == backend) return kTraceColors[i % kNumTraceColors];
  return "black";
}

}  // namespace

void write_chrome_trace(const std::string& path, const StepProfile& p, const TraceInfo& info) {
  const int64_t pid = getpid();
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", pid},
                    {"args", {{"name", "collage run " + info.model}}}});
  std::set<int64_t> threads;
  for (const StepProfile::Span& span : p.spans) threads.insert(span.thread);
  for (int64_t tid : threads)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args",
                       {{"name", tid == 0 ? std::string("executor (calling thread)")
                                          : fmt::format("lane {} worker", tid)}}}});
  for (const StepProfile::Span& span : p.spans) {
    nlohmann::json e = {{"ph", "X"},
                        {"pid", pid},
                        {"tid", span.thread},
                        {"ts", span.start_us},
                        {"dur", span.duration_us}};
    if (span.step < 0) {
      e["name"] = fmt::format("run {}", span.run);
      e["cat"] = "run";
      e["args"] = {{"run", span.run}};
    } else {
      const PlanGroup& g = p.steps[span.step];
      e["name"] = g.backend;
      e["cat"] = "step";
      e["cname"] = trace_color(g.backend);
      e["args"] = {{"run", span.run},
                   {"step", span.step},
                   {"backend", g.backend},
                   {"nodes", g.nodes},
                   {"alone_ms", p.alone_ms[span.step] > 0 ? nlohmann::json(p.alone_ms[span.step])
                                                          : nlohmann::json()}};
    }
    events.push_back(std::move(e));
  }
  nlohmann::json trace = {{"traceEvents", events},
                          {"displayTimeUnit", "ms"},
                          {"otherData",
                           {{"collage_version", version()},
                            {"model", info.model},
                            {"plan", info.plan},
                            {"backend", info.backend},
                            {"runs", p.runs}}}};
  std::ofstream out(path);
  out << trace.dump(1) << "\n";
  if (!out) fail(ErrorKind::kIo, "cannot write the trace to {}", path);
}

}  // namespace collage::cli
