#include "backends/xnnpack/thread_pool.h"

#include <xnnpack.h>

#include <algorithm>
#include "backends/xnnpack/xnn_common.h"

namespace collage::xnnpack {

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
  if (threads_ > 1) {
    pool_ = pthreadpool_create(static_cast<size_t>(threads_));
    if (!pool_) fail(ErrorKind::kBackend, "pthreadpool_create({}) failed", threads_);
  }
}

void ThreadPool::yield_workers() const {
  if (!pool_) return;
  // One item per thread, so that every worker takes one and then sleeps (a range the
  // caller could run alone would not reach them).
  pthreadpool_parallelize_1d(
      pool_, [](void*, size_t) {}, nullptr, static_cast<size_t>(threads_),
      PTHREADPOOL_FLAG_YIELD_WORKERS);
}

ThreadPool::~ThreadPool() {
  if (pool_) pthreadpool_destroy(pool_);
}

XnnpackContext& XnnpackContext::get() {
  static XnnpackContext context;
  return context;
}

XnnpackContext::XnnpackContext() {
  // Never deinitialised: kernels may outlive any owner we could tie it to.
  xnn_status status = xnn_initialize(nullptr);
  initialized_ = status == xnn_status_success;
  if (!initialized_) init_error_ = status_name(status);
}

std::shared_ptr<ThreadPool> XnnpackContext::pool(int threads) {
  threads = std::max(threads, 1);
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<ThreadPool>& pool = pools_[threads];
  if (!pool) pool = std::make_shared<ThreadPool>(threads);
  return pool;
}

}  // namespace collage::xnnpack
