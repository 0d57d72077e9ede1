// What the `torch` and `torch-graph` backends accept, and the window geometry both lower
// to ATen calls. Torch-free on purpose: the pattern tables live in collage_core, which must
// not pull in libtorch (it costs seconds at every process start), and the kernels in the
// plugin share these decisions so that a pattern never promises what compile() refuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage::torch_backend {

// The op-level backend's anchor ops (a kernel is one of these plus an optional tail).
bool op_level_head(const Graph& graph, const Node& node);
// Ops a TorchScript region may contain.
bool region_supports(const Graph& graph, const Node& node);
// Every op type region_supports can accept (for listings and the region fusion rule).
const std::vector<std::string>& region_op_types();

// A Conv / pool window lowered to ATen: ATen takes one symmetric pad per axis, so
// asymmetric (or ceil_mode) windows are padded explicitly first with constant_pad_nd.
struct WindowLowering {
  std::vector<int64_t> kernel, stride, dilation;
  std::vector<int64_t> padding;  // symmetric, handed to the ATen op
  // constant_pad_nd pads (last axis first, begin/end pairs); empty when not needed.
  std::vector<int64_t> pre_pad;
  bool ceil_mode = false;
};

// Conv: padding/pre_pad reproduce the ONNX output size exactly.
WindowLowering conv_lowering(const Graph& graph, const Node& node);
// Max/AveragePool. For AveragePool the ATen op always divides by the full window
// (count_include_pad=True over the pre-padded input) when pre_pad is set: `divisor_scale`
// then holds, per output position (spatial dims only, row-major), the factor that turns
// that into ONNX's divisor; empty when ATen's own divisor is already right.
struct PoolLowering {
  WindowLowering window;
  bool count_include_pad = false;  // handed to ATen on the direct path
  std::vector<float> divisor_scale;
  std::vector<int64_t> out_spatial;
};
PoolLowering pool_lowering(const Graph& graph, const Node& node);

// ConvTranspose: ATen's transposed conv with `padding`/`output_padding`, then `post_pad`
// (constant_pad_nd: negative entries crop, positive ones add zeros) when the ONNX pads
// cannot be expressed directly; the bias is then added after the crop.
struct TransposedLowering {
  std::vector<int64_t> stride, dilation, padding, output_padding;
  std::vector<int64_t> post_pad;
  int64_t groups = 1;
};
TransposedLowering conv_transpose_lowering(const Graph& graph, const Node& node);

// LayerNormalization's normalized shape (the input's dims from `axis` on).
std::vector<int64_t> layer_norm_shape(const Graph& graph, const Node& node);

bool is_f32(const Graph& graph, ValueId v);
bool is_const(const Graph& graph, ValueId v);
// True when the node's optional outputs beyond the first are omitted.
bool single_output(const Node& node);

}  // namespace collage::torch_backend
