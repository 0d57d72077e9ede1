#include "runtime/graph_kernel.h"

#include <cstring>

#include "runtime/executor.h"

namespace collage {

GraphKernel::GraphKernel(Graph graph, const CompileNode& compile_node)
    : graph_(std::make_unique<Graph>(std::move(graph))) {
  std::vector<Step> steps;
  for (size_t n = 0; n < graph_->num_nodes(); ++n) {
    const Node& node = graph_->node(static_cast<NodeId>(n));
    Step step;
    step.kernel = compile_node(*graph_, static_cast<NodeId>(n));
    step.inputs = node.inputs;
    step.outputs = node.outputs;
    // threads 0: the nodes run with the thread count of the step that runs this kernel.
    step.candidate.nodes = {static_cast<NodeId>(n)};
    step.candidate.threads = 0;
    steps.push_back(std::move(step));
  }
  executor_ = std::make_unique<Executor>(*graph_, std::move(steps));
}

GraphKernel::~GraphKernel() = default;

void GraphKernel::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  inputs_.assign(inputs.begin(), inputs.end());
  std::vector<Tensor> results = executor_->run(inputs_);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].nbytes()) std::memcpy(outputs[i].raw(), results[i].raw(), outputs[i].nbytes());
}

}  // namespace collage
