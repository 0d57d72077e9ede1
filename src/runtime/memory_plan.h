// Assigns every intermediate value an offset in one arena so that values whose lifetimes
// overlap never share bytes. Lifetimes are step intervals [first_step, last_step].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collage {

struct BufferRequest {
  size_t bytes = 0;
  int first_step = 0;  // written by this step (-1: before the first step, e.g. graph inputs)
  int last_step = 0;   // last read by this step (INT32_MAX-ish for graph outputs)
};

// Where every planned buffer starts: an arena allocated at this alignment places each there.
inline constexpr size_t kArenaAlignment = 64;

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request, kArenaAlignment-aligned
  size_t arena_bytes = 0;
};

// Greedy best-fit by decreasing size: simple, and within a few percent of optimal on CNN
// and transformer graphs (their lifetimes are short chains).
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace collage
