#include "backends/onednn/attention.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "backends/onednn/dnnl_common.h"
#include "ops/tensor_util.h"
#include "util/fast_math.h"

namespace collage::onednn {

StridedView contiguous_view(const Shape& shape) {
  StridedView v;
  v.shape = shape;
  v.strides.resize(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    v.strides[i] = s;
    s *= shape[i];
  }
  return v;
}

std::optional<StridedView> reshape_view(const StridedView& view, const Shape& shape) {
  if (shape_numel(view.shape) != shape_numel(shape)) return std::nullopt;
  std::vector<int64_t> od, os;  // the old dims without the size-1 ones
  for (size_t i = 0; i < view.shape.size(); ++i)
    if (view.shape[i] != 1) {
      od.push_back(view.shape[i]);
      os.push_back(view.strides[i]);
    }
  StridedView out;
  out.shape = shape;
  out.offset = view.offset;
  out.strides.assign(shape.size(), 0);
  const size_t on = od.size(), nn = shape.size();
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  // Match groups of old dims to groups of new dims with equal products; a group of old
  // dims merged or split must be contiguous within itself.
  while (ni < nn && oi < on) {
    int64_t np = shape[ni], op = od[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= nn) return std::nullopt;
        np *= shape[nj++];
      } else {
        if (oj >= on) return std::nullopt;
        op *= od[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (os[k] != od[k + 1] * os[k + 1]) return std::nullopt;
    out.strides[nj - 1] = os[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) out.strides[k - 1] = out.strides[k] * shape[k];
    ni = nj++;
    oi = oj++;
  }
  const int64_t last = ni >= 1 ? out.strides[ni - 1] : 1;
  for (size_t k = ni; k < nn; ++k) out.strides[k] = last;  // trailing size-1 dims
  return out;
}

namespace {

using Consumers = std::vector<std::vector<NodeId>>;
using Allowed = std::function<bool(NodeId)>;

// Score rows per task: a tile of this many bytes stays in L2 (2 MiB per core here) between
// the two products and the softmax; 64 KiB is one 128-token BERT head.
constexpr int64_t kTileBytes = 64 * 1024;
// Below this many flops the kernel runs on the calling thread alone: a fork/join of the
// OpenMP team costs more than it saves. Measured on bert-tiny's attention (2 heads of 32
// tokens, 0.5 MFLOP, about 10 us of work) on two threads of the loaded 2-core machine:
// 8 us in one tune, 250 us in another (waiting at the team's barrier for a descheduled
// thread); one thread has no barrier. BERT-base's 50 MFLOP per layer runs in parallel.
constexpr double kParallelFlops = 4e6;

bool f32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kFloat32;
}

bool is_output(const Graph& g, ValueId v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

std::optional<float> scalar_f32(const Graph& g, ValueId v) {
  if (v == kNoValue || !g.value(v).is_constant() || g.value(v).dtype != DType::kFloat32 ||
      g.value(v).constant.numel() != 1)
    return std::nullopt;
  return g.value(v).constant.data<float>()[0];
}

bool is_reshape_op(const std::string& op) {
  return op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten";
}

bool is_view_op(const std::string& op) {
  return is_reshape_op(op) || op == "Transpose" || op == "Slice" || op == "Split";
}

// A data-movement node whose parameters are constants and whose outputs all exist: its
// effect is a strided view of its input.
bool view_node(const Graph& g, const Node& n) {
  if (!n.domain.empty() || !is_view_op(n.op_type) || !f32(g, n.input(0))) return false;
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue && !g.value(n.inputs[i]).is_constant()) return false;
  for (ValueId o : n.outputs)
    if (o == kNoValue) return false;
  return true;
}

// x / c, x * c or c * x with a scalar constant c: x and the factor.
std::optional<std::pair<ValueId, float>> scalar_scale(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  if (n.op_type == "Div") {
    std::optional<float> c = scalar_f32(g, n.input(1));
    if (c && *c != 0.0f && f32(g, n.input(0))) return std::make_pair(n.input(0), 1.0f / *c);
  } else if (n.op_type == "Mul") {
    for (int i : {0, 1}) {
      std::optional<float> c = scalar_f32(g, n.input(1 - i));
      if (c && f32(g, n.input(i)) && !g.value(n.input(i)).is_constant())
        return std::make_pair(n.input(i), *c);
    }
  }
  return std::nullopt;
}

// One step of a chain: `node` producing `out` (the output followed, for Split).
struct Link {
  NodeId node;
  ValueId out;
};

std::vector<int64_t> transpose_perm(const Node& n, size_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(rank - 1 - d));
  return perm;
}

// The view of `l.out` given the view of the node's data input.
std::optional<StridedView> forward(const Graph& g, const StridedView& in, const Link& l) {
  const Node& n = g.node(l.node);
  const std::string& op = n.op_type;
  const Shape& out = g.value(l.out).shape;
  if (op == "Transpose") {
    StridedView v;
    v.offset = in.offset;
    for (int64_t p : transpose_perm(n, in.shape.size())) {
      v.shape.push_back(in.shape[p]);
      v.strides.push_back(in.strides[p]);
    }
    return v;
  }
  if (is_reshape_op(op)) return reshape_view(in, out);
  if (op == "Slice") {
    const ops::SliceWindow w = ops::slice_window(g, n);
    StridedView v = in;
    for (size_t d = 0; d < in.shape.size(); ++d) {
      v.offset += w.start[d] * in.strides[d];
      v.strides[d] = in.strides[d] * w.step[d];
    }
    v.shape = w.out;
    return v;
  }
  if (op == "Split") {
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in.shape.size());
    int64_t begin = 0;
    for (ValueId o : n.outputs) {
      if (o == l.out) break;
      begin += g.value(o).shape[axis];
    }
    StridedView v = in;
    v.offset += begin * in.strides[axis];
    v.shape = out;
    return v;
  }
  if (op == "Div" || op == "Mul") return in;  // a scale: folded into the product's alpha
  return std::nullopt;
}

// The view of the node's input given the view of `l.out` (output glue: Transpose/reshapes).
std::optional<StridedView> backward(const Graph& g, const StridedView& out, const Link& l) {
  const Node& n = g.node(l.node);
  const Shape& in_shape = g.value(n.input(0)).shape;
  if (n.op_type == "Transpose") {
    StridedView v;
    v.offset = out.offset;
    v.shape.resize(in_shape.size());
    v.strides.resize(in_shape.size());
    const std::vector<int64_t> perm = transpose_perm(n, in_shape.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      v.shape[perm[i]] = out.shape[i];
      v.strides[perm[i]] = out.strides[i];
    }
    return v;
  }
  return reshape_view(out, in_shape);
}

// A matmul operand: the value its chain starts from, the view-making nodes on the way
// (forward order) and the scalar factor they apply.
struct Operand {
  ValueId root = kNoValue;
  std::vector<Link> links;
  float scale = 1;
};

Operand walk_operand(const Graph& g, ValueId v, const Allowed& allowed, bool glue) {
  Operand o;
  while (glue) {
    const NodeId p = g.value(v).producer;
    if (p < 0 || !allowed(p)) break;
    const Node& n = g.node(p);
    if (view_node(g, n)) {
      o.links.insert(o.links.begin(), Link{p, v});
      v = n.input(0);
    } else if (auto s = scalar_scale(g, n)) {
      o.scale *= s->second;
      o.links.insert(o.links.begin(), Link{p, v});
      v = s->first;
    } else {
      break;
    }
  }
  o.root = v;
  return o;
}

// q/k/v projections computed in the kernel: out = x · W (+ bias), W constant [K, N].
struct Projection {
  std::vector<NodeId> nodes;
  ValueId out = kNoValue;  // the operand root it produces
  ValueId x = kNoValue;    // what the GEMM reads (a kernel input)
  std::vector<Link> x_links;
  ValueId weight = kNoValue, bias = kNoValue, gemm_c = kNoValue;
  bool trans_b = false;
  float alpha = 1, beta = 1;
  int64_t k = 0, n = 0;
};

// `v` (a constant) broadcast along the last dim of an [.., n] output only: n or 1 values.
bool per_column(const Graph& g, ValueId v, int64_t n) {
  if (!g.value(v).is_constant() || !f32(g, v)) return false;
  const Shape& s = g.value(v).shape;
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] != 1) return false;
  return s.empty() || s.back() == n || s.back() == 1;
}

std::optional<Projection> match_projection(const Graph& g, const Consumers& cons, ValueId root,
                                           const Allowed& allowed) {
  NodeId p = g.value(root).producer;
  if (p < 0 || !allowed(p)) return std::nullopt;
  Projection pr;
  pr.out = root;
  const Node* n = &g.node(p);
  if (n->op_type == "Add" && n->domain.empty() && n->inputs.size() == 2) {
    for (int i : {0, 1}) {
      const ValueId a = n->input(i), b = n->input(1 - i);
      const NodeId q = g.value(a).producer;
      if (q >= 0 && allowed(q) && g.node(q).op_type == "MatMul" && g.value(b).is_constant() &&
          cons[a].size() == 1 && !is_output(g, a)) {
        pr.nodes.push_back(p);
        pr.bias = b;
        p = q;
        n = &g.node(q);
        break;
      }
    }
    if (pr.bias == kNoValue) return std::nullopt;
  }
  if (!n->domain.empty()) return std::nullopt;
  ValueId a = n->input(0);
  pr.weight = n->input(1);
  if (!f32(g, a) || !f32(g, pr.weight) || !g.value(pr.weight).is_constant()) return std::nullopt;
  const Shape& ws = g.value(pr.weight).shape;
  if (ws.size() != 2) return std::nullopt;
  if (n->op_type == "MatMul") {
    if (g.value(a).shape.size() < 2) return std::nullopt;
    pr.k = ws[0];
    pr.n = ws[1];
  } else if (n->op_type == "Gemm") {
    if (n->attr_int("transA", 0) != 0 || g.value(a).shape.size() != 2 || pr.bias != kNoValue)
      return std::nullopt;
    pr.trans_b = n->attr_int("transB", 0) != 0;
    pr.alpha = n->attr_float("alpha", 1.0f);
    pr.beta = n->attr_float("beta", 1.0f);
    pr.k = pr.trans_b ? ws[1] : ws[0];
    pr.n = pr.trans_b ? ws[0] : ws[1];
    if (n->input(2) != kNoValue && pr.beta != 0.0f) pr.gemm_c = n->input(2);
  } else {
    return std::nullopt;
  }
  if (g.value(a).shape.back() != pr.k) return std::nullopt;
  if (pr.bias != kNoValue && !per_column(g, pr.bias, pr.n)) return std::nullopt;
  if (pr.gemm_c != kNoValue && !per_column(g, pr.gemm_c, pr.n)) return std::nullopt;
  pr.nodes.push_back(p);
  // The GEMM's input may itself be a view (GPT-2's Reshape to 2-D, ViT's Transpose to
  // sequence-first): read its source in place when the rows stay unit-stride.
  Operand x = walk_operand(g, a, allowed, true);
  for (const Link& l : x.links)
    if (g.node(l.node).op_type == "Div" || g.node(l.node).op_type == "Mul") x = Operand{a, {}, 1};
  pr.x = x.root;
  pr.x_links = x.links;
  for (const Link& l : pr.x_links) pr.nodes.push_back(l.node);
  return pr;
}

struct MaskStep {
  enum class Kind { kScale, kAdd, kWhere };
  Kind kind = Kind::kScale;
  float scale = 1;
  ValueId operand = kNoValue;    // kAdd: the mask; kWhere: the other value (a tensor)
  ValueId condition = kNoValue;  // kWhere
  float other = 0;               // kWhere with a scalar other value
  bool other_scalar = false;
  bool keep_if_true = true;  // kWhere: the scores are kept where the condition holds
};

struct Scope {
  bool operand_glue = false, output_glue = false, projections = false;
};

struct Spec {
  std::vector<NodeId> nodes;
  ValueId output = kNoValue;
  ValueId o = kNoValue;  // the second product's output
  Shape scores;          // [B.., Sq, Sk]
  Operand q, k, v;
  std::vector<Projection> projections;
  std::vector<MaskStep> steps;  // in application order
  float alpha_qk = 1, alpha_pv = 1;
  std::vector<Link> out_links;  // o -> output
};

// `s` broadcasts to `to` (numpy, right-aligned, no rank growth).
bool broadcasts_to(const Shape& s, const Shape& to) {
  if (s.size() > to.size()) return false;
  const size_t lead = to.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != to[lead + i]) return false;
  return true;
}

// Which input of a binary node continues the score chain: the full-shaped one an
// (allowed) node produces.
int chain_input(const Graph& g, const Node& n, const std::vector<int>& candidates,
                const Shape& shape, const Allowed& allowed) {
  for (int i : candidates) {
    const ValueId a = n.input(i);
    const NodeId p = a == kNoValue ? -1 : g.value(a).producer;
    if (p >= 0 && allowed(p) && g.value(a).shape == shape && f32(g, a)) return i;
  }
  return -1;
}

std::optional<Spec> analyze(const Graph& g, const Consumers& cons, NodeId softmax,
                            const Allowed& allowed, const Scope& scope) {
  const Node& sm = g.node(softmax);
  if (sm.op_type != "Softmax" || !sm.domain.empty() || !f32(g, sm.input(0)) ||
      sm.outputs.size() != 1)
    return std::nullopt;
  Spec spec;
  spec.scores = g.value(sm.input(0)).shape;
  const Shape& shape = spec.scores;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank < 2) return std::nullopt;
  int64_t axis = sm.attr_int("axis", g.opset < 13 ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return std::nullopt;  // before opset 13 that is the same softmax too
  spec.nodes.push_back(softmax);

  // Scores: back from the softmax through scales and masks to the first product.
  ValueId cur = sm.input(0);
  std::vector<MaskStep> reversed;
  NodeId m1 = -1;
  for (int guard = 0; guard < 8 && m1 < 0; ++guard) {
    if (cons[cur].size() != 1 || is_output(g, cur) || g.value(cur).shape != shape)
      return std::nullopt;
    const NodeId p = g.value(cur).producer;
    if (p < 0 || !allowed(p)) return std::nullopt;
    const Node& n = g.node(p);
    if (!n.domain.empty()) return std::nullopt;
    if (n.op_type == "MatMul") {
      m1 = p;
      break;
    }
    spec.nodes.push_back(p);
    MaskStep step;
    if (auto s = scalar_scale(g, n)) {
      step.scale = s->second;
      cur = s->first;
    } else if (n.op_type == "Add" && n.inputs.size() == 2) {
      const int c = chain_input(g, n, {0, 1}, shape, allowed);
      if (c < 0) return std::nullopt;
      step.kind = MaskStep::Kind::kAdd;
      step.operand = n.input(1 - c);
      if (!f32(g, step.operand) || !broadcasts_to(g.value(step.operand).shape, shape))
        return std::nullopt;
      cur = n.input(c);
    } else if (n.op_type == "Where" && n.inputs.size() == 3) {
      const int c = chain_input(g, n, {1, 2}, shape, allowed);
      if (c < 0) return std::nullopt;
      step.kind = MaskStep::Kind::kWhere;
      step.condition = n.input(0);
      step.keep_if_true = c == 1;
      const ValueId other = n.input(c == 1 ? 2 : 1);
      if (g.value(step.condition).dtype != DType::kBool ||
          !broadcasts_to(g.value(step.condition).shape, shape))
        return std::nullopt;
      if (std::optional<float> s = scalar_f32(g, other)) {
        step.other = *s;
        step.other_scalar = true;
      } else if (f32(g, other) && broadcasts_to(g.value(other).shape, shape)) {
        step.operand = other;
      } else {
        return std::nullopt;
      }
      cur = n.input(c);
    } else {
      return std::nullopt;
    }
    reversed.push_back(step);
  }
  if (m1 < 0) return std::nullopt;
  if (cons[cur].size() != 1 || is_output(g, cur) || g.value(cur).shape != shape)
    return std::nullopt;
  spec.nodes.push_back(m1);
  spec.steps.assign(reversed.rbegin(), reversed.rend());
  while (!spec.steps.empty() && spec.steps.front().kind == MaskStep::Kind::kScale) {
    spec.alpha_qk *= spec.steps.front().scale;
    spec.steps.erase(spec.steps.begin());
  }

  // The first product: q [.., Sq, D] times kᵀ [.., D, Sk], batch dims broadcasting.
  const Node& mm1 = g.node(m1);
  const ValueId q = mm1.input(0), kt = mm1.input(1);
  if (!f32(g, q) || !f32(g, kt)) return std::nullopt;
  const Shape& qs = g.value(q).shape;
  const Shape& ks = g.value(kt).shape;
  const Shape batch(shape.begin(), shape.end() - 2);
  if (qs.size() < 2 || ks.size() < 2 || qs[qs.size() - 2] != shape[rank - 2] ||
      ks.back() != shape[rank - 1] || qs.back() != ks[ks.size() - 2] ||
      !broadcasts_to(Shape(qs.begin(), qs.end() - 2), batch) ||
      !broadcasts_to(Shape(ks.begin(), ks.end() - 2), batch))
    return std::nullopt;

  // Forward from the softmax: an optional no-op Cast, then the second product.
  ValueId p = sm.outputs[0];
  auto sole_reader = [&](ValueId v) -> NodeId {
    if (cons[v].size() != 1 || is_output(g, v) || !allowed(cons[v][0])) return -1;
    return cons[v][0];
  };
  NodeId next = sole_reader(p);
  if (next < 0) return std::nullopt;
  if (g.node(next).op_type == "Cast" && g.node(next).domain.empty() &&
      f32(g, g.node(next).outputs[0])) {
    spec.nodes.push_back(next);
    p = g.node(next).outputs[0];
    next = sole_reader(p);
    if (next < 0) return std::nullopt;
  }
  const Node& mm2 = g.node(next);
  if (mm2.op_type != "MatMul" || !mm2.domain.empty() || mm2.input(0) != p || mm2.input(1) == p)
    return std::nullopt;
  const ValueId v = mm2.input(1);
  spec.o = mm2.outputs[0];
  if (!f32(g, v) || !f32(g, spec.o)) return std::nullopt;
  const Shape& vs = g.value(v).shape;
  if (vs.size() < 2 || vs[vs.size() - 2] != shape[rank - 1] ||
      !broadcasts_to(Shape(vs.begin(), vs.end() - 2), batch))
    return std::nullopt;
  Shape os = batch;
  os.push_back(shape[rank - 2]);
  os.push_back(vs.back());
  if (g.value(spec.o).shape != os) return std::nullopt;
  spec.nodes.push_back(next);

  spec.q = walk_operand(g, q, allowed, scope.operand_glue);
  spec.k = walk_operand(g, kt, allowed, scope.operand_glue);
  spec.v = walk_operand(g, v, allowed, scope.operand_glue);
  spec.alpha_qk *= spec.q.scale * spec.k.scale;
  spec.alpha_pv = spec.v.scale;
  for (const Operand* o : {&spec.q, &spec.k, &spec.v})
    for (const Link& l : o->links) spec.nodes.push_back(l.node);

  if (scope.projections) {
    std::vector<ValueId> roots;
    for (const Operand* o : {&spec.q, &spec.k, &spec.v})
      if (std::find(roots.begin(), roots.end(), o->root) == roots.end()) roots.push_back(o->root);
    for (ValueId r : roots) {
      std::optional<Projection> pr = match_projection(g, cons, r, allowed);
      // One GEMM: every projection reads the same input.
      if (pr && (spec.projections.empty() || spec.projections[0].x == pr->x))
        spec.projections.push_back(*pr);
    }
    for (const Projection& pr : spec.projections)
      spec.nodes.insert(spec.nodes.end(), pr.nodes.begin(), pr.nodes.end());
  }

  spec.output = spec.o;
  while (scope.output_glue) {
    const NodeId r = sole_reader(spec.output);
    if (r < 0) break;
    const Node& n = g.node(r);
    if (!n.domain.empty() || !(is_reshape_op(n.op_type) || n.op_type == "Transpose") ||
        !view_node(g, n))
      break;
    spec.out_links.push_back(Link{r, n.outputs[0]});
    spec.nodes.push_back(r);
    spec.output = n.outputs[0];
  }
  std::sort(spec.nodes.begin(), spec.nodes.end());
  spec.nodes.erase(std::unique(spec.nodes.begin(), spec.nodes.end()), spec.nodes.end());
  return spec;
}

// How a strided 2-D matrix (rows x cols) is handed to a row-major sgemm: as stored, or
// transposed, with its leading dimension.
struct MatrixArg {
  bool trans = false;
  int64_t ld = 1;
  int64_t row_stride = 0;  // elements between consecutive rows (to start at a later row)
};

std::optional<MatrixArg> matrix_arg(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                    bool may_transpose = true) {
  MatrixArg m;
  m.row_stride = rs;
  if (cols == 1 || cs == 1) {
    m.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    if (m.ld >= std::max<int64_t>(cols, 1)) return m;
  }
  if (may_transpose && (rows == 1 || rs == 1)) {
    m.trans = true;
    m.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    if (m.ld >= std::max<int64_t>(rows, 1)) return m;
  }
  return std::nullopt;
}

// Per batch (row-major over the scores' batch dims): the element offset of each view.
std::vector<int64_t> batch_offsets(const Shape& batch, const StridedView& view,
                                   size_t matrix_dims) {
  const size_t vb = view.shape.size() - matrix_dims;  // the view's own batch dims
  const int64_t count = shape_numel(batch);
  std::vector<int64_t> out(static_cast<size_t>(count), view.offset);
  for (int64_t b = 0; b < count; ++b) {
    int64_t rest = b;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      const size_t from_end = batch.size() - 1 - d;
      if (from_end >= vb) continue;
      const size_t vd = vb - 1 - from_end;
      if (view.shape[vd] != 1) out[b] += i * view.strides[vd];
    }
  }
  return out;
}

// Everything the kernel reads, resolved: where each view's data comes from.
struct Source {
  ValueId value = kNoValue;
  int projection = -1;  // >= 0: the projection GEMM's output (the columns are in the view)
};

struct Layout {
  std::vector<Source> sources;
  struct View {
    int source = -1;
    StridedView view;
  };
  View q, k, v, out;
  int64_t ntot = 0, m = 0;      // projection GEMM: rows, total columns
  std::vector<int64_t> column;  // per projection: first column
  StridedView x_view;           // projection GEMM input, [m, K]
  MatrixArg qa, ka, va, oa;
};

int source_of(Layout& layout, ValueId v, int projection) {
  for (size_t i = 0; i < layout.sources.size(); ++i)
    if (layout.sources[i].value == v) return static_cast<int>(i);
  layout.sources.push_back({v, projection});
  return static_cast<int>(layout.sources.size()) - 1;
}

std::optional<Layout> layout_of(const Graph& g, const Spec& spec) {
  Layout L;
  // Projections: one GEMM over their shared input, outputs side by side in columns.
  for (const Projection& pr : spec.projections) {
    const int64_t m = shape_numel(g.value(pr.out).shape) / pr.n;
    if (L.m != 0 && L.m != m) return std::nullopt;
    L.m = m;
    L.column.push_back(L.ntot);
    L.ntot += pr.n;
  }
  // The GEMM's input as [m, K] rows: every projection must read it the same way.
  for (size_t i = 0; i < spec.projections.size(); ++i) {
    const Projection& pr = spec.projections[i];
    StridedView x = contiguous_view(g.value(pr.x).shape);
    for (const Link& l : pr.x_links) {
      std::optional<StridedView> next = forward(g, x, l);
      if (!next) return std::nullopt;
      x = *next;
    }
    std::optional<StridedView> x2 = reshape_view(x, {L.m, pr.k});
    if (!x2 || (pr.k > 1 && x2->strides[1] != 1) || x2->offset != 0 ||
        (L.m > 1 && x2->strides[0] < pr.k))
      return std::nullopt;
    if (i > 0 && (x2->shape != L.x_view.shape || x2->strides[0] != L.x_view.strides[0]))
      return std::nullopt;
    L.x_view = *x2;
  }
  auto operand_view = [&](const Operand& o, Layout::View* out) {
    StridedView view;
    int projection = -1;
    for (size_t i = 0; i < spec.projections.size(); ++i)
      if (spec.projections[i].out == o.root) projection = static_cast<int>(i);
    if (projection >= 0) {
      const Projection& pr = spec.projections[projection];
      StridedView cols;
      cols.shape = {L.m, pr.n};
      cols.strides = {L.ntot, 1};
      cols.offset = L.column[projection];
      std::optional<StridedView> r = reshape_view(cols, g.value(o.root).shape);
      if (!r) return false;
      view = *r;
    } else {
      view = contiguous_view(g.value(o.root).shape);
    }
    for (const Link& l : o.links) {
      std::optional<StridedView> next = forward(g, view, l);
      if (!next) return false;
      view = *next;
    }
    for (int64_t s : view.strides)
      if (s < 0) return false;
    out->source = source_of(L, o.root, projection);
    out->view = view;
    return true;
  };
  if (!operand_view(spec.q, &L.q) || !operand_view(spec.k, &L.k) || !operand_view(spec.v, &L.v))
    return std::nullopt;
  StridedView o = contiguous_view(g.value(spec.output).shape);
  for (size_t i = spec.out_links.size(); i-- > 0;) {
    std::optional<StridedView> prev = backward(g, o, spec.out_links[i]);
    if (!prev) return std::nullopt;
    o = *prev;
  }
  L.out.view = o;
  const size_t r = spec.scores.size();
  const int64_t sq = spec.scores[r - 2], sk = spec.scores[r - 1];
  auto last2 = [](const StridedView& v) {
    const size_t n = v.shape.size();
    return std::make_pair(v.strides[n - 2], v.strides[n - 1]);
  };
  const int64_t d = L.q.view.shape.back(), dv = L.v.view.shape.back();
  auto [qr, qc] = last2(L.q.view);
  auto [kr, kc] = last2(L.k.view);
  auto [vr, vc] = last2(L.v.view);
  auto [orr, oc] = last2(L.out.view);
  std::optional<MatrixArg> qa = matrix_arg(sq, d, qr, qc), ka = matrix_arg(d, sk, kr, kc),
                           va = matrix_arg(sk, dv, vr, vc),
                           oa = matrix_arg(sq, dv, orr, oc, /*may_transpose=*/false);
  if (!qa || !ka || !va || !oa) return std::nullopt;
  L.qa = *qa;
  L.ka = *ka;
  L.va = *va;
  L.oa = *oa;
  return L;
}

// ------------------------------------------------------------------------------ kernel

// A tensor broadcast over the scores: per batch offsets, row and column strides.
struct Broadcast {
  int input = -1;  // kernel input, or -1 for `constant`
  Tensor constant;
  std::vector<int64_t> offsets;
  int64_t row_stride = 0, col_stride = 0;
};

Broadcast broadcast_of(const Graph& g, ValueId v, const Shape& scores) {
  Broadcast b;
  if (g.value(v).is_constant())
    b.constant = g.value(v).constant;
  else if ((b.input = input_index(g, v)) < 0)
    fail(ErrorKind::kInternal, "onednn: attention mask '{}' is neither input nor constant",
         g.value(v).name);
  const Shape padded = pad_rank(g.value(v).shape, scores.size());
  StridedView view = contiguous_view(padded);
  for (size_t d = 0; d < padded.size(); ++d)
    if (padded[d] == 1) view.strides[d] = 0;
  const size_t r = scores.size();
  b.row_stride = view.strides[r - 2];
  b.col_stride = view.strides[r - 1];
  view.shape = scores;  // broadcast dims have stride 0
  b.offsets = batch_offsets(Shape(scores.begin(), scores.end() - 2), view, 2);
  return b;
}

struct Step {
  MaskStep::Kind kind;
  float scale = 1;
  Broadcast operand, condition;
  bool has_operand = false;
  float other = 0;
  bool keep_if_true = true;
};

struct Matrix {
  int source = -1;
  MatrixArg arg;
  std::vector<int64_t> offsets;
};

// Softmax of one row in place. Max and sum are kept in 16 lanes: a single running max or
// sum is a dependency chain GCC does not vectorize (the max loop ran scalar: 0.40 ms for
// BERT-base's 1536 rows of 128, 0.10 ms this way, as fast as oneDNN's softmax primitive).
void softmax_row(float* x, int64_t n) {
  constexpr int kLanes = 16;
  const int64_t body = n - n % kLanes;
  float part[kLanes];
  for (int l = 0; l < kLanes; ++l) part[l] = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < body; j += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] = part[l] > x[j + l] ? part[l] : x[j + l];
  float m = part[0];
  for (int l = 1; l < kLanes; ++l) m = m > part[l] ? m : part[l];
  for (int64_t j = body; j < n; ++j) m = m > x[j] ? m : x[j];
  // exp below -87 is flushed to 0 (the clamped polynomial would give 1.6e-38, which the
  // division below turns into denormals: a masked row made the P.V sgemm 50x slower).
  auto weight = [m](float v) { return v - m < -87.0f ? 0.0f : fast_exp(v - m); };
  float sums[kLanes] = {};
  for (int64_t j = 0; j < body; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = weight(x[j + l]);
      x[j + l] = e;
      sums[l] += e;
    }
  float sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += sums[l];
  for (int64_t j = body; j < n; ++j) {
    const float e = weight(x[j]);
    x[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

class AttentionKernel : public Kernel {
 public:
  struct Config {
    int64_t batches = 1, sq = 0, sk = 0, d = 0, dv = 0;
    float alpha_qk = 1, alpha_pv = 1;
    int threads = 1;
  };

  AttentionKernel(Config c, std::vector<Source> sources, std::vector<int> source_inputs,
                  std::vector<Tensor> source_constants, Matrix q, Matrix k, Matrix v, Matrix o,
                  std::vector<Step> steps, std::unique_ptr<Program> projection,
                  float* projection_out)
      : c_(c),
        sources_(std::move(sources)),
        source_inputs_(std::move(source_inputs)),
        source_constants_(std::move(source_constants)),
        q_(std::move(q)),
        k_(std::move(k)),
        v_(std::move(v)),
        o_(std::move(o)),
        steps_(std::move(steps)),
        projection_(std::move(projection)),
        projection_out_(projection_out) {
    // Tiles: as many query rows as fit kTileBytes, split evenly, and at least two tasks
    // per thread when the rows allow it (balance).
    const double flops =
        2.0 * static_cast<double>(c_.batches * c_.sq * c_.sk) * static_cast<double>(c_.d + c_.dv);
    parallel_ = c_.threads > 1 && flops >= kParallelFlops;
    int64_t chunks = std::max<int64_t>(
        1, (c_.sq * c_.sk * 4 + kTileBytes - 1) / std::max<int64_t>(kTileBytes, 1));
    if (parallel_ && c_.batches * chunks < 2 * c_.threads)
      chunks = std::max(chunks, (2 * c_.threads + c_.batches - 1) / c_.batches);
    chunks = std::min(chunks, c_.sq);
    rows_ = (c_.sq + chunks - 1) / chunks;
    chunks_ = (c_.sq + rows_ - 1) / rows_;
    tile_floats_ = (rows_ * c_.sk + 15) / 16 * 16;
    const size_t bytes =
        static_cast<size_t>(tile_floats_ * std::max(c_.threads, 1)) * sizeof(float);
    tiles_ = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (!tiles_) fail(ErrorKind::kLimit, "onednn: cannot allocate attention tiles");
    std::memset(tiles_, 0, bytes);  // touched now, not in run()
  }
  ~AttentionKernel() override { std::free(tiles_); }

  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    if (projection_) projection_->run(inputs, outputs);
    std::vector<const char*> base(sources_.size());
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (sources_[i].projection >= 0)
        base[i] = reinterpret_cast<const char*>(projection_out_);
      else if (source_inputs_[i] >= 0)
        base[i] = static_cast<const char*>(inputs[source_inputs_[i]].raw());
      else
        base[i] = static_cast<const char*>(source_constants_[i].raw());
    }
    inputs_ = inputs;
    base_ = base.data();
    out_ = static_cast<float*>(outputs[0].raw());
    const int64_t tasks = c_.batches * chunks_;
    if (!parallel_ || tasks == 1) {
      for (int64_t t = 0; t < tasks; ++t) task(t, tiles_);
      return;
    }
#pragma omp parallel num_threads(c_.threads)
    {
      float* tile = tiles_ + static_cast<int64_t>(omp_get_thread_num()) * tile_floats_;
      // Dynamic: on a shared machine one thread of the team may lose its core for a while;
      // the other then takes the remaining heads instead of waiting at the barrier.
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) task(t, tile);
    }
  }

 private:
  const float* matrix(const Matrix& m, int64_t b, int64_t row) const {
    return reinterpret_cast<const float*>(base_[m.source]) + m.offsets[b] + row * m.arg.row_stride;
  }

  const char* broadcast_row(const Broadcast& x, int64_t b, int64_t row, size_t elem) const {
    const char* p = x.input >= 0 ? static_cast<const char*>(inputs_[x.input].raw())
                                 : static_cast<const char*>(x.constant.raw());
    return p + (x.offsets[b] + row * x.row_stride) * static_cast<int64_t>(elem);
  }

  // The mask steps on the first `n` scores of a row (all of them, or the visible prefix).
  void apply_steps(int64_t b, int64_t row, float* x, int64_t n) const {
    const size_t count = visible_.empty() ? steps_.size() : steps_.size() - 1;
    for (size_t i = 0; i < count; ++i) {
      const Step& s = steps_[i];
      switch (s.kind) {
        case MaskStep::Kind::kScale:
          for (int64_t j = 0; j < n; ++j) x[j] *= s.scale;
          break;
        case MaskStep::Kind::kAdd: {
          const float* m = reinterpret_cast<const float*>(broadcast_row(s.operand, b, row, 4));
          const int64_t cs = s.operand.col_stride;
          if (cs == 1) {
            for (int64_t j = 0; j < n; ++j) x[j] += m[j];
          } else {
            for (int64_t j = 0; j < n; ++j) x[j] += m[j * cs];
          }
          break;
        }
        case MaskStep::Kind::kWhere: {
          const uint8_t* c =
              reinterpret_cast<const uint8_t*>(broadcast_row(s.condition, b, row, 1));
          const int64_t ccs = s.condition.col_stride;
          const float* o = s.has_operand
                               ? reinterpret_cast<const float*>(broadcast_row(s.operand, b, row, 4))
                               : nullptr;
          const int64_t ocs = s.has_operand ? s.operand.col_stride : 0;
          const bool keep = s.keep_if_true;
          if (ccs == 1 && !o) {  // GPT-2's causal mask: one bool row, a scalar fill
            const float other = s.other;
            for (int64_t j = 0; j < n; ++j) x[j] = (c[j] != 0) == keep ? x[j] : other;
            break;
          }
          for (int64_t j = 0; j < n; ++j) {
            const float other = o ? o[j * ocs] : s.other;
            x[j] = (c[j * ccs] != 0) == keep ? x[j] : other;
          }
          break;
        }
      }
    }
  }

  void task(int64_t t, float* tile) const {
    const int64_t b = t / chunks_, r0 = (t % chunks_) * rows_;
    const int64_t m = std::min(rows_, c_.sq - r0);
    const float* q = matrix(q_, b, r0);
    const float* k = matrix(k_, b, 0);
    const float* v = matrix(v_, b, 0);
    float* o = out_ + o_.offsets[b] + r0 * o_.arg.row_stride;
    // Inside an OpenMP region oneDNN's sgemm runs on the calling thread.
    // With a prefix mask only the keys some row of the tile sees are multiplied.
    int64_t n = c_.sk;
    if (!visible_.empty()) n = *std::max_element(visible_.begin() + r0, visible_.begin() + r0 + m);
    dnnl_sgemm(q_.arg.trans ? 'T' : 'N', k_.arg.trans ? 'T' : 'N', m, n, c_.d, c_.alpha_qk, q,
               q_.arg.ld, k, k_.arg.ld, 0.0f, tile, c_.sk);
    for (int64_t r = 0; r < m; ++r) {
      float* row = tile + r * c_.sk;
      apply_steps(b, r0 + r, row, n);
      if (visible_.empty()) {
        softmax_row(row, n);
      } else {
        const int64_t seen = visible_[r0 + r];
        softmax_row(row, seen);
        std::fill(row + seen, row + n, 0.0f);  // exp(lowest - max) is 0 in float
      }
    }
    dnnl_sgemm('N', v_.arg.trans ? 'T' : 'N', m, c_.dv, n, c_.alpha_pv, tile, c_.sk, v, v_.arg.ld,
               0.0f, o, o_.arg.ld);
  }

  Config c_;
  std::vector<Source> sources_;
  std::vector<int> source_inputs_;
  std::vector<Tensor> source_constants_;
  Matrix q_, k_, v_, o_;
  std::vector<Step> steps_;
  std::unique_ptr<Program> projection_;
  float* projection_out_ = nullptr;
  int64_t rows_ = 1, chunks_ = 1, tile_floats_ = 0;
  bool parallel_ = false;
  // Per query row, how many leading keys the last (Where) step keeps, when it keeps a
  // prefix of every row and fills the rest with a value whose exp is 0 (a causal mask):
  // the keys after it are never multiplied. Empty otherwise.
  std::vector<int64_t> visible_;

 public:
  void set_visible(std::vector<int64_t> visible) {
    visible_ = std::move(visible);
  }

 private:
  float* tiles_ = nullptr;
  // Set by run() for its tasks.
  std::span<const Tensor> inputs_;
  const char* const* base_ = nullptr;
  float* out_ = nullptr;
};

// Columns [c0, c0 + n) of the concatenated weights [k, ntot] from one projection.
void place_weights(const Graph& g, const Projection& pr, int64_t c0, int64_t ntot, float* w,
                   float* bias) {
  const float* src = g.value(pr.weight).constant.data<float>();
  for (int64_t i = 0; i < pr.k; ++i)
    for (int64_t j = 0; j < pr.n; ++j)
      w[i * ntot + c0 + j] = pr.alpha * (pr.trans_b ? src[j * pr.k + i] : src[i * pr.n + j]);
  auto add_bias = [&](ValueId v, float scale) {
    const Tensor& t = g.value(v).constant;
    for (int64_t j = 0; j < pr.n; ++j)
      bias[c0 + j] += scale * t.data<float>()[t.numel() == 1 ? 0 : j];
  };
  if (pr.bias != kNoValue) add_bias(pr.bias, 1.0f);
  if (pr.gemm_c != kNoValue) add_bias(pr.gemm_c, pr.beta);
}

// When the last step is Where(constant condition, scores, fill) with a fill whose exp
// underflows to 0 after any max subtraction, the same condition for every batch, and every
// row keeping a non-empty prefix of the keys and dropping the rest (GPT-2's tril): the
// prefix length per row. Empty otherwise (a fully masked row is uniform, not skippable).
std::vector<int64_t> visible_prefix(const std::vector<Step>& steps, int64_t sq, int64_t sk) {
  if (steps.empty()) return {};
  const Step& w = steps.back();
  if (w.kind != MaskStep::Kind::kWhere || w.has_operand || !w.keep_if_true || w.other > -1e30f ||
      !w.condition.constant.defined())
    return {};
  const Broadcast& c = w.condition;
  for (int64_t off : c.offsets)
    if (off != c.offsets[0]) return {};
  const auto* cond = static_cast<const uint8_t*>(c.constant.raw());
  std::vector<int64_t> visible(static_cast<size_t>(sq));
  for (int64_t r = 0; r < sq; ++r) {
    const uint8_t* row = cond + c.offsets[0] + r * c.row_stride;
    int64_t p = 0;
    while (p < sk && row[p * c.col_stride] != 0) ++p;
    if (p == 0) return {};
    for (int64_t j = p; j < sk; ++j)
      if (row[j * c.col_stride] != 0) return {};
    visible[static_cast<size_t>(r)] = p;
  }
  return visible;
}

std::optional<Spec> analyze_subgraph(const Graph& sub, NodeId* softmax) {
  *softmax = -1;
  for (size_t i = 0; i < sub.num_nodes(); ++i)
    if (sub.node(static_cast<NodeId>(i)).op_type == "Softmax") {
      if (*softmax >= 0) return std::nullopt;
      *softmax = static_cast<NodeId>(i);
    }
  if (*softmax < 0) return std::nullopt;
  return analyze(
      sub, sub.consumers(), *softmax, [](NodeId) { return true; }, Scope{true, true, true});
}

}  // namespace

std::vector<Match> attention_matches(const Graph& g) {
  const Consumers cons = g.consumers();
  const Allowed all = [](NodeId) { return true; };
  const Scope scopes[] = {
      {false, false, false}, {true, false, false}, {true, true, false}, {true, true, true}};
  std::vector<Match> out;
  std::set<std::vector<NodeId>> seen;
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    if (g.node(static_cast<NodeId>(i)).op_type != "Softmax") continue;
    for (const Scope& scope : scopes) {
      std::optional<Spec> spec = analyze(g, cons, static_cast<NodeId>(i), all, scope);
      if (!spec || !layout_of(g, *spec)) continue;
      const Boundary b = boundary_of(g, spec->nodes);
      if (b.outputs != std::vector<ValueId>{spec->output}) continue;
      if (seen.insert(spec->nodes).second) out.push_back(Match{spec->nodes});
    }
  }
  return out;
}

bool is_attention(const Graph& subgraph) {
  if (subgraph.num_nodes() < 2) return false;
  for (size_t i = 0; i < subgraph.num_nodes(); ++i)
    if (subgraph.node(static_cast<NodeId>(i)).op_type == "Softmax") return true;
  return false;
}

std::unique_ptr<Kernel> compile_attention(const Graph& sub, int threads) {
  NodeId softmax = -1;
  std::optional<Spec> spec = analyze_subgraph(sub, &softmax);
  if (!spec) fail(ErrorKind::kUnsupported, "onednn: not an attention it fuses");
  if (spec->nodes.size() != sub.num_nodes())
    fail(ErrorKind::kUnsupported, "onednn: the attention covers {} of the {} nodes",
         spec->nodes.size(), sub.num_nodes());
  if (sub.outputs != std::vector<ValueId>{spec->output})
    fail(ErrorKind::kUnsupported, "onednn: an attention's interior value is read outside");
  std::optional<Layout> layout = layout_of(sub, *spec);
  if (!layout) fail(ErrorKind::kUnsupported, "onednn: attention operands are not strided views");
  const Layout& L = *layout;
  const Shape& scores = spec->scores;
  const size_t r = scores.size();
  const Shape batch(scores.begin(), scores.end() - 2);

  AttentionKernel::Config c;
  c.batches = shape_numel(batch);
  c.sq = scores[r - 2];
  c.sk = scores[r - 1];
  c.d = L.q.view.shape.back();
  c.dv = L.v.view.shape.back();
  c.alpha_qk = spec->alpha_qk;
  c.alpha_pv = spec->alpha_pv;
  c.threads = std::max(threads, 1);

  std::vector<int> source_inputs;
  std::vector<Tensor> source_constants;
  for (const Source& s : L.sources) {
    source_inputs.push_back(s.projection >= 0 ? -1 : input_index(sub, s.value));
    source_constants.push_back(s.projection < 0 && sub.value(s.value).is_constant()
                                   ? sub.value(s.value).constant
                                   : Tensor());
    if (s.projection < 0 && source_inputs.back() < 0 && !source_constants.back().defined())
      fail(ErrorKind::kInternal, "onednn: attention source '{}' is neither input nor constant",
           sub.value(s.value).name);
  }
  auto matrix = [&](const Layout::View& v, const MatrixArg& arg) {
    Matrix m;
    m.source = v.source;
    m.arg = arg;
    m.offsets = batch_offsets(batch, v.view, 2);
    return m;
  };
  Matrix q = matrix(L.q, L.qa), k = matrix(L.k, L.ka), v = matrix(L.v, L.va),
         o = matrix(L.out, L.oa);

  std::vector<Step> steps;
  for (const MaskStep& ms : spec->steps) {
    Step s;
    s.kind = ms.kind;
    s.scale = ms.scale;
    s.other = ms.other;
    s.keep_if_true = ms.keep_if_true;
    if (ms.operand != kNoValue) {
      s.operand = broadcast_of(sub, ms.operand, scores);
      s.has_operand = true;
    }
    if (ms.condition != kNoValue) s.condition = broadcast_of(sub, ms.condition, scores);
    steps.push_back(std::move(s));
  }

  const std::vector<int64_t> visible = visible_prefix(steps, c.sq, c.sk);

  std::unique_ptr<Program> projection;
  float* projection_out = nullptr;
  if (!spec->projections.empty()) {
    const Projection& first = spec->projections[0];
    const int x_input = input_index(sub, first.x);
    if (x_input < 0) fail(ErrorKind::kUnsupported, "onednn: projection input is not an input");
    Tensor w(DType::kFloat32, {first.k, L.ntot});
    Tensor bias(DType::kFloat32, {1, L.ntot});
    std::memset(bias.raw(), 0, static_cast<size_t>(L.ntot) * sizeof(float));
    for (size_t i = 0; i < spec->projections.size(); ++i)
      place_weights(sub, spec->projections[i], L.column[i], L.ntot, w.data<float>(),
                    bias.data<float>());
    projection = std::make_unique<Program>();
    const int64_t ld = L.m > 1 ? L.x_view.strides[0] : first.k;  // one row: any stride
    const dnnl::memory::desc x_md({L.m, first.k}, dt::f32, Dims{ld, 1});
    const dnnl::memory::desc dst_md = plain_md({L.m, L.ntot});
    const dnnl::memory::desc bias_md = plain_md({1, L.ntot});
    dnnl::primitive_attr attr = base_attr();
    auto pd = create_pd("attention projection matmul", [&] {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(x_md, dnnl::memory::desc({first.k, L.ntot}, dt::f32, tag::any),
                             bias_md, dst_md),
          attr, cpu_engine());
    });
    if (is_reference_impl(pd.impl_info_str()))
      fail(ErrorKind::kUnsupported, "onednn: no optimized matmul for the projections");
    dnnl::memory x_mem = projection->input(x_input, x_md);
    dnnl::memory w_mem = projection->constant(w, plain_md({first.k, L.ntot}), pd.weights_desc());
    dnnl::memory b_mem = projection->constant(bias, bias_md, bias_md);
    dnnl::memory dst = projection->buffer(dst_md);
    projection->add(dnnl::matmul(pd), pd,
                    {{DNNL_ARG_SRC, x_mem},
                     {DNNL_ARG_WEIGHTS, w_mem},
                     {DNNL_ARG_BIAS, b_mem},
                     {DNNL_ARG_DST, dst}});
    projection->finalize();
    projection_out = static_cast<float*>(dst.get_data_handle());
  }
  auto kernel = std::make_unique<AttentionKernel>(
      c, L.sources, std::move(source_inputs), std::move(source_constants), std::move(q),
      std::move(k), std::move(v), std::move(o), std::move(steps), std::move(projection),
      projection_out);
  kernel->set_visible(visible);
  return kernel;
}

}  // namespace collage::onednn
