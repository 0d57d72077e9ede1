// RNN, GRU and LSTM over one sequence on OpenBLAS: the input projections of every time step
// as one sgemm per direction, then per step the recurrent product as an sgemv, around the
// cell's elementwise update that ops/recurrent_one_sequence.h writes for every backend. At batch 1
// a large cell is bound by streaming R (4 x 512 x 512 floats for an LSTM of 512 units) every step:
// OpenBLAS's sgemv streams it at ~118 GB/s on 2 threads here, where oneDNN's packed cell reached
// ~50 (its LSTM of 512 units, both directions, ran 7.4 ms against ONNX Runtime's 4.9). A
// bidirectional node runs its two directions at once, one thread each, projections included, when
// it has two threads or more (3.9 ms of steps against 5.3 one direction after the other, each on
// both threads).
//
// What is taken: float32; one sequence (batch 1: with more, each step's product is an sgemm,
// which packs R again every step: an LSTM of 1024 units over 4 sequences ran its steps in 64
// ms where oneDNN's packed cell takes 17); the default functions (LSTM, GRU: Sigmoid and Tanh;
// RNN: Tanh), no clip, no coupled input and forget gates; peepholes; W, R, B, P constant or
// computed; no sequence_lens (or a constant one of the full length); layout 0. The search
// measures it against oneDNN's cells node by node.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::blas {

// Whether node `n` is an RNN/GRU/LSTM the kernel computes.
bool recurrent_takes(const Graph& g, const Node& n);
// A kernel for one-node `subgraph` recurrent_takes accepts, running on `threads` threads.
std::unique_ptr<Kernel> compile_recurrent(const Graph& subgraph, int threads);

}  // namespace collage::blas
