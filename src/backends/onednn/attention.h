// Fused scaled-dot-product attention for the onednn backend: softmax(scale * Q·Kᵀ
// [+ mask | where mask]) · V as one kernel, one task per (batch of heads, tile of query
// rows). Each task computes its score tile with a single-threaded sgemm (oneDNN's
// dnnl_sgemm: inside the kernel's OpenMP region oneDNN does not nest), applies the mask and
// the softmax on the tile while it is in L2, and multiplies by V straight into the output:
// no [heads, seq, seq] tensor round trip through memory.
//
// Operands are read in place through strided views, so the head split and merge the
// exporters write around attention (Reshape / Transpose / Split / Slice, a scalar Div of
// q) are part of the kernel rather than copies (for any chain a strided view can express,
// numpy's no-copy reshape rule). Optionally the kernel also computes the q/k/v projections
// (MatMul + bias, or Gemm) reading one input, as ONE oneDNN matmul with the weights
// concatenated and packed at compile: BERT's three 768x768 projections become one
// 768x2304 GEMM. The fusion rule proposes each attention at several sizes (the core alone,
// + the operands' head glue, + the output's head merge, + the projections), and the search
// keeps what measures fastest, fused or split.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "collage/graph.h"
#include "collage/kernel.h"
#include "collage/pattern.h"

namespace collage::onednn {

// Element (i0, .., ik) of `shape` is element offset + sum(i_d * strides[d]) of the data.
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// The row-major layout of `shape`.
StridedView contiguous_view(const Shape& shape);
// `view` with another shape of the same element count, when that needs no copy (numpy's
// rule: each group of merged dims must be contiguous); nullopt otherwise.
std::optional<StridedView> reshape_view(const StridedView& view, const Shape& shape);

// The fusion rule's node sets: every attention the analysis accepts, at each size.
std::vector<Match> attention_matches(const Graph& graph);
// Whether compile() should take `subgraph` as an attention (a Softmax among other nodes).
bool is_attention(const Graph& subgraph);
// Throws kUnsupported when `subgraph` is not exactly one attention this kernel runs.
std::unique_ptr<Kernel> compile_attention(const Graph& subgraph, int threads);

}  // namespace collage::onednn
