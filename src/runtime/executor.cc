#include "runtime/executor.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

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

  const int end_of_run = t + 1;
  std::vector<int> first(nv, INT_MAX), last(nv, -2);
  for (ValueId v : graph_.inputs) first[v] = -1;
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (ValueId v : steps_[s].outputs)
      if (v != kNoValue) first[v] = std::min(first[v], time[s]);
    for (ValueId v : steps_[s].inputs)
      if (v != kNoValue) last[v] = std::max(last[v], time[s]);
  }
  for (ValueId v : graph_.outputs) last[v] = end_of_run;

  // Every non-constant value that is defined (a graph input or a step output) gets a slot.
  std::vector<ValueId> slotted;
  std::vector<BufferRequest> requests;
  for (size_t v = 0; v < nv; ++v) {
    const Value& value = graph_.value(static_cast<ValueId>(v));
    if (value.is_constant() || first[v] == INT_MAX) continue;
    BufferRequest r;
    r.bytes = static_cast<size_t>(shape_numel(value.shape)) * dtype_size(value.dtype);
    r.first_step = first[v];
    // A value nobody reads still needs its bytes while its producer writes them.
    r.last_step = std::max(last[v], first[v]);
    requests.push_back(r);
    slotted.push_back(static_cast<ValueId>(v));
  }
  MemoryPlan plan = plan_memory(requests);
  arena_bytes_ = plan.arena_bytes;
  if (arena_bytes_ > 0) {
    arena_ = static_cast<std::byte*>(std::aligned_alloc(64, (arena_bytes_ + 63) / 64 * 64));
    if (!arena_) fail(ErrorKind::kLimit, "cannot allocate a {}-byte arena", arena_bytes_);
    // Touch every page now: a first touch costs ~11 us per 4 KiB page, never pay it in run().
    std::memset(arena_, 0, arena_bytes_);
  }

  value_views_.resize(nv);
  for (size_t i = 0; i < slotted.size(); ++i) {
    const Value& value = graph_.value(slotted[i]);
    value_views_[slotted[i]] = Tensor::view(value.dtype, value.shape, arena_ + plan.offsets[i]);
  }
  for (size_t v = 0; v < nv; ++v) {
    const Value& value = graph_.value(static_cast<ValueId>(v));
    if (value.is_constant()) value_views_[v] = value.constant;
  }
  for (const Step& step : steps_) {
    std::vector<Tensor> ins, outs;
    for (ValueId v : step.inputs) ins.push_back(v == kNoValue ? Tensor() : value_views_[v]);
    for (ValueId v : step.outputs) outs.push_back(v == kNoValue ? Tensor() : value_views_[v]);
    step_inputs_.push_back(std::move(ins));
    step_outputs_.push_back(std::move(outs));
  }
  if (max_lanes_ > 1) workers_ = std::make_unique<LaneWorkers>(max_lanes_);
}

Executor::~Executor() {
  workers_.reset();  // join the workers before the arena they write goes
  std::free(arena_);
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

void Executor::copy_inputs(const std::vector<Tensor>& inputs) {
  check_inputs(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& slot = value_views_[graph_.inputs[i]];
    if (slot.nbytes()) std::memcpy(slot.raw(), inputs[i].raw(), slot.nbytes());
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
      steps_[s].kernel->run(step_inputs_[s], step_outputs_[s]);
      continue;
    }
    StepTiming& timing = (*timings)[s];
    timing.worker = worker;
    timing.start_ms = now_ms() - run_start_;
    steps_[s].kernel->run(step_inputs_[s], step_outputs_[s]);
    timing.end_ms = now_ms() - run_start_;
  }
}

void Executor::run_stages(std::vector<StepTiming>* timings) {
  for (const Stage& stage : stages_) {
    if (stage.lanes.size() == 1) {
      run_lane(stage.lanes[0], 0, timings);
      continue;
    }
    workers_->run(static_cast<int>(stage.lanes.size()),
                  [&](int lane) { run_lane(stage.lanes[lane], lane, timings); });
  }
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  copy_inputs(inputs);
  run_stages(nullptr);
  return output_views();
}

std::vector<Tensor> Executor::run_profiled(const std::vector<Tensor>& inputs,
                                           std::vector<StepTiming>& timings) {
  copy_inputs(inputs);
  timings.assign(steps_.size(), StepTiming{});
  run_start_ = now_ms();
  run_stages(&timings);
  return output_views();
}

}  // namespace collage
