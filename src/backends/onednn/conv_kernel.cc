// Conv and ConvTranspose on oneDNN's (de)convolution primitives. Weights are reordered once
// to the layout the primitive prefers (blocked, format_tag::any); activations are
// reordered only where they are not already in the layout the primitive prefers. A Conv is
// built with the direct algorithm or, as the "winograd" variant, with oneDNN's Winograd
// convolution (fewer multiplies for 3x3 stride-1 kernels).
#include <numeric>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

struct Geometry {
  Dims strides, dilates, pad_l, pad_r;
};

int64_t floor_half(int64_t v) {
  return v >= 0 ? v / 2 : -((-v + 1) / 2);
}

std::vector<int64_t> spatial_attr(const Node& node, const char* key, size_t nd, int64_t def) {
  std::vector<int64_t> v = node.attr_ints(key, std::vector<int64_t>(nd, def));
  if (v.size() != nd) fail(ErrorKind::kUnsupported, "onednn: {} has {} values", key, v.size());
  return v;
}

// ONNX pads/auto_pad for a forward window, checked against the inferred output size. The
// end pad is what oneDNN needs for that output: it may differ from the model's (unused
// trailing rows, ceil_mode) but the result is the same.
Geometry forward_geometry(const Node& node, const Shape& in, const Shape& kernel,
                          const Shape& out) {
  const size_t nd = in.size();
  Geometry g;
  std::vector<int64_t> s = spatial_attr(node, "strides", nd, 1);
  std::vector<int64_t> d = spatial_attr(node, "dilations", nd, 1);
  std::vector<int64_t> pads = spatial_attr(node, "pads", 2 * nd, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  for (size_t i = 0; i < nd; ++i) {
    const int64_t span = (kernel[i] - 1) * d[i] + 1;
    int64_t pl = pads[i], pr = pads[i + nd];
    if (auto_pad == "VALID") {
      pl = pr = 0;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (out[i] - 1) * s[i] + span - in[i]);
      pl = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pr = total - pl;
    }
    if ((in[i] + pl + pr - span) / s[i] + 1 != out[i]) pr = (out[i] - 1) * s[i] + span - in[i] - pl;
    g.strides.push_back(s[i]);
    g.dilates.push_back(d[i] - 1);
    g.pad_l.push_back(pl);
    g.pad_r.push_back(pr);
  }
  return g;
}

// ConvTranspose's begin pads per the ONNX spec (output_shape, then auto_pad, then pads);
// the end pad follows from the inferred output size (output_padding included).
Geometry transposed_geometry(const Node& node, const Shape& in, const Shape& kernel,
                             const Shape& out) {
  const size_t nd = in.size();
  Geometry g;
  std::vector<int64_t> s = spatial_attr(node, "strides", nd, 1);
  std::vector<int64_t> d = spatial_attr(node, "dilations", nd, 1);
  std::vector<int64_t> out_pad = spatial_attr(node, "output_padding", nd, 0);
  std::vector<int64_t> pads = spatial_attr(node, "pads", 2 * nd, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> output_shape = node.attr_ints("output_shape", {});
  if (output_shape.size() == nd + 2)
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t span = (kernel[i] - 1) * d[i] + 1;
    const int64_t natural = s[i] * (in[i] - 1) + out_pad[i] + span;
    auto split = [&](int64_t total) {
      const int64_t half = floor_half(total);
      return auto_pad == "SAME_UPPER" ? half : total - half;
    };
    int64_t pl = 0;
    if (output_shape.size() == nd)
      pl = split(natural - output_shape[i]);
    else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      pl = split(natural - in[i] * s[i]);
    else if (auto_pad == "NOTSET")
      pl = pads[i];
    g.strides.push_back(s[i]);
    g.dilates.push_back(d[i] - 1);
    g.pad_l.push_back(pl);
    g.pad_r.push_back(s[i] * (in[i] - 1) + span - pl - out[i]);
  }
  return g;
}

dnnl::memory::desc any_md(const Dims& dims) {
  return dnnl::memory::desc(dims, dt::f32, tag::any);
}

// The ONNX weight tensor as oneDNN sees it: (g,) O, I, spatial.
dnnl::memory::desc weights_view(const Shape& w, int64_t group, bool transposed) {
  const int64_t k = std::accumulate(w.begin() + 2, w.end(), int64_t{1}, std::multiplies<>());
  Dims spatial(w.begin() + 2, w.end()), spatial_strides(w.size() - 2, 1);
  for (int i = static_cast<int>(spatial.size()) - 2; i >= 0; --i)
    spatial_strides[i] = spatial_strides[i + 1] * spatial[i + 1];
  // Per (o, i) dims of one group: Conv keeps ONNX's (OC, IC/g, k...), ConvTranspose keeps
  // (IC, OC/g, k...), i.e. its o and i strides are swapped.
  const int64_t o = transposed ? w[1] : w[0] / group, i = transposed ? w[0] / group : w[1];
  const int64_t o_stride = transposed ? k : i * k, i_stride = transposed ? o * k : k;
  Dims dims = {o, i}, strides = {o_stride, i_stride};
  if (group > 1) {
    dims.insert(dims.begin(), group);
    strides.insert(strides.begin(), o * i * k);
  }
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  strides.insert(strides.end(), spatial_strides.begin(), spatial_strides.end());
  return dnnl::memory::desc(dims, dt::f32, strides);
}

}  // namespace

// What oneDNN 2.6.3's Winograd kernels take (jit_fp32_wino_2x3 and jit_wino_4x3 on
// avx512_core, probed on this machine): 2-D, 3x3, stride 1, no dilation, one group, pads of
// at most 1; any channel count and spatial size. Post-ops: Relu and a residual sum only
// (Clip, Sigmoid, binary ops are refused when the primitive is created).
bool winograd_candidate(const Graph& g, const Node& n) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.inputs.size() < 2) return false;
  const Shape& ws = g.value(n.input(1)).shape;
  if (ws.size() != 4 || ws[2] != 3 || ws[3] != 3 || n.attr_int("group", 1) != 1) return false;
  for (int64_t s : n.attr_ints("strides", {1, 1}))
    if (s != 1) return false;
  for (int64_t d : n.attr_ints("dilations", {1, 1}))
    if (d != 1) return false;
  // auto_pad SAME_* on a 3x3 stride-1 window pads 1 on each side, VALID none.
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET") return true;
  for (int64_t p : n.attr_ints("pads", {0, 0, 0, 0}))
    if (p < 0 || p > 1) return false;
  return true;
}

void emit_conv(const Graph& sub, ValueMemories& values, ConvAlgorithm algorithm) {
  const Node& node = sub.node(0);
  const bool transposed = node.op_type == "ConvTranspose";
  const ValueId x = node.input(0), w = node.input(1), b = node.input(2);
  require_f32(sub, x, "conv input");
  require_f32(sub, w, "conv weights");
  require_f32(sub, node.outputs[0], "conv output");
  if (!sub.value(w).is_constant())
    fail(ErrorKind::kUnsupported, "onednn: conv weights must be constant");
  if (b != kNoValue && (!sub.value(b).is_constant() || sub.value(b).dtype != DType::kFloat32))
    fail(ErrorKind::kUnsupported, "onednn: conv bias must be a float32 constant");
  const Shape& xs = sub.value(x).shape;
  const Shape& ws = sub.value(w).shape;
  const Shape& ys = sub.value(node.outputs[0]).shape;
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size())
    fail(ErrorKind::kUnsupported, "onednn: conv of rank {}", xs.size());
  const int64_t group = node.attr_int("group", 1);
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: conv input is not a kernel input");
  const bool winograd = algorithm == ConvAlgorithm::kWinograd;
  if (winograd && !winograd_candidate(sub, node))
    fail(ErrorKind::kUnsupported,
         "onednn: Winograd needs a 2-D 3x3 stride-1 undilated single-group Conv with pads <= 1");

  std::vector<bool> covered(sub.num_nodes(), false);
  covered[0] = true;
  Tail tail = parse_tail(sub, node.outputs[0], covered);
  const int64_t oc = ys[1];
  std::vector<float> bias(oc, 0.0f);
  bool has_bias = false;
  if (b != kNoValue) {
    const float* d = sub.value(b).constant.data<float>();
    std::copy(d, d + oc, bias.begin());
    has_bias = true;
  }
  if (std::optional<std::vector<float>> extra = take_channel_bias(tail.ops, 1, oc)) {
    for (int64_t c = 0; c < oc; ++c) bias[c] += (*extra)[c];
    has_bias = true;
  }

  const Shape in_spatial(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end()),
      out_spatial(ys.begin() + 2, ys.end());
  const Geometry geo = transposed ? transposed_geometry(node, in_spatial, k, out_spatial)
                                  : forward_geometry(node, in_spatial, k, out_spatial);

  Program& program = values.program();
  BoundPostOps post = bind_post_ops(
      tail.ops, ys, [](const Shape& s) { return std::optional<Shape>(s); }, values);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post.ops);

  const dnnl::memory::desc w_view = weights_view(ws, group, transposed);
  const dnnl::memory::desc src_md = any_md(to_dims(xs)), dst_md = any_md(to_dims(ys)),
                           w_md = any_md(w_view.dims()),
                           b_md = has_bias ? dnnl::memory::desc({oc}, dt::f32, tag::a)
                                           : dnnl::memory::desc();
  const auto inference = dnnl::prop_kind::forward_inference;
  dnnl::primitive prim;
  std::shared_ptr<dnnl::primitive_desc_base> pd;
  if (transposed) {
    auto p = create_pd("deconvolution", [&] {
      return dnnl::deconvolution_forward::primitive_desc(
          dnnl::deconvolution_forward::desc(inference, dnnl::algorithm::deconvolution_direct,
                                            src_md, w_md, b_md, dst_md, geo.strides, geo.dilates,
                                            geo.pad_l, geo.pad_r),
          attr, cpu_engine());
    });
    prim = dnnl::deconvolution_forward(p);
    pd = std::make_shared<dnnl::deconvolution_forward::primitive_desc>(p);
  } else {
    auto p = create_pd(winograd ? "Winograd convolution" : "convolution", [&] {
      return dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(inference,
                                          winograd ? dnnl::algorithm::convolution_winograd
                                                   : dnnl::algorithm::convolution_direct,
                                          src_md, w_md, b_md, dst_md, geo.strides, geo.dilates,
                                          geo.pad_l, geo.pad_r),
          attr, cpu_engine());
    });
    prim = dnnl::convolution_forward(p);
    pd = std::make_shared<dnnl::convolution_forward::primitive_desc>(p);
  }
  if (sub.num_nodes() > 1 && is_reference_impl(pd->impl_info_str()))
    fail(ErrorKind::kUnsupported, "onednn: no optimized {} with these post-ops", node.op_type);

  dnnl::memory weights =
      program.constant(sub.value(w).constant, w_view, pd->query_md(dnnl::query::weights_md));
  // The primitive chose its layouts (format_tag::any): the input is reordered only when it
  // is not already in the chosen one, and the output stays in it for readers in a region.
  dnnl::memory src = values.read(x, pd->query_md(dnnl::query::src_md));
  const dnnl::memory::desc chosen_dst = pd->query_md(dnnl::query::dst_md);
  dnnl::memory dst;
  if (post.residual &&
      values.can_overwrite(post.residual_value, post.residual, tail.out, chosen_dst) &&
      post.residual.get_data_handle() != src.get_data_handle()) {
    dst = post.residual;  // the residual is dead after this sum: accumulate onto it
  } else {
    dst = values.destination(tail.out, chosen_dst);
    if (post.residual) program.copy(post.residual, dst);
  }
  std::vector<std::pair<int, dnnl::memory>> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (has_bias) {
    Tensor t = Tensor::from_vector<float>({oc}, bias);
    args.emplace_back(DNNL_ARG_BIAS, program.constant(t, b_md, b_md));
  }
  args.insert(args.end(), post.args.begin(), post.args.end());
  program.add(prim, *pd, std::move(args));
  values.produced(tail.out, dst);
}

std::unique_ptr<Kernel> compile_conv(const Graph& sub, ConvAlgorithm algorithm) {
  Program program;
  ValueMemories values(program);
  values.bind_plain_boundary(sub);
  emit_conv(sub, values, algorithm);
  return std::make_unique<ProgramKernel>(std::move(program));
}

}  // namespace collage::onednn
