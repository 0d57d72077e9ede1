// TopK as a kernel of collage's own in the onednn backend, for an op oneDNN has no primitive
// for (as its GridSample, GroupNorm and elementwise-function steps are): per row a heap of
// the k best so far, the rest of the row tested 64 elements at a time against the worst kept
// (a vectorized count; few blocks hold one that enters), the rows split between the threads.
// The order is ONNX's (the reference's, ops/reduction_topk.cc: ties to the lower index, NaN
// above every number) as an integer key per value, so it picks what the reference picks.
//
// Why: the reference's partial sort runs on one thread, and where TopK finds neighbours (a
// DGCNN-style point-cloud model: k = 20 of 1024 for each of 1024 points, twice) it took 10.6
// of the model's 14.7 ms (2026-12-07, 2 threads), 0.60x ONNX Runtime. This kernel: 1.7 ms
// each (a heap's comparisons: 2.1 ms; the row's elements one by one against the worst kept:
// 2.3), the model 1.06-1.20x ONNX Runtime.
//
// Why here and not libtorch's at::topk (the torch backend): its order among equal values is
// not ONNX's, which keeps the lower index first; ties are common (a Relu's zeros).
//
// What is taken: float32 input of known shape, its values and int64 indices (of either opset's
// k: the output shape says k). Its int64 output keeps it out of oneDNN programs: it is a lone
// kernel, between regions.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::onednn {

// Whether node `n` is a TopK this kernel computes.
bool top_k_takes(const Graph& g, const Node& n);
// A kernel for one-node `subgraph` top_k_takes accepts, on `threads` threads.
std::unique_ptr<Kernel> compile_top_k(const Graph& subgraph, int threads);

}  // namespace collage::onednn
