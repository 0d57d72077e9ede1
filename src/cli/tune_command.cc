// collage tune MODEL.onnx -o PLAN.json [--backends a,b,c] [--optimizer op-level|two-level]
//                         [--budget S] [--cost-db PATH|URL] [--threads N] [--json]
//                         [--distributed [--claim-timeout S]] [--lease S] [--calm-wait S]
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "cli/validators.h"
#include "collage/session.h"
#include "collage/tune.h"
#include "collage/version.h"

namespace collage::cli {
namespace {

struct TuneCommandOptions {
  ModelOptions model;
  std::string plan_path;
  std::vector<std::string> backends;
  std::string optimizer = "two-level";
  double budget = 60;
  std::string cost_db;
  int threads = 0;
  bool verbose = false;
  bool json = false;
  bool isolate = true;
  double isolate_timeout = 60;
  bool distributed = false;
  double claim_timeout = 10;
  double lease = 30;
  double calm_wait = 20;
};

void print_result(const TuneResult& r) {
  fmt::print(
      "tuned in {:.1f} s: {} candidates ({} measured, {} cache hits, {}{} failed); "
      "step overhead {:.2f} us; cost db {}\n",
      r.seconds, r.candidates, r.measured, r.cache_hits,
      r.measured_elsewhere ? fmt::format("{} measured by other processes, ", r.measured_elsewhere)
                           : std::string(),
      r.failed, r.step_overhead_ms * 1000, r.cost_db_path);
  if (r.genomes_evaluated)
    fmt::print(
        "graph-level search: {} generations, {} plans evaluated (timed, or known from the cost "
        "DB) in {:.1f} s\n",
        r.generations, r.genomes_evaluated, r.graph_search_s);
  if (r.concurrent_stages)
    fmt::print(
        "schedule: {} stages run independent steps at once, each on a share of the threads "
        "(\"tuned-sequential\" below is the same placement one step at a time)\n",
        r.concurrent_stages);
  for (const SlowWindowWait& w : r.slow_windows)
    fmt::print(
        "slow machine before {}: the chosen plan ran {:.2f}x its calm time in this tune; waited "
        "{:.1f} s{}\n",
        w.phase, w.slowdown, w.waited_s,
        !w.calm_after
            ? fmt::format(", still {:.2f}x (the --calm-wait bound): these timings may read slow",
                          w.slowdown_after)
            : fmt::format(" until it read {:.2f}x", w.slowdown_after));
  fmt::print("\nplacement of the winning plan ({}):\n", r.winner);
  fmt::print("  {:<16} {:>6} {:>12} {:>8}\n", "backend", "nodes", "cost ms", "share");
  double total = 0;
  for (const auto& s : r.shares) total += s.cost_ms;
  for (const auto& s : r.shares)
    fmt::print("  {:<16} {:>6} {:>12.3f} {:>7.1f}%\n", s.backend, s.nodes, s.cost_ms,
               total > 0 ? 100 * s.cost_ms / total : 0);
  bool from_db = false;
  for (const auto& t : r.timings) from_db = from_db || t.from_cost_db;
  fmt::print("\nend-to-end latency, measured side by side{} (median; * = the plan written):\n",
             from_db ? " by an earlier tune (cost DB)" : "");
  // Wide enough for the longest name ("onednn-graph/winograd2x2" and a mark).
  size_t width = 16;
  for (const auto& t : r.timings) width = std::max(width, t.name.size() + 1);
  fmt::print("  {:<{}} {:>13} {:>13} {:>7} {:>16}\n", "plan", width, "predicted ms", "measured ms",
             "steps", "written plan is");
  double winner_ms = 0;
  int most_rounds = 0;
  for (const auto& t : r.timings) {
    if (t.name == r.winner) winner_ms = t.measured_ms;
    most_rounds = std::max(most_rounds, t.rounds);
  }
  for (const auto& t : r.timings) {
    // A plan with a region never measured alone (a merged graph-level region that failed
    // standalone) has no finite prediction.
    std::string predicted =
        std::isfinite(t.predicted_ms) ? fmt::format("{:.3f}", t.predicted_ms) : std::string("-");
    std::string name = (t.name == r.winner ? "*" : " ") + t.name;
    if (!t.timed) {
      fmt::print("  {:<{}} {:>13}   not timed: {}\n", name, width, predicted, t.not_timed_reason);
      continue;
    }
    // A plan that fell far behind was timed in fewer rounds than the others.
    std::string rounds = t.rounds > 0 && t.rounds < most_rounds
                             ? fmt::format("   median of {} rounds: far behind", t.rounds)
                             : std::string();
    fmt::print("  {:<{}} {:>13} {:>13.3f} {:>7} {:>15.2f}x{}\n", name, width, predicted,
               t.measured_ms, t.steps ? std::to_string(t.steps) : std::string("-"),
               winner_ms > 0 ? t.measured_ms / winner_ms : 0.0, rounds);
  }
}

// The `tune --json` object (docs/DESIGN.md, "CLI output for scripts"). Latencies that were
// not measured (a plan not timed, a prediction with a region never measured alone) are null.
nlohmann::json result_json(const TuneResult& r, const std::string& plan_path) {
  auto finite_or_null = [](double ms) {
    return std::isfinite(ms) ? nlohmann::json(ms) : nlohmann::json();
  };
  nlohmann::json placement = nlohmann::json::array();
  for (const auto& s : r.shares)
    placement.push_back({{"backend", s.backend}, {"nodes", s.nodes}, {"cost_ms", s.cost_ms}});
  nlohmann::json slow_windows = nlohmann::json::array();
  for (const SlowWindowWait& w : r.slow_windows)
    slow_windows.push_back({{"phase", w.phase},
                            {"slowdown", w.slowdown},
                            {"waited_s", w.waited_s},
                            {"slowdown_after", w.slowdown_after},
                            {"calm_after", w.calm_after}});
  nlohmann::json timings = nlohmann::json::array();
  for (const auto& t : r.timings)
    timings.push_back(
        {{"plan", t.name},
         {"written", t.name == r.winner},
         {"predicted_ms", finite_or_null(t.predicted_ms)},
         {"measured_ms", t.timed ? finite_or_null(t.measured_ms) : nlohmann::json()},
         {"timed", t.timed},
         {"not_timed_reason", t.timed ? nlohmann::json() : nlohmann::json(t.not_timed_reason)},
         {"steps", t.steps},
         {"from_cost_db", t.from_cost_db},
         {"rounds", t.rounds}});
  return {{"format", "collage-tune"},
          {"version", 1},
          {"collage_version", version()},
          {"plan_path", plan_path},
          {"winner", r.winner},
          {"predicted_ms", finite_or_null(r.plan.predicted_ms)},
          {"measured_ms", finite_or_null(r.plan.measured_ms)},
          {"placement", placement},
          {"timings", timings},
          {"seconds", r.seconds},
          {"candidates", r.candidates},
          {"measured", r.measured},
          {"measured_elsewhere", r.measured_elsewhere},
          {"cache_hits", r.cache_hits},
          {"failed", r.failed},
          {"failures", r.failures},
          {"within_sensitivity", r.within_sensitivity},
          {"step_overhead_ms", r.step_overhead_ms},
          {"generations", r.generations},
          {"genomes_evaluated", r.genomes_evaluated},
          {"graph_search_s", r.graph_search_s},
          {"plans_timed", r.plans_timed},
          {"slow_windows", slow_windows},
          {"cost_db", r.cost_db_path}};
}

int run_tune(const TuneCommandOptions& o) {
  Plan::check_writable(o.plan_path);  // before minutes of tuning, not after
  Graph graph = load_model(o.model.path, o.model.load_options());
  TuneOptions options;
  options.backends = o.backends;
  if (o.optimizer == "op-level")
    options.optimizer = Optimizer::kOpLevel;
  else if (o.optimizer == "two-level")
    options.optimizer = Optimizer::kTwoLevel;
  else
    fail(ErrorKind::kInvalidArgument, "--optimizer must be op-level or two-level, got '{}'",
         o.optimizer);
  options.budget_s = o.budget;
  options.cost_db_path = o.cost_db;
  options.threads = o.threads;
  options.isolate = o.isolate;
  options.isolate_timeout_s = o.isolate_timeout;
  options.distributed = o.distributed;
  options.claim_timeout_s = o.claim_timeout;
  options.lease_s = o.lease;
  options.calm_wait_s = o.calm_wait;
  ProgressBar bar;
  options.progress = [&](const TuneProgress& p) { bar.update(p); };
  TuneResult result = tune(graph, options);
  bar.finish();
  result.plan.save(o.plan_path);
  if (o.json) {
    fmt::print("{}\n", result_json(result, o.plan_path).dump(2));
    return 0;
  }
  print_result(result);
  if (result.within_sensitivity)
    fmt::print(
        "{} candidates (the first: {}) matched reference only within their own sensitivity (a "
        "model chaotic in float32: random weights?); the cost DB's reasons say by how much\n",
        result.within_sensitivity, result.sensitivity_example);
  if (o.verbose)
    for (const auto& f : result.failures) fmt::print("failed: {}\n", f);
  else if (!result.failures.empty())
    fmt::print("{} candidates failed (--verbose lists them)\n", result.failures.size());
  fmt::print("\nplan written to {}\n", o.plan_path);
  return 0;
}

}  // namespace

Action add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneCommandOptions>();
  CLI::App* cmd = app.add_subcommand("tune", "find the fastest placement of a model's parts");
  o->model.add_to(*cmd);
  cmd->add_option("-o,--output", o->plan_path, "where to write the plan (JSON)")->required();
  cmd->add_option("--backends", o->backends, "comma-separated backends (default: all)")
      ->delimiter(',');
  cmd->add_option("--optimizer", o->optimizer, "op-level or two-level")->capture_default_str();
  cmd->add_option("--budget", o->budget, "seconds for the graph-level search")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--cost-db", o->cost_db,
                  "cost database: a SQLite file (default ~/.cache/collage/costs.db) or a "
                  "postgresql://user@host/dbname URL");
  cmd->add_option("--threads", o->threads, "thread budget (0 = every CPU this process may use)")
      ->capture_default_str();
  cmd->add_flag("-v,--verbose", o->verbose, "list every failed candidate");
  cmd->add_flag("--json", o->json,
                "print one JSON object on stdout instead of the tables (progress stays on stderr)");
  cmd->add_flag("--isolate,!--no-isolate", o->isolate,
                "measure candidates in a worker process, so one that crashes or hangs fails "
                "alone (default on)");
  cmd->add_option("--isolate-timeout", o->isolate_timeout,
                  "seconds a candidate may take in the worker before it counts as hung")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_flag("--distributed", o->distributed,
                "publish the candidates as jobs in the cost database for `collage "
                "measure-worker` processes to measure (see the README's scale-out section)");
  cmd->add_option("--claim-timeout", o->claim_timeout,
                  "with --distributed: seconds before this process measures a job no worker "
                  "has claimed")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--lease", o->lease,
                  "seconds a claimed measurement job stays claimed without renewal (a process "
                  "that dies leaves its jobs to others after this)")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--calm-wait", o->calm_wait,
                  "the most seconds to wait, in all, for this machine to leave a slow window "
                  "(the chosen plan over 1.25x its calm time) before the timings the tune "
                  "keeps; 0: never wait")
      ->capture_default_str()
      ->check(kNonNegative);
  return [o] { return run_tune(*o); };
}

}  // namespace collage::cli
