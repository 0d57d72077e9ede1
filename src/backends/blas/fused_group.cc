#include "backends/blas/fused_group.h"

#include <algorithm>

#include "collage/error.h"

namespace collage::blas {

bool is_head_op(const std::string& op_type) {
  return op_type == "MatMul" || op_type == "Gemm" || op_type == "Conv" ||
         op_type == "ConvTranspose";
}

NodeId find_head(const Graph& subgraph) {
  NodeId head = -1;
  for (size_t n = 0; n < subgraph.num_nodes(); ++n) {
    const Node& node = subgraph.node(static_cast<NodeId>(n));
    if (!node.domain.empty() && node.domain != "ai.onnx")
      fail(ErrorKind::kUnsupported, "blas: node '{}' is in domain '{}'", node.name, node.domain);
    if (!is_head_op(node.op_type)) continue;
    if (head >= 0)
      fail(ErrorKind::kUnsupported, "blas: one GEMM-like op per kernel, got '{}' and '{}'",
           subgraph.node(head).name, node.name);
    head = static_cast<NodeId>(n);
  }
  if (head < 0) fail(ErrorKind::kUnsupported, "blas: no MatMul, Gemm, Conv or ConvTranspose");
  if (head != 0)
    fail(ErrorKind::kUnsupported, "blas: node '{}' does not depend on '{}'", subgraph.node(0).name,
         subgraph.node(head).name);
  return head;
}

int input_index(const Graph& subgraph, ValueId value) {
  auto it = std::find(subgraph.inputs.begin(), subgraph.inputs.end(), value);
  return it == subgraph.inputs.end() ? -1 : static_cast<int>(it - subgraph.inputs.begin());
}

int output_index(const Graph& subgraph, ValueId value) {
  auto it = std::find(subgraph.outputs.begin(), subgraph.outputs.end(), value);
  return value == kNoValue || it == subgraph.outputs.end()
             ? -1
             : static_cast<int>(it - subgraph.outputs.begin());
}

Operand Operand::of(const Graph& subgraph, ValueId value, const char* what) {
  if (value == kNoValue) fail(ErrorKind::kUnsupported, "blas: {} is missing", what);
  const Value& v = subgraph.value(value);
  if (v.dtype != DType::kFloat32)
    fail(ErrorKind::kUnsupported, "blas: {} '{}' is {}, only float32 runs on sgemm", what, v.name,
         dtype_name(v.dtype));
  Operand op;
  if (v.is_constant()) {
    op.constant_ = v.constant;
    return op;
  }
  op.input_ = input_index(subgraph, value);
  if (op.input_ < 0)
    fail(ErrorKind::kUnsupported, "blas: {} '{}' is neither constant nor a kernel input", what,
         v.name);
  return op;
}

}  // namespace collage::blas
