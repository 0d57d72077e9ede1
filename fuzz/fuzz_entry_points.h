// The entry points the libFuzzer targets drive, shared with the replay test
// (tests/robustness/fuzz_regression_test.cc) so a saved crash input goes through exactly the
// code that found it. Each throws only collage::Error for bad input; anything else escaping
// (another exception, a crash, a sanitizer report) is a bug.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "collage/backend.h"
#include "collage/error.h"
#include "collage/model.h"
#include "collage/plan.h"
#include "collage/session.h"
#include "models/zoo.h"
#include "runtime/graph_kernel.h"

namespace collage::fuzz {

// Small enough that an oversized initializer or inferred value is refused with kLimit long
// before libFuzzer's -rss_limit_mb / malloc limit would call it a crash.
inline LoadOptions fuzz_load_options() {
  LoadOptions options;
  options.max_tensor_bytes = int64_t{64} << 20;
  return options;
}

// Model loader target: parse + check + shape inference + constant folding, then the hash a
// plan is checked with, then a save/load round trip (save_model promises load_model reads
// its output back unchanged, so a failure there is a bug even when it is an Error).
inline void run_model_input(const std::string& bytes) {
  Graph graph = load_model_from_bytes(bytes, "", fuzz_load_options());
  std::string hash = model_hash(graph);
  std::string saved = model_to_bytes(graph);
  Graph reloaded;
  try {
    reloaded = load_model_from_bytes(saved, "", fuzz_load_options());
  } catch (const Error& e) {
    fail(ErrorKind::kInternal, "a loaded model does not load again after saving: {}", e.what());
  }
  if (model_hash(reloaded) != hash)
    fail(ErrorKind::kInternal, "a loaded model changes when saved and loaded again");
}

// The built-in backends the fuzz build leaves out, stood in for by reference kernels under
// their names, so plans tuned by a full build (which name them) are valid seeds and their
// non-reference groups reach the grouping checks and subgraph extraction.
class StandInBackend : public Backend {
 public:
  explicit StandInBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "fuzz-stand-in"; }
  std::vector<PatternEntry> patterns() const override { return {}; }
  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions&) override {
    return std::make_unique<GraphKernel>(subgraph, compile_reference_node);
  }

 private:
  std::string name_;
};

inline void register_stand_in_backends() {
  for (const char* name :
       {"blas", "halide", "onednn", "torch", "torch-graph", "xnnpack", "xnnpack-graph"})
    if (!BackendRegistry::global().find(name))
      BackendRegistry::global().add(std::make_shared<StandInBackend>(name));
}

// The models plans are fuzzed against: the zoo's smallest, imported the way the CLI imports
// the file `collage zoo NAME -o F` writes, so node names and hashes match tuned plans.
inline const std::vector<std::string>& plan_model_names() {
  static const std::vector<std::string> names = {"dcgan-tiny", "resnet3d-tiny", "nasnet-tiny",
                                                 "mobilenet-tiny"};
  return names;
}

inline const std::vector<Graph>& plan_models() {
  static const std::vector<Graph> graphs = [] {
    register_stand_in_backends();
    std::vector<Graph> result;
    for (const std::string& name : plan_model_names())
      result.push_back(
          load_model_from_bytes(model_to_bytes(models::build_zoo_model(name)), "", {}));
    return result;
  }();
  return graphs;
}

// Plan target: byte 0 picks the model, the rest is the plan's JSON, checked and compiled the
// way `collage run --plan` does (Session's plan constructor), without running it.
inline void run_plan_input(const std::string& bytes) {
  const std::vector<Graph>& graphs = plan_models();
  if (bytes.empty()) return;
  const Graph& graph = graphs[static_cast<uint8_t>(bytes[0]) % graphs.size()];
  Plan plan = Plan::from_json(bytes.substr(1));
  SessionOptions options;
  options.threads = 1;
  Session session(graph, plan, options);
  // Round trip: the plan the session reports must be accepted for the same graph.
  Session again(graph, Plan::from_json(session.plan().to_json()), options);
}

// Seeds for the plan target (besides tuned plans): for each model, byte + JSON of plans that
// put runs of `chunk` consecutive nodes on a stand-in backend (consecutive in topological
// order, so always acyclic), chunk 1 being all-reference.
inline std::vector<std::string> plan_seed_inputs() {
  std::vector<std::string> seeds;
  const std::vector<Graph>& graphs = plan_models();
  for (size_t m = 0; m < graphs.size(); ++m) {
    for (size_t chunk : {1, 2, 5, 1000}) {
      Plan plan;
      plan.model_hash = model_hash(graphs[m]);
      plan.optimizer = "fuzz-seed";
      for (size_t n = 0; n < graphs[m].num_nodes(); n += chunk) {
        PlanGroup group;
        group.backend = chunk == 1 ? "reference" : (n / chunk) % 2 ? "onednn" : "xnnpack";
        for (size_t k = n; k < std::min(n + chunk, graphs[m].num_nodes()); ++k)
          group.nodes.push_back(graphs[m].node(static_cast<NodeId>(k)).name);
        plan.groups.push_back(std::move(group));
      }
      seeds.push_back(std::string(1, static_cast<char>(m)) + plan.to_json());
    }
  }
  return seeds;
}

}  // namespace collage::fuzz
