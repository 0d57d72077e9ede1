#include "search/measured_costs.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "search/plan_records.h"

namespace collage {
MeasuredCosts::MeasuredCosts(const Graph& model, CostDb& db, const Hardware& machine, int threads,
                             bool isolate, double isolate_timeout_s, QueueOptions queue)
    : model_(model),
      db_(db),
      machine_(machine),
      threads_(threads),
      pressure_(model),
      measurer_(&db, machine, MeasureOptions{}),
      queue_(std::move(queue)) {
  if (queue_.location.empty()) queue_.location = db.path();
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

void MeasuredCosts::keep_leases() {
  if (!lease_keeper_)
    lease_keeper_ = std::make_unique<LeaseKeeper>(queue_.location, queue_.lease_s);
}

MeasuredCosts::Result MeasuredCosts::remember(const Candidate& c, const CostRecord& record,
                                              Origin origin) {
  MemoKey key{c.backend, c.variant, c.threads, c.nodes};
  memo_[key] = record.milliseconds;
  jobs_.erase(key);
  if (record.ok && std::isfinite(record.milliseconds)) {
    auto [it, added] =
        fastest_.try_emplace({c.backend->device(), c.threads, c.nodes}, record.milliseconds);
    if (!added) it->second = std::min(it->second, record.milliseconds);
  }
  // Each candidate is remembered once a tune (the memo answers after), found or measured.
  if (record.ok && record.reason.rfind(kWithinSensitivity, 0) == 0 &&
      stats_.within_sensitivity++ == 0)
    stats_.sensitivity_example = fmt::format("{} on {} nodes from '{}'", c.label(), c.nodes.size(),
                                             model_.node(c.nodes[0]).name);
  return {record.milliseconds, origin, record.ok ? "" : record.reason};
}

double MeasuredCosts::abandon_above_ms(const Candidate& c) const {
  auto it = fastest_.find({c.backend->device(), c.threads, c.nodes});
  return it == fastest_.end() ? Measurer::kNeverAbandon : kAbandonFactor * it->second;
}

MeasuredCosts::Result MeasuredCosts::measured_here(const Candidate& c, const KernelJob& job) {
  CostRecord record;
  try {
    record = measurer_.measure_now(job, c, abandon_above_ms(c));
  } catch (...) {
    // Give the key back at once rather than after the lease (an interrupt, a lost worker).
    try {
      db_.engine().release(job.key.key, CostDb::owner());
    } catch (const std::exception&) {
    }
    throw;
  }
  // put() also ends the job; if another process stored the key meanwhile (our lease
  // expired), every user of the key keeps the first record.
  record = db_.put(job.key.key, job.label, job.hardware.fingerprint(), job.key.text, record);
  return remember(c, record, Origin::kMeasuredHere);
}

KernelJob MeasuredCosts::new_job(const Candidate& c) const {
  return kernel_job(model_, c, machine_, pressure_.between_runs(c.nodes));
}

const KernelJob& MeasuredCosts::job_of(const Candidate& c) {
  MemoKey key{c.backend, c.variant, c.threads, c.nodes};
  auto it = jobs_.find(key);
  if (it == jobs_.end()) it = jobs_.emplace(key, new_job(c)).first;
  return it->second;
}

std::optional<MeasuredCosts::Result> MeasuredCosts::known(const Candidate& c, bool read_db) {
  if (auto it = memo_.find(MemoKey{c.backend, c.variant, c.threads, c.nodes}); it != memo_.end())
    return Result{it->second, Origin::kKnown, ""};
  if (read_db)
    if (std::optional<CostRecord> hit = db_.find(job_of(c).key.key))
      return remember(c, *hit, Origin::kKnown);
  return std::nullopt;
}

std::optional<MeasuredCosts::Result> MeasuredCosts::try_measure(const Candidate& c, bool first) {
  // A read first: a warm tune finds everything without a write transaction.
  if (std::optional<Result> r = known(c, first)) return r;
  const KernelJob& job = job_of(c);
  keep_leases();
  Claim claim = db_.engine().claim(queue_job(job, c, ""), CostDb::owner(), queue_.lease_s);
  switch (claim.result) {
    case Claim::Result::kMeasured:
      return remember(c, claim.record, Origin::kMeasuredElsewhere);
    case Claim::Result::kMine:
      return measured_here(c, job);
    case Claim::Result::kHeldElsewhere:
      break;
  }
  return std::nullopt;
}

MeasuredCosts::Result MeasuredCosts::measure(const Candidate& c) {
  for (bool first = true;; first = false) {
    if (std::optional<Result> r = try_measure(c, first)) return *r;
    // Another process measures it now: its record comes within a measurement's time, or
    // its lease expires and the claim above takes the key over.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void MeasuredCosts::count(const Candidate& c, const Result& r) {
  if (r.origin == Origin::kKnown) ++stats_.cache_hits;
  if (r.origin == Origin::kMeasuredHere) ++stats_.measured;
  if (r.origin == Origin::kMeasuredElsewhere) ++stats_.measured_elsewhere;
  if (!r.failure.empty()) {
    ++stats_.failed;
    stats_.failures.push_back(fmt::format("{} on {} nodes from '{}': {}", c.label(), c.nodes.size(),
                                          model_.node(c.nodes[0]).name, r.failure));
  }
}

void MeasuredCosts::measure_all(std::vector<Candidate> candidates, const Progress& progress) {
  // One subgraph on every backend in a row: the worker computes its reference outputs (for
  // the correctness check) once and keeps only the last few.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.nodes < b.nodes; });
  stats_.candidates += candidates.size();
  if (queue_.distributed) return measure_distributed(candidates, progress);
  double measuring_s = 0;
  size_t measured = 0, done = 0;
  auto report = [&](const Candidate& c) {
    // ETA: the mean time of a measurement so far, times what is left (cache hits are free,
    // so this errs on the long side).
    double eta = measured ? measuring_s / measured * (candidates.size() - done) : -1;
    if (progress) progress(done, candidates.size(), eta, c);
  };
  // Keys another process holds are left for later: it is measuring them now.
  std::vector<const Candidate*> held;
  for (const Candidate& c : candidates) {
    auto t0 = std::chrono::steady_clock::now();
    std::optional<Result> r = try_measure(c, true);
    if (!r) {
      held.push_back(&c);
      continue;
    }
    if (r->origin == Origin::kMeasuredHere) {
      ++measured;
      measuring_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    count(c, *r);
    ++done;
    report(c);
  }
  while (!held.empty()) {
    std::vector<std::string> keys;
    for (const Candidate* c : held)
      keys.push_back(jobs_.at(MemoKey{c->backend, c->variant, c->threads, c->nodes}).key.key);
    std::map<std::string, CostRecord> arrived;
    for (auto& [key, record] : db_.engine().find_many(keys)) arrived[key] = record;
    std::vector<const Candidate*> still;
    for (size_t i = 0; i < held.size(); ++i) {
      const Candidate& c = *held[i];
      std::optional<Result> r;
      if (auto it = arrived.find(keys[i]); it != arrived.end())
        r = remember(c, it->second, Origin::kMeasuredElsewhere);
      else
        r = try_measure(c, false);  // takes the key over when its holder's lease expired
      if (!r) {
        still.push_back(&c);
        continue;
      }
      count(c, *r);
      ++done;
      report(c);
    }
    held.swap(still);
    if (!held.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void MeasuredCosts::measure_distributed(const std::vector<Candidate>& candidates,
                                        const Progress& progress) {
  size_t done = 0;
  auto started = std::chrono::steady_clock::now();
  auto report = [&](const Candidate& c) {
    ++done;
    // ETA from the rate results arrive at so far.
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    double eta = done ? elapsed / done * (candidates.size() - done) : -1;
    if (progress) progress(done, candidates.size(), eta, c);
  };
  // Every candidate not known yet becomes a job (one per key: candidates can share one).
  std::map<std::string, std::vector<const Candidate*>> waiting;
  std::vector<MeasureJob> jobs;
  std::set<std::string> backend_versions;
  for (const Candidate& c : candidates) {
    MemoKey key{c.backend, c.variant, c.threads, c.nodes};
    if (auto it = memo_.find(key); it != memo_.end()) {
      count(c, {it->second, Origin::kKnown, ""});
      report(c);
      continue;
    }
    KernelJob job = new_job(c);
    if (std::optional<CostRecord> hit = db_.find(job.key.key)) {
      count(c, remember(c, *hit, Origin::kKnown));
      report(c);
      continue;
    }
    std::vector<const Candidate*>& same = waiting[job.key.key];
    if (same.empty()) {
      jobs.push_back(queue_job(job, c, measure_request(job, c, measurer_.options())));
      backend_versions.insert(jobs.back().backend_version);
    }
    same.push_back(&c);
    jobs_.emplace(key, std::move(job));
  }
  if (waiting.empty()) return;
  db_.engine().publish(jobs);
  jobs.clear();
  keep_leases();
  spdlog::info("published {} measurement jobs to {}", waiting.size(), db_.path());
  // Workers claim the jobs; what none claims within claim_timeout_s is measured here.
  JobFilter mine;
  mine.machine = machine_class(machine_);
  mine.max_threads = threads_;
  mine.backend_versions.assign(backend_versions.begin(), backend_versions.end());
  mine.claimable_for_s = queue_.claim_timeout_s;
  auto settle = [&](const std::string& key, const CostRecord& record, Origin origin) {
    std::vector<const Candidate*> same = std::move(waiting.at(key));
    waiting.erase(key);
    for (size_t i = 0; i < same.size(); ++i) {
      Result r = remember(*same[i], record, i == 0 ? origin : Origin::kKnown);
      count(*same[i], r);
      report(*same[i]);
    }
  };
  while (!waiting.empty()) {
    std::vector<std::string> keys;
    for (const auto& [key, same] : waiting) keys.push_back(key);
    bool progressed = false;
    for (auto& [key, record] : db_.engine().find_many(keys)) {
      settle(key, record, Origin::kMeasuredElsewhere);
      progressed = true;
    }
    if (waiting.empty()) break;
    mine.keys.clear();
    for (const auto& [key, same] : waiting) mine.keys.push_back(key);
    if (std::optional<MeasureJob> job =
            db_.engine().claim_next(mine, CostDb::owner(), queue_.lease_s)) {
      const Candidate& c = *waiting.at(job->row.key).front();
      Result r = measured_here(c, jobs_.at(MemoKey{c.backend, c.variant, c.threads, c.nodes}));
      CostRecord record;
      record.milliseconds = r.ms;
      record.ok = r.failure.empty();
      record.reason = r.failure;
      settle(job->row.key, record, Origin::kMeasuredHere);
      progressed = true;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

double MeasuredCosts::cost_ms(const Candidate& candidate) {
  return measure(candidate).ms;
}

std::optional<double> MeasuredCosts::known_cost_ms(const Candidate& c) {
  const MemoKey key{c.backend, c.variant, c.threads, c.nodes};
  const bool had_job = jobs_.count(key) > 0;
  if (std::optional<Result> r = known(c, true)) return r->ms;
  // A job made just to ask is not kept: the region may never be measured (a refused union of
  // a single-backend plan), and the job holds a copy of the region's weights.
  if (!had_job) jobs_.erase(key);
  return std::nullopt;
}

double MeasuredCosts::confirmed_cost_ms(const Candidate& candidate) {
  // The tuner asks for a group's confirmed cost three times (confirming, predicting, writing
  // the plan): the subgraph is extracted and the cost DB read once.
  const MemoKey memo{candidate.backend, candidate.variant, candidate.threads, candidate.nodes};
  if (auto it = confirmed_memo_.find(memo); it != confirmed_memo_.end()) return it->second;
  const double first_ms = cost_ms(candidate);
  if (!std::isfinite(first_ms)) return confirmed_memo_[memo] = first_ms;
  const KernelJob job = new_job(candidate);
  // A recheck, where one was taken, is the newest sample (recheck_cost_ms).
  if (std::optional<CostRecord> recheck = db_.find(sample_key(job, "recheck").key);
      recheck && recheck->ok)
    return confirmed_memo_[memo] = recheck->milliseconds;
  auto sample = [&](const std::string& mark) {
    return find_or_measure(db_, sample_key(job, mark), kConfirmationRecord, job.hardware, [&] {
      if (before_kept_sample_) before_kept_sample_("confirming");
      return measurer_.measure_now(job, candidate);
    });
  };
  const CostRecord second = sample("confirmation");
  // A kernel that ran once and fails now (a flaky build) keeps its first cost: the plan was
  // timed end to end with it before this prediction is made.
  if (!second.ok) return confirmed_memo_[memo] = first_ms;
  // Two samples that disagree by over 2x: one of them was taken while something else held
  // the cores (this machine is shared). A third decides, by the median of the three. Seen in
  // a bench run: gpt2-tiny's attention group first 0.031 ms, confirmed at 0.302 (and 0.025
  // in the model), its LM head 0.039 and 0.222: the written plan predicted 0.945 ms for
  // 0.193.
  const double low = std::min(first_ms, second.milliseconds);
  const double high = std::max(first_ms, second.milliseconds);
  if (high <= kConfirmationAgreement * low || high - low <= kConfirmationMinGapMs)
    return confirmed_memo_[memo] = second.milliseconds;
  const CostRecord third = sample("confirmation 2");
  if (!third.ok) return confirmed_memo_[memo] = second.milliseconds;
  return confirmed_memo_[memo] = std::clamp(third.milliseconds, low, high);
}

double MeasuredCosts::recheck_cost_ms(const Candidate& candidate, double plan_ms) {
  const double confirmed = confirmed_cost_ms(candidate);
  if (!std::isfinite(confirmed)) return confirmed;
  const KernelJob job = new_job(candidate);
  const CostRecord recheck =
      find_or_measure(db_, sample_key(job, "recheck"), kConfirmationRecord, job.hardware, [&] {
        if (before_kept_sample_) before_kept_sample_("rechecking");
        CostRecord sample = measurer_.measure_now(job, candidate);
        // A kernel alone cannot take much longer than the whole plan it is part of, timed
        // side by side seconds before (the margin: a calm machine's spread between two
        // timings, the calm wait's "slow" ratio, and for microsecond plans the 0.1 ms their
        // step overheads miss by, as prediction_contradicted allows): such a sample fell in
        // a slow window the wait before it could not outlast. The kernel keeps the newest
        // earlier sample that is not over that bound too (the confirmed cost, else the first
        // sample), and the record says what was sampled. A cnn bench run of 2026-12-06: DCGAN's
        // first region, confirmed at 0.278 ms, was rechecked at 3.976 while the machine ran the
        // plan 7.6x slower than calm, and the plan (0.828 side by side, 0.750 alone) was written
        // with a prediction of 4.501 ms; in the next run ResNeXt-50's region was confirmed at 41.6
        // and rechecked at 41.6 against 22.1 side by side (+93 %).
        const double bound = std::max(plan_ms * kRecheckPlanMargin, plan_ms + kRecheckMinGapMs);
        if (sample.ok && std::isfinite(bound) && sample.milliseconds > bound) {
          const double first = cost_ms(candidate);
          const double kept = confirmed <= bound ? confirmed : first <= bound ? first : confirmed;
          sample.reason =
              fmt::format("sampled at {:.4f} ms, over its whole plan's {:.4f}: {:.4f} kept",
                          sample.milliseconds, plan_ms, kept);
          sample.milliseconds = kept;
        }
        return sample;
      });
  // A kernel that fails now keeps its confirmed cost, as a failed confirmation does.
  if (!recheck.ok) return confirmed;
  const MemoKey memo{candidate.backend, candidate.variant, candidate.threads, candidate.nodes};
  return confirmed_memo_[memo] = recheck.milliseconds;
}

RecordKey MeasuredCosts::sample_key(const KernelJob& job, const std::string& mark) {
  return {job.key.key + "\n" + mark, job.key.text + mark + "\n"};
}

bool prediction_contradicted(double predicted_ms, double measured_ms) {
  if (!std::isfinite(predicted_ms) || !std::isfinite(measured_ms) || measured_ms <= 0) return false;
  const double gap = std::abs(predicted_ms - measured_ms);
  return gap > kRecheckShare * measured_ms && gap > kRecheckMinGapMs;
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
