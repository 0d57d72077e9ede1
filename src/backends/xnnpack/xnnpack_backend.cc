// The `xnnpack` backend (op-level): one XNNPACK operator per match, with a trailing
// Relu/Clip folded into the operator's output clamp where the operator has one.
#include "backends/xnnpack/backend_common.h"
#include "backends/xnnpack/op_kernels.h"
#include "collage/backend.h"

namespace collage::xnnpack {
namespace {

Pattern clamp_after(const Pattern& x) {
  return op("Relu", {x}) | op("Clip", {x, maybe(constant()), maybe(constant())});
}

Pattern float32_op(std::vector<std::string> types, std::vector<Pattern> inputs = {}) {
  return op_in(std::move(types), std::move(inputs))
      .where(pred::output_dtype_is(0, DType::kFloat32), "float32");
}

// MaxPool and AveragePool where pool_window takes their attributes (a 1x1 window, dilated
// average pooling and count_include_pad with padding are refused): proposed only where
// XNNPACK builds them, so no candidate fails at compile time.
bool pool_window_takes(const Graph& graph, const Node& node) {
  if (node.op_type == "GlobalAveragePool") return true;
  try {
    pool_window(graph, node);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The kernel computes one value: a fused op's intermediate result must not be read
// elsewhere, and ops with a second output in use (MaxPool's Indices) are out.
bool single_output(const Graph& graph, const Match& match) {
  return boundary_of(graph, match.nodes).outputs.size() == 1;
}

class XnnpackBackend : public Backend {
 public:
  std::string name() const override { return "xnnpack"; }
  std::string version() const override { return backend_version(); }
  std::string thread_model() const override { return "pthreadpool"; }
  std::vector<std::string> details() const override { return backend_details(); }
  bool available() const override { return XnnpackContext::get().initialized(); }

  std::vector<PatternEntry> patterns() const override {
    Pattern conv = float32_op({"Conv"}, {any(), constant(), maybe(constant())})
                       .where(pred::input_rank_is(0, 4), "2-D");
    Pattern fc = float32_op({"MatMul"}, {any(), constant()})
                     .where(pred::input_rank_is(1, 2), "constant 2-D B") |
                 float32_op({"Gemm"}, {any(), constant(), maybe(constant())});
    Pattern pool = float32_op({"MaxPool", "AveragePool", "GlobalAveragePool"})
                       .where(pred::input_rank_is(0, 4), "2-D")
                       .where(pool_window_takes, "a window XNNPACK builds");
    Pattern binary = float32_op({"Add", "Mul", "Sub", "Div"});
    Pattern clamp =
        float32_op({"Relu"}) | float32_op({"Clip"}, {any(), maybe(constant()), maybe(constant())});
    return {
        {"conv2d", optional(conv, clamp_after), single_output},
        {"fully_connected", optional(fc, clamp_after), single_output},
        {"pool2d", pool, single_output},
        {"binary", optional(binary, clamp_after), single_output},
        {"clamp", clamp, single_output},
        {"sigmoid", float32_op({"Sigmoid"}), single_output},
        {"softmax", float32_op({"Softmax"}), single_output},
    };
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    require_available();
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "xnnpack: no variant '{}'", options.variant);
    if (subgraph.num_nodes() < 1 || subgraph.num_nodes() > 2 || subgraph.outputs.size() != 1)
      fail(ErrorKind::kUnsupported,
           "xnnpack: an op-level kernel is one operator (+ Relu/Clip), got {} nodes, {} outputs",
           subgraph.num_nodes(), subgraph.outputs.size());
    const Node& node = subgraph.node(0);
    ClampRange clamp;
    if (subgraph.num_nodes() == 2) {
      const Node& tail = subgraph.node(1);
      if (!is_clamp_op(tail) || tail.inputs.at(0) != node.outputs.at(0) ||
          tail.outputs.at(0) != subgraph.outputs[0])
        fail(ErrorKind::kUnsupported, "xnnpack: '{}' is not a clamp of '{}'", tail.name, node.name);
      clamp = clamp_range(subgraph, tail);
    } else if (node.outputs.at(0) != subgraph.outputs[0]) {
      fail(ErrorKind::kUnsupported, "xnnpack: '{}' must produce the kernel's output", node.name);
    }
    OperatorSpec spec = operator_for(subgraph, node, clamp, subgraph.num_nodes() == 2);
    return std::make_unique<OperatorKernel>(std::move(spec),
                                            XnnpackContext::get().pool(options.threads));
  }

 private:
  static OperatorSpec operator_for(const Graph& subgraph, const Node& node, const ClampRange& clamp,
                                   bool fused) {
    if (!node.domain.empty()) fail(ErrorKind::kUnsupported, "xnnpack: domain {}", node.domain);
    const std::string& t = node.op_type;
    if (t == "Conv") return conv_operator(subgraph, node, clamp);
    if (t == "MatMul" || t == "Gemm") return fully_connected_operator(subgraph, node, clamp);
    if (t == "MaxPool" || t == "AveragePool" || t == "GlobalAveragePool")
      return pool_operator(subgraph, node, clamp);
    if (is_binary_op(node)) return binary_operator(subgraph, node, clamp);
    if (!fused) return unary_operator(subgraph, node);
    fail(ErrorKind::kUnsupported, "xnnpack: no fused clamp for {}", t);
  }
};

COLLAGE_REGISTER_BACKEND(XnnpackBackend);

}  // namespace
}  // namespace collage::xnnpack
