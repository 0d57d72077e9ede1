// A 3x3 stride-1 convolution by Winograd's minimal filtering F(4x4, 3x3) or F(2x2, 3x3) in
// channels-last layout: collage's own input and output transforms around one batched oneDNN
// matmul (the 36 or 16 products of the transformed tiles with the transformed weights). It is
// what the "winograd" (4x4) and "winograd2x2" variants build where they apply, because oneDNN 2.6's
// Winograd kernels read only nChw16c while its direct 3x3 and 1x1 kernels (brgconv) read and write
// channels-last: inside a region a oneDNN Winograd conv costs a reorder on each side
// (docs/DESIGN.md, "Why Winograd gains little inside a region"); this one reads and writes what its
// neighbours do. Measured standalone (2 threads, this EPYC, conv + bias + Relu, channels-last in
// and out): against brgconv 1.3x at 64->64 56x56, 1.65x at 128->128 28x28, 1.57x at 256->256 14x14,
// 2.0x at 128->192 28x28; 0.29x at 512->512 7x7 (its 36 transformed weight matrices, 38 MB,
// are read each run for 4 tiles): the tuner measures it per conv like any variant.
// F(2x2, 3x3) saves 2.25x the multiplies instead of 4x but its transformed weights are 16/9
// of the direct ones instead of 4x: inside a large model, whose weights stream from memory
// each run, it is the one that pays on small images with many channels (docs/DESIGN.md,
// "Winograd 2x2").
#pragma once

#include <vector>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether a Winograd-shaped conv (winograd_candidate: 2-D 3x3 stride-1 undilated, one group)
// that emit_conv takes (float32, constant weights), writing an output shaped `out`, can be
// built here with its tail `ops` after the bias folded in: Relu, LeakyRelu, Clip and one
// residual Add of a computed tensor shaped `out` (ResNet's basic block), applied in the output
// transform.
bool winograd_conv_takes(const std::vector<PostOp>& ops, const Shape& out);

enum class WinogradTile { k2x2, k4x4 };  // output tile side: F(2x2, 3x3) or F(4x4, 3x3)

// Emits `conv` as F(`tile`, 3x3) reading `x` (N, C, H, W) and writing `out` (N, K, OH, OW) with
// `bias` per output channel and the tail `ops` (winograd_conv_takes), top and left pads
// `pad_t`, `pad_l`: one program step (transforms and matmul in work items of its threads,
// winograd_conv.cc).
void emit_winograd_conv(WinogradTile tile, const Graph& g, const Node& conv,
                        const std::vector<float>& bias, const std::vector<PostOp>& ops,
                        int64_t pad_t, int64_t pad_l, ValueId out, ValueMemories& values);

// The names implementations() reports for that step.
inline constexpr const char* kWinogradF43Step = "collage:winograd_f43";
inline constexpr const char* kWinogradF23Step = "collage:winograd_f23";

}  // namespace collage::onednn
