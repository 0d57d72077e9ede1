// The tuner's cost model: every candidate measured on this machine (compiled standalone,
// checked against reference, timed in its model's cache state; see measure.h), through the
// cost database, so nothing known is measured twice. Candidates measured on demand (merged
// graph-level regions, single-backend plans' groups) go the same way.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "collage/tune.h"
#include "search/cost_db.h"
#include "search/cost_model.h"
#include "search/isolated_measurer.h"
#include "search/measure.h"

namespace collage {

struct MeasureStats {
  size_t candidates = 0, cache_hits = 0, measured = 0, failed = 0;
  std::vector<std::string> failures;  // one line per failed candidate
};

class MeasuredCosts : public CostModel {
 public:
  // `threads`: the tuning's thread budget (the step overhead is measured for it).
  MeasuredCosts(const Graph& model, CostDb& db, const Hardware& machine, int threads, bool isolate,
                double isolate_timeout_s);
  ~MeasuredCosts() override;

  // Measures every candidate (the tuner's first phase), reporting after each.
  using Progress = std::function<void(size_t done, size_t total, double eta_s, const Candidate&)>;
  void measure_all(std::vector<Candidate> candidates, const Progress& progress);

  double cost_ms(const Candidate& candidate) override;
  double step_overhead_ms() override;
  double stage_overhead_ms() override;
  // Measured once per device, direction and size, kept in the cost DB.
  double copy_ms(Device& device, bool to_host, size_t bytes) override;
  const MeasureStats& stats() const { return stats_; }

 private:
  using MemoKey = std::tuple<const Backend*, std::string, int, std::vector<NodeId>>;
  struct Result {
    double ms;
    bool cache_hit;       // known before: in the cost DB, or measured earlier in this tune
    std::string failure;  // why it cannot run ("" when it can; only on a fresh lookup)
  };
  Result measure(const Candidate& candidate);

  const Graph& model_;
  CostDb& db_;
  Hardware machine_;
  int threads_;
  Measurer measurer_;
  std::unique_ptr<IsolatedWorker> worker_;
  std::map<MemoKey, double> memo_;
  double step_overhead_ms_ = -1, stage_overhead_ms_ = -1;
  std::map<std::tuple<const Device*, bool, size_t>, double> copy_ms_;
  MeasureStats stats_;
};

}  // namespace collage
