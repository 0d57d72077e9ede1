// collage run MODEL.onnx [--inputs DIR] [--outputs DIR] [--threads N] [--repeat N] [--backend NAME]
//             [--strict] [--plan PLAN.json] [--verify] [--profile] [--trace FILE] [--json]
#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/chrome_trace.h"
#include "cli/commands.h"
#include "cli/step_profile.h"
#include "cli/validators.h"
#include "collage/backend.h"
#include "collage/session.h"
#include "collage/version.h"
#include "runtime/interleaved_timing.h"
#include "runtime/partitioner.h"
#include "util/compare.h"
#include "util/openmp_runtime.h"

namespace collage::cli {
namespace {

namespace fs = std::filesystem;

struct RunOptions {
  ModelOptions model;
  std::string inputs_dir, outputs_dir, backend, plan_path, trace_path;
  bool verify = false, profile = false, json = false, strict = false;
  int threads = 0, repeat = 1, warmup = 1;
  uint64_t seed = 1;
};

std::vector<Tensor> read_inputs(const Graph& graph, const std::string& dir, int64_t max_bytes) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    fs::path file = fs::path(dir) / fmt::format("input_{}.pb", i);
    if (!fs::exists(file))
      fail(ErrorKind::kIo, "missing input file {} for graph input '{}'", file.string(),
           graph.value(graph.inputs[i]).name);
    inputs.push_back(read_tensor_file(file.string(), max_bytes));
  }
  return inputs;
}

// Input shapes from the files, so models with symbolic dims run without --dim.
void bind_input_shapes(const std::string& model, const std::string& dir, LoadOptions& load) {
  std::vector<std::string> names = model_input_names(model);
  for (size_t i = 0; i < names.size(); ++i) {
    fs::path file = fs::path(dir) / fmt::format("input_{}.pb", i);
    if (fs::exists(file) && !load.input_shapes.count(names[i]))
      load.input_shapes[names[i]] = read_tensor_file(file.string(), load.max_tensor_bytes).shape();
  }
}

struct Checksum {
  double sum = 0, l1 = 0;
};

// Minor page faults of this process so far (every thread's): a fault per 4 KiB page a run
// touches for the first time, ~11 us each on the 2-core EPYC. A plan's own tensors live in an
// arena touched when the session is made, so a run that faults is a library's temporaries
// mapped afresh each time (src/cli/library_env.cc).
long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}
// From this many a run on (~1 ms here), the text output says so.
constexpr double kNotablePageFaults = 100;

Checksum checksum(const Tensor& t) {
  Checksum c;
  for (int64_t k = 0; k < t.numel(); ++k) {
    double x = t.get_as_double(k);
    c.sum += x;
    c.l1 += std::fabs(x);
  }
  return c;
}

// --verify: the same inputs through the fallback (reference) backend; any output outside the
// tolerance the tuner checks kernels with is a failure (exit status 1), since the plan or
// backend computed something wrong. A plan with a backend of reduced-precision math (TF32)
// is held to that precision's tolerance. Like the tuner's check, an output that misses it
// still matches within the model's own sensitivity (util/compare.h: a model chaotic in
// float32); the returned note then says by how much, else it is empty.
std::string verify_against_reference(const Graph& graph, const Session& session,
                                     const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor>& outputs) {
  int significand_bits = 24;
  for (const std::string& name : session.node_backends())
    if (const Backend* b = BackendRegistry::global().find(name))
      significand_bits = std::min(significand_bits, b->float32_significand_bits());
  SessionOptions options;
  options.threads = session.threads();
  Session reference(graph, options);
  std::vector<Tensor> moved;
  const SensitivityCheck check = compare_allowing_sensitivity(
      outputs, reference.run(inputs), inputs,
      [&](const std::vector<Tensor>& scaled) -> const std::vector<Tensor>& {
        return moved = reference.run(scaled);
      },
      Tolerance::backend_vs_reference(significand_bits));
  if (!check.mismatch.empty())
    fail(ErrorKind::kBackend, "--verify: the outputs differ from reference: {}", check.mismatch);
  return check.note;
}

int run(const RunOptions& o) {
  LoadOptions load = o.model.load_options();
  if (!o.inputs_dir.empty()) bind_input_shapes(o.model.path, o.inputs_dir, load);
  SessionOptions options;
  options.load = load;
  options.threads = o.threads;
  options.backend = o.backend;
  options.strict = o.strict;
  Graph loaded = load_model(o.model.path, load);
  Session session = o.plan_path.empty() ? Session(loaded, options)
                                        : Session(loaded, Plan::load(o.plan_path), options);
  const Graph& graph = session.graph();

  std::vector<Tensor> inputs = o.inputs_dir.empty()
                                   ? random_inputs(graph, o.seed)
                                   : read_inputs(graph, o.inputs_dir, load.max_tensor_bytes);
  for (int i = 0; i < o.warmup; ++i) session.run_views(inputs);
  std::vector<double> ms;
  std::vector<Tensor> outputs;
  const long faults_before = minor_page_faults();
  for (int i = 0; i < o.repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    outputs = session.run_views(inputs);
    auto stop = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  const double faults_per_run =
      static_cast<double>(minor_page_faults() - faults_before) / std::max(o.repeat, 1);
  const std::string backend =
      o.backend.empty() ? BackendRegistry::global().fallback().name() : o.backend;
  const std::string verify_note =
      o.verify ? verify_against_reference(loaded, session, inputs, outputs) : "";
  if (!o.outputs_dir.empty()) {
    fs::create_directories(o.outputs_dir);
    for (size_t i = 0; i < outputs.size(); ++i)
      write_tensor_file((fs::path(o.outputs_dir) / fmt::format("output_{}.pb", i)).string(),
                        outputs[i], graph.value(graph.outputs[i]).name);
  }
  // Before profiling runs the session again (the outputs are views into its arena).
  std::vector<Checksum> sums;
  for (const Tensor& t : outputs) sums.push_back(checksum(t));
  const double median_ms = median_of(ms);
  const double min_ms = *std::min_element(ms.begin(), ms.end());
  // How much the backend took (a run on the fallback alone shows no line).
  std::optional<BackendCoverage> coverage;
  if (o.plan_path.empty() && !o.backend.empty())
    coverage = backend_coverage(
        graph, BackendRegistry::global().get(BackendSpec::parse(o.backend).backend),
        session.node_backends());
  std::optional<StepProfile> profile;
  if (o.profile || !o.trace_path.empty()) {
    std::optional<Plan> plan;
    if (!o.plan_path.empty()) plan = Plan::load(o.plan_path);
    profile = profile_steps(session, inputs, std::max(o.repeat, 5), plan ? &*plan : nullptr);
    if (!o.trace_path.empty())
      write_chrome_trace(o.trace_path, *profile,
                         {o.model.path, o.plan_path, o.plan_path.empty() ? backend : ""});
  }

  if (o.json) {
    // The `run --json` object (docs/DESIGN.md, "CLI output for scripts"): stdout holds it alone.
    nlohmann::json outs = nlohmann::json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Checksum& c = sums[i];
      outs.push_back({{"index", i},
                      {"name", graph.value(graph.outputs[i]).name},
                      {"dtype", dtype_name(outputs[i].dtype())},
                      {"shape", outputs[i].shape()},
                      {"sum", c.sum},
                      {"l1", c.l1}});
    }
    nlohmann::json out = {
        {"format", "collage-run"},
        {"version", 1},
        {"collage_version", version()},
        {"model", o.model.path},
        {"plan", o.plan_path.empty() ? nlohmann::json() : nlohmann::json(o.plan_path)},
        {"backend", o.plan_path.empty() ? nlohmann::json(backend) : nlohmann::json()},
        {"nodes", graph.num_nodes()},
        {"opset", graph.opset},
        {"threads", session.threads()},
        {"openmp", openmp_runtime()},
        {"kernels", session.num_steps()},
        {"outputs", outs},
        {"backend_nodes",
         coverage ? nlohmann::json{{"matched", coverage->matched}, {"placed", coverage->placed}}
                  : nlohmann::json()},
        {"latency_ms",
         {{"median", median_ms}, {"min", min_ms}, {"runs", ms.size()}, {"samples", ms}}},
        {"page_faults_per_run", faults_per_run},
        {"verified", o.verify},
        {"verified_within_sensitivity",
         verify_note.empty() ? nlohmann::json() : nlohmann::json(verify_note)},
        {"outputs_dir", o.outputs_dir.empty() ? nlohmann::json() : nlohmann::json(o.outputs_dir)},
        {"profile", profile ? step_profile_json(*profile) : nlohmann::json()},
        {"trace", o.trace_path.empty() ? nlohmann::json() : nlohmann::json(o.trace_path)}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("model: {} ({} nodes, opset {}, {}, {} threads on {}, {} kernels)\n", o.model.path,
             graph.num_nodes(), graph.opset,
             o.plan_path.empty() ? "backend " + backend : "plan " + o.plan_path, session.threads(),
             openmp_runtime(), session.num_steps());
  if (coverage)
    fmt::print("placement: {} runs {} nodes; its patterns match {}\n", o.backend, coverage->placed,
               coverage->matched);
  if (o.verify && verify_note.empty()) fmt::print("verify: outputs match the reference backend\n");
  if (!verify_note.empty())
    fmt::print(
        "verify: outputs match the reference backend within the model's own sensitivity (a "
        "model chaotic in float32: random weights?): {}\n",
        verify_note);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Checksum& c = sums[i];
    fmt::print("output {} '{}': {} {} checksum sum={:.6e} l1={:.6e}\n", i,
               graph.value(graph.outputs[i]).name, dtype_name(outputs[i].dtype()),
               shape_to_string(outputs[i].shape()), c.sum, c.l1);
  }
  if (o.profile) print_step_profile(*profile);
  if (!o.trace_path.empty()) fmt::print("trace written to {}\n", o.trace_path);
  fmt::print("latency: median {:.3f} ms, min {:.3f} ms over {} runs\n", median_ms, min_ms,
             ms.size());
  if (faults_per_run >= kNotablePageFaults)
    fmt::print("page faults: {:.0f} per run (memory a kernel touches for the first time)\n",
               faults_per_run);
  return 0;
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "run a model and print its outputs and latency");
  o->model.add_to(*cmd);
  cmd->add_option("--inputs", o->inputs_dir, "folder with input_K.pb (random inputs if absent)");
  cmd->add_option("--outputs", o->outputs_dir, "folder to write output_K.pb to");
  cmd->add_option("--threads", o->threads, "thread budget (0 = every CPU this process may use)")
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "timed runs")->capture_default_str()->check(kPositive);
  cmd->add_option("--warmup", o->warmup, "untimed runs first")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--backend", o->backend,
                  "backend for every node it can take, the rest on the fallback (default: "
                  "everything on the fallback, reference)");
  cmd->add_flag("--strict", o->strict,
                "with --backend: fail when the backend's compile breaks (an error other than "
                "'unsupported') instead of running those nodes on the fallback");
  cmd->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  cmd->add_option("--plan", o->plan_path, "run the placement from `collage tune`");
  cmd->add_flag("--verify", o->verify, "compare the outputs with the reference backend's");
  cmd->add_flag("--profile", o->profile,
                "time every step too and print the slowest, in the model and measured alone");
  cmd->add_option("--trace", o->trace_path,
                  "write the profiled runs as a Chrome-trace JSON timeline (chrome://tracing, "
                  "ui.perfetto.dev)");
  cmd->add_flag("--json", o->json, "print one JSON object on stdout instead of text");
  return [o] { return run(*o); };
}

}  // namespace collage::cli
