// An Einsum equation ("bhqd,bhkd->bhqk", "...ij,...jk", "ii->i") resolved against its
// operands' shapes: one label per dimension of each operand and of the output, and each
// label's size. The reference kernel (nn_einsum.cc) loops over these labels; the importer's
// lowering (ir/einsum_lowering.cc) turns them into Transpose/Reshape/MatMul/ReduceSum, which
// the fast backends run. One parser serves both, so they cannot read an equation two ways.
#pragma once

#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::ops {

struct EinsumEquation {
  // Labels: 0-51 for the letters a-z and A-Z, 52 + k for the k-th dimension an ellipsis
  // stands for (right-aligned over the operands, as numpy broadcasts them).
  std::vector<std::vector<int>> inputs;  // per operand, one label per dimension
  std::vector<int> output;
  std::vector<int64_t> sizes;  // per label; 0 for a label no operand has
  int num_labels() const { return static_cast<int>(sizes.size()); }
};

// Parses `equation` (ONNX Einsum: comma-separated terms, an optional "->" output, at most one
// "..." per term, spaces ignored; without "->" the output is the ellipsis dimensions followed
// by the letters used once, in alphabetical order) for operands of `shapes`. A label's size
// is the same wherever it appears, or 1 where it is broadcast. Throws Error(kShape) saying
// what does not fit.
EinsumEquation parse_einsum(const std::string& equation, const std::vector<Shape>& shapes);

// The label as the equation writes it ("b", or "...0" for an ellipsis dimension).
std::string einsum_label_name(int label);

}  // namespace collage::ops
