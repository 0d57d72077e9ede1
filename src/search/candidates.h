// Which backends a tuning uses, and every candidate they propose: each match of each
// backend's patterns and fusion rules, in each variant the backend builds for it, plus a
// one-node candidate on the fallback for every node (so a cover always exists).
#pragma once

#include <vector>

#include "collage/tune.h"
#include "runtime/candidate.h"

namespace collage {

// The fallback first, then the requested backends (all available ones when none are named).
// Throws Error(kInvalidArgument) for an unknown or unavailable backend.
std::vector<Backend*> select_backends(const std::vector<std::string>& names);

// Every candidate of `backends` in `graph`, each for `threads` threads.
std::vector<Candidate> enumerate_candidates(const Graph& graph,
                                            const std::vector<Backend*>& backends, int threads);

}  // namespace collage
