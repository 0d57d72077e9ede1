// collage::tune: candidates -> measured costs -> op-level search -> graph-level search ->
// never-worse comparison against every single-backend plan. This file only orchestrates:
// candidates.h proposes, measured_costs.h measures, op_level_search.h and
// graph_level_search.h search, never_worse.h compares, plan_records.h keys whole-plan
// latencies in the cost DB, and the runtime's partitioner turns placements into steps.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "collage/backend.h"
#include "collage/session.h"
#include "collage/tune.h"
#include "plan/hardware.h"
#include "runtime/executor.h"
#include "runtime/partitioner.h"
#include "runtime/threads.h"
#include "search/calm_wait.h"
#include "search/candidates.h"
#include "search/cost_db.h"
#include "search/graph_level_search.h"
#include "search/measured_costs.h"
#include "search/never_worse.h"
#include "search/op_level_search.h"
#include "search/plan_records.h"
#include "search/schedule.h"
#include "util/process_memory.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

QueueOptions queue_options(const TuneOptions& options) {
  QueueOptions q;
  q.location = options.cost_db_path.empty() ? CostDb::default_path() : options.cost_db_path;
  q.distributed = options.distributed;
  q.claim_timeout_s = options.claim_timeout_s;
  q.lease_s = options.lease_s;
  return q;
}

class Tuner {
 public:
  Tuner(const Graph& graph, const TuneOptions& options)
      : graph_(graph),
        options_(options),
        start_(Clock::now()),
        threads_(resolve_threads(options.threads)),
        machine_(this_machine(threads_)),
        backends_(select_backends(options.backends)),
        db_(options.cost_db_path.empty() ? CostDb::default_path() : options.cost_db_path),
        costs_(graph, db_, machine_, threads_, options.isolate, options.isolate_timeout_s,
               queue_options(options)) {
    result_.cost_db_path = db_.path();
    costs_.before_kept_sample([this](const char* phase) {
      if (calm_) calm_->wait_until_calm(phase);
    });
  }

  TuneResult run() {
    measure_candidates();
    result_.step_overhead_ms = costs_.step_overhead_ms();
    Placement tuned = search_op_level();
    if (options_.optimizer == Optimizer::kTwoLevel) tuned = search_graph_level(std::move(tuned));
    compare_and_pick(std::move(tuned));
    if (calm_) result_.slow_windows = calm_->waits();
    // Over every phase: the graph-level search measures the large regions a chaotic model's
    // check passes within its sensitivity.
    result_.within_sensitivity = costs_.stats().within_sensitivity;
    result_.sensitivity_example = costs_.stats().sensitivity_example;
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
    p.cache_hits = costs_.stats().cache_hits;
    p.failed = costs_.stats().failed;
    p.elapsed_s = seconds_since(start_);
    p.eta_s = eta;
    p.detail = detail;
    options_.progress(p);
  }

  void measure_candidates() {
    candidates_ = enumerate_candidates(graph_, backends_, threads_);
    costs_.measure_all(candidates_, [&](size_t done, size_t total, double eta, const Candidate& c) {
      report("measuring", done, total, eta, c.backend->name());
    });
    const MeasureStats& stats = costs_.stats();
    result_.candidates = stats.candidates;
    result_.cache_hits = stats.cache_hits;
    result_.measured = stats.measured;
    result_.measured_elsewhere = stats.measured_elsewhere;
    result_.failed = stats.failed;
    result_.failures = stats.failures;
  }

  Placement search_op_level() {
    const Clock::time_point t0 = Clock::now();
    OpLevelResult r = op_level_search(graph_, candidates_, costs_);
    spdlog::debug("op-level search: {} states in {:.2f} s, predicted {:.3f} ms", r.states_explored,
                  seconds_since(t0), r.cost_ms);
    if (!r.exact)
      spdlog::warn(
          "op-level search: stopped at its bound of states kept ({} explored; many parallel "
          "branches) and completed the placement greedily; the graph-level search and the "
          "side-by-side timing still apply",
          r.states_explored);
    Placement chosen;
    for (int c : r.chosen) chosen.push_back(candidates_[c]);
    return chosen;
  }

  // A compiled kernel per candidate, shared by every plan measured end to end.
  using KernelKey = std::tuple<const Backend*, std::string, int, std::vector<NodeId>>;
  std::shared_ptr<Kernel> kernel_for(const Graph& graph, const Candidate& c) {
    KernelKey key{c.backend, c.variant, c.threads, c.nodes};
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    release_idle_kernels_past_half_memory();
    return kernels_[key] = compile_candidate(graph, c);
  }

  // Compiled kernels hold their packed weights: VGG-16's graph-level search compiled its
  // 411 MB classifier layer into a kernel for each region it timed, and the tune was killed
  // for memory at 22.5 GB on a 24 GB machine. Past half the machine's memory, the kernels no
  // live plan holds are dropped (compiled again if a later plan needs one).
  void release_idle_kernels_past_half_memory() {
    const size_t machine = physical_memory_bytes();
    if (machine == 0 || resident_bytes() < machine / 2) return;
    for (auto it = kernels_.begin(); it != kernels_.end();)
      it = it->second.use_count() == 1 ? kernels_.erase(it) : std::next(it);
  }

  std::unique_ptr<Executor> executor_for(const Placement& placement,
                                         const Schedule* schedule = nullptr) {
    return std::make_unique<Executor>(
        graph_,
        build_steps(graph_, placement, schedule,
                    [this](const Graph& g, const Candidate& c) { return kernel_for(g, c); }));
  }

  // The schedule of a complete placement (sequential on one thread).
  ScheduledPlan schedule_of(const Placement& placement) {
    return choose_schedule(graph_, placement, costs_, threads_);
  }

  // Every group of a plan runs in this process when the plan is timed end to end: each one
  // (merged graph-level regions included) must first have been measured alone, in the
  // isolated worker, and checked against reference there. Returns why not, or "".
  std::string unsafe_group(const Placement& placement) {
    for (const Candidate& c : placement) {
      if (BackendRegistry::global().is_fallback(*c.backend)) continue;
      if (!std::isfinite(costs_.cost_ms(c)))
        return fmt::format("a {}-node {} group failed when measured alone", c.nodes.size(),
                           c.label());
    }
    return "";
  }

  RecordKey fitness_key(const ScheduledPlan& scheduled) {
    return plan_record_key(graph_, scheduled.placement, scheduled.text(), kPlanFitnessRecord,
                           machine_);
  }

  // A placement's latency with its schedule, timed alone (a genome's fitness), through the
  // cost DB. Its cost to the search's budget is everything this genome made the tuner do:
  // scheduling it measures each of its groups the cost DB does not hold yet (a new merged
  // region, compiled, checked against reference and timed alone in the worker), which for
  // DeepLabV3-ResNet-50 (a 170 ms model) was 150 of the 200 s its search took against a
  // 60 s budget when only the plan's own timing was counted (2026-12-07).
  CostRecord fitness_of(const Placement& placement) {
    const Clock::time_point start = Clock::now();
    ScheduledPlan scheduled;
    try {
      scheduled = schedule_of(placement);
    } catch (const Error& e) {
      return CostRecord::failure(e.what());
    }
    const RecordKey key = fitness_key(scheduled);
    const double scheduling_s = seconds_since(start);
    return find_or_measure(
        db_, key, kPlanFitnessRecord, machine_,
        [&] {
          try {
            if (std::string why = unsafe_group(scheduled.placement); !why.empty())
              fail(ErrorKind::kBackend, "{}", why);
            std::unique_ptr<Executor> e = executor_for(scheduled.placement, &scheduled.schedule);
            std::vector<Tensor> inputs = random_inputs(graph_, options_.seed);
            ++result_.plans_timed;
            CostRecord record;
            record.milliseconds = time_side_by_side({[&] { e->run(inputs); }}, 5).median_ms[0];
            return record;
          } catch (const Error& e) {
            spdlog::debug("genome rejected: {}", e.what());
            return CostRecord::failure(e.what());
          }
        },
        scheduling_s);
  }

  Placement search_graph_level(Placement op_groups) {
    std::vector<Backend*> graph_level;
    for (Backend* b : backends_)
      if (b->kind() == BackendKind::kGraphLevel) graph_level.push_back(b);
    if (graph_level.empty() || op_groups.empty()) return op_groups;
    GraphLevelGenes genes = graph_level_genes(graph_, op_groups, graph_level);
    auto decode = [&](const Genome& genome) {
      return decode_genome(graph_, op_groups, genes, genome, threads_);
    };
    double searched_s = 0;                             // the search's clock (see below)
    std::vector<std::pair<double, Genome>> evaluated;  // finite fitness, in evaluation order
    auto fitness = [&](const Genome& genome) -> double {
      Placement placement;
      try {
        placement = complete_placement(graph_, decode(genome), threads_);
      } catch (const Error& e) {
        // A genome that does not even decode (a non-convex region) has no placement to key.
        spdlog::debug("genome rejected: {}", e.what());
        return std::numeric_limits<double>::infinity();
      }
      CostRecord record = fitness_of(placement);
      // A genome known from the cost DB is charged what timing it took then: a re-tune with
      // the same budget retraces the same search in seconds and gives the same plan (a
      // bigger budget goes on from where the last one stopped).
      searched_s += record.spent_s;
      if (std::isfinite(record.milliseconds)) evaluated.emplace_back(record.milliseconds, genome);
      return record.milliseconds;
    };
    EvolutionOptions eo;
    const Clock::time_point search_start = Clock::now();
    eo.budget_s = options_.budget_s;
    eo.elapsed_s = [&] { return searched_s; };
    eo.seed = options_.seed;
    EvolutionResult r =
        evolve(genes.choices, seed_genomes(genes, op_groups), fitness, eo,
               [&](const EvolutionResult& progress) {
                 // The search's clock against its budget: what stops it.
                 report("graph-level search", progress.generations, 0, -1,
                        fmt::format("best {:.3f} ms, {} genomes, {:.0f} of {:.0f} s",
                                    progress.best_fitness, progress.evaluations, searched_s,
                                    options_.budget_s));
               });
    result_.generations = r.generations;
    result_.genomes_evaluated = r.evaluations;
    result_.graph_search_s = seconds_since(search_start);
    if (r.best.empty() || !std::isfinite(r.best_fitness)) return op_groups;
    Placement best = decode(r.best);
    runners_up_ = runners_up(evaluated, r, decode, best);
    return best;
  }

  // A runner-up of the graph-level search: its complete placement and the schedule chosen for
  // it (once: it names the plan's cost-DB key and becomes the contender).
  struct RunnerUp {
    Placement placement;
    ScheduledPlan scheduled;
  };

  // The runner-ups of the search (runner_up_genomes) as complete placements that are plans
  // of their own (genomes that decode to the same plan, by its cost-DB key, are one), at
  // most kRunnersUp: the final comparison times them beside the best. A fitness is the
  // median of 5 runs, and the best of ~50 such medians is biased low (the winner's curse):
  // GoogLeNet's winner had 9.18 ms there and 10.41 side by side, and ran 8 % slower alone
  // than the plan an earlier tune had kept.
  template <typename Decode>
  std::vector<RunnerUp> runners_up(const std::vector<std::pair<double, Genome>>& evaluated,
                                   const EvolutionResult& r, const Decode& decode,
                                   const Placement& best) {
    constexpr size_t kRunnersUp = 2;
    constexpr double kRunnerUpMargin = 1.10;
    auto plan_key = [&](const ScheduledPlan& scheduled) {
      return plan_record_key(graph_, scheduled.placement, scheduled.text(), kPlanSideBySideRecord,
                             machine_)
          .key;
    };
    std::set<std::string> seen = {
        plan_key(schedule_of(complete_placement(graph_, best, threads_)))};
    std::vector<RunnerUp> out;
    for (const Genome& genome :
         runner_up_genomes(evaluated, r.best, r.best_fitness, kRunnerUpMargin)) {
      if (out.size() == kRunnersUp) break;
      RunnerUp runner{complete_placement(graph_, decode(genome), threads_), {}};
      runner.scheduled = schedule_of(runner.placement);
      if (seen.insert(plan_key(runner.scheduled)).second) out.push_back(std::move(runner));
    }
    return out;
  }

  // The slow-window guard of the kept timings (search/calm_wait.h): its probe is the chosen
  // plan (`chosen` compiles it on the first reading: a warm re-tune never reads), run a few
  // times, or TuneOptions::speed_probe; its calm time to begin with is the plan's fitness
  // where this tune timed it (a record of an earlier tune may be of another day's speed).
  void start_calm_wait(std::function<Executor&()> chosen, const ScheduledPlan& scheduled) {
    CalmWait::Probe probe = options_.speed_probe;
    if (!probe) {
      // Timed as its fitness was (a warm-up, then the median of a few runs), fewer runs.
      probe = [this, chosen = std::move(chosen)] {
        Executor& plan = chosen();
        if (probe_inputs_.empty()) probe_inputs_ = random_inputs(graph_, options_.seed);
        return time_side_by_side({[&] { plan.run(probe_inputs_); }}, 3).median_ms[0];
      };
    }
    CalmWaitOptions calm;
    calm.bound_s = options_.calm_wait_s;
    calm_ = std::make_unique<CalmWait>(std::move(probe), calm);
    if (std::optional<CostRecord> fitness = db_.find(fitness_key(scheduled).key);
        fitness && fitness->ok && fitness->measured_by == CostDb::owner())
      calm_->seed_calm_ms(fitness->milliseconds);
    calm_->on_wait([this](const SlowWindowWait& w) {
      report("waiting: slow machine", 0, 0, -1,
             fmt::format("the plan runs {:.2f}x its calm time before {}; waited {:.1f} s",
                         w.slowdown_after, w.phase, w.waited_s));
    });
  }

  static bool is_tuned(const std::string& contender) { return contender.rfind("tuned", 0) == 0; }

  // Measures each candidate of the chosen placement once more (MeasuredCosts::
  // confirmed_cost_ms), with progress: a cold tune of BERT-base confirms ~75 kernels.
  void confirm_costs(const Placement& placement) {
    for (size_t i = 0; i < placement.size(); ++i) {
      report("confirming", i, placement.size(), -1, placement[i].backend->name());
      confirmed_.cost_ms(placement[i]);
    }
  }

  // A sequential placement's prediction from its kernels' confirmed costs and its copies.
  double confirmed_prediction_ms(const Placement& placement) {
    return predict_sequential_ms(confirmed_, placement) +
           predict_copies_ms(graph_, placement, confirmed_);
  }

  void recheck_costs(const Placement& placement, double plan_ms) {
    for (size_t i = 0; i < placement.size(); ++i) {
      report("rechecking", i, placement.size(), -1, placement[i].backend->name());
      costs_.recheck_cost_ms(placement[i], plan_ms);
    }
  }

  // The never-worse rule: the tuned plan is timed side by side with every single-backend plan
  // (each backend's maximal placement, what a user of that library alone gets) and the fastest
  // is written.
  void compare_and_pick(Placement tuned) {
    struct Contender {
      std::string name;
      Placement placement;
      PlanTiming timing;
      std::unique_ptr<Executor> executor;
      RecordKey side_by_side;  // its latency's cost-DB record
      Schedule schedule;       // empty: one step after another
      std::string schedule_text;
      double predicted_ms = std::numeric_limits<double>::quiet_NaN();  // NaN: additive
      bool runner_up = false;  // a runner-up of the graph-level search (runners_up)
    };
    std::vector<Contender> contenders;
    Placement tuned_placement = complete_placement(graph_, std::move(tuned), threads_);
    ScheduledPlan scheduled = schedule_of(tuned_placement);
    result_.concurrent_stages = scheduled.concurrent_stages;
    if (scheduled.concurrent()) {
      // The concurrent schedule competes with the same placement run one step at a time.
      contenders.push_back({"tuned",
                            scheduled.placement,
                            {},
                            {},
                            {},
                            scheduled.schedule,
                            scheduled.text(),
                            scheduled.predicted_ms});
      contenders.push_back({"tuned-sequential",
                            std::move(tuned_placement),
                            {},
                            {},
                            {},
                            {},
                            "",
                            std::numeric_limits<double>::quiet_NaN()});
    } else {
      contenders.push_back({"tuned",
                            std::move(tuned_placement),
                            {},
                            {},
                            {},
                            {},
                            "",
                            std::numeric_limits<double>::quiet_NaN()});
    }
    for (size_t i = 0; i < runners_up_.size(); ++i) {
      ScheduledPlan& runner = runners_up_[i].scheduled;
      const bool concurrent = runner.concurrent();
      Contender c{fmt::format("tuned#{}", i + 2),
                  concurrent ? std::move(runner.placement) : std::move(runners_up_[i].placement),
                  {},
                  {},
                  {},
                  concurrent ? runner.schedule : Schedule{},
                  concurrent ? runner.text() : "",
                  concurrent ? runner.predicted_ms : std::numeric_limits<double>::quiet_NaN()};
      c.runner_up = true;
      contenders.push_back(std::move(c));
    }
    std::vector<PlanTiming> unrunnable;  // single-backend plans that cannot run: shown why
    for (Backend* b : backends_) {
      // The fallback is the oracle, not a contender: far slower.
      if (BackendRegistry::global().is_fallback(*b)) continue;
      // Candidates measured (in this tune or an earlier one) with a finite cost are known to
      // compile; the rest are compiled to find out. (Those kernels are not kept: most of
      // these plans are never timed, and nine whole-model copies of a big model's weights
      // would outweigh a compile saved.)
      Placement placement = complete_placement(
          graph_,
          place_on_single_backend(graph_, *b, threads_, nullptr, nullptr, false, "",
                                  [this](const Candidate& c) {
                                    const std::optional<double> ms = costs_.known_cost_ms(c);
                                    return ms && std::isfinite(*ms);
                                  }),
          threads_);
      // Timing end to end runs the kernels in this process: one that failed (or crashed,
      // or hung in the worker) when measured alone must not run here.
      if (std::string why = unsafe_group(placement); !why.empty()) {
        spdlog::info("no single-backend plan for {}: {}", b->name(), why);
        PlanTiming skipped;
        skipped.name = b->name();
        skipped.predicted_ms = skipped.measured_ms = std::numeric_limits<double>::quiet_NaN();
        skipped.timed = false;
        skipped.not_timed_reason = why;
        unrunnable.push_back(std::move(skipped));
        continue;
      }
      contenders.push_back({b->name(),
                            std::move(placement),
                            {},
                            {},
                            {},
                            {},
                            "",
                            std::numeric_limits<double>::quiet_NaN()});
      // A graph-level backend's plan in each of its region variants too ("onednn-graph/
      // blocked": every region built so), what a user of that runtime who picks that build
      // gets. The search reaches these placements from its seeds but times each once, and
      // one measurement cannot tell the 3-5 % between them on this VM: MobileNetV2's tune
      // of 2026-12-07 measured its all-blocked region fifth of its genomes, 1.809 ms
      // against 1.701, and wrote a plan that region then beat by 4 % side by side.
      if (b->kind() != BackendKind::kGraphLevel) continue;
      for (const std::string& variant : b->region_variants(graph_)) {
        if (variant.empty()) continue;
        Placement in_variant = complete_placement(
            graph_, place_on_single_backend(graph_, *b, threads_, nullptr, nullptr, false, variant),
            threads_);
        const bool uses_variant =
            std::any_of(in_variant.begin(), in_variant.end(),
                        [&](const Candidate& c) { return c.variant == variant; });
        if (!uses_variant || !unsafe_group(in_variant).empty()) continue;
        contenders.push_back({b->name() + "/" + variant,
                              std::move(in_variant),
                              {},
                              {},
                              {},
                              {},
                              "",
                              std::numeric_limits<double>::quiet_NaN()});
      }
    }
    if (options_.calm_wait_s > 0)
      start_calm_wait(
          [this, chosen = &contenders.front()]() -> Executor& {  // no push_back from here on
            if (!chosen->executor)
              chosen->executor = executor_for(
                  chosen->placement, chosen->schedule.empty() ? nullptr : &chosen->schedule);
            return *chosen->executor;
          },
          scheduled);
    confirm_costs(contenders.front().placement);
    report("comparing", 0, 1, -1);
    std::vector<double> predicted;
    std::vector<bool> must;
    for (Contender& c : contenders) {
      c.timing.name = c.name;
      // The search chose the tuned placement's candidates by their costs: its prediction
      // takes their confirmed costs (measured_costs.h says why); a runner-up's once it wins.
      CostModel& model =
          is_tuned(c.name) && !c.runner_up ? static_cast<CostModel&>(confirmed_) : costs_;
      c.timing.predicted_ms =
          (std::isnan(c.predicted_ms) ? predict_sequential_ms(model, c.placement)
                                      : c.predicted_ms) +
          predict_copies_ms(graph_, c.placement, model);
      predicted.push_back(c.timing.predicted_ms);
      c.side_by_side =
          plan_record_key(graph_, c.placement, c.schedule_text, kPlanSideBySideRecord, machine_);
      // The never-worse rule needs the tuned plan's time (in both schedules). A plan timed
      // by an earlier tune costs nothing to compare: kept in, whatever its prediction, so a
      // warm re-tune compares what the cold one did. (Predictions are of two cost models,
      // confirmed costs for the tuned plan and first samples for the rest: after a recheck
      // lowered the tuned plan's, a re-tune left out the single-backend plan the cold tune
      // had written, and wrote another; seen in Tune.APredictionItsPlansTimeContradicts...)
      const std::optional<CostRecord> timed_before = db_.find(c.side_by_side.key);
      must.push_back(is_tuned(c.name) || (timed_before && timed_before->ok));
    }
    std::vector<bool> worth = worth_timing(predicted, must);
    // A single-backend plan can be the tuned plan itself (same placement, same cost-DB key):
    // it is timed once, and the tuned plan (first) keeps the win on a tie.
    std::vector<Contender*> timed;
    std::map<std::string, Contender*> first_with_key;
    std::vector<std::pair<Contender*, Contender*>> duplicates;
    for (size_t i = 0; i < contenders.size(); ++i) {
      Contender& c = contenders[i];
      c.timing.timed = worth[i];
      if (!worth[i]) c.timing.not_timed_reason = "predicted over 3x the best";
      c.timing.measured_ms = std::numeric_limits<double>::quiet_NaN();
      if (!c.timing.timed) continue;
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
      std::vector<Tensor> inputs = random_inputs(graph_, options_.seed);
      std::vector<std::function<void()>> runs;
      for (Contender* c : timed) {
        if (!c->executor)  // the calm wait's probe may have compiled the tuned plan's
          c->executor = executor_for(c->placement, c->schedule.empty() ? nullptr : &c->schedule);
        runs.push_back([e = c->executor.get(), &inputs] { e->run(inputs); });
      }
      result_.plans_timed += timed.size();
      if (calm_) calm_->wait_until_calm("comparing");
      SideBySide times = time_side_by_side(runs, 15);
      for (size_t i = 0; i < timed.size(); ++i) {
        timed[i]->timing.measured_ms = times.median_ms[i];
        timed[i]->timing.rounds = static_cast<int>(times.samples[i].size());
        CostRecord record;
        record.milliseconds = times.median_ms[i];
        db_.put(timed[i]->side_by_side.key, kPlanSideBySideRecord, machine_.fingerprint(),
                timed[i]->side_by_side.text, record);
      }
    }
    for (auto [copy, original] : duplicates) {
      copy->timing = original->timing;
      copy->timing.name = copy->name;
    }
    // The fastest, or a plan of fewer kernels within the never-worse rule's margin of it and
    // no slower than any single-backend plan.
    std::vector<double> medians;
    std::vector<size_t> steps;
    std::vector<bool> single_backend;
    for (Contender* c : timed) {
      medians.push_back(c->timing.measured_ms);
      steps.push_back(c->placement.size());
      single_backend.push_back(!is_tuned(c->name));
    }
    Contender* best = timed[side_by_side_winner(medians, steps, single_backend)];
    if ((!is_tuned(best->name) || best->runner_up) && std::isnan(best->predicted_ms)) {
      // The written plan's prediction is always made of confirmed costs.
      confirm_costs(best->placement);
      best->timing.predicted_ms = confirmed_prediction_ms(best->placement);
    }
    // A prediction its own plan's time contradicts: its kernels sampled once more
    // (MeasuredCosts::recheck_cost_ms). Sequential plans only: a concurrent schedule's
    // prediction is the schedule's, made before.
    if (std::isnan(best->predicted_ms) &&
        prediction_contradicted(best->timing.predicted_ms, best->timing.measured_ms)) {
      const double before = best->timing.predicted_ms;
      recheck_costs(best->placement, best->timing.measured_ms);
      best->timing.predicted_ms = confirmed_prediction_ms(best->placement);
      spdlog::info(
          "the written plan's prediction {:.3f} ms was {:+.0f} % off its time side by "
          "side ({:.3f} ms): {} kernel(s) sampled again, prediction now {:.3f} ms",
          before, (before / best->timing.measured_ms - 1) * 100, best->timing.measured_ms,
          best->placement.size(), best->timing.predicted_ms);
    }
    if (!best->executor)
      best->executor =
          executor_for(best->placement, best->schedule.empty() ? nullptr : &best->schedule);
    for (Contender& c : contenders) {
      if (c.executor) c.timing.steps = c.executor->steps().size();
      result_.timings.push_back(c.timing);
    }
    for (PlanTiming& t : unrunnable) result_.timings.push_back(std::move(t));
    result_.winner = best->name;
    make_plan(*best->executor, best->timing.predicted_ms, best->timing.measured_ms);
  }

  void make_plan(const Executor& executor, double predicted, double measured) {
    Plan& plan = result_.plan;
    Placement placed;
    for (const Step& step : executor.steps()) placed.push_back(step.candidate);
    plan = plan_of_steps(graph_, executor.steps(), threads_,
                         with_devices(machine_, devices_of(placed)).fingerprint());
    plan.optimizer = options_.optimizer == Optimizer::kTwoLevel ? "two-level" : "op-level";
    if (!is_tuned(result_.winner)) plan.optimizer = "single:" + result_.winner;
    plan.predicted_ms = predicted;
    plan.measured_ms = measured;
    std::map<std::string, BackendShare> shares;
    for (size_t i = 0; i < executor.steps().size(); ++i) {
      const Candidate& c = executor.steps()[i].candidate;
      double cost = confirmed_.cost_ms(c);
      plan.groups[i].cost_ms = std::isfinite(cost) ? cost : 0;
      BackendShare& s = shares[c.backend->name()];
      s.backend = c.backend->name();
      s.nodes += c.nodes.size();
      s.cost_ms += plan.groups[i].cost_ms;
    }
    for (auto& [name, share] : shares) result_.shares.push_back(share);
  }

  const Graph& graph_;
  TuneOptions options_;
  Clock::time_point start_;
  int threads_;
  Hardware machine_;
  std::vector<Backend*> backends_;
  CostDb db_;
  MeasuredCosts costs_;
  ConfirmedCosts confirmed_{costs_};
  std::unique_ptr<CalmWait> calm_;  // from the comparison on (start_calm_wait)
  std::vector<Tensor> probe_inputs_;
  std::vector<Candidate> candidates_;
  std::vector<RunnerUp> runners_up_;  // best first
  std::map<KernelKey, std::shared_ptr<Kernel>> kernels_;
  TuneResult result_;
};

}  // namespace

TuneResult tune(const Graph& graph, const TuneOptions& options) {
  Tuner tuner(graph, options);
  return tuner.run();
}

}  // namespace collage
