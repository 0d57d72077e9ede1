// Where(condition, a, b) with a constant condition, one of a and b the value selected from and
// the other a constant (a scalar or a tensor broadcast to the output): a mask written out as
// Where, as GPT-2's export writes its causal mask (Where(triangle, scores, lowest float)).
// oneDNN 2.6 has no select primitive, so inside a region it is one custom step of the
// program: out[i] = keep[i] ? x[i] : fill[i] over row-major data, with the condition (and a
// tensor fill) expanded to the output's shape at compile. Why: each such Where cut GPT-2's
// onednn-graph plan, 13 regions with 12 reference steps between them (0.17 ms each, the
// 2-thread tuned plan of bench/results/transformers, 2026-11-29), and the rule is no
// reference in a tuned transformer plan unless reference measured fastest.
#pragma once

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether a region takes Where node `n` (the form above: a float32 output of the selected
// value's shape).
bool select_takes(const Graph& g, const Node& n);
// Emits a one-node subgraph select_takes() accepts.
void emit_select(const Graph& sub, ValueMemories& values);

}  // namespace collage::onednn
