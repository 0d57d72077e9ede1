// DepthToSpace and SpaceToDepth lowered to Reshape -> Transpose -> Reshape, the three ops
// ONNX defines them by: pure data movement that every fast backend already runs (onednn as
// one reorder through permuted strides, in regions too; halide; torch), where the ops
// themselves only had the reference kernel. PixelShuffle (super-resolution models' last
// layer) exports as DepthToSpace in CRD mode, TensorFlow-born models use DCR and
// SpaceToDepth.
#include "ir/model_passes.h"

namespace collage {
namespace {

// The three nodes replacing `node` (4-D input of known shape), the last writing its output.
void lower_one(Graph& graph, const Node& node) {
  const Shape& x = graph.value(node.input(0)).shape;
  const int64_t n = x[0], c = x[1], h = x[2], w = x[3];
  const int64_t bs = node.attr_int("blocksize", 0);
  std::vector<int64_t> split, perm, merged;
  if (node.op_type == "DepthToSpace") {
    if (node.attr_string("mode", "DCR") == "CRD") {
      split = {n, c / (bs * bs), bs, bs, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    } else {
      split = {n, bs, bs, c / (bs * bs), h, w};
      perm = {0, 3, 4, 1, 5, 2};
    }
    merged = {n, c / (bs * bs), h * bs, w * bs};
  } else {
    split = {n, c, h / bs, bs, w / bs, bs};
    perm = {0, 3, 5, 1, 2, 4};
    merged = {n, c * bs * bs, h / bs, w / bs};
  }
  int count = 0;
  auto add = [&](const std::string& op, std::vector<ValueId> inputs,
                 std::map<std::string, Attribute> attrs, ValueId output) {
    const NodeId id = append_lowered_node(graph, node.name, count, op, std::move(inputs),
                                          std::move(attrs), output);
    return graph.node(id).outputs[0];
  };
  auto shape_constant = [&](const std::vector<int64_t>& dims) {
    return append_int64_constant(graph, node.name, count, "shape", dims);
  };
  const ValueId output = node.outputs[0];
  const ValueId six = add("Reshape", {node.input(0), shape_constant(split)}, {}, kNoValue);
  const ValueId moved = add("Transpose", {six}, {{"perm", Attribute::from_ints(perm)}}, kNoValue);
  add("Reshape", {moved, shape_constant(merged)}, {}, output);
}

// Whether `node` is a DepthToSpace/SpaceToDepth whose shape inference passed (so the block
// size divides what it must) on a 4-D input of known shape.
bool lowerable(const Graph& graph, const Node& node) {
  if (!node.domain.empty() || node.outputs.size() != 1 || node.inputs.empty()) return false;
  if (node.op_type != "DepthToSpace" && node.op_type != "SpaceToDepth") return false;
  const Value& x = graph.value(node.input(0));
  return x.shape_known && x.shape.size() == 4 && graph.value(node.outputs[0]).shape_known &&
         node.attr_int("blocksize", 0) > 0;
}

}  // namespace

void lower_space_depth(Graph& graph) {
  lower_nodes(graph, [](Graph& g, const Node& node) {
    if (!lowerable(g, node)) return false;
    lower_one(g, node);
    return true;
  });
}

}  // namespace collage
