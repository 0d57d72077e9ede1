// Grouped 1-D convolutions as 2-D ones (conv1d_as_2d.h says why).
#include "backends/onednn/conv1d_as_2d.h"

#include "backends/onednn/dnnl_common.h"
#include "backends/onednn/graph_rewrite.h"
#include "backends/onednn/kernels.h"

namespace collage::onednn {
namespace {

// A 1-D attribute of `n` over the height of 1 too: kernel_shape, strides and dilations
// [k] -> [1, k], pads [b, e] -> [0, b, 0, e].
void lift_attribute(Node& n, const std::string& name) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end()) return;
  std::vector<int64_t> v = it->second.ints;
  if (name == "pads" && v.size() == 2)
    v = {0, v[0], 0, v[1]};
  else if (v.size() == 1)
    v = {1, v[0]};
  it->second = Attribute::from_ints(v);
}

ValueId shape_constant(Graph& g, const std::string& name, const Shape& shape) {
  return g.add_constant(name, Tensor::from_vector<int64_t>({static_cast<int64_t>(shape.size())},
                                                           std::vector<int64_t>(shape)));
}

Shape lifted(const Shape& s) {
  return {s[0], s[1], 1, s[2]};
}

// `conv` over a height of 1: its attributes as above.
Node lifted_conv(const Node& conv) {
  Node n = conv;
  for (const char* name : {"kernel_shape", "strides", "dilations", "pads"}) lift_attribute(n, name);
  return n;
}

bool jit_implementation(const std::string& impl) {
  return !impl.empty() && !is_gemm_impl(impl) && !is_reference_impl(impl);
}

}  // namespace

bool conv1d_faster_as_2d(const Graph& g, const Node& n) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.outputs.size() != 1 || n.inputs.size() < 2 ||
      n.attr_int("group", 1) <= 1 || !is_f32(g, n.input(0)) || !is_f32(g, n.outputs[0]))
    return false;
  const Value& x = g.value(n.input(0));
  const Value& w = g.value(n.input(1));
  const Value& y = g.value(n.outputs[0]);
  if (!x.shape_known || x.shape.size() != 3 || !y.shape_known || !w.is_constant() ||
      w.shape.size() != 3)
    return false;
  // Only where oneDNN has no jit kernel for the 1-D form and one for the 2-D form: grouped
  // 1-D convs of 16 channels a group run on brgconv both ways, and a dilated depthwise one
  // or one of 2 channels a group on the gemm-based kernel both ways.
  return !jit_implementation(forward_conv_implementation(n, x.shape, w.shape, y.shape)) &&
         jit_implementation(forward_conv_implementation(lifted_conv(n), lifted(x.shape),
                                                        lifted(w.shape), lifted(y.shape)));
}

Graph lift_1d_convs_to_2d(const Graph& region) {
  return rewrite_nodes(region, [](Graph& g, NodeId id, Node conv) {
    if (!conv1d_faster_as_2d(g, conv)) return std::vector<NodeId>{};
    const Shape xs = g.value(conv.input(0)).shape, ys = g.value(conv.outputs[0]).shape;
    const Tensor w = g.value(conv.input(1)).constant;
    const Shape x4 = lifted(xs), y4 = lifted(ys);
    Node up;
    up.name = conv.name + "/as_2d";
    up.op_type = "Reshape";
    up.inputs = {conv.input(0), shape_constant(g, up.name + "/shape", x4)};
    up.outputs = {g.add_value(up.name + "/Y", DType::kFloat32, x4, /*shape_known=*/true)};
    g.add_node(up);
    Node down;
    down.name = conv.name + "/as_1d";
    down.op_type = "Reshape";
    down.outputs = {conv.outputs[0]};
    conv = lifted_conv(conv);
    conv.inputs[0] = up.outputs[0];
    conv.inputs[1] = g.add_constant(conv.name + "/W_2d", w.reshaped(lifted(w.shape())));
    conv.outputs = {g.add_value(conv.name + "/Y_2d", DType::kFloat32, y4, true)};
    g.add_node(conv);
    down.inputs = {conv.outputs[0], shape_constant(g, down.name + "/shape", ys)};
    g.add_node(down);
    return std::vector<NodeId>{id};
  });
}

}  // namespace collage::onednn
