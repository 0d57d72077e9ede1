// MatMul (numpy batching and broadcasting) and Gemm (transA/transB/alpha/beta/C) as
// cblas_sgemm calls, one per output matrix, each followed by the fused epilogue.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::blas {

// `subgraph`'s head (node `head`) is a MatMul or Gemm. Throws Error(kUnsupported).
std::unique_ptr<Kernel> compile_gemm(const Graph& subgraph, NodeId head, int threads);

}  // namespace collage::blas
