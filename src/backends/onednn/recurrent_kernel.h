// RNN, GRU and LSTM as oneDNN's RNN primitives (vanilla_rnn, gru, lbr_gru, lstm with or
// without peepholes), in op-level onednn and inside onednn-graph regions. ONNX's gate orders
// and bias pairs are rearranged into oneDNN's once, at compile time (LSTM i,o,f,c -> i,f,c,o;
// peepholes i,o,f -> i,f,o; Wb + Rb summed per gate, GRU's Rbh kept apart when
// linear_before_reset = 1, as lbr_gru reads it). Without this a model holding a recurrent
// layer (a text recogniser, a speech or time-series model) ran it on the reference's loops.
//
// What oneDNN's cells compute, and so what is taken: float32; constant W, R, B and P; the
// default functions (LSTM, GRU: Sigmoid and Tanh; RNN: one of Tanh, Relu, Sigmoid), no clip,
// no coupled input and forget gates; no sequence_lens (or a constant one of every sequence's full
// length); layout 0. One sequence (batch 1) with constant W and R is emitted as
// packed_recurrence.h's step instead: oneDNN matmuls with packed weights around collage's cell,
// faster there (at batch 1 each step's product is a matrix-vector one).
//
// Threads: oneDNN's cells parallelise each time step, so a small recurrence runs faster on one
// thread than on two (a team's barrier per step for little work). Each node is built twice, for
// the kernel's threads and for one, both timed at compile on scratch data, and the faster kept
// (recurrent_kernel.cc has the measurements); COLLAGE_ONEDNN_RNN_THREADS=one|all skips that.
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether node `n` is an RNN/GRU/LSTM oneDNN's primitives compute.
bool recurrent_takes(const Graph& g, const Node& n);
// Emits one-node group `sub` recurrent_takes accepts.
void emit_recurrent(const Graph& sub, ValueMemories& values);

}  // namespace collage::onednn
