// Op-level XNNPACK operators, one factory per op family. Each takes the node it runs and
// the output clamp fused into it (Relu/Clip after the node; infinite bounds for none) and
// returns the operator with its operand bindings (see OperatorKernel). They throw
// Error(kUnsupported) for what XNNPACK can't run exactly.
#pragma once

#include "backends/xnnpack/op_params.h"
#include "backends/xnnpack/operator_kernel.h"

namespace collage::xnnpack {

// Conv (regular, grouped, depthwise) on NHWC.
OperatorSpec conv_operator(const Graph& subgraph, const Node& node, const ClampRange& clamp);
// MaxPool, AveragePool, GlobalAveragePool on NHWC.
OperatorSpec pool_operator(const Graph& subgraph, const Node& node, const ClampRange& clamp);
// MatMul with a constant 2-D B, Gemm with a constant B and bias row.
OperatorSpec fully_connected_operator(const Graph& subgraph, const Node& node,
                                      const ClampRange& clamp);
// Add, Mul, Sub, Div with numpy broadcasting.
OperatorSpec binary_operator(const Graph& subgraph, const Node& node, const ClampRange& clamp);
// Relu, Clip, Sigmoid, Softmax (no fused clamp).
OperatorSpec unary_operator(const Graph& subgraph, const Node& node);

}  // namespace collage::xnnpack
