// Stride-1 convolutions by Winograd's minimal filtering in channels-last layout: 3x3 as
// F(4x4, 3x3) or F(2x2, 3x3), and Inception's factorized 1x3, 3x1, 1x7, 7x1 convs with one axis
// transformed (F(1x4, 1x7), ...). Collage's own input and output transforms around one
// batched oneDNN matmul (one product per point of the transformed tile, with the transformed
// weights). It is what the "winograd" (4 outputs per tile side) and "winograd2x2" (2)
// variants build where they apply, because oneDNN 2.6's Winograd kernels read only nChw16c
// (3x3 only) while its direct kernels (brgconv) read and write channels-last: inside a region
// a oneDNN Winograd conv costs a reorder on each side (docs/DESIGN.md, "Why Winograd gains
// little inside a region"); this one reads and writes what its neighbours do. Measured
// standalone (2 threads, this EPYC, conv + bias + Relu, channels-last in and out): against
// brgconv 1.3x at 64->64 56x56, 1.65x at 128->128 28x28, 1.57x at 256->256 14x14, 2.0x at
// 128->192 28x28; 0.29x at 512->512 7x7 (its 36 transformed weight matrices, 38 MB, are read
// each run for 4 tiles): the tuner measures it per conv like any variant. F(2x2, 3x3) saves
// 2.25x the multiplies instead of 4x but its transformed weights are 16/9 of the direct ones
// instead of 4x: inside a large model, whose weights stream from memory each run, it is the
// one that pays on small images with many channels (docs/DESIGN.md, "Winograd 2x2"). Timed
// inside ResNet-50 since its transforms run on vector values (docs/DESIGN.md, "Winograd's
// transforms, rewritten"): 0.26-0.30 ms against brgconv's 0.49 at 64->64 56x56, 0.31-0.34
// against 0.485 at 128->128 28x28.
#pragma once

#include <vector>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"

namespace collage::onednn {

// Whether Conv node `n` has a shape collage's Winograd computes: 3x3 (F(4x4, 3x3) /
// F(2x2, 3x3)), or 1x3, 3x1, 1x7, 7x1 (F(1x4, 1x3), ..., F(4x1, 7x1): one axis transformed,
// Inception's factorized convs), stride 1, one group, any dilation (each phase of a dilated
// conv an undilated one: DeepLab's and FCN's atrous convs), pads of at most the dilated
// taps' span (winograd_candidate's 3x3 forms with auto_pad too).
bool winograd_conv_shape(const Graph& g, const Node& n);

// Such a conv with a 3x3 filter: where F(2x2, 3x3) is measured besides F(4x4, 3x3).
bool winograd_3x3_shape(const Graph& g, const Node& n);

// Whether such a conv that emit_conv takes (float32, constant weights), writing an output
// shaped `out`, can be built here with its tail `ops` after the bias folded in: Relu,
// LeakyRelu, Clip and one residual Add of a computed tensor shaped `out` (ResNet's basic
// block), applied in the output transform.
bool winograd_conv_takes(const std::vector<PostOp>& ops, const Shape& out);

// Outputs per tile along each filtered axis: F(2, r) or F(4, r). Two saves fewer multiplies
// (2.25x for 3x3 instead of 4x) with fewer weight bytes (16/9 of direct instead of 4x).
enum class WinogradTile { k2, k4 };

// Emits `conv` (winograd_conv_shape) with `tile` reading `x` (N, C, H, W) and writing `out`
// (N, K, OH, OW) with `bias` per output channel and the tail `ops` (winograd_conv_takes), top
// and left pads `pad_t`, `pad_l`: one program step (transforms and matmul in work items of its
// threads, winograd_conv.cc).
void emit_winograd_conv(WinogradTile tile, const Graph& g, const Node& conv,
                        const std::vector<float>& bias, const std::vector<PostOp>& ops,
                        int64_t pad_t, int64_t pad_l, ValueId out, ValueMemories& values);

// The names implementations() reports for that step, by tile (the names of the 3x3 forms,
// kept for every filter so that profiles and tests read one name per tile).
inline constexpr const char* kWinogradF43Step = "collage:winograd_f43";
inline constexpr const char* kWinogradF23Step = "collage:winograd_f23";

}  // namespace collage::onednn
