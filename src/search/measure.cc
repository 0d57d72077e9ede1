#include "search/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>

#include <omp.h>

#include "collage/session.h"
#include "ir/canonical.h"
#include "runtime/device_buffers.h"
#include "runtime/executor.h"
#include "runtime/interleaved_timing.h"
#include "runtime/partitioner.h"
#include "runtime/threads.h"
#include "search/isolated_measurer.h"
#include "util/compare.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// Most samples taken with an eviction before each (see time_kernel).
constexpr int kEvictedSamples = 15;
// The time a candidate's evicted samples may take, each an eviction and a run, which bounds
// them further (to no fewer than MeasureOptions::min_repeats). Evictions alone until
// 2026-12-05: a 512 MiB eviction reads for ~22 ms here, and 15 of them per candidate took
// GPT-2's cold tune from ~2 to 8 minutes; 40, not 100: a 64 MiB eviction read for ~8 ms on
// the 2-core EPYC on 2026-11-27 (8 GB/s), so 100 ms bought 12 samples where 5 give the same
// predictions (Inception-v3's cold tune 371 -> 307 s). The runs too since: the same read
// took 0.8 ms on 2026-12-05 (80 GB/s), so each candidate took 15 samples however long its
// runs. With the runs counted, a region of 5 ms takes 5: the timing in Inception-v3's cold
// measuring phase 88 -> 76 s (a temporary trace; docs/DESIGN.md "Search").
constexpr double kEvictedTimingBudgetMs = 40;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::vector<Tensor> allocate_outputs(const Graph& g) {
  std::vector<Tensor> outs;
  for (ValueId v : g.outputs) outs.emplace_back(g.value(v).dtype, g.value(v).shape);
  return outs;
}

// Per value: the bytes of it one run reads if it is a constant (see constant_bytes_read_per_run),
// in one pass over the nodes.
std::vector<size_t> constant_bytes_read(const Graph& model) {
  const size_t nv = model.num_values();
  std::vector<size_t> rows_read(nv, 0);
  std::vector<bool> read_whole(nv, false);
  for (const Node& node : model.nodes())
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (v == kNoValue || !model.value(v).is_constant() || read_whole[v]) continue;
      // Rows of a table that only Gathers index: each reads its indices' rows, no more. (The
      // axis is read of Gathers only: another op's "axis" may be of another type, and the
      // typed getter throws on that.)
      const Value& table = model.value(v);
      const ValueId indices = node.input(1);
      const int64_t rank = static_cast<int64_t>(table.shape.size());
      int64_t axis = -1;
      if (node.op_type == "Gather" && node.domain.empty() && i == 0 && indices != kNoValue &&
          model.value(indices).shape_known) {
        axis = node.attr_int("axis", 0);
        if (axis < 0) axis += rank;
      }
      if (axis < 0 || axis >= rank || table.shape[axis] <= 0) {
        read_whole[v] = true;
        continue;
      }
      const size_t row = table.constant.nbytes() / static_cast<size_t>(table.shape[axis]);
      rows_read[v] += static_cast<size_t>(shape_numel(model.value(indices).shape)) * row;
    }
  std::vector<size_t> bytes(nv, 0);
  for (size_t v = 0; v < nv; ++v) {
    const Value& value = model.value(static_cast<ValueId>(v));
    if (!value.is_constant()) continue;
    const size_t whole = value.constant.nbytes();
    bytes[v] = read_whole[v] || rows_read[v] == 0 ? whole : std::min(whole, rows_read[v]);
  }
  return bytes;
}

}  // namespace

size_t constant_bytes_read_per_run(const Graph& model, ValueId constant) {
  return constant_bytes_read(model)[constant];
}

CachePressure::CachePressure(const Graph& model, size_t last_level_cache_bytes)
    : model_(model),
      constant_bytes_(constant_bytes_read(model)),
      last_level_cache_bytes_(last_level_cache_bytes) {
  for (size_t bytes : constant_bytes_) total_bytes_ += bytes;
}

BetweenRuns CachePressure::between_runs(const std::vector<NodeId>& nodes) const {
  return {nodes.size() < model_.num_nodes(), evict_bytes(nodes)};
}

size_t CachePressure::evict_bytes(const std::vector<NodeId>& nodes) const {
  // The candidate's own constants, each once (two of its nodes may read one).
  std::vector<ValueId> own;
  for (NodeId n : nodes)
    for (ValueId v : model_.node(n).inputs)
      if (v != kNoValue && constant_bytes_[v] > 0) own.push_back(v);
  std::sort(own.begin(), own.end());
  own.erase(std::unique(own.begin(), own.end()), own.end());
  size_t own_bytes = 0;
  for (ValueId v : own) own_bytes += constant_bytes_[v];
  return rounded(total_bytes_ - own_bytes);
}

size_t CachePressure::rounded(size_t bytes) const {
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes < kMiB) return 0;
  size_t cap = 64 * kMiB;
  if (last_level_cache_bytes_ && 2 * bytes > last_level_cache_bytes_)
    while (cap < 2 * last_level_cache_bytes_) cap *= 2;
  size_t rounded = kMiB;
  while (rounded < bytes && rounded < cap) rounded *= 2;
  return rounded;
}

KernelKey kernel_key(const Graph& subgraph, const Candidate& candidate, const Hardware& machine,
                     const BetweenRuns& between) {
  // Costs timed with other cache states are other measurements (see CachePressure). A
  // gather's positions are not part of the key (ir/canonical.h: cost_text).
  std::string text = cost_text(subgraph);
  if (between.read_bytes)
    text += fmt::format("cache: {} MiB read between runs\n", between.read_bytes >> 20);
  else if (between.other_kernels)
    text += "other kernels between runs\n";
  // The conditions it was timed under (search/cost_db.h): costs timed under others are other
  // measurements.
  text += kTimingConditionsMark;
  // A variant is another way of computing the same nodes: its own measurement. The default
  // variant keeps the plain backend name, so keys from before variants still match.
  std::string backend = candidate.backend->name();
  if (!candidate.variant.empty()) backend += "/" + candidate.variant;
  Hardware hw = with_devices(machine, {candidate.backend->device()});
  hw.threads = candidate.threads;
  return {CostDb::make_key(text, backend, candidate.backend->version(), hw.fingerprint()),
          std::move(text)};
}

Measurer::Measurer(CostDb* db, Hardware machine, MeasureOptions options)
    : db_(db), hardware_(std::move(machine)), options_(options) {}

double Measurer::prepare_eviction(size_t bytes) const {
  if (eviction_buffer_.size() < bytes) {
    // Allocated and written on first use (a tuner whose worker measures never needs it: up
    // to 1 GiB), grown where a bigger eviction is asked for.
    eviction_buffer_.assign(bytes, 1);
    // Timed once per size, after a first pass: how many evicted samples a candidate can afford.
    evict_caches(bytes, {}, {});
    auto t0 = Clock::now();
    evict_caches(bytes, {}, {});
    eviction_ms_per_byte_ = ms_since(t0) / static_cast<double>(bytes);
  }
  return eviction_ms_per_byte_ * static_cast<double>(bytes);
}

void Measurer::evict_caches(size_t bytes, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& outputs) const {
  // On every thread of the pool, each its share, as the model's other kernels would: that
  // evicts every core's private cache, and leaves the pool awake as it is between two
  // kernels of a model (a pool asleep after a long pause costs ~0.1 ms to wake). The
  // inputs and outputs are read last: in a model their producer has just written them and
  // the arena's slots are in constant use.
  constexpr size_t kLine = 64;
  std::vector<const Tensor*> hot;
  for (const Tensor& t : inputs) hot.push_back(&t);
  for (const Tensor& t : outputs) hot.push_back(&t);
  const unsigned char* buffer = eviction_buffer_.data();
  const size_t buffer_lines = std::min(bytes, eviction_buffer_.size()) / kLine;
  unsigned sum = 0;
#pragma omp parallel reduction(+ : sum)
  {
    const size_t threads = omp_get_num_threads(), me = omp_get_thread_num();
    for (size_t i = buffer_lines * me / threads; i < buffer_lines * (me + 1) / threads; ++i)
      sum += buffer[i * kLine];
    for (const Tensor* t : hot) {
      const auto* bytes = static_cast<const unsigned char*>(t->raw());
      const size_t lines = (t->nbytes() + kLine - 1) / kLine;
      for (size_t i = lines * me / threads; i < lines * (me + 1) / threads; ++i)
        sum += bytes[i * kLine];
    }
  }
  // Keeps the reads from being optimised away: an empty asm that takes the sum (the static
  // volatile it used to be stored to drew GCC's set-but-unused warning).
  asm volatile("" : : "r"(sum));
}

KernelJob kernel_job(const Graph& model, const Candidate& candidate, const Hardware& machine,
                     const BetweenRuns& between) {
  KernelJob job;
  job.subgraph = extract_subgraph(model, candidate.nodes);
  job.between = between;
  job.key = kernel_key(job.subgraph, candidate, machine, between);
  job.label = candidate.variant.empty() ? candidate.backend->name()
                                        : candidate.backend->name() + "/" + candidate.variant;
  // The fingerprint names the device too when the backend computes on one (GPU name, driver).
  job.hardware = with_devices(machine, {candidate.backend->device()});
  job.hardware.threads = candidate.threads;
  return job;
}

CostRecord Measurer::measure_now(const KernelJob& job, const Candidate& candidate,
                                 double abandon_above_ms) {
  return isolated_
             ? isolated_->measure(job, candidate, options_, abandon_above_ms)
             : measure_uncached(job, canonical_text(job.subgraph), candidate, abandon_above_ms);
}

MeasureResult Measurer::measure(const Graph& model, const Candidate& candidate,
                                double abandon_above_ms) {
  KernelJob job =
      kernel_job(model, candidate, hardware_, CachePressure(model).between_runs(candidate.nodes));
  if (db_)
    if (auto hit = db_->find(job.key.key)) return {*hit, true};
  CostRecord record = measure_now(job, candidate, abandon_above_ms);
  // Another process may have stored it meanwhile: every user of a key sees the first record.
  if (db_)
    record = db_->put(job.key.key, job.label, job.hardware.fingerprint(), job.key.text, record);
  return {record, false};
}

namespace {

// What reference outputs are cached by: the canonical text, which holds a big constant's
// shape only (a cost does not depend on weight values), and a hash of every constant's
// bytes (outputs do). By the text alone, two convolutions of one shape with other weights
// shared outputs: the second, measured right after the first (a confirmation of the chosen
// plan, a recheck), was compared with the first's outputs and failed as a "wrong result"
// (bench/results/cnn's cost DB of 2026-12-05: a 512->128 1x1 conv + Relu on onednn-graph, a
// torch-graph group and a confirmation, all correct kernels). std::hash, not digest(): that
// FNV-1a loop takes a byte at a time, and a candidate's constants run to megabytes.
std::string reference_key(const Graph& sub, const std::string& canonical) {
  size_t h = 0;
  for (size_t v = 0; v < sub.num_values(); ++v) {
    const Value& value = sub.value(static_cast<ValueId>(v));
    if (!value.is_constant()) continue;
    const Tensor& t = value.constant;
    h = h * 1099511628211ULL ^ std::hash<std::string_view>{}(
                                   std::string_view(static_cast<const char*>(t.raw()), t.nbytes()));
  }
  return fmt::format("{}constants {:016x}\n", canonical, h);
}

// Which of `after` is not `before` byte for byte (a kernel that wrote into its inputs), or "".
std::string written_input(const std::vector<Tensor>& after, const std::vector<Tensor>& before) {
  for (size_t i = 0; i < before.size(); ++i)
    if (std::memcmp(after[i].raw(), before[i].raw(), before[i].nbytes()) != 0)
      return fmt::format("the kernel wrote into its input {} ({})", i,
                         shape_to_string(before[i].shape()));
  return "";
}

// The fallback (reference) backend's outputs for `sub` on `inputs`. Compiled anew each time:
// its kernel may keep references into `sub`, which the caller's job owns.
std::vector<Tensor> run_reference(const Graph& sub, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outs = allocate_outputs(sub);
  BackendRegistry::global().fallback().compile(sub, CompileOptions{})->run(inputs, outs);
  return outs;
}

}  // namespace

std::shared_ptr<const std::vector<Tensor>> Measurer::drawn_inputs(const Graph& sub) {
  std::string signature;
  for (ValueId id : sub.inputs) {
    const Value& v = sub.value(id);
    signature += fmt::format("{}{};", dtype_name(v.dtype), shape_to_string(v.shape));
  }
  auto it = inputs_cache_.find(signature);
  if (it != inputs_cache_.end()) return it->second;
  if (inputs_cache_.size() >= kReferenceCacheEntries) inputs_cache_.clear();
  return inputs_cache_[signature] =
             std::make_shared<const std::vector<Tensor>>(random_inputs(sub, 17));
}

Measurer::ReferenceRun& Measurer::reference_run(const Graph& sub, const std::string& canonical,
                                                const std::vector<Tensor>& inputs) {
  const std::string key = reference_key(sub, canonical);
  auto it = reference_cache_.find(key);
  if (it != reference_cache_.end()) return it->second;
  // The tuner measures a subgraph on every backend in a row, so the last few subgraphs are
  // all the cache needs; keeping every one would grow memory with each candidate (a
  // ResNet-50 tune has ~300 distinct subgraphs, MBs of outputs each).
  if (reference_cache_.size() >= kReferenceCacheEntries) reference_cache_.clear();
  return reference_cache_[key] = ReferenceRun{run_reference(sub, inputs), std::nullopt};
}

std::string Measurer::check_against_reference(const Graph& sub, const std::string& canonical,
                                              const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& outputs,
                                              const Tolerance& tol, std::string& note) {
  ReferenceRun& reference = reference_run(sub, canonical, inputs);
  // A chaotic subgraph (util/compare.h): one more reference run, on its first mismatch only.
  SensitivityCheck check = compare_allowing_sensitivity(
      outputs, reference.outputs, inputs,
      [&](const std::vector<Tensor>& scaled) -> const std::vector<Tensor>& {
        if (!reference.moved) reference.moved = run_reference(sub, scaled);
        return *reference.moved;
      },
      tol);
  note = std::move(check.note);
  return check.mismatch;
}

CostRecord Measurer::measure_uncached(const KernelJob& job, const std::string& canonical,
                                      const Candidate& candidate, double abandon_above_ms) {
  const Graph& sub = job.subgraph;
  try {
    use_threads_on_this_thread(candidate.threads);
    // Measured as sessions run it (runtime/threads.h): denormals flushed to zero.
    DenormalsFlushed flushed;
    flush_denormals_on_openmp_team(candidate.threads);
    std::unique_ptr<Kernel> kernel = candidate.backend->compile(sub, candidate.compile_options());
    // Same seed for every backend: the reference outputs are computed once per subgraph.
    const std::shared_ptr<const std::vector<Tensor>> drawn = drawn_inputs(sub);
    // The kernel runs on copies: one that writes into its inputs fails below (in a plan it
    // would change a value other steps read) and leaves the drawn ones, which the reference
    // and the next candidates read, as they were.
    std::vector<Tensor> inputs;
    for (const Tensor& t : *drawn) inputs.push_back(t.clone());
    std::vector<Tensor> outputs = allocate_outputs(sub);
    // A device kernel reads and writes device memory: its inputs are there before it runs
    // (in a plan, the copies are steps of their own, costed apart), and it is timed until
    // the device is done.
    Device* device = candidate.backend->device();
    std::unique_ptr<DeviceBuffers> device_inputs, device_outputs;
    if (device) {
      device_inputs = std::make_unique<DeviceBuffers>(*device, inputs, true);
      device_outputs = std::make_unique<DeviceBuffers>(*device, outputs, false);
    }
    const std::vector<Tensor>& run_inputs = device ? device_inputs->views() : inputs;
    const std::vector<Tensor>& run_outputs = device ? device_outputs->views() : outputs;
    kernel->run(run_inputs, run_outputs);
    if (device) device_outputs->download(outputs);
    std::string sensitivity_note;
    if (options_.verify && !BackendRegistry::global().is_fallback(*candidate.backend)) {
      if (std::string written = written_input(inputs, *drawn); !written.empty())
        return CostRecord::failure("wrong result: " + written);
      const std::string mismatch = check_against_reference(
          sub, canonical, *drawn, outputs,
          Tolerance::backend_vs_reference(candidate.backend->float32_significand_bits()),
          sensitivity_note);
      use_threads_on_this_thread(candidate.threads);  // the reference may have changed it
      if (!mismatch.empty()) return CostRecord::failure("wrong result: " + mismatch);
    }
    CostRecord ok;
    if (!sensitivity_note.empty()) ok.reason = kWithinSensitivity + sensitivity_note;
    ok.milliseconds = time_kernel(*kernel, run_inputs, run_outputs, candidate.threads, device,
                                  abandon_above_ms, job.between);
    return ok;
  } catch (const std::exception& e) {
    return CostRecord::failure(e.what());
  }
}

double Measurer::time_kernel(Kernel& kernel, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& outputs, int threads, Device* device,
                             double abandon_above_ms, const BetweenRuns& between) const {
  // The eviction reads with this thread's OpenMP team: the kernel's threads.
  use_threads_on_this_thread(threads);
  // The verification run already warmed caches and JIT state; slow kernels (the reference
  // backend's convolutions take 100+ ms) need no more warm-up and few samples: their
  // run-to-run noise is small next to the differences the search decides on.
  auto warm_start = Clock::now();
  // A device kernel's run may return before the device is done: each run is timed until the
  // device has finished (host time, so the launch cost counts too; see docs/DESIGN.md). The
  // host caches it would evict are not the device's. Returns the run's time.
  auto timed_run = [&] {
    auto t0 = Clock::now();
    kernel.run(inputs, outputs);
    if (device) device->synchronize();
    return ms_since(t0);
  };
  const size_t evict_bytes = device ? 0 : between.read_bytes;
  const bool evict = evict_bytes != 0;
  const double evict_ms = evict ? prepare_eviction(evict_bytes) : 0;
  // The most evicted samples: kEvictedTimingBudgetMs of evictions and runs, each run as long
  // as the fastest one so far.
  auto evicted_samples = [&](double fastest_ms) {
    return std::clamp(
        static_cast<int>(kEvictedTimingBudgetMs / std::max(evict_ms + fastest_ms, 1e-3)),
        std::min(options_.min_repeats, kEvictedSamples), kEvictedSamples);
  };
  // Other kernels before each run: the OpenMP team's pass over the inputs and outputs, with
  // or without an eviction read first (CachePressure says why).
  const bool others_first = evict || (between.other_kernels && !device);
  // The warm-up runs follow each other with nothing between them: as fast as the kernel
  // gets (an eviction or other kernels before a run only slow it down). Where even the
  // fastest of two is above the bar, so is every timed run: the timing stops before the
  // first eviction, and the cost is their median, a bound from below that is still over the
  // bar. 523 of the 3,660 candidates of Inception-v3's cold tune stop here (2026-12-05).
  // A slow kernel gets one warm-up run (the loop below ends on time), which follows the
  // verification run back to back, so it too is as fast as the kernel gets: it decides alone.
  // Until 2026-12-05 it needed kAbandonWarmRuns, so a dominated kernel of 100+ ms was still
  // timed three times more, each after an eviction: torch-graph's 3-D conv regions in S3D's
  // cold tune, 140 ms on average, 600 at most, against onednn-graph's 45 on the same nodes.
  std::vector<double> warm;
  for (int i = 0; i < options_.warmup && ms_since(warm_start) < kSlowKernelMs; ++i)
    warm.push_back(timed_run());
  const bool warmed =
      warm.size() >= kAbandonWarmRuns || (!warm.empty() && warm.front() >= kSlowKernelMs);
  if (warmed && *std::min_element(warm.begin(), warm.end()) > abandon_above_ms)
    return median_of(std::move(warm));
  std::vector<double> samples;
  auto start = Clock::now();
  while (static_cast<int>(samples.size()) < options_.max_repeats) {
    if (others_first) evict_caches(evict_bytes, inputs, outputs);
    samples.push_back(timed_run());
    const double fastest = *std::min_element(samples.begin(), samples.end());
    if (static_cast<int>(samples.size()) == kAbandonSamples && fastest > abandon_above_ms) break;
    const int needed = samples.front() > kSlowKernelMs ? 3 : options_.min_repeats;
    // Runs after an eviction scatter more (DRAM, page walks) and rarely reach the spread
    // target; past kEvictedSamples more samples only move the median by noise, while each
    // costs an eviction too (a cold ResNet-50 tune took 3x as long without this cap).
    if (evict && static_cast<int>(samples.size()) >= evicted_samples(fastest)) break;
    if (static_cast<int>(samples.size()) >= needed) {
      std::vector<double> sorted = samples;
      std::sort(sorted.begin(), sorted.end());
      double median = median_of(sorted);
      double iqr = sorted[sorted.size() * 3 / 4] - sorted[sorted.size() / 4];
      if (iqr <= options_.max_spread * median || ms_since(start) > options_.budget_ms) break;
    }
  }
  return median_of(std::move(samples));
}

double measure_step_overhead_ms(int threads) {
  // A chain of Relu nodes on one float, each its own step on reference (not Identity: the
  // executor may alias it away). The time per step is the executor's dispatch (~0.05 us on
  // the 2-core EPYC) plus the trivial kernel's own call (~1.28 us), which a kernel's cost
  // alone also holds: so it counts a small step twice, and stands for what small steps lose
  // in a model beyond their cost alone (another library's pool to wake, caches another
  // kernel filled: 0.2-1.7 us per step measured in the tiny transformers' plans, docs/
  // DESIGN.md "Search").
  constexpr int kSteps = 200;
  Graph g;
  ValueId prev = g.add_value("x", DType::kFloat32, {1}, true);
  g.inputs = {prev};
  for (int i = 0; i < kSteps; ++i) {
    ValueId next = g.add_value("v" + std::to_string(i), DType::kFloat32, {1}, true);
    g.add_node(Node{"n" + std::to_string(i), "Relu", "", {prev}, {next}, {}});
    prev = next;
  }
  g.outputs = {prev};
  SessionOptions options;
  options.threads = threads;
  Session session(std::move(g), options);
  std::vector<Tensor> inputs = {Tensor(DType::kFloat32, {1})};
  std::vector<double> samples;
  for (int i = 0; i < 51; ++i) {
    auto t0 = Clock::now();
    session.run_views(inputs);
    samples.push_back(ms_since(t0) / kSteps);
  }
  return median_of(std::move(samples));
}

double measure_stage_overhead_ms(int threads, double step_overhead_ms) {
  if (threads < 2) return 0;  // nothing runs concurrently on one thread
  // Per round: a = Relu(x), b = Relu(x) (one concurrent stage of two lanes, or two steps),
  // then x = Add(a, b). On one float the kernels do ~nothing.
  constexpr int kRounds = 100;
  Graph g;
  ValueId prev = g.add_value("x", DType::kFloat32, {1}, true);
  g.inputs = {prev};
  for (int i = 0; i < kRounds; ++i) {
    ValueId a = g.add_value(fmt::format("a{}", i), DType::kFloat32, {1}, true);
    ValueId b = g.add_value(fmt::format("b{}", i), DType::kFloat32, {1}, true);
    ValueId sum = g.add_value(fmt::format("s{}", i), DType::kFloat32, {1}, true);
    g.add_node(Node{fmt::format("ra{}", i), "Relu", "", {prev}, {a}, {}});
    g.add_node(Node{fmt::format("rb{}", i), "Relu", "", {prev}, {b}, {}});
    g.add_node(Node{fmt::format("add{}", i), "Add", "", {a, b}, {sum}, {}});
    prev = sum;
  }
  g.outputs = {prev};
  Backend& fallback = BackendRegistry::global().fallback();
  Placement placement;
  Schedule concurrent;
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    const int round = static_cast<int>(n / 3), role = static_cast<int>(n % 3);
    placement.push_back(Candidate{{static_cast<NodeId>(n)}, &fallback, "", role < 2 ? 1 : threads});
    concurrent.push_back(role < 2 ? Slot{2 * round, role} : Slot{2 * round + 1, 0});
  }
  Executor stages(g, build_steps(g, placement, &concurrent));
  Executor one_by_one(g, build_steps(g, placement));
  std::vector<Tensor> inputs = {Tensor(DType::kFloat32, {1})};
  std::vector<double> stage_ms, sequential_ms;
  for (int i = 0; i < 31; ++i) {
    auto t0 = Clock::now();
    stages.run(inputs);
    stage_ms.push_back(ms_since(t0) / kRounds);
    t0 = Clock::now();
    one_by_one.run(inputs);
    sequential_ms.push_back(ms_since(t0) / kRounds);
  }
  // Sequential: three steps a round (3 o). Staged: the stage (o + H) and the Add (o).
  return std::max(0.0, median_of(stage_ms) - median_of(sequential_ms) + step_overhead_ms);
}

double measure_copy_ms(Device& device, bool to_host, size_t bytes) {
  if (bytes == 0) return 0;
  // Host memory as the executor's arena gives it: allocated once and touched.
  std::vector<std::byte> host(bytes, std::byte{1});
  void* memory = device.allocate(bytes);
  std::vector<double> samples;
  try {
    for (int i = 0; i < 23; ++i) {
      auto t0 = Clock::now();
      if (to_host)
        device.copy_to_host(host.data(), memory, bytes);
      else
        device.copy_to_device(memory, host.data(), bytes);
      device.synchronize();
      if (i >= 3) samples.push_back(ms_since(t0));  // the first few set up staging buffers
    }
  } catch (...) {
    device.release(memory);
    throw;
  }
  device.release(memory);
  return median_of(std::move(samples));
}

}  // namespace collage
