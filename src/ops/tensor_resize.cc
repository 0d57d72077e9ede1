// Tensor ops, part 4: Resize and Upsample. Every output coordinate is mapped back to an
// input coordinate per dimension (ONNX's coordinate_transformation_mode), then sampled:
// nearest is an index map (any dtype); linear and cubic are separable weighted taps,
// computed in double like the ONNX reference implementation the test data comes from.
#include <cmath>
#include <cstring>

#include "ops/tensor_util.h"

namespace collage::ops {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize
};
// kSimple is how Upsample and Resize-10 round: truncate, or ceil when downsampling.
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

struct ResizeSpec {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Nearest nearest = Nearest::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  Shape in, out;
  std::vector<double> scales;  // per dimension, as the coordinate formulas use them
  std::vector<double> roi;     // [starts..., ends...], tf_crop_and_resize only
};

Mode parse_mode(const Node& n) {
  std::string m = n.attr_string("mode", "nearest");
  if (m == "nearest") return Mode::kNearest;
  if (m == "linear") return Mode::kLinear;
  if (m == "cubic" && n.op_type == "Resize") return Mode::kCubic;
  tensor_unsupported(n, "mode '{}'", m);
}

Coord parse_coord(const Node& n) {
  std::string c = n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (c == "half_pixel") return Coord::kHalfPixel;
  if (c == "pytorch_half_pixel") return Coord::kPytorchHalfPixel;
  if (c == "align_corners") return Coord::kAlignCorners;
  if (c == "asymmetric") return Coord::kAsymmetric;
  if (c == "tf_half_pixel_for_nn") return Coord::kTfHalfPixelForNn;
  if (c == "tf_crop_and_resize") return Coord::kTfCropAndResize;
  tensor_unsupported(n, "coordinate_transformation_mode '{}'", c);
}

Nearest parse_nearest(const Node& n) {
  std::string m = n.attr_string("nearest_mode", "round_prefer_floor");
  if (m == "round_prefer_floor") return Nearest::kRoundPreferFloor;
  if (m == "round_prefer_ceil") return Nearest::kRoundPreferCeil;
  if (m == "floor") return Nearest::kFloor;
  if (m == "ceil") return Nearest::kCeil;
  tensor_unsupported(n, "nearest_mode '{}'", m);
}

// Attributes of Resize-18 and later that change the result; rejected unless default.
void reject_newer_attributes(const Node& n) {
  if (n.attr_int("antialias", 0) != 0) tensor_unsupported(n, "antialias");
  if (n.has_attr("axes")) tensor_unsupported(n, "the axes attribute");
  if (n.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    tensor_unsupported(n, "keep_aspect_ratio_policy");
}

// Fills spec.scales and spec.out from either per-dimension scales or target sizes.
void resolve_sizes(const InferContext& ctx, ResizeSpec& s, const Tensor* scales,
                   const Tensor* sizes) {
  size_t rank = s.in.size();
  if (sizes && sizes->numel() > 0) {
    std::vector<int64_t> v = sizes->to_int_vector();
    if (v.size() != rank) ctx.fail("{} sizes for a rank-{} input", v.size(), rank);
    for (size_t k = 0; k < rank; ++k) {
      if (v[k] < 0) ctx.fail("negative size {}", v[k]);
      if (s.in[k] == 0 && v[k] != 0) ctx.fail("cannot resize an empty dimension");
      s.out.push_back(v[k]);
      s.scales.push_back(s.in[k] ? static_cast<double>(v[k]) / s.in[k] : 1.0);
    }
    return;
  }
  if (!scales || scales->numel() == 0) ctx.fail("needs scales or sizes");
  std::vector<float> v = scales->to_float_vector();
  if (v.size() != rank) ctx.fail("{} scales for a rank-{} input", v.size(), rank);
  for (size_t k = 0; k < rank; ++k) {
    if (!(v[k] > 0)) ctx.fail("scale {} is not positive", v[k]);
    s.scales.push_back(v[k]);
    s.out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(v[k]) * s.in[k])));
  }
}

ResizeSpec resize_spec(const InferContext& ctx) {
  const Node& n = ctx.node();
  ResizeSpec s;
  s.in = ctx.input_shape(0);
  s.mode = parse_mode(n);
  // Upsample and Resize-10 predate the coordinate modes: they sample asymmetrically.
  bool legacy = n.op_type == "Upsample" || ctx.opset() < 11;
  if (legacy) {
    s.coord = Coord::kAsymmetric;
    s.nearest = Nearest::kSimple;
    if (n.op_type == "Upsample" && !ctx.has_input(1)) {  // Upsample-7: scales attribute
      std::vector<float> v = n.attr_floats("scales");
      Tensor t = Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v);
      resolve_sizes(ctx, s, &t, nullptr);
    } else {
      resolve_sizes(ctx, s, &ctx.require_constant(1, "scales"), nullptr);
    }
    return s;
  }
  reject_newer_attributes(n);
  s.coord = parse_coord(n);
  s.nearest = parse_nearest(n);
  s.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
  s.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  s.extrapolation = n.attr_float("extrapolation_value", 0.0f);
  const Tensor* scales = ctx.has_input(2) ? &ctx.require_constant(2, "scales") : nullptr;
  const Tensor* sizes = ctx.has_input(3) ? &ctx.require_constant(3, "sizes") : nullptr;
  resolve_sizes(ctx, s, scales, sizes);
  if (s.coord == Coord::kTfCropAndResize) {
    if (!ctx.has_input(1)) ctx.fail("tf_crop_and_resize needs roi");
    std::vector<float> roi = ctx.require_constant(1, "roi").to_float_vector();
    if (roi.size() != 2 * s.in.size()) ctx.fail("roi has {} values", roi.size());
    s.roi.assign(roi.begin(), roi.end());
  }
  return s;
}

void infer_resize(InferContext& ctx) {
  ResizeSpec s = resize_spec(ctx);
  DType t = ctx.input_dtype(0);
  bool samples = s.mode != Mode::kNearest;
  bool extrapolates = s.coord == Coord::kTfCropAndResize;
  if (samples || extrapolates)
    tensor_require_dtype_in(ctx, 0, {DType::kFloat32, DType::kFloat64});
  else
    tensor_require_movable(ctx, 0);
  ctx.set_output(0, t, s.out);
}

// The input coordinate sampled for output index `o` of dimension k, or NaN when
// tf_crop_and_resize looks outside the input (the extrapolation value is used).
double source_coord(const ResizeSpec& s, size_t k, int64_t o) {
  double scale = s.scales[k], in = static_cast<double>(s.in[k]);
  double width = scale * in;  // the reference's (possibly fractional) output length
  switch (s.coord) {
    case Coord::kHalfPixel:
      return (o + 0.5) / scale - 0.5;
    case Coord::kPytorchHalfPixel:
      return width == 1 ? -0.5 : (o + 0.5) / scale - 0.5;
    case Coord::kAlignCorners:
      return width == 1 ? 0.0 : o * (in - 1) / (width - 1);
    case Coord::kAsymmetric:
      return o / scale;
    case Coord::kTfHalfPixelForNn:
      return (o + 0.5) / scale;
    case Coord::kTfCropAndResize: {
      double start = s.roi[k], end = s.roi[k + s.in.size()];
      double x =
          width == 1 ? (end - start) * (in - 1) / 2 : o * (end - start) * (in - 1) / (width - 1);
      x += start * (in - 1);
      return x < 0 || x > in - 1 ? NAN : x;
    }
  }
  return 0;
}

int64_t nearest_index(const ResizeSpec& s, size_t k, double x) {
  double fl = std::floor(x), ratio = x - fl;
  int64_t i = static_cast<int64_t>(fl);
  if (ratio != 0) {
    switch (s.nearest) {
      case Nearest::kRoundPreferFloor:
        i += ratio > 0.5;
        break;
      case Nearest::kRoundPreferCeil:
        i += ratio >= 0.5;
        break;
      case Nearest::kFloor:
        break;
      case Nearest::kCeil:
        i += 1;
        break;
      case Nearest::kSimple:
        i += s.scales[k] < 1;
        break;
    }
  }
  return tensor_clamp(i, 0, s.in[k] - 1);
}

RefKernel nearest_kernel(const ResizeSpec& s, DType t) {
  std::vector<int64_t> strides = shape_strides(s.in);
  std::vector<std::vector<int64_t>> maps(s.out.size());
  for (size_t k = 0; k < s.out.size(); ++k)
    for (int64_t o = 0; o < s.out[k]; ++o) {
      double x = source_coord(s, k, o);
      maps[k].push_back(std::isnan(x) ? kTensorFill : nearest_index(s, k, x) * strides[k]);
    }
  TensorGatherPlan plan(s.out, std::move(maps), dtype_size(t));
  Tensor fill(t, {});
  if (t == DType::kFloat32) *fill.data<float>() = static_cast<float>(s.extrapolation);
  if (t == DType::kFloat64) *fill.data<double>() = s.extrapolation;
  return [plan, fill](std::span<const Tensor> in, std::span<const Tensor> out) {
    plan.run(tensor_bytes(in[0]), tensor_bytes_mut(out[0]), tensor_bytes(fill));
  };
}

// The taps of one dimension: for output index o, taps [start[o], start[o+1]) of
// (offset in input elements, weight); `outside[o]` marks extrapolated indices.
struct Taps {
  std::vector<size_t> start{0};
  std::vector<int64_t> offset;
  std::vector<double> weight;
  std::vector<bool> outside;
};

std::vector<double> tap_weights(const ResizeSpec& s, double ratio) {
  if (s.mode == Mode::kLinear) return {1 - ratio, ratio};
  double a = s.cubic_a, r1 = ratio + 1, r = ratio, q = 1 - ratio, q1 = 2 - ratio;
  return {((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * q - (a + 3)) * q * q + 1, ((a * q1 - 5 * a) * q1 + 8 * a) * q1 - 4 * a};
}

Taps dimension_taps(const ResizeSpec& s, size_t k, int64_t stride) {
  Taps taps;
  int64_t in = s.in[k];
  // Linear uses [floor, floor + 1]; cubic [floor - 1, floor + 2]. Indices past the edge
  // repeat the edge (or are dropped with exclude_outside), as the reference pads.
  int64_t first = s.mode == Mode::kLinear ? 0 : -1;
  for (int64_t o = 0; o < s.out[k]; ++o) {
    double x = source_coord(s, k, o);
    taps.outside.push_back(std::isnan(x));
    if (!std::isnan(x)) {
      double fl = std::floor(x);
      std::vector<double> w = tap_weights(s, x - fl);
      std::vector<int64_t> idx;
      double total = 0;
      for (size_t j = 0; j < w.size(); ++j) {
        int64_t i = static_cast<int64_t>(fl) + first + static_cast<int64_t>(j);
        if (s.exclude_outside && (i < 0 || i >= in)) w[j] = 0;
        idx.push_back(tensor_clamp(i, 0, in - 1));
        total += w[j];
      }
      for (size_t j = 0; j < w.size(); ++j) {
        if (w[j] == 0) continue;
        taps.offset.push_back(idx[j] * stride);
        taps.weight.push_back(s.exclude_outside ? w[j] / total : w[j]);
      }
    }
    taps.start.push_back(taps.offset.size());
  }
  return taps;
}

// Sum over the taps of dimensions k.. of the input at `base` plus their offsets.
template <typename T>
double interpolate(const T* in, const std::vector<Taps>& taps, const std::vector<int64_t>& pos,
                   size_t k, int64_t base) {
  if (k == taps.size()) return static_cast<double>(in[base]);
  const Taps& t = taps[k];
  double sum = 0;
  for (size_t j = t.start[pos[k]]; j < t.start[pos[k] + 1]; ++j)
    sum += t.weight[j] * interpolate(in, taps, pos, k + 1, base + t.offset[j]);
  return sum;
}

RefKernel sampling_kernel(const ResizeSpec& s, DType t) {
  std::vector<int64_t> strides = shape_strides(s.in);
  std::vector<Taps> taps;
  for (size_t k = 0; k < s.in.size(); ++k) taps.push_back(dimension_taps(s, k, strides[k]));
  Shape out_shape = s.out;
  double extrapolation = s.extrapolation;
  return [=](std::span<const Tensor> in, std::span<const Tensor> out) {
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T>) {
        const T* src = in[0].data<T>();
        T* dst = out[0].data<T>();
        std::vector<int64_t> pos(out_shape.size(), 0);
        for (int64_t e = 0; e < out[0].numel(); ++e) {
          bool outside = false;
          for (size_t k = 0; k < pos.size(); ++k) outside = outside || taps[k].outside[pos[k]];
          dst[e] = static_cast<T>(outside ? extrapolation : interpolate(src, taps, pos, 0, 0));
          for (size_t k = pos.size(); k-- > 0;) {
            if (++pos[k] < out_shape[k]) break;
            pos[k] = 0;
          }
        }
      }
    });
  };
}

RefKernel resize_kernel(const Graph& g, const Node& n) {
  InferContext ctx(g, n);
  ResizeSpec s = resize_spec(ctx);
  DType t = tensor_input_dtype(g, n, 0);
  return s.mode == Mode::kNearest ? nearest_kernel(s, t) : sampling_kernel(s, t);
}

}  // namespace

ResizeTaps resize_taps(const Graph& g, const Node& n) {
  InferContext ctx(g, n);
  const ResizeSpec s = resize_spec(ctx);
  ResizeTaps out;
  out.extrapolation = s.extrapolation;
  for (size_t k = 0; k < s.in.size(); ++k) {
    ResizeTaps::Dim dim;
    if (s.mode == Mode::kNearest) {
      dim.start = {0};
      for (int64_t o = 0; o < s.out[k]; ++o) {
        const double x = source_coord(s, k, o);
        dim.outside.push_back(std::isnan(x));
        if (!std::isnan(x)) {
          dim.index.push_back(nearest_index(s, k, x));
          dim.weight.push_back(1);
        }
        dim.start.push_back(dim.index.size());
      }
    } else {
      Taps taps = dimension_taps(s, k, 1);
      dim.start = std::move(taps.start);
      dim.index = std::move(taps.offset);
      dim.weight = std::move(taps.weight);
      dim.outside = std::move(taps.outside);
    }
    out.dims.push_back(std::move(dim));
  }
  return out;
}

void register_tensor_resize_ops(OpRegistry& r) {
  r.add(tensor_op("Resize", OpKind::kInjective, infer_resize, resize_kernel));
  r.add(tensor_op("Upsample", OpKind::kInjective, infer_resize, resize_kernel));
  register_grid_sample_op(r);
}

}  // namespace collage::ops
