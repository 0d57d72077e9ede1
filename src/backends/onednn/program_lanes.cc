// Program's concurrent stages (see lanes.h for why and how they are chosen): which buffers
// each step touches, the steps' costs measured on all threads and on one, the stages run
// as an OpenMP team whose threads each run a lane of single-threaded primitives.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <fmt/core.h>

#include "backends/onednn/dnnl_common.h"
#include "runtime/interleaved_timing.h"
#include "util/compare.h"

namespace collage::onednn {

namespace {

// Runs `f` (steps of a program, from one thread of an OpenMP team: a lane, or the narrow
// checks and timings) inside a team of that thread alone, so that an OpenMP barrier in a
// primitive binds to it and returns. oneDNN's parallel() runs its function on the calling
// thread alone when already inside a team, yet some implementations still call a barrier
// there (ncsp batch normalization when it blocks over channels for the L3): it then bound to
// the enclosing team and waited for the other threads forever (DenseNet-121 under
// onednn-graph, 2 threads, a Zen 5 EPYC: the first run hung in narrow_safe_steps). One such
// team per lane and stage, not per step: opening one costs ~3 us here (libgomp).
template <class F>
void in_team_of_one(F&& f) {
#pragma omp parallel num_threads(1)
  f();
}

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The arguments a primitive writes; every other argument is read.
bool writes(int arg) {
  return arg == DNNL_ARG_DST_0 || arg == DNNL_ARG_DST_1 || arg == DNNL_ARG_DST_2 ||
         arg == DNNL_ARG_WORKSPACE ||
         (arg >= DNNL_ARG_MULTIPLE_DST && arg < DNNL_ARG_MULTIPLE_DST + DNNL_ARG_MULTIPLE_DST);
}

// COLLAGE_ONEDNN_LANES: "off" (or 0) runs every program sequentially, "always" runs every
// independent steps concurrently (tests: races show up whatever the costs), "verbose"
// chooses as usual and says how on stderr; unset leaves the caller's mode, and so does any
// other value, with a warning (once).
Program::Lanes lanes_from_environment(Program::Lanes requested) {
  const char* v = std::getenv("COLLAGE_ONEDNN_LANES");
  if (requested == Program::Lanes::kSequential || !v || !*v) return requested;
  if (!std::strcmp(v, "off") || !std::strcmp(v, "0")) return Program::Lanes::kSequential;
  if (!std::strcmp(v, "always")) return Program::Lanes::kAlways;
  if (!std::strcmp(v, "verbose")) return Program::Lanes::kVerbose;
  static std::once_flag warned;
  std::call_once(warned, [&] {
    fmt::print(stderr,
               "collage: COLLAGE_ONEDNN_LANES='{}' is not off, always or verbose: ignored\n", v);
  });
  return requested;
}

// Runs and timings at compile time: enough for a median, few enough that a region's compile
// stays a small part of its measurement by the tuner.
constexpr int kTimedRuns = 5;
// The first of them, which decides whether to take the rest (lanes_worth_confirming).
constexpr int kFirstLookRuns = 1;

}  // namespace

int Program::concurrent_stages() const {
  return static_cast<int>(std::count_if(stages_.begin(), stages_.end(),
                                        [](const Stage& s) { return !s.lanes.empty(); }));
}

std::optional<std::vector<StepAccess>> Program::step_accesses() const {
  // Kernel inputs and outputs by index, the rewritten buffers' views by the buffer they were
  // allocated as (they share the arena now), other program buffers by the allocation the
  // address lies in.
  std::map<dnnl_memory_t, int> bound;
  for (const auto& [index, m] : inputs_) bound[m.get()] = -2 - 2 * index;
  for (const auto& [index, m] : outputs_) bound[m.get()] = -3 - 2 * index;
  for (const RewrittenView& v : views_)
    bound[v.memory.get()] = static_cast<int>(buffers_.size() + v.range);
  std::vector<StepAccess> access(steps_.size());
  for (size_t s = 0; s < steps_.size(); ++s)
    for (size_t i = 0; i < steps_[s].args.size(); ++i) {
      if (static_cast<int>(i) == steps_[s].scratchpad_arg) continue;
      const dnnl::memory& m = steps_[s].memories[i];
      std::optional<int> id;
      if (auto it = bound.find(m.get()); it != bound.end()) {
        id = it->second;
      } else if (const char* p = static_cast<const char*>(m.get_data_handle())) {
        for (size_t b = 0; b < buffers_.size() && !id; ++b) {
          const char* base = static_cast<const char*>(buffers_[b].get_data_handle());
          if (p >= base && p < base + buffers_[b].get_desc().get_size()) id = static_cast<int>(b);
        }
      }
      if (!id) return std::nullopt;
      (writes(steps_[s].args[i].arg) ? access[s].writes : access[s].reads).push_back(*id);
    }
  return access;
}

Program::ScratchBinding::ScratchBinding(Program& program) : program_(program) {
  // As large as any memory bound to the index needs (a view may start at an offset).
  auto bytes_by_index = [](const std::vector<std::pair<int, dnnl::memory>>& bound) {
    std::map<int, size_t> bytes;
    for (const auto& [index, m] : bound) {
      const dnnl::memory::desc md = m.get_desc();
      const size_t b = md.get_size() + static_cast<size_t>(md.data.offset0) * sizeof(double);
      bytes[index] = std::max(bytes[index], b);
    }
    return bytes;
  };
  // Inputs not all zero, so that a wrong kernel's output differs from a right one's.
  auto allocate = [&](size_t bytes) {
    dnnl::memory m(dnnl::memory::desc({static_cast<int64_t>(bytes)}, dt::u8, tag::a), cpu_engine());
    std::memset(m.get_data_handle(), 0, bytes);
    data_.push_back(m);
    return static_cast<char*>(m.get_data_handle());
  };
  for (const auto& [index, bytes] : bytes_by_index(program.inputs_)) {
    char* data = allocate(bytes);
    for (size_t i = 0; i + sizeof(float) <= bytes; i += sizeof(float)) {
      const float v = static_cast<float>((i / sizeof(float)) % 23) * 0.01f - 0.1f;
      std::memcpy(data + i, &v, sizeof v);
    }
    inputs_[index] = data;
  }
  for (const auto& [index, bytes] : bytes_by_index(program.outputs_))
    outputs_[index] = allocate(bytes);
}

void Program::ScratchBinding::bind() {
  for (auto& [index, m] : program_.inputs_) m.set_data_handle(inputs_[index]);
  for (auto& [index, m] : program_.outputs_) m.set_data_handle(outputs_[index]);
}

void Program::check(dnnl_status_t status) {
  if (status != dnnl_success)
    fail(ErrorKind::kBackend, "onednn: primitive execution failed (status {})",
         static_cast<int>(status));
}

std::vector<bool> Program::narrow_safe_steps(int threads) {
  // Each step once on one thread of a team (the last: lanes other than the caller's run
  // there) into copies of what it writes, then as the program runs it; the two must agree.
  // A step writing through an offset view is not checked and never runs in a lane.
  std::vector<bool> safe(steps_.size(), true);
  for (size_t s = 0; s < steps_.size(); ++s) {
    Step& step = steps_[s];
    std::vector<dnnl_exec_arg_t> args = step.args;
    std::vector<std::pair<size_t, dnnl::memory>> copies;  // (arg, copy)
    for (size_t i = 0; i < args.size() && safe[s]; ++i) {
      if (!writes(args[i].arg) || static_cast<int>(i) == step.scratchpad_arg) continue;
      const dnnl::memory::desc md = step.memories[i].get_desc();
      if (md.data.offset0 != 0 || md.get_size() == 0) {
        safe[s] = false;
        break;
      }
      // Starts as the destination is now: a sum post-op reads it.
      dnnl::memory copy(md, cpu_engine());
      std::memcpy(copy.get_data_handle(), step.memories[i].get_data_handle(), md.get_size());
      args[i].memory = copy.get();
      copies.emplace_back(i, copy);
    }
    if (safe[s]) {
      dnnl_status_t status = dnnl_success;
#pragma omp parallel num_threads(threads)
      if (omp_get_thread_num() == threads - 1)
        in_team_of_one([&] { status = execute_with(step, stream_, args); });
      check(status);
    }
    check(execute(s, stream_));
    for (const auto& [i, copy] : copies) {
      const dnnl::memory::desc md = copy.get_desc();
      const void* expected = step.memories[i].get_data_handle();
      if (md.data_type() == dt::f32) {
        const Shape n = {static_cast<int64_t>(md.get_size() / sizeof(float))};
        safe[s] = safe[s] &&
                  compare_tensors(Tensor::view(DType::kFloat32, n, copy.get_data_handle()),
                                  Tensor::view(DType::kFloat32, n, const_cast<void*>(expected)),
                                  Tolerance::backend_vs_reference())
                      .empty();
      } else {
        safe[s] = safe[s] && !std::memcmp(copy.get_data_handle(), expected, md.get_size());
      }
    }
  }
  return safe;
}

std::vector<StepCost> Program::measure_step_costs(int threads, int runs, StepTimes& times) {
  // Each step on every thread, and on one thread of a team whose other threads idle at its
  // end (as a lane's partner may).
  std::vector<std::vector<double>>&wide = times.wide, &narrow = times.narrow;
  if (wide.empty()) {
    run_steps(0, steps_.size());  // warm-up: JIT state, pages, caches
    wide.resize(steps_.size());
    narrow.resize(steps_.size());
  }
  for (int r = 0; r < runs; ++r) {
    for (size_t s = 0; s < steps_.size(); ++s) {
      const auto t0 = Clock::now();
      check(execute(s, stream_));
      wide[s].push_back(ms_since(t0));
    }
    dnnl_status_t status = dnnl_success;
#pragma omp parallel num_threads(threads)
    if (omp_get_thread_num() == 0)
      in_team_of_one([&] {
        for (size_t s = 0; s < steps_.size() && status == dnnl_success; ++s) {
          const auto t0 = Clock::now();
          status = execute(s, stream_);
          narrow[s].push_back(ms_since(t0));
        }
      });
    check(status);
  }
  std::vector<StepCost> costs(steps_.size());
  for (size_t s = 0; s < steps_.size(); ++s) costs[s] = {median_of(wide[s]), median_of(narrow[s])};
  return costs;
}

double Program::team_start_ms(int threads) {
  std::vector<double> samples;
  for (int r = 0; r < 50; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {}
    samples.push_back(ms_since(t0));
  }
  return median_of(samples);
}

Program::MeasuredStages Program::stages_measured_faster() {
  // Whole runs, every stage concurrent or none, alternating (which goes first too), the
  // first two a warm-up; each stage timed inside them, so that it finds the caches as a
  // real run leaves them (a stage timed twice in a row finds its weights warm the second
  // time, which favoured whichever went second).
  const size_t k = stages_.size();
  std::vector<std::vector<double>> with(k), without(k);
  for (int r = 0; r < 2 * (kTimedRuns + 1); ++r) {
    const bool concurrent = (r % 4 == 0 || r % 4 == 3);
    for (size_t i = 0; i < k; ++i) {
      const auto t0 = Clock::now();
      if (concurrent && !stages_[i].lanes.empty())
        run_lanes(i);
      else
        run_steps(stages_[i].begin, stages_[i].end);
      if (r >= 2 && !stages_[i].lanes.empty())
        (concurrent ? with : without)[i].push_back(ms_since(t0));
    }
  }
  MeasuredStages out;
  std::vector<LaneStage>& kept = out.stages;
  for (size_t i = 0; i < k; ++i) {
    if (!stages_[i].lanes.empty() && median_of(with[i]) < median_of(without[i])) {
      kept.push_back({stages_[i].begin, stages_[i].end, stages_[i].lanes});
      out.saved_ms += median_of(without[i]) - median_of(with[i]);
      ++out.concurrent;
    } else if (!kept.empty() && !kept.back().concurrent()) {
      kept.back().end = stages_[i].end;
    } else {
      kept.push_back({stages_[i].begin, stages_[i].end, {}});
    }
  }
  return out;
}

void Program::report_lanes(const std::vector<std::vector<size_t>>& preds,
                           const std::vector<StepCost>& costs, int threads, double overhead_ms,
                           const LanePlan& plan, bool measured_fully,
                           const MeasuredStages& kept) const {
  // At best each step takes its wide time of all threads, or its narrow time of one of
  // them: no schedule of these costs beats the sum of the smaller shares (an area bound).
  double narrow = 0, bound = 0;
  for (const StepCost& c : costs) {
    narrow += c.narrow_ms;
    bound += std::min(c.wide_ms, c.narrow_ms / threads);
  }
  const int unsafe = static_cast<int>(
      std::count_if(costs.begin(), costs.end(), [](const StepCost& c) { return !c.narrow_safe; }));
  // Beyond this machine: each step's time on T threads from Amdahl's law fitted to its
  // one- and two-thread times, and the plan those costs give on T lanes.
  std::string beyond;
  if (threads == 2)
    for (int t : {4, 8, 16}) {
      std::vector<StepCost> at(costs);
      for (StepCost& c : at) {
        const double parallel =
            c.narrow_ms > 0 ? std::clamp(2 * (1 - c.wide_ms / c.narrow_ms), 0.0, 1.0) : 0;
        c.wide_ms = c.narrow_ms * ((1 - parallel) + parallel / t);
      }
      const LanePlan p = plan_lanes(preds, at, t, overhead_ms);
      beyond += fmt::format(" x{:.2f} at {}", p.sequential_ms / p.predicted_ms, t);
    }
  fmt::print(stderr,
             "onednn lanes: {} steps ({} not safe on one thread of a team); one after another "
             "{:.3f} ms, each on one thread {:.3f} ms, bound {:.3f} ms (x{:.2f}); on {} lanes "
             "planned {} stages, predicted {:.3f} ms{}; kept {}, measured {:.3f} ms faster; "
             "simulated{}{}\n",
             costs.size(), unsafe, plan.sequential_ms, narrow, bound,
             bound > 0 ? plan.sequential_ms / bound : 0, threads, plan.concurrent_stages(),
             plan.predicted_ms, measured_fully ? "" : " (first look: not worth confirming)",
             kept.concurrent, kept.saved_ms, beyond.empty() ? " -" : "", beyond);
}

void Program::choose_lanes(Lanes requested, LaneMemo* memo) {
  const Lanes mode = lanes_from_environment(requested);
  const int threads = omp_get_max_threads();
  if (mode == Lanes::kSequential || threads < 2 || steps_.size() < 2 || omp_in_parallel()) return;
  const std::optional<std::vector<StepAccess>> access = step_accesses();
  if (!access) return;  // a memory nothing identifies: kept sequential
  const std::vector<std::vector<size_t>> preds = step_dependencies(*access);
  // Unit costs: a stage wherever steps can overlap at all.
  std::vector<StepCost> unit(steps_.size(), {1, 1});
  if (plan_lanes(preds, unit, threads, 0).concurrent_stages() == 0) {
    if (mode == Lanes::kVerbose)
      fmt::print(stderr, "onednn lanes: {} steps, none independent of the others\n", steps_.size());
    return;
  }
  // A choice remembered: "one after another" is taken at once; stages once their steps are
  // checked (the file is not trusted to come from this program).
  const std::optional<std::vector<LaneStage>> recalled =
      memo && mode == Lanes::kMeasured ? memo->recall() : std::nullopt;
  if (recalled && recalled->empty()) return;
  // Running needs the kernel's inputs and outputs: scratch buffers stand in for them. The
  // check comes first, and once: while no run has left a destination holding its right
  // result (a step that writes half its output would pass a check after one).
  ScratchBinding scratch(*this);
  scratch.bind();
  const std::vector<bool> safe = narrow_safe_steps(threads);
  if (recalled && stages_fit(*recalled, steps_.size(), threads, safe)) {
    apply_lanes(*recalled, preds);
    return;
  }
  if (mode == Lanes::kAlways) {
    // Every overlap, whatever it costs (tests).
    for (size_t s = 0; s < steps_.size(); ++s) unit[s].narrow_safe = safe[s];
    const LanePlan plan = plan_lanes(preds, unit, threads, 0);
    if (plan.concurrent_stages() > 0) apply_lanes(plan.stages, preds);
    return;
  }
  const double overhead_ms = team_start_ms(threads);
  StepTimes times;
  std::vector<StepCost> costs;
  auto plan_after = [&](int runs) {
    costs = measure_step_costs(threads, runs, times);
    for (size_t s = 0; s < steps_.size(); ++s) costs[s].narrow_safe = safe[s];
    return plan_lanes(preds, costs, threads, overhead_ms);
  };
  // A first look, then the rest of the passes only where it promises a saving worth it.
  LanePlan plan = plan_after(kFirstLookRuns);
  const bool promising = lanes_worth_confirming(plan);
  if (promising) plan = plan_after(kTimedRuns - kFirstLookRuns);
  MeasuredStages kept;
  if (promising && plan.concurrent_stages() > 0) {
    apply_lanes(plan.stages, preds);
    // The costs were measured one step at a time: each stage is kept only where, run
    // whole, it is faster than its steps one after another.
    scratch.bind();
    kept = stages_measured_faster();
    if (kept.concurrent == 0)
      drop_lanes();
    else if (kept.concurrent < plan.concurrent_stages())
      apply_lanes(kept.stages, preds);
  }
  if (memo) memo->remember(kept.concurrent ? kept.stages : std::vector<LaneStage>{});
  if (mode == Lanes::kVerbose)
    report_lanes(preds, costs, threads, overhead_ms, plan, promising, kept);
}

void Program::apply_lanes(const std::vector<LaneStage>& stages,
                          const std::vector<std::vector<size_t>>& preds) {
  const size_t n = steps_.size();
  stages_.clear();
  lane_of_step_.assign(n, 0);
  size_t lanes = 1;
  std::vector<std::pair<size_t, size_t>> span(n);
  for (const LaneStage& ls : stages) {
    stages_.push_back({ls.begin, ls.end, ls.lanes});
    for (size_t s = ls.begin; s < ls.end; ++s)
      span[s] = ls.concurrent() ? std::make_pair(ls.begin, ls.end - 1) : std::make_pair(s, s);
    for (size_t l = 0; l < ls.lanes.size(); ++l)
      for (size_t s : ls.lanes[l]) lane_of_step_[s] = l;
    lanes = std::max(lanes, ls.lanes.size());
  }
  // A step waits for its predecessors in other lanes of its stage (those before the stage
  // are done when it starts; those in its own lane ran before it).
  for (size_t s = 0; s < n; ++s) steps_[s].waits.clear();
  for (const LaneStage& ls : stages)
    if (ls.concurrent())
      for (size_t s = ls.begin; s < ls.end; ++s)
        for (size_t p : preds[s])
          if (p >= ls.begin && lane_of_step_[p] != lane_of_step_[s]) steps_[s].waits.push_back(p);
  // Buffers of every step of a concurrent stage live through the whole stage.
  place_rewritten_buffers(span);
  while (lane_streams_.size() + 1 < lanes) lane_streams_.emplace_back(cpu_engine());
  bind_scratchpads();
  done_ = std::make_unique<std::atomic<uint64_t>[]>(n);
  for (size_t s = 0; s < n; ++s) done_[s].store(0);
}

void Program::drop_lanes() {
  stages_.clear();
  lane_of_step_.clear();
  for (Step& s : steps_) s.waits.clear();
  place_rewritten_buffers({});
  bind_scratchpads();
}

void Program::run_lanes(size_t stage_index) {
  const Stage& stage = stages_[stage_index];
  const uint64_t epoch = ++epoch_;
  const int lanes = static_cast<int>(stage.lanes.size());
  std::atomic<int> failed{dnnl_success};
#pragma omp parallel num_threads(lanes)
  {
    // A team smaller than asked (an OpenMP thread limit): its first thread runs every step.
    const bool alone = omp_get_num_threads() < lanes;
    const int lane = omp_get_thread_num();
    auto run_one = [&](size_t s) {
      for (size_t w : steps_[s].waits)
        for (int spins = 0; done_[w].load(std::memory_order_acquire) != epoch; ++spins)
          if (spins > 1000) std::this_thread::yield();
      if (failed.load(std::memory_order_relaxed) == dnnl_success) {
        dnnl::stream& stream = lane == 0 ? stream_ : lane_streams_[lane - 1];
        if (dnnl_status_t status = execute(s, stream); status != dnnl_success) failed.store(status);
      }
      done_[s].store(epoch, std::memory_order_release);
    };
    // Each lane in a team of its own thread (in_team_of_one says why).
    if (alone) {
      if (lane == 0)
        in_team_of_one([&] {
          for (size_t s = stage.begin; s < stage.end; ++s) run_one(s);
        });
    } else if (lane < lanes) {
      in_team_of_one([&] {
        for (size_t s : stage.lanes[lane]) run_one(s);
      });
    }
  }
  check(static_cast<dnnl_status_t>(failed.load()));
}

}  // namespace collage::onednn
