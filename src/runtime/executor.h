// Runs a list of compiled steps over one preallocated arena. Everything that can be decided
// before the first run is: every value's Tensor view (arena slot or constant) and every
// step's input/output lists are built once, so a run is a loop of kernel calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage {

struct Step {
  // Shared: the tuner reuses one compiled kernel across the many sessions it measures.
  std::shared_ptr<Kernel> kernel;
  std::vector<ValueId> inputs;   // kNoValue for omitted optional inputs
  std::vector<ValueId> outputs;  // kNoValue for omitted optional outputs
  std::vector<NodeId> nodes;     // the graph nodes this step computes
  std::string backend;
};

class Executor {
 public:
  Executor(const Graph& graph, std::vector<Step> steps);
  ~Executor();

  // Copies `inputs` (graph-input order, exact shapes/dtypes checked) into the arena, runs
  // every step and returns views of the graph outputs (valid until the next run).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // The same, also writing each step's wall time in milliseconds to `step_ms` (resized to
  // steps().size()): where a plan's time goes once its kernels run next to each other.
  std::vector<Tensor> run_profiled(const std::vector<Tensor>& inputs, std::vector<double>& step_ms);

  size_t arena_bytes() const { return arena_bytes_; }
  const std::vector<Step>& steps() const { return steps_; }

 private:
  void check_inputs(const std::vector<Tensor>& inputs) const;
  void copy_inputs(const std::vector<Tensor>& inputs);
  std::vector<Tensor> output_views() const;

  const Graph& graph_;
  std::vector<Step> steps_;
  std::vector<Tensor> value_views_;  // by ValueId
  std::vector<std::vector<Tensor>> step_inputs_, step_outputs_;
  std::byte* arena_ = nullptr;
  size_t arena_bytes_ = 0;
};

}  // namespace collage
