// Running a model: a Session owns the imported graph, the compiled kernels and one
// arena for every intermediate value, allocated and touched once when the session is
// made, so run() allocates nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collage/graph.h"
#include "collage/model.h"
#include "collage/plan.h"

namespace collage {

struct SessionOptions {
  LoadOptions load;
  // Threads the session runs with (0 = every core). A plan's groups run with the counts
  // the plan gives them, at most this many.
  int threads = 0;
  // Run every node this backend can take on it and the rest on the fallback backend
  // (reference); "" = everything on the fallback. "NAME/VARIANT" builds each of its kernels
  // as that variant where the backend offers it (Backend::variants), as its default elsewhere
  // (e.g. "onednn/winograd").
  std::string backend;
  // With `backend`: a compile error other than an honest refusal (kUnsupported) fails the
  // session instead of falling back (with a warning) to the fallback: for tests of a backend,
  // which must not pass on the fallback's results (`collage run --backend NAME --strict`).
  bool strict = false;
};

struct RunStats {
  double milliseconds = 0;
};

class Executor;

// When a step of a run ran, for profiles and timelines.
struct StepTiming {
  double start_ms = 0, end_ms = 0;  // since the run began
  int worker = 0;                   // 0 = the calling thread, k = the worker of lane k
};

class Session {
 public:
  Session(Graph graph, const SessionOptions& options);
  // Runs the placement `plan` (from `collage tune`); refuses a plan made for another model,
  // warns for one tuned on another machine. options.backend is ignored.
  Session(Graph graph, const Plan& plan, const SessionOptions& options);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  static Session from_file(const std::string& path, const SessionOptions& options = {});

  const Graph& graph() const { return *graph_; }
  // Inputs in graph-input order, with exactly the inferred shapes and dtypes. Returns
  // owning copies of the outputs, in graph-output order. The inputs are read, never written;
  // one of 1 MiB or more (64-byte aligned) is read where it lies rather than copied, so it
  // must not change while run() runs.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // Runs without copying outputs out of the arena: for timing loops. The returned views
  // are valid until the next run.
  std::vector<Tensor> run_views(const std::vector<Tensor>& inputs);
  // run_views that also records when each step ran (one entry per plan().groups entry, in
  // order; see runtime/executor.h).
  std::vector<Tensor> run_profiled(const std::vector<Tensor>& inputs,
                                   std::vector<StepTiming>& timings);
  // Bytes of the intermediate-value arena (after liveness-based reuse).
  size_t arena_bytes() const;
  // How many kernels (steps) one run launches, and on which backend each node runs.
  size_t num_steps() const;
  std::vector<std::string> node_backends() const;
  // The placement this session runs, as a plan (no costs).
  Plan plan() const;
  int threads() const { return threads_; }

 private:
  int threads_ = 1;
  // Held by pointer: the executor keeps references into the graph, which must not move.
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Executor> executor_;
};

// Random inputs for a graph (uniform floats in [-1, 1), small non-negative ints),
// reproducible from `seed`.
std::vector<Tensor> random_inputs(const Graph& graph, uint64_t seed = 1);

}  // namespace collage
