#include "backends/xnnpack/op_kernels.h"

namespace collage::xnnpack {

OperatorSpec fully_connected_operator(const Graph& subgraph, const Node& node,
                                      const ClampRange& clamp) {
  FullyConnectedParams p = fully_connected_params(subgraph, node);
  xnn_operator_t op = nullptr;
  // Weights are [N, K] (no XNN_FLAG_TRANSPOSE_WEIGHTS); packed by XNNPACK here.
  check_status(xnn_create_fully_connected_nc_f32(
                   p.input_channels, p.output_channels, p.input_channels, p.output_channels,
                   p.weights.data(), p.bias.empty() ? nullptr : p.bias.data(), clamp.min, clamp.max,
                   kOperatorFlags, &op),
               "create fully connected");
  OperatorSpec spec;
  spec.op.reset(op);
  spec.what = "fully connected";
  spec.inputs = {bind_operand(subgraph, node.inputs[0], /*nhwc=*/false)};
  spec.output_nchw = subgraph.value(node.outputs[0]).shape;
  size_t rows = shape_numel(subgraph.value(node.inputs[0]).shape) / p.input_channels;
  spec.setup = [op, rows](const float* const* in, float* out, pthreadpool_t pool) {
    return xnn_setup_fully_connected_nc_f32(op, rows, in[0], out, pool);
  };
  return spec;
}

}  // namespace collage::xnnpack
