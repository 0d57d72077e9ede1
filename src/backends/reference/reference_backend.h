// The `reference` backend: every supported op, one kernel per node, using the op's
// reference implementation. It is the correctness oracle and the fallback for nodes no
// other backend takes.
#pragma once

#include <memory>

#include "collage/graph.h"
#include "collage/kernel.h"

namespace collage {

// Compiles one node of `graph` (shapes inferred) into a kernel whose inputs/outputs are the
// node's, in order. Throws Error(kUnsupported) for ops without a reference implementation.
std::unique_ptr<Kernel> compile_reference_node(const Graph& graph, NodeId node);

}  // namespace collage
