// The kernel families of the onednn backend. Each compile_* takes the standalone subgraph
// handed to Backend::compile, whose first node is the family's op (followed by an
// elementwise tail fused as post-ops where the family allows), and throws
// Error(kUnsupported) for what it can't express. The families a region can hold also have
// an emit_*: the same group appended to a program that may hold others, reading its
// operands from and recording its output in `values` (see value_memories.h).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::onednn {

using Emitter = void (*)(const Graph& subgraph, ValueMemories& values);
// A kernel of one group: `emit` over plain memories bound to the subgraph's boundary.
std::unique_ptr<Kernel> compile_group(const Graph& subgraph, Emitter emit);

// Conv / ConvTranspose (1-3 spatial dims, groups, bias) + tail.  conv_kernel.cc
void emit_conv(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_conv(const Graph& subgraph);
// MatMul (batched, broadcasting) / Gemm (transA/B, alpha, beta, C) + tail.  matmul_kernel.cc
// Node 0 may be a Reshape/Flatten/Squeeze/Unsqueeze of A (read in place), then the head.
void emit_matmul(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_matmul(const Graph& subgraph);
// Whether `subgraph` starts with a reshape whose only use is node 1's A (a MatMul/Gemm).
bool leads_matmul(const Graph& subgraph);
// Reshape, Flatten, Squeeze, Unsqueeze, or a Transpose moving only size-1 dims: the same
// row-major data under another shape.  matmul_kernel.cc
bool is_reshape_node(const Graph& graph, const Node& node);
// Max/Average/GlobalMax/GlobalAverage pooling + tail.  pool_kernel.cc
void emit_pool(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_pool(const Graph& subgraph);
// BatchNormalization (inference statistics, optional fused Relu).  norm_kernel.cc
void emit_batch_norm(const Graph& subgraph, ValueMemories& values);
// BatchNormalization (inference, optional Relu), LayerNormalization, Softmax/LogSoftmax,
// and the exported LayerNorm decomposition.  norm_kernel.cc
std::unique_ptr<Kernel> compile_norm(const Graph& subgraph);
// A chain of elementwise ops (unary, binary with broadcasting, exported GELU).
// eltwise_kernel.cc
void emit_elementwise(const Graph& subgraph, ValueMemories& values);
std::unique_ptr<Kernel> compile_elementwise(const Graph& subgraph);

// The exported LayerNorm decomposition (ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add eps
// -> Sqrt -> Div [-> Mul gamma] [-> Add beta]) over the last axis, when `nodes` of `graph`
// are exactly that.
struct LayerNormSpec {
  ValueId x = kNoValue, out = kNoValue;
  ValueId gamma = kNoValue, beta = kNoValue;  // constants, or kNoValue
  float epsilon = 0;
};
std::optional<LayerNormSpec> match_layer_norm(const Graph& graph, const std::vector<NodeId>& nodes);

}  // namespace collage::onednn
