#include "collage/op_registry.h"

#include <mutex>

#include "ops/register.h"

namespace collage {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kInjective:
      return "injective";
    case OpKind::kReduction:
      return "reduction";
    case OpKind::kOutElemwiseFusable:
      return "out-elementwise-fusable";
    case OpKind::kOpaque:
      return "opaque";
  }
  return "opaque";
}

InferContext::InferContext(const Graph& graph, const Node& node)
    : graph_(graph), node_(node), outputs_(node.outputs.size()), set_(node.outputs.size(), false) {}

bool InferContext::has_input(size_t i) const {
  return i < node_.inputs.size() && node_.inputs[i] != kNoValue;
}

DType InferContext::input_dtype(size_t i) const {
  if (!has_input(i)) fail("input {} is required but missing", i);
  return graph_.value(node_.inputs[i]).dtype;
}

const Shape& InferContext::input_shape(size_t i) const {
  if (!has_input(i)) fail("input {} is required but missing", i);
  return graph_.value(node_.inputs[i]).shape;
}

const Tensor* InferContext::input_constant(size_t i) const {
  if (!has_input(i)) return nullptr;
  const Value& v = graph_.value(node_.inputs[i]);
  return v.is_constant() ? &v.constant : nullptr;
}

const Tensor& InferContext::require_constant(size_t i, const char* what) const {
  const Tensor* t = input_constant(i);
  if (!t)
    fail(
        "input {} ({}) must be a constant or computable from constants; collage needs static "
        "shapes",
        i, what);
  return *t;
}

void InferContext::set_output(size_t i, DType dtype, Shape shape) {
  if (i >= outputs_.size()) fail("sets output {} but has only {} outputs", i, outputs_.size());
  for (int64_t d : shape)
    if (d < 0) fail("inferred a negative dimension for output {}: {}", i, shape_to_string(shape));
  outputs_[i] = {dtype, std::move(shape)};
  set_[i] = true;
}

int64_t InferContext::normalize_axis(int64_t axis, int64_t rank) const {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) fail("axis {} is out of range for rank {}", axis, rank);
  return a;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1)
      out[i] = da;
    else if (da == 1)
      out[i] = db;
    else
      return std::nullopt;
  }
  return out;
}

OpRegistry& OpRegistry::global() {
  static OpRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] {
    ops::register_nn_ops(registry);
    ops::register_elementwise_ops(registry);
    ops::register_reduction_ops(registry);
    ops::register_tensor_ops(registry);
  });
  return registry;
}

void OpRegistry::add(OpDef def) {
  for (auto& existing : defs_)
    if (existing->name == def.name && existing->domain == def.domain) {
      *existing = std::move(def);
      return;
    }
  defs_.push_back(std::make_unique<OpDef>(std::move(def)));
}

const OpDef* OpRegistry::find(const std::string& op_type, const std::string& domain) const {
  // "ai.onnx" is the default domain's long name.
  const std::string& d = domain == "ai.onnx" ? std::string() : domain;
  for (const auto& def : defs_)
    if (def->name == op_type && def->domain == d) return def.get();
  return nullptr;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& def : defs_) out.push_back(def.get());
  return out;
}

void infer_node_outputs(Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  const OpDef* def = OpRegistry::global().find(node.op_type, node.domain);
  if (!def) fail(ErrorKind::kUnsupported, "op {} is not registered", node.op_type);
  InferContext ctx(graph, node);
  def->infer(ctx);
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (!ctx.output_set(i))
      fail(ErrorKind::kInternal, "{}: the shape function did not set output {}", node.op_type, i);
    Value& v = graph.value(node.outputs[i]);
    v.dtype = ctx.output_dtype(i);
    v.shape = ctx.output_shape(i);
    v.shape_known = true;
  }
}

}  // namespace collage
