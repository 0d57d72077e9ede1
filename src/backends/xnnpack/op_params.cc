#include "backends/xnnpack/op_params.h"

#include "backends/xnnpack/layout.h"
#include "ops/nn_util.h"

namespace collage::xnnpack {
namespace {

template <typename... Args>
[[noreturn]] void unsupported(const Node& node, fmt::format_string<Args...> format,
                              Args&&... args) {
  throw Error(ErrorKind::kUnsupported,
              fmt::format("xnnpack: node '{}' ({}): {}", node.name, node.op_type,
                          fmt::format(format, std::forward<Args>(args)...)));
}

const Value& input_value(const Graph& graph, const Node& node, size_t i) {
  if (node.input(i) == kNoValue) unsupported(node, "input {} is missing", i);
  return graph.value(node.input(i));
}

const Tensor& constant_input(const Graph& graph, const Node& node, size_t i, const char* what) {
  const Value& v = input_value(graph, node, i);
  if (!v.is_constant()) unsupported(node, "{} must be a constant", what);
  return v.constant;
}

const Shape& rank4_input(const Graph& graph, const Node& node) {
  const Shape& x = input_value(graph, node, 0).shape;
  if (x.size() != 4) unsupported(node, "only 2-D (NCHW) inputs, got {}", shape_to_string(x));
  return x;
}

uint32_t to_u32(const Node& node, int64_t v) {
  if (v < 0 || v > INT32_MAX) unsupported(node, "parameter {} out of range", v);
  return static_cast<uint32_t>(v);
}

// ONNX window geometry -> XNNPACK's explicit padding. ONNX's ceil_mode adds a last window
// that hangs over the end: the same as extra end padding for ops that ignore padding.
Window2d to_window(const Node& node, const ops::nn::Window& w) {
  int64_t end_pad[2];
  for (int i = 0; i < 2; ++i) {
    if (w.out[i] <= 0) unsupported(node, "empty output");
    int64_t padded = w.in[i] + w.pad_begin[i] + w.pad_end[i];
    int64_t floor_out = padded >= w.span(i) ? (padded - w.span(i)) / w.stride[i] + 1 : 0;
    end_pad[i] = w.pad_end[i];
    if (w.out[i] > floor_out) end_pad[i] += (w.out[i] - 1) * w.stride[i] + w.span(i) - padded;
  }
  Window2d out;
  out.pad_top = to_u32(node, w.pad_begin[0]);
  out.pad_left = to_u32(node, w.pad_begin[1]);
  out.pad_bottom = to_u32(node, end_pad[0]);
  out.pad_right = to_u32(node, end_pad[1]);
  out.kernel_h = to_u32(node, w.kernel[0]);
  out.kernel_w = to_u32(node, w.kernel[1]);
  out.stride_h = to_u32(node, w.stride[0]);
  out.stride_w = to_u32(node, w.stride[1]);
  out.dilation_h = to_u32(node, w.dilation[0]);
  out.dilation_w = to_u32(node, w.dilation[1]);
  return out;
}

}  // namespace

bool all_float32(const Graph& graph, const Node& node) {
  for (const auto* ids : {&node.inputs, &node.outputs})
    for (ValueId v : *ids)
      if (v != kNoValue && graph.value(v).dtype != DType::kFloat32) return false;
  return true;
}

void require_float32(const Graph& graph, const Node& node) {
  if (!all_float32(graph, node)) unsupported(node, "only float32 tensors");
}

bool is_clamp_op(const Node& node) {
  return node.domain.empty() && (node.op_type == "Relu" || node.op_type == "Clip");
}

bool is_binary_op(const Node& node) {
  return node.domain.empty() && (node.op_type == "Add" || node.op_type == "Mul" ||
                                 node.op_type == "Sub" || node.op_type == "Div");
}

ConvParams conv_params(const Graph& graph, const Node& node) {
  require_float32(graph, node);
  const Shape& x = rank4_input(graph, node);
  const Tensor& w = constant_input(graph, node, 1, "the weight");
  if (w.rank() != 4) unsupported(node, "weight {} is not OIHW", shape_to_string(w.shape()));
  int64_t groups = node.attr_int("group", 1);
  int64_t out_channels = w.dim(0);
  if (groups <= 0 || x[1] != groups * w.dim(1) || out_channels % groups != 0)
    unsupported(node, "group {} does not fit input {} and weight {}", groups, shape_to_string(x),
                shape_to_string(w.shape()));
  ConvParams p;
  p.window = to_window(node, ops::nn::forward_window(node, {x[2], x[3]}, {w.dim(2), w.dim(3)},
                                                     /*ceil_mode=*/false));
  p.groups = to_u32(node, groups);
  p.group_input_channels = static_cast<size_t>(w.dim(1));
  p.group_output_channels = static_cast<size_t>(out_channels / groups);
  p.weights_ohwi = to_nhwc(w);
  if (node.input(2) != kNoValue) {
    const Tensor& b = constant_input(graph, node, 2, "the bias");
    if (b.numel() != out_channels) unsupported(node, "bias has {} values", b.numel());
    p.bias = b.to_float_vector();
  }
  return p;
}

Window2d pool_window(const Graph& graph, const Node& node) {
  require_float32(graph, node);
  const Shape& x = rank4_input(graph, node);
  bool average = node.op_type == "AveragePool";
  if (!average && node.outputs.size() > 1 && node.outputs[1] != kNoValue)
    unsupported(node, "the Indices output");
  ops::nn::Window w = ops::nn::forward_window(
      node, {x[2], x[3]}, ops::nn::pool_kernel_shape(node, 2), node.attr_int("ceil_mode", 0) != 0);
  // XNNPACK's max and average pooling refuse a 1x1 window (xnn_status_invalid_parameter,
  // probed with Debian's build); NASNet's factorized reductions have one with stride 2.
  if (w.kernel[0] == 1 && w.kernel[1] == 1) unsupported(node, "a 1x1 window");
  if (average) {
    // XNNPACK divides by the taps inside the input: ONNX's count_include_pad=0.
    bool padded = w.pad_begin[0] || w.pad_begin[1] || w.pad_end[0] || w.pad_end[1];
    if (node.attr_int("count_include_pad", 0) != 0 && padded)
      unsupported(node, "count_include_pad=1 with padding");
    if (w.dilation[0] != 1 || w.dilation[1] != 1) unsupported(node, "dilated average pooling");
  }
  return to_window(node, w);
}

FullyConnectedParams fully_connected_params(const Graph& graph, const Node& node) {
  require_float32(graph, node);
  const Shape& a = input_value(graph, node, 0).shape;
  const Tensor& b = constant_input(graph, node, 1, "B");
  if (b.rank() != 2) unsupported(node, "B must be a matrix, got {}", shape_to_string(b.shape()));
  bool gemm = node.op_type == "Gemm";
  bool trans_b = gemm && node.attr_int("transB", 0) != 0;
  if (gemm && node.attr_int("transA", 0) != 0) unsupported(node, "transA=1");
  if (a.empty()) unsupported(node, "a scalar A");
  FullyConnectedParams p;
  p.input_channels = static_cast<size_t>(trans_b ? b.dim(1) : b.dim(0));
  p.output_channels = static_cast<size_t>(trans_b ? b.dim(0) : b.dim(1));
  if (static_cast<size_t>(a.back()) != p.input_channels)
    unsupported(node, "A {} and B {} do not chain", shape_to_string(a), shape_to_string(b.shape()));
  float alpha = gemm ? node.attr_float("alpha", 1.0f) : 1.0f;
  std::vector<float> bv = b.to_float_vector();
  size_t k = p.input_channels, n = p.output_channels;
  p.weights.resize(k * n);
  for (size_t o = 0; o < n; ++o)
    for (size_t i = 0; i < k; ++i)
      p.weights[o * k + i] = alpha * (trans_b ? bv[o * k + i] : bv[i * n + o]);
  if (gemm && node.input(2) != kNoValue) {
    const Tensor& c = constant_input(graph, node, 2, "C");
    Shape c2(c.rank() < 2 ? 2 - c.rank() : 0, 1);
    c2.insert(c2.end(), c.shape().begin(), c.shape().end());
    // A per-output-channel bias only: a C that varies along M is not a bias.
    if (c2.size() != 2 || c2[0] != 1 || (c2[1] != 1 && c2[1] != static_cast<int64_t>(n)))
      unsupported(node, "C {} is not a bias row", shape_to_string(c.shape()));
    float beta = node.attr_float("beta", 1.0f);
    std::vector<float> cv = c.to_float_vector();
    p.bias.resize(n);
    for (size_t o = 0; o < n; ++o) p.bias[o] = beta * cv[cv.size() == 1 ? 0 : o];
  }
  return p;
}

ClampRange clamp_range(const Graph& graph, const Node& node) {
  require_float32(graph, node);
  ClampRange r;
  if (node.op_type == "Relu") {
    r.min = 0;
    return r;
  }
  if (node.op_type != "Clip") unsupported(node, "not a clamp");
  if (graph.opset < 11) {
    if (node.has_attr("min")) r.min = node.attr_float("min", 0);
    if (node.has_attr("max")) r.max = node.attr_float("max", 0);
  } else {
    if (node.input(1) != kNoValue)
      r.min = static_cast<float>(constant_input(graph, node, 1, "min").get_as_double(0));
    if (node.input(2) != kNoValue)
      r.max = static_cast<float>(constant_input(graph, node, 2, "max").get_as_double(0));
  }
  // ONNX then yields max everywhere; XNNPACK rejects such a range.
  if (!(r.min <= r.max)) unsupported(node, "min {} above max {}", r.min, r.max);
  return r;
}

std::optional<int64_t> softmax_row_length(const Graph& graph, const Node& node) {
  const Shape& x = input_value(graph, node, 0).shape;
  int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) return std::nullopt;
  bool coerce_2d = graph.opset < 13;
  int64_t axis = node.attr_int("axis", coerce_2d ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  int64_t inner = ops::nn::dims_product(x, axis + 1, rank);
  if (coerce_2d) return x[axis] * inner;
  if (inner != 1) return std::nullopt;
  return x[axis];
}

}  // namespace collage::xnnpack
