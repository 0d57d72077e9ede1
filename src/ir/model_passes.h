// Internals shared by the importer and the graph passes (the public passes are in
// collage/model.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage {

// A type the model declares for a value (graph output or value_info).
struct DeclaredType {
  std::string name;
  int32_t elem_type = 0;                                    // 0: not declared
  std::optional<std::vector<std::optional<int64_t>>> dims;  // nullopt dim: symbolic/unknown
};
using DeclaredTypes = std::vector<DeclaredType>;

// Error(kShape) naming the value when an inferred type contradicts a declared one. Dims
// are compared only when `check_dims` (inputs were not given other shapes).
void check_declared_types(const Graph& graph, const DeclaredTypes& declared, bool check_dims);

// Removes the nodes that hand their input on unchanged by reading the input instead, unless
// their output is a graph output: Identity, Dropout at inference (the only Dropout shape
// inference lets through) with its mask unread, a Pad of zeros, an identity Transpose, a
// one-input Concat, a Cast to the same type, and a Slice, Reshape or Expand to the input's
// own shape. A fast backend then never meets them between the ops it fuses.
void remove_identities(Graph& graph);

// Offers every node of `graph` (as it is on entry) to `lower`, which either appends nodes
// computing it, the last one writing the node's output (and returns true), or leaves the
// graph alone (false); the lowered nodes are then removed and the graph re-sorted. The
// shared loop of the import lowerings below.
void lower_nodes(Graph& graph, const std::function<bool(Graph&, const Node&)>& lower);

// For a lowering of node `base`: appends node `op` named "{base}/{op}_{k}" (k = `count`,
// advanced) reading `inputs`, writing `output` (or a new value "{name}:0"), typed by shape
// inference; returns the node.
NodeId append_lowered_node(Graph& graph, const std::string& base, int& count, const std::string& op,
                           std::vector<ValueId> inputs, std::map<std::string, Attribute> attrs,
                           ValueId output = kNoValue);
// ... and an int64 vector constant named "{base}/{what}_{k}" (a shape, axes).
ValueId append_int64_constant(Graph& graph, const std::string& base, int& count,
                              const std::string& what, const std::vector<int64_t>& values);
// ... and a float32 scalar constant named the same way.
ValueId append_float_constant(Graph& graph, const std::string& base, int& count,
                              const std::string& what, float value);
// ... and a Slice of `x` along `axis` over [start, end), writing `output` (or a new value),
// its bounds as inputs from opset 10 on and as attributes before (the graph's opset says how
// its nodes read); returns the Slice's output.
ValueId append_axis_slice(Graph& graph, const std::string& base, int& count, ValueId x,
                          int64_t axis, int64_t start, int64_t end, ValueId output = kNoValue);

// Folds each inference BatchNormalization whose input is the sole use of a Conv's output
// (constant float32 weights, bias and statistics) into that Conv's weights and bias:
// y = (conv(x) - mean) * scale / sqrt(var + eps) + shift is conv with W[o] * s[o] and
// (b[o] - mean[o]) * s[o] + shift[o], s = scale / sqrt(var + eps): a pass over the output
// less, on every backend. PyTorch's exporter does this itself in eval mode; a model exported
// in training mode or by another converter keeps its BatchNorms. Needs constants folded
// first; the old weights are left to remove_dead_code.
void fold_batch_norms(Graph& graph);

// Replaces each Einsum it can with Transpose/Reshape/MatMul/ReduceSum nodes computing it
// (einsum_lowering.cc); the others stay Einsum (the reference kernel runs them). Needs the
// shapes infer_shapes gives; fold_constants afterwards folds the constant operands' Transposes.
void lower_einsum(Graph& graph);

// Replaces each DepthToSpace/SpaceToDepth of a 4-D input of known shape with the Reshape ->
// Transpose -> Reshape ONNX defines it by (space_depth_lowering.cc).
void lower_space_depth(Graph& graph);

// Replaces each Pad in "reflect" or "edge" mode of known shape and constant pads (none
// negative, at most 8 on a side) with a Concat of its input and one-element Slices of it per
// padded axis, and each Pad that crops (a negative pad) with Slices of the cropped axes and,
// in "constant" mode, a Pad of the sides that grow (pad_lowering.cc); the others stay Pad
// (the reference kernel runs them).
void lower_edge_pads(Graph& graph);

// Replaces each Gather of a 1-D constant index list (at most 8 runs of consecutive indices)
// and each Tile of constant repeats (at most 8 an axis) of a float32 value with Slices and
// Concats (gather_tile_lowering.cc); the others stay.
void lower_gathers_and_tiles(Graph& graph);

// Replaces each Sum, Mean, Max and Min of one or more than two inputs, Selu, Celu,
// ThresholdedRelu, Shrink, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
// ReduceLogSumExp (shifted by the maximum) over float32 values with the simpler ops ONNX
// defines them by, and LpPool / GlobalLpPool with a pooled or reduced sum of powers and its
// root (function_op_lowering.cc); the others stay (the reference kernel runs them).
void lower_function_ops(Graph& graph);

// Makes each reader of an Expand's output that broadcasts its inputs anyway (Add, Mul, Where,
// ...) read the Expand's input instead, where its output keeps its shape: F.normalize's Div
// reads its norm through one (passes.cc). An Expand left with no reader is then dead code.
void bypass_broadcast_expands(Graph& graph);

// Gives each float32 Add, Sub, Mul, Div, Max and Min whose two inputs both broadcast (neither
// has the output's shape: x.mean(2) * x.mean(3), an outer sum) an Expand of one of them to
// the output's shape, so that it reads one full operand, which oneDNN's binary primitive
// needs (passes.cc). Runs after bypass_broadcast_expands, which would take the Expand away.
void expand_two_sided_broadcasts(Graph& graph);

// Drops the constants infer_shapes attached to node outputs, so every node computes its
// outputs at run time (import without optimisation).
void detach_folded_constants(Graph& graph);

}  // namespace collage
