#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

#include "collage/device.h"

#include "runtime/lane_workers.h"
#include "runtime/memory_plan.h"
#include "runtime/threads.h"

namespace collage {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string Step::backend_name() const {
  return candidate.backend ? candidate.backend->name() : "-";
}

Executor::Executor(const Graph& graph, std::vector<Step> steps)
    : graph_(graph), steps_(std::move(steps)) {
  // Stages, and each step's place in time: a step of a one-lane stage has a time of its own;
  // every step of a concurrent stage shares the stage's one time, so that buffers live
  // anywhere in the stage conflict with each other in the memory plan.
  std::vector<int> time(steps_.size());
  std::vector<int> stage_of(steps_.size());
  int t = -1;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (step.stage < 0 || step.lane < 0 || (s > 0 && step.stage < steps_[s - 1].stage))
      fail(ErrorKind::kInternal, "executor: steps out of stage order at step {}", s);
    if (stages_.empty() || step.stage != steps_[s - 1].stage) stages_.emplace_back();
    Stage& stage = stages_.back();
    if (static_cast<int>(stage.lanes.size()) <= step.lane) stage.lanes.resize(step.lane + 1);
    stage.lanes[step.lane].push_back(s);
    stage_of[s] = static_cast<int>(stages_.size()) - 1;
  }
  for (Stage& stage : stages_) {
    std::erase_if(stage.lanes, [](const auto& lane) { return lane.empty(); });
    max_lanes_ = std::max(max_lanes_, static_cast<int>(stage.lanes.size()));
  }
  {
    size_t s = 0;
    for (const Stage& stage : stages_) {
      size_t n = 0;
      for (const auto& lane : stage.lanes) n += lane.size();
      if (stage.lanes.size() == 1) {
        for (size_t i = 0; i < n; ++i) time[s + i] = ++t;
      } else {
        ++t;
        for (size_t i = 0; i < n; ++i) time[s + i] = t;
      }
      s += n;
    }
  }

  const size_t nv = graph_.num_values();
  // Which step writes each value: a step may read a value of its own stage only from an
  // earlier step of its lane (another lane's value may not be written yet).
  std::vector<int> producer(nv, -1);
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (ValueId v : steps_[s].inputs) {
      if (v == kNoValue || producer[v] < 0) continue;
      const Step& p = steps_[producer[v]];
      if (stage_of[producer[v]] == stage_of[s] && p.lane != steps_[s].lane)
        fail(ErrorKind::kInternal, "executor: step {} reads a value of lane {} in its own stage", s,
             p.lane);
    }
    for (ValueId v : steps_[s].outputs)
      if (v != kNoValue) producer[v] = static_cast<int>(s);
  }

  // The device of each step; index 0 is the host, k the device devices_[k - 1].
  step_device_.assign(steps_.size(), nullptr);
  std::vector<int> dev(steps_.size(), 0);
  for (size_t s = 0; s < steps_.size(); ++s) {
    Device* d = steps_[s].candidate.backend ? steps_[s].candidate.backend->device() : nullptr;
    if (!d) continue;
    step_device_[s] = d;
    auto it = std::find(devices_.begin(), devices_.end(), d);
    if (it == devices_.end()) it = devices_.insert(devices_.end(), d);
    dev[s] = static_cast<int>(it - devices_.begin()) + 1;
  }
  const size_t nd = devices_.size() + 1;
  // Where each value lives: its producer's device; graph inputs and constants on the host.
  std::vector<int> home(nv, 0);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (ValueId v : steps_[s].outputs)
      if (v != kNoValue) home[v] = dev[s];

  // Lifetimes of each value's copy on each device (index v * nd + d), and the copies to make.
  struct PendingCopy {
    ValueId value;
    int from, to;
    int before_step;  // -1: at the end of the run
    bool before_stage;
  };
  std::vector<PendingCopy> pending;
  std::vector<std::pair<ValueId, int>> constant_uploads;
  const int end_of_run = t + 1;
  std::vector<int> first(nv * nd, INT_MAX), last(nv * nd, -2);
  for (ValueId v : graph_.inputs) first[v * nd] = -1;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (ValueId v : steps_[s].outputs)
      if (v != kNoValue) first[v * nd + dev[s]] = std::min(first[v * nd + dev[s]], time[s]);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const int d = dev[s];
    for (ValueId v : steps_[s].inputs) {
      if (v == kNoValue) continue;
      if (graph_.value(v).is_constant()) {
        if (d != 0 && std::find(constant_uploads.begin(), constant_uploads.end(),
                                std::make_pair(v, d)) == constant_uploads.end())
          constant_uploads.emplace_back(v, d);
        continue;
      }
      if (d != home[v]) {
        if (home[v] != 0 && d != 0)
          fail(ErrorKind::kUnsupported,
               "executor: value '{}' would go from one device to another ({} to {})",
               graph_.value(v).name, devices_[home[v] - 1]->name(), devices_[d - 1]->name());
        if (first[v * nd + d] == INT_MAX) {
          // Its first reader there. In a concurrent stage, a value from an earlier stage is
          // copied before the stage starts: readers in other lanes may need it too.
          const bool concurrent = stages_[stage_of[s]].lanes.size() > 1;
          const bool earlier = producer[v] < 0 || stage_of[producer[v]] != stage_of[s];
          pending.push_back({v, home[v], d, static_cast<int>(s), concurrent && earlier});
          first[v * nd + d] = time[s];
          last[v * nd + home[v]] = std::max(last[v * nd + home[v]], time[s]);
        }
      }
      last[v * nd + d] = std::max(last[v * nd + d], time[s]);
    }
  }
  for (ValueId v : graph_.outputs) {
    if (home[v] != 0 && first[v * nd] == INT_MAX && !graph_.value(v).is_constant()) {
      pending.push_back({v, home[v], 0, -1, false});
      first[v * nd] = end_of_run;
      last[v * nd + home[v]] = end_of_run;
    }
    last[v * nd] = end_of_run;
  }

  // Every non-constant value that is defined on a device (a graph input or a step output on
  // the host; a step output or a copy on a device) gets a slot in that device's arena.
  std::vector<std::vector<Tensor>> views(nd, std::vector<Tensor>(nv));
  for (size_t d = 0; d < nd; ++d) {
    std::vector<ValueId> slotted;
    std::vector<BufferRequest> requests;
    for (size_t v = 0; v < nv; ++v) {
      const Value& value = graph_.value(static_cast<ValueId>(v));
      const size_t i = v * nd + d;
      if (value.is_constant() || first[i] == INT_MAX) continue;
      BufferRequest r;
      r.bytes = static_cast<size_t>(shape_numel(value.shape)) * dtype_size(value.dtype);
      r.first_step = first[i];
      // A value nobody reads still needs its bytes while its producer writes them.
      r.last_step = std::max(last[i], first[i]);
      requests.push_back(r);
      slotted.push_back(static_cast<ValueId>(v));
    }
    MemoryPlan plan = plan_memory(requests);
    std::byte* base = nullptr;
    if (d == 0) {
      arena_bytes_ = plan.arena_bytes;
      if (arena_bytes_ > 0) {
        arena_ = static_cast<std::byte*>(std::aligned_alloc(
            kArenaAlignment,
            (arena_bytes_ + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment));
        if (!arena_) fail(ErrorKind::kLimit, "cannot allocate a {}-byte arena", arena_bytes_);
        // Touch every page now: a first touch costs ~11 us per 4 KiB page, never pay it in
        // run().
        std::memset(arena_, 0, arena_bytes_);
      }
      base = arena_;
    } else {
      Device* device = devices_[d - 1];
      device_arena_bytes_.push_back(plan.arena_bytes);
      device_arenas_.push_back(plan.arena_bytes ? device->allocate(plan.arena_bytes) : nullptr);
      base = static_cast<std::byte*>(device_arenas_.back());
    }
    for (size_t i = 0; i < slotted.size(); ++i) {
      const Value& value = graph_.value(slotted[i]);
      views[d][slotted[i]] = Tensor::view(value.dtype, value.shape, base + plan.offsets[i]);
    }
  }
  for (size_t v = 0; v < nv; ++v) {
    const Value& value = graph_.value(static_cast<ValueId>(v));
    if (value.is_constant()) views[0][v] = value.constant;
  }
  for (auto [v, d] : constant_uploads) {
    const Tensor& host = graph_.value(v).constant;
    Device* device = devices_[d - 1];
    void* memory = host.nbytes() ? device->allocate(host.nbytes()) : nullptr;
    if (memory) {
      uploaded_constants_.emplace_back(device, memory);
      device->copy_to_device(memory, host.raw(), host.nbytes());
    }
    views[d][v] = Tensor::view(host.dtype(), host.shape(), memory);
  }
  value_views_ = std::move(views[0]);
  auto view = [&](ValueId v, int d) -> const Tensor& {
    return d == 0 ? value_views_[v] : views[d][v];
  };

  if (!pending.empty()) copies_before_step_.resize(steps_.size());
  for (const PendingCopy& p : pending) {
    const Tensor& src = view(p.value, p.from);
    const Tensor& dst = view(p.value, p.to);
    CopyOp op{devices_[std::max(p.from, p.to) - 1], p.to == 0, dst.raw(), src.raw(), src.nbytes()};
    copy_info_.push_back({p.value, op.device, op.to_host, p.before_step, p.before_stage});
    if (op.bytes == 0) continue;
    if (p.before_step < 0)
      copies_at_end_.push_back(op);
    else if (p.before_stage)
      stages_[stage_of[p.before_step]].copies_before.push_back(op);
    else
      copies_before_step_[p.before_step].push_back(op);
  }

  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    std::vector<Tensor> ins, outs;
    for (ValueId v : step.inputs) ins.push_back(v == kNoValue ? Tensor() : view(v, dev[s]));
    for (ValueId v : step.outputs) outs.push_back(v == kNoValue ? Tensor() : view(v, dev[s]));
    step_inputs_.push_back(std::move(ins));
    step_outputs_.push_back(std::move(outs));
  }
  // Where the host steps read each graph input; in place when it is large (a GCN's 16 MB
  // adjacency took 0.8 ms a run to copy, and ONNX Runtime reads the caller's buffer), unless
  // it is a graph output (its view must outlive the run) or a device copy reads its arena
  // slot. A small one is copied: ~20 us for an image of 600 KB, less than what an XNNPACK
  // runtime reading it costs to set up again when a caller passes a fresh array each run
  // (it sets up whenever an input pointer moves: subgraph_kernel.cc).
  constexpr size_t kInPlaceBytes = size_t{1} << 20;
  for (ValueId v : graph_.inputs) {
    InputReads& r = input_reads_.emplace_back();
    r.in_place = value_views_[v].nbytes() >= kInPlaceBytes &&
                 std::find(graph_.outputs.begin(), graph_.outputs.end(), v) == graph_.outputs.end();
    for (const PendingCopy& p : pending) r.in_place = r.in_place && p.value != v;
    for (size_t s = 0; s < steps_.size(); ++s)
      for (size_t k = 0; k < steps_[s].inputs.size(); ++k)
        if (steps_[s].inputs[k] == v && dev[s] == 0) r.reads.emplace_back(s, k);
  }
  // Lane workers inherit the calling thread's MXCSR: made with denormals flushed.
  DenormalsFlushed flushed;
  if (max_lanes_ > 1) workers_ = std::make_unique<LaneWorkers>(max_lanes_);
  int threads = 1;
  for (const Step& step : steps_) threads = std::max(threads, step.candidate.threads);
  flush_denormals_on_openmp_team(threads);
}

Executor::~Executor() {
  workers_.reset();  // join the workers before the arena they write goes
  std::free(arena_);
  for (size_t d = 0; d < devices_.size(); ++d)
    if (device_arenas_[d]) devices_[d]->release(device_arenas_[d]);
  for (auto [device, memory] : uploaded_constants_) device->release(memory);
}

size_t Executor::device_arena_bytes(const Device* device) const {
  for (size_t d = 0; d < devices_.size(); ++d)
    if (devices_[d] == device) return device_arena_bytes_[d];
  return 0;
}

void Executor::run_copies(const std::vector<CopyOp>& copies) {
  for (const CopyOp& c : copies) {
    if (c.to_host)
      c.device->copy_to_host(c.dst, c.src, c.bytes);
    else
      c.device->copy_to_device(c.dst, c.src, c.bytes);
  }
}

void Executor::check_inputs(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != graph_.inputs.size())
    fail(ErrorKind::kInvalidArgument, "the model takes {} inputs, got {}", graph_.inputs.size(),
         inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = graph_.value(graph_.inputs[i]);
    if (inputs[i].dtype() != v.dtype || inputs[i].shape() != v.shape)
      fail(ErrorKind::kInvalidArgument, "input {} '{}' must be {}{}, got {}{}", i, v.name,
           dtype_name(v.dtype), shape_to_string(v.shape), dtype_name(inputs[i].dtype()),
           shape_to_string(inputs[i].shape()));
  }
}

void Executor::bind_inputs(const std::vector<Tensor>& inputs) {
  check_inputs(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& slot = value_views_[graph_.inputs[i]];
    // Read in place where aligned as the arena's slots are; else copied.
    const bool in_place = input_reads_[i].in_place &&
                          reinterpret_cast<uintptr_t>(inputs[i].raw()) % kArenaAlignment == 0;
    if (!in_place && slot.nbytes()) std::memcpy(slot.raw(), inputs[i].raw(), slot.nbytes());
    const Tensor& read = in_place ? inputs[i] : slot;
    for (auto [s, k] : input_reads_[i].reads) step_inputs_[s][k] = read;
  }
}

std::vector<Tensor> Executor::output_views() const {
  std::vector<Tensor> outputs;
  outputs.reserve(graph_.outputs.size());
  for (ValueId v : graph_.outputs) outputs.push_back(value_views_[v]);
  return outputs;
}

void Executor::run_lane(const std::vector<size_t>& lane, int worker,
                        std::vector<StepTiming>* timings) {
  for (size_t s : lane) {
    use_threads_on_this_thread(steps_[s].candidate.threads);
    if (!timings) {
      if (!copies_before_step_.empty()) run_copies(copies_before_step_[s]);
      steps_[s].kernel->run(step_inputs_[s], step_outputs_[s]);
      continue;
    }
    StepTiming& timing = (*timings)[s];
    timing.worker = worker;
    timing.start_ms = now_ms() - run_start_;
    // A step's time includes copying its inputs over and, on a device, waiting for it.
    if (!copies_before_step_.empty()) run_copies(copies_before_step_[s]);
    steps_[s].kernel->run(step_inputs_[s], step_outputs_[s]);
    if (step_device_[s]) step_device_[s]->synchronize();
    timing.end_ms = now_ms() - run_start_;
  }
}

void Executor::run_stages(std::vector<StepTiming>* timings) {
  for (const Stage& stage : stages_) {
    if (!stage.copies_before.empty()) run_copies(stage.copies_before);
    if (stage.lanes.size() == 1) {
      run_lane(stage.lanes[0], 0, timings);
      continue;
    }
    workers_->run(static_cast<int>(stage.lanes.size()),
                  [&](int lane) { run_lane(stage.lanes[lane], lane, timings); });
  }
  if (devices_.empty()) return;
  run_copies(copies_at_end_);
  // A run ends when its device work has: the next run may overwrite what it still reads.
  for (Device* device : devices_) device->synchronize();
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  DenormalsFlushed flushed;
  bind_inputs(inputs);
  run_stages(nullptr);
  return output_views();
}

std::vector<Tensor> Executor::run_profiled(const std::vector<Tensor>& inputs,
                                           std::vector<StepTiming>& timings) {
  DenormalsFlushed flushed;
  bind_inputs(inputs);
  timings.assign(steps_.size(), StepTiming{});
  run_start_ = now_ms();
  run_stages(&timings);
  return output_views();
}

}  // namespace collage
