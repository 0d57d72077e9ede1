// RNN, GRU and LSTM (ONNX opsets 7 and 14): their attributes parsed once into a
// RecurrentSpec, which the reference kernel (nn_recurrent.cc) and the backends that build
// the op from a library's RNN primitive read alike, so the rule (gate orders, activations
// and their alpha/beta, clip, directions, layout) is written once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::ops {

enum class RecurrentCell { kRnn, kGru, kLstm };

// The activation functions ONNX allows in a recurrent cell, with their alpha/beta.
struct CellActivation {
  enum Kind {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus
  } kind = kTanh;
  float alpha = 0, beta = 0;
  double operator()(double x) const;
};

// Input positions (ONNX): X, W, R, B, sequence_lens, initial_h, initial_c (LSTM), P (LSTM).
enum RecurrentInput : size_t {
  kRecX = 0,
  kRecW = 1,
  kRecR = 2,
  kRecB = 3,
  kRecSeqLens = 4,
  kRecInitialH = 5,
  kRecInitialC = 6,
  kRecPeephole = 7
};

struct RecurrentSpec {
  RecurrentCell cell = RecurrentCell::kLstm;
  int64_t hidden = 0;         // hidden_size
  int directions = 1;         // 2 for "bidirectional"
  bool reverse = false;       // direction = "reverse" (one direction, last step first)
  bool batch_major = false;   // layout = 1: X (batch, seq, input), Y (batch, seq, dir, hidden)
  std::optional<float> clip;  // bounds every activation's input to [-clip, clip]
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM: f = 1 - i
  // Per direction, the cell's functions in ONNX's order: RNN f; GRU f, g; LSTM f, g, h.
  std::vector<CellActivation> activations;

  // Gate blocks in W and R: RNN 1, GRU 3 (z, r, h), LSTM 4 (i, o, f, c).
  int gates() const;
  int functions_per_direction() const;
  const CellActivation& function(int direction, int i) const {
    return activations[direction * functions_per_direction() + i];
  }
  // Sigmoid/Tanh as ONNX's defaults, no clip, no coupled gates.
  bool default_functions() const;
};

// X's sequence length, batch and input size: X is [seq, batch, input], or [batch, seq, input]
// for layout 1.
struct RecurrentDims {
  int64_t seq = 0, batch = 0, input = 0;
};
RecurrentDims recurrent_dims(const RecurrentSpec& spec, const Shape& x);

// The spec of an RNN, GRU or LSTM node of the default domain whose inputs (sequence_lens
// aside) and outputs are float32 of known shapes, X of rank 3, its attributes valid; nullopt
// for any other node. What a backend's kernel for these ops tests first.
std::optional<RecurrentSpec> float32_recurrent_spec(const Graph& graph, const Node& node);

// Whether the node's cells run every sequence to its end: no sequence_lens, or a constant one
// of every sequence's full length (tf2onnx writes one). Kernels that take only that test it.
bool every_sequence_full(const Graph& graph, const Node& node);

// Parses and checks the node's attributes: Error(kInvalidModel) for values ONNX does not
// define, naming the node.
RecurrentSpec recurrent_spec(const Node& node);
// The same, for a node of an inferred graph: hidden_size, where the attribute is absent,
// from W's shape.
RecurrentSpec recurrent_spec(const Graph& graph, const Node& node);

}  // namespace collage::ops
