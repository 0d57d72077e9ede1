#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "collage/error.h"

namespace collage {
namespace {

constexpr size_t kAlignment = 64;

size_t align_up(size_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

// The request at the end of r's share_with chain.
size_t root_of(const std::vector<BufferRequest>& requests, size_t r) {
  for (size_t hops = 0; requests[r].share_with >= 0; ++hops) {
    const int next = requests[r].share_with;
    if (static_cast<size_t>(next) >= requests.size() || hops == requests.size())
      fail(ErrorKind::kInternal,
           "memory plan: request {} shares with {}, out of range or in a cycle", r, next);
    r = static_cast<size_t>(next);
  }
  return r;
}

// Greedy best-fit of `requests` (none shared) by decreasing size.
MemoryPlan place(const std::vector<BufferRequest>& requests) {
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

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  // Each chain of shared requests is placed as one block: the largest of its sizes, over
  // the union of its lifetimes.
  std::vector<size_t> block_of(requests.size());
  std::vector<BufferRequest> blocks;
  std::vector<size_t> block_of_root(requests.size(), SIZE_MAX);
  for (size_t r = 0; r < requests.size(); ++r) {
    const size_t root = root_of(requests, r);
    if (block_of_root[root] == SIZE_MAX) {
      block_of_root[root] = blocks.size();
      blocks.push_back({requests[r].bytes, requests[r].first_step, requests[r].last_step, -1});
    }
    BufferRequest& b = blocks[block_of_root[root]];
    b.bytes = std::max(b.bytes, requests[r].bytes);
    b.first_step = std::min(b.first_step, requests[r].first_step);
    b.last_step = std::max(b.last_step, requests[r].last_step);
    block_of[r] = block_of_root[root];
  }
  MemoryPlan placed = place(blocks);
  MemoryPlan plan;
  plan.arena_bytes = placed.arena_bytes;
  for (size_t r = 0; r < requests.size(); ++r) plan.offsets.push_back(placed.offsets[block_of[r]]);
  return plan;
}

}  // namespace collage
