// Grouped 3x3 convolutions of narrow groups over channels-last activations (grouped_conv2d.h
// says why and what is taken).
#include "backends/onednn/grouped_conv2d.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "backends/onednn/conv_row_step.h"
#include "backends/onednn/kernels.h"
#include "collage/error.h"

namespace collage::onednn {

namespace {

constexpr int64_t kLanes = 16;  // output channels per block

typedef int Lanes __attribute__((vector_size(kLanes * sizeof(int))));
using Vec = Vec16;
constexpr auto load = load16;
constexpr auto store = store16;

// Every lane l of `v` replaced by lane (l / G) * G + J: member J of lane l's group. A constant
// permutation (vpermilps within 128-bit lanes for G = 4, vpermps for G = 8).
template <int G, int J>
inline Vec member(Vec v) {
  constexpr Lanes kFrom = {0 / G * G + J,  1 / G * G + J,  2 / G * G + J,  3 / G * G + J,
                           4 / G * G + J,  5 / G * G + J,  6 / G * G + J,  7 / G * G + J,
                           8 / G * G + J,  9 / G * G + J,  10 / G * G + J, 11 / G * G + J,
                           12 / G * G + J, 13 / G * G + J, 14 / G * G + J, 15 / G * G + J};
  return __builtin_shuffle(v, kFrom);
}

// Four outputs `S` input pixels apart from one tap row's input pixels `in` (3 S + 3 of them),
// the row's weights `w` ([3 taps][G members][16]), members J.. G - 1.
template <int G, int S, int J = 0>
inline void four_outputs(const Vec* in, const float* w, Vec& a0, Vec& a1, Vec& a2, Vec& a3) {
  if constexpr (J < G) {
    Vec m[3 * S + 3];
#pragma GCC unroll 9
    for (int i = 0; i < 3 * S + 3; ++i) m[i] = member<G, J>(in[i]);
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx) {
      const Vec wk = load(w + (kx * G + J) * kLanes);
      a0 += m[kx] * wk;
      a1 += m[S + kx] * wk;
      a2 += m[2 * S + kx] * wk;
      a3 += m[3 * S + kx] * wk;
    }
    four_outputs<G, S, J + 1>(in, w, a0, a1, a2, a3);
  }
}

// One output from one tap row's input pixels `in` (3; only taps [kx_lo, kx_hi) read).
template <int G, int J = 0>
inline void one_output(const Vec* in, const float* w, int kx_lo, int kx_hi, Vec& acc) {
  if constexpr (J < G) {
    for (int kx = kx_lo; kx < kx_hi; ++kx)
      acc += member<G, J>(in[kx]) * load(w + (kx * G + J) * kLanes);
    one_output<G, J + 1>(in, w, kx_lo, kx_hi, acc);
  }
}

// `md` as GroupedConvStrides: 4-D float32, channels-last with each row's pixels evenly spaced
// and its rows one after another, or channels in blocks of 16 with a block's pixels dense.
std::optional<GroupedConvStrides> step_strides(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 4 || d.data_type != dnnl_f32 || d.format_kind != dnnl_blocked) return std::nullopt;
  if (std::optional<BlockedStrides> blocked = blocked_strides(md))
    return GroupedConvStrides{blocked->sn, blocked->sc, kLanes, blocked->offset};
  const auto& blocking = d.format_desc.blocking;
  const auto& s = blocking.strides;
  if (blocking.inner_nblks != 0 || s[1] != 1) return std::nullopt;
  if (s[3] < d.dims[1] || (d.dims[2] != 1 && s[2] != s[3] * d.dims[3])) return std::nullopt;
  return GroupedConvStrides{s[0], kLanes, s[3], d.offset0};
}

}  // namespace

bool grouped_conv2d_shape(const Graph& g, const Node& n) {
  if (!constant_float_conv_node(g, n, 4)) return false;
  const Shape& w = g.value(n.input(1)).shape;
  const int64_t c = g.value(n.input(0)).shape[1], width = w[1], group = n.attr_int("group", 1);
  if (c % kLanes != 0 || group <= 1 || group * width != c || w[0] != c ||
      g.value(n.outputs[0]).shape[1] != c || w[2] != 3 || w[3] != 3)
    return false;
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET") return false;
  const std::vector<int64_t> strides = n.attr_ints("strides", {1, 1});
  if (strides.size() != 2 || strides[0] != strides[1] || (strides[0] != 1 && strides[0] != 2))
    return false;
  // The widths and strides measured faster than oneDNN's kernel (grouped_conv2d.h).
  if (!(width == 4 || (width == 8 && strides[0] == 2))) return false;
  for (int64_t d : n.attr_ints("dilations", {1, 1}))
    if (d != 1) return false;
  for (int64_t p : n.attr_ints("pads", {0, 0, 0, 0}))
    if (p < 0 || p > 2) return false;
  return true;
}

GroupedConv2d::GroupedConv2d(const Shape& x, const Shape& y, const Tensor& weights,
                             const std::vector<float>& bias, int64_t stride, int64_t pad_t,
                             int64_t pad_l, const std::vector<PostOp>& ops, GroupedConvStrides in,
                             GroupedConvStrides out)
    : geo_(x, y, stride, pad_t, pad_l), width_(weights.shape()[1]), in_(in), out_(out) {
  std::optional<std::vector<ConvActivation>> tail = conv_activations(ops);
  if (!tail) fail(ErrorKind::kInternal, "onednn: a grouped conv tail the step can't apply");
  activations_ = std::move(*tail);
  const float* w = weights.data<float>();
  taps_.assign(geo_.c * 9 * width_, 0.0f);
  for (int64_t oc = 0; oc < geo_.c; ++oc)
    for (int64_t j = 0; j < width_; ++j)
      for (int64_t t = 0; t < 9; ++t)
        taps_[(((oc / kLanes) * 9 + t) * width_ + j) * kLanes + oc % kLanes] =
            w[(oc * width_ + j) * 9 + t];
  bias_.assign(geo_.c, 0.0f);
  if (!bias.empty()) std::copy(bias.begin(), bias.end(), bias_.begin());
}

template <int G, int S>
void GroupedConv2d::rows(const float* x, float* y, int64_t n, int64_t block, int64_t oy0,
                         int64_t oy1) const {
  const float* xb = x + in_.offset + n * in_.sn + block * in_.sc;
  float* yb = y + out_.offset + n * out_.sn + block * out_.sc;
  const float* wb = taps_.data() + block * 9 * G * kLanes;
  const Vec bias = load(&bias_[block * kLanes]);
  const TailClamp clamp(activations_);
  const auto [first, last] = geo_.columns_inside(3, S);
  const int64_t sp_in = in_.sp, sp_out = out_.sp;
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    const float* in_rows[3];  // each tap row's input row, or null above and below the image
    for (int ky = 0; ky < 3; ++ky) {
      const int64_t iy = oy * S - geo_.pad_t + ky;
      in_rows[ky] = iy >= 0 && iy < geo_.h ? xb + iy * geo_.w * sp_in : nullptr;
    }
    float* out_row = yb + oy * geo_.ow * sp_out;
    // One output of column `ox`, its input columns outside the image skipped.
    auto one = [&](int64_t ox) {
      const int64_t ix0 = ox * S - geo_.pad_l;
      const int kx_lo = static_cast<int>(std::clamp<int64_t>(-ix0, 0, 3));
      const int kx_hi = static_cast<int>(std::clamp<int64_t>(geo_.w - ix0, 0, 3));
      Vec acc = bias;
      for (int ky = 0; ky < 3; ++ky) {
        if (!in_rows[ky]) continue;
        Vec in[3] = {};
        for (int kx = kx_lo; kx < kx_hi; ++kx) in[kx] = load(in_rows[ky] + (ix0 + kx) * sp_in);
        one_output<G>(in, wb + ky * 3 * G * kLanes, kx_lo, kx_hi, acc);
      }
      store(out_row + ox * sp_out, clamp(acc));
    };
    int64_t ox = 0;
    for (; ox < first; ++ox) one(ox);
    // Four neighbouring outputs at once: their rows' input pixels loaded and permuted once.
    for (; ox + 4 <= last; ox += 4) {
      Vec a0 = bias, a1 = bias, a2 = bias, a3 = bias;
      const int64_t ix0 = ox * S - geo_.pad_l;
      for (int ky = 0; ky < 3; ++ky) {
        if (!in_rows[ky]) continue;
        const float* r = in_rows[ky] + ix0 * sp_in;
        Vec in[3 * S + 3];
#pragma GCC unroll 9
        for (int i = 0; i < 3 * S + 3; ++i) in[i] = load(r + i * sp_in);
        four_outputs<G, S>(in, wb + ky * 3 * G * kLanes, a0, a1, a2, a3);
      }
      float* o = out_row + ox * sp_out;
      store(o, clamp(a0));
      store(o + sp_out, clamp(a1));
      store(o + 2 * sp_out, clamp(a2));
      store(o + 3 * sp_out, clamp(a3));
    }
    for (; ox < geo_.ow; ++ox) one(ox);
    if (!clamp.clamp_only)
      for (int64_t i = 0; i < geo_.ow; ++i)
        store(out_row + i * sp_out, activate(activations_, load(out_row + i * sp_out)));
  }
}

void GroupedConv2d::run(const float* x, float* y) const {
  const int64_t blocks = geo_.c / kLanes;
  // Each thread an equal share of all output rows (for_each_row_share).
  auto rows_of = [&](auto kernel) {
    for_each_row_share(geo_.n * blocks, geo_.oh, [&](int64_t plane, int64_t oy0, int64_t oy1) {
      (this->*kernel)(x, y, plane / blocks, plane % blocks, oy0, oy1);
    });
  };
  if (width_ == 4 && geo_.stride == 1) rows_of(&GroupedConv2d::rows<4, 1>);
  if (width_ == 4 && geo_.stride == 2) rows_of(&GroupedConv2d::rows<4, 2>);
  if (width_ == 8 && geo_.stride == 2) rows_of(&GroupedConv2d::rows<8, 2>);
}

bool grouped_conv2d_fits(const ValueMemories& values, ValueId x, const Shape& xs, ValueId out) {
  const std::optional<dnnl::memory::desc> has = values.activation_layout(x, xs);
  const std::optional<dnnl::memory::desc> home = values.home_layout(out);
  return (!has || step_strides(*has)) && (!home || step_strides(*home));
}

void emit_grouped_conv2d(const Graph& g, const Node& conv, const std::vector<float>& bias,
                         const std::vector<PostOp>& ops, int64_t pad_t, int64_t pad_l, ValueId out,
                         ValueMemories& values) {
  const ValueId x = conv.input(0);
  const Shape& xs = g.value(x).shape;
  const Shape& ys = g.value(conv.outputs[0]).shape;
  // The input where its producer wrote it when the step walks that layout (a slice of a
  // concatenation done in place too), else converted to channels-last; the output likewise
  // where it has a home, else a dense buffer in the input's layout family.
  dnnl::memory::desc src_md(to_dims(xs), dnnl::memory::data_type::f32,
                            dnnl::memory::format_tag::nhwc);
  if (std::optional<dnnl::memory::desc> has = values.activation_layout(x, xs);
      has && step_strides(*has))
    src_md = *has;
  const bool blocked = step_strides(src_md)->sp == kLanes;  // (16 channels: the same bytes)
  dnnl::memory::desc dst_md = blocked
                                  ? channel_blocked_md(to_dims(ys))
                                  : dnnl::memory::desc(to_dims(ys), dnnl::memory::data_type::f32,
                                                       dnnl::memory::format_tag::nhwc);
  if (std::optional<dnnl::memory::desc> home = values.home_layout(out); home && step_strides(*home))
    dst_md = *home;
  const dnnl::memory src = values.read(x, src_md);
  const dnnl::memory dst = values.destination(out, dst_md);
  const std::optional<GroupedConvStrides> in = step_strides(src.get_desc()),
                                          to = step_strides(dst.get_desc());
  if (!in || !to) fail(ErrorKind::kInternal, "onednn: grouped conv got a layout it can't walk");
  auto step = std::make_shared<const GroupedConv2d>(xs, ys, g.value(conv.input(1)).constant, bias,
                                                    conv.attr_ints("strides", {1, 1})[0], pad_t,
                                                    pad_l, ops, *in, *to);
  add_conv_row_step(kGroupedConv2dStep, step, src, dst, out, values);
}

}  // namespace collage::onednn
