// Loading models: ONNX bytes -> collage Graph with static shapes and folded constants.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collage/graph.h"

namespace collage {

struct LoadOptions {
  // Values for symbolic input dims, by dim_param name (`--dim batch=1`).
  std::map<std::string, int64_t> dims;
  // Full shapes for named inputs; overrides the model's (the conformance runner binds
  // inputs to the shapes of the test data this way).
  std::map<std::string, Shape> input_shapes;
  // Inputs frozen to these values: they become constants (and fold). For inputs that set
  // shapes (a Reshape's target fed as a graph input, as in ONNX's node tests): collage needs
  // static shapes, so such an input must be known when the model is loaded.
  std::map<std::string, Tensor> constant_inputs;
  // No single tensor (initializer, inferred value) may exceed this.
  int64_t max_tensor_bytes = int64_t{4} << 30;
  // Run constant folding and dead-code removal after import.
  bool optimize = true;
};

// Parses, checks and imports a model file. External data is read relative to the
// model's folder and may not leave it. Throws collage::Error.
Graph load_model(const std::string& path, const LoadOptions& options = {});
// Same, from bytes in memory; `base_dir` resolves external data ("" forbids it).
Graph load_model_from_bytes(const std::string& bytes, const std::string& base_dir,
                            const LoadOptions& options = {});

// Builds the tables the ONNX checker otherwise builds on the first load (every op schema:
// ~20 ms of allocations). For a process that forks children which each load a model (the
// conformance runner): built before the fork, they are built once.
void prepare_model_loader();

// Writes `graph` as an ONNX model (ir_version 8, its opset, every constant an initializer,
// full types on inputs, outputs and intermediates) that load_model reads back unchanged.
void save_model(const Graph& graph, const std::string& path);
std::string model_to_bytes(const Graph& graph);

// The model's runtime input names in order (initializers excluded), read without importing
// the graph: lets a caller bind shapes to inputs it only knows by position (test data).
std::vector<std::string> model_input_names(const std::string& path);

// Passes (load_model runs them all).
// Gives every value a dtype and static shape using each op's shape function; fails naming
// the first node it cannot resolve.
void infer_shapes(Graph& graph, const LoadOptions& options);
// Evaluates nodes whose inputs are all constant with their reference implementation, and
// turns their outputs into constants (the exporters' Shape->Gather->Concat->Reshape chains).
void fold_constants(Graph& graph, const LoadOptions& options);
// Removes nodes whose outputs nobody reads and values nobody references.
void remove_dead_code(Graph& graph);

// ONNX TensorProto files (the test-data layout: input_0.pb, output_0.pb, ...).
Tensor read_tensor_file(const std::string& path, int64_t max_tensor_bytes = int64_t{4} << 30);
void write_tensor_file(const std::string& path, const Tensor& tensor, const std::string& name = "");

// Summary numbers for `collage info`.
struct ModelStats {
  std::map<std::string, int> op_histogram;
  int64_t parameters = 0;  // elements in float constants
  double gflops = 0;       // 2 x MACs of Conv/ConvTranspose/MatMul/Gemm
};
ModelStats model_stats(const Graph& graph);

}  // namespace collage
