// GridSample (a flow field or a spatial transformer's sampling grid) as one step of collage's
// own in an onednn program: the reference's rule (ops::grid_sample, PyTorch's grid_sampler)
// over channels-last data where the producer wrote that (row-major otherwise), output rows
// over the kernel's threads, each pixel's taps computed once for all channels. oneDNN has no
// sampling at computed positions; without it the op ran on the fallback (single-threaded) and cut
// onednn-graph regions around it.
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether node `n` is a GridSample of float32 4-D values of known shapes.
bool grid_sample_takes(const Graph& g, const Node& n);
// Emits one-node group `sub` grid_sample_takes accepts.
void emit_grid_sample(const Graph& sub, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kGridSampleStep = "collage:grid_sample";

}  // namespace collage::onednn
