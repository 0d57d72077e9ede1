#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace collage {
namespace {

size_t align_up(size_t n) {
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });

  struct Placed {
    size_t offset, bytes, request;
  };
  std::vector<Placed> placed;
  for (size_t r : order) {
    const size_t bytes = align_up(std::max<size_t>(requests[r].bytes, 1));
    // Blocks already placed whose lifetime overlaps ours, by offset: we take the smallest
    // gap between them that fits.
    std::vector<Placed> conflicts;
    for (const auto& p : placed)
      if (lifetimes_overlap(requests[p.request], requests[r])) conflicts.push_back(p);
    std::sort(conflicts.begin(), conflicts.end(),
              [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& c : conflicts) {
      if (c.offset >= cursor + bytes && c.offset - cursor < best_gap) {
        best = cursor;
        best_gap = c.offset - cursor;
      }
      cursor = std::max(cursor, c.offset + c.bytes);
    }
    if (best == SIZE_MAX) best = cursor;
    placed.push_back({best, bytes, r});
    plan.offsets[r] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + bytes);
  }
  return plan;
}

}  // namespace collage
