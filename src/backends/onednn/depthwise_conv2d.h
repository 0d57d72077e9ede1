// 2-D depthwise convolutions (one input channel per group, one output channel per input) over
// channel-blocked activations (oneDNN's nChw16c) as a step of collage's own in onednn
// programs: what a region built "blocked" (ConvAlgorithm::kBlocked) runs for the 3x3
// depthwise convs of MobileNet-style networks instead of oneDNN's jit_dw kernel.
//
// Why: the depthwise convs of MobileNetV2's tuned plan ran at ~13 cycles per 16-channel output
// pixel in oneDNN 2.6.3 (jit_dw nChw16c and brdgmm_dw channels-last alike, ~28 % of this EPYC's
// FMA peak). Here each work item is one block of 16 channels over a band of output rows: the
// block's K x K weights stay in vector registers, four neighbouring output pixels are
// accumulated at once from the input pixels they share, and every load is at a constant
// offset from one row pointer (a channel block's pixels lie 16 floats apart), so nothing
// but the loads and FMAs is left in the loop. Measured alone, hot, 2 threads, this EPYC
// (bias + ReLU6, nChw16c in and out, the same outputs bit for bit): MobileNetV2's shapes
// 1.08-1.75x faster than jit_dw (32 channels 112x112 32.8 -> 24.0 us, 96 at 112x112 stride 2
// 52.4 -> 30.0, 144 at 56x56 47.1 -> 31.2, 576 at 14x14 8.8 -> 8.1), ShuffleNetV2's and
// MobileNetV3's 1.2-1.5x. Not 5x5: its 25 weights, four accumulators and eight input pixels
// outgrow the 32 vector registers, and it measured 0.66-1.05x jit_dw (960 channels 7x7 7.5
// -> 11.2 us, 672 at 14x14 20.2 -> 23.0), so 5x5 convs stay oneDNN's.
//
// What is taken: a float32 4-D Conv with group = input channels = output channels, constant
// [C, 1, 3, 3] weights, a constant bias or none, strides 1 or 2 (the same on both axes), no
// dilation, pads of at most 2; and a tail of Relu, Clip (runs of them folded into one clamp,
// applied as each output is stored), LeakyRelu, SiLU (x * Sigmoid(x)) and HardSwish (applied
// in a pass over each output row while it is in cache; util/fast_math.h's exp). Anything else
// stays oneDNN's.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backends/onednn/conv_row_step.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/value_memories.h"
#include "collage/graph.h"
#include "collage/tensor.h"

namespace collage::onednn {

// What implementations() reports for the step.
inline constexpr const char* kDepthwiseConv2dStep = "collage:depthwise_conv2d";

// Whether Conv node `n` of `g` has a shape the step takes (above), its tail aside.
bool depthwise_conv2d_shape(const Graph& g, const Node& n);
// Whether the step applies tail `ops` (the conv's bias already taken out of them).
bool depthwise_conv2d_takes(const std::vector<PostOp>& ops);

// Where a channel-blocked tensor's element (n, c, y, x) lies, in floats: offset + n * sn +
// (c / 16) * sc + (y * W + x) * 16 + c % 16 (the pixels of a block dense; the batch and
// block strides free, so that a slice of a concatenation done in place is read or written
// where it is).
struct BlockedStrides {
  int64_t sn = 0, sc = 0, offset = 0;
};

// One function of a conv step's tail: a clamp to [a, b] (runs of Relu and Clip), LeakyRelu with
// slope a, Swish x * sigmoid(a x) (SiLU: a = 1), HardSwish. Shared with the grouped step
// (grouped_conv2d.h).
struct ConvActivation {
  enum class Kind { kClamp, kLeakyRelu, kSwish, kHardSwish } kind;
  float a = 0, b = 0;
};
// Tail `ops` as such functions in order (runs of Relu and Clip folded into one clamp), or
// nullopt where one is not such a function.
std::optional<std::vector<ConvActivation>> conv_activations(const std::vector<PostOp>& ops);
// `v` through `tail` (oneDNN's definitions, on 16 channels; a NaN stays a NaN).
Vec16 activate(const std::vector<ConvActivation>& tail, Vec16 v);
// How a step applies `tail`: a lone clamp (or nothing) as each output is stored; any other
// tail in a pass over each output row after it, which keeps its code out of the loop of FMAs
// (a HardSwish applied per output made MobileNetV3-Large's blocked region 1.09x slower than
// oneDNN's kernel).
struct TailClamp {
  explicit TailClamp(const std::vector<ConvActivation>& tail);
  Vec16 operator()(Vec16 v) const {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
  }
  bool clamp_only;  // else: activate() the row after
  Vec16 lo, hi;
};

// `md` as BlockedStrides: 4-D float32, channels in blocks of 16, a block's pixels dense.
std::optional<BlockedStrides> blocked_strides(const dnnl::memory::desc& md);

// The step's computation, with its geometry and constants.
class DepthwiseConv2d {
 public:
  using Activation = ConvActivation;

  // x [N, C, H, W], y [N, C, OH, OW], weights [C, 1, K, K], `bias` C values or empty, the
  // same `stride` on both axes, top and left pads, the tail `ops` (depthwise_conv2d_takes).
  DepthwiseConv2d(const Shape& x, const Shape& y, const Tensor& weights,
                  const std::vector<float>& bias, int64_t stride, int64_t pad_t, int64_t pad_l,
                  const std::vector<PostOp>& ops, BlockedStrides in, BlockedStrides out);
  // y = tail(conv(x) + bias), both channel-blocked where the constructor said.
  void run(const float* x, float* y) const;

 private:
  template <int K, int S>
  void rows(const float* x, float* y, int64_t n, int64_t block, int64_t oy0, int64_t oy1) const;

  ConvRowGeometry geo_;
  int64_t k_;
  std::vector<Activation> activations_;  // the tail, in order
  BlockedStrides in_, out_;
  std::vector<float> taps_;   // [C / 16 blocks][K * K][16]: lanes past C zero
  std::vector<float> bias_;   // [blocks * 16]
  std::vector<float> zeros_;  // one padded input row of a block: taps above or below the image
};

// Whether the step would read `x` (shaped `xs`) and write `out` where they are: x in a
// channel-blocked layout (or row-major, which any conv reorders), out with no home in another
// layout. Elsewhere oneDNN's kernel reads x as it is: converting it cost ShuffleNetV2, whose
// depthwise convs read channels-last splits, 1.04x end to end.
bool depthwise_conv2d_fits(const ValueMemories& values, ValueId x, const Shape& xs, ValueId out);

// Emits depthwise conv `conv` of `g` (depthwise_conv2d_shape, depthwise_conv2d_fits) writing
// `out` with `bias` per channel (empty: none) and tail `ops` (depthwise_conv2d_takes), top and
// left pads `pad_t`, `pad_l`: one program step reading its input channel-blocked and writing
// `out` channel-blocked.
void emit_depthwise_conv2d(const Graph& g, const Node& conv, const std::vector<float>& bias,
                           const std::vector<PostOp>& ops, int64_t pad_t, int64_t pad_l,
                           ValueId out, ValueMemories& values);

}  // namespace collage::onednn
