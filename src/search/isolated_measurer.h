// Measures candidates in a separate `collage measure-worker` process, so a kernel that
// segfaults, aborts or hangs costs +inf with the reason instead of ending the tuning run.
// The worker is a fresh exec'd process, never a bare fork: a forked child of a process that
// has run OpenMP (oneDNN) hangs in the OpenMP runtime. One worker serves every candidate
// and is restarted only after a crash or timeout, since starting one costs milliseconds
// (process start, backend registration) that thousands of candidates would pay.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "search/cost_db.h"
#include "search/measure.h"

namespace collage {

// The executable that serves `measure-worker` and the plugins it must load to know the
// same backends; the CLI sets them to itself and its --backend-plugin list. No executable
// (the default, e.g. for the library used from another program): no isolation possible.
struct WorkerCommand {
  std::string executable;
  std::vector<std::string> plugins;
};
void set_measure_worker_command(WorkerCommand command);
const WorkerCommand& measure_worker_command();

class IsolatedWorker {
 public:
  IsolatedWorker(WorkerCommand command, double timeout_s);
  ~IsolatedWorker();
  IsolatedWorker(const IsolatedWorker&) = delete;
  IsolatedWorker& operator=(const IsolatedWorker&) = delete;

  // Compiles, verifies and times `job.subgraph` (the whole of it, after `job.between`)
  // in the worker, built as `candidate` says (its nodes are ignored); `abandon_above_ms` as
  // Measurer::time_kernel.
  CostRecord measure(const KernelJob& job, const Candidate& candidate,
                     const MeasureOptions& options,
                     double abandon_above_ms = Measurer::kNeverAbandon);
  // The same for a request made by measure_request (a distributed job's, made elsewhere).
  CostRecord measure(const std::string& request);
  int restarts() const { return starts_ > 0 ? starts_ - 1 : 0; }

 private:
  void start();
  void stop();
  CostRecord lost_worker(const std::string& why);

  WorkerCommand command_;
  double timeout_s_;
  pid_t pid_ = -1;
  int fd_ = -1;  // our end of a socketpair: the worker's stdin and protocol output
  int starts_ = 0;
};

// The request that asks a worker to measure `job.subgraph` as `candidate` says (its nodes are
// ignored), after `job.between`: header lines and the subgraph as ONNX bytes. What a job in the
// cost database's queue carries to `collage measure-worker` processes on other machines.
std::string measure_request(const KernelJob& job, const Candidate& candidate,
                            const MeasureOptions& options,
                            double abandon_above_ms = Measurer::kNeverAbandon);

// The worker's loop: requests on stdin, one result line each on the original stdout (stdout
// itself is pointed at stderr, so kernels that print cannot corrupt the protocol). Returns
// the exit status when stdin closes.
int run_measure_worker();

}  // namespace collage
