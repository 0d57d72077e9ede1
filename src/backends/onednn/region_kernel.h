// One kernel for a whole region (the onednn-graph backend's compile): the region is covered
// with the onednn backend's groups, which are emitted into one program where values pass
// between primitives in the layouts the primitives chose, converted only at the boundary.
#pragma once

#include <memory>
#include <vector>

#include "backends/onednn/kernels.h"
#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::onednn {

// True for the nodes a region may hold (the heads and tails of emit_group, Flatten and a
// Reshape to a constant shape).
bool region_node(const Graph& g, const Node& n);

// `region` with each node that repeats an earlier one (same op, attributes and inputs:
// NASNet's branches each apply their own Relu and pool to one cell input) merged into it,
// unless its output leaves the region. compile_region starts with this.
Graph merge_duplicates(const Graph& region);

// Throws kUnsupported naming the first node it can't take. Conv node n is built with
// `algorithms[n]` (Winograd, channel-blocked; direct beyond its end: empty means all direct).
std::unique_ptr<Kernel> compile_region(const Graph& region,
                                       const std::vector<ConvAlgorithm>& algorithms = {});

}  // namespace collage::onednn
