// One sequence's RNN, GRU or LSTM as oneDNN matmuls with packed weights
// (packed_recurrence.h says why and what is taken).
#include "backends/onednn/packed_recurrence.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/onednn/dnnl_common.h"
#include "ops/recurrent_one_sequence.h"

namespace collage::onednn {
namespace {

// y[m, n] = v[m, k] . B[k, n], B given as its [n, k] row-major rows (a slice's rows of W or
// R) and packed now into the layout the primitive picks. v and y are set per call; one thread
// uses an object at a time.
class PackedMatmul {
 public:
  PackedMatmul(int64_t m, int64_t k, int64_t n, const std::vector<float>& b_rows,
               const std::string& what) {
    const dnnl::memory::desc src({m, k}, dt::f32, tag::ab), dst({m, n}, dt::f32, tag::ab);
    pd_ = create_pd(what, [&] {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(src, dnnl::memory::desc({k, n}, dt::f32, tag::any), dst), base_attr(),
          cpu_engine());
    });
    primitive_ = dnnl::matmul(pd_);
    dnnl::memory rows({{k, n}, dt::f32, tag::ba}, cpu_engine(), const_cast<float*>(b_rows.data()));
    weights_ = dnnl::memory(pd_.weights_desc(), cpu_engine());
    dnnl::stream stream(cpu_engine());
    dnnl::reorder(rows, weights_).execute(stream, rows, weights_);
    stream.wait();
    src_ = dnnl::memory(pd_.src_desc(), cpu_engine(), nullptr);
    dst_ = dnnl::memory(pd_.dst_desc(), cpu_engine(), nullptr);
    scratchpad_ = dnnl::memory(pd_.scratchpad_desc(), cpu_engine());
    args_ = {{DNNL_ARG_SRC, src_.get()},
             {DNNL_ARG_WEIGHTS, weights_.get()},
             {DNNL_ARG_DST, dst_.get()},
             {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}};
  }

  dnnl_status_t run(const dnnl::stream& stream, const float* v, float* y) {
    dnnl_status_t status = dnnl_memory_set_data_handle(src_.get(), const_cast<float*>(v));
    if (status == dnnl_success) status = dnnl_memory_set_data_handle(dst_.get(), y);
    if (status == dnnl_success)
      status = dnnl_primitive_execute(primitive_.get(), stream.get(),
                                      static_cast<int>(args_.size()), args_.data());
    return status;
  }

 private:
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul primitive_;
  dnnl::memory weights_, src_, dst_, scratchpad_;
  std::vector<dnnl_exec_arg_t> args_;
};

// The products of ops::OneSequenceRecurrence as those matmuls, built for one thread: per
// slice of a direction its projection (m = seq) and one matmul of one row per block of R a
// step multiplies.
class PackedProducts : public ops::RecurrentProducts {
 public:
  // W [D, G*H, I] and R [D, G*H, H] are the node's constants.
  PackedProducts(const ops::OneSequenceRecurrence& recurrence, const float* w, const float* r,
                 const std::string& what)
      : slices_(recurrence.slices()) {
    const ops::RecurrentSpec& s = recurrence.spec();
    const int64_t h = s.hidden, in = recurrence.input();
    for (int d = 0; d < recurrence.directions(); ++d)
      for (int sl = 0; sl < slices_; ++sl) {
        const int64_t units = recurrence.slice_units(sl);
        Part& part = parts_.emplace_back(
            Part{PackedMatmul(recurrence.seq(), in, s.gates() * units,
                              recurrence.slice_rows(w, in, d, sl, ops::GateBlocks::kAll),
                              what + " projection"),
                 {},
                 dnnl::stream(cpu_engine())});
        for (ops::GateBlocks blocks : recurrence.step_blocks()) {
          const std::vector<float> rows = recurrence.slice_rows(r, h, d, sl, blocks);
          part.recurrent.emplace_back(
              blocks, PackedMatmul(1, h, static_cast<int64_t>(rows.size()) / h, rows,
                                   what + " recurrence"));
        }
      }
  }

  // The first failure of this run's matmuls (dnnl_success when none), cleared.
  dnnl_status_t take_status() {
    dnnl_status_t status = dnnl_success;
    for (Part& part : parts_) {
      if (status == dnnl_success) status = part.status;
      part.status = dnnl_success;
    }
    return status;
  }
  void set_input(const float* x) { x_ = x; }

  void project(int d, int slice, float* out) override {
    Part& part = parts_[d * slices_ + slice];
    keep(part, part.projection.run(part.stream, x_, out));
  }
  void multiply(int d, int slice, ops::GateBlocks blocks, const float* v, float* out) override {
    Part& part = parts_[d * slices_ + slice];
    for (auto& [built, matmul] : part.recurrent)
      if (built == blocks) return keep(part, matmul.run(part.stream, v, out));
    keep(part, dnnl_invalid_arguments);  // blocks the constructor did not build
  }

 private:
  struct Part {
    PackedMatmul projection;
    std::vector<std::pair<ops::GateBlocks, PackedMatmul>> recurrent;
    dnnl::stream stream;
    dnnl_status_t status = dnnl_success;
  };
  static void keep(Part& part, dnnl_status_t status) {
    if (part.status == dnnl_success) part.status = status;
  }

  int slices_;
  std::vector<Part> parts_;  // direction after direction, slice after slice
  const float* x_ = nullptr;
};

// How many slices a direction's hidden units are cut into: a thread's each where the kernel's
// threads go round the directions, of 64 units at least. Measured (2026-12-07, 2 threads, 50
// steps, one slice against two): an LSTM of 64 units 0.060 against 0.080 ms, of 128 units
// 0.155 against 0.134, of 256 units 0.62-0.64 against 0.33-0.34 (its R, 1 MB, stays in the
// two cores' L2 halves); a GRU of 32 units 0.027 against 0.061.
int slices_for(const Graph& sub, const Node& n, int threads) {
  const ops::RecurrentSpec s = ops::recurrent_spec(sub, n);
  constexpr int64_t kMinUnits = 64;
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(threads / s.directions, s.hidden / kMinUnits)));
}

// The step: the recurrence and its products.
class PackedRecurrenceStep {
 public:
  PackedRecurrenceStep(const Graph& sub, const Node& n, int threads)
      : threads_(threads),
        recurrence_(sub, n, slices_for(sub, n, threads)),
        products_(recurrence_, sub.value(n.input(ops::kRecW)).constant.data<float>(),
                  sub.value(n.input(ops::kRecR)).constant.data<float>(),
                  fmt::format("{} '{}'", n.op_type, n.name)) {}

  // Arguments as emit_packed_recurrence binds them. Called inside a team (a lane), the slices
  // run one after another on the calling thread.
  dnnl_status_t run(const dnnl_exec_arg_t* args, int count) {
    auto data = [&](int arg) { return custom_step_data(args, count, arg); };
    products_.set_input(data(DNNL_ARG_SRC_LAYER));
    const ops::RecurrentIo io{data(DNNL_ARG_BIAS),       data(DNNL_ARG_SRC_ITER),
                              data(DNNL_ARG_SRC_ITER_C), data(DNNL_ARG_WEIGHTS_PEEPHOLE),
                              data(DNNL_ARG_DST_LAYER),  data(DNNL_ARG_DST_ITER),
                              data(DNNL_ARG_DST_ITER_C)};
    // The matmuls were built for one thread, and run on one only with this thread's OpenMP
    // count at 1 (else oneDNN partitions for the count it reads: a GRU of 32 units, 50 steps,
    // one slice, 0.275 ms against 0.022); the team's threads inherit the count.
    const OpenMpThreadsInScope alone(1);
    recurrence_.run(products_, io, threads_);
    return products_.take_status();
  }

 private:
  int threads_;
  ops::OneSequenceRecurrence recurrence_;
  PackedProducts products_;
};

}  // namespace

bool packed_recurrence_takes(const Graph& g, const Node& n) {
  return ops::one_sequence_recurrence_takes(g, n) && g.value(n.input(ops::kRecW)).is_constant() &&
         g.value(n.input(ops::kRecR)).is_constant();
}

void emit_packed_recurrence(const Graph& sub, ValueMemories& values) {
  if (sub.num_nodes() != 1 || !packed_recurrence_takes(sub, sub.node(0)))
    fail(ErrorKind::kUnsupported, "onednn: not one RNN/GRU/LSTM of one sequence, W and R constant");
  const Node& n = sub.node(0);
  Program& program = values.program();
  std::vector<std::pair<int, dnnl::memory>> args;
  // An input read row-major: a constant copied in now, a computed one as the region has it.
  auto bind_input = [&](int arg, ValueId v) {
    if (v == kNoValue) return;
    const Value& value = sub.value(v);
    const dnnl::memory::desc md = plain_md(value.shape);
    const dnnl::memory m =
        value.is_constant() ? program.constant(value.constant, md, md) : values.read(v, md);
    if (!flat_f32(m, shape_numel(value.shape)))
      fail(ErrorKind::kInternal, "onednn: recurrence input in a layout it can't walk");
    args.emplace_back(arg, m);
  };
  bind_input(DNNL_ARG_SRC_LAYER, n.input(ops::kRecX));
  bind_input(DNNL_ARG_BIAS, n.input(ops::kRecB));
  bind_input(DNNL_ARG_SRC_ITER, n.input(ops::kRecInitialH));
  bind_input(DNNL_ARG_SRC_ITER_C, n.input(ops::kRecInitialC));
  bind_input(DNNL_ARG_WEIGHTS_PEEPHOLE, n.input(ops::kRecPeephole));
  // Outputs row-major in ONNX's layouts (Y [seq, D, 1, H], Y_h and Y_c [D, 1, H]).
  std::vector<std::pair<ValueId, dnnl::memory>> produced;
  const int out_args[3] = {DNNL_ARG_DST_LAYER, DNNL_ARG_DST_ITER, DNNL_ARG_DST_ITER_C};
  for (size_t k = 0; k < n.outputs.size() && k < 3; ++k) {
    const ValueId v = n.outputs[k];
    if (v == kNoValue) continue;
    const Shape& shape = sub.value(v).shape;
    const dnnl::memory m = values.destination(v, plain_md(shape));
    if (!flat_f32(m, shape_numel(shape)))
      fail(ErrorKind::kInternal, "onednn: recurrence output in a layout it can't walk");
    args.emplace_back(out_args[k], m);
    produced.emplace_back(v, m);
  }
  // The matmuls are built for one thread: each runs on a thread of the recurrence's team
  // (oneDNN sizes its partition by the calling thread's OpenMP count).
  const int threads = omp_get_max_threads();
  const std::shared_ptr<PackedRecurrenceStep> step = [&] {
    const OpenMpThreadsInScope alone(1);
    return std::make_shared<PackedRecurrenceStep>(sub, n, threads);
  }();
  program.add_custom(
      kPackedRecurrenceStep,
      [step](const dnnl_exec_arg_t* a, int count) { return step->run(a, count); }, std::move(args),
      dnnl::primitive::kind::rnn);
  for (const auto& [v, m] : produced) values.produced(v, m);
}

}  // namespace collage::onednn
