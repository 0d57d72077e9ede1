#include "backends/xnnpack/op_kernels.h"

namespace collage::xnnpack {

OperatorSpec pool_operator(const Graph& subgraph, const Node& node, const ClampRange& clamp) {
  require_float32(subgraph, node);
  const Shape& x = subgraph.value(node.inputs[0]).shape;
  if (x.size() != 4)
    fail(ErrorKind::kUnsupported, "xnnpack: {} '{}' needs an NCHW input", node.op_type, node.name);
  size_t batch = x[0], channels = x[1], height = x[2], width = x[3];
  OperatorSpec spec;
  spec.inputs = {bind_operand(subgraph, node.inputs[0], /*nhwc=*/true)};
  spec.output_nchw = subgraph.value(node.outputs[0]).shape;
  xnn_operator_t op = nullptr;
  if (node.op_type == "GlobalAveragePool") {
    spec.what = "global average pooling";
    check_status(xnn_create_global_average_pooling_nwc_f32(channels, channels, channels, clamp.min,
                                                           clamp.max, kOperatorFlags, &op),
                 "create global average pooling");
    // [N, 1, 1, C] is the same sequence as NCHW's [N, C, 1, 1]: no output transpose.
    spec.output_staged_nhwc = false;
    spec.setup = [op, batch, height, width](const float* const* in, float* out,
                                            pthreadpool_t pool) {
      return xnn_setup_global_average_pooling_nwc_f32(op, batch, height * width, in[0], out, pool);
    };
    spec.op.reset(op);
    return spec;
  }
  Window2d w = pool_window(subgraph, node);
  if (node.op_type == "MaxPool") {
    spec.what = "max pooling";
    check_status(xnn_create_max_pooling2d_nhwc_f32(
                     w.pad_top, w.pad_right, w.pad_bottom, w.pad_left, w.kernel_h, w.kernel_w,
                     w.stride_h, w.stride_w, w.dilation_h, w.dilation_w, channels, channels,
                     channels, clamp.min, clamp.max, kOperatorFlags, &op),
                 "create max pooling");
    spec.setup = [op, batch, height, width](const float* const* in, float* out,
                                            pthreadpool_t pool) {
      return xnn_setup_max_pooling2d_nhwc_f32(op, batch, height, width, in[0], out, pool);
    };
  } else if (node.op_type == "AveragePool") {
    spec.what = "average pooling";
    check_status(
        xnn_create_average_pooling2d_nhwc_f32(
            w.pad_top, w.pad_right, w.pad_bottom, w.pad_left, w.kernel_h, w.kernel_w, w.stride_h,
            w.stride_w, channels, channels, channels, clamp.min, clamp.max, kOperatorFlags, &op),
        "create average pooling");
    spec.setup = [op, batch, height, width](const float* const* in, float* out,
                                            pthreadpool_t pool) {
      return xnn_setup_average_pooling2d_nhwc_f32(op, batch, height, width, in[0], out, pool);
    };
  } else {
    fail(ErrorKind::kUnsupported, "xnnpack: {} is not a pooling op", node.op_type);
  }
  spec.op.reset(op);
  spec.output_staged_nhwc = true;
  return spec;
}

}  // namespace collage::xnnpack
