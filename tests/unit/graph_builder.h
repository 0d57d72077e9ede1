// Builds small graphs in tests, inferring each node's output types as it is added (with
// the ops' own shape functions, through infer_node_outputs as the model zoo's ModelBuilder
// does), so tests need neither ONNX files nor the importer. Where ModelBuilder names nodes
// and weights as an exporter would, this one keeps test graphs short to write.
#pragma once

#include <algorithm>
#include <random>
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
    Node node;
    node.name = op_type + "_" + std::to_string(graph_.num_nodes());
    node.op_type = op_type;
    node.inputs = std::move(inputs);
    node.attrs = std::move(attrs);
    for (size_t i = 0; i < num_outputs; ++i)
      node.outputs.push_back(graph_.add_value(node.name + "_out" + std::to_string(i)));
    NodeId id = graph_.add_node(node);
    infer_node_outputs(graph_, id);  // the model zoo's builder types its nodes the same way
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

// Runs `graph` whole on `backend` (compile() of the entire graph as one subgraph, with
// `options`: a variant, a thread count) and on reference, on the same inputs; returns
// {backend outputs, reference outputs}.
inline std::pair<std::vector<Tensor>, std::vector<Tensor>> run_backend_and_reference(
    Backend& backend, const Graph& graph, const std::vector<Tensor>& inputs,
    const CompileOptions& options = test_options()) {
  std::unique_ptr<Kernel> kernel = backend.compile(graph, options);
  std::vector<Tensor> got;
  for (ValueId v : graph.outputs) got.emplace_back(graph.value(v).dtype, graph.value(v).shape);
  kernel->run(inputs, got);
  Session reference(graph, SessionOptions{});
  return {got, reference.run(inputs)};
}

inline std::pair<std::vector<Tensor>, std::vector<Tensor>> run_backend_and_reference(
    Backend& backend, const Graph& graph, uint64_t seed = 3) {
  return run_backend_and_reference(backend, graph, random_inputs(graph, seed));
}

// A 3x3 conv of `v` (its channels read from the graph) to `cout` channels with a bias, padded
// to keep the size; random weights named after `name`.
inline ValueId conv3x3(GraphBuilder& b, ValueId v, int64_t cout, const std::string& name) {
  return b.add1("Conv",
                {v, b.random_constant(name + "_w", {cout, b.graph().value(v).shape[1], 3, 3}),
                 b.random_constant(name + "_b", {cout})},
                {{"pads", attr_ints({1, 1, 1, 1})}});
}

// LayerNorm over the last axis as torch.onnx exports it below opset 17 (ReduceMean, Sub,
// Pow, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta; gamma and beta random).
inline ValueId decomposed_layer_norm(GraphBuilder& b, ValueId x, int64_t hidden, float eps) {
  Attribute axes = attr_ints({-1});
  ValueId mean = b.add1("ReduceMean", {x}, {{"axes", axes}});
  ValueId c = b.add1("Sub", {x, mean});
  ValueId sq = b.add1("Pow", {c, b.constant("two", Tensor::scalar(2.0f))});
  ValueId var = b.add1("ReduceMean", {sq}, {{"axes", axes}});
  ValueId ve = b.add1("Add", {var, b.constant("eps", Tensor::scalar(eps))});
  ValueId n = b.add1("Div", {c, b.add1("Sqrt", {ve})});
  ValueId s = b.add1("Mul", {n, b.random_constant("gamma", {hidden})});
  return b.add1("Add", {s, b.random_constant("beta", {hidden})});
}

// BatchNormalization at inference over the `c` channels of `x`: random scale, shift and
// mean, variances in [0.5, 1.5).
inline ValueId batch_norm(GraphBuilder& b, ValueId x, int64_t c) {
  std::vector<float> var(c);
  std::mt19937 rng(static_cast<unsigned>(c));
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (float& v : var) v = u(rng);
  return b.add1("BatchNormalization",
                {x, b.random_constant("g", {c}), b.random_constant("beta", {c}),
                 b.random_constant("mean", {c}, 0.1f),
                 b.constant("var", Tensor::from_vector<float>({c}, var))});
}

// GELU as torch.onnx exports nn.GELU() below opset 20: x * (1 + Erf(x / sqrt 2)) * 0.5.
inline ValueId erf_gelu(GraphBuilder& b, ValueId x) {
  ValueId e = b.add1("Erf", {b.add1("Div", {x, b.constant("sqrt2", Tensor::scalar(1.4142135f))})});
  ValueId one_plus = b.add1("Add", {e, b.constant("one", Tensor::scalar(1.0f))});
  return b.add1("Mul", {b.add1("Mul", {x, one_plus}), b.constant("half", Tensor::scalar(0.5f))});
}

}  // namespace collage::testing
