// Automatic backend placement: measure every candidate (subgraph, backend) on this machine,
// find the fastest cover of the model (op-level search), refine it with graph-level backends
// by measuring whole plans (evolutionary search), and never return a plan slower than the
// best single-backend plan.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collage/graph.h"
#include "collage/plan.h"

namespace collage {

enum class Optimizer { kOpLevel, kTwoLevel };

struct TuneProgress {
  std::string phase;  // "measuring", "graph-level search", "comparing"
  size_t done = 0, total = 0;
  size_t cache_hits = 0, failed = 0;
  double elapsed_s = 0, eta_s = -1;  // eta < 0: unknown
  std::string detail;
};

struct TuneOptions {
  std::vector<std::string> backends;  // empty = every available backend; reference is always in
  Optimizer optimizer = Optimizer::kTwoLevel;
  double budget_s = 60;  // wall clock for the graph-level search
  // A SQLite file, or a PostgreSQL database as a postgresql:// (or postgres://) URL;
  // empty = CostDb::default_path().
  std::string cost_db_path;
  int threads = 0;  // 0 = all cores
  uint64_t seed = 1;
  std::function<void(const TuneProgress&)> progress;
  // Measure each candidate in a `collage measure-worker` process, so one that crashes or
  // hangs fails alone (cost +inf, reason recorded). Needs the worker command the CLI sets;
  // without it measurement stays in-process with a warning.
  bool isolate = true;
  double isolate_timeout_s = 60;  // per candidate: compile, verify and timing together
  // Publish the candidates to measure as jobs in the cost database, for `collage
  // measure-worker` processes on machines of this one's hardware to claim; what none of them
  // claims within claim_timeout_s is measured here. Meant for a PostgreSQL cost database.
  bool distributed = false;
  double claim_timeout_s = 10;
  // How long a claimed measurement job stays ours without renewal (renewed every third of
  // it while we live): a tuner or worker that dies leaves its jobs to others after this.
  double lease_s = 30;
  // The most seconds a tune waits, in all, for the machine to leave a slow window before
  // the timings it keeps (confirmations, rechecks, the side-by-side rounds), at most half
  // of it before one phase: while the chosen plan runs over 1.25x its calm time in this tune
  // (docs/DESIGN.md, "Search", (6)). 0: never probe, never wait.
  double calm_wait_s = 20;
  // One reading of the machine's speed for that wait, in milliseconds; empty: the chosen
  // plan, run a few times (search/calm_wait.h). Tests script it.
  std::function<double()> speed_probe;
};

struct PlanTiming {
  // "tuned"; "tuned-sequential" (the tuned placement one step at a time, when "tuned" runs
  // stages concurrently); "onednn", "blas", ... (single-backend plans)
  std::string name;
  double predicted_ms = 0;
  double measured_ms = 0;  // NaN when not timed (see `timed`)
  size_t steps = 0;        // 0 when not compiled
  // False for a plan predicted so much slower than the best that timing it end to end
  // would only cost time (a whole CNN on Halide's generated convolutions, say).
  bool timed = true;
  // Why it was not timed ("" when it was): its prediction, or, for a single-backend plan, a
  // kernel that failed when measured alone (its check against reference, say): such a plan
  // is not run at all.
  std::string not_timed_reason;
  bool from_cost_db = false;  // the latency was measured by an earlier tune
  // Interleaved rounds its median is of (0 when from the cost DB): fewer than the others'
  // when it fell far behind the fastest and stopped being timed (search/never_worse.h).
  int rounds = 0;
};

// A phase of the tune that found the machine slow (TuneOptions::calm_wait_s).
struct SlowWindowWait {
  std::string phase;          // "confirming", "rechecking" or "comparing"
  double slowdown = 1;        // the chosen plan's time over its calm time when the phase came
  double waited_s = 0;        // slept before going on
  double slowdown_after = 1;  // the last such reading
  bool calm_after = true;     // false: the bound ran out with the machine still slow
};

struct BackendShare {
  std::string backend;
  size_t nodes = 0;
  double cost_ms = 0;  // sum of its groups' measured costs
};

struct TuneResult {
  Plan plan;  // the winner
  // "tuned", "tuned-sequential", "tuned#N" (a runner-up of the search), or the single-backend
  // plan that won ("onednn-graph", or "onednn-graph/blocked": a graph-level backend's plan
  // with every region in one of its variants)
  std::string winner;
  std::vector<PlanTiming> timings;   // tuned (and runners-up) first, then each single-backend plan
  std::vector<BackendShare> shares;  // of the winning plan
  size_t candidates = 0, cache_hits = 0, measured = 0, failed = 0;
  // Measured by other processes while this tune waited for them: a tuner of the same
  // model at the same time, or measure-workers (tune --distributed).
  size_t measured_elsewhere = 0;
  double step_overhead_ms = 0;
  size_t generations = 0, genomes_evaluated = 0;
  // The graph-level search's wall time, which its budget (TuneOptions::budget_s) bounds: the
  // search stops at the first genome past it (a warm re-tune stops where the cold one did,
  // charged what each genome cost then: see docs/DESIGN.md, "Search").
  double graph_search_s = 0;
  size_t plans_timed = 0;     // whole plans timed end to end (the rest came from the cost DB)
  int concurrent_stages = 0;  // in the tuned placement's chosen schedule
  std::vector<std::string> failures;  // one line per failed candidate
  // Candidates whose outputs matched reference only within their own sensitivity (a model
  // chaotic in float32, e.g. random weights; util/compare.h), and the first one.
  size_t within_sensitivity = 0;
  std::string sensitivity_example;
  // The phases that found the machine slow, and how long they waited (at most calm_wait_s in
  // all); empty on a calm machine.
  std::vector<SlowWindowWait> slow_windows;
  std::string cost_db_path;
  double seconds = 0;
};

TuneResult tune(const Graph& graph, const TuneOptions& options = {});

}  // namespace collage
