// Conv and ConvTranspose on oneDNN's (de)convolution primitives. Weights are reordered once
// to the layout the primitive prefers (blocked, format_tag::any); activations are
// reordered only where they are not already in the layout the primitive prefers. A Conv is
// built with the direct algorithm or, as the "winograd" / "winograd2x2" variants, with fewer
// multiplies for stride-1 3x3 (and in regions 1x3, 3x1, 1x7, 7x1) kernels: collage's
// channels-last Winograd where it takes the tail (activations, a residual Add;
// winograd_conv.h), else oneDNN's Winograd convolution (3x3); or, as onednn-graph's "blocked"
// variant, direct with a channel-blocked (nChw16c) output.
#include <algorithm>
#include <numeric>

#include "backends/onednn/depthwise_conv2d.h"
#include "backends/onednn/depthwise_conv3d.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/grouped_conv2d.h"
#include "backends/onednn/groups.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/winograd_conv.h"

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
  if (!g.value(n.input(1)).is_constant()) return false;  // transformed at compile time
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

namespace {

// The epilogue's second operand: the bias per channel, or a 0 broadcast everywhere.
Shape epilogue_operand(const Shape& shape, bool bias) {
  Shape operand(shape.size(), 1);
  if (bias) operand[1] = shape[1];
  return operand;
}

dnnl::memory::desc operand_layout(const dnnl::memory::desc& md, const Shape& operand) {
  return is_plain(md) ? plain_md(operand) : layout_like(md, operand);
}

// Whether add_epilogue's binary primitive runs jit on a destination laid out as `md`: every
// op of the tail eltwise (a binary tail's operands would be bound before this is known).
bool epilogue_runs_jit(const std::vector<PostOp>& ops, const Shape& shape, bool bias,
                       const dnnl::memory::desc& md) {
  dnnl::post_ops post;
  for (const PostOp& op : ops) {
    if (op.kind != PostOp::Kind::kEltwise) return false;
    post.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
  }
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post);
  const dnnl::memory::desc operand_md = operand_layout(md, epilogue_operand(shape, bias));
  try {
    dnnl::binary::primitive_desc pd(
        dnnl::binary::desc(dnnl::algorithm::binary_add, md, operand_md, md), attr, cpu_engine());
    return !is_reference_impl(pd.impl_info_str());
  } catch (const dnnl::error&) {
    return false;
  }
}

// dst = src + bias (per channel; nullptr: + 0) with `ops` as post-ops: one binary primitive
// in src's layout, dst's (a channel-blocked dst takes its operand like-blocked, as oneDNN
// 2.6's jit binary kernel needs). Not in place: oneDNN 2.6's jit binary with post-ops left
// its destination unchanged when it was its first source. What follows a deconvolution
// (emit_conv says why).
void add_epilogue(const std::vector<float>* bias, const std::vector<PostOp>& ops,
                  const Shape& shape, const dnnl::memory& src, const dnnl::memory& dst,
                  ValueMemories& values) {
  const Shape operand = epilogue_operand(shape, bias != nullptr);
  const std::vector<float> addend = bias ? *bias : std::vector<float>{0.0f};
  const dnnl::memory::desc md = dst.get_desc();
  const dnnl::memory::desc operand_md = operand_layout(md, operand);
  Program& program = values.program();
  const dnnl::memory src1 =
      program.constant(Tensor::from_vector<float>(operand, addend), plain_md(operand), operand_md);
  BoundPostOps post = bind_post_ops(
      ops, shape, [](const Shape& s) { return std::optional<Shape>(s); }, values,
      /*allow_sum=*/false, &md);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post.ops);
  auto pd = create_pd("binary", [&] {
    return dnnl::binary::primitive_desc(
        dnnl::binary::desc(dnnl::algorithm::binary_add, md, operand_md, md), attr, cpu_engine());
  });
  if (is_reference_impl(pd.impl_info_str()))
    fail(ErrorKind::kUnsupported, "onednn: no optimized bias and post-ops after a ConvTranspose");
  std::vector<std::pair<int, dnnl::memory>> args = {
      {DNNL_ARG_SRC_0, src}, {DNNL_ARG_SRC_1, src1}, {DNNL_ARG_DST, dst}};
  args.insert(args.end(), post.args.begin(), post.args.end());
  program.add(dnnl::binary(pd), pd, std::move(args));
}

// A depthwise 3-D conv as collage's own step (depthwise_conv3d.h), channels-last, the bias
// in the step and the tail after it as a binary primitive's post-ops.
void emit_depthwise_conv3d(const Graph& sub, const Node& node, const Geometry& geo,
                           std::vector<float> bias, const Tail& tail, ValueMemories& values) {
  const Shape& xs = sub.value(node.input(0)).shape;
  const Shape& ys = sub.value(node.outputs[0]).shape;
  const dnnl::memory::desc x_md = *channels_last_md(xs), y_md = *channels_last_md(ys);
  Program& program = values.program();
  const dnnl::memory src = values.read(node.input(0), x_md);
  const dnnl::memory dst = values.destination(tail.out, y_md);
  const dnnl::memory conv_dst = tail.ops.empty() ? dst : program.rewritten_buffer(y_md);
  if (!flat_f32(src, shape_numel(xs)) || !flat_f32(conv_dst, shape_numel(ys)))
    fail(ErrorKind::kInternal, "onednn: depthwise 3-D conv got a layout it can't walk");
  std::vector<int64_t> dilations;
  for (int64_t d : geo.dilates) dilations.push_back(d + 1);  // oneDNN's 0 is ONNX's 1
  auto step = std::make_shared<const DepthwiseConv3d>(
      xs, ys, sub.value(node.input(1)).constant, std::move(bias),
      std::vector<int64_t>(geo.strides.begin(), geo.strides.end()), std::move(dilations),
      std::vector<int64_t>(geo.pad_l.begin(), geo.pad_l.end()));
  program.add_unary_custom(
      kDepthwiseConv3dStep,
      [step](const float* x, float* y) {
        step->run(x, y);
        return dnnl_success;
      },
      src, conv_dst, dnnl::primitive::kind::convolution);
  if (!tail.ops.empty()) add_epilogue(nullptr, tail.ops, ys, conv_dst, dst, values);
  values.produced(tail.out, dst);
}

}  // namespace

bool constant_float_conv_node(const Graph& g, const Node& n, size_t rank) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.size() != 1)
    return false;
  const Value& x = g.value(n.input(0));
  const Value& w = g.value(n.input(1));
  const Value& y = g.value(n.outputs[0]);
  if (x.dtype != DType::kFloat32 || !x.shape_known || x.shape.size() != rank ||
      w.dtype != DType::kFloat32 || !w.is_constant() || w.shape.size() != rank ||
      y.dtype != DType::kFloat32 || !y.shape_known || y.shape.size() != rank)
    return false;
  const ValueId b = n.inputs.size() > 2 ? n.input(2) : kNoValue;
  return b == kNoValue || (g.value(b).is_constant() && g.value(b).dtype == DType::kFloat32);
}

bool depthwise_conv_node(const Graph& g, const Node& n, size_t rank) {
  if (!constant_float_conv_node(g, n, rank)) return false;
  const Shape& w = g.value(n.input(1)).shape;
  const int64_t c = g.value(n.input(0)).shape[1];
  return n.attr_int("group", 1) == c && w[0] == c && w[1] == 1 &&
         g.value(n.outputs[0]).shape[1] == c;
}

std::string forward_conv_implementation(const Node& node, const Shape& xs, const Shape& ws,
                                        const Shape& ys) {
  try {
    const Geometry geo =
        forward_geometry(node, Shape(xs.begin() + 2, xs.end()), Shape(ws.begin() + 2, ws.end()),
                         Shape(ys.begin() + 2, ys.end()));
    const dnnl::memory::desc w_md =
        any_md(weights_view(ws, node.attr_int("group", 1), /*transposed=*/false).dims());
    return dnnl::convolution_forward::primitive_desc(
               dnnl::convolution_forward::desc(
                   dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                   any_md(to_dims(xs)), w_md, dnnl::memory::desc(), any_md(to_dims(ys)),
                   geo.strides, geo.dilates, geo.pad_l, geo.pad_r),
               base_attr(), cpu_engine())
        .impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  } catch (const Error&) {
    return "";
  }
}

void emit_conv(const Graph& sub, ValueMemories& values, ConvAlgorithm algorithm) {
  const Node& node = sub.node(0);
  const bool transposed = node.op_type == "ConvTranspose";
  const ValueId x = node.input(0), w = node.input(1), b = node.input(2);
  require_f32(sub, x, "conv input");
  require_f32(sub, w, "conv weights");
  require_f32(sub, node.outputs[0], "conv output");
  if (b != kNoValue && (!sub.value(b).is_constant() || sub.value(b).dtype != DType::kFloat32))
    fail(ErrorKind::kUnsupported, "onednn: conv bias must be a float32 constant");
  const Shape& xs = sub.value(x).shape;
  const Shape& ws = sub.value(w).shape;
  const Shape& ys = sub.value(node.outputs[0]).shape;
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size())
    fail(ErrorKind::kUnsupported, "onednn: conv of rank {}", xs.size());
  const int64_t group = node.attr_int("group", 1);
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: conv input is not a kernel input");
  const bool winograd =
      algorithm == ConvAlgorithm::kWinograd || algorithm == ConvAlgorithm::kWinograd2x2;
  if (winograd && !winograd_conv_shape(sub, node))
    fail(ErrorKind::kUnsupported,
         "onednn: Winograd needs a 2-D 3x3, 1x3, 3x1, 1x7 or 7x1 stride-1 single-group Conv "
         "with constant weights and pads within its dilated taps");

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
  // Winograd where collage's own takes the conv and its tail: channels-last like the direct
  // kernels around it (winograd_conv.h); elsewhere oneDNN's, which reads nChw16c (and picks
  // its own tile).
  if (winograd && winograd_conv_takes(tail.ops, ys)) {
    emit_winograd_conv(
        algorithm == ConvAlgorithm::kWinograd2x2 ? WinogradTile::k2 : WinogradTile::k4, sub, node,
        bias, tail.ops, geo.pad_l[0], geo.pad_l[1], tail.out, values);
    return;
  }
  // A depthwise conv in a region built blocked: collage's own step (depthwise_conv2d.h: 1.08-1.75x
  // oneDNN's jit_dw on MobileNetV2's 3x3 shapes), where it takes the conv and its tail and
  // reads and writes the layouts there.
  if (algorithm == ConvAlgorithm::kBlocked && !transposed && depthwise_conv2d_shape(sub, node) &&
      depthwise_conv2d_takes(tail.ops) && depthwise_conv2d_fits(values, x, xs, tail.out)) {
    emit_depthwise_conv2d(sub, node, bias, tail.ops, geo.pad_l[0], geo.pad_l[1], tail.out, values);
    return;
  }
  // A grouped 3x3 conv of narrow groups (ResNeXt's 4 channels a group): collage's own step in
  // every variant (grouped_conv2d.h: 1.6-2.7x oneDNN's grouped kernel on the widths and strides
  // it takes), where its input and output are channels-last, nChw16c or not yet laid out.
  if (!transposed && grouped_conv2d_shape(sub, node) && conv_activations(tail.ops) &&
      grouped_conv2d_fits(values, x, xs, tail.out)) {
    emit_grouped_conv2d(sub, node, bias, tail.ops, geo.pad_l[0], geo.pad_l[1], tail.out, values);
    return;
  }
  if (!transposed && !winograd && depthwise_conv3d_takes(sub, node)) {
    emit_depthwise_conv3d(sub, node, geo, has_bias ? bias : std::vector<float>{}, tail, values);
    return;
  }
  if (winograd && !winograd_candidate(sub, node))
    fail(ErrorKind::kUnsupported,
         "onednn: a {}x{} Winograd conv whose tail collage's Winograd does not take (oneDNN's "
         "takes 3x3 only)",
         ws[2], ws[3]);
  const dnnl::memory::desc w_view = weights_view(ws, group, transposed);
  const dnnl::memory::desc src_md = any_md(to_dims(xs)), dst_md = any_md(to_dims(ys));
  const dnnl::memory::desc w_md = any_md(w_view.dims());
  const auto deconvolution = [&](const dnnl::primitive_attr& a, const dnnl::memory::desc& b_md) {
    return dnnl::deconvolution_forward::primitive_desc(
        dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::deconvolution_direct, src_md, w_md, b_md,
                                          dst_md, geo.strides, geo.dilates, geo.pad_l, geo.pad_r),
        a, cpu_engine());
  };

  // oneDNN 2.6 runs a deconvolution as a backward-data convolution, then adds its bias and
  // applies its post-ops in loops of its own: with a Relu or Tanh post-op 2-12x slower than
  // without (DCGAN's 64->3 4x4 stride-2 layer at 32x32: 1.27 against 0.10 ms; 128->64 at
  // 16x16: 0.96 against 0.20), a bias +0.02-0.07 ms. A ConvTranspose's bias and eltwise tail
  // run instead as one binary primitive after it (dst = y + bias, the tail its post-ops),
  // where that runs jit in the layout the bare deconvolution writes: one pass, ~0.01 ms at
  // these sizes. Elsewhere (a binary tail, a plain layout) they stay fused as before.
  std::optional<dnnl::deconvolution_forward::primitive_desc> bare;
  if (transposed && (has_bias || !tail.ops.empty())) {
    try {
      bare = deconvolution(base_attr(), dnnl::memory::desc());
    } catch (const dnnl::error&) {
    }
    if (bare && !epilogue_runs_jit(tail.ops, ys, has_bias, bare->dst_desc())) bare.reset();
  }
  const bool epilogue_apart = bare.has_value();

  Program& program = values.program();
  BoundPostOps post;
  if (!epilogue_apart)
    post = bind_post_ops(
        tail.ops, ys, [](const Shape& s) { return std::optional<Shape>(s); }, values);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post.ops);
  const dnnl::memory::desc b_md = has_bias && !epilogue_apart
                                      ? dnnl::memory::desc({oc}, dt::f32, tag::a)
                                      : dnnl::memory::desc();
  const auto inference = dnnl::prop_kind::forward_inference;
  dnnl::primitive prim;
  std::shared_ptr<dnnl::primitive_desc_base> pd;
  if (transposed) {
    auto p = bare ? *bare : create_pd("deconvolution", [&] { return deconvolution(attr, b_md); });
    prim = dnnl::deconvolution_forward(p);
    pd = std::make_shared<dnnl::deconvolution_forward::primitive_desc>(p);
  } else {
    auto forward = [&](const dnnl::memory::desc& src, const dnnl::memory::desc& dst) {
      return dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(inference,
                                          winograd ? dnnl::algorithm::convolution_winograd
                                                   : dnnl::algorithm::convolution_direct,
                                          src, w_md, b_md, dst, geo.strides, geo.dilates, geo.pad_l,
                                          geo.pad_r),
          attr, cpu_engine());
    };
    // Where a region keeps layouts (concatenations in place), the input as it is and the
    // output in its slice's layout, if oneDNN has a jit kernel for that; else its choice.
    // Blocked: the input as it is (unless row-major) and the output channel-blocked.
    std::optional<dnnl::convolution_forward::primitive_desc> kept;
    std::optional<dnnl::memory::desc> kept_src = values.kept_layout(x, xs),
                                      home_dst = values.home_layout(tail.out);
    if (algorithm == ConvAlgorithm::kBlocked) {
      if (!kept_src) kept_src = values.activation_layout(x, xs);
      if (!home_dst) home_dst = channel_blocked_md(to_dims(ys));
    }
    if (!winograd && (kept_src || home_dst)) {
      try {
        kept = forward(kept_src.value_or(src_md), home_dst.value_or(dst_md));
        if (is_reference_impl(kept->impl_info_str())) kept.reset();
      } catch (const dnnl::error&) {
      }
    }
    auto p = kept ? *kept : create_pd(winograd ? "Winograd convolution" : "convolution", [&] {
      return forward(src_md, dst_md);
    });
    // An input a producer in the region wrote in another activation layout than the one
    // chosen is read as it is, and the output written in the same layout, where oneDNN runs
    // the same implementation there: no reorder in or out. RegNetX's grouped 3x3 convs chose
    // nChw16c between channels-last 1x1 convs, a reorder on each side (a fifth of the
    // model's time); their jit kernel runs as fast in channels-last (probed: 0.019 ms either
    // way for 25 groups of 16 channels at 7x7).
    if (!kept && !winograd && values.would_reorder(x, p.src_desc())) {
      if (const std::optional<dnnl::memory::desc> has = values.activation_layout(x, xs)) {
        try {
          auto as_is = forward(*has, layout_like(*has, ys));
          if (as_is.impl_info_str() == p.impl_info_str()) p = as_is;
        } catch (const dnnl::error&) {
        }
      }
    }
    prim = dnnl::convolution_forward(p);
    pd = std::make_shared<dnnl::convolution_forward::primitive_desc>(p);
  }
  if (sub.num_nodes() > 1 && is_reference_impl(pd->impl_info_str()))
    fail(ErrorKind::kUnsupported, "onednn: no optimized {} with these post-ops", node.op_type);
  // oneDNN 2.6's gemm-based convolution writing channels-last adds a binary post-op's
  // operand that varies over space at the wrong positions (RAFT's flow head, a 3x3 conv
  // plus a constant coordinate grid, was off by the grid; any [1,C|1,H|1,W|1] operand after
  // a conv reading channels-last came out wrong). There the op runs as a primitive of its own
  // (the group is retried with a shorter tail).
  if (is_gemm_impl(pd->impl_info_str()) && !is_plain(pd->dst_desc()) && varies_over_space(tail.ops))
    fail(ErrorKind::kUnsupported,
         "onednn: oneDNN 2.6's gemm convolution misplaces a spatial post-op operand in a "
         "channels-last output");

  // Constant weights are converted once, now; computed ones (a modulated or dynamic conv) by
  // a reorder step each run.
  const dnnl::memory::desc chosen_w = pd->query_md(dnnl::query::weights_md);
  dnnl::memory weights = sub.value(w).is_constant()
                             ? program.constant(sub.value(w).constant, w_view, chosen_w)
                             : program.in_layout(values.view(w, w_view), chosen_w);
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
  // With the epilogue apart, the deconvolution writes a buffer of its own that it reads.
  const dnnl::memory conv_dst = epilogue_apart ? program.rewritten_buffer(chosen_dst) : dst;
  std::vector<std::pair<int, dnnl::memory>> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, conv_dst}};
  if (has_bias && !epilogue_apart) {
    Tensor t = Tensor::from_vector<float>({oc}, bias);
    args.emplace_back(DNNL_ARG_BIAS, program.constant(t, b_md, b_md));
  }
  args.insert(args.end(), post.args.begin(), post.args.end());
  program.add(prim, *pd, std::move(args));
  if (epilogue_apart) add_epilogue(has_bias ? &bias : nullptr, tail.ops, ys, conv_dst, dst, values);
  values.produced(tail.out, dst);
}

// ---------------------------------------------------------------- 1x1 conv + depthwise

namespace {

bool f32_constant(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).is_constant() && g.value(v).dtype == DType::kFloat32;
}

bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
}

// A 2-D float32 Conv with constant weights (and bias), no auto_pad, no dilation.
bool plain_conv2d(const Graph& g, const Node& n) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.outputs.size() != 1 || n.inputs.size() < 2)
    return false;
  if (g.value(n.input(0)).dtype != DType::kFloat32 || !f32_constant(g, n.input(1)) ||
      (n.input(2) != kNoValue && !f32_constant(g, n.input(2))))
    return false;
  return g.value(n.input(0)).shape.size() == 4 && g.value(n.input(1)).shape.size() == 4 &&
         n.attr_string("auto_pad", "NOTSET") == "NOTSET" &&
         all_equal(n.attr_ints("dilations", {1, 1}), 1);
}

// What oneDNN's depthwise post-op takes (post_ops::append_dw in 2.6.3): the head a 1x1
// stride-1 unpadded dense conv, the fused one 3x3 depthwise with pads of 1 and stride 1 or 2.
bool dw_head(const Graph& g, const Node& n) {
  if (!plain_conv2d(g, n)) return false;
  const Shape& ws = g.value(n.input(1)).shape;
  return ws[2] == 1 && ws[3] == 1 && n.attr_int("group", 1) == 1 &&
         all_equal(n.attr_ints("strides", {1, 1}), 1) && all_equal(n.attr_ints("pads", {}), 0);
}

int64_t dw_stride(const Graph& g, const Node& n) {
  if (!plain_conv2d(g, n)) return 0;
  const Shape& xs = g.value(n.input(0)).shape;
  const Shape& ws = g.value(n.input(1)).shape;
  const int64_t c = xs[1];
  if (n.attr_int("group", 1) != c || ws[0] != c || ws[1] != 1 || ws[2] != 3 || ws[3] != 3) return 0;
  std::vector<int64_t> s = n.attr_ints("strides", {1, 1});
  if (s.size() != 2 || s[0] != s[1] || (s[0] != 1 && s[0] != 2)) return 0;
  if (!all_equal(n.attr_ints("pads", {0, 0, 0, 0}), 1)) return 0;
  return s[0];
}

// The tail steps after `cur` that oneDNN runs as eltwise post-ops (or a per-channel bias),
// up to the step whose output's sole reader is `stop` (a Conv): their nodes and ops.
bool eltwise_or_bias(const std::vector<PostOp>& ops, const Graph& g, ValueId cur) {
  for (const PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kEltwise) continue;
    // A constant Add broadcast along the channels only: folded into the conv's bias.
    std::vector<PostOp> one = {op};
    const Shape& s = g.value(cur).shape;
    if (!take_channel_bias(one, 1, s.size() > 1 ? s[1] : 1)) return false;
  }
  return true;
}

}  // namespace

std::vector<Match> grow_conv_dw(const Graph& g) {
  const Consumers consumers = g.consumers();
  std::vector<Match> out;
  for (size_t h = 0; h < g.num_nodes(); ++h) {
    const Node& head = g.node(static_cast<NodeId>(h));
    if (!dw_head(g, head)) continue;
    std::vector<NodeId> nodes = {static_cast<NodeId>(h)};
    ValueId cur = head.outputs[0];
    // The 1x1's tail, to the depthwise conv reading it alone.
    NodeId dw = -1;
    for (int k = 0; k <= kMaxTail && dw < 0; ++k) {
      const std::vector<NodeId>& readers = consumers[cur];
      const bool leaves = std::find(g.outputs.begin(), g.outputs.end(), cur) != g.outputs.end();
      if (readers.size() != 1 || leaves) break;
      if (dw_stride(g, g.node(readers[0])) > 0 && g.node(readers[0]).input(0) == cur) {
        dw = readers[0];
        break;
      }
      std::optional<TailStep> step = next_tail_step(g, consumers, cur);
      if (!step || !eltwise_or_bias(step->ops, g, cur)) break;
      nodes.insert(nodes.end(), step->nodes.begin(), step->nodes.end());
      cur = step->out;
    }
    if (dw < 0) continue;
    nodes.push_back(dw);
    std::sort(nodes.begin(), nodes.end());
    out.push_back(Match{nodes});
    cur = g.node(dw).outputs[0];
    for (int k = 0; k < kMaxTail; ++k) {
      std::optional<TailStep> step = next_tail_step(g, consumers, cur);
      if (!step || !eltwise_or_bias(step->ops, g, cur)) break;
      nodes.insert(nodes.end(), step->nodes.begin(), step->nodes.end());
      std::sort(nodes.begin(), nodes.end());
      out.push_back(Match{nodes});
      cur = step->out;
    }
  }
  return out;
}

NodeId depthwise_post_op(const Graph& g, const Consumers& consumers, NodeId head, ValueId cur) {
  if (!dw_head(g, g.node(head)) || consumers[cur].size() != 1 ||
      std::find(g.outputs.begin(), g.outputs.end(), cur) != g.outputs.end())
    return -1;
  const NodeId reader = consumers[cur][0];
  const Node& n = g.node(reader);
  return dw_stride(g, n) > 0 && n.input(0) == cur ? reader : -1;
}

bool conv_dw_group(const Graph& sub) {
  if (sub.num_nodes() < 2 || !dw_head(sub, sub.node(0))) return false;
  for (size_t n = 1; n < sub.num_nodes(); ++n)
    if (sub.node(static_cast<NodeId>(n)).op_type == "Conv") return true;
  return false;
}

// oneDNN's two-primitive form of the pair: ref_fused_convolution runs two jit primitives one
// after another over a scratchpad intermediate.
bool two_primitive_form(const std::string& impl) {
  return impl.rfind("ref_fused_convolution", 0) == 0;
}

// oneDNN's fused implementation: a jit 1x1 kernel computing the depthwise rows as it goes
// ("jit_1x1:avx512_core"), or the two-primitive form. Refused: any plain reference ("ref:")
// part.
bool jit_fused(const std::string& impl) {
  if (!two_primitive_form(impl)) return !is_reference_impl(impl);
  size_t start = 0;
  bool first = true;
  while (start <= impl.size()) {
    size_t end = impl.find(':', start);
    if (end == std::string::npos) end = impl.size();
    const std::string part = impl.substr(start, end - start);
    if (!first && part.rfind("ref", 0) == 0) return false;
    first = false;
    start = end + 1;
  }
  return true;
}

void emit_conv_dw(const Graph& sub, ValueMemories& values, ConvAlgorithm algorithm,
                  DepthwisePairForm form) {
  if (!conv_dw_group(sub))
    fail(ErrorKind::kUnsupported, "onednn: not a 1x1 conv followed by a 3x3 depthwise conv");
  const Consumers consumers = sub.consumers();
  const Node& head = sub.node(0);
  const ValueId x = head.input(0);
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: conv input is not a kernel input");
  std::vector<bool> covered(sub.num_nodes(), false);
  covered[0] = true;
  // The 1x1's tail up to the depthwise conv.
  std::vector<PostOp> ops1;
  ValueId cur = head.outputs[0];
  NodeId dw = -1;
  while (dw < 0) {
    const std::vector<NodeId>& readers = consumers[cur];
    if (readers.size() != 1)
      fail(ErrorKind::kUnsupported, "onednn: the 1x1 conv's output is read outside the fusion");
    if (sub.node(readers[0]).op_type == "Conv") {
      dw = readers[0];
      break;
    }
    std::optional<TailStep> step = next_tail_step(sub, consumers, cur);
    if (!step) fail(ErrorKind::kUnsupported, "onednn: no post-op tail to the depthwise conv");
    for (NodeId n : step->nodes) covered[n] = true;
    ops1.insert(ops1.end(), step->ops.begin(), step->ops.end());
    cur = step->out;
  }
  const Node& dw_node = sub.node(dw);
  const int64_t stride = dw_stride(sub, dw_node);
  if (stride == 0 || dw_node.input(0) != cur)
    fail(ErrorKind::kUnsupported,
         "onednn: the depthwise post-op needs a 3x3 depthwise conv with "
         "pads 1 and stride 1 or 2");
  covered[dw] = true;
  Tail tail = parse_tail(sub, dw_node.outputs[0], covered);

  const Shape& xs = sub.value(x).shape;
  const Shape& mid = sub.value(head.outputs[0]).shape;
  const Shape& ys = sub.value(tail.out).shape;
  const int64_t m = mid[1];
  auto conv_bias = [&](const Node& n, std::vector<PostOp>& ops) {
    std::vector<float> bias(m, 0.0f);
    if (n.input(2) != kNoValue) {
      const float* d = sub.value(n.input(2)).constant.data<float>();
      std::copy(d, d + m, bias.begin());
    }
    if (std::optional<std::vector<float>> extra = take_channel_bias(ops, 1, m))
      for (int64_t c = 0; c < m; ++c) bias[c] += (*extra)[c];
    for (const PostOp& op : ops)
      if (op.kind != PostOp::Kind::kEltwise)
        fail(ErrorKind::kUnsupported, "onednn: only eltwise post-ops around a depthwise post-op");
    return bias;
  };
  const std::vector<float> bias1 = conv_bias(head, ops1), bias2 = conv_bias(dw_node, tail.ops);
  // oneDNN 2.6's injector applies the first alpha/beta of an eltwise kind to all of that kind
  // (see epilogue.cc): refused across the whole chain as within one.
  std::vector<PostOp> all = ops1;
  all.insert(all.end(), tail.ops.begin(), tail.ops.end());
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (all[i].alg == all[j].alg && (all[i].alpha != all[j].alpha || all[i].beta != all[j].beta))
        fail(ErrorKind::kUnsupported, "onednn: two differently parameterised eltwise post-ops");
  dnnl::post_ops post;
  for (const PostOp& op : ops1) post.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
  post.append_dw(dt::f32, dt::f32, dt::f32, 3, stride, 1, 0, {});
  for (const PostOp& op : tail.ops) post.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post);

  Program& program = values.program();
  const dnnl::memory::desc w_view = weights_view(sub.value(head.input(1)).shape, 1, false);
  const dnnl::memory::desc b_md({m}, dt::f32, tag::a);
  // Blocked: oneDNN's one-pass form (jit_1x1 computing the depthwise rows as it goes) where
  // it has one, else its two jit kernels in nChw16c.
  auto activation_md = [&](const Shape& s) {
    return algorithm == ConvAlgorithm::kBlocked ? channel_blocked_md(to_dims(s))
                                                : any_md(to_dims(s));
  };
  auto pd = create_pd("1x1 convolution with a depthwise post-op", [&] {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, activation_md(xs),
                                        any_md(w_view.dims()), b_md, activation_md(mid), {1, 1},
                                        {0, 0}, {0, 0}, {0, 0}),
        attr, cpu_engine());
  });
  const std::string impl = pd.impl_info_str();
  if (!jit_fused(impl))
    fail(ErrorKind::kUnsupported, "onednn: the depthwise post-op runs as {} here", impl);
  if (form == DepthwisePairForm::kOnePass && two_primitive_form(impl))
    fail(ErrorKind::kUnsupported, "onednn: the depthwise post-op runs as two primitives ({})",
         impl);
  // In a region, where the input is already in an activation layout the fused kernel does
  // not read (its one-pass jit_1x1 form wants nChw16c; the convs around it chose
  // channels-last), the reorders in and out cost more than the fusion saves: the region then
  // splits the group. Measured on MobileNetV2's 16 -> 96 at 112x112 stride 2 (EPYC Zen 5, 2
  // threads, whole model as one region, 5 alternating rounds of 60 runs): min 3.08-3.51 ms
  // split against 3.31-3.63 fused with the two reorders. Asking for the pair in nhwc instead
  // is no way out: oneDNN 2.6.3 builds its one-pass jit_1x1 form for nhwc too, but computes
  // it wrong (16 -> 96 at 112x112 stride 2 against the two primitives: max |diff| 2.5e38;
  // right in nChw16c), as OnednnConvDepthwise.RegionSplitsAPairThatWouldChangeLayouts saw.
  if (values.would_reorder(x, pd.query_md(dnnl::query::src_md)))
    fail(ErrorKind::kUnsupported,
         "onednn: the depthwise post-op reads another layout than its input's ({})", impl);
  const dnnl::memory::desc chosen_dst = pd.query_md(dnnl::query::dst_md);
  if (chosen_dst.dims() != to_dims(ys))
    fail(ErrorKind::kUnsupported, "onednn: the depthwise post-op's output is not {}",
         shape_to_string(ys));
  const int dw_weights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS;
  const int dw_bias = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;
  // ONNX's (C, 1, 3, 3) depthwise weights are oneDNN's goihw with one output per group.
  const dnnl::memory::desc dw_plain({m, 1, 1, 3, 3}, dt::f32, tag::goihw);
  std::vector<std::pair<int, dnnl::memory>> args = {
      {DNNL_ARG_SRC, values.read(x, pd.query_md(dnnl::query::src_md))},
      {DNNL_ARG_WEIGHTS, program.constant(sub.value(head.input(1)).constant, w_view,
                                          pd.query_md(dnnl::query::weights_md))},
      {DNNL_ARG_BIAS, program.constant(Tensor::from_vector<float>({m}, bias1), b_md, b_md)},
      {dw_weights, program.constant(sub.value(dw_node.input(1)).constant, dw_plain,
                                    pd.query_md(dnnl::query::exec_arg_md, dw_weights))},
      {dw_bias, program.constant(Tensor::from_vector<float>({m}, bias2), b_md,
                                 pd.query_md(dnnl::query::exec_arg_md, dw_bias))}};
  dnnl::memory dst = values.destination(tail.out, chosen_dst);
  args.emplace_back(DNNL_ARG_DST, dst);
  program.add(dnnl::convolution_forward(pd), pd, std::move(args));
  values.produced(tail.out, dst);
}

std::unique_ptr<Kernel> compile_conv_dw(const Graph& sub) {
  Program program;
  ValueMemories values(program);
  values.bind_plain_boundary(sub);
  emit_conv_dw(sub, values);
  return std::make_unique<ProgramKernel>(std::move(program));
}

std::unique_ptr<Kernel> compile_conv(const Graph& sub, ConvAlgorithm algorithm) {
  Program program;
  ValueMemories values(program);
  values.bind_plain_boundary(sub);
  emit_conv(sub, values, algorithm);
  return std::make_unique<ProgramKernel>(std::move(program));
}

}  // namespace collage::onednn
