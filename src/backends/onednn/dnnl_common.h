// What every onednn kernel shares: the process-wide engine, plain memory descriptors for
// collage's row-major tensors, and Program, a fixed list of primitive executions whose
// boundary memories are re-pointed at the caller's tensors on each run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>
#include <dnnl.hpp>

#include "backends/onednn/lanes.h"
#include "collage/error.h"
#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::onednn {

using Dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& cpu_engine();
std::string library_version();  // "2.6.3"
// What both onednn backends report as their version, part of every cost-DB key: the
// library's, plus a revision of collage's kernels on it, bumped when a fix changes what
// they compute or how fast, so that no cost measured before the fix is reused. r2: pooling
// no longer takes a sum post-op (it dropped the residual). r3: glue ops (Concat, Slice,
// Split, Transpose, channel shuffle, Pad, spatial reductions) in kernels and regions, which
// refused them before; a pool's full-shape post-op operand read in its output's layout.
// r4: onednn-graph regions run a 1x1 conv and the depthwise conv after it as one primitive.
// r6: buffer reuse; r7, r8: concurrent stages inside regions. r9: broadcasts over merged
// dimensions where oneDNN runs the given shape in its reference loop.
// r10: x * HardSigmoid(x, 1/6) fused as HardSwish; PRelu with per-channel slopes.
std::string backend_version();  // "2.6.3+r10"
std::string effective_isa();    // e.g. "avx512_core_bf16"

// A rank-0 shape becomes {1}: oneDNN has no scalars.
Dims to_dims(const Shape& shape);
// float32, row-major (strides of `shape`).
dnnl::memory::desc plain_md(const Shape& shape);
// float32, channels in blocks of 16 (nCw16c, nChw16c, nCdhw16c: what oneDNN's f32 jit
// kernels read and write on AVX-512); `dims` of rank 3 to 5.
dnnl::memory::desc channel_blocked_md(const Dims& dims);
// float32, dense, with `axis` innermost and the other dims in their order outside it (for
// NCHW and axis 1: NHWC).
dnnl::memory::desc axis_innermost_md(const Dims& dims, int axis);
// Left-pads `shape` with ones to `rank` dims (numpy broadcasting alignment).
Shape pad_rank(const Shape& shape, size_t rank);

// "[1,64] strides [192,1]", "[1,64,56,56] strides [..] block 1:16" (dim 1 in blocks of 16):
// what an error names when oneDNN refuses a reorder between two layouts.
std::string md_text(const dnnl::memory::desc& md);

// Every attr we build uses a user scratchpad: oneDNN's library scratchpad is freed and
// reallocated around executions, which costs page faults on each run.
dnnl::primitive_attr base_attr();

// Runs `make` (primitive_desc creation) and turns oneDNN's refusal into
// Error(kUnsupported) naming `what`.
template <typename F>
auto create_pd(const std::string& what, F&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const dnnl::error& e) {
    fail(ErrorKind::kUnsupported, "onednn: {}: {}", what, e.what());
  }
}

// True for oneDNN's reference (plain C++ loop) implementations, and pooling's generic
// "simple_nchw"/"simple_nhwc" loops. A fused kernel (more than one node) that lands on one
// is refused: the same ops unfused run on jit kernels. A single op is kept: the tuner
// measures it against the other backends anyway.
bool is_reference_impl(const std::string& impl_info);
// True for oneDNN's gemm-based convolutions (im2col and a GEMM): slower than its direct
// kernels where those exist, and wrong with some post-ops in channels-last (conv_kernel.cc).
bool is_gemm_impl(const std::string& impl_info);

// This thread's OpenMP count at `threads` while the object lives, restored when it goes (an
// exception leaving the scope too). oneDNN sizes a primitive's partition by the count when
// the primitive is created, and runs one built for a single thread inline only while the
// count is 1 (recurrent_kernel.cc, packed_recurrence.cc).
class OpenMpThreadsInScope {
 public:
  explicit OpenMpThreadsInScope(int threads);
  ~OpenMpThreadsInScope();
  OpenMpThreadsInScope(const OpenMpThreadsInScope&) = delete;
  OpenMpThreadsInScope& operator=(const OpenMpThreadsInScope&) = delete;

 private:
  int saved_;
};

// A compiled sequence of primitive executions over memories created at compile time.
// Kernel inputs/outputs are bound to memories whose data handle is swapped in run(), so
// running allocates nothing.
class Program {
 public:
  Program();

  // A memory that will point at kernel input (output) `index` when the program runs.
  dnnl::memory input(int index, const dnnl::memory::desc& md);
  dnnl::memory output(int index, const dnnl::memory::desc& md);
  // A buffer owned by the program, allocated and touched now; its content stays from run to
  // run (a border filled once, a constant).
  dnnl::memory buffer(const dnnl::memory::desc& md);
  // A buffer that every run writes whole, by the first step that uses it, before any step
  // reads it, and that nothing reads after the last step that uses it. finalize() lets such
  // buffers whose steps do not overlap share memory, so that a run's working set is what is
  // live at once rather than every intermediate of the program (Inception-v3: 98 MiB of
  // them), as ONNX Runtime's arena does.
  dnnl::memory rewritten_buffer(const dnnl::memory::desc& md);
  // Constant data (a plain float32 tensor described by `from`) converted now to `to`.
  dnnl::memory constant(const Tensor& tensor, const dnnl::memory::desc& from,
                        const dnnl::memory::desc& to);
  // `from` itself when it already has layout `md`, else a buffer filled by a reorder step.
  dnnl::memory in_layout(const dnnl::memory& from, const dnnl::memory::desc& md);
  // Adds a reorder step (layout conversion or plain copy): oneDNN's reorder, or collage's
  // own channel transpose where it takes the pair (channel_transpose.h: a few-channel image
  // between channel-first and channels-last), which step_kinds() reports as a reorder too.
  void copy(const dnnl::memory& from, const dnnl::memory& to);
  // Adds an execution of `primitive`; `pd` supplies its scratchpad size.
  void add(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
           std::vector<std::pair<int, dnnl::memory>> args);
  // A step of collage's own code where oneDNN has no primitive for the work (the Winograd
  // transforms, winograd_conv.h). It is called with the step's arguments, bound as a
  // primitive's are (DNNL_ARG_SRC*, DNNL_ARG_DST*: what it reads and writes, which lanes and
  // buffer reuse rely on), and reads their data handles when it runs: they change from run to
  // run. It parallelises with OpenMP unless called inside a team (a lane), like oneDNN, and
  // returns a status instead of throwing (it may run inside an OpenMP region, which no
  // exception may leave). `name` is what implementations() reports for it, `kind` what
  // step_kinds() does (the primitive kind the step stands in for, if any).
  using CustomStep = std::function<dnnl_status_t(const dnnl_exec_arg_t* args, int count)>;
  void add_custom(std::string name, CustomStep step, std::vector<std::pair<int, dnnl::memory>> args,
                  dnnl::primitive::kind kind = dnnl::primitive::kind::undef);
  // The common case: a custom step that reads one float buffer, `src` (DNNL_ARG_SRC), and
  // writes another, `dst` (DNNL_ARG_DST); `run` is given their data each run.
  using UnaryCustomStep = std::function<dnnl_status_t(const float* src, float* dst)>;
  void add_unary_custom(std::string name, UnaryCustomStep run, const dnnl::memory& src,
                        const dnnl::memory& dst,
                        dnnl::primitive::kind kind = dnnl::primitive::kind::undef);

  // A point to roll back to: an emitter that throws after adding steps (a fused group
  // oneDNN refuses late) must not leave half a group in a program that goes on.
  struct Mark {
    size_t inputs = 0, outputs = 0, steps = 0;
  };
  Mark mark() const { return {inputs_.size(), outputs_.size(), steps_.size()}; }
  void rollback(const Mark& mark);

  // How finalize() may run the steps. kMeasured: on more than one thread (this thread's
  // OpenMP count, the kernel's), measures the steps and runs independent ones in concurrent
  // stages where, timed both ways, they are faster (lanes.h). kAlways: every stage where
  // steps can overlap (tests). kVerbose: kMeasured, saying on stderr what it chose. The
  // environment variable COLLAGE_ONEDNN_LANES (off, always, verbose) overrides kMeasured.
  enum class Lanes { kSequential, kMeasured, kAlways, kVerbose };
  // Places the rewritten buffers in one arena by their steps' lifetimes, and allocates the
  // scratchpads the steps use; then chooses the stages. Call once, last. With a `memo`,
  // kMeasured takes the choice made before where it fits (its steps checked on one thread of
  // a team again), and keeps what it measures; kVerbose measures and keeps.
  void finalize(Lanes lanes = Lanes::kSequential, LaneMemo* memo = nullptr);
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs);

  // After finalize(): the bytes of the rewritten buffers, and of the arena they share.
  size_t rewritten_bytes() const;
  size_t arena_bytes() const { return arena_ ? arena_.get_desc().get_size() : 0; }
  // After finalize(): the stages run with lanes (0: every step one after another).
  int concurrent_stages() const;
  // Each step's oneDNN implementation ("jit:uni", "ref:any", ...), in program order: what a
  // test checks to know a kernel did not fall back to oneDNN's reference loops.
  std::vector<std::string> implementations() const;
  // Each step's primitive kind (convolution, concat, reorder, ...), in program order.
  std::vector<dnnl::primitive::kind> step_kinds() const;

 private:
  struct Step {
    dnnl::primitive primitive;  // empty for a custom step
    CustomStep custom;
    std::string custom_name;
    dnnl::primitive::kind custom_kind = dnnl::primitive::kind::undef;
    std::vector<dnnl::memory> memories;  // keeps the handles in `args` alive
    std::vector<dnnl_exec_arg_t> args;
    dnnl::memory::desc scratchpad_md;
    int scratchpad_arg = -1;  // its index in args and memories, once bound
    // In a concurrent stage: the steps of other lanes it waits for.
    std::vector<size_t> waits;
  };
  // A rewritten buffer's address range as allocated, and where finalize() placed it.
  struct RewrittenRange {
    const char* base;
    size_t bytes;
    size_t offset = 0;
  };
  // A memory object of a step inside a rewritten buffer: which one, and where in it.
  struct RewrittenView {
    dnnl::memory memory;
    size_t range;
    size_t offset;
  };
  dnnl::stream stream_;
  std::vector<std::pair<int, dnnl::memory>> inputs_, outputs_;
  std::vector<Step> steps_;

  void find_rewritten_views();
  // Places the rewritten buffers so that two whose steps' spans overlap never share bytes;
  // span[s] = the first and last step position step s may run at (empty: each step at its
  // own position, one after another).
  void place_rewritten_buffers(const std::vector<std::pair<size_t, size_t>>& span);
  void bind_scratchpads();
  // Binds `args` to `step` (the memories kept alive beside their handles) and appends it.
  void push_step(Step step, const std::vector<std::pair<int, dnnl::memory>>& args);
  dnnl_status_t execute(size_t step, dnnl::stream& stream);
  // Runs `step` with `args` (its own, or stand-ins for them): its primitive or custom code.
  static dnnl_status_t execute_with(const Step& step, dnnl::stream& stream,
                                    const std::vector<dnnl_exec_arg_t>& args);
  void run_steps(size_t begin, size_t end);
  void run_lanes(size_t stage);

  static void check(dnnl_status_t status);  // throws kBackend for a failed execution

  // Lanes (program_lanes.cc).
  // Scratch memory standing in for the kernel's inputs and outputs while finalize() measures.
  class ScratchBinding {
   public:
    explicit ScratchBinding(Program& program);
    void bind();

   private:
    Program& program_;
    std::vector<dnnl::memory> data_;
    std::map<int, void*> inputs_, outputs_;
  };
  // The buffers each step reads and writes; nullopt when a memory is not the program's.
  std::optional<std::vector<StepAccess>> step_accesses() const;
  // Per step: computes the same on one thread of a team as alone (checked by running it).
  std::vector<bool> narrow_safe_steps(int threads);
  // Per step, its timed passes so far on every thread and on one.
  struct StepTimes {
    std::vector<std::vector<double>> wide, narrow;
  };
  // Adds `runs` timed passes to `times` (after one untimed pass of the program when `times`
  // has none) and returns each step's medians over all of them.
  std::vector<StepCost> measure_step_costs(int threads, int runs, StepTimes& times);
  double team_start_ms(int threads);
  // The concurrent stages measured faster than their steps one by one; the rest sequential.
  struct MeasuredStages {
    std::vector<LaneStage> stages;
    int concurrent = 0;
    double saved_ms = 0;  // by the concurrent ones
  };
  MeasuredStages stages_measured_faster();
  void report_lanes(const std::vector<std::vector<size_t>>& preds,
                    const std::vector<StepCost>& costs, int threads, double overhead_ms,
                    const LanePlan& plan, bool measured_fully, const MeasuredStages& kept) const;
  void choose_lanes(Lanes lanes, LaneMemo* memo);
  void apply_lanes(const std::vector<LaneStage>& stages,
                   const std::vector<std::vector<size_t>>& preds);
  void drop_lanes();

  std::vector<dnnl::memory> buffers_;
  std::vector<dnnl::memory> rewritten_;  // also in buffers_
  std::vector<RewrittenRange> ranges_;
  std::vector<RewrittenView> views_;
  dnnl::memory arena_;
  std::vector<dnnl::memory> scratchpads_;  // one per lane
  std::vector<dnnl::stream> lane_streams_;
  struct Stage {
    size_t begin = 0, end = 0;
    std::vector<std::vector<size_t>> lanes;  // empty: one after another
  };
  std::vector<Stage> stages_;
  std::vector<size_t> lane_of_step_;
  std::unique_ptr<std::atomic<uint64_t>[]> done_;  // the run that finished each step
  uint64_t epoch_ = 0;
};

class ProgramKernel : public Kernel {
 public:
  explicit ProgramKernel(Program program, Program::Lanes lanes = Program::Lanes::kSequential,
                         LaneMemo* memo = nullptr)
      : program_(std::move(program)) {
    program_.finalize(lanes, memo);
  }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    program_.run(inputs, outputs);
  }
  const Program& program() const { return program_; }

 private:
  Program program_;
};

// Runs item(0) .. item(items - 1) of a custom step over the calling thread's OpenMP team,
// statically split; on this thread alone inside a parallel region (a lane of a concurrent
// stage runs its steps on one thread each) or for a single item.
template <typename Item>
void for_each_item(int64_t items, const Item& item) {
  if (omp_in_parallel() || items == 1) {
    for (int64_t i = 0; i < items; ++i) item(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < items; ++i) item(i);
}

// The float data of argument `arg` of a custom step's `args` (as Program::add_custom bound
// them), or nullptr when the step has no such argument.
float* custom_step_data(const dnnl_exec_arg_t* args, int count, int arg);
// The stride of each dim of `md` when its layout has no inner blocks (row-major,
// channels-last, any order of whole dims), its offset aside; else nullopt.
std::optional<Dims> plain_strides(const dnnl::memory::desc& md);
// Whether memory `m` holds `numel` float32 elements one after another from its data handle
// on (no offset, no gaps, no padding): what a custom step walking its buffer as a flat array
// (custom_step_data) may be given.
bool flat_f32(const dnnl::memory& m, int64_t numel);

// Whether `v` is one of `g`'s outputs.
bool is_graph_output(const Graph& g, ValueId v);
// The node that reads `v` alone (in the default domain), where `v` is not a graph output;
// else -1. A decomposed normalization's interior values have one.
NodeId sole_reader(const Graph& g, const std::vector<std::vector<NodeId>>& consumers, ValueId v);
// Index of `value` in subgraph.inputs, or -1.
int input_index(const Graph& subgraph, ValueId value);
// Whether `v` is a value (not kNoValue) of type float32.
bool is_f32(const Graph& g, ValueId v);
// Throws kUnsupported unless `value` is float32.
void require_f32(const Graph& graph, ValueId value, const char* what);
// True when `md` is dense row-major over its own dims (what plain_md describes).
bool is_plain(const dnnl::memory::desc& md);

}  // namespace collage::onednn
