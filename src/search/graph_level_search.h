// The graph-level search: an evolutionary search over one gene per op-level group (which
// graph-level backend, if any, takes the group). The fitness is a measured end-to-end
// latency, so the search sees what the additive cost model cannot (layout conversions saved
// by a larger region, cache effects). Better than the original: seeded with the op-level
// answer, several graph-level backends, a genome cache, a wall-clock budget, and an early
// stop when the best genome stops improving.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/candidate.h"

namespace collage {

using Genome = std::vector<int>;

// The genes of a placement: one per op-level group, the value k > 0 giving the group to
// graph-level backend k - 1, 0 keeping the op-level choice.
struct GraphLevelGenes {
  std::vector<Backend*> backends;         // the graph-level backends
  std::vector<std::vector<int>> choices;  // per group: the values its gene may take, 0 first
};

// Which graph-level backend can take which op-level group: all its nodes lie in some region
// the backend matches.
GraphLevelGenes graph_level_genes(const Graph& graph, const Placement& op_groups,
                                  const std::vector<Backend*>& graph_level_backends);

// The seeds: the op-level answer (all 0), and per backend "every group it can take".
std::vector<Genome> seed_genomes(const GraphLevelGenes& genes);

// The placement a genome stands for: neighbouring groups given to the same graph-level
// backend merge into one region (on `threads` threads). Throws Error(kBackend) when a merged
// region is not convex (it could not run as one kernel).
Placement decode_genome(const Graph& graph, const Placement& op_groups,
                        const GraphLevelGenes& genes, const Genome& genome, int threads);

struct EvolutionOptions {
  int population = 16;
  int tournament = 3;
  double crossover_probability = 0.5;  // two-point crossover
  double mutation_probability = 0.2;   // per child
  double gene_mutation_probability = 0.05;
  double budget_s = 60;
  // The search's time so far, against budget_s; empty = wall clock since evolve() began.
  std::function<double()> elapsed_s;
  int patience = 4;  // generations without improvement before stopping
  int max_generations = 1000;
  uint64_t seed = 1;
};

struct EvolutionResult {
  Genome best;
  double best_fitness = 0;  // lower is better
  size_t generations = 0;
  size_t evaluations = 0;  // distinct genomes measured (the cache absorbs repeats)
};

// `choices[g]` lists the values gene g may take (its first entry is the default: "keep the
// op-level choice"). `seeds` enter the first population as they are. `fitness` returns a
// latency (lower is better; +inf for an invalid genome). `on_generation` reports progress.
EvolutionResult evolve(const std::vector<std::vector<int>>& choices,
                       const std::vector<Genome>& seeds,
                       const std::function<double(const Genome&)>& fitness,
                       const EvolutionOptions& options,
                       const std::function<void(const EvolutionResult&)>& on_generation = {});

}  // namespace collage
