#include "search/measured_costs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "search/plan_records.h"

namespace collage {
namespace {

MeasureOptions measure_options(const Graph& model) {
  MeasureOptions o;
  o.evict_bytes = cache_pressure_bytes(model);
  return o;
}

}  // namespace

MeasuredCosts::MeasuredCosts(const Graph& model, CostDb& db, const Hardware& machine, int threads,
                             bool isolate, double isolate_timeout_s)
    : model_(model),
      db_(db),
      machine_(machine),
      threads_(threads),
      measurer_(&db, machine, measure_options(model)) {
  if (!isolate) return;
  if (measure_worker_command().executable.empty()) {
    spdlog::warn(
        "candidate isolation needs the collage CLI's measure-worker; measuring in-process");
    return;
  }
  worker_ = std::make_unique<IsolatedWorker>(measure_worker_command(), isolate_timeout_s);
  measurer_.set_isolation(worker_.get());
}

MeasuredCosts::~MeasuredCosts() = default;

MeasuredCosts::Result MeasuredCosts::measure(const Candidate& c) {
  MemoKey key{c.backend, c.variant, c.threads, c.nodes};
  if (auto it = memo_.find(key); it != memo_.end()) return {it->second, true, ""};
  MeasureResult r = measurer_.measure(model_, c);
  memo_[key] = r.record.milliseconds;
  return {r.record.milliseconds, r.cache_hit, r.record.ok ? "" : r.record.reason};
}

void MeasuredCosts::measure_all(std::vector<Candidate> candidates, const Progress& progress) {
  // One subgraph on every backend in a row: the worker computes its reference outputs (for
  // the correctness check) once and keeps only the last few.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.nodes < b.nodes; });
  stats_.candidates += candidates.size();
  double measuring_s = 0;
  size_t measured = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    auto t0 = std::chrono::steady_clock::now();
    Result r = measure(c);
    if (r.cache_hit) {
      ++stats_.cache_hits;
    } else {
      ++measured;
      measuring_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (!r.failure.empty()) {
      ++stats_.failed;
      stats_.failures.push_back(fmt::format("{} on {} nodes from '{}': {}", c.label(),
                                            c.nodes.size(), model_.node(c.nodes[0]).name,
                                            r.failure));
    }
    // ETA: the mean time of a measurement so far, times what is left (cache hits are free,
    // so this errs on the long side).
    double eta = measured ? measuring_s / measured * (candidates.size() - i - 1) : -1;
    if (progress) progress(i + 1, candidates.size(), eta, c);
  }
  stats_.measured += measured;
}

double MeasuredCosts::cost_ms(const Candidate& candidate) {
  return measure(candidate).ms;
}

double MeasuredCosts::step_overhead_ms() {
  // Measured once per machine and thread count and kept in the cost DB: re-measured on every
  // tune, its noise alone could tip the op-level search between two near-equal covers.
  if (step_overhead_ms_ < 0) {
    Hardware hw = machine_;
    hw.threads = threads_;
    step_overhead_ms_ = find_or_measure(db_, step_overhead_key(hw), kStepOverheadRecord, hw, [&] {
                          CostRecord record;
                          record.milliseconds = measure_step_overhead_ms(threads_);
                          return record;
                        }).milliseconds;
  }
  return step_overhead_ms_;
}

double MeasuredCosts::stage_overhead_ms() {
  if (stage_overhead_ms_ < 0) {
    Hardware hw = machine_;
    hw.threads = threads_;
    const double step = step_overhead_ms();
    stage_overhead_ms_ =
        find_or_measure(db_, stage_overhead_key(hw), kStageOverheadRecord, hw, [&] {
          CostRecord record;
          record.milliseconds = measure_stage_overhead_ms(threads_, step);
          return record;
        }).milliseconds;
  }
  return stage_overhead_ms_;
}

double MeasuredCosts::copy_ms(Device& device, bool to_host, size_t bytes) {
  auto memo = std::make_tuple(&device, to_host, bytes);
  if (auto it = copy_ms_.find(memo); it != copy_ms_.end()) return it->second;
  Hardware hw = with_devices(machine_, {&device});
  hw.threads = threads_;
  RecordKey key = copy_key(hw, device.name(), to_host, bytes);
  double ms = find_or_measure(db_, key, kCopyRecord, hw, [&] {
                CostRecord record;
                record.milliseconds = measure_copy_ms(device, to_host, bytes);
                return record;
              }).milliseconds;
  return copy_ms_[memo] = ms;
}

}  // namespace collage
