// The `onednn` backend: oneDNN (DNNL) primitives, one per kernel, with elementwise tails
// fused as post-ops. Op-level: what it adds over a plain library call is compile-time
// work (primitive creation, weight packing) and the fusion of tails.
#include <algorithm>

#include "backends/onednn/attention.h"
#include "backends/onednn/epilogue.h"
#include "backends/onednn/groups.h"
#include "backends/onednn/kernels.h"
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
    const ValueId scaled = g.node(n).input(0);
    const ValueId x = g.node(g.value(scaled).producer).input(0);
    std::optional<TailStep> gelu = match_gelu(g, g.consumers(), x, false);
    return gelu && gelu->nodes == m.nodes;
  }
  return false;
}

Pattern layer_norm_pattern() {
  Pattern centered = op("Sub", {any(), op("ReduceMean")});
  Pattern var = op("ReduceMean", {op("Pow", {centered, constant()})});
  Pattern norm = op("Div", {centered, op("Sqrt", {op("Add", {var, constant()})})});
  Pattern scaled = optional(norm, [](const Pattern& p) { return op("Mul", {p, constant()}); });
  return optional(scaled, [](const Pattern& p) { return op("Add", {p, constant()}); });
}

bool layer_norm_check(const Graph& g, const Match& m) {
  return match_layer_norm(g, m.nodes).has_value() && boundary_of(g, m.nodes).outputs.size() == 1;
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
    return {
        {"Conv", op("Conv", {any(), constant(), maybe(constant())}).where(head, "float32"), {}},
        {"ConvTranspose",
         op("ConvTranspose", {any(), constant(), maybe(constant())}).where(head, "float32"),
         {}},
        {"MatMul", op("MatMul").where(head, "float32"), {}},
        {"Gemm", op("Gemm").where(head, "float32"), {}},
        {"Pool",
         op_in({"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"})
             .where(head, "float32, no Indices"),
         {}},
        {"BatchNormalization", op("BatchNormalization").where(f32, "float32"), {}},
        {"BatchNormalization+Relu",
         op("Relu", {op("BatchNormalization").where(f32, "float32")}),
         {}},
        {"LayerNormalization", op("LayerNormalization").where(f32, "float32"), {}},
        {"Softmax", op_in({"Softmax", "LogSoftmax"}).where(f32, "float32"), {}},
        {"Eltwise", op_in(unary_ops()).where(elementwise, "float32, constant parameters"), {}},
        {"Binary", op_in(binary_ops()).where(elementwise, "float32, one operand broadcast"), {}},
        {"GeluErf", gelu_pattern(), gelu_check},
        {"LayerNormDecomposition", layer_norm_pattern(), layer_norm_check},
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
    FusionRule attention;
    attention.name = "attention";
    attention.description =
        "softmax(scale * Q.K^T [+ mask | Where mask]) . V as one kernel, with or without the "
        "heads' Reshape/Transpose/Split/Slice views, the merge of heads, and the q/k/v "
        "projections (one GEMM, weights concatenated)";
    attention.generate = attention_matches;
    return {rule, attention};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "onednn: no variant '{}'", options.variant);
    if (subgraph.num_nodes() == 0) fail(ErrorKind::kUnsupported, "onednn: empty subgraph");
    const Node& first = subgraph.node(0);
    if (!first.domain.empty())
      fail(ErrorKind::kUnsupported, "onednn: op {}.{}", first.domain, first.op_type);
    const std::string& t = first.op_type;
    try {
      if (is_attention(subgraph)) return compile_attention(subgraph, options.threads);
      if (t == "Conv" || t == "ConvTranspose") return compile_conv(subgraph);
      if (t == "MatMul" || t == "Gemm" || leads_matmul(subgraph)) return compile_matmul(subgraph);
      if (t == "MaxPool" || t == "AveragePool" || t == "GlobalMaxPool" || t == "GlobalAveragePool")
        return compile_pool(subgraph);
      if (t == "BatchNormalization" || t == "LayerNormalization" || t == "Softmax" ||
          t == "LogSoftmax" || t == "ReduceMean")
        return compile_norm(subgraph);
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
