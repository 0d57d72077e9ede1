#include "backends/onednn/groups.h"

#include <algorithm>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/expand_kernel.h"
#include "backends/onednn/grid_sample_kernel.h"
#include "backends/onednn/group_norm.h"
#include "backends/onednn/index_copy.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/masked_select.h"
#include "backends/onednn/recurrent_kernel.h"
#include "backends/onednn/squeeze_excite.h"
#include "backends/onednn/taps_resize.h"
#include "backends/onednn/unary_math.h"

namespace collage::onednn {
namespace {

std::vector<NodeId> sorted(std::vector<NodeId> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

const std::vector<std::string>& unary_ops() {
  static const std::vector<std::string> ops = {
      "Relu",       "LeakyRelu",   "Sigmoid", "Tanh",     "Elu",       "Exp",  "Log",
      "Sqrt",       "Abs",         "Neg",     "Softplus", "HardSwish", "Mish", "Round",
      "Reciprocal", "HardSigmoid", "Gelu",    "Clip",     "PRelu"};
  return ops;
}

const std::vector<std::string>& binary_ops() {
  static const std::vector<std::string> ops = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
  return ops;
}

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      // Direct convolution; emit_group and compile() pick other algorithms and fusions first.
      {"conv",
       {"Conv", "ConvTranspose"},
       [](const Graph& sub) { return compile_conv(sub, ConvAlgorithm::kDirect); },
       [](const Graph& sub, ValueMemories& values) {
         emit_conv(sub, values, ConvAlgorithm::kDirect);
       },
       true},
      {"matmul", {"MatMul", "Gemm"}, compile_matmul, emit_matmul, true},
      {"pool",
       {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"},
       compile_pool,
       emit_pool,
       true},
      {"resample", {"Resize", "Upsample"}, compile_resample, emit_resample, true},
      {"batch_norm", {"BatchNormalization"}, compile_norm, emit_batch_norm, false},
      {"instance_norm", {"InstanceNormalization"}, compile_norm, emit_instance_norm, false},
      {"lrn", {"LRN"}, compile_norm, emit_lrn, false},
      {"prelu", {"PRelu"}, compile_prelu, emit_prelu, false},
      // ReduceMean heads the exported LayerNorm decomposition.
      {"norm",
       {"LayerNormalization", "Softmax", "LogSoftmax", "ReduceMean"},
       compile_norm,
       emit_norm,
       false},
  };
  return table;
}

const Family& family(const std::string& name) {
  for (const Family& f : families())
    if (f.name == name) return f;
  fail(ErrorKind::kInternal, "onednn: no kernel family '{}'", name);
}

const Family* family_of(const std::string& op_type) {
  for (const Family& f : families())
    if (std::find(f.ops.begin(), f.ops.end(), op_type) != f.ops.end()) return &f;
  return nullptr;
}

bool is_view_op(const Node& n) {
  const std::string& t = n.op_type;
  return n.domain.empty() && (t == "Flatten" || t == "Reshape" || t == "Squeeze" ||
                              t == "Unsqueeze" || t == "Identity");
}

bool primitive_head(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.empty() || !is_f32(g, n.input(0)) || !is_f32(g, n.outputs[0]))
    return false;
  const Family* f = family_of(n.op_type);
  if (!f || !f->post_op_tail) return false;
  // Weights computed in the model too (a StyleGAN2 modulated conv, a dynamic conv): reordered
  // into the primitive's layout by a step each run (conv_kernel.cc).
  if (f->name == "conv")
    return is_f32(g, n.input(1)) && (n.input(2) == kNoValue || g.value(n.input(2)).is_constant());
  if (f->name == "matmul") return is_f32(g, n.input(1));
  if (n.op_type == "MaxPool") return n.outputs.size() == 1 || n.outputs[1] == kNoValue;
  if (f->name == "resample") return resample_form(g, n).has_value() || taps_resize_takes(g, n);
  return true;
}

bool elementwise_head(const Graph& g, const Node& n, ValueId* x) {
  for (ValueId in : n.inputs) {
    if (in == kNoValue || g.value(in).is_constant()) continue;
    if (node_post_ops(g, n, in)) {
      if (x) *x = in;
      return true;
    }
  }
  return false;
}

std::vector<Match> grow_tails(const Graph& g) {
  const Consumers consumers = g.consumers();
  std::vector<Match> out;
  auto grow = [&](std::vector<NodeId> region, ValueId cur, bool through_reshape = false,
                  bool eltwise_only = false) {
    for (int k = 0; k < kMaxTail; ++k) {
      std::optional<TailStep> step = next_tail_step(g, consumers, cur, through_reshape);
      if (!step) break;
      if (eltwise_only && std::any_of(step->ops.begin(), step->ops.end(), [](const PostOp& op) {
            return op.kind == PostOp::Kind::kBinary;
          }))
        break;
      region.insert(region.end(), step->nodes.begin(), step->nodes.end());
      cur = step->out;
      out.push_back(Match{sorted(region)});
    }
  };
  for (size_t h = 0; h < g.num_nodes(); ++h) {
    const Node& n = g.node(static_cast<NodeId>(h));
    const bool matmul = n.op_type == "MatMul" || n.op_type == "Gemm";
    // A resampling fuses eltwise post-ops only (emit_resample says why).
    const Family* f = family_of(n.op_type);
    if (primitive_head(g, n) || elementwise_head(g, n))
      grow({static_cast<NodeId>(h)}, n.outputs[0], matmul, f && f->name == "resample");
    // A MatMul/Gemm reading a reshape of its A (and nothing else reading it): the reshape
    // joins the kernel as a view (emit_matmul).
    const ValueId a = n.input(0);
    const NodeId r = matmul && primitive_head(g, n) && a != kNoValue ? g.value(a).producer : -1;
    if (r < 0 || consumers[a].size() != 1 || n.input(1) == a ||
        std::find(g.outputs.begin(), g.outputs.end(), a) != g.outputs.end())
      continue;
    const Node& rn = g.node(r);
    if (!is_reshape_node(g, rn) || g.value(rn.input(0)).is_constant() ||
        g.value(rn.input(0)).dtype != DType::kFloat32)
      continue;
    const std::vector<NodeId> pair = sorted({r, static_cast<NodeId>(h)});
    out.push_back(Match{pair});
    grow(pair, n.outputs[0], true);
  }
  for (size_t v = 0; v < g.num_values(); ++v) {
    std::optional<TailStep> gelu =
        match_fused_activation(g, consumers, static_cast<ValueId>(v), false);
    if (!gelu) continue;
    out.push_back(Match{gelu->nodes});
    grow(gelu->nodes, gelu->out);
  }
  return out;
}

std::unique_ptr<Kernel> compile_group(const Graph& subgraph, Emitter emit) {
  Program program;
  ValueMemories values(program);
  values.bind_plain_boundary(subgraph);
  emit(subgraph, values);
  return std::make_unique<ProgramKernel>(std::move(program));
}

void emit_group(const Graph& sub, ValueMemories& values, ConvAlgorithm conv_algorithm,
                DepthwisePairForm pair_form) {
  if (sub.num_nodes() == 0) fail(ErrorKind::kUnsupported, "onednn: empty group");
  const Node& first = sub.node(0);
  if (!first.domain.empty())
    fail(ErrorKind::kUnsupported, "onednn: op {}.{}", first.domain, first.op_type);
  const std::string& t = first.op_type;
  if (is_view_op(first) && sub.num_nodes() == 1) {
    require_f32(sub, first.input(0), "reshaped value");
    values.reshape(first.outputs[0], first.input(0), sub.value(first.outputs[0]).shape);
    return;
  }
  if (squeeze_excite_group(sub)) return emit_squeeze_excite(sub, values);
  // A ReduceMean heading more nodes is a LayerNorm decomposition, not a global pooling.
  if (t == "ReduceMean" && sub.num_nodes() > 1) return emit_norm(sub, values);
  if (t == "Pow" && rms_norm_group(sub)) return emit_rms_norm(sub, values);
  if (t == "Reshape" && group_norm_group(sub)) return emit_group_norm(sub, values);
  if ((t == "Reshape" && sub.num_nodes() == 3) || layout_head(sub, first))
    return emit_layout(sub, values);
  if (masked_select_group(sub)) return emit_masked_select(sub, values);
  if (sub.num_nodes() == 1 && unary_math_takes(sub, first)) return emit_unary_math(sub, values);
  if (sub.num_nodes() == 1 && expand_takes(sub, first)) return emit_expand(sub, values);
  if (sub.num_nodes() == 1 && index_copy_takes(sub, first)) return emit_index_copy(sub, values);
  if (sub.num_nodes() == 1 && grid_sample_takes(sub, first)) return emit_grid_sample(sub, values);
  if (sub.num_nodes() == 1 && recurrent_takes(sub, first)) return emit_recurrent(sub, values);
  if (t == "Conv" && conv_dw_group(sub))
    return emit_conv_dw(sub, values, conv_algorithm, pair_form);
  if (t == "Conv" || t == "ConvTranspose") return emit_conv(sub, values, conv_algorithm);
  if (const Family* f = family_of(t)) {
    if (!f->emit) fail(ErrorKind::kUnsupported, "onednn: {} runs only as a kernel of its own", t);
    return f->emit(sub, values);
  }
  return emit_elementwise(sub, values);
}

}  // namespace collage::onednn
