#include "backends/reference/reference_backend.h"

#include "collage/backend.h"
#include "collage/op_registry.h"
#include "runtime/graph_kernel.h"

namespace collage {
namespace {

class ReferenceNodeKernel : public Kernel {
 public:
  explicit ReferenceNodeKernel(RefKernel fn) : fn_(std::move(fn)) {}
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override {
    fn_(inputs, outputs);
  }

 private:
  RefKernel fn_;
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

  std::unique_ptr<Kernel> compile(const Graph& subgraph) override {
    if (subgraph.num_nodes() == 1 && subgraph.node(0).inputs == subgraph.inputs &&
        subgraph.node(0).outputs == subgraph.outputs)
      return compile_reference_node(subgraph, 0);
    return std::make_unique<GraphKernel>(subgraph, compile_reference_node, "reference");
  }
};

COLLAGE_REGISTER_BACKEND(ReferenceBackend);

}  // namespace

std::unique_ptr<Kernel> compile_reference_node(const Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  const OpDef* def = OpRegistry::global().find(node.op_type, node.domain);
  if (!def || !def->reference)
    fail(ErrorKind::kUnsupported, "node '{}': op '{}' has no reference implementation", node.name,
         node.op_type);
  return std::make_unique<ReferenceNodeKernel>(def->reference(graph, node));
}

}  // namespace collage
