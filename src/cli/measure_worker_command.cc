// collage measure-worker [--cost-db URL [--threads N] [--lease S] [--exit-when-idle S]
//                         [--max-jobs N] [--json] [-v]]
// With --cost-db: measures the jobs `collage tune --distributed` publishes in a shared cost
// database, for this machine's hardware, until stopped (SIGINT/SIGTERM: after the job at
// hand) or idle (search/queue_worker.h). Without it: the tuner's private isolated worker,
// speaking its protocol on stdin/stdout (search/isolated_measurer.h); not for users.
#include <fmt/core.h>

#include <atomic>
#include <csignal>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/validators.h"
#include "collage/version.h"
#include "search/isolated_measurer.h"
#include "search/queue_worker.h"

namespace collage::cli {
namespace {

struct WorkerCommandOptions {
  QueueWorkerOptions queue;
  bool json = false;
  bool verbose = false;
};

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int sig) {
  // The first signal lets the job at hand finish; a second one ends the process at once.
  if (stop_requested.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

int run_worker(WorkerCommandOptions o) {
  if (o.queue.cost_db.empty()) {
    // The tuner's isolated worker. Ctrl-C reaches the whole process group: the tuner
    // decides what an interrupt means (the CLI dies, the Python module raises
    // KeyboardInterrupt), and its worker must not die first and have the candidate it was
    // measuring recorded as crashed. The worker still exits when the tuner closes its end
    // of the socket, and run_measure_worker asks for SIGKILL when the tuner dies, so a
    // kernel hung in it cannot outlive the tuner.
    std::signal(SIGINT, SIG_IGN);
    return run_measure_worker();
  }
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  o.queue.stop = &stop_requested;
  if (o.verbose) o.queue.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  QueueWorkerStats s = run_queue_worker(o.queue);
  const double jobs = static_cast<double>(std::max<int64_t>(1, s.measured));
  if (o.json) {
    nlohmann::json j = {{"format", "collage-measure-worker"},
                        {"version", 1},
                        {"collage_version", version()},
                        {"owner", s.owner},
                        {"measured", s.measured},
                        {"failed", s.failed},
                        {"stored_elsewhere", s.stored_elsewhere},
                        {"claim_ms_per_job", s.claim_s * 1000 / jobs},
                        {"store_ms_per_job", s.store_s * 1000 / jobs},
                        {"measure_s", s.measure_s},
                        {"idle_s", s.idle_s},
                        {"empty_polls", s.empty_polls},
                        {"wall_s", s.wall_s}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "measure-worker {}: {} jobs measured ({} failed) in {:.1f} s; queue overhead per job "
      "{:.2f} ms (claim {:.2f}, store {:.2f}); measuring {:.1f} s, idle {:.1f} s\n",
      s.owner, s.measured, s.failed, s.wall_s, (s.claim_s + s.store_s) * 1000 / jobs,
      s.claim_s * 1000 / jobs, s.store_s * 1000 / jobs, s.measure_s, s.idle_s);
  return 0;
}

}  // namespace

Action add_measure_worker_command(CLI::App& app) {
  auto o = std::make_shared<WorkerCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "measure-worker",
      "measure the jobs `collage tune --distributed` publishes in a shared cost database "
      "(start one per machine; see the README's scale-out section)");
  cmd->add_option("--cost-db", o->queue.cost_db,
                  "the shared cost database (postgresql://user@host/dbname, or a SQLite file "
                  "on this machine)");
  cmd->add_option("--threads", o->queue.threads,
                  "the most threads a job may use (0 = every CPU this process may use); a tuning's "
                  "jobs use its "
                  "--threads")
      ->capture_default_str();
  cmd->add_option("--lease", o->queue.lease_s,
                  "seconds a claimed job stays claimed without renewal (renewed while this "
                  "worker lives)")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--exit-when-idle", o->queue.exit_when_idle_s,
                  "stop after this many seconds without a job (0 = run until stopped)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--max-jobs", o->queue.max_jobs, "stop after this many jobs (0 = no limit)")
      ->capture_default_str();
  cmd->add_option("--isolate-timeout", o->queue.isolate_timeout_s,
                  "seconds a job may take before it counts as hung")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_flag("--json", o->json, "print the summary as one JSON object on stdout");
  cmd->add_flag("-v,--verbose", o->verbose, "one line per job on stderr");
  return [o] { return run_worker(*o); };
}

}  // namespace collage::cli
