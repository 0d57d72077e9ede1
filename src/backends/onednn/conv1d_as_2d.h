// Grouped and depthwise 1-D convolutions as 2-D ones of height 1: a Reshape of x to
// [N, C, 1, L], the Conv with its weights [O, I/g, 1, K] and attributes over (1, K), a
// Reshape back to [N, O, L'].
// Why: oneDNN 2.6 has no jit kernel for a grouped convolution over one spatial axis: it runs
// them on its gemm-based kernel (im2col per group, "x64:gemm:jit"), where the same
// convolution written over [N, C, 1, L] runs on its depthwise brgemm kernel
// ("brdgmm_dw:avx512_core"). Measured (2 threads, this EPYC, DNNL_VERBOSE): a depthwise
// Conv1d of 256 channels, kernel 31, over 99 steps (a Conformer's convolution module)
// 0.164-0.189 ms as 1-D against 0.006 ms (and two reorders of 0.005) as 2-D; ONNX Runtime
// 0.108. In a Conformer-style encoder (4 blocks, 256 wide, 400 frames) its four took 1.65 of
// the 12.2 ms of its region's primitives, and the model ran at 0.96-0.97x ONNX Runtime.
// Only where that changes oneDNN's choice from its gemm-based kernel to a jit one: group-1
// and 16-channels-a-group 1-D convolutions run on brgconv kernels either way (a wav2vec2
// positional conv, 768 channels in 16 groups, kernel 128: 0.59 and 0.58 ms), and a dilated
// depthwise one or one of 2 channels a group on the gemm-based kernel either way.
#pragma once

#include "collage/graph.h"

namespace collage::onednn {

// Whether node `n` of `g` is a Conv this rewrites: float32 input of rank 3 and known shape,
// group > 1, constant weights, where oneDNN has a jit kernel for its 2-D form and none for
// its 1-D form.
bool conv1d_faster_as_2d(const Graph& g, const Node& n);
// `g` with each such Conv rewritten as above (the Conv keeps its name); the other nodes keep
// their names and order.
Graph lift_1d_convs_to_2d(const Graph& g);

}  // namespace collage::onednn
