#include "backends/onednn/epilogue.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "collage/op_registry.h"

namespace collage::onednn {
namespace {

using alg = dnnl::algorithm;

PostOp eltwise(alg a, float alpha = 0, float beta = 0) {
  PostOp op;
  op.alg = a;
  op.alpha = alpha;
  op.beta = beta;
  return op;
}

std::optional<float> scalar_constant(const Graph& g, ValueId v) {
  if (v == kNoValue || !g.value(v).is_constant() || g.value(v).constant.numel() != 1)
    return std::nullopt;
  return static_cast<float>(g.value(v).constant.get_as_double(0));
}

bool near(std::optional<float> x, double want) {
  return x && std::abs(*x - want) <= 1e-3 * std::abs(want);
}

// Only the first output used: ops with optional extra outputs (none here) would need them.
bool single_output(const Node& n) {
  if (n.outputs.empty() || n.outputs[0] == kNoValue) return false;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != kNoValue) return false;
  return true;
}

std::optional<std::vector<PostOp>> unary_post_ops(const Graph& g, const Node& n) {
  const std::string& t = n.op_type;
  if (t == "Relu") return std::vector{eltwise(alg::eltwise_relu)};
  if (t == "LeakyRelu")
    return std::vector{eltwise(alg::eltwise_relu, n.attr_float("alpha", 0.01f))};
  if (t == "Sigmoid") return std::vector{eltwise(alg::eltwise_logistic)};
  if (t == "Tanh") return std::vector{eltwise(alg::eltwise_tanh)};
  if (t == "Elu") return std::vector{eltwise(alg::eltwise_elu, n.attr_float("alpha", 1.0f))};
  if (t == "Exp") return std::vector{eltwise(alg::eltwise_exp)};
  if (t == "Log") return std::vector{eltwise(alg::eltwise_log)};
  if (t == "Sqrt") return std::vector{eltwise(alg::eltwise_sqrt)};
  if (t == "Abs") return std::vector{eltwise(alg::eltwise_abs)};
  if (t == "Neg") return std::vector{eltwise(alg::eltwise_linear, -1.0f, 0.0f)};
  if (t == "Softplus") return std::vector{eltwise(alg::eltwise_soft_relu)};
  if (t == "HardSwish") return std::vector{eltwise(alg::eltwise_hardswish)};
  if (t == "Mish") return std::vector{eltwise(alg::eltwise_mish)};
  if (t == "Round") return std::vector{eltwise(alg::eltwise_round)};
  if (t == "Reciprocal") return std::vector{eltwise(alg::eltwise_pow, 1.0f, -1.0f)};
  if (t == "HardSigmoid")
    return std::vector{
        eltwise(alg::eltwise_linear, n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)),
        eltwise(alg::eltwise_clip, 0.0f, 1.0f)};
  if (t == "Gelu") {
    std::string approx = n.attr_string("approximate", "none");
    if (approx == "none") return std::vector{eltwise(alg::eltwise_gelu_erf)};
    if (approx == "tanh") return std::vector{eltwise(alg::eltwise_gelu_tanh)};
    return std::nullopt;
  }
  if (t == "Clip") {
    float lo = n.attr_float("min", -FLT_MAX), hi = n.attr_float("max", FLT_MAX);
    for (size_t i = 1; i < 3; ++i) {
      if (n.input(i) == kNoValue) continue;
      std::optional<float> c = scalar_constant(g, n.input(i));
      if (!c) return std::nullopt;  // bounds computed at run time
      (i == 1 ? lo : hi) = *c;
    }
    return std::vector{eltwise(alg::eltwise_clip, lo, hi)};
  }
  return std::nullopt;
}

std::optional<alg> binary_alg(const std::string& t) {
  if (t == "Add") return alg::binary_add;
  if (t == "Sub") return alg::binary_sub;
  if (t == "Mul") return alg::binary_mul;
  if (t == "Div") return alg::binary_div;
  if (t == "Max") return alg::binary_max;
  if (t == "Min") return alg::binary_min;
  return std::nullopt;
}

// `cur (op) c` (or `c (op) cur` when !cur_first) for a scalar constant c, as eltwise ops.
std::optional<std::vector<PostOp>> scalar_post_ops(const std::string& t, float c, bool cur_first) {
  if (t == "Add") return std::vector{eltwise(alg::eltwise_linear, 1.0f, c)};
  if (t == "Sub")
    return std::vector{cur_first ? eltwise(alg::eltwise_linear, 1.0f, -c)
                                 : eltwise(alg::eltwise_linear, -1.0f, c)};
  if (t == "Mul") return std::vector{eltwise(alg::eltwise_linear, c, 0.0f)};
  if (t == "Div") {
    if (!cur_first) return std::vector{eltwise(alg::eltwise_pow, c, -1.0f)};
    if (c == 0.0f) return std::nullopt;
    return std::vector{eltwise(alg::eltwise_linear, 1.0f / c, 0.0f)};
  }
  if (t == "Max") return std::vector{eltwise(alg::eltwise_clip, c, FLT_MAX)};
  if (t == "Min") return std::vector{eltwise(alg::eltwise_clip, -FLT_MAX, c)};
  if (t == "Pow" && cur_first) {
    if (c == 2.0f) return std::vector{eltwise(alg::eltwise_square)};
    if (c == 0.5f) return std::vector{eltwise(alg::eltwise_sqrt)};
    return std::vector{eltwise(alg::eltwise_pow, 1.0f, c)};
  }
  return std::nullopt;
}

std::optional<std::vector<PostOp>> binary_post_ops(const Graph& g, const Node& n, ValueId cur) {
  if (n.inputs.size() != 2) return std::nullopt;
  const ValueId a = n.inputs[0], b = n.inputs[1];
  if (a == cur && b == cur) {
    if (n.op_type == "Add") return std::vector{eltwise(alg::eltwise_linear, 2.0f, 0.0f)};
    if (n.op_type == "Mul") return std::vector{eltwise(alg::eltwise_square)};
    return std::nullopt;
  }
  const bool cur_first = a == cur;
  if (!cur_first && b != cur) return std::nullopt;
  const ValueId other = cur_first ? b : a;
  if (other == kNoValue) return std::nullopt;
  if (std::optional<float> c = scalar_constant(g, other))
    return scalar_post_ops(n.op_type, *c, cur_first);
  std::optional<alg> a_alg = binary_alg(n.op_type);
  if (!a_alg || !is_f32(g, other)) return std::nullopt;
  const Shape& shape = g.value(cur).shape;
  if (g.value(other).shape.size() > shape.size()) return std::nullopt;
  PostOp op;
  op.kind = PostOp::Kind::kBinary;
  op.alg = *a_alg;
  op.operand_shape = pad_rank(g.value(other).shape, shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    if (op.operand_shape[i] != 1 && op.operand_shape[i] != shape[i]) return std::nullopt;
  if (g.value(other).is_constant())
    op.constant = g.value(other).constant;
  else
    op.operand = other;
  if (cur_first || *a_alg == alg::binary_add || *a_alg == alg::binary_mul ||
      *a_alg == alg::binary_max || *a_alg == alg::binary_min)
    return std::vector{op};
  // other - cur = (-cur) + other;  other / cur = (1 / cur) * other. (The other order,
  // -(cur - other), came out sign-flipped from oneDNN 2.6's jit binary kernel.)
  if (*a_alg == alg::binary_sub) {
    op.alg = alg::binary_add;
    return std::vector{eltwise(alg::eltwise_linear, -1.0f, 0.0f), op};
  }
  op.alg = alg::binary_mul;
  return std::vector{eltwise(alg::eltwise_pow, 1.0f, -1.0f), op};
}

// A value read only by `reader` and not a graph output: it may stay inside a kernel.
bool interior(const Graph& g, const Consumers& consumers, ValueId v, NodeId reader) {
  return consumers[v].size() == 1 && consumers[v][0] == reader && !is_graph_output(g, v);
}

// The only reader of `v` when it is an op of type `type`.
const Node* sole_reader(const Graph& g, const Consumers& consumers, ValueId v, const char* type,
                        NodeId* id) {
  if (consumers[v].size() != 1 || is_graph_output(g, v)) return nullptr;
  const Node& n = g.node(consumers[v][0]);
  if (n.op_type != type || !n.domain.empty() || !single_output(n)) return nullptr;
  *id = consumers[v][0];
  return &n;
}

// The input of binary node `n` that is not `v` (nullopt when n does not read v).
std::optional<ValueId> other_input(const Node& n, ValueId v) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<PostOp>> node_post_ops(const Graph& g, const Node& node, ValueId cur) {
  if (!node.domain.empty() || !single_output(node) || !is_f32(g, cur) ||
      !is_f32(g, node.outputs[0]) || g.value(node.outputs[0]).shape != g.value(cur).shape)
    return std::nullopt;
  if (node.input(0) == kNoValue) return std::nullopt;
  if (node.op_type == "Pow") {
    if (node.input(0) != cur || node.inputs.size() != 2) return std::nullopt;
    std::optional<float> c = scalar_constant(g, node.input(1));
    if (!c) return std::nullopt;
    return scalar_post_ops("Pow", *c, true);
  }
  if (binary_alg(node.op_type)) return binary_post_ops(g, node, cur);
  if (node.input(0) != cur) return std::nullopt;
  // PRelu with one constant slope is LeakyRelu with that alpha. Slopes per channel run as
  // the prelu primitive (prelu_takes): oneDNN 2.6's prelu post-op has only a reference
  // implementation (with a conv or binary primitive, any layout: measured).
  if (node.op_type == "PRelu") {
    std::optional<float> slope = scalar_constant(g, node.input(1));
    if (!slope || node.input(1) == cur) return std::nullopt;
    return std::vector{eltwise(alg::eltwise_relu, *slope)};
  }
  for (size_t i = 1; i < node.inputs.size(); ++i)
    if (node.inputs[i] == cur) return std::nullopt;
  return unary_post_ops(g, node);
}

namespace {

// The tanh-approximated GELU GPT-2 exports ("gelu_new"): 0.5x * (1 + tanh(sqrt(2/pi) *
// (x + 0.044715 x^3))) as Mul(x, 0.5), Pow(x, 3), Mul(., 0.044715), Add(x, .),
// Mul(., sqrt(2/pi)), Tanh, Add(., 1), Mul(half_x, .): x has exactly those three readers.
std::optional<TailStep> match_gelu_tanh(const Graph& g, const Consumers& consumers, ValueId x) {
  const std::vector<NodeId>& readers = consumers[x];
  if (readers.size() != 3) return std::nullopt;
  NodeId half = -1, cube = -1, sum = -1;
  for (NodeId r : readers) {
    const Node& n = g.node(r);
    if (!n.domain.empty() || !single_output(n)) return std::nullopt;
    std::optional<ValueId> o = other_input(n, x);
    if (!o) return std::nullopt;
    if (n.op_type == "Mul" && near(scalar_constant(g, *o), 0.5))
      half = r;
    else if (n.op_type == "Pow" && n.input(0) == x && near(scalar_constant(g, *o), 3.0))
      cube = r;
    else if (n.op_type == "Add")
      sum = r;
  }
  if (half < 0 || cube < 0 || sum < 0) return std::nullopt;
  NodeId scaled_id, inner_id, tanh_id, one_id, out_id;
  const Node* scaled = sole_reader(g, consumers, g.node(cube).outputs[0], "Mul", &scaled_id);
  if (!scaled) return std::nullopt;
  std::optional<ValueId> c = other_input(*scaled, g.node(cube).outputs[0]);
  const std::optional<ValueId> added = other_input(g.node(sum), x);
  if (!c || !near(scalar_constant(g, *c), 0.044715) || !added || *added != scaled->outputs[0] ||
      !interior(g, consumers, scaled->outputs[0], sum))
    return std::nullopt;
  const Node* inner = sole_reader(g, consumers, g.node(sum).outputs[0], "Mul", &inner_id);
  if (!inner) return std::nullopt;
  c = other_input(*inner, g.node(sum).outputs[0]);
  if (!c || !near(scalar_constant(g, *c), std::sqrt(2.0 / M_PI))) return std::nullopt;
  const Node* t = sole_reader(g, consumers, inner->outputs[0], "Tanh", &tanh_id);
  if (!t) return std::nullopt;
  const Node* one = sole_reader(g, consumers, t->outputs[0], "Add", &one_id);
  if (!one) return std::nullopt;
  c = other_input(*one, t->outputs[0]);
  if (!c || !near(scalar_constant(g, *c), 1.0)) return std::nullopt;
  const Node* out = sole_reader(g, consumers, one->outputs[0], "Mul", &out_id);
  if (!out) return std::nullopt;
  const std::optional<ValueId> h = other_input(*out, one->outputs[0]);
  if (!h || *h != g.node(half).outputs[0] || !interior(g, consumers, *h, out_id))
    return std::nullopt;
  if (!is_f32(g, out->outputs[0]) || g.value(out->outputs[0]).shape != g.value(x).shape)
    return std::nullopt;
  std::vector<NodeId> nodes = {half, cube, sum, scaled_id, inner_id, tanh_id, one_id, out_id};
  std::sort(nodes.begin(), nodes.end());
  return TailStep{nodes, out->outputs[0], {eltwise(alg::eltwise_gelu_tanh)}};
}

}  // namespace

std::optional<TailStep> match_gelu(const Graph& g, const Consumers& consumers, ValueId x,
                                   bool whole_reader) {
  if (!is_f32(g, x)) return std::nullopt;
  // Both forms read x from every node that reads it: whole_reader holds by construction.
  if (std::optional<TailStep> t = match_gelu_tanh(g, consumers, x)) return t;
  const std::vector<NodeId>& readers = consumers[x];
  for (NodeId s_id : readers) {
    // x / sqrt(2) (or x * 1/sqrt(2)) -> Erf -> + 1.
    const Node& s = g.node(s_id);
    if (!s.domain.empty() || !single_output(s) || s.input(0) != x) continue;
    std::optional<float> c = scalar_constant(g, s.input(1));
    if (!((s.op_type == "Div" && near(c, M_SQRT2)) || (s.op_type == "Mul" && near(c, M_SQRT1_2))))
      continue;
    NodeId e_id, a_id, p_id, q_id;
    const Node* e = sole_reader(g, consumers, s.outputs[0], "Erf", &e_id);
    if (!e) continue;
    const Node* a = sole_reader(g, consumers, e->outputs[0], "Add", &a_id);
    if (!a) continue;
    std::optional<ValueId> one = other_input(*a, e->outputs[0]);
    if (!one || !near(scalar_constant(g, *one), 1.0)) continue;
    // The rest multiplies {x, 1 + erf, 0.5} in any association.
    const Node* p = sole_reader(g, consumers, a->outputs[0], "Mul", &p_id);
    if (!p) continue;
    std::optional<ValueId> o = other_input(*p, a->outputs[0]);
    if (!o) continue;
    std::vector<NodeId> nodes = {s_id, e_id, a_id, p_id};
    ValueId out = kNoValue;
    if (*o == x || near(scalar_constant(g, *o), 0.5)) {
      const Node* q = sole_reader(g, consumers, p->outputs[0], "Mul", &q_id);
      if (!q) continue;
      std::optional<ValueId> o2 = other_input(*q, p->outputs[0]);
      if (!o2 || !(*o == x ? near(scalar_constant(g, *o2), 0.5) : *o2 == x)) continue;
      nodes.push_back(q_id);
      out = q->outputs[0];
    } else {
      // (x * 0.5) * (1 + erf)
      const Value& h_out = g.value(*o);
      if (h_out.producer < 0) continue;
      const Node& h = g.node(h_out.producer);
      std::optional<ValueId> o2 = other_input(h, x);
      if (h.op_type != "Mul" || !h.domain.empty() || !o2 || !near(scalar_constant(g, *o2), 0.5) ||
          !interior(g, consumers, *o, p_id))
        continue;
      nodes.push_back(h_out.producer);
      out = p->outputs[0];
    }
    if (!is_f32(g, out) || g.value(out).shape != g.value(x).shape) continue;
    std::sort(nodes.begin(), nodes.end());
    if (whole_reader)
      for (NodeId r : readers)
        if (!std::binary_search(nodes.begin(), nodes.end(), r)) return std::nullopt;
    return TailStep{nodes, out, {eltwise(alg::eltwise_gelu_erf)}};
  }
  return std::nullopt;
}

std::optional<TailStep> match_swish(const Graph& g, const Consumers& consumers, ValueId x,
                                    bool whole_reader) {
  if (!is_f32(g, x)) return std::nullopt;
  for (NodeId s_id : consumers[x]) {
    const Node& s = g.node(s_id);
    if (!s.domain.empty() || !single_output(s) || s.input(0) != x) continue;
    // x * HardSigmoid(x) with alpha 1/6 and beta 1/2 is HardSwish (opset 13 has no op for
    // it: PyTorch exports nn.Hardswish so), x * Sigmoid(x) Swish with beta 1.
    const bool hard = s.op_type == "HardSigmoid" &&
                      std::abs(s.attr_float("alpha", 0.2f) - 1.0f / 6.0f) <= 1e-7f &&
                      s.attr_float("beta", 0.5f) == 0.5f;
    if (s.op_type != "Sigmoid" && !hard) continue;
    NodeId m_id;
    const Node* m = sole_reader(g, consumers, s.outputs[0], "Mul", &m_id);
    if (!m || other_input(*m, s.outputs[0]) != std::optional<ValueId>(x) ||
        !is_f32(g, m->outputs[0]) || g.value(m->outputs[0]).shape != g.value(x).shape)
      continue;
    std::vector<NodeId> nodes = {s_id, m_id};
    std::sort(nodes.begin(), nodes.end());
    if (whole_reader)
      for (NodeId r : consumers[x])
        if (!std::binary_search(nodes.begin(), nodes.end(), r)) return std::nullopt;
    return TailStep{nodes,
                    m->outputs[0],
                    {hard ? eltwise(alg::eltwise_hardswish) : eltwise(alg::eltwise_swish, 1.0f)}};
  }
  return std::nullopt;
}

std::optional<TailStep> gelu_around_erf(const Graph& g, const Consumers& consumers,
                                        const Node& erf) {
  if (erf.op_type != "Erf" || !erf.domain.empty() || erf.input(0) == kNoValue) return std::nullopt;
  const NodeId scale = g.value(erf.input(0)).producer;
  if (scale < 0 || g.node(scale).input(0) == kNoValue) return std::nullopt;
  std::optional<TailStep> gelu = match_gelu(g, consumers, g.node(scale).input(0), false);
  if (!gelu || std::find(gelu->nodes.begin(), gelu->nodes.end(), scale) == gelu->nodes.end())
    return std::nullopt;
  return gelu;
}

std::optional<TailStep> match_fused_activation(const Graph& g, const Consumers& consumers,
                                               ValueId x, bool whole_reader) {
  if (std::optional<TailStep> gelu = match_gelu(g, consumers, x, whole_reader)) return gelu;
  return match_swish(g, consumers, x, whole_reader);
}

bool moves_only_unit_dims(const Shape& in, const Node& transpose) {
  std::vector<int64_t> perm = transpose.attr_ints("perm");
  if (perm.empty())
    for (size_t d = 0; d < in.size(); ++d) perm.push_back(static_cast<int64_t>(in.size() - 1 - d));
  int64_t last = -1;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size())) return false;
    if (in[p] == 1) continue;
    if (p < last) return false;
    last = p;
  }
  return true;
}

std::optional<TailStep> next_tail_step(const Graph& g, const Consumers& consumers, ValueId cur,
                                       bool through_reshape) {
  if (is_graph_output(g, cur)) return std::nullopt;
  const std::vector<NodeId>& readers = consumers[cur];
  if (readers.size() == 1 && through_reshape) {
    const Node& n = g.node(readers[0]);
    const std::string& t = n.op_type;
    if (n.domain.empty() && single_output(n) && n.input(0) == cur &&
        (t == "Reshape" || t == "Flatten" || t == "Squeeze" || t == "Unsqueeze" ||
         (t == "Transpose" && moves_only_unit_dims(g.value(cur).shape, n))) &&
        is_f32(g, n.outputs[0])) {
      TailStep step{{readers[0]}, n.outputs[0], {}};
      step.reshape = true;
      return step;
    }
  }
  if (readers.size() == 1) {
    std::optional<std::vector<PostOp>> ops = node_post_ops(g, g.node(readers[0]), cur);
    if (!ops) return std::nullopt;
    return TailStep{{readers[0]}, g.node(readers[0]).outputs[0], std::move(*ops)};
  }
  if (readers.size() == 2 || readers.size() == 3)
    return match_fused_activation(g, consumers, cur, true);
  return std::nullopt;
}

namespace {

// A post-op operand shaped for the value after a reshape `from` -> `to`, shaped for the
// value before it instead (both row-major: the same element order).
std::optional<Shape> operand_before_reshape(const Shape& operand, const Shape& before,
                                            const Shape& after) {
  if (shape_numel(operand) == 1) return Shape(before.size(), 1);
  if (operand == after) return before;
  bool last_only = !after.empty() && !before.empty() && operand.back() == after.back() &&
                   after.back() == before.back();
  for (size_t i = 0; i + 1 < operand.size(); ++i) last_only &= operand[i] == 1;
  if (last_only) {
    Shape s(before.size(), 1);
    s.back() = before.back();
    return s;
  }
  return std::nullopt;
}

}  // namespace

Tail parse_tail(const Graph& subgraph, ValueId cur, std::vector<bool> covered,
                bool through_reshape) {
  const Consumers consumers = subgraph.consumers();
  Tail tail;
  // The shapes each reshape step went between, in order: later operands are mapped back
  // through them to the head's output shape.
  std::vector<std::pair<Shape, Shape>> reshapes;
  while (std::find(covered.begin(), covered.end(), false) != covered.end()) {
    std::optional<TailStep> step = next_tail_step(subgraph, consumers, cur, through_reshape);
    if (!step)
      fail(ErrorKind::kUnsupported,
           "onednn: the nodes after '{}' are not an elementwise tail it can fuse (or '{}' is "
           "also read outside)",
           subgraph.value(cur).name, subgraph.value(cur).name);
    for (NodeId n : step->nodes) {
      if (covered[n]) fail(ErrorKind::kUnsupported, "onednn: tail revisits a node");
      covered[n] = true;
    }
    if (step->reshape)
      reshapes.emplace_back(subgraph.value(cur).shape, subgraph.value(step->out).shape);
    for (PostOp op : step->ops) {
      if (op.kind == PostOp::Kind::kBinary)
        for (size_t r = reshapes.size(); r-- > 0;) {
          std::optional<Shape> s =
              operand_before_reshape(op.operand_shape, reshapes[r].first, reshapes[r].second);
          if (!s)
            fail(ErrorKind::kUnsupported, "onednn: operand {} after a reshape in the tail",
                 shape_to_string(op.operand_shape));
          op.operand_shape = *s;
        }
      tail.ops.push_back(std::move(op));
    }
    cur = step->out;
  }
  if (subgraph.outputs != std::vector<ValueId>{cur})
    fail(ErrorKind::kUnsupported, "onednn: a fused kernel produces only its last value");
  tail.out = cur;
  return tail;
}

// oneDNN 2.6's jit post-op injector evaluates every eltwise post-op of one algorithm with
// the alpha/beta of its first occurrence (x+1 then *3 came out as x+1+1: found by the
// conformance suite). Adjacent linear ops fold into one; any other repeat of an algorithm
// with different parameters is refused, so the chain is split into separate kernels.
static std::vector<PostOp> fold_for_injector(const std::vector<PostOp>& ops) {
  std::vector<PostOp> folded;
  for (const PostOp& op : ops) {
    const bool linear = op.kind == PostOp::Kind::kEltwise && op.alg == alg::eltwise_linear;
    if (linear && !folded.empty() && folded.back().kind == PostOp::Kind::kEltwise &&
        folded.back().alg == alg::eltwise_linear) {
      PostOp& prev = folded.back();  // c*(a*x + b) + d
      prev.beta = op.alpha * prev.beta + op.beta;
      prev.alpha = op.alpha * prev.alpha;
      continue;
    }
    folded.push_back(op);
  }
  for (size_t i = 0; i < folded.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (folded[i].kind == PostOp::Kind::kEltwise && folded[j].kind == PostOp::Kind::kEltwise &&
          folded[i].alg == folded[j].alg &&
          (folded[i].alpha != folded[j].alpha || folded[i].beta != folded[j].beta))
        fail(ErrorKind::kUnsupported,
             "onednn: two differently parameterised eltwise post-ops of one kind (oneDNN 2.6 "
             "would apply the first's parameters to both)");
  return folded;
}

BoundPostOps bind_post_ops(const std::vector<PostOp>& unfolded, const Shape& dst_shape,
                           const ShapeMapper& map, ValueMemories& values, bool allow_sum,
                           const dnnl::memory::desc* dst_layout) {
  BoundPostOps bound;
  auto mapped = [&](const Shape& s) {
    std::optional<Shape> m = map(s);
    if (!m)
      fail(ErrorKind::kUnsupported, "onednn: post-op operand {} does not fit the kernel",
           shape_to_string(s));
    return *m;
  };
  const std::vector<PostOp> ops = fold_for_injector(unfolded);
  int index = 0;
  for (const PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kEltwise) {
      bound.ops.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
      ++index;
      continue;
    }
    const bool runtime = op.operand != kNoValue;
    if (allow_sum && runtime && !bound.residual && op.operand_shape == dst_shape &&
        op.alg == dnnl::algorithm::binary_add) {
      // dst = result + dst, with the residual copied into dst first (from whatever layout
      // it is in: the copy is a reorder).
      bound.ops.append_sum(1.0f);
      bound.residual = values.as_is(op.operand, mapped(dst_shape));
      bound.residual_value = op.operand;
      ++index;
      continue;
    }
    // A second full-shape tensor after the sum: oneDNN 2.6's brgconv read it in another
    // layout than the one it has (wrong results, found splitting a concatenation into three
    // convs summed: conv + sum + Add of a channels-last operand). It runs as a binary
    // primitive of its own instead (the group is retried with a shorter tail).
    if (runtime && bound.residual && op.operand_shape == dst_shape)
      fail(ErrorKind::kUnsupported,
           "onednn: a second full-shape operand after a sum post-op is read in the wrong layout");
    const dnnl::memory::desc plain = plain_md(mapped(op.operand_shape));
    const bool in_dst_layout =
        dst_layout && op.operand_shape == dst_shape && dst_layout->dims() == plain.dims();
    const dnnl::memory::desc md = in_dst_layout ? *dst_layout : plain;
    dnnl::memory m = !runtime        ? values.program().constant(op.constant, plain, md)
                     : in_dst_layout ? values.read(op.operand, md)
                                     : values.view(op.operand, md);
    bound.ops.append_binary(op.alg, md);
    bound.args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, m);
    ++index;
  }
  return bound;
}

bool varies_over_space(const std::vector<PostOp>& ops) {
  return std::any_of(ops.begin(), ops.end(), [](const PostOp& op) {
    return op.kind == PostOp::Kind::kBinary && op.operand_shape.size() > 2 &&
           std::any_of(op.operand_shape.begin() + 2, op.operand_shape.end(),
                       [](int64_t d) { return d != 1; });
  });
}

std::optional<std::vector<float>> take_channel_bias(std::vector<PostOp>& ops, size_t axis,
                                                    int64_t channels) {
  if (ops.empty() || ops[0].kind != PostOp::Kind::kBinary || !ops[0].constant.defined() ||
      ops[0].alg != dnnl::algorithm::binary_add || ops[0].constant.dtype() != DType::kFloat32)
    return std::nullopt;
  const Shape& s = ops[0].operand_shape;
  if (axis >= s.size() || (s[axis] != 1 && s[axis] != channels)) return std::nullopt;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != axis && s[i] != 1) return std::nullopt;
  const float* d = ops[0].constant.data<float>();
  std::vector<float> bias(channels);
  for (int64_t c = 0; c < channels; ++c) bias[c] = d[s[axis] == 1 ? 0 : c];
  ops.erase(ops.begin());
  return bias;
}

}  // namespace collage::onednn
