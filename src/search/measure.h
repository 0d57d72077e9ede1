// Measures what a candidate (node set, backend) costs on this machine: compile it as a
// standalone kernel, feed random inputs of the right shapes (constants keep their real
// values), check its outputs once against reference, warm up, repeat until the spread is
// small or the per-candidate budget is spent, keep the median. Results go through the cost
// database, so nothing known is measured twice. A candidate that fails to compile, throws
// or computes a wrong result costs +inf with the reason recorded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "search/cost_db.h"
#include "search/hardware.h"

namespace collage {

class IsolatedWorker;

struct MeasureOptions {
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 100;
  double max_spread = 0.03;  // stop when the interquartile range is this fraction of the median
  double budget_ms = 1500;   // per candidate, warm-up and verification excluded
  bool verify = true;
  double rtol = 1e-3;
  double atol_fraction = 1e-4;  // atol = this x max|reference|: scale-free absolute slack
  // Bytes read between timed runs (0: none). Inside a model, the rest of the model runs
  // between two calls of a kernel and evicts its weights from the caches when the model is
  // bigger than they are: BERT-base's 9 MiB matmuls ran 1.2x slower there than when timed
  // back to back. Reading about what the rest of the model reads (cache_pressure_bytes)
  // leaves an LRU cache of any size as the model would, so the sum of the costs predicts
  // the model. Part of the cost key: the same kernel costs more in a bigger model.
  size_t evict_bytes = 0;
};

// The eviction that makes a candidate's timing match its life inside `model`: the model's
// constant bytes (the traffic between two calls of one kernel), rounded up to a power of
// two MiB so that models of similar size share costs, capped at 64 MiB (more than the
// last-level cache two cores share); 0 below 1 MiB (the whole model stays in cache).
// Measured here, predicted vs in-model: BERT-base -20% back to back, -6% with eviction;
// MobileNetV2's onednn-graph plan -22% and +2%.
size_t cache_pressure_bytes(const Graph& model);

struct MeasureResult {
  CostRecord record;
  bool cache_hit = false;
};

class Measurer {
 public:
  Measurer(CostDb* db, Hardware hardware, MeasureOptions options);

  MeasureResult measure(const Graph& model, const std::vector<NodeId>& nodes, Backend& backend);
  // Times an already compiled kernel on `inputs`: the median in milliseconds.
  double time_kernel(Kernel& kernel, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& outputs) const;
  const Hardware& hardware() const { return hardware_; }
  // Measures uncached candidates in `worker` (not owned; null: in this process), so a
  // kernel that crashes or hangs costs +inf instead of taking the caller down.
  void set_isolation(IsolatedWorker* worker) { isolated_ = worker; }

 private:
  // Reads the eviction buffer, then the kernel's inputs and outputs.
  void evict_caches(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const;
  CostRecord measure_uncached(const Graph& subgraph, const std::string& canonical,
                              Backend& backend);
  const std::vector<Tensor>& reference_outputs(const Graph& subgraph, const std::string& canonical,
                                               const std::vector<Tensor>& inputs);

  CostDb* db_;
  Hardware hardware_;
  MeasureOptions options_;
  static constexpr size_t kReferenceCacheEntries = 4;
  std::map<std::string, std::vector<Tensor>> reference_cache_;  // by canonical text
  IsolatedWorker* isolated_ = nullptr;
  std::vector<unsigned char> eviction_buffer_;  // options_.evict_bytes, touched once
};

// The fixed cost of one executor step on this machine (dispatch, argument passing), in
// milliseconds: measured with a chain of trivial kernels. The paper hand-tuned it (0.01 ms).
double measure_step_overhead_ms();

}  // namespace collage
