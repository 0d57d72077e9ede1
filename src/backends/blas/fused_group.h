// The shape of subgraph the blas backend compiles: one GEMM-like head (MatMul, Gemm, Conv,
// ConvTranspose) whose result the rest of the subgraph only transforms elementwise (the
// epilogue), plus helpers to address the head's operands.
#pragma once

#include <span>
#include <string>

#include "collage/graph.h"

namespace collage::blas {

bool is_head_op(const std::string& op_type);

// The one head node of `subgraph`; throws Error(kUnsupported) when there is none, more
// than one, or it is not the first node (every other node must depend on it).
NodeId find_head(const Graph& subgraph);

// Position of `value` in subgraph.inputs, or -1.
int input_index(const Graph& subgraph, ValueId value);
// Position of `value` in subgraph.outputs, or -1 (an output nobody reads, or kNoValue).
int output_index(const Graph& subgraph, ValueId value);

// A float32 matrix operand: a constant the kernel keeps (shared storage) or one of the
// kernel's inputs, resolved per run without allocating.
class Operand {
 public:
  Operand() = default;
  // Throws Error(kUnsupported) when `value` is not float32 or is neither.
  static Operand of(const Graph& subgraph, ValueId value, const char* what);

  const float* data(std::span<const Tensor> inputs) const {
    return input_ >= 0 ? static_cast<const float*>(inputs[input_].raw())
                       : static_cast<const float*>(constant_.raw());
  }
  bool is_constant() const { return input_ < 0; }
  const Tensor& constant() const { return constant_; }

 private:
  Tensor constant_;
  int input_ = -1;
};

}  // namespace collage::blas
