#include "search/queue_worker.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "collage/backend.h"
#include "collage/error.h"
#include "plan/hardware.h"
#include "runtime/threads.h"
#include "search/cost_db.h"
#include "search/cost_db_engines.h"
#include "search/isolated_measurer.h"
#include "search/measure_queue.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

QueueWorkerStats run_queue_worker(const QueueWorkerOptions& options) {
  if (measure_worker_command().executable.empty())
    fail(ErrorKind::kInternal, "measure-worker needs the collage executable to isolate jobs");
  const auto started = Clock::now();
  QueueWorkerStats stats;
  stats.owner = CostDb::owner();
  CostDb db(options.cost_db);
  const int threads = resolve_threads(options.threads);
  JobFilter filter;
  filter.machine = machine_class(this_machine(threads));
  filter.max_threads = threads;
  // Only jobs keyed by the library versions this machine has: their records must be what
  // the key says.
  for (Backend* b : BackendRegistry::global().all())
    if (b->available()) filter.backend_versions.push_back(backend_version_id(*b));
  IsolatedWorker isolated(measure_worker_command(), options.isolate_timeout_s);
  LeaseKeeper leases(options.cost_db, options.lease_s);
  auto idle_since = Clock::now();
  // An empty queue is polled every 20 ms at first, backing off to 200 ms: a tuner that
  // publishes finds a worker within a poll, and a thousand idle workers cost the server
  // 5000 cheap queries a second at most.
  double poll_s = 0.02;
  while (!(options.stop && options.stop->load())) {
    if (options.max_jobs && stats.measured >= options.max_jobs) break;
    auto t0 = Clock::now();
    std::optional<MeasureJob> job = db.engine().claim_next(filter, stats.owner, options.lease_s);
    if (!job) {
      ++stats.empty_polls;
      if (options.exit_when_idle_s > 0 && seconds_since(idle_since) > options.exit_when_idle_s)
        break;
      std::this_thread::sleep_for(std::chrono::duration<double>(poll_s));
      stats.idle_s += seconds_since(t0);
      poll_s = std::min(0.2, poll_s * 1.5);
      continue;
    }
    auto t1 = Clock::now();
    stats.claim_s += std::chrono::duration<double>(t1 - t0).count();
    poll_s = 0.02;
    CostRecord record = isolated.measure(job->request);
    record.measured_by = stats.owner;
    auto t2 = Clock::now();
    stats.measure_s += std::chrono::duration<double>(t2 - t1).count();
    StoredRecord row = job->row;
    row.record = record;
    CostRecord stored = db.engine().put(row);
    stats.store_s += seconds_since(t2);
    ++stats.measured;
    if (!record.ok) ++stats.failed;
    if (stored.measured_by != stats.owner) ++stats.stored_elsewhere;
    // One line per job; bench/scale_out.py reads the timings (claim, measure, store, and
    // when the job ended, in seconds since the epoch) from it.
    if (options.log)
      options.log(fmt::format(
          "job {} {} x{} ({} request bytes): {}; claim {:.3f} ms, measure {:.3f} ms, store "
          "{:.3f} ms, ended {:.6f}",
          job->row.key.substr(0, 16), job->row.backend, job->threads, job->request.size(),
          record.ok ? fmt::format("{:.4f} ms", record.milliseconds) : "failed: " + record.reason,
          std::chrono::duration<double, std::milli>(t1 - t0).count(),
          std::chrono::duration<double, std::milli>(t2 - t1).count(),
          std::chrono::duration<double, std::milli>(Clock::now() - t2).count(), unix_now_s()));
    idle_since = Clock::now();
  }
  stats.wall_s = seconds_since(started);
  return stats;
}

}  // namespace collage
