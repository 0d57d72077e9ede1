#include <algorithm>
#include <deque>

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
  std::vector<bool> inside(graph.num_nodes(), false);
  for (NodeId n : nodes) inside[n] = true;
  auto consumers = graph.consumers();
  // Walk forward from the set's outputs through outside nodes only; reaching the set again
  // means a path leaves and re-enters. Nodes are topologically numbered, so only nodes
  // after the set's first node can be involved.
  std::vector<bool> visited(graph.num_nodes(), false);
  std::deque<NodeId> work;
  auto push_users = [&](NodeId n) {
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue)
        for (NodeId u : consumers[v])
          if (!inside[u] && !visited[u]) {
            visited[u] = true;
            work.push_back(u);
          }
  };
  for (NodeId n : nodes) push_users(n);
  const NodeId last = *std::max_element(nodes.begin(), nodes.end());
  while (!work.empty()) {
    NodeId n = work.front();
    work.pop_front();
    if (n > last) continue;  // cannot reach back into the set: all its nodes come earlier
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue)
        for (NodeId u : consumers[v]) {
          if (inside[u]) return false;
          if (!visited[u]) {
            visited[u] = true;
            work.push_back(u);
          }
        }
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
