#include "collage/session.h"

#include <random>

#include <spdlog/spdlog.h>

#include "collage/backend.h"
#include "plan/hardware.h"
#include "runtime/executor.h"
#include "runtime/partitioner.h"
#include "runtime/threads.h"

namespace collage {
namespace {

std::vector<Step> compile_steps(const Graph& graph, const SessionOptions& options, int threads) {
  BackendRegistry& registry = BackendRegistry::global();
  // "NAME/VARIANT": the backend built as that variant wherever it offers it.
  const auto [name, variant] = BackendSpec::parse(options.backend);
  Backend& backend = name.empty() ? registry.fallback() : registry.get(name);
  if (!backend.available())
    fail(ErrorKind::kInvalidArgument, "backend '{}' cannot run on this machine: {}", backend.name(),
         backend.unavailable_reason());
  std::vector<std::string> refused;
  std::vector<std::shared_ptr<Kernel>> kernels;
  Placement placement =
      place_on_single_backend(graph, backend, threads, &refused, &kernels, options.strict, variant);
  for (const auto& line : refused) spdlog::debug("{}", line);
  // The kernels compiled while placing are the ones the steps run.
  const Placement placed = placement;
  KernelSource source = [&](const Graph& g, const Candidate& c) -> std::shared_ptr<Kernel> {
    for (size_t i = 0; i < placed.size(); ++i)
      if (placed[i] == c) return kernels[i];
    return compile_candidate(g, c);
  };
  return build_steps(graph, complete_placement(graph, std::move(placement), threads), nullptr,
                     source);
}

}  // namespace

Session::Session(Graph graph, const SessionOptions& options)
    : threads_(resolve_threads(options.threads)),
      graph_(std::make_unique<Graph>(std::move(graph))) {
  executor_ = std::make_unique<Executor>(*graph_, compile_steps(*graph_, options, threads_));
}

Session::Session(Graph graph, const Plan& plan, const SessionOptions& options)
    : threads_(resolve_threads(options.threads > 0 ? options.threads : plan.threads)),
      graph_(std::make_unique<Graph>(std::move(graph))) {
  if (!plan_is_for(plan, *graph_))
    fail(ErrorKind::kInvalidArgument,
         "this plan was made for another model (plan model hash {}, this model {}); re-run "
         "`collage tune`",
         plan.model_hash, model_hash(*graph_));
  for (const auto& [name, version] : plan.backend_versions) {
    Backend* b = BackendRegistry::global().find(name);
    if (b && b->version() != version)
      spdlog::warn("backend {} is version {} here, the plan was tuned with {}", name, b->version(),
                   version);
  }
  ScheduledPlacement scheduled = placement_from_plan(*graph_, plan, threads_);
  std::string here =
      with_devices(this_machine(threads_), devices_of(scheduled.placement)).fingerprint();
  if (!plan.hardware.empty() && plan.hardware != here)
    spdlog::warn(
        "this plan was tuned on another machine, thread count or OpenMP runtime ({}); this is {}",
        plan.hardware, here);
  executor_ = std::make_unique<Executor>(
      *graph_, build_steps(*graph_, scheduled.placement, &scheduled.schedule));
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session Session::from_file(const std::string& path, const SessionOptions& options) {
  return Session(load_model(path, options.load), options);
}

std::vector<Tensor> Session::run_views(const std::vector<Tensor>& inputs) {
  return executor_->run(inputs);
}

std::vector<Tensor> Session::run_profiled(const std::vector<Tensor>& inputs,
                                          std::vector<StepTiming>& timings) {
  return executor_->run_profiled(inputs, timings);
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs = executor_->run(inputs);
  for (Tensor& t : outputs) t = t.clone();
  return outputs;
}

size_t Session::arena_bytes() const {
  return executor_->arena_bytes();
}
size_t Session::num_steps() const {
  return executor_->steps().size();
}

std::vector<std::string> Session::node_backends() const {
  std::vector<std::string> result(graph_->num_nodes());
  for (const Step& step : executor_->steps())
    for (NodeId n : step.candidate.nodes) result[n] = step.backend_name();
  return result;
}

Plan Session::plan() const {
  Placement placed;
  for (const Step& step : executor_->steps()) placed.push_back(step.candidate);
  return plan_of_steps(*graph_, executor_->steps(), threads_,
                       with_devices(this_machine(threads_), devices_of(placed)).fingerprint());
}

std::vector<Tensor> random_inputs(const Graph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (ValueId id : graph.inputs) {
    const Value& v = graph.value(id);
    Tensor t(v.dtype, v.shape);
    dispatch_dtype(v.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* d = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_floating_point_v<T>) {
          d[i] = static_cast<T>(std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
        } else if constexpr (std::is_same_v<T, bool>) {
          d[i] = (rng() & 1) != 0;
        } else {
          // Small non-negative integers: valid as indices into any non-trivial table.
          d[i] = static_cast<T>(rng() % 2);
        }
      }
    });
    inputs.push_back(std::move(t));
  }
  return inputs;
}

}  // namespace collage
