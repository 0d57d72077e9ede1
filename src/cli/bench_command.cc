// collage bench MODEL.onnx [--plan PLAN.json]: median latency of the tuned plan (and, when it
// runs steps concurrently, of the same placement run sequentially) and of each single-backend
// plan, measured side by side (interleaved rounds), and the predicted one.
// --json FILE also writes them (and every sample) for scripts such as bench/run.sh.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/validators.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "runtime/interleaved_timing.h"
#include "runtime/threads.h"
#include "search/never_worse.h"

namespace collage::cli {
namespace {

// The tuned plan's placement without its schedule (tune's table uses the same name).
constexpr const char* kSequentialName = "tuned-sequential";

struct BenchOptions {
  ModelOptions model;
  std::string plan_path, json_path;
  int repeat = 20, warmup = 1, threads = 0;
};

int bench(const BenchOptions& o) {
  Graph graph = load_model(o.model.path, o.model.load_options());
  SessionOptions base;
  base.threads = o.threads;
  std::vector<std::string> names;
  std::vector<Session> sessions;
  double predicted = 0;
  if (!o.plan_path.empty()) {
    Plan plan = Plan::load(o.plan_path);
    predicted = plan.predicted_ms;
    sessions.emplace_back(graph, plan, base);
    names.push_back("tuned");
    // A plan with concurrent stages is also timed one step after another (the same kernels
    // built for the plan's whole thread count): what the schedule itself buys.
    if (std::any_of(plan.groups.begin(), plan.groups.end(),
                    [](const PlanGroup& g) { return g.lane > 0; })) {
      Plan sequential = plan;
      for (PlanGroup& g : sequential.groups) g.stage = g.lane = g.threads = 0;
      sessions.emplace_back(graph, sequential, base);
      names.push_back(kSequentialName);
    }
  }
  for (Backend* b : BackendRegistry::global().all()) {
    if (BackendRegistry::global().is_fallback(*b) || !b->available()) continue;
    SessionOptions options = base;
    options.backend = b->name();
    sessions.emplace_back(graph, options);
    names.push_back(b->name());
  }
  std::vector<Tensor> inputs = random_inputs(graph, 1);
  auto time_run = [&](Session& s) {
    auto t0 = std::chrono::steady_clock::now();
    s.run_views(inputs);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // Warm-up, which also gives the estimates of the never-worse rule (search/never_worse.h):
  // a plan over kNotWorthTiming times the fastest warm-up is reported from its warm-up run
  // alone (e.g. a whole CNN on Halide's generated convolutions, seconds per run).
  std::vector<double> warm(sessions.size(), 0);
  for (int w = 0; w < std::max(1, o.warmup); ++w)
    for (size_t i = 0; i < sessions.size(); ++i) warm[i] = time_run(sessions[i]);
  std::vector<bool> must(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i)
    must[i] = names[i] == "tuned" || names[i] == kSequentialName;
  const std::vector<bool> timed = worth_timing(warm, must);
  std::vector<std::function<void()>> runs;
  std::vector<size_t> timed_index;
  for (size_t i = 0; i < sessions.size(); ++i)
    if (timed[i]) {
      runs.push_back([&, i] { sessions[i].run_views(inputs); });
      timed_index.push_back(i);
    }
  std::vector<std::vector<double>> samples(sessions.size());
  std::vector<std::vector<double>> timed_samples = time_interleaved(runs, o.repeat);
  for (size_t k = 0; k < timed_index.size(); ++k)
    samples[timed_index[k]] = std::move(timed_samples[k]);
  for (size_t i = 0; i < sessions.size(); ++i)
    if (!timed[i]) samples[i] = {warm[i]};
  const int threads = sessions.empty() ? resolve_threads(o.threads) : sessions.front().threads();
  fmt::print("{} ({} threads, {} interleaved rounds, each timed run after an untimed one)\n",
             o.model.path, threads, o.repeat);
  fmt::print("  {:<16} {:>12} {:>12} {:>7}\n", "plan", "median ms", "min ms", "steps");
  nlohmann::json plans = nlohmann::json::array();
  for (size_t i = 0; i < sessions.size(); ++i) {
    plans.push_back({{"name", names[i]},
                     {"steps", sessions[i].num_steps()},
                     {"samples", samples[i]},
                     {"timed", static_cast<bool>(timed[i])}});
    const double median_ms = median_of(samples[i]);
    const double min_ms = *std::min_element(samples[i].begin(), samples[i].end());
    fmt::print("  {:<16} {:>12.3f} {:>12.3f} {:>7}{}\n", names[i], median_ms, min_ms,
               sessions[i].num_steps(),
               timed[i] ? "" : fmt::format("   (one run: over {}x the fastest)", kNotWorthTiming));
    plans.back()["median_ms"] = median_ms;
    plans.back()["min_ms"] = min_ms;
    if (names[i] == "tuned") plans.back()["predicted_ms"] = predicted;
  }
  if (!o.plan_path.empty()) fmt::print("  {:<16} {:>12.3f}\n", "predicted", predicted);
  if (!o.json_path.empty()) {
    nlohmann::json out = {{"model", o.model.path},
                          {"threads", threads},
                          {"repeat", o.repeat},
                          {"warmup", o.warmup},
                          {"plans", plans}};
    std::ofstream f(o.json_path);
    f << out.dump() << "\n";
    if (!f) fail(ErrorKind::kIo, "cannot write {}", o.json_path);
  }
  return 0;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "time a plan against every single-backend plan");
  o->model.add_to(*cmd);
  cmd->add_option("--plan", o->plan_path, "plan from `collage tune`");
  cmd->add_option("--repeat", o->repeat, "interleaved rounds")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--warmup", o->warmup, "untimed runs of every plan first (at least 1)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--threads", o->threads, "thread budget (0 = every CPU this process may use)")
      ->capture_default_str();
  cmd->add_option("--json", o->json_path,
                  "also write each plan's samples, median, min (and predicted) ms to FILE");
  return [o] { return bench(*o); };
}

}  // namespace collage::cli
