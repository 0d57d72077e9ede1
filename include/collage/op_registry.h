// The operator set collage understands. An op's definition bundles what every part of
// the system needs to know about it:
//   - its kind (TVM's fusion classes), used by fusion rules and generated patterns;
//   - its shape/dtype inference, which makes every value static before anything runs;
//   - its reference implementation: plain loops, the correctness oracle and the
//     fallback. An op is "supported" only when it has one.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collage/error.h"
#include "collage/graph.h"

namespace collage {

enum class OpKind {
  kElementwise,         // out[i] = f(in[i]) on same-shape operands
  kBroadcast,           // elementwise with numpy broadcasting
  kInjective,           // each output element reads one input element (Reshape, Transpose, Slice)
  kReduction,           // reduces along axes (ReduceMean, Softmax's sums)
  kOutElemwiseFusable,  // Conv, MatMul, Gemm, ConvTranspose: elementwise tails fuse into them
  kOpaque,              // everything else
};
const char* op_kind_name(OpKind kind);

// What a shape function sees: the node and the types (and constant values, when known)
// of its inputs. It sets every output's dtype and shape or throws via fail().
class InferContext {
 public:
  InferContext(const Graph& graph, const Node& node);

  const Node& node() const { return node_; }
  int64_t opset() const { return graph_.opset; }
  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  // False for omitted optional inputs (and indices past the end).
  bool has_input(size_t i) const;
  DType input_dtype(size_t i) const;
  const Shape& input_shape(size_t i) const;
  int input_rank(size_t i) const { return static_cast<int>(input_shape(i).size()); }
  // The input's value when it is a constant (initializer or folded), else nullptr.
  const Tensor* input_constant(size_t i) const;
  // Like input_constant, but fails with a clear message when the input is not constant
  // (e.g. Reshape with a computed shape that folding could not resolve).
  const Tensor& require_constant(size_t i, const char* what) const;

  void set_output(size_t i, DType dtype, Shape shape);
  DType output_dtype(size_t i) const { return outputs_.at(i).first; }
  const Shape& output_shape(size_t i) const { return outputs_.at(i).second; }
  bool output_set(size_t i) const { return set_.at(i); }

  // Throws Error(kShape) prefixed with the node's name and op.
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(ErrorKind::kShape, fmt::format("node '{}' ({}): {}", node_.name, node_.op_type,
                                               fmt::format(format, std::forward<Args>(args)...)));
  }
  // Normalises a possibly negative axis against `rank`, failing when out of range.
  int64_t normalize_axis(int64_t axis, int64_t rank) const;

 private:
  const Graph& graph_;
  const Node& node_;
  std::vector<std::pair<DType, Shape>> outputs_;
  std::vector<bool> set_;
};

// A reference kernel: reads `in` (omitted optional inputs are undefined Tensors), writes
// into `out`, which the caller has allocated with the inferred shapes.
using RefKernel = std::function<void(std::span<const Tensor> in, std::span<const Tensor> out)>;
// Built once per node: parse attributes and precompute here, not in the kernel.
// `node` and `graph` are valid only during the call; shapes/dtypes are final.
using RefKernelFactory = std::function<RefKernel(const Graph& graph, const Node& node)>;
using InferFn = std::function<void(InferContext& ctx)>;

struct OpDef {
  std::string name;    // ONNX op_type
  std::string domain;  // "" = ai.onnx
  OpKind kind = OpKind::kOpaque;
  InferFn infer;
  RefKernelFactory reference;
  // Output shapes depend on input *values* (not only shapes), e.g. Range, NonZero:
  // such an op is runnable only when those inputs fold to constants.
  bool value_dependent_shape = false;
};

class OpRegistry {
 public:
  // The process-wide registry with every built-in op registered.
  static OpRegistry& global();

  void add(OpDef def);  // replaces an existing definition with the same (domain, name)
  const OpDef* find(const std::string& op_type, const std::string& domain = "") const;
  std::vector<const OpDef*> all() const;

 private:
  std::vector<std::unique_ptr<OpDef>> defs_;
};

// Runs the shape function of node `id` (already in `graph`, its outputs values without
// types) and sets its outputs' dtype and shape: how graphs built in code, the model zoo's
// and the tests', get their types without an import. Throws Error(kUnsupported) for an op
// that is not registered, what the shape function throws (kShape), and Error(kInternal)
// when it leaves an output unset.
void infer_node_outputs(Graph& graph, NodeId id);

// Helpers shared by shape functions.
// Numpy-style broadcast of two shapes; nullopt when incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace collage
