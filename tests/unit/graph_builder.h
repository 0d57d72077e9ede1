// Builds small graphs in tests, inferring each node's output types as it is added (with
// the ops' own shape functions), so tests need neither ONNX files nor the importer.
#pragma once

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "collage/backend.h"
#include "collage/session.h"
#include "op_test_util.h"

namespace collage::testing {

// How tests compile kernels: the default variant, on `threads` (0: every core, what the
// tests' own threads run OpenMP with, as kernels compiled for them expect). Public API
// only: the plugin example's test uses this header too.
inline CompileOptions test_options(int threads = 0) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return CompileOptions{"", threads > 0 ? threads : cores};
}

class GraphBuilder {
 public:
  explicit GraphBuilder(int64_t opset = 17) { graph_.opset = opset; }

  ValueId input(const std::string& name, DType dtype, Shape shape) {
    ValueId v = graph_.add_value(name, dtype, std::move(shape), true);
    graph_.inputs.push_back(v);
    return v;
  }
  ValueId constant(const std::string& name, Tensor t) {
    return graph_.add_constant(name, std::move(t));
  }
  // Random float32 constant in [-scale, scale).
  ValueId random_constant(const std::string& name, Shape shape, float scale = 1.0f) {
    Tensor t(DType::kFloat32, std::move(shape));
    float* d = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = scale * (2.0f * next_uniform() - 1.0f);
    return constant(name, t);
  }

  // Adds a node and returns its outputs (inferred).
  std::vector<ValueId> add(const std::string& op_type, std::vector<ValueId> inputs,
                           std::map<std::string, Attribute> attrs = {}, size_t num_outputs = 1) {
    const OpDef* def = OpRegistry::global().find(op_type);
    if (!def) fail(ErrorKind::kUnsupported, "op {} is not registered", op_type);
    Node node;
    node.name = op_type + "_" + std::to_string(graph_.num_nodes());
    node.op_type = op_type;
    node.inputs = std::move(inputs);
    node.attrs = std::move(attrs);
    for (size_t i = 0; i < num_outputs; ++i)
      node.outputs.push_back(graph_.add_value(node.name + "_out" + std::to_string(i)));
    NodeId id = graph_.add_node(node);
    InferContext ctx(graph_, graph_.node(id));
    def->infer(ctx);
    for (size_t i = 0; i < num_outputs; ++i) {
      Value& v = graph_.value(graph_.node(id).outputs[i]);
      v.dtype = ctx.output_dtype(i);
      v.shape = ctx.output_shape(i);
      v.shape_known = true;
    }
    return graph_.node(id).outputs;
  }
  ValueId add1(const std::string& op_type, std::vector<ValueId> inputs,
               std::map<std::string, Attribute> attrs = {}) {
    return add(op_type, std::move(inputs), std::move(attrs))[0];
  }

  void output(ValueId v) { graph_.outputs.push_back(v); }
  Graph& graph() { return graph_; }
  Graph finish() { return std::move(graph_); }

 private:
  float next_uniform() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((state_ >> 40) & 0xFFFFFF) / 16777216.0f;
  }
  Graph graph_;
  uint64_t state_ = 12345;
};

// Largest |a-b| / (atol + rtol*|b|) over all outputs: <= 1 means "within tolerance".
inline double tolerance_ratio(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                              double rtol = 1e-3, double atol = 1e-5) {
  if (got.size() != want.size()) return 1e30;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].shape() != want[i].shape() || got[i].dtype() != want[i].dtype()) return 1e30;
    for (int64_t k = 0; k < got[i].numel(); ++k) {
      double a = got[i].get_as_double(k), b = want[i].get_as_double(k);
      worst = std::max(worst, std::abs(a - b) / (atol + rtol * std::abs(b)));
    }
  }
  return worst;
}

// Runs `graph` whole on `backend` (compile() of the entire graph as one subgraph) and on
// reference, on the same random inputs; returns {backend outputs, reference outputs}.
inline std::pair<std::vector<Tensor>, std::vector<Tensor>> run_backend_and_reference(
    Backend& backend, const Graph& graph, uint64_t seed = 3) {
  std::vector<Tensor> inputs = random_inputs(graph, seed);
  std::unique_ptr<Kernel> kernel = backend.compile(graph, test_options());
  std::vector<Tensor> got;
  for (ValueId v : graph.outputs) got.emplace_back(graph.value(v).dtype, graph.value(v).shape);
  kernel->run(inputs, got);
  Session reference(graph, SessionOptions{});
  return {got, reference.run(inputs)};
}

}  // namespace collage::testing
