#include "runtime/executor.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "runtime/memory_plan.h"

namespace collage {

Executor::Executor(const Graph& graph, std::vector<Step> steps)
    : graph_(graph), steps_(std::move(steps)) {
  const int end_of_run = static_cast<int>(steps_.size());
  const size_t nv = graph_.num_values();
  std::vector<int> first(nv, INT_MAX), last(nv, -2);
  for (ValueId v : graph_.inputs) first[v] = -1;
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (ValueId v : steps_[s].outputs)
      if (v != kNoValue) first[v] = std::min(first[v], static_cast<int>(s));
    for (ValueId v : steps_[s].inputs)
      if (v != kNoValue) last[v] = std::max(last[v], static_cast<int>(s));
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
}

Executor::~Executor() {
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

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  copy_inputs(inputs);
  for (size_t s = 0; s < steps_.size(); ++s)
    steps_[s].kernel->run(step_inputs_[s], step_outputs_[s]);
  return output_views();
}

std::vector<Tensor> Executor::run_profiled(const std::vector<Tensor>& inputs,
                                           std::vector<double>& step_ms) {
  using Clock = std::chrono::steady_clock;
  copy_inputs(inputs);
  step_ms.assign(steps_.size(), 0.0);
  for (size_t s = 0; s < steps_.size(); ++s) {
    auto start = Clock::now();
    steps_[s].kernel->run(step_inputs_[s], step_outputs_[s]);
    step_ms[s] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  return output_views();
}

}  // namespace collage
