#include "backends/xnnpack/subgraph_builder.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "backends/xnnpack/layout.h"
#include "backends/xnnpack/op_params.h"
#include "ops/tensor_util.h"

namespace collage::xnnpack {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool is_nhwc(const Shape& shape) {
  return shape.size() == 4;
}

bool is_const(const Graph& graph, ValueId v) {
  return v != kNoValue && graph.value(v).is_constant();
}

int rank_of(const Graph& graph, ValueId v) {
  return static_cast<int>(graph.value(v).shape.size());
}

bool op_is(const Node& node, std::initializer_list<const char*> types) {
  return std::any_of(types.begin(), types.end(), [&](const char* t) { return node.op_type == t; });
}

bool supports_fully_connected(const Graph& graph, const Node& node) {
  int a_rank = rank_of(graph, node.input(0));
  if (a_rank < 2 || a_rank == 4) return false;  // 4-D values are NHWC inside a region
  if (!is_const(graph, node.input(1)) || rank_of(graph, node.input(1)) != 2) return false;
  if (node.op_type == "MatMul") return true;
  if (node.attr_int("transA", 0) != 0) return false;
  ValueId c = node.input(2);
  if (c == kNoValue) return true;
  if (!is_const(graph, c)) return false;
  const Shape& cs = graph.value(c).shape;
  int64_t n = graph.value(node.outputs[0]).shape.back();
  int64_t rows = cs.size() == 2 ? cs[0] : 1;
  return cs.size() <= 2 && rows == 1 && (cs.empty() || cs.back() == 1 || cs.back() == n);
}

// Softmax reduces over runs of `row` contiguous elements of its input as laid out inside a
// region; nullopt when its reduction is not such a run there.
std::optional<int64_t> softmax_row_in_layout(const Graph& graph, const Node& node) {
  const Shape& x = graph.value(node.input(0)).shape;
  if (x.size() != 4) return softmax_row_length(graph, node);
  int64_t axis = node.attr_int("axis", graph.opset < 13 ? 1 : -1);
  if (axis < 0) axis += 4;
  // NHWC: channels alone are innermost; from axis 0 or 1 on, opset < 13 reduces over a
  // whole image or batch, which NHWC keeps contiguous too (in another order, which a
  // softmax does not care about).
  if (graph.opset >= 13) return axis == 1 ? std::optional<int64_t>(x[1]) : std::nullopt;
  if (axis == 0) return shape_numel(x);
  if (axis == 1) return x[1] * x[2] * x[3];
  return std::nullopt;
}

// Row-major data whose NHWC form inside a region is the same bytes: not 4-D, or 4-D with
// one pixel (a pooled [N, C, 1, 1]).
bool layout_free(const Shape& shape) {
  return shape.size() != 4 || shape[2] * shape[3] == 1;
}

bool is_view_op(const Node& node) {
  return op_is(node, {"Flatten", "Reshape", "Squeeze", "Unsqueeze"});
}

// A constant-mode, non-negative Pad with a constant value: its pads (begin, end) in the
// order the region lays the value out (NHWC for 4-D), and the value.
struct PadAmounts {
  std::vector<size_t> begin, end;
  float value = 0;
};

std::optional<PadAmounts> pad_amounts(const Graph& graph, const Node& node) {
  const ops::PadSpec spec = ops::pad_spec(InferContext(graph, node));
  if (spec.mode != ops::PadMode::kConstant) return std::nullopt;
  PadAmounts p;
  p.value = static_cast<float>(spec.attr_value);
  if (node.input(2) != kNoValue && graph.opset >= 11) {
    if (!is_const(graph, node.input(2)) || graph.value(node.input(2)).constant.numel() != 1)
      return std::nullopt;
    p.value = static_cast<float>(graph.value(node.input(2)).constant.get_as_double(0));
  }
  std::vector<int64_t> order(spec.begin.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  if (order.size() == 4) order = {0, 2, 3, 1};
  for (int64_t k : order) {
    if (spec.begin[k] < 0 || spec.end[k] < 0) return std::nullopt;
    p.begin.push_back(static_cast<size_t>(spec.begin[k]));
    p.end.push_back(static_cast<size_t>(spec.end[k]));
  }
  return p;
}

}  // namespace

bool subgraph_supports(const Graph& graph, const Node& node) {
  if (!node.domain.empty() || node.inputs.empty() || node.outputs.empty()) return false;
  if (node.input(0) == kNoValue) return false;
  // Pad and the views take int64 pads/shapes/axes (constants); their data is float32.
  if (node.op_type == "Pad" || is_view_op(node)) {
    if (graph.value(node.input(0)).dtype != DType::kFloat32 ||
        graph.value(node.outputs[0]).dtype != DType::kFloat32)
      return false;
  } else if (!all_float32(graph, node)) {
    return false;
  }
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue) return false;
  int out_rank = rank_of(graph, node.outputs[0]);
  if (out_rank < 1 || out_rank > XNN_MAX_TENSOR_DIMS) return false;
  try {
    if (node.op_type == "Conv") {
      ValueId w = node.input(1);
      return rank_of(graph, node.input(0)) == 4 && is_const(graph, w) && rank_of(graph, w) == 4 &&
             (node.input(2) == kNoValue || is_const(graph, node.input(2)));
    }
    if (op_is(node, {"MaxPool", "AveragePool"})) {
      pool_window(graph, node);
      return true;
    }
    if (node.op_type == "GlobalAveragePool") return rank_of(graph, node.input(0)) == 4;
    if (op_is(node, {"MatMul", "Gemm"})) return supports_fully_connected(graph, node);
    if (is_clamp_op(node)) {
      clamp_range(graph, node);
      return true;
    }
    if (node.op_type == "Sigmoid") return true;
    // Views whose bytes are the same in the region's layout; shape inputs are constants.
    if (is_view_op(node))
      return (node.input(1) == kNoValue || is_const(graph, node.input(1))) &&
             layout_free(graph.value(node.input(0)).shape) &&
             layout_free(graph.value(node.outputs[0]).shape);
    if (node.op_type == "Pad") return pad_amounts(graph, node).has_value();
    if (node.op_type == "Softmax") {
      std::optional<int64_t> row = softmax_row_in_layout(graph, node);
      return row && *row > 0;
    }
    if (is_binary_op(node)) {
      if (node.inputs.size() != 2) return false;
      for (ValueId v : node.inputs) {
        if (v == kNoValue || rank_of(graph, v) > XNN_MAX_TENSOR_DIMS) return false;
        // 4-D values are NHWC in the region, others are not: an operand of another rank
        // than a 4-D result, or a 4-D one of a result of another rank, would pair its
        // elements with the wrong ones. Only a constant can be laid out to match.
        if (!is_const(graph, v) && (out_rank == 4) != (rank_of(graph, v) == 4)) return false;
      }
      return true;
    }
  } catch (const Error&) {
    return false;
  }
  return false;
}

namespace {

class SubgraphBuilder {
 public:
  explicit SubgraphBuilder(const Graph& region) : g_(region) {}

  BuiltSubgraph build() {
    uint32_t num_external = static_cast<uint32_t>(g_.inputs.size() + g_.outputs.size());
    xnn_subgraph_t subgraph = nullptr;
    check_status(xnn_create_subgraph(num_external, 0, &subgraph), "create subgraph");
    out_.subgraph.reset(subgraph);
    for (ValueId v : g_.inputs) {
      if (g_.value(v).dtype != DType::kFloat32) unsupported_value(v, "is not float32");
      out_.inputs.push_back(define_external(v, static_cast<uint32_t>(out_.inputs.size()),
                                            XNN_VALUE_FLAG_EXTERNAL_INPUT));
    }
    output_slot_.assign(g_.outputs.size(), {});
    for (const Node& node : g_.nodes()) {
      if (!subgraph_supports(g_, node))
        fail(ErrorKind::kUnsupported, "xnnpack-graph: node '{}' ({}) can't join a region",
             node.name, node.op_type);
      for (ValueId v : node.outputs)
        if (v != kNoValue) define_output(v);
      define_node(node);
    }
    for (ValueId v : g_.outputs)
      if (!ids_.count(v) || g_.value(v).producer < 0)
        fail(ErrorKind::kUnsupported, "xnnpack-graph: output '{}' is not computed in the region",
             g_.value(v).name);
    out_.outputs = std::move(output_slot_);
    return std::move(out_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void unsupported_value(ValueId v, fmt::format_string<Args...> format,
                                      Args&&... args) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("xnnpack-graph: value '{}' {}", g_.value(v).name,
                            fmt::format(format, std::forward<Args>(args)...)));
  }

  static std::vector<size_t> dims_in_layout(const Shape& shape) {
    Shape s = is_nhwc(shape) ? nhwc_shape(shape) : shape;
    return {s.begin(), s.end()};
  }

  uint32_t define_tensor(const std::vector<size_t>& dims, const void* data, uint32_t external_id,
                         uint32_t flags) {
    uint32_t id = XNN_INVALID_VALUE_ID;
    check_status(xnn_define_tensor_value(out_.subgraph.get(), xnn_datatype_fp32, dims.size(),
                                         dims.data(), data, external_id, flags, &id),
                 "define tensor");
    return id;
  }

  ExternalTensor define_external(ValueId v, uint32_t external_id, uint32_t flags) {
    const Shape& shape = g_.value(v).shape;
    ExternalTensor t{define_tensor(dims_in_layout(shape), nullptr, external_id, flags),
                     is_nhwc(shape), shape};
    ids_[v] = t.id;
    return t;
  }

  void define_output(ValueId v) {
    auto it = std::find(g_.outputs.begin(), g_.outputs.end(), v);
    if (it == g_.outputs.end()) {
      ids_[v] = define_tensor(dims_in_layout(g_.value(v).shape), nullptr, XNN_INVALID_VALUE_ID, 0);
      return;
    }
    uint32_t external_id = static_cast<uint32_t>(g_.inputs.size() + (it - g_.outputs.begin()));
    output_slot_[it - g_.outputs.begin()] =
        define_external(v, external_id, XNN_VALUE_FLAG_EXTERNAL_OUTPUT);
  }

  uint32_t static_tensor(std::vector<size_t> dims, std::vector<float> data) {
    out_.static_data.push_back(std::move(data));
    return define_tensor(dims, out_.static_data.back().data(), XNN_INVALID_VALUE_ID, 0);
  }

  // The id of operand `v` of a node whose result has rank `out_rank`. A constant feeding a
  // 4-D result is reordered to NHWC (lower ranks first padded to 4-D, as broadcasting does).
  uint32_t operand(ValueId v, size_t out_rank) {
    if (!g_.value(v).is_constant()) {
      auto it = ids_.find(v);
      if (it == ids_.end()) unsupported_value(v, "is used before it is defined");
      return it->second;
    }
    bool nhwc = out_rank == 4;
    auto key = std::make_pair(v, nhwc);
    auto it = constant_ids_.find(key);
    if (it != constant_ids_.end()) return it->second;
    const Tensor& t = g_.value(v).constant;
    if (t.dtype() != DType::kFloat32) unsupported_value(v, "is not float32");
    Shape shape = t.shape();
    if (nhwc && shape.size() < 4) shape.insert(shape.begin(), 4 - shape.size(), 1);
    if (shape.empty()) shape = {1};  // a scalar, as a one-element tensor
    std::vector<float> data = t.to_float_vector();
    // NHWC only where the result is 4-D (its data are NHWC in the region). A 4-D constant
    // broadcast into a 5-D result keeps its order: Swin-T's attention mask [1,2,49,49] added to
    // [1,64,2,49,49] was reordered, and XNNPACK refused the shapes when the runtime was set up.
    if (nhwc && is_nhwc(shape)) {
      std::vector<float> reordered(data.size());
      nchw_to_nhwc(data.data(), reordered.data(), shape, nullptr);
      data = std::move(reordered);
    }
    uint32_t id = static_tensor(
        nhwc ? dims_in_layout(shape) : std::vector<size_t>(shape.begin(), shape.end()),
        std::move(data));
    constant_ids_[key] = id;
    return id;
  }

  uint32_t output_id(const Node& node) { return ids_.at(node.outputs[0]); }

  void define_node(const Node& node) {
    xnn_subgraph_t sg = out_.subgraph.get();
    size_t out_rank = g_.value(node.outputs[0]).shape.size();
    uint32_t out = output_id(node);
    const std::string& t = node.op_type;
    if (t == "Conv") {
      ConvParams p = conv_params(g_, node);
      size_t out_channels = p.groups * p.group_output_channels;
      const Window2d& w = p.window;
      uint32_t filter =
          static_tensor({out_channels, w.kernel_h, w.kernel_w, p.group_input_channels},
                        std::move(p.weights_ohwi));
      uint32_t bias =
          p.bias.empty() ? XNN_INVALID_VALUE_ID : static_tensor({out_channels}, std::move(p.bias));
      check_status(xnn_define_convolution_2d(
                       sg, w.pad_top, w.pad_right, w.pad_bottom, w.pad_left, w.kernel_h, w.kernel_w,
                       w.stride_h, w.stride_w, w.dilation_h, w.dilation_w, p.groups,
                       p.group_input_channels, p.group_output_channels, -kInf, kInf,
                       operand(node.inputs[0], 4), filter, bias, out, 0),
                   "define convolution");
    } else if (t == "MatMul" || t == "Gemm") {
      FullyConnectedParams p = fully_connected_params(g_, node);
      uint32_t filter = static_tensor({p.output_channels, p.input_channels}, std::move(p.weights));
      uint32_t bias = p.bias.empty() ? XNN_INVALID_VALUE_ID
                                     : static_tensor({p.output_channels}, std::move(p.bias));
      check_status(xnn_define_fully_connected(sg, -kInf, kInf, operand(node.inputs[0], out_rank),
                                              filter, bias, out, 0),
                   "define fully connected");
    } else if (t == "MaxPool") {
      Window2d w = pool_window(g_, node);
      check_status(
          xnn_define_max_pooling_2d(sg, w.pad_top, w.pad_right, w.pad_bottom, w.pad_left,
                                    w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.dilation_h,
                                    w.dilation_w, -kInf, kInf, operand(node.inputs[0], 4), out, 0),
          "define max pooling");
    } else if (t == "AveragePool") {
      Window2d w = pool_window(g_, node);
      check_status(xnn_define_average_pooling_2d(
                       sg, w.pad_top, w.pad_right, w.pad_bottom, w.pad_left, w.kernel_h, w.kernel_w,
                       w.stride_h, w.stride_w, -kInf, kInf, operand(node.inputs[0], 4), out, 0),
                   "define average pooling");
    } else if (t == "GlobalAveragePool") {
      check_status(
          xnn_define_global_average_pooling_2d(sg, -kInf, kInf, operand(node.inputs[0], 4), out, 0),
          "define global average pooling");
    } else if (is_clamp_op(node)) {
      ClampRange r = clamp_range(g_, node);
      check_status(xnn_define_clamp(sg, r.min, r.max, operand(node.inputs[0], out_rank), out, 0),
                   "define clamp");
    } else if (t == "Sigmoid") {
      check_status(xnn_define_sigmoid(sg, operand(node.inputs[0], out_rank), out, 0),
                   "define sigmoid");
    } else if (t == "Softmax") {
      define_softmax(node, out);
    } else if (is_view_op(node)) {
      std::vector<size_t> dims = dims_in_layout(g_.value(node.outputs[0]).shape);
      check_status(xnn_define_static_reshape(sg, dims.size(), dims.data(),
                                             operand(node.inputs[0], out_rank), out, 0),
                   "define reshape");
    } else if (t == "Pad") {
      PadAmounts p = pad_amounts(g_, node).value();
      check_status(xnn_define_static_constant_pad(sg, p.begin.data(), p.end.data(), p.value,
                                                  operand(node.inputs[0], out_rank), out, 0),
                   "define constant pad");
    } else if (is_binary_op(node)) {
      uint32_t a = operand(node.inputs[0], out_rank), b = operand(node.inputs[1], out_rank);
      xnn_status status;
      if (t == "Add")
        status = xnn_define_add2(sg, -kInf, kInf, a, b, out, 0);
      else if (t == "Mul")
        status = xnn_define_multiply2(sg, -kInf, kInf, a, b, out, 0);
      else if (t == "Sub")
        status = xnn_define_subtract(sg, -kInf, kInf, a, b, out, 0);
      else
        status = xnn_define_divide(sg, -kInf, kInf, a, b, out, 0);
      check_status(status, "define binary op");
    } else {
      fail(ErrorKind::kUnsupported, "xnnpack-graph: no translation for {}", t);
    }
  }

  // XNNPACK's softmax reduces over the innermost dimension: rows that span several
  // dimensions go through a [rows, row] view.
  void define_softmax(const Node& node, uint32_t out) {
    xnn_subgraph_t sg = out_.subgraph.get();
    const Shape& x = g_.value(node.inputs[0]).shape;
    uint32_t in = operand(node.inputs[0], x.size());
    std::vector<size_t> dims = dims_in_layout(x);
    size_t row = static_cast<size_t>(softmax_row_in_layout(g_, node).value());
    if (row == dims.back()) {
      check_status(xnn_define_softmax(sg, in, out, 0), "define softmax");
      return;
    }
    std::vector<size_t> rows = {static_cast<size_t>(shape_numel(x)) / row, row};
    uint32_t flat_in = define_tensor(rows, nullptr, XNN_INVALID_VALUE_ID, 0);
    uint32_t flat_out = define_tensor(rows, nullptr, XNN_INVALID_VALUE_ID, 0);
    check_status(xnn_define_static_reshape(sg, rows.size(), rows.data(), in, flat_in, 0),
                 "define reshape");
    check_status(xnn_define_softmax(sg, flat_in, flat_out, 0), "define softmax");
    check_status(xnn_define_static_reshape(sg, dims.size(), dims.data(), flat_out, out, 0),
                 "define reshape");
  }

  const Graph& g_;
  BuiltSubgraph out_;
  std::map<ValueId, uint32_t> ids_;
  std::map<std::pair<ValueId, bool>, uint32_t> constant_ids_;
  std::vector<ExternalTensor> output_slot_;
};

}  // namespace

BuiltSubgraph build_subgraph(const Graph& region) {
  return SubgraphBuilder(region).build();
}

}  // namespace collage::xnnpack
