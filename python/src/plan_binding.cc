// collage.Plan (a placement: saved, loaded, shown, passed to InferenceSession) and
// collage.tune (measure, search, return the fastest Plan), with a progress bar on stderr.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "bindings.h"
#include "cli/progress_bar.h"
#include "collage/model.h"
#include "collage/placement_view.h"
#include "collage/tune.h"
#include "library_state.h"
#include "plan_handle.h"
#include "search/isolated_measurer.h"

namespace collage::python {
namespace {

using namespace pybind11::literals;

PlanHandle handle_of(Plan plan) {
  PlanHandle h;
  h.plan = std::move(plan);
  return h;
}

std::string fspath(const py::handle& path) {
  return py::str(py::module_::import("os").attr("fspath")(path));
}

// 0 (not known) and non-finite latencies read as None.
py::object ms_or_none(double ms) {
  return std::isfinite(ms) && ms > 0 ? py::object(py::float_(ms)) : py::object(py::none());
}

py::dict placement(const Plan& plan) {
  // In order of first use; per backend: nodes, groups and the sum of their measured costs.
  py::dict out;
  for (const PlanGroup& g : plan.groups) {
    py::str key(g.backend);
    if (!out.contains(key)) out[key] = py::dict("nodes"_a = 0, "groups"_a = 0, "cost_ms"_a = 0.0);
    py::dict entry = out[key];
    entry["nodes"] = entry["nodes"].cast<size_t>() + g.nodes.size();
    entry["groups"] = entry["groups"].cast<size_t>() + 1;
    entry["cost_ms"] = entry["cost_ms"].cast<double>() + g.cost_ms;
  }
  return out;
}

std::string plan_repr(const PlanHandle& h) {
  std::string shares;
  std::map<std::string, size_t> nodes;
  std::vector<std::string> order;
  for (const PlanGroup& g : h.plan.groups) {
    if (!nodes.count(g.backend)) order.push_back(g.backend);
    nodes[g.backend] += g.nodes.size();
  }
  for (const std::string& b : order)
    shares += fmt::format("{}{}: {} nodes", shares.empty() ? "" : ", ", b, nodes[b]);
  auto ms = [](double v) { return v > 0 && std::isfinite(v) ? fmt::format("{:.3f}", v) : "None"; };
  return fmt::format(
      "<collage.Plan {} groups ({}), optimizer '{}', predicted_ms {}, measured_ms {}>",
      h.plan.groups.size(), shares, h.plan.optimizer, ms(h.plan.predicted_ms),
      ms(h.plan.measured_ms));
}

// Plan.show(): the placement per backend and per group on stdout (Python's), and the
// Graphviz drawing when asked; the same text and picture as `collage show`.
void show(const PlanHandle& h, const py::object& model, const py::object& svg,
          const py::object& dot, const std::optional<std::map<std::string, int64_t>>& dims) {
  std::optional<std::string> model_path =
      model.is_none() ? h.model : std::optional<std::string>(fspath(model));
  if (!model_path)
    fail(ErrorKind::kInvalidArgument,
         "Plan.show needs the model to draw the placement on: pass model=PATH (a plan loaded "
         "from a file does not know its model)");
  LoadOptions load;
  load.dims = dims ? *dims : h.dims;
  std::string svg_path = svg.is_none() ? "" : fspath(svg);
  std::string dot_path = dot.is_none() ? "" : fspath(dot);
  std::string text, dot_text;
  {
    py::gil_scoped_release release;
    Graph graph = load_model(*model_path, load);
    if (!plan_is_for(h.plan, graph))
      fail(ErrorKind::kInvalidArgument,
           "this plan was made for another model (plan model hash {}, {} has {})",
           h.plan.model_hash, *model_path, model_hash(graph));
    text = fmt::format("plan ({}), predicted {:.3f} ms, measured {:.3f} ms, tuned on {}\n",
                       h.plan.optimizer, h.plan.predicted_ms, h.plan.measured_ms, h.plan.hardware);
    text += placement_table(graph, h.plan);
    dot_text = placement_to_dot(graph, h.plan);
    if (!dot_path.empty()) {
      std::ofstream out(dot_path);
      out << dot_text;
      if (!out) fail(ErrorKind::kIo, "cannot write {}", dot_path);
      text += fmt::format("graphviz written to {}\n", dot_path);
    }
    if (!svg_path.empty()) {
      render_graphviz(dot_text, svg_path, "svg");
      text += fmt::format("svg written to {}\n", svg_path);
    }
  }
  py::print(text, "end"_a = "");
}

Optimizer optimizer_from(const std::string& name) {
  if (name == "op-level") return Optimizer::kOpLevel;
  if (name == "two-level") return Optimizer::kTwoLevel;
  fail(ErrorKind::kInvalidArgument, "optimizer must be 'op-level' or 'two-level', got '{}'", name);
}

PlanHandle tune(const py::object& path, const py::object& output, const py::object& backends,
                double budget, const py::object& cost_db, int threads, const py::object& progress,
                const std::optional<std::map<std::string, int64_t>>& dims,
                const std::string& optimizer, bool isolate, bool distributed, double calm_wait) {
  PlanHandle handle;
  std::string model_path = fspath(path);
  handle.model = std::filesystem::absolute(model_path).string();
  if (dims) handle.dims = *dims;
  TuneOptions options;
  options.optimizer = optimizer_from(optimizer);
  if (budget < 0) fail(ErrorKind::kInvalidArgument, "budget must be >= 0 seconds, got {}", budget);
  options.budget_s = budget;
  options.threads = threads;
  options.isolate = isolate;
  options.distributed = distributed;
  if (!(calm_wait >= 0))
    fail(ErrorKind::kInvalidArgument, "calm_wait must be >= 0 seconds, got {}", calm_wait);
  options.calm_wait_s = calm_wait;
  // A path (str or os.PathLike) or a postgresql:// URL (os.fspath passes a str through).
  if (!cost_db.is_none()) options.cost_db_path = fspath(cost_db);
  if (py::isinstance<py::str>(backends)) {
    // "onednn,xnnpack" as on the command line.
    std::string list = backends.cast<std::string>();
    for (size_t start = 0; start <= list.size();) {
      size_t comma = std::min(list.find(',', start), list.size());
      if (comma > start) options.backends.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  } else if (!backends.is_none()) {
    options.backends = backends.cast<std::vector<std::string>>();
  }
  std::string output_path = output.is_none() ? "" : fspath(output);

  // Progress: the CLI's bar through Python's sys.stderr (a bar on a terminal, plain lines
  // otherwise), or the caller's function, or nothing. Either way the callback is where a
  // Ctrl-C is noticed: it raises KeyboardInterrupt out of the tune.
  py::object stderr_stream = py::module_::import("sys").attr("stderr");
  std::unique_ptr<cli::ProgressBar> bar;
  py::object callback;
  if (PyCallable_Check(progress.ptr())) {
    callback = progress;
  } else if (py::bool_(progress) && !stderr_stream.is_none()) {
    bool tty = false;
    try {
      tty = py::bool_(stderr_stream.attr("isatty")());
    } catch (const py::error_already_set&) {
    }
    py::handle stream = stderr_stream;  // kept alive by stderr_stream, used under the GIL
    bar = std::make_unique<cli::ProgressBar>(tty, [stream](const std::string& text) {
      stream.attr("write")(text);
      stream.attr("flush")();
    });
  }
  options.progress = [&](const TuneProgress& p) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (bar) bar->update(p);
    if (callback) callback(p);
  };

  std::optional<TuneResult> result;
  try {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(compile_mutex());
    configure_measure_worker();
    LoadOptions load;
    load.dims = handle.dims;
    Graph graph = load_model(model_path, load);
    result = collage::tune(graph, options);
    if (!output_path.empty()) result->plan.save(output_path);
  } catch (...) {
    if (bar) bar->finish();
    throw;
  }
  if (bar) bar->finish();
  handle.plan = result->plan;
  handle.tuning = std::make_shared<TuneResult>(std::move(*result));
  return handle;
}

}  // namespace

void bind_plan(py::module_& m) {
  py::class_<PlanGroup>(m, "PlanGroup", "Nodes that run together as one kernel on one backend.")
      .def_readonly("nodes", &PlanGroup::nodes, "node names, in execution order")
      .def_readonly("backend", &PlanGroup::backend)
      .def_readonly("variant", &PlanGroup::variant,
                    "the backend's way of building it (\"\" = its default)")
      .def_readonly("threads", &PlanGroup::threads, "threads the kernel runs with")
      .def_readonly("stage", &PlanGroup::stage,
                    "groups of one stage with different lanes run at the same time")
      .def_readonly("lane", &PlanGroup::lane)
      .def_property_readonly(
          "cost_ms", [](const PlanGroup& g) { return ms_or_none(g.cost_ms); },
          "its latency measured alone (None when unknown)")
      .def("__repr__", [](const PlanGroup& g) {
        return fmt::format("<collage.PlanGroup {} on {}, {} nodes, {:.3f} ms>",
                           g.nodes.empty() ? "-" : g.nodes.front(), g.backend, g.nodes.size(),
                           g.cost_ms);
      });

  py::class_<PlanTiming>(m, "PlanTiming",
                         "One plan timed end to end by tune: the tuned one or a single backend's.")
      .def_readonly("name", &PlanTiming::name, "'tuned' or a backend's name")
      .def_property_readonly("predicted_ms",
                             [](const PlanTiming& t) { return ms_or_none(t.predicted_ms); })
      .def_property_readonly(
          "measured_ms",
          [](const PlanTiming& t) { return t.timed ? ms_or_none(t.measured_ms) : py::none(); },
          "None when it was not timed (not_timed_reason says why)")
      .def_readonly("steps", &PlanTiming::steps)
      .def_readonly("timed", &PlanTiming::timed)
      .def_property_readonly(
          "not_timed_reason",
          [](const PlanTiming& t) -> py::object {
            return t.timed ? py::none() : py::cast(t.not_timed_reason);
          },
          "None when it was timed; else why not (its prediction, or a kernel that failed)")
      .def_readonly("from_cost_db", &PlanTiming::from_cost_db)
      .def_readonly("rounds", &PlanTiming::rounds,
                    "interleaved rounds its median is of (0 when from the cost DB; fewer than "
                    "the others' when it fell far behind the fastest)")
      .def("__repr__", [](const PlanTiming& t) {
        return fmt::format("<collage.PlanTiming {}: predicted {:.3f} ms, measured {}>", t.name,
                           t.predicted_ms,
                           t.timed ? fmt::format("{:.3f} ms", t.measured_ms) : "not timed");
      });

  py::class_<SlowWindowWait>(m, "SlowWindowWait",
                             "A phase of tune that found the machine slow, and what it waited.")
      .def_readonly("phase", &SlowWindowWait::phase, "'confirming', 'rechecking' or 'comparing'")
      .def_readonly("slowdown", &SlowWindowWait::slowdown,
                    "the chosen plan's time over its calm time when the phase came")
      .def_readonly("waited_s", &SlowWindowWait::waited_s)
      .def_readonly("slowdown_after", &SlowWindowWait::slowdown_after)
      .def_readonly("calm_after", &SlowWindowWait::calm_after,
                    "False: the wait's bound ran out with the machine still slow")
      .def("__repr__", [](const SlowWindowWait& w) {
        return fmt::format("<collage.SlowWindowWait before {}: {:.2f}x, waited {:.1f} s>", w.phase,
                           w.slowdown, w.waited_s);
      });

  py::class_<TuneResult, std::shared_ptr<TuneResult>>(m, "TuneReport",
                                                      "What collage.tune measured and decided.")
      .def_readonly("winner", &TuneResult::winner,
                    "'tuned', a runner-up 'tuned#N', or the single-backend plan that won "
                    "('onednn-graph', or 'onednn-graph/blocked': every region in one variant)")
      .def_readonly("timings", &TuneResult::timings,
                    "tuned (and runners-up) first, then each single-backend plan, a graph-level "
                    "backend's also in each of its region variants")
      .def_readonly("candidates", &TuneResult::candidates)
      .def_readonly("measured", &TuneResult::measured)
      .def_readonly("measured_elsewhere", &TuneResult::measured_elsewhere,
                    "measured by other processes (another tuner, measure-workers) meanwhile")
      .def_readonly("cache_hits", &TuneResult::cache_hits)
      .def_readonly("failed", &TuneResult::failed)
      .def_readonly("failures", &TuneResult::failures, "one line per failed candidate")
      .def_readonly("generations", &TuneResult::generations)
      .def_readonly("genomes_evaluated", &TuneResult::genomes_evaluated)
      .def_readonly("graph_search_s", &TuneResult::graph_search_s,
                    "the graph-level search's wall time (bounded by the budget)")
      .def_readonly("plans_timed", &TuneResult::plans_timed)
      .def_readonly("step_overhead_ms", &TuneResult::step_overhead_ms)
      .def_readonly("slow_windows", &TuneResult::slow_windows,
                    "the phases that waited for a slow window to pass (empty when calm)")
      .def_readonly("cost_db", &TuneResult::cost_db_path)
      .def_readonly("seconds", &TuneResult::seconds);

  py::class_<TuneProgress>(m, "TuneProgress", "Passed to a progress function given to tune().")
      .def_readonly("phase", &TuneProgress::phase)
      .def_readonly("done", &TuneProgress::done)
      .def_readonly("total", &TuneProgress::total, "0 when unknown")
      .def_readonly("cache_hits", &TuneProgress::cache_hits)
      .def_readonly("failed", &TuneProgress::failed)
      .def_readonly("elapsed_s", &TuneProgress::elapsed_s)
      .def_property_readonly("eta_s",
                             [](const TuneProgress& p) {
                               return p.eta_s < 0 ? py::object(py::none())
                                                  : py::object(py::float_(p.eta_s));
                             })
      .def_readonly("detail", &TuneProgress::detail);

  py::class_<PlanHandle>(m, "Plan", R"doc(
A placement: which nodes run together on which backend (from collage.tune, Plan.load, or
InferenceSession.plan). Pass it, or the path it was saved to, to InferenceSession(plan=...).)doc")
      .def_static(
          "load", [](const py::object& path) { return handle_of(Plan::load(fspath(path))); },
          py::arg("path"), "Reads a plan JSON file (as written by save or `collage tune`).")
      .def_static(
          "from_json", [](const std::string& text) { return handle_of(Plan::from_json(text)); },
          py::arg("text"))
      .def(
          "save", [](const PlanHandle& h, const py::object& path) { h.plan.save(fspath(path)); },
          py::arg("path"))
      .def("to_json", [](const PlanHandle& h) { return h.plan.to_json(); })
      .def_property_readonly("groups", [](const PlanHandle& h) { return h.plan.groups; })
      .def_property_readonly(
          "placement", [](const PlanHandle& h) { return placement(h.plan); },
          "{backend: {'nodes': N, 'groups': G, 'cost_ms': sum of measured costs}}, in order of "
          "first use")
      .def_property_readonly(
          "predicted_ms", [](const PlanHandle& h) { return ms_or_none(h.plan.predicted_ms); },
          "sum of the groups' costs and step overheads (None when not tuned)")
      .def_property_readonly(
          "measured_ms", [](const PlanHandle& h) { return ms_or_none(h.plan.measured_ms); },
          "end-to-end latency measured by tune (None when not measured)")
      .def_property_readonly("optimizer", [](const PlanHandle& h) { return h.plan.optimizer; })
      .def_property_readonly("hardware", [](const PlanHandle& h) { return h.plan.hardware; })
      .def_property_readonly("threads", [](const PlanHandle& h) { return h.plan.threads; })
      .def_property_readonly("backend_versions",
                             [](const PlanHandle& h) { return h.plan.backend_versions; })
      .def_property_readonly("model_hash", [](const PlanHandle& h) { return h.plan.model_hash; })
      .def_readwrite("model", &PlanHandle::model,
                     "path of the model it is for, when known (show() draws on it)")
      .def_readonly("tuning", &PlanHandle::tuning, "the TuneReport, for a plan from tune()")
      .def("show", &show, py::arg("model") = py::none(), py::arg("svg") = py::none(),
           py::arg("dot") = py::none(), py::arg("dims") = py::none(), R"doc(
Prints the placement (per group: backend, cost, ops) like `collage show`; svg=PATH draws it
with graphviz, dot=PATH writes the Graphviz source. model: the ONNX file (default: the one
the plan was tuned from).)doc")
      .def("__repr__", &plan_repr);

  m.def("tune", &tune, py::arg("path"), py::arg("output") = py::none(),
        py::arg("backends") = py::none(), py::arg("budget") = 60.0, py::arg("cost_db") = py::none(),
        py::arg("threads") = 0, py::arg("progress") = true, py::kw_only(),
        py::arg("dims") = py::none(), py::arg("optimizer") = "two-level", py::arg("isolate") = true,
        py::arg("distributed") = false, py::arg("calm_wait") = 20.0,
        R"doc(
Finds the fastest placement of the model at `path` on this machine and returns it (a Plan).

output:   also save the plan there (JSON, for InferenceSession(plan=...) or `collage run`).
backends: list of backend names (or "a,b,c"); default every available backend.
budget:   seconds for the graph-level search.
cost_db:  cost database: a SQLite file (default ~/.cache/collage/costs.db) or a
          postgresql://user@host/dbname URL; measurements are reused by later tunes of any
          model sharing layers.
threads:  thread budget (0 = every CPU this process may use).
progress: True: a bar on stderr when it is a terminal, a line every few seconds otherwise;
          False: quiet; a function: called with a TuneProgress instead.
dims:     values of symbolic input dimensions. optimizer: "two-level" or "op-level".
isolate:  measure candidates in a `collage measure-worker` process, so one that crashes
          fails alone (needs the collage CLI beside the module).
distributed: publish the candidates as jobs in the cost database for `collage
          measure-worker --cost-db URL` processes to measure (the CLI's tune --distributed).
calm_wait: the most seconds to wait, in all, for the machine to leave a slow window (the
          chosen plan running over 1.25x its calm time) before the timings the tune keeps;
          0: never (the CLI's --calm-wait). tuning.slow_windows says what was waited.
The GIL is released while it runs; Ctrl-C raises KeyboardInterrupt.)doc");
}

}  // namespace collage::python
