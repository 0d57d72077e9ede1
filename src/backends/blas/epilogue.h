// The elementwise ops after a GEMM-like head (bias Add, Relu, Clip, Sigmoid, Tanh, GELU's
// Div/Erf/Add/Mul chain, a residual Add...), compiled to a small program that runs on one
// row segment of the head's result at a time, right after the GEMM wrote it: every
// intermediate stays in a per-thread L1-sized buffer, and the output is written once.
#pragma once

#include <span>
#include <vector>

#include "collage/graph.h"

namespace collage::blas {

// The head's result viewed as [outer][rows][cols] row-major: one sgemm output per outer
// index (a MatMul batch, a Conv image).
struct MatrixView {
  int64_t outer = 1, rows = 1, cols = 1;
  int64_t matrix() const { return rows * cols; }
};

// Something added to the head's raw GEMM result before the subgraph's own tail nodes run:
// a Conv's bias, a Gemm's beta * C. Either a constant (broadcast to the head's shape) or a
// kernel input of exactly the head's shape.
struct HeadAddend {
  Tensor constant;
  int input = -1;
};

class Epilogue {
 public:
  // The ops and operands the epilogue can take; everything else makes build() throw.
  static bool supports_op(const std::string& op_type);

  // Compiles the nodes of `subgraph` after `head`. Every one must be a supported op whose
  // output has the head's shape; its operands are values computed in the group, constants
  // (any broadcast that does not grow the shape) or kernel inputs of the head's shape.
  // Every kernel output must be the head's or an epilogue node's value. Throws
  // Error(kUnsupported) otherwise. Scratch is allocated (and touched) for `threads`.
  static Epilogue build(const Graph& subgraph, NodeId head, const MatrixView& view,
                        const std::vector<HeadAddend>& addends, int threads);

  // The buffer the head's GEMM writes, laid out as the view: an output tensor when the
  // head's value (or one computed late enough) is a kernel output, else owned scratch.
  float* head_buffer(std::span<const Tensor> outputs);
  // Runs the program over matrix `o` of the view (after its GEMM wrote it).
  void apply(int64_t o, std::span<const Tensor> inputs, std::span<const Tensor> outputs);
  bool empty() const { return program_.empty(); }

 private:
  enum class Op { kRelu, kLeakyRelu, kClip, kSigmoid, kTanh, kErf, kAdd, kSub, kMul, kDiv };
  // Where an operand's elements for one segment come from.
  struct Source {
    enum class Kind { kSlot, kPerCol, kPerRow, kMatrix, kTensor, kInput } kind = Kind::kSlot;
    int index = 0;            // slot or kernel input
    std::vector<float> data;  // constants, compressed to the smallest exact kind
  };
  struct Instr {
    Op op;
    int dst = 0;
    Source a, b;
    float p0 = 0, p1 = 0;  // LeakyRelu alpha; Clip bounds
  };
  // Where a slot (one value of the group) lives: an output tensor or per-thread scratch;
  // the head's slot (0) may live in the owned full-size buffer instead.
  struct Home {
    int output = -1;
    int scratch = -1;
  };

  Source constant_source(const Tensor& constant, const Shape& shape) const;
  void run_segment(int64_t o, int64_t segment, int thread, std::span<const Tensor> inputs,
                   std::span<const Tensor> outputs);

  MatrixView view_;
  int64_t segment_ = 1;  // elements per segment (at most one row)
  int64_t segments_per_row_ = 1;
  int threads_ = 1;
  std::vector<Instr> program_;
  std::vector<Home> homes_;
  int num_scratch_ = 0;
  std::vector<float> scratch_;    // [thread][scratch slot][segment]
  std::vector<float> head_full_;  // the head's result when no output can hold it
};

}  // namespace collage::blas
