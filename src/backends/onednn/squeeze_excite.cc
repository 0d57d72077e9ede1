// Squeeze-excitation as one step (squeeze_excite.h says why).
#include "backends/onednn/squeeze_excite.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/onednn/kernels.h"
#include "collage/error.h"

namespace collage::onednn {
namespace {

using alg = dnnl::algorithm;

constexpr int64_t kLanes = 16;  // channels per share: one vector of floats

// The eltwise algorithms the step evaluates itself, on the squeezed vectors (a few hundred
// values: scalar code, std::exp).
bool evaluated_here(const PostOp& op) {
  if (op.kind != PostOp::Kind::kEltwise) return false;
  switch (op.alg) {
    case alg::eltwise_relu:
    case alg::eltwise_logistic:
    case alg::eltwise_swish:
    case alg::eltwise_hardswish:
    case alg::eltwise_linear:
    case alg::eltwise_clip:
    case alg::eltwise_clip_v2:
    case alg::eltwise_tanh:
    case alg::eltwise_elu:
    case alg::eltwise_gelu_erf:
    case alg::eltwise_gelu_tanh:
      return true;
    default:
      return false;
  }
}

// oneDNN 2.6's definitions (dnnl_types.h).
float evaluate(const PostOp& op, float x) {
  switch (op.alg) {
    case alg::eltwise_relu:
      return x > 0 ? x : x * op.alpha;
    case alg::eltwise_logistic:
      return 1.0f / (1.0f + std::exp(-x));
    case alg::eltwise_swish:
      return x / (1.0f + std::exp(-op.alpha * x));
    case alg::eltwise_hardswish:
      return x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    case alg::eltwise_linear:
      return op.alpha * x + op.beta;
    case alg::eltwise_clip:
    case alg::eltwise_clip_v2:
      return std::min(std::max(x, op.alpha), op.beta);
    case alg::eltwise_tanh:
      return std::tanh(x);
    case alg::eltwise_elu:
      return x > 0 ? x : op.alpha * (std::exp(x) - 1.0f);
    case alg::eltwise_gelu_erf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
    case alg::eltwise_gelu_tanh: {
      const float k = 0.79788456f;  // sqrt(2 / pi)
      return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    default:
      return x;  // not reached: evaluated_here() admitted the op
  }
}

float evaluate(const std::vector<PostOp>& ops, float x) {
  for (const PostOp& op : ops) x = evaluate(op, x);
  return x;
}

// A spatial mean keeping its axes: x [N, C, S...] -> [N, C, 1...].
bool spatial_mean(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1 || !is_f32(g, n.input(0)) ||
      !g.value(n.input(0)).shape_known)
    return false;
  const size_t rank = g.value(n.input(0)).shape.size();
  if (rank < 3 || rank > 5) return false;
  if (n.op_type == "GlobalAveragePool") return true;
  return n.op_type == "ReduceMean" && n.attr_int("keepdims", 1) == 1 && spatial_reduce(g, n);
}

// A 1x1 conv of one group over the one pixel of `in`, constant weights [K, C, 1...] (bias
// optional, constant), no padding: its output is [N, K, 1...].
bool pixel_conv(const Graph& g, const Node& n, ValueId in) {
  if (!n.domain.empty() || n.op_type != "Conv" || n.input(0) != in || n.outputs.size() != 1)
    return false;
  const Value& w = g.value(n.input(1));
  if (!w.is_constant() || w.dtype != DType::kFloat32) return false;
  if (n.input(2) != kNoValue &&
      (!g.value(n.input(2)).is_constant() || g.value(n.input(2)).dtype != DType::kFloat32))
    return false;
  const Shape& xs = g.value(in).shape;
  if (n.attr_int("group", 1) != 1 || w.constant.rank() != static_cast<int>(xs.size()) ||
      w.constant.dim(1) != xs[1])
    return false;
  for (int i = 2; i < w.constant.rank(); ++i)
    if (w.constant.dim(i) != 1 || xs[i] != 1) return false;
  const std::vector<int64_t> pads = n.attr_ints("pads");
  if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; })) return false;
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  return auto_pad == "NOTSET" || auto_pad == "VALID";
}

// The eltwise steps reading `*cur` up to the next node that is not one; false when a step
// is not evaluated here.
bool eltwise_steps(const Graph& g, const Consumers& consumers, ValueId* cur,
                   std::vector<NodeId>* nodes, std::vector<PostOp>* ops) {
  for (int k = 0; k < 8; ++k) {
    std::optional<TailStep> step = next_tail_step(g, consumers, *cur);
    if (!step) return true;
    if (step->reshape || !std::all_of(step->ops.begin(), step->ops.end(), evaluated_here))
      return false;
    nodes->insert(nodes->end(), step->nodes.begin(), step->nodes.end());
    ops->insert(ops->end(), step->ops.begin(), step->ops.end());
    *cur = step->out;
  }
  return false;
}

}  // namespace

std::optional<SqueezeExcite> match_squeeze_excite(const Graph& g, const Consumers& consumers,
                                                  NodeId mean) {
  const Node& m = g.node(mean);
  if (!spatial_mean(g, m)) return std::nullopt;
  SqueezeExcite se;
  se.x = m.input(0);
  se.reduce = mean;
  se.nodes = {mean};
  ValueId cur = m.outputs[0];
  se.squeeze = sole_reader(g, consumers, cur);
  if (se.squeeze < 0 || !pixel_conv(g, g.node(se.squeeze), cur)) return std::nullopt;
  se.nodes.push_back(se.squeeze);
  cur = g.node(se.squeeze).outputs[0];
  if (!eltwise_steps(g, consumers, &cur, &se.nodes, &se.act)) return std::nullopt;
  se.excite = sole_reader(g, consumers, cur);
  if (se.excite < 0 || !pixel_conv(g, g.node(se.excite), cur)) return std::nullopt;
  se.nodes.push_back(se.excite);
  cur = g.node(se.excite).outputs[0];
  if (g.value(cur).shape != g.value(m.outputs[0]).shape) return std::nullopt;  // C -> C
  if (!eltwise_steps(g, consumers, &cur, &se.nodes, &se.gate)) return std::nullopt;
  const NodeId mul = sole_reader(g, consumers, cur);
  if (mul < 0) return std::nullopt;
  const Node& mn = g.node(mul);
  const bool operands = mn.inputs.size() == 2 && ((mn.inputs[0] == cur && mn.inputs[1] == se.x) ||
                                                  (mn.inputs[0] == se.x && mn.inputs[1] == cur));
  if (!mn.domain.empty() || mn.op_type != "Mul" || !operands || mn.outputs.size() != 1 ||
      g.value(mn.outputs[0]).shape != g.value(se.x).shape)
    return std::nullopt;
  se.nodes.push_back(mul);
  se.out = mn.outputs[0];
  std::sort(se.nodes.begin(), se.nodes.end());
  if (se.nodes.front() != mean) return std::nullopt;  // the mean heads the group
  return se;
}

std::vector<Match> grow_squeeze_excite(const Graph& g) {
  const Consumers consumers = g.consumers();
  std::vector<Match> out;
  for (size_t n = 0; n < g.num_nodes(); ++n)
    if (std::optional<SqueezeExcite> se =
            match_squeeze_excite(g, consumers, static_cast<NodeId>(n)))
      out.push_back(Match{se->nodes});
  return out;
}

namespace {

// The block `subgraph` is, when it is exactly one (all its nodes, its one output).
std::optional<SqueezeExcite> whole_block(const Graph& subgraph) {
  if (subgraph.num_nodes() < 4) return std::nullopt;
  std::optional<SqueezeExcite> se = match_squeeze_excite(subgraph, subgraph.consumers(), 0);
  if (!se || se->nodes.size() != subgraph.num_nodes() || subgraph.outputs.size() != 1 ||
      subgraph.outputs[0] != se->out)
    return std::nullopt;
  return se;
}

}  // namespace

bool squeeze_excite_group(const Graph& subgraph) {
  return whole_block(subgraph).has_value();
}

namespace {

// Where element (n, c, p) of a tensor [N, C, S...] lies, its spatial axes seen as one (p):
// offset + n*sn + c*sc + p*sp, either sc == 1 (channels-last) or sp == 1 (channel-major);
// or, channel-blocked (`blocked`: oneDNN's nChw16c, what its jit kernels write in a region
// built blocked), offset + n*sn + (c / 16)*sc + p*16 + c % 16.
struct Strides {
  int64_t sn = 0, sc = 0, sp = 0, offset = 0;
  bool blocked = false;
};

// `md` as Strides, when its spatial axes are dense among themselves with a unit channel or
// spatial stride and it has no inner blocks, or when it is channel-blocked by 16 with the
// pixels of a block dense.
std::optional<Strides> strides_of(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.data_type != dnnl_f32 || d.ndims < 3) return std::nullopt;
  const auto& s = d.format_desc.blocking.strides;
  const auto& blocking = d.format_desc.blocking;
  if (blocking.inner_nblks == 1 && blocking.inner_idxs[0] == 1 &&
      blocking.inner_blks[0] == kLanes) {
    int64_t dense = kLanes;
    for (int i = d.ndims - 1; i >= 2; --i) {
      if (d.dims[i] != 1 && s[i] != dense) return std::nullopt;
      dense *= d.dims[i];
    }
    return Strides{s[0], s[1], kLanes, d.offset0, true};
  }
  if (blocking.inner_nblks != 0) return std::nullopt;
  for (int i = 2; i + 1 < d.ndims; ++i)
    if (d.dims[i + 1] != 1 && s[i] != s[i + 1] * d.dims[i + 1]) return std::nullopt;
  const Strides out{s[0], s[1], s[d.ndims - 1], d.offset0};
  // One channel or one pixel: either reading works; say which loop to use.
  if (out.sc == 1 || d.dims[1] == 1) return Strides{out.sn, 1, out.sp, out.offset};
  int64_t pixels = 1;
  for (int i = 2; i < d.ndims; ++i) pixels *= d.dims[i];
  if (out.sp == 1 || pixels == 1) return Strides{out.sn, out.sc, 1, out.offset};
  return std::nullopt;
}

class SqueezeExciteStep {
 public:
  SqueezeExciteStep(int64_t n, int64_t c, int64_t pixels, const Tensor& w1, const Tensor* b1,
                    std::vector<PostOp> act, const Tensor& w2, const Tensor* b2,
                    std::vector<PostOp> gate, Strides in, Strides out)
      : n_(n),
        c_(c),
        r_(w1.dim(0)),
        pixels_(pixels),
        act_(std::move(act)),
        gate_(std::move(gate)),
        in_(in),
        out_(out) {
    const float* w1d = w1.data<float>();
    w1_.assign(w1d, w1d + r_ * c_);
    b1_.assign(r_, 0.0f);
    if (b1) std::copy_n(b1->data<float>(), r_, b1_.begin());
    // W2 [C, R] kept as [R, C]: the excitation is computed over contiguous channels.
    const float* w2d = w2.data<float>();
    w2t_.resize(r_ * c_);
    for (int64_t k = 0; k < c_; ++k)
      for (int64_t j = 0; j < r_; ++j) w2t_[j * c_ + k] = w2d[k * r_ + j];
    b2_.assign(c_, 0.0f);
    if (b2) std::copy_n(b2->data<float>(), c_, b2_.begin());
    threads_ = std::max(1, omp_get_max_threads());
    means_.assign(n_ * c_, 0.0f);
    scales_.assign(n_ * c_, 0.0f);
    squeezed_.assign(n_ * r_, 0.0f);
    padded_c_ = (c_ + kLanes - 1) / kLanes * kLanes;
    thread_floats_ = (n_ + 2) * padded_c_;
    buffers_ = dnnl::memory({{static_cast<int64_t>(threads_) * thread_floats_}, dt::f32, tag::a},
                            cpu_engine());
    std::fill_n(static_cast<float*>(buffers_.get_data_handle()), threads_ * thread_floats_, 0.0f);
  }

  dnnl_status_t run(const float* x, float* y) {
    if (omp_in_parallel()) {  // a lane of a concurrent stage: this thread alone
      compute(0, 1, x, y);
      return dnnl_success;
    }
    const int team = std::max(1, std::min(omp_get_max_threads(), threads_));
    if (team == 1) {
      compute(0, 1, x, y);
      return dnnl_success;
    }
#pragma omp parallel num_threads(team)
    compute(omp_get_thread_num(), omp_get_num_threads(), x, y);
    return dnnl_success;
  }

 private:
  // Thread `t` of `team`, in four phases with a barrier between them: the sums (channels-
  // last: over the thread's run of pixels, contiguous memory, into partial sums of its own;
  // channel-major: over the planes of its share of the channels), its share of the squeeze's
  // rows, its share of the excitation's channels, and the product (over its pixels, or its
  // channels; channel-major needs no barrier before it). Split by channels, channels-last
  // threads read and wrote alternate cache lines of each pixel, which the adjacent-line
  // prefetch made them fight over: 0.3 ms for EfficientNet-B0's 32-channel 112x112 block
  // inside the model, 0.07 now.
  void compute(int t, int team, const float* x, float* y) {
    const int64_t blocks = (c_ + kLanes - 1) / kLanes;
    const int64_t c0 = std::min(c_, blocks * t / team * kLanes),
                  c1 = std::min(c_, blocks * (t + 1) / team * kLanes);
    const bool by_pixels = in_.sc == 1;
    const int64_t p0 = by_pixels ? pixels_ * t / team : 0,
                  p1 = by_pixels ? pixels_ * (t + 1) / team : pixels_;
    for (int64_t n = 0; n < n_; ++n) {
      if (by_pixels)
        sum_pixels(x, t, n, p0, p1);
      else
        sum_planes(x, n, c0, c1);
    }
    // The squeeze's rows shared out too: both its weight matrices are read from memory on
    // each run (a model's weights do not stay in cache), 0.2 MB each in EfficientNet-B0's
    // last blocks, so each thread reads half of W1 and its share of W2.
    const int64_t j0 = r_ * t / team, j1 = r_ * (t + 1) / team;
    if (team > 1) {
#pragma omp barrier
    }
    for (int64_t n = 0; n < n_; ++n) squeeze(t, n, team, by_pixels, j0, j1);
    if (team > 1) {
#pragma omp barrier
    }
    for (int64_t n = 0; n < n_; ++n) excite(t, n, c0, c1);
    if (by_pixels && team > 1) {
#pragma omp barrier
    }
    for (int64_t n = 0; n < n_; ++n)
      scale(x, y, n, by_pixels ? 0 : c0, by_pixels ? c_ : c1, p0, p1);
  }

  // Channels-last: the sums over pixels [p0, p1) of every channel, into the thread's own
  // partial sums.
  void sum_pixels(const float* x, int t, int64_t n, int64_t p0, int64_t p1) {
    float* __restrict acc = partial(t, n);
    const float* xn = x + in_.offset + n * in_.sn;
    std::fill(acc, acc + c_, 0.0f);
    for (int64_t p = p0; p < p1; ++p) {
      const float* __restrict row = xn + p * in_.sp;
#pragma omp simd
      for (int64_t c = 0; c < c_; ++c) acc[c] += row[c];
    }
  }

  // Channel-major: the means of channels [c0, c1), over their contiguous planes.
  // Channel-blocked: over the pixels of their blocks (c0 starts one), 16 channels at once.
  void sum_planes(const float* x, int64_t n, int64_t c0, int64_t c1) {
    const float* xn = x + in_.offset + n * in_.sn;
    float* s = means_.data() + n * c_;
    const float inv = 1.0f / static_cast<float>(pixels_);
    if (in_.blocked) {
      for (int64_t b0 = c0; b0 < c1; b0 += kLanes) {
        const float* __restrict block = xn + b0 / kLanes * in_.sc;
        float acc[kLanes] = {};
        for (int64_t p = 0; p < pixels_; ++p) {
#pragma omp simd
          for (int64_t l = 0; l < kLanes; ++l) acc[l] += block[p * kLanes + l];
        }
        for (int64_t c = b0; c < std::min(c1, b0 + kLanes); ++c) s[c] = acc[c - b0] * inv;
      }
      return;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const float* __restrict plane = xn + c * in_.sc;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t p = 0; p < pixels_; ++p) sum += plane[p];
      s[c] = sum * inv;
    }
  }

  // h[j0, j1) = act(W1 mean + b1); channels-last, the mean is gathered from every thread's
  // partial sums first (into the thread's own buffer).
  void squeeze(int t, int64_t n, int team, bool by_pixels, int64_t j0, int64_t j1) {
    float* h = squeezed_.data() + n * r_;
    const float* s = means_.data() + n * c_;
    if (by_pixels) {
      float* __restrict mean = gathered(t);
      const float inv = 1.0f / static_cast<float>(pixels_);
      std::fill(mean, mean + c_, 0.0f);
      for (int u = 0; u < team; ++u) {
        const float* __restrict pu = partial(u, n);
#pragma omp simd
        for (int64_t c = 0; c < c_; ++c) mean[c] += pu[c];
      }
#pragma omp simd
      for (int64_t c = 0; c < c_; ++c) mean[c] *= inv;
      s = mean;
    }
    for (int64_t j = j0; j < j1; ++j) {
      const float* __restrict w = w1_.data() + j * c_;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < c_; ++c) sum += w[c] * s[c];
      h[j] = evaluate(act_, sum + b1_[j]);
    }
  }

  // g = gate(W2 h + b2) for channels [c0, c1), summed in the thread's own buffer and written
  // once.
  void excite(int t, int64_t n, int64_t c0, int64_t c1) {
    const float* h = squeezed_.data() + n * r_;
    float* __restrict acc = gathered(t) + padded_c_;
    const int64_t width = c1 - c0;
    std::copy(b2_.begin() + c0, b2_.begin() + c1, acc);
    for (int64_t j = 0; j < r_; ++j) {
      const float* __restrict w = w2t_.data() + j * c_ + c0;
      const float hj = h[j];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) acc[c] += w[c] * hj;
    }
    float* g = scales_.data() + n * c_;
    for (int64_t c = 0; c < width; ++c) g[c0 + c] = evaluate(gate_, acc[c]);
  }

  // y = x * g over channels [c0, c1) and pixels [p0, p1); x and y both channels-last or both
  // channel-major.
  void scale(const float* x, float* y, int64_t n, int64_t c0, int64_t c1, int64_t p0,
             int64_t p1) const {
    const float* g = scales_.data() + n * c_;
    const float* xn = x + in_.offset + n * in_.sn;
    float* yn = y + out_.offset + n * out_.sn;
    if (in_.sc == 1 && out_.sc == 1) {
      for (int64_t p = p0; p < p1; ++p) {
        const float* xr = xn + p * in_.sp;
        float* yr = yn + p * out_.sp;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) yr[c] = xr[c] * g[c];
      }
    } else if (in_.blocked) {  // both channel-blocked; a block's lanes past C stay zero
      for (int64_t b0 = c0; b0 < c1; b0 += kLanes) {
        const float* __restrict xb = xn + b0 / kLanes * in_.sc;
        float* __restrict yb = yn + b0 / kLanes * out_.sc;
        float gb[kLanes] = {};
        std::copy(g + b0, g + std::min(c_, b0 + kLanes), gb);
        for (int64_t p = p0; p < p1; ++p) {
#pragma omp simd
          for (int64_t l = 0; l < kLanes; ++l) yb[p * kLanes + l] = xb[p * kLanes + l] * gb[l];
        }
      }
    } else {  // both channel-major (emit_squeeze_excite gives x and y the same order)
      for (int64_t c = c0; c < c1; ++c) {
        const float* xp = xn + c * in_.sc;
        float* yp = yn + c * out_.sc;
        const float gc = g[c];
#pragma omp simd
        for (int64_t p = p0; p < p1; ++p) yp[p] = xp[p] * gc;
      }
    }
  }

  // Per thread, in whole 64-byte lines no other thread writes: partial sums [N, C'], then two
  // vectors [C'] (the gathered mean, the excitation); C' = C rounded up to 16.
  float* thread_buffer(int t) const {
    return static_cast<float*>(buffers_.get_data_handle()) + t * thread_floats_;
  }
  float* partial(int t, int64_t n) const {
    return thread_buffer(t) + n * padded_c_;
  }
  float* gathered(int t) const {
    return thread_buffer(t) + n_ * padded_c_;
  }

  int64_t n_, c_, r_, pixels_;
  std::vector<float> w1_, b1_, w2t_, b2_;
  std::vector<PostOp> act_, gate_;
  Strides in_, out_;
  int threads_ = 1;
  std::vector<float> means_, scales_;  // [N, C]: each thread writes its channels
  std::vector<float> squeezed_;        // [N, R]: each thread writes its rows
  int64_t padded_c_ = 0, thread_floats_ = 0;
  dnnl::memory buffers_;  // thread_buffer()s; oneDNN aligns its buffers to 64 bytes
};

// `shape` dense, channels-last when `channels_last`, else row-major.
dnnl::memory::desc dense_md(const Shape& shape, bool channels_last) {
  if (!channels_last) return plain_md(shape);
  static const tag kChannelsLast[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  return dnnl::memory::desc(to_dims(shape), dt::f32, kChannelsLast[shape.size() - 3]);
}

}  // namespace

void emit_squeeze_excite(const Graph& sub, ValueMemories& values) {
  const std::optional<SqueezeExcite> se = whole_block(sub);
  if (!se) fail(ErrorKind::kUnsupported, "onednn: not a squeeze-excitation block");
  const Shape& xs = sub.value(se->x).shape;
  const int64_t pixels = std::accumulate(xs.begin() + 2, xs.end(), int64_t{1}, std::multiplies<>());

  // x where its producer wrote it when the step reads that layout (channels-last or
  // row-major, a slice of a wider buffer too, or channel-blocked as a region built blocked
  // writes it), else converted to channels-last; the output dense in the same layout
  // (values.destination copies it on where it is wanted elsewhere).
  dnnl::memory::desc src_md = dense_md(xs, true);
  if (std::optional<dnnl::memory::desc> has = values.activation_layout(se->x, xs);
      !has || strides_of(*has))
    src_md = has ? *has : plain_md(xs);
  const dnnl::memory src = values.read(se->x, src_md);
  const std::optional<Strides> in = strides_of(src.get_desc());
  if (!in) fail(ErrorKind::kInternal, "onednn: squeeze-excitation got a layout it can't read");
  // Over x itself where nothing reads x after the block: the product then writes lines the
  // mean has just brought into cache, not a second buffer's.
  const dnnl::memory::desc dst_md =
      in->blocked ? channel_blocked_md(to_dims(xs)) : dense_md(xs, in->sc == 1 && xs[1] > 1);
  const dnnl::memory dst =
      values.can_overwrite(se->x, src, se->out, dst_md) ? src : values.destination(se->out, dst_md);
  const std::optional<Strides> out = strides_of(dst.get_desc());
  if (!out || (out->sc == 1) != (in->sc == 1) || out->blocked != in->blocked)
    fail(ErrorKind::kInternal, "onednn: squeeze-excitation output in another layout");

  auto constant = [&](NodeId conv, size_t i) -> const Tensor* {
    const ValueId v = sub.node(conv).input(i);
    return v == kNoValue ? nullptr : &sub.value(v).constant;
  };
  auto step = std::make_shared<SqueezeExciteStep>(
      xs[0], xs[1], pixels, *constant(se->squeeze, 1), constant(se->squeeze, 2), se->act,
      *constant(se->excite, 1), constant(se->excite, 2), se->gate, *in, *out);
  values.program().add_unary_custom(
      kSqueezeExciteStep, [step](const float* x, float* y) { return step->run(x, y); }, src, dst);
  values.produced(se->out, dst);
}

std::unique_ptr<Kernel> compile_squeeze_excite(const Graph& subgraph) {
  return compile_group(subgraph, emit_squeeze_excite);
}

}  // namespace collage::onednn
