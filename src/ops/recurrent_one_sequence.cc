// One sequence's recurrence around a backend's products (recurrent_one_sequence.h).
#include "ops/recurrent_one_sequence.h"

#include <omp.h>

#include <algorithm>

#include "collage/error.h"
#include "util/fast_math.h"

namespace collage::ops {

bool one_sequence_recurrence_takes(const Graph& g, const Node& n) {
  const std::optional<RecurrentSpec> s = float32_recurrent_spec(g, n);
  if (!s || s->batch_major || !s->default_functions() || !every_sequence_full(g, n)) return false;
  const Shape& x = g.value(n.input(kRecX)).shape;
  return shape_numel(x) > 0 && recurrent_dims(*s, x).batch == 1;
}

OneSequenceRecurrence::OneSequenceRecurrence(const Graph& g, const Node& n, int slices)
    : spec_(recurrent_spec(g, n)) {
  const RecurrentDims dims = recurrent_dims(spec_, g.value(n.input(kRecX)).shape);
  seq_ = dims.seq;
  input_ = dims.input;
  hidden_ = spec_.hidden;
  gates_ = spec_.gates();
  if (slices < 1 || slices > hidden_)
    fail(ErrorKind::kInternal, "recurrence: {} slices of {} hidden units", slices, hidden_);
  slices_ = slices;
  blocks_ = step_blocks();
  // Scratch, touched once here.
  for (int d = 0; d < spec_.directions; ++d) {
    Shared& sh = shared_.emplace_back();
    sh.h[0].assign(hidden_, 0.0f);
    sh.h[1].assign(hidden_, 0.0f);
    sh.reset_h.assign(hidden_, 0.0f);
    for (int s = 0; s < slices_; ++s) {
      Slice& sl = slices_state_.emplace_back();
      sl.d = d;
      sl.s = s;
      sl.begin = slice_begin(s);
      sl.units = slice_units(s);
      sl.projections.assign(seq_ * gates_ * sl.units, 0.0f);
      sl.c.assign(sl.units, 0.0f);
      sl.product.assign(gates_ * sl.units, 0.0f);
      sl.candidate.assign(sl.units, 0.0f);
      sl.input_bias.assign(gates_ * sl.units, 0.0f);
      sl.recurrent_bias.assign(sl.units, 0.0f);
      sl.peephole.assign(3 * sl.units, 0.0f);
    }
  }
}

std::vector<float> OneSequenceRecurrence::slice_rows(const float* m, int64_t cols, int d, int s,
                                                     GateBlocks blocks) const {
  const int first = blocks == GateBlocks::kGruH ? 2 : 0;
  const int last = blocks == GateBlocks::kGruZr ? 2 : blocks == GateBlocks::kGruH ? 3 : gates_;
  const int64_t begin = slice_begin(s), units = slice_units(s);
  std::vector<float> rows;
  rows.reserve((last - first) * units * cols);
  for (int k = first; k < last; ++k) {
    const float* block = m + ((d * gates_ + k) * hidden_ + begin) * cols;
    rows.insert(rows.end(), block, block + units * cols);
  }
  return rows;
}

std::vector<GateBlocks> OneSequenceRecurrence::step_blocks() const {
  if (spec_.cell == RecurrentCell::kGru && !spec_.linear_before_reset)
    return {GateBlocks::kGruZr, GateBlocks::kGruH};
  return {GateBlocks::kAll};
}

void OneSequenceRecurrence::run(RecurrentProducts& products, const RecurrentIo& io, int threads) {
  const int team = spec_.directions * slices_;
  const int phases_per_step = static_cast<int>(blocks_.size());
  auto finish = [&](const Slice& sl) {
    const int64_t h = hidden_;
    const float* hs = shared_[sl.d].h[seq_ % 2].data();
    if (io.y_h) std::copy_n(hs + sl.begin, sl.units, io.y_h + sl.d * h + sl.begin);
    if (io.y_c) std::copy_n(sl.c.data(), sl.units, io.y_c + sl.d * h + sl.begin);
  };
  if (team > 1 && threads >= team && !omp_in_parallel()) {
    // Slices share their direction's hidden state: a barrier after each phase. Whole
    // directions share nothing: none without slices.
    const bool barriers = slices_ > 1;
#pragma omp parallel num_threads(team)
    if (omp_get_num_threads() == team) {
      Slice& sl = slices_state_[omp_get_thread_num()];
      prepare(sl, io);
      products.project(sl.d, sl.s, sl.projections.data());
      if (barriers) {
#pragma omp barrier
      }
      for (int64_t step = 0; step < seq_; ++step)
        for (int phase = 0; phase < phases_per_step; ++phase) {
          step_phase(sl, products, step, phase, io);
          if (barriers) {
#pragma omp barrier
          }
        }
      finish(sl);
    } else if (omp_get_thread_num() == 0) {
      run(products, io, 1);  // a smaller team than asked for: one after another
    }
    return;
  }
  for (Slice& sl : slices_state_) {
    prepare(sl, io);
    products.project(sl.d, sl.s, sl.projections.data());
  }
  for (int64_t step = 0; step < seq_; ++step)
    for (int phase = 0; phase < phases_per_step; ++phase)
      for (Slice& sl : slices_state_) step_phase(sl, products, step, phase, io);
  for (const Slice& sl : slices_state_) finish(sl);
}

// The slice's initial states, biases and peepholes for this run.
void OneSequenceRecurrence::prepare(Slice& sl, const RecurrentIo& io) {
  const int64_t h = hidden_, u = sl.units, j0 = sl.begin, d = sl.d;
  float* hs = shared_[d].h[0].data() + j0;
  if (io.initial_h)
    std::copy_n(io.initial_h + d * h + j0, u, hs);
  else
    std::fill_n(hs, u, 0.0f);
  if (io.initial_c)
    std::copy_n(io.initial_c + d * h + j0, u, sl.c.data());
  else
    std::fill(sl.c.begin(), sl.c.end(), 0.0f);
  if (io.p)
    for (int k = 0; k < 3; ++k) std::copy_n(io.p + (d * 3 + k) * h + j0, u, &sl.peephole[k * u]);
  if (!io.b) return;
  // B is [D, 2*G*H]: Wb then Rb. Rb joins Wb outside the cell except GRU's candidate with
  // linear_before_reset, where ONNX adds it inside the reset product.
  const bool lbr = spec_.cell == RecurrentCell::kGru && spec_.linear_before_reset;
  const float* wb = io.b + d * 2 * gates_ * h;
  const float* rb = wb + gates_ * h;
  for (int k = 0; k < gates_; ++k)
    for (int64_t jj = 0; jj < u; ++jj) {
      const int64_t j = k * h + j0 + jj;
      sl.input_bias[k * u + jj] = wb[j] + (lbr && k == 2 ? 0.0f : rb[j]);
    }
  if (lbr) std::copy_n(rb + 2 * h + j0, u, sl.recurrent_bias.data());
}

namespace {

// The cells' updates of `u` units, from their gates' pre-activations `a` (gate block after gate
// block) and what else they read; separate arrays (restrict), so that the loops vectorise.

// LSTM, ONNX's gate blocks i, o, f, c; peepholes i, o, f.
void lstm_cell(int64_t u, const float* __restrict a, const float* __restrict peephole,
               float* __restrict c, float* __restrict h) {
  const float *pi = peephole, *po = pi + u, *pf = po + u;
  for (int64_t j = 0; j < u; ++j) {
    const float i = fast_sigmoid(a[j] + pi[j] * c[j]);
    const float f = fast_sigmoid(a[2 * u + j] + pf[j] * c[j]);
    const float cell = f * c[j] + i * fast_tanh(a[3 * u + j]);
    const float o = fast_sigmoid(a[u + j] + po[j] * cell);
    c[j] = cell;
    h[j] = o * fast_tanh(cell);
  }
}

void rnn_cell(int64_t u, const float* __restrict a, float* __restrict h) {
  for (int64_t j = 0; j < u; ++j) h[j] = fast_tanh(a[j]);
}

// GRU: z from `zr`'s first block; the candidate's pre-activation is `x` (its input projection
// and biases) plus `recurrent`, which is r * (h Rh^T + Rbh) with linear_before_reset (`reset`
// then holds r's pre-activations, `recurrent_bias` Rbh), else (r * h) Rh^T (`reset` null).
void gru_cell(int64_t u, const float* __restrict zr, const float* __restrict x,
              const float* __restrict recurrent, const float* __restrict reset,
              const float* __restrict recurrent_bias, const float* __restrict h_prev,
              float* __restrict h) {
  for (int64_t j = 0; j < u; ++j) {
    const float z = fast_sigmoid(zr[j]);
    const float r = reset ? fast_sigmoid(reset[j]) : 1.0f;
    const float rh = reset ? r * (recurrent[j] + recurrent_bias[j]) : recurrent[j];
    h[j] = (1.0f - z) * fast_tanh(x[j] + rh) + z * h_prev[j];
  }
}

// a[k] += b[k] + c[k]: the projection and biases joined to a recurrent product.
void add_to(int64_t n, float* __restrict a, const float* __restrict b, const float* __restrict c) {
  for (int64_t k = 0; k < n; ++k) a[k] += b[k] + c[k];
}

}  // namespace

void OneSequenceRecurrence::step_phase(Slice& sl, RecurrentProducts& products, int64_t step,
                                       int phase, const RecurrentIo& io) {
  const int64_t u = sl.units, j0 = sl.begin;
  const bool reverse = spec_.reverse || sl.d == 1;
  const int64_t t = reverse ? seq_ - 1 - step : step;
  Shared& sh = shared_[sl.d];
  const float* h_prev = sh.h[step % 2].data();
  float* h_next = sh.h[(step + 1) % 2].data() + j0;
  const float* g = sl.projections.data() + t * gates_ * u;
  const float* b = sl.input_bias.data();
  float* p = sl.product.data();
  if (spec_.cell != RecurrentCell::kGru) {
    products.multiply(sl.d, sl.s, GateBlocks::kAll, h_prev, p);
    add_to(gates_ * u, p, g, b);
    if (spec_.cell == RecurrentCell::kLstm)
      lstm_cell(u, p, sl.peephole.data(), sl.c.data(), h_next);
    else
      rnn_cell(u, p, h_next);
  } else if (spec_.linear_before_reset) {
    // GRU, gate blocks z, r, h: z and r's pre-activations, then the candidate's with
    // r * (h Rh^T + Rbh).
    products.multiply(sl.d, sl.s, GateBlocks::kAll, h_prev, p);
    add_to(2 * u, p, g, b);
    float* x = sl.candidate.data();
    for (int64_t j = 0; j < u; ++j) x[j] = g[2 * u + j] + b[2 * u + j];
    gru_cell(u, p, x, p + 2 * u, p + u, sl.recurrent_bias.data(), h_prev + j0, h_next);
  } else if (phase == 0) {
    // GRU: z and r first, and r * h of the slice's units for every slice's candidate...
    products.multiply(sl.d, sl.s, GateBlocks::kGruZr, h_prev, p);
    add_to(2 * u, p, g, b);
    for (int64_t j = 0; j < u; ++j) sh.reset_h[j0 + j] = fast_sigmoid(p[u + j]) * h_prev[j0 + j];
  } else {
    // ... then the candidate, (r * h) Rh^T, once every slice wrote its part.
    float* n = p + 2 * u;
    products.multiply(sl.d, sl.s, GateBlocks::kGruH, sh.reset_h.data(), n);
    float* x = sl.candidate.data();
    for (int64_t j = 0; j < u; ++j) x[j] = g[2 * u + j] + b[2 * u + j];
    gru_cell(u, p, x, n, nullptr, nullptr, h_prev + j0, h_next);
  }
  if (phase + 1 == static_cast<int>(blocks_.size()) && io.y)
    std::copy_n(h_next, u, io.y + (t * spec_.directions + sl.d) * hidden_ + j0);
}

}  // namespace collage::ops
