#include "backends/torch/support.h"

#include <algorithm>
#include <set>

#include "ops/nn_util.h"

namespace collage::torch_backend {
namespace {

using ops::nn::forward_window;
using ops::nn::pool_kernel_shape;
using ops::nn::valid_range;
using ops::nn::Window;

const Shape& shape_of(const Graph& g, ValueId v) {
  return g.value(v).shape;
}

int rank_of(const Graph& g, ValueId v) {
  return static_cast<int>(g.value(v).shape.size());
}

bool all_f32(const Graph& g, const Node& n) {
  for (ValueId v : n.outputs)
    if (v != kNoValue && !is_f32(g, v)) return false;
  return !n.outputs.empty() && n.outputs[0] != kNoValue;
}

Shape spatial(const Shape& s) {
  return Shape(s.begin() + 2, s.end());
}

bool conv_like(const Graph& g, const Node& n) {
  const ValueId x = n.input(0), w = n.input(1), b = n.input(2);
  if (!is_f32(g, x) || !is_const(g, w) || !is_f32(g, w)) return false;
  if (b != kNoValue && (!is_const(g, b) || !is_f32(g, b))) return false;
  const int r = rank_of(g, x);
  return r >= 3 && r <= 5 && rank_of(g, w) == r;
}

bool pool_ok(const Graph& g, const Node& n) {
  if (!is_f32(g, n.input(0)) || !single_output(n)) return false;
  const int r = rank_of(g, n.input(0));
  if (n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool") return r >= 3;
  if (r < 3 || r > 5) return false;
  try {
    pool_lowering(g, n);
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool batch_norm_ok(const Graph& g, const Node& n) {
  if (!is_f32(g, n.input(0)) || rank_of(g, n.input(0)) < 2 || !single_output(n)) return false;
  if (n.attr_int("training_mode", 0) != 0) return false;
  const int64_t c = shape_of(g, n.input(0))[1];
  for (size_t i = 1; i <= 4; ++i)
    if (!is_const(g, n.input(i)) || !is_f32(g, n.input(i)) ||
        g.value(n.input(i)).constant.numel() != c)
      return false;
  return true;
}

bool layer_norm_ok(const Graph& g, const Node& n) {
  if (!is_f32(g, n.input(0)) || !single_output(n) || n.attr_int("stash_type", 1) != 1) return false;
  int64_t count = 1;
  for (int64_t d : layer_norm_shape(g, n)) count *= d;
  for (size_t i = 1; i <= 2; ++i) {
    const ValueId v = n.input(i);
    if (v == kNoValue) {
      if (i == 1) return false;
      continue;
    }
    // ONNX broadcasts Scale/B; ATen wants them with the normalized shape exactly (we
    // reshape), so only tensors with all of its elements are taken.
    if (!is_f32(g, v) || shape_numel(shape_of(g, v)) != count) return false;
  }
  return true;
}

bool matmul_ok(const Graph& g, const Node& n) {
  return is_f32(g, n.input(0)) && is_f32(g, n.input(1)) && rank_of(g, n.input(0)) >= 1 &&
         rank_of(g, n.input(1)) >= 1;
}

bool gemm_ok(const Graph& g, const Node& n) {
  if (!is_f32(g, n.input(0)) || !is_f32(g, n.input(1))) return false;
  if (rank_of(g, n.input(0)) != 2 || rank_of(g, n.input(1)) != 2) return false;
  const ValueId c = n.input(2);
  return c == kNoValue || (is_f32(g, c) && rank_of(g, c) <= 2);
}

bool inputs_f32(const Graph& g, const Node& n, size_t count) {
  for (size_t i = 0; i < std::min(count, n.inputs.size()); ++i)
    if (!is_f32(g, n.inputs[i])) return false;
  return n.input(0) != kNoValue;
}

// Inputs from `first` on must be constants (or omitted): shape-like operands.
bool const_tail(const Graph& g, const Node& n, size_t first) {
  for (size_t i = first; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue && !is_const(g, n.inputs[i])) return false;
  return true;
}

const std::set<std::string> kUnary = {"Relu", "Sigmoid",   "Tanh",        "Exp",      "Log",
                                      "Sqrt", "Neg",       "Abs",         "Erf",      "Reciprocal",
                                      "Elu",  "LeakyRelu", "HardSigmoid", "Identity", "Softplus"};
const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
const std::set<std::string> kReshapes = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};

}  // namespace

bool is_f32(const Graph& graph, ValueId v) {
  return v != kNoValue && graph.value(v).dtype == DType::kFloat32;
}

bool is_const(const Graph& graph, ValueId v) {
  return v != kNoValue && graph.value(v).is_constant();
}

bool single_output(const Node& node) {
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue) return false;
  return !node.outputs.empty() && node.outputs[0] != kNoValue;
}

bool op_level_head(const Graph& g, const Node& n) {
  if (!n.domain.empty() || !all_f32(g, n) || !single_output(n)) return false;
  const std::string& t = n.op_type;
  try {
    if (t == "Conv") return conv_like(g, n) && (conv_lowering(g, n), true);
    if (t == "ConvTranspose") return conv_like(g, n) && (conv_transpose_lowering(g, n), true);
  } catch (const Error&) {
    return false;
  }
  if (t == "MatMul") return matmul_ok(g, n);
  if (t == "Gemm") return gemm_ok(g, n);
  if (t == "MaxPool" || t == "AveragePool" || t == "GlobalAveragePool" || t == "GlobalMaxPool")
    return pool_ok(g, n);
  if (t == "BatchNormalization") return batch_norm_ok(g, n);
  if (t == "LayerNormalization") return layer_norm_ok(g, n);
  return false;
}

const std::vector<std::string>& region_op_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> v = {"Conv",
                                  "ConvTranspose",
                                  "MatMul",
                                  "Gemm",
                                  "MaxPool",
                                  "AveragePool",
                                  "GlobalAveragePool",
                                  "GlobalMaxPool",
                                  "BatchNormalization",
                                  "LayerNormalization",
                                  "Softmax",
                                  "LogSoftmax",
                                  "Clip",
                                  "Transpose",
                                  "Concat",
                                  "ReduceMean"};
    v.insert(v.end(), kUnary.begin(), kUnary.end());
    v.insert(v.end(), kBinary.begin(), kBinary.end());
    v.insert(v.end(), kReshapes.begin(), kReshapes.end());
    return v;
  }();
  return types;
}

bool region_supports(const Graph& g, const Node& n) {
  if (!n.domain.empty() || !all_f32(g, n) || !single_output(n)) return false;
  const std::string& t = n.op_type;
  if (t == "Conv" || t == "ConvTranspose" || t == "MatMul" || t == "Gemm" || t == "MaxPool" ||
      t == "AveragePool" || t == "GlobalAveragePool" || t == "GlobalMaxPool" ||
      t == "BatchNormalization" || t == "LayerNormalization")
    return op_level_head(g, n);
  if (kUnary.count(t)) return inputs_f32(g, n, 1);
  if (kBinary.count(t)) return n.inputs.size() == 2 && inputs_f32(g, n, 2);
  if (t == "Clip") {
    if (!inputs_f32(g, n, 1) || !const_tail(g, n, 1)) return false;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i] != kNoValue && g.value(n.inputs[i]).constant.numel() != 1) return false;
    return true;
  }
  if (t == "Softmax" || t == "LogSoftmax")
    return inputs_f32(g, n, 1) && rank_of(g, n.input(0)) >= 1;
  if (t == "Transpose" || kReshapes.count(t)) return inputs_f32(g, n, 1) && const_tail(g, n, 1);
  if (t == "Concat") return inputs_f32(g, n, n.inputs.size());
  if (t == "ReduceMean")
    return inputs_f32(g, n, 1) && const_tail(g, n, 1) &&
           n.attr_int("noop_with_empty_axes", 0) == 0 && rank_of(g, n.input(0)) >= 1;
  return false;
}

WindowLowering conv_lowering(const Graph& g, const Node& n) {
  const Shape& x = shape_of(g, n.input(0));
  const Shape& w = shape_of(g, n.input(1));
  const Shape kernel = spatial(w);
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel)
    fail(ErrorKind::kUnsupported, "torch: Conv kernel_shape disagrees with the weights");
  const Window win = forward_window(n, spatial(x), kernel, false);
  if (win.out != spatial(shape_of(g, n.outputs[0])))
    fail(ErrorKind::kUnsupported, "torch: Conv output size disagrees with its window");
  WindowLowering l;
  l.kernel = kernel;
  l.stride = win.stride;
  l.dilation = win.dilation;
  const bool symmetric = win.pad_begin == win.pad_end;
  l.padding = symmetric ? win.pad_begin : std::vector<int64_t>(kernel.size(), 0);
  if (!symmetric)
    for (size_t i = kernel.size(); i-- > 0;) {
      l.pre_pad.push_back(win.pad_begin[i]);
      l.pre_pad.push_back(win.pad_end[i]);
    }
  return l;
}

PoolLowering pool_lowering(const Graph& g, const Node& n) {
  const bool avg = n.op_type == "AveragePool";
  const Shape& x = shape_of(g, n.input(0));
  const size_t nd = x.size() - 2;
  const bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  const Window win = forward_window(n, spatial(x), pool_kernel_shape(n, nd), ceil_mode);
  const Shape out = spatial(shape_of(g, n.outputs[0]));
  if (win.out != out) fail(ErrorKind::kUnsupported, "torch: pool output size disagrees");
  for (int64_t o : out)
    if (o <= 0) fail(ErrorKind::kUnsupported, "torch: empty pool output");
  PoolLowering p;
  p.out_spatial = out;
  p.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
  WindowLowering& l = p.window;
  l.kernel = win.kernel;
  l.stride = win.stride;
  l.dilation = win.dilation;
  if (avg &&
      std::any_of(win.dilation.begin(), win.dilation.end(), [](int64_t d) { return d != 1; }))
    fail(ErrorKind::kUnsupported, "torch: ATen's avg_pool has no dilation");
  // Direct: ATen's floor-mode window with one symmetric pad gives the same windows (and,
  // for averages, the same divisor) as ONNX. ATen also caps pads at half the kernel.
  bool direct = win.pad_begin == win.pad_end;
  for (size_t i = 0; i < nd && direct; ++i) {
    const int64_t p0 = win.pad_begin[i];
    direct =
        p0 <= win.kernel[i] / 2 && (win.in[i] + 2 * p0 - win.span(i)) / win.stride[i] + 1 == out[i];
  }
  if (direct) {
    l.padding = win.pad_begin;
    return p;
  }
  // Otherwise pad explicitly so that floor mode yields exactly `out` windows, every one
  // inside the padded input; averages then divide by the full window and are rescaled.
  l.padding.assign(nd, 0);
  std::vector<int64_t> end_pad(nd);
  for (size_t i = 0; i < nd; ++i)
    end_pad[i] = (out[i] - 1) * win.stride[i] + win.span(i) - win.in[i] - win.pad_begin[i];
  for (size_t i = nd; i-- > 0;) {
    l.pre_pad.push_back(win.pad_begin[i]);
    l.pre_pad.push_back(end_pad[i]);
  }
  if (!avg) return p;
  int64_t window = 1;
  for (int64_t k : win.kernel) window *= k;
  int64_t positions = 1;
  for (int64_t o : out) positions *= o;
  p.divisor_scale.resize(positions);
  std::vector<int64_t> idx(nd, 0);
  for (int64_t pos = 0; pos < positions; ++pos) {
    // The reference's divisor: taps inside the input, or inside input + model pads when
    // count_include_pad (taps past the end pad, from ceil_mode, never count).
    int64_t count = 1;
    for (size_t a = 0; a < nd; ++a) {
      const int64_t origin = idx[a] * win.stride[a] - win.pad_begin[a];
      const auto r = p.count_include_pad
                         ? valid_range(origin + win.pad_begin[a], 1,
                                       win.in[a] + win.pad_begin[a] + win.pad_end[a], win.kernel[a])
                         : valid_range(origin, 1, win.in[a], win.kernel[a]);
      count *= r.hi - r.lo;
    }
    p.divisor_scale[pos] =
        count > 0 ? static_cast<float>(window) / static_cast<float>(count) : 0.0f;
    for (size_t a = nd; a-- > 0;) {
      if (++idx[a] < out[a]) break;
      idx[a] = 0;
    }
  }
  return p;
}

TransposedLowering conv_transpose_lowering(const Graph& g, const Node& n) {
  const Shape x = spatial(shape_of(g, n.input(0)));
  const Shape& w = shape_of(g, n.input(1));
  const Shape kernel = spatial(w);
  const Shape out = spatial(shape_of(g, n.outputs[0]));
  const size_t nd = x.size();
  auto ints = [&](const char* key, int64_t def, size_t count) {
    std::vector<int64_t> v = n.attr_ints(key, std::vector<int64_t>(count, def));
    if (v.size() != count)
      fail(ErrorKind::kUnsupported, "torch: ConvTranspose {} has {} values", key, v.size());
    return v;
  };
  TransposedLowering l;
  l.stride = ints("strides", 1, nd);
  l.dilation = ints("dilations", 1, nd);
  l.groups = n.attr_int("group", 1);
  const std::vector<int64_t> out_pad = ints("output_padding", 0, nd);
  const std::vector<int64_t> pads = ints("pads", 0, 2 * nd);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> output_shape = n.attr_ints("output_shape", {});
  if (output_shape.size() == nd + 2)
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  if (w[0] % l.groups != 0) fail(ErrorKind::kUnsupported, "torch: ConvTranspose group");
  std::vector<int64_t> begin(nd), end(nd);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t span = (kernel[i] - 1) * l.dilation[i] + 1;
    const int64_t natural = l.stride[i] * (x[i] - 1) + out_pad[i] + span;
    auto split = [&](int64_t total) {
      const int64_t half = ops::nn::floor_div(total, 2);
      return auto_pad == "SAME_UPPER" ? half : total - half;
    };
    int64_t pl = 0;
    if (output_shape.size() == nd)
      pl = split(natural - output_shape[i]);
    else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      pl = split(natural - x[i] * l.stride[i]);
    else if (auto_pad == "NOTSET")
      pl = pads[i];
    begin[i] = pl;
    end[i] = l.stride[i] * (x[i] - 1) + span - pl - out[i];
  }
  // ATen: out = s(in-1) + span - 2 pad + output_padding, output_padding < max(stride, dilation).
  bool direct = true;
  for (size_t i = 0; i < nd && direct; ++i)
    direct = begin[i] >= 0 && end[i] >= 0 && begin[i] >= end[i] &&
             begin[i] - end[i] < std::max(l.stride[i], l.dilation[i]);
  if (direct) {
    l.padding = begin;
    for (size_t i = 0; i < nd; ++i) l.output_padding.push_back(begin[i] - end[i]);
    return l;
  }
  l.padding.assign(nd, 0);
  l.output_padding.assign(nd, 0);
  for (size_t i = nd; i-- > 0;) {
    l.post_pad.push_back(-begin[i]);
    l.post_pad.push_back(-end[i]);
  }
  return l;
}

std::vector<int64_t> layer_norm_shape(const Graph& g, const Node& n) {
  const Shape& x = shape_of(g, n.input(0));
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()))
    fail(ErrorKind::kUnsupported, "torch: LayerNormalization axis out of range");
  return std::vector<int64_t>(x.begin() + axis, x.end());
}

}  // namespace collage::torch_backend
