// GoogleTest helpers every backend's unit tests use: compare a backend with reference on a
// whole graph, the ErrorKind a compile throws, random sizes, and the node sets matched.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "graph_builder.h"

namespace collage::testing {

// Compiles the whole graph on `backend` and compares with reference (tolerance_ratio <= 1).
inline void expect_like_reference(Backend& backend, const Graph& g, const std::string& what,
                                  uint64_t seed = 3) {
  SCOPED_TRACE(backend.name() + ": " + what);
  auto [got, want] = run_backend_and_reference(backend, g, seed);
  EXPECT_LE(tolerance_ratio(got, want), 1.0) << backend.name() << ": " << what;
}

// The kind of Error compile() throws; kInternal when it compiled (never what a test expects).
inline ErrorKind compile_error(Backend& backend, const Graph& g) {
  try {
    backend.compile(g, test_options());
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;
}

// compile() must refuse `g` as kUnsupported (the partitioner then skips the match), with
// `needle` in its message when one is given.
inline void expect_unsupported(Backend& backend, const Graph& g, const std::string& what,
                               const std::string& needle = "") {
  try {
    backend.compile(g, test_options());
    ADD_FAILURE() << backend.name() << ": " << what << ": compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << what << ": " << e.what();
    if (!needle.empty())
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
  }
}

// Uniform in [lo, hi].
inline int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Whether `backend` proposes exactly the nodes producing `outputs_of` as one match.
inline bool has_match(const Backend& backend, const Graph& g,
                      const std::vector<ValueId>& outputs_of) {
  std::vector<NodeId> want;
  for (ValueId v : outputs_of) want.push_back(g.value(v).producer);
  std::sort(want.begin(), want.end());
  for (const Match& m : find_matches(g, backend))
    if (m.nodes == want) return true;
  return false;
}

// The node-name sets of every match `backend` finds in `g`.
inline std::vector<std::set<std::string>> match_op_sets(const Backend& backend, const Graph& g) {
  std::vector<std::set<std::string>> out;
  for (const Match& m : find_matches(g, backend)) {
    std::set<std::string> names;
    for (NodeId n : m.nodes) names.insert(g.node(n).name);
    out.push_back(names);
  }
  return out;
}

}  // namespace collage::testing
