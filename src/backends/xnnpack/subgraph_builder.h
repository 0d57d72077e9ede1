// Translates a collage region into an XNNPACK subgraph. Inside it every rank-4 value is
// NHWC (so convolutions and pools chain without transposes) and every other value keeps
// its row-major layout; ops whose meaning depends on a rank-4 operand's layout beyond that
// (a MatMul on a 4-D input, a Softmax over W) are not taken.
#pragma once

#include <xnnpack.h>

#include <map>
#include <vector>

#include "backends/xnnpack/xnn_common.h"
#include "collage/graph.h"

namespace collage::xnnpack {

// Node-local test for region membership; cheap (fusion rules call it many times). A region
// of such nodes may still be refused by compile() (e.g. padding XNNPACK can't express).
bool subgraph_supports(const Graph& graph, const Node& node);

struct ExternalTensor {
  uint32_t id = 0;
  bool nhwc = false;  // rank 4: NCHW outside, NHWC inside
  Shape shape;        // collage's (NCHW) shape
};

struct BuiltSubgraph {
  SubgraphPtr subgraph;
  // Constants the subgraph points to: they must outlive every runtime made from it.
  std::vector<std::vector<float>> static_data;
  std::vector<ExternalTensor> inputs, outputs;  // in the region graph's order
};

// Throws Error(kUnsupported) for nodes it can't translate, kBackend if XNNPACK fails.
BuiltSubgraph build_subgraph(const Graph& region);

}  // namespace collage::xnnpack
