#include <algorithm>

#include "collage/pattern.h"

namespace collage {

Boundary boundary_of(const Graph& graph, const std::vector<NodeId>& nodes) {
  std::vector<bool> inside(graph.num_nodes(), false);
  for (NodeId n : nodes) inside[n] = true;
  std::vector<bool> seen(graph.num_values(), false), produced(graph.num_values(), false);
  Boundary b;
  for (NodeId n : nodes)
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) produced[v] = true;
  for (NodeId n : nodes)
    for (ValueId v : graph.node(n).inputs) {
      if (v == kNoValue || produced[v] || seen[v] || graph.value(v).is_constant()) continue;
      seen[v] = true;
      b.inputs.push_back(v);
    }
  std::vector<bool> is_graph_output(graph.num_values(), false);
  for (ValueId v : graph.outputs) is_graph_output[v] = true;
  std::vector<bool> read_outside(graph.num_values(), false);
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    if (!inside[n])
      for (ValueId v : graph.node(static_cast<NodeId>(n)).inputs)
        if (v != kNoValue) read_outside[v] = true;
  for (NodeId n : nodes)
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue && (read_outside[v] || is_graph_output[v])) b.outputs.push_back(v);
  return b;
}

bool is_convex(const Graph& graph, const std::vector<NodeId>& nodes) {
  if (nodes.empty()) return true;
  // Nodes are topologically numbered, so a path that leaves the set and re-enters it runs
  // through nodes numbered between the set's first and last: one forward pass over that
  // range, marking values produced inside the set and values produced outside it by a node
  // the set reaches, finds it. (It used to walk the graph's consumer lists, rebuilt for the
  // whole graph at every call: a warm re-tune of NASNet-A-Mobile's 723 nodes spent half its
  // time allocating them; see docs/DESIGN.md "Search".)
  const auto [first_it, last_it] = std::minmax_element(nodes.begin(), nodes.end());
  const NodeId first = *first_it, last = *last_it;
  std::vector<char> inside(static_cast<size_t>(last - first) + 1, 0);
  for (NodeId n : nodes) inside[n - first] = 1;
  enum : char { kUnmarked = 0, kFromSet = 1, kLeftSet = 2 };
  std::vector<char> mark(graph.num_values(), kUnmarked);
  for (NodeId n = first; n <= last; ++n) {
    const Node& node = graph.node(n);
    if (inside[n - first]) {
      for (ValueId v : node.inputs)
        if (v != kNoValue && mark[v] == kLeftSet) return false;
      for (ValueId v : node.outputs)
        if (v != kNoValue) mark[v] = kFromSet;
      continue;
    }
    bool reached = false;
    for (ValueId v : node.inputs) reached |= v != kNoValue && mark[v] != kUnmarked;
    if (reached)
      for (ValueId v : node.outputs)
        if (v != kNoValue) mark[v] = kLeftSet;
  }
  return true;
}

Graph extract_subgraph(const Graph& graph, const std::vector<NodeId>& nodes) {
  Boundary b = boundary_of(graph, nodes);
  Graph sub;
  sub.name = graph.name;
  sub.opset = graph.opset;
  std::vector<ValueId> map(graph.num_values(), kNoValue);
  auto import_value = [&](ValueId v) {
    if (v == kNoValue) return kNoValue;
    if (map[v] == kNoValue) {
      const Value& src = graph.value(v);
      map[v] = src.is_constant() ? sub.add_constant(src.name, src.constant)
                                 : sub.add_value(src.name, src.dtype, src.shape, src.shape_known);
    }
    return map[v];
  };
  for (ValueId v : b.inputs) sub.inputs.push_back(import_value(v));
  std::vector<NodeId> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  for (NodeId n : sorted) {
    Node copy = graph.node(n);
    for (ValueId& v : copy.inputs) v = import_value(v);
    for (ValueId& v : copy.outputs) v = import_value(v);
    sub.add_node(std::move(copy));
  }
  for (ValueId v : b.outputs) sub.outputs.push_back(map[v]);
  return sub;
}

}  // namespace collage
