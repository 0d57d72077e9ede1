#include "search/measure_queue.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "collage/error.h"

namespace collage {

MeasureJob queue_job(const KernelJob& job, const Candidate& candidate, std::string request) {
  MeasureJob j;
  j.row.key = job.key.key;
  j.row.backend = job.label;
  j.row.hardware = job.hardware.fingerprint();
  j.row.subgraph = job.key.text;
  j.machine = machine_class(job.hardware);
  j.threads = candidate.threads;
  j.backend_version = backend_version_id(*candidate.backend);
  j.request = std::move(request);
  return j;
}

std::string machine_class(const Hardware& machine) {
  return machine.cpu_model + " | " + machine.isa;
}

std::string backend_version_id(const Backend& backend) {
  return backend.name() + "@" + backend.version();
}

LeaseKeeper::LeaseKeeper(std::string location, double lease_s)
    : location_(std::move(location)), lease_s_(lease_s), thread_([this] { run(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void LeaseKeeper::run() {
  std::unique_ptr<CostDb> db;
  const auto every = std::chrono::duration<double>(lease_s_ / 3);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, every, [this] { return stop_; })) {
    lock.unlock();
    try {
      if (!db) db = std::make_unique<CostDb>(location_);
      db->engine().renew(CostDb::owner(), lease_s_);
    } catch (const std::exception& e) {
      // Not fatal: the claims expire and other processes may measure those keys too.
      spdlog::warn("cannot renew measurement leases in {}: {}", CostDb::shown(location_), e.what());
      db.reset();
    }
    lock.lock();
  }
}

}  // namespace collage
