// A Slice with a step other than a positive one (torch.flip's export: step -1) and a Gather of a
// constant index list along one axis (a channel permutation, index_select with more runs than
// the import lowering makes into Slices): copies of constant positions, as one step of
// collage's own in an onednn program over row-major data. oneDNN's memory descriptors have no
// negative strides and no index lists, so these ran on the fallback and cut onednn-graph
// regions around them; positive-step Slices and one-index Gathers stay the views
// layout_kernel.cc cuts.
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether node `n` is such a Slice or Gather of a float32 value (constant steps and indices, in
// range, known shapes) that layout_head does not take.
bool index_copy_takes(const Graph& g, const Node& n);
// Emits one-node group `sub` index_copy_takes accepts.
void emit_index_copy(const Graph& sub, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kIndexCopyStep = "collage:index_copy";

}  // namespace collage::onednn
