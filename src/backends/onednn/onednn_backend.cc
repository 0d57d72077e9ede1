// The `onednn` backend: oneDNN (DNNL) primitives, one per kernel, with elementwise tails
// fused as post-ops. Op-level: what it adds over a plain library call is compile-time
// work (primitive creation, weight packing) and the fusion of tails.
#include <algorithm>

#include "backends/onednn/attention.h"
#include "backends/onednn/conv1d_as_2d.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/expand_kernel.h"
#include "backends/onednn/grid_sample_kernel.h"
#include "backends/onednn/group_norm.h"
#include "backends/onednn/groups.h"
#include "backends/onednn/index_copy.h"
#include "backends/onednn/kernels.h"
#include "backends/onednn/masked_select.h"
#include "backends/onednn/recurrent_kernel.h"
#include "backends/onednn/region_kernel.h"
#include "backends/onednn/squeeze_excite.h"
#include "backends/onednn/top_k.h"
#include "backends/onednn/unary_math.h"
#include "backends/onednn/winograd_conv.h"
#include "collage/backend.h"

namespace collage::onednn {
namespace {

Pattern gelu_pattern() {
  Pattern scaled = op_in({"Div", "Mul"}, {any(), constant()});
  Pattern erf = op("Erf", {scaled});
  Pattern one_plus = op("Add", {erf, constant()}) | op("Add", {constant(), erf});
  // (x * (1 + erf)) * 0.5   or   (x * 0.5) * (1 + erf)
  return op("Mul", {op_in({"Mul"}, {any(), one_plus}), constant()}) |
         op("Mul", {op("Mul", {any(), constant()}), one_plus});
}

bool gelu_check(const Graph& g, const Match& m) {
  for (NodeId n : m.nodes) {
    if (g.node(n).op_type != "Erf") continue;
    std::optional<TailStep> gelu = gelu_around_erf(g, g.consumers(), g.node(n));
    return gelu && gelu->nodes == m.nodes;
  }
  return false;
}

// The group's kernel writes one value: no interior value of a fused op (the normalization
// under a LayerNorm's scale, a BatchNormalization under its Relu) read outside the group.
bool one_output(const Graph& g, const Match& m) {
  return boundary_of(g, m.nodes).outputs.size() == 1;
}

Pattern layer_norm_pattern() {
  Pattern centered = op("Sub", {any(), op("ReduceMean")});
  Pattern var = op("ReduceMean", {op("Pow", {centered, constant()})});
  Pattern norm = op("Div", {centered, op("Sqrt", {op("Add", {var, constant()})})});
  Pattern scaled = optional(norm, [](const Pattern& p) { return op("Mul", {p, constant()}); });
  return optional(scaled, [](const Pattern& p) { return op("Add", {p, constant()}); });
}

bool layer_norm_check(const Graph& g, const Match& m) {
  return match_layer_norm(g, m.nodes).has_value() && one_output(g, m);
}

// x / sqrt(mean(x^2) + eps) as exporters write RMSNorm: Div(1, .) or Reciprocal and a Mul
// with x (torch.rsqrt), or Div(x, .); then an optional scale.
Pattern rms_norm_pattern() {
  Pattern mean_square = op("ReduceMean", {op("Pow", {any(), constant()})});
  Pattern root =
      op("Sqrt", {op("Add", {mean_square, constant()}) | op("Add", {constant(), mean_square})});
  Pattern inverse = op("Div", {constant(), root}) | op("Reciprocal", {root});
  Pattern norm =
      op("Mul", {any(), inverse}) | op("Mul", {inverse, any()}) | op("Div", {any(), root});
  return optional(norm, [](const Pattern& p) {
    return op("Mul", {p, constant()}) | op("Mul", {constant(), p});
  });
}

bool rms_norm_check(const Graph& g, const Match& m) {
  return match_rms_norm(g, m.nodes).has_value() && one_output(g, m);
}

bool shuffle_check(const Graph& g, const Match& m) {
  if (m.nodes.size() != 3) return false;
  std::optional<std::vector<NodeId>> rest = channel_shuffle(g, g.consumers(), m.nodes[0]);
  return rest && std::vector<NodeId>{m.nodes[0], (*rest)[0], (*rest)[1]} == m.nodes;
}

constexpr const char* kWinograd = "winograd";

// A Conv group worth a Winograd measurement: a 3x3 conv of Winograd's shape (any dilation)
// whose tail collage's F(4x4, 3x3) (winograd_conv.h) takes: activations (Relu, LeakyRelu,
// Clip) and a bias or residual Add (oneDNN's Winograd kernels, the fallback for other tails,
// take Relu and those Adds only).
bool winograd_group(const Graph& sub) {
  if (sub.num_nodes() == 0 || !winograd_3x3_shape(sub, sub.node(0))) return false;
  for (size_t i = 1; i < sub.num_nodes(); ++i) {
    const std::string& t = sub.node(static_cast<NodeId>(i)).op_type;
    if (t != "Relu" && t != "LeakyRelu" && t != "Clip" && t != "Add") return false;
  }
  return true;
}

class OnednnBackend : public Backend {
 public:
  std::string name() const override { return "onednn"; }
  std::string version() const override { return backend_version(); }
  // oneDNN's CPU runtime here is OpenMP: it uses omp_get_max_threads() of the calling
  // thread, which the runtime sets to the kernel's count before each call.
  std::string thread_model() const override { return "OpenMP"; }
  std::vector<std::string> details() const override {
    return {"ISA in use: " + effective_isa(),
            "Conv weights packed at compile time to the primitive's preferred blocked layout"};
  }

  std::vector<PatternEntry> patterns() const override {
    const NodePredicate f32 = pred::input_dtype_is(0, DType::kFloat32);
    const NodePredicate head = [](const Graph& g, const Node& n) { return primitive_head(g, n); };
    const NodePredicate elementwise = [](const Graph& g, const Node& n) {
      return elementwise_head(g, n);
    };
    const NodePredicate layout = [](const Graph& g, const Node& n) { return layout_head(g, n); };
    const NodePredicate view = [](const Graph& g, const Node& n) {
      return is_view_op(n) && region_node(g, n);
    };
    return {
        {"Conv", op("Conv", {any(), any(), maybe(constant())}).where(head, "float32"), {}},
        {"ConvTranspose",
         op("ConvTranspose", {any(), any(), maybe(constant())}).where(head, "float32"),
         {}},
        {"MatMul", op("MatMul").where(head, "float32"), {}},
        {"Gemm", op("Gemm").where(head, "float32"), {}},
        {"Pool", op_in(family("pool").ops).where(head, "float32, no Indices"), {}},
        {"Resize",
         op_in(family("resample").ops)
             .where(head,
                    "float32, every mode (oneDNN's resampling where it computes the ONNX form, "
                    "else collage's taps), no extrapolation"),
         {}},
        {"BatchNormalization", op("BatchNormalization").where(f32, "float32"), {}},
        {"BatchNormalization+Relu", op("Relu", {op("BatchNormalization").where(f32, "float32")}),
         one_output},
        {"InstanceNormalization",
         op("InstanceNormalization")
             .where(region_node, "float32, one image, constant scale and bias"),
         {}},
        {"LRN", op("LRN").where(region_node, "float32, odd size"), {}},
        {"PRelu",
         op("PRelu").where([](const Graph& g, const Node& n) { return prelu_takes(g, n); },
                           "float32, constant slopes per channel"),
         {}},
        {"LayerNormalization", op("LayerNormalization").where(f32, "float32"), {}},
        {"Softmax", op_in({"Softmax", "LogSoftmax"}).where(f32, "float32"), {}},
        {"Eltwise", op_in(unary_ops()).where(elementwise, "float32, constant parameters"), {}},
        {"Binary", op_in(binary_ops()).where(elementwise, "float32, one operand broadcast"), {}},
        {"GridSample",
         op("GridSample")
             .where(grid_sample_takes, "float32, 4-D, every mode (a step of collage's own)"),
         {}},
        {"Recurrent",
         op_in({"RNN", "GRU", "LSTM"})
             .where(recurrent_takes,
                    "float32, the default functions (an RNN's Tanh, Relu or Sigmoid), no clip, "
                    "no sequence_lens, layout 0 (oneDNN's RNN primitives; one sequence with "
                    "constant weights as packed matmuls)"),
         {}},
        {"TopK",
         op("TopK").where(top_k_takes, "float32 (a kernel of collage's own: a heap per row)"),
         {}},
        {"IndexCopy",
         op_in({"Slice", "Gather"})
             .where(index_copy_takes,
                    "float32, a flip or other non-positive step, a constant index list (a step "
                    "of collage's own)"),
         {}},
        {"Expand",
         op("Expand").where(expand_takes, "float32, constant shape (a step of collage's own)"),
         {}},
        {"UnaryMath",
         op_in(unary_math_ops())
             .where(unary_math_takes, "float32 (a step of collage's own: oneDNN has no eltwise)"),
         {}},
        {"GeluErf", gelu_pattern(), gelu_check},
        {"LayerNormDecomposition", layer_norm_pattern(), layer_norm_check},
        {"RMSNormDecomposition", rms_norm_pattern(), rms_norm_check},
        {"Concat", op("Concat").where(layout, "float32"), {}},
        {"Slice",
         op_in({"Slice", "Split", "Gather"})
             .where(layout, "float32, constant cuts (positive steps, one Gather index)"),
         {}},
        {"Transpose", op("Transpose").where(layout, "float32"), {}},
        {"DepthToSpace",
         op_in({"DepthToSpace", "SpaceToDepth"}).where(layout, "float32, rank 4, DCR or CRD"),
         {}},
        {"Pad", op("Pad").where(layout, "float32, constant mode and pads, none negative"), {}},
        {"Reduce",
         op_in({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd"})
             .where(layout, "float32, constant axes"),
         {}},
        {"ChannelShuffle", op("Reshape", {op("Transpose", {op("Reshape")})}), shuffle_check},
        // A copy (its output is the kernel's own buffer): so that no plan needs the fallback
        // for the Flatten before a classifier.
        {"View",
         op_in({"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity"})
             .where(view, "float32, constant shape"),
         {}},
    };
  }

  std::vector<FusionRule> fusion_rules() const override {
    FusionRule rule;
    rule.name = "post_op_tails";
    rule.description = fmt::format(
        "Conv/ConvTranspose/MatMul/Gemm/pooling/elementwise op or exported GELU, followed by up "
        "to {} elementwise steps oneDNN post-ops express (eltwise ops, Clip with constant "
        "bounds, GELU, Add/Sub/Mul/Div/Max/Min with a constant or another tensor)",
        kMaxTail);
    rule.generate = grow_tails;
    FusionRule dw;
    dw.name = "conv1x1_depthwise";
    dw.description =
        "1x1 stride-1 Conv, eltwise tail, 3x3 depthwise Conv (pads 1, stride 1 or 2), eltwise "
        "tail: one primitive with the depthwise conv as a post-op (append_dw), where oneDNN "
        "has a jit implementation of it";
    dw.generate = grow_conv_dw;
    FusionRule attention;
    attention.name = "attention";
    attention.description =
        "softmax(scale * Q.K^T [+ mask | Where mask]) . V as one kernel, with or without the "
        "heads' Reshape/Transpose/Split/Slice views, the merge of heads, and the q/k/v "
        "projections (one GEMM, weights concatenated)";
    attention.generate = attention_matches;
    FusionRule se;
    se.name = "squeeze_excitation";
    se.description =
        "spatial mean, 1x1 Conv, eltwise ops, 1x1 Conv, eltwise gate, Mul with the input "
        "(a squeeze-excitation block): one step of collage's code around the two small "
        "matrix-vector products";
    se.generate = grow_squeeze_excite;
    FusionRule masked;
    masked.name = "masked_select";
    masked.description =
        "Where (or a Cast of a bool to float) with the comparisons, IsNaN/IsInf, logic and "
        "Casts computing its condition: one step of collage's code, no bool written out";
    masked.generate = masked_select_matches;
    FusionRule group_norm;
    group_norm.name = "group_norm";
    group_norm.description =
        "Reshape [N, G, -1], InstanceNormalization, Reshape back, Mul and Add by per-channel "
        "constants (GroupNorm as PyTorch exports it) and a SiLU after it: one step of "
        "collage's code";
    group_norm.generate = grow_group_norm;
    return {rule, dw, attention, se, masked, group_norm};
  }

  // A Conv group Winograd can run is offered as "winograd" too (collage's F(4x4, 3x3) measured
  // 1.3-2.0x faster than direct on ResNet-50's and GoogLeNet's 3x3 shapes alone, 2 threads;
  // see docs/DESIGN.md and winograd_conv.h).
  std::vector<std::string> variants(const Graph& subgraph) const override {
    if (winograd_group(subgraph)) return {"", kWinograd};
    return {""};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (subgraph.num_nodes() == 0) fail(ErrorKind::kUnsupported, "onednn: empty subgraph");
    if (!options.variant.empty() && options.variant != kWinograd)
      fail(ErrorKind::kUnsupported, "onednn: no variant '{}'", options.variant);
    const Node& first = subgraph.node(0);
    if (!first.domain.empty())
      fail(ErrorKind::kUnsupported, "onednn: op {}.{}", first.domain, first.op_type);
    const std::string& t = first.op_type;
    if (options.variant == kWinograd && t != "Conv")
      fail(ErrorKind::kUnsupported, "onednn: variant '{}' is for Conv, not {}", options.variant, t);
    try {
      if (subgraph.num_nodes() == 1 && is_view_op(first))
        return compile_group(
            subgraph, [](const Graph& sub, ValueMemories& values) { emit_group(sub, values); });
      if (is_attention(subgraph)) return compile_attention(subgraph, options.threads);
      if (squeeze_excite_group(subgraph)) {
        if (!options.variant.empty())
          fail(ErrorKind::kUnsupported, "onednn: no variant of a squeeze-excitation block");
        return compile_squeeze_excite(subgraph);
      }
      if (leads_matmul(subgraph)) return compile_matmul(subgraph);
      if (subgraph.num_nodes() == 1 && unary_math_takes(subgraph, first))
        return compile_group(subgraph, emit_unary_math);
      if (subgraph.num_nodes() == 1 && expand_takes(subgraph, first))
        return compile_group(subgraph, emit_expand);
      if (subgraph.num_nodes() == 1 && index_copy_takes(subgraph, first))
        return compile_group(subgraph, emit_index_copy);
      if (subgraph.num_nodes() == 1 && grid_sample_takes(subgraph, first))
        return compile_group(subgraph, emit_grid_sample);
      if (subgraph.num_nodes() == 1 && top_k_takes(subgraph, first))
        return compile_top_k(subgraph, options.threads);
      if (subgraph.num_nodes() == 1 && recurrent_takes(subgraph, first))
        return compile_group(subgraph, emit_recurrent);
      if (masked_select_group(subgraph)) {
        if (!options.variant.empty())
          fail(ErrorKind::kUnsupported, "onednn: no variant of a masked select");
        return compile_group(subgraph, emit_masked_select);
      }
      if (group_norm_group(subgraph)) {
        if (!options.variant.empty())
          fail(ErrorKind::kUnsupported, "onednn: no variant of a group normalization");
        return compile_group(subgraph, emit_group_norm);
      }
      if ((subgraph.num_nodes() == 1 && layout_head(subgraph, first)) ||
          (t == "Reshape" && subgraph.num_nodes() == 3))
        return compile_layout(subgraph);
      if (t == "Conv" && conv_dw_group(subgraph)) {
        if (!options.variant.empty())
          fail(ErrorKind::kUnsupported, "onednn: no variant of a 1x1 + depthwise fusion");
        return compile_conv_dw(subgraph);
      }
      // A grouped 1-D conv as a 2-D one (conv1d_as_2d.h): the region compiler rewrites it.
      if (t == "Conv" && conv1d_faster_as_2d(subgraph, first) && options.variant.empty())
        return compile_region(subgraph);
      if (t == "Conv" || t == "ConvTranspose")
        return compile_conv(subgraph, options.variant == kWinograd ? ConvAlgorithm::kWinograd
                                                                   : ConvAlgorithm::kDirect);
      if (t == "Pow" && rms_norm_group(subgraph)) return compile_group(subgraph, emit_rms_norm);
      if (const Family* f = family_of(t)) return f->compile(subgraph);
      return compile_elementwise(subgraph);
    } catch (const dnnl::error& e) {
      fail(ErrorKind::kUnsupported, "onednn: {}: {}", t, e.what());
    }
  }
};

}  // namespace
}  // namespace collage::onednn

namespace collage {
using OnednnBackend = onednn::OnednnBackend;
COLLAGE_REGISTER_BACKEND(OnednnBackend);
}  // namespace collage
