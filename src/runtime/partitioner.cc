#include "runtime/partitioner.h"

#include <algorithm>
#include <map>
#include <queue>

#include "backends/reference/reference_backend.h"

namespace collage {
namespace {

// Node -> step index: groups first, then one step per remaining node.
std::vector<int> step_of_nodes(const Graph& graph, const std::vector<int>& group_of,
                               int num_groups) {
  std::vector<int> step(graph.num_nodes());
  int next = num_groups;
  for (size_t n = 0; n < graph.num_nodes(); ++n) step[n] = group_of[n] >= 0 ? group_of[n] : next++;
  return step;
}

// Topological order of steps given node->step; empty when the step graph has a cycle.
std::vector<int> order_steps(const Graph& graph, const std::vector<int>& step) {
  int num_steps = graph.num_nodes() ? *std::max_element(step.begin(), step.end()) + 1 : 0;
  std::vector<std::vector<int>> succ(num_steps);
  std::vector<int> indegree(num_steps, 0);
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    for (ValueId v : graph.node(static_cast<NodeId>(n)).inputs) {
      if (v == kNoValue) continue;
      NodeId p = graph.value(v).producer;
      if (p < 0 || step[p] == step[n]) continue;
      succ[step[p]].push_back(step[n]);
      ++indegree[step[n]];
    }
  // Min-heap on the smallest node index of each step keeps the model's order where free.
  std::vector<int> first_node(num_steps, INT32_MAX);
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    first_node[step[n]] = std::min<int>(first_node[step[n]], static_cast<int>(n));
  using Item = std::pair<int, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (int s = 0; s < num_steps; ++s)
    if (indegree[s] == 0) ready.push({first_node[s], s});
  std::vector<int> order;
  while (!ready.empty()) {
    int s = ready.top().second;
    ready.pop();
    order.push_back(s);
    for (int t : succ[s])
      if (--indegree[t] == 0) ready.push({first_node[t], t});
  }
  if (static_cast<int>(order.size()) != num_steps) return {};
  return order;
}

std::vector<int> group_index(const Graph& graph, const std::vector<Group>& groups) {
  std::vector<int> group_of(graph.num_nodes(), -1);
  for (size_t g = 0; g < groups.size(); ++g)
    for (NodeId n : groups[g].nodes) {
      if (group_of[n] >= 0)
        fail(ErrorKind::kInternal, "node '{}' is in two groups", graph.node(n).name);
      group_of[n] = static_cast<int>(g);
    }
  return group_of;
}

}  // namespace

bool groups_are_acyclic(const Graph& graph, const std::vector<int>& group_of) {
  int num_groups = 0;
  for (int g : group_of) num_groups = std::max(num_groups, g + 1);
  return graph.num_nodes() == 0 ||
         !order_steps(graph, step_of_nodes(graph, group_of, num_groups)).empty();
}

std::vector<Step> build_steps(const Graph& graph, std::vector<Group>& groups) {
  std::vector<int> group_of = group_index(graph, groups);
  std::vector<int> step = step_of_nodes(graph, group_of, static_cast<int>(groups.size()));
  std::vector<int> order = order_steps(graph, step);
  if (order.empty() && graph.num_nodes() > 0)
    fail(ErrorKind::kInternal, "the placement's groups depend on each other in a cycle");
  std::vector<NodeId> lone_node(graph.num_nodes() + groups.size(), -1);
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    if (group_of[n] < 0) lone_node[step[n]] = static_cast<NodeId>(n);

  std::vector<Step> steps;
  for (int s : order) {
    Step st;
    if (s < static_cast<int>(groups.size())) {
      Group& g = groups[s];
      Boundary b = boundary_of(graph, g.nodes);
      st.kernel = g.kernel ? g.kernel : g.backend->compile(extract_subgraph(graph, g.nodes));
      st.inputs = b.inputs;
      st.outputs = b.outputs;
      st.nodes = g.nodes;
      st.backend = g.backend->name();
    } else {
      NodeId n = lone_node[s];
      st.kernel = compile_reference_node(graph, n);
      st.inputs = graph.node(n).inputs;
      st.outputs = graph.node(n).outputs;
      st.nodes = {n};
      st.backend = "reference";
    }
    steps.push_back(std::move(st));
  }
  return steps;
}

std::vector<Group> groups_from_plan(const Graph& graph, const Plan& plan) {
  std::map<std::string, NodeId> by_name;
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    by_name[graph.node(static_cast<NodeId>(n)).name] = static_cast<NodeId>(n);
  std::vector<bool> seen(graph.num_nodes(), false);
  std::vector<Group> groups;
  for (const PlanGroup& pg : plan.groups) {
    Backend* backend = BackendRegistry::global().find(pg.backend);
    if (!backend)
      fail(ErrorKind::kInvalidArgument, "the plan uses backend '{}', which is not registered",
           pg.backend);
    if (!backend->available())
      fail(ErrorKind::kInvalidArgument, "the plan uses backend '{}', not available here",
           pg.backend);
    Group g;
    g.backend = backend;
    for (const std::string& name : pg.nodes) {
      auto it = by_name.find(name);
      if (it == by_name.end())
        fail(ErrorKind::kInvalidArgument, "the plan names node '{}', which the model lacks", name);
      if (seen[it->second])
        fail(ErrorKind::kInvalidArgument, "the plan places node '{}' twice", name);
      seen[it->second] = true;
      g.nodes.push_back(it->second);
    }
    std::sort(g.nodes.begin(), g.nodes.end());
    // Reference groups run node by node: no need to extract and compile them as one.
    if (backend->name() != "reference") groups.push_back(std::move(g));
  }
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    if (!seen[n])
      fail(ErrorKind::kInvalidArgument, "the plan does not place node '{}'",
           graph.node(static_cast<NodeId>(n)).name);
  std::vector<int> group_of(graph.num_nodes(), -1);
  for (size_t g = 0; g < groups.size(); ++g)
    for (NodeId n : groups[g].nodes) group_of[n] = static_cast<int>(g);
  if (!groups_are_acyclic(graph, group_of))
    fail(ErrorKind::kInvalidArgument, "the plan's groups depend on each other in a cycle");
  return groups;
}

std::vector<Group> place_on_single_backend(const Graph& graph, Backend& backend,
                                           std::vector<std::string>* log) {
  std::vector<Group> groups;
  if (backend.name() == "reference") return groups;
  std::vector<Match> matches = find_matches(graph, backend);
  // By first node, largest first (ties: the lexicographically smaller set, for determinism).
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.nodes.front() != b.nodes.front()) return a.nodes.front() < b.nodes.front();
    if (a.nodes.size() != b.nodes.size()) return a.nodes.size() > b.nodes.size();
    return a.nodes < b.nodes;
  });
  std::vector<int> group_of(graph.num_nodes(), -1);
  size_t m = 0;
  for (size_t n = 0; n < graph.num_nodes(); ++n) {
    while (m < matches.size() && matches[m].nodes.front() < static_cast<NodeId>(n)) ++m;
    if (group_of[n] >= 0) continue;
    for (size_t k = m; k < matches.size() && matches[k].nodes.front() == static_cast<NodeId>(n);
         ++k) {
      const Match& match = matches[k];
      if (std::any_of(match.nodes.begin(), match.nodes.end(),
                      [&](NodeId x) { return group_of[x] >= 0; }))
        continue;
      for (NodeId x : match.nodes) group_of[x] = static_cast<int>(groups.size());
      bool ok = groups_are_acyclic(graph, group_of);
      std::shared_ptr<Kernel> kernel;
      if (ok) {
        try {
          kernel = backend.compile(extract_subgraph(graph, match.nodes));
        } catch (const Error& e) {
          ok = false;
          if (log)
            log->push_back(fmt::format("{}: {} nodes at '{}' refused: {}", backend.name(),
                                       match.nodes.size(), graph.node(match.nodes[0]).name,
                                       e.what()));
        }
      }
      if (!ok) {
        for (NodeId x : match.nodes) group_of[x] = -1;
        continue;
      }
      groups.push_back(Group{match.nodes, &backend, std::move(kernel)});
      break;
    }
  }
  return groups;
}

}  // namespace collage
