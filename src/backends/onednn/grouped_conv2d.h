// 2-D grouped 3x3 convolutions of narrow groups (4 channels a group; 8 at stride 2) over
// channels-last activations, as a step of collage's own in onednn programs: ResNeXt's
// "32x4d" convs.
//
// Why: oneDNN 2.6.3 runs them on its `jit:avx512_core` grouped kernel at 12-25 % of this
// EPYC's FMA peak (ResNeXt-50's 128-channel 56x56 conv of 32 groups ~55 GFLOP/s, in the model;
// its 1x1 convs ~300), so 16 grouped convs with 5 % of ResNeXt-50's multiplies took ~16 % of
// its time. Here each work item is one block of 16 output channels (4 groups of 4, or 2 of 8)
// over a band of output rows; four neighbouring output pixels are accumulated at once: each
// input pixel's 16 channels are loaded once and, per member j of a group, permuted so that
// every lane holds input channel j of its own group, then multiplied by the block's weights
// for that member and tap. Measured alone, hot, 2 threads, bias + Relu (docs/DESIGN.md,
// "Grouped 3x3 convs of narrow groups"): 4-wide groups 2.05x oneDNN at 128 channels 56x56,
// 2.71x at stride 2; 8-wide 1.60x at stride 2 but 0.98x at stride 1, and 16-wide 0.44-0.51x
// (oneDNN's kernel reaches 300 GFLOP/s there), so those stay oneDNN's.
//
// What is taken: a float32 4-D Conv with constant [C, G, 3, 3] weights of `group` = C / G > 1,
// C input and output channels, C a multiple of 16, G = 4 at stride 1 or 2, or G = 8 at stride
// 2 (the same on both axes); no dilation, pads of at most 2; a constant bias or none; and the
// depthwise step's tail (depthwise_conv2d.h: Relu, Clip, LeakyRelu, SiLU, HardSwish). Input
// and output channels-last or channel-blocked (nChw16c), slices of wider tensors too.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/onednn/conv_row_step.h"
#include "backends/onednn/depthwise_conv2d.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/tensor.h"

namespace collage::onednn {

// What implementations() reports for the step.
inline constexpr const char* kGroupedConv2dStep = "collage:grouped_conv2d";

// Whether Conv node `n` of `g` has a shape the step takes (above), its tail aside.
bool grouped_conv2d_shape(const Graph& g, const Node& n);

// Where the step's input or output element (n, c, y, x) lies, in floats: offset + n * sn +
// (c / 16) * sc + (y * W + x) * sp + c % 16. Channels-last: sc = 16, sp the pixel stride (C,
// or more in a slice of a wider tensor); channel-blocked (nChw16c): sc the block stride, sp 16.
struct GroupedConvStrides {
  int64_t sn = 0, sc = 0, sp = 0, offset = 0;
};

// The step's computation, with its geometry and constants.
class GroupedConv2d {
 public:
  // x [N, C, H, W], y [N, C, OH, OW], weights [C, G, 3, 3], `bias` C values or empty, the same
  // `stride` on both axes, top and left pads, the tail `ops` (conv_activations takes them).
  GroupedConv2d(const Shape& x, const Shape& y, const Tensor& weights,
                const std::vector<float>& bias, int64_t stride, int64_t pad_t, int64_t pad_l,
                const std::vector<PostOp>& ops, GroupedConvStrides in, GroupedConvStrides out);
  // y = tail(conv(x) + bias), both channels-last where the constructor said.
  void run(const float* x, float* y) const;

 private:
  template <int G, int S>
  void rows(const float* x, float* y, int64_t n, int64_t block, int64_t oy0, int64_t oy1) const;

  ConvRowGeometry geo_;
  int64_t width_;
  std::vector<ConvActivation> activations_;  // the tail, in order
  GroupedConvStrides in_, out_;
  std::vector<float> taps_;  // [C / 16 blocks][3][3][G members][16 lanes]
  std::vector<float> bias_;  // [C]
};

// Whether the step would read `x` (shaped `xs`) and write `out` where they are: channels-last,
// channel-blocked or not yet laid out.
bool grouped_conv2d_fits(const ValueMemories& values, ValueId x, const Shape& xs, ValueId out);

// Emits grouped conv `conv` of `g` (grouped_conv2d_shape, grouped_conv2d_fits) writing `out`
// with `bias` per channel and tail `ops`, top and left pads `pad_t`, `pad_l`: one program step
// reading its input where it is (channels-last where it has no layout yet) and writing `out`
// in its home's layout, else in the input's.
void emit_grouped_conv2d(const Graph& g, const Node& conv, const std::vector<float>& bias,
                         const std::vector<PostOp>& ops, int64_t pad_t, int64_t pad_l, ValueId out,
                         ValueMemories& values);

}  // namespace collage::onednn
