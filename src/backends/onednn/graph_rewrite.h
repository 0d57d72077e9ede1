// The loop the region rewrites share (concat_into_convs.h, conv1d_as_2d.h): offer each node
// of a copy of the graph to a rewrite that appends the nodes replacing it (and, maybe, some of
// its readers) and says which nodes they replace; then prune those and re-sort.
#pragma once

#include <vector>

#include "collage/graph.h"

namespace collage::onednn {

// `region` with each node rewritten that `rewrite(g, id, node)` takes: it gets g (which it
// appends to), the node's id and a copy of it (adding values moves the graph's), and returns
// the ids of the nodes its new ones replace (none: not taken). Only the nodes there on entry
// are offered.
template <typename Rewrite>
Graph rewrite_nodes(const Graph& region, const Rewrite& rewrite) {
  Graph g = region;
  const size_t original = g.num_nodes();
  std::vector<bool> removed(original, false);
  bool any = false;
  for (size_t i = 0; i < original; ++i) {
    const Node node = g.node(static_cast<NodeId>(i));
    for (NodeId n : rewrite(g, static_cast<NodeId>(i), node)) {
      removed[n] = true;
      any = true;
    }
  }
  if (!any) return g;
  removed.resize(g.num_nodes(), false);
  g.prune(removed);
  g.sort_topologically();
  return g;
}

}  // namespace collage::onednn
