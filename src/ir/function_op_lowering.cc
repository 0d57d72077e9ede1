// Ops that ONNX defines as compositions of simpler ops, lowered on import to those ops where
// no fast backend has the op itself: the reference kernel ran each one, and cut every
// graph-level region around it (a conv, a Selu and the next conv ran as three onednn-graph
// kernels; F.normalize's ReduceL2 split its own Div from the conv before it). The simpler
// ops are what oneDNN's eltwise, binary and reduction primitives run, inside regions too:
//   - Selu(x) = gamma * Elu(x, alpha); Celu(x) = alpha * Elu(x / alpha, 1) (ONNX's function
//     body for Celu);
//   - Sum and Mean of n inputs: a chain of Adds (Mean: divided by n), Max and Min of three
//     or more: a chain of binary Max/Min (binary Max/Min are the fast backends' already); one
//     input: an Identity;
//   - ReduceL1 = ReduceSum(Abs(x)), ReduceSumSquare = ReduceSum(x * x), ReduceL2 =
//     Sqrt(ReduceSumSquare), ReduceLogSum = Log(ReduceSum(x)), as ONNX's opset-18 function
//     bodies (oneDNN 2.6's Lp-norm reductions have only a reference kernel; its sum is jit).
//   - LpPool = (k * AveragePool(|x|^p, count_include_pad))^(1/p) for a window of k taps (the
//     padding's taps are zeros in both), GlobalLpPool = (ReduceSum(|x|^p) over the spatial
//     axes)^(1/p); |x|^p is Abs for p = 1 and x * x for p = 2, the root Sqrt for p = 2.
//     Neither op is ONNX's function, but the reference's pooling loop was the only kernel for
//     them, and pooling, reductions and eltwise ops are oneDNN's jit primitives.
//   - ThresholdedRelu(x) = Where(x > alpha, x, 0), Shrink(x) = Where(x < -lambd, x + bias,
//     Where(x > lambd, x - bias, 0)) (ONNX's function bodies): comparisons under a Where,
//     which onednn-graph regions take as one step (masked_select.h) and halide fuses.
//   - ReduceLogSumExp = m + Log(ReduceSum(Exp(x - m))) with m = ReduceMax(x) kept over the
//     axes: the reference kernel's shift, so nothing overflows; where m is not finite (an
//     axis of -inf, or holding +inf or NaN) the result is m, as the reference returns it (a
//     Where of IsInf / IsNaN of m).
//   - Gelu (opset 20) in the node order exporters wrote before it (x / sqrt(2) -> Erf -> + 1
//     -> * x -> * 0.5, or the tanh form), which the backends' GELU patterns fuse; Mish
//     (opset 18) = x * Tanh(Softplus(x)).
//   - GroupNormalization (opset 18) as PyTorch exports GroupNorm at opsets 9-17: Reshape to
//     [N, groups, -1], InstanceNormalization, Reshape back, and from opset 21 (scale and bias
//     per channel) a Mul and an Add; the onednn backends run that as one step.
// The reductions' axes are an attribute to opset 17 and an input from 18; both are read.
// Only float32 values: the fast backends' type.
#include <cmath>

#include "ir/model_passes.h"
#include "ops/nn_util.h"

namespace collage {
namespace {

bool f32(const Graph& graph, ValueId v) {
  return v != kNoValue && graph.value(v).dtype == DType::kFloat32 && graph.value(v).shape_known;
}

// Selu and Celu as Elu with a scale (and Celu's input scale).
bool lower_scaled_elu(Graph& graph, const Node& node) {
  const ValueId x = node.input(0), y = node.outputs[0];
  int count = 0;
  if (node.op_type == "Selu") {
    const float alpha = node.attr_float("alpha", 1.67326319217681884765625f);
    const float gamma = node.attr_float("gamma", 1.05070102214813232421875f);
    const NodeId elu = append_lowered_node(graph, node.name, count, "Elu", {x},
                                           {{"alpha", Attribute::from_float(alpha)}});
    append_lowered_node(graph, node.name, count, "Mul",
                        {graph.node(elu).outputs[0],
                         append_float_constant(graph, node.name, count, "gamma", gamma)},
                        {}, y);
    return true;
  }
  const float alpha = node.attr_float("alpha", 1.0f);
  if (alpha == 0) return false;  // the reference kernel reports it
  const ValueId a = append_float_constant(graph, node.name, count, "alpha", alpha);
  const NodeId scaled = append_lowered_node(graph, node.name, count, "Div", {x, a}, {});
  const NodeId elu =
      append_lowered_node(graph, node.name, count, "Elu", {graph.node(scaled).outputs[0]},
                          {{"alpha", Attribute::from_float(1.0f)}});
  append_lowered_node(graph, node.name, count, "Mul", {graph.node(elu).outputs[0], a}, {}, y);
  return true;
}

// Sum, Mean, Max and Min of any number of inputs as a left-to-right chain of binary ops, the
// order the reference kernel accumulates in.
bool lower_variadic(Graph& graph, const Node& node) {
  const std::string& t = node.op_type;
  const size_t n = node.inputs.size();
  if (n == 0 || ((t == "Max" || t == "Min") && n == 2)) return false;
  const std::string binary = t == "Sum" || t == "Mean" ? "Add" : t;
  const ValueId y = node.outputs[0];
  int count = 0;
  if (n == 1) {
    append_lowered_node(graph, node.name, count, "Identity", {node.inputs[0]}, {}, y);
    return true;
  }
  ValueId acc = node.inputs[0];
  for (size_t i = 1; i < n; ++i) {
    const bool last = i + 1 == n && t != "Mean";
    acc = graph
              .node(append_lowered_node(graph, node.name, count, binary, {acc, node.inputs[i]}, {},
                                        last ? y : kNoValue))
              .outputs[0];
  }
  if (t == "Mean")
    append_lowered_node(
        graph, node.name, count, "Div",
        {acc, append_float_constant(graph, node.name, count, "count", static_cast<float>(n))}, {},
        y);
  return true;
}

// ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum around a ReduceSum with the node's
// axes, keepdims and noop_with_empty_axes. Their axes are an attribute before opset 18 and an
// input from it; ReduceSum's an input from opset 13 on.
bool lower_reduction(Graph& graph, const Node& node) {
  const std::string& t = node.op_type;
  const ValueId x = node.input(0), y = node.outputs[0];
  std::map<std::string, Attribute> attrs;
  if (node.has_attr("keepdims")) attrs["keepdims"] = node.attrs.at("keepdims");
  if (node.has_attr("noop_with_empty_axes"))
    attrs["noop_with_empty_axes"] = node.attrs.at("noop_with_empty_axes");
  int count = 0;
  std::vector<ValueId> sum_inputs;
  if (t == "ReduceL1") {
    sum_inputs.push_back(
        graph.node(append_lowered_node(graph, node.name, count, "Abs", {x}, {})).outputs[0]);
  } else if (t == "ReduceL2" || t == "ReduceSumSquare") {
    sum_inputs.push_back(
        graph.node(append_lowered_node(graph, node.name, count, "Mul", {x, x}, {})).outputs[0]);
  } else {
    sum_inputs.push_back(x);  // ReduceLogSum
  }
  if (node.input(1) != kNoValue) {
    sum_inputs.push_back(node.input(1));
  } else if (node.has_attr("axes")) {
    if (graph.opset >= 13)
      sum_inputs.push_back(
          append_int64_constant(graph, node.name, count, "axes", node.attr_ints("axes")));
    else
      attrs["axes"] = node.attrs.at("axes");
  }
  const bool last = t == "ReduceL1" || t == "ReduceSumSquare";
  const ValueId sum = graph
                          .node(append_lowered_node(graph, node.name, count, "ReduceSum",
                                                    sum_inputs, attrs, last ? y : kNoValue))
                          .outputs[0];
  if (!last)
    append_lowered_node(graph, node.name, count, t == "ReduceL2" ? "Sqrt" : "Log", {sum}, {}, y);
  return true;
}

// LpPool and GlobalLpPool of an integral order p as their sum of |x|^p (LpPool's as k times
// the average over the k-tap window, padding counted) and its p-th root. Opsets 7-17 only
// (the caller): LpPool's ceil_mode and dilations, from opset 18 on, would need more (a
// ceil_mode window's taps past the padding are not zeros an average counts).
bool lower_lp_pool(Graph& graph, const Node& node) {
  const int64_t p = node.attr_int("p", 2);
  if (p < 1 || p > 64) return false;  // the reference kernel reports it
  const bool global = node.op_type == "GlobalLpPool";
  const ValueId x = node.input(0), y = node.outputs[0];
  const size_t rank = graph.value(x).shape.size();
  if (rank < 3) return false;  // the reference kernel reports it
  int count = 0;
  auto out = [&](NodeId id) { return graph.node(id).outputs[0]; };
  ValueId powered;
  if (p == 1) {
    powered = out(append_lowered_node(graph, node.name, count, "Abs", {x}, {}));
  } else if (p == 2) {
    powered = out(append_lowered_node(graph, node.name, count, "Mul", {x, x}, {}));
  } else {
    const ValueId a = out(append_lowered_node(graph, node.name, count, "Abs", {x}, {}));
    powered = out(append_lowered_node(
        graph, node.name, count, "Pow",
        {a, append_float_constant(graph, node.name, count, "p", static_cast<float>(p))}, {}));
  }
  ValueId sum;
  if (global) {
    std::vector<int64_t> axes;
    for (size_t d = 2; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    std::vector<ValueId> inputs = {powered};
    std::map<std::string, Attribute> attrs = {{"keepdims", Attribute::from_int(1)}};
    if (graph.opset >= 13)
      inputs.push_back(append_int64_constant(graph, node.name, count, "axes", axes));
    else
      attrs["axes"] = Attribute::from_ints(axes);
    sum = out(append_lowered_node(graph, node.name, count, "ReduceSum", inputs, attrs,
                                  p == 1 ? y : kNoValue));
  } else {
    std::map<std::string, Attribute> attrs = {{"count_include_pad", Attribute::from_int(1)}};
    for (const char* key : {"kernel_shape", "strides", "pads", "auto_pad"})
      if (node.has_attr(key)) attrs[key] = node.attrs.at(key);
    const std::vector<int64_t> kernel = node.attr_ints("kernel_shape");
    if (kernel.empty()) return false;  // the reference kernel reports it
    float taps = 1;
    for (int64_t k : kernel) taps *= static_cast<float>(k);
    const ValueId average =
        out(append_lowered_node(graph, node.name, count, "AveragePool", {powered}, attrs));
    sum = out(
        append_lowered_node(graph, node.name, count, "Mul",
                            {average, append_float_constant(graph, node.name, count, "taps", taps)},
                            {}, p == 1 ? y : kNoValue));
  }
  if (p == 2) {
    append_lowered_node(graph, node.name, count, "Sqrt", {sum}, {}, y);
  } else if (p > 2) {
    append_lowered_node(
        graph, node.name, count, "Pow",
        {sum, append_float_constant(graph, node.name, count, "root", 1.0f / static_cast<float>(p))},
        {}, y);
  }
  return true;
}

// ReduceLogSumExp shifted by the maximum (the header says how).
bool lower_log_sum_exp(Graph& graph, const Node& node) {
  const ValueId x = node.input(0), y = node.outputs[0];
  const Shape out_shape = graph.value(y).shape;  // a copy: appending moves the values
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  int count = 0;
  auto out = [&](NodeId n) { return graph.node(n).outputs[0]; };
  auto add = [&](const char* op, std::vector<ValueId> in,
                 std::map<std::string, Attribute> attrs = {}, ValueId to = kNoValue) {
    return out(
        append_lowered_node(graph, node.name, count, op, std::move(in), std::move(attrs), to));
  };
  // Both reductions keep the axes; ReduceMax takes them as an attribute (to opset 17) or an
  // input (from 18, as the node itself does), ReduceSum as an input from opset 13.
  std::map<std::string, Attribute> max_attrs = {{"keepdims", Attribute::from_int(1)}};
  if (node.has_attr("noop_with_empty_axes"))
    max_attrs["noop_with_empty_axes"] = node.attrs.at("noop_with_empty_axes");
  std::map<std::string, Attribute> sum_attrs = max_attrs;
  std::vector<ValueId> sum_inputs, max_inputs = {x};
  if (node.input(1) != kNoValue) {
    sum_inputs.push_back(node.input(1));
    max_inputs.push_back(node.input(1));
  } else if (node.has_attr("axes")) {
    max_attrs["axes"] = node.attrs.at("axes");
    if (graph.opset >= 13)
      sum_inputs.push_back(
          append_int64_constant(graph, node.name, count, "axes", node.attr_ints("axes")));
    else
      sum_attrs["axes"] = node.attrs.at("axes");
  }
  const ValueId m = add("ReduceMax", max_inputs, max_attrs);
  const ValueId e = add("Exp", {add("Sub", {x, m})});
  sum_inputs.insert(sum_inputs.begin(), e);
  const ValueId shifted = add("Add", {add("Log", {add("ReduceSum", sum_inputs, sum_attrs)}), m});
  const ValueId bad = add("Or", {add("IsInf", {m}), add("IsNaN", {m})});
  if (keepdims) {
    add("Where", {bad, m, shifted}, {}, y);
    return true;
  }
  const ValueId kept = add("Where", {bad, m, shifted});
  std::vector<int64_t> dims(out_shape.begin(), out_shape.end());
  add("Reshape", {kept, append_int64_constant(graph, node.name, count, "shape", dims)}, {}, y);
  return true;
}

// ThresholdedRelu and Shrink as Wheres of comparisons.
bool lower_threshold(Graph& graph, const Node& node) {
  const ValueId x = node.input(0), y = node.outputs[0];
  int count = 0;
  auto constant = [&](const char* what, float v) {
    return append_float_constant(graph, node.name, count, what, v);
  };
  auto out = [&](NodeId n) { return graph.node(n).outputs[0]; };
  if (node.op_type == "ThresholdedRelu") {
    const NodeId above =
        append_lowered_node(graph, node.name, count, "Greater",
                            {x, constant("alpha", node.attr_float("alpha", 1.0f))}, {});
    append_lowered_node(graph, node.name, count, "Where", {out(above), x, constant("zero", 0.0f)},
                        {}, y);
    return true;
  }
  const float bias = node.attr_float("bias", 0.0f), lambd = node.attr_float("lambd", 0.5f);
  const NodeId above =
      append_lowered_node(graph, node.name, count, "Greater", {x, constant("lambd", lambd)}, {});
  const NodeId minus =
      append_lowered_node(graph, node.name, count, "Sub", {x, constant("bias", bias)}, {});
  const NodeId upper = append_lowered_node(graph, node.name, count, "Where",
                                           {out(above), out(minus), constant("zero", 0.0f)}, {});
  const NodeId below = append_lowered_node(graph, node.name, count, "Less",
                                           {x, constant("minus_lambd", -lambd)}, {});
  const NodeId plus =
      append_lowered_node(graph, node.name, count, "Add", {x, constant("bias", bias)}, {});
  append_lowered_node(graph, node.name, count, "Where", {out(below), out(plus), out(upper)}, {}, y);
  return true;
}

// Gelu (opset 20) as its function body, in the node order exporters wrote before it existed,
// which the backends' GELU patterns take whole (onednn's epilogue.cc: gelu_around_erf,
// match_gelu_tanh): approximate "none" x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5; "tanh"
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
bool lower_gelu(Graph& graph, const Node& node) {
  const ValueId x = node.input(0), y = node.outputs[0];
  const std::string approximate = node.attr_string("approximate", "none");
  int count = 0;
  auto out = [&](NodeId n) { return graph.node(n).outputs[0]; };
  auto add = [&](const char* op, std::vector<ValueId> in, ValueId to = kNoValue) {
    return out(append_lowered_node(graph, node.name, count, op, std::move(in), {}, to));
  };
  auto constant = [&](const char* what, double v) {
    return append_float_constant(graph, node.name, count, what, static_cast<float>(v));
  };
  if (approximate == "none") {
    const ValueId erf = add("Erf", {add("Div", {x, constant("sqrt2", M_SQRT2)})});
    add("Mul", {add("Mul", {x, add("Add", {erf, constant("one", 1.0)})}), constant("half", 0.5)},
        y);
    return true;
  }
  if (approximate != "tanh") return false;  // the reference op refuses it with a message
  const ValueId half = add("Mul", {x, constant("half", 0.5)});
  const ValueId cube = add("Pow", {x, constant("three", 3.0)});
  const ValueId sum = add("Add", {x, add("Mul", {cube, constant("c", 0.044715)})});
  const ValueId t =
      add("Tanh", {add("Mul", {sum, constant("sqrt_2_over_pi", std::sqrt(2 / M_PI))})});
  add("Mul", {half, add("Add", {t, constant("one", 1.0)})}, y);
  return true;
}

// Mish (opset 18) as its function body: x * tanh(softplus(x)).
bool lower_mish(Graph& graph, const Node& node) {
  int count = 0;
  const NodeId softplus =
      append_lowered_node(graph, node.name, count, "Softplus", {node.input(0)}, {});
  const NodeId tanh =
      append_lowered_node(graph, node.name, count, "Tanh", {graph.node(softplus).outputs[0]}, {});
  append_lowered_node(graph, node.name, count, "Mul", {node.input(0), graph.node(tanh).outputs[0]},
                      {}, node.outputs[0]);
  return true;
}

// GroupNormalization (opset 18) as PyTorch exported GroupNorm before it: Reshape [N, G, -1],
// InstanceNormalization, Reshape back; to opset 20 the scale and bias per group are the
// InstanceNormalization's own, from 21 (per channel) a Mul and an Add by them as [C, 1, ...]
// after it. The form the onednn backends run as one step (backends/onednn/group_norm.h).
bool lower_group_norm(Graph& graph, const Node& node) {
  const Shape xs = graph.value(node.input(0)).shape;
  const int64_t groups = node.attr_int("num_groups", 0);
  if (xs.size() < 2 || groups <= 0 || xs[1] % groups != 0 || !f32(graph, node.input(1)) ||
      !f32(graph, node.input(2)))
    return false;  // the reference op reports it
  int count = 0;
  auto out = [&](NodeId n) { return graph.node(n).outputs[0]; };
  auto reshape = [&](ValueId v, const std::vector<int64_t>& shape, ValueId to = kNoValue) {
    return out(append_lowered_node(
        graph, node.name, count, "Reshape",
        {v, append_int64_constant(graph, node.name, count, "shape", shape)}, {}, to));
  };
  const bool per_channel = ops::nn::group_norm_params_per_channel(graph.opset);
  ValueId scale = node.input(1), bias = node.input(2);
  if (per_channel) {
    scale = graph.add_constant(fmt::format("{}/ones_{}", node.name, count++),
                               Tensor::from_vector<float>({groups}, std::vector<float>(groups, 1)));
    bias = graph.add_constant(fmt::format("{}/zeros_{}", node.name, count++),
                              Tensor::from_vector<float>({groups}, std::vector<float>(groups, 0)));
  }
  const ValueId planes = reshape(node.input(0), {xs[0], groups, -1});
  const ValueId norm = out(
      append_lowered_node(graph, node.name, count, "InstanceNormalization", {planes, scale, bias},
                          {{"epsilon", Attribute::from_float(node.attr_float("epsilon", 1e-5f))}}));
  const std::vector<int64_t> whole(xs.begin(), xs.end());
  if (!per_channel) {
    reshape(norm, whole, node.outputs[0]);
    return true;
  }
  std::vector<int64_t> channel_shape(xs.size() - 1, 1);
  channel_shape[0] = xs[1];
  const ValueId scaled =
      out(append_lowered_node(graph, node.name, count, "Mul",
                              {reshape(norm, whole), reshape(node.input(1), channel_shape)}, {}));
  append_lowered_node(graph, node.name, count, "Add",
                      {scaled, reshape(node.input(2), channel_shape)}, {}, node.outputs[0]);
  return true;
}

}  // namespace

void lower_function_ops(Graph& graph) {
  lower_nodes(graph, [](Graph& g, const Node& node) {
    if (!node.domain.empty() || node.outputs.size() != 1 || !f32(g, node.outputs[0]) ||
        !f32(g, node.input(0)))
      return false;
    const std::string& t = node.op_type;
    if (t == "Selu" || t == "Celu") return lower_scaled_elu(g, node);
    if (t == "ThresholdedRelu" || t == "Shrink") return lower_threshold(g, node);
    if (t == "Sum" || t == "Mean" || t == "Max" || t == "Min") {
      for (const ValueId v : node.inputs)
        if (!f32(g, v)) return false;
      return lower_variadic(g, node);
    }
    if (t == "Gelu") return lower_gelu(g, node);
    if (t == "Mish") return lower_mish(g, node);
    if (t == "GroupNormalization") return lower_group_norm(g, node);
    if (t == "ReduceL1" || t == "ReduceL2" || t == "ReduceSumSquare" || t == "ReduceLogSum")
      return lower_reduction(g, node);
    if (t == "ReduceLogSumExp") return lower_log_sum_exp(g, node);
    // AveragePool's count_include_pad is from opset 7 on.
    if ((t == "LpPool" || t == "GlobalLpPool") && g.opset >= 7 && g.opset < 18)
      return lower_lp_pool(g, node);
    return false;
  });
}

}  // namespace collage
