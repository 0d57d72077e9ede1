// The pthreadpool XNNPACK's kernels run on, and XNNPACK's one-time initialisation.
#pragma once

#include <pthreadpool.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace collage::xnnpack {

// Owns one pthreadpool. One thread means no pool at all: XNNPACK then runs on the
// caller's thread without any hand-off.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  pthreadpool_t get() const { return pool_; }
  int threads() const { return threads_; }

  // Puts the workers to sleep now. After a parallel call without
  // PTHREADPOOL_FLAG_YIELD_WORKERS (XNNPACK's own, and ours converting layouts) they spin
  // ~1M iterations, tens of ms, on cores the next kernel needs: in the tuner's side-by-side
  // comparison, SqueezeNet's one onednn-graph region timed right after an XNNPACK plan took
  // 6.9 ms instead of 2.8, and the tuner wrote a 39-kernel plan that ran 2x slower. Every
  // XNNPACK kernel calls this as its run ends (an empty task per worker, then sleep: a few
  // microseconds).
  void yield_workers() const;

 private:
  pthreadpool_t pool_ = nullptr;
  int threads_ = 1;
};

// Process-wide XNNPACK state shared by the `xnnpack` and `xnnpack-graph` backends.
class XnnpackContext {
 public:
  static XnnpackContext& get();

  // False when xnn_initialize failed (e.g. a CPU without the minimum ISA).
  bool initialized() const { return initialized_; }
  const std::string& init_error() const { return init_error_; }

  // The pool of `threads` threads, shared by every kernel compiled for that count (kernels
  // keep the pointer: a runtime binds its pool at creation). One thread is no pool: the
  // kernel runs on its caller's thread, beside whatever else runs (a concurrent stage).
  // Two kernels of the same count above one running at once take turns on their pool
  // (pthreadpool serialises callers); with a budget of B threads that happens only for
  // shares of 2..B/2, which the schedule search measures like any other choice.
  std::shared_ptr<ThreadPool> pool(int threads);

 private:
  XnnpackContext();

  bool initialized_ = false;
  std::string init_error_;
  std::mutex mutex_;
  std::map<int, std::shared_ptr<ThreadPool>> pools_;  // by thread count
};

}  // namespace collage::xnnpack
