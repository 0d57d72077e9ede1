// MatMul and Gemm on oneDNN's matmul primitive. Constant weights are packed once
// (format_tag::any); activations stay row-major. A MatMul whose weights have no batch
// dims runs as one 2-D product over all rows of A (batch folded into M).
#include <numeric>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

int64_t product(const Shape& s, size_t begin, size_t end) {
  return std::accumulate(s.begin() + begin, s.begin() + end, int64_t{1}, std::multiplies<>());
}

// The matmul's operands as oneDNN dims, and how tail operands (shaped like the ONNX
// output) map onto its dst.
struct MatmulShape {
  Shape a, b, dst;  // primitive dims
  ShapeMapper map;
  size_t n_axis = 0;  // the N axis of the ONNX output (bias axis), when it has one
  bool has_n = true;
};

MatmulShape matmul_shape(const Shape& as, const Shape& bs, const Shape& ys) {
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  const Shape a2 = a1 ? Shape{1, as[0]} : as;
  const Shape b2 = b1 ? Shape{bs[0], 1} : bs;
  const size_t r = std::max(a2.size(), b2.size());
  MatmulShape m;
  m.a = pad_rank(a2, r);
  m.b = pad_rank(b2, r);
  m.dst.resize(r);
  for (size_t i = 0; i + 2 < r; ++i) {
    m.dst[i] = std::max(m.a[i], m.b[i]);
    if ((m.a[i] != 1 && m.a[i] != m.dst[i]) || (m.b[i] != 1 && m.b[i] != m.dst[i]))
      fail(ErrorKind::kUnsupported, "onednn: MatMul batch dims do not broadcast");
  }
  m.dst[r - 2] = m.a[r - 2];
  m.dst[r - 1] = m.b[r - 1];
  m.has_n = !b1;
  m.n_axis = ys.empty() ? 0 : ys.size() - 1;
  // ONNX output (rank r - a1 - b1) -> rank r.
  auto to_r = [r, a1, b1](const Shape& o) {
    Shape s(o.begin(), o.begin() + (r - 2));
    s.push_back(a1 ? 1 : o[r - 2]);
    s.push_back(b1 ? 1 : o[r - 2 + (a1 ? 0 : 1)]);
    return s;
  };
  const bool fold = r > 2 && product(m.b, 0, r - 2) == 1;
  if (!fold) {
    m.map = [to_r](const Shape& o) { return std::optional<Shape>(to_r(o)); };
    return m;
  }
  const int64_t rows = product(m.dst, 0, r - 1);
  m.a = {rows, m.a[r - 1]};
  m.b = {m.b[r - 2], m.b[r - 1]};
  const Shape full = m.dst;
  m.dst = {rows, full[r - 1]};
  m.map = [to_r, full, rows](const Shape& o) -> std::optional<Shape> {
    Shape s = to_r(o);
    const size_t n = s.size();
    const int64_t lead = product(s, 0, n - 1);
    if (lead == 1) return Shape{1, s[n - 1]};
    if (std::equal(s.begin(), s.end() - 1, full.begin())) return Shape{rows, s[n - 1]};
    return std::nullopt;
  };
  return m;
}

dnnl::memory::desc transposed_md(const Shape& stored) {
  // A stored (K, M) read as (M, K).
  return dnnl::memory::desc({stored[1], stored[0]}, dt::f32, Dims{1, stored[1]});
}

PostOp add_operand(const Graph& sub, ValueId c, float beta, size_t rank) {
  PostOp op;
  op.kind = PostOp::Kind::kBinary;
  op.alg = dnnl::algorithm::binary_add;
  op.operand_shape = pad_rank(sub.value(c).shape, rank);
  if (sub.value(c).is_constant()) {
    op.constant = sub.value(c).constant.clone();
    for (float& v : op.constant.span<float>()) v *= beta;
  } else if (beta == 1.0f || beta == -1.0f) {
    op.operand = c;
    if (beta == -1.0f) op.alg = dnnl::algorithm::binary_sub;
  } else {
    fail(ErrorKind::kUnsupported, "onednn: Gemm with a computed C and beta {}", beta);
  }
  return op;
}

}  // namespace

bool is_reshape_node(const Graph& g, const Node& n) {
  const std::string& t = n.op_type;
  if (!n.domain.empty() || n.outputs.empty() || n.input(0) == kNoValue) return false;
  return t == "Reshape" || t == "Flatten" || t == "Squeeze" || t == "Unsqueeze" ||
         (t == "Transpose" && moves_only_unit_dims(g.value(n.input(0)).shape, n));
}

bool leads_matmul(const Graph& sub) {
  if (sub.num_nodes() < 2 || !is_reshape_node(sub, sub.node(0))) return false;
  const Node& head = sub.node(1);
  return (head.op_type == "MatMul" || head.op_type == "Gemm") && head.domain.empty() &&
         head.input(0) == sub.node(0).outputs[0] && head.input(1) != sub.node(0).outputs[0];
}

void emit_matmul(const Graph& sub, ValueMemories& values) {
  // A leading reshape of A (HF's Conv1D: Reshape to [-1, in], then Gemm) is a view of its
  // input's row-major data: no copy.
  const bool lead = leads_matmul(sub);
  const Node& node = sub.node(lead ? 1 : 0);
  const bool gemm = node.op_type == "Gemm";
  const ValueId a = node.input(0), b = node.input(1), y = node.outputs[0];
  const ValueId a_source = lead ? sub.node(0).input(0) : a;
  if (lead) require_f32(sub, a_source, "reshaped MatMul A");
  require_f32(sub, a, "MatMul A");
  require_f32(sub, b, "MatMul B");
  require_f32(sub, y, "MatMul output");
  const Shape& as = sub.value(a).shape;
  const Shape& bs = sub.value(b).shape;
  const Shape& ys = sub.value(y).shape;

  std::vector<bool> covered(sub.num_nodes(), false);
  covered[0] = true;
  if (lead) covered[1] = true;
  Tail tail = parse_tail(sub, y, covered, /*through_reshape=*/true);

  MatmulShape m;
  dnnl::memory::desc a_view, b_view;
  Tensor b_const = sub.value(b).is_constant() ? sub.value(b).constant : Tensor();
  bool output_scale = false;
  float alpha = 1.0f;
  if (gemm) {
    if (as.size() != 2 || bs.size() != 2)
      fail(ErrorKind::kUnsupported, "onednn: Gemm operands must be 2-D");
    const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
    alpha = node.attr_float("alpha", 1.0f);
    const float beta = node.attr_float("beta", 1.0f);
    a_view = ta ? transposed_md(as) : plain_md(as);
    b_view = tb ? transposed_md(bs) : plain_md(bs);
    m.a = a_view.dims();
    m.b = b_view.dims();
    m.dst = ys;
    m.map = [](const Shape& s) { return std::optional<Shape>(s); };
    m.n_axis = 1;
    if (alpha != 1.0f) {
      if (b_const.defined()) {
        // Folded into the packed weights: keeps the bias usable (scales precede it).
        b_const = b_const.clone();
        for (float& v : b_const.span<float>()) v *= alpha;
      } else {
        output_scale = true;
      }
    }
    const ValueId c = node.input(2);
    if (c != kNoValue && beta != 0.0f) {
      require_f32(sub, c, "Gemm C");
      tail.ops.insert(tail.ops.begin(), add_operand(sub, c, beta, 2));
    }
  } else {
    m = matmul_shape(as, bs, ys);
    a_view = plain_md(m.a);
    b_view = plain_md(m.b);
  }

  Program& program = values.program();
  // Activations row-major (a blocked one is reordered once), seen through the views.
  auto operand = [&](ValueId v, const dnnl::memory::desc& view) {
    if (sub.value(v).is_constant()) return program.constant(sub.value(v).constant, view, view);
    return values.view(v, view);
  };
  dnnl::memory a_mem = operand(a_source, a_view);

  std::optional<std::vector<float>> bias;
  if (m.has_n && !output_scale && !ys.empty())
    bias = take_channel_bias(tail.ops, m.n_axis, ys[m.n_axis]);
  BoundPostOps post = bind_post_ops(tail.ops, ys, m.map, values);
  dnnl::primitive_attr attr = base_attr();
  attr.set_post_ops(post.ops);
  if (output_scale) attr.set_output_scales(0, {alpha});

  const dnnl::memory::desc w_md =
      b_const.defined() ? dnnl::memory::desc(b_view.dims(), dt::f32, tag::any) : b_view;
  dnnl::memory::desc bias_md;
  if (bias) {
    Dims d(m.dst.size(), 1);
    d.back() = m.dst.back();
    bias_md = plain_md(Shape(d.begin(), d.end()));
  }
  auto pd = create_pd("matmul", [&] {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_view, w_md, bias_md, plain_md(m.dst)),
                                        attr, cpu_engine());
  });
  if (sub.num_nodes() > 1 && is_reference_impl(pd.impl_info_str()))
    fail(ErrorKind::kUnsupported, "onednn: no optimized matmul with these post-ops");

  dnnl::memory w_mem =
      b_const.defined() ? program.constant(b_const, b_view, pd.weights_desc()) : operand(b, b_view);
  dnnl::memory y_mem = values.destination(tail.out, plain_md(m.dst));
  if (post.residual) program.copy(post.residual, y_mem);
  std::vector<std::pair<int, dnnl::memory>> args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, y_mem}};
  if (bias) {
    Tensor t = Tensor::from_vector<float>({static_cast<int64_t>(bias->size())}, *bias);
    args.emplace_back(DNNL_ARG_BIAS, program.constant(t, bias_md, bias_md));
  }
  args.insert(args.end(), post.args.begin(), post.args.end());
  program.add(dnnl::matmul(pd), pd, std::move(args));
  values.produced(tail.out, y_mem);
}

std::unique_ptr<Kernel> compile_matmul(const Graph& sub) {
  return compile_group(sub, emit_matmul);
}

}  // namespace collage::onednn
