#include "search/graph_level_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "collage/error.h"

namespace collage {

GraphLevelGenes graph_level_genes(const Graph& graph, const Placement& op_groups,
                                  const std::vector<Backend*>& graph_level_backends) {
  GraphLevelGenes genes;
  genes.backends = graph_level_backends;
  std::vector<std::vector<bool>> supports(genes.backends.size(),
                                          std::vector<bool>(graph.num_nodes(), false));
  for (size_t j = 0; j < genes.backends.size(); ++j)
    for (const Match& m : find_matches(graph, *genes.backends[j]))
      for (NodeId n : m.nodes) supports[j][n] = true;
  auto option_value = [&](int backend, const std::string& variant) {
    GeneOption o{backend, variant};
    auto it = std::find(genes.options.begin(), genes.options.end(), o);
    if (it == genes.options.end()) it = genes.options.insert(genes.options.end(), std::move(o));
    return static_cast<int>(it - genes.options.begin()) + 1;
  };
  genes.choices.assign(op_groups.size(), std::vector<int>{0});
  for (size_t g = 0; g < op_groups.size(); ++g)
    for (size_t j = 0; j < genes.backends.size(); ++j) {
      if (!std::all_of(op_groups[g].nodes.begin(), op_groups[g].nodes.end(),
                       [&](NodeId n) { return supports[j][n]; }))
        continue;
      std::vector<std::string> variants =
          genes.backends[j]->region_variants(extract_subgraph(graph, op_groups[g].nodes));
      if (variants.empty()) variants.push_back("");
      for (const std::string& v : variants)
        genes.choices[g].push_back(option_value(static_cast<int>(j), v));
    }
  return genes;
}

std::vector<Genome> runner_up_genomes(std::vector<std::pair<double, Genome>> evaluated,
                                      const Genome& best, double best_fitness, double margin) {
  std::stable_sort(evaluated.begin(), evaluated.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Genome> out;
  for (const auto& [fitness, genome] : evaluated) {
    if (!(fitness <= best_fitness * margin)) break;
    if (genome != best && std::find(out.begin(), out.end(), genome) == out.end())
      out.push_back(genome);
  }
  return out;
}

std::vector<Genome> seed_genomes(const GraphLevelGenes& genes, const Placement& op_groups) {
  const size_t n = genes.choices.size();
  std::vector<Genome> seeds = {Genome(n, 0)};
  auto add = [&](Genome g) {
    if (std::find(seeds.begin(), seeds.end(), g) == seeds.end()) seeds.push_back(std::move(g));
  };
  // The value of gene g for backend j in `variant`, else in j's default, else 0.
  auto value = [&](size_t g, int j, const std::string& variant) {
    int fallback = 0;
    for (int k : genes.choices[g]) {
      if (k == 0 || genes.options[k - 1].backend != j) continue;
      if (genes.options[k - 1].variant == variant) return k;
      if (genes.options[k - 1].variant.empty() || fallback == 0) fallback = k;
    }
    return fallback;
  };
  for (size_t j = 0; j < genes.backends.size(); ++j) {
    const int bj = static_cast<int>(j);
    Genome all(n, 0);
    for (size_t g = 0; g < n; ++g) all[g] = value(g, bj, "");
    add(all);
    for (const GeneOption& o : genes.options) {
      if (o.backend != bj || o.variant.empty()) continue;
      Genome with(n, 0);
      for (size_t g = 0; g < n; ++g) with[g] = value(g, bj, o.variant);
      add(with);
    }
    Genome inherited(n, 0);
    for (size_t g = 0; g < n; ++g)
      inherited[g] = value(g, bj, g < op_groups.size() ? op_groups[g].variant : "");
    add(inherited);
  }
  return seeds;
}

Placement decode_genome(const Graph& graph, const Placement& op_groups,
                        const GraphLevelGenes& genes, const Genome& genome, int threads) {
  std::vector<int> group_of(graph.num_nodes(), -1);
  for (size_t g = 0; g < op_groups.size(); ++g)
    for (NodeId n : op_groups[g].nodes) group_of[n] = static_cast<int>(g);
  auto backend_of = [&](int g) {
    return genome[g] == 0 ? -1 : genes.options[genome[g] - 1].backend;
  };
  std::vector<int> parent(op_groups.size());
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return parent[x] == x ? x : parent[x] = find(parent[x]);
  };
  for (size_t n = 0; n < graph.num_nodes(); ++n)
    for (ValueId v : graph.node(static_cast<NodeId>(n)).inputs) {
      if (v == kNoValue || graph.value(v).producer < 0) continue;
      int a = group_of[n], b = group_of[graph.value(v).producer];
      if (a < 0 || b < 0 || a == b || genome[a] == 0 || backend_of(a) != backend_of(b)) continue;
      parent[find(a)] = find(b);
    }
  std::map<int, Candidate> merged;
  std::map<int, std::vector<int>> members;
  Placement out;
  for (size_t g = 0; g < op_groups.size(); ++g) {
    if (genome[g] == 0) {
      out.push_back(op_groups[g]);
      continue;
    }
    const int root = find(static_cast<int>(g));
    Candidate& region = merged[root];
    region.backend = genes.backends[backend_of(static_cast<int>(g))];
    region.threads = threads;
    region.nodes.insert(region.nodes.end(), op_groups[g].nodes.begin(), op_groups[g].nodes.end());
    members[root].push_back(static_cast<int>(g));
  }
  for (auto& [root, region] : merged) {
    std::sort(region.nodes.begin(), region.nodes.end());
    if (!is_convex(graph, region.nodes))
      fail(ErrorKind::kBackend, "region of {} nodes is not convex", region.nodes.size());
    const std::vector<int>& parts = members[root];
    if (parts.size() == 1) {
      region.variant = genes.options[genome[parts[0]] - 1].variant;  // the group's own
    } else {
      std::vector<VariantPart> composed;
      for (int g : parts) {
        VariantPart p{genes.options[genome[g] - 1].variant, {}};
        for (NodeId n : op_groups[g].nodes)
          p.nodes.push_back(
              static_cast<int>(std::lower_bound(region.nodes.begin(), region.nodes.end(), n) -
                               region.nodes.begin()));
        composed.push_back(std::move(p));
      }
      region.variant = compose_variant(std::move(composed));
    }
    out.push_back(std::move(region));
  }
  return out;
}

EvolutionResult evolve(const std::vector<std::vector<int>>& choices,
                       const std::vector<Genome>& seeds,
                       const std::function<double(const Genome&)>& fitness,
                       const EvolutionOptions& options,
                       const std::function<void(const EvolutionResult&)>& on_generation) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed_s = [&] {
    return options.elapsed_s ? options.elapsed_s()
                             : std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::mt19937_64 rng(options.seed);
  const size_t n = choices.size();
  std::map<Genome, double> cache;
  EvolutionResult result;
  result.best_fitness = std::numeric_limits<double>::infinity();

  auto evaluate = [&](const Genome& g) {
    auto it = cache.find(g);
    if (it != cache.end()) return it->second;
    double f = fitness(g);
    cache[g] = f;
    ++result.evaluations;
    if (f < result.best_fitness) {
      result.best_fitness = f;
      result.best = g;
    }
    return f;
  };
  auto random_gene = [&](size_t i) {
    return choices[i][std::uniform_int_distribution<size_t>(0, choices[i].size() - 1)(rng)];
  };

  std::vector<Genome> population = seeds;
  if (population.empty()) population.push_back(Genome(n, 0));
  for (Genome& g : population) g.resize(n, 0);
  while (static_cast<int>(population.size()) < options.population) {
    Genome g(n);
    for (size_t i = 0; i < n; ++i) g[i] = random_gene(i);
    population.push_back(std::move(g));
  }
  // Genes with a single choice never change: nothing to search.
  bool searchable =
      std::any_of(choices.begin(), choices.end(), [](const auto& c) { return c.size() > 1; });
  std::vector<double> scores;
  for (const Genome& g : population) {
    scores.push_back(evaluate(g));
    if (elapsed_s() > options.budget_s) break;
  }
  if (!searchable) return result;

  double best_seen = result.best_fitness;
  int stale = 0;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto pick = [&] {
    size_t best = std::uniform_int_distribution<size_t>(0, scores.size() - 1)(rng);
    for (int t = 1; t < options.tournament; ++t) {
      size_t c = std::uniform_int_distribution<size_t>(0, scores.size() - 1)(rng);
      if (scores[c] < scores[best]) best = c;
    }
    return population[best];
  };
  while (result.generations < static_cast<size_t>(options.max_generations) &&
         elapsed_s() < options.budget_s) {
    std::vector<Genome> next = {result.best};  // elitism: the best survives unchanged
    std::vector<double> next_scores = {result.best_fitness};
    while (static_cast<int>(next.size()) < options.population && elapsed_s() < options.budget_s) {
      Genome a = pick(), b = pick();
      if (n > 1 && unit(rng) < options.crossover_probability) {
        size_t p = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
        size_t q = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
        if (p > q) std::swap(p, q);
        for (size_t i = p; i <= q; ++i) std::swap(a[i], b[i]);
      }
      if (unit(rng) < options.mutation_probability) {
        bool changed = false;
        for (size_t i = 0; i < n; ++i)
          if (unit(rng) < options.gene_mutation_probability) {
            a[i] = random_gene(i);
            changed = true;
          }
        if (!changed) {
          size_t i = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
          a[i] = random_gene(i);
        }
      }
      next_scores.push_back(evaluate(a));
      next.push_back(std::move(a));
    }
    population = std::move(next);
    scores = std::move(next_scores);
    ++result.generations;
    if (on_generation) on_generation(result);
    // Converged: relative improvement under 0.5 % for `patience` generations.
    if (result.best_fitness < best_seen * 0.995) {
      best_seen = result.best_fitness;
      stale = 0;
    } else if (++stale >= options.patience) {
      break;
    }
  }
  return result;
}

}  // namespace collage
