// Einsum lowered to the ops the fast backends run (Transpose, Reshape, MatMul, ReduceSum), so
// that a model written with torch.einsum (MaxViT's attention, many transformers) does not
// leave its contractions to the reference backend. Each pair of operands becomes one MatMul
// over [shared batch labels..., kept labels, summed labels]; single-label groups need no
// Reshape, so "bhqd,bhkd->bhqk" becomes Transpose(K) + MatMul as a BERT export writes it, and
// the attention patterns of the backends match it the same way. Constant operands' Transposes
// fold away on import. What it does not lower (a label repeated within one term: a diagonal;
// a label broadcast from size 1) stays an Einsum and runs on the reference kernel.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "collage/op_registry.h"
#include "ir/model_passes.h"
#include "ops/einsum_equation.h"

namespace collage {
namespace {

struct Operand {
  ValueId value;
  std::vector<int> labels;
};

bool contains(const std::vector<int>& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

class EinsumLowering {
 public:
  EinsumLowering(Graph& graph, const Node& node, ops::EinsumEquation eq)
      : graph_(graph), name_(node.name), eq_(std::move(eq)) {}

  // Appends the nodes computing the Einsum; the last one writes `output`.
  void lower(const std::vector<ValueId>& inputs, ValueId output) {
    std::vector<Operand> operands;
    for (size_t i = 0; i < inputs.size(); ++i) operands.push_back({inputs[i], eq_.inputs[i]});
    // Labels no other operand and not the output has: summed within their operand first.
    for (size_t i = 0; i < operands.size(); ++i) {
      std::vector<int> keep;
      for (int label : operands[i].labels)
        if (contains(eq_.output, label) || used_elsewhere(operands, i, label))
          keep.push_back(label);
      operands[i] = reduce_to(operands[i], keep);
    }
    Operand result = operands[0];
    for (size_t i = 1; i < operands.size(); ++i) {
      std::vector<int> later = eq_.output;
      for (size_t j = i + 1; j < operands.size(); ++j)
        later.insert(later.end(), operands[j].labels.begin(), operands[j].labels.end());
      result = contract(result, operands[i], later);
    }
    result = reduce_to(result, eq_.output);
    result = transpose_to(result, eq_.output);
    // An equation that computes nothing ("ij->ij") copies its operand.
    if (last_ < 0 || graph_.node(last_).outputs[0] != result.value)
      add("Identity", {result.value}, {});
    if (graph_.value(graph_.node(last_).outputs[0]).shape != graph_.value(output).shape)
      fail(ErrorKind::kInternal, "einsum lowering of '{}' computes {}, not {}", name_,
           shape_to_string(graph_.value(graph_.node(last_).outputs[0]).shape),
           shape_to_string(graph_.value(output).shape));
    // The last node writes the Einsum's own output value, which its readers name.
    Node& last = graph_.node(last_);
    last.outputs[0] = output;
    graph_.value(output).producer = last_;
  }

 private:
  bool used_elsewhere(const std::vector<Operand>& operands, size_t self, int label) const {
    for (size_t j = 0; j < operands.size(); ++j)
      if (j != self && contains(operands[j].labels, label)) return true;
    return false;
  }

  int64_t size_of(const std::vector<int>& labels) const {
    int64_t n = 1;
    for (int label : labels) n *= eq_.sizes[label];
    return n;
  }

  ValueId add(const std::string& op, std::vector<ValueId> inputs,
              std::map<std::string, Attribute> attrs) {
    last_ = append_lowered_node(graph_, name_, count_, op, std::move(inputs), std::move(attrs));
    return graph_.node(last_).outputs[0];
  }

  ValueId int64_constant(const std::string& what, const std::vector<int64_t>& values) {
    return append_int64_constant(graph_, name_, count_, what, values);
  }

  // `x` summed over its labels not in `keep`.
  Operand reduce_to(const Operand& x, const std::vector<int>& keep) {
    std::vector<int64_t> axes;
    std::vector<int> rest;
    for (size_t d = 0; d < x.labels.size(); ++d) {
      if (contains(keep, x.labels[d]))
        rest.push_back(x.labels[d]);
      else
        axes.push_back(static_cast<int64_t>(d));
    }
    if (axes.empty()) return x;
    // Opset 13 moved ReduceSum's axes from an attribute to an input.
    const ValueId y =
        graph_.opset >= 13
            ? add("ReduceSum", {x.value, int64_constant("axes", axes)},
                  {{"keepdims", Attribute::from_int(0)}})
            : add("ReduceSum", {x.value},
                  {{"axes", Attribute::from_ints(axes)}, {"keepdims", Attribute::from_int(0)}});
    return {y, rest};
  }

  // `x` with its dimensions in the order of `labels` (the same set).
  Operand transpose_to(const Operand& x, const std::vector<int>& labels) {
    if (x.labels == labels) return x;
    std::vector<int64_t> perm;
    for (int label : labels)
      perm.push_back(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin());
    return {add("Transpose", {x.value}, {{"perm", Attribute::from_ints(perm)}}), labels};
  }

  ValueId reshape(ValueId x, const std::vector<int64_t>& dims) {
    if (graph_.value(x).shape == Shape(dims.begin(), dims.end())) return x;
    return add("Reshape", {x, int64_constant("shape", dims)}, {});
  }

  // a x b summed over the labels both have and `later` does not; the result's labels are
  // [both and kept..., a's kept..., b's kept...].
  Operand contract(const Operand& a, const Operand& b, const std::vector<int>& later) {
    std::vector<int> batch, a_kept, b_kept, summed;
    for (int label : a.labels) {
      if (!contains(b.labels, label))
        a_kept.push_back(label);
      else if (contains(later, label))
        batch.push_back(label);
      else
        summed.push_back(label);
    }
    for (int label : b.labels)
      if (!contains(a.labels, label)) b_kept.push_back(label);
    auto concat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
      x.insert(x.end(), y.begin(), y.end());
      x.insert(x.end(), z.begin(), z.end());
      return x;
    };
    std::vector<int64_t> batch_dims;
    for (int label : batch) batch_dims.push_back(eq_.sizes[label]);
    auto matrix = [&](int64_t rows, int64_t cols) {
      std::vector<int64_t> dims = batch_dims;
      dims.push_back(rows);
      dims.push_back(cols);
      return dims;
    };
    const Operand at = transpose_to(a, concat(batch, a_kept, summed));
    const Operand bt = transpose_to(b, concat(batch, summed, b_kept));
    const ValueId am = reshape(at.value, matrix(size_of(a_kept), size_of(summed)));
    const ValueId bm = reshape(bt.value, matrix(size_of(summed), size_of(b_kept)));
    const ValueId product = add("MatMul", {am, bm}, {});
    std::vector<int64_t> dims = batch_dims;
    for (int label : a_kept) dims.push_back(eq_.sizes[label]);
    for (int label : b_kept) dims.push_back(eq_.sizes[label]);
    return {reshape(product, dims), concat(batch, a_kept, b_kept)};
  }

  Graph& graph_;
  const std::string name_;
  const ops::EinsumEquation eq_;
  NodeId last_ = -1;
  int count_ = 0;
};

// The parsed equation when the lowering covers it: no label repeated within a term and
// every label the same size wherever it appears (no broadcast 1).
std::optional<ops::EinsumEquation> lowerable(const Graph& graph, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Einsum" || node.outputs.size() != 1) return {};
  std::vector<Shape> shapes;
  for (ValueId v : node.inputs) {
    if (v == kNoValue || !graph.value(v).shape_known) return {};
    shapes.push_back(graph.value(v).shape);
  }
  ops::EinsumEquation eq = ops::parse_einsum(node.attr_string("equation", ""), shapes);
  for (size_t i = 0; i < shapes.size(); ++i)
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      const int label = eq.inputs[i][d];
      if (shapes[i][d] != eq.sizes[label] ||
          std::count(eq.inputs[i].begin(), eq.inputs[i].end(), label) > 1)
        return {};
    }
  return eq;
}

}  // namespace

void lower_einsum(Graph& graph) {
  lower_nodes(graph, [](Graph& g, const Node& node) {
    std::optional<ops::EinsumEquation> eq = lowerable(g, node);
    if (!eq) return false;
    EinsumLowering(g, node, std::move(*eq)).lower(node.inputs, node.outputs[0]);
    return true;
  });
}

}  // namespace collage
