// Persistent threads for the lanes of a concurrent stage. The caller runs lane 0 itself;
// worker k runs lane k. Made once per executor, so a run creates no thread: between stages
// a worker spins briefly (a stage hand-off is a few microseconds) and then sleeps on a futex
// (std::atomic::wait), so an idle worker never holds a core the next kernel needs.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace collage {

class LaneWorkers {
 public:
  // `lanes` - 1 worker threads.
  explicit LaneWorkers(int lanes);
  ~LaneWorkers();
  LaneWorkers(const LaneWorkers&) = delete;
  LaneWorkers& operator=(const LaneWorkers&) = delete;

  // body(0) on the calling thread and body(k) on worker k for 0 < k < lanes, then waits for
  // all. Rethrows the first exception a lane threw (after every lane has finished).
  void run(int lanes, const std::function<void(int lane)>& body);

 private:
  struct Worker {
    std::thread thread;
    std::atomic<unsigned> epoch{0};  // bumped by run() to hand the worker a lane
  };
  void loop(int lane);

  std::vector<std::unique_ptr<Worker>> workers_;  // workers_[k - 1] runs lane k
  const std::function<void(int)>* body_ = nullptr;
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::atomic_flag error_set_ = ATOMIC_FLAG_INIT;
};

}  // namespace collage
