// Einsum (opset 12+): the reference kernel sums products over every label the output does
// not keep, in plain nested loops over the labels (the oracle; the importer lowers Einsum to
// MatMul and friends for the fast backends, ir/einsum_lowering.cc).
#include <algorithm>

#include "ops/einsum_equation.h"
#include "ops/nn_util.h"

namespace collage::ops::nn {
namespace {

std::vector<Shape> input_shapes(const InferContext& ctx) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input_shape(i));
  return shapes;
}

void infer_einsum(InferContext& ctx) {
  if (ctx.num_inputs() == 0) node_fail(ctx.node(), ErrorKind::kInvalidModel, "needs an input");
  const DType t = require_float_input(ctx, 0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) require_float_input(ctx, i, 0);
  if (!ctx.node().has_attr("equation"))
    node_fail(ctx.node(), ErrorKind::kInvalidModel, "has no equation");
  EinsumEquation eq;
  try {
    eq = parse_einsum(ctx.node().attr_string("equation", ""), input_shapes(ctx));
  } catch (const Error& e) {
    ctx.fail("{}", e.what());
  }
  Shape out;
  for (int label : eq.output) out.push_back(eq.sizes[label]);
  ctx.set_output(0, t, out);
}

// Strides of each label in one operand's row-major data: the sum over the dimensions it
// labels (a repeated label walks a diagonal), 0 where the operand broadcasts it.
std::vector<int64_t> label_strides(const std::vector<int>& labels, const Shape& shape,
                                   int num_labels) {
  const std::vector<int64_t> dim_strides = shape_strides(shape);
  std::vector<int64_t> strides(static_cast<size_t>(num_labels), 0);
  for (size_t d = 0; d < labels.size(); ++d)
    if (shape[d] != 1) strides[labels[d]] += dim_strides[d];
  return strides;
}

template <typename T>
RefKernel einsum_kernel(EinsumEquation eq, std::vector<Shape> shapes) {
  // The loop order: the output's labels (outer), then the summed ones.
  std::vector<int> order = eq.output;
  for (int label = 0; label < eq.num_labels(); ++label)
    if (eq.sizes[label] > 0 && std::find(order.begin(), order.end(), label) == order.end() &&
        std::any_of(eq.inputs.begin(), eq.inputs.end(), [&](const std::vector<int>& in) {
          return std::find(in.begin(), in.end(), label) != in.end();
        }))
      order.push_back(label);
  std::vector<std::vector<int64_t>> strides;
  for (size_t i = 0; i < eq.inputs.size(); ++i)
    strides.push_back(label_strides(eq.inputs[i], shapes[i], eq.num_labels()));
  return [eq, order, strides](std::span<const Tensor> in, std::span<const Tensor> out) {
    T* y = out[0].data<T>();
    const int64_t outputs = out[0].numel();
    std::fill(y, y + outputs, T(0));
    if (std::any_of(order.begin(), order.end(), [&](int l) { return eq.sizes[l] == 0; })) return;
    std::vector<const T*> data;
    for (const Tensor& t : in) data.push_back(t.data<T>());
    if (order.empty()) {  // every operand a scalar
      double product = 1;
      for (const T* d : data) product *= static_cast<double>(d[0]);
      y[0] = static_cast<T>(product);
      return;
    }
    // An odometer over every label in `order`; the output element advances with the outer
    // labels (the output's, row-major), the operands' offsets with their label strides.
    std::vector<int64_t> index(order.size(), 0), offset(data.size(), 0);
    const size_t kept = eq.output.size();
    int64_t y_at = 0;
    double sum = 0;
    while (true) {
      double product = 1;
      for (size_t i = 0; i < data.size(); ++i) product *= static_cast<double>(data[i][offset[i]]);
      sum += product;
      // Next index: the innermost label first.
      size_t k = order.size();
      while (k > 0) {
        --k;
        const int label = order[k];
        ++index[k];
        for (size_t i = 0; i < data.size(); ++i) offset[i] += strides[i][label];
        if (index[k] < eq.sizes[label]) break;
        for (size_t i = 0; i < data.size(); ++i) offset[i] -= strides[i][label] * index[k];
        index[k] = 0;
        if (k == 0) {
          k = order.size() + 1;  // every label wrapped: done
          break;
        }
      }
      // Leaving the summed labels (k inside the output's) ends one output element.
      if (k < kept || k > order.size()) {
        y[y_at++] = static_cast<T>(sum);
        sum = 0;
        if (k > order.size()) break;
      }
    }
  };
}

RefKernel make_einsum(const Graph& g, const Node& node) {
  std::vector<Shape> shapes;
  for (ValueId v : node.inputs) shapes.push_back(g.value(v).shape);
  const EinsumEquation eq = parse_einsum(node.attr_string("equation", ""), shapes);
  return dispatch_float(g.value(node.inputs[0]).dtype,
                        [&](auto tag) { return einsum_kernel<decltype(tag)>(eq, shapes); });
}

}  // namespace

void register_einsum_ops(OpRegistry& registry) {
  registry.add({"Einsum", "", OpKind::kOpaque, infer_einsum, make_einsum});
}

}  // namespace collage::ops::nn
