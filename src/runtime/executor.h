// Runs a list of compiled steps over one preallocated arena. Everything that can be decided
// before the first run is: every value's Tensor view (arena slot or constant) and every
// step's input/output lists are built once, so a run is a loop of kernel calls.
//
// Steps carry a schedule (stage, lane): the steps of one stage run at the same time, one lane
// per worker thread, each step with its own thread count; stages run one after another. The
// workers are made once, with the executor, and wait between runs: a run creates no thread.
// The memory plan keeps apart every two buffers that can be live at the same time, so
// concurrent steps never share bytes.
//
// Devices: a step whose backend has a device (Backend::device()) reads and writes that
// device's memory. A value lives where its producer ran (graph inputs and constants on the
// host) and gets a copy on every other device that reads it, made right before its first
// reader there (before the whole stage when that reader is in a concurrent stage and the value
// comes from an earlier one); a graph output computed on a device is copied to the host at
// the end of the run. Each device has one arena, planned by liveness like the host's and
// allocated once; constants a device step reads are uploaded once, when the executor is made.
// A plan without device steps has no copies and no device arena: it runs as before.
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
class Device;

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

  // Runs every step on `inputs` (graph-input order, exact shapes/dtypes checked) and returns
  // views of the graph outputs (valid until the next run). The steps read an input of 1 MiB
  // or more where the caller holds it when its data is 64-byte aligned (kernels then get
  // what the arena would give them); other inputs, and one that is also a graph output or
  // goes to a device, are copied into the arena first. The steps never write their inputs.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // The same, also recording when each step ran (`timings` resized to steps().size()):
  // where a plan's time goes once its kernels run next to each other.
  std::vector<Tensor> run_profiled(const std::vector<Tensor>& inputs,
                                   std::vector<StepTiming>& timings);

  size_t arena_bytes() const { return arena_bytes_; }
  // Bytes of `device`'s arena (0 when no step runs on it).
  size_t device_arena_bytes(const Device* device) const;
  // Where each value's copies go, in run order, for tests and profiles.
  struct CopyInfo {
    ValueId value = kNoValue;
    const Device* device = nullptr;  // the device copied to or from
    bool to_host = false;
    int before_step = -1;       // the step it runs before; -1: at the end of the run
    bool before_stage = false;  // ahead of the whole (concurrent) stage of before_step
  };
  const std::vector<CopyInfo>& copies() const { return copy_info_; }
  // The tensor a step reads or writes (device memory for a device step).
  const std::vector<Tensor>& step_input_views(size_t step) const { return step_inputs_[step]; }
  const std::vector<Tensor>& step_output_views(size_t step) const { return step_outputs_[step]; }
  const std::vector<Step>& steps() const { return steps_; }
  // Largest number of lanes of any stage (1: sequential).
  int max_lanes() const { return max_lanes_; }

 private:
  // One copy between the host and a device, resolved to addresses.
  struct CopyOp {
    Device* device = nullptr;
    bool to_host = false;
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
  };
  struct Stage {
    // Step indices per lane, in order.
    std::vector<std::vector<size_t>> lanes;
    std::vector<CopyOp> copies_before;  // run on the calling thread before the lanes start
  };
  static void run_copies(const std::vector<CopyOp>& copies);
  void check_inputs(const std::vector<Tensor>& inputs) const;
  // Points the steps at each input (the caller's tensor, or its arena copy: above).
  void bind_inputs(const std::vector<Tensor>& inputs);
  std::vector<Tensor> output_views() const;
  void run_stages(std::vector<StepTiming>* timings);
  void run_lane(const std::vector<size_t>& lane, int worker, std::vector<StepTiming>* timings);

  const Graph& graph_;
  std::vector<Step> steps_;
  std::vector<Stage> stages_;
  int max_lanes_ = 1;
  std::vector<Tensor> value_views_;  // by ValueId
  std::vector<std::vector<Tensor>> step_inputs_, step_outputs_;
  // Per graph input: where host steps read it (step, input position), and whether they may
  // read the caller's tensor in place (large, not a graph output, not copied to a device).
  struct InputReads {
    std::vector<std::pair<size_t, size_t>> reads;
    bool in_place = false;
  };
  std::vector<InputReads> input_reads_;
  std::byte* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  std::unique_ptr<LaneWorkers> workers_;  // null when every stage has one lane
  // Devices (empty for a host-only plan): the device of each step (null = host), each
  // device's arena, copies before each step and at the end, constants uploaded once.
  std::vector<Device*> step_device_;
  std::vector<Device*> devices_;
  std::vector<void*> device_arenas_;  // parallel to devices_
  std::vector<size_t> device_arena_bytes_;
  std::vector<std::vector<CopyOp>> copies_before_step_;
  std::vector<CopyOp> copies_at_end_;
  std::vector<std::pair<Device*, void*>> uploaded_constants_;
  std::vector<CopyInfo> copy_info_;
  double run_start_ = 0;  // steady-clock ms at the start of a profiled run
};

}  // namespace collage
