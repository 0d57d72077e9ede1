// Cost-DB records that are not a kernel's: a whole plan's measured latency and the executor's
// step overhead. Kept in the same database as the kernels' costs, so a warm re-tune re-times
// nothing, with their own record kinds (the `backend` column) and keys.
#pragma once

#include <functional>
#include <string>

#include "collage/graph.h"
#include "plan/hardware.h"
#include "runtime/candidate.h"
#include "search/cost_db.h"

namespace collage {

// Record kinds.
// A plan timed alone, as a genome's fitness in the graph-level search.
inline constexpr const char* kPlanFitnessRecord = "plan";
// A plan timed side by side with the single-backend plans in the never-worse check. Kept
// apart from fitness records so that the comparison never changes a fitness the search will
// read again: a warm re-tune then retraces the same search.
inline constexpr const char* kPlanSideBySideRecord = "plan-side-by-side";
inline constexpr const char* kStepOverheadRecord = "step-overhead";
inline constexpr const char* kStageOverheadRecord = "stage-overhead";
// A copy of some bytes between the host and a device.
inline constexpr const char* kCopyRecord = "copy";
// A kernel measured a second time after the search chose it (MeasuredCosts::confirmed_cost_ms).
inline constexpr const char* kConfirmationRecord = "confirmation";

// A record's key and the text stored beside it.
struct RecordKey {
  std::string key, text;
};

// The key of a placement's latency: the model hash, the budget, then each candidate's
// backend@version, variant, threads and nodes (sorted, so the order of a placement does not
// matter), and the schedule's text ("" = sequential).
RecordKey plan_record_key(const Graph& graph, const Placement& placement,
                          const std::string& schedule_text, const char* kind,
                          const Hardware& machine);
RecordKey step_overhead_key(const Hardware& machine);
RecordKey stage_overhead_key(const Hardware& machine);
// `machine` names the device (with_devices).
RecordKey copy_key(const Hardware& machine, const std::string& device, bool to_host, size_t bytes);

// The record under `key`, or `measure()`'s (with the seconds it took, plus `spent_before_s`:
// work done for this record before the call, which a re-tune finding it is charged too),
// stored first.
CostRecord find_or_measure(CostDb& db, const RecordKey& key, const char* kind,
                           const Hardware& machine, const std::function<CostRecord()>& measure,
                           double spent_before_s = 0);

}  // namespace collage
