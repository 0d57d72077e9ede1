#include "runtime/lane_workers.h"

#include <immintrin.h>

#include <memory>

namespace collage {
namespace {

// Iterations of a pause loop before sleeping: ~5-10 us on these machines, longer than a
// stage hand-off and much shorter than a kernel.
constexpr int kSpins = 4000;

// Spins, then sleeps, until `value` differs from `old`.
template <typename T>
void wait_for_change(const std::atomic<T>& value, T old) {
  for (int i = 0; i < kSpins; ++i) {
    if (value.load(std::memory_order_acquire) != old) return;
    _mm_pause();
  }
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}

}  // namespace

LaneWorkers::LaneWorkers(int lanes) {
  // Every Worker exists before any thread starts: a thread reads workers_.
  for (int k = 1; k < lanes; ++k) workers_.push_back(std::make_unique<Worker>());
  for (int k = 1; k < lanes; ++k) workers_[k - 1]->thread = std::thread([this, k] { loop(k); });
}

LaneWorkers::~LaneWorkers() {
  stop_.store(true, std::memory_order_release);
  for (auto& w : workers_) {
    w->epoch.fetch_add(1, std::memory_order_release);
    w->epoch.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

void LaneWorkers::loop(int lane) {
  Worker& me = *workers_[lane - 1];
  unsigned seen = 0;
  while (true) {
    wait_for_change(me.epoch, seen);
    seen = me.epoch.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    try {
      (*body_)(lane);
    } catch (...) {
      if (!error_set_.test_and_set()) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void LaneWorkers::run(int lanes, const std::function<void(int)>& body) {
  const int helpers = std::min(lanes - 1, static_cast<int>(workers_.size()));
  body_ = &body;
  error_ = nullptr;
  error_set_.clear();
  pending_.store(helpers, std::memory_order_release);
  for (int k = 0; k < helpers; ++k) {
    workers_[k]->epoch.fetch_add(1, std::memory_order_release);
    workers_[k]->epoch.notify_one();
  }
  try {
    body(0);
  } catch (...) {
    if (!error_set_.test_and_set()) error_ = std::current_exception();
  }
  for (int left = pending_.load(std::memory_order_acquire); left != 0;
       left = pending_.load(std::memory_order_acquire))
    wait_for_change(pending_, left);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace collage
