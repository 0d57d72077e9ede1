#include "backends/reference/reference_backend.h"

#include "collage/backend.h"
#include "collage/op_registry.h"
#include "runtime/graph_kernel.h"

namespace collage {
namespace {

// The op's reference implementation; Error(kUnsupported) when it has none.
const auto& reference_of(const Node& node) {
  const OpDef* def = OpRegistry::global().find(node.op_type, node.domain);
  if (!def || !def->reference)
    fail(ErrorKind::kUnsupported, "node '{}': op '{}' has no reference implementation", node.name,
         node.op_type);
  return def->reference;
}

class ReferenceNodeKernel : public Kernel {
 public:
  explicit ReferenceNodeKernel(RefKernel fn) : fn_(std::move(fn)) {}
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    fn_(inputs, outputs);
  }

 private:
  RefKernel fn_;
};

// One node as a standalone subgraph (extract_subgraph) whose boundary differs from the
// node's own inputs: constants live inside, an input read twice is passed once. Maps the
// boundary back to the node's argument list, without the copy a GraphKernel makes.
class BoundaryNodeKernel : public Kernel {
 public:
  BoundaryNodeKernel(const Graph& subgraph, RefKernel fn) : fn_(std::move(fn)) {
    const Node& node = subgraph.node(0);
    for (ValueId v : node.inputs) {
      int index = -1;
      for (size_t i = 0; i < subgraph.inputs.size(); ++i)
        if (subgraph.inputs[i] == v) index = static_cast<int>(i);
      boundary_index_.push_back(index);
      args_.push_back(v != kNoValue && index < 0 ? subgraph.value(v).constant : Tensor());
    }
    for (ValueId v : node.outputs) {
      int index = -1;
      for (size_t i = 0; i < subgraph.outputs.size(); ++i)
        if (subgraph.outputs[i] == v) index = static_cast<int>(i);
      output_index_.push_back(index);
      // An output nothing reads (a dead node of a graph built through the API; the ONNX
      // importer removes them) is computed into a buffer of its own and dropped.
      const Value* dead = v != kNoValue && index < 0 ? &subgraph.value(v) : nullptr;
      if (dead && !dead->shape_known)
        fail(ErrorKind::kUnsupported, "reference: unread output '{}' of unknown shape", dead->name);
      unread_.push_back(dead ? Tensor(dead->dtype, dead->shape) : Tensor());
      results_.emplace_back();
    }
  }
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    for (size_t i = 0; i < args_.size(); ++i)
      if (boundary_index_[i] >= 0) args_[i] = inputs[boundary_index_[i]];
    for (size_t i = 0; i < results_.size(); ++i)
      results_[i] = output_index_[i] >= 0 ? outputs[output_index_[i]] : unread_[i];
    fn_(args_, results_);
  }

 private:
  RefKernel fn_;
  std::vector<int> boundary_index_, output_index_;  // -1: constant / omitted or unread
  std::vector<Tensor> args_, results_, unread_;
};

// Every op with a reference implementation, one node at a time: the fallback for nodes no
// other backend takes, and the oracle the others are tested against.
class ReferenceBackend : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string version() const override { return "1"; }
  std::string thread_model() const override { return "OpenMP (heavy ops), else single thread"; }

  std::vector<PatternEntry> patterns() const override {
    std::vector<PatternEntry> entries;
    for (const OpDef* def : OpRegistry::global().all())
      if (def->reference && def->domain.empty()) entries.push_back({def->name, op(def->name), {}});
    return entries;
  }

  std::unique_ptr<Kernel> compile(const Graph& subgraph, const CompileOptions& options) override {
    if (!options.variant.empty())
      fail(ErrorKind::kUnsupported, "reference: no variant '{}'", options.variant);
    if (subgraph.num_nodes() == 1) {
      if (subgraph.node(0).inputs == subgraph.inputs &&
          subgraph.node(0).outputs == subgraph.outputs)
        return compile_reference_node(subgraph, 0);
      const Node& node = subgraph.node(0);
      return std::make_unique<BoundaryNodeKernel>(subgraph, reference_of(node)(subgraph, node));
    }
    return std::make_unique<GraphKernel>(subgraph, compile_reference_node);
  }
};

COLLAGE_REGISTER_BACKEND(ReferenceBackend);

}  // namespace

std::unique_ptr<Kernel> compile_reference_node(const Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  return std::make_unique<ReferenceNodeKernel>(reference_of(node)(graph, node));
}

}  // namespace collage
