// `collage info` numbers: op histogram, weights, and the FLOPs of the ops that dominate.
#include <functional>
#include <numeric>

#include "collage/model.h"

namespace collage {
namespace {

int64_t product(Shape::const_iterator begin, Shape::const_iterator end) {
  return std::accumulate(begin, end, int64_t{1}, std::multiplies<>());
}

const Shape* input_shape(const Graph& graph, const Node& node, size_t i) {
  ValueId v = node.input(i);
  if (v == kNoValue || !graph.value(v).shape_known) return nullptr;
  return &graph.value(v).shape;
}

const Shape* output_shape(const Graph& graph, const Node& node) {
  if (node.outputs.empty() || node.outputs[0] == kNoValue) return nullptr;
  const Value& v = graph.value(node.outputs[0]);
  return v.shape_known ? &v.shape : nullptr;
}

// Multiply-accumulates of one node; 0 for ops that are not counted.
double node_macs(const Graph& graph, const Node& node) {
  if (!node.domain.empty()) return 0;
  const Shape* a = input_shape(graph, node, 0);
  const Shape* b = input_shape(graph, node, 1);
  const Shape* out = output_shape(graph, node);
  if (!a || !b || !out || b->empty()) return 0;
  auto numel = [](const Shape& s) { return static_cast<double>(product(s.begin(), s.end())); };
  // Weights are [Cout, Cin/group, k...] for Conv and [Cin, Cout/group, k...] for
  // ConvTranspose: either way every output (Conv) or input (ConvTranspose) element costs
  // the product of the weight's dims after the first.
  auto per_element = static_cast<double>(product(b->begin() + 1, b->end()));
  if (node.op_type == "Conv") return numel(*out) * per_element;
  if (node.op_type == "ConvTranspose") return numel(*a) * per_element;
  if (node.op_type == "MatMul")
    return a->empty() ? 0 : numel(*out) * static_cast<double>(a->back());
  if (node.op_type == "Gemm" && a->size() == 2) {
    int64_t k = node.attr_int("transA", 0) ? (*a)[0] : (*a)[1];
    return numel(*out) * static_cast<double>(k);
  }
  return 0;
}

}  // namespace

ModelStats model_stats(const Graph& graph) {
  ModelStats stats;
  std::vector<bool> read(graph.num_values(), false);
  double macs = 0;
  for (const Node& node : graph.nodes()) {
    ++stats.op_histogram[node.op_type];
    macs += node_macs(graph, node);
    for (ValueId v : node.inputs)
      if (v != kNoValue) read[v] = true;
  }
  for (size_t i = 0; i < graph.num_values(); ++i) {
    const Value& v = graph.value(static_cast<ValueId>(i));
    if (read[i] && v.is_constant() && v.producer < 0 && dtype_is_float(v.dtype))
      stats.parameters += v.constant.numel();
  }
  stats.gflops = 2 * macs / 1e9;
  return stats;
}

}  // namespace collage
