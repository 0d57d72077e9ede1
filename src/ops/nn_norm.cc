// Normalizations in inference form: BatchNormalization (running statistics),
// InstanceNormalization, GroupNormalization, LayerNormalization and LRN. Statistics
// accumulate in double.
#include <cmath>

#include "ops/nn_util.h"

namespace collage::ops::nn {
namespace {

void require_inputs(const InferContext& ctx, size_t n, const char* names) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.has_input(i))
      node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs inputs {}", names);
}

// A per-channel parameter (scale, bias, mean, var) must be a vector of C values.
void require_channel_vector(const InferContext& ctx, size_t i, int64_t channels) {
  const Shape& s = ctx.input_shape(i);
  if (s.size() != 1 || s[0] != channels)
    ctx.fail("input {} has shape {}; expected [{}] (one value per channel)", i, shape_to_string(s),
             channels);
}

// Inputs x, scale and bias present, x of a float type and the other two of the same: that
// type (InstanceNormalization, GroupNormalization).
DType require_scaled_input(const InferContext& ctx, const char* names) {
  require_inputs(ctx, 3, names);
  const DType t = require_float_input(ctx, 0);
  require_float_input(ctx, 1, 0);
  require_float_input(ctx, 2, 0);
  return t;
}

// ---- BatchNormalization: y = scale * (x - mean) / sqrt(var + epsilon) + bias, per channel.

void infer_batch_norm(InferContext& ctx) {
  const Node& node = ctx.node();
  require_inputs(ctx, 5, "X, scale, B, mean, var");
  DType t = require_float_input(ctx, 0);
  for (size_t i = 1; i < 5; ++i) require_float_input(ctx, i, 0);
  // Training computes batch statistics (and extra outputs); only inference is supported.
  if (node.attr_int("training_mode", 0) != 0)
    node_fail(node, ErrorKind::kUnsupported, "training_mode=1 is not supported");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (output_used(node, i))
      node_fail(node, ErrorKind::kUnsupported,
                "output {} exists only in training mode, which is not supported", i);
  if (node.attr_int("spatial", 1) == 0)
    node_fail(node, ErrorKind::kUnsupported, "spatial=0 is not supported");
  const Shape& x = ctx.input_shape(0);
  if (x.size() < 2) ctx.fail("input must have rank >= 2 (N, C, ...), got {}", shape_to_string(x));
  for (size_t i = 1; i < 5; ++i) require_channel_vector(ctx, i, x[1]);
  ctx.set_output(0, t, x);
  // Omitted training outputs still get a type so every output slot is inferred.
  for (size_t i = 1; i < node.outputs.size(); ++i) ctx.set_output(i, t, {x[1]});
}

template <typename T>
RefKernel batch_norm_kernel(int64_t batch, int64_t channels, int64_t plane, float epsilon) {
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* x = in[0].data<T>();
    const T* scale = in[1].data<T>();
    const T* bias = in[2].data<T>();
    const T* mean = in[3].data<T>();
    const T* var = in[4].data<T>();
    T* y = out[0].data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t nc = 0; nc < batch * channels; ++nc) {
      const int64_t c = nc % channels;
      const T a = static_cast<T>(scale[c] / std::sqrt(static_cast<double>(var[c]) + epsilon));
      const T b = bias[c] - mean[c] * a;
      const T* xp = x + nc * plane;
      T* yp = y + nc * plane;
      for (int64_t i = 0; i < plane; ++i) yp[i] = xp[i] * a + b;
    }
  };
}

RefKernel make_batch_norm(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  const float epsilon = node.attr_float("epsilon", 1e-5f);
  const int64_t plane = dims_product(xv.shape, 2, xv.shape.size());
  return dispatch_float(xv.dtype, [&](auto tag) {
    return batch_norm_kernel<decltype(tag)>(xv.shape[0], xv.shape[1], plane, epsilon);
  });
}

// ---- InstanceNormalization: per (n, c) plane, normalize with the plane's own statistics.

void infer_instance_norm(InferContext& ctx) {
  const DType t = require_scaled_input(ctx, "input, scale, B");
  const Shape& x = ctx.input_shape(0);
  if (x.size() < 3)
    ctx.fail("input must have rank >= 3 (N, C, spatial...), got {}", shape_to_string(x));
  require_channel_vector(ctx, 1, x[1]);
  require_channel_vector(ctx, 2, x[1]);
  ctx.set_output(0, t, x);
}

// Mean and 1/sqrt(variance + epsilon) of n values (population variance, two passes).
template <typename T>
std::pair<double, double> moments(const T* x, int64_t n, double epsilon) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double var = n > 0 ? sq / static_cast<double>(n) : 0.0;
  return {mean, 1.0 / std::sqrt(var + epsilon)};
}

// ---- GroupNormalization (opset 18): per (n, group) of C / num_groups channels, normalize with
// the group's own statistics; scale and bias per group to opset 20, per channel from 21.

void infer_group_norm(InferContext& ctx) {
  const DType t = require_scaled_input(ctx, "X, scale, bias");
  const Shape& x = ctx.input_shape(0);
  if (x.size() < 2) ctx.fail("input must have rank >= 2 (N, C, ...), got {}", shape_to_string(x));
  const int64_t groups = ctx.node().attr_int("num_groups", 0);
  if (groups <= 0 || x[1] % groups != 0)
    ctx.fail("num_groups {} does not divide the {} channels", groups, x[1]);
  const bool per_channel = group_norm_params_per_channel(ctx.opset());
  for (size_t i : {1, 2}) {
    const Shape& s = ctx.input_shape(i);
    const int64_t want = per_channel ? x[1] : groups;
    if (s.size() != 1 || s[0] != want)
      ctx.fail("input {} has shape {}; expected [{}] (one value per {} at opset {})", i,
               shape_to_string(s), want, per_channel ? "channel" : "group", ctx.opset());
  }
  ctx.set_output(0, t, x);
}

template <typename T>
RefKernel group_norm_kernel(int64_t batch, int64_t channels, int64_t groups, int64_t plane,
                            bool per_channel, float epsilon) {
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* x = in[0].data<T>();
    const T* scale = in[1].data<T>();
    const T* bias = in[2].data<T>();
    T* y = out[0].data<T>();
    const int64_t per_group = channels / groups, span = per_group * plane;
#pragma omp parallel for schedule(static)
    for (int64_t ng = 0; ng < batch * groups; ++ng) {
      const int64_t g = ng % groups;
      const T* xp = x + ng * span;
      T* yp = y + ng * span;
      auto [mean, inv_std] = moments(xp, span, epsilon);
      for (int64_t k = 0; k < per_group; ++k) {
        const int64_t p = per_channel ? g * per_group + k : g;
        const double a = scale[p] * inv_std;
        for (int64_t i = k * plane; i < (k + 1) * plane; ++i)
          yp[i] = static_cast<T>((xp[i] - mean) * a + bias[p]);
      }
    }
  };
}

RefKernel make_group_norm(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  const float epsilon = node.attr_float("epsilon", 1e-5f);
  const int64_t plane = dims_product(xv.shape, 2, xv.shape.size());
  const int64_t groups = node.attr_int("num_groups", 1);
  return dispatch_float(xv.dtype, [&](auto tag) {
    return group_norm_kernel<decltype(tag)>(xv.shape[0], xv.shape[1], groups, plane,
                                            group_norm_params_per_channel(g.opset), epsilon);
  });
}

RefKernel make_instance_norm(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  const float epsilon = node.attr_float("epsilon", 1e-5f);
  const int64_t plane = dims_product(xv.shape, 2, xv.shape.size());
  return dispatch_float(xv.dtype, [&](auto tag) {
    // Each channel a group of its own, its scale and bias per channel.
    return group_norm_kernel<decltype(tag)>(xv.shape[0], xv.shape[1], xv.shape[1], plane,
                                            /*per_channel=*/true, epsilon);
  });
}

// ---- LayerNormalization (opset 17): normalize over axes [axis, rank); optional Mean and
// InvStdDev outputs (float32, the stash type) keep the normalized axes as size 1.

struct LayerNormParams {
  int64_t outer = 0, inner = 0;
  float epsilon = 1e-5f;
  // For each position of the normalized block, the element of Scale / B it reads
  // (numpy broadcasting); empty when the parameter covers the block exactly.
  std::vector<int64_t> scale_map, bias_map;
  bool has_bias = false;
};

int64_t layer_norm_axis(const Node& node, const Shape& x) {
  int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    node_fail(node, ErrorKind::kShape, "axis {} is out of range for input {}",
              node.attr_int("axis", -1), shape_to_string(x));
  return axis;
}

// Index map from the normalized block to a parameter of shape `p` that broadcasts
// unidirectionally to `block`; throws kShape when it does not.
std::vector<int64_t> broadcast_map(const Node& node, const Shape& block, const Shape& p,
                                   const char* what) {
  bool ok = p.size() <= block.size();
  for (size_t i = 0; ok && i < p.size(); ++i) {
    int64_t b = block[block.size() - p.size() + i];
    ok = p[i] == b || p[i] == 1;
  }
  if (!ok)
    node_fail(node, ErrorKind::kShape, "{} {} does not broadcast to the normalized shape {}", what,
              shape_to_string(p), shape_to_string(block));
  int64_t n = dims_product(block, 0, block.size());
  if (dims_product(p, 0, p.size()) == n) return {};
  Shape padded(block.size() - p.size(), 1);
  padded.insert(padded.end(), p.begin(), p.end());
  std::vector<int64_t> map(static_cast<size_t>(n));
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rem = flat, src = 0, stride = 1;
    for (size_t i = block.size(); i-- > 0;) {
      int64_t idx = rem % block[i];
      rem /= block[i];
      if (padded[i] != 1) src += idx * stride;
      stride *= padded[i];
    }
    map[flat] = src;
  }
  return map;
}

LayerNormParams layer_norm_params(const Node& node, const Shape& x, const Shape& scale,
                                  const Shape* bias) {
  if (x.empty()) node_fail(node, ErrorKind::kShape, "input must have rank >= 1");
  if (node.attr_int("stash_type", 1) != 1)
    node_fail(node, ErrorKind::kUnsupported, "stash_type {} is not supported (only 1, float)",
              node.attr_int("stash_type", 1));
  int64_t axis = layer_norm_axis(node, x);
  LayerNormParams p;
  p.outer = dims_product(x, 0, axis);
  p.inner = dims_product(x, axis, x.size());
  p.epsilon = node.attr_float("epsilon", 1e-5f);
  Shape block(x.begin() + axis, x.end());
  p.scale_map = broadcast_map(node, block, scale, "Scale");
  if (bias) {
    p.has_bias = true;
    p.bias_map = broadcast_map(node, block, *bias, "B");
  }
  return p;
}

void infer_layer_norm(InferContext& ctx) {
  require_inputs(ctx, 2, "X, Scale");
  DType t = require_float_input(ctx, 0);
  require_float_input(ctx, 1, 0);
  const Shape* bias = nullptr;
  if (ctx.has_input(2)) {
    require_float_input(ctx, 2, 0);
    bias = &ctx.input_shape(2);
  }
  const Shape& x = ctx.input_shape(0);
  layer_norm_params(ctx.node(), x, ctx.input_shape(1), bias);
  ctx.set_output(0, t, x);
  Shape stats = x;
  for (size_t i = layer_norm_axis(ctx.node(), x); i < stats.size(); ++i) stats[i] = 1;
  for (size_t i = 1; i < std::min<size_t>(ctx.num_outputs(), 3); ++i)
    ctx.set_output(i, DType::kFloat32, stats);
}

template <typename T>
RefKernel layer_norm_kernel(LayerNormParams p) {
  return [p](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* x = in[0].data<T>();
    const T* scale = in[1].data<T>();
    const T* bias = p.has_bias && in.size() > 2 && in[2].defined() ? in[2].data<T>() : nullptr;
    T* y = out[0].data<T>();
    float* mean_out = out.size() > 1 && out[1].defined() ? out[1].data<float>() : nullptr;
    float* inv_out = out.size() > 2 && out[2].defined() ? out[2].data<float>() : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < p.outer; ++r) {
      const T* xr = x + r * p.inner;
      T* yr = y + r * p.inner;
      auto [mean, inv_std] = moments(xr, p.inner, p.epsilon);
      for (int64_t i = 0; i < p.inner; ++i) {
        const int64_t si = p.scale_map.empty() ? i : p.scale_map[i];
        double v = (xr[i] - mean) * inv_std * scale[si];
        if (bias) v += bias[p.bias_map.empty() ? i : p.bias_map[i]];
        yr[i] = static_cast<T>(v);
      }
      if (mean_out) mean_out[r] = static_cast<float>(mean);
      if (inv_out) inv_out[r] = static_cast<float>(inv_std);
    }
  };
}

RefKernel make_layer_norm(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  const Shape* bias = node.input(2) != kNoValue ? &g.value(node.inputs[2]).shape : nullptr;
  LayerNormParams p = layer_norm_params(node, xv.shape, g.value(node.inputs[1]).shape, bias);
  return dispatch_float(xv.dtype, [&](auto tag) { return layer_norm_kernel<decltype(tag)>(p); });
}

// ---- LRN: y = x / (bias + alpha / size * sum of x^2 over nearby channels)^beta.

void infer_lrn(InferContext& ctx) {
  require_inputs(ctx, 1, "X");
  DType t = require_float_input(ctx, 0);
  const Shape& x = ctx.input_shape(0);
  if (x.size() < 2) ctx.fail("input must have rank >= 2 (N, C, ...), got {}", shape_to_string(x));
  if (ctx.node().attr_int("size", 0) <= 0)
    node_fail(ctx.node(), ErrorKind::kInvalidModel, "size must be a positive integer");
  ctx.set_output(0, t, x);
}

template <typename T>
RefKernel lrn_kernel(int64_t batch, int64_t channels, int64_t plane, int64_t size, float alpha,
                     float beta, float bias) {
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    // Channel c sums channels [c - floor((size-1)/2), c + ceil((size-1)/2)].
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
#pragma omp parallel for schedule(static)
    for (int64_t nc = 0; nc < batch * channels; ++nc) {
      const int64_t n = nc / channels, c = nc % channels;
      std::vector<double> sq(static_cast<size_t>(plane), 0.0);
      for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(channels - 1, c + after);
           ++k) {
        const T* xk = x + (n * channels + k) * plane;
        for (int64_t i = 0; i < plane; ++i) sq[i] += static_cast<double>(xk[i]) * xk[i];
      }
      const T* xp = x + nc * plane;
      T* yp = y + nc * plane;
      for (int64_t i = 0; i < plane; ++i)
        yp[i] = static_cast<T>(xp[i] / std::pow(bias + alpha / size * sq[i], beta));
    }
  };
}

RefKernel make_lrn(const Graph& g, const Node& node) {
  const Value& xv = g.value(node.inputs[0]);
  const int64_t plane = dims_product(xv.shape, 2, xv.shape.size());
  const int64_t size = node.attr_int("size", 1);
  const float alpha = node.attr_float("alpha", 1e-4f), beta = node.attr_float("beta", 0.75f),
              bias = node.attr_float("bias", 1.0f);
  return dispatch_float(xv.dtype, [&](auto tag) {
    return lrn_kernel<decltype(tag)>(xv.shape[0], xv.shape[1], plane, size, alpha, beta, bias);
  });
}

}  // namespace

bool group_norm_params_per_channel(int64_t opset) {
  return opset >= 21;
}

void register_norm_ops(OpRegistry& registry) {
  registry.add({"BatchNormalization", "", OpKind::kOpaque, infer_batch_norm, make_batch_norm});
  registry.add(
      {"InstanceNormalization", "", OpKind::kOpaque, infer_instance_norm, make_instance_norm});
  registry.add({"LayerNormalization", "", OpKind::kOpaque, infer_layer_norm, make_layer_norm});
  registry.add({"GroupNormalization", "", OpKind::kOpaque, infer_group_norm, make_group_norm});
  registry.add({"LRN", "", OpKind::kOpaque, infer_lrn, make_lrn});
}

}  // namespace collage::ops::nn
