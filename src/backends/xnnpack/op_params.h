// ONNX node attributes translated to XNNPACK's parameters, shared by the op-level kernels
// and the subgraph builder. Each function throws Error(kUnsupported) for what XNNPACK
// can't express exactly, so both backends refuse the same things for the same reasons.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "collage/graph.h"

namespace collage::xnnpack {

struct ClampRange {
  float min = -std::numeric_limits<float>::infinity();
  float max = std::numeric_limits<float>::infinity();
};

// 2-D sliding window with explicit padding (auto_pad resolved, ceil_mode folded into extra
// end padding where that gives ONNX's output size).
struct Window2d {
  uint32_t pad_top = 0, pad_right = 0, pad_bottom = 0, pad_left = 0;
  uint32_t kernel_h = 1, kernel_w = 1;
  uint32_t stride_h = 1, stride_w = 1;
  uint32_t dilation_h = 1, dilation_w = 1;
};

struct ConvParams {
  Window2d window;
  uint32_t groups = 1;
  size_t group_input_channels = 0, group_output_channels = 0;
  std::vector<float> weights_ohwi;  // [O, KH, KW, I/groups]
  std::vector<float> bias;          // [O], empty without bias
};

struct FullyConnectedParams {
  size_t input_channels = 0, output_channels = 0;
  std::vector<float> weights;  // [output_channels, input_channels]
  std::vector<float> bias;     // [output_channels], empty without bias
};

// Throws unless every present input and output of `node` is float32.
void require_float32(const Graph& graph, const Node& node);
bool all_float32(const Graph& graph, const Node& node);

// Conv over NCHW (rank 4) with constant weights and bias.
ConvParams conv_params(const Graph& graph, const Node& node);
// MaxPool (one output), AveragePool; NCHW rank 4.
Window2d pool_window(const Graph& graph, const Node& node);
// MatMul with a constant 2-D B, or Gemm with constant B and a C that is a bias row.
FullyConnectedParams fully_connected_params(const Graph& graph, const Node& node);
// Relu, or Clip with constant (or omitted) bounds.
ClampRange clamp_range(const Graph& graph, const Node& node);
// For Softmax: the row length when it reduces over contiguous trailing elements of its
// row-major input (nullopt otherwise).
std::optional<int64_t> softmax_row_length(const Graph& graph, const Node& node);

bool is_clamp_op(const Node& node);
bool is_binary_op(const Node& node);  // Add, Mul, Sub, Div

}  // namespace collage::xnnpack
