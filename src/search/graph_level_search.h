// The graph-level search: an evolutionary search over one gene per op-level group (which
// graph-level backend, if any, takes the group). The fitness is a measured end-to-end
// latency, so the search sees what the additive cost model cannot (layout conversions saved
// by a larger region, cache effects). Better than the original: seeded with the op-level
// answer, several graph-level backends, a genome cache, a wall-clock budget, and an early
// stop when the best genome stops improving.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/candidate.h"

namespace collage {

using Genome = std::vector<int>;

// The genes of a placement: one per op-level group, the value k > 0 giving the group to
// graph-level backend options[k - 1].backend, built as its variant options[k - 1].variant
// (one of Backend::variants of the group), 0 keeping the op-level choice.
struct GeneOption {
  int backend = 0;  // index into GraphLevelGenes::backends
  std::string variant;
  bool operator==(const GeneOption&) const = default;
};
struct GraphLevelGenes {
  std::vector<Backend*> backends;         // the graph-level backends
  std::vector<GeneOption> options;        // what a gene value k > 0 stands for
  std::vector<std::vector<int>> choices;  // per group: the values its gene may take, 0 first
};

// Which graph-level backend can take which op-level group (all its nodes lie in some region
// the backend matches), in which of the variants the backend offers for the group.
GraphLevelGenes graph_level_genes(const Graph& graph, const Placement& op_groups,
                                  const std::vector<Backend*>& graph_level_backends);

// The seeds: the op-level answer (all 0), and per backend "every group it can take", once
// in its default variant, once per other variant (given to every group offering it), and
// once with each group in the variant of the same name its op-level choice was built with
// (an op-level "onednn/winograd" conv becomes an "onednn-graph/winograd" part of a region).
std::vector<Genome> seed_genomes(const GraphLevelGenes& genes, const Placement& op_groups);

// The placement a genome stands for: neighbouring groups given to the same graph-level
// backend merge into one region (on `threads` threads), whatever variants they were given;
// the region's variant is composed from theirs (compose_variant). Throws Error(kBackend)
// when a merged region is not convex (it could not run as one kernel).
Placement decode_genome(const Graph& graph, const Placement& op_groups,
                        const GraphLevelGenes& genes, const Genome& genome, int threads);

// The genomes that came close: those of `evaluated` (fitness, genome) whose fitness is at
// most `margin` times `best_fitness`, fastest first, each once, `best` left out. Fitness is
// measured, so these may be as fast as the best (the tuner times them beside it).
std::vector<Genome> runner_up_genomes(std::vector<std::pair<double, Genome>> evaluated,
                                      const Genome& best, double best_fitness, double margin);

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
