#include <xnnpack.h>

#include "backends/xnnpack/op_kernels.h"

namespace collage::xnnpack {
namespace {

std::vector<size_t> dims_of(const Node& node, const Shape& shape) {
  if (shape.size() > XNN_MAX_TENSOR_DIMS)
    fail(ErrorKind::kUnsupported, "xnnpack: '{}' has rank {} > {}", node.name, shape.size(),
         XNN_MAX_TENSOR_DIMS);
  return {shape.begin(), shape.end()};
}

using CreateBinary = xnn_status (*)(float, float, uint32_t, xnn_operator_t*);
using SetupBinary = xnn_status (*)(xnn_operator_t, size_t, const size_t*, size_t, const size_t*,
                                   const float*, const float*, float*, pthreadpool_t);
using CreateUnary = xnn_status (*)(size_t, size_t, size_t, uint32_t, xnn_operator_t*);
using SetupUnary = xnn_status (*)(xnn_operator_t, size_t, const float*, float*, pthreadpool_t);

// A [batch, channels] row-major view of the whole tensor for the *_nc operators.
OperatorSpec nc_operator(const Graph& subgraph, const Node& node, xnn_operator_t op,
                         SetupUnary setup, size_t batch) {
  OperatorSpec spec;
  spec.op.reset(op);
  spec.what = "elementwise";
  spec.inputs = {bind_operand(subgraph, node.inputs[0], /*nhwc=*/false)};
  spec.output_nchw = subgraph.value(node.outputs[0]).shape;
  spec.setup = [op, setup, batch](const float* const* in, float* out, pthreadpool_t pool) {
    return setup(op, batch, in[0], out, pool);
  };
  return spec;
}

}  // namespace

OperatorSpec binary_operator(const Graph& subgraph, const Node& node, const ClampRange& clamp) {
  require_float32(subgraph, node);
  CreateBinary create = nullptr;
  SetupBinary setup = nullptr;
  if (node.op_type == "Add") {
    create = xnn_create_add_nd_f32;
    setup = xnn_setup_add_nd_f32;
  } else if (node.op_type == "Mul") {
    create = xnn_create_multiply_nd_f32;
    setup = xnn_setup_multiply_nd_f32;
  } else if (node.op_type == "Sub") {
    create = xnn_create_subtract_nd_f32;
    setup = xnn_setup_subtract_nd_f32;
  } else if (node.op_type == "Div") {
    create = xnn_create_divide_nd_f32;
    setup = xnn_setup_divide_nd_f32;
  } else {
    fail(ErrorKind::kUnsupported, "xnnpack: {} is not a binary op", node.op_type);
  }
  if (node.inputs.size() != 2) fail(ErrorKind::kUnsupported, "xnnpack: {} arity", node.name);
  std::vector<size_t> a = dims_of(node, subgraph.value(node.inputs[0]).shape);
  std::vector<size_t> b = dims_of(node, subgraph.value(node.inputs[1]).shape);
  xnn_operator_t op = nullptr;
  check_status(create(clamp.min, clamp.max, kOperatorFlags, &op), "create binary operator");
  OperatorSpec spec;
  spec.op.reset(op);
  spec.what = "binary elementwise";
  spec.inputs = {bind_operand(subgraph, node.inputs[0], false),
                 bind_operand(subgraph, node.inputs[1], false)};
  spec.output_nchw = subgraph.value(node.outputs[0]).shape;
  spec.setup = [op, setup, a, b](const float* const* in, float* out, pthreadpool_t pool) {
    return setup(op, a.size(), a.data(), b.size(), b.data(), in[0], in[1], out, pool);
  };
  return spec;
}

OperatorSpec unary_operator(const Graph& subgraph, const Node& node) {
  require_float32(subgraph, node);
  const Shape& x = subgraph.value(node.inputs.at(0)).shape;
  size_t numel = static_cast<size_t>(shape_numel(x));
  if (numel == 0) fail(ErrorKind::kUnsupported, "xnnpack: '{}' is empty", node.name);
  xnn_operator_t op = nullptr;
  if (is_clamp_op(node)) {
    ClampRange r = clamp_range(subgraph, node);
    check_status(xnn_create_clamp_nc_f32(numel, numel, numel, r.min, r.max, kOperatorFlags, &op),
                 "create clamp");
    return nc_operator(subgraph, node, op, xnn_setup_clamp_nc_f32, 1);
  }
  if (node.op_type == "Sigmoid") {
    check_status(xnn_create_sigmoid_nc_f32(numel, numel, numel, kOperatorFlags, &op),
                 "create sigmoid");
    return nc_operator(subgraph, node, op, xnn_setup_sigmoid_nc_f32, 1);
  }
  if (node.op_type == "Softmax") {
    std::optional<int64_t> row = softmax_row_length(subgraph, node);
    if (!row || *row <= 0)
      fail(ErrorKind::kUnsupported,
           "xnnpack: Softmax '{}' does not reduce over contiguous trailing elements", node.name);
    size_t n = static_cast<size_t>(*row);
    check_status(xnn_create_softmax_nc_f32(n, n, n, kOperatorFlags, &op), "create softmax");
    return nc_operator(subgraph, node, op, xnn_setup_softmax_nc_f32, numel / n);
  }
  fail(ErrorKind::kUnsupported, "xnnpack: no unary operator for {}", node.op_type);
}

}  // namespace collage::xnnpack
