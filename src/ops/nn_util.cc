#include "ops/nn_util.h"

#include <algorithm>

namespace collage::ops::nn {

bool is_float_type(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64;
}

DType require_float_input(const InferContext& ctx, size_t i, int like) {
  DType t = ctx.input_dtype(i);
  if (!is_float_type(t))
    node_fail(ctx.node(), ErrorKind::kUnsupported,
              "input {} has element type {}; only float32 and float64 are supported", i,
              dtype_name(t));
  if (like >= 0 && t != ctx.input_dtype(like))
    node_fail(ctx.node(), ErrorKind::kUnsupported,
              "input {} has element type {} but input {} has {}; mixed types are not supported", i,
              dtype_name(t), like, dtype_name(ctx.input_dtype(like)));
  return t;
}

bool output_used(const Node& node, size_t i) {
  return i < node.outputs.size() && node.outputs[i] != kNoValue;
}

AutoPad parse_auto_pad(const Node& node) {
  std::string s = node.attr_string("auto_pad", "NOTSET");
  if (s == "NOTSET" || s.empty()) return AutoPad::kNotSet;
  if (s == "SAME_UPPER") return AutoPad::kSameUpper;
  if (s == "SAME_LOWER") return AutoPad::kSameLower;
  if (s == "VALID") return AutoPad::kValid;
  node_fail(node, ErrorKind::kInvalidModel, "unknown auto_pad '{}'", s);
}

Window Window::as_3d() const {
  Window w;
  size_t extra = 3 - rank();
  auto widen = [extra](const std::vector<int64_t>& v, int64_t fill) {
    std::vector<int64_t> r(extra, fill);
    r.insert(r.end(), v.begin(), v.end());
    return r;
  };
  w.in = widen(in, 1);
  w.out = widen(out, 1);
  w.kernel = widen(kernel, 1);
  w.stride = widen(stride, 1);
  w.dilation = widen(dilation, 1);
  w.pad_begin = widen(pad_begin, 0);
  w.pad_end = widen(pad_end, 0);
  return w;
}

namespace {

// A per-axis attribute such as strides: `def` when absent, else exactly `n` values > 0.
std::vector<int64_t> positive_ints(const Node& node, const char* key, size_t n) {
  if (!node.has_attr(key)) return std::vector<int64_t>(n, 1);
  std::vector<int64_t> v = node.attr_ints(key);
  if (v.size() != n)
    node_fail(node, ErrorKind::kInvalidModel, "{} has {} values for {} spatial axes", key, v.size(),
              n);
  for (int64_t x : v)
    if (x <= 0) node_fail(node, ErrorKind::kInvalidModel, "{} must be positive", key);
  return v;
}

}  // namespace

Window forward_window(const Node& node, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                      bool ceil_mode) {
  size_t n = in_spatial.size();
  Window w;
  w.in = in_spatial;
  w.kernel = kernel;
  w.stride = positive_ints(node, "strides", n);
  w.dilation = positive_ints(node, "dilations", n);
  w.pad_begin.assign(n, 0);
  w.pad_end.assign(n, 0);
  w.out.assign(n, 0);
  for (int64_t k : kernel)
    if (k <= 0) node_fail(node, ErrorKind::kInvalidModel, "kernel sizes must be positive");
  AutoPad auto_pad = parse_auto_pad(node);
  if (auto_pad == AutoPad::kNotSet && node.has_attr("pads")) {
    std::vector<int64_t> pads = node.attr_ints("pads");
    if (pads.size() != 2 * n)
      node_fail(node, ErrorKind::kInvalidModel, "pads has {} values for {} spatial axes",
                pads.size(), n);
    for (size_t i = 0; i < n; ++i) {
      w.pad_begin[i] = pads[i];
      w.pad_end[i] = pads[i + n];
      if (pads[i] < 0 || pads[i + n] < 0)
        node_fail(node, ErrorKind::kInvalidModel, "pads must not be negative");
    }
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t span = w.span(i), s = w.stride[i];
    switch (auto_pad) {
      case AutoPad::kNotSet: {
        int64_t room = w.in[i] + w.pad_begin[i] + w.pad_end[i] - span;
        if (room < 0) break;  // reported below as an empty output
        w.out[i] = (ceil_mode ? ceil_div(room, s) : room / s) + 1;
        // A window may not start in the end padding (ONNX and PyTorch drop it).
        if (ceil_mode && (w.out[i] - 1) * s >= w.in[i] + w.pad_begin[i]) --w.out[i];
        break;
      }
      case AutoPad::kValid:
        w.out[i] = w.in[i] >= span ? (w.in[i] - span) / s + 1 : 0;
        break;
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        w.out[i] = ceil_div(w.in[i], s);
        int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * s + span - w.in[i]);
        int64_t small = total / 2;
        w.pad_begin[i] = auto_pad == AutoPad::kSameUpper ? small : total - small;
        w.pad_end[i] = total - w.pad_begin[i];
        break;
      }
    }
    if (w.out[i] <= 0)
      node_fail(node, ErrorKind::kShape,
                "window of extent {} does not fit axis {} of size {} (pads {}+{})", span, i,
                w.in[i], w.pad_begin[i], w.pad_end[i]);
  }
  return w;
}

std::vector<int64_t> pool_kernel_shape(const Node& node, size_t spatial_rank) {
  if (!node.has_attr("kernel_shape"))
    node_fail(node, ErrorKind::kInvalidModel, "kernel_shape is required");
  std::vector<int64_t> k = node.attr_ints("kernel_shape");
  if (k.size() != spatial_rank)
    node_fail(node, ErrorKind::kShape,
              "kernel_shape has {} values but the input has {} spatial axes", k.size(),
              spatial_rank);
  return k;
}

int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

}  // namespace collage::ops::nn
