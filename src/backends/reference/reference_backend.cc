#include "backends/reference/reference_backend.h"

#include "collage/op_registry.h"

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
