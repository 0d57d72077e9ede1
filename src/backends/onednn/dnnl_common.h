// What every onednn kernel shares: the process-wide engine, plain memory descriptors for
// collage's row-major tensors, and Program, a fixed list of primitive executions whose
// boundary memories are re-pointed at the caller's tensors on each run.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dnnl.hpp>

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
std::string backend_version();  // "2.6.3+r6"
std::string effective_isa();    // e.g. "avx512_core_bf16"

// A rank-0 shape becomes {1}: oneDNN has no scalars.
Dims to_dims(const Shape& shape);
// float32, row-major (strides of `shape`).
dnnl::memory::desc plain_md(const Shape& shape);
// Left-pads `shape` with ones to `rank` dims (numpy broadcasting alignment).
Shape pad_rank(const Shape& shape, size_t rank);

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

// True for oneDNN's reference (plain C++ loop) implementations. A fused kernel (more than
// one node) that lands on one is refused: the same ops unfused run on jit kernels. A single
// op is kept: the tuner measures it against the other backends anyway.
bool is_reference_impl(const std::string& impl_info);

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
  // Adds a reorder step (layout conversion or plain copy).
  void copy(const dnnl::memory& from, const dnnl::memory& to);
  // Adds an execution of `primitive`; `pd` supplies its scratchpad size.
  void add(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
           std::vector<std::pair<int, dnnl::memory>> args);

  // A point to roll back to: an emitter that throws after adding steps (a fused group
  // oneDNN refuses late) must not leave half a group in a program that goes on.
  struct Mark {
    size_t inputs = 0, outputs = 0, steps = 0;
  };
  Mark mark() const { return {inputs_.size(), outputs_.size(), steps_.size()}; }
  void rollback(const Mark& mark);

  // Places the rewritten buffers in one arena by their steps' lifetimes, and allocates the
  // scratchpad the steps share (they run one after another). Call once, last.
  void finalize();
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs);

  // After finalize(): the bytes of the rewritten buffers, and of the arena they share.
  size_t rewritten_bytes() const;
  size_t arena_bytes() const { return arena_ ? arena_.get_desc().get_size() : 0; }

 private:
  struct Step {
    dnnl::primitive primitive;
    std::vector<dnnl::memory> memories;  // keeps the handles in `args` alive
    std::vector<dnnl_exec_arg_t> args;
    dnnl::memory::desc scratchpad_md;
  };
  dnnl::stream stream_;
  std::vector<std::pair<int, dnnl::memory>> inputs_, outputs_;
  std::vector<Step> steps_;
  void share_rewritten_buffers();

  std::vector<dnnl::memory> buffers_;
  std::vector<dnnl::memory> rewritten_;  // also in buffers_
  dnnl::memory scratchpad_, arena_;
};

class ProgramKernel : public Kernel {
 public:
  explicit ProgramKernel(Program program) : program_(std::move(program)) { program_.finalize(); }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    program_.run(inputs, outputs);
  }

 private:
  Program program_;
};

// Index of `value` in subgraph.inputs, or -1.
int input_index(const Graph& subgraph, ValueId value);
// Throws kUnsupported unless `value` is float32.
void require_f32(const Graph& graph, ValueId value, const char* what);
// True when `md` is dense row-major over its own dims (what plain_md describes).
bool is_plain(const dnnl::memory::desc& md);

}  // namespace collage::onednn
