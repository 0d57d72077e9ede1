// A kernel that runs a whole standalone graph node by node, each node compiled by a
// per-node function, with the graph's own arena. How the reference backend (and any
// backend that has only per-op kernels) runs a multi-node subgraph.
#pragma once

#include <functional>
#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage {

class Executor;

class GraphKernel : public Kernel {
 public:
  using CompileNode = std::function<std::unique_ptr<Kernel>(const Graph&, NodeId)>;
  GraphKernel(Graph graph, const CompileNode& compile_node);
  ~GraphKernel() override;
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override;

 private:
  std::unique_ptr<Graph> graph_;  // the executor points into it: never moves
  std::unique_ptr<Executor> executor_;
  std::vector<Tensor> inputs_;
};

}  // namespace collage
