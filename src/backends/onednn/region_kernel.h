// One kernel for a whole region (the onednn-graph backend's compile): the region is covered
// with the onednn backend's groups, which are emitted into one program where values pass
// between primitives in the layouts the primitives chose, converted only at the boundary.
#pragma once

#include <memory>
#include <vector>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage::onednn {

// True for the nodes a region may hold (the heads and tails of emit_group, Flatten and a
// Reshape to a constant shape).
bool region_node(const Graph& g, const Node& n);

// Throws kUnsupported naming the first node it can't take. The Conv nodes whose index is
// set in `winograd` (empty: none) are built with oneDNN's Winograd algorithm.
std::unique_ptr<Kernel> compile_region(const Graph& region, const std::vector<bool>& winograd = {});

}  // namespace collage::onednn
