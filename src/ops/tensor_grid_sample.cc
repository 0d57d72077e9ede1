// Tensor ops, part 5: GridSample (tensor_util.h says by which rule). Computed in float, as
// PyTorch's CPU kernel that ONNX's expected outputs come from.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "ops/tensor_util.h"

namespace collage::ops {
namespace {

using Mode = GridSampleSpec::Mode;
using Padding = GridSampleSpec::Padding;

// A normalized coordinate in [-1, 1] as a pixel coordinate along an axis of `size`.
float unnormalize(float v, int64_t size, bool align_corners) {
  return align_corners ? (v + 1) / 2 * static_cast<float>(size - 1)
                       : ((v + 1) * static_cast<float>(size) - 1) / 2;
}

// Reflects `v` into [twice_low / 2, twice_high / 2] (PyTorch's reflect_coordinates).
float reflect(float v, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return 0;
  const float low = static_cast<float>(twice_low) / 2;
  const float span = static_cast<float>(twice_high - twice_low) / 2;
  v = std::fabs(v - low);
  const float extra = std::fmod(v, span);
  const int flips = static_cast<int>(std::floor(v / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

float clip(float v, int64_t size) {
  return std::fmin(static_cast<float>(size - 1), std::fmax(v, 0.0f));
}

// The padding mode applied to a pixel coordinate.
float pad_coordinate(float v, int64_t size, const GridSampleSpec& spec) {
  switch (spec.padding) {
    case Padding::kZeros:
      return v;
    case Padding::kBorder:
      return clip(v, size);
    case Padding::kReflection:
      v = spec.align_corners ? reflect(v, 0, 2 * (size - 1)) : reflect(v, -1, 2 * size - 1);
      return clip(v, size);
  }
  return v;
}

float cubic_near(float t, float a) {
  return ((a + 2) * t - (a + 3)) * t * t + 1;
}
float cubic_far(float t, float a) {
  return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
}

void cubic_weights(float t, float w[4]) {
  constexpr float kA = -0.75f;
  w[0] = cubic_far(t + 1, kA);
  w[1] = cubic_near(t, kA);
  w[2] = cubic_near(1 - t, kA);
  w[3] = cubic_far(2 - t, kA);
}

// Up to 16 taps of one output pixel: offsets into a channel plane and their weights (a tap
// outside the image under zero padding is left out).
struct Taps {
  int count = 0;
  int64_t offset[16];
  float weight[16];
  void add(int64_t ix, int64_t iy, int64_t w, int64_t h, float weight_) {
    if (ix < 0 || iy < 0 || ix >= w || iy >= h) return;
    offset[count] = iy * w + ix;
    weight[count++] = weight_;
  }
};

Taps taps_of(const GridSampleSpec& spec, float gx, float gy, int64_t w, int64_t h) {
  Taps taps;
  float x = unnormalize(gx, w, spec.align_corners), y = unnormalize(gy, h, spec.align_corners);
  if (spec.mode == Mode::kBicubic) {
    // The padding applies to each tap's coordinate.
    const float fx = std::floor(x), fy = std::floor(y);
    float wx[4], wy[4];
    cubic_weights(x - fx, wx);
    cubic_weights(y - fy, wy);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        const float tx = pad_coordinate(fx - 1 + static_cast<float>(i), w, spec);
        const float ty = pad_coordinate(fy - 1 + static_cast<float>(j), h, spec);
        taps.add(static_cast<int64_t>(tx), static_cast<int64_t>(ty), w, h, wx[i] * wy[j]);
      }
    return taps;
  }
  x = pad_coordinate(x, w, spec);
  y = pad_coordinate(y, h, spec);
  if (spec.mode == Mode::kNearest) {
    taps.add(static_cast<int64_t>(std::nearbyint(x)), static_cast<int64_t>(std::nearbyint(y)), w, h,
             1.0f);
    return taps;
  }
  const float fx = std::floor(x), fy = std::floor(y);
  const float ex = x - fx, ey = y - fy;
  const int64_t ix = static_cast<int64_t>(fx), iy = static_cast<int64_t>(fy);
  taps.add(ix, iy, w, h, (1 - ex) * (1 - ey));
  taps.add(ix + 1, iy, w, h, ex * (1 - ey));
  taps.add(ix, iy + 1, w, h, (1 - ex) * ey);
  taps.add(ix + 1, iy + 1, w, h, ex * ey);
  return taps;
}

void infer_grid_sample(InferContext& ctx) {
  const Node& n = ctx.node();
  if (n.inputs.size() != 2) ctx.fail("expects 2 inputs (X, grid)");
  grid_sample_spec(n);
  tensor_require_dtype_in(ctx, 0, {DType::kFloat32});
  tensor_require_dtype_in(ctx, 1, {DType::kFloat32});
  const Shape& x = ctx.input_shape(0);
  const Shape& grid = ctx.input_shape(1);
  if (x.size() != 4) tensor_unsupported(n, "only 4-D inputs (N, C, H, W), got rank {}", x.size());
  if (grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
    ctx.fail("grid must be (N, H_out, W_out, 2) with N = {}", x[0]);
  ctx.set_output(0, DType::kFloat32, {x[0], x[1], grid[1], grid[2]});
}

RefKernel grid_sample_kernel(const Graph& g, const Node& n) {
  const GridSampleSpec spec = grid_sample_spec(n);
  const Shape x_shape = tensor_input_shape(g, n, 0);
  const Shape out = tensor_output_shape(g, n, 0);
  return [spec, x_shape, out](std::span<const Tensor> in, std::span<const Tensor> o) {
    grid_sample(spec, in[0].data<float>(), x_shape, in[1].data<float>(), out[2], out[3],
                o[0].data<float>(), false);
  };
}

}  // namespace

GridSampleSpec grid_sample_spec(const Node& node) {
  GridSampleSpec spec;
  const std::string mode = node.attr_string("mode", "bilinear");
  const std::string padding = node.attr_string("padding_mode", "zeros");
  // Opset 20 renamed the interpolating modes "linear" and "cubic" (for 2-D grids the same).
  if (mode == "bilinear" || mode == "linear")
    spec.mode = Mode::kBilinear;
  else if (mode == "nearest")
    spec.mode = Mode::kNearest;
  else if (mode == "bicubic" || mode == "cubic")
    spec.mode = Mode::kBicubic;
  else
    throw Error(ErrorKind::kInvalidModel,
                fmt::format("node '{}' (GridSample): unknown mode '{}'", node.name, mode));
  if (padding == "zeros")
    spec.padding = Padding::kZeros;
  else if (padding == "border")
    spec.padding = Padding::kBorder;
  else if (padding == "reflection")
    spec.padding = Padding::kReflection;
  else
    throw Error(
        ErrorKind::kInvalidModel,
        fmt::format("node '{}' (GridSample): unknown padding_mode '{}'", node.name, padding));
  spec.align_corners = node.attr_int("align_corners", 0) != 0;
  return spec;
}

void grid_sample(const GridSampleSpec& spec, const float* x, const Shape& x_shape,
                 const float* grid, int64_t out_h, int64_t out_w, float* y, bool parallel,
                 bool channels_last) {
  const int64_t n = x_shape[0], c = x_shape[1], h = x_shape[2], w = x_shape[3];
  const int64_t plane = h * w, out_plane = out_h * out_w;
  const int64_t rows = n * out_h;
  const int team = parallel && !omp_in_parallel() ? omp_get_max_threads() : 1;
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / out_h, oy = r % out_h;
    const float* image = x + b * c * plane;
    float* out = y + b * c * out_plane + oy * out_w;
    for (int64_t ox = 0; ox < out_w; ++ox) {
      const float* g = grid + ((b * out_h + oy) * out_w + ox) * 2;
      const Taps taps = taps_of(spec, g[0], g[1], w, h);
      if (channels_last) {
        // Pixel-major: the output pixel's channels, a weighted sum of the taps' channel
        // vectors.
        float* o = y + ((b * out_h + oy) * out_w + ox) * c;
        std::fill_n(o, c, 0.0f);
        for (int t = 0; t < taps.count; ++t) {
          const float* v = image + taps.offset[t] * c;
          const float weight = taps.weight[t];
          for (int64_t k = 0; k < c; ++k) o[k] += v[k] * weight;
        }
        continue;
      }
      for (int64_t k = 0; k < c; ++k) {
        const float* channel = image + k * plane;
        float sum = 0;
        for (int t = 0; t < taps.count; ++t) sum += channel[taps.offset[t]] * taps.weight[t];
        out[k * out_plane + ox] = sum;
      }
    }
  }
}

void register_grid_sample_op(OpRegistry& r) {
  r.add(tensor_op("GridSample", OpKind::kInjective, infer_grid_sample, grid_sample_kernel));
}

}  // namespace collage::ops
