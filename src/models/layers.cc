#include "models/layers.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

namespace collage::models {
namespace {

// Folded BatchNorm leaves a bias of beta - mean * gamma / std: small, nonzero, per channel.
constexpr float kBiasRange = 0.1f;

std::vector<int64_t> filled(const std::vector<int64_t>& v, size_t n, int64_t def) {
  if (v.empty()) return std::vector<int64_t>(n, def);
  if (v.size() != n)
    fail(ErrorKind::kInternal, "model builder: {} values for {} dims", v.size(), n);
  return v;
}

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

// Pads as ONNX wants them: all begins, then all ends.
std::vector<int64_t> onnx_pads(const std::vector<int64_t>& pad) {
  std::vector<int64_t> out = pad;
  out.insert(out.end(), pad.begin(), pad.end());
  return out;
}

size_t spatial_dims(ModelBuilder& b, ValueId x) {
  return b.shape(x).size() - 2;
}

}  // namespace

ValueId random_bias(ModelBuilder& b, int64_t n) {
  return b.random_range(b.param_name("bias"), {n}, -kBiasRange, kBiasRange);
}

ValueId conv(ModelBuilder& b, ValueId x, const ConvSpec& spec) {
  const size_t n = spec.kernel.size();
  const int64_t cin = b.dim(x, 1);
  if (cin % spec.group || spec.out % spec.group)
    fail(ErrorKind::kInternal, "model builder: conv group {} does not divide {} -> {}", spec.group,
         cin, spec.out);
  Shape w_shape = {spec.out, cin / spec.group};
  w_shape.insert(w_shape.end(), spec.kernel.begin(), spec.kernel.end());
  const auto fan_in = static_cast<float>((cin / spec.group) * product(spec.kernel));
  std::vector<ValueId> inputs = {
      x, b.random(b.param_name("weight"), w_shape, spec.gain * std::sqrt(2.0f / fan_in))};
  if (spec.bias) inputs.push_back(random_bias(b, spec.out));
  return b.add1("Conv", inputs,
                {{"dilations", ints_attr(std::vector<int64_t>(n, 1))},
                 {"group", int_attr(spec.group)},
                 {"kernel_shape", ints_attr(spec.kernel)},
                 {"pads", ints_attr(onnx_pads(filled(spec.pad, n, 0)))},
                 {"strides", ints_attr(filled(spec.stride, n, 1))}});
}

ValueId conv2d(ModelBuilder& b, ValueId x, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
               int64_t group, bool bias, float gain) {
  ConvSpec spec;
  spec.out = out;
  spec.kernel = {kernel, kernel};
  spec.stride = {stride, stride};
  spec.pad = {pad, pad};
  spec.group = group;
  spec.bias = bias;
  spec.gain = gain;
  return conv(b, x, spec);
}

ValueId conv_transpose2d(ModelBuilder& b, ValueId x, int64_t out, int64_t kernel, int64_t stride,
                         int64_t pad, bool with_bias) {
  const int64_t cin = b.dim(x, 1);
  // Each output pixel sums about cin * (k / stride)^2 products, fewer when the input is
  // smaller than the kernel (DCGAN's first layer sees a 1x1 input).
  const int64_t reach = std::min(kernel, b.dim(x, 2));
  const float fan_in = std::max(static_cast<float>(cin), static_cast<float>(cin * reach * reach) /
                                                             static_cast<float>(stride * stride));
  std::vector<ValueId> inputs = {
      x, b.random(b.param_name("weight"), {cin, out, kernel, kernel}, std::sqrt(2.0f / fan_in))};
  if (with_bias) inputs.push_back(random_bias(b, out));
  return b.add1("ConvTranspose", inputs,
                {{"dilations", ints_attr({1, 1})},
                 {"group", int_attr(1)},
                 {"kernel_shape", ints_attr({kernel, kernel})},
                 {"pads", ints_attr({pad, pad, pad, pad})},
                 {"strides", ints_attr({stride, stride})}});
}

ValueId batch_norm(ModelBuilder& b, ValueId x) {
  const int64_t c = b.dim(x, 1);
  ValueId scale = b.random_range(b.param_name("weight"), {c}, 0.5f, 1.5f);
  ValueId shift = b.random_range(b.param_name("bias"), {c}, -0.2f, 0.2f);
  ValueId mean = b.random_range(b.param_name("running_mean"), {c}, -0.2f, 0.2f);
  ValueId var = b.random_range(b.param_name("running_var"), {c}, 0.5f, 1.5f);
  return b.add1("BatchNormalization", {x, scale, shift, mean, var},
                {{"epsilon", float_attr(1e-5f)}, {"momentum", float_attr(0.9f)}});
}

ValueId relu(ModelBuilder& b, ValueId x) {
  return b.add1("Relu", {x});
}

ValueId relu6(ModelBuilder& b, ValueId x) {
  ValueId lo = b.scalar(b.param_name("clip_min"), 0.0f);
  ValueId hi = b.scalar(b.param_name("clip_max"), 6.0f);
  return b.add1("Clip", {x, lo, hi});
}

ValueId tanh(ModelBuilder& b, ValueId x) {
  return b.add1("Tanh", {x});
}

ValueId add(ModelBuilder& b, ValueId x, ValueId y) {
  return b.add1("Add", {x, y});
}

ValueId concat(ModelBuilder& b, const std::vector<ValueId>& xs, int64_t axis) {
  return b.add1("Concat", xs, {{"axis", int_attr(axis)}});
}

ValueId max_pool(ModelBuilder& b, ValueId x, int64_t kernel, int64_t stride, int64_t pad,
                 bool ceil_mode) {
  const size_t n = spatial_dims(b, x);
  return b.add1("MaxPool", {x},
                {{"ceil_mode", int_attr(ceil_mode ? 1 : 0)},
                 {"kernel_shape", ints_attr(std::vector<int64_t>(n, kernel))},
                 {"pads", ints_attr(std::vector<int64_t>(2 * n, pad))},
                 {"strides", ints_attr(std::vector<int64_t>(n, stride))}});
}

ValueId avg_pool(ModelBuilder& b, ValueId x, int64_t kernel, int64_t stride, int64_t pad,
                 bool count_include_pad) {
  const size_t n = spatial_dims(b, x);
  return b.add1("AveragePool", {x},
                {{"ceil_mode", int_attr(0)},
                 {"count_include_pad", int_attr(count_include_pad ? 1 : 0)},
                 {"kernel_shape", ints_attr(std::vector<int64_t>(n, kernel))},
                 {"pads", ints_attr(std::vector<int64_t>(2 * n, pad))},
                 {"strides", ints_attr(std::vector<int64_t>(n, stride))}});
}

ValueId avg_pool_padded(ModelBuilder& b, ValueId x, int64_t kernel, int64_t stride, int64_t pad) {
  const size_t n = spatial_dims(b, x);
  // Pad's pads: all begins (batch, channel, spatial...), then all ends.
  std::vector<int64_t> pads(2 * (n + 2), 0);
  for (size_t i = 0; i < n; ++i) pads[2 + i] = pads[n + 4 + i] = pad;
  ValueId padded =
      b.add1("Pad", {x, b.int64s(b.param_name("pads"), pads)}, {{"mode", string_attr("constant")}});
  return b.add1("AveragePool", {padded},
                {{"ceil_mode", int_attr(0)},
                 {"kernel_shape", ints_attr(std::vector<int64_t>(n, kernel))},
                 {"pads", ints_attr(std::vector<int64_t>(2 * n, 0))},
                 {"strides", ints_attr(std::vector<int64_t>(n, stride))}});
}

ValueId global_avg_pool(ModelBuilder& b, ValueId x) {
  return b.add1("GlobalAveragePool", {x});
}

ValueId gemm(ModelBuilder& b, ValueId x, int64_t out, float gain) {
  const int64_t in = b.dim(x, 1);
  ValueId w = b.random(b.param_name("weight"), {out, in}, gain / std::sqrt(static_cast<float>(in)));
  return b.add1("Gemm", {x, w, random_bias(b, out)},
                {{"alpha", float_attr(1.0f)}, {"beta", float_attr(1.0f)}, {"transB", int_attr(1)}});
}

ValueId flatten_gemm(ModelBuilder& b, ValueId x, int64_t out) {
  return gemm(b, b.add1("Flatten", {x}, {{"axis", int_attr(1)}}), out);
}

ValueId linear(ModelBuilder& b, ValueId x, int64_t out, float gain) {
  const int64_t in = b.dim(x, -1);
  // The exporter stores nn.Linear's weight pre-transposed to [in, out] for MatMul.
  ValueId w = b.random(b.param_name("weight"), {in, out}, gain / std::sqrt(static_cast<float>(in)));
  ValueId y = b.add1("MatMul", {x, w});
  return b.add1("Add", {random_bias(b, out), y});
}

ValueId layer_norm(ModelBuilder& b, ValueId x, float eps) {
  const int64_t c = b.dim(x, -1);
  if (b.opset() >= 17) {
    ValueId gamma = b.random_range(b.param_name("weight"), {c}, 0.8f, 1.2f);
    ValueId beta = b.random_range(b.param_name("bias"), {c}, -0.1f, 0.1f);
    return b.add1("LayerNormalization", {x, gamma, beta},
                  {{"axis", int_attr(-1)}, {"epsilon", float_attr(eps)}});
  }
  const Attrs reduce = {{"axes", ints_attr({-1})}, {"keepdims", int_attr(1)}};
  ValueId mean = b.add1("ReduceMean", {x}, reduce);
  ValueId centered = b.add1("Sub", {x, mean});
  ValueId sq = b.add1("Pow", {centered, b.scalar(b.param_name("pow_exponent"), 2.0f)});
  ValueId var = b.add1("ReduceMean", {sq}, reduce);
  ValueId var_eps = b.add1("Add", {var, b.scalar(b.param_name("eps"), eps)});
  ValueId std_dev = b.add1("Sqrt", {var_eps});
  ValueId normed = b.add1("Div", {centered, std_dev});
  ValueId gamma = b.random_range(b.param_name("weight"), {c}, 0.8f, 1.2f);
  ValueId beta = b.random_range(b.param_name("bias"), {c}, -0.1f, 0.1f);
  return b.add1("Add", {b.add1("Mul", {normed, gamma}), beta});
}

ValueId gelu(ModelBuilder& b, ValueId x) {
  ValueId scaled = b.add1("Div", {x, b.scalar(b.param_name("sqrt2"), std::sqrt(2.0f))});
  ValueId e = b.add1("Erf", {scaled});
  ValueId one_plus = b.add1("Add", {e, b.scalar(b.param_name("one"), 1.0f)});
  ValueId prod = b.add1("Mul", {x, one_plus});
  return b.add1("Mul", {prod, b.scalar(b.param_name("half"), 0.5f)});
}

ValueId gelu_tanh(ModelBuilder& b, ValueId x) {
  // Computed in double and rounded once, as Python's math.sqrt(2 / math.pi) is.
  const auto sqrt_2_over_pi = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
  ValueId half_x = b.add1("Mul", {x, b.scalar(b.param_name("half"), 0.5f)});
  ValueId cube = b.add1("Pow", {x, b.scalar(b.param_name("pow_exponent"), 3.0f)});
  ValueId inner =
      b.add1("Add", {x, b.add1("Mul", {cube, b.scalar(b.param_name("coeff"), 0.044715f)})});
  ValueId t = b.add1(
      "Tanh", {b.add1("Mul", {inner, b.scalar(b.param_name("sqrt_2_over_pi"), sqrt_2_over_pi)})});
  ValueId one_plus = b.add1("Add", {t, b.scalar(b.param_name("one"), 1.0f)});
  return b.add1("Mul", {half_x, one_plus});
}

}  // namespace collage::models
