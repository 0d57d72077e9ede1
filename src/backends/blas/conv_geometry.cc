#include "backends/blas/conv_geometry.h"

namespace collage::blas {

ConvGeometry parse_conv_operands(const Graph& g, const Node& node) {
  const std::string& op = node.op_type;
  ConvGeometry p;
  p.x = Operand::of(g, node.input(0), (op + " X").c_str());
  p.w = Operand::of(g, node.input(1), (op + " W").c_str());
  const Shape& x = g.value(node.input(0)).shape;
  const Shape& w = g.value(node.input(1)).shape;
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    fail(ErrorKind::kUnsupported, "blas: {} '{}' of rank {} (1-D to 3-D only)", op, node.name,
         x.size());
  p.batch = x[0];
  p.channels = x[1];
  p.group = node.attr_int("group", 1);
  if (p.group <= 0 || p.channels % p.group)
    fail(ErrorKind::kUnsupported, "blas: {} '{}' has inconsistent groups", op, node.name);
  return p;
}

void set_conv_window(ConvGeometry& p, const ops::nn::Window& win, const Graph& g,
                     const Node& node) {
  p.unit_window = true;
  for (size_t i = 0; i < win.rank(); ++i)
    p.unit_window = p.unit_window && win.kernel[i] == 1 && win.stride[i] == 1 &&
                    win.pad_begin[i] == 0 && win.pad_end[i] == 0 && win.out[i] == win.in[i];
  p.win = win.as_3d();
  p.in_plane = p.win.in[0] * p.win.in[1] * p.win.in[2];
  p.out_plane = p.win.out[0] * p.win.out[1] * p.win.out[2];
  p.taps = p.win.kernel[0] * p.win.kernel[1] * p.win.kernel[2];
  const Shape& x = g.value(node.input(0)).shape;
  const Shape& y = g.value(node.outputs.at(0)).shape;
  Shape expected = {p.batch, p.filters};
  expected.insert(expected.end(), win.out.begin(), win.out.end());
  if (expected != y)
    fail(ErrorKind::kInternal, "blas: {} '{}' geometry gives {}, shape inference {}", node.op_type,
         node.name, shape_to_string(expected), shape_to_string(y));
  if (shape_numel(y) == 0 || shape_numel(x) == 0)
    fail(ErrorKind::kUnsupported, "blas: empty {} '{}'", node.op_type, node.name);
}

std::vector<HeadAddend> conv_bias_addends(const Graph& g, const Node& node, const ConvGeometry& p) {
  if (node.input(2) == kNoValue) return {};
  const Value& bias = g.value(node.input(2));
  if (!bias.is_constant())
    fail(ErrorKind::kUnsupported, "blas: {} '{}' has a computed bias", node.op_type, node.name);
  // [M] as [M, 1, ...]: broadcast over the image.
  Shape per_channel(g.value(node.input(0)).shape.size() - 1, 1);
  per_channel[0] = p.filters;
  return {{bias.constant.reshaped(per_channel), -1}};
}

}  // namespace collage::blas
