// What the libxsmm kernels fuse after their GEMM, applied to each output tile while it is
// still in cache: y = act(scale * y + bias), the bias one value per output channel (a Conv's
// bias input or a constant Add broadcast along the channel axis; a MatMul's constant Add
// along its last axis; a Gemm's C), the activation Relu or Clip with constant bounds (ReLU6).
#pragma once

#include <optional>
#include <vector>

#include "collage/graph.h"

namespace collage::xsmm {

struct Epilogue {
  enum class Act { kNone, kRelu, kClip };
  float scale = 1;
  std::vector<float> bias;  // one per channel, or empty
  Act act = Act::kNone;
  float lo = 0, hi = 0;  // kClip bounds

  // Applies it to `count` values of channel `channel`.
  void apply(float* y, int64_t count, int64_t channel) const;
  // Applies it to `count` values of channels first, first + 1, ...
  void apply_along(float* y, int64_t count, int64_t first) const;
};

// The epilogue of `subgraph` after its head (node 0) whose output `y` has `channels`
// channels along `axis`: node 0's own bias is added by the caller. Every other node must be
// one constant Add broadcast along `axis` then one Relu or Clip, each reading the previous;
// nullopt otherwise (the kernel refuses the group).
struct ParsedTail {
  Epilogue epilogue;
  ValueId out = kNoValue;  // the value the tail produces (the kernel's output)
};
std::optional<ParsedTail> parse_tail(const Graph& subgraph, ValueId y, size_t axis,
                                     int64_t channels);

}  // namespace collage::xsmm
