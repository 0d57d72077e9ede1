// Lowering a standalone subgraph (see extract_subgraph) of float32 elementwise, broadcast,
// injective and reduction ops (and CumSum's scan, the scatters' serial updates, the index
// and mask ops, TopK's rounds) to one Halide pipeline, with a hand-written schedule.
#pragma once

#include <Halide.h>

#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::halide_backend {

// Why `node` cannot be lowered, or "" when it can. Judged on the node and the types and
// constants of its inputs, so fusion rules can filter with it before anything compiles.
std::string unsupported_reason(const Graph& graph, const Node& node);

// A subgraph lowered to Halide, not yet compiled. The compiled function takes one buffer
// per `params` entry (subgraph inputs and non-scalar constants) and then one per output.
// Data is float32 except where an op reads or moves other types: Gather's indices (int32 /
// int64), Where's condition (bool, read as uint8), the layout ops' data (int32, int64,
// bool: GPT-2 reshapes its input_ids before the embedding Gather), comparisons' and IsNaN /
// IsInf's results (bool), ArgMax / ArgMin's positions (int64), the index ops' indices
// (int32 / int64) and data (any of these), OneHot's values and Cast's ends.
struct Lowered {
  Halide::Pipeline pipeline;
  std::vector<Halide::Argument> arguments;
  struct Param {
    int input = -1;   // index into the subgraph's inputs, or -1 for `constant`
    Tensor constant;  // non-scalar constants travel as buffers, not in the code
    Shape shape;
    DType dtype = DType::kFloat32;
  };
  std::vector<Param> params;
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
};

// The buffer element type of a dtype the lowering handles (bool is one byte: uint8).
halide_type_t buffer_type(DType dtype);

// Throws Error(kUnsupported) naming the first node it cannot lower.
Lowered lower(const Graph& subgraph);

// Canonical text of the subgraph as lowering sees it (ops, attributes, shapes, edges,
// scalar constants inlined into the code): equal text means an equal pipeline. Big
// constants appear by shape only, since they are buffers at run time.
std::string describe(const Graph& subgraph);

}  // namespace collage::halide_backend
