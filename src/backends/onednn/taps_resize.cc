#include "backends/onednn/taps_resize.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"
#include "collage/error.h"
#include "ops/elementwise_util.h"
#include "ops/tensor_util.h"

namespace collage::onednn {
namespace {

using ops::elem::kParallelThreshold;

// One resized axis: output coordinate o reads input indices index[start[o] .. start[o + 1])
// with their weights (taps of weight 0, a cubic kernel's at a whole coordinate, dropped).
struct AxisTaps {
  std::vector<int64_t> start, index;
  std::vector<float> weight;
  bool nearest = true;  // one tap of weight 1 per output coordinate
};

// The reference's taps of an axis, or nullopt when an output coordinate samples outside the
// input (extrapolation).
std::optional<AxisTaps> axis_taps(const ops::ResizeTaps::Dim& d, int64_t out) {
  AxisTaps a;
  a.start.push_back(0);
  for (int64_t o = 0; o < out; ++o) {
    if (d.outside[o]) return std::nullopt;
    int64_t kept = 0;
    for (size_t j = d.start[o]; j < d.start[o + 1]; ++j) {
      if (d.weight[j] == 0) continue;
      a.index.push_back(d.index[j]);
      a.weight.push_back(static_cast<float>(d.weight[j]));
      a.nearest = a.nearest && d.weight[j] == 1;
      ++kept;
    }
    a.nearest = a.nearest && kept == 1;
    a.start.push_back(static_cast<int64_t>(a.index.size()));
  }
  return a;
}

// Whether the taps of an axis of `size` read each coordinate itself (the batch and channel
// axes, which the step does not resize): weights summing to 1 on it, none elsewhere. (Taps
// clamped at the edge repeat an index: a cubic kernel on a size-1 axis reads index 0 four
// times, weights -0.09375, 0.59375, 0.59375, -0.09375.)
bool identity_axis(const ops::ResizeTaps::Dim& d, int64_t size) {
  for (int64_t o = 0; o < size; ++o) {
    if (d.outside[o]) return false;
    double on = 0, off = 0;
    for (size_t j = d.start[o]; j < d.start[o + 1]; ++j) {
      if (d.index[j] == o)
        on += d.weight[j];
      else
        off += std::abs(d.weight[j]);
    }
    if (std::abs(on - 1) > 1e-9 || off != 0) return false;
  }
  return true;
}

// The resize over channels-last data: N, up to three spatial axes (missing leading ones of
// size 1), C contiguous per pixel.
class TapsResize {
 public:
  TapsResize(int64_t batch, int64_t channels, std::array<int64_t, 3> in, std::array<int64_t, 3> out,
             std::array<AxisTaps, 3> taps)
      : batch_(batch), channels_(channels), in_(in), out_(out), taps_(std::move(taps)) {}

  dnnl_status_t run(const float* x, float* y) const {
    const int64_t rows = batch_ * out_[0] * out_[1];
    const int64_t elements = rows * out_[2] * channels_;
    const int team = omp_in_parallel() || elements < kParallelThreshold ? 1 : omp_get_max_threads();
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t r = 0; r < rows; ++r) row(x, y, r);
    return dnnl_success;
  }

 private:
  // Output row r (its batch index, depth and height coordinates), every column.
  void row(const float* x, float* y, int64_t r) const {
    const int64_t oh = r % out_[1], od = (r / out_[1]) % out_[0], n = r / (out_[1] * out_[0]);
    const int64_t c = channels_;
    const AxisTaps &td = taps_[0], &th = taps_[1], &tw = taps_[2];
    float* dst = y + r * out_[2] * c;
    const float* image = x + n * in_[0] * in_[1] * in_[2] * c;
    for (int64_t ow = 0; ow < out_[2]; ++ow, dst += c) {
      if (td.nearest && th.nearest && tw.nearest) {
        const int64_t pixel = (td.index[od] * in_[1] + th.index[oh]) * in_[2] + tw.index[ow];
        std::memcpy(dst, image + pixel * c, static_cast<size_t>(c) * sizeof(float));
        continue;
      }
      std::fill_n(dst, c, 0.0f);
      for (int64_t i = td.start[od]; i < td.start[od + 1]; ++i)
        for (int64_t j = th.start[oh]; j < th.start[oh + 1]; ++j) {
          const float wdh = td.weight[i] * th.weight[j];
          const float* line = image + (td.index[i] * in_[1] + th.index[j]) * in_[2] * c;
          for (int64_t k = tw.start[ow]; k < tw.start[ow + 1]; ++k) {
            const float w = wdh * tw.weight[k];
            const float* src = line + tw.index[k] * c;
#pragma omp simd
            for (int64_t ch = 0; ch < c; ++ch) dst[ch] += w * src[ch];
          }
        }
    }
  }

  int64_t batch_, channels_;
  std::array<int64_t, 3> in_, out_;  // depth, height, width
  std::array<AxisTaps, 3> taps_;
};

// The step for node `n` of `g`, or nullopt when taps_resize_takes would refuse it.
std::optional<TapsResize> taps_resize(const Graph& g, const Node& n) {
  if ((n.op_type != "Resize" && n.op_type != "Upsample") || !n.domain.empty() ||
      n.outputs.size() != 1 || !is_f32(g, n.input(0)) || !is_f32(g, n.outputs[0]))
    return std::nullopt;
  const Value &xv = g.value(n.input(0)), &yv = g.value(n.outputs[0]);
  const Shape &xs = xv.shape, &ys = yv.shape;
  if (!xv.shape_known || !yv.shape_known || xs.size() < 3 || xs.size() > 5 ||
      ys.size() != xs.size() || xs[0] != ys[0] || xs[1] != ys[1])
    return std::nullopt;
  for (size_t k = 0; k < xs.size(); ++k)
    if (xs[k] < 1 || ys[k] < 1) return std::nullopt;
  if (n.op_type == "Resize" && (n.attr_int("antialias", 0) != 0 || n.has_attr("axes") ||
                                n.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch"))
    return std::nullopt;
  ops::ResizeTaps taps;
  try {
    taps = ops::resize_taps(g, n);  // scales or sizes that are not constants throw
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!identity_axis(taps.dims[0], xs[0]) || !identity_axis(taps.dims[1], xs[1]))
    return std::nullopt;
  std::array<int64_t, 3> in = {1, 1, 1}, out = {1, 1, 1};
  std::array<AxisTaps, 3> axes;
  for (AxisTaps& a : axes) a = AxisTaps{{0, 1}, {0}, {1.0f}, true};
  const size_t lead = 5 - xs.size();  // spatial axes missing in front
  for (size_t k = 2; k < xs.size(); ++k) {
    std::optional<AxisTaps> a = axis_taps(taps.dims[k], ys[k]);
    if (!a) return std::nullopt;
    in[lead + k - 2] = xs[k];
    out[lead + k - 2] = ys[k];
    axes[lead + k - 2] = std::move(*a);
  }
  return TapsResize(xs[0], xs[1], in, out, std::move(axes));
}

}  // namespace

bool taps_resize_takes(const Graph& g, const Node& n) {
  return !resample_form(g, n) && taps_resize(g, n).has_value();
}

void emit_taps_resize(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  std::optional<TapsResize> resize = taps_resize(sub, node);
  if (!resize)
    fail(ErrorKind::kUnsupported, "onednn: {} in a form collage's resize does not compute",
         node.op_type);
  const ValueId x = node.input(0), y = node.outputs[0];
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: resize input is not a kernel input");
  const Shape &xs = sub.value(x).shape, &ys = sub.value(y).shape;
  const dnnl::memory src = values.read(x, *channels_last_md(xs));
  dnnl::memory dst = values.destination(y, *channels_last_md(ys));
  // The step walks both as flat arrays (a concatenation's slice, with gaps, is written by a
  // copy after it).
  if (!flat_f32(dst, shape_numel(ys))) dst = values.fresh_destination(y, *channels_last_md(ys));
  if (!flat_f32(src, shape_numel(xs)))
    fail(ErrorKind::kInternal, "onednn: a channels-last read of {} is not flat", node.name);
  auto step = std::make_shared<TapsResize>(std::move(*resize));
  values.program().add_unary_custom(
      kTapsResizeStep, [step](const float* x, float* y) { return step->run(x, y); }, src, dst,
      dnnl::primitive::kind::resampling);
  values.produced(y, dst);
  // The group's elementwise tail, as primitives of their own after it.
  std::vector<bool> covered(sub.num_nodes(), false);
  covered[0] = true;
  Tail tail = parse_tail(sub, y, covered);
  if (!tail.ops.empty())
    emit_post_op_chain(std::move(tail.ops), y, tail.out, /*refuse_reference=*/true, sub, values);
}

}  // namespace collage::onednn
