// collage::tune: candidates -> measured costs -> op-level search -> graph-level search ->
// never-worse comparison against every single-backend plan.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "collage/backend.h"
#include "collage/session.h"
#include "collage/tune.h"
#include "runtime/executor.h"
#include "runtime/interleaved_timing.h"
#include "runtime/partitioner.h"
#include "search/cost_db.h"
#include "search/graph_level_search.h"
#include "search/hardware.h"
#include "search/isolated_measurer.h"
#include "search/measure.h"
#include "search/op_level_search.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// Kinds of cost-DB records that are not a kernel's: whole-plan latencies (see
// Tuner::plan_key) and the executor step overhead.
constexpr const char* kFitness = "plan";
constexpr const char* kSideBySide = "plan-side-by-side";
constexpr const char* kStepOverhead = "step-overhead";

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<Backend*> select_backends(const TuneOptions& options) {
  BackendRegistry& registry = BackendRegistry::global();
  std::vector<Backend*> out = {&registry.get("reference")};
  if (options.backends.empty()) {
    for (Backend* b : registry.all())
      if (b->name() != "reference" && b->available()) out.push_back(b);
  } else {
    for (const std::string& name : options.backends) {
      Backend& b = registry.get(name);
      if (!b.available())
        fail(ErrorKind::kInvalidArgument, "backend '{}' is not available on this machine", name);
      if (std::find(out.begin(), out.end(), &b) == out.end()) out.push_back(&b);
    }
  }
  return out;
}

// Everything the tuner knows about one (node set, backend): its measured cost and, once
// compiled for an end-to-end measurement, its kernel.
struct MeasuredCandidate {
  std::vector<NodeId> nodes;
  Backend* backend;
  double cost_ms;
};

MeasureOptions measure_options(const Graph& model) {
  MeasureOptions o;
  o.evict_bytes = cache_pressure_bytes(model);
  return o;
}

class Tuner {
 public:
  Tuner(const Graph& graph, const TuneOptions& options)
      : graph_(graph),
        options_(options),
        start_(Clock::now()),
        backends_(select_backends(options)),
        hardware_(this_machine(thread_budget())),
        db_(options.cost_db_path.empty() ? CostDb::default_path() : options.cost_db_path),
        measurer_(&db_, hardware_, measure_options(graph)) {
    for (Backend* b : backends_) b->set_threads(thread_budget());
    result_.cost_db_path = db_.path();
    if (options.isolate) {
      if (measure_worker_command().executable.empty()) {
        spdlog::warn(
            "candidate isolation needs the collage CLI's measure-worker; measuring in-process");
      } else {
        worker_ =
            std::make_unique<IsolatedWorker>(measure_worker_command(), options.isolate_timeout_s);
        measurer_.set_isolation(worker_.get());
      }
    }
  }

  TuneResult run() {
    measure_candidates();
    result_.step_overhead_ms = step_overhead_ms();
    std::vector<int> chosen = search_op_level();
    std::vector<Group> tuned = to_groups(chosen);
    if (options_.optimizer == Optimizer::kTwoLevel) tuned = search_graph_level(std::move(tuned));
    compare_and_pick(std::move(tuned));
    result_.seconds = seconds_since(start_);
    return std::move(result_);
  }

 private:
  void report(const std::string& phase, size_t done, size_t total, double eta,
              const std::string& detail = "") {
    if (!options_.progress) return;
    TuneProgress p;
    p.phase = phase;
    p.done = done;
    p.total = total;
    p.cache_hits = result_.cache_hits;
    p.failed = result_.failed;
    p.elapsed_s = seconds_since(start_);
    p.eta_s = eta;
    p.detail = detail;
    options_.progress(p);
  }

  void measure_candidates() {
    std::vector<std::pair<Match, Backend*>> todo;
    for (Backend* b : backends_)
      for (Match& m : find_matches(graph_, *b)) todo.emplace_back(std::move(m), b);
    // One subgraph on every backend in a row: the worker computes its reference outputs
    // (for the correctness check) once and keeps only the last few.
    std::stable_sort(todo.begin(), todo.end(),
                     [](const auto& a, const auto& b) { return a.first.nodes < b.first.nodes; });
    result_.candidates = todo.size();
    double measuring_s = 0;
    size_t measured = 0;
    for (size_t i = 0; i < todo.size(); ++i) {
      auto& [match, backend] = todo[i];
      auto t0 = Clock::now();
      MeasureResult r = measurer_.measure(graph_, match.nodes, *backend);
      if (r.cache_hit) {
        ++result_.cache_hits;
      } else {
        ++measured;
        measuring_s += seconds_since(t0);
      }
      if (!r.record.ok) {
        ++result_.failed;
        result_.failures.push_back(fmt::format("{} on {} nodes from '{}': {}", backend->name(),
                                               match.nodes.size(), graph_.node(match.nodes[0]).name,
                                               r.record.reason));
      }
      candidates_.push_back({match.nodes, backend, r.record.milliseconds});
      // ETA: the mean time of a measurement so far, times what is left (cache hits are free,
      // so this errs on the long side).
      double eta = measured ? measuring_s / measured * (todo.size() - i - 1) : -1;
      report("measuring", i + 1, todo.size(), eta, backend->name());
    }
    result_.measured = measured;
  }

  // Measured once per machine and kept in the cost DB: re-measured on every tune, its noise
  // alone could tip the op-level search between two near-equal covers.
  double step_overhead_ms() {
    const char* what = "executor step overhead";
    RecordKey key{CostDb::make_key(what, kStepOverhead, "", hardware_.fingerprint()), what};
    return find_or_measure(key, kStepOverhead,
                           [] {
                             CostRecord record;
                             record.milliseconds = measure_step_overhead_ms();
                             return record;
                           })
        .milliseconds;
  }

  // A cost-DB record that is not a kernel's: its key and the text stored beside it.
  struct RecordKey {
    std::string key, text;
  };

  // The record under `key`, or `measure()`'s (with the seconds it took), stored first.
  CostRecord find_or_measure(const RecordKey& key, const char* kind,
                             const std::function<CostRecord()>& measure) {
    if (std::optional<CostRecord> hit = db_.find(key.key)) return *hit;
    auto start = Clock::now();
    CostRecord record = measure();
    record.spent_s = seconds_since(start);
    store(key, kind, record);
    return record;
  }

  void store(const RecordKey& key, const char* kind, const CostRecord& record) {
    db_.put(key.key, kind, hardware_.fingerprint(), key.text, record);
  }

  std::vector<int> search_op_level() {
    std::vector<SearchCandidate> search;
    for (const auto& c : candidates_) search.push_back({c.nodes, 0, c.cost_ms});
    OpLevelResult r = op_level_search(graph_, search, result_.step_overhead_ms);
    spdlog::debug("op-level search: {} states, predicted {:.3f} ms", r.states_explored, r.cost_ms);
    return r.chosen;
  }

  std::vector<Group> to_groups(const std::vector<int>& chosen) const {
    std::vector<Group> groups;
    for (int c : chosen)
      groups.push_back(Group{candidates_[c].nodes, candidates_[c].backend, nullptr});
    return groups;
  }

  // The measured cost of a group; groups never proposed as candidates (merged graph-level
  // regions, single-backend plans' leftovers) are measured now, through the cost database.
  double cost_of(const std::vector<NodeId>& nodes, Backend* backend) {
    for (const auto& c : candidates_)
      if (c.backend == backend && c.nodes == nodes) return c.cost_ms;
    double ms = measurer_.measure(graph_, nodes, *backend).record.milliseconds;
    candidates_.push_back({nodes, backend, ms});
    return ms;
  }

  // Sum of the groups' measured costs + one step overhead each (reference groups run one
  // step per node). NaN when a group was never measured alone (a merged region).
  double predict(const std::vector<Group>& groups) {
    double total = 0;
    for (const Group& g : groups) {
      if (g.backend->name() == "reference") {
        for (NodeId n : g.nodes) total += cost_of({n}, g.backend) + result_.step_overhead_ms;
      } else {
        total += cost_of(g.nodes, g.backend) + result_.step_overhead_ms;
      }
    }
    return total;
  }

  // Lone nodes (not in any group) run on reference: make that explicit.
  std::vector<Group> complete(std::vector<Group> groups) const {
    std::vector<bool> covered(graph_.num_nodes(), false);
    for (const Group& g : groups)
      for (NodeId n : g.nodes) covered[n] = true;
    Backend* reference = &BackendRegistry::global().get("reference");
    for (size_t n = 0; n < graph_.num_nodes(); ++n)
      if (!covered[n]) groups.push_back(Group{{static_cast<NodeId>(n)}, reference, nullptr});
    return groups;
  }

  // A compiled kernel per (backend, nodes), shared by every plan measured end to end.
  std::shared_ptr<Kernel> kernel_for(const Group& g) {
    auto key = std::make_pair(g.backend->name(), g.nodes);
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    std::shared_ptr<Kernel> k = g.backend->compile(extract_subgraph(graph_, g.nodes));
    return kernels_[key] = k;
  }

  std::unique_ptr<Executor> executor_for(std::vector<Group> groups) {
    std::vector<Group> compiled;
    for (Group& g : groups) {
      if (g.backend->name() == "reference") continue;  // build_steps runs lone nodes on it
      g.kernel = kernel_for(g);
      compiled.push_back(std::move(g));
    }
    return std::make_unique<Executor>(graph_, build_steps(graph_, compiled));
  }

  // Median latency of each executor, timed side by side (see time_interleaved).
  std::vector<double> time_side_by_side(std::vector<Executor*> executors, int rounds) {
    std::vector<Tensor> inputs = random_inputs(graph_, options_.seed);
    std::vector<std::function<void()>> runs;
    for (Executor* e : executors) {
      e->run(inputs);  // warm-up
      runs.push_back([e, &inputs] { e->run(inputs); });
    }
    result_.plans_timed += executors.size();
    std::vector<double> medians;
    for (std::vector<double>& s : time_interleaved(runs, rounds)) medians.push_back(median_of(s));
    return medians;
  }

  // A plan's measured latency is stored in the cost DB like a kernel's, keyed by the model,
  // the placement and the backends' versions: re-tuning with a warm DB re-times nothing.
  // Two kinds: "plan", timed alone as a genome's fitness, and "plan-side-by-side", timed
  // in the final comparison. Kept apart so that the comparison never changes a fitness the
  // evolutionary search will read again: a warm re-tune then retraces the same search.
  RecordKey plan_key(const std::vector<Group>& groups, const char* kind) const {
    std::string text = placement_text(groups);
    std::string key = CostDb::make_key(text, kind, "", hardware_.fingerprint());
    return {std::move(key), std::move(text)};
  }

  // Every group of a plan runs in this process when the plan is timed end to end: each one
  // (merged graph-level regions included) must first have been measured alone, in the
  // isolated worker, and checked against reference there. Returns why not, or "".
  std::string unsafe_group(const std::vector<Group>& groups) {
    for (const Group& g : groups) {
      if (g.backend->name() == "reference") continue;
      if (!std::isfinite(cost_of(g.nodes, g.backend)))
        return fmt::format("a {}-node {} group failed when measured alone", g.nodes.size(),
                           g.backend->name());
    }
    return "";
  }

  std::vector<Group> search_graph_level(std::vector<Group> op_groups) {
    std::vector<Backend*> graph_level;
    for (Backend* b : backends_)
      if (b->kind() == BackendKind::kGraphLevel) graph_level.push_back(b);
    if (graph_level.empty() || op_groups.empty()) return op_groups;

    // Which op-level groups each graph-level backend could take: all their nodes lie in
    // some region the backend matches.
    std::vector<std::vector<bool>> supports(graph_level.size(),
                                            std::vector<bool>(graph_.num_nodes(), false));
    for (size_t j = 0; j < graph_level.size(); ++j)
      for (const Match& m : find_matches(graph_, *graph_level[j]))
        for (NodeId n : m.nodes) supports[j][n] = true;
    std::vector<std::vector<int>> choices(op_groups.size(), std::vector<int>{0});
    for (size_t g = 0; g < op_groups.size(); ++g)
      for (size_t j = 0; j < graph_level.size(); ++j)
        if (std::all_of(op_groups[g].nodes.begin(), op_groups[g].nodes.end(),
                        [&](NodeId n) { return supports[j][n]; }))
          choices[g].push_back(static_cast<int>(j) + 1);

    auto decode = [&](const Genome& genome) {
      return decode_genome(op_groups, graph_level, genome);
    };
    auto rejected = [](const Error& e) {
      spdlog::debug("genome rejected: {}", e.what());
      CostRecord record;
      record.ok = false;
      record.reason = e.what();
      record.milliseconds = std::numeric_limits<double>::infinity();
      return record;
    };
    double searched_s = 0;  // the search's clock (see below)
    auto fitness = [&](const Genome& genome) -> double {
      std::vector<Group> groups;
      try {
        groups = complete(decode(genome));
      } catch (const Error& e) {
        // A genome that does not even decode (a non-convex region) has no placement to key.
        return rejected(e).milliseconds;
      }
      CostRecord record = find_or_measure(plan_key(groups, kFitness), kFitness, [&] {
        try {
          if (std::string why = unsafe_group(groups); !why.empty())
            fail(ErrorKind::kBackend, "{}", why);
          std::unique_ptr<Executor> e = executor_for(groups);
          CostRecord record;
          record.milliseconds = time_side_by_side({e.get()}, 5)[0];
          return record;
        } catch (const Error& e) {
          return rejected(e);
        }
      });
      // A genome known from the cost DB is charged what timing it took then: a re-tune with
      // the same budget retraces the same search in seconds and gives the same plan (a
      // bigger budget goes on from where the last one stopped).
      searched_s += record.spent_s;
      return record.milliseconds;
    };
    std::vector<Genome> seeds = {Genome(op_groups.size(), 0)};
    for (size_t j = 0; j < graph_level.size(); ++j) {
      Genome all(op_groups.size(), 0);
      for (size_t g = 0; g < op_groups.size(); ++g)
        if (choices[g].size() > 1 &&
            std::find(choices[g].begin(), choices[g].end(), j + 1) != choices[g].end())
          all[g] = static_cast<int>(j) + 1;
      seeds.push_back(all);
    }
    EvolutionOptions eo;
    eo.budget_s = options_.budget_s;
    eo.elapsed_s = [&] { return searched_s; };
    eo.seed = options_.seed;
    EvolutionResult r = evolve(choices, seeds, fitness, eo, [&](const EvolutionResult& progress) {
      report(
          "graph-level search", progress.generations, 0, -1,
          fmt::format("best {:.3f} ms, {} genomes", progress.best_fitness, progress.evaluations));
    });
    result_.generations = r.generations;
    result_.genomes_evaluated = r.evaluations;
    if (r.best.empty() || !std::isfinite(r.best_fitness)) return op_groups;
    return decode(r.best);
  }

  // The placement as text: model hash, then each group's backend@version and nodes, sorted.
  std::string placement_text(const std::vector<Group>& groups) const {
    std::vector<std::string> parts;
    for (const Group& g : groups) {
      std::string part = g.backend->name() + "@" + g.backend->version() + ":";
      for (NodeId n : g.nodes) part += std::to_string(n) + ",";
      parts.push_back(std::move(part));
    }
    std::sort(parts.begin(), parts.end());
    std::string text =
        "plan " + model_hash(graph_) + " threads " + std::to_string(thread_budget()) + "\n";
    for (const std::string& p : parts) text += p + "\n";
    return text;
  }

  // Neighbouring groups given to the same graph-level backend merge into one region.
  std::vector<Group> decode_genome(const std::vector<Group>& op_groups,
                                   const std::vector<Backend*>& graph_level, const Genome& genome) {
    std::vector<int> group_of(graph_.num_nodes(), -1);
    for (size_t g = 0; g < op_groups.size(); ++g)
      for (NodeId n : op_groups[g].nodes) group_of[n] = static_cast<int>(g);
    std::vector<int> parent(op_groups.size());
    std::iota(parent.begin(), parent.end(), 0);
    std::function<int(int)> find = [&](int x) {
      return parent[x] == x ? x : parent[x] = find(parent[x]);
    };
    for (size_t n = 0; n < graph_.num_nodes(); ++n)
      for (ValueId v : graph_.node(static_cast<NodeId>(n)).inputs) {
        if (v == kNoValue || graph_.value(v).producer < 0) continue;
        int a = group_of[n], b = group_of[graph_.value(v).producer];
        if (a < 0 || b < 0 || a == b || genome[a] == 0 || genome[a] != genome[b]) continue;
        parent[find(a)] = find(b);
      }
    std::map<int, Group> merged;
    std::vector<Group> out;
    for (size_t g = 0; g < op_groups.size(); ++g) {
      if (genome[g] == 0) {
        out.push_back(op_groups[g]);
        continue;
      }
      Group& region = merged[find(static_cast<int>(g))];
      region.backend = graph_level[genome[g] - 1];
      region.nodes.insert(region.nodes.end(), op_groups[g].nodes.begin(), op_groups[g].nodes.end());
    }
    for (auto& [root, region] : merged) {
      std::sort(region.nodes.begin(), region.nodes.end());
      if (!is_convex(graph_, region.nodes))
        fail(ErrorKind::kBackend, "region of {} nodes is not convex", region.nodes.size());
      out.push_back(std::move(region));
    }
    return out;
  }

  void compare_and_pick(std::vector<Group> tuned) {
    report("comparing", 0, 1, -1);
    struct Contender {
      std::string name;
      std::vector<Group> groups;
      PlanTiming timing;
      std::unique_ptr<Executor> executor;
      RecordKey side_by_side;  // its latency's cost-DB record
    };
    std::vector<Contender> contenders;
    contenders.push_back({"tuned", complete(std::move(tuned)), {}, nullptr});
    for (Backend* b : backends_) {
      if (b->name() == "reference") continue;  // the oracle, not a contender: far slower
      std::vector<Group> groups = complete(place_on_single_backend(graph_, *b));
      // Timing end to end runs the kernels in this process: one that failed (or crashed,
      // or hung in the worker) when measured alone must not run here.
      if (std::string why = unsafe_group(groups); !why.empty()) {
        spdlog::info("no single-backend plan for {}: {}", b->name(), why);
        continue;
      }
      contenders.push_back({b->name(), std::move(groups), {}, nullptr});
    }
    double best_predicted = std::numeric_limits<double>::infinity();
    for (Contender& c : contenders) {
      c.timing.name = c.name;
      c.timing.predicted_ms = predict(c.groups);
      if (std::isfinite(c.timing.predicted_ms))
        best_predicted = std::min(best_predicted, c.timing.predicted_ms);
    }
    // Timed: every contender not predicted kNotWorthTiming times slower than the best. The
    // tuned plan always is (the never-worse rule needs its time).
    constexpr double kNotWorthTiming = 3;
    // A single-backend plan can be the tuned plan itself (same placement, same cost-DB key):
    // it is timed once, and the tuned plan (first) keeps the win on a tie.
    std::vector<Contender*> timed;
    std::map<std::string, Contender*> first_with_key;
    std::vector<std::pair<Contender*, Contender*>> duplicates;
    for (Contender& c : contenders) {
      c.timing.timed =
          c.name == "tuned" || !(c.timing.predicted_ms > kNotWorthTiming * best_predicted);
      c.timing.measured_ms = std::numeric_limits<double>::quiet_NaN();
      if (!c.timing.timed) continue;
      c.side_by_side = plan_key(c.groups, kSideBySide);
      auto [it, fresh] = first_with_key.emplace(c.side_by_side.key, &c);
      if (fresh)
        timed.push_back(&c);
      else
        duplicates.emplace_back(&c, it->second);
    }
    // With a warm cost DB every contender's latency is known: nothing is compiled or timed
    // but the winner (compiled for its steps).
    bool all_known = true;
    for (Contender* c : timed) {
      std::optional<CostRecord> hit = db_.find(c->side_by_side.key);
      all_known = all_known && hit && hit->ok;
      if (hit && hit->ok) c->timing.measured_ms = hit->milliseconds;
    }
    if (all_known) {
      for (Contender* c : timed) c->timing.from_cost_db = true;
    } else {
      std::vector<Executor*> executors;
      for (Contender* c : timed) {
        c->executor = executor_for(c->groups);
        executors.push_back(c->executor.get());
      }
      std::vector<double> ms = time_side_by_side(executors, 15);
      for (size_t i = 0; i < timed.size(); ++i) {
        timed[i]->timing.measured_ms = ms[i];
        CostRecord record;
        record.milliseconds = ms[i];
        store(timed[i]->side_by_side, kSideBySide, record);
      }
    }
    for (auto [copy, original] : duplicates) {
      copy->timing = original->timing;
      copy->timing.name = copy->name;
    }
    Contender* best = timed.front();
    for (Contender* c : timed)
      if (c->timing.measured_ms < best->timing.measured_ms) best = c;
    if (!best->executor) best->executor = executor_for(best->groups);
    for (Contender& c : contenders) {
      if (c.executor) c.timing.steps = c.executor->steps().size();
      result_.timings.push_back(c.timing);
    }
    result_.winner = best->name;
    make_plan(best->groups, *best->executor, best->timing.predicted_ms, best->timing.measured_ms);
  }

  void make_plan(const std::vector<Group>& groups, const Executor& executor, double predicted,
                 double measured) {
    Plan& plan = result_.plan;
    plan.model_hash = model_hash(graph_);
    plan.hardware = hardware_.fingerprint();
    plan.threads = thread_budget();
    plan.optimizer = options_.optimizer == Optimizer::kTwoLevel ? "two-level" : "op-level";
    if (result_.winner != "tuned") plan.optimizer = "single:" + result_.winner;
    plan.predicted_ms = predicted;
    plan.measured_ms = measured;
    std::map<std::string, BackendShare> shares;
    for (const Step& step : executor.steps()) {
      PlanGroup g;
      g.backend = step.backend;
      for (NodeId n : step.nodes) g.nodes.push_back(graph_.node(n).name);
      Backend* b = &BackendRegistry::global().get(step.backend);
      double c = cost_of(step.nodes, b);
      g.cost_ms = std::isfinite(c) ? c : 0;
      plan.backend_versions[step.backend] = b->version();
      BackendShare& s = shares[step.backend];
      s.backend = step.backend;
      s.nodes += step.nodes.size();
      s.cost_ms += g.cost_ms;
      plan.groups.push_back(std::move(g));
    }
    for (auto& [name, share] : shares) result_.shares.push_back(share);
  }

  const Graph& graph_;
  TuneOptions options_;
  Clock::time_point start_;
  std::vector<Backend*> backends_;
  Hardware hardware_;
  CostDb db_;
  Measurer measurer_;
  std::unique_ptr<IsolatedWorker> worker_;
  std::vector<MeasuredCandidate> candidates_;
  std::map<std::pair<std::string, std::vector<NodeId>>, std::shared_ptr<Kernel>> kernels_;
  TuneResult result_;
};

}  // namespace

TuneResult tune(const Graph& graph, const TuneOptions& options) {
  set_thread_budget(options.threads);
  Tuner tuner(graph, options);
  return tuner.run();
}

}  // namespace collage
