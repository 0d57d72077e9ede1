// An RNN, GRU or LSTM over one sequence (batch 1) with constant W and R, as oneDNN matmuls
// whose weights are packed once at compile time, around ops::OneSequenceRecurrence's cell
// (recurrent_one_sequence.h): per slice of a direction's hidden units, the input projections
// of every step one matmul, and each step's recurrent product a matmul of one row.
//
// Why: at batch 1 oneDNN's RNN primitives reach ~50 GB/s streaming R each step, and OpenBLAS
// packs the constant W again on every call of its sgemm (it has no packed-weights API). An
// LSTM of 512 units, input 1024, bidirectional, 40 steps (2026-12-07, 2-core EPYC, each
// direction on one thread, /tmp probe): the projections 0.65 ms a direction as a packed
// brgemm matmul against OpenBLAS's 1.15-1.63; the 40 recurrent products 1.60 ms against
// sgemv's 1.78-1.84; both directions at once 2.48 ms against 3.26-3.99 (ONNX Runtime's whole
// node 2.78). DESIGN.md, "Recurrent ops", has the node's numbers.
//
// Threads: every matmul is built for one thread; the recurrence runs a slice a thread, its
// directions at once, a direction's hidden units cut into slices of 64 or more where the
// kernel's threads go round (slices_for in packed_recurrence.cc has the measurements).
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// What implementations() reports for the step.
inline constexpr const char* kPackedRecurrenceStep = "collage:recurrent_packed";

// Whether node `n` is an RNN/GRU/LSTM over one sequence with constant W and R that the packed
// step computes (ops::one_sequence_recurrence_takes, W and R constants).
bool packed_recurrence_takes(const Graph& g, const Node& n);
// Emits one-node group `sub` packed_recurrence_takes accepts as one custom step.
void emit_packed_recurrence(const Graph& sub, ValueMemories& values);

}  // namespace collage::onednn
