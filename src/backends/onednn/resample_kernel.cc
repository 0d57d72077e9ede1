// Resize / Upsample on oneDNN's resampling primitive, in the layout its input already has
// (as pooling: inside a region the input is often blocked, and a reorder each way would
// cost more than the resampling). Upsampling in a decoder, an FPN or a UNet then stays in
// the onednn-graph region instead of cutting it in two around a `reference` step.
//
// oneDNN computes one sampling rule per algorithm, so only the ONNX forms it equals run on
// it (resample_form); the rest are collage's own step from the reference's taps
// (taps_resize.h):
// - nearest: each spatial output index o reads floor(o / k) for an integer factor k. ONNX
//   computes that for integer factors with asymmetric coordinates and floor rounding
//   (PyTorch's `interpolate(mode="nearest")`, Upsample and Resize-10), and with half_pixel
//   or pytorch_half_pixel and either round_prefer mode (the nearest source centre: for an
//   integer factor no output falls on a tie).
// - linear: half_pixel (pytorch_half_pixel where no output dimension is 1: PyTorch's
//   `interpolate(mode="bilinear", align_corners=False)`), edge samples clamped, and an exact
//   output size (scale x input an integer), so that the factor ONNX's formula uses is the
//   one oneDNN derives from the shapes.
// Checked against `reference` on randomized shapes and factors (backend_onednn_resample_test).
#include <cmath>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/taps_resize.h"

namespace collage::onednn {
namespace {

// The per-dimension scale ONNX's coordinate formulas use: the `scales` input (or Upsample-7's
// attribute), else output / input from `sizes`. Empty when they are not constants.
std::vector<double> resize_scales(const Graph& g, const Node& n) {
  const Shape& in = g.value(n.input(0)).shape;
  const Shape& out = g.value(n.outputs[0]).shape;
  std::vector<double> scales;
  auto from_tensor = [&](ValueId v) {
    if (v == kNoValue || !g.value(v).is_constant() || g.value(v).constant.numel() == 0)
      return false;
    for (float f : g.value(v).constant.to_float_vector()) scales.push_back(f);
    return true;
  };
  const bool legacy = n.op_type == "Upsample" || g.opset < 11;
  if (n.op_type == "Upsample" && n.input(1) == kNoValue) {
    for (float f : n.attr_floats("scales")) scales.push_back(f);
  } else if (legacy ? !from_tensor(n.input(1)) : !from_tensor(n.input(2))) {
    const ValueId sizes = legacy ? kNoValue : n.input(3);
    if (sizes == kNoValue || !g.value(sizes).is_constant()) return {};
    for (size_t k = 0; k < in.size(); ++k)
      scales.push_back(in[k] ? static_cast<double>(out[k]) / static_cast<double>(in[k]) : 1.0);
  }
  if (scales.size() != in.size()) return {};
  return scales;
}

}  // namespace

std::optional<dnnl::algorithm> resample_form(const Graph& g, const Node& n) {
  if (n.op_type != "Resize" && n.op_type != "Upsample") return std::nullopt;
  if (n.outputs.size() != 1 || n.input(0) == kNoValue) return std::nullopt;
  const Value& x = g.value(n.input(0));
  const Value& y = g.value(n.outputs[0]);
  if (x.dtype != DType::kFloat32 || y.dtype != DType::kFloat32 || !x.shape_known ||
      !y.shape_known || x.shape.size() < 3 || x.shape.size() > 5 ||
      y.shape.size() != x.shape.size())
    return std::nullopt;
  if (x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1]) return std::nullopt;
  const std::vector<double> scales = resize_scales(g, n);
  if (scales.empty() || scales[0] != 1 || scales[1] != 1) return std::nullopt;
  const bool legacy = n.op_type == "Upsample" || g.opset < 11;
  if (!legacy && (n.attr_int("antialias", 0) != 0 || n.has_attr("axes") ||
                  n.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch"))
    return std::nullopt;
  const std::string mode = n.attr_string("mode", "nearest");
  const std::string coord =
      legacy ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string rounding =
      legacy ? "floor" : n.attr_string("nearest_mode", "round_prefer_floor");
  for (size_t k = 2; k < x.shape.size(); ++k) {
    // The output size ONNX computes must be scale x input exactly.
    const double exact = scales[k] * static_cast<double>(x.shape[k]);
    if (x.shape[k] == 0 || exact != static_cast<double>(y.shape[k])) return std::nullopt;
  }
  if (mode == "nearest") {
    const bool floors = coord == "asymmetric" && rounding == "floor";
    const bool centres = (coord == "half_pixel" || coord == "pytorch_half_pixel") &&
                         (rounding == "round_prefer_floor" || rounding == "round_prefer_ceil");
    if (!floors && !centres) return std::nullopt;
    for (size_t k = 2; k < x.shape.size(); ++k)
      if (scales[k] < 1 || scales[k] != std::floor(scales[k])) return std::nullopt;
    return dnnl::algorithm::resampling_nearest;
  }
  if (mode == "linear") {
    bool half_pixel = coord == "half_pixel";
    if (coord == "pytorch_half_pixel") {
      half_pixel = true;
      for (size_t k = 2; k < y.shape.size(); ++k) half_pixel = half_pixel && y.shape[k] > 1;
    }
    if (!half_pixel) return std::nullopt;
    return dnnl::algorithm::resampling_linear;
  }
  return std::nullopt;
}

void emit_resample(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  const std::optional<dnnl::algorithm> alg = resample_form(sub, node);
  if (!alg) return emit_taps_resize(sub, values);  // the other forms: collage's own step
  const ValueId x = node.input(0), y = node.outputs[0];
  if (!values.has(x))
    fail(ErrorKind::kUnsupported, "onednn: resampling input is not a kernel input");
  const Shape& xs = sub.value(x).shape;
  const Shape& ys = sub.value(y).shape;

  std::vector<bool> covered(sub.num_nodes(), false);
  covered[0] = true;
  Tail tail = parse_tail(sub, y, covered);
  auto runs_jit = [&](const dnnl::memory::desc& src_md, const dnnl::memory::desc& dst_md) {
    try {
      dnnl::resampling_forward::primitive_desc pd(
          dnnl::resampling_forward::desc(dnnl::prop_kind::forward_inference, *alg, src_md, dst_md),
          base_attr(), cpu_engine());
      return !is_reference_impl(pd.impl_info_str());
    } catch (const dnnl::error&) {
      return false;
    }
  };
  // The output in the input's layout (format_tag::any follows the source), where oneDNN runs
  // that jit. Else both in the first of these layouts it does: channel-blocked (what the
  // region's convs and concats keep), channels-last, row-major. (A [1,C,1,1] value a
  // channels-last conv wrote, DeepLabV3's pooling branch, compares equal to row-major, so
  // its destination was row-major and the mixed pair ran the reference loop: a tuned plan
  // holding that region failed to compile.)
  dnnl::memory src = values.as_is(x, xs);
  dnnl::memory::desc src_md = src.get_desc();
  dnnl::memory::desc dst_md =
      is_plain(src_md) ? plain_md(ys) : dnnl::memory::desc(to_dims(ys), dt::f32, tag::any);
  if (!runs_jit(src_md, dst_md)) {
    const size_t rank = xs.size();
    std::vector<tag> tags = {rank == 3   ? tag::nCw16c
                             : rank == 4 ? tag::nChw16c
                                         : tag::nCdhw16c,
                             rank == 3   ? tag::nwc
                             : rank == 4 ? tag::nhwc
                                         : tag::ndhwc,
                             rank == 3   ? tag::ncw
                             : rank == 4 ? tag::nchw
                                         : tag::ncdhw};
    for (tag t : tags) {
      const dnnl::memory::desc in(to_dims(xs), dt::f32, t), out(to_dims(ys), dt::f32, t);
      if (!runs_jit(in, out)) continue;
      // Equal descriptions (oneDNN ignores the strides of size-1 dims) are the same bytes:
      // the primitive is made for `in` and reads the memory as it is.
      if (!(src_md == in)) src = values.read(x, in);
      src_md = in;
      dst_md = out;
      break;
    }
  }
  auto make_pd = [&](const dnnl::primitive_attr& attr) {
    return create_pd("resampling", [&] {
      return dnnl::resampling_forward::primitive_desc(
          dnnl::resampling_forward::desc(dnnl::prop_kind::forward_inference, *alg, src_md, dst_md),
          attr, cpu_engine());
    });
  };
  // Post-ops only on the jit kernel: oneDNN 2.6 gives a binary post-op to its "simple"
  // resampling, which read the addend of a channels-last destination in the wrong order
  // (every output off by the addend) and ran 7-13x slower than the jit kernel without it;
  // the tail then runs as primitives of its own.
  add_layout_following<dnnl::resampling_forward>(
      tail, ys, src, values, make_pd,
      [&](const std::string& impl) {
        return !is_reference_impl(impl) && (tail.ops.empty() || impl.rfind("jit", 0) == 0);
      },
      "resampling");
}

std::unique_ptr<Kernel> compile_resample(const Graph& sub) {
  return compile_group(sub, emit_resample);
}

}  // namespace collage::onednn
