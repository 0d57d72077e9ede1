#include "search/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <queue>

#include "search/node_set.h"

namespace collage {
namespace {

// The step graph of a placement: steps are candidates, an edge where one reads what another
// computes; `order` is a topological order keeping the model's order where it is free.
struct StepGraph {
  std::vector<std::vector<int>> succ;
  std::vector<int> order;
  std::vector<NodeSet> ancestors, descendants;  // as sets of step indices
};

StepGraph step_graph(const Graph& graph, const Placement& placement) {
  const int n = static_cast<int>(placement.size());
  std::vector<int> step_of(graph.num_nodes(), -1);
  std::vector<int> first_node(n, INT32_MAX);
  for (int s = 0; s < n; ++s)
    for (NodeId node : placement[s].nodes) {
      step_of[node] = s;
      first_node[s] = std::min<int>(first_node[s], node);
    }
  StepGraph g;
  g.succ.resize(n);
  std::vector<int> indegree(n, 0);
  for (size_t node = 0; node < graph.num_nodes(); ++node)
    for (ValueId v : graph.node(static_cast<NodeId>(node)).inputs) {
      if (v == kNoValue || graph.value(v).producer < 0) continue;
      const int from = step_of[graph.value(v).producer], to = step_of[node];
      if (from == to ||
          std::find(g.succ[from].begin(), g.succ[from].end(), to) != g.succ[from].end())
        continue;
      g.succ[from].push_back(to);
      ++indegree[to];
    }
  using Item = std::pair<int, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (int s = 0; s < n; ++s)
    if (indegree[s] == 0) ready.push({first_node[s], s});
  while (!ready.empty()) {
    const int s = ready.top().second;
    ready.pop();
    g.order.push_back(s);
    for (int t : g.succ[s])
      if (--indegree[t] == 0) ready.push({first_node[t], t});
  }
  if (static_cast<int>(g.order.size()) != n)
    fail(ErrorKind::kInternal, "schedule: the placement's steps depend on each other in a cycle");
  g.ancestors.assign(n, NodeSet(n));
  g.descendants.assign(n, NodeSet(n));
  for (auto it = g.order.rbegin(); it != g.order.rend(); ++it)
    for (int t : g.succ[*it]) {
      g.descendants[*it].insert(t);
      g.descendants[*it] |= g.descendants[t];
    }
  for (int s : g.order)
    for (int t : g.succ[s]) {
      g.ancestors[t].insert(s);
      g.ancestors[t] |= g.ancestors[s];
    }
  return g;
}

class Scheduler {
 public:
  Scheduler(const Graph& graph, const Placement& placement, CostModel& costs, int threads)
      : placement_(placement),
        costs_(costs),
        threads_(threads),
        steps_(step_graph(graph, placement)),
        overhead_ms_(costs.step_overhead_ms()) {}

  ScheduledPlan run() {
    schedule_part(steps_.order);
    close_sequential_stage();
    for (int s : steps_.order) out_.sequential_ms += cost(s, threads_) + overhead_ms_;
    return std::move(out_);
  }

 private:
  double cost(int step, int threads) {
    Candidate c = placement_[step];
    c.threads = threads;
    return costs_.cost_ms(c);
  }

  void emit(int step, int stage, int lane, int threads) {
    Candidate c = placement_[step];
    c.threads = threads;
    out_.placement.push_back(std::move(c));
    out_.schedule.push_back({stage, lane});
  }

  void emit_sequential(int step) {
    if (sequential_stage_ < 0) sequential_stage_ = next_stage_++;
    emit(step, sequential_stage_, 0, threads_);
    out_.predicted_ms += cost(step, threads_) + overhead_ms_;
  }
  void close_sequential_stage() { sequential_stage_ = -1; }

  // `part`: steps in topological order, every external input computed before the first.
  void schedule_part(const std::vector<int>& part) {
    if (part.size() == 1) return emit_sequential(part[0]);
    NodeSet in_part(placement_.size());
    for (int s : part) in_part.insert(s);
    // Sequential points of the part: comparable with every other step of it.
    std::vector<bool> sequential(part.size(), false);
    bool any_sequential = false;
    for (size_t i = 0; i < part.size(); ++i) {
      NodeSet related = steps_.ancestors[part[i]];
      related |= steps_.descendants[part[i]];
      related.insert(part[i]);
      sequential[i] = in_part.subset_of(related);
      any_sequential = any_sequential || sequential[i];
    }
    if (any_sequential) {
      std::vector<int> run;
      for (size_t i = 0; i <= part.size(); ++i) {
        if (i < part.size() && !sequential[i]) {
          run.push_back(part[i]);
          continue;
        }
        if (!run.empty()) schedule_part(run);
        run.clear();
        if (i < part.size()) emit_sequential(part[i]);
      }
      return;
    }
    std::vector<std::vector<int>> components = components_of(part, in_part);
    if (components.size() < 2) {
      for (int s : part) emit_sequential(s);
      return;
    }
    if (!try_concurrent(components))
      for (const std::vector<int>& component : components) schedule_part(component);
  }

  // Weakly connected components of `part` (each in topological order), ordered by their
  // first step.
  std::vector<std::vector<int>> components_of(const std::vector<int>& part,
                                              const NodeSet& in_part) {
    std::vector<int> parent(placement_.size());
    std::iota(parent.begin(), parent.end(), 0);
    auto find = [&](int x) {
      while (parent[x] != x) x = parent[x] = parent[parent[x]];
      return x;
    };
    for (int s : part)
      for (int t : steps_.succ[s])
        if (in_part.contains(t)) parent[find(s)] = find(t);
    std::vector<std::vector<int>> components;
    std::vector<int> index(placement_.size(), -1);
    for (int s : part) {
      int root = find(s);
      if (index[root] < 0) {
        index[root] = static_cast<int>(components.size());
        components.emplace_back();
      }
      components[index[root]].push_back(s);
    }
    return components;
  }

  // Emits the components as one concurrent stage when some lane count is predicted faster
  // than running the part sequentially (with what sequential scheduling of each component
  // would give; nested parallelism inside a component is not looked for then).
  bool try_concurrent(const std::vector<std::vector<int>>& components) {
    double sequential_ms = 0;
    for (const auto& component : components)
      for (int s : component) sequential_ms += cost(s, threads_) + overhead_ms_;
    double best_ms = sequential_ms;
    std::vector<std::vector<int>> best_lanes;
    int best_share = 0;
    for (int share : lane_shares(threads_)) {
      const size_t lanes = std::min<size_t>(threads_ / share, components.size());
      if (lanes < 2) continue;
      // Longest component first, onto the least loaded lane.
      std::vector<std::pair<double, size_t>> by_cost;
      for (size_t c = 0; c < components.size(); ++c) {
        double ms = 0;
        for (int s : components[c]) ms += cost(s, share) + overhead_ms_;
        by_cost.push_back({ms, c});
      }
      std::sort(by_cost.begin(), by_cost.end(), std::greater<>());
      std::vector<double> load(lanes, 0);
      std::vector<std::vector<size_t>> assigned(lanes);
      for (const auto& [ms, c] : by_cost) {
        const size_t lane = std::min_element(load.begin(), load.end()) - load.begin();
        load[lane] += ms;
        assigned[lane].push_back(c);
      }
      const double stage_ms =
          *std::max_element(load.begin(), load.end()) + costs_.stage_overhead_ms();
      if (!(stage_ms < best_ms)) continue;
      best_ms = stage_ms;
      best_share = share;
      best_lanes.assign(lanes, {});
      for (size_t lane = 0; lane < lanes; ++lane) {
        // Components in the model's order inside a lane.
        std::sort(assigned[lane].begin(), assigned[lane].end());
        for (size_t c : assigned[lane])
          best_lanes[lane].insert(best_lanes[lane].end(), components[c].begin(),
                                  components[c].end());
      }
    }
    if (best_share == 0) return false;
    close_sequential_stage();
    const int stage = next_stage_++;
    for (size_t lane = 0; lane < best_lanes.size(); ++lane)
      for (int s : best_lanes[lane]) emit(s, stage, static_cast<int>(lane), best_share);
    out_.predicted_ms += best_ms;
    ++out_.concurrent_stages;
    return true;
  }

  const Placement& placement_;
  CostModel& costs_;
  const int threads_;
  const StepGraph steps_;
  const double overhead_ms_;
  ScheduledPlan out_;
  int next_stage_ = 0;
  int sequential_stage_ = -1;
};

}  // namespace

std::string ScheduledPlan::text() const {
  if (!concurrent()) return "";
  std::string text;
  for (size_t i = 0; i < placement.size(); ++i)
    text += fmt::format("{}:{}.{}x{} ", placement[i].nodes.front(), schedule[i].stage,
                        schedule[i].lane, placement[i].threads);
  return text;
}

std::vector<int> lane_shares(int threads) {
  std::vector<int> shares;
  for (int k = 2; k <= threads; ++k) {
    const int share = threads / k;
    if (share >= 1 && (shares.empty() || shares.back() != share)) shares.push_back(share);
  }
  return shares;
}

ScheduledPlan choose_schedule(const Graph& graph, const Placement& placement, CostModel& costs,
                              int threads) {
  return Scheduler(graph, placement, costs, threads).run();
}

}  // namespace collage
