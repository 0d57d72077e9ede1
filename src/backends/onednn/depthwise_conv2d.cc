// Depthwise 2-D convolutions over channel-blocked activations (depthwise_conv2d.h says why and
// what is taken).
#include "backends/onednn/depthwise_conv2d.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>

#include "backends/onednn/conv_row_step.h"
#include "backends/onednn/kernels.h"
#include "collage/error.h"
#include "util/fast_math.h"

namespace collage::onednn {

namespace {

constexpr int64_t kLanes = 16;  // channels per block

using Vec = Vec16;
constexpr auto load = load16;
constexpr auto store = store16;

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

// The tail, folded: runs of Relu and Clip as one clamp (Relu is [0, inf), Clip [alpha, beta];
// clamping a clamped value clamps its bounds), the other functions one by one.
std::optional<std::vector<ConvActivation>> conv_activations(const std::vector<PostOp>& ops) {
  using Kind = ConvActivation::Kind;
  std::vector<ConvActivation> out;
  for (const PostOp& op : ops) {
    if (op.kind != PostOp::Kind::kEltwise) return std::nullopt;
    float lo = 0, hi = 0;
    if (op.alg == dnnl::algorithm::eltwise_relu && op.alpha == 0) {
      hi = kInf;
    } else if ((op.alg == dnnl::algorithm::eltwise_clip ||
                op.alg == dnnl::algorithm::eltwise_clip_v2) &&
               op.alpha <= op.beta) {
      lo = op.alpha;
      hi = op.beta;
    } else if (op.alg == dnnl::algorithm::eltwise_relu) {
      out.push_back({Kind::kLeakyRelu, op.alpha, 0});
      continue;
    } else if (op.alg == dnnl::algorithm::eltwise_swish) {
      out.push_back({Kind::kSwish, op.alpha, 0});
      continue;
    } else if (op.alg == dnnl::algorithm::eltwise_hardswish) {
      out.push_back({Kind::kHardSwish, 0, 0});
      continue;
    } else {
      return std::nullopt;
    }
    if (out.empty() || out.back().kind != Kind::kClamp) out.push_back({Kind::kClamp, -kInf, kInf});
    out.back().a = std::clamp(out.back().a, lo, hi);
    out.back().b = std::clamp(out.back().b, lo, hi);
  }
  return out;
}

// oneDNN 2.6's definitions (dnnl_types.h), on 16 channels at once; a NaN stays a NaN, as on
// the reference backend (every comparison with it is false).
Vec16 activate(const std::vector<ConvActivation>& tail, Vec16 v) {
  for (const ConvActivation& f : tail) {
    switch (f.kind) {
      case ConvActivation::Kind::kClamp:
        v = v < f.a ? Vec16{} + f.a : v;
        v = v > f.b ? Vec16{} + f.b : v;
        break;
      case ConvActivation::Kind::kLeakyRelu:
        v = v > 0.0f ? v : v * f.a;
        break;
      case ConvActivation::Kind::kSwish:
        v = v * fast_sigmoid(v * f.a);
        break;
      case ConvActivation::Kind::kHardSwish: {
        Vec16 t = v + 3.0f;
        t = t < 0.0f ? Vec16{} : t;
        t = t > 6.0f ? Vec16{} + 6.0f : t;
        v = v * t * (1.0f / 6);
        break;
      }
    }
  }
  return v;
}

TailClamp::TailClamp(const std::vector<ConvActivation>& tail)
    : clamp_only(tail.empty() ||
                 (tail.size() == 1 && tail[0].kind == ConvActivation::Kind::kClamp)),
      lo(Vec16{} + (clamp_only && !tail.empty() ? tail[0].a : -kInf)),
      hi(Vec16{} + (clamp_only && !tail.empty() ? tail[0].b : kInf)) {}

std::optional<BlockedStrides> blocked_strides(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 4 || d.format_kind != dnnl_blocked || d.data_type != dnnl_f32) return std::nullopt;
  const auto& blocking = d.format_desc.blocking;
  if (blocking.inner_nblks != 1 || blocking.inner_idxs[0] != 1 || blocking.inner_blks[0] != kLanes)
    return std::nullopt;
  const auto& s = blocking.strides;
  if ((d.dims[3] != 1 && s[3] != kLanes) || (d.dims[2] != 1 && s[2] != kLanes * d.dims[3]))
    return std::nullopt;
  return BlockedStrides{s[0], s[1], d.offset0};
}

bool depthwise_conv2d_shape(const Graph& g, const Node& n) {
  if (!depthwise_conv_node(g, n, 4)) return false;
  const Shape& w = g.value(n.input(1)).shape;
  const int64_t k = w[2];
  if (k != 3 || w[3] != 3) return false;
  const std::vector<int64_t> strides = n.attr_ints("strides", {1, 1});
  if (strides.size() != 2 || strides[0] != strides[1] || (strides[0] != 1 && strides[0] != 2))
    return false;
  for (int64_t d : n.attr_ints("dilations", {1, 1}))
    if (d != 1) return false;
  for (int64_t p : n.attr_ints("pads", {0, 0, 0, 0}))
    if (p < 0 || p > k - 1) return false;
  return true;
}

bool depthwise_conv2d_takes(const std::vector<PostOp>& ops) {
  return conv_activations(ops).has_value();
}

DepthwiseConv2d::DepthwiseConv2d(const Shape& x, const Shape& y, const Tensor& weights,
                                 const std::vector<float>& bias, int64_t stride, int64_t pad_t,
                                 int64_t pad_l, const std::vector<PostOp>& ops, BlockedStrides in,
                                 BlockedStrides out)
    : geo_(x, y, stride, pad_t, pad_l), k_(weights.shape()[2]), in_(in), out_(out) {
  std::optional<std::vector<Activation>> tail = conv_activations(ops);
  if (!tail) fail(ErrorKind::kInternal, "onednn: a depthwise conv tail the step can't apply");
  activations_ = std::move(*tail);
  const int64_t blocks = (geo_.c + kLanes - 1) / kLanes, taps = k_ * k_;
  const float* w = weights.data<float>();
  taps_.assign(blocks * taps * kLanes, 0.0f);
  bias_.assign(blocks * kLanes, 0.0f);
  for (int64_t ch = 0; ch < geo_.c; ++ch) {
    for (int64_t t = 0; t < taps; ++t)
      taps_[((ch / kLanes) * taps + t) * kLanes + ch % kLanes] = w[ch * taps + t];
    if (!bias.empty()) bias_[ch] = bias[ch];
  }
  zeros_.assign(geo_.w * kLanes, 0.0f);
}

template <int K, int S>
void DepthwiseConv2d::rows(const float* x, float* y, int64_t n, int64_t block, int64_t oy0,
                           int64_t oy1) const {
  const float* xb = x + in_.offset + n * in_.sn + block * in_.sc;
  float* yb = y + out_.offset + n * out_.sn + block * out_.sc;
  Vec w[K * K];
  for (int t = 0; t < K * K; ++t) w[t] = load(&taps_[(block * K * K + t) * kLanes]);
  const Vec bias = load(&bias_[block * kLanes]);
  const TailClamp clamp(activations_);
  const auto [first, last] = geo_.columns_inside(K, S);
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    // Each tap row's input row, or zeros above and below the image.
    const float* in_rows[K];
    for (int ky = 0; ky < K; ++ky) {
      const int64_t iy = oy * S - geo_.pad_t + ky;
      in_rows[ky] = iy >= 0 && iy < geo_.h ? xb + iy * geo_.w * kLanes : zeros_.data();
    }
    float* out_row = yb + oy * geo_.ow * kLanes;
    // One output of column `ox`, its taps [kx_lo, kx_hi) of each row inside the image.
    auto one = [&](int64_t ox, int kx_lo, int kx_hi) {
      const int64_t ix0 = ox * S - geo_.pad_l;
      Vec acc = bias;
#pragma GCC unroll 3
      for (int ky = 0; ky < K; ++ky)
        for (int kx = kx_lo; kx < kx_hi; ++kx)
          acc += load(in_rows[ky] + (ix0 + kx) * kLanes) * w[ky * K + kx];
      store(out_row + ox * kLanes, clamp(acc));
    };
    auto edge = [&](int64_t ox) {
      const int64_t ix0 = ox * S - geo_.pad_l;
      one(ox, static_cast<int>(std::clamp<int64_t>(-ix0, 0, K)),
          static_cast<int>(std::clamp<int64_t>(geo_.w - ix0, 0, K)));
    };
    int64_t ox = 0;
    for (; ox < first; ++ox) edge(ox);
    // Four neighbouring outputs at once: they share their rows' input pixels, loaded once.
    for (; ox + 4 <= last; ox += 4) {
      Vec a0 = bias, a1 = bias, a2 = bias, a3 = bias;
      const int64_t ix0 = ox * S - geo_.pad_l;
#pragma GCC unroll 3
      for (int ky = 0; ky < K; ++ky) {
        const float* r = in_rows[ky] + ix0 * kLanes;
        Vec in[3 * S + K];
#pragma GCC unroll 9
        for (int i = 0; i < 3 * S + K; ++i) in[i] = load(r + i * kLanes);
#pragma GCC unroll 3
        for (int kx = 0; kx < K; ++kx) {
          const Vec wk = w[ky * K + kx];
          a0 += in[kx] * wk;
          a1 += in[S + kx] * wk;
          a2 += in[2 * S + kx] * wk;
          a3 += in[3 * S + kx] * wk;
        }
      }
      float* o = out_row + ox * kLanes;
      store(o, clamp(a0));
      store(o + kLanes, clamp(a1));
      store(o + 2 * kLanes, clamp(a2));
      store(o + 3 * kLanes, clamp(a3));
    }
    for (; ox < last; ++ox) one(ox, 0, K);
    for (; ox < geo_.ow; ++ox) edge(ox);
    if (!clamp.clamp_only)
      for (int64_t i = 0; i < geo_.ow; ++i)
        store(out_row + i * kLanes, activate(activations_, load(out_row + i * kLanes)));
  }
}

void DepthwiseConv2d::run(const float* x, float* y) const {
  const int64_t blocks = (geo_.c + kLanes - 1) / kLanes;
  // Each thread an equal share of all output rows (for_each_row_share).
  auto rows_of = [&](auto kernel) {
    for_each_row_share(geo_.n * blocks, geo_.oh, [&](int64_t plane, int64_t oy0, int64_t oy1) {
      (this->*kernel)(x, y, plane / blocks, plane % blocks, oy0, oy1);
    });
  };
  if (geo_.stride == 1) rows_of(&DepthwiseConv2d::rows<3, 1>);
  if (geo_.stride == 2) rows_of(&DepthwiseConv2d::rows<3, 2>);
}

bool depthwise_conv2d_fits(const ValueMemories& values, ValueId x, const Shape& xs, ValueId out) {
  const std::optional<dnnl::memory::desc> has = values.activation_layout(x, xs);
  const std::optional<dnnl::memory::desc> home = values.home_layout(out);
  return (!has || blocked_strides(*has)) && (!home || blocked_strides(*home));
}

void emit_depthwise_conv2d(const Graph& g, const Node& conv, const std::vector<float>& bias,
                           const std::vector<PostOp>& ops, int64_t pad_t, int64_t pad_l,
                           ValueId out, ValueMemories& values) {
  const ValueId x = conv.input(0);
  const Shape& xs = g.value(x).shape;
  const Shape& ys = g.value(conv.outputs[0]).shape;
  // The input where its producer wrote it when that is channel-blocked (a slice of a
  // concatenation done in place too), else converted; the output likewise where it has a
  // home, else a dense channel-blocked buffer.
  dnnl::memory::desc src_md = channel_blocked_md(to_dims(xs));
  if (std::optional<dnnl::memory::desc> has = values.activation_layout(x, xs);
      has && blocked_strides(*has))
    src_md = *has;
  dnnl::memory::desc dst_md = channel_blocked_md(to_dims(ys));
  if (std::optional<dnnl::memory::desc> home = values.home_layout(out);
      home && blocked_strides(*home))
    dst_md = *home;
  const dnnl::memory src = values.read(x, src_md);
  const dnnl::memory dst = values.destination(out, dst_md);
  const std::optional<BlockedStrides> in = blocked_strides(src.get_desc()),
                                      to = blocked_strides(dst.get_desc());
  if (!in || !to) fail(ErrorKind::kInternal, "onednn: depthwise conv got a layout it can't walk");
  auto step = std::make_shared<const DepthwiseConv2d>(xs, ys, g.value(conv.input(1)).constant, bias,
                                                      conv.attr_ints("strides", {1, 1})[0], pad_t,
                                                      pad_l, ops, *in, *to);
  add_conv_row_step(kDepthwiseConv2dStep, step, src, dst, out, values);
}

}  // namespace collage::onednn
