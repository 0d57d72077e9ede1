// The pthreadpool XNNPACK's kernels run on, and XNNPACK's one-time initialisation.
#pragma once

#include <pthreadpool.h>

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

  // The shared pool: sized by the last set_threads(), or to the thread budget when that
  // changed since. Kernels keep the pointer they compiled with: a runtime binds its pool
  // at creation, so a resize must not pull it from under them.
  std::shared_ptr<ThreadPool> pool();
  void set_threads(int threads);

 private:
  XnnpackContext();

  bool initialized_ = false;
  std::string init_error_;
  std::mutex mutex_;
  std::shared_ptr<ThreadPool> pool_;
  int observed_budget_ = 0;  // thread_budget() when pool_ was last sized
};

}  // namespace collage::xnnpack
