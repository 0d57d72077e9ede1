// ConvTranspose (1-D to 3-D, groups, strides, dilations, pads, output_padding,
// output_shape, auto_pad) as sgemm (W^T X: every tap of every input position) + col2im
// (scatter-add of the taps into the output), per image and group.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::blas {

// `subgraph`'s head (node `head`) is a ConvTranspose. Throws Error(kUnsupported).
std::unique_ptr<Kernel> compile_conv_transpose(const Graph& subgraph, NodeId head, int threads);

}  // namespace collage::blas
