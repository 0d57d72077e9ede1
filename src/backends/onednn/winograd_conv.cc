// Winograd convolution F(m x m, 3x3) in channels-last layout, m = 4 or 2 (winograd_conv.h
// says why and when each).
//
// For each m x m output tile, the t x t input tile d (t = m + 2; zero outside the input)
// becomes V = B^T d B, the weights g become U = G g G^T once at compile time, and the tile's
// output is A^T (sum over input channels of U * V) A: per element (i, j) of the t x t
// transformed tile, a matrix product [tiles x C] x [C x K], all t^2 of them one batched
// oneDNN matmul. The matrices are Lavin and Gray's (arXiv:1509.09308): points 0, +-1, +-2 for
// F(4x4, 3x3), 0, +-1 for F(2x2, 3x3). Both transforms run over blocks of 16 channels, which
// are contiguous in channels-last: each operation below is one vector instruction per block.
#include "backends/onednn/winograd_conv.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <utility>

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

struct Geometry {
  int64_t n, c, k, h, w, oh, ow, pad_t, pad_l, th, tw;
  int64_t tiles() const { return n * th * tw; }
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

// dst[0..16) = src[0..count), zeros after.
inline void load_block(float* dst, const float* src, int64_t count) {
  if (count == kLanes) {
#pragma omp simd
    for (int64_t c = 0; c < kLanes; ++c) dst[c] = src[c];
    return;
  }
  for (int64_t c = 0; c < kLanes; ++c) dst[c] = c < count ? src[c] : 0.0f;
}

inline void store_block(float* dst, const float* src, int64_t count) {
  if (count == kLanes) {
#pragma omp simd
    for (int64_t c = 0; c < kLanes; ++c) dst[c] = src[c];
    return;
  }
  for (int64_t c = 0; c < count; ++c) dst[c] = src[c];
}

using Block = float[kLanes];

// The two tile sizes: their sides, their 1-D transforms (one column or row of a tile through
// B^T (input_1d) or A^T (output_1d): values in, written where the caller says, references into
// its tile arrays: GCC 12 vectorizes the callers' loops over the 16 lanes so, and left them
// scalar with a small struct returned, -fopt-info-vec) and G for the weights.
struct F4x4 {
  static constexpr int kTile = 6;  // input tile side: 4 outputs + 3 - 1
  static constexpr int kOut = 4;   // output tile side
  static void input_1d(float d0, float d1, float d2, float d3, float d4, float d5, float& o0,
                       float& o1, float& o2, float& o3, float& o4, float& o5) {
    o0 = 4 * d0 - 5 * d2 + d4;
    o1 = -4 * d1 - 4 * d2 + d3 + d4;
    o2 = 4 * d1 - 4 * d2 - d3 + d4;
    o3 = -2 * d1 - d2 + 2 * d3 + d4;
    o4 = 2 * d1 - d2 - 2 * d3 + d4;
    o5 = 4 * d1 - 5 * d3 + d5;
  }
  static void output_1d(float m0, float m1, float m2, float m3, float m4, float m5, float& o0,
                        float& o1, float& o2, float& o3) {
    o0 = m0 + m1 + m2 + m3 + m4;
    o1 = m1 - m2 + 2 * (m3 - m4);
    o2 = m1 + m2 + 4 * (m3 + m4);
    o3 = m1 - m2 + 8 * (m3 - m4) + m5;
  }
  static constexpr double G[kTile][3] = {{1.0 / 4, 0, 0},
                                         {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                         {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                         {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                         {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                         {0, 0, 1}};
};

struct F2x2 {
  static constexpr int kTile = 4;
  static constexpr int kOut = 2;
  static void input_1d(float d0, float d1, float d2, float d3, float& o0, float& o1, float& o2,
                       float& o3) {
    o0 = d0 - d2;
    o1 = d1 + d2;
    o2 = d2 - d1;
    o3 = d1 - d3;
  }
  static void output_1d(float m0, float m1, float m2, float m3, float& o0, float& o1) {
    o0 = m0 + m1 + m2;
    o1 = m1 - m2 - m3;
  }
  static constexpr double G[kTile][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
};

template <class F>
using TileOf = Block[F::kTile][F::kTile];

// The transforms below take whole tiles as arrays (not rows through pointers, which GCC
// left scalar: 3-5x slower per transform, measured in ResNet-50), columns first into a
// scratch tile, then rows; I and O index a tile's input and output sides.

// u = B^T d B for a tile of 16-lane blocks.
template <class F, size_t... I>
inline void input_tile(const TileOf<F>& d, TileOf<F>& u, std::index_sequence<I...>) {
  TileOf<F> t;
  for (int j = 0; j < F::kTile; ++j) {
#pragma omp simd
    for (int64_t c = 0; c < kLanes; ++c) F::input_1d(d[I][j][c]..., t[I][j][c]...);
  }
  for (int i = 0; i < F::kTile; ++i) {
#pragma omp simd
    for (int64_t c = 0; c < kLanes; ++c) F::input_1d(t[i][I][c]..., u[i][I][c]...);
  }
}

// r = A^T p A for a tile of 16-lane blocks.
template <class F, size_t... I, size_t... O>
inline void output_tile(const TileOf<F>& p, Block (&r)[F::kOut][F::kOut], std::index_sequence<I...>,
                        std::index_sequence<O...>) {
  Block s[F::kOut][F::kTile];
  for (int j = 0; j < F::kTile; ++j) {
#pragma omp simd
    for (int64_t c = 0; c < kLanes; ++c) F::output_1d(p[I][j][c]..., s[O][j][c]...);
  }
  for (int i = 0; i < F::kOut; ++i) {
#pragma omp simd
    for (int64_t c = 0; c < kLanes; ++c) F::output_1d(s[i][I][c]..., r[i][O][c]...);
  }
}

// Tile t's place in the image: its batch index and the top-left output of its block.
struct TilePlace {
  int64_t n, y, x;
};
TilePlace place(const Geometry& g, int64_t t, int out_side) {
  const int64_t per_image = g.th * g.tw;
  return {t / per_image, t % per_image / g.tw * out_side, t % g.tw * out_side};
}

// v[(i*t + j)][b][c] = (B^T d B)[i][j] for the input d of tile `first` + b, b < `count`
// (`rows` rows per plane: the ones past the last tile are zeros).
template <class F>
void input_block(const Geometry& g, const ChannelsLast& xs, const float* x, int64_t first,
                 int64_t count, int64_t rows, float* v) {
  constexpr int kTile = F::kTile;
  alignas(64) TileOf<F> d;
  alignas(64) TileOf<F> u;
  for (int64_t b = 0; b < rows; ++b) {
    if (b >= count) {
      for (int p = 0; p < kTile * kTile; ++p)
        std::fill(v + (p * rows + b) * g.c, v + (p * rows + b + 1) * g.c, 0.0f);
      continue;
    }
    const TilePlace at = place(g, first + b, F::kOut);
    const int64_t y0 = at.y - g.pad_t, x0 = at.x - g.pad_l;
    for (int64_t c0 = 0; c0 < g.c; c0 += kLanes) {
      const int64_t lanes = std::min(kLanes, g.c - c0);
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < kTile; ++j) {
          const int64_t yy = y0 + i, xx = x0 + j;
          if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w)
            std::fill(d[i][j], d[i][j] + kLanes, 0.0f);
          else
            load_block(d[i][j], x + xs.offset + at.n * xs.sn + yy * xs.sh + xx * xs.sw + c0, lanes);
        }
      input_tile<F>(d, u, std::make_index_sequence<kTile>());
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < kTile; ++j)
          store_block(v + ((i * kTile + j) * rows + b) * g.c + c0, u[i][j], lanes);
    }
  }
}

// Output channels [k0, k0 + width) of tiles `first` .. `first` + count - 1 from their products
// m[(i*t + j)][b][k - k0] (`rows` rows per plane): y = A^T M A + bias, then the tail, for
// the outputs inside the image (`rs`: where the residual lies).
template <class F>
void output_block(const Geometry& g, const std::vector<float>& bias,
                  const std::vector<TailOp>& tail, const float* m, int64_t first, int64_t count,
                  int64_t rows, int64_t k0, int64_t width, const ChannelsLast& ys,
                  const ChannelsLast& rs, const Operands& io) {
  constexpr int kTile = F::kTile, kOut = F::kOut;
  alignas(64) TileOf<F> p;
  alignas(64) Block r[kOut][kOut];
  alignas(64) Block bias_block;
  alignas(64) Block residual;
  for (int64_t b = 0; b < count; ++b) {
    const TilePlace at = place(g, first + b, kOut);
    for (int64_t kk = 0; kk < width; kk += kLanes) {
      const int64_t lanes = std::min(kLanes, width - kk);
      load_block(bias_block, bias.data() + k0 + kk, lanes);
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < kTile; ++j)
          load_block(p[i][j], m + ((i * kTile + j) * rows + b) * width + kk, lanes);
      output_tile<F>(p, r, std::make_index_sequence<kTile>(), std::make_index_sequence<kOut>());
      for (int i = 0; i < kOut && at.y + i < g.oh; ++i)
        for (int j = 0; j < kOut && at.x + j < g.ow; ++j) {
          float* o = r[i][j];
#pragma omp simd
          for (int64_t c = 0; c < kLanes; ++c) o[c] += bias_block[c];
          for (const TailOp& t : tail) {
            if (t.kind == TailOp::Kind::kRelu) {
#pragma omp simd
              for (int64_t c = 0; c < kLanes; ++c) o[c] = o[c] > 0 ? o[c] : o[c] * t.alpha;
            } else if (t.kind == TailOp::Kind::kClip) {
#pragma omp simd
              for (int64_t c = 0; c < kLanes; ++c) o[c] = std::min(std::max(o[c], t.alpha), t.beta);
            } else {
              load_block(residual,
                         io.residual + rs.offset + at.n * rs.sn + (at.y + i) * rs.sh +
                             (at.x + j) * rs.sw + k0 + kk,
                         lanes);
#pragma omp simd
              for (int64_t c = 0; c < kLanes; ++c) o[c] += residual[c];
            }
          }
          store_block(
              io.y + ys.offset + at.n * ys.sn + (at.y + i) * ys.sh + (at.x + j) * ys.sw + k0 + kk,
              o, lanes);
        }
    }
  }
}

// U[(i*t + j)][c][k] = (G g[k][c] G^T)[i][j], in double: the one-time transform of the
// constant weights (K, C, 3, 3).
template <class F>
std::vector<float> transformed_weights(const Tensor& w, int64_t k_count, int64_t c_count) {
  constexpr int kTile = F::kTile;
  const auto& G = F::G;
  const float* data = w.data<float>();
  std::vector<float> u(kTile * kTile * c_count * k_count);
  for (int64_t k = 0; k < k_count; ++k)
    for (int64_t c = 0; c < c_count; ++c) {
      const float* g = data + (k * c_count + c) * 9;
      double gt[kTile][3];  // G g
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < 3; ++j)
          gt[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < kTile; ++j)
          u[((i * kTile + j) * c_count + c) * k_count + k] =
              static_cast<float>(gt[i][0] * G[j][0] + gt[i][1] * G[j][1] + gt[i][2] * G[j][2]);
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
template <class F>
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
    // tiles evenly (49 tiles: 2 of 25, not 32 and 17 padded to 32); as many channel blocks
    // (multiples of 16) as keep every thread busy when tiles are few: each transforms its
    // tiles' input again.
    const int threads = std::max(1, omp_get_max_threads());
    const int64_t most_rows = std::clamp<int64_t>(8192 * 36 / (kTile * kTile) / geo.c, 8, 64);
    tile_blocks_ = (geo.tiles() + most_rows - 1) / most_rows;
    if (tile_blocks_ > threads) tile_blocks_ = (tile_blocks_ + threads - 1) / threads * threads;
    rows_ = (geo.tiles() + tile_blocks_ - 1) / tile_blocks_;
    int64_t channel_blocks = std::clamp<int64_t>((threads + tile_blocks_ - 1) / tile_blocks_, 1,
                                                 std::max<int64_t>(1, geo.k / 32));
    width_ = (geo.k + channel_blocks - 1) / channel_blocks;
    width_ = std::min(geo.k, (width_ + kLanes - 1) / kLanes * kLanes);
    channel_blocks_ = (geo.k + width_ - 1) / width_;

    const std::vector<float> u = transformed_weights<F>(weights, geo.k, geo.c);
    dnnl::stream stream(cpu_engine());
    size_t scratch_bytes = 0;
    for (int64_t kb = 0; kb < channel_blocks_; ++kb) {
      const int64_t k0 = kb * width_, width = std::min(width_, geo.k - k0);
      if (!matmuls_.count(width)) {
        const dnnl::memory::desc v_md({kTile * kTile, rows_, geo.c}, dt::f32, tag::abc),
            w_md({kTile * kTile, geo.c, width}, dt::f32, tag::any),
            m_md({kTile * kTile, rows_, width}, dt::f32, tag::abc);
        auto pd = create_pd("Winograd matmul", [&] {
          return dnnl::matmul::primitive_desc(dnnl::matmul::desc(v_md, w_md, m_md), base_attr(),
                                              cpu_engine());
        });
        scratch_bytes = std::max(scratch_bytes, pd.scratchpad_desc().get_size());
        matmuls_.emplace(width, Matmul{dnnl::matmul(pd), pd.weights_desc()});
      }
      // This block's columns of U, packed as its matmul prefers.
      const dnnl::memory::desc block_view({kTile * kTile, geo.c, width}, dt::f32,
                                          {geo.c * geo.k, geo.k, 1});
      dnnl::memory from(block_view, cpu_engine(), const_cast<float*>(u.data()) + k0);
      dnnl::memory packed(matmuls_.at(width).weights_md, cpu_engine());
      dnnl::reorder(from, packed).execute(stream, from, packed);
      packed_.push_back(packed);
    }
    stream.wait();

    // Per thread: its transformed tiles, products, scratchpad and stream, touched now.
    const int64_t v_floats = kTile * kTile * rows_ * geo.c,
                  m_floats = kTile * kTile * rows_ * width_;
    for (int t = 0; t < threads; ++t) {
      Thread th{
          dnnl::memory({{kTile * kTile, rows_, geo.c}, dt::f32, tag::abc}, cpu_engine()),
          dnnl::memory({{kTile * kTile, rows_, width_}, dt::f32, tag::abc}, cpu_engine()),
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
            dnnl::memory::desc({kTile * kTile, rows_, std::min(width_, geo.k - kb * width_)},
                               dt::f32, tag::abc),
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
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t i = 0; i < items; ++i)
      if (dnnl_status_t status = work(i, threads_[omp_get_thread_num()], io);
          status != dnnl_success)
        failed.store(status);
    return failed.load();
  }

 private:
  static constexpr int kTile = F::kTile;
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
    input_block<F>(geo_, in_, io.x, first, count, rows_, v);
    const Matmul& mm = matmuls_.at(width);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, th.v.get()},
                                    {DNNL_ARG_WEIGHTS, packed_[kb].get()},
                                    {DNNL_ARG_DST, th.products[kb].get()},
                                    {DNNL_ARG_SCRATCHPAD, th.scratch.get()}};
    if (dnnl_status_t status = dnnl_primitive_execute(mm.primitive.get(), th.stream.get(), 4, args);
        status != dnnl_success)
      return status;
    output_block<F>(geo_, bias_, tail_, static_cast<const float*>(th.m.get_data_handle()), first,
                    count, rows_, k0, width, out_, residual_, io);
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

void emit_winograd_conv(WinogradTile tile, const Graph& g, const Node& conv,
                        const std::vector<float>& bias, const std::vector<PostOp>& ops,
                        int64_t pad_t, int64_t pad_l, ValueId out, ValueMemories& values) {
  const int out_side = tile == WinogradTile::k4x4 ? F4x4::kOut : F2x2::kOut;
  const ValueId x = conv.input(0);
  const Shape& xs = g.value(x).shape;
  const Shape& ys = g.value(conv.outputs[0]).shape;
  const Geometry geo{.n = xs[0],
                     .c = xs[1],
                     .k = ys[1],
                     .h = xs[2],
                     .w = xs[3],
                     .oh = ys[2],
                     .ow = ys[3],
                     .pad_t = pad_t,
                     .pad_l = pad_l,
                     .th = (ys[2] + out_side - 1) / out_side,
                     .tw = (ys[3] + out_side - 1) / out_side};
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
  // The residual read before the destination is chosen, so that its buffer is not reused
  // for the output while the step still reads it.
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
  auto add = [&](auto step, const char* name) {
    program.add_custom(
        name,
        [step](const dnnl_exec_arg_t* args, int count) {
          return step->run(Operands{custom_step_data(args, count, DNNL_ARG_SRC),
                                    custom_step_data(args, count, DNNL_ARG_SRC_1),
                                    custom_step_data(args, count, DNNL_ARG_DST)});
        },
        std::move(args));
  };
  if (tile == WinogradTile::k4x4)
    add(std::make_shared<Winograd<F4x4>>(geo, weights, bias, std::move(tail), *src_at, *dst_at,
                                         *res_at),
        kWinogradF43Step);
  else
    add(std::make_shared<Winograd<F2x2>>(geo, weights, bias, std::move(tail), *src_at, *dst_at,
                                         *res_at),
        kWinogradF23Step);
  values.produced(out, dst);
}

}  // namespace collage::onednn
