// Measuring through the cost database's job queue (search/cost_db.h): what a kernel
// measurement looks like as a job, and the lease keeper that lets a process hold jobs for as
// long as it lives. Claims keep concurrent tuners of one machine from measuring one key twice
// (one claims it, the others measure other keys and then collect its record), and carry
// `tune --distributed` jobs to `collage measure-worker` processes (search/queue_worker.h).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plan/hardware.h"
#include "search/cost_db.h"
#include "search/measure.h"

namespace collage {

// How long a claim holds a job without renewal: a process that dies (SIGKILL, a lost
// machine) leaves its jobs to others after this long. Renewed every third of it.
inline constexpr double kDefaultLeaseS = 30;

// The job of measuring `job` (made from `candidate`); `request` as measure_request makes
// it, or "" for a claim only this process will measure.
MeasureJob queue_job(const KernelJob& job, const Candidate& candidate, std::string request);
// Who may measure a job: the CPU model and vector extensions, without the thread count.
std::string machine_class(const Hardware& machine);
// "name@version" of a backend: a job is measured by the same library version it is keyed by.
std::string backend_version_id(const Backend& backend);

// Renews every lease this process (CostDb::owner()) holds in the database at `location`
// every lease_s / 3, on its own thread and connection, until destroyed. Without it a
// measurement longer than the lease (a slow kernel, a loaded machine) would be taken over
// while it runs and measured twice.
class LeaseKeeper {
 public:
  LeaseKeeper(std::string location, double lease_s);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  void run();

  std::string location_;
  double lease_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace collage
