// Elementwise functions oneDNN 2.6 has no eltwise algorithm for: Sin, Cos, Tan, their
// inverses and hyperbolic forms, Floor, Ceil, Sign, Softsign, and an Erf outside an exported
// GELU. One step of collage's own in an onednn program: the function over the value's
// buffer in the layout it already has (an elementwise function does not care which), so an
// onednn-graph region keeps the op instead of cutting around it with a layout copy to
// row-major and back (PyTorch exports F.lp_pool2d with a Sign between the pooling and the
// root; a positional or periodic feature computes Sin/Cos of an activation).
#pragma once

#include <string>
#include <vector>

#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Those ops' names (what onednn-graph's patterns list).
const std::vector<std::string>& unary_math_ops();
// Whether node `n` is one of those ops on float32 values.
bool unary_math_takes(const Graph& g, const Node& n);
// Emits one-node group `sub` unary_math_takes accepts.
void emit_unary_math(const Graph& sub, ValueMemories& values);

// The name implementations() reports for the step.
inline constexpr const char* kUnaryMathStep = "collage:unary_math";

}  // namespace collage::onednn
