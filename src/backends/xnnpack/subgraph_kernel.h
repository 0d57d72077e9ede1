// The graph-level kernel: a whole region run as one XNNPACK runtime (XNNPACK plans its
// internal tensors and fuses clamps itself). Rank-4 boundary tensors are staged through
// the kernel's NHWC buffers; the others are bound directly, and the runtime is set up again
// only when the caller's pointers change.
#pragma once

#include <memory>
#include <vector>

#include "backends/xnnpack/subgraph_builder.h"
#include "backends/xnnpack/thread_pool.h"
#include "collage/kernel.h"

namespace collage::xnnpack {

class SubgraphKernel : public Kernel {
 public:
  SubgraphKernel(BuiltSubgraph built, std::shared_ptr<ThreadPool> pool);
  void run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) override;

 private:
  struct BoundaryTensor {
    ExternalTensor tensor;
    std::vector<float> staging;  // NHWC copy; empty when bound directly
  };
  void setup_if_moved();

  // Declared before runtime_: destroyed after it.
  std::shared_ptr<ThreadPool> pool_;
  std::vector<std::vector<float>> static_data_;
  RuntimePtr runtime_;
  std::vector<BoundaryTensor> inputs_, outputs_;
  std::vector<xnn_external_value> externals_;  // inputs, then outputs
  std::vector<void*> bound_;                   // pointers of the last setup
};

// Builds the region's subgraph and runtime. Throws Error(kUnsupported) when XNNPACK
// can't take it.
std::unique_ptr<Kernel> compile_subgraph(const Graph& region, std::shared_ptr<ThreadPool> pool);

}  // namespace collage::xnnpack
