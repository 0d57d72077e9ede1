// A Where whose condition the graph computes (or a Cast of such a condition to float), with
// the nodes computing it, as one step of collage's own in an onednn program: the comparisons
// (Less, Greater, LessOrEqual, GreaterOrEqual, Equal), IsNaN / IsInf, Not / And / Or / Xor and
// Casts to bool under it, evaluated element by element into the selected value. PyTorch
// exports masked_fill, torch.where(x > 0, ...), Hardshrink, Softshrink and nan_to_num so. Why
// one unit: the condition is a bool tensor, which a region does not carry (its values are
// float32 memories), so each such Where cut an onednn-graph region in pieces with its
// comparison on reference between them; inside the unit the bools never exist in memory.
// A Where of a constant condition (GPT-2's causal mask) is a unit of one node: the condition
// expanded to the output's shape at compile.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/pattern.h"

namespace collage::onednn {

// The ops a unit may hold (Where and Cast among them).
const std::vector<std::string>& masked_select_ops();
// The unit that Where or Cast `root` heads: its nodes in graph order, the root last, when
// every float input is float32 (values or constants), every bool one a constant or made in
// the unit and read nowhere else, and the root's output float32 of a known shape.
std::optional<std::vector<NodeId>> masked_select_nodes(const Graph& g, const Consumers& consumers,
                                                       NodeId root);
// Whether node `n` has the op and types a unit's node has (no graph walk: what callers ask
// before the walk masked_unit_holding makes).
bool masked_select_kind(const Graph& g, const Node& n);
// The unit (above) that holds node `n`, if any.
std::optional<std::vector<NodeId>> masked_unit_holding(const Graph& g, const Consumers& consumers,
                                                       NodeId n);
// Every unit of `g` (what onednn proposes as a kernel; onednn-graph its units of more than
// one node, which its capped regions never take part of).
std::vector<Match> masked_select_matches(const Graph& g);
// Whether the nodes of `sub` are exactly one unit.
bool masked_select_group(const Graph& sub);
// Emits such a group.
void emit_masked_select(const Graph& sub, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kMaskedSelectStep = "collage:masked_select";

}  // namespace collage::onednn
