// Conv (1-D to 3-D, groups, strides, dilations, pads, auto_pad) as im2col + sgemm per
// image and group; a 1x1 stride-1 unpadded Conv is a plain GEMM on the input.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::blas {

// `subgraph`'s head (node `head`) is a Conv. Depthwise convolutions (one input channel per
// group) are refused with Error(kUnsupported): im2col makes them slow, other backends win.
std::unique_ptr<Kernel> compile_conv(const Graph& subgraph, NodeId head, int threads);

}  // namespace collage::blas
