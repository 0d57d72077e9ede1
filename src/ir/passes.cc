// Graph passes: shape inference (which folds constants as it goes), constant folding
// clean-up, BatchNormalization folded into convolutions, and dead-code removal.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "collage/model.h"
#include "collage/op_registry.h"
#include "ir/model_passes.h"

namespace collage {
namespace {

// Folding trades load time and memory for run time; beyond this a folded value is more
// likely a weight blown up by a Tile/Expand than a shape computation, so it is left to run.
constexpr int64_t kFoldLimitBytes = int64_t{64} << 20;

// Folding these would freeze one sample of what should differ per run.
bool is_nondeterministic(const Node& node) {
  static const std::set<std::string> ops = {"RandomNormal",     "RandomUniform",
                                            "RandomNormalLike", "RandomUniformLike",
                                            "Bernoulli",        "Multinomial"};
  return ops.count(node.op_type) != 0;
}

std::string qualified_op(const Node& node) {
  return node.domain.empty() ? node.op_type : node.domain + "." + node.op_type;
}

// Fails listing every unsupported op, so one run tells a user everything that is missing.
void check_all_supported(const Graph& graph) {
  const Node* first = nullptr;
  std::set<std::string> missing;
  for (const Node& node : graph.nodes()) {
    // Without a reference kernel nothing could run the op (the registry's definition).
    const OpDef* def = OpRegistry::global().find(node.op_type, node.domain);
    if (def && def->infer && def->reference) continue;
    if (!first) first = &node;
    missing.insert(qualified_op(node));
  }
  if (!first) return;
  std::string all;
  for (const auto& name : missing) all += (all.empty() ? "" : ", ") + name;
  fail(ErrorKind::kUnsupported, "node '{}': op '{}' is not supported ({} unsupported op{}: {})",
       first->name, qualified_op(*first), missing.size(), missing.size() == 1 ? "" : "s", all);
}

// --- Opset 1-6 semantics, rewritten into what the opset-7+ shape functions expect. ---

void use_reshaped_constant(Graph& graph, NodeId id, size_t input, Shape shape) {
  ValueId v = graph.node(id).inputs[input];
  if (!graph.value(v).is_constant())
    fail(ErrorKind::kUnsupported,
         "node '{}' ({}): opset-{} broadcasting of computed input '{}' is not supported",
         graph.node(id).name, graph.node(id).op_type, graph.opset, graph.value(v).name);
  Tensor t = graph.value(v).constant.reshaped(std::move(shape));
  std::string name = graph.value(v).name + "/" + graph.node(id).name + "/legacy_broadcast";
  ValueId nv = graph.add_constant(std::move(name), std::move(t));
  graph.node(id).inputs[input] = nv;
}

// Before opset 7, `broadcast=1` aligned B with A starting at `axis` (default: trailing).
void normalize_legacy_broadcast(Graph& graph, NodeId id) {
  Node& node = graph.node(id);
  bool broadcast = node.attr_int("broadcast", 0) != 0;
  if (broadcast && node.inputs.size() == 2 && node.inputs[0] != kNoValue &&
      node.inputs[1] != kNoValue) {
    auto ra = static_cast<int64_t>(graph.value(node.inputs[0]).shape.size());
    Shape b = graph.value(node.inputs[1]).shape;
    auto rb = static_cast<int64_t>(b.size());
    int64_t axis = node.has_attr("axis") ? node.attr_int("axis", 0) : ra - rb;
    if (axis < 0) axis += ra;
    int64_t trailing = ra - axis - rb;
    if (axis < 0 || trailing < 0)
      fail(ErrorKind::kShape,
           "node '{}' ({}): legacy broadcast axis {} does not fit ranks {} and {}", node.name,
           node.op_type, node.attr_int("axis", 0), ra, rb);
    if (trailing > 0) {
      b.insert(b.end(), trailing, 1);
      use_reshaped_constant(graph, id, 1, std::move(b));
    }
  }
  graph.node(id).attrs.erase("broadcast");
  graph.node(id).attrs.erase("axis");
}

// Before opset 7, a PRelu slope of size C applied per channel (axis 1).
void normalize_legacy_prelu(Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  if (node.inputs.size() != 2 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue) return;
  const Shape& x = graph.value(node.inputs[0]).shape;
  const Shape& slope = graph.value(node.inputs[1]).shape;
  if (x.size() < 3 || slope.size() != 1 || slope[0] == 1 || slope[0] != x[1]) return;
  Shape shape(x.size() - 1, 1);
  shape[0] = slope[0];
  use_reshaped_constant(graph, id, 1, std::move(shape));
}

void normalize_legacy(Graph& graph, NodeId id) {
  static const std::set<std::string> broadcast_ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"};
  Node& node = graph.node(id);
  if (graph.opset >= 7 || !node.domain.empty()) return;
  if (node.op_type == "Gemm") node.attrs.erase("broadcast");
  if (node.op_type == "PRelu") normalize_legacy_prelu(graph, id);
  if (broadcast_ops.count(node.op_type)) normalize_legacy_broadcast(graph, id);
}

// --- Inference and folding of one node. ---

void check_inputs_typed(const Graph& graph, const Node& node) {
  for (ValueId v : node.inputs)
    if (v != kNoValue && (!graph.value(v).shape_known || graph.value(v).dtype == DType::kUndefined))
      fail(ErrorKind::kInternal, "node '{}' ({}): input '{}' has no inferred type", node.name,
           node.op_type, graph.value(v).name);
}

void check_size(const Node& node, const Value& v, int64_t max_bytes) {
  int64_t numel = 0;
  try {
    numel = shape_numel(v.shape);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("node '{}' ({}): output '{}': {}", node.name, node.op_type,
                                      v.name, e.what()));
  }
  auto size = static_cast<int64_t>(std::max<size_t>(dtype_size(v.dtype), 1));
  if (numel > max_bytes / size)
    fail(ErrorKind::kLimit,
         "node '{}' ({}): output '{}' of shape {} ({}) exceeds the limit of {} bytes", node.name,
         node.op_type, v.name, shape_to_string(v.shape), dtype_name(v.dtype), max_bytes);
}

void infer_node(Graph& graph, NodeId id, const OpDef& def, const std::vector<bool>& used,
                const LoadOptions& options) {
  Node& node = graph.node(id);
  InferContext ctx(graph, node);
  try {
    def.infer(ctx);
  } catch (const Error& e) {
    // Helpers shared by shape functions (shape_numel, broadcasting) do not know the node;
    // without it a user cannot tell which of thousands of nodes is at fault.
    std::string prefix = fmt::format("node '{}' ({}): ", node.name, node.op_type);
    if (std::string(e.what()).find(prefix) != std::string::npos) throw;
    throw Error(e.kind(), prefix + e.what());
  } catch (const std::exception& e) {
    fail(ErrorKind::kInternal, "node '{}' ({}): shape inference failed: {}", node.name,
         node.op_type, e.what());
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    ValueId v = node.outputs[i];
    if (v == kNoValue) continue;
    Value& value = graph.value(v);
    if (!ctx.output_set(i)) {
      if (used[v])
        fail(ErrorKind::kUnsupported, "node '{}' ({}): output {} ('{}') is not supported",
             node.name, node.op_type, i, value.name);
      // An optional output nobody reads: the node need not produce it.
      node.outputs[i] = kNoValue;
      value.producer = -1;
      continue;
    }
    value.dtype = ctx.output_dtype(i);
    value.shape = ctx.output_shape(i);
    value.shape_known = true;
    if (dtype_size(value.dtype) == 0)
      fail(ErrorKind::kInternal, "node '{}' ({}): inferred element type {} for output '{}'",
           node.name, node.op_type, dtype_name(value.dtype), value.name);
    check_size(node, value, options.max_tensor_bytes);
  }
}

bool is_shape_query(const Node& node) {
  return node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size");
}

// Shape and Size only need the input's shape, which is always known: computing them here
// avoids materialising (possibly huge) input data.
Tensor eval_shape_query(const Graph& graph, const Node& node) {
  const Shape& in = graph.value(node.inputs.at(0)).shape;
  if (node.op_type == "Size") return Tensor::scalar<int64_t>(shape_numel(in));
  auto rank = static_cast<int64_t>(in.size());
  auto clamp = [&](int64_t a) { return std::clamp(a < 0 ? a + rank : a, int64_t{0}, rank); };
  int64_t start = clamp(node.attr_int("start", 0));
  int64_t end = clamp(node.attr_int("end", rank));
  std::vector<int64_t> dims(in.begin() + start, in.begin() + std::max(start, end));
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(dims.size())}, dims);
}

bool can_fold(const Graph& graph, const Node& node, const OpDef& def) {
  if (is_nondeterministic(node)) return false;
  if (is_shape_query(node)) return node.inputs.size() == 1 && node.inputs[0] != kNoValue;
  if (!def.reference) return false;
  for (ValueId v : node.inputs)
    if (v != kNoValue && !graph.value(v).is_constant()) return false;
  int64_t bytes = 0;
  for (ValueId v : node.outputs) {
    if (v == kNoValue) continue;
    const Value& value = graph.value(v);
    if (!value.shape_known) return false;
    bytes += shape_numel(value.shape) * static_cast<int64_t>(dtype_size(value.dtype));
  }
  return bytes <= kFoldLimitBytes;
}

std::vector<Tensor> run_reference(const Graph& graph, const Node& node, const OpDef& def) {
  std::vector<Tensor> ins;
  for (ValueId v : node.inputs) ins.push_back(v == kNoValue ? Tensor() : graph.value(v).constant);
  std::vector<Tensor> outs;
  for (ValueId v : node.outputs)
    outs.push_back(v == kNoValue ? Tensor() : Tensor(graph.value(v).dtype, graph.value(v).shape));
  RefKernel kernel = def.reference(graph, node);
  kernel(ins, outs);
  return outs;
}

void fold_node(Graph& graph, NodeId id, const OpDef& def) {
  const Node& node = graph.node(id);
  std::vector<Tensor> outs;
  try {
    if (is_shape_query(node))
      outs.push_back(eval_shape_query(graph, node));
    else
      outs = run_reference(graph, node, def);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("node '{}' ({}): constant folding failed: {}", node.name,
                                      node.op_type, e.what()));
  } catch (const std::exception& e) {
    fail(ErrorKind::kInternal, "node '{}' ({}): constant folding failed: {}", node.name,
         node.op_type, e.what());
  }
  for (size_t i = 0; i < node.outputs.size() && i < outs.size(); ++i) {
    if (node.outputs[i] == kNoValue) continue;
    Value& value = graph.value(node.outputs[i]);
    if (outs[i].shape() != value.shape || outs[i].dtype() != value.dtype)
      fail(ErrorKind::kInternal, "node '{}' ({}): folded output '{}' is {} {}, inferred {} {}",
           node.name, node.op_type, value.name, dtype_name(outs[i].dtype()),
           shape_to_string(outs[i].shape()), dtype_name(value.dtype), shape_to_string(value.shape));
    value.constant = std::move(outs[i]);
  }
}

bool outputs_all_constant(const Graph& graph, const Node& node) {
  for (ValueId v : node.outputs)
    if (v != kNoValue && !graph.value(v).is_constant()) return false;
  return true;
}

}  // namespace

void infer_shapes(Graph& graph, const LoadOptions& options) {
  check_all_supported(graph);
  for (ValueId v : graph.inputs)
    if (!graph.value(v).shape_known)
      fail(ErrorKind::kShape, "input '{}' has no static shape", graph.value(v).name);
  std::vector<bool> used(graph.num_values(), false);
  for (const Node& node : graph.nodes())
    for (ValueId v : node.inputs)
      if (v != kNoValue) used[v] = true;
  for (ValueId v : graph.outputs) used[v] = true;

  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    const OpDef& def = *OpRegistry::global().find(graph.node(id).op_type, graph.node(id).domain);
    check_inputs_typed(graph, graph.node(id));
    normalize_legacy(graph, id);
    infer_node(graph, id, def, used, options);
    // Folding right away lets later shape functions see computed shapes as constants.
    if (can_fold(graph, graph.node(id), def)) fold_node(graph, id, def);
  }
}

void fold_constants(Graph& graph, const LoadOptions& options) {
  std::vector<bool> remove(graph.num_nodes(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.num_nodes()); ++id) {
    const Node& node = graph.node(id);
    if (!outputs_all_constant(graph, node)) {
      const OpDef* def = OpRegistry::global().find(node.op_type, node.domain);
      if (!def || !can_fold(graph, node, *def)) continue;
      fold_node(graph, id, *def);
    }
    remove[id] = true;
  }
  // prune() detaches the producers: the folded outputs become plain constants.
  graph.prune(remove);
}

void remove_dead_code(Graph& graph) {
  std::vector<bool> live(graph.num_values(), false);
  for (ValueId v : graph.outputs) live[v] = true;
  std::vector<bool> remove(graph.num_nodes(), true);
  for (auto id = static_cast<NodeId>(graph.num_nodes()) - 1; id >= 0; --id) {
    const Node& node = graph.node(id);
    bool needed = std::any_of(node.outputs.begin(), node.outputs.end(),
                              [&](ValueId v) { return v != kNoValue && live[v]; });
    if (!needed) continue;
    remove[id] = false;
    for (ValueId v : node.inputs)
      if (v != kNoValue) live[v] = true;
  }
  graph.prune(remove);
}

namespace {

// All of `v`'s values are zero (a constant), or none are given.
bool all_zero(const Graph& graph, ValueId v) {
  if (v == kNoValue) return true;
  if (!graph.value(v).is_constant()) return false;
  const std::vector<int64_t> values = graph.value(v).constant.to_int_vector();
  return std::all_of(values.begin(), values.end(), [](int64_t x) { return x == 0; });
}

// Whether `node` hands its first input on unchanged: Identity; Dropout at inference (its
// shape function refuses every other form) with its mask unread; and ops whose attributes
// or constant inputs make them copies (a Pad of zeros, an identity Transpose, a Slice,
// Reshape or Expand to the input's own shape, a one-input Concat, a Cast to the same type).
bool hands_input_on(const Graph& graph, const Node& node, const std::vector<bool>& read) {
  if (!node.domain.empty() || node.inputs.empty() || node.inputs[0] == kNoValue ||
      node.outputs.empty() || node.outputs[0] == kNoValue)
    return false;
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue && read[node.outputs[i]]) return false;
  const Value& in = graph.value(node.inputs[0]);
  const Value& out = graph.value(node.outputs[0]);
  if (!in.shape_known || !out.shape_known || in.shape != out.shape || in.dtype != out.dtype)
    return false;
  const std::string& t = node.op_type;
  if (t == "Identity" || t == "Dropout" || t == "Reshape" || t == "Flatten" || t == "Squeeze" ||
      t == "Unsqueeze" || t == "Expand" || t == "Cast")
    return true;
  if (t == "Concat") return node.inputs.size() == 1;
  if (t == "Pad") {
    if (!node.has_attr("pads")) return all_zero(graph, node.input(1));  // opset 11+: an input
    const std::vector<int64_t> pads = node.attr_ints("pads");
    return std::all_of(pads.begin(), pads.end(), [](int64_t x) { return x == 0; });
  }
  if (t == "Transpose") {
    const std::vector<int64_t> perm = node.attr_ints("perm");
    for (size_t d = 0; d < perm.size(); ++d)
      if (perm[d] != static_cast<int64_t>(d)) return false;
    return !perm.empty() || in.shape.size() <= 1;
  }
  if (t == "Slice") {
    // Same shape and forward steps: every element, in order (opset 10+: steps an input).
    const ValueId steps = node.input(4);
    if (steps == kNoValue) return true;
    if (!graph.value(steps).is_constant()) return false;
    const std::vector<int64_t> values = graph.value(steps).constant.to_int_vector();
    return std::all_of(values.begin(), values.end(), [](int64_t x) { return x > 0; });
  }
  return false;
}

}  // namespace

NodeId append_lowered_node(Graph& graph, const std::string& base, int& count, const std::string& op,
                           std::vector<ValueId> inputs, std::map<std::string, Attribute> attrs,
                           ValueId output) {
  const std::string name = fmt::format("{}/{}_{}", base, op, count++);
  Node node;
  node.name = name;
  node.op_type = op;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.outputs = {output == kNoValue ? graph.add_value(name + ":0") : output};
  const NodeId id = graph.add_node(std::move(node));
  graph.value(graph.node(id).outputs[0]).producer = id;
  infer_node_outputs(graph, id);
  return id;
}

ValueId append_int64_constant(Graph& graph, const std::string& base, int& count,
                              const std::string& what, const std::vector<int64_t>& values) {
  Tensor t = Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values);
  return graph.add_constant(fmt::format("{}/{}_{}", base, what, count++), std::move(t));
}

ValueId append_float_constant(Graph& graph, const std::string& base, int& count,
                              const std::string& what, float value) {
  return graph.add_constant(fmt::format("{}/{}_{}", base, what, count++),
                            Tensor::scalar<float>(value));
}

ValueId append_axis_slice(Graph& graph, const std::string& base, int& count, ValueId x,
                          int64_t axis, int64_t start, int64_t end, ValueId output) {
  const std::vector<int64_t> starts = {start}, ends = {end}, axes = {axis};
  const NodeId id =
      graph.opset >= 10
          ? append_lowered_node(graph, base, count, "Slice",
                                {x, append_int64_constant(graph, base, count, "starts", starts),
                                 append_int64_constant(graph, base, count, "ends", ends),
                                 append_int64_constant(graph, base, count, "axes", axes)},
                                {}, output)
          : append_lowered_node(graph, base, count, "Slice", {x},
                                {{"starts", Attribute::from_ints(starts)},
                                 {"ends", Attribute::from_ints(ends)},
                                 {"axes", Attribute::from_ints(axes)}},
                                output);
  return graph.node(id).outputs[0];
}

void lower_nodes(Graph& graph, const std::function<bool(Graph&, const Node&)>& lower) {
  std::vector<bool> remove(graph.num_nodes(), false);
  bool any = false;
  const size_t original = graph.num_nodes();
  for (size_t i = 0; i < original; ++i) {
    // A copy: appending nodes may move the node list.
    const Node node = graph.node(static_cast<NodeId>(i));
    if (!lower(graph, node)) continue;
    Node& old = graph.node(static_cast<NodeId>(i));
    old.inputs.clear();
    old.outputs.clear();
    remove[i] = true;
    any = true;
  }
  if (!any) return;
  remove.resize(graph.num_nodes(), false);
  graph.prune(remove);
  graph.sort_topologically();
}

void remove_identities(Graph& graph) {
  // A graph output keeps its producer: its name is the output's.
  std::vector<bool> leaves(graph.num_values(), false), read(graph.num_values(), false);
  for (ValueId v : graph.outputs) leaves[v] = read[v] = true;
  for (const Node& node : graph.nodes())
    for (ValueId v : node.inputs)
      if (v != kNoValue) read[v] = true;
  std::vector<ValueId> same(graph.num_values());
  for (size_t v = 0; v < same.size(); ++v) same[v] = static_cast<ValueId>(v);
  std::vector<bool> remove(graph.num_nodes(), false);
  bool any = false;
  for (size_t i = 0; i < graph.num_nodes(); ++i) {
    Node& node = graph.node(static_cast<NodeId>(i));
    for (ValueId& v : node.inputs)
      if (v != kNoValue) v = same[v];
    if (!hands_input_on(graph, node, read) || leaves[node.outputs[0]]) continue;
    same[node.outputs[0]] = node.inputs[0];
    remove[i] = true;
    any = true;
  }
  if (any) graph.prune(remove);
}

void bypass_broadcast_expands(Graph& graph) {
  // The ops whose inputs broadcast against each other (multidirectionally): an Expand of one
  // of them repeats what the op's broadcast would. The registry's OpKind::kBroadcast less
  // PRelu, whose slope broadcasts to its input and not the other way.
  static const std::set<std::string> kBroadcasting = {
      "Add", "Sub",  "Mul",   "Div",  "Pow",     "Max",         "Min",
      "Sum", "Mean", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
      "And", "Or",   "Xor",   "Mod",  "Where",   "BitShift"};
  std::vector<NodeId> expanded(graph.num_values(), -1);  // the Expand writing each value
  for (size_t i = 0; i < graph.num_nodes(); ++i) {
    const Node& n = graph.node(static_cast<NodeId>(i));
    if (n.domain.empty() && n.op_type == "Expand" && n.outputs.size() == 1 &&
        n.input(0) != kNoValue && graph.value(n.input(0)).shape_known)
      expanded[n.outputs[0]] = static_cast<NodeId>(i);
  }
  for (size_t i = 0; i < graph.num_nodes(); ++i) {
    Node& reader = graph.node(static_cast<NodeId>(i));
    if (!reader.domain.empty() || !kBroadcasting.count(reader.op_type) ||
        reader.outputs.size() != 1 || !graph.value(reader.outputs[0]).shape_known)
      continue;
    for (ValueId& v : reader.inputs) {
      if (v == kNoValue || expanded[v] < 0) continue;
      const ValueId source = graph.node(expanded[v]).input(0);
      std::optional<Shape> shape = Shape{};
      for (const ValueId in : reader.inputs) {
        if (in == kNoValue || !graph.value(in).shape_known || !shape) {
          shape.reset();
          break;
        }
        shape = broadcast_shapes(*shape, graph.value(in == v ? source : in).shape);
      }
      if (shape && *shape == graph.value(reader.outputs[0]).shape) v = source;
    }
  }
}

void expand_two_sided_broadcasts(Graph& graph) {
  static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Max", "Min"};
  lower_nodes(graph, [](Graph& g, const Node& node) {
    if (!node.domain.empty() || !kBinary.count(node.op_type) || node.inputs.size() != 2 ||
        node.outputs.size() != 1 || node.outputs[0] == kNoValue)
      return false;
    const Value& out = g.value(node.outputs[0]);
    if (out.dtype != DType::kFloat32 || !out.shape_known) return false;
    int expand = -1;  // the input to expand: a computed one, the larger if both are
    int64_t largest = -1;
    for (int k = 0; k < 2; ++k) {
      const Value& in = g.value(node.inputs[k]);
      if (!in.shape_known || in.shape == out.shape) return false;
      int64_t numel = 1;
      for (const int64_t d : in.shape) numel *= d;
      if (!in.is_constant() && numel > largest) {
        expand = k;
        largest = numel;
      }
    }
    if (expand < 0) return false;  // two constants: folded
    int count = 0;
    std::vector<ValueId> inputs = node.inputs;
    const Shape shape = out.shape;  // a copy: appending moves the values
    const NodeId e = append_lowered_node(
        g, node.name, count, "Expand",
        {inputs[expand], append_int64_constant(g, node.name, count, "shape", shape)}, {});
    inputs[expand] = g.node(e).outputs[0];
    append_lowered_node(g, node.name, count, node.op_type, inputs, node.attrs, node.outputs[0]);
    return true;
  });
}

namespace {

bool f32_constant(const Graph& graph, ValueId v) {
  return v != kNoValue && graph.value(v).is_constant() && graph.value(v).dtype == DType::kFloat32;
}

// The Conv whose output `bn` normalizes and alone reads, or -1. Not a ConvTranspose: oneDNN
// 2.6 adds a deconvolution's bias in a slow loop or as a pass of its own, and DCGAN's
// generator with its BatchNorms folded ran 4-8 % slower under onednn-graph (0.88-0.92 against
// 0.85 ms, alternating rounds) than with BatchNorm + Relu as one primitive after each layer.
NodeId foldable_producer(const Graph& graph, const Node& bn, const std::vector<int>& readers,
                         const std::vector<bool>& leaves) {
  if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() < 5 ||
      bn.attr_int("training_mode", 0) != 0 || bn.attr_int("spatial", 1) != 1)
    return -1;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (bn.outputs[i] != kNoValue) return -1;
  const ValueId x = bn.inputs[0];
  if (x == kNoValue || readers[x] != 1 || leaves[x] || graph.value(x).producer < 0) return -1;
  const Node& conv = graph.node(graph.value(x).producer);
  if (conv.op_type != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1 ||
      !f32_constant(graph, conv.input(1)) ||
      (conv.input(2) != kNoValue && !f32_constant(graph, conv.input(2))))
    return -1;
  const Shape& ys = graph.value(x).shape;
  if (ys.size() < 3 || graph.value(x).dtype != DType::kFloat32) return -1;
  for (size_t i = 1; i < 5; ++i)
    if (!f32_constant(graph, bn.inputs[i]) || graph.value(bn.inputs[i]).shape != Shape{ys[1]})
      return -1;
  return graph.value(x).producer;
}

}  // namespace

void fold_batch_norms(Graph& graph) {
  std::vector<int> readers(graph.num_values(), 0);
  std::vector<bool> leaves(graph.num_values(), false);
  for (ValueId v : graph.outputs) leaves[v] = true;
  for (const Node& node : graph.nodes())
    for (ValueId v : node.inputs)
      if (v != kNoValue) ++readers[v];
  std::vector<bool> remove(graph.num_nodes(), false);
  bool any = false;
  for (size_t i = 0; i < graph.num_nodes(); ++i) {
    const Node bn = graph.node(static_cast<NodeId>(i));  // a copy: add_constant may move nodes
    const NodeId c = foldable_producer(graph, bn, readers, leaves);
    if (c < 0) continue;
    const Node conv = graph.node(c);
    const int64_t channels = graph.value(bn.inputs[0]).shape[1];
    const double eps = bn.attr_float("epsilon", 1e-5f);
    auto at = [&](size_t input, int64_t o) {
      return static_cast<double>(graph.value(bn.inputs[input]).constant.data<float>()[o]);
    };
    std::vector<double> scale(channels);
    for (int64_t o = 0; o < channels; ++o) scale[o] = at(1, o) / std::sqrt(at(4, o) + eps);
    // The weights are [M, C/g, k...]: output channel o's are the o-th block.
    const Tensor& w = graph.value(conv.input(1)).constant;
    const Shape& ws = w.shape();
    const int64_t per_channel =
        std::accumulate(ws.begin() + 1, ws.end(), int64_t{1}, std::multiplies<>());
    Tensor folded_w(DType::kFloat32, ws);
    const float* src = w.data<float>();
    float* dst = folded_w.data<float>();
    for (int64_t o = 0; o < ws[0]; ++o)
      for (int64_t k = o * per_channel; k < (o + 1) * per_channel; ++k)
        dst[k] = static_cast<float>(src[k] * scale[o]);
    Tensor folded_b(DType::kFloat32, {channels});
    const float* bias =
        conv.input(2) == kNoValue ? nullptr : graph.value(conv.input(2)).constant.data<float>();
    for (int64_t o = 0; o < channels; ++o)
      folded_b.data<float>()[o] =
          static_cast<float>(((bias ? bias[o] : 0.0) - at(3, o)) * scale[o] + at(2, o));
    const ValueId wv = graph.add_constant(conv.name + "/folded_W", std::move(folded_w));
    const ValueId bv = graph.add_constant(conv.name + "/folded_B", std::move(folded_b));
    Node& target = graph.node(c);
    target.inputs.resize(3, kNoValue);
    target.inputs[1] = wv;
    target.inputs[2] = bv;
    target.outputs[0] = bn.outputs[0];
    remove[i] = true;
    any = true;
  }
  if (any) graph.prune(remove);
}

void detach_folded_constants(Graph& graph) {
  for (const Node& node : graph.nodes())
    for (ValueId v : node.outputs)
      if (v != kNoValue) graph.value(v).constant = Tensor();
}

void check_declared_types(const Graph& graph, const DeclaredTypes& declared, bool check_dims) {
  std::unordered_map<std::string, ValueId> by_name;
  for (size_t i = 0; i < graph.num_values(); ++i)
    by_name.emplace(graph.value(static_cast<ValueId>(i)).name, static_cast<ValueId>(i));
  for (const DeclaredType& d : declared) {
    auto it = by_name.find(d.name);
    if (it == by_name.end()) continue;
    const Value& v = graph.value(it->second);
    if (!v.shape_known) continue;
    if (d.elem_type != 0 && d.elem_type != static_cast<int32_t>(v.dtype))
      fail(ErrorKind::kShape,
           "value '{}': the model declares element type {} but collage infers {}", d.name,
           dtype_name(static_cast<DType>(d.elem_type)), dtype_name(v.dtype));
    if (!check_dims || !d.dims) continue;
    bool match = d.dims->size() == v.shape.size();
    for (size_t i = 0; match && i < v.shape.size(); ++i)
      match = !(*d.dims)[i] || *(*d.dims)[i] == v.shape[i];
    if (!match) {
      std::string declared_shape = "[";
      for (size_t i = 0; i < d.dims->size(); ++i)
        declared_shape += (i ? "," : "") + ((*d.dims)[i] ? std::to_string(*(*d.dims)[i]) : "?");
      fail(ErrorKind::kShape, "value '{}': the model declares shape {} but collage infers {}",
           d.name, declared_shape + "]", shape_to_string(v.shape));
    }
  }
}

}  // namespace collage
