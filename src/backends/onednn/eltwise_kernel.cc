// Chains of elementwise ops: the first step runs as an eltwise or binary primitive, the
// rest as its post-ops, in one pass over memory.
#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

// The first step of the chain: it contains node 0 and reads `*x`, a kernel input.
std::optional<TailStep> first_step(const Graph& sub, const Consumers& consumers, ValueId* x) {
  const Node& n0 = sub.node(0);
  for (ValueId in : n0.inputs) {
    if (in == kNoValue || sub.value(in).is_constant()) continue;
    std::optional<TailStep> fused = match_fused_activation(sub, consumers, in, false);
    if (fused && fused->nodes.front() == 0) {
      *x = in;
      return fused;
    }
  }
  // Prefer the operand that already has the output's shape: oneDNN's binary broadcasts
  // only its second source.
  for (ValueId in : n0.inputs) {
    if (in == kNoValue || sub.value(in).is_constant() || n0.outputs.empty()) continue;
    std::optional<std::vector<PostOp>> ops = node_post_ops(sub, n0, in);
    if (!ops) continue;
    *x = in;
    return TailStep{{0}, n0.outputs[0], std::move(*ops)};
  }
  return std::nullopt;
}

// Whether oneDNN 2.6 runs dst = src0 `alg` src1 (dst like src0) with a jit kernel.
bool binary_runs_jit(dnnl::algorithm alg, const dnnl::memory::desc& md0,
                     const dnnl::memory::desc& md1) {
  try {
    dnnl::binary::primitive_desc pd(dnnl::binary::desc(alg, md0, md1, md0), base_attr(),
                                    cpu_engine());
    return !is_reference_impl(pd.impl_info_str());
  } catch (const dnnl::error&) {
    return false;
  }
}

// The layouts of the binary primitive's two sources (the destination's is the first's),
// the first of these that oneDNN 2.6 runs jit: x's own, with the operand row-major (or in
// x's layout when it has x's shape, `same_shape`); the operand in x's layout (its jit
// kernel takes a channel-blocked source only with a like-blocked operand); x channels-last
// (it has no jit kernel for 8-channel blocks on AVX-512: the squeeze-excitation Mul after
// RegNet's grouped convs ran on its reference loop, 80 % of the model's time).
std::pair<dnnl::memory::desc, dnnl::memory::desc> binary_layouts(dnnl::algorithm alg,
                                                                 const dnnl::memory::desc& x_md,
                                                                 const Shape& shape,
                                                                 const Shape& operand,
                                                                 bool same_shape) {
  std::vector<std::pair<dnnl::memory::desc, dnnl::memory::desc>> choices;
  choices.emplace_back(x_md, same_shape ? x_md : plain_md(operand));
  if (!same_shape && !is_plain(x_md)) choices.emplace_back(x_md, layout_like(x_md, operand));
  if (std::optional<dnnl::memory::desc> cl = channels_last_md(shape); cl && *cl != x_md)
    choices.emplace_back(*cl, same_shape ? *cl : plain_md(operand));
  for (const auto& [md0, md1] : choices)
    if (binary_runs_jit(alg, md0, md1)) return {md0, md1};
  return choices.front();
}

// A chain's shapes with neighbouring dimensions merged where every operand broadcasts
// alike (size-1 dimensions dropped): [1,56,56,96] - [1,56,56,1] is [3136,96] - [3136,1].
// oneDNN 2.6's binary primitive runs its reference loop on the first form and jit on the
// second (Swin-T's LayerNorm, written out over the last axis of a 4-D tensor: 18 ms against
// 0.1 ms per Sub or Div; its 5-D attention-mask Add, [1,64,3,49,49] + [1,64,1,49,49]: 29 ms).
// Row-major data is the same bytes in both forms. nullopt when nothing merges.
struct Collapse {
  std::vector<std::vector<size_t>> groups;  // dimensions of the full shape, merged
  Shape apply(const Shape& s) const {
    Shape out;
    for (const std::vector<size_t>& g : groups) {
      int64_t n = 1;
      for (size_t d : g) n *= s[d];
      out.push_back(n);
    }
    return out;
  }
};
std::optional<Collapse> collapse_broadcast(const Shape& shape, const std::vector<Shape>& operands) {
  for (const Shape& o : operands)
    if (o.size() != shape.size()) return std::nullopt;
  Collapse c;
  auto same_class = [&](size_t a, size_t b) {
    return std::all_of(operands.begin(), operands.end(),
                       [&](const Shape& o) { return (o[a] == 1) == (o[b] == 1); });
  };
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!c.groups.empty() && same_class(c.groups.back().back(), d))
      c.groups.back().push_back(d);
    else
      c.groups.push_back({d});
  }
  if (c.groups.empty() || c.groups.size() == shape.size()) return std::nullopt;
  return c;
}

}  // namespace

void emit_elementwise(const Graph& sub, ValueMemories& values) {
  const Consumers consumers = sub.consumers();
  ValueId x = kNoValue;
  std::optional<TailStep> head = first_step(sub, consumers, &x);
  if (!head)
    fail(ErrorKind::kUnsupported, "onednn: no elementwise kernel for {}", sub.node(0).op_type);
  std::vector<bool> covered(sub.num_nodes(), false);
  for (NodeId n : head->nodes) covered[n] = true;
  Tail tail = parse_tail(sub, head->out, covered);
  std::vector<PostOp> ops = head->ops;
  ops.insert(ops.end(), tail.ops.begin(), tail.ops.end());
  emit_post_op_chain(std::move(ops), x, tail.out, /*refuse_reference=*/sub.num_nodes() > 1, sub,
                     values);
}

void emit_post_op_chain(std::vector<PostOp> ops, ValueId x, ValueId out, bool refuse_reference,
                        const Graph& sub, ValueMemories& values) {
  Shape shape = sub.value(x).shape;
  PostOp first;
  if (ops.front().kind == PostOp::Kind::kBinary || ops.size() == 1) {
    first = ops.front();
    ops.erase(ops.begin());
  } else {
    // oneDNN's eltwise primitive takes post-ops only in its reference implementation; a
    // binary "x + 0" runs the whole chain as post-ops in its jit kernel, still one pass.
    first.kind = PostOp::Kind::kBinary;
    first.alg = dnnl::algorithm::binary_add;
    first.constant = Tensor::scalar(0.0f);
    first.operand_shape = Shape(shape.size(), 1);
  }
  if (!values.has(x))
    fail(ErrorKind::kUnsupported, "onednn: elementwise input is not a kernel input");
  Program& program = values.program();
  // Source and result in the layout x already has, unless the binary primitive runs jit
  // only in another.
  dnnl::memory x_mem = values.as_is(x, shape);
  const bool same_shape = first.kind == PostOp::Kind::kBinary && !first.constant.defined() &&
                          first.operand_shape == shape;
  auto [md, md1] =
      first.kind == PostOp::Kind::kBinary
          ? binary_layouts(first.alg, x_mem.get_desc(), shape, first.operand_shape, same_shape)
          : std::pair{x_mem.get_desc(), x_mem.get_desc()};
  ShapeMapper map = [](const Shape& s) { return std::optional<Shape>(s); };
  if (first.kind == PostOp::Kind::kBinary && is_plain(md) && is_plain(md1) &&
      !binary_runs_jit(first.alg, md, md1)) {
    // Row-major operands whose broadcast oneDNN loops over in its reference kernel: the
    // same bytes seen with merged dimensions, every operand of the chain alike.
    std::vector<Shape> operands = {first.operand_shape};
    for (const PostOp& op : ops)
      if (op.kind == PostOp::Kind::kBinary) operands.push_back(op.operand_shape);
    if (std::optional<Collapse> c = collapse_broadcast(shape, operands);
        c && binary_runs_jit(first.alg, plain_md(c->apply(shape)),
                             plain_md(c->apply(first.operand_shape)))) {
      map = [c = *c](const Shape& s) { return std::optional<Shape>(c.apply(s)); };
      shape = c->apply(shape);
      first.operand_shape = c->apply(first.operand_shape);
      md = plain_md(shape);
      md1 = plain_md(first.operand_shape);
    }
  }
  if (md != x_mem.get_desc()) x_mem = values.read(x, md);
  dnnl::memory y_mem = values.destination(out, md);
  BoundPostOps post = bind_post_ops(ops, shape, map, values, /*allow_sum=*/false, &md);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post.ops);
  const auto inference = dnnl::prop_kind::forward_inference;
  std::vector<std::pair<int, dnnl::memory>> args = {{DNNL_ARG_DST, y_mem}};
  dnnl::primitive prim;
  std::shared_ptr<dnnl::primitive_desc_base> pd;
  if (first.kind == PostOp::Kind::kEltwise) {
    auto p = create_pd("eltwise", [&] {
      return dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(inference, first.alg, md, first.alpha, first.beta), attr,
          cpu_engine());
    });
    prim = dnnl::eltwise_forward(p);
    pd = std::make_shared<dnnl::eltwise_forward::primitive_desc>(p);
    args.emplace_back(DNNL_ARG_SRC, x_mem);
  } else {
    const dnnl::memory src1 =
        first.constant.defined()
            ? program.constant(first.constant, plain_md(first.operand_shape), md1)
            : (is_plain(md1) ? values.view(first.operand, md1) : values.read(first.operand, md1));
    auto p = create_pd("binary", [&] {
      return dnnl::binary::primitive_desc(dnnl::binary::desc(first.alg, md, md1, md), attr,
                                          cpu_engine());
    });
    prim = dnnl::binary(p);
    pd = std::make_shared<dnnl::binary::primitive_desc>(p);
    args.emplace_back(DNNL_ARG_SRC_0, x_mem);
    args.emplace_back(DNNL_ARG_SRC_1, src1);
  }
  if (refuse_reference && is_reference_impl(pd->impl_info_str()))
    fail(ErrorKind::kUnsupported, "onednn: no optimized elementwise kernel with these post-ops");
  if (post.residual) program.copy(post.residual, y_mem);
  args.insert(args.end(), post.args.begin(), post.args.end());
  program.add(prim, *pd, std::move(args));
  values.produced(out, y_mem);
}

std::unique_ptr<Kernel> compile_elementwise(const Graph& sub) {
  return compile_group(sub, emit_elementwise);
}

bool prelu_takes(const Graph& g, const Node& n) {
  if (n.op_type != "PRelu" || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.empty())
    return false;
  const ValueId x = n.input(0), slope = n.input(1);
  if (x == kNoValue || slope == kNoValue || slope == x) return false;
  const Value& xv = g.value(x);
  const Value& sv = g.value(slope);
  if (xv.dtype != DType::kFloat32 || sv.dtype != DType::kFloat32 || !sv.is_constant() ||
      !xv.shape_known || xv.shape.size() < 2 || sv.shape.size() > xv.shape.size() ||
      sv.constant.numel() == 1)
    return false;
  const Shape s = pad_rank(sv.shape, xv.shape.size());
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != (d == 1 ? xv.shape[1] : 1)) return false;
  return true;
}

void emit_prelu(const Graph& sub, ValueMemories& values) {
  const Node& node = sub.node(0);
  if (sub.num_nodes() != 1 || !prelu_takes(sub, node)) return emit_elementwise(sub, values);
  const ValueId x = node.input(0), y = node.outputs[0];
  const Shape& xs = sub.value(x).shape;
  if (!values.has(x)) fail(ErrorKind::kUnsupported, "onednn: PRelu input");
  const dnnl::memory x_mem = values.as_is(x, xs);
  Shape slopes(xs.size(), 1);
  slopes[1] = xs[1];
  // The slopes in the layout oneDNN picks: with a channel-blocked source, only its own
  // choice ("any") runs jit (a row-major one ran the reference loop: measured).
  auto pd = create_pd("prelu", [&] {
    return dnnl::prelu_forward::primitive_desc(
        dnnl::prelu_forward::desc(dnnl::prop_kind::forward_inference, x_mem.get_desc(),
                                  dnnl::memory::desc(to_dims(slopes), dnnl::memory::data_type::f32,
                                                     dnnl::memory::format_tag::any)),
        base_attr(), cpu_engine());
  });
  if (is_reference_impl(pd.impl_info_str()))
    fail(ErrorKind::kUnsupported, "onednn: no optimized PRelu for this layout ({})",
         pd.impl_info_str());
  Program& program = values.program();
  const dnnl::memory w =
      program.constant(sub.value(node.input(1)).constant, plain_md(slopes), pd.weights_desc());
  const dnnl::memory y_mem = values.destination(y, pd.dst_desc());
  program.add(dnnl::prelu_forward(pd), pd,
              {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y_mem}});
  values.produced(y, y_mem);
}

std::unique_ptr<Kernel> compile_prelu(const Graph& sub) {
  return compile_group(sub, emit_prelu);
}

}  // namespace collage::onednn
