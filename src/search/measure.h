// Measures what a candidate (node set, backend) costs on this machine: compile it as a
// standalone kernel, feed random inputs of the right shapes (constants keep their real
// values), check its outputs once against reference, warm up, repeat until the spread is
// small or the per-candidate budget is spent, keep the median. Results go through the cost
// database, so nothing known is measured twice. A candidate that fails to compile, throws
// or computes a wrong result costs +inf with the reason recorded; one whose outputs match
// only within the subgraph's own sensitivity (util/compare.h) is measured, and its record's
// reason starts with kWithinSensitivity.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collage/backend.h"
#include "plan/hardware.h"
#include "runtime/candidate.h"
#include "search/cost_db.h"
#include "util/compare.h"
#include "util/cpu_info.h"

namespace collage {

class IsolatedWorker;

inline constexpr const char* kWithinSensitivity = "matched reference within its own sensitivity: ";

struct MeasureOptions {
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 100;
  double max_spread = 0.03;  // stop when the interquartile range is this fraction of the median
  double budget_ms = 1500;   // per candidate, warm-up and verification excluded
  // Check each kernel's outputs against reference once, with the project's rule for its
  // backend's precision (Tolerance::backend_vs_reference).
  bool verify = true;
};

// The eviction that makes a candidate's timing match its life inside a model: before each
// timed run, read what the rest of the model reads between two calls of the candidate.
// Inside a model, the rest of the model runs between two calls of a kernel and evicts its
// weights from the caches when the model is bigger than they are: BERT-base's 9 MiB matmuls
// ran 1.2x slower there than when timed back to back. Reading about what the rest of the
// model reads leaves an LRU cache of any size as the model would, so the sum of the costs
// predicts the model. Part of the cost key: the same kernel costs more in a bigger model.
//
// The rest, not the whole model (until 2026-11-29 every candidate was timed after a read of
// the whole model's bytes): a region that is most of a model has little or nothing run
// between two of its calls, and a model that fits in the last level stays there run after
// run. DCGAN's one region (14.3 MB) was predicted at 1.382 ms, timed after a 16 MiB read,
// and ran at 1.213 alone (docs/DESIGN.md "Search").
//
// The size: the rest's constant bytes (constant_bytes_read_per_run), rounded up to a power
// of two MiB so that candidates and models of similar size share costs; 0 below 1 MiB (the
// candidate stays in cache). Capped at 64 MiB (past the private caches) while the rest fits
// in half the `last_level_cache_bytes` (64 MiB is then all it takes: the last level keeps
// the model between runs, as it does in the model); for a bigger rest, at twice the last
// level (rounded up alike), which evicts it (one pass of just the capacity leaves part of
// the old lines in a cache that is not strictly LRU; half, because activations, other
// processes and an imperfect replacement share it). Last level 0 = unknown: 64 MiB.
// Measured here, predicted vs in-model: BERT-base -20% back to back, -6% with eviction;
// MobileNetV2's onednn-graph plan -22% and +2%. The cap was a fixed 64 MiB until a machine
// with a 480 MiB L3 (Xeon, 2 cores of it lent): 64 MiB is read from L3 there (1.4 ms, 45
// GB/s; 512 MiB: 22 ms) and evicted nothing, so GPT-2's kernels (~500 MB of weights) ran
// 1.23x slower in the model than alone and its onednn plan's prediction was 15 % low;
// with 512 MiB read, +0.5 %; BERT-base's (440 MB) -12 % and -5.8 %. Inception-v3's (95 MB)
// cold tune took 385 s instead of 265 with 128 MiB read, to the same prediction: hence
// 64 MiB for models the last level holds.
//
// Other kernels run between two calls of any candidate but the whole model, even where the
// rest reads under 1 MiB: most of them on the OpenMP pool that oneDNN, libxsmm and the
// eviction share, whose workers then spin on the cores a kernel of another library's pool
// (XNNPACK's, Halide's) wakes its own workers on. So a timed run of such a candidate follows
// a pass of the OpenMP team over its inputs and outputs (Measurer::evict_caches), the run of
// the whole model as one candidate follows nothing. Until 2026-11-29 a candidate of a tiny
// model (under 1 MiB of constants) was timed back to back: vit-tiny's 4 us XNNPACK MatMuls
// were first sampled right after the `xnnpack` candidate of the same nodes (0.0039 ms),
// confirmed at 0.024 right after oneDNN kernels, and the tuned plans they were chosen into
// ran 0.081-0.086 ms against 0.063 for one without them.
struct BetweenRuns {
  bool other_kernels = false;  // the rest of the model is not empty
  size_t read_bytes = 0;       // what they read: the eviction (0: none)
};

class CachePressure {
 public:
  explicit CachePressure(const Graph& model,
                         size_t last_level_cache_bytes = this_cpu().last_level_cache_bytes);
  // What runs between two timed runs of `nodes` of the model.
  BetweenRuns between_runs(const std::vector<NodeId>& nodes) const;
  // The bytes to read before each timed run of `nodes` of the model (no nodes: the whole
  // model's traffic).
  size_t evict_bytes(const std::vector<NodeId>& nodes) const;

 private:
  size_t rounded(size_t bytes) const;
  const Graph& model_;
  std::vector<size_t> constant_bytes_;  // per value: what one run reads of it (0: not constant)
  size_t total_bytes_ = 0;
  size_t last_level_cache_bytes_;
};

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
// is timed with, CachePressure), the backend and its variant, the backend's version, and the
// machine with the kernel's thread count. Returns {key, the text stored beside it}.
struct KernelKey {
  std::string key, text;
};
KernelKey kernel_key(const Graph& subgraph, const Candidate& candidate, const Hardware& machine,
                     const BetweenRuns& between);

// A kernel measurement made ready: the candidate's standalone subgraph, what runs before each
// timed run (CachePressure), and its record's key, label (backend[/variant]) and hardware
// (the machine with the kernel's thread count).
struct KernelJob {
  Graph subgraph;
  BetweenRuns between;
  KernelKey key;
  std::string label;
  Hardware hardware;
};
KernelJob kernel_job(const Graph& model, const Candidate& candidate, const Hardware& machine,
                     const BetweenRuns& between);

class Measurer {
 public:
  // `machine`: this machine; each measurement is keyed with its candidate's thread count.
  Measurer(CostDb* db, Hardware machine, MeasureOptions options);

  // `candidate.nodes` of `model`, built and run as the candidate says, timed after the
  // eviction CachePressure gives them in `model`. `abandon_above_ms`: see time_kernel.
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
  // each (Inception-v3's cold measuring phase 208 -> 194 s, GoogLeNet's 120 -> 107 s). It
  // stops before the first timed run when kAbandonWarmRuns warm-up runs (back to back, the
  // fastest a kernel runs; one for a kernel slower than kSlowKernelMs, which gets one
  // warm-up run) are all above the bar: the cost is then their median.
  // `between` runs before each timed run of a host kernel (CachePressure; none by default).
  double time_kernel(Kernel& kernel, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& outputs, int threads, Device* device = nullptr,
                     double abandon_above_ms = kNeverAbandon,
                     const BetweenRuns& between = {}) const;
  static constexpr double kNeverAbandon = std::numeric_limits<double>::infinity();
  static constexpr int kAbandonSamples = 3;
  // Timing stops even before the first timed run when this many warm-up runs (back to back,
  // the fastest a kernel runs) are all above `abandon_above_ms`.
  static constexpr size_t kAbandonWarmRuns = 2;
  // A kernel slower than this a run is warmed up and timed with fewer runs (time_kernel).
  static constexpr double kSlowKernelMs = 20;
  const Hardware& hardware() const { return hardware_; }
  const MeasureOptions& options() const { return options_; }
  // Measures uncached candidates in `worker` (not owned; null: in this process), so a
  // kernel that crashes or hangs costs +inf instead of taking the caller down.
  void set_isolation(IsolatedWorker* worker) { isolated_ = worker; }

 private:
  // Reads `bytes` of the eviction buffer, then the kernel's inputs and outputs.
  void evict_caches(size_t bytes, const std::vector<Tensor>& inputs,
                    const std::vector<Tensor>& outputs) const;
  CostRecord measure_uncached(const KernelJob& job, const std::string& canonical,
                              const Candidate& candidate, double abandon_above_ms);
  // The reference backend's outputs for a subgraph, and (made on the first mismatch) its
  // outputs on the inputs scaled by (1 + kSensitivityInputChange): how far the computation
  // itself moves (util/compare.h, compare_allowing_sensitivity).
  struct ReferenceRun {
    std::vector<Tensor> outputs;
    std::optional<std::vector<Tensor>> moved;
  };
  ReferenceRun& reference_run(const Graph& subgraph, const std::string& canonical,
                              const std::vector<Tensor>& inputs);
  // Empty when `outputs` match the reference's within `tol`, or within the subgraph's own
  // sensitivity (then `note` says by how much); else why not.
  std::string check_against_reference(const Graph& subgraph, const std::string& canonical,
                                      const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor>& outputs, const Tolerance& tol,
                                      std::string& note);

  // The random inputs of a candidate of `subgraph` (random_inputs, seed 17), kept for the
  // last subgraphs of the same input dtypes and shapes. The tuner measures a subgraph on
  // every backend in a row; drawing them again for each (a Mersenne twister per element) was
  // 3 % of a cold tune of DeepLabV3-ResNet-50 (perf -a). The kernel runs on copies.
  std::shared_ptr<const std::vector<Tensor>> drawn_inputs(const Graph& subgraph);

  CostDb* db_;
  Hardware hardware_;
  MeasureOptions options_;
  static constexpr size_t kReferenceCacheEntries = 4;
  // By the inputs' dtypes and shapes.
  std::map<std::string, std::shared_ptr<const std::vector<Tensor>>> inputs_cache_;
  // By canonical text and the constants' values (reference_key in measure.cc).
  std::map<std::string, ReferenceRun> reference_cache_;
  IsolatedWorker* isolated_ = nullptr;
  // Grows the eviction buffer to `bytes` where it is smaller (touched and timed once per
  // size: first touches of fresh pages are slow and would be timed), and returns the time an
  // eviction of `bytes` takes, in milliseconds.
  double prepare_eviction(size_t bytes) const;
  // The largest eviction asked for so far: one buffer, of which each eviction reads a part
  // (candidates of one model ask for different sizes; the measure worker serves them all).
  mutable std::vector<unsigned char> eviction_buffer_;
  mutable double eviction_ms_per_byte_ = 0;
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
