// GoogleTest helpers every backend's unit tests use: compare a backend with reference on a
// whole graph (with the project's one comparison, util/compare.h), the ErrorKind a compile
// throws, random sizes, and the node sets matched.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "collage/model.h"
#include "collage/session.h"
#include "graph_builder.h"
#include "util/compare.h"

namespace collage::testing {

// Whether `got` matches `want` by the comparison the tuner checks every kernel with
// (util/compare.h; by default at its backend-vs-reference tolerance): NaN matches only NaN,
// inf only the same inf, so a kernel computing NaN fails. The failure says what differs.
inline ::testing::AssertionResult outputs_match(
    const std::vector<Tensor>& got, const std::vector<Tensor>& want,
    const Tolerance& tolerance = Tolerance::backend_vs_reference()) {
  const std::string diff = compare_outputs(got, want, tolerance);
  if (diff.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff;
}

// Compiles the whole graph on `backend` and compares it with reference on the same inputs.
inline ::testing::AssertionResult backend_matches_reference(
    Backend& backend, const Graph& g, uint64_t seed = 3,
    const Tolerance& tolerance = Tolerance::backend_vs_reference()) {
  auto [got, want] = run_backend_and_reference(backend, g, seed);
  return outputs_match(got, want, tolerance);
}

inline void expect_like_reference(Backend& backend, const Graph& g, const std::string& what,
                                  uint64_t seed = 3) {
  EXPECT_TRUE(backend_matches_reference(backend, g, seed)) << backend.name() << ": " << what;
}

// The same on given inputs (where random ones would not do: indices in range, masks).
inline void expect_like_reference(Backend& backend, const Graph& g,
                                  const std::vector<Tensor>& inputs, const std::string& what) {
  auto [got, want] = run_backend_and_reference(backend, g, inputs);
  EXPECT_TRUE(outputs_match(got, want)) << backend.name() << ": " << what;
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
    if (!needle.empty()) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
  }
}

// Every available backend that computes on the host, but the fallback.
inline std::vector<std::string> host_backends() {
  std::vector<std::string> names;
  for (Backend* b : BackendRegistry::global().all())
    if (!BackendRegistry::global().is_fallback(*b) && !b->device() && b->available())
      names.push_back(b->name());
  return names;
}

// Runs `g` in a Session where `backend` takes the nodes it can and the fallback the rest
// (strict: a compile error other than a refusal fails, as `collage run --backend NAME
// --strict`), on `threads`, and expects `want` (reference's outputs on `inputs`). Returns
// the nodes left to the fallback. The inputs must come back unchanged: the steps read them
// where the caller holds them (executor.h), so a kernel writing its input would corrupt the
// caller's data.
inline std::vector<NodeId> expect_session_like_reference(const std::string& backend, const Graph& g,
                                                         int threads,
                                                         const std::vector<Tensor>& inputs,
                                                         const std::vector<Tensor>& want,
                                                         const std::string& what) {
  SessionOptions options;
  options.backend = backend;
  options.strict = true;
  options.threads = threads;
  try {
    Session session(g, options);
    std::vector<Tensor> before;
    for (const Tensor& t : inputs) before.push_back(t.clone());
    EXPECT_TRUE(outputs_match(session.run(inputs), want))
        << backend << ", " << threads << " threads, " << what;
    EXPECT_TRUE(outputs_match(inputs, before, Tolerance{0, 0, 0}))
        << backend << ", " << threads << " threads, " << what << ": an input was written";
    const std::string fallback = BackendRegistry::global().fallback().name();
    const std::vector<std::string> placed = session.node_backends();
    std::vector<NodeId> left;
    for (size_t n = 0; n < placed.size(); ++n)
      if (placed[n] == fallback) left.push_back(static_cast<NodeId>(n));
    return left;
  } catch (const std::exception& e) {
    ADD_FAILURE() << backend << ", " << threads << " threads, " << what << ": " << e.what();
    return {};
  }
}

// `g` written as ONNX and read back, so that the import passes (identity removal, constant
// and BatchNorm folding, dead code) run on it, still computes `want` (its outputs on
// `inputs`): on reference, and on `backend` as expect_session_like_reference runs it.
inline void expect_onnx_round_trip_like_reference(const Graph& g, const std::string& backend,
                                                  const std::vector<Tensor>& inputs,
                                                  const std::vector<Tensor>& want,
                                                  const std::string& what) {
  const Graph loaded = load_model_from_bytes(model_to_bytes(g), "");
  EXPECT_TRUE(outputs_match(Session(loaded, SessionOptions{}).run(inputs), want))
      << "reference, " << what << " through ONNX";
  expect_session_like_reference(backend, loaded, 2, inputs, want, what + " through ONNX");
}

// How many random graphs a test runs (of each kind): COLLAGE_RANDOM_GRAPHS when set, else
// `otherwise`.
inline int random_graph_count(int otherwise) {
  const char* env = std::getenv("COLLAGE_RANDOM_GRAPHS");
  return env ? std::max(1, std::atoi(env)) : otherwise;
}

// Sets an environment variable for one scope and restores what it was (or unsets it), also
// when an ASSERT leaves the test early.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) saved_ = old;
    setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (saved_)
      setenv(name_.c_str(), saved_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// COLLAGE_CACHE_DIR pointed at an empty folder of the test's own for one scope, the folder
// removed after (an ASSERT that ends the test early included): kernel and lane caches that
// no other test or earlier run has filled.
class TempCacheDir {
 public:
  explicit TempCacheDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() /
              ("collage-" + tag + "-" + std::to_string(::getpid()))),
        env_("COLLAGE_CACHE_DIR", (std::filesystem::remove_all(path_), path_.string())) {}
  ~TempCacheDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempCacheDir(const TempCacheDir&) = delete;
  TempCacheDir& operator=(const TempCacheDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  ScopedEnv env_;
};

// A cost-DB file of the test's own, absent before and removed after with its companions
// (an ASSERT that ends the test early included).
class TempCostDb {
 public:
  explicit TempCostDb(const std::string& tag)
      : path_((std::filesystem::temp_directory_path() /
               ("collage_" + tag + "_" + std::to_string(::getpid()) + ".db"))
                  .string()) {
    remove();
  }
  ~TempCostDb() { remove(); }
  TempCostDb(const TempCostDb&) = delete;
  TempCostDb& operator=(const TempCostDb&) = delete;
  const std::string& path() const { return path_; }

 private:
  void remove() const {
    for (const char* suffix : {"", "-wal", "-shm", ".lock"})
      std::filesystem::remove(path_ + suffix);
  }
  std::string path_;
};

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

// Every match `backend` finds in `g`, extracted as the tuner extracts a candidate, compiled
// and run against reference: a pattern table proposes only what its compile function builds
// right (a proposal that fails to compile is a failed candidate in every tune of a model
// that has it). The failure names the match's nodes and what went wrong.
inline ::testing::AssertionResult every_match_runs_like_reference(Backend& backend,
                                                                  const Graph& g) {
  for (const Match& m : find_matches(g, backend)) {
    std::string nodes;
    for (NodeId n : m.nodes) nodes += (nodes.empty() ? "" : ", ") + g.node(n).name;
    try {
      ::testing::AssertionResult same =
          backend_matches_reference(backend, extract_subgraph(g, m.nodes));
      if (!same) return same << " (" << backend.name() << " match {" << nodes << "})";
    } catch (const Error& e) {
      return ::testing::AssertionFailure()
             << backend.name() << " match {" << nodes << "} does not run: " << e.what();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace collage::testing
