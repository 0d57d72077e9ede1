#include "backends/xnnpack/thread_pool.h"

#include <xnnpack.h>

#include "backends/xnnpack/xnn_common.h"
#include "collage/session.h"

namespace collage::xnnpack {

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
  if (threads_ > 1) {
    pool_ = pthreadpool_create(static_cast<size_t>(threads_));
    if (!pool_) fail(ErrorKind::kBackend, "pthreadpool_create({}) failed", threads_);
  }
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

std::shared_ptr<ThreadPool> XnnpackContext::pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  int budget = thread_budget();
  if (!pool_ || budget != observed_budget_) {
    pool_ = std::make_shared<ThreadPool>(budget);
    observed_budget_ = budget;
  }
  return pool_;
}

void XnnpackContext::set_threads(int threads) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pool_ || pool_->threads() != threads) pool_ = std::make_shared<ThreadPool>(threads);
  observed_budget_ = thread_budget();
}

}  // namespace collage::xnnpack
