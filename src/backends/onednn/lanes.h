// Running independent primitives of one onednn program at once (issue 17, inside a region).
//
// Since glue ops run inside onednn-graph regions, a branchy CNN (GoogLeNet, Inception,
// NASNet) tunes to ONE region, so the executor's step schedule has nothing to overlap: the
// branches are primitives of one program. Small primitives scale badly to all threads
// (measured here, 2 threads vs 1, sum over the program's primitives: NASNet-A-Mobile 1.34x,
// MobileNetV2 1.40x, GoogLeNet 1.67x, Inception-v3 1.83x), so a program may run a run of its
// steps as a concurrent *stage*: each thread a lane of single-threaded primitives (oneDNN
// runs a primitive on one thread when called inside an OpenMP parallel region), a lane
// waiting for another only where a step reads what the other lane writes.
//
// This file is the choice, a pure function of the step graph and of costs (a test can give
// it any): the program (dnnl_common.cc) measures each step on every thread ("wide") and on
// one thread beside the others ("narrow"), and keeps the stages only when the whole
// program, timed both ways, is faster with them.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace collage::onednn {

// The buffers a step reads and writes (ids the caller gives: one per distinct buffer).
struct StepAccess {
  std::vector<int> reads, writes;
};

// For each step, the earlier steps it must follow: it reads what they write, or writes what
// they read or write (a buffer reused in place).
std::vector<std::vector<size_t>> step_dependencies(const std::vector<StepAccess>& steps);

struct StepCost {
  double wide_ms = 0;    // alone, on every thread of the program
  double narrow_ms = 0;  // on one thread
  // Whether it computes the same on one thread of a team as alone: oneDNN 2.6's nhwc batch
  // norm (bnorm_tbb_jit) computes half its output there. A step that does not never runs in
  // a lane.
  bool narrow_safe = true;
};

// Steps [begin, end) of a program, either one after another on every thread (no lanes) or
// concurrently: lanes[k] lists the steps thread k runs, in program order.
struct LaneStage {
  size_t begin = 0, end = 0;
  std::vector<std::vector<size_t>> lanes;
  bool concurrent() const { return !lanes.empty(); }
};

struct LanePlan {
  std::vector<LaneStage> stages;  // cover every step, in order
  double predicted_ms = 0;        // under the costs given
  double sequential_ms = 0;       // every step wide
  int concurrent_stages() const;
};

// The fastest cover of the steps by stages under `costs`: dynamic programming over the stage
// boundaries (a concurrent stage spans at most `max_stage_steps` steps), each concurrent stage
// list-scheduled onto `lanes` threads in program order (a step goes to the lane where it
// finishes first, after its predecessors in the stage) and charged its last lane's finish
// plus `stage_overhead_ms` (starting the threads, the last join). Predecessors before a
// stage are done when it starts. A concurrent stage uses at least two lanes and holds no
// step that is not narrow_safe.
LanePlan plan_lanes(const std::vector<std::vector<size_t>>& preds,
                    const std::vector<StepCost>& costs, int lanes, double stage_overhead_ms,
                    size_t max_stage_steps = 256);

// Whether a plan made from a first look at the steps' costs (one timed pass each way)
// promises enough to measure them fully and time its stages whole: a concurrent stage and a
// predicted saving of at least kMinLaneSaving of the sequential time. Why (GoogLeNet's cold
// tune under onednn-graph alone, 2 threads, COLLAGE_ONEDNN_LANES=verbose): 335 of its 1236
// region compiles had steps that could overlap, choosing for them (~25 runs of the region
// each) took 21 of the tune's 71 s, and the 47 regions that kept a stage saved a median
// 0.9 % of their time. With the first look: 85 of 340 measured fully, the compiles 23.9 ->
// 13.6 s (docs/DESIGN.md).
inline constexpr double kMinLaneSaving = 0.01;
bool lanes_worth_confirming(const LanePlan& first_look);

// Whether `stages` can run a program of `num_steps` steps on `lanes` threads: they cover the
// steps in order; a concurrent stage has 2 to `lanes` lanes that list each of its steps once,
// in program order, and no step that is not `narrow_safe` (per step). Such a cover runs
// right with any dependencies: a step waits only for earlier steps, so lanes in program
// order never wait in a circle. A remembered choice (LaneMemo) is checked with this.
bool stages_fit(const std::vector<LaneStage>& stages, size_t num_steps, int lanes,
                const std::vector<bool>& narrow_safe);

// Where a program's stage choice is kept between compiles (lane_memo.h keeps it on disk).
// The choice is a measurement, so two compiles of one region could choose differently; the
// tuner compiles a region to measure it and every run compiles it again, and the run
// should go as it was measured (NASNet's tuned plan ran 12.8 % faster than its cost).
class LaneMemo {
 public:
  virtual ~LaneMemo() = default;
  // The stages chosen before (empty: every step one after another); nullopt when none was.
  virtual std::optional<std::vector<LaneStage>> recall() = 0;
  virtual void remember(const std::vector<LaneStage>& stages) = 0;
};

}  // namespace collage::onednn
