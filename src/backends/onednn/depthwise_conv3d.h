// Depthwise 3-D convolutions (one input channel per group, one output channel per input) as a
// step of collage's own in onednn programs, channels-last: per output pixel, every tap's
// input pixel times the tap's weights, vectorized over the channels, the rows of output
// pixels split between the threads.
//
// Why: oneDNN 2.6 has no jit kernel for them (a depthwise 3-D conv runs as its gemm-based
// convolution, an im2col and a GEMM per channel), and video models are built on them: an
// X3D-S-style network (13 frames at 160x160, 3x3x3 depthwise convs of 54-432 channels) spent
// 57 of its 66 ms of primitives in them (2026-12-07, 2 threads), 0.40-0.45x ONNX Runtime.
//
// What is taken: a float32 5-D Conv with group = input channels = output channels, constant
// weights and bias, any kernel, strides, dilations and pads, where oneDNN's own kernel for it
// is not a jit one. The conv's elementwise tail runs after it as a binary primitive's
// post-ops (conv_kernel.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "collage/graph.h"
#include "collage/tensor.h"

namespace collage::onednn {

// What implementations() reports for the step.
inline constexpr const char* kDepthwiseConv3dStep = "collage:depthwise_conv3d";

// Whether `n` is a depthwise 3-D Conv the step takes (above).
bool depthwise_conv3d_takes(const Graph& g, const Node& n);

// The step's computation, with its geometry and constants.
class DepthwiseConv3d {
 public:
  // x [N, C, D, H, W] and y [N, C, OD, OH, OW] (the step reads and writes them channels-last),
  // weights [C, 1, KD, KH, KW], `bias` C values or empty; strides, dilations and begin pads per
  // spatial axis (ONNX's: a dilation of 1 is none).
  DepthwiseConv3d(const Shape& x, const Shape& y, const Tensor& weights, std::vector<float> bias,
                  std::vector<int64_t> strides, std::vector<int64_t> dilations,
                  std::vector<int64_t> pads_begin);
  // y = conv(x): both channels-last, flat float32.
  void run(const float* x, float* y) const;

 private:
  int64_t n_, c_, in_[3], out_[3], k_[3];
  std::vector<int64_t> strides_, dilations_, pads_;
  std::vector<float> taps_;  // [KD * KH * KW, C]: each tap's weight for every channel
  std::vector<float> bias_;  // C values (zeros without a bias)
};

}  // namespace collage::onednn
