// Max/Average pooling (and their Global forms) on pooling_v2 (which knows dilation), in
// the layout its input already has: oneDNN's pooling runs well on NCHW and a reorder each
// way would cost more than it saves, while inside a region the input is often blocked.
// Except where oneDNN 2.6 has no jit kernel for a row-major source: there the source is
// read channel-blocked (see emit_pool).
#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {

void emit_pool(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  const std::string& type = node.op_type;
  const bool global = type == "GlobalMaxPool" || type == "GlobalAveragePool";
  const bool is_max = type == "MaxPool" || type == "GlobalMaxPool";
  const ValueId x = node.input(0), y = node.outputs[0];
  require_f32(sub, x, "pool input");
  require_f32(sub, y, "pool output");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue)
      fail(ErrorKind::kUnsupported, "onednn: MaxPool's Indices output");
  const Shape& xs = sub.value(x).shape;
  const Shape& ys = sub.value(y).shape;
  if (xs.size() < 3 || xs.size() > 5)
    fail(ErrorKind::kUnsupported, "onednn: pool of rank {}", xs.size());
  const size_t nd = xs.size() - 2;
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: pool input is not a kernel input");

  Dims kernel, strides, dilates, pad_l, pad_r;
  // Per spatial dim whose ceil-mode windows reach past a counted padding: the factor that
  // turns oneDNN's divisor (the whole kernel) into ONNX's (the window within input + pads).
  std::vector<std::pair<size_t, std::vector<float>>> beyond_pads;
  const bool include_pad = !is_max && node.attr_int("count_include_pad", 0) != 0;
  if (global) {
    kernel.assign(xs.begin() + 2, xs.end());
    strides.assign(nd, 1);
    dilates.assign(nd, 0);
    pad_l.assign(nd, 0);
    pad_r.assign(nd, 0);
  } else {
    const std::vector<int64_t> k = node.attr_ints("kernel_shape");
    const std::vector<int64_t> s = node.attr_ints("strides", std::vector<int64_t>(nd, 1));
    const std::vector<int64_t> d = node.attr_ints("dilations", std::vector<int64_t>(nd, 1));
    const std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
    if (k.size() != nd || s.size() != nd || d.size() != nd || pads.size() != 2 * nd)
      fail(ErrorKind::kUnsupported, "onednn: pool attributes do not match the rank");
    const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
    for (size_t i = 0; i < nd; ++i) {
      const int64_t in = xs[i + 2], out = ys[i + 2], span = (k[i] - 1) * d[i] + 1;
      int64_t pl = pads[i], pr = pads[i + nd];
      if (auto_pad == "VALID") {
        pl = pr = 0;
      } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        const int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + span - in);
        pl = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pr = total - pl;
      }
      const int64_t needed = (out - 1) * s[i] + span - in - pl;
      if ((in + pl + pr - span) / s[i] + 1 != out) {
        // ceil_mode: the last window reaches past the end padding. Max and pad-excluding
        // averages ignore padding, so extending it is exact; a pad-counting average divides
        // by the whole kernel there, and is rescaled below.
        if (include_pad && needed > pr) {
          std::vector<float> scale(out);
          for (int64_t o = 0; o < out; ++o)
            scale[o] =
                static_cast<float>(k[i]) /
                static_cast<float>(std::min(o * s[i] - pl + k[i], in + pr) - (o * s[i] - pl));
          beyond_pads.emplace_back(i, std::move(scale));
        }
        pr = needed;
      }
      kernel.push_back(k[i]);
      strides.push_back(s[i]);
      dilates.push_back(d[i] - 1);
      pad_l.push_back(pl);
      pad_r.push_back(pr);
    }
  }

  std::vector<bool> covered(sub.num_nodes(), false);
  covered[0] = true;
  Tail tail = parse_tail(sub, y, covered);
  if (!beyond_pads.empty()) {
    // One [1, 1, spatial...] factor, the product of the per-dim ones, multiplied first.
    Shape factor_shape(ys.size(), 1);
    for (size_t i = 0; i < nd; ++i) factor_shape[i + 2] = ys[i + 2];
    Tensor factor(DType::kFloat32, factor_shape);
    float* f = factor.data<float>();
    std::fill(f, f + factor.numel(), 1.0f);
    const std::vector<int64_t> strides_of = shape_strides(factor_shape);
    for (const auto& [dim, scale] : beyond_pads)
      for (int64_t e = 0; e < factor.numel(); ++e)
        f[e] *= scale[(e / strides_of[dim + 2]) % ys[dim + 2]];
    PostOp rescale;
    rescale.kind = PostOp::Kind::kBinary;
    rescale.alg = dnnl::algorithm::binary_mul;
    rescale.constant = factor;
    rescale.operand_shape = factor_shape;
    tail.ops.insert(tail.ops.begin(), rescale);
  }
  dnnl::memory src = values.as_is(x, xs);
  // The output in the input's layout (format_tag::any follows the source for pooling).
  dnnl::memory::desc dst_md =
      is_plain(src.get_desc()) ? plain_md(ys) : dnnl::memory::desc(to_dims(ys), dt::f32, tag::any);
  // No sum post-op: oneDNN 2.6's pooling ignores it (the residual Add of NASNet's cells
  // came out as the pool alone); a binary add post-op is exact.
  const dnnl::algorithm alg = is_max        ? dnnl::algorithm::pooling_max
                              : include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
  auto make_pd = [&](const dnnl::primitive_attr& attr) {
    return create_pd("pooling", [&] {
      return dnnl::pooling_v2_forward::primitive_desc(
          dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, alg, src.get_desc(),
                                         dst_md, strides, kernel, dilates, pad_l, pad_r),
          attr, cpu_engine());
    });
  };
  // oneDNN 2.6's jit pooling takes a row-major source through per-thread transposed copies
  // that it holds only for small enough planes, and never with a post-op; past those it falls
  // to its generic "simple_nchw" loops: Inception-v3's first MaxPool (64x147x147, 3x3 stride
  // 2) alone ran 9.4 ms (xnnpack 1.6, torch 5.9, reference 8.6), NASNet's pool + Add pairs
  // 0.4-1.6 ms each, 20-50x their jit kernels. There the source is reordered to channel
  // blocks (0.17 ms for that MaxPool's), the output follows (a kernel output is reordered
  // back to row-major at the end: 0.04 ms), and the addend is read in that layout.
  const bool tail_fused = sub.num_nodes() > 1;
  if (is_plain(src.get_desc()) &&
      (tail_fused || is_reference_impl(make_pd(base_attr()).impl_info_str()))) {
    src = values.read(x, channel_blocked_md(to_dims(xs)));
    dst_md = dnnl::memory::desc(to_dims(ys), dt::f32, tag::any);
  }
  add_layout_following<dnnl::pooling_v2_forward>(
      tail, ys, src, values, make_pd,
      [&](const std::string& impl) { return !tail_fused || !is_reference_impl(impl); }, "pooling");
}

std::unique_ptr<Kernel> compile_pool(const Graph& sub) {
  return compile_group(sub, emit_pool);
}

}  // namespace collage::onednn
