// Winograd convolution in channels-last layout (winograd_conv.h says why and when): a tile of
// FH x FW outputs from 1-D transforms F(m, r) per axis, m = 4 or 2 outputs, r = 3 or 7 taps
// (Unit for a 1-tap axis: 1x7, 7x1, 1x3, 3x1 convs).
//
// For each output tile, the input tile d (zero outside the input) becomes V = B_h^T d B_w,
// the weights g become U = G_h g G_w^T once at compile time, and the tile's output is
// A_h^T (sum over input channels of U * V) A_w: per point (i, j) of the transformed tile, a
// matrix product [tiles x C] x [C x K], all of them one batched oneDNN matmul. F(4, 3) and
// F(2, 3) are Lavin and Gray's (arXiv:1509.09308), F(4, 7) and F(2, 7) from
// scripts/winograd_transforms.py. Both transforms run over blocks of 16 channels, which are
// contiguous in channels-last: each operation below is one vector instruction per block.
#include "backends/onednn/winograd_conv.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "backends/onednn/kernels.h"
#include "collage/error.h"

namespace collage::onednn {

namespace {

constexpr int64_t kLanes = 16;  // channels per block

// Where a channels-last tensor's element (n, c, y, x) lies: offset + n*sn + y*sh + x*sw + c.
// Any strides but a unit channel stride, so that a slice of a concatenation done in place
// (channels at an offset of a wider buffer) is read or written where it is.
struct ChannelsLast {
  int64_t sn = 0, sh = 0, sw = 0, offset = 0;
};

std::optional<ChannelsLast> channels_last(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  // One channel: any channel stride (oneDNN takes row-major as equal to channels-last then).
  if (d.ndims != 4 || d.format_kind != dnnl_blocked || d.data_type != dnnl_f32 ||
      d.format_desc.blocking.inner_nblks != 0 ||
      (d.format_desc.blocking.strides[1] != 1 && d.dims[1] != 1))
    return std::nullopt;
  const auto& s = d.format_desc.blocking.strides;
  return ChannelsLast{s[0], s[2], s[3], d.offset0};
}

dnnl::memory::desc dense_channels_last(const Shape& shape) {
  return dnnl::memory::desc(to_dims(shape), dt::f32, tag::nhwc);
}

// A dilated conv (dh or dw over 1) is dh x dw undilated ones, one per phase: the outputs whose
// row is py modulo dh and column px modulo dw read only inputs of that phase, dh rows and dw
// columns apart. Each phase is tiled on its own; a tile's outputs, and its input's rows and
// columns, are dh and dw apart.
struct Geometry {
  int64_t n, c, k, h, w, oh, ow, pad_t, pad_l;
  int64_t dh = 1, dw = 1;  // dilations
  int64_t th = 0, tw = 0;  // tiles per column and row of a phase: set for the tile
  int64_t tiles() const { return n * dh * dw * th * tw; }
};

// The tail applied in the output transform, in order: activations, and a residual tensor of
// the output's shape added (read channels-last at the output's pixels).
struct TailOp {
  enum class Kind { kRelu, kClip, kResidual } kind;
  float alpha = 0, beta = 0;  // kRelu: the slope below 0; kClip: the bounds
};

std::optional<TailOp> tail_op(const PostOp& op, const Shape& out) {
  if (op.kind == PostOp::Kind::kBinary) {
    if (op.alg == dnnl::algorithm::binary_add && op.operand != kNoValue && op.operand_shape == out)
      return TailOp{TailOp::Kind::kResidual};
    return std::nullopt;
  }
  if (op.alg == dnnl::algorithm::eltwise_relu) return TailOp{TailOp::Kind::kRelu, op.alpha, 0};
  if (op.alg == dnnl::algorithm::eltwise_clip || op.alg == dnnl::algorithm::eltwise_clip_v2)
    return TailOp{TailOp::Kind::kClip, op.alpha, op.beta};
  return std::nullopt;
}

// What one run reads and writes: the input, the residual (when the tail adds one) and the
// output, each channels-last.
struct Operands {
  const float* x;
  const float* residual;
  float* y;
};

// 16 channels as one value (GCC's vector extension: one zmm register with AVX-512, two or four
// narrower ones elsewhere), so that a tile's columns stay in registers through a transform.
// Over arrays of floats under `omp simd`, GCC kept every intermediate on the stack and left
// the Relu scalar: perf put 52 % of a 64-channel 56x56 conv in the two transforms (36 % in the
// output one), the matmul 30 %.
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef float UnalignedVec
    __attribute__((vector_size(kLanes * sizeof(float)), aligned(sizeof(float)), may_alias));

// src[0..count), zeros after.
inline Vec load(const float* src, int64_t count) {
  if (count == kLanes) return *reinterpret_cast<const UnalignedVec*>(src);
  Vec v = {};
  for (int64_t c = 0; c < count; ++c) v[c] = src[c];
  return v;
}

inline void store(float* dst, Vec v, int64_t count) {
  if (count == kLanes) {
    *reinterpret_cast<UnalignedVec*>(dst) = v;
    return;
  }
  for (int64_t c = 0; c < count; ++c) dst[c] = v[c];
}

// The 1-D transforms F(m, r) (m outputs of an r-tap filter from m + r - 1 points): their
// sides, B^T (input_1d) and A^T (output_1d) for one column or row of a tile (values in,
// written where the caller says; T is Vec: every operation one instruction over 16 channels),
// and G for the weights. F(4, 3) and F(2, 3) are Lavin and Gray's; F(4, 7)
// and F(2, 7) come from scripts/winograd_transforms.py (Toom-Cook, exact rationals, its point
// sets chosen for float32 rounding), which prints these lines and their float32 error. A 2-D
// tile is a pair (rows, columns); Unit is the identity of a 1-tap axis (1x7 and 7x1 convs).
struct Unit {
  static constexpr int kTile = 1, kOut = 1, kTaps = 1;
  template <class T>
  static void input_1d(T d0, T& o0) {
    o0 = d0;
  }
  template <class T>
  static void output_1d(T m0, T& o0) {
    o0 = m0;
  }
  static constexpr double G[kTile][kTaps] = {{1}};
};

struct F4x3 {
  static constexpr int kTile = 6, kOut = 4, kTaps = 3;
  template <class T>
  static void input_1d(T d0, T d1, T d2, T d3, T d4, T d5, T& o0, T& o1, T& o2, T& o3, T& o4,
                       T& o5) {
    o0 = 4 * d0 - 5 * d2 + d4;
    o1 = -4 * d1 - 4 * d2 + d3 + d4;
    o2 = 4 * d1 - 4 * d2 - d3 + d4;
    o3 = -2 * d1 - d2 + 2 * d3 + d4;
    o4 = 2 * d1 - d2 - 2 * d3 + d4;
    o5 = 4 * d1 - 5 * d3 + d5;
  }
  template <class T>
  static void output_1d(T m0, T m1, T m2, T m3, T m4, T m5, T& o0, T& o1, T& o2, T& o3) {
    o0 = m0 + m1 + m2 + m3 + m4;
    o1 = m1 - m2 + 2 * (m3 - m4);
    o2 = m1 + m2 + 4 * (m3 + m4);
    o3 = m1 - m2 + 8 * (m3 - m4) + m5;
  }
  static constexpr double G[kTile][kTaps] = {{1.0 / 4, 0, 0},
                                             {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                             {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                             {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                             {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                             {0, 0, 1}};
};

struct F2x3 {
  static constexpr int kTile = 4, kOut = 2, kTaps = 3;
  template <class T>
  static void input_1d(T d0, T d1, T d2, T d3, T& o0, T& o1, T& o2, T& o3) {
    o0 = d0 - d2;
    o1 = d1 + d2;
    o2 = d2 - d1;
    o3 = d1 - d3;
  }
  template <class T>
  static void output_1d(T m0, T m1, T m2, T m3, T& o0, T& o1) {
    o0 = m0 + m1 + m2;
    o1 = m1 - m2 - m3;
  }
  static constexpr double G[kTile][kTaps] = {
      {1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
};

// Points 0, +-1, +-2, +-1/2, +-3/2.
struct F4x7 {
  static constexpr int kTile = 10, kOut = 4, kTaps = 7;
  template <class T>
  static void input_1d(T d0, T d1, T d2, T d3, T d4, T d5, T d6, T d7, T d8, T d9, T& o0, T& o1,
                       T& o2, T& o3, T& o4, T& o5, T& o6, T& o7, T& o8, T& o9) {
    o0 = 2.25f * d0 - 12.8125f * d2 + 17.0625f * d4 - 7.5f * d6 + d8;
    o1 = -2.25f * d1 - 2.25f * d2 + 10.5625f * d3 + 10.5625f * d4 - 6.5f * d5 - 6.5f * d6 + d7 + d8;
    o2 = 2.25f * d1 - 2.25f * d2 - 10.5625f * d3 + 10.5625f * d4 + 6.5f * d5 - 6.5f * d6 - d7 + d8;
    o3 =
        -1.125f * d1 - 0.5625f * d2 + 6.125f * d3 + 3.0625f * d4 - 7 * d5 - 3.5f * d6 + 2 * d7 + d8;
    o4 = 1.125f * d1 - 0.5625f * d2 - 6.125f * d3 + 3.0625f * d4 + 7 * d5 - 3.5f * d6 - 2 * d7 + d8;
    o5 =
        -4.5f * d1 - 9 * d2 + 7.625f * d3 + 15.25f * d4 - 3.625f * d5 - 7.25f * d6 + 0.5f * d7 + d8;
    o6 = 4.5f * d1 - 9 * d2 - 7.625f * d3 + 15.25f * d4 + 3.625f * d5 - 7.25f * d6 - 0.5f * d7 + d8;
    o7 = -1.5f * d1 - d2 + 7.875f * d3 + 5.25f * d4 - 7.875f * d5 - 5.25f * d6 + 1.5f * d7 + d8;
    o8 = 1.5f * d1 - d2 - 7.875f * d3 + 5.25f * d4 + 7.875f * d5 - 5.25f * d6 - 1.5f * d7 + d8;
    o9 = 2.25f * d1 - 12.8125f * d3 + 17.0625f * d5 - 7.5f * d7 + d9;
  }
  template <class T>
  static void output_1d(T m0, T m1, T m2, T m3, T m4, T m5, T m6, T m7, T m8, T m9, T& o0, T& o1,
                        T& o2, T& o3) {
    o0 = m0 + m1 + m2 + m3 + m4 + m5 + m6 + m7 + m8;
    o1 = m1 - m2 + 2 * m3 - 2 * m4 + 0.5f * m5 - 0.5f * m6 + 1.5f * m7 - 1.5f * m8;
    o2 = m1 + m2 + 4 * m3 + 4 * m4 + 0.25f * m5 + 0.25f * m6 + 2.25f * m7 + 2.25f * m8;
    o3 = m1 - m2 + 8 * m3 - 8 * m4 + 0.125f * m5 - 0.125f * m6 + 3.375f * m7 - 3.375f * m8 + m9;
  }
  static constexpr double G[kTile][kTaps] = {
      {4. / 9, 0, 0, 0, 0, 0, 0},
      {8. / 45, 8. / 45, 8. / 45, 8. / 45, 8. / 45, 8. / 45, 8. / 45},
      {8. / 45, -8. / 45, 8. / 45, -8. / 45, 8. / 45, -8. / 45, 8. / 45},
      {2. / 315, 4. / 315, 8. / 315, 16. / 315, 32. / 315, 64. / 315, 128. / 315},
      {2. / 315, -4. / 315, 8. / 315, -16. / 315, 32. / 315, -64. / 315, 128. / 315},
      {-16. / 45, -8. / 45, -4. / 45, -2. / 45, -1. / 45, -1. / 90, -1. / 180},
      {-16. / 45, 8. / 45, -4. / 45, 2. / 45, -1. / 45, 1. / 90, -1. / 180},
      {-16. / 315, -8. / 105, -4. / 35, -6. / 35, -9. / 35, -27. / 70, -81. / 140},
      {-16. / 315, 8. / 105, -4. / 35, 6. / 35, -9. / 35, 27. / 70, -81. / 140},
      {0, 0, 0, 0, 0, 0, 1}};
};

// Points 0, +-1, +-2, +-1/2.
struct F2x7 {
  static constexpr int kTile = 8, kOut = 2, kTaps = 7;
  template <class T>
  static void input_1d(T d0, T d1, T d2, T d3, T d4, T d5, T d6, T d7, T& o0, T& o1, T& o2, T& o3,
                       T& o4, T& o5, T& o6, T& o7) {
    o0 = -d0 + 5.25f * d2 - 5.25f * d4 + d6;
    o1 = d1 + d2 - 4.25f * d3 - 4.25f * d4 + d5 + d6;
    o2 = -d1 + d2 + 4.25f * d3 - 4.25f * d4 - d5 + d6;
    o3 = 0.5f * d1 + 0.25f * d2 - 2.5f * d3 - 1.25f * d4 + 2 * d5 + d6;
    o4 = -0.5f * d1 + 0.25f * d2 + 2.5f * d3 - 1.25f * d4 - 2 * d5 + d6;
    o5 = 2 * d1 + 4 * d2 - 2.5f * d3 - 5 * d4 + 0.5f * d5 + d6;
    o6 = -2 * d1 + 4 * d2 + 2.5f * d3 - 5 * d4 - 0.5f * d5 + d6;
    o7 = -d1 + 5.25f * d3 - 5.25f * d5 + d7;
  }
  template <class T>
  static void output_1d(T m0, T m1, T m2, T m3, T m4, T m5, T m6, T m7, T& o0, T& o1) {
    o0 = m0 + m1 + m2 + m3 + m4 + m5 + m6;
    o1 = m1 - m2 + 2 * m3 - 2 * m4 + 0.5f * m5 - 0.5f * m6 + m7;
  }
  static constexpr double G[kTile][kTaps] = {
      {-1, 0, 0, 0, 0, 0, 0},
      {-2. / 9, -2. / 9, -2. / 9, -2. / 9, -2. / 9, -2. / 9, -2. / 9},
      {-2. / 9, 2. / 9, -2. / 9, 2. / 9, -2. / 9, 2. / 9, -2. / 9},
      {1. / 90, 1. / 45, 2. / 45, 4. / 45, 8. / 45, 16. / 45, 32. / 45},
      {1. / 90, -1. / 45, 2. / 45, -4. / 45, 8. / 45, -16. / 45, 32. / 45},
      {32. / 45, 16. / 45, 8. / 45, 4. / 45, 2. / 45, 1. / 45, 1. / 90},
      {32. / 45, -16. / 45, 8. / 45, -4. / 45, 2. / 45, -1. / 45, 1. / 90},
      {0, 0, 0, 0, 0, 0, 1}};
};

// The transforms of one tile and 16 channels, columns first, then rows, unrolled through
// index sequences so that each point goes from its load straight into the column transform
// and from the row transform straight to its store (no tile array in between; over arrays
// GCC kept the tile on the stack); I/J index a tile's input rows/columns, O/P its output ones.

// u = B_h^T d B_w: d's point (i, j) is at(i, j); put(i, j, u's point (i, j)).
template <class FH, class FW, class At, class Put, size_t... I, size_t... J>
inline void input_tile(const At& at, const Put& put, std::index_sequence<I...>,
                       std::index_sequence<J...>) {
  Vec t[FH::kTile][FW::kTile];
  auto column = [&]<size_t Col>(std::integral_constant<size_t, Col>) {
    FH::input_1d(at(I, Col)..., t[I][Col]...);
  };
  (column(std::integral_constant<size_t, J>{}), ...);
  auto row = [&]<size_t Row>(std::integral_constant<size_t, Row>) {
    Vec u[FW::kTile];
    FW::input_1d(t[Row][J]..., u[J]...);
    (put(Row, J, u[J]), ...);
  };
  (row(std::integral_constant<size_t, I>{}), ...);
}

// r = A_h^T p A_w: p's point (i, j) is at(i, j).
template <class FH, class FW, class At, size_t... I, size_t... J, size_t... O, size_t... P>
inline void output_tile(const At& at, Vec (&r)[FH::kOut][FW::kOut], std::index_sequence<I...>,
                        std::index_sequence<J...>, std::index_sequence<O...>,
                        std::index_sequence<P...>) {
  Vec s[FH::kOut][FW::kTile];
  auto column = [&]<size_t Col>(std::integral_constant<size_t, Col>) {
    FH::output_1d(at(I, Col)..., s[O][Col]...);
  };
  (column(std::integral_constant<size_t, J>{}), ...);
  for (int i = 0; i < FH::kOut; ++i) FW::output_1d(s[i][J]..., r[i][P]...);
}

// Where tile `t`'s first output lies: image n, row y, column x (its others dh and dw apart).
struct TilePlace {
  int64_t n, y, x;
};
template <class FH, class FW>
TilePlace place(const Geometry& g, int64_t t) {
  const int64_t per_phase = g.th * g.tw, per_image = g.dh * g.dw * per_phase;
  const int64_t phase = t % per_image / per_phase, in_phase = t % per_phase;
  return {t / per_image, phase / g.dw + g.dh * (in_phase / g.tw * FH::kOut),
          phase % g.dw + g.dw * (in_phase % g.tw * FW::kOut)};
}

// v[(i*tw + j)][b][c] = (B_h^T d B_w)[i][j] for the input d of tile `first` + b, b < `count`
// (`rows` rows per plane: the ones past the last tile are zeros).
template <class FH, class FW>
void input_block(const Geometry& g, const ChannelsLast& xs, const float* x, int64_t first,
                 int64_t count, int64_t rows, float* v) {
  constexpr int kH = FH::kTile, kW = FW::kTile;
  for (int64_t b = 0; b < rows; ++b) {
    if (b >= count) {
      for (int p = 0; p < kH * kW; ++p)
        std::fill(v + (p * rows + b) * g.c, v + (p * rows + b + 1) * g.c, 0.0f);
      continue;
    }
    const TilePlace at = place<FH, FW>(g, first + b);
    const int64_t y0 = at.y - g.pad_t, x0 = at.x - g.pad_l;
    const bool inside =
        y0 >= 0 && x0 >= 0 && y0 + g.dh * (kH - 1) < g.h && x0 + g.dw * (kW - 1) < g.w;
    // Offsets, not pointers: an edge tile's corner lies outside the input.
    const int64_t corner = xs.offset + at.n * xs.sn + y0 * xs.sh + x0 * xs.sw;
    const int64_t row = g.dh * xs.sh, column = g.dw * xs.sw;  // between a tile's inputs
    for (int64_t c0 = 0; c0 < g.c; c0 += kLanes) {
      const int64_t lanes = std::min(kLanes, g.c - c0);
      const int64_t base = corner + c0;
      float* dst = v + b * g.c + c0;
      const int64_t plane = rows * g.c;
      // A tile wholly inside the image with a full block of channels: no bounds checked.
      if (inside && lanes == kLanes)
        input_tile<FH, FW>(
            [&](int64_t i, int64_t j) { return load(x + (base + i * row + j * column), kLanes); },
            [&](int64_t i, int64_t j, Vec u) { store(dst + (i * kW + j) * plane, u, kLanes); },
            std::make_index_sequence<kH>(), std::make_index_sequence<kW>());
      else
        input_tile<FH, FW>(
            [&](int64_t i, int64_t j) {
              const int64_t y = y0 + g.dh * i, x_at = x0 + g.dw * j;
              return y >= 0 && y < g.h && x_at >= 0 && x_at < g.w
                         ? load(x + (base + i * row + j * column), lanes)
                         : Vec{};
            },
            [&](int64_t i, int64_t j, Vec u) { store(dst + (i * kW + j) * plane, u, lanes); },
            std::make_index_sequence<kH>(), std::make_index_sequence<kW>());
    }
  }
}

// Output channels [k0, k0 + width) of tiles `first` .. `first` + count - 1 from their products
// m[(i*tw + j)][b][k - k0] (`rows` rows per plane): y = A_h^T M A_w + bias, then the tail, for
// the outputs inside the image (`rs`: where the residual lies).
template <class FH, class FW>
void output_block(const Geometry& g, const std::vector<float>& bias,
                  const std::vector<TailOp>& tail, const float* m, int64_t first, int64_t count,
                  int64_t rows, int64_t k0, int64_t width, const ChannelsLast& ys,
                  const ChannelsLast& rs, const Operands& io) {
  constexpr int kH = FH::kTile, kW = FW::kTile;
  const Vec zero = {};
  for (int64_t b = 0; b < count; ++b) {
    const TilePlace at = place<FH, FW>(g, first + b);
    for (int64_t kk = 0; kk < width; kk += kLanes) {
      const int64_t lanes = std::min(kLanes, width - kk);
      const Vec bias_k = load(bias.data() + k0 + kk, lanes);
      const float* src = m + b * width + kk;
      const int64_t plane = rows * width;
      Vec r[FH::kOut][FW::kOut];
      // A full block of channels: its loads with a constant count (unmasked).
      if (lanes == kLanes)
        output_tile<FH, FW>(
            [&](int64_t i, int64_t j) { return load(src + (i * kW + j) * plane, kLanes); }, r,
            std::make_index_sequence<kH>(), std::make_index_sequence<kW>(),
            std::make_index_sequence<FH::kOut>(), std::make_index_sequence<FW::kOut>());
      else
        output_tile<FH, FW>(
            [&](int64_t i, int64_t j) { return load(src + (i * kW + j) * plane, lanes); }, r,
            std::make_index_sequence<kH>(), std::make_index_sequence<kW>(),
            std::make_index_sequence<FH::kOut>(), std::make_index_sequence<FW::kOut>());
      for (int i = 0; i < FH::kOut && at.y + g.dh * i < g.oh; ++i)
        for (int j = 0; j < FW::kOut && at.x + g.dw * j < g.ow; ++j) {
          const int64_t y = at.y + g.dh * i, x = at.x + g.dw * j;
          Vec o = r[i][j] + bias_k;
          for (const TailOp& t : tail) {
            if (t.kind == TailOp::Kind::kRelu) {
              o = o > zero ? o : o * t.alpha;
            } else if (t.kind == TailOp::Kind::kClip) {
              const Vec lo = zero + t.alpha, hi = zero + t.beta;
              o = o < lo ? lo : o;
              o = o > hi ? hi : o;
            } else {
              o += load(io.residual + rs.offset + at.n * rs.sn + y * rs.sh + x * rs.sw + k0 + kk,
                        lanes);
            }
          }
          store(io.y + ys.offset + at.n * ys.sn + y * ys.sh + x * ys.sw + k0 + kk, o, lanes);
        }
    }
  }
}

// U[(i*tw + j)][c][k] = (G_h g[k][c] G_w^T)[i][j], in double: the one-time transform of the
// constant weights (K, C, FH's taps, FW's taps).
template <class FH, class FW>
std::vector<float> transformed_weights(const Tensor& w, int64_t k_count, int64_t c_count) {
  constexpr int kH = FH::kTile, kW = FW::kTile, kRh = FH::kTaps, kRw = FW::kTaps;
  const float* data = w.data<float>();
  std::vector<float> u(kH * kW * c_count * k_count);
  for (int64_t k = 0; k < k_count; ++k)
    for (int64_t c = 0; c < c_count; ++c) {
      const float* g = data + (k * c_count + c) * kRh * kRw;
      double gt[kH][kRw];  // G_h g
      for (int i = 0; i < kH; ++i)
        for (int j = 0; j < kRw; ++j) {
          gt[i][j] = 0;
          for (int t = 0; t < kRh; ++t) gt[i][j] += FH::G[i][t] * g[t * kRw + j];
        }
      for (int i = 0; i < kH; ++i)
        for (int j = 0; j < kW; ++j) {
          double sum = 0;
          for (int t = 0; t < kRw; ++t) sum += gt[i][t] * FW::G[j][t];
          u[((i * kW + j) * c_count + c) * k_count + k] = static_cast<float>(sum);
        }
    }
  return u;
}

// The whole convolution as one step: work items of (a block of tiles, a block of output
// channels), each transforming its tiles' input into a buffer of its thread, multiplying it
// by the weights' block with a matmul primitive run on that thread, and transforming the
// products into the output. The transformed tiles and products stay in the thread's cache
// instead of making round trips through memory between passes (three steps over buffers of
// 2.25x the activations measured 0.13 + 0.18 ms for the transforms of a 64-channel 56x56
// conv, the direct conv 0.6).
template <class FH, class FW>
class Winograd {
 public:
  Winograd(const Geometry& geo, const Tensor& weights, std::vector<float> bias,
           std::vector<TailOp> tail, ChannelsLast in, ChannelsLast out, ChannelsLast residual)
      : geo_(geo),
        bias_(std::move(bias)),
        tail_(std::move(tail)),
        in_(in),
        out_(out),
        residual_(residual) {
    // Tile blocks of 8-64 rows, ~1.2 MB of transformed input at most (a 64-channel 56x56 conv
    // in 8 blocks of 25 tiles ran a twelve-block chain in 6.5-6.9 ms, in 7 of 28 7.0-7.3),
    // their count a multiple of the threads (no thread left with one more), splitting the
    // tiles evenly (49 tiles: 2 of 25, not 32 and 17 padded to 32), and at least one block
    // per thread where each gets kMinRows tiles; as many channel blocks (multiples of 16) as
    // keep every thread busy when tiles are fewer: each transforms its tiles' input again
    // (ResNet-50's 128-channel 28x28 conv, timed in the model: 0.35-0.38 ms as 2 channel
    // blocks of 49 tiles, 0.31-0.34 as 2 tile blocks of 25).
    const int threads = std::max(1, omp_get_max_threads());
    int64_t most_rows = std::clamp<int64_t>(8192 * 36 / kPoints / geo.c, 8, 64);
    // Transformed weights past kLargeWeightBytes are read from memory again by every tile
    // block, so their blocks grow to a thread's share of the tiles (up to kMostTileBytes of
    // transformed input a thread): FCN-ResNet-50's 2048 -> 512 3x3 conv at 40x40, 151 MB of
    // F(4x4) weights, 91 -> 28 ms (brgconv 57-60); a 512 -> 512 dilation-4 one 18.5 -> 9.0
    // (brgconv 12.7). Blocks already larger stay so (splitting them would make each thread
    // read all the weights, not its channels' share: 512 -> 512 at 14x14 0.9 -> 3.3 ms).
    if (kPoints * geo.c * geo.k * int64_t{sizeof(float)} > kLargeWeightBytes) {
      const int64_t share = (geo.tiles() + threads - 1) / threads;
      const int64_t fits = kMostTileBytes / (kPoints * geo.c * int64_t{sizeof(float)});
      most_rows = std::max(most_rows, std::clamp<int64_t>(std::min(share, fits), 8, 256));
    }
    tile_blocks_ = (geo.tiles() + most_rows - 1) / most_rows;
    if (tile_blocks_ < threads && geo.tiles() >= threads * kMinRows) tile_blocks_ = threads;
    if (tile_blocks_ > threads) tile_blocks_ = (tile_blocks_ + threads - 1) / threads * threads;
    rows_ = (geo.tiles() + tile_blocks_ - 1) / tile_blocks_;
    const int64_t channel_blocks = std::clamp<int64_t>((threads + tile_blocks_ - 1) / tile_blocks_,
                                                       1, std::max<int64_t>(1, geo.k / 32));
    width_ = (geo.k + channel_blocks - 1) / channel_blocks;
    width_ = std::min(geo.k, (width_ + kLanes - 1) / kLanes * kLanes);
    channel_blocks_ = (geo.k + width_ - 1) / width_;

    const std::vector<float> u = transformed_weights<FH, FW>(weights, geo.k, geo.c);
    dnnl::stream stream(cpu_engine());
    size_t scratch_bytes = 0;
    for (int64_t kb = 0; kb < channel_blocks_; ++kb) {
      const int64_t k0 = kb * width_, width = std::min(width_, geo.k - k0);
      if (!matmuls_.count(width)) {
        const dnnl::memory::desc v_md({kPoints, rows_, geo.c}, dt::f32, tag::abc),
            w_md({kPoints, geo.c, width}, dt::f32, tag::any),
            m_md({kPoints, rows_, width}, dt::f32, tag::abc);
        auto pd = create_pd("Winograd matmul", [&] {
          return dnnl::matmul::primitive_desc(dnnl::matmul::desc(v_md, w_md, m_md), base_attr(),
                                              cpu_engine());
        });
        scratch_bytes = std::max(scratch_bytes, pd.scratchpad_desc().get_size());
        matmuls_.emplace(width, Matmul{dnnl::matmul(pd), pd.weights_desc()});
      }
      // This block's columns of U, packed as its matmul prefers.
      const dnnl::memory::desc block_view({kPoints, geo.c, width}, dt::f32,
                                          {geo.c * geo.k, geo.k, 1});
      dnnl::memory from(block_view, cpu_engine(), const_cast<float*>(u.data()) + k0);
      dnnl::memory packed(matmuls_.at(width).weights_md, cpu_engine());
      dnnl::reorder(from, packed).execute(stream, from, packed);
      packed_.push_back(packed);
    }
    stream.wait();

    // Per thread: its transformed tiles, products, scratchpad and stream, touched now.
    const int64_t v_floats = kPoints * rows_ * geo.c, m_floats = kPoints * rows_ * width_;
    for (int t = 0; t < threads; ++t) {
      Thread th{
          dnnl::memory({{kPoints, rows_, geo.c}, dt::f32, tag::abc}, cpu_engine()),
          dnnl::memory({{kPoints, rows_, width_}, dt::f32, tag::abc}, cpu_engine()),
          dnnl::memory({{static_cast<int64_t>(std::max<size_t>(scratch_bytes, 1))}, dt::u8, tag::a},
                       cpu_engine()),
          {},
          dnnl::stream(cpu_engine())};
      std::fill_n(static_cast<float*>(th.v.get_data_handle()), v_floats, 0.0f);
      std::fill_n(static_cast<float*>(th.m.get_data_handle()), m_floats, 0.0f);
      std::fill_n(static_cast<char*>(th.scratch.get_data_handle()),
                  std::max<size_t>(scratch_bytes, 1), 0);
      for (int64_t kb = 0; kb < channel_blocks_; ++kb)
        th.products.emplace_back(
            dnnl::memory::desc({kPoints, rows_, std::min(width_, geo.k - kb * width_)}, dt::f32,
                               tag::abc),
            cpu_engine(), th.m.get_data_handle());
      threads_.push_back(std::move(th));
    }
  }

  // Returns oneDNN's status of the first matmul that failed (no exception leaves an OpenMP
  // region: it would end the process).
  dnnl_status_t run(const Operands& io) {
    const int64_t items = tile_blocks_ * channel_blocks_;
    if (omp_in_parallel()) {  // a lane of a concurrent stage: this thread alone
      for (int64_t i = 0; i < items; ++i)
        if (dnnl_status_t status = work(i, threads_[0], io); status != dnnl_success) return status;
      return dnnl_success;
    }
    const int team = std::min<int>(omp_get_max_threads(), static_cast<int>(threads_.size()));
    std::atomic<dnnl_status_t> failed{dnnl_success};
    // Static: each thread takes a contiguous run of tile blocks, the rows of the image the
    // direct convs around it give the same thread (oneDNN splits by rows too), so it reads an
    // input and writes an output its own cache holds. Dynamic scheduling, which handed tile
    // blocks out in any order, measured 0.41-0.44 ms per ResNet-50 64-channel 56x56 conv in
    // the model against 0.33 so.
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t i = 0; i < items; ++i)
      if (dnnl_status_t status = work(i, threads_[omp_get_thread_num()], io);
          status != dnnl_success)
        failed.store(status);
    return failed.load();
  }

 private:
  static constexpr int kPoints = FH::kTile * FW::kTile;  // products per tile
  static constexpr int64_t kMinRows = 16;  // tiles per block before channels are split
  static constexpr int64_t kLargeWeightBytes = int64_t{8} << 20;
  static constexpr int64_t kMostTileBytes = int64_t{16} << 20;
  struct Matmul {
    dnnl::matmul primitive;
    dnnl::memory::desc weights_md;
  };
  struct Thread {
    dnnl::memory v, m, scratch;
    // Per channel block: `m` seen as that block's products, `width` columns per row (a
    // narrower last block uses the front of the buffer).
    std::vector<dnnl::memory> products;
    dnnl::stream stream;
  };

  dnnl_status_t work(int64_t item, Thread& th, const Operands& io) {
    const int64_t tb = item / channel_blocks_, kb = item % channel_blocks_;
    const int64_t first = tb * rows_, count = std::min(rows_, geo_.tiles() - first);
    const int64_t k0 = kb * width_, width = std::min(width_, geo_.k - k0);
    float* v = static_cast<float*>(th.v.get_data_handle());
    input_block<FH, FW>(geo_, in_, io.x, first, count, rows_, v);
    const Matmul& mm = matmuls_.at(width);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, th.v.get()},
                                    {DNNL_ARG_WEIGHTS, packed_[kb].get()},
                                    {DNNL_ARG_DST, th.products[kb].get()},
                                    {DNNL_ARG_SCRATCHPAD, th.scratch.get()}};
    if (dnnl_status_t status = dnnl_primitive_execute(mm.primitive.get(), th.stream.get(), 4, args);
        status != dnnl_success)
      return status;
    output_block<FH, FW>(geo_, bias_, tail_, static_cast<const float*>(th.m.get_data_handle()),
                         first, count, rows_, k0, width, out_, residual_, io);
    return dnnl_success;
  }

  Geometry geo_;
  std::vector<float> bias_;
  std::vector<TailOp> tail_;
  ChannelsLast in_, out_, residual_;
  int64_t rows_ = 0, tile_blocks_ = 0, width_ = 0, channel_blocks_ = 0;
  std::map<int64_t, Matmul> matmuls_;  // by block width
  std::vector<dnnl::memory> packed_;   // per channel block
  std::vector<Thread> threads_;
};

}  // namespace

bool winograd_conv_takes(const std::vector<PostOp>& ops, const Shape& out) {
  int residuals = 0;
  for (const PostOp& op : ops) {
    const std::optional<TailOp> t = tail_op(op, out);
    if (!t) return false;
    residuals += t->kind == TailOp::Kind::kResidual;
  }
  return residuals <= 1;
}

bool winograd_3x3_shape(const Graph& g, const Node& n) {
  if (!winograd_conv_shape(g, n)) return false;
  const Shape& ws = g.value(n.input(1)).shape;
  return ws[2] == 3 && ws[3] == 3;
}

bool winograd_conv_shape(const Graph& g, const Node& n) {
  if (winograd_candidate(g, n)) return true;
  if (n.op_type != "Conv" || !n.domain.empty() || n.inputs.size() < 2 ||
      !g.value(n.input(1)).is_constant() || n.attr_int("group", 1) != 1 ||
      n.attr_string("auto_pad", "NOTSET") != "NOTSET")
    return false;
  const Shape& ws = g.value(n.input(1)).shape;
  if (ws.size() != 4) return false;
  const int64_t kh = ws[2], kw = ws[3];
  if (!(kh == 3 && kw == 3) &&
      !((kh == 1 && (kw == 3 || kw == 7)) || (kw == 1 && (kh == 3 || kh == 7))))
    return false;
  for (int64_t s : n.attr_ints("strides", {1, 1}))
    if (s != 1) return false;
  const std::vector<int64_t> dilations = n.attr_ints("dilations", {1, 1});
  const std::vector<int64_t> pads = n.attr_ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4 || dilations.size() != 2) return false;
  for (int axis = 0; axis < 2; ++axis) {
    const int64_t taps = axis == 0 ? kh : kw, d = dilations[axis];
    if (d < 1) return false;
    for (int64_t p : {pads[axis], pads[axis + 2]})
      if (p < 0 || p > d * (taps - 1)) return false;
  }
  return true;
}

namespace {

// Builds the step for tiles of FH (rows) by FW (columns).
template <class FH, class FW>
void add_winograd_step(Geometry geo, const Tensor& weights, const std::vector<float>& bias,
                       std::vector<TailOp> tail, const ChannelsLast& in, const ChannelsLast& out,
                       const ChannelsLast& residual, const char* name, Program& program,
                       std::vector<std::pair<int, dnnl::memory>> args) {
  // Each phase's outputs along an axis: at most ceil(outputs / dilation).
  geo.th = ((geo.oh + geo.dh - 1) / geo.dh + FH::kOut - 1) / FH::kOut;
  geo.tw = ((geo.ow + geo.dw - 1) / geo.dw + FW::kOut - 1) / FW::kOut;
  auto step =
      std::make_shared<Winograd<FH, FW>>(geo, weights, bias, std::move(tail), in, out, residual);
  program.add_custom(
      name,
      [step](const dnnl_exec_arg_t* args, int count) {
        return step->run(Operands{custom_step_data(args, count, DNNL_ARG_SRC),
                                  custom_step_data(args, count, DNNL_ARG_SRC_1),
                                  custom_step_data(args, count, DNNL_ARG_DST)});
      },
      std::move(args));
}

}  // namespace

void emit_winograd_conv(WinogradTile tile, const Graph& g, const Node& conv,
                        const std::vector<float>& bias, const std::vector<PostOp>& ops,
                        int64_t pad_t, int64_t pad_l, ValueId out, ValueMemories& values) {
  const ValueId x = conv.input(0);
  const Shape& xs = g.value(x).shape;
  const Shape& ys = g.value(conv.outputs[0]).shape;
  const std::vector<int64_t> dilations = conv.attr_ints("dilations", {1, 1});
  if (dilations.size() != 2)
    fail(ErrorKind::kInternal, "onednn: a 2-D Winograd conv with {} dilations", dilations.size());
  const Geometry geo{.n = xs[0],
                     .c = xs[1],
                     .k = ys[1],
                     .h = xs[2],
                     .w = xs[3],
                     .oh = ys[2],
                     .ow = ys[3],
                     .pad_t = pad_t,
                     .pad_l = pad_l,
                     .dh = dilations[0],
                     .dw = dilations[1]};
  std::vector<TailOp> tail;
  ValueId residual = kNoValue;
  for (const PostOp& op : ops) {
    tail.push_back(tail_op(op, ys).value());
    if (tail.back().kind == TailOp::Kind::kResidual) residual = op.operand;
  }
  Program& program = values.program();

  // The input as a producer in the region wrote it when that is channels-last, else
  // converted to dense channels-last; the output where its readers want it when that is
  // channels-last (a slice of a concatenation done in place), else dense channels-last.
  auto channels_last_as_it_is = [&](ValueId v, const Shape& shape) {
    if (std::optional<dnnl::memory::desc> has = values.activation_layout(v, shape);
        has && channels_last(*has))
      return *has;
    return dense_channels_last(shape);
  };
  const dnnl::memory::desc src_md = channels_last_as_it_is(x, xs);
  dnnl::memory::desc dst_md = dense_channels_last(ys);
  if (std::optional<dnnl::memory::desc> home = values.home_layout(out);
      home && channels_last(*home))
    dst_md = *home;
  const dnnl::memory src = values.read(x, src_md);
  // The residual, channels-last like the input, bound as an input of the step. Were the
  // output given its buffer, the result would still be right: each work item reads a residual
  // element just before it writes the output element at the same place.
  std::optional<dnnl::memory> res;
  if (residual != kNoValue) res = values.read(residual, channels_last_as_it_is(residual, ys));
  const dnnl::memory dst = values.destination(out, dst_md);
  const std::optional<ChannelsLast> src_at = channels_last(src.get_desc()),
                                    dst_at = channels_last(dst.get_desc()),
                                    res_at = res ? channels_last(res->get_desc()) : ChannelsLast{};
  if (!src_at || !dst_at || !res_at)
    fail(ErrorKind::kInternal, "onednn: Winograd conv got a layout other than channels-last");

  const Tensor& weights = g.value(conv.input(1)).constant;
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  if (res) args.emplace_back(DNNL_ARG_SRC_1, *res);
  const bool four = tile == WinogradTile::k4;
  const char* name = four ? kWinogradF43Step : kWinogradF23Step;
  auto add = [&]<class FH, class FW>() {
    add_winograd_step<FH, FW>(geo, weights, bias, std::move(tail), *src_at, *dst_at, *res_at, name,
                              program, std::move(args));
  };
  const Shape& ws = g.value(conv.input(1)).shape;
  if (ws[2] == 3 && ws[3] == 3)
    four ? add.template operator()<F4x3, F4x3>() : add.template operator()<F2x3, F2x3>();
  else if (ws[2] == 1 && ws[3] == 3)
    four ? add.template operator()<Unit, F4x3>() : add.template operator()<Unit, F2x3>();
  else if (ws[2] == 3 && ws[3] == 1)
    four ? add.template operator()<F4x3, Unit>() : add.template operator()<F2x3, Unit>();
  else if (ws[2] == 1 && ws[3] == 7)
    four ? add.template operator()<Unit, F4x7>() : add.template operator()<Unit, F2x7>();
  else if (ws[2] == 7 && ws[3] == 1)
    four ? add.template operator()<F4x7, Unit>() : add.template operator()<F2x7, Unit>();
  else
    fail(ErrorKind::kInternal, "onednn: no Winograd transform for a {}x{} filter", ws[2], ws[3]);
  values.produced(out, dst);
}

}  // namespace collage::onednn
