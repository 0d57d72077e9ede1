// RNN, GRU and LSTM on OpenBLAS (recurrent_kernel.h says what is taken and why).
#include "backends/blas/recurrent_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "backends/blas/fused_group.h"
#include "backends/blas/openblas_info.h"
#include "ops/recurrent_one_sequence.h"

namespace collage::blas {
namespace {

// OpenBLAS's products, of whole directions (one slice: a direction's rows of W and R are
// its rows as ONNX lays them out, read in place): the projections as one sgemm per
// direction (W packed again by every call: OpenBLAS has no packed-weights API), each step's
// as an sgemv, which streams R once.
class BlasProducts : public ops::RecurrentProducts {
 public:
  BlasProducts(const ops::OneSequenceRecurrence& recurrence, const float* x, const float* w,
               const float* r)
      : seq_(recurrence.seq()),
        input_(recurrence.input()),
        hidden_(recurrence.spec().hidden),
        gh_(recurrence.spec().gates() * hidden_),
        x_(x),
        w_(w),
        r_(r) {}

  void project(int d, int, float* out) override {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq_, gh_, input_, 1.0f, x_, input_,
                w_ + d * gh_ * input_, input_, 0.0f, out, gh_);
  }
  void multiply(int d, int, ops::GateBlocks blocks, const float* v, float* out) override {
    // GRU's z and r are its first two blocks, its h the third.
    const int64_t first = blocks == ops::GateBlocks::kGruH ? 2 * hidden_ : 0;
    const int64_t rows = blocks == ops::GateBlocks::kAll     ? gh_
                         : blocks == ops::GateBlocks::kGruZr ? 2 * hidden_
                                                             : hidden_;
    cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, hidden_, 1.0f, r_ + (d * gh_ + first) * hidden_,
                hidden_, v, 1, 0.0f, out, 1);
  }

 private:
  int64_t seq_, input_, hidden_, gh_;
  const float *x_, *w_, *r_;
};

class RecurrentKernel : public Kernel {
 public:
  RecurrentKernel(const Graph& g, const Node& n, int threads)
      : recurrence_(g, n), threads_(threads) {
    auto operand = [&](size_t i, const char* what) {
      return n.input(i) == kNoValue ? std::optional<Operand>() : Operand::of(g, n.input(i), what);
    };
    x_ = *operand(ops::kRecX, "X");
    w_ = *operand(ops::kRecW, "W");
    r_ = *operand(ops::kRecR, "R");
    b_ = operand(ops::kRecB, "B");
    h0_ = operand(ops::kRecInitialH, "initial_h");
    if (recurrence_.spec().cell == ops::RecurrentCell::kLstm) {
      c0_ = operand(ops::kRecInitialC, "initial_c");
      p_ = operand(ops::kRecPeephole, "P");
    }
    for (size_t k = 0; k < 3; ++k)
      out_[k] = k < n.outputs.size() ? output_index(g, n.outputs[k]) : -1;
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    auto out = [&](int k) {
      return out_[k] >= 0 ? static_cast<float*>(outputs[out_[k]].raw()) : nullptr;
    };
    auto in = [&](const std::optional<Operand>& o) { return o ? o->data(inputs) : nullptr; };
    const ops::RecurrentIo io{in(b_), in(h0_), in(c0_), in(p_), out(0), out(1), out(2)};
    BlasProducts products(recurrence_, x_.data(inputs), w_.data(inputs), r_.data(inputs));
    if (recurrence_.directions() == 2 && threads_ >= 2) {
      // The two directions at once, one thread each, OpenBLAS running in the caller: each
      // its own input projection too (one sgemm of both on both threads first ran the
      // LSTM-512 bidirectional node 4.85-5.05 ms a run, against 4.50-4.73 so).
      set_openblas_threads(1);
      recurrence_.run(products, io, threads_);
      set_openblas_threads(threads_);
    } else {
      recurrence_.run(products, io, 1);  // OpenBLAS's threads in each product
    }
  }

 private:
  ops::OneSequenceRecurrence recurrence_;
  int threads_;
  Operand x_, w_, r_;
  std::optional<Operand> b_, h0_, c0_, p_;
  int out_[3] = {-1, -1, -1};  // kernel outputs of Y, Y_h, Y_c
};

}  // namespace

bool recurrent_takes(const Graph& g, const Node& n) {
  return ops::one_sequence_recurrence_takes(g, n);
}

std::unique_ptr<Kernel> compile_recurrent(const Graph& subgraph, int threads) {
  if (subgraph.num_nodes() != 1 || !recurrent_takes(subgraph, subgraph.node(0)))
    fail(ErrorKind::kUnsupported, "blas: not one RNN/GRU/LSTM the kernel computes");
  return std::make_unique<RecurrentKernel>(subgraph, subgraph.node(0), threads);
}

}  // namespace collage::blas
