// GroupNorm and InstanceNormalization as one step (group_norm.h says why).
#include "backends/onednn/group_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "backends/onednn/kernels.h"
#include "collage/error.h"
#include "ops/nn_util.h"
#include "util/fast_math.h"

namespace collage::onednn {
namespace {

// How a step's tensor is laid out: [N, C, spatial] row-major, or channels-last [N, spatial, C]
// (what oneDNN's brgconv and collage's Winograd write in a region).
enum class Layout { kPlanar, kChannelsLast };

struct PlaneSplit {
  int64_t images, groups, per_group, inner;  // inner: the spatial size
};

// y = (x - mean) / sqrt(var + eps) * scale[c] + shift[c] [then SiLU] over groups of
// `per_group` channels, the statistics per (image, group) over its channels and space
// (population variance, two passes, accumulated in double as the reference backend does).
class GroupNormStep {
 public:
  GroupNormStep(PlaneSplit split, Layout layout, float epsilon, std::vector<float> scale,
                std::vector<float> shift, bool silu)
      : split_(split),
        layout_(layout),
        epsilon_(epsilon),
        scale_(std::move(scale)),
        shift_(std::move(shift)),
        silu_(silu) {}

  dnnl_status_t run(const float* x, float* y) const {
    const int64_t planes = split_.images * split_.groups;
    const int64_t plane = split_.per_group * split_.inner;
    // On the calling thread alone inside a team (a lane of a concurrent stage) and for small
    // tensors, where a fork/join of the OpenMP team (2-4 us here) costs more than the work.
    const int team =
        omp_in_parallel() || planes * plane < kParallelFloats ? 1 : omp_get_max_threads();
    if (layout_ == Layout::kChannelsLast) {
      for (int64_t n = 0; n < split_.images; ++n)
        channels_last(team, x + n * split_.groups * plane, y + n * split_.groups * plane);
      return dnnl_success;
    }
    // Row-major: a plane per thread where there are enough, else each plane's range split.
    if (planes >= team) {
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
      for (int64_t p = 0; p < planes; ++p) planar(p, 1, x + p * plane, y + p * plane);
    } else {
      for (int64_t p = 0; p < planes; ++p) planar(p, team, x + p * plane, y + p * plane);
    }
    return dnnl_success;
  }

 private:
  static constexpr int64_t kParallelFloats = 32 * 1024;
  static constexpr int kLanes = 8;  // partial sums GCC keeps in one AVX-512 register of doubles

  // Sum of f(x[i]) over n floats in kLanes partial sums (vectorized), then the tail.
  template <typename F>
  static double lane_sum(const float* x, int64_t n, F f) {
    double part[kLanes] = {};
    const int64_t body = n - n % kLanes;
    for (int64_t j = 0; j < body; j += kLanes)
      for (int l = 0; l < kLanes; ++l) part[l] += f(static_cast<double>(x[j + l]));
    double sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += part[l];
    for (int64_t j = body; j < n; ++j) sum += f(static_cast<double>(x[j]));
    return sum;
  }

  // The same over n floats split into `team` ranges summed by that many threads.
  template <typename F>
  static double team_sum(int team, const float* x, int64_t n, F f) {
    if (team <= 1) return lane_sum(x, n, f);
    double sum = 0;
#pragma omp parallel for num_threads(team) reduction(+ : sum) schedule(static)
    for (int t = 0; t < team; ++t) {
      const int64_t begin = n * t / team, end = n * (t + 1) / team;
      sum += lane_sum(x + begin, end - begin, f);
    }
    return sum;
  }

  // y[i] = x[i] * a + b [then SiLU] over n floats.
  void affine(const float* x, float* y, int64_t n, float a, float b) const {
    if (!silu_) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const float z = x[i] * a + b;
      y[i] = z * fast_sigmoid(z);
    }
  }

  // The a, b of channel c of a group of mean `mean` and 1 / sqrt(var + eps) `inv_std`.
  std::pair<float, float> coefficients(int64_t c, double mean, double inv_std) const {
    return {static_cast<float>(inv_std * scale_[c]),
            static_cast<float>(shift_[c] - mean * inv_std * scale_[c])};
  }

  // Plane p (row-major), its sums and its writing split over `team` threads.
  void planar(int64_t p, int team, const float* x, float* y) const {
    const int64_t n = split_.per_group * split_.inner;
    const double mean = team_sum(team, x, n, [](double v) { return v; }) / static_cast<double>(n);
    const double var = team_sum(team, x, n, [mean](double v) { return (v - mean) * (v - mean); }) /
                       static_cast<double>(n);
    const double inv_std = 1.0 / std::sqrt(var + static_cast<double>(epsilon_));
    const int64_t first = (p % split_.groups) * split_.per_group;  // the plane's first channel
    // Each thread writes a range of the plane, channel by channel within it.
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
    for (int t = 0; t < team; ++t) {
      const int64_t begin = n * t / team, end = n * (t + 1) / team;
      for (int64_t i = begin; i < end;) {
        const int64_t k = i / split_.inner, stop = std::min(end, (k + 1) * split_.inner);
        const auto [a, b] = coefficients(first + k, mean, inv_std);
        affine(x + i, y + i, stop - i, a, b);
        i = stop;
      }
    }
  }

  // One image, channels-last: per-channel sums over the pixels (vectorized along the
  // channels; the team splits the pixels and adds its partial sums), reduced per group; the
  // same for the squared deviations; then each pixel's channels written.
  void channels_last(int team, const float* x, float* y) const {
    const int64_t channels = split_.groups * split_.per_group, pixels = split_.inner;
    const double count = static_cast<double>(split_.per_group * pixels);
    std::vector<double> mean(static_cast<size_t>(channels)), var(static_cast<size_t>(channels));
    auto per_group = [&](auto deviation, std::vector<double>& out) {
      std::vector<double> sums(static_cast<size_t>(channels), 0.0);
      double* s = sums.data();
#pragma omp parallel for num_threads(team) reduction(+ : s[:channels]) schedule(static) if (team > 1)
      for (int64_t p = 0; p < pixels; ++p) {
        const float* row = x + p * channels;
        for (int64_t c = 0; c < channels; ++c) s[c] += deviation(c, static_cast<double>(row[c]));
      }
      for (int64_t g = 0; g < split_.groups; ++g) {
        double total = 0;
        for (int64_t k = 0; k < split_.per_group; ++k) total += s[g * split_.per_group + k];
        for (int64_t k = 0; k < split_.per_group; ++k)
          out[g * split_.per_group + k] = total / count;
      }
    };
    per_group([](int64_t, double v) { return v; }, mean);
    per_group([&](int64_t c, double v) { return (v - mean[c]) * (v - mean[c]); }, var);
    std::vector<float> a(static_cast<size_t>(channels)), b(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const double inv = 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
      std::tie(a[c], b[c]) = coefficients(c, mean[c], inv);
    }
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
    for (int64_t p = 0; p < pixels; ++p) {
      const float* row = x + p * channels;
      float* out = y + p * channels;
      if (!silu_) {
        for (int64_t c = 0; c < channels; ++c) out[c] = row[c] * a[c] + b[c];
      } else {
        for (int64_t c = 0; c < channels; ++c) {
          const float z = row[c] * a[c] + b[c];
          out[c] = z * fast_sigmoid(z);
        }
      }
    }
  }

  PlaneSplit split_;
  Layout layout_;
  float epsilon_;
  std::vector<float> scale_, shift_;  // per channel of one image
  bool silu_;
};

// The per-channel values of constant `v` broadcast against x of shape `xs` ([N, C, ...]):
// one value, or C along axis 1 (right-aligned, every other axis 1); nullopt otherwise.
std::optional<std::vector<float>> per_channel(const Graph& g, ValueId v, const Shape& xs) {
  if (v == kNoValue || !g.value(v).is_constant() || g.value(v).dtype != DType::kFloat32)
    return std::nullopt;
  const Shape& s = g.value(v).shape;
  if (s.size() > xs.size()) return std::nullopt;
  const Shape p = pad_rank(s, xs.size());
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != 1 && i != 1) return std::nullopt;
  const std::vector<float> values = g.value(v).constant.to_float_vector();
  if (p[1] == xs[1]) return values;
  if (p[1] == 1) return std::vector<float>(static_cast<size_t>(xs[1]), values[0]);
  return std::nullopt;
}

// Node `n` is `type` reading `cur` and a per-channel constant of x's shape: that constant.
std::optional<std::vector<float>> affine_operand(const Graph& g, const Node& n, const char* type,
                                                 ValueId cur, const Shape& xs) {
  if (n.op_type != type || n.inputs.size() != 2 || n.outputs.size() != 1 ||
      g.value(n.outputs[0]).shape != xs)
    return std::nullopt;
  if (n.input(0) == cur) return per_channel(g, n.input(1), xs);
  if (n.input(1) == cur) return per_channel(g, n.input(0), xs);
  return std::nullopt;
}

// A group norm's planes over x [N, C, ...]: `groups` groups of C / groups channels.
PlaneSplit split_of(const Shape& xs, int64_t groups) {
  return {xs[0], groups, xs[1] / groups, ops::nn::dims_product(xs, 2, xs.size())};
}

void add_step(const Graph& sub, ValueId x, ValueId out, const PlaneSplit& split, float epsilon,
              std::vector<float> scale, std::vector<float> shift, bool silu,
              ValueMemories& values) {
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: group norm input");
  // Channels-last where its producer wrote that (a conv in a region): the reorders to and from
  // row-major around it took a third as long as the diffusion-style VAE decoder's convs
  // (group_norm.h); else row-major. The output in the same layout.
  const Shape& xs = sub.value(x).shape;
  const std::optional<dnnl::memory::desc> last = channels_last_md(xs);
  const Layout layout =
      last && values.activation_layout(x, xs) == last ? Layout::kChannelsLast : Layout::kPlanar;
  const dnnl::memory::desc md = layout == Layout::kChannelsLast ? *last : plain_md(xs);
  const dnnl::memory src = values.read(x, md);
  const dnnl::memory dst = values.destination(out, md);
  if (!flat_f32(src, shape_numel(xs)) || !flat_f32(dst, shape_numel(xs)))
    fail(ErrorKind::kInternal, "onednn: group norm got a layout it can't walk");
  auto step = std::make_shared<const GroupNormStep>(split, layout, epsilon, std::move(scale),
                                                    std::move(shift), silu);
  values.program().add_unary_custom(
      kGroupNormStep, [step](const float* x, float* y) { return step->run(x, y); }, src, dst);
  values.produced(out, dst);
}

}  // namespace

std::optional<GroupNorm> match_group_norm(const Graph& g, const Consumers& consumers,
                                          NodeId reshape) {
  const Node& r1 = g.node(reshape);
  if (r1.op_type != "Reshape" || !r1.domain.empty() || r1.outputs.size() != 1 ||
      !is_f32(g, r1.input(0)))
    return std::nullopt;
  const Value& xv = g.value(r1.input(0));
  const Value& planes = g.value(r1.outputs[0]);
  if (!xv.shape_known || !planes.shape_known || xv.shape.size() < 2 || planes.shape.size() != 3)
    return std::nullopt;
  const Shape& xs = xv.shape;
  const int64_t groups = planes.shape[1];
  if (planes.shape[0] != xs[0] || groups <= 0 || xs[1] % groups != 0 ||
      planes.shape[2] != xs[1] / groups * ops::nn::dims_product(xs, 2, xs.size()))
    return std::nullopt;
  const NodeId norm = sole_reader(g, consumers, r1.outputs[0]);
  if (norm < 0 || !instance_norm_takes(g, g.node(norm)) || g.node(norm).input(0) != r1.outputs[0])
    return std::nullopt;
  const Node& in = g.node(norm);
  const std::vector<float> in_scale = g.value(in.input(1)).constant.to_float_vector();
  const std::vector<float> in_shift = g.value(in.input(2)).constant.to_float_vector();
  const NodeId back = sole_reader(g, consumers, in.outputs[0]);
  if (back < 0 || g.node(back).op_type != "Reshape" || g.node(back).outputs.size() != 1 ||
      !g.value(g.node(back).outputs[0]).shape_known || g.value(g.node(back).outputs[0]).shape != xs)
    return std::nullopt;
  GroupNorm gn;
  gn.nodes = {reshape, norm, back};
  gn.x = r1.input(0);
  gn.out = g.node(back).outputs[0];
  gn.groups = groups;
  gn.epsilon = in.attr_float("epsilon", 1e-5f);
  const int64_t per_group = xs[1] / groups;
  for (int64_t c = 0; c < xs[1]; ++c) {
    gn.scale.push_back(in_scale[static_cast<size_t>(c / per_group)]);
    gn.shift.push_back(in_shift[static_cast<size_t>(c / per_group)]);
  }
  // The affine after it: x * gamma, then + beta, each where it reads the value before alone.
  if (const NodeId mul = sole_reader(g, consumers, gn.out); mul >= 0) {
    if (std::optional<std::vector<float>> gamma =
            affine_operand(g, g.node(mul), "Mul", gn.out, xs)) {
      for (size_t c = 0; c < gn.scale.size(); ++c) {
        gn.scale[c] *= (*gamma)[c];
        gn.shift[c] *= (*gamma)[c];
      }
      gn.nodes.push_back(mul);
      gn.out = g.node(mul).outputs[0];
    }
  }
  if (const NodeId add = sole_reader(g, consumers, gn.out); add >= 0) {
    if (std::optional<std::vector<float>> beta =
            affine_operand(g, g.node(add), "Add", gn.out, xs)) {
      for (size_t c = 0; c < gn.shift.size(); ++c) gn.shift[c] += (*beta)[c];
      gn.nodes.push_back(add);
      gn.out = g.node(add).outputs[0];
    }
  }
  // A SiLU after it (x * Sigmoid(x), as PyTorch exports F.silu): a diffusion UNet's every
  // GroupNorm has one.
  if (!is_graph_output(g, gn.out)) {
    if (std::optional<TailStep> silu = match_swish(g, consumers, gn.out, /*whole_reader=*/true);
        silu && silu->ops.size() == 1 && silu->ops[0].alg == dnnl::algorithm::eltwise_swish &&
        silu->ops[0].alpha == 1.0f) {
      gn.nodes.insert(gn.nodes.end(), silu->nodes.begin(), silu->nodes.end());
      gn.out = silu->out;
      gn.silu = true;
    }
  }
  std::sort(gn.nodes.begin(), gn.nodes.end());
  return gn;
}

std::vector<Match> grow_group_norm(const Graph& g) {
  const Consumers consumers = g.consumers();
  std::vector<Match> out;
  for (size_t n = 0; n < g.num_nodes(); ++n)
    if (std::optional<GroupNorm> gn = match_group_norm(g, consumers, static_cast<NodeId>(n)))
      out.push_back(Match{gn->nodes});
  return out;
}

namespace {

// The GroupNorm that all of `sub` is, or nullopt.
std::optional<GroupNorm> whole_group_norm(const Graph& sub) {
  if (sub.num_nodes() < 3) return std::nullopt;
  std::optional<GroupNorm> gn = match_group_norm(sub, sub.consumers(), 0);
  if (!gn || gn->nodes.size() != sub.num_nodes() || sub.outputs != std::vector<ValueId>{gn->out})
    return std::nullopt;
  return gn;
}

}  // namespace

bool group_norm_group(const Graph& sub) {
  return whole_group_norm(sub).has_value();
}

void emit_group_norm(const Graph& sub, ValueMemories& values) {
  std::optional<GroupNorm> whole = whole_group_norm(sub);
  if (!whole) fail(ErrorKind::kUnsupported, "onednn: not a GroupNorm decomposition it knows");
  GroupNorm& gn = *whole;
  add_step(sub, gn.x, gn.out, split_of(sub.value(gn.x).shape, gn.groups), gn.epsilon,
           std::move(gn.scale), std::move(gn.shift), gn.silu, values);
}

void emit_instance_norm_step(const Graph& sub, const Node& node, ValueMemories& values) {
  if (!instance_norm_takes(sub, node))
    fail(ErrorKind::kUnsupported, "onednn: InstanceNormalization with non-constant parameters");
  const Shape& xs = sub.value(node.input(0)).shape;
  add_step(sub, node.input(0), node.outputs[0], split_of(xs, xs[1]),
           node.attr_float("epsilon", 1e-5f), sub.value(node.input(1)).constant.to_float_vector(),
           sub.value(node.input(2)).constant.to_float_vector(), /*silu=*/false, values);
}

}  // namespace collage::onednn
