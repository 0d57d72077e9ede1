#include "search/plan_records.h"

#include <algorithm>
#include <chrono>

#include "collage/plan.h"

namespace collage {

RecordKey plan_record_key(const Graph& graph, const Placement& placement,
                          const std::string& schedule_text, const char* kind,
                          const Hardware& machine) {
  std::vector<std::string> parts;
  for (const Candidate& c : placement) {
    std::string part = c.backend->name() + "@" + c.backend->version();
    // Default variants and the full budget keep the text of plans keyed before variants and
    // thread shares existed.
    if (!c.variant.empty()) part += "/" + c.variant;
    if (c.threads != machine.threads) part += " x" + std::to_string(c.threads);
    part += ":";
    for (NodeId n : c.nodes) part += std::to_string(n) + ",";
    parts.push_back(std::move(part));
  }
  std::sort(parts.begin(), parts.end());
  std::string text =
      "plan " + model_hash(graph) + " threads " + std::to_string(machine.threads) + "\n";
  for (const std::string& p : parts) text += p + "\n";
  if (!schedule_text.empty()) text += "schedule " + schedule_text + "\n";
  text += kTimingConditionsMark;
  // A plan with device steps was timed with those devices.
  std::string key =
      CostDb::make_key(text, kind, "", with_devices(machine, devices_of(placement)).fingerprint());
  return {std::move(key), std::move(text)};
}

RecordKey step_overhead_key(const Hardware& machine) {
  const char* what = "executor step overhead";
  return {CostDb::make_key(what, kStepOverheadRecord, "", machine.fingerprint()), what};
}

RecordKey stage_overhead_key(const Hardware& machine) {
  const char* what = "executor stage hand-off";
  return {CostDb::make_key(what, kStageOverheadRecord, "", machine.fingerprint()), what};
}

RecordKey copy_key(const Hardware& machine, const std::string& device, bool to_host, size_t bytes) {
  std::string what = to_host ? fmt::format("copy {} bytes {} -> host", bytes, device)
                             : fmt::format("copy {} bytes host -> {}", bytes, device);
  return {CostDb::make_key(what, kCopyRecord, "", machine.fingerprint()), what};
}

CostRecord find_or_measure(CostDb& db, const RecordKey& key, const char* kind,
                           const Hardware& machine, const std::function<CostRecord()>& measure,
                           double spent_before_s) {
  if (std::optional<CostRecord> hit = db.find(key.key)) return *hit;
  auto start = std::chrono::steady_clock::now();
  CostRecord record = measure();
  record.spent_s = spent_before_s +
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return db.put(key.key, kind, machine.fingerprint(), key.text, record);
}

}  // namespace collage
