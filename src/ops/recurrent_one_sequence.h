// The float32 recurrence of one sequence (batch 1) of an RNN, GRU or LSTM, around matrix
// products a backend computes with its library. At batch 1 each step's recurrent product is a
// matrix-vector product that reads all of R (4 x 512 x 512 floats for an LSTM of 512 units)
// every step, and the input projections of every step are one GEMM: what decides the speed is
// how a library runs those two, so they are the backend's (blas: OpenBLAS's sgemm and sgemv;
// onednn: oneDNN's matmuls with weights packed once, packed_recurrence.h), and the rest
// (biases, states, the cell's elementwise update, the threads) is written once here.
//
// Slices: a direction's hidden units may be cut into slices, each a thread's. A slice's rows
// of W and R are its units' rows of every gate block, so its products and its cell's update
// need nothing from the other slices but the previous hidden state: one barrier a step (GRU
// without linear_before_reset: two, its candidate reads r * h of every unit). Each thread then
// reads its own part of R every step, which stays in its core's L2 where it fits (an LSTM of
// 256 units: 1 MB of R, 512 KB a thread on two). A bidirectional node runs its directions at
// once, a team of `slices` threads each.
//
// What is taken (one_sequence_recurrence_takes): float32; one sequence (with more, each
// step's product is a GEMM, which oneDNN's RNN primitives run with R packed); the default
// functions (LSTM, GRU: Sigmoid and Tanh; RNN: Tanh), no clip, no coupled input and forget
// gates; peepholes; no sequence_lens (or a constant one of the full length); layout 0.
#pragma once

#include <cstdint>
#include <vector>

#include "collage/graph.h"
#include "ops/recurrent.h"

namespace collage::ops {

// Whether node `n` is an RNN/GRU/LSTM over one sequence that OneSequenceRecurrence computes.
bool one_sequence_recurrence_takes(const Graph& g, const Node& n);

// Which gate blocks of W or R a product takes (of the slice's units): every block, or GRU's z
// and r, or GRU's h.
enum class GateBlocks { kAll, kGruZr, kGruH };

// The products of a backend's library, for OneSequenceRecurrence. W is [D, G*H, I] and R
// [D, G*H, H] (ONNX's gate blocks); a slice's rows of them are what
// OneSequenceRecurrence::slice_rows gathers. Calls for different (direction, slice) pairs
// may run at once on different threads.
class RecurrentProducts {
 public:
  virtual ~RecurrentProducts() = default;
  // out[seq, G * units] = X W_slice^T: the slice's input projections of every step.
  virtual void project(int d, int slice, float* out) = 0;
  // out[blocks * units] = R_slice,blocks v, v of H floats.
  virtual void multiply(int d, int slice, GateBlocks blocks, const float* v, float* out) = 0;
};

// One run's optional inputs and outputs in ONNX's layouts, nullptr where absent: B [D, 2*G*H],
// initial_h and initial_c [D, 1, H], P [D, 3*H]; Y [seq, D, 1, H], Y_h and Y_c [D, 1, H].
struct RecurrentIo {
  const float *b = nullptr, *initial_h = nullptr, *initial_c = nullptr, *p = nullptr;
  float *y = nullptr, *y_h = nullptr, *y_c = nullptr;
};

class OneSequenceRecurrence {
 public:
  // For node `n` of `g`, which one_sequence_recurrence_takes accepts, its hidden units cut in
  // `slices` per direction (1 to hidden).
  OneSequenceRecurrence(const Graph& g, const Node& n, int slices = 1);

  const RecurrentSpec& spec() const { return spec_; }
  int64_t seq() const { return seq_; }
  int64_t input() const { return input_; }
  int directions() const { return spec_.directions; }
  int slices() const { return slices_; }
  // The first hidden unit of slice `s` and how many it has.
  int64_t slice_begin(int s) const { return hidden_ * s / slices_; }
  int64_t slice_units(int s) const { return slice_begin(s + 1) - slice_begin(s); }
  // Slice `s`'s rows of direction `d` of `m` (W or R: [D, G*H, cols]) in `blocks`, gate block
  // after gate block: what a backend packs for its products.
  std::vector<float> slice_rows(const float* m, int64_t cols, int d, int s,
                                GateBlocks blocks) const;
  // The gate blocks a step multiplies R by: the whole slice for an LSTM, an RNN and a GRU with
  // linear_before_reset; z and r, then h apart for another GRU.
  std::vector<GateBlocks> step_blocks() const;

  // One run: every direction's input projections, steps and final states. On a team of
  // directions x slices threads where `threads` allows that and the caller is not in an
  // OpenMP team already; else one slice after another on the calling thread.
  void run(RecurrentProducts& products, const RecurrentIo& io, int threads);

 private:
  // A thread's part of one direction: its hidden units' projections, cell state and buffers.
  struct Slice {
    int d = 0, s = 0;
    int64_t begin = 0, units = 0;
    std::vector<float> projections;     // [seq, G * units]
    std::vector<float> c;               // LSTM's cell state
    std::vector<float> product;         // R_slice h of the step, G * units
    std::vector<float> candidate;       // GRU: its candidate's input projection and bias
    std::vector<float> input_bias;      // added to every step's projection, G * units
    std::vector<float> recurrent_bias;  // GRU with linear_before_reset: Rbh, inside r * (...)
    std::vector<float> peephole;        // LSTM: i, o, f (zeros without P), 3 * units
  };
  void prepare(Slice& sl, const RecurrentIo& io);
  // Phase `phase` of step `step` (0-based, in the direction's order) of slice `sl`: the
  // phases of one step are separated by barriers.
  void step_phase(Slice& sl, RecurrentProducts& products, int64_t step, int phase,
                  const RecurrentIo& io);

  RecurrentSpec spec_;
  int64_t seq_ = 0, input_ = 0, hidden_ = 0;
  int gates_ = 1, slices_ = 1;
  std::vector<GateBlocks> blocks_;  // step_blocks(): one product a phase
  // Per direction: the hidden state, double-buffered (steps read one, write the other), and
  // GRU's r * h of every unit.
  struct Shared {
    std::vector<float> h[2];
    std::vector<float> reset_h;
  };
  std::vector<Shared> shared_;
  std::vector<Slice> slices_state_;
};

}  // namespace collage::ops
