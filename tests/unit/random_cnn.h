// Random convolutional networks for differential tests: DAGs of the ops real CNNs are made
// of (convolutions of every common window, stride, grouping; batch norm; the usual
// activations; residual sums; inception-style branches joined by Concat; pools; squeeze-
// excitation; channel splits and shuffles; explicit Pad; ConvNeXt's channels-last LayerNorm
// and MLP; Inception-v3's 1xk / kx1 pairs; ResNeXt's grouped convs; depthwise channel
// multipliers; CBAM's spatial attention; TensorFlow exports' asymmetric SAME padding;
// GroupNorm as exported; PixelShuffle; segmentation Softmax; LRN), in random orders, shapes and
// channel counts (some of whole 16-channel blocks, some not). Every backend rewrite that looks at a
// neighbourhood of ops (post-op fusion, concat splitting, in-place concat, pad folding,
// squeeze-excitation, depthwise fusion, concurrent lanes) meets its patterns here in combinations
// no hand-written test lists; the tests compare each backend with reference on them. Weights are
// scaled by 1/sqrt(fan-in) so values stay O(1) through depth.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph_builder.h"

namespace collage::testing {

class RandomCnn {
 public:
  explicit RandomCnn(uint64_t seed) : rng_(static_cast<unsigned>(seed)) {}

  // A graph of about `blocks` random blocks on an input of random batch, channels and size.
  Graph build(int blocks) {
    const int64_t batch = chance(0.25) ? pick<int64_t>({2, 3}) : 1;
    const int64_t size = pick<int64_t>({9, 12, 14, 16, 17, 20});
    ValueId x = b_.input("x", DType::kFloat32, {batch, pick<int64_t>({3, 8, 16}), size, size});
    live_ = {conv(x, pick<int64_t>({16, 24, 32}), 3, 1, 1)};
    for (int i = 0; i < blocks; ++i) {
      ValueId in = live_[index(live_.size())];
      ValueId out = block(in);
      live_.push_back(out);
      if (live_.size() > 4) live_.erase(live_.begin());
    }
    // Every value no node reads is an output (no dead nodes, as in an exported model), and
    // sometimes one that nodes also read.
    const Graph& g = b_.graph();
    const auto readers = g.consumers();
    for (size_t v = 0; v < g.num_values(); ++v)
      if (g.value(static_cast<ValueId>(v)).producer >= 0 && readers[v].empty())
        b_.output(static_cast<ValueId>(v));
    if (live_.size() > 1 && chance(0.3)) {
      const ValueId extra = live_[index(live_.size() - 1)];
      if (!readers[extra].empty()) b_.output(extra);
    }
    return b_.finish();
  }

 private:
  template <typename T>
  T pick(std::vector<T> options) {
    return options[index(options.size())];
  }
  size_t index(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  const Shape& shape(ValueId v) { return b_.graph().value(v).shape; }
  int64_t channels(ValueId v) { return shape(v)[1]; }

  ValueId block(ValueId x) {
    switch (index(27)) {
      case 0:
        return inception(x);
      case 1:
        return residual(x);
      case 2:
        return inverted_residual(x);
      case 3:
        return squeeze_excite(x);
      case 4:
        return pool(x);
      case 5:
        return shuffle(x);
      case 6:
        return split_halves(x);
      case 7:
        return padded_conv(x);
      case 8:
        return activation(batch_norm(b_, x, channels(x)));
      case 9:
        return channel_slice(x);
      case 10:
        return upsample(x);
      case 11:
        return transposed_conv(x);
      case 12:
        return dilated_conv(x);
      case 13:
        return channel_scale(x);
      case 14:
        return b_.add1("PRelu",
                       {conv(x, 16, 3, 1, 1), b_.random_constant("slope", {16, 1, 1}, 0.3f)});
      case 15:
        return head(x);
      case 16:
        return convnext(x);
      case 17:
        return asymmetric_pair(x);
      case 18:
        return grouped_bottleneck(x);
      case 19:
        return activation(conv(x, channels(x) * pick<int64_t>({2, 4}), 3, 1, channels(x)));
      case 20:
        return spatial_attention(x);
      case 21:
        return tf_same(x);
      case 22:
        return group_norm(x);
      case 23:
        return pixel_shuffle(x);
      case 24:
        return channel_softmax(x);
      case 25:
        return lrn(x);
      default:
        return conv_act(x, pick<int64_t>({8, 16, 24, 32, 40, 48, 64}), pick<int64_t>({1, 3, 5}),
                        shape(x)[2] >= 6 && chance(0.3) ? 2 : 1);
    }
  }

  ValueId conv(ValueId x, int64_t out_channels, int64_t k, int64_t stride, int64_t group,
               bool bias = true, int64_t dilation = 1) {
    const int64_t in_channels = channels(x);
    const float scale = 1.0f / std::sqrt(static_cast<float>(in_channels / group * k * k));
    std::vector<ValueId> in = {
        x, b_.random_constant("w", {out_channels, in_channels / group, k, k}, 1.7f * scale)};
    if (bias) in.push_back(b_.random_constant("b", {out_channels}, 0.1f));
    const int64_t p = k / 2 * dilation;
    return b_.add1("Conv", in,
                   {{"kernel_shape", attr_ints({k, k})},
                    {"strides", attr_ints({stride, stride})},
                    {"pads", attr_ints({p, p, p, p})},
                    {"dilations", attr_ints({dilation, dilation})},
                    {"group", attr_i(group)}});
  }

  ValueId activation(ValueId x) {
    switch (index(12)) {
      case 0:
      case 1:
        return b_.add1("Relu", {x});
      case 2:
        return b_.add1("Clip", {x, b_.constant("lo", Tensor::scalar(0.0f)),
                                b_.constant("hi", Tensor::scalar(6.0f))});
      case 3:
        return b_.add1("Mul", {x, b_.add1("Sigmoid", {x})});  // SiLU as exported
      case 4:
        return b_.add1("HardSwish", {x});
      case 5:
        return b_.add1("LeakyRelu", {x}, {{"alpha", attr_f(0.1f)}});
      case 6:
        return b_.add1("Sigmoid", {x});
      case 7:
        return b_.add1("Tanh", {x});
      case 8:
        return b_.add1("Elu", {x});
      case 9:
        return b_.add1("Softplus", {x});
      case 10:  // Mish as exported: x * tanh(softplus(x))
        return b_.add1("Mul", {x, b_.add1("Tanh", {b_.add1("Softplus", {x})})});
      default:
        return x;
    }
  }

  ValueId conv_act(ValueId x, int64_t out_channels, int64_t k, int64_t stride) {
    ValueId y = conv(x, out_channels, k, stride, 1, !chance(0.2));
    if (chance(0.3)) y = batch_norm(b_, y, out_channels);
    return activation(y);
  }

  // Two to four branches of the input (1x1; 1x1 then 3x3 or 5x5; pool then 1x1; 3x3),
  // joined along the channels.
  ValueId inception(ValueId x) {
    std::vector<ValueId> parts;
    const size_t branches = 2 + index(3);
    for (size_t i = 0; i < branches; ++i) {
      const int64_t c = pick<int64_t>({8, 16, 24, 32});
      switch (index(4)) {
        case 0:
          parts.push_back(conv_act(x, c, 1, 1));
          break;
        case 1:
          parts.push_back(
              conv_act(conv_act(x, pick<int64_t>({8, 16}), 1, 1), c, pick<int64_t>({3, 5}), 1));
          break;
        case 2:
          parts.push_back(conv_act(pool3x3(x, chance(0.5)), c, 1, 1));
          break;
        default:
          parts.push_back(conv_act(x, c, 3, 1));
      }
    }
    return b_.add1("Concat", parts, {{"axis", attr_i(1)}});
  }

  ValueId pool3x3(ValueId x, bool max) {
    std::map<std::string, Attribute> attrs = {{"kernel_shape", attr_ints({3, 3})},
                                              {"strides", attr_ints({1, 1})},
                                              {"pads", attr_ints({1, 1, 1, 1})}};
    if (!max) attrs["count_include_pad"] = attr_i(chance(0.5) ? 1 : 0);
    return b_.add1(max ? "MaxPool" : "AveragePool", {x}, attrs);
  }

  // conv (+act) + conv, summed with the input (or a 1x1 projection of it), then an activation.
  ValueId residual(ValueId x) {
    const int64_t c = channels(x);
    const int64_t out = chance(0.6) ? c : pick<int64_t>({16, 32, 48});
    ValueId y =
        conv(conv_act(x, pick<int64_t>({8, 16, 32}), pick<int64_t>({1, 3}), 1), out, 3, 1, 1);
    ValueId skip = out == c && chance(0.7) ? x : conv(x, out, 1, 1, 1);
    ValueId sum = chance(0.5) ? b_.add1("Add", {y, skip}) : b_.add1("Add", {skip, y});
    return chance(0.7) ? b_.add1("Relu", {sum}) : sum;
  }

  // 1x1 expansion, depthwise 3x3 or 5x5 (stride 1 or 2), 1x1 projection; summed with the
  // input where the shapes allow.
  ValueId inverted_residual(ValueId x) {
    const int64_t c = channels(x);
    const int64_t wide = c * pick<int64_t>({2, 3, 4, 6});
    const int64_t stride = shape(x)[2] >= 6 && chance(0.3) ? 2 : 1;
    ValueId e = activation(conv(x, wide, 1, 1, 1));
    ValueId d = activation(conv(e, wide, pick<int64_t>({3, 3, 5}), stride, wide));
    if (chance(0.3)) d = squeeze_excite(d);
    const int64_t out = stride == 1 && chance(0.6) ? c : pick<int64_t>({16, 24, 40});
    ValueId p = conv(d, out, 1, 1, 1);
    return stride == 1 && out == c ? b_.add1("Add", {p, x}) : p;
  }

  // GlobalAveragePool (or a spatial ReduceMean), 1x1 squeeze, activation, 1x1 excitation,
  // gate, times the input.
  ValueId squeeze_excite(ValueId x) {
    const int64_t c = channels(x);
    ValueId m = chance(0.5) ? b_.add1("GlobalAveragePool", {x})
                            : b_.add1("ReduceMean", {x}, {{"axes", attr_ints({2, 3})}});
    ValueId s = activation(conv(m, std::max<int64_t>(4, c / 4), 1, 1, 1));
    ValueId e = conv(s, c, 1, 1, 1);
    ValueId gate = chance(0.5) ? b_.add1("Sigmoid", {e}) : b_.add1("HardSigmoid", {e});
    return chance(0.5) ? b_.add1("Mul", {x, gate}) : b_.add1("Mul", {gate, x});
  }

  ValueId pool(ValueId x) {
    if (shape(x)[2] < 4 || chance(0.4)) return pool3x3(x, chance(0.5));
    std::map<std::string, Attribute> attrs = {{"kernel_shape", attr_ints({2, 2})},
                                              {"strides", attr_ints({2, 2})}};
    if (chance(0.5)) attrs["ceil_mode"] = attr_i(1);
    return b_.add1(chance(0.5) ? "MaxPool" : "AveragePool", {x}, attrs);
  }

  // ShuffleNet's channel shuffle: Reshape to groups, Transpose, Reshape back.
  ValueId shuffle(ValueId x) {
    const Shape s = shape(x);
    if (s[1] % 2) return conv_act(x, 16, 1, 1);
    ValueId r = b_.add1(
        "Reshape",
        {x, b_.constant("s5", Tensor::from_vector<int64_t>({5}, {s[0], 2, s[1] / 2, s[2], s[3]}))});
    ValueId t = b_.add1("Transpose", {r}, {{"perm", attr_ints({0, 2, 1, 3, 4})}});
    return b_.add1("Reshape", {t, b_.constant("s4", Tensor::from_vector<int64_t>({4}, s))});
  }

  // Split into two channel halves, a conv on one, joined again (ShuffleNetV2's unit).
  ValueId split_halves(ValueId x) {
    const int64_t c = channels(x);
    if (c % 2) return conv_act(x, 16, 3, 1);
    std::vector<ValueId> halves =
        b_.add("Split", {x, b_.constant("sp", Tensor::from_vector<int64_t>({2}, {c / 2, c / 2}))},
               {{"axis", attr_i(1)}}, 2);
    ValueId y = conv_act(halves[1], c / 2, 3, 1);
    return b_.add1("Concat", {halves[0], y}, {{"axis", attr_i(1)}});
  }

  // An explicit zero Pad before an unpadded conv (as some exporters write it).
  ValueId padded_conv(ValueId x) {
    const int64_t p = pick<int64_t>({1, 2});
    ValueId padded = b_.add1(
        "Pad",
        {x, b_.constant("pads", Tensor::from_vector<int64_t>({8}, {0, 0, p, p, 0, 0, p, p}))});
    const int64_t c = channels(x);
    const int64_t k = 2 * p + 1;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c * k * k));
    ValueId y = b_.add1("Conv", {padded, b_.random_constant("w", {c, c, k, k}, 1.7f * scale)},
                        {{"kernel_shape", attr_ints({k, k})}});
    return activation(y);
  }

  // A channel range (Slice on axis 1), then a conv on it.
  ValueId channel_slice(ValueId x) {
    const int64_t c = channels(x);
    if (c < 4) return conv_act(x, 16, 1, 1);
    const int64_t start = index(static_cast<size_t>(c / 2)),
                  end = c - index(static_cast<size_t>(c / 4));
    auto ints = [&](int64_t v) { return b_.constant("i", Tensor::from_vector<int64_t>({1}, {v})); };
    ValueId sliced = b_.add1("Slice", {x, ints(start), ints(end), ints(1)});
    return conv_act(sliced, pick<int64_t>({8, 16}), pick<int64_t>({1, 3}), 1);
  }

  // x2 upsampling (nearest or bilinear, as decoders and FPNs export it), then a stride-2
  // conv back to the input's size.
  ValueId upsample(ValueId x) {
    if (shape(x)[2] > 16) return pool(x);
    std::map<std::string, Attribute> attrs;
    if (chance(0.5)) {
      attrs["mode"] = attr_s("nearest");
      attrs["coordinate_transformation_mode"] = attr_s("asymmetric");
      attrs["nearest_mode"] = attr_s("floor");
    } else {
      attrs["mode"] = attr_s("linear");
      attrs["coordinate_transformation_mode"] =
          attr_s(chance(0.5) ? "half_pixel" : "align_corners");
    }
    ValueId up = b_.add1(
        "Resize",
        {x, kNoValue, b_.constant("scales", Tensor::from_vector<float>({4}, {1, 1, 2, 2}))}, attrs);
    return conv_act(up, pick<int64_t>({8, 16}), 3, 2);
  }

  // A stride-2 transposed conv (a decoder's upsampling), then an activation.
  ValueId transposed_conv(ValueId x) {
    if (shape(x)[2] > 16) return pool(x);
    const int64_t c = channels(x), out = pick<int64_t>({8, 16});
    const int64_t k = pick<int64_t>({2, 3, 4});
    const int64_t p = k == 4 ? 1 : 0;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c * k * k / 4));
    ValueId y = b_.add1(
        "ConvTranspose",
        {x, b_.random_constant("wt", {c, out, k, k}, scale), b_.random_constant("bt", {out}, 0.1f)},
        {{"kernel_shape", attr_ints({k, k})},
         {"strides", attr_ints({2, 2})},
         {"pads", attr_ints({p, p, p, p})}});
    // A GAN generator's layer: ConvTranspose, BatchNorm, ReLU (or Tanh at its output).
    if (chance(0.4)) y = batch_norm(b_, y, out);
    return activation(y);
  }

  // A dilated 3x3 conv (DeepLab's atrous convolutions), padded to keep the size.
  ValueId dilated_conv(ValueId x) {
    return activation(conv(x, pick<int64_t>({16, 32}), 3, 1, 1, true, 2));
  }

  // A per-channel scale and shift by broadcast constants (a BatchNorm exported as Mul, Add).
  ValueId channel_scale(ValueId x) {
    const int64_t c = channels(x);
    ValueId y = b_.add1("Mul", {x, b_.random_constant("scale", {1, c, 1, 1})});
    return b_.add1("Add", {y, b_.random_constant("shift", {c, 1, 1}, 0.1f)});
  }

  // A classifier head beside the trunk: global pool, flatten, Gemm (transB, as torch exports
  // Linear), then Softmax or nothing. Its 2-D output is a graph output (nothing reads it);
  // the trunk goes on from `x`.
  ValueId head(ValueId x) {
    const int64_t c = channels(x);
    ValueId flat = b_.add1("Flatten", {b_.add1("GlobalAveragePool", {x})}, {{"axis", attr_i(1)}});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c));
    ValueId logits = b_.add1(
        "Gemm",
        {flat, b_.random_constant("fc", {10, c}, scale), b_.random_constant("fcb", {10}, 0.1f)},
        {{"transB", attr_i(1)}});
    if (chance(0.5)) b_.add1("Softmax", {logits}, {{"axis", attr_i(1)}});
    return x;
  }

  // ConvNeXt's block: depthwise 7x7, channels last (Transpose), LayerNorm over channels
  // (one node or decomposed), Linear (MatMul + Add) x4, GELU, Linear back, a per-channel
  // layer scale, channels first again, plus the input.
  ValueId convnext(ValueId x) {
    const int64_t c = channels(x);
    ValueId d = conv(x, c, 7, 1, c);
    ValueId t = b_.add1("Transpose", {d}, {{"perm", attr_ints({0, 2, 3, 1})}});
    ValueId n;
    if (chance(0.5)) {
      n = b_.add1("LayerNormalization",
                  {t, b_.random_constant("gamma", {c}), b_.random_constant("beta", {c}, 0.1f)},
                  {{"axis", attr_i(-1)}, {"epsilon", attr_f(1e-6f)}});
    } else {
      n = decomposed_layer_norm(b_, t, c, 1e-6f);
    }
    auto linear = [&](ValueId v, int64_t in, int64_t out) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(in));
      ValueId m = b_.add1("MatMul", {v, b_.random_constant("fc", {in, out}, 1.7f * scale)});
      return b_.add1("Add", {b_.random_constant("fcb", {out}, 0.1f), m});
    };
    ValueId h = linear(n, c, 4 * c);
    h = chance(0.5) ? erf_gelu(b_, h) : b_.add1("Relu", {h});
    h = linear(h, 4 * c, c);
    h = b_.add1("Mul", {b_.random_constant("layer_scale", {c}, 0.5f), h});
    ValueId back = b_.add1("Transpose", {h}, {{"perm", attr_ints({0, 3, 1, 2})}});
    return b_.add1("Add", {x, back});
  }

  // A conv of any window, pads and stride per axis (the other helpers are square).
  ValueId conv2(ValueId x, int64_t out_channels, std::vector<int64_t> kernel,
                std::vector<int64_t> pads, std::vector<int64_t> strides, int64_t group = 1) {
    const int64_t in_channels = channels(x);
    const float scale =
        1.0f / std::sqrt(static_cast<float>(in_channels / group * kernel[0] * kernel[1]));
    ValueId w = b_.random_constant("w", {out_channels, in_channels / group, kernel[0], kernel[1]},
                                   1.7f * scale);
    return b_.add1("Conv", {x, w, b_.random_constant("b", {out_channels}, 0.1f)},
                   {{"kernel_shape", attr_ints(kernel)},
                    {"strides", attr_ints(strides)},
                    {"pads", attr_ints(pads)},
                    {"group", attr_i(group)}});
  }

  // Inception-v3's factorized convs: 1xk then kx1 (or the other way round), each padded to
  // keep the size, with BatchNorm and ReLU as torchvision's BasicConv2d.
  ValueId asymmetric_pair(ValueId x) {
    const int64_t k = pick<int64_t>({3, 5, 7}), p = k / 2;
    const bool row_first = chance(0.5);
    auto one = [&](ValueId v, bool row) {
      const int64_t c = pick<int64_t>({16, 24, 32});
      ValueId y = row ? conv2(v, c, {1, k}, {0, p, 0, p}, {1, 1})
                      : conv2(v, c, {k, 1}, {p, 0, p, 0}, {1, 1});
      return b_.add1("Relu", {chance(0.5) ? batch_norm(b_, y, c) : y});
    };
    return one(one(x, row_first), !row_first);
  }

  // ResNeXt's bottleneck: 1x1, a grouped 3x3 (2-8 groups, stride 1 or 2), 1x1, summed with
  // the input where the shapes allow.
  ValueId grouped_bottleneck(ValueId x) {
    const int64_t c = channels(x);
    const int64_t groups = pick<int64_t>({2, 4, 8});
    const int64_t width = groups * pick<int64_t>({2, 4, 8});
    const int64_t stride = shape(x)[2] >= 6 && chance(0.3) ? 2 : 1;
    ValueId y = b_.add1("Relu", {conv(x, width, 1, 1, 1)});
    y = b_.add1("Relu", {conv(y, width, 3, stride, groups)});
    y = conv(y, c, 1, 1, 1);
    return b_.add1("Relu", {stride == 1 ? b_.add1("Add", {y, x}) : y});
  }

  // CBAM's spatial attention: the channel mean (and max, joined), a 7x7 conv to one map,
  // Sigmoid, times the input (broadcast over the channels).
  ValueId spatial_attention(ValueId x) {
    const std::map<std::string, Attribute> over_channels = {{"axes", attr_ints({1})},
                                                            {"keepdims", attr_i(1)}};
    ValueId mean = b_.add1("ReduceMean", {x}, over_channels);
    ValueId pooled = mean;
    if (chance(0.5))
      pooled = b_.add1("Concat", {mean, b_.add1("ReduceMax", {x}, over_channels)},
                       {{"axis", attr_i(1)}});
    ValueId gate = b_.add1("Sigmoid", {conv(pooled, 1, 7, 1, 1)});
    return chance(0.5) ? b_.add1("Mul", {x, gate}) : b_.add1("Mul", {gate, x});
  }

  // What TensorFlow exports (tf2onnx) write for a stride-2 "SAME" conv or pool: the padding
  // ceil(h / 2) takes, its odd part at the end, explicit or as auto_pad SAME_UPPER.
  ValueId tf_same(ValueId x) {
    const int64_t k = pick<int64_t>({2, 3}), h = shape(x)[2];
    const int64_t total = std::max<int64_t>(0, ((h + 1) / 2 - 1) * 2 + k - h);
    const int64_t begin = total / 2, end = total - begin;
    std::map<std::string, Attribute> window = {{"kernel_shape", attr_ints({k, k})},
                                               {"strides", attr_ints({2, 2})}};
    if (chance(0.5))
      window["pads"] = attr_ints({begin, begin, end, end});
    else
      window["auto_pad"] = attr_s("SAME_UPPER");
    if (chance(0.4)) return b_.add1(chance(0.5) ? "MaxPool" : "AveragePool", {x}, window);
    const int64_t c = channels(x), out = pick<int64_t>({16, 32});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c * k * k));
    ValueId w = b_.random_constant("w", {out, c, k, k}, 1.7f * scale);
    return activation(b_.add1("Conv", {x, w, b_.random_constant("b", {out}, 0.1f)}, window));
  }

  // GroupNorm as torch.onnx exports it below opset 18: Reshape to [N, groups, -1],
  // InstanceNormalization (unit scale, zero bias), Reshape back, per-channel scale and shift.
  ValueId group_norm(ValueId x) {
    const Shape s = shape(x);
    const int64_t c = s[1];
    const int64_t groups = c % 4 == 0 ? pick<int64_t>({2, 4}) : (c % 2 == 0 ? 2 : 1);
    ValueId grouped = b_.add1(
        "Reshape", {x, b_.constant("g3", Tensor::from_vector<int64_t>({3}, {s[0], groups, -1}))});
    ValueId normed = b_.add1(
        "InstanceNormalization",
        {grouped,
         b_.constant("ones",
                     Tensor::from_vector<float>({groups}, std::vector<float>(groups, 1.0f))),
         b_.constant("zeros",
                     Tensor::from_vector<float>({groups}, std::vector<float>(groups, 0.0f)))},
        {{"epsilon", attr_f(1e-5f)}});
    ValueId back =
        b_.add1("Reshape", {normed, b_.constant("g4", Tensor::from_vector<int64_t>({4}, s))});
    ValueId scaled = b_.add1("Mul", {back, b_.random_constant("gamma", {c, 1, 1})});
    return activation(b_.add1("Add", {scaled, b_.random_constant("beta", {c, 1, 1}, 0.1f)}));
  }

  // Super-resolution's PixelShuffle: a conv to 4x the channels, DepthToSpace by 2 (CRD as
  // torch exports it, DCR as TensorFlow does), then a stride-2 conv back to the input's size.
  ValueId pixel_shuffle(ValueId x) {
    if (shape(x)[2] > 16) return pool(x);
    const int64_t c = pick<int64_t>({4, 8});
    ValueId wide = conv(x, 4 * c, 3, 1, 1);
    ValueId up = b_.add1("DepthToSpace", {wide},
                         {{"blocksize", attr_i(2)}, {"mode", attr_s(chance(0.5) ? "CRD" : "DCR")}});
    if (chance(0.3))  // and back again, as some detectors' space-to-depth stems do
      return conv_act(b_.add1("SpaceToDepth", {activation(up)}, {{"blocksize", attr_i(2)}}),
                      pick<int64_t>({8, 16}), 1, 1);
    return conv_act(activation(up), pick<int64_t>({8, 16}), 3, 2);
  }

  // A segmentation head: a 1x1 conv to classes, Softmax over the channels.
  ValueId channel_softmax(ValueId x) {
    return b_.add1("Softmax", {conv(x, pick<int64_t>({3, 8, 21}), 1, 1, 1)}, {{"axis", attr_i(1)}});
  }

  // Local response normalization (AlexNet, the original GoogLeNet).
  ValueId lrn(ValueId x) {
    return b_.add1("LRN", {x},
                   {{"size", attr_i(pick<int64_t>({3, 5}))},
                    {"alpha", attr_f(1e-4f)},
                    {"beta", attr_f(0.75f)},
                    {"bias", attr_f(chance(0.5) ? 1.0f : 2.0f)}});
  }

  GraphBuilder b_;
  std::mt19937 rng_;
  std::vector<ValueId> live_;
};

// The graph of `seed`: 4 to 8 blocks.
inline Graph random_cnn(uint64_t seed) {
  return RandomCnn(seed).build(4 + static_cast<int>(seed % 5));
}

}  // namespace collage::testing
