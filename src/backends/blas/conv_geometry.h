// What the Conv and ConvTranspose kernels share: operands, batch/channel/group sizes, the
// window (as 3-D), plane sizes, and the bias as an epilogue addend. Each kernel computes
// its own N-D window (they differ: ConvTranspose's output grows with the stride).
#pragma once

#include <vector>

#include "backends/blas/epilogue.h"
#include "backends/blas/fused_group.h"
#include "ops/nn_util.h"

namespace collage::blas {

struct ConvGeometry {
  Operand x, w;
  int64_t batch = 0, channels = 0, filters = 0, group = 1;
  ops::nn::Window win;  // 3-D; `in` and `out` are the op's input and output sizes
  int64_t in_plane = 0, out_plane = 0, taps = 0;
  // 1x1, stride 1, no padding, output size = input size: the GEMM alone does the op.
  bool unit_window = false;
};

// Operands, rank (1-D to 3-D), batch, channels and group of `node` (a Conv or a
// ConvTranspose); filters and the window are the caller's. Throws Error(kUnsupported).
ConvGeometry parse_conv_operands(const Graph& g, const Node& node);
// Fills the window fields from the N-D `win`, checked against the inferred output shape.
void set_conv_window(ConvGeometry& p, const ops::nn::Window& win, const Graph& g, const Node& node);
// The bias (input 2), if any, as an addend of one value per output channel.
std::vector<HeadAddend> conv_bias_addends(const Graph& g, const Node& node, const ConvGeometry& p);

}  // namespace collage::blas
