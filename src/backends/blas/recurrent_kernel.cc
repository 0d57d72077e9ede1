// RNN, GRU and LSTM on OpenBLAS (recurrent_kernel.h says what is taken and why).
#include "backends/blas/recurrent_kernel.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "backends/blas/fast_math.h"
#include "backends/blas/fused_group.h"
#include "backends/blas/openblas_info.h"
#include "ops/recurrent.h"

namespace collage::blas {
namespace {

using ops::RecurrentCell;
using ops::RecurrentSpec;

// y[rows] = beta * y + M[rows, k] . v[k], M row-major: an sgemv streams M once.
void add_product(int64_t rows, int64_t k, const float* m, const float* v, float* y,
                 float beta = 1.0f) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, k, 1.0f, m, k, v, 1, beta, y, 1);
}

class RecurrentKernel : public Kernel {
 public:
  RecurrentKernel(const Graph& g, const Node& n, int threads)
      : spec_(ops::recurrent_spec(g, n)), threads_(threads) {
    // One sequence (recurrent_takes): X is [seq, 1, input], Y [seq, directions, 1, hidden].
    const ops::RecurrentDims dims = ops::recurrent_dims(spec_, g.value(n.input(ops::kRecX)).shape);
    seq_ = dims.seq;
    input_ = dims.input;
    hidden_ = spec_.hidden;
    dirs_ = spec_.directions;
    gates_ = spec_.gates();
    auto operand = [&](size_t i, const char* what) {
      return n.input(i) == kNoValue ? std::optional<Operand>() : Operand::of(g, n.input(i), what);
    };
    x_ = *operand(ops::kRecX, "X");
    w_ = *operand(ops::kRecW, "W");
    r_ = *operand(ops::kRecR, "R");
    b_ = operand(ops::kRecB, "B");
    h0_ = operand(ops::kRecInitialH, "initial_h");
    if (spec_.cell == RecurrentCell::kLstm) {
      c0_ = operand(ops::kRecInitialC, "initial_c");
      p_ = operand(ops::kRecPeephole, "P");
    }
    for (size_t k = 0; k < 3; ++k)
      out_[k] = k < n.outputs.size() ? output_index(g, n.outputs[k]) : -1;
    // Scratch per direction, touched once here: the input projections of every step, the
    // states and the cell's temporaries.
    for (int d = 0; d < dirs_; ++d) {
      Direction& dir = directions_.emplace_back();
      dir.projections.assign(seq_ * gates_ * hidden_, 0.0f);
      dir.h.assign(hidden_, 0.0f);
      dir.c.assign(hidden_, 0.0f);
      dir.temp.assign(hidden_, 0.0f);
      dir.input_bias.assign(gates_ * hidden_, 0.0f);
      dir.recurrent_bias.assign(hidden_, 0.0f);
      dir.peephole.assign(3 * hidden_, 0.0f);
    }
  }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    auto out = [&](int k) {
      return out_[k] >= 0 ? static_cast<float*>(outputs[out_[k]].raw()) : nullptr;
    };
    float *y = out(0), *y_h = out(1), *y_c = out(2);
    for (int d = 0; d < dirs_; ++d) prepare(d, inputs);
    if (dirs_ == 2 && threads_ >= 2) {
      // The two directions at once, one thread each, OpenBLAS running in the caller: each
      // its own input projection too (one sgemm of both on both threads first ran the
      // LSTM-512 bidirectional node 4.85-5.05 ms a run, against 4.50-4.73 so).
      set_openblas_threads(1);
#pragma omp parallel num_threads(2)
      for (int d = omp_get_thread_num(); d < dirs_; d += omp_get_num_threads()) {
        project(d, inputs);
        recur(d, inputs, y);
      }
      set_openblas_threads(threads_);
    } else {
      for (int d = 0; d < dirs_; ++d) {
        project(d, inputs);
        recur(d, inputs, y);
      }
    }
    const int64_t h = hidden_;
    for (int d = 0; d < dirs_; ++d) {
      if (y_h) std::copy_n(directions_[d].h.data(), h, y_h + d * h);
      if (y_c) std::copy_n(directions_[d].c.data(), h, y_c + d * h);
    }
  }

 private:
  struct Direction {
    std::vector<float> projections;  // [seq, gates * hidden]
    std::vector<float> h, c, temp;
    std::vector<float> input_bias;      // added to every step's projection
    std::vector<float> recurrent_bias;  // GRU with linear_before_reset: Rbh, inside r * (...)
    std::vector<float> peephole;        // LSTM: i, o, f (zeros without P)
  };

  // The direction's initial states, biases and peepholes for this run.
  void prepare(int d, std::span<const Tensor> inputs) {
    Direction& dir = directions_[d];
    const int64_t h = hidden_, gh = gates_ * h;
    if (h0_)
      std::copy_n(h0_->data(inputs) + d * h, h, dir.h.data());
    else
      std::fill(dir.h.begin(), dir.h.end(), 0.0f);
    if (c0_)
      std::copy_n(c0_->data(inputs) + d * h, h, dir.c.data());
    else
      std::fill(dir.c.begin(), dir.c.end(), 0.0f);
    if (p_) std::copy_n(p_->data(inputs) + d * 3 * h, 3 * h, dir.peephole.data());
    if (!b_) return;
    // B is [D, 2*G*H]: Wb then Rb. Rb joins Wb outside the cell except GRU's candidate
    // with linear_before_reset, where ONNX adds it inside the reset product.
    const float* wb = b_->data(inputs) + d * 2 * gh;
    const float* rb = wb + gh;
    const bool lbr = spec_.cell == RecurrentCell::kGru && spec_.linear_before_reset;
    for (int64_t j = 0; j < gh; ++j) dir.input_bias[j] = wb[j] + (lbr && j >= 2 * h ? 0.0f : rb[j]);
    if (lbr) std::copy_n(rb + 2 * h, h, dir.recurrent_bias.data());
  }

  // Every step's input projection for direction `d` (W is [D, G*H, I]).
  void project(int d, std::span<const Tensor> inputs) {
    const int64_t gh = gates_ * hidden_;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq_, gh, input_, 1.0f, x_.data(inputs),
                input_, w_.data(inputs) + d * gh * input_, input_, 0.0f,
                directions_[d].projections.data(), gh);
  }

  // Runs direction `d` through every step, writing its hidden states into `y`.
  void recur(int d, std::span<const Tensor> inputs, float* y) {
    Direction& dir = directions_[d];
    const int64_t h = hidden_, gh = gates_ * h;
    const float* r = r_.data(inputs) + d * gh * h;
    const bool reverse = spec_.reverse || d == 1;
    for (int64_t s = 0; s < seq_; ++s) {
      const int64_t t = reverse ? seq_ - 1 - s : s;
      float* g = dir.projections.data() + t * gh;
      const float* bias = dir.input_bias.data();
      for (int64_t j = 0; j < gh; ++j) g[j] += bias[j];
      if (spec_.cell == RecurrentCell::kGru)
        gru_step(dir, r, g);
      else
        lstm_or_rnn_step(dir, r, g);
      if (y) std::copy_n(dir.h.data(), h, y + (t * dirs_ + d) * h);
    }
  }

  // g: the step's gate pre-activations (input projection and biases), G*H floats.
  void lstm_or_rnn_step(Direction& dir, const float* r, float* g) {
    const int64_t h = hidden_;
    add_product(gates_ * h, h, r, dir.h.data(), g);
    float* hs = dir.h.data();
    if (spec_.cell == RecurrentCell::kRnn) {
      for (int64_t j = 0; j < h; ++j) hs[j] = fast_tanh(g[j]);
      return;
    }
    // ONNX's gate blocks: i, o, f, c; peepholes i, o, f.
    float* cs = dir.c.data();
    const float *pi = dir.peephole.data(), *po = pi + h, *pf = po + h;
    for (int64_t j = 0; j < h; ++j) {
      const float i = fast_sigmoid(g[j] + pi[j] * cs[j]);
      const float f = fast_sigmoid(g[2 * h + j] + pf[j] * cs[j]);
      const float c = f * cs[j] + i * fast_tanh(g[3 * h + j]);
      const float o = fast_sigmoid(g[h + j] + po[j] * c);
      cs[j] = c;
      hs[j] = o * fast_tanh(c);
    }
  }

  // GRU, gate blocks z, r, h: z and r from one product; the candidate's recurrent term
  // r * (H Rh^T + Rbh) with linear_before_reset, else (r * H) Rh^T.
  void gru_step(Direction& dir, const float* r, float* g) {
    const int64_t h = hidden_;
    const float* rh = r + 2 * h * h;
    float *hs = dir.h.data(), *temp = dir.temp.data();
    add_product(2 * h, h, r, hs, g);
    if (spec_.linear_before_reset) {
      add_product(h, h, rh, hs, temp, 0.0f);
      const float* rb = dir.recurrent_bias.data();
      for (int64_t j = 0; j < h; ++j) temp[j] = fast_sigmoid(g[h + j]) * (temp[j] + rb[j]);
      for (int64_t j = 0; j < h; ++j) g[2 * h + j] += temp[j];
    } else {
      for (int64_t j = 0; j < h; ++j) temp[j] = fast_sigmoid(g[h + j]) * hs[j];
      add_product(h, h, rh, temp, g + 2 * h);  // the candidate's block takes (r * H) Rh^T
    }
    for (int64_t j = 0; j < h; ++j) {
      const float z = fast_sigmoid(g[j]);
      hs[j] = (1.0f - z) * fast_tanh(g[2 * h + j]) + z * hs[j];
    }
  }

  RecurrentSpec spec_;
  int threads_;
  int64_t seq_ = 0, input_ = 0, hidden_ = 0;
  int dirs_ = 1, gates_ = 1;
  Operand x_, w_, r_;
  std::optional<Operand> b_, h0_, c0_, p_;
  int out_[3] = {-1, -1, -1};  // kernel outputs of Y, Y_h, Y_c
  std::vector<Direction> directions_;
};

}  // namespace

bool recurrent_takes(const Graph& g, const Node& n) {
  const std::optional<RecurrentSpec> s = ops::float32_recurrent_spec(g, n);
  if (!s || s->batch_major || !s->default_functions() || !ops::every_sequence_full(g, n))
    return false;
  // One sequence (recurrent_kernel.h: with more, the products would pack R every step).
  const Shape& x = g.value(n.input(ops::kRecX)).shape;
  return shape_numel(x) > 0 && ops::recurrent_dims(*s, x).batch == 1;
}

std::unique_ptr<Kernel> compile_recurrent(const Graph& subgraph, int threads) {
  if (subgraph.num_nodes() != 1 || !recurrent_takes(subgraph, subgraph.node(0)))
    fail(ErrorKind::kUnsupported, "blas: not one RNN/GRU/LSTM the kernel computes");
  return std::make_unique<RecurrentKernel>(subgraph, subgraph.node(0), threads);
}

}  // namespace collage::blas
