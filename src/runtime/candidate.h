// One piece of a placement, the unit carried from a backend's match to the plan: the
// search measures candidates, a placement is a set of disjoint candidates covering the
// graph, the executor runs each as one step, and a plan lists them by node name.
#pragma once

#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/graph.h"

namespace collage {

struct Candidate {
  std::vector<NodeId> nodes;  // sorted
  Backend* backend = nullptr;
  std::string variant;  // one of backend->variants(); "" = its default
  int threads = 1;      // the kernel is compiled for, and runs with, this many threads

  CompileOptions compile_options() const { return {variant, threads}; }
  bool operator==(const Candidate&) const = default;
  // "onednn x2", "onednn/winograd x1": backend, variant (summarised), threads, for messages.
  std::string label() const;
};

// Disjoint candidates; a complete one covers every node of its graph.
using Placement = std::vector<Candidate>;

// The devices the placement's backends run on, each once, in first-use order (empty for a
// host-only placement).
std::vector<const Device*> devices_of(const Placement& placement);

}  // namespace collage
