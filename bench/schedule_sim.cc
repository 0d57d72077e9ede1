// How the concurrent schedule's gain should grow with cores, beyond what this machine can
// measure (issue 17): the tuned plan's placement is scheduled for thread budgets of 1 to 64
// from per-thread-count costs, and its predicted latency compared with the same placement
// run one step after another on every thread.
//
// Costs at 1 thread and at this machine's budget are measured (through the tuner's cost
// database: nothing known is measured again); beyond, each kernel follows Amdahl's law fitted
// to its two measured points: t(n) = t(1) * (s + (1 - s) / n), with the serial fraction s
// from t(budget). It is a model, not a measurement: memory bandwidth shared by concurrent
// lanes is not in it, so the curve is an upper bound on what concurrency buys, and the
// measured points (bench/results) are what to trust.
//
//   build/bench/schedule_sim MODEL.onnx PLAN.json --cost-db DB [--max-threads 64]
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>

#include "collage/model.h"
#include "collage/plan.h"
#include "plan/hardware.h"
#include "runtime/partitioner.h"
#include "search/cost_db.h"
#include "search/measured_costs.h"
#include "search/schedule.h"

namespace collage {
namespace {

// Measured costs at 1 thread and at `measured_threads`; Amdahl's law fitted per kernel
// beyond.
class ExtrapolatedCosts : public CostModel {
 public:
  ExtrapolatedCosts(MeasuredCosts& measured, int measured_threads)
      : measured_(measured), measured_threads_(measured_threads) {}

  double cost_ms(const Candidate& c) override {
    if (c.threads <= measured_threads_) return measured_.cost_ms(c);
    Candidate one = c, most = c;
    one.threads = 1;
    most.threads = measured_threads_;
    const double t1 = measured_.cost_ms(one), tb = measured_.cost_ms(most);
    if (!std::isfinite(t1) || !std::isfinite(tb)) return std::min(t1, tb);
    if (measured_threads_ == 1) return t1;
    // tb = t1 * (s + (1 - s) / b)  =>  s = (tb / t1 - 1 / b) / (1 - 1 / b), clamped to [0, 1].
    const double b = measured_threads_;
    const double s = std::clamp((tb / t1 - 1 / b) / (1 - 1 / b), 0.0, 1.0);
    return t1 * (s + (1 - s) / c.threads);
  }
  double step_overhead_ms() override { return measured_.step_overhead_ms(); }
  double stage_overhead_ms() override { return measured_.stage_overhead_ms(); }

 private:
  MeasuredCosts& measured_;
  const int measured_threads_;
};

int simulate(const std::string& model_path, const std::string& plan_path,
             const std::string& cost_db_path, int max_threads) {
  const Graph graph = load_model(model_path);
  const Plan plan = Plan::load(plan_path);
  const int budget = plan.threads > 0 ? plan.threads : 1;
  Placement placement = placement_from_plan(graph, plan, budget).placement;
  CostDb db(cost_db_path);
  MeasuredCosts measured(graph, db, this_machine(budget), budget, /*isolate=*/false, 60);
  ExtrapolatedCosts costs(measured, budget);
  fmt::print("{}: {} steps; costs measured at 1 and {} threads, Amdahl's law beyond\n", model_path,
             placement.size(), budget);
  fmt::print("  {:>7} {:>16} {:>16} {:>9} {:>18}\n", "threads", "sequential ms", "scheduled ms",
             "speed-up", "concurrent stages");
  for (int threads = 1; threads <= max_threads; threads *= 2) {
    for (Candidate& c : placement) c.threads = threads;
    const ScheduledPlan p = choose_schedule(graph, placement, costs, threads);
    fmt::print("  {:>7} {:>16.3f} {:>16.3f} {:>8.2f}x {:>18}{}\n", threads, p.sequential_ms,
               p.predicted_ms, p.sequential_ms / p.predicted_ms, p.concurrent_stages,
               threads <= budget ? "  (measured costs)" : "");
  }
  return 0;
}

}  // namespace
}  // namespace collage

int main(int argc, char** argv) {
  CLI::App app{"concurrent schedule gain vs thread budget, from measured + extrapolated costs"};
  std::string model, plan, cost_db;
  int max_threads = 64;
  app.add_option("model", model, "the ONNX model")->required();
  app.add_option("plan", plan, "its plan from `collage tune`")->required();
  app.add_option("--cost-db", cost_db, "the cost database the tune used")->required();
  app.add_option("--max-threads", max_threads, "largest thread budget simulated")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return collage::simulate(model, plan, cost_db, max_threads);
  } catch (const std::exception& e) {
    fmt::print(stderr, "schedule_sim: {}\n", e.what());
    return 1;
  }
}
