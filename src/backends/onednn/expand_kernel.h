// Expand (a value broadcast to a larger shape: repeat_interleave's export, a mean repeated over
// channels, the full operand import gives a binary op whose two inputs both broadcast,
// expand_two_sided_broadcasts) as one step of collage's own in an onednn program: a row-major
// broadcast copy. oneDNN 2.6 has no broadcast primitive (a reorder keeps the dims), so the
// Expand ran on the fallback and cut onednn-graph regions around it.
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether node `n` is an Expand of a float32 value by a constant shape.
bool expand_takes(const Graph& g, const Node& n);
// Emits one-node group `sub` expand_takes accepts.
void emit_expand(const Graph& sub, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kExpandStep = "collage:expand";

}  // namespace collage::onednn
