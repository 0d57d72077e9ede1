#include "backends/onednn/lanes.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace collage::onednn {

std::vector<std::vector<size_t>> step_dependencies(const std::vector<StepAccess>& steps) {
  struct State {
    long last_writer = -1;
    std::vector<size_t> readers;  // since the last write
  };
  std::map<int, State> buffers;
  std::vector<std::vector<size_t>> preds(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    std::set<size_t> deps;
    for (int b : steps[s].reads) {
      const State& st = buffers[b];
      if (st.last_writer >= 0) deps.insert(static_cast<size_t>(st.last_writer));
    }
    for (int b : steps[s].writes) {
      const State& st = buffers[b];
      if (st.last_writer >= 0) deps.insert(static_cast<size_t>(st.last_writer));
      deps.insert(st.readers.begin(), st.readers.end());
    }
    for (int b : steps[s].reads) buffers[b].readers.push_back(s);
    for (int b : steps[s].writes) {
      State& st = buffers[b];
      st.last_writer = static_cast<long>(s);
      st.readers.clear();
    }
    deps.erase(s);
    preds[s].assign(deps.begin(), deps.end());
  }
  return preds;
}

bool stages_fit(const std::vector<LaneStage>& stages, size_t num_steps, int lanes,
                const std::vector<bool>& narrow_safe) {
  size_t next = 0;
  for (const LaneStage& stage : stages) {
    if (stage.begin != next || stage.end <= stage.begin || stage.end > num_steps) return false;
    next = stage.end;
    if (!stage.concurrent()) continue;
    if (stage.lanes.size() < 2 || stage.lanes.size() > static_cast<size_t>(lanes)) return false;
    std::vector<bool> seen(stage.end - stage.begin, false);
    for (const std::vector<size_t>& lane : stage.lanes) {
      if (lane.empty()) return false;
      for (size_t i = 0; i < lane.size(); ++i) {
        const size_t s = lane[i];
        if (s < stage.begin || s >= stage.end || seen[s - stage.begin]) return false;
        if (i > 0 && s <= lane[i - 1]) return false;
        if (s >= narrow_safe.size() || !narrow_safe[s]) return false;
        seen[s - stage.begin] = true;
      }
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end()) return false;
  }
  return next == num_steps;
}

int LanePlan::concurrent_stages() const {
  return static_cast<int>(std::count_if(stages.begin(), stages.end(),
                                        [](const LaneStage& s) { return s.concurrent(); }));
}

namespace {

// List scheduling of steps begin, begin+1, ... onto `lanes` threads, one step at a time.
class StageSimulation {
 public:
  StageSimulation(const std::vector<std::vector<size_t>>& preds, const std::vector<StepCost>& costs,
                  int lanes, size_t begin)
      : preds_(preds), costs_(costs), begin_(begin), free_(lanes, 0.0) {}

  // Places the next step; returns its lane.
  int add() {
    const size_t s = begin_ + lane_of_.size();
    double ready = 0;
    int pred_lane = -1;
    for (size_t p : preds_[s]) {
      if (p < begin_) continue;  // done before the stage starts
      if (finish_[p - begin_] >= ready) {
        ready = finish_[p - begin_];
        pred_lane = lane_of_[p - begin_];
      }
    }
    // The lane where it finishes first; on a tie its latest predecessor's (no hand-over).
    int best = pred_lane >= 0 ? pred_lane : 0;
    double best_start = std::max(free_[best], ready);
    for (int l = 0; l < static_cast<int>(free_.size()); ++l) {
      const double start = std::max(free_[l], ready);
      if (start < best_start) {
        best = l;
        best_start = start;
      }
    }
    const double end = best_start + costs_[s].narrow_ms;
    free_[best] = end;
    finish_.push_back(end);
    lane_of_.push_back(best);
    used_.insert(best);
    return best;
  }

  double makespan() const { return *std::max_element(free_.begin(), free_.end()); }
  size_t lanes_used() const { return used_.size(); }
  const std::vector<int>& lane_of() const { return lane_of_; }

 private:
  const std::vector<std::vector<size_t>>& preds_;
  const std::vector<StepCost>& costs_;
  const size_t begin_;
  std::vector<double> free_;
  std::vector<double> finish_;
  std::vector<int> lane_of_;
  std::set<int> used_;
};

}  // namespace

bool lanes_worth_confirming(const LanePlan& first_look) {
  return first_look.concurrent_stages() > 0 && first_look.sequential_ms - first_look.predicted_ms >=
                                                   kMinLaneSaving * first_look.sequential_ms;
}

LanePlan plan_lanes(const std::vector<std::vector<size_t>>& preds,
                    const std::vector<StepCost>& costs, int lanes, double stage_overhead_ms,
                    size_t max_stage_steps) {
  const size_t n = costs.size();
  LanePlan plan;
  for (const StepCost& c : costs) plan.sequential_ms += c.wide_ms;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[b]: the fastest cover of steps [0, b); from[b]: where its last stage starts
  // (b - 1 and not concurrent: the last step runs wide).
  std::vector<double> best(n + 1, kInf);
  std::vector<size_t> from(n + 1, 0);
  std::vector<bool> concurrent(n + 1, false);
  best[0] = 0;
  // Concurrent stage costs, by (begin, end): simulated once per begin, extended step by step.
  std::vector<std::vector<double>> stage_ms(n);
  if (lanes >= 2)
    for (size_t a = 0; a < n; ++a) {
      StageSimulation sim(preds, costs, lanes, a);
      for (size_t b = a + 1; b <= n && b - a <= max_stage_steps && costs[b - 1].narrow_safe; ++b) {
        sim.add();
        stage_ms[a].push_back(sim.lanes_used() >= 2 ? sim.makespan() + stage_overhead_ms : kInf);
      }
    }
  for (size_t b = 1; b <= n; ++b) {
    best[b] = best[b - 1] + costs[b - 1].wide_ms;
    from[b] = b - 1;
    for (size_t a = b >= max_stage_steps ? b - max_stage_steps : 0; a + 1 < b; ++a) {
      if (b - a > stage_ms[a].size()) continue;
      const double t = best[a] + stage_ms[a][b - a - 1];
      if (t < best[b]) {
        best[b] = t;
        from[b] = a;
        concurrent[b] = true;
      }
    }
  }
  plan.predicted_ms = best[n];
  // Back from the end; runs of wide steps become one stage.
  std::vector<LaneStage> reversed;
  for (size_t b = n; b > 0;) {
    const size_t a = from[b];
    if (concurrent[b]) {
      LaneStage stage{a, b, std::vector<std::vector<size_t>>(lanes)};
      StageSimulation sim(preds, costs, lanes, a);
      for (size_t s = a; s < b; ++s) stage.lanes[sim.add()].push_back(s);
      stage.lanes.erase(std::remove_if(stage.lanes.begin(), stage.lanes.end(),
                                       [](const std::vector<size_t>& l) { return l.empty(); }),
                        stage.lanes.end());
      reversed.push_back(std::move(stage));
    } else if (!reversed.empty() && !reversed.back().concurrent() && reversed.back().begin == b) {
      reversed.back().begin = a;
    } else {
      reversed.push_back(LaneStage{a, b, {}});
    }
    b = a;
  }
  plan.stages.assign(reversed.rbegin(), reversed.rend());
  return plan;
}

}  // namespace collage::onednn
