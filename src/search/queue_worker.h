// `collage measure-worker --cost-db URL`: a process that measures jobs from the cost
// database's queue (published by `collage tune --distributed` on any machine) for its own
// hardware, in the same isolated worker the tuner uses, and stores the records. Started on
// as many machines as the user likes (ssh, a Slurm array, a Kubernetes Job); they share
// nothing but the database. A job is claimed with a lease (renewed while the worker lives),
// so one that dies mid-job leaves it to the next claimer.
#pragma once

#include <atomic>
#include <functional>
#include <string>

namespace collage {

struct QueueWorkerOptions {
  std::string cost_db;                      // the database's path or URL
  int threads = 0;                          // the most threads a job may use (0 = all cores)
  double lease_s = 30;                      // see TuneOptions::lease_s
  double isolate_timeout_s = 60;            // per job, as in tune
  double exit_when_idle_s = 0;              // stop after this long without a job (0 = never)
  int64_t max_jobs = 0;                     // stop after this many (0 = no limit)
  const std::atomic<bool>* stop = nullptr;  // set (by a signal handler) to stop between jobs
  std::function<void(const std::string& line)> log;  // one line per job, when set
};

struct QueueWorkerStats {
  std::string owner;  // this worker's name in the queue and in records' measured_by
  int64_t measured = 0, failed = 0;
  int64_t stored_elsewhere = 0;  // its record was stored by another process first
  // The queue's cost per job: claiming (one round trip) and storing the record with the
  // job's deletion (one or two), in seconds summed over jobs; and the measuring itself.
  double claim_s = 0, store_s = 0, measure_s = 0;
  double idle_s = 0;  // polling an empty queue
  int64_t empty_polls = 0;
  double wall_s = 0;
};

QueueWorkerStats run_queue_worker(const QueueWorkerOptions& options);

}  // namespace collage
