#include "backends/xnnpack/op_kernels.h"

namespace collage::xnnpack {

OperatorSpec conv_operator(const Graph& subgraph, const Node& node, const ClampRange& clamp) {
  ConvParams p = conv_params(subgraph, node);
  const Shape& x = subgraph.value(node.inputs[0]).shape;
  const Shape& y = subgraph.value(node.outputs[0]).shape;
  const Window2d& w = p.window;
  xnn_operator_t op = nullptr;
  // XNNPACK packs the weights into its own buffer here: p's vectors may go afterwards.
  check_status(
      xnn_create_convolution2d_nhwc_f32(
          w.pad_top, w.pad_right, w.pad_bottom, w.pad_left, w.kernel_h, w.kernel_w, w.stride_h,
          w.stride_w, w.dilation_h, w.dilation_w, p.groups, p.group_input_channels,
          p.group_output_channels, x[1], y[1], p.weights_ohwi.data(),
          p.bias.empty() ? nullptr : p.bias.data(), clamp.min, clamp.max, kOperatorFlags, &op),
      "create convolution");
  OperatorSpec spec;
  spec.op.reset(op);
  spec.what = "convolution";
  spec.inputs = {bind_operand(subgraph, node.inputs[0], /*nhwc=*/true)};
  spec.output_staged_nhwc = true;
  spec.output_nchw = y;
  size_t batch = x[0], height = x[2], width = x[3];
  spec.setup = [op, batch, height, width](const float* const* in, float* out, pthreadpool_t pool) {
    return xnn_setup_convolution2d_nhwc_f32(op, batch, height, width, in[0], out, pool);
  };
  return spec;
}

}  // namespace collage::xnnpack
