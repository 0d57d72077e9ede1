// The `onednn` backend: oneDNN (DNNL) primitives, one per kernel, with elementwise tails
// fused as post-ops. Op-level: what it adds over a plain library call is compile-time
// work (primitive creation, weight packing) and the fusion of tails.
#include <algorithm>

#include "backends/onednn/epilogue.h"
#include "backends/onednn/kernels.h"
#include "collage/backend.h"

namespace collage::onednn {
namespace {

// Tail steps fused after one head at most (a bias Add, a GELU, a residual Add, a Relu...).
constexpr int kMaxTail = 6;

const std::vector<std::string> kUnaryOps = {
    "Relu", "LeakyRelu", "Sigmoid",   "Tanh", "Elu",   "Exp",        "Log",         "Sqrt", "Abs",
    "Neg",  "Softplus",  "HardSwish", "Mish", "Round", "Reciprocal", "HardSigmoid", "Gelu", "Clip"};
const std::vector<std::string> kBinaryOps = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};

bool is_f32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::kFloat32;
}

// Ops whose primitive takes post-ops, judged on the node alone (compile() checks the rest).
bool primitive_head(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.outputs.empty() || !is_f32(g, n.input(0)) || !is_f32(g, n.outputs[0]))
    return false;
  const std::string& t = n.op_type;
  if (t == "Conv" || t == "ConvTranspose")
    return g.value(n.input(1)).is_constant() &&
           (n.input(2) == kNoValue || g.value(n.input(2)).is_constant());
  if (t == "MatMul" || t == "Gemm") return is_f32(g, n.input(1));
  if (t == "MaxPool") return n.outputs.size() == 1 || n.outputs[1] == kNoValue;
  return t == "AveragePool" || t == "GlobalMaxPool" || t == "GlobalAveragePool";
}

// An elementwise node this backend runs on its own, reading `*x`.
bool elementwise_head(const Graph& g, const Node& n, ValueId* x = nullptr) {
  for (ValueId in : n.inputs) {
    if (in == kNoValue || g.value(in).is_constant()) continue;
    if (node_post_ops(g, n, in)) {
      if (x) *x = in;
      return true;
    }
  }
  return false;
}

std::vector<NodeId> sorted(std::vector<NodeId> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Every head (primitive, elementwise node, exported GELU) with each prefix of its tail.
std::vector<Match> grow_tails(const Graph& g) {
  const Consumers consumers = g.consumers();
  std::vector<Match> out;
  auto grow = [&](std::vector<NodeId> region, ValueId cur) {
    for (int k = 0; k < kMaxTail; ++k) {
      std::optional<TailStep> step = next_tail_step(g, consumers, cur);
      if (!step) break;
      region.insert(region.end(), step->nodes.begin(), step->nodes.end());
      cur = step->out;
      out.push_back(Match{sorted(region)});
    }
  };
  for (size_t h = 0; h < g.num_nodes(); ++h) {
    const Node& n = g.node(static_cast<NodeId>(h));
    if (primitive_head(g, n) || elementwise_head(g, n))
      grow({static_cast<NodeId>(h)}, n.outputs[0]);
  }
  for (size_t v = 0; v < g.num_values(); ++v) {
    std::optional<TailStep> gelu = match_gelu(g, consumers, static_cast<ValueId>(v), false);
    if (!gelu) continue;
    out.push_back(Match{gelu->nodes});
    grow(gelu->nodes, gelu->out);
  }
  return out;
}

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
  std::string version() const override { return library_version(); }
  // oneDNN's CPU runtime here is OpenMP: it uses omp_get_max_threads() of the calling
  // thread, which set_thread_budget() already sets; there is no per-call thread count.
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
        {"Eltwise", op_in(kUnaryOps).where(elementwise, "float32, constant parameters"), {}},
        {"Binary", op_in(kBinaryOps).where(elementwise, "float32, one operand broadcast"), {}},
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
    return {rule};
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph) override {
    if (subgraph.num_nodes() == 0) fail(ErrorKind::kUnsupported, "onednn: empty subgraph");
    const Node& first = subgraph.node(0);
    if (!first.domain.empty())
      fail(ErrorKind::kUnsupported, "onednn: op {}.{}", first.domain, first.op_type);
    const std::string& t = first.op_type;
    try {
      if (t == "Conv" || t == "ConvTranspose") return compile_conv(subgraph);
      if (t == "MatMul" || t == "Gemm") return compile_matmul(subgraph);
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
