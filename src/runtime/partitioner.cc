#include "runtime/partitioner.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>

#include <spdlog/spdlog.h>

#include "runtime/threads.h"

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

// Node -> index of its candidate; Error(kInternal) when a node is in two.
std::vector<int> candidate_index(const Graph& graph, const Placement& placement) {
  std::vector<int> of(graph.num_nodes(), -1);
  for (size_t c = 0; c < placement.size(); ++c)
    for (NodeId n : placement[c].nodes) {
      if (of[n] >= 0) fail(ErrorKind::kInternal, "node '{}' is in two groups", graph.node(n).name);
      of[n] = static_cast<int>(c);
    }
  return of;
}

bool all_sequential(const Schedule* schedule) {
  return !schedule || std::all_of(schedule->begin(), schedule->end(),
                                  [](const Slot& s) { return s.stage == 0 && s.lane == 0; });
}

// The order of a concurrent schedule is the placement's own: check it can run that way.
void check_scheduled_order(const Graph& graph, const Placement& placement, const Schedule& schedule,
                           const std::vector<int>& candidate_of) {
  if (schedule.size() != placement.size())
    fail(ErrorKind::kInternal, "a schedule of {} slots for {} groups", schedule.size(),
         placement.size());
  for (size_t c = 0; c < placement.size(); ++c) {
    if (c > 0 && schedule[c].stage < schedule[c - 1].stage)
      fail(ErrorKind::kInvalidArgument,
           "the plan's stages must not decrease along its groups (group {} has stage {} after "
           "stage {})",
           c, schedule[c].stage, schedule[c - 1].stage);
    for (NodeId n : placement[c].nodes)
      for (ValueId v : graph.node(n).inputs) {
        if (v == kNoValue || graph.value(v).producer < 0) continue;
        const int p = candidate_of[graph.value(v).producer];
        if (p == static_cast<int>(c)) continue;
        if (p > static_cast<int>(c))
          fail(ErrorKind::kInvalidArgument,
               "the plan's group {} (node '{}') runs before group {}, which computes its input", c,
               graph.node(n).name, p);
        if (schedule[p].stage == schedule[c].stage && schedule[p].lane != schedule[c].lane)
          fail(ErrorKind::kInvalidArgument,
               "the plan's group {} reads a value computed in the same stage by another lane "
               "(group {})",
               c, p);
      }
  }
}

}  // namespace

bool groups_are_acyclic(const Graph& graph, const std::vector<int>& group_of) {
  int num_groups = 0;
  for (int g : group_of) num_groups = std::max(num_groups, g + 1);
  return graph.num_nodes() == 0 ||
         !order_steps(graph, step_of_nodes(graph, group_of, num_groups)).empty();
}

Placement complete_placement(const Graph& graph, Placement placement, int threads) {
  Backend& fallback = BackendRegistry::global().fallback();
  Placement out;
  std::vector<bool> covered(graph.num_nodes(), false);
  for (Candidate& c : placement) {
    for (NodeId n : c.nodes) covered[n] = true;
    if (c.backend != &fallback) {
      out.push_back(std::move(c));
      continue;
    }
    for (NodeId n : c.nodes) out.push_back(Candidate{{n}, &fallback, "", c.threads});
  }
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    if (!covered[n]) out.push_back(Candidate{{static_cast<NodeId>(n)}, &fallback, "", threads});
  return out;
}

std::shared_ptr<Kernel> compile_candidate(const Graph& graph, const Candidate& candidate) {
  // Libraries size their work partitioning when a kernel is built (oneDNN reads this
  // thread's OpenMP count): build it with the count it runs with.
  use_threads_on_this_thread(candidate.threads);
  // A pool the kernel starts now inherits this thread's MXCSR; a region measures itself.
  DenormalsFlushed flushed;
  flush_denormals_on_openmp_team(candidate.threads);
  return candidate.backend->compile(extract_subgraph(graph, candidate.nodes),
                                    candidate.compile_options());
}

std::vector<Step> build_steps(const Graph& graph, const Placement& placement,
                              const Schedule* schedule, const KernelSource& source) {
  std::vector<int> candidate_of = candidate_index(graph, placement);
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    if (candidate_of[n] < 0)
      fail(ErrorKind::kInternal, "node '{}' is in no group", graph.node(NodeId(n)).name);
  std::vector<int> order;
  if (all_sequential(schedule)) {
    order = order_steps(graph, candidate_of);
    if (order.empty() && graph.num_nodes() > 0)
      fail(ErrorKind::kInternal, "the placement's groups depend on each other in a cycle");
  } else {
    check_scheduled_order(graph, placement, *schedule, candidate_of);
    order.resize(placement.size());
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<Step> steps;
  for (int c : order) {
    const Candidate& candidate = placement[c];
    Boundary b = boundary_of(graph, candidate.nodes);
    Step step;
    step.kernel = source(graph, candidate);
    step.inputs = b.inputs;
    step.outputs = b.outputs;
    step.candidate = candidate;
    if (schedule && !all_sequential(schedule)) {
      step.stage = (*schedule)[c].stage;
      step.lane = (*schedule)[c].lane;
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

ScheduledPlacement placement_from_plan(const Graph& graph, const Plan& plan, int threads) {
  std::map<std::string, NodeId> by_name;
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    by_name[graph.node(static_cast<NodeId>(n)).name] = static_cast<NodeId>(n);
  std::vector<bool> seen(graph.num_nodes(), false);
  ScheduledPlacement out;
  Backend& fallback = BackendRegistry::global().fallback();
  for (const PlanGroup& pg : plan.groups) {
    Backend* backend = BackendRegistry::global().find(pg.backend);
    if (!backend)
      fail(ErrorKind::kInvalidArgument, "the plan uses backend '{}', which is not registered",
           pg.backend);
    if (!backend->available())
      fail(ErrorKind::kInvalidArgument, "the plan uses backend '{}', not available here: {}",
           pg.backend, backend->unavailable_reason());
    if (pg.threads > threads)
      fail(ErrorKind::kInvalidArgument,
           "the plan runs a group of backend '{}' on {} threads, more than the {} this session has",
           pg.backend, pg.threads, threads);
    Candidate c;
    c.backend = backend;
    c.variant = pg.variant;
    c.threads = pg.threads > 0 ? pg.threads : threads;
    for (const std::string& name : pg.nodes) {
      auto it = by_name.find(name);
      if (it == by_name.end())
        fail(ErrorKind::kInvalidArgument, "the plan names node '{}', which the model lacks", name);
      if (seen[it->second])
        fail(ErrorKind::kInvalidArgument, "the plan places node '{}' twice", name);
      seen[it->second] = true;
      c.nodes.push_back(it->second);
    }
    std::sort(c.nodes.begin(), c.nodes.end());
    // The fallback runs node by node (see complete_placement): one slot for each node.
    if (backend == &fallback) {
      for (NodeId n : c.nodes) {
        out.placement.push_back(Candidate{{n}, backend, c.variant, c.threads});
        out.schedule.push_back({pg.stage, pg.lane});
      }
      continue;
    }
    out.placement.push_back(std::move(c));
    out.schedule.push_back({pg.stage, pg.lane});
  }
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    if (!seen[n])
      fail(ErrorKind::kInvalidArgument, "the plan does not place node '{}'",
           graph.node(static_cast<NodeId>(n)).name);
  if (!groups_are_acyclic(graph, candidate_index(graph, out.placement)))
    fail(ErrorKind::kInvalidArgument, "the plan's groups depend on each other in a cycle");
  return out;
}

Plan plan_of_steps(const Graph& graph, const std::vector<Step>& steps, int threads,
                   const std::string& hardware) {
  Plan plan;
  plan.model_hash = model_hash(graph);
  plan.hardware = hardware;
  plan.threads = threads;
  for (const Step& step : steps) {
    const Candidate& c = step.candidate;
    PlanGroup g;
    g.backend = c.backend->name();
    g.variant = c.variant;
    g.threads = c.threads;
    g.stage = step.stage;
    g.lane = step.lane;
    for (NodeId n : c.nodes) g.nodes.push_back(graph.node(n).name);
    plan.backend_versions[g.backend] = c.backend->version();
    plan.groups.push_back(std::move(g));
  }
  return plan;
}

namespace {

// Merges neighbouring regions of a graph-level backend while the union stays convex and the
// step graph acyclic (a graph-level runtime takes whole regions). Indices into `placement`
// of the merged regions' parts, per region.
std::vector<std::vector<size_t>> maximal_regions(const Graph& graph, const Placement& placement) {
  std::vector<int> of = candidate_index(graph, placement);
  std::vector<int> parent(placement.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<std::vector<NodeId>> nodes(placement.size());
  for (size_t c = 0; c < placement.size(); ++c) nodes[c] = placement[c].nodes;
  // Region ids per node, for the acyclicity check of the quotient graph.
  auto region_of_nodes = [&] {
    std::vector<int> r(graph.num_nodes(), -1);
    for (size_t n = 0; n < graph.num_nodes(); ++n)
      if (of[n] >= 0) r[n] = find(of[n]);
    return r;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < graph.num_nodes(); ++n) {
      if (of[n] < 0) continue;
      for (ValueId v : graph.node(static_cast<NodeId>(n)).inputs) {
        if (v == kNoValue || graph.value(v).producer < 0) continue;
        const NodeId p = graph.value(v).producer;
        if (of[p] < 0) continue;
        const int a = find(of[p]), b = find(of[n]);
        if (a == b) continue;
        std::vector<NodeId> merged;
        std::merge(nodes[a].begin(), nodes[a].end(), nodes[b].begin(), nodes[b].end(),
                   std::back_inserter(merged));
        if (!is_convex(graph, merged)) continue;
        parent[b] = a;
        if (!groups_are_acyclic(graph, region_of_nodes())) {
          parent[b] = b;
          continue;
        }
        nodes[a] = std::move(merged);
        nodes[b].clear();
        changed = true;
      }
    }
  }
  std::map<int, std::vector<size_t>> parts;
  for (size_t c = 0; c < placement.size(); ++c) parts[find(static_cast<int>(c))].push_back(c);
  std::vector<std::vector<size_t>> out;
  for (auto& [root, list] : parts) out.push_back(std::move(list));
  return out;
}

// `parts` (indices into `placement`) in an order the steps can run in.
std::vector<size_t> in_step_order(const Graph& graph, const Placement& placement,
                                  const std::vector<size_t>& parts) {
  std::vector<int> group_of(graph.num_nodes(), -1);
  for (size_t i = 0; i < parts.size(); ++i)
    for (NodeId n : placement[parts[i]].nodes) group_of[n] = static_cast<int>(i);
  const std::vector<int> order =
      order_steps(graph, step_of_nodes(graph, group_of, static_cast<int>(parts.size())));
  if (order.empty()) return parts;
  std::vector<size_t> out;
  for (int s : order)
    if (s < static_cast<int>(parts.size())) out.push_back(parts[s]);
  return out;
}

}  // namespace

Placement place_on_single_backend(const Graph& graph, Backend& backend, int threads,
                                  std::vector<std::string>* log,
                                  std::vector<std::shared_ptr<Kernel>>* kernels_out, bool strict,
                                  const std::string& variant,
                                  const CompilesCheck& known_to_compile) {
  auto variant_for = [&](const std::vector<NodeId>& nodes) -> std::string {
    if (variant.empty()) return "";
    std::vector<std::string> offered = backend.region_variants(extract_subgraph(graph, nodes));
    return std::find(offered.begin(), offered.end(), variant) != offered.end() ? variant : "";
  };
  Placement placement;
  std::vector<std::shared_ptr<Kernel>> kernels;
  if (BackendRegistry::global().is_fallback(backend)) return placement;
  std::vector<Match> matches = find_matches(graph, backend);
  // By first node, largest first (ties: the lexicographically smaller set, for determinism).
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.nodes.front() != b.nodes.front()) return a.nodes.front() < b.nodes.front();
    if (a.nodes.size() != b.nodes.size()) return a.nodes.size() > b.nodes.size();
    return a.nodes < b.nodes;
  });
  std::vector<int> group_of(graph.num_nodes(), -1);
  // Whether `c` compiles, with its kernel when it had to be compiled to know.
  struct Compiled {
    bool ok = false;
    std::shared_ptr<Kernel> kernel;
  };
  auto try_compile = [&](const Candidate& c) -> Compiled {
    if (known_to_compile && known_to_compile(c)) return {true, nullptr};
    try {
      return {true, compile_candidate(graph, c)};
    } catch (const Error& e) {
      const std::string line = fmt::format("{}: {} nodes at '{}' refused: {}", backend.name(),
                                           c.nodes.size(), graph.node(c.nodes[0]).name, e.what());
      if (e.kind() != ErrorKind::kUnsupported) {
        if (strict)
          throw Error(e.kind(), fmt::format("{} (a compile error that is not kUnsupported)", line));
        spdlog::warn("{} [{}]; those nodes run on {}", line, error_kind_name(e.kind()),
                     BackendRegistry::global().fallback().name());
      }
      if (log) log->push_back(line);
      return {};
    }
  };
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
      for (NodeId x : match.nodes) group_of[x] = static_cast<int>(placement.size());
      Candidate c{match.nodes, &backend, variant_for(match.nodes), threads};
      Compiled compiled;
      if (groups_are_acyclic(graph, group_of)) compiled = try_compile(c);
      if (!compiled.ok) {
        for (NodeId x : match.nodes) group_of[x] = -1;
        continue;
      }
      placement.push_back(std::move(c));
      kernels.push_back(std::move(compiled.kernel));
      break;
    }
  }
  if (backend.kind() == BackendKind::kGraphLevel) {
    Placement merged;
    std::vector<std::shared_ptr<Kernel>> merged_kernels;
    for (const std::vector<size_t>& unordered : maximal_regions(graph, placement)) {
      const std::vector<size_t> parts = in_step_order(graph, placement, unordered);
      // Parts [begin, end) as one candidate.
      auto run_of = [&](size_t begin, size_t end) {
        Candidate region{{}, &backend, "", threads};
        for (size_t i = begin; i < end; ++i)
          region.nodes.insert(region.nodes.end(), placement[parts[i]].nodes.begin(),
                              placement[parts[i]].nodes.end());
        std::sort(region.nodes.begin(), region.nodes.end());
        region.variant = variant_for(region.nodes);
        return region;
      };
      // The whole union; where the backend refuses it, the longest run of parts from
      // `begin` that it compiles (bisected; a run in step order is convex and keeps the
      // steps acyclic, the union being so), then the next run from there.
      for (size_t begin = 0; begin < parts.size();) {
        Candidate region = placement[parts[begin]];
        std::shared_ptr<Kernel> kernel = kernels[parts[begin]];
        size_t end = begin + 1;
        if (parts.size() - begin > 1) {
          Candidate whole = run_of(begin, parts.size());
          if (Compiled k = try_compile(whole); k.ok) {
            region = std::move(whole);
            kernel = std::move(k.kernel);
            end = parts.size();
          } else {
            for (size_t hi = parts.size() - 1; end < hi;) {
              const size_t mid = (end + hi + 1) / 2;
              Candidate run = run_of(begin, mid);
              if (Compiled k = try_compile(run); k.ok) {
                region = std::move(run);
                kernel = std::move(k.kernel);
                end = mid;
              } else {
                hi = mid - 1;
              }
            }
          }
        }
        merged.push_back(std::move(region));
        merged_kernels.push_back(std::move(kernel));
        begin = end;
      }
    }
    placement = std::move(merged);
    kernels = std::move(merged_kernels);
  }
  if (kernels_out) *kernels_out = std::move(kernels);
  return placement;
}

BackendCoverage backend_coverage(const Graph& graph, const Backend& backend,
                                 const std::vector<std::string>& node_backends) {
  BackendCoverage coverage;
  std::vector<bool> matched(graph.num_nodes(), false);
  for (const Match& m : find_matches(graph, backend))
    for (NodeId n : m.nodes) matched[n] = true;
  coverage.matched = static_cast<size_t>(std::count(matched.begin(), matched.end(), true));
  coverage.placed =
      static_cast<size_t>(std::count(node_backends.begin(), node_backends.end(), backend.name()));
  return coverage;
}

}  // namespace collage
