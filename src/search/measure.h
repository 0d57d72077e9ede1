// Measures what a candidate (node set, backend) costs on this machine: compile it as a
// standalone kernel, feed random inputs of the right shapes (constants keep their real
// values), check its outputs once against reference, warm up, repeat until the spread is
// small or the per-candidate budget is spent, keep the median. Results go through the cost
// database, so nothing known is measured twice. A candidate that fails to compile, throws
// or computes a wrong result costs +inf with the reason recorded.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "plan/hardware.h"
#include "runtime/candidate.h"
#include "search/cost_db.h"
#include "util/cpu_info.h"

namespace collage {

class IsolatedWorker;

struct MeasureOptions {
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 100;
  double max_spread = 0.03;  // stop when the interquartile range is this fraction of the median
  double budget_ms = 1500;   // per candidate, warm-up and verification excluded
  // Check each kernel's outputs against reference once, with the project's rule for its
  // backend's precision (Tolerance::backend_vs_reference).
  bool verify = true;
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
// two MiB so that models of similar size share costs; 0 below 1 MiB (the whole model stays
// in cache). Capped at 64 MiB (past the private caches) while the model fits in half the
// `last_level_cache_bytes` (64 MiB is then all it takes: the last level keeps the model
// between runs, as it does in the model); for a bigger model, at twice the last level
// (rounded up alike), which evicts it (one pass of just the capacity leaves part of the old
// lines in a cache that is not strictly LRU; half, because activations, other processes
// and an imperfect replacement share it). 0 = unknown: 64 MiB.
// Measured here, predicted vs in-model: BERT-base -20% back to back, -6% with eviction;
// MobileNetV2's onednn-graph plan -22% and +2%. The cap was a fixed 64 MiB until a machine
// with a 480 MiB L3 (Xeon, 2 cores of it lent): 64 MiB is read from L3 there (1.4 ms, 45
// GB/s; 512 MiB: 22 ms) and evicted nothing, so GPT-2's kernels (~500 MB of weights) ran
// 1.23x slower in the model than alone and its onednn plan's prediction was 15 % low;
// with 512 MiB read, +0.5 %; BERT-base's (440 MB) -12 % and -5.8 %. Inception-v3's (95 MB)
// cold tune took 385 s instead of 265 with 128 MiB read, to the same prediction: hence
// 64 MiB for models the last level holds.
size_t cache_pressure_bytes(const Graph& model,
                            size_t last_level_cache_bytes = this_cpu().last_level_cache_bytes);
// The bytes of `constant` one run of `model` reads: all of it, except a table only Gathers
// read (an embedding), of which each Gather reads its indices' rows. Counted whole, the zoo's
// BERT-tiny embedding made its candidates be timed after a 4 MiB read where a model run reads
// under 2: its one-region plan ran 0.90x its cost alone, the prediction 14 % high (1.05x and
// -5 % with 2 MiB).
size_t constant_bytes_read_per_run(const Graph& model, ValueId constant);

struct MeasureResult {
  CostRecord record;
  bool cache_hit = false;
};

// The cost-DB key of a kernel measurement: the subgraph's canonical text (+ the eviction it
// was timed with), the backend and its variant, the backend's version, and the machine with
// the kernel's thread count. Returns {key, the text stored beside it}.
struct KernelKey {
  std::string key, text;
};
KernelKey kernel_key(const Graph& subgraph, const Candidate& candidate, const Hardware& machine,
                     size_t evict_bytes);

// A kernel measurement made ready: the candidate's standalone subgraph and its record's key,
// label (backend[/variant]) and hardware (the machine with the kernel's thread count).
struct KernelJob {
  Graph subgraph;
  KernelKey key;
  std::string label;
  Hardware hardware;
};
KernelJob kernel_job(const Graph& model, const Candidate& candidate, const Hardware& machine,
                     size_t evict_bytes);

class Measurer {
 public:
  // `machine`: this machine; each measurement is keyed with its candidate's thread count.
  Measurer(CostDb* db, Hardware machine, MeasureOptions options);

  // `candidate.nodes` of `model`, built and run as the candidate says.
  // `abandon_above_ms`: see time_kernel.
  MeasureResult measure(const Graph& model, const Candidate& candidate,
                        double abandon_above_ms = kNeverAbandon);
  // Measures `job` (made from `candidate`) now, whatever the cost DB holds, and stores
  // nothing (the caller claimed the key in the job queue and stores the record).
  CostRecord measure_now(const KernelJob& job, const Candidate& candidate,
                         double abandon_above_ms = kNeverAbandon);
  // Times an already compiled kernel on `inputs` with `threads`: the median in milliseconds.
  // A device kernel (`device` not null) gets tensors in device memory and is timed until
  // the device is done. Timing stops after kAbandonSamples samples when even the fastest of
  // them is above `abandon_above_ms` (the caller knows a kernel of the same nodes that much
  // faster, so this one cannot be chosen over it): the cost is then their median, an honest
  // but coarser number, where a full timing takes up to 15 samples with an eviction before
  // each (Inception-v3's cold measuring phase 208 -> 194 s, GoogLeNet's 120 -> 107 s).
  double time_kernel(Kernel& kernel, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& outputs, int threads, Device* device = nullptr,
                     double abandon_above_ms = kNeverAbandon) const;
  static constexpr double kNeverAbandon = std::numeric_limits<double>::infinity();
  static constexpr int kAbandonSamples = 3;
  const Hardware& hardware() const { return hardware_; }
  const MeasureOptions& options() const { return options_; }
  // Measures uncached candidates in `worker` (not owned; null: in this process), so a
  // kernel that crashes or hangs costs +inf instead of taking the caller down.
  void set_isolation(IsolatedWorker* worker) { isolated_ = worker; }

 private:
  // Reads the eviction buffer, then the kernel's inputs and outputs.
  void evict_caches(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const;
  CostRecord measure_uncached(const Graph& subgraph, const std::string& canonical,
                              const Candidate& candidate, double abandon_above_ms);
  const std::vector<Tensor>& reference_outputs(const Graph& subgraph, const std::string& canonical,
                                               const std::vector<Tensor>& inputs);

  CostDb* db_;
  Hardware hardware_;
  MeasureOptions options_;
  static constexpr size_t kReferenceCacheEntries = 4;
  std::map<std::string, std::vector<Tensor>> reference_cache_;  // by canonical text
  IsolatedWorker* isolated_ = nullptr;
  // Allocates and times the eviction buffer, once.
  void prepare_eviction() const;
  mutable std::vector<unsigned char> eviction_buffer_;  // options_.evict_bytes, touched once
  mutable int evicted_samples_ = 0;                     // most samples with an eviction before each
};

// The fixed cost of one executor step on this machine (dispatch, argument passing), in
// milliseconds, for a session of `threads`: measured with a chain of trivial kernels. The
// paper hand-tuned it (0.01 ms).
double measure_step_overhead_ms(int threads);
// The hand-off of a concurrent stage (LaneWorkers: waking a worker, waiting for it), in
// milliseconds beyond its slowest lane: measured with two-lane stages of trivial kernels
// against the same steps one after another. `step_overhead_ms` is measure_step_overhead_ms's.
double measure_stage_overhead_ms(int threads, double step_overhead_ms);
// One copy of `bytes` between the host and `device` (to the host when `to_host`) as the
// executor makes it, until the device is done: the median of repeated copies, in ms.
double measure_copy_ms(Device& device, bool to_host, size_t bytes);

}  // namespace collage
