// Runs a list of compiled steps over one preallocated arena. Everything that can be decided
// before the first run is: every value's Tensor view (arena slot or constant) and every
// step's input/output lists are built once, so a run is a loop of kernel calls.
//
// Steps carry a schedule (stage, lane): the steps of one stage run at the same time, one lane
// per worker thread, each step with its own thread count; stages run one after another. The
// workers are made once, with the executor, and wait between runs: a run creates no thread.
// The memory plan keeps apart every two buffers that can be live at the same time, so
// concurrent steps never share bytes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collage/graph.h"
#include "collage/kernel.h"
#include "collage/session.h"
#include "runtime/candidate.h"

namespace collage {

class LaneWorkers;

struct Step {
  // Shared: the tuner reuses one compiled kernel across the many plans it measures.
  std::shared_ptr<Kernel> kernel;
  std::vector<ValueId> inputs;   // kNoValue for omitted optional inputs
  std::vector<ValueId> outputs;  // kNoValue for omitted optional outputs
  // What it computes and how it was built (backend null inside a GraphKernel; threads 0 =
  // whatever the caller's thread has).
  Candidate candidate;
  int stage = 0;
  int lane = 0;

  std::string backend_name() const;
};

class Executor {
 public:
  // `steps` in execution order: stages non-decreasing; inside a stage, a step reads values
  // of its stage only from earlier steps of its own lane. Throws Error(kInternal) otherwise.
  Executor(const Graph& graph, std::vector<Step> steps);
  ~Executor();

  // Copies `inputs` (graph-input order, exact shapes/dtypes checked) into the arena, runs
  // every step and returns views of the graph outputs (valid until the next run).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // The same, also recording when each step ran (`timings` resized to steps().size()):
  // where a plan's time goes once its kernels run next to each other.
  std::vector<Tensor> run_profiled(const std::vector<Tensor>& inputs,
                                   std::vector<StepTiming>& timings);

  size_t arena_bytes() const { return arena_bytes_; }
  const std::vector<Step>& steps() const { return steps_; }
  // Largest number of lanes of any stage (1: sequential).
  int max_lanes() const { return max_lanes_; }

 private:
  struct Stage {
    // Step indices per lane, in order.
    std::vector<std::vector<size_t>> lanes;
  };
  void check_inputs(const std::vector<Tensor>& inputs) const;
  void copy_inputs(const std::vector<Tensor>& inputs);
  std::vector<Tensor> output_views() const;
  void run_stages(std::vector<StepTiming>* timings);
  void run_lane(const std::vector<size_t>& lane, int worker, std::vector<StepTiming>* timings);

  const Graph& graph_;
  std::vector<Step> steps_;
  std::vector<Stage> stages_;
  int max_lanes_ = 1;
  std::vector<Tensor> value_views_;  // by ValueId
  std::vector<std::vector<Tensor>> step_inputs_, step_outputs_;
  std::byte* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  std::unique_ptr<LaneWorkers> workers_;  // null when every stage has one lane
  double run_start_ = 0;                  // steady-clock ms at the start of a profiled run
};

}  // namespace collage
